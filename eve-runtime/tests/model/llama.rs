//! End to end against a real llama.cpp server (llama-cpp-python), started by
//! `scripts/test-llama.sh`, which passes its URL in `EVE_TEST_LLAMA_URL`. Ignored in the default
//! suite: it needs the server, which takes minutes to build the first time.
//!
//! Two plain turns in one session, then a turn on an agent whose `tool_choice` forces its tool:
//! the tool must really run (its side effect is on disk) and the turn must complete with the
//! model's answer to the tool's result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_compile::{Approval, Effect};
use eve_runtime::engine::{
    BreakerPolicy, DriveOutcome, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::openai::OpenAiClient;
use eve_runtime::model::{ModelSettings, Provider};
use eve_runtime::store::{SqliteStore, Store, StoredEvent};
use serde_json::json;

use crate::engine_support::{TestProject, agent, all_events, kinds, logging_script, script_tool};

fn runtime(p: &TestProject, url: &str) -> Runtime {
    let mut settings = ModelSettings::new(Provider::LlamaCpp, "smollm2");
    settings.base_url = Some(url.to_owned());
    settings.timeout = Duration::from_secs(120);
    settings.idle_timeout = Duration::from_secs(120);
    settings.max_retries = 1;
    let model = ResolvedModel {
        client: Arc::new(OpenAiClient::new(&settings).unwrap()),
        model: "smollm2".to_owned(),
        model_id: "llamacpp/smollm2".to_owned(),
        context_window: Some(4096),
        price_per_million: None,
    };
    let side = p.side_file.clone();
    Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(SqliteStore::open(p.state_dir.join("eve.db")).unwrap()) as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| match name {
            "SIDE_FILE" => Some(side.to_string_lossy().into_owned()),
            other => std::env::var(other).ok(),
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(60),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    })
}

fn text_of(events: &[StoredEvent], turn: &str) -> String {
    events
        .iter()
        .filter(|e| e.kind == "message.completed" && e.data["turnId"] == turn)
        .filter_map(|e| e.data["message"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

fn completed(events: &[StoredEvent], turn: &str) -> bool {
    events
        .iter()
        .any(|e| e.kind == "turn.completed" && e.data["turnId"] == turn)
}

#[tokio::test]
#[ignore = "needs a llama.cpp server: run scripts/test-llama.sh"]
async fn two_plain_turns_and_a_forced_tool_turn() {
    let url = std::env::var("EVE_TEST_LLAMA_URL").expect(
        "EVE_TEST_LLAMA_URL must name the llama.cpp server (scripts/test-llama.sh sets it)",
    );
    let p = TestProject::new();
    let mut a = agent();
    a.instructions = "You are a helpful assistant. Answer in one short sentence.".to_owned();
    let mut tool = script_tool("weather", Effect::Read, Approval::Never);
    tool.description = "Get the current weather for a city.".to_owned();
    tool.input_schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Tokyo"]}},
        "required": ["city"],
    });
    a.tools.push(tool);
    let (path, _) = logging_script("weather", "");
    let script = "input=$(cat)\necho \"start weather $input\" >> \"$SIDE_FILE\"\n\
                  echo '{\"city\": \"Paris\", \"forecast\": \"sunny, 21 C\"}'\n"
        .to_owned();

    // Plain turns: an agent without tools.
    let mut plain = a.clone();
    plain.tools.clear();
    p.write_build(&plain, &[]);
    let rt = runtime(&p, &url);
    let started = Instant::now();
    let id = rt
        .create_session(Some("Hello! What is the capital of France?".to_owned()))
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let t1 = started.elapsed();
    let started = Instant::now();
    rt.post_message(&id, "Thank you. And of Italy?")
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let t2 = started.elapsed();
    let events = all_events(&rt, &id).await;
    for turn in ["turn_0", "turn_1"] {
        assert!(completed(&events, turn), "{turn}: {:?}", kinds(&events));
        assert!(
            !text_of(&events, turn).trim().is_empty(),
            "{turn} has no text: {:?}",
            kinds(&events)
        );
    }
    assert!(
        !events.iter().any(|e| e.kind == "turn.failed"),
        "{:?}",
        kinds(&events)
    );
    let context = rt.store().context(&id).await.unwrap();
    assert_eq!(context.len(), 4, "two user messages and two answers");
    drop(rt);

    // The tool turn: `tool_choice` forces `weather` at the first step.
    a.config.tool_choice = Some("weather".to_owned());
    p.write_build(&a, &[(path, script)]);
    let rt = runtime(&p, &url);
    let started = Instant::now();
    let id = rt
        .create_session(Some("What is the weather in Paris?".to_owned()))
        .await
        .unwrap();
    assert_eq!(rt.drive(&id).await.unwrap(), DriveOutcome::Idle);
    let t3 = started.elapsed();
    let events = all_events(&rt, &id).await;
    let kinds = kinds(&events);
    assert!(
        !kinds.iter().any(|k| k == "turn.failed"),
        "{kinds:?}: {:?}",
        events.iter().find(|e| e.kind == "turn.failed")
    );
    let requested = events
        .iter()
        .find(|e| e.kind == "actions.requested")
        .unwrap_or_else(|| panic!("the model called no tool: {kinds:?}"));
    assert!(
        requested.data.to_string().contains("weather"),
        "{}",
        requested.data
    );
    let side = p.side_lines();
    assert_eq!(side.len(), 1, "the tool ran once: {side:?}");
    assert!(side[0].starts_with("start weather {"), "{side:?}");
    assert!(kinds.iter().any(|k| k == "action.result"), "{kinds:?}");
    assert!(completed(&events, "turn_0"), "{kinds:?}");
    let steps = kinds.iter().filter(|k| *k == "step.started").count();
    assert!(steps >= 2, "a tool step and an answer step: {kinds:?}");
    eprintln!(
        "llama.cpp timings: plain turn 1 {:.1} s, plain turn 2 {:.1} s, forced tool turn {:.1} s",
        t1.as_secs_f64(),
        t2.as_secs_f64(),
        t3.as_secs_f64()
    );
    eprintln!("tool input: {}", side[0]);
}
