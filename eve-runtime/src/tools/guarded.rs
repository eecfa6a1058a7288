//! The HTTP client of the requests the runtime makes for a tool, under the tool's network policy
//! (`http:` tools; MCP servers over Streamable HTTP, limited to the origin their `url:` names).
//!
//! An `http:` tool's request leaves from eve's own process, not from a box, so no egress proxy
//! stands in its way: this module applies the box's rules (`eve_sandbox::egress::resolve`, the
//! same code) at the same depth. Before the request, the URL's host and port are checked against
//! the policy, and an IP literal's address against the guarded ranges; at every connection, eve
//! resolves the name itself, checks every address, and hands only the checked ones to the
//! connector, so no second lookup can rebind the name; at every redirect hop the new URL is
//! checked again before it is followed. A proxy set in eve's environment is not used for these
//! requests: it would choose the address in eve's place.
//!
//! Clients are cached per (policy, port, eve's own listeners): the resolver of a client knows the
//! port its connections go to (redirects are followed within one origin only, so every
//! connection of one request has the same port), and calls under the same rules share a pool.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use eve_sandbox::egress::{self, Denied, EgressPolicy};
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Time to resolve a name; the call's own timeout bounds the rest.
const RESOLVE_LIMIT: Duration = Duration::from_secs(10);
/// Time to connect to one address (a request's own timeout bounds the rest; a stream that
/// follows a live turn has none, so a black-holed address must not hold it for minutes).
const CONNECT_LIMIT: Duration = Duration::from_secs(10);
/// Clients kept at most; the cache starts over beyond it.
const MAX_CLIENTS: usize = 64;

/// The egress rules of one request: where the tool may connect, and eve's own listeners (never).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Egress {
    /// The tool's policy.
    pub(crate) policy: EgressPolicy,
    /// eve's own listening addresses.
    pub(crate) own: Vec<SocketAddr>,
}

/// A destination the rules refused, carried through reqwest's error chain to the tool's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestRefused {
    /// The host as the URL names it (IPv6 in brackets).
    pub(crate) host: String,
    /// The port.
    pub(crate) port: u16,
    /// Why, in words fit for the model.
    pub(crate) reason: String,
    /// Refused as the destination of a redirect.
    pub(crate) redirect: bool,
}

impl std::fmt::Display for RequestRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.redirect { "a redirect to " } else { "" };
        write!(
            f,
            "eve refused {what}{}:{}: {}",
            self.host, self.port, self.reason
        )
    }
}

impl std::error::Error for RequestRefused {}

/// The HTTP client of the HTTP tools of one runtime: clients built on first use per set of
/// egress rules, then shared by every call under the same rules. Cheap to clone; clones share
/// the clients. Each runtime holds its own, so two runtimes in one process share no connections.
#[derive(Clone, Default)]
pub struct HttpClient(Arc<Mutex<HashMap<(Egress, u16), reqwest::Client>>>);

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client with nothing built yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The client for requests to `port` under `egress`.
    pub(crate) fn client(&self, egress: &Egress, port: u16) -> Result<reqwest::Client, String> {
        let key = (egress.clone(), port);
        let mut clients = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = build(egress, port)?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// A client limited to the origin of `url` (its host and port, listed by name), for a
/// connection the author configured (MCP over Streamable HTTP): what the URL names is reached,
/// redirects stay within it, eve's own listeners never. `Err` says why the URL cannot be used.
pub(crate) fn origin_client(url: &Url, own: Vec<SocketAddr>) -> Result<reqwest::Client, String> {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Err("the URL has no host".to_owned());
    };
    let rule = format!("{host}:{port}")
        .parse::<eve_sandbox::egress::Rule>()
        .map_err(|e| e.to_string())?;
    let egress = Egress {
        policy: EgressPolicy::Allow(vec![rule]),
        own,
    };
    check_url(url, &egress).map_err(|refused| refused.to_string())?;
    build(&egress, port)
}

fn build(egress: &Egress, port: u16) -> Result<reqwest::Client, String> {
    build_with(egress, port, true)
}

/// A client under `egress` for connections to `port` that follows no redirect at all (a 3xx
/// comes back as the answer), for requests whose redirects carry meaning of their own (OAuth
/// token and registration requests, the authorization redirect).
pub(crate) fn no_redirect_client(egress: &Egress, port: u16) -> Result<reqwest::Client, String> {
    build_with(egress, port, false)
}

fn build_with(egress: &Egress, port: u16, follow: bool) -> Result<reqwest::Client, String> {
    let rules = Arc::new(egress.clone());
    let hops = rules.clone();
    reqwest::Client::builder()
        .user_agent(concat!("eve/", env!("CARGO_PKG_VERSION")))
        // Templated headers and query secrets must not follow a redirect to another origin:
        // redirects are followed within the origin only (a cross-origin one comes back to the
        // tool as the 3xx answer), each hop checked against the rules first, and no `Referer`.
        .redirect(reqwest::redirect::Policy::custom(
            move |attempt| match check_url(attempt.url(), &hops) {
                Err(refused) => attempt.error(RequestRefused {
                    redirect: true,
                    ..refused
                }),
                Ok(()) if !follow => attempt.stop(),
                Ok(()) => same_origin_redirects(attempt),
            },
        ))
        .referer(false)
        .connect_timeout(CONNECT_LIMIT)
        .no_proxy()
        .dns_resolver(Arc::new(CheckedResolver::new(rules, port)))
        .build()
        .map_err(|e| e.to_string())
}

/// Checks a URL against the rules before it is requested (the first one, and every redirect
/// hop): http or https, a host and port the policy allows, and for an IP literal the address
/// itself. A name's addresses are checked when it is resolved, by [`CheckedResolver`].
pub(crate) fn check_url(url: &Url, egress: &Egress) -> Result<(), RequestRefused> {
    let port = url.port_or_known_default().unwrap_or(0);
    // The URL parser has already turned every IPv4 spelling (`2130706433`, `127.1`) into its
    // dotted form and bracketed IPv6.
    let host = url.host_str().unwrap_or_default().to_owned();
    let ip = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::IpAddr>().ok(),
        None => host.parse::<std::net::IpAddr>().ok(),
    };
    let refuse = |reason: String| RequestRefused {
        host: host.clone(),
        port,
        reason,
        redirect: false,
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse(format!("`{}:` is not http or https", url.scheme())));
    }
    if host.is_empty() {
        return Err(refuse("the URL has no host".to_owned()));
    }
    let Some(permit) = egress.policy.permits(&host, port) else {
        let reason = match &egress.policy {
            EgressPolicy::Allow(rules) if rules.is_empty() => {
                "this tool's `network: none` allows no destination".to_owned()
            }
            _ => "not in this tool's network allowlist".to_owned(),
        };
        return Err(refuse(reason));
    };
    if let Some(ip) = ip {
        egress::check_address(SocketAddr::new(ip, port), permit, &egress.own).map_err(refuse)?;
    }
    Ok(())
}

/// Rules a name's addresses are checked against as it is resolved: a tool's egress rules
/// ([`Egress`]) or the agent's `web:` rules (`web::rules::WebRules`).
pub(crate) trait NameRules: Send + Sync + 'static {
    /// Resolves `host` once for a connection to `port`: the addresses that pass, or why none
    /// does.
    fn resolve_checked(
        &self,
        host: &str,
        port: u16,
    ) -> impl std::future::Future<Output = Result<Vec<SocketAddr>, Denied>> + Send;
}

impl NameRules for Egress {
    async fn resolve_checked(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Denied> {
        egress::resolve(host, port, &self.policy, &self.own, RESOLVE_LIMIT).await
    }
}

/// Resolves a name once, through `rules`, for connections to one port, and hands the connector
/// only the addresses that passed (no second lookup can rebind the name). A refusal is a
/// [`RequestRefused`] in the request's error chain ([`refusal_in`]).
pub(crate) struct CheckedResolver<R> {
    rules: Arc<R>,
    port: u16,
}

impl<R> CheckedResolver<R> {
    /// The resolver of connections to `port` under `rules`.
    pub(crate) fn new(rules: Arc<R>, port: u16) -> Self {
        Self { rules, port }
    }
}

impl<R: NameRules> Resolve for CheckedResolver<R> {
    fn resolve(&self, name: Name) -> Resolving {
        let rules = self.rules.clone();
        let port = self.port;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match rules.resolve_checked(&host, port).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                Err(Denied::Refused(reason)) => Err(Box::new(RequestRefused {
                    host,
                    port,
                    reason,
                    redirect: false,
                })
                    as Box<dyn std::error::Error + Send + Sync>),
                Err(other) => Err(other.to_string().into()),
            }
        })
    }
}

/// The rules' refusal somewhere in an error's chain of sources, if that is why it failed.
pub(crate) fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<RequestRefused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<RequestRefused>() {
            return Some(refused.clone());
        }
        current = e.source();
    }
    None
}

/// The redirect policy of HTTP tools: follow up to 10 redirects that keep the scheme, host and
/// port of the first request; stop (answer the 3xx) at one that changes origin.
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let origin = |u: &Url| {
        (
            u.scheme().to_owned(),
            u.host_str().map(str::to_owned),
            u.port_or_known_default(),
        )
    };
    let same = attempt
        .previous()
        .first()
        .is_some_and(|first| origin(first) == origin(attempt.url()));
    if !same || attempt.previous().len() > 10 {
        attempt.stop()
    } else {
        attempt.follow()
    }
}

/// Why [`read_capped`] returned no body.
#[derive(Debug)]
pub(crate) enum CappedRead {
    /// The answer was longer than the cap (reading stopped there).
    TooLarge,
    /// The connection failed while the body streamed.
    Failed(reqwest::Error),
}

/// The body of `response`, at most `max` bytes: a longer answer is refused while it streams,
/// never held whole in memory (a hostile or broken server's endless answer).
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, CappedRead> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(CappedRead::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(CappedRead::Failed)? {
        if body.len() + chunk.len() > max {
            return Err(CappedRead::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
