//! The egress proxy: a sandboxed process's only way to the network.
//!
//! An `isolated` tool runs in a network namespace with no route out. Inside it a forwarder
//! listens on `127.0.0.1:PORT` (where `HTTP_PROXY`/`HTTPS_PROXY` point) and relays each TCP
//! connection byte for byte to the Unix socket this proxy listens on. The proxy reads one HTTP
//! request head per connection (`CONNECT host:port` or an absolute-form `GET http://…`), checks
//! the destination against the tool's [`EgressPolicy`], resolves it once, checks every resolved
//! address (loopback, link-local, unspecified, multicast, metadata, private ranges and this
//! host's own addresses only when a rule names the host or address explicitly; eve's own
//! listeners never), connects to the checked address itself (no second resolution, so DNS
//! rebinding cannot redirect it) and splices the bytes. A resolved address that fails the check
//! is never tried; the request is refused (`403`) only when none is left. `All` means the
//! internet: public addresses only. A rule naming a host matches requests for that name only,
//! not for the IPs it resolves to. The same decision ([`resolve`]) serves the runtime's own
//! requests for a tool, so both follow one set of rules.
//!
//! One proxy serves one sandboxed call: [`start`] binds the socket the caller chose, and dropping
//! the [`EgressHandle`] (or [`EgressHandle::shutdown`]) closes the socket and every connection
//! still open, so nothing a call opened outlives it, and each refusal reaches the callback of the
//! call that caused it.

mod head;
mod policy;
mod proxy;
mod resolve;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use policy::{
    EgressPolicy, Guarded, Permit, Rule, RuleError, canonical, classify, embedded_ipv4, guard,
    is_host_address, is_own_listener,
};
pub use resolve::{Denied, check_address, resolve};

/// A destination the proxy refused, reported to the caller (who records an event and tells the
/// model). The client got `403 Forbidden` with the same reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The host the client asked for, as it wrote it.
    pub host: String,
    /// The port the client asked for.
    pub port: u16,
    /// Why, in words fit for the model: "not in this tool's network allowlist", "…eve's own API",
    /// "loopback address 127.0.0.1 not listed by name".
    pub reason: String,
}

/// The caps that keep one proxy cheap and robust against a hostile client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressLimits {
    /// Largest request head accepted; a longer one is answered `431`.
    pub head_bytes: usize,
    /// Time a client has to send its whole request head; after it the connection is closed.
    pub head_timeout: Duration,
    /// Time to resolve the host and connect upstream; after it the client gets `502`.
    pub connect_timeout: Duration,
    /// Connections served at once; more are answered `503` and closed (beyond twice this many,
    /// closed without an answer).
    pub max_connections: usize,
}

impl Default for EgressLimits {
    fn default() -> Self {
        Self {
            head_bytes: 16 * 1024,
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            max_connections: 128,
        }
    }
}

/// Everything one proxy needs.
#[derive(Clone)]
pub struct EgressConfig {
    /// Where the tool may connect.
    pub policy: EgressPolicy,
    /// The socket addresses eve itself listens on (API, webhooks, …). Any destination on one of
    /// their ports that reaches this host is refused, whatever the policy says.
    pub own_listeners: Vec<std::net::SocketAddr>,
    /// Called once per refused destination, before the client gets its `403`.
    pub on_refused: Arc<dyn Fn(Refusal) + Send + Sync>,
    /// Size and time caps.
    pub limits: EgressLimits,
}

impl EgressConfig {
    /// A config with this policy, no own listeners, a callback that ignores refusals and the
    /// default limits.
    pub fn new(policy: EgressPolicy) -> Self {
        Self {
            policy,
            own_listeners: Vec::new(),
            on_refused: Arc::new(|_| {}),
            limits: EgressLimits::default(),
        }
    }
}

impl fmt::Debug for EgressConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressConfig")
            .field("policy", &self.policy)
            .field("own_listeners", &self.own_listeners)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A running proxy. Dropping it stops the proxy, closes every connection it holds and removes
/// the socket file.
#[derive(Debug)]
pub struct EgressHandle {
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl EgressHandle {
    /// The Unix socket the proxy listens on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops the proxy and waits until its listener and every connection are closed.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        // Drop removes the socket file.
    }
}

impl Drop for EgressHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `socket` (which must not exist yet) and serves the proxy on it until the returned handle
/// is dropped. Must be called inside a tokio runtime.
pub async fn start(socket: &Path, config: EgressConfig) -> io::Result<EgressHandle> {
    let listener = tokio::net::UnixListener::bind(socket)?;
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(proxy::serve(listener, Arc::new(config), stopped));
    Ok(EgressHandle {
        path: socket.to_path_buf(),
        stop: Some(stop),
        task: Some(task),
    })
}
