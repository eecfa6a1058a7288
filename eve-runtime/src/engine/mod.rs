//! The session engine: session ⊃ turn ⊃ step, durable at every step.
//!
//! [`Runtime`] is the handle everything else (the CLI, the HTTP server, channels, schedules) sits
//! on. Accepting a message writes it to the session's inbox before anything else happens; a driver
//! then takes the session's lease and runs turns from the store: call the model (streaming, each
//! response journaled as a step), settle the tool calls it asked for (validated, approved, guarded
//! by circuit breakers, run in parallel, each result journaled), and repeat until the model stops.
//! Every state change is committed together with the events that announce it, so a process killed
//! at any point resumes from the current state (the open turn and its calls), never by replaying
//! history.

mod accept;
mod active;
pub(crate) mod claims;
mod config;
pub(crate) mod drive;
mod error;
pub use crate::events;
mod follow;
mod live;
pub use crate::builds::publish;
mod replies;
mod run_tool;
mod sandbox;

pub(crate) mod turn;

/// The features of a turn (`crate::features`), where callers of the engine found them before.
pub use crate::features::{memory, selfchange, session_limit};
pub use crate::retention::{DEFAULT_RETENTION_INTERVAL, Pruned, retention_interval};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_compile::Agent;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub use crate::builds::{BuildStore, LOAD_SKILL, LoadedBuild, load_build, system_prompt};
pub use crate::features::breakers::{breaker_key, session_scoped as breaker_scope_is_session};
pub use crate::features::hooks::delivery::{HookBacklog, PendingHookEvent};
pub use crate::model::provider::{FixedModelProvider, SettingsModelProvider};
pub use crate::tenancy::Caller;
pub(crate) use crate::workspace::DEFAULT_MAX_BYTES as DEFAULT_WORKSPACE_MAX_BYTES;
#[doc(hidden)]
pub use accept::{Accept, Accepted, Extra, SessionRef};
pub use config::{BreakerPolicy, DEFAULT_LEASE_TTL, ModelProvider, ResolvedModel, RuntimeConfig};
pub use error::{RuntimeError, RuntimeResult};
pub use events::LOCAL_PRINCIPAL;
pub use follow::EventFollower;
pub(crate) use live::LiveEvents;
pub use replies::ReplyFollower;
pub use sandbox::SandboxReport;
pub use turn::{InputAnswer, option_ids, resolve_text};

use crate::store::*;
use active::Active;
use live::ALL_EVENTS_BUFFER;

/// How a drive ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DriveOutcome {
    /// No work left: the session waits for its next message.
    Idle,
    /// The turn is parked on these input requests.
    WaitingInput(Vec<InputRequestRecord>),
    /// The last turn failed (an error or a limit).
    Failed {
        /// Stop reason or error code.
        code: String,
        /// What happened.
        message: String,
    },
    /// The last turn was cancelled.
    Cancelled,
    /// Another live process holds the session's lease.
    Busy {
        /// Its pid.
        pid: u32,
    },
}

pub(crate) struct Inner {
    pub(crate) config: RuntimeConfig,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) builds: BuildStore,
    pub(crate) holder: String,
    pub(crate) host: String,
    channels: Mutex<HashMap<String, broadcast::Sender<LiveEvents>>>,
    /// Every event this process commits, of any session (the dev console's lines).
    all_events: broadcast::Sender<StoredEvent>,
    active: Mutex<HashMap<String, Active>>,
    /// Parked turns this process will wake itself, by session: when (epoch ms). The store
    /// watch's periodic look leaves them alone until then (see [`Runtime::wake_at`]).
    wakes: Mutex<HashMap<String, i64>>,
    /// Fencing tokens of the leases this runtime holds, by session: every commit that writes
    /// one of these sessions carries its token, so it is refused once another node took over.
    pub(crate) fences: Mutex<HashMap<String, u64>>,
    pub(crate) breakers: tokio::sync::Mutex<HashMap<String, BreakerRecord>>,
    /// Sessions whose breaker of a tool opened lately, by the tool's agent-wide key.
    pub(crate) breaker_trips: Mutex<crate::features::breakers::Trips>,
    /// MCP managers by the JSON of their connections.
    pub(crate) mcp: Mutex<HashMap<String, crate::mcp::McpManager>>,
    /// Delivery of events to observe hooks.
    pub(crate) hooks: crate::features::hooks::delivery::HookState,
    /// Context windows the providers reported, by model id and client: asked once per runtime
    /// (`None`: the provider did not say at that instant; asked again a minute later).
    pub(crate) windows: Mutex<HashMap<String, (Option<u64>, std::time::Instant)>>,
    /// Channel replies followed by this runtime.
    pub(crate) following: replies::Following,
    /// The HTTP client of this runtime's HTTP tools.
    pub(crate) http: crate::tools::HttpClient,
    /// Starts every process of this runtime's tools, hooks and MCP servers (the execution seam).
    pub(crate) exec: Arc<crate::exec::Executor>,
    /// The gate runner, release followers and the lock of release decisions.
    pub(crate) releases: crate::releases::ReleaseState,
    /// The agent folder `propose_change` proposals are written into (see `selfchange`).
    pub(crate) agent_dir: std::sync::OnceLock<PathBuf>,
    /// Tests only: see [`Runtime::set_unguarded_answers_for_tests`].
    pub(crate) unguarded_answers: std::sync::atomic::AtomicBool,
    /// Tests only: see [`Runtime::set_naive_prompts_for_tests`].
    pub(crate) naive_prompts: std::sync::atomic::AtomicBool,
    /// Tests only: see [`Runtime::set_owners_by_id_only_for_tests`].
    pub(crate) owners_by_id_only: std::sync::atomic::AtomicBool,
    /// Tests only: see [`Runtime::set_tool_state_shared_for_tests`].
    pub(crate) tool_state_shared: std::sync::atomic::AtomicBool,
    /// Tests only: see [`Runtime::set_proposals_fetch_for_tests`].
    pub(crate) proposals_fetch: std::sync::atomic::AtomicBool,
    /// This runtime's session workspaces: their checkpoints and what this node knows of them.
    pub(crate) workspaces: crate::workspace::Workspaces,
    /// This runtime's Prometheus metrics (`/metrics`), counted from what it commits.
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// Tracing, once it is set up ([`Runtime::set_telemetry`]).
    pub(crate) telemetry: std::sync::OnceLock<Arc<crate::telemetry::Telemetry>>,
    /// What watches this runtime's commits and turns: the metrics, tracing once it is on
    /// ([`crate::observe::EventObserver`]).
    pub(crate) observers: crate::observe::Observers,
}

/// Handle on the session engine. Cheap to clone; every clone drives the same sessions.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("state_dir", &self.inner.config.state_dir)
            .field("holder", &self.inner.holder)
            .finish_non_exhaustive()
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Shortest pause between two looks of [`Runtime::watch_store`].
const WATCH_PAUSE: Duration = Duration::from_millis(250);

/// How long a server's start waits for its store to warm ([`Runtime::warm_up`]); it takes a few
/// milliseconds unless another process holds the store's write lock.
const WARM_WAIT: Duration = Duration::from_millis(500);

/// How long a clear or a compaction waits for this process's driver of an idle session to stop
/// (see [`Runtime::require_idle`]); a turn still running after it is refused.
const SETTLE_WAIT: Duration = Duration::from_secs(2);

/// A new session id: `wrun_<ULID>`.
pub(crate) fn new_session_id() -> String {
    format!("wrun_{}", ulid::Ulid::new())
}

impl Runtime {
    /// A runtime over `config`.
    pub fn new(config: RuntimeConfig) -> Self {
        let host = hostname();
        let holder = format!("{host}:{}:{}", std::process::id(), ulid::Ulid::new());
        config.secrets.learn_model_keys(&*config.env);
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let exec = Arc::new(crate::exec::Executor::new({
            let mut exec = crate::exec::ExecConfig::from_env(
                config.sandbox_helper.clone(),
                config.state_dir.join("run"),
                &*config.env,
            );
            exec.state_dir = Some(config.state_dir.clone());
            exec.spawn_times = Some(metrics.spawn_times());
            exec
        }));
        let workspaces = crate::workspace::Workspaces::new(
            config.state_dir.clone(),
            config.store.clone(),
            config.env.clone(),
            config.secrets.clone(),
        );
        let rt = Self {
            inner: Arc::new(Inner {
                store: config.store.clone(),
                builds: BuildStore::new(config.state_dir.clone())
                    .with_secrets(config.secrets.clone(), config.env.clone())
                    .with_source(config.store.clone()),
                config,
                holder,
                host,
                channels: Mutex::new(HashMap::new()),
                all_events: broadcast::channel(ALL_EVENTS_BUFFER).0,
                active: Mutex::new(HashMap::new()),
                wakes: Mutex::new(HashMap::new()),
                fences: Mutex::new(HashMap::new()),
                breakers: tokio::sync::Mutex::new(HashMap::new()),
                breaker_trips: Mutex::new(crate::features::breakers::Trips::default()),
                mcp: Mutex::new(HashMap::new()),
                hooks: crate::features::hooks::delivery::HookState::default(),
                windows: Mutex::new(HashMap::new()),
                following: replies::Following::default(),
                http: crate::tools::HttpClient::new(),
                exec,
                releases: crate::releases::ReleaseState::default(),
                agent_dir: std::sync::OnceLock::new(),
                unguarded_answers: std::sync::atomic::AtomicBool::new(false),
                naive_prompts: std::sync::atomic::AtomicBool::new(false),
                owners_by_id_only: std::sync::atomic::AtomicBool::new(false),
                tool_state_shared: std::sync::atomic::AtomicBool::new(false),
                proposals_fetch: std::sync::atomic::AtomicBool::new(false),
                workspaces,
                metrics: metrics.clone(),
                telemetry: std::sync::OnceLock::new(),
                observers: crate::observe::Observers::default(),
            }),
        };
        rt.add_observer(metrics);
        rt.start_releases();
        rt
    }

    /// Turns tracing on for this runtime (once; a second call changes nothing).
    pub fn set_telemetry(&self, telemetry: Arc<crate::telemetry::Telemetry>) {
        if self.inner.telemetry.set(telemetry.clone()).is_ok() {
            self.add_observer(telemetry);
        }
    }

    /// This runtime's tracing, when it is on.
    pub fn telemetry(&self) -> Option<&Arc<crate::telemetry::Telemetry>> {
        self.inner.telemetry.get()
    }

    /// The executor that starts this runtime's processes (tools, hooks, MCP servers).
    pub fn executor(&self) -> &Arc<crate::exec::Executor> {
        &self.inner.exec
    }

    /// The confinement of one process of `agent`: its effective sandbox with the session's
    /// workspace writable and the build's files read-only.
    pub(crate) fn confinement(
        &self,
        agent: &Agent,
        effective: Option<eve_compile::EffectiveSandbox>,
        workspace: Option<&Path>,
        files: Option<&Path>,
    ) -> crate::exec::Confinement {
        let home = (self.inner.config.env)(crate::env_vars::HOME).map(PathBuf::from);
        crate::exec::Executor::confinement(
            effective.as_ref(),
            &agent.sandbox,
            workspace,
            files,
            home.as_deref(),
        )
    }

    /// The context of one process the runtime starts for `session` on `build` (a tool, a hook,
    /// a probe, a dynamic tool's provider): `sandbox` confines it, with `workspace` writable and
    /// `agent_dir` (the build's files) read-only. Every such process gets its context here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tool_context(
        &self,
        build: &LoadedBuild,
        session: &str,
        call_id: String,
        idempotency_key: String,
        workspace: PathBuf,
        agent_dir: PathBuf,
        sandbox: Option<eve_compile::EffectiveSandbox>,
    ) -> crate::tools::ToolContext {
        let confinement = self.confinement(
            &build.manifest.agent,
            sandbox,
            Some(&workspace),
            Some(&agent_dir),
        );
        crate::tools::ToolContext::new(session, call_id, workspace, agent_dir)
            .with_idempotency_key(idempotency_key)
            .with_env(self.inner.config.env.clone())
            .with_services(self.inner.http.clone(), self.inner.exec.clone())
            .with_confinement(confinement)
            .with_web(crate::tools::WebContext::new(
                build.manifest.agent.config.web.clone(),
            ))
            .with_principal(self.inner.store.clone(), None)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The `${VAR}` lookup of connections and tools (the process environment and `.env`).
    pub fn env(&self) -> crate::tools::EnvLookup {
        self.inner.config.env.clone()
    }

    /// The state folder.
    pub fn state_dir(&self) -> &Path {
        &self.inner.config.state_dir
    }

    /// The builds.
    pub fn builds(&self) -> &BuildStore {
        &self.inner.builds
    }

    /// Does the work a first turn would otherwise pay for: loads the current build (tool table,
    /// compiled validators, system prompt), builds the model client of its root agent, warms the
    /// store ([`crate::store::Store::warm`]: its first durable write, a turn's statements
    /// prepared), and in the background unpacks the build's files and, when neither the agent
    /// nor the model settings give the context window, asks the provider for it (which also
    /// opens the connection the first model call then reuses). Servers call it before they
    /// answer `/health`. Failures are left for the first turn to report.
    pub async fn warm_up(&self) {
        let Ok(build) = self.inner.builds.current() else {
            return;
        };
        let models = self.inner.config.models.clone();
        // Unpack the build's files in the background: the first tool call then finds them.
        let unpacking = build.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = unpacking.files() {
                tracing::warn!(error = %e, "cannot unpack the build's files");
            }
        });
        // Awaited: a server reports healthy once its store is warm (a few milliseconds), so a
        // first turn sent at once does not share the CPU with warming it. Not for longer than
        // `WARM_WAIT` (another process holding the file's write lock): the rest goes on behind.
        let store = self.inner.store.clone();
        let warming = tokio::spawn(async move { store.warm().await });
        let _ = tokio::time::timeout(WARM_WAIT, warming).await;
        let configured = build.manifest.agent.config.context_window;
        let resolved =
            tokio::task::spawn_blocking(move || models.resolve(&build.manifest.agent)).await;
        if let Ok(Ok(model)) = resolved
            && configured.or(model.context_window).is_none()
        {
            let rt = self.clone();
            tokio::spawn(async move {
                turn::provider_window(&rt, &model).await;
            });
        }
    }

    /// Cancels the running or parked turn. Accepted messages stay in the inbox.
    pub async fn cancel(&self, session: &str) -> RuntimeResult<()> {
        let record = self.require_session(session).await?;
        let mut batch = Batch::durable();
        batch.push(Op::SetCancel {
            session_id: session.to_owned(),
            requested: true,
        });
        self.commit(batch).await?;
        let in_process = self.cancel_token(session).map(|t| t.cancel()).is_some();
        if !in_process && record.status != SessionStatus::Idle {
            // Nobody here drives it: cancel it ourselves (takes the lease first).
            self.kick_or_drive(session).await;
        }
        Ok(())
    }

    /// Compacts the context of an idle session now.
    pub async fn compact(&self, session: &str) -> RuntimeResult<()> {
        crate::features::compaction::manual_compact(self, session).await
    }

    /// Empties the context of an idle session (the history stays in the store).
    pub async fn clear(&self, session: &str) -> RuntimeResult<()> {
        self.empty_context(session, "clear", events::CONTEXT_CLEARED, false)
            .await
    }

    /// Resets an idle session: empty context, no loaded skills, `once` approvals forgotten.
    pub async fn reset(&self, session: &str) -> RuntimeResult<()> {
        self.empty_context(session, "reset", events::SESSION_RESET, true)
            .await
    }

    /// The body of [`Runtime::clear`] and [`Runtime::reset`]: empties the context and the loaded
    /// skills of an idle session (and its `once` approvals when `forget_approvals`), announced as
    /// `kind`.
    async fn empty_context(
        &self,
        session: &str,
        what: &str,
        kind: &str,
        forget_approvals: bool,
    ) -> RuntimeResult<()> {
        let record = self.require_idle(session, what).await?;
        let mut updated = record.clone();
        updated.loaded_skills.clear();
        if forget_approvals {
            updated.approved_tools.clear();
        }
        let mut batch = Batch::new();
        batch
            .push(Op::ClearContext {
                session_id: session.to_owned(),
            })
            .push(Op::UpdateSession(updated.clone()))
            .event(
                session,
                kind,
                events::context_cleared(session, record.turn_count),
            )
            .event(
                session,
                events::SESSION_WAITING,
                events::session_waiting(session, &updated.usage),
            );
        self.commit(batch).await?;
        Ok(())
    }

    /// Stored events from `from` on (at most `limit`, 0 = all).
    pub async fn events(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> RuntimeResult<Vec<StoredEvent>> {
        let limit = if limit == 0 { usize::MAX >> 1 } else { limit };
        Ok(self.inner.store.events(session, from, limit).await?)
    }

    /// One session.
    pub async fn session(&self, id: &str) -> RuntimeResult<Option<SessionRecord>> {
        Ok(self.inner.store.session(id).await?)
    }

    /// Sessions, newest first.
    pub async fn sessions(&self, filter: &SessionFilter) -> RuntimeResult<Vec<SessionRecord>> {
        Ok(self.inner.store.sessions(filter).await?)
    }

    /// What a person reads as a session's state: `failed` for a session at rest whose last turn
    /// failed (a model error, a limit), with that turn; else the stored status (`idle`,
    /// `running`, `waiting`). A failed session still takes the next message.
    pub async fn shown_status(&self, s: &SessionRecord) -> (&'static str, Option<TurnRecord>) {
        if s.status == SessionStatus::Idle
            && let Ok(Some(turn)) = self.inner.store.last_turn(&s.id).await
            && turn.status == TurnStatus::Failed
        {
            return ("failed", Some(turn));
        }
        (s.status.as_str(), None)
    }

    /// The first user message of a session, from its first events (which never change).
    pub async fn first_message(&self, id: &str) -> Option<String> {
        let events = self.events(id, 0, 8).await.ok()?;
        events
            .iter()
            .find(|e| e.kind == "message.received")
            .and_then(|e| e.data.get("message"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    /// Pending input requests of a session, and of its subagents' sessions (answerable here).
    pub async fn pending_inputs(&self, session: &str) -> RuntimeResult<Vec<InputRequestRecord>> {
        self.pending_in_tree(session).await
    }

    /// Starts a driver for every session with unfinished work (run once at start-up). Returns
    /// their ids.
    pub async fn resume_all(&self) -> RuntimeResult<Vec<String>> {
        let ids = self.inner.store.sessions_with_work().await?;
        for id in &ids {
            self.spawn_driver(id);
        }
        self.resume_hooks().await?;
        Ok(ids)
    }

    /// Picks up, until `shutdown`, work that other processes leave in the shared store: an
    /// approval answered by `eve sessions approve`, a message accepted by another process, a turn
    /// whose driver died, events their observe hooks have not acknowledged. Looks when the store
    /// reports another process's commit, and every lease interval anyway (a dead process commits
    /// nothing). Sessions a live process holds are left to it (their lease or delivery claim
    /// says so).
    pub fn watch_store(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let rt = self.clone();
        let mut foreign = self.inner.store.foreign_commits();
        // A dead holder's lease is found within a fifth of its TTL after it expires (a node of
        // a fleet continues a killed node's sessions within TTL + 1 s).
        let every = (self.inner.config.lease_ttl / 5)
            .clamp(Duration::from_millis(200), Duration::from_secs(3));
        tokio::spawn(async move {
            loop {
                let changed = async {
                    match foreign.as_mut() {
                        Some(rx) => {
                            if rx.changed().await.is_err() {
                                std::future::pending::<()>().await;
                            }
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                // Another process's commit may be new work for any session; the periodic look
                // is for dead holders, and a turn this process will wake itself has none.
                let committed = tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = changed => true,
                    () = tokio::time::sleep(every) => false,
                };
                let notified = foreign.is_some();
                match rt.inner.store.sessions_with_work().await {
                    Ok(ids) => {
                        let due = |id: &String| committed || !notified || !rt.wakes_later(id);
                        for id in ids.iter().filter(|id| !rt.is_active(id) && due(id)) {
                            rt.spawn_driver(id);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot look for sessions with work"),
                }
                // Events another process stored (an `eve run` turn) and left to its hooks.
                if let Err(e) = rt.resume_hooks().await {
                    tracing::warn!(error = %e, "cannot look for events behind their hooks");
                }
                // At most a few looks a second, however busy the other processes are.
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(WATCH_PAUSE) => {}
                }
            }
        })
    }

    /// Drives a session in this task until it has no work left or parks: finishes an unfinished
    /// turn, then takes accepted messages one turn at a time. If a driver of this process is
    /// already on it, waits for that one instead.
    pub async fn drive(&self, session: &str) -> RuntimeResult<DriveOutcome> {
        drive::drive(self, session).await
    }

    /// Waits until no driver of this process is working on the session.
    pub async fn settled(&self, session: &str) {
        let rx = {
            let Ok(active) = self.inner.active.lock() else {
                return;
            };
            match active.get(session).and_then(|a| a.done.as_ref()) {
                Some(done) => done.subscribe(),
                None => return,
            }
        };
        let mut rx = rx;
        while !*rx.borrow() {
            if rx.changed().await.is_err() {
                break;
            }
        }
    }

    // ---- internals -------------------------------------------------------------------------

    pub(crate) async fn commit(&self, batch: Batch) -> RuntimeResult<Committed> {
        let committed = self.commit_quietly(batch).await?;
        self.announce(&committed);
        Ok(committed)
    }

    /// [`Self::commit`], reading the session `id` with it ([`Store::commit_reading`]).
    pub(crate) async fn commit_reading(
        &self,
        mut batch: Batch,
        id: &str,
    ) -> RuntimeResult<(Committed, Option<SessionRecord>)> {
        self.inner.config.secrets.redact_batch(&mut batch);
        self.fence(&mut batch);
        let started = std::time::Instant::now();
        let (committed, session) = self.inner.store.commit_reading(batch, id).await?;
        self.inner.metrics.commit(started.elapsed());
        self.announce(&committed);
        Ok((committed, session))
    }

    /// Commits a batch without telling followers; every commit of the engine goes through here,
    /// so nothing it stores or streams holds a secret's value (see [`crate::redact`]).
    pub(crate) async fn commit_quietly(&self, mut batch: Batch) -> RuntimeResult<Committed> {
        self.inner.config.secrets.redact_batch(&mut batch);
        self.fence(&mut batch);
        let started = std::time::Instant::now();
        let committed = self.inner.store.commit(batch).await?;
        self.inner.metrics.commit(started.elapsed());
        Ok(committed)
    }

    /// The fencing token of the lease this runtime holds on `session`, if it holds it.
    pub(crate) fn fence_of(&self, session: &str) -> Option<u64> {
        self.inner
            .fences
            .lock()
            .ok()
            .and_then(|f| f.get(session).copied())
    }

    /// Removes this node's copies of the workspaces of `sessions` (deleted from the store): the
    /// folder `.eve/sandboxes/<session>/` and the index `.eve/workspaces/<session>.json`.
    /// Returns what could not be removed, with why.
    pub fn remove_local_workspaces(&self, sessions: &[String]) -> Vec<(PathBuf, std::io::Error)> {
        self.inner.workspaces.remove_local(sessions)
    }

    /// Adds the fencing token of every session the batch writes whose lease this runtime holds.
    fn fence(&self, batch: &mut Batch) {
        let Ok(fences) = self.inner.fences.lock() else {
            return;
        };
        if fences.is_empty() {
            return;
        }
        for op in &batch.ops {
            if let Some(session) = op.session_id()
                && let Some(token) = fences.get(session)
                && !batch.fences.iter().any(|f| f.session_id == session)
            {
                batch.fences.push(Fence {
                    session_id: session.to_owned(),
                    token: *token,
                });
            }
        }
    }

    /// The values this runtime shows as `${VAR}`.
    pub(crate) fn secrets(&self) -> &Arc<crate::redact::Secrets> {
        &self.inner.config.secrets
    }

    async fn require_session(&self, session: &str) -> RuntimeResult<SessionRecord> {
        self.inner
            .store
            .session(session)
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session.to_owned()))
    }

    /// The record of `session` when it is idle and no driver of this process works on it, for
    /// `what` (a clear, a compaction). A driver whose turn is over in the store (the session
    /// idle, `session.waiting` sent) still reads for more work and gives back its lease before it
    /// stops: a client that asks the moment it sees `session.waiting` waits for that, at most
    /// [`SETTLE_WAIT`], instead of being refused.
    pub(crate) async fn require_idle(
        &self,
        session: &str,
        what: &str,
    ) -> RuntimeResult<SessionRecord> {
        let mut record = self.require_session(session).await?;
        if record.status == SessionStatus::Idle && self.is_active(session) {
            let _ = tokio::time::timeout(SETTLE_WAIT, self.settled(session)).await;
            record = self.require_session(session).await?;
        }
        let driven = self.is_active(session);
        if record.status != SessionStatus::Idle || driven {
            return Err(RuntimeError::SessionNotActive {
                id: session.to_owned(),
                status: if driven && record.status == SessionStatus::Idle {
                    "running".to_owned()
                } else {
                    record.status.to_string()
                },
                what: what.to_owned(),
            });
        }
        Ok(record)
    }
}
