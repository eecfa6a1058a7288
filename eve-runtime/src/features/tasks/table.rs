//! A session's task table: one durable row per task, and the texts the model reads about tasks
//! (eve's receipt, `<task_result>` blocks, the `[Tasks]` note, the refusals).
//!
//! A task row lives in the store's notes under `tasks:<session>`, keyed by the task's id, and is
//! written only by the session's own driver (under its lease, so by one process of a fleet at a
//! time), inside the commit of the transition it records: started with the call's receipt,
//! settled with `task.settled`, delivered with the `<task_result>` message it becomes. A result
//! is therefore delivered exactly once: the message and the row saying it was delivered are one
//! commit.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::TurnView;
use crate::store::{Batch, NoteOp, NoteRecord, Op, now_ms};

/// At most this many tasks work at once in one session (eve's limit).
pub(crate) const MAX_WORKING_TASKS: usize = 32;
/// The refusal code for a call that would start one task too many.
pub(crate) const TOO_MANY_TASKS: &str = "TOO_MANY_TASKS";
/// The refusal code for a task id the session does not have.
pub(crate) const UNKNOWN_TASK: &str = "UNKNOWN_TASK";
/// The built-in that waits for a task's result.
pub(crate) const TASK_WAIT: &str = "task_wait";
/// The built-in that stops a task.
pub(crate) const TASK_CANCEL: &str = "task_cancel";
/// How many idle tasks the `[Tasks]` note lists.
const IDLE_LISTED: usize = 10;

/// One task of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    /// The task's id: the continuation token of its first call, `<session>:<callId>`.
    pub(crate) id: String,
    /// `agent` (a subagent's session) or `tool`.
    pub(crate) kind: String,
    /// The tool whose call started it.
    pub(crate) name: String,
    /// The call of its current work.
    pub(crate) call_id: String,
    /// The turn of that call.
    pub(crate) turn_seq: u64,
    /// The child session that does the work.
    pub(crate) child_id: String,
    /// The message of the current work in the child's inbox (the turn that takes it answers).
    pub(crate) inbox_id: String,
    /// Whether the current work is still going on.
    pub(crate) working: bool,
    /// How it settled: `completed`, `failed`, `cancelled` or `timed_out`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<String>,
    /// Its result (or the error) once settled.
    #[serde(default)]
    pub(crate) output: Value,
    /// Whether its result reached the model (or never will: a cancelled task reports nothing).
    #[serde(default)]
    pub(crate) delivered: bool,
    /// Why it was cancelled (`task_cancel`, `turn_cancelled`, `turn_ended`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cancel_reason: Option<String>,
    /// When its current work times out (epoch ms): a durable timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deadline_ms: Option<i64>,
    /// When its current work started.
    pub(crate) started_at: i64,
}

impl TaskRecord {
    /// The `turn_<seq>` of the call of its current work.
    pub(crate) fn turn_id(&self) -> String {
        format!("turn_{}", self.turn_seq)
    }

    /// Whether it settled and its result still has to reach the model.
    pub(crate) fn undelivered(&self) -> bool {
        !self.working && !self.delivered
    }

    /// Whether the model may send it more work (an agent keeps its session).
    pub(crate) fn resumable(&self) -> bool {
        self.kind == "agent"
    }

    /// `task.settled`'s status on the wire (eve knows `completed`, `failed`, `cancelled`; a
    /// timed-out task is a failure whose error says so).
    pub(crate) fn wire_status(&self) -> &str {
        match self.status.as_deref() {
            Some("completed") => "completed",
            Some("cancelled") => "cancelled",
            _ => "failed",
        }
    }

    /// The `task.settled` event of its current work.
    pub(crate) fn settled_event(&self) -> Value {
        let mut data = crate::engine::events::task_settled(
            &self.turn_id(),
            &self.call_id,
            &self.id,
            &self.kind,
            &self.name,
            self.wire_status(),
            &self.output,
            self.cancel_reason.as_deref(),
        );
        if self.status.as_deref() == Some("timed_out") {
            data["error"]["code"] = json!("timed_out");
        }
        data
    }
}

/// The notes namespace of `session`'s tasks.
fn namespace(session: &str) -> String {
    format!("tasks:{session}")
}

/// Every task of the session, oldest first.
pub(crate) async fn read(view: &TurnView<'_>) -> RuntimeResult<Vec<TaskRecord>> {
    read_of(view.rt, view.id()).await
}

/// Every task of `session`, oldest first.
pub(crate) async fn read_of(
    rt: &crate::engine::Runtime,
    session: &str,
) -> RuntimeResult<Vec<TaskRecord>> {
    let notes = rt.inner.store.notes(&namespace(session)).await?;
    let mut tasks: Vec<TaskRecord> = notes
        .iter()
        .filter_map(|n| serde_json::from_str(&n.text).ok())
        .collect();
    tasks.sort_by_key(|t| t.started_at);
    Ok(tasks)
}

/// Adds the write of `task` to `batch`.
pub(crate) fn put(batch: &mut Batch, session: &str, task: &TaskRecord) -> RuntimeResult<()> {
    let now = now_ms();
    batch.push(Op::Note(NoteOp::Put(NoteRecord {
        namespace: namespace(session),
        key: task.id.clone(),
        text: serde_json::to_string(task)?,
        created_at: now,
        updated_at: now,
    })));
    Ok(())
}

/// eve's receipt for a call that started a task.
pub(crate) fn receipt(task: &TaskRecord) -> String {
    let text = format!(
        "Started task {}. Its result will arrive in a <task_result> message.",
        task.id
    );
    if task.resumable() {
        format!(
            "{text} To send it another message, call {} again with task_id {}.",
            task.name, task.id
        )
    } else {
        text
    }
}

/// eve's receipt for more work sent to a task that was still working.
pub(crate) fn sent_receipt(id: &str) -> String {
    format!("Sent to task {id}. Its reply will arrive in a <task_result> message.")
}

/// A coded refusal, as eve returns it (`{code, message}`).
pub(crate) fn refusal(code: &str, message: String) -> Value {
    json!({"code": code, "message": message})
}

/// eve's text for a call that would start one task too many.
pub(crate) fn too_many(ids: &[&str]) -> Value {
    refusal(
        TOO_MANY_TASKS,
        format!(
            "{MAX_WORKING_TASKS} tasks are already working ({}). Wait with {TASK_WAIT} or stop one \
             with {TASK_CANCEL}, then try again.",
            ids.join(", ")
        ),
    )
}

/// eve's text for a `task_cancel` of an id the session does not have.
pub(crate) fn unknown_cancel(id: &str) -> Value {
    refusal(
        UNKNOWN_TASK,
        format!(
            "No task \"{id}\" is in this session. Copy an id from a \"Started task\" receipt or the \
             [Tasks] note."
        ),
    )
}

/// The `<task_result>` blocks of settled tasks, as one message (eve's format; a body is cut at
/// 2000 lines or 50 KiB).
pub(crate) fn results(tasks: &[&TaskRecord]) -> String {
    tasks
        .iter()
        .map(|t| {
            let status = if t.status.as_deref() == Some("completed") {
                "completed"
            } else {
                "failed"
            };
            let body = fit(&escape_body(&body_of(t)));
            format!(
                "<task_result id=\"{}\" tool=\"{}\" status=\"{status}\">{body}</task_result>",
                escape_attr(&t.id),
                escape_attr(&t.name)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a settled task reports: its answer, or why it did not finish.
fn body_of(task: &TaskRecord) -> String {
    let text = match &task.output {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    if task.status.as_deref() == Some("timed_out") {
        format!("The task timed out before it finished. {text}")
            .trim_end()
            .to_owned()
    } else {
        text
    }
}

/// The `[Tasks]` note: what works, and the idle tasks that take more work.
pub(crate) fn note(tasks: &[TaskRecord]) -> Option<String> {
    let working: Vec<&TaskRecord> = tasks.iter().filter(|t| t.working).collect();
    let idle: Vec<&TaskRecord> = tasks
        .iter()
        .filter(|t| !t.working && t.resumable())
        .collect();
    if working.is_empty() && idle.is_empty() {
        return None;
    }
    let mut lines = vec!["[Tasks]".to_owned(), "<tasks>".to_owned()];
    for t in &working {
        lines.push(format!(
            "<task id=\"{}\" tool=\"{}\" status=\"working\"/>",
            escape_attr(&t.id),
            escape_attr(&t.name)
        ));
    }
    lines.push("</tasks>".to_owned());
    if !idle.is_empty() {
        lines.push("<idle>".to_owned());
        for t in idle.iter().rev().take(IDLE_LISTED).rev() {
            lines.push(format!(
                "<task id=\"{}\" tool=\"{}\"/>",
                escape_attr(&t.id),
                escape_attr(&t.name)
            ));
        }
        lines.push("</idle>".to_owned());
    }
    Some(lines.join("\n"))
}

/// The block of the system prompt that tells the model how tasks work (eve's).
pub(crate) fn system_block() -> String {
    [
        "Tasks",
        "- A call that returns \"Started task <id>\" is a task: it keeps working while you continue. Every agent call is a task.",
        "- Each result arrives once, in a <task_result> message. Until then you know nothing about it, so don't guess or report its result.",
        "- Ending your reply doesn't end your turn. While tasks work, eve holds your turn and calls you again with each result.",
        "- If you have nothing to tell the person until a result arrives, call task_wait. Start every independent task first, then wait.",
        "- If the person should hear from you now, for example to confirm work is underway when they don't need the result yet, reply. When results arrive, report them without repeating yourself.",
        "- Don't redo work you delegated. Never use sleep or shell commands to wait for a task.",
        "- To correct or continue an agent, call its tool again with its task_id. A new message never stops your tasks: answer it if it asks you something, decide whether it changes the work, then keep each task, correct an agent by task_id, or stop a task with task_cancel.",
    ]
    .join("\n")
}

/// eve's answer of `task_wait`: which tasks settled (their results follow), which still work.
pub(crate) fn wait_answer(settled: &[&TaskRecord], working: &[&TaskRecord]) -> String {
    if settled.is_empty() && working.is_empty() {
        return "No tasks are working.".to_owned();
    }
    let mut parts = Vec::new();
    if !settled.is_empty() {
        let items: Vec<String> = settled
            .iter()
            .map(|t| format!("{} {}", t.id, t.wire_status()))
            .collect();
        let follow = if settled.len() == 1 {
            "its result follows"
        } else {
            "their results follow"
        };
        parts.push(format!("{}; {follow}.", join_list(&items)));
    }
    if !working.is_empty() {
        let ids: Vec<&str> = working.iter().map(|t| t.id.as_str()).collect();
        parts.push(format!(
            "{}: {}.",
            capitalize(&count_working(working.len())),
            ids.join(", ")
        ));
    }
    parts.join(" ")
}

/// eve's answer of a `task_wait` that ran out of time.
pub(crate) fn wait_timed_out(seconds: u64, working: usize) -> String {
    let later = if working == 1 {
        "Its result arrives before your turn ends; wait again only if you need it now."
    } else {
        "Their results arrive before your turn ends; wait again only if you need them now."
    };
    format!(
        "Stopped waiting after {seconds}s; {}. {later}",
        count_working(working)
    )
}

/// eve's answer of a `task_wait` a new message interrupted.
pub(crate) fn wait_interrupted(seconds: u64, working: usize) -> String {
    let keep = if working == 1 {
        "keep the task"
    } else {
        "keep the tasks"
    };
    format!(
        "A new message arrived, so the wait ended after {seconds}s; {}. Read the message, answer \
         it if it asks you something, and decide whether it changes this work: {keep}, call an \
         agent again with its task_id to correct it, or stop a task with {TASK_CANCEL}.",
        count_working(working)
    )
}

/// eve's answer of `task_cancel`.
pub(crate) fn cancel_answer(task: &TaskRecord, was_working: bool) -> String {
    if !was_working {
        format!("{} had no work to stop.", task.id)
    } else if task.resumable() {
        format!(
            "Stopped {}'s current work; it won't report back. To give it new work, call {} again \
             with task_id {}.",
            task.id, task.name, task.id
        )
    } else {
        format!("Stopped {}; it won't report back.", task.id)
    }
}

fn count_working(n: usize) -> String {
    if n == 1 {
        "1 task is still working".to_owned()
    } else {
        format!("{n} tasks are still working")
    }
}

fn join_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    }
}

fn escape_body(s: &str) -> String {
    s.replace("</task_result", "<\\/task_result")
}

fn escape_attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A body cut to eve's budget: 2000 lines or 50 KiB, whichever comes first.
fn fit(body: &str) -> String {
    let (mut bytes, mut lines) = (51_200usize, 2_000usize);
    let mut out = Vec::new();
    for line in body.split('\n') {
        let size = line.len() + 1;
        if lines == 0 || size > bytes {
            out.push("[truncated]");
            break;
        }
        out.push(line);
        lines -= 1;
        bytes -= size;
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, working: bool, status: Option<&str>, output: Value) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            kind: "agent".into(),
            name: "researcher".into(),
            call_id: "c1".into(),
            turn_seq: 0,
            child_id: "wrun_child".into(),
            inbox_id: "msg_1".into(),
            working,
            status: status.map(str::to_owned),
            output,
            delivered: false,
            cancel_reason: None,
            deadline_ms: None,
            started_at: 1,
        }
    }

    #[test]
    fn a_result_block_escapes_its_body_and_attributes() {
        let t = task(
            "s:c1",
            false,
            Some("completed"),
            json!("a </task_result> b"),
        );
        assert_eq!(
            results(&[&t]),
            "<task_result id=\"s:c1\" tool=\"researcher\" status=\"completed\">a <\\/task_result> b</task_result>"
        );
    }

    #[test]
    fn the_note_lists_working_then_idle_tasks() {
        let a = task("s:a", true, None, Value::Null);
        let b = task("s:b", false, Some("completed"), json!("x"));
        assert_eq!(
            note(&[a, b]).unwrap(),
            "[Tasks]\n<tasks>\n<task id=\"s:a\" tool=\"researcher\" status=\"working\"/>\n</tasks>\n<idle>\n<task id=\"s:b\" tool=\"researcher\"/>\n</idle>"
        );
        assert_eq!(note(&[]), None);
    }

    #[test]
    fn a_long_body_is_cut_at_two_thousand_lines() {
        let body = vec!["x"; 2_500].join("\n");
        let cut = fit(&body);
        assert_eq!(cut.lines().count(), 2_001);
        assert!(cut.ends_with("[truncated]"));
    }

    #[test]
    fn the_wait_answer_names_settled_and_working_tasks() {
        let a = task("s:a", false, Some("completed"), json!("x"));
        let b = task("s:b", true, None, Value::Null);
        assert_eq!(
            wait_answer(&[&a], &[&b]),
            "s:a completed; its result follows. 1 task is still working: s:b."
        );
    }
}
