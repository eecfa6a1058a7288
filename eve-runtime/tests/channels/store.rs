//! The store's side of the platform channels: a delivery is accepted once (with its message, or
//! not at all), delivery ids are forgotten after a day, owed replies are taken only from
//! processes that are gone, and a reply done stays done.

use eve_runtime::store::*;
use serde_json::json;

fn inbox(id: &str) -> Batch {
    let mut batch = Batch::durable();
    batch.push(Op::InsertInbox(InboxRecord {
        id: id.to_owned(),
        session_id: "wrun_s".to_owned(),
        text: "hello".to_owned(),
        accepted_at: now_ms(),
        consumed_turn: None,
        input: None,
    }));
    batch
}

fn delivery(id: &str) -> Option<ChannelDelivery> {
    Some(ChannelDelivery {
        channel: "slack".to_owned(),
        delivery_id: id.to_owned(),
    })
}

fn reply(inbox_id: &str, pid: u32, host: &str) -> Option<ChannelReplyRecord> {
    Some(ChannelReplyRecord {
        inbox_id: inbox_id.to_owned(),
        channel: "slack".to_owned(),
        session_id: "wrun_s".to_owned(),
        from_index: 3,
        address: json!({"kind": "slack", "channel": "C1", "thread_ts": "1.1"}),
        announced: Vec::new(),
        done: false,
        detail: None,
        owner_pid: pid,
        owner_host: host.to_owned(),
        created_at: now_ms(),
        updated_at: now_ms(),
        owner_token: FIRST_REPLY_TOKEN,
        owner_expires_at: now_ms() + 60_000,
        sending: None,
    })
}

fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("eve.db")).unwrap();
    (dir, store)
}

#[tokio::test]
async fn a_delivery_is_accepted_once_with_its_message() {
    let (dir, store) = store();
    let mut batch = inbox("msg_1");
    batch.ops.insert(
        0,
        Op::InsertSession(SessionRecord::new(
            "wrun_s".into(),
            "h".into(),
            "a".into(),
            None,
            now_ms(),
        )),
    );
    let first = ChannelAccept {
        delivery: delivery("Ev1"),
        reply: reply("msg_1", std::process::id(), "here"),
    };
    assert!(
        store
            .accept_channel_message(first, batch)
            .await
            .unwrap()
            .is_some()
    );
    // The same delivery again writes nothing: no second message, no second reply.
    let again = ChannelAccept {
        delivery: delivery("Ev1"),
        reply: reply("msg_2", std::process::id(), "here"),
    };
    assert!(
        store
            .accept_channel_message(again, inbox("msg_2"))
            .await
            .unwrap()
            .is_none()
    );
    let pending = store.pending_inbox("wrun_s").await.unwrap();
    assert_eq!(
        pending.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["msg_1"]
    );
    assert_eq!(store.channel_replies(false).await.unwrap().len(), 1);
    assert!(store.channel_reply("msg_2").await.unwrap().is_none());

    // A delivery id older than a day is forgotten when another is accepted.
    let conn = rusqlite::Connection::open(dir.path().join("eve.db")).unwrap();
    conn.execute(
        "UPDATE channel_deliveries SET accepted_at = ?1",
        [now_ms() - CHANNEL_ROWS_KEPT_MS - 1],
    )
    .unwrap();
    let other = ChannelAccept {
        delivery: delivery("Ev2"),
        reply: None,
    };
    assert!(
        store
            .accept_channel_message(other, inbox("msg_3"))
            .await
            .unwrap()
            .is_some()
    );
    let old = ChannelAccept {
        delivery: delivery("Ev1"),
        reply: None,
    };
    assert!(
        store
            .accept_channel_message(old, inbox("msg_4"))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn owed_replies_are_taken_from_processes_that_are_gone() {
    let (_dir, store) = store();
    let me = std::process::id();
    // pid 1 always runs; u32::MAX - 1 never does.
    let owners = [
        ("msg_live", 1, "here"),
        ("msg_dead", u32::MAX - 1, "here"),
        ("msg_mine", me, "here"),
        ("msg_elsewhere", 1, "another-host"),
    ];
    for (id, pid, host) in owners {
        let accept = ChannelAccept {
            delivery: None,
            reply: reply(id, pid, host),
        };
        store
            .accept_channel_message(accept, inbox(id))
            .await
            .unwrap();
    }
    let mut taken: Vec<String> = store
        .claim_channel_replies(ReplyClaim {
            pid: me,
            host: "here".to_owned(),
            ttl_ms: 5_000,
            expired_only: false,
            skip: Vec::new(),
        })
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.inbox_id)
        .collect();
    taken.sort();
    assert_eq!(taken, ["msg_dead", "msg_elsewhere", "msg_mine"]);
    let dead = store.channel_reply("msg_dead").await.unwrap().unwrap();
    assert_eq!((dead.owner_pid, dead.owner_host.as_str()), (me, "here"));
    assert_eq!(dead.from_index, 3);
    assert_eq!(dead.address["thread_ts"], "1.1");

    // Progress is recorded; a reply done stays done and is no longer owed.
    let update = |done: bool| ChannelReplyUpdate {
        inbox_id: "msg_dead".to_owned(),
        address: json!({"kind": "slack"}),
        announced: vec!["req_1".to_owned()],
        done,
        detail: None,
    };
    store.update_channel_reply(update(false)).await.unwrap();
    let dead = store.channel_reply("msg_dead").await.unwrap().unwrap();
    assert_eq!(dead.announced, ["req_1"]);
    store.update_channel_reply(update(true)).await.unwrap();
    store.update_channel_reply(update(false)).await.unwrap();
    assert!(store.channel_reply("msg_dead").await.unwrap().unwrap().done);
    let owed: Vec<String> = store
        .channel_replies(true)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.inbox_id)
        .collect();
    assert!(!owed.contains(&"msg_dead".to_owned()), "{owed:?}");
    assert_eq!(owed.len(), 3);
}
