//! The MCP server of the channel: `initialize` with instructions, `tools/list` with eve's four
//! invocation tools (`agent_start`, `agent_get`, `agent_update`, `agent_cancel`) and `tools/call`,
//! each result as structured content and the same JSON as text. A call the channel rejects is a
//! tool result with `isError: true` and `structuredContent.error` (`code`, `message`,
//! `retryable`), as in eve; an unknown tool is a JSON-RPC `-32602`.
//!
//! The caller is the one the HTTP layer authenticated ([`super::handle`]), read from the request
//! parts rmcp hands every call.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::invocation::{Invocations, Response};
use super::{McpCaller, ToolError};
use crate::engine::Runtime;

/// Largest `message` (UTF-8 bytes).
const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Largest input-response `text` (UTF-8 bytes).
const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Longest invocation, request and option id (characters).
const MAX_ID_CHARS: usize = 256;
/// Most responses in one `agent_update`.
const MAX_RESPONSES: usize = 64;

/// What the server tells the connecting model about the protocol (eve's instructions).
const INSTRUCTIONS: &str = "Each invocation is one durable agent task. Call agent_start once per \
task and keep the returned invocationId. Poll agent_get, waiting at least pollAfterMs between \
calls, until status is completed, failed, or cancelled. If status is input_required, answer every \
entry in inputRequests in one agent_update call; repeating accepted answers is safe. To continue a \
completed task, send agent_update with a message. isError on a tool result means your call was \
rejected; a failed status means the task failed. agent_start is not idempotent and a lost \
response leaves no invocationId, so ask the user before starting again. Work continues after \
your connection drops; agent_cancel stops it, then poll until any terminal status.";

/// The MCP server of one request.
#[derive(Clone)]
pub(super) struct AgentServer {
    pub(super) runtime: Runtime,
    /// The agent's name and description.
    pub(super) name: String,
    pub(super) description: Option<String>,
    /// Tests only: every caller reaches every invocation.
    pub(super) ownership_unchecked: bool,
    /// Per-principal admissions and their bounds (`None`: unbounded, tests only).
    pub(super) quota: Option<(crate::server::quota::Quota, crate::server::quota::Bounds)>,
}

impl ServerHandler for AgentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                self.name.clone(),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools(
            self.description.as_deref(),
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<McpCaller>())
            .cloned()
            .ok_or_else(|| {
                ErrorData::internal_error("the call has no authenticated caller", None)
            })?;
        let reach = if self.ownership_unchecked {
            crate::engine::Caller::operator(caller.caller.id())
        } else {
            caller.caller.clone()
        };
        let invocations = Invocations {
            runtime: &self.runtime,
            reach,
            sender: caller.sender.clone(),
            owner: caller.caller.id().to_owned(),
            quota: self.quota.clone(),
            owner_attributes: caller.caller.attributes().clone(),
        };
        let args = request.arguments.unwrap_or_default();
        let outcome = match request.name.as_ref() {
            "agent_start" => match start_args(&args) {
                Ok(message) => invocations.start(message).await,
                Err(e) => Err(e),
            },
            "agent_get" => match id_arg(&args, &["invocationId"]) {
                Ok(id) => invocations.get(&id).await,
                Err(e) => Err(e),
            },
            "agent_cancel" => match id_arg(&args, &["invocationId"]) {
                Ok(id) => invocations.cancel(&id).await,
                Err(e) => Err(e),
            },
            "agent_update" => match update_args(&args) {
                Ok((id, Update::Responses(responses))) => invocations.answer(&id, &responses).await,
                Ok((id, Update::Message(message))) => invocations.follow_up(&id, message).await,
                Err(e) => Err(e),
            },
            other => {
                return Err(ErrorData::invalid_params(
                    format!("Unknown tool: {other}"),
                    None,
                ));
            }
        };
        Ok(match outcome {
            Ok(state) => result(state, false),
            Err(e) => result(json!({"error": e.body()}), true),
        }
        .into())
    }
}

/// A tool result carrying `value` as structured content and as JSON text.
fn result(value: Value, is_error: bool) -> CallToolResult {
    let text = ContentBlock::text(value.to_string());
    let mut r = if is_error {
        CallToolResult::error(vec![text])
    } else {
        CallToolResult::success(vec![text])
    };
    r.structured_content = Some(value);
    r
}

/// What an `agent_update` carries.
enum Update {
    Responses(Vec<Response>),
    Message(String),
}

/// Refuses keys outside `allowed` (the input schemas are strict, as eve's).
fn only(args: &Map<String, Value>, allowed: &[&str]) -> Result<(), ToolError> {
    match args.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ToolError::invalid(format!("Unknown argument `{k}`."))),
        None => Ok(()),
    }
}

fn bounded_text(
    args: &Map<String, Value>,
    key: &str,
    max_bytes: usize,
) -> Result<Option<String>, ToolError> {
    match args.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if s.len() > max_bytes => Err(ToolError::invalid(format!(
            "`{key}` must be at most {max_bytes} bytes when UTF-8 encoded."
        ))),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ToolError::invalid(format!("`{key}` must be a string."))),
    }
}

fn id(args: &Map<String, Value>, key: &str) -> Result<String, ToolError> {
    match args.get(key) {
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_ID_CHARS => {
            Ok(s.clone())
        }
        Some(Value::String(_)) => Err(ToolError::invalid(format!(
            "`{key}` must be 1 to {MAX_ID_CHARS} characters."
        ))),
        Some(_) => Err(ToolError::invalid(format!("`{key}` must be a string."))),
        None => Err(ToolError::invalid(format!("`{key}` is required."))),
    }
}

fn start_args(args: &Map<String, Value>) -> Result<String, ToolError> {
    only(args, &["message"])?;
    match bounded_text(args, "message", MAX_MESSAGE_BYTES)? {
        Some(m) if !m.trim().is_empty() => Ok(m),
        Some(_) => Err(ToolError::invalid("`message` is empty.")),
        None => Err(ToolError::invalid("`message` is required.")),
    }
}

fn id_arg(args: &Map<String, Value>, allowed: &[&str]) -> Result<String, ToolError> {
    only(args, allowed)?;
    id(args, "invocationId")
}

fn update_args(args: &Map<String, Value>) -> Result<(String, Update), ToolError> {
    only(args, &["invocationId", "responses", "message"])?;
    let invocation = id(args, "invocationId")?;
    let message = bounded_text(args, "message", MAX_MESSAGE_BYTES)?;
    match (args.get("responses"), message) {
        (Some(_), Some(_)) | (None, None) => Err(ToolError::invalid(
            "Send exactly one of `responses` (answers to inputRequests) or `message` (a \
             follow-up).",
        )),
        (None, Some(m)) if m.trim().is_empty() => Err(ToolError::invalid("`message` is empty.")),
        (None, Some(m)) => Ok((invocation, Update::Message(m))),
        (Some(Value::Array(items)), None) => {
            if items.is_empty() || items.len() > MAX_RESPONSES {
                return Err(ToolError::invalid(format!(
                    "`responses` must hold 1 to {MAX_RESPONSES} answers."
                )));
            }
            let mut responses = Vec::with_capacity(items.len());
            for item in items {
                let Value::Object(r) = item else {
                    return Err(ToolError::invalid("Each response must be an object."));
                };
                only(r, &["requestId", "optionId", "text"])?;
                let option_id = bounded_text(r, "optionId", MAX_ID_CHARS)?;
                responses.push(Response {
                    request_id: id(r, "requestId")?,
                    option_id,
                    text: bounded_text(r, "text", MAX_TEXT_BYTES)?,
                });
            }
            Ok((invocation, Update::Responses(responses)))
        }
        (Some(_), None) => Err(ToolError::invalid("`responses` must be an array.")),
    }
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(Map::new()),
    }
}

/// The state every tool returns (eve's invocation output, discriminated by `status`).
fn output_schema() -> Arc<Map<String, Value>> {
    schema(json!({
        "type": "object",
        "properties": {
            "invocationId": {"type": "string"},
            "createdAt": {"type": "string", "format": "date-time"},
            "status": {
                "type": "string",
                "enum": ["working", "input_required", "authorization_required", "completed", "failed", "cancelled"]
            },
            "pollAfterMs": {"type": "integer", "minimum": 0},
            "inputRequests": {"type": "object", "additionalProperties": {"type": "object"}},
            "result": {},
            "error": {
                "type": "object",
                "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
                "required": ["code", "message"]
            }
        },
        "required": ["invocationId", "createdAt", "status"]
    }))
}

fn invocation_id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS})
}

fn annotations(
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open: bool,
) -> ToolAnnotations {
    let mut a = ToolAnnotations::new();
    a.read_only_hint = Some(read_only);
    a.destructive_hint = Some(destructive);
    a.idempotent_hint = Some(idempotent);
    a.open_world_hint = Some(open);
    a
}

/// The four invocation tools; `description` (the agent's) leads `agent_start`'s.
fn tools(description: Option<&str>) -> Vec<Tool> {
    let start = "Starts durable work and returns an invocation handle immediately. Call once per \
                 task; keep invocationId and poll agent_get. Not idempotent: if the response is \
                 lost, ask the user before starting again rather than retrying.";
    let start = match description {
        Some(d) if !d.trim().is_empty() => format!("{} {start}", d.trim()),
        _ => start.to_owned(),
    };
    vec![
        Tool::new(
            "agent_start",
            start,
            schema(json!({
                "type": "object",
                "properties": {"message": {"type": "string", "minLength": 1, "description": "The task, at most 64 KiB."}},
                "required": ["message"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations(false, true, false, true)),
        Tool::new(
            "agent_get",
            "Reads complete durable invocation state. Wait at least pollAfterMs between calls. \
             Terminal statuses are completed, failed, and cancelled. input_required needs \
             agent_update.",
            schema(json!({
                "type": "object",
                "properties": {"invocationId": invocation_id_schema()},
                "required": ["invocationId"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations(true, false, true, false)),
        Tool::new(
            "agent_update",
            "Answers the pending input batch on an input_required invocation: include one \
             response per entry in inputRequests, each keyed by its requestId, in a single call; \
             partial batches are rejected, repeating the same accepted answers is safe. Or, with \
             `message` instead of `responses`, sends a follow-up message that the agent takes in \
             its next turn. Returns the current invocation state.",
            schema(json!({
                "type": "object",
                "properties": {
                    "invocationId": invocation_id_schema(),
                    "responses": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_RESPONSES,
                        "items": {
                            "type": "object",
                            "properties": {
                                "requestId": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS},
                                "optionId": {"type": "string", "maxLength": MAX_ID_CHARS},
                                "text": {"type": "string"}
                            },
                            "required": ["requestId"],
                            "additionalProperties": false
                        }
                    },
                    "message": {"type": "string", "minLength": 1}
                },
                "required": ["invocationId"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations(false, true, false, true)),
        Tool::new(
            "agent_cancel",
            "Requests cooperative cancellation of a non-terminal invocation. Cancellation is \
             asynchronous and can race with completion: poll agent_get until status is terminal \
             (cancelled, completed, or failed). Safe to call repeatedly.",
            schema(json!({
                "type": "object",
                "properties": {"invocationId": invocation_id_schema()},
                "required": ["invocationId"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations(false, true, true, false)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn arguments_are_checked_before_any_work() {
        assert!(start_args(&args(json!({"message": "hi"}))).is_ok());
        for bad in [
            json!({}),
            json!({"message": ""}),
            json!({"message": 3}),
            json!({"message": "x", "extra": 1}),
            json!({"message": "é".repeat(MAX_MESSAGE_BYTES / 2 + 1)}),
        ] {
            let e = start_args(&args(bad.clone())).err();
            assert_eq!(e.map(|e| e.code), Some("invalid_input"), "{bad}");
        }
        assert!(update_args(&args(json!({"invocationId": "a", "message": "more"}))).is_ok());
        for bad in [
            json!({"invocationId": "a"}),
            json!({"invocationId": "a", "message": "m", "responses": [{"requestId": "r"}]}),
            json!({"invocationId": "a", "responses": []}),
            json!({"invocationId": "a", "responses": [{"requestId": "r", "bad": 1}]}),
            json!({"invocationId": "a", "responses": [{"requestId": "r", "text": "x".repeat(MAX_TEXT_BYTES + 1)}]}),
            json!({"invocationId": "x".repeat(MAX_ID_CHARS + 1), "message": "m"}),
        ] {
            assert!(update_args(&args(bad.clone())).is_err(), "{bad}");
        }
        let many: Vec<Value> = (0..=MAX_RESPONSES)
            .map(|i| json!({"requestId": format!("r{i}")}))
            .collect();
        assert!(update_args(&args(json!({"invocationId": "a", "responses": many}))).is_err());
    }
}
