//! Rows of the schedule tables and the claim that writes them.
//!
//! A schedule's next fire time lives in the store, so a restarted process neither skips nor repeats
//! a fire: a scheduler claims a fire with a [`ScheduleClaim`], a compare-and-set of the stored next
//! fire time committed in the same transaction as the fire's rows and the session it starts. Two
//! schedulers (two processes on one store, or a restart racing the old process) cannot both win.

use serde::{Deserialize, Serialize};

/// What started a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FireTrigger {
    /// The schedule's cron expression.
    Cron,
    /// A manual request (the dev route `POST /eve/v1/dev/schedules/:id`).
    Manual,
}

impl FireTrigger {
    /// The stored spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Cron => "cron",
            Self::Manual => "manual",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "cron" => Some(Self::Cron),
            "manual" => Some(Self::Manual),
            _ => None,
        }
    }
}

/// What became of a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FireStatus {
    /// Its session was created (`session_id`).
    Started,
    /// Not run: the previous fire's session was still busy (`overlap: skip`).
    Skipped,
    /// Not run: it fell due while nothing was running (`catch_up: none`, or older than the latest).
    Missed,
    /// Waiting for the previous fire's session to finish (`overlap: queue`).
    Queued,
}

impl FireStatus {
    /// The stored spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Skipped => "skipped",
            Self::Missed => "missed",
            Self::Queued => "queued",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "started" => Some(Self::Started),
            "skipped" => Some(Self::Skipped),
            "missed" => Some(Self::Missed),
            "queued" => Some(Self::Queued),
            _ => None,
        }
    }
}

impl std::fmt::Display for FireStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A schedule's stored state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// Schedule name.
    pub name: String,
    /// The cron expression and time zone `next_fire_at` was computed from; when the schedule's
    /// changes, the next fire time is computed again.
    pub spec: String,
    /// Next fire time, epoch milliseconds (`i64::MAX`: never).
    pub next_fire_at: i64,
    /// Last write, epoch milliseconds.
    pub(crate) updated_at: i64,
}

/// One fire of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleFire {
    /// Schedule name.
    pub schedule: String,
    /// The fire time (the cron occurrence, or the request time of a manual fire), epoch ms.
    pub fire_at: i64,
    /// What started it.
    pub trigger: FireTrigger,
    /// What became of it.
    pub status: FireStatus,
    /// The session it started.
    pub session_id: Option<String>,
    /// Why it was skipped, missed or queued, in words.
    pub detail: Option<String>,
    /// Written, epoch ms.
    pub created_at: i64,
    /// Last changed, epoch ms.
    pub updated_at: i64,
}

/// What the stored next fire time must be for a claim to win.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateExpect {
    /// No condition.
    Any,
    /// The schedule has no stored state yet.
    Absent,
    /// The stored next fire time is this one.
    Next(i64),
}

/// A write to the fires table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireWrite {
    /// A new fire; the claim loses if the same (schedule, time, trigger) is already stored.
    Insert(ScheduleFire),
    /// A stored fire moves on (a queued fire starts); the claim loses unless it is in `from`.
    Promote {
        /// The status it must have.
        from: FireStatus,
        /// The row as it becomes.
        to: ScheduleFire,
    },
}

/// A compare-and-set on a schedule's state, with the fire rows it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleClaim {
    /// Schedule name.
    pub schedule: String,
    /// Condition on the stored next fire time.
    pub expect: StateExpect,
    /// The new next fire time and spec, if it moves.
    pub next: Option<(i64, String)>,
    /// Fire rows to write.
    pub fires: Vec<FireWrite>,
}
