//! Tenancy: which sessions a principal reaches.
//!
//! eve leaves session ownership to the runtime, so the runtime decides it in one place. Every
//! session records the principal that started it ([`SessionRecord::owner`]; a subagent's session
//! has its root's). A [`Caller`] reaches a session it started; an operator (named in
//! `channels/eve.yaml`, the terminal, or the one local caller of an API without authentication)
//! reaches every session. A session nobody started (a schedule's, a signed webhook's, one stored
//! before owners were recorded) is reached by operators only. Whoever asks for a session it does
//! not reach is told the session does not exist ([`RuntimeError::SessionNotFound`]), exactly as
//! for an id that was never used, so existence does not leak.
//!
//! A principal is its id and its attributes (the claims a JWT method of `channels/eve.yaml`
//! names under `attributes:`, a tenant id for one). A session records both when it is created
//! (the attributes as the note [`owner_namespace`] of the session, in the commit that creates
//! it), and a tenant reaches it only with the same id *and* the same attributes: a session
//! started under tenant A is not found for a principal of tenant B, even when the identity
//! providers of A and B issue the same subject. This is eve's advice for multi-tenant agents
//! ("enforce tenant ownership for session create, continue, and stream routes") made the rule.
//!
//! On a platform channel many people share one conversation (a Slack thread, a Telegram group),
//! so answering an approval there follows who asked: the sender of the message whose turn waits
//! ([`Runtime::asker`]), or an operator.

use std::sync::atomic::Ordering;

use serde_json::{Map, Value};

use crate::engine::events::LOCAL_PRINCIPAL;
use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use crate::features::memory::sender_namespace;
use crate::store::{NoteOp, NoteRecord, Op, SessionFilter, SessionRecord};

/// The notes namespace that holds the attributes of the principal that started `session` (key
/// [`OWNER_KEY`], canonical JSON); absent when it had none.
pub(crate) fn owner_namespace(session: &str) -> String {
    format!("principal:{session}")
}

/// A principal as one string: its id, followed by its attributes as JSON when it has some
/// (`jwt:alice{"tenant":"acme"}`). What `user`-scoped memory is kept under.
pub(crate) fn principal_key(id: &str, attributes: &Map<String, Value>) -> String {
    if attributes.is_empty() {
        id.to_owned()
    } else {
        format!("{id}{}", Value::Object(attributes.clone()))
    }
}

/// The key of the owner's attributes in [`owner_namespace`].
const OWNER_KEY: &str = "owner";

/// The write that records `attributes` as those of `session`'s owner (none when empty).
pub(crate) fn record_owner_attributes(
    session: &str,
    attributes: &Map<String, Value>,
) -> Option<Op> {
    attributes_note(session, OWNER_KEY.to_owned(), attributes)
}

/// The note of `session`'s attributes under `key` (none when there are none).
fn attributes_note(session: &str, key: String, attributes: &Map<String, Value>) -> Option<Op> {
    if attributes.is_empty() {
        return None;
    }
    let now = crate::store::now_ms();
    Some(Op::Note(NoteOp::Put(NoteRecord {
        namespace: owner_namespace(session),
        key,
        text: Value::Object(attributes.clone()).to_string(),
        created_at: now,
        updated_at: now,
    })))
}

/// The key of the attributes of who answered `request` in [`owner_namespace`].
fn responder_key(request: &str) -> String {
    format!("responder:{request}")
}

/// The write that records `attributes` as those of the principal that answered `request` (none
/// when empty), in the commit that settles it.
pub(crate) fn record_responder_attributes(
    request: &crate::store::InputRequestRecord,
    attributes: &Map<String, Value>,
) -> Option<Op> {
    attributes_note(&request.session_id, responder_key(&request.id), attributes)
}

/// Who acts on sessions, as the caller was authenticated: its principal id (`jwt:<sub>`,
/// `token:NAME`, `basic:user`, `slack:U…`, `anonymous`, `local`), its attributes (claims its JWT
/// method carries) and whether it is an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    id: String,
    operator: bool,
    attributes: Map<String, Value>,
}

impl Caller {
    /// A principal that reaches only the sessions it started.
    pub(crate) fn tenant(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            operator: false,
            attributes: Map::new(),
        }
    }

    /// A principal that reaches every session.
    pub(crate) fn operator(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            operator: true,
            attributes: Map::new(),
        }
    }

    /// The same principal, with these attributes.
    pub(crate) fn with_attributes(mut self, attributes: Map<String, Value>) -> Self {
        self.attributes = attributes;
        self
    }

    /// Its attributes (the claims its JWT method names; empty for other principals).
    pub(crate) fn attributes(&self) -> &Map<String, Value> {
        &self.attributes
    }

    /// The terminal (`eve run`, `eve chat`, `eve sessions`): [`LOCAL_PRINCIPAL`], an operator.
    pub fn local() -> Self {
        Self::operator(LOCAL_PRINCIPAL)
    }

    /// The principal id, as recorded with what it does.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Whether it reaches every session.
    pub(crate) fn is_operator(&self) -> bool {
        self.operator
    }

    /// Whether it reaches `session`, started by a principal with `owner_attributes`: an
    /// operator reaches all; anyone else the sessions it started, as the same principal (the same
    /// id and the same attributes).
    pub(crate) fn reaches(
        &self,
        session: &SessionRecord,
        owner_attributes: &Map<String, Value>,
    ) -> bool {
        self.operator
            || (session.owner.as_deref() == Some(self.id.as_str())
                && *owner_attributes == self.attributes)
    }
}

impl Runtime {
    /// Tests only: this runtime matches a session's owner by principal id alone (the attributes
    /// not compared, as before principals had attributes), so a test can show a principal of
    /// another tenant with a colliding id reaching a session. No setting reaches it.
    #[doc(hidden)]
    pub fn set_owners_by_id_only_for_tests(&self, on: bool) {
        self.inner.owners_by_id_only.store(on, Ordering::Relaxed);
    }

    /// The session `id` as `caller` reaches it. A session it does not reach is
    /// [`RuntimeError::SessionNotFound`], the same error as an unknown id; one it reaches that
    /// stayed idle past `limits.session_timeout` is [`RuntimeError::SessionExpired`].
    pub(crate) async fn session_for(
        &self,
        id: &str,
        caller: &Caller,
    ) -> RuntimeResult<SessionRecord> {
        let Some(record) = self.inner.store.session(id).await? else {
            return Err(RuntimeError::SessionNotFound(id.to_owned()));
        };
        let reached = caller.is_operator()
            || (record.owner.as_deref() == Some(caller.id()) && {
                let attributes = self.compared_attributes(id, caller).await?;
                caller.reaches(&record, &attributes)
            });
        if !reached {
            return Err(RuntimeError::SessionNotFound(id.to_owned()));
        }
        if self.expired(&record) {
            return Err(RuntimeError::SessionExpired(id.to_owned()));
        }
        Ok(record)
    }

    /// The attributes of the principal that started `session` (empty when it had none, or when
    /// no session has that id).
    pub async fn owner_attributes(&self, session: &str) -> RuntimeResult<Map<String, Value>> {
        match self
            .inner
            .store
            .note(&owner_namespace(session), OWNER_KEY)
            .await?
        {
            // A stored value that does not parse is a damaged read: an error, never "none".
            Some(note) => match serde_json::from_str(&note.text)? {
                Value::Object(map) => Ok(map),
                other => Err(RuntimeError::Other(format!(
                    "the owner attributes of session {session} are not an object: {other}"
                ))),
            },
            None => Ok(Map::new()),
        }
    }

    /// The attributes of who answered each request of `session` that was answered by a
    /// principal with attributes, by request id.
    pub async fn responder_attributes(
        &self,
        session: &str,
    ) -> RuntimeResult<std::collections::BTreeMap<String, Value>> {
        let mut found = std::collections::BTreeMap::new();
        for note in self.inner.store.notes(&owner_namespace(session)).await? {
            if let Some(request) = note.key.strip_prefix("responder:") {
                found.insert(request.to_owned(), serde_json::from_str(&note.text)?);
            }
        }
        Ok(found)
    }

    /// The owner attributes `caller`'s are compared with for `session`: the recorded ones, or
    /// the caller's own under the test switch that matches owners by id alone.
    async fn compared_attributes(
        &self,
        session: &str,
        caller: &Caller,
    ) -> RuntimeResult<Map<String, Value>> {
        if self.inner.owners_by_id_only.load(Ordering::Relaxed) {
            return Ok(caller.attributes().clone());
        }
        self.owner_attributes(session).await
    }

    /// The sessions `caller` reaches, newest first (`filter` narrows them further).
    pub(crate) async fn sessions_for(
        &self,
        filter: &SessionFilter,
        caller: &Caller,
    ) -> RuntimeResult<Vec<SessionRecord>> {
        if caller.is_operator() {
            return Ok(self.inner.store.sessions(filter).await?);
        }
        let own = SessionFilter {
            owner: Some(caller.id().to_owned()),
            ..filter.clone()
        };
        // The same id is not yet the same principal: the attributes must match too.
        let mut reached = Vec::new();
        for record in self.inner.store.sessions(&own).await? {
            let attributes = self.compared_attributes(&record.id, caller).await?;
            if caller.reaches(&record, &attributes) {
                reached.push(record);
            }
        }
        Ok(reached)
    }

    /// Who asked what `session` waits for: the sender of the message its last turn took (a
    /// platform user, an API principal), else the principal that started the session. `None`
    /// when neither is known (then only operators may answer).
    pub(crate) async fn asker(&self, session: &str) -> RuntimeResult<Option<String>> {
        let Some(record) = self.inner.store.session(session).await? else {
            return Ok(None);
        };
        if let Some(turn) = self.inner.store.last_turn(session).await?
            && let Some(inbox) = &turn.inbox_id
            && let Some(note) = self
                .inner
                .store
                .note(&sender_namespace(session), inbox)
                .await?
        {
            return Ok(Some(note.text));
        }
        Ok(record.owner)
    }

    /// Whether `caller` may answer what `session` waits for from a platform conversation:
    /// an operator, or the person who asked ([`Runtime::asker`]).
    pub(crate) async fn may_answer(&self, session: &str, caller: &Caller) -> RuntimeResult<bool> {
        if caller.is_operator() {
            return Ok(true);
        }
        Ok(self.asker(session).await?.as_deref() == Some(caller.id()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned_by(owner: Option<&str>) -> SessionRecord {
        SessionRecord {
            owner: owner.map(str::to_owned),
            ..SessionRecord::new("wrun_1".into(), "h".into(), "a".into(), None, 0)
        }
    }

    #[test]
    fn a_tenant_reaches_only_what_it_started_and_an_operator_everything() {
        let none = Map::new();
        let alice = Caller::tenant("jwt:alice");
        let ops = Caller::operator("token:OPS");
        assert!(alice.reaches(&owned_by(Some("jwt:alice")), &none));
        assert!(!alice.reaches(&owned_by(Some("jwt:bob")), &none));
        assert!(
            !alice.reaches(&owned_by(None), &none),
            "no owner: operators only"
        );
        assert!(!Caller::tenant("jwt").reaches(&owned_by(Some("jwt:alice")), &none));
        for s in [Some("jwt:alice"), Some("jwt:bob"), None] {
            assert!(ops.reaches(&owned_by(s), &none));
            assert!(Caller::local().reaches(&owned_by(s), &none));
        }
    }

    #[test]
    fn the_same_id_under_another_tenant_is_another_principal() {
        let tenant = |t: &str| {
            let mut m = Map::new();
            m.insert("tenant".into(), Value::String(t.into()));
            m
        };
        let alice_a = Caller::tenant("jwt:alice").with_attributes(tenant("a"));
        let alice_b = Caller::tenant("jwt:alice").with_attributes(tenant("b"));
        let session = owned_by(Some("jwt:alice"));
        assert!(alice_a.reaches(&session, &tenant("a")));
        assert!(!alice_b.reaches(&session, &tenant("a")));
        assert!(!Caller::tenant("jwt:alice").reaches(&session, &tenant("a")));
        assert!(!alice_a.reaches(&session, &Map::new()));
    }
}
