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

use crate::error::Result;

/// PostgreSQL's template patterns this reads, each with its `strftime` form and its
/// form under `FM` (fill mode: no padding). Those whose output has no case match in
/// any case (`yyyy` is `YYYY`, as in PostgreSQL); those with letters (`Mon`, `Dy`,
/// `AM`, `am`) only as written. `Month` and `Day` are read only under `FM`: without it
/// PostgreSQL pads them to nine characters, which `strftime` cannot.
const PATTERNS: &[(&str, &str, &str)] = &[
    ("HH24", "%H", "%-H"),
    ("HH12", "%I", "%-I"),
    ("YYYY", "%Y", "%Y"),
    ("Month", "", "%B"),
    ("DDD", "%j", "%-j"),
    ("Mon", "%b", "%b"),
    ("Day", "", "%A"),
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
    ("Dy", "%a", "%a"),
];

/// PostgreSQL's patterns (and prefixes) not translated: refused, so that none passes as
/// literal text or as a shorter pattern (`SSSS` is not `SS` twice). Upper- and
/// lower-case month and day names are among them: `strftime` writes them capitalized
/// only. Those of letters only and more than one letter match in any case unless
/// their case is what they mean; single letters only in capitals (a lowercase letter
/// is taken for text).
const UNSUPPORTED: &[&str] = &[
    "Y,YYY", "SSSSS", "MONTH", "month", "IYYY", "SSSS", "A.M.", "P.M.", "a.m.", "p.m.", "B.C.",
    "A.D.", "b.c.", "a.d.", "IYY", "YYY", "TZH", "TZM", "TZ", "tz", "MON", "mon", "DAY", "day",
    "IW", "ID", "IY", "WW", "CC", "RM", "rm", "OF", "BC", "AD", "bc", "ad", "DY", "dy", "TM", "FX",
    "Q", "J", "W", "D", "I", "Y",
];

/// Patterns whose case is what they mean, matched only as written.
fn cased(pattern: &str) -> bool {
    pattern.chars().any(|c| c.is_ascii_lowercase())
        || matches!(
            pattern,
            "MONTH" | "MON" | "DAY" | "DY" | "AM" | "PM" | "TM" | "FX" | "A.M." | "P.M."
        )
        || pattern.len() == 1
}

/// Whether `rest` starts with `pattern`, in any case unless its case matters.
fn starts_with(rest: &str, pattern: &str) -> bool {
    if cased(pattern) {
        rest.starts_with(pattern)
    } else {
        rest.get(..pattern.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(pattern))
    }
}

fn refused(pattern: &str) -> crate::error::Error {
    crate::error::Error::BadRequest(format!(
        "to_char: the template pattern \"{pattern}\" is not supported (supported: YYYY YY MM \
         Mon FMMonth DD DDD Dy FMDay HH HH12 HH24 MI SS MS US AM PM am pm, the FM prefix, \
         and \"quoted text\")"
    ))
}

/// Writes `c` to a `strftime` format as itself (`%` escaped).
fn literal(out: &mut String, c: char) {
    if c == '%' {
        out.push_str("%%");
    } else {
        out.push(c);
    }
}

/// PostgreSQL's `template` as a `strftime` format; an error naming a pattern it has that
/// is not translated.
pub(crate) fn strftime(template: &str) -> Result<String> {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    let mut fill = false;
    'scan: while let Some(c) = rest.chars().next() {
        // Text in double quotes is written as it is (`\"` is a quote in it); an
        // unclosed quote runs to the end.
        if c == '"' {
            let mut chars = rest[1..].char_indices();
            let mut end = rest.len();
            while let Some((i, q)) = chars.next() {
                match q {
                    '\\' => {
                        if let Some((_, e)) = chars.next() {
                            literal(&mut out, e);
                        }
                    }
                    '"' => {
                        end = 1 + i + 1;
                        break;
                    }
                    q => literal(&mut out, q),
                }
            }
            rest = &rest[end..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("FM").or_else(|| rest.strip_prefix("fm")) {
            fill = true;
            rest = after;
            continue;
        }
        // The longest pattern that matches, supported or not.
        let supported = PATTERNS
            .iter()
            .filter(|(p, ..)| starts_with(rest, p))
            .max_by_key(|(p, ..)| p.len());
        let unsupported = UNSUPPORTED
            .iter()
            .filter(|p| starts_with(rest, p))
            .max_by_key(|p| p.len());
        match (supported, unsupported) {
            (Some((pattern, plain, filled)), u) if u.is_none_or(|u| u.len() <= pattern.len()) => {
                let form = if fill { filled } else { plain };
                if form.is_empty() {
                    return Err(crate::error::Error::BadRequest(format!(
                        "to_char: \"{pattern}\" without FM pads to nine characters, which is \
                         not supported; write FM{pattern}"
                    )));
                }
                out.push_str(form);
                fill = false;
                rest = &rest[pattern.len()..];
                // PostgreSQL's suffixes after a pattern (ordinals, spelled out).
                for suffix in ["TH", "th", "SP"] {
                    if rest.starts_with(suffix) {
                        return Err(refused(suffix));
                    }
                }
                continue 'scan;
            }
            (_, Some(pattern)) => return Err(refused(pattern)),
            _ => {}
        }
        literal(&mut out, c);
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
            ("FMDD FMMonth YYYY", "%-d %B %Y"),
            ("HH12:MI AM", "%I:%M %p"),
            ("\"Year\" YYYY, 100%", "Year %Y, 100%%"),
            ("Dy, DD Mon YY.MS.US", "%a, %d %b %y.%3f.%6f"),
            ("DDD", "%j"),
            ("yyyy-mm-dd hh24:mi", "%Y-%m-%d %H:%M"),
            ("Updated: YYYY", "Updated: %Y"),
            ("\"a\\\"b\" YYYY", "a\"b %Y"),
            ("\"é", "é"),
            ("\"100%\"", "100%%"),
        ] {
            assert_eq!(strftime(template).expect(template), format, "{template}");
        }
        for template in [
            "Q",
            "YYYY-WW",
            "J",
            "IYYY",
            "SSSS",
            "SSSSS",
            "TZH",
            "MON",
            "DD-MON-YYYY",
            "month",
            "A.M.",
            "Month",
            "Day",
            "DDTH",
            "TMMonth",
            "FX",
        ] {
            assert!(strftime(template).is_err(), "{template}");
        }
    }
}
