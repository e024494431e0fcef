//! Who may do what (SPEC §1 "Permissions"): one table, [`PERMISSIONS`], with a row for
//! every [`Session`] method, and the one check, [`Session::authorize`], that every
//! method runs before it does anything else.
//!
//! The order of the checks decides which error a caller sees when several apply, and
//! it is chosen so that nothing leaks:
//!
//! 1. the database is open (500 `the database is closed`);
//! 2. the API key still exists and is not revoked (401), read at every call, so a
//!    revocation ends sessions already open;
//! 3. the key's rate limit (429);
//! 4. the scope: an org-scoped call without an organization is 400 `organization id
//!    required`; an organization the user is not a member of — whether it exists or
//!    not, and including one the user was just removed from — is 404, as is a
//!    workspace the organization does not have;
//! 5. the role (403), only once the caller has proved membership, so a 403 never tells
//!    an outsider that something exists.
//!
//! Calls that change the catalog check the key, scope and role again under the DDL lock
//! ([`Session::recheck`]); SQL calls hold gates that revoking the key or removing the
//! membership waits for ([`Gates`]). Either way, nothing a revoked key or a removed
//! member does lands after the revocation or removal returns.

use std::collections::HashMap;
use std::sync::Arc;

use tarn_catalog::{Catalog, Role};
use tokio::sync::{OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::{Error, ErrorKind, Result, Session};

/// A [`Session`] method, as named in SPEC §1 (the names are the contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// [`Session::with_org`].
    WithOrg,
    /// [`Session::me`].
    Me,
    /// [`Session::organizations`].
    Organizations,
    /// [`Session::organization`].
    Organization,
    /// [`Session::create_organization`].
    CreateOrganization,
    /// [`Session::update_organization`].
    UpdateOrganization,
    /// [`Session::delete_organization`].
    DeleteOrganization,
    /// [`Session::members`].
    Members,
    /// [`Session::add_member`].
    AddMember,
    /// [`Session::update_member`].
    UpdateMember,
    /// [`Session::remove_member`].
    RemoveMember,
    /// [`Session::workspaces`].
    Workspaces,
    /// [`Session::workspace`].
    Workspace,
    /// [`Session::create_workspace`].
    CreateWorkspace,
    /// [`Session::update_workspace`].
    UpdateWorkspace,
    /// [`Session::delete_workspace`].
    DeleteWorkspace,
    /// [`Session::tables`].
    Tables,
    /// [`Session::table`].
    Table,
    /// [`Session::drop_table`].
    DropTable,
    /// [`Session::views`].
    Views,
    /// [`Session::view`].
    View,
    /// [`Session::query`].
    Query,
    /// [`Session::query_arrow`].
    QueryArrow,
    /// [`Session::insert_arrow`].
    InsertArrow,
    /// [`Session::query_batch`].
    QueryBatch,
    /// [`Session::upload_table`].
    UploadTable,
    /// [`Session::upload_table_with_progress`].
    UploadTableWithProgress,
    /// [`Session::bind_workspace`].
    BindWorkspace,
    /// [`Session::upload_file`].
    UploadFile,
    /// [`Session::files`].
    Files,
    /// [`Session::file`].
    File,
    /// [`Session::file_content`].
    FileContent,
    /// [`Session::delete_file`].
    DeleteFile,
}

/// What a call is about, which decides what membership it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Nothing is checked: the method only builds a value (every call made with that
    /// value is checked in turn).
    Unchecked,
    /// The caller's own user: any valid key.
    User,
    /// The organization named by the call's argument (the session's organization does
    /// not matter).
    NamedOrg,
    /// The session's organization ([`Session::with_org`]); 400 without one.
    SessionOrg,
    /// A workspace, named by the call's argument, of the session's organization.
    Workspace,
}

/// One row of the permission table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Permission {
    /// The method.
    pub operation: Operation,
    /// The method's name on [`Session`].
    pub method: &'static str,
    /// What the call is about.
    pub scope: Scope,
    /// The least role it needs in that organization (`None` outside organizations).
    pub role: Option<Role>,
}

const fn row(
    operation: Operation,
    method: &'static str,
    scope: Scope,
    role: Option<Role>,
) -> Permission {
    Permission {
        operation,
        method,
        scope,
        role,
    }
}

const ADMIN: Option<Role> = Some(Role::Admin);
const MEMBER: Option<Role> = Some(Role::Member);

/// SPEC §1's permission matrix, one row per [`Session`] method, in the order of
/// [`Operation`] (a unit test holds the two in step; `tests/tenancy.rs` holds the rows
/// in step with the methods `Session` has).
pub static PERMISSIONS: &[Permission] = &{
    use Operation as O;
    use Scope as S;
    [
        row(O::WithOrg, "with_org", S::Unchecked, None),
        row(O::Me, "me", S::User, None),
        row(O::Organizations, "organizations", S::User, None),
        row(O::Organization, "organization", S::NamedOrg, MEMBER),
        row(O::CreateOrganization, "create_organization", S::User, None),
        row(
            O::UpdateOrganization,
            "update_organization",
            S::NamedOrg,
            ADMIN,
        ),
        row(
            O::DeleteOrganization,
            "delete_organization",
            S::NamedOrg,
            ADMIN,
        ),
        row(O::Members, "members", S::NamedOrg, MEMBER),
        row(O::AddMember, "add_member", S::NamedOrg, ADMIN),
        row(O::UpdateMember, "update_member", S::NamedOrg, ADMIN),
        row(O::RemoveMember, "remove_member", S::NamedOrg, ADMIN),
        row(O::Workspaces, "workspaces", S::SessionOrg, MEMBER),
        row(O::Workspace, "workspace", S::Workspace, MEMBER),
        row(
            O::CreateWorkspace,
            "create_workspace",
            S::SessionOrg,
            MEMBER,
        ),
        row(O::UpdateWorkspace, "update_workspace", S::Workspace, MEMBER),
        row(O::DeleteWorkspace, "delete_workspace", S::Workspace, ADMIN),
        row(O::Tables, "tables", S::Workspace, MEMBER),
        row(O::Table, "table", S::Workspace, MEMBER),
        row(O::DropTable, "drop_table", S::Workspace, MEMBER),
        row(O::Views, "views", S::Workspace, MEMBER),
        row(O::View, "view", S::Workspace, MEMBER),
        row(O::Query, "query", S::Workspace, MEMBER),
        row(O::QueryArrow, "query_arrow", S::Workspace, MEMBER),
        row(O::InsertArrow, "insert_arrow", S::Workspace, MEMBER),
        row(O::QueryBatch, "query_batch", S::Workspace, MEMBER),
        row(O::UploadTable, "upload_table", S::Workspace, MEMBER),
        row(
            O::UploadTableWithProgress,
            "upload_table_with_progress",
            S::Workspace,
            MEMBER,
        ),
        row(O::BindWorkspace, "bind_workspace", S::Workspace, MEMBER),
        row(O::UploadFile, "upload_file", S::Workspace, MEMBER),
        row(O::Files, "files", S::Workspace, MEMBER),
        row(O::File, "file", S::Workspace, MEMBER),
        row(O::FileContent, "file_content", S::Workspace, MEMBER),
        row(O::DeleteFile, "delete_file", S::Workspace, MEMBER),
    ]
};

impl Operation {
    /// This method's row of [`PERMISSIONS`].
    pub fn permission(self) -> &'static Permission {
        &PERMISSIONS[self as usize]
    }
}

/// What [`Session::authorize`] established: the catalog it checked against and, for
/// org-scoped calls, the organization.
pub(crate) struct Access {
    pub catalog: Arc<Catalog>,
    pub org: Option<String>,
}

impl Access {
    /// The organization of an org-scoped call.
    pub fn org(&self) -> &str {
        self.org.as_deref().unwrap_or_default()
    }
}

/// The membership a long call (an upload) began under, watched: a removal of it raises
/// its gate's signal, so a member removed and added again while the call streamed is
/// seen, though the catalog says they are a member (SPEC §6: an upload lands under the
/// membership, as in the workspace, it started in, or not at all).
#[derive(Clone)]
pub(crate) struct MembershipWatch {
    org: String,
    signal: Option<tokio::sync::watch::Receiver<bool>>,
}

impl MembershipWatch {
    /// 404 (as for a non-member) when the membership was removed since the watch began.
    /// Called under the DDL lock, where a removal commits.
    pub fn check(&self) -> Result<()> {
        if self
            .signal
            .as_ref()
            .is_some_and(|s| s.has_changed().unwrap_or(true))
        {
            return Err(org_not_found(&self.org));
        }
        Ok(())
    }
}

pub(crate) fn org_not_found(id: &str) -> Error {
    Error::not_found(format!(
        "organization {} does not exist",
        tarn_catalog::shown(id)
    ))
}

pub(crate) fn ws_not_found(id: &str) -> Error {
    Error::not_found(format!(
        "workspace {} does not exist",
        tarn_catalog::shown(id)
    ))
}

/// The identity (`WorkspaceRecord::uid`) of workspace `ws` of `org` in `catalog`: what a
/// long call (an upload) is bound to when it starts, so that it lands in that workspace
/// or nowhere, never in another one created under the same id meanwhile.
pub(crate) fn workspace_identity(catalog: &Catalog, org: &str, ws: &str) -> Result<String> {
    catalog
        .workspace(org, ws)
        .map(|w| w.uid.clone())
        .ok_or_else(|| ws_not_found(ws))
}

/// 404 unless workspace `ws` of `org` in `catalog` (read under the DDL lock, where the
/// call commits) is still the one `bound` identifies: deleted, or deleted and created
/// again under the same id, it is not the workspace the call started in.
pub(crate) fn check_same_workspace(
    catalog: &Catalog,
    org: &str,
    ws: &str,
    bound: &str,
) -> Result<()> {
    match catalog.workspace(org, ws) {
        Some(w) if w.uid == bound => Ok(()),
        Some(_) => Err(Error::not_found(format!(
            "workspace \"{ws}\" was deleted while the upload ran (the workspace \"{ws}\" there now is a new one)"
        ))),
        None => Err(ws_not_found(ws)),
    }
}

/// What a catalog-changing call holds once [`Session::lock_and_recheck`] returns.
pub(crate) struct Locked {
    /// The DDL lock, to hand to the commit.
    pub ddl: OwnedMutexGuard<()>,
    /// The catalog as it is under the lock.
    pub catalog: Arc<Catalog>,
    /// The organization of org-scoped calls (empty for the others).
    pub org: String,
}

/// Gates that make revoking a key and removing a member take effect at once, also for
/// calls already under way.
///
/// A SQL call (`query`, `query_arrow`, `query_batch`, `insert_arrow`, `drop_table`)
/// holds its key's gate and its membership's gate for reading from before its checks
/// until it returns, through any wait for the DDL or a table's writer lock.
/// `revoke_api_key` and `remove_member` first raise the gate's signal, which stops the
/// statements of those calls at their next await (they apply nothing and answer as the
/// revocation or removal would, see [`tarn_sql::CallStop`]) and refuses every new call
/// of the key or member, SQL or not; they then take the gate for writing, which waits
/// only for the commits of the calls in flight (a commit under way completes, so its
/// effect comes before the revocation), commit, and lower the signal, the catalog now
/// saying the same. The calls that change the catalog themselves (organization, member
/// and workspace calls, uploads) check the key and the membership again under the DDL
/// lock instead ([`Session::recheck`]).
#[derive(Default)]
pub(crate) struct Gates {
    gates: parking_lot::Mutex<HashMap<GateKey, Gate>>,
    /// How many signals are raised: while none is, a call's checks skip the map.
    raised: std::sync::atomic::AtomicUsize,
}

/// One key's or membership's gate.
#[derive(Clone)]
struct Gate {
    lock: Arc<RwLock<()>>,
    signal: Arc<tokio::sync::watch::Sender<bool>>,
    /// How many revocations (or removals) hold the signal raised: two of one key lower
    /// it only when the second is done.
    raises: Arc<std::sync::atomic::AtomicUsize>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            lock: Arc::default(),
            signal: Arc::new(tokio::sync::watch::Sender::new(false)),
            raises: Arc::default(),
        }
    }
}

/// A key id, or an (organization, user) membership.
#[derive(Clone, PartialEq, Eq, Hash)]
enum GateKey {
    Key(String),
    Member(String, String),
}

/// The gates a SQL call holds until it returns, and the signals that stop it.
pub(crate) struct CallGuards {
    _key: OwnedRwLockReadGuard<()>,
    _member: Option<OwnedRwLockReadGuard<()>>,
    key_signal: tokio::sync::watch::Receiver<bool>,
    member_signal: Option<tokio::sync::watch::Receiver<bool>>,
}

impl CallGuards {
    /// The signals, for the call's statements.
    fn stop(&self) -> tarn_sql::CallStop {
        let mut signals = vec![self.key_signal.clone()];
        signals.extend(self.member_signal.clone());
        tarn_sql::CallStop::new(signals)
    }

    /// Runs `fut`, a call of the SQL layer for organization `org`, stopped by these
    /// signals: its error is the revocation's or removal's if either stopped it.
    pub async fn within<T>(
        &self,
        org: &str,
        fut: impl std::future::Future<Output = tarn_sql::Result<T>>,
    ) -> Result<T> {
        // Boxed: the statement's future is large, and a caller's stack (a test's
        // `block_on`, a host's thread) holds every layer around it.
        self.stop()
            .scope(Box::pin(fut))
            .await
            .map_err(|e| self.error(e.into(), org))
    }

    /// The error of a call that failed: the revocation's or removal's if either
    /// stopped it.
    fn error(&self, e: Error, org: &str) -> Error {
        if *self.key_signal.borrow() {
            return revoked();
        }
        if self.member_signal.as_ref().is_some_and(|s| *s.borrow()) {
            return org_not_found(org);
        }
        e
    }
}

/// A raised signal, lowered when dropped (so also when the commit fails).
pub(crate) struct Raised<'a> {
    gates: &'a Gates,
    gate: Gate,
    _write: OwnedRwLockWriteGuard<()>,
}

impl Drop for Raised<'_> {
    fn drop(&mut self) {
        // Lowered before the write gate opens (fields drop after this): the calls that
        // waited for it read the catalog the commit made.
        if self
            .gate
            .raises
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.gate.signal.send_replace(false);
        }
        self.gates
            .raised
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Gates {
    fn gate(&self, key: GateKey) -> Gate {
        self.gates.lock().entry(key).or_default().clone()
    }

    /// Whether `key`'s signal is raised.
    fn is_raised(&self, key: GateKey) -> bool {
        self.gates
            .lock()
            .get(&key)
            .is_some_and(|g| *g.signal.borrow())
    }

    /// Raises `key`'s signal, then waits for the calls in flight to end.
    async fn raise(&self, key: GateKey) -> Raised<'_> {
        let gate = self.gate(key);
        self.raised
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        gate.raises
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        gate.signal.send_replace(true);
        let write = gate.lock.clone().write_owned().await;
        Raised {
            gates: self,
            gate,
            _write: write,
        }
    }

    /// Held by `revoke_api_key` while it commits.
    pub async fn revoke_key(&self, key_id: &str) -> Raised<'_> {
        self.raise(GateKey::Key(key_id.to_string())).await
    }

    /// Held by `remove_member` while it commits.
    pub async fn remove_member(&self, org: &str, user_id: &str) -> Raised<'_> {
        self.raise(GateKey::Member(org.to_string(), user_id.to_string()))
            .await
    }

    /// Whether the key is being revoked.
    fn key_raised(&self, key_id: &str) -> bool {
        self.raised.load(std::sync::atomic::Ordering::SeqCst) != 0
            && self.is_raised(GateKey::Key(key_id.to_string()))
    }

    /// Whether the membership is being removed.
    fn member_raised(&self, org: &str, user_id: &str) -> bool {
        self.raised.load(std::sync::atomic::Ordering::SeqCst) != 0
            && self.is_raised(GateKey::Member(org.to_string(), user_id.to_string()))
    }
}

pub(crate) fn revoked() -> Error {
    Error::new(ErrorKind::Unauthorized, "invalid or revoked API key")
}

impl Session {
    /// Runs every check of `op`'s row of [`PERMISSIONS`] for a call about `target` (the
    /// organization or workspace id the call names; ignored by other scopes), in the
    /// order of the module's doc, and records the key's use.
    pub(crate) fn authorize(&self, op: Operation, target: &str) -> Result<Access> {
        self.tarn.check_open()?;
        let catalog = self.tarn.catalog();
        self.check_key(&catalog)?;
        self.tarn.check_rate(&self.key_id)?;
        self.used.record();
        let org = self.permit(op, target, &catalog)?;
        Ok(Access { catalog, org })
    }

    /// Watches the session's membership of `org` from now (see [`MembershipWatch`]).
    pub(crate) fn watch_membership(&self, org: &str) -> MembershipWatch {
        let signal = (!org.is_empty()).then(|| {
            self.tarn
                .inner
                .gates
                .gate(GateKey::Member(org.to_string(), self.user_id.clone()))
                .signal
                .subscribe()
        });
        MembershipWatch {
            org: org.to_string(),
            signal,
        }
    }

    /// [`Session::authorize`] for a SQL call, holding its key's and membership's gates
    /// (see [`Gates`]) until the returned guards drop.
    pub(crate) async fn authorize_call(
        &self,
        op: Operation,
        target: &str,
    ) -> Result<(Access, CallGuards)> {
        let gates = &self.tarn.inner.gates;
        // Key first, then membership: writers take one gate each, so no cycle.
        let key_gate = gates.gate(GateKey::Key(self.key_id.clone()));
        let key = key_gate.lock.read_owned().await;
        let (member, member_signal) = match self.org.as_deref() {
            Some(org) if op.permission().scope != Scope::NamedOrg => {
                let gate = gates.gate(GateKey::Member(org.to_string(), self.user_id.clone()));
                (
                    Some(gate.lock.read_owned().await),
                    Some(gate.signal.subscribe()),
                )
            }
            _ => (None, None),
        };
        let access = self.authorize(op, target)?;
        Ok((
            access,
            CallGuards {
                _key: key,
                _member: member,
                key_signal: key_gate.signal.subscribe(),
                member_signal,
            },
        ))
    }

    /// Takes the DDL lock for a call that changes the catalog, after
    /// [`Session::authorize`], and runs [`Session::recheck`] under it.
    pub(crate) async fn lock_and_recheck(&self, op: Operation, target: &str) -> Result<Locked> {
        let ddl = self.tarn.inner.engine.locks().ddl().await;
        let catalog = self.tarn.catalog();
        let org = self.recheck(op, target, &catalog)?.unwrap_or_default();
        Ok(Locked { ddl, catalog, org })
    }

    /// The key, scope and role checks of `op` again, against the catalog as it is under
    /// the DDL lock (which the caller holds): a key revoked, a membership, role or
    /// workspace removed since [`Session::authorize`] is seen.
    fn recheck(&self, op: Operation, target: &str, catalog: &Catalog) -> Result<Option<String>> {
        self.check_key(catalog)?;
        self.permit(op, target, catalog)
    }

    /// Refuses a key revoked after connect, or being revoked: it stops working at once.
    fn check_key(&self, catalog: &Catalog) -> Result<()> {
        if catalog.api_key(&self.key_id).is_none_or(|k| k.revoked)
            || self.tarn.inner.gates.key_raised(&self.key_id)
        {
            return Err(revoked());
        }
        Ok(())
    }

    /// The scope and role checks of `op` against `catalog`. Returns the organization of
    /// org-scoped calls.
    fn permit(&self, op: Operation, target: &str, catalog: &Catalog) -> Result<Option<String>> {
        let rule = op.permission();
        let org = match rule.scope {
            Scope::Unchecked | Scope::User => return Ok(None),
            Scope::NamedOrg => target,
            Scope::SessionOrg | Scope::Workspace => {
                self.org
                    .as_deref()
                    .filter(|o| !o.is_empty())
                    .ok_or_else(|| Error::bad("organization id required"))?
            }
        };
        // Not a member (or being removed), or no such organization: the same 404.
        let role = catalog
            .role(org, &self.user_id)
            // The removal itself (a member may remove themselves) is not refused.
            .filter(|_| {
                op == Operation::RemoveMember
                    || !self.tarn.inner.gates.member_raised(org, &self.user_id)
            })
            .ok_or_else(|| org_not_found(org))?;
        if rule.scope == Scope::Workspace && catalog.workspace(org, target).is_none() {
            return Err(ws_not_found(target));
        }
        if rule.role == Some(Role::Admin) && role != Role::Admin {
            return Err(Error::new(
                ErrorKind::Forbidden,
                format!("{} requires the admin role", rule.method),
            ));
        }
        Ok(Some(org.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_the_order_of_the_operations() {
        for (i, p) in PERMISSIONS.iter().enumerate() {
            assert_eq!(p.operation as usize, i, "row {} ({})", i, p.method);
        }
    }
}
