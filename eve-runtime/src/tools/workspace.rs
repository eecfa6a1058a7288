//! Session workspaces: seeding them, and the lexical half of the file tools' path confinement.
//!
//! Every session gets a folder that is its tools' cwd. A new one is seeded with the agent's
//! `sandbox/workspace/**` files; seeding happens in a sibling folder that is renamed into place, so a
//! crash mid-seed never leaves a half-seeded workspace that later looks finished. Seeds are read
//! from the build and written into the staging folder one name at a time, never through a symlink
//! ([`super::beneath`]). The file tools' paths are refused here when absolute or climbing above the
//! workspace with `..`; the kernel resolves the rest beneath a handle of the workspace.

use std::io;
use std::path::{Component, Path, PathBuf};

use super::beneath::Beneath;
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
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(dir)?;
    let into = Beneath::open(dir)?;
    let from = Beneath::open(seed_root)?;
    for file in seed_files {
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("seed file `{file}` is not a relative path inside the agent folder"),
            )
        };
        let relative = normalize(Path::new(file)).ok_or_else(bad)?;
        let target = relative.strip_prefix(SEED_PREFIX).unwrap_or(&relative);
        if target.as_os_str().is_empty() {
            continue;
        }
        let parts = |p: &Path| -> Vec<std::ffi::OsString> {
            p.iter().map(std::ffi::OsStr::to_os_string).collect()
        };
        let copied = from.open_plain(&parts(&relative)).and_then(|mut source| {
            let mode = source.metadata()?.permissions().mode() & 0o777;
            let mut copy = into.create_plain(&parts(target), mode)?;
            io::copy(&mut source, &mut copy).map(drop)
        });
        copied.map_err(|e| {
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

/// The lexical check of a path given to a file tool: relative, and not above the workspace with
/// `..`. Returns it normalised (`a/./b/../c` is `a/c`); the kernel resolves the rest beneath a
/// handle of the workspace ([`Beneath`]), symlinks included.
pub(crate) fn relative(path: &str) -> Result<PathBuf, ToolError> {
    if Path::new(path).is_absolute() {
        return Err(ToolError::AbsolutePath {
            path: path.to_owned(),
        });
    }
    normalize(Path::new(path)).ok_or_else(|| ToolError::PathEscape {
        path: path.to_owned(),
        reason: "`..` leads above the workspace".to_owned(),
    })
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
