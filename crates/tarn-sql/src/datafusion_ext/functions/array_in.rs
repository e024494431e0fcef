//! Text read as an array where the text is not a literal: `x::int[]` over a text
//! column, `('{1,' || '2}')::float4[]`. A literal is read into `ARRAY[…]` when the
//! statement is bound (params.rs); anything else went to Arrow's cast, which takes the
//! whole text as one element: `('1'||'1')::float4[]` was `{11}` and a text column of
//! `{a,b}` cast to `text[]` was the one element `"{a,b}"`. PostgreSQL reads the text
//! as array text (`malformed array literal` when it is not). A cast to an array type
//! of an expression that is not a literal is bound as
//! `CAST(engine_array_in(expr, dims) AS …)`: text becomes a nested list of text of
//! `dims` levels, which the cast then makes numbers (or anything else) element by
//! element; a value of any other type passes through unchanged.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayBuilder, ArrayRef, AsArray, ListArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast;

use crate::ast::array_text::{ArrayText, parse_array_text};

/// The function's name.
pub(crate) const FUNCTION: &str = "engine_array_in";

/// PostgreSQL's limit on an array's dimensions.
const MAX_DIMS: usize = 6;

/// `CAST(expr AS data_type)` bound so that text is read as array text, when
/// `data_type` is an array type and `expr` is not a literal, `ARRAY[…]` or already so
/// bound. `None`: leave the cast as it is.
pub(crate) fn bind(expr: &ast::Expr) -> Option<ast::Expr> {
    let ast::Expr::Cast { expr: inner, .. } = expr else {
        return None;
    };
    match inner.as_ref() {
        ast::Expr::Value(_) | ast::Expr::Array(_) => None,
        ast::Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case(FUNCTION) => None,
        _ => bind_text(expr),
    }
}

/// `CAST(expr AS data_type)` bound as `CAST(engine_array_in(expr, dims) AS …)` when
/// `data_type` is an array type, whatever `expr` is: also a long array text literal,
/// read in one pass instead of one expression per element (see `rewrite::params`).
pub(crate) fn bind_text(expr: &ast::Expr) -> Option<ast::Expr> {
    let ast::Expr::Cast {
        kind,
        expr: inner,
        data_type,
        array,
        format,
    } = expr
    else {
        return None;
    };
    let dims = dims(data_type);
    if dims == 0 {
        return None;
    }
    let dims = ast::Expr::value(ast::Value::Number(dims.to_string(), false));
    Some(ast::Expr::Cast {
        kind: kind.clone(),
        expr: Box::new(crate::ast::ident::call(
            FUNCTION,
            vec![inner.as_ref().clone(), dims],
        )),
        data_type: data_type.clone(),
        array: *array,
        format: format.clone(),
    })
}

/// How many array levels `data_type` has (0: not an array).
fn dims(data_type: &ast::DataType) -> usize {
    match data_type {
        ast::DataType::Array(
            ast::ArrayElemTypeDef::SquareBracket(inner, _)
            | ast::ArrayElemTypeDef::AngleBracket(inner)
            | ast::ArrayElemTypeDef::Parenthesis(inner),
        ) => 1 + dims(inner),
        _ => 0,
    }
}

/// The function (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ArrayIn {
    signature: Signature,
    limits: crate::datafusion_ext::context::output_limits::OutputLimits,
}

impl ArrayIn {
    pub(crate) fn new(limits: crate::datafusion_ext::context::output_limits::OutputLimits) -> Self {
        ArrayIn {
            signature: Signature::any(2, Volatility::Immutable),
            limits,
        }
    }
}

/// About what reading one element of array text holds at once: its place in the
/// parsed text (an enum and a string of its own), then its offset and bytes in the
/// result (measured: 25M one-digit elements held 3.5 GB before this was counted).
const BYTES_PER_ELEMENT: u64 = 96;

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// A list of text `dims` levels deep.
fn text_list(dims: usize) -> DataType {
    (0..dims).fold(DataType::Utf8, |inner, _| {
        DataType::List(Arc::new(Field::new("item", inner, true)))
    })
}

impl ScalarUDFImpl for ArrayIn {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        plan_err!("{FUNCTION} is typed by its arguments")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let input = &args.arg_fields[0];
        if !is_text(input.data_type()) {
            return Ok(input.clone());
        }
        let dims = match args.scalar_arguments.get(1).copied().flatten() {
            Some(ScalarValue::Int64(Some(n))) if (1..=MAX_DIMS as i64).contains(n) => *n as usize,
            _ => return plan_err!("{FUNCTION} takes a number of dimensions from 1 to {MAX_DIMS}"),
        };
        Ok(Arc::new(Field::new(FUNCTION, text_list(dims), true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let value = &args.args[0];
        let DataType::List(_) = args.return_field.data_type() else {
            return Ok(value.clone());
        };
        if !is_text(&value.data_type()) {
            return Ok(value.clone());
        }
        let dims = depth(args.return_field.data_type());
        let scalar = matches!(value, ColumnarValue::Scalar(_));
        let array = value.to_array(if scalar { 1 } else { args.number_rows })?;
        let array = datafusion::arrow::compute::cast(&array, &DataType::Utf8)?;
        let text = array.as_string::<i32>();
        // Sized before it is read: elements (at most one per separator, and one) times
        // what each holds while it is read.
        let elements: u64 = text
            .iter()
            .flatten()
            .map(|t| t.bytes().filter(|b| *b == b',').count() as u64 + 1)
            .sum();
        self.limits.check_batch(
            "reading array text",
            (text.values().len() as u64).saturating_add(elements.saturating_mul(BYTES_PER_ELEMENT)),
            Some(text.len()),
        )?;
        let out = read(text, dims)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

fn depth(t: &DataType) -> usize {
    match t {
        DataType::List(f) => 1 + depth(f.data_type()),
        _ => 0,
    }
}

/// One level of the lists being built: where each list ends, and whether it is NULL.
#[derive(Default)]
struct Level {
    offsets: Vec<i32>,
    valid: Vec<bool>,
}

/// Each row of `text` read as array text of `dims` levels.
fn read(text: &datafusion::arrow::array::StringArray, dims: usize) -> Result<ArrayRef> {
    let mut levels: Vec<Level> = (0..dims)
        .map(|_| Level {
            offsets: vec![0],
            valid: Vec::new(),
        })
        .collect();
    let mut leaves = datafusion::arrow::array::StringBuilder::new();
    for row in text.iter() {
        match row {
            None => close(&mut levels, 0, false, leaves.len()),
            Some(t) => {
                let malformed = || {
                    datafusion::error::DataFusionError::Execution(format!(
                        "malformed array literal: {}",
                        tarn_catalog::shown(t)
                    ))
                };
                let parsed = parse_array_text(t).map_err(|_| malformed())?;
                if !matches!(parsed, ArrayText::List(_)) {
                    return Err(malformed());
                }
                push(&parsed, 0, &mut levels, &mut leaves).map_err(|_| malformed())?;
            }
        }
    }
    let mut child: ArrayRef = Arc::new(leaves.finish());
    for level in levels.into_iter().rev() {
        let field = Arc::new(Field::new("item", child.data_type().clone(), true));
        let offsets = OffsetBuffer::new(level.offsets.into());
        let nulls = NullBuffer::from(level.valid);
        child = Arc::new(ListArray::try_new(field, offsets, child, Some(nulls))?);
    }
    Ok(child)
}

/// Ends a list at `level` (valid or NULL) whose items end at `next`.
fn close(levels: &mut [Level], level: usize, valid: bool, leaves: usize) {
    let next = match levels.get(level + 1) {
        Some(l) => l.offsets.len() - 1,
        None => leaves,
    };
    let l = &mut levels[level];
    l.offsets.push(next as i32);
    l.valid.push(valid);
}

/// Adds `item`, a list at `level`, to the levels; an error when it nests more or less
/// deeply than the levels.
fn push(
    item: &ArrayText,
    level: usize,
    levels: &mut [Level],
    leaves: &mut datafusion::arrow::array::StringBuilder,
) -> Result<()> {
    match item {
        ArrayText::List(items) => {
            for i in items {
                if level + 1 == levels.len() {
                    match i {
                        ArrayText::Item(v) => leaves.append_option(v.as_deref()),
                        ArrayText::List(_) => return exec_err!("too many dimensions"),
                    }
                } else {
                    match i {
                        ArrayText::Item(None) => close(levels, level + 1, false, leaves.len()),
                        ArrayText::Item(Some(_)) => return exec_err!("too few dimensions"),
                        list => push(list, level + 1, levels, leaves)?,
                    }
                }
            }
            if i32::try_from(leaves.len()).is_err() {
                return exec_err!("too many elements");
            }
            close(levels, level, true, leaves.len());
            Ok(())
        }
        ArrayText::Item(_) => exec_err!("not an array"),
    }
}
