//! Hostile bodies that carry valid signatures: every platform answers with a 2xx or a JSON 4xx,
//! never a 5xx or a dropped connection, and over-large bodies are 413s.

use ed25519_dalek::{Signer, SigningKey};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::json;

use super::{Fake, Served, agent, hmac_hex, now};

fn bodies() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [
        "", "null", "[]", "{}", "1", "\"text\"", "{\"type\": 5}", "{\"type\": \"event_callback\"}",
        "{\"type\": \"event_callback\", \"event\": []}",
        "{\"type\": \"event_callback\", \"event\": {\"type\": \"app_mention\", \"user\": 1, \"ts\": {}}}",
        "{\"type\": 2}", "{\"type\": 2, \"application_id\": \"a\", \"token\": \"t\"}",
        "{\"type\": 2, \"application_id\": \"a\", \"token\": \"t\", \"channel_id\": \"c\", \"data\": 7}",
        "{\"message\": {\"chat\": {\"id\": {}}, \"text\": \"x\"}}",
        "{\"message\": {\"chat\": {\"id\": 1}, \"text\": 5}}",
        "{\"message\": [{\"type\": \"image\"}]}", "{\"session_key\": \"\"}", "{\"type\": -1}",
        "{\"type\": 1e400}", "\u{0}\u{1}", "{\"a\":",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    out.push(vec![0xff, 0xfe, 0x00, 0x7b]);
    out.push(format!("{}1{}", "[".repeat(5000), "]".repeat(5000)).into_bytes());
    out.push(
        json!({"message": "x".repeat(100_000)})
            .to_string()
            .into_bytes(),
    );
    out
}

#[tokio::test]
async fn signed_garbage_never_fails_the_server() {
    let fake = Fake::start().await;
    let key = SigningKey::from_bytes(&[3u8; 32]);
    let base = &fake.base;
    let (_agent, root) = agent(&[
        (
            "slack",
            format!(
                "kind: slack\nsigning_secret: ${{S}}\nbot_token: ${{S}}\napi_base_url: {base}\n"
            ),
        ),
        (
            "discord",
            format!(
                "kind: discord\npublic_key: {}\napi_base_url: {base}\n",
                hex::encode(key.verifying_key().to_bytes())
            ),
        ),
        (
            "telegram",
            format!(
                "kind: telegram\nbot_token: ${{S}}\nsecret_token: ${{S}}\napi_base_url: {base}\n"
            ),
        ),
        ("webhook", "kind: webhook\nsecret: ${S}\n".to_owned()),
    ]);
    let server = Served::start(&root, &[("S", "sekrit")]).await;
    let mut cases = bodies();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = proptest::collection::vec(any::<u8>(), 0..300);
    for _ in 0..40 {
        cases.push(strategy.new_tree(&mut runner).unwrap().current());
    }
    for body in &cases {
        let ts = now();
        let slack = vec![
            ("x-slack-request-timestamp", ts.to_string()),
            (
                "x-slack-signature",
                format!(
                    "v0={}",
                    hmac_hex("sekrit", &[format!("v0:{ts}:").as_bytes(), body])
                ),
            ),
        ];
        let mut signed_message = ts.to_string().into_bytes();
        signed_message.extend_from_slice(body);
        let discord = vec![
            (
                "x-signature-ed25519",
                hex::encode(key.sign(&signed_message).to_bytes()),
            ),
            ("x-signature-timestamp", ts.to_string()),
        ];
        let telegram = vec![("x-telegram-bot-api-secret-token", "sekrit".to_owned())];
        let webhook = vec![(
            "x-eve-signature",
            format!("sha256={}", hmac_hex("sekrit", &[body])),
        )];
        for (name, headers) in [
            ("slack", slack),
            ("discord", discord),
            ("telegram", telegram),
            ("webhook", webhook),
        ] {
            let (status, answer) = server.post(name, &headers, body.clone()).await;
            assert!(
                (200..300).contains(&status) || (400..500).contains(&status),
                "{name} answered {status} to {:?}: {answer}",
                String::from_utf8_lossy(body)
            );
            if status >= 400 {
                assert_eq!(answer["ok"], false, "{name}: {answer}");
            }
        }
    }

    // Over the body limit (1 MiB by default): 413 before any signature work.
    let big = vec![b'a'; 2 * 1024 * 1024];
    let (status, answer) = server.post("webhook", &[], big).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["code"], "payload_too_large");
    server.stop().await;
}
