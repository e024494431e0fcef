//! Views: a name in a workspace for a stored query, and what it reads (the tables and
//! views it depends on, so that dropping or changing one of them can be refused or
//! cascaded). A view has no rows of its own; SQL expands it where it is read.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Catalog, TableId, Timestamp};

/// Immutable internal id of a view (its own sequence, apart from table ids: a view
/// has no storage).
pub type ViewId = u64;

/// A column of a view: its name, fixed when the view was created, and the PostgreSQL
/// name of its type then (for listings; the type is the query's when it is read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewColumn {
    /// Column name.
    pub name: String,
    /// PostgreSQL type name (`int8`, `text`, `_float4`, …).
    pub type_name: String,
}

/// A view definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewDef {
    /// Immutable internal id.
    pub id: ViewId,
    /// Owning organization.
    pub org_id: String,
    /// Workspace (SQL schema).
    pub workspace_id: String,
    /// Current name, unique among the relations of the workspace.
    pub name: String,
    /// The defining query as SQL text (parameters bound, every relation schema-qualified).
    pub sql: String,
    /// The view's columns in order.
    pub columns: Vec<ViewColumn>,
    /// Whether the query's own output columns are matched to [`ViewDef::columns`] by
    /// name (`source_names`) rather than by position: a query whose select list has a
    /// `*` keeps the columns it had when a table it reads gains one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_names: Option<Vec<String>>,
    /// Tables the query reads (directly).
    pub tables: Vec<TableId>,
    /// Views the query reads (directly).
    pub views: Vec<ViewId>,
    /// When it was made (stored as ISO 8601 text).
    #[serde(with = "crate::time::iso_text")]
    pub created_at: Timestamp,
}

impl Catalog {
    /// A view by (organization, workspace, name).
    pub fn view(&self, org_id: &str, ws_id: &str, name: &str) -> Option<&ViewDef> {
        self.view_names
            .get(&(org_id.to_string(), ws_id.to_string(), name.to_string()))
            .and_then(|id| self.views.get(id))
            .map(Arc::as_ref)
    }

    /// A view by id.
    pub fn view_by_id(&self, id: ViewId) -> Option<&ViewDef> {
        self.views.get(&id).map(Arc::as_ref)
    }

    /// Views of a workspace, by name.
    pub fn views_of(&self, org_id: &str, ws_id: &str) -> Vec<&ViewDef> {
        let mut views: Vec<_> = self
            .views
            .values()
            .filter(|v| v.org_id == org_id && v.workspace_id == ws_id)
            .map(Arc::as_ref)
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        views
    }

    /// The id the next created view gets.
    pub fn next_view_id(&self) -> ViewId {
        self.next_view_id
    }

    /// How many views deep view `id` reads: 1 when it reads only tables (0 for no
    /// view). Derived from what each view reads, so that replacing a view never leaves
    /// its readers with a stale figure.
    pub fn view_depth(&self, id: ViewId) -> u32 {
        self.views.get(&id).map_or(0, |v| {
            1 + v
                .views
                .iter()
                .map(|w| self.view_depth(*w))
                .max()
                .unwrap_or(0)
        })
    }

    /// How many levels of views read view `id`, through each other (0 when none does).
    pub fn view_height(&self, id: ViewId) -> u32 {
        self.views_reading_view(id)
            .iter()
            .map(|r| 1 + self.view_height(r.id))
            .max()
            .unwrap_or(0)
    }

    /// Views that read table `table` directly.
    pub fn views_reading_table(&self, table: TableId) -> Vec<&ViewDef> {
        self.views
            .values()
            .filter(|v| v.tables.contains(&table))
            .map(Arc::as_ref)
            .collect()
    }

    /// Views that read view `view` directly.
    pub fn views_reading_view(&self, view: ViewId) -> Vec<&ViewDef> {
        self.views
            .values()
            .filter(|v| v.views.contains(&view))
            .map(Arc::as_ref)
            .collect()
    }

    /// Every view that reads the given tables or views, directly or through other
    /// views, in an order in which each comes after every view that reads it (the
    /// order to drop them in).
    pub fn dependent_views(&self, tables: &[TableId], views: &[ViewId]) -> Vec<ViewId> {
        let mut found: Vec<ViewId> = Vec::new();
        let mut frontier: Vec<ViewId> = self
            .views
            .values()
            .filter(|v| {
                v.tables.iter().any(|t| tables.contains(t))
                    || v.views.iter().any(|w| views.contains(w))
            })
            .map(|v| v.id)
            .collect();
        while let Some(id) = frontier.pop() {
            if found.contains(&id) || views.contains(&id) {
                continue;
            }
            found.push(id);
            frontier.extend(self.views_reading_view(id).iter().map(|v| v.id));
        }
        // Readers before what they read: deepest first.
        found.sort_by_key(|id| std::cmp::Reverse(self.view_depth(*id)));
        found
    }

    pub(crate) fn insert_view(&mut self, v: ViewDef) {
        self.view_names.insert(
            (v.org_id.clone(), v.workspace_id.clone(), v.name.clone()),
            v.id,
        );
        self.next_view_id = self.next_view_id.max(v.id + 1);
        self.views.insert(v.id, Arc::new(v));
    }

    /// Forgets view `id`; its definition, still shared with the published catalog.
    pub(crate) fn remove_view(&mut self, id: ViewId) -> Option<Arc<ViewDef>> {
        let v = self.views.remove(&id)?;
        self.view_names
            .remove(&(v.org_id.clone(), v.workspace_id.clone(), v.name.clone()));
        Some(v)
    }

    /// Forgets every view that reads a table or view that no longer exists (and the
    /// views that read those): SQL refuses or cascades such drops itself, and the
    /// catalog never keeps a view it could not expand.
    pub(crate) fn remove_dangling_views(&mut self) {
        loop {
            let dangling: Vec<ViewId> = self
                .views
                .values()
                .filter(|v| {
                    v.tables.iter().any(|t| !self.tables.contains_key(t))
                        || v.views.iter().any(|w| !self.views.contains_key(w))
                })
                .map(|v| v.id)
                .collect();
            if dangling.is_empty() {
                return;
            }
            for id in dangling {
                self.remove_view(id);
            }
        }
    }

    pub(crate) fn remove_views(&mut self, pred: impl Fn(&ViewDef) -> bool) {
        let ids: Vec<ViewId> = self
            .views
            .values()
            .filter(|v| pred(v))
            .map(|v| v.id)
            .collect();
        for id in ids {
            self.remove_view(id);
        }
    }
}
