//! Platform channels: Slack, Discord, Telegram and signed webhooks, each at
//! `POST /eve/v1/channels/:name`, one route per `agent/channels/NAME.yaml`.
//!
//! A platform calls eve, not the other way round, so these routes do not use the session API's
//! credentials: every request proves where it comes from with the platform's own signature
//! (HMAC-SHA256 for Slack and webhooks, Ed25519 for Discord, a shared secret header for
//! Telegram), checked in constant time before the body is even parsed. A verified message is
//! accepted durably (in the inbox of the conversation's session) before the platform gets its
//! quick acknowledgement; the turn then runs in the background and its answer goes back through
//! the platform's API, at a base URL that tests point at a local fake.
//!
//! Each conversation (a Slack thread, a Discord channel, a Telegram chat or topic, a webhook
//! `session_key`) maps to one session whose id is derived from the channel name and the
//! conversation key ([`session_id`]): no mapping table to keep consistent, nothing to lose in a
//! crash, the same answer in every process sharing the store.
//!
//! Secrets are resolved from the environment once, when the server starts ([`Channels::resolve`]);
//! an unset variable stops the start with a message naming it.

mod deliver;
mod discord;
mod error;
pub(crate) mod mcp;
mod outbound;
mod session;
mod signature;
mod slack;
mod telegram;
mod webhook;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use eve_compile::{Channel, ChannelKind, Manifest};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use error::ChannelError;
pub use mcp::{MCP_PATH, McpChannel};
pub use session::session_id;

use super::App;
use super::auth::resolve_refs;
use super::body;
use super::error::ServerError;
use crate::engine::Runtime;
use crate::store::ChannelReplyRecord;
use outbound::Outbound;
use signature::Seen;

/// How far a signed timestamp may be from now, in seconds (Slack's replay window).
pub const REPLAY_WINDOW_SECS: i64 = 5 * 60;

/// One resolved platform channel.
enum Platform {
    Slack(slack::Slack),
    Discord(discord::Discord),
    Telegram(telegram::Telegram),
    Webhook(webhook::Webhook),
}

/// A platform channel with its secrets resolved and its per-process state.
struct Resolved {
    /// Channel name (the file name).
    name: String,
    platform: Platform,
    /// Deliveries already accepted (event ids, update ids), against platform retries.
    seen: Seen,
}

/// The platform channels of an agent, secrets resolved. Cheap to clone.
#[derive(Clone, Default)]
pub struct Channels {
    by_name: Arc<BTreeMap<String, Arc<Resolved>>>,
    outbound: Option<Outbound>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels")
            .field("names", &self.by_name.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Reads and resolves the settings of one channel file.
struct Settings<'a> {
    channel: &'a Channel,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Settings<'_> {
    fn file(&self) -> &str {
        &self.channel.source
    }

    fn invalid(&self, message: String) -> ServerError {
        ServerError::InvalidSetting {
            file: self.file().to_owned(),
            message,
        }
    }

    /// A string setting with `${VAR}`s resolved; `None` when absent or null.
    fn optional(&self, key: &str) -> Result<Option<String>, ServerError> {
        match self.channel.settings.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => resolve_refs(s.trim(), self.env, self.file(), key)
                .map(|v| Some(v.trim().to_owned())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(self.invalid(format!("`{key}` must be a string, found {other}"))),
        }
    }

    /// A required string setting with `${VAR}`s resolved.
    fn required(&self, key: &str) -> Result<String, ServerError> {
        match self.optional(key)? {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(self.invalid(format!(
                "`{key}` is required: add `{key}: ${{ENV_VAR}}` and export the variable"
            ))),
        }
    }

    /// The platform API's base URL: `api_base_url`, else `default`; no trailing slash.
    fn api_base_url(&self, default: &str) -> Result<String, ServerError> {
        let url = self
            .optional("api_base_url")?
            .unwrap_or_else(|| default.to_owned());
        let url = url.trim_end_matches('/').to_owned();
        match reqwest::Url::parse(&url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(url),
            _ => Err(self.invalid(format!(
                "`api_base_url` `{url}` is not an http(s) URL: write it as `https://host[/path]`"
            ))),
        }
    }

    /// A positive number of seconds; `None` when absent.
    fn seconds(&self, key: &str) -> Result<Option<i64>, ServerError> {
        match self.channel.settings.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_i64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                self.invalid(format!(
                    "`{key}` must be a positive number of seconds, found {v}"
                ))
            }),
        }
    }
}

impl Channels {
    /// Resolves every platform channel of `manifest` (`slack`, `discord`, `telegram`, `webhook`),
    /// reading `${VAR}` references through `env`. An unset variable or an unusable setting is an
    /// error naming the file and the field.
    pub(crate) fn resolve(
        manifest: &Manifest,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ServerError> {
        let mut by_name = BTreeMap::new();
        for channel in &manifest.agent.channels {
            let settings = Settings { channel, env };
            let platform = match channel.kind {
                ChannelKind::Http | ChannelKind::Mcp => continue,
                ChannelKind::Slack => Platform::Slack(slack::Slack::resolve(&settings)?),
                ChannelKind::Discord => Platform::Discord(discord::Discord::resolve(&settings)?),
                ChannelKind::Telegram => {
                    Platform::Telegram(telegram::Telegram::resolve(&settings)?)
                }
                ChannelKind::Webhook => Platform::Webhook(webhook::Webhook::resolve(&settings)?),
            };
            by_name.insert(
                channel.name.clone(),
                Arc::new(Resolved {
                    name: channel.name.clone(),
                    platform,
                    seen: Seen::default(),
                }),
            );
        }
        let outbound = if by_name.is_empty() {
            None
        } else {
            Some(Outbound::new().map_err(|e| ServerError::InvalidSetting {
                file: "channels/".to_owned(),
                message: format!("cannot create the HTTP client for platform replies: {e}"),
            })?)
        };
        Ok(Self {
            by_name: Arc::new(by_name),
            outbound,
        })
    }

    /// Names of the platform channels, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Whether there is no platform channel.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Resumes, in the background until `shutdown`, the replies owed to platforms for messages
    /// a previous process accepted and could not answer (it was stopped or killed mid-turn): each
    /// is rebuilt from its stored address and follows its turn from where it was accepted. The
    /// reply of a channel whose file was removed (or whose kind changed) is closed with a
    /// warning. Then, every third of the lease TTL, renews the holds of the replies this server
    /// follows and takes those whose hold lapsed (a node of the fleet died, or this server's own
    /// follower stopped). Called when a server's routes are built; does nothing outside a Tokio
    /// runtime.
    pub(crate) fn resume_replies(&self, runtime: &Runtime, shutdown: &CancellationToken) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (channels, runtime, shutdown) = (self.clone(), runtime.clone(), shutdown.clone());
        handle.spawn(async move {
            let rebuild = |record: &ChannelReplyRecord| channels.rebuild(record);
            session::resume(&runtime, &shutdown, false, rebuild).await;
            if channels.is_empty() {
                return;
            }
            let every =
                (runtime.lease_ttl() / 3).clamp(Duration::from_millis(50), Duration::from_secs(5));
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
                if let Err(e) = runtime.renew_followed_replies().await {
                    tracing::warn!(error = %e, "cannot renew the replies owed to platforms");
                }
                session::resume(&runtime, &shutdown, true, rebuild).await;
            }
        });
    }

    /// The reply of `record`, rebuilt from its address with the channel's settings of now.
    fn rebuild(&self, record: &ChannelReplyRecord) -> Result<Box<dyn session::Reply>, String> {
        let (Some(channel), Some(outbound)) =
            (self.by_name.get(&record.channel), self.outbound.as_ref())
        else {
            return Err(format!(
                "the channel `{}` no longer exists (agent/channels/{}.yaml was removed)",
                record.channel, record.channel
            ));
        };
        let reply = match &channel.platform {
            Platform::Slack(p) => rebuild(p, outbound, record),
            Platform::Discord(p) => rebuild(p, outbound, record),
            Platform::Telegram(p) => rebuild(p, outbound, record),
            Platform::Webhook(p) => rebuild(p, outbound, record),
        };
        reply.ok_or_else(|| {
            format!(
                "the channel `{}` can no longer send it (its kind or `reply_url` changed)",
                record.channel
            )
        })
    }
}

/// What a platform handler needs besides the request.
struct Ctx<'a> {
    app: &'a App,
    channel: &'a Resolved,
    outbound: &'a Outbound,
}

/// `POST /eve/v1/channels/:name`: the channel's kind decides the handler.
pub(crate) async fn handle(
    State(app): State<App>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // A name that does not decode cannot name a channel.
    let name = name.map(|Path(n)| n).unwrap_or_default();
    let channels = &app.config.channels;
    let (Some(channel), Some(outbound)) = (channels.by_name.get(&name), &channels.outbound) else {
        return ChannelError::NotFound(name).into_response();
    };
    let bytes = match body::bytes(body, app.config.body_limit) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let ctx = Ctx {
        app: &app,
        channel,
        outbound,
    };
    let now = chrono::Utc::now().timestamp();
    let result = match &channel.platform {
        Platform::Slack(p) => serve(p, &ctx, &headers, &bytes, now).await,
        Platform::Discord(p) => serve(p, &ctx, &headers, &bytes, now).await,
        Platform::Telegram(p) => serve(p, &ctx, &headers, &bytes, now).await,
        Platform::Webhook(p) => serve(p, &ctx, &headers, &bytes, now).await,
    };
    match result {
        Ok(response) => response,
        Err(e) => {
            if let ChannelError::Unauthorized(reason) = &e {
                tracing::debug!(channel = %channel.name, %reason, "channel request refused");
            }
            e.into_response()
        }
    }
}

/// What one platform brings to the request path every platform follows: its signature, what its
/// verified bodies mean, and how its replies are rebuilt.
trait Handler {
    /// The `kind` of this platform's stored reply addresses.
    const KIND: &'static str;

    /// The reply a message of this platform is owed.
    type Reply: session::Reply;

    /// Checks that the request comes from the platform (signature, timestamp, shared secret),
    /// before anything reads the body.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), ChannelError>;

    /// Answers a verified request whose body is `payload`.
    async fn answer(
        &self,
        ctx: &Ctx<'_>,
        headers: &HeaderMap,
        payload: Value,
    ) -> Result<Response, ChannelError>;

    /// The reply of a message accepted before a restart, from its stored `address` (of this
    /// platform's kind), into `session`; `None` when it cannot be sent any more.
    fn rebuild(
        &self,
        outbound: &Outbound,
        session: &str,
        address: &Address<'_>,
    ) -> Option<Self::Reply>;
}

/// One platform request: verified, then parsed, then answered.
async fn serve(
    platform: &impl Handler,
    ctx: &Ctx<'_>,
    headers: &HeaderMap,
    bytes: &[u8],
    now: i64,
) -> Result<Response, ChannelError> {
    platform.verify(headers, bytes, now)?;
    let payload = json_body(bytes)?;
    platform.answer(ctx, headers, payload).await
}

/// The reply of `record`, rebuilt by its platform when the stored address is of its kind.
fn rebuild<H: Handler>(
    platform: &H,
    outbound: &Outbound,
    record: &ChannelReplyRecord,
) -> Option<Box<dyn session::Reply>> {
    let address = Address(&record.address);
    if address.get("kind").and_then(Value::as_str) != Some(H::KIND) {
        return None;
    }
    let reply = platform.rebuild(outbound, &record.session_id, &address)?;
    Some(Box::new(reply))
}

/// A stored reply address: `{"kind": …}` and what the platform's reply remembers.
struct Address<'a>(&'a Value);

impl Address<'_> {
    /// The value at `key`.
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// The string at `key`.
    fn text(&self, key: &str) -> Option<String> {
        self.0.get(key).and_then(Value::as_str).map(str::to_owned)
    }
}

/// The acknowledgement of a request the agent does not answer, and why.
fn ignored(why: &str) -> Response {
    Json(json!({"ok": true, "ignored": why})).into_response()
}

/// A header as text; `None` when absent or not visible ASCII.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Parses a JSON body (after its signature was checked).
fn json_body(bytes: &[u8]) -> Result<Value, ChannelError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ChannelError::bad_request(
            "invalid_json",
            format!("The request body is not valid JSON ({e})."),
        )
    })
}
