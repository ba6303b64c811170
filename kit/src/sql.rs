//! SQL connections (sea-orm over SQLite, PostgreSQL or MySQL) and migrations.

use std::{path::Path, time::Duration};

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};
use sea_orm_migration::MigratorTrait;

use crate::config::SqlConfig;

/// Connects to the configured database; for SQLite, creates the file's folder and turns on
/// WAL with a busy timeout so the embedded default tolerates concurrent writers.
pub async fn connect(config: &SqlConfig) -> anyhow::Result<DatabaseConnection> {
    let url = config.url.expose();
    if let Some(path) = sqlite_path(url)
        && let Some(dir) = Path::new(path).parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("creating {} for SQLite: {e}", dir.display()))?;
    }
    let mut options = ConnectOptions::new(url);
    options
        .max_connections(config.max_connections)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| {
            use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
            o.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
        });
    Database::connect(options)
        .await
        .map_err(|e| anyhow::anyhow!("connecting to the database: {e}"))
}

/// Connects and brings the schema up to date with `M`'s migrations.
pub async fn connect_and_migrate<M: MigratorTrait>(
    config: &SqlConfig,
) -> anyhow::Result<DatabaseConnection> {
    let db = connect(config).await?;
    M::up(&db, None)
        .await
        .map_err(|e| anyhow::anyhow!("running migrations: {e}"))?;
    Ok(db)
}

/// A readiness probe for [`crate::grpc::Server::readiness`]: ready while `db` answers.
pub fn readiness(db: &DatabaseConnection) -> crate::grpc::Readiness {
    let db = db.clone();
    std::sync::Arc::new(move || {
        let db = db.clone();
        Box::pin(async move { ping(&db).await })
    })
}

/// True while the database answers a trivial query.
pub async fn ping(db: &DatabaseConnection) -> bool {
    db.execute_unprepared("SELECT 1").await.is_ok()
}

fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (path != ":memory:" && !path.is_empty()).then_some(path)
}

/// `INSERT rows … ON CONFLICT (key) DO UPDATE SET c = greatest(c, new c)` for each of
/// `max_columns`: the monotonic upsert behind every "never moves back" value (ceilings,
/// watermarks, cursors), written for whichever backend `backend` is.
pub fn upsert_max(
    backend: sea_orm::DatabaseBackend,
    table: &str,
    columns: &[&str],
    key: &[&str],
    max_columns: &[&str],
    rows: Vec<Vec<sea_orm::Value>>,
) -> sea_orm::Statement {
    use sea_orm::DatabaseBackend::{MySql, Postgres};
    let mut values = Vec::with_capacity(rows.len() * columns.len());
    let mut tuples = Vec::with_capacity(rows.len());
    for row in rows {
        debug_assert_eq!(row.len(), columns.len());
        let marks: Vec<String> = (0..row.len())
            .map(|i| match backend {
                Postgres => format!("${}", values.len() + i + 1),
                _ => "?".to_owned(),
            })
            .collect();
        tuples.push(format!("({})", marks.join(", ")));
        values.extend(row);
    }
    let greatest = |col: &str| match backend {
        MySql => format!("{col} = GREATEST({col}, VALUES({col}))"),
        Postgres => format!("{col} = GREATEST({table}.{col}, excluded.{col})"),
        _ => format!("{col} = max({table}.{col}, excluded.{col})"),
    };
    let updates: Vec<String> = max_columns.iter().map(|c| greatest(c)).collect();
    let conflict = match backend {
        MySql => "ON DUPLICATE KEY UPDATE".to_owned(),
        _ => format!("ON CONFLICT ({}) DO UPDATE SET", key.join(", ")),
    };
    let sql = format!(
        "INSERT INTO {table} ({}) VALUES {} {conflict} {}",
        columns.join(", "),
        tuples.join(", "),
        updates.join(", ")
    );
    sea_orm::Statement::from_sql_and_values(backend, sql, values)
}
