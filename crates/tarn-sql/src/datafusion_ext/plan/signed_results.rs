//! Functions that DataFusion types unsigned (`cardinality`, `array_length`,
//! `array_ndims`, `array_position`: `UInt64`) give PostgreSQL's signed integers.
//!
//! PostgreSQL has no unsigned types: those functions return `integer` there. Left
//! unsigned, `cardinality(a) + 1` is coerced to `numeric(20,0)` (the type that holds both
//! an unsigned and a signed 64-bit integer) and answered as a decimal string, and a table
//! made from such a query gets a numeric column. This analyzer rule, which runs before
//! type coercion, casts each scalar function's unsigned result to the signed type
//! PostgreSQL would give: `integer` for 8-, 16- and 64-bit results of the array
//! functions above (their values are lengths and positions), `bigint` for others.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// Functions whose unsigned results are lengths, counts or positions: `integer` in
/// PostgreSQL.
const INTEGER_RESULTS: &[&str] = &[
    "cardinality",
    "array_length",
    "list_length",
    "array_ndims",
    "list_ndims",
    "array_position",
    "list_position",
    "array_indexof",
    "list_indexof",
];

/// The analyzer rule of this module; install before DataFusion's type coercion.
#[derive(Debug)]
pub(crate) struct SignedResults;

impl AnalyzerRule for SignedResults {
    fn name(&self) -> &str {
        "tarn_signed_results"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let rewritten = plan.transform_up_with_subqueries(|plan| {
            let schema = super::input_schema(&plan);
            let preserver = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let saved = preserver.save(&e);
                let t = e.transform_up(|e| signed(e, &schema))?;
                Ok(if t.transformed {
                    Transformed::yes(saved.restore(t.data))
                } else {
                    t
                })
            })
        })?;
        if !rewritten.transformed {
            return Ok(rewritten.data);
        }
        // The planner typed the columns above the calls unsigned: derived anew.
        rewritten
            .data
            .transform_up_with_subqueries(|p| Ok(Transformed::yes(p.recompute_schema()?)))
            .map(|t| t.data)
    }
}

/// `e` cast to a signed type when it is a call with an unsigned result.
fn signed(e: Expr, schema: &DFSchema) -> DfResult<Transformed<Expr>> {
    let Expr::ScalarFunction(f) = &e else {
        return Ok(Transformed::no(e));
    };
    let integer = INTEGER_RESULTS.contains(&f.func.name());
    let to = match e.get_type(schema) {
        Ok(DataType::UInt8 | DataType::UInt16) => DataType::Int32,
        Ok(DataType::UInt32) => DataType::Int64,
        Ok(DataType::UInt64) if integer => DataType::Int32,
        Ok(DataType::UInt64) => DataType::Int64,
        // Not unsigned, or not typed yet (the error comes from planning as before).
        _ => return Ok(Transformed::no(e)),
    };
    Ok(Transformed::yes(e.cast_to(&to, schema)?))
}
