//! The Node a build evaluates modules with: `EVE_NODE` when set (a path, or a program name looked
//! up on `PATH`), else `node` on `PATH`; refused, with the fix, when missing or older than 22.6
//! (TypeScript runs on Node's type stripping; eve itself asks for 24).

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::interpreters::{lookup, node_version};

/// The oldest Node that strips TypeScript types.
pub const NODE_MIN: (u64, u64) = (22, 6);

/// The Node a build uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFound {
    /// Where it is.
    pub path: PathBuf,
    /// What a module tool's interpreter names: `node` when found on `PATH`, else the path.
    pub program: String,
    /// `(major, minor)`.
    pub version: (u64, u64),
}

/// A Node chosen by the embedding program for every build of this process, over `EVE_NODE` and
/// `PATH` (tests, which cannot change their process's environment safely).
static CHOSEN: OnceLock<PathBuf> = OnceLock::new();

/// Makes every build of this process evaluate modules with `node`, as `EVE_NODE` would; the
/// first call wins.
pub fn use_node(node: PathBuf) {
    let _ = CHOSEN.set(node);
}

/// `EVE_NODE`, or the Node chosen with [`use_node`].
fn chosen() -> Option<String> {
    if let Some(path) = CHOSEN.get() {
        return Some(path.to_string_lossy().into_owned());
    }
    std::env::var("EVE_NODE")
        .ok()
        .filter(|p| !p.trim().is_empty())
}

/// Where the Node a build uses is (`EVE_NODE`, else `node` on `PATH`), without starting it: its
/// path and what a module tool's interpreter names. The error is a sentence with its fix.
pub(super) fn locate_node() -> Result<(PathBuf, String), String> {
    let path_var = std::env::var_os("PATH");
    let (program, from_env) = match chosen() {
        Some(p) => (p, true),
        None => ("node".to_owned(), false),
    };
    let path = lookup(&program, path_var.as_deref()).ok_or_else(|| {
        if from_env {
            format!("`EVE_NODE` is `{program}`, which is not an executable Node")
        } else {
            "TypeScript and JavaScript modules are evaluated with Node, and `node` is not on PATH"
                .to_owned()
        }
    })?;
    let program = if from_env {
        path.to_string_lossy().into_owned()
    } else {
        "node".to_owned()
    };
    Ok((path, program))
}

/// Finds and checks Node; the error is a sentence with its fix.
pub fn find_node() -> Result<NodeFound, String> {
    let path_var = std::env::var_os("PATH");
    let (program, from_env) = match chosen() {
        Some(p) => (p, true),
        None => ("node".to_owned(), false),
    };
    let Some(path) = lookup(&program, path_var.as_deref()) else {
        return Err(if from_env {
            format!("`EVE_NODE` is `{program}`, which is not an executable Node")
        } else {
            "TypeScript and JavaScript modules are evaluated with Node, and `node` is not on PATH"
                .to_owned()
        });
    };
    let Some(version) = node_version(&path) else {
        return Err(format!(
            "`{}` does not answer `--version` as Node does",
            path.display()
        ));
    };
    if version < NODE_MIN {
        return Err(format!(
            "`{}` is Node v{}.{}; modules need Node {}.{} or later (type stripping)",
            path.display(),
            version.0,
            version.1,
            NODE_MIN.0,
            NODE_MIN.1
        ));
    }
    let program = if from_env {
        path.to_string_lossy().into_owned()
    } else {
        "node".to_owned()
    };
    Ok(NodeFound {
        path,
        program,
        version,
    })
}
