//! Reading key lookups out of SQL: which table a single-table SELECT reads, which of its
//! WHERE clauses are exactly equalities on one key's columns, and which literals convert
//! to a key column's type without rounding. Used by the key fast path, the top-k fast
//! path and UPDATE/DELETE by key. A leaf over the AST and the catalog.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, Expr, GroupByExpr, SetExpr, TableFactor, Value,
};
use tarn_catalog::{Catalog, ColumnDef, ColumnId, SqlType, TableDef};
use tarn_storage::key_specs;

use crate::ast::ident::{name_parts, normalize};
use crate::ast::types::column_field;

/// A column reference's parts (`col`, `t.col`), normalized.
fn column_ref(e: &Expr) -> Option<Vec<String>> {
    match e {
        Expr::Identifier(id) => Some(vec![normalize(id)]),
        Expr::CompoundIdentifier(ids) => Some(ids.iter().map(normalize).collect()),
        Expr::Nested(inner) => column_ref(inner),
        _ => None,
    }
}

/// A literal value, possibly negated: `(negated, value)`.
pub(crate) fn signed_value(e: &Expr) -> Option<(bool, &Value)> {
    match e {
        Expr::Value(v) => Some((false, &v.value)),
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => Some((true, &v.value)),
            _ => None,
        },
        _ => None,
    }
}

/// The literal of an equality, as an array of the key column's type.
fn key_literal(e: &Expr, col: &ColumnDef) -> Option<ArrayRef> {
    if let Expr::Nested(inner) = e {
        return key_literal(inner, col);
    }
    let (negative, v) = signed_value(e)?;
    let ty = column_field(&col.name, &col.ty, true).data_type().clone();
    match (&col.ty, v) {
        (SqlType::Int2 | SqlType::Int4 | SqlType::Int8, Value::Number(n, _)) => {
            let n: i64 = n.parse().ok()?;
            let n = if negative { n.checked_neg()? } else { n };
            let a: ArrayRef = Arc::new(Int64Array::from(vec![n]));
            // A literal out of the column's range matches nothing in the planner, and
            // fails the cast here: leave it to the planner.
            let out = cast(&a, &ty).ok()?;
            (out.null_count() == 0).then_some(out)
        }
        (
            SqlType::Text | SqlType::Varchar(_),
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s),
        ) if !negative => {
            let a: ArrayRef = Arc::new(StringArray::from(vec![s.as_str()]));
            cast(&a, &ty).ok()
        }
        _ => None,
    }
}

/// A WHERE that is exactly `col = literal` on every column of one key of `def` (joined
/// by AND): the key's columns and the literals as arrays of the key columns' types.
/// `column` resolves a column reference to an index into `def.columns`.
pub(crate) fn key_predicate(
    def: &TableDef,
    catalog: &Catalog,
    selection: &Expr,
    column: &dyn Fn(&Expr) -> Option<usize>,
) -> Option<(Vec<ColumnId>, Vec<ArrayRef>)> {
    let mut conjuncts = vec![selection];
    let mut equalities: Vec<(usize, &Expr)> = Vec::new();
    while let Some(e) = conjuncts.pop() {
        match e {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                conjuncts.push(left);
                conjuncts.push(right);
            }
            Expr::Nested(inner) => conjuncts.push(inner),
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => {
                let eq = match (column(left), column(right)) {
                    (Some(c), None) => (c, right.as_ref()),
                    (None, Some(c)) => (c, left.as_ref()),
                    _ => return None,
                };
                if equalities.iter().any(|(c, _)| *c == eq.0) {
                    return None;
                }
                equalities.push(eq);
            }
            _ => return None,
        }
    }
    let ids: Vec<u32> = equalities.iter().map(|(c, _)| def.columns[*c].id).collect();
    let spec = key_specs(catalog, def.id)
        .into_iter()
        .find(|s| s.columns.len() == ids.len() && s.columns.iter().all(|c| ids.contains(c)))?;
    let mut arrays = Vec::with_capacity(spec.columns.len());
    for cid in &spec.columns {
        let (c, lit) = equalities
            .iter()
            .find(|(c, _)| def.columns[*c].id == *cid)?;
        arrays.push(key_literal(lit, &def.columns[*c])?);
    }
    Some((spec.columns, arrays))
}

/// Whether `*` carries none of the dialect extras (EXCLUDE, EXCEPT, REPLACE, RENAME,
/// ILIKE): every column of the table, in order.
pub(crate) fn plain_wildcard(opts: &ast::WildcardAdditionalOptions) -> bool {
    opts.opt_exclude.is_none()
        && opts.opt_except.is_none()
        && opts.opt_replace.is_none()
        && opts.opt_rename.is_none()
        && opts.opt_ilike.is_none()
}

/// A column reference resolver for table `def` reached as `qualifier`.
pub(crate) fn column_resolver<'a>(
    def: &'a TableDef,
    qualifier: &'a str,
) -> impl Fn(&Expr) -> Option<usize> + 'a {
    move |e: &Expr| {
        let parts = column_ref(e)?;
        let name = match parts.as_slice() {
            [c] => c,
            [t, c] if t == qualifier => c,
            _ => return None,
        };
        def.columns.iter().position(|c| c.name == *name)
    }
}

/// The SELECT of `q` when it reads one table and nothing else: no CTEs, set operations,
/// DISTINCT, joins, grouping, windows or dialect extras (ORDER BY and LIMIT are the
/// caller's to check). Returns the select, the table's name and its alias.
pub(crate) fn single_table_select(
    q: &ast::Query,
) -> Option<(&ast::Select, &ast::ObjectName, Option<&ast::TableAlias>)> {
    if q.with.is_some()
        || q.fetch.is_some()
        || !q.locks.is_empty()
        || q.for_clause.is_some()
        || q.settings.is_some()
        || q.format_clause.is_some()
        || !q.pipe_operators.is_empty()
    {
        return None;
    }
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    let plain_group_by =
        matches!(&sel.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if sel.distinct.is_some()
        || sel.top.is_some()
        || sel.into.is_some()
        || sel.from.len() != 1
        || !sel.from[0].joins.is_empty()
        || !sel.lateral_views.is_empty()
        || sel.prewhere.is_some()
        || !plain_group_by
        || !sel.cluster_by.is_empty()
        || !sel.distribute_by.is_empty()
        || !sel.sort_by.is_empty()
        || sel.having.is_some()
        || !sel.named_window.is_empty()
        || sel.qualify.is_some()
        || !sel.connect_by.is_empty()
        || sel.value_table_mode.is_some()
    {
        return None;
    }
    let TableFactor::Table {
        name,
        alias,
        args: None,
        with_hints,
        version: None,
        partitions,
        json_path: None,
        sample: None,
        index_hints,
        ..
    } = &sel.from[0].relation
    else {
        return None;
    };
    if !with_hints.is_empty() || !partitions.is_empty() || !index_hints.is_empty() {
        return None;
    }
    if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
        return None;
    }
    Some((sel, name, alias.as_ref()))
}

/// The table `name` (`"ws"."t"`) of organization `org` in `catalog`, and the name its
/// columns are qualified by in the statement (the alias, else the table's name).
pub(crate) fn target<'c>(
    catalog: &'c Catalog,
    org: &str,
    name: &ast::ObjectName,
    alias: Option<&ast::TableAlias>,
) -> Option<(&'c TableDef, String)> {
    let parts = name_parts(name).ok()?;
    let [ws, table] = parts.as_slice() else {
        return None;
    };
    let def = catalog.table(org, ws, table)?;
    Some((def, alias.map_or(table.clone(), |a| normalize(&a.name))))
}
