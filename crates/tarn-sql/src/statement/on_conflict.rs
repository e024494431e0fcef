//! `INSERT … ON CONFLICT … DO NOTHING | DO UPDATE SET … [WHERE …]` with PostgreSQL's
//! semantics, on top of the INSERT and UPDATE machinery of `dml.rs`.
//!
//! The proposed rows are prepared as for a plain INSERT (defaults, sequences, NOT NULL
//! and vector checks: PostgreSQL checks those before looking for conflicts). Each row's
//! arbiter key is then looked up among the rows the statement started with, through the
//! table's key index plus the transaction's own pending keys (a batch sees its earlier
//! parameter sets). For DO UPDATE, the SET list and WHERE are evaluated by DataFusion in
//! one query over every (existing row, proposed row) pair, joining the target table (by
//! row id) with the proposed rows as `excluded`. A pass over the proposed rows in order
//! then decides, as PostgreSQL's row-at-a-time execution would, which rows are inserted,
//! which existing rows are updated and which are skipped: a row conflicting with a row
//! this statement already inserted or updated is skipped by DO NOTHING and is an error
//! for DO UPDATE ("cannot affect row a second time"). Updated rows are deleted and
//! re-inserted with new row ids, as UPDATE does, and everything is written by one
//! `write_rows`, which checks every unique constraint again.
//!
//! One known difference: the SET list is evaluated for every proposed row that meets an
//! existing row when the statement starts. If an earlier proposed row moved that
//! existing row to another key, PostgreSQL inserts the later row without evaluating its
//! SET list, so an error there (a division by zero, say) fails the statement in Tarn
//! only. SET and WHERE are planned even when no row conflicts, so a mistake in them is
//! reported at once, as PostgreSQL does.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{concat_batches, interleave, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt64Type};
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, ConflictTarget, OnConflict, OnConflictAction,
};
use tarn_catalog::{ColumnId, TableDef};
use tarn_storage::EncodedKeys;

use crate::ast::ident::{name_parts, normalize};
use crate::datafusion_ext::provider::{EngineTable, ROWID_COLUMN, table_schema};
use crate::error::{Error, Result, bad};
use crate::statement::dml::{nullable, parse_query, quote_ident};
use crate::statement::txn::Txn;
use crate::value::coerce::coerce_column;

/// Name under which the proposed rows are registered for the DO UPDATE query. The
/// statement refers to them by the alias `excluded`.
const EXCLUDED_TABLE: &str = "__tarn_excluded";
const PAIR_COLUMN: &str = "__tarn_pair";
const TARGET_COLUMN: &str = "__tarn_target";

/// What ON CONFLICT asks for, checked against the table before any row is read.
pub(crate) struct ConflictPlan {
    /// The arbiter constraints: (constraint name, column ids).
    arbiters: Vec<(String, Vec<ColumnId>)>,
    /// `None` for DO NOTHING.
    update: Option<DoUpdate>,
}

struct DoUpdate {
    /// (column index, SQL of the new value).
    assignments: Vec<(usize, String)>,
    /// SQL of the WHERE condition.
    selection: Option<String>,
}

/// One arbiter constraint while the proposed rows are decided.
struct Arbiter {
    /// Keys of the proposed rows.
    keys: EncodedKeys,
    /// The existing row each proposed row meets, if any.
    existing: Vec<Option<u64>>,
    /// Keys of the DO UPDATE query's result rows.
    updated_keys: Option<EncodedKeys>,
    /// Keys of the rows this statement inserted or updated so far.
    touched: HashSet<Vec<u8>>,
}

/// Where a written row comes from.
#[derive(Clone, Copy)]
enum Source {
    /// Proposed row i, inserted.
    Proposed(usize),
    /// Row i of the DO UPDATE query's result, replacing an existing row.
    Updated(usize),
}

fn key_arrays(def: &TableDef, columns: &[ColumnId], stored: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
    columns
        .iter()
        .map(|id| {
            def.columns
                .iter()
                .position(|c| c.id == *id)
                .map(|i| stored[i].clone())
                .ok_or_else(|| Error::Internal(format!("constraint column {id} is missing")))
        })
        .collect()
}

impl Txn<'_> {
    /// Checks an ON CONFLICT clause against the table: the arbiter constraints it names
    /// or infers and, for DO UPDATE, the assigned columns.
    pub(crate) fn conflict_plan(&self, def: &TableDef, oc: &OnConflict) -> Result<ConflictPlan> {
        let arbiters: Vec<(String, Vec<ColumnId>)> = match &oc.conflict_target {
            Some(ConflictTarget::Columns(cols)) => {
                let mut ids = HashSet::new();
                for c in cols {
                    let name = normalize(c);
                    let col = def.column(&name).ok_or_else(|| {
                        Error::BadRequest(format!("column \"{name}\" does not exist"))
                    })?;
                    ids.insert(col.id);
                }
                let found: Vec<_> = def
                    .unique_constraints
                    .iter()
                    .filter(|(_, c)| c.len() == ids.len() && c.iter().all(|id| ids.contains(id)))
                    .cloned()
                    .collect();
                if found.is_empty() {
                    return bad(
                        "there is no unique or exclusion constraint matching the ON CONFLICT specification",
                    );
                }
                found
            }
            Some(ConflictTarget::OnConstraint(name)) => {
                let parts = name_parts(name)?;
                let cname = parts.last().cloned().unwrap_or_default();
                let found = def
                    .unique_constraints
                    .iter()
                    .find(|(n, _)| *n == cname)
                    .cloned()
                    .ok_or_else(|| {
                        Error::NotFound(format!(
                            "constraint \"{cname}\" for table \"{}\" does not exist",
                            def.name
                        ))
                    })?;
                vec![found]
            }
            None => match oc.action {
                OnConflictAction::DoNothing => def.unique_constraints.clone(),
                OnConflictAction::DoUpdate(_) => {
                    return bad(
                        "ON CONFLICT DO UPDATE requires inference specification or constraint name",
                    );
                }
            },
        };
        let update = match &oc.action {
            OnConflictAction::DoNothing => None,
            OnConflictAction::DoUpdate(du) => {
                let mut assignments: Vec<(usize, String)> = Vec::new();
                for a in &du.assignments {
                    let AssignmentTarget::ColumnName(col) = &a.target else {
                        return bad("ON CONFLICT DO UPDATE of column tuples is not supported");
                    };
                    let parts = name_parts(col)?;
                    let cname = parts.last().cloned().unwrap_or_default();
                    let i = def
                        .columns
                        .iter()
                        .position(|c| c.name == cname)
                        .ok_or_else(|| {
                            Error::BadRequest(format!(
                                "column \"{cname}\" of relation \"{}\" does not exist",
                                def.name
                            ))
                        })?;
                    if assignments.iter().any(|(j, _)| *j == i) {
                        return bad(format!("multiple assignments to same column \"{cname}\""));
                    }
                    assignments.push((i, a.value.to_string()));
                }
                Some(DoUpdate {
                    assignments,
                    selection: du.selection.as_ref().map(|s| s.to_string()),
                })
            }
        };
        Ok(ConflictPlan { arbiters, update })
    }

    /// Inserts `n` proposed rows (`arrays[i]` holds column `targets[i]`) under an ON
    /// CONFLICT plan. `relation` is the target as written (with its alias) and `qual`
    /// the name that refers to the existing row. Returns the rows inserted and updated,
    /// as stored, in the order of the proposed rows.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert_on_conflict(
        &mut self,
        def: &TableDef,
        plan: &ConflictPlan,
        relation: &str,
        qual: &str,
        targets: &[usize],
        arrays: Vec<ArrayRef>,
        n: usize,
    ) -> Result<RecordBatch> {
        let (_, proposed, _) = self.prepare_rows(def, targets, arrays, n).await?;
        let all: Vec<usize> = (0..def.columns.len()).collect();
        if n == 0 || plan.arbiters.is_empty() {
            return self.write_rows(def, &all, proposed, n).await;
        }

        let mut arbiters = Vec::with_capacity(plan.arbiters.len());
        for (name, cols) in &plan.arbiters {
            let arrays = key_arrays(def, cols, &proposed)?;
            let keys = tarn_storage::encode_keys(&arrays)?;
            self.ready_keys(def.id, cols).await?;
            let existing = self.existing_rows(def, name, cols, &keys)?;
            arbiters.push(Arbiter {
                keys,
                existing,
                updated_keys: None,
                touched: HashSet::new(),
            });
        }
        // DO UPDATE: the new values for every proposed row that meets an existing row
        // (all arbiters of DO UPDATE cover the same columns, so the first one will do).
        let mut updated: Option<(HashMap<usize, usize>, Vec<ArrayRef>)> = None;
        if let Some(update) = &plan.update {
            let (by_row, columns) = self
                .evaluate_update(
                    def,
                    update,
                    relation,
                    qual,
                    &proposed,
                    &arbiters[0].existing,
                )
                .await?;
            for (a, (_, cols)) in arbiters.iter_mut().zip(&plan.arbiters) {
                a.updated_keys = Some(tarn_storage::encode_keys(&key_arrays(
                    def, cols, &columns,
                )?)?);
            }
            updated = Some((by_row, columns));
        }

        // Decide row by row, in order, as PostgreSQL's executor does.
        let mut sources = Vec::new();
        let mut replaced: HashSet<u64> = HashSet::new();
        for i in 0..n {
            let meets_existing = arbiters
                .iter()
                .find_map(|a| a.existing[i].filter(|r| !replaced.contains(r)));
            let meets_touched = arbiters
                .iter()
                .any(|a| a.keys.get(i).is_some_and(|k| a.touched.contains(k)));
            let source = match (&updated, meets_existing) {
                (None, Some(_)) => continue,
                (None, None) if meets_touched => continue,
                (Some((by_row, _)), Some(row)) => {
                    // A WHERE that is not true leaves the existing row alone.
                    let Some(&j) = by_row.get(&i) else {
                        continue;
                    };
                    replaced.insert(row);
                    Source::Updated(j)
                }
                (Some(_), None) if meets_touched => {
                    return bad("ON CONFLICT DO UPDATE command cannot affect row a second time");
                }
                (_, None) => Source::Proposed(i),
            };
            for a in &mut arbiters {
                let key = match source {
                    Source::Proposed(i) => a.keys.get(i),
                    Source::Updated(j) => a.updated_keys.as_ref().and_then(|k| k.get(j)),
                };
                if let Some(k) = key {
                    a.touched.insert(k.to_vec());
                }
            }
            sources.push(source);
        }

        let mut replaced: Vec<u64> = replaced.into_iter().collect();
        replaced.sort_unstable();
        self.delete_rows(def, &replaced)?;
        let m = sources.len();
        let indices: Vec<(usize, usize)> = sources
            .iter()
            .map(|s| match s {
                Source::Proposed(i) => (0, *i),
                Source::Updated(j) => (1, *j),
            })
            .collect();
        let columns = proposed
            .iter()
            .enumerate()
            .map(|(c, p)| match &updated {
                Some((_, u)) => interleave(&[p.as_ref(), u[c].as_ref()], &indices),
                None => interleave(&[p.as_ref()], &indices),
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.write_rows(def, &all, columns, m).await
    }

    /// For each proposed row, the row with the same key (of constraint `name` over
    /// `cols`) that this transaction sees before the statement: published and not
    /// deleted by it, or written by it earlier (a batch's earlier parameter sets).
    fn existing_rows(
        &self,
        def: &TableDef,
        name: &str,
        cols: &[ColumnId],
        keys: &EncodedKeys,
    ) -> Result<Vec<Option<u64>>> {
        let t = self
            .tables
            .get(&def.id)
            .ok_or_else(|| Error::Internal("conflict check on an unlocked table".into()))?;
        let published = match &t.store {
            Some(store) => store.key_matches_encoded(cols, keys)?,
            None => vec![None; keys.len()],
        };
        let local = t.local_keys.get(name);
        Ok(published
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let key = keys.get(i)?;
                p.filter(|r| !t.deleted.contains(r)).or_else(|| {
                    local.and_then(|l| {
                        l.get(key)
                            .iter()
                            .rev()
                            .copied()
                            .find(|r| !t.deleted.contains(r))
                    })
                })
            })
            .collect())
    }

    /// Evaluates DO UPDATE's SET list and WHERE for every proposed row that meets an
    /// existing row. Returns, by proposed row, the row of the result holding its new
    /// values (absent when the WHERE is not true), and the result's columns, one per
    /// table column, converted to the stored types.
    async fn evaluate_update(
        &mut self,
        def: &TableDef,
        update: &DoUpdate,
        relation: &str,
        qual: &str,
        proposed: &[ArrayRef],
        existing: &[Option<u64>],
    ) -> Result<(HashMap<usize, usize>, Vec<ArrayRef>)> {
        let (pairs, targets): (Vec<u64>, Vec<u64>) = existing
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.map(|r| (i as u64, r)))
            .unzip();
        let pair_idx = UInt64Array::from(pairs);
        let mut fields = vec![
            Field::new(PAIR_COLUMN, DataType::UInt64, false),
            Field::new(TARGET_COLUMN, DataType::UInt64, false),
        ];
        fields.extend(
            table_schema(def, false)
                .fields()
                .iter()
                .map(|f| Field::clone(f).with_nullable(true)),
        );
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(pair_idx.clone()),
            Arc::new(UInt64Array::from(targets.clone())),
        ];
        for p in proposed {
            columns.push(take(p, &pair_idx, None)?);
        }
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let excluded: Arc<dyn TableProvider> =
            Arc::new(MemTable::try_new(schema, vec![vec![batch]])?);
        let version = self
            .tables
            .get(&def.id)
            .map(|t| Arc::new(t.version.clone()))
            .ok_or_else(|| Error::Internal("read of an unlocked table".into()))?;
        let exprs: Vec<String> = def
            .columns
            .iter()
            .enumerate()
            .map(
                |(i, c)| match update.assignments.iter().find(|(j, _)| *j == i) {
                    Some((_, e)) => format!("({e}) AS {}", quote_ident(&format!("__tarn_c{i}"))),
                    None => format!("{qual}.{}", quote_ident(&c.name)),
                },
            )
            .collect();
        let selection = update
            .selection
            .as_ref()
            .map(|s| format!(" WHERE {s}"))
            .unwrap_or_default();
        let sql = format!(
            "SELECT excluded.{}, {} FROM {relation} JOIN {}.{} AS excluded ON {qual}.{} = excluded.{}{selection}",
            quote_ident(PAIR_COLUMN),
            exprs.join(", "),
            quote_ident(&def.workspace_id),
            quote_ident(EXCLUDED_TABLE),
            quote_ident(ROWID_COLUMN),
            quote_ident(TARGET_COLUMN),
        );
        let query = parse_query(&sql)?;
        // Only the conflicting rows are read, so DO UPDATE costs O(conflicts), not a
        // scan, unless SET or WHERE has a subquery reading the table (or a view of it):
        // that subquery reads the whole table, as in PostgreSQL (it saw only the
        // conflicting rows when the row set stood for the table everywhere), and the
        // join on the row id still picks the conflicting rows.
        let target = EngineTable::new(def.clone(), version, true);
        let target: Arc<dyn TableProvider> = if self.relations_naming(def, &query) > 1 {
            Arc::new(target)
        } else {
            Arc::new(target.with_rows(targets))
        };
        let overrides = HashMap::from([
            ((def.workspace_id.clone(), def.name.clone()), target),
            (
                (def.workspace_id.clone(), EXCLUDED_TABLE.to_string()),
                excluded,
            ),
        ]);
        let (_, schema, batches) = self.run_query(query, overrides).await?;
        let batch = concat_batches(&schema, &batches)?;
        let pairs = batch
            .column(0)
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| Error::Internal("pair column".into()))?;
        let by_row = (0..pairs.len())
            .map(|j| (pairs.value(j) as usize, j))
            .collect();
        let columns = def
            .columns
            .iter()
            .zip(&batch.columns()[1..])
            .map(|(c, a)| Ok(coerce_column(a, &nullable(c))?.array))
            .collect::<Result<Vec<_>>>()?;
        Ok((by_row, columns))
    }
}
