//! Telegram, as a bot webhook.
//!
//! Telegram sends the `secret_token` given to `setWebhook` in the
//! `X-Telegram-Bot-Api-Secret-Token` header of every update; it is compared in constant time. A
//! `message` with `text` (from a person, not a bot) is accepted into the session of its chat (and
//! forum topic, `message_thread_id`, when there is one) and acknowledged at once; the answer is
//! sent with `sendMessage` as a reply to the message. An update Telegram delivers again is
//! recognised by its `update_id`.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{Value, json};

use super::deliver::{Delivery, Outcome, deliver};
use super::error::ChannelError;
use super::outbound::{Call, Outbound, json_bytes};
use super::session::{self, Outgoing, Reply};
use super::signature::{same_secret, signature_header};
use super::{Address, Ctx, Handler, Settings, ignored};
use crate::server::ServerError;

/// Telegram's Bot API.
const DEFAULT_API: &str = "https://api.telegram.org";
/// Longest text of one message; longer answers are sent in several.
const MAX_TEXT: usize = 4_096;

/// A resolved Telegram channel.
pub(crate) struct Telegram {
    bot_token: String,
    secret_token: String,
    api_base_url: String,
}

impl Telegram {
    /// Resolves `bot_token`, `secret_token` and `api_base_url`.
    pub(super) fn resolve(settings: &Settings<'_>) -> Result<Self, ServerError> {
        Ok(Self {
            bot_token: settings.required("bot_token")?,
            secret_token: settings.required("secret_token")?,
            api_base_url: settings.api_base_url(DEFAULT_API)?,
        })
    }

    fn reply(
        &self,
        outbound: &Outbound,
        chat_id: Value,
        thread: Option<i64>,
        reply_to: Option<i64>,
    ) -> TelegramReply {
        TelegramReply {
            outbound: outbound.clone(),
            url: format!("{}/bot{}/sendMessage", self.api_base_url, self.bot_token),
            chat_id,
            thread,
            reply_to,
        }
    }
}

impl Handler for Telegram {
    const KIND: &'static str = "telegram";
    type Reply = TelegramReply;

    fn verify(&self, headers: &HeaderMap, _: &[u8], _: i64) -> Result<(), ChannelError> {
        let presented = signature_header(headers, "X-Telegram-Bot-Api-Secret-Token")?;
        if !same_secret(self.secret_token.as_bytes(), presented.as_bytes()) {
            return Err(ChannelError::unauthorized(
                "The `X-Telegram-Bot-Api-Secret-Token` header does not match the channel's \
                 `secret_token`.",
            ));
        }
        Ok(())
    }

    /// Answers one update.
    async fn answer(
        &self,
        ctx: &Ctx<'_>,
        _: &HeaderMap,
        update: Value,
    ) -> Result<Response, ChannelError> {
        let Some(message) = update.get("message").filter(|m| m.is_object()) else {
            return Ok(ignored("not a message"));
        };
        let text = message.get("text").and_then(Value::as_str).unwrap_or("");
        let chat_id = message
            .pointer("/chat/id")
            .filter(|v| v.is_i64() || v.is_string());
        let from_bot = message.pointer("/from/is_bot").and_then(Value::as_bool) == Some(true);
        let (Some(chat_id), false) = (chat_id, from_bot) else {
            return Ok(ignored("not a message for the agent"));
        };
        if text.trim().is_empty() {
            return Ok(ignored("no text"));
        }
        let thread = message.get("message_thread_id").and_then(Value::as_i64);
        let message_id = message.get("message_id").and_then(Value::as_i64);
        let update_id = update
            .get("update_id")
            .map(Value::to_string)
            .unwrap_or_default();
        let chat = chat_id
            .as_str()
            .map_or_else(|| chat_id.to_string(), str::to_owned);
        let key = match thread {
            Some(t) => format!("{chat}:{t}"),
            None => chat,
        };
        let session = session::session_id("telegram", &ctx.channel.name, &key);
        // `approve` / `deny` in a chat waiting for approval answers it, as this Telegram user.
        let principal = message
            .pointer("/from/id")
            .filter(|v| !v.is_null())
            .map(|user| {
                let user = user
                    .as_str()
                    .map_or_else(|| user.to_string(), str::to_owned);
                format!("telegram:{user}")
            });
        let reply = self.reply(ctx.outbound, chat_id.clone(), thread, message_id);
        let delivery = Delivery {
            session: Some(&session),
            text: text.trim(),
            id: Some(&update_id),
            remember: true,
            sender: principal.as_deref(),
        };
        Ok(match deliver(ctx, delivery, Some(Box::new(reply))).await? {
            Outcome::Seen | Outcome::Repeated => ignored("already accepted"),
            Outcome::Answered(answered) => Json(answered.json(&session)).into_response(),
            Outcome::Accepted(accepted) => {
                Json(json!({"ok": true, "sessionId": accepted.session})).into_response()
            }
        })
    }

    fn rebuild(
        &self,
        outbound: &Outbound,
        _: &str,
        address: &Address<'_>,
    ) -> Option<TelegramReply> {
        let chat_id = address
            .get("chat_id")
            .filter(|v| v.is_i64() || v.is_string())?
            .clone();
        let int = |k: &str| address.get(k).and_then(Value::as_i64);
        Some(self.reply(outbound, chat_id, int("thread"), int("reply_to")))
    }
}

/// Splits `text` into pieces of at most `max` characters.
fn pieces(text: &str, max: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars
        .chunks(max.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// Replies with `sendMessage`.
pub(super) struct TelegramReply {
    outbound: Outbound,
    url: String,
    chat_id: Value,
    thread: Option<i64>,
    reply_to: Option<i64>,
}

#[async_trait::async_trait]
impl Reply for TelegramReply {
    async fn send(&mut self, message: Outgoing) {
        for piece in pieces(&message.text(), MAX_TEXT) {
            let mut body = json!({"chat_id": self.chat_id, "text": piece});
            if let Some(id) = self.reply_to {
                body["reply_to_message_id"] = json!(id);
            }
            if let Some(thread) = self.thread {
                body["message_thread_id"] = json!(thread);
            }
            let call = Call {
                method: Method::POST,
                url: self.url.clone(),
                authorization: None,
                headers: Vec::new(),
                body: json_bytes(&body),
                what: "telegram sendMessage",
            };
            if self.outbound.send(&call).await.is_err() {
                return;
            }
        }
    }

    fn address(&self) -> Value {
        json!({"kind": "telegram", "chat_id": self.chat_id, "thread": self.thread,
               "reply_to": self.reply_to})
    }
}
