//! The lines `eve dev` prints about what its sessions do: one per finished turn, one per tool
//! call (with its result or error and how long it took), one per approval asked, one per
//! schedule fire.
//!
//! A developer watching `eve dev` should see a failing tool without opening another terminal.
//! [`Lines`] turns the runtime's events, as they are committed in this process
//! ([`Runtime::subscribe_all`]), into those lines; it is a pure fold over events so its output is
//! tested without a server. [`talk`] runs it next to the server until shutdown. Names, outputs
//! and errors in the events come from models, tools and hooks: each is shown through
//! [`Untrusted`] (or [`short`], which neutralises) before the line is coloured.

use std::collections::HashMap;
use std::time::Duration;

use eve_runtime::engine::Runtime;
use eve_runtime::store::StoredEvent;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::render::{duration, paint};
use crate::sanitize::{Untrusted, errln, neutralise};

/// Longest error or reply shown on a line, in characters.
const SHOWN_CHARS: usize = 120;

/// What one session's turn has done so far.
#[derive(Debug, Default)]
struct TurnSoFar {
    started_at: i64,
    steps: u64,
    calls: u64,
    failed_calls: u64,
}

/// The state the lines need between events.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    color: bool,
    turns: HashMap<String, TurnSoFar>,
    /// When each call (by session and call id) started, or resumed after its approval.
    calls: HashMap<(String, String), i64>,
    /// The call each pending request (by request id) asks about.
    requests: HashMap<String, String>,
}

/// Foreign text on one line, at most [`SHOWN_CHARS`] of it, neutralised.
fn short(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= SHOWN_CHARS {
        return neutralise(&flat).into_owned();
    }
    let mut cut: String = flat.chars().take(SHOWN_CHARS - 1).collect();
    cut.push('…');
    neutralise(&cut).into_owned()
}

fn took(from: i64, to: i64) -> String {
    duration(Duration::from_millis(
        u64::try_from(to.saturating_sub(from)).unwrap_or_default(),
    ))
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// A tool's output as one short line.
fn output_text(output: &Value) -> String {
    match output {
        Value::String(text) => short(text),
        Value::Null => String::new(),
        other => short(&other.to_string()),
    }
}

impl Lines {
    pub(crate) fn new(color: bool) -> Self {
        Self {
            color,
            ..Self::default()
        }
    }

    fn prefix(&self, session: &str, turn: Option<u64>) -> String {
        match turn {
            Some(turn) => paint(self.color, "2", &format!("{session} turn {turn}")),
            None => paint(self.color, "2", session),
        }
    }

    /// The line `event` prints, if any. `schedule` is the schedule that started the session,
    /// for its `session.started`.
    pub(crate) fn line(&mut self, event: &StoredEvent, schedule: Option<&str>) -> Option<String> {
        let d = &event.data;
        let sid = event.session_id.as_str();
        let turn = d["sequence"].as_u64();
        match event.kind.as_str() {
            "session.started" => schedule.map(|name| {
                format!(
                    "{} {name} fired: session {sid}",
                    paint(self.color, "1;35", "schedule")
                )
            }),
            "turn.started" => {
                self.turns.insert(
                    sid.to_owned(),
                    TurnSoFar {
                        started_at: event.at,
                        ..TurnSoFar::default()
                    },
                );
                None
            }
            "step.started" => {
                if let Some(t) = self.turns.get_mut(sid) {
                    t.steps += 1;
                }
                None
            }
            "actions.requested" => {
                for a in d["actions"].as_array().into_iter().flatten() {
                    if let Some(call) = a["callId"].as_str() {
                        self.calls
                            .insert((sid.to_owned(), call.to_owned()), event.at);
                    }
                }
                None
            }
            "input.requested" => {
                let mut asked = Vec::new();
                for r in d["requests"].as_array().into_iter().flatten() {
                    let tool = r["action"]["toolName"]
                        .as_str()
                        .or_else(|| r["action"]["name"].as_str())
                        .unwrap_or("a tool");
                    if let (Some(id), Some(call)) =
                        (r["requestId"].as_str(), r["action"]["callId"].as_str())
                    {
                        self.requests.insert(id.to_owned(), call.to_owned());
                    }
                    asked.push(format!(
                        "{} {}",
                        Untrusted(tool),
                        short(&r["action"]["input"].to_string())
                    ));
                }
                (!asked.is_empty()).then(|| {
                    format!(
                        "{} {} waits for approval of {} (answer in the console or with `eve sessions approve {sid}`)",
                        paint(self.color, "1;33", "approval"),
                        self.prefix(sid, turn),
                        asked.join(", ")
                    )
                })
            }
            "input.resolved" => {
                for r in d["resolutions"].as_array().into_iter().flatten() {
                    if let Some(call) = r["requestId"]
                        .as_str()
                        .and_then(|id| self.requests.remove(id))
                    {
                        self.calls.insert((sid.to_owned(), call), event.at);
                    }
                }
                None
            }
            "action.result" => {
                let r = &d["result"];
                let call = r["callId"].as_str().unwrap_or_default();
                let name = r["toolName"]
                    .as_str()
                    .map(str::to_owned)
                    .or_else(|| r["name"].as_str().map(|n| format!("skill {n}")))
                    .unwrap_or_else(|| "tool".to_owned());
                let name = Untrusted(name);
                let status = d["status"].as_str().unwrap_or("completed");
                let start = self
                    .calls
                    .remove(&(sid.to_owned(), call.to_owned()))
                    .unwrap_or(event.at);
                let failed = r["isError"].as_bool().unwrap_or(false) || status != "completed";
                if let Some(t) = self.turns.get_mut(sid) {
                    t.calls += 1;
                    if failed {
                        t.failed_calls += 1;
                    }
                }
                let time = took(start, event.at);
                let output = output_text(&r["output"]);
                Some(if failed {
                    format!(
                        "{} {} {name} {} after {time}: {output}",
                        paint(self.color, "1;31", "tool"),
                        self.prefix(sid, turn),
                        Untrusted(status),
                    )
                } else {
                    format!(
                        "{} {} {name} ok in {time}{}",
                        paint(self.color, "36", "tool"),
                        self.prefix(sid, turn),
                        if output.is_empty() {
                            String::new()
                        } else {
                            format!(": {output}")
                        }
                    )
                })
            }
            "turn.completed" | "turn.failed" | "turn.cancelled" => {
                let so_far = self.turns.remove(sid).unwrap_or(TurnSoFar {
                    started_at: event.at,
                    ..TurnSoFar::default()
                });
                let time = took(so_far.started_at, event.at);
                let mut counts = vec![plural(so_far.steps, "step")];
                if so_far.calls > 0 {
                    let mut calls = plural(so_far.calls, "tool call");
                    if so_far.failed_calls > 0 {
                        calls.push_str(&format!(", {} failed", so_far.failed_calls));
                    }
                    counts.push(calls);
                }
                let counts = counts.join(", ");
                Some(match event.kind.as_str() {
                    "turn.completed" => format!(
                        "{} {} completed in {time} ({counts})",
                        paint(self.color, "32", "turn"),
                        self.prefix(sid, turn)
                    ),
                    "turn.failed" => format!(
                        "{} {} failed after {time} ({counts}): {} ({})",
                        paint(self.color, "1;31", "turn"),
                        self.prefix(sid, turn),
                        short(d["error"]["message"].as_str().unwrap_or("unknown error")),
                        Untrusted(
                            d["stopReason"]
                                .as_str()
                                .or_else(|| d["error"]["code"].as_str())
                                .unwrap_or("error")
                        )
                    ),
                    _ => format!(
                        "{} {} cancelled after {time} ({counts})",
                        paint(self.color, "33", "turn"),
                        self.prefix(sid, turn)
                    ),
                })
            }
            _ => None,
        }
    }
}

/// Prints the lines of every event this process commits until `shutdown`.
pub(crate) async fn talk(runtime: Runtime, color: bool, shutdown: CancellationToken) {
    let mut events = runtime.subscribe_all();
    let mut lines = Lines::new(color);
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.recv() => event,
        };
        let event = match event {
            Ok(event) => event,
            Err(RecvError::Lagged(n)) => {
                errln!(
                    "{}",
                    paint(
                        color,
                        "2",
                        &format!("eve dev: {n} events went by unprinted")
                    )
                );
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let schedule = if event.kind == "session.started" {
            runtime
                .session(&event.session_id)
                .await
                .ok()
                .flatten()
                .and_then(|s| s.schedule)
        } else {
            None
        };
        if let Some(line) = lines.line(&event, schedule.as_deref()) {
            errln!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, at: i64, data: Value) -> StoredEvent {
        StoredEvent {
            session_id: "wrun_1".to_owned(),
            index: 0,
            id: String::new(),
            kind: kind.to_owned(),
            data,
            at,
        }
    }

    fn play(events: &[StoredEvent]) -> Vec<String> {
        let mut lines = Lines::new(false);
        events.iter().filter_map(|e| lines.line(e, None)).collect()
    }

    #[test]
    fn a_turn_with_a_tool_is_two_lines() {
        let lines = play(&[
            event("turn.started", 1_000, json!({"sequence": 0})),
            event("step.started", 1_001, json!({"sequence": 0})),
            event(
                "actions.requested",
                1_010,
                json!({"sequence": 0, "actions": [{"callId": "c1", "toolName": "weather"}]}),
            ),
            event(
                "action.result",
                1_052,
                json!({"sequence": 0, "status": "completed",
                       "result": {"callId": "c1", "toolName": "weather", "output": {"temp": 21}}}),
            ),
            event("step.started", 1_060, json!({"sequence": 0})),
            event("turn.completed", 2_500, json!({"sequence": 0})),
        ]);
        assert_eq!(
            lines,
            [
                "tool wrun_1 turn 0 weather ok in 42 ms: {\"temp\":21}",
                "turn wrun_1 turn 0 completed in 1.5 s (2 steps, 1 tool call)",
            ]
        );
    }

    #[test]
    fn a_failing_tool_and_a_failed_turn_say_why() {
        let lines = play(&[
            event("turn.started", 0, json!({"sequence": 3})),
            event(
                "actions.requested",
                0,
                json!({"sequence": 3, "actions": [{"callId": "c1", "toolName": "flaky"}]}),
            ),
            event(
                "action.result",
                2_000,
                json!({"sequence": 3, "status": "failed", "result": {"callId": "c1",
                       "toolName": "flaky", "isError": true, "output": "exit status 1: boom"}}),
            ),
            event(
                "turn.failed",
                2_100,
                json!({"sequence": 3, "error": {"code": "model_error", "message": "HTTP 500"}}),
            ),
        ]);
        assert_eq!(
            lines,
            [
                "tool wrun_1 turn 3 flaky failed after 2.0 s: exit status 1: boom",
                "turn wrun_1 turn 3 failed after 2.1 s (0 steps, 1 tool call, 1 failed): HTTP 500 (model_error)",
            ]
        );
    }

    #[test]
    fn an_approved_call_is_timed_from_its_answer() {
        let lines = play(&[
            event(
                "actions.requested",
                0,
                json!({"sequence": 0, "actions": [{"callId": "c1", "toolName": "refund"}]}),
            ),
            event(
                "input.requested",
                5,
                json!({"sequence": 0, "requests": [{"requestId": "apr_1",
                       "action": {"callId": "c1", "toolName": "refund", "input": {"amount": 5}}}]}),
            ),
            event(
                "input.resolved",
                60_000,
                json!({"sequence": 0, "resolutions": [{"requestId": "apr_1"}]}),
            ),
            event(
                "action.result",
                60_012,
                json!({"sequence": 0, "status": "completed",
                       "result": {"callId": "c1", "toolName": "refund", "output": "ok"}}),
            ),
        ]);
        assert_eq!(
            lines[0],
            "approval wrun_1 turn 0 waits for approval of refund {\"amount\":5} (answer in the \
             console or with `eve sessions approve wrun_1`)"
        );
        assert_eq!(lines[1], "tool wrun_1 turn 0 refund ok in 12 ms: ok");
    }

    #[test]
    fn foreign_text_cannot_drive_the_terminal() {
        let attack = "\u{1b}]0;pwned\u{7}\u{1b}[2K\rApproval granted by admin\u{202e}";
        let lines = play(&[
            event(
                "input.requested",
                0,
                json!({"sequence": 0, "requests": [{"requestId": "apr_1",
                       "action": {"callId": "c1", "toolName": attack, "input": {"x": attack}}}]}),
            ),
            event(
                "action.result",
                5,
                json!({"sequence": 0, "status": attack,
                       "result": {"callId": "c1", "toolName": attack, "isError": true,
                                  "output": attack}}),
            ),
            event(
                "turn.failed",
                9,
                json!({"sequence": 0, "stopReason": attack, "error": {"message": attack}}),
            ),
        ]);
        assert_eq!(lines.len(), 3);
        for line in &lines {
            assert!(
                !line.chars().any(|c| c.is_control() || c == '\u{202e}'),
                "{line:?}"
            );
            assert!(
                line.contains("␛]0;pwned␇␛[2K␍Approval granted by admin"),
                "{line}"
            );
        }
    }

    #[test]
    fn a_schedule_fire_is_a_line() {
        let mut lines = Lines::new(false);
        let started = event("session.started", 0, json!({}));
        assert_eq!(lines.line(&started, None), None);
        assert_eq!(
            lines.line(&started, Some("digest")).as_deref(),
            Some("schedule digest fired: session wrun_1")
        );
    }
}
