//! The planner of the `<#>` operator: hybrid (`(vector, text) <#> engine_hybrid_record(…)`)
//! to `hybrid.rs`, text (BM25) to `text_search.rs`, vectors and bags to the exact
//! scorer `engine_similarity` (`similarity.rs`, which the other two build on).

use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::BinaryOperator;

use crate::datafusion_ext::functions::similarity::{Kind, OPERATOR, kind, query_literal, udf};

/// Plans `a <#> b` as `engine_similarity(a, b)`.
#[derive(Debug)]
pub struct SimilarityPlanner;

impl ExprPlanner for SimilarityPlanner {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawBinaryExpr>> {
        // Called for every binary operator planned: a deep expression's planning meets
        // the statement timeout here (`context::deadline`).
        crate::datafusion_ext::context::deadline::check()?;
        match &expr.op {
            BinaryOperator::Custom(op) if op == OPERATOR => {
                // Hybrid: `(vector, text) <#> engine_hybrid_record(…)`.
                if let Expr::ScalarFunction(f) = &expr.right
                    && matches!(
                        f.func.name(),
                        crate::datafusion_ext::functions::hybrid::RECORD
                            | crate::datafusion_ext::functions::hybrid::SCORES
                    )
                {
                    return Ok(PlannerResult::Planned(
                        crate::datafusion_ext::functions::hybrid::plan(&expr.left, f, schema)?,
                    ));
                }
                let stored = expr.left.get_type(schema).map(|t| kind(&t)).ok();
                let right = query_literal(expr.right, stored)?;
                // Text: BM25 bound to the statement's snapshot of the column's table.
                if let Ok(ty) = expr.left.get_type(schema)
                    && kind(&ty) == Kind::Text
                    && let Some(bound) = crate::datafusion_ext::functions::text_search::plan(
                        &expr.left, &right, schema,
                    )?
                {
                    return Ok(PlannerResult::Planned(bound));
                }
                Ok(PlannerResult::Planned(Expr::ScalarFunction(
                    ScalarFunction::new_udf(udf(), vec![expr.left, right]),
                )))
            }
            _ => Ok(PlannerResult::Original(expr)),
        }
    }
}
