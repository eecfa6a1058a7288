//! Fitting one tool result into the model's context window, before it is journaled.
//!
//! A process tool's byte cap (`output_limit`, 1 MiB by default) keeps memory bounded; it does
//! not make a result fit the model: 590 KB is under the cap and far over a 32k-token window, and
//! a turn that sends it fails `context_too_long`. So a result longer than its share of the
//! window ([`SHARE`] of it in tokens, at [`CHARS_PER_TOKEN`] characters each) is cut to its
//! head and tail around a note saying how much was cut and where the whole output is: saved in
//! the session's workspace as `.eve/outputs/<call id>.txt`, written with the built-in
//! `write_file` (the runtime's way to write a workspace file, confined like the model's own
//! writes), where the model can read it in parts. The journal, the stream and every later
//! request carry the cut result; the workspace (checkpointed with the session) keeps the whole.
//! When nobody knows the window, only the byte cap applies.

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{TurnDriver, content_for_model};
use crate::store::ToolCallRecord;
use crate::tools::builtin::WRITE_FILE;
use crate::tools::{ToolContext, run_builtin};

/// A result may take a quarter of the window.
const SHARE: u64 = 4;
/// Characters per token, the estimate compaction uses too.
const CHARS_PER_TOKEN: u64 = 4;
/// Results this short are never cut (no usable window is smaller than four times this).
const FLOOR: usize = 2_000;
/// Room kept for the note between head and tail.
const NOTE_ROOM: usize = 600;
/// Where whole outputs go, in the session's workspace.
const OUTPUTS: &str = ".eve/outputs";

impl TurnDriver<'_> {
    /// `output` as the model gets it: whole when it fits its share of the context window, else
    /// head and tail around a note, the whole saved in the workspace through `ctx`.
    pub(super) async fn fit_output(
        &self,
        call: &ToolCallRecord,
        output: Value,
        ctx: &ToolContext,
    ) -> Value {
        let text = content_for_model(&output);
        if text.len() <= FLOOR {
            return output;
        }
        let Some(window) = self.context_window().await else {
            return output;
        };
        let budget = usize::try_from(window / SHARE * CHARS_PER_TOKEN)
            .unwrap_or(usize::MAX)
            .max(FLOOR);
        if text.len() <= budget {
            return output;
        }
        let path = output_path(&call.call_id);
        let saved = save_output(&path, &text, ctx).await;
        if let Err(e) = &saved {
            tracing::warn!(call = %call.call_id, error = %e, "cannot save a long tool output in the workspace");
        }
        Value::String(cut(&text, budget, window, &path, saved))
    }
}

/// Where a call's whole output is saved in its workspace: the call id with anything but
/// letters, digits, `-` and `_` replaced (a model chooses call ids).
fn output_path(call_id: &str) -> String {
    let name: String = call_id
        .chars()
        .take(96)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = if name.is_empty() { "output" } else { &name };
    format!("{OUTPUTS}/{name}.txt")
}

/// The one write of a whole output into the workspace, through the built-in `write_file`.
async fn save_output(path: &str, text: &str, ctx: &ToolContext) -> Result<(), String> {
    let input = json!({"path": path, "content": text});
    let result = run_builtin(WRITE_FILE, &input, ctx, CancellationToken::new()).await;
    if result.ok {
        Ok(())
    } else {
        Err(result
            .error
            .unwrap_or_else(|| "the write failed".to_owned()))
    }
}

/// `text` cut to about `budget` bytes: two thirds head, one third tail, each ending (or
/// starting) at a line break when one is near, around the note.
fn cut(text: &str, budget: usize, window: u64, path: &str, saved: Result<(), String>) -> String {
    let keep = budget.saturating_sub(NOTE_ROOM);
    let head_len = keep * 2 / 3;
    let tail_len = keep - head_len;
    let mut head_end = floor_boundary(text, head_len);
    if let Some(nl) = text[..head_end].rfind('\n')
        && nl >= head_end * 3 / 4
    {
        head_end = nl;
    }
    let mut tail_start = ceil_boundary(text, text.len().saturating_sub(tail_len)).max(head_end);
    if let Some(nl) = text[tail_start..].find('\n')
        && nl <= tail_len / 4
    {
        tail_start += nl + 1;
    }
    let middle = &text[head_end..tail_start];
    let lines = middle.matches('\n').count();
    let whole = match saved {
        Ok(()) => format!(
            "the whole output ({} bytes) is in the workspace at `{path}`: read it in parts \
             (`read_file` with offset and limit) or search it",
            text.len()
        ),
        Err(e) => format!("the whole output could not be saved in the workspace ({e})"),
    };
    format!(
        "{}\n[eve cut {} bytes ({lines} lines) from the middle of this result to fit the \
         model's context window ({window} tokens); {whole}]\n{}",
        &text[..head_end],
        middle.len(),
        text[tail_start..].trim_start_matches('\n')
    )
}

/// The largest character boundary at or below `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The smallest character boundary at or above `at`.
fn ceil_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_keeps_head_and_tail_around_the_note() {
        let text: String = (0..20_000).map(|i| format!("line {i} é\n")).collect();
        let out = cut(&text, 8_000, 2_000, ".eve/outputs/c1.txt", Ok(()));
        assert!(out.len() <= 8_000 + 200, "{}", out.len());
        assert!(out.starts_with("line 0 é\nline 1 é\n"));
        assert!(out.ends_with("line 19999 é\n"));
        assert!(out.contains("`.eve/outputs/c1.txt`"), "{out}");
        assert!(out.contains("(2000 tokens)"));
        let failed = cut(&text, 8_000, 2_000, "x", Err("disk full".into()));
        assert!(failed.contains("could not be saved in the workspace (disk full)"));
    }

    #[test]
    fn call_ids_become_plain_file_names() {
        assert_eq!(output_path("call_1"), ".eve/outputs/call_1.txt");
        assert_eq!(output_path("../../etc/x"), ".eve/outputs/______etc_x.txt");
        assert_eq!(output_path(""), ".eve/outputs/output.txt");
    }
}
