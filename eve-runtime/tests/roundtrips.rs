//! Store round trips between accepting a message and the first model request of its turn, counted
//! by a [`CountingStore`] around the runtime's store, on SQLite and on PostgreSQL.
//!
//! Every call that reaches the store's writer or reader counts as one: the existence check of the
//! accept, its durable commit, the lease, the drive state, the turn's start, the reads a step
//! makes before its model call. The count is what a turn waits on before the model sees it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_compile::{Approval, Effect};
use eve_runtime::engine::{
    Accept, BreakerPolicy, DriveOutcome, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
    SessionRef,
};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::model::{ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse};
use eve_runtime::store::Store;
use serde_json::{Value, json};

use crate::counting_store::CountingStore;
use crate::engine_support::*;
use crate::store_contract::Backend;

/// The most round trips a message may cost before the model is called.
const MOST: usize = 6;

/// The store calls made before each model request, one list per request.
type Seen = Arc<Mutex<Vec<Vec<&'static str>>>>;

/// The scripted mock, noting the store calls made before each model request.
struct Noting {
    mock: MockClient,
    store: Arc<CountingStore>,
    seen: Seen,
}

#[async_trait::async_trait]
impl ModelClient for Noting {
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(ModelEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        self.seen.lock().unwrap().push(self.store.calls());
        self.mock.stream(request, on_event).await
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.mock.context_window(model).await
    }
}

/// The scaffold-sized agent: one script tool, one skill, the scripted model.
fn scaffold(p: &TestProject) {
    let mut a = agent();
    a.tools
        .push(script_tool("get_weather", Effect::Read, Approval::Never));
    a.skills.push(skill("haiku", "Three lines."));
    p.write_build(
        &a,
        &[(
            "tools/get_weather.sh".to_owned(),
            "cat >/dev/null; echo '{\"sunny\": true}'\n".to_owned(),
        )],
    );
}

/// A runtime on `store` (wrapped to count) playing `steps`; the counter and the store calls seen
/// at each model request.
fn counted_runtime(
    p: &TestProject,
    store: Arc<dyn Store>,
    steps: Value,
) -> (Runtime, Arc<CountingStore>, Seen) {
    let counting = CountingStore::new(store);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = Noting {
        mock: MockClient::from_steps(load_script(&steps.to_string()).unwrap()),
        store: counting.clone(),
        seen: seen.clone(),
    };
    let model = ResolvedModel {
        client: Arc::new(client),
        model: "script".to_owned(),
        model_id: "mock/script".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let rt = Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: counting.clone() as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(|_: &str| None),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    });
    (rt, counting, seen)
}

/// The store calls made from accepting a message for `session` (as `POST /eve/v1/session/:id`
/// does) to the model's first request of the turn it starts, and to the turn's end.
async fn calls_to_first_request(
    rt: &Runtime,
    counting: &CountingStore,
    seen: &Mutex<Vec<Vec<&'static str>>>,
    session: SessionRef,
) -> (String, Vec<&'static str>, Vec<&'static str>) {
    let before_requests = seen.lock().unwrap().len();
    let before = counting.count();
    let accepted = rt
        .accept(Accept::message(session, "What is the weather in Paris?"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        rt.drive(&accepted.session).await.unwrap(),
        DriveOutcome::Idle
    );
    let seen = seen.lock().unwrap();
    let at_first = seen
        .get(before_requests)
        .expect("the turn called the model");
    let whole = counting.calls()[before..].to_vec();
    (accepted.session.clone(), at_first[before..].to_vec(), whole)
}

/// `commit ×9, events ×2, …`: how many calls of each kind, most first.
fn tally(calls: &[&'static str]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for call in calls {
        match counts.iter_mut().find(|(c, _)| c == call) {
            Some((_, n)) => *n += 1,
            None => counts.push((call, 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    counts
        .iter()
        .map(|(c, n)| format!("{c} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Two turns of the scaffold agent on `backend`: a new session's first message, then a message to
/// the existing session; each must reach the model within [`MOST`] round trips.
async fn a_message_reaches_the_model_within_six_round_trips(backend: &dyn Backend) -> usize {
    let p = TestProject::new();
    scaffold(&p);
    let turn = json!([
        {"tool_calls": [{"name": "get_weather", "input": {"city": "Paris"}}]},
        {"text": "Sunny."},
    ]);
    let steps = json!([turn[0], turn[1], turn[0], turn[1]]);
    let (rt, counting, seen) = counted_runtime(&p, backend.open(), steps);
    // The runtime's own start (reading the active release) is not a message's round trip.
    eventually("the runtime read the active release", || {
        counting.calls().contains(&"releases")
    })
    .await;
    let (session, first, _) =
        calls_to_first_request(&rt, &counting, &seen, SessionRef::new_session(None)).await;
    let (_, second, whole) =
        calls_to_first_request(&rt, &counting, &seen, SessionRef::Existing(session)).await;
    for (what, calls) in [("a new session", &first), ("an existing session", &second)] {
        println!(
            "store round trips from accept to the first model request, {what}: {} ({})",
            calls.len(),
            calls.join(", ")
        );
    }
    // Not a limit: what the rest of the turn costs (a tool call, two model calls), for the next
    // pass on a turn's latency.
    println!(
        "store round trips of a whole turn (accept to idle: a tool call, two model calls): {} ({})",
        whole.len(),
        tally(&whole)
    );
    for (what, calls) in [("a new session", &first), ("an existing session", &second)] {
        assert!(
            calls.len() <= MOST,
            "{what}: {} store round trips before the model was called (at most {MOST}): {calls:?}",
            calls.len()
        );
    }
    second.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_message_reaches_the_model_within_six_round_trips() {
    a_message_reaches_the_model_within_six_round_trips(&crate::store_sqlite::Sqlite::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_message_reaches_the_model_within_six_round_trips() {
    let Some(backend) = crate::store_postgres::Postgres::new() else {
        return;
    };
    a_message_reaches_the_model_within_six_round_trips(&backend).await;
}
