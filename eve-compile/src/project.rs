//! Where a project's pieces live: the agent folder, `.eve/`, builds, the store.
//!
//! A project is a folder holding `agent/` (the agent) and `.eve/` (builds, the SQLite store,
//! session workspaces). Every command resolves its paths here once, so they agree.

use std::path::{Path, PathBuf};

/// Why a project could not be located.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// No agent folder.
    #[error("no agent folder at {0}: run `eve init` to create one, or pass `--agent DIR`")]
    NoAgent(PathBuf),
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
}

impl Project {
    /// Resolves a project. Without `root`, the current folder and its ancestors are searched for an
    /// `agent/` folder (as cargo searches for `Cargo.toml`).
    pub fn locate(root: Option<&Path>, agent: Option<&Path>) -> Result<Self, ProjectError> {
        let cwd = std::env::current_dir()?;
        let root = match (root, agent) {
            (Some(r), _) => cwd.join(r),
            (None, Some(_)) => cwd.clone(),
            (None, None) => cwd
                .ancestors()
                .find(|p| p.join("agent").is_dir())
                .map_or_else(|| cwd.clone(), Path::to_path_buf),
        };
        let agent_dir = match agent {
            Some(a) => cwd.join(a),
            None => root.join("agent"),
        };
        if !agent_dir.is_dir() {
            return Err(ProjectError::NoAgent(agent_dir));
        }
        Ok(Self::at(root, agent_dir))
    }

    /// A project with explicit paths (no checks).
    pub fn at(root: PathBuf, agent_dir: PathBuf) -> Self {
        let state_dir = root.join(".eve");
        Self {
            root,
            agent_dir,
            state_dir,
            interpreter_path: None,
        }
    }

    /// The root agent's name: the project folder's name.
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
