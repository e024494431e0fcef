//! Binding `$n` parameters and PostgreSQL array text into the statement's AST.
//!
//! Each `$n` becomes the literal its JSON value maps to (SPEC §4.6): a number an int8 or
//! float8 literal, a string a text literal, an array an `ARRAY[…]`, an object its JSON
//! text. Binding literals, rather than typed placeholders, lets every statement kind
//! (Tarn's own DML and DDL as well as DataFusion's SELECT) take parameters the same way,
//! and gives untyped positions such as `metadata->>$1` a concrete type.
//!
//! Casts of text literals to array types (`'{0.1,0.2}'::float4[]`) are rewritten into
//! `ARRAY[…]` literals, since DataFusion cannot cast text to lists.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, ArrayElemTypeDef, Expr, Value, Visit, VisitMut, Visitor, VisitorMut,
    visit_expressions_mut,
};
use serde_json::Value as Json;
use tarn_catalog::SqlType;

use crate::ast::array_text::{ArrayText, parse_array_text};
use crate::datafusion_ext::context::read_view::ByNumber;
use crate::error::{Error, Result, bad};

/// Whether `sql` may hold anything [`bind`] rewrites: a `$n` placeholder or a cast.
/// Walking a large statement's AST costs as much as parsing it, so statements without
/// either skip the walk.
pub fn needs_binding(sql: &str) -> bool {
    sql.contains('$') || sql.contains("::") || sql.to_ascii_lowercase().contains("cast")
}

/// At least as many as the parameter references of `sql`: its `$` signs (each `$n` is
/// one), counted on the text so that [`may_bind_big_texts`] needs no walk of the AST.
pub fn references(sql: &str) -> usize {
    sql.bytes().filter(|b| *b == b'$').count()
}

/// Whether a text parameter may weigh [`BIG_TEXT`] or more over its references, as
/// [`bind_texts`] counts them, given at least as many `references` as the statement
/// has ([`references`]): a statement whose texts are all short skips counting
/// references on its AST (a walk per statement, as long as the parse).
///
/// [`BIG_TEXT`]: crate::datafusion_ext::functions::param_text::BIG_TEXT
pub fn may_bind_big_texts(references: usize, params: &[Json]) -> bool {
    params.iter().any(|p| {
        matches!(p, Json::String(s)
            if s.len().saturating_mul(references)
                >= crate::datafusion_ext::functions::param_text::BIG_TEXT)
    })
}

/// The highest `$n` in `stmt`: how many parameters it takes.
pub fn required_params(stmt: &ast::Statement) -> usize {
    let mut max = 0;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(stmt, |e| {
        if let Some(i) = placeholder_index(e) {
            max = max.max(i + 1);
        }
        ControlFlow::<()>::Continue(())
    });
    max
}

/// PostgreSQL's error for more parameters than a statement takes (fewer is `there is no
/// parameter $n`, when the missing one is reached).
pub fn check_param_count(given: usize, required: usize) -> Result<()> {
    if given > required {
        return bad(format!(
            "bind message supplies {given} parameters, but prepared statement requires {required}"
        ));
    }
    Ok(())
}

/// Replaces every `$n` in `stmt` (a statement or one expression) with `params[n-1]` and
/// rewrites array-text casts.
pub fn bind<V: VisitMut + Visit>(stmt: &mut V, params: &[Json]) -> Result<()> {
    bind_texts(stmt, params, false, false).map(drop)
}

/// A select item that is only an array parameter (`SELECT $1` of `[1, 2]`) keeps
/// PostgreSQL's name for a parameter, `?column?`: bound, it is an `ARRAY[…]` (named
/// `array`) or, when large, a call (named after the function).
fn name_array_params<V: VisitMut>(stmt: &mut V, params: &[Json]) {
    struct Namer<'a>(&'a [Json]);
    impl VisitorMut for Namer<'_> {
        type Break = ();
        // Only the outermost query (the statement's result; its first SELECT names
        // the columns of a set operation): then the visit stops.
        fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
            let mut body = q.body.as_mut();
            while let ast::SetExpr::SetOperation { left, .. } = body {
                body = left.as_mut();
            }
            let ast::SetExpr::Select(select) = body else {
                return ControlFlow::Break(());
            };
            for item in &mut select.projection {
                if let ast::SelectItem::UnnamedExpr(e) = item
                    && let Some(i) = placeholder_index(e)
                    && matches!(self.0.get(i), Some(Json::Array(_)))
                {
                    let expr = std::mem::replace(e, Expr::Value(Value::Null.into()));
                    *item = ast::SelectItem::ExprWithAlias {
                        expr,
                        // Quoted, so that the statement printed as SQL reads back.
                        alias: ast::Ident::with_quote('"', "?column?"),
                    };
                }
            }
            ControlFlow::Break(())
        }
    }
    if params.iter().any(|p| matches!(p, Json::Array(_))) {
        let _ = stmt.visit(&mut Namer(params));
    }
}

/// [`bind`], and with `by_number` a text parameter whose copies as a literal would weigh
/// [`BIG_TEXT`](crate::datafusion_ext::functions::param_text::BIG_TEXT) or more binds
/// as `engine_param_text(n)` (see `functions::param_text`); with `arrays_by_number` a
/// large array parameter is made one Arrow list once, whatever its references, and
/// binds as a call that names it (see `functions::param_array`). What is so bound, by
/// number less one, is for the statement's view. Only for statements DataFusion plans
/// whole, whose expressions are never stored (a DEFAULT would keep the call, not the
/// value).
pub fn bind_texts<V: VisitMut + Visit>(
    stmt: &mut V,
    params: &[Json],
    by_number: bool,
    arrays_by_number: bool,
) -> Result<ByNumber> {
    name_array_params(stmt, params);
    let mut texts: Vec<Option<std::sync::Arc<str>>> = Vec::new();
    if by_number
        && params
            .iter()
            .any(|p| matches!(p, Json::String(s) if !s.is_empty()))
    {
        // References of each parameter: ten of a 10 KB text weigh what one of 100 KB does.
        let mut counter = CountRefs {
            refs: vec![0usize; params.len()],
            literal_only: vec![false; params.len()],
            constant_depth: 0,
        };
        let _ = Visit::visit(&*stmt, &mut counter);
        texts = params
            .iter()
            .zip(counter.refs.iter().zip(&counter.literal_only))
            .map(|(p, (&r, &only))| match p {
                Json::String(s)
                    if !only
                        && s.len().saturating_mul(r)
                            >= crate::datafusion_ext::functions::param_text::BIG_TEXT =>
                {
                    Some(std::sync::Arc::from(s.as_str()))
                }
                _ => None,
            })
            .collect();
        if texts.iter().any(Option::is_some) {
            let _ = visit_expressions_mut(stmt, |e| {
                if let Some(i) = placeholder_index(e)
                    && texts.get(i).is_some_and(Option::is_some)
                {
                    *e = crate::ast::ident::call(
                        crate::datafusion_ext::functions::param_text::FUNCTION,
                        vec![lit(Value::Number((i + 1).to_string(), false))],
                    );
                }
                ControlFlow::<()>::Continue(())
            });
        } else {
            texts.clear();
        }
    }
    let mut arrays = Vec::new();
    bind_rest(stmt, params, arrays_by_number.then_some(&mut arrays))?;
    Ok(ByNumber { texts, arrays })
}

/// Counts each parameter's references, and marks those that must stay literals: the
/// operands of `<#>` (the search planner reads its query as a constant while it plans),
/// the arguments of Tarn's own functions (`engine_…`), which read theirs the same way,
/// parameters cast in place to a type other than text, the values of VALUES rows, and
/// LIMIT and OFFSET.
struct CountRefs {
    refs: Vec<usize>,
    literal_only: Vec<bool>,
    constant_depth: usize,
}

impl CountRefs {
    /// Marks the parameter `e` is, if it is one, as one that stays a literal.
    fn keep_literal(&mut self, e: &Expr) {
        if let Some(i) = placeholder_index(e)
            && let Some(o) = self.literal_only.get_mut(i)
        {
            *o = true;
        }
    }

    fn reads_constants(e: &Expr) -> bool {
        match e {
            Expr::BinaryOp {
                op: ast::BinaryOperator::Custom(op),
                ..
            } => op == crate::datafusion_ext::functions::similarity::OPERATOR,
            Expr::Function(f) => f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.to_ascii_lowercase().starts_with("engine_")),
            _ => false,
        }
    }
}

impl Visitor for CountRefs {
    type Break = ();

    fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<()> {
        // The values of a VALUES row: an INSERT of literals is written without the
        // planner (copied once), and a row of calls plans apart from one of literals.
        if let ast::SetExpr::Values(values) = q.body.as_ref() {
            for e in values.rows.iter().flat_map(|r| r.iter()) {
                self.keep_literal(match e {
                    Expr::Cast { expr, .. } => expr.as_ref(),
                    e => e,
                });
            }
        }
        // LIMIT and OFFSET are read as constants while the statement is planned
        // (`LIMIT length($1)`).
        let mut mark = |e: &Expr| {
            self.keep_literal(e);
            ControlFlow::<()>::Continue(())
        };
        let _ = ast::visit_expressions(&q.limit_clause, &mut mark);
        let _ = ast::visit_expressions(&q.fetch, &mut mark);
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if Self::reads_constants(e) {
            self.constant_depth += 1;
        }
        // A parameter cast in place to another type than text: Tarn reads some such
        // casts of literals its own way (array text, numeric text). Not jsonb and
        // bytea, which read any text as they read a literal: a literal of 30 MB cast to
        // jsonb took 6 s in the planner's copies and names of it, and grew faster than
        // its length.
        if let Expr::Cast {
            expr, data_type, ..
        } = e
            && !matches!(
                data_type,
                ast::DataType::Text
                    | ast::DataType::Varchar(_)
                    | ast::DataType::String(_)
                    | ast::DataType::JSON
                    | ast::DataType::JSONB
                    | ast::DataType::Bytea
            )
        {
            self.keep_literal(expr);
        }
        if let Some(r) = placeholder_index(e).and_then(|i| self.refs.get_mut(i)) {
            *r += 1;
        }
        if self.constant_depth > 0 {
            self.keep_literal(e);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if Self::reads_constants(e) {
            self.constant_depth -= 1;
        }
        ControlFlow::Continue(())
    }
}

/// The index (number less one) of the parameter `e` is, if it is a `$n`.
fn placeholder_index(e: &Expr) -> Option<usize> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => p
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| n.checked_sub(1)),
            _ => None,
        },
        _ => None,
    }
}

fn bind_rest<V: VisitMut>(
    stmt: &mut V,
    params: &[Json],
    mut arrays: Option<&mut Vec<Option<datafusion::common::ScalarValue>>>,
) -> Result<()> {
    // An array parameter cast to json/jsonb binds as its JSON text, as jsonb takes
    // text: through `ARRAY[…]` its values would first take one SQL type (`["1"]` came
    // back `[1]`, `[null]` as `[]`). Before the other bindings, which would make the
    // placeholder an `ARRAY[…]` first. Only a statement given an array walks for them.
    if params.iter().any(|p| matches!(p, Json::Array(_))) {
        let _ = visit_expressions_mut(stmt, |expr| {
            if let Expr::Cast {
                expr: inner,
                data_type: ast::DataType::JSON | ast::DataType::JSONB,
                ..
            } = expr
                && let Some(value @ Json::Array(_)) =
                    placeholder_index(inner).and_then(|i| params.get(i))
            {
                **inner = lit(Value::SingleQuotedString(value.to_string()));
            }
            ControlFlow::<()>::Continue(())
        });
    }
    let mut err: Option<Error> = None;
    // Array elements bound as SQL literals so far (see `LITERAL_ELEMENTS`).
    let mut literals = 0usize;
    let _ = visit_expressions_mut(stmt, |expr| {
        match rewrite(expr, params, &mut literals, arrays.as_deref_mut()) {
            Ok(Some(new)) => *expr = new,
            Ok(None) => {}
            Err(e) => {
                err = Some(e);
                return ControlFlow::Break(());
            }
        }
        // What a parameter's value makes wrong (`FILTER (WHERE $1)` with 1): this walk
        // is children first, so an expression's parameters are bound by now.
        if let Some(message) = crate::ast::unsupported::refused_once_bound(expr) {
            err = Some(Error::BadRequest(message));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Array elements one statement binds as SQL literals (`ARRAY[…]`, one expression per
/// element, planned one by one); past it, every array of one leaf type binds as one
/// Arrow list (`engine_param_array`), whatever its size. Enough for the vectors of an
/// INSERT or a search, which the planner-free paths read as literals; 2,000 arrays of
/// 4,000 numbers as literals had held 5.8 GB while they were planned.
const LITERAL_ELEMENTS: usize = 16_384;

fn rewrite(
    expr: &Expr,
    params: &[Json],
    literals: &mut usize,
    arrays: Option<&mut Vec<Option<datafusion::common::ScalarValue>>>,
) -> Result<Option<Expr>> {
    match expr {
        // Expressions are visited children first: the query side of `<#>` is bound by
        // now. A vector of hundreds of literals would cost the planner milliseconds
        // (one expression per element, coerced and folded one by one); as one array
        // text literal it is read once, by the similarity planner.
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Custom(op),
            right,
        } if op == crate::datafusion_ext::functions::similarity::OPERATOR => {
            Ok(compact_query(right).map(|r| Expr::BinaryOp {
                left: left.clone(),
                op: ast::BinaryOperator::Custom(op.clone()),
                right: Box::new(r),
            }))
        }
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => {
                let n: usize = p
                    .strip_prefix('$')
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| Error::BadRequest(format!("invalid parameter {p}")))?;
                match n.checked_sub(1).and_then(|i| params.get(i)) {
                    Some(value @ Json::Array(items)) => Ok(Some(
                        crate::datafusion_ext::functions::param_array::bind_large(
                            value,
                            literals,
                            LITERAL_ELEMENTS,
                            n,
                            arrays,
                        )?
                        .unwrap_or_else(|| {
                            if crate::datafusion_ext::functions::param_array::has_sql_type(items) {
                                json_to_expr(value)
                            } else {
                                lit(Value::SingleQuotedString(value.to_string()))
                            }
                        }),
                    )),
                    Some(value) => Ok(Some(json_to_expr(value))),
                    None => bad(format!("there is no parameter ${n}")),
                }
            }
            _ => Ok(None),
        },
        // A large array parameter cast to jsonb: its JSON text, as jsonb takes text.
        Expr::Cast {
            kind,
            expr: inner,
            data_type: data_type @ (ast::DataType::JSON | ast::DataType::JSONB),
            array,
            format,
        } => Ok(
            crate::datafusion_ext::functions::param_array::json_text(inner).map(|text| {
                Expr::Cast {
                    kind: kind.clone(),
                    expr: Box::new(lit(Value::SingleQuotedString(text.to_string()))),
                    data_type: data_type.clone(),
                    array: *array,
                    format: format.clone(),
                }
            }),
        ),
        Expr::Cast {
            expr: inner,
            data_type: ast::DataType::Array(ArrayElemTypeDef::SquareBracket(elem, _)),
            ..
        } => {
            let Expr::Value(v) = inner.as_ref() else {
                // Not a literal: read as array text when it is text (array_in.rs).
                return Ok(crate::datafusion_ext::functions::array_in::bind(expr));
            };
            let Value::SingleQuotedString(text) = &v.value else {
                return Ok(None);
            };
            // A long array (more separators than an embedding has dimensions) is read
            // at run time, in one pass over its text (array_in.rs): as `ARRAY[…]` each
            // element became expressions the planner types, coerces and folds one by one
            // — 3M elements took 19 s and 4.2 GB.
            if text.bytes().filter(|b| *b == b',').count()
                >= crate::datafusion_ext::functions::param_array::LARGE
            {
                return Ok(crate::datafusion_ext::functions::array_in::bind_text(expr));
            }
            // Numbers are read as numbers (integers refusing a fraction); everything
            // else (booleans `t`/`yes`, dates, uuids…) as text, and then cast.
            let numeric = match crate::ast::types::declared_type(innermost(elem)).map(|d| d.ty) {
                Ok(SqlType::Int2 | SqlType::Int4 | SqlType::Int8) => Some(true),
                Ok(SqlType::Float4 | SqlType::Float8 | SqlType::Numeric { .. }) => Some(false),
                _ => None,
            };
            let parsed = parse_array_text(text)?;
            let array = array_text_to_expr(&parsed, numeric, text)?;
            let mut cast = expr.clone();
            if let Expr::Cast { expr: e, .. } = &mut cast {
                **e = array;
            }
            Ok(Some(cast))
        }
        _ => Ok(None),
    }
}

/// `ARRAY[numbers]::float4[]` (what a JSON array parameter or array text binds to) as
/// `'{numbers}'::float4[]`; a bare `ARRAY[numbers]` as the same. `None` for anything
/// else (left as it is).
fn compact_query(e: &Expr) -> Option<Expr> {
    let float4 = |dt: &ast::DataType| {
        matches!(innermost(dt), ast::DataType::Float4 | ast::DataType::Real)
            && matches!(dt, ast::DataType::Array(_))
    };
    match e {
        Expr::Nested(inner) => compact_query(inner),
        Expr::Cast {
            kind,
            expr,
            data_type,
            array: false,
            format: None,
        } if float4(data_type) => {
            let Expr::Array(a) = expr.as_ref() else {
                return None;
            };
            Some(Expr::Cast {
                kind: kind.clone(),
                expr: Box::new(lit(Value::SingleQuotedString(array_text(a)?))),
                data_type: data_type.clone(),
                array: false,
                format: None,
            })
        }
        Expr::Array(a) => {
            let mut data_type = ast::DataType::Float4;
            let mut inner = a;
            loop {
                data_type = ast::DataType::Array(ArrayElemTypeDef::SquareBracket(
                    Box::new(data_type),
                    None,
                ));
                match inner.elem.first() {
                    Some(Expr::Array(next)) => inner = next,
                    _ => break,
                }
            }
            Some(Expr::Cast {
                kind: ast::CastKind::DoubleColon,
                expr: Box::new(lit(Value::SingleQuotedString(array_text(a)?))),
                data_type,
                array: false,
                format: None,
            })
        }
        _ => None,
    }
}

/// PostgreSQL array text of an array of number literals (NULLs, nested arrays), the
/// numbers as written; `None` if anything else is in it.
fn array_text(a: &ast::Array) -> Option<String> {
    let mut out = String::from("{");
    for (i, e) in a.elem.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match e {
            Expr::Array(inner) => out.push_str(&array_text(inner)?),
            e => match crate::ast::key_predicate::signed_value(e)? {
                (negative, Value::Number(n, _)) if !n.starts_with('-') => {
                    if negative {
                        out.push('-');
                    }
                    out.push_str(n);
                }
                (false, Value::Null) => out.push_str("NULL"),
                _ => return None,
            },
        }
    }
    out.push('}');
    Some(out)
}

fn innermost(dt: &ast::DataType) -> &ast::DataType {
    match dt {
        ast::DataType::Array(ArrayElemTypeDef::SquareBracket(inner, _)) => innermost(inner),
        other => other,
    }
}

fn lit(v: Value) -> Expr {
    Expr::Value(v.with_empty_span())
}

/// The SQL text a JSON number binds as (with its sign): integers as they are, floats
/// always with a `.` or an exponent, so that `2.0` does not bind as the integer 2.
pub fn json_number_text(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        n.to_string()
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        let s = format!("{f:?}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    }
}

/// The literal a JSON parameter value binds as. A whole value that is an integer past
/// int8 binds as a float8, as §4.6 says (its digits bound as DataFusion's unsigned
/// 64-bit integer), and an object as jsonb; in an array its digits stay, which a jsonb
/// column keeps, and objects are their text.
pub fn json_to_expr(value: &Json) -> Expr {
    match value {
        Json::Number(n) if n.is_u64() && !n.is_i64() => lit(Value::Number(
            format!("{:e}", n.as_f64().unwrap_or(0.0)),
            false,
        )),
        // An object is jsonb, as §4.6 says (as text, `$1 || $2` of two objects was
        // their texts joined).
        Json::Object(_) => crate::ast::ident::call(
            crate::datafusion_ext::functions::jsonb::TO_JSONB,
            vec![json_value_expr(value)],
        ),
        other => json_value_expr(other),
    }
}

/// [`json_to_expr`] of a value at any depth.
fn json_value_expr(value: &Json) -> Expr {
    match value {
        Json::Null => lit(Value::Null),
        Json::Bool(b) => lit(Value::Boolean(*b)),
        Json::Number(n) => {
            let text = json_number_text(n);
            if let Some(pos) = text.strip_prefix('-') {
                Expr::UnaryOp {
                    op: ast::UnaryOperator::Minus,
                    expr: Box::new(lit(Value::Number(pos.to_string(), false))),
                }
            } else {
                lit(Value::Number(text, false))
            }
        }
        Json::String(s) => lit(Value::SingleQuotedString(s.clone())),
        Json::Array(items) => Expr::Array(ast::Array {
            elem: items.iter().map(json_value_expr).collect(),
            named: true,
        }),
        Json::Object(_) => lit(Value::SingleQuotedString(value.to_string())),
    }
}

/// Array text as `ARRAY[…]`: elements as numbers when `numeric` is `Some` (`true`:
/// integers, which a fraction or exponent is not), as text otherwise.
fn array_text_to_expr(a: &ArrayText, numeric: Option<bool>, text: &str) -> Result<Expr> {
    match a {
        ArrayText::Item(None) => Ok(lit(Value::Null)),
        ArrayText::Item(Some(s)) if numeric.is_some() => {
            let n = s.trim();
            // `'{1.5}'::int[]` was 1: PostgreSQL's integer input takes no fraction.
            if numeric == Some(true) && n.parse::<i128>().is_err() && n.parse::<f64>().is_ok() {
                return bad(format!(
                    "invalid input syntax for type integer: {}",
                    tarn_catalog::shown(n)
                ));
            }
            match n.parse::<f64>() {
                Ok(f) if f.is_finite() => {}
                Ok(_) => {
                    return bad(format!(
                        "malformed array literal: {}: {} is not a finite number",
                        tarn_catalog::shown(text),
                        tarn_catalog::shown(n)
                    ));
                }
                Err(_) => {
                    return bad(format!(
                        "malformed array literal: {}",
                        tarn_catalog::shown(text)
                    ));
                }
            }
            if let Some(pos) = n.strip_prefix('-') {
                Ok(Expr::UnaryOp {
                    op: ast::UnaryOperator::Minus,
                    expr: Box::new(lit(Value::Number(pos.to_string(), false))),
                })
            } else {
                Ok(lit(Value::Number(
                    n.trim_start_matches('+').to_string(),
                    false,
                )))
            }
        }
        ArrayText::Item(Some(s)) => Ok(lit(Value::SingleQuotedString(s.clone()))),
        ArrayText::List(items) => Ok(Expr::Array(ast::Array {
            elem: items
                .iter()
                .map(|i| array_text_to_expr(i, numeric, text))
                .collect::<Result<_>>()?,
            named: true,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datafusion_ext::functions::param_array::{MAX_JSON_DEPTH, check_json_depth};

    /// `depth` arrays (or objects) nested around a number.
    fn nested(depth: usize, object: bool) -> Json {
        (0..depth).fold(Json::from(1), |inner, _| {
            if object {
                serde_json::json!({ "k": inner })
            } else {
                Json::Array(vec![Json::from(0), inner])
            }
        })
    }

    #[test]
    fn json_depth_is_bounded_for_arrays_and_objects() {
        for object in [false, true] {
            assert!(check_json_depth(&[nested(MAX_JSON_DEPTH, object)]).is_ok());
            let deep = [Json::from(1), nested(MAX_JSON_DEPTH + 1, object)];
            let err = check_json_depth(&deep).unwrap_err().to_string();
            assert!(err.contains("levels deep"), "{err}");
        }
        // Width is not depth: a long vector is one level.
        let wide = Json::Array((0..100_000).map(Json::from).collect());
        assert!(check_json_depth(&[wide, Json::Null, Json::from("x")]).is_ok());
    }

    #[test]
    fn array_text() -> Result<()> {
        assert_eq!(
            parse_array_text("{0.1, 0.2}")?,
            ArrayText::List(vec![
                ArrayText::Item(Some("0.1".into())),
                ArrayText::Item(Some("0.2".into()))
            ])
        );
        assert_eq!(
            parse_array_text("{{1},{NULL}}")?,
            ArrayText::List(vec![
                ArrayText::List(vec![ArrayText::Item(Some("1".into()))]),
                ArrayText::List(vec![ArrayText::Item(None)]),
            ])
        );
        assert_eq!(
            parse_array_text(r#"{"a,b","c\"d"}"#)?,
            ArrayText::List(vec![
                ArrayText::Item(Some("a,b".into())),
                ArrayText::Item(Some("c\"d".into()))
            ])
        );
        for bad in ["", "{", "{1,}", "{1", "1,2", "{1}}", "{,}", "{\"a}"] {
            assert!(parse_array_text(bad).is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn json_numbers_keep_their_kind() {
        assert_eq!(json_to_expr(&serde_json::json!(2.0)).to_string(), "2.0");
        assert_eq!(json_to_expr(&serde_json::json!(42)).to_string(), "42");
        assert_eq!(json_to_expr(&serde_json::json!(-0.5)).to_string(), "-0.5");
        assert_eq!(
            json_to_expr(&serde_json::json!({"a": 1})).to_string(),
            "tarn_to_jsonb('{\"a\":1}')"
        );
    }
}
