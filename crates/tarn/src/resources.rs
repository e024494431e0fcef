//! The resource shapes of the service reference, as serde structs: `serde_json::to_value`
//! of each is the REST body.

use serde::Serialize;

/// `GET /health`, `GET /ready`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// `ok` or `ready`.
    pub status: String,
}

/// `GET /me`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct User {
    /// User id.
    pub id: String,
    /// E-mail.
    pub email: String,
    /// Name.
    pub name: String,
    /// Has an API key.
    pub verified: bool,
    /// Ids of the user's organizations.
    pub organizations: Vec<String>,
    /// Display name (the name).
    pub display_name: String,
    /// Unix seconds.
    pub date_joined: i64,
}

/// A new API key; the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewApiKey {
    /// Key id.
    pub id: String,
    /// Label.
    pub label: String,
    /// The secret to pass to `Tarn::connect`.
    pub secret: String,
    /// ISO 8601 UTC.
    pub created_at: String,
}

/// An API key as listed (never the secret).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiKeyInfo {
    /// Key id.
    pub id: String,
    /// Label.
    pub label: String,
    /// ISO 8601 UTC.
    pub created_at: String,
    /// When the key last authenticated a call (ISO 8601 UTC), `None` if never. Uses are
    /// counted in memory and written to the database on [`crate::Tarn::close`]: after a
    /// crash, uses since the last close are forgotten (the time only moves back).
    pub last_used_at: Option<String>,
    /// Revoked keys no longer connect.
    pub revoked: bool,
}

/// An organization.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Organization {
    /// Id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Creating user id.
    pub creator: String,
    /// ISO 8601 UTC.
    pub created_at: String,
}

/// `GET /organizations/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrganizationDetail {
    /// The organization.
    pub organization: Organization,
    /// Members.
    pub member_count: u64,
    /// Members whose user is not verified yet.
    pub pending_invites_count: u64,
}

/// `{id, name}`: what create and update calls return.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdName {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
}

/// A workspace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workspace {
    /// Id (the SQL schema name).
    pub id: String,
    /// Owning organization.
    pub org_id: String,
    /// Display name.
    pub name: String,
    /// Always `generic`.
    #[serde(rename = "type")]
    pub kind: String,
    /// ISO 8601 UTC.
    pub created_at: String,
}

/// `GET /workspaces`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceList {
    /// The workspaces.
    pub data: Vec<Workspace>,
}

/// `GET /workspaces/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceDetail {
    /// The workspace.
    pub workspace: Workspace,
}

/// A table in a table list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableSummary {
    /// Table name.
    pub name: String,
    /// Rows.
    pub row_count: u64,
}

/// A view (`CREATE VIEW`), as [`Session::views`](crate::Session::views) and [`Session::view`](crate::Session::view) show it: a
/// Tarn addition (the service has no views).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ViewInfo {
    /// View name.
    pub name: String,
    /// Output columns in order, with the types the query gave them when the view was
    /// created or last replaced (a view's columns are always nullable and have no
    /// default).
    pub columns: Vec<ColumnInfo>,
    /// The view's query as stored (re-printed from the parsed statement, as
    /// PostgreSQL's `pg_get_viewdef` shows it).
    pub definition: String,
    /// When the view was first created (ISO 8601; `CREATE OR REPLACE` keeps it).
    pub created_at: String,
}

/// A column in table details.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColumnInfo {
    /// Name.
    pub name: String,
    /// PostgreSQL type name (`int4`, `_float4`, …).
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// Default expression (`nextval('…_seq'::regclass)` for serials), or null.
    pub default: Option<String>,
}

/// An index in table details.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexInfo {
    /// Index name.
    pub name: String,
    /// Indexed column.
    pub column: String,
    /// `exact_text`, `hnsw`, `maxsim` or `bm25`.
    pub index_type: String,
    /// `WITH (…)` options other than `index_type`.
    pub options: std::collections::BTreeMap<String, String>,
    /// `ready`, or `building` while some sealed segment lacks the index's file (a
    /// build under way or pending: after CREATE INDEX past its statement timeout,
    /// compaction, or a crash); searches read those segments exactly meanwhile, and
    /// `VACUUM "ws"."t"` finishes the build.
    pub status: String,
    /// Sealed segments with the index's file, and of all sealed segments (both 0 for
    /// an index without per-segment files, such as `exact_text`).
    pub segments_indexed: u64,
    /// Sealed segments of the table that the index covers when ready.
    pub segments: u64,
}

/// `GET …/tables/{t}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableDetails {
    /// Table name.
    pub table_name: String,
    /// Columns in order.
    pub columns: Vec<ColumnInfo>,
    /// Rows.
    pub row_count: u64,
    /// Size in megabytes (MiB).
    pub size_mb: f64,
    /// The table's `engine_index` indexes, oldest first (a Tarn addition to the
    /// service's body).
    pub indexes: Vec<IndexInfo>,
}

/// Result of `query` (SPEC §4.9).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryResult {
    /// Output column names; empty without a result set.
    pub columns: Vec<String>,
    /// Rows, or null for statements without a result set.
    pub rows: Option<Vec<Vec<serde_json::Value>>>,
    /// Rows returned.
    pub row_count: u64,
    /// Rows written.
    pub rows_affected: u64,
    /// Wall time of the call.
    pub execution_time_ms: f64,
    /// What the caller should know though the statement succeeded (PostgreSQL's
    /// NOTICE): an index build that goes on in the background past the statement
    /// timeout. Left out of the JSON when empty (a Tarn addition to the service's body).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The rows' memory, charged to `query_memory` until the result is dropped.
    #[serde(skip)]
    pub(crate) charge: Charge,
}

impl QueryResult {
    /// The result as its JSON body (SPEC §4.9's fields), still charged to `query_memory`
    /// (resized to the body's bytes) until the body is dropped: a server that sends it
    /// to a slow client keeps it counted until the last byte is written, where a body
    /// serialized from the result and the result dropped was not (eleven clients that
    /// did not read their 500 MB answers took a host past 6 GB).
    ///
    /// The body is charged as it grows, beside the rows it is made from (which go
    /// once it is made): a body that does not fit what the pool has left is a 400
    /// naming `query_memory`, as rows that do not fit are.
    pub fn into_json(self) -> crate::Result<bytes::Bytes> {
        let mut this = self;
        let charge = Charge(this.charge.0.take());
        let mut writer = ChargedWriter {
            buf: Vec::new(),
            memory: charge.0.as_ref(),
            refused: None,
        };
        if let Err(e) = serde_json::to_writer(&mut writer, &this) {
            let refused = writer.refused.take();
            return Err(match refused {
                Some(refusal) => crate::Error::bad(format!(
                    "query memory limit (query_memory) exceeded: the result's JSON body \
                     does not fit beside its rows in what the limit leaves ({}); select \
                     fewer rows or columns (LIMIT), or read them as Arrow",
                    crate::query::pool_refusal(&refusal)
                )),
                None => crate::Error::new(
                    crate::ErrorKind::Internal,
                    format!("encoding a result: {e}"),
                ),
            });
        }
        let body = writer.buf;
        // The rows go now; the body stays charged until it is dropped.
        drop(this);
        if let Some(r) = &charge.0 {
            r.resize(body.capacity());
        }
        Ok(bytes::Bytes::from_owner(ChargedBody(body, charge)))
    }
}

/// A body being written, charged to `memory` as its buffer grows.
struct ChargedWriter<'a> {
    buf: Vec<u8>,
    memory: Option<&'a datafusion::execution::memory_pool::MemoryReservation>,
    /// The pool's refusal, when it refused.
    refused: Option<datafusion::error::DataFusionError>,
}

impl std::io::Write for ChargedWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let need = self.buf.len() + data.len();
        let capacity = self.buf.capacity();
        if need > capacity {
            let grown = need.max(capacity.saturating_mul(2)).max(4096);
            if let Some(m) = self.memory
                && let Err(e) = m.try_grow(grown - capacity)
            {
                self.refused = Some(e);
                return Err(std::io::Error::other("query_memory"));
            }
            self.buf.reserve_exact(grown - self.buf.len());
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes and the reservation that counts them.
struct ChargedBody(
    Vec<u8>,
    #[expect(dead_code, reason = "held for its drop")] Charge,
);

impl AsRef<[u8]> for ChargedBody {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Result of `query_batch` (SPEC §4.10).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchResult {
    /// Parameter sets run.
    pub statements: u64,
    /// Sum of rows written.
    pub rows_affected: u64,
    /// Sum of rows returned.
    pub row_count: u64,
    /// Wall time of the call.
    pub execution_time_ms: f64,
    /// As `QueryResult::notices` (an index build that goes on in the background). Left
    /// out of the JSON when empty (a Tarn addition to the service's body).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

/// Result of `query_arrow`: the rows as Arrow record batches.
#[derive(Debug, Clone)]
pub struct ArrowResult {
    /// Schema of the result set (PostgreSQL output names); empty without one.
    pub schema: datafusion::arrow::datatypes::SchemaRef,
    /// The rows; `None` for statements without a result set.
    pub batches: Option<Vec<datafusion::arrow::record_batch::RecordBatch>>,
    /// Rows written.
    pub rows_affected: u64,
    /// The batches' memory, charged to `query_memory` until the result is dropped
    /// (never read: it is held for its drop).
    #[expect(dead_code)]
    pub(crate) charge: Charge,
}

/// The rows of one batch of a [`Session::query_arrow`](crate::Session::query_arrow)
/// result as [`Session::query`](crate::Session::query) gives them (one JSON value per
/// column, SPEC §4), for a host that encodes a large result a batch at a time and lets
/// each go once written (the CLI's export does, instead of holding every row as JSON).
pub fn json_rows(
    schema: &datafusion::arrow::datatypes::Schema,
    batch: &datafusion::arrow::record_batch::RecordBatch,
) -> crate::Result<Vec<Vec<serde_json::Value>>> {
    let fields: Vec<_> = schema.fields().iter().map(|f| f.as_ref()).collect();
    let mut rows = Vec::with_capacity(batch.num_rows());
    tarn_sql::encode_rows(&fields, batch.columns(), &mut rows, &mut |_| Ok(()))?;
    Ok(rows)
}

/// Memory a result holds, kept charged to the pool that statements share
/// (`query_memory`) for as long as the caller holds the result: a host that serializes
/// or sends results of many concurrent statements is then bounded by the pool too, not
/// only while each statement runs. A clone is not charged (its owner chose to copy).
#[derive(Default)]
pub(crate) struct Charge(pub(crate) Option<datafusion::execution::memory_pool::MemoryReservation>);

impl Clone for Charge {
    fn clone(&self) -> Self {
        Charge(None)
    }
}

impl PartialEq for Charge {
    /// Results compare by their contents; what they are charged is not part of them.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Drop for Charge {
    /// A large result's memory (rows, body) goes back to the system once the host is
    /// idle, as a large statement's does (see `tarn_alloc::release_soon`).
    fn drop(&mut self) {
        if let Some(r) = &self.0
            && tarn_alloc::worth_releasing(r.size())
        {
            tarn_alloc::release_soon();
        }
    }
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.0.as_ref().map_or(0, |r| r.size()))
    }
}

/// A member of an organization (`GET …/members` lists them; `add_member` returns one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    /// User id.
    pub user_id: String,
    /// E-mail.
    pub email: String,
    /// `admin` or `member`.
    pub role: String,
}

/// `GET /organizations/{id}/members`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberList {
    /// The members, by e-mail.
    pub members: Vec<Member>,
    /// How many.
    pub total_count: u64,
}

/// What `update_member` returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberRole {
    /// User id.
    pub user_id: String,
    /// The new role: `admin` or `member`.
    pub role: String,
}

/// A workspace file's record (SPEC §7): `GET …/files/{id}`, and each entry of
/// [`FileList`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileInfo {
    /// File id (a UUID chosen by Tarn).
    pub id: String,
    /// Workspace id.
    pub workspace_id: String,
    /// The name it was uploaded under.
    pub filename: String,
    /// The media type it was uploaded with.
    pub media_type: String,
    /// Length in bytes.
    pub size_bytes: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// ISO 8601 UTC.
    pub created_at: String,
}

/// `GET …/files`: one page of a workspace's files, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileList {
    /// The files of this page.
    pub data: Vec<FileInfo>,
    /// Files in the workspace.
    pub total_count: u64,
    /// The page size used.
    pub limit: u32,
    /// Files skipped before this page.
    pub offset: u64,
}
