//! CSV and JSON files to typed Arrow record batches, as a stream: chunks of bytes in,
//! batches out, memory bounded by one batch and the longest row.
//!
//! The first bytes (a bounded sample) decide the format (by file name, else by
//! content), the CSV delimiter, the column names and the column types (SPEC §6:
//! integers → int8, decimals → float8, true/false → bool, ISO dates and timestamps →
//! date/timestamptz, nested objects and other JSON → jsonb, arrays of numbers →
//! float4[] vectors, anything else text). The rest is decoded against those types: a
//! later value that does not fit is an error naming its line and column. Whether a
//! column may be NULL is known only at the end ([`Ingest::columns`]).
//!
//! This crate knows nothing of tables or storage: the caller turns the batches into a
//! table (see `SqlEngine::upload_table`).

mod build;
mod csv;
mod infer;
mod json;
mod jsonb;

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use build::{ColumnBuilder, arrow_type};
use infer::Kind;
pub use infer::{DAY_MICROS, STORED_DAYS, fraction_micros, underflows};
pub use jsonb::JsonbText;

/// A column type uploads infer (each is one SQL type; see [`ColumnType::sql_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// `int8`: 64-bit integers.
    Int8,
    /// `float8`: finite decimals.
    Float8,
    /// `bool`.
    Bool,
    /// `date` (ISO `YYYY-MM-DD`).
    Date,
    /// `timestamptz` (ISO timestamps; without an offset they are UTC).
    Timestamptz,
    /// `jsonb` (objects, and arrays that are not vectors), stored as canonical text.
    Jsonb,
    /// `float4[]` holding vectors of one dimension.
    Vector,
    /// `text`.
    Text,
}

impl ColumnType {
    /// The PostgreSQL name of the type.
    pub fn sql_name(self) -> &'static str {
        match self {
            ColumnType::Int8 => "int8",
            ColumnType::Float8 => "float8",
            ColumnType::Bool => "bool",
            ColumnType::Date => "date",
            ColumnType::Timestamptz => "timestamptz",
            ColumnType::Jsonb => "jsonb",
            ColumnType::Vector => "_float4",
            ColumnType::Text => "text",
        }
    }
}

/// A column of the file, as inferred.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The header's name (CSV) or the key (JSON). An empty name becomes `column_N`
    /// (1-based position); a repeated one gets a suffix `_1`, `_2`, ….
    pub name: String,
    /// The inferred type.
    pub ty: ColumnType,
    /// Some row had no value (an empty CSV field, a JSON `null` or missing key).
    pub nullable: bool,
    /// For vectors: the dimension every row has.
    pub dim: Option<u32>,
}

/// The file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma (or tab, semicolon, pipe) separated values with a header row.
    Csv,
    /// An array of objects, or one object after another (NDJSON).
    Json,
}

/// Bounds of an upload.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Rows the types are inferred from.
    pub sample_rows: usize,
    /// Bytes read before the types are inferred a first time: inference waits for
    /// more (up to `max_sample_bytes`) while the sample has fewer than `sample_rows`.
    pub sample_bytes: usize,
    /// Most bytes the types are inferred from.
    pub max_sample_bytes: usize,
    /// Most columns a file may have.
    pub max_columns: usize,
    /// Longest CSV record, in bytes.
    pub max_row_bytes: usize,
    /// Longest JSON row, in bytes (parsed whole, it takes several times its size).
    pub max_json_row_bytes: usize,
    /// Most rows per batch.
    pub batch_rows: usize,
    /// Most cells per batch (a wide file gets shorter batches).
    pub batch_cells: usize,
    /// Bytes of input per batch (long rows make shorter batches).
    pub batch_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            sample_rows: 10_000,
            sample_bytes: 4 << 20,
            max_sample_bytes: 32 << 20,
            max_columns: 1600,
            max_row_bytes: 64 << 20,
            max_json_row_bytes: 8 << 20,
            batch_rows: 8192,
            batch_cells: 1 << 20,
            batch_bytes: 16 << 20,
        }
    }
}

/// Why a file cannot become a table. Every error is the file's fault (a 400); the
/// message names the line (and the column) where it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestError(pub String);

impl std::fmt::Display for IngestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IngestError {}

type Result<T> = std::result::Result<T, IngestError>;

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(IngestError(message.into()))
}

/// The format a file name says, if it says one.
pub fn format_of_name(filename: &str) -> Option<Format> {
    let ext = filename.rsplit_once('.')?.1.to_ascii_lowercase();
    match ext.as_str() {
        "csv" | "tsv" | "tab" | "txt" => Some(Format::Csv),
        "json" | "ndjson" | "jsonl" => Some(Format::Json),
        _ => None,
    }
}

/// Columns being decoded, and the batch being built.
struct Table {
    columns: Vec<Column>,
    builders: Vec<ColumnBuilder>,
    schema: SchemaRef,
    rows_in_batch: usize,
    bytes_in_batch: usize,
    batch_rows: usize,
    /// Rows the types were inferred from (for messages).
    sampled: usize,
}

impl Table {
    fn new(columns: Vec<Column>, sampled: usize, limits: &Limits) -> Self {
        let builders = columns
            .iter()
            .map(|c| ColumnBuilder::new(c.ty, None))
            .collect();
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(&c.name, arrow_type(c.ty), true))
                .collect::<Vec<_>>(),
        ));
        let batch_rows = (limits.batch_cells / columns.len().max(1)).clamp(1, limits.batch_rows);
        Self {
            columns,
            builders,
            schema,
            rows_in_batch: 0,
            bytes_in_batch: 0,
            batch_rows,
            sampled,
        }
    }

    fn cell_error(&self, line: u64, col: usize, why: String) -> IngestError {
        let c = &self.columns[col];
        IngestError(format!(
            "line {line}, column \"{}\": {why} (the column's type, {}, was inferred from \
             the first {} rows)",
            c.name,
            c.ty.sql_name(),
            self.sampled
        ))
    }

    /// Ends a row of `bytes` input bytes; a full batch goes to `out`.
    fn end_row(&mut self, bytes: usize, limits: &Limits, out: &mut Vec<RecordBatch>) -> Result<()> {
        self.rows_in_batch += 1;
        self.bytes_in_batch += bytes;
        if self.rows_in_batch >= self.batch_rows || self.bytes_in_batch >= limits.batch_bytes {
            self.flush(out)?;
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Vec<RecordBatch>) -> Result<()> {
        if self.rows_in_batch == 0 {
            return Ok(());
        }
        let arrays = self.builders.iter_mut().map(|b| b.finish()).collect();
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| IngestError(format!("internal error building a batch: {e}")))?;
        self.rows_in_batch = 0;
        self.bytes_in_batch = 0;
        out.push(batch);
        Ok(())
    }

    fn final_columns(&self) -> Vec<Column> {
        self.columns
            .iter()
            .zip(&self.builders)
            .map(|(c, b)| Column {
                nullable: b.has_null,
                dim: b.dim,
                ..c.clone()
            })
            .collect()
    }
}

/// Longest column name, in bytes (PostgreSQL's identifier length): longer header
/// names are cut (at a character boundary), as PostgreSQL cuts identifiers.
const MAX_NAME_BYTES: usize = 63;

/// Column names from a header: trimmed and cut to [`MAX_NAME_BYTES`], empty ones named
/// by position (`column_N`), repeats suffixed (`name_1`, `name_2`, …) with a suffix no
/// other column has. A name given whole is its column's before a cut one can take it:
/// a header cut to 63 bytes had taken the name of a later column written with exactly
/// those 63 bytes, which then got a suffix (its values under another column's name).
fn column_names(raw: Vec<String>) -> Vec<String> {
    let cut = |s: &str, max: usize| {
        let mut end = s.len().min(max);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    };
    let first: Vec<(String, bool)> = raw
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let whole = n.trim();
            let n = cut(whole, MAX_NAME_BYTES);
            if n.is_empty() {
                (format!("column_{}", i + 1), false)
            } else {
                let was_cut = n.len() < whole.len();
                (n, was_cut)
            }
        })
        .collect();
    let mut taken: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut out: Vec<Option<String>> = vec![None; first.len()];
    for (i, (n, was_cut)) in first.iter().enumerate() {
        if !was_cut && taken.insert(n.clone()) {
            out[i] = Some(n.clone());
        }
    }
    for (i, (n, _)) in first.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        if taken.insert(n.clone()) {
            out[i] = Some(n.clone());
            continue;
        }
        let mut k = 1;
        loop {
            let suffix = format!("_{k}");
            let candidate = cut(n, MAX_NAME_BYTES - suffix.len()) + &suffix;
            // A later column may have this name itself: skip names any column has.
            if !first.iter().any(|(n, _)| *n == candidate) && taken.insert(candidate.clone()) {
                out[i] = Some(candidate);
                break;
            }
            k += 1;
        }
    }
    out.into_iter().flatten().collect()
}

struct CsvState {
    splitter: csv::Splitter,
    table: Table,
    header_done: bool,
}

struct JsonState {
    framer: json::Framer,
    table: Table,
    index: HashMap<String, usize>,
    /// The keys of the columns by position, as rows write them.
    names: Vec<String>,
    /// Per column: the row being decoded gave it a value.
    seen: Vec<bool>,
}

enum State {
    Sampling,
    Csv(Box<CsvState>),
    Json(Box<JsonState>),
    Done(Vec<Column>),
}

/// A file being turned into batches. Feed it with [`Ingest::push`], end it with
/// [`Ingest::finish`]; batches come out as they fill.
pub struct Ingest {
    limits: Limits,
    hint: Option<Format>,
    tab: bool,
    state: State,
    /// Sampled bytes not yet decoded.
    sample: Vec<u8>,
    /// Sample size at which inference is tried next.
    next_try: usize,
    bom_checked: bool,
    rows: u64,
    bytes: u64,
}

impl Ingest {
    /// An upload of a file named `filename` (its extension, if known, fixes the format).
    pub fn new(filename: &str, limits: Limits) -> Self {
        let lower = filename.to_ascii_lowercase();
        Self {
            hint: format_of_name(filename),
            tab: lower.ends_with(".tsv") || lower.ends_with(".tab"),
            next_try: limits.sample_bytes,
            limits,
            state: State::Sampling,
            sample: Vec::new(),
            bom_checked: false,
            rows: 0,
            bytes: 0,
        }
    }

    /// Rows decoded so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes taken so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The columns and batch being decoded (none while sampling or once finished).
    fn table(&mut self) -> Option<&mut Table> {
        match &mut self.state {
            State::Csv(s) => Some(&mut s.table),
            State::Json(s) => Some(&mut s.table),
            State::Sampling | State::Done(_) => None,
        }
    }

    /// The columns, once inferred (their nullability and dimension are final only
    /// after [`Ingest::finish`]).
    pub fn columns(&mut self) -> Option<Vec<Column>> {
        if let State::Done(c) = &self.state {
            return Some(c.clone());
        }
        self.table().map(|t| t.final_columns())
    }

    /// Takes the next bytes of the file; finished batches are appended to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<RecordBatch>) -> Result<()> {
        self.bytes += data.len() as u64;
        match self.state {
            State::Sampling => {
                self.sample.extend_from_slice(data);
                if self.sample.len() >= self.next_try {
                    self.start(false, out)?;
                }
                Ok(())
            }
            State::Done(_) => err("the upload has ended"),
            _ => self.feed(data, out),
        }
    }

    /// Ends the file: the last batch goes to `out`, and the final columns are returned.
    pub fn finish(&mut self, out: &mut Vec<RecordBatch>) -> Result<Vec<Column>> {
        if matches!(self.state, State::Sampling) {
            self.start(true, out)?;
        }
        self.feed(&[], out)?;
        let table = self
            .table()
            .ok_or_else(|| IngestError("internal error: no columns after the whole file".into()))?;
        table.flush(out)?;
        let columns = table.final_columns();
        self.state = State::Done(columns.clone());
        Ok(columns)
    }

    /// Infers the columns from the sample (`eof`: it is the whole file) and decodes
    /// it. Leaves the state `Sampling` when the sample holds no whole row yet.
    fn start(&mut self, eof: bool, out: &mut Vec<RecordBatch>) -> Result<()> {
        if !self.bom_checked && (self.sample.len() >= 3 || eof) {
            self.bom_checked = true;
            if self.sample.starts_with(&[0xEF, 0xBB, 0xBF]) {
                self.sample.drain(..3);
            }
        }
        let format = self.hint.unwrap_or_else(|| {
            match self.sample.iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b'[') | Some(b'{') => Format::Json,
                _ => Format::Csv,
            }
        });
        let inferred = match format {
            Format::Csv => self.infer_csv(eof)?,
            Format::Json => self.infer_json(eof)?,
        };
        if !inferred {
            let max_row = match format {
                Format::Csv => self.limits.max_row_bytes,
                Format::Json => self.limits.max_json_row_bytes,
            };
            if self.sample.len() > max_row.max(self.limits.max_sample_bytes) {
                return err(format!(
                    "line 1: a row longer than {} MiB (an unterminated quote?)",
                    max_row >> 20
                ));
            }
            // Up to the sample's bound, then up to the longest row.
            let bound = if self.sample.len() < self.limits.max_sample_bytes {
                self.limits.max_sample_bytes
            } else {
                max_row.max(self.limits.max_sample_bytes) + 1
            };
            self.next_try = (self.sample.len() * 2).min(bound);
            return Ok(());
        }
        let sample = std::mem::take(&mut self.sample);
        self.feed(&sample, out)
    }

    fn infer_csv(&mut self, eof: bool) -> Result<bool> {
        if eof && self.sample.iter().all(|b| b.is_ascii_whitespace()) {
            return err("the file is empty");
        }
        let delimiter = if self.tab {
            b'\t'
        } else {
            csv::sniff_delimiter(&self.sample, eof)
        };
        let mut s = csv::Splitter::new(
            delimiter,
            self.limits.max_row_bytes,
            self.limits.max_columns + 1,
        );
        let mut rest: &[u8] = &self.sample;
        let mut names: Option<Vec<String>> = None;
        let mut kinds: Vec<Kind> = Vec::new();
        let mut rows = 0;
        let mut ended = false;
        while rows < self.limits.sample_rows {
            if rest.is_empty() && !eof {
                break;
            }
            // At the end of the sample of a whole file, the empty slice ends the data.
            let (n, step) = s.next(rest).map_err(IngestError)?;
            rest = &rest[n..];
            match step {
                csv::Step::Record if names.is_none() => {
                    if s.len() > self.limits.max_columns {
                        return err(format!(
                            "the file has {} columns; a table can have at most {}",
                            s.len(),
                            self.limits.max_columns
                        ));
                    }
                    let line = s.line();
                    let raw = (0..s.len())
                        .map(|i| {
                            std::str::from_utf8(s.field(i))
                                .map(|x| x.trim().to_string())
                                .map_err(|_| {
                                    IngestError(format!(
                                        "line {line}: the header is not valid UTF-8"
                                    ))
                                })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    s.set_empty_lines_are_rows(raw.len() == 1);
                    kinds = vec![Kind::Null; raw.len()];
                    names = Some(column_names(raw));
                }
                csv::Step::Record => {
                    if s.len() != kinds.len() {
                        return err(field_count(s.line(), kinds.len(), s.len()));
                    }
                    for (i, k) in kinds.iter_mut().enumerate() {
                        // Invalid UTF-8 is reported when the row is decoded; a quoted
                        // empty field is the empty string, which only text holds.
                        let kind = if s.quoted_empty(i) {
                            Kind::Text
                        } else {
                            std::str::from_utf8(s.field(i)).map_or(Kind::Text, infer::classify_text)
                        };
                        *k = k.merge(kind, false);
                    }
                    rows += 1;
                }
                csv::Step::End => {
                    ended = true;
                    break;
                }
                csv::Step::NeedInput => {}
            }
        }
        let Some(names) = names else {
            return if eof || ended {
                err("the file is empty")
            } else {
                Ok(false)
            };
        };
        // Without the sample's rows, wait for more (unless that is all there is, or
        // the sample is as large as it gets).
        if rows < self.limits.sample_rows
            && !(eof || ended)
            && (rows == 0 || self.sample.len() < self.limits.max_sample_bytes)
        {
            return Ok(false);
        }
        let columns = names
            .into_iter()
            .zip(kinds)
            .map(|(name, k)| Column {
                name,
                ty: k.column_type(),
                nullable: false,
                dim: None,
            })
            .collect();
        self.state = State::Csv(Box::new(CsvState {
            splitter: csv::Splitter::new(
                delimiter,
                self.limits.max_row_bytes,
                self.limits.max_columns + 1,
            ),
            table: Table::new(columns, rows, &self.limits),
            header_done: false,
        }));
        Ok(true)
    }

    fn infer_json(&mut self, eof: bool) -> Result<bool> {
        let mut f = json::Framer::new(self.limits.max_json_row_bytes);
        let mut rest: &[u8] = &self.sample;
        let mut order: Vec<String> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut kinds: Vec<Kind> = Vec::new();
        let mut rows = 0;
        let mut ended = false;
        while rows < self.limits.sample_rows {
            if rest.is_empty() && !eof {
                break;
            }
            let (n, step) = f.next(rest).map_err(IngestError)?;
            rest = &rest[n..];
            match step {
                json::Step::Row => {
                    let row = json::parse_row(f.row(), f.row_line()).map_err(IngestError)?;
                    // serde_json gives an integer beyond int8 as a float, and rounds a
                    // decimal longer than a float8 keeps: the values' text tells (looked
                    // at only when the row has a number that long).
                    let big = if f.long_number() {
                        json::inexact_numbers(f.row())
                    } else {
                        Vec::new()
                    };
                    // `-0` is an integer's 0, as in CSV (`serde_json` reads it as -0.0):
                    // its spelling is read only when the row has such a zero.
                    let minus_zero =
                        if row.0.iter().any(|(_, v)| {
                            v.as_f64().is_some_and(|x| x == 0.0 && x.is_sign_negative())
                        }) {
                            json::minus_zero_integers(f.row())
                        } else {
                            Vec::new()
                        };
                    for (j, (k, v)) in row.0.iter().enumerate() {
                        let i = match index.get(k) {
                            Some(&i) => i,
                            None => {
                                if order.len() >= self.limits.max_columns {
                                    return err(format!(
                                        "line {}: more than {} keys; a table can have at most {} columns",
                                        f.row_line(),
                                        self.limits.max_columns,
                                        self.limits.max_columns
                                    ));
                                }
                                index.insert(k.clone(), order.len());
                                order.push(k.clone());
                                kinds.push(Kind::Null);
                                order.len() - 1
                            }
                        };
                        // Such a number is text, as in CSV: no type but text keeps it.
                        let kind = if big.get(j).copied().unwrap_or(false) {
                            Kind::Text
                        } else if minus_zero.get(j).copied().unwrap_or(false) {
                            Kind::Int
                        } else {
                            infer::classify_json(v)
                        };
                        kinds[i] = kinds[i].merge(kind, true);
                    }
                    rows += 1;
                }
                json::Step::End => {
                    ended = true;
                    break;
                }
                json::Step::NeedInput => {}
            }
        }
        if rows < self.limits.sample_rows
            && rows > 0
            && !(eof || ended)
            && self.sample.len() < self.limits.max_sample_bytes
        {
            return Ok(false);
        }
        if rows == 0 {
            if eof || ended {
                return err(if self.sample.iter().all(|b| b.is_ascii_whitespace()) {
                    "the file is empty"
                } else {
                    "the file has no rows: there is nothing to infer the columns from"
                });
            }
            return Ok(false);
        }
        if order.is_empty() {
            return err("the rows have no keys: there is nothing to make columns of");
        }
        // Columns are named as CSV headers are (cut to 63 bytes, empty keys named by
        // position); rows are matched by their keys as written.
        let columns: Vec<Column> = column_names(order.clone())
            .into_iter()
            .zip(kinds)
            .map(|(name, k)| Column {
                name,
                ty: k.column_type(),
                nullable: false,
                dim: None,
            })
            .collect();
        let n = columns.len();
        let names = order;
        self.state = State::Json(Box::new(JsonState {
            framer: json::Framer::new(self.limits.max_json_row_bytes),
            table: Table::new(columns, rows, &self.limits),
            index,
            names,
            seen: vec![false; n],
        }));
        Ok(true)
    }

    /// Decodes `data` (an empty slice ends the file).
    fn feed(&mut self, data: &[u8], out: &mut Vec<RecordBatch>) -> Result<()> {
        let eof = data.is_empty();
        let limits = &self.limits;
        match &mut self.state {
            State::Csv(s) => {
                let mut rest = data;
                loop {
                    let (n, step) = s.splitter.next(rest).map_err(IngestError)?;
                    rest = &rest[n..];
                    match step {
                        csv::Step::Record => {
                            if !s.header_done {
                                s.header_done = true;
                                s.splitter
                                    .set_empty_lines_are_rows(s.table.columns.len() == 1);
                            } else {
                                decode_csv_row(s, limits, out)?;
                                self.rows += 1;
                            }
                        }
                        csv::Step::End => break,
                        // Only a non-empty chunk can run out.
                        csv::Step::NeedInput if rest.is_empty() || eof => break,
                        csv::Step::NeedInput => {}
                    }
                    if rest.is_empty() && !eof {
                        break;
                    }
                }
            }
            State::Json(s) => {
                let mut rest = data;
                loop {
                    let (n, step) = s.framer.next(rest).map_err(IngestError)?;
                    rest = &rest[n..];
                    match step {
                        json::Step::Row => {
                            decode_json_row(s, limits, out)?;
                            self.rows += 1;
                        }
                        json::Step::End => break,
                        json::Step::NeedInput if rest.is_empty() || eof => break,
                        json::Step::NeedInput => {}
                    }
                    if rest.is_empty() && !eof {
                        break;
                    }
                }
            }
            State::Sampling | State::Done(_) => {
                return err("internal error: nothing to decode with");
            }
        }
        Ok(())
    }
}

fn field_count(line: u64, expected: usize, found: usize) -> String {
    format!("line {line}: {found} fields, but the header has {expected}")
}

fn decode_csv_row(s: &mut CsvState, limits: &Limits, out: &mut Vec<RecordBatch>) -> Result<()> {
    let line = s.splitter.line();
    let bytes = s.splitter.record_bytes();
    let n = s.table.columns.len();
    if s.splitter.len() != n {
        return err(field_count(line, n, s.splitter.len()));
    }
    for i in 0..n {
        let raw = s.splitter.field(i);
        let text = std::str::from_utf8(raw)
            .map_err(|_| s.table.cell_error(line, i, "not valid UTF-8".into()))?;
        let pushed = if s.splitter.quoted_empty(i) {
            s.table.builders[i].push_empty_string()
        } else {
            s.table.builders[i].push_text(text)
        };
        if let Err(why) = pushed {
            // The row is refused whole: the columns before it already took a value.
            return Err(s.table.cell_error(line, i, why));
        }
    }
    s.table.end_row(bytes, limits, out)
}

fn decode_json_row(s: &mut JsonState, limits: &Limits, out: &mut Vec<RecordBatch>) -> Result<()> {
    let line = s.framer.row_line();
    let bytes = s.framer.row().len();
    let res = json::decode_row(
        s.framer.row(),
        line,
        s.framer.long_number(),
        &mut s.table.builders,
        &s.names,
        &s.index,
        &mut s.seen,
    );
    match res {
        Ok(()) => s.table.end_row(bytes, limits, out),
        Err(json::RowError::Cell { line, column, why }) => {
            Err(s.table.cell_error(line, column, why))
        }
        Err(json::RowError::Row(m)) if m.contains(" is not a column") => Err(IngestError(format!(
            "{m} (the columns were taken from the keys of the first {} rows)",
            s.table.sampled
        ))),
        Err(json::RowError::Row(m)) => Err(IngestError(m)),
    }
}
