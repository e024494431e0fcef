//! PostgreSQL output column names: a column keeps its name, an unaliased function call
//! is named after the function, any other unaliased expression is `?column?`.

use datafusion::arrow::datatypes::Schema;
use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr};

/// What a query's AST says of its output names, taken before the query is planned
/// (planning consumes the AST): resolved against the planned schema by
/// [`OutputNames::resolve`].
#[derive(Debug)]
pub enum OutputNames {
    /// A SELECT list's names, item by item.
    Items(Vec<ItemName>),
    /// A VALUES list: `column1`, `column2`, ….
    Values,
    /// Whatever the planner named the fields.
    Planned,
}

/// One SELECT item's name(s).
#[derive(Debug)]
pub enum ItemName {
    /// An expression's name (its alias, or PostgreSQL's name for it).
    Name(String),
    /// Several aliases of one item.
    Names(Vec<String>),
    /// `*` or `t.*`: the planner's fields.
    Wildcard,
}

impl OutputNames {
    /// The names of `query`'s output.
    pub fn of(query: &Query) -> OutputNames {
        match first_select_items(&query.body) {
            Some(items) => OutputNames::Items(
                items
                    .iter()
                    .map(|item| match item {
                        SelectItem::UnnamedExpr(e) => ItemName::Name(expr_name(e)),
                        SelectItem::ExprWithAlias { alias, .. } => {
                            ItemName::Name(alias.value.clone())
                        }
                        SelectItem::ExprWithAliases { aliases, .. } => {
                            ItemName::Names(aliases.iter().map(|a| a.value.clone()).collect())
                        }
                        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                            ItemName::Wildcard
                        }
                    })
                    .collect(),
            ),
            None if matches!(query.body.as_ref(), SetExpr::Values(_)) => OutputNames::Values,
            None => OutputNames::Planned,
        }
    }

    /// Output names for the planned `schema`. Falls back to the planned field names
    /// where the AST cannot say (several wildcards mixed with expressions).
    pub fn resolve(self, schema: &Schema) -> Vec<String> {
        let fallback: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| planned_name(visible_name(f.name())))
            .collect();
        match self {
            OutputNames::Items(items) => item_names(items, fallback),
            OutputNames::Values => (1..=fallback.len()).map(|i| format!("column{i}")).collect(),
            OutputNames::Planned => fallback,
        }
    }
}

/// A planned field's name as a column's: the column of `unnest(…)` in FROM is
/// `unnest`, as in PostgreSQL (DataFusion names it after its whole plan text,
/// `UNNEST(make_array(Int64(1),Int64(2)))`).
fn planned_name(name: &str) -> String {
    if name
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("unnest("))
        && name.ends_with(')')
    {
        "unnest".into()
    } else {
        name.to_string()
    }
}

fn item_names(items: Vec<ItemName>, fallback: Vec<String>) -> Vec<String> {
    let wildcards = items
        .iter()
        .filter(|i| matches!(i, ItemName::Wildcard))
        .count();
    let explicit = items.len() - wildcards;
    if wildcards > 1 && explicit > 0 {
        return fallback;
    }
    let expanded = fallback.len().saturating_sub(explicit);
    let mut out = Vec::with_capacity(fallback.len());
    for item in items {
        match item {
            ItemName::Name(n) => out.push(n),
            ItemName::Names(ns) => out.extend(ns),
            ItemName::Wildcard => {
                let start = out.len();
                let take = if wildcards == 1 {
                    expanded
                } else {
                    fallback.len() - start
                };
                out.extend(fallback.iter().skip(start).take(take).cloned());
                if wildcards > 1 {
                    return fallback;
                }
            }
        }
    }
    if out.len() == fallback.len() {
        out
    } else {
        // An item made several columns (`unnest` of a record): DataFusion names each
        // `<expression>.<field>`; the field's name is the column's, as DuckDB names them.
        fallback.into_iter().map(field_of).collect()
    }
}

/// The field's name of DataFusion's `<expression>.<field>` (a `.` outside parentheses
/// and quotes, after the expression's closing parenthesis or a qualified name); any
/// other name as it is.
fn field_of(name: String) -> String {
    let (mut depth, mut quoted, mut dot) = (0i32, false, None);
    for (i, c) in name.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            '.' if !quoted && depth == 0 => dot = Some(i),
            _ => {}
        }
    }
    match dot {
        Some(i) if i + 1 < name.len() => name[i + 1..].trim_matches('"').to_string(),
        _ => name,
    }
}

fn first_select_items(body: &SetExpr) -> Option<&[SelectItem]> {
    match body {
        SetExpr::Select(s) => Some(&s.projection),
        SetExpr::Query(q) => first_select_items(&q.body),
        SetExpr::SetOperation { left, .. } => first_select_items(left),
        _ => None,
    }
}

/// PostgreSQL's name for an unaliased expression.
pub fn expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(id) => id.value.clone(),
        Expr::CompoundIdentifier(ids) => ids.last().map(|i| i.value.clone()).unwrap_or_default(),
        Expr::Function(f) => {
            let name = f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase());
            match name.as_deref() {
                // Wrappers bound in for a cast (array_in.rs, bounded.rs) name
                // nothing: the cast is named for what it casts, as written.
                Some(
                    crate::datafusion_ext::functions::array_in::FUNCTION
                    | crate::datafusion_ext::functions::numeric_input::NUMERIC_INPUT,
                ) => match first_arg(f) {
                    Some(inner) => expr_name(inner),
                    None => "?column?".into(),
                },
                // A large text or array parameter bound by number (params.rs) is
                // named as the parameter it stands for, as a small one is.
                // So is an object parameter, bound as a jsonb (params.rs).
                Some(
                    crate::datafusion_ext::functions::param_text::FUNCTION
                    | crate::datafusion_ext::functions::param_array::FUNCTION
                    | crate::datafusion_ext::functions::jsonb::TO_JSONB,
                ) => "?column?".into(),
                // `substring(s FROM 'pattern')` as `ast::pg_forms` rewrote it.
                Some("array_element")
                    if first_arg(f).is_some_and(|a| {
                        matches!(a, Expr::Function(g) if crate::ast::ident::is_call_to(g, "regexp_match"))
                    }) =>
                {
                    "substring".into()
                }
                Some(n) => n.to_string(),
                None => "?column?".into(),
            }
        }
        // The SQL-syntax functions are named as PostgreSQL names them.
        Expr::Substring { shorthand, .. } => if *shorthand { "substr" } else { "substring" }.into(),
        Expr::Position { .. } => "position".into(),
        Expr::Extract { .. } => "extract".into(),
        Expr::Ceil { .. } => "ceil".into(),
        Expr::Floor { .. } => "floor".into(),
        Expr::Overlay { .. } => "overlay".into(),
        Expr::Trim { trim_where, .. } => match trim_where {
            Some(datafusion::sql::sqlparser::ast::TrimWhereField::Leading) => "ltrim",
            Some(datafusion::sql::sqlparser::ast::TrimWhereField::Trailing) => "rtrim",
            _ => "btrim",
        }
        .into(),
        Expr::Cast {
            expr, data_type, ..
        } => match expr.as_ref() {
            // A large text parameter bound by number (`engine_param_text(n)`), or an
            // object parameter bound as a jsonb: `$1::jsonb` is named `jsonb`.
            Expr::Function(f)
                if crate::ast::ident::is_call_to(
                    f,
                    crate::datafusion_ext::functions::param_text::FUNCTION,
                ) || crate::ast::ident::is_call_to(
                    f,
                    crate::datafusion_ext::functions::jsonb::TO_JSONB,
                ) =>
            {
                pg_type_label(&data_type.to_string())
            }
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Function(_) => {
                expr_name(expr)
            }
            _ => pg_type_label(&data_type.to_string()),
        },
        Expr::Nested(inner) => expr_name(inner),
        Expr::Case { .. } => "case".into(),
        Expr::Exists { .. } => "exists".into(),
        Expr::Array(_) => "array".into(),
        Expr::Subquery(q) => match first_select_items(&q.body) {
            Some([SelectItem::UnnamedExpr(e)]) => expr_name(e),
            Some([SelectItem::ExprWithAlias { alias, .. }]) => alias.value.clone(),
            _ => "?column?".into(),
        },
        _ => "?column?".into(),
    }
}

/// A call's first argument, as written.
fn first_arg(f: &datafusion::sql::sqlparser::ast::Function) -> Option<&Expr> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    match &f.args {
        FunctionArguments::List(l) => match l.args.first()? {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        },
        _ => None,
    }
}

/// PostgreSQL names `'x'::int` after the type (`int4`), as it does for any cast of a
/// constant.
fn pg_type_label(written: &str) -> String {
    match written.to_lowercase().as_str() {
        "int" | "integer" | "int4" => "int4".into(),
        "bigint" | "int8" => "int8".into(),
        "smallint" | "int2" => "int2".into(),
        "real" | "float4" => "float4".into(),
        "double precision" | "float8" => "float8".into(),
        "boolean" | "bool" => "bool".into(),
        "text" => "text".into(),
        "jsonb" | "json" => "jsonb".into(),
        "date" => "date".into(),
        "timestamptz" | "timestamp with time zone" => "timestamptz".into(),
        "timestamp" => "timestamp".into(),
        "uuid" => "uuid".into(),
        s if s.starts_with("numeric") || s.starts_with("decimal") => "numeric".into(),
        s if s.starts_with("varchar") || s.starts_with("character varying") => "varchar".into(),
        s if s.ends_with("[]") => "?column?".into(),
        _ => "?column?".into(),
    }
}

/// Separates a name from the number [`alias_duplicates`] adds to make it unique.
const UNIQUE_MARK: char = '\u{1}';

/// A planned name as the user gave it (without the number that made it unique).
fn visible_name(name: &str) -> &str {
    name.split(UNIQUE_MARK).next().unwrap_or(name)
}

/// Names the unaliased expressions of a derived table's or a WITH query's SELECT list as
/// PostgreSQL does (`FROM (SELECT 1, count(*) …) x` has the columns `?column?` and
/// `count`), so that `SELECT *` over it shows those names, `x.count` reaches the count,
/// and CREATE TABLE … AS stores them. DataFusion had named them by their plan
/// (`Int64(1)`, `count(*)`), which CTAS kept as column names. Columns keep their own
/// names, also a LATERAL subquery's columns of the tables before it (`LATERAL (SELECT
/// t.id)` has the column `id`; DataFusion named it `outer_ref(t.id)`); a name twice in
/// one list is made unique by [`alias_duplicates`], which runs after this.
pub fn derived_table_names(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{TableFactor, VisitMut, VisitorMut};
    use std::ops::ControlFlow;

    fn name_list(q: &mut Query, lateral: bool) {
        let mut body = q.body.as_mut();
        while let SetExpr::SetOperation { left, .. } = body {
            body = left.as_mut();
        }
        let SetExpr::Select(select) = body else {
            return;
        };
        for item in &mut select.projection {
            let SelectItem::UnnamedExpr(e) = item else {
                continue;
            };
            if lateral && let Expr::CompoundIdentifier(parts) = e {
                // The column's own name, written as the statement wrote it (so folded
                // or quoted as the column is).
                let Some(alias) = parts.last().cloned() else {
                    continue;
                };
                let null = datafusion::sql::sqlparser::ast::Value::Null.into();
                let expr = std::mem::replace(e, Expr::Value(null));
                *item = SelectItem::ExprWithAlias { expr, alias };
                continue;
            }
            if matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
                || crate::ast::ident::has_subquery(e)
            {
                continue;
            }
            let alias = Ident::with_quote('"', expr_name(e));
            let null = datafusion::sql::sqlparser::ast::Value::Null.into();
            let expr = std::mem::replace(e, Expr::Value(null));
            *item = SelectItem::ExprWithAlias { expr, alias };
        }
    }

    struct Namer;

    impl VisitorMut for Namer {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            if let Some(with) = &mut q.with {
                for cte in &mut with.cte_tables {
                    name_list(&mut cte.query, false);
                }
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Derived {
                subquery, lateral, ..
            } = factor
            {
                name_list(subquery, *lateral);
            }
            ControlFlow::Continue(())
        }
    }

    let _ = stmt.visit(&mut Namer);
}

/// Gives the planner unique names where PostgreSQL allows duplicates: in every SELECT
/// list of `stmt`, an unaliased scalar subquery is aliased with PostgreSQL's name for it
/// (so a derived table's `count` column can be referenced by that name) unless another
/// item already has that name, and an unaliased item that repeats an earlier item's
/// expression gets an internal name. DataFusion names an unaliased subquery
/// `(<subquery>)` and refuses two equal names in one projection; the names a query
/// returns are taken from the AST beforehand ([`OutputNames::of`]), so these aliases
/// never show.
///
/// With `all`, every unaliased item other than a column (and, in a list with a
/// wildcard, every unaliased item) gets an internal name: the retry for a statement whose items DataFusion still names alike (`'x'::timestamp` and
/// `'x'::timestamptz` are both `CAST(Utf8("x") AS Timestamp(ns))`).
pub fn alias_duplicates(stmt: &mut datafusion::sql::sqlparser::ast::Statement, all: bool) {
    use datafusion::sql::sqlparser::ast::{VisitMut, VisitorMut};
    use std::collections::HashSet;
    use std::ops::ControlFlow;

    struct Aliaser {
        next: usize,
        all: bool,
        seen_query: bool,
    }

    impl Aliaser {
        fn select_list(&mut self, items: &mut [SelectItem], top: bool) {
            // Names items give themselves: a subquery takes PostgreSQL's name for it
            // only when no item has that name.
            let claimed: HashSet<String> = items
                .iter()
                .filter_map(|i| match i {
                    SelectItem::ExprWithAlias { alias, .. } => {
                        Some(crate::ast::ident::normalize(alias))
                    }
                    SelectItem::UnnamedExpr(
                        e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_)),
                    ) => Some(expr_name(e).to_lowercase()),
                    _ => None,
                })
                .collect();
            // Beside a wildcard a named column repeats one the wildcard returns
            // (`SELECT a, * FROM t`): in the retry it takes an internal name too.
            // Only in the statement's own result, whose names nothing else refers to:
            // inside a CTE or derived table the internal name would let an outer
            // reference reach the wildcard's column instead of being ambiguous.
            let beside_wildcard = self.all
                && top
                && items.iter().any(|i| {
                    matches!(
                        i,
                        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
                    )
                });
            let mut taken: HashSet<String> = HashSet::new();
            for item in items.iter_mut() {
                let e = match item {
                    SelectItem::ExprWithAlias { alias, .. } => {
                        if !taken.insert(crate::ast::ident::normalize(alias)) {
                            *alias = Ident::new(self.internal(&alias.value));
                        }
                        continue;
                    }
                    SelectItem::UnnamedExpr(e) => e,
                    _ => continue,
                };
                let key = match &*e {
                    Expr::Identifier(id) => crate::ast::ident::normalize(id),
                    Expr::CompoundIdentifier(ids) => ids
                        .last()
                        .map(crate::ast::ident::normalize)
                        .unwrap_or_default(),
                    other => other.to_string(),
                };
                let pg = expr_name(e);
                // DataFusion names every subquery `(<subquery>)`, so two different
                // items can get one name (`x IN (SELECT …)` twice).
                let alias = if crate::ast::ident::has_subquery(e) {
                    let lower = pg.to_lowercase();
                    if pg != "?column?" && !claimed.contains(&lower) && taken.insert(lower) {
                        pg
                    } else {
                        self.internal(&pg)
                    }
                } else if !taken.insert(key)
                    || beside_wildcard
                    || (self.all && !matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)))
                {
                    self.internal(&pg)
                } else {
                    continue;
                };
                let expr = std::mem::replace(e, Expr::Value(ast_null()));
                *item = SelectItem::ExprWithAlias {
                    expr,
                    alias: Ident::new(alias),
                };
            }
        }

        /// `name` made unique; the output shows `name` ([`visible_name`]), also
        /// through a derived table's `SELECT *`.
        fn internal(&mut self, name: &str) -> String {
            self.next += 1;
            format!("{name}{UNIQUE_MARK}{}", self.next)
        }

        fn body(&mut self, body: &mut SetExpr, top: bool) {
            match body {
                SetExpr::Select(s) => self.select_list(&mut s.projection, top),
                SetExpr::SetOperation { left, right, .. } => {
                    self.body(left, top);
                    self.body(right, top);
                }
                _ => {}
            }
        }
    }

    impl VisitorMut for Aliaser {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            // The first query visited is the statement's outermost one.
            let top = !self.seen_query;
            self.seen_query = true;
            self.body(&mut q.body, top);
            ControlFlow::Continue(())
        }
    }

    fn ast_null() -> datafusion::sql::sqlparser::ast::ValueWithSpan {
        datafusion::sql::sqlparser::ast::Value::Null.into()
    }

    let _ = stmt.visit(&mut Aliaser {
        next: 0,
        all,
        seen_query: false,
    });
}

/// Names the column of a set-returning function after its alias, as PostgreSQL does:
/// `FROM generate_series(1, 3) x` has one column, `x` (DataFusion calls it `value`, so
/// `SELECT x …` failed with `column "x" does not exist`; found by the `sql_exec` fuzz
/// target), and `FROM unnest(arr) x` has `x`. Only single-column functions, and only an
/// alias without a column list.
pub fn function_column_aliases(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{TableAliasColumnDef, TableFactor, VisitMut, VisitorMut};
    use std::ops::ControlFlow;

    struct Namer;

    impl VisitorMut for Namer {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(_),
                alias: Some(alias),
                ..
            } = factor
                && alias.columns.is_empty()
                && (crate::ast::ident::is_bare_name(name, "generate_series")
                    || crate::ast::ident::is_bare_name(name, "range"))
            {
                alias.columns = vec![TableAliasColumnDef::from_name(alias.name.value.clone())];
            }
            // `FROM unnest(arr) x` (one array, no ordinality) likewise has the column `x`.
            if let TableFactor::UNNEST {
                alias: Some(alias),
                array_exprs,
                with_offset: false,
                with_ordinality: false,
                ..
            } = factor
                && alias.columns.is_empty()
                && array_exprs.len() == 1
            {
                alias.columns = vec![TableAliasColumnDef::from_name(alias.name.value.clone())];
            }
            ControlFlow::Continue(())
        }
    }

    let _ = stmt.visit(&mut Namer);
}

/// `generate_series(…)` as a SELECT item returns its rows, as PostgreSQL's
/// set-returning function does: the call is unnested, and the column keeps the name
/// `generate_series` (DataFusion's is a function that returns one array, so `SELECT
/// generate_series(1, 3)` was one row holding `[1,2,3]`). Only a whole item: nested
/// in an expression it is DataFusion's array still.
pub fn set_returning_series(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{self as ast, SelectItem, VisitMut, VisitorMut};
    use std::ops::ControlFlow;

    struct Unnester;

    fn series(e: &Expr) -> bool {
        matches!(e, Expr::Function(f) if f.over.is_none()
            && crate::ast::ident::is_bare_name(&f.name, "generate_series"))
    }

    fn unnest(e: &mut Expr) {
        let call = std::mem::replace(e, Expr::value(ast::Value::Null));
        *e = crate::ast::ident::call("unnest", vec![call]);
    }

    impl VisitorMut for Unnester {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
            if let ast::SetExpr::Select(select) = q.body.as_mut() {
                for item in &mut select.projection {
                    match item {
                        SelectItem::UnnamedExpr(e) if series(e) => {
                            unnest(e);
                            let e = std::mem::replace(e, Expr::value(ast::Value::Null));
                            *item = SelectItem::ExprWithAlias {
                                expr: e,
                                alias: ast::Ident::new("generate_series"),
                            };
                        }
                        SelectItem::ExprWithAlias { expr, .. } if series(expr) => unnest(expr),
                        _ => {}
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }

    let _ = stmt.visit(&mut Unnester);
}

/// `array_remove` and `array_replace` as PostgreSQL's: every element equal to the
/// value, not only the first (DataFusion's `array_remove(ARRAY[1,2,1], 1)` was `{2,1}`;
/// its `_all` forms are PostgreSQL's). Output names come from the statement's text
/// beforehand, so the columns keep their names.
pub fn pg_array_functions(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{self as ast, ObjectNamePart};
    let _ = ast::visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && f.name.0.len() == 1
            && let Some(ident) = f.name.0[0].as_ident()
        {
            let all = match ident.value.to_ascii_lowercase().as_str() {
                "array_remove" | "list_remove" => Some("array_remove_all"),
                "array_replace" | "list_replace" => Some("array_replace_all"),
                _ => None,
            };
            if let Some(all) = all {
                f.name.0[0] = ObjectNamePart::Identifier(Ident::new(all));
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `mod(a, b)`, PostgreSQL's function for `a % b`, which DataFusion does not have: made
/// the operator (whose division by zero is checked). Output names come from the
/// statement's text beforehand, so the column is still `mod`.
pub fn mod_function(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{
        self as ast, BinaryOperator, FunctionArg, FunctionArgExpr, FunctionArguments,
    };
    let _ = ast::visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && f.over.is_none()
            && crate::ast::ident::is_bare_name(&f.name, "mod")
            && let FunctionArguments::List(list) = &mut f.args
            && list.args.len() == 2
            && list.clauses.is_empty()
            && list.duplicate_treatment.is_none()
            && list
                .args
                .iter()
                .all(|a| matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(_))))
        {
            let mut operands = std::mem::take(&mut list.args)
                .into_iter()
                .filter_map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => Some(x),
                    _ => None,
                });
            if let (Some(left), Some(right)) = (operands.next(), operands.next()) {
                *e = Expr::Nested(Box::new(Expr::BinaryOp {
                    left: Box::new(Expr::Nested(Box::new(left))),
                    op: BinaryOperator::Modulo,
                    right: Box::new(Expr::Nested(Box::new(right))),
                }));
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `ifnull` calls inside an `ifnull` call's arguments become `nvl`, the function
/// `ifnull` names: DataFusion plans each `ifnull` as `nvl(…) AS ifnull(…)`, and works
/// out the type of an alias over an alias twice per level, so 20 nested `ifnull`s took
/// seconds and 40 took gigabytes before anything could refuse them. The outermost keeps
/// its name (the result column's).
pub fn nested_ifnull(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{self as ast, VisitMut, VisitorMut};
    fn is_ifnull(f: &ast::Function) -> bool {
        crate::ast::ident::is_call_to(f, "ifnull")
    }
    struct Outer;
    impl VisitorMut for Outer {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &mut Expr) -> std::ops::ControlFlow<()> {
            if let Expr::Function(f) = e
                && is_ifnull(f)
            {
                let _ = ast::visit_expressions_mut(&mut f.args, |inner| {
                    if let Expr::Function(g) = inner
                        && is_ifnull(g)
                    {
                        g.name = ast::ObjectName::from(vec![ast::Ident::new("nvl")]);
                    }
                    std::ops::ControlFlow::<()>::Continue(())
                });
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Outer);
}
