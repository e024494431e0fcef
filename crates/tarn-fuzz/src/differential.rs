//! `sql_differential`: generated programs of CREATE/INSERT/UPDATE/DELETE/SELECT run on
//! Tarn and on SQLite (bundled, through rusqlite), compared statement by statement.
//!
//! The fuzzer's bytes drive a typed generator ([`arbitrary::Unstructured`]), so every
//! statement is well-typed SQL of the subset both engines define the same way:
//!
//! - **Types.** Tables have 1–4 columns of `INT8`/`INTEGER`, `FLOAT8`/`REAL` and `TEXT`,
//!   optionally an integer `PRIMARY KEY` first. Booleans exist only as predicates.
//! - **Values.** Integers in [-1000, 1000]; floats are multiples of 1/4 in [-100, 100]
//!   (exact in binary, so sums are exact in both engines); text is up to three
//!   lowercase letters of `abc` (SQLite's `LIKE` ignores ASCII case; no `upper`).
//! - **Expressions.** `+ - *` (products at most three deep, so int8 never overflows:
//!   SQLite would turn an overflow into a float where Tarn fails), `/` and `%` only by
//!   a non-zero literal (SQLite answers NULL for division by zero, PostgreSQL and Tarn
//!   fail), `abs`, `length`, `lower`, `substr`, `||`, `coalesce`, `nullif`, `CASE`,
//!   comparisons, `AND`/`OR`/`NOT`, `IS [NOT] NULL`, `BETWEEN`, `IN (list)`, `LIKE`,
//!   `IN (SELECT …)`, `EXISTS`, scalar subqueries of an aggregate. Float literals are
//!   `CAST(x AS FLOAT8)` on Tarn (PostgreSQL reads `1.5` as numeric). Nothing is cast
//!   to text (the engines format floats differently). `UPDATE` never changes a key
//!   (SQLite checks uniqueness row by row, PostgreSQL and Tarn per statement).
//! - **Queries.** Projections with `DISTINCT`, `WHERE`, `GROUP BY` with `count`,
//!   `sum`, `min`, `max`, `avg` and `HAVING`, inner and left joins on an equality,
//!   `UNION [ALL]`, `EXCEPT`, `INTERSECT`, and `ORDER BY` every output column with
//!   `NULLS FIRST|LAST` spelled out (the engines' defaults differ) with `LIMIT`/`OFFSET`.
//!
//! - **Compaction.** `VACUUM` on Tarn (`VACUUM` on SQLite too, where it changes nothing)
//!   seals a table into segments, so answers are compared across the memtable, segments,
//!   statistics and deletion bitmaps.
//!
//! **Comparison.** A statement must succeed on both engines or fail on both (Tarn's
//! failure must then be a 400/404/409; a 500 is always a bug). Writes must report the
//! same number of rows. Query results are compared as multisets of rows, or as
//! sequences when the query orders every output column. Values are normalized: NULL;
//! numbers (Tarn's booleans as 0/1, integers and floats alike) equal within a relative
//! 1e-9 (SQLite's `sum` compensates rounding, DataFusion's does not), sorted by 9
//! significant digits with -0 as 0; text as it is. A program stops once a numeric
//! column holds a value beyond 10^6: past that, SQLite turns an int8 overflow into a
//! float and a float overflow into infinity where Tarn fails, as PostgreSQL does.

use arbitrary::Unstructured;
use rusqlite::types::ValueRef;
use serde_json::Value;
use tarn::{ErrorKind, Session, Tarn};

/// Runs raw fuzzer bytes as a program.
pub fn run_bytes(data: &[u8]) {
    let mut u = Unstructured::new(data);
    if let Ok(p) = Program::generate(&mut u) {
        crate::watched(|| run(&p));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Int,
    Float,
    Text,
    Bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Tarn,
    Sqlite,
}

/// An expression, rendered for either engine.
#[derive(Clone, Debug)]
enum Expr {
    Col(String),
    Int(i64),
    Float(f64),
    Text(String),
    Null(Ty),
    Bin(Box<Expr>, &'static str, Box<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Func(&'static str, Vec<Expr>),
    Case(Box<Expr>, Box<Expr>, Box<Expr>),
    IsNull(Box<Expr>, bool),
    Between(Box<Expr>, Box<Expr>, Box<Expr>),
    InList(Box<Expr>, Vec<Expr>, bool),
    Like(Box<Expr>, String),
    /// `e [NOT] IN (subquery)`, `EXISTS (subquery)`, `(subquery)`.
    InSub(Box<Expr>, Box<Query>, bool),
    Exists(Box<Query>, bool),
    Scalar(Box<Query>),
    /// An aggregate: name, argument (`None`: `count(*)`).
    Agg(&'static str, Option<Box<Expr>>),
}

impl Expr {
    fn render(&self, d: Dialect) -> String {
        let r = |e: &Expr| e.render(d);
        match self {
            Expr::Col(c) => c.clone(),
            Expr::Int(i) => {
                if *i < 0 {
                    format!("({i})")
                } else {
                    i.to_string()
                }
            }
            Expr::Float(f) => match d {
                Dialect::Tarn => format!("CAST({f:?} AS FLOAT8)"),
                Dialect::Sqlite => format!("({f:?})"),
            },
            Expr::Text(s) => format!("'{s}'"),
            Expr::Null(ty) => match (d, ty) {
                (Dialect::Sqlite, _) => "NULL".into(),
                (Dialect::Tarn, Ty::Int) => "CAST(NULL AS INT8)".into(),
                (Dialect::Tarn, Ty::Float) => "CAST(NULL AS FLOAT8)".into(),
                (Dialect::Tarn, Ty::Text) => "CAST(NULL AS TEXT)".into(),
                (Dialect::Tarn, Ty::Bool) => "CAST(NULL AS BOOLEAN)".into(),
            },
            Expr::Bin(a, op, b) => format!("({} {op} {})", r(a), r(b)),
            Expr::Neg(a) => format!("(- {})", r(a)),
            Expr::Not(a) => format!("(NOT {})", r(a)),
            Expr::Func(name, args) => {
                let args: Vec<String> = args.iter().map(r).collect();
                format!("{name}({})", args.join(", "))
            }
            Expr::Case(c, t, e) => format!("(CASE WHEN {} THEN {} ELSE {} END)", r(c), r(t), r(e)),
            Expr::IsNull(a, not) => format!("({} IS {}NULL)", r(a), if *not { "NOT " } else { "" }),
            Expr::Between(a, lo, hi) => format!("({} BETWEEN {} AND {})", r(a), r(lo), r(hi)),
            Expr::InList(a, list, not) => {
                let items: Vec<String> = list.iter().map(r).collect();
                format!(
                    "({} {}IN ({}))",
                    r(a),
                    if *not { "NOT " } else { "" },
                    items.join(", ")
                )
            }
            Expr::Like(a, pat) => format!("({} LIKE '{pat}')", r(a)),
            Expr::InSub(a, q, not) => {
                format!(
                    "({} {}IN ({}))",
                    r(a),
                    if *not { "NOT " } else { "" },
                    q.render(d)
                )
            }
            Expr::Exists(q, not) => format!(
                "({}EXISTS ({}))",
                if *not { "NOT " } else { "" },
                q.render(d)
            ),
            Expr::Scalar(q) => format!("({})", q.render(d)),
            Expr::Agg(name, arg) => match arg {
                None => "count(*)".into(),
                Some(a) => format!("{name}({})", r(a)),
            },
        }
    }
}

/// A table of the program.
#[derive(Clone, Debug)]
struct Table {
    name: String,
    cols: Vec<Ty>,
    pk: bool,
}

impl Table {
    fn sql_name(&self, d: Dialect) -> String {
        match d {
            Dialect::Tarn => format!("\"ws\".\"{}\"", self.name),
            Dialect::Sqlite => self.name.clone(),
        }
    }
}

/// A SELECT, rendered for either engine.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // a test generator: clarity over size
enum Query {
    Simple {
        distinct: bool,
        items: Vec<Expr>,
        from: From,
        filter: Option<Expr>,
        group: Vec<Expr>,
        having: Option<Expr>,
        order: Option<Order>,
    },
    SetOp(Box<Query>, &'static str, Box<Query>),
}

#[derive(Clone, Debug)]
struct From {
    table: Table,
    alias: String,
    join: Option<(bool, Table, String, String)>,
}

#[derive(Clone, Debug)]
struct Order {
    /// Per output column: descending, nulls first.
    keys: Vec<(bool, bool)>,
    limit: Option<(u8, u8)>,
}

impl Query {
    fn render(&self, d: Dialect) -> String {
        match self {
            Query::SetOp(a, op, b) => format!("{} {op} {}", a.render(d), b.render(d)),
            Query::Simple {
                distinct,
                items,
                from,
                filter,
                group,
                having,
                order,
            } => {
                let items: Vec<String> = items.iter().map(|e| e.render(d)).collect();
                let mut s = format!(
                    "SELECT {}{} FROM {} {}",
                    if *distinct { "DISTINCT " } else { "" },
                    items.join(", "),
                    from.table.sql_name(d),
                    from.alias
                );
                if let Some((left, t, alias, on)) = &from.join {
                    s += &format!(
                        " {}JOIN {} {alias} ON {on}",
                        if *left { "LEFT " } else { "" },
                        t.sql_name(d)
                    );
                }
                if let Some(f) = filter {
                    s += &format!(" WHERE {}", f.render(d));
                }
                if !group.is_empty() {
                    let g: Vec<String> = group.iter().map(|e| e.render(d)).collect();
                    s += &format!(" GROUP BY {}", g.join(", "));
                }
                if let Some(h) = having {
                    s += &format!(" HAVING {}", h.render(d));
                }
                if let Some(o) = order {
                    let keys: Vec<String> = o
                        .keys
                        .iter()
                        .enumerate()
                        .map(|(i, (desc, nf))| {
                            format!(
                                "{} {} NULLS {}",
                                i + 1,
                                if *desc { "DESC" } else { "ASC" },
                                if *nf { "FIRST" } else { "LAST" }
                            )
                        })
                        .collect();
                    s += &format!(" ORDER BY {}", keys.join(", "));
                    if let Some((l, off)) = o.limit {
                        s += &format!(" LIMIT {} OFFSET {}", l % 8, off % 4);
                    }
                }
                s
            }
        }
    }

    /// Whether the rows come in a defined order.
    fn ordered(&self) -> bool {
        matches!(self, Query::Simple { order: Some(_), .. })
    }
}

/// One statement of a program.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a test generator: clarity over size
enum Stmt {
    Create(Table),
    /// Tarn only; it must succeed.
    Vacuum(Table),
    Write(String, String),
    Select(Query),
}

impl Stmt {
    fn sql(&self, d: Dialect) -> String {
        match self {
            Stmt::Create(t) => {
                let cols: Vec<String> = t
                    .cols
                    .iter()
                    .enumerate()
                    .map(|(i, ty)| {
                        let name = match (d, ty) {
                            (Dialect::Tarn, Ty::Int) => "INT8",
                            (Dialect::Tarn, Ty::Float) => "FLOAT8",
                            (Dialect::Sqlite, Ty::Int) => "INTEGER",
                            (Dialect::Sqlite, Ty::Float) => "REAL",
                            (_, _) => "TEXT",
                        };
                        let pk = if i == 0 && t.pk { " PRIMARY KEY" } else { "" };
                        format!("c{i} {name}{pk}")
                    })
                    .collect();
                format!("CREATE TABLE {} ({})", t.sql_name(d), cols.join(", "))
            }
            Stmt::Write(tarn, sqlite) => match d {
                Dialect::Tarn => tarn.clone(),
                Dialect::Sqlite => sqlite.clone(),
            },
            Stmt::Select(q) => q.render(d),
            Stmt::Vacuum(t) => match d {
                Dialect::Tarn => format!("VACUUM {}", t.sql_name(d)),
                Dialect::Sqlite => String::new(),
            },
        }
    }
}

/// A generated program.
#[derive(Debug)]
pub struct Program {
    stmts: Vec<Stmt>,
}

/// The columns an expression may use: (SQL name, type).
type Scope = Vec<(String, Ty)>;

struct Gen<'a, 'b> {
    u: &'a mut Unstructured<'b>,
    tables: Vec<Table>,
    next_key: i64,
}

impl Program {
    /// Generates a program from the fuzzer's bytes.
    pub fn generate(u: &mut Unstructured<'_>) -> arbitrary::Result<Program> {
        let mut g = Gen {
            u,
            tables: Vec::new(),
            next_key: 0,
        };
        let mut stmts = Vec::new();
        let n_tables = g.u.int_in_range(1..=3)?;
        for i in 0..n_tables {
            let n_cols = g.u.int_in_range(1..=4)?;
            let pk = g.u.arbitrary()?;
            let mut cols = Vec::new();
            for c in 0..n_cols {
                cols.push(if c == 0 && pk { Ty::Int } else { g.ty()? });
            }
            let t = Table {
                name: format!("t{i}"),
                cols,
                pk,
            };
            g.tables.push(t.clone());
            stmts.push(Stmt::Create(t));
        }
        let n = g.u.int_in_range(1..=24)?;
        for _ in 0..n {
            if g.u.is_empty() {
                break;
            }
            let stmt = match g.u.int_in_range(0..=10)? {
                0..=2 => g.insert()?,
                3 => g.update()?,
                4 => g.delete()?,
                10 => {
                    // Compaction into segments (statistics, pruning, deletion bitmaps)
                    // must not change any answer; nothing to do in SQLite.
                    let t = g.table()?;
                    Stmt::Vacuum(t)
                }
                _ => Stmt::Select(g.query(0)?),
            };
            stmts.push(stmt);
        }
        Ok(Program { stmts })
    }
}

impl Gen<'_, '_> {
    fn ty(&mut self) -> arbitrary::Result<Ty> {
        Ok(*self.u.choose(&[Ty::Int, Ty::Float, Ty::Text])?)
    }

    fn table(&mut self) -> arbitrary::Result<Table> {
        Ok(self.u.choose(&self.tables)?.clone())
    }

    fn lit(&mut self, ty: Ty, nullable: bool) -> arbitrary::Result<Expr> {
        if nullable && self.u.ratio(1, 6)? {
            return Ok(Expr::Null(ty));
        }
        Ok(match ty {
            Ty::Int => Expr::Int(self.u.int_in_range(-1000..=1000)?),
            Ty::Float => Expr::Float(f64::from(self.u.int_in_range(-400..=400)?) / 4.0),
            Ty::Text => {
                let n = self.u.int_in_range(0..=3)?;
                let mut s = String::new();
                for _ in 0..n {
                    s.push(*self.u.choose(&['a', 'b', 'c'])?);
                }
                Expr::Text(s)
            }
            Ty::Bool => Expr::Bin(
                Box::new(Expr::Int(1)),
                "=",
                Box::new(Expr::Int(self.u.int_in_range(0..=1)?)),
            ),
        })
    }

    /// A literal for a stored value (rendered the same in both dialects).
    fn value(&mut self, ty: Ty, nullable: bool) -> arbitrary::Result<String> {
        Ok(match self.lit(ty, nullable)? {
            Expr::Null(_) => "NULL".into(),
            Expr::Float(f) => format!("{f:?}"),
            e => e.render(Dialect::Sqlite),
        })
    }

    fn insert(&mut self) -> arbitrary::Result<Stmt> {
        let t = self.table()?;
        let n = self.u.int_in_range(1..=6)?;
        let mut rows = Vec::new();
        for _ in 0..n {
            let mut vals = Vec::new();
            for (i, ty) in t.cols.iter().enumerate() {
                if i == 0 && t.pk {
                    // Mostly fresh keys, sometimes a repeat (both engines must refuse it).
                    let k = if self.next_key > 0 && self.u.ratio(1, 40)? {
                        self.u.int_in_range(0..=self.next_key - 1)?
                    } else {
                        self.next_key += 1;
                        self.next_key - 1
                    };
                    vals.push(k.to_string());
                } else {
                    vals.push(self.value(*ty, true)?);
                }
            }
            rows.push(format!("({})", vals.join(", ")));
        }
        let body = format!("VALUES {}", rows.join(", "));
        Ok(Stmt::Write(
            format!("INSERT INTO {} {body}", t.sql_name(Dialect::Tarn)),
            format!("INSERT INTO {} {body}", t.sql_name(Dialect::Sqlite)),
        ))
    }

    fn scope(t: &Table, alias: &str) -> Scope {
        t.cols
            .iter()
            .enumerate()
            .map(|(i, ty)| (format!("{alias}.c{i}"), *ty))
            .collect()
    }

    fn update(&mut self) -> arbitrary::Result<Stmt> {
        let t = self.table()?;
        let first = usize::from(t.pk);
        if first >= t.cols.len() {
            return self.delete();
        }
        let col = self.u.int_in_range(first..=t.cols.len() - 1)?;
        let scope = Self::scope(&t, &t.name);
        // No products in SET: a column squared by every UPDATE overflows.
        let value = self.expr(&scope, t.cols[col], 1, false, true)?;
        let filter = self.opt_pred(&scope)?;
        let mk = |d: Dialect| {
            format!(
                "UPDATE {} SET c{col} = {}{}",
                t.sql_name(d),
                value.render(d),
                filter
                    .as_ref()
                    .map_or(String::new(), |f| format!(" WHERE {}", f.render(d)))
            )
        };
        Ok(Stmt::Write(mk(Dialect::Tarn), mk(Dialect::Sqlite)))
    }

    fn delete(&mut self) -> arbitrary::Result<Stmt> {
        let t = self.table()?;
        let scope = Self::scope(&t, &t.name);
        let filter = self.opt_pred(&scope)?;
        let mk = |d: Dialect| {
            format!(
                "DELETE FROM {}{}",
                t.sql_name(d),
                filter
                    .as_ref()
                    .map_or(String::new(), |f| format!(" WHERE {}", f.render(d)))
            )
        };
        Ok(Stmt::Write(mk(Dialect::Tarn), mk(Dialect::Sqlite)))
    }

    fn opt_pred(&mut self, scope: &Scope) -> arbitrary::Result<Option<Expr>> {
        if self.u.ratio(1, 4)? {
            return Ok(None);
        }
        Ok(Some(self.expr(scope, Ty::Bool, 2, true, false)?))
    }

    /// A column of `scope` of type `ty` (ints and floats count as numbers).
    fn column(&mut self, scope: &Scope, ty: Ty) -> arbitrary::Result<Option<Expr>> {
        let cols: Vec<&(String, Ty)> = scope.iter().filter(|(_, t)| *t == ty).collect();
        if cols.is_empty() {
            return Ok(None);
        }
        Ok(Some(Expr::Col(self.u.choose(&cols)?.0.clone())))
    }

    /// An expression of type `ty` over `scope`. `subq`: subqueries allowed;
    /// `mul`: a product is already above (products stay shallow).
    fn expr(
        &mut self,
        scope: &Scope,
        ty: Ty,
        depth: u32,
        subq: bool,
        mul: bool,
    ) -> arbitrary::Result<Expr> {
        let b = Box::new;
        if depth == 0 || self.u.ratio(1, 3)? {
            if ty != Ty::Bool
                && self.u.ratio(3, 4)?
                && let Some(c) = self.column(scope, ty)?
            {
                return Ok(c);
            }
            return self.lit(ty, true);
        }
        let d = depth - 1;
        Ok(match ty {
            Ty::Int | Ty::Float => match self.u.int_in_range(0..=8)? {
                0 => Expr::Bin(
                    b(self.expr(scope, ty, d, subq, mul)?),
                    "+",
                    b(self.expr(scope, ty, d, subq, mul)?),
                ),
                1 => Expr::Bin(
                    b(self.expr(scope, ty, d, subq, mul)?),
                    "-",
                    b(self.expr(scope, ty, d, subq, mul)?),
                ),
                2 if !mul => Expr::Bin(
                    b(self.expr(scope, ty, d, subq, true)?),
                    "*",
                    b(self.expr(scope, ty, d, subq, true)?),
                ),
                3 => {
                    let divisor = loop {
                        let v = self.u.int_in_range(-9..=9)?;
                        if v != 0 {
                            break v;
                        }
                        if self.u.is_empty() {
                            break 3;
                        }
                    };
                    let (op, rhs) = match ty {
                        Ty::Int => (*self.u.choose(&["/", "%"])?, Expr::Int(divisor)),
                        // Powers of two keep floats exact (dyadic).
                        _ => (
                            "/",
                            Expr::Float(*self.u.choose(&[0.5, 2.0, 4.0, -0.25, -2.0])?),
                        ),
                    };
                    Expr::Bin(b(self.expr(scope, ty, d, subq, mul)?), op, b(rhs))
                }
                4 => Expr::Neg(b(self.expr(scope, ty, d, subq, mul)?)),
                5 => Expr::Func("abs", vec![self.expr(scope, ty, d, subq, mul)?]),
                6 if ty == Ty::Int => {
                    Expr::Func("length", vec![self.expr(scope, Ty::Text, d, subq, mul)?])
                }
                7 => Expr::Case(
                    b(self.expr(scope, Ty::Bool, d, subq, mul)?),
                    b(self.expr(scope, ty, d, subq, mul)?),
                    b(self.expr(scope, ty, d, subq, mul)?),
                ),
                _ => Expr::Func(
                    "coalesce",
                    vec![
                        self.expr(scope, ty, d, subq, mul)?,
                        self.expr(scope, ty, d, subq, mul)?,
                    ],
                ),
            },
            Ty::Text => match self.u.int_in_range(0..=5)? {
                0 => Expr::Bin(
                    b(self.expr(scope, ty, d, subq, mul)?),
                    "||",
                    b(self.expr(scope, ty, d, subq, mul)?),
                ),
                1 => Expr::Func("lower", vec![self.expr(scope, ty, d, subq, mul)?]),
                2 => Expr::Func(
                    "substr",
                    vec![
                        self.expr(scope, ty, d, subq, mul)?,
                        Expr::Int(self.u.int_in_range(1..=3)?),
                        Expr::Int(self.u.int_in_range(0..=3)?),
                    ],
                ),
                3 => Expr::Case(
                    b(self.expr(scope, Ty::Bool, d, subq, mul)?),
                    b(self.expr(scope, ty, d, subq, mul)?),
                    b(self.expr(scope, ty, d, subq, mul)?),
                ),
                4 => Expr::Func(
                    "nullif",
                    vec![
                        self.expr(scope, ty, d, subq, mul)?,
                        self.expr(scope, ty, d, subq, mul)?,
                    ],
                ),
                _ => Expr::Func(
                    "coalesce",
                    vec![
                        self.expr(scope, ty, d, subq, mul)?,
                        self.expr(scope, ty, d, subq, mul)?,
                    ],
                ),
            },
            Ty::Bool => match self.u.int_in_range(0..=9)? {
                0 => Expr::Bin(
                    b(self.expr(scope, Ty::Bool, d, subq, mul)?),
                    "AND",
                    b(self.expr(scope, Ty::Bool, d, subq, mul)?),
                ),
                1 => Expr::Bin(
                    b(self.expr(scope, Ty::Bool, d, subq, mul)?),
                    "OR",
                    b(self.expr(scope, Ty::Bool, d, subq, mul)?),
                ),
                2 => Expr::Not(b(self.expr(scope, Ty::Bool, d, subq, mul)?)),
                3 => {
                    let t = self.ty()?;
                    Expr::IsNull(b(self.expr(scope, t, d, subq, mul)?), self.u.arbitrary()?)
                }
                4 => {
                    let t = *self.u.choose(&[Ty::Int, Ty::Float])?;
                    Expr::Between(
                        b(self.expr(scope, t, d, subq, mul)?),
                        b(self.lit(t, false)?),
                        b(self.lit(t, false)?),
                    )
                }
                5 => {
                    let t = self.ty()?;
                    let n = self.u.int_in_range(1..=4)?;
                    let mut list = Vec::new();
                    for _ in 0..n {
                        list.push(self.lit(t, true)?);
                    }
                    Expr::InList(
                        b(self.expr(scope, t, d, subq, mul)?),
                        list,
                        self.u.arbitrary()?,
                    )
                }
                6 => {
                    if let Some(c) = self.column(scope, Ty::Text)? {
                        let n = self.u.int_in_range(0..=3)?;
                        let mut pat = String::new();
                        for _ in 0..n {
                            pat.push(*self.u.choose(&['a', 'b', 'c', '%', '_'])?);
                        }
                        Expr::Like(b(c), pat)
                    } else {
                        self.compare(scope, d, subq, mul)?
                    }
                }
                7 if subq => self.subquery_pred(scope)?,
                _ => self.compare(scope, d, subq, mul)?,
            },
        })
    }

    fn compare(&mut self, scope: &Scope, d: u32, subq: bool, mul: bool) -> arbitrary::Result<Expr> {
        let t = self.ty()?;
        let op = *self.u.choose(&["=", "<>", "<", "<=", ">", ">="])?;
        let lhs = self.expr(scope, t, d, subq, mul)?;
        // Numbers compare across int and float.
        let rt = if t == Ty::Text {
            t
        } else {
            *self.u.choose(&[Ty::Int, Ty::Float])?
        };
        let rhs = self.expr(scope, rt, d, subq, mul)?;
        Ok(Expr::Bin(Box::new(lhs), op, Box::new(rhs)))
    }

    /// `x IN (SELECT …)`, `EXISTS (…)` or `x op (SELECT agg …)`, possibly correlated.
    fn subquery_pred(&mut self, outer: &Scope) -> arbitrary::Result<Expr> {
        let t = self.table()?;
        let alias = "s".to_string();
        let inner = Self::scope(&t, &alias);
        let mut scope = inner.clone();
        if self.u.arbitrary()? {
            scope.extend(outer.iter().cloned());
        }
        let col = self.u.choose(&inner)?.clone();
        let filter = if self.u.arbitrary()? {
            Some(self.expr(&scope, Ty::Bool, 1, false, false)?)
        } else {
            None
        };
        let mk = |items: Vec<Expr>| Query::Simple {
            distinct: false,
            items,
            from: From {
                table: t.clone(),
                alias: alias.clone(),
                join: None,
            },
            filter: filter.clone(),
            group: Vec::new(),
            having: None,
            order: None,
        };
        Ok(match self.u.int_in_range(0..=2)? {
            0 => {
                let lhs = self.expr(outer, col.1, 1, false, false)?;
                Expr::InSub(
                    Box::new(lhs),
                    Box::new(mk(vec![Expr::Col(col.0)])),
                    self.u.arbitrary()?,
                )
            }
            1 => Expr::Exists(Box::new(mk(vec![Expr::Int(1)])), self.u.arbitrary()?),
            _ => {
                let agg = if col.1 == Ty::Text {
                    *self.u.choose(&["min", "max"])?
                } else {
                    *self.u.choose(&["min", "max", "sum", "count"])?
                };
                let ty = if agg == "count" { Ty::Int } else { col.1 };
                let lhs = self.expr(outer, ty, 1, false, false)?;
                let op = *self.u.choose(&["=", "<", ">", "<>"])?;
                let q = mk(vec![Expr::Agg(agg, Some(Box::new(Expr::Col(col.0))))]);
                Expr::Bin(Box::new(lhs), op, Box::new(Expr::Scalar(Box::new(q))))
            }
        })
    }

    fn query(&mut self, depth: u32) -> arbitrary::Result<Query> {
        if depth == 0 && self.u.ratio(1, 8)? {
            // Set operations over one column of one type.
            let ty = self.ty()?;
            let a = self.single_column(ty)?;
            let b = self.single_column(ty)?;
            let op = *self
                .u
                .choose(&["UNION", "UNION ALL", "EXCEPT", "INTERSECT"])?;
            return Ok(Query::SetOp(Box::new(a), op, Box::new(b)));
        }
        let t = self.table()?;
        let mut scope = Self::scope(&t, "a");
        let join = if self.tables.len() > 1 && self.u.ratio(1, 4)? {
            let other = self.table()?;
            let inner = Self::scope(&other, "b");
            // An equality between columns of one type, else on a constant condition.
            let pairs: Vec<(String, String)> = scope
                .iter()
                .flat_map(|(a, at)| {
                    inner
                        .iter()
                        .filter(move |(_, bt)| bt == at)
                        .map(move |(b, _)| (a.clone(), b.clone()))
                })
                .collect();
            let on = if pairs.is_empty() {
                "1 = 1".to_string()
            } else {
                let (a, b) = self.u.choose(&pairs)?;
                format!("{a} = {b}")
            };
            scope.extend(inner);
            Some((self.u.arbitrary()?, other, "b".to_string(), on))
        } else {
            None
        };
        let filter = self.opt_pred(&scope)?;
        let from = From {
            table: t,
            alias: "a".into(),
            join,
        };
        if self.u.ratio(1, 3)? {
            // Aggregation.
            let n_groups = self.u.int_in_range(0..=2)?;
            let mut group = Vec::new();
            let mut items = Vec::new();
            for _ in 0..n_groups {
                let (c, _) = self.u.choose(&scope)?.clone();
                group.push(Expr::Col(c.clone()));
                items.push(Expr::Col(c));
            }
            let n_aggs = self.u.int_in_range(1..=3)?;
            for _ in 0..n_aggs {
                let (c, ty) = self.u.choose(&scope)?.clone();
                let agg = match ty {
                    Ty::Text => *self.u.choose(&["count", "min", "max"])?,
                    _ => *self.u.choose(&["count", "sum", "min", "max", "avg"])?,
                };
                let arg = if agg == "count" && self.u.arbitrary()? {
                    None
                } else {
                    Some(Box::new(Expr::Col(c)))
                };
                items.push(Expr::Agg(agg, arg));
            }
            let having = if self.u.ratio(1, 3)? {
                Some(Expr::Bin(
                    Box::new(Expr::Agg("count", None)),
                    self.u.choose(&[">", "<", "="])?,
                    Box::new(Expr::Int(self.u.int_in_range(0..=3)?)),
                ))
            } else {
                None
            };
            let order = self.order(items.len())?;
            return Ok(Query::Simple {
                distinct: false,
                items,
                from,
                filter,
                group,
                having,
                order,
            });
        }
        let n = self.u.int_in_range(1..=3)?;
        let mut items = Vec::new();
        for _ in 0..n {
            let ty = *self.u.choose(&[Ty::Int, Ty::Float, Ty::Text, Ty::Bool])?;
            items.push(self.expr(&scope, ty, 2, false, false)?);
        }
        let order = self.order(items.len())?;
        Ok(Query::Simple {
            distinct: self.u.ratio(1, 5)?,
            items,
            from,
            filter,
            group: Vec::new(),
            having: None,
            order,
        })
    }

    fn order(&mut self, n: usize) -> arbitrary::Result<Option<Order>> {
        if !self.u.ratio(1, 3)? {
            return Ok(None);
        }
        let mut keys = Vec::new();
        for _ in 0..n {
            keys.push((self.u.arbitrary()?, self.u.arbitrary()?));
        }
        let limit = if self.u.arbitrary()? {
            Some((self.u.arbitrary()?, self.u.arbitrary()?))
        } else {
            None
        };
        Ok(Some(Order { keys, limit }))
    }

    fn single_column(&mut self, ty: Ty) -> arbitrary::Result<Query> {
        let t = self.table()?;
        let scope = Self::scope(&t, "a");
        let item = self.expr(&scope, ty, 1, false, false)?;
        let filter = self.opt_pred(&scope)?;
        Ok(Query::Simple {
            distinct: false,
            items: vec![item],
            from: From {
                table: t,
                alias: "a".into(),
                join: None,
            },
            filter,
            group: Vec::new(),
            having: None,
            order: None,
        })
    }
}

/// A value as compared: Tarn's booleans count as 0/1 numbers, integers and floats alike.
#[derive(Debug, Clone)]
enum Val {
    Null,
    Num(f64),
    Text(String),
    Other(String),
}

impl Val {
    fn from_json(v: &Value) -> Val {
        match v {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Num(if *b { 1.0 } else { 0.0 }),
            Value::Number(n) => Val::Num(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => Val::Text(s.clone()),
            other => Val::Other(other.to_string()),
        }
    }

    fn from_sqlite(v: ValueRef<'_>) -> Val {
        match v {
            ValueRef::Null => Val::Null,
            ValueRef::Integer(i) => Val::Num(i as f64),
            ValueRef::Real(f) => Val::Num(f),
            ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Val::Other(format!("{b:?}")),
        }
    }

    /// The sort key of multiset comparison: numbers to 9 significant digits, -0 as 0.
    fn key(&self) -> String {
        match self {
            Val::Null => "N".into(),
            Val::Num(f) => format!("#{:.8e}", if *f == 0.0 { 0.0 } else { *f }),
            Val::Text(s) => format!("'{s}"),
            Val::Other(s) => format!("?{s}"),
        }
    }

    /// Equality: numbers within a relative 1e-9 (the engines sum floats in different
    /// orders, and SQLite's `sum` compensates its rounding).
    fn same(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Null, Val::Null) => true,
            (Val::Num(a), Val::Num(b)) => {
                a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
            }
            (Val::Text(a), Val::Text(b)) | (Val::Other(a), Val::Other(b)) => a == b,
            _ => false,
        }
    }
}

/// What one engine made of a statement.
#[derive(Debug)]
#[allow(dead_code)] // the error text is shown in disagreement reports (Debug)
enum Outcome {
    Rows(Vec<Vec<Val>>),
    Changed(u64),
    Failed(String),
}

fn sqlite_run(conn: &rusqlite::Connection, sql: &str, query: bool) -> Outcome {
    if !query {
        return match conn.execute(sql, []) {
            Ok(n) => Outcome::Changed(n as u64),
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }
    let mut stmt = match conn.prepare(sql) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let n = stmt.column_count();
    let rows = stmt.query_map([], |row| {
        (0..n)
            .map(|i| row.get_ref(i).map(Val::from_sqlite))
            .collect::<rusqlite::Result<Vec<Val>>>()
    });
    match rows.and_then(|r| r.collect::<rusqlite::Result<Vec<_>>>()) {
        Ok(rows) => Outcome::Rows(rows),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

async fn tarn_run(s: &Session, sql: &str, query: bool) -> Outcome {
    match s.query("ws", sql, &[]).await {
        Ok(r) if query => Outcome::Rows(
            r.rows
                .unwrap_or_default()
                .iter()
                .map(|row| row.iter().map(Val::from_json).collect())
                .collect(),
        ),
        Ok(r) => Outcome::Changed(r.rows_affected),
        Err(e) => {
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::BadRequest | ErrorKind::NotFound | ErrorKind::Conflict
                ),
                "Tarn failed with {} on {sql}: {e}",
                e.status()
            );
            Outcome::Failed(e.to_string())
        }
    }
}

/// Runs a program on both engines; panics at the first disagreement, printing the
/// program up to it for both engines.
pub fn run(p: &Program) {
    let conn = rusqlite::Connection::open_in_memory().expect("SQLite in memory");
    crate::runtime().block_on(async {
        let s = session().await;
        // A fresh workspace (a failed input may have left the last one).
        let _ = s.delete_workspace("ws").await;
        s.create_workspace("ws", "W").await.expect("workspace");
        for (i, stmt) in p.stmts.iter().enumerate() {
            let query = matches!(stmt, Stmt::Select(_));
            let (ts, ls) = (stmt.sql(Dialect::Tarn), stmt.sql(Dialect::Sqlite));
            if matches!(stmt, Stmt::Vacuum(_)) {
                if let Err(e) = s.query("ws", &ts, &[]).await {
                    panic!("{ts} failed: {e}");
                }
                continue;
            }
            let mut t = tarn_run(s, &ts, query).await;
            let mut l = sqlite_run(&conn, &ls, query);
            let ordered = matches!(stmt, Stmt::Select(q) if q.ordered());
            if !ordered {
                for o in [&mut t, &mut l] {
                    if let Outcome::Rows(rows) = o {
                        rows.sort_by_cached_key(|r| r.iter().map(Val::key).collect::<Vec<_>>());
                    }
                }
            }
            if std::env::var_os("TARN_FUZZ_VERBOSE").is_some() {
                eprintln!("{ts}\n  tarn: {t:?}\n  sqlite: {l:?}");
            }
            let agree = match (&t, &l) {
                (Outcome::Failed(_), Outcome::Failed(_)) => true,
                (Outcome::Changed(a), Outcome::Changed(b)) => a == b,
                (Outcome::Rows(a), Outcome::Rows(b)) => {
                    a.len() == b.len()
                        && a.iter().zip(b).all(|(x, y)| {
                            x.len() == y.len() && x.iter().zip(y).all(|(u, v)| u.same(v))
                        })
                }
                _ => false,
            };
            if !agree {
                let history: Vec<String> = p.stmts[..=i]
                    .iter()
                    .map(|s| format!("  {};\n  -- sqlite: {};", s.sql(Dialect::Tarn), s.sql(Dialect::Sqlite)))
                    .collect();
                panic!(
                    "Tarn and SQLite disagree on statement {i}:\n{ts}\nTarn:   {t:?}\nSQLite: {l:?}\nprogram:\n{}",
                    history.join("\n")
                );
            }
            if !query && too_big(&conn, &p.stmts) {
                // Values grew past what the generator's bounds assume (UPDATEs can
                // double a column each time): SQLite would turn an int8 overflow into a
                // float and float overflow into infinity where Tarn fails.
                break;
            }
        }
    });
}

/// Whether a numeric column of the program's tables holds a value beyond 10^6 (in
/// magnitude), past which products of two expressions could overflow int8.
fn too_big(conn: &rusqlite::Connection, stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Create(t) => t.cols.iter().enumerate().any(|(i, ty)| {
            *ty != Ty::Text
                && conn
                    .query_row(&format!("SELECT max(abs(c{i})) FROM {}", t.name), [], |r| {
                        r.get::<_, Option<f64>>(0)
                    })
                    .ok()
                    .flatten()
                    .is_some_and(|m| m > 1e6)
        }),
        _ => false,
    })
}

/// One in-memory database per process (creating a user, key and organization for each
/// input cost more than most programs).
async fn session() -> &'static Session {
    static S: tokio::sync::OnceCell<(Tarn, Session)> = tokio::sync::OnceCell::const_new();
    let (_, s) = S
        .get_or_init(|| async {
            let tarn = Tarn::in_memory().await.expect("Tarn in memory");
            let (_, s) = crate::signed_in(&tarn, "d").await;
            (tarn, s)
        })
        .await;
    s
}
