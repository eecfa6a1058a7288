//! One way in: every message the engine takes, from any caller, goes through [`Runtime::accept`].
//!
//! HTTP routes, the UI, channels, schedules and the CLI each used to write session and inbox rows
//! themselves. Here a caller says which session (a new one, one that must exist, or one to create
//! when missing), the message, and the typed [`Extra`] rows it must commit atomically with it (a
//! channel's delivery id and the reply owed, a schedule's fire claim); the engine builds the
//! commit, sends it to the store method that enforces the extra rows' promise, and kicks the
//! driver. Nothing outside the engine and the store builds an `Op` or a `Batch`.

use serde_json::Value;

use super::{Runtime, RuntimeError, RuntimeResult, new_session_id};
use crate::model::Attachment;
use crate::store::*;
use crate::workspace::attachments::{Upload, stage};

/// Which session a message goes to.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionRef {
    /// A new session on the current build, with this id (see [`new_session_id`]), recording the
    /// schedule that started it, if any.
    New {
        /// The new session's id.
        id: String,
        /// The schedule that started it.
        schedule: Option<String>,
    },
    /// A session that must exist.
    Existing(String),
    /// A session created on the current build when it does not exist yet (an id derived from a
    /// conversation: whoever comes first creates it).
    Ensure(String),
}

impl SessionRef {
    /// A new session with a fresh id.
    pub fn new_session(schedule: Option<String>) -> Self {
        Self::New {
            id: new_session_id(),
            schedule,
        }
    }

    fn id(&self) -> &str {
        match self {
            Self::New { id, .. } | Self::Existing(id) | Self::Ensure(id) => id,
        }
    }
}

/// A row a caller commits together with the message it hands over.
#[derive(Debug, Clone, PartialEq)]
pub enum Extra {
    /// The platform's id of the delivery: a delivery already accepted on `channel` is not
    /// accepted again (nothing is written and [`Runtime::accept`] returns `None`).
    ChannelDelivery {
        /// Channel name.
        channel: String,
        /// The platform's delivery id.
        delivery_id: String,
    },
    /// The reply owed on `channel` for the message, rebuilt after a restart from `address`.
    ChannelReply {
        /// Channel name.
        channel: String,
        /// Where the reply goes (the platform's reply address as JSON).
        address: Value,
    },
    /// A schedule's claim: the message is committed only if the claim holds (another process
    /// may have claimed the fire; then [`Runtime::accept`] returns `None`).
    ScheduleFire(ScheduleClaim),
    /// Who sent the message: an authenticated principal (`token:NAME`, `basic:user`,
    /// `jwt:sub`) or a channel identity (`slack:U123`). Kept beside the message, so the turn
    /// that takes it knows whose `user`-scoped memory it sees.
    Sender(String),
    /// The principal that starts the session, when this creates it (see
    /// [`SessionRecord::owner`]); ignored for a session that exists already.
    Owner(String),
    /// The attributes of that principal (the claims its JWT method names), recorded with the
    /// session it creates (see `engine::tenancy`); ignored for a session that exists already.
    OwnerAttributes(serde_json::Map<String, Value>),
    /// Files sent with the message, already staged in the session's workspace
    /// ([`crate::workspace::attachments::stage`]); kept with the message in the inbox (see
    /// [`super::content`]).
    Attachments(Vec<crate::model::Attachment>),
    /// What the message asks of the turn that takes it (`outputSchema`, `clientContext`,
    /// `turnPolicy`), stored with it.
    Input(crate::features::turn_input::TurnInput),
    /// Tool stubs of a new session and its subagents (checked by `features::stubs::check`; the
    /// caller decided the sender may set them). Refused for a session that exists.
    Stubs(Value),
}

/// What to accept.
#[derive(Debug, Clone, PartialEq)]
pub struct Accept {
    /// The session.
    pub session: SessionRef,
    /// The message, if any (a new session may start without one).
    pub message: Option<String>,
    /// Rows committed atomically with the message.
    pub extra: Vec<Extra>,
}

impl Accept {
    /// `message` for `session`, with nothing else.
    pub fn message(session: SessionRef, message: impl Into<String>) -> Self {
        Self {
            session,
            message: Some(message.into()),
            extra: Vec::new(),
        }
    }
}

/// What [`Runtime::accept`] committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// Session id.
    pub session: String,
    /// Inbox id of the message, when there was one.
    pub inbox_id: Option<String>,
    /// Event index of the session before the message was accepted.
    pub from: u64,
}

impl Runtime {
    /// Accepts a message (and creates its session when asked to) together with `extra`, in one
    /// durable commit: when this returns `Some`, the message is in the session's inbox and a
    /// driver is on its way. `None` when an extra row's condition refused the commit (a delivery
    /// already accepted, a schedule fire another process claimed): nothing was written.
    pub async fn accept(&self, accept: Accept) -> RuntimeResult<Option<Accepted>> {
        let Accept {
            session,
            message,
            extra,
        } = accept;
        let has_files = extra
            .iter()
            .any(|e| matches!(e, Extra::Attachments(a) if !a.is_empty()));
        if message.as_deref().is_some_and(|m| m.trim().is_empty()) && !has_files {
            return Err(RuntimeError::EmptyMessage);
        }
        let id = session.id().to_owned();
        let now = now_ms();
        let mut batch = Batch::durable();
        let owner = extra.iter().find_map(|e| match e {
            Extra::Owner(owner) => Some(owner.clone()),
            _ => None,
        });
        let owner_attributes = extra
            .iter()
            .find_map(|e| match e {
                Extra::OwnerAttributes(a) => Some(a.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let creates = matches!(session, SessionRef::New { .. });
        let from = match session {
            SessionRef::New { id, schedule } => {
                let build = self.inner.builds.current()?;
                if let Some(op) = crate::tenancy::record_owner_attributes(&id, &owner_attributes) {
                    batch.push(op);
                }
                batch.push(Op::InsertSession(SessionRecord {
                    owner,
                    ..SessionRecord::new(
                        id,
                        build.hash.clone(),
                        build.manifest.agent.name.clone(),
                        schedule,
                        now,
                    )
                }));
                0
            }
            SessionRef::Existing(id) => self.require_session(&id).await?.event_count,
            SessionRef::Ensure(id) => {
                self.ensure_session_owned(&id, owner, &owner_attributes)
                    .await?;
                self.require_session(&id).await?.event_count
            }
        };
        // What the message asks of its turn, with who sent it (the turn reads both from the
        // inbox row, so it needs no read of the sender note).
        let mut input = extra
            .iter()
            .find_map(|e| match e {
                Extra::Input(input) => Some(input.clone()),
                _ => None,
            })
            .unwrap_or_default();
        input.sender = extra.iter().find_map(|e| match e {
            Extra::Sender(sender) => Some(sender.clone()),
            _ => None,
        });
        let input = (!input.is_empty()).then(|| input.to_value());
        let attachments: Vec<crate::model::Attachment> = extra
            .iter()
            .filter_map(|e| match e {
                Extra::Attachments(a) => Some(a.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        let inbox_id = message.map(|text| {
            let text = crate::content::UserContent {
                text,
                attachments: attachments.clone(),
            }
            .encode();
            let mut record = InboxRecord::new(&id, &text, now);
            record.input = input;
            let inbox_id = record.id.clone();
            batch.push(Op::InsertInbox(record));
            inbox_id
        });
        let mut channel: Option<ChannelAccept> = None;
        let mut schedule: Option<ScheduleClaim> = None;
        for row in extra {
            match row {
                Extra::ChannelDelivery {
                    channel: name,
                    delivery_id,
                } => {
                    channel
                        .get_or_insert(ChannelAccept {
                            delivery: None,
                            reply: None,
                        })
                        .delivery = (!delivery_id.is_empty()).then_some(ChannelDelivery {
                        channel: name,
                        delivery_id,
                    });
                }
                Extra::ChannelReply {
                    channel: name,
                    address,
                } => {
                    let Some(inbox_id) = inbox_id.clone() else {
                        return Err(RuntimeError::Other(
                            "a channel reply is owed for a message, and none was given".to_owned(),
                        ));
                    };
                    channel
                        .get_or_insert(ChannelAccept {
                            delivery: None,
                            reply: None,
                        })
                        .reply = Some(ChannelReplyRecord {
                        inbox_id,
                        channel: name,
                        session_id: id.clone(),
                        from_index: from,
                        address,
                        announced: Vec::new(),
                        done: false,
                        detail: None,
                        owner_pid: std::process::id(),
                        owner_host: self.inner.host.clone(),
                        created_at: now,
                        updated_at: now,
                        owner_token: FIRST_REPLY_TOKEN,
                        owner_expires_at: now.saturating_add(self.reply_ttl_ms()),
                        sending: None,
                    });
                }
                Extra::ScheduleFire(claim) => schedule = Some(claim),
                Extra::Owner(_)
                | Extra::OwnerAttributes(_)
                | Extra::Input(_)
                | Extra::Attachments(_) => {}
                Extra::Stubs(stubs) => {
                    if !creates {
                        return Err(RuntimeError::Other(
                            "tool stubs are set when a session is created".to_owned(),
                        ));
                    }
                    crate::features::stubs::check(&stubs).map_err(RuntimeError::Other)?;
                    batch.push(crate::features::stubs::keep(&id, &stubs));
                }
                Extra::Sender(sender) => {
                    if let Some(inbox_id) = &inbox_id {
                        batch.push(Op::Note(NoteOp::Put(NoteRecord {
                            namespace: crate::features::memory::sender_namespace(&id),
                            key: inbox_id.clone(),
                            text: sender,
                            created_at: now,
                            updated_at: now,
                        })));
                    }
                }
            }
        }
        self.inner.config.secrets.redact_batch(&mut batch);
        let committed = match (channel, schedule) {
            (None, None) => Some(self.inner.store.commit(batch).await?),
            (Some(claim), None) => {
                self.inner
                    .store
                    .accept_channel_message(claim, batch)
                    .await?
            }
            (None, Some(claim)) => self.inner.store.claim_schedule(claim, batch).await?,
            (Some(_), Some(_)) => {
                return Err(RuntimeError::Other(
                    "a message is either a channel delivery or a schedule fire, not both"
                        .to_owned(),
                ));
            }
        };
        let Some(committed) = committed else {
            return Ok(None);
        };
        self.announce(&committed);
        if inbox_id.is_some() {
            self.kick(&id);
        }
        Ok(Some(Accepted {
            session: id,
            inbox_id,
            from,
        }))
    }

    /// [`Runtime::ensure_session`], recording `owner` (with its `attributes`) as the principal
    /// that started it when this creates it (a session that exists keeps its owner).
    pub(crate) async fn ensure_session_owned(
        &self,
        id: &str,
        owner: Option<String>,
        attributes: &serde_json::Map<String, Value>,
    ) -> RuntimeResult<()> {
        if self.inner.store.session(id).await?.is_some() {
            return Ok(());
        }
        let build = self.inner.builds.current()?;
        let record = SessionRecord {
            owner,
            ..SessionRecord::new(
                id.to_owned(),
                build.hash.clone(),
                build.manifest.agent.name.clone(),
                None,
                now_ms(),
            )
        };
        let mut batch = Batch::durable();
        if let Some(op) = crate::tenancy::record_owner_attributes(id, attributes) {
            batch.push(op);
        }
        batch.push(Op::InsertSession(record));
        if let Err(e) = self.inner.store.commit(batch).await {
            // Another request may have created it first; that is fine.
            if self.inner.store.session(id).await?.is_none() {
                return Err(RuntimeError::Other(format!(
                    "cannot create session {id}: {e}"
                )));
            }
        }
        Ok(())
    }

    /// Records a schedule's state or fires that start no session (a changed cadence, a missed,
    /// skipped or queued fire). `false` when another process's claim came first.
    pub(crate) async fn claim_schedule(&self, claim: ScheduleClaim) -> RuntimeResult<bool> {
        let committed = self
            .inner
            .store
            .claim_schedule(claim, Batch::durable())
            .await?;
        Ok(committed.is_some())
    }

    /// Creates a session on the current build, started by the terminal
    /// ([`LOCAL_PRINCIPAL`](super::LOCAL_PRINCIPAL)); with a first message, accepts it (it is in
    /// the inbox when this returns) and starts the first turn.
    pub async fn create_session(&self, first_message: Option<String>) -> RuntimeResult<String> {
        self.create_session_with(first_message, None).await
    }

    /// Like [`Runtime::create_session`], recording the schedule that started it.
    pub(crate) async fn create_session_with(
        &self,
        first_message: Option<String>,
        schedule: Option<String>,
    ) -> RuntimeResult<String> {
        let accepted = self
            .accept(Accept {
                session: SessionRef::new_session(schedule),
                message: first_message,
                extra: vec![Extra::Owner(super::LOCAL_PRINCIPAL.to_owned())],
            })
            .await?;
        accepted
            .map(|a| a.session)
            .ok_or_else(|| RuntimeError::Other("the new session was not stored".to_owned()))
    }

    /// Accepts a message: it is durably in the session's inbox when this returns. Returns its id.
    pub async fn post_message(&self, session: &str, text: &str) -> RuntimeResult<String> {
        self.post_message_from(session, text, None).await
    }

    /// [`Runtime::post_message`], recording who sent it (see [`Extra::Sender`]).
    pub(crate) async fn post_message_from(
        &self,
        session: &str,
        text: &str,
        sender: Option<String>,
    ) -> RuntimeResult<String> {
        self.post_content_from(session, text, Vec::new(), sender)
            .await
    }

    /// [`Self::post_message_from`] with files already staged in the session's workspace
    /// ([`Self::stage_uploads`]).
    pub(crate) async fn post_content_from(
        &self,
        session: &str,
        text: &str,
        attachments: Vec<crate::model::Attachment>,
        sender: Option<String>,
    ) -> RuntimeResult<String> {
        let mut accept = Accept::message(SessionRef::Existing(session.to_owned()), text);
        accept.extra.extend(sender.map(Extra::Sender));
        if !attachments.is_empty() {
            accept.extra.push(Extra::Attachments(attachments));
        }
        let accepted = self.accept(accept).await?;
        accepted
            .and_then(|a| a.inbox_id)
            .ok_or_else(|| RuntimeError::Other("the message was not stored".to_owned()))
    }
}

impl Runtime {
    /// Stages `uploads` in the workspace of `session` (prepared from the current build when it
    /// does not exist yet), race-free ([`crate::workspace::attachments`]); returns their
    /// references for [`crate::engine::Extra::Attachments`].
    pub(crate) async fn stage_uploads(
        &self,
        session: &str,
        uploads: Vec<Upload>,
    ) -> RuntimeResult<Vec<Attachment>> {
        if uploads.is_empty() {
            return Ok(Vec::new());
        }
        let build = self.inner.builds.current()?;
        let workspace = super::turn::workspace_of(self, &build, session)?;
        tokio::task::spawn_blocking(move || {
            uploads
                .iter()
                .map(|u| stage(&workspace, u))
                .collect::<std::io::Result<Vec<_>>>()
        })
        .await
        .map_err(|e| RuntimeError::Other(format!("staging files stopped: {e}")))?
        .map_err(|e| RuntimeError::Other(format!("cannot stage the message's files: {e}")))
    }
}
