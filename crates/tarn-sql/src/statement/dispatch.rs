//! One bound statement sent to the executor of its kind: queries and EXPLAIN to
//! DataFusion, writes and DDL to Tarn's own executors (dml.rs, ddl.rs, index_ddl.rs).

use std::collections::HashMap;

use datafusion::sql::sqlparser::ast::{self, Query, Statement};

use crate::error::{Result, bad};
use crate::statement::result::StatementResult;
use crate::statement::txn::Txn;

impl Txn<'_> {
    /// Runs one bound statement.
    pub async fn run(&mut self, stmt: Statement) -> Result<StatementResult> {
        match stmt {
            Statement::Query(q) => {
                let (columns, schema, batches) =
                    Box::pin(self.run_query(*q, HashMap::new())).await?;
                Ok(StatementResult {
                    columns,
                    schema,
                    batches: Some(batches),
                    rows_affected: 0,
                    notices: Vec::new(),
                })
            }
            // Boxed: each statement kind's future is large, and nesting them all in one
            // state machine would put hundreds of kilobytes on the caller's stack.
            Statement::Explain { .. } => Box::pin(self.run_explain(stmt)).await,
            Statement::Insert(ins) => Box::pin(self.insert(ins)).await,
            Statement::Update(upd) => Box::pin(self.update(upd)).await,
            Statement::Delete(del) => Box::pin(self.delete(del)).await,
            Statement::CreateTable(ct) => Box::pin(self.create_table(ct)).await,
            Statement::Drop {
                object_type: ast::ObjectType::Table,
                if_exists,
                names,
                cascade,
                ..
            } => Box::pin(self.drop_tables(&names, if_exists, cascade)).await,
            Statement::CreateView(cv) => Box::pin(self.create_view(cv)).await,
            Statement::Drop {
                object_type: ast::ObjectType::View,
                if_exists,
                names,
                cascade,
                ..
            } => Box::pin(self.drop_views(&names, if_exists, cascade)).await,
            Statement::RenameTable(renames) => Box::pin(self.rename_view(&renames)).await,
            Statement::AlterTable(alter) => Box::pin(self.alter_table(alter)).await,
            Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. } => {
                bad("each statement is atomic; use query_batch for several")
            }
            Statement::CreateIndex(ci) => Box::pin(self.create_index(ci)).await,
            Statement::Drop {
                object_type: ast::ObjectType::Index,
                if_exists,
                names,
                ..
            } => Box::pin(self.drop_indexes(&names, if_exists)).await,
            other => bad(format!(
                "statement not supported: {}",
                first_words(&other.to_string())
            )),
        }
    }

    async fn run_explain(&self, mut stmt: Statement) -> Result<StatementResult> {
        self.expand_views(&mut stmt, &HashMap::new())?;
        let ids = self.check_relations(&stmt, &HashMap::new())?;
        // (After the relation check: an unknown table is 404 whatever reads it.)
        // Tarn runs writes and DDL itself, not through a DataFusion plan: DataFusion's
        // EXPLAIN of them shows a plan that never runs, and its ANALYZE fails in its own
        // words ("Insert into not implemented for this table").
        // (`WITH … INSERT` parses as a query whose body is the write.)
        let writes = |q: &Query| {
            matches!(
                q.body.as_ref(),
                ast::SetExpr::Insert(_) | ast::SetExpr::Update(_) | ast::SetExpr::Delete(_)
            )
        };
        if let Statement::Explain { statement, .. } = &stmt
            && !matches!(statement.as_ref(), Statement::Query(q) if !writes(q))
        {
            return bad(format!(
                "EXPLAIN shows the plans of queries (SELECT, WITH, VALUES), not of {}: Tarn runs \
                 writes and DDL itself; EXPLAIN the SELECT a write reads from",
                first_words(&statement.to_string())
            ));
        }
        let view = self.view(HashMap::new(), &ids);
        let (schema, batches) = self.plan_and_collect(stmt, view).await?;
        Ok(StatementResult {
            columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
            schema,
            batches: Some(batches),
            rows_affected: 0,
            notices: Vec::new(),
        })
    }
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
