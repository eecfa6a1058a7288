//! Running a case against a running server over the session API (`eve eval --url`).
//!
//! Each case is a new session on the server: its first message starts it, and every later
//! turn (a message, or an answer to the approvals its turn waits on) is posted once the turn
//! before has come to rest. The session's stream is read as NDJSON from the first event on, so
//! the checks see the same events as in-process runs. The server's own model answers: a case's
//! `mock` and `model` are for in-process runs, and a scorer `command` needs the session's
//! workspace, which a server does not share.

use std::time::Duration;

use anyhow::{Context, bail};
use eve_compile::evals::{EvalCase, Failure, Turn};
use serde_json::{Value, json};

use super::Run;

/// The HTTP runner.
pub(crate) struct Remote {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Remote {
    /// A runner for the server at `url`.
    pub fn new(url: &str, token: Option<String>) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let resp = self
            .request(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("cannot reach {}{path}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "{}{path} answered {status}: {}",
                self.base,
                body["error"].as_str().unwrap_or("(no message)")
            );
        }
        Ok(body)
    }

    /// Reads the session's events from `from` until the running turn rests: the session waits
    /// for a message (`session.waiting`) or the turn waits for input (`turn.waiting`).
    async fn until_rest(
        &self,
        session: &str,
        events: &mut Vec<(String, Value)>,
    ) -> anyhow::Result<()> {
        let from = events.len();
        let mut resp = self
            .request(
                reqwest::Method::GET,
                &format!("/eve/v1/session/{session}/stream?startIndex={from}"),
            )
            .send()
            .await
            .with_context(|| format!("cannot follow session {session}"))?;
        if !resp.status().is_success() {
            bail!("the stream of session {session} answered {}", resp.status());
        }
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            buf.extend_from_slice(&chunk);
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                let kind = v["type"].as_str().unwrap_or_default().to_owned();
                let rest = matches!(kind.as_str(), "session.waiting" | "turn.waiting");
                events.push((kind, v["data"].clone()));
                if rest {
                    return Ok(());
                }
            }
        }
        bail!("the stream of session {session} ended before the turn came to rest")
    }

    /// Runs the case's turns on the server.
    pub async fn run(&self, case: &EvalCase) -> anyhow::Result<Run> {
        let mut turns = case.messages.iter();
        let first = match turns.next() {
            Some(Turn::User(m)) => m.clone(),
            _ => bail!("the case does not start with a user message"),
        };
        // The case's `output_schema` is asked of every turn it sends.
        let body = |message: &str| {
            let mut body = json!({"message": message});
            if let Some(schema) = &case.output_schema {
                body["outputSchema"] = schema.clone();
            }
            body
        };
        let started = self.post("/eve/v1/session", body(&first)).await?;
        let id = started["sessionId"]
            .as_str()
            .context("the server's answer has no sessionId")?
            .to_owned();
        let mut events = Vec::new();
        let mut failures = Vec::new();
        loop {
            self.until_rest(&id, &mut events).await?;
            let waiting = events.last().is_some_and(|(k, _)| k == "turn.waiting");
            let pending: Vec<String> = pending_requests(&events);
            match (turns.next(), waiting) {
                (None, _) => break,
                (Some(Turn::User(m)), false) => {
                    self.post(&format!("/eve/v1/session/{id}"), body(m)).await?;
                }
                (Some(Turn::Answer { approve, reason }), true) => {
                    let option = if *approve { "approve" } else { "cancel" };
                    let answers: Vec<Value> = pending
                        .iter()
                        .map(|r| {
                            let mut a = json!({"requestId": r, "optionId": option});
                            if let Some(t) = reason {
                                a["text"] = json!(t);
                            }
                            a
                        })
                        .collect();
                    self.post(
                        &format!("/eve/v1/session/{id}"),
                        json!({"inputResponses": answers}),
                    )
                    .await?;
                }
                (Some(Turn::User(_)), true) => {
                    failures.push(Failure::new(
                        "messages",
                        "an answer (`{approve: true}` or `{approve: false}`) before the next message",
                        "the turn was waiting for approval; the rest of the case was not sent",
                    ));
                    break;
                }
                (Some(Turn::Answer { .. }), false) => {
                    failures.push(Failure::new(
                        "messages",
                        "the turn to wait for an approval that the case answers",
                        "it ended without asking for one; the rest of the case was not sent",
                    ));
                    break;
                }
            }
        }
        if case.expect.command.is_some() {
            failures.push(Failure::new(
                "command",
                "a scorer run in the session's workspace",
                "`--url` runs cannot reach the server's workspaces; run this case without `--url`",
            ));
        }
        Ok(Run {
            events,
            cost_usd: 0.0,
            failures,
            session: id,
        })
    }
}

/// Ids of the input requests of the last `input.requested` not yet resolved.
fn pending_requests(events: &[(String, Value)]) -> Vec<String> {
    let mut pending: Vec<String> = Vec::new();
    for (kind, data) in events {
        match kind.as_str() {
            "input.requested" => {
                for r in data["requests"].as_array().into_iter().flatten() {
                    if let Some(id) = r["requestId"].as_str() {
                        pending.push(id.to_owned());
                    }
                }
            }
            "input.resolved" => {
                for r in data["resolutions"].as_array().into_iter().flatten() {
                    if let Some(id) = r["requestId"].as_str() {
                        pending.retain(|p| p != id);
                    }
                }
            }
            _ => {}
        }
    }
    pending
}
