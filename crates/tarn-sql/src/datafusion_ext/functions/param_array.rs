//! Large array parameters, bound as one Arrow list instead of one SQL literal per
//! element.
//!
//! A JSON array parameter binds as `ARRAY[…]` (SPEC §4.6), which DataFusion plans as one
//! expression per element: typed, coerced and folded one by one. For a vector of a few
//! hundred numbers that is nothing; for a million it took 14 s and held 1.4 GB. An
//! array of more than [`LARGE`] elements whose leaves have one type therefore binds as
//! `engine_param_array('float8[]', '[…JSON…]', '$1')`, which the simplifier folds into one
//! list literal in a single pass over the text (what `ARRAY[…]` of the same values
//! would give: int8, float8, text or bool leaves, nested lists for nested arrays).
//! Casts above it (`$1::float4[]`) then cast one Arrow array.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, ListArray, StringArray,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast;
use serde_json::Value as Json;

/// The function's name.
pub(crate) const FUNCTION: &str = "engine_param_array";

/// Elements (counted over every level) above which an array parameter binds as one
/// list: more than any embedding's dimensions, so vectors keep the literal path that
/// Tarn's planner-free inserts read.
pub(crate) const LARGE: usize = 4096;

/// The type of an array's leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaf {
    Int,
    Float,
    Text,
    Bool,
}

impl Leaf {
    fn name(self) -> &'static str {
        match self {
            Leaf::Int => "int8",
            Leaf::Float => "float8",
            Leaf::Text => "text",
            Leaf::Bool => "bool",
        }
    }

    fn data_type(self) -> DataType {
        match self {
            Leaf::Int => DataType::Int64,
            Leaf::Float => DataType::Float64,
            Leaf::Text => DataType::Utf8,
            Leaf::Bool => DataType::Boolean,
        }
    }
}

/// Walks the scalars of a JSON array (NULLs and nested arrays aside) with their depth
/// below the top, until `visit` says stop (`false`): `(elements over every level,
/// deepest array, whether the walk finished)`.
fn walk_leaves(
    items: &[Json],
    mut visit: impl FnMut(&Json, usize) -> bool,
) -> (usize, usize, bool) {
    let (mut count, mut deepest) = (0usize, 1usize);
    // (array, its depth below the top)
    let mut stack: Vec<(&[Json], usize)> = vec![(items, 1)];
    while let Some((arr, d)) = stack.pop() {
        deepest = deepest.max(d);
        count += arr.len();
        for v in arr {
            match v {
                Json::Null => {}
                Json::Array(inner) => stack.push((inner, d + 1)),
                leaf => {
                    if !visit(leaf, d) {
                        return (count, deepest, false);
                    }
                }
            }
        }
    }
    (count, deepest, true)
}

/// `(leaf, depth, elements)` of a JSON array whose leaves (NULLs aside) have one type
/// and whose arrays nest equally deep; `None` for any other shape. Without a leaf (only
/// NULLs and empty arrays) it is text, as PostgreSQL takes an array of unknowns, as
/// deep as its arrays nest.
fn shape(items: &[Json]) -> Option<(Leaf, usize, usize)> {
    let mut leaf: Option<Leaf> = None;
    let mut depth: Option<usize> = None;
    let (count, deepest, finished) = walk_leaves(items, |v, d| {
        let this = match v {
            Json::Number(n) if n.is_i64() => Leaf::Int,
            // Beyond int8: `ARRAY[…]` keeps it exact (uint64 or numeric); so does that
            // path.
            Json::Number(n) if n.is_u64() => return false,
            Json::Number(_) => Leaf::Float,
            Json::String(_) => Leaf::Text,
            Json::Bool(_) => Leaf::Bool,
            _ => return false,
        };
        if *depth.get_or_insert(d) != d {
            return false;
        }
        leaf = match (leaf, this) {
            (None, t) => Some(t),
            (Some(a), b) if a == b => Some(a),
            (Some(Leaf::Int), Leaf::Float) | (Some(Leaf::Float), Leaf::Int) => Some(Leaf::Float),
            _ => return false,
        };
        true
    });
    if !finished {
        return None;
    }
    match (leaf, depth) {
        (Some(leaf), Some(depth)) => Some((leaf, depth, count)),
        _ => Some((Leaf::Text, deepest, count)),
    }
}

/// Whether `ARRAY[…]` can hold `items`: no objects, leaves (NULLs aside) all numbers,
/// all text or all booleans, arrays nested equally deep. An array of mixed values has
/// no SQL array type; it binds as its JSON text, which a jsonb column or cast takes.
pub(crate) fn has_sql_type(items: &[Json]) -> bool {
    #[derive(PartialEq, Clone, Copy)]
    enum Kind {
        Number,
        Text,
        Bool,
    }
    let mut kind: Option<Kind> = None;
    let mut depth: Option<usize> = None;
    walk_leaves(items, |v, d| {
        let this = match v {
            Json::Number(_) => Kind::Number,
            Json::String(_) => Kind::Text,
            Json::Bool(_) => Kind::Bool,
            _ => return false,
        };
        *depth.get_or_insert(d) == d && *kind.get_or_insert(this) == this
    })
    .2
}

/// The call a large array parameter `value` (a JSON array) binds as, or `None` when it
/// is small or of mixed shape (then it binds as `ARRAY[…]`). `literals` counts the
/// elements the statement has bound as literals so far: once past `budget`, small
/// arrays bind as lists too.
///
/// With `arrays` (a statement whose view holds its large parameters, see `ByNumber`)
/// the array is made one list here, once for all its references (in `arrays`, by
/// number less one), and the call names it, `engine_param_array(tag, '', '$n')`, which
/// the simplifier replaces with that list: thirty references of a 60 MB array had each
/// written, copied and parsed its JSON text (8.8 GB, none of it counted). Without, the
/// call carries the array's JSON text.
pub(crate) fn bind_large(
    value: &Json,
    literals: &mut usize,
    budget: usize,
    number: usize,
    arrays: Option<&mut Vec<Option<ScalarValue>>>,
) -> DfResult<Option<ast::Expr>> {
    let Json::Array(items) = value else {
        return Ok(None);
    };
    let Some((leaf, depth, count)) = shape(items) else {
        *literals = literals.saturating_add(items.len());
        return Ok(None);
    };
    if count <= LARGE && literals.saturating_add(count) <= budget {
        *literals += count;
        return Ok(None);
    }
    let tag = format!("{}{}", leaf.name(), "[]".repeat(depth));
    let text = match arrays {
        Some(arrays) => {
            let slot = number - 1;
            if arrays.len() <= slot {
                arrays.resize(slot + 1, None);
            }
            if arrays[slot].is_none() {
                let array = lists(&[value], leaf, depth)?;
                let list = array
                    .as_any()
                    .downcast_ref::<ListArray>()
                    .ok_or_else(|| internal("not a list"))?
                    .clone();
                arrays[slot] = Some(ScalarValue::List(Arc::new(list)));
            }
            String::new()
        }
        None => match serde_json::to_string(items) {
            Ok(text) => text,
            Err(_) => return Ok(None),
        },
    };
    // The parameter's number names the call (see `schema_name`).
    Ok(Some(crate::ast::ident::call(
        FUNCTION,
        vec![string(tag), string(text), string(format!("${number}"))],
    )))
}

/// The list a statement bound by number for `engine_param_array(…, '', '$n')`.
fn bound_list(number: &str) -> Option<ScalarValue> {
    let n: usize = number.strip_prefix('$')?.parse().ok()?;
    crate::datafusion_ext::context::read_view::STATEMENT_VIEW
        .try_with(|v| v.bound.arrays.get(n.checked_sub(1)?).cloned().flatten())
        .ok()
        .flatten()
}

/// The JSON text of a call [`bind_large`] made without `arrays` (for a cast to jsonb,
/// which takes text).
pub(crate) fn json_text(e: &ast::Expr) -> Option<&str> {
    let ast::Expr::Function(f) = e else {
        return None;
    };
    if f.name.to_string() != FUNCTION {
        return None;
    }
    let ast::FunctionArguments::List(list) = &f.args else {
        return None;
    };
    match list.args.as_slice() {
        [
            _,
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Value(v))),
            _,
        ] => match &v.value {
            // Bound by number (no text): cast as the list it stands for.
            ast::Value::SingleQuotedString(s) if !s.is_empty() => Some(s),
            _ => None,
        },
        _ => None,
    }
}

fn string(s: String) -> ast::Expr {
    ast::Expr::Value(ast::Value::SingleQuotedString(s).with_empty_span())
}

/// `(leaf, depth)` of a tag such as `float8[][]`, at most as deep as a JSON parameter
/// may nest (the function can be called by hand: a tag of 100,000 `[]` must not build a
/// type that deep).
fn parse_tag(tag: &str) -> Option<(Leaf, usize)> {
    let base = tag.trim_end_matches("[]");
    let depth = (tag.len() - base.len()) / 2;
    let leaf = [Leaf::Int, Leaf::Float, Leaf::Text, Leaf::Bool]
        .into_iter()
        .find(|l| l.name() == base)?;
    (1..=MAX_JSON_DEPTH)
        .contains(&depth)
        .then_some((leaf, depth))
}

fn list_type(leaf: Leaf, depth: usize) -> DataType {
    let mut t = leaf.data_type();
    for _ in 0..depth {
        t = DataType::List(Arc::new(Field::new("item", t, true)));
    }
    t
}

/// Only a call written by hand can be wrong (the binder writes valid ones): a 400.
fn internal(msg: &str) -> DataFusionError {
    DataFusionError::External(Box::new(crate::Error::BadRequest(format!(
        "{FUNCTION}: {msg}"
    ))))
}

/// The leaves of `values` (all at one depth, as [`shape`] checked) as one array.
fn leaves(values: &[&Json], leaf: Leaf) -> DfResult<ArrayRef> {
    Ok(match leaf {
        Leaf::Int => Arc::new(values.iter().map(|v| v.as_i64()).collect::<Int64Array>()),
        Leaf::Float => Arc::new(values.iter().map(|v| v.as_f64()).collect::<Float64Array>()),
        Leaf::Text => Arc::new(values.iter().map(|v| v.as_str()).collect::<StringArray>()),
        Leaf::Bool => Arc::new(values.iter().map(|v| v.as_bool()).collect::<BooleanArray>()),
    })
}

/// `values` (JSON arrays or NULLs, `depth` levels deep) as one list array.
fn lists(values: &[&Json], leaf: Leaf, depth: usize) -> DfResult<ArrayRef> {
    let mut lengths = Vec::with_capacity(values.len());
    let mut valid = Vec::with_capacity(values.len());
    let mut children: Vec<&Json> = Vec::new();
    for v in values {
        match v {
            Json::Array(items) => {
                lengths.push(items.len());
                valid.push(true);
                children.extend(items.iter());
            }
            _ => {
                lengths.push(0);
                valid.push(false);
            }
        }
    }
    let child = if depth > 1 {
        lists(&children, leaf, depth - 1)?
    } else {
        leaves(&children, leaf)?
    };
    let field = Arc::new(Field::new("item", child.data_type().clone(), true));
    let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
    Ok(Arc::new(ListArray::try_new(
        field,
        OffsetBuffer::from_lengths(lengths),
        child,
        nulls,
    )?))
}

/// The one-row list literal of `tag` and `text`.
fn value(tag: &str, text: &str) -> DfResult<ScalarValue> {
    let (leaf, depth) = parse_tag(tag).ok_or_else(|| internal("bad type tag"))?;
    let json: Json = serde_json::from_str(text).map_err(|e| internal(&e.to_string()))?;
    if !matches!(json, Json::Array(_)) {
        return Err(internal("not an array"));
    }
    let array = lists(&[&json], leaf, depth)?;
    let list = array
        .as_any()
        .downcast_ref::<ListArray>()
        .ok_or_else(|| internal("not a list"))?
        .clone();
    Ok(ScalarValue::List(Arc::new(list)))
}

/// `engine_param_array(tag, json, '$n')`: see the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ParamArray {
    signature: Signature,
}

impl ParamArray {
    pub(crate) fn new() -> Self {
        ParamArray {
            signature: Signature::exact(
                vec![DataType::Utf8, DataType::Utf8, DataType::Utf8],
                Volatility::Immutable,
            ),
        }
    }
}

fn literal_text(e: &Expr) -> Option<&str> {
    match e {
        Expr::Literal(ScalarValue::Utf8(Some(s)), _) => Some(s),
        _ => None,
    }
}

impl ScalarUDFImpl for ParamArray {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Err(internal("return_field_from_args is used"))
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<Arc<Field>> {
        // Asked at every level above the parameter while the plan is analyzed (its JSON
        // text is named each time): where deep expressions meet the statement timeout.
        crate::datafusion_ext::context::deadline::check()?;
        let tag = match args.scalar_arguments.first() {
            Some(Some(ScalarValue::Utf8(Some(t)))) => t,
            _ => return Err(internal("the type tag must be a text literal")),
        };
        let (leaf, depth) = parse_tag(tag).ok_or_else(|| internal("bad type tag"))?;
        Ok(Arc::new(Field::new(FUNCTION, list_type(leaf, depth), true)))
    }

    /// `$n::tag`, not the call with its JSON text: DataFusion names an expression again
    /// and again while it plans, and a million numbers' text took seconds to write
    /// each time. The parameter's number tells two parameters apart.
    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        match (
            args.first().and_then(literal_text),
            args.get(2).and_then(literal_text),
        ) {
            (Some(tag), Some(number)) => Ok(format!("{number}::{tag}")),
            _ => Err(internal("arguments must be literals")),
        }
    }

    fn display_name(&self, args: &[Expr]) -> DfResult<String> {
        self.schema_name(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        match args.args.as_slice() {
            // Every plan is simplified before it runs: a call by number still here
            // names no parameter the statement bound (a call written by hand).
            [_, ColumnarValue::Scalar(ScalarValue::Utf8(Some(text))), _] if text.is_empty() => {
                Err(internal(
                    "with no JSON text it stands for the statement's large array parameter \
                     $n; this statement binds no such parameter",
                ))
            }
            [
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(tag))),
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(text))),
                _,
            ] => Ok(ColumnarValue::Scalar(value(tag, text)?)),
            _ => Err(internal("arguments must be literals")),
        }
    }

    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        match (
            args.first().and_then(literal_text),
            args.get(1).and_then(literal_text),
        ) {
            (Some(_), Some("")) => Ok(
                match args.get(2).and_then(literal_text).and_then(bound_list) {
                    // A list literal's copies share its buffers.
                    Some(list) => ExprSimplifyResult::Simplified(Expr::Literal(list, None)),
                    None => ExprSimplifyResult::Original(args),
                },
            ),
            (Some(tag), Some(text)) => Ok(ExprSimplifyResult::Simplified(Expr::Literal(
                value(tag, text)?,
                None,
            ))),
            _ => Ok(ExprSimplifyResult::Original(args)),
        }
    }
}

/// Deepest nesting of arrays and objects a JSON parameter may have (serde_json's own
/// parser stops at 128). Checked iteratively before anything recursive (binding,
/// encoding, cloning) touches the value, so a hostile value cannot exhaust the stack.
pub const MAX_JSON_DEPTH: usize = 128;

/// Fails when a parameter nests deeper than [`MAX_JSON_DEPTH`].
pub fn check_json_depth(params: &[Json]) -> crate::Result<()> {
    // Only containers are followed: a vector parameter of hundreds of numbers is one
    // step, not hundreds.
    let container = |v: &Json| matches!(v, Json::Array(_) | Json::Object(_));
    let mut stack: Vec<(&Json, usize)> = params
        .iter()
        .filter(|p| container(p))
        .map(|p| (p, 1))
        .collect();
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_JSON_DEPTH {
            return Err(crate::Error::BadRequest(format!(
                "a parameter nests arrays or objects more than {MAX_JSON_DEPTH} levels deep"
            )));
        }
        match v {
            Json::Array(items) => stack.extend(
                items
                    .iter()
                    .filter(|c| container(c))
                    .map(|c| (c, depth + 1)),
            ),
            Json::Object(map) => stack.extend(
                map.values()
                    .filter(|c| container(c))
                    .map(|c| (c, depth + 1)),
            ),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_and_values() -> DfResult<()> {
        let big: Vec<Json> = (0..5000).map(|i| json!(i)).collect();
        assert_eq!(shape(&big), Some((Leaf::Int, 1, 5000)));
        let first = |n: usize| Json::Array(big[..n].to_vec());
        let mut literals = 0;
        assert!(bind_large(&first(5000), &mut literals, 16_384, 1, None)?.is_some());
        assert!(bind_large(&first(10), &mut literals, 16_384, 1, None)?.is_none());
        assert_eq!(literals, 10);
        // Past the statement's budget of literal elements, small arrays are lists too.
        assert!(bind_large(&first(4000), &mut literals, 4005, 1, None)?.is_some());
        assert!(bind_large(&first(3995), &mut literals, 4005, 1, None)?.is_none());
        assert!(bind_large(&first(1), &mut literals, 4005, 1, None)?.is_some());
        assert_eq!(
            shape(&[json!([1, 2.5]), json!(null), json!([3])]),
            Some((Leaf::Float, 2, 6))
        );
        assert_eq!(shape(&[json!(1), json!("a")]), None);
        assert_eq!(shape(&[json!([1]), json!(2)]), None);
        assert_eq!(shape(&[json!({"a": 1})]), None);
        // No typed leaf: text, as deep as the arrays nest.
        assert_eq!(shape(&[json!(null)]), Some((Leaf::Text, 1, 1)));
        assert_eq!(shape(&[json!([]), json!([null])]), Some((Leaf::Text, 2, 3)));
        assert_eq!(shape(&[json!(1), json!(u64::MAX)]), None);
        assert!(parse_tag(&format!("int8{}", "[]".repeat(100_000))).is_none());
        let v = value("float8[][]", "[[1, 2.5], null, [3]]")?;
        assert_eq!(
            v.data_type(),
            list_type(Leaf::Float, 2),
            "{:?}",
            v.data_type()
        );
        let ScalarValue::List(l) = v else {
            return Err(internal("not a list"));
        };
        let outer = l.value(0);
        assert_eq!(outer.len(), 3);
        assert!(outer.is_null(1));
        let t = value("text[]", r#"["a", null, "b"]"#)?;
        assert_eq!(t.data_type(), list_type(Leaf::Text, 1));
        Ok(())
    }
}
