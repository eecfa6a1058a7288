//! The built-in web tools: `web_fetch` (on with `default_tools`) and `web_search` (on when
//! `web.search` names a provider).
//!
//! Both run on the runtime, not in a box, as targets beside `read_file`: a call goes through the
//! turn's gates, approvals, breakers and deadline like any tool's, runs in parallel with the
//! step's other calls, and its result is fitted to the model's window. `web_fetch` applies the
//! egress rules itself ([`rules`]), follows each redirect hop only once it is checked, streams the
//! body under a byte cap and a time limit ([`fetch`]) and turns HTML into Markdown ([`page`]).
//! `web_search` asks the configured provider's API, with its key from the environment, and
//! returns normalised results ([`search`]).

mod fetch;
pub(crate) mod page;
pub(crate) mod rules;
mod search;

use std::sync::Arc;

use eve_compile::{Approval, Effect, Runner, Tool, Web};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{BUILTIN_ARGV, ToolContext, ToolResult};

/// Name of the page fetching tool.
pub const WEB_FETCH: &str = "web_fetch";
/// Name of the web search tool.
pub const WEB_SEARCH: &str = eve_compile::WEB_SEARCH;

/// What the web tools of a call need: the agent's `web:` settings.
#[derive(Debug, Clone, Default)]
pub struct WebContext {
    config: Arc<Web>,
    unchecked: bool,
}

impl WebContext {
    /// The web tools under `config` (the root agent's `web:`).
    pub fn new(config: Web) -> Self {
        Self {
            config: Arc::new(config),
            unchecked: false,
        }
    }

    /// The settings.
    pub(crate) fn config(&self) -> &Web {
        &self.config
    }

    /// Tests only (debug builds): `web_fetch` without its egress checks, the twin an attack test
    /// runs to show that its refusal is the checks' doing.
    #[cfg(debug_assertions)]
    #[doc(hidden)]
    pub fn without_checks_for_tests(mut self) -> Self {
        self.unchecked = true;
        self
    }
}

/// The web tools `web` can offer: `web_fetch`, and `web_search` when a provider is set. Which of
/// them an agent is offered is `default_tools`' decision (`AgentConfig::builtins_on`, where
/// `web_search` is on only with a provider).
pub fn web_tools(web: &Web) -> Vec<Tool> {
    let mut tools = vec![fetch_tool(web)];
    if let Some(search) = &web.search {
        tools.push(tool(
            WEB_SEARCH,
            format!(
                "Search the web ({}) and return the top results, each with its title, URL and \
                 a snippet. Read a result with `{WEB_FETCH}`.",
                search.provider.as_str()
            ),
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "description": "What to search for."},
                    "count": {
                        "type": "integer", "minimum": 1, "maximum": 20,
                        "description": format!("Results wanted (default {}).", search.max_results)
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
            eve_compile::WEB_SEARCH_EFFECT,
            web.timeout_ms,
        ));
    }
    tools
}

fn fetch_tool(web: &Web) -> Tool {
    tool(
        WEB_FETCH,
        format!(
            "Fetch a web page by URL (http or https) and return it readable: HTML as Markdown, \
             text and JSON as they are, other content described (type and size). Pages are read \
             up to {} and {} s; what is cut is said in the result. Private, loopback and \
             metadata addresses are refused unless the agent's settings allow them.",
            bytes(web.max_bytes),
            web.timeout_ms.div_ceil(1000)
        ),
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "minLength": 1, "description": "The page's URL, http:// or https://."}
            },
            "required": ["url"],
            "additionalProperties": false
        }),
        eve_compile::default_tool_effect(WEB_FETCH).unwrap_or(Effect::Read),
        web.timeout_ms,
    )
}

fn tool(name: &str, description: String, input_schema: Value, effect: Effect, ms: u64) -> Tool {
    Tool {
        name: name.to_owned(),
        source: BUILTIN_ARGV.to_owned(),
        description,
        schema_hash: eve_compile::hash::json_hash(&input_schema),
        input_schema,
        approval: Approval::Never,
        effect,
        timeout_ms: ms,
        output_limit: eve_compile::DEFAULT_OUTPUT_LIMIT,
        deferred: false,
        env: Vec::new(),
        dynamic: Vec::new(),
        phase: None,
        ends_turn: false,
        approval_prompt: None,
        runner: Runner::Command {
            argv: vec![BUILTIN_ARGV.to_owned()],
        },
    }
}

/// Runs `web_fetch` or `web_search`.
pub(crate) async fn run_web(
    name: &str,
    input: &Value,
    ctx: &ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    if name == WEB_SEARCH {
        search::run(input, ctx, cancel).await
    } else {
        fetch::run(input, ctx, cancel).await
    }
}

/// A byte count as people read it (`2 MiB`, `512 KiB`, `900 bytes`).
pub(crate) fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= MIB {
        format!("{:.1} MiB", n as f64 / MIB as f64)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else if n >= KIB {
        format!("{:.1} KiB", n as f64 / KIB as f64)
    } else {
        format!("{n} bytes")
    }
}
