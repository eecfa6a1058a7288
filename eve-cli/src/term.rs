//! Rendering a session's events in the terminal, shared by `eve run` and `eve chat`.
//!
//! The reply streams to stdout as it arrives; tool calls (one line each), results, reasoning
//! (dimmed) and notices go to stderr, so stdout holds only what the agent said. Events come either
//! from the store ([`StoredEvent`]) or off the wire (eve's `{type, data, meta}` envelope); both
//! render the same.

use std::io::Write;

use eve_runtime::engine::events as ev;
use eve_runtime::store::StoredEvent;
use serde_json::Value;

use crate::render::{paint, stderr_color};

/// One line of JSON, cut to 120 characters.
pub fn compact(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Asks a yes/no question on stderr and reads the answer from stdin (`y`/`yes` is yes).
pub fn ask(question: &str) -> anyhow::Result<bool> {
    let mut err = std::io::stderr();
    write!(err, "{question}")?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(is_yes(&line))
}

/// Whether an answer means yes.
pub fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// Renders events: text to stdout, the rest to stderr (or JSON lines with `json`).
pub struct Printer {
    json: bool,
    color: bool,
    mid_line: bool,
    reasoning: bool,
}

impl Printer {
    /// A printer for this terminal; `json` prints every event as a JSON line instead.
    pub fn new(json: bool) -> Self {
        Self {
            json,
            color: stderr_color(),
            mid_line: false,
            reasoning: false,
        }
    }

    /// Ends a line of streamed text or reasoning, if one is open.
    pub fn finish_line(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
        if self.reasoning {
            eprintln!();
            self.reasoning = false;
        }
    }

    /// A stored event.
    pub fn event(&mut self, event: &StoredEvent) {
        if self.json {
            println!("{}", event.to_wire());
            let _ = std::io::stdout().flush();
            return;
        }
        self.show(&event.kind, &event.data);
    }

    /// An event as it comes off the wire: `{"type", "data", "meta"}`.
    pub fn wire(&mut self, envelope: &Value) {
        if self.json {
            println!("{envelope}");
            let _ = std::io::stdout().flush();
            return;
        }
        let kind = envelope["type"].as_str().unwrap_or_default();
        self.show(kind, &envelope["data"]);
    }

    fn show(&mut self, kind: &str, data: &Value) {
        match kind {
            ev::MESSAGE_APPENDED => {
                if self.reasoning {
                    eprintln!();
                    self.reasoning = false;
                }
                let delta = data["messageDelta"].as_str().unwrap_or_default();
                print!("{delta}");
                let _ = std::io::stdout().flush();
                self.mid_line = !delta.ends_with('\n');
            }
            ev::REASONING_APPENDED => {
                let delta = data["reasoningDelta"].as_str().unwrap_or_default();
                eprint!("{}", paint(self.color, "2", delta));
                self.reasoning = true;
            }
            ev::MESSAGE_COMPLETED => self.finish_line(),
            ev::ACTIONS_REQUESTED => {
                self.finish_line();
                for action in data["actions"].as_array().into_iter().flatten() {
                    let line = if action["kind"] == "load-skill" {
                        format!(
                            "→ load skill {}",
                            action["name"].as_str().unwrap_or_default()
                        )
                    } else {
                        format!(
                            "→ {} {}",
                            action["toolName"].as_str().unwrap_or_default(),
                            compact(&action["input"])
                        )
                    };
                    eprintln!("{}", paint(self.color, "36", &line));
                }
            }
            ev::ACTION_RESULT => {
                let result = &data["result"];
                let name = result["toolName"]
                    .as_str()
                    .or_else(|| result["name"].as_str())
                    .unwrap_or_default();
                let status = data["status"].as_str().unwrap_or_default();
                if status == "completed" {
                    eprintln!("{}", paint(self.color, "32", &format!("← {name}: ok")));
                } else {
                    let output = match &result["output"] {
                        Value::String(s) => s.lines().next().unwrap_or_default().to_owned(),
                        other => compact(other),
                    };
                    eprintln!(
                        "{}",
                        paint(self.color, "31", &format!("← {name}: {status}: {output}"))
                    );
                }
            }
            ev::COMPACTION_COMPLETED => {
                eprintln!("{}", paint(self.color, "2", "(context compacted)"));
            }
            ev::TURN_FAILED | ev::TURN_CANCELLED => self.finish_line(),
            _ => {}
        }
    }
}
