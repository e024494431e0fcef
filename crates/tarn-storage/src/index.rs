//! Search indexes over sealed segments, as storage sees them: the builder a layer above
//! supplies (storage does not know what an HNSW graph is), which of a table's indexes
//! it builds, and a build's progress. The build itself is `index_build.rs`; the files,
//! `index_file.rs`.

use std::collections::HashSet;

use tarn_catalog::{Catalog, ColumnDef, IndexDef, IndexId, TableId};

use crate::Result;
use crate::segment::Segment;

/// Builds the per-segment files of some index types (implemented by `tarn-search`).
pub trait IndexBuilder: Send + Sync + std::fmt::Debug {
    /// Whether this builder makes per-segment files for `index`.
    fn builds(&self, index: &IndexDef) -> bool;

    /// Writes the file of `index` on `column` over the rows of `segment` (all of them,
    /// deleted or not: positions are the segment's) to `out`. `progress(done, total)`
    /// reports rows indexed; `cancelled()` asks the build to stop.
    fn build(
        &self,
        index: &IndexDef,
        column: &ColumnDef,
        segment: &Segment,
        progress: &dyn Fn(usize, usize),
        cancelled: &dyn Fn() -> bool,
        out: &mut dyn std::io::Write,
    ) -> Result<()>;
}

/// The indexes of `table` that `builder` builds, with their columns.
pub(crate) fn built_indexes(
    catalog: &Catalog,
    table: TableId,
    builder: &dyn IndexBuilder,
) -> Vec<(IndexDef, ColumnDef)> {
    let Some(def) = catalog.table_by_id(table) else {
        return Vec::new();
    };
    catalog
        .indexes_of(table)
        .into_iter()
        .filter(|i| builder.builds(i))
        .filter_map(|i| {
            let col = def.column_by_id(i.column)?.clone();
            Some((i.clone(), col))
        })
        .collect()
}

/// The indexes among `ids` that the catalog still has on `table`.
pub(crate) fn live_index_ids(catalog: &Catalog, table: TableId, ids: Vec<IndexId>) -> Vec<IndexId> {
    let live: HashSet<IndexId> = catalog.indexes_of(table).iter().map(|i| i.id).collect();
    ids.into_iter().filter(|i| live.contains(i)).collect()
}

/// Progress of a build, for hosts that draw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildProgress {
    /// Segments whose files are done.
    pub segments_done: usize,
    /// Segments to build.
    pub segments: usize,
    /// Rows indexed in the segment being built.
    pub rows_done: usize,
    /// Rows of the segment being built.
    pub rows: usize,
}
