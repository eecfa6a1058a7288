//! The store's part of starting a turn in few round trips, promised by every backend: a
//! session's lease claim answers with the fencing token it is held under and refuses an unknown
//! session without writing anything, and a session's context and dynamic tools are read together.

use eve_runtime::store::*;
use serde_json::json;

use super::{Backend, claim, create, session};

/// `take_lease` takes a lease as `acquire_lease` does, answering with the token the stored lease
/// carries; an unknown session is refused and no lease row is written for it.
pub async fn take_lease_answers_with_its_token(backend: &impl Backend) {
    let store = backend.open();
    let a = claim("wrun_take", "holder_a", "host-a", 60_000);
    let b = claim("wrun_take", "holder_b", "host-b", 60_000);
    assert_eq!(store.take_lease(&a).await.unwrap(), LeaseTaken::NoSession);
    assert!(store.lease("wrun_take").await.unwrap().is_none());

    create(store.as_ref(), session("wrun_take")).await;
    let LeaseTaken::Acquired { token: first } = store.take_lease(&a).await.unwrap() else {
        panic!("a free session's lease is taken");
    };
    let stored = store.lease("wrun_take").await.unwrap().unwrap();
    assert_eq!((stored.holder.as_str(), stored.token), ("holder_a", first));
    assert_eq!(
        store.take_lease(&a).await.unwrap(),
        LeaseTaken::Acquired { token: first },
        "the same holder keeps its token"
    );
    assert_eq!(
        store.take_lease(&b).await.unwrap(),
        LeaseTaken::HeldBy {
            pid: std::process::id(),
            host: "host-a".into()
        }
    );
    store.release_lease("wrun_take", "holder_a").await.unwrap();
    let LeaseTaken::Acquired { token: second } = store.take_lease(&b).await.unwrap() else {
        panic!("a released lease is taken");
    };
    assert!(second > first, "{second} after {first}");
    assert_eq!(
        store.lease("wrun_take").await.unwrap().unwrap().token,
        second
    );
    // Tokens from both ways of taking a lease come from one sequence.
    store.release_lease("wrun_take", "holder_b").await.unwrap();
    assert_eq!(
        store.acquire_lease(&a).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let third = store.lease("wrun_take").await.unwrap().unwrap().token;
    assert!(third > second, "{third} after {second}");
}

/// `turn_view` reads what `context` and `dynamic_tools` read, together; an unknown session has
/// an empty view.
pub async fn turn_view_reads_context_and_dynamic_tools(backend: &impl Backend) {
    let store = backend.open();
    assert_eq!(
        store.turn_view("wrun_none").await.unwrap(),
        TurnView::default()
    );
    create(store.as_ref(), session("wrun_view")).await;
    let append = |kind: &str, body: serde_json::Value| Op::AppendMessage {
        session_id: "wrun_view".into(),
        turn_seq: Some(0),
        kind: kind.into(),
        body,
    };
    let tool = |name: &str| DynamicToolRecord {
        session_id: "wrun_view".into(),
        name: name.into(),
        provider: "p1".into(),
        description: format!("{name} tool"),
        input_schema: json!({"type": "object"}),
        provider_tool: json!({"runner": "python3"}),
        build_hash: "h1".into(),
        turn_seq: 0,
        resolved_at: now_ms(),
    };
    let mut b = Batch::new();
    b.push(append(
        MESSAGE_KIND_MESSAGE,
        json!({"role": "user", "content": "old"}),
    ))
    .push(append(
        MESSAGE_KIND_CHECKPOINT,
        json!({"summary": "before"}),
    ))
    .push(append(
        MESSAGE_KIND_MESSAGE,
        json!({"role": "user", "content": "new"}),
    ))
    .push(Op::Composition(CompositionOp::PutDynamicTools {
        session_id: "wrun_view".into(),
        providers: vec!["p1".into()],
        tools: vec![tool("zeta"), tool("alpha")],
        turn_seq: 0,
        detail: json!({}),
    }));
    store.commit(b).await.unwrap();
    let view = store.turn_view("wrun_view").await.unwrap();
    assert_eq!(view.context, store.context("wrun_view").await.unwrap());
    assert_eq!(
        view.dynamic_tools,
        store.dynamic_tools("wrun_view").await.unwrap()
    );
    assert_eq!(view.context.len(), 2, "from the checkpoint on: {view:?}");
    assert_eq!(view.dynamic_tools.len(), 2);
}
