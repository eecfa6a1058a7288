//! The interpreters a build's scripts will run with, checked where the build is made.
//!
//! A script tool or hook that is not executable runs through the interpreter its extension names
//! (`python3`, `node`, …). Compiling cannot know whether that program exists, or whether it can run
//! the script: TypeScript runs on Node's type stripping (`--experimental-strip-types`, Node 22.6 and
//! later), and an older Node fails every call. So `eve build` looks each interpreter up on `PATH` once
//! and asks Node its version, and says what to install (W012) rather than let every call fail. This
//! is the one part of a build that starts a process; it is bounded by a short timeout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use eve_discover::{Code, Diagnostic};

use crate::manifest::{Agent, Manifest, Runner};

/// Longest `node --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
/// The first Node with `--experimental-strip-types`.
const NODE_STRIP_TYPES: (u64, u64) = (22, 6);

/// W012 diagnostics for the interpreters of `manifest`'s scripts, against `path` (a `PATH` value),
/// each at the first file (with `prefix`) that needs the interpreter.
pub fn check(manifest: &Manifest, path: Option<&std::ffi::OsStr>, prefix: &str) -> Vec<Diagnostic> {
    // Interpreter argv → the first script needing it.
    let mut needed: BTreeMap<Vec<String>, String> = BTreeMap::new();
    collect(&manifest.agent, &mut needed);
    let mut out = Vec::new();
    for (argv, file) in needed {
        let Some(program) = argv.first() else {
            continue;
        };
        let file = format!("{prefix}{file}");
        let Some(found) = lookup(program, path) else {
            out.push(
                Diagnostic::new(
                    Code::InterpreterUnfit,
                    file,
                    format!("`{program}`, which runs this script, is not on PATH: every call will fail"),
                )
                .help(format!(
                    "install {program} where eve runs, make the script executable with a `#!` line, or set `interpreter:` in its front matter"
                )),
            );
            continue;
        };
        if program == "node" && argv.iter().any(|a| a == "--experimental-strip-types") {
            match node_version(&found) {
                Some(version) if version < NODE_STRIP_TYPES => out.push(
                    Diagnostic::new(
                        Code::InterpreterUnfit,
                        file,
                        format!(
                            "TypeScript tools need Node 22.6 or later (type stripping); `{}` is v{}.{}: every call will fail",
                            found.display(),
                            version.0,
                            version.1
                        ),
                    )
                    .help("install Node 22.6 or later (`nvm install 22`, or nodejs.org), or write the tool in JavaScript"),
                ),
                Some(_) => {}
                None => out.push(
                    Diagnostic::new(
                        Code::InterpreterUnfit,
                        file,
                        format!("`{} --version` did not answer with a version: TypeScript tools need Node 22.6 or later", found.display()),
                    )
                    .help("check the Node on PATH where eve runs (`node --version`)"),
                ),
            }
        }
    }
    out
}

fn collect(agent: &Agent, needed: &mut BTreeMap<Vec<String>, String>) {
    let runners = agent
        .tools
        .iter()
        .map(|t| (&t.runner, &t.source))
        .chain(agent.hooks.iter().map(|h| (&h.runner, &h.source)));
    for (runner, source) in runners {
        if let Runner::Script { interpreter, .. } = runner
            && !interpreter.is_empty()
        {
            needed
                .entry(interpreter.clone())
                .or_insert_with(|| source.clone());
        }
    }
    for sub in &agent.subagents {
        collect(sub, needed);
    }
}

/// `program` as `PATH` finds it (a path with a `/` is taken as it is).
pub(crate) fn lookup(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// What `node --version` answered, by the binary's path, size and modification time: a build asks
/// once (finding Node for the modules, then checking interpreters), and a build whose module
/// evaluation is cached ([`remember_node_version`]) not at all.
type VersionKey = (PathBuf, u64, Option<std::time::SystemTime>);
static NODE_VERSIONS: std::sync::Mutex<BTreeMap<VersionKey, (u64, u64)>> =
    std::sync::Mutex::new(BTreeMap::new());

fn version_key(node: &Path) -> Option<VersionKey> {
    let meta = std::fs::metadata(node).ok()?;
    Some((node.to_path_buf(), meta.len(), meta.modified().ok()))
}

/// Records `node`'s version, known from a cache, so that no process is started to ask it.
pub(crate) fn remember_node_version(node: &Path, version: (u64, u64)) {
    if let (Some(key), Ok(mut known)) = (version_key(node), NODE_VERSIONS.lock()) {
        known.insert(key, version);
    }
}

/// `node --version` as (major, minor); `None` when it does not answer in time or readably.
pub(crate) fn node_version(node: &Path) -> Option<(u64, u64)> {
    let key = version_key(node);
    if let (Some(key), Ok(known)) = (&key, NODE_VERSIONS.lock())
        && let Some(v) = known.get(key)
    {
        return Some(*v);
    }
    let version = ask_node_version(node)?;
    if let (Some(key), Ok(mut known)) = (key, NODE_VERSIONS.lock()) {
        known.insert(key, version);
    }
    Some(version)
}

fn ask_node_version(node: &Path) -> Option<(u64, u64)> {
    let mut child = Command::new(node)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < VERSION_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let output = child.wait_with_output().ok()?;
    parse_version(&String::from_utf8_lossy(&output.stdout))
}

/// `v20.20.2` → (20, 20).
fn parse_version(text: &str) -> Option<(u64, u64)> {
    let mut parts = text.trim().strip_prefix('v')?.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("v20.20.2\n"), Some((20, 20)));
        assert_eq!(parse_version("v22.6.0"), Some((22, 6)));
        assert_eq!(parse_version("22.6.0"), None);
        assert!((20, 20) < NODE_STRIP_TYPES && (22, 6) >= NODE_STRIP_TYPES);
        assert!((23, 0) >= NODE_STRIP_TYPES);
    }
}
