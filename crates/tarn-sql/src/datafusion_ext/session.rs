//! The DataFusion session every statement is planned on, and everything Tarn adds to it,
//! installed in one place and in order: configuration, the memory pool, functions,
//! expression planners, analyzer rules, optimizer rules, physical rules and the query
//! planner. A rule's place in its list matters; each says why it stands where it does.

use std::sync::Arc;

use datafusion::catalog::CatalogProviderList;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::SessionState;
use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use datafusion::execution::registry::FunctionRegistry;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::SessionConfig;

use crate::datafusion_ext::provider::{CURRENT_SCHEMA, ViewCatalogList};
use crate::datafusion_ext::{context, functions, plan};
use crate::error::Result;

/// Name of the DataFusion catalog Tarn registers the organization under.
pub(crate) const CATALOG_NAME: &str = "tarn";

/// A session with Tarn's configuration, functions and rules; `query_memory` is the
/// statements' shared memory pool (it also bounds what one call of a function may make).
pub(crate) fn new_session(query_memory: usize) -> Result<SessionState> {
    let mut config = SessionConfig::new()
        .with_default_catalog_and_schema(CATALOG_NAME, CURRENT_SCHEMA)
        .with_create_default_catalog_and_schema(false)
        .with_information_schema(false);
    let opts = config.options_mut();
    opts.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
    opts.sql_parser.map_string_types_to_utf8view = false;
    opts.sql_parser.enable_ident_normalization = true;
    // A derived table's, a WITH query's and a view's ORDER BY is kept, as PostgreSQL
    // keeps it: `SELECT * FROM v LIMIT 3` gives the view's first three rows, not any
    // three (DataFusion drops a subquery's ORDER BY without a LIMIT by default).
    opts.sql_parser.enable_subquery_sort_elimination = false;
    // Tarn's scans tag their fields with metadata (table and column ids, for the
    // search planner). After the optimizer folds a branch of a UNION (or a CASE
    // into its column), the logical and physical schemas below an aggregate can
    // carry different metadata for the same names and types, and DataFusion's
    // check then fails the query with an internal error (found by the differential
    // fuzzer: `SELECT x FROM a WHERE 1 < 2 UNION SELECT y FROM b`). Names, types and
    // nullability are what the aggregate depends on; metadata is not.
    opts.execution.skip_physical_aggregate_schema_check = true;
    // A fair spill pool: sorts, aggregations and joins that can spill share the
    // budget and spill to temporary files instead of failing when it runs out.
    let pool = TrackConsumersPool::new(
        FairSpillPool::new(query_memory),
        std::num::NonZeroUsize::new(5).unwrap_or(std::num::NonZeroUsize::MIN),
    );
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(pool))
        .build_arc()?;
    let mut state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        // Last, after constants are folded: a wide constant of a SELECT list is
        // repeated over its rows only once sized (held.rs).
        .with_optimizer_rule(Arc::new(
            crate::datafusion_ext::context::held::WideConstants,
        ))
        .with_catalog_list(Arc::new(ViewCatalogList {
            name: CATALOG_NAME.to_string(),
        }) as Arc<dyn CatalogProviderList>)
        .build();
    // Tarn's planner first: it takes `#>` with text paths before the JSON crate's does.
    functions::jsonb::register(&mut state)?;
    datafusion_functions_json::register_all(&mut state)?;
    functions::clock::register(&mut state)?;
    state.register_udf(functions::similarity::udf())?;
    // `pg_typeof(x)`: PostgreSQL's name of x's type (`functions::pg_typeof`).
    state.register_udf(Arc::new(functions::pg_typeof::udf()))?;
    // Case maps a character at a time, as PostgreSQL's (`functions::text_case`);
    // before sizing, which wraps them.
    let udfs = state.scalar_functions().clone();
    for f in functions::text_case::case_maps(|name| udfs.get(name).cloned()) {
        state.register_udf(Arc::new(f))?;
    }
    // Functions that can make far more than they are given are sized first.
    let udfs = state.scalar_functions().clone();
    let limits = context::output_limits::output_limits(query_memory);
    for f in functions::bounded::wrapped(|name| udfs.get(name).cloned(), limits) {
        state.register_udf(Arc::new(f))?;
    }
    // So are the aggregates that gather their input into one value.
    let pool = context::held::SharedPool(state.runtime_env().memory_pool.clone());
    let udafs = state.aggregate_functions().clone();
    for f in functions::bounded_aggregate::bounded_aggregates(
        |name| udafs.get(name).cloned(),
        limits,
        &pool,
    ) {
        state.register_udaf(Arc::new(f))?;
    }
    // `length(bytea)` and `octet_length(bytea)` count bytes (see `functions::length`).
    for name in ["character_length", "octet_length"] {
        if let Some(inner) = state.scalar_functions().get(name).cloned() {
            state.register_udf(Arc::new(
                datafusion::logical_expr::ScalarUDF::new_from_impl(functions::length::Length::new(
                    inner,
                )),
            ))?;
        }
    }
    // Text cast to numeric is checked for length first (see `functions::numeric_input`).
    state.register_udf(Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(
            functions::numeric_input::NumericInput::new(),
        ),
    ))?;
    // `text || text` sized the same way (planned as `engine_text_concat`).
    state.register_expr_planner(Arc::new(functions::text_concat::ConcatPlanner::new(limits)))?;
    // And wherever a planner made the call itself (`ARRAY[…]` is `make_array`).
    state.add_analyzer_rule(Arc::new(functions::bounded::SizeCalls::new(
        limits,
        pool.clone(),
    )));
    // And a wide constant of a SELECT list is repeated over its rows only once sized.
    // (The rule that plans them so, `held::WideConstants`, is added to the optimizer
    // above.)
    state.register_udf(Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(context::held::WideConstant::new(
            limits,
            pool.clone(),
        )),
    ))?;
    state.register_udf(Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(
            functions::param_array::ParamArray::new(),
        ),
    ))?;
    state.register_udf(Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(functions::param_text::ParamText::new()),
    ))?;
    state.register_udf(Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(functions::array_in::ArrayIn::new(
            limits,
        )),
    ))?;
    state.register_udf(Arc::new(
        datafusion::logical_expr::ScalarUDF::new_from_impl(functions::named_cast::NamedCast::new()),
    ))?;
    for f in functions::hybrid::placeholders() {
        state.register_udf(Arc::new(f))?;
    }
    state.register_expr_planner(Arc::new(functions::similarity_planner::SimilarityPlanner))?;
    state.add_analyzer_rule(Arc::new(functions::checked_arithmetic::CheckedArithmetic));
    // `sum` over integers fails on overflow instead of wrapping (replaces the default).
    state.register_udaf(Arc::new(functions::checked_arithmetic::checked_sum()))?;
    // `sum` and `avg` of floats fail on overflow instead of answering Infinity.
    state.register_udaf(Arc::new(functions::checked_arithmetic::checked_avg()))?;
    // Scalar subqueries in VALUES rows run as projections (DataFusion 55 would evaluate
    // the rows before the subqueries ran: an internal error).
    state.add_analyzer_rule(Arc::new(plan::values_subquery::ValuesSubqueries));
    // EXCEPT ALL and INTERSECT ALL count copies (DataFusion 55 dropped or kept them
    // all); before unnesting, whose joins the rule must not take for a set operation's.
    state.add_analyzer_rule(Arc::new(plan::set_all::SetOperationsAll));
    // Correlated subqueries of every shape become joins (DataFusion 55 plans only the
    // simplest); after the rules above, so the subqueries' types are coerced.
    state.register_udf(Arc::new(plan::decorrelate::subquery_value_udf()))?;
    state.register_udf(Arc::new(plan::decorrelate::nullable_udf()))?;
    state.add_analyzer_rule(Arc::new(plan::decorrelate::UnnestSubqueries));
    // `<#>` sorted descending puts NULL scores last in every plan: after unnesting (a
    // score a LATERAL subquery computes reaches the sort as a column of the join it
    // made; a sort key it copied into a window, `LIMIT (SELECT …)`, is a window's
    // ORDER BY, which the rule reads too), and before the top-k rule looks for sorts.
    state.add_analyzer_rule(Arc::new(plan::score_nulls_last::ScoreNullsLast));
    // A recursive CTE's terms agree on their columns' metadata (none).
    state.add_analyzer_rule(Arc::new(plan::recursive::PlainRecursiveColumns));
    // The top-k rule runs after DataFusion's own (it needs the limit pushed into the
    // sort), and the query planner knows how to execute its node.
    // Merges DataFusion cannot prove sorted become sorts, just before its sanity check.
    let mut physical = state.physical_optimizers().to_vec();
    let at = physical
        .iter()
        .position(|r| r.name() == "SanityCheckPlan")
        .unwrap_or(physical.len());
    physical.insert(at, Arc::new(plan::merge_to_sort::UnprovenMergeToSort));
    // AND/OR evaluate a side that can fail only where it decides the answer, as in
    // PostgreSQL (`plan::lazy_fallible`); last, so that no later rule rebuilds the filters.
    physical.push(Arc::new(plan::lazy_fallible::LazyFallible));
    // The statement's own int8 casts are marked before DataFusion's type coercion adds
    // its own (see `functions::checked_arithmetic`).
    let mut analyzer: Vec<Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>> = vec![
        Arc::new(functions::checked_arithmetic::MarkExplicitCasts),
        // Unsigned results signed before type coercion sees them (`plan::signed_results`).
        Arc::new(plan::signed_results::SignedResults),
        // Quoted literals typed by the values beside them (`plan::unknown_literals`).
        Arc::new(plan::unknown_literals::UnknownLiterals),
    ];
    analyzer.extend(state.analyzer().rules.iter().cloned());
    // Before the optimizer's simplifier copies nested coalesce/BETWEEN/CASE arguments
    // (`plan::expansion`).
    analyzer.push(Arc::new(plan::expansion::ExpansionLimit));
    // `= ANY` over a large constant array keeps the array whole (`functions::any_large`).
    analyzer.push(Arc::new(functions::any_large::LargeAny));
    // Large constant arrays are made once where they are planned, before DataFusion's
    // own array planner would make a `make_array` call of each element
    // (`functions::const_array`).
    let mut planners: Vec<Arc<dyn datafusion::logical_expr::planner::ExprPlanner>> =
        vec![Arc::new(functions::const_array::ConstArrayPlanner)];
    planners.extend(state.expr_planners().iter().cloned());
    let state = SessionStateBuilder::new_from_existing(state)
        .with_analyzer_rules(analyzer)
        .with_expr_planners(planners)
        .with_physical_optimizer_rules(physical)
        .with_optimizer_rule(Arc::new(plan::search_rule::SearchRule))
        .with_query_planner(Arc::new(plan::search_exec::TarnQueryPlanner))
        .build();
    // Every rule checks the statement's deadline and stop flag before it runs (each
    // node, for the optimizer's rules), so that planning ends between any two of them.
    use context::deadline::{CheckedAnalyzer, CheckedPhysical, CheckedRule};
    let optimizer = state
        .optimizers()
        .iter()
        .map(|r| {
            Arc::new(CheckedRule(r.clone()))
                as Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>
        })
        .collect();
    let analyzer = state
        .analyzer()
        .rules
        .iter()
        .map(|r| {
            Arc::new(CheckedAnalyzer(r.clone()))
                as Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>
        })
        .collect();
    let physical = state
        .physical_optimizers()
        .iter()
        .map(|r| {
            Arc::new(CheckedPhysical(r.clone()))
                as Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>
        })
        .collect();
    Ok(SessionStateBuilder::new_from_existing(state)
        .with_optimizer_rules(optimizer)
        .with_analyzer_rules(analyzer)
        .with_physical_optimizer_rules(physical)
        .build())
}
