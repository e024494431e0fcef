//! The database: directory lock, catalog, tables and the commit path.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use tarn_catalog::{Catalog, CatalogOp, TableId};

use crate::record::{self, Op};
use crate::table::TableStore;
use crate::wal::{SyncMode, Wal};
use crate::{Error, Result};

const FORMAT_FILE: &str = "TARN_FORMAT";
/// On-disk format version of a database directory.
pub const DB_FORMAT_VERSION: u32 = 1;

/// Storage options.
#[derive(Debug, Clone, Copy, Default)]
pub struct StorageOptions {
    /// When a commit counts as durable.
    pub sync: SyncMode,
}

/// One database: its catalog and tables, durable through one write-ahead log.
pub struct Database {
    dir: Option<PathBuf>,
    wal: Option<Wal>,
    _lock: Option<File>,
    catalog: RwLock<Arc<Catalog>>,
    tables: RwLock<HashMap<TableId, Arc<TableStore>>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("dir", &self.dir).finish()
    }
}

impl Database {
    /// A database without files.
    pub fn in_memory() -> Self {
        Database {
            dir: None,
            wal: None,
            _lock: None,
            catalog: RwLock::new(Arc::new(Catalog::new())),
            tables: RwLock::new(HashMap::new()),
        }
    }

    /// Opens or creates the database in `dir`: takes the directory lock, checks the
    /// format version and replays the write-ahead log.
    pub fn open(dir: &Path, options: StorageOptions) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    path: dir.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&lock_path, e)),
        }
        check_format(dir)?;
        let wal_path = dir.join("wal.log");
        let (wal, entries) = Wal::open(&wal_path, options.sync)?;
        let db = Database {
            dir: Some(dir.to_path_buf()),
            wal: None,
            _lock: Some(lock),
            catalog: RwLock::new(Arc::new(Catalog::new())),
            tables: RwLock::new(HashMap::new()),
        };
        for entry in entries {
            let bad = |message: String| Error::Corrupt {
                path: wal_path.clone(),
                message: format!("record {}: {message}", entry.lsn),
            };
            let ops = record::decode(&entry.body, bad)?;
            db.apply(&ops).map_err(|e| Error::Corrupt {
                path: wal_path.clone(),
                message: format!("record {} does not apply: {e}", entry.lsn),
            })?;
        }
        Ok(Database {
            wal: Some(wal),
            ..db
        })
    }

    /// The database directory (`None` in memory).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// A snapshot of the catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().clone()
    }

    /// The data of table `id`.
    pub fn table(&self, id: TableId) -> Option<Arc<TableStore>> {
        self.tables.read().get(&id).cloned()
    }

    /// Logs `ops` as one record and, once durable, applies them. Nothing is applied when
    /// logging fails. Callers hold the locks that make the ops valid (the DDL lock for
    /// catalog changes, the writer lock of each table written).
    pub fn commit(&self, ops: Vec<Op>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        if let Some(wal) = &self.wal {
            wal.append(&record::encode(&ops)?)?;
        }
        self.apply(&ops)
    }

    fn apply(&self, ops: &[Op]) -> Result<()> {
        // Catalog changes are prepared on a copy and published after the data ops, so
        // a reader never sees a new table before its rows.
        // The catalog lock is held from copy to publish so concurrent commits (say, two
        // inserts that each fix a vector dimension) never lose each other's changes.
        let has_catalog_ops = ops.iter().any(|op| matches!(op, Op::Catalog(_)));
        let mut catalog_guard = has_catalog_ops.then(|| self.catalog.write());
        let mut catalog: Option<Catalog> = None;
        let mut dropped = Vec::new();
        let mut created = HashMap::new();
        for op in ops {
            if let (Op::Catalog(c), Some(guard)) = (op, &catalog_guard) {
                let cat = catalog.get_or_insert_with(|| Catalog::clone(guard));
                dropped.extend(cat.apply(c)?);
                if let CatalogOp::CreateTable(t) = c {
                    created.insert(t.id, Arc::new(TableStore::new(t.id)));
                }
            }
        }
        for op in ops {
            let store = |table: &TableId| {
                created
                    .get(table)
                    .cloned()
                    .or_else(|| self.table(*table))
                    .ok_or_else(|| Error::Internal(format!("table {table} has no storage")))
            };
            match op {
                Op::Catalog(_) => {}
                Op::Insert {
                    table,
                    first_row_id,
                    batch,
                } => store(table)?.apply_insert(*first_row_id, batch)?,
                Op::Delete { table, row_ids } => store(table)?.apply_delete(row_ids)?,
                Op::SetSequence {
                    table,
                    column,
                    value,
                } => store(table)?.apply_sequence(*column, *value),
            }
        }
        let mut tables = self.tables.write();
        tables.extend(created);
        for id in dropped {
            tables.remove(&id);
        }
        if let (Some(cat), Some(guard)) = (catalog, catalog_guard.as_mut()) {
            **guard = Arc::new(cat);
        }
        Ok(())
    }
}

fn check_format(dir: &Path) -> Result<()> {
    let path = dir.join(FORMAT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found = text
                .lines()
                .find_map(|l| l.strip_prefix("format "))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .ok_or_else(|| Error::Corrupt {
                    path: path.clone(),
                    message: "no format line".into(),
                })?;
            if found != DB_FORMAT_VERSION {
                return Err(Error::FormatVersion {
                    path,
                    found,
                    supported: DB_FORMAT_VERSION,
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
            std::fs::write(&tmp, format!("tarn database\nformat {DB_FORMAT_VERSION}\n"))
                .map_err(|e| Error::io(&tmp, e))?;
            File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
            crate::wal::sync_parent(&path)
        }
        Err(e) => Err(Error::io(&path, e)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::DataType;
    use tarn_catalog::{CatalogOp, OrgRecord, TableDef, WorkspaceRecord};

    use super::*;
    use crate::stored_schema;

    fn batch(values: &[i64]) -> RecordBatch {
        let schema = stored_schema(&[(1, DataType::Int64, true)]);
        let col: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        RecordBatch::try_new(schema, vec![col]).expect("batch")
    }

    fn setup(db: &Database) -> Result<()> {
        db.commit(vec![
            Op::Catalog(CatalogOp::CreateOrg(OrgRecord {
                id: "o".into(),
                name: "o".into(),
                creator: "u".into(),
                created_at: String::new(),
            })),
            Op::Catalog(CatalogOp::CreateWorkspace(WorkspaceRecord {
                id: "w".into(),
                org_id: "o".into(),
                name: "w".into(),
                created_at: String::new(),
            })),
            Op::Catalog(CatalogOp::CreateTable(TableDef {
                id: 1,
                org_id: "o".into(),
                workspace_id: "w".into(),
                name: "t".into(),
                engine: true,
                columns: vec![],
                next_column_id: 2,
                unique_constraints: vec![],
                created_at: String::new(),
            })),
            Op::Insert {
                table: 1,
                first_row_id: 0,
                batch: batch(&[10, 20]),
            },
        ])
    }

    #[test]
    fn key_index_survives_delete_and_reinsert_in_one_commit() -> Result<()> {
        let db = Database::in_memory();
        setup(&db)?;
        let store = db
            .table(1)
            .ok_or_else(|| Error::Internal("no table".into()))?;
        let key = |v: i64| -> Vec<ArrayRef> { vec![Arc::new(Int64Array::from(vec![v]))] };
        assert_eq!(store.key_matches(&[1], &key(10))?, vec![Some(0)]);
        // UPDATE of row 0 keeping its key: the insert is applied before the delete.
        db.commit(vec![
            Op::Insert {
                table: 1,
                first_row_id: 2,
                batch: batch(&[10]),
            },
            Op::Delete {
                table: 1,
                row_ids: Arc::from(vec![0u64]),
            },
        ])?;
        assert_eq!(store.key_matches(&[1], &key(10))?, vec![Some(2)]);
        assert_eq!(store.snapshot().row_count(), 2);
        Ok(())
    }

    #[test]
    fn replay_rebuilds_the_same_state() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        {
            let db = Database::open(dir.path(), StorageOptions::default())?;
            setup(&db)?;
            db.commit(vec![Op::Delete {
                table: 1,
                row_ids: Arc::from(vec![1u64]),
            }])?;
            assert!(matches!(
                Database::open(dir.path(), StorageOptions::default()),
                Err(Error::Locked { .. })
            ));
        }
        let db = Database::open(dir.path(), StorageOptions::default())?;
        let snap = db
            .table(1)
            .map(|s| s.snapshot())
            .ok_or_else(|| Error::Internal("no table".into()))?;
        assert_eq!(snap.row_count(), 1);
        assert!(snap.contains(0) && !snap.contains(1));
        assert_eq!(snap.next_row_id(), 2);
        assert!(db.catalog().table("o", "w", "t").is_some());
        Ok(())
    }
}
