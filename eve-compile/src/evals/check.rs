//! Whether a run met a case's expectations, and, when it did not, what was expected and what
//! happened instead.
//!
//! A run is summarised as an [`Observed`], built from the session's events (the same envelopes
//! the HTTP stream and `eve run --json` carry), so a case checks the same way whether it ran in
//! this process or on a server. The judge and the scorer command need a model or a process; the
//! runner evaluates those and adds their failures itself.

use serde::Serialize;
use serde_json::Value;

use super::{ApprovalExpect, EvalCase, TextExpect};

/// One tool call (or skill load) the run made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObservedCall {
    /// Tool name (`load_skill` for a skill load).
    pub name: String,
    /// Its input.
    pub input: Value,
    /// For a skill load, the skill's name.
    pub skill: Option<String>,
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Observed {
    /// Calls, in the order the model made them.
    pub calls: Vec<ObservedCall>,
    /// The agent's replies, turn after turn, joined by blank lines.
    pub text: String,
    /// Tools that approval was asked for, in order.
    pub approvals: Vec<String>,
    /// Model steps over the whole case.
    pub steps: u64,
    /// Input plus output tokens.
    pub tokens: u64,
    /// Cost in US dollars (0 without `limits.price_per_million`).
    pub cost_usd: f64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// `code: message` of a failed turn.
    pub turn_failed: Option<String>,
    /// The structured result of the last turn that had one (`result.completed`).
    pub result: Option<Value>,
}

impl Observed {
    /// Adds the events of a session (`(type, data)` pairs, oldest first).
    pub fn add_events<'a>(&mut self, events: impl IntoIterator<Item = (&'a str, &'a Value)>) {
        let mut reply = String::new();
        for (kind, data) in events {
            match kind {
                "actions.requested" => {
                    for a in data["actions"].as_array().into_iter().flatten() {
                        let skill = (a["kind"] == "load-skill")
                            .then(|| a["name"].as_str().unwrap_or_default().to_owned());
                        let name = match &skill {
                            Some(_) => "load_skill".to_owned(),
                            None => a["toolName"].as_str().unwrap_or_default().to_owned(),
                        };
                        self.calls.push(ObservedCall {
                            name,
                            input: a["input"].clone(),
                            skill,
                        });
                    }
                }
                "message.completed" => {
                    let m = data["message"].as_str().unwrap_or_default();
                    if !m.is_empty() {
                        if !reply.is_empty() {
                            reply.push('\n');
                        }
                        reply.push_str(m);
                    }
                }
                "step.completed" => {
                    self.steps += 1;
                    let u = &data["usage"];
                    self.tokens += u["inputTokens"].as_u64().unwrap_or(0)
                        + u["outputTokens"].as_u64().unwrap_or(0);
                }
                "input.requested" => {
                    for r in data["requests"].as_array().into_iter().flatten() {
                        let a = &r["action"];
                        let name = a["toolName"]
                            .as_str()
                            .or_else(|| a["name"].as_str())
                            .unwrap_or_default();
                        self.approvals.push(name.to_owned());
                    }
                }
                "result.completed" => self.result = Some(data["result"].clone()),
                "turn.failed" => {
                    let e = &data["error"];
                    self.turn_failed = Some(format!(
                        "{}: {}",
                        e["code"].as_str().unwrap_or("error"),
                        e["message"].as_str().unwrap_or_default()
                    ));
                }
                "turn.completed" | "turn.waiting" | "turn.cancelled" if !reply.is_empty() => {
                    if !self.text.is_empty() {
                        self.text.push_str("\n\n");
                    }
                    self.text.push_str(&reply);
                    reply.clear();
                }
                _ => {}
            }
        }
        if !reply.is_empty() {
            if !self.text.is_empty() {
                self.text.push_str("\n\n");
            }
            self.text.push_str(&reply);
        }
    }

    /// The tools called, in order, with their inputs: `get_weather {"city":"Oslo"}, …`.
    pub fn calls_summary(&self) -> String {
        if self.calls.is_empty() {
            return "no tool was called".to_owned();
        }
        let list: Vec<String> = self
            .calls
            .iter()
            .map(|c| format!("{} {}", c.name, short(&c.input.to_string(), 120)))
            .collect();
        format!("the tools called, in order: {}", list.join(", "))
    }
}

/// One expectation a run did not meet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The expectation (`called_tool`, `text.contains`, `judge`, …; `turn` for a failed turn).
    pub expectation: String,
    /// What was expected.
    pub expected: String,
    /// What happened instead.
    pub actual: String,
}

impl Failure {
    /// A failure.
    pub fn new(
        expectation: impl Into<String>,
        expected: impl Into<String>,
        actual: impl Into<String>,
    ) -> Self {
        Self {
            expectation: expectation.into(),
            expected: expected.into(),
            actual: actual.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: expected {}; {}",
            self.expectation, self.expected, self.actual
        )
    }
}

/// Every expectation of `case` (but `judge` and `command`) that `seen` does not meet, in the
/// order the case lists its kinds. A failed turn comes first.
pub fn check(case: &EvalCase, seen: &Observed) -> Vec<Failure> {
    let e = &case.expect;
    let mut out = Vec::new();
    if let Some(failed) = &seen.turn_failed {
        out.push(Failure::new(
            "turn",
            "every turn to complete",
            format!("a turn failed with {failed}"),
        ));
    }
    for want in &e.called_tool {
        let matching = seen
            .calls
            .iter()
            .filter(|c| c.name == want.name)
            .filter(|c| want.input.as_ref().is_none_or(|i| is_subset(i, &c.input)))
            .count() as u64;
        let ok = match want.count {
            Some(n) => matching == n,
            None => matching > 0,
        };
        if !ok {
            let what = match &want.input {
                Some(i) => format!("`{}` with input containing {i}", want.name),
                None => format!("`{}`", want.name),
            };
            let expected = match want.count {
                Some(n) => format!("exactly {n} call(s) to {what}"),
                None => format!("a call to {what}"),
            };
            out.push(Failure::new(
                "called_tool",
                expected,
                format!("{} matched; {}", matching, seen.calls_summary()),
            ));
        }
    }
    for name in &e.not_called {
        let n = seen.calls.iter().filter(|c| &c.name == name).count();
        if n > 0 {
            out.push(Failure::new(
                "not_called",
                format!("no call to `{name}`"),
                format!("it was called {n} time(s); {}", seen.calls_summary()),
            ));
        }
    }
    for skill in &e.loaded_skill {
        if !seen.calls.iter().any(|c| c.skill.as_deref() == Some(skill)) {
            let loaded: Vec<&str> = seen
                .calls
                .iter()
                .filter_map(|c| c.skill.as_deref())
                .collect();
            out.push(Failure::new(
                "loaded_skill",
                format!("skill `{skill}` to be loaded"),
                if loaded.is_empty() {
                    "no skill was loaded".to_owned()
                } else {
                    format!("the skills loaded: {}", loaded.join(", "))
                },
            ));
        }
    }
    if let Some(t) = &e.text {
        text(t, &seen.text, &mut out);
    }
    match &e.approval_requested {
        None => {}
        Some(ApprovalExpect::Any(true)) if seen.approvals.is_empty() => out.push(Failure::new(
            "approval_requested",
            "an approval to be requested",
            format!("none was; {}", seen.calls_summary()),
        )),
        Some(ApprovalExpect::Any(false)) if !seen.approvals.is_empty() => out.push(Failure::new(
            "approval_requested",
            "no approval to be requested",
            format!("approval was requested for: {}", seen.approvals.join(", ")),
        )),
        Some(ApprovalExpect::Tools(tools)) => {
            for t in tools {
                if !seen.approvals.contains(t) {
                    out.push(Failure::new(
                        "approval_requested",
                        format!("an approval to be requested for `{t}`"),
                        if seen.approvals.is_empty() {
                            "no approval was requested".to_owned()
                        } else {
                            format!("approval was requested for: {}", seen.approvals.join(", "))
                        },
                    ));
                }
            }
        }
        Some(_) => {}
    }
    if let Some(want) = &e.result {
        let ok = seen.result.as_ref().is_some_and(|r| is_subset(want, r));
        if !ok {
            out.push(Failure::new(
                "result",
                format!("a structured result containing {want}"),
                match &seen.result {
                    Some(r) => format!("the result was {}", short(&r.to_string(), 300)),
                    None => "no turn produced a structured result (`output_schema`)".to_owned(),
                },
            ));
        }
    }
    if let Some(max) = e.max_steps
        && seen.steps > max
    {
        out.push(Failure::new(
            "max_steps",
            format!("at most {max} step(s)"),
            format!("the case took {} steps", seen.steps),
        ));
    }
    if let Some(max) = e.max_cost_usd
        && seen.cost_usd > max
    {
        out.push(Failure::new(
            "max_cost_usd",
            format!("a cost of at most ${max}"),
            format!("the case cost ${:.4}", seen.cost_usd),
        ));
    }
    if let Some(max) = e.max_seconds
        && seen.seconds > max
    {
        out.push(Failure::new(
            "max_seconds",
            format!("at most {max} s"),
            format!("the case took {:.2} s", seen.seconds),
        ));
    }
    out
}

fn text(t: &TextExpect, reply: &str, out: &mut Vec<Failure>) {
    let seen = || {
        if reply.is_empty() {
            "the agent said nothing".to_owned()
        } else {
            format!("the reply was {:?}", short(reply, 300))
        }
    };
    for s in &t.contains {
        if !reply.contains(s.as_str()) {
            out.push(Failure::new(
                "text.contains",
                format!("the reply to contain {s:?}"),
                seen(),
            ));
        }
    }
    for s in &t.not_contains {
        if reply.contains(s.as_str()) {
            out.push(Failure::new(
                "text.not_contains",
                format!("the reply not to contain {s:?}"),
                seen(),
            ));
        }
    }
    for r in &t.regex {
        let matched = regex::Regex::new(r).is_ok_and(|re| re.is_match(reply));
        if !matched {
            out.push(Failure::new(
                "text.regex",
                format!("the reply to match /{r}/"),
                seen(),
            ));
        }
    }
}

/// Whether `want` is contained in `got`: every key of an object with a contained value, and
/// any other value equal (lists element by element, same length).
pub fn is_subset(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| is_subset(v, gv))),
        (Value::Array(w), Value::Array(g)) => {
            w.len() == g.len() && w.iter().zip(g).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => want == got,
    }
}

/// At most `max` characters of `s`, with `…` when cut.
pub fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}
