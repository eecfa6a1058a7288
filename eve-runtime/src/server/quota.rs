//! Per-principal bounds of a channel, so that strangers sharing one server cannot starve each
//! other: one principal flooding new sessions or follow-up messages must not hold every turn slot
//! or the model while another principal's turn waits.
//!
//! Two bounds per principal (`limits:` of `channels/mcp.yaml` and `channels/eve.yaml`): sessions
//! in flight (a session of the principal with a turn running or a message queued) and messages
//! queued across them. A message that would pass either is refused, saying which bound and what
//! to do (the MCP channel: eve's `conflict` code, `retryable: true`; the HTTP API: `429
//! too_many_in_flight` with `Retry-After`); reads, answers to pending input and cancellation are
//! never refused, so the flooder can still wind its own work down.
//!
//! What is in flight is read from the store (the principal's running sessions and their queued
//! messages), so it holds across a restart and across servers sharing one store; admissions of
//! one principal are taken one at a time in this process, so a burst of parallel calls cannot
//! all pass the check before any of them is counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

use crate::engine::Runtime;
use crate::store::{SessionFilter, SessionStatus};

/// Default bound on a principal's invocations in flight.
pub const DEFAULT_IN_FLIGHT: usize = 8;
/// Default bound on the messages queued across a principal's invocations.
pub const DEFAULT_QUEUED: usize = 32;

/// The bounds of one principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Invocations with a turn running or a message queued.
    pub in_flight: usize,
    /// Messages accepted and not yet taken by a turn, across the principal's invocations.
    pub queued: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            in_flight: DEFAULT_IN_FLIGHT,
            queued: DEFAULT_QUEUED,
        }
    }
}

/// One principal's invocations last seen in flight, behind the lock that takes its admissions
/// one at a time.
type Slot = Arc<tokio::sync::Mutex<Vec<String>>>;

/// The admissions of every principal of one channel. Cheap to clone; clones share the state.
#[derive(Clone, Default)]
pub struct Quota {
    /// Per principal, its slot.
    held: Arc<Mutex<HashMap<String, Slot>>>,
}

impl std::fmt::Debug for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quota").finish_non_exhaustive()
    }
}

/// Why a message was not admitted.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Past a bound: what to tell the caller.
    Busy(String),
    /// The store could not be read.
    Internal(String),
}

/// An admission in progress: the principal's lock, held until the new work is recorded (or
/// the call gave up), so the next admission of the same principal counts it.
pub(crate) struct Admission {
    tracked: OwnedMutexGuard<Vec<String>>,
}

impl Admission {
    /// Records that `session` now has work of this principal in flight.
    pub(crate) fn record(mut self, session: &str) {
        if !self.tracked.iter().any(|s| s == session) {
            self.tracked.push(session.to_owned());
        }
    }
}

/// Principals tracked at most; beyond it, the idle ones are forgotten.
const MAX_PRINCIPALS: usize = 4096;

impl Quota {
    fn slot(&self, principal: &str) -> Slot {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.len() >= MAX_PRINCIPALS && !held.contains_key(principal) {
            // A slot nobody holds and that tracks nothing can go; its state is in the store.
            held.retain(|_, slot| {
                Arc::strong_count(slot) > 1 || !slot.try_lock().is_ok_and(|t| t.is_empty())
            });
        }
        held.entry(principal.to_owned()).or_default().clone()
    }

    /// Admits one more message of `principal`: a new invocation (`target` `None`) or a
    /// follow-up to `target`. `Err` is the refusal the caller gets.
    pub(crate) async fn admit(
        &self,
        runtime: &Runtime,
        principal: &str,
        target: Option<&str>,
        bounds: Bounds,
    ) -> Result<Admission, Refused> {
        let mut tracked = self.slot(principal).lock_owned().await;
        let mut candidates: Vec<String> = std::mem::take(&mut *tracked);
        let running = runtime
            .sessions(&SessionFilter {
                owner: Some(principal.to_owned()),
                status: Some(SessionStatus::Running),
                limit: bounds.in_flight.saturating_mul(4).max(64),
                ..SessionFilter::default()
            })
            .await
            .map_err(|e| Refused::Internal(e.to_string()))?;
        for record in running {
            if !candidates.contains(&record.id) {
                candidates.push(record.id);
            }
        }
        let mut busy = Vec::new();
        let mut queued = 0usize;
        for id in candidates {
            let waiting = runtime
                .store()
                .pending_inbox(&id)
                .await
                .map_err(|e| Refused::Internal(e.to_string()))?
                .len();
            let running = waiting > 0
                || runtime
                    .session(&id)
                    .await
                    .map_err(|e| Refused::Internal(e.to_string()))?
                    .is_some_and(|r| r.status == SessionStatus::Running);
            if running {
                queued += waiting;
                busy.push(id);
            }
        }
        let joins_busy = target.is_some_and(|t| busy.iter().any(|b| b == t));
        let refusal = if !joins_busy && busy.len() >= bounds.in_flight {
            Some(format!(
                "Too many invocations in flight for this caller ({} working; the limit is {}). \
                 Wait for one to finish or cancel one, then retry.",
                busy.len(),
                bounds.in_flight
            ))
        } else if queued >= bounds.queued {
            Some(format!(
                "Too many messages queued for this caller's invocations ({queued}; the limit is \
                 {}). Wait for them to be taken, then retry.",
                bounds.queued
            ))
        } else {
            None
        };
        *tracked = busy;
        match refusal {
            Some(message) => Err(Refused::Busy(message)),
            None => Ok(Admission { tracked }),
        }
    }
}

/// `limits: {in_flight: N, queued: N}` of `channel` (per principal; each at least 1).
pub(crate) fn limits(value: &serde_json::Value, channel: &str) -> Result<Bounds, String> {
    let Some(map) = value.as_object() else {
        return Err(format!(
            "`limits` must be a map such as `{{in_flight: 8, queued: 32}}`, found {value}"
        ));
    };
    let mut bounds = Bounds::default();
    for (key, v) in map {
        let n = v
            .as_u64()
            .filter(|n| *n >= 1)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                format!("`limits.{key}` must be a whole number of at least 1, found {v}")
            })?;
        match key.as_str() {
            "in_flight" => bounds.in_flight = n,
            "queued" => bounds.queued = n,
            other => {
                return Err(format!(
                    "`limits.{other}` is not a limit of the {channel} (it takes `in_flight` \
                     and `queued`, per principal)"
                ));
            }
        }
    }
    Ok(bounds)
}
