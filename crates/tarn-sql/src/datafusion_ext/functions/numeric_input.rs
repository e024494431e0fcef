//! `engine_numeric_input`, wrapped around the operand of every cast to numeric so that
//! numeric text is sized before it is parsed (see `value::numeric_text`).

use crate::value::numeric_text::{check_numeric_text, plain_numeric_array, plain_numeric_text};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

/// `engine_numeric_input(x)`: `x` unchanged, after checking that text read as a number
/// is at most [`MAX_NUMERIC_TEXT`](crate::value::numeric_text::MAX_NUMERIC_TEXT) characters. Wrapped around the operand of every
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
        Ok(plain_exponents(arg))
    }
}

/// Text in scientific notation made plain ([`plain_numeric_array`]) so that the cast
/// reads `'1.5e2'` as 150, as PostgreSQL does; anything else unchanged.
fn plain_exponents(arg: ColumnarValue) -> ColumnarValue {
    use datafusion::common::ScalarValue as S;
    match arg {
        ColumnarValue::Scalar(S::Utf8(Some(t))) => {
            ColumnarValue::Scalar(S::Utf8(Some(plain_numeric_text(&t).unwrap_or(t))))
        }
        ColumnarValue::Array(a) => ColumnarValue::Array(plain_numeric_array(a)),
        other => other,
    }
}

/// Wraps the operand of every cast to numeric in `engine_numeric_input` (see
/// [`MAX_NUMERIC_TEXT`](crate::value::numeric_text::MAX_NUMERIC_TEXT)); the cast itself, and so the output name, stays as written.
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
            **expr = crate::ast::ident::call(NUMERIC_INPUT, vec![inner]);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}
