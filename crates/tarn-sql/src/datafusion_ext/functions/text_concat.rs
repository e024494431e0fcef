//! `text || text`, planned as one sized call per chain.
//!
//! DataFusion's operator builds each intermediate result outside any reservation and
//! panics past 2 GiB of text in a batch (`s||s||s||s||s` over 500 rows of 1 MB took
//! 5 GB, then a panic), so text concatenation is planned as [`TextConcat`], sized as
//! the functions of [`super::bounded`] are. A chain `a || b || … || z` is one call with
//! every operand as an argument, not a call nested in a call per operator: DataFusion
//! names a call by the names of its arguments, again at each level and each step of
//! planning, and 200 nested calls planned for 14 s; one call of 200 arguments plans in
//! milliseconds and writes each row once instead of once per operator.

use std::sync::Arc;

use super::bounded::{Kind, TEXT_CONCAT, bounded};
use crate::datafusion_ext::context::output_limits::OutputLimits;
use datafusion::arrow::array::{Array, AsArray, StringArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// `a || b || …` over text: NULL when any operand is, as the operator.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct TextConcat {
    signature: Signature,
}

impl TextConcat {
    fn new() -> Self {
        TextConcat {
            signature: Signature::variadic(vec![DataType::Utf8], Volatility::Immutable),
        }
    }
}

/// One operand: a constant or a column of a batch.
enum Operand<'a> {
    Scalar(Option<&'a str>),
    Column(&'a StringArray),
}

impl ScalarUDFImpl for TextConcat {
    fn name(&self) -> &str {
        TEXT_CONCAT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let mut operands = Vec::with_capacity(args.args.len());
        for a in &args.args {
            operands.push(match a {
                ColumnarValue::Scalar(ScalarValue::Utf8(s)) => Operand::Scalar(s.as_deref()),
                ColumnarValue::Scalar(other) => {
                    return exec_err!("{TEXT_CONCAT} takes text, not {}", other.data_type());
                }
                ColumnarValue::Array(a) => match a.as_string_opt::<i32>() {
                    Some(s) => Operand::Column(s),
                    None => return exec_err!("{TEXT_CONCAT} takes text, not {}", a.data_type()),
                },
            });
        }
        if operands.iter().all(|o| matches!(o, Operand::Scalar(_))) {
            let mut joined = Some(String::new());
            for o in &operands {
                match (o, joined.as_mut()) {
                    (Operand::Scalar(Some(s)), Some(j)) => j.push_str(s),
                    _ => joined = None,
                }
            }
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(joined)));
        }
        // The output's bytes are known before it is written (the call is sized before
        // it runs, see `bounded`): one allocation, each row written once.
        let bytes: usize = operands
            .iter()
            .map(|o| match o {
                Operand::Scalar(s) => s.map_or(0, str::len).saturating_mul(rows),
                // The rows' bytes (a slice of a batch shares its whole buffer).
                Operand::Column(c) => {
                    let o = c.value_offsets();
                    (o[o.len() - 1] - o[0]) as usize
                }
            })
            .fold(0, usize::saturating_add);
        let mut out = StringBuilder::with_capacity(rows, bytes);
        let mut row = String::new();
        for i in 0..rows {
            row.clear();
            let mut null = false;
            for o in &operands {
                match o {
                    Operand::Scalar(Some(s)) => row.push_str(s),
                    Operand::Column(c) if c.is_valid(i) => row.push_str(c.value(i)),
                    _ => {
                        null = true;
                        break;
                    }
                }
            }
            if null {
                out.append_null();
            } else {
                out.append_value(&row);
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// Plans `text || text` (or text beside a scalar of another type, cast to text) as
/// [`TextConcat`], sized as the functions `bounded` wraps are (and entered in its plan
/// node's ledger); other `||` (arrays, jsonb) as DataFusion does. An operand that is
/// itself such a call (the left of a chain, or a parenthesized chain) gives its
/// operands instead: `||` is associative.
#[derive(Debug)]
pub(crate) struct ConcatPlanner {
    udf: Arc<ScalarUDF>,
    bytes: Arc<ScalarUDF>,
}

impl ConcatPlanner {
    pub(crate) fn new(limits: OutputLimits) -> Self {
        let text_concat = Arc::new(ScalarUDF::new_from_impl(TextConcat::new()));
        let bytea_concat = Arc::new(ScalarUDF::new_from_impl(ByteaConcat::new()));
        ConcatPlanner {
            udf: Arc::new(bounded(text_concat, Kind::Sum, limits, None)),
            bytes: Arc::new(bounded(bytea_concat, Kind::Sum, limits, None)),
        }
    }
}

/// The function's name (in EXPLAIN).
pub(crate) const BYTEA_CONCAT: &str = "engine_bytea_concat";

/// `a || b || …` over bytea, sized as text's is (DataFusion's operator was not: 60
/// concatenations of 30 MB made 1.8 GB and took a host to 3.7 GB): NULL when any
/// operand is.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ByteaConcat {
    signature: Signature,
}

impl ByteaConcat {
    fn new() -> Self {
        ByteaConcat {
            signature: Signature::variadic(vec![DataType::Binary], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ByteaConcat {
    fn name(&self) -> &str {
        BYTEA_CONCAT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut columns = Vec::with_capacity(arrays.len());
        for a in &arrays {
            match a.as_binary_opt::<i32>() {
                Some(b) => columns.push(b),
                None => return exec_err!("{BYTEA_CONCAT} takes bytea, not {}", a.data_type()),
            }
        }
        let n = if scalar { 1 } else { rows };
        let mut out = datafusion::arrow::array::BinaryBuilder::with_capacity(n, 0);
        let mut row = Vec::new();
        for i in 0..n {
            row.clear();
            let mut null = false;
            for c in &columns {
                if c.is_valid(i) {
                    row.extend_from_slice(c.value(i));
                } else {
                    null = true;
                    break;
                }
            }
            if null {
                out.append_null();
            } else {
                out.append_value(&row);
            }
        }
        let out: datafusion::arrow::array::ArrayRef = Arc::new(out.finish());
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

impl datafusion::logical_expr::planner::ExprPlanner for ConcatPlanner {
    fn plan_binary_op(
        &self,
        expr: datafusion::logical_expr::planner::RawBinaryExpr,
        schema: &datafusion::common::DFSchema,
    ) -> Result<
        datafusion::logical_expr::planner::PlannerResult<
            datafusion::logical_expr::planner::RawBinaryExpr,
        >,
    > {
        use datafusion::logical_expr::ExprSchemable;
        use datafusion::logical_expr::planner::PlannerResult;
        use datafusion::sql::sqlparser::ast::BinaryOperator;
        if expr.op != BinaryOperator::StringConcat {
            return Ok(PlannerResult::Original(expr));
        }
        // A chain planned here is text, whatever its length: asking its type again
        // would walk all of it once per operator.
        let chain = |e: &Expr| matches!(e, Expr::ScalarFunction(f) if f.func.name() == TEXT_CONCAT);
        // An untyped NULL is text here, as PostgreSQL resolves an unknown beside a
        // non-array (`NULL || 1` is NULL, not an error).
        let text = |e: &Expr| {
            chain(e)
                || matches!(
                    e.get_type(schema),
                    Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null)
                ) && !e
                    .to_field(schema)
                    .is_ok_and(|(_, f)| crate::ast::types::is_json_field(&f))
        };
        // A scalar of another type beside text is cast to text first, as DataFusion's
        // own `||` casts it (and PostgreSQL's `text || anynonarray`): planned so, the
        // sizing sees it too (`repeat('x', 200000) || g` over 20,000 rows took a host
        // past 6 GB unsized).
        let scalar = |e: &Expr| {
            e.get_type(schema)
                .is_ok_and(|t| t.is_primitive() || t == DataType::Boolean)
        };
        // bytea || bytea: one sized call per chain too.
        let bytea_chain =
            |e: &Expr| matches!(e, Expr::ScalarFunction(f) if f.func.name() == BYTEA_CONCAT);
        let bytea = |e: &Expr| {
            bytea_chain(e)
                || matches!(
                    e.get_type(schema),
                    Ok(DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
                )
        };
        if bytea(&expr.left) && bytea(&expr.right) {
            let mut args = Vec::new();
            for e in [expr.left, expr.right] {
                match e {
                    Expr::ScalarFunction(f) if f.func.name() == BYTEA_CONCAT => args.extend(f.args),
                    e => args.push(e),
                }
            }
            return Ok(PlannerResult::Planned(Expr::ScalarFunction(
                datafusion::logical_expr::expr::ScalarFunction::new_udf(self.bytes.clone(), args),
            )));
        }
        let (left_text, right_text) = (text(&expr.left), text(&expr.right));
        let planned = (left_text && (right_text || scalar(&expr.right)))
            || (right_text && scalar(&expr.left));
        if !planned {
            return Ok(PlannerResult::Original(expr));
        }
        let mut args = Vec::new();
        for (e, is_text) in [(expr.left, left_text), (expr.right, right_text)] {
            match e {
                Expr::ScalarFunction(f) if f.func.name() == TEXT_CONCAT => args.extend(f.args),
                e if is_text && !e.get_type(schema).is_ok_and(|t| t == DataType::Null) => {
                    args.push(e)
                }
                e => args.push(Expr::Cast(datafusion::logical_expr::Cast::new(
                    Box::new(e),
                    DataType::Utf8,
                ))),
            }
        }
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            datafusion::logical_expr::expr::ScalarFunction::new_udf(self.udf.clone(), args),
        )))
    }
}
