//! Which layout a project uses, and which agent a command works on.
//!
//! Three layouts are recognised, in this order at each folder from the current one upwards (as
//! eve does; a root `agent/` wins over `agents/`):
//!
//! - **nested**: `<root>/agent/` holds the agent, `<root>/.eve/` its state;
//! - **workspace**: `<root>/agents/<name>/` holds one agent per member, either nested
//!   (`agents/<name>/agent/`) or flat (agent files directly in `agents/<name>/`). A member is a
//!   project of its own: its root is `agents/<name>/`, so its state is `agents/<name>/.eve/`, its
//!   evals `agents/<name>/evals/`, and its name is `<name>`. `--agent NAME` selects it; from
//!   inside `agents/<name>/` it is selected without the flag; a workspace of one member needs no
//!   flag. A member holding its own `package.json` is not a member (as in eve).
//! - **flat**: the agent files (`instructions.md`, `instructions/`, `agent.yaml`, eve's
//!   `agent.ts`) directly in `<root>`.
//!
//! `--agent DIR` naming a folder (`--agent .`, `--agent path/to/agent`) keeps its older meaning:
//! that folder is the agent, the current folder the project.

use std::path::Path;

use crate::project::{Project, ProjectError};

/// Files or folders whose presence makes a folder a flat agent folder.
const AGENT_FILES: [&str; 9] = [
    "instructions.md",
    "instructions",
    "instructions.ts",
    "agent.yaml",
    "agent.yml",
    "agent.ts",
    "agent.mts",
    "agent.js",
    "agent.mjs",
];

/// Whether `dir` holds agent files directly (the flat layout).
pub fn has_agent_files(dir: &Path) -> bool {
    AGENT_FILES.iter().any(|f| dir.join(f).exists())
}

/// Whether `dir` is an agent: a nested `agent/` folder or flat agent files.
fn is_agent(dir: &Path) -> bool {
    dir.join("agent").is_dir() || has_agent_files(dir)
}

/// The members of the workspace at `root` (`agents/<name>/` holding an agent and no
/// `package.json`), sorted by name.
pub fn members(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root.join("agents")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| !eve_discover::is_ignored(n))
        .filter(|n| {
            let dir = root.join("agents").join(n);
            !dir.join("package.json").exists() && is_agent(&dir)
        })
        .collect();
    names.sort();
    names
}

/// The project found at `dir` itself, if any: nested, workspace or flat.
fn at_folder(dir: &Path, cwd: &Path, name: Option<&str>) -> Option<Result<Project, ProjectError>> {
    if dir.join("agent").is_dir() {
        return Some(Ok(Project::at(dir.to_path_buf(), dir.join("agent"))));
    }
    let members = members(dir);
    if !members.is_empty() {
        return Some(member(dir, cwd, &members, name));
    }
    if has_agent_files(dir) {
        return Some(Ok(Project::at(dir.to_path_buf(), dir.to_path_buf())));
    }
    None
}

/// The member of the workspace at `root` that a command works on.
fn member(
    root: &Path,
    cwd: &Path,
    members: &[String],
    name: Option<&str>,
) -> Result<Project, ProjectError> {
    let inside = cwd
        .strip_prefix(root.join("agents"))
        .ok()
        .and_then(|rel| rel.components().next())
        .and_then(|c| c.as_os_str().to_str())
        .filter(|n| members.iter().any(|m| m == n));
    let chosen = match (name, inside, members) {
        (Some(n), _, _) => n,
        (None, Some(n), _) => n,
        (None, None, [only]) => only.as_str(),
        (None, None, _) => {
            return Err(ProjectError::ChooseAgent {
                root: root.to_path_buf(),
                names: members.join(", "),
            });
        }
    };
    if !members.iter().any(|m| m == chosen) {
        return Err(ProjectError::UnknownAgent {
            name: chosen.to_owned(),
            root: root.to_path_buf(),
            names: members.join(", "),
        });
    }
    let dir = root.join("agents").join(chosen);
    let agent_dir = if dir.join("agent").is_dir() {
        dir.join("agent")
    } else {
        dir.clone()
    };
    Ok(Project::at(dir, agent_dir))
}

/// Whether `--agent` names a workspace member rather than a folder: a plain name.
fn plain_name(agent: &Path) -> Option<&str> {
    let text = agent.to_str()?;
    let plain = !text.is_empty()
        && !matches!(text, "." | "..")
        && !text.contains(['/', '\\'])
        && !agent.is_absolute();
    plain.then_some(text)
}

/// Resolves a project from `--project` (`root`), `--agent` (`agent`) and the current folder.
pub fn locate(root: Option<&Path>, agent: Option<&Path>) -> Result<Project, ProjectError> {
    let cwd = std::env::current_dir()?;
    // `--agent DIR` naming a folder (not a member's name): that folder is the agent.
    if let Some(a) = agent {
        let named = plain_name(a);
        let base = root.map_or_else(|| cwd.clone(), |r| cwd.join(r));
        let is_member = named.is_some_and(|n| members(&base).iter().any(|m| m == n))
            || (root.is_none()
                && named.is_some()
                && cwd.ancestors().any(|p| {
                    !p.join("agent").is_dir()
                        && members(p).iter().any(|m| Some(m.as_str()) == named)
                }));
        if !is_member && (named.is_none() || cwd.join(a).is_dir()) {
            let agent_dir = cwd.join(a);
            if !agent_dir.is_dir() {
                return Err(ProjectError::NoAgent(agent_dir));
            }
            return Ok(Project::at(base, agent_dir));
        }
        let name = named.unwrap_or_default();
        if root.is_some() || members(&cwd).iter().any(|m| m == name) {
            let names = members(&base);
            if names.is_empty() {
                return Err(ProjectError::NotWorkspace {
                    name: name.to_owned(),
                    root: base,
                });
            }
            return member(&base, &cwd, &names, Some(name));
        }
        for dir in cwd.ancestors() {
            let names = members(dir);
            if !dir.join("agent").is_dir() && !names.is_empty() {
                return member(dir, &cwd, &names, Some(name));
            }
        }
        return Err(ProjectError::NotWorkspace {
            name: name.to_owned(),
            root: cwd,
        });
    }
    if let Some(r) = root {
        let dir = cwd.join(r);
        return at_folder(&dir, &cwd, None)
            .unwrap_or_else(|| Err(ProjectError::NoAgent(dir.join("agent"))));
    }
    for dir in cwd.ancestors() {
        // A nested agent folder (`agent/`), a subagent, or a workspace member's folder is found
        // from its parent: the flat layout is only looked for where it cannot be one of those.
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let parent = dir
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let inner = name == "agent" || matches!(parent, "subagents" | "agents");
        if (!inner || dir.join("agent").is_dir())
            && let Some(found) = at_folder(dir, &cwd, None)
        {
            return found;
        }
    }
    Err(ProjectError::NoAgent(cwd.join("agent")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, files: &[&str]) {
        for f in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x\n").unwrap();
        }
    }

    /// Runs `locate` with the current folder at `cwd` (tests in this module share the process
    /// folder, so they take a lock).
    fn locate_in(cwd: &Path, root: Option<&str>, agent: Option<&str>) -> Result<Project, String> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _g = LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = std::env::current_dir().unwrap();
        std::env::set_current_dir(cwd).unwrap();
        let found = locate(root.map(Path::new), agent.map(Path::new)).map_err(|e| e.to_string());
        std::env::set_current_dir(before).unwrap();
        found
    }

    fn rel(p: &Project, base: &std::path::Path) -> (String, String) {
        let base = base.canonicalize().unwrap();
        let r = |x: &Path| {
            x.canonicalize()
                .unwrap()
                .strip_prefix(&base)
                .unwrap()
                .display()
                .to_string()
        };
        (r(&p.root), r(&p.agent_dir))
    }

    #[test]
    fn finds_each_layout_and_selects_members() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        write(
            &ws,
            &[
                "agents/alpha/agent/instructions.md",
                "agents/beta/instructions.md",
                "agents/app/package.json",
                "agents/app/instructions.md",
                "agents/notes/readme.txt",
            ],
        );
        assert_eq!(members(&ws), ["alpha", "beta"]);
        let err = locate_in(&ws, None, None).unwrap_err();
        assert!(
            err.contains("alpha, beta") && err.contains("--agent"),
            "{err}"
        );
        let p = locate_in(&ws, None, Some("alpha")).unwrap();
        assert_eq!(
            rel(&p, &ws),
            ("agents/alpha".into(), "agents/alpha/agent".into())
        );
        assert_eq!(p.name(), "alpha");
        let p = locate_in(&ws, None, Some("beta")).unwrap();
        assert_eq!(rel(&p, &ws), ("agents/beta".into(), "agents/beta".into()));
        let p = locate_in(&ws.join("agents/alpha/agent"), None, None).unwrap();
        assert_eq!(p.name(), "alpha");
        let p = locate_in(&ws.join("agents/beta"), None, None).unwrap();
        assert_eq!(rel(&p, &ws), ("agents/beta".into(), "agents/beta".into()));
        let p = locate_in(t.path(), Some("ws"), Some("beta")).unwrap();
        assert_eq!(p.name(), "beta");
        let err = locate_in(&ws, None, Some("gamma")).unwrap_err();
        assert!(
            err.contains("`gamma`") && err.contains("alpha, beta"),
            "{err}"
        );

        let flat = t.path().join("flat");
        write(
            &flat,
            &[
                "instructions.md",
                "tools/t.yaml",
                "subagents/h/instructions.md",
            ],
        );
        for cwd in [flat.clone(), flat.join("tools"), flat.join("subagents/h")] {
            let p = locate_in(&cwd, None, None).unwrap();
            assert_eq!(rel(&p, &flat), (String::new(), String::new()), "{cwd:?}");
        }
        let nested = t.path().join("nested");
        write(
            &nested,
            &["agent/instructions.md", "agents/x/instructions.md"],
        );
        let p = locate_in(&nested.join("agent"), None, None).unwrap();
        assert_eq!(rel(&p, &nested), (String::new(), "agent".into()));
        // `--agent DIR` keeps naming a folder.
        let p = locate_in(&flat, None, Some(".")).unwrap();
        assert_eq!(rel(&p, &flat), (String::new(), String::new()));
        let p = locate_in(&nested, None, Some("agent")).unwrap();
        assert_eq!(rel(&p, &nested), (String::new(), "agent".into()));
        let err = locate_in(t.path(), None, Some("nothing")).unwrap_err();
        assert!(err.contains("not a workspace"), "{err}");
    }
}
