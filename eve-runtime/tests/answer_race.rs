//! Two answers to one request: the first wins, atomically.
//!
//! Over the real server on `127.0.0.1:0` and real SQLite, a dozen answers (approvals and
//! denials, from the session's owner and an operator) are posted at once on one pending request,
//! again and again over many requests. Each request gets exactly one `202` and one
//! `approval.settled`; every other answer gets `409 input_already_answered` carrying the outcome
//! and principal that won, which is what the store holds. The twin turns the store's
//! compare-and-set off (the test-only switch: answers overwrite, as before) and sees both
//! outcomes stored in one stream, so the test can fail.

use std::sync::Arc;

use eve_runtime::server::sign_hs256;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const SECRET: &str = "answer-race-secret-0123456789";
/// Answers posted at once on each request.
const ANSWERS: usize = 12;
/// Requests raced.
const ROUNDS: usize = 20;

fn agent() -> AgentDir {
    let agent = AgentDir::standard();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  subjects: [ops]\n",
    );
    agent
}

fn token(sub: &str) -> String {
    let claims = json!({"sub": sub, "exp": chrono::Utc::now().timestamp() + 3600});
    format!("Bearer {}", sign_hs256(&claims, SECRET.as_bytes()))
}

async fn start() -> TestServer {
    TestServer::start_with(agent(), &[("JWT_SECRET", SECRET)], |c| c).await
}

/// What one race on one request gave.
struct Race {
    accepted: usize,
    conflicts: Vec<Value>,
    settled: Vec<Value>,
}

/// Parks a refund of alice's, then posts [`ANSWERS`] answers on it at once (alternately
/// approve and deny, alternately alice and the operator).
async fn race(server: &Arc<TestServer>, alice: &str, ops: &str, guarded: bool) -> Race {
    let response = server
        .http
        .post(server.url("/eve/v1/session"))
        .header("authorization", alice)
        .json(&json!({"message": "/tool refund_charge {\"chargeId\": \"ch_1\", \"amount\": 40}"}))
        .send()
        .await
        .unwrap();
    let id = response.json::<Value>().await.unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let parked = server.until_rest_as(alice, &id, 0).await;
    let request = parked
        .iter()
        .find(|e| e["type"] == "input.requested")
        .unwrap()["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let from = server.count(&id).await;
    let start = Arc::new(tokio::sync::Barrier::new(ANSWERS));
    let mut tasks = Vec::new();
    for i in 0..ANSWERS {
        let (server, start) = (server.clone(), start.clone());
        let auth = if i % 3 == 0 { ops } else { alice }.to_owned();
        let option = if i % 2 == 0 { "approve" } else { "cancel" };
        let body = json!({"inputResponses": [{"requestId": request, "optionId": option}]});
        let url = server.url(&format!("/eve/v1/session/{id}"));
        tasks.push(tokio::spawn(async move {
            let request = server
                .http
                .post(url)
                .header("authorization", auth)
                .json(&body);
            start.wait().await;
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }));
    }
    let mut accepted = 0;
    let mut conflicts = Vec::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        match status {
            202 => accepted += 1,
            409 => conflicts.push(body),
            // Without the compare-and-set, an answer may also trip over the one that overwrote
            // it (the store refusing its write): the protection's absence, not a finding here.
            500 if !guarded => {}
            other => panic!("an answer got {other}: {body}"),
        }
    }
    // Every accepted answer commits its `approval.settled` before its `202`, so once all the
    // answers are back the stored events hold every settlement. The guarded run also waits for
    // the turn to come to rest; the unguarded twin does not, since answers that overwrite each
    // other may resume the turn more than once and leave it running on into the next race.
    let events = if !guarded {
        server.stored_as(alice, &id, from).await
    } else {
        server.until_rest_as(alice, &id, from).await
    };
    let settled = events
        .into_iter()
        .filter(|e| e["type"] == "approval.settled")
        .map(|e| e["data"].clone())
        .collect();
    Race {
        accepted,
        conflicts,
        settled,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_racing_answers_the_first_wins_and_every_other_gets_409() {
    let server = Arc::new(start().await);
    let (alice, ops) = (token("alice"), token("ops"));
    let mut answers = 0;
    for round in 0..ROUNDS {
        let race = race(&server, &alice, &ops, true).await;
        answers += ANSWERS;
        assert_eq!(
            race.accepted, 1,
            "round {round}: more than one answer counted"
        );
        assert_eq!(race.settled.len(), 1, "round {round}: {:#?}", race.settled);
        let won = &race.settled[0];
        assert_eq!(race.conflicts.len(), ANSWERS - 1);
        for body in &race.conflicts {
            assert_eq!(body["code"], "input_already_answered", "{body}");
            assert_eq!(body["ok"], false);
            assert_eq!(body["requestId"], won["requestId"]);
            assert_eq!(
                body["outcome"], won["outcome"],
                "the 409 names the answer that won"
            );
            assert_eq!(body["responderPrincipalId"], won["responderPrincipalId"]);
            assert!(body["answeredAt"].is_string(), "{body}");
        }
    }
    eprintln!(
        "answer race: {answers} answers posted on {ROUNDS} requests, {ANSWERS} at once each; one \
         counted per request"
    );
}

/// The twin: with the store's compare-and-set off, answers racing on one request overwrite each
/// other and each announces itself, so one request's stream shows several outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_compare_and_set_racing_answers_all_count() {
    let server = Arc::new(start().await);
    server.runtime.set_unguarded_answers_for_tests(true);
    let (alice, ops) = (token("alice"), token("ops"));
    let (mut duplicated, mut both_outcomes, mut extra) = (0, 0, 0);
    for _ in 0..ROUNDS {
        let race = race(&server, &alice, &ops, false).await;
        if race.settled.len() > 1 {
            duplicated += 1;
            extra += race.settled.len() - 1;
        }
        let outcomes: std::collections::BTreeSet<String> = race
            .settled
            .iter()
            .map(|s| s["outcome"].as_str().unwrap_or_default().to_owned())
            .collect();
        if outcomes.len() > 1 {
            both_outcomes += 1;
        }
    }
    eprintln!(
        "answer race without compare-and-set: {duplicated} of {ROUNDS} requests settled more than \
         once ({extra} extra approval.settled), {both_outcomes} with both approved and denied"
    );
    assert!(
        duplicated > 0,
        "no request settled twice in {ROUNDS} races: the race was never won, so the test above \
         proves nothing"
    );
}
