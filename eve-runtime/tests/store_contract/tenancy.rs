//! The store's part of tenancy and answers, promised by every backend: a session keeps the
//! principal that started it (and is found by it), and an answer settles its input request by
//! compare-and-set in the commit, so of answers racing from several store instances (processes,
//! fleet nodes) exactly one commits, with its event, and the others learn the answer that won.

use std::sync::Arc;

use eve_runtime::store::*;
use serde_json::json;

use super::{Backend, create, request, session};

/// The owner is written with the session, read back, kept by updates, and filters the list.
pub async fn sessions_keep_their_owner(backend: &impl Backend) {
    let store = backend.open();
    for (id, owner) in [
        ("wrun_a", Some("jwt:alice")),
        ("wrun_b", Some("jwt:bob")),
        ("wrun_none", None),
    ] {
        let mut s = session(id);
        s.owner = owner.map(str::to_owned);
        create(store.as_ref(), s).await;
    }
    let alice = store.session("wrun_a").await.unwrap().unwrap();
    assert_eq!(alice.owner.as_deref(), Some("jwt:alice"));
    assert_eq!(
        store.session("wrun_none").await.unwrap().unwrap().owner,
        None
    );
    // An update written by the engine never moves a session to another owner.
    let mut moved = alice.clone();
    moved.owner = Some("jwt:bob".into());
    moved.turn_count = 3;
    let mut b = Batch::new();
    b.push(Op::UpdateSession(moved));
    store.commit(b).await.unwrap();
    let back = store.session("wrun_a").await.unwrap().unwrap();
    assert_eq!(
        (back.owner.as_deref(), back.turn_count),
        (Some("jwt:alice"), 3)
    );
    let of = |owner: &str| SessionFilter {
        owner: Some(owner.to_owned()),
        ..SessionFilter::default()
    };
    let ids = |list: Vec<SessionRecord>| list.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.sessions(&of("jwt:alice")).await.unwrap()),
        ["wrun_a"]
    );
    assert_eq!(
        ids(store.sessions(&of("jwt:bob")).await.unwrap()),
        ["wrun_b"]
    );
    assert!(store.sessions(&of("jwt:carol")).await.unwrap().is_empty());
    assert_eq!(
        store
            .sessions(&SessionFilter::default())
            .await
            .unwrap()
            .len(),
        3
    );
}

fn answered(r: &InputRequestRecord, approve: bool, who: &str) -> InputRequestRecord {
    InputRequestRecord {
        status: if approve {
            RequestStatus::Approved
        } else {
            RequestStatus::Denied
        },
        answered_at: Some(now_ms()),
        responder: Some(who.to_owned()),
        ..r.clone()
    }
}

fn answer_batch(r: InputRequestRecord, others: &[&str]) -> Batch {
    let mut b = Batch::durable();
    let session = r.session_id.clone();
    let data = json!({"requestId": r.id, "outcome": r.status.as_str(), "by": r.responder});
    b.push(Op::AnswerInputRequest {
        request: r,
        others_pending: others.iter().map(|s| (*s).to_owned()).collect(),
    })
    .event(&session, "approval.settled", data);
    b
}

/// Answers racing on one request from two store instances: exactly one commits (with its
/// event), every other is refused whole with the answer that won; a request no longer pending
/// is never answered again.
pub async fn an_answer_settles_a_request_once(backend: &impl Backend) {
    let stores: Vec<Arc<dyn Store>> = vec![backend.open(), backend.open()];
    let mut raced = 0;
    for round in 0..8 {
        let id = format!("wrun_q{round}");
        create(stores[0].as_ref(), session(&id)).await;
        let asked = request(&format!("req_{round}"), &id, 1, RequestStatus::Pending);
        let mut b = Batch::durable();
        b.push(Op::PutInputRequest(asked.clone()));
        stores[0].commit(b).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..10 {
            let store = stores[i % 2].clone();
            let batch = answer_batch(answered(&asked, i % 2 == 0, &format!("p{i}")), &[]);
            tasks.push(tokio::spawn(async move { store.commit(batch).await }));
        }
        let mut won = Vec::new();
        let mut lost = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => won.push(()),
                Err(StoreError::AlreadyAnswered(stored)) => lost.push(*stored),
                Err(e) => panic!("an answer failed otherwise: {e}"),
            }
        }
        raced += 10;
        assert_eq!(
            won.len(),
            1,
            "round {round}: {} answers committed",
            won.len()
        );
        let stored = stores[1].input_request(&asked.id).await.unwrap().unwrap();
        assert_ne!(stored.status, RequestStatus::Pending);
        assert_eq!(lost.len(), 9);
        assert!(
            lost.iter().all(|l| *l == stored),
            "a refusal names the answer that won"
        );
        let events = stores[0].events(&id, 0, 100).await.unwrap();
        assert_eq!(events.len(), 1, "one approval.settled: {events:?}");
        assert_eq!(events[0].data["by"], json!(stored.responder));
    }
    eprintln!("store answers: {raced} racing answers on 8 requests, one committed each");
    // Withdrawn (a cancelled turn): no answer settles it.
    create(stores[0].as_ref(), session("wrun_w")).await;
    let mut b = Batch::durable();
    b.push(Op::PutInputRequest(request(
        "req_w",
        "wrun_w",
        1,
        RequestStatus::Cancelled,
    )));
    stores[0].commit(b).await.unwrap();
    let late = answered(
        &request("req_w", "wrun_w", 1, RequestStatus::Pending),
        true,
        "p",
    );
    match stores[1].commit(answer_batch(late, &[])).await {
        Err(StoreError::AlreadyAnswered(stored)) => {
            assert_eq!(stored.status, RequestStatus::Cancelled)
        }
        other => panic!("a withdrawn request was answered: {other:?}"),
    }
    assert!(stores[0].events("wrun_w", 0, 10).await.unwrap().is_empty());
}

/// An answer's view of the other requests of its turn still pending must be current: a stale
/// one is refused whole (`InputsMoved`), so exactly one answer of a turn sees its wait resolved.
pub async fn an_answer_with_a_stale_view_of_its_turn_is_refused(backend: &impl Backend) {
    let store = backend.open();
    create(store.as_ref(), session("wrun_m")).await;
    let (one, two) = (
        request("req_m1", "wrun_m", 1, RequestStatus::Pending),
        request("req_m2", "wrun_m", 1, RequestStatus::Pending),
    );
    // Another turn's request is not this turn's business.
    let other_turn = request("req_m0", "wrun_m", 0, RequestStatus::Pending);
    let mut b = Batch::durable();
    b.push(Op::PutInputRequest(one.clone()))
        .push(Op::PutInputRequest(two.clone()))
        .push(Op::PutInputRequest(other_turn));
    store.commit(b).await.unwrap();
    store
        .commit(answer_batch(answered(&one, true, "a"), &["req_m2"]))
        .await
        .unwrap();
    // Read before the first answer committed: it still thinks req_m1 waits.
    match store
        .commit(answer_batch(answered(&two, false, "b"), &["req_m1"]))
        .await
    {
        Err(StoreError::InputsMoved { session, turn }) => {
            assert_eq!((session.as_str(), turn), ("wrun_m", 1));
        }
        other => panic!("a stale view committed: {other:?}"),
    }
    let still = store.input_request("req_m2").await.unwrap().unwrap();
    assert_eq!(
        still.status,
        RequestStatus::Pending,
        "the refused batch wrote nothing"
    );
    assert_eq!(store.events("wrun_m", 0, 10).await.unwrap().len(), 1);
    store
        .commit(answer_batch(answered(&two, false, "b"), &[]))
        .await
        .unwrap();
    assert_eq!(
        store.input_request("req_m2").await.unwrap().unwrap().status,
        RequestStatus::Denied
    );
}
