//! Tables from uploaded CSV and JSON files (SPEC §6): the file is streamed through
//! `tarn-ingest` (types inferred from a bounded sample) into segment files staged for
//! a table id nobody else gets, and one commit creates the table with those rows. No
//! row goes through the log, so a file larger than memory (or than a log record) is
//! fine; a crash before the commit leaves files the next open deletes.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use tarn_catalog::{CatalogOp, ColumnDef, ColumnId, SqlType, TableDef, TableId};
use tarn_ingest::{ColumnType, Ingest};
use tarn_sql::arrow_type;
use tarn_storage::{Database, Op, Stager, stored_schema};
use tokio::io::AsyncRead;

use crate::access::{
    Access, Locked, MembershipWatch, Operation, check_same_workspace, workspace_identity,
};
use crate::files::{join_error, next_chunk};
use crate::{Error, ErrorKind, Result, Session};

/// The table an upload created: `{name, row_count, columns}` as the service returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadedTable {
    /// The table's name.
    pub name: String,
    /// Rows it holds.
    pub row_count: u64,
    /// Its column names, in order.
    pub columns: Vec<String>,
}

/// How far an upload is (for a progress bar): bytes read and rows decoded so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UploadProgress {
    /// Bytes of the file read.
    pub bytes: u64,
    /// Rows decoded.
    pub rows: u64,
}

/// A workspace as [`Session::bind_workspace`] found it: uploads made through it land in
/// that workspace or nowhere.
#[derive(Clone)]
pub struct BoundWorkspace {
    session: Session,
    ws: String,
    /// The workspace's identity (`WorkspaceRecord::uid`), not only its id.
    uid: String,
    /// The membership it was bound under: a member removed (and added again) before
    /// the upload commits loses it.
    membership: MembershipWatch,
}

impl std::fmt::Debug for BoundWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundWorkspace")
            .field("ws", &self.ws)
            .finish()
    }
}

impl BoundWorkspace {
    /// The workspace's id.
    pub fn id(&self) -> &str {
        &self.ws
    }

    /// [`Session::upload_table`] into this workspace: checked again as a member's
    /// `upload_table` call (a key revoked meanwhile is a 401), and a 404 if the workspace
    /// was deleted since it was bound, even if one of the same id exists now.
    pub async fn upload_table<R>(
        &self,
        table_name: &str,
        filename: &str,
        reader: R,
    ) -> Result<UploadedTable>
    where
        R: AsyncRead + Unpin + Send,
    {
        let s = &self.session;
        let access = s.authorize(Operation::UploadTable, &self.ws)?;
        let op = Operation::UploadTable;
        let bound = Some((self.uid.as_str(), &self.membership));
        s.upload(
            access,
            op,
            &self.ws,
            bound,
            table_name,
            filename,
            reader,
            |_| {},
        )
        .await
    }
}

/// Decoding and staging, moved to the blocking pool for each chunk.
struct Job {
    db: Arc<Database>,
    table: TableId,
    ingest: Ingest,
    /// Created with the first batch (the schema is known once the sample is read).
    stager: Option<Stager>,
    batches: Vec<RecordBatch>,
}

impl Job {
    fn stage(&mut self) -> Result<()> {
        for batch in std::mem::take(&mut self.batches) {
            if self.stager.is_none() {
                // The types the table's columns are stored as (a batch of any other
                // shape is refused below rather than stored).
                let columns = self
                    .ingest
                    .columns()
                    .ok_or_else(|| internal("a batch before the columns"))?;
                // Header names with control or bidirectional characters are refused as
                // in CREATE TABLE, before any row is staged.
                for c in &columns {
                    tarn_sql::check_column_name(&c.name)?;
                }
                let schema = stored_schema(
                    &columns
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (column_id(i), arrow_type(&sql_type(c.ty)), true))
                        .collect::<Vec<_>>(),
                );
                self.stager = Some(self.db.stage(self.table, schema)?);
            }
            let Some(stager) = &mut self.stager else {
                return Err(internal("no stager"));
            };
            let stored = RecordBatch::try_new(stager.schema(), batch.columns().to_vec())
                .map_err(|e| internal(format!("staging an uploaded batch: {e}")))?;
            stager.push(&stored)?;
        }
        Ok(())
    }

    fn push(&mut self, chunk: &[u8]) -> Result<()> {
        self.ingest
            .push(chunk, &mut self.batches)
            .map_err(|e| Error::bad(e.to_string()))?;
        self.stage()
    }

    /// Ends the file: the columns, and the op attaching the rows (none without rows).
    fn finish(&mut self) -> Result<(Vec<tarn_ingest::Column>, Option<Op>)> {
        let columns = self
            .ingest
            .finish(&mut self.batches)
            .map_err(|e| Error::bad(e.to_string()))?;
        self.stage()?;
        let attach = match &mut self.stager {
            Some(s) => Some(s.finish()?),
            None => None,
        };
        Ok((columns, attach))
    }
}

/// The id of the `i`-th column of an uploaded table.
fn column_id(i: usize) -> ColumnId {
    i as ColumnId + 1
}

fn sql_type(ty: ColumnType) -> SqlType {
    match ty {
        ColumnType::Int8 => SqlType::Int8,
        ColumnType::Float8 => SqlType::Float8,
        ColumnType::Bool => SqlType::Bool,
        ColumnType::Date => SqlType::Date,
        ColumnType::Timestamptz => SqlType::Timestamptz,
        ColumnType::Jsonb => SqlType::Jsonb,
        ColumnType::Vector => SqlType::Vector { dim: None },
        ColumnType::Text => SqlType::Text,
    }
}

fn internal(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Internal, message)
}

impl Session {
    /// Creates table `table_name` in workspace `ws` from a CSV (header row; delimiter
    /// sniffed) or JSON (an array of objects, or NDJSON) file read from `reader`,
    /// chosen by `filename`'s extension or by sniffing, with column types inferred
    /// (SPEC §6). The file is streamed: memory stays bounded whatever its size. A row
    /// that contradicts the inferred types is a 400 naming its line and column, an
    /// existing table a 409; either way nothing is created. The table appears
    /// atomically, with all rows or none, also across a crash.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// let csv = "id,title,score\n1,Alpha,0.5\n2,Beta,\n";
    /// let t = acme.upload_table("docs", "papers", "papers.csv", csv.as_bytes()).await?;
    /// assert_eq!((t.name.as_str(), t.row_count), ("papers", 2));
    /// let d = acme.table("docs", "papers").await?;
    /// let types: Vec<_> = d.columns.iter().map(|c| (c.name.as_str(), c.data_type.as_str(), c.nullable)).collect();
    /// assert_eq!(types, [("id", "int8", false), ("title", "text", false), ("score", "float8", true)]);
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn upload_table<R>(
        &self,
        ws: &str,
        table_name: &str,
        filename: &str,
        reader: R,
    ) -> Result<UploadedTable>
    where
        R: AsyncRead + Unpin + Send,
    {
        let access = self.authorize(Operation::UploadTable, ws)?;
        let op = Operation::UploadTable;
        self.upload(access, op, ws, None, table_name, filename, reader, |_| {})
            .await
    }

    /// Workspace `ws` as it is now, for a table upload whose name comes later: the REST
    /// host's form may send the file part before `table_name`, so the file is spooled
    /// first, and the table must still land in the workspace the request started in.
    /// [`BoundWorkspace::upload_table`] is a 404 once this workspace is deleted, also
    /// when one of the same id has been created again meanwhile (SPEC §6).
    pub async fn bind_workspace(&self, ws: &str) -> Result<BoundWorkspace> {
        let access = self.authorize(Operation::BindWorkspace, ws)?;
        let membership = self.watch_membership(access.org());
        let uid = workspace_identity(&access.catalog, access.org(), ws)?;
        Ok(BoundWorkspace {
            session: self.clone(),
            ws: ws.to_string(),
            uid,
            membership,
        })
    }

    /// [`Session::upload_table`], calling `progress` after each chunk of the file (about
    /// 1 MiB) with the bytes read and rows decoded so far.
    pub async fn upload_table_with_progress<R, F>(
        &self,
        ws: &str,
        table_name: &str,
        filename: &str,
        reader: R,
        progress: F,
    ) -> Result<UploadedTable>
    where
        R: AsyncRead + Unpin + Send,
        F: Fn(UploadProgress) + Send + Sync,
    {
        let access = self.authorize(Operation::UploadTableWithProgress, ws)?;
        self.upload(
            access,
            Operation::UploadTableWithProgress,
            ws,
            None,
            table_name,
            filename,
            reader,
            progress,
        )
        .await
    }

    /// The upload, once `access` was granted for `op`.
    #[allow(clippy::too_many_arguments)]
    async fn upload<R, F>(
        &self,
        access: Access,
        op: Operation,
        ws: &str,
        bound: Option<(&str, &MembershipWatch)>,
        table_name: &str,
        filename: &str,
        mut reader: R,
        progress: F,
    ) -> Result<UploadedTable>
    where
        R: AsyncRead + Unpin + Send,
        F: Fn(UploadProgress) + Send + Sync,
    {
        tarn_sql::check_table_name(table_name)?;
        // Checked now, before the file is read, and again where the table is created.
        let taken = |catalog: &tarn_catalog::Catalog, org: &str| -> Result<()> {
            if catalog.relation_exists(org, ws, table_name) {
                return Err(Error::conflict(format!(
                    "relation \"{ws}\".\"{table_name}\" already exists"
                )));
            }
            Ok(())
        };
        taken(&access.catalog, access.org())?;
        // The table is created in this workspace or not at all (not in one created
        // under the same id after this one is deleted, while the file streams).
        let own;
        let (bound, membership) = match bound {
            Some((uid, membership)) => {
                check_same_workspace(&access.catalog, access.org(), ws, uid)?;
                (uid.to_string(), membership)
            }
            None => {
                own = self.watch_membership(access.org());
                (workspace_identity(&access.catalog, access.org(), ws)?, &own)
            }
        };
        let db = self.tarn.db().clone();
        let table = db.reserve_table_id();
        let mut idle = Some(Box::new(Job {
            db: db.clone(),
            table,
            ingest: Ingest::new(filename, tarn_ingest::Limits::default()),
            stager: None,
            batches: Vec::new(),
        }));

        // Each chunk is decoded and staged on the blocking pool while the next one is
        // read: one task in flight, no thread held while a slow client sends nothing.
        // Dropping this future drops the job with the task's output, and its stager
        // deletes what was staged.
        let mut pending: Option<tokio::task::JoinHandle<(Box<Job>, Result<()>)>> = None;
        let mut bytes = 0u64;
        loop {
            let chunk = next_chunk(&self.tarn, &mut reader, &mut bytes).await?;
            if let Some(task) = pending.take() {
                let (job, res) = task.await.map_err(join_error)?;
                res?;
                progress(UploadProgress {
                    bytes: job.ingest.bytes(),
                    rows: job.ingest.rows(),
                });
                idle = Some(job);
            }
            if chunk.is_empty() {
                break;
            }
            let mut job = idle.take().ok_or_else(|| internal("no upload job"))?;
            pending = Some(tokio::task::spawn_blocking(move || {
                let res = job.push(&chunk);
                (job, res)
            }));
        }
        let mut job = idle.take().ok_or_else(|| internal("no upload job"))?;
        let (job, finished) = tokio::task::spawn_blocking(move || {
            let res = job.finish();
            (job, res)
        })
        .await
        .map_err(join_error)?;
        let (columns, attach) = finished?;
        let rows = job.ingest.rows();
        progress(UploadProgress { bytes, rows });
        self.tarn.check_open()?;

        // The workspace may have gone, or been replaced by a new one of the same id (or
        // the key been revoked, or the name been taken) while the file streamed: checked
        // again under the DDL lock.
        let Locked {
            ddl, org, catalog, ..
        } = self.lock_and_recheck(op, ws).await?;
        membership.check()?;
        check_same_workspace(&catalog, &org, ws, &bound)?;
        taken(&catalog, &org)?;
        // (Checked when the first batch was staged; a file without rows gets here first.)
        for c in columns.iter() {
            tarn_sql::check_column_name(&c.name)?;
        }
        let def = TableDef {
            id: table,
            org_id: org,
            workspace_id: ws.to_string(),
            name: table_name.to_string(),
            engine: true,
            columns: columns
                .iter()
                .enumerate()
                .map(|(i, c)| ColumnDef {
                    nullable: c.nullable,
                    vector_dim: c.dim,
                    ..ColumnDef::plain(column_id(i), c.name.clone(), sql_type(c.ty))
                })
                .collect(),
            next_column_id: column_id(columns.len()),
            unique_constraints: vec![],
            created_at: tarn_catalog::Timestamp::now(),
        };
        let mut ops = vec![Op::Catalog(CatalogOp::CreateTable(def))];
        ops.extend(attach);
        // The commit runs in a task of its own that holds the stager until it is done:
        // a commit under way completes even if this future is given up (SPEC §3), and
        // the staged rows stay until it has taken them.
        let tarn = self.tarn.clone();
        tokio::spawn(async move {
            let res = tarn.commit(ops, vec![ddl]).await;
            drop(job);
            res
        })
        .await
        .map_err(join_error)??;
        Ok(UploadedTable {
            name: table_name.to_string(),
            row_count: rows,
            columns: columns.into_iter().map(|c| c.name).collect(),
        })
    }
}
