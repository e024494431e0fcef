//! Operations that can fail run only on the rows the rest of their filter keeps.
//!
//! PostgreSQL evaluates a WHERE clause's conjuncts in order and stops at the first false
//! one, so `d <> 0 AND 1 / d > 0.2` never divides by zero and `a < 1000 AND a * 2 > 0`
//! never overflows on the rows `a < 1000` rejects. DataFusion evaluates both sides of an
//! AND over the whole batch (it skips the right side only when few rows pass the left),
//! so an operation that fails on a row the filter would drop — integer and float
//! arithmetic, which Tarn checks, division, logarithms, a scalar subquery's value —
//! failed the statement. This optimizer rule rewrites each filter (also a join's and the
//! ones pushed into a scan) so that a conjunct holding such an operation runs under a
//! `CASE` guarded by the filter's other conjuncts: `c AND (CASE WHEN c THEN f ELSE false
//! END)`. `CASE` evaluates a branch only on the rows that select it. Within a conjunct,
//! `s OR f` becomes `CASE WHEN s THEN true ELSE f END`. In a filter a NULL and a false
//! both drop the row, so the answers are the same. The rule runs after DataFusion has
//! merged and pushed its filters (a derived table's WHERE and an outer predicate end up
//! in one conjunction), and is idempotent.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::utils::{conjunction, disjunction, split_conjunction_owned};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Filter, LogicalPlan, Operator, TableScan, expr::Case, lit,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The rule; install after DataFusion's rules and before the top-k rule (which takes a
/// filter into its search node).
#[derive(Debug, Default)]
pub struct GuardFallible;

impl OptimizerRule for GuardFallible {
    fn name(&self) -> &str {
        "tarn_guard_fallible"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        match plan {
            LogicalPlan::Filter(f) => {
                let Some(predicate) = guard(split_conjunction_owned(f.predicate.clone())) else {
                    return Ok(Transformed::no(LogicalPlan::Filter(f)));
                };
                let predicate = conjunction(predicate).unwrap_or_else(|| lit(true));
                Ok(Transformed::yes(LogicalPlan::Filter(Filter::try_new(
                    predicate,
                    Arc::clone(&f.input),
                )?)))
            }
            LogicalPlan::Join(mut j) => {
                let Some(filter) = j.filter.take() else {
                    return Ok(Transformed::no(LogicalPlan::Join(j)));
                };
                match guard(split_conjunction_owned(filter.clone())) {
                    Some(g) => {
                        j.filter = conjunction(g);
                        Ok(Transformed::yes(LogicalPlan::Join(j)))
                    }
                    None => {
                        j.filter = Some(filter);
                        Ok(Transformed::no(LogicalPlan::Join(j)))
                    }
                }
            }
            LogicalPlan::TableScan(mut scan) => match guard(scan.filters.clone()) {
                Some(filters) => {
                    scan.filters = filters;
                    Ok(Transformed::yes(LogicalPlan::TableScan(TableScan {
                        ..scan
                    })))
                }
                None => Ok(Transformed::no(LogicalPlan::TableScan(scan))),
            },
            other => Ok(Transformed::no(other)),
        }
    }
}

/// The conjuncts with the fallible ones guarded, or `None` when nothing changes.
fn guard(conjuncts: Vec<Expr>) -> Option<Vec<Expr>> {
    let mut changed = false;
    // Disjunctions first: `s OR f` evaluates `f` only where `s` is not true.
    let conjuncts: Vec<Expr> = conjuncts
        .into_iter()
        .map(|c| match guard_or(&c) {
            Some(g) => {
                changed = true;
                g
            }
            None => c,
        })
        .collect();
    let (fallible, safe): (Vec<Expr>, Vec<Expr>) = conjuncts
        .into_iter()
        .partition(|c| fallible(c) && !guarded(c));
    if fallible.is_empty() || safe.is_empty() {
        return changed.then(|| safe.into_iter().chain(fallible).collect());
    }
    let condition = conjunction(safe.clone())?;
    let mut out = safe;
    for f in fallible {
        out.push(case(condition.clone(), f, lit(false)));
    }
    Some(out)
}

/// `s1 OR … OR f1 OR …` with fallible disjuncts as `CASE WHEN s1 OR … THEN true ELSE
/// f1 OR … END`.
fn guard_or(e: &Expr) -> Option<Expr> {
    if guarded(e) {
        return None;
    }
    let mut disjuncts = Vec::new();
    split_disjunction(e, &mut disjuncts);
    if disjuncts.len() < 2 {
        return None;
    }
    let (fallible, safe): (Vec<Expr>, Vec<Expr>) = disjuncts.into_iter().partition(fallible);
    if fallible.is_empty() || safe.is_empty() {
        return None;
    }
    Some(case(disjunction(safe)?, lit(true), disjunction(fallible)?))
}

fn split_disjunction(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            split_disjunction(left, out);
            split_disjunction(right, out);
        }
        other => out.push(other.clone()),
    }
}

fn case(when: Expr, then: Expr, otherwise: Expr) -> Expr {
    Expr::Case(Case {
        expr: None,
        when_then_expr: vec![(Box::new(when), Box::new(then))],
        else_expr: Some(Box::new(otherwise)),
    })
}

/// Whether `e` is one of this rule's guards (so that running it again changes nothing).
fn guarded(e: &Expr) -> bool {
    matches!(e, Expr::Case(c) if c.expr.is_none() && c.when_then_expr.len() == 1 && c.else_expr.is_some())
}

/// Whether evaluating `e` can fail on a row's values.
fn fallible(e: &Expr) -> bool {
    e.exists(|e| {
        Ok(match e {
            Expr::ScalarFunction(f) => {
                let name = f.func.name();
                name.starts_with("tarn_checked_")
                    || name.starts_with("tarn_float_")
                    || name == crate::decorrelate::SUBQUERY_VALUE
            }
            Expr::BinaryExpr(b) => matches!(b.op, Operator::Divide | Operator::Modulo),
            _ => false,
        })
    })
    .unwrap_or(true)
}
