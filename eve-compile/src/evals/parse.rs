//! An eval file into cases: a mapping or a list of them, each with its id (checked unique across
//! the suite), tags, model, messages and mock script. The `expect:` of each case is read by
//! `expect`.

use std::collections::BTreeMap;

use eve_discover::{Code, Diagnostic, EvalDiscovery};
use serde_json::Value;

use super::expect::expect;
use super::{EvalCase, EvalSuite, Turn};
use crate::fields::{Fields, kind};
use crate::yaml;

const CASE_FIELDS: &[&str] = &[
    "id",
    "tags",
    "messages",
    "mock",
    "model",
    "output_schema",
    "expect",
];

const STEP_FIELDS: &[&str] = &[
    "text",
    "reasoning",
    "tool_calls",
    "delay_ms",
    "usage",
    "finish",
    "error",
];

/// Parses every file of an `evals/` discovery. `prefix` is shown before each path (`evals/`).
pub fn compile_evals(discovery: &EvalDiscovery, prefix: &str) -> EvalSuite {
    let mut diags = Vec::new();
    let mut cases = Vec::new();
    // Every case's id, valid or not, so a duplicate is reported even next to other errors.
    let mut ids: Vec<(String, String, u32)> = Vec::new();
    for f in &discovery.files {
        let file = format!("{prefix}{}", f.file.path);
        let doc = match yaml::parse(&f.file.text, 0, 0) {
            Ok(doc) => doc,
            Err(e) => {
                let mut d = Diagnostic::new(Code::YamlSyntax, file.clone(), e.message)
                    .help("fix the YAML at the line shown");
                if let (Some(l), Some(c)) = (e.line, e.column) {
                    d = d.at(l, c);
                }
                diags.push(d);
                continue;
            }
        };
        match &doc.value {
            Value::Array(items) => {
                if items.is_empty() {
                    diags.push(
                        Diagnostic::new(Code::EvalShape, file.clone(), "the file holds no cases")
                            .at(1, 1)
                            .help("write one case as a mapping, or a list of them"),
                    );
                }
                for i in 0..items.len() {
                    let id = format!("{}#{}", f.stem, i + 1);
                    if let Some(c) = case(
                        &file,
                        &doc,
                        &format!("/{i}"),
                        &f.stem,
                        id,
                        &mut ids,
                        &mut diags,
                    ) {
                        cases.push(c);
                    }
                }
            }
            Value::Object(_) => {
                if let Some(c) = case(
                    &file,
                    &doc,
                    "",
                    &f.stem,
                    f.stem.clone(),
                    &mut ids,
                    &mut diags,
                ) {
                    cases.push(c);
                }
            }
            other => diags.push(
                Diagnostic::new(
                    Code::EvalShape,
                    file.clone(),
                    format!(
                        "an eval file holds a case (a mapping) or a list of cases, found {}",
                        kind(other)
                    ),
                )
                .at(1, 1)
                .help("start the file with `messages:` (one case) or `- messages:` (a list)"),
            ),
        }
    }
    let mut seen: BTreeMap<&str, (&str, u32)> = BTreeMap::new();
    for (id, file, line) in &ids {
        if let Some((first, first_line)) = seen.get(id.as_str()) {
            diags.push(
                Diagnostic::new(
                    Code::EvalDuplicateId,
                    file.clone(),
                    format!("case id `{id}` is also used at {first}:{first_line}"),
                )
                .at(*line, 1)
                .help("give one of them another `id:`"),
            );
        } else {
            seen.insert(id, (file, *line));
        }
    }
    let duplicated: Vec<&String> = ids
        .iter()
        .map(|(id, _, _)| id)
        .filter(|id| ids.iter().filter(|(other, _, _)| other == *id).count() > 1)
        .collect();
    cases.retain(|c| !duplicated.contains(&&c.id));
    let mut diagnostics: Vec<Diagnostic> = discovery
        .diagnostics
        .iter()
        .cloned()
        .map(|mut d| {
            d.file = d.file.map(|f| format!("{prefix}{f}"));
            d
        })
        .collect();
    diagnostics.extend(diags);
    diagnostics.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.code).cmp(&(&b.file, b.line, b.column, b.code))
    });
    EvalSuite { cases, diagnostics }
}

fn case(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    stem: &str,
    default_id: String,
    ids: &mut Vec<(String, String, u32)>,
    diags: &mut Vec<Diagnostic>,
) -> Option<EvalCase> {
    let line = doc.position(base).map_or(1, |(l, _)| l);
    if !doc.value.pointer(base).is_some_and(Value::is_object) {
        let found = doc.value.pointer(base).map_or("nothing".to_owned(), kind);
        let mut d = Diagnostic::new(
            Code::EvalShape,
            file.to_owned(),
            format!("a case must be a mapping with `messages:` and `expect:`, found {found}"),
        )
        .help("write the case as `- messages: [\"…\"]` with `expect:` under it");
        if let Some((l, c)) = doc.position(base) {
            d = d.at(l, c);
        }
        diags.push(d);
        return None;
    }
    let before = eve_discover::error_count(diags);
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(CASE_FIELDS, "eval case");
    let id = match f.string("id") {
        Some(id) if valid_id(&id) => format!("{stem}/{id}"),
        Some(id) => {
            f.report(
                Code::InvalidField,
                "id",
                format!("case id `{id}` may hold only letters, digits, `_`, `-` and `.`"),
                "rename it, such as `paris-sunny`",
            );
            default_id
        }
        None => default_id,
    };
    ids.push((id.clone(), file.to_owned(), line));
    let tags = f.string_list("tags").unwrap_or_default();
    let model = f.string("model");
    if let Some(m) = &model
        && !m.contains('/')
        && m != "mock"
    {
        f.report(
            Code::InvalidField,
            "model",
            format!("`model: {m}` must be written `provider/name`"),
            "for example `openai/gpt-4.1` or `mock/echo`",
        );
    }
    let messages = messages(&mut f);
    let mock = f.raw("mock").cloned();
    if mock.is_some() {
        check_mock(&mut f);
    }
    let output_schema = f.raw("output_schema").cloned();
    if let Some(schema) = &output_schema
        && let Err(why) = check_schema(schema)
    {
        f.report(
            Code::InvalidField,
            "output_schema",
            format!("`output_schema` is not a JSON Schema the runtime can use: {why}"),
            "write a JSON Schema mapping, such as `{type: object, required: [city]}`",
        );
    }
    let (expect_at, has_expect) = (f.pointer("expect"), f.has("expect"));
    let expect = expect(file, doc, &expect_at, has_expect, diags);
    if eve_discover::error_count(diags) > before {
        return None;
    }
    Some(EvalCase {
        id,
        file: file.to_owned(),
        line,
        tags,
        messages,
        mock,
        model,
        output_schema,
        expect,
    })
}

/// Whether `schema` is a mapping that compiles as a JSON Schema.
fn check_schema(schema: &Value) -> Result<(), String> {
    if !schema.is_object() {
        return Err(format!("found {}", crate::fields::kind(schema)));
    }
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn messages(f: &mut Fields<'_>) -> Vec<Turn> {
    const HELP: &str = "write `messages: [\"first turn\", {approve: true}, \"second turn\"]`";
    let Some(raw) = f.raw("messages").cloned() else {
        let base = f.base.clone();
        f.report_at(
            Code::EvalMessages,
            &base,
            "the case has no `messages:`: nothing would be sent to the agent".to_owned(),
            HELP,
        );
        return Vec::new();
    };
    let items = match raw {
        Value::String(s) => vec![Value::String(s)],
        Value::Array(items) => items,
        other => {
            f.report(
                Code::EvalMessages,
                "messages",
                format!(
                    "`messages` must be a string or a list, found {}",
                    kind(&other)
                ),
                HELP,
            );
            return Vec::new();
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let p = format!("{}/{i}", f.pointer("messages"));
        match item {
            Value::String(s) => out.push(Turn::User(s)),
            Value::Object(m) => {
                let approve = m.get("approve").and_then(Value::as_bool);
                let reason = m.get("reason").and_then(Value::as_str).map(str::to_owned);
                let known = m.keys().all(|k| k == "approve" || k == "reason");
                match approve {
                    Some(approve) if known => {
                        if out.is_empty() {
                            f.report_at(
                                Code::EvalMessages,
                                &p,
                                "an approval answer comes before any message".to_owned(),
                                "put the message whose tool call needs approval first",
                            );
                        }
                        out.push(Turn::Answer { approve, reason });
                    }
                    _ => f.report_at(
                        Code::EvalMessages,
                        &p,
                        "a turn is a string (a user message) or an approval answer \
                         `{approve: true|false, reason?: \"…\"}`"
                            .to_owned(),
                        HELP,
                    ),
                }
            }
            other => f.report_at(
                Code::EvalMessages,
                &p,
                format!(
                    "a turn must be a string or `{{approve: …}}`, found {}",
                    kind(&other)
                ),
                HELP,
            ),
        }
    }
    if !out.iter().any(|t| matches!(t, Turn::User(_))) {
        f.report(
            Code::EvalMessages,
            "messages",
            "`messages` holds no user message".to_owned(),
            HELP,
        );
    }
    out
}

/// The shape of a mock script (the runtime parses it fully before the run): a list of step
/// mappings, or a mapping of such lists keyed by agent.
fn check_mock(f: &mut Fields<'_>) {
    let base = f.pointer("mock");
    let Some(raw) = f.raw("mock").cloned() else {
        return;
    };
    const HELP: &str = "a mock script is a list of steps such as `- {tool_calls: [{name: get_weather, input: {city: Paris}}]}` and `- {text: \"It is sunny.\"}` (docs/models.md)";
    let lists: Vec<(String, Value)> = match raw {
        Value::Array(_) => vec![(base.clone(), raw)],
        Value::Object(m) => m
            .into_iter()
            .map(|(k, v)| (format!("{base}/{}", yaml::escape_pointer(&k)), v))
            .collect(),
        other => {
            f.report_at(
                Code::EvalMock,
                &base,
                format!("`mock` must be a list of steps, found {}", kind(&other)),
                HELP,
            );
            return;
        }
    };
    for (p, list) in lists {
        let Value::Array(steps) = list else {
            f.report_at(
                Code::EvalMock,
                &p,
                "each agent's mock script must be a list of steps".to_owned(),
                HELP,
            );
            continue;
        };
        for (i, step) in steps.iter().enumerate() {
            let sp = format!("{p}/{i}");
            let Value::Object(m) = step else {
                f.report_at(
                    Code::EvalMock,
                    &sp,
                    format!("a mock step must be a mapping, found {}", kind(step)),
                    HELP,
                );
                continue;
            };
            for (k, v) in m {
                let kp = format!("{sp}/{}", yaml::escape_pointer(k));
                if !STEP_FIELDS.contains(&k.as_str()) {
                    f.report_at(
                        Code::EvalMock,
                        &kp,
                        format!(
                            "unknown mock step field `{k}`; the fields are: {}",
                            STEP_FIELDS.join(", ")
                        ),
                        HELP,
                    );
                } else if k == "tool_calls" {
                    let ok = v.as_array().is_some_and(|calls| {
                        calls.iter().all(|c| {
                            c.get("name").is_some_and(Value::is_string)
                                && c.as_object().is_some_and(|o| {
                                    o.keys()
                                        .all(|k| matches!(k.as_str(), "name" | "input" | "id"))
                                })
                        })
                    });
                    if !ok {
                        f.report_at(
                            Code::EvalMock,
                            &kp,
                            "`tool_calls` must be a list of `{name, input?, id?}`".to_owned(),
                            HELP,
                        );
                    }
                } else if matches!(k.as_str(), "text" | "reasoning" | "error" | "finish")
                    && !v.is_string()
                {
                    f.report_at(
                        Code::EvalMock,
                        &kp,
                        format!("`{k}` of a mock step must be a string, found {}", kind(v)),
                        HELP,
                    );
                }
            }
        }
    }
}
