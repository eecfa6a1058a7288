//! Telegram: the secret-token header, one session per chat (and forum topic), `sendMessage`
//! replies to the message, repeated updates.

use serde_json::{Value, json};

use super::{Fake, Served, agent, assert_unauthorized};

const SECRET: &str = "tg-secret_token-123";
const TOKEN: &str = "123456:ABC-def";

fn vars() -> [(&'static str, &'static str); 2] {
    [("TG_BOT_TOKEN", TOKEN), ("TG_SECRET", SECRET)]
}

fn channel(fake: &Fake) -> String {
    format!(
        "kind: telegram\nbot_token: ${{TG_BOT_TOKEN}}\nsecret_token: ${{TG_SECRET}}\n\
         api_base_url: {}\n",
        fake.base
    )
}

fn update(update_id: i64, chat: i64, message_id: i64, text: &str, thread: Option<i64>) -> String {
    let mut message = json!({
        "message_id": message_id, "date": 1_700_000_000,
        "from": {"id": 5, "is_bot": false, "first_name": "Ann"},
        "chat": {"id": chat, "type": "private"}, "text": text,
    });
    if let Some(t) = thread {
        message["message_thread_id"] = json!(t);
        message["is_topic_message"] = json!(true);
    }
    json!({"update_id": update_id, "message": message}).to_string()
}

async fn send(server: &Served, body: &str) -> (u16, Value) {
    let headers = [("x-telegram-bot-api-secret-token", SECRET.to_owned())];
    server.post("telegram", &headers, body).await
}

#[tokio::test]
async fn secret_token_header_is_required() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("telegram", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;
    let body = update(1, 42, 7, "hi", None);
    assert_unauthorized(&server.post("telegram", &[], body.clone()).await);
    for wrong in ["tg-secret_token-124", "tg-secret_token-12", "", "x"] {
        let headers = [("x-telegram-bot-api-secret-token", wrong.to_owned())];
        assert_unauthorized(&server.post("telegram", &headers, body.clone()).await);
    }
    fake.stays_at(0).await;
    server.stop().await;
}

#[tokio::test]
async fn one_session_per_chat_and_replies_with_send_message() {
    let fake = Fake::start().await;
    let (_agent, root) = agent(&[("telegram", channel(&fake))]);
    let server = Served::start(&root, &vars()).await;

    let (status, first) = send(&server, &update(1, 42, 7, "hi", None)).await;
    assert_eq!(status, 200, "{first}");
    let chat = first["sessionId"].as_str().unwrap().to_owned();
    let reply = &fake.wait(1).await[0];
    assert_eq!(reply.method, "POST");
    assert_eq!(reply.path, format!("/bot{TOKEN}/sendMessage"));
    assert_eq!(
        reply.json,
        json!({"chat_id": 42, "text": "You said: hi", "reply_to_message_id": 7})
    );

    let (_, second) = send(&server, &update(2, 42, 8, "more", None)).await;
    assert_eq!(second["sessionId"], chat.as_str());
    // The same update again (Telegram redelivers until it gets a 200): not run twice.
    let (status, again) = send(&server, &update(2, 42, 8, "more", None)).await;
    assert_eq!(status, 200);
    assert_eq!(again["ignored"], "already accepted");
    // Another chat, and a forum topic of the first chat, are sessions of their own.
    let (_, other) = send(&server, &update(3, -1001, 3, "group", None)).await;
    let (_, topic) = send(&server, &update(4, 42, 9, "topic", Some(11))).await;
    let (other, topic) = (
        other["sessionId"].as_str().unwrap().to_owned(),
        topic["sessionId"].as_str().unwrap().to_owned(),
    );
    assert_ne!(other, chat);
    assert_ne!(topic, chat);
    assert_ne!(topic, other);

    let replies = fake.wait(4).await;
    fake.stays_at(4).await;
    server.until_turns(&chat, 2).await;
    assert_eq!(server.turns(&chat).await, 2);
    assert_eq!(server.received(&chat).await, ["hi", "more"]);
    let topic_reply = replies
        .iter()
        .find(|r| r.json["text"] == "You said: topic")
        .unwrap();
    assert_eq!(topic_reply.json["message_thread_id"], 11);
    assert_eq!(topic_reply.json["reply_to_message_id"], 9);
    let group_reply = replies
        .iter()
        .find(|r| r.json["text"] == "You said: group")
        .unwrap();
    assert_eq!(group_reply.json["chat_id"], -1001);

    // Updates that are not text messages from people are acknowledged and ignored.
    for ignored in [
        json!({"update_id": 10, "edited_message": {"message_id": 1, "chat": {"id": 42}, "text": "x"}}),
        json!({"update_id": 11, "message": {"message_id": 2, "chat": {"id": 42},
               "photo": [{"file_id": "f"}]}}),
        json!({"update_id": 12, "message": {"message_id": 3, "chat": {"id": 42}, "text": "beep",
               "from": {"id": 9, "is_bot": true}}}),
    ] {
        let (status, body) = send(&server, &ignored.to_string()).await;
        assert_eq!(status, 200, "{body}");
        assert!(body["ignored"].is_string(), "{body}");
    }
    fake.stays_at(4).await;
    server.stop().await;
}
