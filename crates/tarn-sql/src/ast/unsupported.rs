//! What Tarn refuses when a statement is parsed, because planning it would answer
//! something other than what it asks: `TABLESAMPLE` (DataFusion ignores it and returns
//! every row), an aggregate `FILTER (WHERE …)` whose condition is a literal that is not
//! a boolean (`FILTER (WHERE 1)`, which PostgreSQL refuses), and `nth_value(x, n)` with
//! a literal `n` below 1 (which PostgreSQL refuses; DataFusion answered NULL).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, TableFactor, Value, Visit, Visitor,
};

use crate::error::{Error, Result};

/// A 400 for the first such construct in `stmt`.
pub(crate) fn check(stmt: &ast::Statement) -> Result<()> {
    match stmt.visit(&mut Refused) {
        ControlFlow::Break(message) => Err(Error::BadRequest(message)),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Refused;

impl Visitor for Refused {
    type Break = String;

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
        let Expr::Function(f) = e else {
            return ControlFlow::Continue(());
        };
        if let Some(filter) = &f.filter
            && let Expr::Value(v) = filter.as_ref()
            && !matches!(
                v.value,
                Value::Boolean(_) | Value::Null | Value::Placeholder(_)
            )
        {
            return ControlFlow::Break(format!(
                "argument of FILTER must be type boolean, not {}",
                v.value
            ));
        }
        let name = f.name.0.last().and_then(|p| p.as_ident());
        if name.is_some_and(|n| n.value.eq_ignore_ascii_case("nth_value"))
            && let FunctionArguments::List(list) = &f.args
            && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(n))) = list.args.get(1)
            && let Some(n) = literal_integer(n)
            && n < 1
        {
            return ControlFlow::Break(format!(
                "argument of nth_value must be greater than zero, not {n}"
            ));
        }
        ControlFlow::Continue(())
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
