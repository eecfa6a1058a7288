//! Composition through the engine: subagents (concurrent children, an approval answered on the root,
//! continuation tokens), dynamic tools that outlive their script's build, hooks (deny, fail-closed,
//! observe delivery with stable ids and redelivery), and an MCP connection's tool in a full turn.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_compile::{Agent, Approval, Effect, Hook, Runner, Tool};
use eve_runtime::engine::{
    BreakerPolicy, DriveOutcome, ModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::ModelError;
use eve_runtime::model::mock::{MockClient, Script, Step};
use eve_runtime::store::{CallStatus, SqliteStore, Store, ToolCallRecord};
use serde_json::{Value, json};

use crate::engine_support::*;

/// A mock per agent (by path, then name, then `*`), whose steps a test can set after the fact.
#[derive(Clone, Default)]
pub(crate) struct PerAgent(Arc<Mutex<BTreeMap<String, Vec<Step>>>>);

impl PerAgent {
    pub(crate) fn set(&self, key: &str, steps: Value) {
        let steps: Vec<Step> = serde_json::from_value(steps).unwrap();
        self.0.lock().unwrap().insert(key.to_owned(), steps);
    }
}

impl ModelProvider for PerAgent {
    fn resolve(&self, agent: &Agent) -> Result<ResolvedModel, ModelError> {
        let map = self.0.lock().unwrap().clone();
        Ok(ResolvedModel {
            client: Arc::new(
                MockClient::from_script(Script::PerAgent(map)).for_agent(&agent.name, &agent.path),
            ),
            model: "script".to_owned(),
            model_id: "mock/script".to_owned(),
            context_window: None,
            price_per_million: None,
        })
    }
}

pub(crate) fn runtime(p: &TestProject, models: &PerAgent) -> Runtime {
    let store = SqliteStore::open(p.state_dir.join("eve.db")).unwrap();
    let side = p.side_file.clone();
    Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(store) as Arc<dyn Store>,
        models: Arc::new(models.clone()),
        env: Arc::new(move |name: &str| match name {
            "SIDE_FILE" => Some(side.to_string_lossy().into_owned()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    })
}

fn subagent(name: &str, tools: Vec<Tool>) -> Agent {
    let mut a = agent();
    a.name = name.to_owned();
    a.path = format!("subagents/{name}");
    a.description = Some(format!("The {name} helper."));
    a.instructions = format!("You are {name}.");
    a.tools = tools;
    a
}

pub(crate) fn call(name: &str, id: &str, input: Value) -> Value {
    json!({"tool_calls": [{"name": name, "id": id, "input": input}]})
}

pub(crate) async fn root_calls(rt: &Runtime, id: &str, turn: u64) -> Vec<ToolCallRecord> {
    rt.store().tool_calls(id, turn).await.unwrap()
}

pub(crate) async fn children(rt: &Runtime, root: &str) -> Vec<String> {
    let mut out: Vec<String> = rt
        .sessions(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.parent_id.as_deref() == Some(root))
        .map(|s| s.id)
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_parent_runs_two_children_at_once_one_approved_on_the_root_then_continues_one() {
    let p = TestProject::new();
    let mut root = agent();
    let mut gate = script_tool("gate", Effect::Write, Approval::Always);
    gate.source = "subagents/beta/tools/gate.sh".into();
    gate.runner = Runner::Script {
        path: "tools/gate.sh".into(),
        interpreter: vec!["sh".into()],
    };
    root.subagents = vec![subagent("alpha", vec![]), subagent("beta", vec![gate])];
    p.write_build(&root, &[logging_script("gate", "")]);
    let models = PerAgent::default();
    let rt = runtime(&p, &models);
    let id = rt.create_session(None).await.unwrap();
    models.set(
        "",
        json!([
            {"tool_calls": [
                {"name": "alpha", "id": "call_alpha", "input": {"message": "first question"}},
                {"name": "beta", "id": "call_beta", "input": {"message": "needs the gate"}}]},
            // Both are tasks: the model answers while they work, and once per result.
            {"text": "asked both"},
            {"text": "alpha answered"},
            {"text": "both done"},
            call("alpha", "call_again", json!({"message": "second question", "task_id": format!("{id}:call_alpha")})),
            {"text": "continued"}
        ]),
    );
    models.set(
        "subagents/alpha",
        json!([{"text": "alpha answer one two three", "delay_ms": 40}, {"text": "alpha remembers"}]),
    );
    models.set(
        "beta",
        json!([call("gate", "gate_1", json!({})), {"text": "beta answer"}]),
    );
    rt.post_message(&id, "ask both").await.unwrap();

    // The child's approval parks the root; the request is on the root's stream.
    let outcome = rt.drive(&id).await.unwrap();
    let DriveOutcome::WaitingInput(requests) = outcome else {
        panic!("expected the root to wait on the child's approval, got {outcome:?}");
    };
    assert_eq!(requests.len(), 1);
    let request = requests[0].clone();
    assert_ne!(request.session_id, id, "the request belongs to the child");
    assert_eq!(request.tool_name, "gate");
    let root_events = all_events(&rt, &id).await;
    let asked = root_events
        .iter()
        .find(|e| e.kind == "input.requested")
        .expect("input.requested on the root");
    assert_eq!(asked.data["requests"][0]["requestId"], json!(request.id));
    assert!(kinds(&root_events).contains(&"turn.waiting".to_owned()));
    assert_eq!(rt.pending_inputs(&id).await.unwrap().len(), 1);
    // Both calls are tasks, settled at once with their receipts; alpha's result arrived while
    // beta waited, and the turn is parked on beta's approval.
    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].status, CallStatus::Completed, "{calls:?}");
    assert_eq!(calls[1].status, CallStatus::Completed);
    assert!(
        calls[0]
            .output
            .as_ref()
            .unwrap()
            .as_str()
            .unwrap()
            .starts_with(&format!(
                "Started task {id}:call_alpha. Its result will arrive in a <task_result> message."
            )),
        "{calls:?}"
    );
    // Alpha's child runs on its own: on a loaded machine its result may land just after the
    // root parked, so wait for it (bounded) before comparing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while task_results(&rt, &id).await.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        task_results(&rt, &id).await,
        [format!(
            "<task_result id=\"{id}:call_alpha\" tool=\"alpha\" status=\"completed\">alpha answer one two three</task_result>"
        )]
    );

    // Answered on the root, by the root's id: the answer reaches the child.
    rt.answer_input(&id, Some(&request.id), true, None)
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(
        task_results(&rt, &id).await[1],
        format!(
            "<task_result id=\"{id}:call_beta\" tool=\"beta\" status=\"completed\">beta answer</task_result>"
        )
    );
    let root_events = all_events(&rt, &id).await;
    let k = kinds(&root_events);
    assert!(k.contains(&"approval.settled".to_owned()), "{k:?}");
    assert_eq!(k.last().unwrap(), "session.waiting");
    let kids = children(&rt, &id).await;
    assert_eq!(kids.len(), 2);
    // Each child is its own session with its own stream; the gate ran once, in beta.
    for kid in &kids {
        let events = all_events(&rt, kid).await;
        assert!(kinds(&events).contains(&"turn.completed".to_owned()));
        assert_eq!(events[0].kind, "session.started");
    }
    assert_eq!(
        p.side_lines()
            .iter()
            .filter(|l| l.starts_with("done gate"))
            .count(),
        1
    );
    // The two children ran concurrently: beta's turn started before alpha's finished.
    let alpha = rt
        .sessions(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.agent_name == "alpha")
        .unwrap();
    let beta = kids.iter().find(|k| **k != alpha.id).unwrap();
    let alpha_done = all_events(&rt, &alpha.id)
        .await
        .into_iter()
        .find(|e| e.kind == "turn.completed")
        .unwrap()
        .at;
    let beta_started = all_events(&rt, beta)
        .await
        .into_iter()
        .find(|e| e.kind == "turn.started")
        .unwrap()
        .at;
    assert!(
        beta_started <= alpha_done,
        "children ran one after the other"
    );

    // The token continues the same child: same session, its second turn, with its memory.
    rt.post_message(&id, "ask alpha again").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(
        task_results(&rt, &id).await[2],
        format!(
            "<task_result id=\"{id}:call_alpha\" tool=\"alpha\" status=\"completed\">alpha remembers</task_result>"
        )
    );
    assert_eq!(children(&rt, &id).await, kids, "no new child session");
    let alpha = rt.session(&alpha.id).await.unwrap().unwrap();
    assert_eq!(alpha.turn_count, 2);
}

#[tokio::test]
async fn a_bad_task_id_is_an_error_the_model_sees() {
    let p = TestProject::new();
    let mut root = agent();
    root.subagents = vec![subagent("alpha", vec![])];
    p.write_build(&root, &[]);
    let models = PerAgent::default();
    models.set(
        "",
        json!([call("alpha", "c1", json!({"message": "hi", "task_id": "wrun_x:nope"})), {"text": "ok"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("go".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].status, CallStatus::Failed);
    let output = calls[0].output.as_ref().unwrap();
    assert_eq!(output["code"], json!("UNKNOWN_TASK"), "{calls:?}");
    assert!(
        output["message"]
            .as_str()
            .unwrap()
            .contains("another session"),
        "{calls:?}"
    );
    assert!(children(&rt, &id).await.is_empty());
}

#[tokio::test]
async fn a_child_gets_what_remains_of_the_parents_token_budget() {
    let p = TestProject::new();
    let mut root = agent();
    root.config.limits.max_tokens = Some(100);
    root.subagents = vec![subagent("alpha", vec![])];
    p.write_build(&root, &[]);
    let models = PerAgent::default();
    models.set(
        "",
        json!([{"tool_calls": [{"name": "alpha", "id": "c1", "input": {"message": "work"}}],
                "usage": {"input_tokens": 60, "output_tokens": 0}},
               {"text": "done", "usage": {"input_tokens": 1, "output_tokens": 1}}]),
    );
    // The child spends 30 per step and wants three steps: the 40 left stop it after two.
    models.set(
        "alpha",
        json!([
            {"tool_calls": [{"name": "nothing", "input": {}}], "usage": {"input_tokens": 30, "output_tokens": 0}},
            {"tool_calls": [{"name": "nothing", "input": {}}], "usage": {"input_tokens": 30, "output_tokens": 0}},
            {"text": "never", "usage": {"input_tokens": 30, "output_tokens": 0}}
        ]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("go".into())).await.unwrap();
    rt.drive(&id).await.unwrap();
    // The call is a task (its receipt); the child's turn is what the budget stopped.
    let kid = children(&rt, &id).await.pop().unwrap();
    let turn = rt.store().turn(&kid, 0).await.unwrap().unwrap();
    assert_eq!(
        turn.status,
        eve_runtime::store::TurnStatus::Failed,
        "{turn:?}"
    );
    let reason = turn.stop_reason.unwrap_or_default();
    assert!(reason.contains("max_tokens"), "{reason}");
}

/// The `<task_result>` messages of a session's history, in order.
async fn task_results(rt: &Runtime, id: &str) -> Vec<String> {
    rt.store()
        .context(id)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.body["role"] == "user")
        .filter_map(|r| r.body["content"].as_str().map(str::to_owned))
        .filter(|t| t.contains("<task_result"))
        .collect()
}

fn provider_tool(name: &str) -> (Tool, (String, String)) {
    let mut tool = script_tool(name, Effect::Read, Approval::Never);
    tool.dynamic = vec!["session.started".into(), "turn.started".into()];
    let script = "input=$(cat)\n\
        case \"$input\" in\n\
          *'\"event\"'*) echo '{\"weather\": {\"description\": \"Weather of a city.\", \"input_schema\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}' ;;\n\
          *) echo \"dyn $input\" >> \"$SIDE_FILE\"; echo '{\"temp\": 21}' ;;\n\
        esac\n";
    (tool, (format!("tools/{name}.sh"), script.to_owned()))
}

#[tokio::test]
async fn a_dynamic_tool_stays_callable_on_a_newer_build_without_its_script() {
    let p = TestProject::new();
    let mut a = agent();
    let (tool, file) = provider_tool("forecasts");
    a.tools.push(tool);
    p.write_build(&a, &[file]);
    let models = PerAgent::default();
    models.set(
        "*",
        json!([{"text": "hello"},
               call("weather", "w1", json!({"city": "Oslo"})),
               {"text": "sunny"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("hi".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let tools = rt.store().dynamic_tools(&id).await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "weather");

    // A new build without the provider; a new process resumes the session on it.
    let old_hash = tools[0].build_hash.clone();
    let mut b = agent();
    b.instructions = "Newer build, no dynamic tools.".into();
    let new_hash = p.write_build(&b, &[]);
    assert_ne!(old_hash, new_hash);
    drop(rt);
    let rt = runtime(&p, &models);
    rt.post_message(&id, "weather in Oslo?").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let session = rt.session(&id).await.unwrap().unwrap();
    assert_eq!(
        session.build_hash, new_hash,
        "the session moved to the new build"
    );
    let calls = root_calls(&rt, &id, 1).await;
    assert_eq!(calls[0].status, CallStatus::Completed, "{calls:?}");
    assert_eq!(calls[0].output, Some(json!({"temp": 21})));
    assert_eq!(
        p.side_lines(),
        [r#"dyn {"tool":"weather","input":{"city":"Oslo"}}"#]
    );
}

#[tokio::test]
async fn a_dynamic_tool_script_printing_garbage_offers_nothing_and_breaks_nothing() {
    let p = TestProject::new();
    let mut a = agent();
    let (tool, (path, _)) = provider_tool("broken");
    a.tools.push(tool);
    p.write_build(
        &a,
        &[(path, "cat > /dev/null; echo 'not json at all'\n".into())],
    );
    let models = PerAgent::default();
    models.set(
        "*",
        json!([call("weather", "w1", json!({})), {"text": "ok"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("hi".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert!(rt.store().dynamic_tools(&id).await.unwrap().is_empty());
    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].status, CallStatus::Failed);
}

fn hook(name: &str, events: &[&str]) -> Hook {
    Hook {
        name: name.to_owned(),
        source: format!("hooks/{name}.sh"),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        timeout_ms: 5_000,
        env: vec!["SIDE_FILE".to_owned()],
        runner: Runner::Script {
            path: format!("hooks/{name}.sh"),
            interpreter: vec!["sh".to_owned()],
        },
    }
}

fn hook_file(name: &str, body: &str) -> (String, String) {
    (format!("hooks/{name}.sh"), body.to_owned())
}

#[tokio::test]
async fn a_deny_hook_stops_the_call_and_the_model_sees_the_reason() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("charge", Effect::Write, Approval::Never));
    a.hooks.push(hook("guard", &["tool.before"]));
    p.write_build(
        &a,
        &[
            logging_script("charge", ""),
            hook_file(
                "guard",
                "cat > /dev/null\necho '{\"decision\": \"deny\", \"reason\": \"charges are frozen\"}'\n",
            ),
        ],
    );
    let models = PerAgent::default();
    models.set(
        "*",
        json!([call("charge", "c1", json!({})), {"text": "ok"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("charge".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].status, CallStatus::Denied);
    let text = calls[0].output.as_ref().unwrap().as_str().unwrap();
    assert!(text.contains("charges are frozen"), "{text}");
    assert!(p.side_lines().is_empty(), "the tool never ran");
    // The model saw it as the call's result.
    let context = rt.store().context(&id).await.unwrap();
    assert!(
        context
            .iter()
            .any(|m| m.body.to_string().contains("charges are frozen"))
    );
}

#[tokio::test]
async fn a_crashing_or_garbled_hook_denies_and_a_rewrite_is_validated_and_used() {
    let p = TestProject::new();
    let mut a = agent();
    let mut tool = script_tool("charge", Effect::Write, Approval::Never);
    tool.input_schema = json!({"type": "object", "properties": {"amount": {"type": "integer"}}});
    a.tools.push(tool);
    a.hooks.push(hook("guard", &["tool.before"]));
    // Crash on amount 1, garbage on 2, a schema-breaking rewrite on 3, a good rewrite on 4.
    let body = "input=$(cat)\ncase \"$input\" in\n\
        *'\"amount\":1'*) exit 7 ;;\n\
        *'\"amount\":2'*) echo 'yes please' ;;\n\
        *'\"amount\":3'*) echo '{\"decision\": \"allow\", \"input\": {\"amount\": \"lots\"}}' ;;\n\
        *) echo '{\"decision\": \"allow\", \"input\": {\"amount\": 40}}' ;;\n\
        esac\n";
    p.write_build(
        &a,
        &[logging_script("charge", ""), hook_file("guard", body)],
    );
    let models = PerAgent::default();
    models.set(
        "*",
        json!([{"tool_calls": [
            {"name": "charge", "id": "a1", "input": {"amount": 1}},
            {"name": "charge", "id": "a2", "input": {"amount": 2}},
            {"name": "charge", "id": "a3", "input": {"amount": 3}},
            {"name": "charge", "id": "a4", "input": {"amount": 4}}]},
            {"text": "ok"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("charge".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = root_calls(&rt, &id, 0).await;
    let text = |i: usize| calls[i].output.as_ref().unwrap().to_string();
    assert_eq!(calls[0].status, CallStatus::Denied);
    assert!(
        text(0).contains("fail closed") && text(0).contains("code 7"),
        "{}",
        text(0)
    );
    assert_eq!(calls[1].status, CallStatus::Denied);
    assert!(text(1).contains("did not answer"), "{}", text(1));
    assert_eq!(calls[2].status, CallStatus::Denied);
    assert!(text(2).contains("does not match the schema"), "{}", text(2));
    assert_eq!(calls[3].status, CallStatus::Completed);
    assert_eq!(
        calls[3].input,
        json!({"amount": 40}),
        "the rewrite is journaled"
    );
    assert_eq!(
        calls[3].output.as_ref().unwrap()["input"],
        json!({"amount": 40})
    );
    let ran: Vec<String> = p
        .side_lines()
        .into_iter()
        .filter(|l| l.starts_with("done"))
        .collect();
    assert_eq!(ran.len(), 1, "only the allowed call ran");
}

/// One order of gates: input validation, `tool.before` hooks, then a principal. A call the hook
/// denies is never put to a human; one it allows is asked about with the input the hook let
/// through, and runs with it after approval without the hook running a second time.
#[tokio::test]
async fn a_hook_decides_before_a_principal_is_asked() {
    let p = TestProject::new();
    let mut a = agent();
    let mut tool = script_tool("restart", Effect::Write, Approval::Always);
    tool.input_schema = json!({"type": "object", "properties": {"env": {"type": "string"}}});
    a.tools.push(tool);
    a.hooks.push(hook("guard", &["tool.before"]));
    let body = "input=$(cat)\necho \"hook $input\" >> \"$SIDE_FILE\"\n\
        case \"$input\" in\n\
        *'\"env\":\"production\"'*) echo '{\"decision\": \"deny\", \"reason\": \"production is frozen\"}' ;;\n\
        *) echo '{\"decision\": \"allow\", \"input\": {\"env\": \"staging-2\"}}' ;;\n\
        esac\n";
    p.write_build(
        &a,
        &[logging_script("restart", ""), hook_file("guard", body)],
    );
    let models = PerAgent::default();
    models.set(
        "*",
        json!([
            {"tool_calls": [{"name": "restart", "id": "r1", "input": {"env": "production"}}]},
            {"text": "not allowed"},
            {"tool_calls": [{"name": "restart", "id": "r2", "input": {"env": "staging"}}]},
            {"text": "restarted"}
        ]),
    );
    let rt = runtime(&p, &models);

    // Denied by the hook: no approval is asked, the tool never runs.
    let id = rt
        .create_session(Some("restart production".into()))
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert!(rt.pending_inputs(&id).await.unwrap().is_empty());
    let events = all_events(&rt, &id).await;
    assert!(
        !kinds(&events).contains(&"input.requested".to_owned()),
        "{:?}",
        kinds(&events)
    );
    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].status, CallStatus::Denied);
    assert!(
        calls[0]
            .output
            .as_ref()
            .unwrap()
            .to_string()
            .contains("production is frozen")
    );

    // Allowed (with a rewrite): asked about the rewritten input, run with it once approved.
    rt.post_message(&id, "restart staging").await.unwrap();
    let DriveOutcome::WaitingInput(requests) = rt.drive(&id).await.unwrap() else {
        panic!("expected an approval request");
    };
    assert_eq!(requests[0].tool_name, "restart");
    assert_eq!(
        requests[0].action["input"],
        json!({"env": "staging-2"}),
        "the principal sees the input the hook let through: {:?}",
        requests[0].action
    );
    rt.answer_input(&id, Some(&requests[0].id), true, None)
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = root_calls(&rt, &id, 1).await;
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(
        calls[0].output.as_ref().unwrap()["input"],
        json!({"env": "staging-2"})
    );
    let lines = p.side_lines();
    let hooks = lines.iter().filter(|l| l.starts_with("hook ")).count();
    let runs = lines
        .iter()
        .filter(|l| l.starts_with("done restart"))
        .count();
    assert_eq!((hooks, runs), (2, 1), "{lines:?}");
}

/// Lines an observe hook wrote: `(event id, type)`.
fn observed(p: &TestProject) -> Vec<(String, String)> {
    p.side_lines()
        .into_iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(&l).ok()?;
            Some((v["id"].as_str()?.to_owned(), v["type"].as_str()?.to_owned()))
        })
        .collect()
}

/// Waits until `ok` holds, for up to 20 s (a loaded machine runs hook processes slowly); the
/// asserts that follow say what is missing.
async fn wait_until(mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_observe_hook_sees_every_event_once_with_stable_ids_and_gets_redelivery() {
    let p = TestProject::new();
    let mut a = agent();
    a.hooks.push(hook("audit", &["*"]));
    // Acknowledges (exit 0) only once a flag file exists; logs every delivery.
    let flag = p.dir.path().join("ack");
    let body = format!(
        "input=$(cat)\nprintf '%s\\n' \"$input\" >> \"$SIDE_FILE\"\n[ -e '{}' ] || exit 1\n",
        flag.display()
    );
    p.write_build(&a, &[hook_file("audit", &body)]);
    let models = PerAgent::default();
    models.set("*", json!([{"text": "hello there"}]));
    std::fs::write(&flag, "").unwrap();
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("hi".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let events = all_events(&rt, &id).await;
    let expected: Vec<(String, String)> = events
        .iter()
        .map(|e| (e.id.clone(), e.kind.clone()))
        .collect();
    wait_until(|| observed(&p).len() >= expected.len()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(observed(&p), expected, "every event exactly once, in order");

    // Not acknowledged: the next turn's events are delivered again, by a new process, same ids.
    std::fs::remove_file(&flag).unwrap();
    std::fs::write(&p.side_file, "").unwrap();
    rt.post_message(&id, "again").await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    wait_until(|| !observed(&p).is_empty()).await;
    drop(rt);
    let first_try = observed(&p);
    assert!(!first_try.is_empty());
    std::fs::write(&flag, "").unwrap();
    let rt = runtime(&p, &models);
    rt.resume_all().await.unwrap();
    let events = all_events(&rt, &id).await;
    let turn2: Vec<(String, String)> = events
        .iter()
        .skip(expected.len())
        .map(|e| (e.id.clone(), e.kind.clone()))
        .collect();
    wait_until(|| {
        let seen = observed(&p);
        turn2.iter().all(|e| seen.contains(e))
    })
    .await;
    let seen = observed(&p);
    for event in &turn2 {
        assert!(seen.contains(event), "{event:?} was redelivered");
    }
    assert_eq!(seen[0], first_try[0], "a redelivery carries the same id");
    // After acknowledgement nothing is delivered twice more.
    let n = seen.len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(observed(&p).len(), n);
}

fn python() -> Option<String> {
    if let Ok(p) = std::env::var("EVE_TEST_PYTHON") {
        return Some(p);
    }
    let venv =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python");
    venv.exists().then(|| venv.to_string_lossy().into_owned())
}

/// A connection whose server cannot start: the model is told the connection is down and why,
/// not that the tool does not exist; a name no connection of the agent has keeps the plain answer.
#[tokio::test]
async fn a_call_to_a_connection_that_is_down_says_so() {
    let p = TestProject::new();
    let mut a = agent();
    a.connections.push(eve_compile::Connection {
        name: "notes".into(),
        source: "connections/notes.yaml".into(),
        transport: eve_compile::Transport::Stdio {
            command: "/nonexistent/notes-mcp-server".into(),
            args: Vec::new(),
            env: Default::default(),
        },
        tools: Default::default(),
        approval: Approval::Never,
        timeout_ms: 5_000,
        start_timeout_ms: None,
        oauth: None,
        credentials: Default::default(),
    });
    p.write_build(&a, &[]);
    let models = PerAgent::default();
    models.set(
        "*",
        json!([
            {"tool_calls": [
                {"name": "notes__add_note", "id": "n1", "input": {"text": "x"}},
                {"name": "nothing__here", "id": "n2", "input": {}}
            ]},
            {"text": "done"}
        ]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("note it".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = root_calls(&rt, &id, 0).await;
    let text = |i: usize| calls[i].output.as_ref().unwrap().to_string();
    assert_eq!(calls[0].status, CallStatus::Failed);
    assert!(
        text(0).contains("The MCP connection `notes` is down")
            && text(0).contains("/nonexistent/notes-mcp-server"),
        "{}",
        text(0)
    );
    assert!(
        text(1).contains("There is no tool named `nothing__here`"),
        "{}",
        text(1)
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn an_mcp_tool_is_offered_and_called_through_a_full_turn() {
    let Some(python) = python() else {
        panic!("no Python with `mcp`: run scripts/setup-test-deps.sh (or set EVE_TEST_PYTHON)");
    };
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/server.py")
        .to_string_lossy()
        .into_owned();
    let p = TestProject::new();
    let mut a = agent();
    a.connections.push(eve_compile::Connection {
        name: "srv".into(),
        source: "connections/srv.yaml".into(),
        transport: eve_compile::Transport::Stdio {
            command: python,
            args: vec![server, "stdio".into()],
            env: Default::default(),
        },
        tools: Default::default(),
        approval: Approval::Never,
        timeout_ms: 20_000,
        start_timeout_ms: None,
        oauth: None,
        credentials: Default::default(),
    });
    p.write_build(&a, &[]);
    let models = PerAgent::default();
    models.set(
        "*",
        json!([call("srv__echo", "e1", json!({"text": "over the wire"})), {"text": "done"}]),
    );
    let rt = runtime(&p, &models);
    let id = rt.create_session(Some("echo".into())).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let calls = root_calls(&rt, &id, 0).await;
    assert_eq!(calls[0].status, CallStatus::Completed, "{calls:?}");
    assert_eq!(calls[0].effect, "write");
    assert!(
        calls[0]
            .output
            .as_ref()
            .unwrap()
            .to_string()
            .contains("over the wire"),
        "{calls:?}"
    );
    // The model was offered the tool with the server's schema.
    let steps = rt.store().steps(&id, 0).await.unwrap();
    assert_eq!(steps.len(), 2);
    rt.shutdown().await;
}
