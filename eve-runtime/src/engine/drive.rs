//! The drive loop of one session: take its lease, keep it alive, finish the open turn, then take
//! accepted messages from the inbox one turn at a time until nothing is left or a turn parks.
//!
//! This is the only place that holds a session's lease for turns (manual compaction takes it too,
//! in [`crate::features::compaction`]). Everything the loop reads from the store per message is one
//! [`crate::store::Store::drive_state`] call ([`load_drive_state`]), one consistent snapshot.

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::events as ev;
use super::turn::seam::to_message;
use super::turn::{TurnDriver, TurnEnd};
use super::{DriveOutcome, Runtime, RuntimeError, RuntimeResult};
use crate::features::turn_input::{self, TurnInput};
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
    // An unknown session is refused by the lease claim itself (`SessionNotFound`).
    let claim = lease_claim(rt, session);
    if let LeaseOutcome::HeldBy { pid, .. } = take_lease(rt, &claim).await? {
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
    give_back_lease(rt, &claim).await;
    if let Err(RuntimeError::Store(StoreError::Fenced { .. })) = &outcome {
        tracing::warn!(
            session,
            "another node took the session over; this one stopped driving it"
        );
    }
    outcome
}

/// Takes a session's lease for this runtime and remembers its fencing token, so every commit
/// of the session carries it (see `Runtime::fence`). The store answers with the token in the
/// claim's own round trip, and refuses an unknown session (`SessionNotFound`).
pub(crate) async fn take_lease(rt: &Runtime, claim: &LeaseClaim) -> RuntimeResult<LeaseOutcome> {
    match rt.inner.store.take_lease(claim).await? {
        LeaseTaken::Acquired { token } => {
            if let Ok(mut fences) = rt.inner.fences.lock() {
                fences.insert(claim.session_id.clone(), token);
            }
            Ok(LeaseOutcome::Acquired)
        }
        LeaseTaken::HeldBy { pid, host } => Ok(LeaseOutcome::HeldBy { pid, host }),
        LeaseTaken::NoSession => Err(RuntimeError::SessionNotFound(claim.session_id.clone())),
    }
}

/// Releases a lease taken with [`take_lease`] and forgets its token.
pub(crate) async fn give_back_lease(rt: &Runtime, claim: &LeaseClaim) {
    if let Ok(mut fences) = rt.inner.fences.lock() {
        fences.remove(&claim.session_id);
    }
    if let Err(e) = rt
        .inner
        .store
        .release_lease(&claim.session_id, &claim.holder)
        .await
    {
        tracing::warn!(session = %claim.session_id, error = %e, "cannot release the session lease");
    }
}

/// A claim on `session`'s lease for one drive of this runtime (a fresh holder id each time).
pub(crate) fn lease_claim(rt: &Runtime, session: &str) -> LeaseClaim {
    LeaseClaim {
        session_id: session.to_owned(),
        holder: format!("{}:{}", rt.inner.holder, ulid::Ulid::new()),
        pid: std::process::id(),
        host: rt.inner.host.clone(),
        ttl_ms: i64::try_from(rt.inner.config.lease_ttl.as_millis()).unwrap_or(15_000),
    }
}

/// Everything the drive loop reads from the store per message, in one call (one snapshot): the
/// session, its latest turn, the accepted messages not yet taken, its pending requests, its
/// subagent link and the budget passed down with the open turn's message.
async fn load_drive_state(rt: &Runtime, session: &str) -> RuntimeResult<DriveState> {
    rt.inner
        .store
        .drive_state(session)
        .await?
        .ok_or_else(|| RuntimeError::SessionNotFound(session.to_owned()))
}

/// What the stored state says about the last drive.
async fn outcome_from_store(rt: &Runtime, session: &str) -> RuntimeResult<DriveOutcome> {
    match rt.inner.store.drive_state(session).await? {
        Some(state) => outcome_of(rt, state).await,
        None => Ok(DriveOutcome::Idle),
    }
}

/// The outcome a drive reports for a session in `state` (read after its last move).
async fn outcome_of(rt: &Runtime, state: DriveState) -> RuntimeResult<DriveOutcome> {
    let DriveState {
        session,
        last_turn,
        pending_requests,
        has_children,
        ..
    } = state;
    let Some(turn) = last_turn else {
        return Ok(DriveOutcome::Idle);
    };
    Ok(match turn.status {
        TurnStatus::Waiting => {
            let mut pending: Vec<InputRequestRecord> = pending_requests
                .into_iter()
                .filter(|r| r.turn_seq == turn.seq)
                .collect();
            if has_children {
                pending.extend(descendant_pending(rt, &turn.session_id).await?);
            }
            DriveOutcome::WaitingInput(pending)
        }
        TurnStatus::Failed => {
            let code = turn
                .stop_reason
                .clone()
                .unwrap_or_else(|| "failed".to_owned());
            DriveOutcome::Failed {
                message: failure_message_at(rt, &session.id, session.event_count)
                    .await
                    .unwrap_or_else(|| code.clone()),
                code,
            }
        }
        TurnStatus::Cancelled => DriveOutcome::Cancelled,
        TurnStatus::Running | TurnStatus::Completed => DriveOutcome::Idle,
    })
}

pub(crate) async fn failure_message(rt: &Runtime, session: &str) -> Option<String> {
    let record = rt.inner.store.session(session).await.ok()??;
    failure_message_at(rt, session, record.event_count).await
}

/// The error message of the `turn.failed` event among the last events before `event_count`.
async fn failure_message_at(rt: &Runtime, session: &str, event_count: u64) -> Option<String> {
    let from = event_count.saturating_sub(4);
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
    pending.extend(descendant_pending(rt, &turn.session_id).await?);
    Ok(pending)
}

/// A lower bound of the tokens the provider reported for the last model call of `turn` (its
/// totals over its calls; a turn's context only grows, so its last call is its largest), which
/// compaction weighs against its own estimate from the start of the next turn.
fn reported_tokens(turn: &TurnRecord) -> u64 {
    let calls = turn.step_index.saturating_add(1);
    turn.usage.total() / calls
}

/// Runs turns until there is nothing to do or a turn parks.
///
/// One store read per message: [`load_drive_state`] before each move. A turn this loop starts
/// for a root session runs on what `start_turn` made, without reading it back, and its start
/// goes out with its first step (see [`hold_start`]); a child session's new turn is committed
/// at once and read back, for the budget its parent sent with the message.
async fn run_available(
    rt: &Runtime,
    session: &str,
    cancel: &mut CancellationToken,
) -> RuntimeResult<DriveOutcome> {
    loop {
        let mut state = load_drive_state(rt, session).await?;
        let path = state.agent_path().to_owned();
        // The subagent call that made this session, for its turns' traces.
        let parent_call = state
            .link
            .as_ref()
            .map(|l| (l.parent_id.clone(), l.call_id.clone()));
        let reported = state.last_turn.as_ref().map_or(0, reported_tokens);
        // The root of the session's tree (models and isolated state are resolved by it).
        let root = state
            .link
            .as_ref()
            .map_or_else(|| session.to_owned(), |l| l.root_id.clone());
        let (record, turn, budget, mut start, input) = match state.open_turn().cloned() {
            Some(turn) => {
                // What a resumed root turn's message asked is kept with the turn.
                let input = if state.session.parent_id.is_none() {
                    turn_input::of_turn(rt, session, turn.seq).await?
                } else {
                    TurnInput::default()
                };
                (state.session, turn, state.budget, None, input)
            }
            None => {
                if state.session.cancel_requested {
                    let mut batch = Batch::new();
                    batch.push(Op::SetCancel {
                        session_id: session.to_owned(),
                        requested: false,
                    });
                    rt.commit(batch).await?;
                    state.session.cancel_requested = false;
                    if cancel.is_cancelled() {
                        *cancel = rt.renew_cancel(session);
                    }
                }
                if state.inbox.is_empty() {
                    return outcome_of(rt, state).await;
                }
                // The oldest (the rest is read again after this turn).
                let message = state.inbox.swap_remove(0);
                let input = message
                    .input
                    .as_ref()
                    .map(TurnInput::from_value)
                    .unwrap_or_default();
                let (record, turn, start) = start_turn(rt, state.session, &path, message)?;
                if record.parent_id.is_some() {
                    rt.commit(start.batch).await?;
                    continue;
                }
                (record, turn, None, Some(start), input)
            }
        };
        let build = rt.inner.builds.agent(&turn.build_hash, &path)?;
        let cancel_now = record.cancel_requested;
        // Every log line of the turn carries its session and turn (`EVE_LOG_FORMAT=json`).
        let span = tracing::info_span!("turn", session = %session, turn = %turn.turn_id());
        let end = async {
            let mut driver = TurnDriver::new(rt, record, root, build, cancel.clone())?;
            driver.budget = budget;
            driver.last_tokens = reported;
            driver.take_input(&input);
            if let Some(telemetry) = rt.telemetry() {
                telemetry
                    .begin_turn(
                        rt.inner.store.as_ref(),
                        session,
                        turn.seq,
                        &driver.build.manifest.agent.name,
                        turn.started_at,
                        input.traceparent.as_deref(),
                        parent_call.as_ref().map(|(p, c)| (p.as_str(), c.as_str())),
                        start.as_mut().map(|s| &mut s.batch),
                    )
                    .await;
            }
            if let Some(start) = start {
                hold_start(rt, &mut driver, start).await?;
            }
            if cancel_now {
                driver.end_cancelled(turn).await
            } else {
                driver.run(turn).await
            }
        }
        .instrument(span)
        .await?;
        match end {
            TurnEnd::Parked(requests) => return Ok(DriveOutcome::WaitingInput(requests)),
            TurnEnd::Finished => {
                if cancel.is_cancelled() {
                    *cancel = rt.renew_cancel(session);
                }
            }
        }
    }
}

/// A new turn's start, not committed yet: the session and turn rows, the message taken from the
/// inbox into the context, `session.started` (a first turn), `turn.started`, `message.received`.
struct Started {
    batch: Batch,
    /// The user message the batch appends to the context.
    body: serde_json::Value,
}

/// Takes an accepted message into a new turn. An idle session moves to the newest build here.
/// Returns the session and the turn as they will be committed, and the commit that starts it.
fn start_turn(
    rt: &Runtime,
    mut record: SessionRecord,
    path: &str,
    message: InboxRecord,
) -> RuntimeResult<(SessionRecord, TurnRecord, Started)> {
    let build = match rt
        .inner
        .builds
        .current_hash()
        .and_then(|hash| rt.inner.builds.agent(&hash, path))
    {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "cannot load the current build; staying on the pinned one");
            rt.inner.builds.agent(&record.build_hash, path)?
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
    let content = crate::content::UserContent::decode(&message.text);
    let body = serde_json::to_value(content.message())?;
    let mut batch = Batch::new();
    if let Some(input) = message.input.as_ref().map(TurnInput::from_value)
        && input.kept_with_turn()
    {
        batch.push(turn_input::keep_with_turn(&record.id, turn.seq, &input));
    }
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
            body: body.clone(),
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
            ev::message_received(&turn, &content),
        );
    Ok((record, turn, Started { batch, body }))
}

/// Hands a new root turn's start to its driver, held back to go out with the first step's
/// `step.started` in one commit (the turn core's held writes: nothing is published before it is
/// committed, and a process killed before that commit finds the message still in the inbox and
/// takes it into the turn again). The first step then runs on the session's context and dynamic
/// tools as read in one round trip ([`Store::turn_view`]) before the start, with the message
/// added as the start appends it, and on the cancel flag of the snapshot the loop just read. A
/// build with dynamic tool providers commits the start at once: they run, and commit, first.
async fn hold_start(
    rt: &Runtime,
    driver: &mut TurnDriver<'_>,
    start: Started,
) -> RuntimeResult<()> {
    if !driver.build.providers.is_empty() {
        rt.commit(start.batch).await?;
        return Ok(());
    }
    let view = rt.inner.store.turn_view(&driver.session.id).await?;
    let mut context = Vec::with_capacity(view.context.len() + 1);
    for row in &view.context {
        context.push(to_message(row)?);
    }
    // As the commit stores it.
    let mut body = start.body;
    rt.inner.config.secrets.redact_json(&mut body);
    context.push(serde_json::from_value(body)?);
    driver.context = Some(context);
    driver.dynamic_tools = Some(view.dynamic_tools);
    driver.next_cancel = Some(Some(driver.session.cancel_requested));
    driver.held = Some(start.batch);
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

/// Pending input requests of every session below `session` (none unless a loaded build has
/// subagents).
pub(crate) async fn descendant_pending(
    rt: &Runtime,
    session: &str,
) -> RuntimeResult<Vec<InputRequestRecord>> {
    if !rt.inner.builds.subagents_seen() {
        return Ok(Vec::new());
    }
    Ok(rt.inner.store.descendant_requests(session).await?)
}
