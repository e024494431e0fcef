//! The statement as DataFusion's planner takes it: PostgreSQL's EXPLAIN forms read into
//! DataFusion's own EXPLAIN (a leaf of `statement`, used by the transaction's planning).

use datafusion::sql::sqlparser::ast::{self, Statement};

use crate::error::{Result, bad};

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
