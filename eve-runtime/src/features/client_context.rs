//! Client context: what a client sent as `clientContext` with a message (the page a user is on,
//! the record they look at) reaches every model call of that message's turn as user-role
//! messages, and nothing else: it is added to each request after the stored context, never
//! written to the session's messages, so later turns and whoever reads the history never see it.
//! It is kept with the turn ([`super::turn_input`]), redacted like everything stored, so a turn
//! resumed after a restart still has it.

use async_trait::async_trait;

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Shaped, TurnExtension, TurnView};
use crate::model::{Message, ModelRequest};
use crate::store::Batch;

/// The client context of one turn.
pub(crate) struct ClientContext {
    messages: Vec<String>,
}

impl ClientContext {
    /// For a turn whose message carried `messages`.
    pub(crate) fn new(messages: Vec<String>) -> Self {
        Self { messages }
    }
}

/// How one context message reads to the model.
pub(crate) fn render(text: &str) -> String {
    format!("[Context from the client for this turn; not a message from the user]\n{text}")
}

#[async_trait]
impl TurnExtension for ClientContext {
    fn name(&self) -> &'static str {
        "client_context"
    }

    async fn shape_request(
        &mut self,
        _view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        for text in &self.messages {
            request.messages.push(Message::user(render(text)));
        }
        Ok(Shaped::Call)
    }
}
