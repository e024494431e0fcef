//! A merge of sorted streams that DataFusion 55 cannot prove sorted becomes a sort.
//!
//! `SELECT id, id AS x FROM a UNION ALL SELECT id, NULL FROM b ORDER BY id, x` failed
//! with "does not satisfy order requirements": each branch is sorted by `(id, x)` (`x`
//! equals `id` in one and is constant in the other), so the planner merges them, but the
//! union's derived ordering keeps only `id` and the final sanity check refuses the merge.
//! This rule runs just before that check: a `SortPreservingMergeExec` whose input is not
//! known to be sorted as the merge requires is replaced by a full sort of the coalesced
//! input, which needs no proof. Plans whose merges check out are left as they are.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

/// The rule (install before DataFusion's `SanityCheckPlan`).
#[derive(Debug, Default)]
pub struct UnprovenMergeToSort;

impl PhysicalOptimizerRule for UnprovenMergeToSort {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(merge) = node.downcast_ref::<SortPreservingMergeExec>() else {
                return Ok(Transformed::no(node));
            };
            let input = merge.input();
            if input
                .equivalence_properties()
                .ordering_satisfy(merge.expr().clone())?
            {
                return Ok(Transformed::no(node));
            }
            let coalesced: Arc<dyn ExecutionPlan> =
                Arc::new(CoalescePartitionsExec::new(Arc::clone(input)));
            let sort = SortExec::new(merge.expr().clone(), coalesced).with_fetch(merge.fetch());
            Ok(Transformed::yes(Arc::new(sort) as Arc<dyn ExecutionPlan>))
        })
        .data()
    }

    fn name(&self) -> &str {
        "tarn_unproven_merge_to_sort"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
