//! Views expanded where they are read, as PostgreSQL's rewriter does: before a
//! statement is checked and planned, every `"ws"."v"` that names a view becomes the
//! view's query as a derived table under the view's name, so the statement always
//! reads current rows, and everything that runs on a statement (the relation check and
//! the pinning of table versions, the rewrites before planning, DataFusion's rules and
//! Tarn's top-k search rule) sees the tables the view reads.
//!
//! A view's columns are fixed when it is created. Its query's output is matched to
//! them by position, except for a query whose select list has a `*`: then its other
//! items carry their output names as aliases (written so when the view was created)
//! and the columns are picked by name ([`ViewDef::source_names`]), so a table that
//! gains a column later does not change the view.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, Query, SelectItem, SetExpr, TableAlias, TableAliasColumnDef, TableFactor,
    VisitMut, VisitorMut, WildcardAdditionalOptions,
};
use datafusion::sql::sqlparser::parser::Parser;
use tarn_catalog::{Catalog, ViewDef};

use crate::ast::dialect::EngineDialect;
use crate::ast::ident::name_parts;
use crate::error::{Error, Result, bad};

/// How many views deep a view may read (a view of a view of … a table): each level
/// nests the statement one derived table deeper, and planning recurses through them.
pub const MAX_VIEW_DEPTH: u32 = 16;

/// The most view references one statement may expand (`v2` reading `v1` twice and
/// `v3` reading `v2` twice doubles at each level).
pub const MAX_EXPANSIONS: usize = 256;

/// Expands every view `node` reads within a query (a write's own target is left for
/// its executor to refuse) in organization `org`'s `catalog`; names for which `keep`
/// says true are left as they are (a statement's overridden tables). Returns whether
/// any view was expanded.
pub fn expand<T: VisitMut>(
    node: &mut T,
    catalog: &Catalog,
    org: &str,
    keep: &dyn Fn(&str, &str) -> bool,
) -> Result<bool> {
    let mut e = Expand {
        catalog,
        org,
        keep,
        queries: 0,
        expanded: 0,
        err: None,
    };
    let _ = node.visit(&mut e);
    match e.err {
        Some(err) => Err(err),
        None => Ok(e.expanded > 0),
    }
}

struct Expand<'a> {
    catalog: &'a Catalog,
    org: &'a str,
    keep: &'a dyn Fn(&str, &str) -> bool,
    /// Queries the visit is inside: a table factor outside any (an UPDATE's target)
    /// is a write's, not a read.
    queries: usize,
    expanded: usize,
    err: Option<Error>,
}

impl VisitorMut for Expand<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.queries += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.queries -= 1;
        ControlFlow::Continue(())
    }

    // The visit goes on into what replaced the factor, so views that a view reads
    // are expanded in turn.
    fn pre_visit_table_factor(&mut self, t: &mut TableFactor) -> ControlFlow<()> {
        if self.queries == 0 {
            return ControlFlow::Continue(());
        }
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = t
        else {
            return ControlFlow::Continue(());
        };
        let Some(view) = view_named(self.catalog, self.org, name) else {
            return ControlFlow::Continue(());
        };
        if (self.keep)(&view.workspace_id, &view.name) {
            return ControlFlow::Continue(());
        }
        self.expanded += 1;
        if self.expanded > MAX_EXPANSIONS {
            self.err = Some(Error::BadRequest(format!(
                "the statement reads more than {MAX_EXPANSIONS} views (counting each view \
                 every time a view reads it)"
            )));
            return ControlFlow::Break(());
        }
        match view_factor(view, alias.take()) {
            Ok(factor) => *t = factor,
            Err(e) => {
                self.err = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

/// The view `name` names in `org`, if it is one.
pub fn view_named<'c>(catalog: &'c Catalog, org: &str, name: &ObjectName) -> Option<&'c ViewDef> {
    match name_parts(name).ok()?.as_slice() {
        [ws, v] => catalog.view(org, ws, v),
        _ => None,
    }
}

/// The derived table a read of `view` becomes, under the reader's `alias` (its column
/// names, if it gives some, rename the view's first columns) or the view's name.
fn view_factor(view: &ViewDef, alias: Option<TableAlias>) -> Result<TableFactor> {
    let columns: Vec<String> = view.columns.iter().map(|c| c.name.clone()).collect();
    let subquery = match &view.source_names {
        None => parse_view_query(&view.sql)?,
        Some(sources) => {
            // By name, from the query as a derived table of its own.
            let items: Vec<String> = sources
                .iter()
                .zip(&columns)
                .map(|(s, c)| format!("{} AS {}", quote(s), quote(c)))
                .collect();
            parse_view_query(&format!(
                "SELECT {} FROM ({}) AS \"tarn_view\"",
                items.join(", "),
                view.sql
            ))?
        }
    };
    let mut alias = alias.unwrap_or_else(|| TableAlias {
        explicit: false,
        name: Ident::with_quote('"', &view.name),
        columns: Vec::new(),
        at: None,
    });
    if alias.columns.len() > columns.len() {
        return bad(format!(
            "table \"{}\" has {} columns available but {} columns specified",
            alias.name.value,
            columns.len(),
            alias.columns.len()
        ));
    }
    let given = alias.columns.len();
    alias
        .columns
        .extend(columns[given..].iter().map(|c| TableAliasColumnDef {
            name: Ident::with_quote('"', c),
            data_type: None,
        }));
    Ok(TableFactor::Derived {
        lateral: false,
        subquery: Box::new(subquery),
        alias: Some(alias),
        sample: None,
    })
}

/// Parses a view's stored query (written by Tarn from a query that parsed).
pub fn parse_view_query(sql: &str) -> Result<Query> {
    let dialect = EngineDialect::default();
    let mut p = Parser::new(&dialect)
        .with_recursion_limit(256)
        .try_with_sql(sql)
        .map_err(|e| Error::Internal(format!("a stored view does not parse: {e}")))?;
    let q = p
        .parse_query()
        .map_err(|e| Error::Internal(format!("a stored view does not parse: {e}")))?;
    Ok(*q)
}

/// Whether `query`'s own select list has a `*` (its output then depends on the
/// columns of what it reads when it is read).
pub fn selects_wildcard(query: &Query) -> bool {
    match query.body.as_ref() {
        SetExpr::Select(s) => s.projection.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        }),
        _ => false,
    }
}

/// Gives each unaliased item of `query`'s select list its output name as an alias, so
/// that the names survive the query being read as a derived table (DataFusion names
/// `count(*)` as written; PostgreSQL names it `count`).
pub fn alias_items(query: &mut Query) {
    if let SetExpr::Select(s) = query.body.as_mut() {
        for item in &mut s.projection {
            if let SelectItem::UnnamedExpr(e) = item {
                let alias = Ident::with_quote('"', crate::rewrite::names::expr_name(e));
                let placeholder = SelectItem::Wildcard(WildcardAdditionalOptions::default());
                if let SelectItem::UnnamedExpr(expr) = std::mem::replace(item, placeholder) {
                    *item = SelectItem::ExprWithAlias { expr, alias };
                }
            }
        }
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}
