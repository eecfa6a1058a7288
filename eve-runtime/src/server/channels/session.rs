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
//!
//! **Durability.** The message, the platform's delivery id and the reply owed for it (the
//! platform's reply address as JSON) are written in one durable commit, before the platform is
//! acknowledged: a retry of an accepted delivery is recognised by the store, even after a restart,
//! and a reply is owed until its final message is sent. The approvals announced are recorded as
//! they are sent. A server that starts ([`resume`]) takes the replies whose process is gone,
//! rebuilds each from its address and follows its turn from the recorded index, skipping the
//! approvals already announced; a process follows each reply at most once.
//!
//! **Ownership across a fleet.** A reply is held by the process following it, under a hold it
//! renews and a fencing token (`store/channels.rs`); a running server also takes, every third of
//! the lease TTL, the replies whose hold lapsed (their node died or was cut off), so the node
//! that continues a dead node's turn is not the only one that could answer: some node sends it.
//! Before each message the follower records, under its token, that it starts sending it; a
//! follower whose token is no longer the newest stops without sending. A new owner treats a
//! message recorded as being sent as sent: the answer is sent at most once, never twice.

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::engine::{Accept, Caller, Extra, Runtime, RuntimeError, SessionRef, events};
use crate::server::error::ApiError;
use crate::store::{
    ChannelReplyRecord, ChannelReplyUpdate, FIRST_REPLY_TOKEN, InputRequestRecord, ReplyHeld,
    Sending,
};

/// The session id of conversation `key` on the channel `channel` of kind `kind`.
pub fn session_id(kind: &str, channel: &str, key: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(channel.as_bytes());
    hasher.update([0u8]);
    hasher.update(key.as_bytes());
    let digest = hex::encode(hasher.finalize());
    format!("wrun_{kind}_{}", &digest[..26])
}

/// What an `approve` / `deny` sent on a platform did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PlatformAnswer {
    /// Requests this answer settled.
    pub(crate) answered: usize,
    /// Requests someone else answered first (their answer counts, with its principal).
    pub(crate) already: Vec<InputRequestRecord>,
    /// Why this sender may not answer (not the person who asked nor an operator, or a change
    /// to the agent only an operator approves); empty when nothing was refused.
    pub(crate) refused: Vec<String>,
}

impl PlatformAnswer {
    /// What the sender is told.
    pub(crate) fn text(&self) -> String {
        let mut lines = Vec::new();
        if self.answered > 0 {
            lines.push(format!("Answered {} approval request(s).", self.answered));
        }
        for won in &self.already {
            lines.push(format!(
                "{} was already answered ({} by {}): the first answer counts.",
                won.id,
                won.status,
                won.responder.as_deref().unwrap_or(events::LOCAL_PRINCIPAL)
            ));
        }
        lines.extend(self.refused.iter().cloned());
        lines.join("\n")
    }

    /// The JSON the platform's request is answered with.
    pub(crate) fn json(&self, session: &str) -> Value {
        let already: Vec<Value> = self
            .already
            .iter()
            .map(|r| {
                serde_json::json!({
                    "requestId": r.id,
                    "outcome": r.status.as_str(),
                    "responderPrincipalId": r.responder.as_deref().unwrap_or(events::LOCAL_PRINCIPAL),
                })
            })
            .collect();
        serde_json::json!({
            "ok": self.refused.is_empty(), "sessionId": session, "answered": self.answered,
            "alreadyAnswered": already, "refused": self.refused,
        })
    }
}

/// An approval answered from a platform: `approve` or `deny [reason]` (or `approve <request id>`)
/// sent in a conversation whose session waits for approval. The answer is recorded as given by
/// `caller` (`slack:<user id>`, `discord:<user id>`, `telegram:<user id>`), who must be the
/// person who asked (the sender of the message whose turn waits) or an operator named in
/// `channels/eve.yaml`: anyone else in the conversation is refused. `None` when the text is not
/// an answer or nothing is pending (it is then an ordinary message).
pub(crate) async fn answer_approval(
    runtime: &Runtime,
    session: &str,
    text: &str,
    caller: &Caller,
) -> Result<Option<PlatformAnswer>, ApiError> {
    let mut words = text.split_whitespace();
    let approve = match words.next().map(str::to_ascii_lowercase).as_deref() {
        Some("approve" | "approved" | "yes") => true,
        Some("deny" | "denied" | "no") => false,
        _ => return Ok(None),
    };
    let rest: Vec<&str> = words.collect();
    if runtime.session(session).await?.is_none() {
        return Ok(None);
    }
    let pending = runtime.pending_inputs(session).await?;
    if pending.is_empty() {
        return Ok(None);
    }
    if !runtime.may_answer(session, caller).await? {
        let who = runtime
            .asker(session)
            .await?
            .unwrap_or_else(|| "an operator".to_owned());
        tracing::info!(
            session,
            principal = caller.id(),
            "an approval answer from someone who did not ask was refused"
        );
        return Ok(Some(PlatformAnswer {
            refused: vec![format!(
                "Only {who} (who asked) or an operator named in channels/eve.yaml can answer \
                 this request; {} cannot.",
                caller.id()
            )],
            ..PlatformAnswer::default()
        }));
    }
    // `approve apr_…` names one request; otherwise every pending one (those the thread was shown).
    let named = rest
        .first()
        .and_then(|w| pending.iter().find(|r| r.id == *w).map(|r| r.id.clone()));
    let reason_words = if named.is_some() {
        &rest[1..]
    } else {
        &rest[..]
    };
    let reason = Some(reason_words.join(" ")).filter(|r| !r.is_empty());
    let ids: Vec<String> = match named {
        Some(id) => vec![id],
        None => pending.iter().map(|r| r.id.clone()).collect(),
    };
    let mut outcome = PlatformAnswer::default();
    for id in &ids {
        match runtime
            .answer_input_by(session, Some(id), approve, reason.clone(), caller)
            .await
        {
            Ok(_) => outcome.answered += 1,
            Err(RuntimeError::InputAlreadyAnswered(won)) => outcome.already.push(*won),
            // Withdrawn meanwhile (the turn was cancelled): nothing to answer.
            Err(RuntimeError::NoSuchRequest(_)) => {}
            Err(RuntimeError::Release(why)) => outcome.refused.push(why),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(outcome))
}

/// A message durably accepted into a session.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    /// Session id.
    pub session: String,
    /// Inbox id of the message.
    pub inbox_id: String,
    /// Event index of the session before the message was accepted.
    pub from: u64,
    /// The fencing token this process holds the reply with.
    pub(crate) token: u64,
}

/// What a platform message brings besides its text.
#[derive(Clone, Copy, Default)]
pub(crate) struct Incoming<'a> {
    /// The platform's id of the delivery (Slack `event_id`, Telegram `update_id`): a delivery
    /// already accepted is not accepted again.
    pub(crate) delivery: Option<&'a str>,
    /// The reply owed for the message, when there is somewhere to send it.
    pub(crate) reply: Option<&'a dyn Reply>,
    /// Who sent it on the platform (`slack:U123`), for the `user` memory scope.
    pub(crate) sender: Option<&'a str>,
}

/// Accepts `text`, arrived on `channel`, into the session `session`, creating it on the current
/// build when it does not exist, or as the first message of a new session when `session` is
/// `None`. The message, its delivery id and the reply owed for it are stored in one durable
/// commit when this returns; `None` when the delivery was already accepted (nothing is written).
pub(crate) async fn accept(
    runtime: &Runtime,
    channel: &str,
    session: Option<&str>,
    text: &str,
    incoming: Incoming<'_>,
) -> Result<Option<Accepted>, ApiError> {
    let session = match session {
        Some(id) => SessionRef::Ensure(id.to_owned()),
        None => SessionRef::new_session(None),
    };
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty_message",
            "The message has no text.",
        ));
    }
    let mut extra = Vec::new();
    if let Some(delivery) = incoming.delivery.filter(|d| !d.is_empty()) {
        extra.push(Extra::ChannelDelivery {
            channel: channel.to_owned(),
            delivery_id: delivery.to_owned(),
        });
    }
    if let Some(sender) = incoming.sender {
        extra.push(Extra::Sender(sender.to_owned()));
        // A conversation's session belongs to whoever wrote first; a webhook's (signed, with
        // nobody named) to no one: operators only.
        extra.push(Extra::Owner(sender.to_owned()));
    }
    if let Some(reply) = incoming.reply {
        extra.push(Extra::ChannelReply {
            channel: channel.to_owned(),
            address: reply.address(),
        });
    }
    let accepted = runtime
        .accept(Accept {
            session,
            message: Some(text.to_owned()),
            extra,
        })
        .await?;
    Ok(accepted.and_then(|a| {
        Some(Accepted {
            inbox_id: a.inbox_id?,
            session: a.session,
            from: a.from,
            token: FIRST_REPLY_TOKEN,
        })
    }))
}

/// A tool call waiting for approval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pending {
    /// Input request id.
    pub(crate) request_id: String,
    /// Tool asking.
    pub(crate) tool: String,
    /// The request's prompt.
    pub(crate) prompt: String,
    /// What a reviewer needs to see besides the prompt: a self-change proposal's card
    /// (summary, checks, capability delta, diff); empty for a tool call.
    pub(crate) detail: String,
}

/// What the platform is told about a turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outgoing {
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
    pub(crate) fn text(&self) -> String {
        match self {
            Self::Approval { session, pending } => {
                let mut lines = Vec::with_capacity(pending.len() + 1);
                for p in pending {
                    if !p.detail.is_empty() {
                        lines.push(p.detail.trim_end().to_owned());
                    }
                    lines.push(format!(
                        "The call to `{}` awaits approval. Approve it with `eve sessions approve \
                         {session} {}` (or `eve sessions deny {session} {}`), reply `approve` or \
                         `deny` here, or answer through \
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
    pub(crate) fn is_final(&self) -> bool {
        !matches!(self, Self::Approval { .. })
    }
}

/// Where a turn's news goes: one implementation per platform.
#[async_trait::async_trait]
pub(crate) trait Reply: Send + Sync + 'static {
    /// Sends one message to the platform (failures are logged by the implementation, after the
    /// platform's retries).
    async fn send(&mut self, message: Outgoing);

    /// Where the messages go and what the reply must remember between them (`{"kind": …}` and
    /// the platform's reply address), stored with the accepted message: a restarted server
    /// rebuilds the reply from it. Secrets of the channel file (bot tokens) are not in it.
    fn address(&self) -> Value;

    /// Learns the session the message was accepted into, before the turn is followed (a new
    /// session's id is known only then).
    fn accepted_into(&mut self, _session: &str) {}
}

/// Follows the turn of `accepted` in the background and reports to `reply`, skipping the input
/// requests in `announced` (announced before a restart). Stops at `shutdown` (after finishing a
/// message being sent): the reply stays owed in the store, and the next start reports the turn.
pub(crate) fn spawn_reply(
    runtime: Runtime,
    accepted: Accepted,
    shutdown: CancellationToken,
    reply: Box<dyn Reply>,
    announced: Vec<String>,
) {
    let registered = runtime.follow_reply(&accepted.inbox_id, accepted.token, &shutdown);
    tokio::spawn(async move {
        let _registered = registered;
        let mut progress = Progress {
            reply,
            announced,
            runtime: &runtime,
            inbox_id: &accepted.inbox_id,
            token: accepted.token,
        };
        follow_turn(&runtime, &accepted, &shutdown, &mut progress).await;
    });
}

/// Takes over the replies owed to platforms that nobody follows: at a server's start
/// (`expired_only` false) those whose process is gone, and at any time those whose hold lapsed
/// (their node died or lost the store). `rebuild` makes each reply again from its channel name,
/// session and address, or says why it cannot (the channel file was removed: the reply is
/// closed, with a warning). A reply whose final message was being sent when its owner stopped
/// is closed as sent; approvals being announced count as announced.
pub(crate) async fn resume(
    runtime: &Runtime,
    shutdown: &CancellationToken,
    expired_only: bool,
    rebuild: impl Fn(&ChannelReplyRecord) -> Result<Box<dyn Reply>, String>,
) {
    let owed = match runtime.claim_owed_replies(expired_only).await {
        Ok(owed) => owed,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the replies owed to platforms");
            return;
        }
    };
    for mut record in owed {
        if runtime.reply_followed(&record.inbox_id) {
            continue;
        }
        match record.sending.take() {
            Some(Sending::Final) => {
                tracing::warn!(
                    channel = %record.channel,
                    session = %record.session_id,
                    "the process sending the answer to a platform message stopped while sending \
                     it; it is not sent again"
                );
                let why = "the process sending the answer stopped while sending it (it may not \
                           have arrived); not sent again"
                    .to_owned();
                close(runtime, &record, why).await;
                continue;
            }
            Some(Sending::Approval(ids)) => {
                for id in ids {
                    if !record.announced.contains(&id) {
                        record.announced.push(id);
                    }
                }
            }
            None => {}
        }
        match rebuild(&record) {
            Ok(reply) => spawn_reply(
                runtime.clone(),
                Accepted {
                    session: record.session_id.clone(),
                    inbox_id: record.inbox_id.clone(),
                    from: record.from_index,
                    token: record.owner_token,
                },
                shutdown.clone(),
                reply,
                record.announced,
            ),
            Err(why) => {
                tracing::warn!(
                    channel = %record.channel,
                    session = %record.session_id,
                    "the reply to a platform message is closed without an answer: {why}"
                );
                close(runtime, &record, why).await;
            }
        }
    }
}

/// Marks a reply done without an answer.
async fn close(runtime: &Runtime, record: &ChannelReplyRecord, why: String) {
    let update = ChannelReplyUpdate {
        inbox_id: record.inbox_id.clone(),
        address: record.address.clone(),
        announced: record.announced.clone(),
        done: true,
        detail: Some(why),
    };
    if let Err(e) = runtime.store().update_channel_reply(update).await {
        tracing::warn!(session = %record.session_id, error = %e, "cannot close a platform reply");
    }
}

/// A reply and what it has announced, recorded as it goes.
struct Progress<'a> {
    reply: Box<dyn Reply>,
    announced: Vec<String>,
    runtime: &'a Runtime,
    inbox_id: &'a str,
    /// The fencing token the reply is held with.
    token: u64,
}

impl Progress<'_> {
    /// Sends `outgoing` (what was not announced yet), then records it. `false` when this
    /// process no longer holds the reply (another took it over, or the store cannot say): the
    /// message is not sent and the follower stops.
    async fn send(&mut self, outgoing: Outgoing) -> bool {
        let done = outgoing.is_final();
        let outgoing = match outgoing {
            Outgoing::Approval { session, pending } => {
                let fresh: Vec<Pending> = pending
                    .into_iter()
                    .filter(|p| !self.announced.contains(&p.request_id))
                    .collect();
                if fresh.is_empty() {
                    return true;
                }
                Outgoing::Approval {
                    session,
                    pending: fresh,
                }
            }
            other => other,
        };
        let sending = match &outgoing {
            Outgoing::Approval { pending, .. } => {
                Sending::Approval(pending.iter().map(|p| p.request_id.clone()).collect())
            }
            _ => Sending::Final,
        };
        let held = ReplyHeld {
            inbox_id: self.inbox_id.to_owned(),
            token: self.token,
        };
        let store = self.runtime.store();
        match store
            .start_channel_reply_send(held, sending.clone(), self.runtime.reply_ttl_ms())
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    inbox = self.inbox_id,
                    "the reply to a platform message is held by another process now"
                );
                return false;
            }
            Err(e) => {
                tracing::warn!(inbox = self.inbox_id, error = %e, "cannot record a platform reply");
                return false;
            }
        }
        if let Sending::Approval(ids) = sending {
            self.announced.extend(ids);
        }
        self.reply.send(outgoing).await;
        self.record(done, None).await;
        true
    }

    async fn record(&self, done: bool, detail: Option<String>) {
        let update = ChannelReplyUpdate {
            inbox_id: self.inbox_id.to_owned(),
            address: self.reply.address(),
            announced: self.announced.clone(),
            done,
            detail,
        };
        if let Err(e) = self.runtime.store().update_channel_reply(update).await {
            tracing::warn!(inbox = self.inbox_id, error = %e, "cannot record a platform reply");
        }
    }
}

/// Follows the turn until its end is reported, or until `shutdown` while it waits for news (a
/// message being sent is finished and recorded first, so a restart does not send it again).
async fn follow_turn(
    runtime: &Runtime,
    accepted: &Accepted,
    shutdown: &CancellationToken,
    progress: &mut Progress<'_>,
) {
    // The turn that took the message, if one did already (a resumed reply).
    let mut mine: Option<u64> = match runtime.store().inbox_turn(&accepted.inbox_id).await {
        Ok(Some(turn)) => turn,
        Ok(None) => {
            progress
                .record(
                    true,
                    Some("the message is no longer in the session".to_owned()),
                )
                .await;
            return;
        }
        Err(e) => {
            tracing::warn!(session = %accepted.session, error = %e, "cannot read the message");
            return;
        }
    };
    let mut follower = runtime.follow(&accepted.session, accepted.from);
    let mut answer = String::new();
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => return,
            next = follower.next() => next,
        };
        let event = match next {
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
        if !progress.send(outgoing).await || last {
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
                    detail: str_at(r, "/action/proposal/text"),
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
