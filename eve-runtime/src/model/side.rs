//! Side calls: one model request whose streamed events nobody follows (a compaction's summary,
//! a critic's verdict, a reviewer's judgement), with the plumbing they share.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{
    Message, ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse, ToolChoice,
};

impl ModelRequest {
    /// A request without tools for a side call: `system`, then `messages`.
    pub(crate) fn side(model: &str, system: String, messages: Vec<Message>) -> Self {
        Self {
            model: model.to_owned(),
            system,
            messages,
            tools: Vec::new(),
            reasoning: None,
            max_output_tokens: None,
            tool_choice: ToolChoice::Auto,
            temperature: None,
            output_schema: None,
            safety_identifier: None,
        }
    }
}

/// Why a side call gave no response.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SideError {
    /// The provider failed.
    #[error("{0}")]
    Model(ModelError),
    /// The caller's cancellation fired.
    #[error("cancelled")]
    Cancelled,
    /// No answer within the deadline.
    #[error("no answer within {} s", .0.as_secs())]
    TimedOut(Duration),
}

/// Makes a side call; gives up when `cancel` fires or `deadline` passes.
pub(crate) async fn side_call(
    client: &dyn ModelClient,
    request: &ModelRequest,
    cancel: Option<&CancellationToken>,
    deadline: Option<Duration>,
) -> Result<ModelResponse, SideError> {
    let mut ignore = |_event: ModelEvent| {};
    let call = client.stream(request, &mut ignore);
    let timed = async {
        match deadline {
            Some(limit) => match tokio::time::timeout(limit, call).await {
                Ok(answer) => answer.map_err(SideError::Model),
                Err(_) => Err(SideError::TimedOut(limit)),
            },
            None => call.await.map_err(SideError::Model),
        }
    };
    match cancel {
        Some(token) => tokio::select! {
            r = timed => r,
            () = token.cancelled() => Err(SideError::Cancelled),
        },
        None => timed.await,
    }
}
