//! Typed reads of YAML fields with positioned diagnostics.
//!
//! A [`Fields`] wraps one parsed document and the file it came from. Each accessor reads one key,
//! reports a wrong type or value at the key's line, and returns `None` so compilation goes on and
//! collects every problem of the file in one pass.

use serde_json::{Map, Value};

use eve_discover::{Code, Diagnostic};

use crate::yaml::{Doc, escape_pointer};

/// Reads fields of one mapping in a document.
pub struct Fields<'a> {
    /// File path as shown in diagnostics.
    pub file: &'a str,
    /// The parsed document.
    pub doc: &'a Doc,
    /// JSON pointer of the mapping read (`""` for the document root).
    pub base: String,
    /// The mapping read; `None` for an empty one.
    map: Option<&'a Map<String, Value>>,
    diags: &'a mut Vec<Diagnostic>,
}

impl<'a> Fields<'a> {
    /// Reads the mapping at `base`. A null or missing document is an empty mapping; anything else
    /// that is not a mapping is reported.
    pub fn new(file: &'a str, doc: &'a Doc, base: &str, diags: &'a mut Vec<Diagnostic>) -> Self {
        let map = match doc.value.pointer(base).unwrap_or(&Value::Null) {
            Value::Object(m) => Some(m),
            Value::Null => None,
            other => {
                let mut d = Diagnostic::new(
                    Code::InvalidField,
                    file.to_owned(),
                    format!("expected a mapping of fields, found {}", kind(other)),
                )
                .help("write `key: value` lines");
                if let Some((l, c)) = doc.position(base) {
                    d = d.at(l, c);
                }
                diags.push(d);
                None
            }
        };
        Self {
            file,
            doc,
            base: base.to_owned(),
            map,
            diags,
        }
    }

    /// Pointer of `key` in this mapping.
    pub fn pointer(&self, key: &str) -> String {
        format!("{}/{}", self.base, escape_pointer(key))
    }

    /// Adds a diagnostic positioned at `key`'s value.
    pub fn report(&mut self, code: Code, key: &str, message: String, help: &str) {
        let pointer = self.pointer(key);
        self.report_at(code, &pointer, message, help);
    }

    /// Adds a diagnostic positioned at the node at `pointer`.
    pub fn report_at(&mut self, code: Code, pointer: &str, message: String, help: &str) {
        let mut d = Diagnostic::new(code, self.file.to_owned(), message);
        if !help.is_empty() {
            d = d.help(help.to_owned());
        }
        if let Some((l, c)) = self.doc.position(pointer) {
            d = d.at(l, c);
        }
        self.diags.push(d);
    }

    /// Adds a diagnostic not tied to a field.
    pub fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Whether `key` is present (and not null).
    pub fn has(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// The raw value of `key`.
    pub fn raw(&self, key: &str) -> Option<&Value> {
        self.map?.get(key).filter(|v| !v.is_null())
    }

    /// Warns about keys not in `known`, suggesting the closest known key.
    pub fn unknown_keys(&mut self, known: &[&str], what: &str) {
        let unknown: Vec<String> = self
            .map
            .into_iter()
            .flat_map(Map::keys)
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            let pointer = self.pointer(&key);
            let help = match closest(&key, known) {
                Some(s) => format!(
                    "did you mean `{s}`? {what} fields are: {}",
                    known.join(", ")
                ),
                None => format!("{what} fields are: {}", known.join(", ")),
            };
            let mut d = Diagnostic::new(
                Code::UnknownField,
                self.file.to_owned(),
                format!("unknown field `{key}`"),
            )
            .help(help);
            if let Some((l, c)) = self.doc.key_position(&pointer) {
                d = d.at(l, c);
            }
            self.diags.push(d);
        }
    }

    /// A string field. Numbers and booleans are not accepted silently.
    pub fn string(&mut self, key: &str) -> Option<String> {
        match self.raw(key)?.clone() {
            Value::String(s) => Some(s),
            other => {
                self.report(
                    Code::InvalidField,
                    key,
                    format!("`{key}` must be a string, found {}", kind(&other)),
                    "quote the value",
                );
                None
            }
        }
    }

    /// A required string field.
    pub fn required_string(&mut self, key: &str, help: &str) -> Option<String> {
        if !self.has(key) {
            let mut d = Diagnostic::new(
                Code::MissingField,
                self.file.to_owned(),
                format!("missing required field `{key}`"),
            )
            .help(help.to_owned());
            if let Some((l, c)) = self.doc.position(&self.base) {
                d = d.at(l, c);
            }
            self.diags.push(d);
            return None;
        }
        self.string(key)
    }

    /// A boolean field.
    pub fn bool(&mut self, key: &str) -> Option<bool> {
        match self.raw(key)?.clone() {
            Value::Bool(b) => Some(b),
            other => {
                self.report(
                    Code::InvalidField,
                    key,
                    format!("`{key}` must be true or false, found {}", kind(&other)),
                    "write `true` or `false`, without quotes",
                );
                None
            }
        }
    }

    /// A non-negative integer field.
    pub fn u64(&mut self, key: &str) -> Option<u64> {
        match self.raw(key)?.clone() {
            Value::Number(n) if n.as_u64().is_some() => n.as_u64(),
            other => {
                self.report(
                    Code::InvalidField,
                    key,
                    format!(
                        "`{key}` must be a non-negative integer, found {}",
                        kind(&other)
                    ),
                    "write a whole number without quotes, such as `10`",
                );
                None
            }
        }
    }

    /// A number field.
    pub fn f64(&mut self, key: &str) -> Option<f64> {
        match self.raw(key)?.clone() {
            Value::Number(n) => n.as_f64(),
            other => {
                self.report(
                    Code::InvalidField,
                    key,
                    format!("`{key}` must be a number, found {}", kind(&other)),
                    "write a number without quotes, such as `0.5`",
                );
                None
            }
        }
    }

    /// One of a fixed set of string values.
    pub fn choice<T: Copy>(&mut self, key: &str, options: &[(&str, T)]) -> Option<T> {
        let s = self.string(key)?;
        if let Some((_, v)) = options.iter().find(|(name, _)| *name == s) {
            return Some(*v);
        }
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        self.report(
            Code::InvalidField,
            key,
            format!(
                "`{key}` is `{s}`, which is not one of: {}",
                names.join(", ")
            ),
            &match closest(&s, &names) {
                Some(c) => format!("did you mean `{c}`?"),
                None => format!("set `{key}:` to one of: {}", names.join(", ")),
            },
        );
        None
    }

    /// A list of strings (a single string is accepted as a one-item list).
    pub fn string_list(&mut self, key: &str) -> Option<Vec<String>> {
        match self.raw(key)?.clone() {
            Value::String(s) => Some(vec![s]),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s),
                        other => {
                            let p = format!("{}/{i}", self.pointer(key));
                            self.report_at(
                                Code::InvalidField,
                                &p,
                                format!("items of `{key}` must be strings, found {}", kind(&other)),
                                "quote the item, such as `\"on\"` or `\"42\"`",
                            );
                        }
                    }
                }
                Some(out)
            }
            other => {
                self.report(
                    Code::InvalidField,
                    key,
                    format!("`{key}` must be a list of strings, found {}", kind(&other)),
                    "write a list such as `[first, second]`",
                );
                None
            }
        }
    }

    /// A map of strings to strings.
    pub fn string_map(&mut self, key: &str) -> Option<std::collections::BTreeMap<String, String>> {
        match self.raw(key)?.clone() {
            Value::Object(m) => {
                let mut out = std::collections::BTreeMap::new();
                for (k, v) in m {
                    match v {
                        Value::String(s) => {
                            out.insert(k, s);
                        }
                        Value::Number(n) => {
                            out.insert(k, n.to_string());
                        }
                        Value::Bool(b) => {
                            out.insert(k, b.to_string());
                        }
                        other => {
                            let p = format!("{}/{}", self.pointer(key), escape_pointer(&k));
                            self.report_at(
                                Code::InvalidField,
                                &p,
                                format!(
                                    "values of `{key}` must be strings, found {}",
                                    kind(&other)
                                ),
                                "write each entry as `NAME: value` with a text value",
                            );
                        }
                    }
                }
                Some(out)
            }
            other => {
                self.report(
                    Code::InvalidField,
                    key,
                    format!(
                        "`{key}` must be a mapping of names to strings, found {}",
                        kind(&other)
                    ),
                    "write one `NAME: value` line per entry, indented under the key",
                );
                None
            }
        }
    }

    /// A duration in milliseconds: a number of seconds, or a string such as `500ms`, `30s`, `2m`,
    /// `1h`, `30d`.
    pub fn duration_ms(&mut self, key: &str) -> Option<u64> {
        let raw = self.raw(key)?.clone();
        let parsed = match &raw {
            Value::Number(n) => n
                .as_f64()
                .filter(|f| f.is_finite() && *f > 0.0)
                .map(|f| (f * 1000.0).round() as u64),
            Value::String(s) => parse_duration_ms(s),
            _ => None,
        };
        if parsed.is_none() {
            self.report(
                Code::InvalidField,
                key,
                format!("`{key}` is not a positive duration: {raw}"),
                "write seconds as a number (30) or a string with a unit (500ms, 30s, 2m, 1h, 30d)",
            );
        }
        parsed
    }
}

/// Parses `500ms`, `30s`, `2m`, `1h`, `30d`, or a bare number of seconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(0) => return None,
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().ok()?;
    let factor = match unit.trim() {
        "ms" => 1.0,
        "s" | "sec" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = n * factor;
    (ms.is_finite() && ms >= 1.0).then_some(ms.round() as u64)
}

/// A short description of a JSON value's kind, for messages.
pub fn kind(v: &Value) -> String {
    match v {
        Value::Null => "nothing".to_owned(),
        Value::Bool(b) => format!("the boolean `{b}`"),
        Value::Number(n) => format!("the number `{n}`"),
        Value::String(s) => format!("the string `{s}`"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

pub use eve_discover::closest;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("500ms"), Some(500));
        assert_eq!(parse_duration_ms("30s"), Some(30_000));
        assert_eq!(parse_duration_ms("2m"), Some(120_000));
        assert_eq!(parse_duration_ms("1.5h"), Some(5_400_000));
        assert_eq!(parse_duration_ms("30d"), Some(2_592_000_000));
        assert_eq!(parse_duration_ms("soon"), None);
        assert_eq!(parse_duration_ms("45"), Some(45_000));
        assert_eq!(parse_duration_ms("10 parsecs"), None);
    }

    #[test]
    fn typo_suggestions() {
        assert_eq!(
            closest("descripton", &["description", "input"]),
            Some("description")
        );
        assert_eq!(closest("zzz", &["description", "input"]), None);
    }
}
