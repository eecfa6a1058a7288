//! How a [`Runtime`](super::Runtime) is set up: its store, model resolution, environment,
//! lease and breaker settings, and the sandbox helper, gathered in [`RuntimeConfig`] before the
//! runtime starts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use eve_compile::Agent;

use super::RuntimeResult;
use crate::model::{ModelClient, ModelError};
use crate::store::{SqliteStore, Store};
use crate::tools::{EnvLookup, process_env};

/// A model ready to call, resolved for one agent.
#[derive(Clone)]
pub struct ResolvedModel {
    /// The client.
    pub client: Arc<dyn ModelClient>,
    /// Model name as the provider knows it (no `provider/` prefix).
    pub model: String,
    /// `provider/model`, as shown in events.
    pub model_id: String,
    /// Context window from configuration, if known without asking the provider.
    pub context_window: Option<u64>,
    /// Price per million input and output tokens in US dollars, if known.
    pub price_per_million: Option<(f64, f64)>,
}

impl std::fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("model_id", &self.model_id)
            .finish_non_exhaustive()
    }
}

/// Resolves the model of an agent (settings precedence lives with the caller).
pub trait ModelProvider: Send + Sync {
    /// The model for this agent.
    fn resolve(&self, agent: &Agent) -> Result<ResolvedModel, ModelError>;

    /// The model for this agent in the session tree whose root session is `root` (a root
    /// session's own id; a subagent session's root's). A provider that resolves every session
    /// alike keeps this default; `eve eval` resolves each case's `mock` script by its session.
    fn resolve_in(&self, agent: &Agent, root: &str) -> Result<ResolvedModel, ModelError> {
        let _ = root;
        self.resolve(agent)
    }
}

/// Circuit breaker settings.
#[derive(Debug, Clone, Copy)]
pub struct BreakerPolicy {
    /// Consecutive failures in one session that open the tool's breaker in that session.
    pub(crate) threshold: u32,
    /// First open period.
    pub(crate) base: Duration,
    /// Longest open period.
    pub(crate) max: Duration,
    /// Distinct sessions whose breaker of one tool must open within [`Self::agent_window`] for
    /// the tool to be refused in every session.
    pub(crate) agent_sessions: u32,
    /// How far back the sessions of [`Self::agent_sessions`] are counted.
    pub(crate) agent_window: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self {
            threshold: 3,
            base: Duration::from_secs(30),
            max: Duration::from_secs(600),
            agent_sessions: 3,
            agent_window: Duration::from_secs(600),
        }
    }
}

/// How long a session lease lasts without renewal unless configured (`EVE_LEASE_TTL_MS`): a
/// killed node's sessions are continued by another within about this long.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

/// How a [`Runtime`] is set up.
pub struct RuntimeConfig {
    /// The project's state folder (`<root>/.eve`): builds, sandboxes.
    pub state_dir: PathBuf,
    /// The store.
    pub store: Arc<dyn Store>,
    /// Model resolution.
    pub models: Arc<dyn ModelProvider>,
    /// Environment seen by tools (`${VAR}` and `env:` allowlists).
    pub env: EnvLookup,
    /// Start a driver in the background whenever work is accepted (a server); when `false` the
    /// caller calls [`Runtime::drive`] (a one-shot CLI).
    pub autostart: bool,
    /// How long a session lease lasts without renewal.
    pub lease_ttl: Duration,
    /// Circuit breaker settings.
    pub breaker: BreakerPolicy,
    /// The binary that runs the isolated sandbox's stages (one whose `main` starts with
    /// `eve_sandbox::isolate::helper_main()`): by default the small `eve-sandbox-helper` installed
    /// next to the running binary, else the running `eve` binary itself
    /// (`eve_sandbox::isolate::default_helper`).
    pub sandbox_helper: PathBuf,
    /// The values shown as `${VAR}` wherever the runtime writes or shows text; share it with the
    /// process's log writer so logs are redacted the same way.
    pub secrets: Arc<crate::redact::Secrets>,
    /// Every root session (with its subagent sessions) is a world of its own: what sessions
    /// otherwise share (notes of the `agent` and `user` memory scopes, a tool's per-agent circuit
    /// breaker) is kept per root session. `eve eval` runs every case on one store with this on,
    /// so no case sees what another wrote. Off by default.
    pub isolated_roots: bool,
}

impl RuntimeConfig {
    /// Defaults for a project whose state folder is `state_dir`, with the SQLite store at
    /// `<state_dir>/eve.db`.
    pub fn new(
        state_dir: impl Into<PathBuf>,
        models: Arc<dyn ModelProvider>,
    ) -> RuntimeResult<Self> {
        let state_dir = state_dir.into();
        let store = SqliteStore::open(state_dir.join("eve.db"))?;
        Ok(Self::with_store(state_dir, Arc::new(store), models))
    }

    /// Defaults for a project whose state folder is `state_dir`, on the store it is given (any
    /// backend).
    pub fn with_store(
        state_dir: impl Into<PathBuf>,
        store: Arc<dyn Store>,
        models: Arc<dyn ModelProvider>,
    ) -> Self {
        Self {
            state_dir: state_dir.into(),
            store,
            models,
            env: process_env(),
            autostart: true,
            lease_ttl: DEFAULT_LEASE_TTL,
            breaker: BreakerPolicy::default(),
            sandbox_helper: eve_sandbox::isolate::default_helper(),
            secrets: Arc::new(crate::redact::Secrets::new()),
            isolated_roots: false,
        }
    }
}
