//! `to_char(value, template)` with PostgreSQL's templates. DataFusion's `to_char` reads
//! its format as chrono's `strftime` (`%Y-%m-%d`), so the template a PostgreSQL user
//! writes came back as itself: `to_char(now(), 'YYYY')` was the text `YYYY`. A literal
//! template without a `%` is read as PostgreSQL's and written as the `strftime` format
//! that makes the same text; one with a `%` is left as it is (a `strftime` format, as
//! before). A pattern PostgreSQL has and this does not translate (`Q`, `WW`, `J`, …) is a
//! 400 naming it, not text that looks right and is not.

use datafusion::sql::sqlparser::ast::{
    self as ast, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value,
};

use crate::error::{Result, bad};

/// PostgreSQL's template patterns this reads, longest first, each with its `strftime`
/// form and its form under `FM` (fill mode: no padding). Those whose output has no case
/// match in any case (`yyyy` is `YYYY`, as in PostgreSQL); the others (`Month`,
/// `MONTH`) only as written here.
const PATTERNS: &[(&str, &str, &str)] = &[
    ("HH24", "%H", "%-H"),
    ("HH12", "%I", "%-I"),
    ("YYYY", "%Y", "%Y"),
    ("MONTH", "%B", "%B"),
    ("Month", "%B", "%B"),
    ("month", "%B", "%B"),
    ("A.M.", "%p", "%p"),
    ("P.M.", "%p", "%p"),
    ("a.m.", "%P", "%P"),
    ("p.m.", "%P", "%P"),
    ("DDD", "%j", "%-j"),
    ("MON", "%b", "%b"),
    ("Mon", "%b", "%b"),
    ("mon", "%b", "%b"),
    ("DAY", "%A", "%A"),
    ("Day", "%A", "%A"),
    ("day", "%A", "%A"),
    ("HH", "%I", "%-I"),
    ("YY", "%y", "%-y"),
    ("MM", "%m", "%-m"),
    ("DD", "%d", "%-d"),
    ("MI", "%M", "%-M"),
    ("SS", "%S", "%-S"),
    ("MS", "%3f", "%3f"),
    ("US", "%6f", "%6f"),
    ("AM", "%p", "%p"),
    ("PM", "%p", "%p"),
    ("am", "%P", "%P"),
    ("pm", "%P", "%P"),
    ("DY", "%a", "%a"),
    ("Dy", "%a", "%a"),
    ("dy", "%a", "%a"),
    ("TZ", "%Z", "%Z"),
    ("tz", "%Z", "%Z"),
];

/// PostgreSQL's patterns not translated (refused, so that none passes as literal text).
/// Those of more than one letter match in any case; single letters only in capitals
/// (a lowercase letter is taken for text).
const UNSUPPORTED: &[&str] = &[
    "Y,YYY", "IYYY", "SSSSS", "SSSS", "IYY", "YYY", "TZH", "TZM", "B.C.", "A.D.", "IW", "ID", "IY",
    "WW", "CC", "RM", "OF", "BC", "AD", "TH", "Q", "J", "W", "D", "I", "Y",
];

/// Whether `rest` starts with `pattern`, in any case.
fn starts_with_any_case(rest: &str, pattern: &str) -> bool {
    rest.get(..pattern.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(pattern))
}

/// Whether a pattern's output has no case, so that it matches in any case.
fn caseless(pattern: &str) -> bool {
    !pattern.chars().any(|c| c.is_ascii_lowercase())
        && !matches!(
            pattern,
            "MONTH" | "MON" | "DAY" | "DY" | "AM" | "PM" | "A.M." | "P.M."
        )
}

/// PostgreSQL's `template` as a `strftime` format; an error naming a pattern it has that
/// is not translated.
pub(crate) fn strftime(template: &str) -> Result<String> {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    let mut fill = false;
    'scan: while let Some(c) = rest.chars().next() {
        // Text in double quotes is written as it is.
        if c == '"' {
            let end = rest[1..].find('"').map_or(rest.len(), |i| i + 2);
            out.push_str(&rest[1..end.saturating_sub(1).max(1)].replace('%', "%%"));
            rest = &rest[end..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("FM").or_else(|| rest.strip_prefix("fm")) {
            fill = true;
            rest = after;
            continue;
        }
        for (pattern, plain, filled) in PATTERNS {
            let found = if caseless(pattern) {
                starts_with_any_case(rest, pattern)
            } else {
                rest.starts_with(pattern)
            };
            if found {
                out.push_str(if fill { filled } else { plain });
                fill = false;
                rest = &rest[pattern.len()..];
                continue 'scan;
            }
        }
        for pattern in UNSUPPORTED {
            let found = if pattern.len() > 1 {
                starts_with_any_case(rest, pattern)
            } else {
                rest.starts_with(pattern)
            };
            if found {
                return bad(format!(
                    "to_char: the template pattern \"{pattern}\" is not supported (supported: \
                     YYYY YY MM MON Mon Month DD DDD DY Dy Day HH HH12 HH24 MI SS MS US AM PM \
                     TZ, FM, and \"quoted text\")"
                ));
            }
        }
        if c == '%' {
            out.push_str("%%");
        } else {
            out.push(c);
        }
        fill = false;
        rest = &rest[c.len_utf8()..];
    }
    Ok(out)
}

/// Every `to_char(x, 'template')` of `stmt` whose template is a literal without `%`,
/// with the template written as `strftime` (see the module documentation).
pub(crate) fn pg_templates(stmt: &mut ast::Statement) -> Result<()> {
    let mut failed = None;
    let _ = ast::visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && crate::ast::ident::is_call_to(f, "to_char")
            && let FunctionArguments::List(list) = &mut f.args
            && list.args.len() == 2
            && let FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v))) = &mut list.args[1]
            && let Value::SingleQuotedString(template) = &mut v.value
            && !template.contains('%')
        {
            match strftime(template) {
                Ok(format) => *template = format,
                Err(err) => {
                    failed = Some(err);
                    return std::ops::ControlFlow::Break(());
                }
            }
        }
        std::ops::ControlFlow::Continue(())
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn templates_become_strftime_formats() {
        for (template, format) in [
            ("YYYY-MM-DD HH24:MI:SS", "%Y-%m-%d %H:%M:%S"),
            ("FMDD Month YYYY", "%-d %B %Y"),
            ("HH12:MI AM", "%I:%M %p"),
            ("\"Year\" YYYY, 100%", "Year %Y, 100%%"),
            ("Dy, DD Mon YY.MS.US", "%a, %d %b %y.%3f.%6f"),
            ("DDD", "%j"),
            ("yyyy-mm-dd hh24:mi", "%Y-%m-%d %H:%M"),
            ("Updated: YYYY", "Updated: %Y"),
        ] {
            assert_eq!(strftime(template).expect(template), format, "{template}");
        }
        for template in ["Q", "YYYY-WW", "J", "IYYY"] {
            assert!(strftime(template).is_err(), "{template}");
        }
    }
}
