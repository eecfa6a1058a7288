//! What watches a runtime from the side: the metrics of `/metrics` and the traces of
//! [`crate::telemetry`] are both [`EventObserver`]s on one list of the runtime.
//!
//! An observer sees two things. Every commit's events once they are stored
//! ([`EventObserver::committed`], from `Runtime::announce`, before live followers hear of them),
//! so what it counts or traces is what the event stream holds, whichever feature wrote it. And
//! the few moments of a turn no event marks, with the timing only the turn core knows
//! ([`EventObserver::turn_work`]): a step begins, a model call ends (how long the provider
//! took), a tool call is settled. The core reports those through [`Runtime::observe_work`], one
//! general call, and knows nothing of what the observers do with them.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::engine::Runtime;
use crate::model::{ModelRequest, ModelResponse};
use crate::store::{StoredEvent, ToolCallRecord};

/// A model call of a turn, as it ended.
pub struct ModelCall<'a> {
    /// The session.
    pub session: &'a str,
    /// The turn's number.
    pub seq: u64,
    /// The step.
    pub step: u64,
    /// `provider/model`.
    pub model_id: &'a str,
    /// The model as the provider names it.
    pub model: &'a str,
    /// When the call started.
    pub started: SystemTime,
    /// How long the provider took to answer, when it answered (`None`: the call was cancelled or
    /// ran out of the turn's time).
    pub took: Option<Duration>,
    /// The request, when an observer asked for requests ([`EventObserver::wants_requests`]).
    pub request: Option<&'a ModelRequest>,
    /// The response, or why there is none.
    pub outcome: Result<&'a ModelResponse, &'a str>,
}

/// A moment of a turn that no event marks, reported by the turn core.
pub enum TurnWork<'a> {
    /// Step `step` of turn `seq` begins.
    StepBegan {
        /// The session.
        session: &'a str,
        /// The turn's number.
        seq: u64,
        /// The step.
        step: u64,
    },
    /// A model call ended.
    ModelCalled(ModelCall<'a>),
    /// A tool call of turn `seq` is settled (its record as it is about to be stored).
    ToolSettled {
        /// The session.
        session: &'a str,
        /// The turn's number.
        seq: u64,
        /// The call.
        call: &'a ToolCallRecord,
    },
}

/// Something that watches what a runtime does (see the module). Every method has a default that
/// does nothing; none may block for long: they run on the paths they observe.
pub trait EventObserver: Send + Sync {
    /// The events one commit stored, in order.
    fn committed(&self, _events: &[StoredEvent]) {}

    /// A moment of a turn no event marks.
    fn turn_work(&self, _work: &TurnWork<'_>) {}

    /// Whether model calls should be reported with their request (a copy is made for it).
    fn wants_requests(&self) -> bool {
        false
    }
}

/// The observers of a runtime, in the order they were added.
#[derive(Default)]
pub(crate) struct Observers(std::sync::RwLock<Vec<Arc<dyn EventObserver>>>);

impl Observers {
    pub(crate) fn add(&self, observer: Arc<dyn EventObserver>) {
        if let Ok(mut list) = self.0.write() {
            list.push(observer);
        }
    }

    fn each(&self, f: impl Fn(&dyn EventObserver)) {
        if let Ok(list) = self.0.read() {
            for observer in list.iter() {
                f(observer.as_ref());
            }
        }
    }

    fn any(&self, f: impl Fn(&dyn EventObserver) -> bool) -> bool {
        self.0
            .read()
            .map(|list| list.iter().any(|o| f(o.as_ref())))
            .unwrap_or(false)
    }
}

impl Runtime {
    /// Adds an observer of this runtime's commits and turns (see [`EventObserver`]).
    pub fn add_observer(&self, observer: Arc<dyn EventObserver>) {
        self.inner.observers.add(observer);
    }

    /// Tells every observer about what a commit stored.
    pub(crate) fn observe_committed(&self, events: &[StoredEvent]) {
        if events.is_empty() {
            return;
        }
        self.inner.observers.each(|o| o.committed(events));
    }

    /// Tells every observer about a moment of a turn (the turn core's one call for them).
    pub(crate) fn observe_work(&self, work: TurnWork<'_>) {
        self.inner.observers.each(|o| o.turn_work(&work));
    }

    /// Whether an observer wants model calls reported with their request.
    pub(crate) fn observers_want_requests(&self) -> bool {
        self.inner.observers.any(|o| o.wants_requests())
    }
}
