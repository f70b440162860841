//! Reading a configuration's TOML into a [`PartitionConfig`], with errors a physicist reads:
//! serde's "invalid value: integer `-1`, expected usize" becomes "`dcm.slots` = -1: a whole
//! number >= 0 is needed", with the file and the line.
//!
//! toml stops at the first value it cannot take. To name every such value at once, the value
//! (or the unknown field) is blanked out of the text, line numbers kept, and the text read again,
//! until it reads or the error is one that blanking cannot step over (a syntax error, a
//! missing field): at most [`MAX_FIELD_ERRORS`] rounds. The field's path is found from the
//! error's byte span in the document as `toml_edit` parsed it (the same parser toml uses).

use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, Value};

use super::error::ConfigError;
use super::PartitionConfig;

/// Most field errors named in one reading.
pub const MAX_FIELD_ERRORS: usize = 32;

/// Parses `text`: the configuration, or every field error found (see the module docs).
pub(super) fn parse(text: &str, source_name: &str) -> Result<PartitionConfig, ConfigError> {
    let mut work = text.to_string();
    let mut errors = Vec::new();
    loop {
        let e = match toml::from_str::<PartitionConfig>(&work) {
            Ok(config) if errors.is_empty() => return Ok(config),
            Ok(_) => break,
            Err(e) => e,
        };
        let located = e
            .span()
            .and_then(|span| locate(&work, span.clone()).map(|l| (span, l)));
        let Some((span, loc)) = located else {
            // Not a field's error (syntax), or one we cannot place: toml's own words.
            if errors.is_empty() {
                return Err(ConfigError::Parse {
                    source_name: source_name.to_string(),
                    message: e.to_string().trim_end().to_string(),
                });
            }
            break;
        };
        if !loc.blankable && !errors.is_empty() {
            // A missing field or a whole table's error after a value was blanked may be the
            // blanking's own doing: not reported.
            break;
        }
        let message = e.message().trim_end();
        let value = snippet(&work[loc.value.clone()]);
        errors.push(ConfigError::Field {
            source_name: source_name.to_string(),
            line: work[..span.start.min(work.len())].matches('\n').count() + 1,
            problem: plain_words(message, &value, &loc.path),
            field: loc.path,
        });
        // Blanking helps only for a value or a field of its own: a missing field, or an error
        // of a whole table, would come back the same (or worse) after it.
        if !loc.blankable || errors.len() >= MAX_FIELD_ERRORS {
            break;
        }
        blank(&mut work, loc.blank);
    }
    Err(if errors.len() == 1 {
        errors.remove(0)
    } else {
        ConfigError::Many(errors)
    })
}

/// Where an error's span lies in the document.
#[derive(Debug)]
struct Located {
    /// The field's path (`dcm.slots`, `alarms[1].metric`, `ros.listen[2]`).
    path: String,
    /// The value's bytes (or the key's, for an unknown field).
    value: Range<usize>,
    /// The bytes to blank to step over it (the whole `key = value`).
    blank: Range<usize>,
    /// Whether blanking those bytes leaves a document that can be read on.
    blankable: bool,
}

/// The field of `text` whose key or value holds `span` (`None`: outside every field, or the
/// text does not parse as TOML at all).
fn locate(text: &str, span: Range<usize>) -> Option<Located> {
    match ImDocument::parse(text) {
        Ok(doc) => find_in_table(doc.as_table(), &span, ""),
        // toml_edit refuses some values toml reports as a field's (an integer too large):
        // the field from the line's key and the table above it.
        Err(_) => locate_by_line(text, span),
    }
}

/// The `key = value` line holding `span` and the nearest `[table]` above it; not blankable
/// (the document may not parse).
fn locate_by_line(text: &str, span: Range<usize>) -> Option<Located> {
    let start = text[..span.start.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let (key, value) = text[start..end].split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    let table = text[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| {
            l.trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim()
        });
    let value_start = end - value.len() + (value.len() - value.trim_start().len());
    Some(Located {
        path: join(table.unwrap_or(""), key),
        value: value_start..end,
        blank: start..end,
        blankable: false,
    })
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end.max(outer.start + 1)
}

fn find_in_table(table: &Table, span: &Range<usize>, path: &str) -> Option<Located> {
    for (key, item) in table.iter() {
        let here = join(path, key);
        let key_span = table.key(key).and_then(|k| k.span());
        match item {
            Item::Value(v) => {
                let value_span = v.span();
                let whole = match (&key_span, &value_span) {
                    (Some(k), Some(v)) => Some(k.start..v.end),
                    _ => None,
                };
                if let Some(found) = find_in_value(v, span, &here) {
                    return Some(Located {
                        blank: whole.unwrap_or(found.blank),
                        ..found
                    });
                }
                let hit = [&key_span, &value_span]
                    .iter()
                    .any(|s| s.as_ref().is_some_and(|s| contains(s, span)));
                if hit {
                    let whole = whole?;
                    return Some(Located {
                        path: here,
                        value: value_span.unwrap_or(whole.clone()),
                        blank: whole,
                        blankable: true,
                    });
                }
            }
            Item::Table(t) => {
                if let Some(found) = find_in_table(t, span, &here) {
                    return Some(found);
                }
                if t.span().is_some_and(|s| contains(&s, span))
                    || key_span.is_some_and(|s| contains(&s, span))
                {
                    let s = t.span().unwrap_or(span.clone());
                    return Some(Located {
                        path: here,
                        value: s.clone(),
                        blank: s,
                        blankable: false,
                    });
                }
            }
            Item::ArrayOfTables(a) => {
                for (i, t) in a.iter().enumerate() {
                    let entry = format!("{here}[{i}]");
                    if let Some(found) = find_in_table(t, span, &entry) {
                        return Some(found);
                    }
                    if let Some(s) = t.span().filter(|s| contains(s, span)) {
                        return Some(Located {
                            path: entry,
                            value: s.clone(),
                            blank: s,
                            blankable: false,
                        });
                    }
                }
            }
            Item::None => {}
        }
    }
    None
}

/// A place inside value `v` (an element of an array, a field of an inline table) holding
/// `span`; `None` when no part of it holds it more closely than `v` itself.
fn find_in_value(v: &Value, span: &Range<usize>, path: &str) -> Option<Located> {
    match v {
        Value::Array(a) => a.iter().enumerate().find_map(|(i, e)| {
            let s = e.span()?;
            let here = format!("{path}[{i}]");
            if !contains(&s, span) {
                return None;
            }
            find_in_value(e, span, &here).or(Some(Located {
                path: here,
                value: s.clone(),
                blank: s,
                // Blanking an element would leave a stray comma: the whole `key = [...]` is
                // blanked instead (the caller's `blank`).
                blankable: true,
            }))
        }),
        Value::InlineTable(t) => t.iter().find_map(|(k, e)| {
            let s = e.span()?;
            let here = join(path, k);
            if !contains(&s, span) {
                return None;
            }
            find_in_value(e, span, &here).or(Some(Located {
                path: here,
                value: s.clone(),
                blank: s,
                blankable: true,
            }))
        }),
        _ => None,
    }
}

/// Replaces `range` of `text` by spaces, keeping its line breaks (so lines keep their numbers).
fn blank(text: &mut String, range: Range<usize>) {
    let end = range.end.min(text.len());
    let start = range.start.min(end);
    let blanked: String = text[start..end]
        .chars()
        .map(|c| if c == '\n' || c == '\r' { c } else { ' ' })
        .collect();
    text.replace_range(start..end, &blanked);
}

/// A value as written, on one line, shortened.
fn snippet(raw: &str) -> String {
    let one: String = raw
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(80)
        .collect();
    if one.len() < raw.trim().len() && raw.trim().chars().count() > 80 {
        format!("{one}...")
    } else {
        one
    }
}

/// serde's and toml's `message` about `value` of field `path`, in plain words: what is wrong
/// and what is needed (see [`needed`]).
fn plain_words(message: &str, value: &str, path: &str) -> String {
    if let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
    {
        let expected = rest.rsplit_once(", expected ").map_or("", |(_, e)| e);
        return format!("= {value}: {} is needed", needed(expected));
    }
    if let Some(rest) = message.strip_prefix("invalid length ") {
        let expected = rest.split_once(", expected ").map_or("", |(_, e)| e);
        return format!("= {value}: {} is needed", needed(expected));
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (given, choices) = rest.split_once(", expected ").unwrap_or((rest, ""));
        return format!(
            "= {}: one of {} is needed",
            quote(given.trim_matches('`')),
            names(choices, true)
        );
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let choices = rest.split_once(", expected ").map_or("", |(_, c)| c);
        let section = path.rsplit_once('.').map_or("the file", |(s, _)| s);
        return format!(
            "is not a field of [{section}]; its fields are {}",
            names(choices, false)
        );
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        return format!(
            "needs the field {} (it has no default)",
            rest.trim_matches('`')
        );
    }
    if message.starts_with("number too large") || message.starts_with("number too small") {
        return format!("= {value}: {message}: a number within the field's range is needed");
    }
    if let Some(rest) = message.strip_prefix("duplicate field ") {
        return format!("is given twice ({})", rest.trim_matches('`'));
    }
    format!("= {value}: {message}")
}

/// A name as written in TOML, in quotes.
fn quote(name: &str) -> String {
    format!("\"{name}\"")
}

/// serde's list of names (``one of `a`, `b`, `c` `` or `` `a` or `b` ``) as `"a", "b", "c"`
/// (`quoted`) or `a, b, c`.
fn names(list: &str, quoted: bool) -> String {
    let list = list.strip_prefix("one of ").unwrap_or(list);
    let items: Vec<String> = list
        .split(", ")
        .flat_map(|s| s.split(" or "))
        .map(|s| s.trim().trim_matches('`'))
        .filter(|s| !s.is_empty())
        .map(|s| if quoted { quote(s) } else { s.to_string() })
        .collect();
    if items.is_empty() {
        "(none)".into()
    } else {
        items.join(", ")
    }
}

/// What serde's `expected` (a Rust type or serde's description) asks for, in plain words.
fn needed(expected: &str) -> String {
    let e = expected.trim();
    let words = match e {
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "u64" | "usize" => "a whole number >= 0",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number (such as 2, 0.5 or 1e6)",
        "a boolean" => "true or false",
        "a string" | "a borrowed string" => "text in quotes (\"...\")",
        "a sequence" => "a list in brackets ([a, b, ...])",
        "a map" => "a table of fields",
        "a character" => "one character in quotes",
        "option" => "a value",
        _ => {
            if let Some(n) = e
                .strip_prefix("an array of length ")
                .or_else(|| e.strip_prefix("a tuple of size "))
            {
                return format!("a list of {n} values in brackets ([a, b])");
            }
            if let Some(s) = e.strip_prefix("struct ") {
                return format!("a table of fields ({s})");
            }
            return e.to_string();
        }
    };
    words.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        parse(text, "t.toml").unwrap_err()
    }

    #[test]
    fn a_type_error_names_the_field_the_value_and_what_is_needed_in_words() {
        let e = err("[dcm]\nslots = -1\n").to_string();
        assert_eq!(
            e,
            "configuration t.toml, line 2: `dcm.slots` = -1: a whole number >= 0 is needed"
        );
        for (text, field, words) in [
            (
                "[dcm]\naccept_fraction = \"x\"\n",
                "`dcm.accept_fraction` = \"x\"",
                "a number",
            ),
            (
                "[ros]\nlisten = 3\n",
                "`ros.listen` = 3",
                "a list in brackets",
            ),
            (
                "[l1]\nrois_per_event = [1]\n",
                "`l1.rois_per_event` = [1]",
                "a list of 2 values",
            ),
            ("[dcm]\nslots = 1.5\n", "`dcm.slots` = 1.5", "whole number"),
            (
                "[control]\nrestart = 3\n",
                "`control.restart` = 3",
                "true or false",
            ),
            (
                "[ros]\nsubdetector = 300\n",
                "`ros.subdetector` = 300",
                "from 0 to 255",
            ),
            (
                "[transport]\nbase_port = 70000\n",
                "`transport.base_port` = 70000",
                "from 0 to 65535",
            ),
            (
                "[[alarms]]\nname = 3\n",
                "`alarms[0].name` = 3",
                "text in quotes",
            ),
            (
                "[dcm]\nslots = 99999999999999999999\n",
                "`dcm.slots`",
                "within the field's range",
            ),
            ("dcm = 3\n", "`dcm` = 3", "a table of fields"),
            (
                "[dcm]\nchecksum = \"md5\"\n",
                "`dcm.checksum` = \"md5\"",
                "one of \"none\", \"crc16\", \"adler32\"",
            ),
        ] {
            let e = err(text).to_string();
            assert!(
                e.contains(field) && e.contains(words) && e.contains("line "),
                "{text}: {e}"
            );
            assert!(!e.contains("usize") && !e.contains("expected"), "{e}");
        }
        let e = err("[dcm]\nslotz = 3\n").to_string();
        assert!(
            e.contains("`dcm.slotz` is not a field of [dcm]") && e.contains("slots"),
            "{e}"
        );
    }

    #[test]
    fn every_field_error_of_a_file_is_named_with_its_line() {
        let text = "[run]\nevents = -5\n\n[dcm]\nslots = \"many\"\nnodez = 2\n\
                    [ros]\nlisten = [\n  1,\n  2,\n]\nchannels = 4\n[l1]\nmode = \"laser\"\n";
        let e = err(text);
        let lines: Vec<String> = e.to_string().lines().map(String::from).collect();
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].contains("line 2: `run.events` = -5"), "{lines:#?}");
        assert!(
            lines[1].contains("line 5: `dcm.slots` = \"many\""),
            "{lines:#?}"
        );
        assert!(lines[2].contains("line 6: `dcm.nodez`"), "{lines:#?}");
        assert!(
            lines[3].contains("line 9: `ros.listen[0]` = 1"),
            "{lines:#?}"
        );
        assert!(
            lines[4].contains("line 14: `l1.mode` = \"laser\""),
            "{lines:#?}"
        );
        assert_eq!(
            e.fields(),
            [
                "run.events",
                "dcm.slots",
                "dcm.nodez",
                "ros.listen[0]",
                "l1.mode"
            ]
        );
    }

    #[test]
    fn syntax_errors_keep_tomls_words_and_blanking_never_invents_errors() {
        let e = err("[dcm\nslots = 3\n");
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
        // A bad value in a list of tables is blanked; the missing field that leaves is not
        // reported on top of it.
        let e = err("[[alarms]]\nname = 3\nmetric = \"l1_rate_hz\"\nbelow = 1.0\n");
        assert_eq!(e.errors().len(), 1, "{e}");
        let e = err("[[alarms]]\nmetric = \"l1_rate_hz\"\n").to_string();
        assert!(
            e.contains("alarms[0]") && e.contains("needs the field name"),
            "{e}"
        );
        assert!(parse("[dcm]\nslots = 3\n", "t.toml").is_ok());
    }
}
