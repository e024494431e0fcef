//! Column types as the catalog records them.

use serde::{Deserialize, Serialize};

/// The SQL type of a column, as declared (after aliases are resolved).
///
/// `SERIAL`/`BIGSERIAL` are not types here: they are `Int4`/`Int8` with a sequence
/// default, as in PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SqlType {
    /// `SMALLINT`, `INT2`.
    Int2,
    /// `INT`, `INTEGER`, `INT4`.
    Int4,
    /// `BIGINT`, `INT8`.
    Int8,
    /// `REAL`, `FLOAT4`.
    Float4,
    /// `DOUBLE PRECISION`, `FLOAT8`.
    Float8,
    /// `NUMERIC(p, s)`; without precision Tarn uses (38, 10).
    Numeric {
        /// Total digits.
        precision: u8,
        /// Digits after the decimal point.
        scale: i8,
    },
    /// `BOOLEAN`.
    Bool,
    /// `TEXT`.
    Text,
    /// `VARCHAR(n)`; `None` without a length.
    Varchar(Option<u32>),
    /// `UUID`, stored as its canonical text.
    Uuid,
    /// `JSONB` or `JSON`, stored as JSON text.
    Jsonb,
    /// `DATE`.
    Date,
    /// `TIMESTAMP` (without time zone), microseconds.
    Timestamp,
    /// `TIMESTAMPTZ`, microseconds, UTC.
    Timestamptz,
    /// `BYTEA`.
    Bytea,
    /// `FLOAT4[]` (`dim: None`) or `FLOAT4[n]`: one vector per row.
    Vector {
        /// The declared dimension, if any.
        dim: Option<u32>,
    },
    /// `FLOAT4[][]`: a bag of vectors per row.
    MultiVector,
    /// `TEXT[]`.
    TextArray,
    /// `INT4[]`.
    Int4Array,
    /// `INT8[]`.
    Int8Array,
}

impl SqlType {
    /// The PostgreSQL type name reported in table details (`int4`, `_float4`, …).
    pub fn pg_name(&self) -> &'static str {
        match self {
            SqlType::Int2 => "int2",
            SqlType::Int4 => "int4",
            SqlType::Int8 => "int8",
            SqlType::Float4 => "float4",
            SqlType::Float8 => "float8",
            SqlType::Numeric { .. } => "numeric",
            SqlType::Bool => "bool",
            SqlType::Text => "text",
            SqlType::Varchar(_) => "varchar",
            SqlType::Uuid => "uuid",
            SqlType::Jsonb => "jsonb",
            SqlType::Date => "date",
            SqlType::Timestamp => "timestamp",
            SqlType::Timestamptz => "timestamptz",
            SqlType::Bytea => "bytea",
            SqlType::Vector { .. } | SqlType::MultiVector => "_float4",
            SqlType::TextArray => "_text",
            SqlType::Int4Array => "_int4",
            SqlType::Int8Array => "_int8",
        }
    }

    /// The type as messages show it: vectors as written in SQL (`FLOAT4[3]`,
    /// `FLOAT4[][]`), other types by their PostgreSQL name.
    pub fn sql_name(&self) -> String {
        match self {
            SqlType::Vector { dim: Some(d) } => format!("FLOAT4[{d}]"),
            SqlType::Vector { dim: None } => "FLOAT4[]".into(),
            SqlType::MultiVector => "FLOAT4[][]".into(),
            SqlType::TextArray => "TEXT[]".into(),
            SqlType::Int4Array => "INT4[]".into(),
            SqlType::Int8Array => "INT8[]".into(),
            other => other.pg_name().into(),
        }
    }

    /// Whether the column holds float32 vectors that are validated on every write.
    pub fn is_vector(&self) -> bool {
        matches!(self, SqlType::Vector { .. } | SqlType::MultiVector)
    }
}
