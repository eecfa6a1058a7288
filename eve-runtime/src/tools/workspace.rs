//! Session workspaces: seeding them, and keeping built-in file tools inside them.
//!
//! Every session gets a folder that is its tools' cwd. A new one is seeded with the agent's
//! `sandbox/workspace/**` files; seeding happens in a sibling folder that is renamed into place, so a
//! crash mid-seed never leaves a half-seeded workspace that later looks finished. The file tools
//! resolve the model's paths here: relative, no `..` above the root, no symlink leading out.

use std::io;
use std::path::{Component, Path, PathBuf};

use super::error::ToolError;

/// Prefix of seed files in the agent folder; it is stripped when they are copied.
const SEED_PREFIX: &str = "sandbox/workspace";

/// Creates the session workspace and copies the seed files into it, only when it does not exist yet.
///
/// Seed paths are relative to `seed_root`; `sandbox/workspace/notes/a.txt` lands at `notes/a.txt`.
/// A seed path that is absolute or climbs out with `..` is an `InvalidInput` error.
pub fn prepare_workspace(
    workspace: &Path,
    seed_root: &Path,
    seed_files: &[String],
) -> io::Result<()> {
    if workspace.exists() {
        return Ok(());
    }
    let parent = workspace.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(parent)?;
    if seed_files.is_empty() {
        return match std::fs::create_dir(workspace) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        };
    }
    let name = workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "workspace".to_owned());
    let staging = parent.join(format!(".{name}.seeding-{}", ulid::Ulid::new()));
    let seeded = seed_into(&staging, seed_root, seed_files)
        .and_then(|()| std::fs::rename(&staging, workspace));
    match seeded {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            // Another process seeded it first: theirs is as good as ours.
            if workspace.is_dir() { Ok(()) } else { Err(e) }
        }
    }
}

/// Copies the seed files into a fresh `dir`.
fn seed_into(dir: &Path, seed_root: &Path, seed_files: &[String]) -> io::Result<()> {
    std::fs::create_dir(dir)?;
    for file in seed_files {
        let relative = Path::new(file);
        let target = relative.strip_prefix(SEED_PREFIX).unwrap_or(relative);
        let target = normalize(target).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("seed file `{file}` is not a relative path inside the agent folder"),
            )
        })?;
        if target.as_os_str().is_empty() {
            continue;
        }
        let destination = dir.join(&target);
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(seed_root.join(relative), &destination).map_err(|e| {
            io::Error::new(e.kind(), format!("could not copy seed file `{file}`: {e}"))
        })?;
    }
    Ok(())
}

/// Lexically normalises a relative path; `None` when it is absolute or climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Resolves a path given to a built-in tool inside `workspace` (created when missing).
///
/// Absolute paths, `..` above the workspace and symlinks that resolve outside it (or cannot be
/// resolved) are refused. The returned path is the workspace joined with the normalised path.
pub(crate) fn resolve_in_workspace(workspace: &Path, path: &str) -> Result<PathBuf, ToolError> {
    if Path::new(path).is_absolute() {
        return Err(ToolError::AbsolutePath {
            path: path.to_owned(),
        });
    }
    let relative = normalize(Path::new(path)).ok_or_else(|| ToolError::PathEscape {
        path: path.to_owned(),
        reason: "`..` leads above the workspace".to_owned(),
    })?;
    std::fs::create_dir_all(workspace).map_err(|source| ToolError::Workspace {
        path: workspace.to_owned(),
        source,
    })?;
    let root = workspace
        .canonicalize()
        .map_err(|source| ToolError::Workspace {
            path: workspace.to_owned(),
            source,
        })?;
    let mut current = root.clone();
    for component in relative.components() {
        current.push(component);
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => match current.canonicalize() {
                Ok(target) if target.starts_with(&root) => {}
                Ok(_) => {
                    return Err(ToolError::PathEscape {
                        path: path.to_owned(),
                        reason: "a symlink on the way points out of the workspace".to_owned(),
                    });
                }
                Err(_) => {
                    return Err(ToolError::PathEscape {
                        path: path.to_owned(),
                        reason: "a symlink on the way cannot be resolved".to_owned(),
                    });
                }
            },
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(root.join(relative))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn normalises() {
        assert_eq!(
            normalize(Path::new("a/./b/../c")),
            Some(PathBuf::from("a/c"))
        );
        assert_eq!(normalize(Path::new("a/../..")), None);
        assert_eq!(normalize(Path::new("/etc")), None);
    }
}
