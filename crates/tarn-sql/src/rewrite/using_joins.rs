//! Joins with `USING` and `NATURAL` read as PostgreSQL reads them, where DataFusion 55
//! does not: a join column of a USING join is one column, whose value is the left
//! side's for an inner or left join, the right side's for a right join and
//! `COALESCE(left, right)` for a full join; `SELECT *` lists the join columns first (in
//! USING's order, or the left side's for NATURAL), then the left side's other columns,
//! then the right side's; and an unqualified reference to a join column means that one
//! column. DataFusion kept whichever side's column sorted first by its table's name (a
//! right join's unmatched rows showed NULL ids), listed `*` in table order, and called
//! a full join's column ambiguous.
//!
//! So, before planning, a SELECT whose FROM has such a join and whose relations' columns
//! are known here (tables, views, derived tables with named outputs) has its `*` written
//! out and its unqualified references to join columns (in the select list, WHERE, GROUP
//! BY, HAVING and ORDER BY, not inside subqueries) replaced by the join column's
//! expression. The join itself is left for DataFusion to plan. A SELECT whose relations
//! are not all known here (a table function, a WITH query, a LATERAL subquery) is left as it
//! was.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, GroupByExpr, Ident, JoinConstraint, JoinOperator, ObjectName, OrderByKind, Query, Select,
    SelectItem, SetExpr, TableFactor, TableWithJoins, VisitMut, VisitorMut,
};

use crate::ast::ident::{call, normalize};

/// A relation's column names (normalized), by the name a FROM clause gives it.
pub type ColumnsOf<'a> = dyn Fn(&ObjectName) -> Option<Vec<String>> + 'a;

/// Rewrites every SELECT of `node` as the module's documentation says.
pub fn rewrite<T: VisitMut>(node: &mut T, columns_of: &ColumnsOf<'_>) {
    let _ = node.visit(&mut UsingJoins { columns_of });
}

struct UsingJoins<'a, 'b> {
    columns_of: &'a ColumnsOf<'b>,
}

impl VisitorMut for UsingJoins<'_, '_> {
    type Break = ();

    // After the query's own subqueries (derived tables first), so that their `*`s are
    // written out already when their outputs are read here.
    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(s) = q.body.as_mut() {
            let order_by = q.order_by.as_mut().and_then(|o| match &mut o.kind {
                OrderByKind::Expressions(items) => Some(items),
                OrderByKind::All(_) => None,
            });
            select(s, order_by, self.columns_of);
        } else {
            set_operands(&mut q.body, self.columns_of);
        }
        ControlFlow::Continue(())
    }
}

fn set_operands(body: &mut SetExpr, columns_of: &ColumnsOf<'_>) {
    match body {
        SetExpr::Select(s) => select(s, None, columns_of),
        SetExpr::SetOperation { left, right, .. } => {
            set_operands(left, columns_of);
            set_operands(right, columns_of);
        }
        _ => {}
    }
}

/// One output column of a FROM item: its name and what an unqualified reference to it
/// reads.
#[derive(Clone)]
struct Col {
    name: String,
    expr: Expr,
    /// A join column of a USING or NATURAL join (named by an alias when `*` lists it).
    merged: bool,
}

fn has_using(from: &[TableWithJoins]) -> bool {
    from.iter().any(|t| {
        t.joins.iter().any(|j| {
            constraint(&j.join_operator).is_some_and(|(_, c)| {
                matches!(c, JoinConstraint::Using(_) | JoinConstraint::Natural)
            })
        })
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Inner,
    Left,
    Right,
    Full,
    Cross,
}

fn constraint(op: &JoinOperator) -> Option<(Kind, &JoinConstraint)> {
    Some(match op {
        JoinOperator::Join(c) | JoinOperator::Inner(c) => (Kind::Inner, c),
        JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => (Kind::Left, c),
        JoinOperator::Right(c) | JoinOperator::RightOuter(c) => (Kind::Right, c),
        JoinOperator::FullOuter(c) => (Kind::Full, c),
        JoinOperator::CrossJoin(c) => (Kind::Cross, c),
        _ => return None,
    })
}

fn column_ref(qualifier: &[Ident], name: &str) -> Expr {
    let mut parts = qualifier.to_vec();
    parts.push(Ident::with_quote('"', name));
    Expr::CompoundIdentifier(parts)
}

/// The output names of a derived table's query, when the query says them plainly.
fn output_names(q: &Query) -> Option<Vec<String>> {
    let SetExpr::Select(s) = q.body.as_ref() else {
        return None;
    };
    s.projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) => Some(match e {
                Expr::Identifier(id) => normalize(id),
                Expr::CompoundIdentifier(ids) => normalize(ids.last()?),
                e => crate::rewrite::names::expr_name(e),
            }),
            SelectItem::ExprWithAlias { alias, .. } => Some(normalize(alias)),
            _ => None,
        })
        .collect()
}

fn leaf(f: &TableFactor, columns_of: &ColumnsOf<'_>) -> Option<Vec<Col>> {
    let (qualifier, mut names, alias) = match f {
        TableFactor::Table {
            name,
            alias,
            args: None,
            with_hints,
            version: None,
            partitions,
            ..
        } if with_hints.is_empty() && partitions.is_empty() => {
            let qualifier = match alias {
                Some(a) => vec![a.name.clone()],
                None => name
                    .0
                    .iter()
                    .map(|p| p.as_ident().cloned())
                    .collect::<Option<_>>()?,
            };
            (qualifier, columns_of(name)?, alias.as_ref())
        }
        TableFactor::Derived {
            lateral: false,
            subquery,
            alias: Some(alias),
            ..
        } => (
            vec![alias.name.clone()],
            output_names(subquery)?,
            Some(alias),
        ),
        _ => return None,
    };
    if let Some(a) = alias {
        if a.columns.len() > names.len() {
            return None;
        }
        for (n, c) in names.iter_mut().zip(&a.columns) {
            *n = normalize(&c.name);
        }
    }
    Some(
        names
            .into_iter()
            .map(|name| Col {
                expr: column_ref(&qualifier, &name),
                name,
                merged: false,
            })
            .collect(),
    )
}

/// The columns of `t`'s join tree, or None when any part of it is not known here.
fn scope(t: &TableWithJoins, columns_of: &ColumnsOf<'_>) -> Option<Vec<Col>> {
    let mut left = leaf(&t.relation, columns_of)?;
    for j in &t.joins {
        let right = leaf(&j.relation, columns_of)?;
        let (kind, c) = constraint(&j.join_operator)?;
        let keys: Vec<String> = match c {
            JoinConstraint::Using(names) => names
                .iter()
                .map(|n| match n.0.as_slice() {
                    [p] => p.as_ident().map(normalize),
                    _ => None,
                })
                .collect::<Option<_>>()?,
            JoinConstraint::Natural => {
                let mut keys: Vec<String> = Vec::new();
                for c in &left {
                    if right.iter().any(|r| r.name == c.name) && !keys.contains(&c.name) {
                        keys.push(c.name.clone());
                    }
                }
                keys
            }
            JoinConstraint::On(_) | JoinConstraint::None => {
                left.extend(right);
                continue;
            }
        };
        if kind == Kind::Cross {
            return None;
        }
        let mut merged = Vec::with_capacity(keys.len());
        for k in &keys {
            let l = left.iter().find(|c| &c.name == k)?.expr.clone();
            let r = right.iter().find(|c| &c.name == k)?.expr.clone();
            let expr = match kind {
                Kind::Inner | Kind::Left | Kind::Cross => l,
                Kind::Right => r,
                Kind::Full => call("coalesce", vec![l, r]),
            };
            merged.push(Col {
                name: k.clone(),
                expr,
                merged: true,
            });
        }
        merged.extend(left.into_iter().filter(|c| !keys.contains(&c.name)));
        merged.extend(right.into_iter().filter(|c| !keys.contains(&c.name)));
        left = merged;
    }
    Some(left)
}

fn select(
    s: &mut Select,
    order_by: Option<&mut Vec<datafusion::sql::sqlparser::ast::OrderByExpr>>,
    columns_of: &ColumnsOf<'_>,
) {
    if !has_using(&s.from) {
        return;
    }
    let mut columns = Vec::new();
    for t in &s.from {
        match scope(t, columns_of) {
            Some(c) => columns.extend(c),
            None => return,
        }
    }
    // Join columns by name; a name merged in two FROM items stays ambiguous.
    let mut merged: HashMap<String, Option<Expr>> = HashMap::new();
    for c in columns.iter().filter(|c| c.merged) {
        merged
            .entry(c.name.clone())
            .and_modify(|e| *e = None)
            .or_insert_with(|| Some(c.expr.clone()));
    }
    let merged: HashMap<String, Expr> = merged
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
    let aliases: Vec<String> = s
        .projection
        .iter()
        .filter_map(|i| match i {
            SelectItem::ExprWithAlias { alias, .. } => Some(normalize(alias)),
            _ => None,
        })
        .collect();
    let mut projection = Vec::with_capacity(s.projection.len());
    for item in std::mem::take(&mut s.projection) {
        match item {
            SelectItem::Wildcard(opts)
                if opts.opt_ilike.is_none()
                    && opts.opt_exclude.is_none()
                    && opts.opt_except.is_none()
                    && opts.opt_replace.is_none()
                    && opts.opt_rename.is_none()
                    && opts.opt_alias.is_none() =>
            {
                for c in &columns {
                    projection.push(if c.merged {
                        SelectItem::ExprWithAlias {
                            expr: c.expr.clone(),
                            alias: Ident::with_quote('"', &c.name),
                        }
                    } else {
                        SelectItem::UnnamedExpr(c.expr.clone())
                    });
                }
            }
            SelectItem::UnnamedExpr(Expr::Identifier(id))
                if merged.contains_key(&normalize(&id)) =>
            {
                projection.push(SelectItem::ExprWithAlias {
                    expr: merged[&normalize(&id)].clone(),
                    alias: id,
                });
            }
            SelectItem::UnnamedExpr(mut e) => {
                replace(&mut e, &merged);
                projection.push(SelectItem::UnnamedExpr(e));
            }
            SelectItem::ExprWithAlias { mut expr, alias } => {
                replace(&mut expr, &merged);
                projection.push(SelectItem::ExprWithAlias { expr, alias });
            }
            other => projection.push(other),
        }
    }
    s.projection = projection;
    if let Some(e) = &mut s.selection {
        replace(e, &merged);
    }
    if let GroupByExpr::Expressions(exprs, _) = &mut s.group_by {
        for e in exprs {
            replace(e, &merged);
        }
    }
    if let Some(e) = &mut s.having {
        replace(e, &merged);
    }
    for o in order_by.into_iter().flatten() {
        // A bare name in ORDER BY is an output column's first (`SELECT a AS id … ORDER
        // BY id` orders by a).
        if let Expr::Identifier(id) = &o.expr
            && aliases.contains(&normalize(id))
        {
            continue;
        }
        replace(&mut o.expr, &merged);
    }
}

/// Replaces the unqualified references to join columns in `e`, outside subqueries.
fn replace(e: &mut Expr, merged: &HashMap<String, Expr>) {
    struct Replace<'a> {
        merged: &'a HashMap<String, Expr>,
        depth: usize,
    }
    impl VisitorMut for Replace<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            if self.depth == 0
                && let Expr::Identifier(id) = e
                && let Some(m) = self.merged.get(&normalize(id))
            {
                *e = Expr::Nested(Box::new(m.clone()));
            }
            ControlFlow::Continue(())
        }
    }
    if merged.is_empty() {
        return;
    }
    let _ = e.visit(&mut Replace { merged, depth: 0 });
}
