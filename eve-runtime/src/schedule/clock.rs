//! The time a scheduler reads: the system clock, a faster one for tests, or one moved by hand.
//!
//! Schedules are minutes apart at best (five-field cron), so a test of firing across a restart
//! would take minutes on the real clock. [`ScaledClock`] runs faster than real time from an anchor,
//! and since its time is a pure function of the real clock, two processes started with the same
//! setting (a process and its restart) agree on it. It is set with [`EVE_SCHEDULE_CLOCK`].

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::ScheduleError;

pub use crate::env_vars::EVE_SCHEDULE_CLOCK;

/// A source of "now" for schedules.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Real time to wait until this clock shows `at` (zero when it already does).
    fn until(&self, at: DateTime<Utc>) -> Duration {
        (at - self.now()).to_std().unwrap_or(Duration::ZERO)
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock running `speed` times faster than real time from the real instant `anchor` on (and
/// equal to real time at `anchor`).
#[derive(Debug, Clone, Copy)]
pub struct ScaledClock {
    anchor_ms: i64,
    speed: f64,
}

impl ScaledClock {
    /// A clock `speed` times faster than real time from `anchor_ms` (epoch milliseconds) on.
    pub(crate) fn new(anchor_ms: i64, speed: f64) -> Result<Self, ScheduleError> {
        if !(speed.is_finite() && speed > 0.0) {
            return Err(ScheduleError::Clock(format!(
                "the speed must be a positive number, found {speed}"
            )));
        }
        Ok(Self { anchor_ms, speed })
    }

    /// Parses `SPEED@ANCHOR_MS`.
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let bad = || {
            ScheduleError::Clock(format!(
                "expected `SPEED@ANCHOR_MS` (for example `60@1796000000000`), found `{text}`"
            ))
        };
        let (speed, anchor) = text.trim().split_once('@').ok_or_else(bad)?;
        let speed: f64 = speed.trim().parse().map_err(|_| bad())?;
        let anchor: i64 = anchor.trim().parse().map_err(|_| bad())?;
        Self::new(anchor, speed)
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> DateTime<Utc> {
        let real = Utc::now().timestamp_millis();
        let scaled = self.anchor_ms as f64 + (real - self.anchor_ms) as f64 * self.speed;
        let ms = if scaled.is_finite() {
            scaled.clamp(0.0, 8.0e15) as i64
        } else {
            real
        };
        DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_else(Utc::now)
    }

    fn until(&self, at: DateTime<Utc>) -> Duration {
        let scaled = (at - self.now()).to_std().unwrap_or(Duration::ZERO);
        scaled.div_f64(self.speed)
    }
}

/// A clock that stands still until moved (tests).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Sets the time.
    pub fn set(&self, at: DateTime<Utc>) {
        if let Ok(mut now) = self.now.lock() {
            *now = at;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.now.lock().map(|n| *n).unwrap_or_else(|_| Utc::now())
    }
}

/// The clock [`EVE_SCHEDULE_CLOCK`] asks for, or the system clock when it is not set.
pub fn clock_from_env() -> Result<std::sync::Arc<dyn Clock>, ScheduleError> {
    match std::env::var(EVE_SCHEDULE_CLOCK) {
        Ok(text) if !text.trim().is_empty() => Ok(std::sync::Arc::new(
            ScaledClock::parse(&text)
                .map_err(|e| ScheduleError::Clock(format!("{EVE_SCHEDULE_CLOCK}: {e}")))?,
        )),
        _ => Ok(std::sync::Arc::new(SystemClock)),
    }
}
