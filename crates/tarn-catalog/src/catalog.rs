//! The catalog: every record Tarn keeps about users, organizations, workspaces and
//! tables, changed only by [`CatalogOp`]s.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{ColumnId, Error, IndexId, Result, SqlType, TableId};

/// A user. `date_joined` is Unix seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserRecord {
    /// User id (a UUID).
    pub id: String,
    /// E-mail address, unique.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Whether the user has had an API key (invited users are unverified until then).
    pub verified: bool,
    /// Unix seconds.
    pub date_joined: i64,
}

/// An API key; only the SHA-256 of the secret is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// Key id (a UUID).
    pub id: String,
    /// Owner.
    pub user_id: String,
    /// Free-form label.
    pub label: String,
    /// Hex SHA-256 of the secret.
    pub hash: String,
    /// ISO 8601 UTC.
    pub created_at: String,
    /// Revoked keys never authenticate again.
    pub revoked: bool,
    /// When the key was last used, as Unix seconds, as of the last time uses were
    /// recorded (the facade counts uses in memory and records them on close).
    #[serde(default)]
    pub last_used: Option<i64>,
}

/// A workspace file (SPEC §7). Its bytes are a blob of the storage layer named `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    /// File id (a UUID chosen by Tarn; also the blob's name).
    pub id: String,
    /// Organization of the workspace.
    pub org_id: String,
    /// Workspace.
    pub workspace_id: String,
    /// The name it was uploaded under.
    pub filename: String,
    /// The media type it was uploaded with.
    pub media_type: String,
    /// Length of the bytes.
    pub size_bytes: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// ISO 8601 UTC.
    pub created_at: String,
    /// Upload order in the database (assigned when the record is applied): files are
    /// listed newest first, and many share a `created_at` second.
    #[serde(default)]
    pub seq: u64,
}

/// Records per chunk of a workspace's file list.
const FILE_CHUNK: u64 = 1024;
/// Shards of a workspace's id → seq map.
const ID_SHARDS: usize = 256;

/// The files of one workspace. A catalog commit works on a copy of the catalog, so
/// what a commit copies must not grow with the files: the list is split into chunks
/// (by `seq`, so an upload touches the last one) and the id map into shards (by the
/// id's hash), each shared between catalog versions until a commit changes it. An
/// upload or a delete copies one chunk, one shard and the two lists of pointers.
#[derive(Debug, Clone, Default)]
struct WorkspaceFiles {
    /// seq / FILE_CHUNK → (seq → record).
    chunks: BTreeMap<u64, Arc<BTreeMap<u64, Arc<FileRecord>>>>,
    /// id → seq, in ID_SHARDS shards (empty until the first file).
    ids: Vec<Arc<HashMap<String, u64>>>,
    len: usize,
}

impl WorkspaceFiles {
    fn shard(id: &str) -> usize {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        (BuildHasherDefault::<DefaultHasher>::default().hash_one(id) % ID_SHARDS as u64) as usize
    }

    fn seq_of(&self, id: &str) -> Option<u64> {
        self.ids.get(Self::shard(id))?.get(id).copied()
    }

    fn get(&self, id: &str) -> Option<&Arc<FileRecord>> {
        let seq = self.seq_of(id)?;
        self.chunks.get(&(seq / FILE_CHUNK))?.get(&seq)
    }

    fn insert(&mut self, f: FileRecord) {
        if self.ids.is_empty() {
            self.ids = (0..ID_SHARDS).map(|_| Arc::default()).collect();
        }
        let shard = Self::shard(&f.id);
        Arc::make_mut(&mut self.ids[shard]).insert(f.id.clone(), f.seq);
        let chunk = self.chunks.entry(f.seq / FILE_CHUNK).or_default();
        if Arc::make_mut(chunk).insert(f.seq, Arc::new(f)).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, id: &str) -> Option<u64> {
        let shard = Self::shard(id);
        let seq = Arc::make_mut(self.ids.get_mut(shard)?).remove(id)?;
        let key = seq / FILE_CHUNK;
        if let Some(chunk) = self.chunks.get_mut(&key) {
            let chunk = Arc::make_mut(chunk);
            if chunk.remove(&seq).is_some() {
                self.len -= 1;
            }
            if chunk.is_empty() {
                self.chunks.remove(&key);
            }
        }
        Some(seq)
    }

    /// Newest first.
    fn newest_first(&self) -> impl Iterator<Item = &Arc<FileRecord>> {
        self.chunks.values().rev().flat_map(|c| c.values().rev())
    }

    fn ids(&self) -> impl Iterator<Item = &String> {
        self.ids.iter().flat_map(|s| s.keys())
    }
}

/// An organization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrgRecord {
    /// Id chosen by the creator.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Creating user id.
    pub creator: String,
    /// ISO 8601 UTC.
    pub created_at: String,
}

/// A member's role in an organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May do everything in the organization.
    Admin,
    /// May read and write data but not manage the organization.
    Member,
}

impl Role {
    /// Parses `admin` or `member` exactly.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }

    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

/// Membership of a user in an organization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Organization id.
    pub org_id: String,
    /// User id.
    pub user_id: String,
    /// Role.
    pub role: Role,
}

/// A workspace: the SQL schema of its tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    /// Id chosen by the creator, unique within the organization.
    pub id: String,
    /// Owning organization.
    pub org_id: String,
    /// Display name.
    pub name: String,
    /// ISO 8601 UTC.
    pub created_at: String,
    /// Chosen when the workspace is created (a UUID) and never reused: it tells this
    /// workspace from an earlier one of the same id that was deleted, which the id and
    /// `created_at` (whole seconds) cannot. An upload is bound to the workspace it
    /// started in by it. Empty for workspaces created before it existed (any workspace
    /// created since has one, so it still differs from theirs).
    #[serde(default)]
    pub uid: String,
}

/// How a column gets a value when an INSERT does not give one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ColumnDefault {
    /// `SERIAL`/`BIGSERIAL`: the table's durable sequence for this column.
    Sequence {
        /// PostgreSQL name of the sequence, `<table>_<col>_seq`.
        name: String,
    },
    /// `DEFAULT <expr>`: the SQL text as written, evaluated at each insert.
    Expr {
        /// SQL text.
        sql: String,
    },
}

/// A column of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    /// Immutable id; stored data addresses columns by it.
    pub id: ColumnId,
    /// Current name.
    pub name: String,
    /// Declared type.
    pub ty: SqlType,
    /// False for `NOT NULL` and primary key columns.
    pub nullable: bool,
    /// Default, if any.
    pub default: Option<ColumnDefault>,
    /// Part of the primary key.
    pub primary_key: bool,
    /// Has its own UNIQUE constraint.
    pub unique: bool,
    /// Value (JSON-encoded as query results encode it) of rows written before the column
    /// was added by `ALTER TABLE … ADD COLUMN … DEFAULT`; `None` means NULL.
    pub missing: Option<serde_json::Value>,
    /// Dimension fixed durably by the first stored vector when the type does not fix it.
    pub vector_dim: Option<u32>,
}

impl ColumnDef {
    /// A nullable column without default or constraint (what an uploaded file's columns
    /// and an added column start as).
    pub fn plain(id: ColumnId, name: impl Into<String>, ty: SqlType) -> ColumnDef {
        ColumnDef {
            id,
            name: name.into(),
            ty,
            nullable: true,
            default: None,
            primary_key: false,
            unique: false,
            missing: None,
            vector_dim: None,
        }
    }

    /// The dimension vectors of this column must have, if it is known yet.
    pub fn dimension(&self) -> Option<u32> {
        match self.ty {
            SqlType::Vector { dim: Some(d) } => Some(d),
            _ => self.vector_dim,
        }
    }
}

/// A table definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableDef {
    /// Immutable internal id.
    pub id: TableId,
    /// Owning organization.
    pub org_id: String,
    /// Workspace (SQL schema).
    pub workspace_id: String,
    /// Current name.
    pub name: String,
    /// Created `USING engine` (search and `engine_index` allowed).
    pub engine: bool,
    /// Columns in order.
    pub columns: Vec<ColumnDef>,
    /// Next column id to hand out; ids of dropped columns are never reused.
    pub next_column_id: ColumnId,
    /// Named unique constraints: (constraint name, column ids). The primary key is
    /// `<table>_pkey`, a column's UNIQUE `<table>_<col>_key`.
    pub unique_constraints: Vec<(String, Vec<ColumnId>)>,
    /// ISO 8601 UTC.
    pub created_at: String,
}

impl TableDef {
    /// The column named `name`, if any.
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The column with id `id`, if any.
    pub fn column_by_id(&self, id: ColumnId) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.id == id)
    }
}

/// What an `engine_index` index does. Serialized as its SQL name (`index_type = '…'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum IndexType {
    /// Approximate nearest neighbours over a `FLOAT4[]` column.
    Hnsw,
    /// MaxSim over a `FLOAT4[][]` column.
    Maxsim,
    /// BM25 full-text search over a text column.
    Bm25,
    /// Equality lookups on a text column, through the table's key index.
    ExactText,
}

impl IndexType {
    /// Parses an `index_type` value. The hosted service's `clustered` and
    /// `clustered_quantized` are aliases of `hnsw`.
    pub fn parse(s: &str) -> Option<IndexType> {
        match s {
            "hnsw" | "clustered" | "clustered_quantized" => Some(IndexType::Hnsw),
            "maxsim" => Some(IndexType::Maxsim),
            "bm25" => Some(IndexType::Bm25),
            "exact_text" => Some(IndexType::ExactText),
            _ => None,
        }
    }

    /// The SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            IndexType::Hnsw => "hnsw",
            IndexType::Maxsim => "maxsim",
            IndexType::Bm25 => "bm25",
            IndexType::ExactText => "exact_text",
        }
    }
}

/// An `engine_index` index on one column. Its name lives in the namespace of its
/// table's workspace, shared with table names (as relations share a schema in
/// PostgreSQL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexDef {
    /// Immutable internal id.
    pub id: IndexId,
    /// Name, unique among the relations of the table's workspace.
    pub name: String,
    /// Indexed table.
    pub table_id: TableId,
    /// Indexed column.
    pub column: ColumnId,
    /// Kind of index.
    pub index_type: IndexType,
    /// `WITH (…)` options other than `index_type`, keys lower case, values as written.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// ISO 8601 UTC.
    pub created_at: String,
}

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
    /// Record when API keys were last used (Unix seconds, by key id). A key that no
    /// longer exists is skipped: uses are advisory and never fail a commit.
    RecordKeyUses {
        /// (key id, Unix seconds).
        uses: Vec<(String, i64)>,
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

/// Every catalog record, indexed for the lookups Tarn makes.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    users: BTreeMap<String, UserRecord>,
    users_by_email: HashMap<String, String>,
    api_keys: BTreeMap<String, ApiKeyRecord>,
    keys_by_hash: HashMap<String, String>,
    orgs: BTreeMap<String, OrgRecord>,
    members: BTreeMap<(String, String), Role>,
    workspaces: BTreeMap<(String, String), WorkspaceRecord>,
    tables: BTreeMap<TableId, TableDef>,
    table_names: HashMap<(String, String, String), TableId>,
    next_table_id: TableId,
    indexes: BTreeMap<IndexId, IndexDef>,
    /// (organization, workspace, index name) → index id.
    index_names: HashMap<(String, String, String), IndexId>,
    next_index_id: IndexId,
    /// (organization, workspace) → its files.
    files: BTreeMap<(String, String), Arc<WorkspaceFiles>>,
    next_file_seq: u64,
}

/// Every record of a catalog in a serializable form, for checkpoints: the lookup
/// indexes are rebuilt on load.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CatalogSnapshot {
    users: Vec<UserRecord>,
    api_keys: Vec<ApiKeyRecord>,
    orgs: Vec<OrgRecord>,
    members: Vec<(String, String, Role)>,
    workspaces: Vec<WorkspaceRecord>,
    tables: Vec<TableDef>,
    next_table_id: TableId,
    #[serde(default)]
    indexes: Vec<IndexDef>,
    #[serde(default)]
    next_index_id: IndexId,
    #[serde(default)]
    files: Vec<FileRecord>,
    #[serde(default)]
    next_file_seq: u64,
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
            tables: self.tables.values().cloned().collect(),
            next_table_id: self.next_table_id,
            indexes: self.indexes.values().cloned().collect(),
            next_index_id: self.next_index_id,
            files: self
                .files
                .values()
                .flat_map(|w| w.newest_first().map(|f| FileRecord::clone(f)))
                .collect(),
            next_file_seq: self.next_file_seq,
        }
    }

    /// Bytes organization `org`'s records take in a checkpoint (its record, members and
    /// the users it invited who have no key yet, workspaces, tables, indexes and file
    /// records), as JSON: its share of the catalog. Walks them all: called only when the
    /// catalog is large enough for one organization to matter.
    pub fn org_bytes(&self, org: &str) -> u64 {
        self.orgs_bytes(&[org].into_iter().collect())
    }

    /// [`Catalog::org_bytes`] of every organization created by the user who created
    /// `org` (`org` included), together: what one user may add to the catalog through
    /// the organizations they make is their share, not one share per organization.
    pub fn creator_bytes(&self, org: &str) -> u64 {
        let Some(creator) = self.orgs.get(org).map(|o| o.creator.as_str()) else {
            return self.org_bytes(org);
        };
        let orgs: HashSet<&str> = self
            .orgs
            .values()
            .filter(|o| o.creator == creator)
            .map(|o| o.id.as_str())
            .collect();
        self.orgs_bytes(&orgs)
    }

    /// [`Catalog::org_bytes`] summed over `orgs`, in one pass over each map: the cost is
    /// linear in the catalog, not organizations × tables.
    fn orgs_bytes(&self, orgs: &HashSet<&str>) -> u64 {
        let mut n: u64 = orgs
            .iter()
            .filter_map(|o| self.orgs.get(*o))
            .map(json_len)
            .sum();
        for (o, u) in self.members.keys() {
            if !orgs.contains(o.as_str()) {
                continue;
            }
            n += (o.len() + u.len() + 16) as u64;
            if let Some(u) = self.users.get(u)
                && !u.verified
            {
                n += json_len(u);
            }
        }
        for ((o, _), w) in &self.workspaces {
            if orgs.contains(o.as_str()) {
                n += json_len(w);
            }
        }
        let mut tables = HashSet::new();
        for t in self
            .tables
            .values()
            .filter(|t| orgs.contains(t.org_id.as_str()))
        {
            n += json_len(t);
            tables.insert(t.id);
        }
        for i in self
            .indexes
            .values()
            .filter(|i| tables.contains(&i.table_id))
        {
            n += json_len(i);
        }
        for ((o, _), files) in &self.files {
            if orgs.contains(o.as_str()) {
                n += files
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
    fn forget_orphaned_invites(&mut self, mut users: Vec<String>) {
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
            c.tables.insert(t.id, t);
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
        for f in s.files {
            c.insert_file(f);
        }
        c.next_file_seq = c.next_file_seq.max(s.next_file_seq);
        c
    }

    /// Adds a file record as is (its `seq` already assigned).
    fn insert_file(&mut self, f: FileRecord) {
        self.next_file_seq = self.next_file_seq.max(f.seq + 1);
        let ws = Arc::make_mut(
            self.files
                .entry((f.org_id.clone(), f.workspace_id.clone()))
                .or_default(),
        );
        ws.insert(f);
    }

    /// A workspace file's record.
    pub fn file(&self, org_id: &str, ws_id: &str, file_id: &str) -> Option<&FileRecord> {
        let ws = self.files.get(&(org_id.to_string(), ws_id.to_string()))?;
        ws.get(file_id).map(|f| f.as_ref())
    }

    /// Up to `limit` files of a workspace, newest first, after skipping `offset`; and
    /// how many it has.
    pub fn files_of(
        &self,
        org_id: &str,
        ws_id: &str,
        limit: usize,
        offset: usize,
    ) -> (Vec<&FileRecord>, usize) {
        match self.files.get(&(org_id.to_string(), ws_id.to_string())) {
            Some(ws) => (
                ws.newest_first()
                    .skip(offset)
                    .take(limit)
                    .map(|f| f.as_ref())
                    .collect(),
                ws.len,
            ),
            None => (Vec::new(), 0),
        }
    }

    /// Every file id of the catalog (which blobs must be kept).
    pub fn file_ids(&self) -> std::collections::HashSet<String> {
        self.files.values().flat_map(|w| w.ids().cloned()).collect()
    }

    /// An empty catalog.
    pub fn new() -> Self {
        Self {
            next_table_id: 1,
            next_index_id: 1,
            ..Default::default()
        }
    }

    /// A user by id.
    pub fn user(&self, id: &str) -> Option<&UserRecord> {
        self.users.get(id)
    }

    /// A user by e-mail.
    pub fn user_by_email(&self, email: &str) -> Option<&UserRecord> {
        self.users_by_email
            .get(email)
            .and_then(|id| self.users.get(id))
    }

    /// An API key by id.
    pub fn api_key(&self, id: &str) -> Option<&ApiKeyRecord> {
        self.api_keys.get(id)
    }

    /// The API key whose secret hashes to `hash`.
    pub fn api_key_by_hash(&self, hash: &str) -> Option<&ApiKeyRecord> {
        self.keys_by_hash
            .get(hash)
            .and_then(|id| self.api_keys.get(id))
    }

    /// A user's API keys, oldest first.
    pub fn api_keys_of(&self, user_id: &str) -> Vec<&ApiKeyRecord> {
        let mut keys: Vec<_> = self
            .api_keys
            .values()
            .filter(|k| k.user_id == user_id)
            .collect();
        keys.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        keys
    }

    /// An organization by id.
    pub fn org(&self, id: &str) -> Option<&OrgRecord> {
        self.orgs.get(id)
    }

    /// The role of `user_id` in `org_id`, if a member.
    pub fn role(&self, org_id: &str, user_id: &str) -> Option<Role> {
        self.members
            .get(&(org_id.to_string(), user_id.to_string()))
            .copied()
    }

    /// The organizations `user_id` belongs to, by id.
    pub fn orgs_of(&self, user_id: &str) -> Vec<&OrgRecord> {
        self.members
            .keys()
            .filter(|(_, u)| u == user_id)
            .filter_map(|(o, _)| self.orgs.get(o))
            .collect()
    }

    /// Members of an organization as (user, role).
    pub fn members_of(&self, org_id: &str) -> Vec<(&UserRecord, Role)> {
        self.members
            .iter()
            .filter(|((o, _), _)| o == org_id)
            .filter_map(|((_, u), r)| self.users.get(u).map(|u| (u, *r)))
            .collect()
    }

    /// A workspace of an organization.
    pub fn workspace(&self, org_id: &str, ws_id: &str) -> Option<&WorkspaceRecord> {
        self.workspaces
            .get(&(org_id.to_string(), ws_id.to_string()))
    }

    /// Workspaces of an organization, by id.
    pub fn workspaces_of(&self, org_id: &str) -> Vec<&WorkspaceRecord> {
        self.workspaces
            .iter()
            .filter(|((o, _), _)| o == org_id)
            .map(|(_, w)| w)
            .collect()
    }

    /// A table by (organization, workspace, name).
    pub fn table(&self, org_id: &str, ws_id: &str, name: &str) -> Option<&TableDef> {
        self.table_names
            .get(&(org_id.to_string(), ws_id.to_string(), name.to_string()))
            .and_then(|id| self.tables.get(id))
    }

    /// A table by id.
    pub fn table_by_id(&self, id: TableId) -> Option<&TableDef> {
        self.tables.get(&id)
    }

    /// Tables of a workspace, by name.
    pub fn tables_of(&self, org_id: &str, ws_id: &str) -> Vec<&TableDef> {
        let mut tables: Vec<_> = self
            .tables
            .values()
            .filter(|t| t.org_id == org_id && t.workspace_id == ws_id)
            .collect();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        tables
    }

    /// Every table, by id.
    pub fn all_tables(&self) -> impl Iterator<Item = &TableDef> {
        self.tables.values()
    }

    /// The id the next created table gets.
    pub fn next_table_id(&self) -> TableId {
        self.next_table_id
    }

    /// An index by (organization, workspace, name).
    pub fn index(&self, org_id: &str, ws_id: &str, name: &str) -> Option<&IndexDef> {
        self.index_names
            .get(&(org_id.to_string(), ws_id.to_string(), name.to_string()))
            .and_then(|id| self.indexes.get(id))
    }

    /// An index by id.
    pub fn index_by_id(&self, id: IndexId) -> Option<&IndexDef> {
        self.indexes.get(&id)
    }

    /// Indexes of a table, by id (creation order).
    pub fn indexes_of(&self, table_id: TableId) -> Vec<&IndexDef> {
        self.indexes
            .values()
            .filter(|i| i.table_id == table_id)
            .collect()
    }

    /// The id the next created index gets.
    pub fn next_index_id(&self) -> IndexId {
        self.next_index_id
    }

    /// Whether a table or an index of the workspace is named `name`.
    pub fn relation_exists(&self, org_id: &str, ws_id: &str, name: &str) -> bool {
        self.table(org_id, ws_id, name).is_some() || self.index(org_id, ws_id, name).is_some()
    }

    /// The column sets storage keeps key indexes for, as (column ids, unique): the
    /// primary key and UNIQUE constraints (unique), then the columns of `exact_text`
    /// indexes (not unique) that no constraint already covers. Empty for an unknown table.
    pub fn key_column_sets(&self, table_id: TableId) -> Vec<(Vec<ColumnId>, bool)> {
        let Some(table) = self.tables.get(&table_id) else {
            return Vec::new();
        };
        let mut sets: Vec<(Vec<ColumnId>, bool)> = Vec::new();
        for (_, cols) in &table.unique_constraints {
            if !sets.iter().any(|(c, _)| c == cols) {
                sets.push((cols.clone(), true));
            }
        }
        for index in self.indexes_of(table_id) {
            if index.index_type == IndexType::ExactText
                && !sets.iter().any(|(c, _)| *c == [index.column])
            {
                sets.push((vec![index.column], false));
            }
        }
        sets
    }

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
                let mut files = Vec::new();
                self.files.retain(|(o, _), w| {
                    let keep = o != org_id;
                    if !keep {
                        files.extend(w.ids().cloned());
                    }
                    keep
                });
                return Ok(Removed {
                    tables: self.remove_tables(|t| t.org_id == *org_id),
                    files,
                });
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
                let files = self
                    .files
                    .remove(&(org_id.clone(), workspace_id.clone()))
                    .map(|w| w.ids().cloned().collect())
                    .unwrap_or_default();
                return Ok(Removed {
                    tables: self
                        .remove_tables(|t| t.org_id == *org_id && t.workspace_id == *workspace_id),
                    files,
                });
            }
            CatalogOp::CreateTable(t) => {
                let key = (t.org_id.clone(), t.workspace_id.clone(), t.name.clone());
                if self.tables.contains_key(&t.id)
                    || self.table_names.contains_key(&key)
                    || self.index_names.contains_key(&key)
                {
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
                self.tables.insert(t.id, t.clone());
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
                    if self.table_names.contains_key(&new_key)
                        || self.index_names.contains_key(&new_key)
                    {
                        return Err(Error::AlreadyExists(format!(
                            "relation \"{}\".\"{}\" already exists",
                            t.workspace_id, t.name
                        )));
                    }
                    self.table_names.remove(&old_key);
                    self.table_names.insert(new_key, t.id);
                }
                self.tables.insert(t.id, t.clone());
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
                if self.indexes.contains_key(&i.id)
                    || self.index_names.contains_key(&key)
                    || self.table_names.contains_key(&key)
                {
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
                self.table_names.remove(&(t.org_id, t.workspace_id, t.name));
            }
        }
        self.remove_indexes_of(&ids);
        ids
    }
}

/// Serialized length of a record, for [`Catalog::org_bytes`].
fn json_len<T: Serialize>(v: &T) -> u64 {
    serde_json::to_vec(v).map_or(0, |v| v.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org(id: &str) -> CatalogOp {
        CatalogOp::CreateOrg(OrgRecord {
            id: id.into(),
            name: id.into(),
            creator: "u".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
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
            created_at: String::new(),
        }
    }

    fn ws(org: &str, id: &str) -> CatalogOp {
        CatalogOp::CreateWorkspace(WorkspaceRecord {
            id: id.into(),
            org_id: org.into(),
            name: id.into(),
            created_at: String::new(),
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
            created_at: String::new(),
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
