//! Tables and views as resources: listing, details and dropping a table (creating one
//! is SQL or an upload; views are created, replaced and dropped by SQL).

use crate::{
    ColumnInfo, Error, IndexInfo, Operation, Result, Session, TableDetails, TableSummary, ViewInfo,
};

/// A view as the API shows it.
fn view_info(v: &tarn_catalog::ViewDef) -> ViewInfo {
    ViewInfo {
        name: v.name.clone(),
        columns: v
            .columns
            .iter()
            .map(|c| ColumnInfo {
                name: c.name.clone(),
                data_type: c.type_name.clone(),
                nullable: true,
                default: None,
            })
            .collect(),
        definition: v.sql.clone(),
        created_at: v.created_at.iso(),
    }
}

impl Session {
    /// Tables of a workspace with their row counts.
    pub async fn tables(&self, ws: &str) -> Result<Vec<TableSummary>> {
        let access = self.authorize(Operation::Tables, ws)?;
        Ok(access
            .catalog
            .tables_of(access.org(), ws)
            .into_iter()
            .map(|t| TableSummary {
                name: t.name.clone(),
                row_count: self
                    .tarn
                    .db()
                    .table(t.id)
                    .map_or(0, |s| s.snapshot().row_count()),
            })
            .collect())
    }

    /// Views of a workspace, by name (SPEC §4 "Views"). [`Session::tables`] lists
    /// tables only, as the service's table list does.
    pub async fn views(&self, ws: &str) -> Result<Vec<ViewInfo>> {
        let access = self.authorize(Operation::Views, ws)?;
        let mut views: Vec<ViewInfo> = access
            .catalog
            .views_of(access.org(), ws)
            .into_iter()
            .map(view_info)
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(views)
    }

    /// One view: its columns, definition and creation time; 404 when the workspace has
    /// no view of that name (a table of that name included: see [`Session::table`]).
    pub async fn view(&self, ws: &str, view: &str) -> Result<ViewInfo> {
        let access = self.authorize(Operation::View, ws)?;
        access
            .catalog
            .view(access.org(), ws, view)
            .map(view_info)
            .ok_or_else(|| {
                Error::not_found(format!(
                    "view {}.{} does not exist",
                    tarn_catalog::shown(ws),
                    tarn_catalog::shown(view)
                ))
            })
    }

    /// One table's columns (PostgreSQL type names), row count and size.
    pub async fn table(&self, ws: &str, table: &str) -> Result<TableDetails> {
        let access = self.authorize(Operation::Table, ws)?;
        let catalog = &access.catalog;
        let def = catalog.table(access.org(), ws, table).ok_or_else(|| {
            Error::not_found(format!(
                "relation {}.{} does not exist",
                tarn_catalog::shown(ws),
                tarn_catalog::shown(table)
            ))
        })?;
        let snapshot = self.tarn.db().table(def.id).map(|s| s.snapshot());
        Ok(TableDetails {
            table_name: def.name.clone(),
            columns: def
                .columns
                .iter()
                .map(|c| ColumnInfo {
                    name: c.name.clone(),
                    data_type: c.ty.pg_name().to_string(),
                    nullable: c.nullable,
                    default: c.default.as_ref().map(|d| match d {
                        tarn_catalog::ColumnDefault::Sequence { name } => {
                            format!("nextval('{name}'::regclass)")
                        }
                        tarn_catalog::ColumnDefault::Expr { sql } => sql.clone(),
                    }),
                })
                .collect(),
            row_count: snapshot.as_ref().map_or(0, |s| s.row_count()),
            size_mb: snapshot.map_or(0.0, |s| s.size_bytes() as f64 / (1024.0 * 1024.0)),
            indexes: catalog
                .indexes_of(def.id)
                .into_iter()
                .map(|i| {
                    let (done, all) = self
                        .tarn
                        .db()
                        .index_coverage(def.id, i.id)
                        .unwrap_or((0, 0));
                    IndexInfo {
                        name: i.name.clone(),
                        column: def
                            .column_by_id(i.column)
                            .map(|c| c.name.clone())
                            .unwrap_or_default(),
                        index_type: i.index_type.as_str().to_string(),
                        options: i.options.clone(),
                        status: if done < all { "building" } else { "ready" }.to_string(),
                        segments_indexed: done as u64,
                        segments: all as u64,
                    }
                })
                .collect(),
        })
    }

    /// Drops a table (404 if it does not exist).
    pub async fn drop_table(&self, ws: &str, table: &str) -> Result<()> {
        let (access, guards) = self.authorize_call(Operation::DropTable, ws).await?;
        let sql = format!(
            "DROP TABLE \"{}\".\"{}\"",
            ws.replace('"', "\"\""),
            table.replace('"', "\"\"")
        );
        self.run(access, &guards, ws, &sql, &[]).await.map(|_| ())
    }
}
