//! `ORDER BY <#> … DESC` puts NULL scores last in every plan (SPEC §5), not only in the
//! plans the search node takes: a sort key that is a `<#>` score or computed from one
//! (`(e <#> q) * 2`, `max(e <#> q)`, a window function over scores) — directly, or
//! through output aliases, subquery aliases, joins, windows, group keys, aggregates and
//! unions — sorted
//! descending with the default NULL placement gets `NULLS LAST`. So does a score key of
//! an aggregate's own ORDER BY (`array_agg(id ORDER BY e <#> q DESC)`) and of a window's
//! `OVER (ORDER BY …)`: the best match is first there too.
//!
//! Before (`ORDER BY s DESC LIMIT 1` under a filter the search node cannot take):
//!
//! ```text
//! Sort: s DESC NULLS FIRST, fetch=1
//!   Projection: t.id, engine_similarity(t.e, [..]) AS s
//!     Filter: random() < Float64(2)
//! ```
//!
//! After:
//!
//! ```text
//! Sort: s DESC NULLS LAST, fetch=1
//!   …
//! ```
//!
//! A logical plan cannot tell `DESC` from `DESC NULLS FIRST` (both are
//! `nulls_first = true`), so the statement's text decides: a statement that writes
//! `NULLS FIRST` on a descending key anywhere keeps PostgreSQL's placement in all its
//! sorts (see [`writes_desc_nulls_first`]), and the search node, which always ranks
//! NULLs last, declines its keys.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::expr::Sort as SortExpr;
use datafusion::logical_expr::{Distinct, Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::{self, Visit, Visitor};
use std::ops::ControlFlow;

use crate::datafusion_ext::context::read_view::STATEMENT_VIEW;
use crate::datafusion_ext::functions::similarity;

/// Gives descending `<#>` sort keys `NULLS LAST` (see the module docs).
#[derive(Debug, Default)]
pub struct ScoreNullsLast;

impl AnalyzerRule for ScoreNullsLast {
    fn name(&self) -> &str {
        "tarn_score_nulls_last"
    }

    fn analyze(
        &self,
        plan: LogicalPlan,
        _config: &ConfigOptions,
    ) -> datafusion::common::Result<LogicalPlan> {
        if STATEMENT_VIEW
            .try_with(|v| v.desc_nulls_first_written)
            .unwrap_or(false)
        {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|p| match p {
            LogicalPlan::Sort(mut sort) => {
                let changed = last_for_scores(&mut sort.expr, &sort.input);
                Ok(Transformed::new_transformed(
                    LogicalPlan::Sort(sort),
                    changed,
                ))
            }
            // `DISTINCT ON (g) … ORDER BY g, e <#> q DESC`: the row kept per group is
            // the first of its sort, so the best match, not a NULL score.
            LogicalPlan::Distinct(Distinct::On(mut on)) => {
                let changed = match on.sort_expr.as_mut() {
                    Some(keys) => last_for_scores(keys, &on.input),
                    None => false,
                };
                Ok(Transformed::new_transformed(
                    LogicalPlan::Distinct(Distinct::On(on)),
                    changed,
                ))
            }
            // An aggregate's own ORDER BY (`array_agg(id ORDER BY e <#> q DESC)`) and a
            // window's (`row_number() OVER (ORDER BY e <#> q DESC)`).
            LogicalPlan::Aggregate(a) if a.aggr_expr.iter().any(orders_desc_default) => {
                let mut aggr_expr = a.aggr_expr.clone();
                if !ordered_calls_last(&mut aggr_expr, &a.input) {
                    return Ok(Transformed::no(LogicalPlan::Aggregate(a)));
                }
                let a =
                    datafusion::logical_expr::Aggregate::try_new(a.input, a.group_expr, aggr_expr)?;
                Ok(Transformed::yes(LogicalPlan::Aggregate(a)))
            }
            LogicalPlan::Window(w) if w.window_expr.iter().any(orders_desc_default) => {
                let mut window_expr = w.window_expr.clone();
                if !ordered_calls_last(&mut window_expr, &w.input) {
                    return Ok(Transformed::no(LogicalPlan::Window(w)));
                }
                let w = datafusion::logical_expr::Window::try_new(window_expr, w.input)?;
                Ok(Transformed::yes(LogicalPlan::Window(w)))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }
}

/// The ORDER BY keys of an aggregate or window call (under an alias or not).
fn call_order(call: &mut Expr) -> Option<&mut Vec<SortExpr>> {
    match call {
        Expr::Alias(a) => call_order(a.expr.as_mut()),
        Expr::AggregateFunction(f) => Some(&mut f.params.order_by),
        Expr::WindowFunction(f) => Some(&mut f.params.order_by),
        _ => None,
    }
}

/// Whether an aggregate or window call orders by a descending key with the default
/// NULL placement: the only calls [`ordered_calls_last`] can change, so the others'
/// plan nodes are not copied.
fn orders_desc_default(call: &Expr) -> bool {
    let keys = match call {
        Expr::Alias(a) => return orders_desc_default(&a.expr),
        Expr::AggregateFunction(f) => &f.params.order_by,
        Expr::WindowFunction(f) => &f.params.order_by,
        _ => return false,
    };
    keys.iter().any(|k| !k.asc && k.nulls_first)
}

/// [`last_for_scores`] on the ORDER BY of each aggregate or window call in `calls`
/// (over `input`). A changed call keeps its name under an alias: the name spells the
/// ORDER BY, and the plan above refers to the column by it.
fn ordered_calls_last(calls: &mut [Expr], input: &LogicalPlan) -> bool {
    let mut changed = false;
    for call in calls.iter_mut() {
        let name = call.schema_name().to_string();
        let aliased = matches!(call, Expr::Alias(_));
        let Some(keys) = call_order(call) else {
            continue;
        };
        if !last_for_scores(keys, input) {
            continue;
        }
        changed = true;
        if !aliased {
            let bare = std::mem::replace(call, Expr::Literal(ScalarValue::Null, None));
            *call = bare.alias(name);
        }
    }
    changed
}

/// Sets `NULLS LAST` on the descending, default-placed keys of `keys` that are scores
/// over `input`; whether any changed.
fn last_for_scores(keys: &mut [SortExpr], input: &LogicalPlan) -> bool {
    let mut changed = false;
    for key in keys {
        if !key.asc && key.nulls_first && is_score(&key.expr, input) {
            key.nulls_first = false;
            changed = true;
        }
    }
    changed
}

/// Whether `e`, evaluated over `plan`'s output, is computed from a `<#>` score: the
/// score itself, or any expression, aggregate or window function over one
/// (`(e <#> q) * 2`, `COALESCE(e <#> q, 0)`, `max(e <#> q)`), or a scalar subquery
/// whose column is one (`(SELECT e <#> q)`).
fn is_score(e: &Expr, plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::TreeNode;
    e.exists(|x| {
        Ok(match x {
            Expr::ScalarFunction(f) => f.func.name() == similarity::FUNCTION,
            Expr::Column(c) => column_is_score(c, plan),
            // `(SELECT e <#> q)`, `(SELECT max(k.e <#> q) FROM k WHERE …)`: the
            // subquery's one column, followed into its plan.
            Expr::ScalarSubquery(sq) => {
                let inner = sq.subquery.as_ref();
                inner.schema().fields().len() == 1
                    && is_score(
                        &Expr::Column(Column::from(inner.schema().qualified_field(0))),
                        inner,
                    )
            }
            _ => false,
        })
    })
    .unwrap_or(false)
}

/// Whether column `c` of `plan`'s output is a `<#>` score: followed down to the
/// expression that computes it.
fn column_is_score(c: &Column, plan: &LogicalPlan) -> bool {
    let Ok(i) = plan.schema().index_of_column(c) else {
        return false;
    };
    let nth = |input: &LogicalPlan, i: usize| -> Option<Expr> {
        (i < input.schema().fields().len())
            .then(|| Expr::Column(Column::from(input.schema().qualified_field(i))))
    };
    match plan {
        LogicalPlan::Projection(p) => p.expr.get(i).is_some_and(|e| is_score(e, &p.input)),
        LogicalPlan::SubqueryAlias(a) => nth(&a.input, i).is_some_and(|e| is_score(&e, &a.input)),
        // Group keys (under ROLLUP, CUBE or GROUPING SETS each distinct key once, then
        // the grouping id), then aggregates.
        LogicalPlan::Aggregate(a) => {
            let keys = a.group_expr_len().unwrap_or(a.group_expr.len());
            if i >= keys {
                return a
                    .aggr_expr
                    .get(i - keys)
                    .is_some_and(|e| is_score(e, &a.input));
            }
            match a.group_expr.as_slice() {
                [Expr::GroupingSet(set)] => set
                    .distinct_expr()
                    .get(i)
                    .is_some_and(|e| is_score(e, &a.input)),
                keys => keys.get(i).is_some_and(|e| is_score(e, &a.input)),
            }
        }
        // The input's columns, then the window functions.
        LogicalPlan::Window(w) => {
            let n = w.input.schema().fields().len();
            if i < n {
                nth(&w.input, i).is_some_and(|e| is_score(&e, &w.input))
            } else {
                w.window_expr
                    .get(i - n)
                    .is_some_and(|e| is_score(e, &w.input))
            }
        }
        // A column that is a score in any branch (the others constants, say) orders as
        // scores do: its NULLs last.
        LogicalPlan::Union(u) => u
            .inputs
            .iter()
            .any(|input| nth(input, i).is_some_and(|e| is_score(&e, input))),
        LogicalPlan::Distinct(Distinct::On(_)) => false,
        // By position: the output is the left side's columns then the right's, or one
        // side's alone (semi, anti and mark joins keep one side; mark adds a flag).
        LogicalPlan::Join(j) => {
            use datafusion::logical_expr::JoinType as J;
            let left = j.left.schema().fields().len();
            match j.join_type {
                J::LeftSemi | J::LeftAnti | J::LeftMark => {
                    nth(&j.left, i).is_some_and(|e| is_score(&e, &j.left))
                }
                J::RightSemi | J::RightAnti | J::RightMark => {
                    nth(&j.right, i).is_some_and(|e| is_score(&e, &j.right))
                }
                _ if i < left => nth(&j.left, i).is_some_and(|e| is_score(&e, &j.left)),
                _ => nth(&j.right, i - left).is_some_and(|e| is_score(&e, &j.right)),
            }
        }
        LogicalPlan::Filter(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Distinct(_)
        | LogicalPlan::Repartition(_) => plan
            .inputs()
            .first()
            .is_some_and(|input| nth(input, i).is_some_and(|e| is_score(&e, input))),
        _ => false,
    }
}

/// Whether the statement writes `DESC NULLS FIRST` in an ORDER BY (a query's, an
/// aggregate's or a window's), the one placement the score rule must leave as written.
pub(crate) fn writes_desc_nulls_first(stmt: &ast::Statement) -> bool {
    struct Find(bool);
    fn check(keys: &[ast::OrderByExpr]) -> bool {
        keys.iter()
            .any(|k| k.options.asc == Some(false) && k.options.nulls_first == Some(true))
    }
    impl Visitor for Find {
        type Break = ();
        // An aggregate's `ORDER BY` argument clause and a window's `OVER (ORDER BY …)`.
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> ControlFlow<()> {
            let ast::Expr::Function(f) = e else {
                return ControlFlow::Continue(());
            };
            let in_args = match &f.args {
                ast::FunctionArguments::List(list) => list.clauses.iter().any(
                    |c| matches!(c, ast::FunctionArgumentClause::OrderBy(keys) if check(keys)),
                ),
                _ => false,
            };
            let in_window =
                matches!(&f.over, Some(ast::WindowType::WindowSpec(w)) if check(&w.order_by));
            let in_group = check(&f.within_group);
            if in_args || in_window || in_group {
                self.0 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<()> {
            if let Some(ast::OrderBy {
                kind: ast::OrderByKind::Expressions(keys),
                ..
            }) = &q.order_by
                && check(keys)
            {
                self.0 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut find = Find(false);
    let _ = stmt.visit(&mut find);
    find.0
}
