//! PostgreSQL forms DataFusion does not plan, rewritten as a statement is parsed into
//! ones it does (a view stores the rewritten form, as PostgreSQL's `pg_get_viewdef`
//! also writes its own):
//!
//! - `FETCH { FIRST | NEXT } [n] { ROW | ROWS } ONLY`, the standard's LIMIT: `LIMIT n`
//!   (`n` defaults to 1), beside any `OFFSET n ROWS`. `WITH TIES` (which needs the
//!   sort's ties) and `PERCENT` (which PostgreSQL does not have) are refused, and a FETCH
//!   beside a LIMIT is the syntax error it is in PostgreSQL.
//! - `substring(s FROM 'pattern')` (and `substring(s, 'pattern')`) with a quoted pattern:
//!   PostgreSQL's regular-expression substring, the first match or, when the pattern has
//!   a parenthesized group, what the first group matched; NULL without a match. It is
//!   `regexp_match(s, 'pattern')[1]`, which is exactly that. (A numeric `FROM` is the
//!   positional substring, as before; `substr` has no regular-expression form.)
//! - `LIKE`/`ILIKE … ESCAPE 'c'` with a quoted pattern: the pattern rewritten to the
//!   backslash escapes DataFusion knows (`ESCAPE ''`: no escape character at all).
//! - `EXTRACT(CENTURY | DECADE | MILLENNIUM FROM x)`: from the year, as PostgreSQL
//!   counts them (the 21st century began in 2001).
//! - `generate_series` and `range` in FROM given an argument cast to a smaller integer
//!   type (`generate_series(1, $1::int)`, what clients send): cast to bigint, as
//!   PostgreSQL widens it (DataFusion's table functions take int8 only, and said
//!   "must be an INTEGER or NULL, got integer").
//! - `LATERAL unnest(t.a)` in FROM: `unnest(t.a)`, which already reads the columns of
//!   the tables before it (sqlparser read the LATERAL form as a table function, which
//!   DataFusion does not have).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, DateTimeField, Expr, FunctionArg, FunctionArgExpr, LimitClause, Query,
    Statement, TableFactor, Value, VisitMut, VisitorMut,
};

use crate::ast::ident::is_bare_name;
use crate::error::{Error, Result};

/// Whether statement text `sql` may hold one of the forms above: each needs a keyword
/// (`FETCH`, `SUBSTRING`, `ESCAPE`, a century, decade or millennium, `LATERAL`), so most statements
/// are not walked a second time (a key lookup's whole cost is a few walks of its tree).
pub(crate) fn may_hold(sql: &str) -> bool {
    const WORDS: [&[u8]; 9] = [
        b"fetch",
        b"lateral",
        b"generate_series",
        b"range",
        b"substring",
        b"escape",
        b"century",
        b"decade",
        b"millen",
    ];
    let b = sql.as_bytes();
    WORDS.iter().any(|w| {
        b.windows(w.len())
            .any(|window| window.eq_ignore_ascii_case(w))
    })
}

/// Rewrites the forms above everywhere in `stmt` (subqueries too).
pub(crate) fn rewrite(stmt: &mut Statement) -> Result<()> {
    match stmt.visit(&mut PgForms) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(m) => Err(Error::BadRequest(m)),
    }
}

struct PgForms;

fn number(n: i64) -> Expr {
    Expr::value(Value::Number(n.to_string(), false))
}

fn quoted(e: &Expr) -> Option<&str> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// `pattern` with escape character `esc` (None: none) as a pattern whose escape is the
/// backslash, or None when it ends in the escape character (PostgreSQL's error then).
fn backslash_pattern(pattern: &str, esc: Option<char>) -> Option<String> {
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == esc {
            let next = chars.next()?;
            if matches!(next, '%' | '_' | '\\') {
                out.push('\\');
            }
            out.push(next);
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// `e` cast to a smaller integer type (`x::int`, `CAST(x AS smallint)`), cast to bigint
/// instead.
fn widen_integer_cast(e: &mut Expr) {
    match e {
        Expr::Nested(inner) => widen_integer_cast(inner),
        Expr::Cast { data_type, .. } => {
            if matches!(
                data_type,
                ast::DataType::Int(_)
                    | ast::DataType::Integer(_)
                    | ast::DataType::Int4(_)
                    | ast::DataType::SmallInt(_)
                    | ast::DataType::Int2(_)
                    | ast::DataType::TinyInt(_)
                    | ast::DataType::MediumInt(_)
            ) {
                *data_type = ast::DataType::BigInt(None);
            }
        }
        _ => {}
    }
}

impl VisitorMut for PgForms {
    type Break = String;

    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<String> {
        let Some(fetch) = q.fetch.take() else {
            return ControlFlow::Continue(());
        };
        if fetch.with_ties {
            return ControlFlow::Break("FETCH … WITH TIES is not supported; use LIMIT".into());
        }
        if fetch.percent {
            return ControlFlow::Break("FETCH … PERCENT is not supported; use LIMIT".into());
        }
        let n = fetch.quantity.unwrap_or_else(|| number(1));
        match &mut q.limit_clause {
            None => {
                q.limit_clause = Some(LimitClause::LimitOffset {
                    limit: Some(n),
                    offset: None,
                    limit_by: vec![],
                });
            }
            Some(LimitClause::LimitOffset {
                limit: limit @ None,
                limit_by,
                ..
            }) if limit_by.is_empty() => *limit = Some(n),
            Some(_) => {
                return ControlFlow::Break("syntax error at or near \"FETCH\"".into());
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, t: &mut TableFactor) -> ControlFlow<String> {
        if let TableFactor::Table {
            name,
            args: Some(args),
            ..
        } = t
            && (is_bare_name(name, "generate_series") || is_bare_name(name, "range"))
        {
            for a in &mut args.args {
                if let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = a {
                    widen_integer_cast(e);
                }
            }
            return ControlFlow::Continue(());
        }
        let TableFactor::Function {
            lateral: true,
            name,
            args,
            with_ordinality,
            alias,
        } = t
        else {
            return ControlFlow::Continue(());
        };
        if !is_bare_name(name, "unnest") {
            return ControlFlow::Continue(());
        }
        let mut array_exprs = Vec::with_capacity(args.len());
        for a in args.iter() {
            match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => array_exprs.push(e.clone()),
                _ => return ControlFlow::Continue(()),
            }
        }
        *t = TableFactor::UNNEST {
            alias: alias.take(),
            array_exprs,
            with_offset: false,
            with_offset_alias: None,
            with_ordinality: *with_ordinality,
        };
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<String> {
        match e {
            Expr::Substring {
                expr,
                substring_from: Some(from),
                substring_for: None,
                shorthand: false,
                ..
            } if quoted(from).is_some() => {
                let matched = crate::ast::ident::call(
                    "regexp_match",
                    vec![expr.as_ref().clone(), from.as_ref().clone()],
                );
                *e = crate::ast::ident::call("array_element", vec![matched, number(1)]);
            }
            Expr::Like {
                pattern,
                escape_char: escape @ Some(_),
                ..
            }
            | Expr::ILike {
                pattern,
                escape_char: escape @ Some(_),
                ..
            } => {
                let esc = match escape.as_ref().map(|v| &v.value) {
                    Some(Value::SingleQuotedString(s)) if s.chars().count() <= 1 => {
                        s.chars().next()
                    }
                    Some(Value::SingleQuotedString(_)) => {
                        return ControlFlow::Break(
                            "invalid escape string: escape string must be empty or one character"
                                .into(),
                        );
                    }
                    _ => return ControlFlow::Continue(()),
                };
                let Some(written) = quoted(pattern) else {
                    if esc == Some('\\') {
                        *escape = None;
                    }
                    return ControlFlow::Continue(());
                };
                let Some(p) = backslash_pattern(written, esc) else {
                    return ControlFlow::Break(
                        "invalid escape string: a LIKE pattern must not end with its escape \
                         character"
                            .into(),
                    );
                };
                **pattern = Expr::value(Value::SingleQuotedString(p));
                *escape = None;
            }
            Expr::Extract { field, expr, .. }
                if matches!(
                    field,
                    DateTimeField::Century
                        | DateTimeField::Decade
                        | DateTimeField::Millennium
                        | DateTimeField::Millenium
                ) =>
            {
                let (add, per) = match field {
                    DateTimeField::Century => (99, 100),
                    DateTimeField::Decade => (0, 10),
                    _ => (999, 1000),
                };
                let year = Expr::Extract {
                    field: DateTimeField::Year,
                    syntax: ast::ExtractSyntax::From,
                    expr: expr.clone(),
                };
                let year = Expr::Cast {
                    kind: ast::CastKind::DoubleColon,
                    expr: Box::new(year),
                    data_type: ast::DataType::BigInt(None),
                    array: false,
                    format: None,
                };
                let shifted = Expr::BinaryOp {
                    left: Box::new(year),
                    op: BinaryOperator::Plus,
                    right: Box::new(number(add)),
                };
                *e = Expr::Nested(Box::new(Expr::BinaryOp {
                    left: Box::new(Expr::Nested(Box::new(shifted))),
                    op: BinaryOperator::Divide,
                    right: Box::new(number(per)),
                }));
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::backslash_pattern;

    #[test]
    fn like_patterns_take_the_backslash_as_their_escape() {
        assert_eq!(backslash_pattern("a##%b", Some('#')).unwrap(), "a#%b");
        assert_eq!(backslash_pattern("a#%b", Some('#')).unwrap(), "a\\%b");
        assert_eq!(backslash_pattern("a\\b%", Some('#')).unwrap(), "a\\\\b%");
        assert_eq!(backslash_pattern("a\\%", None).unwrap(), "a\\\\%");
        assert_eq!(backslash_pattern("a#", Some('#')), None);
    }

    #[test]
    fn only_statements_naming_a_form_are_walked() {
        use super::may_hold;
        for sql in [
            "SELECT 1 FETCH FIRST ROW ONLY",
            "select substring(a from 'x')",
            "SELECT 'a' LIKE 'a' ESCAPE '#'",
            "SELECT extract(Century FROM d)",
            "SELECT extract(decade FROM d)",
            "SELECT extract(MILLENNIUM FROM d)",
        ] {
            assert!(may_hold(sql), "{sql}");
        }
        assert!(!may_hold(r#"SELECT * FROM "ws"."t" WHERE id = $1"#));
    }
}
