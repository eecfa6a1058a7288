//! Where a project's pieces live: the agent folder, `.eve/`, builds, the store.
//!
//! A project is a folder holding `agent/` (the agent) and `.eve/` (builds, the SQLite store,
//! session workspaces); a workspace member `agents/<name>/` is a project of its own, and in the
//! flat layout the agent folder is the project folder (`layout.rs` finds which). Every command
//! resolves its paths here once, so they agree.

use std::path::{Path, PathBuf};

/// Why a project could not be located.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// No agent folder.
    #[error(
        "no agent folder at {0}: run `eve init` to create one, or pass `--agent DIR` \
         (a project holds `agent/`, `agents/<name>/` or, flat, `instructions.md` at its root)"
    )]
    NoAgent(PathBuf),
    /// A workspace of several agents, and none selected.
    #[error(
        "{} is a workspace of several agents ({names}): pass `--agent NAME` to pick one, or run \
         the command from inside `agents/NAME/`; each agent is served by its own `eve serve` or \
         `eve dev` process",
        root.display()
    )]
    ChooseAgent {
        /// The workspace.
        root: PathBuf,
        /// Its members, comma-separated.
        names: String,
    },
    /// `--agent NAME` names no member of the workspace.
    #[error(
        "no agent `{name}` in the workspace {}: its agents are {names} (a member is a folder \
         `agents/NAME/` holding `agent/` or agent files, without a `package.json` of its own)",
        root.display()
    )]
    UnknownAgent {
        /// The name given.
        name: String,
        /// The workspace.
        root: PathBuf,
        /// Its members, comma-separated.
        names: String,
    },
    /// `--agent NAME` outside any workspace, and no folder of that name.
    #[error(
        "--agent {name}: {} is not a workspace (no `agents/<name>/` folders with agent files) and \
         has no folder `{name}`; give a member's name in a workspace or the agent folder's path",
        root.display()
    )]
    NotWorkspace {
        /// The name given.
        name: String,
        /// Where eve looked.
        root: PathBuf,
    },
    /// The working directory is unusable.
    #[error("cannot read the current folder: {0}")]
    Cwd(#[from] std::io::Error),
}

/// Paths of one project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// The project folder.
    pub root: PathBuf,
    /// The agent folder (usually `<root>/agent`).
    pub agent_dir: PathBuf,
    /// `<root>/.eve`.
    pub state_dir: PathBuf,
    /// The `PATH` the scripts' interpreters are looked up in at build (W012, see
    /// [`crate::interpreters`]); `None` (the default) skips that check. The CLI sets it.
    pub interpreter_path: Option<std::ffi::OsString>,
    /// Fetches the documents OpenAPI connections name by URL (`openapi: https://…`); `None` (the
    /// default) fetches nothing and uses the copies an earlier build cached. The CLI sets it.
    pub fetch: Option<crate::compile::openapi::Fetcher>,
}

impl Project {
    /// Resolves a project from `--project` and `--agent`: the nested (`agent/`), workspace
    /// (`agents/<name>/`) and flat layouts, searched from the current folder upwards (as cargo
    /// searches for `Cargo.toml`). See [`crate::layout`].
    pub fn locate(root: Option<&Path>, agent: Option<&Path>) -> Result<Self, ProjectError> {
        crate::layout::locate(root, agent)
    }

    /// A project with explicit paths (no checks).
    pub fn at(root: PathBuf, agent_dir: PathBuf) -> Self {
        let state_dir = root.join(".eve");
        Self {
            root,
            agent_dir,
            state_dir,
            interpreter_path: None,
            fetch: None,
        }
    }

    /// Whether the agent files sit at the project's root (the flat layout, or `--agent .`).
    pub fn is_flat(&self) -> bool {
        self.agent_dir == self.root
            || matches!(
                (self.agent_dir.canonicalize(), self.root.canonicalize()),
                (Ok(a), Ok(r)) if a == r
            )
    }

    /// The root agent's name: the project folder's name (a workspace member's folder name).
    pub fn name(&self) -> String {
        self.root
            .canonicalize()
            .ok()
            .as_deref()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .unwrap_or("agent")
            .to_owned()
    }

    /// Prefix of agent-relative paths as shown to people (`agent/` for the usual layout).
    pub fn display_prefix(&self) -> String {
        match self.agent_dir.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => String::new(),
            Ok(rel) => format!("{}/", rel.display()),
            Err(_) => format!("{}/", self.agent_dir.display()),
        }
    }

    /// `.eve/builds`.
    pub fn builds_dir(&self) -> PathBuf {
        self.state_dir.join("builds")
    }

    /// `.eve/eve.db`.
    pub fn db_path(&self) -> PathBuf {
        self.state_dir.join("eve.db")
    }

    /// `.eve/sandboxes`.
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.state_dir.join("sandboxes")
    }
}
