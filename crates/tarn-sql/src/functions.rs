//! Everything Tarn adds to DataFusion, installed in one place.

use datafusion::execution::context::SessionState;

use crate::error::Result;

/// Installs Tarn's functions and planners into a session state.
pub fn install(state: &mut SessionState) -> Result<()> {
    // Tarn's planner first: it takes `#>` with text paths before the JSON crate's does.
    crate::jsonb::register(state)?;
    datafusion_functions_json::register_all(state)?;
    crate::clock::register(state)?;
    state.add_analyzer_rule(std::sync::Arc::new(crate::overflow::CheckedArithmetic));
    Ok(())
}
