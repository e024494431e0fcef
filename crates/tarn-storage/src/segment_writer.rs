//! Writing segment files (see `segment_format` for the layout): blocks cut by bytes,
//! statistics, key sections, the trailer and tail, fsynced, then opened for reading.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::{FileWriter, StreamWriter};
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use tarn_catalog::TableId;

use crate::backend::{FileBackend, WriteFile};
use crate::chunk::column_field_name;
use crate::keys::{self};
use crate::{Error, Result};

use crate::segment::{Segment, SegmentId};
use crate::segment_format::*;

/// Counts bytes and checksums the stream written through it, buffering small writes.
struct CrcWriter {
    file: Box<dyn WriteFile>,
    path: PathBuf,
    buf: Vec<u8>,
    pos: u64,
    crc: crc32fast::Hasher,
}

impl CrcWriter {
    fn take_crc(&mut self) -> u32 {
        std::mem::take(&mut self.crc).finalize()
    }

    fn drain(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn pad_to(&mut self, align: u64) -> std::io::Result<()> {
        let pad = (align - self.pos % align) % align;
        self.write_all(&vec![0u8; pad as usize])
    }

    fn section(&mut self, bytes: &[u8]) -> Result<Section> {
        self.pad_to(8).map_err(|e| Error::io(&self.path, e))?;
        let offset = self.pos;
        self.take_crc();
        self.write_all(bytes)
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(Section {
            offset,
            len: bytes.len() as u64,
            crc: self.take_crc(),
        })
    }
}

impl Write for CrcWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.crc.update(data);
        self.pos += data.len() as u64;
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 1 << 20 {
            self.drain()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.drain()
    }
}

fn stats_accumulators(schema: &Schema) -> Vec<Option<(MinAccumulator, MaxAccumulator)>> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let sortable = matches!(
                f.data_type(),
                DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::UInt64
                    | DataType::Float32
                    | DataType::Float64
                    | DataType::Decimal128(_, _)
                    | DataType::Date32
                    | DataType::Timestamp(_, _)
                    | DataType::Boolean
                    | DataType::Utf8
            );
            if !sortable {
                return None;
            }
            Some((
                MinAccumulator::try_new(f.data_type()).ok()?,
                MaxAccumulator::try_new(f.data_type()).ok()?,
            ))
        })
        .collect()
}

/// Writes a segment file from `blocks` (row ids ascending, each batch with fields named by
/// column id and the same schema) with key sections for `keys`, fsyncs it and opens it.
/// The caller makes the name durable (directory fsync) before referencing it.
pub fn write(
    backend: &Arc<dyn FileBackend>,
    dir: &Path,
    table: TableId,
    id: SegmentId,
    schema: &SchemaRef,
    blocks: impl IntoIterator<Item = Result<(UInt64Array, RecordBatch)>>,
    keys: &[KeySpec],
) -> Result<Segment> {
    let mut writer = SegmentWriter::create(backend, dir, table, id, schema, keys)?;
    for block in blocks {
        let (row_ids, batch) = block?;
        writer.push(&row_ids, &batch)?;
    }
    writer.finish()
}

/// A segment file being written block by block (for writers that get their rows a
/// few at a time, such as an upload). Dropped unfinished, it removes its file.
pub struct SegmentWriter {
    backend: Arc<dyn FileBackend>,
    path: PathBuf,
    table: TableId,
    id: SegmentId,
    schema: SchemaRef,
    keys: Vec<KeySpec>,
    state: Option<WriterState>,
}

struct WriterState {
    writer: FileWriter<CrcWriter>,
    file_schema: SchemaRef,
    ipc_head: Section,
    metas: Vec<BlockMeta>,
    rows: u64,
    accs: Vec<Option<(MinAccumulator, MaxAccumulator)>>,
    key_entries: Vec<keys::KeyBuilder>,
}

impl SegmentWriter {
    /// Creates segment file `id` of `table` in `dir` for rows of `schema`.
    pub fn create(
        backend: &Arc<dyn FileBackend>,
        dir: &Path,
        table: TableId,
        id: SegmentId,
        schema: &SchemaRef,
        keys: &[KeySpec],
    ) -> Result<Self> {
        let path = dir.join(crate::layout::segment_file_name(table, id));
        let file = backend.create(&path).map_err(|e| Error::io(&path, e))?;
        let mut this = Self {
            backend: backend.clone(),
            path: path.clone(),
            table,
            id,
            schema: schema.clone(),
            keys: keys.to_vec(),
            state: None,
        };
        let mut fields = vec![Field::new(ROW_ID_FIELD, DataType::UInt64, false)];
        fields.extend(schema.fields().iter().map(|f| f.as_ref().clone()));
        let file_schema = Arc::new(Schema::new(fields));
        let out = CrcWriter {
            file,
            path,
            buf: Vec::with_capacity(1 << 20),
            pos: 0,
            crc: crc32fast::Hasher::new(),
        };
        let mut writer = FileWriter::try_new(out, &file_schema)?;
        let ipc_head = Section {
            offset: 0,
            len: writer.get_ref().pos,
            crc: writer.get_mut().take_crc(),
        };
        this.state = Some(WriterState {
            writer,
            file_schema,
            ipc_head,
            metas: Vec::new(),
            rows: 0,
            accs: stats_accumulators(schema),
            key_entries: keys.iter().map(|_| keys::KeyBuilder::default()).collect(),
        });
        Ok(this)
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.rows)
    }

    /// Appends one block: `row_ids` ascending and above every earlier block's.
    pub fn push(&mut self, row_ids: &UInt64Array, batch: &RecordBatch) -> Result<()> {
        let st = self
            .state
            .as_mut()
            .ok_or_else(|| Error::Internal("segment writer used after an error".into()))?;
        let res = st.push(&self.schema, &self.keys, row_ids, batch);
        if res.is_err() {
            self.state = None;
        }
        res
    }

    /// Leaves the file where it is when this writer is dropped (its directory may
    /// belong to another process by then).
    pub fn keep_file(&mut self) {
        self.path = PathBuf::new();
    }

    /// Writes the statistics, key sections and trailer, fsyncs the file and opens it.
    pub fn finish(mut self) -> Result<Segment> {
        let st = self
            .state
            .take()
            .ok_or_else(|| Error::Internal("segment writer used after an error".into()))?;
        finish_into(
            st,
            &self.path,
            self.table,
            self.id,
            &self.schema,
            &self.keys,
        )?;
        let seg = Segment::open(&self.path, self.table, self.id);
        if seg.is_ok() {
            // Keep the file: it is the caller's now.
            self.path = PathBuf::new();
        }
        seg
    }
}

impl Drop for SegmentWriter {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            self.state = None;
            let _ = self.backend.remove(&self.path);
        }
    }
}

impl WriterState {
    fn push(
        &mut self,
        schema: &SchemaRef,
        keys: &[KeySpec],
        row_ids: &UInt64Array,
        batch: &RecordBatch,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if batch.schema().fields() != schema.fields() {
            return Err(Error::Internal(
                "segment blocks with different schemas".into(),
            ));
        }
        for (acc, col) in self.accs.iter_mut().zip(batch.columns()) {
            if let Some((min, max)) = acc
                && (min.update_batch(std::slice::from_ref(col)).is_err()
                    || max.update_batch(std::slice::from_ref(col)).is_err())
            {
                *acc = None;
            }
        }
        for (spec, entries) in keys.iter().zip(self.key_entries.iter_mut()) {
            let arrays = spec
                .columns
                .iter()
                .map(|c| {
                    batch
                        .column_by_name(&column_field_name(*c))
                        .cloned()
                        .ok_or_else(|| Error::Internal(format!("key column {c} missing")))
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            entries.add(&arrays, row_ids.values())?;
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(row_ids.clone())];
        columns.extend(batch.columns().iter().cloned());
        let out_batch = RecordBatch::try_new(self.file_schema.clone(), columns)?;
        let mut pieces = Vec::new();
        cut_by_bytes(out_batch, &mut pieces)?;
        for piece in pieces {
            let ids = piece
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| Error::Internal("a block without row ids".into()))?;
            let (first_row_id, last_row_id) = (
                ids.values().first().copied().unwrap_or(0),
                ids.values().last().copied().unwrap_or(0),
            );
            self.writer.write(&piece)?;
            self.metas.push(BlockMeta {
                first_row_id,
                last_row_id,
                rows: piece.num_rows() as u64,
                crc: self.writer.get_mut().take_crc(),
            });
            self.rows += piece.num_rows() as u64;
        }
        Ok(())
    }
}

/// `batch` in blocks of at most [`BLOCK_BYTES`] each (or of one row), in order, by
/// halving, sized by [`used_bytes`].
fn cut_by_bytes(batch: RecordBatch, out: &mut Vec<RecordBatch>) -> Result<()> {
    let rows = batch.num_rows();
    if rows <= 1 || used_bytes(&batch) <= BLOCK_BYTES {
        out.push(batch);
        return Ok(());
    }
    let half = rows / 2;
    cut_by_bytes(batch.slice(0, half), out)?;
    cut_by_bytes(batch.slice(half, rows - half), out)
}

fn finish_into(
    st: WriterState,
    path: &Path,
    table: TableId,
    id: SegmentId,
    schema: &SchemaRef,
    keys: &[KeySpec],
) -> Result<()> {
    let io = |e: std::io::Error| Error::io(path, e);
    let WriterState {
        mut writer,
        ipc_head,
        metas,
        rows,
        mut accs,
        key_entries,
        ..
    } = st;
    let footer_start = writer.get_ref().pos;
    writer.finish()?;
    let mut out = writer.into_inner()?;
    let ipc_len = out.pos;
    let ipc_footer = Section {
        offset: footer_start,
        len: ipc_len - footer_start,
        crc: out.take_crc(),
    };
    // Statistics: one 2-row batch (min, max) over the columns that have them.
    let mut stat_fields = Vec::new();
    let mut stat_cols: Vec<ArrayRef> = Vec::new();
    for (field, acc) in schema.fields().iter().zip(accs.iter_mut()) {
        if let Some((min, max)) = acc
            && let (Ok(lo), Ok(hi)) = (min.evaluate(), max.evaluate())
            && !lo.is_null()
            && !hi.is_null()
            && let Ok(arr) = ScalarValue::iter_to_array([lo, hi])
        {
            stat_fields.push(Field::new(field.name(), arr.data_type().clone(), true));
            stat_cols.push(arr);
        }
    }
    let stats = if stat_cols.is_empty() {
        None
    } else {
        let s = Arc::new(Schema::new(stat_fields));
        let batch = RecordBatch::try_new(s.clone(), stat_cols)?;
        let mut bytes = Vec::new();
        let mut w = StreamWriter::try_new(&mut bytes, &s)?;
        w.write(&batch)?;
        w.finish()?;
        drop(w);
        Some(out.section(&bytes)?)
    };
    let mut key_sections = Vec::with_capacity(keys.len());
    for (spec, entries) in keys.iter().zip(key_entries) {
        let bytes = entries.finish();
        key_sections.push((spec.clone(), out.section(&bytes)?));
    }
    let trailer = Trailer {
        format: SEGMENT_FORMAT_VERSION,
        table,
        segment: id,
        rows,
        ipc_len,
        ipc_head,
        ipc_footer,
        blocks: metas,
        stats,
        keys: key_sections,
    };
    let json = serde_json::to_vec(&trailer)
        .map_err(|e| Error::Internal(format!("segment trailer: {e}")))?;
    out.write_all(&json).map_err(io)?;
    out.write_all(&(json.len() as u32).to_le_bytes())
        .map_err(io)?;
    out.write_all(&crc32fast::hash(&json).to_le_bytes())
        .map_err(io)?;
    out.write_all(&SEGMENT_FORMAT_VERSION.to_le_bytes())
        .map_err(io)?;
    out.write_all(MAGIC).map_err(io)?;
    out.drain().map_err(io)?;
    out.file.sync_data().map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ListArray, StringArray};
    use datafusion::arrow::datatypes::Int64Type;

    fn batch_of(column: ArrayRef) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "c",
            column.data_type().clone(),
            true,
        )]));
        RecordBatch::try_new(schema, vec![column]).expect("batch")
    }

    #[test]
    fn a_slice_of_a_list_counts_its_own_rows_not_its_parents_child() {
        // 200,000 lists of 30 int8s: a 48 MB child. A slice of 8,192 of them keeps
        // that whole child, which Arrow's slice size counts; its rows use 2 MB.
        let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(
            (0..200_000i64).map(|i| Some((0..30).map(move |j| Some(i + j)))),
        );
        let all = batch_of(Arc::new(lists));
        let slice = all.slice(100_000, 8192);
        let used = used_bytes(&slice);
        assert!(
            (8192 * 30 * 8..8192 * 30 * 8 + 8192 * 8).contains(&used),
            "{used}"
        );
        let mut pieces = Vec::new();
        cut_by_bytes(slice, &mut pieces).expect("cut");
        assert_eq!(pieces.len(), 1, "a 2 MB block was cut");
        // Texts of 1 MB: blocks of at most BLOCK_BYTES, in order, every row kept.
        let texts: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..100).map(|i| format!("{i:07}{}", "x".repeat(1 << 20))),
        ));
        let mut pieces = Vec::new();
        cut_by_bytes(batch_of(texts.clone()), &mut pieces).expect("cut");
        assert!(pieces.len() >= 4, "{} blocks", pieces.len());
        assert!(pieces.iter().all(|p| used_bytes(p) <= BLOCK_BYTES));
        let rows: Vec<String> = pieces
            .iter()
            .flat_map(|p| {
                let a = p
                    .column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("text");
                (0..a.len())
                    .map(|i| a.value(i)[..7].to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        let want: Vec<String> = (0..100).map(|i| format!("{i:07}")).collect();
        assert_eq!(rows, want);
    }
}
