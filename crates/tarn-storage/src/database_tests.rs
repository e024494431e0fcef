//! Tests of opening, closing and recovering a database (`database.rs`), and the helpers
//! other modules' tests share.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use tarn_catalog::{CatalogOp, OrgRecord, TableDef, WorkspaceRecord};

use super::*;
use crate::maintenance::LiveBlocks;
use crate::manifest::MANIFEST_FILE;
use crate::stored_schema;
use crate::wal::SyncMode;
use datafusion::arrow::array::Array;
use roaring::RoaringBitmap;
use std::path::PathBuf;

fn batch(values: &[i64]) -> RecordBatch {
    let schema = stored_schema(&[(1, DataType::Int64, true)]);
    let col: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
    RecordBatch::try_new(schema, vec![col]).expect("batch")
}

/// Org `o`, workspace `w` and table 1 `t` with `columns` and `unique` constraints.
pub(crate) fn create_ops(
    columns: Vec<tarn_catalog::ColumnDef>,
    unique: Vec<(String, Vec<u32>)>,
) -> Vec<Op> {
    vec![
        Op::Catalog(CatalogOp::CreateOrg(OrgRecord {
            id: "o".into(),
            name: "o".into(),
            creator: "u".into(),
            created_at: tarn_catalog::Timestamp::default(),
        })),
        Op::Catalog(CatalogOp::CreateWorkspace(WorkspaceRecord {
            id: "w".into(),
            org_id: "o".into(),
            name: "w".into(),
            created_at: tarn_catalog::Timestamp::default(),
            uid: String::new(),
        })),
        Op::Catalog(CatalogOp::CreateTable(TableDef {
            id: 1,
            org_id: "o".into(),
            workspace_id: "w".into(),
            name: "t".into(),
            engine: true,
            columns,
            next_column_id: 2,
            unique_constraints: unique,
            created_at: tarn_catalog::Timestamp::default(),
        })),
    ]
}

fn setup(db: &Database) -> Result<()> {
    let mut ops = create_ops(vec![], vec![]);
    ops.push(Op::Insert {
        table: 1,
        first_row_id: 0,
        batch: batch(&[10, 20]),
    });
    db.commit(ops)
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
    assert!(snap.contains(0)? && !snap.contains(1)?);
    assert_eq!(snap.next_row_id(), 2);
    assert!(db.catalog().table("o", "w", "t").is_some());
    Ok(())
}

fn keyed_setup(db: &Database) -> Result<()> {
    db.commit(create_ops(
        vec![tarn_catalog::ColumnDef {
            id: 1,
            name: "k".into(),
            ty: tarn_catalog::SqlType::Int8,
            nullable: false,
            default: None,
            primary_key: true,
            unique: false,
            missing: None,
            vector_dim: None,
        }],
        vec![("t_pkey".into(), vec![1])],
    ))
}

fn insert_range(db: &Database, from: i64, to: i64) -> Result<()> {
    let next = db.table(1).map_or(0, |s| s.snapshot().next_row_id());
    db.commit(vec![Op::Insert {
        table: 1,
        first_row_id: next,
        batch: batch(&(from..to).collect::<Vec<_>>()),
    }])
}

fn key(v: i64) -> Vec<ArrayRef> {
    vec![Arc::new(Int64Array::from(vec![v]))]
}

fn store(db: &Database) -> Result<Arc<TableStore>> {
    db.table(1)
        .ok_or_else(|| Error::Internal("no table".into()))
}

fn values(db: &Database) -> Result<Vec<i64>> {
    let snap = store(db)?.snapshot();
    let mut out = Vec::new();
    for s in snap.segments() {
        for b in 0..s.segment().blocks().len() {
            let (_, batch) = s.live_block(b)?;
            let col = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| Error::Internal("not i64".into()))?;
            out.extend(col.values().iter().copied());
        }
    }
    Ok(out)
}

fn quiet() -> StorageOptions {
    StorageOptions {
        sync: SyncMode::Process,
        background: false,
        ..StorageOptions::default()
    }
}

fn seg_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("segments")).map_or(0, |d| d.count())
}

#[test]
fn checkpoint_seals_segments_cuts_the_log_and_reopens_from_them() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    {
        let db = Database::open(dir.path(), quiet())?;
        keyed_setup(&db)?;
        for i in 0..10 {
            insert_range(&db, i * 20_000, (i + 1) * 20_000)?;
        }
        let ids: Vec<u64> = (0..200_000).step_by(7).collect();
        db.commit(vec![Op::Delete {
            table: 1,
            row_ids: ids.into(),
        }])?;
        db.checkpoint()?;
        let snap = store(&db)?.snapshot();
        assert!(snap.segments().iter().all(|s| !s.segment().in_memory()));
        assert_eq!(snap.memtable_bytes(), 0);
        assert!(seg_files(dir.path()) >= 1);
        // The log holds nothing before the checkpoint any more.
        let wal_files = std::fs::read_dir(dir.path().join("wal"))
            .map_err(|e| Error::io("wal", e))?
            .count();
        assert_eq!(wal_files, 1);
        // Deletes and inserts after the checkpoint go to the log.
        db.commit(vec![Op::Delete {
            table: 1,
            row_ids: vec![1u64].into(),
        }])?;
        insert_range(&db, 200_000, 200_010)?;
        // Keys are found in the sealed segments' key sections.
        assert_eq!(store(&db)?.key_matches(&[1], &key(8))?, vec![Some(8)]);
        assert_eq!(store(&db)?.key_matches(&[1], &key(7))?, vec![None]);
        std::mem::forget(db); // a crash: no checkpoint on close
    }
    // Reopen without the lock of the "crashed" process: copy the directory.
    let copy = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    copy_dir(dir.path(), copy.path())?;
    let db = Database::open(copy.path(), quiet())?;
    let expected: Vec<i64> = (0..200_010)
        .filter(|v| *v >= 200_000 || (v % 7 != 0 && *v != 1))
        .collect();
    assert_eq!(values(&db)?, expected);
    assert_eq!(store(&db)?.snapshot().row_count(), expected.len() as u64);
    assert_eq!(
        store(&db)?.key_matches(&[1], &key(200_005))?,
        vec![Some(200_005)]
    );
    assert_eq!(store(&db)?.key_matches(&[1], &key(1))?, vec![None]);
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| Error::io(&target, e))?;
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(|e| Error::io(&target, e))?;
        }
    }
    Ok(())
}

#[test]
fn compaction_merges_small_segments_and_drops_deleted_rows() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let db = Database::open(dir.path(), quiet())?;
    keyed_setup(&db)?;
    for i in 0..6 {
        insert_range(&db, i * 1000, (i + 1) * 1000)?;
        db.checkpoint()?;
    }
    assert_eq!(store(&db)?.snapshot().segments().len(), 6);
    // Appended blocks have no gaps in their row ids: positions are arithmetic.
    let dense = store(&db)?.snapshot();
    assert!(dense.contains(0)? && dense.contains(4000)? && dense.contains(5999)?);
    assert!(!dense.contains(6000)?);
    let ids: Vec<u64> = (0..6000).filter(|i| i % 2 == 0).collect();
    db.commit(vec![Op::Delete {
        table: 1,
        row_ids: ids.into(),
    }])?;
    let before = store(&db)?.snapshot().size_bytes();
    db.maintain()?;
    let snap = store(&db)?.snapshot();
    assert_eq!(snap.segments().len(), 1);
    assert!(snap.segments()[0].deletes().is_empty());
    // The compacted blocks have a gap at every even id: positions are searched.
    assert!(snap.contains(4001)? && snap.contains(5999)?);
    assert!(!snap.contains(4000)? && !snap.contains(0)? && !snap.contains(6000)?);
    let found: usize = snap
        .rows(&[3999, 4000, 4001, 4002])?
        .iter()
        .map(|(_, positions)| positions.len())
        .sum();
    assert_eq!(found, 2);
    assert!(snap.size_bytes() < before);
    assert_eq!(seg_files(dir.path()), 1);
    let expected: Vec<i64> = (0..6000).filter(|v| v % 2 == 1).collect();
    assert_eq!(values(&db)?, expected);
    assert_eq!(store(&db)?.key_matches(&[1], &key(4001))?, vec![Some(4001)]);
    drop(db);
    let db = Database::open(dir.path(), quiet())?;
    assert_eq!(values(&db)?, expected);
    Ok(())
}

#[test]
fn deletes_during_compaction_are_carried_to_its_output() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let db = Database::open(dir.path(), quiet())?;
    keyed_setup(&db)?;
    for i in 0..3 {
        insert_range(&db, i * 100, (i + 1) * 100)?;
        db.checkpoint()?;
    }
    db.commit(vec![Op::Delete {
        table: 1,
        row_ids: vec![5u64].into(),
    }])?;
    // Compaction builds its output from this snapshot…
    let st = store(&db)?;
    let snap = st.snapshot();
    let run: Vec<SegmentRef> = snap.segments().to_vec();
    let new = db.inner.write_segment(
        1,
        run[0].segment().schema(),
        LiveBlocks::new(run.clone(), &db.inner.flags().stopping),
    )?;
    // …while a writer deletes more rows.
    db.commit(vec![Op::Delete {
        table: 1,
        row_ids: vec![6u64, 150, 299].into(),
    }])?;
    let old: Vec<Arc<Segment>> = run.iter().map(|s| s.segment().clone()).collect();
    let built: Vec<Arc<RoaringBitmap>> = run.iter().map(|s| s.deletes_arc().clone()).collect();
    assert!(st.replace(&old, new, Some(&built))?);
    let expected: Vec<i64> = (0..300).filter(|v| ![5, 6, 150, 299].contains(v)).collect();
    assert_eq!(values(&db)?, expected);
    assert_eq!(st.snapshot().row_count(), 296);
    Ok(())
}

#[test]
fn flipped_bytes_are_corruption_naming_the_file() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    {
        let db = Database::open(dir.path(), quiet())?;
        keyed_setup(&db)?;
        insert_range(&db, 0, 5000)?;
        db.checkpoint()?;
    }
    let seg = std::fs::read_dir(dir.path().join("segments"))
        .map_err(|e| Error::io("segments", e))?
        .next()
        .ok_or_else(|| Error::Internal("no segment".into()))?
        .map_err(|e| Error::io("segments", e))?
        .path();
    let good = std::fs::read(&seg).map_err(|e| Error::io(&seg, e))?;
    // In a data block: open works, reading the block is corruption, never data.
    let mut bad = good.clone();
    bad[2000] ^= 0x10;
    std::fs::write(&seg, &bad).map_err(|e| Error::io(&seg, e))?;
    {
        let db = Database::open(dir.path(), quiet())?;
        let err = values(&db).unwrap_err().to_string();
        assert!(err.contains("corruption") && err.contains(".seg"), "{err}");
    }
    // In the trailer: open refuses.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 30] ^= 0x10;
    std::fs::write(&seg, &bad).map_err(|e| Error::io(&seg, e))?;
    let err = Database::open(dir.path(), quiet()).unwrap_err().to_string();
    assert!(err.contains("corruption") && err.contains(".seg"), "{err}");
    std::fs::write(&seg, &good).map_err(|e| Error::io(&seg, e))?;
    // In the manifest.
    let manifest = dir.path().join("MANIFEST");
    let mut m = std::fs::read(&manifest).map_err(|e| Error::io(&manifest, e))?;
    let mid = m.len() / 2;
    m[mid] ^= 0x01;
    std::fs::write(&manifest, &m).map_err(|e| Error::io(&manifest, e))?;
    let err = Database::open(dir.path(), quiet()).unwrap_err().to_string();
    assert!(
        err.contains("corruption") && err.contains("MANIFEST"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_failing_disk_fails_cleanly_and_the_database_recovers() -> Result<()> {
    use crate::backend::{Fault, FaultyBackend};
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let disk = FaultyBackend::new();
    let options = StorageOptions {
        sync: SyncMode::Full,
        backend: Arc::new(disk.clone()),
        background: false,
        ..StorageOptions::default()
    };
    {
        let db = Database::open(dir.path(), options.clone())?;
        keyed_setup(&db)?;
        insert_range(&db, 0, 100)?;
        for fault in [Fault::NoSpace, Fault::WriteIo, Fault::SyncIo] {
            disk.set(fault);
            assert!(insert_range(&db, 1000, 1010).is_err(), "{fault:?}");
            assert!(db.checkpoint().is_err(), "{fault:?}");
            // Nothing of the failed statement is visible.
            assert_eq!(store(&db)?.snapshot().row_count(), 100);
            disk.clear();
        }
        insert_range(&db, 100, 200)?;
        db.checkpoint()?;
        insert_range(&db, 200, 210)?;
        std::mem::forget(db);
    }
    let copy = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    copy_dir(dir.path(), copy.path())?;
    let db = Database::open(copy.path(), quiet())?;
    assert_eq!(values(&db)?, (0..210).collect::<Vec<_>>());
    Ok(())
}

fn files_of(dir: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let path = entry.map_err(|e| Error::io(&d, e))?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n != "LOCK") {
                let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
                out.insert(path, bytes);
            }
        }
    }
    Ok(out)
}

#[test]
fn a_missing_manifest_with_data_is_refused_and_nothing_is_deleted() -> Result<()> {
    let orig = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    {
        let db = Database::open(orig.path(), quiet())?;
        keyed_setup(&db)?;
        insert_range(&db, 0, 100)?;
        db.checkpoint()?;
        insert_range(&db, 100, 110)?;
        std::mem::forget(db); // records after the checkpoint stay in the log
    }
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    copy_dir(orig.path(), dir.path())?;
    std::fs::remove_file(dir.path().join(MANIFEST_FILE)).map_err(|e| Error::io("m", e))?;
    let before = files_of(dir.path())?;
    let err = Database::open(dir.path(), quiet()).unwrap_err().to_string();
    assert!(
        err.contains("MANIFEST") && err.contains("refusing"),
        "{err}"
    );
    assert_eq!(files_of(dir.path())?, before);
    // Only the WAL left, no segments: still data, still refused.
    std::fs::remove_dir_all(dir.path().join("segments")).map_err(|e| Error::io("s", e))?;
    let before = files_of(dir.path())?;
    assert!(Database::open(dir.path(), quiet()).is_err());
    assert_eq!(files_of(dir.path())?, before);
    Ok(())
}

#[test]
fn a_new_database_is_durable_before_its_first_commit() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    drop(Database::open(dir.path(), quiet())?);
    let files = files_of(dir.path())?;
    assert!(
        files.keys().any(|p| p.ends_with(MANIFEST_FILE)),
        "{files:?}"
    );
    assert!(files.keys().any(|p| p.ends_with("TARN_FORMAT")));
    assert!(
        files
            .keys()
            .any(|p| p.extension().is_some_and(|e| e == "wal"))
    );
    // From now on the MANIFEST is required.
    Database::open(dir.path(), quiet())?;
    Ok(())
}

#[test]
fn a_failed_open_changes_no_file() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let durable = StorageOptions {
        sync: SyncMode::Full,
        ..quiet()
    };
    {
        let db = Database::open(dir.path(), durable)?;
        keyed_setup(&db)?;
        insert_range(&db, 0, 100)?;
        db.checkpoint()?;
        insert_range(&db, 100, 110)?;
        insert_range(&db, 110, 120)?;
        std::mem::forget(db);
    }
    let copy = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    copy_dir(dir.path(), copy.path())?;
    // An orphan segment, a redundant WAL file and damage in the middle of the log.
    std::fs::write(copy.path().join("segments/1-999.seg"), b"orphan")
        .map_err(|e| Error::io("orphan", e))?;
    std::fs::write(copy.path().join("wal/0000000000.wal"), b"old")
        .map_err(|e| Error::io("old", e))?;
    let wal = std::fs::read_dir(copy.path().join("wal"))
        .map_err(|e| Error::io("wal", e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .max()
        .ok_or_else(|| Error::Internal("no wal".into()))?;
    let mut bytes = std::fs::read(&wal).map_err(|e| Error::io(&wal, e))?;
    bytes[60] ^= 0x20;
    std::fs::write(&wal, &bytes).map_err(|e| Error::io(&wal, e))?;
    let before = files_of(copy.path())?;
    let err = Database::open(copy.path(), quiet())
        .unwrap_err()
        .to_string();
    assert!(err.contains("corruption") && err.contains(".wal"), "{err}");
    assert_eq!(files_of(copy.path())?, before);
    Ok(())
}

#[test]
fn a_commit_that_cannot_apply_logs_nothing_and_publishes_nothing() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    {
        let db = Database::open(dir.path(), quiet())?;
        keyed_setup(&db)?;
        insert_range(&db, 0, 10)?;
        let wal_len = db.inner.wal().map(|w| w.current_len());
        // A delete and then an insert that reuses a row id: the delete must not
        // show, and nothing reaches the log.
        let err = db
            .commit(vec![
                Op::Delete {
                    table: 1,
                    row_ids: vec![0u64, 1].into(),
                },
                Op::Insert {
                    table: 1,
                    first_row_id: 5,
                    batch: batch(&[100]),
                },
            ])
            .unwrap_err();
        assert!(err.to_string().contains("reused"), "{err}");
        assert_eq!(db.inner.wal().map(|w| w.current_len()), wal_len);
        assert_eq!(store(&db)?.snapshot().row_count(), 10);
        // The database goes on.
        insert_range(&db, 10, 20)?;
        std::mem::forget(db);
    }
    let copy = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    copy_dir(dir.path(), copy.path())?;
    let db = Database::open(copy.path(), quiet())?;
    assert_eq!(values(&db)?, (0..20).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn records_and_catalogs_over_their_limits_are_too_large() -> Result<()> {
    let db = Database::open(
        tempfile::tempdir().map_err(|e| Error::io("tmp", e))?.path(),
        quiet(),
    )?;
    keyed_setup(&db)?;
    // 1.1 GiB of zeros (allocated lazily: never touched).
    let n = (crate::wal::MAX_RECORD_BYTES as usize / 8) + (1 << 24);
    let col: ArrayRef = Arc::new(Int64Array::from(vec![0i64; n]));
    let big = RecordBatch::try_new(stored_schema(&[(1, DataType::Int64, true)]), vec![col])
        .map_err(Error::from)?;
    let err = db
        .commit(vec![Op::Insert {
            table: 1,
            first_row_id: 0,
            batch: big,
        }])
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&crate::wal::MAX_RECORD_BYTES.to_string())
    );
    let workspace = |id: &str| {
        Op::Catalog(CatalogOp::CreateWorkspace(WorkspaceRecord {
            id: id.into(),
            org_id: "o".into(),
            name: id.into(),
            created_at: tarn_catalog::Timestamp::default(),
            uid: String::new(),
        }))
    };
    // The running size is an upper bound (deletes add to it too): near the limit
    // the catalog is measured before a commit is refused.
    db.inner
        .counters()
        .catalog_bytes
        .store(crate::state::MAX_CATALOG_BYTES - 10, Ordering::Relaxed);
    db.commit(vec![workspace("w1")])?;
    let exact = catalog_size(&db.catalog())?;
    assert_eq!(
        db.inner.counters().catalog_bytes.load(Ordering::Relaxed),
        exact
    );
    // A catalog really over the limit is refused and unchanged.
    db.inner
        .counters()
        .max_catalog_bytes
        .store(exact + 10, Ordering::Relaxed);
    let err = db.commit(vec![workspace("w2")]).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert!(db.catalog().workspace("o", "w2").is_none());
    Ok(())
}

/// One user filling the catalog cannot make another's writes fail: past their share
/// (a quarter of the limit, for all the organizations they created together) their
/// growth is refused, while others still write and they can still delete.
#[test]
fn each_user_has_a_fair_share_of_the_catalog() -> Result<()> {
    let db = Database::open(
        tempfile::tempdir().map_err(|e| Error::io("tmp", e))?.path(),
        quiet(),
    )?;
    let org = |id: &str, creator: &str| {
        Op::Catalog(CatalogOp::CreateOrg(tarn_catalog::OrgRecord {
            id: id.into(),
            name: id.into(),
            creator: creator.into(),
            created_at: tarn_catalog::Timestamp::default(),
        }))
    };
    let workspace = |org: &str, id: &str| {
        Op::Catalog(CatalogOp::CreateWorkspace(WorkspaceRecord {
            id: id.into(),
            org_id: org.into(),
            name: "n".repeat(200),
            created_at: tarn_catalog::Timestamp::default(),
            uid: String::new(),
        }))
    };
    db.commit(vec![org("hog", "h"), org("bob", "b")])?;
    // The hog's second and third organizations.
    db.commit(vec![org("hog2", "h"), org("hog3", "h")])?;
    db.inner
        .counters()
        .max_catalog_bytes
        .store(64 << 10, Ordering::Relaxed);
    let mut made = 0;
    let refused = loop {
        match db.commit(vec![workspace("hog", &format!("w{made}"))]) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made < 1000, "never refused");
    };
    assert!(matches!(refused, Error::TooLarge { .. }), "{refused}");
    assert!(
        refused.to_string().contains("organization \"hog\""),
        "{refused}"
    );
    assert!(db.catalog().org_bytes("hog") <= (64 << 10) / 4);
    // Its creator's other organizations share what is left of that quarter: a
    // user with several organizations has one share, not one each.
    let mut second = 0;
    let refused = loop {
        match db.commit(vec![workspace("hog2", &format!("w{second}"))]) {
            Ok(_) => second += 1,
            Err(e) => break e,
        }
        assert!(second < 1000, "never refused");
    };
    assert!(second <= 1, "{second} more went in");
    assert!(
        refused.to_string().contains("organization \"hog2\""),
        "{refused}"
    );
    assert!(db.catalog().creator_bytes("hog3") <= (64 << 10) / 4);
    // Another user's organization still writes, and the hog can still delete.
    for i in 0..20 {
        db.commit(vec![workspace("bob", &format!("b{i}"))])?;
    }
    for i in 0..10 {
        db.commit(vec![Op::Catalog(CatalogOp::DeleteWorkspace {
            org_id: "hog".into(),
            workspace_id: format!("w{i}"),
        })])?;
    }
    assert!(db.catalog().workspace("hog", "w0").is_none());
    // What it deleted it may write again: the share is kept as a bound that deletes do
    // not lower, and measured exactly before a refusal.
    for i in 0..10 {
        db.commit(vec![workspace("hog", &format!("again{i}"))])?;
    }
    // Each user's bound stays above what their organizations really hold.
    let bounds = db.inner.share_bounds().clone();
    let catalog = db.catalog();
    for (user, org) in [("h", "hog"), ("b", "bob")] {
        let real = catalog.creator_bytes(org);
        assert!(bounds[user].bytes >= real, "{user}");
        assert!(!bounds[user].exact || bounds[user].bytes == real, "{user}");
    }
    Ok(())
}

#[test]
fn close_checkpoints_releases_the_lock_and_refuses_later_commits() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let db = Database::open(dir.path(), StorageOptions::default())?;
    keyed_setup(&db)?;
    insert_range(&db, 0, 10)?;
    db.close()?;
    assert!(matches!(insert_range(&db, 10, 20), Err(Error::Closed)));
    // The lock is free while the handle still exists, and nothing needs replaying.
    let again = Database::open(dir.path(), quiet())?;
    assert_eq!(values(&again)?, (0..10).collect::<Vec<_>>());
    assert!(
        store(&again)?
            .snapshot()
            .segments()
            .iter()
            .all(|s| !s.segment().in_memory())
    );
    Ok(())
}
