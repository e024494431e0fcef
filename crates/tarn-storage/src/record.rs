//! Encoding of the ops of one WAL record.
//!
//! ```text
//! body: op count u32 | op*
//! op:   tag u8 | length u32 | bytes
//!   1 catalog:  JSON of a CatalogOp
//!   2 insert:   table u64 | first row id u64 | Arrow IPC stream of one batch
//!   3 delete:   table u64 | count u32 | row id u64 * count
//!   4 sequence: table u64 | column u32 | value i64
//!   5 attach:   table u64 | rows u64 | count u32 | segment id u64 * count
//! ```

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;
use tarn_catalog::{CatalogOp, ColumnId, TableId};

use crate::wal::MAX_RECORD_BYTES;
use crate::{Error, Result};

/// One change in a commit. A commit's ops are logged as one record and applied together.
#[derive(Debug, Clone)]
pub enum Op {
    /// A catalog change.
    Catalog(CatalogOp),
    /// New rows with consecutive row ids starting at `first_row_id`. The batch's fields
    /// are named by column id (see [`crate::column_field_name`]).
    Insert {
        /// Target table.
        table: TableId,
        /// Row id of the batch's first row.
        first_row_id: u64,
        /// The rows.
        batch: RecordBatch,
    },
    /// Rows deleted by row id.
    Delete {
        /// Target table.
        table: TableId,
        /// Deleted row ids.
        row_ids: Arc<[u64]>,
    },
    /// A sequence (SERIAL column) advanced to `value`.
    SetSequence {
        /// Table.
        table: TableId,
        /// Column.
        column: ColumnId,
        /// Last value handed out.
        value: i64,
    },
    /// Staged segment files (see [`crate::Stager`]) become the rows of a table created
    /// in the same commit: rows `0..rows`, in segment order.
    Attach {
        /// The new table.
        table: TableId,
        /// Its segments, in row order.
        segments: Arc<[u64]>,
        /// Rows in all of them.
        rows: u64,
    },
}

fn put_op(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) -> Result<()> {
    let total = out.len() as u64 + 5 + bytes.len() as u64;
    if total > MAX_RECORD_BYTES {
        return Err(too_large(total));
    }
    put_op_with(out, tag, |out| {
        out.extend_from_slice(bytes);
        Ok(())
    })
}

/// Appends an op whose body `write` puts straight into `out` (a body built beside the
/// record would hold an insert's rows once more), its length filled in after.
fn put_op_with(
    out: &mut Vec<u8>,
    tag: u8,
    write: impl FnOnce(&mut Vec<u8>) -> Result<()>,
) -> Result<()> {
    let start = out.len();
    out.push(tag);
    out.extend_from_slice(&0u32.to_le_bytes());
    write(out)?;
    if out.len() as u64 > MAX_RECORD_BYTES {
        return Err(too_large(out.len() as u64));
    }
    let len = (out.len() - start - 5) as u32;
    out[start + 1..start + 5].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn too_large(size: u64) -> Error {
    Error::TooLarge {
        what: "the data one statement writes (its log record)".into(),
        size,
        limit: MAX_RECORD_BYTES,
    }
}

/// Encodes ops into a record body; a body over [`MAX_RECORD_BYTES`] is
/// [`Error::TooLarge`] (checked as it grows, before any length field could overflow).
pub fn encode(ops: &[Op]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        match op {
            Op::Catalog(c) => {
                let json = serde_json::to_vec(c)
                    .map_err(|e| Error::Internal(format!("encoding catalog op: {e}")))?;
                put_op(&mut out, 1, &json)?;
            }
            Op::Insert {
                table,
                first_row_id,
                batch,
            } => {
                // The bytes the batch's rows occupy (a slice of a larger batch counts
                // its slice only, which takes a closer look only when the buffers are
                // large).
                if batch.get_array_memory_size() as u64 > MAX_RECORD_BYTES {
                    let size: u64 = batch
                        .columns()
                        .iter()
                        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
                        .sum();
                    if size > MAX_RECORD_BYTES {
                        return Err(too_large(size));
                    }
                }
                put_op_with(&mut out, 2, |out| {
                    out.extend_from_slice(&table.to_le_bytes());
                    out.extend_from_slice(&first_row_id.to_le_bytes());
                    let mut w = StreamWriter::try_new(out, &batch.schema())?;
                    w.write(batch)?;
                    w.finish()?;
                    Ok(())
                })?;
            }
            Op::Delete { table, row_ids } => {
                let mut bytes = Vec::with_capacity(12 + row_ids.len() * 8);
                bytes.extend_from_slice(&table.to_le_bytes());
                bytes.extend_from_slice(&(row_ids.len() as u32).to_le_bytes());
                for id in row_ids.iter() {
                    bytes.extend_from_slice(&id.to_le_bytes());
                }
                put_op(&mut out, 3, &bytes)?;
            }
            Op::SetSequence {
                table,
                column,
                value,
            } => {
                let mut bytes = Vec::with_capacity(20);
                bytes.extend_from_slice(&table.to_le_bytes());
                bytes.extend_from_slice(&column.to_le_bytes());
                bytes.extend_from_slice(&value.to_le_bytes());
                put_op(&mut out, 4, &bytes)?;
            }
            Op::Attach {
                table,
                segments,
                rows,
            } => {
                let mut bytes = Vec::with_capacity(20 + segments.len() * 8);
                bytes.extend_from_slice(&table.to_le_bytes());
                bytes.extend_from_slice(&rows.to_le_bytes());
                bytes.extend_from_slice(&(segments.len() as u32).to_le_bytes());
                for id in segments.iter() {
                    bytes.extend_from_slice(&id.to_le_bytes());
                }
                put_op(&mut out, 5, &bytes)?;
            }
        }
    }
    Ok(out)
}

/// Decodes a record body. `bad` builds the corruption error (it names the file).
pub fn decode(body: &[u8], bad: impl Fn(String) -> Error) -> Result<Vec<Op>> {
    let mut r = tarn_format::Cursor::new(body);
    let short = || bad("record body is truncated".into());
    let n = r.u32().ok_or_else(short)?;
    let mut ops = Vec::with_capacity(n.min(1024) as usize);
    for _ in 0..n {
        let tag = r.u8().ok_or_else(short)?;
        let len = r.u32().ok_or_else(short)? as usize;
        let bytes = r.take(len).ok_or_else(short)?;
        let mut o = tarn_format::Cursor::new(bytes);
        let op = match tag {
            1 => Op::Catalog(
                serde_json::from_slice(bytes).map_err(|e| bad(format!("catalog op: {e}")))?,
            ),
            2 => {
                let table = o.u64().ok_or_else(short)?;
                let first_row_id = o.u64().ok_or_else(short)?;
                let stream = o.rest();
                let batch = crate::untrusted::decode(|| {
                    let mut reader = StreamReader::try_new(Cursor::new(stream), None)
                        .map_err(|e| format!("insert batch: {e}"))?;
                    reader
                        .next()
                        .ok_or_else(|| "insert without a batch".to_string())?
                        .map_err(|e| format!("insert batch: {e}"))
                })
                .map_err(&bad)?;
                Op::Insert {
                    table,
                    first_row_id,
                    batch,
                }
            }
            3 => {
                let table = o.u64().ok_or_else(short)?;
                let count = o.u32().ok_or_else(short)? as usize;
                if len.checked_sub(12) != count.checked_mul(8) {
                    return Err(short());
                }
                let row_ids = (0..count)
                    .map(|_| o.u64().ok_or_else(short))
                    .collect::<Result<Arc<[u64]>>>()?;
                Op::Delete { table, row_ids }
            }
            4 => Op::SetSequence {
                table: o.u64().ok_or_else(short)?,
                column: o.u32().ok_or_else(short)?,
                value: o.u64().ok_or_else(short)? as i64,
            },
            5 => {
                let table = o.u64().ok_or_else(short)?;
                let rows = o.u64().ok_or_else(short)?;
                let count = o.u32().ok_or_else(short)? as usize;
                if len.checked_sub(20) != count.checked_mul(8) {
                    return Err(short());
                }
                let segments = (0..count)
                    .map(|_| o.u64().ok_or_else(short))
                    .collect::<Result<Arc<[u64]>>>()?;
                Op::Attach {
                    table,
                    segments,
                    rows,
                }
            }
            t => return Err(bad(format!("unknown op tag {t}"))),
        };
        ops.push(op);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn round_trip() -> Result<()> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("c1", DataType::Int64, false),
            Field::new("c2", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )?;
        let ops = vec![
            Op::Catalog(CatalogOp::DropTable { table_id: 9 }),
            Op::Insert {
                table: 3,
                first_row_id: 10,
                batch: batch.clone(),
            },
            Op::Delete {
                table: 3,
                row_ids: Arc::from(vec![10u64, 11]),
            },
            Op::SetSequence {
                table: 3,
                column: 1,
                value: -5,
            },
        ];
        let body = encode(&ops)?;
        let back = decode(&body, Error::Internal)?;
        assert_eq!(back.len(), 4);
        match &back[1] {
            Op::Insert {
                table: 3,
                first_row_id: 10,
                batch: b,
            } => assert_eq!(b, &batch),
            other => panic!("{other:?}"),
        }
        match &back[3] {
            Op::SetSequence { value: -5, .. } => {}
            other => panic!("{other:?}"),
        }
        // Truncated bodies are errors, never panics.
        for cut in 0..body.len() {
            assert!(decode(&body[..cut], Error::Internal).is_err());
        }
        Ok(())
    }
}
