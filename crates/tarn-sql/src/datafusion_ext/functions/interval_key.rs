//! `engine_interval_key(interval)`: the number PostgreSQL compares intervals by, for
//! comparisons and ORDER BY of intervals. Arrow orders an interval by its months, then
//! its days, then its nanoseconds, each on its own, so `interval '1 day' < interval '25
//! hours'` was false and `interval '1 month' = interval '30 days'` too. PostgreSQL
//! (`interval_cmp_value`) counts a month as 30 days and a day as 24 hours: the key is
//! that many nanoseconds, as a 38-digit integer (months up to 2^31 need 25 digits).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Builder};
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNanoType, IntervalUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name.
pub(crate) const INTERVAL_KEY: &str = "engine_interval_key";

const NANOS_PER_DAY: i128 = 86_400_000_000_000;

/// See the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct IntervalKey {
    signature: Signature,
}

impl IntervalKey {
    pub(crate) fn new() -> Self {
        IntervalKey {
            signature: Signature::exact(
                vec![DataType::Interval(IntervalUnit::MonthDayNano)],
                Volatility::Immutable,
            ),
        }
    }
}

/// Whether `t` is an interval type (each is compared by its key).
pub(crate) fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

impl ScalarUDFImpl for IntervalKey {
    fn name(&self) -> &str {
        INTERVAL_KEY
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Decimal128(38, 0))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let a = arrays[0].as_primitive::<IntervalMonthDayNanoType>();
        let mut out = Decimal128Builder::with_capacity(a.len());
        for i in 0..a.len() {
            if a.is_null(i) {
                out.append_null();
                continue;
            }
            let v = a.value(i);
            let days = i128::from(v.months) * 30 + i128::from(v.days);
            out.append_value(days * NANOS_PER_DAY + i128::from(v.nanoseconds));
        }
        let out: ArrayRef = Arc::new(out.finish().with_precision_and_scale(38, 0)?);
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}
