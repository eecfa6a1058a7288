//! eve's stream control (`?streamControlVersion=1`) through the real server: an NDJSON follow
//! sends heartbeat lines while quiet and ends its lease with eve's control line; a client that
//! reconnects from its cursor then reads every event once. Without the parameter (the twin) the
//! stream neither beats nor ends.

use std::time::{Duration, Instant};

use eve_test_support::capture::parse_ndjson;
use serde_json::json;

use super::server_support::{AgentDir, TestServer};

const LEASE_ENDED: &str = r#"{"$eve":"stream.lease-ended","version":1}"#;

async fn server_with_lease(lease: Duration) -> TestServer {
    TestServer::start_with(AgentDir::standard(), &[], move |mut c| {
        c.stream_lease = lease;
        c
    })
    .await
}

#[tokio::test]
async fn a_controlled_follow_beats_and_ends_its_lease_with_the_control_line() {
    let server = server_with_lease(Duration::from_millis(1500)).await;
    let id = server.create("hello").await;
    let n = server.until_rest(&id, 0).await.len();

    // At rest, under control: blank heartbeat lines, then the control line, then the end.
    let started = Instant::now();
    let response = server
        .stream_response(&id, &format!("?startIndex={n}&streamControlVersion=1"))
        .await;
    assert_eq!(response.headers()["x-eve-stream-version"], "26");
    let text = tokio::time::timeout(Duration::from_secs(10), response.text())
        .await
        .expect("the lease ends the stream")
        .unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1400) && elapsed < Duration::from_secs(8),
        "{elapsed:?}"
    );
    let lines: Vec<&str> = text.split('\n').collect();
    assert_eq!(lines.last(), Some(&""), "{text:?}");
    assert_eq!(lines[lines.len() - 2], LEASE_ENDED, "{text:?}");
    let blanks = lines[..lines.len() - 2]
        .iter()
        .filter(|l| l.is_empty())
        .count();
    assert!(blanks >= 3, "the opening line and heartbeats: {text:?}");
    assert!(
        lines[..lines.len() - 2].iter().all(|l| l.is_empty()),
        "{text:?}"
    );

    // The twin: the same follow without stream control stays open, silent after its first line.
    let response = server
        .stream_response(&id, &format!("?startIndex={n}"))
        .await;
    let reader = tokio::spawn(async move { response.text().await });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!reader.is_finished(), "an uncontrolled follow has no lease");
    server.shutdown.cancel();
    let text = reader.await.unwrap().unwrap();
    assert_eq!(text, "\n");
}

#[tokio::test]
async fn a_client_reconnecting_at_each_lease_end_reads_every_event_once() {
    let agent = AgentDir::standard();
    // A turn that outlives a lease: the tool takes two seconds.
    agent.tool(
        "slow",
        "description: Takes two seconds.\neffect: read",
        "cat >/dev/null\nsleep 2\necho '{\"done\": true}'\n",
    );
    let server = TestServer::start_with(agent, &[], |mut c| {
        c.stream_lease = Duration::from_millis(700);
        c
    })
    .await;
    let (status, body) = server
        .post("/eve/v1/session", json!({"message": "/tool slow {}"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();

    // Reconnect from the cursor after each lease end, as eve's client does.
    let mut events = Vec::new();
    let mut leases = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "{events:?}");
        let response = server
            .stream_response(
                &id,
                &format!("?startIndex={}&streamControlVersion=1", events.len()),
            )
            .await;
        let text = response.text().await.unwrap();
        let ended = text.trim_end().ends_with(LEASE_ENDED);
        let body = text.replace(LEASE_ENDED, "");
        events.extend(parse_ndjson(&body));
        if ended {
            leases += 1;
            continue;
        }
        break;
    }
    assert!(leases >= 1, "the turn outlived at least one lease");
    assert_eq!(events.last().unwrap()["type"], "session.waiting");
    let ids: Vec<&str> = events
        .iter()
        .map(|e| e["meta"]["id"].as_str().unwrap())
        .collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "no event twice");
    // The same events a single uncontrolled read returns.
    let all = server.until_rest(&id, 0).await;
    assert_eq!(all.len(), events.len());
    server.stop().await;
}
