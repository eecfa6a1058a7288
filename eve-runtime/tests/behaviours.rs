//! Agent behaviours with a scripted model: phased budgets (`limits.phases`), the hollow-answer
//! check, lean context (the automatic catalogue of a 200-tool agent, cache reads per turn), and
//! the `plan` and `reflect` strategies.
//!
//! Slightly over 800 lines on purpose: the behaviours share one scripted model and its helpers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_compile::{Approval, Critic, Effect, LeanContext, Phase, Phases, Strategy, Tool};
use eve_runtime::engine::{DriveOutcome, Runtime};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::model::{
    FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse,
    ToolCall, Usage,
};
use eve_runtime::store::{CallStatus, StoredEvent};
use serde_json::{Value, json};

use crate::engine_support::*;

/// A scripted model keeping every request the runtime sent; requests whose system prompt holds
/// `CRITIC` go to the critic's script.
struct Recording {
    main: MockClient,
    critic: Option<MockClient>,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
    critic_requests: Arc<Mutex<Vec<ModelRequest>>>,
}

#[async_trait::async_trait]
impl ModelClient for Recording {
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        if let Some(critic) = &self.critic
            && request.system.contains("CRITIC")
        {
            self.critic_requests.lock().unwrap().push(request.clone());
            return critic.stream(request, on_event).await;
        }
        self.requests.lock().unwrap().push(request.clone());
        self.main.stream(request, on_event).await
    }

    async fn context_window(&self, _model: &str) -> Option<u64> {
        None
    }
}

struct Recorded {
    rt: Runtime,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
    critic_requests: Arc<Mutex<Vec<ModelRequest>>>,
}

fn recording(p: &TestProject, steps: Value, critic: Option<Value>) -> Recorded {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let critic_requests = Arc::new(Mutex::new(Vec::new()));
    let client = Recording {
        main: MockClient::from_steps(load_script(&steps.to_string()).unwrap()),
        critic: critic.map(|c| MockClient::from_steps(load_script(&c.to_string()).unwrap())),
        requests: requests.clone(),
        critic_requests: critic_requests.clone(),
    };
    Recorded {
        rt: p.runtime_on(Arc::new(client), None),
        requests,
        critic_requests,
    }
}

fn call(name: &str, input: Value) -> Value {
    json!({"tool_calls": [{"name": name, "input": input}]})
}

fn of_kind<'a>(events: &'a [StoredEvent], kind: &str) -> Vec<&'a StoredEvent> {
    events.iter().filter(|e| e.kind == kind).collect()
}

fn tool_names(request: &ModelRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
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

// ---- limits.phases ----

#[tokio::test]
async fn an_explore_tool_is_offered_early_and_withdrawn_when_the_turn_converges() {
    let p = TestProject::new();
    let mut a = agent();
    let mut probe = script_tool("probe", Effect::Read, Approval::Never);
    probe.phase = Some(Phase::Explore);
    a.tools.push(probe);
    a.tools
        .push(script_tool("finish", Effect::Write, Approval::Never));
    a.config.limits.max_steps_per_turn = 4;
    a.config.limits.phases = Some(Phases {
        explore: 0.25,
        execute: 0.25,
        converge: 0.5,
        explore_tools: Vec::new(),
    });
    p.write_build(
        &a,
        &[logging_script("probe", ""), logging_script("finish", "")],
    );
    // Steps 0 (explore) and 1 (execute) may probe; steps 2 and 3 converge: a probe there is
    // refused without running.
    let r = recording(
        &p,
        json!([
            call("probe", json!({})),
            call("probe", json!({})),
            call("probe", json!({})),
            {"text": "done"}
        ]),
        None,
    );
    let (id, outcome) = run_prompt(&r.rt, "look around, then finish").await;
    assert_eq!(outcome, DriveOutcome::Idle);

    let requests = r.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    assert_eq!(tool_names(&requests[0]), ["probe", "finish"]);
    assert_eq!(tool_names(&requests[1]), ["probe", "finish"]);
    for late in &requests[2..] {
        assert_eq!(tool_names(late), ["finish"], "probe is withdrawn");
        assert!(
            late.system
                .contains("the exploration tools (`probe`) are withdrawn"),
            "{}",
            late.system
        );
    }
    assert!(!requests[1].system.contains("withdrawn"));

    let calls = r.rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[1].status, CallStatus::Completed);
    assert_eq!(calls[2].status, CallStatus::Failed);
    assert!(
        calls[2]
            .output
            .as_ref()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("withdrawn"),
        "{:?}",
        calls[2].output
    );
    let ran = p
        .side_lines()
        .iter()
        .filter(|l| l.starts_with("start probe"))
        .count();
    assert_eq!(ran, 2, "the refused probe did not run");

    let events = all_events(&r.rt, &id).await;
    let changes: Vec<(Value, Value, Value)> = of_kind(&events, "phase.changed")
        .iter()
        .map(|e| {
            (
                e.data["stepIndex"].clone(),
                e.data["from"].clone(),
                e.data["to"].clone(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            (json!(0), Value::Null, json!("explore")),
            (json!(1), json!("explore"), json!("execute")),
            (json!(2), json!("execute"), json!("converge")),
        ]
    );
    let converge = of_kind(&events, "phase.changed")[2];
    assert_eq!(converge.data["withdrawn"], json!(["probe"]));
}

// ---- hollow_check ----

fn hollow_agent() -> (eve_compile::Agent, Vec<(String, String)>) {
    let mut a = agent();
    a.config.hollow_check = true;
    a.tools
        .push(script_tool("lookup", Effect::Read, Approval::Never));
    a.tools
        .push(script_tool("send", Effect::Write, Approval::Never));
    (
        a,
        vec![logging_script("lookup", ""), logging_script("send", "")],
    )
}

#[tokio::test]
async fn an_english_claim_no_call_made_gets_one_nudge() {
    let p = TestProject::new();
    let (a, files) = hollow_agent();
    p.write_build(&a, &files);
    let r = recording(
        &p,
        json!([
            call("lookup", json!({"who": "ana"})),
            {"text": "I sent the email to Ana."},
            {"text": "I have not sent anything yet: I only looked Ana up."}
        ]),
        None,
    );
    let (id, outcome) = run_prompt(&r.rt, "email ana").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let requests = r.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    let nudge = last_user(&requests[2]);
    assert!(nudge.starts_with("[eve hollow-answer check]"), "{nudge}");
    assert!(
        nudge.contains("`sent`") && nudge.contains("`lookup`"),
        "{nudge}"
    );

    let events = all_events(&r.rt, &id).await;
    let hollow = of_kind(&events, "answer.hollow");
    assert_eq!(hollow.len(), 1);
    assert_eq!(hollow[0].data["claims"], json!(["sent"]));
    assert_eq!(of_kind(&events, "turn.completed").len(), 1);
}

#[tokio::test]
async fn a_chinese_claim_gets_one_nudge_and_never_a_second() {
    let p = TestProject::new();
    let (a, files) = hollow_agent();
    p.write_build(&a, &files);
    let r = recording(
        &p,
        json!([
            {"text": "我已发送邮件给安娜。"},
            {"text": "邮件已发送。"}
        ]),
        None,
    );
    let (id, outcome) = run_prompt(&r.rt, "给安娜发邮件").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let requests = r.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "one nudge, then the turn ends");
    let nudge = last_user(&requests[1]);
    assert!(nudge.contains("`已发送`"), "{nudge}");
    assert!(nudge.contains("no tool was called"), "{nudge}");
    let events = all_events(&r.rt, &id).await;
    assert_eq!(of_kind(&events, "answer.hollow").len(), 1);
    assert_eq!(of_kind(&events, "turn.completed").len(), 1);
}

#[tokio::test]
async fn a_truthful_answer_gets_no_nudge() {
    let p = TestProject::new();
    let (a, files) = hollow_agent();
    p.write_build(&a, &files);
    let r = recording(
        &p,
        json!([
            call("send", json!({"to": "ana"})),
            {"text": "I sent the email to Ana. 已发送。"}
        ]),
        None,
    );
    let (id, _) = run_prompt(&r.rt, "email ana").await;
    assert_eq!(r.requests.lock().unwrap().len(), 2);
    let events = all_events(&r.rt, &id).await;
    assert!(of_kind(&events, "answer.hollow").is_empty());
}

#[tokio::test]
async fn without_hollow_check_a_claim_passes() {
    let p = TestProject::new();
    let (mut a, files) = hollow_agent();
    a.config.hollow_check = false;
    p.write_build(&a, &files);
    let r = recording(&p, json!([{"text": "I sent it."}]), None);
    run_prompt(&r.rt, "email ana").await;
    assert_eq!(r.requests.lock().unwrap().len(), 1);
}

// ---- lean context ----

fn many_tools(n: usize) -> (eve_compile::Agent, Vec<(String, String)>) {
    let mut a = agent();
    let mut files = Vec::new();
    for i in 0..n {
        let name = format!("kind_{i:03}");
        let mut tool: Tool = script_tool(&name, Effect::Read, Approval::Never);
        tool.description = format!("Look up records of kind {i:03} matching a query.");
        tool.input_schema = json!({
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to match."},
                           "limit": {"type": "integer"}},
            "required": ["query"]
        });
        a.tools.push(tool);
        files.push(logging_script(&name, ""));
    }
    (a, files)
}

#[tokio::test]
async fn a_200_tool_agent_sends_the_catalogue_and_a_deferred_tool_still_runs() {
    let p = TestProject::new();
    let (a, files) = many_tools(200);
    p.write_build(&a, &files);
    let r = recording(
        &p,
        json!([
            call("search_tools", json!({"query": "kind 150"})),
            call("call_tool", json!({"name": "kind_150", "input": {"query": "x"}})),
            {"text": "found it"}
        ]),
        None,
    );
    let (id, outcome) = run_prompt(&r.rt, "records of kind 150").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let requests = r.requests.lock().unwrap().clone();
    let first = &requests[0];
    let keep = LeanContext::default().keep_inline as usize;
    assert_eq!(first.tools.len(), keep + 2, "{:?}", tool_names(first));
    assert!(tool_names(first).contains(&"search_tools".to_owned()));
    assert!(tool_names(first).contains(&"call_tool".to_owned()));
    assert!(
        first.system.contains("This agent has 200 tools"),
        "{}",
        first.system
    );
    let body = serde_json::to_string(&first.tools).unwrap();
    assert!(
        !body.contains("kind_150"),
        "the deferred schema is not sent"
    );

    let calls = r.rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Completed);
    let found = calls[0].output.as_ref().unwrap().to_string();
    assert!(found.contains("kind_150"), "{found}");
    assert_eq!(
        calls[1].status,
        CallStatus::Completed,
        "{:?}",
        calls[1].output
    );
    assert!(
        p.side_lines()
            .iter()
            .any(|l| l.starts_with("start kind_150 ")),
        "{:?}",
        p.side_lines()
    );
    // Once used, the tool is among the most used and is offered inline.
    assert!(tool_names(&requests[2]).contains(&"kind_150".to_owned()));
    assert_eq!(requests[2].tools.len(), keep + 2);
}

#[tokio::test]
async fn few_tools_are_all_offered_inline() {
    let p = TestProject::new();
    let (a, files) = many_tools(30);
    p.write_build(&a, &files);
    let r = recording(&p, json!([{"text": "ok"}]), None);
    run_prompt(&r.rt, "hi").await;
    let requests = r.requests.lock().unwrap().clone();
    assert_eq!(requests[0].tools.len(), 30);
    assert!(!requests[0].system.contains("Tool catalogue"));
}

#[tokio::test]
async fn old_long_outputs_are_cut_and_repeated_calls_fold_in_what_is_sent() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("dump", Effect::Read, Approval::Never));
    let dump = (
        "tools/dump.sh".to_owned(),
        "cat >/dev/null\ni=1\nwhile [ $i -le 100 ]; do echo \"row $i\"; i=$((i+1)); done\n"
            .to_owned(),
    );
    p.write_build(&a, &[dump]);
    let r = recording(
        &p,
        json!([
            call("dump", json!({"part": 1})),
            {"text": "first"},
            call("dump", json!({"part": 2})),
            call("dump", json!({"part": 2})),
            {"text": "second"}
        ]),
        None,
    );
    let id = r.rt.create_session(Some("dump 1".into())).await.unwrap();
    r.rt.drive(&id).await.unwrap();
    r.rt.post_message(&id, "dump 2").await.unwrap();
    r.rt.drive(&id).await.unwrap();
    let requests = r.requests.lock().unwrap().clone();
    let last = requests.last().unwrap();
    let outputs: Vec<&str> = last
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(outputs.len(), 3);
    assert!(outputs[0].contains("[61 lines cut]"), "{}", outputs[0]);
    assert_eq!(outputs[0].lines().count(), 40);
    assert!(
        outputs[1].starts_with("[the same `dump` call was made again later"),
        "{}",
        outputs[1]
    );
    assert_eq!(
        outputs[2].lines().count(),
        100,
        "this turn's output is whole"
    );
    // The journal keeps every output whole.
    let calls = r.rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(
        calls[0]
            .output
            .as_ref()
            .unwrap()
            .as_str()
            .unwrap()
            .lines()
            .count(),
        100
    );
}

#[tokio::test]
async fn cache_reads_are_reported_per_turn() {
    let p = TestProject::new();
    p.write_build(&agent(), &[]);
    let r = recording(
        &p,
        json!([
            {"text": "one", "usage": {"input_tokens": 100, "output_tokens": 5, "cache_read_tokens": 80}},
        ]),
        None,
    );
    let (id, _) = run_prompt(&r.rt, "hi").await;
    let events = all_events(&r.rt, &id).await;
    let done = of_kind(&events, "turn.completed");
    assert_eq!(done[0].data["usage"]["cacheReadTokens"], 80);
    assert_eq!(done[0].data["usage"]["inputTokens"], 100);
}

// ---- strategy: reflect ----

fn reflect_agent(max_rounds: u32) -> eve_compile::Agent {
    let mut a = agent();
    a.config.strategy = Strategy::Reflect;
    a.config.critic = Some(Critic {
        model: None,
        instructions: "You are the CRITIC: check the capital cities.".into(),
        max_rounds,
    });
    a
}

#[tokio::test]
async fn reflect_sends_an_answer_back_once_then_accepts() {
    let p = TestProject::new();
    p.write_build(&reflect_agent(2), &[]);
    let r = recording(
        &p,
        json!([{"text": "The capital of Australia is Sydney."},
               {"text": "The capital of Australia is Canberra."}]),
        Some(json!([{"text": "REVISE\nSydney is not the capital."}, {"text": "ACCEPT"}])),
    );
    let (id, outcome) = run_prompt(&r.rt, "capital of Australia?").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let requests = r.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let back = last_user(&requests[1]);
    assert!(back.contains("Sydney is not the capital."), "{back}");
    let critic = r.critic_requests.lock().unwrap().clone();
    assert_eq!(critic.len(), 2);
    assert!(
        last_user(&critic[0]).contains("Sydney."),
        "{}",
        last_user(&critic[0])
    );
    assert!(last_user(&critic[1]).contains("Canberra."));
    assert_eq!(
        critic[1].messages.len(),
        3,
        "the critic sees its earlier round"
    );

    let events = all_events(&r.rt, &id).await;
    let rounds: Vec<(Value, Value)> = of_kind(&events, "reflect.round")
        .iter()
        .map(|e| (e.data["round"].clone(), e.data["verdict"].clone()))
        .collect();
    assert_eq!(
        rounds,
        [(json!(1), json!("revise")), (json!(2), json!("accept"))]
    );
    let done = of_kind(&events, "reflect.completed");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].data["accepted"], true);
    assert_eq!(
        done[0].data["answer"],
        "The capital of Australia is Canberra."
    );
}

#[tokio::test]
async fn reflect_respects_max_rounds() {
    let p = TestProject::new();
    p.write_build(&reflect_agent(2), &[]);
    let r = recording(
        &p,
        json!([{"text": "draft 1"}, {"text": "draft 2"}, {"text": "draft 3"}, {"text": "draft 4"}]),
        Some(json!([{"text": "no"}, {"text": "still no"}, {"text": "never"}])),
    );
    let (id, _) = run_prompt(&r.rt, "write it").await;
    assert_eq!(
        r.requests.lock().unwrap().len(),
        3,
        "two send-backs, then final"
    );
    assert_eq!(r.critic_requests.lock().unwrap().len(), 2);
    let events = all_events(&r.rt, &id).await;
    assert_eq!(of_kind(&events, "reflect.round").len(), 2);
    let done = of_kind(&events, "reflect.completed");
    assert_eq!(done[0].data["accepted"], false);
    assert_eq!(done[0].data["rounds"], 2);
    assert_eq!(done[0].data["answer"], "draft 3");
    assert_eq!(of_kind(&events, "turn.completed").len(), 1);
}

// ---- strategy: plan ----

/// The model of a plan turn: plans a 4-step DAG (`a`; `b` and `c` after `a`; `d` after both),
/// answers each step (the `b` and `c` calls must be in flight together), then synthesises.
struct Planner {
    requests: Arc<Mutex<Vec<ModelRequest>>>,
    in_flight: Arc<Mutex<Vec<String>>>,
    overlapped: Arc<Mutex<bool>>,
    fail_first_c: bool,
}

fn reply(text: String, calls: Vec<ToolCall>) -> ModelResponse {
    ModelResponse {
        finish_reason: if calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        },
        content: text,
        reasoning: None,
        tool_calls: calls,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 0,
            estimated: false,
        },
    }
}

#[async_trait::async_trait]
impl ModelClient for Planner {
    async fn stream(
        &self,
        request: &ModelRequest,
        _on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        if request.tools.iter().any(|t| t.name == "submit_plan") {
            return Ok(reply(
                String::new(),
                vec![ToolCall {
                    id: "plan_call".into(),
                    name: "submit_plan".into(),
                    input: json!({"steps": [
                        {"id": "a", "description": "fetch"},
                        {"id": "b", "description": "left", "depends_on": ["a"]},
                        {"id": "c", "description": "right", "depends_on": ["a"]},
                        {"id": "d", "description": "join", "depends_on": ["b", "c"]}
                    ]}),
                }],
            ));
        }
        let first = request
            .messages
            .iter()
            .find_map(|m| match m {
                Message::User { content, .. } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        if let Some(rest) = first.split("Your step (`").nth(1) {
            let id = rest.split('`').next().unwrap_or_default().to_owned();
            if id == "c" && self.fail_first_c && !first.contains("An earlier attempt") {
                return Err(ModelError::Transport("step c broke".into()));
            }
            if (id == "b" || id == "c") && !self.fail_first_c {
                self.in_flight.lock().unwrap().push(id.clone());
                // Both parallel steps are in flight at once, or this times out.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while tokio::time::Instant::now() < deadline {
                    if self.in_flight.lock().unwrap().len() >= 2 {
                        *self.overlapped.lock().unwrap() = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            return Ok(reply(format!("result {id}"), Vec::new()));
        }
        let results: Vec<String> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { name, content, .. } if name == "plan_step" => {
                    let v: Value = serde_json::from_str(content).unwrap_or(Value::Null);
                    v["answer"].as_str().map(str::to_owned)
                }
                _ => None,
            })
            .collect();
        Ok(reply(format!("final: {}", results.join(", ")), Vec::new()))
    }

    async fn context_window(&self, _model: &str) -> Option<u64> {
        None
    }
}

/// The requests a model got.
type Requests = Arc<Mutex<Vec<ModelRequest>>>;

fn planner(p: &TestProject, fail_first_c: bool) -> (Runtime, Requests, Arc<Mutex<bool>>) {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let overlapped = Arc::new(Mutex::new(false));
    let client = Planner {
        requests: requests.clone(),
        in_flight: Arc::new(Mutex::new(Vec::new())),
        overlapped: overlapped.clone(),
        fail_first_c,
    };
    (p.runtime_on(Arc::new(client), None), requests, overlapped)
}

fn plan_agent() -> eve_compile::Agent {
    let mut a = agent();
    a.config.strategy = Strategy::Plan;
    a
}

#[tokio::test]
async fn plan_runs_a_dag_with_parallel_steps_and_one_synthesis() {
    let p = TestProject::new();
    p.write_build(&plan_agent(), &[]);
    let (rt, requests, overlapped) = planner(&p, false);
    let (id, outcome) = run_prompt(&rt, "do the four things").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    assert!(*overlapped.lock().unwrap(), "b and c ran at the same time");

    let events = all_events(&rt, &id).await;
    let created = of_kind(&events, "plan.created");
    assert_eq!(created.len(), 1);
    assert_eq!(
        created[0].data["plan"]["steps"][3]["depends_on"],
        json!(["b", "c"])
    );
    // Waves: [a], [b, c], [d].
    let waves: Vec<Vec<String>> = of_kind(&events, "actions.requested")
        .iter()
        .map(|e| {
            e.data["actions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["toolName"] == "plan_step")
                .map(|a| a["input"]["step"].as_str().unwrap().to_owned())
                .collect()
        })
        .filter(|w: &Vec<String>| !w.is_empty())
        .collect();
    assert_eq!(waves, [vec!["a"], vec!["b", "c"], vec!["d"]]);
    let answers = of_kind(&events, "message.completed");
    assert_eq!(answers.len(), 1, "one synthesis");
    // `b` and `c` ran at once: their results are in the order they finished.
    let answer = answers[0].data["message"].as_str().unwrap();
    assert!(
        [
            "final: result a, result b, result c, result d",
            "final: result a, result c, result b, result d"
        ]
        .contains(&answer),
        "{answer}"
    );

    // Each step ran in its own child session; `d` saw the results of `b` and `c`.
    let children = rt.store().sessions(&Default::default()).await.unwrap();
    assert_eq!(
        children
            .iter()
            .filter(|s| s.parent_id.as_deref() == Some(id.as_str()))
            .count(),
        4
    );
    let requests = requests.lock().unwrap().clone();
    let d = requests
        .iter()
        .find(|r| last_user(r).contains("Your step (`d`)"))
        .unwrap();
    assert!(last_user(d).contains("- `b`: result b") && last_user(d).contains("- `c`: result c"));
    // The synthesis step is offered no tools.
    assert!(requests.last().unwrap().tools.is_empty());
}

#[tokio::test]
async fn plan_retries_a_failed_step_once() {
    let p = TestProject::new();
    p.write_build(&plan_agent(), &[]);
    let (rt, _, _) = planner(&p, true);
    let (id, outcome) = run_prompt(&rt, "do the four things").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    let c: Vec<CallStatus> = calls
        .iter()
        .filter(|c| c.input["step"] == "c")
        .map(|c| c.status)
        .collect();
    assert_eq!(c, [CallStatus::Failed, CallStatus::Completed]);
    let events = all_events(&rt, &id).await;
    let answers = of_kind(&events, "message.completed");
    // `b` and `c` ran at once: their results are in the order they finished.
    let answer = answers[0].data["message"].as_str().unwrap();
    assert!(
        [
            "final: result a, result b, result c, result d",
            "final: result a, result c, result b, result d"
        ]
        .contains(&answer),
        "{answer}"
    );
}

#[tokio::test]
async fn an_invalid_plan_is_rejected_and_the_model_plans_again() {
    let p = TestProject::new();
    p.write_build(&plan_agent(), &[]);
    let r = recording(
        &p,
        json!([
            call(
                "submit_plan",
                json!({"steps": [
                {"id": "a", "description": "A", "depends_on": ["b"]},
                {"id": "b", "description": "B", "depends_on": ["a"]}]})
            ),
            call(
                "submit_plan",
                json!({"steps": [{"id": "a", "description": "A", "depends_on": ["a"]}]})
            ),
        ]),
        None,
    );
    let (id, _) = run_prompt(&r.rt, "plan badly").await;
    let events = all_events(&r.rt, &id).await;
    assert_eq!(of_kind(&events, "plan.rejected").len(), 2);
    let failed = of_kind(&events, "turn.failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].data["error"]["code"], "plan_failed");
    let requests = r.requests.lock().unwrap().clone();
    assert_eq!(tool_names(&requests[0]), ["submit_plan"]);
    assert!(
        last_tool_text(&requests[1]).contains("cycle"),
        "{}",
        last_tool_text(&requests[1])
    );
}

fn last_tool_text(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}
