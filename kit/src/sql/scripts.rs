//! Write transactions in one trip to SQLite. sqlx runs each SQLite connection on a thread
//! of its own and every statement is a round trip to it: `BEGIN`, each statement and
//! `COMMIT` each wake that thread and then the caller, and on a small machine the wakeups
//! cost more than the SQL. [`commit`] sends a transaction of writes to SQLite as one script
//! (sqlx binds each statement's `?` arguments in turn): one trip, however many statements.
//! PostgreSQL and MySQL take one statement per query, so there it is an ordinary
//! transaction.

use sea_orm::{
    ConnectionTrait, DatabaseBackend, DatabaseConnection, DbErr, Statement, TransactionTrait, sqlx,
};
use sea_query_sqlx::SqlxValues;

/// Runs `statements` in order in one transaction: all of them or none. Their arguments
/// must be positional (`?`, as sea-query and [`super::upsert`] write them for SQLite).
pub async fn commit(db: &DatabaseConnection, statements: &[Statement]) -> Result<(), DbErr> {
    if statements.is_empty() {
        return Ok(());
    }
    if db.get_database_backend() == DatabaseBackend::Sqlite {
        return commit_script(db, statements).await;
    }
    let txn = db.begin().await?;
    execute_all(&txn, statements.iter().cloned()).await?;
    txn.commit().await
}

/// Runs `statements` in order on `conn` (an open transaction, for a transaction that
/// must also read).
pub async fn execute_all(
    conn: &impl ConnectionTrait,
    statements: impl IntoIterator<Item = Statement>,
) -> Result<(), DbErr> {
    for statement in statements {
        conn.execute_raw(statement).await?;
    }
    Ok(())
}

async fn commit_script(db: &DatabaseConnection, statements: &[Statement]) -> Result<(), DbErr> {
    let (script, values) = script(statements);
    let mut conn = db
        .get_sqlite_connection_pool()
        .acquire()
        .await
        .map_err(|e| DbErr::Conn(driver_error(e)))?;
    let outcome = sqlx::query_with(sqlx::AssertSqlSafe(script), SqlxValues(values))
        .execute(&mut *conn)
        .await;
    if let Err(err) = outcome {
        // The statement that failed stopped the script with its transaction open. A
        // connection that cannot roll back (or never began) is closed rather than pooled,
        // so no later caller finds itself inside this transaction.
        if sqlx::raw_sql(sqlx::AssertSqlSafe("ROLLBACK"))
            .execute(&mut *conn)
            .await
            .is_err()
        {
            conn.close_on_drop();
        }
        return Err(DbErr::Exec(driver_error(err)));
    }
    Ok(())
}

/// An sqlx error as sea-orm carries it (so [`DbErr::sql_err`] still sees a taken key).
fn driver_error(err: sqlx::Error) -> sea_orm::RuntimeErr {
    sea_orm::RuntimeErr::SqlxError(std::sync::Arc::new(err))
}

/// `BEGIN IMMEDIATE; s1; s2; …; COMMIT;` and the statements' arguments in order.
fn script(statements: &[Statement]) -> (String, sea_orm::Values) {
    let length: usize = statements.iter().map(|s| s.sql.len() + 2).sum();
    let mut script = String::with_capacity(length + 32);
    let mut values = Vec::new();
    script.push_str("BEGIN IMMEDIATE;\n");
    for statement in statements {
        script.push_str(statement.sql.trim_end().trim_end_matches(';'));
        script.push_str(";\n");
        if let Some(own) = &statement.values {
            values.extend(own.0.iter().cloned());
        }
    }
    script.push_str("COMMIT;");
    (script, sea_orm::Values(values))
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, sea_query::Query};

    use super::commit;
    use crate::{error::StoreError, testing};

    async fn table(backend: testing::Backend) -> DatabaseConnection {
        let db = crate::sql::connect(&testing::fresh_sql(backend).await.unwrap())
            .await
            .unwrap();
        db.execute_unprepared("CREATE TABLE t (k BIGINT PRIMARY KEY, v VARCHAR(20) NOT NULL)")
            .await
            .unwrap();
        db
    }

    fn insert(db: &DatabaseConnection, k: i64, v: &str) -> Statement {
        let stmt = Query::insert()
            .into_table("t")
            .columns(["k", "v"])
            .values_panic([k.into(), v.into()])
            .to_owned();
        db.get_database_backend().build(&stmt)
    }

    async fn rows(db: &DatabaseConnection) -> Vec<(i64, String)> {
        let stmt = Query::select()
            .columns(["k", "v"])
            .from("t")
            .order_by("k", sea_orm::Order::Asc)
            .to_owned();
        db.query_all(&stmt)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.try_get("", "k").unwrap(), r.try_get("", "v").unwrap()))
            .collect()
    }

    #[tokio::test]
    async fn each_statement_gets_its_own_arguments() {
        for backend in testing::sql_backends() {
            let db = table(backend).await;
            let statements = [
                insert(&db, 1, "a"),
                insert(&db, 2, "b"),
                insert(&db, 3, "c"),
            ];
            commit(&db, &statements).await.unwrap();
            let want: Vec<(i64, String)> = vec![(1, "a".into()), (2, "b".into()), (3, "c".into())];
            assert_eq!(rows(&db).await, want, "{backend:?}");
        }
    }

    #[tokio::test]
    async fn a_failing_statement_undoes_the_ones_before_it_and_frees_the_connection() {
        for backend in testing::sql_backends() {
            let db = table(backend).await;
            commit(&db, &[insert(&db, 1, "a")]).await.unwrap();
            let clash = [
                insert(&db, 2, "b"),
                insert(&db, 1, "again"),
                insert(&db, 3, "c"),
            ];
            let err = commit(&db, &clash).await.unwrap_err();
            assert!(
                matches!(StoreError::from(err), StoreError::Conflict(_)),
                "{backend:?}: a taken key is a conflict"
            );
            assert_eq!(rows(&db).await, vec![(1, "a".into())], "{backend:?}");
            // No connection is left inside the failed transaction: later ones commit,
            // whichever pooled connection they get.
            for k in 2..12 {
                commit(&db, &[insert(&db, k, "later")]).await.unwrap();
            }
            assert_eq!(rows(&db).await.len(), 11, "{backend:?}");
        }
    }
}
