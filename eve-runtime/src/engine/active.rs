//! The drivers running in this process: one per session at most. New work marks a running
//! driver dirty (it goes round again) or starts one; a driver that finds nothing left
//! unregisters unless work arrived meanwhile, and wakes whoever waits for it to settle.

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Runtime;

#[derive(Default)]
pub(super) struct Active {
    pub(super) cancel: CancellationToken,
    pub(super) dirty: bool,
    pub(super) done: Option<watch::Sender<bool>>,
}

impl Runtime {
    pub(super) fn is_active(&self, session: &str) -> bool {
        self.inner
            .active
            .lock()
            .map(|a| a.contains_key(session))
            .unwrap_or(false)
    }

    pub(super) fn cancel_token(&self, session: &str) -> Option<CancellationToken> {
        self.inner
            .active
            .lock()
            .ok()
            .and_then(|a| a.get(session).map(|x| x.cancel.clone()))
    }

    /// New work arrived: tell a running driver, or start one (when `autostart`).
    pub(crate) fn kick(&self, session: &str) {
        if self.mark_dirty(session) {
            return;
        }
        if self.inner.config.autostart {
            self.spawn_driver(session);
        }
    }

    pub(super) async fn kick_or_drive(&self, session: &str) {
        if self.mark_dirty(session) {
            return;
        }
        if self.inner.config.autostart {
            self.spawn_driver(session);
        } else if let Err(e) = self.drive(session).await {
            tracing::warn!(session, error = %e, "cancelling the session failed");
        }
    }

    /// Marks a running driver dirty; `false` when there is none.
    pub(super) fn mark_dirty(&self, session: &str) -> bool {
        match self.inner.active.lock() {
            Ok(mut active) => match active.get_mut(session) {
                Some(a) => {
                    a.dirty = true;
                    true
                }
                None => false,
            },
            Err(_) => false,
        }
    }

    /// Drives `session` once the clock reaches `at_ms` (epoch ms): the waker of a turn parked on
    /// a durable timer (a `sleep`). The timer itself is a row in the store, so a process that
    /// stops loses only this wake-up: the start-up resume and the store watch drive the parked
    /// turn again, and it parks again until its timer is due. Held weakly: a runtime dropped
    /// meanwhile wakes nothing.
    pub(crate) fn wake_at(&self, session: &str, at_ms: i64) {
        if let Ok(mut wakes) = self.inner.wakes.lock() {
            wakes.insert(session.to_owned(), at_ms);
        }
        let inner = std::sync::Arc::downgrade(&self.inner);
        let session = session.to_owned();
        let left = u64::try_from(at_ms.saturating_sub(crate::store::now_ms())).unwrap_or(0);
        tokio::spawn(async move {
            // A few milliseconds late rather than early: the turn parks again when woken early.
            tokio::time::sleep(std::time::Duration::from_millis(left.saturating_add(5))).await;
            if let Some(inner) = inner.upgrade() {
                let rt = Runtime { inner };
                if let Ok(mut wakes) = rt.inner.wakes.lock()
                    && wakes.get(&session) == Some(&at_ms)
                {
                    wakes.remove(&session);
                }
                if rt.mark_dirty(&session) {
                    return;
                }
                if let Err(e) = rt.drive(&session).await {
                    tracing::warn!(session, error = %e, "waking a parked turn failed");
                }
            }
        });
    }

    /// Whether this process will wake the session's parked turn itself, later than now.
    pub(super) fn wakes_later(&self, session: &str) -> bool {
        let now = crate::store::now_ms();
        self.inner
            .wakes
            .lock()
            .is_ok_and(|w| w.get(session).is_some_and(|at| *at > now))
    }

    pub(super) fn spawn_driver(&self, session: &str) {
        let rt = self.clone();
        let session = session.to_owned();
        tokio::spawn(async move {
            if let Err(e) = rt.drive(&session).await {
                tracing::warn!(session, error = %e, "session driver stopped");
            }
        });
    }

    /// Registers a driver; `None` when one is already running (it is marked dirty instead).
    pub(crate) fn register(&self, session: &str) -> Option<CancellationToken> {
        let mut active = self.inner.active.lock().ok()?;
        if let Some(a) = active.get_mut(session) {
            a.dirty = true;
            return None;
        }
        let cancel = CancellationToken::new();
        let (done, _) = watch::channel(false);
        active.insert(
            session.to_owned(),
            Active {
                cancel: cancel.clone(),
                dirty: false,
                done: Some(done),
            },
        );
        Some(cancel)
    }

    /// Called when a driver found no work: unregisters unless new work arrived meanwhile (then
    /// returns `true`: go again).
    pub(crate) fn finish_or_continue(&self, session: &str) -> bool {
        let Ok(mut active) = self.inner.active.lock() else {
            return false;
        };
        if let Some(a) = active.get_mut(session)
            && a.dirty
        {
            a.dirty = false;
            return true;
        }
        if let Some(a) = active.remove(session)
            && let Some(done) = a.done
        {
            let _ = done.send(true);
        }
        false
    }

    /// Unregisters a driver unconditionally (errors, lease lost).
    pub(crate) fn unregister(&self, session: &str) {
        if let Ok(mut active) = self.inner.active.lock()
            && let Some(a) = active.remove(session)
            && let Some(done) = a.done
        {
            let _ = done.send(true);
        }
    }
}
