//! Releases as a user drives them: real `eve build`, `eve activate`, `eve rollback` and
//! `eve releases` processes beside a real `eve serve` on `127.0.0.1:0`, sharing the project's
//! store. Under `activation: review` a widening build waits with exactly its delta; activation and
//! rollback reach the running server at once (idle sessions move at their next message, a busy
//! turn finishes on its own build); a gate refuses a build that fails its tagged evals unless
//! forced; a release whose tool always fails is rolled back by itself; the HTTP routes are behind
//! the API's auth and record the principal.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support_dev::{Project, Server, eventually, http, send};

const LIMIT: Duration = Duration::from_secs(30);

fn project(agent_yaml: &str) -> Project {
    let p = Project::new();
    p.file("agent.yaml", agent_yaml);
    p.file("sandbox/sandbox.yaml", "provider: host\n");
    p
}

fn out_json(cmd: &mut std::process::Command) -> (i32, Value, String) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), value, stderr)
}

fn releases(p: &Project) -> Vec<Value> {
    let (code, v, err) = out_json(&mut p.eve(&["releases", "--json"]));
    assert_eq!(code, 0, "{err}");
    v.as_array().unwrap().clone()
}

fn active(p: &Project) -> Value {
    releases(p)
        .into_iter()
        .find(|r| r["status"] == "active")
        .expect("an active release")
}

/// `(seq, build_hash, status)` of a session's turns.
fn turns(p: &Project, session: &str) -> Vec<(i64, String, String)> {
    let db = p.db();
    let mut stmt = db
        .prepare("SELECT seq, build_hash, status FROM turns WHERE session_id=?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Waits until the session has `n` completed turns; returns the build of the last.
fn completed_turn(p: &Project, session: &str, n: usize) -> String {
    eventually(LIMIT, "the turn to complete", || {
        let t = turns(p, session);
        (t.len() == n && t.iter().all(|(_, _, s)| s == "completed"))
            .then(|| t.last().map(|x| x.1.clone()).unwrap_or_default())
    })
}

fn new_session(server: &Server, message: &str) -> String {
    let (status, body) = server.post("/eve/v1/session", &json!({"message": message}));
    assert_eq!(status, 202, "{body}");
    body["sessionId"].as_str().unwrap().to_owned()
}

fn say(server: &Server, session: &str, message: &str) {
    let (status, body) = server.post(
        &format!("/eve/v1/session/{session}"),
        &json!({"message": message}),
    );
    assert_eq!(status, 202, "{body}");
}

fn serve(p: &Project) -> Server {
    let mut cmd = p.eve(&["serve", "--port", "0"]);
    cmd.env("GATE_FILE", p.root().join("gate"));
    Server::start(cmd)
}

const GATED: &str = "cat >/dev/null\nn=0\nwhile [ ! -e \"$GATE_FILE\" ] && [ $n -lt 1200 ]; do \
                     sleep 0.05; n=$((n+1)); done\necho '{\"gated\":\"done\"}'\n";

#[test]
fn review_parks_a_widening_build_and_activate_and_rollback_reach_a_running_server() {
    let p = project("default_tools: false\nactivation: review\n");
    p.tool(
        "notify",
        "description: Tells someone.\neffect: read\napproval: always\ninput:\n  type: object",
        "cat >/dev/null\necho sent\n",
    );
    p.tool(
        "gated",
        "description: Runs until the test opens the gate.\neffect: read\nenv: [GATE_FILE]\ninput:\n  type: object",
        GATED,
    );
    p.build();
    let v1 = active(&p);
    let v1_hash = v1["build_hash"].as_str().unwrap().to_owned();
    assert_eq!(releases(&p).len(), 1, "the first build activates");

    let server = serve(&p);
    let idle = new_session(&server, "hello");
    assert_eq!(completed_turn(&p, &idle, 1), v1_hash);
    // A turn that stays busy across both changes, on v1.
    let busy = new_session(&server, "/tool gated {}");
    eventually(LIMIT, "the busy turn's tool call", || {
        (p.count(&format!(
            "SELECT COUNT(*) FROM tool_calls WHERE session_id='{busy}' AND status='running'"
        )) == 1)
            .then_some(())
    });

    // v2: a new `write` tool, and `notify` loosened from `always` to `never`.
    p.tool(
        "notify",
        "description: Tells someone.\neffect: read\napproval: never\ninput:\n  type: object",
        "cat >/dev/null\necho sent\n",
    );
    p.tool(
        "deploy",
        "description: Deploys.\neffect: write\ninput:\n  type: object",
        "cat >/dev/null\necho deployed\n",
    );
    let out = p.eve(&["build"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "a pending build exits 0: {stderr}");
    let pending: Vec<Value> = releases(&p)
        .into_iter()
        .filter(|r| r["status"] == "pending")
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let v2 = &pending[0];
    let v2_id = v2["id"].as_str().unwrap();
    let v2_hash = v2["build_hash"].as_str().unwrap().to_owned();
    assert!(
        stderr.contains(&format!("eve activate {v2_id}")),
        "the exact command is printed: {stderr}"
    );
    let changes: Vec<(String, String, bool)> = v2["delta"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_owned(),
                c["subject"].as_str().unwrap().to_owned(),
                c["widening"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("tool_added".to_owned(), "deploy".to_owned(), true),
            ("approval_loosened".to_owned(), "notify".to_owned(), true),
            // The agent runs on the host (`provider: host`): `notify.sh`'s bytes changed.
            ("host_code_changed".to_owned(), "notify".to_owned(), true),
        ],
        "exactly the delta of the change"
    );
    assert!(stderr.contains("! tool_added deploy"), "{stderr}");
    assert!(
        stderr.contains("! approval_loosened notify: always -> never"),
        "{stderr}"
    );
    // `--json` reports the status and the delta too.
    let (code, built, _) = out_json(&mut p.eve(&["build", "--json"]));
    assert_eq!(code, 0);
    assert_eq!(built["release"]["status"], "pending");
    assert_eq!(built["release"]["id"], v2_id);
    assert_eq!(built["release"]["delta"], v2["delta"]);

    // Pending: the idle session stays on v1.
    say(&server, &idle, "still v1?");
    assert_eq!(completed_turn(&p, &idle, 2), v1_hash);

    // `eve activate`, another process: the running server takes it at the next message.
    let (code, activated, err) = out_json(&mut p.eve(&["activate", v2_id, "--json"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(activated["status"], "active");
    assert!(
        activated["activated_by"]
            .as_str()
            .unwrap()
            .starts_with("local:")
    );
    say(&server, &idle, "now v2");
    assert_eq!(completed_turn(&p, &idle, 3), v2_hash);

    // `eve rollback`: v1 again, in the same server, nothing rebuilt.
    let (code, rolled, err) = out_json(&mut p.eve(&["rollback", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(rolled["id"], v1["id"]);
    say(&server, &idle, "back to v1");
    assert_eq!(completed_turn(&p, &idle, 4), v1_hash);
    let statuses: Vec<(String, String)> = releases(&p)
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (v1["id"].as_str().unwrap().to_owned(), "active".to_owned()),
            (v2_id.to_owned(), "rolled_back".to_owned())
        ]
    );

    // The busy turn finished on the build it started on.
    std::fs::write(p.root().join("gate"), "").unwrap();
    assert_eq!(completed_turn(&p, &busy, 1), v1_hash);
    let (_, list) = server.get("/eve/v1/releases");
    assert_eq!(list["active"], v1["id"]);

    // The audit log has every step, in order.
    let out = p.eve(&["releases", "log", "--json"]).output().unwrap();
    let kinds: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "release.built",
            "release.activated",
            "release.built",
            "release.activated",
            "release.rolled_back"
        ]
    );
}

#[test]
fn a_gate_refuses_a_build_failing_its_tagged_eval_and_force_activates_it_recorded() {
    let p = project("default_tools: false\ngate: [smoke]\n");
    p.tool(
        "probe",
        "description: Says how it is.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho v1-ok\n",
    );
    std::fs::create_dir_all(p.root().join("evals")).unwrap();
    std::fs::write(
        p.root().join("evals/probe.yaml"),
        "id: works\ntags: [smoke]\nmessages: [\"/tool probe {}\"]\nexpect:\n  text: {contains: v1-ok}\n",
    )
    .unwrap();
    p.build();
    let v1 = active(&p);

    p.tool(
        "probe",
        "description: Says how it is.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho v2-broken\n",
    );
    let out = p.eve(&["build"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed gate refuses: {stderr}"
    );
    assert!(
        stderr.contains("probe/works"),
        "the failed case is named: {stderr}"
    );
    assert_eq!(active(&p)["id"], v1["id"], "v1 stays active");
    let rejected = releases(&p)
        .into_iter()
        .find(|r| r["status"] == "rejected")
        .expect("a rejected release");
    assert_eq!(rejected["checks"]["gate"]["cases"][0]["id"], "probe/works");
    assert_eq!(rejected["checks"]["gate"]["cases"][0]["result"], "failed");

    let (code, forced, err) = out_json(&mut p.eve(&["build", "--force", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(forced["release"]["status"], "active");
    assert_eq!(forced["release"]["checks"]["forced"], true);
    let now = active(&p);
    assert_eq!(now["build_hash"], rejected["build_hash"]);
    assert_eq!(now["checks"]["forced"], true, "the override is recorded");
    assert_eq!(now["checks"]["gate"]["cases"][0]["result"], "failed");
}

#[test]
fn a_release_whose_tool_always_fails_is_rolled_back_after_n_failed_turns() {
    let p = project("default_tools: false\n");
    p.tool(
        "flaky",
        "description: Works.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho fine\n",
    );
    p.build();
    let v1 = active(&p);
    let server = serve(&p);

    p.file(
        "agent.yaml",
        "default_tools: false\nrollback: {failures: 2, window: 10m}\n",
    );
    p.tool(
        "flaky",
        "description: Always fails.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho broken >&2\nexit 1\n",
    );
    p.build();
    let v2 = active(&p);
    assert_ne!(v2["id"], v1["id"]);
    let v2_hash = v2["build_hash"].as_str().unwrap().to_owned();

    let s = new_session(&server, "/tool flaky {}");
    assert_eq!(completed_turn(&p, &s, 1), v2_hash);
    say(&server, &s, "/tool flaky {}");
    assert_eq!(completed_turn(&p, &s, 2), v2_hash);
    let back = eventually(LIMIT, "the automatic rollback", || {
        let a = active(&p);
        (a["id"] == v1["id"]).then_some(a)
    });
    assert_eq!(back["id"], v1["id"]);
    let out = p.eve(&["releases", "log", "--json"]).output().unwrap();
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rolled = events
        .iter()
        .find(|e| e["type"] == "release.rolled_back")
        .expect("a release.rolled_back event");
    let data = &rolled["data"];
    assert_eq!(data["from"], v2["id"]);
    assert_eq!(data["releaseId"], v1["id"]);
    assert_eq!(data["automatic"], true);
    assert_eq!(data["failures"], 2);
    assert_eq!(data["windowMs"], 600_000);
    let reason = data["reason"].as_str().unwrap();
    assert!(
        reason.contains("2 failed turns")
            && reason.contains(v2["id"].as_str().unwrap())
            && reason.contains("10m"),
        "{reason}"
    );
    // The next message runs on v1 again.
    say(&server, &s, "hello");
    assert_eq!(
        completed_turn(&p, &s, 3),
        v1["build_hash"].as_str().unwrap()
    );
}

#[test]
fn release_routes_need_the_api_auth_and_record_the_principal() {
    let p = project("default_tools: false\n");
    p.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\"]\noperators:\n  tokens: [EVE_API_TOKEN]\n",
    );
    p.build();
    let v1 = active(&p);
    p.tool(
        "extra",
        "description: More.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho more\n",
    );
    p.build();
    let v2 = active(&p);
    let mut cmd = p.eve(&["serve", "--port", "0"]);
    cmd.env("EVE_API_TOKEN", "s3cret");
    let server = Server::start(cmd);

    let v1_id = v1["id"].as_str().unwrap();
    for (method, path) in [
        ("GET", "/eve/v1/releases".to_owned()),
        ("GET", format!("/eve/v1/releases/{v1_id}")),
        ("GET", "/eve/v1/releases/stream".to_owned()),
        ("POST", "/eve/v1/rollback".to_owned()),
        ("POST", format!("/eve/v1/releases/{v1_id}/activate")),
    ] {
        let (status, _) = http(server.port, method, &path, Some(&json!({})), None);
        assert_eq!(status, 401, "{method} {path} without auth");
        let (status, _) = http(server.port, method, &path, Some(&json!({})), Some("wrong"));
        assert_eq!(status, 401, "{method} {path} with a wrong token");
    }
    assert_eq!(active(&p)["id"], v2["id"], "nothing changed");

    // A live SSE stream sees what happens next, after what is stored, with its index.
    let stream = send(
        server.port,
        "GET",
        "/eve/v1/releases/stream",
        None,
        Some("s3cret"),
    );
    let mut reader = BufReader::new(stream);

    let (status, body) = http(
        server.port,
        "POST",
        "/eve/v1/rollback",
        Some(&json!({"reason": "checking the route"})),
        Some("s3cret"),
    );
    assert_eq!(status, 200, "{body}");
    let (_, shown) = http(
        server.port,
        "GET",
        &format!("/eve/v1/releases/{}", v1["id"].as_str().unwrap()),
        None,
        Some("s3cret"),
    );
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["release"]["status"], "active");
    assert_eq!(shown["release"]["activated_by"], "token:EVE_API_TOKEN");

    let (status, body) = http(
        server.port,
        "POST",
        &format!("/eve/v1/releases/{}/activate", v2["id"].as_str().unwrap()),
        None,
        Some("s3cret"),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(
        server.port,
        "POST",
        "/eve/v1/releases/rel_nope/activate",
        None,
        Some("s3cret"),
    );
    assert_eq!(status, 404, "{body}");

    // NDJSON (no `Accept: text/event-stream`): stored events, then live ones. Read until the
    // rollback and the activation by the token arrive.
    let deadline = Instant::now() + LIMIT;
    let mut seen: Vec<Value> = Vec::new();
    let mut line = String::new();
    while !(seen.iter().any(|e| e["type"] == "release.rolled_back")
        && seen.iter().any(|e| {
            e["type"] == "release.activated" && e["data"]["principal"] == "token:EVE_API_TOKEN"
        }))
    {
        assert!(
            Instant::now() < deadline,
            "the stream did not deliver: {seen:?}"
        );
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("the stream ended: {seen:?}");
        }
        // Chunk sizes and the header lines are not events.
        if let Ok(v) = serde_json::from_str::<Value>(line.trim())
            && v.get("type").is_some()
        {
            seen.push(v);
        }
    }
    let rolled = seen
        .iter()
        .find(|e| e["type"] == "release.rolled_back")
        .unwrap();
    assert_eq!(rolled["data"]["principal"], "token:EVE_API_TOKEN");
    assert_eq!(rolled["data"]["reason"], "checking the route");
    // No gap and no repeat: the ids are those of the stored log, in order.
    let out = p.eve(&["releases", "log", "--json"]).output().unwrap();
    let stored: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["meta"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let streamed: Vec<String> = seen
        .iter()
        .map(|e| e["meta"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(streamed, stored[..streamed.len()]);
    assert_eq!(streamed.len(), stored.len());

    // Server-Sent Events, resumed after event 1 with `Last-Event-ID`, ending after the stored
    // ones with `follow=false`: `id:` is each event's index, in order, none repeated.
    let mut sse = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    sse.set_read_timeout(Some(LIMIT)).unwrap();
    write!(
        sse,
        "GET /eve/v1/releases/stream?follow=false HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Connection: close\r\nAuthorization: Bearer s3cret\r\nAccept: text/event-stream\r\n\
         Last-Event-ID: 1\r\n\r\n"
    )
    .unwrap();
    let (status, body) = crate::support_dev::response(sse, Vec::new());
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("retry: 1000\n\n"), "{body}");
    let ids: Vec<u64> = body
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|i| i.parse().unwrap())
        .collect();
    assert_eq!(ids, (2..stored.len() as u64).collect::<Vec<_>>(), "{body}");
    let data: Vec<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| {
            serde_json::from_str::<Value>(d).unwrap()["meta"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(data, stored[2..]);
}

/// `eve run` exits right after its turn: its failed turns are counted in the store in the commit
/// that ends them, so three failing `eve run` turns are three failures, and the process that
/// reaches the threshold rolls back, an `eve run` as much as a server. With a server on the same
/// store, no turn is counted twice.
#[test]
fn failing_eve_run_turns_are_counted_in_the_store_whichever_process_ran_them() {
    let p = project("default_tools: false\n");
    p.tool(
        "flaky",
        "description: Works.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho fine\n",
    );
    p.build();
    let v1 = active(&p);
    p.file(
        "agent.yaml",
        "default_tools: false\nrollback: {failures: 3, window: 10m}\n",
    );
    p.tool(
        "flaky",
        "description: Always fails.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho broken >&2\nexit 1\n",
    );
    p.build();
    let v2 = active(&p);
    assert_ne!(v2["id"], v1["id"]);
    let failing_run = || {
        let out = p.eve(&["run", "/tool flaky {}"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let failures = |id: &Value| {
        releases(&p).into_iter().find(|r| r["id"] == *id).unwrap()["failures"]
            .as_u64()
            .unwrap()
    };
    failing_run();
    failing_run();
    assert_eq!(failures(&v2["id"]), 2, "each `eve run` turn counted");
    assert_eq!(active(&p)["id"], v2["id"]);
    // The third reaches the threshold in the `eve run` process itself.
    failing_run();
    assert_eq!(
        active(&p)["id"],
        v1["id"],
        "the `eve run` that reached the threshold rolled back before it exited"
    );
    let rolled_back = |p: &Project| -> Vec<Value> {
        let out = p.eve(&["releases", "log", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["type"] == "release.rolled_back")
            .collect()
    };
    let first = rolled_back(&p);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["data"]["failures"], 3);
    assert_eq!(first[0]["data"]["automatic"], true);

    // v2 again by hand, a server on the store: two `eve run` turns count two (the server does
    // not count them again), and the third, run by the server, rolls back there.
    let (code, _, err) = out_json(&mut p.eve(&["activate", v2["id"].as_str().unwrap(), "--json"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(failures(&v2["id"]), 0, "activation starts a new count");
    let server = serve(&p);
    failing_run();
    failing_run();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        failures(&v2["id"]),
        2,
        "counted once, with a server watching"
    );
    new_session(&server, "/tool flaky {}");
    eventually(LIMIT, "the server's automatic rollback", || {
        (active(&p)["id"] == v1["id"]).then_some(())
    });
    let all = rolled_back(&p);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1]["data"]["failures"], 3);
    assert_eq!(all[1]["data"]["from"], v2["id"]);
}

/// Several `eve run` processes fail at once past the threshold: each counts its own turn, and
/// exactly one of them rolls back (one process decides at a time, on the release as stored).
#[test]
fn concurrent_failing_runs_roll_back_once() {
    let p = project("default_tools: false\n");
    p.tool(
        "flaky",
        "description: Works.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho fine\n",
    );
    p.build();
    let v1 = active(&p);
    p.file(
        "agent.yaml",
        "default_tools: false\nrollback: {failures: 2, window: 10m}\n",
    );
    p.tool(
        "flaky",
        "description: Always fails.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\nsleep 0.2\necho broken >&2\nexit 1\n",
    );
    p.build();
    let v2 = active(&p);
    let runs = 6;
    std::thread::scope(|s| {
        for _ in 0..runs {
            s.spawn(|| {
                let out = p.eve(&["run", "/tool flaky {}"]).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            });
        }
    });
    let out = p.eve(&["releases", "log", "--json"]).output().unwrap();
    let rolled: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "release.rolled_back")
        .collect();
    let counted = releases(&p)
        .into_iter()
        .find(|r| r["id"] == v2["id"])
        .unwrap()["failures"]
        .as_u64()
        .unwrap();
    eprintln!(
        "{runs} concurrent failing runs: {counted} counted, {} rollbacks",
        rolled.len()
    );
    assert_eq!(rolled.len(), 1, "one rollback: {rolled:?}");
    assert_eq!(active(&p)["id"], v1["id"]);
    assert!(counted >= 2, "{counted}");
}
