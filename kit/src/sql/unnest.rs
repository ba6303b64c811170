//! A batch of rows as PostgreSQL arrays, one per column: `INSERT … SELECT … FROM
//! unnest($1::bigint[], $2::text[], …)`. A multi-row `VALUES` list is a different statement
//! for every number of rows, each with a parameter per cell: PostgreSQL parses and plans it
//! anew and evaluates every parameter on its own. Over arrays a batch of any size is the
//! same statement with one parameter per column, so its plan is cached.

use sea_orm::{DatabaseBackend, Statement, Value, Values, sea_query::ArrayType};

/// The columns of a batch of rows, each bound as one array.
#[derive(Default)]
pub struct Unnest {
    /// The parameters of the statement before these arrays.
    before: usize,
    /// How many of the columns an insert writes (the rest are for its conditions); all
    /// when `None`.
    inserted: Option<usize>,
    /// Each column's name, its array's element type, and whether `''` stands for NULL.
    columns: Vec<(String, &'static str, bool)>,
    arrays: Vec<Value>,
}

impl Unnest {
    pub fn new() -> Self {
        Self::default()
    }

    /// Arrays numbered after the `before` parameters of other parts of one statement.
    pub fn after(before: usize) -> Self {
        Self {
            before,
            ..Self::default()
        }
    }

    /// The columns after this are not inserted: they are there for an insert's conditions.
    pub fn not_inserted(mut self) -> Self {
        self.inserted = Some(self.columns.len());
        self
    }

    pub fn bigints(self, column: &'static str, values: impl IntoIterator<Item = i64>) -> Self {
        self.column(column, false, ArrayType::BigInt, values)
    }

    pub fn ints(self, column: &'static str, values: impl IntoIterator<Item = i32>) -> Self {
        self.column(column, false, ArrayType::Int, values)
    }

    pub fn smallints(self, column: &'static str, values: impl IntoIterator<Item = i16>) -> Self {
        self.column(column, false, ArrayType::SmallInt, values)
    }

    pub fn bools(self, column: &'static str, values: impl IntoIterator<Item = bool>) -> Self {
        self.column(column, false, ArrayType::Bool, values)
    }

    pub fn texts(self, column: &'static str, values: impl IntoIterator<Item = String>) -> Self {
        self.column(column, false, ArrayType::String, values)
    }

    /// A nullable text column. The arrays bound here hold no NULL element, so NULL travels
    /// as `''`: the column must never hold an empty string of its own.
    pub fn optional_texts(
        self,
        column: &'static str,
        values: impl IntoIterator<Item = Option<String>>,
    ) -> Self {
        let values = values.into_iter().map(|v| {
            debug_assert_ne!(v.as_deref(), Some(""), "{column}: '' stands for NULL");
            v.unwrap_or_default()
        });
        self.column(column, true, ArrayType::String, values)
    }

    pub fn bytes(self, column: &'static str, values: impl IntoIterator<Item = Vec<u8>>) -> Self {
        self.column(column, false, ArrayType::Bytes, values)
    }

    fn column<T: Into<Value>>(
        mut self,
        column: &str,
        empty_is_null: bool,
        ty: ArrayType,
        values: impl IntoIterator<Item = T>,
    ) -> Self {
        let values: Vec<Value> = values.into_iter().map(Into::into).collect();
        self.columns
            .push((column.to_owned(), sql_type(&ty), empty_is_null));
        self.arrays.push(Value::Array(ty, Some(Box::new(values))));
        self
    }

    /// `rows` (each a value per column of `columns`) as arrays, when every value is of a
    /// type this binds and each column's values are of one type; otherwise the rows as they
    /// were. A NULL is bound only in a text or bytes column holding no empty value of its
    /// own, as the empty value (see [`Unnest::optional_texts`]).
    pub fn of_rows(columns: &[&str], rows: Vec<Vec<Value>>) -> Result<Self, Vec<Vec<Value>>> {
        let Some(first) = rows.first() else {
            return Err(rows);
        };
        let mut types = Vec::with_capacity(columns.len());
        for value in first {
            types.push(match value {
                Value::BigInt(_) => ArrayType::BigInt,
                Value::Int(_) => ArrayType::Int,
                Value::SmallInt(_) => ArrayType::SmallInt,
                Value::Bool(_) => ArrayType::Bool,
                Value::String(_) => ArrayType::String,
                Value::Bytes(_) => ArrayType::Bytes,
                _ => return Err(rows),
            });
        }
        if types.len() != columns.len() || rows.iter().any(|row| row.len() != columns.len()) {
            return Err(rows);
        }
        // Per column: whether it holds a NULL, and whether it may (no empty value of its own).
        let mut nulls = vec![false; columns.len()];
        for (i, f) in first.iter().enumerate() {
            let column = rows.iter().map(|row| &row[i]);
            if column
                .clone()
                .any(|v| std::mem::discriminant(v) != std::mem::discriminant(f))
            {
                return Err(rows);
            }
            nulls[i] = column.clone().any(|v| !v.is_some());
            let empty = |v: &Value| match v {
                Value::String(Some(s)) => s.is_empty(),
                Value::Bytes(Some(b)) => b.is_empty(),
                _ => false,
            };
            let nullable = matches!(f, Value::String(_) | Value::Bytes(_));
            if nulls[i] && (!nullable || column.clone().any(empty)) {
                return Err(rows);
            }
        }
        let mut arrays: Vec<Vec<Value>> = (columns.iter())
            .map(|_| Vec::with_capacity(rows.len()))
            .collect();
        for row in rows {
            for (array, value) in arrays.iter_mut().zip(row) {
                array.push(match value {
                    Value::String(None) => Value::String(Some(String::new())),
                    Value::Bytes(None) => Value::Bytes(Some(Vec::new())),
                    value => value,
                });
            }
        }
        let mut unnest = Self::new();
        for (((column, ty), values), null) in columns.iter().zip(types).zip(arrays).zip(nulls) {
            unnest = unnest.column(column, null, ty, values);
        }
        Ok(unnest)
    }

    /// The parameters up to and including these arrays: a statement's own come after them.
    pub fn parameters(&self) -> usize {
        self.before + self.arrays.len()
    }

    /// The arrays, as the parameters they are.
    pub fn into_values(self) -> Vec<Value> {
        self.arrays
    }

    /// `unnest($1::bigint[], …) AS {alias}(column, …)`: the rows as a table, for a join;
    /// its parameters are numbered after the `before` of [`Unnest::after`].
    pub fn table(&self, alias: &str) -> String {
        let arrays: Vec<String> = (self.columns.iter().enumerate())
            .map(|(i, (_, sql_type, _))| format!("${}::{sql_type}[]", self.before + i + 1))
            .collect();
        let names: Vec<&str> = self
            .columns
            .iter()
            .map(|(name, _, _)| name.as_str())
            .collect();
        format!(
            "unnest({}) AS {alias}({})",
            arrays.join(", "),
            names.join(", ")
        )
    }

    /// `INSERT INTO {table} (columns) SELECT … FROM unnest(…) {tail}`, `tail` being e.g.
    /// an `ON CONFLICT` clause.
    pub fn insert(self, table: &str, tail: &str) -> Statement {
        let sql = self.insert_sql(table, tail);
        self.statement(sql)
    }

    /// [`Unnest::insert`]'s text, for a statement of several parts.
    pub fn insert_sql(&self, table: &str, tail: &str) -> String {
        let inserted = &self.columns[..self.inserted.unwrap_or(self.columns.len())];
        let names: Vec<&str> = inserted.iter().map(|(name, _, _)| name.as_str()).collect();
        let select: Vec<String> = (inserted.iter())
            .map(|(name, _, empty_is_null)| match empty_is_null {
                true => format!("NULLIF(r.{name}, '')"),
                false => format!("r.{name}"),
            })
            .collect();
        format!(
            "INSERT INTO {table} ({}) SELECT {} FROM {} {tail}",
            names.join(", "),
            select.join(", "),
            self.table("r"),
        )
    }

    /// `sql` (which holds [`Unnest::table`]) with the arrays as its parameters.
    pub fn statement(self, sql: String) -> Statement {
        debug_assert_eq!(
            self.before, 0,
            "arrays after other parameters: use into_values"
        );
        Statement::from_sql_and_values(DatabaseBackend::Postgres, sql, Values(self.arrays))
    }
}

/// PostgreSQL's name for the elements of an array of `ty`, one of the types bound here.
fn sql_type(ty: &ArrayType) -> &'static str {
    match ty {
        ArrayType::BigInt => "bigint",
        ArrayType::Int => "integer",
        ArrayType::SmallInt => "smallint",
        ArrayType::Bool => "boolean",
        ArrayType::String => "text",
        ArrayType::Bytes => "bytea",
        other => unreachable!("no array of {other:?} is bound"),
    }
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, DatabaseConnection};

    use super::Unnest;
    use crate::testing::{self, Backend};

    type Row = (i64, i32, i16, bool, String, Option<String>, Vec<u8>);

    /// A fresh PostgreSQL schema with a table of every type `Unnest` binds, when the test
    /// stores have PostgreSQL.
    async fn table() -> Option<DatabaseConnection> {
        testing::sql_backends()
            .contains(&Backend::Postgres)
            .then_some(())?;
        let config = testing::fresh_sql(Backend::Postgres).await.unwrap();
        let db = crate::sql::connect(&config).await.unwrap();
        db.execute_unprepared(
            "CREATE TABLE t (k BIGINT PRIMARY KEY, i INTEGER NOT NULL, s SMALLINT NOT NULL, \
             b BOOLEAN NOT NULL, v VARCHAR(20) NOT NULL, o TEXT, x BYTEA NOT NULL)",
        )
        .await
        .unwrap();
        Some(db)
    }

    fn rows(n: i64) -> Vec<Row> {
        (0..n)
            .map(|k| {
                let optional = (k % 2 == 0).then(|| format!("o{k}"));
                (
                    k,
                    k as i32 * 2,
                    k as i16,
                    k % 3 == 0,
                    format!("v{k}"),
                    optional,
                    vec![k as u8; 3],
                )
            })
            .collect()
    }

    fn insert(rows: &[Row]) -> sea_orm::Statement {
        Unnest::new()
            .bigints("k", rows.iter().map(|r| r.0))
            .ints("i", rows.iter().map(|r| r.1))
            .smallints("s", rows.iter().map(|r| r.2))
            .bools("b", rows.iter().map(|r| r.3))
            .texts("v", rows.iter().map(|r| r.4.clone()))
            .optional_texts("o", rows.iter().map(|r| r.5.clone()))
            .bytes("x", rows.iter().map(|r| r.6.clone()))
            .insert("t", "ON CONFLICT (k) DO NOTHING")
    }

    async fn stored(db: &DatabaseConnection) -> Vec<Row> {
        let rows = db
            .query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DatabaseBackend::Postgres,
                "SELECT k, i, s, b, v, o, x FROM t ORDER BY k",
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.try_get_many_by_index::<Row>().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn batches_of_any_size_are_one_statement_storing_every_row_and_null() {
        let Some(db) = table().await else { return };
        let (one, many) = (rows(1), rows(300));
        assert_eq!(
            insert(&one).sql,
            insert(&many).sql,
            "one statement for every size"
        );
        db.execute_raw(insert(&one)).await.unwrap();
        // The tail applies: the row already stored is skipped, not an error.
        db.execute_raw(insert(&many)).await.unwrap();
        let stored = stored(&db).await;
        assert_eq!(stored, many);
        assert_eq!(stored[1].5, None, "'' went in as NULL");
    }

    #[tokio::test]
    async fn the_rows_join_as_a_table_matching_whole_rows() {
        let Some(db) = table().await else { return };
        db.execute_raw(insert(&rows(10))).await.unwrap();
        let keys = Unnest::new()
            .bigints("k", [7, 3, 42])
            .texts("v", ["v7", "wrong", "v42"].map(String::from));
        let sql = format!(
            "SELECT t.k FROM {} JOIN t USING (k, v) ORDER BY t.k",
            keys.table("q")
        );
        let found = db.query_all_raw(keys.statement(sql)).await.unwrap();
        let found: Vec<i64> = found.iter().map(|r| r.try_get("", "k").unwrap()).collect();
        assert_eq!(found, vec![7], "only the pair stored as given");
    }

    #[test]
    fn rows_with_an_ambiguous_null_a_mixed_column_or_an_unbound_type_stay_rows() {
        use sea_orm::Value;
        let typed = vec![vec![
            Value::BigInt(Some(1)),
            Value::String(Some("a".into())),
        ]];
        assert!(Unnest::of_rows(&["k", "v"], typed).is_ok());
        let null_text = vec![vec![Value::BigInt(Some(1)), Value::String(None)]];
        assert!(Unnest::of_rows(&["k", "v"], null_text).is_ok());
        for rows in [
            vec![vec![Value::BigInt(None), Value::String(Some("a".into()))]],
            vec![
                vec![Value::BigInt(Some(1)), Value::String(None)],
                vec![Value::BigInt(Some(2)), Value::String(Some(String::new()))],
            ],
            vec![vec![Value::BigInt(Some(1))], vec![Value::Int(Some(2))]],
            vec![vec![Value::Double(Some(1.5))]],
            vec![],
        ] {
            let columns = ["k", "v"];
            let columns = &columns[..rows.first().map_or(1, Vec::len)];
            assert_eq!(Unnest::of_rows(columns, rows.clone()).err(), Some(rows));
        }
    }

    #[test]
    fn a_postgres_upsert_is_one_statement_for_every_number_of_rows() {
        use crate::sql::{Merge, upsert};
        let rows = |n: i64| (0..n).map(|k| vec![k.into(), (k * 2).into()]).collect();
        let merges = [Merge::Greatest("v")];
        let pg = sea_orm::DatabaseBackend::Postgres;
        let one = upsert(pg, "t", &["k", "v"], &["k"], &merges, rows(1));
        let many = upsert(pg, "t", &["k", "v"], &["k"], &merges, rows(40));
        assert_eq!(one.sql, many.sql);
        assert!(one.sql.contains("unnest("), "{}", one.sql);
    }

    #[tokio::test]
    async fn an_upsert_keeps_nulls_and_empty_texts_apart() {
        let Some(db) = table().await else { return };
        let row = |k: i64, o: Option<&str>| -> Vec<sea_orm::Value> {
            let o = sea_orm::Value::String(o.map(String::from));
            vec![
                k.into(),
                0i32.into(),
                0i16.into(),
                false.into(),
                "v".into(),
                o,
                vec![1u8].into(),
            ]
        };
        let columns = ["k", "i", "s", "b", "v", "o", "x"];
        let upsert =
            |rows| crate::sql::upsert(db.get_database_backend(), "t", &columns, &["k"], &[], rows);
        // NULLs and no empty text: arrays, '' standing for NULL.
        let arrays = upsert(vec![row(1, None), row(2, Some("two"))]);
        assert!(arrays.sql.contains("unnest("), "{}", arrays.sql);
        db.execute_raw(arrays).await.unwrap();
        // A NULL beside an empty text: rows as they are.
        let values = upsert(vec![row(3, None), row(4, Some(""))]);
        assert!(!values.sql.contains("unnest("), "{}", values.sql);
        db.execute_raw(values).await.unwrap();
        let stored: Vec<Option<String>> = stored(&db).await.into_iter().map(|r| r.5).collect();
        assert_eq!(
            stored,
            [None, Some("two".into()), None, Some(String::new())]
        );
    }
}
