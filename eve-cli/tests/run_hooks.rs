//! Observe hooks of `eve run` turns, through the real binary: `eve run` delivers its turn's
//! events to the hooks before it exits (a hook is never killed half way through an event), a
//! wait cut at `EVE_HOOK_WAIT` is said on stderr and left to a server, and with a server
//! running on the same store every event reaches each hook once, whichever process delivers it.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support_dev::{Project, Server, eventually};
use crate::support_run::{Output, wait_output};

const LIMIT: Duration = Duration::from_secs(30);

/// A hook that logs `begin`, sleeps `HOOK_SLEEP` seconds, then logs the whole event: a `begin`
/// without its event after it is a hook killed half way.
const RECORD: &str = "input=$(cat)\necho begin >> \"$SIDE_FILE\"\nsleep \"${HOOK_SLEEP:-0}\"\n\
                      printf '%s\\n' \"$input\" >> \"$SIDE_FILE\"\n";

fn project(events: &str) -> Project {
    let p = Project::new();
    p.file("sandbox/sandbox.yaml", "provider: host\n");
    p.agent.script(
        "hooks/record.sh",
        &format!(
            "#!/bin/sh\n# ---\n# events: {events}\n# env: [SIDE_FILE, HOOK_SLEEP]\n# ---\n{RECORD}"
        ),
    );
    p.build();
    p
}

fn side(p: &Project) -> std::path::PathBuf {
    p.root().join("side.log")
}

/// `(begins, events delivered)` of the hook's log.
fn log(p: &Project) -> (usize, Vec<Value>) {
    let text = std::fs::read_to_string(side(p)).unwrap_or_default();
    let begins = text.lines().filter(|l| *l == "begin").count();
    let events = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (begins, events)
}

fn run(p: &Project, prompt: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = p.eve(&["run", prompt]);
    cmd.env("SIDE_FILE", side(p))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    wait_output(cmd.spawn().unwrap(), LIMIT)
}

/// `(session, type)` of every event the store holds of `kinds`.
fn stored(p: &Project, kinds: &[&str]) -> Vec<(String, String, String)> {
    let db = p.db();
    let mut stmt = db
        .prepare("SELECT session_id, id, type FROM events ORDER BY session_id, idx")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .filter(|(_, _, kind): &(String, String, String)| {
            kinds.is_empty() || kinds.contains(&kind.as_str())
        })
        .collect()
}

#[test]
fn eve_run_delivers_its_turns_hook_events_before_it_exits() {
    let p = project("[message.received, turn.completed]");
    let started = Instant::now();
    let out = run(&p, "hello", &[("HOOK_SLEEP", "1")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Read at once: nothing delivers after `eve run` is gone (no server here).
    let (begins, events) = log(&p);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["message.received", "turn.completed"],
        "every event of the turn reached the hook before `eve run` exited ({:?}): {}",
        started.elapsed(),
        out.stderr
    );
    assert_eq!(begins, 2, "no hook was killed half way through an event");
    let expected = stored(&p, &["message.received", "turn.completed"]);
    let ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        expected.iter().map(|e| e.1.as_str()).collect::<Vec<_>>()
    );
    assert!(
        !out.stderr.contains("not delivered"),
        "nothing was cut: {}",
        out.stderr
    );
    let behind = p.count(
        "SELECT COUNT(*) FROM hook_cursors c JOIN sessions s ON s.id = c.session_id \
         WHERE c.delivered < s.event_count",
    );
    assert_eq!(behind, 0, "the store says every event was acknowledged");
}

#[test]
fn a_cut_wait_is_said_and_a_server_delivers_the_rest_once() {
    let p = project("[message.received, turn.completed]");
    // The first event's hook takes 3 s; `eve run` waits 1 s, lets that event finish (never
    // killing the hook), then leaves the second to a server.
    let out = run(&p, "hello", &[("HOOK_SLEEP", "3"), ("EVE_HOOK_WAIT", "1")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let (begins, events) = log(&p);
    assert_eq!(begins, events.len(), "no hook killed half way: {events:?}");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "message.received");
    let stderr = out.stderr.replace('\n', " ");
    assert!(
        stderr.contains("not delivered")
            && stderr.contains("`record`")
            && stderr.contains("turn.completed")
            && stderr.contains("eve serve"),
        "the cut names what waits and who delivers it: {}",
        out.stderr
    );
    // A server started later on the store delivers the rest, once.
    let mut cmd = p.eve(&["serve", "--port", "0"]);
    cmd.env("SIDE_FILE", side(&p)).env("HOOK_SLEEP", "0");
    let server = Server::start(cmd);
    let events = eventually(LIMIT, "the server's delivery", || {
        let (_, events) = log(&p);
        (events.len() >= 2).then_some(events)
    });
    std::thread::sleep(Duration::from_millis(500));
    let (begins, again) = log(&p);
    assert_eq!(again.len(), 2, "each event once: {again:?}");
    assert_eq!(begins, 2);
    assert_eq!(events[1]["type"], "turn.completed");
    server.kill();
}

/// `eve serve` on the store while `runs` `eve run` turns run: `(events stored, times each event
/// id reached the hook, hook starts)`, once delivery has settled. `env` goes to every process.
fn race(runs: usize, env: &[(&str, &str)]) -> (usize, HashMap<String, usize>, usize) {
    let p = project("[\"*\"]");
    let mut cmd = p.eve(&["serve", "--port", "0"]);
    cmd.env("SIDE_FILE", side(&p));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let server = Server::start(cmd);
    // Both processes see every `eve run` commit: the server as another process's, `eve run` as
    // its own. Many turns, so the two race for deliveries many times.
    for i in 0..runs {
        let out = run(&p, &format!("hello {i}"), env);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let expected = stored(&p, &[]);
    eventually(LIMIT, "every event delivered", || {
        let (_, events) = log(&p);
        let ids: std::collections::HashSet<&str> =
            events.iter().filter_map(|e| e["id"].as_str()).collect();
        (ids.len() >= expected.len()).then_some(())
    });
    // Anything delivered twice would arrive now.
    std::thread::sleep(Duration::from_secs(1));
    let (begins, delivered) = log(&p);
    let mut times: HashMap<String, usize> = HashMap::new();
    for e in &delivered {
        *times
            .entry(e["id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    for (_, id, _) in &expected {
        assert!(times.contains_key(id), "event {id} was delivered");
    }
    server.kill();
    (expected.len(), times, begins)
}

#[test]
fn with_a_server_on_the_store_every_event_reaches_each_hook_once() {
    let runs = 8;
    let (stored, times, begins) = race(runs, &[("HOOK_SLEEP", "0.05")]);
    let deliveries: usize = times.values().sum();
    eprintln!("{runs} runs, {stored} events stored, {deliveries} deliveries");
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(deliveries, stored);
    assert_eq!(begins, stored);
}

/// The twin: without the delivery claim (the test-only switch), the same race delivers events
/// twice, so the test above would see it.
#[test]
fn without_the_delivery_claim_the_same_race_delivers_events_twice() {
    let runs = 8;
    let (stored, times, _) = race(
        runs,
        &[("HOOK_SLEEP", "0.05"), ("EVE_TEST_NO_HOOK_CLAIM", "1")],
    );
    let deliveries: usize = times.values().sum();
    let twice = times.values().filter(|n| **n > 1).count();
    eprintln!(
        "without the claim: {runs} runs, {stored} events stored, {deliveries} deliveries, \
         {twice} events delivered more than once"
    );
    assert!(twice > 0, "the race was never run into");
}
