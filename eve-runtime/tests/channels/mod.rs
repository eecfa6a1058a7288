//! Platform channels against the real server on `127.0.0.1:0`, with real signatures (HMAC-SHA256,
//! Ed25519) and a local fake of each platform's API that records the requests it receives.

mod config;
mod discord;
mod hostile;
mod restart;
mod slack;
mod store;
mod telegram;
mod webhook;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use eve_runtime::engine::Runtime;
use eve_runtime::server::{self, ServerConfig};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::server_support::{AgentDir, runtime};

/// One request the fake platform received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub json: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A fake platform API: answers every request like the platform would on success and records it.
pub struct Fake {
    pub base: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    notify: Arc<Notify>,
    stop: CancellationToken,
}

impl Fake {
    pub async fn start() -> Self {
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let notify = Arc::new(Notify::new());
        let (r, n) = (requests.clone(), notify.clone());
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (r, n) = (r.clone(), n.clone());
                async move {
                    let path = uri.path().to_owned();
                    let answer = if path.ends_with("/chat.postMessage") {
                        json!({"ok": true, "ts": "1700000000.000100"})
                    } else if path.ends_with("/sendMessage") {
                        json!({"ok": true, "result": {"message_id": 99}})
                    } else {
                        json!({"ok": true})
                    };
                    r.lock().unwrap().push(Recorded {
                        method: method.to_string(),
                        path,
                        headers,
                        json: serde_json::from_slice(&body).unwrap_or(Value::Null),
                        body: body.to_vec(),
                    });
                    n.notify_waiters();
                    axum::Json(answer)
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await
                .unwrap();
        });
        Self {
            base,
            requests,
            notify,
            stop,
        }
    }

    /// Everything received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived; returns them all.
    pub async fn wait(&self, n: usize) -> Vec<Recorded> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let notified = self.notify.notified();
            let now = self.requests();
            if now.len() >= n {
                return now;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "the fake platform got {} requests, expected {n}: {:#?}",
                    now.len(),
                    now
                );
            }
        }
    }

    /// Asserts that no further request arrives for a moment (the count stays at `n`).
    pub async fn stays_at(&self, n: usize) {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(self.requests().len(), n, "{:#?}", self.requests());
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The eve server of a project root (which outlives it, so a test can restart the server).
pub struct Served {
    pub base: String,
    pub http: reqwest::Client,
    pub runtime: Runtime,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Serves the current build of `root`, resolving `${VAR}`s from `vars`.
    pub async fn start(root: &Path, vars: &[(&str, &str)]) -> Self {
        let runtime = runtime(root);
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let manifest = runtime.builds().current().unwrap().manifest.clone();
        let config =
            ServerConfig::from_manifest(&manifest, &|k: &str| vars.get(k).cloned()).unwrap();
        let shutdown = config.shutdown.clone();
        let router = server::router(runtime.clone(), config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            server::serve(listener, router, stop).await.unwrap();
        });
        Self {
            base,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
            runtime,
            shutdown,
            task,
        }
    }

    /// POSTs `body` to the channel `name` with `headers`; returns status and JSON body.
    pub async fn post(
        &self,
        name: &str,
        headers: &[(&str, String)],
        body: impl Into<Vec<u8>>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .post(format!("{}/eve/v1/channels/{name}", self.base))
            .header("content-type", "application/json")
            .body(body.into());
        for (k, v) in headers {
            request = request.header(*k, v);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Turns a session has run.
    pub async fn turns(&self, session: &str) -> u64 {
        match self.runtime.session(session).await.unwrap() {
            Some(s) => s.turn_count,
            None => 0,
        }
    }

    /// The texts of the session's `message.received` events.
    pub async fn received(&self, session: &str) -> Vec<String> {
        self.runtime
            .events(session, 0, 0)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.kind == "message.received")
            .map(|e| e.data["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits until the session is idle with `turns` turns done.
    pub async fn until_turns(&self, session: &str, turns: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = self.runtime.session(session).await.unwrap()
                && s.turn_count >= turns
                && s.status == eve_runtime::store::SessionStatus::Idle
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "session {session} did not reach {turns} turns"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

/// An agent with the standard tools and the given channel files, built.
pub fn agent(channels: &[(&str, String)]) -> (AgentDir, PathBuf) {
    let agent = AgentDir::standard();
    for (name, yaml) in channels {
        agent.file(&format!("channels/{name}.yaml"), yaml);
    }
    agent.build();
    let root = agent.root();
    (agent, root)
}

/// Hex HMAC-SHA256 of `parts` with `key`.
pub fn hmac_hex(key: &str, parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    for p in parts {
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// Now, in Unix seconds.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Asserts a 401 in eve's error shape.
#[track_caller]
pub fn assert_unauthorized((status, body): &(u16, Value)) {
    assert_eq!(*status, 401, "{body}");
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(body["code"], "unauthorized", "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
}
