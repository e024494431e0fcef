//! Tests of the commit path (`commit.rs`), through the database that runs it.

use std::sync::atomic::AtomicBool;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;

use super::*;
use crate::{Database, StorageOptions, SyncMode, stored_schema};

/// Makes the next publish panic, as a bug would.
pub(super) static PANIC_IN_PUBLISH: AtomicBool = AtomicBool::new(false);

fn insert(first: u64, v: i64) -> Op {
    let col: ArrayRef = Arc::new(Int64Array::from(vec![v]));
    Op::Insert {
        table: 1,
        first_row_id: first,
        batch: RecordBatch::try_new(stored_schema(&[(1, DataType::Int64, true)]), vec![col])
            .expect("batch"),
    }
}

/// A temporary directory and options without fsync or background maintenance.
fn scratch() -> Result<(tempfile::TempDir, StorageOptions)> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let options = StorageOptions {
        sync: SyncMode::Process,
        background: false,
        ..StorageOptions::default()
    };
    Ok((dir, options))
}

#[test]
fn a_logged_commit_that_fails_to_publish_stops_writes() -> Result<()> {
    let (dir, options) = scratch()?;
    {
        let db = Database::open(dir.path(), options.clone())?;
        let create = crate::database::tests::create_ops(vec![], vec![]);
        db.commit(create)?;
        db.commit(vec![insert(0, 10)])?;
        PANIC_IN_PUBLISH.store(true, Ordering::SeqCst);
        let err = db.commit(vec![insert(1, 20)]).unwrap_err();
        assert!(matches!(err, Error::Poisoned(_)), "{err}");
        // Memory lacks the logged commit: no further write may build on it.
        let err = db.commit(vec![insert(1, 30)]).unwrap_err();
        assert!(
            err.to_string().contains("stopped accepting writes"),
            "{err}"
        );
        assert_eq!(db.table(1).map(|t| t.snapshot().row_count()), Some(1));
    }
    // The log is the truth: reopened, the commit is there.
    let db = Database::open(dir.path(), options)?;
    assert_eq!(db.table(1).map(|t| t.snapshot().row_count()), Some(2));
    db.commit(vec![insert(2, 30)])?;
    Ok(())
}

#[test]
fn a_writers_version_is_published_only_if_its_base_is_current() -> Result<()> {
    let (dir, options) = scratch()?;
    let db = Database::open(dir.path(), options.clone())?;
    db.commit(crate::database::tests::create_ops(vec![], vec![]))?;
    db.commit(vec![insert(0, 10)])?;
    let store = db.table(1).expect("table");
    let built = |base: &Arc<TableVersion>, first: u64, v: i64| -> Result<BuiltVersion> {
        let Op::Insert { batch, .. } = insert(first, v) else {
            unreachable!()
        };
        Ok(BuiltVersion {
            table: 1,
            base: base.clone(),
            version: base.with_insert(first, &batch)?,
        })
    };
    let last_segment = |v: &TableVersion| v.segments().last().map(|s| s.segment().clone());
    // Built on the published version: published as it is (same segment objects).
    let base = store.snapshot();
    let b = built(&base, 1, 20)?;
    let mine = last_segment(&b.version).expect("segment");
    db.commit_built(vec![insert(1, 20)], vec![b])?;
    let now = store.snapshot();
    assert!(Arc::ptr_eq(&last_segment(&now).expect("segment"), &mine));
    assert_eq!(now.row_count(), 2);
    // Built on a version a checkpoint has since replaced: the ops are applied again.
    let stale = store.snapshot();
    let b = built(&stale, 2, 30)?;
    let mine = last_segment(&b.version).expect("segment");
    db.checkpoint()?;
    db.commit_built(vec![insert(2, 30)], vec![b])?;
    let now = store.snapshot();
    assert!(!Arc::ptr_eq(&last_segment(&now).expect("segment"), &mine));
    assert_eq!(now.row_count(), 3);
    drop(now);
    drop(db);
    let db = Database::open(dir.path(), options)?;
    assert_eq!(db.table(1).map(|t| t.snapshot().row_count()), Some(3));
    Ok(())
}
