//! CREATE INDEX and DROP INDEX of `engine_index` indexes (SPEC §5): the statement, its
//! validation and the catalog record. Building and using an index is storage's and
//! search's business; this module only decides what may be declared.
//!
//! Where PostgreSQL and the spec are silent:
//! - A text column has no default index type (`bm25` and `exact_text` both fit), so
//!   CREATE INDEX on one without `WITH (index_type = …)` is 400 asking for it.
//! - A column has at most one index of each type (a second is 409); a text column may
//!   have both a `bm25` and an `exact_text` index.
//! - Index names share the workspace's relation namespace with tables, as in PostgreSQL.
//!   A name may be left out (PostgreSQL's `<table>_<column>_idx`, numbered on a clash);
//!   it may be qualified only with its table's workspace.
//! - `DESC`/`ASC`, `NULLS FIRST/LAST` and `CONCURRENTLY` are accepted and mean nothing.

use std::collections::BTreeMap;

use datafusion::sql::sqlparser::ast::{self, BinaryOperator, Expr, ObjectName, Value};
use tarn_catalog::{CatalogOp, ColumnDef, IndexDef, IndexType, SqlType, TableDef};

use crate::ast::ident::{name_parts, normalize, quoted};
use crate::error::{Error, Result, bad};
use crate::statement::result::StatementResult;
use crate::statement::txn::Txn;

/// The only index access method Tarn has.
const METHOD: &str = "engine_index";

/// Longest relation name, as in PostgreSQL.
const MAX_NAME: usize = 63;

fn is_text(ty: &SqlType) -> bool {
    matches!(ty, SqlType::Text | SqlType::Varchar(_))
}

/// Checks that `col` can carry an index of type `ty` (`given` is the name as written).
fn check_column_type(ty: IndexType, given: &str, col: &ColumnDef) -> Result<()> {
    let (fits, wants) = match ty {
        IndexType::Hnsw => (matches!(col.ty, SqlType::Vector { .. }), "a FLOAT4[]"),
        IndexType::Maxsim => (col.ty == SqlType::MultiVector, "a FLOAT4[][]"),
        IndexType::Bm25 | IndexType::ExactText => (is_text(&col.ty), "a text or varchar"),
        _ => (false, "another"),
    };
    if fits {
        Ok(())
    } else {
        bad(format!(
            "index type \"{given}\" needs {wants} column, but column \"{}\" is {}",
            col.name,
            col.ty.sql_name()
        ))
    }
}

/// `WITH (name = value, …)` as (lower-case name, value text) pairs.
fn with_options(exprs: &[Expr]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(exprs.len());
    for e in exprs {
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } = e
        else {
            return bad(format!("index options must be name = value, not {e}"));
        };
        let Expr::Identifier(key) = left.as_ref() else {
            return bad(format!("index options must be name = value, not {e}"));
        };
        let key = normalize(key);
        let value = match right.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::Number(s, _) => Some(s.clone()),
                Value::Boolean(b) => Some(b.to_string()),
                _ => None,
            },
            Expr::Identifier(id) => Some(normalize(id)),
            _ => None,
        };
        let Some(value) = value else {
            return bad(format!("invalid value for parameter \"{key}\": {right}"));
        };
        if out.iter().any(|(k, _)| *k == key) {
            return bad(format!("parameter \"{key}\" specified more than once"));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// Checks the options of an index of type `ty` (other than `index_type`).
fn check_options(ty: IndexType, options: &BTreeMap<String, String>) -> Result<()> {
    for (key, value) in options {
        match (ty, key.as_str()) {
            (IndexType::Hnsw | IndexType::Maxsim, "m" | "ef_construction" | "ef_search") => {
                let (lo, hi) = match key.as_str() {
                    "m" => (2, tarn_vector::HnswParams::MAX_M as u32),
                    _ => (1, 100_000),
                };
                if !value.parse::<u32>().is_ok_and(|v| (lo..=hi).contains(&v)) {
                    return bad(format!(
                        "invalid value for integer option \"{key}\": {value} (between {lo} and {hi})"
                    ));
                }
            }
            (IndexType::Bm25, "tokenizer") => {
                if !["en_stem", "default", "whitespace", "raw", "ngram"].contains(&value.as_str()) {
                    return bad(format!(
                        "invalid value for parameter \"tokenizer\": \"{value}\" (use en_stem, default, whitespace, raw or ngram)"
                    ));
                }
            }
            _ => return bad(format!("unrecognized parameter \"{key}\"")),
        }
    }
    Ok(())
}

impl Txn<'_> {
    pub(crate) async fn create_index(&mut self, ci: ast::CreateIndex) -> Result<StatementResult> {
        self.lock_ddl().await;
        let def = self.resolve(&ci.table_name)?;
        let Some(def) = self.lock_table(def.id).await? else {
            return Err(Error::NotFound(format!(
                "relation \"{}\".\"{}\" does not exist",
                def.workspace_id, def.name
            )));
        };
        if ci.unique {
            return bad("CREATE UNIQUE INDEX is not supported; declare a UNIQUE constraint");
        }
        if !ci.include.is_empty()
            || ci.nulls_distinct.is_some()
            || ci.predicate.is_some()
            || !ci.index_options.is_empty()
            || !ci.alter_options.is_empty()
        {
            return bad(format!(
                "only CREATE INDEX [IF NOT EXISTS] name ON table USING {METHOD} (column) [WITH (…)] is supported"
            ));
        }
        match &ci.using {
            Some(ast::IndexType::Custom(m)) if normalize(m) == METHOD => {}
            Some(ast::IndexType::Custom(m)) => {
                return bad(format!("access method \"{}\" does not exist", normalize(m)));
            }
            Some(other) => {
                return bad(format!(
                    "access method \"{}\" is not supported; use USING {METHOD}",
                    other.to_string().to_lowercase()
                ));
            }
            None => {
                return bad(format!(
                    "access method \"btree\" is not supported; use USING {METHOD}"
                ));
            }
        }
        if !def.engine {
            return bad(format!(
                "{METHOD} needs a table created USING engine, and {} is not",
                quoted(&[def.workspace_id.clone(), def.name.clone()])
            ));
        }
        let [column] = ci.columns.as_slice() else {
            return bad(format!(
                "an {METHOD} index covers exactly one column, not {}",
                ci.columns.len()
            ));
        };
        let col = match (&column.column.expr, &column.operator_class) {
            (Expr::Identifier(id), None) => {
                let name = normalize(id);
                def.column(&name)
                    .cloned()
                    .ok_or_else(|| Error::BadRequest(format!("column \"{name}\" does not exist")))?
            }
            (_, Some(class)) => {
                return bad(format!("operator class \"{class}\" does not exist"));
            }
            (other, None) => {
                return bad(format!(
                    "an {METHOD} index covers a column, not the expression {other}"
                ));
            }
        };

        let mut options: BTreeMap<String, String> = with_options(&ci.with)?.into_iter().collect();
        let (index_type, given) = match options.remove("index_type") {
            Some(given) => {
                let given = given.to_lowercase();
                let ty = IndexType::parse(&given).ok_or_else(|| {
                    Error::BadRequest(format!(
                        "invalid value for parameter \"index_type\": \"{given}\" (use hnsw, clustered, clustered_quantized, maxsim, bm25 or exact_text)"
                    ))
                })?;
                (ty, given)
            }
            None => match &col.ty {
                SqlType::Vector { .. } => (IndexType::Hnsw, "hnsw".into()),
                SqlType::MultiVector => (IndexType::Maxsim, "maxsim".into()),
                t if is_text(t) => {
                    return bad(format!(
                        "column \"{}\" is text: say which index it gets, WITH (index_type = 'bm25') for text search or WITH (index_type = 'exact_text') for equality lookups",
                        col.name
                    ));
                }
                other => {
                    return bad(format!(
                        "{METHOD} cannot index column \"{}\" of type {}",
                        col.name,
                        other.sql_name()
                    ));
                }
            },
        };
        check_column_type(index_type, &given, &col)?;
        check_options(index_type, &options)?;

        let name = self.index_name(&ci.name, &def, &col)?;
        if self
            .catalog
            .relation_exists(&self.org, &def.workspace_id, &name)
        {
            if ci.if_not_exists {
                return Ok(StatementResult::none(0));
            }
            return Err(Error::Conflict(format!(
                "relation \"{name}\" already exists"
            )));
        }
        if let Some(existing) = self
            .catalog
            .indexes_of(def.id)
            .into_iter()
            .find(|i| i.column == col.id && i.index_type == index_type)
        {
            return Err(Error::Conflict(format!(
                "column \"{}\" of relation \"{}\" already has an index of type \"{}\": \"{}\"",
                col.name,
                def.name,
                index_type.as_str(),
                existing.name
            )));
        }
        self.catalog_op(CatalogOp::CreateIndex(IndexDef {
            id: self.catalog.next_index_id(),
            name,
            table_id: def.id,
            column: col.id,
            index_type,
            options,
            created_at: tarn_catalog::Timestamp::now(),
        }))?;
        if matches!(
            index_type,
            IndexType::Hnsw | IndexType::Maxsim | IndexType::Bm25
        ) {
            self.build_indexes.push(def.id);
        }
        Ok(StatementResult::none(0))
    }

    /// The name of a new index: as given (optionally qualified with its table's
    /// workspace), or PostgreSQL's `<table>_<column>_idx`, numbered until it is free.
    fn index_name(
        &self,
        given: &Option<ObjectName>,
        def: &TableDef,
        col: &ColumnDef,
    ) -> Result<String> {
        let Some(given) = given else {
            let mut base = format!("{}_{}", def.name, col.name);
            while base.len() > MAX_NAME - "_idx99".len() {
                base.pop();
            }
            let mut name = format!("{base}_idx");
            let mut n = 1;
            while self
                .catalog
                .relation_exists(&self.org, &def.workspace_id, &name)
            {
                name = format!("{base}_idx{n}");
                n += 1;
            }
            return Ok(name);
        };
        let parts = name_parts(given)?;
        let name = match parts.as_slice() {
            [n] => n.clone(),
            [ws, n] if *ws == def.workspace_id => n.clone(),
            [_, _] => {
                return bad(format!(
                    "index {} must be in the workspace of its table, \"{}\"",
                    quoted(&parts),
                    def.workspace_id
                ));
            }
            _ => return bad(format!("improper qualified name: {given}")),
        };
        crate::statement::ddl::check_name("index", &name)?;
        Ok(name)
    }

    pub(crate) async fn drop_indexes(
        &mut self,
        names: &[ObjectName],
        if_exists: bool,
    ) -> Result<StatementResult> {
        self.lock_ddl().await;
        // Every name is resolved before any index is dropped: one named twice is
        // dropped once (PostgreSQL's `DROP INDEX i, i`).
        let mut found_ids = Vec::with_capacity(names.len());
        for name in names {
            let parts = name_parts(name)?;
            let (ws, index) = match parts.as_slice() {
                [n] => (self.ws.clone(), n.clone()),
                [ws, n] => (ws.clone(), n.clone()),
                _ => return bad(format!("improper qualified name: {name}")),
            };
            if self.catalog.workspace(&self.org, &ws).is_none() {
                if if_exists {
                    continue;
                }
                return Err(Error::NotFound(format!("schema \"{ws}\" does not exist")));
            }
            let Some(found) = self.catalog.index(&self.org, &ws, &index).cloned() else {
                if self.catalog.table(&self.org, &ws, &index).is_some() {
                    return bad(format!("\"{index}\" is not an index; use DROP TABLE"));
                }
                if if_exists {
                    continue;
                }
                return Err(Error::NotFound(format!("index \"{index}\" does not exist")));
            };
            if !found_ids.iter().any(|(id, _)| *id == found.id) {
                found_ids.push((found.id, found.table_id));
            }
        }
        for (index_id, table_id) in found_ids {
            if self.lock_table(table_id).await?.is_none() {
                continue;
            }
            // The table lock refreshed the catalog: the index may be gone by now.
            if self.catalog.index_by_id(index_id).is_some() {
                self.catalog_op(CatalogOp::DropIndex { index_id })?;
            }
        }
        Ok(StatementResult::none(0))
    }
}
