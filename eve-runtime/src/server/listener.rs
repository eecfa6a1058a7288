//! The accept loop every listener runs (session API, platform channels, the dev console): it is
//! reachable before authentication, so it alone keeps a hostile or broken client from holding the
//! server.
//!
//! It owns four limits, and each exists because a client can otherwise keep resources forever:
//! - a **header read timeout**: from the connection's start (first request) or from the first
//!   byte of a later request, the whole request head must arrive in time (one byte a second is
//!   not a request);
//! - a **body read timeout**: once the head is in, the request body must be read in full in time;
//! - an **idle keep-alive timeout**: a connection with no request in flight and no byte received
//!   is closed (a response being written, a Server-Sent Event stream for example, is not idle);
//! - a **connection cap** sized from the process's file-descriptor limit (the soft limit is raised
//!   to the hard one first), so accepting can never exhaust descriptors the store and tools need.
//!   At the cap the loop waits for a slot instead of accepting (new connections wait in the
//!   kernel's backlog and are served once one frees), says so once, and never stops; accept
//!   errors (`EMFILE`…) back off instead of spinning.
//!
//! hyper's own `header_read_timeout` runs from the end of one response to the next head, which
//! folds idle time into the header budget; a small per-connection watchdog here keeps the three
//! phases apart and closes the connection (drops it) when a phase overstays.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use super::error::ServerError;
use crate::env_vars;

/// Default header read timeout.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default body read timeout.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default idle keep-alive timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
/// File descriptors kept free of connections for the store, tool processes, MCP servers and
/// model calls (at least; an eighth of the limit when that is more).
const RESERVED_FDS: u64 = 256;
/// Fewest connections the cap allows, whatever the descriptor limit.
const MIN_CONNECTIONS: usize = 16;

/// Limits of one listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Longest wait for a request's head.
    pub header_timeout: Duration,
    /// Longest wait for a request's body, from the end of its head.
    pub body_timeout: Duration,
    /// Longest time a connection stays open with nothing in flight and nothing received.
    pub idle_timeout: Duration,
    /// Most connections open at once; `None`: sized from the file-descriptor limit.
    pub max_connections: Option<usize>,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: None,
        }
    }
}

impl ListenerLimits {
    /// The defaults, overridden by `EVE_HEADER_TIMEOUT_SECS`, `EVE_BODY_TIMEOUT_SECS`,
    /// `EVE_IDLE_TIMEOUT_SECS` and `EVE_MAX_CONNECTIONS` read through `env`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ServerError> {
        let mut limits = Self::default();
        let seconds = |name: &str| -> Result<Option<Duration>, ServerError> {
            let Some(raw) = env(name) else {
                return Ok(None);
            };
            raw.trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s < 1.0e9)
                .map(|s| Some(Duration::from_secs_f64(s)))
                .ok_or_else(|| ServerError::InvalidSetting {
                    file: name.to_owned(),
                    message: format!(
                        "`{raw}` is not a positive number of seconds: set it like `{name}=30`"
                    ),
                })
        };
        if let Some(d) = seconds(env_vars::EVE_HEADER_TIMEOUT_SECS)? {
            limits.header_timeout = d;
        }
        if let Some(d) = seconds(env_vars::EVE_BODY_TIMEOUT_SECS)? {
            limits.body_timeout = d;
        }
        if let Some(d) = seconds(env_vars::EVE_IDLE_TIMEOUT_SECS)? {
            limits.idle_timeout = d;
        }
        if let Some(raw) = env(env_vars::EVE_MAX_CONNECTIONS) {
            let n = raw
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ServerError::InvalidSetting {
                    file: env_vars::EVE_MAX_CONNECTIONS.to_owned(),
                    message: format!(
                        "`{raw}` is not a positive number of connections: set it like `{}=10000`",
                        env_vars::EVE_MAX_CONNECTIONS
                    ),
                })?;
            limits.max_connections = Some(n);
        }
        Ok(limits)
    }

    /// The connection cap in force: the configured one, or the descriptor limit less a reserve.
    pub fn connection_cap(&self) -> usize {
        if let Some(n) = self.max_connections {
            return n;
        }
        let fds = raise_fd_limit();
        let reserve = RESERVED_FDS.max(fds / 8);
        usize::try_from(fds.saturating_sub(reserve))
            .unwrap_or(usize::MAX)
            .max(MIN_CONNECTIONS)
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit then in force.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 1024,
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` fires; then stops accepting,
/// asks open connections to close after their current request, and returns once they have.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    limits: ListenerLimits,
) -> Result<(), ServerError> {
    let cap = limits.connection_cap();
    let slots = Arc::new(Semaphore::new(cap));
    let limits = Arc::new(limits);
    let mut at_cap_said = false;
    let mut backoff = Duration::from_millis(5);
    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => {
                at_cap_said = false;
                p
            }
            Err(_) => {
                if !at_cap_said {
                    tracing::warn!(
                        cap,
                        "connection cap reached: new connections wait until one closes \
                         (set EVE_MAX_CONNECTIONS or raise the file-descriptor limit)"
                    );
                    at_cap_said = true;
                }
                tokio::select! {
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    () = shutdown.cancelled() => break,
                }
            }
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = Duration::from_millis(5);
                accepted
            }
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "accept failed");
                drop(permit);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shutdown.cancelled() => break,
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let limits = limits.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, &limits, shutdown).await;
            drop(permit);
        });
    }
    // Every slot back means every connection has closed.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    Ok(())
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// What the watchdog of one connection sees.
struct Activity {
    start: Instant,
    /// Requests whose response has not been written in full.
    in_flight: AtomicUsize,
    /// Request bodies not yet read to their end.
    bodies_open: AtomicUsize,
    /// Milliseconds since `start` of the last phase change (idle since, request head received).
    mark_ms: AtomicU64,
    /// Milliseconds since `start` of the first byte read while idle; `u64::MAX`: none yet.
    first_byte_ms: AtomicU64,
    /// Whether a request has been received on this connection.
    served: AtomicBool,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            bodies_open: AtomicUsize::new(0),
            mark_ms: AtomicU64::new(0),
            first_byte_ms: AtomicU64::new(u64::MAX),
            served: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    fn read_some(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.first_byte_ms.load(Ordering::Acquire) == u64::MAX
        {
            self.first_byte_ms.store(self.now_ms(), Ordering::Release);
            self.changed.notify_one();
        }
    }

    fn request_started(&self, has_body: bool) {
        self.served.store(true, Ordering::Release);
        if has_body {
            self.bodies_open.fetch_add(1, Ordering::AcqRel);
        }
        self.mark_ms.store(self.now_ms(), Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
    }

    fn body_done(&self) {
        self.bodies_open.fetch_sub(1, Ordering::AcqRel);
        self.changed.notify_one();
    }

    fn response_done(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.first_byte_ms.store(u64::MAX, Ordering::Release);
            self.mark_ms.store(self.now_ms(), Ordering::Release);
        }
        self.changed.notify_one();
    }

    /// When the current phase must end; `None`: no limit (a response is being written).
    fn deadline(&self, limits: &ListenerLimits) -> Option<Instant> {
        let mark = self.at(self.mark_ms.load(Ordering::Acquire));
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return (self.bodies_open.load(Ordering::Acquire) > 0)
                .then(|| mark + limits.body_timeout);
        }
        if !self.served.load(Ordering::Acquire) {
            return Some(self.start + limits.header_timeout);
        }
        match self.first_byte_ms.load(Ordering::Acquire) {
            u64::MAX => Some(mark + limits.idle_timeout),
            first => Some(self.at(first) + limits.header_timeout),
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: &ListenerLimits,
    shutdown: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let service = ConnService {
        router,
        activity: activity.clone(),
        peer,
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, hyper_util::service::TowerToHyperService::new(service))
        .with_upgrades();
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let deadline = activity.deadline(limits);
        let notified = activity.changed.notified();
        let expired = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = conn.as_mut() => return,
            () = notified => {}
            () = expired => {
                // Re-read: the phase may have changed as the timer fired.
                if activity.deadline(limits).is_some_and(|at| at <= Instant::now()) {
                    tracing::debug!("closing a connection that overstayed its read or idle timeout");
                    return;
                }
            }
            () = shutdown.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The socket, noting each read for the watchdog.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_some();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The router, with each request's body and response watched, and the connection's peer
/// address attached (`ConnectInfo<SocketAddr>`: an API without auth answers loopback peers only).
#[derive(Clone)]
struct ConnService {
    router: Router,
    activity: Arc<Activity>,
    peer: SocketAddr,
}

impl Service<axum::http::Request<Incoming>> for ConnService {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<Incoming>) -> Self::Future {
        let has_body = !http_body::Body::is_end_stream(request.body());
        self.activity.request_started(has_body);
        let guard = ResponseGuard(self.activity.clone());
        let mut request = request.map(|body| {
            Body::new(WatchedBody {
                inner: body,
                activity: has_body.then(|| self.activity.clone()),
            })
        });
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        let mut router = self.router.clone();
        Box::pin(async move {
            let response = match router.call(request).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok(response.map(|body| {
                Body::new(GuardedBody {
                    inner: body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// A request body that tells the watchdog when it has been read to its end (or dropped).
struct WatchedBody {
    inner: Incoming,
    activity: Option<Arc<Activity>>,
}

impl WatchedBody {
    fn finish(&mut self) {
        if let Some(a) = self.activity.take() {
            a.body_done();
        }
    }
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        self.finish();
    }
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.finish(),
            _ => {
                if self.inner.is_end_stream() {
                    self.finish();
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Marks the request's response as written when hyper drops its body.
struct ResponseGuard(Arc<Activity>);

impl Drop for ResponseGuard {
    fn drop(&mut self) {
        self.0.response_done();
    }
}

struct GuardedBody {
    inner: Body,
    _guard: ResponseGuard,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
