//! The drive loop of one session: take its lease, keep it alive, finish the open turn, then take
//! accepted messages from the inbox one turn at a time until nothing is left or a turn parks.
//!
//! This is the only place that holds a session's lease for turns (manual compaction takes it too,
//! in [`super::compaction`]). Everything the loop reads from the store per message goes through
//! [`load_drive_state`], so a store that can answer it in one call replaces one function.

use tokio_util::sync::CancellationToken;

use super::events as ev;
use super::subagents;
use super::turn::{TurnDriver, TurnEnd};
use super::{DriveOutcome, Runtime, RuntimeError, RuntimeResult};
use crate::model::Message;
use crate::store::*;

pub(super) async fn drive(rt: &Runtime, session: &str) -> RuntimeResult<DriveOutcome> {
    let Some(cancel) = rt.register(session) else {
        rt.settled(session).await;
        return outcome_from_store(rt, session).await;
    };
    let result = drive_registered(rt, session, cancel).await;
    if result.is_err() {
        rt.unregister(session);
    }
    result
}

async fn drive_registered(
    rt: &Runtime,
    session: &str,
    cancel: CancellationToken,
) -> RuntimeResult<DriveOutcome> {
    let store = rt.inner.store.clone();
    if store.session(session).await?.is_none() {
        return Err(RuntimeError::SessionNotFound(session.to_owned()));
    }
    let claim = lease_claim(rt, session);
    if let LeaseOutcome::HeldBy { pid, .. } = store.acquire_lease(&claim).await? {
        rt.unregister(session);
        return Ok(DriveOutcome::Busy { pid });
    }
    let heartbeat = CancellationToken::new();
    {
        let store = store.clone();
        let claim = claim.clone();
        let stop = heartbeat.clone();
        let every = rt.inner.config.lease_ttl / 3;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(every) => {
                        if !matches!(store.renew_lease(&claim).await, Ok(true)) {
                            tracing::warn!(session = %claim.session_id, "lost the session lease");
                        }
                    }
                }
            }
        });
    }
    let mut cancel = cancel;
    let outcome = loop {
        match run_available(rt, session, &mut cancel).await {
            Err(e) => break Err(e),
            Ok(outcome) => {
                if !rt.finish_or_continue(session) {
                    break Ok(outcome);
                }
            }
        }
    };
    heartbeat.cancel();
    if let Err(e) = store.release_lease(session, &claim.holder).await {
        tracing::warn!(session, error = %e, "cannot release the session lease");
    }
    outcome
}

/// A claim on `session`'s lease for one drive of this runtime (a fresh holder id each time).
pub(super) fn lease_claim(rt: &Runtime, session: &str) -> LeaseClaim {
    LeaseClaim {
        session_id: session.to_owned(),
        holder: format!("{}:{}", rt.inner.holder, ulid::Ulid::new()),
        pid: std::process::id(),
        host: rt.inner.host.clone(),
        ttl_ms: i64::try_from(rt.inner.config.lease_ttl.as_millis()).unwrap_or(15_000),
    }
}

/// What the drive loop needs to know about a session before its next move.
struct DriveState {
    /// The session row.
    session: SessionRecord,
    /// Its open (running or waiting) turn.
    open_turn: Option<TurnRecord>,
    /// The oldest accepted message not yet taken into a turn (read only when no turn is open).
    next_message: Option<InboxRecord>,
}

/// Everything the drive loop reads from the store per message, in one place: the session, its
/// open turn and, when none is open, the next accepted message.
async fn load_drive_state(rt: &Runtime, session: &str) -> RuntimeResult<DriveState> {
    let store = &rt.inner.store;
    let record = store
        .session(session)
        .await?
        .ok_or_else(|| RuntimeError::SessionNotFound(session.to_owned()))?;
    let open_turn = store
        .last_turn(session)
        .await?
        .filter(|t| matches!(t.status, TurnStatus::Running | TurnStatus::Waiting));
    let next_message = match open_turn {
        Some(_) => None,
        None => store.pending_inbox(session).await?.into_iter().next(),
    };
    Ok(DriveState {
        session: record,
        open_turn,
        next_message,
    })
}

/// What the stored state says about the last drive.
async fn outcome_from_store(rt: &Runtime, session: &str) -> RuntimeResult<DriveOutcome> {
    let store = &rt.inner.store;
    let Some(turn) = store.last_turn(session).await? else {
        return Ok(DriveOutcome::Idle);
    };
    Ok(match turn.status {
        TurnStatus::Waiting => DriveOutcome::WaitingInput(pending_for_turn(rt, &turn).await?),
        TurnStatus::Failed => {
            let code = turn
                .stop_reason
                .clone()
                .unwrap_or_else(|| "failed".to_owned());
            DriveOutcome::Failed {
                message: failure_message(rt, session)
                    .await
                    .unwrap_or_else(|| code.clone()),
                code,
            }
        }
        TurnStatus::Cancelled => DriveOutcome::Cancelled,
        TurnStatus::Running | TurnStatus::Completed => DriveOutcome::Idle,
    })
}

pub(super) async fn failure_message(rt: &Runtime, session: &str) -> Option<String> {
    let record = rt.inner.store.session(session).await.ok()??;
    let from = record.event_count.saturating_sub(4);
    let events = rt.inner.store.events(session, from, 4).await.ok()?;
    events
        .iter()
        .rev()
        .find(|e| e.kind == ev::TURN_FAILED)
        .and_then(|e| e.data["error"]["message"].as_str().map(str::to_owned))
}

/// Pending requests of a turn: its own, and those of the subagent sessions its calls wait on.
pub(super) async fn pending_for_turn(
    rt: &Runtime,
    turn: &TurnRecord,
) -> RuntimeResult<Vec<InputRequestRecord>> {
    let mut pending: Vec<InputRequestRecord> = rt
        .inner
        .store
        .input_requests(&turn.session_id, true)
        .await?
        .into_iter()
        .filter(|r| r.turn_seq == turn.seq)
        .collect();
    pending.extend(subagents::descendant_pending(rt, &turn.session_id).await?);
    Ok(pending)
}

/// Runs turns until there is nothing to do or a turn parks.
async fn run_available(
    rt: &Runtime,
    session: &str,
    cancel: &mut CancellationToken,
) -> RuntimeResult<DriveOutcome> {
    loop {
        let DriveState {
            session: record,
            open_turn,
            next_message,
        } = load_drive_state(rt, session).await?;
        if let Some(turn) = open_turn {
            let build = rt.session_build(&turn.build_hash, &record).await?;
            let cancel_now = record.cancel_requested;
            let mut driver = TurnDriver::new(rt, record, build, cancel.clone())?;
            let end = if cancel_now {
                driver.end_cancelled(turn).await?
            } else {
                driver.run(turn).await?
            };
            match end {
                TurnEnd::Parked(requests) => return Ok(DriveOutcome::WaitingInput(requests)),
                TurnEnd::Finished => {
                    if cancel.is_cancelled() {
                        *cancel = rt.renew_cancel(session);
                    }
                    continue;
                }
            }
        }
        if record.cancel_requested {
            let mut batch = Batch::new();
            batch.push(Op::SetCancel {
                session_id: session.to_owned(),
                requested: false,
            });
            rt.commit(batch).await?;
            if cancel.is_cancelled() {
                *cancel = rt.renew_cancel(session);
            }
        }
        let Some(message) = next_message else {
            return outcome_from_store(rt, session).await;
        };
        start_turn(rt, record, message).await?;
    }
}

/// Takes an accepted message into a new turn. An idle session moves to the newest build here.
async fn start_turn(
    rt: &Runtime,
    mut record: SessionRecord,
    message: InboxRecord,
) -> RuntimeResult<()> {
    let path = rt.agent_path(&record).await?;
    let build = match rt
        .inner
        .builds
        .current_hash()
        .and_then(|hash| rt.inner.builds.agent(&hash, &path))
    {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "cannot load the current build; staying on the pinned one");
            rt.inner.builds.agent(&record.build_hash, &path)?
        }
    };
    let first = record.turn_count == 0;
    let now = now_ms();
    let turn = TurnRecord {
        session_id: record.id.clone(),
        seq: record.turn_count,
        status: TurnStatus::Running,
        phase: TurnPhase::Model,
        step_index: 0,
        step_started: false,
        build_hash: build.hash.clone(),
        inbox_id: Some(message.id.clone()),
        started_at: now,
        ended_at: None,
        stop_reason: None,
        usage: UsageTotals::default(),
    };
    record.turn_count += 1;
    record.status = SessionStatus::Running;
    record.build_hash = build.hash.clone();
    let mut batch = Batch::new();
    batch
        .push(Op::UpdateSession(record.clone()))
        .push(Op::PutTurn(turn.clone()))
        .push(Op::ConsumeInbox {
            id: message.id.clone(),
            turn_seq: turn.seq,
        })
        .push(Op::AppendMessage {
            session_id: record.id.clone(),
            turn_seq: Some(turn.seq),
            kind: MESSAGE_KIND_MESSAGE.to_owned(),
            body: serde_json::to_value(Message::User {
                content: message.text.clone(),
            })?,
        });
    if first {
        batch.event(
            &record.id,
            ev::SESSION_STARTED,
            ev::session_started(&build.manifest.agent.name, &build.hash),
        );
    }
    batch
        .event(&record.id, ev::TURN_STARTED, ev::turn_started(&turn))
        .event(
            &record.id,
            ev::MESSAGE_RECEIVED,
            ev::message_received(&turn, &message.text),
        );
    rt.commit(batch).await?;
    Ok(())
}

impl Runtime {
    /// A fresh cancellation token for a driver that handled a cancel.
    pub(super) fn renew_cancel(&self, session: &str) -> CancellationToken {
        let token = CancellationToken::new();
        if let Ok(mut active) = self.inner.active.lock()
            && let Some(a) = active.get_mut(session)
        {
            a.cancel = token.clone();
        }
        token
    }
}
