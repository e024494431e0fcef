//! `engine_named_cast(value, 'type')`: `value` unchanged, named after the type it was
//! cast to. DataFusion names a cast by its operand alone, so `count(x)` and
//! `count(x::text)` were both `count(v.x)`, and an aggregate node refused the second as
//! a duplicate name. The retry of such a statement wraps each cast in a call's
//! arguments in this function ([`name_casts_in_calls`]); the names a query returns come
//! from its text, so this one never shows.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast;

/// The function's name.
pub(crate) const NAMED_CAST: &str = "engine_named_cast";

/// See the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct NamedCast {
    signature: Signature,
}

impl NamedCast {
    pub(crate) fn new() -> Self {
        NamedCast {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for NamedCast {
    fn name(&self) -> &str {
        NAMED_CAST
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.into_iter().next() {
            Some(value) => Ok(value),
            None => exec_err!("{NAMED_CAST} takes two arguments"),
        }
    }
}

/// Wraps every cast that is an argument of a function call (an aggregate's, say) in
/// [`NamedCast`] with the type's name, so that calls differing only in a cast get
/// different names.
pub(crate) fn name_casts_in_calls(stmt: &mut ast::Statement) {
    let _ = ast::visit_expressions_mut(stmt, |e| {
        let ast::Expr::Function(f) = e else {
            return std::ops::ControlFlow::<()>::Continue(());
        };
        if f.name.to_string().eq_ignore_ascii_case(NAMED_CAST) {
            return std::ops::ControlFlow::Continue(());
        }
        let ast::FunctionArguments::List(list) = &mut f.args else {
            return std::ops::ControlFlow::Continue(());
        };
        for arg in &mut list.args {
            let (ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x))
            | ast::FunctionArg::Named {
                arg: ast::FunctionArgExpr::Expr(x),
                ..
            }) = arg
            else {
                continue;
            };
            let ast::Expr::Cast { data_type, .. } = &*x else {
                continue;
            };
            let ty = data_type.to_string();
            let cast = std::mem::replace(x, ast::Expr::value(ast::Value::Null));
            *x = ast::Expr::Function(ast::Function {
                name: ast::ObjectName::from(vec![ast::Ident::new(NAMED_CAST)]),
                uses_odbc_syntax: false,
                parameters: ast::FunctionArguments::None,
                args: ast::FunctionArguments::List(ast::FunctionArgumentList {
                    duplicate_treatment: None,
                    args: vec![
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(cast)),
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::value(
                            ast::Value::SingleQuotedString(ty),
                        ))),
                    ],
                    clauses: vec![],
                }),
                filter: None,
                null_treatment: None,
                over: None,
                within_group: vec![],
            });
        }
        std::ops::ControlFlow::Continue(())
    });
}
