//! The engine's one way in (`Runtime::accept`) and what a runtime keeps to itself.

use eve_runtime::engine::{Accept, Extra, RuntimeError, SessionRef};
use eve_runtime::store::{ScheduleClaim, SessionFilter, StateExpect};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::engine_support::*;

fn channel_message(session: &str, delivery: &str) -> Accept {
    Accept {
        session: SessionRef::Ensure(session.to_owned()),
        message: Some("hello from a channel".to_owned()),
        extra: vec![
            Extra::ChannelDelivery {
                channel: "support".to_owned(),
                delivery_id: delivery.to_owned(),
            },
            Extra::ChannelReply {
                channel: "support".to_owned(),
                address: json!({"kind": "test", "to": "thread-1"}),
            },
        ],
    }
}

#[tokio::test]
async fn a_channel_delivery_is_accepted_once_with_the_reply_it_owes() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "hi"}]));
    let first = rt
        .accept(channel_message("wrun_chan_1", "Ev1"))
        .await
        .unwrap()
        .expect("the first delivery is accepted");
    assert_eq!(first.session, "wrun_chan_1");
    assert_eq!(first.from, 0);
    let inbox_id = first.inbox_id.clone().expect("a message was accepted");
    let reply = rt
        .store()
        .channel_reply(&inbox_id)
        .await
        .unwrap()
        .expect("the reply owed is stored with the message");
    assert_eq!(reply.session_id, "wrun_chan_1");
    assert_eq!(reply.owner_host, rt.host());
    assert_eq!(reply.address["to"], "thread-1");

    let again = rt
        .accept(channel_message("wrun_chan_1", "Ev1"))
        .await
        .unwrap();
    assert_eq!(again, None, "a delivery already accepted is refused");
    let inbox = rt.store().pending_inbox("wrun_chan_1").await.unwrap();
    assert_eq!(inbox.len(), 1, "the refused delivery wrote nothing");

    let other = rt
        .accept(channel_message("wrun_chan_1", "Ev2"))
        .await
        .unwrap()
        .expect("another delivery is accepted");
    assert_eq!(
        rt.store().pending_inbox("wrun_chan_1").await.unwrap().len(),
        2
    );
    assert!(other.inbox_id.is_some());
}

#[tokio::test]
async fn a_schedule_fire_claimed_elsewhere_starts_no_session() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "hi"}]));
    let fire = |expect: StateExpect| Accept {
        session: SessionRef::new_session(Some("nightly".to_owned())),
        message: Some("Scheduled run of `nightly`.".to_owned()),
        extra: vec![Extra::ScheduleFire(ScheduleClaim {
            schedule: "nightly".to_owned(),
            expect,
            next: Some((4_000_000_000_000, "0 3 * * *@UTC".to_owned())),
            fires: Vec::new(),
        })],
    };
    // The state says another next fire time: someone else claimed this one.
    let lost = rt.accept(fire(StateExpect::Next(1))).await.unwrap();
    assert_eq!(lost, None);
    let all = SessionFilter {
        limit: 10,
        ..SessionFilter::default()
    };
    assert!(rt.sessions(&all).await.unwrap().is_empty());

    let won = rt
        .accept(fire(StateExpect::Absent))
        .await
        .unwrap()
        .expect("the claim holds");
    let record = rt.session(&won.session).await.unwrap().unwrap();
    assert_eq!(record.schedule.as_deref(), Some("nightly"));
    let inbox = rt.store().pending_inbox(&won.session).await.unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].text, "Scheduled run of `nightly`.");
}

#[tokio::test]
async fn accept_refuses_what_cannot_be_committed_together() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let rt = p.runtime(json!([{"text": "hi"}]));
    let empty = rt
        .accept(Accept::message(SessionRef::new_session(None), "  "))
        .await;
    assert!(matches!(empty, Err(RuntimeError::EmptyMessage)));
    let missing = rt
        .accept(Accept::message(
            SessionRef::Existing("wrun_nope".to_owned()),
            "hi",
        ))
        .await;
    assert!(matches!(missing, Err(RuntimeError::SessionNotFound(_))));
    let no_message = rt
        .accept(Accept {
            session: SessionRef::new_session(None),
            message: None,
            extra: vec![Extra::ChannelReply {
                channel: "support".to_owned(),
                address: json!({}),
            }],
        })
        .await;
    assert!(no_message.is_err(), "a reply is owed only for a message");
    let both = rt
        .accept(Accept {
            session: SessionRef::new_session(None),
            message: Some("hi".to_owned()),
            extra: vec![
                Extra::ChannelDelivery {
                    channel: "support".to_owned(),
                    delivery_id: "Ev9".to_owned(),
                },
                Extra::ScheduleFire(ScheduleClaim {
                    schedule: "nightly".to_owned(),
                    expect: StateExpect::Any,
                    next: None,
                    fires: Vec::new(),
                }),
            ],
        })
        .await;
    assert!(both.is_err());
    let all = SessionFilter {
        limit: 10,
        ..SessionFilter::default()
    };
    assert!(
        rt.sessions(&all).await.unwrap().is_empty(),
        "nothing refused was written"
    );
}

#[tokio::test]
async fn two_runtimes_in_one_process_do_not_share_followed_replies() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let one = p.runtime(json!([]));
    let two = p.runtime(json!([]));
    let shutdown = CancellationToken::new();
    let follower = one.follow_reply("inb_1", 1, &shutdown);
    assert!(one.reply_followed("inb_1"));
    assert!(!two.reply_followed("inb_1"));
    let stopped = CancellationToken::new();
    let _other = two.follow_reply("inb_2", 1, &stopped);
    stopped.cancel();
    assert!(
        !two.reply_followed("inb_2"),
        "a shut-down follower follows nothing"
    );
    drop(follower);
    assert!(!one.reply_followed("inb_1"));
}
