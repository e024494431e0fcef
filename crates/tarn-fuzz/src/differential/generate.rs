//! Generating a program from the fuzzer's bytes: tables, then statements typed by the
//! columns they use.

use arbitrary::Unstructured;

use super::ast::*;

/// A generated program.
#[derive(Debug)]
pub struct Program {
    pub(crate) stmts: Vec<Stmt>,
}

/// The columns an expression may use: (SQL name, type).
pub(crate) type Scope = Vec<(String, Ty)>;

pub(crate) struct Gen<'a, 'b> {
    pub(crate) u: &'a mut Unstructured<'b>,
    pub(crate) tables: Vec<Table>,
    pub(crate) next_key: i64,
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
    pub(crate) fn ty(&mut self) -> arbitrary::Result<Ty> {
        Ok(*self.u.choose(&[Ty::Int, Ty::Float, Ty::Text])?)
    }

    pub(crate) fn table(&mut self) -> arbitrary::Result<Table> {
        Ok(self.u.choose(&self.tables)?.clone())
    }

    pub(crate) fn lit(&mut self, ty: Ty, nullable: bool) -> arbitrary::Result<Expr> {
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
    pub(crate) fn value(&mut self, ty: Ty, nullable: bool) -> arbitrary::Result<String> {
        Ok(match self.lit(ty, nullable)? {
            Expr::Null(_) => "NULL".into(),
            Expr::Float(f) => format!("{f:?}"),
            e => e.render(Dialect::Sqlite),
        })
    }

    pub(crate) fn insert(&mut self) -> arbitrary::Result<Stmt> {
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

    pub(crate) fn scope(t: &Table, alias: &str) -> Scope {
        t.cols
            .iter()
            .enumerate()
            .map(|(i, ty)| (format!("{alias}.c{i}"), *ty))
            .collect()
    }

    pub(crate) fn update(&mut self) -> arbitrary::Result<Stmt> {
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

    pub(crate) fn delete(&mut self) -> arbitrary::Result<Stmt> {
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

    pub(crate) fn opt_pred(&mut self, scope: &Scope) -> arbitrary::Result<Option<Expr>> {
        if self.u.ratio(1, 4)? {
            return Ok(None);
        }
        Ok(Some(self.expr(scope, Ty::Bool, 2, true, false)?))
    }

    /// A column of `scope` of type `ty` (ints and floats count as numbers).
    pub(crate) fn column(&mut self, scope: &Scope, ty: Ty) -> arbitrary::Result<Option<Expr>> {
        let cols: Vec<&(String, Ty)> = scope.iter().filter(|(_, t)| *t == ty).collect();
        if cols.is_empty() {
            return Ok(None);
        }
        Ok(Some(Expr::Col(self.u.choose(&cols)?.0.clone())))
    }

    /// An expression of type `ty` over `scope`. `subq`: subqueries allowed;
    /// `mul`: a product is already above (products stay shallow).
    pub(crate) fn expr(
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

    pub(crate) fn compare(
        &mut self,
        scope: &Scope,
        d: u32,
        subq: bool,
        mul: bool,
    ) -> arbitrary::Result<Expr> {
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
    pub(crate) fn subquery_pred(&mut self, outer: &Scope) -> arbitrary::Result<Expr> {
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

    pub(crate) fn query(&mut self, depth: u32) -> arbitrary::Result<Query> {
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

    pub(crate) fn order(&mut self, n: usize) -> arbitrary::Result<Option<Order>> {
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

    pub(crate) fn single_column(&mut self, ty: Ty) -> arbitrary::Result<Query> {
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
