//! `relation-svc migrate` (the chart's migration Job) brings an empty database's schema up to
//! date and exits, serving nothing.

use sea_orm::{ConnectionTrait, Database};

#[tokio::test]
async fn migrate_creates_the_schema_and_exits() {
    let dir = std::env::temp_dir().join(format!("imesh-migrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}/relation.db?mode=rwc", dir.display());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_relation-svc"))
        .arg("migrate")
        .env("IMESH__DATABASE__URL", &url)
        .env("IMESH__AUTH__INTERNAL_SECRET", "internal-secret-0123456789")
        .env("IMESH__AUTH__JWT_SECRET", "jwt-secret-0123456789abcdef")
        .env("IMESH__TELEMETRY__LOG", "warn")
        .spawn()
        .expect("relation-svc runs");
    // Bounded: a binary that started serving instead would never exit on its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("relation-svc migrate did not exit");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
    let db = Database::connect(&url).await.unwrap();
    for table in ["users", "friendships", "friend_requests", "relation_outbox"] {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        assert!(db.execute_unprepared(&sql).await.is_ok(), "{table} exists");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
