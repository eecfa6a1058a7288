//! Test support for the engine: builds written by hand into a temp project, script tools, and a
//! runtime wired to the scripted mock model.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use eve_compile::{
    Agent, AgentConfig, Approval, Compaction, Effect, Limits, MANIFEST_VERSION, Manifest, Runner,
    Sandbox, Skill, Tool, TurnPolicy,
};
use eve_runtime::engine::{
    BreakerPolicy, DriveOutcome, FixedModelProvider, ModelProvider, ResolvedModel, Runtime,
    RuntimeConfig,
};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::{SqliteStore, Store, StoredEvent};
use serde_json::{Value, json};

/// Waits until a condition holds, checking every few milliseconds; panics naming it after a
/// deadline generous enough for a loaded machine.
pub use eve_test_support::eventually_async as eventually;

/// A project folder with `.eve/` and hand-written builds.
pub struct TestProject {
    #[allow(dead_code)]
    pub dir: tempfile::TempDir,
    pub state_dir: PathBuf,
    /// File every test tool appends a line to.
    pub side_file: PathBuf,
}

impl TestProject {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join(".eve");
        std::fs::create_dir_all(&state_dir).unwrap();
        let side_file = dir.path().join("side-effects.log");
        Self {
            dir,
            state_dir,
            side_file,
        }
    }

    /// Writes a build of `agent` (plus `files`, agent-relative) and points `.eve/current` at it.
    pub fn write_build(&self, agent: &Agent, files: &[(String, String)]) -> String {
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            eve_version: "test".to_owned(),
            agent: agent.clone(),
            files: Default::default(),
        };
        let json = serde_json::to_string_pretty(&manifest).unwrap();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&json, &mut hasher);
        for (p, c) in files {
            std::hash::Hash::hash(p, &mut hasher);
            std::hash::Hash::hash(c, &mut hasher);
        }
        let hash = format!("{:016x}", std::hash::Hasher::finish(&hasher));
        let build_dir = self.state_dir.join("builds").join(&hash);
        std::fs::create_dir_all(build_dir.join("files")).unwrap();
        std::fs::write(build_dir.join("manifest.json"), json).unwrap();
        for (path, content) in files {
            let target = build_dir.join("files").join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, content).unwrap();
        }
        let current = self.state_dir.join("current");
        let _ = std::fs::remove_file(&current);
        std::os::unix::fs::symlink(Path::new("builds").join(&hash), &current).unwrap();
        hash
    }

    /// Side-effect lines written by tools.
    pub fn side_lines(&self) -> Vec<String> {
        eve_test_support::lines_of(&self.side_file)
    }

    /// A runtime on this project with a scripted mock model (`steps` as JSON).
    pub fn runtime(&self, steps: Value) -> Runtime {
        self.runtime_with(steps, None)
    }

    /// Like [`TestProject::runtime`], with a context window reported by the model.
    pub fn runtime_with(&self, steps: Value, window: Option<u64>) -> Runtime {
        let steps = load_script(&steps.to_string()).unwrap();
        self.runtime_on(
            Arc::new(MockClient::from_steps(steps).with_context_window(window)),
            window,
        )
    }

    /// A runtime on this project whose model is `client`.
    pub fn runtime_on(
        &self,
        client: Arc<dyn eve_runtime::model::ModelClient>,
        window: Option<u64>,
    ) -> Runtime {
        let model = ResolvedModel {
            client,
            model: "script".to_owned(),
            model_id: "mock/script".to_owned(),
            context_window: window,
            price_per_million: None,
        };
        self.runtime_with_models(Arc::new(FixedModelProvider(model)))
    }

    /// A runtime on this project's store whose models come from `models`.
    pub fn runtime_with_models(&self, models: Arc<dyn ModelProvider>) -> Runtime {
        let store = SqliteStore::open(self.state_dir.join("eve.db")).unwrap();
        let side = self.side_file.clone();
        let config = RuntimeConfig {
            state_dir: self.state_dir.clone(),
            store: Arc::new(store) as Arc<dyn Store>,
            models,
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
        };
        Runtime::new(config)
    }
}

/// An agent with defaults: no built-in tools, no skills.
pub fn agent() -> Agent {
    Agent {
        name: "test-agent".to_owned(),
        path: String::new(),
        description: None,
        instructions: "You are a test agent.".to_owned(),
        config: AgentConfig {
            model: None,
            reasoning: None,
            context_window: None,
            tool_choice: None,
            review_model: None,
            memory: None,
            probe: None,
            compaction: Compaction::default(),
            limits: Limits::default(),
            prices: Default::default(),
            default_tools: false,
            builtins: None,
            approvals: Default::default(),
            turn_policy: TurnPolicy::Queue,
            hollow_check: false,
            strategy: Default::default(),
            critic: None,
            lean_context: Default::default(),
            activation: Default::default(),
            gate: Vec::new(),
            rollback: None,
            self_change: false,
            ask_question: false,
            no_reply: false,
            web: Default::default(),
        },
        tools: Vec::new(),
        skills: Vec::new(),
        subagents: Vec::new(),
        schedules: Vec::new(),
        hooks: Vec::new(),
        connections: Vec::new(),
        channels: Vec::new(),
        // The engine's tests write their side effects outside the workspace, so their tools run
        // unconfined; the isolated sandbox is tested by `escape`.
        sandbox: Sandbox {
            provider: eve_compile::Provider::Host,
            ..Sandbox::default()
        },
        remote: None,
    }
}

/// A shell-script tool at `tools/<name>.sh` (`body` runs with `$SIDE_FILE` available).
pub fn script_tool(name: &str, effect: Effect, approval: Approval) -> Tool {
    Tool {
        name: name.to_owned(),
        source: format!("tools/{name}.sh"),
        description: format!("The {name} tool."),
        input_schema: json!({"type": "object"}),
        schema_hash: "0".repeat(64),
        approval,
        effect,
        timeout_ms: 10_000,
        output_limit: 1024 * 1024,
        deferred: false,
        env: vec!["SIDE_FILE".to_owned()],
        dynamic: Vec::new(),
        phase: None,
        ends_turn: false,
        approval_prompt: None,
        runner: Runner::Script {
            path: format!("tools/{name}.sh"),
            interpreter: vec!["sh".to_owned()],
        },
    }
}

/// The script file of a tool that logs `start`/`done` with its call id and idempotency key, after
/// `extra` shell lines (run between the two log lines).
pub fn logging_script(name: &str, extra: &str) -> (String, String) {
    (
        format!("tools/{name}.sh"),
        format!(
            "input=$(cat)\necho \"start {name} $EVE_CALL_ID $EVE_IDEMPOTENCY_KEY\" >> \"$SIDE_FILE\"\n\
             {extra}\necho \"done {name} $EVE_CALL_ID\" >> \"$SIDE_FILE\"\n\
             echo \"{{\\\"tool\\\": \\\"{name}\\\", \\\"input\\\": $input}}\"\n"
        ),
    )
}

pub fn skill(name: &str, body: &str) -> Skill {
    Skill {
        name: name.to_owned(),
        source: format!("skills/{name}.md"),
        description: format!("How to {name}."),
        body: body.to_owned(),
        deferred: false,
        license: None,
        metadata: None,
        files: Vec::new(),
    }
}

/// Every stored event of a session.
pub async fn all_events(rt: &Runtime, session: &str) -> Vec<StoredEvent> {
    rt.events(session, 0, 0).await.unwrap()
}

/// Event types, in order.
pub fn kinds(events: &[StoredEvent]) -> Vec<String> {
    events.iter().map(|e| e.kind.clone()).collect()
}

/// Event types with consecutive `message.appended` folded into one.
pub fn folded_kinds(events: &[StoredEvent]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        if e.kind == "message.appended" && out.last().is_some_and(|k| k == "message.appended") {
            continue;
        }
        out.push(e.kind.clone());
    }
    out
}

/// Creates a session with `text` and drives it to rest.
pub async fn run_prompt(rt: &Runtime, text: &str) -> (String, DriveOutcome) {
    let id = rt.create_session(Some(text.to_owned())).await.unwrap();
    let outcome = rt.drive(&id).await.unwrap();
    (id, outcome)
}

/// The scripted mock, keeping every request the runtime sent.
pub struct Recording {
    pub mock: MockClient,
    pub requests: Arc<std::sync::Mutex<Vec<eve_runtime::model::ModelRequest>>>,
}

#[async_trait::async_trait]
impl eve_runtime::model::ModelClient for Recording {
    async fn stream(
        &self,
        request: &eve_runtime::model::ModelRequest,
        on_event: &mut (dyn FnMut(eve_runtime::model::ModelEvent) + Send),
    ) -> Result<eve_runtime::model::ModelResponse, eve_runtime::model::ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        self.mock.stream(request, on_event).await
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.mock.context_window(model).await
    }
}

/// The requests a [`Recording`] model received.
pub type Requests = Arc<std::sync::Mutex<Vec<eve_runtime::model::ModelRequest>>>;

/// A runtime on `p` whose model plays `steps`, and the requests it receives.
pub fn recording_runtime(p: &TestProject, steps: Value) -> (Runtime, Requests) {
    recording_runtime_with(p, steps, None)
}

/// [`recording_runtime`] with a model context window.
pub fn recording_runtime_with(
    p: &TestProject,
    steps: Value,
    window: Option<u64>,
) -> (Runtime, Requests) {
    let requests: Requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = Recording {
        mock: MockClient::from_steps(load_script(&steps.to_string()).unwrap()),
        requests: requests.clone(),
    };
    (p.runtime_on(Arc::new(client), window), requests)
}
