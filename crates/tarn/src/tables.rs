//! Tables as resources: listing, details and dropping (creating one is SQL or an
//! upload).

use crate::{ColumnInfo, Error, IndexInfo, Operation, Result, Session, TableDetails, TableSummary};

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
        let (access, _guards) = self.authorize_call(Operation::DropTable, ws).await?;
        let sql = format!(
            "DROP TABLE \"{}\".\"{}\"",
            ws.replace('"', "\"\""),
            table.replace('"', "\"\"")
        );
        self.run(access, ws, &sql, &[]).await.map(|_| ())
    }
}
