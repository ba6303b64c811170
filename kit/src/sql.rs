//! SQL connections (sea-orm over SQLite, PostgreSQL or MySQL) and migrations.

use std::{path::Path, time::Duration};

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbErr};
use sea_orm_migration::MigratorTrait;

use crate::config::SqlConfig;

mod checkpoints;
mod scripts;
mod unnest;
mod with;

pub use scripts::{commit, execute_all};
pub use unnest::Unnest;
pub use with::With;

/// How long a serving SQLite connection waits for another's lock before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the configured database; for SQLite, creates the file's folder, turns on
/// WAL with a busy timeout so the embedded default tolerates concurrent writers, and
/// (unless `checkpoint_ms` is 0) starts its WAL checkpoints (`checkpoints.rs`).
pub async fn connect(config: &SqlConfig) -> anyhow::Result<DatabaseConnection> {
    let url = config.url.expose();
    let file = sqlite_path(url);
    if let Some(path) = file
        && let Some(dir) = Path::new(path).parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("creating {} for SQLite: {e}", dir.display()))?;
    }
    let checkpoint_every = checkpoints::every(config.checkpoint_ms)?.filter(|_| file.is_some());
    let autocheckpoint = if checkpoint_every.is_some() {
        "0"
    } else {
        "1000"
    };
    let mut options = options(url, config.max_connections);
    options.map_sqlx_sqlite_opts(move |o| {
        use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
        // A 64 MiB page cache (SQLite's default is 2 MiB): the hot index pages of
        // messages, inboxes and read states stay in memory instead of being read back
        // from the file on every batch.
        o.journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .pragma("cache_size", "-65536")
            .pragma("temp_store", "memory")
            .pragma("wal_autocheckpoint", autocheckpoint)
    });
    let db = Database::connect(options)
        .await
        .map_err(|e| anyhow::anyhow!("connecting to the database: {e}"))?;
    if let Some(every) = checkpoint_every {
        let pool = db.get_sqlite_connection_pool().clone();
        checkpoints::spawn(url, pool, every, checkpoints::RESTART_FRAMES)?;
    }
    Ok(db)
}

/// The connections for reads that need not wait behind `db`'s writes. On a SQLite file
/// with `read_connections` set, a read-only pool of its own: WAL lets its connections
/// read the last commit while `db`'s writer commits the next, where one shared
/// connection would queue every lookup behind the group commit. Elsewhere, `db` itself
/// (a server's pool already reads beside its writers).
pub async fn readers(
    config: &SqlConfig,
    db: &DatabaseConnection,
) -> anyhow::Result<DatabaseConnection> {
    let url = config.url.expose();
    if sqlite_path(url).is_none() || config.read_connections == 0 {
        return Ok(db.clone());
    }
    let mut options = options(url, config.read_connections);
    // The writer set up WAL; a reader only looks. SQLite's default page cache: a reader
    // drops its cache whenever another connection committed since its last read, so under
    // writes its pages come from the kernel's page cache whatever its size.
    options.map_sqlx_sqlite_opts(|o| o.read_only(true).busy_timeout(BUSY_TIMEOUT));
    Database::connect(options)
        .await
        .map_err(|e| anyhow::anyhow!("connecting the database's readers: {e}"))
}

/// What every pool of `url` shares: timeouts and statement logging.
fn options(url: &str, connections: u32) -> ConnectOptions {
    let mut options = ConnectOptions::new(url);
    if url.starts_with("sqlite:") {
        // A SQLite connection is a file handle: it cannot be dropped by a server, and a
        // ping before every checkout is one more round trip to its worker thread.
        options.test_before_acquire(false);
    }
    options
        .max_connections(connections)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        // Every statement with its time at debug (`RUST_LOG=sqlx::query=debug`); any over
        // a second as a warning.
        .sqlx_logging(true)
        .sqlx_logging_level(log::LevelFilter::Debug)
        .sqlx_slow_statements_logging_settings(log::LevelFilter::Warn, Duration::from_secs(1));
    options
}

/// Connects and brings the schema up to date with `M`'s migrations. The migrations run on
/// a connection of their own, closed before the serving pool opens: SQLite connections
/// that saw the schema before an `ALTER TABLE` can keep reporting the old columns (sqlx
/// issue 2517), and no serving connection should ever have seen it.
pub async fn connect_and_migrate<M: MigratorTrait>(
    config: &SqlConfig,
) -> anyhow::Result<DatabaseConnection> {
    let single = SqlConfig {
        max_connections: 1,
        ..config.clone()
    };
    let migrating = connect(&single).await?;
    let mut attempt = 1;
    while let Err(e) = M::up(&migrating, None).await {
        // Replicas starting together race to apply the same migration; the loser finds
        // it applied when it looks again.
        anyhow::ensure!(attempt < MIGRATION_ATTEMPTS, "running migrations: {e}");
        tracing::warn!(error = %e, attempt, "migrations failed; looking again");
        tokio::time::sleep(Duration::from_millis(rand::random_range(100..500))).await;
        attempt += 1;
    }
    migrating.close().await?;
    connect(config).await
}

/// How often a process tries to bring its schema up to date before giving up.
const MIGRATION_ATTEMPTS: u32 = 3;

/// Adds `columns` to `table` in a migration, one statement each: SQLite alters one thing
/// at a time.
pub async fn add_columns(
    manager: &sea_orm_migration::SchemaManager<'_>,
    table: impl sea_orm_migration::prelude::IntoIden,
    columns: impl IntoIterator<Item = sea_orm_migration::prelude::ColumnDef>,
) -> Result<(), sea_orm::DbErr> {
    use sea_orm_migration::prelude::Table;
    let table = table.into_iden();
    for mut column in columns {
        manager
            .alter_table(
                Table::alter()
                    .table(table.clone())
                    .add_column(&mut column)
                    .to_owned(),
            )
            .await?;
    }
    Ok(())
}

/// Closes `db`: the last of a service's stop steps ([`crate::grpc::Server::then_stop`]).
pub async fn close(db: DatabaseConnection) -> anyhow::Result<()> {
    Ok(db.close().await?)
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

/// Whether `err` chose this transaction as a deadlock's victim or failed it to keep
/// transactions serializable (SQLSTATE 40001 / 40P01): it stored nothing and may be run
/// again as it was.
pub fn is_deadlock(err: &DbErr) -> bool {
    let (DbErr::Exec(sea_orm::RuntimeErr::SqlxError(err))
    | DbErr::Query(sea_orm::RuntimeErr::SqlxError(err))) = err
    else {
        return false;
    };
    err.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
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
    let merges: Vec<Merge<'_>> = max_columns.iter().map(|c| Merge::Greatest(c)).collect();
    upsert(backend, table, columns, key, &merges, rows)
}

/// What an upsert does to a column of a row that already exists.
#[derive(Debug, Clone, Copy)]
pub enum Merge<'a> {
    /// Keeps the greater of the stored and the new value.
    Greatest(&'a str),
    /// Takes the new value when the new `by` is greater than the stored `by` (e.g. the last
    /// message of a conversation, by seq). `by` itself must be merged with `Greatest`.
    NewerBy { column: &'a str, by: &'a str },
    /// Adds the new value to the stored one (a counter advanced by the row's value).
    Add(&'a str),
}

/// `INSERT rows` into `table`'s `columns`, for whichever backend `backend` is; a taken key
/// fails it. On PostgreSQL rows of plain values go as arrays ([`Unnest`]): one statement
/// for every number of rows. `rows` must not be empty.
pub fn insert(
    backend: sea_orm::DatabaseBackend,
    table: &str,
    columns: &[&str],
    rows: Vec<Vec<sea_orm::Value>>,
) -> sea_orm::Statement {
    use sea_orm::sea_query::{Alias, Expr, Query};
    let rows = match backend {
        sea_orm::DatabaseBackend::Postgres => match Unnest::of_rows(columns, rows) {
            Ok(arrays) => return arrays.insert(table, ""),
            Err(rows) => rows,
        },
        _ => rows,
    };
    let mut insert = Query::insert();
    insert
        .into_table(Alias::new(table))
        .columns(columns.iter().map(|c| Alias::new(*c)));
    for row in rows {
        insert.values_panic(row.into_iter().map(Expr::from));
    }
    backend.build(&insert)
}

/// `INSERT rows … ON CONFLICT (key)` merging the columns `merges` names, or doing nothing
/// when `merges` is empty (insert-if-absent), for whichever backend `backend` is. The rows
/// must not repeat a key (PostgreSQL refuses to touch a row twice in one statement). On
/// PostgreSQL rows of plain non-NULL values go as arrays ([`Unnest`]): one statement for
/// every number of rows.
pub fn upsert(
    backend: sea_orm::DatabaseBackend,
    table: &str,
    columns: &[&str],
    key: &[&str],
    merges: &[Merge<'_>],
    rows: Vec<Vec<sea_orm::Value>>,
) -> sea_orm::Statement {
    if backend != sea_orm::DatabaseBackend::Postgres {
        return backend.build(&upsert_query(backend, table, columns, key, merges, rows));
    }
    match Unnest::of_rows(columns, rows) {
        Ok(arrays) => arrays.insert(table, &postgres_on_conflict(table, key, merges)),
        Err(rows) => backend.build(&upsert_query(backend, table, columns, key, merges, rows)),
    }
}

/// [`upsert_query`]'s `ON CONFLICT` clause, written out for PostgreSQL.
fn postgres_on_conflict(table: &str, key: &[&str], merges: &[Merge<'_>]) -> String {
    let key = key.join(", ");
    if merges.is_empty() {
        return format!("ON CONFLICT ({key}) DO NOTHING");
    }
    let sets: Vec<String> = (merges.iter())
        .map(|merge| match *merge {
            Merge::Greatest(col) => format!("{col} = GREATEST({table}.{col}, excluded.{col})"),
            Merge::Add(col) => format!("{col} = {table}.{col} + excluded.{col}"),
            Merge::NewerBy { column, by } => format!(
                "{column} = CASE WHEN excluded.{by} > {table}.{by} THEN excluded.{column} \
                 ELSE {table}.{column} END"
            ),
        })
        .collect();
    format!("ON CONFLICT ({key}) DO UPDATE SET {}", sets.join(", "))
}

/// [`upsert`] as a sea-query statement: a `VALUES` list, on every backend.
fn upsert_query(
    backend: sea_orm::DatabaseBackend,
    table: &str,
    columns: &[&str],
    key: &[&str],
    merges: &[Merge<'_>],
    rows: Vec<Vec<sea_orm::Value>>,
) -> sea_orm::sea_query::InsertStatement {
    use sea_orm::sea_query::{Alias, Expr, ExprTrait as _, Func, OnConflict, Query};
    let mut insert = Query::insert();
    insert
        .into_table(Alias::new(table))
        .columns(columns.iter().map(|c| Alias::new(*c)));
    for row in rows {
        debug_assert_eq!(row.len(), columns.len());
        insert.values_panic(row.into_iter().map(Expr::from));
    }
    // The stored and the new value of a column. MySQL has no `excluded` table: the new
    // value is VALUES(col), and its assignments run left to right, each seeing the ones
    // before, so every NewerBy goes before the Greatest it compares with.
    let mysql = backend == sea_orm::DatabaseBackend::MySql;
    let stored = |col: &str| -> Expr {
        if mysql {
            Expr::col(Alias::new(col))
        } else {
            Expr::col((Alias::new(table), Alias::new(col)))
        }
    };
    let new = |col: &str| -> Expr {
        if mysql {
            Func::cust("VALUES").arg(Expr::col(Alias::new(col))).into()
        } else {
            Expr::col((Alias::new("excluded"), Alias::new(col)))
        }
    };
    let mut conflict = OnConflict::columns(key.iter().map(|c| Alias::new(*c)));
    if merges.is_empty() {
        conflict.do_nothing_on([Alias::new(key[0])]);
    }
    let mut ordered: Vec<&Merge<'_>> = merges.iter().collect();
    ordered.sort_by_key(|m| matches!(m, Merge::Greatest(_)));
    for merge in ordered {
        let (column, value) = match *merge {
            Merge::Greatest(col) => (col, Func::greatest([stored(col), new(col)]).into()),
            Merge::Add(col) => (col, stored(col).add(new(col))),
            Merge::NewerBy { column, by } => (
                column,
                Expr::case(new(by).gt(stored(by)), new(column))
                    .finally(stored(column))
                    .into(),
            ),
        };
        conflict.value(Alias::new(column), value);
    }
    insert.on_conflict(conflict);
    insert
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sea_orm::{ConnectionTrait, TransactionTrait};

    use crate::{
        config::SqlConfig,
        testing::{Backend, fresh_sql},
    };

    async fn count(db: &sea_orm::DatabaseConnection) -> i64 {
        let row = tokio::time::timeout(
            Duration::from_secs(2),
            db.query_one_raw(sea_orm::Statement::from_string(
                db.get_database_backend(),
                "SELECT count(*) AS n FROM notes",
            )),
        )
        .await
        .expect("the read waited for the writer")
        .unwrap()
        .unwrap();
        row.try_get("", "n").unwrap()
    }

    /// The embedded default's one connection is busy in a group commit's transaction:
    /// a lookup through the readers neither waits for it nor sees it before it commits.
    #[tokio::test]
    async fn readers_of_a_sqlite_file_answer_while_its_writer_holds_a_transaction() {
        let config = SqlConfig {
            max_connections: 1,
            ..fresh_sql(Backend::Sqlite).await.unwrap()
        };
        let db = super::connect(&config).await.unwrap();
        db.execute_unprepared("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
            .await
            .unwrap();
        db.execute_unprepared("INSERT INTO notes (id) VALUES (1)")
            .await
            .unwrap();
        let readers = super::readers(&config, &db).await.unwrap();
        let writing = db.begin().await.unwrap();
        writing
            .execute_unprepared("INSERT INTO notes (id) VALUES (2)")
            .await
            .unwrap();
        assert_eq!(count(&readers).await, 1);
        writing.commit().await.unwrap();
        assert_eq!(count(&readers).await, 2);
        let refused = readers
            .execute_unprepared("INSERT INTO notes (id) VALUES (3)")
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("readonly"), "{refused}");
        assert_eq!(count(&db).await, 2);
    }

    /// On a server, and with `read_connections = 0`, reads share the main pool.
    #[tokio::test]
    async fn readers_elsewhere_are_the_main_pool() {
        let servers = crate::testing::sql_backends()
            .into_iter()
            .filter(|b| *b != Backend::Sqlite);
        for (backend, read_connections) in servers.map(|b| (b, 2)).chain([(Backend::Sqlite, 0)]) {
            let config = SqlConfig {
                read_connections,
                ..fresh_sql(backend).await.unwrap()
            };
            let db = super::connect(&config).await.unwrap();
            let readers = super::readers(&config, &db).await.unwrap();
            readers
                .execute_unprepared("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
                .await
                .unwrap();
            readers
                .execute_unprepared("INSERT INTO notes (id) VALUES (1)")
                .await
                .unwrap();
            assert_eq!(count(&db).await, 1, "{backend:?}");
        }
    }

    /// The build's SQLite flags (`LIBSQLITE3_FLAGS` in `.cargo/config.toml`): no global
    /// mutex around every allocation, no page-cache group shared by every connection.
    /// (`HAVE_FDATASYNC` comes in the same variable but is not among the options SQLite
    /// reports: these two stand for the variable having reached the build.)
    #[tokio::test]
    async fn the_bundled_sqlite_takes_no_process_wide_lock_per_allocation_or_page() {
        let db = super::connect(&fresh_sql(Backend::Sqlite).await.unwrap())
            .await
            .unwrap();
        let options: Vec<String> = sea_orm::sqlx::query_scalar("PRAGMA compile_options")
            .fetch_all(db.get_sqlite_connection_pool())
            .await
            .unwrap();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{options:?}"
        );
    }

    /// Each merge means the same on every backend, whether PostgreSQL's rows go as
    /// arrays (plain values) or as a `VALUES` list (a NULL in an integer column).
    #[tokio::test]
    async fn upserts_merge_alike_on_every_backend_and_either_way_of_binding() {
        use sea_orm::Value;

        use super::{Merge, upsert};
        let columns = ["k", "g", "a", "n", "v", "o"];
        let merges = [
            Merge::Greatest("g"),
            Merge::Add("a"),
            Merge::NewerBy {
                column: "n",
                by: "v",
            },
            Merge::Greatest("v"),
        ];
        for backend in crate::testing::sql_backends() {
            for null in [false, true] {
                let db = crate::sql::connect(&fresh_sql(backend).await.unwrap())
                    .await
                    .unwrap();
                db.execute_unprepared(
                    "CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT NOT NULL, a BIGINT NOT NULL, \
                     n BIGINT NOT NULL, v BIGINT NOT NULL, o BIGINT)",
                )
                .await
                .unwrap();
                let b = db.get_database_backend();
                let o = Value::BigInt((!null).then_some(0));
                for (g, a, n, v) in [(5i64, 1i64, 10i64, 2i64), (3, 2, 20, 1), (7, 4, 30, 3)] {
                    let row = vec![
                        1i64.into(),
                        g.into(),
                        a.into(),
                        n.into(),
                        v.into(),
                        o.clone(),
                    ];
                    db.execute_raw(upsert(b, "t", &columns, &["k"], &merges, vec![row]))
                        .await
                        .unwrap();
                }
                let absent = vec![
                    1i64.into(),
                    0i64.into(),
                    0i64.into(),
                    0i64.into(),
                    0i64.into(),
                    o.clone(),
                ];
                db.execute_raw(upsert(b, "t", &columns, &["k"], &[], vec![absent]))
                    .await
                    .unwrap();
                let row = db
                    .query_one_raw(sea_orm::Statement::from_string(
                        b,
                        "SELECT g, a, n, v FROM t",
                    ))
                    .await
                    .unwrap()
                    .unwrap();
                let got: (i64, i64, i64, i64) = row.try_get_many_by_index().unwrap();
                assert_eq!(got, (7, 7, 30, 3), "{backend:?}, NULL column: {null}");
            }
        }
    }
}
