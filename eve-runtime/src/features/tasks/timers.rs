//! Durable timers of a session: one row per timer in the store's notes, under
//! `timers:<session>`, keyed by the call that set it.
//!
//! A timer is written by the session's own driver (under its lease) in the commit that parks the
//! turn on it, and removed in the commit that settles its call, so it fires once per fleet: the
//! process that wakes the turn ([`crate::engine::Runtime::wake_at`], the start-up resume, or the
//! store watch of any node) settles the call under the lease, and a second waker finds it gone.
//! Task deadlines ([`super::table::TaskRecord::deadline_ms`]) are timers of the same kind kept
//! in the task's own row; `sleep` ([`crate::features::sleep`]) keeps its timers here.

use serde::{Deserialize, Serialize};

use crate::engine::{Runtime, RuntimeResult};
use crate::store::{Batch, NoteOp, NoteRecord, Op, now_ms};

/// One timer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Timer {
    /// The call that set it (its key).
    pub call_id: String,
    /// The turn of that call.
    pub turn_seq: u64,
    /// What set it (`sleep`).
    pub kind: String,
    /// The wait asked for, in seconds.
    pub seconds: f64,
    /// When it was set (epoch ms).
    pub started_at: i64,
    /// When it is due (epoch ms).
    pub due_ms: i64,
}

impl Timer {
    /// Whether it is due at `now` (epoch ms).
    pub(crate) fn due(&self, now: i64) -> bool {
        now >= self.due_ms
    }
}

/// The notes namespace of `session`'s timers.
fn namespace(session: &str) -> String {
    format!("timers:{session}")
}

/// Every timer of `session`.
pub(crate) async fn read(rt: &Runtime, session: &str) -> RuntimeResult<Vec<Timer>> {
    let notes = rt.inner.store.notes(&namespace(session)).await?;
    Ok(notes
        .iter()
        .filter_map(|n| serde_json::from_str(&n.text).ok())
        .collect())
}

/// The timer set by `call_id`, when there is one.
pub(crate) async fn of_call(
    rt: &Runtime,
    session: &str,
    call_id: &str,
) -> RuntimeResult<Option<Timer>> {
    let note = rt.inner.store.note(&namespace(session), call_id).await?;
    Ok(note.and_then(|n| serde_json::from_str(&n.text).ok()))
}

/// Adds the write of `timer` to `batch`.
pub(crate) fn put(batch: &mut Batch, session: &str, timer: &Timer) -> RuntimeResult<()> {
    let now = now_ms();
    batch.push(Op::Note(NoteOp::Put(NoteRecord {
        namespace: namespace(session),
        key: timer.call_id.clone(),
        text: serde_json::to_string(timer)?,
        created_at: now,
        updated_at: now,
    })));
    Ok(())
}

/// Adds the removal of `call_id`'s timer to `batch`.
pub(crate) fn remove(batch: &mut Batch, session: &str, call_id: &str) {
    batch.push(Op::Note(NoteOp::Delete {
        namespace: namespace(session),
        key: call_id.to_owned(),
    }));
}
