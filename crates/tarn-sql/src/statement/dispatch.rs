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
                ..
            } => Box::pin(self.drop_tables(&names, if_exists)).await,
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

    async fn run_explain(&self, stmt: Statement) -> Result<StatementResult> {
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

/// The statement as DataFusion's planner takes it. An EXPLAIN with a format or with
/// PostgreSQL's option list goes as DataFusion's own EXPLAIN: its planner reads the
/// sqlparser form's format as the text `FORMAT JSON`, which no format is, and ignores
/// the option list. PostgreSQL's names are taken for DataFusion's (`TEXT` for `indent`,
/// `JSON` for `pgjson`); `BUFFERS`, `WAL`, `SETTINGS` and `MEMORY`, which only add
/// detail PostgreSQL's executor has, are accepted and add nothing.
pub(crate) fn planner_statement(stmt: Statement) -> Result<datafusion::sql::parser::Statement> {
    use datafusion::common::format::{ExplainFormat, ExplainStatementOptions};
    use datafusion::sql::parser::{ExplainStatement, Statement as DfStatement};
    use std::str::FromStr;
    let Statement::Explain {
        describe_alias: ast::DescribeAlias::Explain,
        analyze,
        verbose,
        format,
        options,
        statement,
        ..
    } = stmt
    else {
        return Ok(DfStatement::Statement(Box::new(stmt)));
    };
    let named = |name: &str| -> Result<ExplainFormat> {
        let name = match name.to_ascii_lowercase().as_str() {
            "text" | "traditional" => "indent".to_string(),
            "json" => "pgjson".to_string(),
            other => other.to_string(),
        };
        ExplainFormat::from_str(&name).or_else(|_| {
            bad(format!(
                "EXPLAIN format {} is not supported; the formats are TEXT, JSON, TREE and \
                 GRAPHVIZ",
                tarn_catalog::shown(&name)
            ))
        })
    };
    let mut opts = match options {
        Some(list) => {
            let mut kept = Vec::with_capacity(list.len());
            let mut format = None;
            for o in list {
                match o.name.value.to_ascii_lowercase().as_str() {
                    "buffers" | "wal" | "settings" | "memory" => {}
                    "format" => {
                        let written = match &o.arg {
                            Some(ast::Expr::Identifier(i)) => i.value.clone(),
                            Some(ast::Expr::Value(v)) => match &v.value {
                                ast::Value::SingleQuotedString(s) => s.clone(),
                                other => other.to_string(),
                            },
                            Some(other) => other.to_string(),
                            None => String::new(),
                        };
                        format = Some(named(&written)?);
                    }
                    _ => kept.push(o),
                }
            }
            // FORMAT was taken out above, so the format is the one read there.
            let mut opts = ExplainStatementOptions::from_utility_options(&kept)?;
            opts.format = format;
            opts
        }
        None => ExplainStatementOptions {
            analyze,
            verbose,
            ..Default::default()
        },
    };
    if let Some(kind) = format {
        let (ast::AnalyzeFormatKind::Keyword(f) | ast::AnalyzeFormatKind::Assignment(f)) = kind;
        opts.format = Some(named(&f.to_string())?);
    }
    Ok(DfStatement::Explain(ExplainStatement {
        options: opts,
        statement: Box::new(DfStatement::Statement(statement)),
    }))
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
