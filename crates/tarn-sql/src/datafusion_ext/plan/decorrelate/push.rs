//! The dependent join `D ⋈ plan`, pushed down through the subquery's operators until
//! the domain is no longer used (see the module docs of `decorrelate`).

use super::*;

impl Unnester {
    /// `D ⋈ plan` if `plan` uses the domain's columns, else `D × plan`.
    pub(super) fn dependent(&mut self, plan: &LogicalPlan, dom: &Domain) -> Result<LogicalPlan> {
        if dom.cols.is_empty() {
            // Only outer columns of enclosing levels: nothing to do at this one.
            return Ok(plan.clone());
        }
        if uses(plan, dom) {
            self.push(plan, dom)
        } else {
            cross(dom, plan)
        }
    }

    /// `D ⋈ plan` for a plan that uses the domain: `plan`'s columns and the domain's
    /// (somewhere in the schema, found by name), one result per domain row.
    #[recursive::recursive]
    pub(super) fn push(&mut self, plan: &LogicalPlan, dom: &Domain) -> Result<LogicalPlan> {
        match plan {
            LogicalPlan::Filter(f) => {
                if !uses(&f.input, dom)
                    && let Some(p) = self.eliminated(f, dom)?
                {
                    return Ok(p);
                }
                let input = self.dependent(&f.input, dom)?;
                let predicate = substitute(f.predicate.clone(), dom, input.schema())?;
                Ok(LogicalPlan::Filter(Filter::try_new(
                    predicate,
                    Arc::new(input),
                )?))
            }
            LogicalPlan::Projection(p) => {
                let input = self.dependent(&p.input, dom)?;
                let preserver = NamePreserver::new_for_projection();
                let mut exprs = domain_columns(&input, dom)?;
                for e in &p.expr {
                    let saved = preserver.save(e);
                    exprs.push(saved.restore(substitute(e.clone(), dom, input.schema())?));
                }
                Ok(LogicalPlan::Projection(Projection::try_new(
                    exprs,
                    Arc::new(input),
                )?))
            }
            LogicalPlan::Aggregate(a) => self.aggregate(a, dom),
            LogicalPlan::SubqueryAlias(s) => {
                let input = self.push(&s.input, dom)?;
                Ok(LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(
                    Arc::new(input),
                    s.alias.clone(),
                )?))
            }
            LogicalPlan::Sort(s) => {
                let input = self.dependent(&s.input, dom)?;
                let exprs = substitute_sorts(&s.expr, dom, input.schema())?;
                match s.fetch {
                    None => Ok(LogicalPlan::Sort(Sort {
                        expr: exprs,
                        input: Arc::new(input),
                        fetch: None,
                    })),
                    Some(n) => self.top_n(input, dom, exprs, 0, Some(n), plan.schema()),
                }
            }
            LogicalPlan::Limit(l) => self.limit(l, dom, plan.schema()),
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let input = self.dependent(input, dom)?;
                Ok(LogicalPlan::Distinct(Distinct::All(Arc::new(input))))
            }
            LogicalPlan::Distinct(Distinct::On(d)) => {
                let input = self.dependent(&d.input, dom)?;
                let keys = domain_columns(&input, dom)?;
                let schema = input.schema().clone();
                let mut on = keys.clone();
                for e in &d.on_expr {
                    on.push(substitute(e.clone(), dom, &schema)?);
                }
                let preserver = NamePreserver::new_for_projection();
                let mut select = keys.clone();
                for e in &d.select_expr {
                    let saved = preserver.save(e);
                    select.push(saved.restore(substitute(e.clone(), dom, &schema)?));
                }
                let sort = match &d.sort_expr {
                    None => None,
                    Some(s) => {
                        let mut out: Vec<SortExpr> =
                            keys.iter().map(|k| k.clone().sort(true, true)).collect();
                        out.extend(substitute_sorts(s, dom, &schema)?);
                        Some(out)
                    }
                };
                Ok(LogicalPlan::Distinct(Distinct::On(DistinctOn::try_new(
                    on,
                    select,
                    sort,
                    Arc::new(input),
                )?)))
            }
            LogicalPlan::Window(w) => {
                let input = self.dependent(&w.input, dom)?;
                let keys = domain_columns(&input, dom)?;
                let schema = input.schema().clone();
                let preserver = NamePreserver::new_for_projection();
                let mut exprs = Vec::with_capacity(w.window_expr.len());
                for e in &w.window_expr {
                    let saved = preserver.save(e);
                    let e = substitute(e.clone(), dom, &schema)?
                        .transform_up(|e| match e {
                            Expr::WindowFunction(mut wf) => {
                                let mut partition = keys.clone();
                                partition.append(&mut wf.params.partition_by);
                                wf.params.partition_by = partition;
                                Ok(Transformed::yes(Expr::WindowFunction(wf)))
                            }
                            other => Ok(Transformed::no(other)),
                        })?
                        .data;
                    exprs.push(saved.restore(e));
                }
                Ok(LogicalPlan::Window(Window::try_new(
                    exprs,
                    Arc::new(input),
                )?))
            }
            LogicalPlan::Join(j) => self.join(j, dom),
            LogicalPlan::Union(u) => {
                let mut inputs = Vec::with_capacity(u.inputs.len());
                for i in &u.inputs {
                    let p = self.dependent(i, dom)?;
                    // Every branch: the domain first, then the branch's own columns.
                    let mut cols = domain_columns(&p, dom)?;
                    cols.extend(i.schema().columns().into_iter().map(Expr::Column));
                    inputs.push(Arc::new(
                        LogicalPlanBuilder::from(p).project(cols)?.build()?,
                    ));
                }
                Ok(LogicalPlan::Union(Union::try_new_with_loose_types(inputs)?))
            }
            LogicalPlan::Unnest(u) => {
                let input = self.dependent(&u.input, dom)?;
                LogicalPlanBuilder::from(input)
                    .unnest_columns_with_options(u.exec_columns.clone(), u.options.clone())?
                    .build()
            }
            LogicalPlan::Values(v) => {
                // Rows that use outer columns: a union of one-row projections.
                let mut rows = Vec::with_capacity(v.values.len());
                for row in &v.values {
                    let exprs = row
                        .iter()
                        .zip(v.schema.fields())
                        .map(|(e, f)| e.clone().alias(f.name()));
                    rows.push(Arc::new(
                        LogicalPlanBuilder::empty(true).project(exprs)?.build()?,
                    ));
                }
                let plan = if rows.len() == 1 {
                    Arc::unwrap_or_clone(rows.remove(0))
                } else {
                    LogicalPlan::Union(Union::try_new_with_loose_types(rows)?)
                };
                self.push(&plan, dom)
            }
            LogicalPlan::Subquery(s) => self.push(&s.subquery, dom),
            other => plan_err!(
                "outer references are not supported in {} inside a subquery",
                other.display()
            ),
        }
    }

    /// A filter over a part that does not use the domain, whose conjuncts equate every
    /// domain column to an expression of that part (`x.k = t1.k`): those expressions
    /// stand in for the domain, and no domain is computed.
    pub(super) fn eliminated(&mut self, f: &Filter, dom: &Domain) -> Result<Option<LogicalPlan>> {
        let schema = f.input.schema();
        let mut bound: Vec<(String, Expr)> = Vec::new();
        for c in split_conjunction_owned(f.predicate.clone()) {
            let Expr::BinaryExpr(b) = c else { continue };
            if b.op != Operator::Eq {
                continue;
            }
            for (outer, inner) in [(&*b.left, &*b.right), (&*b.right, &*b.left)] {
                let Expr::OuterReferenceColumn(field, oc) = outer else {
                    continue;
                };
                let Some(name) = dom.name_of(oc) else {
                    continue;
                };
                if bound.iter().any(|(n, _)| n == name)
                    || inner.contains_outer()
                    || inner.is_volatile()
                    || inner.get_type(schema)? != *field.data_type()
                {
                    continue;
                }
                bound.push((name.to_string(), inner.clone()));
            }
        }
        if bound.len() != dom.cols.len() {
            return Ok(None);
        }
        let predicate = f.predicate.clone().transform_up(|e| match e {
            Expr::OuterReferenceColumn(_, ref c) => match dom.name_of(c) {
                Some(name) => {
                    let bound_expr = bound
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, e)| e.clone());
                    Ok(match bound_expr {
                        Some(b) => Transformed::yes(b),
                        None => Transformed::no(e),
                    })
                }
                None => Ok(Transformed::no(e)),
            },
            other => Ok(Transformed::no(other)),
        })?;
        let filtered = LogicalPlan::Filter(Filter::try_new(predicate.data, Arc::clone(&f.input))?);
        let mut cols: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
        for (_, name) in &dom.cols {
            let e = bound
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, e)| e.clone());
            match e {
                Some(e) => {
                    let t = e.get_type(schema)?;
                    cols.push(canonical_zero(e, &t)?.alias(name));
                }
                None => return Ok(None),
            }
        }
        Ok(Some(
            LogicalPlanBuilder::from(filtered).project(cols)?.build()?,
        ))
    }

    /// `D ⋈ Aggregate`: grouped by the domain too. Without GROUP BY the aggregate has
    /// one row even for an empty input, so its input is left-joined to the domain and
    /// every aggregate counts only the rows that joined.
    pub(super) fn aggregate(&mut self, a: &Aggregate, dom: &Domain) -> Result<LogicalPlan> {
        let preserver = NamePreserver::new_for_projection();
        let grouped = !a.group_expr.is_empty();
        if grouped {
            if a.group_expr
                .iter()
                .any(|g| matches!(g, Expr::GroupingSet(_)))
            {
                return plan_err!(
                    "GROUPING SETS, CUBE and ROLLUP are not supported in a correlated subquery"
                );
            }
            let input = self.dependent(&a.input, dom)?;
            let schema = input.schema().clone();
            let mut group = domain_columns(&input, dom)?;
            for g in &a.group_expr {
                let saved = preserver.save(g);
                group.push(saved.restore(substitute(g.clone(), dom, &schema)?));
            }
            let mut aggs = Vec::with_capacity(a.aggr_expr.len());
            for e in &a.aggr_expr {
                let saved = preserver.save(e);
                aggs.push(saved.restore(substitute(e.clone(), dom, &schema)?));
            }
            return Ok(LogicalPlan::Aggregate(Aggregate::try_new(
                Arc::new(input),
                group,
                aggs,
            )?));
        }
        if let LogicalPlan::Filter(f) = a.input.as_ref()
            && let Some(p) = self.band_aggregate(a, f, dom)?
        {
            return Ok(p);
        }
        // D ⟕ input: the condition folds in when the input is a filter over a part
        // free of the domain (the common shape); otherwise the input is pushed down on
        // a renamed copy of the domain and joined on it.
        let marker = self.fresh("joined");
        let (input, condition) = match a.input.as_ref() {
            LogicalPlan::Filter(f) if !uses(&f.input, dom) && !has_subquery(&f.predicate) => (
                Arc::unwrap_or_clone(Arc::clone(&f.input)),
                Condition::Outer(f.predicate.clone()),
            ),
            other if !uses(other, dom) => (other.clone(), Condition::Outer(lit(true))),
            other => {
                let pushed = self.push(other, dom)?;
                let names: HashSet<&str> = dom.names().collect();
                let mut cols = Vec::new();
                let mut keys = Vec::new();
                for (q, f) in pushed.schema().iter() {
                    let c = Expr::Column(Column::new(q.cloned(), f.name()));
                    if names.contains(f.name().as_str()) {
                        let renamed = format!("{}_inner", f.name());
                        cols.push(c.alias(&renamed));
                        keys.push((col(f.name()), col(renamed)));
                    } else {
                        cols.push(c);
                    }
                }
                let renamed = LogicalPlanBuilder::from(pushed).project(cols)?.build()?;
                (renamed, Condition::Keys(keys))
            }
        };
        let mut cols: Vec<Expr> = input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        cols.push(lit(true).alias(&marker));
        let right = LogicalPlanBuilder::from(input).project(cols)?.build()?;
        let left = Arc::clone(&dom.plan);
        let (on, condition) = match condition {
            Condition::Outer(c) => {
                let schema = DFSchema::new_with_metadata(
                    left.schema()
                        .iter()
                        .chain(right.schema().iter())
                        .map(|(q, f)| (q.cloned(), Arc::clone(f)))
                        .collect(),
                    Default::default(),
                )?;
                (vec![], Some(substitute(c, dom, &schema)?))
            }
            Condition::Keys(keys) => (null_safe(keys, left.schema(), right.schema())?, None),
        };
        let joined = LogicalPlan::Join(Join::try_new(
            left,
            Arc::new(right),
            on,
            condition,
            JoinType::Left,
            JoinConstraint::On,
            NullEquality::NullEqualsNothing,
            false,
        )?);
        let schema = joined.schema().clone();
        let group = domain_columns(&joined, dom)?;
        let only_joined = col(&marker).is_not_null();
        let mut aggs = Vec::with_capacity(a.aggr_expr.len());
        for e in &a.aggr_expr {
            let saved = preserver.save(e);
            let e = substitute(e.clone(), dom, &schema)?
                .transform_up(|e| match e {
                    Expr::AggregateFunction(AggregateFunction { func, mut params }) => {
                        params.filter = Some(Box::new(match params.filter.take() {
                            Some(f) => only_joined.clone().and(*f),
                            None => only_joined.clone(),
                        }));
                        Ok(Transformed::yes(Expr::AggregateFunction(
                            AggregateFunction { func, params },
                        )))
                    }
                    other => Ok(Transformed::no(other)),
                })?
                .data;
            aggs.push(saved.restore(e));
        }
        Ok(LogicalPlan::Aggregate(Aggregate::try_new(
            Arc::new(joined),
            group,
            aggs,
        )?))
    }

    /// `count`, `sum`, `min` and `max` over the rows on one side of the domain's value
    /// (`SELECT count(*) FROM x WHERE x.b < t.b`), without a join: the domain's values
    /// and the rows' values sorted together in one pass, each aggregate running over it
    /// (a window up to the current row), read at the domain's rows. A join would
    /// produce and aggregate half of |D| × |X| pairs. At equal values the domain row sorts
    /// before the rows for `<`/`>` and after them for `<=`/`>=`; NULL domain values sort
    /// first and see no rows; rows with a NULL value never count.
    ///
    /// Applies to a global aggregate of those functions (no DISTINCT, FILTER or ORDER
    /// BY) over a filter whose one correlated conjunct compares an expression of the
    /// rows with an expression of the one domain column.
    pub(super) fn band_aggregate(
        &mut self,
        a: &Aggregate,
        f: &Filter,
        dom: &Domain,
    ) -> Result<Option<LogicalPlan>> {
        use datafusion::logical_expr::{
            WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
            expr::WindowFunction,
        };
        if dom.cols.len() != 1
            || uses(&f.input, dom)
            || !outer_refs(&f.input).is_empty()
            || has_subquery(&f.predicate)
        {
            return Ok(None);
        }
        let (outer_col, dname) = (&dom.cols[0].0, dom.cols[0].1.as_str());
        // The one correlated comparison, as (rows' value, op, domain's value).
        let mut band = None;
        let mut rest = Vec::new();
        for c in split_conjunction_owned(f.predicate.clone()) {
            if !c.contains_outer() {
                rest.push(c);
                continue;
            }
            let Expr::BinaryExpr(b) = &c else {
                return Ok(None);
            };
            let op = match b.op {
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => b.op,
                _ => return Ok(None),
            };
            let outer_only = |e: &Expr| {
                e.contains_outer()
                    && !e
                        .exists(|e| Ok(matches!(e, Expr::Column(_))))
                        .unwrap_or(true)
                    && !e.is_volatile()
            };
            let free = |e: &Expr| !e.contains_outer() && !e.is_volatile();
            let found = if free(&b.left) && outer_only(&b.right) {
                ((*b.left).clone(), op, (*b.right).clone())
            } else if free(&b.right) && outer_only(&b.left) {
                let flipped = match op {
                    Operator::Lt => Operator::Gt,
                    Operator::LtEq => Operator::GtEq,
                    Operator::Gt => Operator::Lt,
                    _ => Operator::LtEq,
                };
                ((*b.right).clone(), flipped, (*b.left).clone())
            } else {
                return Ok(None);
            };
            if band.replace(found).is_some() {
                return Ok(None);
            }
        }
        let Some((row_value, op, domain_value)) = band else {
            return Ok(None);
        };
        // Every outer reference in the domain's value is the domain column.
        let only_ours = domain_value
            .exists(|e| Ok(matches!(e, Expr::OuterReferenceColumn(_, c) if c != outer_col)))
            .map(|other| !other)
            .unwrap_or(false);
        if !only_ours {
            return Ok(None);
        }
        // The aggregates: (function, argument or None for count(*)), output type, name.
        struct Running {
            func: Arc<datafusion::logical_expr::AggregateUDF>,
            arg: Option<Expr>,
            count: bool,
            /// An integer sum, run in 128 bits: a prefix no domain row reads may
            /// overflow int8 where the sums read do not.
            exact: bool,
        }
        let preserver = NamePreserver::new_for_projection();
        let mut aggs = Vec::with_capacity(a.aggr_expr.len());
        for e in &a.aggr_expr {
            let inner = match e {
                Expr::Alias(al) => al.expr.as_ref(),
                other => other,
            };
            let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
                return Ok(None);
            };
            if params.distinct
                || params.filter.is_some()
                || !params.order_by.is_empty()
                || params.args.len() != 1
                || params.args[0].contains_outer()
            {
                return Ok(None);
            }
            let arg = params.args[0].clone();
            let running = match func.name() {
                "count" => Running {
                    func: datafusion::functions_aggregate::sum::sum_udaf(),
                    arg: (!matches!(arg, Expr::Literal(ref v, _) if !v.is_null())).then_some(arg),
                    count: true,
                    exact: false,
                },
                "sum" | "min" | "max" => Running {
                    func: Arc::clone(func),
                    exact: func.name() == "sum" && e.get_type(a.input.schema())? == DataType::Int64,
                    arg: Some(arg),
                    count: false,
                },
                _ => return Ok(None),
            };
            let t = e.get_type(a.input.schema())?;
            aggs.push((running, t, preserver.save(e)));
        }
        // Both sides: (value, kind, each aggregate's input, the domain column).
        let value_type = row_value.get_type(f.input.schema())?;
        let domain_schema = dom.plan.schema();
        let domain_value = substitute(domain_value, dom, domain_schema)?;
        let domain_value = if domain_value.get_type(domain_schema)? == value_type {
            domain_value
        } else {
            cast(domain_value, value_type.clone())
        };
        let (v, kind) = (self.fresh("value"), self.fresh("kind"));
        let d_type = col(dname).get_type(domain_schema)?;
        let inputs: Vec<String> = aggs.iter().map(|_| self.fresh("input")).collect();
        let mut row_cols = vec![
            canonical_zero(row_value.clone(), &value_type)?.alias(&v),
            lit(1i64).alias(&kind),
            lit(ScalarValue::try_from(&d_type)?).alias(dname),
        ];
        let mut domain_cols = vec![
            canonical_zero(domain_value, &value_type)?.alias(&v),
            lit(0i64).alias(&kind),
            col(dname),
        ];
        for ((r, _, _), name) in aggs.iter().zip(&inputs) {
            let input = match (&r.arg, r.count) {
                (None, true) => lit(1i64),
                (Some(arg), true) => {
                    when(arg.clone().is_not_null(), lit(1i64)).otherwise(lit(0i64))?
                }
                (Some(arg), false) if r.exact => cast(arg.clone(), DataType::Decimal128(38, 0)),
                (Some(arg), false) => arg.clone(),
                (None, false) => return Ok(None),
            };
            let t = input.get_type(f.input.schema())?;
            row_cols.push(input.alias(name));
            domain_cols.push(
                if r.count {
                    lit(0i64)
                } else {
                    lit(ScalarValue::try_from(&t)?)
                }
                .alias(name),
            );
        }
        let mut keep = vec![row_value.is_not_null()];
        keep.extend(rest);
        let rows = LogicalPlanBuilder::from(f.input.as_ref().clone())
            .filter(conjunction(keep).unwrap_or_else(|| lit(true)))?
            .project(row_cols)?
            .build()?;
        let domain = LogicalPlanBuilder::from(dom.plan.as_ref().clone())
            .project(domain_cols)?
            .build()?;
        let both = LogicalPlan::Union(Union::try_new_with_loose_types(vec![
            Arc::new(rows),
            Arc::new(domain),
        ])?);
        let ascending = matches!(op, Operator::Lt | Operator::LtEq);
        // Strict comparisons: the domain row (kind 0) first among equal values.
        let domain_first = matches!(op, Operator::Lt | Operator::Gt);
        let order = vec![
            col(&v).sort(ascending, true),
            col(&kind).sort(domain_first, true),
        ];
        let frame = WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::Preceding(ScalarValue::UInt64(None)),
            WindowFrameBound::CurrentRow,
        );
        let outputs: Vec<String> = aggs.iter().map(|_| self.fresh("running")).collect();
        let mut windows = Vec::with_capacity(aggs.len());
        for (((r, _, _), input), out) in aggs.iter().zip(&inputs).zip(&outputs) {
            let mut w = WindowFunction::new(
                WindowFunctionDefinition::AggregateUDF(Arc::clone(&r.func)),
                vec![col(input)],
            );
            w.params.order_by = order.clone();
            w.params.window_frame = frame.clone();
            windows.push(Expr::from(w).alias(out));
        }
        let exact: Vec<bool> = aggs.iter().map(|(r, _, _)| r.exact).collect();
        let mut cols = vec![col(dname)];
        for ((_, t, saved), out) in aggs.into_iter().zip(&outputs) {
            let value = if t == DataType::Int64 && exact[cols.len() - 1] {
                int8_udf().call(vec![col(out)])
            } else {
                cast(col(out), t)
            };
            cols.push(saved.restore(value));
        }
        Ok(Some(
            LogicalPlanBuilder::from(both)
                .window(windows)?
                .filter(col(&kind).eq(lit(0i64)))?
                .project(cols)?
                .build()?,
        ))
    }

    /// `D ⋈ Limit`: rows numbered per domain row (in the order of a sort right below).
    pub(super) fn limit(
        &mut self,
        l: &Limit,
        dom: &Domain,
        schema: &DFSchema,
    ) -> Result<LogicalPlan> {
        // LIMIT over a projection over the sort (`SELECT x … ORDER BY y LIMIT 1`): the
        // limit goes below the projection first, next to the sort that orders it.
        if let LogicalPlan::Projection(p) = l.input.as_ref() {
            let limited = LogicalPlan::Limit(Limit {
                skip: l.skip.clone(),
                fetch: l.fetch.clone(),
                input: Arc::clone(&p.input),
            });
            let swapped =
                LogicalPlan::Projection(Projection::try_new(p.expr.clone(), Arc::new(limited))?);
            return self.push(&swapped, dom);
        }
        let skip = match l.get_skip_type()? {
            SkipType::Literal(n) => n,
            SkipType::UnsupportedExpr => {
                return plan_err!("OFFSET must be a constant in a correlated subquery");
            }
        };
        let fetch = match l.get_fetch_type()? {
            FetchType::Literal(n) => n,
            FetchType::UnsupportedExpr => {
                return plan_err!("LIMIT must be a constant in a correlated subquery");
            }
        };
        let (input, order) = match l.input.as_ref() {
            LogicalPlan::Sort(s) if s.fetch.is_none() => {
                let input = self.dependent(&s.input, dom)?;
                let order = substitute_sorts(&s.expr, dom, input.schema())?;
                (input, order)
            }
            other => (self.dependent(other, dom)?, vec![]),
        };
        self.top_n(input, dom, order, skip, fetch, schema)
    }

    /// Rows `skip + 1 ..= skip + fetch` of each domain row's rows in `order`.
    pub(super) fn top_n(
        &mut self,
        input: LogicalPlan,
        dom: &Domain,
        order: Vec<SortExpr>,
        skip: usize,
        fetch: Option<usize>,
        schema: &DFSchema,
    ) -> Result<LogicalPlan> {
        let rn = self.fresh("row");
        let keys = domain_columns(&input, dom)?;
        let number = row_number()
            .partition_by(keys)
            .order_by(order)
            .build()?
            .alias(&rn);
        let numbered = LogicalPlanBuilder::from(input)
            .window(vec![number])?
            .build()?;
        let position = cast(col(&rn), DataType::Int64);
        let mut keep = position.clone().gt(lit(skip as i64));
        if let Some(n) = fetch {
            keep = keep.and(position.lt_eq(lit((skip + n) as i64)));
        }
        let filtered = LogicalPlanBuilder::from(numbered).filter(keep)?.build()?;
        // The domain and the limited plan's own columns, without the row number.
        let mut cols = domain_columns(&filtered, dom)?;
        cols.extend(schema.columns().into_iter().map(Expr::Column));
        LogicalPlanBuilder::from(filtered).project(cols)?.build()
    }

    /// `D ⋈ Join`: into the side(s) that use the domain. An inner join whose condition
    /// uses it becomes a filter over the join. Outer and semi joins whose inner side or
    /// condition uses it get the domain on both sides, matched on it.
    pub(super) fn join(&mut self, j: &Join, dom: &Domain) -> Result<LogicalPlan> {
        if j.null_aware {
            return plan_err!("outer references are not supported in a null-aware anti join");
        }
        let cond_uses =
            j.on.iter()
                .any(|(l, r)| uses_expr(l, dom) || uses_expr(r, dom))
                || j.filter.as_ref().is_some_and(|f| uses_expr(f, dom));
        let (lu, ru) = (uses(&j.left, dom), uses(&j.right, dom));
        use JoinType::*;
        if j.join_type == Inner && cond_uses {
            // Filter(on AND filter) over the cross join, which the filter case pushes.
            let mut preds: Vec<Expr> =
                j.on.iter()
                    .map(|(l, r)| match j.null_equality {
                        NullEquality::NullEqualsNull => not_distinct(l.clone(), r.clone()),
                        NullEquality::NullEqualsNothing => l.clone().eq(r.clone()),
                    })
                    .collect();
            preds.extend(j.filter.clone());
            let cross = LogicalPlan::Join(Join::try_new(
                Arc::clone(&j.left),
                Arc::clone(&j.right),
                vec![],
                None,
                Inner,
                JoinConstraint::On,
                NullEquality::NullEqualsNothing,
                false,
            )?);
            let f = match conjunction(preds) {
                Some(p) => LogicalPlan::Filter(Filter::try_new(p, Arc::new(cross))?),
                None => cross,
            };
            return self.push(&f, dom);
        }
        // Only one side needs the domain when the other side's rows do not depend on
        // it: inner joins; the preserved side of an outer join; a semi/anti join's
        // probe side.
        let one_side = !cond_uses
            && match j.join_type {
                Inner => !(lu && ru),
                Left | LeftSemi | LeftAnti | LeftMark => !ru,
                Right | RightSemi | RightAnti | RightMark => !lu,
                Full => false,
            };
        if one_side {
            let (left, right) = if lu {
                (Arc::new(self.push(&j.left, dom)?), Arc::clone(&j.right))
            } else {
                (Arc::clone(&j.left), Arc::new(self.push(&j.right, dom)?))
            };
            return Ok(LogicalPlan::Join(Join::try_new(
                left,
                right,
                j.on.clone(),
                j.filter.clone(),
                j.join_type,
                j.join_constraint,
                j.null_equality,
                false,
            )?));
        }
        // Both sides carry the domain (the right one renamed), matched on it; the
        // condition's outer references read the left side's.
        let left = self.dependent(&j.left, dom)?;
        let right = self.dependent(&j.right, dom)?;
        let names: HashSet<&str> = dom.names().collect();
        let mut cols = Vec::new();
        let mut pairs = Vec::new();
        for (q, f) in right.schema().iter() {
            if names.contains(f.name().as_str()) {
                let renamed = format!("{}_right", f.name());
                cols.push(Expr::Column(Column::new(q.cloned(), f.name())).alias(&renamed));
                pairs.push((domain_column(&left, f.name())?, col(&renamed)));
            } else {
                cols.push(Expr::Column(Column::new(q.cloned(), f.name())));
            }
        }
        let right = LogicalPlanBuilder::from(right).project(cols)?.build()?;
        let schema = DFSchema::new_with_metadata(
            left.schema()
                .iter()
                .chain(right.schema().iter())
                .map(|(q, f)| (q.cloned(), Arc::clone(f)))
                .collect(),
            Default::default(),
        )?;
        let mut on = Vec::new();
        let mut filter: Vec<Expr> = Vec::new();
        for (l, r) in &j.on {
            on.push((
                substitute(l.clone(), dom, &schema)?,
                substitute(r.clone(), dom, &schema)?,
            ));
        }
        let null_equality = j.null_equality;
        if null_equality == NullEquality::NullEqualsNothing || on.is_empty() {
            on.extend(null_safe(pairs, left.schema(), right.schema())?);
        } else {
            filter.extend(pairs.into_iter().map(|(l, r)| not_distinct(l, r)));
        }
        if let Some(f) = &j.filter {
            filter.push(substitute(f.clone(), dom, &schema)?);
        }
        let joined = LogicalPlan::Join(Join::try_new(
            Arc::new(left),
            Arc::new(right),
            on,
            conjunction(filter),
            j.join_type,
            JoinConstraint::On,
            null_equality,
            false,
        )?);
        // One copy of the domain, from the side every output row has: the left one of
        // inner and left joins, the right one of right joins (an unmatched right row has
        // no left copy), whichever matched of a full join.
        let out_schema = joined.schema().clone();
        let mut cols = Vec::new();
        for (q, f) in out_schema.iter() {
            let name = f.name().as_str();
            let c = Expr::Column(Column::new(q.cloned(), name));
            if let Some(base) = name.strip_suffix("_right")
                && names.contains(base)
            {
                if matches!(j.join_type, RightSemi | RightAnti | RightMark) {
                    cols.push(c.alias(base));
                }
                continue;
            }
            if names.contains(name) {
                let right_copy = || col(format!("{name}_right"));
                match j.join_type {
                    Full => cols.push(coalesce(vec![c, right_copy()]).alias(name)),
                    Right => cols.push(right_copy().alias(name)),
                    _ => cols.push(c),
                }
            } else {
                cols.push(c);
            }
        }
        LogicalPlanBuilder::from(joined).project(cols)?.build()
    }
}
