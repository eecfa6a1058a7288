//! A generic signed webhook: any system that can compute an HMAC can start turns.
//!
//! `X-Eve-Signature: sha256=<hex>` is the HMAC-SHA256 of the raw body keyed with `secret`. With
//! `replay_window_seconds` set, requests must also carry `X-Eve-Timestamp` (Unix seconds, within
//! the window) and the signature covers `{timestamp}.{raw body}`, so a captured request cannot be
//! replayed later. The body is `{"message": "…", "session_key"?: "…"}`, or any other JSON, which
//! is given to the agent as the message (pretty-printed). Requests with the same `session_key`
//! share one session; without one each request starts a new session. The answer is `202
//! {"ok": true, "sessionId", "status": "accepted"}` once the message is durably accepted. With
//! `reply_url` set, what happens to the turn (approval needed, the answer, a failure) is POSTed
//! there as JSON, signed the same way.
//!
//! A signed request can be captured and sent again inside the replay window, so deliveries are
//! de-duplicated durably: by the delivery id header (`delivery_header`, default
//! `X-Eve-Delivery`; GitHub's is `X-GitHub-Delivery`) when the request has one, else, with a
//! replay window, by the signature itself (it covers the timestamp, so a legitimate new delivery
//! never repeats it). A repeat is answered `400 already_accepted` and starts nothing.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{Value, json};

use super::deliver::{Delivery, Outcome, deliver};
use super::error::ChannelError;
use super::outbound::{Call, Outbound, json_bytes};
use super::session::{self, Outgoing, Reply};
use super::signature::{check_hmac_hex, check_timestamp, hmac_sha256, signature_header};
use super::{Address, Ctx, Handler, Settings, header};
use crate::server::ServerError;
use crate::server::body;

/// Longest `session_key`.
const MAX_KEY: usize = 512;

/// A resolved webhook channel.
pub(crate) struct Webhook {
    secret: String,
    replay_window: Option<i64>,
    reply_url: Option<String>,
    delivery_header: String,
}

/// The default header naming a delivery's id.
const DELIVERY_HEADER: &str = "x-eve-delivery";

impl Webhook {
    /// Resolves `secret`, `replay_window_seconds` and `reply_url`.
    pub(super) fn resolve(settings: &Settings<'_>) -> Result<Self, ServerError> {
        let reply_url = match settings.optional("reply_url")? {
            None => None,
            Some(url) if url.is_empty() => None,
            Some(url) => match reqwest::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Some(url),
                _ => {
                    return Err(
                        settings.invalid(format!("`reply_url` `{url}` is not an http(s) URL"))
                    );
                }
            },
        };
        Ok(Self {
            secret: settings.required("secret")?,
            replay_window: settings.seconds("replay_window_seconds")?,
            reply_url,
            delivery_header: match settings.optional("delivery_header")? {
                Some(name) if !name.trim().is_empty() => {
                    let name = name.trim().to_ascii_lowercase();
                    if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                        return Err(settings.invalid(format!(
                            "`delivery_header` `{name}` is not an HTTP header name"
                        )));
                    }
                    name
                }
                _ => DELIVERY_HEADER.to_owned(),
            },
        })
    }

    fn reply(
        &self,
        outbound: &Outbound,
        url: &str,
        session: String,
        key: Option<String>,
    ) -> WebhookReply {
        WebhookReply {
            outbound: outbound.clone(),
            url: url.to_owned(),
            secret: self.secret.clone(),
            timestamped: self.replay_window.is_some(),
            session,
            key,
        }
    }
}

impl Handler for Webhook {
    const KIND: &'static str = "webhook";
    type Reply = WebhookReply;

    fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), ChannelError> {
        let signature = signature_header(headers, "X-Eve-Signature")?;
        let hex = signature.strip_prefix("sha256=").ok_or_else(|| {
            ChannelError::unauthorized(
                "The `X-Eve-Signature` header must be `sha256=<hex HMAC-SHA256>`.",
            )
        })?;
        let prefix = match self.replay_window {
            Some(window) => {
                let ts = check_timestamp(
                    header(headers, "x-eve-timestamp"),
                    now,
                    window,
                    "X-Eve-Timestamp",
                )?;
                format!("{ts}.")
            }
            None => String::new(),
        };
        check_hmac_hex(
            self.secret.as_bytes(),
            &[prefix.as_bytes(), body],
            hex,
            "The webhook signature does not match: sign the raw body with the channel's \
             `secret`.",
        )
    }

    /// Answers one delivery.
    async fn answer(
        &self,
        ctx: &Ctx<'_>,
        headers: &HeaderMap,
        payload: Value,
    ) -> Result<Response, ChannelError> {
        let (text, key) = message(&payload)?;
        let session = key
            .as_ref()
            .map(|key| session::session_id("webhook", &ctx.channel.name, key));
        let reply = self.reply_url.as_ref().map(|url| {
            let session = session.clone().unwrap_or_default();
            Box::new(self.reply(ctx.outbound, url, session, key.clone())) as Box<dyn Reply>
        });
        let id = match header(headers, &self.delivery_header).map(str::trim) {
            Some(id) if !id.is_empty() && id.len() <= MAX_KEY => Some(format!("id:{id}")),
            _ if self.replay_window.is_some() => header(headers, "x-eve-signature")
                .map(|signature| format!("sig:{}", signature.trim())),
            _ => None,
        };
        let delivery = Delivery {
            session: session.as_deref(),
            text: &text,
            id: id.as_deref(),
            remember: false,
            sender: None,
        };
        match deliver(ctx, delivery, reply).await? {
            Outcome::Accepted(accepted) => Ok((
                StatusCode::ACCEPTED,
                Json(json!({"ok": true, "sessionId": accepted.session, "status": "accepted"})),
            )
                .into_response()),
            // Without a delivery id nothing is refused as already accepted; without a sender no
            // approval is answered.
            Outcome::Seen | Outcome::Repeated | Outcome::Answered(_) => {
                Err(ChannelError::bad_request(
                    "already_accepted",
                    "This delivery was already accepted.",
                ))
            }
        }
    }

    /// The reply of a delivery accepted before a restart, to the `reply_url` configured now
    /// (`None` when there is none any more).
    fn rebuild(
        &self,
        outbound: &Outbound,
        session: &str,
        address: &Address<'_>,
    ) -> Option<WebhookReply> {
        let key = address.text("key");
        let url = self.reply_url.as_deref()?;
        Some(self.reply(outbound, url, session.to_owned(), key))
    }
}

/// The message and the optional session key of a body.
fn message(payload: &Value) -> Result<(String, Option<String>), ChannelError> {
    let Value::Object(map) = payload else {
        return Ok((pretty(payload), None));
    };
    let key = match map.get("session_key") {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) if !k.trim().is_empty() && k.len() <= MAX_KEY => Some(k.clone()),
        Some(_) => {
            return Err(ChannelError::bad_request(
                "invalid_body",
                format!("`session_key` must be a non-empty string of at most {MAX_KEY} bytes."),
            ));
        }
    };
    let text = match map.get("message") {
        None | Some(Value::Null) => pretty(payload),
        Some(m) => body::message(m)?,
    };
    Ok((text, key))
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// POSTs the turn's news to `reply_url`, signed.
pub(super) struct WebhookReply {
    outbound: Outbound,
    url: String,
    secret: String,
    timestamped: bool,
    session: String,
    key: Option<String>,
}

#[async_trait::async_trait]
impl Reply for WebhookReply {
    async fn send(&mut self, message: Outgoing) {
        let text = message.text();
        let mut body = match &message {
            Outgoing::Approval { pending, .. } => {
                let requests: Vec<Value> = pending
                    .iter()
                    .map(|p| {
                        let mut r = json!({"requestId": p.request_id, "toolName": p.tool, "prompt": p.prompt});
                        if !p.detail.is_empty() {
                            r["detail"] = json!(p.detail);
                        }
                        r
                    })
                    .collect();
                json!({"type": "input.requested", "requests": requests})
            }
            Outgoing::Answer(_) => json!({"type": "turn.completed"}),
            Outgoing::Failed(error) => json!({"type": "turn.failed", "error": error}),
            Outgoing::Cancelled => json!({"type": "turn.cancelled"}),
        };
        body["sessionId"] = json!(self.session);
        if let Some(key) = &self.key {
            body["sessionKey"] = json!(key);
        }
        body["text"] = json!(text);
        let bytes = json_bytes(&body);
        let mut headers = Vec::new();
        let signature = if self.timestamped {
            let ts = chrono::Utc::now().timestamp().to_string();
            let prefix = format!("{ts}.");
            let sig = hmac_sha256(self.secret.as_bytes(), &[prefix.as_bytes(), &bytes]);
            headers.push(("x-eve-timestamp", ts));
            sig
        } else {
            hmac_sha256(self.secret.as_bytes(), &[&bytes])
        };
        headers.push((
            "x-eve-signature",
            format!("sha256={}", hex::encode(signature)),
        ));
        let call = Call {
            method: Method::POST,
            url: self.url.clone(),
            authorization: None,
            headers,
            body: bytes,
            what: "webhook reply",
        };
        let _ = self.outbound.send(&call).await;
    }

    fn address(&self) -> Value {
        json!({"kind": "webhook", "key": self.key})
    }

    fn accepted_into(&mut self, session: &str) {
        self.session = session.to_owned();
    }
}
