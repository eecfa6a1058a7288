//! Secrets stay with the runtime: every resolved `${VAR}` value is shown as `${VAR}`.
//!
//! A [`Secrets`] registry belongs to a runtime (and to the log writer of the process that runs it).
//! It learns values by name: every `${VAR}` a loaded build references (tool URLs, headers, bodies,
//! MCP `command`/`args`/`env`/`url`/`headers`, auth and channel secrets), every name a tool's or
//! hook's `env:` allowlist passes to its process, and the model providers' key variables
//! ([`crate::env_vars::MODEL_KEYS`]). The call's own protocol variables and the pass-through ones
//! ([`crate::env_vars::NOT_SECRET`]) are not secrets, and values shorter than [`MIN_LEN`] bytes are
//! not redacted: a `${PORT}` of `8080` or a `${REGION}` of `eu` would shred ordinary text and hide
//! nothing.
//!
//! Each value is matched as written and in the forms it takes on the way out: percent-encoded in a
//! URL, escaped inside a JSON string, escaped by `Debug` in a log line, and base64-encoded
//! (standard and URL-safe alphabets, at any of the three alignments it can have inside a longer
//! encoded text, such as an HTTP basic `Authorization` header or a `user:token` pair: the
//! characters that depend only on the value's own bytes are matched). Other encodings (hex,
//! compressed, split across separate writes, spelled out by a process that holds the value) are
//! not recognised: redaction keeps values out of what eve writes by accident, it cannot stop a
//! process that holds a secret from disguising it.
//!
//! The chokepoints that cover everything the runtime writes or shows:
//! - a tool call's result as it is settled (`engine/turn/calls.rs`), before the model sees it;
//! - every batch the engine commits (`Runtime::commit` and the engine's other commits), which
//!   carries event data (streams and the store), journal rows, messages (the model's context) and
//!   turn errors (a model client's error text included);
//! - the log output of `eve serve` and `eve dev` (a redacting writer in `eve-cli`);
//! - the contents of session workspace files as they become blobs of a workspace checkpoint
//!   (`workspace/checkpoint.rs`, through [`Secrets::redact_bytes`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use crate::env_vars;
use crate::store::{Batch, Op, ReleaseOp};

/// Shortest value that is redacted, in bytes.
pub(crate) const MIN_LEN: usize = 6;

/// Characters percent-encoding leaves alone (RFC 3986 unreserved), as URL builders do.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The matcher over every known form of every secret, with each pattern's replacement.
struct Matcher {
    automaton: AhoCorasick,
    replacements: Vec<String>,
}

#[derive(Default)]
struct State {
    /// Form of a value → the name it is shown as.
    forms: BTreeMap<String, String>,
    matcher: Option<Arc<Matcher>>,
}

/// The values a runtime redacts. Cheap to share (`Arc<Secrets>`); learning is rare, redacting is
/// frequent and does not allocate when nothing matches.
#[derive(Default)]
pub struct Secrets {
    state: RwLock<State>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.state.read().map(|s| s.forms.len()).unwrap_or(0);
        f.debug_struct("Secrets")
            .field("forms", &count)
            .finish_non_exhaustive()
    }
}

/// Whether values of `name` are redacted (and kept out of command lines).
pub(crate) fn is_secret_name(name: &str) -> bool {
    !env_vars::NOT_SECRET.contains(&name)
}

/// `${NAME}` references in `text`, as [`crate::tools::template`] resolves them (`$${` is a literal).
fn references(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$${") {
            rest = after;
            continue;
        }
        if let Some(after) = tail.strip_prefix("${")
            && let Some(end) = after.find('}')
        {
            let name = &after[..end];
            let mut chars = name.chars();
            if matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                names.push(name);
                rest = &after[end + 1..];
                continue;
            }
        }
        rest = &tail[1..];
    }
    names
}

impl Secrets {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    #[cfg(test)]
    /// Whether nothing is redacted.
    pub(crate) fn is_empty(&self) -> bool {
        self.state
            .read()
            .map(|s| s.forms.is_empty())
            .unwrap_or(true)
    }

    /// Learns that `value` is the secret `name` (ignored for names in
    /// [`env_vars::NOT_SECRET`] and values shorter than [`MIN_LEN`]).
    pub(crate) fn learn(&self, name: &str, value: &str) {
        if !is_secret_name(name) || value.len() < MIN_LEN {
            return;
        }
        let shown = format!("${{{name}}}");
        let mut forms = vec![value.to_owned()];
        forms.push(utf8_percent_encode(value, UNRESERVED).to_string());
        forms.push(utf8_percent_encode(value, NON_ALPHANUMERIC).to_string());
        if let Ok(json) = serde_json::to_string(value) {
            forms.push(json[1..json.len() - 1].to_owned());
        }
        let debug = format!("{value:?}");
        forms.push(debug[1..debug.len() - 1].to_owned());
        forms.extend(base64_forms(value.as_bytes()));
        let Ok(mut state) = self.state.write() else {
            return;
        };
        let mut changed = false;
        for form in forms {
            if form.len() >= MIN_LEN && !state.forms.contains_key(&form) {
                state.forms.insert(form, shown.clone());
                changed = true;
            }
        }
        if changed {
            state.matcher = build_matcher(&state.forms);
        }
    }

    /// Learns the value of `name`, looked up in `env`, if it is set.
    pub(crate) fn learn_var(&self, name: &str, env: &dyn Fn(&str) -> Option<String>) {
        if is_secret_name(name)
            && let Some(value) = env(name)
        {
            self.learn(name, &value);
        }
    }

    /// Learns every `${VAR}` that `text` references (looked up in `env`).
    pub(crate) fn learn_references(&self, text: &str, env: &dyn Fn(&str) -> Option<String>) {
        for name in references(text) {
            self.learn_var(name, env);
        }
    }

    /// Learns every secret a build's manifest can resolve: each `${VAR}` in any of its strings, and
    /// each name listed under an `env` allowlist (a list of names).
    pub fn learn_manifest(&self, manifest: &Value, env: &dyn Fn(&str) -> Option<String>) {
        match manifest {
            Value::String(text) => self.learn_references(text, env),
            Value::Array(items) => items.iter().for_each(|v| self.learn_manifest(v, env)),
            Value::Object(map) => {
                for (key, value) in map {
                    if key == "env"
                        && let Value::Array(names) = value
                    {
                        for name in names.iter().filter_map(Value::as_str) {
                            self.learn_var(name, env);
                        }
                    }
                    self.learn_manifest(value, env);
                }
            }
            _ => {}
        }
    }

    /// Learns the model providers' keys ([`env_vars::MODEL_KEYS`]).
    pub(crate) fn learn_model_keys(&self, env: &dyn Fn(&str) -> Option<String>) {
        for name in env_vars::MODEL_KEYS {
            self.learn_var(name, env);
        }
    }

    fn matcher(&self) -> Option<Arc<Matcher>> {
        self.state.read().ok().and_then(|s| s.matcher.clone())
    }

    /// `text` with every known secret replaced by `${NAME}`; borrowed when nothing matches.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.matcher() {
            Some(m) => replace(&m, text),
            None => Cow::Borrowed(text),
        }
    }

    /// `data` (any bytes: text or not) with every known secret replaced by `${NAME}`; the same
    /// vector when nothing matches. A binary file holding a secret changes length where the value
    /// was, which is the point: its stored copy must not hold the value.
    pub(crate) fn redact_bytes(&self, data: Vec<u8>) -> Vec<u8> {
        match self.matcher() {
            Some(m) if m.automaton.is_match(data.as_slice()) => {
                m.automaton.replace_all_bytes(&data, &m.replacements)
            }
            _ => data,
        }
    }

    /// Redacts every string (and object key) in `value`, in place.
    pub(crate) fn redact_json(&self, value: &mut Value) {
        if let Some(m) = self.matcher() {
            redact_value(&m, value);
        }
    }

    /// Redacts every payload of a batch the engine is about to commit: event data, messages,
    /// journaled model responses and tool calls, input requests, accepted messages, turn errors,
    /// dynamic tool definitions.
    pub(crate) fn redact_batch(&self, batch: &mut Batch) {
        let Some(m) = self.matcher() else {
            return;
        };
        let text = |s: &mut String| {
            if let Cow::Owned(new) = replace(&m, s) {
                *s = new;
            }
        };
        for op in &mut batch.ops {
            match op {
                Op::Event { data, .. } => redact_value(&m, data),
                Op::AppendMessage { body, .. } => redact_value(&m, body),
                Op::PutStep(step) => redact_value(&m, &mut step.response),
                Op::PutToolCall(call) => {
                    redact_value(&m, &mut call.input);
                    if let Some(output) = &mut call.output {
                        redact_value(&m, output);
                    }
                }
                Op::PutInputRequest(request) | Op::AnswerInputRequest { request, .. } => {
                    text(&mut request.prompt);
                    redact_value(&m, &mut request.action);
                    if let Some(reason) = &mut request.reason {
                        text(reason);
                    }
                }
                Op::InsertInbox(inbox) => {
                    text(&mut inbox.text);
                    if let Some(input) = &mut inbox.input {
                        redact_value(&m, input);
                    }
                }
                Op::PutTurn(turn) => {
                    if let Some(reason) = &mut turn.stop_reason {
                        text(reason);
                    }
                }
                Op::Composition(crate::store::CompositionOp::PutDynamicTools {
                    detail,
                    tools,
                    ..
                }) => {
                    redact_value(&m, detail);
                    // A provider script runs with its `env:` and prints these definitions.
                    for tool in tools {
                        text(&mut tool.description);
                        redact_value(&m, &mut tool.input_schema);
                        redact_value(&m, &mut tool.provider_tool);
                    }
                }
                Op::Release(ReleaseOp::Event { data, .. }) => redact_value(&m, data),
                Op::Release(ReleaseOp::Put(release)) => {
                    if let Some(reason) = &mut release.reason {
                        text(reason);
                    }
                    if let Some(gate) = &mut release.checks.gate {
                        if let Some(error) = &mut gate.error {
                            text(error);
                        }
                        for case in &mut gate.cases {
                            if let Some(reason) = &mut case.reason {
                                text(reason);
                            }
                        }
                    }
                }
                Op::Release(ReleaseOp::Activate {
                    reason: Some(reason),
                    ..
                }) => text(reason),
                // Memory outlives the session: a secret the model saw never lands in it.
                Op::Note(crate::store::NoteOp::Put(note)) => text(&mut note.text),
                _ => {}
            }
        }
    }
}

/// The base64 texts (standard and URL-safe alphabets) that encode `value` wherever it starts in
/// a longer encoded text: for each of the three alignments, the characters whose six bits all
/// come from `value` (the ones at either end also depend on the neighbouring bytes).
fn base64_forms(value: &[u8]) -> Vec<String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let bits = value.len() * 8;
    let mut forms = Vec::new();
    for offset in 0..3usize {
        let mut padded = vec![0u8; offset];
        padded.extend_from_slice(value);
        let first = (offset * 8).div_ceil(6);
        let end = (offset * 8 + bits) / 6;
        if end <= first {
            continue;
        }
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&padded);
            if let Some(form) = encoded.get(first..end) {
                forms.push(form.to_owned());
            }
        }
    }
    forms
}

fn build_matcher(forms: &BTreeMap<String, String>) -> Option<Arc<Matcher>> {
    if forms.is_empty() {
        return None;
    }
    let automaton = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(forms.keys())
        .ok()?;
    Some(Arc::new(Matcher {
        automaton,
        replacements: forms.values().cloned().collect(),
    }))
}

fn replace<'t>(m: &Matcher, text: &'t str) -> Cow<'t, str> {
    if !m.automaton.is_match(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(m.automaton.replace_all(text, &m.replacements))
}

fn redact_value(m: &Matcher, value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(new) = replace(m, s) {
                *s = new;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_value(m, v)),
        Value::Object(map) => {
            if map.keys().any(|k| m.automaton.is_match(k)) {
                let old = std::mem::take(map);
                for (key, mut v) in old {
                    redact_value(m, &mut v);
                    map.insert(replace(m, &key).into_owned(), v);
                }
            } else {
                map.values_mut().for_each(|v| redact_value(m, v));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "API_TOKEN" => Some("tok-3f9a/b+c=d".to_owned()),
            "SHORT" => Some("abc".to_owned()),
            env_vars::HOME => Some("/home/someone".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn values_and_their_encoded_forms_are_shown_by_name() {
        let s = Secrets::new();
        s.learn_references(
            "Bearer ${API_TOKEN} ${SHORT} ${HOME} ${UNSET} $${API_TOKEN}",
            &env,
        );
        assert_eq!(s.redact("a tok-3f9a/b+c=d b"), "a ${API_TOKEN} b");
        assert_eq!(s.redact("?k=tok-3f9a%2Fb%2Bc%3Dd"), "?k=${API_TOKEN}");
        assert_eq!(s.redact("abc /home/someone"), "abc /home/someone");
        assert!(matches!(s.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn manifests_teach_references_and_env_allowlists() {
        let s = Secrets::new();
        let manifest = json!({"tools": [{"env": ["API_TOKEN"], "runner": {"url": "x"}}]});
        s.learn_manifest(&manifest, &env);
        let mut v = json!({"out": ["tok-3f9a/b+c=d"], "tok-3f9a/b+c=d": 1});
        s.redact_json(&mut v);
        assert_eq!(v, json!({"out": ["${API_TOKEN}"], "${API_TOKEN}": 1}));
    }

    #[test]
    fn an_empty_registry_changes_nothing() {
        let s = Secrets::new();
        assert!(s.is_empty());
        let mut v = json!({"a": "tok-3f9a/b+c=d"});
        s.redact_json(&mut v);
        assert_eq!(v, json!({"a": "tok-3f9a/b+c=d"}));
    }

    #[test]
    fn base64_forms_are_redacted_at_every_alignment() {
        use base64::Engine;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let s = Secrets::new();
        s.learn("API_TOKEN", "tok-3f9a/b+c=d");
        for prefix in ["", "u:", "user:", "a", "ab", "abc"] {
            for encoded in [
                STANDARD.encode(format!("{prefix}tok-3f9a/b+c=d!")),
                URL_SAFE_NO_PAD.encode(format!("{prefix}tok-3f9a/b+c=d")),
            ] {
                let shown = s.redact(&encoded);
                assert!(
                    shown.contains("${API_TOKEN}"),
                    "{prefix:?}: {encoded} -> {shown}"
                );
                // What is left around the name is at most the characters shared with the
                // neighbouring bytes: no run of the value's own encoding.
                assert!(shown.len() < encoded.len(), "{shown}");
            }
        }
        assert_eq!(s.redact("plain text"), "plain text");
    }

    #[test]
    fn bytes_are_redacted_text_or_not() {
        let s = Secrets::new();
        s.learn("API_TOKEN", "tok-3f9a/b+c=d");
        let data = b"\x00\xfe key=tok-3f9a/b+c=d \xff".to_vec();
        assert_eq!(
            s.redact_bytes(data),
            b"\x00\xfe key=${API_TOKEN} \xff".to_vec()
        );
        let plain = b"\x00\xfe nothing".to_vec();
        assert_eq!(s.redact_bytes(plain.clone()), plain);
    }

    #[test]
    fn dynamic_tool_definitions_and_release_records_are_redacted() {
        use crate::store::{CompositionOp, DynamicToolRecord};
        let s = Secrets::new();
        s.learn("API_TOKEN", "tok-3f9a/b+c=d");
        let mut batch = Batch::new();
        batch.push(Op::Composition(CompositionOp::PutDynamicTools {
            session_id: "wrun_1".to_owned(),
            providers: vec!["p".to_owned()],
            tools: vec![DynamicToolRecord {
                session_id: "wrun_1".to_owned(),
                name: "t".to_owned(),
                provider: "p".to_owned(),
                description: "calls https://x/?k=tok-3f9a/b+c=d".to_owned(),
                input_schema: json!({"default": "tok-3f9a/b+c=d"}),
                provider_tool: json!({}),
                build_hash: "h".to_owned(),
                turn_seq: 0,
                resolved_at: 0,
            }],
            turn_seq: 0,
            detail: json!({}),
        }));
        batch.push(Op::Release(ReleaseOp::Event {
            kind: "change.proposed".to_owned(),
            data: json!({"summary": "use tok-3f9a/b+c=d"}),
        }));
        s.redact_batch(&mut batch);
        let text = format!("{:?}", batch.ops);
        assert!(!text.contains("tok-3f9a"), "{text}");
        assert_eq!(text.matches("${API_TOKEN}").count(), 3, "{text}");
    }

    #[test]
    fn longest_match_wins_when_values_overlap() {
        let s = Secrets::new();
        s.learn("A", "secret-value");
        s.learn("B", "secret-value-longer");
        assert_eq!(
            s.redact("x secret-value-longer y secret-value"),
            "x ${B} y ${A}"
        );
    }
}
