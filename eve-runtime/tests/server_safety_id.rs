//! The safety identifier sent to the model provider: a one-way hash of the principal who sent
//! the turn's message, the same for every turn of that principal and different for another,
//! never the principal itself; a turn nobody authenticated sends none (the twin).

use std::sync::Arc;

use eve_runtime::engine::{FixedModelProvider, ResolvedModel};
use eve_runtime::features::safety_id::safety_identifier;
use eve_runtime::model::Provider;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};
use crate::model::fast_settings;
use crate::model::server::{Reply, TestServer as ModelServer};
use crate::model::wire::oa;

fn openai(url: &str) -> ResolvedModel {
    let settings = fast_settings(Provider::OpenAi, &format!("{url}/v1"));
    ResolvedModel {
        client: eve_runtime::model::client(&settings).unwrap(),
        model: "test-model".into(),
        model_id: "openai/test-model".into(),
        context_window: Some(128_000),
        price_per_million: None,
    }
}

fn reply(t: &str) -> Reply {
    Reply::sse(&[oa::role(), oa::text(t), oa::finish("stop"), oa::done()])
}

async fn serve(agent: AgentDir, vars: &[(&str, &str)], url: &str) -> TestServer {
    let model = openai(url);
    TestServer::start_full(
        agent,
        vars,
        |c| c,
        move |c| c.models = Arc::new(FixedModelProvider(model)),
        |_| Default::default(),
    )
    .await
}

async fn send(server: &TestServer, token: &str, path: &str, text: &str) -> String {
    let response = server
        .http
        .post(server.url(path))
        .bearer_auth(token)
        .json(&json!({"message": text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    let id = body["sessionId"].as_str().unwrap().to_owned();
    server
        .until_rest_as(&format!("Bearer {token}"), &id, 0)
        .await;
    id
}

#[tokio::test]
async fn each_principal_has_its_own_stable_hashed_identifier() {
    let model = ModelServer::start(vec![reply("one"), reply("two"), reply("three")]).await;
    let agent = AgentDir::new();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: bearer\n  tokens: [\"${TOKEN_A}\", \"${TOKEN_B}\"]\n",
    );
    let server = serve(
        agent,
        &[("TOKEN_A", "alpha"), ("TOKEN_B", "beta")],
        &model.url,
    )
    .await;
    let name = server
        .runtime
        .builds()
        .current()
        .unwrap()
        .manifest
        .agent
        .name
        .clone();
    let session = send(&server, "alpha", "/eve/v1/session", "first").await;
    send(
        &server,
        "alpha",
        &format!("/eve/v1/session/{session}"),
        "second",
    )
    .await;
    send(&server, "beta", "/eve/v1/session", "third").await;
    let bodies: Vec<Value> = model.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 3);
    let ids: Vec<&str> = bodies
        .iter()
        .map(|b| b["safety_identifier"].as_str().unwrap())
        .collect();
    assert_eq!(ids[0], safety_identifier(&name, "token:TOKEN_A"));
    assert_eq!(ids[0], ids[1], "the same principal, the same identifier");
    assert_eq!(ids[2], safety_identifier(&name, "token:TOKEN_B"));
    assert_ne!(ids[0], ids[2]);
    assert_eq!(ids[0].len(), 64);
    for body in &bodies {
        let text = body.to_string();
        assert!(
            !text.contains("TOKEN_A") && !text.contains("token:"),
            "{text}"
        );
    }
    server.stop().await;

    // The twin: without authentication nobody is known, and nothing is sent.
    let model = ModelServer::start(vec![reply("anonymous")]).await;
    let server = serve(AgentDir::new(), &[], &model.url).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    let body = model.single_request().body;
    assert!(body.get("safety_identifier").is_none(), "{body}");
    server.stop().await;
}
