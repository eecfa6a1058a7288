//! OpenAPI connections with `oauth:`, against the real FastAPI app of the OpenAPI tests
//! (`tests/fixtures/openapi_shop.py`) run as an OAuth protected resource of the real
//! authorization server of the MCP OAuth tests ([`super::oauth_server`]): the app publishes its
//! RFC 9728 metadata and checks every bearer token with the server.
//!
//! - Client credentials: the first call obtains a token (the confidential client authenticates
//!   with its secret), later calls reuse it from the store, an expired one is obtained again, and
//!   the token never reaches a result. The twin: the same operation without OAuth is refused by
//!   the API, and a wrong client secret gets no token.
//! - Authorization code, app credentials, with a confidential client: `eve connections login`'s
//!   flow stores the token; after it expires, a runtime that never saw the login (a restart)
//!   refreshes it, authenticating with the client secret.
//! - `credentials: user` through `eve serve`: a JWT user's call parks the turn with
//!   `authorization.required`, resumes after the callback and runs with that user's token; another
//!   user is asked separately.
//! - The lean catalogue's `call_tool` naming a user-scoped MCP tool parks for authorization too.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use eve_compile::{Runner, Tool};
use eve_runtime::store::{SqliteStore, Store};
use eve_runtime::tools::{ToolContext, run_tool};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::oauth_server::{self, AuthServer, CONFIDENTIAL_ID, CONFIDENTIAL_SECRET};
use super::oauth_user::{
    bearer, completed, of_type, results, serve, sign_in, start_session, visit,
};
use super::python;
use crate::server_support::AgentDir;

/// The FastAPI app as a protected resource of `auth`; killed when dropped.
struct Shop {
    child: Child,
    port: u16,
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn has_fastapi() -> bool {
    Command::new(python())
        .args(["-c", "import fastapi, uvicorn"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn shop(auth: &AuthServer) -> Option<Shop> {
    if !has_fastapi() {
        eprintln!("SKIPPED: no fastapi in target/test-venv: run scripts/setup-test-deps.sh");
        return None;
    }
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openapi_shop.py");
    let mut child = Command::new(python())
        .arg(app)
        .env("SHOP_AUTH_SERVER", &auth.base)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the FastAPI app");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the app prints its port");
    let port = line.trim().parse().expect("a port");
    Some(Shop { child, port })
}

async fn document(shop: &Shop) -> String {
    reqwest::get(format!("http://127.0.0.1:{}/openapi.json", shop.port))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The tools of `connections/shop.yaml` (`yaml` after `openapi:` and `base_url:`), compiled.
async fn tools(shop: &Shop, dir: &Path, yaml: &str) -> Vec<Tool> {
    crate::openapi::shop_tools(dir, &document(shop).await, shop.port, yaml)
}

fn get_item(tools: &[Tool]) -> &Tool {
    tools.iter().find(|t| t.name == "shop__get_item").unwrap()
}

fn context(dir: &Path, store: &Arc<dyn Store>, vars: &[(&str, &str)]) -> ToolContext {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ToolContext::new("ses_01", "call_01", dir.join("ws"), dir.join("agent"))
        .with_env(Arc::new(move |name: &str| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        }))
        .with_principal(store.clone(), None)
}

async fn apple(tool: &Tool, ctx: &ToolContext) -> eve_runtime::tools::ToolResult {
    run_tool(
        tool,
        &json!({"item_id": "apple"}),
        ctx,
        CancellationToken::new(),
    )
    .await
}

fn issued(auth: &AuthServer) -> Vec<String> {
    auth.tokens.lock().unwrap().clone()
}

#[tokio::test]
async fn client_credentials_reach_an_openapi_api_behind_oauth() {
    let auth = oauth_server::start(Duration::from_secs(3)).await;
    let Some(shop) = shop(&auth) else { return };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("eve.db")).unwrap());
    let oauth = format!(
        "oauth:\n  grant: client_credentials\n  client_id: {CONFIDENTIAL_ID}\n  client_secret: \
         ${{SHOP_CLIENT_SECRET}}\n  scopes: [docs.read]\n  allow: [\"{}\"]\n",
        auth.host
    );
    let built = tools(&shop, dir.path(), &oauth).await;
    let tool = get_item(&built);
    let Runner::OpenApi(call) = &tool.runner else {
        panic!("not an OpenAPI tool")
    };
    assert!(call.oauth.is_some());
    // The model is not offered the `Authorization` header: the runtime sets it.
    assert!(
        !tool.input_schema.to_string().contains("authorization"),
        "{}",
        tool.input_schema
    );
    // No secret in the build.
    assert!(
        !serde_json::to_string(&built)
            .unwrap()
            .contains(CONFIDENTIAL_SECRET)
    );

    // The twin first: without a token the API refuses.
    let plain = tools(&shop, dir.path(), "").await;
    let refused = apple(get_item(&plain), &context(dir.path(), &store, &[])).await;
    assert!(!refused.ok, "{refused:?}");
    assert!(
        refused.error.as_deref().unwrap_or("").contains("401"),
        "{refused:?}"
    );

    // A wrong client secret gets no token, and says so without the secret.
    let wrong = context(
        dir.path(),
        &store,
        &[("SHOP_CLIENT_SECRET", "not-the-secret")],
    );
    let r = apple(tool, &wrong).await;
    assert!(!r.ok, "{r:?}");
    assert!(issued(&auth).is_empty());
    assert!(!format!("{r:?}").contains("not-the-secret"), "{r:?}");

    // With the secret: a token, the call answered.
    let ctx = context(
        dir.path(),
        &store,
        &[("SHOP_CLIENT_SECRET", CONFIDENTIAL_SECRET)],
    );
    let r = apple(tool, &ctx).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["name"], "apple");
    assert_eq!(issued(&auth).len(), 1);
    // The next call reuses the stored token.
    let r = apple(tool, &ctx).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(issued(&auth).len(), 1);
    // Once it has expired, another is obtained.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = apple(tool, &ctx).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(issued(&auth).len(), 2);
    // Never in a result.
    for token in issued(&auth) {
        assert!(!format!("{r:?}").contains(&token));
    }
    let note = store.note("oauth:shop", "app").await.unwrap();
    assert!(note.is_some(), "the token is kept for the app");
}

#[tokio::test]
async fn a_confidential_client_refreshes_after_a_restart() {
    let auth = oauth_server::start(Duration::from_secs(3)).await;
    let Some(shop) = shop(&auth) else { return };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("eve.db")).unwrap());
    let oauth = format!(
        "oauth:\n  client_id: {CONFIDENTIAL_ID}\n  client_secret: ${{SHOP_CLIENT_SECRET}}\n  \
         scopes: [docs.read]\n  allow: [\"{}\"]\n",
        auth.host
    );
    let built = tools(&shop, dir.path(), &oauth).await;
    let tool = get_item(&built);
    let Runner::OpenApi(call) = &tool.runner else {
        panic!("not an OpenAPI tool")
    };
    let vars = [("SHOP_CLIENT_SECRET", CONFIDENTIAL_SECRET)];
    let ctx = context(dir.path(), &store, &vars);

    // Before the operator logs in, the call says how to.
    let r = apple(tool, &ctx).await;
    assert!(!r.ok);
    assert!(
        r.error
            .as_deref()
            .unwrap_or("")
            .contains("eve connections login shop"),
        "{r:?}"
    );

    // `eve connections login shop`: the browser approves and comes back to the loopback port.
    let connection = eve_runtime::mcp::oauth::api::connection_of(call).unwrap();
    let show: eve_runtime::mcp::oauth::login::Show = Box::new(|url: &str| {
        let url = url.to_owned();
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap();
            let answer = client.get(&url).send().await.unwrap();
            let back = answer.headers()["location"].to_str().unwrap().to_owned();
            let _ = reqwest::get(back).await;
        });
    });
    let env: eve_runtime::tools::EnvLookup = Arc::new(|name: &str| {
        (name == "SHOP_CLIENT_SECRET").then(|| CONFIDENTIAL_SECRET.to_owned())
    });
    eve_runtime::mcp::oauth::login::login(
        &connection,
        &env,
        store.clone(),
        show,
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    let r = apple(tool, &ctx).await;
    assert!(r.ok, "{r:?}");

    // The token expires; a runtime that never saw the login refreshes it with the secret.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = auth.refreshes.load(Ordering::SeqCst);
    let reopened: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("eve.db")).unwrap());
    let restarted = context(dir.path(), &reopened, &vars);
    let r = apple(tool, &restarted).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(auth.refreshes.load(Ordering::SeqCst), before + 1);
}

/// The agent of the user-scoped test: JWT users, `connections/shop.yaml` with
/// `credentials: user`.
fn user_agent(shop: &Shop, document: &str, auth_host: &str) -> AgentDir {
    let agent = AgentDir::new();
    agent
        .file(
            "channels/eve.yaml",
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\n",
        )
        .file("specs/shop.json", document)
        .file(
            "connections/shop.yaml",
            &format!(
                "openapi: specs/shop.json\nbase_url: http://127.0.0.1:{}\ncredentials: user\n\
                 oauth:\n  scopes: [docs.read]\n  allow: [\"{auth_host}\"]\n",
                shop.port
            ),
        );
    agent
}

fn required(events: &[Value], principal: &str) -> String {
    let required = of_type(events, "authorization.required");
    assert_eq!(required.len(), 1, "{events:#?}");
    let data = &required[0]["data"];
    assert_eq!(data["name"], "shop");
    assert_eq!(data["principalId"], principal);
    data["authorization"]["url"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_user_scoped_openapi_connection_parks_the_turn_until_the_user_signs_in() {
    let auth = oauth_server::start(Duration::from_secs(600)).await;
    let Some(shop) = shop(&auth) else { return };
    let document = document(&shop).await;
    let server = serve(user_agent(&shop, &document, &auth.host)).await;
    let (alice, bob) = (bearer("alice"), bearer("bob"));

    let ask = "/tool shop__get_item {\"item_id\": \"apple\"}";
    let a = start_session(&server, &alice, ask).await;
    let events = server.until_rest_as(&alice, &a, 0).await;
    let url = required(&events, "jwt:alice");
    assert!(
        results(&events).is_empty(),
        "nothing ran before the sign-in"
    );
    assert!(issued(&auth).is_empty());

    let callback = sign_in(&url, &server.base).await;
    let (status, body) = visit(&callback).await;
    assert_eq!(status, 200, "{body}");
    let events = server.until_rest_as(&alice, &a, events.len() as u64).await;
    assert_eq!(completed(&events), ["authorized"]);
    let done = results(&events);
    assert_eq!(done.len(), 1, "{events:#?}");
    assert_eq!(done[0]["status"], "completed", "{done:?}");
    assert!(done[0].to_string().contains("apple"), "{done:?}");

    // Bob is asked for his own sign-in: Alice's token is not his.
    let b = start_session(&server, &bob, ask).await;
    let events = server.until_rest_as(&bob, &b, 0).await;
    required(&events, "jwt:bob");
    assert!(results(&events).is_empty());
    let notes = server.runtime.store().notes("oauth:shop").await.unwrap();
    let keys: Vec<&str> = notes.iter().map(|n| n.key.as_str()).collect();
    assert_eq!(keys, ["jwt:alice"]);

    // No token in either stream.
    for token in issued(&auth) {
        for (who, session) in [(&alice, &a), (&bob, &b)] {
            let text = json!(server.stored_as(who, session, 0).await).to_string();
            assert!(!text.contains(&token), "a stream holds a token");
        }
    }
    server.stop().await;
}

/// The OAuth fixture MCP server with `extra` filler tools; killed when dropped.
async fn many_tools(auth: &AuthServer, extra: usize) -> (String, tokio::process::Child) {
    use tokio::io::AsyncBufReadExt;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/server.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .args(["oauth", auth.base.as_str()])
        .env("MCP_EXTRA_TOOLS", extra.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let port = line.strip_prefix("PORT ").unwrap().trim().to_owned();
    let url = format!("http://127.0.0.1:{port}/mcp");
    auth.issued.lock().unwrap().resource = url.clone();
    (url, child)
}

/// Through the lean catalogue: `call_tool` naming a tool of a user-scoped MCP connection parks
/// the turn for the user's sign-in like a direct call, and then runs with the user's token (the
/// catalogue's door carries the principal).
#[tokio::test]
async fn a_catalogue_call_of_a_user_scoped_mcp_tool_parks_for_authorization() {
    let auth = oauth_server::start(Duration::from_secs(600)).await;
    let (url, _server) = many_tools(&auth, eve_runtime::mcp::CATALOGUE_THRESHOLD + 5).await;
    let agent = super::oauth_user::agent(&url, &auth.host);
    // A deferred tool: the catalogue is offered even before the user's tools can be listed.
    agent.file(
        "tools/note.yaml",
        "description: Keep a note.\nrun: cat\ndeferred: true\n",
    );
    let server = serve(agent).await;
    let bob = bearer("bob");
    let a = start_session(
        &server,
        &bob,
        "/tool call_tool {\"name\": \"docs__echo\", \"input\": {\"text\": \"via the catalogue\"}}",
    )
    .await;
    let events = server.until_rest_as(&bob, &a, 0).await;
    let required = of_type(&events, "authorization.required");
    assert_eq!(required.len(), 1, "{events:#?}");
    let url = required[0]["data"]["authorization"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(results(&events).is_empty(), "{events:#?}");
    let callback = sign_in(&url, &server.base).await;
    let (status, body) = visit(&callback).await;
    assert_eq!(status, 200, "{body}");
    let events = server.until_rest_as(&bob, &a, events.len() as u64).await;
    assert_eq!(completed(&events), ["authorized"]);
    let done = results(&events);
    assert_eq!(done.len(), 1, "{events:#?}");
    assert!(
        done[0].to_string().contains("via the catalogue"),
        "the catalogue call ran with Bob's token: {done:?}"
    );
    server.stop().await;
}
