//! Text read as a number, sized first: `engine_numeric_input` wraps the operand of every
//! cast to numeric, and the write path checks text going into numeric columns the same
//! way, so that a hostile digit string cannot overflow the number parser's stack.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

/// Most characters of text read as a number (`'…'::numeric`, text into a numeric
/// column). Arrow parses numeric text through num-bigint's recursive parser: 600,000
/// digits overflowed a statement thread's stack and aborted the process. A numeric
/// holds 38 digits here; PostgreSQL's own limit is 131,072 before the point.
pub const MAX_NUMERIC_TEXT: u64 = 1000;

/// Refuses text in `arg` (of `rows` rows) longer than [`MAX_NUMERIC_TEXT`], before it
/// is read as a number; values of other types pass.
pub(crate) fn check_numeric_text(arg: &ColumnarValue, rows: usize) -> crate::error::Result<()> {
    if !matches!(
        arg.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        return Ok(());
    }
    let lengths = text_lengths(arg, rows).map_err(|e| crate::Error::Internal(e.to_string()))?;
    match lengths
        .into_iter()
        .flatten()
        .find(|l| *l > MAX_NUMERIC_TEXT)
    {
        Some(len) => Err(crate::Error::BadRequest(format!(
            "invalid input syntax for type numeric: a value of {len} characters (numeric \
             text is at most {MAX_NUMERIC_TEXT} characters)"
        ))),
        None => Ok(()),
    }
}

/// `engine_numeric_input(x)`: `x` unchanged, after checking that text read as a number
/// is at most [`MAX_NUMERIC_TEXT`] characters. Wrapped around the operand of every
/// cast to numeric ([`guard_numeric_casts`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct NumericInput {
    signature: Signature,
}

/// The function's name.
pub(crate) const NUMERIC_INPUT: &str = "engine_numeric_input";

impl NumericInput {
    pub(crate) fn new() -> Self {
        NumericInput {
            signature: Signature::any(1, datafusion::logical_expr::Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for NumericInput {
    fn name(&self) -> &str {
        NUMERIC_INPUT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(arg) = args.args.into_iter().next() else {
            return exec_err!("{NUMERIC_INPUT} takes one argument");
        };
        check_numeric_text(&arg, args.number_rows)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        Ok(arg)
    }
}

/// Wraps the operand of every cast to numeric in `engine_numeric_input` (see
/// [`MAX_NUMERIC_TEXT`]); the cast itself, and so the output name, stays as written.
pub(crate) fn guard_numeric_casts(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast;
    let _ = ast::visit_expressions_mut(stmt, |e| {
        if let ast::Expr::Cast {
            expr, data_type, ..
        } = e
            && matches!(
                data_type,
                ast::DataType::Numeric(_) | ast::DataType::Decimal(_) | ast::DataType::Dec(_)
            )
        {
            let inner = std::mem::replace(expr.as_mut(), ast::Expr::value(ast::Value::Null));
            **expr = crate::ident::call(NUMERIC_INPUT, vec![inner]);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// The byte length of each row of a text (or binary) argument (`None`: NULL; `None`
/// for every row of an argument of another type), without making a constant into an
/// array (a 1 MB constant over 8,192 rows would be 8 GB).
pub(crate) fn text_lengths(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<u64>>> {
    use datafusion::common::ScalarValue as S;
    Ok(match arg {
        ColumnarValue::Scalar(s) => {
            let len = match s {
                S::Utf8(v) | S::LargeUtf8(v) | S::Utf8View(v) => v.as_ref().map(|s| s.len()),
                S::Binary(v) | S::LargeBinary(v) | S::BinaryView(v) => v.as_ref().map(Vec::len),
                _ => None,
            };
            vec![len.map(|l| l as u64); rows]
        }
        ColumnarValue::Array(a) => {
            let Ok(lengths) = datafusion::arrow::compute::kernels::length::length(a) else {
                return Ok(vec![None; a.len()]);
            };
            let lengths = datafusion::arrow::compute::cast(&lengths, &DataType::Int64)?;
            let lengths = lengths.as_primitive::<Int64Type>();
            (0..lengths.len())
                .map(|i| (!lengths.is_null(i)).then(|| lengths.value(i).max(0) as u64))
                .collect()
        }
    })
}
