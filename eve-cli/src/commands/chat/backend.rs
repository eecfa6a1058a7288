//! The two places an `eve chat` session can live: this process's runtime, or a server reached
//! over the session API (`--url`, `--token`). Both give the chat the same calls (create, send,
//! follow, answer, cancel, compact, clear) and the same stream of wire events.

use anyhow::Context;
use eve_runtime::engine::Runtime;
use eve_runtime::server::{self, EventCursor, Next};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A client of the session API.
pub(crate) struct Remote {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Remote {
    pub(crate) fn new(url: &str, token: Option<String>) -> anyhow::Result<Self> {
        let base = url.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--url must start with http:// or https://, found `{url}`");
        }
        let http = reqwest::Client::builder()
            .build()
            .context("cannot set up the HTTP client")?;
        Ok(Self { http, base, token })
    }

    /// The server's URL as it may be shown (for `/info`).
    pub(super) fn shown_base(&self) -> String {
        self.shown_url()
    }

    /// The server's URL as it may be shown: without a password it may carry.
    fn shown_url(&self) -> String {
        match reqwest::Url::parse(&self.base) {
            Ok(mut url) if url.password().is_some() => {
                let _ = url.set_password(None);
                url.as_str().trim_end_matches('/').to_owned()
            }
            _ => self.base.clone(),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// What a failed request says: the server's error, or for a refused token what to fix.
    fn refusal(&self, status: reqwest::StatusCode, value: &Value) -> anyhow::Error {
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return anyhow::anyhow!(
                "{} refused the credentials (HTTP 401): {}; check --token (or EVE_TOKEN) \
                 against the server's agent/channels/eve.yaml",
                self.base,
                if self.token.is_some() {
                    "the token was not accepted"
                } else {
                    "it needs a token and none was given"
                }
            );
        }
        let message = value["error"].as_str().unwrap_or("request failed");
        anyhow::anyhow!("{message} (HTTP {})", status.as_u16())
    }

    /// The error of a request that got no answer at all.
    fn unreachable(&self) -> String {
        format!(
            "cannot reach {}: is `eve serve` (or `eve dev`) running there? Check --url (or EVE_URL)",
            self.base
        )
    }

    /// GETs `path`; the JSON answer, or the server's error as an error.
    pub(super) async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .with_context(|| self.unreachable())?;
        let status = response.status();
        let value: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(self.refusal(status, &value));
        }
        Ok(value)
    }

    /// Whether the server answers and takes our credentials, before the first prompt.
    pub(crate) async fn check(&self) -> anyhow::Result<()> {
        self.get("/eve/v1/info").await.map(|_| ())
    }

    /// The session an id, a prefix or `--last` (`None`) names on the server.
    pub(crate) async fn resolve(&self, wanted: Option<&str>) -> anyhow::Result<String> {
        if let Some(id) = wanted
            && self.get(&format!("/eve/v1/sessions/{id}")).await.is_ok()
        {
            return Ok(id.to_owned());
        }
        let list = self.get("/eve/v1/sessions?limit=1000").await?;
        let candidates: Vec<crate::commands::sessions::Candidate> = list["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| crate::commands::sessions::Candidate {
                id: s["id"].as_str().unwrap_or_default().to_owned(),
                status: s["status"].as_str().unwrap_or_default().to_owned(),
                updated: s["updatedAt"].as_str().unwrap_or_default().to_owned(),
                parent: s["parent"].as_str().map(str::to_owned),
            })
            .collect();
        crate::commands::sessions::pick(&candidates, wanted, &self.base)
    }

    /// POSTs `body`; returns the JSON answer, or the server's error as an error.
    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let response = self
            .request(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .with_context(|| self.unreachable())?;
        let status = response.status();
        let value: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(self.refusal(status, &value));
        }
        Ok(value)
    }

    /// `GET …/stream` with `query`; the response, checked.
    async fn stream(&self, session: &str, query: &str) -> anyhow::Result<reqwest::Response> {
        let response = self
            .request(
                reqwest::Method::GET,
                &format!("/eve/v1/session/{session}/stream?{query}"),
            )
            .send()
            .await
            .with_context(|| self.unreachable())?;
        let status = response.status();
        if !status.is_success() {
            let value: Value = response.json().await.unwrap_or(Value::Null);
            return Err(self.refusal(status, &value));
        }
        Ok(response)
    }
}

/// Where the session lives.
pub(crate) enum Backend {
    Local(Runtime),
    Remote(Remote),
}

/// A stream of wire events (`{type, data, meta}`) that ends when the session is at rest.
pub(crate) enum Follow {
    Local(Box<EventCursor>),
    Remote {
        body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
        buffer: Vec<u8>,
        done: bool,
    },
}

impl Follow {
    pub(crate) async fn next(&mut self) -> anyhow::Result<Option<Value>> {
        match self {
            Self::Local(cursor) => match cursor.next(None).await {
                Next::Event(event) => Ok(Some(event.to_wire())),
                Next::Tick => Ok(Some(Value::Null)),
                Next::End => Ok(None),
                Next::Failed(failure) => {
                    anyhow::bail!("the session's events cannot be read: {}", failure.error)
                }
            },
            Self::Remote { body, buffer, done } => loop {
                if let Some(pos) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=pos).collect();
                    let text = String::from_utf8_lossy(&line);
                    if text.trim().is_empty() {
                        continue;
                    }
                    let value: Value = serde_json::from_str(text.trim()).with_context(|| {
                        format!("the server sent a line that is not JSON: {}", text.trim())
                    })?;
                    if value["type"] == server::STREAM_ERROR {
                        anyhow::bail!(
                            "the server could not read the session's events: {}",
                            value["data"]["error"].as_str().unwrap_or("no reason given")
                        );
                    }
                    return Ok(Some(value));
                }
                if *done {
                    return Ok(None);
                }
                match body.next().await {
                    Some(chunk) => buffer.extend_from_slice(&chunk.context("the stream broke")?),
                    None => {
                        *done = true;
                        buffer.push(b'\n');
                    }
                }
            },
        }
    }
}

impl Backend {
    pub(crate) async fn create(&self) -> anyhow::Result<String> {
        match self {
            Self::Local(rt) => Ok(rt.create_session(None).await?),
            Self::Remote(r) => {
                let answer = r.post("/eve/v1/session", json!({})).await?;
                answer["sessionId"]
                    .as_str()
                    .map(str::to_owned)
                    .context("the server did not return a session id")
            }
        }
    }

    /// Every stored event of a session.
    pub(crate) async fn history(&self, session: &str) -> anyhow::Result<Vec<Value>> {
        match self {
            Self::Local(rt) => {
                if rt.session(session).await?.is_none() {
                    anyhow::bail!("no session `{session}` in {}", rt.state_dir().display());
                }
                Ok(rt
                    .events(session, 0, 0)
                    .await?
                    .iter()
                    .map(|e| e.to_wire())
                    .collect())
            }
            Self::Remote(r) => {
                let response = r.stream(session, "startIndex=0&follow=false").await?;
                let text = response.text().await.context("cannot read the stream")?;
                Ok(text
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect())
            }
        }
    }

    /// Index of the session's next event.
    pub(crate) async fn tail(&self, session: &str) -> anyhow::Result<u64> {
        match self {
            Self::Local(rt) => Ok(rt
                .session(session)
                .await?
                .map(|s| s.event_count)
                .unwrap_or(0)),
            Self::Remote(r) => {
                let response = r.stream(session, "startIndex=-1&follow=false").await?;
                let tail: i64 = response
                    .headers()
                    .get("x-eve-stream-tail-index")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(-1);
                Ok(u64::try_from(tail + 1).unwrap_or(0))
            }
        }
    }

    pub(crate) async fn follow(&self, session: &str, from: u64) -> anyhow::Result<Follow> {
        match self {
            Self::Local(rt) => Ok(Follow::Local(Box::new(EventCursor::follow(
                rt.clone(),
                session.to_owned(),
                from,
                CancellationToken::new(),
            )))),
            Self::Remote(r) => {
                let response = r.stream(session, &format!("startIndex={from}")).await?;
                let body = response
                    .bytes_stream()
                    .map(|chunk| chunk.map(|b| b.to_vec()))
                    .boxed();
                Ok(Follow::Remote {
                    body,
                    buffer: Vec::new(),
                    done: false,
                })
            }
        }
    }

    pub(crate) async fn send(&self, session: &str, text: &str) -> anyhow::Result<()> {
        match self {
            Self::Local(rt) => {
                rt.post_message(session, text).await?;
            }
            Self::Remote(r) => {
                r.post(
                    &format!("/eve/v1/session/{session}"),
                    json!({"message": text}),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Answers `request`; `Some(note)` when someone else answered it first (a console, a
    /// platform user, `eve sessions approve`): their answer counts, and the note says whose.
    pub(crate) async fn answer(
        &self,
        session: &str,
        request: &str,
        approve: bool,
        reason: Option<String>,
    ) -> anyhow::Result<Option<String>> {
        let first = |request: &str, outcome: &str, by: &str| {
            format!("({request} was already answered: {outcome} by {by}; the first answer counts)")
        };
        match self {
            Self::Local(rt) => {
                match rt
                    .answer_input(session, Some(request), approve, reason)
                    .await
                {
                    Ok(_) => {}
                    Err(eve_runtime::engine::RuntimeError::InputAlreadyAnswered(won)) => {
                        let by = won
                            .responder
                            .as_deref()
                            .unwrap_or(eve_runtime::engine::LOCAL_PRINCIPAL);
                        return Ok(Some(first(&won.id, won.status.as_str(), by)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Self::Remote(r) => {
                let option = if approve { "approve" } else { "cancel" };
                let mut response = json!({"requestId": request, "optionId": option});
                if let Some(reason) = reason {
                    response["text"] = json!(reason);
                }
                let answer = r
                    .request(reqwest::Method::POST, &format!("/eve/v1/session/{session}"))
                    .json(&json!({"inputResponses": [response]}))
                    .send()
                    .await
                    .with_context(|| r.unreachable())?;
                let status = answer.status();
                let value: Value = answer.json().await.unwrap_or(Value::Null);
                if status == reqwest::StatusCode::CONFLICT
                    && value["code"] == "input_already_answered"
                {
                    let text = |k: &str| value[k].as_str().unwrap_or("?").to_owned();
                    return Ok(Some(first(
                        &text("requestId"),
                        &text("outcome"),
                        &text("responderPrincipalId"),
                    )));
                }
                if !status.is_success() {
                    return Err(r.refusal(status, &value));
                }
            }
        }
        Ok(None)
    }

    /// Cancels the turn; `false` when there was none.
    pub(crate) async fn cancel(&self, session: &str) -> anyhow::Result<bool> {
        match self {
            Self::Local(rt) => {
                let idle = rt.session(session).await?.is_none_or(|s| {
                    s.status == eve_runtime::store::SessionStatus::Idle && !s.cancel_requested
                });
                if idle {
                    return Ok(false);
                }
                rt.cancel(session).await?;
                Ok(true)
            }
            Self::Remote(r) => {
                let answer = r
                    .post(&format!("/eve/v1/session/{session}/cancel"), json!({}))
                    .await?;
                Ok(answer["status"] != "no_active_turn")
            }
        }
    }

    pub(crate) async fn control(&self, session: &str, what: &str) -> anyhow::Result<()> {
        match self {
            Self::Local(rt) => match what {
                "compact" => rt.compact(session).await?,
                _ => rt.clear(session).await?,
            },
            Self::Remote(r) => {
                r.post(&format!("/eve/v1/session/{session}/{what}"), json!({}))
                    .await?;
            }
        }
        Ok(())
    }

    /// The command that continues `session` later: with `--url` the same server (and a
    /// `--token` placeholder when the token was given as a flag; never the token itself).
    pub(crate) fn continue_command(&self, session: &str) -> String {
        match self {
            Self::Local(_) => format!("eve chat --session {session}"),
            Self::Remote(r) => {
                let from_env = std::env::var(eve_runtime::env_vars::EVE_TOKEN).ok();
                let token = if r.token.is_some() && r.token != from_env {
                    " --token <TOKEN>"
                } else {
                    ""
                };
                format!(
                    "eve chat --url {}{token} --session {session}",
                    r.shown_url()
                )
            }
        }
    }

    /// Waits for in-process drivers to finish (local only).
    pub(crate) async fn settle(&self, session: &str) {
        if let Self::Local(rt) = self {
            rt.settled(session).await;
        }
    }
}
