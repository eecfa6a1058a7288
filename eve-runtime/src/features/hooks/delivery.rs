//! Delivering stored events to observe hooks: how far each hook got, which process delivers,
//! and how a process about to exit (`eve run`) finishes what it started.
//!
//! Each observe hook has a durable cursor per session (`hook_cursors`): exit 0 acknowledges an
//! event and moves the cursor past it; any other outcome leaves it there and the event is
//! delivered again (after a backoff, or by another process, or after a restart). A session's
//! events reach its hooks in order, one at a time.
//!
//! Any process may deliver: the one that stored the events (it is told by its own commit), a
//! server that sees another process commit to the store (`Runtime::watch_store` looks for
//! sessions behind their hooks), a process starting on the store. Only the one holding the
//! session's delivery claim (`hooks:<session>`, see [`crate::engine::claims`]) runs hooks, so two
//! processes never deliver one session's events at once, and an event one acknowledged is past
//! the cursor the other reads next. "Once" means: each event reaches each hook until the hook
//! acknowledges it, and never after; a hook stopped on an event before it exits 0 (its timeout,
//! a crash of the delivering process, a lost claim) sees that event again, with the same `id`.
//!
//! [`Runtime::finish_hooks`] is the end of a short-lived process: it waits, up to a bound, for
//! the deliveries of the sessions this process stored events of. At the bound no new event
//! starts; a hook already running on one is left to finish (exiting never kills it half way),
//! and what is left is reported, for a server on the store to deliver.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use eve_compile::Hook;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{hook_tool, is_observe, observes};
use crate::engine::{LoadedBuild, Runtime, RuntimeResult};
use crate::store::*;

/// The cursor of a session whose build has no observe hook: its events up to there need no
/// delivery (so a server looking for sessions behind their hooks does not look at it again).
const NO_HOOKS: &str = "";

/// The claim key of a session's delivery.
fn claim_key(session: &str) -> String {
    format!("hooks:{session}")
}

/// What one delivery pass over a session came to.
enum Delivery {
    /// Every event is acknowledged.
    Done,
    /// Another live process holds the session's delivery claim.
    Held(u32),
    /// A hook did not acknowledge an event (the reason); it is delivered again later.
    Failed(String),
    /// The process is finishing: no new event was started.
    Stopped,
}

/// Where the delivery of one session stands in this process (see [`HookState::open`]).
#[derive(Debug, Clone)]
enum Open {
    Pending,
    Held(u32),
    Failed(String),
}

/// The observe-hook delivery of one runtime.
#[derive(Default)]
pub(crate) struct HookState {
    /// Sessions with a running delivery (`true`: more events arrived meanwhile).
    workers: Mutex<HashMap<String, bool>>,
    /// Sessions this runtime has delivery work for, until a pass finds nothing left: what
    /// [`Runtime::finish_hooks`] waits for.
    open: Mutex<HashMap<String, Open>>,
    /// Set by [`Runtime::finish_hooks`]: a failed event is left for later, not retried here.
    finishing: AtomicBool,
    /// Set when the finishing bound passed: no new event starts.
    stopped: AtomicBool,
    /// Woken when a delivery ends.
    idle: tokio::sync::Notify,
}

impl HookState {
    fn set_open(&self, session: &str, state: Option<Open>) {
        let Ok(mut open) = self.open.lock() else {
            return;
        };
        match state {
            Some(s) => {
                open.insert(session.to_owned(), s);
            }
            None => {
                open.remove(session);
            }
        }
    }

    fn busy(&self) -> bool {
        self.workers.lock().map(|w| !w.is_empty()).unwrap_or(false)
    }

    fn open(&self) -> Vec<(String, Open)> {
        self.open
            .lock()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }
}

/// An event an observe hook has not acknowledged when [`Runtime::finish_hooks`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingHookEvent {
    /// Session.
    pub session: String,
    /// Hook name.
    pub hook: String,
    /// Event index in the session.
    pub index: u64,
    /// Event type.
    pub kind: String,
}

/// What [`Runtime::finish_hooks`] left undelivered, and why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookBacklog {
    /// Events some hook has not acknowledged, in session and index order.
    pub pending: Vec<PendingHookEvent>,
    /// The wait reached its bound before delivery ended.
    pub cut: bool,
    /// Why hooks did not acknowledge events here (a hook's error), by session.
    pub failed: Vec<(String, String)>,
    /// Another live process delivers these sessions' events (its pid).
    pub elsewhere: Vec<(String, u32)>,
}

impl Runtime {
    /// Events were stored: start (or nudge) delivery to the observe hooks of their sessions.
    pub(crate) fn notify_hooks(&self, events: &[StoredEvent]) {
        if events.is_empty() || !self.inner.builds.observe_hooks_seen() {
            return;
        }
        let mut sessions: Vec<&str> = events.iter().map(|e| e.session_id.as_str()).collect();
        sessions.dedup();
        for session in sessions {
            self.spawn_delivery(session);
        }
    }

    /// Delivers what observe hooks have not acknowledged, whoever stored it: at start-up, and
    /// whenever a server sees another process commit.
    pub(crate) async fn resume_hooks(&self) -> RuntimeResult<()> {
        if let Err(e) = self.inner.builds.current() {
            tracing::debug!(error = %e, "no current build to look for hooks in");
        }
        if !self.inner.builds.observe_hooks_seen() {
            return Ok(());
        }
        for session in self.inner.store.sessions_behind_hooks().await? {
            self.spawn_delivery(&session);
        }
        Ok(())
    }

    /// Waits, at most `bound`, for this runtime's deliveries to observe hooks to end (for a
    /// process about to exit). At the bound, no new event starts and a hook running on one is
    /// left to finish (within its own timeout); then says what no hook has acknowledged yet.
    pub async fn finish_hooks(&self, bound: Duration) -> HookBacklog {
        let state = &self.inner.hooks;
        if !self.inner.builds.observe_hooks_seen() {
            return HookBacklog::default();
        }
        state.finishing.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + bound;
        let mut cut = false;
        loop {
            let idle = state.idle.notified();
            let busy = state.busy();
            let open = state.open();
            if !busy {
                if open.is_empty() {
                    return HookBacklog::default();
                }
                // Sessions another process delivers are asked for again (its claim may be
                // free by now); failed ones are done waiting.
                let held: Vec<&String> = open
                    .iter()
                    .filter(|(_, o)| matches!(o, Open::Held(_)))
                    .map(|(s, _)| s)
                    .collect();
                if held.is_empty() && open.iter().all(|(_, o)| matches!(o, Open::Failed(_))) {
                    break;
                }
                if tokio::time::Instant::now() < deadline {
                    for session in held {
                        self.spawn_delivery(session);
                    }
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                cut = true;
                state.stopped.store(true, Ordering::Relaxed);
                // A hook running on an event finishes it: the exit does not kill it.
                loop {
                    let idle = state.idle.notified();
                    if !state.busy() {
                        break;
                    }
                    tokio::select! {
                        () = idle => {}
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
                break;
            }
            let pause = (deadline - now).min(Duration::from_millis(200));
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        let mut backlog = HookBacklog {
            cut,
            ..HookBacklog::default()
        };
        for (session, open) in state.open() {
            let pending = match self.backlog_of(&session).await {
                Ok(p) => p,
                Err(e) => {
                    backlog.failed.push((session, e.to_string()));
                    continue;
                }
            };
            if pending.is_empty() {
                continue;
            }
            match open {
                Open::Failed(why) => backlog.failed.push((session.clone(), why)),
                Open::Held(pid) => backlog.elsewhere.push((session.clone(), pid)),
                Open::Pending => {}
            }
            backlog.pending.extend(pending);
        }
        backlog
            .pending
            .sort_by(|a, b| (&a.session, a.index).cmp(&(&b.session, b.index)));
        backlog
    }

    /// The events of `session` its observe hooks have not acknowledged.
    async fn backlog_of(&self, session: &str) -> RuntimeResult<Vec<PendingHookEvent>> {
        let store = &self.inner.store;
        let Some(record) = store.session(session).await? else {
            return Ok(Vec::new());
        };
        let build = self.session_build(&record.build_hash, &record).await?;
        let cursors = store.hook_cursors(session).await?;
        let mut out = Vec::new();
        for hook in build.manifest.agent.hooks.iter().filter(|h| is_observe(h)) {
            let mut next = cursor(&cursors, &hook.name);
            loop {
                let events = store.events(session, next, 256).await?;
                let Some(last) = events.last() else { break };
                next = last.index + 1;
                out.extend(events.iter().filter(|e| observes(hook, &e.kind)).map(|e| {
                    PendingHookEvent {
                        session: session.to_owned(),
                        hook: hook.name.clone(),
                        index: e.index,
                        kind: e.kind.clone(),
                    }
                }));
            }
        }
        Ok(out)
    }

    /// Starts this runtime's delivery to the observe hooks of `session`, or tells the running
    /// one that there is more.
    pub(crate) fn spawn_delivery(&self, session: &str) {
        let state = &self.inner.hooks;
        {
            let Ok(mut workers) = state.workers.lock() else {
                return;
            };
            if let Some(dirty) = workers.get_mut(session) {
                *dirty = true;
                return;
            }
            workers.insert(session.to_owned(), false);
        }
        state.set_open(session, Some(Open::Pending));
        let rt = self.clone();
        let session = session.to_owned();
        tokio::spawn(async move {
            let state = &rt.inner.hooks;
            let mut failures = 0u32;
            loop {
                let outcome = match rt.deliver(&session).await {
                    Ok(outcome) => outcome,
                    Err(e) => {
                        tracing::warn!(session, error = %e, "hook delivery failed");
                        Delivery::Failed(e.to_string())
                    }
                };
                let retry = match outcome {
                    Delivery::Done => {
                        failures = 0;
                        state.set_open(&session, None);
                        false
                    }
                    Delivery::Held(pid) => {
                        state.set_open(&session, Some(Open::Held(pid)));
                        false
                    }
                    Delivery::Stopped => false,
                    Delivery::Failed(why) => {
                        state.set_open(&session, Some(Open::Failed(why)));
                        if state.finishing.load(Ordering::Relaxed) {
                            false
                        } else {
                            failures = failures.saturating_add(1);
                            let backoff = Duration::from_millis(200u64 << failures.min(8));
                            tokio::time::sleep(backoff.min(Duration::from_secs(30))).await;
                            true
                        }
                    }
                };
                let Ok(mut workers) = state.workers.lock() else {
                    return;
                };
                let dirty = workers.get(&session).copied().unwrap_or(false);
                if (retry || dirty) && !state.stopped.load(Ordering::Relaxed) {
                    workers.insert(session.clone(), false);
                    continue;
                }
                workers.remove(&session);
                drop(workers);
                state.idle.notify_waiters();
                return;
            }
        });
    }

    /// One pass over a session: under its delivery claim, every event its observe hooks have
    /// not acknowledged, in order.
    async fn deliver(&self, session: &str) -> RuntimeResult<Delivery> {
        let store = self.inner.store.clone();
        let Some(record) = store.session(session).await? else {
            return Ok(Delivery::Done);
        };
        let build = self.session_build(&record.build_hash, &record).await?;
        let hooks: Vec<Hook> = build
            .manifest
            .agent
            .hooks
            .iter()
            .filter(|h| is_observe(h))
            .cloned()
            .collect();
        if hooks.is_empty() {
            let cursors = store.hook_cursors(session).await?;
            if record.event_count > cursor(&cursors, NO_HOOKS) {
                self.save_cursor(session, NO_HOOKS, record.event_count)
                    .await?;
            }
            return Ok(Delivery::Done);
        }
        if self.inner.hooks.stopped.load(Ordering::Relaxed) {
            return Ok(Delivery::Stopped);
        }
        if self.no_claim_for_tests() {
            return self.deliver_claimed(session, &build, &hooks, None).await;
        }
        let claim = match self.try_claim(&claim_key(session)).await? {
            Ok(claim) => claim,
            Err(pid) => return Ok(Delivery::Held(pid)),
        };
        let outcome = self
            .deliver_claimed(session, &build, &hooks, Some(&claim))
            .await;
        claim.release().await;
        outcome
    }

    /// Whether the test-only switch turned the delivery claim off (debug builds only).
    fn no_claim_for_tests(&self) -> bool {
        cfg!(debug_assertions)
            && (self.inner.config.env)(crate::env_vars::EVE_TEST_NO_HOOK_CLAIM).as_deref()
                == Some("1")
    }

    async fn deliver_claimed(
        &self,
        session: &str,
        build: &LoadedBuild,
        hooks: &[Hook],
        claim: Option<&crate::engine::claims::HeldClaim>,
    ) -> RuntimeResult<Delivery> {
        let store = self.inner.store.clone();
        // Read under the claim: what another holder acknowledged is past these.
        let cursors = store.hook_cursors(session).await?;
        let workspace = self.inner.config.state_dir.join("sandboxes").join(session);
        let agent_dir = build.files()?;
        let mut lowest = u64::MAX;
        let mut failed = None;
        for hook in hooks {
            let mut next = cursor(&cursors, &hook.name);
            'events: loop {
                let events = store.events(session, next, 64).await?;
                if events.is_empty() {
                    break;
                }
                for event in events {
                    if observes(hook, &event.kind) {
                        if self.inner.hooks.stopped.load(Ordering::Relaxed) {
                            self.save_cursor(session, &hook.name, next).await?;
                            return Ok(Delivery::Stopped);
                        }
                        if claim.is_some_and(|c| c.lost()) {
                            self.save_cursor(session, &hook.name, next).await?;
                            return Ok(Delivery::Failed(format!(
                                "the delivery claim of session {session} was lost"
                            )));
                        }
                        let mut stdin = event.to_wire();
                        stdin["id"] = json!(event.id);
                        stdin["index"] = json!(event.index);
                        stdin["sessionId"] = json!(session);
                        let ctx = self.tool_context(
                            build,
                            session,
                            event.id.clone(),
                            event.id.clone(),
                            workspace.clone(),
                            agent_dir.clone(),
                            Some(build.manifest.agent.hook_sandbox(hook)),
                        );
                        let result = self
                            .run_tool(&hook_tool(hook), &stdin, &ctx, CancellationToken::new())
                            .await;
                        if !result.ok {
                            let error = result.error.unwrap_or_default();
                            tracing::warn!(
                                session,
                                hook = %hook.name,
                                event = %event.id,
                                error,
                                "an observe hook did not acknowledge an event; it will be delivered again"
                            );
                            // The other hooks go on; this one waits on this event.
                            failed.get_or_insert(format!(
                                "hook `{}` on event {} ({}): {error}",
                                hook.name, event.index, event.kind
                            ));
                            break 'events;
                        }
                        // Acknowledged: never delivered again.
                        self.save_cursor(session, &hook.name, event.index + 1)
                            .await?;
                    }
                    next = event.index + 1;
                }
                self.save_cursor(session, &hook.name, next).await?;
            }
            lowest = lowest.min(next);
        }
        if let Some(why) = failed {
            return Ok(Delivery::Failed(why));
        }
        // A session that once ran a build without hooks keeps that mark in step.
        if cursors.iter().any(|(name, _)| name == NO_HOOKS) && lowest != u64::MAX {
            self.save_cursor(session, NO_HOOKS, lowest).await?;
        }
        Ok(Delivery::Done)
    }

    async fn save_cursor(&self, session: &str, hook: &str, next: u64) -> RuntimeResult<()> {
        let mut batch = Batch::new();
        batch.push(Op::Composition(CompositionOp::HookCursor {
            session_id: session.to_owned(),
            hook: hook.to_owned(),
            delivered: next,
        }));
        self.inner.store.commit(batch).await?;
        Ok(())
    }
}

/// The stored cursor of `hook` (0 when it has none).
fn cursor(cursors: &[(String, u64)], hook: &str) -> u64 {
    cursors
        .iter()
        .find(|(name, _)| name == hook)
        .map(|(_, next)| *next)
        .unwrap_or(0)
}
