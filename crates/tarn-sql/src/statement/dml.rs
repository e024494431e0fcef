//! INSERT (UPDATE and DELETE are in `update_delete.rs`, INSERT … ON CONFLICT in
//! `on_conflict.rs`). Tarn owns
//! writes: the read side (the rows to change and their new values) is planned by
//! DataFusion, then Tarn fills defaults, converts and validates values, checks
//! constraints and records the change for the commit.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::TableProvider;
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::sql::sqlparser::ast::{
    self, Expr, OnInsert, Query, SelectItem, SetExpr, TableFactor, TableObject, TableWithJoins,
    Value,
};
use datafusion::sql::sqlparser::parser::Parser;
use tarn_catalog::{CatalogOp, ColumnDef, ColumnDefault, ColumnId, SqlType, TableDef, TableId};
use tarn_storage::{Op, stored_schema};

use crate::ast::dialect::EngineDialect;
use crate::ast::ident::{name_parts, normalize};
use crate::ast::types::arrow_type;
use crate::datafusion_ext::provider::table_schema;
use crate::error::{Error, Result, bad};
use crate::statement::result::StatementResult;
use crate::statement::txn::{Txn, items_sql};
use crate::value::coerce::coerce_column;

pub(crate) fn parse_query(sql: &str) -> Result<Query> {
    let dialect = EngineDialect::default();
    let mut p = Parser::new(&dialect).try_with_sql(sql)?;
    Ok(*p.parse_query()?)
}

pub(crate) fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Rows an UPDATE changes: (row ids, new values of every column, row count).
pub(crate) type TargetRows = (Vec<u64>, Vec<ArrayRef>, usize);

/// A literal cell of a VALUES list, as a scalar; `None` when the cell is not a literal.
#[derive(Debug, Clone)]
pub(crate) enum Cell {
    Default,
    Scalar(ScalarValue),
}

/// Whether a VALUES cell is the keyword `DEFAULT` (sqlparser reads it as a name).
fn is_default(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(id)
        if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default"))
}

pub(crate) fn literal_cell(e: &Expr, col: &ColumnDef) -> Option<Cell> {
    match e {
        e if is_default(e) => Some(Cell::Default),
        Expr::Value(v) => Some(Cell::Scalar(match &v.value {
            Value::Null => ScalarValue::Null,
            Value::Boolean(b) => ScalarValue::Boolean(Some(*b)),
            Value::Number(n, _) => number_scalar(n, col),
            Value::SingleQuotedString(s)
            | Value::EscapedStringLiteral(s)
            | Value::DoubleQuotedString(s) => ScalarValue::Utf8(Some(s.clone())),
            Value::DollarQuotedString(d) => ScalarValue::Utf8(Some(d.value.clone())),
            _ => return None,
        })),
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => Some(Cell::Scalar(number_scalar(&format!("-{n}"), col))),
                _ => None,
            },
            _ => None,
        },
        Expr::Array(_) if col.ty.is_vector() || is_array_type(&col.ty) => {
            array_text(e).map(|t| Cell::Scalar(ScalarValue::Utf8(Some(t))))
        }
        Expr::Cast {
            expr: inner,
            data_type,
            kind: ast::CastKind::DoubleColon | ast::CastKind::Cast,
            ..
        } => {
            // A cast of a literal to the column's own type family is the literal itself:
            // the column conversion below does the cast.
            let same = crate::ast::types::declared_type(data_type)
                .map(|d| {
                    arrow_type(&d.ty) == arrow_type(&col.ty)
                        || (d.ty.is_vector() && col.ty.is_vector())
                })
                .unwrap_or(false);
            if same { literal_cell(inner, col) } else { None }
        }
        _ => None,
    }
}

fn is_array_type(t: &SqlType) -> bool {
    matches!(
        t,
        SqlType::TextArray | SqlType::Int4Array | SqlType::Int8Array
    )
}

/// Whether a number literal for `col` stays its text (numeric keeps every digit; text
/// columns store the number as written).
pub(crate) fn numbers_as_text(col: &ColumnDef) -> bool {
    matches!(
        col.ty,
        SqlType::Numeric { .. } | SqlType::Text | SqlType::Varchar(_)
    )
}

pub(crate) fn number_scalar(n: &str, col: &ColumnDef) -> ScalarValue {
    if numbers_as_text(col) {
        return ScalarValue::Utf8(Some(n.to_string()));
    }
    match n.parse::<i64>() {
        Ok(i) => ScalarValue::Int64(Some(i)),
        Err(_) => match n.parse::<f64>() {
            Ok(f) => ScalarValue::Float64(Some(f)),
            Err(_) => ScalarValue::Utf8(Some(n.to_string())),
        },
    }
}

/// PostgreSQL array text of a literal `ARRAY[…]`, or `None` if any element is not a literal.
fn array_text(e: &Expr) -> Option<String> {
    match e {
        Expr::Array(a) => {
            let items = a.elem.iter().map(array_text).collect::<Option<Vec<_>>>()?;
            Some(format!("{{{}}}", items.join(",")))
        }
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => Some(n.clone()),
            Value::Null => Some("NULL".into()),
            Value::SingleQuotedString(s) => Some(format!(
                "\"{}\"",
                s.replace('\\', "\\\\").replace('"', "\\\"")
            )),
            _ => None,
        },
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => Some(format!("-{n}")),
                _ => None,
            },
            _ => None,
        },
        Expr::Cast { expr, .. } | Expr::Nested(expr) => array_text(expr),
        _ => None,
    }
}

/// Whether the non-NULL `scalars` all have one type (so typing them together or one by
/// one gives the same values).
fn one_type(scalars: &[ScalarValue]) -> bool {
    let mut types = scalars
        .iter()
        .filter(|s| !s.is_null())
        .map(|s| s.data_type());
    match types.next() {
        None => true,
        Some(first) => types.all(|t| t == first),
    }
}

/// Builds one array from scalars of possibly different literal types.
pub(crate) fn scalars_to_array(cells: Vec<ScalarValue>) -> Result<ArrayRef> {
    let mut ty: Option<DataType> = None;
    for c in &cells {
        if c.is_null() {
            continue;
        }
        let t = c.data_type();
        ty = Some(match ty {
            None => t,
            Some(prev) if prev == t => prev,
            Some(DataType::Int64) if t == DataType::Float64 => DataType::Float64,
            Some(DataType::Float64) if t == DataType::Int64 => DataType::Float64,
            Some(_) => DataType::Utf8,
        });
    }
    let ty = ty.unwrap_or(DataType::Null);
    let cells = cells
        .into_iter()
        .map(|c| {
            if c.is_null() {
                ScalarValue::try_from(&ty)
            } else if c.data_type() == ty {
                Ok(c)
            } else {
                c.cast_to(&ty)
            }
        })
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    if ty == DataType::Null {
        return Ok(Arc::new(datafusion::arrow::array::NullArray::new(
            cells.len(),
        )));
    }
    Ok(ScalarValue::iter_to_array(cells)?)
}

impl Txn<'_> {
    /// Resolves and locks the table a DML statement writes.
    pub(crate) async fn target(&mut self, name: &ast::ObjectName) -> Result<TableDef> {
        let def = self.resolve(name)?;
        self.lock_table(def.id).await?.ok_or_else(|| {
            Error::NotFound(format!(
                "relation \"{}\".\"{}\" does not exist",
                def.workspace_id, def.name
            ))
        })
    }

    pub(crate) fn column_index(def: &TableDef, name: &str) -> Result<usize> {
        def.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                Error::BadRequest(format!(
                    "column \"{name}\" of relation \"{}\" does not exist",
                    def.name
                ))
            })
    }

    /// The columns an INSERT names (all of them, in order, when it names none), as
    /// indexes into `def.columns`.
    pub(crate) fn insert_targets(
        def: &TableDef,
        columns: &[ast::ObjectName],
    ) -> Result<Vec<usize>> {
        if columns.is_empty() {
            return Ok((0..def.columns.len()).collect());
        }
        let mut seen = HashSet::new();
        columns
            .iter()
            .map(|c| {
                let parts = name_parts(c)?;
                let n = parts.last().cloned().unwrap_or_default();
                if !seen.insert(n.clone()) {
                    return bad(format!("column \"{n}\" specified more than once"));
                }
                Self::column_index(def, &n)
            })
            .collect()
    }

    /// PostgreSQL fills the columns an INSERT without a column list leaves out with
    /// their defaults: `INSERT INTO t VALUES (8)` writes the first column only. So the
    /// targets of such an INSERT are the first `width` columns when the source is
    /// narrower than the table.
    pub(crate) fn implicit_width(targets: &mut Vec<usize>, named: bool, width: usize) {
        if !named && width < targets.len() {
            targets.truncate(width);
        }
    }

    pub(crate) async fn insert(&mut self, mut ins: ast::Insert) -> Result<StatementResult> {
        let source = ins.source.take();
        let TableObject::TableName(name) = &ins.table else {
            return bad("INSERT target must be a table");
        };
        let def = self.target(name).await?;
        let conflict = match &ins.on {
            None => None,
            Some(OnInsert::OnConflict(oc)) => Some(self.conflict_plan(&def, oc)?),
            Some(_) => return bad("ON DUPLICATE KEY UPDATE is not supported; use ON CONFLICT"),
        };
        let mut targets = Self::insert_targets(&def, &ins.columns)?;
        let has_source = source.is_some();
        let named = !ins.columns.is_empty();
        let (arrays, n) = match source {
            None => (vec![], 1),
            Some(q) => self.insert_source(&def, &mut targets, named, *q).await?,
        };
        let targets = if !has_source { vec![] } else { targets };
        let relation = match &ins.table_alias {
            Some(a) => format!("{name} AS {}", a.alias),
            None => name.to_string(),
        };
        let written = match &conflict {
            None => self.write_rows(&def, &targets, arrays, n).await,
            Some(plan) => {
                let qual = qualifier(name, ins.table_alias.as_ref().map(|a| &a.alias));
                self.insert_on_conflict(&def, plan, &relation, &qual, &targets, arrays, n)
                    .await
            }
        };
        let rows = match (written, &ins.returning) {
            (Err(e), Some(items)) => {
                return Err(self.returning_error_first(&def, &relation, items, e).await);
            }
            (written, _) => written?,
        };
        let affected = rows.num_rows() as u64;
        match &ins.returning {
            Some(items) => self.returning(&def, &relation, items, rows, affected).await,
            None => Ok(StatementResult::none(affected)),
        }
    }

    /// The source rows of an INSERT as one array per target column. Literal VALUES are
    /// converted straight to Arrow (`DEFAULT` cells take the column default); anything
    /// else is planned by DataFusion.
    async fn insert_source(
        &mut self,
        def: &TableDef,
        targets: &mut Vec<usize>,
        named: bool,
        mut q: Query,
    ) -> Result<(Vec<ArrayRef>, usize)> {
        let count_error = |given: usize, targets: &[usize]| {
            if given > targets.len() {
                bad("INSERT has more expressions than target columns")
            } else {
                bad("INSERT has more target columns than expressions")
            }
        };
        if let SetExpr::Values(values) = q.body.as_ref()
            && q.order_by.is_none()
            && q.limit_clause.is_none()
            && q.with.is_none()
        {
            if let Some(first) = values.rows.first() {
                Self::implicit_width(targets, named, first.len());
            }
            let targets: &[usize] = targets;
            let literal = values.rows.iter().all(|row| {
                row.len() == targets.len()
                    && row
                        .iter()
                        .zip(targets)
                        .all(|(e, &t)| literal_cell(e, &def.columns[t]).is_some())
            });
            if literal {
                let n = values.rows.len();
                let mut arrays = Vec::with_capacity(targets.len());
                for (j, &t) in targets.iter().enumerate() {
                    let col = &def.columns[t];
                    let cells = values
                        .rows
                        .iter()
                        .map(|row| literal_cell(&row[j], col).unwrap_or(Cell::Default))
                        .collect();
                    arrays.push(self.cells_to_array(def, col, cells, false).await?);
                }
                return Ok((arrays, n));
            }
            if let Some(row) = values.rows.iter().find(|r| r.len() != targets.len()) {
                return count_error(row.len(), targets);
            }
        }
        // `DEFAULT` cells among expressions DataFusion must evaluate: planned as NULL,
        // then replaced by the column's default (rows of column j in `defaults[j]`).
        let mut defaults: Vec<Vec<usize>> = Vec::new();
        // Rows are matched to their DEFAULT cells by position, which ORDER BY, LIMIT
        // and OFFSET would change; PostgreSQL refuses DEFAULT there too.
        let reordered = q.order_by.is_some() || q.limit_clause.is_some() || q.fetch.is_some();
        if let SetExpr::Values(values) = q.body.as_mut() {
            for (i, row) in values.rows.iter_mut().enumerate() {
                for (j, cell) in row.iter_mut().enumerate() {
                    if is_default(cell) {
                        if reordered {
                            return bad("DEFAULT is not allowed in this context");
                        }
                        *cell = Expr::value(Value::Null);
                        if defaults.len() <= j {
                            defaults.resize(j + 1, Vec::new());
                        }
                        defaults[j].push(i);
                    }
                }
            }
        }
        let (_, schema, batches) = self.run_query(q, HashMap::new()).await?;
        Self::implicit_width(targets, named, schema.fields().len());
        if schema.fields().len() != targets.len() {
            return count_error(schema.fields().len(), targets);
        }
        let batch = concat_batches(&schema, &batches)?;
        let mut columns = batch.columns().to_vec();
        for (j, rows) in defaults.iter().enumerate() {
            let (Some(&t), false) = (targets.get(j), rows.is_empty()) else {
                continue;
            };
            let col = &def.columns[t];
            let array = coerce_column(&columns[j], &nullable(col))?.array;
            columns[j] = self.fill_defaults(def, col, &array, rows).await?;
        }
        Ok((columns, batch.num_rows()))
    }

    /// The literal cells of one column as an array of the column's type, `DEFAULT`
    /// cells filled with the column default (sequences advance in row order).
    ///
    /// A multi-row VALUES list types its cells together, as PostgreSQL does (`1` and
    /// `'2'` in one column are read as text, then converted). `per_row` types each cell
    /// on its own instead: a batch's parameter sets are separate statements, and their
    /// rows must convert as each statement would have.
    pub(crate) async fn cells_to_array(
        &mut self,
        def: &TableDef,
        col: &ColumnDef,
        cells: Vec<Cell>,
        per_row: bool,
    ) -> Result<ArrayRef> {
        let col_nullable = nullable(col);
        let mut scalars = Vec::with_capacity(cells.len());
        let mut defaults = Vec::new();
        for (i, cell) in cells.into_iter().enumerate() {
            match cell {
                Cell::Scalar(s) => scalars.push(s),
                Cell::Default => {
                    scalars.push(ScalarValue::Null);
                    defaults.push(i);
                }
            }
        }
        let mut array = if per_row && !one_type(&scalars) {
            let arrays = scalars
                .into_iter()
                .map(|s| Ok(coerce_column(&scalars_to_array(vec![s])?, &col_nullable)?.array))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
            datafusion::arrow::compute::concat(&refs)?
        } else if defaults.is_empty() {
            // Converted once, with the other columns, by `prepare_rows` (a conversion
            // here too would, for one, parse every jsonb value twice).
            return scalars_to_array(scalars);
        } else {
            coerce_column(&scalars_to_array(scalars)?, &col_nullable)?.array
        };
        if !defaults.is_empty() {
            array = self.fill_defaults(def, col, &array, &defaults).await?;
        }
        Ok(array)
    }

    /// `array` (of `col`'s type) with the rows at `positions` replaced by the column's
    /// default, in row order (sequences advance once per row).
    async fn fill_defaults(
        &mut self,
        def: &TableDef,
        col: &ColumnDef,
        array: &ArrayRef,
        positions: &[usize],
    ) -> Result<ArrayRef> {
        let d = self.default_array(def, col, positions.len()).await?;
        let d = coerce_column(&d, &nullable(col))?.array;
        splice(array, positions, &d)
    }

    /// Writes `n` new rows: `arrays[i]` holds the values of column `targets[i]`, other
    /// columns take their defaults. Converts and validates every value, checks unique
    /// constraints and records the insert. Returns the rows as stored, named.
    pub(crate) async fn write_rows(
        &mut self,
        def: &TableDef,
        targets: &[usize],
        arrays: Vec<ArrayRef>,
        n: usize,
    ) -> Result<RecordBatch> {
        let (def, stored, dims_changed) = self.prepare_rows(def, targets, arrays, n).await?;
        if n > 0 {
            for (_, cols) in &def.unique_constraints {
                self.ready_keys(def.id, cols).await?;
            }
        }
        self.store_rows(def, stored, n, dims_changed)
    }

    /// Readies the key index over `columns` of locked table `id` (see
    /// [`crate::datafusion_ext::provider::ready_keys`]); a table this transaction created has none yet.
    pub(crate) async fn ready_keys(&self, id: TableId, columns: &[ColumnId]) -> Result<()> {
        match self.tables.get(&id).and_then(|t| t.store.clone()) {
            Some(store) => crate::datafusion_ext::provider::ready_keys(&store, columns).await,
            None => Ok(()),
        }
    }

    /// The first half of [`Txn::write_rows`]: fills defaults (advancing sequences) and
    /// converts and validates every value (NOT NULL, types, vectors). Returns `def` with
    /// the vector dimensions these rows would fix, one stored array per column, and
    /// whether a dimension changed.
    pub(crate) async fn prepare_rows(
        &mut self,
        def: &TableDef,
        targets: &[usize],
        arrays: Vec<ArrayRef>,
        n: usize,
    ) -> Result<(TableDef, Vec<ArrayRef>, bool)> {
        let mut def = def.clone();
        let mut stored: Vec<ArrayRef> = Vec::with_capacity(def.columns.len());
        let mut dims_changed = false;
        for (ci, col) in def.columns.clone().iter().enumerate() {
            let given = targets.iter().position(|&t| t == ci);
            let raw = match given {
                Some(j) => arrays[j].clone(),
                None => self.default_array(&def, col, n).await?,
            };
            let coerced = coerce_column(&raw, col)?;
            if let Some(d) = coerced.new_dim {
                def.columns[ci].vector_dim = Some(d);
                dims_changed = true;
            }
            stored.push(coerced.array);
        }
        Ok((def, stored, dims_changed))
    }

    /// The second half of [`Txn::write_rows`]: checks unique constraints and records
    /// the insert of prepared rows.
    fn store_rows(
        &mut self,
        def: TableDef,
        stored: Vec<ArrayRef>,
        n: usize,
        dims_changed: bool,
    ) -> Result<RecordBatch> {
        if n == 0 {
            return Ok(RecordBatch::new_empty(table_schema(&def, false)));
        }
        let first_row_id = self
            .tables
            .get(&def.id)
            .map(|t| t.version.next_row_id())
            .ok_or_else(|| Error::Internal("write to an unlocked table".into()))?;
        for (cname, cols) in def.unique_constraints.clone() {
            let key_arrays: Vec<ArrayRef> = cols
                .iter()
                .filter_map(|id| def.columns.iter().position(|c| c.id == *id))
                .map(|i| stored[i].clone())
                .collect();
            if key_arrays.len() == cols.len() {
                self.check_unique(def.id, &cname, &cols, &key_arrays, first_row_id)?;
            }
        }
        let schema = stored_schema(
            &def.columns
                .iter()
                .zip(&stored)
                .map(|(c, a)| (c.id, a.data_type().clone(), true))
                .collect::<Vec<_>>(),
        );
        let batch = RecordBatch::try_new(schema, stored.clone())?;
        self.charge_rows(&batch)?;
        let t = self
            .tables
            .get_mut(&def.id)
            .ok_or_else(|| Error::Internal("write to an unlocked table".into()))?;
        t.version = t.version.with_insert(first_row_id, &batch)?;
        self.ops.push(Op::Insert {
            table: def.id,
            first_row_id,
            batch,
        });
        if dims_changed {
            self.catalog_op(CatalogOp::ReplaceTable(def.clone()))?;
        }
        Ok(RecordBatch::try_new(table_schema(&def, false), stored)?)
    }

    /// Values of `col`'s default for `n` rows (NULLs without a default).
    pub(crate) async fn default_array(
        &mut self,
        def: &TableDef,
        col: &ColumnDef,
        n: usize,
    ) -> Result<ArrayRef> {
        match &col.default {
            None => Ok(datafusion::arrow::array::new_null_array(
                &arrow_type(&col.ty),
                n,
            )),
            Some(ColumnDefault::Sequence { name }) => {
                let t = self
                    .tables
                    .get_mut(&def.id)
                    .ok_or_else(|| Error::Internal("sequence of an unlocked table".into()))?;
                let base = t.version.sequence(col.id);
                let max = if col.ty == SqlType::Int4 {
                    i32::MAX as i64
                } else {
                    i64::MAX
                };
                let last = base
                    .checked_add(n as i64)
                    .filter(|l| *l <= max)
                    .ok_or_else(|| {
                        Error::BadRequest(format!(
                            "nextval: reached maximum value of sequence \"{name}\" ({max})"
                        ))
                    })?;
                t.version = t.version.with_sequence(col.id, last);
                self.ops.push(Op::SetSequence {
                    table: def.id,
                    column: col.id,
                    value: last,
                });
                Ok(if col.ty == SqlType::Int4 {
                    Arc::new(Int32Array::from_iter_values(
                        (base + 1..=last).map(|v| v as i32),
                    ))
                } else {
                    Arc::new(Int64Array::from_iter_values(base + 1..=last))
                })
            }
            Some(ColumnDefault::Expr { sql }) => {
                let dialect = EngineDialect::default();
                let expr = Parser::new(&dialect).try_with_sql(sql)?.parse_expr()?;
                if let Some(Cell::Scalar(s)) = literal_cell(&expr, col) {
                    return Ok(s.to_array_of_size(n)?);
                }
                if let Expr::Function(f) = &expr
                    && f.args.to_string().trim_matches(['(', ')']).is_empty()
                    && matches!(
                        f.name.to_string().to_lowercase().as_str(),
                        "now" | "current_timestamp"
                    )
                {
                    // PostgreSQL's now() is one instant per statement.
                    let micros = self.now.timestamp_micros();
                    return Ok(Arc::new(
                        TimestampMicrosecondArray::from(vec![micros; n]).with_timezone("UTC"),
                    ));
                }
                let q = parse_query(&format!(
                    "SELECT {sql} FROM generate_series(1, {n}) AS t(__tarn_n)"
                ))?;
                let (_, schema, batches) =
                    self.run_query(q, HashMap::new()).await.map_err(|e| {
                        Error::BadRequest(format!(
                            "default of column \"{}\" ({sql}) failed: {e}",
                            col.name
                        ))
                    })?;
                let batch = concat_batches(&schema, &batches)?;
                Ok(batch.column(0).clone())
            }
        }
    }

    /// The error a statement with RETURNING `items` failed with, `e`, unless the list
    /// itself cannot be evaluated: then that error, as PostgreSQL checks RETURNING
    /// before any row is written (so an unknown column is its 400, not a key conflict
    /// the rows met).
    pub(crate) async fn returning_error_first(
        &mut self,
        def: &TableDef,
        relation: &str,
        items: &[SelectItem],
        e: Error,
    ) -> Error {
        let none = RecordBatch::new_empty(table_schema(def, false));
        match self.returning(def, relation, items, none, 0).await {
            Err(first) => first,
            Ok(_) => e,
        }
    }

    /// Whether the relation named by `parts` is the table `def` or a view that reads it
    /// (itself or through other views; the catalog is asked only for names that are
    /// views).
    pub(crate) fn names_table(&self, def: &TableDef, parts: &[String]) -> bool {
        match parts {
            [ws, name] if *ws == def.workspace_id && *name == def.name => true,
            [ws, name] => self
                .catalog
                .view(&self.org, ws, name)
                .is_some_and(|v| self.catalog.dependent_views(&[def.id], &[]).contains(&v.id)),
            _ => false,
        }
    }

    /// How many relations `node` reads (subqueries included) that are the table `def`
    /// or a view of it.
    pub(crate) fn relations_naming(
        &self,
        def: &TableDef,
        node: &impl datafusion::sql::sqlparser::ast::Visit,
    ) -> usize {
        use datafusion::sql::sqlparser::ast::Visitor;
        use std::ops::ControlFlow;
        struct Count<'a, 'b> {
            txn: &'a Txn<'b>,
            def: &'a TableDef,
            n: usize,
        }
        impl Visitor for Count<'_, '_> {
            type Break = ();
            fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
                if let TableFactor::Table { name, .. } = t
                    && let Ok(parts) = name_parts(name)
                    && self.txn.names_table(self.def, &parts)
                {
                    self.n += 1;
                }
                ControlFlow::Continue(())
            }
        }
        let mut count = Count {
            txn: self,
            def,
            n: 0,
        };
        let _ = node.visit(&mut count);
        count.n
    }

    /// Evaluates RETURNING items over `rows` (named as the table's columns).
    pub(crate) async fn returning(
        &mut self,
        def: &TableDef,
        relation: &str,
        items: &[SelectItem],
        rows: RecordBatch,
        affected: u64,
    ) -> Result<StatementResult> {
        refuse_grouping_in_returning(items, self.shared.session.aggregate_functions())?;
        refuse_target_in_returning_subqueries(self, def, items)?;
        let schema = table_schema(def, false);
        let rows = RecordBatch::try_new(schema.clone(), rows.columns().to_vec())?;
        let table: Arc<dyn TableProvider> = Arc::new(MemTable::try_new(schema, vec![vec![rows]])?);
        let overrides = HashMap::from([((def.workspace_id.clone(), def.name.clone()), table)]);
        let q = parse_query(&format!("SELECT {} FROM {relation}", items_sql(items)))?;
        let (columns, schema, batches) = self.run_query(q, overrides).await?;
        Ok(StatementResult {
            columns,
            schema,
            batches: Some(batches),
            rows_affected: affected,
            notices: Vec::new(),
        })
    }

    pub(crate) fn delete_rows(&mut self, def: &TableDef, row_ids: &[u64]) -> Result<()> {
        if row_ids.is_empty() {
            return Ok(());
        }
        let t = self
            .tables
            .get_mut(&def.id)
            .ok_or_else(|| Error::Internal("delete from an unlocked table".into()))?;
        t.version = t.version.with_delete(row_ids)?;
        t.deleted.extend(row_ids.iter().copied());
        self.ops.push(Op::Delete {
            table: def.id,
            row_ids: row_ids.into(),
        });
        Ok(())
    }
}

/// A 400 for an aggregate or window call in a RETURNING list outside a subquery:
/// PostgreSQL refuses both (RETURNING is evaluated per row; Tarn's evaluation over the
/// written rows would have folded them into one).
fn refuse_grouping_in_returning(
    items: &[SelectItem],
    aggregates: &std::collections::HashMap<String, Arc<datafusion::logical_expr::AggregateUDF>>,
) -> Result<()> {
    use datafusion::sql::sqlparser::ast::{Visit, Visitor};
    use std::ops::ControlFlow;
    struct Grouping<'a> {
        aggregates:
            &'a std::collections::HashMap<String, Arc<datafusion::logical_expr::AggregateUDF>>,
        /// For each query entered: whether it reads no relation (`SELECT sum(a)`).
        queries: Vec<bool>,
    }
    impl Visitor for Grouping<'_> {
        type Break = &'static str;
        fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<&'static str> {
            let from_less = matches!(&*q.body, ast::SetExpr::Select(s) if s.from.is_empty());
            self.queries.push(from_less);
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &ast::Query) -> ControlFlow<&'static str> {
            self.queries.pop();
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> ControlFlow<&'static str> {
            if let ast::Expr::Function(f) = e {
                // PostgreSQL gives an aggregate to the level of the columns it reads:
                // inside a subquery that reads no relation, an aggregate of a column
                // (`RETURNING (SELECT sum(a))`) aggregates the RETURNING rows, and is
                // refused as if written there; `(SELECT count(*))` stays the subquery's.
                // A window call always belongs to the query it is written in.
                let outer = self.queries.is_empty()
                    || (f.over.is_none() && self.queries.iter().all(|l| *l) && reads_a_column(f));
                if !outer {
                    return ControlFlow::Continue(());
                }
                if f.over.is_some() {
                    return ControlFlow::Break("window functions are not allowed in RETURNING");
                }
                let name = f
                    .name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .map(|i| i.value.to_lowercase());
                if name.is_some_and(|n| self.aggregates.contains_key(&n)) {
                    return ControlFlow::Break("aggregate functions are not allowed in RETURNING");
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut g = Grouping {
        aggregates,
        queries: Vec::new(),
    };
    for item in items {
        if let ControlFlow::Break(m) = item.visit(&mut g) {
            return bad(m);
        }
    }
    Ok(())
}

/// Whether a call's arguments name a column.
fn reads_a_column(f: &ast::Function) -> bool {
    datafusion::sql::sqlparser::ast::visit_expressions(&f.args, |e| {
        if matches!(
            e,
            ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)
        ) {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    })
    .is_break()
}

/// A 400 for a subquery in RETURNING that reads the statement's own table: RETURNING
/// is evaluated over the written rows standing in for that table, so such a subquery
/// would read only those rows (PostgreSQL reads the table as the statement began).
fn refuse_target_in_returning_subqueries(
    txn: &Txn<'_>,
    def: &TableDef,
    items: &[SelectItem],
) -> Result<()> {
    if items.iter().any(|item| txn.relations_naming(def, item) > 0) {
        return bad(format!(
            "a subquery in RETURNING may not read the statement's own table \"{}\".\"{}\" \
             (it would see only the rows written); run it as its own statement",
            def.workspace_id, def.name
        ));
    }
    Ok(())
}

/// `col` with NULLs allowed: for converting values before NOT NULL applies.
pub(crate) fn nullable(col: &ColumnDef) -> ColumnDef {
    let mut c = col.clone();
    c.nullable = true;
    c
}

/// `base` with the rows at `positions` replaced, in order, by the rows of `with`.
fn splice(base: &ArrayRef, positions: &[usize], with: &ArrayRef) -> Result<ArrayRef> {
    let mut sources: Vec<(usize, usize)> = (0..base.len()).map(|i| (0, i)).collect();
    for (k, &p) in positions.iter().enumerate() {
        let slot = sources
            .get_mut(p)
            .ok_or_else(|| Error::Internal(format!("DEFAULT cell {p} of {} rows", base.len())))?;
        *slot = (1, k);
    }
    Ok(datafusion::arrow::compute::interleave(
        &[base.as_ref(), with.as_ref()],
        &sources,
    )?)
}

pub(crate) fn single_table(t: &TableWithJoins) -> Result<(ast::ObjectName, Option<ast::Ident>)> {
    if !t.joins.is_empty() {
        return bad(
            "the target of UPDATE/DELETE must be a single table; use FROM/USING for others",
        );
    }
    match &t.relation {
        TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } => Ok((name.clone(), alias.as_ref().map(|a| a.name.clone()))),
        _ => bad("the target of UPDATE/DELETE must be a table"),
    }
}

pub(crate) fn qualifier(name: &ast::ObjectName, alias: Option<&ast::Ident>) -> String {
    match alias {
        Some(a) => quote_ident(&normalize(a)),
        None => name.to_string(),
    }
}
