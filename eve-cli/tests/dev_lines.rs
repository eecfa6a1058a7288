//! What `eve dev` says while it runs, and the web console it serves: one line per turn and per
//! tool call (with the result or the error, and the time), the approval a turn waits on, the file
//! whose change caused a rebuild, a schedule fire; the console page and its read-only routes.

use std::time::Duration;

use serde_json::json;

use super::support_dev::{Project, Server, http};

const WAIT: Duration = Duration::from_secs(20);

fn project() -> Project {
    let project = Project::new();
    project.file("sandbox/sandbox.yaml", "provider: host\n");
    project.tool(
        "weather",
        "description: The weather.\neffect: read",
        "cat >/dev/null\necho '{\"sky\":\"clear\"}'\n",
    );
    project.tool(
        "flaky",
        "description: Always fails.\neffect: read",
        "cat >/dev/null\necho 'the upstream is down' >&2\nexit 1\n",
    );
    project.tool(
        "refund",
        "description: Refund.\napproval: always",
        "cat >/dev/null\necho refunded\n",
    );
    project.file(
        "schedules/digest.md",
        "---\ncron: \"0 3 * * *\"\ntimezone: UTC\n---\nWrite the digest.\n",
    );
    project
}

#[test]
fn dev_prints_a_line_per_turn_tool_call_approval_rebuild_and_schedule_fire() {
    let project = project();
    let mut dev = Server::start(project.eve(&["dev", "--port", "0"]));
    dev.wait_line(WAIT, |l| {
        l.starts_with("eve console: open http://127.0.0.1:")
    });

    // A tool that works: its line has the result and a time; then the turn's line.
    let (status, body) = dev.post("/eve/v1/session", &json!({"message": "/tool weather {}"}));
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let line = dev.wait_line(WAIT, |l| l.starts_with("tool ") && l.contains(" weather "));
    assert!(
        line.starts_with(&format!("tool {id} turn 0 weather ok in "))
            && line.ends_with(" ms: {\"sky\":\"clear\"}"),
        "{line}"
    );
    let line = dev.wait_line(WAIT, |l| l.starts_with("turn ") && l.contains(&id));
    assert!(
        line.starts_with(&format!("turn {id} turn 0 completed in "))
            && line.ends_with("(2 steps, 1 tool call)"),
        "{line}"
    );

    // A tool that fails: the error is on the line.
    let mark = dev.stderr().len();
    let (status, _) = dev.post(
        &format!("/eve/v1/session/{id}"),
        &json!({"message": "/tool flaky {}"}),
    );
    assert_eq!(status, 202);
    let line = dev.wait_line_after(mark, WAIT, |l| {
        l.starts_with("tool ") && l.contains(" flaky ")
    });
    assert!(
        line.starts_with(&format!("tool {id} turn 1 flaky failed after ")),
        "{line}"
    );
    assert!(line.contains("the upstream is down"), "{line}");
    let line = dev.wait_line_after(mark, WAIT, |l| l.starts_with("turn ") && l.contains(&id));
    assert!(line.contains("(2 steps, 1 tool call, 1 failed)"), "{line}");

    // An approval: the line says what waits and how to answer.
    let mark = dev.stderr().len();
    let (status, _) = dev.post(
        &format!("/eve/v1/session/{id}"),
        &json!({"message": "/tool refund {\"amount\": 5}"}),
    );
    assert_eq!(status, 202);
    let line = dev.wait_line_after(mark, WAIT, |l| l.starts_with("approval "));
    assert_eq!(
        line,
        format!(
            "approval {id} turn 2 waits for approval of refund {{\"amount\":5}} (answer in the \
             console or with `eve sessions approve {id}`)"
        )
    );

    // A changed file: the rebuild says which.
    let mark = dev.stderr().len();
    project.tool(
        "weather",
        "description: The weather, now with wind.\neffect: read",
        "cat >/dev/null\necho '{\"sky\":\"clear\",\"wind\":3}'\n",
    );
    let line = dev.wait_line_after(mark, WAIT, |l| l.contains(" changed"));
    assert_eq!(line, "eve dev: agent/tools/weather.sh changed");
    dev.wait_line_after(mark, WAIT, |l| l.starts_with("rebuilt in "));

    // A schedule fire (fire-now): its line names the schedule and the session.
    let mark = dev.stderr().len();
    let (status, body) = dev.post("/eve/v1/dev/schedules/digest", &json!({}));
    assert_eq!(status, 202, "{body}");
    let fired = body["sessionId"].as_str().unwrap();
    let line = dev.wait_line_after(mark, WAIT, |l| l.starts_with("schedule "));
    assert_eq!(line, format!("schedule digest fired: session {fired}"));
    dev.wait_line_after(mark, WAIT, |l| {
        l.starts_with(&format!("turn {fired} turn 0 completed in "))
    });
}

#[test]
fn dev_serves_the_console_and_its_routes() {
    let project = project();
    let dev = Server::start(project.eve(&["dev", "--port", "0"]));
    let (status, page) = http(dev.port, "GET", "/", None, None);
    assert_eq!(status, 200);
    assert!(page.contains("<title>eve console</title>"), "{page}");
    assert!(page.contains("/console/app.js"));
    let (status, script) = http(dev.port, "GET", "/console/app.js", None, None);
    assert_eq!(status, 200);
    // Every module the page's script imports is served.
    let mut modules: Vec<&str> = script
        .lines()
        .filter_map(|l| {
            l.strip_prefix("import ")?
                .split("from \"./")
                .nth(1)?
                .split('"')
                .next()
        })
        .collect();
    modules.sort_unstable();
    assert_eq!(
        modules,
        [
            "agent.js",
            "lib.js",
            "releases.js",
            "session.js",
            "sessions.js"
        ]
    );
    let mut all = String::new();
    for module in modules {
        let (status, text) = http(dev.port, "GET", &format!("/console/{module}"), None, None);
        assert_eq!(status, 200, "{module}");
        // The DOM's replaceChildren writes a `null` child as the text "null": the views go
        // through lib.js's fill(), which leaves it out.
        assert!(
            module == "lib.js" || !text.contains(".replaceChildren("),
            "{module} calls replaceChildren: use fill()"
        );
        all.push_str(&text);
    }
    assert!(all.contains("/eve/v1/sessions"));
    let (status, _) = http(dev.port, "GET", "/console/app.css", None, None);
    assert_eq!(status, 200);
    let (status, _) = http(dev.port, "GET", "/console/nope.js", None, None);
    assert_eq!(status, 404);

    let (status, body) = dev.post("/eve/v1/session", &json!({"message": "hello console"}));
    assert_eq!(status, 202);
    let id = body["sessionId"].as_str().unwrap().to_owned();
    super::support_dev::eventually(WAIT, "the turn ends", || {
        let (_, list) = dev.get("/eve/v1/sessions");
        let row = &list["sessions"][0];
        (row["status"] == "idle" && row["turns"] == 1 && row["events"].as_u64() > Some(3))
            .then_some(())
    });
    let (status, list) = dev.get(&format!("/eve/v1/sessions?prefix={}", &id[..12]));
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["sessions"][0]["id"], id.as_str());
    assert_eq!(list["sessions"][0]["firstMessage"], "hello console");
    let (status, list) = dev.get("/eve/v1/sessions?status=nope");
    assert_eq!(
        (status, list["code"].as_str()),
        (400, Some("invalid_query"))
    );
    let (status, one) = dev.get(&format!("/eve/v1/sessions/{id}"));
    assert_eq!(status, 200);
    assert_eq!(one["session"]["turns"], 1);
    let (status, _) = dev.get("/eve/v1/sessions/wrun_nope");
    assert_eq!(status, 404);

    let (status, agent) = dev.get("/eve/v1/agent");
    assert_eq!(status, 200, "{agent}");
    assert_eq!(agent["dev"], true);
    let refund = agent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "refund")
        .unwrap();
    assert_eq!(refund["approval"], "always");
    assert_eq!(refund["inputSchema"]["type"], "object");
    assert_eq!(refund["sandbox"]["provider"], "host");
    let digest = &agent["schedules"][0];
    assert_eq!(digest["name"], "digest");
    assert!(
        digest["nextFire"]
            .as_str()
            .is_some_and(|t| t.contains("T03:00:00")),
        "{digest}"
    );
    assert!(agent["diagnostics"].is_array());

    // `eve serve` serves the console only with --console.
    drop(dev);
    let serve = Server::start(project.eve(&["serve", "--port", "0"]));
    let (status, _) = http(serve.port, "GET", "/", None, None);
    assert_eq!(status, 404);
    drop(serve);
    let serve = Server::start(project.eve(&["serve", "--port", "0", "--console"]));
    let (status, page) = http(serve.port, "GET", "/", None, None);
    assert_eq!(status, 200);
    assert!(page.contains("eve console"));
}
