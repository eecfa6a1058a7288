//! Background tasks through the real server (DESIGN §17), modelled on eve's own scenarios: each
//! test follows the root session's stream the way a client does and asserts the events it sees.
//! Subagents are real agent folders compiled by the real compiler; the model is the mock,
//! scripted per agent.
//!
//! - `task-wait`: a subagent call returns eve's receipt, `task_wait` waits, the result arrives once
//!   as a `<task_result>` message;
//! - `background-tasks`: the model answers while the task works, the turn holds
//!   (`turn.waiting {on: "tasks"}`) and resumes with the result;
//! - `task-timeout`: a task past its time limit settles `timed_out`;
//! - `nested-background-result`: a child's own task result reaches the root through the child;
//! - `turn-cancellation` and `session-end-cascade`: cancelling the turn cancels its tasks and
//!   their children, and the session keeps working;
//! - the limits (`TOO_MANY_TASKS`, `UNKNOWN_TASK`), continuation by task id, and a restart while
//!   three tasks work (one parked on an approval in its child): every result arrives once, no child
//!   runs twice, the parent's turn completes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use eve_compile::Agent;
use eve_runtime::engine::{ModelProvider, ResolvedModel, RuntimeConfig};
use eve_runtime::model::ModelError;
use eve_runtime::model::mock::{MockClient, Script, Step};
use eve_runtime::server::RouterOptions;
use serde_json::{Value, json};

use crate::server_support::*;

/// A mock per agent (by path, then name, then `*`).
#[derive(Clone)]
struct Scripted(Arc<BTreeMap<String, Vec<Step>>>);

impl Scripted {
    fn new(script: Value) -> Self {
        Self(Arc::new(serde_json::from_value(script).unwrap()))
    }
}

impl ModelProvider for Scripted {
    fn resolve(&self, agent: &Agent) -> Result<ResolvedModel, ModelError> {
        Ok(ResolvedModel {
            client: Arc::new(
                MockClient::from_script(Script::PerAgent((*self.0).clone()))
                    .for_agent(&agent.name, &agent.path),
            ),
            model: "script".to_owned(),
            model_id: "mock/script".to_owned(),
            context_window: None,
            price_per_million: None,
        })
    }
}

/// `agent/<dir>/subagents/<name>/` with `yaml` added to its `agent.yaml`.
fn subagent(agent: &AgentDir, dir: &str, name: &str, yaml: &str) {
    let base = format!("{dir}subagents/{name}");
    agent.file(
        &format!("{base}/agent.yaml"),
        &format!("description: The {name} helper.\ndefault_tools: false\n{yaml}"),
    );
    agent.file(
        &format!("{base}/instructions.md"),
        &format!("You are {name}.\n"),
    );
}

async fn serve(agent: AgentDir, script: Value) -> TestServer {
    let models = Scripted::new(script);
    TestServer::start_full(
        agent,
        &[],
        |c| c,
        move |c: &mut RuntimeConfig| c.models = Arc::new(models),
        |_| RouterOptions::default(),
    )
    .await
}

fn call(name: &str, id: &str, input: Value) -> Value {
    json!({"tool_calls": [{"name": name, "id": id, "input": input}]})
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The events of `kinds_wanted`, in stream order, as `type` or `type:detail`.
fn picked(events: &[Value], wanted: &[&str]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            let kind = e["type"].as_str()?;
            if !wanted.contains(&kind) {
                return None;
            }
            Some(match kind {
                "turn.waiting" => format!("turn.waiting:{}", e["data"]["on"].as_str()?),
                "task.settled" => format!("task.settled:{}", e["data"]["status"].as_str()?),
                _ => kind.to_owned(),
            })
        })
        .collect()
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Follows `session` from the start until the root's turn ended (or `deadline`).
async fn until_turn_ends(server: &TestServer, session: &str) -> Vec<Value> {
    let ends = ["turn.completed", "turn.failed", "turn.cancelled"];
    for _ in 0..200 {
        let events = server.all(session).await;
        if events
            .iter()
            .any(|e| ends.contains(&e["type"].as_str().unwrap_or("")))
            && events
                .last()
                .is_some_and(|e| e["type"] == "session.waiting")
        {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the turn of {session} did not end: {:?}",
        kinds(&server.all(session).await)
    );
}

/// The texts of the user messages of `session`'s history holding a `<task_result>`.
async fn task_results(server: &TestServer, session: &str) -> Vec<String> {
    let rows = server.runtime.store().context(session).await.unwrap();
    rows.iter()
        .filter(|r| r.body["role"] == "user")
        .filter_map(|r| r.body["content"].as_str().map(str::to_owned))
        .filter(|t| t.contains("<task_result"))
        .collect()
}

async fn children(server: &TestServer, parent: &str) -> Vec<String> {
    let mut out: Vec<String> = server
        .runtime
        .sessions(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.parent_id.as_deref() == Some(parent))
        .map(|s| s.id)
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn task_wait_gets_the_result_once_as_a_task_result_message() {
    let agent = AgentDir::new();
    subagent(&agent, "", "researcher", "");
    let server = serve(
        agent,
        json!({
            "*": [call("researcher", "c1", json!({"message": "find it"})),
                  call("task_wait", "w1", json!({})),
                  {"text": "the researcher found it"}],
            "researcher": [{"text": "found: 42", "delay_ms": 30}]
        }),
    )
    .await;
    let id = server.create("go").await;
    let events = until_turn_ends(&server, &id).await;
    assert_eq!(
        picked(
            &events,
            &[
                "actions.requested",
                "task.started",
                "agent.started",
                "action.result",
                "task.settled",
                "turn.waiting",
                "turn.completed"
            ]
        ),
        [
            "actions.requested",
            "task.started",
            "agent.started",
            "action.result",
            "actions.requested",
            "task.settled:completed",
            "action.result",
            "turn.completed"
        ]
    );
    let task_id = format!("{id}:c1");
    let started = of_kind(&events, "task.started")[0];
    assert_eq!(
        started["data"],
        json!({"callId": "c1", "kind": "agent", "name": "researcher", "taskId": task_id,
               "turnId": "turn_0"})
    );
    let child = children(&server, &id).await.pop().unwrap();
    let opened = of_kind(&events, "agent.started")[0];
    assert_eq!(opened["data"]["sessionId"], json!(child));
    assert_eq!(
        opened["data"]["streamPath"],
        json!(format!("/eve/v1/session/{child}/stream"))
    );
    let receipt = of_kind(&events, "action.result")[0];
    assert_eq!(
        receipt["data"]["result"]["output"],
        json!(format!(
            "Started task {task_id}. Its result will arrive in a <task_result> message. To send it \
             another message, call researcher again with task_id {task_id}."
        ))
    );
    let settled = of_kind(&events, "task.settled")[0];
    assert_eq!(settled["data"]["output"], json!("found: 42"));
    assert_eq!(settled["data"]["callId"], json!("c1"));
    let waited = of_kind(&events, "action.result")[1];
    assert_eq!(
        waited["data"]["result"]["output"],
        json!(format!("{task_id} completed; its result follows."))
    );
    assert_eq!(
        task_results(&server, &id).await,
        [format!(
            "<task_result id=\"{task_id}\" tool=\"researcher\" status=\"completed\">found: 42</task_result>"
        )]
    );
    // The child kept its own stream, with its own turn.
    let own = server.all(&child).await;
    assert!(kinds(&own).contains(&"turn.completed".to_owned()));
    server.stop().await;
}

#[tokio::test]
async fn an_answer_while_a_task_works_holds_the_turn_until_the_result() {
    let agent = AgentDir::new();
    subagent(&agent, "", "researcher", "");
    let server = serve(
        agent,
        json!({
            "*": [call("researcher", "c1", json!({"message": "find it"})),
                  {"text": "I asked the researcher."},
                  {"text": "It says 42."}],
            "researcher": [{"text": "found: 42", "delay_ms": 100}]
        }),
    )
    .await;
    let id = server.create("go").await;
    // A follower's stream does not stop at `turn.waiting {on: "tasks"}`.
    let followed = server.until_rest(&id, 0).await;
    assert_eq!(
        picked(
            &followed,
            &[
                "message.completed",
                "turn.waiting",
                "task.settled",
                "turn.completed",
                "session.waiting"
            ]
        ),
        [
            "message.completed",
            "turn.waiting:tasks",
            "task.settled:completed",
            "message.completed",
            "turn.completed",
            "session.waiting"
        ]
    );
    let turns: Vec<&Value> = of_kind(&followed, "turn.started");
    assert_eq!(turns.len(), 1, "one turn");
    assert_eq!(task_results(&server, &id).await.len(), 1);
    let done = of_kind(&followed, "message.completed");
    assert_eq!(done[1]["data"]["message"], json!("It says 42."));
    server.stop().await;
}

#[tokio::test]
async fn a_task_past_its_time_limit_settles_timed_out() {
    let agent = AgentDir::new();
    subagent(&agent, "", "slowpoke", "limits:\n  max_turn_seconds: 1\n");
    let server = serve(
        agent,
        json!({
            "*": [call("slowpoke", "c1", json!({"message": "take your time"})),
                  {"text": "waiting"},
                  {"text": "it timed out"}],
            "slowpoke": [{"text": "never in time", "delay_ms": 4000}]
        }),
    )
    .await;
    let id = server.create("go").await;
    let events = until_turn_ends(&server, &id).await;
    let settled = of_kind(&events, "task.settled");
    assert_eq!(settled.len(), 1, "{:?}", kinds(&events));
    assert_eq!(settled[0]["data"]["status"], json!("failed"));
    assert_eq!(settled[0]["data"]["error"]["code"], json!("timed_out"));
    let results = task_results(&server, &id).await;
    assert_eq!(results.len(), 1);
    assert!(
        results[0].starts_with(&format!(
            "<task_result id=\"{id}:c1\" tool=\"slowpoke\" status=\"failed\">The task timed out"
        )),
        "{results:?}"
    );
    assert!(kinds(&events).contains(&"turn.completed".to_owned()));
    server.stop().await;
}

#[tokio::test]
async fn a_childs_own_task_result_reaches_the_root_through_the_child() {
    let agent = AgentDir::new();
    subagent(&agent, "", "lead", "");
    subagent(&agent, "subagents/lead/", "digger", "");
    let server = serve(
        agent,
        json!({
            "*": [call("lead", "c1", json!({"message": "dig"})),
                  {"text": "the lead is on it"},
                  {"text": "done"}],
            "lead": [call("digger", "d1", json!({"message": "dig deeper"})),
                     {"text": "asked the digger"},
                     {"text": "the digger found gold"}],
            "digger": [{"text": "gold", "delay_ms": 50}]
        }),
    )
    .await;
    let id = server.create("go").await;
    let events = until_turn_ends(&server, &id).await;
    let settled = of_kind(&events, "task.settled");
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0]["data"]["output"], json!("the digger found gold"));
    let lead = children(&server, &id).await.pop().unwrap();
    let lead_events = server.all(&lead).await;
    assert_eq!(
        picked(
            &lead_events,
            &[
                "task.started",
                "turn.waiting",
                "task.settled",
                "turn.completed"
            ]
        ),
        [
            "task.started",
            "turn.waiting:tasks",
            "task.settled:completed",
            "turn.completed"
        ]
    );
    assert_eq!(
        task_results(&server, &lead).await,
        [format!(
            "<task_result id=\"{lead}:d1\" tool=\"digger\" status=\"completed\">gold</task_result>"
        )]
    );
    server.stop().await;
}

#[tokio::test]
async fn cancelling_the_turn_cancels_its_tasks_and_the_session_keeps_working() {
    let agent = AgentDir::new();
    subagent(&agent, "", "lead", "");
    subagent(&agent, "subagents/lead/", "digger", "");
    let server = serve(
        agent,
        json!({
            "*": [call("lead", "c1", json!({"message": "dig"})),
                  {"text": "the lead is on it"},
                  {"text": "a new turn"}],
            "lead": [call("digger", "d1", json!({"message": "dig deeper"})),
                     {"text": "asked the digger"}],
            "digger": [{"text": "gold, much later", "delay_ms": 20000}]
        }),
    )
    .await;
    let id = server.create("go").await;
    // Wait until the grandchild works, then cancel the root's turn.
    let mut digger = None;
    for _ in 0..100 {
        if let Some(lead) = children(&server, &id).await.pop()
            && let Some(d) = children(&server, &lead).await.pop()
        {
            digger = Some((lead, d));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (lead, digger) = digger.expect("the grandchild never started");
    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}/cancel"), json!({}))
        .await;
    assert!(status < 300, "{status} {body}");
    let events = until_turn_ends(&server, &id).await;
    let settled = of_kind(&events, "task.settled");
    assert_eq!(settled.len(), 1, "{:?}", kinds(&events));
    assert_eq!(settled[0]["data"]["status"], json!("cancelled"));
    assert_eq!(
        settled[0]["data"]["cancel"],
        json!({"reason": "turn_cancelled"})
    );
    assert!(kinds(&events).contains(&"turn.cancelled".to_owned()));
    // The cascade: the child's turn and the grandchild's were cancelled too.
    for session in [&lead, &digger] {
        let own = until_turn_ends(&server, session).await;
        assert!(
            kinds(&own).contains(&"turn.cancelled".to_owned()),
            "{session}: {:?}",
            kinds(&own)
        );
    }
    assert!(
        task_results(&server, &id).await.is_empty(),
        "a cancelled task reports nothing"
    );
    // The session keeps working: a new message is a new turn that completes.
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "again"}),
        )
        .await;
    assert_eq!(status, 202);
    let mut ok = false;
    for _ in 0..100 {
        let events = server.all(&id).await;
        if of_kind(&events, "turn.completed").len() == 1 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "{:?}", kinds(&server.all(&id).await));
    server.stop().await;
}

#[tokio::test]
async fn the_task_limit_and_unknown_ids_are_coded_refusals() {
    let agent = AgentDir::new();
    subagent(&agent, "", "researcher", "");
    let many: Vec<Value> = (0..33)
        .map(|i| json!({"name": "researcher", "id": format!("c{i}"), "input": {"message": "hi"}}))
        .collect();
    let server = serve(
        agent,
        json!({
            "*": [{"tool_calls": many},
                  call("researcher", "bad", json!({"message": "hi", "task_id": "nope"})),
                  call("task_cancel", "cx", json!({"taskId": "nope"})),
                  call("task_wait", "w", json!({})),
                  {"text": "done"}],
            "researcher": [{"text": "ok"}]
        }),
    )
    .await;
    let id = server.create("go").await;
    let events = until_turn_ends(&server, &id).await;
    let calls = server.runtime.store().tool_calls(&id, 0).await.unwrap();
    let refused: Vec<&Value> = calls
        .iter()
        .filter_map(|c| c.output.as_ref())
        .filter(|o| o["code"] == "TOO_MANY_TASKS")
        .collect();
    assert_eq!(refused.len(), 1, "one of 33 calls is refused");
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("32 tasks are already working")
    );
    assert_eq!(of_kind(&events, "task.started").len(), 32);
    assert_eq!(children(&server, &id).await.len(), 32);
    let output = |call_id: &str| {
        calls
            .iter()
            .find(|c| c.call_id == call_id)
            .and_then(|c| c.output.clone())
            .unwrap()
    };
    assert_eq!(output("bad")["code"], json!("UNKNOWN_TASK"));
    assert_eq!(output("cx")["code"], json!("UNKNOWN_TASK"));
    assert!(kinds(&events).contains(&"turn.completed".to_owned()));
    // Every result arrived, once.
    let delivered: usize = task_results(&server, &id)
        .await
        .iter()
        .map(|t| t.matches("<task_result ").count())
        .sum();
    assert_eq!(delivered, 32);
    server.stop().await;
}

#[tokio::test]
async fn calling_a_task_again_by_its_id_continues_the_same_child() {
    let agent = AgentDir::new();
    subagent(&agent, "", "researcher", "");
    let server = serve(
        agent,
        json!({
            "*": [call("researcher", "c1", json!({"message": "first"})),
                  call("task_wait", "w1", json!({})),
                  call("researcher", "c2", json!({"message": "second", "task_id": "{{last_task_id}}"})),
                  call("task_wait", "w2", json!({})),
                  {"text": "both"}],
            "researcher": [{"text": "one"}, {"text": "two"}]
        }),
    )
    .await;
    let id = server.create("go").await;
    let events = until_turn_ends(&server, &id).await;
    assert_eq!(children(&server, &id).await.len(), 1, "no new child");
    assert_eq!(of_kind(&events, "agent.started").len(), 1);
    assert_eq!(of_kind(&events, "task.started").len(), 2);
    let results = task_results(&server, &id).await;
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[1].contains(&format!("id=\"{id}:c1\"")) && results[1].contains(">two<"));
    server.stop().await;
}

#[tokio::test]
async fn a_turn_that_ends_early_ends_its_tasks_down_the_tree_and_the_session_resets() {
    let agent = AgentDir::new();
    agent.file(
        "agent.yaml",
        "default_tools: false\nlimits:\n  max_steps_per_turn: 2\n",
    );
    subagent(&agent, "", "lead", "");
    subagent(&agent, "subagents/lead/", "digger", "");
    let server = serve(
        agent,
        json!({
            "*": [call("lead", "c1", json!({"message": "dig"})),
                  {"text": "the lead is on it", "delay_ms": 300}],
            "lead": [call("digger", "d1", json!({"message": "dig deeper"})),
                     {"text": "asked the digger"}],
            "digger": [{"text": "gold, much later", "delay_ms": 20000}]
        }),
    )
    .await;
    let id = server.create("go").await;
    let events = until_turn_ends(&server, &id).await;
    // The third step is past the turn's limit: the turn fails, and its task ends with it.
    assert!(
        kinds(&events).contains(&"turn.failed".to_owned()),
        "{:?}",
        kinds(&events)
    );
    let settled = of_kind(&events, "task.settled");
    assert_eq!(settled.len(), 1, "{:?}", kinds(&events));
    assert_eq!(settled[0]["data"]["status"], json!("cancelled"));
    assert_eq!(
        settled[0]["data"]["cancel"],
        json!({"reason": "turn_ended"})
    );
    // Down the tree: the child's turn was cancelled, and so was the grandchild's (or it never
    // started one).
    let lead = children(&server, &id).await.pop().expect("the child");
    let lead_events = until_turn_ends(&server, &lead).await;
    assert!(
        kinds(&lead_events).contains(&"turn.cancelled".to_owned()),
        "{:?}",
        kinds(&lead_events)
    );
    for digger in children(&server, &lead).await {
        let own = until_turn_ends(&server, &digger).await;
        assert!(
            kinds(&own).contains(&"turn.cancelled".to_owned()),
            "{:?}",
            kinds(&own)
        );
    }
    // Nothing works any more: the session resets.
    let (status, body) = server
        .post(&format!("/eve/v1/session/{id}/reset"), json!({}))
        .await;
    assert!(status < 300, "{status} {body}");
    server.stop().await;
}
