//! `sandbox/`: `sandbox.yaml` (provider, network, extra paths, limits, default tool timeout and
//! output limit), the workspace seed files copied into each session's workspace, and the checks of
//! the `sandbox:`/`network:` fields tools, hooks and connections may carry.
//!
//! Everything here is checked at build so a bad setting is a diagnostic naming the file, never a
//! surprise at the first call: network entries must be `host[:port]`, `*.suffix[:port]`, an IP
//! literal or `[v6]:port`; paths absolute or `~/…`; sizes and counts parse.

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Component, Path};

use serde_json::Value;

use eve_discover::{AgentDir, Code, Diagnostic};

use super::Compiler;
use crate::fields::{Fields, kind};
use crate::manifest::*;

/// Names of `provider:`/`sandbox:` values.
pub(super) const PROVIDERS: &[(&str, Provider)] =
    &[("isolated", Provider::Isolated), ("host", Provider::Host)];

const SANDBOX_FIELDS: &[&str] = &[
    "provider",
    "timeout",
    "output_limit",
    "network",
    "read",
    "write",
    "limits",
];
const LIMIT_FIELDS: &[&str] = &["memory", "processes", "file_size", "cpu_seconds"];

impl Compiler {
    pub(super) fn sandbox(&mut self, dir: &AgentDir) -> Sandbox {
        let mut sandbox = Sandbox::default();
        let Some(sb) = &dir.sandbox else {
            return sandbox;
        };
        for file in &sb.workspace {
            self.files.insert(file.clone());
        }
        sandbox.workspace = sb.workspace.clone();
        let Some(file) = &sb.config else {
            return sandbox;
        };
        let Some(parsed) = self.yaml_file(file) else {
            return sandbox;
        };
        let protected = self.protected.clone();
        let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(SANDBOX_FIELDS, "sandbox");
        if f.raw("provider").and_then(Value::as_str) == Some("local") {
            f.report(
                Code::Unconfined,
                "provider",
                "`provider: local` is read as `provider: isolated`: tools now run confined"
                    .to_owned(),
                "write `provider: isolated`; `provider: host` keeps the old unconfined behaviour",
            );
        } else if let Some(p) = provider(&mut f, "provider") {
            sandbox.provider = p;
        }
        if let Some(t) = f.duration_ms("timeout") {
            sandbox.timeout_ms = t;
        }
        if let Some(o) = f.u64("output_limit") {
            sandbox.output_limit = o;
        }
        if let Some(n) = network(&mut f) {
            sandbox.network = n;
        }
        sandbox.read = paths(&mut f, "read", &[]);
        sandbox.write = paths(&mut f, "write", &protected);
        if f.has("limits") {
            if !matches!(f.raw("limits"), Some(Value::Object(_))) {
                let found = f.raw("limits").map(kind).unwrap_or_default();
                f.report(
                    Code::InvalidSandbox,
                    "limits",
                    format!("`limits` must be a mapping, found {found}"),
                    "write `limits: {memory: 2GiB, processes: 512, file_size: 1GiB, cpu_seconds: 600}` (each optional)",
                );
            } else {
                let mut l = Fields::new(&file.path, &parsed.doc, "/limits", &mut self.diags);
                l.unknown_keys(LIMIT_FIELDS, "limits");
                if let Some(v) = size(&mut l, "memory") {
                    sandbox.limits.memory = v;
                }
                if let Some(v) = count(&mut l, "processes") {
                    sandbox.limits.processes = v;
                }
                if let Some(v) = size(&mut l, "file_size") {
                    sandbox.limits.file_size = v;
                }
                if let Some(v) = count(&mut l, "cpu_seconds") {
                    sandbox.limits.cpu_seconds = v;
                }
            }
        }
        sandbox
    }

    /// Warns about what runs unconfined or with a wider network than the agent's default, once the
    /// agent's tools, hooks and connections are known.
    pub(super) fn sandbox_warnings(&mut self, agent: &Agent, dir: &AgentDir) {
        let sb = &agent.sandbox;
        if sb.provider == Provider::Host {
            let mut names: Vec<String> = Vec::new();
            if agent.runs_builtin("bash") {
                names.push("bash".to_owned());
            }
            for t in &agent.tools {
                if agent
                    .effective_sandbox(t)
                    .is_some_and(|e| e.provider == Provider::Host)
                {
                    names.push(t.name.clone());
                }
            }
            for h in &agent.hooks {
                if agent.hook_sandbox(h).provider == Provider::Host {
                    names.push(format!("hook {}", h.name));
                }
            }
            let file = dir
                .sandbox
                .as_ref()
                .and_then(|s| s.config.as_ref())
                .map(|f| f.path.clone())
                .unwrap_or_else(|| format!("{}sandbox/sandbox.yaml", prefix(&agent.path)));
            let list = if names.is_empty() {
                "no tools yet".to_owned()
            } else {
                names.join(", ")
            };
            self.push(
                Diagnostic::new(
                    Code::Unconfined,
                    file,
                    format!("`provider: host`: every tool process runs unconfined ({list}): it can read the server's files and environment"),
                )
                .at(1, 1)
                .help("remove `provider: host` (the default is `isolated`), or set `sandbox: host` only on the tools that need it"),
            );
        }
        let own = |name: &str, map: &std::collections::BTreeMap<String, SandboxOverride>| {
            map.get(name).cloned().unwrap_or_default()
        };
        for t in &agent.tools {
            let o = own(&t.name, &sb.tools);
            self.override_warnings(&t.source, &format!("tool `{}`", t.name), &o, sb);
        }
        for h in &agent.hooks {
            let o = own(&h.name, &sb.hooks);
            self.override_warnings(&h.source, &format!("hook `{}`", h.name), &o, sb);
        }
        for c in &agent.connections {
            let o = own(&c.name, &sb.connections);
            if let Some(n) = &o.network
                && agent
                    .connection_sandbox(c)
                    .is_some_and(|e| e.provider == Provider::Isolated)
                && n.widens(&sb.network)
            {
                self.push(widened(
                    &c.source,
                    &format!("connection `{}`", c.name),
                    n,
                    sb,
                ));
            }
        }
    }

    fn override_warnings(&mut self, file: &str, what: &str, o: &SandboxOverride, sb: &Sandbox) {
        if o.provider == Some(Provider::Host) && sb.provider != Provider::Host {
            self.push(
                Diagnostic::new(
                    Code::Unconfined,
                    file.to_owned(),
                    format!("{what} says `sandbox: host`: it runs unconfined: it can read the server's files and environment"),
                )
                .help("remove `sandbox: host` unless it truly needs the server's authority; `network:` and `sandbox.yaml` `read:`/`write:` widen an isolated tool instead"),
            );
        }
        if let Some(n) = &o.network
            && o.provider != Some(Provider::Host)
            && (sb.provider == Provider::Isolated || o.provider == Some(Provider::Isolated))
            && n.widens(&sb.network)
        {
            self.push(widened(file, what, n, sb));
        }
    }
}

fn widened(file: &str, what: &str, n: &Network, sb: &Sandbox) -> Diagnostic {
    Diagnostic::new(
        Code::NetworkWidened,
        file.to_owned(),
        format!(
            "{what} reaches `network: {}`, more than the agent's `network: {}`",
            n.describe(),
            sb.network.describe()
        ),
    )
    .help("keep it if the tool needs it (it shows in `eve info`); otherwise narrow `network:` to the hosts it calls")
}

fn prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    }
}

/// Reads `sandbox:`/`network:` of a tool, hook or connection front matter.
pub(super) fn read_override(f: &mut Fields<'_>) -> SandboxOverride {
    SandboxOverride {
        provider: provider(f, "sandbox"),
        network: network(f),
    }
}

/// `provider:` or `sandbox:`: `isolated` or `host`.
fn provider(f: &mut Fields<'_>, key: &str) -> Option<Provider> {
    let raw = f.raw(key)?.clone();
    let Value::String(s) = &raw else {
        f.report(
            Code::InvalidSandbox,
            key,
            format!("`{key}` must be `isolated` or `host`, found {}", kind(&raw)),
            &format!("write `{key}: isolated` (the default) or `{key}: host` (unconfined)"),
        );
        return None;
    };
    if let Some((_, p)) = PROVIDERS.iter().find(|(n, _)| n == s) {
        return Some(*p);
    }
    f.report(
        Code::InvalidSandbox,
        key,
        format!("`{key}` is `{s}`, which is not a sandbox provider"),
        &format!("write `{key}: isolated` (the default) or `{key}: host` (unconfined)"),
    );
    None
}

/// `network:`: `none`, `all` or a list of destinations.
fn network(f: &mut Fields<'_>) -> Option<Network> {
    let raw = f.raw("network")?.clone();
    const HELP: &str = "write `network: none`, `network: all`, or a list such as `[api.github.com, \"*.slack.com:443\", \"127.0.0.1:8123\"]`";
    match raw {
        Value::String(s) if s == "none" => Some(Network::None),
        Value::String(s) if s == "all" => Some(Network::All),
        Value::String(s) => {
            let word = !s.contains(['.', ':']) && s != "localhost";
            let checked = if word {
                Err("a single destination is a host with a dot, a port or an IP address".to_owned())
            } else {
                check_destination(&s)
            };
            if let Err(why) = checked {
                f.report(
                    Code::InvalidSandbox,
                    "network",
                    format!("`network` is `{s}`, which is neither `none`, `all` nor a destination: {why}"),
                    HELP,
                );
                return None;
            }
            Some(Network::Allow(vec![s]))
        }
        Value::Array(items) => {
            let mut out = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let pointer = format!("{}/{i}", f.pointer("network"));
                let why = match item {
                    Value::String(s) => match check_destination(s) {
                        Ok(()) => {
                            out.push(s.clone());
                            continue;
                        }
                        Err(why) => format!("`{s}` {why}"),
                    },
                    other => format!("items must be strings, found {}", kind(other)),
                };
                ok = false;
                f.report_at(
                    Code::InvalidSandbox,
                    &pointer,
                    format!("`network` entry {}: {why}", i + 1),
                    "write `host`, `host:port`, `*.suffix`, `*.suffix:port`, an IP address or `[v6]:port`; quote entries with `*` or `:`",
                );
            }
            ok.then_some(Network::Allow(out))
        }
        other => {
            f.report(
                Code::InvalidSandbox,
                "network",
                format!(
                    "`network` must be `none`, `all` or a list, found {}",
                    kind(&other)
                ),
                HELP,
            );
            None
        }
    }
}

/// Checks one network allowlist entry; the error says what is wrong.
pub fn check_destination(entry: &str) -> Result<(), String> {
    let e = entry.trim();
    if e.is_empty() {
        return Err("is empty".to_owned());
    }
    if e.contains("://") || e.contains('/') {
        return Err(
            "is a URL: write only the host (and port), such as `api.github.com:443`".to_owned(),
        );
    }
    // `[v6]` or `[v6]:port`.
    if let Some(rest) = e.strip_prefix('[') {
        let Some((addr, after)) = rest.split_once(']') else {
            return Err("opens `[` without closing `]`".to_owned());
        };
        if addr.parse::<Ipv6Addr>().is_err() {
            return Err(format!(
                "has `{addr}` in brackets, which is not an IPv6 address"
            ));
        }
        return match after {
            "" => Ok(()),
            p => match p.strip_prefix(':') {
                Some(p) => port(p),
                None => Err("has text after `]`: write `[v6]:port`".to_owned()),
            },
        };
    }
    // A bare IPv6 address.
    if e.matches(':').count() > 1 {
        return match e.parse::<Ipv6Addr>() {
            Ok(_) => Ok(()),
            Err(_) => Err("is not an IPv6 address (write `[v6]:port` to give a port)".to_owned()),
        };
    }
    let (host, p) = match e.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (e, None),
    };
    if let Some(p) = p {
        port(p)?;
    }
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let name = match host.strip_prefix("*.") {
        Some(suffix) => suffix,
        None if host.contains('*') => {
            return Err("has a `*` that is not a leading `*.`: write `*.example.com`".to_owned());
        }
        None => host,
    };
    check_host_name(name)
}

fn port(p: &str) -> Result<(), String> {
    match p.parse::<u16>() {
        Ok(n) if n >= 1 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        _ => Err(format!(
            "has port `{p}`: a port is a number from 1 to 65535"
        )),
    }
}

fn check_host_name(name: &str) -> Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return Err("is not a host name".to_owned());
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(format!("is not a host name (label `{label}`)"));
        }
    }
    Ok(())
}

/// `read:`/`write:`: absolute or `~/…` paths; `write:` may not cover a protected folder.
fn paths(f: &mut Fields<'_>, key: &str, protected: &[std::path::PathBuf]) -> Vec<String> {
    let Some(list) = f.string_list(key) else {
        return Vec::new();
    };
    let list_form = matches!(f.raw(key), Some(Value::Array(_)));
    let mut out = Vec::new();
    for (i, p) in list.into_iter().enumerate() {
        let pointer = if list_form {
            format!("{}/{i}", f.pointer(key))
        } else {
            f.pointer(key)
        };
        let home = p == "~" || p.starts_with("~/");
        if !home && !p.starts_with('/') {
            f.report_at(
                Code::InvalidSandbox,
                &pointer,
                format!("`{key}` path `{p}` is relative"),
                "write an absolute path (`/srv/cache`) or one under the server's home (`~/data`)",
            );
            continue;
        }
        if p.split('/').any(|c| c == "..") {
            f.report_at(
                Code::InvalidSandbox,
                &pointer,
                format!("`{key}` path `{p}` contains `..`"),
                "write the path without `..`",
            );
            continue;
        }
        if key == "write" {
            let covers_state = Path::new(&p)
                .components()
                .any(|c| matches!(c, Component::Normal(n) if n == ".eve"));
            let covers_dir = !home
                && protected
                    .iter()
                    .any(|d| d.starts_with(&p) || Path::new(&p).starts_with(d));
            if covers_state || covers_dir {
                f.report_at(
                    Code::InvalidSandbox,
                    &pointer,
                    format!("`write` path `{p}` covers eve's state (`.eve/`) or the agent folder"),
                    "tools may never write the store, the builds or the agent's source: pick a folder outside the project",
                );
                continue;
            }
        }
        out.push(p);
    }
    out
}

/// A size in bytes: a number, or a string such as `512MiB`, `2GiB`, `100MB`, `4096`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let factor: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" | "K" | "k" => 1024.0,
        "MiB" | "M" => 1024.0 * 1024.0,
        "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return None,
    };
    let v = n * factor;
    (v.is_finite() && v >= 1.0 && v < u64::MAX as f64).then(|| v.round() as u64)
}

fn size(f: &mut Fields<'_>, key: &str) -> Option<u64> {
    let raw = f.raw(key)?.clone();
    let parsed = match &raw {
        Value::Number(n) => n.as_u64().filter(|v| *v > 0),
        Value::String(s) => parse_size(s),
        _ => None,
    };
    if parsed.is_none() {
        f.report(
            Code::InvalidSandbox,
            key,
            format!("`limits.{key}` is not a size: {raw}"),
            "write bytes as a number (1073741824) or with a unit: 512MiB, 2GiB, 100MB",
        );
    }
    parsed
}

fn count(f: &mut Fields<'_>, key: &str) -> Option<u64> {
    let raw = f.raw(key)?.clone();
    let parsed = match &raw {
        Value::Number(n) => n.as_u64().filter(|v| *v > 0),
        _ => None,
    };
    if parsed.is_none() {
        f.report(
            Code::InvalidSandbox,
            key,
            format!("`limits.{key}` is not a positive whole number: {raw}"),
            "write a number without quotes, such as `512`",
        );
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations() {
        for ok in [
            "api.github.com",
            "*.slack.com:443",
            "127.0.0.1:8123",
            "10.0.0.1",
            "[::1]:8080",
            "::1",
            "localhost",
        ] {
            assert_eq!(check_destination(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "https://api.github.com",
            "host:0",
            "host:65536",
            "host:http",
            "a*.b.com",
            "[::1",
            "[nope]:80",
            "bad_-.com:-1",
            "-bad.com",
            "a..b",
        ] {
            assert!(check_destination(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("100MB"), Some(100_000_000));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("2 parsecs"), None);
        assert_eq!(parse_size("0"), None);
    }
}
