//! Bulk writes without the statement path per row (SPEC §4.10).
//!
//! Two shapes of INSERT skip the work that dominates them:
//!
//! - **`query_batch` of `INSERT … VALUES ($1, $2, …)`.** Instead of binding, routing and
//!   writing one statement per parameter set, every set is bound into one column of
//!   cells and the rows are written as one insert. Each cell is the value the set's own
//!   statement would have produced (the same literal, typed on its own, see
//!   [`Txn::cells_to_array`]); constraints, defaults, sequences, vector checks and the
//!   RETURNING row count are those of the insert path. When anything fails, the batch
//!   is run again set by set, so the error (and the set it names) is the statement
//!   path's.
//! - **Literal multi-row `INSERT … VALUES`.** sqlparser builds an expression tree per
//!   literal, which was half the time of such statements. [`scan_literal_insert`] reads
//!   `INSERT INTO name [(cols)] VALUES (…), …` whose cells are plain literals (numbers,
//!   strings, NULL, TRUE/FALSE, DEFAULT) straight from the text; the rows then go
//!   through the same conversion as the parsed statement's literal rows. Any other text
//!   (a cast, a function, a comment, ON CONFLICT, RETURNING…) is left to the parser.
//!
//! Both are skipped when [`crate::Limits::fast_paths`] is off, which is how tests check
//! that they give the same rows and errors as the statement path.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringBuilder};
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    self, Expr, Ident, ObjectName, SelectItem, SetExpr, TableObject, Value, visit_expressions,
};
use serde_json::Value as Json;
use tarn_catalog::ColumnDef;

use crate::error::Result;
use crate::rewrite::params::{bind, json_number_text, json_to_expr};
use crate::statement::dml::{Cell, literal_cell, number_scalar, numbers_as_text};
use crate::statement::result::{BatchTotals, StatementResult};
use crate::statement::txn::Txn;

/// Whether `ins` has the shape the batch path takes: one row of VALUES into a table,
/// no ON CONFLICT (a later set may update a row an earlier one wrote, which one insert
/// cannot express), and a RETURNING, if any, of plain columns (one row per row written,
/// whatever the table holds).
pub(crate) fn batch_shape(ins: &ast::Insert) -> bool {
    let Some(q) = &ins.source else {
        return false;
    };
    let one_row = matches!(q.body.as_ref(), SetExpr::Values(v) if v.rows.len() == 1);
    let plain = |e: &Expr| matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_));
    let returning = ins.returning.as_ref().is_none_or(|items| {
        items.iter().all(|item| match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => true,
            SelectItem::UnnamedExpr(e) => plain(e),
            SelectItem::ExprWithAlias { expr, .. } => plain(expr),
            _ => false,
        })
    });
    one_row
        && q.with.is_none()
        && q.order_by.is_none()
        && q.limit_clause.is_none()
        && ins.on.is_none()
        && matches!(ins.table, TableObject::TableName(_))
        && returning
}

/// What one cell of the batch's VALUES row becomes for each parameter set.
enum Template {
    /// `$n`: the set's value `n - 1`.
    Param(usize),
    /// A literal without parameters: the same cell for every set.
    Const(Cell),
    /// An expression around parameters (`$1::vector`): bound per set.
    Bound(Box<Expr>),
}

fn placeholder(e: &Expr) -> Option<&str> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => Some(p),
            _ => None,
        },
        _ => None,
    }
}

fn has_placeholder(e: &Expr) -> bool {
    visit_expressions(e, |x| {
        if placeholder(x).is_some() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

/// The cell a JSON parameter value gives in column `col`: what
/// `literal_cell(json_to_expr(v), col)` gives, without building the expression for the
/// common scalars.
fn json_cell(v: &Json, col: &ColumnDef) -> Option<Cell> {
    Some(Cell::Scalar(match v {
        Json::Null => ScalarValue::Null,
        Json::Bool(b) => ScalarValue::Boolean(Some(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            // An integer past int8 binds as a float8 literal (§4.6): through the same
            // expression, so a text column keeps that float's text in both paths (it
            // kept the JSON digits here and the float's text in the planned path).
            (None, _) if n.is_u64() => return literal_cell(&json_to_expr(v), col),
            // What parsing the bound literal's text gives, without writing it: the text
            // of a float is its shortest round-trip form, so it parses back to itself.
            _ if numbers_as_text(col) => number_scalar(&json_number_text(n), col),
            (Some(i), _) => ScalarValue::Int64(Some(i)),
            (None, f) => ScalarValue::Float64(f),
        },
        Json::String(s) => ScalarValue::Utf8(Some(s.clone())),
        Json::Object(_) => ScalarValue::Utf8(Some(v.to_string())),
        Json::Array(_) => return literal_cell(&json_to_expr(v), col),
    }))
}

/// The one kind of a column's non-NULL cells, for building its array directly. `kind`
/// gives a cell's kind, `Some(None)` for NULL, or `None` for a cell that needs the cell
/// by cell path. `None` for such a cell, mixed kinds, or no non-NULL cell.
fn one_kind<T, K: PartialEq>(
    cells: impl IntoIterator<Item = T>,
    kind: impl Fn(T) -> Option<Option<K>>,
) -> Option<K> {
    let mut found = None;
    for c in cells {
        if let Some(k) = kind(c)? {
            match &found {
                None => found = Some(k),
                Some(prev) if *prev != k => return None,
                Some(_) => {}
            }
        }
    }
    found
}

/// The array of parameter `p` over all `sets` when every non-NULL value is of one kind
/// that [`json_cell`] maps to one scalar type (strings, integers, floats or booleans),
/// built without a scalar per cell: what `cells_to_array` makes of those cells. `None`
/// otherwise (mixed kinds, numbers for text-like columns, arrays, objects, all NULL, a
/// set without the parameter).
fn direct_array(sets: &[Vec<Json>], p: usize, col: &ColumnDef) -> Option<ArrayRef> {
    #[derive(PartialEq, Clone, Copy)]
    enum Kind {
        Str,
        Int,
        Float,
        Bool,
    }
    let kind = one_kind(sets, |set| {
        Some(Some(match set.get(p)? {
            Json::Null => return Some(None),
            Json::String(_) => Kind::Str,
            Json::Number(n) if n.is_i64() => Kind::Int,
            Json::Number(n) if n.is_f64() => Kind::Float,
            Json::Bool(_) => Kind::Bool,
            _ => return None,
        }))
    });
    let text_like = numbers_as_text(col);
    let values = sets.iter().map(|s| &s[p]);
    Some(match kind? {
        Kind::Str => {
            let mut b = StringBuilder::with_capacity(sets.len(), sets.len() * 16);
            for v in values {
                match v {
                    Json::String(s) => b.append_value(s),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        Kind::Int if !text_like => Arc::new(Int64Array::from_iter(values.map(Json::as_i64))),
        Kind::Float if !text_like => Arc::new(Float64Array::from_iter(values.map(Json::as_f64))),
        Kind::Bool => Arc::new(BooleanArray::from_iter(values.map(Json::as_bool))),
        _ => return None,
    })
}

impl Txn<'_> {
    /// Writes every parameter set of a batch of `ins` (of [`batch_shape`]) as one
    /// insert. `Ok(None)` when a cell is not a literal once bound (`now()`, `$1 + 1`):
    /// the statement path runs the batch instead. An error means only that the batch
    /// fails; the caller re-runs it set by set for the statement path's message.
    pub(crate) async fn insert_batch(
        &mut self,
        ins: &ast::Insert,
        sets: &[Vec<Json>],
    ) -> Result<Option<BatchTotals>> {
        let (TableObject::TableName(name), Some(q)) = (&ins.table, &ins.source) else {
            return Ok(None);
        };
        let SetExpr::Values(values) = q.body.as_ref() else {
            return Ok(None);
        };
        let def = self.target(name).await?;
        let mut targets = Self::insert_targets(&def, &ins.columns)?;
        let row = &values.rows[0];
        Self::implicit_width(&mut targets, !ins.columns.is_empty(), row.len());
        if row.len() != targets.len() {
            return Ok(None);
        }
        let mut templates = Vec::with_capacity(row.len());
        for (e, &t) in row.iter().zip(&targets) {
            templates.push(if let Some(p) = placeholder(e) {
                match p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
                    Some(n) if n >= 1 => Template::Param(n - 1),
                    _ => return Ok(None),
                }
            } else if has_placeholder(e) {
                Template::Bound(Box::new(e.clone()))
            } else {
                let mut e = e.clone();
                bind(&mut e, &[])?;
                match literal_cell(&e, &def.columns[t]) {
                    Some(cell) => Template::Const(cell),
                    None => return Ok(None),
                }
            });
        }
        let n = sets.len();
        for params in sets {
            self.shared.check_params(params)?;
        }
        // A parameter column of one JSON kind becomes its array directly; the others
        // go cell by cell.
        let direct: Vec<Option<ArrayRef>> = templates
            .iter()
            .zip(&targets)
            .map(|(template, &t)| match template {
                Template::Param(p) => direct_array(sets, *p, &def.columns[t]),
                _ => None,
            })
            .collect();
        let mut columns: Vec<Vec<Cell>> = direct
            .iter()
            .map(|d| Vec::with_capacity(if d.is_some() { 0 } else { n }))
            .collect();
        for params in sets {
            for (((template, &t), cells), d) in templates
                .iter()
                .zip(&targets)
                .zip(&mut columns)
                .zip(&direct)
            {
                if d.is_some() {
                    continue;
                }
                let col = &def.columns[t];
                let cell = match template {
                    Template::Param(p) => params.get(*p).and_then(|v| json_cell(v, col)),
                    Template::Const(c) => Some(c.clone()),
                    Template::Bound(e) => {
                        let mut e = Expr::clone(e);
                        bind(&mut e, params)?;
                        literal_cell(&e, col)
                    }
                };
                let Some(cell) = cell else {
                    return Ok(None);
                };
                cells.push(cell);
            }
        }
        let mut arrays = Vec::with_capacity(columns.len());
        for ((cells, &t), d) in columns.into_iter().zip(&targets).zip(direct) {
            match d {
                // What `cells_to_array` gives for cells of one type and no DEFAULT.
                Some(array) => arrays.push(array),
                None => {
                    let col = def.columns[t].clone();
                    arrays.push(self.cells_to_array(&def, &col, cells, true).await?);
                }
            }
        }
        let rows = self.write_rows(&def, &targets, arrays, n).await?;
        let row_count = match &ins.returning {
            None => 0,
            Some(items) => {
                let relation = match &ins.table_alias {
                    Some(a) => format!("{name} AS {}", a.alias),
                    None => name.to_string(),
                };
                self.returning(&def, &relation, items, rows, n as u64)
                    .await?
                    .row_count()
            }
        };
        Ok(Some(BatchTotals {
            statements: n as u64,
            rows_affected: n as u64,
            row_count,
            notices: Vec::new(),
        }))
    }

    /// Runs a literal INSERT read by [`scan_literal_insert`] as the statement path runs
    /// its parsed form. `Ok(None)` when its rows do not match the target columns: the
    /// statement path reports that.
    pub(crate) async fn insert_literal(
        &mut self,
        lit: LiteralInsert<'_>,
    ) -> Result<Option<StatementResult>> {
        let def = self.target(&ObjectName::from(lit.table)).await?;
        let columns: Vec<ObjectName> = lit
            .columns
            .into_iter()
            .map(|c| ObjectName::from(vec![c]))
            .collect();
        let mut targets = Self::insert_targets(&def, &columns)?;
        Self::implicit_width(&mut targets, !columns.is_empty(), lit.width);
        if targets.len() != lit.width {
            return Ok(None);
        }
        let n = lit.cells.len() / lit.width;
        let mut arrays = Vec::with_capacity(targets.len());
        for (j, &t) in targets.iter().enumerate() {
            let col = def.columns[t].clone();
            let column = || lit.cells.iter().skip(j).step_by(lit.width);
            if let Some(array) = direct_literal_array(column, &col) {
                arrays.push(array);
                continue;
            }
            let cells = column().map(|l| l.cell(&col)).collect();
            arrays.push(self.cells_to_array(&def, &col, cells, false).await?);
        }
        let rows = self.write_rows(&def, &targets, arrays, n).await?;
        Ok(Some(StatementResult::none(rows.num_rows() as u64)))
    }
}

/// The array of a literal column when its non-NULL cells are all strings, all booleans,
/// or all numbers that [`number_scalar`] reads as integers or floats: what
/// `cells_to_array` makes of their cells (integers among floats widen to float), without
/// a scalar per cell. `None` otherwise (DEFAULT, mixed kinds, numbers for text-like
/// columns, all NULL).
fn direct_literal_array<'a, 'b: 'a, I>(column: impl Fn() -> I, col: &ColumnDef) -> Option<ArrayRef>
where
    I: Iterator<Item = &'a Lit<'b>>,
{
    #[derive(PartialEq, Clone, Copy)]
    enum Kind {
        Str,
        Num,
        Bool,
    }
    let kind = one_kind(column(), |l| match l {
        Lit::Null => Some(None),
        Lit::Str(_) => Some(Some(Kind::Str)),
        Lit::Number(_) => Some(Some(Kind::Num)),
        Lit::Bool(_) => Some(Some(Kind::Bool)),
        Lit::Default => None,
    });
    let n = column().count();
    Some(match kind? {
        Kind::Str => {
            let mut b = StringBuilder::with_capacity(n, n * 16);
            for l in column() {
                match l {
                    Lit::Str(s) => b.append_value(s),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        Kind::Bool => Arc::new(BooleanArray::from_iter(column().map(|l| match l {
            Lit::Bool(b) => Some(*b),
            _ => None,
        }))),
        Kind::Num => {
            if numbers_as_text(col) {
                return None;
            }
            let mut ints = Vec::with_capacity(n);
            let mut float = false;
            for l in column() {
                ints.push(match l {
                    Lit::Number(t) => match t.parse::<i64>() {
                        Ok(i) => Some(Ok(i)),
                        Err(_) => {
                            float = true;
                            Some(Err(t.parse::<f64>().ok()?))
                        }
                    },
                    _ => None,
                });
            }
            if float {
                Arc::new(Float64Array::from_iter(ints.into_iter().map(|v| {
                    v.map(|v| match v {
                        Ok(i) => i as f64,
                        Err(f) => f,
                    })
                })))
            } else {
                Arc::new(Int64Array::from_iter(
                    ints.into_iter().map(|v| v.and_then(|v| v.ok())),
                ))
            }
        }
    })
}

/// A literal multi-row INSERT read straight from its text.
#[derive(Debug, PartialEq)]
pub(crate) struct LiteralInsert<'a> {
    /// The table's name parts, as written (quoted parts keep their quotes).
    pub table: Vec<Ident>,
    /// The column list (empty: all columns).
    pub columns: Vec<Ident>,
    /// Cells per row.
    pub width: usize,
    /// Every row's cells, row after row.
    pub cells: Vec<Lit<'a>>,
}

/// A literal cell: what sqlparser would have made a `Value` (or `DEFAULT`) of.
#[derive(Debug, PartialEq)]
pub(crate) enum Lit<'a> {
    Null,
    Bool(bool),
    /// A number's text, with its `-` if negative.
    Number(&'a str),
    Str(Cow<'a, str>),
    Default,
}

impl Lit<'_> {
    /// The cell [`literal_cell`] gives for the parsed form of this literal.
    fn cell(&self, col: &ColumnDef) -> Cell {
        match self {
            Lit::Null => Cell::Scalar(ScalarValue::Null),
            Lit::Bool(b) => Cell::Scalar(ScalarValue::Boolean(Some(*b))),
            Lit::Number(n) => Cell::Scalar(number_scalar(n, col)),
            Lit::Str(s) => Cell::Scalar(ScalarValue::Utf8(Some(s.to_string()))),
            Lit::Default => Cell::Default,
        }
    }
}

/// Reads `INSERT INTO name [(col, …)] VALUES (lit, …), … [;]` when every cell is a
/// plain literal: an unsigned or `-`-prefixed decimal number, a `'…'` string (`''` for a
/// quote; backslashes are plain characters, as in standard PostgreSQL strings), NULL,
/// TRUE, FALSE or DEFAULT. `None` for anything else, which the parser then reads; the
/// accepted text is a subset the parser reads to the same literals.
pub(crate) fn scan_literal_insert(sql: &str) -> Option<LiteralInsert<'_>> {
    let mut s = Scanner { text: sql, pos: 0 };
    s.skip_ws();
    s.keyword("insert")?;
    s.require_ws()?;
    s.keyword("into")?;
    s.require_ws()?;
    let mut table = vec![s.ident()?];
    while s.eat(b'.') {
        table.push(s.ident()?);
    }
    s.skip_ws();
    let mut columns = Vec::new();
    if s.eat(b'(') {
        loop {
            s.skip_ws();
            columns.push(s.ident()?);
            s.skip_ws();
            if s.eat(b')') {
                break;
            }
            if !s.eat(b',') {
                return None;
            }
        }
        s.skip_ws();
    }
    s.keyword("values")?;
    s.skip_ws();
    let mut cells = Vec::new();
    let mut width = 0;
    loop {
        if !s.eat(b'(') {
            return None;
        }
        let start = cells.len();
        loop {
            s.skip_ws();
            cells.push(s.literal()?);
            s.skip_ws();
            if s.eat(b')') {
                break;
            }
            if !s.eat(b',') {
                return None;
            }
        }
        let n = cells.len() - start;
        if width == 0 {
            width = n;
        } else if n != width {
            return None;
        }
        s.skip_ws();
        if !s.eat(b',') {
            break;
        }
        s.skip_ws();
    }
    if s.eat(b';') {
        s.skip_ws();
    }
    (s.pos == sql.len()).then_some(LiteralInsert {
        table,
        columns,
        width,
        cells,
    })
}

struct Scanner<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn require_ws(&mut self) -> Option<()> {
        let at = self.pos;
        self.skip_ws();
        (self.pos > at).then_some(())
    }

    /// An unquoted word: ASCII letters, digits and `_`, not starting with a digit. A
    /// word followed by any other identifier character (`$`, non-ASCII) is not one the
    /// scanner reads.
    fn word(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        if !matches!(self.peek(), Some(b'a'..=b'z' | b'A'..=b'Z' | b'_')) {
            return None;
        }
        while matches!(
            self.peek(),
            Some(b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_')
        ) {
            self.pos += 1;
        }
        match bytes.get(self.pos) {
            Some(b'$') | Some(0x80..) => None,
            _ => Some(&self.text[start..self.pos]),
        }
    }

    fn keyword(&mut self, kw: &str) -> Option<()> {
        self.word()
            .filter(|w| w.eq_ignore_ascii_case(kw))
            .map(|_| ())
    }

    fn ident(&mut self) -> Option<Ident> {
        if self.eat(b'"') {
            let body = self.quoted(b'"')?;
            if body.is_empty() {
                return None;
            }
            return Some(Ident::with_quote('"', body));
        }
        let w = self.word()?;
        // Words the grammar gives a meaning here are the parser's to read (it reads
        // `INSERT INTO local|directory|table …` as keywords, for one).
        if [
            "values",
            "default",
            "select",
            "with",
            "as",
            "on",
            "returning",
            "local",
            "directory",
            "table",
        ]
        .iter()
        .any(|k| w.eq_ignore_ascii_case(k))
        {
            return None;
        }
        Some(Ident::new(w))
    }

    /// The rest of a quoted token opened by `q` (already read), doubled `q`s read as
    /// one.
    fn quoted(&mut self, q: u8) -> Option<Cow<'a, str>> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        let mut owned: Option<String> = None;
        let mut from = start;
        loop {
            let i = self.pos + memchr::memchr(q, &bytes[self.pos..])?;
            if bytes.get(i + 1) == Some(&q) {
                owned
                    .get_or_insert_with(String::new)
                    .push_str(&self.text[from..=i]);
                self.pos = i + 2;
                from = self.pos;
                continue;
            }
            self.pos = i + 1;
            return Some(match owned {
                None => Cow::Borrowed(&self.text[start..i]),
                Some(mut s) => {
                    s.push_str(&self.text[from..i]);
                    Cow::Owned(s)
                }
            });
        }
    }

    fn digits(&mut self) -> bool {
        let at = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos > at
    }

    fn literal(&mut self) -> Option<Lit<'a>> {
        let start = self.pos;
        let lit = match self.peek()? {
            b'\'' => {
                self.pos += 1;
                Lit::Str(self.quoted(b'\'')?)
            }
            b'-' | b'0'..=b'9' => {
                self.eat(b'-');
                if !self.digits() {
                    return None;
                }
                if self.eat(b'.') && !self.digits() {
                    return None;
                }
                if matches!(self.peek(), Some(b'e' | b'E')) {
                    self.pos += 1;
                    if !self.eat(b'+') {
                        self.eat(b'-');
                    }
                    if !self.digits() {
                        return None;
                    }
                }
                Lit::Number(&self.text[start..self.pos])
            }
            _ => {
                let w = self.word()?;
                if w.eq_ignore_ascii_case("null") {
                    Lit::Null
                } else if w.eq_ignore_ascii_case("true") {
                    Lit::Bool(true)
                } else if w.eq_ignore_ascii_case("false") {
                    Lit::Bool(false)
                } else if w.eq_ignore_ascii_case("default") {
                    Lit::Default
                } else {
                    return None;
                }
            }
        };
        // A literal ends at a delimiter: `1e`, `'a'::text` or `1abc` are the parser's.
        matches!(
            self.peek(),
            Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b')')
        )
        .then_some(lit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(sql: &str) -> Option<Vec<Lit<'_>>> {
        scan_literal_insert(sql).map(|l| l.cells)
    }

    #[test]
    fn reads_literal_rows() {
        let l = scan_literal_insert(
            "  insert INTO \"ws\".\"T\" (a, \"B\")\nVALUES (1, 'it''s'), (-2.5e-3, NULL) ; ",
        )
        .unwrap();
        assert_eq!(
            l.table,
            vec![Ident::with_quote('"', "ws"), Ident::with_quote('"', "T")]
        );
        assert_eq!(
            l.columns,
            vec![Ident::new("a"), Ident::with_quote('"', "B")]
        );
        assert_eq!(l.width, 2);
        assert_eq!(
            l.cells,
            vec![
                Lit::Number("1"),
                Lit::Str("it's".into()),
                Lit::Number("-2.5e-3"),
                Lit::Null
            ]
        );
        assert_eq!(
            cells("INSERT INTO t VALUES (true,FALSE,default,'a\\b','')"),
            Some(vec![
                Lit::Bool(true),
                Lit::Bool(false),
                Lit::Default,
                Lit::Str("a\\b".into()),
                Lit::Str("".into())
            ])
        );
    }

    #[test]
    fn leaves_everything_else_to_the_parser() {
        for sql in [
            "INSERT INTO t VALUES (1), (1, 2)",
            "INSERT INTO t VALUES (1) RETURNING *",
            "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING",
            "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)",
            "INSERT INTO t VALUES ('a'::text)",
            "INSERT INTO t VALUES ('a' 'b')",
            "INSERT INTO t VALUES (E'a')",
            "INSERT INTO t VALUES (- 1)",
            "INSERT INTO t VALUES (+1)",
            "INSERT INTO t VALUES (.5)",
            "INSERT INTO t VALUES (1.)",
            "INSERT INTO t VALUES (1e)",
            "INSERT INTO t VALUES (1_000)",
            "INSERT INTO t VALUES (0x10)",
            "INSERT INTO t VALUES (now())",
            "INSERT INTO t VALUES ($1)",
            "INSERT INTO t VALUES (ARRAY[1])",
            "INSERT INTO t VALUES (1) -- c",
            "INSERT INTO t VALUES (1 /* c */)",
            "INSERT INTO t VALUES ('unterminated)",
            "INSERT INTO t VALUES ()",
            "INSERT INTO t () VALUES (1)",
            "INSERT INTO t SELECT 1",
            "INSERT INTO t DEFAULT VALUES",
            "INSERT INTO t AS x VALUES (1)",
            "INSERT INTO local VALUES (1)",
            "INSERT INTO TABLE t VALUES (1)",
            "INSERT INTO Directory.x VALUES (1)",
            "INSERT INTO \"\" VALUES (1)",
            "INSERT INTO tå VALUES (1)",
            "INSERT INTO t$ VALUES (1)",
            "INSERT INTO t VALUES (1),",
            "INSERT INTO t VALUES (1) x",
            "INSERT INTO t VALUES (1);;",
            "INSERT INTO t VALUES (nul)",
            "INSERTINTO t VALUES (1)",
            "UPDATE t SET a = 1",
            "",
        ] {
            assert_eq!(scan_literal_insert(sql), None, "{sql}");
        }
    }
}
