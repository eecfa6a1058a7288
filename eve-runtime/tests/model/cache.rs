//! Prompt caching over real HTTP: a stable prefix long enough to be cached gets Anthropic's
//! `cache_control` breakpoint and OpenAI's `prompt_cache_key`; a short one (below what the
//! providers cache) is sent as before; cache reads come back in the usage.

use eve_runtime::model::anthropic::AnthropicClient;
use eve_runtime::model::openai::OpenAiClient;
use eve_runtime::model::{ModelRequest, Provider, ToolSpec};
use serde_json::json;

use super::server::{Reply, TestServer};
use super::wire::{an, oa};
use super::{fast_settings, run, simple_request};

/// A request whose system prompt and tools make a prefix of several thousand tokens.
fn long_request(text: &str) -> ModelRequest {
    let mut request = simple_request(text);
    request.system = "You are a careful assistant. ".repeat(300);
    for i in 0..20 {
        request.tools.push(ToolSpec {
            name: format!("tool_{i}"),
            description: format!("Look up records of kind {i} matching a query."),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        });
    }
    request
}

fn anthropic_reply(cache_read: u64) -> Reply {
    Reply::sse(&[
        an::message_start(40, cache_read),
        an::text_start(0),
        an::text_delta(0, "ok"),
        an::block_stop(0),
        an::message_delta("end_turn", 2),
        an::message_stop(),
    ])
}

#[tokio::test]
async fn anthropic_marks_the_end_of_a_long_stable_prefix_and_reports_cache_reads() {
    let server = TestServer::start(vec![anthropic_reply(0), anthropic_reply(1500)]).await;
    let client = AnthropicClient::new(&fast_settings(Provider::Anthropic, &server.url)).unwrap();
    let request = long_request("hi");
    run(&client, &request).await.1.unwrap();
    let second = run(&client, &request).await.1.unwrap();
    assert_eq!(second.usage.cache_read_tokens, 1500);

    let bodies: Vec<_> = server.requests().into_iter().map(|r| r.body).collect();
    let system = &bodies[0]["system"];
    assert_eq!(system[0]["type"], "text");
    assert_eq!(system[0]["text"], request.system);
    assert_eq!(system[0]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(
        bodies[0]["system"], bodies[1]["system"],
        "the prefix is stable"
    );
    assert_eq!(bodies[0]["tools"], bodies[1]["tools"]);
}

#[tokio::test]
async fn anthropic_marks_the_last_tool_when_there_is_no_system_prompt() {
    let server = TestServer::start(vec![anthropic_reply(0)]).await;
    let client = AnthropicClient::new(&fast_settings(Provider::Anthropic, &server.url)).unwrap();
    let mut request = long_request("hi");
    request.system = String::new();
    for tool in &mut request.tools {
        tool.description = tool.description.repeat(30);
    }
    run(&client, &request).await.1.unwrap();
    let body = server.single_request().body;
    assert!(body.get("system").is_none());
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(
        tools.last().unwrap()["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(tools[0].get("cache_control").is_none());
}

#[tokio::test]
async fn a_short_prefix_is_sent_without_cache_fields() {
    let server = TestServer::start(vec![anthropic_reply(0)]).await;
    let client = AnthropicClient::new(&fast_settings(Provider::Anthropic, &server.url)).unwrap();
    run(&client, &simple_request("hi")).await.1.unwrap();
    let body = server.single_request().body;
    assert_eq!(body["system"], "You are a test.");
    assert!(body["tools"][0].get("cache_control").is_none());
}

fn openai_reply(cached: u64) -> Reply {
    Reply::sse(&[
        oa::role(),
        oa::text("ok"),
        oa::finish("stop"),
        oa::usage(40, 2, cached),
        oa::done(),
    ])
}

#[tokio::test]
async fn openai_gets_one_prompt_cache_key_per_prefix_and_reports_cached_tokens() {
    let server =
        TestServer::start(vec![openai_reply(0), openai_reply(1200), openai_reply(0)]).await;
    let settings = fast_settings(Provider::OpenAi, &format!("{}/v1", server.url));
    let client = OpenAiClient::new(&settings).unwrap();
    let request = long_request("hi");
    run(&client, &request).await.1.unwrap();
    let second = run(&client, &long_request("another question"))
        .await
        .1
        .unwrap();
    assert_eq!(second.usage.cache_read_tokens, 1200);
    let mut other = long_request("hi");
    other.system.push_str("Something else.");
    run(&client, &other).await.1.unwrap();

    let bodies: Vec<_> = server.requests().into_iter().map(|r| r.body).collect();
    let key = bodies[0]["prompt_cache_key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("eve-"), "{key}");
    assert_eq!(
        bodies[1]["prompt_cache_key"],
        key.as_str(),
        "same prefix, same key"
    );
    assert_ne!(
        bodies[2]["prompt_cache_key"],
        key.as_str(),
        "another prefix, another key"
    );
}

#[tokio::test]
async fn compatible_servers_and_short_prefixes_get_no_prompt_cache_key() {
    let server = TestServer::start(vec![openai_reply(0), openai_reply(0)]).await;
    let vllm = OpenAiClient::new(&fast_settings(
        Provider::Vllm,
        &format!("{}/v1", server.url),
    ))
    .unwrap();
    run(&vllm, &long_request("hi")).await.1.unwrap();
    let openai = OpenAiClient::new(&fast_settings(
        Provider::OpenAi,
        &format!("{}/v1", server.url),
    ))
    .unwrap();
    run(&openai, &simple_request("hi")).await.1.unwrap();
    for request in server.requests() {
        assert!(
            request.body.get("prompt_cache_key").is_none(),
            "{}",
            request.body
        );
    }
}
