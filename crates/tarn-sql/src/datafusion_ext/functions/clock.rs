//! `now()` / `current_timestamp`, `current_date` / `today` and `current_time`: one
//! instant per statement, as in PostgreSQL (where it is the transaction's start; a
//! `query_batch` is one transaction, so all its parameter sets share it).
//!
//! DataFusion's own versions fold to a literal only when the session's execution props
//! carry a start time, which one shared session state serving every statement cannot
//! (and unfolded they fail: "invoke should not be called on a simplified now()
//! function"). These take the instant from the statement's read view, which is in
//! scope while the statement is planned; `now()` is a `timestamptz` (Tarn's
//! `Timestamp(µs, "UTC")`), as PostgreSQL's is.

use std::sync::Arc;

use chrono::{DateTime, Timelike, Utc};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::datafusion_ext::context::read_view::STATEMENT_VIEW;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Timestamp,
    Date,
    Time,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct StatementClock {
    kind: Kind,
    aliases: Vec<String>,
    signature: Signature,
}

/// The instant of the statement being planned or run on this task.
fn statement_now() -> DateTime<Utc> {
    // Outside a statement's scope (an expression evaluated on a task DataFusion spawned,
    // which plans never leave unfolded) the wall clock is the best answer left.
    STATEMENT_VIEW
        .try_with(|v| v.now)
        .unwrap_or_else(|_| Utc::now())
}

impl StatementClock {
    fn value(&self, now: DateTime<Utc>) -> ScalarValue {
        match self.kind {
            Kind::Timestamp => {
                ScalarValue::TimestampMicrosecond(Some(now.timestamp_micros()), Some("UTC".into()))
            }
            Kind::Date => ScalarValue::Date32(Some(
                (now.date_naive() - chrono::NaiveDate::default()).num_days() as i32,
            )),
            Kind::Time => ScalarValue::Time64Nanosecond(Some(
                now.num_seconds_from_midnight() as i64 * 1_000_000_000
                    + now.nanosecond() as i64 % 1_000_000_000,
            )),
        }
    }
}

impl ScalarUDFImpl for StatementClock {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Timestamp => "now",
            Kind::Date => "current_date",
            Kind::Time => "current_time",
        }
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match self.kind {
            Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Kind::Date => DataType::Date32,
            Kind::Time => DataType::Time64(TimeUnit::Nanosecond),
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value(statement_now())))
    }

    fn simplify(&self, _args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        Ok(ExprSimplifyResult::Simplified(Expr::Literal(
            self.value(statement_now()),
            None,
        )))
    }
}

/// Replaces DataFusion's clock functions with the statement clock.
pub(crate) fn register(state: &mut SessionState) -> DfResult<()> {
    for (kind, aliases) in [
        (Kind::Timestamp, vec!["current_timestamp".to_string()]),
        (Kind::Date, vec!["today".to_string()]),
        (Kind::Time, vec![]),
    ] {
        state.register_udf(Arc::new(ScalarUDF::new_from_impl(StatementClock {
            kind,
            aliases,
            signature: Signature::nullary(Volatility::Stable),
        })))?;
    }
    Ok(())
}
