//! A limit on how far DataFusion's simplifier will copy a statement's expressions.
//!
//! Some of DataFusion's rewrites repeat an argument: `coalesce(a, b)` (and `nvl`,
//! `ifnull`) becomes `CASE WHEN a IS NOT NULL THEN a ELSE b END`, `x BETWEEN l AND h`
//! becomes `x >= l AND x <= h`, and a boolean `CASE` with one or two `WHEN`s becomes
//! AND/OR terms that name each condition up to three times. Nested, the copies
//! multiply: `coalesce(coalesce(…(1, 1)…), 1)` 22 deep is a 150-byte statement whose
//! plan grows to four million terms, and planning it took minutes and gigabytes in one
//! synchronous step that the statement timeout cannot reach.
//!
//! This analyzer rule counts, before the optimizer runs, how many terms the statement's
//! expressions would have once every such copy is made, and refuses the statement (a
//! 400, before any work) when the copies alone would exceed [`MAX_COPIED_TERMS`]. A
//! statement a person writes repeats a handful of terms; the count is linear in the size
//! of the plan.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ExprSchema, Result as DfResult};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// The most terms the simplifier's copies may add to a statement's expressions.
pub(crate) const MAX_COPIED_TERMS: u64 = 20_000;

/// The analyzer rule of this module (see the module's documentation).
#[derive(Debug)]
pub(crate) struct ExpansionLimit;

impl AnalyzerRule for ExpansionLimit {
    fn name(&self) -> &str {
        "tarn_expansion_limit"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let mut copied = 0u64;
        plan.apply_with_subqueries(|node| {
            let inputs: Vec<&DFSchema> =
                node.inputs().iter().map(|i| i.schema().as_ref()).collect();
            node.apply_expressions(|e| {
                let w = weigh(e, &inputs);
                copied = copied.saturating_add(w.expanded.saturating_sub(w.plain));
                Ok(TreeNodeRecursion::Continue)
            })?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        if copied > MAX_COPIED_TERMS {
            return Err(crate::error::bad_request(format!(
                "the statement is too complex to plan: nested coalesce, nvl, BETWEEN or \
                 CASE would repeat its terms more than {MAX_COPIED_TERMS} times; name the \
                 repeated part once (a subquery or WITH) or nest less"
            )));
        }
        Ok(plan)
    }
}

/// The terms of an expression as written, and once the simplifier has made its copies.
#[derive(Clone, Copy)]
struct Weight {
    plain: u64,
    expanded: u64,
}

/// How many times the simplifier writes each argument of `e` (see the module's
/// documentation); 1 for every argument of every other expression.
fn weigh(e: &Expr, inputs: &[&DFSchema]) -> Weight {
    let mut children = Vec::new();
    // A subquery's plan is counted as a plan of its own (`apply_with_subqueries`).
    let _ = e.apply_children(|c| {
        children.push(weigh(c, inputs));
        Ok(TreeNodeRecursion::Continue)
    });
    let copies = |i: usize| -> u64 {
        match e {
            Expr::ScalarFunction(f)
                if matches!(f.func.name(), "coalesce" | "nvl" | "ifnull")
                    && i + 1 < children.len() =>
            {
                2
            }
            Expr::Between(_) if i == 0 => 2,
            // The conditions: WHEN, THEN pairs first, then the ELSE.
            Expr::Case(c)
                if c.expr.is_none()
                    && c.when_then_expr.len() < 3
                    && i.is_multiple_of(2)
                    && i < 2 * c.when_then_expr.len()
                    && !c
                        .when_then_expr
                        .iter()
                        .any(|(_, then)| not_boolean(then, inputs)) =>
            {
                3
            }
            _ => 1,
        }
    };
    let mut w = Weight {
        plain: 1,
        expanded: 1,
    };
    for (i, c) in children.iter().enumerate() {
        w.plain = w.plain.saturating_add(c.plain);
        w.expanded = w
            .expanded
            .saturating_add(c.expanded.saturating_mul(copies(i)));
    }
    w
}

/// Whether `e` is plainly not a boolean (a constant, a column or a cast of another
/// type, or arithmetic): a CASE whose results are not boolean is left as it is.
/// Anything else may be boolean and counts as one.
fn not_boolean(e: &Expr, inputs: &[&DFSchema]) -> bool {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::Operator;
    match e {
        Expr::Literal(v, _) => v.data_type() != DataType::Boolean,
        Expr::Cast(c) => c.field.data_type() != &DataType::Boolean,
        Expr::TryCast(c) => c.field.data_type() != &DataType::Boolean,
        Expr::BinaryExpr(b) => matches!(
            b.op,
            Operator::Plus
                | Operator::Minus
                | Operator::Multiply
                | Operator::Divide
                | Operator::Modulo
                | Operator::StringConcat
        ),
        Expr::Negative(_) => true,
        Expr::Alias(a) => not_boolean(&a.expr, inputs),
        Expr::Column(c) => inputs.iter().any(|s| {
            s.field_from_column(c)
                .is_ok_and(|f| f.data_type() != &DataType::Boolean)
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::functions::core::expr_fn::coalesce;
    use datafusion::logical_expr::{col, lit};

    fn nested(depth: usize) -> Expr {
        (0..depth).fold(lit(1), |e, _| coalesce(vec![e, lit(1)]))
    }

    #[test]
    fn copies_double_per_level_of_coalesce() {
        let w = weigh(&nested(10), &[]);
        assert_eq!(w.plain, 21);
        assert!(w.expanded > 1024 && w.expanded < 4096, "{}", w.expanded);
        // The last argument is written once.
        let flat = weigh(&coalesce(vec![col("a"), col("b"), col("c")]), &[]);
        assert_eq!((flat.plain, flat.expanded), (4, 6));
    }

    #[test]
    fn a_between_repeats_its_operand_only() {
        let w = weigh(&col("a").between(lit(1), lit(2)), &[]);
        assert_eq!((w.plain, w.expanded), (4, 5));
    }
}
