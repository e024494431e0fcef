//! Identifiers as PostgreSQL reads them: unquoted names fold to lower case, object names
//! split into their parts, relation names quoted back for messages, and calls written as
//! SQL. A leaf: it
//! imports nothing of the crate but its error type.

use datafusion::sql::sqlparser::ast::{self, Ident, ObjectName};

use crate::error::{Error, Result};

/// Normalizes an identifier as PostgreSQL does: unquoted names fold to lower case.
pub fn normalize(id: &Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// The parts of an object name, normalized.
pub fn name_parts(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(normalize)
                .ok_or_else(|| Error::BadRequest(format!("invalid name {name}")))
        })
        .collect()
}

/// Display form of a relation name for messages: `"ws"."docs"`.
pub fn quoted(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(".")
}

/// `name(args…)` as a SQL AST call (also the numeric-input guard's).
pub(crate) fn call(name: &str, args: Vec<ast::Expr>) -> ast::Expr {
    ast::Expr::Function(ast::Function {
        name: ast::ObjectName::from(vec![ast::Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: ast::FunctionArguments::None,
        args: ast::FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// Whether `name` is the one unqualified name `want`, in any case (`unnest`, not
/// `s.unnest`): how a built-in function is recognized where the statement is rewritten.
pub(crate) fn is_bare_name(name: &ObjectName, want: &str) -> bool {
    matches!(name.0.as_slice(), [part] if part
        .as_ident()
        .is_some_and(|i| i.value.eq_ignore_ascii_case(want)))
}

/// Whether `f` calls the function `name` (its last name part, in any case).
pub(crate) fn is_call_to(f: &ast::Function, name: &str) -> bool {
    f.name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .is_some_and(|i| i.value.eq_ignore_ascii_case(name))
}

/// Whether `e` holds a subquery anywhere: a scalar subquery, EXISTS, IN (SELECT …),
/// `ARRAY(SELECT …)`, `= ANY (SELECT …)` — any query nested in the expression, found by
/// visiting queries rather than naming the expression kinds that can hold one (a list of
/// kinds missed `ARRAY(SELECT …)`, which sqlparser parses as a function call).
pub(crate) fn has_subquery(e: &ast::Expr) -> bool {
    struct Find;
    impl ast::Visitor for Find {
        type Break = ();
        fn pre_visit_query(&mut self, _: &ast::Query) -> std::ops::ControlFlow<()> {
            std::ops::ControlFlow::Break(())
        }
    }
    ast::Visit::visit(e, &mut Find).is_break()
}
