//! Denying a proposal (the third move): nothing in `agent/` changes, the staging folder is
//! removed, and the model gets the reason, recorded as `change.denied`.

use serde_json::json;

use super::{CHANGE_DENIED, ChangeStep, Proposal, change_request, staging_dir};
use crate::engine::RuntimeResult;
use crate::engine::events as ev;
use crate::engine::turn::seam::TurnView;
use crate::store::{Batch, CallStatus, ToolCallRecord};

/// Drops a denied proposal: the staging folder is removed and the call settles as denied,
/// with the principal's reason when they gave one.
pub(super) async fn deny_change(
    view: &TurnView<'_>,
    call: &ToolCallRecord,
    id: &str,
    proposal: &Proposal,
) -> RuntimeResult<ChangeStep> {
    let request = change_request(view, call).await?;
    let reason = request.as_ref().and_then(|r| r.reason.clone());
    let by = request
        .as_ref()
        .and_then(|r| r.responder.clone())
        .unwrap_or_else(|| ev::LOCAL_PRINCIPAL.to_owned());
    let _ = std::fs::remove_dir_all(staging_dir(&view.rt.inner.config.state_dir, id));
    let mut batch = Batch::new();
    let data = json!({"id": id, "callId": call.call_id, "by": by, "reason": reason,
                      "summary": proposal.summary});
    view.rt
        .change_event(&mut batch, view.id(), CHANGE_DENIED, data)
        .await?;
    let text = match reason {
        Some(r) => format!(
            "The change `{id}` was denied by {by}. Reason: {r}\nNothing in the agent \
             folder changed."
        ),
        None => {
            format!("The change `{id}` was denied by {by}. Nothing in the agent folder changed.")
        }
    };
    Ok(ChangeStep::Settle(CallStatus::Denied, json!(text), batch))
}
