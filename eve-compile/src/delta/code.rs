//! Code in the delta: what runs on the host, and what hooks run.
//!
//! A tool's manifest entry can stay byte for byte the same while its script is rewritten (the
//! front matter unchanged, the body new), and a command line can load a library (`python3
//! ${EVE_AGENT_DIR}/_lib/deploy.py`) the manifest never names. Inside the box that code is
//! bounded by the sandbox; on the host it runs with the server's authority, and a hook (any
//! hook) decides what other calls may do. So the delta compares the digests the manifest
//! records for every build file (`files`: bytes and mode) and says, for each file that was
//! added, removed, rewritten or had its mode changed, who runs it:
//!
//! - a file a process names (a script's path; a path under `${EVE_AGENT_DIR}/` in a command,
//!   interpreter, MCP command, argument or environment value; a relative path in an MCP
//!   server's command line, which starts in the build's files) is that process's code: a hook's
//!   is [`ChangeKind::HookChanged`], a `host` tool's, provider's or MCP server's is
//!   [`ChangeKind::HostCodeChanged`], an isolated one's is bounded by its sandbox and not listed;
//! - a file no process names (a `_lib/` module, a workspace seed, data) may still be loaded by
//!   any process that runs on the host or any hook: when the build has one, the file is host
//!   code (or a hook's body) too, and the change names who may load it;
//! - a skill's files are prompt, not code, and are left to the review of the change itself.
//!
//! Processes added or removed are listed as such by their own kinds, so their files are not
//! listed twice. Changes to a runner in the manifest (a `host` tool's command line, a hook's
//! command) are found by `tools` and `hooks`.

use std::collections::BTreeSet;

use super::{ChangeKind, Differ};
use crate::manifest::*;

/// Longest command line shown in a change.
const SHOWN_CHARS: usize = 300;

/// A command line, script or request as one short line.
pub(super) fn runner_summary(r: &Runner) -> String {
    let s = match r {
        Runner::Script { path, interpreter } if interpreter.is_empty() => format!("script {path}"),
        Runner::Script { path, interpreter } => {
            format!("script {path} (run by {})", interpreter.join(" "))
        }
        Runner::Command { argv } => format!(
            "run {}",
            argv.iter()
                .map(|a| {
                    if a.is_empty() || a.contains(char::is_whitespace) {
                        format!("{a:?}")
                    } else {
                        a.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Runner::Http(h) => format!("{} {}", h.method, h.url),
        Runner::OpenApi(o) => format!("{} {}{}", o.method, o.base_url, o.path),
    };
    if s.chars().count() > SHOWN_CHARS {
        let cut: String = s.chars().take(SHOWN_CHARS).collect();
        format!("{cut}…")
    } else {
        s
    }
}

/// What a process is in the delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Tool,
    Hook,
    Connection,
}

/// One process of a build that runs agent code.
#[derive(Debug)]
struct Proc {
    role: Role,
    /// Its name in the delta (`researcher/deploy` for a subagent's).
    subject: String,
    /// Runs on the host.
    host: bool,
    /// Build files and folders it names.
    names: Vec<String>,
}

impl Proc {
    fn names(&self, path: &str) -> bool {
        self.names.iter().any(|n| {
            path == n
                || path
                    .strip_prefix(n.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// Whether it may load a build file it does not name: anything on the host, and any hook.
    fn reaches(&self) -> bool {
        self.host || self.role == Role::Hook
    }

    fn describe(&self) -> String {
        let role = match self.role {
            Role::Tool => "tool",
            Role::Hook => "hook",
            Role::Connection => "connection",
        };
        let host = if self.host { ", host" } else { "" };
        format!("{role} {}{host}", self.subject)
    }
}

/// The processes of a build and its skills' files.
struct Runs {
    procs: Vec<Proc>,
    prompt: BTreeSet<String>,
}

impl Runs {
    fn of(m: &Manifest) -> Self {
        let mut runs = Runs {
            procs: Vec::new(),
            prompt: BTreeSet::new(),
        };
        runs.walk("", &m.agent);
        runs
    }

    fn walk(&mut self, prefix: &str, a: &Agent) {
        for t in &a.tools {
            let Some(sb) = a.effective_sandbox(t) else {
                continue;
            };
            self.procs.push(Proc {
                role: Role::Tool,
                subject: format!("{prefix}{}", t.name),
                host: sb.provider == Provider::Host,
                names: runner_names(&t.runner),
            });
        }
        for h in &a.hooks {
            self.procs.push(Proc {
                role: Role::Hook,
                subject: format!("{prefix}{}", h.name),
                host: a.hook_sandbox(h).provider == Provider::Host,
                names: runner_names(&h.runner),
            });
        }
        for c in &a.connections {
            let (Some(sb), Transport::Stdio { command, args, env }) =
                (a.connection_sandbox(c), &c.transport)
            else {
                continue;
            };
            // An MCP server starts in the build's files: a relative path names one.
            let mut names = Vec::new();
            for text in std::iter::once(command).chain(args).chain(env.values()) {
                agent_dir_refs(text, &mut names);
                relative_refs(text, &mut names);
            }
            self.procs.push(Proc {
                role: Role::Connection,
                subject: format!("{prefix}{}", c.name),
                host: sb.provider == Provider::Host,
                names,
            });
        }
        for s in &a.skills {
            self.prompt.insert(s.source.clone());
            self.prompt.extend(s.files.iter().cloned());
        }
        for sub in &a.subagents {
            self.walk(&format!("{prefix}{}/", sub.name), sub);
        }
    }

    fn has(&self, role: Role, subject: &str) -> bool {
        self.procs
            .iter()
            .any(|p| p.role == role && p.subject == subject)
    }
}

/// The build files a tool's or hook's runner names: its script, and paths under the agent
/// folder in its interpreter or command line.
fn runner_names(r: &Runner) -> Vec<String> {
    let mut names = Vec::new();
    match r {
        Runner::Script { path, interpreter } => {
            names.extend(normalise(path));
            for a in interpreter {
                agent_dir_refs(a, &mut names);
            }
        }
        Runner::Command { argv } => {
            for a in argv {
                agent_dir_refs(a, &mut names);
            }
        }
        Runner::Http(_) | Runner::OpenApi(_) => {}
    }
    names
}

/// Paths written after `${EVE_AGENT_DIR}/` or `$EVE_AGENT_DIR/` in `text`.
fn agent_dir_refs(text: &str, out: &mut Vec<String>) {
    for marker in ["${EVE_AGENT_DIR}/", "$EVE_AGENT_DIR/"] {
        let mut rest = text;
        while let Some(i) = rest.find(marker) {
            rest = &rest[i + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || "_-./@+".contains(c)))
                .unwrap_or(rest.len());
            out.extend(normalise(&rest[..end]));
            rest = &rest[end..];
        }
    }
}

/// Relative paths among the words of `text` (split at spaces, `=`, `:` and `,`).
fn relative_refs(text: &str, out: &mut Vec<String>) {
    for word in text.split(|c: char| c.is_whitespace() || "=:,".contains(c)) {
        let word = word.trim_matches(|c| c == '"' || c == '\'');
        if word.is_empty() || word.starts_with(['-', '/', '$', '~']) {
            continue;
        }
        out.extend(normalise(word));
    }
}

/// `./a//b/` → `a/b`; `None` for nothing or a path with `..`.
fn normalise(path: &str) -> Option<String> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.is_empty() || parts.contains(&"..") {
        return None;
    }
    Some(parts.join("/"))
}

/// What happened to one file, in a few words.
fn file_change(path: &str, old: Option<&FileDigest>, new: Option<&FileDigest>) -> String {
    let short = |d: &FileDigest| d.sha256.chars().take(12).collect::<String>();
    match (old, new) {
        (None, Some(n)) => format!("{path} added (sha256 {}, mode {:o})", short(n), n.mode),
        (Some(_), None) => format!("{path} removed"),
        (Some(o), Some(n)) => {
            let mut parts = Vec::new();
            if o.sha256 != n.sha256 {
                parts.push(format!("sha256 {} -> {}", short(o), short(n)));
            }
            if o.mode != n.mode {
                parts.push(format!("mode {:o} -> {:o}", o.mode, n.mode));
            }
            format!("{path}: {}", parts.join(", "))
        }
        (None, None) => path.to_owned(),
    }
}

impl Differ {
    /// Build files whose bytes or mode changed, where they are code that runs on the host or a
    /// hook's body. A first build has nothing to compare with (its processes are all added).
    pub(super) fn files(&mut self, prev: Option<&Manifest>, next: &Manifest) {
        let Some(prev) = prev else {
            return;
        };
        let (before, after) = (Runs::of(prev), Runs::of(next));
        let paths: BTreeSet<&String> = prev.files.keys().chain(next.files.keys()).collect();
        for path in paths {
            let (old, new) = (prev.files.get(path), next.files.get(path));
            if old == new || before.prompt.contains(path) || after.prompt.contains(path) {
                continue;
            }
            // Who runs it: the build that has it (the old one for a removed file); only
            // processes in both builds (an added or removed one is listed as such).
            let side = if new.is_some() { &after } else { &before };
            let kept = |p: &Proc| before.has(p.role, &p.subject) && after.has(p.role, &p.subject);
            let what = file_change(path, old, new);
            let users: Vec<&Proc> = side.procs.iter().filter(|p| p.names(path)).collect();
            if !users.is_empty() {
                for p in users.iter().filter(|p| kept(p)) {
                    if p.role == Role::Hook {
                        self.push(
                            ChangeKind::HookChanged,
                            p.subject.clone(),
                            None,
                            Some(what.clone()),
                            true,
                        );
                    } else if p.host {
                        self.push(
                            ChangeKind::HostCodeChanged,
                            p.subject.clone(),
                            None,
                            Some(what.clone()),
                            true,
                        );
                    }
                }
                continue;
            }
            let reach: Vec<&Proc> = side
                .procs
                .iter()
                .filter(|p| p.reaches() && kept(p))
                .collect();
            if reach.is_empty() {
                continue;
            }
            let kind = if reach.iter().any(|p| p.host) {
                ChangeKind::HostCodeChanged
            } else {
                ChangeKind::HookChanged
            };
            let who: Vec<String> = reach.iter().map(|p| p.describe()).collect();
            self.push(
                kind,
                path.clone(),
                None,
                Some(format!("{what}; may be loaded by {}", who.join(", "))),
                true,
            );
        }
    }
}
