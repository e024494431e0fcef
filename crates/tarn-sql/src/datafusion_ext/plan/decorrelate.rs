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

/// The function a scalar subquery's value goes through when the subquery may return
/// several rows per outer row: `__subquery_value(rows, value)` is `value`, or an error
/// when `rows` > 1. Register it with the session (the rewritten plan calls it).
pub fn subquery_value_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(SubqueryValue {
        signature: Signature::any(2, Volatility::Immutable),
    })
}

/// Name of [`subquery_value_udf`].
pub const SUBQUERY_VALUE: &str = "__subquery_value";

#[derive(Debug, PartialEq, Eq, Hash)]
struct SubqueryValue {
    signature: Signature,
}

impl ScalarUDFImpl for SubqueryValue {
    fn name(&self) -> &str {
        SUBQUERY_VALUE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [_, value] => Ok(value.clone()),
            _ => plan_err!("{SUBQUERY_VALUE} takes two arguments"),
        }
    }

    /// The value's bounds (the default, an interval of type Null, breaks the ordering
    /// analysis of functions over this one).
    fn evaluate_bounds(
        &self,
        input: &[&datafusion::logical_expr::interval_arithmetic::Interval],
    ) -> Result<datafusion::logical_expr::interval_arithmetic::Interval> {
        match input {
            [_, value] => Ok((*value).clone()),
            _ => plan_err!("{SUBQUERY_VALUE} takes two arguments"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [rows, value] = args.args.as_slice() else {
            return exec_err!("{SUBQUERY_VALUE} takes two arguments");
        };
        let several = match rows {
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) => *n > 1,
            ColumnarValue::Scalar(_) => false,
            ColumnarValue::Array(a) => match a.data_type() {
                DataType::Int64 => {
                    let a = a.as_primitive::<Int64Type>();
                    (0..a.len()).any(|i| a.is_valid(i) && a.value(i) > 1)
                }
                other => return exec_err!("{SUBQUERY_VALUE}: row count of type {other}"),
            },
        };
        if several {
            return exec_err!("more than one row returned by a subquery used as an expression");
        }
        Ok(value.clone())
    }
}

/// `LIMIT`/`OFFSET` values computed by a subquery must not be negative (PostgreSQL's
/// errors); the function passes them through.
fn limit_check_udf(offset: bool) -> ScalarUDF {
    ScalarUDF::new_from_impl(LimitCheck {
        offset,
        signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct LimitCheck {
    offset: bool,
    signature: Signature,
}

impl ScalarUDFImpl for LimitCheck {
    fn name(&self) -> &str {
        if self.offset {
            "__unnest_offset"
        } else {
            "__unnest_limit"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let negative = match &args.args[0] {
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) => *n < 0,
            ColumnarValue::Scalar(_) => false,
            ColumnarValue::Array(a) => {
                let a = a.as_primitive::<Int64Type>();
                a.iter().flatten().any(|n| n < 0)
            }
        };
        if negative {
            return exec_err!(
                "{} must not be negative",
                if self.offset { "OFFSET" } else { "LIMIT" }
            );
        }
        Ok(args.args[0].clone())
    }
}

/// A 128-bit integer sum (`Decimal128(38, 0)`) as int8, or `bigint out of range`.
fn int8_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Int8 {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Int8 {
    signature: Signature,
}

impl ScalarUDFImpl for Int8 {
    fn name(&self) -> &str {
        "__unnest_int8"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let options = datafusion::arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        };
        let out =
            datafusion::arrow::compute::cast_with_options(&arrays[0], &DataType::Int64, &options)
                .map_err(|_| {
                datafusion::error::DataFusionError::Execution("bigint out of range".into())
            })?;
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `sq` with its one column made nullable by [`nullable_udf`], under the same name.
fn nullable(sq: Subquery) -> Result<Subquery> {
    let plan = Arc::unwrap_or_clone(sq.subquery);
    let (q, f) = plan.schema().qualified_field(0);
    let (q, name) = (q.cloned(), f.name().clone());
    let c = Expr::Column(Column::new(q.clone(), &name));
    let wrapped = LogicalPlanBuilder::from(plan)
        .project(vec![nullable_udf().call(vec![c]).alias_qualified(q, name)])?
        .build()?;
    Ok(Subquery {
        subquery: Arc::new(wrapped),
        outer_ref_columns: sq.outer_ref_columns,
        spans: sq.spans,
    })
}

/// `__nullable(x)` is `x`, in a column that may be NULL (see [`nullable`]).
pub fn nullable_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Nullable {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Nullable {
    signature: Signature,
}

impl ScalarUDFImpl for Nullable {
    fn name(&self) -> &str {
        "__nullable"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [t] => Ok(t.clone()),
            _ => plan_err!("__nullable takes one argument"),
        }
    }

    fn evaluate_bounds(
        &self,
        input: &[&datafusion::logical_expr::interval_arithmetic::Interval],
    ) -> Result<datafusion::logical_expr::interval_arithmetic::Interval> {
        match input {
            [value] => Ok((*value).clone()),
            _ => plan_err!("__nullable takes one argument"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.as_slice() {
            [value] => Ok(value.clone()),
            _ => exec_err!("__nullable takes one argument"),
        }
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
            let side = if is_left { &left } else { &right };
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

    /// Replaces each correlated subquery expression in `e` (innermost first) by an
    /// expression over columns that joins to `cur` provide.
    fn rewrite_expr(&mut self, cur: LogicalPlan, e: Expr) -> Result<(LogicalPlan, Expr)> {
        let mut cur = Some(cur);
        let e = e
            .transform_up(|e| {
                let Some(plan) = cur.take() else {
                    return plan_err!("subquery rewrite lost its input");
                };
                let (next, out) = match e {
                    Expr::ScalarSubquery(sq) if is_correlated(&sq) => {
                        let (p, v) = self.scalar(plan, sq)?;
                        (p, Transformed::yes(v))
                    }
                    Expr::Exists(Exists { subquery, negated }) => {
                        let (p, v) = self.exists_value(plan, subquery, negated)?;
                        (p, Transformed::yes(v))
                    }
                    Expr::InSubquery(InSubquery {
                        expr,
                        subquery,
                        negated,
                    }) => {
                        let (p, v) = self.in_value(plan, *expr, subquery)?;
                        (p, Transformed::yes(if negated { not(v) } else { v }))
                    }
                    Expr::SetComparison(SetComparison {
                        expr,
                        subquery,
                        op,
                        quantifier,
                    }) => {
                        let (p, v) = self.set_comparison(plan, *expr, subquery, op, quantifier)?;
                        (p, Transformed::yes(v))
                    }
                    other => (plan, Transformed::no(other)),
                };
                cur = Some(next);
                Ok(out)
            })?
            .data;
        match cur {
            Some(plan) => Ok((plan, e)),
            None => plan_err!("subquery rewrite lost its input"),
        }
    }

    // -----------------------------------------------------------------------------------
    // Subquery expressions, each attached to the outer input `cur`.

    /// The domain of `subquery` over `cur`: the outer columns of this level it uses,
    /// distinct. Computed over the node's original input when that has the columns (it
    /// always does unless a subquery reads another's result), not over the joins that
    /// earlier subqueries of the node added.
    fn domain(&mut self, cur: &LogicalPlan, subquery: &LogicalPlan) -> Result<Domain> {
        let schema = cur.schema();
        let mut cols = Vec::new();
        for (_, c) in outer_refs(subquery) {
            if schema.has_column(&c) && !cols.iter().any(|(o, _)| o == &c) {
                let name = self.fresh("d");
                cols.push((c, name));
            }
        }
        if cols.is_empty() {
            return Ok(Domain {
                plan: Arc::new(LogicalPlanBuilder::empty(true).build()?),
                cols,
            });
        }
        let source = match &self.base {
            Some(b) if cols.iter().all(|(c, _)| b.schema().has_column(c)) => b.clone(),
            _ => cur.clone(),
        };
        let exprs: Vec<Expr> = cols
            .iter()
            .map(|(c, n)| {
                let t = Expr::Column(c.clone()).get_type(source.schema())?;
                Ok(canonical_zero(Expr::Column(c.clone()), &t)?.alias(n))
            })
            .collect::<Result<_>>()?;
        let plan = LogicalPlanBuilder::from(source)
            .project(exprs)?
            .distinct()?
            .build()?;
        Ok(Domain {
            plan: Arc::new(plan),
            cols,
        })
    }

    /// `cur ⟕ R` (or a semi/anti join) on the domain columns, `R` under a fresh alias.
    fn join_back(
        &mut self,
        cur: LogicalPlan,
        dom: &Domain,
        r: LogicalPlan,
        join_type: JoinType,
    ) -> Result<(LogicalPlan, TableReference)> {
        self.join_back_with(cur, dom, r, join_type, |_| vec![])
    }

    /// A scalar subquery: its value per domain row, left-joined; counted when the
    /// subquery may give several rows.
    fn scalar(&mut self, cur: LogicalPlan, sq: Subquery) -> Result<(LogicalPlan, Expr)> {
        let dom = self.domain(&cur, &sq.subquery)?;
        let single = sq.subquery.max_rows().is_some_and(|n| n <= 1);
        let value = first_column(&sq.subquery)?;
        let r = self.dependent(&sq.subquery, &dom)?;
        let v = self.fresh("value");
        let mut group: Vec<Expr> = domain_columns(&r, &dom)?;
        let r = if single {
            group.push(Expr::Column(value).alias(&v));
            LogicalPlanBuilder::from(r).project(group)?.build()?
        } else {
            let n = format!("{v}_rows");
            let aggs = vec![
                count(lit(1)).alias(&n),
                first_value(Expr::Column(value), vec![]).alias(&v),
            ];
            LogicalPlanBuilder::from(r)
                .aggregate(group, aggs)?
                .build()?
        };
        let (joined, alias) = self.join_back(cur, &dom, r, JoinType::Left)?;
        let value = Expr::Column(Column::new(Some(alias.clone()), &v));
        let value = if single {
            value
        } else {
            let rows = Expr::Column(Column::new(Some(alias), format!("{v}_rows")));
            subquery_value_udf().call(vec![rows, value])
        };
        Ok((joined, value))
    }

    /// The domain rows for which `subquery` has a row, as a plan of the domain columns.
    fn matches(&mut self, subquery: &LogicalPlan, dom: &Domain) -> Result<LogicalPlan> {
        let r = self.dependent(subquery, dom)?;
        let mut cols = domain_columns(&r, dom)?;
        if cols.is_empty() {
            cols.push(lit(true).alias(self.fresh("row")));
        }
        LogicalPlanBuilder::from(r).project(cols)?.build()
    }

    /// `[NOT] EXISTS` alone in a filter: a semi or anti join.
    fn exists_join(
        &mut self,
        cur: LogicalPlan,
        sq: Subquery,
        negated: bool,
    ) -> Result<LogicalPlan> {
        let dom = self.domain(&cur, &sq.subquery)?;
        let r = self.matches(&sq.subquery, &dom)?;
        let join_type = if negated {
            JoinType::LeftAnti
        } else {
            JoinType::LeftSemi
        };
        Ok(self.join_back(cur, &dom, r, join_type)?.0)
    }

    /// `[NOT] EXISTS` as a value: a marker left-joined per domain row.
    fn exists_value(
        &mut self,
        cur: LogicalPlan,
        sq: Subquery,
        negated: bool,
    ) -> Result<(LogicalPlan, Expr)> {
        let dom = self.domain(&cur, &sq.subquery)?;
        let r = self.dependent(&sq.subquery, &dom)?;
        let m = self.fresh("found");
        let mut cols = domain_columns(&r, &dom)?;
        cols.push(lit(true).alias(&m));
        let r = LogicalPlanBuilder::from(r)
            .project(cols)?
            .distinct()?
            .build()?;
        let (joined, alias) = self.join_back(cur, &dom, r, JoinType::Left)?;
        let found = Expr::Column(Column::new(Some(alias), m));
        Ok((
            joined,
            if negated {
                found.is_null()
            } else {
                found.is_not_null()
            },
        ))
    }

    /// `e` as a column of `cur` (computed by a projection when it is not one), so that
    /// it can be a join key: DataFusion computes expression keys into columns named
    /// after them, and `CAST(t.a AS …)` is named like `t.a`, which the input has.
    fn materialize(&mut self, cur: LogicalPlan, e: Expr) -> Result<(LogicalPlan, Expr)> {
        if matches!(e, Expr::Column(_)) {
            return Ok((cur, e));
        }
        let name = self.fresh("key");
        let mut cols: Vec<Expr> = cur
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        cols.push(e.alias(&name));
        let plan = LogicalPlanBuilder::from(cur).project(cols)?.build()?;
        Ok((plan, col(name)))
    }

    /// The subquery's rows per domain row with its one column under a fresh name,
    /// coerced to the type of `x` (the value compared with it).
    fn values(
        &mut self,
        cur: &LogicalPlan,
        x: &Expr,
        sq: &Subquery,
        dom: &Domain,
    ) -> Result<(LogicalPlan, String)> {
        let r = self.dependent(&sq.subquery, dom)?;
        let y = Expr::Column(first_column(&sq.subquery)?);
        let x_type = x.get_type(cur.schema())?;
        let y_type = y.get_type(r.schema())?;
        let y = if x_type == y_type { y } else { cast(y, x_type) };
        let name = self.fresh("y");
        let mut cols = domain_columns(&r, dom)?;
        cols.push(y.alias(&name));
        let r = LogicalPlanBuilder::from(r).project(cols)?.build()?;
        Ok((r, name))
    }

    /// `x IN (subquery)` alone in a filter: a semi join on the domain and `x = y` (NULL
    /// `y`s can only make the answer NULL, which a filter drops like FALSE).
    fn in_semi_join(&mut self, cur: LogicalPlan, x: Expr, sq: Subquery) -> Result<LogicalPlan> {
        let (cur, x) = self.materialize(cur, x)?;
        let dom = self.domain(&cur, &sq.subquery)?;
        let (r, y) = self.values(&cur, &x, &sq, &dom)?;
        let r = LogicalPlanBuilder::from(r)
            .filter(col(&y).is_not_null())?
            .build()?;
        let (joined, _) = self.join_back_with(cur, &dom, r, JoinType::LeftSemi, |alias| {
            vec![(x, Expr::Column(Column::new(Some(alias.clone()), &y)))]
        })?;
        Ok(joined)
    }

    /// Like [`Self::join_back`], with more key pairs (outer expression, `R` column)
    /// made from the alias.
    fn join_back_with(
        &mut self,
        cur: LogicalPlan,
        dom: &Domain,
        r: LogicalPlan,
        join_type: JoinType,
        extra: impl FnOnce(&TableReference) -> Vec<(Expr, Expr)>,
    ) -> Result<(LogicalPlan, TableReference)> {
        let alias = TableReference::bare(self.fresh("sq"));
        let keys = extra(&alias);
        let r = LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(r), alias.clone())?);
        let pairs: Vec<(Expr, Expr)> = dom
            .cols
            .iter()
            .map(|(c, n)| {
                (
                    Expr::Column(c.clone()),
                    Expr::Column(Column::new(Some(alias.clone()), n)),
                )
            })
            .collect();
        let mut on = null_safe(pairs, cur.schema(), r.schema())?;
        on.extend(keys);
        let filter = on.is_empty().then(|| lit(true));
        let join = Join::try_new(
            Arc::new(cur),
            Arc::new(r),
            on,
            filter,
            join_type,
            JoinConstraint::On,
            NullEquality::NullEqualsNothing,
            false,
        )?;
        Ok((LogicalPlan::Join(join), alias))
    }

    /// `x IN (subquery)` as a value, three-valued: TRUE when some `y = x`; otherwise
    /// FALSE when the subquery is empty, NULL when `x` or some `y` is NULL, else FALSE.
    fn in_value(&mut self, cur: LogicalPlan, x: Expr, sq: Subquery) -> Result<(LogicalPlan, Expr)> {
        let (cur, x) = self.materialize(cur, x)?;
        let dom = self.domain(&cur, &sq.subquery)?;
        let (r, y) = self.values(&cur, &x, &sq, &dom)?;
        // Per domain row: how many rows, and whether one is NULL.
        let n = self.fresh("rows");
        let nulls = self.fresh("nulls");
        let group = domain_columns(&r, &dom)?;
        let stats = LogicalPlanBuilder::from(r.clone())
            .aggregate(
                group,
                vec![
                    count(lit(1)).alias(&n),
                    bool_or(col(&y).is_null()).alias(&nulls),
                ],
            )?
            .build()?;
        let (cur, stats_alias) = self.join_back(cur, &dom, stats, JoinType::Left)?;
        // Per domain row and non-NULL value: a match marker.
        let m = self.fresh("match");
        let mut cols = domain_columns(&r, &dom)?;
        cols.push(col(&y));
        let matches = LogicalPlanBuilder::from(r)
            .filter(col(&y).is_not_null())?
            .project(cols)?
            .distinct()?
            .build()?;
        let mut cols = domain_columns(&matches, &dom)?;
        cols.push(col(&y));
        cols.push(lit(true).alias(&m));
        let matches = LogicalPlanBuilder::from(matches).project(cols)?.build()?;
        let (cur, match_alias) =
            self.join_back_with(cur, &dom, matches, JoinType::Left, |alias| {
                vec![(
                    x.clone(),
                    Expr::Column(Column::new(Some(alias.clone()), &y)),
                )]
            })?;
        let matched = Expr::Column(Column::new(Some(match_alias), m)).is_not_null();
        // No row joined, or (without a domain) the one row of an empty input.
        let rows = Expr::Column(Column::new(Some(stats_alias.clone()), n));
        let empty = rows.clone().is_null().or(rows.eq(lit(0i64)));
        let some_null = Expr::Column(Column::new(Some(stats_alias), nulls)).is_true();
        let value = when(matched, lit(true))
            .when(empty, lit(false))
            .when(x.is_null().or(some_null), lit(ScalarValue::Boolean(None)))
            .otherwise(lit(false))?;
        Ok((cur, value))
    }

    /// `x op ANY|ALL (subquery)`. `= ANY` is `IN` and `<> ALL` is `NOT IN`. The others
    /// need only the subquery's row count, its non-NULL count, minimum and maximum per
    /// domain row (`x > ANY` holds when `x > min`; `x > ALL` fails when `x <= max`), one
    /// aggregation instead of a comparison per pair, with SQL's three values: ANY is
    /// FALSE over an empty set, NULL when `x` is NULL or no comparison holds but one is
    /// unknown (a NULL in the set), and ALL the mirror image.
    fn set_comparison(
        &mut self,
        cur: LogicalPlan,
        x: Expr,
        sq: Subquery,
        op: Operator,
        quantifier: SetQuantifier,
    ) -> Result<(LogicalPlan, Expr)> {
        match (op, quantifier) {
            (Operator::Eq, SetQuantifier::Any) => return self.in_value(cur, x, sq),
            (Operator::NotEq, SetQuantifier::All) => {
                let (p, v) = self.in_value(cur, x, sq)?;
                return Ok((p, not(v)));
            }
            (
                Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq
                | Operator::NotEq
                | Operator::Eq,
                _,
            ) => {}
            _ => return plan_err!("{op} {quantifier} (subquery) is not supported"),
        }
        let (cur, x) = self.materialize(cur, x)?;
        let dom = self.domain(&cur, &sq.subquery)?;
        let (r, y) = self.values(&cur, &x, &sq, &dom)?;
        let (n, nn, lo, hi) = (
            self.fresh("rows"),
            self.fresh("values"),
            self.fresh("min"),
            self.fresh("max"),
        );
        let group = domain_columns(&r, &dom)?;
        let stats = LogicalPlanBuilder::from(r)
            .aggregate(
                group,
                vec![
                    count(lit(1)).alias(&n),
                    count(col(&y)).alias(&nn),
                    min(col(&y)).alias(&lo),
                    max(col(&y)).alias(&hi),
                ],
            )?
            .build()?;
        let (joined, alias) = self.join_back(cur, &dom, stats, JoinType::Left)?;
        let c = |name: &str| Expr::Column(Column::new(Some(alias.clone()), name));
        let empty = c(&n).is_null().or(c(&n).eq(lit(0i64)));
        let unknown = c(&n).gt(c(&nn));
        let null = || lit(ScalarValue::Boolean(None));
        let x = || x.clone();
        let value = match quantifier {
            SetQuantifier::Any => {
                let holds = match op {
                    Operator::Lt => x().lt(c(&hi)),
                    Operator::LtEq => x().lt_eq(c(&hi)),
                    Operator::Gt => x().gt(c(&lo)),
                    Operator::GtEq => x().gt_eq(c(&lo)),
                    // `<> ANY`: some value differs from x.
                    _ => x().not_eq(c(&lo)).or(x().not_eq(c(&hi))),
                };
                when(empty, lit(false))
                    .when(x().is_null(), null())
                    .when(holds.is_true(), lit(true))
                    .when(unknown, null())
                    .otherwise(lit(false))?
            }
            SetQuantifier::All => {
                let holds = match op {
                    Operator::Lt => x().lt(c(&lo)),
                    Operator::LtEq => x().lt_eq(c(&lo)),
                    Operator::Gt => x().gt(c(&hi)),
                    Operator::GtEq => x().gt_eq(c(&hi)),
                    // `= ALL`: every value is x.
                    _ => x().eq(c(&lo)).and(x().eq(c(&hi))),
                };
                when(empty, lit(true))
                    .when(x().is_null(), null())
                    .when(holds.is_false(), lit(false))
                    .when(unknown, null())
                    .otherwise(lit(true))?
            }
        };
        Ok((joined, value))
    }

    // -----------------------------------------------------------------------------------
    // The dependent join D ⋈ plan, pushed down.

    /// `D ⋈ plan` if `plan` uses the domain's columns, else `D × plan`.
    fn dependent(&mut self, plan: &LogicalPlan, dom: &Domain) -> Result<LogicalPlan> {
        if dom.cols.is_empty() {
            // Only outer columns of enclosing levels: nothing to do at this one.
            return Ok(plan.clone());
        }
        if uses(plan, dom) {
            self.push(plan, dom)
        } else {
            cross(dom, plan)
        }
    }

    /// `D ⋈ plan` for a plan that uses the domain: `plan`'s columns and the domain's
    /// (somewhere in the schema, found by name), one result per domain row.
    #[recursive::recursive]
    fn push(&mut self, plan: &LogicalPlan, dom: &Domain) -> Result<LogicalPlan> {
        match plan {
            LogicalPlan::Filter(f) => {
                if !uses(&f.input, dom)
                    && let Some(p) = self.eliminated(f, dom)?
                {
                    return Ok(p);
                }
                let input = self.dependent(&f.input, dom)?;
                let predicate = substitute(f.predicate.clone(), dom, input.schema())?;
                Ok(LogicalPlan::Filter(Filter::try_new(
                    predicate,
                    Arc::new(input),
                )?))
            }
            LogicalPlan::Projection(p) => {
                let input = self.dependent(&p.input, dom)?;
                let preserver = NamePreserver::new_for_projection();
                let mut exprs = domain_columns(&input, dom)?;
                for e in &p.expr {
                    let saved = preserver.save(e);
                    exprs.push(saved.restore(substitute(e.clone(), dom, input.schema())?));
                }
                Ok(LogicalPlan::Projection(Projection::try_new(
                    exprs,
                    Arc::new(input),
                )?))
            }
            LogicalPlan::Aggregate(a) => self.aggregate(a, dom),
            LogicalPlan::SubqueryAlias(s) => {
                let input = self.push(&s.input, dom)?;
                Ok(LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(
                    Arc::new(input),
                    s.alias.clone(),
                )?))
            }
            LogicalPlan::Sort(s) => {
                let input = self.dependent(&s.input, dom)?;
                let exprs = substitute_sorts(&s.expr, dom, input.schema())?;
                match s.fetch {
                    None => Ok(LogicalPlan::Sort(Sort {
                        expr: exprs,
                        input: Arc::new(input),
                        fetch: None,
                    })),
                    Some(n) => self.top_n(input, dom, exprs, 0, Some(n), plan.schema()),
                }
            }
            LogicalPlan::Limit(l) => self.limit(l, dom, plan.schema()),
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let input = self.dependent(input, dom)?;
                Ok(LogicalPlan::Distinct(Distinct::All(Arc::new(input))))
            }
            LogicalPlan::Distinct(Distinct::On(d)) => {
                let input = self.dependent(&d.input, dom)?;
                let keys = domain_columns(&input, dom)?;
                let schema = input.schema().clone();
                let mut on = keys.clone();
                for e in &d.on_expr {
                    on.push(substitute(e.clone(), dom, &schema)?);
                }
                let preserver = NamePreserver::new_for_projection();
                let mut select = keys.clone();
                for e in &d.select_expr {
                    let saved = preserver.save(e);
                    select.push(saved.restore(substitute(e.clone(), dom, &schema)?));
                }
                let sort = match &d.sort_expr {
                    None => None,
                    Some(s) => {
                        let mut out: Vec<SortExpr> =
                            keys.iter().map(|k| k.clone().sort(true, true)).collect();
                        out.extend(substitute_sorts(s, dom, &schema)?);
                        Some(out)
                    }
                };
                Ok(LogicalPlan::Distinct(Distinct::On(DistinctOn::try_new(
                    on,
                    select,
                    sort,
                    Arc::new(input),
                )?)))
            }
            LogicalPlan::Window(w) => {
                let input = self.dependent(&w.input, dom)?;
                let keys = domain_columns(&input, dom)?;
                let schema = input.schema().clone();
                let preserver = NamePreserver::new_for_projection();
                let mut exprs = Vec::with_capacity(w.window_expr.len());
                for e in &w.window_expr {
                    let saved = preserver.save(e);
                    let e = substitute(e.clone(), dom, &schema)?
                        .transform_up(|e| match e {
                            Expr::WindowFunction(mut wf) => {
                                let mut partition = keys.clone();
                                partition.append(&mut wf.params.partition_by);
                                wf.params.partition_by = partition;
                                Ok(Transformed::yes(Expr::WindowFunction(wf)))
                            }
                            other => Ok(Transformed::no(other)),
                        })?
                        .data;
                    exprs.push(saved.restore(e));
                }
                Ok(LogicalPlan::Window(Window::try_new(
                    exprs,
                    Arc::new(input),
                )?))
            }
            LogicalPlan::Join(j) => self.join(j, dom),
            LogicalPlan::Union(u) => {
                let mut inputs = Vec::with_capacity(u.inputs.len());
                for i in &u.inputs {
                    let p = self.dependent(i, dom)?;
                    // Every branch: the domain first, then the branch's own columns.
                    let mut cols = domain_columns(&p, dom)?;
                    cols.extend(i.schema().columns().into_iter().map(Expr::Column));
                    inputs.push(Arc::new(
                        LogicalPlanBuilder::from(p).project(cols)?.build()?,
                    ));
                }
                Ok(LogicalPlan::Union(Union::try_new_with_loose_types(inputs)?))
            }
            LogicalPlan::Unnest(u) => {
                let input = self.dependent(&u.input, dom)?;
                LogicalPlanBuilder::from(input)
                    .unnest_columns_with_options(u.exec_columns.clone(), u.options.clone())?
                    .build()
            }
            LogicalPlan::Values(v) => {
                // Rows that use outer columns: a union of one-row projections.
                let mut rows = Vec::with_capacity(v.values.len());
                for row in &v.values {
                    let exprs = row
                        .iter()
                        .zip(v.schema.fields())
                        .map(|(e, f)| e.clone().alias(f.name()));
                    rows.push(Arc::new(
                        LogicalPlanBuilder::empty(true).project(exprs)?.build()?,
                    ));
                }
                let plan = if rows.len() == 1 {
                    Arc::unwrap_or_clone(rows.remove(0))
                } else {
                    LogicalPlan::Union(Union::try_new_with_loose_types(rows)?)
                };
                self.push(&plan, dom)
            }
            LogicalPlan::Subquery(s) => self.push(&s.subquery, dom),
            other => plan_err!(
                "outer references are not supported in {} inside a subquery",
                other.display()
            ),
        }
    }

    /// A filter over a part that does not use the domain, whose conjuncts equate every
    /// domain column to an expression of that part (`x.k = t1.k`): those expressions
    /// stand in for the domain, and no domain is computed.
    fn eliminated(&mut self, f: &Filter, dom: &Domain) -> Result<Option<LogicalPlan>> {
        let schema = f.input.schema();
        let mut bound: Vec<(String, Expr)> = Vec::new();
        for c in split_conjunction_owned(f.predicate.clone()) {
            let Expr::BinaryExpr(b) = c else { continue };
            if b.op != Operator::Eq {
                continue;
            }
            for (outer, inner) in [(&*b.left, &*b.right), (&*b.right, &*b.left)] {
                let Expr::OuterReferenceColumn(field, oc) = outer else {
                    continue;
                };
                let Some(name) = dom.name_of(oc) else {
                    continue;
                };
                if bound.iter().any(|(n, _)| n == name)
                    || inner.contains_outer()
                    || inner.is_volatile()
                    || inner.get_type(schema)? != *field.data_type()
                {
                    continue;
                }
                bound.push((name.to_string(), inner.clone()));
            }
        }
        if bound.len() != dom.cols.len() {
            return Ok(None);
        }
        let predicate = f.predicate.clone().transform_up(|e| match e {
            Expr::OuterReferenceColumn(_, ref c) => match dom.name_of(c) {
                Some(name) => {
                    let bound_expr = bound
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, e)| e.clone());
                    Ok(match bound_expr {
                        Some(b) => Transformed::yes(b),
                        None => Transformed::no(e),
                    })
                }
                None => Ok(Transformed::no(e)),
            },
            other => Ok(Transformed::no(other)),
        })?;
        let filtered = LogicalPlan::Filter(Filter::try_new(predicate.data, Arc::clone(&f.input))?);
        let mut cols: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
        for (_, name) in &dom.cols {
            let e = bound
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, e)| e.clone());
            match e {
                Some(e) => {
                    let t = e.get_type(schema)?;
                    cols.push(canonical_zero(e, &t)?.alias(name));
                }
                None => return Ok(None),
            }
        }
        Ok(Some(
            LogicalPlanBuilder::from(filtered).project(cols)?.build()?,
        ))
    }

    /// `D ⋈ Aggregate`: grouped by the domain too. Without GROUP BY the aggregate has
    /// one row even for an empty input, so its input is left-joined to the domain and
    /// every aggregate counts only the rows that joined.
    fn aggregate(&mut self, a: &Aggregate, dom: &Domain) -> Result<LogicalPlan> {
        let preserver = NamePreserver::new_for_projection();
        let grouped = !a.group_expr.is_empty();
        if grouped {
            if a.group_expr
                .iter()
                .any(|g| matches!(g, Expr::GroupingSet(_)))
            {
                return plan_err!(
                    "GROUPING SETS, CUBE and ROLLUP are not supported in a correlated subquery"
                );
            }
            let input = self.dependent(&a.input, dom)?;
            let schema = input.schema().clone();
            let mut group = domain_columns(&input, dom)?;
            for g in &a.group_expr {
                let saved = preserver.save(g);
                group.push(saved.restore(substitute(g.clone(), dom, &schema)?));
            }
            let mut aggs = Vec::with_capacity(a.aggr_expr.len());
            for e in &a.aggr_expr {
                let saved = preserver.save(e);
                aggs.push(saved.restore(substitute(e.clone(), dom, &schema)?));
            }
            return Ok(LogicalPlan::Aggregate(Aggregate::try_new(
                Arc::new(input),
                group,
                aggs,
            )?));
        }
        if let LogicalPlan::Filter(f) = a.input.as_ref()
            && let Some(p) = self.band_aggregate(a, f, dom)?
        {
            return Ok(p);
        }
        // D ⟕ input: the condition folds in when the input is a filter over a part
        // free of the domain (the common shape); otherwise the input is pushed down on
        // a renamed copy of the domain and joined on it.
        let marker = self.fresh("joined");
        let (input, condition) = match a.input.as_ref() {
            LogicalPlan::Filter(f) if !uses(&f.input, dom) && !has_subquery(&f.predicate) => (
                Arc::unwrap_or_clone(Arc::clone(&f.input)),
                Condition::Outer(f.predicate.clone()),
            ),
            other if !uses(other, dom) => (other.clone(), Condition::Outer(lit(true))),
            other => {
                let pushed = self.push(other, dom)?;
                let names: HashSet<&str> = dom.names().collect();
                let mut cols = Vec::new();
                let mut keys = Vec::new();
                for (q, f) in pushed.schema().iter() {
                    let c = Expr::Column(Column::new(q.cloned(), f.name()));
                    if names.contains(f.name().as_str()) {
                        let renamed = format!("{}_inner", f.name());
                        cols.push(c.alias(&renamed));
                        keys.push((col(f.name()), col(renamed)));
                    } else {
                        cols.push(c);
                    }
                }
                let renamed = LogicalPlanBuilder::from(pushed).project(cols)?.build()?;
                (renamed, Condition::Keys(keys))
            }
        };
        let mut cols: Vec<Expr> = input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        cols.push(lit(true).alias(&marker));
        let right = LogicalPlanBuilder::from(input).project(cols)?.build()?;
        let left = Arc::clone(&dom.plan);
        let (on, condition) = match condition {
            Condition::Outer(c) => {
                let schema = DFSchema::new_with_metadata(
                    left.schema()
                        .iter()
                        .chain(right.schema().iter())
                        .map(|(q, f)| (q.cloned(), Arc::clone(f)))
                        .collect(),
                    Default::default(),
                )?;
                (vec![], Some(substitute(c, dom, &schema)?))
            }
            Condition::Keys(keys) => (null_safe(keys, left.schema(), right.schema())?, None),
        };
        let joined = LogicalPlan::Join(Join::try_new(
            left,
            Arc::new(right),
            on,
            condition,
            JoinType::Left,
            JoinConstraint::On,
            NullEquality::NullEqualsNothing,
            false,
        )?);
        let schema = joined.schema().clone();
        let group = domain_columns(&joined, dom)?;
        let only_joined = col(&marker).is_not_null();
        let mut aggs = Vec::with_capacity(a.aggr_expr.len());
        for e in &a.aggr_expr {
            let saved = preserver.save(e);
            let e = substitute(e.clone(), dom, &schema)?
                .transform_up(|e| match e {
                    Expr::AggregateFunction(AggregateFunction { func, mut params }) => {
                        params.filter = Some(Box::new(match params.filter.take() {
                            Some(f) => only_joined.clone().and(*f),
                            None => only_joined.clone(),
                        }));
                        Ok(Transformed::yes(Expr::AggregateFunction(
                            AggregateFunction { func, params },
                        )))
                    }
                    other => Ok(Transformed::no(other)),
                })?
                .data;
            aggs.push(saved.restore(e));
        }
        Ok(LogicalPlan::Aggregate(Aggregate::try_new(
            Arc::new(joined),
            group,
            aggs,
        )?))
    }

    /// `count`, `sum`, `min` and `max` over the rows on one side of the domain's value
    /// (`SELECT count(*) FROM x WHERE x.b < t.b`), without a join: the domain's values
    /// and the rows' values sorted together in one pass, each aggregate running over it
    /// (a window up to the current row), read at the domain's rows. A join would
    /// produce and aggregate half of |D| × |X| pairs. At equal values the domain row sorts
    /// before the rows for `<`/`>` and after them for `<=`/`>=`; NULL domain values sort
    /// first and see no rows; rows with a NULL value never count.
    ///
    /// Applies to a global aggregate of those functions (no DISTINCT, FILTER or ORDER
    /// BY) over a filter whose one correlated conjunct compares an expression of the
    /// rows with an expression of the one domain column.
    fn band_aggregate(
        &mut self,
        a: &Aggregate,
        f: &Filter,
        dom: &Domain,
    ) -> Result<Option<LogicalPlan>> {
        use datafusion::logical_expr::{
            WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
            expr::WindowFunction,
        };
        if dom.cols.len() != 1
            || uses(&f.input, dom)
            || !outer_refs(&f.input).is_empty()
            || has_subquery(&f.predicate)
        {
            return Ok(None);
        }
        let (outer_col, dname) = (&dom.cols[0].0, dom.cols[0].1.as_str());
        // The one correlated comparison, as (rows' value, op, domain's value).
        let mut band = None;
        let mut rest = Vec::new();
        for c in split_conjunction_owned(f.predicate.clone()) {
            if !c.contains_outer() {
                rest.push(c);
                continue;
            }
            let Expr::BinaryExpr(b) = &c else {
                return Ok(None);
            };
            let op = match b.op {
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => b.op,
                _ => return Ok(None),
            };
            let outer_only = |e: &Expr| {
                e.contains_outer()
                    && !e
                        .exists(|e| Ok(matches!(e, Expr::Column(_))))
                        .unwrap_or(true)
                    && !e.is_volatile()
            };
            let free = |e: &Expr| !e.contains_outer() && !e.is_volatile();
            let found = if free(&b.left) && outer_only(&b.right) {
                ((*b.left).clone(), op, (*b.right).clone())
            } else if free(&b.right) && outer_only(&b.left) {
                let flipped = match op {
                    Operator::Lt => Operator::Gt,
                    Operator::LtEq => Operator::GtEq,
                    Operator::Gt => Operator::Lt,
                    _ => Operator::LtEq,
                };
                ((*b.right).clone(), flipped, (*b.left).clone())
            } else {
                return Ok(None);
            };
            if band.replace(found).is_some() {
                return Ok(None);
            }
        }
        let Some((row_value, op, domain_value)) = band else {
            return Ok(None);
        };
        // Every outer reference in the domain's value is the domain column.
        let only_ours = domain_value
            .exists(|e| Ok(matches!(e, Expr::OuterReferenceColumn(_, c) if c != outer_col)))
            .map(|other| !other)
            .unwrap_or(false);
        if !only_ours {
            return Ok(None);
        }
        // The aggregates: (function, argument or None for count(*)), output type, name.
        struct Running {
            func: Arc<datafusion::logical_expr::AggregateUDF>,
            arg: Option<Expr>,
            count: bool,
            /// An integer sum, run in 128 bits: a prefix no domain row reads may
            /// overflow int8 where the sums read do not.
            exact: bool,
        }
        let preserver = NamePreserver::new_for_projection();
        let mut aggs = Vec::with_capacity(a.aggr_expr.len());
        for e in &a.aggr_expr {
            let inner = match e {
                Expr::Alias(al) => al.expr.as_ref(),
                other => other,
            };
            let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
                return Ok(None);
            };
            if params.distinct
                || params.filter.is_some()
                || !params.order_by.is_empty()
                || params.args.len() != 1
                || params.args[0].contains_outer()
            {
                return Ok(None);
            }
            let arg = params.args[0].clone();
            let running = match func.name() {
                "count" => Running {
                    func: datafusion::functions_aggregate::sum::sum_udaf(),
                    arg: (!matches!(arg, Expr::Literal(ref v, _) if !v.is_null())).then_some(arg),
                    count: true,
                    exact: false,
                },
                "sum" | "min" | "max" => Running {
                    func: Arc::clone(func),
                    exact: func.name() == "sum" && e.get_type(a.input.schema())? == DataType::Int64,
                    arg: Some(arg),
                    count: false,
                },
                _ => return Ok(None),
            };
            let t = e.get_type(a.input.schema())?;
            aggs.push((running, t, preserver.save(e)));
        }
        // Both sides: (value, kind, each aggregate's input, the domain column).
        let value_type = row_value.get_type(f.input.schema())?;
        let domain_schema = dom.plan.schema();
        let domain_value = substitute(domain_value, dom, domain_schema)?;
        let domain_value = if domain_value.get_type(domain_schema)? == value_type {
            domain_value
        } else {
            cast(domain_value, value_type.clone())
        };
        let (v, kind) = (self.fresh("value"), self.fresh("kind"));
        let d_type = col(dname).get_type(domain_schema)?;
        let inputs: Vec<String> = aggs.iter().map(|_| self.fresh("input")).collect();
        let mut row_cols = vec![
            canonical_zero(row_value.clone(), &value_type)?.alias(&v),
            lit(1i64).alias(&kind),
            lit(ScalarValue::try_from(&d_type)?).alias(dname),
        ];
        let mut domain_cols = vec![
            canonical_zero(domain_value, &value_type)?.alias(&v),
            lit(0i64).alias(&kind),
            col(dname),
        ];
        for ((r, _, _), name) in aggs.iter().zip(&inputs) {
            let input = match (&r.arg, r.count) {
                (None, true) => lit(1i64),
                (Some(arg), true) => {
                    when(arg.clone().is_not_null(), lit(1i64)).otherwise(lit(0i64))?
                }
                (Some(arg), false) if r.exact => cast(arg.clone(), DataType::Decimal128(38, 0)),
                (Some(arg), false) => arg.clone(),
                (None, false) => return Ok(None),
            };
            let t = input.get_type(f.input.schema())?;
            row_cols.push(input.alias(name));
            domain_cols.push(
                if r.count {
                    lit(0i64)
                } else {
                    lit(ScalarValue::try_from(&t)?)
                }
                .alias(name),
            );
        }
        let mut keep = vec![row_value.is_not_null()];
        keep.extend(rest);
        let rows = LogicalPlanBuilder::from(f.input.as_ref().clone())
            .filter(conjunction(keep).unwrap_or_else(|| lit(true)))?
            .project(row_cols)?
            .build()?;
        let domain = LogicalPlanBuilder::from(dom.plan.as_ref().clone())
            .project(domain_cols)?
            .build()?;
        let both = LogicalPlan::Union(Union::try_new_with_loose_types(vec![
            Arc::new(rows),
            Arc::new(domain),
        ])?);
        let ascending = matches!(op, Operator::Lt | Operator::LtEq);
        // Strict comparisons: the domain row (kind 0) first among equal values.
        let domain_first = matches!(op, Operator::Lt | Operator::Gt);
        let order = vec![
            col(&v).sort(ascending, true),
            col(&kind).sort(domain_first, true),
        ];
        let frame = WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::Preceding(ScalarValue::UInt64(None)),
            WindowFrameBound::CurrentRow,
        );
        let outputs: Vec<String> = aggs.iter().map(|_| self.fresh("running")).collect();
        let mut windows = Vec::with_capacity(aggs.len());
        for (((r, _, _), input), out) in aggs.iter().zip(&inputs).zip(&outputs) {
            let mut w = WindowFunction::new(
                WindowFunctionDefinition::AggregateUDF(Arc::clone(&r.func)),
                vec![col(input)],
            );
            w.params.order_by = order.clone();
            w.params.window_frame = frame.clone();
            windows.push(Expr::from(w).alias(out));
        }
        let exact: Vec<bool> = aggs.iter().map(|(r, _, _)| r.exact).collect();
        let mut cols = vec![col(dname)];
        for ((_, t, saved), out) in aggs.into_iter().zip(&outputs) {
            let value = if t == DataType::Int64 && exact[cols.len() - 1] {
                int8_udf().call(vec![col(out)])
            } else {
                cast(col(out), t)
            };
            cols.push(saved.restore(value));
        }
        Ok(Some(
            LogicalPlanBuilder::from(both)
                .window(windows)?
                .filter(col(&kind).eq(lit(0i64)))?
                .project(cols)?
                .build()?,
        ))
    }

    /// `D ⋈ Limit`: rows numbered per domain row (in the order of a sort right below).
    fn limit(&mut self, l: &Limit, dom: &Domain, schema: &DFSchema) -> Result<LogicalPlan> {
        // LIMIT over a projection over the sort (`SELECT x … ORDER BY y LIMIT 1`): the
        // limit goes below the projection first, next to the sort that orders it.
        if let LogicalPlan::Projection(p) = l.input.as_ref() {
            let limited = LogicalPlan::Limit(Limit {
                skip: l.skip.clone(),
                fetch: l.fetch.clone(),
                input: Arc::clone(&p.input),
            });
            let swapped =
                LogicalPlan::Projection(Projection::try_new(p.expr.clone(), Arc::new(limited))?);
            return self.push(&swapped, dom);
        }
        let skip = match l.get_skip_type()? {
            SkipType::Literal(n) => n,
            SkipType::UnsupportedExpr => {
                return plan_err!("OFFSET must be a constant in a correlated subquery");
            }
        };
        let fetch = match l.get_fetch_type()? {
            FetchType::Literal(n) => n,
            FetchType::UnsupportedExpr => {
                return plan_err!("LIMIT must be a constant in a correlated subquery");
            }
        };
        let (input, order) = match l.input.as_ref() {
            LogicalPlan::Sort(s) if s.fetch.is_none() => {
                let input = self.dependent(&s.input, dom)?;
                let order = substitute_sorts(&s.expr, dom, input.schema())?;
                (input, order)
            }
            other => (self.dependent(other, dom)?, vec![]),
        };
        self.top_n(input, dom, order, skip, fetch, schema)
    }

    /// Rows `skip + 1 ..= skip + fetch` of each domain row's rows in `order`.
    fn top_n(
        &mut self,
        input: LogicalPlan,
        dom: &Domain,
        order: Vec<SortExpr>,
        skip: usize,
        fetch: Option<usize>,
        schema: &DFSchema,
    ) -> Result<LogicalPlan> {
        let rn = self.fresh("row");
        let keys = domain_columns(&input, dom)?;
        let number = row_number()
            .partition_by(keys)
            .order_by(order)
            .build()?
            .alias(&rn);
        let numbered = LogicalPlanBuilder::from(input)
            .window(vec![number])?
            .build()?;
        let position = cast(col(&rn), DataType::Int64);
        let mut keep = position.clone().gt(lit(skip as i64));
        if let Some(n) = fetch {
            keep = keep.and(position.lt_eq(lit((skip + n) as i64)));
        }
        let filtered = LogicalPlanBuilder::from(numbered).filter(keep)?.build()?;
        // The domain and the limited plan's own columns, without the row number.
        let mut cols = domain_columns(&filtered, dom)?;
        cols.extend(schema.columns().into_iter().map(Expr::Column));
        LogicalPlanBuilder::from(filtered).project(cols)?.build()
    }

    /// `D ⋈ Join`: into the side(s) that use the domain. An inner join whose condition
    /// uses it becomes a filter over the join. Outer and semi joins whose inner side or
    /// condition uses it get the domain on both sides, matched on it.
    fn join(&mut self, j: &Join, dom: &Domain) -> Result<LogicalPlan> {
        if j.null_aware {
            return plan_err!("outer references are not supported in a null-aware anti join");
        }
        let cond_uses =
            j.on.iter()
                .any(|(l, r)| uses_expr(l, dom) || uses_expr(r, dom))
                || j.filter.as_ref().is_some_and(|f| uses_expr(f, dom));
        let (lu, ru) = (uses(&j.left, dom), uses(&j.right, dom));
        use JoinType::*;
        if j.join_type == Inner && cond_uses {
            // Filter(on AND filter) over the cross join, which the filter case pushes.
            let mut preds: Vec<Expr> =
                j.on.iter()
                    .map(|(l, r)| match j.null_equality {
                        NullEquality::NullEqualsNull => not_distinct(l.clone(), r.clone()),
                        NullEquality::NullEqualsNothing => l.clone().eq(r.clone()),
                    })
                    .collect();
            preds.extend(j.filter.clone());
            let cross = LogicalPlan::Join(Join::try_new(
                Arc::clone(&j.left),
                Arc::clone(&j.right),
                vec![],
                None,
                Inner,
                JoinConstraint::On,
                NullEquality::NullEqualsNothing,
                false,
            )?);
            let f = match conjunction(preds) {
                Some(p) => LogicalPlan::Filter(Filter::try_new(p, Arc::new(cross))?),
                None => cross,
            };
            return self.push(&f, dom);
        }
        // Only one side needs the domain when the other side's rows do not depend on
        // it: inner joins; the preserved side of an outer join; a semi/anti join's
        // probe side.
        let one_side = !cond_uses
            && match j.join_type {
                Inner => !(lu && ru),
                Left | LeftSemi | LeftAnti | LeftMark => !ru,
                Right | RightSemi | RightAnti | RightMark => !lu,
                Full => false,
            };
        if one_side {
            let (left, right) = if lu {
                (Arc::new(self.push(&j.left, dom)?), Arc::clone(&j.right))
            } else {
                (Arc::clone(&j.left), Arc::new(self.push(&j.right, dom)?))
            };
            return Ok(LogicalPlan::Join(Join::try_new(
                left,
                right,
                j.on.clone(),
                j.filter.clone(),
                j.join_type,
                j.join_constraint,
                j.null_equality,
                false,
            )?));
        }
        // Both sides carry the domain (the right one renamed), matched on it; the
        // condition's outer references read the left side's.
        let left = self.dependent(&j.left, dom)?;
        let right = self.dependent(&j.right, dom)?;
        let names: HashSet<&str> = dom.names().collect();
        let mut cols = Vec::new();
        let mut pairs = Vec::new();
        for (q, f) in right.schema().iter() {
            if names.contains(f.name().as_str()) {
                let renamed = format!("{}_right", f.name());
                cols.push(Expr::Column(Column::new(q.cloned(), f.name())).alias(&renamed));
                pairs.push((domain_column(&left, f.name())?, col(&renamed)));
            } else {
                cols.push(Expr::Column(Column::new(q.cloned(), f.name())));
            }
        }
        let right = LogicalPlanBuilder::from(right).project(cols)?.build()?;
        let schema = DFSchema::new_with_metadata(
            left.schema()
                .iter()
                .chain(right.schema().iter())
                .map(|(q, f)| (q.cloned(), Arc::clone(f)))
                .collect(),
            Default::default(),
        )?;
        let mut on = Vec::new();
        let mut filter: Vec<Expr> = Vec::new();
        for (l, r) in &j.on {
            on.push((
                substitute(l.clone(), dom, &schema)?,
                substitute(r.clone(), dom, &schema)?,
            ));
        }
        let null_equality = j.null_equality;
        if null_equality == NullEquality::NullEqualsNothing || on.is_empty() {
            on.extend(null_safe(pairs, left.schema(), right.schema())?);
        } else {
            filter.extend(pairs.into_iter().map(|(l, r)| not_distinct(l, r)));
        }
        if let Some(f) = &j.filter {
            filter.push(substitute(f.clone(), dom, &schema)?);
        }
        let joined = LogicalPlan::Join(Join::try_new(
            Arc::new(left),
            Arc::new(right),
            on,
            conjunction(filter),
            j.join_type,
            JoinConstraint::On,
            null_equality,
            false,
        )?);
        // One copy of the domain, from the side every output row has: the left one of
        // inner and left joins, the right one of right joins (an unmatched right row has
        // no left copy), whichever matched of a full join.
        let out_schema = joined.schema().clone();
        let mut cols = Vec::new();
        for (q, f) in out_schema.iter() {
            let name = f.name().as_str();
            let c = Expr::Column(Column::new(q.cloned(), name));
            if let Some(base) = name.strip_suffix("_right")
                && names.contains(base)
            {
                if matches!(j.join_type, RightSemi | RightAnti | RightMark) {
                    cols.push(c.alias(base));
                }
                continue;
            }
            if names.contains(name) {
                let right_copy = || col(format!("{name}_right"));
                match j.join_type {
                    Full => cols.push(coalesce(vec![c, right_copy()]).alias(name)),
                    Right => cols.push(right_copy().alias(name)),
                    _ => cols.push(c),
                }
            } else {
                cols.push(c);
            }
        }
        LogicalPlanBuilder::from(joined).project(cols)?.build()
    }
}

// ---------------------------------------------------------------------------------------
// Helpers.

/// Join keys that match each pair when equal or both NULL, for a join whose NULLs
/// equal nothing: the values with NULL replaced by a default, and whether each is NULL.
/// (DataFusion applies a join's `NullEqualsNull` to every key, also to equalities it
/// later moves into the join from a filter above, which then match NULL to NULL; so the
/// NULL-safe keys are spelled out.)
fn null_safe(
    pairs: Vec<(Expr, Expr)>,
    left: &DFSchema,
    right: &DFSchema,
) -> Result<Vec<(Expr, Expr)>> {
    let mut on = Vec::with_capacity(pairs.len() * 2);
    for (l, r) in pairs {
        let (_, lf) = l.to_field(left)?;
        let (_, rf) = r.to_field(right)?;
        let (t, l_null, r_null) = (lf.data_type().clone(), lf.is_nullable(), rf.is_nullable());
        if !l_null && !r_null {
            on.push((canonical_zero(l, &t)?, canonical_zero(r, &t)?));
            continue;
        }
        on.push((l.clone().is_null(), r.clone().is_null()));
        match default_value(&t) {
            Some(default) => on.push((
                coalesce(vec![canonical_zero(l, &t)?, lit(default.clone())]),
                coalesce(vec![canonical_zero(r, &t)?, lit(default)]),
            )),
            // Nested types (a FLOAT4[n] vector's default is not of its type): their text.
            _ => {
                let text = |e: Expr| coalesce(vec![cast(e, DataType::Utf8), lit("")]);
                on.push((text(l), text(r)));
            }
        }
    }
    Ok(on)
}

/// A non-NULL value of type `t` (NULLs are replaced by it in a key column beside an
/// is-NULL flag): DataFusion's default, or for a fixed-size list (a `FLOAT4[n]` vector,
/// whose default DataFusion gets wrong) a list of defaults.
fn default_value(t: &DataType) -> Option<ScalarValue> {
    if let DataType::FixedSizeList(item, n) = t {
        let inner = default_value(item.data_type())?;
        let values = ScalarValue::iter_to_array(std::iter::repeat_n(inner, *n as usize)).ok()?;
        let list = datafusion::arrow::array::FixedSizeListArray::try_new(
            Arc::clone(item),
            *n,
            values,
            None,
        )
        .ok()?;
        return ScalarValue::try_from_array(&list, 0).ok();
    }
    let v = ScalarValue::new_default(t).ok()?;
    (v.data_type() == *t).then_some(v)
}

/// `e` with `-0.0` as `0.0` for floats: SQL's `=` holds them equal, while hashing and
/// sorting tell them apart, so a domain value, a join key or a window partition could
/// put one value in two places.
fn canonical_zero(e: Expr, t: &DataType) -> Result<Expr> {
    if !matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64) {
        return Ok(e);
    }
    let zero = ScalarValue::new_zero(t)?;
    when(e.clone().eq(lit(zero.clone())), lit(zero)).otherwise(e)
}

fn not_distinct(l: Expr, r: Expr) -> Expr {
    binary_expr(l, Operator::IsNotDistinctFrom, r)
}

fn has_subquery(e: &Expr) -> bool {
    e.exists(|e| {
        Ok(matches!(
            e,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::SetComparison(_)
        ))
    })
    .unwrap_or(true)
}

fn has_predicate_subquery(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_expressions(|e| {
        found |= e
            .exists(|e| {
                Ok(matches!(
                    e,
                    Expr::SetComparison(_) | Expr::Exists(_) | Expr::InSubquery(_)
                ))
            })
            .unwrap_or(false);
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The plans of the subquery expressions in `e`.
fn subquery_plans(e: &Expr) -> Vec<Arc<LogicalPlan>> {
    let mut out = Vec::new();
    let _ = e.apply(|e| {
        match e {
            Expr::ScalarSubquery(sq)
            | Expr::Exists(Exists { subquery: sq, .. })
            | Expr::InSubquery(InSubquery { subquery: sq, .. })
            | Expr::SetComparison(SetComparison { subquery: sq, .. }) => {
                out.push(Arc::clone(&sq.subquery))
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

fn is_correlated(sq: &Subquery) -> bool {
    !sq.outer_ref_columns.is_empty() || !outer_refs(&sq.subquery).is_empty()
}

/// Every outer reference in `plan` and its subqueries, once each.
fn outer_refs(plan: &LogicalPlan) -> Vec<(datafusion::arrow::datatypes::FieldRef, Column)> {
    let mut out: Vec<(datafusion::arrow::datatypes::FieldRef, Column)> = Vec::new();
    let _ = plan.apply_with_subqueries(|p| {
        p.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::OuterReferenceColumn(f, c) = e
                    && !out.iter().any(|(_, o)| o == c)
                {
                    out.push((Arc::clone(f), c.clone()));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    out
}

/// Whether `plan` (or a subquery in it) uses one of the domain's outer columns.
fn uses(plan: &LogicalPlan, dom: &Domain) -> bool {
    outer_refs(plan)
        .iter()
        .any(|(_, c)| dom.name_of(c).is_some())
}

fn uses_expr(e: &Expr, dom: &Domain) -> bool {
    e.exists(|e| {
        Ok(match e {
            Expr::OuterReferenceColumn(_, c) => dom.name_of(c).is_some(),
            _ => false,
        })
    })
    .unwrap_or(true)
}

/// `D × plan`.
fn cross(dom: &Domain, plan: &LogicalPlan) -> Result<LogicalPlan> {
    if let LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: true,
        ..
    }) = plan
    {
        return Ok(dom.plan.as_ref().clone());
    }
    LogicalPlanBuilder::from(dom.plan.as_ref().clone())
        .cross_join(plan.clone())?
        .build()
}

/// The domain column `name` as it appears in `plan`'s schema (an alias on the way may
/// have qualified it).
fn domain_column(plan: &LogicalPlan, name: &str) -> Result<Expr> {
    let (q, f) = plan.schema().qualified_field_with_unqualified_name(name)?;
    Ok(Expr::Column(Column::new(q.cloned(), f.name())))
}

fn domain_columns(plan: &LogicalPlan, dom: &Domain) -> Result<Vec<Expr>> {
    dom.names().map(|n| domain_column(plan, n)).collect()
}

/// `e` with the domain's outer references replaced by its columns in `schema`.
fn substitute(e: Expr, dom: &Domain, schema: &DFSchema) -> Result<Expr> {
    e.transform_up(|e| match e {
        Expr::OuterReferenceColumn(_, ref c) => match dom.name_of(c) {
            Some(name) => {
                let (q, f) = schema.qualified_field_with_unqualified_name(name)?;
                Ok(Transformed::yes(Expr::Column(Column::new(
                    q.cloned(),
                    f.name(),
                ))))
            }
            None => Ok(Transformed::no(e)),
        },
        other => Ok(Transformed::no(other)),
    })
    .data()
}

fn substitute_sorts(s: &[SortExpr], dom: &Domain, schema: &DFSchema) -> Result<Vec<SortExpr>> {
    s.iter()
        .map(|s| {
            Ok(SortExpr {
                expr: substitute(s.expr.clone(), dom, schema)?,
                asc: s.asc,
                nulls_first: s.nulls_first,
            })
        })
        .collect()
}

/// The first output column of a subquery's plan.
fn first_column(plan: &LogicalPlan) -> Result<Column> {
    match plan.schema().columns().into_iter().next() {
        Some(c) => Ok(c),
        None => plan_err!("a subquery used as an expression must return a column"),
    }
}

/// `plan` narrowed to `columns` (when its schema has more).
fn project_columns(plan: LogicalPlan, columns: Vec<Column>) -> Result<LogicalPlan> {
    if plan.schema().columns() == columns {
        return Ok(plan);
    }
    LogicalPlanBuilder::from(plan)
        .project(columns.into_iter().map(Expr::Column))?
        .build()
}
