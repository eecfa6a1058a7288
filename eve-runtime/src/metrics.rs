//! Prometheus metrics of one runtime: what `/metrics` serves (see `docs/observability.md`).
//!
//! The metrics are an [`crate::engine::observe::EventObserver`] of their runtime. Counters follow
//! the events: [`Metrics::observe`] gets every commit's events once they are stored, so a turn,
//! step, tool call or token counted here is one the event stream holds, and a commit that failed
//! counts nothing. Latencies are measured where they happen: the model call (the turn core
//! reports how long the provider took), the store commit (`Runtime::commit*`) and the spawn of a
//! sandboxed process (`exec`). Gauges are this process's view: input
//! requests asked and not yet answered, tasks started and not yet settled (both from the
//! events), and sessions with a driver in this process (read when scraped).
//!
//! Labels never carry a session, turn or call id. Tool names and model ids are bounded by the
//! build, but a model may call a tool name it invented: a label value is admitted only when it
//! looks like a name (`[A-Za-z0-9_.:/-]`, at most 64 bytes) and fewer than [`MAX_LABEL_VALUES`]
//! values of its kind were admitted before; anything else is counted under `other`.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::store::StoredEvent;

/// Distinct values one label (tools, models) may take in a process; later ones are `other`.
pub const MAX_LABEL_VALUES: usize = 200;

/// The label value of everything kept out of a bounded label.
pub const OTHER: &str = "other";

/// The `Content-Type` of what [`Metrics::render`] gives (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    kind: String,
}

/// Labels of a sandbox spawn: the sandbox (`host`, `isolated`) and the path (`cold`, `warm`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpawnLabels {
    /// `host` or `isolated`.
    pub sandbox: &'static str,
    /// `cold` (a new process) or `warm` (a box of the pool).
    pub path: &'static str,
}

/// The histogram family of process spawn times, shared with the executor.
pub type SpawnTimes = Family<SpawnLabels, Histogram, fn() -> Histogram>;

fn model_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 12))
}

fn commit_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 14))
}

fn spawn_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 12))
}

/// A label whose values are admitted up to a bound (see the module's header).
#[derive(Default)]
struct Bounded(Mutex<HashSet<String>>);

impl Bounded {
    fn label(&self, value: &str) -> String {
        let valid = !value.is_empty()
            && value.len() <= 64
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:/-".contains(&b));
        if !valid {
            return OTHER.to_owned();
        }
        let Ok(mut seen) = self.0.lock() else {
            return OTHER.to_owned();
        };
        if seen.contains(value) {
            return value.to_owned();
        }
        if seen.len() >= MAX_LABEL_VALUES {
            return OTHER.to_owned();
        }
        seen.insert(value.to_owned());
        value.to_owned()
    }
}

/// The metrics of one runtime.
pub struct Metrics {
    registry: Registry,
    turns_started: Counter,
    turns_completed: Counter,
    turns_failed: Counter,
    turns_cancelled: Counter,
    steps: Counter,
    tool_calls: Family<ToolLabels, Counter>,
    model_seconds: Family<ModelLabels, Histogram, fn() -> Histogram>,
    tokens: Family<TokenLabels, Counter>,
    approvals_waiting: Gauge<i64, AtomicI64>,
    tasks_working: Gauge<i64, AtomicI64>,
    sessions_active: Gauge<i64, AtomicI64>,
    commit_seconds: Histogram,
    spawn_seconds: SpawnTimes,
    tools: Bounded,
    models: Bounded,
    /// The model of each session's running step (from `step.started`), until its turn ends.
    step_models: Mutex<HashMap<String, String>>,
    /// Input requests waiting, by session, until answered or the turn ends (a cancelled turn
    /// withdraws its requests without `input.resolved`).
    waiting: Mutex<HashMap<String, i64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric, registered and at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("eve");
        let turns_started = Counter::default();
        let turns_completed = Counter::default();
        let turns_failed = Counter::default();
        let turns_cancelled = Counter::default();
        let steps = Counter::default();
        let tool_calls = Family::<ToolLabels, Counter>::default();
        let model_seconds: Family<ModelLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(model_buckets);
        let tokens = Family::<TokenLabels, Counter>::default();
        let approvals_waiting = Gauge::<i64, AtomicI64>::default();
        let tasks_working = Gauge::<i64, AtomicI64>::default();
        let sessions_active = Gauge::<i64, AtomicI64>::default();
        let commit_seconds = commit_buckets();
        let spawn_seconds: SpawnTimes = Family::new_with_constructor(spawn_buckets);
        registry.register(
            "turns_started",
            "Turns started (turn.started events)",
            turns_started.clone(),
        );
        registry.register(
            "turns_completed",
            "Turns completed (turn.completed events)",
            turns_completed.clone(),
        );
        registry.register(
            "turns_failed",
            "Turns failed (turn.failed events)",
            turns_failed.clone(),
        );
        registry.register(
            "turns_cancelled",
            "Turns cancelled (turn.cancelled events)",
            turns_cancelled.clone(),
        );
        registry.register(
            "steps",
            "Steps completed (step.completed events)",
            steps.clone(),
        );
        registry.register(
            "tool_calls",
            "Tool calls settled, by tool and outcome (action.result events)",
            tool_calls.clone(),
        );
        registry.register(
            "model_call_duration_seconds",
            "Duration of model calls, by model",
            model_seconds.clone(),
        );
        registry.register(
            "model_tokens",
            "Model tokens by model and kind (input, output, cached), from step.completed usage",
            tokens.clone(),
        );
        registry.register(
            "approvals_waiting",
            "Input requests (approvals, questions) asked and not yet answered in this process",
            approvals_waiting.clone(),
        );
        registry.register(
            "tasks_working",
            "Background tasks started and not yet settled in this process",
            tasks_working.clone(),
        );
        registry.register(
            "sessions_active",
            "Sessions with a driver in this process",
            sessions_active.clone(),
        );
        registry.register(
            "store_commit_duration_seconds",
            "Duration of store commits",
            commit_seconds.clone(),
        );
        registry.register(
            "sandbox_spawn_duration_seconds",
            "Time to start a tool's process, by sandbox and path",
            spawn_seconds.clone(),
        );
        Self {
            registry,
            turns_started,
            turns_completed,
            turns_failed,
            turns_cancelled,
            steps,
            tool_calls,
            model_seconds,
            tokens,
            approvals_waiting,
            tasks_working,
            sessions_active,
            commit_seconds,
            spawn_seconds,
            tools: Bounded::default(),
            models: Bounded::default(),
            step_models: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// Counts what one commit stored.
    pub fn observe(&self, events: &[StoredEvent]) {
        for event in events {
            self.observe_one(event);
        }
    }

    fn observe_one(&self, event: &StoredEvent) {
        let data = &event.data;
        match event.kind.as_str() {
            "turn.started" => {
                self.turns_started.inc();
            }
            "turn.completed" | "turn.failed" | "turn.cancelled" => {
                match event.kind.as_str() {
                    "turn.completed" => self.turns_completed.inc(),
                    "turn.failed" => self.turns_failed.inc(),
                    _ => self.turns_cancelled.inc(),
                };
                if let Ok(mut models) = self.step_models.lock() {
                    models.remove(&event.session_id);
                }
                self.waiting(&event.session_id, None);
            }
            "step.started" => {
                if let Some(model) = data.get("modelId").and_then(Value::as_str)
                    && let Ok(mut models) = self.step_models.lock()
                {
                    models.insert(event.session_id.clone(), self.models.label(model));
                }
            }
            "step.completed" => {
                self.steps.inc();
                let model = self
                    .step_models
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&event.session_id).cloned())
                    .unwrap_or_else(|| OTHER.to_owned());
                let usage = &data["usage"];
                for (kind, field) in [
                    ("input", "inputTokens"),
                    ("output", "outputTokens"),
                    ("cached", "cacheReadTokens"),
                ] {
                    let n = usage[field].as_u64().unwrap_or(0);
                    self.tokens
                        .get_or_create(&TokenLabels {
                            model: model.clone(),
                            kind: kind.to_owned(),
                        })
                        .inc_by(n);
                }
            }
            "action.result" => {
                let tool = match data["result"]["kind"].as_str() {
                    Some("load-skill-result") => "load_skill",
                    _ => data["result"]["toolName"].as_str().unwrap_or_default(),
                };
                let outcome = match data["status"].as_str().unwrap_or_default() {
                    s @ ("completed" | "failed" | "denied" | "interrupted" | "cancelled") => s,
                    _ => OTHER,
                };
                self.tool_calls
                    .get_or_create(&ToolLabels {
                        tool: self.tools.label(tool),
                        outcome: outcome.to_owned(),
                    })
                    .inc();
            }
            "input.requested" => {
                let n = data["requests"].as_array().map_or(1, Vec::len);
                self.waiting(&event.session_id, Some(n as i64));
            }
            "input.resolved" => {
                let n = data["resolutions"].as_array().map_or(1, Vec::len);
                self.waiting(&event.session_id, Some(-(n as i64)));
            }
            "task.started" => {
                self.tasks_working.inc();
            }
            "task.settled" if self.tasks_working.get() > 0 => {
                self.tasks_working.dec();
            }
            _ => {}
        }
    }

    /// Adds `delta` to the requests waiting in `session` (`None`: its turn ended, none wait).
    fn waiting(&self, session: &str, delta: Option<i64>) {
        let Ok(mut waiting) = self.waiting.lock() else {
            return;
        };
        match delta {
            Some(delta) => {
                let n = waiting.entry(session.to_owned()).or_default();
                *n = (*n + delta).max(0);
                if *n == 0 {
                    waiting.remove(session);
                }
            }
            None => {
                waiting.remove(session);
            }
        }
        self.approvals_waiting.set(waiting.values().sum());
    }

    /// Records one model call of `model` that took `took`.
    pub fn model_call(&self, model: &str, took: Duration) {
        self.model_seconds
            .get_or_create(&ModelLabels {
                model: self.models.label(model),
            })
            .observe(took.as_secs_f64());
    }

    /// Records one store commit that took `took`.
    pub fn commit(&self, took: Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
    }

    /// The spawn-time family, for the executor to record into.
    pub fn spawn_times(&self) -> SpawnTimes {
        self.spawn_seconds.clone()
    }

    /// The metrics in Prometheus text format, with `sessions_active` set to `sessions`.
    pub fn render(&self, sessions: usize) -> String {
        self.sessions_active
            .set(i64::try_from(sessions).unwrap_or(i64::MAX));
        let mut out = String::new();
        if prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl crate::engine::observe::EventObserver for Metrics {
    fn committed(&self, events: &[StoredEvent]) {
        self.observe(events);
    }

    fn turn_work(&self, work: &crate::engine::observe::TurnWork<'_>) {
        if let crate::engine::observe::TurnWork::ModelCalled(call) = work
            && let Some(took) = call.took
        {
            self.model_call(call.model_id, took);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        let bounded = Bounded::default();
        assert_eq!(bounded.label("bash"), "bash");
        assert_eq!(bounded.label("wrun 01 with spaces"), OTHER);
        assert_eq!(bounded.label(&"x".repeat(65)), OTHER);
        for i in 0..MAX_LABEL_VALUES * 2 {
            bounded.label(&format!("tool_{i}"));
        }
        assert_eq!(bounded.label("bash"), "bash", "an admitted value stays");
        assert_eq!(bounded.label("late_tool"), OTHER);
    }
}
