//! `eve run` and `eve sessions` on the real binary: streaming, approvals, exit codes.

use serde_json::json;

use crate::support_run::*;

fn charge_tool() -> (&'static str, String) {
    (
        "charge",
        logging_tool("# description: Charge a card.\n", ""),
    )
}

fn refund_tool() -> (&'static str, String) {
    (
        "refund",
        logging_tool("# description: Refund a charge.\n# approval: once\n", ""),
    )
}

#[test]
fn run_streams_the_reply_to_stdout_and_tool_activity_to_stderr() {
    let p = RunProject::new(
        &[charge_tool()],
        json!([{"tool_calls": [{"name": "charge", "input": {"amount": 5}}]},
               {"text": "Charged five."}]),
    );
    let out = p.run(&["run", "charge 5"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "Charged five.\n");
    assert!(
        out.stderr.contains("→ charge {\"amount\":5}"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("← charge: ok"), "{}", out.stderr);
    assert!(out.stderr.contains("session wrun_"), "{}", out.stderr);
    assert_eq!(p.side_lines().len(), 2);
}

#[test]
fn run_json_prints_eve_events_and_continues_a_session() {
    let p = RunProject::new(&[], json!([{"text": "one"}, {"text": "two"}]));
    let out = p.run(&["run", "--json", "first"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let kinds = out.kinds();
    assert_eq!(kinds.first().unwrap(), "session.started");
    assert_eq!(kinds.last().unwrap(), "session.waiting");
    let id = p.session_id().unwrap();
    let out = p.run(&["run", "--json", "--session", &id, "second"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let events = out.events();
    assert_eq!(events[0]["type"], "turn.started");
    assert_eq!(events[0]["data"]["turnId"], "turn_1");
    assert!(events.iter().any(|e| e["data"]["message"] == "two"));
    assert!(
        events[0]["meta"]["id"]
            .as_str()
            .unwrap()
            .starts_with("evt_")
    );
}

#[test]
fn a_non_interactive_run_stops_at_an_approval_and_says_how_to_answer() {
    let p = RunProject::new(
        &[refund_tool()],
        json!([{"tool_calls": [{"name": "refund", "input": {"charge": "ch_1"}}]},
               {"text": "Refunded."}]),
    );
    let out = p.run(&["run", "refund ch_1"]);
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    let id = p.session_id().unwrap();
    assert!(
        out.stderr.contains(&format!("eve sessions approve {id}")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("eve run --session {id}")),
        "{}",
        out.stderr
    );
    assert!(p.side_lines().is_empty());

    let list = p.run(&["sessions", "list", "--json"]);
    let sessions: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(sessions[0]["id"], id.as_str());
    assert_eq!(sessions[0]["status"], "waiting");

    let show = p.run(&["sessions", "show", &id, "--json"]);
    let report: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(report["inputRequests"][0]["status"], "pending");

    let approve = p.run(&["sessions", "approve", &id]);
    assert_eq!(approve.code, Some(0), "{}", approve.stderr);
    // `eve sessions approve` answers as the local principal, in the store and the event.
    assert_eq!(p.strings("SELECT responder FROM input_requests"), ["local"]);
    let settled = p.strings("SELECT data FROM events WHERE type = 'approval.settled'");
    let settled: serde_json::Value = serde_json::from_str(&settled[0]).unwrap();
    assert_eq!(settled["responderPrincipalId"], "local");
    // A second answer does not count: it is told which answer did.
    let request = p.strings("SELECT id FROM input_requests").remove(0);
    let late = p.run(&["sessions", "deny", &id, &request]);
    assert_ne!(late.code, Some(0), "{}", late.stderr);
    assert!(
        late.stderr.contains(&format!(
            "`{request}` was already answered: approved by local"
        )),
        "{}",
        late.stderr
    );
    assert_eq!(
        p.strings("SELECT id FROM events WHERE type = 'approval.settled'")
            .len(),
        1
    );
    let out = p.run(&["run", "--session", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "Refunded.\n");
    assert_eq!(p.side_lines().len(), 2);
}

/// `eve sessions approve` and `deny` run at once from several processes on one store: exactly
/// one answer counts (the store's compare-and-set), every other process is told which did.
#[test]
fn answers_from_several_processes_count_once() {
    let p = RunProject::new(
        &[refund_tool()],
        json!([{"tool_calls": [{"name": "refund", "input": {"charge": "ch_1"}}]},
               {"text": "Done."}]),
    );
    assert_eq!(p.run(&["run", "refund ch_1"]).code, Some(3));
    let id = p.session_id().unwrap();
    let request = p.strings("SELECT id FROM input_requests").remove(0);
    let outs: Vec<_> = std::thread::scope(|scope| {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (p, id, request) = (&p, &id, &request);
                scope.spawn(move || {
                    let verb = if i % 2 == 0 { "approve" } else { "deny" };
                    p.run(&["sessions", verb, id, request])
                })
            })
            .collect();
        tasks.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let won = outs.iter().filter(|o| o.code == Some(0)).count();
    eprintln!("8 processes answered one request at once; {won} counted");
    assert_eq!(
        won,
        1,
        "{:#?}",
        outs.iter().map(|o| &o.stderr).collect::<Vec<_>>()
    );
    for lost in outs.iter().filter(|o| o.code != Some(0)) {
        assert!(
            lost.stderr.contains("was already answered"),
            "{}",
            lost.stderr
        );
    }
    assert_eq!(
        p.strings("SELECT id FROM events WHERE type = 'approval.settled'")
            .len(),
        1
    );
}

#[test]
fn yes_approves_and_deny_reaches_the_model() {
    let p = RunProject::new(
        &[refund_tool()],
        json!([{"tool_calls": [{"name": "refund", "input": {}}]}, {"text": "ok"}]),
    );
    let out = p.run(&["run", "--yes", "refund"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(p.side_lines().len(), 2);

    let p = RunProject::new(
        &[refund_tool()],
        json!([{"tool_calls": [{"name": "refund", "input": {}}]}, {"text": "not done"}]),
    );
    assert_eq!(p.run(&["run", "refund"]).code, Some(3));
    let id = p.session_id().unwrap();
    let deny = p.run(&["sessions", "deny", &id, "--reason", "not allowed"]);
    assert_eq!(deny.code, Some(0), "{}", deny.stderr);
    let out = p.run(&["run", "--session", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("denied"), "{}", out.stderr);
    assert!(p.side_lines().is_empty());
    let statuses = p.strings("SELECT status FROM tool_calls");
    assert_eq!(statuses, ["denied"]);
}

#[test]
fn a_failed_turn_exits_non_zero() {
    let p = RunProject::new(&[], json!([{"error": "the model is down"}]));
    let out = p.run(&["run", "hi"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("the model is down"), "{}", out.stderr);
}

#[test]
fn run_without_prompt_or_session_is_a_usage_error() {
    let p = RunProject::new(&[], json!([]));
    let out = p.run(&["run"]);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("--session"), "{}", out.stderr);
    let out = p.run(&["run", "--session", "wrun_nope"]);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("no session"), "{}", out.stderr);
}

/// An MCP connection that cannot start is said on stderr, with its file and the cause, once per
/// run (the model is told too, in the failed call's result).
#[test]
fn a_connection_that_cannot_start_is_said_where_the_user_is() {
    let p = RunProject::new(
        &[],
        json!([
            {"tool_calls": [{"name": "gh__list", "input": {}}]},
            {"tool_calls": [{"name": "gh__list", "input": {}}]},
            {"text": "GitHub is not reachable."}
        ]),
    );
    p.agent
        .file("connections/gh.yaml", "command: /nonexistent/mcp-server\n");
    let out = p.run(&["run", "list my repositories"]);
    let stderr = &out.stderr;
    assert_eq!(out.code, Some(0), "{stderr}");
    let warning = "warning: the MCP connection `gh` (agent/connections/gh.yaml) is down";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    assert!(stderr.contains("/nonexistent/mcp-server"), "{stderr}");
    assert!(stderr.contains("No such file"), "{stderr}");
}

/// Warnings do not stop `eve run`; one line says how many there are and where to read them.
#[test]
fn build_warnings_are_counted_before_a_run() {
    let p = RunProject::new(&[], json!([{"text": "hello"}]));
    p.agent.file("widgets/a.md", "x\n");
    let out = p.run(&["run", "hi"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("warning: the agent built with 2 warnings (`eve build` shows them)"),
        "{}",
        out.stderr
    );
}

/// The shipped binary confines `bash` (through the `eve-sandbox-helper` installed next to it):
/// the model's command cannot read the store, the agent folder or `/etc/shadow`; the same
/// attack under `provider: host` reads them, so the test can fail.
#[test]
fn the_shipped_binary_confines_bash_and_host_does_not() {
    let helper = std::path::Path::new(EVE).with_file_name("eve-sandbox-helper");
    assert!(helper.is_file(), "{} is built with eve", helper.display());
    let attack = "head -c 15 \"$STORE\"; echo; cat \"$AGENT/instructions.md\"; head -c 5 /etc/shadow; echo; echo the-command-ran";
    let leaked = |provider: &str| {
        // The script is set below, once the project's paths are known.
        let p = RunProject::new(&[], json!([]));
        let root = p.root().to_path_buf();
        let command = attack
            .replace("$STORE", &root.join(".eve/eve.db").display().to_string())
            .replace("$AGENT", &root.join("agent").display().to_string());
        let script = json!([{"tool_calls": [{"name": "bash", "input": {"command": command}}]},
                            {"text": "done"}]);
        p.agent.file("agent.yaml", "default_tools: true\n");
        p.agent
            .file("instructions.md", "The instructions are private.\n");
        p.agent
            .file("sandbox/sandbox.yaml", &format!("provider: {provider}\n"));
        let out = p
            .eve(&["run", "--json", "go"])
            .env("EVE_MOCK_SCRIPT", script.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.contains("action.result"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            stdout.contains("SQLite format 3"),
            stdout.contains("The instructions are private."),
            stdout.contains("root:"),
        )
    };
    assert_eq!(leaked("isolated"), (false, false, false), "isolated");
    assert_eq!(leaked("host"), (true, true, true), "host reads all three");
}
