//! The safety identifier of a turn's model calls: providers that take one (OpenAI's
//! `safety_identifier`, Anthropic's `metadata.user_id`) get a stable, one-way hash of the
//! principal who sent the turn's message, so the provider can tell one abusive user from the
//! rest of an app's traffic without learning who the user is. A turn nobody sent (a schedule, a
//! subagent, an unauthenticated message) sends none.

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Shaped, TurnExtension, TurnView};
use crate::features::memory::sender_namespace;
use crate::model::ModelRequest;
use crate::store::Batch;

/// The safety identifier of `principal` for agent `agent`: 64 hex digits of SHA-256, never the
/// principal itself.
pub fn safety_identifier(agent: &str, principal: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"eve-safety-identifier\0");
    hash.update(agent.as_bytes());
    hash.update(b"\0");
    hash.update(principal.as_bytes());
    hex::encode(hash.finalize())
}

/// Sets the request's safety identifier from the turn's sender.
#[derive(Default)]
pub(crate) struct SafetyId {
    /// The identifier, once read (`Some(None)`: the turn has no sender).
    id: Option<Option<String>>,
}

#[async_trait]
impl TurnExtension for SafetyId {
    fn name(&self) -> &'static str {
        "safety_id"
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        // The offline `mock` model sends nothing anywhere: no read for it.
        if view.model.model_id.starts_with("mock/") {
            return Ok(Shaped::Call);
        }
        if self.id.is_none() {
            let sender = match &view.turn.inbox_id {
                Some(inbox) => view
                    .rt
                    .inner
                    .store
                    .note(&sender_namespace(view.id()), inbox)
                    .await?
                    .map(|n| n.text),
                None => None,
            };
            let agent = &view.build.manifest.agent.name;
            self.id = Some(sender.map(|p| safety_identifier(agent, &p)));
        }
        request.safety_identifier = self.id.clone().flatten();
        Ok(Shaped::Call)
    }
}
