//! OpenAPI connections against a real API: a FastAPI app (`tests/fixtures/openapi_shop.py`)
//! serving its own generated `/openapi.json` on loopback. The document is fetched from the app,
//! compiled from an agent folder like any build, and each operation's tool is run: path, query and
//! body parameters, the auth header the app checks, 4xx/5xx answers, a 50 MB answer cut while it
//! streams, and the path-traversal attack with its twin where path values go in unencoded.
//!
//! The app needs `fastapi` in the test venv (`scripts/setup-test-deps.sh`, which `scripts/test.sh`
//! runs first); without it these tests say so and pass without running.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use eve_compile::{Effect, Runner, Tool};
use eve_runtime::tools::{ToolContext, openapi::TEST_RAW_PATH_VALUES, run_tool};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const KEY: &str = "shop-key-0123456789";

/// The venv's python, when it has fastapi.
fn python() -> Option<String> {
    let python = std::env::var("EVE_TEST_PYTHON").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/test-venv/bin/python")
            .to_string_lossy()
            .into_owned()
    });
    let ok = Command::new(&python)
        .args(["-c", "import fastapi, uvicorn"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(python)
}

/// The running app; killed when dropped.
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

fn shop() -> Option<Shop> {
    let Some(python) = python() else {
        eprintln!(
            "SKIPPED: no Python with fastapi in target/test-venv: run scripts/setup-test-deps.sh"
        );
        return None;
    };
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openapi_shop.py");
    let mut child = Command::new(python)
        .arg(app)
        .env("SHOP_KEY", KEY)
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

/// An agent folder with `connections/shop.yaml` and the app's own document, compiled.
async fn tools(shop: &Shop, dir: &Path, extra: &str) -> Vec<Tool> {
    let doc = reqwest::get(format!("http://127.0.0.1:{}/openapi.json", shop.port))
        .await
        .expect("fetch /openapi.json")
        .text()
        .await
        .expect("document");
    let yaml = format!("auth:\n  type: header\n  name: X-API-Key\n  value: ${{SHOP_KEY}}\n{extra}");
    shop_tools(dir, &doc, shop.port, &yaml)
}

/// The tools of an agent folder in `dir` holding `document` as `specs/shop.json` and
/// `connections/shop.yaml` (`openapi:`, `base_url:` on `port`, then `yaml`), compiled as a build
/// would; the build must have no error and carry the document.
pub(crate) fn shop_tools(dir: &Path, document: &str, port: u16, yaml: &str) -> Vec<Tool> {
    let agent = dir.join("agent");
    std::fs::create_dir_all(agent.join("connections")).unwrap();
    std::fs::create_dir_all(agent.join("specs")).unwrap();
    std::fs::write(agent.join("instructions.md"), "Shop.\n").unwrap();
    std::fs::write(agent.join("specs/shop.json"), document).unwrap();
    std::fs::write(
        agent.join("connections/shop.yaml"),
        format!("openapi: specs/shop.json\nbase_url: http://127.0.0.1:{port}\n{yaml}"),
    )
    .unwrap();
    let source = eve_discover::FsSource::new(&agent).unwrap();
    let output = eve_compile::compile(
        &eve_discover::discover(&source),
        &eve_compile::Options {
            name: "shop".into(),
            file_prefix: "agent/".into(),
            protected_dirs: Vec::new(),
            agent_dir: Some(agent.clone()),
            cache_dir: None,
            fetch: None,
        },
    );
    assert_eq!(output.error_count(), 0, "{:#?}", output.diagnostics);
    assert!(output.files.contains(&"specs/shop.json".to_owned()));
    output.manifest.agent.tools
}

fn ctx(dir: &Path, vars: &[(&str, &str)]) -> ToolContext {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ToolContext::new("ses_01", "call_01", dir.join("ws"), dir.join("agent")).with_env(Arc::new(
        move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
    ))
}

fn find<'a>(tools: &'a [Tool], name: &str) -> &'a Tool {
    tools.iter().find(|t| t.name == name).unwrap_or_else(|| {
        panic!(
            "no tool {name}: {:?}",
            tools.iter().map(|t| &t.name).collect::<Vec<_>>()
        )
    })
}

async fn call(tool: &Tool, input: Value, ctx: &ToolContext) -> eve_runtime::tools::ToolResult {
    run_tool(tool, &input, ctx, CancellationToken::new()).await
}

/// Peak resident memory of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

#[tokio::test]
async fn a_fastapi_app_is_called_through_its_own_document() {
    let Some(shop) = shop() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(&shop, dir.path(), "").await;
    let ctx = ctx(dir.path(), &[("SHOP_KEY", KEY)]);

    // Names, effects and schemas from the document.
    let get_item = find(&tools, "shop__get_item");
    assert_eq!(get_item.effect, Effect::Read);
    assert_eq!(find(&tools, "shop__create_item").effect, Effect::Write);
    assert!(matches!(get_item.runner, Runner::OpenApi(_)));
    assert_eq!(get_item.input_schema["required"], json!(["item_id"]));
    let search = tools
        .iter()
        .find(|t| t.name.starts_with("shop__search"))
        .expect("the search operation (FastAPI names it)");
    assert_eq!(search.input_schema["properties"]["tags"]["type"], "array");
    assert!(
        get_item.input_schema["properties"]
            .get("x-api-key")
            .is_none(),
        "the header the connection's auth sets is not an input: {}",
        get_item.input_schema
    );

    // Path, query and body parameters; the auth header comes from the environment.
    let r = call(get_item, json!({"item_id": "apple"}), &ctx).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output, json!({"name": "apple", "price": 3}));
    let r = call(
        search,
        json!({"q": "red fruit", "tags": ["a b", "c"], "limit": 2}),
        &ctx,
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.output,
        json!({"q": "red fruit", "tags": ["a b", "c"], "limit": 2})
    );
    let r = call(
        find(&tools, "shop__create_item"),
        json!({"body": {"name": "pear", "price": 4, "tags": ["green"]}}),
        &ctx,
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output["created"]["name"], "pear");
    let r = call(get_item, json!({"item_id": "pear"}), &ctx).await;
    assert_eq!(r.output["price"], 4, "{r:?}");

    // Errors: a clear failure with the status and the body's words.
    let r = call(get_item, json!({"item_id": "plum"}), &ctx).await;
    assert!(!r.ok);
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("404") && error.contains("no item 'plum'"),
        "{error}"
    );
    let r = call(find(&tools, "shop__boom"), json!({}), &ctx).await;
    let error = r.error.unwrap_or_default();
    assert!(
        !r.ok && error.contains("500") && error.contains("database is down"),
        "{error}"
    );
    let r = call(
        find(&tools, "shop__create_item"),
        json!({"body": {"name": "fig"}}),
        &ctx,
    )
    .await;
    let error = r.error.unwrap_or_default();
    assert!(!r.ok && error.contains("422"), "{error}");

    // Without the key the app refuses: the header really is what lets the calls in.
    let keyless = self::ctx(dir.path(), &[("SHOP_KEY", "wrong")]);
    let r = call(get_item, json!({"item_id": "apple"}), &keyless).await;
    let error = r.error.unwrap_or_default();
    assert!(!r.ok && error.contains("401"), "{error}");
}

#[tokio::test]
async fn a_50_mb_answer_is_cut_while_it_streams() {
    let Some(shop) = shop() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(&shop, dir.path(), "").await;
    let ctx = ctx(dir.path(), &[("SHOP_KEY", KEY)]);
    let big = find(&tools, "shop__big_download");
    let before = peak_rss();
    let r = call(big, json!({"mb": 50}), &ctx).await;
    let grew = peak_rss().saturating_sub(before);
    assert!(r.ok, "{r:?}");
    assert!(r.truncated);
    let text = r.output.as_str().unwrap_or_default();
    assert!(
        text.len() <= big.output_limit as usize + 200,
        "{}",
        text.len()
    );
    assert!(text.starts_with("xxxx"));
    assert!(
        grew < 30 << 20,
        "the answer must not sit in memory: peak grew by {grew} bytes"
    );
}

#[tokio::test]
async fn a_path_value_stays_one_segment_and_the_twin_without_encoding_escapes() {
    let Some(shop) = shop() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(&shop, dir.path(), "operations:\n  block: [admin_*]\n").await;
    assert!(
        tools.iter().all(|t| !t.name.starts_with("shop__admin")),
        "`operations.block` removes the admin operation"
    );
    let get_item = find(&tools, "shop__get_item");
    let ctx = ctx(dir.path(), &[("SHOP_KEY", KEY)]);
    for value in ["../admin", "a/../../admin", "%2e%2e/admin", "..%2Fadmin"] {
        let r = call(get_item, json!({"item_id": value}), &ctx).await;
        assert!(!r.ok, "{value}: {r:?}");
        let error = r.error.unwrap_or_default();
        assert!(
            error.contains("404") && !error.contains("admin panel"),
            "{value}: {error}"
        );
    }
    let r = call(get_item, json!({"item_id": ".."}), &ctx).await;
    assert!(!r.ok && r.input_refused, "{r:?}");

    // The twin: with path values put in as they are, the same input reaches the admin panel.
    let raw = self::ctx(
        dir.path(),
        &[("SHOP_KEY", KEY), (TEST_RAW_PATH_VALUES, "1")],
    );
    let r = call(get_item, json!({"item_id": "../admin"}), &raw).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output, json!({"admin": "the admin panel"}));
}

/// The auth secret is a `${VAR}` in the build, learned by the runtime's redaction like any other
/// reference: an answer that echoed it (plain or as basic-auth base64) is shown as `${SHOP_KEY}`.
#[test]
fn the_auth_secret_is_not_in_the_build_and_is_redacted() {
    let call = eve_compile::OpenApiCall {
        connection: "shop".into(),
        document: "specs/shop.json".into(),
        document_sha256: None,
        method: "GET".into(),
        base_url: "http://127.0.0.1:9".into(),
        path: "/items".into(),
        parameters: Vec::new(),
        body: None,
        auth: Some(eve_compile::ConnectionAuth::Basic {
            username: "bot".into(),
            password: "${SHOP_KEY}".into(),
        }),
        oauth: None,
        credentials: eve_compile::Credentials::App,
    };
    let manifest = serde_json::to_value(Runner::OpenApi(call)).unwrap();
    assert!(!manifest.to_string().contains(KEY));
    let secrets = eve_runtime::redact::Secrets::new();
    secrets.learn_manifest(&manifest, &|name| {
        (name == "SHOP_KEY").then(|| KEY.to_owned())
    });
    let echoed = format!("token {KEY} and basic {}", {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("bot:{KEY}"))
    });
    let shown = secrets.redact(&echoed);
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("${SHOP_KEY}"), "{shown}");
}

/// `openapi:` naming the app's own URL, built as `eve build` builds (with the guarded fetcher the
/// CLI gives the compiler): the document is fetched through a redirect within the origin and
/// pinned by its SHA-256; with the app gone the next build uses the cached copy and says so
/// (W013); a redirect to another origin is not followed, and a document over 16 MiB is refused.
#[tokio::test]
async fn a_document_named_by_url_is_fetched_from_the_app_and_pinned() {
    let Some(mut shop) = shop() else { return };
    let port = shop.port;
    let document = reqwest::get(format!("http://127.0.0.1:{port}/openapi.json"))
        .await
        .expect("fetch /openapi.json")
        .bytes()
        .await
        .expect("document");
    let sha256 = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&document))
    };
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("connections")).unwrap();
    std::fs::write(agent.join("instructions.md"), "Shop.\n").unwrap();
    let mut project = eve_compile::Project::at(dir.path().to_path_buf(), agent.clone());
    project.fetch = Some(eve_runtime::tools::openapi_document::document_fetcher());
    let build = |path: &str| {
        std::fs::write(
            agent.join("connections/shop.yaml"),
            format!(
                "openapi: http://127.0.0.1:{port}{path}\nbase_url: http://127.0.0.1:{port}\nauth:\n  type: header\n  name: X-API-Key\n  value: ${{SHOP_KEY}}\n"
            ),
        )
        .unwrap();
        eve_compile::build::check(&project).expect("check")
    };

    let out = build("/spec/moved");
    assert_eq!(out.error_count(), 0, "{:#?}", out.diagnostics);
    assert!(out.diagnostics.is_empty(), "{:#?}", out.diagnostics);
    let get = find(&out.manifest.agent.tools, "shop__get_item");
    let Runner::OpenApi(call) = &get.runner else {
        panic!("{:?}", get.runner)
    };
    assert_eq!(call.document, format!("http://127.0.0.1:{port}/spec/moved"));
    assert_eq!(call.document_sha256.as_deref(), Some(sha256.as_str()));
    assert!(
        !out.files.iter().any(|f| f.contains("openapi")),
        "{:?}",
        out.files
    );
    // The tool built from the fetched document calls the app.
    let ctx = ctx(dir.path(), &[("SHOP_KEY", KEY)]);
    let result = call_tool_named(&out.manifest.agent.tools, "shop__get_item", &ctx).await;
    assert!(result.contains("apple"), "{result}");

    // Another origin: the redirect is refused, never followed.
    let out = build("/spec/elsewhere");
    assert_eq!(out.error_count(), 1, "{:#?}", out.diagnostics);
    let message = &out.diagnostics[0].message;
    assert!(
        message.contains("refused a redirect to localhost"),
        "{message}"
    );
    // Larger than a build takes: refused while it streams.
    let out = build("/spec/huge");
    assert!(
        out.diagnostics[0].message.contains("larger than 16 MiB"),
        "{:#?}",
        out.diagnostics
    );

    // The app is gone: the copy cached by the first build, with a W013 that says so.
    let _ = shop.child.kill();
    let _ = shop.child.wait();
    let out = build("/spec/moved");
    assert_eq!(out.error_count(), 0, "{:#?}", out.diagnostics);
    assert_eq!(out.diagnostics.len(), 1, "{:#?}", out.diagnostics);
    assert_eq!(out.diagnostics[0].code, eve_discover::Code::OpenApiStale);
    let get = find(&out.manifest.agent.tools, "shop__get_item");
    let Runner::OpenApi(call) = &get.runner else {
        panic!("{:?}", get.runner)
    };
    assert_eq!(call.document_sha256.as_deref(), Some(sha256.as_str()));
}

/// Runs `name` with `{"item_id": "apple"}`; its text.
async fn call_tool_named(tools: &[Tool], name: &str, ctx: &ToolContext) -> String {
    let result = call(find(tools, name), json!({"item_id": "apple"}), ctx).await;
    serde_json::to_string(&result.output).unwrap()
}
