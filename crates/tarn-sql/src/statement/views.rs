//! Views: CREATE [OR REPLACE] VIEW, DROP VIEW, ALTER VIEW … RENAME TO, the views a
//! statement reads expanded before it is checked (see `rewrite/views.rs`), and the
//! refusals that keep every view readable (a table or view that views read is not
//! dropped or changed under them without CASCADE).

use std::collections::HashMap;
use std::fmt::Display;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::sql::sqlparser::ast::{
    self, Expr, LimitClause, ObjectName, Query, TableFactor, Visit, VisitMut, Visitor,
};
use datafusion::sql::sqlparser::tokenizer::Tokenizer;
use tarn_catalog::{CatalogOp, TableId, ViewColumn, ViewDef, ViewId};

use crate::ast::dialect::EngineDialect;
use crate::ast::ident::{name_parts, normalize, quoted};
use crate::error::{Error, Result, bad};
use crate::rewrite::views::{MAX_VIEW_DEPTH, alias_items, parse_view_query, selects_wildcard};
use crate::statement::ddl::check_column_name;
use crate::statement::result::StatementResult;
use crate::statement::txn::Txn;

impl Txn<'_> {
    /// Expands the views `node` reads (names in `overrides` are tables the statement
    /// stands in itself) and writes out USING and NATURAL joins' columns
    /// (`rewrite::using_joins`). A statement that grew is bounded again as a written one is:
    /// its size and its depth.
    pub(crate) fn expand_views<T: VisitMut + Display>(
        &self,
        node: &mut T,
        overrides: &HashMap<(String, String), Arc<dyn TableProvider>>,
    ) -> Result<()> {
        let keep = |ws: &str, v: &str| overrides.contains_key(&(ws.to_string(), v.to_string()));
        let expanded = crate::rewrite::views::expand(node, &self.catalog, &self.org, &keep)?;
        // Then USING and NATURAL joins' columns, over the views' queries too.
        crate::rewrite::using_joins::rewrite(node, &|name| {
            let parts = crate::ast::ident::name_parts(name).ok()?;
            let [ws, table] = parts.as_slice() else {
                return None;
            };
            let def = self.catalog.table(&self.org, ws, table)?;
            Some(def.columns.iter().map(|c| c.name.clone()).collect())
        });
        if !expanded {
            return Ok(());
        }
        let sql = node.to_string();
        let limit = self.shared.limits.max_sql_bytes;
        if sql.len() > limit {
            return bad(format!(
                "the statement with the views it reads written out is {} bytes, over the \
                 limit of {limit} bytes (max_sql_bytes)",
                sql.len()
            ));
        }
        let tokens = Tokenizer::new(&EngineDialect::default(), &sql)
            .with_unescape(true)
            .tokenize_with_location()
            .map_err(|e| {
                Error::Internal(format!("an expanded statement does not tokenize: {e}"))
            })?;
        crate::ast::depth::check(&tokens)
    }

    /// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] "ws"."v" [(columns)] AS query`.
    pub(crate) async fn create_view(&mut self, cv: ast::CreateView) -> Result<StatementResult> {
        self.lock_ddl().await;
        if cv.materialized
            || cv.temporary
            || cv.or_alter
            || cv.secure
            || cv.to.is_some()
            || cv.params.is_some()
            || cv.with_no_schema_binding
            || cv.copy_grants
            || cv.comment.is_some()
            || !cv.cluster_by.is_empty()
            || !matches!(cv.options, ast::CreateTableOptions::None)
            || cv
                .columns
                .iter()
                .any(|c| c.data_type.is_some() || c.options.is_some())
        {
            return bad(
                "only CREATE [OR REPLACE] VIEW [IF NOT EXISTS] \"<workspace>\".\"<view>\" \
                 [(column, …)] AS <query> is supported",
            );
        }
        if cv.or_replace && cv.if_not_exists {
            return bad("CREATE OR REPLACE VIEW takes no IF NOT EXISTS");
        }
        let (ws, name) = self.new_relation_name(&cv.name, "view")?;
        let existing = self.catalog.view(&self.org, &ws, &name).cloned();
        let taken = match &existing {
            Some(_) => !cv.or_replace,
            None => self.catalog.relation_exists(&self.org, &ws, &name),
        };
        if taken {
            if cv.if_not_exists {
                return Ok(StatementResult::none(0));
            }
            return Err(Error::Conflict(format!(
                "relation \"{ws}\".\"{name}\" already exists"
            )));
        }
        let mut query = *cv.query;
        let (tables, views) = self.relations_read(&query);
        // As deep as the views it reads make it, and, replacing a view, as deep as that
        // makes the views that read it.
        let depth = 1
            + views
                .iter()
                .map(|v| self.catalog.view_depth(*v))
                .max()
                .unwrap_or(0)
            + existing
                .as_ref()
                .map_or(0, |old| self.catalog.view_height(old.id));
        if depth > MAX_VIEW_DEPTH {
            return bad(format!(
                "view \"{ws}\".\"{name}\" would make views read views {depth} deep; at most \
                 {MAX_VIEW_DEPTH} levels of views reading views are allowed"
            ));
        }
        if let Some(old) = &existing
            && (views.contains(&old.id)
                || self
                    .catalog
                    .dependent_views(&[], &[old.id])
                    .iter()
                    .any(|d| views.contains(d)))
        {
            return bad(format!(
                "view \"{ws}\".\"{name}\" would read itself (through the views it reads)"
            ));
        }
        let wildcard = selects_wildcard(&query);
        if wildcard {
            alias_items(&mut query);
        }
        let sql = query.to_string();
        // What it is stored as must read back as the same query.
        parse_view_query(&sql).map_err(|_| {
            Error::BadRequest(format!(
                "the query of view \"{ws}\".\"{name}\" cannot be stored as SQL text"
            ))
        })?;
        let (names, schema) = self.query_schema(query).await?;
        if cv.columns.len() > names.len() {
            return bad("CREATE VIEW specifies more column names than columns");
        }
        let mut columns: Vec<ViewColumn> = Vec::with_capacity(names.len());
        for (i, (field, source)) in schema.fields().iter().zip(&names).enumerate() {
            let name = cv
                .columns
                .get(i)
                .map_or_else(|| source.clone(), |c| normalize(&c.name));
            check_column_name(&name)?;
            if columns.iter().any(|c| c.name == name) {
                return bad(format!("column \"{name}\" specified more than once"));
            }
            let type_name = crate::ast::types::sql_type_of(field).map_or_else(
                |_| crate::datafusion_ext::functions::similarity::pg_type(field.data_type()),
                |t| t.sql_name(),
            );
            columns.push(ViewColumn { name, type_name });
        }
        if columns.is_empty() {
            return bad("a view needs at least one column");
        }
        let distinct_sources = names
            .iter()
            .enumerate()
            .all(|(i, n)| !names[..i].contains(n));
        let source_names = (wildcard && distinct_sources).then_some(names);
        if let Some(old) = &existing {
            check_replacement(old, &columns)?;
        }
        let def = ViewDef {
            id: existing
                .as_ref()
                .map_or_else(|| self.catalog.next_view_id(), |v| v.id),
            org_id: self.org.clone(),
            workspace_id: ws,
            name,
            sql,
            columns,
            source_names,
            tables,
            views,
            created_at: existing
                .as_ref()
                .map_or_else(tarn_catalog::Timestamp::now, |v| v.created_at),
        };
        self.catalog_op(if existing.is_some() {
            CatalogOp::ReplaceView(def)
        } else {
            CatalogOp::CreateView(def)
        })?;
        Ok(StatementResult::none(0))
    }

    /// The PostgreSQL output names and schema of `query`, planned over no rows.
    async fn query_schema(
        &self,
        mut query: Query,
    ) -> Result<(Vec<String>, datafusion::arrow::datatypes::SchemaRef)> {
        query.limit_clause = Some(LimitClause::LimitOffset {
            limit: Some(Expr::value(ast::Value::Number("0".into(), false))),
            offset: None,
            limit_by: Vec::new(),
        });
        query.fetch = None;
        let (names, schema, _) = Box::pin(self.run_query(query, HashMap::new())).await?;
        Ok((names, schema))
    }

    /// The tables and views `query` reads directly (by name; names that are neither
    /// are left for the planning of the query to report).
    fn relations_read(&self, query: &Query) -> (Vec<TableId>, Vec<ViewId>) {
        struct Reads<'a, 'e> {
            txn: &'a Txn<'e>,
            tables: Vec<TableId>,
            views: Vec<ViewId>,
        }
        impl Visitor for Reads<'_, '_> {
            type Break = ();
            fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
                if let TableFactor::Table {
                    name, args: None, ..
                } = t
                    && let Ok(parts) = name_parts(name)
                    && let [ws, n] = parts.as_slice()
                {
                    let cat = &self.txn.catalog;
                    if let Some(t) = cat.table(&self.txn.org, ws, n) {
                        if !self.tables.contains(&t.id) {
                            self.tables.push(t.id);
                        }
                    } else if let Some(v) = cat.view(&self.txn.org, ws, n)
                        && !self.views.contains(&v.id)
                    {
                        self.views.push(v.id);
                    }
                }
                ControlFlow::Continue(())
            }
        }
        let mut reads = Reads {
            txn: self,
            tables: Vec::new(),
            views: Vec::new(),
        };
        let _ = query.visit(&mut reads);
        (reads.tables, reads.views)
    }

    /// `DROP VIEW [IF EXISTS] "ws"."v" [, …] [CASCADE | RESTRICT]`.
    pub(crate) async fn drop_views(
        &mut self,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
    ) -> Result<StatementResult> {
        self.lock_ddl().await;
        let mut ids: Vec<ViewId> = Vec::with_capacity(names.len());
        for name in names {
            let parts = name_parts(name)?;
            let found = match parts.as_slice() {
                [ws, v] => self.catalog.view(&self.org, ws, v).map(|v| v.id),
                _ => None,
            };
            match found {
                Some(id) => {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                None => {
                    if let [ws, t] = parts.as_slice()
                        && self.catalog.relation_exists(&self.org, ws, t)
                    {
                        return bad(format!(
                            "{} is not a view; DROP TABLE or DROP INDEX drops it",
                            quoted(&parts)
                        ));
                    }
                    if !if_exists {
                        return Err(Error::NotFound(format!(
                            "view {} does not exist",
                            quoted(&parts)
                        )));
                    }
                }
            }
        }
        let dependents = self.catalog.dependent_views(&[], &ids);
        if !cascade && let Some(&first) = dependents.first() {
            let target = ids
                .iter()
                .find(|id| self.catalog.dependent_views(&[], &[**id]).contains(&first))
                .copied()
                .unwrap_or(ids[0]);
            return Err(Error::Conflict(format!(
                "cannot drop view {} because other objects depend on it: {}; DROP VIEW … \
                 CASCADE drops them too",
                self.view_label(target),
                self.view_list(&dependents)
            )));
        }
        // Readers first, so no op leaves a view reading one that is gone.
        let mut order = dependents;
        let mut named: Vec<ViewId> = ids;
        named.sort_by_key(|id| std::cmp::Reverse(self.catalog.view_depth(*id)));
        order.extend(named);
        for id in order {
            if self.catalog.view_by_id(id).is_some() {
                self.catalog_op(CatalogOp::DropView { view_id: id })?;
            }
        }
        Ok(StatementResult::none(0))
    }

    /// `ALTER VIEW "ws"."v" RENAME TO w` (read by the dialect as a `RenameTable`).
    pub(crate) async fn rename_view(
        &mut self,
        renames: &[ast::RenameTable],
    ) -> Result<StatementResult> {
        self.lock_ddl().await;
        for r in renames {
            let parts = name_parts(&r.old_name)?;
            let view = match parts.as_slice() {
                [ws, v] => self.catalog.view(&self.org, ws, v).cloned(),
                _ => None,
            };
            let Some(view) = view else {
                if let [ws, t] = parts.as_slice()
                    && self.catalog.relation_exists(&self.org, ws, t)
                {
                    return bad(format!(
                        "{} is not a view; ALTER TABLE … RENAME TO renames a table",
                        quoted(&parts)
                    ));
                }
                return Err(Error::NotFound(format!(
                    "view {} does not exist",
                    quoted(&parts)
                )));
            };
            let new = match name_parts(&r.new_name)?.as_slice() {
                [n] => n.clone(),
                _ => return bad("ALTER VIEW … RENAME TO takes a name without a workspace"),
            };
            crate::statement::ddl::check_table_name(&new)?;
            if new == view.name {
                continue;
            }
            let readers = self.catalog.dependent_views(&[], &[view.id]);
            if !readers.is_empty() {
                return Err(Error::Conflict(format!(
                    "cannot rename view {} because other views read it by name: {}",
                    self.view_label(view.id),
                    self.view_list(&readers)
                )));
            }
            self.catalog_op(CatalogOp::RenameView {
                view_id: view.id,
                name: new,
            })?;
        }
        Ok(StatementResult::none(0))
    }

    /// The views that read `tables`, for a DROP TABLE: a 409 unless `cascade`, when
    /// they are dropped first (readers before what they read).
    pub(crate) fn drop_views_reading(&mut self, tables: &[TableId], cascade: bool) -> Result<()> {
        let dependents = self.catalog.dependent_views(tables, &[]);
        if dependents.is_empty() {
            return Ok(());
        }
        if !cascade {
            let table = tables
                .iter()
                .find(|t| !self.catalog.views_reading_table(**t).is_empty())
                .and_then(|t| self.catalog.table_by_id(*t))
                .map(|t| format!("\"{}\".\"{}\"", t.workspace_id, t.name))
                .unwrap_or_default();
            return Err(Error::Conflict(format!(
                "cannot drop table {table} because other objects depend on it: {}; DROP TABLE \
                 … CASCADE drops them too",
                self.view_list(&dependents)
            )));
        }
        for id in dependents {
            if self.catalog.view_by_id(id).is_some() {
                self.catalog_op(CatalogOp::DropView { view_id: id })?;
            }
        }
        Ok(())
    }

    /// A 409 if views read table `table` (for ALTER TABLE changes other than adding a
    /// column: views name its columns, and the table itself, as they were). `change`
    /// reads before "table": `drop column "c" of`.
    pub(crate) fn refuse_if_views_read(&self, table: TableId, change: &str) -> Result<()> {
        let readers = self.catalog.views_reading_table(table);
        if readers.is_empty() {
            return Ok(());
        }
        let ids: Vec<ViewId> = readers.iter().map(|v| v.id).collect();
        let t = self
            .catalog
            .table_by_id(table)
            .map(|t| format!("\"{}\".\"{}\"", t.workspace_id, t.name))
            .unwrap_or_default();
        Err(Error::Conflict(format!(
            "cannot {change} table {t}: views read it ({}); drop them first (DROP VIEW), then \
             create them again",
            self.view_list(&ids)
        )))
    }

    fn view_label(&self, id: ViewId) -> String {
        self.catalog
            .view_by_id(id)
            .map(|v| format!("\"{}\".\"{}\"", v.workspace_id, v.name))
            .unwrap_or_default()
    }

    fn view_list(&self, ids: &[ViewId]) -> String {
        let mut names: Vec<String> = ids
            .iter()
            .take(10)
            .map(|id| format!("view {}", self.view_label(*id)))
            .collect();
        if ids.len() > 10 {
            names.push(format!("and {} more", ids.len() - 10));
        }
        names.join(", ")
    }
}

/// `CREATE OR REPLACE VIEW` keeps the columns the view had, in their order, with their
/// names and types; it may add columns after them (PostgreSQL's rule, so that what
/// reads the view keeps working).
fn check_replacement(old: &ViewDef, new: &[ViewColumn]) -> Result<()> {
    if new.len() < old.columns.len() {
        return bad("cannot drop columns from view");
    }
    for (o, n) in old.columns.iter().zip(new) {
        if o.name != n.name {
            return bad(format!(
                "cannot change name of view column \"{}\" to \"{}\"",
                o.name, n.name
            ));
        }
        if o.type_name != n.type_name {
            return bad(format!(
                "cannot change data type of view column \"{}\" from {} to {}",
                o.name, o.type_name, n.type_name
            ));
        }
    }
    Ok(())
}
