//! PostgreSQL output column names: a column keeps its name, an unaliased function call
//! is named after the function, any other unaliased expression is `?column?`.

use datafusion::arrow::datatypes::Schema;
use datafusion::sql::sqlparser::ast::{Expr, Query, SelectItem, SetExpr};

/// What a query's AST says of its output names, taken before the query is planned
/// (planning consumes the AST): resolved against the planned schema by
/// [`OutputNames::resolve`].
#[derive(Debug)]
pub enum OutputNames {
    /// A SELECT list's names, item by item.
    Items(Vec<ItemName>),
    /// A VALUES list: `column1`, `column2`, ….
    Values,
    /// Whatever the planner named the fields.
    Planned,
}

/// One SELECT item's name(s).
#[derive(Debug)]
pub enum ItemName {
    /// An expression's name (its alias, or PostgreSQL's name for it).
    Name(String),
    /// Several aliases of one item.
    Names(Vec<String>),
    /// `*` or `t.*`: the planner's fields.
    Wildcard,
}

impl OutputNames {
    /// The names of `query`'s output.
    pub fn of(query: &Query) -> OutputNames {
        match first_select_items(&query.body) {
            Some(items) => OutputNames::Items(
                items
                    .iter()
                    .map(|item| match item {
                        SelectItem::UnnamedExpr(e) => ItemName::Name(expr_name(e)),
                        SelectItem::ExprWithAlias { alias, .. } => {
                            ItemName::Name(alias.value.clone())
                        }
                        SelectItem::ExprWithAliases { aliases, .. } => {
                            ItemName::Names(aliases.iter().map(|a| a.value.clone()).collect())
                        }
                        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                            ItemName::Wildcard
                        }
                    })
                    .collect(),
            ),
            None if matches!(query.body.as_ref(), SetExpr::Values(_)) => OutputNames::Values,
            None => OutputNames::Planned,
        }
    }

    /// Output names for the planned `schema`. Falls back to the planned field names
    /// where the AST cannot say (several wildcards mixed with expressions).
    pub fn resolve(self, schema: &Schema) -> Vec<String> {
        let fallback: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        match self {
            OutputNames::Items(items) => item_names(items, fallback),
            OutputNames::Values => (1..=fallback.len()).map(|i| format!("column{i}")).collect(),
            OutputNames::Planned => fallback,
        }
    }
}

fn item_names(items: Vec<ItemName>, fallback: Vec<String>) -> Vec<String> {
    let wildcards = items
        .iter()
        .filter(|i| matches!(i, ItemName::Wildcard))
        .count();
    let explicit = items.len() - wildcards;
    if wildcards > 1 && explicit > 0 {
        return fallback;
    }
    let expanded = fallback.len().saturating_sub(explicit);
    let mut out = Vec::with_capacity(fallback.len());
    for item in items {
        match item {
            ItemName::Name(n) => out.push(n),
            ItemName::Names(ns) => out.extend(ns),
            ItemName::Wildcard => {
                let start = out.len();
                let take = if wildcards == 1 {
                    expanded
                } else {
                    fallback.len() - start
                };
                out.extend(fallback.iter().skip(start).take(take).cloned());
                if wildcards > 1 {
                    return fallback;
                }
            }
        }
    }
    if out.len() == fallback.len() {
        out
    } else {
        fallback
    }
}

fn first_select_items(body: &SetExpr) -> Option<&[SelectItem]> {
    match body {
        SetExpr::Select(s) => Some(&s.projection),
        SetExpr::Query(q) => first_select_items(&q.body),
        SetExpr::SetOperation { left, .. } => first_select_items(left),
        _ => None,
    }
}

/// PostgreSQL's name for an unaliased expression.
pub fn expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(id) => id.value.clone(),
        Expr::CompoundIdentifier(ids) => ids.last().map(|i| i.value.clone()).unwrap_or_default(),
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.to_lowercase())
            .unwrap_or_else(|| "?column?".into()),
        Expr::Cast {
            expr, data_type, ..
        } => match expr.as_ref() {
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Function(_) => {
                expr_name(expr)
            }
            _ => pg_type_label(&data_type.to_string()),
        },
        Expr::Nested(inner) => expr_name(inner),
        Expr::Case { .. } => "case".into(),
        Expr::Exists { .. } => "exists".into(),
        Expr::Array(_) => "array".into(),
        Expr::Subquery(q) => match first_select_items(&q.body) {
            Some([SelectItem::UnnamedExpr(e)]) => expr_name(e),
            Some([SelectItem::ExprWithAlias { alias, .. }]) => alias.value.clone(),
            _ => "?column?".into(),
        },
        _ => "?column?".into(),
    }
}

/// PostgreSQL names `'x'::int` after the type (`int4`), as it does for any cast of a
/// constant.
fn pg_type_label(written: &str) -> String {
    match written.to_lowercase().as_str() {
        "int" | "integer" | "int4" => "int4".into(),
        "bigint" | "int8" => "int8".into(),
        "smallint" | "int2" => "int2".into(),
        "real" | "float4" => "float4".into(),
        "double precision" | "float8" => "float8".into(),
        "boolean" | "bool" => "bool".into(),
        "text" => "text".into(),
        "jsonb" | "json" => "jsonb".into(),
        "date" => "date".into(),
        "timestamptz" | "timestamp with time zone" => "timestamptz".into(),
        "timestamp" => "timestamp".into(),
        "uuid" => "uuid".into(),
        s if s.starts_with("numeric") || s.starts_with("decimal") => "numeric".into(),
        s if s.starts_with("varchar") || s.starts_with("character varying") => "varchar".into(),
        s if s.ends_with("[]") => "?column?".into(),
        _ => "?column?".into(),
    }
}
