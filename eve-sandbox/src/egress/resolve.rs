//! The one decision every request eve makes for a tool goes through: may `host:port` be
//! reached under this policy, and at which addresses.
//!
//! The egress proxy (a sandboxed process's `CONNECT` or plain request) and the runtime's own
//! requests for a tool (`http:` tools) both call [`resolve`]: it checks the name against the
//! policy, resolves it once, checks every resolved address ([`check_address`]: eve's own
//! listeners never; loopback, link-local, metadata, private ranges and this host's own addresses
//! only under a rule naming the host or address) and returns the addresses that passed. The
//! caller connects to one of those, never to the name, so no second lookup can rebind it. Keeping
//! this in one place means the box and the runtime cannot drift apart.

use std::net::SocketAddr;
use std::time::Duration;

use super::policy::{EgressPolicy, Permit, Target, guard, is_own_listener};

/// Why a destination may not, or could not, be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The policy refuses it; the text says why, in words fit for the model.
    Refused(String),
    /// Not a valid host name or IP address.
    BadHost,
    /// Allowed, but the name could not be resolved (or resolved to nothing) in time.
    Unresolved(String),
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(why) | Self::Unresolved(why) => f.write_str(why),
            Self::BadHost => f.write_str("not a valid host name or IP address"),
        }
    }
}

/// Whether one resolved address may be connected to under `permit`: `Err` with the reason.
pub fn check_address(addr: SocketAddr, permit: Permit, own: &[SocketAddr]) -> Result<(), String> {
    if is_own_listener(addr, own) {
        return Err(format!(
            "{addr} is eve's own API, which tools may never reach"
        ));
    }
    if permit.explicit {
        return Ok(());
    }
    match guard(addr.ip()) {
        Some(kind) => Err(format!(
            "{} {} not listed by name",
            kind.describe(),
            addr.ip()
        )),
        None => Ok(()),
    }
}

/// Decides `host:port` under `policy`, resolves it once (within `limit`) and checks every
/// address. Returns the addresses that passed, in the resolver's order; refused only when none
/// did.
pub async fn resolve(
    host: &str,
    port: u16,
    policy: &EgressPolicy,
    own: &[SocketAddr],
    limit: Duration,
) -> Result<Vec<SocketAddr>, Denied> {
    let target = Target::parse(host).ok_or(Denied::BadHost)?;
    let permit = policy
        .permits(host, port)
        .ok_or_else(|| Denied::Refused("not in this tool's network allowlist".to_string()))?;
    let addrs: Vec<SocketAddr> = match target {
        Target::Ip(ip) => vec![SocketAddr::new(ip, port)],
        Target::Name(name) => {
            match tokio::time::timeout(limit, tokio::net::lookup_host((name.as_str(), port))).await
            {
                Ok(Ok(found)) => found.collect(),
                Ok(Err(e)) => {
                    return Err(Denied::Unresolved(format!("cannot resolve `{name}`: {e}")));
                }
                Err(_) => {
                    return Err(Denied::Unresolved(format!(
                        "resolving `{name}` took longer than {} s",
                        limit.as_secs_f32()
                    )));
                }
            }
        }
    };
    let mut refusal = None;
    let mut allowed = Vec::with_capacity(addrs.len());
    for addr in addrs {
        match check_address(addr, permit, own) {
            Ok(()) => allowed.push(addr),
            Err(why) => {
                refusal.get_or_insert(why);
            }
        }
    }
    if allowed.is_empty() {
        return Err(match refusal {
            Some(reason) => Denied::Refused(reason),
            None => Denied::Unresolved(format!("`{host}` resolved to no address")),
        });
    }
    Ok(allowed)
}
