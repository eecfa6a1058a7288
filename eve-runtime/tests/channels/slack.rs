//! Slack: signatures (valid, forged, stale, missing), URL verification, one session per thread
//! across messages and restarts, replies in the thread, retries, ignored events, approvals.

use serde_json::{Value, json};

use super::{Fake, Served, agent, assert_unauthorized, hmac_hex, now};

pub(super) const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
pub(super) const TOKEN: &str = "xoxb-test-token";
pub(super) const BOT: &str = "UBOT";

pub(super) fn vars() -> [(&'static str, &'static str); 2] {
    [("SLACK_SIGNING_SECRET", SECRET), ("SLACK_BOT_TOKEN", TOKEN)]
}

pub(super) fn channel(fake: &Fake) -> String {
    format!(
        "kind: slack\nsigning_secret: ${{SLACK_SIGNING_SECRET}}\nbot_token: ${{SLACK_BOT_TOKEN}}\n\
         api_base_url: {}/api\n",
        fake.base
    )
}

/// Slack's headers for `body` signed with `secret` at `ts`.
pub(super) fn signed(body: &str, secret: &str, ts: i64) -> Vec<(&'static str, String)> {
    let base = format!("v0:{ts}:");
    let sig = hmac_hex(secret, &[base.as_bytes(), body.as_bytes()]);
    vec![
        ("x-slack-request-timestamp", ts.to_string()),
        ("x-slack-signature", format!("v0={sig}")),
    ]
}

pub(super) fn callback(event_id: &str, event: Value) -> String {
    json!({
        "token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": now(), "event": event,
        "authorizations": [{"team_id": "T1", "user_id": BOT, "is_bot": true}],
    })
    .to_string()
}

pub(super) fn mention(text: &str, channel: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut e = json!({"type": "app_mention", "user": "U1", "text": format!("<@{BOT}> {text}"),
                       "ts": ts, "channel": channel, "event_ts": ts});
    if let Some(t) = thread_ts {
        e["thread_ts"] = json!(t);
    }
    e
}

pub(super) async fn send(server: &Served, body: &str) -> (u16, Value) {
    server
        .post("slack", &signed(body, SECRET, now()), body)
        .await
}

#[tokio::test]
async fn signatures_are_checked_before_anything_else() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;
    let body = json!({"token": "t", "challenge": "c-123", "type": "url_verification"}).to_string();

    let (status, answer) = send(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({"challenge": "c-123"}));

    // Missing signature, missing timestamp.
    assert_unauthorized(&server.post("slack", &[], body.clone()).await);
    let mut headers = signed(&body, SECRET, now());
    headers.remove(0);
    assert_unauthorized(&server.post("slack", &headers, body.clone()).await);
    // Forged: another secret; a valid signature of another body; not `v0=`.
    assert_unauthorized(
        &server
            .post("slack", &signed(&body, "wrong", now()), body.clone())
            .await,
    );
    let other = body.replace("c-123", "c-999");
    assert_unauthorized(
        &server
            .post("slack", &signed(&body, SECRET, now()), other)
            .await,
    );
    let mut headers = signed(&body, SECRET, now());
    headers[1].1 = headers[1].1.replace("v0=", "v1=");
    assert_unauthorized(&server.post("slack", &headers, body.clone()).await);
    // The timestamp is signed: changing it breaks the signature.
    let mut headers = signed(&body, SECRET, now());
    headers[0].1 = (now() - 1).to_string();
    assert_unauthorized(&server.post("slack", &headers, body.clone()).await);
    // Stale (and from the future): correctly signed, outside the five-minute window.
    let stale = server
        .post("slack", &signed(&body, SECRET, now() - 301), body.clone())
        .await;
    assert_unauthorized(&stale);
    assert!(
        stale.1["error"].as_str().unwrap().contains("stale"),
        "{}",
        stale.1
    );
    assert_unauthorized(
        &server
            .post("slack", &signed(&body, SECRET, now() + 400), body.clone())
            .await,
    );
    // Within the window.
    let (status, _) = server
        .post("slack", &signed(&body, SECRET, now() - 200), body.clone())
        .await;
    assert_eq!(status, 200);

    // Nothing reached the platform, no session was created.
    assert!(fake.requests().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn one_session_per_thread_across_messages_and_restarts() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;

    // A mention starts thread 1000.1 (its own ts); a reply in that thread without a mention
    // continues it; a mention elsewhere starts another thread.
    let (status, first) = send(
        &server,
        &callback("Ev1", mention("hello", "C1", "1000.1", None)),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let thread = first["sessionId"].as_str().unwrap().to_owned();
    assert!(thread.starts_with("wrun_slack_"), "{thread}");
    server.until_turns(&thread, 1).await;
    let follow_up = json!({"type": "message", "channel_type": "channel", "user": "U2",
                           "text": "and again", "ts": "1000.5", "thread_ts": "1000.1",
                           "channel": "C1"});
    let (status, second) = send(&server, &callback("Ev2", follow_up)).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["sessionId"], thread.as_str());
    let (_, other) = send(
        &server,
        &callback("Ev3", mention("elsewhere", "C1", "2000.1", None)),
    )
    .await;
    let other = other["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(other, thread);

    let replies = fake.wait(3).await;
    server.until_turns(&thread, 2).await;
    server.until_turns(&other, 1).await;
    assert_eq!(server.turns(&thread).await, 2);
    assert_eq!(server.turns(&other).await, 1);
    assert_eq!(server.received(&thread).await, ["hello", "and again"]);

    // Each reply is a chat.postMessage in its thread, with the bot token.
    for r in &replies {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/api/chat.postMessage");
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("application/json")
        );
        assert_eq!(r.json["channel"], "C1");
    }
    let mut seen: Vec<(String, String)> = replies
        .iter()
        .map(|r| {
            (
                r.json["thread_ts"].as_str().unwrap().to_owned(),
                r.json["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("1000.1".to_owned(), "You said: and again".to_owned()),
            ("1000.1".to_owned(), "You said: hello".to_owned()),
            ("2000.1".to_owned(), "You said: elsewhere".to_owned()),
        ]
    );

    // A restart keeps the mapping: the thread's next message lands in the same session.
    server.stop().await;
    let server = Served::start(&root, &vars()).await;
    let again = json!({"type": "app_mention", "user": "U1", "text": format!("<@{BOT}> third"),
                       "ts": "1000.9", "thread_ts": "1000.1", "channel": "C1"});
    let (_, third) = send(&server, &callback("Ev4", again)).await;
    assert_eq!(third["sessionId"], thread.as_str());
    let replies = fake.wait(4).await;
    server.until_turns(&thread, 3).await;
    assert_eq!(replies[3].json["thread_ts"], "1000.1");
    assert_eq!(replies[3].json["text"], "You said: third");
    server.stop().await;
}

#[tokio::test]
async fn retries_bots_and_unrelated_messages_are_ignored() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;

    let body = callback("EvA", mention("once", "C9", "3000.1", None));
    let (_, first) = send(&server, &body).await;
    let session = first["sessionId"].as_str().unwrap().to_owned();
    // Slack retries the same delivery (same event_id): acknowledged, not run again.
    let mut headers = signed(&body, SECRET, now());
    headers.push(("x-slack-retry-num", "1".to_owned()));
    headers.push(("x-slack-retry-reason", "http_timeout".to_owned()));
    let (status, retry) = server.post("slack", &headers, body.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(retry["ignored"], "already accepted", "{retry}");
    fake.wait(1).await;

    let ignored = [
        // Our own post, and any bot's.
        json!({"type": "message", "user": BOT, "text": "You said: once", "ts": "3000.2",
               "thread_ts": "3000.1", "channel": "C9"}),
        json!({"type": "message", "bot_id": "B1", "user": "U7", "text": "beep", "ts": "3000.3",
               "thread_ts": "3000.1", "channel": "C9"}),
        // An edit.
        json!({"type": "message", "subtype": "message_changed", "ts": "3000.4",
               "channel": "C9", "thread_ts": "3000.1"}),
        // A channel message outside any thread the agent is in.
        json!({"type": "message", "channel_type": "channel", "user": "U1", "text": "chatter",
               "ts": "3000.5", "channel": "C9"}),
        // The `message` copy of a mention (the `app_mention` is the one answered).
        json!({"type": "message", "channel_type": "channel", "user": "U1",
               "text": format!("<@{BOT}> twice?"), "ts": "3000.6", "thread_ts": "3000.1",
               "channel": "C9"}),
        // Other event types, and an event with no text.
        json!({"type": "reaction_added", "user": "U1", "reaction": "+1"}),
        json!({"type": "app_mention", "user": "U1", "text": format!("<@{BOT}>"), "ts": "3000.7",
               "channel": "C9"}),
    ];
    for (i, event) in ignored.into_iter().enumerate() {
        let (status, answer) = send(&server, &callback(&format!("EvI{i}"), event)).await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer["ignored"].is_string(), "event {i}: {answer}");
    }
    // A direct message is answered without a mention.
    let dm = json!({"type": "message", "channel_type": "im", "user": "U1", "text": "in private",
                    "ts": "4000.1", "channel": "D1"});
    let (_, answer) = send(&server, &callback("EvD", dm)).await;
    assert!(answer["sessionId"].is_string(), "{answer}");
    let replies = fake.wait(2).await;
    fake.stays_at(2).await;
    assert_eq!(replies[1].json["channel"], "D1");
    assert_eq!(replies[1].json["thread_ts"], "4000.1");
    assert_eq!(server.turns(&session).await, 1);
    server.stop().await;
}

#[tokio::test]
async fn approvals_are_announced_in_the_thread() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;
    let ask = mention(
        "/tool refund_charge {\"chargeId\": \"ch_1\", \"amount\": 5}",
        "C1",
        "5000.1",
        None,
    );
    let (_, answer) = send(&server, &callback("EvR", ask)).await;
    let session = answer["sessionId"].as_str().unwrap().to_owned();

    let notice = &fake.wait(1).await[0];
    assert_eq!(notice.json["thread_ts"], "5000.1");
    let text = notice.json["text"].as_str().unwrap();
    let pending = server.runtime.pending_inputs(&session).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert!(text.contains("`refund_charge` awaits approval"), "{text}");
    assert!(
        text.contains(&format!("eve sessions approve {session} {}", pending[0].id)),
        "{text}"
    );
    assert!(
        text.contains(&format!("POST /eve/v1/session/{session}")),
        "{text}"
    );

    server
        .runtime
        .answer_input(&session, None, true, None)
        .await
        .unwrap();
    let replies = fake.wait(2).await;
    assert_eq!(replies[1].json["thread_ts"], "5000.1");
    let text = replies[1].json["text"].as_str().unwrap();
    assert!(text.starts_with("refund_charge returned:"), "{text}");
    assert!(text.contains("ch_1"), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn an_approval_answered_in_the_thread_carries_the_slack_user() {
    let fake = Fake::start().await;
    // U0APPROVER is an operator; U0STRANGER is only someone else in the channel.
    let (_agent, root) = agent(&[
        ("slack", channel(&fake)),
        (
            "eve",
            "auth: none\noperators:\n  principals: [\"slack:U0APPROVER\"]\n".to_owned(),
        ),
    ]);
    let server = Served::start(&root, &vars()).await;
    let ask = mention(
        "/tool refund_charge {\"chargeId\": \"ch_7\", \"amount\": 5}",
        "C1",
        "5100.1",
        None,
    );
    let (_, answer) = send(&server, &callback("EvP1", ask)).await;
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    let notice = &fake.wait(1).await[0];
    assert!(
        notice.json["text"]
            .as_str()
            .unwrap()
            .contains("reply `approve`")
    );

    // Someone else in the channel, who neither asked nor is an operator, is refused.
    let stranger = json!({"type": "message", "channel_type": "channel", "user": "U0STRANGER",
                          "text": "approve", "ts": "5100.2", "thread_ts": "5100.1", "channel": "C1"});
    let (status, answer) = send(&server, &callback("EvP2", stranger)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["answered"], 0, "{answer}");
    let refused = answer["refused"][0].as_str().unwrap();
    assert!(
        refused.contains("Only slack:U1 (who asked) or an operator"),
        "{refused}"
    );
    assert_eq!(
        server.runtime.pending_inputs(&session).await.unwrap().len(),
        1
    );

    // An operator answers in the thread (no mention needed there).
    let reply = json!({"type": "message", "channel_type": "channel", "user": "U0APPROVER",
                       "text": "approve", "ts": "5100.3", "thread_ts": "5100.1", "channel": "C1"});
    let (status, answer) = send(&server, &callback("EvP3", reply)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["answered"], 1, "{answer}");
    let replies = fake.wait(2).await;
    let text = replies[1].json["text"].as_str().unwrap();
    assert!(text.starts_with("refund_charge returned:"), "{text}");
    let events = server.runtime.events(&session, 0, 0).await.unwrap();
    let settled: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "approval.settled")
        .collect();
    assert_eq!(settled.len(), 1, "the stranger's answer did not count");
    assert_eq!(settled[0].data["responderPrincipalId"], "slack:U0APPROVER");
    let resolved = events.iter().find(|e| e.kind == "input.resolved").unwrap();
    assert_eq!(
        resolved.data["resolutions"][0]["responderPrincipalId"],
        "slack:U0APPROVER"
    );
    // The answer is not a message to the agent.
    assert_eq!(server.received(&session).await.len(), 1);
    server.stop().await;
}

/// The person who asked answers their own request in the thread; a second answer after it is
/// told the first one counts.
#[tokio::test]
async fn the_person_who_asked_answers_and_a_later_answer_is_told_the_first_counts() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("slack", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;
    let ask = mention(
        "/tool refund_charge {\"chargeId\": \"ch_8\", \"amount\": 5}",
        "C1",
        "5200.1",
        None,
    );
    let (_, answer) = send(&server, &callback("EvQ1", ask)).await;
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    fake.wait(1).await;
    let pending = server.runtime.pending_inputs(&session).await.unwrap();
    let request = pending[0].id.clone();
    // The terminal answers first; U1's answer, naming the request, comes second.
    server
        .runtime
        .answer_input(&session, Some(&request), false, None)
        .await
        .unwrap();
    let late = json!({"type": "message", "channel_type": "channel", "user": "U1",
                      "text": format!("approve {request}"), "ts": "5200.2", "thread_ts": "5200.1",
                      "channel": "C1"});
    let (status, answer) = send(&server, &callback("EvQ2", late)).await;
    assert_eq!(status, 200, "{answer}");
    // Nothing waits any more: the text is an ordinary message, not a second answer.
    assert!(answer.get("answered").is_none(), "{answer}");
    let events = server.runtime.events(&session, 0, 0).await.unwrap();
    let settled: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "approval.settled")
        .collect();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].data["outcome"], "denied");

    // A new request in a new thread: the asker approves it.
    let ask = mention(
        "/tool refund_charge {\"chargeId\": \"ch_9\", \"amount\": 5}",
        "C1",
        "5300.1",
        None,
    );
    let (_, answer) = send(&server, &callback("EvQ3", ask)).await;
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    let own = json!({"type": "message", "channel_type": "channel", "user": "U1",
                     "text": "approve", "ts": "5300.2", "thread_ts": "5300.1", "channel": "C1"});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server
        .runtime
        .pending_inputs(&session)
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the refund never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (status, answer) = send(&server, &callback("EvQ4", own)).await;
    assert_eq!(
        (status, answer["answered"].clone()),
        (200, json!(1)),
        "{answer}"
    );
    server.stop().await;
}
