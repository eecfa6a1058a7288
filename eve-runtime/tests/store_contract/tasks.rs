//! The store's part of background tasks, promised by every backend: a session's task rows (notes
//! under `tasks:<session>`, one per task, keyed by its id) are written in the batch of the
//! transition they record, so a task's result message and the row saying it was delivered are
//! stored together or not at all, and a delivery committed under a lease another node has since
//! taken is refused whole: a result is delivered once.

use eve_runtime::store::*;
use serde_json::json;

use super::{Backend, claim, create, eventually, session};

fn task_row(session: &str, id: &str, delivered: bool) -> Op {
    Op::Note(NoteOp::Put(NoteRecord {
        namespace: format!("tasks:{session}"),
        key: id.to_owned(),
        text: json!({"id": id, "working": false, "status": "completed", "delivered": delivered})
            .to_string(),
        created_at: now_ms(),
        updated_at: now_ms(),
    }))
}

fn delivery(session: &str, id: &str) -> Batch {
    let mut b = Batch::new();
    b.push(Op::AppendMessage {
        session_id: session.to_owned(),
        turn_seq: Some(0),
        kind: MESSAGE_KIND_MESSAGE.to_owned(),
        body: json!({"role": "user", "content": format!("<task_result id=\"{id}\">ok</task_result>")}),
    })
    .push(task_row(session, id, true));
    b
}

async fn delivered(store: &dyn Store, session: &str) -> Vec<(String, bool)> {
    store
        .notes(&format!("tasks:{session}"))
        .await
        .unwrap()
        .into_iter()
        .map(|n| {
            let row: serde_json::Value = serde_json::from_str(&n.text).unwrap();
            (n.key, row["delivered"].as_bool().unwrap())
        })
        .collect()
}

/// Task rows are read back by session, each replaced in place; a delivery (message and row) is
/// one commit; a delivery under an older lease token stores neither.
pub async fn task_rows_deliver_once(backend: &impl Backend) {
    let store = backend.open();
    let other_node = backend.open();
    let id = "wrun_tasks";
    create(store.as_ref(), session(id)).await;
    create(store.as_ref(), session("wrun_tasks_other")).await;
    let mut started = Batch::new();
    started
        .push(task_row(id, "wrun_tasks:c1", false))
        .push(task_row(id, "wrun_tasks:c2", false))
        .push(task_row("wrun_tasks_other", "wrun_tasks_other:c1", false));
    store.commit(started).await.unwrap();
    assert_eq!(
        delivered(store.as_ref(), id).await,
        [
            ("wrun_tasks:c1".to_owned(), false),
            ("wrun_tasks:c2".to_owned(), false)
        ]
    );

    // The holder delivers c1: its message and its row, together.
    let holder = claim(id, "holder_a", "host-a", 100);
    assert_eq!(
        store.acquire_lease(&holder).await.unwrap(),
        LeaseOutcome::Acquired
    );
    let old = store.lease(id).await.unwrap().unwrap().token;
    let mut first = delivery(id, "wrun_tasks:c1");
    first.fences.push(Fence {
        session_id: id.into(),
        token: old,
    });
    store.commit(first).await.unwrap();
    assert_eq!(
        delivered(other_node.as_ref(), id).await,
        [
            ("wrun_tasks:c1".to_owned(), true),
            ("wrun_tasks:c2".to_owned(), false)
        ]
    );
    let context = other_node.context(id).await.unwrap();
    assert_eq!(context.len(), 1);

    // Another node takes the session over; the old holder's delivery of c2 is refused whole.
    let taker = claim(id, "holder_b", "host-b", 60_000);
    eventually("the old lease expires and another node takes it", || {
        let other_node = other_node.clone();
        let taker = taker.clone();
        async move { other_node.acquire_lease(&taker).await.unwrap() == LeaseOutcome::Acquired }
    })
    .await;
    let mut late = delivery(id, "wrun_tasks:c2");
    late.fences.push(Fence {
        session_id: id.into(),
        token: old,
    });
    assert!(matches!(
        store.commit(late).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        delivered(other_node.as_ref(), id).await,
        [
            ("wrun_tasks:c1".to_owned(), true),
            ("wrun_tasks:c2".to_owned(), false)
        ],
        "the refused delivery wrote no row"
    );
    assert_eq!(
        other_node.context(id).await.unwrap().len(),
        1,
        "and no message"
    );
    // The new holder delivers it, once.
    let new = other_node.lease(id).await.unwrap().unwrap().token;
    let mut again = delivery(id, "wrun_tasks:c2");
    again.fences.push(Fence {
        session_id: id.into(),
        token: new,
    });
    other_node.commit(again).await.unwrap();
    assert_eq!(
        delivered(store.as_ref(), id).await,
        [
            ("wrun_tasks:c1".to_owned(), true),
            ("wrun_tasks:c2".to_owned(), true)
        ]
    );
    assert_eq!(store.context(id).await.unwrap().len(), 2);
    // Another session's tasks are its own.
    assert_eq!(
        delivered(store.as_ref(), "wrun_tasks_other").await,
        [("wrun_tasks_other:c1".to_owned(), false)]
    );
}
