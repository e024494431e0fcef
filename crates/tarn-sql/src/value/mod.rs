//! Values between Tarn's column types and the outside: JSON to Arrow arrays (parameters,
//! imported rows), Arrow arrays coerced to a column's type on write, and Arrow values
//! encoded as JSON for answers. Stands on `ast`.

pub(crate) mod coerce;
pub(crate) mod encode;
pub(crate) mod from_json;
pub(crate) mod json_tree;
pub(crate) mod numeric_text;
pub(crate) mod sizes;
pub(crate) mod text_input;
