//! Circuit breakers: a tool that fails [`super::BreakerPolicy::threshold`] times in a row is
//! refused for a backoff that doubles up to a maximum; a success closes it. The rows are stored and
//! cached on the runtime.
//!
//! Only failures of the tool itself count (a non-zero exit, a timeout, a transport error), never
//! an input eve refused before running ([`crate::tools::ToolResult::input_refused`]): one
//! session's mistakes must not disable a tool for everyone. A breaker is scoped to the session
//! for the built-in file tools (their failures are about that session's workspace) and to the
//! agent for every other tool (a broken script or API fails for all). A session-scoped breaker
//! is keyed `tool@session`, so the store's breaker rows need no other shape.

use super::turn::TurnDriver;
use super::{Runtime, RuntimeResult};
use crate::store::*;
use crate::tools::builtin::{READ_FILE, WRITE_FILE};

/// Whether `tool`'s breaker is per session (else per agent).
pub fn session_scoped(tool: &str) -> bool {
    matches!(tool, READ_FILE | WRITE_FILE)
}

/// The key of `tool`'s breaker row for a call in `session`.
pub fn breaker_key(tool: &str, session: &str) -> String {
    if session_scoped(tool) {
        format!("{tool}@{session}")
    } else {
        tool.to_owned()
    }
}

impl TurnDriver<'_> {
    /// The key of `tool`'s breaker for this turn's session.
    pub(in crate::engine) fn breaker_key(&self, tool: &str) -> String {
        let key = breaker_key(tool, &self.session.id);
        if session_scoped(tool) {
            key
        } else {
            self.shared_key(&key)
        }
    }

    pub(in crate::engine) async fn breaker_refusal(
        &self,
        tool: &str,
        key: &str,
    ) -> RuntimeResult<Option<String>> {
        let record = self.rt.breaker(key).await?;
        let now = now_ms();
        Ok(match record {
            Some(b) if b.open_until > now => Some(format!(
                "`{tool}` is temporarily disabled: it failed {} times in a row. It will be \
                 available again in {} s. Do not call it before then; tell the user or try \
                 another way.",
                b.consecutive_failures,
                (b.open_until - now + 999) / 1000
            )),
            _ => None,
        })
    }
}

impl Runtime {
    pub(in crate::engine) async fn breaker(
        &self,
        tool: &str,
    ) -> RuntimeResult<Option<BreakerRecord>> {
        let mut cache = self.inner.breakers.lock().await;
        if let Some(b) = cache.get(tool) {
            return Ok(Some(b.clone()));
        }
        let stored = self.inner.store.breaker(tool).await?;
        if let Some(b) = &stored {
            cache.insert(tool.to_owned(), b.clone());
        }
        Ok(stored)
    }

    /// Applies a call's outcome to the tool's breaker; returns the row to store when it changed.
    pub(in crate::engine) async fn breaker_update(
        &self,
        tool: &str,
        ok: bool,
    ) -> RuntimeResult<Option<BreakerRecord>> {
        let policy = self.inner.config.breaker;
        let base = i64::try_from(policy.base.as_millis()).unwrap_or(30_000);
        let max = i64::try_from(policy.max.as_millis()).unwrap_or(600_000);
        let current = self.breaker(tool).await?;
        let mut cache = self.inner.breakers.lock().await;
        let mut record = current.unwrap_or(BreakerRecord {
            tool: tool.to_owned(),
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
            if record.consecutive_failures >= policy.threshold {
                record.open_until = now_ms().saturating_add(record.backoff_ms);
                record.backoff_ms = record.backoff_ms.saturating_mul(2).min(max);
            }
        }
        cache.insert(tool.to_owned(), record.clone());
        Ok(Some(record))
    }
}
