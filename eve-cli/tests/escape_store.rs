//! Class 10 of the trust boundary through the real binary: `rm .eve/eve.db*` beside session
//! workspaces (start refused; a truly fresh project starts), bytes flipped inside one page of a
//! session's events (`eve serve` answers an error and logs it; a direct read shows the damage is
//! real), and `eve store check` (exit 1 on the damage, 0 on a healthy store).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support_dev::{Project, Server};
use crate::support_run::{Output, RunProject, logging_tool, wait_output};

/// `eve ARGS` in `p` with `env` set, to completion.
fn run_with_env(p: &RunProject, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = p.eve(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(30))
}

/// A project whose tool writes a file into its workspace, run once.
fn project_with_history() -> RunProject {
    let p = RunProject::new(
        &[(
            "note",
            logging_tool(
                "# description: Writes a note.\n",
                "cd \"$EVE_WORKSPACE\" && echo hi > note.txt",
            ),
        )],
        json!([{"tool_calls": [{"name": "note", "input": {}}]}, {"text": "Noted."},
               {"text": "Again."}]),
    );
    let out = p.run(&["run", "write a note"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    p
}

/// What `rm .eve/eve.db*` removes: the database, its write-ahead log and index, its mark.
fn remove_store_files(root: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(root.join(".eve")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("eve.db") {
            std::fs::remove_file(entry.path()).unwrap();
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

#[test]
fn a_store_deleted_beside_session_workspaces_is_refused_and_a_fresh_project_starts() {
    let p = project_with_history();
    let sandboxes = std::fs::read_dir(p.root().join(".eve/sandboxes"))
        .unwrap()
        .count();
    assert_eq!(sandboxes, 1);
    let removed = remove_store_files(p.root());
    assert!(
        removed.contains(&"eve.db".to_owned()) && removed.contains(&"eve.db.mark".to_owned()),
        "{removed:?}"
    );

    for args in [
        &["run", "again"][..],
        &["serve", "--port", "0"],
        &["sessions", "list"],
    ] {
        let out = p.run(args);
        assert_ne!(out.code, Some(0), "{args:?} started: {}", out.stderr);
        for said in [
            ".eve/eve.db",
            "1 session workspace under",
            "eve store check",
            "EVE_NEW_STORE=1",
            "restore the store from your backup",
        ] {
            assert!(
                out.stderr.contains(said),
                "{args:?}: {said}: {}",
                out.stderr
            );
        }
        assert!(
            !p.root().join(".eve/eve.db").exists(),
            "{args:?} left an empty store behind"
        );
    }
    // `eve store check` says the same, and fails.
    let out = p.run(&["store", "check"]);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("is missing"), "{}", out.stdout);
    assert!(out.stdout.contains("1 session workspace"), "{}", out.stdout);

    // Asked for on purpose, an empty store starts (and the start says what it left behind).
    let out = run_with_env(&p, &["run", "again"], &[("EVE_NEW_STORE", "1")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("EVE_NEW_STORE=1: starting an empty store at"),
        "{}",
        out.stderr
    );
    // From then on it is the project's store: no flag needed.
    let out = p.run(&["run", "once more"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    // The twin: a truly fresh project (nothing beside the store) starts without a word.
    let fresh = RunProject::new(&[], json!([{"text": "Hello."}]));
    let out = fresh.run(&["run", "hello"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        !out.stderr.contains("empty store") && !out.stderr.contains("restore"),
        "{}",
        out.stderr
    );
}

/// Flips 16 bytes inside the data of event `index` of `session` in the database file (the
/// write-ahead log folded in first); returns nothing when done, panics when no copy of the row
/// in the file is the one SQLite reads.
fn damage_event(db: &Path, session: &str, index: i64) {
    let read = || -> rusqlite::Result<String> {
        let conn = rusqlite::Connection::open(db)?;
        conn.query_row(
            "SELECT data FROM events WHERE session_id = ?1 AND idx = ?2",
            rusqlite::params![session, index],
            |r| r.get(0),
        )
    };
    let conn = rusqlite::Connection::open(db).unwrap();
    let (id, kind): (String, String) = conn
        .query_row(
            "SELECT id, type FROM events WHERE session_id = ?1 AND idx = ?2",
            rusqlite::params![session, index],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let clean = std::fs::read(db).unwrap();
    let needle = format!("{id}{kind}");
    let found: Vec<usize> = clean
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle.as_bytes())
        .map(|(i, _)| i + needle.len())
        .collect();
    for start in found {
        assert_eq!(
            start / 4096,
            (start + 15) / 4096,
            "16 bytes inside one page"
        );
        let mut bytes = clean.clone();
        for b in &mut bytes[start..start + 16] {
            *b ^= 0xFF;
        }
        std::fs::write(db, &bytes).unwrap();
        if read().is_err() {
            return;
        }
    }
    panic!("no copy of event {index} in the file is the one SQLite reads");
}

#[test]
fn a_damaged_page_is_an_error_the_client_and_the_log_see_and_store_check_finds_it() {
    let p = Project::new();
    p.build();
    let out = p.eve(&["run", "hello there"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session: String = p
        .db()
        .query_row("SELECT id FROM sessions", [], |r| r.get(0))
        .unwrap();

    // A healthy store passes the full check.
    let check = p.eve(&["store", "check"]).output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{text}");
    assert!(text.contains("No problems found."), "{text}");
    let check = p.eve(&["store", "check", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["backend"], "sqlite");

    let db = p.path(".eve/eve.db");
    damage_event(&db, &session, 2);
    {
        // The twin: the damage is real (a direct read of the row fails), and SQLite's quick
        // check, what eve runs at start, does not see it.
        let conn = rusqlite::Connection::open(&db).unwrap();
        let read: rusqlite::Result<String> = conn.query_row(
            "SELECT data FROM events WHERE session_id = ?1 AND idx = 2",
            [&session],
            |r| r.get(0),
        );
        assert!(read.is_err(), "{read:?}");
        let quick: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(quick, "ok");
    }

    // `eve store check` finds it: exit 1, naming the session and the event.
    let check = p.eve(&["store", "check"]).output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "session {session}: events: index 2 cannot be read"
        )),
        "{text}"
    );
    let check = p.eve(&["store", "check", "--json"]).output().unwrap();
    assert_eq!(check.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(report["ok"], false, "{report}");

    // The server starts (the damage passes the start check) and says what it cannot read.
    let mut server = Server::start(p.eve(&["serve", "--port", "0"]));
    for query in ["?follow=false", ""] {
        let (status, body) = server.get(&format!("/eve/v1/session/{session}/stream{query}"));
        assert_eq!(status, 500, "{query}: {body}");
        assert_eq!(body["code"], "store_damaged", "{body}");
        assert_eq!(body["ok"], false, "{body}");
    }
    let line = server.wait_line(Duration::from_secs(10), |l| {
        l.contains("ERROR") && l.contains("damaged storage")
    });
    assert!(
        line.contains("malformed") || line.contains("utf-8"),
        "{line}"
    );
    // Reading past the damage still works.
    let tail = server.stream(&session, "?follow=false&startIndex=3");
    assert!(!tail.is_empty());
    server.stop();
}
