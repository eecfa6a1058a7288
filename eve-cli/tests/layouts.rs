//! Project layouts on the real binary: a workspace of `agents/<name>/` members (nested and flat),
//! selected with `--agent NAME` for build, run, serve and dev, each served by its own process over
//! real HTTP; the flat layout found without `--agent .`; an `instructions/` folder; the agent
//! named after its folder. And every refusal of what eve does not take over from eve projects
//! (and the E120 stop-gap for eve's TypeScript modules), each with its code and message.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support_dev::{EVE, Server};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn eve(cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(EVE);
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env_remove("EVE_STORE")
        .env_remove("EVE_MOCK_SCRIPT")
        .env_remove("EVE_BASE_URL")
        .env_remove("PORT")
        .env("EVE_MODEL", "mock/echo")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// Runs `eve ARGS` in `cwd`: exit code, stdout, stderr.
fn run(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = eve(cwd, args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `run:` tool that answers `{"agent": NAME}` (and so says which agent ran it).
fn whoami(name: &str) -> String {
    format!(
        "description: Say which agent this is.\nrun: \"echo '{{\\\"agent\\\": \\\"{name}\\\"}}'\"\n"
    )
}

/// A workspace `ws/` with `alpha` (nested: `agents/alpha/agent/`) and `beta` (flat:
/// `agents/beta/`), each with a `whoami` tool saying its name, and a `package.json` member that
/// is not one.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    write(&ws.join("package.json"), "{\"private\": true}\n");
    let alpha = ws.join("agents/alpha/agent");
    write(&alpha.join("instructions.md"), "You are alpha.\n");
    write(&alpha.join("tools/whoami.yaml"), &whoami("alpha"));
    let beta = ws.join("agents/beta");
    write(&beta.join("instructions.md"), "You are beta.\n");
    write(&beta.join("tools/whoami.yaml"), &whoami("beta"));
    write(&beta.join("evals/smoke.yaml"), "- messages: [\"hi\"]\n");
    write(&ws.join("agents/web/package.json"), "{}\n");
    write(&ws.join("agents/web/instructions.md"), "Not a member.\n");
    (t, ws)
}

/// Posts `message` to a fresh session and returns the session's events once the turn is done.
fn turn(server: &Server, message: &str) -> Vec<Value> {
    let (status, body) = server.post("/eve/v1/session", &json!({ "message": message }));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    server.stream(&id, "?startIndex=0")
}

/// The output of the first completed tool call among `events`.
fn tool_output(events: &[Value]) -> Value {
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .unwrap_or_else(|| panic!("no tool result: {events:?}"));
    assert_eq!(result["data"]["status"], "completed", "{result}");
    result["data"]["result"]["output"].clone()
}

#[test]
fn workspace_members_build_run_and_serve_each_in_its_own_process() {
    let (_t, ws) = workspace();
    // Several members and none selected: an error naming them (and not `web`, which has its own
    // package.json).
    let (code, _, err) = run(&ws, &["build"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("workspace of several agents (alpha, beta)") && err.contains("--agent NAME"),
        "{err}"
    );
    let (code, _, err) = run(&ws, &["build", "--agent", "web"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no agent `web`") && err.contains("alpha, beta"),
        "{err}"
    );

    for name in ["alpha", "beta"] {
        let (code, _, err) = run(&ws, &["build", "--agent", name]);
        assert_eq!(code, 0, "{err}");
        // Named after its folder, its state in its own folder.
        assert!(err.contains(&format!("Built `{name}`")), "{err}");
        assert!(ws.join(format!("agents/{name}/.eve/current")).exists());
        let (code, out, err) = run(&ws, &["--agent", name, "run", "/tool whoami {}"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(&format!("\\\"agent\\\": \\\"{name}\\\"")) || out.contains(name),
            "{out}"
        );
    }
    assert!(
        !ws.join(".eve").exists(),
        "the workspace root keeps no state"
    );
    // From inside a member's folder it is selected without the flag.
    let (code, _, err) = run(&ws.join("agents/alpha/agent/tools"), &["info"]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = run(&ws.join("agents/beta"), &["info", "--json"]);
    let info: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["manifest"]["agent"]["name"], "beta", "{info:#}");

    // One agent per process, each on the single-agent routes.
    let alpha = Server::start(eve(&ws, &["serve", "--agent", "alpha", "--port", "0"]));
    let beta = Server::start(eve(&ws, &["dev", "--agent", "beta", "--port", "0"]));
    assert_eq!(alpha.get("/eve/v1/health").0, 200);
    assert_eq!(
        tool_output(&turn(&alpha, "/tool whoami {}")),
        json!({"agent": "alpha"})
    );
    assert_eq!(
        tool_output(&turn(&beta, "/tool whoami {}")),
        json!({"agent": "beta"})
    );
    let events = turn(&beta, "hello");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "message.completed" && e["data"]["message"] == "You said: hello"),
        "{events:?}"
    );
    // Each member's sessions are in its own store.
    let sessions = |name: &str| -> i64 {
        rusqlite::Connection::open(ws.join(format!("agents/{name}/.eve/eve.db")))
            .unwrap()
            .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(sessions("alpha"), 2, "one `eve run`, one over HTTP");
    assert_eq!(sessions("beta"), 3);
    assert_eq!(alpha.stop(), Some(0));
    assert_eq!(beta.stop(), Some(0));
}

#[test]
fn the_flat_layout_is_found_without_agent_dot_and_instructions_folder_is_read_in_order() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("solo");
    // The project's own files around the agent are passed over without a word.
    write(&root.join("package.json"), "{\"name\": \"solo\"}\n");
    write(&root.join("tsconfig.json"), "{}\n");
    write(
        &root.join("node_modules/zod/index.js"),
        "module.exports = {};\n",
    );
    write(&root.join("README.md"), "# solo\n");
    write(&root.join("evals/smoke.yaml"), "- messages: [\"hi\"]\n");
    write(&root.join("instructions.md"), "You are solo.\n");
    write(&root.join("instructions/b-second.md"), "Second rule.\n");
    write(
        &root.join("instructions/A-first.md"),
        "---\ntitle: First\n---\nFirst rule.\n",
    );
    write(&root.join("instructions/notes.txt"), "not a prompt\n");
    write(&root.join("tools/whoami.yaml"), &whoami("solo"));

    let (code, _, err) = run(&root.join("tools"), &["build", "--json"]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = run(&root, &["build", "--json"]);
    let built: Value = serde_json::from_str(&out).unwrap();
    let codes: Vec<(String, String)> = built["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_owned(),
                d["file"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        codes,
        [("W001".to_owned(), "instructions/notes.txt".to_owned())],
        "only the stray file in instructions/ is reported"
    );
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(".eve/current/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["agent"]["name"], "solo");
    assert_eq!(
        manifest["agent"]["instructions"],
        "You are solo.\n\nFirst rule.\n\nSecond rule."
    );
    let (code, out, err) = run(&root, &["run", "/tool whoami {}"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("solo"), "{out}");

    let server = Server::start(eve(&root, &["serve", "--port", "0"]));
    assert_eq!(
        tool_output(&turn(&server, "/tool whoami {}")),
        json!({"agent": "solo"})
    );
    assert_eq!(server.stop(), Some(0));

    // `instructions/` alone is enough; a missing prompt is still E001.
    std::fs::remove_file(root.join("instructions.md")).unwrap();
    let (code, _, err) = run(&root, &["build"]);
    assert_eq!(code, 0, "{err}");
    std::fs::remove_dir_all(root.join("instructions")).unwrap();
    write(&root.join("agent.yaml"), "description: solo\n");
    let (code, _, err) = run(&root, &["build"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E001]"), "{err}");
}

/// The diagnostics of `eve build --json` in `root`: (code, file, line, message, help).
fn diagnostics(root: &Path) -> Vec<(String, String, Option<u64>, String, String)> {
    let (code, out, err) = run(root, &["build", "--json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let built: Value = serde_json::from_str(&out).unwrap();
    built["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            (
                s("code"),
                s("file"),
                d["line"].as_u64(),
                s("message"),
                s("help"),
            )
        })
        .collect()
}

#[test]
fn what_eve_does_not_take_over_is_refused_with_what_to_write_instead() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = root.join("agent");
    write(&a.join("instructions.md"), "Be brief.\n");
    // eve's modules, until they are evaluated: E120, naming the file to write.
    write(
        &a.join("agent.ts"),
        "import { defineAgent } from \"eve\";\n\nexport default defineAgent({\n  model: \"anthropic/claude-sonnet-4.5\",\n});\n",
    );
    write(
        &a.join("tools/get_weather.ts"),
        "import { defineTool } from \"eve/tools\";\nimport { z } from \"zod\";\n\nexport default defineTool({\n  description: \"Get the weather\",\n  inputSchema: z.object({ city: z.string() }),\n  execute: async ({ city }) => ({ city }),\n});\n",
    );
    write(
        &a.join("hooks/audit.ts"),
        "import { defineHook } from \"eve/hooks\";\nexport default defineHook({ events: [\"turn.completed\"], run() {} });\n",
    );
    write(
        &a.join("schedules/daily.ts"),
        "import { defineSchedule } from \"eve/schedules\";\nexport default defineSchedule({ cron: \"0 9 * * *\", markdown: \"Go.\" });\n",
    );
    // A `.ts` script with front matter is still a script tool, not a module.
    write(
        &a.join("tools/sum.ts"),
        "// ---\n// description: Add.\n// input: {type: object}\n// ---\nimport x from \"eve\";\nconsole.log(\"{}\");\n",
    );
    // Refusals.
    write(&a.join("channels/slack.ts"), "export default {};\n");
    write(
        &a.join("sandbox.ts"),
        "import { DefaultSandbox, defineSandbox } from \"eve/sandbox\";\n\nexport default defineSandbox(() => DefaultSandbox.environment().open());\n",
    );
    write(
        &a.join("tools/sleep.ts"),
        "import { defineWorkflowTool } from \"eve/tools\";\nimport { sleep } from \"eve/tools/sleep\";\n\nexport default defineWorkflowTool({ ...sleep() });\n",
    );
    write(
        &a.join("extensions/crm/extension.ts"),
        "export default {};\n",
    );
    write(
        &a.join("subagents/research.ts"),
        "import { defineWorkspaceAgent } from \"eve\";\nexport default defineWorkspaceAgent({ name: \"research\" });\n",
    );
    write(
        &a.join("tools/lookup.ts"),
        "import { defineTool } from \"eve/tools\";\nimport { vercelOidc } from \"eve/agents/auth\";\nexport default defineTool({ auth: vercelOidc() });\n",
    );

    let found = diagnostics(root);
    let by_file = |file: &str| {
        found
            .iter()
            .find(|d| d.1 == file)
            .unwrap_or_else(|| panic!("nothing for {file}: {found:#?}"))
            .clone()
    };
    let expect = [
        (
            "agent/agent.ts",
            "E120",
            Some(1),
            "`defineAgent`",
            "`model: anthropic/claude-sonnet-4.5`",
        ),
        (
            "agent/tools/get_weather.ts",
            "E120",
            Some(1),
            "`defineTool`",
            "// description: Get the weather",
        ),
        (
            "agent/hooks/audit.ts",
            "E120",
            Some(1),
            "`defineHook`",
            "// events: [turn.completed]",
        ),
        (
            "agent/schedules/daily.ts",
            "E120",
            Some(1),
            "`defineSchedule`",
            "`schedules/daily.md`",
        ),
        (
            "agent/channels/slack.ts",
            "E121",
            None,
            "channels written in TypeScript",
            "`channels/NAME.yaml`",
        ),
        (
            "agent/sandbox.ts",
            "E122",
            Some(3),
            "sandbox providers",
            "`sandbox/sandbox.yaml`",
        ),
        (
            "agent/tools/sleep.ts",
            "E123",
            Some(1),
            "`defineWorkflowTool`",
            "ordinary tool",
        ),
        (
            "agent/extensions/",
            "E124",
            None,
            "extensions are not supported",
            "`connections/`",
        ),
        (
            "agent/subagents/research.ts",
            "E125",
            Some(1),
            "`defineWorkspaceAgent`",
            "`eve serve`",
        ),
        (
            "agent/tools/lookup.ts",
            "E125",
            Some(2),
            "`vercelOidc`",
            "`channels/eve.yaml`",
        ),
    ];
    for (file, code, line, message, help) in expect {
        let d = by_file(file);
        assert_eq!((d.0.as_str(), d.2), (code, line), "{file}: {d:?}");
        assert!(d.3.contains(message), "{file}: {}", d.3);
        assert!(d.4.contains(help), "{file}: {}", d.4);
    }
    // Each file is reported once, and nothing reads a module as a script without front matter.
    assert_eq!(
        found.iter().filter(|d| d.0 == "E012").count(),
        0,
        "{found:#?}"
    );
    let errors = found.iter().filter(|d| d.0.starts_with('E')).count();
    assert_eq!(errors, expect.len(), "{found:#?}");
    // The same with people's rendering: the code, the file and the hint.
    let (_, _, err) = run(root, &["build"]);
    assert!(
        err.contains("error[E123]: `defineWorkflowTool` is not supported")
            && err.contains("--> agent/tools/sleep.ts:1:1")
            && err.contains("error: build failed: 10 errors"),
        "{err}"
    );

    // Without them, the folder builds, and the script `.ts` tool is a tool.
    for f in [
        "agent.ts",
        "tools/get_weather.ts",
        "hooks/audit.ts",
        "schedules/daily.ts",
        "channels/slack.ts",
        "sandbox.ts",
        "tools/sleep.ts",
        "subagents/research.ts",
        "tools/lookup.ts",
    ] {
        std::fs::remove_file(a.join(f)).unwrap();
    }
    std::fs::remove_dir_all(a.join("extensions")).unwrap();
    std::fs::remove_dir_all(a.join("channels")).unwrap();
    std::fs::remove_dir_all(a.join("hooks")).unwrap();
    std::fs::remove_dir_all(a.join("schedules")).unwrap();
    std::fs::remove_dir_all(a.join("subagents")).unwrap();
    let (code, out, err) = run(root, &["build", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(".eve/current/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["agent"]["tools"][0]["name"], "sum", "{manifest:#}");
}
