//! The catalog: every record Tarn keeps about users, organizations, workspaces and
//! tables, changed only by [`CatalogOp`](crate::CatalogOp)s. The records and their
//! lookups are by kind: `tenancy.rs`, `schema.rs`, `files.rs`; the changes, `ops.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::files::WorkspaceFiles;
use crate::{
    ApiKeyRecord, CatalogOp, FileRecord, IndexDef, IndexId, OrgRecord, Role, TableDef, TableId,
    UserRecord, ViewDef, ViewId, WorkspaceRecord,
};

/// Every catalog record, indexed for the lookups Tarn makes.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub(crate) users: BTreeMap<String, UserRecord>,
    pub(crate) users_by_email: HashMap<String, String>,
    pub(crate) api_keys: BTreeMap<String, ApiKeyRecord>,
    pub(crate) keys_by_hash: HashMap<String, String>,
    pub(crate) orgs: BTreeMap<String, OrgRecord>,
    pub(crate) members: BTreeMap<(String, String), Role>,
    pub(crate) workspaces: BTreeMap<(String, String), WorkspaceRecord>,
    /// Behind an `Arc` each, so that the copy a catalog write makes (`Arc::make_mut` of
    /// the published catalog) copies pointers, not every column of every table: an
    /// organization with thousands of wide tables had made every other one's CREATE
    /// TABLE 10–100× slower.
    pub(crate) tables: BTreeMap<TableId, Arc<TableDef>>,
    pub(crate) table_names: HashMap<(String, String, String), TableId>,
    pub(crate) next_table_id: TableId,
    pub(crate) indexes: BTreeMap<IndexId, IndexDef>,
    /// (organization, workspace, index name) → index id.
    pub(crate) index_names: HashMap<(String, String, String), IndexId>,
    pub(crate) next_index_id: IndexId,
    /// Behind an `Arc` each, as tables are.
    pub(crate) views: BTreeMap<ViewId, Arc<ViewDef>>,
    /// (organization, workspace, view name) → view id.
    pub(crate) view_names: HashMap<(String, String, String), ViewId>,
    pub(crate) next_view_id: ViewId,
    /// (organization, workspace) → its files.
    pub(crate) files: BTreeMap<(String, String), Arc<WorkspaceFiles>>,
    pub(crate) next_file_seq: u64,
}

/// Every record of a catalog in a serializable form, for checkpoints: the lookup
/// indexes are rebuilt on load.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CatalogSnapshot {
    pub(crate) users: Vec<UserRecord>,
    pub(crate) api_keys: Vec<ApiKeyRecord>,
    pub(crate) orgs: Vec<OrgRecord>,
    pub(crate) members: Vec<(String, String, Role)>,
    pub(crate) workspaces: Vec<WorkspaceRecord>,
    pub(crate) tables: Vec<TableDef>,
    pub(crate) next_table_id: TableId,
    #[serde(default)]
    pub(crate) indexes: Vec<IndexDef>,
    #[serde(default)]
    pub(crate) next_index_id: IndexId,
    #[serde(default)]
    pub(crate) files: Vec<FileRecord>,
    #[serde(default)]
    pub(crate) next_file_seq: u64,
    // Left out when empty, so a catalog without views writes the bytes it always did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) views: Vec<ViewDef>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) next_view_id: ViewId,
}

fn is_zero(n: &ViewId) -> bool {
    *n == 0
}

impl Catalog {
    /// The catalog's records, for a checkpoint.
    pub fn snapshot(&self) -> CatalogSnapshot {
        CatalogSnapshot {
            users: self.users.values().cloned().collect(),
            api_keys: self.api_keys.values().cloned().collect(),
            orgs: self.orgs.values().cloned().collect(),
            members: self
                .members
                .iter()
                .map(|((o, u), r)| (o.clone(), u.clone(), *r))
                .collect(),
            workspaces: self.workspaces.values().cloned().collect(),
            tables: self.tables.values().map(|t| TableDef::clone(t)).collect(),
            next_table_id: self.next_table_id,
            indexes: self.indexes.values().cloned().collect(),
            next_index_id: self.next_index_id,
            files: self
                .files
                .values()
                .flat_map(|w| w.newest_first().map(|f| FileRecord::clone(f)))
                .collect(),
            next_file_seq: self.next_file_seq,
            views: self.views.values().map(|v| ViewDef::clone(v)).collect(),
            next_view_id: if self.views.is_empty() && self.next_view_id <= 1 {
                0
            } else {
                self.next_view_id
            },
        }
    }

    /// Bytes organization `org`'s records take in a checkpoint (its record, members and
    /// the users it invited who have no key yet, workspaces, tables, indexes and file
    /// records), as JSON: its share of the catalog. Walks them all: called only when the
    /// catalog is large enough for one organization to matter.
    pub fn org_bytes(&self, org: &str) -> u64 {
        self.bytes_by_group(|o| (o == org).then_some(0), 1)[0]
    }

    /// [`Catalog::org_bytes`] of every organization created by the user who created
    /// `org` (`org` included), together: what one user may add to the catalog through
    /// the organizations they make is their share, not one share per organization.
    pub fn creator_bytes(&self, org: &str) -> u64 {
        match self.orgs.get(org) {
            Some(o) => self.bytes_of_creators(&[o.creator.as_str()])[0].1,
            None => self.org_bytes(org),
        }
    }

    /// The shares of `creators` (user ids, see [`Catalog::creator_bytes`]), in one walk
    /// of the catalog, in their order.
    pub fn bytes_of_creators(&self, creators: &[&str]) -> Vec<(String, u64)> {
        let of_org: HashMap<&str, usize> = self
            .orgs
            .values()
            .filter_map(|o| {
                creators
                    .iter()
                    .position(|c| *c == o.creator)
                    .map(|i| (o.id.as_str(), i))
            })
            .collect();
        let sums = self.bytes_by_group(|o| of_org.get(o).copied(), creators.len());
        creators.iter().map(|c| c.to_string()).zip(sums).collect()
    }

    /// The creator whose share (see [`Catalog::creator_bytes`]) `op` may grow, and the
    /// bytes it may add to that share beyond what the op itself logs: a member added
    /// who is an invited user brings the user's record into the share. `created`: the
    /// organizations that ops before `op` in the same commit create, with their
    /// creators (they are not in this catalog yet).
    pub fn growth_of(
        &self,
        op: &CatalogOp,
        created: &HashMap<String, String>,
    ) -> Option<(String, u64)> {
        let org = op.growing_org(self)?;
        let creator = match op {
            CatalogOp::CreateOrg(o) => o.creator.clone(),
            _ => self
                .orgs
                .get(org)
                .map(|o| o.creator.clone())
                .or_else(|| created.get(org).cloned())?,
        };
        let extra = match op {
            CatalogOp::PutMember(m) => self
                .users
                .get(&m.user_id)
                .filter(|u| !u.verified)
                .map_or(0, json_len),
            _ => 0,
        };
        Some((creator, extra))
    }

    /// What `op`, applied to this catalog, added to its organization's share (see
    /// [`Catalog::org_bytes`]), if it only adds a record (a new organization,
    /// workspace, table, index, view or file): the stored record's bytes, read from
    /// this catalog without walking it. `None` for every other op, whose effect on a
    /// share needs a walk to know.
    pub fn added_bytes(&self, op: &CatalogOp) -> Option<u64> {
        match op {
            CatalogOp::CreateOrg(o) => self.orgs.get(&o.id).map(json_len),
            CatalogOp::CreateWorkspace(w) => self.workspace(&w.org_id, &w.id).map(json_len),
            CatalogOp::CreateTable(t) => self.tables.get(&t.id).map(json_len),
            CatalogOp::CreateIndex(i) => self.indexes.get(&i.id).map(json_len),
            CatalogOp::CreateView(v) => self.views.get(&v.id).map(json_len),
            CatalogOp::PutFile(f) => self.file(&f.org_id, &f.workspace_id, &f.id).map(json_len),
            _ => None,
        }
    }

    /// [`Catalog::org_bytes`] summed into `groups` sums, each organization into the sum
    /// `group_of` names (none: not counted), in one pass over each map: the cost is
    /// linear in the catalog, not organizations × tables.
    fn bytes_by_group(&self, group_of: impl Fn(&str) -> Option<usize>, groups: usize) -> Vec<u64> {
        let mut n = vec![0u64; groups];
        for o in self.orgs.values() {
            if let Some(g) = group_of(&o.id) {
                n[g] += json_len(o);
            }
        }
        for (o, u) in self.members.keys() {
            let Some(g) = group_of(o) else { continue };
            n[g] += (o.len() + u.len() + 16) as u64;
            if let Some(u) = self.users.get(u)
                && !u.verified
            {
                n[g] += json_len(u);
            }
        }
        for ((o, _), w) in &self.workspaces {
            if let Some(g) = group_of(o) {
                n[g] += json_len(w);
            }
        }
        let mut tables: HashMap<TableId, usize> = HashMap::new();
        for t in self.tables.values() {
            if let Some(g) = group_of(&t.org_id) {
                n[g] += json_len(t);
                tables.insert(t.id, g);
            }
        }
        for i in self.indexes.values() {
            if let Some(&g) = tables.get(&i.table_id) {
                n[g] += json_len(i);
            }
        }
        for v in self.views.values() {
            if let Some(g) = group_of(&v.org_id) {
                n[g] += json_len(v);
            }
        }
        for ((o, _), files) in &self.files {
            if let Some(g) = group_of(o) {
                n[g] += files
                    .newest_first()
                    .map(|f| json_len(f.as_ref()))
                    .sum::<u64>();
            }
        }
        n
    }

    /// How many of the organizations there are user `id` created.
    pub fn orgs_created_by(&self, id: &str) -> usize {
        self.orgs.values().filter(|o| o.creator == id).count()
    }

    /// Deletes those of `users` that have no API key and no organization left: an
    /// invitation withdrawn. Invited users count toward the organizations that invited
    /// them (see [`Catalog::org_bytes`]); one left in none would count toward no one,
    /// so an organization could invite and remove users without end, growing the
    /// catalog that every organization shares.
    pub(crate) fn forget_orphaned_invites(&mut self, mut users: Vec<String>) {
        users.retain(|id| self.users.get(id).is_some_and(|u| !u.verified));
        if users.is_empty() {
            return;
        }
        let kept: std::collections::HashSet<&str> = self
            .members
            .keys()
            .map(|(_, u)| u.as_str())
            .chain(self.api_keys.values().map(|k| k.user_id.as_str()))
            .collect();
        users.retain(|id| !kept.contains(id.as_str()));
        for id in users {
            if let Some(u) = self.users.remove(&id) {
                self.users_by_email.remove(&u.email);
            }
        }
    }

    /// Rebuilds a catalog from a checkpoint's records.
    pub fn from_snapshot(s: CatalogSnapshot) -> Self {
        let mut c = Catalog::new();
        for u in s.users {
            c.users_by_email.insert(u.email.clone(), u.id.clone());
            c.users.insert(u.id.clone(), u);
        }
        for k in s.api_keys {
            c.keys_by_hash.insert(k.hash.clone(), k.id.clone());
            c.api_keys.insert(k.id.clone(), k);
        }
        for o in s.orgs {
            c.orgs.insert(o.id.clone(), o);
        }
        for (o, u, r) in s.members {
            c.members.insert((o, u), r);
        }
        for w in s.workspaces {
            c.workspaces.insert((w.org_id.clone(), w.id.clone()), w);
        }
        for t in s.tables {
            c.table_names.insert(
                (t.org_id.clone(), t.workspace_id.clone(), t.name.clone()),
                t.id,
            );
            c.tables.insert(t.id, Arc::new(t));
        }
        c.next_table_id = s.next_table_id.max(1);
        for i in s.indexes {
            if let Some(t) = c.tables.get(&i.table_id) {
                c.index_names.insert(
                    (t.org_id.clone(), t.workspace_id.clone(), i.name.clone()),
                    i.id,
                );
            }
            c.indexes.insert(i.id, i);
        }
        c.next_index_id = s.next_index_id.max(1);
        for v in s.views {
            c.insert_view(v);
        }
        c.next_view_id = c.next_view_id.max(s.next_view_id).max(1);
        for f in s.files {
            c.insert_file(f);
        }
        c.next_file_seq = c.next_file_seq.max(s.next_file_seq);
        c
    }

    /// An empty catalog.
    pub fn new() -> Self {
        Self {
            next_table_id: 1,
            next_index_id: 1,
            next_view_id: 1,
            ..Default::default()
        }
    }
}

/// Serialized length of a record, for [`Catalog::org_bytes`].
pub(crate) fn json_len<T: Serialize>(v: &T) -> u64 {
    encoded_len(v).unwrap_or(0)
}

/// The length of `v`'s JSON text, counted as it is written, not built: shares, ops and
/// whole catalogs are measured this way, and building the text allocated all of it.
pub fn encoded_len<T: Serialize + ?Sized>(v: &T) -> serde_json::Result<u64> {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len() as u64;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    serde_json::to_writer(&mut n, v).map(|()| n.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        CatalogOp, ColumnDef, ColumnId, IndexType, Result, SqlType, Timestamp, ViewDef, ViewId,
    };

    fn org(id: &str) -> CatalogOp {
        CatalogOp::CreateOrg(OrgRecord {
            id: id.into(),
            name: id.into(),
            creator: "u".into(),
            created_at: Timestamp::from_unix_seconds(1_767_225_600),
        })
    }

    fn table(id: TableId, org: &str, ws: &str, name: &str) -> TableDef {
        TableDef {
            id,
            org_id: org.into(),
            workspace_id: ws.into(),
            name: name.into(),
            engine: true,
            columns: vec![],
            next_column_id: 1,
            unique_constraints: vec![],
            created_at: Timestamp::default(),
        }
    }

    fn ws(org: &str, id: &str) -> CatalogOp {
        CatalogOp::CreateWorkspace(WorkspaceRecord {
            id: id.into(),
            org_id: org.into(),
            name: id.into(),
            created_at: Timestamp::default(),
            uid: String::new(),
        })
    }

    #[test]
    fn delete_org_cascades_to_tables() -> Result<()> {
        let mut c = Catalog::new();
        c.apply(&org("a"))?;
        c.apply(&org("b"))?;
        c.apply(&ws("a", "docs"))?;
        c.apply(&ws("b", "docs"))?;
        c.apply(&CatalogOp::CreateTable(table(1, "a", "docs", "t")))?;
        c.apply(&CatalogOp::CreateTable(table(2, "b", "docs", "t")))?;
        assert!(
            c.apply(&CatalogOp::CreateTable(table(3, "a", "docs", "t")))
                .is_err()
        );
        let dropped = c.apply(&CatalogOp::DeleteOrg { org_id: "a".into() })?;
        assert_eq!(dropped.tables, vec![1]);
        assert!(c.table("a", "docs", "t").is_none());
        assert_eq!(c.table("b", "docs", "t").map(|t| t.id), Some(2));
        assert_eq!(c.next_table_id(), 3);
        Ok(())
    }

    fn index(id: IndexId, table_id: TableId, name: &str, column: ColumnId) -> CatalogOp {
        CatalogOp::CreateIndex(IndexDef {
            id,
            name: name.into(),
            table_id,
            column,
            index_type: IndexType::ExactText,
            options: BTreeMap::new(),
            created_at: Timestamp::default(),
        })
    }

    fn table_with_columns(id: TableId, name: &str) -> TableDef {
        let col = |id: ColumnId, name: &str| ColumnDef::plain(id, name, SqlType::Text);
        TableDef {
            columns: vec![col(1, "a"), col(2, "b")],
            next_column_id: 3,
            unique_constraints: vec![(format!("{name}_a_key"), vec![1])],
            ..table(id, "o", "w", name)
        }
    }

    #[test]
    fn indexes_share_the_relation_namespace_and_follow_their_table() -> Result<()> {
        let mut c = Catalog::new();
        c.apply(&org("o"))?;
        c.apply(&ws("o", "w"))?;
        c.apply(&CatalogOp::CreateTable(table_with_columns(1, "t")))?;
        c.apply(&index(1, 1, "t_b_idx", 2))?;
        assert_eq!(c.index("o", "w", "t_b_idx").map(|i| i.column), Some(2));
        assert_eq!(c.next_index_id(), 2);
        assert_eq!(
            c.key_column_sets(1),
            vec![(vec![1], true), (vec![2], false)]
        );
        // Names clash with tables and indexes alike.
        for clash in [index(2, 1, "t", 1), index(2, 1, "t_b_idx", 1)] {
            let err = c.apply(&clash).map(|_| ()).unwrap_err().to_string();
            assert!(err.ends_with("already exists"), "{err}");
        }
        assert!(
            c.apply(&CatalogOp::CreateTable(table(2, "o", "w", "t_b_idx")))
                .is_err()
        );
        // Dropping the indexed column drops the index.
        let mut narrower = table_with_columns(1, "t");
        narrower.columns.retain(|col| col.id != 2);
        c.apply(&CatalogOp::ReplaceTable(narrower))?;
        assert!(c.index("o", "w", "t_b_idx").is_none());
        assert_eq!(c.key_column_sets(1), vec![(vec![1], true)]);
        // Dropping the table drops its indexes; a name is free again afterwards.
        c.apply(&index(3, 1, "t_a_idx", 1))?;
        c.apply(&CatalogOp::DropTable { table_id: 1 })?;
        assert!(c.index("o", "w", "t_a_idx").is_none());
        assert!(c.indexes_of(1).is_empty());
        c.apply(&CatalogOp::CreateTable(table(2, "o", "w", "t_a_idx")))?;
        // So does deleting the workspace.
        c.apply(&CatalogOp::CreateTable(table_with_columns(3, "u")))?;
        c.apply(&index(4, 3, "u_idx", 2))?;
        c.apply(&CatalogOp::DeleteWorkspace {
            org_id: "o".into(),
            workspace_id: "w".into(),
        })?;
        assert!(c.index_by_id(4).is_none());
        assert_eq!(c.next_index_id(), 5);
        Ok(())
    }

    fn view(id: ViewId, ws: &str, name: &str, tables: &[TableId], views: &[ViewId]) -> ViewDef {
        ViewDef {
            id,
            org_id: "o".into(),
            workspace_id: ws.into(),
            name: name.into(),
            sql: "SELECT 1".into(),
            columns: vec![],
            source_names: None,
            tables: tables.to_vec(),
            views: views.to_vec(),
            created_at: Timestamp::default(),
        }
    }

    #[test]
    fn views_share_the_namespace_follow_what_they_read_and_survive_a_snapshot() -> Result<()> {
        let mut c = Catalog::new();
        c.apply(&org("o"))?;
        c.apply(&ws("o", "w"))?;
        c.apply(&ws("o", "x"))?;
        c.apply(&CatalogOp::CreateTable(table_with_columns(1, "t")))?;
        c.apply(&CatalogOp::CreateView(view(1, "w", "v", &[1], &[])))?;
        c.apply(&CatalogOp::CreateView(view(2, "x", "vv", &[], &[1])))?;
        assert_eq!(c.next_view_id(), 3);
        assert!(c.relation_exists("o", "w", "v"));
        // One namespace: tables, indexes and views.
        for clash in [
            CatalogOp::CreateTable(table(2, "o", "w", "v")),
            CatalogOp::CreateView(view(3, "w", "t", &[1], &[])),
            index(1, 1, "v", 1),
        ] {
            let err = c.apply(&clash).map(|_| ()).unwrap_err().to_string();
            assert!(err.ends_with("already exists"), "{err}");
        }
        // A view never reads what is missing, nor itself.
        assert!(
            c.apply(&CatalogOp::CreateView(view(3, "w", "m", &[9], &[])))
                .is_err()
        );
        assert!(
            c.apply(&CatalogOp::ReplaceView(view(1, "w", "v", &[1], &[2])))
                .is_err()
        );
        assert_eq!(c.dependent_views(&[1], &[]), vec![2, 1]);
        assert_eq!(
            (c.view_depth(2), c.view_height(1), c.view_height(2)),
            (2, 1, 0)
        );
        // Through a checkpoint.
        let back = Catalog::from_snapshot(
            serde_json::from_slice(&serde_json::to_vec(&c.snapshot()).unwrap()).unwrap(),
        );
        assert_eq!(back.view("o", "x", "vv"), c.view("o", "x", "vv"));
        assert_eq!(back.next_view_id(), 3);
        // Renames keep the id; dropping the table takes its readers along.
        c.apply(&CatalogOp::RenameView {
            view_id: 1,
            name: "v2".into(),
        })?;
        assert!(c.view("o", "w", "v").is_none());
        assert_eq!(c.view("o", "w", "v2").map(|v| v.id), Some(1));
        c.apply(&CatalogOp::DropTable { table_id: 1 })?;
        assert!(c.view_by_id(1).is_none() && c.view_by_id(2).is_none());
        // Deleting a workspace drops the views of other workspaces that read it.
        c.apply(&CatalogOp::CreateTable(table_with_columns(3, "u")))?;
        c.apply(&CatalogOp::CreateView(view(4, "x", "reads_w", &[3], &[])))?;
        c.apply(&CatalogOp::DeleteWorkspace {
            org_id: "o".into(),
            workspace_id: "w".into(),
        })?;
        assert!(c.views_of("o", "x").is_empty());
        // A catalog that never had a view writes no view fields.
        let plain = serde_json::to_string(&Catalog::new().snapshot()).unwrap();
        assert!(!plain.contains("view"), "{plain}");
        Ok(())
    }

    #[test]
    fn index_ops_round_trip_as_json() -> Result<(), serde_json::Error> {
        let op = index(7, 1, "docs_title_idx", 2);
        let json = serde_json::to_string(&op)?;
        assert!(json.contains("\"index_type\":\"exact_text\""), "{json}");
        assert_eq!(serde_json::from_str::<CatalogOp>(&json)?, op);
        let drop: CatalogOp = serde_json::from_str(r#"{"DropIndex":{"index_id":7}}"#)?;
        assert_eq!(drop, CatalogOp::DropIndex { index_id: 7 });
        // Options are optional in the log.
        let bare: IndexDef = serde_json::from_str(
            r#"{"id":1,"name":"i","table_id":1,"column":1,"index_type":"exact_text","created_at":""}"#,
        )?;
        assert!(bare.options.is_empty());
        Ok(())
    }

    #[test]
    fn rename_table_moves_name() -> Result<()> {
        let mut c = Catalog::new();
        c.apply(&org("a"))?;
        c.apply(&ws("a", "w"))?;
        c.apply(&CatalogOp::CreateTable(table(1, "a", "w", "t")))?;
        c.apply(&CatalogOp::ReplaceTable(table(1, "a", "w", "u")))?;
        assert!(c.table("a", "w", "t").is_none());
        assert_eq!(c.table("a", "w", "u").map(|t| t.id), Some(1));
        Ok(())
    }
}
