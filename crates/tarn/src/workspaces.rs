//! Workspaces (SQL schemas), as a [`Session`] manages them.

use tarn_catalog::{CatalogOp, WorkspaceRecord};
use tarn_storage::Op;

use crate::access::{Locked, ws_not_found};
use crate::{
    Error, IdName, Operation, Result, Session, Workspace, WorkspaceDetail, WorkspaceList,
    check_display_name,
};

impl Session {
    /// Workspaces of the session's organization.
    pub async fn workspaces(&self) -> Result<WorkspaceList> {
        let access = self.authorize(Operation::Workspaces, "")?;
        Ok(WorkspaceList {
            data: access
                .catalog
                .workspaces_of(access.org())
                .into_iter()
                .map(ws_view)
                .collect(),
        })
    }

    /// One workspace.
    pub async fn workspace(&self, id: &str) -> Result<WorkspaceDetail> {
        let access = self.authorize(Operation::Workspace, id)?;
        let ws = access
            .catalog
            .workspace(access.org(), id)
            .ok_or_else(|| ws_not_found(id))?;
        Ok(WorkspaceDetail {
            workspace: ws_view(ws),
        })
    }

    /// Creates a workspace; its id is the SQL schema of its tables.
    pub async fn create_workspace(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::CreateWorkspace, "")?;
        tarn_catalog::validate_id("workspace", id)?;
        check_display_name(name)?;
        let Locked { ddl, catalog, org } = self
            .lock_and_recheck(Operation::CreateWorkspace, "")
            .await?;
        if catalog.workspace(&org, id).is_some() {
            return Err(Error::conflict(format!(
                "workspace \"{id}\" already exists"
            )));
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::CreateWorkspace(WorkspaceRecord {
                    id: id.to_string(),
                    org_id: org,
                    name: name.to_string(),
                    created_at: tarn_catalog::Timestamp::now(),
                    uid: uuid::Uuid::new_v4().to_string(),
                }))],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Renames a workspace.
    pub async fn update_workspace(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::UpdateWorkspace, id)?;
        check_display_name(name)?;
        // Checked again under the DDL lock: a workspace deleted meanwhile is a 404.
        let Locked { ddl, org, .. } = self
            .lock_and_recheck(Operation::UpdateWorkspace, id)
            .await?;
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::RenameWorkspace {
                    org_id: org,
                    workspace_id: id.to_string(),
                    name: name.to_string(),
                })],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Deletes a workspace with all its tables (admin).
    pub async fn delete_workspace(&self, id: &str) -> Result<()> {
        self.authorize(Operation::DeleteWorkspace, id)?;
        let Locked { ddl, catalog, org } = self
            .lock_and_recheck(Operation::DeleteWorkspace, id)
            .await?;
        let mut guards = vec![ddl];
        for t in catalog.tables_of(&org, id) {
            guards.push(self.locks().table(t.id).await);
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::DeleteWorkspace {
                    org_id: org,
                    workspace_id: id.to_string(),
                })],
                guards,
            )
            .await
    }
}

fn ws_view(w: &WorkspaceRecord) -> Workspace {
    Workspace {
        id: w.id.clone(),
        org_id: w.org_id.clone(),
        name: w.name.clone(),
        kind: "generic".into(),
        created_at: w.created_at.iso(),
    }
}
