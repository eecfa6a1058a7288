//! The HTTP side of a remote agent: requests to another eve deployment's session API, through
//! the guarded client, with its `${VAR}` headers and bearer token resolved at each request.
//!
//! The remote's URL is reached under the egress rules of the runtime's own requests: the
//! internet, never loopback, link-local, metadata or private addresses, nor eve's own
//! listeners; redirects stay within the origin. `EVE_TEST_REMOTE_LOOPBACK=1` (tests only, debug
//! builds only) lists the URL's host and port by name, so a remote on this machine's loopback can
//! be reached.

use std::time::Duration;

use eve_compile::Agent;
use eve_sandbox::egress::EgressPolicy;
use reqwest::{StatusCode, Url};
use serde_json::Value;

use crate::engine::Runtime;
use crate::tools::guarded::Egress;

use crate::env_vars::EVE_TEST_REMOTE_LOOPBACK;
/// How long one request (not a stream) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer to a request (not a stream) read from the remote; a longer one is a fault.
pub(crate) const MAX_ANSWER: usize = 1024 * 1024;
/// Longest line of the remote's event stream; a longer one (or an endless one) is a fault.
pub(crate) const MAX_LINE: usize = 4 * 1024 * 1024;

/// Why a request to the remote did not answer as hoped.
#[derive(Debug)]
pub(crate) enum Fault {
    /// It may answer later: unreachable, a 5xx, a timeout. Try again.
    Transient(String),
    /// It never will: a refusal, bad settings, a 4xx.
    Fatal(String),
}

impl Fault {
    pub(crate) fn message(&self) -> &str {
        match self {
            Self::Transient(m) | Self::Fatal(m) => m,
        }
    }
}

/// One remote agent, ready to be called.
pub(crate) struct Remote {
    /// The subagent's name (messages).
    pub(crate) name: String,
    /// The base URL as configured (messages: the resolved one may carry a secret).
    pub(crate) shown: String,
    base: Url,
    headers: reqwest::header::HeaderMap,
    client: reqwest::Client,
    /// The principal asserted to the remote, when the agent forwards it.
    pub(crate) forwarded: Option<Value>,
}

impl Remote {
    /// The remote `agent` names, its settings resolved from the runtime's environment; `owner` is
    /// the calling session's principal. `Err` says what is wrong (an unset variable, a bad URL).
    pub(crate) fn new(rt: &Runtime, agent: &Agent, owner: Option<&str>) -> Result<Self, String> {
        let Some(remote) = &agent.remote else {
            return Err(format!("`{}` is not a remote agent", agent.name));
        };
        let env = &rt.inner.config.env;
        let lookup = |name: &str| env(name);
        let expand = |text: &str, place: &str| {
            crate::tools::template::expand_vars(text, &lookup).map_err(|var| {
                format!(
                    "remote agent `{}`: `${{{var}}}` in its {place} is not set in the environment",
                    agent.name
                )
            })
        };
        let url = expand(&remote.url, "url")?;
        let mut base = Url::parse(url.trim()).map_err(|e| {
            format!(
                "remote agent `{}`: `url` `{}` is not a URL ({e})",
                agent.name, remote.url
            )
        })?;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (key, value) in &remote.headers {
            let value = expand(value, &format!("header `{key}`"))?;
            insert(&mut headers, key, &value, &agent.name)?;
        }
        if let Some(token) = &remote.bearer {
            let token = expand(token, "auth token")?;
            insert(
                &mut headers,
                "authorization",
                &format!("Bearer {}", token.trim()),
                &agent.name,
            )?;
        }
        let client = client(rt, &base).map_err(|why| {
            format!(
                "remote agent `{}` cannot be reached at `{}`: {why}",
                agent.name, remote.url
            )
        })?;
        let forwarded = match owner {
            Some(principal) if remote.forward_principal => Some(principal_context(principal)),
            _ => None,
        };
        if let Some(principal) = &forwarded {
            insert(
                &mut headers,
                FORWARDED_HEADER,
                &principal.to_string(),
                &agent.name,
            )?;
        }
        Ok(Self {
            name: agent.name.clone(),
            shown: remote.url.clone(),
            base,
            headers,
            client,
            forwarded,
        })
    }

    fn url(&self, path: &str) -> Result<Url, Fault> {
        self.base
            .join(path.trim_start_matches('/'))
            .map_err(|e| Fault::Fatal(format!("bad path `{path}`: {e}")))
    }

    /// `POST path` with a JSON body: the answer's status and JSON body.
    pub(crate) async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), Fault> {
        let url = self.url(path)?;
        let response = self
            .client
            .post(url)
            .headers(self.headers.clone())
            .timeout(REQUEST_TIMEOUT)
            .json(body)
            .send()
            .await
            .map_err(|e| self.request_fault(&e))?;
        let status = response.status();
        let text = self.capped(response).await?;
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status.as_u16(), json))
    }

    /// `GET` of a session's stream from event `start`, following live.
    pub(crate) async fn stream(
        &self,
        session: &str,
        start: u64,
    ) -> Result<reqwest::Response, Fault> {
        let mut url = self.url(&format!("eve/v1/session/{}/stream", segment(session)))?;
        url.query_pairs_mut()
            .append_pair("startIndex", &start.to_string())
            .append_pair("follow", "true");
        let response = self
            .client
            .get(url)
            .headers(self.headers.clone())
            .header(reqwest::header::ACCEPT, "application/x-ndjson")
            .send()
            .await
            .map_err(|e| self.request_fault(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = match self.capped(response).await {
            Ok(body) => body,
            Err(fault) => return Err(fault),
        };
        Err(status_fault(status.as_u16(), &body, &self.name))
    }

    /// The body of an answer, at most [`MAX_ANSWER`] bytes (a hostile remote's endless answer
    /// is a fault, never held whole in memory).
    async fn capped(&self, response: reqwest::Response) -> Result<String, Fault> {
        use crate::tools::guarded::{CappedRead, read_capped};
        match read_capped(response, MAX_ANSWER).await {
            Ok(body) => Ok(String::from_utf8_lossy(&body).into_owned()),
            Err(CappedRead::TooLarge) => Err(Fault::Fatal(format!(
                "remote agent `{}` answered more than {MAX_ANSWER} bytes",
                self.name
            ))),
            Err(CappedRead::Failed(e)) => Err(Fault::Transient(e.to_string())),
        }
    }

    fn request_fault(&self, error: &reqwest::Error) -> Fault {
        if let Some(refused) = crate::tools::guarded::refusal_in(error) {
            return Fault::Fatal(format!(
                "remote agent `{}`: the request to `{}` was refused: {refused}",
                self.name, self.shown
            ));
        }
        Fault::Transient(format!(
            "remote agent `{}` at `{}` did not answer: {error}",
            self.name, self.shown
        ))
    }
}

/// The fault an answer with `status` is: a 5xx or 429 may pass, anything else will not.
pub(crate) fn status_fault(status: u16, body: &str, name: &str) -> Fault {
    let mut body = body.trim().to_owned();
    body.truncate(400);
    let message = format!("remote agent `{name}` answered HTTP {status}: {body}");
    if status >= 500 || status == 429 || status == 408 {
        Fault::Transient(message)
    } else {
        Fault::Fatal(message)
    }
}

/// Header that carries the forwarded principal on requests without a body (the stream).
pub(crate) const FORWARDED_HEADER: &str = "x-eve-forwarded-principal";

/// eve's `SessionAuthContext` of a principal id (`token:ROUTER`, `jwt:alice`).
pub(crate) fn principal_context(principal: &str) -> Value {
    let (kind, _) = principal.split_once(':').unwrap_or(("local", principal));
    serde_json::json!({
        "attributes": {},
        "authenticator": kind,
        "principalId": principal,
        "principalType": "user",
    })
}

/// One path segment, percent-encoded.
pub(crate) fn segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn insert(
    headers: &mut reqwest::header::HeaderMap,
    key: &str,
    value: &str,
    agent: &str,
) -> Result<(), String> {
    let name = reqwest::header::HeaderName::from_bytes(key.as_bytes())
        .map_err(|e| format!("remote agent `{agent}`: header name `{key}` is invalid: {e}"))?;
    let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|e| {
        format!("remote agent `{agent}`: the value of header `{key}` is invalid: {e}")
    })?;
    value.set_sensitive(true);
    headers.insert(name, value);
    Ok(())
}

/// The guarded client of requests to `base`.
fn client(rt: &Runtime, base: &Url) -> Result<reqwest::Client, String> {
    let (Some(host), Some(port)) = (base.host_str(), base.port_or_known_default()) else {
        return Err("the URL has no host".to_owned());
    };
    let loopback = cfg!(debug_assertions)
        && (rt.inner.config.env)(EVE_TEST_REMOTE_LOOPBACK)
            .is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
    let policy = if loopback {
        let rule = format!("{host}:{port}")
            .parse::<eve_sandbox::egress::Rule>()
            .map_err(|e| e.to_string())?;
        EgressPolicy::Allow(vec![rule])
    } else {
        EgressPolicy::All
    };
    let egress = Egress {
        policy,
        own: rt.inner.exec.own_listeners(),
    };
    crate::tools::guarded::check_url(base, &egress).map_err(|refused| refused.to_string())?;
    rt.inner.http.client(&egress, port)
}

/// Whether an answer's status says the request was taken.
pub(crate) fn ok(status: u16) -> bool {
    StatusCode::from_u16(status).is_ok_and(|s| s.is_success())
}
