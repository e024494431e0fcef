//! UPDATE and DELETE: the rows to change are read through DataFusion (or, for a SET of
//! simple values on a key, without it), then written through the transaction as
//! deletes and inserts of the new rows.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::catalog::TableProvider;
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    self, AssignmentTarget, Expr, FromTable, UpdateTableFromKind, Value,
};
use tarn_catalog::{ColumnDef, TableDef};

use crate::ast::ident::{name_parts, normalize};
use crate::ast::key_predicate::{column_resolver, key_predicate, signed_value};
use crate::datafusion_ext::provider::{EngineTable, ROWID_COLUMN, key_rows, table_schema};
use crate::error::{Error, Result, bad};
use crate::statement::result::StatementResult;
use crate::statement::txn::Txn;

use super::dml::{
    Cell, TargetRows, literal_cell, parse_query, qualifier, quote_ident, scalars_to_array,
    single_table,
};

impl Txn<'_> {
    /// Runs `SELECT rowid, <exprs> FROM <target> … WHERE …` with the target exposing
    /// row ids; returns the distinct row ids and the other columns.
    async fn read_target(&mut self, def: &TableDef, select_sql: &str) -> Result<TargetRows> {
        let (version, store) = self
            .tables
            .get(&def.id)
            .map(|t| (Arc::new(t.version.clone()), t.store.clone()))
            .ok_or_else(|| Error::Internal("read of an unlocked table".into()))?;
        // The key index answers `WHERE key = …` while this transaction has not written
        // the table yet (the scan checks that its snapshot is the published one).
        let provider: Arc<dyn TableProvider> = Arc::new(
            EngineTable::new(def.clone(), version, true)
                .with_store(store, tarn_storage::key_specs(&self.catalog, def.id)),
        );
        let overrides = HashMap::from([((def.workspace_id.clone(), def.name.clone()), provider)]);
        let q = parse_query(select_sql)?;
        let (_, schema, batches) = self.run_query(q, overrides).await?;
        self.charge_read(&batches)?;
        let batch = concat_batches(&schema, &batches)?;
        drop(batches);
        let ids = batch
            .column(0)
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| Error::Internal("row id column".into()))?
            .clone();
        // UPDATE … FROM may match a row several times; PostgreSQL changes it once.
        let mut seen = HashSet::with_capacity(ids.len());
        let keep: Vec<u64> = (0..ids.len())
            .filter(|&i| seen.insert(ids.value(i)))
            .map(|i| i as u64)
            .collect();
        let mut columns: Vec<ArrayRef> = batch.columns()[1..].to_vec();
        let mut row_ids: Vec<u64> = ids.values().to_vec();
        if keep.len() != ids.len() {
            let idx = UInt64Array::from(keep);
            columns = columns
                .iter()
                .map(|c| datafusion::arrow::compute::take(c, &idx, None))
                .collect::<Result<_, _>>()?;
            row_ids = idx
                .values()
                .iter()
                .map(|&i| ids.value(i as usize))
                .collect();
        }
        let n = row_ids.len();
        Ok((row_ids, columns, n))
    }

    pub(crate) async fn update(&mut self, upd: ast::Update) -> Result<StatementResult> {
        let (name, alias) = single_table(&upd.table)?;
        let def = self.target(&name).await?;
        let mut assigned: HashMap<usize, String> = HashMap::new();
        for a in &upd.assignments {
            let AssignmentTarget::ColumnName(col) = &a.target else {
                return bad("UPDATE of column tuples is not supported");
            };
            let parts = name_parts(col)?;
            let cname = parts.last().cloned().unwrap_or_default();
            let i = Self::column_index(&def, &cname)?;
            if assigned.insert(i, a.value.to_string()).is_some() {
                return bad(format!("multiple assignments to same column \"{cname}\""));
            }
        }
        let qual = qualifier(&name, alias.as_ref());
        // Key fast path: `UPDATE t SET <simple> WHERE key = literal` without the planner.
        let fast = match (&upd.from, &upd.selection) {
            (None, Some(selection)) => {
                let mut by_index: HashMap<usize, &Expr> = HashMap::new();
                for a in &upd.assignments {
                    if let AssignmentTarget::ColumnName(col) = &a.target {
                        let cname = name_parts(col)?.last().cloned().unwrap_or_default();
                        by_index.insert(Self::column_index(&def, &cname)?, &a.value);
                    }
                }
                let short = alias
                    .as_ref()
                    .map(normalize)
                    .or_else(|| name_parts(&name).ok()?.last().cloned())
                    .unwrap_or_default();
                self.update_by_key(&def, &short, &by_index, selection)
                    .await?
            }
            _ => None,
        };
        let (row_ids, columns, n) = match fast {
            Some(found) => found,
            None => self.update_read(&def, &upd, &assigned, &qual).await?,
        };
        self.delete_rows(&def, &row_ids)?;
        let targets: Vec<usize> = (0..def.columns.len()).collect();
        let rows = match (
            self.write_rows(&def, &targets, columns, n).await,
            &upd.returning,
        ) {
            (Err(e), Some(items)) => {
                let relation = upd.table.to_string();
                return Err(self.returning_error_first(&def, &relation, items, e).await);
            }
            (written, _) => written?,
        };
        match &upd.returning {
            Some(items) => {
                self.returning(&def, &upd.table.to_string(), items, rows, n as u64)
                    .await
            }
            None => Ok(StatementResult::none(n as u64)),
        }
    }

    /// The rows an UPDATE changes and their new values, through the planner.
    async fn update_read(
        &mut self,
        def: &TableDef,
        upd: &ast::Update,
        assigned: &HashMap<usize, String>,
        qual: &str,
    ) -> Result<TargetRows> {
        let exprs: Vec<String> = def
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| match assigned.get(&i) {
                Some(e) => format!("{e} AS {}", quote_ident(&format!("__tarn_c{i}"))),
                None => format!("{qual}.{}", quote_ident(&c.name)),
            })
            .collect();
        let from = match &upd.from {
            Some(UpdateTableFromKind::BeforeSet(t)) | Some(UpdateTableFromKind::AfterSet(t)) => {
                format!(
                    ", {}",
                    t.iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            None => String::new(),
        };
        let selection = upd
            .selection
            .as_ref()
            .map(|s| format!(" WHERE {s}"))
            .unwrap_or_default();
        let sql = format!(
            "SELECT {qual}.{}, {} FROM {}{from}{selection}",
            quote_ident(ROWID_COLUMN),
            exprs.join(", "),
            upd.table
        );
        self.read_target(def, &sql).await
    }

    /// `UPDATE … SET … WHERE key = literal` answered from the key index when every SET
    /// value is simple (see [`simple_value`]); `None` to plan it instead.
    async fn update_by_key(
        &mut self,
        def: &TableDef,
        qualifier: &str,
        assigned: &HashMap<usize, &Expr>,
        selection: &Expr,
    ) -> Result<Option<TargetRows>> {
        let column = column_resolver(def, qualifier);
        let Some((key, arrays)) = key_predicate(def, &self.catalog, selection, &column) else {
            return Ok(None);
        };
        let Some(t) = self.tables.get(&def.id) else {
            return Ok(None);
        };
        let Some(store) = t.store.clone() else {
            return Ok(None);
        };
        crate::datafusion_ext::provider::ready_keys(&store, &key).await?;
        let (version, found) = store.key_lookup(&key, &arrays)?;
        // Only while this transaction has not written the table: its own rows are not
        // in the published key index.
        if !version.same_as(&t.version) {
            return Ok(None);
        }
        let row_ids = found.into_iter().next().unwrap_or_default();
        let schema = table_schema(def, false);
        let all = (0..def.columns.len()).map(Some).collect();
        let batches = key_rows(def, &version, &row_ids, all, schema.clone())?;
        let batch = concat_batches(&schema, &batches)?;
        let n = batch.num_rows();
        if n != row_ids.len() {
            return Ok(None);
        }
        let mut columns = Vec::with_capacity(def.columns.len());
        for (i, c) in def.columns.iter().enumerate() {
            match assigned.get(&i) {
                None => columns.push(batch.column(i).clone()),
                Some(e) => match simple_value(e, c, &batch, &column)? {
                    Some(a) => columns.push(a),
                    None => return Ok(None),
                },
            }
        }
        Ok(Some((row_ids, columns, n)))
    }

    pub(crate) async fn delete(&mut self, del: ast::Delete) -> Result<StatementResult> {
        let tables = match &del.from {
            FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
        };
        let [table] = tables.as_slice() else {
            return bad("DELETE takes exactly one table");
        };
        if !del.tables.is_empty() || del.limit.is_some() || !del.order_by.is_empty() {
            return bad("DELETE supports FROM, USING, WHERE and RETURNING only");
        }
        let (name, alias) = single_table(table)?;
        let def = self.target(&name).await?;
        let qual = qualifier(&name, alias.as_ref());
        let mut cols = vec![format!("{qual}.{}", quote_ident(ROWID_COLUMN))];
        if del.returning.is_some() {
            cols.extend(
                def.columns
                    .iter()
                    .map(|c| format!("{qual}.{}", quote_ident(&c.name))),
            );
        }
        let using = del
            .using
            .as_ref()
            .map(|u| {
                format!(
                    ", {}",
                    u.iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .unwrap_or_default();
        let selection = del
            .selection
            .as_ref()
            .map(|s| format!(" WHERE {s}"))
            .unwrap_or_default();
        let sql = format!("SELECT {} FROM {table}{using}{selection}", cols.join(", "));
        let (row_ids, columns, n) = self.read_target(&def, &sql).await?;
        self.delete_rows(&def, &row_ids)?;
        match &del.returning {
            Some(items) => {
                let rows = RecordBatch::try_new(table_schema(&def, false), columns)?;
                self.returning(&def, &table.to_string(), items, rows, n as u64)
                    .await
            }
            None => Ok(StatementResult::none(n as u64)),
        }
    }
}

/// A SET value Tarn evaluates itself (with the planner's semantics): a literal (converted
/// as in INSERT), a column of the row, or `a + - * b` of numeric columns and number
/// literals, computed in int8 (overflow is an error) or float8 and then converted to the
/// column's type. `None` for anything else.
fn simple_value(
    e: &Expr,
    col: &ColumnDef,
    batch: &RecordBatch,
    column: &dyn Fn(&Expr) -> Option<usize>,
) -> Result<Option<ArrayRef>> {
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::compute::kernels::numeric;
    let n = batch.num_rows();
    if let Some(i) = column(e) {
        return Ok(Some(batch.column(i).clone()));
    }
    let operand = |e: &Expr| -> Option<ArrayRef> {
        if let Some(i) = column(e) {
            let a = batch.column(i).clone();
            return matches!(
                a.data_type(),
                DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::Float32
                    | DataType::Float64
            )
            .then_some(a);
        }
        let (neg, Value::Number(text, _)) = signed_value(e)? else {
            return None;
        };
        let text = if neg {
            format!("-{text}")
        } else {
            text.clone()
        };
        let scalar = match text.parse::<i64>() {
            Ok(i) => ScalarValue::Int64(Some(i)),
            Err(_) => ScalarValue::Float64(Some(text.parse::<f64>().ok()?)),
        };
        scalar.to_array_of_size(n).ok()
    };
    match e {
        Expr::Nested(inner) => simple_value(inner, col, batch, column),
        Expr::BinaryOp { left, op, right } => {
            let kernel = match op {
                ast::BinaryOperator::Plus => numeric::add,
                ast::BinaryOperator::Minus => numeric::sub,
                ast::BinaryOperator::Multiply => numeric::mul,
                _ => return Ok(None),
            };
            let (Some(l), Some(r)) = (operand(left), operand(right)) else {
                return Ok(None);
            };
            let float =
                |a: &ArrayRef| matches!(a.data_type(), DataType::Float32 | DataType::Float64);
            // PostgreSQL's types: an integer literal is int4 when it fits, and integer
            // arithmetic is done in the wider operand's type (`int4_col + 1` is int4).
            let width = |e: &Expr, a: &ArrayRef| -> u8 {
                if column(e).is_some() {
                    return match a.data_type() {
                        DataType::Int16 => 2,
                        DataType::Int32 => 4,
                        _ => 8,
                    };
                }
                let fits = a
                    .as_primitive_opt::<datafusion::arrow::datatypes::Int64Type>()
                    .is_some_and(|v| v.iter().flatten().all(|x| i32::try_from(x).is_ok()));
                if fits { 4 } else { 8 }
            };
            let ty = if float(&l) || float(&r) {
                DataType::Float64
            } else {
                match width(left, &l).max(width(right, &r)) {
                    2 => DataType::Int16,
                    4 => DataType::Int32,
                    _ => DataType::Int64,
                }
            };
            let (l, r) = (cast(&l, &ty)?, cast(&r, &ty)?);
            match kernel(&l, &r) {
                Ok(a) if ty == DataType::Float64 => {
                    let (x, y) = (
                        l.as_primitive::<datafusion::arrow::datatypes::Float64Type>(),
                        r.as_primitive::<datafusion::arrow::datatypes::Float64Type>(),
                    );
                    let z = a.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
                    let overflow = (0..z.len()).any(|i| {
                        z.is_valid(i)
                            && z.value(i).is_infinite()
                            && x.value(i).is_finite()
                            && y.value(i).is_finite()
                    });
                    if overflow {
                        return bad("value out of range: overflow");
                    }
                    Ok(Some(cast(&a, &DataType::Float64)?))
                }
                Ok(a) => Ok(Some(cast(&a, &DataType::Int64)?)),
                Err(datafusion::arrow::error::ArrowError::ArithmeticOverflow(_)) => bad(match ty {
                    DataType::Int16 => "smallint out of range",
                    DataType::Int32 => "integer out of range",
                    _ => "bigint out of range",
                }),
                Err(e) => Err(e.into()),
            }
        }
        _ => match literal_cell(e, col) {
            Some(Cell::Scalar(v)) => Ok(Some(scalars_to_array(vec![v; n.max(1)])?.slice(0, n))),
            _ => Ok(None),
        },
    }
}
