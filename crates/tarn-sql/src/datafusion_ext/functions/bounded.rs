//! Functions whose output can be far larger than their input (`repeat`, `lpad`,
//! `array_repeat`, `range`, `replace`, `ARRAY[…]`, `concat` and `||` ([`super::text_concat`]), whose chains
//! multiply, and the others [`WRAPPED`] lists), wrapped so that their output is sized
//! before it is made; and `string_agg`/`array_agg`, whose values are sized as they
//! grow. DataFusion's versions allocate whatever is asked: one `repeat('x', 1000000)`
//! per row of a 5,000-row batch asks for 5 GB, outside any statement's memory
//! reservation, and passes 2 GiB of text in one batch (Arrow's 32-bit offsets) with a
//! panic. Here a call whose output for one batch of rows would pass [`output_limits`]
//! fails first, as PostgreSQL refuses a value over 1 GB ("requested length too
//! large").

use std::sync::Arc;

use crate::datafusion_ext::context::output_limits::OutputLimits;
use crate::value::numeric_text::text_lengths;
use crate::value::sizes::array_row_bytes;
use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

/// The name of `text || text` planned as one sized call ([`super::text_concat`]; in
/// EXPLAIN). Here, among the names this module sizes, so that the sizing needs nothing
/// of the function itself.
pub(crate) const TEXT_CONCAT: &str = "engine_text_concat";

/// The functions wrapped, and how each one's output is sized.
const WRAPPED: [(&str, Kind); 43] = [
    ("concat", Kind::Sum),
    ("concat_ws", Kind::ConcatWs),
    ("repeat", Kind::Repeat),
    ("lpad", Kind::Pad),
    ("rpad", Kind::Pad),
    ("array_repeat", Kind::ArrayRepeat),
    ("range", Kind::Range),
    ("generate_series", Kind::Range),
    ("make_array", Kind::Sum),
    ("array_concat", Kind::Sum),
    ("array_append", Kind::Sum),
    ("array_prepend", Kind::Sum),
    ("struct", Kind::Sum),
    ("named_struct", Kind::Sum),
    ("overlay", Kind::Sum),
    ("replace", Kind::Replace),
    ("regexp_replace", Kind::RegexpReplace),
    ("array_to_string", Kind::ArrayToString),
    ("array_resize", Kind::ArrayResize),
    ("array_replace", Kind::ArrayReplace),
    ("array_replace_n", Kind::ArrayReplace),
    ("array_replace_all", Kind::ArrayReplace),
    ("translate", Kind::Translate),
    ("upper", Kind::CaseMap),
    ("lower", Kind::CaseMap),
    ("initcap", Kind::CaseMap),
    ("string_to_array", Kind::Split),
    // At most both arrays' elements.
    ("array_union", Kind::Sum),
    ("array_intersect", Kind::Sum),
    ("array_except", Kind::Sum),
    ("array_distinct", Kind::Sum),
    ("encode", Kind::Encode),
    // Tarn's own `jsonb || jsonb` (jsonb.rs): at most both sides' text.
    ("jsonb_concat", Kind::Sum),
    // `text || text` (planned sized by `ConcatPlanner`; entered in its node's ledger).
    (TEXT_CONCAT, Kind::Sum),
    // At most their first argument, but that once per row: a large constant cut or
    // trimmed over many rows (`substr(repeat('x', 15000000), g)` over 130 rows) made
    // 2 GB in one batch.
    ("substr", Kind::First),
    ("btrim", Kind::First),
    ("ltrim", Kind::First),
    ("rtrim", Kind::First),
    ("left", Kind::First),
    ("right", Kind::First),
    ("split_part", Kind::First),
    ("reverse", Kind::First),
    ("substr_index", Kind::First),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    /// `concat(a, b, …)`, `ARRAY[a, b, …]`, `array_concat`, `struct(…)`, …: at most
    /// the bytes of its arguments (NULLs count nothing). Each argument counts, so
    /// `ARRAY[s, s, s]` is three times `s`.
    Sum,
    /// `concat_ws(sep, a, b, …)`: the arguments and a separator between each two.
    ConcatWs,
    /// `repeat(text, n)`: the text's bytes times n.
    Repeat,
    /// `lpad/rpad(text, n [, fill])`: n characters, of up to 4 bytes each where the text
    /// or the fill is not ASCII.
    Pad,
    /// `array_repeat(value, n)`: n copies of the value.
    ArrayRepeat,
    /// `range/generate_series(start, stop [, step])` over integers: the elements
    /// (8 bytes each).
    Range,
    /// `replace(text, from, to)`: every occurrence of `from` becomes `to` (an empty
    /// `from` matches between every two characters).
    Replace,
    /// `regexp_replace(text, pattern, replacement [, flags])`: with `g`, a match may be
    /// empty (one between every two characters), and each one's replacement can copy
    /// the match once per group reference.
    RegexpReplace,
    /// `array_to_string(array, sep [, null_text])`: each element written (text as its
    /// bytes, other values at most 24), a separator and the NULL text each.
    ArrayToString,
    /// `array_resize(array, n [, fill])`: n elements of the array's or the fill's size.
    ArrayResize,
    /// `array_replace[_n|_all](array, from, to [, n])`: each element can become `to`.
    ArrayReplace,
    /// `translate(text, from, to)`: each character can become the longest of `to`.
    Translate,
    /// `upper/lower/initcap(text)`: ASCII keeps its size, and a character that is not
    /// can become up to three (`ΐ` is `Ϊ́` in upper case).
    CaseMap,
    /// `encode(bytes, format)`: hex twice the bytes, base64 four thirds (and a line
    /// break each 76 characters), escape (or a format not known yet) up to four times.
    Encode,
    /// `string_to_array(text, delimiter [, null])`: an element per piece (per character
    /// with a NULL or empty delimiter), each with its offset and validity.
    Split,
    /// `substr`, `btrim`, `left`, …: at most the first argument's bytes, per row.
    First,
}

/// The wrapped versions of the functions `get` finds, ready to register over them.
pub fn wrapped(
    get: impl Fn(&str) -> Option<Arc<ScalarUDF>>,
    limits: OutputLimits,
) -> Vec<ScalarUDF> {
    WRAPPED
        .iter()
        .filter_map(|(name, kind)| {
            let inner = get(name)?;
            Some(bounded(inner, *kind, limits, None))
        })
        .collect()
}

pub(super) fn bounded(
    inner: Arc<ScalarUDF>,
    kind: Kind,
    limits: OutputLimits,
    ledger: Option<Entry>,
) -> ScalarUDF {
    ScalarUDF::new_from_impl(Bounded {
        inner,
        kind,
        limits,
        ledger,
        deferred: None,
    })
}

/// What the sized calls of one plan node have made of the batch being evaluated, per
/// thread: each call is within its own limits, and together they are held to the
/// batch limit too (six `s || 'x'` of 500 MB each in one SELECT list took 3.4 GB).
/// A batch's calls run one after another on one thread; a call seen again means the
/// next batch has begun.
#[derive(Debug, Default)]
struct Ledger {
    /// The pool large outputs are held in (see held.rs).
    pool: Option<crate::datafusion_ext::context::held::SharedPool>,
    slots: std::sync::atomic::AtomicUsize,
    spent: parking_lot::Mutex<
        std::collections::HashMap<std::thread::ThreadId, (std::collections::HashSet<usize>, u64)>,
    >,
}

impl Ledger {
    /// Counts `bytes` made by the call in `slot`; the batch's total so far.
    fn charge(&self, slot: usize, bytes: u64) -> u64 {
        let mut spent = self.spent.lock();
        let (seen, total) = spent.entry(std::thread::current().id()).or_default();
        if !seen.insert(slot) {
            seen.clear();
            seen.insert(slot);
            *total = 0;
        }
        *total = total.saturating_add(bytes);
        *total
    }
}

/// A call's place in its plan node's [`Ledger`].
#[derive(Debug, Clone)]
pub(super) struct Entry {
    ledger: Arc<Ledger>,
    slot: usize,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.ledger, &other.ledger) && self.slot == other.slot
    }
}

impl Eq for Entry {}

impl std::hash::Hash for Entry {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.ledger) as usize).hash(state);
        self.slot.hash(state);
    }
}

/// `expr` with every call of a function [`WRAPPED`] names replaced by its sized
/// version, entered in `ledger` (one per plan node) when there is one. DataFusion's
/// own planners build some calls without looking the function up (`ARRAY[…]` is
/// `make_array`), and a function's simplification returns calls of its unwrapped self
/// (`concat_ws` merging constant arguments), so calls are wrapped where they are, not
/// only where they are named.
fn wrap_calls(
    expr: Expr,
    limits: OutputLimits,
    ledger: Option<&Arc<Ledger>>,
    defer: bool,
) -> Result<Transformed<Expr>> {
    expr.transform_up(|e| {
        let Expr::ScalarFunction(call) = &e else {
            return Ok(Transformed::no(e));
        };
        let (inner, kind) = match call.func.inner().downcast_ref::<Bounded>() {
            Some(b) if b.ledger.is_some() || ledger.is_none() => {
                return Ok(Transformed::no(e));
            }
            Some(b) => (b.inner.clone(), b.kind),
            None => match WRAPPED.iter().find(|(name, _)| *name == call.func.name()) {
                Some((_, kind)) => (call.func.clone(), *kind),
                None => return Ok(Transformed::no(e)),
            },
        };
        let Expr::ScalarFunction(call) = e else {
            unreachable!("matched above")
        };
        let entry = ledger.map(|l| Entry {
            ledger: l.clone(),
            slot: l.slots.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        });
        let mut b = Bounded {
            inner,
            kind,
            limits,
            ledger: entry,
            deferred: None,
        };
        if defer && b.makes_large_constant(&call.args)? {
            b.deferred = Some(Signature::new(
                b.inner.signature().type_signature.clone(),
                datafusion::logical_expr::Volatility::Volatile,
            ));
        }
        Ok(Transformed::yes(Expr::ScalarFunction(
            datafusion::logical_expr::expr::ScalarFunction::new_udf(
                Arc::new(ScalarUDF::new_from_impl(b)),
                call.args,
            ),
        )))
    })
}

/// Whether `args` are the same for every row: no column, subquery, parameter,
/// aggregate, window or volatile call in them.
fn constant(args: &[Expr]) -> bool {
    args.iter().all(|a| {
        !a.is_volatile()
            && !a
                .exists(|e| {
                    Ok(matches!(
                        e,
                        Expr::Column(_)
                            | Expr::OuterReferenceColumn(..)
                            | Expr::ScalarSubquery(_)
                            | Expr::Exists(_)
                            | Expr::InSubquery(_)
                            | Expr::SetComparison(_)
                            | Expr::Placeholder(_)
                            | Expr::AggregateFunction(_)
                            | Expr::WindowFunction(_)
                    ))
                })
                .unwrap_or(true)
    })
}

/// The analyzer rule that wraps every call of a function whose output can be far
/// larger than its input, wherever the statement's plan has one (see [`wrap_calls`]).
#[derive(Debug)]
pub(crate) struct SizeCalls {
    limits: OutputLimits,
    pool: crate::datafusion_ext::context::held::SharedPool,
}

impl SizeCalls {
    /// The rule for statements whose memory pool is `pool`.
    pub(crate) fn new(
        limits: OutputLimits,
        pool: crate::datafusion_ext::context::held::SharedPool,
    ) -> Self {
        SizeCalls { limits, pool }
    }
}

impl datafusion::optimizer::AnalyzerRule for SizeCalls {
    fn name(&self) -> &str {
        "tarn_size_calls"
    }

    fn analyze(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
        _config: &datafusion::common::config::ConfigOptions,
    ) -> Result<datafusion::logical_expr::LogicalPlan> {
        // The wrapped function has the same name, type and nullability: no schema
        // changes.
        plan.transform_up_with_subqueries(|plan| {
            let ledger = Arc::new(Ledger {
                pool: Some(self.pool.clone()),
                ..Ledger::default()
            });
            // Large constants are left for the run only where they are values (a
            // SELECT list, a filter, VALUES rows): a volatile grouping or sort key would
            // no longer be recognised as a constant and dropped.
            let defer = matches!(
                plan,
                datafusion::logical_expr::LogicalPlan::Projection(_)
                    | datafusion::logical_expr::LogicalPlan::Filter(_)
                    | datafusion::logical_expr::LogicalPlan::Values(_)
            );
            plan.map_expressions(|e| wrap_calls(e, self.limits, Some(&ledger), defer))
        })
        .map(|t| t.data)
    }
}

/// A DataFusion function with its output sized first.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    kind: Kind,
    limits: OutputLimits,
    /// Its place among the sized calls of its plan node (none when only named).
    ledger: Option<Entry>,
    /// A call of constants that makes a large value is made when the statement runs,
    /// not folded into a constant when it is planned: DataFusion's planner copies its
    /// constants from rule to rule outside any reservation (thirty 60 MB constants in
    /// a CASE, a COALESCE or a VALUES list took 5–6 GB before a row was read). Such a
    /// call is volatile (this signature), so that nothing folds it; it is made once per
    /// batch, held in the pool like any large output.
    deferred: Option<Signature>,
}

/// Row `i` of an argument as an int8, if it is one (NULL and other types: `None`).
fn ints(arg: &ColumnarValue, rows: usize) -> Option<ArrayRef> {
    let array = arg.to_array(rows).ok()?;
    let array = datafusion::arrow::compute::cast(&array, &DataType::Int64).ok()?;
    Some(array)
}

fn at(a: &ArrayRef, i: usize) -> i64 {
    if a.is_null(i) {
        0
    } else {
        a.as_primitive::<Int64Type>().value(i)
    }
}

/// Most bytes one value written as text takes when it is not text (a number, a date).
const WRITTEN: u64 = 24;

/// About how many bytes each row of an argument holds (NULL: 0): text and binary
/// exactly, a list its elements at their average size, other values their average
/// size. A constant is measured once, not repeated over the batch.
fn row_bytes(arg: &ColumnarValue, rows: usize) -> Vec<u64> {
    match arg {
        ColumnarValue::Scalar(s) => {
            let bytes = if s.is_null() {
                0
            } else {
                match text_lengths(arg, 1) {
                    Ok(v) if v.first().is_some_and(Option::is_some) => v[0].unwrap_or_default(),
                    _ => s.size() as u64,
                }
            };
            vec![bytes; rows]
        }
        ColumnarValue::Array(a) => array_row_bytes(a),
    }
}

/// Per row of a list argument: how many leaf elements (through nested lists) and how
/// many bytes they take written as text (text at its length, other values at
/// [`WRITTEN`]).
fn leaves(arg: &ColumnarValue, rows: usize) -> Vec<(u64, u64)> {
    use datafusion::arrow::array::OffsetSizeTrait;
    fn of(a: &ArrayRef) -> Vec<(u64, u64)> {
        fn list<O: OffsetSizeTrait>(a: &ArrayRef) -> Vec<(u64, u64)> {
            let l = a.as_list::<O>();
            let inner = of(l.values());
            l.value_offsets()
                .windows(2)
                .map(|w| {
                    inner[w[0].as_usize()..w[1].as_usize()]
                        .iter()
                        .fold((0, 0), |(n, b), (m, c)| (n + m, b + c))
                })
                .collect()
        }
        match a.data_type() {
            DataType::List(_) => list::<i32>(a),
            DataType::LargeList(_) => list::<i64>(a),
            DataType::FixedSizeList(_, n) => {
                let l = a.as_fixed_size_list();
                let inner = of(l.values());
                let n = (*n).max(0) as usize;
                (0..l.len())
                    .map(|i| {
                        inner[i * n..(i + 1) * n]
                            .iter()
                            .fold((0, 0), |(k, b), (m, c)| (k + m, b + c))
                    })
                    .collect()
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                array_row_bytes(a).into_iter().map(|b| (1, b)).collect()
            }
            _ => vec![(1, WRITTEN); a.len()],
        }
    }
    match arg {
        ColumnarValue::Scalar(s) => match s.to_array_of_size(1) {
            Ok(a) => vec![of(&a).first().copied().unwrap_or_default(); rows],
            Err(_) => vec![(0, 0); rows],
        },
        ColumnarValue::Array(a) => of(a),
    }
}

/// Per row of a list argument: how many elements it has (top level).
fn elements(arg: &ColumnarValue, rows: usize) -> Vec<u64> {
    let count = |a: &ArrayRef| -> Vec<u64> {
        match datafusion::arrow::compute::kernels::length::length(a)
            .and_then(|l| datafusion::arrow::compute::cast(&l, &DataType::Int64))
        {
            Ok(l) => {
                let l = l.as_primitive::<Int64Type>();
                (0..l.len())
                    .map(|i| {
                        if l.is_null(i) {
                            0
                        } else {
                            l.value(i).max(0) as u64
                        }
                    })
                    .collect()
            }
            Err(_) => vec![0; a.len()],
        }
    };
    match arg {
        ColumnarValue::Scalar(s) => match s.to_array_of_size(1) {
            Ok(a) => vec![count(&a).first().copied().unwrap_or_default(); rows],
            Err(_) => vec![0; rows],
        },
        ColumnarValue::Array(a) => count(a),
    }
}

/// Per row of a text argument, `measure` of its text (NULL and values that are not text:
/// 0). A constant is measured once; a column is read where it is, not copied.
fn text_measure(arg: &ColumnarValue, rows: usize, measure: impl Fn(&str) -> u64) -> Vec<u64> {
    use datafusion::common::ScalarValue as S;
    match arg {
        ColumnarValue::Scalar(S::Utf8(v) | S::LargeUtf8(v) | S::Utf8View(v)) => {
            vec![v.as_deref().map_or(0, &measure); rows]
        }
        ColumnarValue::Scalar(_) => vec![0; rows],
        ColumnarValue::Array(a) => {
            let each = |t: Option<&str>| t.map_or(0, &measure);
            match a.data_type() {
                DataType::Utf8 => a.as_string::<i32>().iter().map(each).collect(),
                DataType::LargeUtf8 => a.as_string::<i64>().iter().map(each).collect(),
                DataType::Utf8View => a.as_string_view().iter().map(each).collect(),
                _ => vec![0; a.len()],
            }
        }
    }
}

impl Bounded {
    /// Whether this call of `args` is of constants and would make a value of
    /// [`crate::datafusion_ext::context::held::SMALLEST_HELD`] or more — or might: an argument that does not
    /// fold to a constant here (one made by another such call, left for the run) is
    /// taken as large. A call too large to make at all is refused here.
    fn makes_large_constant(&self, args: &[Expr]) -> Result<bool> {
        if !constant(args) {
            return Ok(false);
        }
        // Arguments are folded as the optimizer would (`'k' || 5` has a cast of 5).
        let simplifier = datafusion::optimizer::simplify_expressions::ExprSimplifier::new(
            SimplifyContext::default(),
        );
        let mut literals = Vec::with_capacity(args.len());
        for a in args {
            let folded = match a {
                Expr::Literal(v, _) => v.clone(),
                other => match simplifier.simplify(other.clone()) {
                    Ok(Expr::Literal(v, _)) => v,
                    _ => return Ok(true),
                },
            };
            literals.push(ColumnarValue::Scalar(folded));
        }
        Ok(self.check_alone(&literals, 1)? >= crate::datafusion_ext::context::held::SMALLEST_HELD)
    }

    /// The function's name as the statement wrote it (`||` for text concatenation).
    fn written(&self) -> &str {
        match self.inner.name() {
            TEXT_CONCAT => "||",
            name => name,
        }
    }

    /// What this call would produce for the batch, in bytes (an estimate from above
    /// for text, elements × their average size for arrays): the total and the largest
    /// value.
    /// Fails when this call's output for `rows` rows of `args` would pass the per-value
    /// or the per-batch limit on its own; the batch's bytes otherwise.
    fn check_alone(&self, args: &[ColumnarValue], rows: usize) -> Result<u64> {
        let (bytes, largest) = self.output_bytes(args, rows);
        self.limits.check_value(self.written(), largest)?;
        self.limits.check_batch(self.written(), bytes, Some(rows))?;
        Ok(bytes)
    }

    fn output_bytes(&self, a: &[ColumnarValue], rows: usize) -> (u64, u64) {
        let mut total: u64 = 0;
        let mut largest: u64 = 0;
        let mut add = |bytes: u64| {
            total = total.saturating_add(bytes);
            largest = largest.max(bytes);
        };
        let bytes_of = |i: usize| a.get(i).map(|x| row_bytes(x, rows));
        match self.kind {
            Kind::Sum => {
                let each: Vec<Vec<u64>> = a.iter().map(|x| row_bytes(x, rows)).collect();
                for i in 0..rows {
                    add(each.iter().map(|v| v[i]).fold(0, u64::saturating_add));
                }
            }
            Kind::ConcatWs => {
                let Some((sep, parts)) = a.split_first() else {
                    return (0, 0);
                };
                let sep = row_bytes(sep, rows);
                let parts: Vec<Vec<u64>> = parts.iter().map(|x| row_bytes(x, rows)).collect();
                for i in 0..rows {
                    let gaps = parts.len().saturating_sub(1) as u64;
                    let sum = parts.iter().map(|v| v[i]).fold(0, u64::saturating_add);
                    add(sum.saturating_add(sep[i].saturating_mul(gaps)));
                }
            }
            Kind::Encode => {
                let Some(len) = bytes_of(0) else {
                    return (0, 0);
                };
                let format = match a.get(1) {
                    Some(ColumnarValue::Scalar(
                        datafusion::common::ScalarValue::Utf8(Some(f))
                        | datafusion::common::ScalarValue::LargeUtf8(Some(f))
                        | datafusion::common::ScalarValue::Utf8View(Some(f)),
                    )) => f.to_ascii_lowercase(),
                    _ => String::new(),
                };
                for each in len {
                    add(match format.as_str() {
                        "hex" => each.saturating_mul(2),
                        "base64" => each.saturating_mul(4).div_ceil(3).saturating_mul(77) / 76 + 4,
                        _ => each.saturating_mul(4),
                    });
                }
            }
            Kind::Repeat => {
                let (Some(len), Some(n)) = (bytes_of(0), a.get(1).and_then(|x| ints(x, rows)))
                else {
                    return (0, 0);
                };
                for (i, each) in len.iter().enumerate() {
                    add(each.saturating_mul(at(&n, i).max(0) as u64));
                }
            }
            Kind::Pad => {
                let Some(n) = a.get(1).and_then(|x| ints(x, rows)) else {
                    return (0, 0);
                };
                // The widest character of the text and the fill: 1 byte if both are ASCII.
                let width = |x: Option<&ColumnarValue>| {
                    x.map_or(vec![1; rows], |x| {
                        text_measure(x, rows, |t| if t.is_ascii() { 1 } else { 4 })
                    })
                };
                let (text, fill) = (width(a.first()), width(a.get(2)));
                for i in 0..rows {
                    let width = text[i].max(fill[i]).max(1);
                    add((at(&n, i).max(0) as u64).saturating_mul(width));
                }
            }
            Kind::Translate => {
                let widest = |t: &str| t.chars().map(char::len_utf8).max().unwrap_or(1) as u64;
                let (Some(s), Some(to)) =
                    (bytes_of(0), a.get(2).map(|x| text_measure(x, rows, widest)))
                else {
                    return (0, 0);
                };
                for i in 0..rows {
                    add(s[i].saturating_mul(to[i].max(1)));
                }
            }
            Kind::First => {
                let Some(s) = bytes_of(0) else {
                    return (0, 0);
                };
                for bytes in s.into_iter().take(rows) {
                    add(bytes);
                }
            }
            Kind::CaseMap => {
                let Some(text) = a.first() else {
                    return (0, 0);
                };
                let most = |t: &str| {
                    let ascii = t.bytes().filter(u8::is_ascii).count() as u64;
                    ascii + 3 * (t.len() as u64 - ascii)
                };
                for bytes in text_measure(text, rows, most) {
                    add(bytes);
                }
            }
            Kind::Split => {
                let (Some(s), Some(delimiter)) = (bytes_of(0), bytes_of(1)) else {
                    return (0, 0);
                };
                for i in 0..rows {
                    let pieces = s[i] / delimiter[i].max(1) + 1;
                    add(s[i].saturating_add(pieces.saturating_mul(8)));
                }
            }
            Kind::ArrayRepeat => {
                let (Some(each), Some(n)) = (bytes_of(0), a.get(1).and_then(|x| ints(x, rows)))
                else {
                    return (0, 0);
                };
                for (i, each) in each.iter().enumerate() {
                    add((at(&n, i).max(0) as u64).saturating_mul(each.saturating_add(8)));
                }
            }
            Kind::Range => {
                // `range(stop)`, `range(start, stop)`, `range(start, stop, step)`.
                let int_args: Vec<ArrayRef> = match a
                    .iter()
                    .map(|x| match x.data_type() {
                        t if t.is_integer() => ints(x, rows),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                {
                    Some(v) if !v.is_empty() => v,
                    _ => return (0, 0),
                };
                for i in 0..rows {
                    let (start, stop, step) = match int_args.as_slice() {
                        [stop] => (0, at(stop, i), 1),
                        [start, stop] => (at(start, i), at(stop, i), 1),
                        [start, stop, step, ..] => (at(start, i), at(stop, i), at(step, i)),
                        [] => return (0, 0),
                    };
                    let span = (i128::from(stop) - i128::from(start)).unsigned_abs();
                    let step = i128::from(step).unsigned_abs().max(1);
                    let elements = u64::try_from(span / step + 1).unwrap_or(u64::MAX);
                    add(elements.saturating_mul(8));
                }
            }
            Kind::Replace => {
                let (Some(s), Some(from), Some(to)) = (bytes_of(0), bytes_of(1), bytes_of(2))
                else {
                    return (0, 0);
                };
                for i in 0..rows {
                    let out = if from[i] == 0 {
                        // Between every two characters, and at both ends.
                        s[i].saturating_add((s[i] + 1).saturating_mul(to[i]))
                    } else if to[i] <= from[i] {
                        s[i]
                    } else {
                        s[i].saturating_add((s[i] / from[i]).saturating_mul(to[i] - from[i]))
                    };
                    add(out);
                }
            }
            Kind::RegexpReplace => {
                let (Some(s), Some(repl)) = (bytes_of(0), a.get(2)) else {
                    return (0, 0);
                };
                let repl_len = text_measure(repl, rows, |r| r.len() as u64);
                // Each group reference (`\1`, `$1`) copies at most its match.
                let refs = text_measure(repl, rows, |r| r.matches(['\\', '$']).count() as u64);
                let global = a.get(3).map_or(vec![0; rows], |f| {
                    text_measure(f, rows, |f| u64::from(f.contains('g')))
                });
                for i in 0..rows {
                    let matches = if global[i] == 1 { s[i] + 1 } else { 1 };
                    add(s[i]
                        .saturating_add(matches.saturating_mul(repl_len[i]))
                        .saturating_add(s[i].saturating_mul(refs[i])));
                }
            }
            Kind::ArrayToString => {
                let Some(array) = a.first() else {
                    return (0, 0);
                };
                let leaves = leaves(array, rows);
                let sep = bytes_of(1).unwrap_or_else(|| vec![0; rows]);
                let null = bytes_of(2).unwrap_or_else(|| vec![0; rows]);
                for i in 0..rows {
                    let (n, bytes) = leaves[i];
                    add(bytes.saturating_add(n.saturating_mul(sep[i].saturating_add(null[i]))));
                }
            }
            Kind::ArrayResize => {
                let (Some(array), Some(n)) = (a.first(), a.get(1).and_then(|x| ints(x, rows)))
                else {
                    return (0, 0);
                };
                let count = elements(array, rows);
                let bytes = row_bytes(array, rows);
                let fill = bytes_of(2).unwrap_or_else(|| vec![0; rows]);
                for i in 0..rows {
                    let each = (bytes[i] / count[i].max(1)).max(fill[i]).saturating_add(8);
                    add((at(&n, i).max(0) as u64).saturating_mul(each));
                }
            }
            Kind::ArrayReplace => {
                let (Some(array), Some(to)) = (a.first(), bytes_of(2)) else {
                    return (0, 0);
                };
                let count = elements(array, rows);
                let bytes = row_bytes(array, rows);
                for i in 0..rows {
                    add(bytes[i].saturating_add(count[i].saturating_mul(to[i])));
                }
            }
        }
        (total, largest)
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.deferred.as_ref().unwrap_or(self.inner.signature())
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.schema_name(args)
    }

    fn is_strict(&self) -> bool {
        self.inner.is_strict()
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        // A call of constants too large to make is refused here, when the statement is
        // planned: left unfolded around a large folded constant, it had DataFusion
        // spell that constant out in the expression's name for every rule of every
        // optimizer pass (30 s to refuse one `encode` of a 60 MB value).
        if args.iter().all(|a| matches!(a, Expr::Literal(..))) {
            let values: Vec<ColumnarValue> = args
                .iter()
                .filter_map(|a| match a {
                    Expr::Literal(v, _) => Some(ColumnarValue::Scalar(v.clone())),
                    _ => None,
                })
                .collect();
            self.check_alone(&values, 1)?;
        }
        // A call left for the statement's run stays as it is.
        if self.deferred.is_some() {
            return Ok(ExprSimplifyResult::Original(args));
        }
        // A simplified call is of the unwrapped function: wrapped again.
        Ok(match self.inner.simplify(args, info)? {
            ExprSimplifyResult::Simplified(e) => ExprSimplifyResult::Simplified(
                wrap_calls(
                    e,
                    self.limits,
                    self.ledger.as_ref().map(|l| &l.ledger),
                    false,
                )?
                .data,
            ),
            original => original,
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = self.check_alone(&args.args, args.number_rows)?;
        let rows = Some(args.number_rows);
        if let Some(entry) = &self.ledger {
            let together = entry.ledger.charge(entry.slot, bytes);
            let what = format!("{} and the calls beside it", self.written());
            self.limits.check_batch(&what, together, rows)?;
        }
        // A large output is held in the pool from before it is made until it is
        // dropped: the calls of nodes that run at once meet `query_memory` together.
        let pool = self.ledger.as_ref().and_then(|e| e.ledger.pool.as_ref());
        let reservation = match pool {
            Some(pool) if bytes >= crate::datafusion_ext::context::held::SMALLEST_HELD => {
                Some(pool.reserve(&format!("{} output", self.written()), bytes)?)
            }
            _ => None,
        };
        match (self.inner.invoke_with_args(args)?, reservation) {
            (ColumnarValue::Array(array), Some(reservation)) => {
                reservation.resize(array.get_array_memory_size());
                Ok(ColumnarValue::Array(
                    crate::datafusion_ext::context::held::hold(array, reservation)?,
                ))
            }
            (out, _) => Ok(out),
        }
    }
}
