//! `eve init`, `eve build` and `eve info` on the real binary: a fresh project builds and its
//! manifest validates against the checked-in schema; errors exit 1 with every diagnostic; `--json`
//! has the documented shape; no secret value lands in `.eve/`; every command has `--help`.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn eve(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eve"));
    cmd.current_dir(dir)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env_remove("EVE_MODEL")
        .env("NO_COLOR", "1");
    cmd
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

fn run(dir: &Path, args: &[&str]) -> Run {
    let out = eve(dir).args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `eve init demo` in a fresh temp dir; returns (temp dir, project folder).
fn init_demo() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let r = run(tmp.path(), &["init", "demo"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let project = tmp.path().join("demo");
    (tmp, project)
}

fn manifest_schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/manifest.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn init_then_build_gives_a_manifest_that_validates_against_the_schema() {
    let (_tmp, project) = init_demo();
    let r = run(&project, &["build"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("Built `demo`"), "{}", r.stderr);
    assert!(
        r.stderr.contains("1 tool, 1 skill, 1 schedule"),
        "{}",
        r.stderr
    );

    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(project.join(".eve/current/manifest.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&manifest_schema()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&manifest)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "manifest does not validate: {errors:#?}");
    assert_eq!(manifest["agent"]["name"], "demo");
    assert_eq!(manifest["agent"]["tools"][0]["name"], "get_weather");

    // The schema is not vacuous: a manifest with a wrong field type fails it.
    let mut broken = manifest.clone();
    broken["agent"]["tools"][0]["timeout_ms"] = Value::from("soon");
    assert!(!validator.is_valid(&broken), "the schema accepts anything");
}

#[test]
fn init_refuses_a_non_empty_folder_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("busy");
    write(&dir.join("README.md"), "mine\n");

    let r = run(tmp.path(), &["init", "busy"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("is not empty"), "{}", r.stderr);
    assert!(r.stderr.contains("--force"), "{}", r.stderr);
    assert!(
        !dir.join("agent").exists(),
        "nothing is written without --force"
    );

    let r = run(tmp.path(), &["init", "busy", "--force"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(dir.join("agent/instructions.md").is_file());
    assert_eq!(
        std::fs::read_to_string(dir.join("README.md")).unwrap(),
        "mine\n",
        "existing files are kept"
    );
    assert!(r.stderr.contains("kept existing README.md"), "{}", r.stderr);
    // The forced project builds.
    assert_eq!(run(&dir, &["build"]).code, 0);
}

#[test]
fn init_into_the_current_folder_and_an_unknown_template() {
    let tmp = tempfile::tempdir().unwrap();
    let here = tmp.path().join("here");
    std::fs::create_dir(&here).unwrap();
    let r = run(&here, &["init"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(here.join("agent/instructions.md").is_file());
    assert!(here.join(".gitignore").is_file());

    let r = run(tmp.path(), &["init", "x", "--template", "nope"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("unknown template `nope`"), "{}", r.stderr);
    assert!(r.stderr.contains("default"), "{}", r.stderr);
    assert!(!tmp.path().join("x").exists());
}

#[test]
fn project_flags_go_before_or_after_the_command() {
    let tmp = tempfile::tempdir().unwrap();
    // `-C DIR init NAME` creates DIR/NAME, and says how to get there from here.
    std::fs::create_dir(tmp.path().join("work")).unwrap();
    let r = run(tmp.path(), &["-C", "work", "init", "demo"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(tmp.path().join("work/demo/agent/instructions.md").is_file());
    assert!(r.stderr.contains("cd work/demo"), "{}", r.stderr);
    // Before the command, after it, and before a nested command.
    for args in [
        &["-C", "work/demo", "build"][..],
        &["build", "-C", "work/demo"],
        &["--project=work/demo", "info", "--json"],
        &["-C", "work/demo", "sessions", "list", "--json"],
    ] {
        let r = run(tmp.path(), args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    assert!(tmp.path().join("work/demo/.eve/current").exists());
    // The flag names the folder the command uses: a wrong one is the usual error.
    let r = run(tmp.path(), &["-C", "nowhere", "info"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("nowhere/agent"), "{}", r.stderr);
}

#[test]
fn init_list_names_every_template_with_its_description() {
    let tmp = tempfile::tempdir().unwrap();
    let r = run(tmp.path(), &["init", "--list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
    for entry in std::fs::read_dir(templates).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let about = std::fs::read_to_string(entry.path().join("TEMPLATE.md")).unwrap();
        let first = about.lines().next().unwrap();
        let line = r
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&name))
            .unwrap_or_else(|| panic!("{name} not listed:\n{}", r.stdout));
        assert!(line.contains(first), "{line}");
    }
    // Every template scaffolds a project that builds.
    for line in r.stdout.lines() {
        let name = line.split_whitespace().next().unwrap();
        let r = run(
            tmp.path(),
            &["init", &format!("t-{name}"), "--template", name],
        );
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        let b = run(&tmp.path().join(format!("t-{name}")), &["build"]);
        assert_eq!(b.code, 0, "template {name} does not build:\n{}", b.stderr);
    }
}

#[test]
fn info_json_has_the_manifest_and_diagnostics() {
    let (_tmp, project) = init_demo();
    let r = run(&project, &["info", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    assert_eq!(j["ok"], true);
    assert!(j["project"].as_str().unwrap().ends_with("demo"));
    assert!(j["agent_dir"].as_str().unwrap().ends_with("demo/agent"));
    assert_eq!(j["current_build"], Value::Null, "nothing built yet");
    assert_eq!(j["diagnostics"], Value::Array(vec![]));
    let tool = &j["manifest"]["agent"]["tools"][0];
    assert_eq!(tool["name"], "get_weather");
    assert_eq!(tool["input_schema"]["required"][0], "city");
    assert_eq!(tool["schema_hash"].as_str().unwrap().len(), 64);
    assert_eq!(j["manifest"]["agent"]["skills"][0]["name"], "haiku");
    assert_eq!(
        j["manifest"]["agent"]["schedules"][0]["cron"],
        "0 9 * * 1-5"
    );

    let b = run(&project, &["build", "--json"]);
    let hash = b.json()["hash"].as_str().unwrap().to_owned();
    assert_eq!(
        run(&project, &["info", "--json"]).json()["current_build"],
        hash.as_str()
    );
}

#[test]
fn info_and_build_exit_1_on_errors_and_show_every_diagnostic() {
    let (_tmp, project) = init_demo();
    write(
        &project.join("agent/tools/search.yaml"),
        "description: Search.\ninput:\n  type: object\n  properties:\n    q: {type: strin}\nrun: [echo]\n",
    );
    write(
        &project.join("agent/schedules/hourly.md"),
        "---\ncron: \"0 * * *\"\n---\nCheck.\n",
    );

    let r = run(&project, &["info"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stdout.contains("agent demo"),
        "what was found is still shown"
    );
    assert!(r.stderr.contains("error[E020]"), "{}", r.stderr);
    assert!(
        r.stderr.contains("agent/tools/search.yaml:5:"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("error[E030]"), "{}", r.stderr);
    assert!(
        r.stderr.contains("agent/schedules/hourly.md:2:"),
        "{}",
        r.stderr
    );

    let j = run(&project, &["info", "--json"]);
    assert_eq!(j.code, 1);
    let j = j.json();
    assert_eq!(j["ok"], false);
    let codes: Vec<&str> = j["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["E030", "E020"]);
    let d = &j["diagnostics"][1];
    assert_eq!(d["file"], "agent/tools/search.yaml");
    assert_eq!(d["line"], 5);
    assert_eq!(d["severity"], "error");
    assert!(d["help"].as_str().unwrap().contains("string"));

    let b = run(&project, &["build"]);
    assert_eq!(b.code, 1);
    assert!(b.stderr.contains("build failed: 2 errors"), "{}", b.stderr);
    assert!(!project.join(".eve/current").exists());
}

#[test]
fn build_json_reports_hash_counts_and_reuse() {
    let (_tmp, project) = init_demo();
    let first = run(&project, &["build", "--json"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let j = first.json();
    assert_eq!(j["ok"], true);
    let hash = j["hash"].as_str().unwrap();
    assert_eq!(hash.len(), 16);
    assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(
        j["dir"]
            .as_str()
            .unwrap()
            .ends_with(&format!(".eve/builds/{hash}"))
    );
    assert_eq!(j["reused"], false);
    assert_eq!(j["errors"], 0);
    assert_eq!(j["warnings"], 0);
    assert_eq!(j["counts"]["tools"], 1);
    assert_eq!(j["counts"]["skills"], 1);
    assert_eq!(j["counts"]["schedules"], 1);
    assert!(j["elapsed_ms"].as_f64().unwrap() >= 0.0);

    let again = run(&project, &["build", "--json"]).json();
    assert_eq!(again["hash"], hash);
    assert_eq!(again["reused"], true);

    // A warning is reported and does not fail the build.
    write(&project.join("agent/notes.txt"), "todo\n");
    let warned = run(&project, &["build", "--json"]);
    assert_eq!(warned.code, 0);
    let w = warned.json();
    assert_eq!(w["warnings"], 1);
    assert_eq!(w["diagnostics"][0]["code"], "W001");
}

#[test]
fn five_mistakes_give_five_diagnostics_in_one_build() {
    let (_tmp, project) = init_demo();
    let a = project.join("agent");
    std::fs::remove_file(a.join("instructions.md")).unwrap();
    write(
        &a.join("tools/weather.yaml"),
        "description: W.\ninput:\n  type: objekt\nrun: [echo]\n",
    );
    write(
        &a.join("schedules/daily-summary.md"),
        "---\ncron: \"0 25 * * *\"\n---\nGo.\n",
    );
    write(&a.join("subagents/helper/instructions.md"), "Help.\n");
    write(
        &a.join("tools/2fast.yaml"),
        "description: F.\nrun: [echo]\n",
    );

    let r = run(&project, &["build", "--json"]);
    assert_eq!(r.code, 1);
    let j = r.json();
    assert_eq!(j["ok"], false);
    assert_eq!(j["hash"], Value::Null);
    let mut codes: Vec<&str> = j["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    codes.sort_unstable();
    codes.dedup();
    assert!(j["errors"].as_u64().unwrap() >= 5, "{}", r.stdout);
    assert!(codes.len() >= 5, "{codes:?}");

    let text = run(&project, &["build"]);
    assert_eq!(text.code, 1);
    for code in ["E001", "E005", "E020", "E030", "E040"] {
        assert!(
            text.stderr.contains(&format!("error[{code}]")),
            "{code}:\n{}",
            text.stderr
        );
    }
}

#[test]
fn no_secret_value_is_written_to_the_build() {
    const SLACK: &str = "xoxb-eve-test-7f3a9c2e51d8";
    const SIGNING: &str = "signing-eve-test-0b4d6e";
    const GITHUB: &str = "ghp_eveTestValue9c1d2e3f";
    const API: &str = "api-eve-test-5a6b7c8d";
    let (_tmp, project) = init_demo();
    let a = project.join("agent");
    write(
        &a.join("channels/slack.yaml"),
        "kind: slack\nsigning_secret: ${SLACK_SIGNING_SECRET}\nbot_token: ${SLACK_BOT_TOKEN}\n",
    );
    write(
        &a.join("connections/github.yaml"),
        "command: github-mcp\nenv:\n  GITHUB_TOKEN: ${GITHUB_TOKEN}\n",
    );
    write(
        &a.join("tools/issues.yaml"),
        "description: Issues.\ninput:\n  type: object\nhttp:\n  url: https://api.example.com/issues\n  headers:\n    Authorization: Bearer ${ISSUES_API_KEY}\n",
    );
    let out = eve(&project)
        .args(["build", "--json"])
        .env("SLACK_BOT_TOKEN", SLACK)
        .env("SLACK_SIGNING_SECRET", SIGNING)
        .env("GITHUB_TOKEN", GITHUB)
        .env("ISSUES_API_KEY", API)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for stream in [&out.stdout, &out.stderr] {
        let s = String::from_utf8_lossy(stream);
        for secret in [SLACK, SIGNING, GITHUB, API] {
            assert!(!s.contains(secret), "{secret} printed");
        }
    }
    let files = files_under(&project.join(".eve"));
    assert!(!files.is_empty());
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for secret in [SLACK, SIGNING, GITHUB, API] {
            assert!(
                !text.contains(secret),
                "{secret} written to {}",
                f.display()
            );
        }
    }
    let manifest = std::fs::read_to_string(project.join(".eve/current/manifest.json")).unwrap();
    for reference in [
        "${SLACK_BOT_TOKEN}",
        "${SLACK_SIGNING_SECRET}",
        "${GITHUB_TOKEN}",
        "Bearer ${ISSUES_API_KEY}",
    ] {
        assert!(manifest.contains(reference), "{reference} missing");
    }
}

#[test]
fn commands_without_a_project_say_how_to_make_one() {
    let tmp = tempfile::tempdir().unwrap();
    for cmd in ["build", "info"] {
        let r = run(tmp.path(), &[cmd]);
        assert_eq!(r.code, 2, "{cmd}: {}", r.stderr);
        assert!(r.stderr.contains("eve init"), "{cmd}: {}", r.stderr);
    }
}

/// The subcommands `eve help` lists for a command (from its `--help` text).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_command_has_help() {
    let tmp = tempfile::tempdir().unwrap();
    let top = run(tmp.path(), &["--help"]);
    assert_eq!(top.code, 0);
    assert!(top.stdout.contains("Usage: eve"), "{}", top.stdout);
    let commands = subcommands(&top.stdout);
    for expected in ["init", "info", "build"] {
        assert!(commands.iter().any(|c| c == expected), "{commands:?}");
    }
    for cmd in &commands {
        let r = run(tmp.path(), &[cmd, "--help"]);
        assert_eq!(r.code, 0, "eve {cmd} --help: {}", r.stderr);
        assert!(
            r.stdout.contains(&format!("Usage: eve {cmd}")),
            "eve {cmd} --help:\n{}",
            r.stdout
        );
        for sub in subcommands(&r.stdout) {
            let r = run(tmp.path(), &[cmd, &sub, "--help"]);
            assert_eq!(r.code, 0, "eve {cmd} {sub} --help: {}", r.stderr);
            assert!(r.stdout.contains(&format!("Usage: eve {cmd} {sub}")));
        }
    }
    let v = run(tmp.path(), &["--version"]);
    assert_eq!(v.code, 0);
    assert!(v.stdout.starts_with("eve "), "{}", v.stdout);
}

#[test]
fn info_json_shows_each_tools_effective_sandbox_network_env_and_approval() {
    let (_tmp, project) = init_demo();
    let agent = project.join("agent");
    write(
        &agent.join("sandbox/sandbox.yaml"),
        "network: [api.github.com]\n",
    );
    write(
        &agent.join("tools/fetch.yaml"),
        "description: Fetch.\ninput:\n  type: object\nrun: [curl]\nnetwork: all\nenv: [GH_TOKEN]\napproval: always\n",
    );
    write(
        &agent.join("tools/admin.yaml"),
        "description: Admin.\ninput:\n  type: object\nrun: [id]\nsandbox: host\n",
    );
    write(
        &agent.join("tools/web.yaml"),
        "description: Web.\nhttp: {url: \"https://example.com\"}\n",
    );
    write(&agent.join("connections/gh.yaml"), "command: gh-mcp\n");
    let r = run(&project, &["info", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    let tools = j["tools"].as_array().unwrap();
    let tool = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(tool("bash")["sandbox"], "isolated");
    assert_eq!(
        tool("bash")["network"],
        serde_json::json!(["api.github.com"])
    );
    assert_eq!(tool("fetch")["sandbox"], "isolated");
    assert_eq!(tool("fetch")["network"], "all");
    assert_eq!(tool("fetch")["env"], serde_json::json!(["GH_TOKEN"]));
    assert_eq!(tool("fetch")["approval"], "always");
    assert_eq!(tool("admin")["sandbox"], "host");
    assert_eq!(
        tool("get_weather")["network"],
        serde_json::json!(["api.github.com"])
    );
    assert_eq!(
        tool("web")["sandbox"],
        Value::Null,
        "an HTTP tool starts no process"
    );
    assert_eq!(j["connections"][0]["sandbox"], "host");
    // Existing fields are kept; the warnings say what widens.
    assert_eq!(
        j["manifest"]["agent"]["sandbox"]["tools"]["admin"]["provider"],
        "host"
    );
    let codes: Vec<&str> = j["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["W010", "W011"], "{}", r.stdout);

    let text = run(&project, &["info"]);
    assert!(
        text.stdout
            .contains("fetch  [command, effect write, approval always, sandbox isolated, network all, env GH_TOKEN]"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains("admin  [command, effect write, sandbox host]"),
        "{}",
        text.stdout
    );
}

#[test]
fn info_shows_web_search_and_sleep_from_the_one_table() {
    let (_tmp, project) = init_demo();
    let yaml = project.join("agent/agent.yaml");
    let base = "model: mock/echo\n";
    write(
        &yaml,
        &format!(
            "{base}\nweb:\n  search:\n    provider: brave\ndefault_tools: {{sleep: true}}\nlimits:\n  max_sleep_seconds: 90\n"
        ),
    );
    let r = run(&project, &["info", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    let tools = j["tools"].as_array().unwrap();
    let tool = |n: &str| tools.iter().find(|t| t["name"] == n).cloned();
    let search = tool("web_search").expect("web_search is on with a provider");
    assert_eq!(search["provider"], "brave");
    assert_eq!(search["env"], serde_json::json!(["BRAVE_API_KEY"]));
    assert_eq!(search["effect"], "read");
    assert_eq!(search["from"], "agent.yaml");
    assert_eq!(
        tools.iter().filter(|t| t["name"] == "web_search").count(),
        1
    );
    assert_eq!(tool("sleep").unwrap()["effect"], "read");
    let text = run(&project, &["info"]);
    assert!(
        text.stdout.contains("brave, key $BRAVE_API_KEY"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("a durable timer, at most 90s"),
        "{}",
        text.stdout
    );
    // The map turns it off like any other built-in.
    write(
        &yaml,
        &format!(
            "{base}\nweb:\n  search:\n    provider: brave\ndefault_tools: {{web_search: false}}\n"
        ),
    );
    let r = run(&project, &["info", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    assert!(
        !j["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "web_search"),
        "{}",
        r.stdout
    );
}

#[test]
fn info_text_of_the_default_template() {
    let (_tmp, project) = init_demo();
    let r = run(&project, &["info"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "");
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(
        r"next in [^(]+\(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)",
        "next in [WHEN] ([DATE] UTC)",
    );
    // What the sandbox enforces depends on the machine (root, cgroups); its lines are kept,
    // their values are not.
    settings.add_filter(
        r"(?m)^    (processes|memory|uids|workspace|sockets): .*$",
        "    $1: [THIS MACHINE]",
    );
    settings.bind(|| insta::assert_snapshot!(r.stdout));
}

#[test]
fn completions_cover_every_command_and_load_in_bash() {
    let tmp = tempfile::tempdir().unwrap();
    let commands = subcommands(&run(tmp.path(), &["--help"]).stdout);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let r = run(tmp.path(), &["completions", shell]);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        for cmd in &commands {
            assert!(r.stdout.contains(cmd.as_str()), "{shell} lacks {cmd}");
        }
    }
    // bash loads the script and registers it for `eve`, and completes a subcommand.
    let script = tmp.path().join("eve.bash");
    write(&script, &run(tmp.path(), &["completions", "bash"]).stdout);
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p eve && COMP_WORDS=(eve sess); COMP_CWORD=1; \
             _eve eve sess eve && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("-F _eve eve"), "{text}");
    assert!(text.lines().any(|l| l == "sessions"), "{text}");
    let bad = run(tmp.path(), &["completions", "tcsh"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("possible values"), "{}", bad.stderr);
}

/// TypeScript tools run on Node's type stripping: `eve build` asks the Node on `PATH` its version
/// and says what to install when it is older than 22.6, instead of letting every call fail.
#[test]
fn a_typescript_tool_with_a_node_too_old_is_warned_at_build() {
    let (_tmp, project) = init_demo();
    std::fs::write(
        project.join("agent/tools/shout.ts"),
        "// ---\n// description: Shout.\n// input: {type: object}\n// ---\nconsole.log('HI');\n",
    )
    .unwrap();
    let bin = tempfile::tempdir().unwrap();
    let node = bin.path().join("node");
    let with_node = |version: &str| {
        std::fs::write(&node, format!("#!/bin/sh\necho {version}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", bin.path().display());
        let out = eve(&project)
            .args(["build", "--json"])
            .env("PATH", path)
            .output()
            .unwrap();
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        json["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["code"] == "W012")
            .map(|d| format!("{} {}", d["file"], d["message"]))
            .collect::<Vec<_>>()
    };
    let old = with_node("v20.20.2");
    assert_eq!(old.len(), 1, "{old:?}");
    assert!(old[0].contains("agent/tools/shout.ts"), "{old:?}");
    assert!(
        old[0].contains("Node 22.6 or later") && old[0].contains("v20.20"),
        "{old:?}"
    );
    assert_eq!(with_node("v22.12.0"), Vec::<String>::new());
    std::fs::remove_file(&node).unwrap();
    let missing = with_node_absent(&project);
    assert!(
        missing.iter().any(|m| m.contains("not on PATH")),
        "{missing:?}"
    );
}

fn with_node_absent(project: &Path) -> Vec<String> {
    let empty = tempfile::tempdir().unwrap();
    let out = eve(project)
        .args(["build", "--json"])
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "W012")
        .map(|d| d["message"].to_string())
        .collect()
}
