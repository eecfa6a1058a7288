//! Line edits of `agent.yaml` that keep the rest of the file as it is: comments, blank lines,
//! key order, quoting and line endings. Only a top-level key with a one-line scalar value is
//! changed (or added); anything else (a flow mapping document, a value spread over lines) is
//! refused with a message saying to edit the file by hand, never rewritten through a YAML
//! serializer (which would drop every comment).

/// Why a file could not be edited in place.
#[derive(Debug, PartialEq, Eq)]
pub struct EditError(pub String);

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EditError {}

/// Whether `value` can be written as a plain one-line YAML scalar that reads back as itself:
/// letters, digits and `._-/:@+` (no spaces, quotes, `#`, brackets or line breaks), starting with
/// a letter or digit, and no `: ` inside.
pub fn plain_scalar(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 200
        && value
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:@+".contains(c))
        && !value.ends_with(':')
}

/// The current one-line value of top-level `key`, unquoted; `None` when absent or not one line.
pub fn get_top_level(text: &str, key: &str) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let (_, line) = find_key(&lines, key)?;
    let span = value_span(line, key).ok()??;
    let raw = &line[span.0..span.1];
    Some(
        raw.trim_matches(|c| c == '"' || c == '\'')
            .trim()
            .to_owned(),
    )
}

/// `text` with top-level `key` set to `value` (a [`plain_scalar`]): its line changed in place
/// (a trailing comment kept, at its column when there is room), or, when the key is absent, a
/// new line after the line of `after` (a key) if present, else at the end. Every other byte is
/// kept.
pub fn set_top_level(
    text: &str,
    key: &str,
    value: &str,
    after: Option<&str>,
) -> Result<String, EditError> {
    if !plain_scalar(value) {
        return Err(EditError(format!(
            "`{value}` cannot be written as a plain YAML value (letters, digits and `._-/:@+` only)"
        )));
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if let Some(first) = lines
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---" && !l.starts_with('%'))
        && (first.starts_with('{') || first.starts_with('['))
    {
        return Err(EditError(
            "agent.yaml is written as one flow mapping (`{…}`); set the value by hand".to_owned(),
        ));
    }
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    if let Some((index, line)) = find_key(&lines, key) {
        let span = value_span(line, key)?;
        let new_line = match span {
            Some((start, end)) => {
                let rest = &line[end..];
                let comment = rest.find('#');
                match comment {
                    Some(hash) => {
                        // Keep the comment at its column when the new value leaves room.
                        let column = end + hash;
                        let room = column.saturating_sub(start + value.len());
                        let gap = room.max(1);
                        format!(
                            "{}{value}{}{}",
                            &line[..start],
                            " ".repeat(gap),
                            &rest[hash..]
                        )
                    }
                    None => format!("{}{value}{}", &line[..start], line_end(line)),
                }
            }
            None => {
                // `key:` with nothing after it (a null value), perhaps a comment.
                let colon = colon_after_key(line, key).unwrap_or(line.len());
                let rest = &line[colon + 1..];
                let trimmed = rest.trim_start_matches([' ', '\t']);
                if trimmed.starts_with('#') {
                    format!("{} {value} {trimmed}", &line[..=colon])
                } else {
                    format!("{} {value}{}", &line[..=colon], line_end(line))
                }
            }
        };
        let mut out = String::with_capacity(text.len() + value.len());
        for (i, l) in lines.iter().enumerate() {
            out.push_str(if i == index { &new_line } else { l });
        }
        return Ok(out);
    }
    let new_line = format!("{key}: {value}{eol}");
    let anchor = after.and_then(|a| find_key(&lines, a)).map(|(i, _)| i);
    let mut out = String::with_capacity(text.len() + new_line.len() + 1);
    match anchor {
        Some(at) => {
            for (i, l) in lines.iter().enumerate() {
                out.push_str(l);
                if i == at {
                    if !l.ends_with('\n') {
                        out.push_str(eol);
                    }
                    out.push_str(&new_line);
                }
            }
        }
        None => {
            out.push_str(text);
            if !text.is_empty() && !text.ends_with('\n') {
                out.push_str(eol);
            }
            out.push_str(&new_line);
        }
    }
    Ok(out)
}

/// The line ending of `line` (`\r\n`, `\n`, or none on a last line without one).
fn line_end(line: &str) -> &str {
    if line.ends_with("\r\n") {
        "\r\n"
    } else if line.ends_with('\n') {
        "\n"
    } else {
        ""
    }
}

/// The first top-level line setting `key` (plain, `"key"` or `'key'`), with its index.
fn find_key<'a>(lines: &[&'a str], key: &str) -> Option<(usize, &'a str)> {
    lines
        .iter()
        .enumerate()
        .find(|(_, l)| colon_after_key(l, key).is_some())
        .map(|(i, l)| (i, *l))
}

/// The byte index of the `:` after `key` when `line` is a top-level mapping entry for it.
fn colon_after_key(line: &str, key: &str) -> Option<usize> {
    let after = [key.to_owned(), format!("\"{key}\""), format!("'{key}'")]
        .into_iter()
        .find_map(|k| line.strip_prefix(k.as_str()).map(|rest| (k.len(), rest)))?;
    let (offset, rest) = after;
    let spaces = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    let rest = &rest[spaces..];
    let tail = rest.strip_prefix(':')?;
    (tail.is_empty() || tail.starts_with([' ', '\t', '\r', '\n'])).then_some(offset + spaces)
}

/// Where the one-line value of `key` on `line` lies (byte range), `None` when the line has no
/// value (`key:` alone or followed by a comment); an error when the value is not one line (a
/// block scalar, a flow collection, an unterminated quote) or an anchor, alias or tag.
fn value_span(line: &str, key: &str) -> Result<Option<(usize, usize)>, EditError> {
    let hand = |what: &str| {
        Err(EditError(format!(
            "`{key}:` in agent.yaml is {what}; set it by hand"
        )))
    };
    let Some(colon) = colon_after_key(line, key) else {
        return Ok(None);
    };
    let body = &line[colon + 1..];
    let lead = body.len() - body.trim_start_matches([' ', '\t']).len();
    let start = colon + 1 + lead;
    let value = line[start..].trim_end_matches(['\r', '\n']);
    if value.is_empty() || value.starts_with('#') {
        return Ok(None);
    }
    match value.chars().next() {
        Some('|' | '>') => return hand("a block scalar"),
        Some('{' | '[') => return hand("a flow collection"),
        Some('&' | '*' | '!') => return hand("an anchor, alias or tag"),
        Some(q @ ('"' | '\'')) => {
            let Some(close) = value[1..].find(q) else {
                return hand("a quoted value that goes on over lines");
            };
            return Ok(Some((start, start + close + 2)));
        }
        _ => {}
    }
    // A plain scalar ends at ` #` (a comment) or the end of the line, trailing blanks excluded.
    let end = value
        .find(" #")
        .or_else(|| value.find("\t#"))
        .unwrap_or(value.len());
    let end = value[..end].trim_end_matches([' ', '\t']).len();
    Ok(Some((start, start + end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMENTED: &str = "# Agent settings.\n#\n# model: provider/name.\nmodel: mock/echo          # offline\n\nlimits:\n  max_steps_per_turn: 20   # model: not this one\n";

    #[test]
    fn changes_only_the_value_and_keeps_the_comment_column() {
        let out = set_top_level(COMMENTED, "model", "openai/gpt-4.1", None).unwrap();
        assert_eq!(
            out,
            COMMENTED.replace(
                "model: mock/echo          # offline",
                "model: openai/gpt-4.1     # offline"
            )
        );
        let long = "vllm/meta-llama/Llama-3.1-8B-Instruct";
        let out = set_top_level(COMMENTED, "model", long, None).unwrap();
        assert!(out.contains(&format!("model: {long} # offline\n")), "{out}");
    }

    #[test]
    fn adds_a_missing_key_after_its_anchor_or_at_the_end() {
        let out = set_top_level(COMMENTED, "reasoning", "high", Some("model")).unwrap();
        assert_eq!(
            out,
            COMMENTED.replace("# offline\n", "# offline\nreasoning: high\n")
        );
        let out = set_top_level("limits: {}", "model", "mock/echo", None).unwrap();
        assert_eq!(out, "limits: {}\nmodel: mock/echo\n");
        assert_eq!(
            set_top_level("", "model", "mock/echo", None).unwrap(),
            "model: mock/echo\n"
        );
    }

    #[test]
    fn keeps_crlf_quotes_and_null_values() {
        let out = set_top_level("a: 1\r\nmodel: x/y\r\n", "model", "mock/echo", None).unwrap();
        assert_eq!(out, "a: 1\r\nmodel: mock/echo\r\n");
        let out = set_top_level("\"model\": 'x/y' # c\n", "model", "mock/echo", None).unwrap();
        assert_eq!(out, "\"model\": mock/echo # c\n");
        let out = set_top_level("model:   # none yet\n", "model", "mock/echo", None).unwrap();
        assert_eq!(out, "model: mock/echo # none yet\n");
        assert_eq!(
            get_top_level("model: 'x/y' # c\n", "model").as_deref(),
            Some("x/y")
        );
    }

    #[test]
    fn refuses_what_it_cannot_edit_in_place() {
        assert!(set_top_level("{model: x/y}\n", "model", "mock/echo", None).is_err());
        assert!(set_top_level("model: |\n  x/y\n", "model", "mock/echo", None).is_err());
        assert!(set_top_level("model: \"x/y\n", "model", "mock/echo", None).is_err());
        for bad in ["a b", "x\ny: z", "#x", "x #y", "{x}", "a: b", ""] {
            assert!(
                set_top_level("model: x/y\n", "model", bad, None).is_err(),
                "{bad}"
            );
        }
        // An indented `model:` belongs to another mapping.
        let out = set_top_level("critic:\n  model: x/y\n", "model", "mock/echo", None).unwrap();
        assert_eq!(out, "critic:\n  model: x/y\nmodel: mock/echo\n");
    }
}
