//! Several PostgreSQL writes as one statement: each a data-modifying `WITH` part, run to
//! completion whether or not the final `SELECT` reads it. One statement is one round trip
//! and, outside a transaction, its own: no `BEGIN` and `COMMIT` around the parts.
//!
//! The parts see one snapshot and not each other's changes (but for what a part reads
//! from another's `RETURNING`), so no two parts may touch the same row.

use sea_orm::{DatabaseBackend, Statement, Value, Values};

/// A statement of `WITH` parts under construction.
#[derive(Default)]
pub struct With {
    parts: Vec<String>,
    values: Vec<Value>,
}

impl With {
    pub fn new() -> Self {
        Self::default()
    }

    /// The parameters of the parts so far: a part written by hand numbers its own after
    /// them (e.g. with [`super::Unnest::after`]).
    pub fn parameters(&self) -> usize {
        self.values.len()
    }

    /// Adds `name AS (sql)`, whose parameters `values` are numbered after
    /// [`With::parameters`] already.
    pub fn numbered(mut self, name: &str, sql: &str, values: Vec<Value>) -> Self {
        self.parts.push(format!("{name} AS ({sql})"));
        self.values.extend(values);
        self
    }

    /// Adds `name AS (statement)`, a statement numbered on its own (`$1`, …), its
    /// parameters renumbered after those of the parts before it.
    pub fn part(self, name: &str, statement: Statement) -> Self {
        let sql = renumber(&statement.sql, self.values.len());
        let values = statement.values.map(|v| v.0).unwrap_or_default();
        self.numbered(name, &sql, values)
    }

    /// The statement: the parts, then `select` (which may read their `RETURNING`).
    pub fn select(self, select: &str) -> Statement {
        let sql = format!("WITH {} {select}", self.parts.join(", "));
        Statement::from_sql_and_values(DatabaseBackend::Postgres, sql, Values(self.values))
    }
}

/// `sql` with each parameter `$n` outside quotes made `$(n + by)`. Statements as sea-query
/// and this crate write them: no comments, no dollar-quoted or `E'…'` strings.
fn renumber(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '$') if chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut n = 0usize;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    n = n * 10 + d as usize;
                    chars.next();
                }
                out.push_str(&(n + by).to_string());
            }
            (None, _) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, Statement, Value};

    use super::{With, renumber};
    use crate::{
        sql::Unnest,
        testing::{self, Backend},
    };

    #[test]
    fn renumbering_moves_parameters_and_leaves_quoted_text() {
        assert_eq!(
            renumber(
                r#"SELECT $1, '$2', "a$3", $10 || 'it''s $4' FROM t WHERE x = $2"#,
                5
            ),
            r#"SELECT $6, '$2', "a$3", $15 || 'it''s $4' FROM t WHERE x = $7"#
        );
        assert_eq!(renumber("SELECT $", 3), "SELECT $");
    }

    #[tokio::test]
    async fn parts_run_once_each_and_the_select_reads_their_returning() {
        if !testing::sql_backends().contains(&Backend::Postgres) {
            return;
        }
        let db = crate::sql::connect(&testing::fresh_sql(Backend::Postgres).await.unwrap())
            .await
            .unwrap();
        db.execute_unprepared(
            "CREATE TABLE counts (k BIGINT PRIMARY KEY, n BIGINT NOT NULL); \
             CREATE TABLE log (k BIGINT NOT NULL, at BIGINT NOT NULL, note TEXT NOT NULL)",
        )
        .await
        .unwrap();
        db.execute_unprepared("INSERT INTO counts VALUES (1, 10)")
            .await
            .unwrap();
        let add = |by: i64| {
            Statement::from_sql_and_values(
                sea_orm::DatabaseBackend::Postgres,
                "INSERT INTO counts AS c (k, n) VALUES ($1, $2), ($3, $2) \
                 ON CONFLICT (k) DO UPDATE SET n = c.n + excluded.n RETURNING c.k, c.n",
                [Value::from(1i64), by.into(), 2i64.into()],
            )
        };
        let with = With::new().part("added", add(5));
        let notes = Unnest::after(with.parameters())
            .bigints("k", [1, 2])
            .texts("note", ["one".to_owned(), "two".to_owned()]);
        let sql = format!(
            "INSERT INTO log (k, at, note) SELECT r.k, a.n, r.note FROM {} \
             JOIN added a ON a.k = r.k",
            notes.table("r")
        );
        let statement = with
            .numbered("logged", &sql, notes.into_values())
            .part(
                "literal",
                Statement::from_sql_and_values(
                    sea_orm::DatabaseBackend::Postgres,
                    "INSERT INTO log (k, at, note) VALUES ($1, 0, '$1 stays')",
                    [Value::from(9i64)],
                ),
            )
            .select("SELECT k, n FROM added ORDER BY k");
        let rows = db.query_all_raw(statement).await.unwrap();
        let returned: Vec<(i64, i64)> = (rows.iter())
            .map(|r| (r.try_get("", "k").unwrap(), r.try_get("", "n").unwrap()))
            .collect();
        assert_eq!(returned, [(1, 15), (2, 5)]);
        let logged = db
            .query_all_raw(Statement::from_string(
                sea_orm::DatabaseBackend::Postgres,
                "SELECT k, at, note FROM log ORDER BY k",
            ))
            .await
            .unwrap();
        let logged: Vec<(i64, i64, String)> = (logged.iter())
            .map(|r| {
                (
                    r.try_get("", "k").unwrap(),
                    r.try_get("", "at").unwrap(),
                    r.try_get("", "note").unwrap(),
                )
            })
            .collect();
        assert_eq!(
            logged,
            [
                (1, 15, "one".to_owned()),
                (2, 5, "two".to_owned()),
                (9, 0, "$1 stays".to_owned())
            ]
        );
    }
}
