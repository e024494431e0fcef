//! A quoted literal beside typed values takes their type, as PostgreSQL's literals of
//! "unknown" type do.
//!
//! PostgreSQL types `'a'` only from its context: in `CASE … THEN 1 ELSE 'a' END`,
//! `coalesce(x, '0')` or `SELECT 1 UNION SELECT '2'` the literal is read as the other
//! branches' type (an integer there, so `'a'` is "invalid input syntax for type
//! integer" and `'2'` is the number 2). DataFusion's coercion instead turns every
//! branch into text, so such a CASE answered `'1'` as text and a UNION mixed numbers
//! and words in one text column. This analyzer rule, which runs before type coercion,
//! casts each plain string literal among the results of a CASE, the arguments of
//! `coalesce`, `nullif`, `greatest` and `least`, and the columns of a UNION's inputs to
//! the type of the first result that is a number, a boolean or a date/time value.
//! Results that are all text, or all literals, are left as they are.
//!
//! ```text
//! before: Projection: CASE WHEN Boolean(true) THEN Int64(1) ELSE Utf8("a") END
//! after:  Projection: CASE WHEN Boolean(true) THEN Int64(1) ELSE CAST(Utf8("a") AS Int64) END
//! ```

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::{Case, Cast};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, Projection, Union};
use datafusion::optimizer::AnalyzerRule;

/// Calls whose arguments PostgreSQL resolves to one type, as a CASE's results.
const SAME_TYPE_CALLS: &[&str] = &["coalesce", "nullif", "greatest", "least"];

/// The analyzer rule of this module; install before DataFusion's type coercion.
#[derive(Debug)]
pub(crate) struct UnknownLiterals;

impl AnalyzerRule for UnknownLiterals {
    fn name(&self) -> &str {
        "tarn_unknown_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let rewritten = plan.transform_up_with_subqueries(|plan| {
            let plan = match plan {
                LogicalPlan::Union(u) => union(u)?,
                other => Transformed::no(other),
            };
            plan.transform_data(|plan| {
                let schema = super::input_schema(&plan);
                let preserver = NamePreserver::new(&plan);
                plan.map_expressions(|e| {
                    let saved = preserver.save(&e);
                    let t = e.transform_up(|e| typed(e, &schema))?;
                    Ok(if t.transformed {
                        Transformed::yes(saved.restore(t.data))
                    } else {
                        t
                    })
                })
            })
        })?;
        if !rewritten.transformed {
            return Ok(rewritten.data);
        }
        super::rederive_schemas(rewritten.data)
    }
}

/// Whether `e` is a quoted literal (a non-NULL string constant, before any cast).
fn is_string_literal(mut e: &Expr) -> bool {
    while let Expr::Alias(a) = e {
        e = &a.expr;
    }
    matches!(
        e,
        Expr::Literal(
            ScalarValue::Utf8(Some(_))
                | ScalarValue::LargeUtf8(Some(_))
                | ScalarValue::Utf8View(Some(_)),
            _
        )
    )
}

/// Whether a value of type `t` decides the type of the literals beside it.
fn decides(t: &DataType) -> bool {
    t.is_numeric()
        || matches!(
            t,
            DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(..)
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Interval(_)
        )
}

/// The type the string literals among `values` take: that of the first value that is
/// not a string literal and has a deciding type, when some value is a string literal.
fn literal_type<'a>(
    values: impl Iterator<Item = &'a Expr> + Clone,
    schema: &DFSchema,
) -> Option<DataType> {
    if !values.clone().any(is_string_literal) {
        return None;
    }
    values
        .filter(|e| !is_string_literal(e))
        .filter_map(|e| e.get_type(schema).ok())
        .find(decides)
}

fn cast(e: Box<Expr>, to: &DataType) -> Box<Expr> {
    if is_string_literal(&e) {
        Box::new(Expr::Cast(Cast::new(e, to.clone())))
    } else {
        e
    }
}

/// `e` with the string literals among its results cast (a CASE or a same-type call).
fn typed(e: Expr, schema: &DFSchema) -> DfResult<Transformed<Expr>> {
    match e {
        Expr::Case(c) => {
            let results = c
                .when_then_expr
                .iter()
                .map(|(_, then)| then.as_ref())
                .chain(c.else_expr.as_deref());
            let Some(to) = literal_type(results, schema) else {
                return Ok(Transformed::no(Expr::Case(c)));
            };
            Ok(Transformed::yes(Expr::Case(Case {
                expr: c.expr,
                when_then_expr: c
                    .when_then_expr
                    .into_iter()
                    .map(|(when, then)| (when, cast(then, &to)))
                    .collect(),
                else_expr: c.else_expr.map(|e| cast(e, &to)),
            })))
        }
        Expr::ScalarFunction(mut f) if SAME_TYPE_CALLS.contains(&f.func.name()) => {
            let Some(to) = literal_type(f.args.iter(), schema) else {
                return Ok(Transformed::no(Expr::ScalarFunction(f)));
            };
            f.args = f
                .args
                .into_iter()
                .map(|a| *cast(Box::new(a), &to))
                .collect();
            Ok(Transformed::yes(Expr::ScalarFunction(f)))
        }
        other => Ok(Transformed::no(other)),
    }
}

/// A UNION whose inputs are projections with string literals in a column where another
/// input has a deciding type: those literals cast to it.
fn union(u: Union) -> DfResult<Transformed<LogicalPlan>> {
    let width = u.schema.fields().len();
    let mut targets: Vec<Option<DataType>> = vec![None; width];
    for (i, target) in targets.iter_mut().enumerate() {
        let mut literal = false;
        for input in &u.inputs {
            match input.as_ref() {
                LogicalPlan::Projection(p) if p.expr.get(i).is_some_and(is_string_literal) => {
                    literal = true
                }
                other => {
                    let t = other.schema().field(i).data_type();
                    if target.is_none() && decides(t) {
                        *target = Some(t.clone());
                    }
                }
            }
        }
        if !literal {
            *target = None;
        }
    }
    if targets.iter().all(Option::is_none) {
        return Ok(Transformed::no(LogicalPlan::Union(u)));
    }
    let inputs = u
        .inputs
        .into_iter()
        .map(|input| match input.as_ref() {
            LogicalPlan::Projection(p) => {
                let expr = p
                    .expr
                    .iter()
                    .zip(&targets)
                    .zip(p.schema.fields())
                    .map(|((e, to), field)| match to {
                        Some(to) if is_string_literal(e) => {
                            Expr::Cast(Cast::new(Box::new(e.clone().unalias()), to.clone()))
                                .alias(field.name())
                        }
                        _ => e.clone(),
                    })
                    .collect();
                Ok(std::sync::Arc::new(LogicalPlan::Projection(
                    Projection::try_new(expr, p.input.clone())?,
                )))
            }
            _ => Ok(input),
        })
        .collect::<DfResult<Vec<_>>>()?;
    Ok(Transformed::yes(LogicalPlan::Union(
        Union::try_new_with_loose_types(inputs)?,
    )))
}
