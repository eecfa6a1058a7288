//! Slack, through the Events API.
//!
//! Every request is signed: `X-Slack-Signature` is `v0=` + the hex HMAC-SHA256, keyed with the
//! app's signing secret, of `v0:{X-Slack-Request-Timestamp}:{raw body}`; the timestamp must be
//! within five minutes of now. `url_verification` is answered with its challenge. An
//! `event_callback` carrying an `app_mention`, a direct message, or a message in a thread the
//! agent already takes part in is accepted into the thread's session (one session per
//! `team:channel:thread_ts`) and acknowledged at once; the answer is posted in the thread with
//! `chat.postMessage`. Messages from bots (this one included), edits and other subtypes are
//! ignored, and a delivery Slack retries (`X-Slack-Retry-Num`) is recognised by its `event_id`.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{Value, json};

use super::deliver::{Delivery, Outcome, deliver};
use super::error::ChannelError;
use super::outbound::{Call, Outbound, json_bytes, truncate};
use super::session::{self, Outgoing, Reply};
use super::signature::{check_hmac_hex, check_timestamp, signature_header};
use super::{Address, Ctx, Handler, REPLAY_WINDOW_SECS, Settings, header, ignored};

/// Slack's Web API.
const DEFAULT_API: &str = "https://slack.com/api";
/// Longest text sent in one message (Slack allows 40,000 characters).
const MAX_TEXT: usize = 39_000;

/// A resolved Slack channel.
pub(crate) struct Slack {
    signing_secret: String,
    bot_token: String,
    api_base_url: String,
    /// The bot's own user id, when configured (otherwise taken from each event's
    /// `authorizations`).
    bot_user_id: Option<String>,
}

impl Slack {
    /// Resolves `signing_secret`, `bot_token`, `api_base_url` and `bot_user_id`.
    pub(super) fn resolve(settings: &Settings<'_>) -> Result<Self, crate::server::ServerError> {
        Ok(Self {
            signing_secret: settings.required("signing_secret")?,
            bot_token: settings.required("bot_token")?,
            api_base_url: settings.api_base_url(DEFAULT_API)?,
            bot_user_id: settings.optional("bot_user_id")?.filter(|s| !s.is_empty()),
        })
    }

    fn reply(&self, outbound: &Outbound, channel: String, thread_ts: String) -> SlackReply {
        SlackReply {
            outbound: outbound.clone(),
            url: format!("{}/chat.postMessage", self.api_base_url),
            bot_token: self.bot_token.clone(),
            channel,
            thread_ts,
        }
    }
}

impl Handler for Slack {
    const KIND: &'static str = "slack";
    type Reply = SlackReply;

    fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), ChannelError> {
        let timestamp = header(headers, "x-slack-request-timestamp");
        let signature = signature_header(headers, "X-Slack-Signature")?;
        check_timestamp(
            timestamp,
            now,
            REPLAY_WINDOW_SECS,
            "X-Slack-Request-Timestamp",
        )?;
        let timestamp = timestamp.unwrap_or_default();
        let hex = signature.strip_prefix("v0=").ok_or_else(|| {
            ChannelError::unauthorized("The `X-Slack-Signature` header is not a `v0=` signature.")
        })?;
        let base = format!("v0:{timestamp}:");
        check_hmac_hex(
            self.signing_secret.as_bytes(),
            &[base.as_bytes(), body],
            hex,
            "The Slack signature does not match: check the app's signing secret.",
        )
    }

    /// Answers one Events API request.
    async fn answer(
        &self,
        ctx: &Ctx<'_>,
        headers: &HeaderMap,
        payload: Value,
    ) -> Result<Response, ChannelError> {
        match payload.get("type").and_then(Value::as_str) {
            Some("url_verification") => {
                let challenge = payload
                    .get("challenge")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ChannelError::bad_request(
                            "invalid_body",
                            "`url_verification` without a `challenge`.",
                        )
                    })?;
                Ok(Json(json!({"challenge": challenge})).into_response())
            }
            Some("event_callback") => self.event(ctx, headers, &payload).await,
            _ => Ok(ignored("not an event callback")),
        }
    }

    fn rebuild(&self, outbound: &Outbound, _: &str, address: &Address<'_>) -> Option<SlackReply> {
        Some(self.reply(
            outbound,
            address.text("channel")?,
            address.text("thread_ts")?,
        ))
    }
}

impl Slack {
    async fn event(
        &self,
        ctx: &Ctx<'_>,
        headers: &HeaderMap,
        payload: &Value,
    ) -> Result<Response, ChannelError> {
        let Some(message) = self.message(ctx, payload).await? else {
            return Ok(ignored("not a message for the agent"));
        };
        let event_id = payload
            .get("event_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // `approve` / `deny` in a thread waiting for approval answers it, as this Slack user.
        let principal = format!("slack:{}", message.user);
        let reply = self.reply(ctx.outbound, message.channel, message.thread_ts);
        let delivery = Delivery {
            session: Some(&message.session),
            text: &message.text,
            id: Some(event_id),
            remember: true,
            sender: Some(&principal),
        };
        let retry = || header(headers, "x-slack-retry-num").unwrap_or("0");
        Ok(match deliver(ctx, delivery, Some(Box::new(reply))).await? {
            Outcome::Seen => {
                tracing::debug!(event_id, retry = retry(), "slack delivery already accepted");
                ignored("already accepted")
            }
            Outcome::Repeated => {
                tracing::debug!(
                    event_id,
                    retry = retry(),
                    "slack delivery accepted before a restart"
                );
                ignored("already accepted")
            }
            Outcome::Answered(answered) => Json(answered.json(&message.session)).into_response(),
            Outcome::Accepted(accepted) => {
                Json(json!({"ok": true, "sessionId": accepted.session})).into_response()
            }
        })
    }

    /// The message an event carries for the agent, or `None` when the agent should not answer.
    async fn message(
        &self,
        ctx: &Ctx<'_>,
        payload: &Value,
    ) -> Result<Option<Message>, ChannelError> {
        let Some(event) = payload.get("event").filter(|e| e.is_object()) else {
            return Ok(None);
        };
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let kind = s(event, "type").unwrap_or_default();
        if kind != "app_mention" && kind != "message" {
            return Ok(None);
        }
        // Edits, deletions, joins, bot posts: only plain messages (and broadcasts or file shares
        // with text) are addressed to the agent.
        if let Some(subtype) = s(event, "subtype")
            && subtype != "thread_broadcast"
            && subtype != "file_share"
        {
            return Ok(None);
        }
        let bot_user = self.bot_user_id.clone().or_else(|| {
            payload
                .pointer("/authorizations/0/user_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let user = s(event, "user");
        let from_bot = event.get("bot_id").is_some_and(|b| !b.is_null())
            || event.get("bot_profile").is_some_and(|b| !b.is_null());
        if from_bot || user.is_none() || (bot_user.is_some() && user == bot_user) {
            return Ok(None);
        }
        let (Some(channel), Some(ts)) = (s(event, "channel"), s(event, "ts")) else {
            return Ok(None);
        };
        let raw = s(event, "text").unwrap_or_default();
        let mention = bot_user.as_deref().map(|u| format!("<@{u}>"));
        let thread_ts = s(event, "thread_ts").unwrap_or(ts);
        let team = s(payload, "team_id")
            .or_else(|| s(event, "team"))
            .unwrap_or_default();
        let key = format!("{team}:{channel}:{thread_ts}");
        let session = session::session_id("slack", &ctx.channel.name, &key);
        if kind == "message" {
            // A mention also arrives as `app_mention`: answer that one only.
            if mention.as_deref().is_some_and(|m| raw.contains(m)) {
                return Ok(None);
            }
            // Outside direct messages, only threads the agent is already in.
            let direct = s(event, "channel_type").as_deref() == Some("im");
            if !direct
                && ctx
                    .app
                    .runtime
                    .session(&session)
                    .await
                    .ok()
                    .flatten()
                    .is_none()
            {
                return Ok(None);
            }
        }
        let mut text = raw;
        if let Some(m) = &mention {
            text = text.replace(m.as_str(), "");
        }
        let text = unescape(text.trim());
        if text.is_empty() {
            return Ok(None);
        }
        Ok(Some(Message {
            session,
            user: user.unwrap_or_default(),
            channel,
            thread_ts,
            text,
        }))
    }
}

/// A message for the agent.
struct Message {
    session: String,
    /// The Slack user id of the sender.
    user: String,
    channel: String,
    thread_ts: String,
    text: String,
}

/// Slack escapes `&`, `<` and `>` in message text.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Posts in the thread with `chat.postMessage`.
pub(super) struct SlackReply {
    outbound: Outbound,
    url: String,
    bot_token: String,
    channel: String,
    thread_ts: String,
}

#[async_trait::async_trait]
impl Reply for SlackReply {
    async fn send(&mut self, message: Outgoing) {
        let body = json!({
            "channel": self.channel,
            "thread_ts": self.thread_ts,
            "text": truncate(&message.text(), MAX_TEXT),
        });
        let call = Call {
            method: Method::POST,
            url: self.url.clone(),
            authorization: Some(format!("Bearer {}", self.bot_token)),
            headers: Vec::new(),
            body: json_bytes(&body),
            what: "slack chat.postMessage",
        };
        if let Ok(answer) = self.outbound.send(&call).await
            && answer.get("ok").and_then(Value::as_bool) == Some(false)
        {
            let error = answer.get("error").and_then(Value::as_str).unwrap_or("?");
            tracing::warn!(channel = %self.channel, error, "slack chat.postMessage refused");
        }
    }

    fn address(&self) -> Value {
        json!({"kind": "slack", "channel": self.channel, "thread_ts": self.thread_ts})
    }
}
