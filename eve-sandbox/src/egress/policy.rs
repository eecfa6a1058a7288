//! The network policy of one tool: which destinations its egress proxy may connect to.
//!
//! A policy is `All` or an allowlist of [`Rule`]s parsed from the strings a tool's front matter or
//! `sandbox.yaml` writes (`api.github.com`, `"*.slack.com:443"`, `127.0.0.1:8123`, `[::1]:9000`).
//! Matching a name is only half of the decision: [`guard`] says which resolved addresses are
//! dangerous (loopback, link-local, unspecified, multicast, cloud metadata, private ranges, this
//! host's own addresses, and every IPv6 form that carries one of those IPv4 addresses), and those
//! are reached only when the rule that allowed the request names the host or IP explicitly.
//! Keeping both here, apart from the socket code, lets the rules be tested without a network.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// Where a sandboxed tool may connect through the egress proxy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EgressPolicy {
    /// The internet: any destination except the guarded addresses of [`guard`] (loopback,
    /// link-local, metadata, private ranges, this host's own addresses) and eve's own listeners.
    All,
    /// Only destinations matched by one of these rules.
    Allow(Vec<Rule>),
}

impl EgressPolicy {
    /// Parses an allowlist, collecting every bad entry rather than stopping at the first.
    pub fn allow_list<I, S>(entries: I) -> Result<Self, Vec<RuleError>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        for entry in entries {
            match entry.as_ref().parse::<Rule>() {
                Ok(rule) => rules.push(rule),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(Self::Allow(rules))
        } else {
            Err(errors)
        }
    }

    /// How a request for `host:port` is allowed, or `None` when the policy does not allow it.
    ///
    /// `host` is what the client asked for (a name, an IP literal, or a bracketed IPv6 literal);
    /// case and a trailing dot are ignored.
    pub fn permits(&self, host: &str, port: u16) -> Option<Permit> {
        let target = Target::parse(host)?;
        match self {
            Self::All => Some(Permit { explicit: false }),
            Self::Allow(rules) => {
                let mut found = None;
                for rule in rules.iter().filter(|r| r.matches_target(&target, port)) {
                    if rule.is_explicit() {
                        return Some(Permit { explicit: true });
                    }
                    found = Some(Permit { explicit: false });
                }
                found
            }
        }
    }
}

/// Why a request was allowed by the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// The allowing rule names this host or IP exactly (not through `*.suffix` or `All`), so the
    /// addresses it resolves to may be loopback, link-local or metadata addresses.
    pub explicit: bool,
}

/// One allowlist entry: a host (exact name, `*.suffix`, or IP literal) with an optional port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    host: RuleHost,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RuleHost {
    /// An exact host name, lowercased, without a trailing dot.
    Name(String),
    /// `*.suffix`: the suffix, lowercased; matches names ending in `.suffix` only.
    Suffix(String),
    Ip(IpAddr),
}

/// A bad allowlist entry, with the entry and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network entry `{entry}`: {why}")]
pub struct RuleError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong and what to write instead.
    pub why: String,
}

impl Rule {
    /// Whether a request for `host:port` matches this rule (case-insensitive; `*.suffix` matches
    /// subdomains only, never the suffix itself).
    pub fn matches(&self, host: &str, port: u16) -> bool {
        Target::parse(host).is_some_and(|t| self.matches_target(&t, port))
    }

    /// Whether the rule names one host or IP (so it may reach loopback and other guarded
    /// addresses that name resolves to). `*.suffix` rules are not explicit.
    pub fn is_explicit(&self) -> bool {
        !matches!(self.host, RuleHost::Suffix(_))
    }

    /// The port this rule is limited to, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    fn matches_target(&self, target: &Target, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, target) {
            (RuleHost::Name(n), Target::Name(h)) => n == h,
            (RuleHost::Suffix(s), Target::Name(h)) => h
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (RuleHost::Ip(a), Target::Ip(b)) => canonical(*a) == canonical(*b),
            _ => false,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.host, self.port) {
            (RuleHost::Name(n), None) => write!(f, "{n}"),
            (RuleHost::Name(n), Some(p)) => write!(f, "{n}:{p}"),
            (RuleHost::Suffix(s), None) => write!(f, "*.{s}"),
            (RuleHost::Suffix(s), Some(p)) => write!(f, "*.{s}:{p}"),
            (RuleHost::Ip(ip), port) => write!(f, "{}", display_host_port(*ip, port)),
        }
    }
}

fn display_host_port(ip: IpAddr, port: Option<u16>) -> String {
    match (ip, port) {
        (IpAddr::V4(v4), None) => v4.to_string(),
        (IpAddr::V6(v6), None) => format!("[{v6}]"),
        (ip, Some(p)) => SocketAddr::new(ip, p).to_string(),
    }
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let fail = |why: &str| RuleError {
            entry: entry.to_string(),
            why: why.to_string(),
        };
        let s = entry.trim();
        if s.is_empty() {
            return Err(fail("empty entry: write a host such as `api.github.com`"));
        }
        if s.contains("://") {
            return Err(fail(
                "a URL is not a host: write the host only, such as `api.github.com` or `api.github.com:443`",
            ));
        }
        if s.contains(['/', '@', '?', '#']) || s.chars().any(char::is_whitespace) {
            return Err(fail(
                "a host may not contain `/`, `@`, `?`, `#` or spaces: write `host` or `host:port`",
            ));
        }
        // IPv6: `[v6]`, `[v6]:port`, or a bare literal (two colons or more).
        if let Some(rest) = s.strip_prefix('[') {
            let Some((inner, after)) = rest.split_once(']') else {
                return Err(fail(
                    "`[` without `]`: write an IPv6 address as `[::1]` or `[::1]:8080`",
                ));
            };
            let ip: Ipv6Addr = inner
                .parse()
                .map_err(|_| fail("not an IPv6 address between `[` and `]`"))?;
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(parse_port(p).map_err(|why| fail(&why))?),
                    None => return Err(fail("after `]` only `:port` may follow")),
                },
            };
            return Ok(Rule {
                host: RuleHost::Ip(IpAddr::V6(ip)),
                port,
            });
        }
        if s.matches(':').count() > 1 {
            return match s.parse::<Ipv6Addr>() {
                Ok(ip) => Ok(Rule {
                    host: RuleHost::Ip(IpAddr::V6(ip)),
                    port: None,
                }),
                Err(_) => Err(fail(
                    "not a host: an IPv6 address with a port is written `[::1]:8080`",
                )),
            };
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(parse_port(p).map_err(|why| fail(&why))?)),
            None => (s, None),
        };
        if host.is_empty() {
            return Err(fail("no host before `:port`"));
        }
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Ok(Rule {
                host: RuleHost::Ip(IpAddr::V4(ip)),
                port,
            });
        }
        let lower = host.to_ascii_lowercase();
        if lower == "*" {
            return Err(fail(
                "`*` alone is not a host: write `network: all` to allow every destination",
            ));
        }
        if let Some(suffix) = lower.strip_prefix("*.") {
            let suffix = valid_name(suffix).map_err(|why| fail(&why))?;
            if !suffix.contains('.') && suffix != "localhost" {
                return Err(fail(
                    "`*.` must be followed by a domain with at least two labels, such as `*.slack.com`",
                ));
            }
            return Ok(Rule {
                host: RuleHost::Suffix(suffix),
                port,
            });
        }
        if lower.contains('*') {
            return Err(fail(
                "`*` is only allowed as a leading `*.` label, such as `*.slack.com`",
            ));
        }
        let name = valid_name(&lower).map_err(|why| fail(&why))?;
        if name
            .split('.')
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(fail(
                "not an IPv4 address: write four numbers, such as `10.0.0.1`",
            ));
        }
        Ok(Rule {
            host: RuleHost::Name(name),
            port,
        })
    }
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) => Err("port 0 is not a port: write a number from 1 to 65535".to_string()),
        Ok(port) if p.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(format!(
            "`{p}` is not a port: write a number from 1 to 65535"
        )),
    }
}

/// Checks a lowercased host name (letters, digits, `-`, `_`, dot-separated labels) and drops a
/// trailing dot.
fn valid_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return Err("a host name has 1 to 253 characters".to_string());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("empty label (two dots in a row, or a leading dot)".to_string());
        }
        if label.len() > 63 {
            return Err(format!("label `{label}` is longer than 63 characters"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!(
                "`{c}` is not allowed in a host name (letters, digits, `-`, `_` and dots; write internationalised names in their `xn--` form)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label `{label}` starts or ends with `-`"));
        }
    }
    Ok(name.to_string())
}

/// The host a client asked for, normalised for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Name(String),
    Ip(IpAddr),
}

impl Target {
    /// Parses the host part of a request target; `None` when it is not a valid host.
    pub(crate) fn parse(host: &str) -> Option<Self> {
        if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return inner
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| Self::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(Self::Ip(ip));
        }
        let lower = host.to_ascii_lowercase();
        let name = valid_name(&lower).ok()?;
        // Digits-and-dots names (`127.1`, `2130706433`) are IPv4 in the resolver's eyes: refuse
        // them rather than let them slip past IP rules.
        if name
            .split('.')
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
        {
            return None;
        }
        Some(Self::Name(name))
    }
}

/// An address family the proxy never connects to unless a rule names the host or address
/// explicitly (`network: all` and `*.suffix` rules never reach them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarded {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// 0.0.0.0/8, ::.
    Unspecified,
    /// 224.0.0.0/4, 255.255.255.255, ff00::/8.
    Multicast,
    /// 169.254.169.254, 169.254.170.2, fd00:ec2::254, 100.100.100.200, 192.0.0.192.
    Metadata,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 (carrier-grade NAT),
    /// fc00::/7 (unique local), fec0::/10 (site-local).
    Private,
    /// An address of one of this host's own interfaces (or routed to this host as local).
    Host,
}

impl Guarded {
    /// How a refusal names this kind of address.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Loopback => "loopback address",
            Self::LinkLocal => "link-local address",
            Self::Unspecified => "unspecified address",
            Self::Multicast => "multicast or broadcast address",
            Self::Metadata => "cloud metadata address",
            Self::Private => "private address",
            Self::Host => "this host's own address",
        }
    }
}

/// Maps IPv4-mapped IPv6 addresses to IPv4, so `::ffff:127.0.0.1` is judged as `127.0.0.1`.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The IPv4 address an IPv6 address carries, in every form that reaches it: IPv4-compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::/96` and the local-use `64:ff9b:1::/48`), 6to4 (`2002::/16`)
/// and Teredo (`2001::/32`, the client's address). A packet to such an address ends at (or is
/// translated to) that IPv4 address, so it is judged as that address.
pub fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        // IPv4-compatible (deprecated); `::` and `::1` are not.
        return Some(low);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        return Some(Ipv4Addr::from(!u32::from(low)));
    }
    None
}

/// Which guarded family an address belongs to by its range alone, if any (see [`guard`] for the
/// host's own addresses too).
pub fn classify(ip: IpAddr) -> Option<Guarded> {
    const METADATA_V4: [Ipv4Addr; 4] = [
        Ipv4Addr::new(169, 254, 169, 254),
        Ipv4Addr::new(169, 254, 170, 2),
        Ipv4Addr::new(100, 100, 100, 200),
        Ipv4Addr::new(192, 0, 0, 192),
    ];
    const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if METADATA_V4.contains(&v4) {
                Some(Guarded::Metadata)
            } else if v4.is_loopback() {
                Some(Guarded::Loopback)
            } else if v4.is_link_local() {
                Some(Guarded::LinkLocal)
            } else if a == 0 {
                Some(Guarded::Unspecified)
            } else if v4.is_multicast() || v4.is_broadcast() {
                Some(Guarded::Multicast)
            } else if v4.is_private() || (a == 100 && b & 0xc0 == 64) {
                Some(Guarded::Private)
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6 == METADATA_V6 {
                Some(Guarded::Metadata)
            } else if v6.is_loopback() {
                Some(Guarded::Loopback)
            } else if v6.is_unspecified() {
                Some(Guarded::Unspecified)
            } else if first & 0xffc0 == 0xfe80 {
                Some(Guarded::LinkLocal)
            } else if v6.is_multicast() {
                Some(Guarded::Multicast)
            } else if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
                Some(Guarded::Private)
            } else if let Some(v4) = embedded_ipv4(v6) {
                classify(IpAddr::V4(v4))
            } else {
                None
            }
        }
    }
}

/// Which guarded family an address belongs to: its range ([`classify`]), or one of this host's
/// own addresses (checked on the live system at each call, so an address added since start
/// counts). An IPv6 form carrying an IPv4 address is judged by that address too.
pub fn guard(ip: IpAddr) -> Option<Guarded> {
    if let Some(kind) = classify(ip) {
        return Some(kind);
    }
    let ip = canonical(ip);
    let embedded = match ip {
        IpAddr::V6(v6) => embedded_ipv4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    if is_host_address(ip) || embedded.is_some_and(is_host_address) {
        return Some(Guarded::Host);
    }
    None
}

/// Whether `dest` is one of eve's own listeners: same port as one of `own`, and an address that
/// reaches this host (loopback, unspecified, the listener's own address, or any local address).
pub fn is_own_listener(dest: SocketAddr, own: &[SocketAddr]) -> bool {
    let ip = canonical(dest.ip());
    if !own.iter().any(|o| o.port() == dest.port()) {
        return false;
    }
    if ip.is_loopback() || ip.is_unspecified() || matches!(classify(ip), Some(Guarded::Unspecified))
    {
        return true;
    }
    if own
        .iter()
        .any(|o| o.port() == dest.port() && canonical(o.ip()) == ip)
    {
        return true;
    }
    guard(ip).is_some_and(|g| matches!(g, Guarded::Loopback | Guarded::Host))
}

/// Whether `ip` belongs to this host: one of its interfaces' addresses, or one the kernel would
/// deliver here (binding a socket to it succeeds; not trusted where `ip_nonlocal_bind` lets any
/// address bind).
pub fn is_host_address(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    if interface_addresses().contains(&ip) {
        return true;
    }
    let sysctl = match ip {
        IpAddr::V4(_) => "/proc/sys/net/ipv4/ip_nonlocal_bind",
        IpAddr::V6(_) => "/proc/sys/net/ipv6/ip_nonlocal_bind",
    };
    let nonlocal = std::fs::read_to_string(sysctl).is_ok_and(|v| v.trim() != "0");
    !nonlocal && std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// The addresses of this host's interfaces, read now (`getifaddrs`).
fn interface_addresses() -> Vec<IpAddr> {
    let Ok(found) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    found
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| canonical(IpAddr::V6(v6.ip()))))
        })
        .collect()
}
