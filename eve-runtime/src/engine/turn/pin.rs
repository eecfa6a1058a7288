//! A turn stays on the model it ran on. A turn resumed by another process (after a crash, a
//! restart, a redeploy) whose model settings differ from those the turn's steps ran on would
//! otherwise continue, or answer an old prompt, silently on a different model. The model a turn
//! ran on is the journal's: its last step's `model_id`, or, for a step that started and never
//! answered, its `step.started` event. A mismatch fails the turn with `model_changed`, naming
//! both models and how to allow the switch (`EVE_ALLOW_MODEL_SWITCH=1`), which continues the turn
//! on the new model after a `turn.model_switched` event. (The build is pinned already: a turn
//! always finishes on the build it started on.)

use serde_json::json;

use super::{TurnDriver, TurnEnd};
use crate::engine::RuntimeResult;
use crate::engine::events as ev;
use crate::env_vars::{EVE_ALLOW_MODEL_SWITCH, EVE_MODEL};
use crate::store::{Batch, TurnRecord};

/// Events read backwards, per page, to find a started step's `step.started`.
const PAGE: u64 = 64;
/// Pages read at most (deltas of one streamed answer sit between it and the end).
const PAGES: u64 = 8;

impl TurnDriver<'_> {
    /// The model the turn's steps ran on, if any step started.
    async fn recorded_model(&self, turn: &TurnRecord) -> RuntimeResult<Option<String>> {
        let store = &self.rt.inner.store;
        if let Some(last) = store.steps(self.id(), turn.seq).await?.last() {
            return Ok(Some(last.model_id.clone()));
        }
        let Some(session) = store.session(self.id()).await? else {
            return Ok(None);
        };
        let mut hi = session.event_count;
        for _ in 0..PAGES {
            if hi == 0 {
                break;
            }
            let lo = hi.saturating_sub(PAGE);
            let limit = usize::try_from(hi - lo).unwrap_or(64);
            let events = store.events(self.id(), lo, limit).await?;
            for e in events.iter().rev() {
                if e.kind == ev::STEP_STARTED
                    && e.data.get("sequence").and_then(serde_json::Value::as_u64) == Some(turn.seq)
                {
                    return Ok(e
                        .data
                        .get("modelId")
                        .and_then(serde_json::Value::as_str)
                        .map(str::to_owned));
                }
                if e.kind == ev::TURN_STARTED {
                    return Ok(None);
                }
            }
            hi = lo;
        }
        Ok(None)
    }

    /// Before a stored turn moves on: `Some` when it ended because its model changed.
    pub(super) async fn check_model(
        &mut self,
        turn: &TurnRecord,
    ) -> RuntimeResult<Option<TurnEnd>> {
        let Some(ran_on) = self.recorded_model(turn).await? else {
            return Ok(None);
        };
        let now = self.model.model_id.clone();
        if ran_on == now {
            return Ok(None);
        }
        let allowed = (self.rt.inner.config.env)(EVE_ALLOW_MODEL_SWITCH)
            .is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
        if allowed {
            let mut batch = Batch::new();
            let mut data = ev::turn_started(turn);
            data["from"] = json!(ran_on);
            data["to"] = json!(now);
            batch.event(self.id(), ev::TURN_MODEL_SWITCHED, data);
            self.rt.commit(batch).await?;
            return Ok(None);
        }
        let message = format!(
            "{} ran on model `{ran_on}`, and this process has `{now}`: resume it with the model it \
             ran on ({EVE_MODEL}={ran_on}), or set {EVE_ALLOW_MODEL_SWITCH}=1 to continue it on \
             `{now}`",
            turn.turn_id()
        );
        let end = self
            .end_failed(turn.clone(), "model_changed", &message, None)
            .await?;
        Ok(Some(end))
    }
}
