//! Memory the agent writes itself, and the environment probe. A note written in one session is
//! pinned into the system prompt of the next (agent scope), only for the same user (user scope),
//! and survives a restart; the cap trims the oldest notes with an event; near a full context the
//! model is offered one step to save what matters, once, before compaction. The probe runs in the
//! sandbox at the session's start, shows the programs found and a bounded workspace listing, and
//! a resumed session sees the identical text.

use eve_compile::{Memory, MemoryScope, Probe};
use eve_runtime::engine::{Accept, DriveOutcome, Extra, Runtime, SessionRef};
use eve_runtime::store::{CallStatus, StoredEvent};
use serde_json::{Value, json};

use crate::engine_support::*;

fn memory_agent(scopes: &[MemoryScope], max_chars: u64, save_at: f64) -> eve_compile::Agent {
    let mut a = agent();
    a.config.memory = Some(Memory {
        scopes: scopes.to_vec(),
        max_chars,
        save_at,
    });
    a
}

fn remember(scope: &str, text: &str) -> Value {
    json!({"tool_calls": [{"name": "memory", "input": {"action": "add", "scope": scope, "text": text}}]})
}

/// A new session whose first message comes from `sender` (or nobody).
async fn session_from(rt: &Runtime, sender: Option<&str>, text: &str) -> String {
    rt.accept(Accept {
        session: SessionRef::new_session(None),
        message: Some(text.to_owned()),
        extra: sender
            .map(|s| Extra::Sender(s.to_owned()))
            .into_iter()
            .collect(),
    })
    .await
    .unwrap()
    .unwrap()
    .session
}

fn systems(requests: &Requests) -> Vec<String> {
    requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.system.clone())
        .collect()
}

fn of_kind<'a>(events: &'a [StoredEvent], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| &e.data)
        .collect()
}

#[tokio::test]
async fn an_agent_note_reaches_the_next_session_and_survives_a_restart() {
    let p = TestProject::new();
    p.write_build(&memory_agent(&[MemoryScope::Agent], 4000, 0.75), &[]);
    let (rt, requests) = recording_runtime(
        &p,
        json!([remember("agent", "The deploy runbook is docs/deploy.md"), {"text": "saved"}]),
    );
    let a = session_from(&rt, None, "remember where the runbook is").await;
    assert_eq!(rt.drive(&a).await.unwrap(), DriveOutcome::Idle);
    let calls = rt.store().tool_calls(&a, 0).await.unwrap();
    assert_eq!(
        calls[0].status,
        CallStatus::Completed,
        "{:?}",
        calls[0].output
    );
    let events = all_events(&rt, &a).await;
    let written = of_kind(&events, "memory.written");
    assert_eq!(written.len(), 1);
    assert_eq!(written[0]["scope"], "agent");
    assert_eq!(written[0]["action"], "add");
    // The step after the write already shows the note; the first did not.
    let seen = systems(&requests);
    assert!(!seen[0].contains("deploy runbook"));
    assert!(
        seen[1].contains("<memory>")
            && seen[1].contains("[n1] The deploy runbook is docs/deploy.md")
    );
    // The memory tool is offered, with its scopes.
    let offered = requests.lock().unwrap()[0].tools.clone();
    let memory = offered
        .iter()
        .find(|t| t.name == "memory")
        .expect("memory offered");
    assert_eq!(
        memory.input_schema["properties"]["scope"]["enum"],
        json!(["agent"])
    );
    drop(rt);

    // A restarted runtime, another session: the note is pinned into its first prompt.
    let (rt, requests) = recording_runtime(&p, json!([{"text": "hello"}]));
    let b = session_from(&rt, None, "where is the runbook?").await;
    assert_eq!(rt.drive(&b).await.unwrap(), DriveOutcome::Idle);
    assert!(systems(&requests)[0].contains("The deploy runbook is docs/deploy.md"));
}

#[tokio::test]
async fn a_user_note_is_seen_only_by_the_same_user() {
    let p = TestProject::new();
    p.write_build(
        &memory_agent(&[MemoryScope::Agent, MemoryScope::User], 4000, 0.75),
        &[],
    );
    let (rt, _) = recording_runtime(
        &p,
        json!([remember("user", "Alice prefers answers in French"), {"text": "noted"}]),
    );
    let a = session_from(&rt, Some("token:ALICE"), "I prefer French").await;
    assert_eq!(rt.drive(&a).await.unwrap(), DriveOutcome::Idle);
    let calls = rt.store().tool_calls(&a, 0).await.unwrap();
    assert_eq!(
        calls[0].status,
        CallStatus::Completed,
        "{:?}",
        calls[0].output
    );
    drop(rt);

    for (sender, sees) in [
        (Some("token:BOB"), false),
        (None, false),
        (Some("token:ALICE"), true),
    ] {
        let (rt, requests) = recording_runtime(&p, json!([{"text": "hello"}]));
        let s = session_from(&rt, sender, "hi").await;
        assert_eq!(rt.drive(&s).await.unwrap(), DriveOutcome::Idle);
        assert_eq!(
            systems(&requests)[0].contains("Alice prefers answers in French"),
            sees,
            "sender {sender:?}"
        );
    }

    // Without a known sender the user scope is refused, saying why.
    let (rt, _) = recording_runtime(&p, json!([remember("user", "x"), {"text": "ok"}]));
    let s = session_from(&rt, None, "hi").await;
    assert_eq!(rt.drive(&s).await.unwrap(), DriveOutcome::Idle);
    let calls = rt.store().tool_calls(&s, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Failed);
    assert!(
        calls[0]
            .output
            .as_ref()
            .unwrap()
            .to_string()
            .contains("without an identity"),
        "{:?}",
        calls[0].output
    );
}

#[tokio::test]
async fn the_cap_trims_the_oldest_notes_with_an_event() {
    let p = TestProject::new();
    p.write_build(&memory_agent(&[MemoryScope::Session], 40, 0.75), &[]);
    let (rt, requests) = recording_runtime(
        &p,
        json!([
            remember("session", "first note, twenty ch"),
            remember("session", "second note, twenty c"),
            {"text": "done"}
        ]),
    );
    let s = session_from(&rt, None, "take notes").await;
    assert_eq!(rt.drive(&s).await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &s).await;
    let trimmed = of_kind(&events, "memory.trimmed");
    assert_eq!(trimmed.len(), 1, "{:?}", kinds(&events));
    assert_eq!(trimmed[0]["removed"], json!(["n1"]));
    assert_eq!(trimmed[0]["scope"], "session");
    let last = systems(&requests).pop().unwrap();
    assert!(
        last.contains("[n2] second note") && !last.contains("first note"),
        "{last}"
    );
    let calls = rt.store().tool_calls(&s, 0).await.unwrap();
    assert!(
        calls[1]
            .output
            .as_ref()
            .unwrap()
            .to_string()
            .contains("oldest notes were removed: n1")
    );
}

#[tokio::test]
async fn near_a_full_context_the_save_step_comes_once_before_compaction() {
    let p = TestProject::new();
    p.write_build(&memory_agent(&[MemoryScope::Agent], 4000, 0.5), &[]);
    let (rt, requests) = recording_runtime_with(
        &p,
        json!([
            remember("agent", "the customer is on the enterprise plan"),
            {"text": "ok"},
            {"text": "A summary of the conversation."}
        ]),
        Some(1_000),
    );
    // About 600 tokens of a 1,000-token window: past `save_at` (0.5), short of compaction (0.8).
    let s = session_from(&rt, None, &"enterprise plan details ".repeat(100)).await;
    assert_eq!(rt.drive(&s).await.unwrap(), DriveOutcome::Idle);
    // Past the compaction threshold: compacts, without a second offer.
    rt.post_message(&s, &"more details here ".repeat(60))
        .await
        .unwrap();
    assert_eq!(rt.drive(&s).await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &s).await;
    let k = kinds(&events);
    let offered: Vec<usize> = k
        .iter()
        .enumerate()
        .filter(|(_, t)| *t == "memory.save_offered")
        .map(|(i, _)| i)
        .collect();
    let compacted = k
        .iter()
        .position(|t| t == "compaction.completed")
        .expect("the second turn compacts");
    // Offered once in the first context (not again at the compaction), and at most once in the
    // new context the summary starts.
    assert_eq!(
        offered.iter().filter(|i| **i < compacted).count(),
        1,
        "{k:?}"
    );
    assert!(
        offered.iter().filter(|i| **i > compacted).count() <= 1,
        "{k:?}"
    );
    assert!(k[compacted - 1] != "memory.save_offered", "{k:?}");
    let nudged = systems(&requests)
        .iter()
        .filter(|s| s.contains("<context-nearly-full>"))
        .count();
    assert_eq!(nudged, offered.len(), "one nudged model call per offer");
    // The step that got the offer saved a note before the summary replaced the messages.
    let first_write = k.iter().position(|t| t == "memory.written").unwrap();
    assert!(offered[0] < first_write && first_write < compacted, "{k:?}");
}

fn probe_agent() -> eve_compile::Agent {
    let mut a = agent();
    a.config.probe = Some(Probe {
        programs: vec!["sh".into(), "no-such-program-xyz".into()],
        listing: true,
    });
    a
}

#[tokio::test]
async fn the_probe_shows_the_sandbox_and_a_resume_sees_the_same_text() {
    let p = TestProject::new();
    p.write_build(&probe_agent(), &[]);
    let (rt, requests) = recording_runtime(&p, json!([{"text": "hello"}]));
    let s = session_from(&rt, None, "what is here?").await;
    // The session's workspace, with more entries than the listing shows.
    let workspace = p.state_dir.join("sandboxes").join(&s);
    std::fs::create_dir_all(&workspace).unwrap();
    for i in 0..150 {
        std::fs::write(workspace.join(format!("report_{i:03}.txt")), "x").unwrap();
    }
    assert_eq!(rt.drive(&s).await.unwrap(), DriveOutcome::Idle);
    let first = systems(&requests).remove(0);
    let block = first
        .split("<environment>")
        .nth(1)
        .and_then(|b| b.split("</environment>").next())
        .unwrap_or_else(|| panic!("no environment block: {first}"));
    assert!(block.contains("OS: "), "{block}");
    // Today's date, as the box's clock and `TZ` give it.
    let today = std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .unwrap();
    let today = String::from_utf8_lossy(&today.stdout).trim().to_owned();
    assert!(block.contains(&format!("Date: {today} (")), "{block}");
    assert!(block.contains("- sh: "), "{block}");
    assert!(
        block.contains("Not installed: no-such-program-xyz"),
        "{block}"
    );
    assert!(block.contains("Workspace (150 entries)"), "{block}");
    assert!(block.contains("report_000.txt"), "{block}");
    assert!(block.contains("[50 more not listed]"), "{block}");
    assert!(block.chars().count() < 4_000, "bounded: {}", block.len());
    let events = all_events(&rt, &s).await;
    assert_eq!(of_kind(&events, "session.probed").len(), 1);
    drop(rt);

    // Resumed by another runtime, with the workspace changed: the same text, not probed again.
    std::fs::write(workspace.join("new_file.txt"), "y").unwrap();
    let (rt, requests) = recording_runtime(&p, json!([{"text": "again"}]));
    rt.post_message(&s, "and now?").await.unwrap();
    assert_eq!(rt.drive(&s).await.unwrap(), DriveOutcome::Idle);
    let again = systems(&requests).remove(0);
    assert_eq!(
        again.split("<environment>").nth(1),
        first.split("<environment>").nth(1)
    );
    assert_eq!(
        of_kind(&all_events(&rt, &s).await, "session.probed").len(),
        1
    );
}
