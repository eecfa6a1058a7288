//! Strangers sharing one server through the HTTP API (`channels/eve.yaml`), on the real server on
//! `127.0.0.1:0` over real SQLite: Bob floods `POST /eve/v1/session` and follow-up messages while
//! Alice starts one session. The model serves one call at a time (a provider with one slot, as a
//! local model server has), so every turn Bob gets in flight is time Alice waits.
//!
//! With the channel's per-principal `limits:` Bob is refused past his bounds with `429
//! too_many_in_flight` (and `Retry-After`), and Alice's turn completes within a bound; the twin,
//! the same server without `limits:`, lets every flood message through, and Alice's turn waits
//! behind Bob's well past that bound.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::attacks_flood::{ALICE, BOB, Flood, one_slot_model};
use super::server_support::{AgentDir, TestServer};

/// Sessions Bob tries to start, and follow-ups he tries to send.
const STARTS: usize = 16;
const FOLLOW_UPS: usize = 8;
/// How long Alice's turn may take with the limits on (Bob holds at most two sessions and four
/// queued messages, each a call ahead of hers).
const BOUND: Duration = Duration::from_secs(5);

async fn start(limits: bool) -> TestServer {
    let agent = AgentDir::standard();
    let mut file =
        "auth:\n  type: bearer\n  tokens:\n    - ${ALICE_TOKEN}\n    - ${BOB_TOKEN}\n".to_owned();
    if limits {
        file.push_str("limits:\n  in_flight: 2\n  queued: 4\n");
    }
    agent.file("channels/eve.yaml", &file);
    TestServer::start_full(
        agent,
        &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)],
        |c| c,
        one_slot_model,
        |_| eve_runtime::server::RouterOptions::default(),
    )
    .await
}

/// `POST path` with `body` as `token`: the status, the `Retry-After` header and the JSON.
async fn post(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    path: &str,
    body: Value,
) -> (u16, Option<String>, Value) {
    let response = http
        .post(format!("{base}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry, response.json().await.unwrap_or(Value::Null))
}

/// Whether `answer` is the refusal of a flood message.
fn refused(answer: &(u16, Option<String>, Value)) -> bool {
    let (status, retry, body) = answer;
    if *status != 429 {
        assert_eq!(*status, 202, "{body}");
        return false;
    }
    assert_eq!(body["code"], "too_many_in_flight", "{body}");
    assert_eq!(retry.as_deref(), Some("1"), "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("Too many"),
        "{body}"
    );
    true
}

async fn flood(server: &TestServer) -> Flood {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let base = server.base.clone();
    let starts = futures::future::join_all((0..STARTS).map(|i| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            post(
                &http,
                &base,
                BOB,
                "/eve/v1/session",
                json!({"message": format!("flood {i}")}),
            )
            .await
        }
    }))
    .await;
    let mut started = Vec::new();
    let mut refused_starts = 0;
    for answer in &starts {
        if refused(answer) {
            refused_starts += 1;
        } else {
            started.push(answer.2["sessionId"].as_str().unwrap().to_owned());
        }
    }
    let target = started[0].clone();
    let follow_ups = futures::future::join_all((0..FOLLOW_UPS).map(|i| {
        let (http, base, target) = (http.clone(), base.clone(), target.clone());
        async move {
            post(
                &http,
                &base,
                BOB,
                &format!("/eve/v1/session/{target}"),
                json!({"message": format!("more {i}")}),
            )
            .await
        }
    }))
    .await;
    let refused_follow_ups = follow_ups.iter().filter(|a| refused(a)).count();
    // Alice, a stranger to Bob, starts one session and follows it to rest.
    let began = Instant::now();
    let mine = post(
        &http,
        &base,
        ALICE,
        "/eve/v1/session",
        json!({"message": "hello"}),
    )
    .await;
    assert_eq!(mine.0, 202, "Alice was refused: {}", mine.2);
    let id = mine.2["sessionId"].as_str().unwrap().to_owned();
    let events = server
        .until_rest_as(&format!("Bearer {ALICE}"), &id, 0)
        .await;
    assert!(
        events.iter().any(|e| e["type"] == "turn.completed"),
        "Alice's turn did not complete: {events:?}"
    );
    Flood {
        started: started.len(),
        refused: refused_starts,
        followed: FOLLOW_UPS - refused_follow_ups,
        refused_follow_ups,
        alice: began.elapsed(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flooder_of_the_api_is_refused_past_its_bounds_and_a_stranger_is_not_starved() {
    let server = start(true).await;
    let f = flood(&server).await;
    println!(
        "limits on: sessions tried {STARTS}, admitted {}, refused {}; follow-ups tried \
         {FOLLOW_UPS}, admitted {}, refused {}; Alice's turn took {:?}",
        f.started, f.refused, f.followed, f.refused_follow_ups, f.alice
    );
    // `in_flight: 2` (a third may pass if one of the two finished during the burst).
    assert!(f.started <= 3, "{} sessions admitted", f.started);
    assert_eq!(f.started + f.refused, STARTS);
    // `queued: 4` (a turn may take some of them during the burst).
    assert!(
        f.refused_follow_ups >= FOLLOW_UPS / 4,
        "only {} follow-ups refused",
        f.refused_follow_ups
    );
    assert!(
        f.alice < BOUND,
        "Alice's turn took {:?}, past {BOUND:?}",
        f.alice
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twin_without_limits_a_flooder_of_the_api_starves_the_stranger() {
    let server = start(false).await;
    let f = flood(&server).await;
    println!(
        "limits off: sessions tried {STARTS}, admitted {}, refused {}; follow-ups tried \
         {FOLLOW_UPS}, admitted {}, refused {}; Alice's turn took {:?}",
        f.started, f.refused, f.followed, f.refused_follow_ups, f.alice
    );
    assert_eq!(f.started, STARTS);
    assert_eq!(f.followed, FOLLOW_UPS);
    assert!(
        f.alice > BOUND,
        "without limits Alice's turn still took only {:?}",
        f.alice
    );
    server.stop().await;
}
