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
