//! Subquery expressions (scalar, EXISTS, IN, ANY/ALL), each attached to the outer
//! input: a join of the outer plan with the unnested subquery, and the expression over
//! the joined columns that replaces the subquery.

use super::*;

impl Unnester {
    /// Replaces each correlated subquery expression in `e` (innermost first) by an
    /// expression over columns that joins to `cur` provide.
    pub(super) fn rewrite_expr(
        &mut self,
        cur: LogicalPlan,
        e: Expr,
    ) -> Result<(LogicalPlan, Expr)> {
        let mut cur = Some(cur);
        let e = e
            .transform_up(|e| {
                let Some(plan) = cur.take() else {
                    return plan_err!("subquery rewrite lost its input");
                };
                let (next, out) = match e {
                    Expr::ScalarSubquery(sq) if is_correlated(&sq) => {
                        let (p, v) = self.scalar(plan, sq)?;
                        (p, Transformed::yes(v))
                    }
                    Expr::Exists(Exists { subquery, negated }) => {
                        let (p, v) = self.exists_value(plan, subquery, negated)?;
                        (p, Transformed::yes(v))
                    }
                    Expr::InSubquery(InSubquery {
                        expr,
                        subquery,
                        negated,
                    }) => {
                        let (p, v) = self.in_value(plan, *expr, subquery)?;
                        (p, Transformed::yes(if negated { not(v) } else { v }))
                    }
                    Expr::SetComparison(SetComparison {
                        expr,
                        subquery,
                        op,
                        quantifier,
                    }) => {
                        let (p, v) = self.set_comparison(plan, *expr, subquery, op, quantifier)?;
                        (p, Transformed::yes(v))
                    }
                    other => (plan, Transformed::no(other)),
                };
                cur = Some(next);
                Ok(out)
            })?
            .data;
        match cur {
            Some(plan) => Ok((plan, e)),
            None => plan_err!("subquery rewrite lost its input"),
        }
    }

    // -----------------------------------------------------------------------------------
    // Subquery expressions, each attached to the outer input `cur`.

    /// The domain of `subquery` over `cur`: the outer columns of this level it uses,
    /// distinct. Computed over the node's original input when that has the columns (it
    /// always does unless a subquery reads another's result), not over the joins that
    /// earlier subqueries of the node added.
    pub(super) fn domain(&mut self, cur: &LogicalPlan, subquery: &LogicalPlan) -> Result<Domain> {
        let schema = cur.schema();
        let mut cols = Vec::new();
        for (_, c) in outer_refs(subquery) {
            if schema.has_column(&c) && !cols.iter().any(|(o, _)| o == &c) {
                let name = self.fresh("d");
                cols.push((c, name));
            }
        }
        if cols.is_empty() {
            return Ok(Domain {
                plan: Arc::new(LogicalPlanBuilder::empty(true).build()?),
                cols,
            });
        }
        let source = match &self.base {
            Some(b) if cols.iter().all(|(c, _)| b.schema().has_column(c)) => b.clone(),
            _ => cur.clone(),
        };
        let exprs: Vec<Expr> = cols
            .iter()
            .map(|(c, n)| {
                let t = Expr::Column(c.clone()).get_type(source.schema())?;
                Ok(canonical_zero(Expr::Column(c.clone()), &t)?.alias(n))
            })
            .collect::<Result<_>>()?;
        let plan = LogicalPlanBuilder::from(source)
            .project(exprs)?
            .distinct()?
            .build()?;
        Ok(Domain {
            plan: Arc::new(plan),
            cols,
        })
    }

    /// `cur ⟕ R` (or a semi/anti join) on the domain columns, `R` under a fresh alias.
    pub(super) fn join_back(
        &mut self,
        cur: LogicalPlan,
        dom: &Domain,
        r: LogicalPlan,
        join_type: JoinType,
    ) -> Result<(LogicalPlan, TableReference)> {
        self.join_back_with(cur, dom, r, join_type, |_| vec![])
    }

    /// A scalar subquery: its value per domain row, left-joined; counted when the
    /// subquery may give several rows.
    pub(super) fn scalar(&mut self, cur: LogicalPlan, sq: Subquery) -> Result<(LogicalPlan, Expr)> {
        let dom = self.domain(&cur, &sq.subquery)?;
        let single = sq.subquery.max_rows().is_some_and(|n| n <= 1);
        let value = first_column(&sq.subquery)?;
        let r = self.dependent(&sq.subquery, &dom)?;
        let v = self.fresh("value");
        let mut group: Vec<Expr> = domain_columns(&r, &dom)?;
        let r = if single {
            group.push(Expr::Column(value).alias(&v));
            LogicalPlanBuilder::from(r).project(group)?.build()?
        } else {
            let n = format!("{v}_rows");
            let aggs = vec![
                count(lit(1)).alias(&n),
                first_value(Expr::Column(value), vec![]).alias(&v),
            ];
            LogicalPlanBuilder::from(r)
                .aggregate(group, aggs)?
                .build()?
        };
        let (joined, alias) = self.join_back(cur, &dom, r, JoinType::Left)?;
        let value = Expr::Column(Column::new(Some(alias.clone()), &v));
        let value = if single {
            value
        } else {
            let rows = Expr::Column(Column::new(Some(alias), format!("{v}_rows")));
            subquery_value_udf().call(vec![rows, value])
        };
        Ok((joined, value))
    }

    /// The domain rows for which `subquery` has a row, as a plan of the domain columns.
    pub(super) fn matches(&mut self, subquery: &LogicalPlan, dom: &Domain) -> Result<LogicalPlan> {
        let r = self.dependent(subquery, dom)?;
        let mut cols = domain_columns(&r, dom)?;
        if cols.is_empty() {
            cols.push(lit(true).alias(self.fresh("row")));
        }
        LogicalPlanBuilder::from(r).project(cols)?.build()
    }

    /// `[NOT] EXISTS` alone in a filter: a semi or anti join.
    pub(super) fn exists_join(
        &mut self,
        cur: LogicalPlan,
        sq: Subquery,
        negated: bool,
    ) -> Result<LogicalPlan> {
        let dom = self.domain(&cur, &sq.subquery)?;
        let r = self.matches(&sq.subquery, &dom)?;
        let join_type = if negated {
            JoinType::LeftAnti
        } else {
            JoinType::LeftSemi
        };
        Ok(self.join_back(cur, &dom, r, join_type)?.0)
    }

    /// `[NOT] EXISTS` as a value: a marker left-joined per domain row.
    pub(super) fn exists_value(
        &mut self,
        cur: LogicalPlan,
        sq: Subquery,
        negated: bool,
    ) -> Result<(LogicalPlan, Expr)> {
        let dom = self.domain(&cur, &sq.subquery)?;
        let r = self.dependent(&sq.subquery, &dom)?;
        let m = self.fresh("found");
        let mut cols = domain_columns(&r, &dom)?;
        cols.push(lit(true).alias(&m));
        let r = LogicalPlanBuilder::from(r)
            .project(cols)?
            .distinct()?
            .build()?;
        let (joined, alias) = self.join_back(cur, &dom, r, JoinType::Left)?;
        let found = Expr::Column(Column::new(Some(alias), m));
        Ok((
            joined,
            if negated {
                found.is_null()
            } else {
                found.is_not_null()
            },
        ))
    }

    /// `e` as a column of `cur` (computed by a projection when it is not one), so that
    /// it can be a join key: DataFusion computes expression keys into columns named
    /// after them, and `CAST(t.a AS …)` is named like `t.a`, which the input has.
    pub(super) fn materialize(&mut self, cur: LogicalPlan, e: Expr) -> Result<(LogicalPlan, Expr)> {
        if matches!(e, Expr::Column(_)) {
            return Ok((cur, e));
        }
        let name = self.fresh("key");
        let mut cols: Vec<Expr> = cur
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        cols.push(e.alias(&name));
        let plan = LogicalPlanBuilder::from(cur).project(cols)?.build()?;
        Ok((plan, col(name)))
    }

    /// The subquery's rows per domain row with its one column under a fresh name,
    /// coerced to the type of `x` (the value compared with it).
    pub(super) fn values(
        &mut self,
        cur: &LogicalPlan,
        x: &Expr,
        sq: &Subquery,
        dom: &Domain,
    ) -> Result<(LogicalPlan, String)> {
        let r = self.dependent(&sq.subquery, dom)?;
        let y = Expr::Column(first_column(&sq.subquery)?);
        let x_type = x.get_type(cur.schema())?;
        let y_type = y.get_type(r.schema())?;
        let y = if x_type == y_type { y } else { cast(y, x_type) };
        let name = self.fresh("y");
        let mut cols = domain_columns(&r, dom)?;
        cols.push(y.alias(&name));
        let r = LogicalPlanBuilder::from(r).project(cols)?.build()?;
        Ok((r, name))
    }

    /// `x IN (subquery)` alone in a filter: a semi join on the domain and `x = y` (NULL
    /// `y`s can only make the answer NULL, which a filter drops like FALSE).
    pub(super) fn in_semi_join(
        &mut self,
        cur: LogicalPlan,
        x: Expr,
        sq: Subquery,
    ) -> Result<LogicalPlan> {
        let (cur, x) = self.materialize(cur, x)?;
        let dom = self.domain(&cur, &sq.subquery)?;
        let (r, y) = self.values(&cur, &x, &sq, &dom)?;
        let r = LogicalPlanBuilder::from(r)
            .filter(col(&y).is_not_null())?
            .build()?;
        let (joined, _) = self.join_back_with(cur, &dom, r, JoinType::LeftSemi, |alias| {
            vec![(x, Expr::Column(Column::new(Some(alias.clone()), &y)))]
        })?;
        Ok(joined)
    }

    /// Like [`Self::join_back`], with more key pairs (outer expression, `R` column)
    /// made from the alias.
    pub(super) fn join_back_with(
        &mut self,
        cur: LogicalPlan,
        dom: &Domain,
        r: LogicalPlan,
        join_type: JoinType,
        extra: impl FnOnce(&TableReference) -> Vec<(Expr, Expr)>,
    ) -> Result<(LogicalPlan, TableReference)> {
        let alias = TableReference::bare(self.fresh("sq"));
        let keys = extra(&alias);
        let r = LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(r), alias.clone())?);
        let pairs: Vec<(Expr, Expr)> = dom
            .cols
            .iter()
            .map(|(c, n)| {
                (
                    Expr::Column(c.clone()),
                    Expr::Column(Column::new(Some(alias.clone()), n)),
                )
            })
            .collect();
        let mut on = null_safe(pairs, cur.schema(), r.schema())?;
        on.extend(keys);
        let filter = on.is_empty().then(|| lit(true));
        let join = Join::try_new(
            Arc::new(cur),
            Arc::new(r),
            on,
            filter,
            join_type,
            JoinConstraint::On,
            NullEquality::NullEqualsNothing,
            false,
        )?;
        Ok((LogicalPlan::Join(join), alias))
    }

    /// `x IN (subquery)` as a value, three-valued: TRUE when some `y = x`; otherwise
    /// FALSE when the subquery is empty, NULL when `x` or some `y` is NULL, else FALSE.
    pub(super) fn in_value(
        &mut self,
        cur: LogicalPlan,
        x: Expr,
        sq: Subquery,
    ) -> Result<(LogicalPlan, Expr)> {
        let (cur, x) = self.materialize(cur, x)?;
        let dom = self.domain(&cur, &sq.subquery)?;
        let (r, y) = self.values(&cur, &x, &sq, &dom)?;
        // Per domain row: how many rows, and whether one is NULL.
        let n = self.fresh("rows");
        let nulls = self.fresh("nulls");
        let group = domain_columns(&r, &dom)?;
        let stats = LogicalPlanBuilder::from(r.clone())
            .aggregate(
                group,
                vec![
                    count(lit(1)).alias(&n),
                    bool_or(col(&y).is_null()).alias(&nulls),
                ],
            )?
            .build()?;
        let (cur, stats_alias) = self.join_back(cur, &dom, stats, JoinType::Left)?;
        // Per domain row and non-NULL value: a match marker.
        let m = self.fresh("match");
        let mut cols = domain_columns(&r, &dom)?;
        cols.push(col(&y));
        let matches = LogicalPlanBuilder::from(r)
            .filter(col(&y).is_not_null())?
            .project(cols)?
            .distinct()?
            .build()?;
        let mut cols = domain_columns(&matches, &dom)?;
        cols.push(col(&y));
        cols.push(lit(true).alias(&m));
        let matches = LogicalPlanBuilder::from(matches).project(cols)?.build()?;
        let (cur, match_alias) =
            self.join_back_with(cur, &dom, matches, JoinType::Left, |alias| {
                vec![(
                    x.clone(),
                    Expr::Column(Column::new(Some(alias.clone()), &y)),
                )]
            })?;
        let matched = Expr::Column(Column::new(Some(match_alias), m)).is_not_null();
        // No row joined, or (without a domain) the one row of an empty input.
        let rows = Expr::Column(Column::new(Some(stats_alias.clone()), n));
        let empty = rows.clone().is_null().or(rows.eq(lit(0i64)));
        let some_null = Expr::Column(Column::new(Some(stats_alias), nulls)).is_true();
        let value = when(matched, lit(true))
            .when(empty, lit(false))
            .when(x.is_null().or(some_null), lit(ScalarValue::Boolean(None)))
            .otherwise(lit(false))?;
        Ok((cur, value))
    }

    /// `x op ANY|ALL (subquery)`. `= ANY` is `IN` and `<> ALL` is `NOT IN`. The others
    /// need only the subquery's row count, its non-NULL count, minimum and maximum per
    /// domain row (`x > ANY` holds when `x > min`; `x > ALL` fails when `x <= max`), one
    /// aggregation instead of a comparison per pair, with SQL's three values: ANY is
    /// FALSE over an empty set, NULL when `x` is NULL or no comparison holds but one is
    /// unknown (a NULL in the set), and ALL the mirror image.
    pub(super) fn set_comparison(
        &mut self,
        cur: LogicalPlan,
        x: Expr,
        sq: Subquery,
        op: Operator,
        quantifier: SetQuantifier,
    ) -> Result<(LogicalPlan, Expr)> {
        match (op, quantifier) {
            (Operator::Eq, SetQuantifier::Any) => return self.in_value(cur, x, sq),
            (Operator::NotEq, SetQuantifier::All) => {
                let (p, v) = self.in_value(cur, x, sq)?;
                return Ok((p, not(v)));
            }
            (
                Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq
                | Operator::NotEq
                | Operator::Eq,
                _,
            ) => {}
            _ => return plan_err!("{op} {quantifier} (subquery) is not supported"),
        }
        let (cur, x) = self.materialize(cur, x)?;
        let dom = self.domain(&cur, &sq.subquery)?;
        let (r, y) = self.values(&cur, &x, &sq, &dom)?;
        let (n, nn, lo, hi) = (
            self.fresh("rows"),
            self.fresh("values"),
            self.fresh("min"),
            self.fresh("max"),
        );
        let group = domain_columns(&r, &dom)?;
        let stats = LogicalPlanBuilder::from(r)
            .aggregate(
                group,
                vec![
                    count(lit(1)).alias(&n),
                    count(col(&y)).alias(&nn),
                    min(col(&y)).alias(&lo),
                    max(col(&y)).alias(&hi),
                ],
            )?
            .build()?;
        let (joined, alias) = self.join_back(cur, &dom, stats, JoinType::Left)?;
        let c = |name: &str| Expr::Column(Column::new(Some(alias.clone()), name));
        let empty = c(&n).is_null().or(c(&n).eq(lit(0i64)));
        let unknown = c(&n).gt(c(&nn));
        let null = || lit(ScalarValue::Boolean(None));
        let x = || x.clone();
        let value = match quantifier {
            SetQuantifier::Any => {
                let holds = match op {
                    Operator::Lt => x().lt(c(&hi)),
                    Operator::LtEq => x().lt_eq(c(&hi)),
                    Operator::Gt => x().gt(c(&lo)),
                    Operator::GtEq => x().gt_eq(c(&lo)),
                    // `<> ANY`: some value differs from x.
                    _ => x().not_eq(c(&lo)).or(x().not_eq(c(&hi))),
                };
                when(empty, lit(false))
                    .when(x().is_null(), null())
                    .when(holds.is_true(), lit(true))
                    .when(unknown, null())
                    .otherwise(lit(false))?
            }
            SetQuantifier::All => {
                let holds = match op {
                    Operator::Lt => x().lt(c(&lo)),
                    Operator::LtEq => x().lt_eq(c(&lo)),
                    Operator::Gt => x().gt(c(&hi)),
                    Operator::GtEq => x().gt_eq(c(&hi)),
                    // `= ALL`: every value is x.
                    _ => x().eq(c(&lo)).and(x().eq(c(&hi))),
                };
                when(empty, lit(true))
                    .when(x().is_null(), null())
                    .when(holds.is_false(), lit(false))
                    .when(unknown, null())
                    .otherwise(lit(true))?
            }
        };
        Ok((joined, value))
    }
}
