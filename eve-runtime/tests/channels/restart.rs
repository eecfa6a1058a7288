//! Replies and retry memory across a restart: a new runtime and server on the same project root
//! (the previous server stopped mid-turn) posts the answer the stopped one owed, exactly once,
//! without announcing an approval again; a platform's retry of a delivery accepted before the
//! restart is acknowledged, not accepted twice; the replies of a removed channel are closed.

use std::time::Duration;

use eve_runtime::store::ChannelReplyRecord;
use serde_json::json;

use super::slack::{self, channel, send, signed, vars};
use super::{Fake, Served, agent, now};

/// An app mention starting thread `ts` in channel `C1`, delivered as `event_id`.
fn mention(event_id: &str, text: &str, ts: &str) -> String {
    slack::callback(event_id, slack::mention(text, "C1", ts, None))
}

/// Every reply the store holds.
async fn replies(server: &Served) -> Vec<ChannelReplyRecord> {
    server.runtime.store().channel_replies(false).await.unwrap()
}

/// Waits until `check` holds of the stored replies.
async fn until_replies(server: &Served, what: &str, check: impl Fn(&[ChannelReplyRecord]) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let now = replies(server).await;
        if check(&now) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replies never became {what}: {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_answer_owed_when_the_server_stops_mid_turn_is_posted_once_by_the_next() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;

    // The `slow` tool takes 1.5 s: the server stops while the turn runs.
    let (status, answer) = send(&server, &mention("EvS", "/tool slow", "6000.1")).await;
    assert_eq!(status, 200, "{answer}");
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    let owed = replies(&server).await;
    assert_eq!(owed.len(), 1, "{owed:#?}");
    assert!(!owed[0].done);
    assert_eq!(owed[0].channel, "slack");
    assert_eq!(owed[0].session_id, session);
    assert_eq!(
        owed[0].address,
        json!({"kind": "slack", "channel": "C1", "thread_ts": "6000.1"})
    );
    server.stop().await;

    // The stopped server posts nothing, whenever the turn ends.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fake.requests().is_empty(), "{:#?}", fake.requests());

    let server = Served::start(&root, &vars()).await;
    let posted = fake.wait(1).await;
    assert_eq!(posted[0].path, "/api/chat.postMessage");
    assert_eq!(posted[0].json["channel"], "C1");
    assert_eq!(posted[0].json["thread_ts"], "6000.1");
    let text = posted[0].json["text"].as_str().unwrap();
    assert!(text.starts_with("slow returned:"), "{text}");
    until_replies(&server, "done", |r| r.len() == 1 && r[0].done).await;
    assert_eq!(server.turns(&session).await, 1);

    // Another restart owes nothing more.
    server.stop().await;
    let server = Served::start(&root, &vars()).await;
    fake.stays_at(1).await;
    server.stop().await;
}

#[tokio::test]
async fn an_approval_announced_before_a_restart_is_not_announced_again() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;
    let ask = "/tool refund_charge {\"chargeId\": \"ch_9\", \"amount\": 5}";
    let (_, answer) = send(&server, &mention("EvP", ask, "7000.1")).await;
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    let notice = fake.wait(1).await;
    let text = notice[0].json["text"].as_str().unwrap();
    assert!(text.contains("`refund_charge` awaits approval"), "{text}");
    let pending = server.runtime.pending_inputs(&session).await.unwrap();
    assert_eq!(pending.len(), 1);
    let request = pending[0].id.clone();
    until_replies(&server, "announced", |r| {
        r[0].announced == [request.clone()]
    })
    .await;
    server.stop().await;

    let server = Served::start(&root, &vars()).await;
    fake.stays_at(1).await;
    server
        .runtime
        .answer_input(&session, Some(&request), true, None)
        .await
        .unwrap();
    let posted = fake.wait(2).await;
    assert_eq!(posted[1].json["thread_ts"], "7000.1");
    let text = posted[1].json["text"].as_str().unwrap();
    assert!(text.starts_with("refund_charge returned:"), "{text}");
    assert!(text.contains("ch_9"), "{text}");
    fake.stays_at(2).await;
    until_replies(&server, "done", |r| r[0].done).await;
    server.stop().await;
}

#[tokio::test]
async fn a_retry_of_a_delivery_accepted_before_a_restart_is_not_accepted_again() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;
    let body = mention("EvOnce", "only once", "8000.1");
    let (_, first) = send(&server, &body).await;
    let session = first["sessionId"].as_str().unwrap().to_owned();
    fake.wait(1).await;
    server.until_turns(&session, 1).await;
    until_replies(&server, "done", |r| r.len() == 1 && r[0].done).await;
    server.stop().await;

    // A new process knows nothing in memory: the store recognises the event id.
    let server = Served::start(&root, &vars()).await;
    let mut headers = signed(&body, slack::SECRET, now());
    headers.push(("x-slack-retry-num", "1".to_owned()));
    headers.push(("x-slack-retry-reason", "http_timeout".to_owned()));
    let (status, retry) = server.post("slack", &headers, body.clone()).await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["ignored"], "already accepted", "{retry}");
    fake.stays_at(1).await;
    assert_eq!(server.received(&session).await, ["only once"]);
    assert_eq!(server.turns(&session).await, 1);
    let store = server.runtime.store();
    assert!(store.pending_inbox(&session).await.unwrap().is_empty());
    assert_eq!(replies(&server).await.len(), 1, "one message, one reply");

    // Another event of the same thread is a new delivery.
    let again = mention("EvTwice", "a second one", "8000.2").replace(
        "\"ts\":\"8000.2\"",
        "\"ts\":\"8000.2\",\"thread_ts\":\"8000.1\"",
    );
    let (_, second) = send(&server, &again).await;
    assert_eq!(second["sessionId"], session.as_str(), "{second}");
    fake.wait(2).await;
    server.until_turns(&session, 2).await;
    server.stop().await;
}

#[tokio::test]
async fn replies_owed_by_a_removed_channel_are_closed() {
    let fake = Fake::start().await;
    let (agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;
    let ask = "/tool refund_charge {\"chargeId\": \"ch_3\"}";
    let (_, answer) = send(&server, &mention("EvG", ask, "9000.1")).await;
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    fake.wait(1).await;
    server.stop().await;

    std::fs::remove_file(root.join("agent/channels/slack.yaml")).unwrap();
    agent.build();
    let server = Served::start(&root, &[]).await;
    until_replies(&server, "closed", |r| r.len() == 1 && r[0].done).await;
    let closed = &replies(&server).await[0];
    let detail = closed.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("`slack` no longer exists"), "{detail}");

    // The turn itself goes on: answered, it completes, and nothing is posted.
    server
        .runtime
        .answer_input(&session, None, true, None)
        .await
        .unwrap();
    server.until_turns(&session, 1).await;
    fake.stays_at(1).await;
    server.stop().await;
}
