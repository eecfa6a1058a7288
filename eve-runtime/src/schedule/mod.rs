//! Schedules: `agent/schedules/NAME.md` fired on their cron, each fire a session.
//!
//! A [`Scheduler`] runs inside `eve serve` and `eve dev`. It reads the schedules of the current
//! build (so a rebuild that adds, changes or removes one takes effect at once) and keeps each
//! one's next fire time in the store. A fire is claimed by a compare-and-set of that stored time
//! committed in the same transaction as the session it starts, so a process killed at any point
//! and started again neither skips nor repeats a fire, and two processes on one store never both
//! fire it.
//!
//! Policies (front matter of the schedule):
//! - `overlap: skip` (default): when the previous fire's session is still busy (running, parked
//!   on an approval, or with a message not yet taken), the fire is recorded as `skipped`;
//!   `overlap: queue`: it is recorded as `queued` and started, in order, once that session is idle.
//! - `catch_up: none` (default): a fire more than [`DEFAULT_GRACE`] late (eve was not running at
//!   the time) is recorded as `missed`; `catch_up: latest`: the most recent missed fire runs once.
//!   Older missed fires are recorded as one `missed` row under either policy.
//!
//! Time comes from a [`Clock`], so tests move it by hand ([`ManualClock`]) or speed it up
//! ([`ScaledClock`], [`EVE_SCHEDULE_CLOCK`]).

mod clock;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use eve_compile::{CatchUp, Overlap, Schedule};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use clock::{Clock, EVE_SCHEDULE_CLOCK, ManualClock, ScaledClock, SystemClock, clock_from_env};

use crate::engine::{Accept, Extra, Runtime, RuntimeError, SessionRef, new_session_id};
use crate::store::{
    FireStatus, FireTrigger, FireWrite, ScheduleClaim, ScheduleFire, ScheduleState, SessionFilter,
    SessionStatus, StateExpect, StoreError, now_ms,
};

/// How late a fire may be claimed and still count as on time (a restart, a slow start).
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// Longest sleep between two looks at the schedules (a rebuild may have changed them).
pub(crate) const DEFAULT_MAX_SLEEP: Duration = Duration::from_secs(1);
/// Most fires waiting under `overlap: queue`; later ones are skipped.
pub(crate) const DEFAULT_QUEUE_LIMIT: usize = 100;
/// Stored next fire time of a schedule that never fires again.
const NEVER: i64 = i64::MAX;
/// Most occurrences counted when looking for the latest missed fire.
const MAX_SCAN: usize = 10_000;
/// Poll interval while a queued fire waits for the previous session.
const QUEUE_POLL: Duration = Duration::from_millis(100);

/// Why a schedule operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The current build has no schedule with this name.
    #[error("no schedule named `{0}` in the current build")]
    NotFound(String),
    /// The runtime failed (no build, the store).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The clock setting is invalid.
    #[error("{0}")]
    Clock(String),
}

/// Result alias of schedules.
pub(crate) type ScheduleResult<T> = Result<T, ScheduleError>;

/// How a [`Scheduler`] behaves.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// How late a fire may be and still count as on time.
    pub grace: Duration,
    /// Longest sleep between two looks at the schedules.
    pub max_sleep: Duration,
    /// Most queued fires per schedule.
    pub queue_limit: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            grace: DEFAULT_GRACE,
            max_sleep: DEFAULT_MAX_SLEEP,
            queue_limit: DEFAULT_QUEUE_LIMIT,
        }
    }
}

/// What one look at the schedules did.
#[derive(Debug, Clone, Default)]
pub struct TickReport {
    /// Fires written (started, skipped, missed, queued), in order.
    pub fires: Vec<ScheduleFire>,
    /// When to look again (real time).
    pub(crate) wait: Duration,
}

struct Inner {
    runtime: Runtime,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
    wake: Notify,
}

/// Fires the current build's schedules. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("clock", &self.inner.clock)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

fn to_time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

/// What the stored next fire time of `schedule` was computed from.
pub(crate) fn spec_of(schedule: &Schedule) -> String {
    format!("{} {}", schedule.cron.trim(), schedule.timezone.trim())
}

fn next_after(schedule: &Schedule, after: DateTime<Utc>) -> i64 {
    eve_compile::cron::next_fire(schedule, after).map_or(NEVER, |t| t.timestamp_millis())
}

fn fire_row(
    schedule: &str,
    fire_at: i64,
    trigger: FireTrigger,
    status: FireStatus,
    session_id: Option<String>,
    detail: Option<String>,
) -> ScheduleFire {
    let now = now_ms();
    ScheduleFire {
        schedule: schedule.to_owned(),
        fire_at,
        trigger,
        status,
        session_id,
        detail,
        created_at: now,
        updated_at: now,
    }
}

impl Scheduler {
    /// A scheduler over `runtime`'s current build and store, reading time from `clock`.
    pub fn new(runtime: Runtime, clock: Arc<dyn Clock>) -> Self {
        Self::with_config(runtime, clock, SchedulerConfig::default())
    }

    /// Like [`Scheduler::new`] with explicit settings.
    pub fn with_config(runtime: Runtime, clock: Arc<dyn Clock>, config: SchedulerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                runtime,
                clock,
                config,
                wake: Notify::new(),
            }),
        }
    }

    /// The clock.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Asks a running [`Scheduler::run`] to look at the schedules now (after a rebuild).
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Fires schedules until `shutdown` is cancelled.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            let wait = match self.tick().await {
                Ok(report) => report.wait,
                Err(e) => {
                    tracing::warn!(error = %e, "schedules: cannot fire");
                    self.inner.config.max_sleep
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.inner.wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Looks at every schedule of the current build once: records new schedules' next fire
    /// times, fires the ones that are due, starts queued fires whose turn has come.
    pub async fn tick(&self) -> ScheduleResult<TickReport> {
        let build = self.inner.runtime.builds().current()?;
        let schedules = &build.manifest.agent.schedules;
        let mut report = TickReport {
            fires: Vec::new(),
            wait: self.inner.config.max_sleep,
        };
        if schedules.is_empty() {
            return Ok(report);
        }
        let states: HashMap<String, ScheduleState> = self
            .inner
            .runtime
            .store()
            .schedule_states()
            .await?
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        let mut earliest = NEVER;
        for schedule in schedules {
            let next = self
                .tick_one(schedule, states.get(&schedule.name), &mut report)
                .await?;
            earliest = earliest.min(next);
        }
        if let Some(at) = to_time(earliest) {
            let until = self.inner.clock.until(at) + Duration::from_millis(1);
            report.wait = report.wait.min(until).max(Duration::from_millis(5));
        }
        Ok(report)
    }

    /// One schedule; returns its next fire time as now stored.
    async fn tick_one(
        &self,
        schedule: &Schedule,
        state: Option<&ScheduleState>,
        report: &mut TickReport,
    ) -> ScheduleResult<i64> {
        let name = schedule.name.as_str();
        let spec = spec_of(schedule);
        let now = self.inner.clock.now();
        let now_ms = now.timestamp_millis();
        let next_after_now = next_after(schedule, now);
        let state = match state {
            Some(s) if s.spec == spec => s,
            other => {
                // New, or its cron or time zone changed: the next fire counts from now.
                let claim = ScheduleClaim {
                    schedule: name.to_owned(),
                    expect: other
                        .map_or(StateExpect::Absent, |s| StateExpect::Next(s.next_fire_at)),
                    next: Some((next_after_now, spec)),
                    fires: Vec::new(),
                };
                self.inner.runtime.claim_schedule(claim).await?;
                return Ok(next_after_now);
            }
        };
        if schedule.overlap == Overlap::Queue {
            let waiting = self.start_queued(schedule, report).await?;
            if waiting {
                report.wait = report.wait.min(QUEUE_POLL);
            }
        }
        let due = state.next_fire_at;
        if due == NEVER || now_ms < due {
            return Ok(due);
        }

        // Due: find the latest occurrence not after now; every earlier one was missed.
        let mut scan = scan_due(schedule, due, now);
        let latest = scan.latest;
        let late = Duration::from_millis(u64::try_from(now_ms - latest).unwrap_or(0));
        let run = late <= self.inner.config.grace || schedule.catch_up == CatchUp::Latest;
        if !run {
            scan.pass_over(latest);
        }
        let mut fires = Vec::new();
        if let (Some(first), Some(last)) = (scan.first, scan.last) {
            let detail = if scan.missed == 1 {
                format!(
                    "due at {} while eve was not running",
                    crate::store::rfc3339(first)
                )
            } else {
                format!(
                    "{}{} fires from {} to {} fell due while eve was not running",
                    if scan.approximate { "more than " } else { "" },
                    scan.missed,
                    crate::store::rfc3339(first),
                    crate::store::rfc3339(last)
                )
            };
            fires.push(FireWrite::Insert(fire_row(
                name,
                first,
                FireTrigger::Cron,
                FireStatus::Missed,
                None,
                Some(detail),
            )));
        }
        let mut started = None;
        if run {
            let busy = self.busy(name).await?;
            let queued = if schedule.overlap == Overlap::Queue {
                self.inner
                    .runtime
                    .store()
                    .schedule_fires(name, Some(FireStatus::Queued), 0)
                    .await?
                    .len()
            } else {
                0
            };
            let fire = match (schedule.overlap, busy) {
                (Overlap::Skip, Some(previous)) => fire_row(
                    name,
                    latest,
                    FireTrigger::Cron,
                    FireStatus::Skipped,
                    None,
                    Some(format!(
                        "the previous fire's session {previous} was still busy (overlap: skip)"
                    )),
                ),
                (Overlap::Queue, busy) if busy.is_some() || queued > 0 => {
                    if queued >= self.inner.config.queue_limit {
                        fire_row(
                            name,
                            latest,
                            FireTrigger::Cron,
                            FireStatus::Skipped,
                            None,
                            Some(format!(
                                "{queued} fires already queued (the limit); the previous \
                                 session is still busy"
                            )),
                        )
                    } else {
                        report.wait = report.wait.min(QUEUE_POLL);
                        fire_row(
                            name,
                            latest,
                            FireTrigger::Cron,
                            FireStatus::Queued,
                            None,
                            Some(match busy {
                                Some(previous) => format!(
                                    "waiting for the previous fire's session {previous} \
                                     (overlap: queue)"
                                ),
                                None => {
                                    "waiting for earlier queued fires (overlap: queue)".to_owned()
                                }
                            }),
                        )
                    }
                }
                _ => {
                    let id = new_session_id();
                    started = Some(id.clone());
                    fire_row(
                        name,
                        latest,
                        FireTrigger::Cron,
                        FireStatus::Started,
                        Some(id),
                        None,
                    )
                }
            };
            fires.push(FireWrite::Insert(fire));
        }
        let written: Vec<ScheduleFire> = fires
            .iter()
            .map(|w| match w {
                FireWrite::Insert(f) | FireWrite::Promote { to: f, .. } => f.clone(),
            })
            .collect();
        let claim = ScheduleClaim {
            schedule: name.to_owned(),
            expect: StateExpect::Next(due),
            next: Some((next_after_now, spec)),
            fires,
        };
        let claimed = match &started {
            Some(id) => self
                .inner
                .runtime
                .accept(fire_accept(schedule, id, claim))
                .await?
                .is_some(),
            None => self.inner.runtime.claim_schedule(claim).await?,
        };
        if claimed {
            for fire in &written {
                log_fire(fire);
            }
            report.fires.extend(written);
        } else {
            tracing::debug!(
                schedule = name,
                "schedules: another process claimed the fire"
            );
        }
        Ok(next_after_now)
    }

    /// Starts the oldest queued fire of `schedule` when the previous session is idle. Returns
    /// whether fires are still waiting.
    async fn start_queued(
        &self,
        schedule: &Schedule,
        report: &mut TickReport,
    ) -> ScheduleResult<bool> {
        let name = schedule.name.as_str();
        let queued = self
            .inner
            .runtime
            .store()
            .schedule_fires(name, Some(FireStatus::Queued), 0)
            .await?;
        let Some(oldest) = queued.last() else {
            return Ok(false);
        };
        if self.busy(name).await?.is_some() {
            return Ok(true);
        }
        let id = new_session_id();
        let mut to = oldest.clone();
        to.status = FireStatus::Started;
        to.session_id = Some(id.clone());
        to.detail = None;
        to.updated_at = now_ms();
        let claim = ScheduleClaim {
            schedule: name.to_owned(),
            expect: StateExpect::Any,
            next: None,
            fires: vec![FireWrite::Promote {
                from: FireStatus::Queued,
                to: to.clone(),
            }],
        };
        if self
            .inner
            .runtime
            .accept(fire_accept(schedule, &id, claim))
            .await?
            .is_some()
        {
            log_fire(&to);
            report.fires.push(to);
        }
        Ok(queued.len() > 1)
    }

    /// Fires `name` once now, whatever its cadence and overlap policy (the dev route). Returns
    /// the fire with its session.
    pub(crate) async fn fire_now(&self, name: &str) -> ScheduleResult<ScheduleFire> {
        let build = self.inner.runtime.builds().current()?;
        let schedule = build
            .manifest
            .agent
            .schedules
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ScheduleError::NotFound(name.to_owned()))?;
        let id = new_session_id();
        // A manual fire is keyed by its request time; two in the same millisecond move apart.
        let start = now_ms();
        for at in start..start + 16 {
            let fire = fire_row(
                name,
                at,
                FireTrigger::Manual,
                FireStatus::Started,
                Some(id.clone()),
                None,
            );
            let claim = ScheduleClaim {
                schedule: name.to_owned(),
                expect: StateExpect::Any,
                next: None,
                fires: vec![FireWrite::Insert(fire.clone())],
            };
            if self
                .inner
                .runtime
                .accept(fire_accept(schedule, &id, claim))
                .await?
                .is_some()
            {
                log_fire(&fire);
                return Ok(fire);
            }
        }
        Err(ScheduleError::Runtime(RuntimeError::Other(format!(
            "cannot record a manual fire of `{name}`"
        ))))
    }

    /// The previous fire's session, when it is still busy.
    async fn busy(&self, name: &str) -> ScheduleResult<Option<String>> {
        let filter = SessionFilter {
            schedule: Some(name.to_owned()),
            limit: 1,
            ..SessionFilter::default()
        };
        let runtime = &self.inner.runtime;
        let Some(last) = runtime.sessions(&filter).await?.into_iter().next() else {
            return Ok(None);
        };
        if last.status != SessionStatus::Idle
            || !runtime.store().pending_inbox(&last.id).await?.is_empty()
        {
            return Ok(Some(last.id));
        }
        Ok(None)
    }
}

/// A fire's new session `id` on the current build, tagged with the schedule, with its prompt
/// accepted, committed only if `claim` holds (the session's driver starts with it).
fn fire_accept(schedule: &Schedule, id: &str, claim: ScheduleClaim) -> Accept {
    let text = if schedule.prompt.trim().is_empty() {
        format!("Scheduled run of `{}`.", schedule.name)
    } else {
        schedule.prompt.clone()
    };
    Accept {
        session: SessionRef::New {
            id: id.to_owned(),
            schedule: Some(schedule.name.clone()),
        },
        message: Some(text),
        extra: vec![Extra::ScheduleFire(claim)],
    }
}

/// Occurrences of a schedule that fell due: the latest not after now, and those passed over.
#[derive(Debug, Clone, Copy)]
struct Scan {
    latest: i64,
    missed: u64,
    first: Option<i64>,
    last: Option<i64>,
    approximate: bool,
}

impl Scan {
    fn pass_over(&mut self, at: i64) {
        self.missed += 1;
        self.first.get_or_insert(at);
        self.last = Some(at);
    }
}

/// From the stored due time `due`, walks the occurrences up to `now`. A frequent cron that was
/// down for long walks at most [`MAX_SCAN`] occurrences, then jumps to the last day.
fn scan_due(schedule: &Schedule, due: i64, now: DateTime<Utc>) -> Scan {
    let now_ms = now.timestamp_millis();
    let mut scan = Scan {
        latest: due,
        missed: 0,
        first: None,
        last: None,
        approximate: false,
    };
    let mut steps = 0;
    while steps < 2 * MAX_SCAN {
        let Some(cursor) = to_time(scan.latest) else {
            break;
        };
        let following = next_after(schedule, cursor);
        if following == NEVER || following > now_ms {
            break;
        }
        scan.pass_over(scan.latest);
        scan.latest = following;
        steps += 1;
        if steps == MAX_SCAN {
            let jump = next_after(schedule, now - chrono::TimeDelta::days(1));
            if jump != NEVER && jump > scan.latest && jump <= now_ms {
                scan.pass_over(scan.latest);
                scan.latest = jump;
                scan.approximate = true;
            }
        }
    }
    scan
}

fn log_fire(fire: &ScheduleFire) {
    tracing::info!(
        schedule = %fire.schedule,
        at = %crate::store::rfc3339(fire.fire_at),
        status = %fire.status,
        session = fire.session_id.as_deref().unwrap_or("-"),
        "schedule fired"
    );
}
