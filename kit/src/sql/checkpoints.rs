//! WAL checkpoints of a SQLite database, off the writer's path.
//!
//! SQLite's automatic checkpoint runs inside the commit that pushes the WAL past 1,000
//! pages: that commit (and every send waiting on it) stalls while pages are copied into
//! the database file and synced, and the writer's thread does the copying. Instead, the
//! serving connections never checkpoint (`wal_autocheckpoint = 0`) and one connection of
//! its own copies the WAL back every `checkpoint_ms` (100 ms by default) with a PASSIVE
//! checkpoint, which waits for no reader or writer. A page written many times between two
//! checkpoints is copied once.
//!
//! The WAL starts over from its beginning only at a commit that finds every frame copied
//! back, which a checkpoint running beside a busy writer never achieves: the writer always
//! appended more meanwhile. So once the WAL holds [`RESTART_FRAMES`] after a PASSIVE
//! checkpoint, a RESTART checkpoint holds writers off while it copies the few frames left,
//! and the next commit starts the WAL over. Without it the WAL grew by hundreds of MB a
//! minute under load. The RESTART runs on a connection of the serving pool: on `imesh
//! up`'s one-connection pools that is the writer's, so writes wait for it in the pool and
//! go on the moment it ends, where on a connection of its own they slept in SQLite's busy
//! handler (1, 2, 5 … ms) until they noticed. It waits at most [`RESTART_PATIENCE`] for
//! other writers and for readers of old frames, then gives up, and the next RESTART waits
//! [`RESTART_BACKOFF`]: a reader that keeps an old snapshot for long (a backup, a shell on
//! the file) costs the writer at most the patience once in that time, where a RESTART at
//! every tick held every write back most of the time.
//!
//! A tick that finds the WAL file unmodified since the last checkpoint does nothing: an
//! idle database costs a `stat`, not a statement on another thread. File times are coarse
//! (a few ms), so a write in the same tick as the `stat` before a checkpoint would leave
//! the time unchanged and its frames uncopied until the next write; a time is trusted
//! only once it is [`SETTLED`] old, and until then every tick checkpoints.

use std::{
    path::Path,
    str::FromStr,
    time::{Duration, SystemTime},
};

use sea_orm::sqlx::{
    self, Connection, Row,
    sqlite::{
        SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqliteSynchronous,
    },
};

/// WAL frames (pages) past which writers are held off until the WAL starts over: 64 MiB.
/// Each time costs the sends behind it a few ms (the copy, a sync, and SQLite's busy
/// handler sleeping 1, 2, 5… ms in the writer); at 2,000 sends/s a 16 MiB WAL filled
/// every 0.7 s and those waits made the p99.
pub(super) const RESTART_FRAMES: i64 = 16_384;

/// How long a RESTART checkpoint may hold writers off while readers finish: the lookups
/// of a server take well under a millisecond.
const RESTART_PATIENCE: Duration = Duration::from_millis(20);

/// How long after a RESTART that readers held off the next one may be tried.
const RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// How old a WAL file's modification time must be before an unchanged time is taken to
/// mean no write since: well past the file system's timestamp granularity.
const SETTLED: Duration = Duration::from_millis(50);

/// The longest `checkpoint_ms`.
const MAX_INTERVAL_MS: u64 = 3_600_000;

/// The interval `checkpoint_ms` asks for: `None` for 0 (SQLite's own checkpoints), an
/// error naming the setting past an hour.
pub(super) fn every(checkpoint_ms: u64) -> anyhow::Result<Option<Duration>> {
    match checkpoint_ms {
        0 => Ok(None),
        1..=MAX_INTERVAL_MS => Ok(Some(Duration::from_millis(checkpoint_ms))),
        _ => anyhow::bail!("database.checkpoint_ms: must be 0–{MAX_INTERVAL_MS} (an hour)"),
    }
}

/// Copies the WAL of the database at `url` back every `every` until `pool` closes, on a
/// connection of its own (opened again after a failure), and has it start over past
/// `restart_frames`.
pub(super) fn spawn(
    url: &str,
    pool: SqlitePool,
    every: Duration,
    restart_frames: i64,
) -> anyhow::Result<()> {
    let options = SqliteConnectOptions::from_str(url)?
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        // A PASSIVE checkpoint waits for no one; this bounds only opening the WAL.
        .busy_timeout(RESTART_PATIENCE);
    let wal = format!("{}-wal", super::sqlite_path(url).unwrap_or_default());
    tokio::spawn(async move {
        let start = tokio::time::Instant::now() + every;
        let mut every = tokio::time::interval_at(start, every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut conn: Option<SqliteConnection> = None;
        // When the WAL file was last written as of the last checkpoint that succeeded, once
        // that time had settled.
        let mut checkpointed: Option<SystemTime> = None;
        // No RESTART before this (after one that readers held off).
        let mut restart_after = tokio::time::Instant::now();
        let closed = pool.close_event();
        tokio::pin!(closed);
        loop {
            tokio::select! {
                _ = &mut closed => break,
                _ = every.tick() => {}
            }
            let now = SystemTime::now();
            let written = modified(Path::new(&wal));
            if written.is_some() && written == checkpointed {
                continue;
            }
            if conn.is_none() {
                match SqliteConnection::connect_with(&options).await {
                    Ok(open) => conn = Some(open),
                    Err(e) => {
                        tracing::warn!(error = %e, "opening the WAL checkpointer's connection failed; trying again")
                    }
                }
            }
            let Some(open) = conn.as_mut() else { continue };
            let restart_past =
                (tokio::time::Instant::now() >= restart_after).then_some(restart_frames);
            match checkpoint(open, &pool, restart_past).await {
                Ok(restarted) => {
                    if restarted == Some(false) {
                        restart_after = tokio::time::Instant::now() + RESTART_BACKOFF;
                    }
                    checkpointed =
                        written.filter(|w| now.duration_since(*w).is_ok_and(|age| age >= SETTLED));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "WAL checkpoint failed; trying again");
                    conn = None;
                }
            }
        }
        if let Some(open) = conn {
            let _ = open.close().await;
        }
    });
    Ok(())
}

/// When the file at `path` was last written; `None` when it cannot be read.
fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A PASSIVE checkpoint on `conn`, which copies what no reader still needs and waits for
/// no one; then, when the WAL holds `restart_past` frames or more, a RESTART one on a
/// connection of `pool`. Whether the RESTART finished, if one ran: `Some(false)` when
/// writers or readers held it off past [`RESTART_PATIENCE`].
async fn checkpoint(
    conn: &mut SqliteConnection,
    pool: &SqlitePool,
    restart_past: Option<i64>,
) -> Result<Option<bool>, sqlx::Error> {
    let (_, frames) = wal_checkpoint(conn, "PRAGMA wal_checkpoint(PASSIVE)").await?;
    if restart_past.is_none_or(|past| frames < past) {
        return Ok(None);
    }
    let mut writer = pool.acquire().await?;
    busy_timeout(&mut writer, RESTART_PATIENCE).await?;
    let restarted = wal_checkpoint(&mut writer, "PRAGMA wal_checkpoint(RESTART)").await;
    busy_timeout(&mut writer, super::BUSY_TIMEOUT).await?;
    let (blocked, _) = restarted?;
    Ok(Some(!blocked))
}

async fn busy_timeout(conn: &mut SqliteConnection, wait: Duration) -> Result<(), sqlx::Error> {
    let pragma = format!("PRAGMA busy_timeout = {}", wait.as_millis());
    sqlx::query(sqlx::AssertSqlSafe(pragma))
        .execute(&mut *conn)
        .await
        .map(drop)
}

/// Runs the checkpoint `pragma`; returns whether it was held off before it finished, and
/// the frames in the WAL.
async fn wal_checkpoint(
    conn: &mut SqliteConnection,
    pragma: &'static str,
) -> Result<(bool, i64), sqlx::Error> {
    let row = sqlx::query(pragma).fetch_one(&mut *conn).await?;
    Ok((row.try_get::<i64, _>(0)? != 0, row.try_get(1)?))
}

#[cfg(test)]
mod tests {
    use std::{
        path::{Path, PathBuf},
        time::Duration,
    };

    use sea_orm::{
        ConnectionTrait, DatabaseConnection, TransactionTrait,
        sqlx::{Connection, Executor, sqlite::SqliteConnection},
    };

    use crate::{
        config::SqlConfig,
        testing::{Backend, fresh_sql, until, until_async},
    };

    /// A page's worth of bytes per row.
    const ROW_BYTES: u64 = 4096;

    /// A fresh SQLite database whose `connections` never checkpoint, with checkpoints
    /// every `checkpoint_ms`; its URL and file.
    async fn sqlite(checkpoint_ms: u64, connections: u32) -> (DatabaseConnection, String, PathBuf) {
        let config = SqlConfig {
            checkpoint_ms,
            max_connections: connections,
            ..fresh_sql(Backend::Sqlite).await.unwrap()
        };
        let db = super::super::connect(&config).await.unwrap();
        db.execute_unprepared("CREATE TABLE pages (id INTEGER PRIMARY KEY, body BLOB)")
            .await
            .unwrap();
        let url = config.url.expose().to_owned();
        let file = super::super::sqlite_path(&url).unwrap().into();
        (db, url, file)
    }

    /// Writes `rows` page-sized rows in one transaction.
    async fn write(db: &DatabaseConnection, rows: u64) {
        let txn = db.begin().await.unwrap();
        for _ in 0..rows.div_ceil(100) {
            let values = vec![format!("(randomblob({ROW_BYTES}))"); 100];
            let sql = format!("INSERT INTO pages (body) VALUES {}", values.join(", "));
            txn.execute_unprepared(&sql).await.unwrap();
        }
        txn.commit().await.unwrap();
    }

    fn len(path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }

    /// The database file's length right after one 3,000-page commit (SQLite's own
    /// checkpoint would run inside it: past 1,000 pages) with checkpoints every
    /// `checkpoint_ms`.
    async fn file_after_a_big_commit(checkpoint_ms: u64) -> u64 {
        let (db, _, file) = sqlite(checkpoint_ms, 8).await;
        write(&db, 3000).await;
        let length = len(&file);
        db.close().await.unwrap();
        length
    }

    #[tokio::test]
    async fn commits_leave_the_wal_to_the_checkpointer() {
        let length = file_after_a_big_commit(3_600_000).await;
        assert!(
            length < 1 << 20,
            "the database file holds {length} bytes: the commit copied the WAL back"
        );
    }

    #[tokio::test]
    async fn the_checkpointer_copies_the_wal_back() {
        let (db, _, file) = sqlite(20, 8).await;
        write(&db, 3000).await;
        until("the database file holds the 3,000 pages", || {
            len(&file) >= 3000 * ROW_BYTES
        })
        .await;
        db.close().await.unwrap();
    }

    /// Commits after which a WAL that has not started over three times fails a test.
    const COMMIT_BUDGET: u32 = 40_000;

    /// Commits `insert` back to back through a pool of `connections`, with checkpoints every
    /// 10 ms that restart past 100 frames (the pool's own checkpointer sleeps for an hour),
    /// until the WAL has started over three times (the checkpoint sequence number in its
    /// header, which each start increments); fails if it has not after [`COMMIT_BUDGET`]
    /// commits (160 MB of WAL, were it never started over). How many commits that takes
    /// depends on the machine: how long the disk takes to sync a checkpoint, and whether a
    /// slow commit held a RESTART off past its patience, so the next waits
    /// [`RESTART_BACKOFF`].
    async fn wal_starts_over(connections: u32, insert: &str) {
        let (db, url, file) = sqlite(3_600_000, connections).await;
        let pool = db.get_sqlite_connection_pool().clone();
        super::spawn(&url, pool, Duration::from_millis(10), 100).unwrap();
        let wal = file.with_extension("db-wal");
        let mut starts = 0;
        for commit in 1..=COMMIT_BUDGET {
            db.execute_unprepared(insert).await.unwrap();
            if commit % 100 == 0 {
                starts = wal_header_starts(&wal);
                if starts >= 3 {
                    break;
                }
            }
        }
        db.close().await.unwrap();
        assert!(
            starts >= 3,
            "the WAL started over {starts} times in {COMMIT_BUDGET} commits"
        );
    }

    /// The checkpoint sequence number in the header of the WAL at `path`.
    fn wal_header_starts(path: &Path) -> u32 {
        use std::io::Read as _;
        let mut header = [0u8; 16];
        std::fs::File::open(path)
            .and_then(|mut wal| wal.read_exact(&mut header))
            .unwrap();
        u32::from_be_bytes(header[12..16].try_into().unwrap())
    }

    #[tokio::test]
    async fn the_wal_starts_over_under_a_writer_that_never_pauses() {
        wal_starts_over(8, "INSERT INTO pages (body) VALUES (randomblob(4000))").await;
    }

    #[tokio::test]
    async fn a_restart_takes_the_writers_turn_instead_of_its_lock() {
        // `imesh up`'s pools: one connection, which the RESTART borrows. Each write gives
        // up at once on a lock (busy timeout 0), so one that met the RESTART's lock instead
        // of waiting for the connection would fail.
        let insert = "PRAGMA busy_timeout = 0; INSERT INTO pages (body) VALUES (randomblob(4000))";
        wal_starts_over(1, insert).await;
    }

    #[tokio::test]
    async fn a_reader_keeping_an_old_snapshot_holds_no_write_back_for_long() {
        // `imesh up`'s pools: one connection, which each RESTART borrows while it waits
        // for readers. Checkpoints every 10 ms restart past 100 frames.
        let (db, url, _) = sqlite(3_600_000, 1).await;
        let pool = db.get_sqlite_connection_pool().clone();
        super::spawn(&url, pool, Duration::from_millis(10), 100).unwrap();
        let insert = "INSERT INTO pages (body) VALUES (randomblob(4000))";
        db.execute_unprepared(insert).await.unwrap();
        // A reader that keeps the first commit's snapshot, as a backup or a shell would:
        // no RESTART can finish until it lets go.
        let mut reader = SqliteConnection::connect(&url).await.unwrap();
        reader.execute("BEGIN").await.unwrap();
        reader.execute("SELECT count(*) FROM pages").await.unwrap();
        // Writes go back to back, so each RESTART that waits holds one of them back.
        let mut waits = Vec::new();
        let holding = std::time::Instant::now();
        while holding.elapsed() < Duration::from_secs(1) {
            let started = std::time::Instant::now();
            db.execute_unprepared(insert).await.unwrap();
            waits.push(started.elapsed());
        }
        reader.execute("COMMIT").await.unwrap();
        db.close().await.unwrap();
        // A RESTART holds the writer's connection for its patience (20 ms); one that
        // waited 250 ms for the reader held a write back that long.
        let slowest = waits.iter().max().copied().unwrap_or_default();
        assert!(
            slowest < Duration::from_millis(150),
            "a write waited {slowest:?} behind a RESTART"
        );
        // After a RESTART the reader held off, the next waits a second: one or two writes
        // are held back, where a RESTART at every 10 ms tick held back 46. The bound leaves
        // room for a busy machine's slow commits.
        let held = waits
            .iter()
            .filter(|w| **w >= Duration::from_millis(15))
            .count();
        assert!(held <= 12, "{held} writes waited 15 ms or more");
    }

    #[tokio::test]
    async fn without_an_interval_sqlite_checkpoints_inside_the_commit() {
        let length = file_after_a_big_commit(0).await;
        assert!(
            length >= 3000 * ROW_BYTES,
            "the database file holds {length} bytes right after the commit"
        );
    }

    #[tokio::test]
    async fn the_checkpointer_lets_go_when_its_pool_closes() {
        let (db, url, file) = sqlite(20, 8).await;
        write(&db, 100).await;
        until("the checkpointer copies the WAL back", || {
            len(&file) >= 100 * ROW_BYTES
        })
        .await;
        db.close().await.unwrap();
        // SQLite removes the WAL when its last connection closes, but two connections
        // closing at once may each see the other and leave it: so a connection of the
        // test's own opens and closes until it finds itself the last one.
        let wal = file.with_extension("db-wal");
        until_async("the checkpointer's connection closes", || async {
            let mut alone = SqliteConnection::connect(&url).await.unwrap();
            alone.execute("SELECT 1").await.unwrap();
            alone.close().await.unwrap();
            !wal.exists()
        })
        .await;
    }

    #[tokio::test]
    async fn an_interval_past_an_hour_is_refused_by_name() {
        let config = SqlConfig {
            checkpoint_ms: 3_600_001,
            ..fresh_sql(Backend::Sqlite).await.unwrap()
        };
        let refused = super::super::connect(&config).await.unwrap_err();
        assert!(
            refused.to_string().contains("database.checkpoint_ms"),
            "{refused:#}"
        );
    }
}
