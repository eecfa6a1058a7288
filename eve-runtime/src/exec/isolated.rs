//! The `isolated` sandbox, the default: each process and all its descendants confined.
//!
//! The confinement itself is `eve_sandbox::isolate` (namespaces, a filesystem view with only the
//! system paths, the build's files read-only and the workspace writable, no capabilities,
//! Landlock, seccomp, limits, no terminal). This file turns a [`Launch`] into its policy: the
//! folders its `PATH` adds (each entry its own folder, chosen by `isolate::path_view`, never the
//! project, `.eve/`, eve's sockets or a credentials folder; what is left out is warned about once),
//! the private `HOME`, the limits, and, when the network is not `none`, a private egress proxy
//! whose socket is the sandbox's only way out (`HTTP_PROXY` and friends point at its forwarder
//! inside).
//!
//! Whether the kernel allows all this is probed once per runtime; when it does not, every launch
//! that needs isolation fails with the probe's reason: never silently unconfined.
//!
//! Once the probe has passed, the runtime keeps a pool of warm boxes (`eve_sandbox::isolate::Pool`,
//! one per runtime, never shared between runtimes): sandboxes whose helper processes and
//! namespaces exist before their call. A launch started through `Prepared::spawn_piped` hands its
//! policy, argv, environment, working folder and stdio to one of them ([`WarmCall`]); everything
//! the guarantees rest on (the view, the limits, the uid, Landlock, seccomp, the environment) is
//! still applied per call, and a box serves one call. With no box ready the cold path runs.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use eve_compile::Network;
use eve_sandbox::egress::{self, EgressConfig, EgressPolicy, Refusal};
use eve_sandbox::isolate::{self, LeftOut, Limits, Policy, Pool, Protected, Support, Warm};
use tokio::sync::OnceCell;

use super::fate::Fate;
use super::{
    Child, Confinement, Enforced, ExecConfig, ExecError, Guard, Launch, Pipes, Prepared, Process,
    Sandbox,
};

/// The loopback port the egress forwarder listens on inside a sandbox (any port works: the
/// network namespace is the process's own).
const PROXY_PORT: u16 = 3128;

/// Runs processes confined by `eve_sandbox::isolate`.
#[derive(Debug)]
pub(crate) struct IsolatedSandbox {
    config: ExecConfig,
    support: OnceCell<Result<Support, String>>,
    own_listeners: Mutex<Vec<SocketAddr>>,
    pool_size: usize,
    pool: OnceCell<Option<Arc<Pool>>>,
    /// Folders no `PATH` entry may bring into a view.
    protected: Vec<Protected>,
    /// `PATH` entries already said to be left out.
    warned: Mutex<BTreeSet<PathBuf>>,
    /// The last view `PATH` gave, for the calls that follow it closely (a turn's parallel calls):
    /// choosing one lists and resolves every entry, which costs more than the rest of a spawn's
    /// policy.
    last_view: Mutex<Option<RecentView>>,
    fate: Fate,
}

/// A view `PATH` gave, for whom and when.
#[derive(Debug)]
struct RecentView {
    path_var: String,
    home: Option<PathBuf>,
    at: std::time::Instant,
    view: isolate::PathView,
}

/// How long a computed view is reused for the same `PATH` and `HOME`.
const VIEW_REUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// One isolated launch, ready for a warm box.
#[derive(Debug)]
pub(super) struct WarmCall {
    pub(super) pool: Arc<Pool>,
    policy: Policy,
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    /// The launch's uid, held by the box until its cgroup is gone.
    uid: Option<eve_sandbox::isolate::UidLease>,
}

impl WarmCall {
    /// Hands the call to `warm` with fresh pipes; the caller falls back to the cold path on error.
    pub(super) fn start(self, warm: Warm, stdin: bool) -> std::io::Result<Process> {
        let pipes = Pipes::new(stdin)?;
        let mut child = warm
            .start(
                &self.policy,
                &self.program,
                &self.args,
                &self.env,
                &self.cwd,
                pipes.child_fds(),
            )
            .map_err(std::io::Error::other)?;
        if let Some(uid) = self.uid {
            child.hold_until_removed(Box::new(uid));
        }
        let (stdin, stdout, stderr) = pipes.process;
        Ok(Process {
            stdin,
            stdout: Some(stdout),
            stderr: Some(stderr),
            child: Child::Warm(child),
        })
    }
}

impl IsolatedSandbox {
    /// A sandbox that runs its stages through `config.helper`, keeping `pool_size` warm boxes
    /// ready once isolation has been probed (0: none).
    pub(crate) fn new(config: ExecConfig, pool_size: usize) -> Self {
        Self {
            protected: protected(&config),
            fate: Fate::new(&config),
            config,
            support: OnceCell::new(),
            own_listeners: Mutex::new(Vec::new()),
            pool_size,
            pool: OnceCell::new(),
            warned: Mutex::new(BTreeSet::new()),
            last_view: Mutex::new(None),
        }
    }

    /// What `path_var` (with `home`) adds to a view, warning once about each entry left out.
    fn path_view(&self, path_var: &str, home: Option<&Path>) -> isolate::PathView {
        let mut last = self
            .last_view
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(recent) = last.as_ref()
            && recent.path_var == path_var
            && recent.home.as_deref() == home
            && recent.at.elapsed() < VIEW_REUSE
        {
            return recent.view.clone();
        }
        let view = isolate::path_view(path_var, home, &self.protected);
        *last = Some(RecentView {
            path_var: path_var.to_owned(),
            home: home.map(Path::to_path_buf),
            at: std::time::Instant::now(),
            view: view.clone(),
        });
        drop(last);
        for left in self.first_time(&view.left_out) {
            tracing::warn!(
                entry = %left.entry.display(),
                reason = %left.reason,
                "a PATH entry is left out of the sandbox's view"
            );
        }
        view
    }

    /// The entries of `left` not said before, now marked as said.
    fn first_time(&self, left: &[LeftOut]) -> Vec<LeftOut> {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        left.iter()
            .filter(|l| warned.insert(l.entry.clone()))
            .cloned()
            .collect()
    }

    /// The `PATH` entries left out of the view `path_var` and `home` give, all of them, for the
    /// start-up report; the log does not repeat them afterwards.
    pub(crate) fn view_left_out(&self, path_var: &str, home: Option<&Path>) -> Vec<LeftOut> {
        let left = isolate::path_view(path_var, home, &self.protected).left_out;
        self.first_time(&left);
        left
    }

    /// Starts the pool of warm boxes, when isolation works here and it has not started yet.
    pub(super) async fn start_pool(&self) {
        if self.support().await.is_ok() {
            let _ = self.pool().await;
        }
    }

    /// The pool of warm boxes, started on first need (after the probe has passed).
    async fn pool(&self) -> Option<Arc<Pool>> {
        if self.pool_size == 0 {
            return None;
        }
        self.pool
            .get_or_init(|| async {
                let cgroups = self.fate.cgroups();
                match Pool::with_cgroups(self.config.helper.clone(), self.pool_size, cgroups) {
                    Ok(pool) => Some(Arc::new(pool)),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the pool of warm sandboxes; every isolated call starts cold");
                        None
                    }
                }
            })
            .await
            .clone()
    }

    /// What the kernel enforces here, or why isolation cannot run (probed once).
    pub(crate) async fn support(&self) -> Result<Support, String> {
        self.support
            .get_or_init(|| async {
                let helper = self.config.helper.clone();
                match tokio::task::spawn_blocking(move || isolate::probe(&helper)).await {
                    Ok(Ok(support)) => Ok(support),
                    Ok(Err(unsupported)) => Err(unsupported.message),
                    Err(e) => Err(format!("the sandbox probe did not finish: {e}")),
                }
            })
            .await
            .clone()
    }

    /// What is enforced for isolated calls with `limits`.
    pub(crate) fn enforced(&self, limits: &eve_compile::SandboxLimits) -> Enforced {
        self.fate.enforced(limits)
    }

    /// Tests only: see `Executor::set_shared_fate`.
    pub(super) fn set_shared_fate(&self, shared: bool) {
        self.fate.set_shared(shared);
    }

    /// eve's own listening addresses, which no egress proxy connects to.
    pub(crate) fn set_own_listeners(&self, addrs: Vec<SocketAddr>) {
        *self
            .own_listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = addrs;
    }

    pub(crate) fn own_listeners(&self) -> Vec<SocketAddr> {
        self.own_listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts the egress proxy of one process; returns it with the refusals it will record.
    async fn egress(
        &self,
        policy: EgressPolicy,
        refusals: Arc<Mutex<Vec<Refusal>>>,
    ) -> Result<egress::EgressHandle, ExecError> {
        let name = format!("egress-{}.sock", ulid::Ulid::new());
        let mut dir = self.config.run_dir.clone();
        // A Unix socket path holds at most 107 bytes: a deep project folder uses a private
        // folder under the system's temporary folder instead.
        if dir.join(&name).as_os_str().len() > 100 {
            dir = std::env::temp_dir().join(format!("eve-run-{}", nix::unistd::geteuid()));
        }
        create_private_dir(&dir)
            .map_err(|e| ExecError::Egress(format!("cannot create {}: {e}", dir.display())))?;
        let socket = dir.join(name);
        let mut config = EgressConfig::new(policy);
        config.own_listeners = self.own_listeners();
        config.on_refused = Arc::new(move |refusal: Refusal| {
            tracing::warn!(
                host = %refusal.host,
                port = refusal.port,
                reason = %refusal.reason,
                "the egress proxy refused a sandboxed process's connection"
            );
            refusals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(refusal);
        });
        egress::start(&socket, config)
            .await
            .map_err(|e| ExecError::Egress(format!("{}: {e}", socket.display())))
    }
}

#[async_trait::async_trait]
impl Sandbox for IsolatedSandbox {
    async fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, ExecError> {
        let Confinement::Isolated(spec) = launch.confinement else {
            return Err(ExecError::Policy(
                "an unconfined launch was handed to the isolated sandbox".to_owned(),
            ));
        };
        self.support().await.map_err(ExecError::Unsupported)?;
        let var = |name: &str| {
            launch
                .env
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let home = var(crate::env_vars::HOME)
            .map(PathBuf::from)
            .filter(|h| h.is_absolute() && h != Path::new("/"));
        let mut read_only = spec.read_only.clone();
        read_only.extend(
            self.path_view(var(crate::env_vars::PATH).unwrap_or(""), home.as_deref())
                .read_only,
        );
        read_only.sort();
        read_only.dedup();
        for path in &spec.read_write {
            if !path.is_dir() {
                return Err(ExecError::Policy(format!(
                    "the writable path {} does not exist (create it, or remove it from \
                     `write:` in sandbox/sandbox.yaml)",
                    path.display()
                )));
            }
        }
        let limits = spec.limits;
        let mut policy = Policy {
            read_only,
            read_write: spec.read_write.clone(),
            network: isolate::Network::None,
            limits: Limits {
                memory: Some(limits.memory),
                processes: Some(limits.processes),
                file_size: Some(limits.file_size),
                cpu_seconds: Some(limits.cpu_seconds),
                ..Limits::defaults()
            },
            uid: None,
            home,
            cgroup: None,
            quota: None,
        };
        let mut env: Vec<(String, String)> = launch.env.to_vec();
        let refusals = Arc::new(Mutex::new(Vec::new()));
        let egress = match &spec.network {
            Network::None => None,
            network => {
                let egress_policy = match network {
                    Network::All => EgressPolicy::All,
                    Network::Allow(entries) => {
                        EgressPolicy::allow_list(entries).map_err(|errors| {
                            ExecError::Policy(
                                errors
                                    .iter()
                                    .map(ToString::to_string)
                                    .collect::<Vec<_>>()
                                    .join("; "),
                            )
                        })?
                    }
                    Network::None => EgressPolicy::Allow(Vec::new()),
                };
                let handle = self.egress(egress_policy, refusals.clone()).await?;
                policy.network = isolate::Network::Proxy {
                    socket: handle.path().to_path_buf(),
                    port: PROXY_PORT,
                };
                let proxy = format!("http://127.0.0.1:{PROXY_PORT}");
                env.retain(|(k, _)| !is_proxy_var(k));
                for name in [
                    "HTTP_PROXY",
                    "HTTPS_PROXY",
                    "ALL_PROXY",
                    "http_proxy",
                    "https_proxy",
                    "all_proxy",
                ] {
                    env.push((name.to_owned(), proxy.clone()));
                }
                env.push(("NO_PROXY".to_owned(), String::new()));
                env.push(("no_proxy".to_owned(), String::new()));
                Some(handle)
            }
        };
        let fate = self.fate.apply(&mut policy, spec)?;
        if nix::unistd::geteuid().is_root() {
            for path in &policy.read_write {
                let owner = std::fs::metadata(path).map(|m| m.uid()).unwrap_or(0);
                if owner != policy.uid.unwrap_or(isolate::DEFAULT_UID) {
                    isolate::prepare_writable(path, &policy).map_err(|e| {
                        ExecError::Policy(format!(
                            "cannot hand {} to the sandbox user: {e}",
                            path.display()
                        ))
                    })?;
                }
            }
        }
        let std_command =
            isolate::command(&self.config.helper, &policy, launch.program, launch.args)
                .map_err(|e| ExecError::Policy(e.to_string()))?;
        let mut command = tokio::process::Command::from(std_command);
        command
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(launch.cwd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let warm = self.pool().await.map(|pool| WarmCall {
            pool,
            // A warm box brings its own cgroup.
            policy: Policy {
                cgroup: None,
                ..policy
            },
            program: launch.program.to_owned(),
            args: launch.args.to_vec(),
            env,
            cwd: launch.cwd.to_path_buf(),
            uid: fate.uid.clone(),
        });
        Ok(Prepared {
            command,
            guard: Guard {
                egress,
                refusals,
                fate,
            },
            warm,
            own_session: false,
            timed: None,
        })
    }
}

/// What no `PATH` entry may bring into a view: eve's state folder (the store, builds, every
/// session's workspace), the project holding it (the agent's source), and eve's private sockets.
fn protected(config: &ExecConfig) -> Vec<Protected> {
    let mut out = Vec::new();
    // `PATH` entries are absolute: so must these be, to be compared with them.
    let state = config
        .state_dir
        .as_ref()
        .map(|s| std::path::absolute(s).unwrap_or_else(|_| s.clone()));
    if let Some(state) = &state {
        out.push(Protected::new(state, "eve's state folder"));
        if let Some(project) = state.parent().filter(|p| !p.as_os_str().is_empty()) {
            out.push(Protected::new(project, "the project"));
        }
    }
    let sockets = std::env::temp_dir().join(format!("eve-run-{}", nix::unistd::geteuid()));
    let run_dir = std::path::absolute(&config.run_dir).unwrap_or_else(|_| config.run_dir.clone());
    for dir in [run_dir, sockets] {
        out.push(Protected::new(dir, "eve's private sockets"));
    }
    out
}

/// Whether `name` is a proxy setting a sandboxed process must not take from the server.
fn is_proxy_var(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "http_proxy" | "https_proxy" | "all_proxy" | "no_proxy"
    )
}

/// Creates `dir` (and its parents) usable by its owner only; refuses one owned by someone else.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(std::io::Error::other(
            "it is not a folder owned by eve's user",
        ));
    }
    let mut perms = meta.permissions();
    if perms.mode() & 0o077 != 0 {
        perms.set_mode(0o700);
        std::fs::set_permissions(dir, perms)?;
    }
    Ok(())
}
