//! Correlated subqueries of every shape, unnested into joins.
//!
//! DataFusion 55 decorrelates the simple shapes (an equality correlation under a filter of
//! an aggregated scalar subquery, `IN`/`EXISTS` in a `WHERE` conjunct) and refuses the
//! rest: a correlation by inequality in the SELECT list, a non-aggregated scalar subquery
//! (`ORDER BY … LIMIT 1`), a subquery nested two levels deep, `EXISTS` under `OR`. This
//! analyzer rule rewrites every correlated subquery expression into joins before
//! DataFusion's checks run, following Neumann and Kemper, "Unnesting Arbitrary Queries"
//! (BTW 2015), the approach DuckDB and HyPer take:
//!
//! 1. The **domain** `D` is the set of distinct values of the outer columns the subquery
//!    uses (`SELECT DISTINCT t1.b FROM <outer input>`), under fresh names.
//! 2. The **dependent join** `D ⋈ Q` (Q evaluated once per domain row) is pushed down
//!    through Q's operators until it meets a part of Q that no longer uses outer
//!    columns, where it becomes a plain cross join that the optimizer turns into a join
//!    on the correlation predicate: filters keep their predicates with the outer columns
//!    replaced by the domain's; projections, aggregates (grouped by the domain too),
//!    windows (partitioned by it), `DISTINCT`, unions and joins carry the domain
//!    columns through; `ORDER BY … LIMIT n` becomes `row_number()` per domain row. An
//!    aggregate without `GROUP BY` left-joins its input to the domain, so an empty group
//!    still gives its one row (`count(*)` is 0, not missing).
//! 3. The outer input is **left-joined** to the result on the domain columns (`IS NOT
//!    DISTINCT FROM`, so NULL outer values find their rows), which keeps one row per
//!    outer row; the subquery expression becomes an expression over the joined columns:
//!    the scalar's value, `EXISTS` as a match marker, `IN`/`ANY`/`ALL` as a `CASE` over
//!    match, NULL and emptiness flags that gives SQL's three-valued answers exactly.
//!    `EXISTS`, `NOT EXISTS` and `IN` standing alone in a `WHERE` become semi and anti
//!    joins.
//!
//! When every outer column is equated to an expression of the subquery's input (`WHERE
//! x.k = t1.k`), that expression stands in for the domain and no domain is computed
//! (the result holds rows for values outside the domain too, which the final join drops).
//!
//! A scalar subquery that may return more than one row per outer row is counted per
//! domain row and its value goes through `__subquery_value(count, value)`, which fails
//! with PostgreSQL's "more than one row returned by a subquery used as an expression"
//! when it is evaluated on such a row.
//!
//! Uncorrelated subqueries are left to DataFusion, which runs them once. Nothing here
//! depends on the rest of Tarn: the module could be offered to DataFusion as it is.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{
    Column, DFSchema, NullEquality, Result, ScalarValue, TableReference, exec_err, plan_err,
};
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions_aggregate::expr_fn::{bool_or, count, first_value, max, min};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::expr::{
    AggregateFunction, Exists, InSubquery, SetComparison, SetQuantifier,
};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{
    Aggregate, ColumnarValue, Distinct, DistinctOn, EmptyRelation, Expr, ExprFunctionExt, Filter,
    Join, JoinConstraint, JoinType, Limit, LogicalPlan, LogicalPlanBuilder, Operator, Projection,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, SortExpr, Subquery, SubqueryAlias,
    Union, Volatility, Window, binary_expr, cast, col, lit, not, when,
};
use datafusion::logical_expr::{ExprSchemable, FetchType, SkipType, Sort};
use datafusion::optimizer::AnalyzerRule;

mod functions;
mod push;
mod subqueries;
mod util;

use functions::*;
pub use functions::{SUBQUERY_VALUE, nullable_udf, subquery_value_udf};
use util::*;

/// The analyzer rule. Install it after DataFusion's own analyzer rules (it expects
/// coerced types) and before its optimizer (which cannot plan what this rule removes).
#[derive(Debug, Default)]
pub struct UnnestSubqueries;

impl AnalyzerRule for UnnestSubqueries {
    fn name(&self) -> &str {
        "unnest_correlated_subqueries"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let mut unnester = Unnester::default();
        let plan = unnester.plan(plan)?;
        if !unnester.changed {
            return Ok(plan);
        }
        // Nodes above a rewrite keep the schemas they were built with; a value that an
        // outer join made nullable must be nullable above it too (a UNION over a
        // rewritten `count(*)` subquery failed to plan).
        plan.transform_up_with_subqueries(|p| match p {
            // A union keeps its schema while its inputs keep their width: built anew.
            LogicalPlan::Union(u) => Ok(Transformed::yes(LogicalPlan::Union(
                Union::try_new_with_loose_types(u.inputs)?,
            ))),
            other => Ok(Transformed::yes(other.recompute_schema()?)),
        })
        .data()
    }
}

/// Outer columns of the level being rewritten, each with the name of the domain column
/// that stands for it.
#[derive(Debug, Clone)]
struct Domain {
    /// `SELECT DISTINCT <outer columns> AS <names>` over the outer input.
    plan: Arc<LogicalPlan>,
    /// Outer column → domain column name.
    cols: Vec<(Column, String)>,
}

impl Domain {
    fn name_of(&self, c: &Column) -> Option<&str> {
        self.cols
            .iter()
            .find(|(o, _)| o == c)
            .map(|(_, n)| n.as_str())
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.cols.iter().map(|(_, n)| n.as_str())
    }
}

/// A join condition: a predicate with outer references still to be replaced, or
/// pairs of columns to match NULL-safely.
enum Condition {
    Outer(Expr),
    Keys(Vec<(Expr, Expr)>),
}

/// One rewrite: fresh names come from a counter.
#[derive(Debug, Default)]
struct Unnester {
    next: usize,
    /// The input of the node being rewritten, as it was (domains are taken from it).
    base: Option<LogicalPlan>,
    /// Whether any node was rewritten.
    changed: bool,
}

impl Unnester {
    /// A name for a generated column or alias, in a namespace of its own (`__unnest…`)
    /// so that it meets no column of the user's.
    fn fresh(&mut self, what: &str) -> String {
        self.next += 1;
        format!("__unnest{}_{what}", self.next)
    }

    /// Rewrites every correlated subquery expression of `plan`, its inputs and its
    /// subqueries' plans (innermost first).
    #[recursive::recursive]
    fn plan(&mut self, plan: LogicalPlan) -> Result<LogicalPlan> {
        plan.transform_up(|node| self.node(node)).data()
    }

    fn node(&mut self, node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
        // A LATERAL subquery that reads the columns beside it: a join with its result
        // per row (DataFusion 55 unnests only an equality under a filter of it).
        let node = match node {
            LogicalPlan::Join(j) => {
                let rewritten = self.lateral(j)?;
                if rewritten.transformed {
                    self.changed = true;
                }
                rewritten.data
            }
            other => other,
        };
        // Nested levels first: afterwards a subquery's plan holds no subquery
        // expression with outer references, only ordinary operators that may use them.
        let mut correlated = false;
        let node = node.map_subqueries(|p| match p {
            LogicalPlan::Subquery(mut sq) => {
                let inner = self.plan(Arc::unwrap_or_clone(sq.subquery))?;
                sq.outer_ref_columns = outer_refs(&inner)
                    .into_iter()
                    .map(|(f, c)| Expr::OuterReferenceColumn(f, c))
                    .collect();
                correlated |= !sq.outer_ref_columns.is_empty();
                sq.subquery = Arc::new(inner);
                Ok(Transformed::yes(LogicalPlan::Subquery(sq)))
            }
            other => Ok(Transformed::no(other)),
        })?;
        // EXISTS, IN and `op ANY|ALL` are always ours, correlated or not: DataFusion
        // plans them only as WHERE conjuncts (and gives two ANYs in one SELECT list
        // one name).
        // An uncorrelated scalar subquery stays DataFusion's, which runs it once; its
        // value is NULL when it finds no row, so its column is made nullable
        // (DataFusion keeps the subquery's NOT NULL, and a batch with that NULL fails).
        let node = node.transform_data(|n| {
            n.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::ScalarSubquery(sq)
                        if sq.outer_ref_columns.is_empty()
                            && sq.subquery.schema().fields().len() == 1
                            && !sq.subquery.schema().field(0).is_nullable() =>
                    {
                        Ok(Transformed::yes(Expr::ScalarSubquery(nullable(sq)?)))
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })?;
        let limit_subquery = match &node.data {
            LogicalPlan::Limit(l) => l.skip.iter().chain(l.fetch.iter()).any(|e| has_subquery(e)),
            _ => false,
        };
        if !correlated && !has_predicate_subquery(&node.data) && !limit_subquery {
            return Ok(node);
        }
        self.changed = true;
        let node = node.data;
        let rewritten = match node {
            LogicalPlan::Limit(l) if limit_subquery => self.limit_by_subquery(l)?,
            LogicalPlan::Filter(f) => self.filter(f)?,
            LogicalPlan::Projection(p) => self.projection(p)?,
            LogicalPlan::Aggregate(_) | LogicalPlan::Window(_) | LogicalPlan::Sort(_) => {
                self.lifted(node)?
            }
            LogicalPlan::Join(j) if j.join_type == JoinType::Inner => {
                // A subquery in an inner join's ON: a filter over the join without it.
                let Join {
                    left,
                    right,
                    on,
                    filter,
                    null_equality,
                    ..
                } = j;
                let join = LogicalPlan::Join(Join::try_new(
                    left,
                    right,
                    on,
                    None,
                    JoinType::Inner,
                    JoinConstraint::On,
                    null_equality,
                    false,
                )?);
                match filter {
                    Some(p) => self.filter(Filter::try_new(p, Arc::new(join))?)?,
                    None => join,
                }
            }
            LogicalPlan::Join(j)
                if matches!(
                    j.join_type,
                    JoinType::Left | JoinType::Right | JoinType::Full
                ) =>
            {
                self.outer_join(j)?
            }
            other => {
                return plan_err!("subqueries are not supported in {}", other.display());
            }
        };
        Ok(Transformed::yes(rewritten))
    }

    // -----------------------------------------------------------------------------------
    // The nodes a subquery expression can stand in.

    /// `Filter(p)`: conjuncts that are a lone `EXISTS`, `NOT EXISTS` or `IN` become semi
    /// and anti joins; the others are evaluated over the outer input left-joined to each
    /// subquery's result, whose extra columns a projection drops again.
    fn filter(&mut self, f: Filter) -> Result<LogicalPlan> {
        let Filter {
            predicate, input, ..
        } = f;
        let columns = input.schema().columns();
        let mut cur = Arc::unwrap_or_clone(input);
        // Conjuncts without subqueries first: the domains are then taken over the rows
        // that pass them (over a comma join, `s.k = t.a` makes it a join, not the cross
        // product a domain over the raw input would be).
        let (with, without): (Vec<Expr>, Vec<Expr>) = split_conjunction_owned(predicate)
            .into_iter()
            .partition(has_subquery);
        if let Some(p) = conjunction(without) {
            cur = LogicalPlan::Filter(Filter::try_new(p, Arc::new(cur))?);
        }
        self.base = Some(cur.clone());
        let mut rest = Vec::new();
        for c in with {
            match c {
                Expr::Exists(Exists { subquery, negated }) => {
                    cur = self.exists_join(cur, subquery, negated)?;
                }
                Expr::InSubquery(InSubquery {
                    expr,
                    subquery,
                    negated: false,
                }) => {
                    let (next, e) = self.rewrite_expr(cur, *expr)?;
                    cur = self.in_semi_join(next, e, subquery)?;
                }
                other => rest.push(other),
            }
        }
        let mut kept = Vec::with_capacity(rest.len());
        for c in rest {
            let (next, e) = self.rewrite_expr(cur, c)?;
            cur = next;
            kept.push(e);
        }
        if let Some(p) = conjunction(kept) {
            cur = LogicalPlan::Filter(Filter::try_new(p, Arc::new(cur))?);
        }
        project_columns(cur, columns)
    }

    /// `Projection(exprs)` over the input joined to each subquery's result; each
    /// expression keeps its name.
    fn projection(&mut self, p: Projection) -> Result<LogicalPlan> {
        let Projection { expr, input, .. } = p;
        let mut cur = Arc::unwrap_or_clone(input);
        self.base = Some(cur.clone());
        let preserver = NamePreserver::new_for_projection();
        let mut out = Vec::with_capacity(expr.len());
        for e in expr {
            let saved = preserver.save(&e);
            let (next, e) = self.rewrite_expr(cur, e)?;
            cur = next;
            out.push(saved.restore(e));
        }
        Ok(LogicalPlan::Projection(Projection::try_new(
            out,
            Arc::new(cur),
        )?))
    }

    /// `LIMIT (SELECT …)` / `OFFSET (SELECT …)` (DataFusion wants constants): the rows
    /// numbered in the order of the sort below, kept by their number, sorted again. A
    /// NULL limit is no limit and a NULL offset none, as in PostgreSQL.
    fn limit_by_subquery(&mut self, l: Limit) -> Result<LogicalPlan> {
        let Limit { skip, fetch, input } = l;
        // ORDER BY a column the SELECT list drops: Limit(Projection(Sort)). The rows are
        // numbered below the projection, in the sort's order.
        if let LogicalPlan::Projection(p) = input.as_ref()
            && matches!(p.input.as_ref(), LogicalPlan::Sort(s) if s.fetch.is_none())
        {
            let limited = self.limit_by_subquery(Limit {
                skip,
                fetch,
                input: Arc::clone(&p.input),
            })?;
            return Ok(LogicalPlan::Projection(Projection::try_new(
                p.expr.clone(),
                Arc::new(limited),
            )?));
        }
        let columns = input.schema().columns();
        let (order, below) = match input.as_ref() {
            LogicalPlan::Sort(s) if s.fetch.is_none() => (s.expr.clone(), Arc::clone(&s.input)),
            _ => (vec![], Arc::clone(&input)),
        };
        let rn = self.fresh("row");
        let number = row_number().order_by(order.clone()).build()?.alias(&rn);
        let numbered = LogicalPlanBuilder::from(Arc::unwrap_or_clone(below))
            .window(vec![number])?
            .build()?;
        let position = cast(col(&rn), DataType::Int64);
        let skip = match skip {
            Some(e) => coalesce(vec![
                limit_check_udf(true).call(vec![cast(*e, DataType::Int64)]),
                lit(0i64),
            ]),
            None => lit(0i64),
        };
        let mut keep = position.clone().gt(skip.clone());
        if let Some(f) = fetch {
            let f = limit_check_udf(false).call(vec![cast(*f, DataType::Int64)]);
            keep = keep.and(f.clone().is_null().or(position.lt_eq(binary_expr(
                skip,
                Operator::Plus,
                f,
            ))));
        }
        let filtered = self.filter(Filter::try_new(keep, Arc::new(numbered))?)?;
        let mut sorted = LogicalPlanBuilder::from(filtered);
        if !order.is_empty() {
            sorted = sorted.sort(order)?;
        } else {
            sorted = sorted.sort(vec![col(&rn).sort(true, true)])?;
        }
        project_columns(sorted.build()?, columns)
    }

    /// An outer join whose ON holds subqueries: the pairs that match (an inner join
    /// filtered by the whole condition, rewritten as any filter is), and the preserved
    /// side's rows that match nothing, padded with NULLs. Rows of a side are told apart
    /// by their values: equal rows match the same pairs, so an anti join on all of
    /// their columns finds exactly the unmatched ones.
    fn outer_join(&mut self, j: Join) -> Result<LogicalPlan> {
        let Join {
            left,
            right,
            on,
            filter,
            join_type,
            null_equality,
            ..
        } = j;
        let inner = LogicalPlan::Join(Join::try_new(
            Arc::clone(&left),
            Arc::clone(&right),
            on,
            None,
            JoinType::Inner,
            JoinConstraint::On,
            null_equality,
            false,
        )?);
        let matched = match filter {
            Some(p) => self.filter(Filter::try_new(p, Arc::new(inner))?)?,
            None => inner,
        };
        self.matched_and_unmatched(&left, &right, matched, join_type)
    }

    /// An outer join of `left` and `right` from its `matched` pairs (the inner join,
    /// filtered by the whole condition): those, and the preserved side's rows that
    /// match nothing, padded with NULLs.
    fn matched_and_unmatched(
        &mut self,
        left: &Arc<LogicalPlan>,
        right: &Arc<LogicalPlan>,
        matched: LogicalPlan,
        join_type: JoinType,
    ) -> Result<LogicalPlan> {
        // Every part under the same fresh names (a union's output loses the
        // qualifiers, and both sides may have a column of one name), qualified again
        // above the union.
        let out: Vec<(Option<TableReference>, String, String)> = left
            .schema()
            .iter()
            .chain(right.schema().iter())
            .map(|(q, f)| (q.cloned(), f.name().clone(), self.fresh("oj")))
            .collect();
        let unify = |plan: LogicalPlan| -> Result<Arc<LogicalPlan>> {
            let exprs: Vec<Expr> = plan
                .schema()
                .columns()
                .into_iter()
                .zip(&out)
                .map(|(c, (_, _, n))| Expr::Column(c).alias(n))
                .collect();
            Ok(Arc::new(
                LogicalPlanBuilder::from(plan).project(exprs)?.build()?,
            ))
        };
        let mut parts = vec![unify(matched.clone())?];
        let preserved: &[bool] = match join_type {
            JoinType::Left => &[true],
            JoinType::Right => &[false],
            _ => &[true, false],
        };
        for &is_left in preserved {
            let side = if is_left { left } else { right };
            let side_cols = side.schema().columns();
            // The matched pairs' columns of this side, renamed apart.
            let mut renamed = Vec::with_capacity(side_cols.len());
            let mut keys = Vec::with_capacity(side_cols.len());
            for c in &side_cols {
                let name = self.fresh("matched");
                renamed.push(Expr::Column(c.clone()).alias(&name));
                keys.push((Expr::Column(c.clone()), col(name)));
            }
            let seen = LogicalPlanBuilder::from(matched.clone())
                .project(renamed)?
                .build()?;
            let keys = null_safe(keys, side.schema(), seen.schema())?;
            let unmatched = LogicalPlan::Join(Join::try_new(
                Arc::clone(side),
                Arc::new(seen),
                keys,
                None,
                JoinType::LeftAnti,
                JoinConstraint::On,
                NullEquality::NullEqualsNothing,
                false,
            )?);
            // In the join's column order, NULLs for the other side.
            let mut cols = Vec::new();
            let fields = left
                .schema()
                .iter()
                .map(|f| (true, f))
                .chain(right.schema().iter().map(|f| (false, f)));
            for (from_left, (q, f)) in fields {
                if from_left == is_left {
                    cols.push(Expr::Column(Column::new(q.cloned(), f.name())));
                } else {
                    cols.push(lit(ScalarValue::try_from(f.data_type())?).alias(self.fresh("null")));
                }
            }
            parts.push(unify(
                LogicalPlanBuilder::from(unmatched).project(cols)?.build()?,
            )?);
        }
        let union = LogicalPlan::Union(Union::try_new_with_loose_types(parts)?);
        let exprs: Vec<Expr> = out
            .into_iter()
            .map(|(q, name, n)| col(n).alias_qualified(q, name))
            .collect();
        LogicalPlanBuilder::from(union).project(exprs)?.build()
    }

    /// `left [LEFT] JOIN LATERAL (Q) s [ON p]`: `Q` is unnested over the domain of the
    /// left side's columns it reads (as a subquery expression is), joined back to the
    /// left side on them, and its columns named as `s`'s again; `ON` then filters the
    /// pairs. A LEFT join keeps, with NULLs, a left row that `Q` gives no row for (`ON
    /// true`: a left join back) or none that passes `ON` (the unmatched rows added as
    /// an outer join's are). Other join types stay as they are.
    fn lateral(&mut self, j: Join) -> Result<Transformed<LogicalPlan>> {
        // A lateral joined by keys (`USING`) stays as it is: its ON is a filter here.
        let q = match lateral_subquery(&j) {
            Some(q) if j.on.is_empty() => q.clone(),
            _ => return Ok(Transformed::no(LogicalPlan::Join(j))),
        };
        let trivial_on = j
            .filter
            .as_ref()
            .is_none_or(|p| matches!(p, Expr::Literal(ScalarValue::Boolean(Some(true)), _)));
        let join_type = match j.join_type {
            JoinType::Inner => JoinType::Inner,
            JoinType::Left if trivial_on => JoinType::Left,
            // The pairs that pass `ON`, and the left rows none of whose pairs does.
            JoinType::Left => JoinType::Inner,
            _ => return Ok(Transformed::no(LogicalPlan::Join(j))),
        };
        let left_schema = j.left.schema();
        let left = j.left.as_ref().clone();
        self.base = Some(left.clone());
        let dom = self.domain(&left, &q)?;
        let r = self.dependent(&q, &dom)?;
        // Q's columns under fresh names (names Q's own qualifiers told apart need not
        // stay apart behind one alias), with the domain's.
        let outs: Vec<String> = q
            .schema()
            .fields()
            .iter()
            .map(|_| self.fresh("lat"))
            .collect();
        let mut exprs: Vec<Expr> = q
            .schema()
            .columns()
            .into_iter()
            .zip(&outs)
            .map(|(c, n)| Expr::Column(c).alias(n))
            .collect();
        exprs.extend(domain_columns(&r, &dom)?);
        let r = LogicalPlanBuilder::from(r).project(exprs)?.build()?;
        let (joined, alias) = self.join_back(left, &dom, r, join_type)?;
        // The join's own schema again: the left side's columns, then `s`'s.
        let mut exprs: Vec<Expr> = left_schema
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        for ((q, f), n) in j.right.schema().iter().zip(&outs) {
            exprs.push(
                Expr::Column(Column::new(Some(alias.clone()), n))
                    .alias_qualified(q.cloned(), f.name()),
            );
        }
        let out = LogicalPlanBuilder::from(joined).project(exprs)?.build()?;
        let out = match j.filter {
            Some(p) if !trivial_on => self.filter(Filter::try_new(p, Arc::new(out))?)?,
            _ => out,
        };
        if j.join_type == JoinType::Left && !trivial_on {
            return Ok(Transformed::yes(self.matched_and_unmatched(
                &j.left,
                &j.right,
                out,
                JoinType::Left,
            )?));
        }
        Ok(Transformed::yes(out))
    }

    /// Aggregates, windows and sorts: each correlated subquery expression is computed in
    /// a projection below the node (rewritten as any projection is), the node reads it
    /// as a column, and a projection above restores the node's schema where it changed.
    fn lifted(&mut self, node: LogicalPlan) -> Result<LogicalPlan> {
        let input = Arc::new(node.inputs()[0].clone());
        let mut below: Vec<Expr> = input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let mut lifted = Vec::new();
        // Aggregates and windows name their outputs after their expressions; a sort's
        // expressions name nothing.
        let keep_names = !matches!(node, LogicalPlan::Sort(_));
        let preserver = NamePreserver::new_for_projection();
        let node = node
            .map_expressions(|e| {
                let saved = preserver.save(&e);
                let t = e.transform_down(|e| match e {
                    Expr::ScalarSubquery(ref sq) if is_correlated(sq) => {
                        let name = self.fresh("sq_arg");
                        lifted.push(e.alias(&name));
                        Ok(Transformed::new(
                            Expr::Column(Column::new_unqualified(name)),
                            true,
                            TreeNodeRecursion::Jump,
                        ))
                    }
                    Expr::Exists(_) | Expr::InSubquery(_) | Expr::SetComparison(_) => {
                        let name = self.fresh("sq_arg");
                        lifted.push(e.alias(&name));
                        Ok(Transformed::new(
                            Expr::Column(Column::new_unqualified(name)),
                            true,
                            TreeNodeRecursion::Jump,
                        ))
                    }
                    other => Ok(Transformed::no(other)),
                })?;
                Ok(t.update_data(|e| if keep_names { saved.restore(e) } else { e }))
            })?
            .data;
        // A sort over a projection may use columns the projection drops (`SELECT a FROM
        // t ORDER BY (SELECT … t.b)`): the subqueries then join below the projection,
        // which passes their values up.
        let needs_below = |p: &Projection| {
            lifted.iter().any(|e| {
                subquery_plans(e).iter().any(|sq| {
                    outer_refs(sq).iter().any(|(_, c)| {
                        !input.schema().has_column(c) && p.input.schema().has_column(c)
                    })
                })
            })
        };
        let projected = match input.as_ref() {
            LogicalPlan::Projection(p)
                if matches!(node, LogicalPlan::Sort(_)) && needs_below(p) =>
            {
                let mut exprs = p.expr.clone();
                exprs.extend(lifted);
                self.projection(Projection::try_new(exprs, Arc::clone(&p.input))?)?
            }
            _ => {
                below.extend(lifted);
                self.projection(Projection::try_new(below, input)?)?
            }
        };
        let original = node.schema().columns();
        let rebuilt = match node {
            LogicalPlan::Aggregate(a) => LogicalPlan::Aggregate(Aggregate::try_new(
                Arc::new(projected),
                a.group_expr,
                a.aggr_expr,
            )?),
            LogicalPlan::Window(w) => {
                LogicalPlan::Window(Window::try_new(w.window_expr, Arc::new(projected))?)
            }
            LogicalPlan::Sort(s) => LogicalPlan::Sort(Sort {
                expr: s.expr,
                input: Arc::new(projected),
                fetch: s.fetch,
            }),
            other => return plan_err!("cannot lift subqueries out of {}", other.display()),
        };
        project_columns(rebuilt, original)
    }
}
