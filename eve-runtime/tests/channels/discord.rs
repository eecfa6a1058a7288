//! Discord: Ed25519 signatures with a generated key pair (valid, forged, tampered, stale,
//! missing), PING, deferred slash commands whose answer edits the original response, one session
//! per channel.

use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};

use super::{Fake, Served, agent, assert_unauthorized, now};

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7u8; 32])
}

fn channel(fake: &Fake, key: &SigningKey) -> String {
    format!(
        "kind: discord\npublic_key: {}\napi_base_url: {}/api/v10\n",
        hex::encode(key.verifying_key().to_bytes()),
        fake.base
    )
}

fn signed(body: &str, key: &SigningKey, ts: i64) -> Vec<(&'static str, String)> {
    let ts = ts.to_string();
    let mut message = ts.clone().into_bytes();
    message.extend_from_slice(body.as_bytes());
    let signature = key.sign(&message);
    vec![
        ("x-signature-ed25519", hex::encode(signature.to_bytes())),
        ("x-signature-timestamp", ts),
    ]
}

fn command(token: &str, channel: &str, text: &str) -> String {
    json!({
        "id": format!("i-{token}"), "application_id": "app1", "type": 2, "token": token,
        "version": 1, "guild_id": "g1", "channel_id": channel,
        "member": {"user": {"id": "u1", "username": "ann"}},
        "data": {"id": "cmd1", "name": "ask", "type": 1,
                 "options": [{"name": "message", "type": 3, "value": text}]},
    })
    .to_string()
}

async fn send(server: &Served, body: &str) -> (u16, Value) {
    server
        .post("discord", &signed(body, &key(), now()), body)
        .await
}

#[tokio::test]
async fn ping_and_signatures() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("discord", channel(&fake, &key()))]);
    let server = Served::start(&root, &[]).await;
    let ping = json!({"id": "1", "application_id": "app1", "type": 1, "token": "t", "version": 1})
        .to_string();

    assert_eq!(send(&server, &ping).await, (200, json!({"type": 1})));

    // Missing headers.
    assert_unauthorized(&server.post("discord", &[], ping.clone()).await);
    let mut headers = signed(&ping, &key(), now());
    headers.remove(1);
    assert_unauthorized(&server.post("discord", &headers, ping.clone()).await);
    // Forged: another key pair; a tampered body; a signature that is not hex; a changed
    // timestamp (it is part of the signed message).
    let other = SigningKey::from_bytes(&[9u8; 32]);
    assert_unauthorized(
        &server
            .post("discord", &signed(&ping, &other, now()), ping.clone())
            .await,
    );
    let tampered = ping.replace("\"t\"", "\"u\"");
    assert_unauthorized(
        &server
            .post("discord", &signed(&ping, &key(), now()), tampered)
            .await,
    );
    let mut headers = signed(&ping, &key(), now());
    headers[0].1 = "not hex".to_owned();
    assert_unauthorized(&server.post("discord", &headers, ping.clone()).await);
    let mut headers = signed(&ping, &key(), now());
    headers[1].1 = (now() - 1).to_string();
    assert_unauthorized(&server.post("discord", &headers, ping.clone()).await);
    // Stale.
    assert_unauthorized(
        &server
            .post("discord", &signed(&ping, &key(), now() - 600), ping.clone())
            .await,
    );

    // A verified interaction of a type this channel does not answer is a 400, not a crash.
    let modal = json!({"id": "2", "application_id": "app1", "type": 5, "token": "t"}).to_string();
    let (status, body) = send(&server, &modal).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "unsupported_interaction");
    assert!(fake.requests().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn commands_defer_then_edit_the_original_response() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("discord", channel(&fake, &key()))]);
    let server = Served::start(&root, &[]).await;

    assert_eq!(
        send(&server, &command("tok1", "c1", "hello")).await,
        (200, json!({"type": 5}))
    );
    let first = fake.wait(1).await;
    assert_eq!(first[0].method, "PATCH");
    assert_eq!(
        first[0].path,
        "/api/v10/webhooks/app1/tok1/messages/@original"
    );
    assert_eq!(first[0].json, json!({"content": "You said: hello"}));

    // The same channel continues the session; another channel has its own.
    assert_eq!(send(&server, &command("tok2", "c1", "again")).await.0, 200);
    let second = fake.wait(2).await;
    assert_eq!(
        second[1].path,
        "/api/v10/webhooks/app1/tok2/messages/@original"
    );
    assert_eq!(second[1].json["content"], "You said: again");
    assert_eq!(send(&server, &command("tok3", "c2", "other")).await.0, 200);
    fake.wait(3).await;

    let sessions = server.runtime.sessions(&Default::default()).await.unwrap();
    assert_eq!(sessions.len(), 2);
    let c1 = eve_runtime::server::channel_session_id("discord", "discord", "g1:c1");
    let c2 = eve_runtime::server::channel_session_id("discord", "discord", "g1:c2");
    server.until_turns(&c1, 2).await;
    assert_eq!(server.turns(&c1).await, 2);
    assert_eq!(server.received(&c1).await, ["hello", "again"]);
    assert_eq!(server.received(&c2).await, ["other"]);
    server.stop().await;
}

#[tokio::test]
async fn approval_notice_edits_the_original_then_the_answer_follows_up() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("discord", channel(&fake, &key()))]);
    let server = Served::start(&root, &[]).await;
    let body = command("tokA", "c7", "/tool refund_charge {\"chargeId\": \"ch_9\"}");
    assert_eq!(send(&server, &body).await.0, 200);
    let notice = &fake.wait(1).await[0];
    assert_eq!(notice.method, "PATCH");
    assert!(
        notice.json["content"]
            .as_str()
            .unwrap()
            .contains("awaits approval"),
        "{}",
        notice.json
    );
    let session = eve_runtime::server::channel_session_id("discord", "discord", "g1:c7");
    server
        .runtime
        .answer_input(&session, None, true, None)
        .await
        .unwrap();
    let followup = &fake.wait(2).await[1];
    assert_eq!(followup.method, "POST");
    assert_eq!(followup.path, "/api/v10/webhooks/app1/tokA");
    assert!(
        followup.json["content"]
            .as_str()
            .unwrap()
            .starts_with("refund_charge returned:")
    );
    server.stop().await;
}
