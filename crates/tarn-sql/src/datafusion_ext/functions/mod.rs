//! Scalar and aggregate functions Tarn adds to DataFusion or wraps, and the expression
//! planners that turn operators into them.

pub(crate) mod any_large;
pub(crate) mod array_in;
pub(crate) mod array_out;
pub(crate) mod bounded;
pub(crate) mod bounded_aggregate;
pub(crate) mod checked_arithmetic;
pub(crate) mod clock;
pub(crate) mod const_array;
pub(crate) mod hybrid;
pub(crate) mod jsonb;
pub(crate) mod named_cast;
pub(crate) mod numeric_input;
pub(crate) mod param_array;
pub(crate) mod param_text;
pub(crate) mod similarity;
pub(crate) mod similarity_planner;
pub(crate) mod text_search;
pub(crate) mod uuid_cast;
