//! Test support for the HTTP server: a real agent folder compiled by the real compiler, a runtime
//! on a real SQLite store in a temp dir with the `mock/echo` model, and the real server on
//! `127.0.0.1:0`. The agent folder is the shared [`TestAgent`]'s; what is here is the runtime's.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use eve_compile::Project;
use eve_runtime::engine::{FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig};
use eve_runtime::model::mock::MockClient;
use eve_runtime::server::{self, RouterOptions, ServerConfig};
use eve_test_support::capture::parse_ndjson;
use eve_test_support::{TestAgent, json_or_text};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// An agent project in a temp dir ([`TestAgent`]) that the real compiler builds.
pub struct AgentDir {
    pub agent: TestAgent,
}

impl AgentDir {
    /// `agent/instructions.md`, `agent/agent.yaml` without built-in tools, and nothing else.
    pub fn new() -> Self {
        Self {
            agent: TestAgent::new(),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.agent.root().to_path_buf()
    }

    /// Writes `agent/<rel>`.
    pub fn file(&self, rel: &str, content: &str) -> &Self {
        self.agent.file(rel, content);
        self
    }

    /// A shell tool `tools/<name>.sh` with front matter `front` (YAML lines) and `body`.
    pub fn tool(&self, name: &str, front: &str, body: &str) -> &Self {
        self.agent.tool(name, front, body);
        self
    }

    /// The tools of the captures: `get_weather` (read) and `refund_charge` (needs approval), a
    /// slow tool, and the `release` skill.
    pub fn standard() -> Self {
        let agent = Self::new();
        agent
            .tool(
                "get_weather",
                "description: Get the weather for a city.\neffect: read\ninput:\n  type: object\n  \
                 properties:\n    city: {type: string}\n  required: [city]",
                "cat >/dev/null\necho '{\"city\":\"Paris\",\"condition\":\"Sunny\",\"temperatureF\":72}'\n",
            )
            .tool(
                "refund_charge",
                "description: Refund charge.\napproval: always\ninput:\n  type: object\n  \
                 properties:\n    chargeId: {type: string}\n    amount: {type: number}",
                "input=$(cat)\necho \"{\\\"refunded\\\":true,\\\"request\\\":$input}\"\n",
            )
            .tool(
                "slow",
                "description: Takes a while.\neffect: read\ninput: {type: object}",
                "cat >/dev/null\nsleep 1.5\necho '{\"done\":true}'\n",
            )
            .file(
                "skills/release.md",
                "---\ndescription: The release checklist.\n---\n# Release checklist\n\n1. Bump the \
                 version.\n2. Update the changelog.\n",
            );
        agent
    }

    /// Builds the agent (`.eve/current`); panics with the diagnostics on errors.
    pub fn build(&self) -> String {
        let project = Project::at(self.root(), self.root().join("agent"));
        let built = eve_compile::build::build(&project).unwrap();
        match built.hash {
            Some(hash) => hash,
            None => panic!("build failed: {:#?}", built.output.diagnostics),
        }
    }
}

/// The runtime of a project: `mock/echo`, the store at `.eve/eve.db`.
pub fn runtime(root: &std::path::Path) -> Runtime {
    runtime_with(root, |_| {})
}

/// [`runtime`], with `tweak` applied to its configuration first.
pub fn runtime_with(root: &std::path::Path, tweak: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    let model = ResolvedModel {
        client: Arc::new(MockClient::new("echo", None).unwrap()),
        model: "echo".to_owned(),
        model_id: "mock/echo".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let mut config =
        RuntimeConfig::new(root.join(".eve"), Arc::new(FixedModelProvider(model))).unwrap();
    config.sandbox_helper = std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox"));
    tweak(&mut config);
    Runtime::new(config)
}

/// A server on `127.0.0.1:0`.
pub struct TestServer {
    pub agent: AgentDir,
    pub base: String,
    pub http: reqwest::Client,
    pub runtime: Runtime,
    pub shutdown: CancellationToken,
    pub hash: String,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Builds `agent` and serves it with no variables set.
    pub async fn start(agent: AgentDir) -> Self {
        Self::start_with(agent, &[], |c| c).await
    }

    /// Builds and serves `agent`, resolving `${VAR}`s from `vars`, then lets `tweak` adjust the
    /// configuration.
    pub async fn start_with(
        agent: AgentDir,
        vars: &[(&str, &str)],
        tweak: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> Self {
        Self::start_full(agent, vars, tweak, |_| {}, |_| RouterOptions::default()).await
    }

    /// [`TestServer::start_with`], with `tweak_runtime` applied to the runtime's configuration
    /// and the router's options made by `options` (given the runtime).
    pub async fn start_full(
        agent: AgentDir,
        vars: &[(&str, &str)],
        tweak: impl FnOnce(ServerConfig) -> ServerConfig,
        tweak_runtime: impl FnOnce(&mut RuntimeConfig),
        options: impl FnOnce(&Runtime) -> RouterOptions,
    ) -> Self {
        let hash = agent.build();
        let runtime = runtime_with(&agent.root(), tweak_runtime);
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let manifest = runtime.builds().current().unwrap().manifest.clone();
        let config =
            ServerConfig::from_manifest(&manifest, &|k: &str| vars.get(k).cloned()).unwrap();
        let mut config = tweak(config);
        config.heartbeat = Duration::from_millis(200);
        let shutdown = config.shutdown.clone();
        let options = options(&runtime);
        let router = server::router_with(runtime.clone(), config, options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            server::serve(listener, router, stop).await.unwrap();
        });
        Self {
            agent,
            base,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
            runtime,
            shutdown,
            hash,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POSTs a JSON body; returns status and JSON body.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        reply(response).await
    }

    /// POSTs raw bytes with a JSON content type.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        reply(response).await
    }

    /// GETs; returns status and JSON body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        reply(response).await
    }

    /// Creates a session with a first message; returns its id.
    pub async fn create(&self, message: &str) -> String {
        let (status, body) = self
            .post("/eve/v1/session", serde_json::json!({"message": message}))
            .await;
        assert_eq!(status, 202, "{body}");
        body["sessionId"].as_str().unwrap().to_owned()
    }

    /// The raw response of a stream request.
    pub async fn stream_response(&self, session: &str, query: &str) -> reqwest::Response {
        let url = self.url(&format!("/eve/v1/session/{session}/stream{query}"));
        self.http.get(url).send().await.unwrap()
    }

    /// The events of a stream request (which must end by itself).
    pub async fn stream(&self, session: &str, query: &str) -> Vec<Value> {
        let response = self.stream_response(session, query).await;
        assert_eq!(response.status(), 200);
        let text = tokio::time::timeout(Duration::from_secs(20), response.text())
            .await
            .expect("the stream did not end")
            .unwrap();
        assert!(
            text.starts_with('\n'),
            "the NDJSON body starts with a blank line"
        );
        parse_ndjson(&text)
    }

    /// Follows the session from `from` until it is at rest.
    pub async fn until_rest(&self, session: &str, from: u64) -> Vec<Value> {
        self.stream(session, &format!("?startIndex={from}")).await
    }

    /// [`TestServer::until_rest`] with the `Authorization` header `auth`.
    pub async fn until_rest_as(&self, auth: &str, session: &str, from: u64) -> Vec<Value> {
        let url = self.url(&format!(
            "/eve/v1/session/{session}/stream?startIndex={from}"
        ));
        let response = self
            .http
            .get(url)
            .header("authorization", auth)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let text = tokio::time::timeout(Duration::from_secs(20), response.text())
            .await
            .expect("the stream did not end")
            .unwrap();
        parse_ndjson(&text)
    }

    /// The events stored from `from` when the request arrives, read with the `Authorization`
    /// header `auth` (a bounded read: it never waits for the session to come to rest).
    pub async fn stored_as(&self, auth: &str, session: &str, from: u64) -> Vec<Value> {
        let url = self.url(&format!(
            "/eve/v1/session/{session}/stream?startIndex={from}&follow=false"
        ));
        let response = self
            .http
            .get(url)
            .header("authorization", auth)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        parse_ndjson(&response.text().await.unwrap())
    }

    /// Every stored event.
    pub async fn all(&self, session: &str) -> Vec<Value> {
        self.stream(session, "?follow=false").await
    }

    /// Stored event count.
    pub async fn count(&self, session: &str) -> u64 {
        self.runtime
            .session(session)
            .await
            .unwrap()
            .unwrap()
            .event_count
    }

    /// Stops this server and its runtime, then starts a new runtime and server on the same
    /// project (what a restart of the process does).
    pub async fn restart(self) -> Self {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        self.runtime.shutdown().await;
        drop(self.runtime);
        Self::start(self.agent).await
    }

    /// Stops the server and its runtime, and hands back the project (to change its files
    /// before [`TestServer::start`] serves it again).
    pub async fn stop_keeping(self) -> AgentDir {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        self.runtime.shutdown().await;
        drop(self.runtime);
        self.agent
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

/// Status and JSON body (a JSON string when the body is not JSON) of a response.
async fn reply(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, json_or_text(response.text().await.unwrap()))
}
