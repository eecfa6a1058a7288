//! Deferred tools: named in the system prompt, not offered; `search_tools` finds them and
//! `call_tool` runs them as a direct call would (approval, validation, hooks, side effects).

use eve_compile::{Approval, Effect, Hook, Runner, Tool};
use eve_runtime::engine::{DriveOutcome, Runtime};
use eve_runtime::model::ToolSpec;
use eve_runtime::store::CallStatus;
use serde_json::{Value, json};

use crate::engine_support::*;

fn call(name: &str, input: Value) -> Value {
    json!({"tool_calls": [{"name": name, "input": input}]})
}

fn names(specs: &[ToolSpec]) -> Vec<&str> {
    specs.iter().map(|s| s.name.as_str()).collect()
}

/// `notify {to: string, text?: string}`: deferred, logs its call.
fn notify(approval: Approval) -> Tool {
    let mut tool = script_tool("notify", Effect::Write, approval);
    tool.description =
        "Send a notification to a person.\nLonger details the prompt leaves out.".into();
    tool.input_schema = json!({
        "type": "object",
        "properties": {"to": {"type": "string"}, "text": {"type": "string"}},
        "required": ["to"],
        "additionalProperties": false
    });
    tool.deferred = true;
    tool
}

/// An agent with a direct `lookup` tool and the deferred `notify`; its build's files.
fn agent_with_deferred(approval: Approval) -> (eve_compile::Agent, Vec<(String, String)>) {
    let mut a = agent();
    a.tools
        .push(script_tool("lookup", Effect::Read, Approval::Never));
    a.tools.push(notify(approval));
    let files = vec![logging_script("lookup", ""), logging_script("notify", "")];
    (a, files)
}

/// The output of the session's call `n` (in journal order), as text.
async fn output(rt: &Runtime, id: &str, n: usize) -> (CallStatus, String) {
    let calls = rt.store().tool_calls(id, 0).await.unwrap();
    let call = &calls[n];
    let text = match call.output.as_ref().unwrap() {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    (call.status, text)
}

#[tokio::test]
async fn deferred_tools_are_named_in_the_prompt_and_reached_through_the_catalogue() {
    let p = TestProject::new();
    let (a, files) = agent_with_deferred(Approval::Never);
    p.write_build(&a, &files);
    let (rt, requests) = recording_runtime(
        &p,
        json!([
            call("search_tools", json!({"query": "notification"})),
            call("call_tool", json!({"name": "notify", "input": {"to": "ana", "text": "hi"}})),
            {"text": "Sent."}
        ]),
    );
    let (id, outcome) = run_prompt(&rt, "tell ana hi").await;
    assert_eq!(outcome, DriveOutcome::Idle);

    let requests = requests.lock().unwrap().clone();
    let first = &requests[0];
    assert_eq!(
        names(&first.tools),
        ["lookup", "search_tools", "call_tool"],
        "the deferred tool is not offered; the catalogue is"
    );
    assert!(
        first
            .system
            .contains("- notify: Send a notification to a person.\n"),
        "{}",
        first.system
    );
    assert!(!first.system.contains("Longer details"), "{}", first.system);
    assert!(first.system.contains("`search_tools`") && first.system.contains("`call_tool`"));
    let search = first
        .tools
        .iter()
        .find(|t| t.name == "search_tools")
        .unwrap();
    assert!(
        !search.description.contains("MCP"),
        "{}",
        search.description
    );

    // search_tools answers with the tool's name, description and input schema.
    let (status, found) = output(&rt, &id, 0).await;
    assert_eq!(status, CallStatus::Completed);
    let found: Value = serde_json::from_str(&found).unwrap();
    assert_eq!(found["tools"][0]["name"], "notify");
    assert_eq!(
        found["tools"][0]["input_schema"], a.tools[1].input_schema,
        "{found}"
    );
    assert_eq!(found["tools"].as_array().unwrap().len(), 1, "{found}");

    // call_tool runs the script with the inner input.
    let (status, result) = output(&rt, &id, 1).await;
    assert_eq!(status, CallStatus::Completed, "{result}");
    let result: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(
        result,
        json!({"tool": "notify", "input": {"to": "ana", "text": "hi"}})
    );
    let lines = p.side_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("start notify "), "{lines:?}");
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(
        calls[1].effect, "write",
        "the named tool's effect is journaled"
    );
}

#[tokio::test]
async fn a_deferred_tool_called_by_its_own_name_still_runs() {
    let p = TestProject::new();
    let (a, files) = agent_with_deferred(Approval::Never);
    p.write_build(&a, &files);
    let (rt, _) = recording_runtime(
        &p,
        json!([call("notify", json!({"to": "bo"})), {"text": "done"}]),
    );
    let (id, _) = run_prompt(&rt, "tell bo").await;
    let (status, result) = output(&rt, &id, 0).await;
    assert_eq!(status, CallStatus::Completed, "{result}");
    assert!(result.contains("\"to\":\"bo\""), "{result}");
}

#[tokio::test]
async fn call_tool_of_an_always_approved_deferred_tool_parks_the_turn_until_approved() {
    let p = TestProject::new();
    let (a, files) = agent_with_deferred(Approval::Always);
    p.write_build(&a, &files);
    let (rt, _) = recording_runtime(
        &p,
        json!([
            call("call_tool", json!({"name": "notify", "input": {"to": "cy"}})),
            {"text": "Sent."}
        ]),
    );
    let (id, outcome) = run_prompt(&rt, "tell cy").await;
    let DriveOutcome::WaitingInput(requests) = outcome else {
        panic!("expected a wait for approval, got {outcome:?}");
    };
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].prompt, "Approve notify?");
    assert!(p.side_lines().is_empty(), "nothing runs before approval");

    rt.answer_input(&id, None, true, None).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let (status, result) = output(&rt, &id, 0).await;
    assert_eq!(status, CallStatus::Completed, "{result}");
    assert!(result.contains("\"to\":\"cy\""), "{result}");
    assert_eq!(p.side_lines().len(), 2);
}

#[tokio::test]
async fn call_tool_of_a_once_approved_deferred_tool_asks_once_per_session() {
    let p = TestProject::new();
    let (a, files) = agent_with_deferred(Approval::Once);
    p.write_build(&a, &files);
    let (rt, _) = recording_runtime(
        &p,
        json!([
            call("call_tool", json!({"name": "notify", "input": {"to": "di"}})),
            call("call_tool", json!({"name": "notify", "input": {"to": "ed"}})),
            call("notify", json!({"to": "fay"})),
            {"text": "Sent."}
        ]),
    );
    let (id, outcome) = run_prompt(&rt, "tell them").await;
    assert!(
        matches!(outcome, DriveOutcome::WaitingInput(_)),
        "{outcome:?}"
    );
    rt.answer_input(&id, None, true, None).await.unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    assert_eq!(
        p.side_lines()
            .iter()
            .filter(|l| l.starts_with("start notify"))
            .count(),
        3,
        "approved once, through call_tool or by name"
    );
}

#[tokio::test]
async fn invalid_inner_input_fails_with_the_violations_and_nothing_runs() {
    let p = TestProject::new();
    let (a, files) = agent_with_deferred(Approval::Never);
    p.write_build(&a, &files);
    let (rt, _) = recording_runtime(
        &p,
        json!([
            call("call_tool", json!({"name": "notify", "input": {"text": 5}})),
            call("call_tool", json!({"name": "nobody", "input": {}})),
            {"text": "sorry"}
        ]),
    );
    let (id, outcome) = run_prompt(&rt, "tell").await;
    assert_eq!(outcome, DriveOutcome::Idle);
    assert!(p.side_lines().is_empty());
    let (status, text) = output(&rt, &id, 0).await;
    assert_eq!(status, CallStatus::Failed);
    assert!(text.contains("Invalid input"), "{text}");
    assert!(text.contains("\"to\" is a required property"), "{text}");
    assert!(text.contains("5 is not of type \"string\""), "{text}");
    let (status, text) = output(&rt, &id, 1).await;
    assert_eq!(status, CallStatus::Failed);
    assert!(text.contains("no tool named `nobody`"), "{text}");
}

#[tokio::test]
async fn tool_before_hooks_see_the_named_tool_and_may_rewrite_its_input() {
    let p = TestProject::new();
    let (mut a, mut files) = agent_with_deferred(Approval::Never);
    a.hooks.push(Hook {
        name: "guard".to_owned(),
        source: "hooks/guard.sh".to_owned(),
        events: vec!["tool.before".to_owned()],
        timeout_ms: 5_000,
        env: vec!["SIDE_FILE".to_owned()],
        runner: Runner::Script {
            path: "hooks/guard.sh".to_owned(),
            interpreter: vec!["sh".to_owned()],
        },
    });
    files.push((
        "hooks/guard.sh".to_owned(),
        "input=$(cat)\necho \"hook $input\" >> \"$SIDE_FILE\"\n\
         echo '{\"decision\": \"allow\", \"input\": {\"to\": \"rewritten\"}}'\n"
            .to_owned(),
    ));
    p.write_build(&a, &files);
    let (rt, _) = recording_runtime(
        &p,
        json!([
            call("call_tool", json!({"name": "notify", "input": {"to": "gus"}})),
            {"text": "Sent."}
        ]),
    );
    let (id, _) = run_prompt(&rt, "tell gus").await;
    let lines = p.side_lines();
    let hook: Value = serde_json::from_str(lines[0].strip_prefix("hook ").unwrap()).unwrap();
    assert_eq!(hook["tool"], "notify");
    assert_eq!(hook["input"], json!({"to": "gus"}));
    let (status, result) = output(&rt, &id, 0).await;
    assert_eq!(status, CallStatus::Completed, "{result}");
    assert!(result.contains("\"to\":\"rewritten\""), "{result}");
    let calls = rt.store().tool_calls(&id, 0).await.unwrap();
    assert_eq!(
        calls[0].input,
        json!({"name": "notify", "input": {"to": "rewritten"}}),
        "the rewrite is journaled inside the call_tool input"
    );
}

#[tokio::test]
async fn an_agent_without_deferred_tools_or_mcp_gets_no_catalogue() {
    let p = TestProject::new();
    let mut a = agent();
    a.tools
        .push(script_tool("lookup", Effect::Read, Approval::Never));
    p.write_build(&a, &[logging_script("lookup", "")]);
    let (rt, requests) = recording_runtime(
        &p,
        json!([call("call_tool", json!({"name": "lookup"})), {"text": "ok"}]),
    );
    let (id, _) = run_prompt(&rt, "hi").await;
    let requests = requests.lock().unwrap().clone();
    assert_eq!(names(&requests[0].tools), ["lookup"]);
    assert!(!requests[0].system.contains("search_tools"));
    let (status, text) = output(&rt, &id, 0).await;
    assert_eq!(status, CallStatus::Failed);
    assert!(text.contains("no tool named `call_tool`"), "{text}");
    assert!(p.side_lines().is_empty());
}

/// A deferred skill is not listed, but `search_tools` (offered for it alone) finds it and
/// `load_skill` loads it.
#[tokio::test]
async fn deferred_skills_are_found_by_search_tools_even_when_no_tool_is_deferred() {
    let p = TestProject::new();
    let mut a = agent();
    a.skills.push(skill("review", "Check the diff twice."));
    let mut haiku = skill("haiku", "Five, seven, five.");
    haiku.description = "Write poems in haiku form.".into();
    haiku.deferred = true;
    a.skills.push(haiku);
    p.write_build(&a, &[]);
    let (rt, requests) = recording_runtime(
        &p,
        json!([
            call("search_tools", json!({"query": "poems"})),
            call("load_skill", json!({"name": "haiku"})),
            {"text": "Done."}
        ]),
    );
    let (id, outcome) = run_prompt(&rt, "a poem please").await;
    assert_eq!(outcome, DriveOutcome::Idle);

    let requests = requests.lock().unwrap().clone();
    let offered = names(&requests[0].tools);
    assert!(offered.contains(&"search_tools"), "{offered:?}");
    assert!(
        requests[0].tools[offered.iter().position(|n| *n == "search_tools").unwrap()]
            .description
            .contains("skills"),
    );
    assert!(!requests[0].system.contains("Write poems"), "not listed");
    assert!(requests[0].system.contains("1 more skill is not listed"));

    let (status, found) = output(&rt, &id, 0).await;
    assert_eq!(status, CallStatus::Completed, "{found}");
    let found: Value = serde_json::from_str(&found).unwrap();
    assert_eq!(found["tools"][0]["name"], "haiku", "{found}");
    assert_eq!(found["tools"][0]["kind"], "skill", "{found}");
    let (status, body) = output(&rt, &id, 1).await;
    assert_eq!(status, CallStatus::Completed);
    assert!(body.contains("Five, seven, five."), "{body}");
}
