//! Following a session's events: stored backlog first, then live, with no gap and no repeat.
//!
//! Live events come from this process's broadcast (every commit of the engine publishes its
//! events there, a commit's in one message); when the receiver lagged, saw a gap, or another
//! process committed (the store reports those), the store is read again from the next expected
//! index. Indexes are the source of truth, so the two paths cannot disagree.
//!
//! An idle follower on a store that reports other processes' commits (SQLite, PostgreSQL) sleeps
//! until one of those two wakes it, with one backstop read a minute should a report ever be lost
//! (a store that stops reporting is polled from then on), so ten thousand open streams on quiet
//! sessions cost almost no CPU. On a store that cannot report them, it polls the store, backing
//! off: each read that finds nothing doubles its wait, up to [`POLL_MAX`]; any event resets it.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::broadcast;

use super::{LiveEvents, Runtime, RuntimeResult};
use crate::store::StoredEvent;

/// How long to wait for a live event before reading the store again.
const POLL: Duration = Duration::from_millis(250);
/// Longest wait of an idle follower between two reads of the store (events committed by another
/// process show up within it).
const POLL_MAX: Duration = Duration::from_secs(5);
/// Longest wait of an idle follower on a store that reports other processes' commits: a backstop
/// read, should a report ever be lost (a dropped notification connection), not the way events
/// arrive.
const BACKSTOP: Duration = Duration::from_secs(60);
/// Events read from the store at once.
const PAGE: usize = 512;

/// What a live commit held for a follower.
enum Live {
    /// Events from the next expected index on, now buffered.
    Taken,
    /// Only events the follower has returned already.
    Old,
    /// Its first event is past the next expected one: some were missed, read the store.
    Gap,
}

/// An ordered stream of one session's events. See [`Runtime::follow`].
pub struct EventFollower {
    runtime: Runtime,
    session: String,
    next: u64,
    live: broadcast::Receiver<LiveEvents>,
    buffer: VecDeque<StoredEvent>,
    caught_up: bool,
    poll: Duration,
    /// Commits of other processes (a session another process drives): read the store at once.
    foreign: Option<tokio::sync::watch::Receiver<u64>>,
}

impl std::fmt::Debug for EventFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventFollower")
            .field("session", &self.session)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl EventFollower {
    pub(crate) fn new(runtime: Runtime, session: String, from: u64) -> Self {
        let live = runtime.subscribe(&session);
        let foreign = runtime.inner.store.foreign_commits();
        Self {
            runtime,
            session,
            next: from,
            live,
            buffer: VecDeque::new(),
            caught_up: false,
            poll: POLL,
            foreign,
        }
    }

    /// Reads the stored events from the follower's position now, so a read that fails (damaged
    /// storage) is reported before a caller has answered anything; [`Self::next`] returns what it
    /// read. Does nothing once the follower has read the store.
    pub(crate) async fn prefetch(&mut self) -> RuntimeResult<()> {
        if self.buffer.is_empty() && !self.caught_up {
            self.fill().await?;
            self.caught_up = self.buffer.is_empty();
        }
        Ok(())
    }

    /// Events already available, without waiting (reads the store when the buffer is empty).
    pub async fn try_next(&mut self) -> RuntimeResult<Option<StoredEvent>> {
        if let Some(e) = self.take_buffered() {
            return Ok(Some(e));
        }
        while let Ok(events) = self.live.try_recv() {
            match self.take_live(&events) {
                Live::Taken => return Ok(self.take_buffered()),
                Live::Old => {}
                Live::Gap => break,
            }
        }
        self.fill().await?;
        Ok(self.take_buffered())
    }

    /// The next event, waiting as long as it takes.
    pub async fn next(&mut self) -> RuntimeResult<StoredEvent> {
        loop {
            if let Some(e) = self.take_buffered() {
                return Ok(e);
            }
            if !self.caught_up {
                self.fill().await?;
                if !self.buffer.is_empty() {
                    self.poll = POLL;
                    continue;
                }
                self.caught_up = true;
            }
            // With foreign commits reported, nothing else adds events unseen: only a rare
            // backstop read.
            let poll = if self.foreign.is_some() {
                BACKSTOP
            } else {
                self.poll
            };
            let foreign = async {
                match self.foreign.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending::<bool>().await,
                }
            };
            let receiver = &mut self.live;
            let live = tokio::time::timeout(poll, receiver.recv());
            let received = tokio::select! {
                r = live => r,
                reported = foreign => {
                    if !reported {
                        // The store stopped reporting: poll from now on.
                        self.foreign = None;
                    }
                    self.caught_up = false;
                    self.poll = POLL;
                    continue;
                }
            };
            match received {
                Ok(Ok(events)) => match self.take_live(&events) {
                    Live::Taken => self.poll = POLL,
                    Live::Old => {}
                    Live::Gap => {
                        self.caught_up = false;
                        self.poll = POLL;
                    }
                },
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                    self.caught_up = false;
                    self.poll = POLL;
                }
                Err(_) => {
                    // Nothing live for a while: read the store, and wait longer next time.
                    self.caught_up = false;
                    self.poll = (self.poll * 2).min(POLL_MAX);
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    self.caught_up = false;
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }

    /// Buffers the events of a live commit from the next expected index on.
    fn take_live(&mut self, events: &LiveEvents) -> Live {
        let Some(first) = events.first() else {
            return Live::Old;
        };
        if first.index > self.next {
            return Live::Gap;
        }
        let start = usize::try_from(self.next - first.index).unwrap_or(usize::MAX);
        match events.get(start..) {
            Some(new) if !new.is_empty() => {
                self.buffer.extend(new.iter().cloned());
                Live::Taken
            }
            _ => Live::Old,
        }
    }

    fn take_buffered(&mut self) -> Option<StoredEvent> {
        while let Some(e) = self.buffer.pop_front() {
            if e.index == self.next {
                self.next += 1;
                return Some(e);
            }
            if e.index > self.next {
                self.buffer.clear();
                return None;
            }
        }
        None
    }

    async fn fill(&mut self) -> RuntimeResult<()> {
        let events = self
            .runtime
            .inner
            .store
            .events(&self.session, self.next, PAGE)
            .await?;
        self.buffer.extend(events);
        Ok(())
    }
}
