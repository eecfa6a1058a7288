//! The generic webhook: body signatures, the optional signed timestamp, session keys, any JSON as
//! the message, signed replies to `reply_url`.

use serde_json::{Value, json};

use super::{Fake, Served, agent, assert_unauthorized, hmac_hex, now};

const SECRET: &str = "whsec-0123456789";

fn signed(body: &str) -> Vec<(&'static str, String)> {
    vec![(
        "x-eve-signature",
        format!("sha256={}", hmac_hex(SECRET, &[body.as_bytes()])),
    )]
}

fn timed(body: &str, ts: i64) -> Vec<(&'static str, String)> {
    let prefix = format!("{ts}.");
    vec![
        (
            "x-eve-signature",
            format!(
                "sha256={}",
                hmac_hex(SECRET, &[prefix.as_bytes(), body.as_bytes()])
            ),
        ),
        ("x-eve-timestamp", ts.to_string()),
    ]
}

fn channels(fake: &Fake) -> [(&'static str, String); 2] {
    [
        (
            "hooks",
            format!(
                "kind: webhook\nsecret: ${{HOOK_SECRET}}\nreply_url: {}/replies\n",
                fake.base
            ),
        ),
        (
            "timed",
            "kind: webhook\nsecret: ${HOOK_SECRET}\nreplay_window_seconds: 300\n".to_owned(),
        ),
    ]
}

#[tokio::test]
async fn signatures_and_replay_window() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&channels(&fake));
    let server = Served::start(&root, &[("HOOK_SECRET", SECRET)]).await;
    let body = json!({"message": "hi"}).to_string();

    assert_unauthorized(&server.post("hooks", &[], body.clone()).await);
    let forged = vec![(
        "x-eve-signature",
        format!("sha256={}", hmac_hex("nope", &[body.as_bytes()])),
    )];
    assert_unauthorized(&server.post("hooks", &forged, body.clone()).await);
    let bare = vec![("x-eve-signature", hmac_hex(SECRET, &[body.as_bytes()]))];
    assert_unauthorized(&server.post("hooks", &bare, body.clone()).await);
    let tampered = body.replace("hi", "ho");
    assert_unauthorized(&server.post("hooks", &signed(&body), tampered).await);
    let (status, answer) = server.post("hooks", &signed(&body), body.clone()).await;
    assert_eq!(status, 202, "{answer}");

    // With `replay_window_seconds`, the timestamp is required and signed.
    assert_unauthorized(&server.post("timed", &signed(&body), body.clone()).await);
    assert_unauthorized(
        &server
            .post("timed", &timed(&body, now() - 301), body.clone())
            .await,
    );
    let mut moved = timed(&body, now());
    moved[1].1 = (now() - 5).to_string();
    assert_unauthorized(&server.post("timed", &moved, body.clone()).await);
    let (status, answer) = server
        .post("timed", &timed(&body, now() - 30), body.clone())
        .await;
    assert_eq!(status, 202, "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn session_keys_any_json_and_signed_replies() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&channels(&fake));
    let server = Served::start(&root, &[("HOOK_SECRET", SECRET)]).await;

    let one = json!({"message": "first", "session_key": "order-17"}).to_string();
    let (status, a) = server.post("hooks", &signed(&one), one.clone()).await;
    assert_eq!(status, 202, "{a}");
    assert_eq!(a["ok"], true);
    assert_eq!(a["status"], "accepted");
    let keyed = a["sessionId"].as_str().unwrap().to_owned();
    let two = json!({"message": "second", "session_key": "order-17"}).to_string();
    let (_, b) = server.post("hooks", &signed(&two), two.clone()).await;
    assert_eq!(b["sessionId"], keyed.as_str());

    // Without a key: a new session each time; a body without `message` is the message.
    let event = json!({"event": "deploy", "service": "api", "ok": true});
    let raw = event.to_string();
    let (_, c) = server.post("hooks", &signed(&raw), raw.clone()).await;
    let loose = c["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(loose, keyed);

    let replies = fake.wait(3).await;
    server.until_turns(&keyed, 2).await;
    assert_eq!(server.received(&keyed).await, ["first", "second"]);
    assert_eq!(
        server.received(&loose).await,
        [serde_json::to_string_pretty(&event).unwrap()]
    );

    for r in &replies {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/replies");
        let sig = r.header("x-eve-signature").unwrap();
        assert_eq!(sig, format!("sha256={}", hmac_hex(SECRET, &[&r.body])));
        assert_eq!(r.json["type"], "turn.completed");
    }
    let mut keyed_texts: Vec<&str> = replies
        .iter()
        .filter(|r| r.json["sessionId"] == keyed.as_str())
        .map(|r| {
            assert_eq!(r.json["sessionKey"], "order-17");
            r.json["text"].as_str().unwrap()
        })
        .collect();
    keyed_texts.sort();
    assert_eq!(keyed_texts, ["You said: first", "You said: second"]);

    // Verified bodies that are not usable are 400s.
    for bad in [
        json!({"message": 5}).to_string(),
        json!({"message": "x", "session_key": 3}).to_string(),
        json!({"message": "   "}).to_string(),
        "not json".to_owned(),
    ] {
        let (status, body) = server.post("hooks", &signed(&bad), bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["ok"], false);
    }
    server.stop().await;
}

#[tokio::test]
async fn approval_requests_reach_the_reply_url() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&channels(&fake));
    let server = Served::start(&root, &[("HOOK_SECRET", SECRET)]).await;
    let body = json!({"message": "/tool refund_charge {\"chargeId\": \"ch_2\"}"}).to_string();
    let (_, a) = server.post("hooks", &signed(&body), body.clone()).await;
    let session = a["sessionId"].as_str().unwrap().to_owned();
    let notice = fake.wait(1).await[0].json.clone();
    assert_eq!(notice["type"], "input.requested");
    assert_eq!(notice["sessionId"], session.as_str());
    assert_eq!(notice["requests"][0]["toolName"], "refund_charge");
    let request_id = notice["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    server
        .runtime
        .answer_input(&session, Some(&request_id), false, Some("no".to_owned()))
        .await
        .unwrap();
    let done: Value = fake.wait(2).await[1].json.clone();
    assert_eq!(done["type"], "turn.completed");
    server.stop().await;
}

#[tokio::test]
async fn a_delivery_sent_twice_is_accepted_once() {
    let fake = Fake::start().await;
    let mut list = channels(&fake).to_vec();
    list.push((
        "github",
        "kind: webhook\nsecret: ${HOOK_SECRET}\ndelivery_header: X-GitHub-Delivery\n".to_owned(),
    ));
    let (_agent, root) = agent(&list);
    let server = Served::start(&root, &[("HOOK_SECRET", SECRET)]).await;
    let body = json!({"message": "deploy"}).to_string();

    // With a replay window and no delivery id, the signature itself is the delivery id.
    let once = timed(&body, now() - 10);
    let (status, first) = server.post("timed", &once, body.clone()).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = server.post("timed", &once, body.clone()).await;
    assert_eq!(
        status, 400,
        "a replay inside the window is refused: {again}"
    );
    assert_eq!(again["code"], "already_accepted", "{again}");
    // A new delivery of the same body (a new timestamp, so a new signature) is accepted.
    let (status, fresh) = server
        .post("timed", &timed(&body, now() - 5), body.clone())
        .await;
    assert_eq!(status, 202, "{fresh}");

    // A configured delivery id header de-duplicates; another id is a new delivery.
    let mut with_id = signed(&body);
    with_id.push(("x-github-delivery", "72d3162e-cc78".to_owned()));
    let (status, first) = server.post("github", &with_id, body.clone()).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = server.post("github", &with_id, body.clone()).await;
    assert_eq!(status, 400, "{again}");
    let mut other = signed(&body);
    other.push(("x-github-delivery", "72d3162e-cc79".to_owned()));
    let (status, second) = server.post("github", &other, body.clone()).await;
    assert_eq!(status, 202, "{second}");
    // Without a window or an id, the same signed body is a new message each time.
    let (status, _) = server.post("hooks", &signed(&body), body.clone()).await;
    assert_eq!(status, 202);
    let (status, _) = server.post("hooks", &signed(&body), body.clone()).await;
    assert_eq!(status, 202);
    server.stop().await;
}
