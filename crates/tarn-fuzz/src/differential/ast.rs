//! The programs' statements as a tree, and each written as SQL for Tarn or for SQLite.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Int,
    Float,
    Text,
    Bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Tarn,
    Sqlite,
}

/// An expression, rendered for either engine.
#[derive(Clone, Debug)]
pub(crate) enum Expr {
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
    pub(crate) fn render(&self, d: Dialect) -> String {
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
pub(crate) struct Table {
    pub(crate) name: String,
    pub(crate) cols: Vec<Ty>,
    pub(crate) pk: bool,
}

impl Table {
    pub(crate) fn sql_name(&self, d: Dialect) -> String {
        match d {
            Dialect::Tarn => format!("\"ws\".\"{}\"", self.name),
            Dialect::Sqlite => self.name.clone(),
        }
    }
}

/// A SELECT, rendered for either engine.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // a test generator: clarity over size
pub(crate) enum Query {
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
pub(crate) struct From {
    pub(crate) table: Table,
    pub(crate) alias: String,
    pub(crate) join: Option<(bool, Table, String, String)>,
}

#[derive(Clone, Debug)]
pub(crate) struct Order {
    /// Per output column: descending, nulls first.
    pub(crate) keys: Vec<(bool, bool)>,
    pub(crate) limit: Option<(u8, u8)>,
}

impl Query {
    pub(crate) fn render(&self, d: Dialect) -> String {
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
    pub(crate) fn ordered(&self) -> bool {
        matches!(self, Query::Simple { order: Some(_), .. })
    }
}

/// One statement of a program.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a test generator: clarity over size
pub(crate) enum Stmt {
    Create(Table),
    /// Tarn only; it must succeed.
    Vacuum(Table),
    Write(String, String),
    Select(Query),
}

impl Stmt {
    pub(crate) fn sql(&self, d: Dialect) -> String {
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
