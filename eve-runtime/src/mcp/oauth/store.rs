//! Durable OAuth state in eve's store: rmcp's [`CredentialStore`] (client registration and
//! tokens) and [`StateStore`] (a pending authorization's PKCE verifier and `state`) as notes.
//!
//! Tokens of connection `NAME` for principal `P` (`app`, or a user principal's id) are the note
//! `P` of namespace `oauth:NAME`; pending authorizations are notes of `oauth-state:NAME`, keyed by
//! their `state`. Notes are written without events, so no token reaches an event, a log or the
//! model's context; a restarted runtime (either backend) reads the same note and refreshes it.

use std::sync::Arc;

use rmcp::transport::auth::{
    AuthError, CredentialStore, StateStore, StoredAuthorizationState, StoredCredentials,
};

use crate::store::{Batch, NoteOp, NoteRecord, Op, Store, now_ms};

/// The principal of app-scoped tokens.
pub const APP_PRINCIPAL: &str = "app";

/// Where one connection's tokens for one principal are kept.
#[derive(Clone)]
pub struct TokenPlace {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Connection name.
    pub connection: String,
    /// `app`, or a user principal's id.
    pub principal: String,
}

impl std::fmt::Debug for TokenPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenPlace")
            .field("connection", &self.connection)
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

/// Namespace of the tokens of `connection`.
pub fn tokens_namespace(connection: &str) -> String {
    format!("oauth:{connection}")
}

fn states_namespace(connection: &str) -> String {
    format!("oauth-state:{connection}")
}

pub(crate) fn store_error(e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

pub(crate) async fn put(
    store: &dyn Store,
    namespace: String,
    key: String,
    text: String,
) -> Result<(), AuthError> {
    let now = now_ms();
    let mut batch = Batch::durable();
    batch.push(Op::Note(NoteOp::Put(NoteRecord {
        namespace,
        key,
        text,
        created_at: now,
        updated_at: now,
    })));
    store.commit(batch).await.map(|_| ()).map_err(store_error)
}

pub(crate) async fn delete(
    store: &dyn Store,
    namespace: String,
    key: String,
) -> Result<(), AuthError> {
    let mut batch = Batch::durable();
    batch.push(Op::Note(NoteOp::Delete { namespace, key }));
    store.commit(batch).await.map(|_| ()).map_err(store_error)
}

impl TokenPlace {
    /// The stored credentials, if any.
    pub async fn read(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let note = self
            .store
            .note(&tokens_namespace(&self.connection), &self.principal)
            .await
            .map_err(store_error)?;
        match note {
            Some(n) => serde_json::from_str(&n.text).map(Some).map_err(store_error),
            None => Ok(None),
        }
    }

    /// Forgets the tokens (`eve connections logout`).
    pub async fn remove(&self) -> Result<(), AuthError> {
        delete(
            self.store.as_ref(),
            tokens_namespace(&self.connection),
            self.principal.clone(),
        )
        .await
    }

    /// The credential store over this place.
    pub(crate) fn credentials(&self) -> NoteCredentials {
        NoteCredentials(self.clone())
    }

    /// The state store of this place's connection.
    pub(crate) fn states(&self) -> NoteStates {
        NoteStates(self.clone())
    }
}

/// rmcp's credential store over a [`TokenPlace`].
pub(crate) struct NoteCredentials(TokenPlace);

#[async_trait::async_trait]
impl CredentialStore for NoteCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.0.read().await
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let text = serde_json::to_string(&credentials).map_err(store_error)?;
        put(
            self.0.store.as_ref(),
            tokens_namespace(&self.0.connection),
            self.0.principal.clone(),
            text,
        )
        .await
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.0.remove().await
    }
}

/// rmcp's state store over the notes of a connection's pending authorizations.
pub(crate) struct NoteStates(TokenPlace);

/// A pending authorization older than this is refused (and forgotten).
const STATE_TTL_MS: i64 = 10 * 60 * 1000;

#[async_trait::async_trait]
impl StateStore for NoteStates {
    async fn save(
        &self,
        csrf_token: &str,
        state: StoredAuthorizationState,
    ) -> Result<(), AuthError> {
        let text = serde_json::to_string(&state).map_err(store_error)?;
        put(
            self.0.store.as_ref(),
            states_namespace(&self.0.connection),
            csrf_token.to_owned(),
            text,
        )
        .await
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        let note = self
            .0
            .store
            .note(&states_namespace(&self.0.connection), csrf_token)
            .await
            .map_err(store_error)?;
        let Some(note) = note else {
            return Ok(None);
        };
        if now_ms() - note.created_at > STATE_TTL_MS {
            self.delete(csrf_token).await?;
            return Ok(None);
        }
        serde_json::from_str(&note.text)
            .map(Some)
            .map_err(store_error)
    }

    async fn delete(&self, csrf_token: &str) -> Result<(), AuthError> {
        delete(
            self.0.store.as_ref(),
            states_namespace(&self.0.connection),
            csrf_token.to_owned(),
        )
        .await
    }
}
