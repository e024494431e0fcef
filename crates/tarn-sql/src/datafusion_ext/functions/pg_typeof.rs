//! `pg_typeof(any)`: the name of its argument's type as PostgreSQL prints a `regtype`
//! (`integer`, `double precision`, `timestamp with time zone`, `real[]`, `jsonb`), from
//! the argument's field, so that a jsonb value (text marked as JSON) is `jsonb`.

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The function, to register.
pub(crate) fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(PgTypeof {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

/// PostgreSQL's name for the type of values of `field`.
fn regtype(field: &Field) -> String {
    if crate::ast::types::is_json_field(field) {
        return "jsonb".into();
    }
    of(field.data_type())
}

/// A regtype's name: the names messages use (`similarity::pg_type`), with the long
/// forms a regtype prints where those are short, and an array named by its element
/// whatever its dimensions.
fn of(t: &DataType) -> String {
    match t {
        DataType::Timestamp(_, None) => "timestamp without time zone".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time without time zone".into(),
        DataType::Decimal32(..) | DataType::Decimal64(..) => "numeric".into(),
        // A JSON operator's value (`j -> 'a'`), which writes as jsonb.
        DataType::Union(..) => "jsonb".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            let mut inner = f.data_type();
            while let DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) =
                inner
            {
                inner = f.data_type();
            }
            format!("{}[]", of(inner))
        }
        other => super::similarity::pg_type(other),
    }
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = args
            .arg_fields
            .first()
            .map_or_else(|| "unknown".into(), |f| regtype(f));
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn names_are_postgresqls() {
        assert_eq!(of(&DataType::Float64), "double precision");
        let item = Arc::new(Field::new_list_field(DataType::Float32, true));
        assert_eq!(of(&DataType::FixedSizeList(item.clone(), 3)), "real[]");
        assert_eq!(
            of(&DataType::List(Arc::new(Field::new_list_field(
                DataType::List(item),
                true
            )))),
            "real[]"
        );
        assert_eq!(
            of(&DataType::Timestamp(
                datafusion::arrow::datatypes::TimeUnit::Microsecond,
                Some("UTC".into())
            )),
            "timestamp with time zone"
        );
    }
}
