//! The commit path: validate, then log, then publish.
//!
//! 1. **Lock** what the commit changes, always in the same order (so commits never
//!    deadlock): the catalog commit lock when it changes the catalog, then the commit
//!    lock of every table it writes or drops, by id, then the gate (shared; a
//!    checkpoint's cut takes it exclusively).
//! 2. **Prepare** the next catalog and each table's next version from the published
//!    ones, on private copies. Everything that can fail fails here, before anything is
//!    logged: an op that does not apply, a reused row id, a key that does not encode, a
//!    record or catalog over its size limit.
//! 3. **Log** the ops as one WAL record (group commit; durable per the sync mode).
//! 4. **Publish**: pointer swaps under the publish lock, which cannot fail. Readers see
//!    all of a commit or none of it. Should publishing panic all the same (a bug), the
//!    database stops accepting writes ([`Error::Poisoned`]) rather than let memory and
//!    log diverge.
//!
//! The locks are held from prepare to publish, so what was validated is what is
//! published. Replay at open runs the same prepare and publish without the log.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tarn_catalog::{Catalog, CatalogOp, TableId};

use crate::record::{self, Op};
use crate::state::{Inner, catalog_size};
use crate::table::{KeyAdditions, TableStore, TableVersion};
use crate::wal::SyncMode;
use crate::{Error, Result};

/// The organizations one user creates may take at most `1 / ORG_SHARE` of the catalog
/// together.
const ORG_SHARE: u64 = 4;

/// What a catalog commit knows of one creator's share of the catalog (see
/// `Catalog::creator_bytes`) without walking it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShareBound {
    /// The share, or an upper bound of it.
    pub(crate) bytes: u64,
    /// Whether `bytes` is the share itself.
    pub(crate) exact: bool,
}

/// An upper bound of the bytes catalog `ops` add (their logged size).
fn ops_bytes(ops: &[Op]) -> u64 {
    ops.iter()
        .filter_map(|op| match op {
            Op::Catalog(c) => tarn_catalog::encoded_len(c).ok(),
            _ => None,
        })
        .sum()
}

/// The catalog a commit leads to.
struct NextCatalog {
    catalog: Arc<Catalog>,
    /// Encoded bytes the commit's catalog ops add (an upper bound of the growth).
    added_bytes: u64,
    created: Vec<TableId>,
    dropped: Vec<TableId>,
    /// Blobs of the file records the commit deletes.
    removed_blobs: Vec<String>,
}

/// A commit, prepared and ready to publish.
/// A table version a writer built by applying its own ops to `base` (a published
/// version): the commit publishes it instead of applying the ops again, when `base` is
/// still the published version. Saves rebuilding the memtable (copying every inserted
/// row a second time).
#[derive(Debug)]
pub struct BuiltVersion {
    /// The table.
    pub table: TableId,
    /// The published version the writer started from.
    pub base: Arc<TableVersion>,
    /// `base` with the commit's ops of this table applied.
    pub version: TableVersion,
}

struct Prepared {
    catalog: Option<NextCatalog>,
    created: Vec<Arc<TableStore>>,
    tables: Vec<(Arc<TableStore>, Arc<TableVersion>, KeyAdditions)>,
    /// Tables whose staged segments the commit attaches, and the segments.
    attached: Vec<(TableId, Arc<[u64]>)>,
}

fn table_of(op: &Op) -> Option<TableId> {
    match op {
        Op::Catalog(_) => None,
        Op::Insert { table, .. }
        | Op::Delete { table, .. }
        | Op::SetSequence { table, .. }
        | Op::Attach { table, .. } => Some(*table),
    }
}

impl Inner {
    /// Fails when the database is closed or stopped accepting writes.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.flags().closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if let Some(m) = self.poisoned() {
            return Err(Error::Poisoned(m));
        }
        Ok(())
    }

    pub(crate) fn commit(&self, ops: Vec<Op>, built: Vec<BuiltVersion>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        self.check_open()?;
        let record = match self.wal() {
            Some(_) => Some(record::encode(&ops)?),
            None => None,
        };
        let added: u64 = ops
            .iter()
            .map(|op| match op {
                Op::Insert { batch, .. } => batch.get_array_memory_size() as u64,
                _ => 0,
            })
            .sum();
        let changes_catalog = ops.iter().any(|op| matches!(op, Op::Catalog(_)));
        let blobs = {
            // 1. Lock.
            let _catalog_commit = changes_catalog.then(|| self.locks().catalog_commit.lock());
            let next = if changes_catalog {
                Some(self.next_catalog(&ops, true)?)
            } else {
                None
            };
            let mut ids: BTreeSet<TableId> = ops.iter().filter_map(table_of).collect();
            if let Some(n) = &next {
                ids.extend(n.dropped.iter().copied());
            }
            let stores: Vec<Arc<TableStore>> = {
                let tables = self.tables();
                ids.iter()
                    .filter_map(|id| tables.get(id).cloned())
                    .collect()
            };
            let _table_locks: Vec<_> = stores.iter().map(|s| s.commit_lock()).collect();
            // Callers hold the SQL writer locks that keep these tables alive; should a
            // table have been dropped meanwhile all the same, fail here, before the log
            // gets a record that replay could not apply.
            {
                let tables = self.tables();
                let gone = ids.iter().any(|id| {
                    let created = next.as_ref().is_some_and(|n| n.created.contains(id));
                    !created
                        && !tables
                            .get(id)
                            .is_some_and(|t| stores.iter().any(|s| Arc::ptr_eq(s, t)))
                });
                if gone {
                    return Err(Error::Internal(
                        "a table this commit writes was dropped meanwhile".into(),
                    ));
                }
            }
            let _gate = self.locks().gate.read();
            // `close` sets `closed` and then takes the gate: checked under it, no commit
            // can slip in after the closing checkpoint.
            self.check_open()?;
            // 2. Prepare.
            let stores: HashMap<TableId, Arc<TableStore>> =
                stores.iter().map(|s| (s.id(), s.clone())).collect();
            let prepared = self.prepare(&ops, next, stores, built, false)?;
            // 3. Log.
            if let (Some(wal), Some(record)) = (self.wal(), &record) {
                wal.append(record)?;
            }
            // 4. Publish.
            self.publish(prepared)?
        };
        // The deleted records' blobs go once the deletes are durable: now, when the log
        // was fsynced for this commit (or there is no log); outside the locks, so that a
        // workspace of many files does not hold up other commits while they go.
        if let Err(e) = self.blobs().remove(&blobs) {
            tracing::warn!("blobs of deleted files not removed (the next open will): {e}");
        }
        if self.wal().is_some() {
            let total = self
                .counters()
                .mem_estimate
                .fetch_add(added, Ordering::Relaxed)
                + added;
            // Over budget, or the commit dropped tables whose files only a checkpoint
            // deletes (their disk space comes back now, not at some later checkpoint).
            if total > self.options().memtable_bytes
                || self.flags().files_dropped.load(Ordering::Acquire)
            {
                if self.options().background {
                    self.wake_worker();
                } else {
                    // The statement is committed: its caller must not hear otherwise,
                    // whatever maintenance does (the next commit over budget tries
                    // again).
                    match catch_unwind(AssertUnwindSafe(|| self.maintain(false))) {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::warn!("checkpoint after a commit failed (will retry): {e}")
                        }
                        Err(_) => tracing::error!("checkpoint after a commit panicked"),
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies logged ops at open (no log, nothing else running).
    pub(crate) fn replay(&self, ops: &[Op]) -> Result<()> {
        let next = if ops.iter().any(|op| matches!(op, Op::Catalog(_))) {
            // Limits guard new input; what the log holds was accepted once. Nothing
            // else holds the catalog at open: changed in place, not copied per record
            // (a copy per record made opening quadratic in the records logged).
            let published = self.take_catalog();
            Some(self.apply_catalog_ops(published, ops, false)?)
        } else {
            None
        };
        let tables = self.tables().clone();
        let prepared = self.prepare(ops, next, tables, Vec::new(), true)?;
        // The blobs of files deleted here go with the sweep that follows replay.
        self.publish(prepared).map(drop)
    }

    /// The catalog after `ops`' catalog changes, on a copy of the published one
    /// (`limit`: refuse a catalog over [`MAX_CATALOG_BYTES`]).
    fn next_catalog(&self, ops: &[Op], limit: bool) -> Result<NextCatalog> {
        let published = self.catalog();
        self.apply_catalog_ops(published, ops, limit)
    }

    /// [`Inner::next_catalog`] from `catalog` (copied first if anyone else holds it).
    fn apply_catalog_ops(
        &self,
        mut catalog: Arc<Catalog>,
        ops: &[Op],
        limit: bool,
    ) -> Result<NextCatalog> {
        // No user's organizations may take more than their share (a quarter of the
        // limit, together): one tenant filling the catalog — through one organization
        // or several it creates — must not make every other tenant's writes fail. Only
        // growth is refused; an organization past its share can still delete.
        //
        // Measuring a share walks the catalog and encodes the creator's records (some
        // 64 MB at the share), and catalog commits are serialized: measured on every
        // write, one tenant near its share slowed every other's. So each creator's
        // share is kept (see `ShareBound`): exact while only records are added (each
        // added record's bytes are read, not walked), an upper bound once anything else
        // changed, and walked only when the bound says the share may be passed. Below a
        // quarter of the limit in all no share can be passed, and nothing is kept.
        let max = self.counters().max_catalog_bytes.load(Ordering::Relaxed);
        let share = max / ORG_SHARE;
        // Serialized once: the running size below adds the same figure.
        let added_bytes = ops_bytes(ops);
        let mut bounds = self.share_bounds();
        // Whether the ops only add records (or change nothing any share counts).
        let additions = ops.iter().all(|op| match op {
            Op::Catalog(c) => matches!(
                c,
                CatalogOp::CreateOrg(_)
                    | CatalogOp::CreateWorkspace(_)
                    | CatalogOp::CreateTable(_)
                    | CatalogOp::CreateIndex(_)
                    | CatalogOp::CreateView(_)
                    | CatalogOp::PutFile(_)
                    | CatalogOp::CreateUser(_)
                    | CatalogOp::RevokeApiKey { .. }
                    | CatalogOp::RecordKeyUses { .. }
            ),
            _ => true,
        });
        // The creators the ops grow: (creator, an organization of theirs they grow, a
        // bound of the growth, the share before the ops when walked).
        let mut growing: Vec<(String, String, u64, Option<u64>)> = Vec::new();
        // The creator each catalog op grows, in order (for the added records' bytes).
        let mut grows_creator: Vec<Option<String>> = Vec::new();
        let checked =
            limit && self.counters().catalog_bytes.load(Ordering::Relaxed) + added_bytes > share;
        if checked {
            let mut created = HashMap::new();
            for op in ops {
                let Op::Catalog(c) = op else { continue };
                let growth = catalog.growth_of(c, &created);
                grows_creator.push(growth.as_ref().map(|(creator, _)| creator.clone()));
                if let Some((creator, extra)) = growth {
                    match growing.iter_mut().find(|g| g.0 == creator) {
                        Some(g) => g.2 += extra,
                        None => {
                            let org = c.growing_org(&catalog).unwrap_or_default().to_string();
                            growing.push((creator, org, added_bytes + extra, None));
                        }
                    }
                }
                if let CatalogOp::CreateOrg(o) = c {
                    created.insert(o.id.clone(), o.creator.clone());
                }
            }
            // Creators without a bound yet are walked together, once.
            let missing: Vec<&str> = growing
                .iter()
                .filter(|g| !bounds.contains_key(&g.0))
                .map(|g| g.0.as_str())
                .collect();
            if !missing.is_empty() {
                for (c, bytes) in catalog.bytes_of_creators(&missing) {
                    bounds.insert(c, ShareBound { bytes, exact: true });
                }
            }
            for (creator, _, grows, before) in &mut growing {
                let b = bounds[creator.as_str()];
                // Added records are counted exactly after the ops; otherwise a bound
                // that may pass the share is walked (now and after the ops).
                if !(b.exact && additions) && b.bytes + *grows > share {
                    *before = Some(if b.exact {
                        b.bytes
                    } else {
                        catalog.bytes_of_creators(&[creator])[0].1
                    });
                }
            }
        } else {
            bounds.clear();
        }
        let catalog_mut = Arc::make_mut(&mut catalog);
        let mut created = Vec::new();
        let mut dropped = Vec::new();
        let mut removed_blobs = Vec::new();
        let mut grown: HashMap<String, u64> = HashMap::new();
        let mut grows_creator = grows_creator.into_iter();
        for op in ops {
            let Op::Catalog(c) = op else { continue };
            let creator = grows_creator.next().flatten();
            let removed = catalog_mut.apply(c)?;
            dropped.extend(removed.tables);
            removed_blobs.extend(removed.files);
            if let CatalogOp::CreateTable(t) = c {
                created.push(t.id);
            }
            if additions && let Some(creator) = creator {
                *grown.entry(creator).or_default() += catalog_mut.added_bytes(c).unwrap_or(0);
            }
        }
        let mut next: Vec<(String, ShareBound)> = Vec::new();
        for (creator, org, grows, before) in &growing {
            let b = bounds[creator.as_str()];
            // The share after the ops, and whether they grew it.
            let (after, grew) = match before {
                Some(before) => {
                    let after = catalog_mut.bytes_of_creators(&[creator])[0].1;
                    (after, after > *before)
                }
                None if b.exact && additions => {
                    let after = b.bytes + grown.get(creator).copied().unwrap_or(0);
                    (after, after > b.bytes)
                }
                // Within the share by the bound: not refused, and the bound grows.
                None => {
                    next.push((
                        creator.clone(),
                        ShareBound {
                            bytes: b.bytes + grows,
                            exact: false,
                        },
                    ));
                    continue;
                }
            };
            if after > share && grew {
                return Err(Error::TooLarge {
                    what: format!(
                        "organization \"{org}\"'s records in the catalog, with those of the \
                         other organizations its creator made (the organizations one user \
                         creates may use a quarter of it together)"
                    ),
                    size: after,
                    limit: share,
                });
            }
            next.push((
                creator.clone(),
                ShareBound {
                    bytes: after,
                    exact: true,
                },
            ));
        }
        if checked && !additions {
            // Something other than an added record changed: every share may have
            // shrunk, so each bound is an upper bound from here.
            for b in bounds.values_mut() {
                b.exact = false;
            }
        }
        bounds.extend(next);
        let bound = self.counters().catalog_bytes.load(Ordering::Relaxed) + added_bytes;
        if limit && bound > max {
            // The running figure only grows between checkpoints (deletes add to it
            // too): measure before refusing. Catalog commits are serialized, so the
            // exact figure can replace the bound.
            let size = catalog_size(catalog_mut)?;
            if size > max {
                return Err(Error::TooLarge {
                    what: "the catalog (table definitions, users, keys, file records…)".into(),
                    size,
                    limit: max,
                });
            }
            self.counters()
                .catalog_bytes
                .store(size.saturating_sub(added_bytes), Ordering::Relaxed);
        }
        Ok(NextCatalog {
            catalog,
            added_bytes,
            created,
            dropped,
            removed_blobs,
        })
    }

    /// Every table's next version, on private copies. `stores` holds the published
    /// tables the ops touch. `replay`: the ops come from the log at open (attached
    /// segments are opened from their files, not taken from the staged ones).
    fn prepare(
        &self,
        ops: &[Op],
        catalog: Option<NextCatalog>,
        mut stores: HashMap<TableId, Arc<TableStore>>,
        built: Vec<BuiltVersion>,
        replay: bool,
    ) -> Result<Prepared> {
        let mut built: HashMap<TableId, BuiltVersion> =
            built.into_iter().map(|b| (b.table, b)).collect();
        // A catalog change may touch table storage as it publishes: such commits apply
        // their ops here. Attached segments are opened here, not in the writer's version.
        if catalog.is_some() {
            built.clear();
        }
        for op in ops {
            if let Op::Attach { table, .. } = op {
                built.remove(table);
            }
        }
        let mut created = Vec::new();
        if let Some(c) = &catalog {
            for id in &c.created {
                let store = Arc::new(TableStore::new(*id));
                stores.insert(*id, store.clone());
                created.push(store);
            }
        }
        // Per table: its store, the version the commit's ops build on (the published
        // one; each op derives the next), and the keys for the memtable maps.
        let mut next: BTreeMap<TableId, (Arc<TableStore>, Arc<TableVersion>, KeyAdditions)> =
            BTreeMap::new();
        let mut attached = Vec::new();
        for op in ops {
            let Some(id) = table_of(op) else { continue };
            let (store, version, keys) = match next.entry(id) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let store = stores
                        .get(&id)
                        .cloned()
                        .ok_or_else(|| Error::Internal(format!("table {id} has no storage")))?;
                    let version = store.snapshot();
                    // The writer's version is what applying the ops would give when it
                    // built on the published version and no checkpoint froze the
                    // memtable since (its inserts may have merged into segments a
                    // checkpoint is now sealing). Any other is dropped: from here on,
                    // `built` holds the tables whose ops only add keys.
                    let current = built.get(&id).is_some_and(|b| {
                        Arc::ptr_eq(&b.base, &version)
                            && !version
                                .segments()
                                .iter()
                                .any(|s| s.segment().in_memory() && s.segment().is_frozen())
                    });
                    if !current {
                        built.remove(&id);
                    }
                    e.insert((store, version, KeyAdditions::default()))
                }
            };
            if built.contains_key(&id) {
                if let Op::Insert {
                    first_row_id,
                    batch,
                    ..
                } = op
                {
                    store.key_additions(keys, *first_row_id, batch)?;
                }
                continue;
            }
            let derived = match op {
                Op::Insert {
                    first_row_id,
                    batch,
                    ..
                } => {
                    store.key_additions(keys, *first_row_id, batch)?;
                    version.with_insert(*first_row_id, batch)?
                }
                Op::Delete { row_ids, .. } => version.with_delete(row_ids)?,
                Op::SetSequence { column, value, .. } => version.with_sequence(*column, *value),
                Op::Attach {
                    table,
                    segments,
                    rows,
                } => {
                    if !version.segments().is_empty() || version.next_row_id() != 0 {
                        return Err(Error::Internal(format!(
                            "segments attached to table {table}, which has rows"
                        )));
                    }
                    let segs = if replay {
                        self.open_attached(*table, segments)?
                    } else {
                        self.staging().claim(*table, segments)?
                    };
                    attached.push((*table, segments.clone()));
                    let n: u64 = segs.iter().map(|s| s.num_rows() as u64).sum();
                    if n != *rows {
                        return Err(Error::Internal(format!(
                            "table {table}: {n} rows in the attached segments, {rows} expected"
                        )));
                    }
                    TableVersion::from_parts(
                        crate::staging::attached_segments(segs),
                        *rows,
                        version.sequences().clone(),
                    )
                }
                Op::Catalog(_) => continue,
            };
            *version = Arc::new(derived);
        }
        for (id, (_, version, _)) in next.iter_mut() {
            if let Some(b) = built.remove(id) {
                *version = Arc::new(b.version);
            }
        }
        Ok(Prepared {
            catalog,
            created,
            tables: next.into_values().collect(),
            attached,
        })
    }

    /// The segment files a logged [`Op::Attach`] names, opened at replay.
    fn open_attached(&self, table: TableId, ids: &[u64]) -> Result<Vec<Arc<crate::Segment>>> {
        let dir = self
            .dir()
            .as_ref()
            .ok_or_else(|| Error::Internal("replay without a directory".into()))?
            .join(crate::layout::SEGMENTS_DIR);
        ids.iter()
            .map(|&id| {
                // Ids handed out after the manifest: later segments must not reuse them.
                self.counters()
                    .next_segment_id
                    .fetch_max(id + 1, Ordering::Relaxed);
                let path = dir.join(crate::layout::segment_file_name(table, id));
                crate::Segment::open(&path, table, id).map(Arc::new)
            })
            .collect()
    }

    /// Publishes a prepared commit: pointer swaps that cannot fail. New tables appear
    /// before the catalog that names them, dropped ones go after it, so a reader that
    /// finds a table in the catalog finds its rows. Returns the blobs of deleted files
    /// that may be removed at once (the log is fsynced at each commit, or there is
    /// none); with `SyncMode::Process` they wait for the next checkpoint instead.
    fn publish(&self, p: Prepared) -> Result<Vec<String>> {
        let res = catch_unwind(AssertUnwindSafe(|| {
            let mut blobs_now = Vec::new();
            // The memtable keys first, outside the publish lock (see `add_keys`).
            let tables: Vec<_> = p
                .tables
                .into_iter()
                .map(|(store, version, keys)| {
                    let sets = store.add_keys(keys);
                    (store, version, sets)
                })
                .collect();
            let _publish = self.locks().publish.write();
            #[cfg(test)]
            if tests::PANIC_IN_PUBLISH.swap(false, Ordering::SeqCst) {
                panic!("injected: publishing failed");
            }
            if !p.created.is_empty() {
                let mut map = self.tables_mut();
                for s in &p.created {
                    map.insert(s.id(), s.clone());
                }
            }
            for (store, version, sets) in tables {
                store.publish(version, sets.as_deref());
            }
            // After the tables: a checkpoint reads the staged ids before the tables.
            if !p.attached.is_empty() {
                let mut since = self.attached_since_cut();
                for (id, segments) in &p.attached {
                    // In memory there are no files to keep (and no checkpoint to
                    // empty the list).
                    if self.dir().is_some() {
                        since.extend(segments.iter().map(|s| (*id, *s)));
                    }
                    self.staging().published(*id);
                }
            }
            if let Some(c) = p.catalog {
                self.publish_catalog(c.catalog);
                self.counters()
                    .catalog_bytes
                    .fetch_add(c.added_bytes, Ordering::Relaxed);
                if !c.dropped.is_empty() {
                    let mut tables = self.tables_mut();
                    for id in &c.dropped {
                        // A dropped table with segment files: a checkpoint is due to
                        // delete them (see `files_dropped`).
                        if tables.remove(id).is_some_and(|t| {
                            t.snapshot()
                                .segments()
                                .iter()
                                .any(|s| !s.segment().in_memory())
                        }) {
                            self.flags().files_dropped.store(true, Ordering::Release);
                        }
                    }
                }
                if !c.removed_blobs.is_empty() {
                    if self.wal().is_none() || self.options().sync == SyncMode::Full {
                        blobs_now = c.removed_blobs;
                    } else {
                        self.drop_blobs_later(c.removed_blobs);
                        self.flags().files_dropped.store(true, Ordering::Release);
                    }
                }
            }
            blobs_now
        }));
        res.map_err(|panic| {
            let why = crate::untrusted::panic_message(panic.as_ref())
                .unwrap_or("a panic while publishing a commit")
                .to_string();
            self.poison(why.clone());
            Error::Poisoned(why)
        })
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
