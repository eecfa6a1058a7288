//! eve's wire events as ACP `session/update`s: text and reasoning deltas become message and
//! thought chunks, requested actions become tool calls (with the files they touch as
//! `locations`) whose status follows approvals and results, and a `strategy: plan` turn's plan
//! becomes a `plan` whose entries follow its `plan_step` calls. Pure: the same events give the
//! same updates, live or replayed by `session/load` (which also replays the user's messages).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use eve_runtime::engine::events as ev;
use serde_json::{Value, json};

/// The tool that runs one step of a `strategy: plan` turn.
const PLAN_STEP: &str = "plan_step";
/// The longest tool output shown as a tool call's content (the raw output has all of it).
const MAX_SHOWN_OUTPUT: usize = 16 * 1024;
/// Input fields that name a file a tool reads or writes.
const PATH_FIELDS: [&str; 4] = ["path", "file_path", "file", "filename"];

/// One plan entry and its state.
struct Entry {
    id: String,
    content: String,
    status: &'static str,
}

/// Turns a session's events into updates, in order.
pub(crate) struct Mapper {
    /// Replaying history (`session/load`): the user's messages are sent too.
    replay: bool,
    /// The session's workspace, which relative paths in tool inputs are resolved against (known
    /// in-process only).
    workspace: Option<PathBuf>,
    /// Calls announced `pending` whose next event decides whether they run now or wait for an
    /// approval.
    unconfirmed: Vec<String>,
    /// Calls not yet settled.
    open: HashSet<String>,
    plan: Vec<Entry>,
    /// `plan_step` calls and the plan entry each runs.
    plan_calls: HashMap<String, String>,
    /// Input requests and the call each asks about.
    asked: HashMap<String, String>,
}

impl Mapper {
    pub(crate) fn new(replay: bool, workspace: Option<PathBuf>) -> Self {
        Self {
            replay,
            workspace,
            unconfirmed: Vec::new(),
            open: HashSet::new(),
            plan: Vec::new(),
            plan_calls: HashMap::new(),
            asked: HashMap::new(),
        }
    }

    /// From now on the events are live: the user's messages are the client's own prompts.
    pub(crate) fn live(&mut self) {
        self.replay = false;
    }

    /// The `toolCall` of a permission request about `request`'s call.
    pub(crate) fn permission_call(&self, request: &Pending) -> Value {
        let mut call = json!({
            "toolCallId": request.call,
            "title": title(&request.tool, &request.input),
            "kind": tool_kind(&json!({"toolName": request.tool})),
            "status": "pending",
            "rawInput": request.input,
        });
        let locations = self.locations(&request.input);
        if !locations.is_empty() {
            call["locations"] = Value::Array(locations);
        }
        call
    }

    /// Whether announced calls wait to be told apart (run now, or wait for an approval).
    pub(crate) fn unsure(&self) -> bool {
        !self.unconfirmed.is_empty()
    }

    /// No approval was asked for the announced calls in time: they are running.
    pub(crate) fn running(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.unconfirmed)
            .iter()
            .map(|c| status(c, "in_progress"))
            .collect()
    }

    /// The updates `event` (`{type, data, meta}`) gives.
    pub(crate) fn map(&mut self, event: &Value) -> Vec<Value> {
        let kind = event["type"].as_str().unwrap_or_default();
        let data = &event["data"];
        let mut out = Vec::new();
        // Calls announced by an earlier event start now, unless this event asks about them
        // (eve asks right after the step that requested them completes).
        let between = matches!(kind, ev::STEP_COMPLETED | ev::MESSAGE_COMPLETED);
        if !self.unconfirmed.is_empty() && !between {
            let asked: HashSet<&str> = if kind == ev::INPUT_REQUESTED {
                requests(data).map(|r| r.0).collect()
            } else {
                HashSet::new()
            };
            for call in std::mem::take(&mut self.unconfirmed) {
                if !asked.contains(call.as_str()) {
                    out.push(status(&call, "in_progress"));
                }
            }
        }
        match kind {
            "message.received" if self.replay => {
                if let Some(text) = data["message"].as_str().filter(|t| !t.is_empty()) {
                    out.push(json!({
                        "sessionUpdate": "user_message_chunk",
                        "messageId": format!("msg_user_{}", data["turnId"].as_str().unwrap_or("0")),
                        "content": {"type": "text", "text": text},
                    }));
                }
            }
            ev::MESSAGE_APPENDED => {
                if let Some(text) = data["messageDelta"].as_str().filter(|t| !t.is_empty()) {
                    out.push(chunk("agent_message_chunk", data, text));
                }
            }
            ev::REASONING_APPENDED => {
                if let Some(text) = data["reasoningDelta"].as_str().filter(|t| !t.is_empty()) {
                    out.push(chunk("agent_thought_chunk", data, text));
                }
            }
            ev::ACTIONS_REQUESTED => {
                for action in data["actions"].as_array().into_iter().flatten() {
                    let Some(id) = action["callId"].as_str() else {
                        continue;
                    };
                    out.push(self.tool_call(id, action, &data["presentation"][id]["label"]));
                    self.unconfirmed.push(id.to_owned());
                    self.open.insert(id.to_owned());
                    if action["toolName"] == PLAN_STEP
                        && let Some(step) = action["input"]["step"].as_str()
                    {
                        self.plan_calls.insert(id.to_owned(), step.to_owned());
                        if self.set_plan(step, "in_progress") {
                            out.push(self.plan_update());
                        }
                    }
                }
            }
            ev::INPUT_REQUESTED => {
                for (call, r) in requests(data) {
                    if let Some(id) = r["requestId"].as_str() {
                        self.asked.insert(id.to_owned(), call.to_owned());
                    }
                }
            }
            ev::APPROVAL_SETTLED => {
                // The event names the request; the call is the one it asked about.
                let call = data["requestId"]
                    .as_str()
                    .and_then(|r| self.asked.remove(r));
                if let Some(call) = call
                    && data["outcome"] == "approved"
                {
                    out.push(status(&call, "in_progress"));
                }
            }
            "action.partial" => {
                let result = &data["result"];
                if let Some(id) = result["callId"].as_str() {
                    let label = &data["presentation"][id]["label"];
                    let text = match label {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.push(json!({
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": id,
                        "status": "in_progress",
                        "content": [{"type": "content", "content": {"type": "text", "text": text}}],
                    }));
                }
            }
            ev::ACTION_RESULT => {
                let result = &data["result"];
                if let Some(id) = result["callId"].as_str() {
                    let ok = data["status"].as_str().unwrap_or("completed") == "completed"
                        && result["isError"] != true;
                    self.open.remove(id);
                    let output = &result["output"];
                    let mut update = json!({
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": id,
                        "status": if ok { "completed" } else { "failed" },
                        "rawOutput": output,
                    });
                    let text = shown(output);
                    if !text.is_empty() {
                        update["content"] = json!([{"type": "content",
                            "content": {"type": "text", "text": text}}]);
                    }
                    out.push(update);
                    if let Some(step) = self.plan_calls.remove(id) {
                        let to = if ok { "completed" } else { "pending" };
                        if self.set_plan(&step, to) {
                            out.push(self.plan_update());
                        }
                    }
                }
            }
            "plan.created" => {
                self.plan = data["plan"]["steps"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| Entry {
                        id: s["id"].as_str().unwrap_or_default().to_owned(),
                        content: s["description"].as_str().unwrap_or_default().to_owned(),
                        status: "pending",
                    })
                    .collect();
                out.push(self.plan_update());
            }
            ev::TURN_CANCELLED | ev::TURN_FAILED | ev::TURN_COMPLETED => {
                let mut open: Vec<String> = self.open.drain().collect();
                open.sort();
                for call in open {
                    out.push(status(&call, "failed"));
                }
                self.plan_calls.clear();
            }
            _ => {}
        }
        out
    }

    /// The `tool_call` of one requested action.
    fn tool_call(&self, id: &str, action: &Value, label: &Value) -> Value {
        let name = action["toolName"]
            .as_str()
            .or_else(|| action["name"].as_str())
            .unwrap_or("tool");
        let input = &action["input"];
        let title = match label.as_str() {
            Some(label) => label.to_owned(),
            None => title(name, input),
        };
        let mut call = json!({
            "sessionUpdate": "tool_call",
            "toolCallId": id,
            "title": title,
            "kind": tool_kind(action),
            "status": "pending",
            "rawInput": input,
        });
        let locations = self.locations(input);
        if !locations.is_empty() {
            call["locations"] = Value::Array(locations);
        }
        call
    }

    /// The files a call's input names, absolute when the workspace is known.
    pub(crate) fn locations(&self, input: &Value) -> Vec<Value> {
        let mut paths: Vec<&str> = PATH_FIELDS
            .iter()
            .filter_map(|f| input[*f].as_str())
            .collect();
        paths.extend(
            input["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str),
        );
        let line = input["line"].as_u64();
        paths
            .into_iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                let path = match &self.workspace {
                    Some(ws) if !p.starts_with('/') => {
                        ws.join(p.trim_start_matches("./")).display().to_string()
                    }
                    _ => p.to_owned(),
                };
                let mut location = json!({"path": path});
                if let Some(line) = line {
                    location["line"] = json!(line);
                }
                location
            })
            .collect()
    }

    /// Sets entry `id`'s status; whether it changed.
    fn set_plan(&mut self, id: &str, to: &'static str) -> bool {
        match self.plan.iter_mut().find(|e| e.id == id) {
            Some(entry) if entry.status != to => {
                entry.status = to;
                true
            }
            _ => false,
        }
    }

    fn plan_update(&self) -> Value {
        json!({
            "sessionUpdate": "plan",
            "entries": self.plan.iter().map(|e| json!({
                "content": e.content,
                "priority": "medium",
                "status": e.status,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The `(callId, request)` pairs of an `input.requested`.
fn requests(data: &Value) -> impl Iterator<Item = (&str, &Value)> {
    data["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["action"]["callId"].as_str().map(|id| (id, r)))
}

fn chunk(kind: &str, data: &Value, text: &str) -> Value {
    json!({
        "sessionUpdate": kind,
        "messageId": format!(
            "msg_{}_{}{}",
            data["turnId"].as_str().unwrap_or("turn"),
            data["stepIndex"].as_u64().unwrap_or(0),
            if kind == "agent_thought_chunk" { "_thought" } else { "" }
        ),
        "content": {"type": "text", "text": text},
    })
}

fn status(call: &str, status: &str) -> Value {
    json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": status})
}

/// A call's title: the tool's name, and the first file or command it names.
fn title(name: &str, input: &Value) -> String {
    let detail = PATH_FIELDS
        .iter()
        .chain(["command", "url", "query", "pattern", "step"].iter())
        .find_map(|f| input[*f].as_str())
        .map(|d| {
            d.lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(80)
                .collect::<String>()
        });
    match detail {
        Some(d) if !d.is_empty() => format!("{name} {d}"),
        _ => name.to_owned(),
    }
}

/// ACP's tool kind for an action: what the built-ins do, `other` for the rest.
fn tool_kind(action: &Value) -> &'static str {
    if action["kind"] == "load-skill" {
        return "read";
    }
    match action["toolName"].as_str().unwrap_or_default() {
        "read_file" => "read",
        "write_file" | "edit_file" => "edit",
        "bash" => "execute",
        "web_fetch" => "fetch",
        "web_search" | "glob" | "grep" => "search",
        "submit_plan" => "think",
        _ => "other",
    }
}

/// A tool's output as text, capped.
fn shown(output: &Value) -> String {
    let text = match output {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.len() <= MAX_SHOWN_OUTPUT {
        return text;
    }
    let mut end = MAX_SHOWN_OUTPUT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… ({} bytes in all)", &text[..end], text.len())
}

/// Input requests of a session's events that nothing answered or ended: what a loaded session
/// still waits on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pending {
    pub(crate) request: String,
    pub(crate) call: String,
    pub(crate) tool: String,
    pub(crate) kind: String,
    pub(crate) input: Value,
}

pub(crate) fn unanswered(events: &[Value]) -> Vec<Pending> {
    let mut open: Vec<Pending> = Vec::new();
    for event in events {
        match event["type"].as_str().unwrap_or_default() {
            ev::INPUT_REQUESTED => {
                for (call, r) in requests(&event["data"]) {
                    let Some(id) = r["requestId"].as_str() else {
                        continue;
                    };
                    open.retain(|o| o.request != id);
                    open.push(Pending {
                        request: id.to_owned(),
                        call: call.to_owned(),
                        tool: r["action"]["toolName"]
                            .as_str()
                            .unwrap_or("tool")
                            .to_owned(),
                        kind: r["kind"].as_str().unwrap_or_default().to_owned(),
                        input: r["action"]["input"].clone(),
                    });
                }
            }
            ev::APPROVAL_SETTLED => {
                let id = event["data"]["requestId"].as_str().unwrap_or_default();
                open.retain(|o| o.request != id);
            }
            ev::TURN_CANCELLED | ev::TURN_FAILED | ev::TURN_COMPLETED => open.clear(),
            _ => {}
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, data: Value) -> Value {
        json!({"type": kind, "data": data, "meta": {}})
    }

    #[test]
    fn a_call_that_needs_approval_waits_and_one_that_does_not_runs() {
        let mut m = Mapper::new(false, Some(PathBuf::from("/ws")));
        let asked = m.map(&event(
            ev::ACTIONS_REQUESTED,
            json!({"turnId": "turn_1", "stepIndex": 0, "actions": [
                {"callId": "c1", "kind": "tool-call", "toolName": "write_file",
                 "input": {"path": "notes/a.txt", "content": "x"}},
                {"callId": "c2", "kind": "tool-call", "toolName": "read_file",
                 "input": {"path": "/abs/b.txt"}}]}),
        ));
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[0]["kind"], "edit");
        assert_eq!(asked[0]["locations"], json!([{"path": "/ws/notes/a.txt"}]));
        assert_eq!(asked[1]["locations"], json!([{"path": "/abs/b.txt"}]));
        assert!(m.map(&event(ev::STEP_COMPLETED, json!({}))).is_empty());
        assert!(m.unsure());
        let next = m.map(&event(
            ev::INPUT_REQUESTED,
            json!({"requests": [{"requestId": "r1", "action": {"callId": "c1"}}]}),
        ));
        assert_eq!(next, vec![status("c2", "in_progress")]);
        let done = m.map(&event(
            ev::ACTION_RESULT,
            json!({"status": "completed", "result": {"callId": "c2", "output": {"ok": true}}}),
        ));
        assert_eq!(done[0]["status"], "completed");
        assert_eq!(done[0]["content"][0]["content"]["text"], "{\"ok\":true}");
        let end = m.map(&event(ev::TURN_CANCELLED, json!({})));
        assert_eq!(end, vec![status("c1", "failed")]);
    }

    #[test]
    fn a_plan_follows_its_steps() {
        let mut m = Mapper::new(false, None);
        let plan = m.map(&event(
            "plan.created",
            json!({"plan": {"steps": [{"id": "a", "description": "Do A"},
                                      {"id": "b", "description": "Do B"}]}}),
        ));
        assert_eq!(plan[0]["entries"][1]["content"], "Do B");
        let wave = m.map(&event(
            ev::ACTIONS_REQUESTED,
            json!({"actions": [{"callId": "p1", "toolName": "plan_step", "input": {"step": "a"}}]}),
        ));
        assert_eq!(wave[1]["entries"][0]["status"], "in_progress");
        let done = m.map(&event(
            ev::ACTION_RESULT,
            json!({"status": "completed", "result": {"callId": "p1", "output": "A done"}}),
        ));
        let last = done.last().cloned().unwrap_or_default();
        assert_eq!(last["entries"][0]["status"], "completed");
        assert_eq!(last["entries"][1]["status"], "pending");
    }

    #[test]
    fn replay_sends_the_users_messages_too() {
        let received = event(
            "message.received",
            json!({"turnId": "turn_1", "message": "hi"}),
        );
        assert!(Mapper::new(false, None).map(&received).is_empty());
        let replayed = Mapper::new(true, None).map(&received);
        assert_eq!(replayed[0]["sessionUpdate"], "user_message_chunk");
    }
}
