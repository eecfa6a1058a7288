//! Circuit breakers, per session and tool: a tool that fails [`crate::engine::BreakerPolicy::threshold`]
//! times in a row in one session is refused in that session for a backoff that doubles up to a
//! maximum; a success closes it. One session's failures never refuse the tool to another: a
//! prompt-injected session that breaks `bash` on purpose breaks it for itself only.
//!
//! A tool that fails for everyone (its API is down, its script is broken) opens an agent-wide
//! breaker, but only when many sessions fail alike: when the tool's breaker opened in
//! [`crate::engine::BreakerPolicy::agent_sessions`] distinct sessions within
//! [`crate::engine::BreakerPolicy::agent_window`]. It then refuses the tool in every session for its own
//! backoff (doubling on each trip, up to the maximum); a success anywhere closes it. The trips are
//! counted by each runtime (a node of a fleet counts its own sessions); the open breaker is stored,
//! so every node refuses the tool once one has tripped it.
//!
//! Only failures of the tool itself count (a non-zero exit, a timeout, a transport error), never
//! an input eve refused before running ([`crate::tools::ToolResult::input_refused`]). The rows
//! are stored and cached on the runtime: a session's row is keyed `tool@session`, the agent's
//! `tool` (`tool@root@agent` when every root session is a world of its own), so the store's
//! breaker rows need no other shape.

use std::collections::HashMap;

use async_trait::async_trait;

use crate::engine::turn::seam::{GateAt, TurnExtension, TurnView};
use crate::engine::{Runtime, RuntimeResult};
use crate::store::*;

/// Whether `tool`'s breaker is per session: every tool's is (kept for callers that asked).
pub fn session_scoped(tool: &str) -> bool {
    let _ = tool;
    true
}

/// The key of `tool`'s breaker row for a call in `session`.
pub fn breaker_key(tool: &str, session: &str) -> String {
    format!("{tool}@{session}")
}

/// Sessions whose breaker of one tool opened, with when: the evidence of an agent-wide trip.
#[derive(Debug, Default)]
pub(crate) struct Trips {
    by_agent_key: HashMap<String, Vec<(String, i64)>>,
}

/// Circuit breakers as a feature of the turn: a call of a tool whose breaker is open is refused
/// before it is approved or run; a call's outcome moves the breakers, written with its result.
pub(crate) struct Breakers;

#[async_trait]
impl TurnExtension for Breakers {
    fn name(&self) -> &'static str {
        "breakers"
    }

    async fn gate_call(
        &mut self,
        view: &TurnView<'_>,
        _call: &ToolCallRecord,
        tool: &str,
        at: GateAt,
    ) -> RuntimeResult<Option<String>> {
        if at != GateAt::Run {
            return Ok(None);
        }
        refusal(view, tool).await
    }

    async fn call_ran(
        &self,
        view: &TurnView<'_>,
        tool: &str,
        ok: bool,
        writes: &mut Batch,
    ) -> RuntimeResult<()> {
        for row in outcome(view, tool, ok).await? {
            writes.push(Op::PutBreaker(row));
        }
        Ok(())
    }
}

/// The key of `tool`'s agent-wide breaker.
fn agent_breaker_key(view: &TurnView<'_>, tool: &str) -> String {
    if view.rt.inner.config.isolated_roots {
        format!("{}@agent", view.shared_key(tool))
    } else {
        tool.to_owned()
    }
}

/// Why `tool` is refused now (its session's breaker, else the agent's), if it is.
async fn refusal(view: &TurnView<'_>, tool: &str) -> RuntimeResult<Option<String>> {
    {
        let now = now_ms();
        let wait = |b: &BreakerRecord| (b.open_until - now + 999) / 1000;
        if let Some(b) = view.rt.breaker(&breaker_key(tool, view.id())).await?
            && b.open_until > now
        {
            return Ok(Some(format!(
                "`{tool}` is temporarily disabled in this session: it failed {} times in a row. \
                 It will be available again in {} s. Do not call it before then; tell the user or \
                 try another way.",
                b.consecutive_failures,
                wait(&b)
            )));
        }
        if let Some(b) = view.rt.breaker(&agent_breaker_key(view, tool)).await?
            && b.open_until > now
        {
            return Ok(Some(format!(
                "`{tool}` is temporarily disabled for every session: it kept failing in {} \
                 sessions. It will be available again in {} s. Do not call it before then; tell \
                 the user or try another way.",
                b.consecutive_failures,
                wait(&b)
            )));
        }
        Ok(None)
    }
}

/// Applies a call's outcome to `tool`'s breakers; returns the rows to store.
async fn outcome(view: &TurnView<'_>, tool: &str, ok: bool) -> RuntimeResult<Vec<BreakerRecord>> {
    let rt = view.rt;
    let session_key = breaker_key(tool, view.id());
    let agent_key = agent_breaker_key(view, tool);
    let mut rows = Vec::new();
    let Some(row) = rt.breaker_update(&session_key, ok).await? else {
        if ok {
            rows.extend(rt.breaker_close(&agent_key).await?);
        }
        return Ok(rows);
    };
    // A call runs only while its breaker is closed: open after it means it opened now.
    let tripped = !ok && row.open_until > now_ms();
    rows.push(row);
    if ok {
        rows.extend(rt.breaker_close(&agent_key).await?);
    } else if tripped {
        rows.extend(rt.breaker_trip(&agent_key, view.id()).await?);
    }
    Ok(rows)
}

impl Runtime {
    pub(crate) async fn breaker(&self, key: &str) -> RuntimeResult<Option<BreakerRecord>> {
        let mut cache = self.inner.breakers.lock().await;
        if let Some(b) = cache.get(key) {
            return Ok(Some(b.clone()));
        }
        let stored = self.inner.store.breaker(key).await?;
        if let Some(b) = &stored {
            cache.insert(key.to_owned(), b.clone());
        }
        Ok(stored)
    }

    fn backoff_bounds(&self) -> (i64, i64) {
        let policy = self.inner.config.breaker;
        let base = i64::try_from(policy.base.as_millis()).unwrap_or(30_000);
        let max = i64::try_from(policy.max.as_millis()).unwrap_or(600_000);
        (base, max)
    }

    /// Applies a call's outcome to the breaker `key`; returns the row to store when it changed.
    pub(crate) async fn breaker_update(
        &self,
        key: &str,
        ok: bool,
    ) -> RuntimeResult<Option<BreakerRecord>> {
        let threshold = self.inner.config.breaker.threshold;
        let (base, max) = self.backoff_bounds();
        let current = self.breaker(key).await?;
        let mut cache = self.inner.breakers.lock().await;
        let mut record = current.unwrap_or(BreakerRecord {
            tool: key.to_owned(),
            consecutive_failures: 0,
            open_until: 0,
            backoff_ms: base,
        });
        if ok {
            if record.consecutive_failures == 0 && record.open_until == 0 {
                return Ok(None);
            }
            record.consecutive_failures = 0;
            record.open_until = 0;
            record.backoff_ms = base;
        } else {
            record.consecutive_failures = record.consecutive_failures.saturating_add(1);
            if record.consecutive_failures >= threshold {
                record.open_until = now_ms().saturating_add(record.backoff_ms);
                record.backoff_ms = record.backoff_ms.saturating_mul(2).min(max);
            }
        }
        cache.insert(key.to_owned(), record.clone());
        Ok(Some(record))
    }

    /// Notes that `session`'s breaker of the tool whose agent-wide key is `agent_key` opened;
    /// opens the agent-wide breaker when enough distinct sessions did so within the window.
    async fn breaker_trip(
        &self,
        agent_key: &str,
        session: &str,
    ) -> RuntimeResult<Option<BreakerRecord>> {
        let policy = self.inner.config.breaker;
        let now = now_ms();
        let window = i64::try_from(policy.agent_window.as_millis()).unwrap_or(i64::MAX);
        let sessions = {
            let mut trips = self
                .inner
                .breaker_trips
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let list = trips.by_agent_key.entry(agent_key.to_owned()).or_default();
            list.retain(|(s, at)| now.saturating_sub(*at) <= window && s != session);
            list.push((session.to_owned(), now));
            list.len()
        };
        if sessions < policy.agent_sessions as usize {
            return Ok(None);
        }
        let (base, max) = self.backoff_bounds();
        let current = self.breaker(agent_key).await?;
        let mut cache = self.inner.breakers.lock().await;
        let mut record = current.unwrap_or(BreakerRecord {
            tool: agent_key.to_owned(),
            consecutive_failures: 0,
            open_until: 0,
            backoff_ms: base,
        });
        if record.open_until > now {
            return Ok(None);
        }
        record.consecutive_failures = u32::try_from(sessions).unwrap_or(u32::MAX);
        record.open_until = now.saturating_add(record.backoff_ms);
        record.backoff_ms = record.backoff_ms.saturating_mul(2).min(max);
        cache.insert(agent_key.to_owned(), record.clone());
        Ok(Some(record))
    }

    /// Closes the agent-wide breaker `agent_key` after a success; the row to store when it
    /// changed.
    async fn breaker_close(&self, agent_key: &str) -> RuntimeResult<Option<BreakerRecord>> {
        if let Ok(mut trips) = self.inner.breaker_trips.lock() {
            trips.by_agent_key.remove(agent_key);
        }
        let Some(mut record) = self.breaker(agent_key).await? else {
            return Ok(None);
        };
        if record.consecutive_failures == 0 && record.open_until == 0 {
            return Ok(None);
        }
        let (base, _) = self.backoff_bounds();
        record.consecutive_failures = 0;
        record.open_until = 0;
        record.backoff_ms = base;
        self.inner
            .breakers
            .lock()
            .await
            .insert(agent_key.to_owned(), record.clone());
        Ok(Some(record))
    }
}
