//! The two template languages of tool definitions, rendered at call time.
//!
//! `${VAR}` names an environment variable (a secret, a base URL): manifests keep the reference and the
//! runtime resolves it here, so no secret is ever written into a build. `{{input.path.to.field}}` and
//! `{{input}}` place (parts of) the call's input into an HTTP tool's URL, headers and body. `$${` is a
//! literal `${`; `${` not followed by a variable name and `}` is left as written, so shell forms like
//! `${x:-y}` pass through untouched.

use std::collections::BTreeSet;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use super::error::ToolError;

/// Characters encoded when an input value is placed in a URL: everything but RFC 3986 unreserved.
const URL_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Whether `name` is a valid environment variable name.
fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Resolves `${VAR}` references in `text`; an unset variable is an error naming `place`.
pub(crate) fn expand_env(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    place: &str,
) -> Result<String, ToolError> {
    expand_vars(text, lookup).map_err(|name| ToolError::UnsetVar {
        name,
        place: place.to_owned(),
    })
}

/// Why a command-line argument could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArgvVar {
    /// The variable is not set.
    Unset(String),
    /// The variable is a secret (see [`crate::redact::is_secret_name`]): a command line is readable
    /// by every user of the machine, so secrets go by environment instead.
    Secret(String),
}

/// Resolves `${VAR}` references in one argument of a command line: only variables that are not
/// secrets (the call's own `EVE_*` protocol variables, `HOME`, `PATH`…) may appear there.
pub(crate) fn expand_argv_vars(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ArgvVar> {
    let secret = std::cell::Cell::new(None);
    let result = expand_vars(text, &|name| {
        if crate::redact::is_secret_name(name) {
            secret.set(Some(name.to_owned()));
            None
        } else {
            lookup(name)
        }
    });
    match (result, secret.take()) {
        (Err(_), Some(name)) => Err(ArgvVar::Secret(name)),
        (Err(name), None) => Err(ArgvVar::Unset(name)),
        (Ok(text), _) => Ok(text),
    }
}

/// [`expand_argv_vars`] for a tool's command line, with errors naming `place`.
pub(crate) fn expand_argv(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    place: &str,
) -> Result<String, ToolError> {
    expand_argv_vars(text, lookup).map_err(|e| match e {
        ArgvVar::Unset(name) => ToolError::UnsetVar {
            name,
            place: place.to_owned(),
        },
        ArgvVar::Secret(name) => ToolError::SecretInArgv {
            name,
            place: place.to_owned(),
        },
    })
}

/// Resolves `${VAR}` references in `text` (`$${` is a literal `${`; `$` before anything else is
/// kept); the error is the name of the first unset variable. Shared by tools and MCP connections.
pub(crate) fn expand_vars(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
            continue;
        }
        if let Some(after) = tail.strip_prefix("${")
            && let Some(end) = after.find('}')
            && is_var_name(&after[..end])
        {
            let name = &after[..end];
            out.push_str(&lookup(name).ok_or_else(|| name.to_owned())?);
            rest = &after[end + 1..];
            continue;
        }
        out.push('$');
        rest = &tail[1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Looks up `input.a.b.0` (the part after `input`, already split) in the input.
fn lookup_input<'v>(input: &'v Value, path: &str) -> Option<&'v Value> {
    if path.is_empty() {
        return Some(input);
    }
    path.split('.')
        .try_fold(input, |value, segment| match value {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
}

/// Parses the expression of a `{{ ... }}` reference into the path after `input`.
fn input_path<'e>(expr: &'e str, place: &str) -> Result<&'e str, ToolError> {
    let expr = expr.trim();
    if expr == "input" {
        return Ok("");
    }
    match expr.strip_prefix("input.") {
        Some(path) if !path.is_empty() => Ok(path),
        _ => Err(ToolError::UnknownTemplate {
            reference: expr.to_owned(),
            place: place.to_owned(),
        }),
    }
}

/// A value as it appears inside a string: strings raw, `null` and missing values empty, anything
/// else as compact JSON.
pub(crate) fn value_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Renders a string template: `{{input...}}` references and `${VAR}` references.
///
/// Input values are percent-encoded when `url_encode` is set; environment values never are (they are
/// the author's, such as a base URL). Top-level input fields that were referenced are added to `used`.
pub(crate) fn render(
    template: &str,
    input: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
    url_encode: bool,
    place: &str,
    used: &mut BTreeSet<String>,
) -> Result<String, ToolError> {
    render_spans(template, input, lookup, url_encode, place, used, None)
}

/// Renders a URL template ([`render`] with every input value percent-encoded), then checks the
/// path: an input value is one segment (`/` in it is encoded), and a segment that an input value
/// helped make may not be `.` or `..` (written plainly or as `%2e`), which a URL parser would
/// resolve into another folder of the server.
pub(crate) fn render_url(
    template: &str,
    input: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
    used: &mut BTreeSet<String>,
) -> Result<String, ToolError> {
    let mut spans = Vec::new();
    let url = render_spans(template, input, lookup, true, "url", used, Some(&mut spans))?;
    let (start, end) = path_range(&url);
    let mut at = start;
    for segment in url[start..end].split('/') {
        let seg_end = at + segment.len();
        let touched = spans
            .iter()
            .find(|(from, to, _)| from < to && *from < seg_end && *to > at);
        if let Some((_, _, field)) = touched
            && is_dot_segment(segment)
        {
            return Err(ToolError::PathSegment {
                field: field.clone(),
                segment: segment.to_owned(),
            });
        }
        at = seg_end + 1;
    }
    Ok(url)
}

/// Where the path of an absolute URL string starts and ends (after the authority, before `?` or
/// `#`); an empty range when there is no `scheme://`.
fn path_range(url: &str) -> (usize, usize) {
    let Some(authority) = url.find("://").map(|i| i + 3) else {
        return (url.len(), url.len());
    };
    let start = url[authority..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority + i);
    let end = url[start..]
        .find(['?', '#'])
        .map_or(url.len(), |i| start + i);
    (start, end)
}

/// `.` or `..`, with any dot written `%2e` (as URL parsers read it).
fn is_dot_segment(segment: &str) -> bool {
    let lower = segment.to_ascii_lowercase();
    let dots = lower.replace("%2e", ".");
    dots == "." || dots == ".."
}

/// [`render`], noting where each input value landed in the output (byte range and field path)
/// when `spans` is given.
fn render_spans(
    template: &str,
    input: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
    url_encode: bool,
    place: &str,
    used: &mut BTreeSet<String>,
    mut spans: Option<&mut Vec<(usize, usize, String)>>,
) -> Result<String, ToolError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start + 2..].find("}}") else {
            break;
        };
        out.push_str(&expand_env(&rest[..start], lookup, place)?);
        let path = input_path(&rest[start + 2..start + 2 + len], place)?;
        if let Some(top) = path.split('.').next().filter(|t| !t.is_empty()) {
            used.insert(top.to_owned());
        }
        let text = value_text(lookup_input(input, path));
        let from = out.len();
        if url_encode {
            out.extend(utf8_percent_encode(&text, URL_VALUE));
        } else {
            out.push_str(&text);
        }
        if let Some(spans) = spans.as_deref_mut() {
            let field = if path.is_empty() { "input" } else { path };
            spans.push((from, out.len(), field.to_owned()));
        }
        rest = &rest[start + 2 + len + 2..];
    }
    out.push_str(&expand_env(rest, lookup, place)?);
    Ok(out)
}

/// The top-level input fields a template names (`{{input.team}}` → `team`), added to `out`.
/// `{{input}}` names none.
pub(crate) fn referenced_fields(template: &str, out: &mut BTreeSet<String>) {
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start + 2..].find("}}") else {
            break;
        };
        let expr = rest[start + 2..start + 2 + len].trim();
        if let Some(top) = expr
            .strip_prefix("input.")
            .and_then(|p| p.split('.').next())
            .filter(|t| !t.is_empty())
        {
            out.insert(top.to_owned());
        }
        rest = &rest[start + 2 + len + 2..];
    }
}

/// [`referenced_fields`] of every string in a JSON body template.
pub(crate) fn referenced_fields_json(template: &Value, out: &mut BTreeSet<String>) {
    match template {
        Value::String(s) => referenced_fields(s, out),
        Value::Array(items) => items.iter().for_each(|i| referenced_fields_json(i, out)),
        Value::Object(map) => map.values().for_each(|v| referenced_fields_json(v, out)),
        _ => {}
    }
}

/// Renders a JSON body template: every string is a template, and a string that is exactly one
/// `{{input.x}}` reference becomes x's JSON value (missing → `null`).
pub(crate) fn render_json(
    template: &Value,
    input: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
    used: &mut BTreeSet<String>,
) -> Result<Value, ToolError> {
    Ok(match template {
        Value::String(s) => {
            let trimmed = s.trim();
            let whole = trimmed
                .strip_prefix("{{")
                .and_then(|t| t.strip_suffix("}}"))
                .filter(|inner| !inner.contains("{{") && !inner.contains("}}"));
            match whole {
                Some(expr) => {
                    let path = input_path(expr, "body")?;
                    if let Some(top) = path.split('.').next().filter(|t| !t.is_empty()) {
                        used.insert(top.to_owned());
                    }
                    lookup_input(input, path).cloned().unwrap_or(Value::Null)
                }
                None => Value::String(render(s, input, lookup, false, "body", used)?),
            }
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| render_json(item, input, lookup, used))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render_json(v, input, lookup, used)?)))
                .collect::<Result<_, ToolError>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "BASE" => Some("http://h/x".into()),
            _ => None,
        }
    }

    #[test]
    fn env_references() {
        assert_eq!(
            expand_env("a ${TOKEN} b", &env, "argv").unwrap(),
            "a s3cret b"
        );
        assert_eq!(
            expand_env("$${TOKEN} $5 ${x:-y} $", &env, "argv").unwrap(),
            "${TOKEN} $5 ${x:-y} $"
        );
        let err = expand_env("${NOPE}", &env, "argv").unwrap_err().to_string();
        assert!(err.contains("`${NOPE}` in argv is not set"), "{err}");
    }

    #[test]
    fn input_references() {
        let input = json!({"city": "São Paulo/x", "n": 3, "tags": ["a", "b"], "o": {"k": null}});
        let mut used = BTreeSet::new();
        let url = render(
            "${BASE}/{{input.city}}?n={{ input.n }}&t={{input.tags.1}}&m={{input.missing}}",
            &input,
            &env,
            true,
            "url",
            &mut used,
        )
        .unwrap();
        assert_eq!(url, "http://h/x/S%C3%A3o%20Paulo%2Fx?n=3&t=b&m=");
        assert_eq!(
            used.into_iter().collect::<Vec<_>>(),
            ["city", "missing", "n", "tags"]
        );
        let mut used = BTreeSet::new();
        assert!(render("{{ctx.x}}", &input, &env, false, "url", &mut used).is_err());
        assert_eq!(
            render("{{ unclosed", &input, &env, false, "url", &mut used).unwrap(),
            "{{ unclosed"
        );
        let body = render_json(&json!({"a": "{{input.n}}", "b": "n={{input.n}}", "c": ["{{input.tags}}"], "d": "{{input}}"}), &input, &env, &mut used).unwrap();
        assert_eq!(
            body,
            json!({"a": 3, "b": "n=3", "c": [["a", "b"]], "d": input})
        );
    }

    #[test]
    fn url_path_values_are_one_segment_never_dot_or_dot_dot() {
        let url = |t: &str, input: Value| render_url(t, &input, &env, &mut BTreeSet::new());
        assert_eq!(
            url(
                "${BASE}/t/{{input.a}}/u?q={{input.a}}",
                json!({"a": "x/../y"})
            )
            .unwrap(),
            "http://h/x/t/x%2F..%2Fy/u?q=x%2F..%2Fy"
        );
        for (template, input) in [
            ("http://h/t/{{input.a}}/u", json!({"a": ".."})),
            ("http://h/t/{{input.a}}", json!({"a": "."})),
            (
                "http://h/t/{{input.a}}{{input.b}}/u",
                json!({"a": ".", "b": "."}),
            ),
            ("http://h/t/.{{input.a}}/u", json!({"a": "."})),
            ("http://h/t/%2e{{input.a}}/u", json!({"a": "."})),
        ] {
            let err = url(template, input).unwrap_err().to_string();
            assert!(err.contains("URL path segment"), "{template}: {err}");
        }
        // Dots in the query, the author's own dot segments, and other dotted values pass.
        for (template, input) in [
            ("http://h/t?q={{input.a}}", json!({"a": ".."})),
            ("http://h/../t/{{input.a}}", json!({"a": "x"})),
            ("http://h/t/{{input.a}}", json!({"a": "..."})),
            ("http://h/t/{{input.a}}.json", json!({"a": "."})),
        ] {
            assert!(url(template, input).is_ok(), "{template}");
        }
        let mut fields = BTreeSet::new();
        referenced_fields("{{input.a.b}} {{ input.c }} {{input}}", &mut fields);
        referenced_fields_json(&json!({"x": ["{{input.d}}"]}), &mut fields);
        assert_eq!(fields.into_iter().collect::<Vec<_>>(), ["a", "c", "d"]);
    }
}
