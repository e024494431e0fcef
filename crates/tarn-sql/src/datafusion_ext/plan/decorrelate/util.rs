//! Helpers of the rewrite: NULL-safe keys, defaults, tests for subqueries and outer
//! references, domain columns and substitution.

use super::*;

/// Join keys that match each pair when equal or both NULL, for a join whose NULLs
/// equal nothing: the values with NULL replaced by a default, and whether each is NULL.
/// (DataFusion applies a join's `NullEqualsNull` to every key, also to equalities it
/// later moves into the join from a filter above, which then match NULL to NULL; so the
/// NULL-safe keys are spelled out.)
pub(super) fn null_safe(
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
pub(super) fn default_value(t: &DataType) -> Option<ScalarValue> {
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
pub(super) fn canonical_zero(e: Expr, t: &DataType) -> Result<Expr> {
    if !matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64) {
        return Ok(e);
    }
    let zero = ScalarValue::new_zero(t)?;
    when(e.clone().eq(lit(zero.clone())), lit(zero)).otherwise(e)
}

pub(super) fn not_distinct(l: Expr, r: Expr) -> Expr {
    binary_expr(l, Operator::IsNotDistinctFrom, r)
}

pub(super) fn has_subquery(e: &Expr) -> bool {
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

pub(super) fn has_predicate_subquery(plan: &LogicalPlan) -> bool {
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
pub(super) fn subquery_plans(e: &Expr) -> Vec<Arc<LogicalPlan>> {
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

pub(super) fn is_correlated(sq: &Subquery) -> bool {
    !sq.outer_ref_columns.is_empty() || !outer_refs(&sq.subquery).is_empty()
}

/// Every outer reference in `plan` and its subqueries, once each.
pub(super) fn outer_refs(
    plan: &LogicalPlan,
) -> Vec<(datafusion::arrow::datatypes::FieldRef, Column)> {
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
pub(super) fn uses(plan: &LogicalPlan, dom: &Domain) -> bool {
    outer_refs(plan)
        .iter()
        .any(|(_, c)| dom.name_of(c).is_some())
}

pub(super) fn uses_expr(e: &Expr, dom: &Domain) -> bool {
    e.exists(|e| {
        Ok(match e {
            Expr::OuterReferenceColumn(_, c) => dom.name_of(c).is_some(),
            _ => false,
        })
    })
    .unwrap_or(true)
}

/// `D × plan`.
pub(super) fn cross(dom: &Domain, plan: &LogicalPlan) -> Result<LogicalPlan> {
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
pub(super) fn domain_column(plan: &LogicalPlan, name: &str) -> Result<Expr> {
    let (q, f) = plan.schema().qualified_field_with_unqualified_name(name)?;
    Ok(Expr::Column(Column::new(q.cloned(), f.name())))
}

pub(super) fn domain_columns(plan: &LogicalPlan, dom: &Domain) -> Result<Vec<Expr>> {
    dom.names().map(|n| domain_column(plan, n)).collect()
}

/// `e` with the domain's outer references replaced by its columns in `schema`.
pub(super) fn substitute(e: Expr, dom: &Domain, schema: &DFSchema) -> Result<Expr> {
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

pub(super) fn substitute_sorts(
    s: &[SortExpr],
    dom: &Domain,
    schema: &DFSchema,
) -> Result<Vec<SortExpr>> {
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
pub(super) fn first_column(plan: &LogicalPlan) -> Result<Column> {
    match plan.schema().columns().into_iter().next() {
        Some(c) => Ok(c),
        None => plan_err!("a subquery used as an expression must return a column"),
    }
}

/// `plan` narrowed to `columns` (when its schema has more).
pub(super) fn project_columns(plan: LogicalPlan, columns: Vec<Column>) -> Result<LogicalPlan> {
    if plan.schema().columns() == columns {
        return Ok(plan);
    }
    LogicalPlanBuilder::from(plan)
        .project(columns.into_iter().map(Expr::Column))?
        .build()
}

/// The plan of a join's right side when it is a LATERAL subquery that reads the left
/// side's columns: under its alias, if it has one, and the `Subquery` node DataFusion
/// plans it in (gone once a subquery inside it was unnested).
pub(super) fn lateral_subquery(j: &Join) -> Option<&LogicalPlan> {
    let mut right = j.right.as_ref();
    if let LogicalPlan::SubqueryAlias(a) = right {
        right = a.input.as_ref();
    }
    if let LogicalPlan::Subquery(sq) = right {
        right = sq.subquery.as_ref();
    }
    let left = j.left.schema();
    outer_refs(right)
        .iter()
        .any(|(_, c)| left.has_column(c))
        .then_some(right)
}
