//! The SQL dialect: PostgreSQL's, plus `CREATE TABLE … USING engine`.
//!
//! `ALTER VIEW v RENAME TO w` is read here (sqlparser reads ALTER VIEW only as
//! `ALTER VIEW v AS SELECT …`) into [`Statement::RenameTable`], which is otherwise
//! MySQL's `RENAME TABLE` and not PostgreSQL's: that statement is refused as the
//! syntax error it is in PostgreSQL, so the one statement means one thing.

use std::any::TypeId;

use datafusion::sql::sqlparser::ast::{Expr, ObjectName, RenameTable, Statement, UnaryOperator};
use datafusion::sql::sqlparser::dialect::{Dialect, PostgreSqlDialect, Precedence};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;

/// sqlparser's PostgreSQL dialect, forwarding all of its behaviour, that also accepts
/// `USING <engine>` after a CREATE TABLE column list. It reports PostgreSQL's type id so
/// the parser's PostgreSQL-only branches apply.
#[derive(Debug, Default)]
pub struct EngineDialect {
    pg: PostgreSqlDialect,
}

impl Dialect for EngineDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<PostgreSqlDialect>()
    }

    fn supports_create_table_using(&self) -> bool {
        true
    }

    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        self.pg.identifier_quote_style(identifier)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        self.pg.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        self.pg.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        self.pg.is_identifier_part(ch)
    }

    fn supports_unicode_string_literal(&self) -> bool {
        self.pg.supports_unicode_string_literal()
    }

    fn is_reserved_for_identifier(&self, kw: Keyword) -> bool {
        self.pg.is_reserved_for_identifier(kw)
    }

    fn is_custom_operator_part(&self, ch: char) -> bool {
        self.pg.is_custom_operator_part(ch)
    }

    fn get_next_precedence(&self, parser: &Parser) -> Option<Result<u8, ParserError>> {
        self.pg.get_next_precedence(parser)
    }

    /// `IS [NOT] DISTINCT FROM` binds its right side as PostgreSQL does, like a
    /// comparison's: sqlparser reads a whole expression there, so `a IS NOT DISTINCT
    /// FROM b AND c` became `a IS NOT DISTINCT FROM (b AND c)` (a type error, or a
    /// wrong answer).
    fn parse_statement(&self, parser: &mut Parser) -> Option<Result<Statement, ParserError>> {
        if parser.peek_keyword(Keyword::RENAME) {
            let rename = parser.peek_token();
            return Some(Err(ParserError::ParserError(format!(
                "Expected: an SQL statement, found: RENAME{}",
                rename.span.start
            ))));
        }
        let renamed = parser.maybe_parse(|p| {
            p.expect_keywords(&[Keyword::ALTER, Keyword::VIEW])?;
            let old_name = p.parse_object_name(false)?;
            p.expect_keywords(&[Keyword::RENAME, Keyword::TO])?;
            let new_name = ObjectName::from(vec![p.parse_identifier()?]);
            Ok(Statement::RenameTable(vec![RenameTable {
                old_name,
                new_name,
            }]))
        });
        match renamed {
            Ok(Some(stmt)) => Some(Ok(stmt)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Unary `-` and `+` bind tighter than `^`, as in PostgreSQL: `-2^2` is `(-2)^2`, 4
    /// (sqlparser read `-(2^2)`, -4). They still bind looser than `::`, `[…]` and `AT
    /// TIME ZONE`, and tighter than `*` and `/`.
    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        let op = match parser.peek_token().token {
            Token::Minus => UnaryOperator::Minus,
            Token::Plus => UnaryOperator::Plus,
            _ => return None,
        };
        parser.next_token();
        Some(
            parser
                .parse_subexpr(self.prec_value(Precedence::Caret))
                .map(|e| Expr::UnaryOp {
                    op,
                    expr: Box::new(e),
                }),
        )
    }

    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        _precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        let negated = if parser.parse_keywords(&[
            Keyword::IS,
            Keyword::NOT,
            Keyword::DISTINCT,
            Keyword::FROM,
        ]) {
            true
        } else if parser.parse_keywords(&[Keyword::IS, Keyword::DISTINCT, Keyword::FROM]) {
            false
        } else {
            return None;
        };
        let right = match parser.parse_subexpr(self.prec_value(Precedence::Is)) {
            Ok(r) => Box::new(r),
            Err(e) => return Some(Err(e)),
        };
        let left = Box::new(expr.clone());
        Some(Ok(if negated {
            Expr::IsNotDistinctFrom(left, right)
        } else {
            Expr::IsDistinctFrom(left, right)
        }))
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        self.pg.supports_filter_during_aggregation()
    }

    fn supports_group_by_expr(&self) -> bool {
        self.pg.supports_group_by_expr()
    }

    fn prec_value(&self, prec: Precedence) -> u8 {
        self.pg.prec_value(prec)
    }

    fn allow_extract_custom(&self) -> bool {
        self.pg.allow_extract_custom()
    }

    fn allow_extract_single_quotes(&self) -> bool {
        self.pg.allow_extract_single_quotes()
    }

    fn supports_create_index_with_clause(&self) -> bool {
        self.pg.supports_create_index_with_clause()
    }

    fn supports_explain_with_utility_options(&self) -> bool {
        self.pg.supports_explain_with_utility_options()
    }

    fn supports_listen_notify(&self) -> bool {
        self.pg.supports_listen_notify()
    }

    fn supports_factorial_operator(&self) -> bool {
        self.pg.supports_factorial_operator()
    }

    fn supports_bitwise_shift_operators(&self) -> bool {
        self.pg.supports_bitwise_shift_operators()
    }

    fn supports_comment_on(&self) -> bool {
        self.pg.supports_comment_on()
    }

    fn supports_load_extension(&self) -> bool {
        self.pg.supports_load_extension()
    }

    fn supports_named_fn_args_with_colon_operator(&self) -> bool {
        self.pg.supports_named_fn_args_with_colon_operator()
    }

    /// Off: with it, sqlparser parses each function argument twice (first as the name
    /// of a named argument, then as the argument), so parsing nested two-argument calls
    /// (`coalesce(coalesce(…, 1), 1)`) doubled with each level, before any limit could
    /// look. Named arguments keep identifier names (`f(a => 1)`).
    fn supports_named_fn_args_with_expr_name(&self) -> bool {
        false
    }

    fn supports_empty_projections(&self) -> bool {
        self.pg.supports_empty_projections()
    }

    fn supports_nested_comments(&self) -> bool {
        self.pg.supports_nested_comments()
    }

    fn supports_string_escape_constant(&self) -> bool {
        self.pg.supports_string_escape_constant()
    }

    fn supports_numeric_literal_underscores(&self) -> bool {
        self.pg.supports_numeric_literal_underscores()
    }

    fn supports_array_typedef_with_brackets(&self) -> bool {
        self.pg.supports_array_typedef_with_brackets()
    }

    fn supports_geometric_types(&self) -> bool {
        self.pg.supports_geometric_types()
    }

    fn supports_set_names(&self) -> bool {
        self.pg.supports_set_names()
    }

    fn supports_alter_column_type_using(&self) -> bool {
        self.pg.supports_alter_column_type_using()
    }

    fn supports_notnull_operator(&self) -> bool {
        self.pg.supports_notnull_operator()
    }

    fn supports_interval_options(&self) -> bool {
        self.pg.supports_interval_options()
    }

    fn supports_insert_table_alias(&self) -> bool {
        self.pg.supports_insert_table_alias()
    }

    fn supports_create_table_like_parenthesized(&self) -> bool {
        self.pg.supports_create_table_like_parenthesized()
    }

    fn supports_select_wildcard_with_alias(&self) -> bool {
        self.pg.supports_select_wildcard_with_alias()
    }

    fn supports_comma_separated_trim(&self) -> bool {
        self.pg.supports_comma_separated_trim()
    }

    fn supports_xml_expressions(&self) -> bool {
        self.pg.supports_xml_expressions()
    }

    fn supports_comment_optimizer_hint(&self) -> bool {
        self.pg.supports_comment_optimizer_hint()
    }
}
