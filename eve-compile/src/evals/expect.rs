//! A case's `expect:`: the calls a run must (not) make, what its replies must say, approvals,
//! step, cost and time budgets, the judge's rubric and the scorer command, each checked as it is
//! read so a mistake is a diagnostic at its line.

use eve_discover::{Code, Diagnostic};
use serde_json::Value;

use super::{ApprovalExpect, CalledTool, CommandExpect, Expect, JudgeExpect, TextExpect};
use crate::fields::{Fields, kind};
use crate::yaml;

const EXPECT_FIELDS: &[&str] = &[
    "called_tool",
    "not_called",
    "loaded_skill",
    "text",
    "approval_requested",
    "max_steps",
    "max_cost_usd",
    "max_seconds",
    "judge",
    "command",
    "result",
];

pub(super) fn expect(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    present: bool,
    diags: &mut Vec<Diagnostic>,
) -> Expect {
    let mut out = Expect::default();
    if !present {
        return out;
    }
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(EXPECT_FIELDS, "expect");
    if let Some(raw) = f.raw("called_tool").cloned() {
        let items = match raw {
            Value::Array(items) => items,
            other => vec![other],
        };
        for (i, item) in items.iter().enumerate() {
            let p = if f.raw("called_tool").is_some_and(Value::is_array) {
                format!("{}/{i}", f.pointer("called_tool"))
            } else {
                f.pointer("called_tool")
            };
            match item {
                Value::String(name) => out.called_tool.push(CalledTool {
                    name: name.clone(),
                    input: None,
                    count: None,
                }),
                Value::Object(m) => {
                    let name = m.get("name").and_then(Value::as_str);
                    let count = m.get("count").map(Value::as_u64);
                    let unknown = m
                        .keys()
                        .find(|k| !matches!(k.as_str(), "name" | "input" | "count"));
                    if let Some(k) = unknown {
                        f.report_at(
                            Code::EvalExpect,
                            &format!("{p}/{}", yaml::escape_pointer(k)),
                            format!(
                                "unknown field `{k}` in `called_tool`; the fields are name, input, count"
                            ),
                            "remove it",
                        );
                    }
                    match (name, count) {
                        (Some(name), Some(None)) => {
                            let _ = name;
                            f.report_at(
                                Code::EvalExpect,
                                &format!("{p}/count"),
                                "`count` must be a whole number".to_owned(),
                                "write `count: 1`",
                            );
                        }
                        (Some(name), count) => out.called_tool.push(CalledTool {
                            name: name.to_owned(),
                            input: m.get("input").cloned(),
                            count: count.flatten(),
                        }),
                        (None, _) => f.report_at(
                            Code::EvalExpect,
                            &p,
                            "`called_tool` needs the tool's `name`".to_owned(),
                            "write `called_tool: {name: get_weather, input: {city: Paris}}`",
                        ),
                    }
                }
                other => f.report_at(
                    Code::EvalExpect,
                    &p,
                    format!(
                        "`called_tool` must be a tool name, `{{name, input?, count?}}` or a list of them, found {}",
                        kind(other)
                    ),
                    "write `called_tool: {name: get_weather, input: {city: Paris}}`",
                ),
            }
        }
    }
    out.not_called = f.string_list("not_called").unwrap_or_default();
    out.loaded_skill = f.string_list("loaded_skill").unwrap_or_default();
    if let Some(raw) = f.raw("text").cloned() {
        out.text = text(&mut f, raw);
    }
    match f.raw("approval_requested").cloned() {
        None => {}
        Some(Value::Bool(b)) => out.approval_requested = Some(ApprovalExpect::Any(b)),
        Some(Value::String(_) | Value::Array(_)) => {
            out.approval_requested = f
                .string_list("approval_requested")
                .map(ApprovalExpect::Tools);
        }
        Some(other) => f.report(
            Code::EvalExpect,
            "approval_requested",
            format!(
                "`approval_requested` must be true, false, a tool name or a list of them, found {}",
                kind(&other)
            ),
            "write `approval_requested: true` or `approval_requested: delete_file`",
        ),
    }
    out.result = f.raw("result").cloned();
    out.max_steps = f.u64("max_steps");
    out.max_cost_usd = positive(&mut f, "max_cost_usd");
    out.max_seconds = positive(&mut f, "max_seconds");
    let (judge_at, has_judge) = (f.pointer("judge"), f.has("judge"));
    let (command_at, has_command) = (f.pointer("command"), f.has("command"));
    if has_judge {
        out.judge = judge(file, doc, &judge_at, diags);
    }
    if has_command {
        out.command = command(file, doc, &command_at, diags);
    }
    out
}

fn positive(f: &mut Fields<'_>, key: &str) -> Option<f64> {
    let v = f.f64(key)?;
    if v.is_finite() && v >= 0.0 {
        Some(v)
    } else {
        f.report(
            Code::EvalExpect,
            key,
            format!("`{key}` must not be negative"),
            "write a number such as `0.05`",
        );
        None
    }
}

fn text(f: &mut Fields<'_>, raw: Value) -> Option<TextExpect> {
    const HELP: &str = "write `text: {contains: sunny}`, `{not_contains: error}` or `{regex: \"\\\\d+ °C\"}` (a string is `contains`)";
    let mut out = TextExpect::default();
    let map = match raw {
        Value::String(s) => {
            out.contains.push(s);
            return Some(out);
        }
        Value::Object(m) => m,
        other => {
            f.report(
                Code::EvalExpect,
                "text",
                format!("`text` must be a mapping, found {}", kind(&other)),
                HELP,
            );
            return None;
        }
    };
    let base = f.pointer("text");
    for (k, v) in map {
        let p = format!("{base}/{}", yaml::escape_pointer(&k));
        let list: Option<Vec<String>> = match &v {
            Value::String(s) => Some(vec![s.clone()]),
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect(),
            _ => None,
        };
        let Some(list) = list else {
            f.report_at(
                Code::EvalExpect,
                &p,
                format!(
                    "`text.{k}` must be a string or a list of strings, found {}",
                    kind(&v)
                ),
                HELP,
            );
            continue;
        };
        match k.as_str() {
            "contains" => out.contains.extend(list),
            "not_contains" => out.not_contains.extend(list),
            "regex" => {
                for r in &list {
                    if let Err(e) = regex::Regex::new(r) {
                        let first = e.to_string();
                        let last = first.lines().last().unwrap_or_default().trim().to_owned();
                        f.report_at(
                            Code::EvalExpect,
                            &p,
                            format!("`text.regex` `{r}` is not a regular expression: {last}"),
                            "fix the pattern (Rust regex syntax; in YAML, single-quote it so `\\` stays as written)",
                        );
                    }
                }
                out.regex.extend(list);
            }
            other => f.report_at(
                Code::EvalExpect,
                &p,
                format!("unknown text expectation `{other}`; use contains, not_contains or regex"),
                HELP,
            ),
        }
    }
    Some(out)
}

fn judge(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<JudgeExpect> {
    if let Some(Value::String(rubric)) = doc.value.pointer(base) {
        return Some(JudgeExpect {
            rubric: rubric.clone(),
            threshold: 0.7,
            model: None,
        });
    }
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(&["rubric", "threshold", "model"], "judge");
    let rubric = f.required_string("rubric", "write the rubric: what a good answer does")?;
    let threshold = match f.f64("threshold") {
        Some(t) if (0.0..=1.0).contains(&t) => t,
        Some(t) => {
            f.report(
                Code::EvalExpect,
                "threshold",
                format!("`threshold` is a score from 0 to 1, found {t}"),
                "write `threshold: 0.7`",
            );
            0.7
        }
        None => 0.7,
    };
    Some(JudgeExpect {
        rubric,
        threshold,
        model: f.string("model"),
    })
}

fn command(
    file: &str,
    doc: &yaml::Doc,
    base: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<CommandExpect> {
    let mut f = Fields::new(file, doc, base, diags);
    f.unknown_keys(&["run", "files", "timeout"], "command");
    let run = match f.raw("run").cloned() {
        Some(Value::String(s)) => vec!["sh".to_owned(), "-c".to_owned(), s],
        Some(Value::Array(_)) => f.string_list("run").unwrap_or_default(),
        Some(other) => {
            f.report(
                Code::EvalExpect,
                "run",
                format!(
                    "`run` must be a command line or an argv list, found {}",
                    kind(&other)
                ),
                "write `run: [python3, check.py]`",
            );
            return None;
        }
        None => {
            let base = f.base.clone();
            f.report_at(
                Code::MissingField,
                &base,
                "`command` needs `run:`, the scorer to run in the session workspace".to_owned(),
                "write `run: [python3, check.py]`",
            );
            return None;
        }
    };
    if run.is_empty() {
        f.report(
            Code::EvalExpect,
            "run",
            "`run` is empty".to_owned(),
            "write `run: [python3, check.py]`",
        );
        return None;
    }
    let files = f.string_map("files").unwrap_or_default();
    for path in files.keys() {
        if path.starts_with('/') || path.split('/').any(|s| s == ".." || s.is_empty()) {
            let p = format!("{}/{}", f.pointer("files"), yaml::escape_pointer(path));
            f.report_at(
                Code::EvalExpect,
                &p,
                format!("`files` path `{path}` must be relative to the workspace, without `..`"),
                "write a path such as `tests/check.py`",
            );
        }
    }
    let timeout_seconds = f.u64("timeout").unwrap_or(60).max(1);
    Some(CommandExpect {
        run,
        files,
        timeout_seconds,
    })
}
