//! Everything Tarn adds to DataFusion, installed in one place.

use datafusion::execution::context::SessionState;
use datafusion::execution::registry::FunctionRegistry;

use crate::error::Result;

/// Installs Tarn's functions and planners into a session state; `query_memory` is the
/// statements' memory pool (it bounds what one call of a function may make).
pub fn install(state: &mut SessionState, query_memory: usize) -> Result<()> {
    // Tarn's planner first: it takes `#>` with text paths before the JSON crate's does.
    crate::jsonb::register(state)?;
    datafusion_functions_json::register_all(state)?;
    crate::clock::register(state)?;
    state.register_udf(crate::similarity::udf())?;
    // Functions that can make far more than they are given are sized first.
    let udfs = state.scalar_functions().clone();
    let limits = crate::output_limits::output_limits(query_memory);
    for f in crate::expansion::wrapped(|name| udfs.get(name).cloned(), limits) {
        state.register_udf(std::sync::Arc::new(f))?;
    }
    // So are the aggregates that gather their input into one value.
    let pool = crate::held::SharedPool(state.runtime_env().memory_pool.clone());
    let udafs = state.aggregate_functions().clone();
    for f in crate::expansion::bounded_aggregates(|name| udafs.get(name).cloned(), limits, &pool) {
        state.register_udaf(std::sync::Arc::new(f))?;
    }
    // Text cast to numeric is checked for length first (see expansion.rs).
    state.register_udf(std::sync::Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(
            crate::numeric_input::NumericInput::new(),
        ),
    ))?;
    // `text || text` sized the same way (planned as `engine_text_concat`).
    state.register_expr_planner(std::sync::Arc::new(crate::expansion::ConcatPlanner::new(
        limits,
    )))?;
    // And wherever a planner made the call itself (`ARRAY[…]` is `make_array`).
    state.add_analyzer_rule(std::sync::Arc::new(crate::expansion::SizeCalls::new(
        limits,
        pool.clone(),
    )));
    // And a wide constant of a SELECT list is repeated over its rows only once sized.
    // (The rule that plans them so, `held::WideConstants`, is in the engine's optimizer.)
    state.register_udf(std::sync::Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(crate::held::WideConstant::new(
            limits,
            pool.clone(),
        )),
    ))?;
    state.register_udf(std::sync::Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(crate::param_array::ParamArray::new()),
    ))?;
    state.register_udf(std::sync::Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(crate::array_in::ArrayIn::new()),
    ))?;
    for f in crate::hybrid::placeholders() {
        state.register_udf(std::sync::Arc::new(f))?;
    }
    state.register_expr_planner(std::sync::Arc::new(
        crate::similarity_planner::SimilarityPlanner,
    ))?;
    state.add_analyzer_rule(std::sync::Arc::new(crate::overflow::CheckedArithmetic));
    // `sum` over integers fails on overflow instead of wrapping (replaces the default).
    state.register_udaf(std::sync::Arc::new(crate::overflow::checked_sum()))?;
    // Scalar subqueries in VALUES rows run as projections (DataFusion 55 would evaluate
    // the rows before the subqueries ran: an internal error).
    state.add_analyzer_rule(std::sync::Arc::new(
        crate::values_subquery::ValuesSubqueries,
    ));
    // Correlated subqueries of every shape become joins (DataFusion 55 plans only the
    // simplest); after the rules above, so the subqueries' types are coerced.
    state.register_udf(std::sync::Arc::new(crate::decorrelate::subquery_value_udf()))?;
    state.register_udf(std::sync::Arc::new(crate::decorrelate::nullable_udf()))?;
    // `<#>` sorted descending puts NULL scores last in every plan: before unnesting,
    // which copies sort keys into windows (`LIMIT (SELECT …)`), and before the top-k
    // rule looks for its sorts.
    state.add_analyzer_rule(std::sync::Arc::new(crate::score_order_rule::ScoreNullsLast));
    state.add_analyzer_rule(std::sync::Arc::new(crate::decorrelate::UnnestSubqueries));
    // A recursive CTE's terms agree on their columns' metadata (none).
    state.add_analyzer_rule(std::sync::Arc::new(crate::recursive::PlainRecursiveColumns));
    // The top-k rule runs after DataFusion's own (it needs the limit pushed into the
    // sort), and the query planner knows how to execute its node.
    // Merges DataFusion cannot prove sorted become sorts, just before its sanity check.
    let mut physical = state.physical_optimizers().to_vec();
    let at = physical
        .iter()
        .position(|r| r.name() == "SanityCheckPlan")
        .unwrap_or(physical.len());
    physical.insert(
        at,
        std::sync::Arc::new(crate::order_fix::UnprovenMergeToSort),
    );
    // AND/OR evaluate a side that can fail only where it decides the answer, as in
    // PostgreSQL (guard.rs); last, so that no later rule rebuilds the filters.
    physical.push(std::sync::Arc::new(crate::guard::LazyFallible));
    // The statement's own int8 casts are marked before DataFusion's type coercion adds
    // its own (see overflow.rs).
    let mut analyzer: Vec<std::sync::Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>> =
        vec![std::sync::Arc::new(crate::overflow::MarkExplicitCasts)];
    analyzer.extend(state.analyzer().rules.iter().cloned());
    *state = datafusion::execution::SessionStateBuilder::new_from_existing(state.clone())
        .with_analyzer_rules(analyzer)
        .with_physical_optimizer_rules(physical)
        .with_optimizer_rule(std::sync::Arc::new(crate::search_rule::SearchRule))
        .with_query_planner(std::sync::Arc::new(crate::search_exec::TarnQueryPlanner))
        .build();
    Ok(())
}
