//! Start-up: unset secrets and unusable settings stop the server with a message naming the file
//! and the field; unknown channel names are JSON 404s.

use eve_runtime::server::{ServerConfig, ServerError};

use super::{Fake, Served, agent};

fn manifest(root: &std::path::Path) -> eve_compile::Manifest {
    serde_json::from_str(&std::fs::read_to_string(root.join(".eve/current/manifest.json")).unwrap())
        .unwrap()
}

#[test]
fn unset_secrets_and_bad_settings_are_named() {
    let slack =
        "kind: slack\nsigning_secret: ${SLACK_SIGNING_SECRET}\nbot_token: ${SLACK_BOT_TOKEN}\n";
    let (_agent, root) = agent(&[("slack", slack.to_owned())]);
    let m = manifest(&root);
    let err = ServerConfig::from_manifest(&m, &|k| (k == "SLACK_BOT_TOKEN").then(|| "x".into()))
        .unwrap_err();
    assert!(matches!(err, ServerError::MissingSecret { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("channels/slack.yaml")
            && text.contains("signing_secret")
            && text.contains("SLACK_SIGNING_SECRET"),
        "{text}"
    );
    let config = ServerConfig::from_manifest(&m, &|_| Some("set".into())).unwrap();
    assert_eq!(config.channels.names().collect::<Vec<_>>(), ["slack"]);

    let cases = [
        ("kind: discord\npublic_key: abcd\n", "public_key"),
        (
            "kind: discord\npublic_key: ${DISCORD_PUBLIC_KEY}\n",
            "public_key",
        ),
        (
            "kind: telegram\nbot_token: ${T}\nsecret_token: ${S}\napi_base_url: ftp://x\n",
            "api_base_url",
        ),
        (
            "kind: webhook\nsecret: ${S}\nreplay_window_seconds: -1\n",
            "replay_window_seconds",
        ),
        (
            "kind: webhook\nsecret: ${S}\nreply_url: nowhere\n",
            "reply_url",
        ),
    ];
    for (yaml, field) in cases {
        let (_agent, root) = agent(&[("ch", yaml.to_owned())]);
        let env = |k: &str| (k != "DISCORD_PUBLIC_KEY").then(|| "zz".to_owned());
        let err = ServerConfig::from_manifest(&manifest(&root), &env).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("channels/ch.yaml") && text.contains(field),
            "{yaml}: {text}"
        );
    }
}

#[tokio::test]
async fn unknown_channels_and_methods() {
    let fake = Fake::start().await;
    let yaml = format!(
        "kind: webhook\nsecret: ${{S}}\nreply_url: {}/r\n",
        fake.base
    );
    let (_agent, root) = agent(&[("hooks", yaml)]);
    let server = Served::start(&root, &[("S", "s")]).await;
    for name in ["nope", "eve", "HOOKS", "%FF%FE"] {
        let (status, body) = server.post(name, &[], "{}").await;
        assert_eq!(status, 404, "{name}: {body}");
        assert_eq!(body["ok"], false);
        assert_eq!(body["code"], "not_found");
    }
    let response = server
        .http
        .get(format!("{}/eve/v1/channels/hooks", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    server.stop().await;
}
