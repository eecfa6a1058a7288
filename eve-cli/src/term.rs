//! Rendering a session's events in the terminal, shared by `eve run` and `eve chat`.
//!
//! The reply streams to stdout as it arrives; tool calls (one line each), results, reasoning
//! (dimmed) and notices go to stderr, so stdout holds only what the agent said. Events come either
//! from the store ([`StoredEvent`]) or off the wire (eve's `{type, data, meta}` envelope); both
//! render the same. Every text an event carries came from a model, a tool or a server: it is
//! shown through [`Untrusted`] before eve's colours are added (see `crate::sanitize`).

use eve_runtime::engine::events as ev;
use eve_runtime::engine::selfchange;
use eve_runtime::store::StoredEvent;
use serde_json::Value;

use crate::render::{paint, stderr_color};
use crate::sanitize::{Untrusted, erase_err_line, err, errln, json_line, neutralise, out, outln};

/// One line of JSON, cut to 120 characters, with what the terminal must not see escaped.
pub fn compact(value: &Value) -> String {
    let text = json_line(value);
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Asks a yes/no question on stderr and reads the answer from stdin (`y`/`yes` is yes).
pub fn ask(question: &str) -> anyhow::Result<bool> {
    err!("{question}");
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
    /// `eve chat`: the label printed before each reply, and whether to colour the reply.
    label: Option<(String, bool)>,
    /// Whether the current step's reply has started (its label is printed).
    replying: bool,
    /// Whether a step of the current turn reported estimated usage.
    estimated: bool,
    /// Whether the usage line is printed after each turn (on a terminal, or asked for).
    usage: bool,
}

impl Printer {
    /// A printer for this terminal; `json` prints every event as a JSON line instead.
    pub fn new(json: bool) -> Self {
        Self {
            json,
            color: stderr_color(),
            mid_line: false,
            reasoning: false,
            label: None,
            replying: false,
            estimated: false,
            usage: crate::render::stderr_is_terminal(),
        }
    }

    /// Prints the usage line after each turn even when stderr is not a terminal (`--usage`).
    pub fn always_usage(&mut self) {
        self.usage = true;
    }

    /// Prints `label` (already painted) before each reply, and the reply in colour when
    /// `color` (stdout is a terminal).
    pub fn label_replies(&mut self, label: &str, color: bool) {
        self.label = Some((label.to_owned(), color));
    }

    /// Whether the cursor is at the start of a line (nothing streamed is left open), so a
    /// status line may be drawn and erased there.
    pub fn at_line_start(&self) -> bool {
        !self.mid_line && !self.reasoning
    }

    /// Ends a line of streamed text or reasoning, if one is open.
    pub fn finish_line(&mut self) {
        if self.mid_line {
            outln!();
            self.mid_line = false;
        }
        if self.reasoning {
            errln!();
            self.reasoning = false;
        }
    }

    /// A stored event.
    pub fn event(&mut self, event: &StoredEvent) {
        if self.json {
            outln!("{}", json_line(&event.to_wire()));
            return;
        }
        self.show(&event.kind, &event.data);
    }

    /// An event as it comes off the wire: `{"type", "data", "meta"}`.
    pub fn wire(&mut self, envelope: &Value) {
        if self.json {
            outln!("{}", json_line(envelope));
            return;
        }
        let kind = envelope["type"].as_str().unwrap_or_default();
        self.show(kind, &envelope["data"]);
    }

    fn show(&mut self, kind: &str, data: &Value) {
        match kind {
            ev::MESSAGE_APPENDED => {
                if self.reasoning {
                    errln!();
                    self.reasoning = false;
                }
                let raw = data["messageDelta"].as_str().unwrap_or_default();
                let delta = &*neutralise(raw);
                match &self.label {
                    Some((label, color)) => {
                        if !self.replying {
                            out!("{label} ");
                            self.replying = true;
                        }
                        out!("{}", paint(*color, "32", delta));
                    }
                    None => out!("{delta}"),
                }
                self.mid_line = !delta.ends_with('\n');
            }
            ev::REASONING_APPENDED => {
                let delta = data["reasoningDelta"].as_str().unwrap_or_default();
                err!("{}", paint(self.color, "2", &neutralise(delta)));
                self.reasoning = true;
            }
            ev::MESSAGE_COMPLETED => {
                self.finish_line();
                self.replying = false;
            }
            ev::ACTIONS_REQUESTED => {
                self.finish_line();
                for action in data["actions"].as_array().into_iter().flatten() {
                    let line = if action["kind"] == "load-skill" {
                        format!(
                            "→ load skill {}",
                            Untrusted(action["name"].as_str().unwrap_or_default())
                        )
                    } else {
                        format!(
                            "→ {} {}",
                            Untrusted(action["toolName"].as_str().unwrap_or_default()),
                            compact(&action["input"])
                        )
                    };
                    errln!("{}", paint(self.color, "36", &line));
                }
            }
            ev::ACTION_RESULT => {
                let result = &data["result"];
                let name = Untrusted(
                    result["toolName"]
                        .as_str()
                        .or_else(|| result["name"].as_str())
                        .unwrap_or_default(),
                );
                let status = data["status"].as_str().unwrap_or_default();
                if status == "completed" {
                    errln!("{}", paint(self.color, "32", &format!("← {name}: ok")));
                } else {
                    let output = match &result["output"] {
                        Value::String(s) => {
                            neutralise(s.lines().next().unwrap_or_default()).into_owned()
                        }
                        other => compact(other),
                    };
                    errln!(
                        "{}",
                        paint(
                            self.color,
                            "31",
                            &format!("← {name}: {}: {output}", Untrusted(status))
                        )
                    );
                }
            }
            ev::INPUT_REQUESTED => {
                // A self-change proposal is shown whole before it is asked about.
                for r in data["requests"].as_array().into_iter().flatten() {
                    if r["kind"] == selfchange::REQUEST_KIND {
                        self.finish_line();
                        err!("{}", proposal_card(&r["action"]["proposal"], self.color));
                    }
                }
            }
            ev::COMPACTION_COMPLETED => {
                errln!("{}", paint(self.color, "2", "(context compacted)"));
            }
            ev::STEP_COMPLETED => {
                self.estimated |= data["usage"]["estimated"] == true;
            }
            ev::TURN_COMPLETED => {
                self.finish_line();
                if let Some(line) = usage_line(&data["usage"], Some(self.estimated))
                    && self.usage
                {
                    errln!("{}", paint(self.color, "2", &line));
                }
                self.estimated = false;
            }
            ev::TURN_FAILED | ev::TURN_CANCELLED => {
                self.finish_line();
                self.estimated = false;
            }
            _ => {}
        }
    }
}

/// The usage line printed after a turn: tokens in (cached among them) and out, whether the
/// provider reported them or eve estimated them, and the cost when the model's price is known
/// (`usage` is `turn.completed`'s; `estimated` is `None` when nobody knows). `None` when the
/// turn called no model.
pub fn usage_line(usage: &Value, estimated: Option<bool>) -> Option<String> {
    let n = |field: &str| usage[field].as_u64().unwrap_or(0);
    let (input, output, cached) = (n("inputTokens"), n("outputTokens"), n("cacheReadTokens"));
    if input == 0 && output == 0 {
        return None;
    }
    let mut line = format!("usage: {} in", thousands(input));
    if cached > 0 {
        line.push_str(&format!(" ({} cached)", thousands(cached)));
    }
    line.push_str(&format!(" · {} out", thousands(output)));
    match estimated {
        Some(true) => line.push_str(" · estimated"),
        Some(false) => line.push_str(" · reported"),
        None => {}
    }
    if let Some(cost) = usage["costUsd"].as_f64() {
        line.push_str(&format!(" · {}", dollars(cost)));
    }
    Some(line)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A cost in US dollars: four decimals under a dollar, two above.
pub fn dollars(cost: f64) -> String {
    if cost < 1.0 {
        format!("${cost:.4}")
    } else {
        format!("${cost:.2}")
    }
}

/// The card of a self-change proposal (`action.proposal` of a `change-approval` request) for
/// stderr: summary, rationale, files, checks, the capability delta (widening lines in red) and
/// the diff (added lines green, removed red).
pub fn proposal_card(proposal: &Value, color: bool) -> String {
    let text = match proposal["text"].as_str() {
        Some(t) => t.to_owned(),
        None => selfchange::render_text(proposal),
    };
    let mut out = String::new();
    let mut in_diff = false;
    for line in text.lines() {
        // The proposal is the agent's own text: shown neutralised, then painted.
        let line = &*neutralise(line);
        let painted = if line.starts_with("Proposed change") {
            paint(color, "1;33", line)
        } else if line.starts_with("Capability delta (WIDENS") {
            paint(color, "1;31", line)
        } else if line == "Diff:" {
            in_diff = true;
            paint(color, "1", line)
        } else if !in_diff && line.trim_start().starts_with("! ") {
            paint(color, "31", line)
        } else if in_diff && (line.starts_with("+++") || line.starts_with("---")) {
            paint(color, "1", line)
        } else if in_diff && line.starts_with('+') {
            paint(color, "32", line)
        } else if in_diff && line.starts_with('-') {
            paint(color, "31", line)
        } else if in_diff && line.starts_with("@@") {
            paint(color, "36", line)
        } else {
            line.to_owned()
        };
        out.push_str(&painted);
        out.push('\n');
    }
    out
}

/// How long nothing prints before the spinner shows.
const SPIN_AFTER: std::time::Duration = std::time::Duration::from_millis(300);
const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// A one-line status on stderr while a turn prints nothing: `⠹ thinking… 2.1 s` while the model
/// is silent, `⠹ running fetch… 12.0 s` while tools run. It is drawn only on a terminal and
/// only at the start of a line (never over streamed text), and erased before anything else
/// prints.
pub struct Spinner {
    enabled: bool,
    color: bool,
    shown: bool,
    frame: usize,
    quiet_since: std::time::Instant,
    turn_since: std::time::Instant,
    /// Tools running now, by call id, with their name and start.
    running: Vec<(String, String, std::time::Instant)>,
}

impl Spinner {
    /// A spinner that draws only when `enabled` (stderr is a terminal).
    pub fn new(enabled: bool, color: bool) -> Self {
        let now = std::time::Instant::now();
        Self {
            enabled,
            color,
            shown: false,
            frame: 0,
            quiet_since: now,
            turn_since: now,
            running: Vec::new(),
        }
    }

    /// Whether it ever draws.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Erases the status line, if drawn.
    pub fn clear(&mut self) {
        if self.shown {
            erase_err_line();
            self.shown = false;
        }
    }

    /// An event arrived (as wire JSON): erase the line and note the tools it starts or ends.
    pub fn event(&mut self, event: &Value) {
        self.clear();
        self.quiet_since = std::time::Instant::now();
        match event["type"].as_str().unwrap_or_default() {
            ev::TURN_STARTED | ev::STEP_STARTED => self.turn_since = self.quiet_since,
            ev::ACTIONS_REQUESTED => {
                for a in event["data"]["actions"].as_array().into_iter().flatten() {
                    // The model picks the name: shown neutralised on the status line.
                    let name = a["toolName"]
                        .as_str()
                        .or_else(|| a["name"].as_str())
                        .unwrap_or("tool");
                    let id = a["callId"].as_str().unwrap_or_default();
                    self.running.push((
                        id.to_owned(),
                        neutralise(name).into_owned(),
                        self.quiet_since,
                    ));
                }
            }
            ev::INPUT_REQUESTED | ev::TURN_WAITING => {}
            ev::INPUT_RESOLVED => {
                for (_, _, since) in &mut self.running {
                    *since = self.quiet_since;
                }
            }
            ev::ACTION_RESULT => {
                let id = event["data"]["result"]["callId"]
                    .as_str()
                    .unwrap_or_default();
                self.running.retain(|(call, _, _)| call != id);
            }
            ev::TURN_COMPLETED | ev::TURN_FAILED | ev::TURN_CANCELLED => self.running.clear(),
            _ => {}
        }
    }

    /// The text the status line shows now.
    pub fn status(&self) -> String {
        let now = std::time::Instant::now();
        match self.running.first() {
            Some((_, name, since)) => {
                let more = if self.running.len() > 1 {
                    format!(" (+{} more)", self.running.len() - 1)
                } else {
                    String::new()
                };
                format!(
                    "running {name}{more}… {:.1} s",
                    now.duration_since(*since).as_secs_f64()
                )
            }
            None => format!(
                "thinking… {:.1} s",
                now.duration_since(self.turn_since).as_secs_f64()
            ),
        }
    }

    /// Draws the next frame if nothing printed for a while and the cursor is at a line start.
    pub fn tick(&mut self, at_line_start: bool) {
        if !self.enabled || !at_line_start || self.quiet_since.elapsed() < SPIN_AFTER {
            return;
        }
        self.frame = (self.frame + 1) % FRAMES.len();
        let line = format!("{} {}", FRAMES[self.frame], self.status());
        erase_err_line();
        err!("{}", paint(self.color, "2", &line));
        self.shown = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ATTACK: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2K\rApproved\u{202e}";

    #[test]
    fn the_usage_line_says_tokens_source_and_cost() {
        let usage = json!({"inputTokens": 12345, "outputTokens": 67, "cacheReadTokens": 2000,
                           "costUsd": 0.0123456});
        assert_eq!(
            usage_line(&usage, Some(false)).unwrap(),
            "usage: 12,345 in (2,000 cached) · 67 out · reported · $0.0123"
        );
        let usage = json!({"inputTokens": 10, "outputTokens": 2, "cacheReadTokens": 0});
        assert_eq!(
            usage_line(&usage, Some(true)).unwrap(),
            "usage: 10 in · 2 out · estimated"
        );
        assert_eq!(usage_line(&json!({}), None), None);
    }

    #[test]
    fn the_spinner_and_a_proposal_show_foreign_text_neutralised() {
        // The model names the tool the spinner says is running.
        let mut spinner = Spinner::new(false, false);
        spinner.event(&json!({"type": ev::ACTIONS_REQUESTED,
            "data": {"actions": [{"callId": "c1", "toolName": ATTACK}]}}));
        let status = spinner.status();
        assert!(
            status.starts_with("running ␛]0;pwned␇␛[2K␍Approved\\u{202e}…"),
            "{status}"
        );
        // A self-change proposal is the agent's own text.
        let card = proposal_card(
            &json!({"text": format!("Proposed change\n{ATTACK}\n")}),
            true,
        );
        assert!(!card.contains("\u{1b}]"), "{card:?}");
        assert!(
            !card.contains('\r') && !card.contains('\u{202e}'),
            "{card:?}"
        );
        assert!(card.contains("␛]0;pwned␇"), "{card:?}");
        // `compact` JSON of a tool input escapes the bidi override.
        assert_eq!(
            compact(&json!({"to": "\u{202e}x"})),
            "{\"to\":\"\\u202ex\"}"
        );
    }
}
