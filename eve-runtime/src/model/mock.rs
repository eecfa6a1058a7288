//! The deterministic `mock` provider: every demo and test runs offline.
//!
//! The mock is a pure function of the request history, so a session resumed after a crash gets
//! the same answer it would have got the first time.
//!
//! **`mock/echo`** (the default model when nothing is configured):
//! - replies `You said: <last user message>`, streamed word by word as text deltas;
//! - if the last user message is `/tool NAME {json}` (the JSON is optional, default `{}`), it calls
//!   tool `NAME` with that input (input that is not valid JSON is passed on as a JSON string, like a
//!   real model's broken arguments). The call id is `mock_call_<k>_0`, `k` being the number of
//!   assistant messages before it;
//! - when the history ends with tool results, it replies `NAME returned: <result content>`, one line
//!   per result (a `[Tasks]` note the runtime adds last is passed over).
//!
//! **Scripts**: `mock/script:<path>`, or any mock model while `EVE_MOCK_SCRIPT` is set (a path, or
//! inline JSON when it starts with `[`). A script is a JSON array of steps:
//! ```json
//! [{"reasoning": "…", "text": "…", "tool_calls": [{"name": "…", "input": {}, "id": "…"}],
//!   "delay_ms": 50, "usage": {"input_tokens": 10, "output_tokens": 5},
//!   "finish": "length", "error": "…"}]
//! ```
//! Every field is optional. Step `k` answers the request whose history holds `k` assistant
//! messages. Reasoning, then text, are streamed word by word, then each tool call as a start and
//! one argument delta; `delay_ms` sleeps before each of those events (so a crash test can kill the
//! process mid-stream). `finish` overrides the finish reason (`stop`, `tool_calls`, `length`,
//! `content_filter`, `other`; default `tool_calls` when the step calls tools, else `stop`); `error`
//! makes the call fail with an HTTP 500 error carrying that message, before any event. Past the
//! end of the script the mock replies with empty text and finishes with `stop`.
//!
//! **Per-agent scripts**: a script may also be a JSON object mapping agents to step arrays,
//! `{"<agent path or name>": [steps], "*": [steps]}`, so a parent and its subagents each play their
//! own steps. An agent plays the array under its manifest path (`subagents/researcher`), else under
//! its name (`researcher`; the root agent's path is `""`), else under `*`, else nothing (empty
//! text). The engine resolves a mock per agent ([`MockClient::for_agent`]).
//!
//! **Usage** is deterministic: input tokens = characters of the request (system prompt, messages,
//! tool calls and specs) / 4, output tokens = characters produced / 4, both rounded up, unless the
//! step gives `usage`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse,
    Reasoning, ToolCall, Usage,
};

/// One scripted model response.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Visible text.
    #[serde(default)]
    pub(crate) text: Option<String>,
    /// Reasoning text.
    #[serde(default)]
    pub(crate) reasoning: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub(crate) tool_calls: Vec<StepCall>,
    /// Delay before each streamed event, in milliseconds.
    #[serde(default)]
    pub(crate) delay_ms: Option<u64>,
    /// Reported usage (fields left out are estimated).
    #[serde(default)]
    pub(crate) usage: Option<StepUsage>,
    /// Finish reason override (`stop`, `tool_calls`, `length`, `content_filter`, `other`).
    #[serde(default)]
    pub(crate) finish: Option<String>,
    /// Fail the call with this message instead of answering.
    #[serde(default)]
    pub(crate) error: Option<String>,
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepCall {
    /// Tool name.
    pub(crate) name: String,
    /// Input (default `{}`); a string stands for raw, possibly invalid, argument text.
    #[serde(default = "empty_object")]
    pub(crate) input: Value,
    /// Call id (default `mock_call_<step>_<position>`).
    #[serde(default)]
    pub(crate) id: Option<String>,
}

/// Scripted usage; missing fields are estimated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepUsage {
    /// Prompt tokens.
    #[serde(default, alias = "inputTokens")]
    pub(crate) input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, alias = "outputTokens")]
    pub(crate) output_tokens: Option<u64>,
    /// Cached prompt tokens.
    #[serde(default, alias = "cacheReadTokens")]
    pub(crate) cache_read_tokens: Option<u64>,
}

fn empty_object() -> Value {
    json!({})
}

/// What the mock does.
#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Echo,
    Script(Arc<Vec<Step>>),
    /// Steps per agent; the agent's path and name once known.
    PerAgent(Arc<BTreeMap<String, Vec<Step>>>, Option<(String, String)>),
}

/// A parsed mock script: one array of steps, or arrays per agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Script {
    /// The same steps for every agent.
    Steps(Vec<Step>),
    /// Steps by agent path or name (`*`: any other agent).
    PerAgent(BTreeMap<String, Vec<Step>>),
}

impl Script {
    fn into_mode(self) -> Mode {
        match self {
            Self::Steps(steps) => Mode::Script(Arc::new(steps)),
            Self::PerAgent(map) => Mode::PerAgent(Arc::new(map), None),
        }
    }
}

/// Parses a script that may be per agent: inline JSON when it starts with `[` or `{`, else the
/// path of a JSON file holding either form.
pub fn load_any_script(source: &str) -> Result<Script, ModelError> {
    let trimmed = source.trim();
    let (text, origin) = if trimmed.starts_with('[') || trimmed.starts_with('{') {
        (trimmed.to_owned(), "inline mock script".to_owned())
    } else {
        let text = std::fs::read_to_string(trimmed).map_err(|e| {
            ModelError::Config(format!("cannot read the mock script `{trimmed}`: {e}"))
        })?;
        (text, format!("mock script `{trimmed}`"))
    };
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(&text)
            .map(Script::PerAgent)
            .map_err(|e| {
                ModelError::Config(format!(
                    "{origin} is not a JSON object of step arrays by agent ({e}); write \
                 {{\"<agent path or name>\": [steps], \"*\": [steps]}}"
                ))
            });
    }
    if trimmed.starts_with('[') {
        return load_script(trimmed).map(Script::Steps);
    }
    serde_json::from_str(&text).map(Script::Steps).map_err(|e| {
        ModelError::Config(format!(
            "{origin} is not a JSON array of steps ({e}); a step is \
             {{\"text\"?, \"reasoning\"?, \"tool_calls\"?: [{{\"name\", \"input\"?, \"id\"?}}], \
             \"delay_ms\"?, \"usage\"?, \"finish\"?, \"error\"?}}"
        ))
    })
}

/// The mock provider.
#[derive(Debug, Clone)]
pub struct MockClient {
    mode: Mode,
    context_window: Option<u64>,
}

impl MockClient {
    /// The mock for model `model` (`echo` or `script:<path>`); `script` is `EVE_MOCK_SCRIPT`'s
    /// value, which turns `echo` into a scripted mock.
    pub fn new(model: &str, script: Option<&str>) -> Result<Self, ModelError> {
        let mode = if let Some(path) = model.strip_prefix("script:") {
            load_any_script(path)?.into_mode()
        } else if let Some(source) = script.filter(|s| !s.trim().is_empty()) {
            load_any_script(source)?.into_mode()
        } else if model.is_empty() || model == "echo" {
            Mode::Echo
        } else {
            return Err(ModelError::Config(format!(
                "unknown mock model `{model}`: use `mock/echo` or `mock/script:<path>` (or set {})",
                super::env::EVE_MOCK_SCRIPT
            )));
        };
        Ok(Self {
            mode,
            context_window: None,
        })
    }

    /// Reports `window` as the model's context window (the mock has none of its own).
    pub fn with_context_window(mut self, window: Option<u64>) -> Self {
        self.context_window = window;
        self
    }

    /// The mock as the agent at manifest `path` named `name` sees it: with a per-agent script,
    /// it plays that agent's steps. Other mocks are unchanged.
    pub fn for_agent(mut self, name: &str, path: &str) -> Self {
        if let Mode::PerAgent(map, _) = self.mode {
            self.mode = Mode::PerAgent(map, Some((path.to_owned(), name.to_owned())));
        }
        self
    }

    /// A mock playing per-agent steps (see [`MockClient::for_agent`]).
    pub fn from_script(script: Script) -> Self {
        Self {
            mode: script.into_mode(),
            context_window: None,
        }
    }

    /// A mock playing the given steps.
    pub fn from_steps(steps: Vec<Step>) -> Self {
        Self {
            mode: Mode::Script(Arc::new(steps)),
            context_window: None,
        }
    }

    /// The step the mock plays for `request`, as a pure function of its history.
    pub(crate) fn step_for(&self, request: &ModelRequest) -> Step {
        let mut step = self.pick_step(request);
        fill_task_ids(&mut step, &request.messages);
        step
    }

    fn pick_step(&self, request: &ModelRequest) -> Step {
        let k = assistant_count(&request.messages);
        match &self.mode {
            Mode::Echo => echo_step(&request.messages, k),
            Mode::Script(steps) => steps.get(k).cloned().unwrap_or_default(),
            Mode::PerAgent(map, agent) => {
                let steps = agent
                    .as_ref()
                    .and_then(|(path, name)| map.get(path).or_else(|| map.get(name)))
                    .or_else(|| map.get("*"));
                steps
                    .and_then(|steps| steps.get(k).cloned())
                    .unwrap_or_default()
            }
        }
    }
}

/// The placeholder a script writes where a subagent continuation token belongs:
/// `{{last_task_id}}` (the latest tool result carrying a `task_id`, or a task's receipt) or `{{task_id:NAME}}` (the
/// latest result of the tool `NAME` carrying one).
pub(crate) const LAST_TASK_ID: &str = "{{last_task_id}}";

/// Replaces task-id placeholders in the step's tool inputs with `task_id`s found in the history's
/// tool results, so a script can continue a subagent whose token it cannot know in advance.
fn fill_task_ids(step: &mut Step, messages: &[Message]) {
    let task_id_of = |wanted: Option<&str>| {
        messages.iter().rev().find_map(|m| match m {
            Message::Tool { name, content, .. } if wanted.is_none_or(|w| w == name) => {
                // A task's receipt names it: `Started task <id>. …`.
                if let Some(rest) = content.strip_prefix("Started task ") {
                    return rest.split_once(". ").map(|(id, _)| id.to_owned());
                }
                serde_json::from_str::<Value>(content)
                    .ok()?
                    .get("task_id")?
                    .as_str()
                    .map(str::to_owned)
            }
            _ => None,
        })
    };
    fn walk(v: &mut Value, lookup: &dyn Fn(Option<&str>) -> Option<String>) {
        match v {
            Value::String(s) => {
                let wanted = if s == LAST_TASK_ID {
                    Some(None)
                } else {
                    s.strip_prefix("{{task_id:")
                        .and_then(|r| r.strip_suffix("}}"))
                        .map(Some)
                };
                if let Some(found) = wanted.and_then(lookup) {
                    *s = found;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, lookup)),
            Value::Object(map) => map.values_mut().for_each(|i| walk(i, lookup)),
            _ => {}
        }
    }
    for call in &mut step.tool_calls {
        walk(&mut call.input, &task_id_of);
    }
}

/// Parses a script: inline JSON when it starts with `[`, else the path of a JSON file.
pub fn load_script(source: &str) -> Result<Vec<Step>, ModelError> {
    let trimmed = source.trim();
    let (text, origin) = if trimmed.starts_with('[') {
        (trimmed.to_owned(), "inline mock script".to_owned())
    } else {
        let text = std::fs::read_to_string(trimmed).map_err(|e| {
            ModelError::Config(format!("cannot read the mock script `{trimmed}`: {e}"))
        })?;
        (text, format!("mock script `{trimmed}`"))
    };
    serde_json::from_str(&text).map_err(|e| {
        ModelError::Config(format!(
            "{origin} is not a JSON array of steps ({e}); a step is \
             {{\"text\"?, \"reasoning\"?, \"tool_calls\"?: [{{\"name\", \"input\"?, \"id\"?}}], \
             \"delay_ms\"?, \"usage\"?, \"finish\"?, \"error\"?}}"
        ))
    })
}

fn assistant_count(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .count()
}

fn echo_step(messages: &[Message], k: usize) -> Step {
    // The `[Tasks]` note the runtime adds at the end of a request is not the user speaking.
    let messages = match messages.split_last() {
        Some((Message::User { content, .. }, rest)) if content.starts_with("[Tasks]\n") => rest,
        _ => messages,
    };
    let trailing_results: Vec<String> = messages
        .iter()
        .rev()
        .map_while(|m| match m {
            Message::Tool { name, content, .. } => Some(format!("{name} returned: {content}")),
            _ => None,
        })
        .collect();
    if !trailing_results.is_empty() {
        let lines: Vec<String> = trailing_results.into_iter().rev().collect();
        return Step {
            text: Some(lines.join("\n")),
            ..Step::default()
        };
    }
    let last_user = messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or("");
    if let Some(call) = parse_tool_command(last_user, k) {
        return Step {
            tool_calls: vec![call],
            ..Step::default()
        };
    }
    Step {
        text: Some(format!("You said: {last_user}")),
        ..Step::default()
    }
}

/// `/tool NAME {json}` → a call; anything else → `None`.
fn parse_tool_command(message: &str, k: usize) -> Option<StepCall> {
    let rest = message.trim().strip_prefix("/tool")?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim_start();
    let name_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (name, input) = rest.split_at(name_end);
    if name.is_empty() {
        return None;
    }
    let input = input.trim();
    let input = if input.is_empty() {
        json!({})
    } else {
        serde_json::from_str(input).unwrap_or_else(|_| Value::String(input.to_owned()))
    };
    Some(StepCall {
        name: name.to_owned(),
        input,
        id: Some(format!("mock_call_{k}_0")),
    })
}

/// Splits text into words that keep their trailing whitespace, so the pieces concatenate back.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            in_space = true;
        } else if in_space {
            out.push(std::mem::take(&mut current));
            in_space = false;
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Characters / 4, rounded up.
fn tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn request_chars(request: &ModelRequest) -> usize {
    let mut chars = request.system.chars().count();
    for message in &request.messages {
        chars += match message {
            Message::User { content, .. } => content.chars().count(),
            Message::Assistant {
                content,
                reasoning,
                tool_calls,
            } => {
                content.chars().count()
                    + reasoning.as_ref().map_or(0, |r| r.text.chars().count())
                    + tool_calls
                        .iter()
                        .map(|c| c.name.chars().count() + arguments_text(&c.input).chars().count())
                        .sum::<usize>()
            }
            Message::Tool { content, .. } => content.chars().count(),
        };
    }
    for tool in &request.tools {
        chars += tool.name.chars().count()
            + tool.description.chars().count()
            + tool.input_schema.to_string().chars().count();
    }
    chars
}

#[async_trait::async_trait]
impl ModelClient for MockClient {
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let k = assistant_count(&request.messages);
        let step = self.step_for(request);
        if let Some(message) = step.error {
            return Err(ModelError::Http {
                status: 500,
                message,
            });
        }
        let delay = step.delay_ms.map(Duration::from_millis);
        let mut emit = async |event: ModelEvent| {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            on_event(event);
        };

        let reasoning = step.reasoning.unwrap_or_default();
        for text in words(&reasoning) {
            emit(ModelEvent::ReasoningDelta { text }).await;
        }
        let content = step.text.unwrap_or_default();
        for text in words(&content) {
            emit(ModelEvent::TextDelta { text }).await;
        }
        let mut tool_calls = Vec::with_capacity(step.tool_calls.len());
        let mut output_chars = reasoning.chars().count() + content.chars().count();
        for (position, call) in step.tool_calls.into_iter().enumerate() {
            let id = call
                .id
                .unwrap_or_else(|| format!("mock_call_{k}_{position}"));
            let arguments = arguments_text(&call.input);
            output_chars += call.name.chars().count() + arguments.chars().count();
            emit(ModelEvent::ToolCallStart {
                id: id.clone(),
                name: call.name.clone(),
            })
            .await;
            emit(ModelEvent::ToolCallDelta {
                id: id.clone(),
                delta: arguments,
            })
            .await;
            tool_calls.push(ToolCall {
                id,
                name: call.name,
                input: call.input,
            });
        }

        let scripted = step.usage.unwrap_or_default();
        let usage = Usage {
            input_tokens: scripted
                .input_tokens
                .unwrap_or_else(|| tokens(request_chars(request))),
            output_tokens: scripted
                .output_tokens
                .unwrap_or_else(|| tokens(output_chars)),
            cache_read_tokens: scripted.cache_read_tokens.unwrap_or(0),
            estimated: false,
        };
        let finish_reason = match step.finish.as_deref() {
            Some(finish) => super::openai::map_finish_reason(&finish.replace('-', "_")),
            None if tool_calls.is_empty() => FinishReason::Stop,
            None => FinishReason::ToolCalls,
        };
        Ok(ModelResponse {
            content,
            reasoning: (!reasoning.is_empty()).then_some(Reasoning {
                text: reasoning,
                signature: None,
                blocks: Vec::new(),
            }),
            tool_calls,
            usage,
            finish_reason,
        })
    }

    async fn context_window(&self, _model: &str) -> Option<u64> {
        self.context_window
    }
}
