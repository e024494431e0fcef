//! SQL through a [`Session`]: one statement (JSON rows or Arrow), Arrow inserts, and
//! one statement over many parameter sets.

use std::time::Instant;

use crate::access::{Access, CallGuards};
use crate::{ArrowResult, BatchResult, Charge, Error, Operation, QueryResult, Result, Session};

impl Session {
    pub(crate) async fn run(
        &self,
        access: Access,
        guards: &CallGuards,
        ws: &str,
        sql: &str,
        params: &[serde_json::Value],
    ) -> Result<tarn_sql::StatementResult> {
        let engine = &self.tarn.inner.engine;
        guards
            .within(
                access.org(),
                engine.execute(access.org(), ws, sql, params, &self.settings),
            )
            .await
    }

    /// Runs one SQL statement in workspace `ws` with positional parameters.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// use serde_json::json;
    /// acme.query("docs", r#"CREATE TABLE "docs"."t" (id INT8 PRIMARY KEY, tags TEXT[])"#, &[]).await?;
    /// let r = acme.query("docs", r#"INSERT INTO "docs"."t" VALUES ($1, $2)"#,
    ///     &[json!(7), json!(["a", "b"])]).await?;
    /// assert_eq!(r.rows_affected, 1);
    /// let r = acme.query("docs", r#"SELECT tags FROM "docs"."t" WHERE id = $1"#, &[json!(7)]).await?;
    /// assert_eq!(r.columns, ["tags"]);
    /// assert_eq!(r.rows, Some(vec![vec![json!(["a", "b"])]]));
    /// // Errors carry the HTTP status the hosted service would answer with.
    /// let e = acme.query("docs", r#"SELECT * FROM "docs"."nope""#, &[]).await.unwrap_err();
    /// assert_eq!(e.status(), 404);
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn query(
        &self,
        ws: &str,
        sql: &str,
        params: &[serde_json::Value],
    ) -> Result<QueryResult> {
        let start = Instant::now();
        let (access, guards) = self.authorize_call(Operation::Query, ws).await?;
        let out = self.run(access, &guards, ws, sql, params).await?;
        let row_count = out.row_count();
        let mut charge = Charge::default();
        let rows = match out.batches {
            None => None,
            Some(batches) => {
                // The rows stay charged to the pool the statements share while they are
                // encoded: the Arrow batches until each is encoded and let go, the JSON
                // rows as they are made (a host then serializes them).
                let engine = &self.tarn.inner.engine;
                let memory = engine.reserve("query result as JSON");
                let over = |e: datafusion::error::DataFusionError| {
                    Error::bad(format!(
                        "query memory limit (query_memory) exceeded: the result rows as JSON \
                         pass the limit of {} bytes; select fewer rows or columns (LIMIT), or \
                         read them as Arrow ({})",
                        engine.limits().query_memory,
                        pool_refusal(&e)
                    ))
                };
                let batch_bytes: usize = batches.iter().map(tarn_sql::batch_bytes).sum();
                let encode = |batches: Vec<datafusion::arrow::record_batch::RecordBatch>| {
                    // The batches, and the list of rows at its final size (grown by
                    // doubling, it held up to half as much again, and the old and the
                    // new list at once).
                    memory
                        .try_grow(
                            batch_bytes
                                + row_count as usize
                                    * std::mem::size_of::<Vec<serde_json::Value>>(),
                        )
                        .map_err(over)?;
                    let mut rows = Vec::with_capacity(row_count as usize);
                    let fields: Vec<_> = out.schema.fields().iter().map(|f| f.as_ref()).collect();
                    for b in batches {
                        tarn_sql::encode_rows(&fields, b.columns(), &mut rows, &mut |n| {
                            memory.try_grow(n).map_err(|e| {
                                tarn_sql::Error::BadRequest(over(e).message().to_string())
                            })
                        })?;
                        memory.shrink(tarn_sql::batch_bytes(&b).min(memory.size()));
                    }
                    Ok::<_, Error>(rows)
                };
                let rows = match encode(batches) {
                    Ok(rows) => rows,
                    Err(e) => {
                        // What the refused rows held goes back to the system once the
                        // host is idle, as a large statement's does.
                        if tarn_alloc::worth_releasing(batch_bytes.max(memory.size())) {
                            tarn_alloc::release_soon();
                        }
                        return Err(e);
                    }
                };
                charge = Charge(Some(memory));
                Some(rows)
            }
        };
        Ok(QueryResult {
            columns: out.columns,
            rows,
            row_count,
            rows_affected: out.rows_affected,
            execution_time_ms: start.elapsed().as_secs_f64() * 1000.0,
            notices: out.notices,
            charge,
        })
    }

    /// Runs one statement and returns its rows as Arrow record batches.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// use std::sync::Arc;
    /// use tarn::arrow::array::{Int64Array, StringArray};
    /// use tarn::arrow::datatypes::{DataType, Field, Schema};
    /// use tarn::arrow::record_batch::RecordBatch;
    /// acme.query("docs", r#"CREATE TABLE "docs"."t" (id INT8, name TEXT)"#, &[]).await?;
    /// let schema = Arc::new(Schema::new(vec![
    ///     Field::new("id", DataType::Int64, false),
    ///     Field::new("name", DataType::Utf8, true),
    /// ]));
    /// let batch = RecordBatch::try_new(schema, vec![
    ///     Arc::new(Int64Array::from(vec![1, 2])),
    ///     Arc::new(StringArray::from(vec![Some("one"), None])),
    /// ]).expect("a batch");
    /// assert_eq!(acme.insert_arrow("docs", "t", &[batch]).await?, 2);
    /// let out = acme.query_arrow("docs", r#"SELECT count(name) AS n FROM "docs"."t""#, &[]).await?;
    /// let batches = out.batches.expect("rows");
    /// assert_eq!(batches[0].num_rows(), 1);
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn query_arrow(
        &self,
        ws: &str,
        sql: &str,
        params: &[serde_json::Value],
    ) -> Result<ArrowResult> {
        let (access, guards) = self.authorize_call(Operation::QueryArrow, ws).await?;
        let out = self.run(access, &guards, ws, sql, params).await?;
        let mut charge = Charge::default();
        if let Some(batches) = &out.batches {
            let engine = &self.tarn.inner.engine;
            let memory = engine.reserve("query result as Arrow");
            memory
                .try_grow(batches.iter().map(tarn_sql::batch_bytes).sum())
                .map_err(|e| {
                    Error::bad(format!(
                        "query memory limit (query_memory) exceeded: the result rows pass the \
                         limit of {} bytes with what other statements hold; select fewer rows \
                         or columns (LIMIT) ({})",
                        engine.limits().query_memory,
                        pool_refusal(&e)
                    ))
                })?;
            charge = Charge(Some(memory));
        }
        Ok(ArrowResult {
            schema: out.schema,
            batches: out.batches,
            rows_affected: out.rows_affected,
            charge,
        })
    }

    /// Appends Arrow record batches to a table in one atomic commit (the write
    /// counterpart of [`Session::query_arrow`]). Fields are matched to columns by name;
    /// missing columns take their defaults; values are validated as for INSERT.
    /// Returns the number of rows written.
    pub async fn insert_arrow(
        &self,
        ws: &str,
        table: &str,
        batches: &[datafusion::arrow::record_batch::RecordBatch],
    ) -> Result<u64> {
        let (access, guards) = self.authorize_call(Operation::InsertArrow, ws).await?;
        let engine = &self.tarn.inner.engine;
        guards
            .within(
                access.org(),
                engine.insert_arrow(access.org(), ws, table, batches),
            )
            .await
    }

    /// Runs one statement once per parameter set, atomically: all sets apply or none.
    /// An error names the failing set, counted from 0: `parameter set i: …`.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// use serde_json::json;
    /// acme.query("docs", r#"CREATE TABLE "docs"."t" (id INT8 PRIMARY KEY, x FLOAT8)"#, &[]).await?;
    /// let insert = r#"INSERT INTO "docs"."t" VALUES ($1, $2)"#;
    /// let sets: Vec<Vec<serde_json::Value>> = (0..1000).map(|i| vec![json!(i), json!(i as f64 / 2.0)]).collect();
    /// acme.query_batch("docs", insert, &sets).await?;
    /// // A failing set rolls back the whole batch and is named.
    /// let e = acme.query_batch("docs", insert, &[vec![json!(5000), json!(1)], vec![json!(7), json!(1)]])
    ///     .await.unwrap_err();
    /// assert!(e.message().starts_with("parameter set 1: duplicate key"), "{e}");
    /// let r = acme.query("docs", r#"SELECT count(*) FROM "docs"."t""#, &[]).await?;
    /// assert_eq!(r.rows, Some(vec![vec![json!(1000)]]));
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn query_batch(
        &self,
        ws: &str,
        sql: &str,
        params_batch: &[Vec<serde_json::Value>],
    ) -> Result<BatchResult> {
        let start = Instant::now();
        let (access, guards) = self.authorize_call(Operation::QueryBatch, ws).await?;
        let engine = &self.tarn.inner.engine;
        let totals = guards
            .within(
                access.org(),
                engine.execute_batch(access.org(), ws, sql, params_batch, &self.settings),
            )
            .await?;
        Ok(BatchResult {
            statements: totals.statements,
            rows_affected: totals.rows_affected,
            row_count: totals.row_count,
            execution_time_ms: start.elapsed().as_secs_f64() * 1000.0,
            notices: totals.notices,
        })
    }
}

/// What the memory pool said when it refused a result's rows, without DataFusion's
/// wrappers ("Resources exhausted: …", the list of top consumers after it).
pub(crate) fn pool_refusal(e: &datafusion::error::DataFusionError) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("Resources exhausted: ").unwrap_or(first);
    first
        .split(" with top memory consumers")
        .next()
        .unwrap_or(first)
        .to_string()
}
