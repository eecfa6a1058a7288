//! Discord, as an interactions endpoint (slash commands).
//!
//! Every request is signed with Ed25519: `X-Signature-Ed25519` is the hex signature of
//! `X-Signature-Timestamp` followed by the raw body, made with the application's key, checked
//! against its public key (`public_key`, hex). The timestamp must also be within five minutes of
//! now. A PING (type 1) is answered `{"type": 1}`; an application command (type 2) is accepted
//! into the session of its channel (a thread is a channel of its own) and answered at once with
//! a deferred response (`{"type": 5}`, "thinking…"); when the turn ends the original response is
//! edited with the answer (`PATCH /webhooks/{application_id}/{token}/messages/@original`), and
//! anything after that is sent as a follow-up message. No bot token is needed for either.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use ed25519_dalek::{Signature, VerifyingKey};
use reqwest::Method;
use serde_json::{Value, json};

use super::deliver::{Delivery, Outcome, deliver};
use super::error::ChannelError;
use super::outbound::{Call, Outbound, json_bytes, truncate};
use super::session::{self, Outgoing, Reply};
use super::signature::{check_timestamp, signature_header};
use super::{Address, Ctx, Handler, REPLAY_WINDOW_SECS, Settings, header};
use crate::server::ServerError;

/// Discord's API.
const DEFAULT_API: &str = "https://discord.com/api/v10";
/// Longest message content Discord accepts.
const MAX_TEXT: usize = 2_000;

/// A resolved Discord channel.
pub(crate) struct Discord {
    public_key: VerifyingKey,
    api_base_url: String,
}

impl Discord {
    /// Resolves `public_key` (64 hex digits) and `api_base_url`.
    pub(super) fn resolve(settings: &Settings<'_>) -> Result<Self, ServerError> {
        let hex_key = settings.required("public_key")?;
        let bytes: [u8; 32] = hex::decode(&hex_key)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                settings.invalid(
                    "`public_key` must be the application's public key: 64 hex digits, as shown \
                     on the Discord developer portal"
                        .to_owned(),
                )
            })?;
        let public_key = VerifyingKey::from_bytes(&bytes).map_err(|_| {
            settings.invalid("`public_key` is not a valid Ed25519 public key".to_owned())
        })?;
        Ok(Self {
            public_key,
            api_base_url: settings.api_base_url(DEFAULT_API)?,
        })
    }

    fn reply(
        &self,
        outbound: &Outbound,
        application_id: String,
        token: String,
        edited: bool,
    ) -> DiscordReply {
        DiscordReply {
            outbound: outbound.clone(),
            webhook: format!("{}/webhooks/{application_id}/{token}", self.api_base_url),
            application_id,
            token,
            edited,
        }
    }
}

impl Handler for Discord {
    const KIND: &'static str = "discord";
    type Reply = DiscordReply;

    fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), ChannelError> {
        let signature = signature_header(headers, "X-Signature-Ed25519")?;
        let timestamp = header(headers, "x-signature-timestamp");
        check_timestamp(timestamp, now, REPLAY_WINDOW_SECS, "X-Signature-Timestamp")?;
        let timestamp = timestamp.unwrap_or_default();
        let signature: [u8; 64] = hex::decode(signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                ChannelError::unauthorized("The `X-Signature-Ed25519` header is not a signature.")
            })?;
        let mut message = Vec::with_capacity(timestamp.len() + body.len());
        message.extend_from_slice(timestamp.as_bytes());
        message.extend_from_slice(body);
        self.public_key
            .verify_strict(&message, &Signature::from_bytes(&signature))
            .map_err(|_| {
                ChannelError::unauthorized(
                    "The Discord signature does not verify: check the application's public key.",
                )
            })
    }

    /// Answers one interaction.
    async fn answer(
        &self,
        ctx: &Ctx<'_>,
        _: &HeaderMap,
        interaction: Value,
    ) -> Result<Response, ChannelError> {
        match interaction.get("type").and_then(Value::as_u64) {
            Some(1) => Ok(Json(json!({"type": 1})).into_response()),
            Some(2) => self.command(ctx, &interaction).await,
            Some(other) => Err(ChannelError::bad_request(
                "unsupported_interaction",
                format!(
                    "Interaction type {other} is not handled: this channel answers slash \
                     commands (type 2)."
                ),
            )),
            None => Err(ChannelError::bad_request(
                "invalid_body",
                "The interaction has no numeric `type`.",
            )),
        }
    }

    fn rebuild(&self, outbound: &Outbound, _: &str, address: &Address<'_>) -> Option<DiscordReply> {
        let edited = address.get("edited").and_then(Value::as_bool) == Some(true);
        Some(self.reply(
            outbound,
            address.text("application_id")?,
            address.text("token")?,
            edited,
        ))
    }
}

impl Discord {
    async fn command(&self, ctx: &Ctx<'_>, interaction: &Value) -> Result<Response, ChannelError> {
        let s = |p: &str| interaction.pointer(p).and_then(Value::as_str);
        let (Some(application_id), Some(token)) = (s("/application_id"), s("/token")) else {
            return Err(ChannelError::bad_request(
                "invalid_body",
                "The interaction has no `application_id` or `token`.",
            ));
        };
        let channel = s("/channel_id")
            .or_else(|| s("/channel/id"))
            .ok_or_else(|| {
                ChannelError::bad_request("invalid_body", "The interaction has no `channel_id`.")
            })?;
        let guild = s("/guild_id").unwrap_or("dm");
        let text = command_text(interaction.get("data").unwrap_or(&Value::Null));
        let key = format!("{guild}:{channel}");
        let session = session::session_id("discord", &ctx.channel.name, &key);
        // `/… approve` or `deny` in a channel waiting for approval answers it, as this user
        // (`member.user` in a guild, `user` in a direct message).
        let principal = s("/member/user/id")
            .or_else(|| s("/user/id"))
            .map(|user| format!("discord:{user}"));
        let reply = self.reply(
            ctx.outbound,
            application_id.to_owned(),
            token.to_owned(),
            false,
        );
        // Discord does not redeliver interactions, but an interaction id is one delivery.
        let delivery = Delivery {
            session: Some(&session),
            text: &text,
            id: s("/id"),
            remember: false,
            sender: principal.as_deref(),
        };
        Ok(match deliver(ctx, delivery, Some(Box::new(reply))).await? {
            Outcome::Answered(answered) => Json(json!({
                "type": 4,
                "data": {"content": answered.text()},
            }))
            .into_response(),
            Outcome::Seen | Outcome::Repeated | Outcome::Accepted(_) => {
                Json(json!({"type": 5})).into_response()
            }
        })
    }
}

/// The text of a slash command: its `message` (or `prompt`, `text`, `question`) option, else its
/// first string option, else `/name` with its options.
fn command_text(data: &Value) -> String {
    let name = data
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("command");
    let options: Vec<(&str, &Value)> = data
        .get("options")
        .and_then(Value::as_array)
        .map(|opts| {
            opts.iter()
                .filter_map(|o| Some((o.get("name")?.as_str()?, o.get("value")?)))
                .collect()
        })
        .unwrap_or_default();
    for wanted in ["message", "prompt", "text", "question"] {
        if let Some((_, Value::String(v))) = options.iter().find(|(n, _)| *n == wanted)
            && !v.trim().is_empty()
        {
            return v.clone();
        }
    }
    if let Some((_, Value::String(v))) = options.iter().find(|(_, v)| v.is_string())
        && !v.trim().is_empty()
    {
        return v.clone();
    }
    let mut text = format!("/{name}");
    for (n, v) in options {
        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
        text.push_str(&format!(" {n}={v}"));
    }
    text
}

/// Edits the deferred response, then sends follow-ups.
pub(super) struct DiscordReply {
    outbound: Outbound,
    webhook: String,
    application_id: String,
    /// The interaction token (valid 15 minutes), part of the webhook URL.
    token: String,
    edited: bool,
}

#[async_trait::async_trait]
impl Reply for DiscordReply {
    async fn send(&mut self, message: Outgoing) {
        let body = json!({"content": truncate(&message.text(), MAX_TEXT)});
        let (method, url, what) = if self.edited {
            (
                Method::POST,
                self.webhook.clone(),
                "discord follow-up message",
            )
        } else {
            (
                Method::PATCH,
                format!("{}/messages/@original", self.webhook),
                "discord edit original response",
            )
        };
        let call = Call {
            method,
            url,
            authorization: None,
            headers: Vec::new(),
            body: json_bytes(&body),
            what,
        };
        if self.outbound.send(&call).await.is_ok() {
            self.edited = true;
        }
    }

    fn address(&self) -> Value {
        json!({"kind": "discord", "application_id": self.application_id, "token": self.token,
               "edited": self.edited})
    }
}
