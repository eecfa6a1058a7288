//! The store contract: what every [`Store`] backend promises, as tests generic over the trait.
//!
//! Each `pub async fn` checks one promise against a fresh [`Backend`]; [`run_all`] runs them all,
//! and [`store_contract_tests!`] makes one `#[tokio::test]` per promise for a backend module
//! (`store_sqlite.rs` today; a PostgreSQL module instantiates the same macro with its own
//! backend). Nothing here knows which backend it runs on.
//!
//! Longer than 800 lines on purpose: it is the contract's text, one promise per function in the
//! order of the `Store` trait, and both backends' suites are generated from this one list.

use std::sync::Arc;
use std::time::Duration;

use eve_runtime::store::*;
use serde_json::json;

mod tasks;
mod tenancy;
mod turn_start;
pub use tasks::task_rows_deliver_once;
pub use tenancy::{
    an_answer_settles_a_request_once, an_answer_with_a_stale_view_of_its_turn_is_refused,
    sessions_keep_their_owner,
};
pub use turn_start::{
    take_lease_answers_with_its_token, turn_view_reads_context_and_dynamic_tools,
};

/// A backend under test: fresh, empty storage that can be opened more than once (each
/// [`Backend::open`] is another process's view of the same data).
pub trait Backend: Send + Sync {
    /// A new store instance on this backend's storage.
    fn open(&self) -> Arc<dyn Store>;
}

/// Runs every promise, each on a backend from `make`.
#[allow(dead_code)]
pub async fn run_all<B: Backend>(make: impl Fn() -> B) {
    atomic_batches(&make()).await;
    concurrent_batches_fail_alone(&make()).await;
    event_indexes_are_gapless_per_session(&make()).await;
    message_sequence_and_context(&make()).await;
    session_rows(&make()).await;
    turn_step_call_and_request_rows(&make()).await;
    inbox_order(&make()).await;
    sessions_with_work(&make()).await;
    breakers(&make()).await;
    notes(&make()).await;
    prune_sessions(&make()).await;
    lease_acquire_renew_release(&make()).await;
    lease_expiry(&make()).await;
    lease_has_one_holder(&make()).await;
    composition_rows(&make()).await;
    channel_rows(&make()).await;
    schedule_claims(&make()).await;
    schedule_claim_once_per_fire(&make()).await;
    foreign_commits_are_noticed(&make()).await;
    drive_state_reads_everything_at_once(&make()).await;
    lease_tokens_grow_with_each_holder(&make()).await;
    a_commit_under_an_older_token_is_refused(&make()).await;
    release_rows(&make()).await;
    release_events_are_dense_and_concurrent_activations_leave_one_active(&make()).await;
    builds_are_stored_by_hash(&make()).await;
    workspace_checkpoints(&make()).await;
    sessions_with_work_leaves_out_live_leases(&make()).await;
    rows_written_twice_in_a_batch_and_commit_reading(&make()).await;
    channel_reply_ownership(&make()).await;
    workspace_blobs_are_collected(&make()).await;
    sessions_keep_their_owner(&make()).await;
    an_answer_settles_a_request_once(&make()).await;
    an_answer_with_a_stale_view_of_its_turn_is_refused(&make()).await;
    take_lease_answers_with_its_token(&make()).await;
    turn_view_reads_context_and_dynamic_tools(&make()).await;
    task_rows_deliver_once(&make()).await;
}

/// One `#[tokio::test]` per promise, on backends made by `$make`.
#[macro_export]
macro_rules! store_contract_tests {
    ($make:expr; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let backend = $make;
                $crate::store_contract::$name(&backend).await;
            }
        )+
    };
    ($make:expr) => {
        $crate::store_contract_tests!($make;
            atomic_batches,
            concurrent_batches_fail_alone,
            event_indexes_are_gapless_per_session,
            message_sequence_and_context,
            session_rows,
            turn_step_call_and_request_rows,
            inbox_order,
            sessions_with_work,
            breakers,
            notes,
            prune_sessions,
            lease_acquire_renew_release,
            lease_expiry,
            lease_has_one_holder,
            composition_rows,
            channel_rows,
            schedule_claims,
            schedule_claim_once_per_fire,
            foreign_commits_are_noticed,
            drive_state_reads_everything_at_once,
            lease_tokens_grow_with_each_holder,
            a_commit_under_an_older_token_is_refused,
            release_rows,
            release_events_are_dense_and_concurrent_activations_leave_one_active,
            builds_are_stored_by_hash,
            workspace_checkpoints,
            sessions_with_work_leaves_out_live_leases,
            rows_written_twice_in_a_batch_and_commit_reading,
            channel_reply_ownership,
            workspace_blobs_are_collected,
            sessions_keep_their_owner,
            an_answer_settles_a_request_once,
            an_answer_with_a_stale_view_of_its_turn_is_refused,
            take_lease_answers_with_its_token,
            turn_view_reads_context_and_dynamic_tools,
            task_rows_deliver_once,
        );
    };
}

fn session(id: &str) -> SessionRecord {
    SessionRecord::new(id.to_owned(), "h1".into(), "agent".into(), None, now_ms())
}

fn child(id: &str, parent: &str) -> SessionRecord {
    let mut s = session(id);
    s.parent_id = Some(parent.to_owned());
    s.parent_call_id = Some(format!("call_{id}"));
    s
}

async fn create(store: &dyn Store, s: SessionRecord) {
    let mut b = Batch::durable();
    b.push(Op::InsertSession(s));
    store.commit(b).await.unwrap();
}

fn turn(session: &str, seq: u64, status: TurnStatus, inbox: Option<&str>) -> TurnRecord {
    TurnRecord {
        session_id: session.to_owned(),
        seq,
        status,
        phase: TurnPhase::Model,
        step_index: 0,
        step_started: false,
        build_hash: "h1".into(),
        inbox_id: inbox.map(str::to_owned),
        started_at: now_ms(),
        ended_at: None,
        stop_reason: None,
        usage: UsageTotals::default(),
    }
}

fn request(id: &str, session: &str, turn: u64, status: RequestStatus) -> InputRequestRecord {
    InputRequestRecord {
        id: id.to_owned(),
        session_id: session.to_owned(),
        turn_seq: turn,
        step_index: 0,
        call_id: format!("call_{id}"),
        tool_name: "deploy".into(),
        kind: "tool-approval".into(),
        prompt: "Run deploy?".into(),
        action: json!({"toolName": "deploy"}),
        status,
        reason: None,
        created_at: now_ms(),
        answered_at: None,
        responder: None,
    }
}

fn call(session: &str, id: &str, turn: u64, step: u64, position: u64) -> ToolCallRecord {
    ToolCallRecord {
        session_id: session.to_owned(),
        call_id: id.to_owned(),
        turn_seq: turn,
        step_index: step,
        position,
        kind: "tool-call".into(),
        name: "echo".into(),
        input: json!({"text": id}),
        idempotency_key: format!("key_{id}"),
        effect: "read".into(),
        status: CallStatus::Pending,
        approval: ApprovalState::None,
        output: None,
        is_error: false,
        attempts: 0,
        started_at: None,
        ended_at: None,
    }
}

fn claim(session: &str, holder: &str, host: &str, ttl_ms: i64) -> LeaseClaim {
    LeaseClaim {
        session_id: session.to_owned(),
        holder: holder.to_owned(),
        pid: std::process::id(),
        host: host.to_owned(),
        ttl_ms,
    }
}

/// Waits, up to five seconds, for `check` to hold; panics with `what` if it never does.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A batch is stored whole or not at all: a failing operation takes the session, messages and
/// events written before it in the same batch with it.
pub async fn atomic_batches(backend: &impl Backend) {
    let store = backend.open();
    let mut b = Batch::new();
    b.push(Op::InsertSession(session("wrun_a")))
        .event("wrun_a", "session.started", json!({}))
        .push(Op::AppendMessage {
            session_id: "wrun_a".into(),
            turn_seq: None,
            kind: MESSAGE_KIND_MESSAGE.into(),
            body: json!({"role": "user", "content": "hi"}),
        })
        .push(Op::UpdateSession(session("wrun_missing")));
    assert!(
        store.commit(b).await.is_err(),
        "an update of an unknown session fails"
    );
    assert!(store.session("wrun_a").await.unwrap().is_none());
    assert!(store.events("wrun_a", 0, 10).await.unwrap().is_empty());
    assert!(store.messages("wrun_a", 0, 10).await.unwrap().is_empty());

    let mut b = Batch::durable();
    b.push(Op::InsertSession(session("wrun_a"))).event(
        "wrun_a",
        "session.started",
        json!({"n": 1}),
    );
    let committed = store.commit(b).await.unwrap();
    assert_eq!(committed.events.len(), 1);
    assert_eq!(committed.events[0].index, 0);
    assert!(committed.events[0].id.starts_with("evt_"));
    assert_eq!(
        store.events("wrun_a", 0, 10).await.unwrap(),
        committed.events
    );
    assert!(store.commit(Batch::new()).await.unwrap().events.is_empty());
}

/// Batches committed at the same time do not share a fate: one that fails leaves the others
/// stored.
pub async fn concurrent_batches_fail_alone(backend: &impl Backend) {
    let store = backend.open();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("wrun_{i}");
            let mut b = Batch::new();
            b.push(Op::InsertSession(session(&id)))
                .event(&id, "x", json!(i));
            if i % 4 == 0 {
                b.push(Op::UpdateSession(session("wrun_missing")));
            }
            store.commit(b).await.is_ok()
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let ok = task.await.unwrap();
        let stored = store.session(&format!("wrun_{i}")).await.unwrap();
        assert_eq!(ok, i % 4 != 0, "batch {i}");
        assert_eq!(
            stored.is_some(),
            ok,
            "batch {i} is stored exactly when it succeeded"
        );
    }
}

/// Event indexes count from 0 per session without gaps or repeats, under concurrent commits to
/// several sessions; reads page by index.
pub async fn event_indexes_are_gapless_per_session(backend: &impl Backend) {
    let store = backend.open();
    for s in ["wrun_x", "wrun_y"] {
        create(store.as_ref(), session(s)).await;
    }
    let mut tasks = Vec::new();
    for i in 0..24u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let s = if i % 2 == 0 { "wrun_x" } else { "wrun_y" };
            let mut b = Batch::new();
            b.event(s, "a", json!(i)).event(s, "b", json!(i));
            let c = store.commit(b).await.unwrap();
            assert_eq!(
                c.events[1].index,
                c.events[0].index + 1,
                "a batch's events are adjacent"
            );
            c.events
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for s in ["wrun_x", "wrun_y"] {
        let events = store.events(s, 0, 1000).await.unwrap();
        let indexes: Vec<u64> = events.iter().map(|e| e.index).collect();
        assert_eq!(indexes, (0..24).collect::<Vec<u64>>(), "{s}");
        assert!(events.iter().all(|e| e.session_id == s));
        let ids: std::collections::HashSet<&str> = events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids.len(), 24, "event ids are unique");
        assert_eq!(store.session(s).await.unwrap().unwrap().event_count, 24);
        let page = store.events(s, 10, 5).await.unwrap();
        assert_eq!(
            page.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![10, 11, 12, 13, 14]
        );
        assert_eq!(page, events[10..15].to_vec());
    }
    let mut b = Batch::new();
    b.event("wrun_nobody", "a", json!(null));
    assert!(
        store.commit(b).await.is_err(),
        "an event of an unknown session fails"
    );
}

/// Message sequence numbers are gapless per session; a checkpoint starts the context at itself
/// and a clear empties it.
pub async fn message_sequence_and_context(backend: &impl Backend) {
    let store = backend.open();
    create(store.as_ref(), session("wrun_m")).await;
    let append = |kind: &str, text: &str| Op::AppendMessage {
        session_id: "wrun_m".into(),
        turn_seq: Some(0),
        kind: kind.into(),
        body: json!({"text": text}),
    };
    let mut b = Batch::new();
    b.push(append(MESSAGE_KIND_MESSAGE, "one"))
        .push(append(MESSAGE_KIND_MESSAGE, "two"));
    assert_eq!(store.commit(b).await.unwrap().message_seqs, vec![0, 1]);
    assert_eq!(store.context("wrun_m").await.unwrap().len(), 2);
    let mut b = Batch::new();
    b.push(append(MESSAGE_KIND_CHECKPOINT, "summary"))
        .push(append(MESSAGE_KIND_MESSAGE, "three"));
    assert_eq!(store.commit(b).await.unwrap().message_seqs, vec![2, 3]);
    let context = store.context("wrun_m").await.unwrap();
    let bodies: Vec<_> = context.iter().map(|m| m.body["text"].clone()).collect();
    assert_eq!(bodies, vec![json!("summary"), json!("three")]);
    assert_eq!(context[0].kind, MESSAGE_KIND_CHECKPOINT);
    let all = store.messages("wrun_m", 1, 2).await.unwrap();
    assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2]);
    let mut b = Batch::new();
    b.push(Op::ClearContext {
        session_id: "wrun_m".into(),
    });
    store.commit(b).await.unwrap();
    assert!(store.context("wrun_m").await.unwrap().is_empty());
    let s = store.session("wrun_m").await.unwrap().unwrap();
    assert_eq!((s.message_count, s.context_start), (4, 4));
    assert_eq!(
        store.messages("wrun_m", 0, 100).await.unwrap().len(),
        4,
        "history stays"
    );
}

/// A session row reads back as written; an update leaves the store's counters alone; listing
/// filters by schedule and status, newest first.
pub async fn session_rows(backend: &impl Backend) {
    let store = backend.open();
    let mut first = session("wrun_1");
    first.schedule = Some("nightly".into());
    first.created_at = 1_000;
    create(store.as_ref(), first.clone()).await;
    let mut second = session("wrun_2");
    second.created_at = 2_000;
    create(store.as_ref(), second).await;
    let mut b = Batch::new();
    b.event("wrun_1", "e", json!(1));
    store.commit(b).await.unwrap();

    let mut changed = store.session("wrun_1").await.unwrap().unwrap();
    assert_eq!(changed.schedule.as_deref(), Some("nightly"));
    changed.status = SessionStatus::Running;
    changed.turn_count = 3;
    changed.usage.input_tokens = 10;
    changed.cost_usd = 0.5;
    changed.loaded_skills = vec!["pdf".into()];
    changed.approved_tools = vec!["deploy".into()];
    changed.event_count = 99;
    let mut b = Batch::new();
    b.push(Op::UpdateSession(changed.clone()))
        .push(Op::SetCancel {
            session_id: "wrun_1".into(),
            requested: true,
        });
    store.commit(b).await.unwrap();
    let back = store.session("wrun_1").await.unwrap().unwrap();
    assert_eq!(back.status, SessionStatus::Running);
    assert_eq!(back.turn_count, 3);
    assert_eq!(back.usage.input_tokens, 10);
    assert_eq!(back.cost_usd, 0.5);
    assert_eq!(back.loaded_skills, vec!["pdf".to_owned()]);
    assert_eq!(back.approved_tools, vec!["deploy".to_owned()]);
    assert_eq!(back.event_count, 1, "the store owns the event count");
    assert!(back.cancel_requested);

    // An update that keeps the status writes every other field; one of a session that does
    // not exist is refused whatever its status.
    let mut same = back.clone();
    same.turn_count = 4;
    same.usage.output_tokens = 7;
    let mut b = Batch::new();
    b.push(Op::UpdateSession(same));
    store.commit(b).await.unwrap();
    let back = store.session("wrun_1").await.unwrap().unwrap();
    assert_eq!(back.status, SessionStatus::Running);
    assert_eq!((back.turn_count, back.usage.output_tokens), (4, 7));
    let running = SessionFilter {
        status: Some(SessionStatus::Running),
        ..SessionFilter::default()
    };
    assert_eq!(store.sessions(&running).await.unwrap()[0].id, "wrun_1");
    for status in [SessionStatus::Running, SessionStatus::Idle] {
        let mut ghost = session("wrun_ghost");
        ghost.status = status;
        let mut b = Batch::new();
        b.push(Op::UpdateSession(ghost));
        let err = store.commit(b).await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    }
    // A status that changes is written, and found by it.
    let mut idle_again = back.clone();
    idle_again.status = SessionStatus::Idle;
    let mut b = Batch::new();
    b.push(Op::UpdateSession(idle_again));
    store.commit(b).await.unwrap();
    assert_eq!(
        store.session("wrun_1").await.unwrap().unwrap().status,
        SessionStatus::Idle
    );
    let mut b = Batch::new();
    b.push(Op::UpdateSession(back));
    store.commit(b).await.unwrap();

    let all = store.sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(
        all.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["wrun_2", "wrun_1"]
    );
    let nightly = SessionFilter {
        schedule: Some("nightly".into()),
        ..SessionFilter::default()
    };
    assert_eq!(store.sessions(&nightly).await.unwrap().len(), 1);
    let idle = SessionFilter {
        status: Some(SessionStatus::Idle),
        ..SessionFilter::default()
    };
    assert_eq!(store.sessions(&idle).await.unwrap()[0].id, "wrun_2");
    let one = SessionFilter {
        limit: 1,
        ..SessionFilter::default()
    };
    assert_eq!(store.sessions(&one).await.unwrap().len(), 1);
    assert!(store.session("wrun_none").await.unwrap().is_none());
}

/// Turns, steps, tool calls and input requests read back as written, in their documented order;
/// a put replaces the row with the same key.
pub async fn turn_step_call_and_request_rows(backend: &impl Backend) {
    let store = backend.open();
    create(store.as_ref(), session("wrun_t")).await;
    let mut done = turn("wrun_t", 0, TurnStatus::Completed, None);
    done.usage.output_tokens = 7;
    done.stop_reason = Some("done".into());
    let mut b = Batch::new();
    b.push(Op::PutTurn(done.clone())).push(Op::PutTurn(turn(
        "wrun_t",
        1,
        TurnStatus::Running,
        None,
    )));
    for step in [1u64, 0] {
        b.push(Op::PutStep(StepRecord {
            session_id: "wrun_t".into(),
            turn_seq: 1,
            step_index: step,
            model_id: "mock/m".into(),
            response: json!({"step": step}),
            at: now_ms(),
        }));
    }
    b.push(Op::PutToolCall(call("wrun_t", "c_b", 1, 1, 0)))
        .push(Op::PutToolCall(call("wrun_t", "c_a", 1, 0, 1)))
        .push(Op::PutToolCall(call("wrun_t", "c_z", 1, 0, 0)))
        .push(Op::PutInputRequest(request(
            "req_1",
            "wrun_t",
            1,
            RequestStatus::Pending,
        )))
        .push(Op::PutInputRequest(request(
            "req_2",
            "wrun_t",
            1,
            RequestStatus::Pending,
        )));
    store.commit(b).await.unwrap();

    assert_eq!(store.turn("wrun_t", 0).await.unwrap(), Some(done));
    assert_eq!(store.last_turn("wrun_t").await.unwrap().unwrap().seq, 1);
    assert!(store.turn("wrun_t", 9).await.unwrap().is_none());
    let steps = store.steps("wrun_t", 1).await.unwrap();
    assert_eq!(
        steps.iter().map(|s| s.step_index).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(steps[1].response, json!({"step": 1}));
    let calls = store.tool_calls("wrun_t", 1).await.unwrap();
    assert_eq!(
        calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
        ["c_z", "c_a", "c_b"],
        "by step, then position"
    );
    assert_eq!(calls[0], call("wrun_t", "c_z", 1, 0, 0));

    let mut settled = call("wrun_t", "c_z", 1, 0, 0);
    settled.status = CallStatus::Completed;
    settled.output = Some(json!("ok"));
    settled.attempts = 1;
    let mut answered = store.input_request("req_1").await.unwrap().unwrap();
    answered.status = RequestStatus::Approved;
    answered.reason = Some("fine".into());
    answered.answered_at = Some(now_ms());
    let mut b = Batch::durable();
    b.push(Op::PutToolCall(settled.clone()))
        .push(Op::PutInputRequest(answered.clone()));
    store.commit(b).await.unwrap();
    let calls = store.tool_calls("wrun_t", 1).await.unwrap();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0], settled);

    // The same id put again at another step and position replaces the row whole.
    let mut moved = call("wrun_t", "c_z", 1, 2, 1);
    moved.status = CallStatus::Failed;
    let mut b = Batch::new();
    b.push(Op::PutToolCall(moved.clone()));
    store.commit(b).await.unwrap();
    let calls = store.tool_calls("wrun_t", 1).await.unwrap();
    assert_eq!(
        calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
        ["c_a", "c_b", "c_z"]
    );
    assert_eq!(calls[2], moved);
    let mut b = Batch::new();
    b.push(Op::PutToolCall(settled.clone()));
    store.commit(b).await.unwrap();
    assert_eq!(store.tool_calls("wrun_t", 1).await.unwrap()[0], settled);
    let pending = store.input_requests("wrun_t", true).await.unwrap();
    assert_eq!(
        pending.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["req_2"]
    );
    let all = store.input_requests("wrun_t", false).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["req_1", "req_2"]
    );
    assert_eq!(store.input_request("req_1").await.unwrap(), Some(answered));
    assert!(store.input_request("req_9").await.unwrap().is_none());
}

/// Accepted messages come back in acceptance order until a turn takes them; the turn that took
/// one is recorded.
pub async fn inbox_order(backend: &impl Backend) {
    let store = backend.open();
    create(store.as_ref(), session("wrun_i")).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let m = InboxRecord::new("wrun_i", &format!("m{i}"), now_ms());
        ids.push(m.id.clone());
        let mut b = Batch::durable();
        b.push(Op::InsertInbox(m));
        store.commit(b).await.unwrap();
    }
    let pending = store.pending_inbox("wrun_i").await.unwrap();
    assert_eq!(
        pending.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        ids
    );
    assert_eq!(pending[2].text, "m2");
    assert_eq!(store.inbox_turn(&ids[0]).await.unwrap(), Some(None));
    let mut b = Batch::new();
    b.push(Op::ConsumeInbox {
        id: ids[0].clone(),
        turn_seq: 4,
    });
    store.commit(b).await.unwrap();
    let pending = store.pending_inbox("wrun_i").await.unwrap();
    assert_eq!(pending.len(), 4);
    assert_eq!(pending[0].id, ids[1]);
    assert_eq!(store.inbox_turn(&ids[0]).await.unwrap(), Some(Some(4)));
    assert_eq!(store.inbox_turn("msg_none").await.unwrap(), None);
    // Messages steered into turn 4 while it ran, taken out of order: the turn lists what it
    // took in acceptance order.
    let mut b = Batch::new();
    for id in [&ids[3], &ids[2]] {
        b.push(Op::ConsumeInbox {
            id: id.clone(),
            turn_seq: 4,
        });
    }
    store.commit(b).await.unwrap();
    assert_eq!(
        store.turn_inbox("wrun_i", 4).await.unwrap(),
        [ids[0].clone(), ids[2].clone(), ids[3].clone()]
    );
    assert!(store.turn_inbox("wrun_i", 5).await.unwrap().is_empty());
    assert!(store.turn_inbox("wrun_other", 4).await.unwrap().is_empty());
}

/// Sessions with work: a running one, a waiting one whose requests are all answered, one with
/// an accepted message; not an idle one, nor one waiting on a pending request.
pub async fn sessions_with_work(backend: &impl Backend) {
    let store = backend.open();
    let mut running = session("wrun_run");
    running.status = SessionStatus::Running;
    let mut answered = session("wrun_answered");
    answered.status = SessionStatus::Waiting;
    let mut parked = session("wrun_parked");
    parked.status = SessionStatus::Waiting;
    for s in [
        running,
        answered,
        parked,
        session("wrun_idle"),
        session("wrun_msg"),
    ] {
        create(store.as_ref(), s).await;
    }
    let mut b = Batch::durable();
    b.push(Op::PutInputRequest(request(
        "r_a",
        "wrun_answered",
        0,
        RequestStatus::Approved,
    )))
    .push(Op::PutInputRequest(request(
        "r_p",
        "wrun_parked",
        0,
        RequestStatus::Pending,
    )))
    .push(Op::InsertInbox(InboxRecord::new(
        "wrun_msg",
        "hi",
        now_ms(),
    )));
    store.commit(b).await.unwrap();
    let mut work = store.sessions_with_work().await.unwrap();
    work.sort();
    assert_eq!(work, ["wrun_answered", "wrun_msg", "wrun_run"]);
}

/// A breaker reads back as last written.
pub async fn breakers(backend: &impl Backend) {
    let store = backend.open();
    assert!(store.breaker("flaky").await.unwrap().is_none());
    for failures in [1, 3] {
        let mut b = Batch::new();
        b.push(Op::PutBreaker(BreakerRecord {
            tool: "flaky".into(),
            consecutive_failures: failures,
            open_until: 1_000 * i64::from(failures),
            backoff_ms: 30_000,
        }));
        store.commit(b).await.unwrap();
    }
    let b = store.breaker("flaky").await.unwrap().unwrap();
    assert_eq!((b.consecutive_failures, b.open_until), (3, 3_000));
}

/// Notes: put inserts or replaces (keeping `created_at`), delete and clear remove, a read is by
/// exact namespace (oldest first) or by prefix (by namespace), and a note commits atomically with
/// the rest of its batch.
pub async fn notes(backend: &impl Backend) {
    let store = backend.open();
    let note = |ns: &str, key: &str, text: &str, at: i64| {
        Op::Note(NoteOp::Put(NoteRecord {
            namespace: ns.into(),
            key: key.into(),
            text: text.into(),
            created_at: at,
            updated_at: at,
        }))
    };
    assert!(store.notes("memory:agent:a").await.unwrap().is_empty());
    let mut b = Batch::new();
    b.push(note("memory:agent:a", "n2", "second", 20))
        .push(note("memory:agent:a", "n1", "first", 10))
        .push(note("memory:agent:ab", "x", "other agent", 5))
        .push(note("memory:user:a:u1", "n1", "a user's", 30))
        .push(note("probe:s1", "text", "Linux", 1));
    store.commit(b).await.unwrap();
    let texts = |notes: Vec<NoteRecord>| notes.into_iter().map(|n| n.text).collect::<Vec<_>>();
    assert_eq!(
        texts(store.notes("memory:agent:a").await.unwrap()),
        ["first", "second"]
    );
    assert_eq!(
        texts(store.notes_under("memory:").await.unwrap()),
        ["first", "second", "other agent", "a user's"]
    );
    // Replacing keeps when it was first written.
    let mut b = Batch::new();
    b.push(note("memory:agent:a", "n1", "first, edited", 40));
    store.commit(b).await.unwrap();
    let n1 = store.notes("memory:agent:a").await.unwrap().remove(0);
    assert_eq!(
        (n1.text.as_str(), n1.created_at, n1.updated_at),
        ("first, edited", 10, 40)
    );
    // Delete and clear.
    let mut b = Batch::new();
    b.push(Op::Note(NoteOp::Delete {
        namespace: "memory:agent:a".into(),
        key: "n2".into(),
    }))
    .push(Op::Note(NoteOp::Clear {
        namespace: "memory:user:a:u1".into(),
    }));
    store.commit(b).await.unwrap();
    assert_eq!(
        texts(store.notes_under("memory:").await.unwrap()),
        ["first, edited", "other agent"]
    );
    // A batch that fails writes no note.
    let mut b = Batch::new();
    b.push(note("memory:agent:a", "n3", "never", 50))
        .push(Op::UpdateSession(session("wrun_missing_notes")));
    assert!(store.commit(b).await.is_err());
    assert_eq!(store.notes("memory:agent:a").await.unwrap().len(), 1);
    assert_eq!(texts(store.notes("probe:s1").await.unwrap()), ["Linux"]);
}

/// Pruning deletes an old idle root session with its subagent session and every row they own,
/// and keeps what is recent, running, leased or has a message waiting.
pub async fn prune_sessions(backend: &impl Backend) {
    let store = backend.open();
    // Old: the one to prune (with a child, events, a message, a note), one with a message
    // waiting, a running one, one a live lease holds.
    let mut b = Batch::durable();
    b.push(Op::InsertSession(session("wrun_old")))
        .push(Op::InsertSession(child("wrun_old_kid", "wrun_old")))
        .push(Op::Composition(CompositionOp::InsertLink(SubagentLink {
            session_id: "wrun_old_kid".into(),
            parent_id: "wrun_old".into(),
            call_id: "c1".into(),
            root_id: "wrun_old".into(),
            agent_path: "subagents/helper".into(),
            created_at: now_ms(),
        })))
        .event("wrun_old", "session.started", json!({}))
        .event("wrun_old_kid", "session.started", json!({}))
        .push(Op::AppendMessage {
            session_id: "wrun_old".into(),
            turn_seq: None,
            kind: MESSAGE_KIND_MESSAGE.into(),
            body: json!({"role": "user", "content": "hi"}),
        })
        .push(Op::Note(NoteOp::Put(NoteRecord {
            namespace: "probe:wrun_old".into(),
            key: "text".into(),
            text: "Linux".into(),
            created_at: 1,
            updated_at: 1,
        })))
        // The budget a Continue granted (a session over its `limits.max_tokens`).
        .push(Op::Note(NoteOp::Put(NoteRecord {
            namespace: "limits:wrun_old".into(),
            key: "granted".into(),
            text: "{\"tokens\":220}".into(),
            created_at: 1,
            updated_at: 1,
        })))
        .push(Op::InsertSession(session("wrun_waiting_msg")))
        .push(Op::InsertInbox(InboxRecord::new(
            "wrun_waiting_msg",
            "later",
            now_ms(),
        )))
        .push(Op::InsertSession(session("wrun_leased")));
    let mut running = session("wrun_running");
    running.status = SessionStatus::Running;
    b.push(Op::InsertSession(running));
    store.commit(b).await.unwrap();
    assert!(matches!(
        store
            .acquire_lease(&claim("wrun_leased", "node-a", "host-a", 60_000))
            .await
            .unwrap(),
        LeaseOutcome::Acquired
    ));
    let cutoff = now_ms() + 1;
    while now_ms() <= cutoff {
        std::hint::spin_loop();
    }
    create(&*store, session("wrun_recent")).await;

    let mut deleted = store.prune_sessions(cutoff).await.unwrap();
    deleted.sort();
    assert_eq!(deleted, ["wrun_old", "wrun_old_kid"]);
    for gone in ["wrun_old", "wrun_old_kid"] {
        assert!(store.session(gone).await.unwrap().is_none());
        assert!(store.events(gone, 0, 10).await.unwrap().is_empty());
        assert!(store.messages(gone, 0, 10).await.unwrap().is_empty());
    }
    assert!(store.subagent_link("wrun_old_kid").await.unwrap().is_none());
    assert!(store.notes("probe:wrun_old").await.unwrap().is_empty());
    assert!(store.notes("limits:wrun_old").await.unwrap().is_empty());
    for kept in [
        "wrun_waiting_msg",
        "wrun_leased",
        "wrun_running",
        "wrun_recent",
    ] {
        assert!(
            store.session(kept).await.unwrap().is_some(),
            "{kept} was kept"
        );
    }
    // Nothing left to prune: a second run deletes nothing.
    assert!(store.prune_sessions(cutoff).await.unwrap().is_empty());
}

/// A lease is taken by one holder; another (on another host, alive as far as anyone knows) is
/// told who holds it; only the holder renews or releases it; once released it is free.
pub async fn lease_acquire_renew_release(backend: &impl Backend) {
    let store = backend.open();
    let ours = claim("wrun_l", "holder_a", "host-a", 60_000);
    let theirs = claim("wrun_l", "holder_b", "host-b", 60_000);
    assert_eq!(
        store.acquire_lease(&ours).await.unwrap(),
        LeaseOutcome::Acquired
    );
    assert_eq!(
        store.acquire_lease(&ours).await.unwrap(),
        LeaseOutcome::Acquired,
        "ours again"
    );
    assert_eq!(
        store.acquire_lease(&theirs).await.unwrap(),
        LeaseOutcome::HeldBy {
            pid: std::process::id(),
            host: "host-a".into()
        }
    );
    assert!(store.renew_lease(&ours).await.unwrap());
    assert!(
        !store.renew_lease(&theirs).await.unwrap(),
        "not theirs to renew"
    );
    store.release_lease("wrun_l", "holder_b").await.unwrap();
    assert!(
        matches!(
            store.acquire_lease(&theirs).await.unwrap(),
            LeaseOutcome::HeldBy { .. }
        ),
        "a release by someone else changes nothing"
    );
    store.release_lease("wrun_l", "holder_a").await.unwrap();
    assert!(
        !store.renew_lease(&ours).await.unwrap(),
        "a released lease is not renewed"
    );
    assert_eq!(
        store.acquire_lease(&theirs).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let other_session = claim("wrun_other", "holder_a", "host-a", 60_000);
    assert_eq!(
        store.acquire_lease(&other_session).await.unwrap(),
        LeaseOutcome::Acquired,
        "leases are per session"
    );
}

/// A lease that is not renewed expires, and another holder takes it; renewing keeps it.
pub async fn lease_expiry(backend: &impl Backend) {
    let store = backend.open();
    let short = claim("wrun_e", "holder_a", "host-a", 100);
    let other = claim("wrun_e", "holder_b", "host-b", 60_000);
    assert_eq!(
        store.acquire_lease(&short).await.unwrap(),
        LeaseOutcome::Acquired
    );
    assert!(matches!(
        store.acquire_lease(&other).await.unwrap(),
        LeaseOutcome::HeldBy { .. }
    ));
    eventually("the unrenewed lease expires and is taken", || {
        let store = store.clone();
        let other = other.clone();
        async move { store.acquire_lease(&other).await.unwrap() == LeaseOutcome::Acquired }
    })
    .await;
    assert!(
        !store.renew_lease(&short).await.unwrap(),
        "the expired holder lost it"
    );
}

/// However many claim a free lease at once, exactly one gets it.
pub async fn lease_has_one_holder(backend: &impl Backend) {
    let stores = [backend.open(), backend.open()];
    let mut tasks = Vec::new();
    for i in 0..12 {
        let store = stores[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let c = claim(
                "wrun_one",
                &format!("holder_{i}"),
                &format!("host-{i}"),
                60_000,
            );
            store.acquire_lease(&c).await.unwrap() == LeaseOutcome::Acquired
        }));
    }
    let mut won = 0;
    for task in tasks {
        won += usize::from(task.await.unwrap());
    }
    assert_eq!(won, 1, "one holder");
}

/// Subagent links and waits, descendant totals and requests, dynamic tools (replaced per
/// provider), resolutions and hook cursors (which never move back).
pub async fn composition_rows(backend: &impl Backend) {
    let store = backend.open();
    create(store.as_ref(), session("wrun_root")).await;
    let link = |id: &str, parent: &str, call: &str| SubagentLink {
        session_id: id.into(),
        parent_id: parent.into(),
        call_id: call.into(),
        root_id: "wrun_root".into(),
        agent_path: format!("subagents/{id}"),
        created_at: now_ms(),
    };
    let mut b = Batch::durable();
    for (id, parent, call) in [
        ("wrun_kid", "wrun_root", "c1"),
        ("wrun_grand", "wrun_kid", "c2"),
    ] {
        let mut s = child(id, parent);
        s.usage.input_tokens = 10;
        s.usage.output_tokens = 5;
        s.cost_usd = 0.25;
        b.push(Op::InsertSession(s))
            .push(Op::Composition(CompositionOp::InsertLink(link(
                id, parent, call,
            ))));
    }
    let inbox = InboxRecord::new("wrun_kid", "do it", now_ms());
    let wait = SubagentCall {
        parent_id: "wrun_root".into(),
        turn_seq: 0,
        call_id: "c1".into(),
        child_id: "wrun_kid".into(),
        inbox_id: inbox.id.clone(),
        task_id: "wrun_root:c1".into(),
        budget: Budget {
            max_tokens: Some(100),
            max_cost_usd: Some(1.5),
            deadline_ms: None,
        },
        created_at: now_ms(),
    };
    b.push(Op::InsertInbox(inbox.clone()))
        .push(Op::Composition(CompositionOp::PutSubagentCall(
            wait.clone(),
        )))
        .push(Op::PutInputRequest(request(
            "r_g",
            "wrun_grand",
            0,
            RequestStatus::Pending,
        )));
    store.commit(b).await.unwrap();

    let kid = store.subagent_link("wrun_kid").await.unwrap().unwrap();
    assert_eq!(
        (kid.parent_id.as_str(), kid.agent_path.as_str()),
        ("wrun_root", "subagents/wrun_kid")
    );
    assert_eq!(kid.task_id(), "wrun_root:c1");
    assert!(store.subagent_link("wrun_root").await.unwrap().is_none());
    assert_eq!(
        store
            .subagent_by_token("wrun_root", "c1")
            .await
            .unwrap()
            .unwrap()
            .session_id,
        "wrun_kid"
    );
    assert!(
        store
            .subagent_by_token("wrun_root", "c9")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store.subagent_call("wrun_root", 0, "c1").await.unwrap(),
        Some(wait.clone())
    );
    assert_eq!(
        store.subagent_call_by_inbox(&inbox.id).await.unwrap(),
        Some(wait)
    );
    let (usage, cost) = store.descendant_usage("wrun_root").await.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (20, 10),
        "children and grandchildren"
    );
    assert!((cost - 0.5).abs() < 1e-9);
    let (usage, _) = store.descendant_usage("wrun_grand").await.unwrap();
    assert_eq!(usage.total(), 0);
    let below = store.descendant_requests("wrun_root").await.unwrap();
    assert_eq!(
        below.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["r_g"]
    );

    let tool = |name: &str, provider: &str| DynamicToolRecord {
        session_id: "wrun_root".into(),
        name: name.into(),
        provider: provider.into(),
        description: format!("{name} tool"),
        input_schema: json!({"type": "object"}),
        provider_tool: json!({"runner": "python3"}),
        build_hash: "h1".into(),
        turn_seq: 0,
        resolved_at: now_ms(),
    };
    let put = |turn: u64, providers: &[&str], tools: Vec<DynamicToolRecord>| {
        let mut b = Batch::new();
        b.push(Op::Composition(CompositionOp::PutDynamicTools {
            session_id: "wrun_root".into(),
            providers: providers.iter().map(|p| (*p).to_owned()).collect(),
            tools,
            turn_seq: turn,
            detail: json!({}),
        }));
        b
    };
    store
        .commit(put(
            0,
            &["p1", "p2"],
            vec![tool("b_tool", "p1"), tool("a_tool", "p2")],
        ))
        .await
        .unwrap();
    store
        .commit(put(1, &["p1"], vec![tool("c_tool", "p1")]))
        .await
        .unwrap();
    let tools = store.dynamic_tools("wrun_root").await.unwrap();
    assert_eq!(
        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["a_tool", "c_tool"],
        "p1's earlier tools are replaced; by name"
    );
    let mut expected = tool("a_tool", "p2");
    expected.resolved_at = tools[0].resolved_at;
    assert_eq!(tools[0], expected);
    assert!(store.dynamic_resolved("wrun_root", 1).await.unwrap());
    assert!(!store.dynamic_resolved("wrun_root", 2).await.unwrap());

    let mut b = Batch::new();
    b.event("wrun_root", "a", json!(0))
        .event("wrun_root", "b", json!(1));
    store.commit(b).await.unwrap();
    let behind = store.sessions_behind_hooks().await.unwrap();
    assert!(behind.contains(&"wrun_root".to_owned()));
    for delivered in [2, 1] {
        let mut b = Batch::new();
        b.push(Op::Composition(CompositionOp::HookCursor {
            session_id: "wrun_root".into(),
            hook: "audit".into(),
            delivered,
        }));
        store.commit(b).await.unwrap();
    }
    assert_eq!(
        store.hook_cursors("wrun_root").await.unwrap(),
        vec![("audit".to_owned(), 2)]
    );
    assert!(
        !store
            .sessions_behind_hooks()
            .await
            .unwrap()
            .contains(&"wrun_root".to_owned())
    );
}

fn reply(inbox_id: &str, session: &str, pid: u32, host: &str) -> ChannelReplyRecord {
    ChannelReplyRecord {
        inbox_id: inbox_id.into(),
        channel: "slack".into(),
        session_id: session.into(),
        from_index: 0,
        address: json!({"channel": "C1", "thread": "1.2"}),
        announced: vec![],
        done: false,
        detail: None,
        owner_pid: pid,
        owner_host: host.into(),
        created_at: 0,
        updated_at: 0,
        owner_token: FIRST_REPLY_TOKEN,
        owner_expires_at: now_ms() + 60_000,
        sending: None,
    }
}

/// A claim at a process's start (every owed reply whose owner is gone, as the store judges).
fn start_claim(pid: u32, host: &str) -> ReplyClaim {
    ReplyClaim {
        pid,
        host: host.into(),
        ttl_ms: 5_000,
        expired_only: false,
        skip: Vec::new(),
    }
}

/// A platform delivery is accepted once, with its message and owed reply in one commit; the
/// reply's progress is recorded, a done reply stays done, and this process takes its own owed
/// replies back.
pub async fn channel_rows(backend: &impl Backend) {
    let store = backend.open();
    create(store.as_ref(), session("wrun_c")).await;
    let me = std::process::id();
    let accept = |text: &str| {
        let m = InboxRecord::new("wrun_c", text, now_ms());
        let a = ChannelAccept {
            delivery: Some(ChannelDelivery {
                channel: "slack".into(),
                delivery_id: "Ev1".into(),
            }),
            reply: Some(reply(&m.id, "wrun_c", me, "host-c")),
        };
        let mut b = Batch::durable();
        b.push(Op::InsertInbox(m.clone()));
        (m, a, b)
    };
    let (first, a, b) = accept("first");
    assert!(store.accept_channel_message(a, b).await.unwrap().is_some());
    let (_, a, b) = accept("retry");
    assert!(
        store.accept_channel_message(a, b).await.unwrap().is_none(),
        "a retry is refused"
    );
    let inbox = store.pending_inbox("wrun_c").await.unwrap();
    assert_eq!(
        inbox.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
        ["first"]
    );
    assert_eq!(
        store.channel_replies(true).await.unwrap().len(),
        1,
        "one reply owed"
    );

    let stored = store.channel_reply(&first.id).await.unwrap().unwrap();
    assert_eq!(stored.address, json!({"channel": "C1", "thread": "1.2"}));
    assert!(!stored.done);
    let update = |done: bool, announced: &[&str]| ChannelReplyUpdate {
        inbox_id: first.id.clone(),
        address: json!({"channel": "C1", "edited": true}),
        announced: announced.iter().map(|s| (*s).to_owned()).collect(),
        done,
        detail: None,
    };
    store
        .update_channel_reply(update(false, &["req_1"]))
        .await
        .unwrap();
    let taken = store
        .claim_channel_replies(start_claim(me, "host-c"))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1, "this process's owed reply is taken back");
    assert_eq!(taken[0].announced, vec!["req_1".to_owned()]);
    assert_eq!(taken[0].address["edited"], json!(true));
    store
        .update_channel_reply(update(true, &["req_1"]))
        .await
        .unwrap();
    store
        .update_channel_reply(update(false, &[]))
        .await
        .unwrap();
    let done = store.channel_reply(&first.id).await.unwrap().unwrap();
    assert!(done.done, "a done reply stays done");
    assert!(store.channel_replies(true).await.unwrap().is_empty());
    assert_eq!(store.channel_replies(false).await.unwrap().len(), 1);
    assert!(
        store
            .claim_channel_replies(start_claim(me, "host-c"))
            .await
            .unwrap()
            .is_empty()
    );

    let m = InboxRecord::new("wrun_c", "no id", now_ms());
    let mut b = Batch::durable();
    b.push(Op::InsertInbox(m));
    let plain = ChannelAccept::default();
    assert!(
        store
            .accept_channel_message(plain.clone(), b.clone())
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .accept_channel_message(plain, Batch::new())
            .await
            .unwrap()
            .is_some(),
        "without a delivery id nothing is de-duplicated"
    );
}

/// Accepts a message on `session` whose reply is owed by `pid` on `host`, held until
/// `expires_at`; returns its inbox id.
async fn owed_reply(
    store: &dyn Store,
    session: &str,
    pid: u32,
    host: &str,
    expires_at: i64,
) -> String {
    let m = InboxRecord::new(session, "hello", now_ms());
    let mut r = reply(&m.id, session, pid, host);
    r.owner_expires_at = expires_at;
    let accept = ChannelAccept {
        delivery: None,
        reply: Some(r),
    };
    let mut b = Batch::durable();
    b.push(Op::InsertInbox(m.clone()));
    assert!(
        store
            .accept_channel_message(accept, b)
            .await
            .unwrap()
            .is_some()
    );
    m.id
}

/// A reply is held under an expiry and a fencing token: a node's periodic claim takes only
/// replies whose hold lapsed (never one it follows), each once however many nodes claim at
/// once, with a new token; the old owner can neither renew nor start a send, the new one can;
/// a send in progress is visible to the next owner, and a done reply cannot be sent again.
pub async fn channel_reply_ownership(backend: &impl Backend) {
    let store = backend.open();
    let other = backend.open();
    create(store.as_ref(), session("wrun_o")).await;
    let now = now_ms();
    let live = owed_reply(store.as_ref(), "wrun_o", 4242, "node-a", now + 60_000).await;
    let lapsed = owed_reply(store.as_ref(), "wrun_o", 4242, "node-a", now - 1).await;
    let followed = owed_reply(store.as_ref(), "wrun_o", 4242, "node-a", now - 1).await;
    let periodic = |host: &str, skip: &[&String]| ReplyClaim {
        pid: 7,
        host: host.into(),
        ttl_ms: 60_000,
        expired_only: true,
        skip: skip.iter().map(|s| (*s).clone()).collect(),
    };

    // Two nodes claim at once: the lapsed reply goes to exactly one of them, the live one and
    // the one a node follows to none.
    let (a, b) = tokio::join!(
        store.claim_channel_replies(periodic("node-b", &[&followed])),
        other.claim_channel_replies(periodic("node-c", &[&followed])),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let taken: Vec<&ChannelReplyRecord> = a.iter().chain(b.iter()).collect();
    assert_eq!(
        taken
            .iter()
            .map(|r| r.inbox_id.as_str())
            .collect::<Vec<_>>(),
        [lapsed.as_str()],
        "only the lapsed reply is taken, once"
    );
    let new_owner = taken[0].clone();
    assert_eq!(new_owner.owner_token, FIRST_REPLY_TOKEN + 1, "a new token");
    assert!(
        new_owner.owner_expires_at > now_ms() + 30_000,
        "a fresh hold"
    );
    let stored = store.channel_reply(&lapsed).await.unwrap().unwrap();
    assert_eq!(
        (stored.owner_host.as_str(), stored.owner_token),
        (new_owner.owner_host.as_str(), new_owner.owner_token)
    );
    assert!(
        store
            .claim_channel_replies(periodic("node-d", &[]))
            .await
            .unwrap()
            .iter()
            .all(|r| r.inbox_id == followed),
        "a reply just taken is held"
    );

    // The old owner is fenced off; the new one renews and starts sending.
    let held = |token: u64| ReplyHeld {
        inbox_id: lapsed.clone(),
        token,
    };
    assert_eq!(
        store
            .renew_channel_replies(vec![held(FIRST_REPLY_TOKEN)], 60_000)
            .await
            .unwrap(),
        0
    );
    assert!(
        !store
            .start_channel_reply_send(held(FIRST_REPLY_TOKEN), Sending::Final, 60_000)
            .await
            .unwrap(),
        "the old owner may not send"
    );
    let token = new_owner.owner_token;
    assert_eq!(
        store
            .renew_channel_replies(vec![held(token)], 60_000)
            .await
            .unwrap(),
        1
    );
    let approval = Sending::Approval(vec!["req_9".into()]);
    assert!(
        store
            .start_channel_reply_send(held(token), approval.clone(), 0)
            .await
            .unwrap()
    );
    assert_eq!(
        store.channel_reply(&lapsed).await.unwrap().unwrap().sending,
        Some(approval.clone())
    );

    // Its owner stops mid-send (the hold of 0 ms lapsed at once): the next owner sees what
    // was being sent.
    let next = other
        .claim_channel_replies(periodic("node-e", &[&followed]))
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].inbox_id, lapsed);
    assert_eq!(next[0].sending, Some(approval));
    assert_eq!(next[0].owner_token, token + 1);

    // Recording the send clears it; a done reply cannot be sent again.
    let done = ChannelReplyUpdate {
        inbox_id: lapsed.clone(),
        address: json!({}),
        announced: vec!["req_9".into()],
        done: true,
        detail: None,
    };
    store.update_channel_reply(done).await.unwrap();
    let stored = store.channel_reply(&lapsed).await.unwrap().unwrap();
    assert!(stored.done);
    assert_eq!(stored.sending, None);
    assert!(
        !store
            .start_channel_reply_send(held(token + 1), Sending::Final, 60_000)
            .await
            .unwrap(),
        "a done reply is not sent again"
    );
    let live_row = store.channel_reply(&live).await.unwrap().unwrap();
    assert_eq!(
        live_row.owner_token, FIRST_REPLY_TOKEN,
        "a live hold is untouched"
    );
}

fn fire(schedule: &str, at: i64, status: FireStatus, session: Option<&str>) -> ScheduleFire {
    ScheduleFire {
        schedule: schedule.into(),
        fire_at: at,
        trigger: FireTrigger::Cron,
        status,
        session_id: session.map(str::to_owned),
        detail: None,
        created_at: now_ms(),
        updated_at: 0,
    }
}

/// Claims are compare-and-sets on the stored next fire time and fire rows; a lost claim writes
/// nothing, not even its batch; fires list newest first, filtered by status.
pub async fn schedule_claims(backend: &impl Backend) {
    let store = backend.open();
    let first = ScheduleClaim {
        schedule: "nightly".into(),
        expect: StateExpect::Absent,
        next: Some((1_000, "0 0 * * *".into())),
        fires: vec![],
    };
    assert!(
        store
            .claim_schedule(first.clone(), Batch::new())
            .await
            .unwrap()
            .is_some()
    );
    let mut batch = Batch::durable();
    batch.push(Op::InsertSession(session("wrun_lost")));
    assert!(
        store.claim_schedule(first, batch).await.unwrap().is_none(),
        "no longer absent"
    );
    assert!(
        store.session("wrun_lost").await.unwrap().is_none(),
        "a lost claim writes nothing"
    );
    let states = store.schedule_states().await.unwrap();
    assert_eq!(
        (states[0].name.as_str(), states[0].next_fire_at),
        ("nightly", 1_000)
    );
    assert_eq!(states[0].spec, "0 0 * * *");

    let started = ScheduleClaim {
        schedule: "nightly".into(),
        expect: StateExpect::Next(1_000),
        next: Some((2_000, "0 0 * * *".into())),
        fires: vec![FireWrite::Insert(fire(
            "nightly",
            1_000,
            FireStatus::Started,
            Some("wrun_s"),
        ))],
    };
    let mut batch = Batch::durable();
    batch.push(Op::InsertSession(session("wrun_s")));
    let committed = store.claim_schedule(started, batch).await.unwrap();
    assert!(committed.is_some());
    assert!(
        store.session("wrun_s").await.unwrap().is_some(),
        "the claim's batch is written"
    );
    let queued = ScheduleClaim {
        schedule: "nightly".into(),
        expect: StateExpect::Next(2_000),
        next: Some((3_000, "0 0 * * *".into())),
        fires: vec![FireWrite::Insert(fire(
            "nightly",
            2_000,
            FireStatus::Queued,
            None,
        ))],
    };
    assert!(
        store
            .claim_schedule(queued, Batch::new())
            .await
            .unwrap()
            .is_some()
    );
    let promote = |from: FireStatus| ScheduleClaim {
        schedule: "nightly".into(),
        expect: StateExpect::Any,
        next: None,
        fires: vec![FireWrite::Promote {
            from,
            to: fire("nightly", 2_000, FireStatus::Started, Some("wrun_q")),
        }],
    };
    assert!(
        store
            .claim_schedule(promote(FireStatus::Skipped), Batch::new())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .claim_schedule(promote(FireStatus::Queued), Batch::new())
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .claim_schedule(promote(FireStatus::Queued), Batch::new())
            .await
            .unwrap()
            .is_none(),
        "promoted once"
    );
    let fires = store.schedule_fires("nightly", None, 0).await.unwrap();
    assert_eq!(
        fires.iter().map(|f| f.fire_at).collect::<Vec<_>>(),
        vec![2_000, 1_000]
    );
    assert!(fires.iter().all(|f| f.status == FireStatus::Started));
    assert_eq!(fires[0].session_id.as_deref(), Some("wrun_q"));
    assert_eq!(
        store
            .schedule_fires("nightly", None, 1)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .schedule_fires("nightly", Some(FireStatus::Queued), 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.schedule_states().await.unwrap()[0].next_fire_at,
        3_000
    );
}

/// Schedulers racing for one fire (two store instances, several tasks each) start it once.
pub async fn schedule_claim_once_per_fire(backend: &impl Backend) {
    let stores = [backend.open(), backend.open()];
    let seed = ScheduleClaim {
        schedule: "hourly".into(),
        expect: StateExpect::Absent,
        next: Some((5_000, "0 * * * *".into())),
        fires: vec![],
    };
    assert!(
        stores[0]
            .claim_schedule(seed, Batch::new())
            .await
            .unwrap()
            .is_some()
    );
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = stores[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("wrun_fire_{i}");
            let claim = ScheduleClaim {
                schedule: "hourly".into(),
                expect: StateExpect::Next(5_000),
                next: Some((6_000, "0 * * * *".into())),
                fires: vec![FireWrite::Insert(fire(
                    "hourly",
                    5_000,
                    FireStatus::Started,
                    Some(&id),
                ))],
            };
            let mut batch = Batch::durable();
            batch.push(Op::InsertSession(session(&id)));
            store.claim_schedule(claim, batch).await.unwrap().is_some()
        }));
    }
    let mut won = 0;
    for task in tasks {
        won += usize::from(task.await.unwrap());
    }
    assert_eq!(won, 1, "one claim per fire");
    let fires = stores[1].schedule_fires("hourly", None, 0).await.unwrap();
    assert_eq!(fires.len(), 1);
    let sessions = stores[1].sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(sessions.len(), 1, "one session per fire");
    assert_eq!(
        fires[0].session_id.as_deref(),
        Some(sessions[0].id.as_str())
    );
}

/// A commit by another instance on the same storage is noticed by this one's foreign-commit
/// counter, and its rows are readable here.
pub async fn foreign_commits_are_noticed(backend: &impl Backend) {
    let here = backend.open();
    let there = backend.open();
    let mut seen = here
        .foreign_commits()
        .expect("a shared store tells its instances about each other's commits");
    let before = *seen.borrow_and_update();
    create(there.as_ref(), session("wrun_far")).await;
    tokio::time::timeout(Duration::from_secs(5), async {
        while *seen.borrow_and_update() == before {
            seen.changed().await.unwrap();
        }
    })
    .await
    .expect("the other instance's commit is noticed");
    assert!(here.session("wrun_far").await.unwrap().is_some());
}

/// The run loop's one read returns the session, its latest turn, the inbox in order, its pending
/// requests, its subagent link and the budget passed down with its turn's message, its
/// descendants' totals and whether the turn's dynamic tools were resolved.
pub async fn drive_state_reads_everything_at_once(backend: &impl Backend) {
    let store = backend.open();
    assert!(store.drive_state("wrun_none").await.unwrap().is_none());
    create(store.as_ref(), session("wrun_p")).await;
    let fresh = store.drive_state("wrun_p").await.unwrap().unwrap();
    assert_eq!(
        fresh.session,
        store.session("wrun_p").await.unwrap().unwrap()
    );
    assert!(fresh.last_turn.is_none() && fresh.open_turn().is_none());
    assert!(fresh.inbox.is_empty() && fresh.pending_requests.is_empty());
    assert!(fresh.link.is_none() && fresh.budget.is_none() && !fresh.has_children);
    assert_eq!(fresh.agent_path(), "");
    assert_eq!(fresh.descendant_usage.0.total(), 0);

    let taken = InboxRecord::new("wrun_kid", "task", now_ms());
    let waiting = [
        InboxRecord::new("wrun_kid", "next", now_ms()),
        InboxRecord::new("wrun_kid", "after", now_ms()),
    ];
    let budget = Budget {
        max_tokens: Some(50),
        max_cost_usd: None,
        deadline_ms: Some(9_999),
    };
    let mut kid = child("wrun_kid", "wrun_p");
    kid.usage.input_tokens = 3;
    kid.cost_usd = 0.125;
    kid.cancel_requested = true;
    let mut b = Batch::durable();
    b.push(Op::InsertSession(kid))
        .push(Op::Composition(CompositionOp::InsertLink(SubagentLink {
            session_id: "wrun_kid".into(),
            parent_id: "wrun_p".into(),
            call_id: "c1".into(),
            root_id: "wrun_p".into(),
            agent_path: "subagents/helper".into(),
            created_at: now_ms(),
        })))
        .push(Op::Composition(CompositionOp::PutSubagentCall(
            SubagentCall {
                parent_id: "wrun_p".into(),
                turn_seq: 0,
                call_id: "c1".into(),
                child_id: "wrun_kid".into(),
                inbox_id: taken.id.clone(),
                task_id: "wrun_p:c1".into(),
                budget,
                created_at: now_ms(),
            },
        )))
        .push(Op::InsertInbox(taken.clone()))
        .push(Op::ConsumeInbox {
            id: taken.id.clone(),
            turn_seq: 0,
        })
        .push(Op::PutTurn(turn(
            "wrun_kid",
            0,
            TurnStatus::Waiting,
            Some(&taken.id),
        )))
        .push(Op::PutInputRequest(request(
            "r_1",
            "wrun_kid",
            0,
            RequestStatus::Pending,
        )))
        .push(Op::PutInputRequest(request(
            "r_2",
            "wrun_kid",
            0,
            RequestStatus::Denied,
        )))
        .push(Op::Composition(CompositionOp::PutDynamicTools {
            session_id: "wrun_kid".into(),
            providers: vec![],
            tools: vec![],
            turn_seq: 0,
            detail: json!({}),
        }));
    for m in &waiting {
        b.push(Op::InsertInbox(m.clone()));
    }
    store.commit(b).await.unwrap();

    let kid = store.drive_state("wrun_kid").await.unwrap().unwrap();
    assert!(kid.session.cancel_requested);
    assert_eq!(kid.open_turn().map(|t| t.seq), Some(0));
    assert_eq!(kid.last_turn, store.last_turn("wrun_kid").await.unwrap());
    assert_eq!(kid.inbox, store.pending_inbox("wrun_kid").await.unwrap());
    assert_eq!(
        kid.inbox
            .iter()
            .map(|m| m.text.as_str())
            .collect::<Vec<_>>(),
        ["next", "after"]
    );
    assert_eq!(
        kid.pending_requests
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["r_1"]
    );
    assert_eq!(kid.agent_path(), "subagents/helper");
    assert_eq!(kid.budget, Some(budget));
    assert!(kid.dynamic_resolved);
    assert!(!kid.has_children);

    let parent = store.drive_state("wrun_p").await.unwrap().unwrap();
    assert!(parent.has_children);
    assert_eq!(parent.descendant_usage.0.input_tokens, 3);
    assert!((parent.descendant_usage.1 - 0.125).abs() < 1e-9);
    assert!(parent.link.is_none() && parent.budget.is_none());

    let mut done = turn("wrun_kid", 0, TurnStatus::Completed, Some(&taken.id));
    done.ended_at = Some(now_ms());
    let mut b = Batch::new();
    b.push(Op::PutTurn(done));
    store.commit(b).await.unwrap();
    let after = store.drive_state("wrun_kid").await.unwrap().unwrap();
    assert!(after.open_turn().is_none(), "a completed turn is not open");
    assert_eq!(
        after.last_turn.map(|t| t.status),
        Some(TurnStatus::Completed)
    );
}

/// A lease's fencing token grows with every new holder and never goes back (not even after a
/// release); the same holder taking its lease again keeps its token.
pub async fn lease_tokens_grow_with_each_holder(backend: &impl Backend) {
    let store = backend.open();
    assert!(store.lease("wrun_tok").await.unwrap().is_none());
    let a = claim("wrun_tok", "holder_a", "host-a", 60_000);
    let b = claim("wrun_tok", "holder_b", "host-b", 60_000);
    assert_eq!(
        store.acquire_lease(&a).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let first = store.lease("wrun_tok").await.unwrap().unwrap();
    assert_eq!(first.holder, "holder_a");
    assert_eq!(
        (first.pid, first.host.as_str()),
        (std::process::id(), "host-a")
    );
    assert!(first.expires_at > now_ms());
    assert_eq!(
        store.acquire_lease(&a).await.unwrap(),
        LeaseOutcome::Acquired
    );
    assert_eq!(
        store.lease("wrun_tok").await.unwrap().unwrap().token,
        first.token,
        "the same holder keeps its token"
    );
    store.release_lease("wrun_tok", "holder_a").await.unwrap();
    assert_eq!(
        store.acquire_lease(&b).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let second = store.lease("wrun_tok").await.unwrap().unwrap();
    assert_eq!(second.holder, "holder_b");
    assert!(second.token > first.token, "{second:?} after {first:?}");
    store.release_lease("wrun_tok", "holder_b").await.unwrap();
    assert_eq!(
        store.acquire_lease(&a).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let third = store.lease("wrun_tok").await.unwrap().unwrap();
    assert!(third.token > second.token, "{third:?} after {second:?}");
}

/// Once another holder took a session's lease (the first one's expired: it was paused past its
/// TTL), a batch carrying the first holder's token is refused whole, with a distinct error;
/// the new holder's batches, and batches that speak for no lease, are stored.
pub async fn a_commit_under_an_older_token_is_refused(backend: &impl Backend) {
    let store = backend.open();
    let other_node = backend.open();
    create(store.as_ref(), session("wrun_fence")).await;
    let zombie = claim("wrun_fence", "holder_zombie", "host-a", 100);
    assert_eq!(
        store.acquire_lease(&zombie).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let old = store.lease("wrun_fence").await.unwrap().unwrap().token;
    let fenced = |token: u64, text: &str| {
        let mut b = Batch::new();
        b.event("wrun_fence", "step", json!({ "by": text }))
            .push(Op::PutTurn(turn(
                "wrun_fence",
                0,
                TurnStatus::Running,
                None,
            )));
        b.fences.push(Fence {
            session_id: "wrun_fence".into(),
            token,
        });
        b
    };
    store
        .commit(fenced(old, "holder before anyone else"))
        .await
        .expect("the holder's own commits are stored");
    let taker = claim("wrun_fence", "holder_new", "host-b", 60_000);
    eventually(
        "the zombie's lease expires and another node takes it",
        || {
            let other_node = other_node.clone();
            let taker = taker.clone();
            async move { other_node.acquire_lease(&taker).await.unwrap() == LeaseOutcome::Acquired }
        },
    )
    .await;
    let new = other_node.lease("wrun_fence").await.unwrap().unwrap().token;
    assert!(new > old);
    let err = store
        .commit(fenced(old, "zombie"))
        .await
        .expect_err("a commit under the old token is refused");
    match err {
        StoreError::Fenced {
            session,
            ours,
            current,
        } => assert_eq!((session.as_str(), ours, current), ("wrun_fence", old, new)),
        other => panic!("expected a fencing refusal, got {other:?}"),
    }
    let events = other_node.events("wrun_fence", 0, 100).await.unwrap();
    assert_eq!(events.len(), 1, "nothing of the refused batch is stored");
    assert_eq!(events[0].data["by"], json!("holder before anyone else"));
    other_node
        .commit(fenced(new, "new holder"))
        .await
        .expect("the new holder commits");
    let mut unfenced = Batch::durable();
    unfenced.push(Op::InsertInbox(InboxRecord::new(
        "wrun_fence",
        "hi",
        now_ms(),
    )));
    store
        .commit(unfenced)
        .await
        .expect("a batch that speaks for no lease (an accepted message) is stored");
    assert_eq!(
        other_node.events("wrun_fence", 0, 100).await.unwrap().len(),
        2
    );
    assert!(
        !store.renew_lease(&zombie).await.unwrap(),
        "the zombie lost its lease"
    );
}

fn release(id: &str, hash: &str, at: i64) -> ReleaseRecord {
    ReleaseRecord {
        id: id.to_owned(),
        build_hash: hash.to_owned(),
        source: Some(SourceRevision {
            commit: "abc123".into(),
            dirty: true,
        }),
        created_at: at,
        principal: "local:test".into(),
        checks: Checks {
            errors: 0,
            warnings: 2,
            gate: Some(GateReport {
                tags: vec!["smoke".into()],
                cases: vec![GateCase {
                    id: "probe/works".into(),
                    result: "failed".into(),
                    reason: Some("text.contains".into()),
                }],
                error: None,
            }),
            forced: true,
        },
        status: ReleaseStatus::Pending,
        delta: eve_compile::Delta {
            changes: vec![eve_compile::Change {
                kind: eve_compile::ChangeKind::ToolAdded,
                subject: "deploy".into(),
                before: None,
                after: Some("effect write".into()),
                widening: true,
            }],
        },
        base: None,
        activated_at: None,
        activated_by: None,
        previous: None,
        reason: None,
        failures: 0,
    }
}

fn activate(id: &str, demote: ReleaseStatus, at: i64) -> Op {
    Op::Release(ReleaseOp::Activate {
        id: id.into(),
        demote,
        reason: Some(format!("{id} took over")),
        at,
        by: "token:T".into(),
    })
}

/// Releases: rows round-trip whole; an activation demotes the active one and records who, when
/// and what it replaced; failures are counted; an unknown release fails the whole batch.
pub async fn release_rows(backend: &impl Backend) {
    let store = backend.open();
    assert!(store.releases().await.unwrap().is_empty());
    let mut b = Batch::durable();
    b.push(Op::Release(ReleaseOp::Put(Box::new(release(
        "rel_b", "h2", 20,
    )))))
    .push(Op::Release(ReleaseOp::Put(Box::new(release(
        "rel_a", "h1", 10,
    )))))
    .push(activate("rel_a", ReleaseStatus::Superseded, 11));
    store.commit(b).await.unwrap();
    let all = store.releases().await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["rel_a", "rel_b"],
        "oldest first"
    );
    let mut expected = release("rel_b", "h2", 20);
    assert_eq!(all[1], expected, "a row round-trips whole");
    assert_eq!(all[0].status, ReleaseStatus::Active);
    assert_eq!(all[0].activated_at, Some(11));
    assert_eq!(all[0].activated_by.as_deref(), Some("token:T"));

    let mut b = Batch::durable();
    b.push(Op::Release(ReleaseOp::CountFailure { id: "rel_a".into() }))
        .push(Op::Release(ReleaseOp::CountFailure { id: "rel_a".into() }));
    store.commit(b).await.unwrap();
    assert_eq!(store.releases().await.unwrap()[0].failures, 2);

    let mut b = Batch::durable();
    b.push(activate("rel_b", ReleaseStatus::RolledBack, 30));
    store.commit(b).await.unwrap();
    let all = store.releases().await.unwrap();
    assert_eq!(all[0].status, ReleaseStatus::RolledBack);
    assert_eq!(all[0].reason.as_deref(), Some("rel_b took over"));
    expected.status = ReleaseStatus::Active;
    expected.activated_at = Some(30);
    expected.activated_by = Some("token:T".into());
    expected.previous = Some("rel_a".into());
    assert_eq!(all[1], expected);
    // Back to rel_a: its failure count starts again.
    let mut b = Batch::durable();
    b.push(activate("rel_a", ReleaseStatus::Superseded, 40));
    store.commit(b).await.unwrap();
    let all = store.releases().await.unwrap();
    assert_eq!((all[0].status, all[0].failures), (ReleaseStatus::Active, 0));
    assert_eq!(all[1].status, ReleaseStatus::Superseded);

    // An unknown release: nothing of the batch is written.
    let mut b = Batch::durable();
    b.push(Op::Release(ReleaseOp::Put(Box::new(release(
        "rel_c", "h3", 50,
    )))))
    .push(activate("rel_missing", ReleaseStatus::Superseded, 51));
    assert!(store.commit(b).await.is_err());
    assert_eq!(store.releases().await.unwrap().len(), 2);
    // Another process's view sees the same rows.
    assert_eq!(backend.open().releases().await.unwrap(), all);
}

/// The releases' audit stream is numbered 0, 1, 2… across concurrent writers (of two store
/// instances, as two processes); concurrent activations leave exactly one release active.
pub async fn release_events_are_dense_and_concurrent_activations_leave_one_active(
    backend: &impl Backend,
) {
    let (one, two) = (backend.open(), backend.open());
    let mut b = Batch::durable();
    for (i, id) in ["rel_1", "rel_2", "rel_3", "rel_4"].iter().enumerate() {
        b.push(Op::Release(ReleaseOp::Put(Box::new(release(
            id,
            &format!("h{i}"),
            i as i64,
        )))));
    }
    one.commit(b).await.unwrap();
    let mut tasks = Vec::new();
    for (n, id) in ["rel_1", "rel_2", "rel_3", "rel_4"].iter().enumerate() {
        let store = if n % 2 == 0 { one.clone() } else { two.clone() };
        let id = id.to_string();
        tasks.push(tokio::spawn(async move {
            for k in 0..5 {
                let mut b = Batch::durable();
                b.push(activate(&id, ReleaseStatus::Superseded, 100 + k))
                    .push(Op::Release(ReleaseOp::Event {
                        kind: "release.activated".into(),
                        data: json!({"releaseId": id, "k": k}),
                    }));
                let committed = store.commit(b).await.unwrap();
                assert_eq!(committed.events.len(), 1);
                assert_eq!(committed.events[0].session_id, RELEASE_STREAM);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let events = two.release_events(0, 1000).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.index).collect::<Vec<_>>(),
        (0..20).collect::<Vec<u64>>(),
        "dense, from 0"
    );
    assert!(
        events
            .iter()
            .all(|e| e.kind == "release.activated" && e.session_id == RELEASE_STREAM)
    );
    let page = one.release_events(18, 10).await.unwrap();
    assert_eq!(page.iter().map(|e| e.index).collect::<Vec<_>>(), [18, 19]);
    assert_eq!(one.release_events(5, 2).await.unwrap().len(), 2);
    let active = one
        .releases()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.status == ReleaseStatus::Active)
        .count();
    assert_eq!(active, 1, "one active release, whoever won");
}

/// A build is written once per hash, read back whole on another node, listed newest first, and
/// a different build under a stored hash is refused.
pub async fn builds_are_stored_by_hash(backend: &impl Backend) {
    let store = backend.open();
    let other_node = backend.open();
    let build = |hash: &str, at: i64, pack: &[u8]| StoredBuild {
        hash: hash.to_owned(),
        manifest: format!("{{\"hash\":\"{hash}\"}}"),
        diagnostics: "[]".to_owned(),
        pack: pack.to_vec(),
        created_at: at,
    };
    let first = build("b1aaaaaaaaaaaaaa", 1_000, &[0, 1, 2, 255]);
    assert!(
        store.put_build(first.clone()).await.unwrap(),
        "newly stored"
    );
    assert!(
        !other_node.put_build(first.clone()).await.unwrap(),
        "the same build again changes nothing"
    );
    assert_eq!(
        other_node.build("b1aaaaaaaaaaaaaa").await.unwrap(),
        Some(first.clone()),
        "another node reads the whole build"
    );
    assert!(store.build("b0nothere").await.unwrap().is_none());
    let empty = build("b2bbbbbbbbbbbbbb", 2_000, &[]);
    assert!(other_node.put_build(empty.clone()).await.unwrap());
    assert_eq!(store.build("b2bbbbbbbbbbbbbb").await.unwrap(), Some(empty));
    let listed: Vec<(String, i64)> = store
        .builds()
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.hash, b.created_at))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("b2bbbbbbbbbbbbbb".to_owned(), 2_000),
            ("b1aaaaaaaaaaaaaa".to_owned(), 1_000)
        ]
    );
    let err = store
        .put_build(build("b1aaaaaaaaaaaaaa", 3_000, &[9]))
        .await
        .expect_err("a different build under a stored hash is refused");
    assert!(
        matches!(&err, StoreError::Integrity(m) if m.contains("b1aaaaaaaaaaaaaa")),
        "{err:?}"
    );
    assert_eq!(
        store.build("b1aaaaaaaaaaaaaa").await.unwrap(),
        Some(first),
        "the stored build is kept"
    );
}

/// Workspace checkpoints: blobs are stored once (de-duplicated across sessions), versions grow
/// by one per checkpoint, an entry without its blob is refused, and a writer whose lease moved
/// on is fenced out.
/// Blobs no checkpoint references are collected (a file overwritten since, a pruned session's
/// files); shared and current ones stay; a put that counted on a collected blob is refused.
pub async fn workspace_blobs_are_collected(backend: &impl Backend) {
    let store = backend.open();
    create(store.as_ref(), session("wrun_gc_old")).await;
    // A message waits in the other session: pruning leaves it.
    let mut b = Batch::durable();
    b.push(Op::InsertSession(session("wrun_gc_new")))
        .push(Op::InsertInbox(InboxRecord::new(
            "wrun_gc_new",
            "hi",
            now_ms(),
        )));
    store.commit(b).await.unwrap();
    let entry = |path: &str, hash: &str| WorkspaceEntry {
        path: path.to_owned(),
        hash: hash.to_owned(),
        size: 4,
        mode: 0o644,
    };
    let put = |session: &str, entries: Vec<WorkspaceEntry>, blobs: &[&str]| WorkspacePut {
        session_id: session.to_owned(),
        entries,
        dirs: Vec::new(),
        blobs: blobs
            .iter()
            .map(|h| ((*h).to_owned(), h.as_bytes()[..4].to_vec()))
            .collect(),
        fence: None,
    };
    store
        .put_workspace(put(
            "wrun_gc_old",
            vec![entry("a", "shared"), entry("b", "only_old")],
            &["shared", "only_old"],
        ))
        .await
        .unwrap();
    store
        .put_workspace(put(
            "wrun_gc_new",
            vec![entry("a", "shared"), entry("c", "overwritten")],
            &["overwritten"],
        ))
        .await
        .unwrap();
    store
        .put_workspace(put(
            "wrun_gc_new",
            vec![entry("a", "shared"), entry("c", "current")],
            &["current"],
        ))
        .await
        .unwrap();
    let stored = |hashes: &[&str]| {
        let store = store.clone();
        let hashes: Vec<String> = hashes.iter().map(|h| (*h).to_owned()).collect();
        async move {
            let missing = store.missing_blobs(&hashes).await.unwrap();
            hashes
                .into_iter()
                .filter(|h| !missing.contains(h))
                .collect::<Vec<_>>()
        }
    };
    let all = ["shared", "only_old", "overwritten", "current"];
    assert_eq!(stored(&all).await.len(), 4);

    let gone = store.collect_workspace_blobs().await.unwrap();
    assert_eq!(
        gone,
        BlobsCollected { blobs: 1, bytes: 4 },
        "the overwritten file"
    );
    assert_eq!(stored(&all).await, ["shared", "only_old", "current"]);

    // The old session is pruned with its checkpoint; its own file goes, the shared one stays.
    let cutoff = now_ms() + 1;
    while now_ms() <= cutoff {
        std::hint::spin_loop();
    }
    let pruned = store.prune_sessions(cutoff).await.unwrap();
    assert_eq!(pruned, ["wrun_gc_old"]);
    assert!(store.workspace("wrun_gc_old").await.unwrap().is_none());
    let gone = store.collect_workspace_blobs().await.unwrap();
    assert_eq!(gone.blobs, 1);
    assert_eq!(stored(&all).await, ["shared", "current"]);
    assert_eq!(store.blob("only_old").await.unwrap(), None);
    assert_eq!(
        store.collect_workspace_blobs().await.unwrap(),
        BlobsCollected::default(),
        "nothing more to collect"
    );

    // A node that saw `only_old` stored before it was collected, and so did not send it, is
    // refused rather than left with a checkpoint naming a missing blob.
    let stale = store
        .put_workspace(put(
            "wrun_gc_new",
            vec![entry("a", "shared"), entry("b", "only_old")],
            &[],
        ))
        .await;
    assert!(matches!(stale, Err(StoreError::NotFound(_))), "{stale:?}");
    let kept = store.workspace("wrun_gc_new").await.unwrap().unwrap();
    assert_eq!(
        kept.entries,
        vec![entry("a", "shared"), entry("c", "current")]
    );
}

pub async fn workspace_checkpoints(backend: &impl Backend) {
    let store = backend.open();
    let other_node = backend.open();
    create(store.as_ref(), session("wrun_ws_a")).await;
    create(store.as_ref(), session("wrun_ws_b")).await;
    let entry = |path: &str, hash: &str, size: u64| WorkspaceEntry {
        path: path.to_owned(),
        hash: hash.to_owned(),
        size,
        mode: 0o644,
    };
    let put =
        |session: &str, entries: Vec<WorkspaceEntry>, blobs: Vec<(String, Vec<u8>)>| WorkspacePut {
            session_id: session.to_owned(),
            entries,
            dirs: vec!["empty".to_owned()],
            blobs,
            fence: None,
        };
    assert!(store.workspace("wrun_ws_a").await.unwrap().is_none());
    assert_eq!(
        store
            .missing_blobs(&["h1".to_owned(), "h2".to_owned(), "h1".to_owned()])
            .await
            .unwrap(),
        vec!["h1".to_owned(), "h2".to_owned()]
    );
    let v1 = store
        .put_workspace(put(
            "wrun_ws_a",
            vec![entry("notes.txt", "h1", 5)],
            vec![("h1".to_owned(), b"hello".to_vec())],
        ))
        .await
        .unwrap();
    assert_eq!(v1, 1);
    let got = other_node.workspace("wrun_ws_a").await.unwrap().unwrap();
    assert_eq!(
        (
            got.version,
            got.entries.clone(),
            got.dirs.clone(),
            got.bytes
        ),
        (
            1,
            vec![entry("notes.txt", "h1", 5)],
            vec!["empty".to_owned()],
            5
        )
    );
    assert_eq!(
        other_node.blob("h1").await.unwrap(),
        Some(b"hello".to_vec())
    );
    assert_eq!(
        other_node
            .missing_blobs(&["h1".to_owned(), "h2".to_owned()])
            .await
            .unwrap(),
        vec!["h2".to_owned()],
        "a stored blob is not asked for again"
    );
    // Another session with the same file sends no blob: it is shared.
    assert_eq!(
        other_node
            .put_workspace(put("wrun_ws_b", vec![entry("copy.txt", "h1", 5)], vec![]))
            .await
            .unwrap(),
        1
    );
    let v2 = other_node
        .put_workspace(put(
            "wrun_ws_a",
            vec![entry("notes.txt", "h1", 5), entry("sub/more.bin", "h2", 3)],
            vec![("h2".to_owned(), vec![0, 159, 255])],
        ))
        .await
        .unwrap();
    assert_eq!(v2, 2, "versions grow by one per checkpoint");
    let got = store.workspace("wrun_ws_a").await.unwrap().unwrap();
    assert_eq!((got.version, got.entries.len(), got.bytes), (2, 2, 8));
    assert_eq!(store.blob("h2").await.unwrap(), Some(vec![0, 159, 255]));
    let err = store
        .put_workspace(put("wrun_ws_a", vec![entry("lost.txt", "h9", 1)], vec![]))
        .await
        .expect_err("an entry whose blob is nowhere is refused");
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    assert_eq!(
        store.workspace("wrun_ws_a").await.unwrap().unwrap().version,
        2,
        "a refused checkpoint writes nothing"
    );
    // Fencing: a writer whose lease another node took cannot overwrite the workspace.
    let zombie = claim("wrun_ws_a", "holder_zombie", "host-a", 100);
    assert_eq!(
        store.acquire_lease(&zombie).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let old = store.lease("wrun_ws_a").await.unwrap().unwrap().token;
    let taker = claim("wrun_ws_a", "holder_new", "host-b", 60_000);
    eventually("another node takes the expired lease", || {
        let other_node = other_node.clone();
        let taker = taker.clone();
        async move { other_node.acquire_lease(&taker).await.unwrap() == LeaseOutcome::Acquired }
    })
    .await;
    let mut stale = put("wrun_ws_a", vec![], vec![]);
    stale.fence = Some(old);
    let err = store
        .put_workspace(stale)
        .await
        .expect_err("the zombie's checkpoint is refused");
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    let new = other_node.lease("wrun_ws_a").await.unwrap().unwrap().token;
    let mut fresh = put("wrun_ws_a", vec![], vec![]);
    fresh.fence = Some(new);
    assert_eq!(other_node.put_workspace(fresh).await.unwrap(), 3);
}

/// A session with work under another process's live lease is not listed (nobody may take it);
/// once the lease is released or expires, it is.
pub async fn sessions_with_work_leaves_out_live_leases(backend: &impl Backend) {
    let store = backend.open();
    let other_node = backend.open();
    for id in ["wrun_held", "wrun_released", "wrun_expiring"] {
        let mut s = session(id);
        s.status = SessionStatus::Running;
        create(store.as_ref(), s).await;
    }
    let held = claim("wrun_held", "holder_b", "host-b", 60_000);
    let released = claim("wrun_released", "holder_b", "host-b", 60_000);
    let expiring = claim("wrun_expiring", "holder_b", "host-b", 300);
    for c in [&held, &released, &expiring] {
        assert_eq!(
            other_node.acquire_lease(c).await.unwrap(),
            LeaseOutcome::Acquired
        );
    }
    other_node
        .release_lease("wrun_released", "holder_b")
        .await
        .unwrap();
    let mut work = store.sessions_with_work().await.unwrap();
    work.sort();
    assert!(
        !work.contains(&"wrun_held".to_owned()),
        "a live lease of another host keeps its session out: {work:?}"
    );
    assert!(work.contains(&"wrun_released".to_owned()), "{work:?}");
    eventually(
        "the expiring lease expires and its session is listed",
        || {
            let store = store.clone();
            async move {
                store
                    .sessions_with_work()
                    .await
                    .unwrap()
                    .contains(&"wrun_expiring".to_owned())
            }
        },
    )
    .await;
    assert!(
        !store
            .sessions_with_work()
            .await
            .unwrap()
            .contains(&"wrun_held".to_owned())
    );
}

/// A row written twice in one batch ends as the later write; events of two sessions interleaved
/// in one batch get each session's next indexes in order; `commit_reading` returns the commit
/// and a session read no earlier than the call.
pub async fn rows_written_twice_in_a_batch_and_commit_reading(backend: &impl Backend) {
    let store = backend.open();
    for s in ["wrun_r1", "wrun_r2"] {
        create(store.as_ref(), session(s)).await;
    }
    let mut b = Batch::new();
    b.push(Op::SetCancel {
        session_id: "wrun_r1".into(),
        requested: true,
    });
    store.commit(b).await.unwrap();
    let mut first = session("wrun_r1");
    first.status = SessionStatus::Running;
    first.turn_count = 1;
    let mut last = first.clone();
    last.status = SessionStatus::Idle;
    last.loaded_skills = vec!["s".into()];
    let started = turn("wrun_r1", 0, TurnStatus::Running, None);
    let mut done = started.clone();
    done.status = TurnStatus::Completed;
    done.step_index = 3;
    let mut b = Batch::new();
    b.event("wrun_r1", "a", json!(0))
        .push(Op::UpdateSession(first))
        .push(Op::PutTurn(started))
        .event("wrun_r2", "a", json!(0))
        .event("wrun_r1", "b", json!(1))
        .push(Op::PutTurn(done.clone()))
        .push(Op::UpdateSession(last))
        .event("wrun_r2", "b", json!(1))
        .event("wrun_r1", "c", json!(2));
    let (committed, read) = store.commit_reading(b, "wrun_r1").await.unwrap();
    let seen: Vec<(&str, u64, &str)> = committed
        .events
        .iter()
        .map(|e| (e.session_id.as_str(), e.index, e.kind.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("wrun_r1", 0, "a"),
            ("wrun_r2", 0, "a"),
            ("wrun_r1", 1, "b"),
            ("wrun_r2", 1, "b"),
            ("wrun_r1", 2, "c"),
        ]
    );
    let read = read.expect("the session is read");
    assert!(read.cancel_requested, "a flag set before the call is seen");
    let r1 = store.session("wrun_r1").await.unwrap().unwrap();
    assert_eq!(r1.status, SessionStatus::Idle);
    assert_eq!(r1.loaded_skills, vec!["s".to_owned()]);
    assert_eq!(r1.event_count, 3);
    assert_eq!(
        store.session("wrun_r2").await.unwrap().unwrap().event_count,
        2
    );
    assert_eq!(store.turn("wrun_r1", 0).await.unwrap(), Some(done));
    let stored: Vec<u64> = store
        .events("wrun_r1", 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.index)
        .collect();
    assert_eq!(stored, vec![0, 1, 2]);
    let mut b = Batch::new();
    b.event("wrun_nobody", "a", json!(null));
    assert!(
        store.commit_reading(b, "wrun_r1").await.is_err(),
        "a batch that fails fails the call"
    );
}
