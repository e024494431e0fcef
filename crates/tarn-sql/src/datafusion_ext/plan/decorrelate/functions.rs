//! The functions the rewritten plans call: a scalar subquery's value (failing on a
//! second row), LIMIT/OFFSET checks, int8 counts and a column made nullable.

use super::*;

/// The function a scalar subquery's value goes through when the subquery may return
/// several rows per outer row: `__subquery_value(rows, value)` is `value`, or an error
/// when `rows` > 1. Register it with the session (the rewritten plan calls it).
pub fn subquery_value_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(SubqueryValue {
        signature: Signature::any(2, Volatility::Immutable),
    })
}

/// Name of [`subquery_value_udf`].
pub const SUBQUERY_VALUE: &str = "__subquery_value";

#[derive(Debug, PartialEq, Eq, Hash)]
struct SubqueryValue {
    signature: Signature,
}

impl ScalarUDFImpl for SubqueryValue {
    fn name(&self) -> &str {
        SUBQUERY_VALUE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [_, value] => Ok(value.clone()),
            _ => plan_err!("{SUBQUERY_VALUE} takes two arguments"),
        }
    }

    /// The value's bounds (the default, an interval of type Null, breaks the ordering
    /// analysis of functions over this one).
    fn evaluate_bounds(
        &self,
        input: &[&datafusion::logical_expr::interval_arithmetic::Interval],
    ) -> Result<datafusion::logical_expr::interval_arithmetic::Interval> {
        match input {
            [_, value] => Ok((*value).clone()),
            _ => plan_err!("{SUBQUERY_VALUE} takes two arguments"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [rows, value] = args.args.as_slice() else {
            return exec_err!("{SUBQUERY_VALUE} takes two arguments");
        };
        let several = match rows {
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) => *n > 1,
            ColumnarValue::Scalar(_) => false,
            ColumnarValue::Array(a) => match a.data_type() {
                DataType::Int64 => {
                    let a = a.as_primitive::<Int64Type>();
                    (0..a.len()).any(|i| a.is_valid(i) && a.value(i) > 1)
                }
                other => return exec_err!("{SUBQUERY_VALUE}: row count of type {other}"),
            },
        };
        if several {
            return exec_err!("more than one row returned by a subquery used as an expression");
        }
        Ok(value.clone())
    }
}

/// `LIMIT`/`OFFSET` values computed by a subquery must not be negative (PostgreSQL's
/// errors); the function passes them through.
pub(super) fn limit_check_udf(offset: bool) -> ScalarUDF {
    ScalarUDF::new_from_impl(LimitCheck {
        offset,
        signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct LimitCheck {
    offset: bool,
    signature: Signature,
}

impl ScalarUDFImpl for LimitCheck {
    fn name(&self) -> &str {
        if self.offset {
            "__unnest_offset"
        } else {
            "__unnest_limit"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let negative = match &args.args[0] {
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) => *n < 0,
            ColumnarValue::Scalar(_) => false,
            ColumnarValue::Array(a) => {
                let a = a.as_primitive::<Int64Type>();
                a.iter().flatten().any(|n| n < 0)
            }
        };
        if negative {
            return exec_err!(
                "{} must not be negative",
                if self.offset { "OFFSET" } else { "LIMIT" }
            );
        }
        Ok(args.args[0].clone())
    }
}

/// A 128-bit integer sum (`Decimal128(38, 0)`) as int8, or `bigint out of range`.
pub(super) fn int8_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Int8 {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Int8 {
    signature: Signature,
}

impl ScalarUDFImpl for Int8 {
    fn name(&self) -> &str {
        "__unnest_int8"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let options = datafusion::arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        };
        let out =
            datafusion::arrow::compute::cast_with_options(&arrays[0], &DataType::Int64, &options)
                .map_err(|_| {
                datafusion::error::DataFusionError::Execution("bigint out of range".into())
            })?;
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `sq` with its one column made nullable by [`nullable_udf`], under the same name.
pub(super) fn nullable(sq: Subquery) -> Result<Subquery> {
    let plan = Arc::unwrap_or_clone(sq.subquery);
    let (q, f) = plan.schema().qualified_field(0);
    let (q, name) = (q.cloned(), f.name().clone());
    let c = Expr::Column(Column::new(q.clone(), &name));
    let wrapped = LogicalPlanBuilder::from(plan)
        .project(vec![nullable_udf().call(vec![c]).alias_qualified(q, name)])?
        .build()?;
    Ok(Subquery {
        subquery: Arc::new(wrapped),
        outer_ref_columns: sq.outer_ref_columns,
        spans: sq.spans,
    })
}

/// `__nullable(x)` is `x`, in a column that may be NULL (see [`nullable`]).
pub fn nullable_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Nullable {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Nullable {
    signature: Signature,
}

impl ScalarUDFImpl for Nullable {
    fn name(&self) -> &str {
        "__nullable"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [t] => Ok(t.clone()),
            _ => plan_err!("__nullable takes one argument"),
        }
    }

    fn evaluate_bounds(
        &self,
        input: &[&datafusion::logical_expr::interval_arithmetic::Interval],
    ) -> Result<datafusion::logical_expr::interval_arithmetic::Interval> {
        match input {
            [value] => Ok((*value).clone()),
            _ => plan_err!("__nullable takes one argument"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.as_slice() {
            [value] => Ok(value.clone()),
            _ => exec_err!("__nullable takes one argument"),
        }
    }
}
