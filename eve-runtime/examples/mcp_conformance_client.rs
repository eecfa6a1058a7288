//! The client side of the MCP conformance suite (`@modelcontextprotocol/conformance client`):
//! the suite starts this program with the server's URL as its last argument, the scenario's name
//! in `MCP_CONFORMANCE_SCENARIO` and its context (pre-registered client credentials) as JSON in
//! `MCP_CONFORMANCE_CONTEXT`. It drives eve's MCP client ([`eve_runtime::mcp::direct`], with
//! [`eve_runtime::mcp::oauth`]) the way the runtime does: connect (authorizing when the server
//! asks), list the tools, call each one with arguments built from its schema, and close. The
//! authorization server's approval step is taken headlessly (the suite's server approves at
//! once); the suite's servers run on `localhost`, which the connection therefore lists.
//! `scripts/mcp-conformance.sh` runs every scenario through it.

use std::sync::Arc;

use eve_runtime::mcp::direct::{self, Elicitor};
use eve_runtime::mcp::oauth::{
    Authorizer, DEFAULT_MAX_STEP_UP, Grant, HeadlessUserAgent, OAuthConfig,
};
use serde_json::{Map, Value, json};

/// Where the suite's authorization server sends the user back (never requested: the headless
/// agent reads the redirect).
const REDIRECT_URI: &str = "http://localhost:3000/callback";
/// The client ID metadata document the suite's `auth/basic-cimd` scenario expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// Accepts every elicitation with the defaults its schema gives.
struct Defaults;

#[async_trait::async_trait]
impl Elicitor for Defaults {
    async fn elicit(&self, _message: &str, schema: &Value) -> Option<Value> {
        let mut content = Map::new();
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                if let Some(default) = property.get("default") {
                    content.insert(name.clone(), default.clone());
                }
            }
        }
        Some(Value::Object(content))
    }
}

/// Arguments for a tool: a plain value of each property's type.
fn arguments(schema: &Value) -> Value {
    let mut args = Map::new();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let value = match property.get("type").and_then(Value::as_str) {
                Some("number" | "integer") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!("test"),
            };
            args.insert(name.clone(), value);
        }
    }
    Value::Object(args)
}

async fn run() -> Result<(), String> {
    let url = std::env::args()
        .next_back()
        .filter(|a| a.starts_with("http"))
        .ok_or("usage: mcp_conformance_client URL")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let text = |key: &str| context.get(key).and_then(Value::as_str).map(str::to_owned);

    let authorizer = if scenario.starts_with("auth/") {
        let listed = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let config = OAuthConfig {
            grant: if scenario.starts_with("auth/client-credentials") {
                Grant::ClientCredentials
            } else {
                Grant::AuthorizationCode
            },
            client_id: text("client_id"),
            client_secret: text("client_secret"),
            client_metadata_url: Some(CLIENT_METADATA_URL.to_owned()),
            client_name: Some("eve".to_owned()),
            scopes: Vec::new(),
            redirect_uri: REDIRECT_URI.to_owned(),
            allow: listed.clone(),
            max_step_up: DEFAULT_MAX_STEP_UP,
            place: None,
        };
        let agent = Arc::new(HeadlessUserAgent::new(&url, &listed).map_err(|e| e.to_string())?);
        let authorizer = Authorizer::new(&url, config, Vec::new(), agent)
            .await
            .map_err(|e| e.to_string())?;
        Some(Arc::new(authorizer))
    } else {
        None
    };
    let elicitor: Option<Arc<dyn Elicitor>> = Some(Arc::new(Defaults));
    let session = direct::connect_http(&url, authorizer, elicitor, Vec::new())
        .await
        .map_err(|e| e.to_string())?;
    let tools = session.list_tools().await.map_err(|e| e.to_string())?;
    let mut failed = None;
    for tool in &tools {
        match session
            .call_tool(&tool.name, arguments(&tool.input_schema))
            .await
        {
            Ok(result) => eprintln!("{}: {result}", tool.name),
            Err(e) => {
                eprintln!("{}: {e}", tool.name);
                failed.get_or_insert(e.to_string());
            }
        }
    }
    session.close().await;
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
