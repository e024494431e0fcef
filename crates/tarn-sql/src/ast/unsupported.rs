//! What Tarn refuses in a statement, because planning it would answer something other
//! than what it asks: `TABLESAMPLE` (DataFusion ignores it and returns every row), an
//! aggregate `FILTER (WHERE …)` whose condition is plainly no boolean (`FILTER (WHERE
//! 1)`, which PostgreSQL refuses), and `nth_value(x, n)` with a literal `n` below 1
//! (which PostgreSQL refuses; DataFusion answered NULL). Checked once parsed; what a
//! bound value can make wrong (`FILTER (WHERE $1)` with 1) is checked again in the
//! binding's own walk ([`refused_once_bound`]), so that a bound statement is not walked
//! once more. A call of `engine_param_text`, which only the binding writes, is refused
//! where a statement wrote it itself.
//!
//! And what DataFusion cannot plan in bounded time: a CASE inside the WHEN condition
//! of a CASE inside the WHEN condition of … more than [`MAX_CASE_IN_WHEN`] deep, and
//! scalar subqueries nested more than [`MAX_SUBQUERY_IN_EXPRESSION`] deep.
//! DataFusion works out whether a CASE can be NULL by asking the same of every part of
//! each condition, again for each level, so the cost multiplies per level (16 levels of
//! `CASE WHEN (…) > 0 THEN a END` planned for minutes in one step the timeout cannot
//! reach).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, TableFactor, Value, Visit, Visitor,
};

use crate::ast::ident::is_call_to;
use crate::datafusion_ext::functions::param_text;
use crate::error::{Error, Result};

/// A 400 for the first such construct in `stmt`, as parsed.
pub(crate) fn check(stmt: &ast::Statement) -> Result<()> {
    let mut refused = Refused {
        conditions: std::collections::HashSet::new(),
        in_conditions: 0,
        in_subqueries: 0,
        cte_bodies: std::collections::HashSet::new(),
        cte_levels: 0,
        deepest: 0,
        entered: Vec::new(),
    };
    match stmt.visit(&mut refused) {
        ControlFlow::Break(message) => Err(Error::BadRequest(message)),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// What [`check`] refuses in `e` that a bound parameter's value can bring (`$1` is a
/// literal once bound): a FILTER condition that is no boolean, `nth_value`'s position
/// below 1, and an expression twice in one grouping set. Called by the binding for each
/// expression once its children are bound.
pub(crate) fn refused_once_bound(e: &Expr) -> Option<String> {
    if let Some(message) = grouping_set_twice(e) {
        return Some(message);
    }
    let Expr::Function(f) = e else {
        return None;
    };
    filter_not_boolean(f).or_else(|| nth_value_below_one(f))
}

/// The most CASE expressions one expression may sit inside the WHEN conditions of
/// (see the module's documentation).
pub(crate) const MAX_CASE_IN_WHEN: usize = 8;

/// The most scalar subqueries one expression may sit inside. DataFusion's planning of
/// a scalar subquery in a scalar subquery in … costs about twice as much per level (16
/// levels of `(SELECT (SELECT … 1))` planned for 0.66 s, 20 for 5 s, 26 for minutes in
/// one step no timeout could stop), and 118 levels overflowed its stack and aborted
/// the process. Subqueries in FROM, EXISTS and IN do not count: they nest cheaply.
pub(crate) const MAX_SUBQUERY_IN_EXPRESSION: usize = 12;

struct Refused {
    /// The WHEN conditions of the CASE expressions visited so far, by address (the
    /// tree is not changed while it is visited), so that a visit knows it enters one.
    conditions: std::collections::HashSet<*const Expr>,
    /// How many WHEN conditions the expression being visited is inside.
    in_conditions: usize,
    /// How many scalar subqueries the expression being visited is inside.
    in_subqueries: usize,
    /// The bodies of the common table expressions met so far, by address.
    cte_bodies: std::collections::HashSet<*const ast::Query>,
    /// The scalar subquery levels of the common table expressions visited so far,
    /// summed: DataFusion plans a reference to one in place, so its levels add to
    /// those around the reference (and a chain of them, each over the one before, adds
    /// them all). Counted for every reference, wherever it is: an upper bound.
    cte_levels: usize,
    /// The deepest `in_subqueries` reached in the body being measured.
    deepest: usize,
    /// For each body being measured: `deepest` and `in_subqueries` when it began.
    entered: Vec<(usize, usize)>,
}

impl Visitor for Refused {
    type Break = String;

    // A window function in GROUP BY: PostgreSQL's words (DataFusion asked for the
    // grouped columns instead).
    fn post_visit_query(&mut self, q: &ast::Query) -> ControlFlow<String> {
        if self.cte_bodies.contains(&(q as *const ast::Query))
            && let Some((deepest, start)) = self.entered.pop()
        {
            self.cte_levels += self.deepest.saturating_sub(start);
            self.deepest = self.deepest.max(deepest);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<String> {
        if let Some(with) = &q.with {
            self.cte_bodies.extend(
                with.cte_tables
                    .iter()
                    .map(|c| &*c.query as *const ast::Query),
            );
        }
        if self.cte_bodies.contains(&(q as *const ast::Query)) {
            self.entered.push((self.deepest, self.in_subqueries));
            self.deepest = self.in_subqueries;
        }
        fn windowed(e: &Expr) -> bool {
            ast::visit_expressions(e, |x| match x {
                Expr::Function(f) if f.over.is_some() => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            })
            .is_break()
        }
        fn grouped_by_window(body: &ast::SetExpr) -> bool {
            match body {
                ast::SetExpr::Select(s) => match &s.group_by {
                    ast::GroupByExpr::Expressions(exprs, _) => exprs.iter().any(windowed),
                    ast::GroupByExpr::All(_) => false,
                },
                ast::SetExpr::SetOperation { left, right, .. } => {
                    grouped_by_window(left) || grouped_by_window(right)
                }
                ast::SetExpr::Query(q) => grouped_by_window(&q.body),
                _ => false,
            }
        }
        if grouped_by_window(&q.body) {
            return ControlFlow::Break(
                "window functions are not allowed in GROUP BY; compute them in a subquery \
                 and group its result"
                    .into(),
            );
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<String> {
        if let TableFactor::Table {
            sample: Some(_), ..
        }
        | TableFactor::Derived {
            sample: Some(_), ..
        } = t
        {
            return ControlFlow::Break(
                "TABLESAMPLE is not supported; sample with ORDER BY random() LIMIT n or \
                 WHERE random() < fraction"
                    .into(),
            );
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<String> {
        if self.conditions.contains(&(e as *const Expr)) {
            self.in_conditions += 1;
        }
        // A numeric precision past 76 in a cast: said as written (DataFusion reads it
        // into a byte first, so `numeric(1000, 0)` was reported as (232, 0)).
        if let Expr::Cast { data_type, .. } = e
            && let ast::DataType::Numeric(info)
            | ast::DataType::Decimal(info)
            | ast::DataType::Dec(info) = data_type
            && let (Some(p), scale) = match info {
                ast::ExactNumberInfo::Precision(p) => (Some(*p), 0),
                ast::ExactNumberInfo::PrecisionAndScale(p, s) => (Some(*p), *s),
                ast::ExactNumberInfo::None => (None, 0),
            }
            && !(1..=76).contains(&p)
        {
            return ControlFlow::Break(format!(
                "NUMERIC precision must be between 1 and 76 and scale between 0 and the \
                 precision, not ({p}, {scale})"
            ));
        }
        // `x::varchar(0)`: a character type's length is checked as a column's is
        // (PostgreSQL's bounds); other cast types are read by their own rules.
        if let Expr::Cast { data_type, .. } = e
            && matches!(
                data_type,
                ast::DataType::Varchar(_)
                    | ast::DataType::CharacterVarying(_)
                    | ast::DataType::CharVarying(_)
                    | ast::DataType::Char(_)
                    | ast::DataType::Character(_)
            )
            && let Err(err) = crate::ast::types::declared_type(data_type)
        {
            return ControlFlow::Break(err.to_string());
        }
        if let Expr::Subquery(_) = e {
            self.in_subqueries += 1;
            self.deepest = self.deepest.max(self.in_subqueries);
            if self.in_subqueries + self.cte_levels > MAX_SUBQUERY_IN_EXPRESSION {
                return ControlFlow::Break(format!(
                    "scalar subqueries nested more than {MAX_SUBQUERY_IN_EXPRESSION} deep \
                     are too complex to plan; compute the inner ones in a WITH or a \
                     subquery in FROM"
                ));
            }
        }
        if let Expr::Case { conditions, .. } = e {
            if self.in_conditions > MAX_CASE_IN_WHEN {
                return ControlFlow::Break(format!(
                    "CASE nested in the WHEN conditions of more than {MAX_CASE_IN_WHEN} \
                     others is too complex to plan; compute the inner conditions in a \
                     subquery or WITH"
                ));
            }
            self.conditions
                .extend(conditions.iter().map(|w| &w.condition as *const Expr));
        }
        if let Some(message) = grouping_set_twice(e) {
            return ControlFlow::Break(message);
        }
        let Expr::Function(f) = e else {
            return ControlFlow::Continue(());
        };
        if is_call_to(f, param_text::FUNCTION) {
            return ControlFlow::Break(format!(
                "{} is Tarn's own stand-in for a large text parameter; write $n",
                param_text::FUNCTION
            ));
        }
        if let Some(message) = filter_not_boolean(f) {
            return ControlFlow::Break(message);
        }
        // `*` as an argument: PostgreSQL's words (DataFusion said its physical plan
        // "does not support logical expression Wildcard", or planned `sum(*)`), and a
        // whole-row `t.*`, which DataFusion read as `*` (`count(b.*)` counted the rows
        // an outer join made up for `b`).
        if let FunctionArguments::List(list) = &f.args {
            let args: Vec<&FunctionArgExpr> = list
                .args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(x)
                    | FunctionArg::Named { arg: x, .. }
                    | FunctionArg::ExprNamed { arg: x, .. } => x,
                })
                .collect();
            if let Some(FunctionArgExpr::QualifiedWildcard(t)) = args
                .iter()
                .find(|a| matches!(a, FunctionArgExpr::QualifiedWildcard(_)))
            {
                return ControlFlow::Break(format!(
                    "whole-row references ({t}.*) are not supported as arguments; name \
                     the columns (count(*) counts rows, count(col) the non-NULL values)"
                ));
            }
            if args.iter().any(|a| matches!(a, FunctionArgExpr::Wildcard))
                && !(is_call_to(f, "count")
                    && args.len() == 1
                    && list.duplicate_treatment.is_none())
            {
                return ControlFlow::Break(format!(
                    "{}(*) is not allowed: * stands for the rows only in count(*)",
                    f.name
                ));
            }
        }
        // `max(DISTINCT a ORDER BY b)`: PostgreSQL refuses it (what order would the
        // distinct values keep?). Only columns are compared here (by name, as
        // normalized); other ORDER BY expressions are left to the planner.
        if let FunctionArguments::List(list) = &f.args
            && matches!(
                list.duplicate_treatment,
                Some(ast::DuplicateTreatment::Distinct)
            )
        {
            let arg_columns: Option<Vec<String>> = list
                .args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => column_name(e),
                    _ => None,
                })
                .collect();
            if let Some(arg_columns) = arg_columns {
                for clause in &list.clauses {
                    if let ast::FunctionArgumentClause::OrderBy(order) = clause
                        && let Some(o) = order.iter().find(|o| {
                            column_name(&o.expr).is_some_and(|c| !arg_columns.contains(&c))
                        })
                    {
                        return ControlFlow::Break(format!(
                            "in an aggregate with DISTINCT, ORDER BY expressions must appear \
                             in the argument list ({} does not)",
                            tarn_catalog::shown(&o.expr.to_string())
                        ));
                    }
                }
            }
        }
        if let Some(message) = nth_value_below_one(f) {
            return ControlFlow::Break(message);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &Expr) -> ControlFlow<String> {
        if self.conditions.remove(&(e as *const Expr)) {
            self.in_conditions -= 1;
        }
        if let Expr::Subquery(_) = e {
            self.in_subqueries -= 1;
        }
        ControlFlow::Continue(())
    }
}

/// An expression twice in one CUBE or ROLLUP (or in one grouping set): PostgreSQL
/// groups by it twice, DataFusion refused it as a table "specified more than once".
fn grouping_set_twice(e: &Expr) -> Option<String> {
    let (what, sets) = match e {
        Expr::Cube(sets) => ("CUBE", vec![sets.concat()]),
        Expr::Rollup(sets) => ("ROLLUP", vec![sets.concat()]),
        Expr::GroupingSets(sets) => ("GROUPING SETS", sets.clone()),
        _ => return None,
    };
    for set in sets {
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = set.iter().find(|x| !seen.insert(x.to_string())) {
            return Some(format!(
                "GROUP BY {what} names {} more than once; name each expression once",
                tarn_catalog::shown(&twice.to_string())
            ));
        }
    }
    None
}

/// An aggregate's FILTER condition that is plainly no boolean.
fn filter_not_boolean(f: &ast::Function) -> Option<String> {
    let what = not_boolean(f.filter.as_deref()?)?;
    Some(format!(
        "argument of FILTER must be type boolean, not {what}"
    ))
}

/// `nth_value(x, n)` with a literal `n` below 1.
fn nth_value_below_one(f: &ast::Function) -> Option<String> {
    if !is_call_to(f, "nth_value") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(n))) = list.args.get(1) else {
        return None;
    };
    let n = literal_integer(n)?;
    (n < 1).then(|| format!("argument of nth_value must be greater than zero, not {n}"))
}

/// What a FILTER condition is when it is plainly no boolean: a number (signed or in
/// parentheses), or a cast to a type other than boolean. (A quoted literal is
/// PostgreSQL's unknown type, which `'true'` and `'t'` coerce from.)
fn not_boolean(e: &Expr) -> Option<String> {
    match e {
        Expr::Nested(e) => not_boolean(e),
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus | ast::UnaryOperator::Plus,
            expr,
        } => not_boolean(expr),
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => Some(format!("the number {n}")),
            _ => None,
        },
        Expr::Cast { data_type, .. }
            if !matches!(data_type, ast::DataType::Boolean | ast::DataType::Bool) =>
        {
            Some(format!("type {data_type}"))
        }
        _ => None,
    }
}

/// The column `e` names (its last part, normalized), through parentheses.
fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Nested(inner) => column_name(inner),
        Expr::Identifier(id) => Some(crate::ast::ident::normalize(id)),
        Expr::CompoundIdentifier(ids) => ids.last().map(crate::ast::ident::normalize),
        _ => None,
    }
}

/// The integer a literal (or a negated one) is.
fn literal_integer(e: &Expr) -> Option<i128> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => literal_integer(expr).map(|n| -n),
        Expr::Nested(e) => literal_integer(e),
        _ => None,
    }
}
