//! The `<#>` operator (SPEC §5): "similarity, higher is better". sqlparser hands it over
//! as `BinaryOperator::Custom("<#>")`; `SimilarityPlanner` (`similarity_planner.rs`) turns it into a call of
//! the scalar function `engine_similarity(stored, query)`, which scores exactly:
//! cosine similarity for `FLOAT4[]`, MaxSim for `FLOAT4[][]` (the right side is the
//! query bag). The top-k rule (`search_rule.rs`) recognizes the same call.
//!
//! A table's columns carry what the checks need in their field metadata (see
//! [`column_metadata`]): the table's name, whether it is `USING engine`, and the
//! vector dimension once known. So `<#>` on a plain table, a query vector of the wrong
//! dimension, or a vector compared with a bag is a 400 naming the column, whether the
//! query value is a literal, a cast of array text or a parameter.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float32Array, Float32Builder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use tarn_catalog::{ColumnDef, SqlType, TableDef};
use tarn_search::{QueryValue, score_rows};

use crate::error::Error;

/// The operator.
pub const OPERATOR: &str = "<#>";
/// Name of the scalar function `<#>` is planned into.
pub const FUNCTION: &str = "engine_similarity";

/// Field metadata: the column's table as `"ws"."t"`.
const META_TABLE: &str = "tarn.table";
/// Field metadata: `"true"` when the table was created `USING engine`.
const META_ENGINE: &str = "tarn.engine";
/// Field metadata: the column's vector dimension, once fixed.
const META_DIM: &str = "tarn.dim";
/// Field metadata: the table's id (text and hybrid `<#>` bind to its snapshot).
pub(crate) const META_TABLE_ID: &str = "tarn.table_id";
/// Field metadata: the column's id.
pub(crate) const META_COLUMN_ID: &str = "tarn.column_id";

/// Metadata for the field of column `col` of table `def` (empty for columns other than
/// vectors, bags and text).
pub fn column_metadata(def: &TableDef, col: &ColumnDef) -> HashMap<String, String> {
    let mut m = HashMap::new();
    let text = matches!(col.ty, SqlType::Text | SqlType::Varchar(_));
    if !text && !matches!(col.ty, SqlType::Vector { .. } | SqlType::MultiVector) {
        return m;
    }
    m.insert(META_TABLE_ID.into(), def.id.to_string());
    m.insert(META_COLUMN_ID.into(), col.id.to_string());
    m.insert(
        META_TABLE.into(),
        format!("\"{}\".\"{}\"", def.workspace_id, def.name),
    );
    m.insert(META_ENGINE.into(), def.engine.to_string());
    if let Some(d) = col.dimension() {
        m.insert(META_DIM.into(), d.to_string());
    }
    m
}

/// The function `<#>` becomes.
pub fn udf() -> Arc<ScalarUDF> {
    static UDF: std::sync::OnceLock<Arc<ScalarUDF>> = std::sync::OnceLock::new();
    UDF.get_or_init(|| Arc::new(ScalarUDF::new_from_impl(Similarity::new())))
        .clone()
}

/// The query side of a vector `<#>` (`stored`: the kind of the searched side, if
/// known) with PostgreSQL array text read once into the literal it stands for.
pub(crate) fn query_literal(right: Expr, stored: Option<Kind>) -> DfResult<Expr> {
    // An untyped string against a vector column is PostgreSQL array text
    // (`e <#> '{1,0}'`), as PostgreSQL types an unknown literal by its context.
    if let Expr::Literal(ScalarValue::Utf8(Some(text)), _) = &right
        && let Some(k @ (Kind::Vector | Kind::Bag)) = stored
    {
        return Ok(Expr::Literal(
            array_text_literal(text, k == Kind::Bag)?,
            None,
        ));
    }
    // Array text cast to FLOAT4[] or FLOAT4[][] (how a bound query vector arrives, see
    // `params.rs`): read once into the literal the cast would give, whatever the
    // searched side is (its checks then report on it).
    if let Expr::Cast(cast) = &right
        && let Expr::Literal(ScalarValue::Utf8(Some(text)), _) = cast.expr.as_ref()
        && float32_items(cast.field.data_type())
        && let k @ (Kind::Vector | Kind::Bag) = kind(cast.field.data_type())
    {
        return Ok(Expr::Literal(
            array_text_literal(text, k == Kind::Bag)?,
            None,
        ));
    }
    Ok(right)
}

/// PostgreSQL array text as a float32 vector (or, for a bag, a list of them).
/// Elements that are not numbers are 400; NULL elements stay (the checks name them).
fn array_text_literal(text: &str, bag: bool) -> DfResult<ScalarValue> {
    use crate::ast::array_text::{ArrayText, parse_array_text};
    let malformed = || {
        bad(format!(
            "malformed array literal: {}",
            tarn_catalog::shown(text)
        ))
    };
    let parsed = parse_array_text(text).map_err(|_| malformed())?;
    let vector = |items: &[ArrayText]| -> DfResult<ScalarValue> {
        let mut values: Vec<Option<f32>> = Vec::with_capacity(items.len());
        for i in items {
            match i {
                ArrayText::Item(None) => values.push(None),
                ArrayText::Item(Some(s)) => {
                    let x: f64 = s.trim().parse().map_err(|_| malformed())?;
                    values.push(Some(x as f32));
                }
                ArrayText::List(_) if !bag => {
                    return Err(bad(format!(
                        "a vector is a one-dimensional array, not \"{text}\""
                    )));
                }
                ArrayText::List(_) => return Err(malformed()),
            }
        }
        Ok(ScalarValue::List(ScalarValue::new_list_nullable(
            &values
                .into_iter()
                .map(ScalarValue::Float32)
                .collect::<Vec<_>>(),
            &DataType::Float32,
        )))
    };
    let ArrayText::List(items) = parsed else {
        return Err(malformed());
    };
    if !bag {
        return vector(&items);
    }
    let mut rows = Vec::with_capacity(items.len());
    for i in &items {
        match i {
            ArrayText::List(v) => rows.push(vector(v)?),
            ArrayText::Item(None) => rows.push(ScalarValue::try_from(f32_list())?),
            ArrayText::Item(Some(_)) => {
                return Err(bad(format!(
                    "a bag of vectors is a two-dimensional array, not \"{text}\""
                )));
            }
        }
    }
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(
        &rows,
        &f32_list(),
    )))
}

/// What a side of `<#>` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// NULL literal: takes the other side's kind.
    Null,
    /// One vector per row.
    Vector,
    /// A bag of vectors per row.
    Bag,
    /// Text.
    Text,
    /// Anything else.
    Other,
}

fn is_number(t: &DataType) -> bool {
    t.is_numeric() || *t == DataType::Null
}

pub(crate) fn kind(t: &DataType) -> Kind {
    match t {
        DataType::Null => Kind::Null,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Kind::Text,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            match f.data_type() {
                t if is_number(t) => Kind::Vector,
                DataType::List(g) | DataType::LargeList(g) | DataType::FixedSizeList(g, _)
                    if is_number(g.data_type()) =>
                {
                    Kind::Bag
                }
                _ => Kind::Other,
            }
        }
        _ => Kind::Other,
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Null => "NULL",
        Kind::Vector => "a vector (FLOAT4[])",
        Kind::Bag => "a bag of vectors (FLOAT4[][])",
        Kind::Text => "text",
        Kind::Other => "a value that is neither a vector nor text",
    }
}

use crate::error::bad_request as bad;

fn f32_list() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true)))
}

fn f32_bag() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(f32_list(), true)))
}

/// `engine_similarity(stored, query)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Similarity {
    signature: Signature,
}

impl Similarity {
    fn new() -> Self {
        Similarity {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

/// What the checks know of the stored side: its name for messages, and the metadata
/// its table gave it.
struct Described<'a> {
    name: String,
    meta: Option<&'a HashMap<String, String>>,
}

impl<'a> Described<'a> {
    fn of(field: &'a Field) -> Self {
        let meta = field
            .metadata()
            .contains_key(META_TABLE)
            .then(|| field.metadata());
        Described {
            name: field.name().clone(),
            meta,
        }
    }

    fn table(&self) -> Option<&str> {
        self.meta
            .and_then(|m| m.get(META_TABLE))
            .map(String::as_str)
    }

    fn dim(&self) -> Option<usize> {
        self.meta
            .and_then(|m| m.get(META_DIM))
            .and_then(|d| d.parse().ok())
    }

    /// 400 unless the column belongs to a `USING engine` table (or to no table).
    fn check_engine(&self) -> DfResult<()> {
        if let Some(m) = self.meta
            && m.get(META_ENGINE).map(String::as_str) == Some("false")
        {
            return Err(bad(format!(
                "<#> needs a table created USING engine, and {} is not (column \"{}\")",
                self.table().unwrap_or("the table"),
                self.name
            )));
        }
        Ok(())
    }
}

/// The searched side of `<#>` holds FLOAT4 vectors, not integer arrays that would be
/// converted silently (the query side may be any numbers).
fn check_float32_stored(t: &DataType) -> DfResult<()> {
    if matches!(kind(t), Kind::Vector | Kind::Bag) && !float32_items(t) {
        return Err(bad(format!(
            "<#> searches FLOAT4[] and FLOAT4[][] values, not {}; cast it with ::float4[]",
            pg_type(t)
        )));
    }
    Ok(())
}

/// PostgreSQL's name for an Arrow type, as messages show it (`bigint[]`, not
/// `List(Int64)`).
pub(crate) fn pg_type(t: &DataType) -> String {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("{}[]", pg_type(f.data_type()))
        }
        DataType::Int8 | DataType::Int16 => "smallint".into(),
        DataType::Int32 => "integer".into(),
        DataType::Int64 => "bigint".into(),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => "bigint".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(..) | DataType::Decimal256(..) => "numeric".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Null => "unknown".into(),
        other => crate::error::pg_type_names(&other.to_string()),
    }
}

/// Whether the innermost element type of `t` is float32 (or unknown).
fn float32_items(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            float32_items(f.data_type())
        }
        DataType::Float32 | DataType::Null => true,
        _ => false,
    }
}

/// The checks shared by planning and execution: the kinds of both sides fit.
fn check_kinds(left: &Field, right: &Field) -> DfResult<Kind> {
    let stored = Described::of(left);
    stored.check_engine()?;

    let (lk, rk) = (kind(left.data_type()), kind(right.data_type()));
    match (lk, rk) {
        // A text value that is not a column has no index to rank with.
        (Kind::Text, Kind::Text | Kind::Null) if stored.table().is_none() => Err(bad(
            "<#> on text ranks a TEXT column of a table (with a bm25 index) against a query: \
             the left side must be that column, not a value"
                .to_string(),
        )),
        (Kind::Text, Kind::Text | Kind::Null) => {
            let on = match stored.table() {
                Some(t) => format!(
                    "CREATE INDEX ON {t} USING engine_index ({}) WITH (index_type = 'bm25')",
                    stored.name
                ),
                None => {
                    "CREATE INDEX … USING engine_index (column) WITH (index_type = 'bm25')".into()
                }
            };
            Err(bad(format!(
                "<#> on text ranks with BM25, which needs a bm25 index on column \"{}\": {on}",
                stored.name
            )))
        }
        (Kind::Vector | Kind::Null, Kind::Vector | Kind::Null) => Ok(Kind::Vector),
        (Kind::Bag, Kind::Bag | Kind::Null) | (Kind::Null, Kind::Bag) => Ok(Kind::Bag),
        (Kind::Other, _) | (_, Kind::Other) => Err(bad(format!(
            "operator does not exist: {} <#> {}; <#> scores vectors (real[]), bags of \
             vectors (real[][]) and text",
            pg_type(left.data_type()),
            pg_type(right.data_type())
        ))),
        _ => Err(bad(format!(
            "<#> between {} \"{}\" and {}: both sides must be of the same kind",
            kind_name(lk),
            stored.name,
            kind_name(rk)
        ))),
    }
}

impl ScalarUDFImpl for Similarity {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float32)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let [left, right] = args.arg_fields else {
            return Err(bad(format!("{FUNCTION} takes two arguments")));
        };
        check_kinds(left, right)?;
        Ok(Arc::new(Field::new(FUNCTION, DataType::Float32, true)))
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let [left, right] = arg_types else {
            return Err(bad(format!("{FUNCTION} takes two arguments")));
        };
        check_float32_stored(left)?;
        // The stored side keeps its type (a FixedSizeList stays one, and a cast would
        // drop the field metadata the checks read); everything else becomes float32.
        let stored = |t: &DataType, want: DataType| match t {
            DataType::FixedSizeList(f, _) | DataType::List(f)
                if f.data_type() == &DataType::Float32 =>
            {
                t.clone()
            }
            DataType::List(f) if kind(t) == Kind::Bag && f.data_type() == &f32_list() => t.clone(),
            _ => want,
        };
        Ok(match (kind(left), kind(right)) {
            (Kind::Vector | Kind::Null, Kind::Vector | Kind::Null) => {
                vec![stored(left, f32_list()), stored(right, f32_list())]
            }
            (Kind::Bag | Kind::Null, Kind::Bag | Kind::Null) => {
                vec![stored(left, f32_bag()), stored(right, f32_bag())]
            }
            // Mismatches are reported with names by `return_field_from_args`.
            _ => arg_types.to_vec(),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [left, right] = args.args.as_slice() else {
            return Err(bad(format!("{FUNCTION} takes two arguments")));
        };
        let (lf, rf) = (&args.arg_fields[0], &args.arg_fields[1]);
        let kind = check_kinds(lf, rf)?;
        let stored = Described::of(lf);
        let n = args.number_rows;
        let all_scalar = matches!(
            (left, right),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let left = left.to_array(n)?;
        let out = match right {
            ColumnarValue::Scalar(q) => {
                let q = q.to_array_of_size(1)?;
                score_column(&left, &q, 0, kind, &stored)?
            }
            ColumnarValue::Array(q) => {
                let mut b = Float32Builder::with_capacity(n);
                for i in 0..n {
                    let row = score_column(&left.slice(i, 1), q, i, kind, &stored)?;
                    b.append_option(row.is_valid(0).then(|| row.value(0)));
                }
                b.finish()
            }
        };
        if all_scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// The query of `<#>` on the stored field `field` with the constant `q`, checked as
/// the function checks it (so a query of the wrong dimension is a 400 even when no row
/// would ever be scored); `None` when it is NULL or the field is not a vector column.
pub(crate) fn planned_query(field: &Field, q: &ScalarValue) -> DfResult<Option<QueryValue>> {
    if q.is_null() {
        return Ok(None);
    }
    let kind = match kind(field.data_type()) {
        k @ (Kind::Vector | Kind::Bag) => k,
        _ => return Ok(None),
    };
    // The kinds are checked as the operator checks them, so a text or boolean array (or
    // a bag against a vector column) is the same 400 in ORDER BY as in the SELECT list,
    // never a cast that reads every element as 0.
    // (A query that is no array at all is `expected a vector, got …` below.)
    if matches!(
        q.data_type(),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
    ) {
        check_kinds(field, &Field::new("query", q.data_type(), true))?;
    } else {
        Described::of(field).check_engine()?;
    }
    let stored = Described::of(field);
    check_float32_stored(field.data_type())?;
    checked_query(&stored, field.data_type(), kind, &q.to_array_of_size(1)?, 0)
}

/// A query that scores every row of the stored field `field` NULL (a zero vector, or a
/// bag of one), for `<#> NULL`: the search node then returns the rows in SPEC §5's
/// order, by row id, as it does for any tie. `None` when the field is not a vector
/// column. A column without a dimension has no vector stored, so any width scores NULL.
pub(crate) fn null_query(field: &Field) -> Option<QueryValue> {
    let stored = Described::of(field);
    let dim = stored
        .dim()
        .or(match field.data_type() {
            DataType::FixedSizeList(_, d) => usize::try_from(*d).ok(),
            _ => None,
        })
        .unwrap_or(1)
        .max(1);
    match kind(field.data_type()) {
        Kind::Vector => Some(QueryValue::Vector(vec![0.0; dim])),
        Kind::Bag => Some(QueryValue::Bag {
            values: vec![0.0; dim],
            dim,
        }),
        _ => None,
    }
}

/// The query in row `i` of `q` for the stored column `col` (of Arrow type `stored`),
/// checked against the column's dimension (its metadata, or a `FLOAT4[n]` type);
/// `None` for a NULL query.
fn checked_query(
    col: &Described<'_>,
    stored: &DataType,
    kind: Kind,
    q: &ArrayRef,
    i: usize,
) -> DfResult<Option<QueryValue>> {
    let dim = col.dim().or(match stored {
        DataType::FixedSizeList(_, d) if kind == Kind::Vector => Some(*d as usize),
        _ => None,
    });
    let Some((values, count)) = query_values(q, i, kind, &col.name, dim)? else {
        return Ok(None);
    };
    Ok(Some(match kind {
        Kind::Vector => QueryValue::Vector(values),
        _ => {
            let dim = values.len() / count.max(1);
            QueryValue::Bag { values, dim }
        }
    }))
}

/// The query value in row `i` of `q` as float32 values (and, for a bag, the number of
/// vectors); `None` for NULL. Checks what writes check: no NULL elements, finite
/// float32 values, no ragged bags, and the column's dimension.
pub(crate) fn query_values(
    q: &ArrayRef,
    i: usize,
    kind: Kind,
    column: &str,
    dim: Option<usize>,
) -> DfResult<Option<(Vec<f32>, usize)>> {
    if q.is_null(i) {
        return Ok(None);
    }
    let one = q.slice(i, 1);
    let items = match one.data_type() {
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
            list_item(&one)?
        }
        other => {
            return Err(bad(format!(
                "column \"{column}\": expected a vector, got {}",
                pg_type(other)
            )));
        }
    };
    let elements_msg = || {
        bad(format!(
            "column \"{column}\": vector elements must not be NULL"
        ))
    };
    let check_dim = |len: usize| -> DfResult<()> {
        match dim {
            Some(d) if d != len => Err(bad(format!("expected {d} dimensions, not {len}"))),
            _ if len == 0 => Err(bad(format!(
                "column \"{column}\": a vector needs at least one dimension"
            ))),
            _ => Ok(()),
        }
    };
    let floats = |a: &ArrayRef| -> DfResult<Vec<f32>> {
        if a.null_count() > 0 {
            return Err(elements_msg());
        }
        let f = cast(a, &DataType::Float32)?;
        let f = f.as_primitive::<datafusion::arrow::datatypes::Float32Type>();
        let v: Vec<f32> = f.values().to_vec();
        // A finite float64 beyond f32's range casts to infinity.
        let finite = match a.data_type() {
            DataType::Float64 => a
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
                .values()
                .iter()
                .all(|x| x.is_finite() && (*x as f32).is_finite()),
            _ => v.iter().all(|x| x.is_finite()),
        };
        if !finite {
            return Err(bad(format!(
                "column \"{column}\": vector elements must be finite float32 numbers (no NaN or Infinity)"
            )));
        }
        Ok(v)
    };
    match kind {
        Kind::Vector => {
            let v = floats(&items)?;
            check_dim(v.len())?;
            Ok(Some((v, 1)))
        }
        _ => {
            if items.null_count() > 0 {
                return Err(elements_msg());
            }
            let mut out = Vec::new();
            let mut len: Option<usize> = None;
            for j in 0..items.len() {
                let v = floats(&list_item(&items.slice(j, 1))?)?;
                if len.is_some_and(|l| l != v.len()) {
                    return Err(bad(format!(
                        "column \"{column}\": all vectors of a bag must have the same dimension (ragged array)"
                    )));
                }
                len = Some(v.len());
                check_dim(v.len())?;
                out.extend(v);
            }
            Ok(Some((out, items.len())))
        }
    }
}

/// The items of the one-row list array `one`.
fn list_item(one: &ArrayRef) -> DfResult<ArrayRef> {
    Ok(match one.data_type() {
        DataType::List(_) => one.as_list::<i32>().value(0),
        DataType::LargeList(_) => one.as_list::<i64>().value(0),
        DataType::FixedSizeList(..) => one.as_fixed_size_list().value(0),
        other => return Err(bad(format!("expected a vector, got {}", pg_type(other)))),
    })
}

/// Scores every row of `stored` against the query in row `qi` of `q`.
fn score_column(
    stored: &ArrayRef,
    q: &ArrayRef,
    qi: usize,
    kind: Kind,
    col: &Described<'_>,
) -> DfResult<Float32Array> {
    let n = stored.len();
    let Some(query) = checked_query(col, stored.data_type(), kind, q, qi)? else {
        return Ok(Float32Array::new_null(n));
    };
    let mut scores: Vec<Option<f32>> = Vec::with_capacity(n);
    score_rows(stored, &query, 0..n, |_, s| scores.push(s)).map_err(search_error)?;
    Ok(Float32Array::from(scores))
}

/// A search error as DataFusion carries it.
pub(crate) fn search_error(e: tarn_search::Error) -> DataFusionError {
    match e {
        tarn_search::Error::BadRequest(m) => bad(m),
        tarn_search::Error::Storage(s) => DataFusionError::External(Box::new(Error::Storage(s))),
        // A filter's own error (a DataFusion error raised while evaluating WHERE).
        tarn_search::Error::Filter(inner) => match inner.downcast::<DataFusionError>() {
            Ok(df) => *df,
            Err(other) => DataFusionError::External(other),
        },
        other => DataFusionError::External(Box::new(Error::Internal(other.to_string()))),
    }
}
