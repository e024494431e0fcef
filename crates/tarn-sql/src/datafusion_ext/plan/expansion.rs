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
        let w = weigh_plan(&plan);
        if multiplies(w) {
            return Err(crate::error::bad_request(format!(
                "the statement is too complex to plan: nested coalesce, nvl, BETWEEN or \
                 CASE would repeat its terms more than {MAX_COPIED_TERMS} times; name the \
                 repeated part once (a subquery or WITH) or nest less"
            )));
        }
        let n = nesting_of_plan(&plan);
        if n.casts > MAX_NESTED_CASTS {
            return Err(crate::error::bad_request(format!(
                "the statement is too complex to plan: {} casts nested in one another \
                 (at most {MAX_NESTED_CASTS}, counting those the types add); nest less",
                n.casts
            )));
        }
        if n.naming > MAX_NAMING {
            return Err(crate::error::bad_request(
                "the statement is too complex to plan: its function calls nest too deep \
                 for its number of columns; name the nested part once (a subquery or \
                 WITH) or nest less (a long chain of `||` is one call as concat(a, b, …) \
                 or concat_ws(',', a, b, …))"
                    .to_string(),
            ));
        }
        Ok(plan)
    }
}

/// The most casts one path of an expression may nest. DataFusion's physical cast asks
/// its input both whether it is nullable and for its field, and each of those asks the
/// cast below it again: the work doubles per nested cast. 27 levels of
/// `(x IS DISTINCT FROM 1)::int` planned for 359 s; 18 take under a second.
pub(crate) const MAX_NESTED_CASTS: u32 = 18;

/// The most naming work (see [`Nesting::naming`]) a statement's function calls may
/// cost. DataFusion names a call by the names of its arguments, each built as a text of
/// its own, and names it again at each step of planning: a call nested `d` deep costs
/// about d³, and 40 columns of `btrim` nested 240 deep planned for 93 s. Three million
/// is one to six seconds here, by the function (`abs` nested 250 deep, `||` of 200
/// terms, 40 columns of `btrim` nested 60 deep stay under it).
pub(crate) const MAX_NAMING: u64 = 3_000_000;

/// What nesting costs DataFusion's planning (see [`MAX_NESTED_CASTS`], [`MAX_NAMING`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Nesting {
    /// The most casts on one path from an expression's root to a leaf.
    casts: u32,
    /// The sum over function calls of the square of the number of calls they are
    /// nested in (themselves included).
    naming: u64,
}

fn nesting_of_plan(plan: &LogicalPlan) -> Nesting {
    let mut total = Nesting::default();
    let _ = plan.apply(|node| {
        let _ = node.apply_expressions(|e| {
            nesting(e, 0, 0, &mut total);
            Ok(TreeNodeRecursion::Continue)
        });
        let _ = node.apply_subqueries(|sub| {
            let n = nesting_of_plan(sub);
            total.casts = total.casts.max(n.casts);
            total.naming = total.naming.saturating_add(n.naming);
            Ok(TreeNodeRecursion::Continue)
        });
        Ok(TreeNodeRecursion::Continue)
    });
    total
}

/// Adds `e`'s nesting to `total`, `e` being under `calls` calls and `casts` casts.
fn nesting(e: &Expr, calls: u64, casts: u32, total: &mut Nesting) {
    let (calls, casts) = match e {
        // Tarn's checked arithmetic operators name themselves as operators do, in one
        // pass (a chain of 250 `+` plans in a quarter of a second).
        Expr::ScalarFunction(f)
            if f.func.name().starts_with("tarn_float_")
                || matches!(
                    f.func.name(),
                    "tarn_checked_add"
                        | "tarn_checked_sub"
                        | "tarn_checked_mul"
                        | "tarn_checked_div"
                ) =>
        {
            (calls, casts)
        }
        Expr::ScalarFunction(_) | Expr::AggregateFunction(_) | Expr::WindowFunction(_) => {
            let calls = calls + 1;
            total.naming = total.naming.saturating_add(calls.saturating_mul(calls));
            (calls, casts)
        }
        Expr::Cast(_) | Expr::TryCast(_) => (calls, casts + 1),
        _ => (calls, casts),
    };
    total.casts = total.casts.max(casts);
    let _ = e.apply_children(|c| {
        nesting(c, calls, casts, total);
        Ok(TreeNodeRecursion::Continue)
    });
}

/// Whether the copies of `w` multiply the statement: past [`MAX_COPIED_TERMS`] and more
/// than four times its terms as written (a long IN list under one coalesce is copied
/// once, a cost linear in the statement, and plans).
pub(crate) fn multiplies(w: Weight) -> bool {
    w.expanded.saturating_sub(w.plain) > MAX_COPIED_TERMS && w.expanded > w.plain.saturating_mul(4)
}

/// The terms of a plan's expressions, its subqueries' included (a subquery copied by
/// a coalesce around it is planned once per copy).
fn weigh_plan(plan: &LogicalPlan) -> Weight {
    let mut total = Weight::ONE;
    let _ = plan.apply(|node| {
        let inputs: Vec<&DFSchema> = node.inputs().iter().map(|i| i.schema().as_ref()).collect();
        let _ = node.apply_expressions(|e| {
            total = total.plus(weigh(e, &inputs), 1);
            Ok(TreeNodeRecursion::Continue)
        });
        Ok(TreeNodeRecursion::Continue)
    });
    total
}

/// The terms of an expression as written, and once the simplifier has made its copies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Weight {
    plain: u64,
    expanded: u64,
}

impl Weight {
    const ONE: Weight = Weight {
        plain: 1,
        expanded: 1,
    };

    /// `self` with `w` added, its expansion written `copies` times.
    fn plus(self, w: Weight, copies: u64) -> Weight {
        Weight {
            plain: self.plain.saturating_add(w.plain),
            expanded: self
                .expanded
                .saturating_add(w.expanded.saturating_mul(copies)),
        }
    }
}

/// How many times the simplifier writes each argument of `e` (see the module's
/// documentation); 1 for every argument of every other expression.
pub(crate) fn weigh(e: &Expr, inputs: &[&DFSchema]) -> Weight {
    let mut children = Vec::new();
    let _ = e.apply_children(|c| {
        children.push(weigh(c, inputs));
        Ok(TreeNodeRecursion::Continue)
    });
    // A subquery is planned once per copy of the expression that holds it.
    let subquery = match e {
        Expr::ScalarSubquery(sq) => Some(weigh_plan(&sq.subquery)),
        Expr::Exists(x) => Some(weigh_plan(&x.subquery.subquery)),
        Expr::InSubquery(x) => Some(weigh_plan(&x.subquery.subquery)),
        _ => None,
    };
    let rewritten_case = match e {
        Expr::Case(c) if c.expr.is_none() => {
            let n = c.when_then_expr.len();
            let literal = |v: &Expr| match v {
                Expr::Literal(datafusion::common::ScalarValue::Boolean(b), _) => Some(*b),
                _ => None,
            };
            let thens: Vec<Option<Option<bool>>> =
                c.when_then_expr.iter().map(|(_, t)| literal(t)).collect();
            let all_literal = thens.iter().all(Option::is_some);
            let trues = thens.iter().filter(|t| **t == Some(Some(true))).count();
            let falses = thens.iter().filter(|t| **t == Some(Some(false))).count();
            // The simplifier's boolean-CASE rewrites (see its rules for Case): into AND/OR
            // terms when there are few WHENs or few true (or, negated, few false) THENs.
            let rewritten = (n < 3
                && !c
                    .when_then_expr
                    .iter()
                    .any(|(_, then)| not_boolean(then, inputs)))
                || (all_literal && (trues < 3 || falses < 3));
            rewritten.then_some(n)
        }
        _ => None,
    };
    let copies = |i: usize| -> u64 {
        match e {
            Expr::ScalarFunction(f)
                if matches!(f.func.name(), "coalesce" | "nvl" | "ifnull")
                    && i + 1 < children.len() =>
            {
                2
            }
            Expr::Between(_) if i == 0 => 2,
            // The conditions (WHEN, THEN pairs first, then the ELSE): the k-th WHEN is
            // written in its own term and in the negation of every later one's.
            Expr::Case(_) if i.is_multiple_of(2) => match rewritten_case {
                Some(n) if i < 2 * n => (n - i / 2 + 1) as u64,
                _ => 1,
            },
            _ => 1,
        }
    };
    let mut w = Weight::ONE;
    for (i, c) in children.iter().enumerate() {
        w = w.plus(*c, copies(i));
    }
    if let Some(sub) = subquery {
        w = w.plus(sub, 1);
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
    use datafusion::logical_expr::{cast, col, lit};

    fn nested(depth: usize) -> Expr {
        (0..depth).fold(lit(1), |e, _| coalesce(vec![e, lit(1)]))
    }

    #[test]
    fn copies_double_per_level_of_coalesce() {
        let w = weigh(&nested(10), &[]);
        assert!(!multiplies(w));
        assert!(multiplies(weigh(&nested(20), &[])));
        assert_eq!(w.plain, 21);
        assert!(w.expanded > 1024 && w.expanded < 4096, "{}", w.expanded);
        // The last argument is written once.
        let flat = weigh(&coalesce(vec![col("a"), col("b"), col("c")]), &[]);
        assert_eq!((flat.plain, flat.expanded), (4, 6));
    }

    #[test]
    fn nesting_counts_casts_on_a_path_and_calls_by_depth() {
        use datafusion::arrow::datatypes::DataType;
        use datafusion::functions::string::expr_fn::btrim;
        let casts = (0..5).fold(col("x"), |e, _| cast(e.not_eq(lit(1)), DataType::Int32));
        let mut n = Nesting::default();
        nesting(&casts, 0, 0, &mut n);
        assert_eq!((n.casts, n.naming), (5, 0));
        let calls = (0..3).fold(col("x"), |e, _| btrim(vec![e]));
        let mut n = Nesting::default();
        nesting(&calls, 0, 0, &mut n);
        assert_eq!((n.casts, n.naming), (0, 1 + 4 + 9));
    }

    #[test]
    fn a_between_repeats_its_operand_only() {
        let w = weigh(&col("a").between(lit(1), lit(2)), &[]);
        assert_eq!((w.plain, w.expanded), (4, 5));
    }
}
