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
//! On a platform channel many people share one conversation (a Slack thread, a Telegram group),
//! so answering an approval there follows who asked: the sender of the message whose turn waits
//! ([`Runtime::asker`]), or an operator.

use super::events::LOCAL_PRINCIPAL;
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::features::memory::sender_namespace;
use crate::store::{SessionFilter, SessionRecord};

/// Who acts on sessions, as the caller was authenticated: its principal id (`jwt:<sub>`,
/// `token:NAME`, `basic:user`, `slack:U…`, `anonymous`, `local`) and whether it is an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    id: String,
    operator: bool,
}

impl Caller {
    /// A principal that reaches only the sessions it started.
    pub(crate) fn tenant(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            operator: false,
        }
    }

    /// A principal that reaches every session.
    pub(crate) fn operator(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            operator: true,
        }
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

    /// Whether it reaches `session`: an operator reaches all; anyone else the sessions it
    /// started.
    pub(crate) fn reaches(&self, session: &SessionRecord) -> bool {
        self.operator || session.owner.as_deref() == Some(self.id.as_str())
    }
}

impl Runtime {
    /// The session `id` as `caller` reaches it. A session it does not reach is
    /// [`RuntimeError::SessionNotFound`], the same error as an unknown id; one it reaches that
    /// stayed idle past `limits.session_timeout` is [`RuntimeError::SessionExpired`].
    pub(crate) async fn session_for(
        &self,
        id: &str,
        caller: &Caller,
    ) -> RuntimeResult<SessionRecord> {
        match self.inner.store.session(id).await? {
            Some(record) if caller.reaches(&record) => {
                if self.expired(&record) {
                    return Err(RuntimeError::SessionExpired(id.to_owned()));
                }
                Ok(record)
            }
            _ => Err(RuntimeError::SessionNotFound(id.to_owned())),
        }
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
        Ok(self.inner.store.sessions(&own).await?)
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
        let alice = Caller::tenant("jwt:alice");
        let ops = Caller::operator("token:OPS");
        assert!(alice.reaches(&owned_by(Some("jwt:alice"))));
        assert!(!alice.reaches(&owned_by(Some("jwt:bob"))));
        assert!(!alice.reaches(&owned_by(None)), "no owner: operators only");
        assert!(!Caller::tenant("jwt").reaches(&owned_by(Some("jwt:alice"))));
        for s in [Some("jwt:alice"), Some("jwt:bob"), None] {
            assert!(ops.reaches(&owned_by(s)));
            assert!(Caller::local().reaches(&owned_by(s)));
        }
    }
}
