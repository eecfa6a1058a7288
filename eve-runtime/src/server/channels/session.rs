//! Conversations as sessions, and the background work of one accepted message: follow its turn,
//! tell the platform when it waits for approval, send the answer when it ends.
//!
//! **Session mapping.** A conversation key (a Slack `team:channel:thread_ts`, a Telegram chat, …)
//! maps to the session id `wrun_<kind>_<26 hex digits of SHA-256(channel name, key)>`. Deriving
//! the id instead of recording a mapping in a table means there is nothing to keep consistent: no
//! window between creating the session and writing the mapping where a crash leaves an orphan, no
//! extra write on the hot path, the same answer in every process that shares the store, and two
//! first messages of one thread racing each other converge on one session (the second insert
//! finds the row). The channel name is part of the hash, so two Slack apps (two channel files)
//! never share a session. The key cannot be read back from the id; the first message of a
//! session (in its events) shows where it came from.
//!
//! **Replies.** Each accepted message remembers its inbox id and the event index before it was
//! accepted; the background task follows the session's events from there, recognises its own turn
//! (the turn whose inbox message is ours: messages arriving while a turn runs queue behind it), and
//! reports `input.requested` (approval needed) and the turn's end through a [`Reply`].

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::engine::{Runtime, events};
use crate::server::error::ApiError;
use crate::server::ui::ensure_session;

/// The session id of conversation `key` on the channel `channel` of kind `kind`.
pub fn session_id(kind: &str, channel: &str, key: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(channel.as_bytes());
    hasher.update([0u8]);
    hasher.update(key.as_bytes());
    let digest = hex::encode(hasher.finalize());
    format!("wrun_{kind}_{}", &digest[..26])
}

/// A message durably accepted into a session.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// Session id.
    pub session: String,
    /// Inbox id of the message.
    pub inbox_id: String,
    /// Event index of the session before the message was accepted.
    pub from: u64,
}

/// Accepts `text` into the session `session`, creating it on the current build when it does
/// not exist. The message is in the inbox when this returns.
pub async fn accept(runtime: &Runtime, session: &str, text: &str) -> Result<Accepted, ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty_message",
            "The message has no text.",
        ));
    }
    ensure_session(runtime, session).await?;
    let from = runtime
        .session(session)
        .await?
        .map(|s| s.event_count)
        .ok_or(ApiError::SessionNotFound)?;
    let inbox_id = runtime.post_message(session, text).await?;
    Ok(Accepted {
        session: session.to_owned(),
        inbox_id,
        from,
    })
}

/// Accepts `text` as the first message of a new session.
pub async fn accept_new(runtime: &Runtime, text: &str) -> Result<Accepted, ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty_message",
            "The message has no text.",
        ));
    }
    let session = runtime.create_session(None).await?;
    accept(runtime, &session, text).await
}

/// A tool call waiting for approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// Input request id.
    pub request_id: String,
    /// Tool asking.
    pub tool: String,
    /// The request's prompt.
    pub prompt: String,
}

/// What the platform is told about a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// The turn waits for approval of these calls.
    Approval {
        /// Session id.
        session: String,
        /// The calls.
        pending: Vec<Pending>,
    },
    /// The turn ended with this answer.
    Answer(String),
    /// The turn failed.
    Failed(String),
    /// The turn was cancelled.
    Cancelled,
}

impl Outgoing {
    /// The message shown to the people in the conversation.
    pub fn text(&self) -> String {
        match self {
            Self::Approval { session, pending } => {
                let mut lines = Vec::with_capacity(pending.len() + 1);
                for p in pending {
                    lines.push(format!(
                        "The call to `{}` awaits approval. Approve it with `eve sessions approve \
                         {session} {}` (or `eve sessions deny {session} {}`), or answer through \
                         the session API: `POST /eve/v1/session/{session}` with \
                         `{{\"inputResponses\": [{{\"requestId\": \"{}\", \"optionId\": \
                         \"approve\"}}]}}`.",
                        p.tool, p.request_id, p.request_id, p.request_id
                    ));
                }
                lines.join("\n")
            }
            Self::Answer(text) if text.trim().is_empty() => "(no answer)".to_owned(),
            Self::Answer(text) => text.clone(),
            Self::Failed(message) => format!("Sorry, this turn failed: {message}"),
            Self::Cancelled => "The turn was cancelled.".to_owned(),
        }
    }

    /// Whether this ends the turn.
    pub fn is_final(&self) -> bool {
        !matches!(self, Self::Approval { .. })
    }
}

/// Where a turn's news goes: one implementation per platform.
#[async_trait::async_trait]
pub trait Reply: Send + 'static {
    /// Sends one message to the platform (failures are logged by the implementation).
    async fn send(&mut self, message: Outgoing);
}

/// Follows the turn of `accepted` in the background and reports to `reply`; stops at
/// `shutdown` (a turn that ends after a restart is not reported: its answer is in the session).
pub fn spawn_reply(
    runtime: Runtime,
    accepted: Accepted,
    shutdown: CancellationToken,
    mut reply: impl Reply,
) {
    tokio::spawn(async move {
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = follow_turn(&runtime, &accepted, &mut reply) => {}
        }
    });
}

async fn follow_turn(runtime: &Runtime, accepted: &Accepted, reply: &mut impl Reply) {
    let mut follower = runtime.follow(&accepted.session, accepted.from);
    let mut mine: Option<u64> = None;
    let mut answer = String::new();
    loop {
        let event = match follower.next().await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(session = %accepted.session, error = %e, "cannot follow the turn");
                return;
            }
        };
        let seq = event.data.get("sequence").and_then(Value::as_u64);
        if mine.is_none() {
            if event.kind != events::TURN_STARTED {
                continue;
            }
            let Some(seq) = seq else { continue };
            match runtime.store().turn(&accepted.session, seq).await {
                Ok(Some(turn)) if turn.inbox_id.as_deref() == Some(&accepted.inbox_id) => {
                    mine = Some(seq);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(session = %accepted.session, error = %e, "cannot read the turn");
                    return;
                }
            }
            continue;
        }
        if seq != mine {
            continue;
        }
        let outgoing = match event.kind.as_str() {
            events::MESSAGE_COMPLETED => {
                if let Some(text) = event.data.get("message").and_then(Value::as_str)
                    && !text.trim().is_empty()
                {
                    answer = text.to_owned();
                }
                continue;
            }
            events::INPUT_REQUESTED => Outgoing::Approval {
                session: accepted.session.clone(),
                pending: pending(&event.data),
            },
            events::TURN_COMPLETED => Outgoing::Answer(std::mem::take(&mut answer)),
            events::TURN_FAILED => Outgoing::Failed(
                event
                    .data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error")
                    .to_owned(),
            ),
            events::TURN_CANCELLED => Outgoing::Cancelled,
            _ => continue,
        };
        let last = outgoing.is_final();
        reply.send(outgoing).await;
        if last {
            return;
        }
    }
}

fn pending(data: &Value) -> Vec<Pending> {
    data.get("requests")
        .and_then(Value::as_array)
        .map(|requests| {
            requests
                .iter()
                .map(|r| Pending {
                    request_id: str_at(r, "/requestId"),
                    tool: r
                        .pointer("/action/toolName")
                        .or_else(|| r.pointer("/action/name"))
                        .and_then(Value::as_str)
                        .unwrap_or("a tool")
                        .to_owned(),
                    prompt: str_at(r, "/prompt"),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
