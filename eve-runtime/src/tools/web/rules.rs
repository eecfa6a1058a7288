//! The egress rules of `web_fetch`: the agent's `web:` policy over the box's guarded addresses.
//!
//! `web_fetch` runs on the runtime, not in a box, so it applies the egress proxy's rules itself
//! at the same depth as `http:` tools do ([`super::super::guarded`]): every URL it is about to
//! request (the first one and every redirect hop) is checked (scheme, no user info, the host
//! against `web.deny`/`web.allow`/`web.public`, an IP literal's address); every name is resolved
//! once, by eve, every resolved address checked, and only the checked ones are handed to the
//! connector, so no second lookup can rebind the name. An address is refused when it is eve's own
//! listener (always), in `web.deny`, or guarded (loopback, link-local, metadata, private ranges,
//! this host's own addresses: `eve_sandbox::egress::check_address`, the box's decision) unless
//! `web.allow` names the host or a range holding the address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use eve_sandbox::egress::{self, Denied, Permit, Rule};
use ipnet::IpNet;
use reqwest::Url;

use crate::tools::guarded::{CheckedResolver, NameRules, RequestRefused};

/// Time to resolve a name; the call's own time limit bounds the rest.
const RESOLVE_LIMIT: Duration = Duration::from_secs(10);

/// `web:`'s lists, parsed, with eve's own listeners.
#[derive(Debug, Clone, Default)]
pub(crate) struct WebRules {
    public: bool,
    allow: Entries,
    deny: Entries,
    own: Vec<SocketAddr>,
}

/// The entries of one list: host rules (names, `*.suffix`, IP literals) and address ranges.
#[derive(Debug, Clone, Default)]
struct Entries {
    hosts: Vec<Rule>,
    nets: Vec<IpNet>,
}

impl Entries {
    fn parse(list: &[String], key: &str) -> Result<Self, String> {
        let mut out = Self::default();
        for entry in list {
            let e = entry.trim();
            if e.contains('/') {
                let net = e
                    .trim_start_matches('[')
                    .replace("]/", "/")
                    .parse::<IpNet>()
                    .map_err(|_| format!("`web.{key}` entry `{e}` is not a CIDR range"))?;
                out.nets.push(net.trunc());
                continue;
            }
            let rule = e
                .parse::<Rule>()
                .map_err(|err| format!("`web.{key}`: {err}"))?;
            // An address without a port also stands for itself as a range, so a name that
            // resolves to it is matched too.
            let bare = e.trim_start_matches('[').trim_end_matches(']');
            if let Ok(ip) = bare.parse::<IpAddr>() {
                out.nets.push(IpNet::from(egress::canonical(ip)));
            }
            out.hosts.push(rule);
        }
        Ok(out)
    }

    /// The rule matching `host:port`, if any.
    fn host(&self, host: &str, port: u16) -> Option<&Rule> {
        self.hosts.iter().find(|r| r.matches(host, port))
    }

    /// Whether a range holds `ip` (or the IPv4 address an IPv6 form of it carries).
    fn holds(&self, ip: IpAddr) -> bool {
        let ip = egress::canonical(ip);
        let embedded = match ip {
            IpAddr::V6(v6) => egress::embedded_ipv4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.nets
            .iter()
            .any(|n| n.contains(&ip) || embedded.is_some_and(|e| n.contains(&e)))
    }
}

/// How a host passed the lists, which decides what its addresses may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// `web.allow` names it: guarded addresses too.
    Listed,
    /// Public internet (or a `*.suffix` of `web.allow`): guarded addresses only in a listed range.
    Public,
    /// Only a listed range lets it through (`public: false`, no host entry).
    RangesOnly,
}

impl WebRules {
    /// The rules of `web`, with eve's own listeners; `Err` names a bad entry.
    pub(crate) fn new(web: &eve_compile::Web, own: Vec<SocketAddr>) -> Result<Self, String> {
        Ok(Self {
            public: web.public,
            allow: Entries::parse(&web.allow, "allow")?,
            deny: Entries::parse(&web.deny, "deny")?,
            own,
        })
    }

    fn pass(&self, host: &str, port: u16) -> Result<Pass, String> {
        if let Some(rule) = self.deny.host(host, port) {
            return Err(format!("`{rule}` is in this agent's `web.deny`"));
        }
        match self.allow.host(host, port) {
            Some(rule) if rule.is_explicit() => Ok(Pass::Listed),
            Some(_) => Ok(Pass::Public),
            None if self.public => Ok(Pass::Public),
            None if !self.allow.nets.is_empty() => Ok(Pass::RangesOnly),
            None => Err("not in this agent's `web.allow` (`web.public: false`)".to_owned()),
        }
    }

    fn address(&self, addr: SocketAddr, pass: Pass) -> Result<(), String> {
        if egress::is_own_listener(addr, &self.own) {
            return Err(format!(
                "{addr} is eve's own API, which tools may never reach"
            ));
        }
        let ip = egress::canonical(addr.ip());
        if self.deny.holds(ip) {
            return Err(format!("{ip} is in this agent's `web.deny`"));
        }
        if self.allow.holds(ip) {
            return Ok(());
        }
        match pass {
            Pass::Listed => Ok(()),
            Pass::RangesOnly => Err(format!(
                "{ip} is not in this agent's `web.allow` (`web.public: false`)"
            )),
            Pass::Public => egress::check_address(addr, Permit { explicit: false }, &self.own)
                .map_err(|why| format!("{why} in `web.allow`")),
        }
    }

    /// Checks a URL before it is requested (the first one and every redirect hop): http or
    /// https, no user name or password, a host the lists let through, and for an IP literal its
    /// address. A name's addresses are checked when it is resolved ([`Self::resolve`]).
    pub(crate) fn check_url(&self, url: &Url) -> Result<(), RequestRefused> {
        let port = url.port_or_known_default().unwrap_or(0);
        // The URL parser has already turned every IPv4 spelling (`2130706433`, `0x7f.1`,
        // `0177.0.0.1`) into its dotted form and bracketed IPv6.
        let host = url.host_str().unwrap_or_default().to_owned();
        let refuse = |reason: String| RequestRefused {
            host: host.clone(),
            port,
            reason,
            redirect: false,
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refuse(format!("`{}:` is not http or https", url.scheme())));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refuse(
                "a URL with a user name or password is not fetched".to_owned(),
            ));
        }
        if host.is_empty() {
            return Err(refuse("the URL has no host".to_owned()));
        }
        let pass = self.pass(&host, port).map_err(refuse)?;
        let ip = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => v6.parse::<IpAddr>().ok(),
            None => host.parse::<IpAddr>().ok(),
        };
        if let Some(ip) = ip {
            self.address(SocketAddr::new(ip, port), pass)
                .map_err(refuse)?;
        }
        Ok(())
    }

    /// Resolves `host` once for a connection to `port` and returns the addresses that pass;
    /// refused only when none does (the [`CheckedResolver`] of `web_fetch`'s clients).
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Denied> {
        let pass = self.pass(host, port).map_err(Denied::Refused)?;
        let found = match tokio::time::timeout(RESOLVE_LIMIT, tokio::net::lookup_host((host, port)))
            .await
        {
            Ok(Ok(found)) => found.collect::<Vec<_>>(),
            Ok(Err(e)) => return Err(Denied::Unresolved(format!("cannot resolve `{host}`: {e}"))),
            Err(_) => {
                return Err(Denied::Unresolved(format!(
                    "resolving `{host}` took too long"
                )));
            }
        };
        let mut refusal = None;
        let allowed: Vec<SocketAddr> = found
            .into_iter()
            .filter(|a| match self.address(*a, pass) {
                Ok(()) => true,
                Err(why) => {
                    refusal.get_or_insert(why);
                    false
                }
            })
            .collect();
        if allowed.is_empty() {
            return Err(match refusal {
                Some(why) => Denied::Refused(why),
                None => Denied::Unresolved(format!("`{host}` resolved to no address")),
            });
        }
        Ok(allowed)
    }
}

/// A client for requests to `port` under `rules`: redirects are not followed (the caller checks
/// and follows each hop), no proxy from eve's environment (it would choose the address in eve's
/// place), no `Referer`, names resolved through the rules. `rules: None` is the test-only client
/// without checks.
pub(crate) fn client(rules: Option<Arc<WebRules>>, port: u16) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("eve/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .no_proxy()
        .connect_timeout(Duration::from_secs(10));
    if let Some(rules) = rules {
        builder = builder.dns_resolver(Arc::new(CheckedResolver::new(rules, port)));
    }
    builder.build().map_err(|e| e.to_string())
}

impl NameRules for WebRules {
    async fn resolve_checked(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Denied> {
        self.resolve(host, port).await
    }
}
