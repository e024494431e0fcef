//! JSONB operators and functions that `datafusion-functions-json` lacks (see docs/design.md
//! "SQL"): `@>` (containment), `||` (PostgreSQL's merge; DataFusion would join the
//! texts), `jsonb_typeof`, `jsonb_array_length`, and `#>` / `#>>` with PostgreSQL text
//! paths (`'{a,0}'`), which that crate silently answers with NULL.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, StringBuilder,
};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::execution::context::SessionState;
use datafusion::execution::registry::FunctionRegistry;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::BinaryOperator;
use serde_json::Value;

use crate::ast::array_text::{ArrayText, parse_array_text};
use crate::error::Result;

/// Registers the JSONB functions and operator planners. Call before
/// `datafusion_functions_json::register_all` so `#>` with a text path reaches Tarn first.
pub fn register(state: &mut SessionState) -> Result<()> {
    for f in [
        JsonbFn::Contains,
        JsonbFn::Typeof,
        JsonbFn::ArrayLength,
        JsonbFn::Concat,
    ] {
        state.register_udf(Arc::new(ScalarUDF::new_from_impl(JsonbUdf::new(f))))?;
    }
    state.register_udf(Arc::new(to_jsonb_udf()))?;
    state.register_udf(Arc::new(super::uuid_cast::to_uuid_udf()))?;
    state.register_expr_planner(Arc::new(JsonbPlanner))?;
    Ok(())
}

#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum JsonbFn {
    /// `?`
    Exists,
    Contains,
    Typeof,
    ArrayLength,
    /// `||` with a jsonb side.
    Concat,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonbUdf {
    f: JsonbFn,
    signature: Signature,
}

impl JsonbUdf {
    fn new(f: JsonbFn) -> Self {
        let arity = if matches!(f, JsonbFn::Contains | JsonbFn::Exists | JsonbFn::Concat) {
            2
        } else {
            1
        };
        JsonbUdf {
            f,
            signature: Signature::any(arity, Volatility::Immutable),
        }
    }
}

/// One argument's rows: JSON text (stored jsonb, literals) or the JSON union that `->`
/// returns; a constant is one row, read for every row. Values are read a row at a time
/// and let go before the next (parsing a batch of large documents first held them all
/// as `serde_json` values, several times their text: 500 rows of 600 KB took 6 GB).
struct Rows {
    array: ArrayRef,
    constant: bool,
    /// A constant's value, parsed once.
    parsed: std::cell::OnceCell<Option<Value>>,
}

impl Rows {
    fn new(v: &ColumnarValue) -> DfResult<Self> {
        let (array, constant) = match v {
            ColumnarValue::Scalar(s) => (s.to_array_of_size(1)?, true),
            ColumnarValue::Array(a) => (a.clone(), false),
        };
        let array = match array.data_type() {
            DataType::Union(..) => array,
            _ => datafusion::arrow::compute::cast(&array, &DataType::Utf8)?,
        };
        Ok(Rows {
            array,
            constant,
            parsed: std::cell::OnceCell::new(),
        })
    }

    fn row(&self, i: usize) -> usize {
        if self.constant { 0 } else { i }
    }

    /// Row `i`'s text, unless it is NULL or a union value.
    fn text(&self, i: usize) -> Option<Option<&str>> {
        let i = self.row(i);
        match self.array.data_type() {
            DataType::Union(..) => None,
            _ if self.array.is_null(i) => Some(None),
            _ => Some(Some(self.array.as_string::<i32>().value(i))),
        }
    }

    /// Row `i`'s value as a tree (within `json_tree::TREE_LIMIT`); a constant's is
    /// parsed once and lent to every row.
    fn value(&self, i: usize) -> DfResult<Cow<'_, Option<Value>>> {
        if let Some(v) = self.parsed.get() {
            return Ok(Cow::Borrowed(v));
        }
        let i = self.row(i);
        let v = if self.array.is_null(i) {
            None
        } else if let DataType::Union(..) = self.array.data_type() {
            let field =
                datafusion::arrow::datatypes::Field::new("v", self.array.data_type().clone(), true);
            Some(
                crate::value::encode::encode_value(&field, &self.array, i)
                    .map_err(|e| datafusion::error::DataFusionError::Execution(e.to_string()))?,
            )
        } else {
            Some(parse(self.array.as_string::<i32>().value(i))?)
        };
        if !self.constant {
            return Ok(Cow::Owned(v));
        }
        Ok(Cow::Borrowed(self.parsed.get_or_init(|| v)))
    }

    /// Row `i`'s kind, read without building its tree.
    fn shape(&self, i: usize) -> DfResult<Option<Shape>> {
        match self.text(i) {
            Some(None) => Ok(None),
            Some(Some(text)) => shape(text).map(Some),
            None => Ok(self.value(i)?.as_ref().as_ref().map(Shape::of)),
        }
    }
}

fn parse(s: &str) -> DfResult<Value> {
    if let Some(message) = crate::value::json_tree::too_large(s, "to work on") {
        return Err(datafusion::error::DataFusionError::Execution(message));
    }
    serde_json::from_str(s).map_err(|e| {
        datafusion::error::DataFusionError::Execution(format!(
            "invalid input syntax for type json: {e}"
        ))
    })
}

/// What a JSON value is, and an array's length: all `jsonb_typeof` and
/// `jsonb_array_length` read, so a document is scanned for it, not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Null,
    Bool,
    Number,
    String,
    Array(usize),
    Object,
}

impl Shape {
    fn of(v: &Value) -> Shape {
        match v {
            Value::Null => Shape::Null,
            Value::Bool(_) => Shape::Bool,
            Value::Number(_) => Shape::Number,
            Value::String(_) => Shape::String,
            Value::Array(items) => Shape::Array(items.len()),
            Value::Object(_) => Shape::Object,
        }
    }
}

/// The [`Shape`] of the JSON document `text`, checked whole as [`parse`] checks it but
/// without keeping anything of it.
fn shape(text: &str) -> DfResult<Shape> {
    use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Read;
    impl<'de> Visitor<'de> for Read {
        type Value = Shape;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_unit<E>(self) -> Result<Shape, E> {
            Ok(Shape::Null)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
            Ok(Shape::Bool)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
            Ok(Shape::Number)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
            Ok(Shape::Number)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
            Ok(Shape::Number)
        }
        fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
            Ok(Shape::String)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            Ok(Shape::Array(n))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Shape::Object)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_any(&mut de, Read)
        .and_then(|s| de.end().map(|()| s))
        .map_err(|e| {
            datafusion::error::DataFusionError::Execution(format!(
                "invalid input syntax for type json: {e}"
            ))
        })
}

/// PostgreSQL's jsonb containment: objects contain sub-objects, arrays contain every
/// element of the other array (in any order), scalars equal.
fn contains(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => y
            .iter()
            .all(|(k, vb)| x.get(k).is_some_and(|va| contains(va, vb))),
        (Value::Array(x), Value::Array(y)) => {
            y.iter().all(|vb| x.iter().any(|va| contains(va, vb)))
        }
        (Value::Array(x), scalar) if !scalar.is_object() && !scalar.is_array() => {
            x.iter().any(|va| va == scalar)
        }
        (x, y) => x == y,
    }
}

/// PostgreSQL's jsonb `||`: two objects merge (the right one's keys win), arrays
/// concatenate, and anything else joins as the elements of an array.
fn concat(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut x), Value::Object(y)) => {
            x.extend(y);
            Value::Object(x)
        }
        (Value::Array(mut x), Value::Array(y)) => {
            x.extend(y);
            Value::Array(x)
        }
        (Value::Array(mut x), y) => {
            x.push(y);
            Value::Array(x)
        }
        (x, Value::Array(mut y)) => {
            y.insert(0, x);
            Value::Array(y)
        }
        (x, y) => Value::Array(vec![x, y]),
    }
}

/// `a || b` of jsonb, a row at a time (see [`Rows`]).
fn concat_rows(args: &ScalarFunctionArgs) -> DfResult<ColumnarValue> {
    let n = args.number_rows;
    let [left, right] = args.args.as_slice() else {
        return Err(datafusion::error::DataFusionError::Execution(
            "jsonb || takes two values".into(),
        ));
    };
    let (l, r) = (Rows::new(left)?, Rows::new(right)?);
    let mut b = StringBuilder::with_capacity(n, 0);
    let mut canonical = tarn_ingest::JsonbText::new();
    for i in 0..n {
        let (Some(x), Some(y)) = (l.value(i)?.into_owned(), r.value(i)?.into_owned()) else {
            b.append_null();
            continue;
        };
        let joined = serde_json::to_string(&concat(x, y))
            .map_err(|e| datafusion::error::DataFusionError::Execution(e.to_string()))?;
        let stored = canonical.canonical(&joined).map_err(|e| {
            datafusion::error::DataFusionError::Execution(format!(
                "invalid input syntax for type json: {e}"
            ))
        })?;
        b.append_value(stored);
    }
    let out: ArrayRef = Arc::new(b.finish());
    if matches!(
        (left, right),
        (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
    ) {
        return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
    }
    Ok(ColumnarValue::Array(out))
}

impl ScalarUDFImpl for JsonbUdf {
    fn name(&self) -> &str {
        match self.f {
            JsonbFn::Contains => "jsonb_contains",
            JsonbFn::Exists => "jsonb_exists",
            JsonbFn::Typeof => "jsonb_typeof",
            JsonbFn::ArrayLength => "jsonb_array_length",
            JsonbFn::Concat => "jsonb_concat",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match self.f {
            JsonbFn::Contains | JsonbFn::Exists => DataType::Boolean,
            JsonbFn::Typeof | JsonbFn::Concat => DataType::Utf8,
            JsonbFn::ArrayLength => DataType::Int32,
        })
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let field =
            datafusion::arrow::datatypes::Field::new(self.name(), self.return_type(&types)?, true);
        // `||` of jsonb is jsonb.
        Ok(Arc::new(if self.f == JsonbFn::Concat {
            field.with_metadata(crate::ast::types::json_metadata())
        } else {
            field
        }))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if self.f == JsonbFn::Concat {
            return concat_rows(&args);
        }
        let n = args.number_rows;
        let first = Rows::new(&args.args[0])?;
        let out: ArrayRef = match self.f {
            JsonbFn::Contains => {
                let second = Rows::new(&args.args[1])?;
                let mut b = BooleanBuilder::with_capacity(n);
                for i in 0..n {
                    match (&*first.value(i)?, &*second.value(i)?) {
                        (Some(x), Some(y)) => b.append_value(contains(x, y)),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            JsonbFn::Exists => {
                let keys = Rows::new(&args.args[1])?;
                let mut b = BooleanBuilder::with_capacity(n);
                for i in 0..n {
                    match (&*first.value(i)?, keys.text(i).flatten()) {
                        (Some(x), Some(key)) => {
                            b.append_value(match x {
                                Value::Object(o) => o.contains_key(key),
                                Value::Array(items) => {
                                    items.iter().any(|v| v.as_str() == Some(key))
                                }
                                Value::String(v) => v == key,
                                _ => false,
                            });
                        }
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            JsonbFn::Typeof => {
                let mut b = StringBuilder::with_capacity(n, n * 6);
                for i in 0..n {
                    let Some(shape) = first.shape(i)? else {
                        b.append_null();
                        continue;
                    };
                    b.append_value(match shape {
                        Shape::Null => "null",
                        Shape::Bool => "boolean",
                        Shape::Number => "number",
                        Shape::String => "string",
                        Shape::Array(_) => "array",
                        Shape::Object => "object",
                    });
                }
                Arc::new(b.finish())
            }
            JsonbFn::ArrayLength => {
                let mut b = Int32Builder::with_capacity(n);
                for i in 0..n {
                    match first.shape(i)? {
                        None => b.append_null(),
                        Some(Shape::Array(len)) => b.append_value(len as i32),
                        Some(Shape::Object) => {
                            return Err(datafusion::error::DataFusionError::Execution(
                                "cannot get array length of a non-array".into(),
                            ));
                        }
                        Some(_) => {
                            return Err(datafusion::error::DataFusionError::Execution(
                                "cannot get array length of a scalar".into(),
                            ));
                        }
                    }
                }
                Arc::new(b.finish())
            }
            JsonbFn::Concat => unreachable!("answered above"),
        };
        if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
        {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// Plans `@>` and `<@` on JSON, `&&` on arrays, and `#>` / `#>>` whose path is
/// PostgreSQL array text.
#[derive(Debug)]
struct JsonbPlanner;

impl ExprPlanner for JsonbPlanner {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawBinaryExpr>> {
        use datafusion::logical_expr::ExprSchemable;
        let json = |e: &Expr| {
            e.to_field(schema)
                .is_ok_and(|(_, f)| crate::ast::types::is_json_field(&f))
        };
        match &expr.op {
            BinaryOperator::StringConcat if json(&expr.left) || json(&expr.right) => {
                Ok(PlannerResult::Planned(Expr::ScalarFunction(
                    datafusion::logical_expr::expr::ScalarFunction::new_udf(
                        Arc::new(ScalarUDF::new_from_impl(JsonbUdf::new(JsonbFn::Concat))),
                        vec![expr.left, expr.right],
                    ),
                )))
            }
            // `a <@ b` is `b @> a` (arrays are DataFusion's before this planner).
            BinaryOperator::ArrowAt if json(&expr.left) || json(&expr.right) => {
                Ok(PlannerResult::Planned(Expr::ScalarFunction(
                    datafusion::logical_expr::expr::ScalarFunction::new_udf(
                        Arc::new(ScalarUDF::new_from_impl(JsonbUdf::new(JsonbFn::Contains))),
                        vec![expr.right, expr.left],
                    ),
                )))
            }
            // Arrays that overlap: PostgreSQL's `&&`, DataFusion's `array_has_any`.
            BinaryOperator::PGOverlap
                if [&expr.left, &expr.right].iter().all(|e| {
                    e.get_type(schema)
                        .is_ok_and(|t| super::array_out::is_array(&t))
                }) =>
            {
                Ok(PlannerResult::Planned(Expr::ScalarFunction(
                    datafusion::logical_expr::expr::ScalarFunction::new_udf(
                        datafusion::functions_nested::array_has::array_has_any_udf(),
                        vec![expr.left, expr.right],
                    ),
                )))
            }
            // A number or boolean beside JSON: PostgreSQL has no such operator (the
            // containment test had answered false).
            BinaryOperator::AtArrow
                if (json(&expr.left) || json(&expr.right))
                    && [&expr.left, &expr.right].iter().any(|e| {
                        e.get_type(schema)
                            .is_ok_and(|t| t.is_numeric() || t == DataType::Boolean)
                    }) =>
            {
                let name = |e: &Expr| {
                    if json(e) {
                        "jsonb".to_string()
                    } else {
                        e.get_type(schema).map_or_else(
                            |_| "unknown".to_string(),
                            |t| crate::error::pg_type_names(&t.to_string()),
                        )
                    }
                };
                Err(crate::error::bad_request(format!(
                    "operator does not exist: {} @> {}; you might need to add explicit type \
                     casts",
                    name(&expr.left),
                    name(&expr.right)
                )))
            }
            BinaryOperator::AtArrow => Ok(PlannerResult::Planned(Expr::ScalarFunction(
                datafusion::logical_expr::expr::ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(JsonbUdf::new(JsonbFn::Contains))),
                    vec![expr.left, expr.right],
                ),
            ))),
            BinaryOperator::HashArrow | BinaryOperator::HashLongArrow => {
                let Expr::Literal(ScalarValue::Utf8(Some(path)), _) = &expr.right else {
                    return Ok(PlannerResult::Original(expr));
                };
                let Ok(ArrayText::List(items)) = parse_array_text(path) else {
                    return Ok(PlannerResult::Original(expr));
                };
                let mut args = vec![expr.left.clone()];
                for item in items {
                    let ArrayText::Item(Some(key)) = item else {
                        return Ok(PlannerResult::Original(expr));
                    };
                    args.push(match key.parse::<i64>() {
                        Ok(i) => Expr::Literal(ScalarValue::Int64(Some(i)), None),
                        Err(_) => Expr::Literal(ScalarValue::Utf8(Some(key)), None),
                    });
                }
                let name = if expr.op == BinaryOperator::HashArrow {
                    "json_get_json"
                } else {
                    "json_as_text"
                };
                Ok(PlannerResult::Planned(Expr::ScalarFunction(
                    datafusion::logical_expr::expr::ScalarFunction::new_udf(json_udf(name)?, args),
                )))
            }
            // `j ? key`: PostgreSQL's (a key of an object, a string element of an array,
            // the string itself; NULL when either side is), which the JSON crate's
            // `json_contains` answers only for object keys.
            BinaryOperator::Question => Ok(PlannerResult::Planned(Expr::ScalarFunction(
                datafusion::logical_expr::expr::ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(JsonbUdf::new(JsonbFn::Exists))),
                    vec![
                        expr.left,
                        datafusion::logical_expr::cast(expr.right, DataType::Utf8),
                    ],
                ),
            ))),
            _ => Ok(PlannerResult::Original(expr)),
        }
    }
}

fn json_udf(name: &str) -> DfResult<Arc<ScalarUDF>> {
    use datafusion_functions_json::udfs;
    Ok(if name == "json_get_json" {
        udfs::json_get_json_udf()
    } else {
        udfs::json_as_text_udf()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn concatenation_follows_postgres() {
        assert_eq!(
            concat(json!({"a": 1, "b": 2}), json!({"b": 3, "c": 4})),
            json!({"a": 1, "b": 3, "c": 4})
        );
        assert_eq!(concat(json!([1, 2]), json!([3])), json!([1, 2, 3]));
        assert_eq!(concat(json!([1]), json!({"a": 1})), json!([1, {"a": 1}]));
        assert_eq!(concat(json!("x"), json!([1])), json!(["x", 1]));
        assert_eq!(concat(json!({"a": 1}), json!(2)), json!([{"a": 1}, 2]));
        assert_eq!(concat(json!(1), json!(null)), json!([1, null]));
    }

    #[test]
    fn containment_follows_postgres() {
        assert!(contains(&json!({"a": 1, "b": [1, 2]}), &json!({"b": [2]})));
        assert!(!contains(&json!({"a": 1}), &json!({"a": 2})));
        assert!(contains(&json!([1, 2, 3]), &json!([3, 1])));
        assert!(contains(&json!([1, 2]), &json!(1)));
        assert!(!contains(&json!({"a": {"b": 1}}), &json!({"b": 1})));
    }
}

/// Name of the function `::jsonb` and `::json` casts become (see [`rewrite_casts`]).
pub const TO_JSONB: &str = "tarn_to_jsonb";

/// `x::jsonb`, `CAST(x AS JSON)` and `JSONB '…'` as calls of [`TO_JSONB`]: DataFusion has
/// no JSON type ("Unsupported SQL type JSONB"), and the value must come out as a JSON
/// value, stored text validated and canonical as a jsonb column's. Casts to `uuid`
/// likewise become calls of `uuid_cast::TO_UUID`, and casts to `varchar(n)` or
/// `char(n)` a cast to text cut to n characters.
pub fn rewrite_casts(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{self as ast, DataType as T};
    // The function a cast to `t` becomes, for the types DataFusion lacks.
    fn function_for(t: &T) -> Option<&'static str> {
        match t {
            T::JSON | T::JSONB => Some(TO_JSONB),
            T::Uuid => Some(super::uuid_cast::TO_UUID),
            _ => None,
        }
    }
    // The length of a character type that has one (`varchar(n)`, `char(n)`, `char`).
    fn char_length(t: &T) -> Option<u64> {
        match t {
            T::Varchar(Some(l))
            | T::CharacterVarying(Some(l))
            | T::CharVarying(Some(l))
            | T::Nvarchar(Some(l))
            | T::Char(Some(l))
            | T::Character(Some(l)) => match l {
                ast::CharacterLength::IntegerLength { length, .. } => Some(*length),
                ast::CharacterLength::Max => None,
            },
            // `char` alone is `char(1)`, as in PostgreSQL.
            T::Char(None) | T::Character(None) => Some(1),
            _ => None,
        }
    }
    jsonb_values_columns(stmt);
    let _ = ast::visit_expressions_mut(stmt, |e| {
        // A cast to a character type of length n keeps the first n characters, as
        // PostgreSQL's explicit casts cut (DataFusion's cast to `varchar(n)` kept them
        // all, and had no `character varying(n)`).
        if let ast::Expr::Cast {
            expr, data_type, ..
        } = e
            && let Some(n) = char_length(data_type)
        {
            let inner = std::mem::replace(expr.as_mut(), ast::Expr::value(ast::Value::Null));
            let text = ast::Expr::Cast {
                kind: ast::CastKind::DoubleColon,
                expr: Box::new(inner),
                data_type: T::Varchar(None),
                array: false,
                format: None,
            };
            let n = ast::Expr::value(ast::Value::Number(n.to_string(), false));
            *e = crate::ast::ident::call("left", vec![text, n]);
            return std::ops::ControlFlow::<()>::Continue(());
        }
        let replaced = match e {
            ast::Expr::Cast {
                expr, data_type, ..
            } => function_for(data_type).map(|f| {
                let inner = std::mem::replace(expr.as_mut(), ast::Expr::value(ast::Value::Null));
                (f, inner)
            }),
            ast::Expr::TypedString(ts) => {
                function_for(&ts.data_type).map(|f| (f, ast::Expr::Value(ts.value.clone())))
            }
            _ => None,
        };
        if let Some((f, arg)) = replaced {
            *e = crate::ast::ident::call(f, vec![arg]);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// In a VALUES list whose column has a jsonb value in some row, a quoted literal or NULL
/// in another row is cast to jsonb too, as PostgreSQL types an untyped literal by the
/// other rows (`VALUES ('{}'::jsonb), (NULL)`): DataFusion refused rows whose fields
/// differ in the JSON mark.
fn jsonb_values_columns(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{self as ast, DataType as T, VisitMut, VisitorMut};
    fn is_jsonb(e: &ast::Expr) -> bool {
        match e {
            ast::Expr::Cast { data_type, .. } => matches!(data_type, T::JSON | T::JSONB),
            ast::Expr::TypedString(ts) => matches!(ts.data_type, T::JSON | T::JSONB),
            ast::Expr::Nested(e) => is_jsonb(e),
            // PostgreSQL's jsonb merge, which `JsonbPlanner` plans.
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::StringConcat,
                right,
            } => is_jsonb(left) || is_jsonb(right),
            ast::Expr::Function(f) => crate::ast::ident::is_call_to(f, TO_JSONB),
            _ => false,
        }
    }
    fn untyped(e: &ast::Expr) -> bool {
        match e {
            ast::Expr::Value(v) => matches!(
                v.value,
                ast::Value::Null
                    | ast::Value::SingleQuotedString(_)
                    | ast::Value::DollarQuotedString(_)
                    | ast::Value::EscapedStringLiteral(_)
            ),
            ast::Expr::Nested(e) => untyped(e),
            _ => false,
        }
    }
    fn set_expr(body: &mut ast::SetExpr) {
        match body {
            ast::SetExpr::Values(values) => {
                let width = values
                    .rows
                    .iter()
                    .map(|r| r.content.len())
                    .max()
                    .unwrap_or(0);
                for c in 0..width {
                    if !values
                        .rows
                        .iter()
                        .any(|r| r.content.get(c).is_some_and(is_jsonb))
                    {
                        continue;
                    }
                    for row in &mut values.rows {
                        if let Some(e) = row.content.get_mut(c).filter(|e| untyped(e)) {
                            let inner = std::mem::replace(e, ast::Expr::value(ast::Value::Null));
                            *e = ast::Expr::Cast {
                                kind: ast::CastKind::DoubleColon,
                                expr: Box::new(inner),
                                data_type: T::JSONB,
                                array: false,
                                format: None,
                            };
                        }
                    }
                }
            }
            ast::SetExpr::SetOperation { left, right, .. } => {
                set_expr(left);
                set_expr(right);
            }
            _ => {}
        }
    }
    struct Rows;
    impl VisitorMut for Rows {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut ast::Query) -> std::ops::ControlFlow<()> {
            set_expr(&mut q.body);
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Rows);
}

/// [`TO_JSONB`]: text to a jsonb value.
pub fn to_jsonb_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ToJsonb {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToJsonb {
    signature: Signature,
}

impl ScalarUDFImpl for ToJsonb {
    fn name(&self) -> &str {
        TO_JSONB
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(
        &self,
        _args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        Ok(Arc::new(
            datafusion::arrow::datatypes::Field::new(TO_JSONB, DataType::Utf8, true)
                .with_metadata(crate::ast::types::json_metadata()),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let mut json = tarn_ingest::JsonbText::new();
        super::map_text(&args, 16, |v, out| match json.canonical(v) {
            Ok(stored) => {
                out.append_value(stored);
                Ok(())
            }
            Err(e) => Err(datafusion::error::DataFusionError::Execution(format!(
                "invalid input syntax for type json: {e}"
            ))),
        })
    }
}
