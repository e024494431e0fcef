//! The key fast path: `SELECT cols FROM "ws"."t" WHERE key = literal` answered straight
//! from the key index, without DataFusion's planner (whose end-to-end floor is about
//! 200 µs a statement; a key lookup is a few µs).
//!
//! Only statements whose answer is certain to equal the planner's take this path: plain
//! column projections, a WHERE that is exactly equalities on every column of one key,
//! and literals that convert to the key column's type without rounding or
//! reinterpretation (integer literals for integer keys, strings for text keys).
//! Everything else returns `None` and goes through the planner.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::ast::{SelectItem, Statement};

use crate::Result;
use crate::ast::ident::normalize;
use crate::ast::key_predicate::{
    column_resolver, key_predicate, plain_wildcard, single_table_select, target,
};
use crate::ast::types::column_field;
use crate::datafusion_ext::provider::key_rows;
use crate::datafusion_ext::provider::ready_keys;
use crate::statement::result::StatementResult;
use crate::statement::shared::Shared;

impl Shared {
    /// Answers `stmt` through a key index if it is a key lookup (see the module docs).
    pub(crate) async fn try_key_lookup(
        &self,
        org: &str,
        stmt: &Statement,
    ) -> Result<Option<StatementResult>> {
        let Statement::Query(q) = stmt else {
            return Ok(None);
        };
        if q.order_by.is_some() || q.limit_clause.is_some() {
            return Ok(None);
        }
        let Some((sel, name, alias)) = single_table_select(q) else {
            return Ok(None);
        };
        let Some(selection) = &sel.selection else {
            return Ok(None);
        };
        let catalog = self.db.catalog();
        let Some((def, qualifier)) = target(&catalog, org, name, alias) else {
            return Ok(None);
        };
        let column = column_resolver(def, &qualifier);
        // Output columns and names.
        let mut outputs: Vec<(usize, String)> = Vec::new();
        for item in &sel.projection {
            match item {
                SelectItem::Wildcard(opts) if plain_wildcard(opts) => {
                    outputs.extend(
                        def.columns
                            .iter()
                            .enumerate()
                            .map(|(i, c)| (i, c.name.clone())),
                    );
                }
                SelectItem::UnnamedExpr(e) => {
                    let Some(i) = column(e) else {
                        return Ok(None);
                    };
                    outputs.push((i, def.columns[i].name.clone()));
                }
                SelectItem::ExprWithAlias { expr, alias } => {
                    let Some(i) = column(expr) else {
                        return Ok(None);
                    };
                    outputs.push((i, normalize(alias)));
                }
                _ => return Ok(None),
            }
        }
        if outputs.is_empty() {
            return Ok(None);
        }
        let Some((spec, arrays)) = key_predicate(def, &catalog, selection, &column) else {
            return Ok(None);
        };
        let Some(store) = self.db.table(def.id) else {
            return Ok(None);
        };
        ready_keys(&store, &spec).await?;
        let (version, found) = store.key_lookup(&spec, &arrays)?;
        let row_ids = found.into_iter().next().unwrap_or_default();
        let fields: Vec<Field> = outputs
            .iter()
            .map(|(i, name)| {
                let c = &def.columns[*i];
                column_field(name, &c.ty, c.nullable)
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let columns: Vec<Option<usize>> = outputs.iter().map(|(i, _)| Some(*i)).collect();
        let batches = key_rows(def, &version, &row_ids, columns, schema.clone())?;
        Ok(Some(StatementResult {
            columns: outputs.into_iter().map(|(_, n)| n).collect(),
            schema,
            batches: Some(batches),
            rows_affected: 0,
            notices: Vec::new(),
        }))
    }
}
