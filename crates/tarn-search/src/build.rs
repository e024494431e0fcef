//! Building a segment's search index file: the HNSW graph of its vectors
//! (`tarn-vector`), labelled with their positions in the segment, or the text index of
//! its texts (`tarn-text`), one document per position.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::DataType;
use tarn_catalog::{ColumnDef, IndexDef, IndexType};
use tarn_storage::{IndexBuilder, Segment};
use tarn_vector::HnswParams;

use crate::score::VectorRows;

/// The search layer's builder of per-segment index files: HNSW graphs for `hnsw`
/// (`FLOAT4[]`) and `maxsim` (`FLOAT4[][]`, one node per vector of each bag) indexes,
/// text indexes for `bm25`.
#[derive(Debug, Default)]
pub struct SearchIndexBuilder;

/// Default `ef_search` of an index without the option (SPEC §5). 128, not hnswlib's
/// customary 64: on clustered data one graph reaches recall@10 0.96 at 64 and 0.995 or
/// more at 128, at 100k × 384 and at 1M × 128 alike (see `benches/compare/vectors.py`),
/// and the default must reach 0.95 with room to spare on data harder than that.
pub const DEFAULT_EF_SEARCH: usize = 128;

/// Whether `index` is a vector index (`hnsw` or `maxsim`): its files are the graphs
/// this crate builds and searches.
pub fn is_vector_index(index: &IndexDef) -> bool {
    matches!(index.index_type, IndexType::Hnsw | IndexType::Maxsim)
}

/// The build parameters of `index` (its `m` and `ef_construction` options).
pub fn hnsw_params(index: &IndexDef) -> HnswParams {
    let d = HnswParams::default();
    let opt = |k: &str, default: usize| {
        index
            .options
            .get(k)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(default)
    };
    HnswParams {
        m: opt("m", d.m),
        ef_construction: opt("ef_construction", d.ef_construction),
    }
}

/// The search width for `index`: the session's (`SET engine.ef_search`) when it set
/// one, else the index's `ef_search` option, else [`DEFAULT_EF_SEARCH`].
pub fn ef_search(index: &IndexDef, session: Option<usize>) -> usize {
    session.unwrap_or_else(|| {
        index
            .options
            .get("ef_search")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(DEFAULT_EF_SEARCH)
    })
}

fn storage_error(e: impl std::fmt::Display) -> tarn_storage::Error {
    tarn_storage::Error::Internal(format!("building a search index: {e}"))
}

struct Progress<'a> {
    report: &'a dyn Fn(usize, usize),
    cancelled: &'a dyn Fn() -> bool,
}

impl tarn_vector::BuildProgress for Progress<'_> {
    fn inserted(&self, done: usize, total: usize) {
        (self.report)(done, total)
    }
    fn cancelled(&self) -> bool {
        (self.cancelled)()
    }
}

impl IndexBuilder for SearchIndexBuilder {
    fn builds(&self, index: &IndexDef) -> bool {
        is_vector_index(index) || crate::text::is_text_index(index)
    }

    fn build(
        &self,
        index: &IndexDef,
        column: &ColumnDef,
        segment: &Segment,
        progress: &dyn Fn(usize, usize),
        cancelled: &dyn Fn() -> bool,
        out: &mut dyn std::io::Write,
    ) -> tarn_storage::Result<()> {
        if crate::text::is_text_index(index) {
            return build_text(index, column, segment, progress, cancelled, out);
        }
        let mut values: Vec<f32> = Vec::new();
        let mut ids: Vec<u32> = Vec::new();
        let mut dim = column.dimension().map(|d| d as usize);
        for (bi, slot) in segment.blocks().iter().enumerate() {
            if cancelled() {
                return Err(tarn_storage::Error::Closed);
            }
            let chunk = segment.block(bi)?;
            let Some(array) = chunk.column(column.id) else {
                continue;
            };
            let mut push = |pos: usize, v: &[f32]| -> tarn_storage::Result<()> {
                match dim {
                    Some(d) if d != v.len() => {
                        return Err(storage_error(format!(
                            "a vector of {} dimensions in a column of {d}",
                            v.len()
                        )));
                    }
                    None => dim = Some(v.len()),
                    _ => {}
                }
                values.extend_from_slice(v);
                ids.push(pos as u32);
                Ok(())
            };
            match (index.index_type, array.data_type()) {
                (IndexType::Maxsim, DataType::List(_)) => {
                    let bags = array.as_list::<i32>();
                    let inner = bags.values().clone();
                    let vectors = VectorRows::of(&inner).map_err(storage_error)?;
                    let offsets = bags.value_offsets();
                    for i in 0..bags.len() {
                        if bags.is_null(i) {
                            continue;
                        }
                        for j in offsets[i] as usize..offsets[i + 1] as usize {
                            if let Some(v) = vectors.get(j) {
                                push(slot.start + i, v)?;
                            }
                        }
                    }
                }
                (IndexType::Hnsw, _) => {
                    let rows = VectorRows::of(array).map_err(storage_error)?;
                    for i in 0..rows.len() {
                        if let Some(v) = rows.get(i) {
                            push(slot.start + i, v)?;
                        }
                    }
                }
                (_, other) => {
                    return Err(storage_error(format!(
                        "index type {} on a column of type {other}",
                        index.index_type.as_str()
                    )));
                }
            }
        }
        let dim = dim.unwrap_or(1);
        let p = Progress {
            report: progress,
            cancelled,
        };
        tarn_vector::build(&values, dim, &ids, hnsw_params(index), &p, out).map_err(
            |e| match e {
                tarn_vector::Error::Cancelled => tarn_storage::Error::Closed,
                other => storage_error(other),
            },
        )?;
        Ok(())
    }
}

/// The text index of `segment`'s texts in `column`, one document per position.
fn build_text(
    index: &IndexDef,
    column: &ColumnDef,
    segment: &Segment,
    progress: &dyn Fn(usize, usize),
    cancelled: &dyn Fn() -> bool,
    out: &mut dyn std::io::Write,
) -> tarn_storage::Result<()> {
    let mut chunks = Vec::with_capacity(segment.blocks().len());
    for bi in 0..segment.blocks().len() {
        if cancelled() {
            return Err(tarn_storage::Error::Closed);
        }
        let chunk = segment.block(bi)?;
        if let Some(a) = chunk.column(column.id) {
            crate::text::check_text(a).map_err(storage_error)?;
        }
        chunks.push(chunk);
    }
    let texts = Texts {
        chunks: &chunks,
        column: column.id,
        missing: column.missing.as_ref().and_then(|v| v.as_str()),
        block: 0,
        row: 0,
        left: segment.num_rows(),
    };
    tarn_text::build(
        texts,
        crate::text::tokenizer(index),
        progress,
        cancelled,
        out,
    )
    .map_err(|e| match e {
        tarn_text::Error::Cancelled => tarn_storage::Error::Closed,
        other => storage_error(other),
    })
}

/// A segment's texts in position order (the column's missing text, or NULL, where a
/// block was written before the column existed).
struct Texts<'a> {
    chunks: &'a [std::sync::Arc<tarn_storage::Chunk>],
    column: tarn_catalog::ColumnId,
    missing: Option<&'a str>,
    block: usize,
    row: usize,
    left: usize,
}

impl<'a> Iterator for Texts<'a> {
    type Item = Option<&'a str>;

    fn next(&mut self) -> Option<Self::Item> {
        while let Some(chunk) = self.chunks.get(self.block) {
            if self.row < chunk.num_rows() {
                let i = self.row;
                self.row += 1;
                self.left = self.left.saturating_sub(1);
                return Some(match chunk.column(self.column) {
                    Some(a) => crate::text::text_at(a, i),
                    None => self.missing,
                });
            }
            self.block += 1;
            self.row = 0;
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Texts<'_> {}
