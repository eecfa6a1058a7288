//! What a message asks of its turn, kept across a restart: a turn with an `outputSchema` and
//! `clientContext` killed mid-turn and resumed on another runtime still sees its context in every
//! model call and still ends with a result that satisfies its schema (`result.completed`), after
//! a repair; a turn that never satisfies it fails `output_schema_not_fulfilled`; a message's
//! `turnPolicy` beats the agent's; tool stubs answer calls across a restart without running the
//! tool, and only an operator may set them over HTTP (the attack, and its twin with the check
//! off).

use eve_compile::{Approval, Effect};
use eve_runtime::engine::{Accept, DriveOutcome, Extra, Runtime, SessionRef};
use eve_runtime::features::turn_input::{MessagePolicy, TurnInput};
use eve_runtime::model::{Message, ModelRequest};
use eve_runtime::server::sign_hs256;
use serde_json::{Value, json};

use crate::engine_support::*;
use crate::server_support::{AgentDir, TestServer};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
        "required": ["city", "celsius"],
        "additionalProperties": false,
    })
}

const CONTEXT: &str = "The user is looking at order #4521.";

/// Accepts `text` into a new session (or `session`), asking `input` of its turn.
async fn send(rt: &Runtime, session: Option<&str>, text: &str, extra: Vec<Extra>) -> String {
    let session = match session {
        Some(id) => SessionRef::Existing(id.to_owned()),
        None => SessionRef::new_session(None),
    };
    let mut accept = Accept::message(session, text);
    accept.extra = extra;
    rt.accept(accept).await.unwrap().unwrap().session
}

/// Drives `id` in a task and aborts it once `until` holds.
async fn drive_and_abort(rt: &Runtime, id: &str, until: impl Fn() -> bool) {
    let task = {
        let rt = rt.clone();
        let id = id.to_owned();
        tokio::spawn(async move { rt.drive(&id).await })
    };
    eventually("the kill point was reached", &until).await;
    task.abort();
    let _ = task.await;
}

fn last_user(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn has_context(request: &ModelRequest) -> bool {
    serde_json::to_string(&request.messages)
        .unwrap()
        .contains(CONTEXT)
}

#[tokio::test]
async fn a_turn_with_a_schema_and_context_resumes_on_another_runtime() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("lookup", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("lookup", "sleep 0.5")]);
    // A call, an answer that does not match, the repaired answer; then a later plain turn.
    let script = json!([
        {"tool_calls": [{"name": "lookup", "input": {}}]},
        {"text": "{\"city\": 3}"},
        {"text": "```json\n{\"city\": \"Paris\", \"celsius\": 21}\n```"},
        {"text": "plain"},
    ]);
    let (rt, first) = recording_runtime(&p, script.clone());
    let input = TurnInput {
        output_schema: Some(schema()),
        client_context: vec![CONTEXT.to_owned()],
        ..TurnInput::default()
    };
    let id = send(&rt, None, "where am I?", vec![Extra::Input(input)]).await;
    drive_and_abort(&rt, &id, || {
        p.side_lines().iter().any(|l| l.starts_with("start"))
    })
    .await;
    drop(rt);
    {
        let first = first.lock().unwrap();
        assert_eq!(first.len(), 1, "killed during the first call's tool");
        assert!(has_context(&first[0]) && first[0].output_schema == Some(schema()));
    }

    let (rt, second) = recording_runtime(&p, script);
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    let result = events
        .iter()
        .find(|e| e.kind == "result.completed")
        .unwrap_or_else(|| panic!("no result: {:?}", kinds(&events)));
    assert_eq!(
        result.data["result"],
        json!({"city": "Paris", "celsius": 21})
    );
    assert_eq!(result.data["turnId"], "turn_0");
    {
        let second = second.lock().unwrap();
        assert_eq!(
            second.len(),
            2,
            "the rest of the turn: the repair, then the result"
        );
        for request in second.iter() {
            assert!(
                has_context(request),
                "the resumed turn still has its context"
            );
            assert_eq!(request.output_schema, Some(schema()), "and its schema");
            assert!(request.system.contains("\"celsius\""));
        }
        let repair = &second[1].messages;
        let told = serde_json::to_string(repair).unwrap();
        assert!(
            told.contains("does not match the required output schema") && told.contains("/city"),
            "the model was shown what is wrong: {told}"
        );
    }
    // Never in the stored history, nor in any event.
    let stored = serde_json::to_string(&rt.store().context(&id).await.unwrap()).unwrap();
    assert!(
        !stored.contains(CONTEXT),
        "the context is not in the history"
    );
    let streamed = serde_json::to_string(&events.iter().map(|e| &e.data).collect::<Vec<_>>());
    assert!(!streamed.unwrap().contains(CONTEXT));

    // The next turn has neither.
    send(&rt, Some(&id), "and now?", Vec::new()).await;
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let second = second.lock().unwrap();
    let later = second.last().unwrap();
    assert_eq!(last_user(later), "and now?");
    assert!(!has_context(later) && later.output_schema.is_none());
}

#[tokio::test]
async fn a_turn_that_never_satisfies_its_schema_fails_with_a_code() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let script = json!([{"text": "no"}, {"text": "still no"}, {"text": "{}"}, {"text": "x"}]);
    let (rt, requests) = recording_runtime(&p, script);
    let input = TurnInput {
        output_schema: Some(schema()),
        ..TurnInput::default()
    };
    let id = send(&rt, None, "weather?", vec![Extra::Input(input)]).await;
    let outcome = rt.drive(&id).await.unwrap();
    assert!(
        matches!(&outcome, DriveOutcome::Failed { code, .. } if code == "output_schema_not_fulfilled"),
        "{outcome:?}"
    );
    assert_eq!(
        requests.lock().unwrap().len(),
        3,
        "the answer and two repairs"
    );
    let events = all_events(&rt, &id).await;
    let k = kinds(&events);
    assert!(!k.contains(&"result.completed".to_owned()), "{k:?}");
    let failed = events.iter().find(|e| e.kind == "turn.failed").unwrap();
    assert_eq!(failed.data["error"]["code"], "output_schema_not_fulfilled");
    // The session takes the next message.
    send(&rt, Some(&id), "hello", Vec::new()).await;
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
}

#[tokio::test]
async fn a_message_turn_policy_beats_the_agent_default() {
    let p = TestProject::new();
    let mut a = agent();
    // The agent steers; one message asks to queue.
    a.config.turn_policy = eve_compile::TurnPolicy::Steer;
    a.tools
        .push(script_tool("lookup", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("lookup", "sleep 0.5")]);
    let script = json!([{"tool_calls": [{"name": "lookup", "input": {}}]}, {"text": "done"}]);
    let (rt, requests) = recording_runtime(&p, script);
    let id = send(&rt, None, "look it up", Vec::new()).await;
    let driver = {
        let rt = rt.clone();
        let id = id.clone();
        tokio::spawn(async move { rt.drive(&id).await })
    };
    eventually("the tool runs", || {
        p.side_lines().iter().any(|l| l.starts_with("start"))
    })
    .await;
    let queue = TurnInput {
        turn_policy: Some(MessagePolicy::Queue),
        ..TurnInput::default()
    };
    send(&rt, Some(&id), "queued message", vec![Extra::Input(queue)]).await;
    send(&rt, Some(&id), "steered message", Vec::new()).await;
    let _ = driver.await;
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    let received: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.kind == "message.received")
        .map(|e| {
            (
                e.data["turnId"].as_str().unwrap_or_default().to_owned(),
                e.data["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        received.contains(&("turn_0".into(), "steered message".into())),
        "the agent's default steers: {received:?}"
    );
    assert!(
        received.contains(&("turn_1".into(), "queued message".into())),
        "the message's own `queue` waits for a turn of its own: {received:?}"
    );
    let requests = requests.lock().unwrap();
    let after_tool = serde_json::to_string(&requests[1].messages).unwrap();
    assert!(
        after_tool.contains("steered message") && !after_tool.contains("queued message"),
        "the running turn's next call: {after_tool}"
    );
}

#[tokio::test]
async fn stubs_answer_calls_across_a_restart_and_the_tool_never_runs() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("charge", Effect::Write, Approval::Never));
    p.write_build(&a, &[logging_script("charge", "")]);
    let script = json!([
        {"tool_calls": [{"name": "charge", "input": {"amount": 5}}]},
        {"text": "first"},
        {"tool_calls": [{"name": "charge", "input": {"amount": 5}}]},
        {"text": "second"},
        {"tool_calls": [{"name": "charge", "input": {"amount": 900}}]},
        {"text": "third"},
    ]);
    let stubs = json!([{
        "id": "small",
        "tool": "charge",
        "match": {"amount": {"type": "number", "maximum": 100}},
        "outcomes": [{"response": {"charged": "one"}}, {"throw": {"message": "card declined"}}],
    }]);
    let (rt, _) = recording_runtime(&p, script.clone());
    let id = send(&rt, None, "charge", vec![Extra::Stubs(stubs)]).await;
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    drop(rt);
    // Another runtime: the rule's second outcome comes next.
    let (rt, _) = recording_runtime(&p, script);
    send(&rt, Some(&id), "again", Vec::new()).await;
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].output, Some(json!({"charged": "one"})));
    let calls = rt.store().tool_calls(&id, 1).await.unwrap();
    assert!(calls[0].is_error, "{calls:?}");
    assert_eq!(calls[0].output, Some(json!("Error: card declined")));
    assert!(p.side_lines().is_empty(), "a stubbed tool never runs");
    // A call no rule matches runs the tool.
    send(&rt, Some(&id), "big one", Vec::new()).await;
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(p.side_lines().len(), 2, "{:?}", p.side_lines());
}

const SECRET: &str = "stubs-test-secret-0123456789";

fn bearer(claims: Value) -> String {
    let mut claims = claims;
    claims["exp"] = json!(chrono::Utc::now().timestamp() + 3600);
    format!("Bearer {}", sign_hs256(&claims, SECRET.as_bytes()))
}

async fn stubs_server(unchecked: bool) -> TestServer {
    let agent = AgentDir::standard();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  claims:\n    role: operator\n",
    );
    TestServer::start_full(
        agent,
        &[("JWT_SECRET", SECRET)],
        |mut c| {
            c.ownership_unchecked_for_tests = unchecked;
            c
        },
        |_| {},
        |_| Default::default(),
    )
    .await
}

/// A stranger tries to replace what a tool does by creating a session with stubs.
async fn create_with_stubs(server: &TestServer, auth: &str) -> (u16, Value) {
    let body = json!({
        "message": "/tool get_weather {\"city\": \"Paris\"}",
        "stubs": [{"id": "w", "tool": "get_weather", "outcome": {"response": {"city": "Atlantis"}}}],
    });
    let response = server
        .http
        .post(server.url("/eve/v1/session"))
        .header("authorization", auth)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn only_an_operator_may_set_stubs_and_the_twin_lets_a_stranger() {
    let server = stubs_server(false).await;
    let stranger = bearer(json!({"sub": "mallory"}));
    let (status, body) = create_with_stubs(&server, &stranger).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "stubs_forbidden");
    let operator = bearer(json!({"sub": "carol", "role": "operator"}));
    let (status, body) = create_with_stubs(&server, &operator).await;
    assert_eq!(status, 202, "{body}");
    server.stop().await;

    // The twin: with the check off, the stranger's stubs take.
    let server = stubs_server(true).await;
    let (status, body) = create_with_stubs(&server, &stranger).await;
    assert_eq!(status, 202, "{body}");
    server.stop().await;
}

#[tokio::test]
async fn bad_turn_options_are_coded_400s() {
    let server = TestServer::start(AgentDir::standard()).await;
    for (body, code) in [
        (
            json!({"message": "hi", "outputSchema": {"type": 7}}),
            "invalid_output_schema",
        ),
        (
            json!({"message": "hi", "clientContext": 5}),
            "invalid_client_context",
        ),
        (
            json!({"message": "hi", "stubs": [{"id": "x"}]}),
            "invalid_stubs",
        ),
        (json!({"outputSchema": {"type": "object"}}), "invalid_body"),
    ] {
        let (status, answer) = server.post("/eve/v1/session", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["code"], code, "{body}: {answer}");
    }
    let id = server.create("hello").await;
    let path = format!("/eve/v1/session/{id}");
    let (status, answer) = server
        .post(&path, json!({"message": "hi", "turnPolicy": "later"}))
        .await;
    assert_eq!(
        (status, answer["code"].clone()),
        (400, json!("invalid_turn_policy"))
    );
    server.stop().await;
}
