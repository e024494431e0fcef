//! A bound on how deep a statement's expressions nest, checked on its tokens before
//! anything builds a tree from them.
//!
//! sqlparser's recursion limit bounds nesting that its parser reaches by recursion
//! (parentheses, CASE, subqueries, prefix operators), but an operator chain such as
//! `1+1+…+1` is parsed in a loop into a left-deep tree as deep as the chain is long.
//! Everything downstream walks that tree recursively (planning, optimizer rules,
//! display, drop), so a long enough chain used to take minutes to plan or overflow the
//! stack. Like SQLite (`SQLITE_MAX_EXPR_DEPTH`) and DuckDB (`max_expression_depth`),
//! Tarn refuses such statements up front with a 400. The limit is 256 levels, the same
//! as the parser's recursion limit: DataFusion copies expressions with unprotected
//! recursion that needs about 3.5 KiB of stack per level, and a statement must plan on
//! a tokio worker's 2 MiB stack with room to spare.
//!
//! The same holds for plans: joins and set operations (`… UNION SELECT … UNION …`) and
//! the tables of a FROM list nest one level each, and subqueries two each, side by
//! side too (a correlated one becomes a join with a projection over it).
//!
//! The bound is counted on tokens. Within each open group (parentheses, brackets,
//! CASE … END) the operators since the last separator (a comma, a clause keyword,
//! WHEN/THEN/ELSE) form a chain: AND and OR, the loosest, nest one level each, and the
//! operands between them at most as deep as their longest run of other operators; joins,
//! set operations and FROM-list commas add a level each. A statement's depth is the sum,
//! over the groups open at any point, of those counts plus one. That is an upper bound
//! of the trees' depth, so it never lets a deep tree through, while `c1 = 1 AND … AND
//! c250 = 250` still passes.
//!
//! Depth also bounds how long a statement takes to plan, as a whole: DataFusion asks a
//! node for its type by asking its children, at every level, so an expression costs
//! the sum over its terms of how deep each one is, and a chain of `d` operators costs
//! `d²`. One chain 250 long plans in a fraction of a second, but 1,600 of them in one
//! SELECT list planned for 78 s in one step that no timeout can stop. What is nested
//! under a chain is typed again by each operator above it too: a `coalesce` of 20,000
//! arguments under a chain of 250 `+` planned for a minute. So the typing work is
//! counted and bounded ([`MAX_TYPING_WORK`]): each operator costs the tokens of the
//! chain before it, and each bracketed group its tokens times the operators and calls
//! around it (a call's arguments, times every call it is nested in: DataFusion names
//! a call by its arguments' names, again at each level). Lists of values (`IN (…)`,
//! `ARRAY[…]`, VALUES rows) are typed once and cost nothing (what is nested in them
//! does), nor do short chains. An operator other than AND/OR costs only its run since
//! the last AND/OR, which binds looser than it.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{Result, bad};

/// The deepest expression nesting a statement may have (see the module docs).
pub const MAX_EXPR_DEPTH: usize = 256;

/// The most typing work a statement may need (see the module docs): the sum, over its
/// operators, of the tokens of the chain before each one, and over its bracketed groups
/// (a call's arguments, a parenthesized operand) of their tokens times the operators
/// and calls around them, each less [`FREE_TYPING`]. The costliest chains (`1+1+…`,
/// Tarn's checked arithmetic) plan at about 4 µs per unit here: 600,000 is two to three
/// seconds, nine SELECT columns of chains 250 long.
pub const MAX_TYPING_WORK: usize = 600_000;

/// The typing work each operator and group has at no cost (see [`MAX_TYPING_WORK`]):
/// short chains, however many, cost nothing.
pub const FREE_TYPING: usize = 8;

/// The plan levels a subquery nests by (see `check`).
const SUBQUERY_LEVELS: usize = 2;

/// PostgreSQL's precedence levels of the operators other than AND/OR, NOT, IS and
/// comparison through `::` (see [`Group::around`]).
const OPERATOR_LEVELS: usize = 8;

/// What a token does to the counts.
enum Effect {
    Open,
    Close,
    /// Ends an operand: the operator chain starts again.
    Separate,
    /// Starts a FROM list, whose commas nest (cross joins) instead of separating.
    From,
    /// Ends a FROM list (and the chain).
    EndFrom,
    /// AND, OR: the loosest operators.
    Boolean,
    Operator,
    /// A join or set operation: the plan nests one level per such word, however the
    /// expressions between them are separated.
    Nest,
    None,
}

fn effect(t: &Token) -> Effect {
    match t {
        Token::LParen | Token::LBracket | Token::LBrace => Effect::Open,
        Token::RParen | Token::RBracket | Token::RBrace => Effect::Close,
        Token::Comma | Token::SemiColon => Effect::Separate,
        Token::Word(w) => match w.keyword {
            Keyword::CASE => Effect::Open,
            Keyword::END => Effect::Close,
            Keyword::AND | Keyword::OR => Effect::Boolean,
            Keyword::NOT
            | Keyword::IS
            | Keyword::LIKE
            | Keyword::ILIKE
            | Keyword::SIMILAR
            | Keyword::IN
            | Keyword::BETWEEN
            | Keyword::COLLATE
            | Keyword::AT
            | Keyword::ESCAPE
            | Keyword::OVERLAPS => Effect::Operator,
            Keyword::JOIN | Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT => Effect::Nest,
            // A FROM list nests by its commas (cross joins), and so does a WITH list
            // (each common table expression may build on the one before).
            Keyword::FROM | Keyword::USING | Keyword::WITH => Effect::From,
            Keyword::SELECT
            | Keyword::VALUES
            | Keyword::WHERE
            | Keyword::GROUP
            | Keyword::HAVING
            | Keyword::ORDER
            | Keyword::LIMIT
            | Keyword::OFFSET
            | Keyword::WINDOW
            | Keyword::RETURNING
            | Keyword::SET => Effect::EndFrom,
            Keyword::WHEN | Keyword::THEN | Keyword::ELSE | Keyword::ON => Effect::Separate,
            _ => Effect::None,
        },
        Token::EOF
        | Token::Number(..)
        | Token::Char(_)
        | Token::Whitespace(_)
        | Token::Period
        | Token::Colon
        | Token::Placeholder(_)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::TripleSingleQuotedString(_)
        | Token::TripleDoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::SingleQuotedByteStringLiteral(_)
        | Token::DoubleQuotedByteStringLiteral(_)
        | Token::TripleSingleQuotedByteStringLiteral(_)
        | Token::TripleDoubleQuotedByteStringLiteral(_)
        | Token::SingleQuotedRawStringLiteral(_)
        | Token::DoubleQuotedRawStringLiteral(_)
        | Token::TripleSingleQuotedRawStringLiteral(_)
        | Token::TripleDoubleQuotedRawStringLiteral(_)
        | Token::NationalStringLiteral(_)
        | Token::QuoteDelimitedStringLiteral(_)
        | Token::NationalQuoteDelimitedStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::UnicodeStringLiteral(_)
        | Token::HexStringLiteral(_) => Effect::None,
        _ => Effect::Operator,
    }
}

/// Whether a word before an opening bracket makes it a call's (or a subquery's): not
/// when it is a clause or boolean keyword.
fn names_a_call(k: Keyword) -> bool {
    !matches!(
        k,
        Keyword::AND
            | Keyword::OR
            | Keyword::NOT
            | Keyword::SELECT
            | Keyword::WHERE
            | Keyword::HAVING
            | Keyword::ON
            | Keyword::WHEN
            | Keyword::THEN
            | Keyword::ELSE
            | Keyword::FROM
            | Keyword::JOIN
            | Keyword::AS
            | Keyword::WITH
            | Keyword::USING
            | Keyword::EXISTS
    )
}

/// One open group: its operator chain, how deep its joins and set operations nest, and
/// whether a FROM list is open in it.
#[derive(Default)]
struct Group {
    /// AND/OR since the last separator.
    boolean: usize,
    /// Other operators since the last AND/OR, and the longest such run before it.
    run: usize,
    longest: usize,
    nest: usize,
    in_from: bool,
    /// Significant tokens in the group so far, those of the groups closed in it
    /// included (a list of values counts one), and their count when the chain began.
    size: usize,
    chain_start: usize,
    /// `size` at the last AND/OR: an operator binds tighter than those, so its
    /// operands lie within its run.
    run_start: usize,
    /// For a list of values: what the groups closed in it (calls, subqueries, lists)
    /// hold. A list is typed once, but what is nested in it is typed as anywhere.
    nested: usize,
    /// Calls opened in the current run of operators.
    calls: usize,
    /// A list of values (`IN (…)`, `ARRAY[…]`, VALUES rows): typed once, whatever is
    /// around it.
    list: bool,
    /// After VALUES: each bracket opened after a comma is a row.
    in_values: bool,
    /// A call's arguments (or a subquery): named again by every call around it.
    call: bool,
    /// `ARRAY[…]`: a list of values, but also a call (`make_array`) that names the
    /// calls in it again.
    array: bool,
    /// A subquery (the group begins with SELECT or WITH).
    subquery: bool,
}

impl Group {
    fn depth(&self) -> usize {
        self.boolean + self.run.max(self.longest) + self.nest + 1
    }

    fn separate(&mut self) {
        self.boolean = 0;
        self.run = 0;
        self.longest = 0;
        self.calls = 0;
        self.chain_start = self.size;
        self.run_start = self.size;
    }

    /// How many times what is written next is typed again by the operators and calls
    /// already around it in this group. Of a chain's operators written before an
    /// operand, only those of looser precedence than the ones after them lie above it
    /// in the tree (`a + b * (x)`: both; `a + b + (x)`: the last): at most one per
    /// precedence level, two for AND/OR and [`OPERATOR_LEVELS`] for the others.
    fn around(&self) -> usize {
        self.boolean.min(2) + self.run.min(OPERATOR_LEVELS) + self.calls
    }
}

/// Fails with a 400 when `tokens` may nest expressions or plans deeper than
/// [`MAX_EXPR_DEPTH`].
pub(crate) fn check(tokens: &[TokenWithSpan]) -> Result<()> {
    let mut groups: Vec<Group> = vec![Group::default()];
    // The sum of the open groups' depths.
    let mut depth = 1usize;
    // The two significant tokens before this one: a keyword, or `None` for anything else
    // (after a `.` or AS, a word is a name whatever it spells).
    let mut previous: [Option<Keyword>; 2] = [None, None];
    let mut after_name_marker = false;
    // What typing the statement costs (see `MAX_TYPING_WORK`).
    let mut work = 0usize;
    for t in tokens {
        let before = groups.last().map_or(0, Group::depth);
        let keyword = match &t.token {
            Token::Whitespace(_) => continue,
            Token::Word(w) if !after_name_marker => Some(w.keyword),
            Token::Word(_) => Some(Keyword::NoKeyword),
            _ => None,
        };
        let e = match (previous, keyword) {
            // A name that happens to be a keyword (`t.where`, `AS set`).
            (_, Some(Keyword::NoKeyword)) => Effect::None,
            // Clause words inside an expression: `f() WITHIN GROUP (…)`, `a IS [NOT]
            // DISTINCT FROM b`. They continue the chain, they do not end it.
            ([_, Some(Keyword::WITHIN)], Some(Keyword::GROUP))
            | ([Some(Keyword::IS | Keyword::NOT), Some(Keyword::DISTINCT)], Some(Keyword::FROM)) => {
                Effect::Operator
            }
            _ => effect(&t.token),
        };
        after_name_marker = matches!(t.token, Token::Period) || keyword == Some(Keyword::AS);
        previous = [previous[1], keyword];
        match e {
            Effect::Open => {
                let list = matches!(
                    previous[0],
                    Some(Keyword::IN | Keyword::ARRAY | Keyword::VALUES)
                ) || (previous[0].is_none()
                    && groups.last().is_some_and(|g| g.in_values));
                // A name before the bracket: a call (or a subquery).
                let call = previous[0].is_some_and(names_a_call) && !list;
                if let Some(g) = groups.last_mut()
                    && call
                {
                    g.calls += 1;
                }
                let array = previous[0] == Some(Keyword::ARRAY);
                groups.push(Group {
                    list,
                    call,
                    array,
                    ..Group::default()
                });
                depth += 1;
            }
            Effect::Close if groups.len() > 1 => {
                depth -= before;
                if let Some(child) = groups.pop() {
                    // A group is typed again by each operator or call around it, and a
                    // call named again by each call around it (nested calls cost the
                    // cube of their depth). A list of values is typed once.
                    let calls_around = if child.call {
                        groups.iter().filter(|g| g.call || g.array).count()
                    } else {
                        0
                    };
                    if let Some(g) = groups.last_mut() {
                        // A list's own values count once; what is nested in it, as
                        // anywhere.
                        let typed = if child.list { child.nested } else { child.size };
                        let again = typed.saturating_mul(g.around() + calls_around);
                        work = work.saturating_add(again.saturating_sub(FREE_TYPING));
                        let held = typed.saturating_add(1);
                        g.size = g.size.saturating_add(held);
                        if g.list {
                            g.nested = g.nested.saturating_add(held);
                        }
                        // A subquery beside others nests in the plan as a join does
                        // (a correlated one becomes one, with a projection over it):
                        // 300 of them in one SELECT list overflowed the stack.
                        if child.subquery {
                            g.nest += SUBQUERY_LEVELS;
                            depth += SUBQUERY_LEVELS;
                        }
                    }
                }
            }
            effect => {
                let Some(g) = groups.last_mut() else { break };
                // A subquery (`IN (SELECT …)`, `ARRAY(SELECT …)`) is no list of values.
                if g.size == 0 && matches!(keyword, Some(Keyword::SELECT | Keyword::WITH)) {
                    g.list = false;
                    g.subquery = true;
                }
                // AND/OR types the chain so far in its group again, another operator
                // its run since the last AND/OR. (`||` too: a text chain is one call,
                // but a jsonb, array or bytea chain nests one per operator, and the
                // tokens do not tell which.)
                let since = match effect {
                    Effect::Boolean => Some(g.chain_start),
                    Effect::Operator => Some(g.run_start),
                    _ => None,
                };
                if let Some(start) = since {
                    let again = (g.size - start).saturating_sub(FREE_TYPING);
                    work = work.saturating_add(again);
                }
                match effect {
                    Effect::Separate if g.in_from && t.token == Token::Comma => g.nest += 1,
                    Effect::Separate => g.separate(),
                    Effect::From => {
                        g.separate();
                        g.in_from = true;
                        g.in_values = false;
                    }
                    Effect::EndFrom => {
                        g.separate();
                        g.in_from = false;
                        g.in_values = keyword == Some(Keyword::VALUES);
                    }
                    Effect::Boolean => {
                        g.boolean += 1;
                        g.longest = g.longest.max(g.run);
                        g.run = 0;
                        g.run_start = g.size + 1;
                    }
                    Effect::Operator => g.run += 1,
                    Effect::Nest => {
                        g.separate();
                        g.nest += 1;
                    }
                    Effect::Open | Effect::Close | Effect::None => {}
                }
                g.size += 1;
                depth = depth + g.depth() - before;
            }
        }
        if depth > MAX_EXPR_DEPTH {
            return bad(format!(
                "statement too complex: its expressions, joins or set operations nest more \
                 than {MAX_EXPR_DEPTH} levels deep (at line {}, column {}); split long \
                 chains, e.g. use IN (…) instead of many ORs",
                t.span.start.line, t.span.start.column
            ));
        }
        if work > MAX_TYPING_WORK {
            return bad(format!(
                "statement too complex: its expressions would be typed over and over (at \
                 line {}, column {}): planning grows with the square of a chain's length \
                 and with what is nested under it; split long chains (IN (…) instead of \
                 many ORs, a sum of many terms in a subquery) or use fewer of them",
                t.span.start.line, t.span.start.column
            ));
        }
    }
    Ok(())
}

/// PostgreSQL's widths: a SELECT list of at most 1,664 entries and a function call of at
/// most 100 arguments (its `target lists can have at most 1664 entries` and `cannot pass
/// more than 100 arguments to a function`). Planning grows with the square of a
/// SELECT list's width: 65,000 entries had planned for four minutes, past any timeout.
pub(crate) fn check_widths(stmt: &datafusion::sql::sqlparser::ast::Statement) -> Result<()> {
    use datafusion::sql::sqlparser::ast::{self, Visit, Visitor};
    use std::ops::ControlFlow;
    struct Widths;
    impl Visitor for Widths {
        type Break = String;
        fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<String> {
            fn selects(body: &ast::SetExpr) -> Option<String> {
                match body {
                    ast::SetExpr::Select(s) if s.projection.len() > MAX_TARGET_LIST => {
                        Some(format!(
                            "target lists can have at most {MAX_TARGET_LIST} entries, not {}",
                            s.projection.len()
                        ))
                    }
                    ast::SetExpr::SetOperation { left, right, .. } => {
                        selects(left).or_else(|| selects(right))
                    }
                    _ => None,
                }
            }
            match selects(&q.body) {
                Some(m) => ControlFlow::Break(m),
                None => ControlFlow::Continue(()),
            }
        }
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> ControlFlow<String> {
            if let ast::Expr::Function(f) = e
                && let ast::FunctionArguments::List(list) = &f.args
                && list.args.len() > MAX_FUNCTION_ARGS
                && !NOT_FUNCTIONS
                    .iter()
                    .any(|n| crate::ast::ident::is_call_to(f, n))
            {
                return ControlFlow::Break(format!(
                    "cannot pass more than {MAX_FUNCTION_ARGS} arguments to a function \
                     ({} to {})",
                    list.args.len(),
                    tarn_catalog::shown(&f.name.to_string())
                ));
            }
            ControlFlow::Continue(())
        }
    }
    match stmt.visit(&mut Widths) {
        ControlFlow::Break(m) => Err(crate::Error::BadRequest(m)),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// PostgreSQL's `MaxTupleAttributeNumber`, the widest SELECT list it plans.
const MAX_TARGET_LIST: usize = 1664;
/// PostgreSQL's `FUNC_MAX_ARGS`.
const MAX_FUNCTION_ARGS: usize = 100;
/// Calls that are constructs in PostgreSQL, not functions, which take any number of
/// arguments there (`COALESCE`, `GREATEST`, `LEAST`, `ROW`), and DataFusion's
/// constructors of records and arrays, which stand for `ROW(…)` and `ARRAY[…]`.
const NOT_FUNCTIONS: [&str; 7] = [
    "coalesce",
    "greatest",
    "least",
    "row",
    "struct",
    "named_struct",
    "make_array",
];

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn depth_ok(sql: &str) -> bool {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .unwrap_or_default();
        check(&tokens).is_ok()
    }

    #[test]
    fn chains_count_as_deep_as_they_parse() {
        let chain = |n: usize, op: &str| format!("SELECT {}", vec!["1"; n].join(op));
        assert!(depth_ok(&chain(250, "+")));
        assert!(!depth_ok(&chain(300, "+")));
        assert!(!depth_ok(&chain(300, " OR ")));
        let conj = |n: usize| {
            (0..n)
                .map(|i| format!("c{i} = {i}"))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        assert!(depth_ok(&format!("SELECT 1 WHERE {}", conj(250))));
        assert!(!depth_ok(&format!("SELECT 1 WHERE {}", conj(300))));
        // Lists are flat, however long.
        let list = (0..100_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        assert!(depth_ok(&format!("SELECT 1 WHERE a IN ({list})")));
        assert!(depth_ok(&format!("SELECT {list}")));
        let rows = vec!["(1, 'a' || 'b', 2 + 3)"; 50_000].join(", ");
        assert!(depth_ok(&format!("INSERT INTO t VALUES {rows}")));
        // Joins and set operations nest.
        assert!(!depth_ok(&vec!["SELECT 1"; 300].join(" UNION ")));
        assert!(!depth_ok(&format!(
            "SELECT 1 FROM {}",
            vec!["t"; 300].join(", ")
        )));
        assert!(depth_ok(&format!(
            "SELECT 1 FROM {}",
            vec!["t"; 50].join(", ")
        )));
        // Groups add up.
        let nested = format!("SELECT {}1{}", "(1 + ".repeat(200), ")".repeat(200));
        assert!(!depth_ok(&nested));
        let case = format!(
            "SELECT CASE {} END",
            (0..10_000)
                .map(|i| format!("WHEN x = {i} THEN {i} + 1"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        assert!(depth_ok(&case));
        // Clause words that continue an expression do not reset the count.
        let within = vec!["f() WITHIN GROUP (ORDER BY 1)"; 300].join(" + ");
        assert!(!depth_ok(&format!("SELECT {within}")));
        let distinct = vec!["a"; 300].join(" IS DISTINCT FROM ");
        assert!(!depth_ok(&format!("SELECT 1 WHERE {distinct}")));
        let distinct = vec!["a"; 300].join(" IS NOT DISTINCT FROM ");
        assert!(!depth_ok(&format!("SELECT 1 WHERE {distinct}")));
        assert!(depth_ok(
            "SELECT DISTINCT a FROM t WHERE a IS NOT DISTINCT FROM b"
        ));
        // An empty DISTINCT projection still opens a FROM list.
        let tables = vec!["t"; 300].join(", ");
        assert!(!depth_ok(&format!("SELECT DISTINCT FROM {tables}")));
        // Keywords used as names do not reset anything.
        let names = vec!["t.where"; 300].join(" + ");
        assert!(!depth_ok(&format!("SELECT {names} FROM t")));
        let aliased = vec!["t AS set"; 300].join(", ");
        assert!(!depth_ok(&format!("SELECT 1 FROM {aliased}")));
        // Common table expressions that each read the one before.
        let ctes = (1..300)
            .map(|i| format!("c{i} AS (SELECT * FROM c{})", i - 1))
            .collect::<Vec<_>>()
            .join(", ");
        assert!(!depth_ok(&format!(
            "WITH c0 AS (SELECT 1), {ctes} SELECT * FROM c299"
        )));
        assert!(depth_ok(
            "WITH a AS (SELECT 1), b AS (SELECT 2) SELECT * FROM a, b"
        ));
        // Deep chains in many columns cost the square of their length each.
        let plus = vec!["1"; 250].join(" + ");
        assert!(depth_ok(&format!(
            "SELECT {}",
            [plus.as_str(); 7].join(", ")
        )));
        assert!(!depth_ok(&format!(
            "SELECT {}",
            [plus.as_str(); 20].join(", ")
        )));
        // What is nested under a chain is typed again by each operator above it.
        let wide = vec!["c"; 3000].join(", ");
        let deep = format!("SELECT coalesce({wide}) {}", " + c".repeat(250));
        assert!(!depth_ok(&deep));
        let right = format!(
            "SELECT {}coalesce({wide}){}",
            "c + (".repeat(150),
            ")".repeat(150)
        );
        assert!(!depth_ok(&right));
        let called = format!(
            "SELECT {}coalesce({wide}){}",
            "abs(".repeat(150),
            ")".repeat(150)
        );
        assert!(!depth_ok(&called));
        // Lists of values are typed once.
        let values = vec!["1"; 100_000].join(", ");
        let ands = vec!["g <> 1"; 200].join(" AND ");
        assert!(depth_ok(&format!(
            "SELECT 1 WHERE g IN ({values}) AND {ands}"
        )));
        assert!(depth_ok(&format!(
            "SELECT 1 WHERE g = ANY(ARRAY[{values}]) AND {ands}"
        )));
        let terms = (0..250)
            .map(|i| format!("lower(c{i}) = 'x{i}'"))
            .collect::<Vec<_>>()
            .join(" AND ");
        assert!(depth_ok(&format!("SELECT 1 WHERE {terms}")));
        // A `||` chain costs as other operators do (a jsonb or array chain nests).
        let concat = vec!["'a'"; 250].join(" || ");
        assert!(depth_ok(&format!(
            "SELECT {}",
            [concat.as_str(); 4].join(", ")
        )));
        assert!(!depth_ok(&format!(
            "SELECT {}",
            vec![concat.as_str(); 40].join(", ")
        )));
        // An operator's operands lie within its run since the last AND/OR: boolean
        // chains of qualified names and casts pass.
        let ands = (0..250)
            .map(|i| format!("k.b <> 'x{i}'::text"))
            .collect::<Vec<_>>()
            .join(" AND ");
        assert!(depth_ok(&format!("SELECT * FROM ws.k WHERE {ands}")));
        let ors = (0..250)
            .map(|i| format!("(k.a = {i} AND k.b = 'k{i}' AND k.c = {i})"))
            .collect::<Vec<_>>()
            .join(" OR ");
        assert!(depth_ok(&format!("SELECT * FROM ws.k WHERE {ors}")));
        // What is nested in a list of values is typed as anywhere.
        let nested = format!(
            "SELECT {}1{}",
            "cardinality(ARRAY[".repeat(100),
            "])".repeat(100)
        );
        assert!(!depth_ok(&nested));
        let subquery = format!(
            "SELECT 1 WHERE c IN (SELECT {})",
            vec!["c"; 3000].join(" + ")
        );
        assert!(!depth_ok(&subquery));
        let eq = vec!["c"; 250].join(" = ");
        assert!(!depth_ok(&format!(
            "SELECT {}",
            vec![eq.as_str(); 1600].join(", ")
        )));
        let short = vec!["c"; 20].join(" = ");
        assert!(depth_ok(&format!(
            "SELECT {}",
            vec![short.as_str(); 1600].join(", ")
        )));
        let columns = (0..300)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        assert!(depth_ok(&format!(
            "WITH a AS (SELECT 1) SELECT {columns} FROM a"
        )));
    }
}
