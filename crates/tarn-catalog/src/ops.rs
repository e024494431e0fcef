//! [`CatalogOp`]: every change of the catalog, and [`Catalog::apply`], the one place
//! that makes it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{
    ApiKeyRecord, Catalog, Error, FileRecord, IndexDef, IndexId, MemberRecord, OrgRecord, Result,
    TableDef, TableId, Timestamp, UserRecord, ViewDef, ViewId, WorkspaceRecord,
};

/// One change to the catalog. Ops are validated before they are logged, so applying a
/// logged op to the catalog it was validated against cannot fail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CatalogOp {
    /// Add a user.
    CreateUser(UserRecord),
    /// Mark a user verified.
    VerifyUser {
        /// User id.
        user_id: String,
    },
    /// Add an API key.
    CreateApiKey(ApiKeyRecord),
    /// Revoke an API key.
    RevokeApiKey {
        /// Key id.
        key_id: String,
    },
    /// Record when API keys were last used (by key id; stored as Unix seconds). A key that no
    /// longer exists is skipped: uses are advisory and never fail a commit.
    RecordKeyUses {
        /// (key id, when).
        uses: Vec<(String, Timestamp)>,
    },
    /// Add an organization.
    CreateOrg(OrgRecord),
    /// Rename an organization.
    RenameOrg {
        /// Organization id.
        org_id: String,
        /// New name.
        name: String,
    },
    /// Delete an organization with its members, workspaces and tables.
    DeleteOrg {
        /// Organization id.
        org_id: String,
    },
    /// Add a member or change a member's role.
    PutMember(MemberRecord),
    /// Remove a member.
    RemoveMember {
        /// Organization id.
        org_id: String,
        /// User id.
        user_id: String,
    },
    /// Add a workspace.
    CreateWorkspace(WorkspaceRecord),
    /// Rename a workspace.
    RenameWorkspace {
        /// Organization id.
        org_id: String,
        /// Workspace id.
        workspace_id: String,
        /// New name.
        name: String,
    },
    /// Delete a workspace and its tables.
    DeleteWorkspace {
        /// Organization id.
        org_id: String,
        /// Workspace id.
        workspace_id: String,
    },
    /// Add a table.
    CreateTable(TableDef),
    /// Replace a table's definition (ALTER TABLE, vector dimension fixed).
    ReplaceTable(TableDef),
    /// Drop a table (and its indexes).
    DropTable {
        /// Table id.
        table_id: TableId,
    },
    /// Add an index.
    CreateIndex(IndexDef),
    /// Drop an index.
    DropIndex {
        /// Index id.
        index_id: IndexId,
    },
    /// Add a view.
    CreateView(ViewDef),
    /// Replace a view's definition (`CREATE OR REPLACE VIEW`; same id and name).
    ReplaceView(ViewDef),
    /// Rename a view.
    RenameView {
        /// View id.
        view_id: ViewId,
        /// New name.
        name: String,
    },
    /// Drop a view. Views that read it are dropped by ops of their own before it.
    DropView {
        /// View id.
        view_id: ViewId,
    },
    /// Add a workspace file's record (its blob is already durable).
    PutFile(FileRecord),
    /// Delete a workspace file's record (its blob is removed once this is durable).
    DeleteFile {
        /// Organization id.
        org_id: String,
        /// Workspace id.
        workspace_id: String,
        /// File id.
        file_id: String,
    },
}

impl CatalogOp {
    /// The organization whose records this op adds to or changes, when it names one
    /// (or names a table that `catalog` places in one): what its share of the catalog
    /// is checked against. Deletes, users and keys name none.
    pub fn growing_org<'a>(&'a self, catalog: &'a Catalog) -> Option<&'a str> {
        match self {
            CatalogOp::CreateOrg(o) => Some(&o.id),
            CatalogOp::RenameOrg { org_id, .. } | CatalogOp::RenameWorkspace { org_id, .. } => {
                Some(org_id)
            }
            CatalogOp::PutMember(m) => Some(&m.org_id),
            CatalogOp::CreateWorkspace(w) => Some(&w.org_id),
            CatalogOp::CreateTable(t) | CatalogOp::ReplaceTable(t) => Some(&t.org_id),
            CatalogOp::CreateIndex(i) => catalog.table_by_id(i.table_id).map(|t| t.org_id.as_str()),
            CatalogOp::PutFile(f) => Some(&f.org_id),
            CatalogOp::CreateView(v) | CatalogOp::ReplaceView(v) => Some(&v.org_id),
            CatalogOp::RenameView { view_id, .. } => {
                catalog.view_by_id(*view_id).map(|v| v.org_id.as_str())
            }
            _ => None,
        }
    }
}

/// What a [`CatalogOp`] removed, for storage to drop: tables (their rows and index
/// files) and workspace files (their bytes).
#[derive(Debug, Default, PartialEq)]
pub struct Removed {
    /// Dropped tables.
    pub tables: Vec<TableId>,
    /// Ids of deleted files.
    pub files: Vec<String>,
}

impl Catalog {
    /// Applies one op. Returns the tables and files the op removed, so storage can
    /// drop their data.
    pub fn apply(&mut self, op: &CatalogOp) -> Result<Removed> {
        let missing = |what: &str| Error::Inconsistent(format!("{what} does not exist"));
        match op {
            CatalogOp::CreateUser(u) => {
                if self.users.contains_key(&u.id) || self.users_by_email.contains_key(&u.email) {
                    return Err(Error::AlreadyExists(format!("user \"{}\"", u.email)));
                }
                self.users_by_email.insert(u.email.clone(), u.id.clone());
                self.users.insert(u.id.clone(), u.clone());
            }
            CatalogOp::VerifyUser { user_id } => {
                self.users
                    .get_mut(user_id)
                    .ok_or_else(|| missing("user"))?
                    .verified = true;
            }
            CatalogOp::CreateApiKey(k) => {
                if !self.users.contains_key(&k.user_id) {
                    return Err(missing("user"));
                }
                self.keys_by_hash.insert(k.hash.clone(), k.id.clone());
                self.api_keys.insert(k.id.clone(), k.clone());
            }
            CatalogOp::RevokeApiKey { key_id } => {
                let key = self
                    .api_keys
                    .get_mut(key_id)
                    .ok_or_else(|| missing("key"))?;
                key.revoked = true;
                self.keys_by_hash.remove(&key.hash);
            }
            CatalogOp::RecordKeyUses { uses } => {
                for (id, at) in uses {
                    if let Some(key) = self.api_keys.get_mut(id) {
                        key.last_used = key.last_used.max(Some(*at));
                    }
                }
            }
            CatalogOp::CreateOrg(o) => {
                if self.orgs.contains_key(&o.id) {
                    return Err(Error::AlreadyExists(format!(
                        "organization \"{}\" already exists",
                        o.id
                    )));
                }
                self.orgs.insert(o.id.clone(), o.clone());
            }
            CatalogOp::RenameOrg { org_id, name } => {
                self.orgs
                    .get_mut(org_id)
                    .ok_or_else(|| missing("organization"))?
                    .name = name.clone();
            }
            CatalogOp::DeleteOrg { org_id } => {
                self.orgs
                    .remove(org_id)
                    .ok_or_else(|| missing("organization"))?;
                let members: Vec<String> = self
                    .members
                    .keys()
                    .filter(|(o, _)| o == org_id)
                    .map(|(_, u)| u.clone())
                    .collect();
                self.members.retain(|(o, _), _| o != org_id);
                self.forget_orphaned_invites(members);
                self.workspaces.retain(|(o, _), _| o != org_id);
                self.remove_views(|v| v.org_id == *org_id);
                let mut files = Vec::new();
                self.files.retain(|(o, _), w| {
                    let keep = o != org_id;
                    if !keep {
                        files.extend(w.ids().cloned());
                    }
                    keep
                });
                let tables = self.remove_tables(|t| t.org_id == *org_id);
                self.remove_dangling_views();
                return Ok(Removed { tables, files });
            }
            CatalogOp::PutMember(m) => {
                if !self.orgs.contains_key(&m.org_id) || !self.users.contains_key(&m.user_id) {
                    return Err(missing("organization or user"));
                }
                self.members
                    .insert((m.org_id.clone(), m.user_id.clone()), m.role);
            }
            CatalogOp::RemoveMember { org_id, user_id } => {
                self.members
                    .remove(&(org_id.clone(), user_id.clone()))
                    .ok_or_else(|| missing("member"))?;
                self.forget_orphaned_invites(vec![user_id.clone()]);
            }
            CatalogOp::CreateWorkspace(w) => {
                let key = (w.org_id.clone(), w.id.clone());
                if !self.orgs.contains_key(&w.org_id) {
                    return Err(missing("organization"));
                }
                if self.workspaces.contains_key(&key) {
                    return Err(Error::AlreadyExists(format!(
                        "workspace \"{}\" already exists",
                        w.id
                    )));
                }
                self.workspaces.insert(key, w.clone());
            }
            CatalogOp::RenameWorkspace {
                org_id,
                workspace_id,
                name,
            } => {
                self.workspaces
                    .get_mut(&(org_id.clone(), workspace_id.clone()))
                    .ok_or_else(|| missing("workspace"))?
                    .name = name.clone();
            }
            CatalogOp::DeleteWorkspace {
                org_id,
                workspace_id,
            } => {
                self.workspaces
                    .remove(&(org_id.clone(), workspace_id.clone()))
                    .ok_or_else(|| missing("workspace"))?;
                self.remove_views(|v| v.org_id == *org_id && v.workspace_id == *workspace_id);
                let files = self
                    .files
                    .remove(&(org_id.clone(), workspace_id.clone()))
                    .map(|w| w.ids().cloned().collect())
                    .unwrap_or_default();
                let tables =
                    self.remove_tables(|t| t.org_id == *org_id && t.workspace_id == *workspace_id);
                // Views of other workspaces that read its tables or views go too.
                self.remove_dangling_views();
                return Ok(Removed { tables, files });
            }
            CatalogOp::CreateTable(t) => {
                let key = (t.org_id.clone(), t.workspace_id.clone(), t.name.clone());
                if self.tables.contains_key(&t.id) || self.name_taken(&key) {
                    return Err(Error::AlreadyExists(format!(
                        "relation \"{}\".\"{}\" already exists",
                        t.workspace_id, t.name
                    )));
                }
                if !self
                    .workspaces
                    .contains_key(&(t.org_id.clone(), t.workspace_id.clone()))
                {
                    return Err(missing("workspace"));
                }
                self.table_names.insert(key, t.id);
                self.tables.insert(t.id, Arc::new(t.clone()));
                self.next_table_id = self.next_table_id.max(t.id + 1);
            }
            CatalogOp::ReplaceTable(t) => {
                let old = self.tables.get(&t.id).ok_or_else(|| missing("table"))?;
                let old_key = (
                    old.org_id.clone(),
                    old.workspace_id.clone(),
                    old.name.clone(),
                );
                let new_key = (t.org_id.clone(), t.workspace_id.clone(), t.name.clone());
                if old_key != new_key {
                    if self.name_taken(&new_key) {
                        return Err(Error::AlreadyExists(format!(
                            "relation \"{}\".\"{}\" already exists",
                            t.workspace_id, t.name
                        )));
                    }
                    self.table_names.remove(&old_key);
                    self.table_names.insert(new_key, t.id);
                }
                self.tables.insert(t.id, Arc::new(t.clone()));
                // An index goes with its column (ALTER TABLE … DROP COLUMN), as in PostgreSQL.
                let gone: Vec<IndexId> = self
                    .indexes
                    .values()
                    .filter(|i| i.table_id == t.id && t.column_by_id(i.column).is_none())
                    .map(|i| i.id)
                    .collect();
                for id in gone {
                    self.remove_index(id);
                }
            }
            CatalogOp::DropTable { table_id } => {
                let t = self
                    .tables
                    .remove(table_id)
                    .ok_or_else(|| missing("table"))?;
                self.table_names.remove(&(
                    t.org_id.clone(),
                    t.workspace_id.clone(),
                    t.name.clone(),
                ));
                self.remove_indexes_of(&[*table_id]);
                self.remove_dangling_views();
                return Ok(Removed {
                    tables: vec![*table_id],
                    files: Vec::new(),
                });
            }
            CatalogOp::CreateIndex(i) => {
                let table = self
                    .tables
                    .get(&i.table_id)
                    .ok_or_else(|| missing("table"))?;
                if table.column_by_id(i.column).is_none() {
                    return Err(missing("indexed column"));
                }
                let key = (
                    table.org_id.clone(),
                    table.workspace_id.clone(),
                    i.name.clone(),
                );
                if self.indexes.contains_key(&i.id) || self.name_taken(&key) {
                    return Err(Error::AlreadyExists(format!(
                        "relation \"{}\" already exists",
                        i.name
                    )));
                }
                self.index_names.insert(key, i.id);
                self.indexes.insert(i.id, i.clone());
                self.next_index_id = self.next_index_id.max(i.id + 1);
            }
            CatalogOp::DropIndex { index_id } => {
                if !self.indexes.contains_key(index_id) {
                    return Err(missing("index"));
                }
                self.remove_index(*index_id);
            }
            CatalogOp::CreateView(v) => {
                let key = (v.org_id.clone(), v.workspace_id.clone(), v.name.clone());
                if self.views.contains_key(&v.id) || self.name_taken(&key) {
                    return Err(Error::AlreadyExists(format!(
                        "relation \"{}\".\"{}\" already exists",
                        v.workspace_id, v.name
                    )));
                }
                if !self
                    .workspaces
                    .contains_key(&(v.org_id.clone(), v.workspace_id.clone()))
                {
                    return Err(missing("workspace"));
                }
                self.check_view_reads(v)?;
                self.insert_view(v.clone());
            }
            CatalogOp::ReplaceView(v) => {
                let old = self.views.get(&v.id).ok_or_else(|| missing("view"))?;
                if (&old.org_id, &old.workspace_id, &old.name)
                    != (&v.org_id, &v.workspace_id, &v.name)
                {
                    return Err(Error::Inconsistent("a replaced view keeps its name".into()));
                }
                self.check_view_reads(v)?;
                self.views.insert(v.id, Arc::new(v.clone()));
            }
            CatalogOp::RenameView { view_id, name } => {
                let old = self.views.get(view_id).ok_or_else(|| missing("view"))?;
                let key = (old.org_id.clone(), old.workspace_id.clone(), name.clone());
                if self.name_taken(&key) {
                    return Err(Error::AlreadyExists(format!(
                        "relation \"{}\".\"{}\" already exists",
                        old.workspace_id, name
                    )));
                }
                let v = self.remove_view(*view_id).ok_or_else(|| missing("view"))?;
                let mut v = Arc::unwrap_or_clone(v);
                v.name = name.clone();
                self.insert_view(v);
            }
            CatalogOp::DropView { view_id } => {
                self.remove_view(*view_id).ok_or_else(|| missing("view"))?;
                self.remove_dangling_views();
            }
            CatalogOp::PutFile(f) => {
                let ws = (f.org_id.clone(), f.workspace_id.clone());
                if !self.workspaces.contains_key(&ws) {
                    return Err(missing("workspace"));
                }
                if self.file(&f.org_id, &f.workspace_id, &f.id).is_some() {
                    return Err(Error::AlreadyExists(format!("file \"{}\"", f.id)));
                }
                // The order of application decides the order of listing (replay applies
                // in the same order, so it assigns the same numbers).
                let seq = self.next_file_seq;
                self.insert_file(FileRecord { seq, ..f.clone() });
            }
            CatalogOp::DeleteFile {
                org_id,
                workspace_id,
                file_id,
            } => {
                let key = (org_id.clone(), workspace_id.clone());
                let ws = self.files.get_mut(&key).ok_or_else(|| missing("file"))?;
                let ws = Arc::make_mut(ws);
                ws.remove(file_id).ok_or_else(|| missing("file"))?;
                if ws.len == 0 {
                    self.files.remove(&key);
                }
                return Ok(Removed {
                    tables: Vec::new(),
                    files: vec![file_id.clone()],
                });
            }
        }
        Ok(Removed::default())
    }

    /// A view reads only tables and views that exist, of its own organization, and
    /// never itself (through others either).
    fn check_view_reads(&self, v: &ViewDef) -> Result<()> {
        for t in &v.tables {
            match self.tables.get(t) {
                Some(t) if t.org_id == v.org_id => {}
                _ => return Err(Error::Inconsistent("a view reads a missing table".into())),
            }
        }
        for w in &v.views {
            match self.views.get(w) {
                Some(w) if w.org_id == v.org_id && w.id != v.id => {}
                _ => return Err(Error::Inconsistent("a view reads a missing view".into())),
            }
        }
        if self
            .dependent_views(&[], &[v.id])
            .iter()
            .any(|d| v.views.contains(d))
        {
            return Err(Error::Inconsistent("a view would read itself".into()));
        }
        Ok(())
    }

    /// Forgets an index and its name.
    fn remove_index(&mut self, id: IndexId) {
        if let Some(i) = self.indexes.remove(&id) {
            self.index_names.retain(|_, v| *v != i.id);
        }
    }

    fn remove_indexes_of(&mut self, tables: &[TableId]) {
        let gone: Vec<IndexId> = self
            .indexes
            .values()
            .filter(|i| tables.contains(&i.table_id))
            .map(|i| i.id)
            .collect();
        for id in gone {
            self.remove_index(id);
        }
    }

    fn remove_tables(&mut self, pred: impl Fn(&TableDef) -> bool) -> Vec<TableId> {
        let ids: Vec<TableId> = self
            .tables
            .values()
            .filter(|t| pred(t))
            .map(|t| t.id)
            .collect();
        for id in &ids {
            if let Some(t) = self.tables.remove(id) {
                // The names, not the whole definition: it is shared with the published
                // catalog, and unwrapping it would copy every column.
                self.table_names.remove(&(
                    t.org_id.clone(),
                    t.workspace_id.clone(),
                    t.name.clone(),
                ));
            }
        }
        self.remove_indexes_of(&ids);
        ids
    }
}
