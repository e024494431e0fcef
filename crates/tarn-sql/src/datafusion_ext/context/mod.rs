//! What functions and plan nodes read of the statement they run in: its view of the
//! database (`read_view`), the memory its large values are held in once (`held`), the
//! most bytes one call may make (`output_limits`), and its deadline (`deadline`). The bottom of `datafusion_ext`.

pub(crate) mod deadline;
pub(crate) mod held;
pub(crate) mod join_rows;
pub(crate) mod output_limits;
pub(crate) mod read_view;
