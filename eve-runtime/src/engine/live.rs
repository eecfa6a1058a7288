//! Live events: what a commit of this process tells the followers of its sessions and the
//! readers of every event (the dev console), once it is stored.
//!
//! Nothing is published before it is committed, so a follower never sees an event the store
//! lacks; a follower that falls behind reads the store instead ([`super::follow`]).

use std::sync::Arc;

use tokio::sync::broadcast;

use super::{EventFollower, Runtime};
use crate::store::{Committed, StoredEvent};

/// Commits kept per followed session for receivers that fall behind; one that falls further
/// behind reads the store instead (see [`EventFollower`]). Small, because every session with an
/// open stream holds one such buffer, allocated whole: a slot is a pointer to one commit's
/// events (it was one event of about 200 bytes, when 128 slots were half of what an idle stream
/// cost at 10,000 of them).
pub(super) const LIVE_BUFFER: usize = 16;

/// The events of one commit for one session, in index order. A session's live channel carries
/// a commit's events in one send, so a follower that keeps up is woken once per commit (a step
/// commits several events at once), not once per event.
pub(crate) type LiveEvents = Arc<[StoredEvent]>;
/// Events kept for a slow [`Runtime::subscribe_all`] reader before it misses some.
pub(super) const ALL_EVENTS_BUFFER: usize = 1024;

impl Runtime {
    /// Live events of every session committed by this process from now on (a reader that falls
    /// more than a thousand events behind misses some, and is told so by the receiver).
    pub fn subscribe_all(&self) -> broadcast::Receiver<StoredEvent> {
        self.inner.all_events.subscribe()
    }

    /// This runtime's metrics in Prometheus text format (what `/metrics` serves).
    pub fn metrics_text(&self) -> String {
        let sessions = self.inner.active.lock().map_or(0, |a| a.len());
        self.inner.metrics.render(sessions)
    }

    /// Live events of a session committed by this process from now on, a commit's at a time.
    pub fn subscribe(&self, session: &str) -> broadcast::Receiver<LiveEvents> {
        self.channel(session).subscribe()
    }

    /// Every event from `from` on, stored then live, without gaps or repeats; also sees events
    /// committed by other processes (it polls the store when nothing arrives live).
    pub fn follow(&self, session: &str, from: u64) -> EventFollower {
        EventFollower::new(self.clone(), session.to_owned(), from)
    }

    /// Tells live followers and observe hooks about what a commit stored.
    pub(crate) fn announce(&self, committed: &Committed) {
        self.observe_committed(&committed.events);
        self.publish(&committed.events);
        self.notify_hooks(&committed.events);
    }

    pub(super) fn publish(&self, events: &[StoredEvent]) {
        if events.is_empty() {
            return;
        }
        if self.inner.all_events.receiver_count() > 0 {
            for event in events {
                let _ = self.inner.all_events.send(event.clone());
            }
        }
        let Ok(channels) = self.inner.channels.lock() else {
            return;
        };
        if channels.is_empty() {
            return;
        }
        // One send per run of one session's events (a commit usually writes one session).
        for run in events.chunk_by(|a, b| a.session_id == b.session_id) {
            if let Some(tx) = run.first().and_then(|e| channels.get(&e.session_id)) {
                let _ = tx.send(LiveEvents::from(run));
            }
        }
    }

    pub(super) fn channel(&self, session: &str) -> broadcast::Sender<LiveEvents> {
        match self.inner.channels.lock() {
            Ok(mut channels) => {
                if let Some(tx) = channels.get(session) {
                    return tx.clone();
                }
                // Channels nobody listens to any more go when the map doubles (not on every
                // subscribe: with 10,000 open streams that scan was the cost of opening one).
                if channels.len().is_power_of_two() {
                    channels.retain(|_, tx| tx.receiver_count() > 0);
                }
                channels
                    .entry(session.to_owned())
                    .or_insert_with(|| broadcast::channel(LIVE_BUFFER).0)
                    .clone()
            }
            Err(_) => broadcast::channel(1).0,
        }
    }
}
