//! Checking a proposal before anything is staged: the `propose_change` input (fields, paths,
//! duplicates, size caps) and each change against the folder it is applied to, so a change can
//! only ever write inside `agent/`.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::{
    FileChange, MAX_FILE_BYTES, MAX_FILES, MAX_PATH_BYTES, MAX_RATIONALE_CHARS, MAX_SUMMARY_CHARS,
    MAX_TOTAL_BYTES, Proposal,
};

/// Checks one path the model gave: relative to `agent/`, inside it, outside every dot-folder.
/// Returns the normalised path (no `./`, no trailing slash) or why it is refused.
pub fn check_path(raw: &str) -> Result<String, String> {
    let refuse = |why: &str| Err(format!("`{raw}`: {why}"));
    if raw.trim().is_empty() {
        return refuse("the path is empty; give a path relative to the agent folder");
    }
    if raw.contains('\0') || raw.chars().any(char::is_control) {
        return refuse("the path holds control characters");
    }
    if raw.len() > MAX_PATH_BYTES {
        return refuse(&format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    if raw.contains('\\') {
        return refuse("use `/` between folders; `\\` is refused");
    }
    let bytes = raw.as_bytes();
    if raw.starts_with('/')
        || raw.starts_with('~')
        || (bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic())
    {
        return refuse(
            "absolute paths are refused: paths are relative to the agent folder, such as \
             `skills/triage.md`",
        );
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" => return refuse("the path has an empty segment (`//` or a trailing `/`)"),
            "." => continue,
            ".." => return refuse("`..` is refused: a change stays inside the agent folder"),
            p if p.starts_with('.') => {
                return refuse(
                    "dot-files and dot-folders (`.eve/`, `.git/`, …) are not part of the agent \
                     and cannot be changed",
                );
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return refuse("the path names the agent folder itself; name a file in it");
    }
    Ok(parts.join("/"))
}

/// Reads and checks a `propose_change` input: fields, paths, duplicates and size caps.
pub fn parse(input: &Value) -> Result<Proposal, Vec<String>> {
    let mut errors = Vec::new();
    let text = |key: &str, max: usize, errors: &mut Vec<String>| -> String {
        match input.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => {
                if s.chars().count() > max {
                    errors.push(format!("`{key}` is longer than {max} characters"));
                }
                s.trim().to_owned()
            }
            _ => {
                errors.push(format!("`{key}` is required: a non-empty string"));
                String::new()
            }
        }
    };
    let summary = text("summary", MAX_SUMMARY_CHARS, &mut errors);
    let rationale = text("rationale", MAX_RATIONALE_CHARS, &mut errors);
    let mut changes = Vec::new();
    match input.get("changes").and_then(Value::as_array) {
        None => errors.push(
            "`changes` is required: a list of `{path, content}` or `{path, delete: true}`"
                .to_owned(),
        ),
        Some(list) if list.is_empty() => {
            errors.push("`changes` is empty: nothing to propose".to_owned())
        }
        Some(list) if list.len() > MAX_FILES => errors.push(format!(
            "{} files are changed; a proposal changes at most {MAX_FILES}: split it",
            list.len()
        )),
        Some(list) => {
            let mut seen = BTreeSet::new();
            let mut total = 0usize;
            for (i, item) in list.iter().enumerate() {
                let Some(raw) = item.get("path").and_then(Value::as_str) else {
                    errors.push(format!("change {}: `path` is required", i + 1));
                    continue;
                };
                if let Some(extra) = item.as_object().and_then(|o| {
                    o.keys()
                        .find(|k| !["path", "content", "delete"].contains(&k.as_str()))
                }) {
                    errors.push(format!(
                        "change {} (`{raw}`): unknown field `{extra}`",
                        i + 1
                    ));
                }
                let path = match check_path(raw) {
                    Ok(p) => p,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                if !seen.insert(path.clone()) {
                    errors.push(format!("`{path}` is changed twice; give each file once"));
                    continue;
                }
                let delete = item.get("delete").and_then(Value::as_bool).unwrap_or(false);
                match (item.get("content"), delete) {
                    (Some(_), true) => errors.push(format!(
                        "`{path}`: give `content` or `delete: true`, not both"
                    )),
                    (None, true) => changes.push(FileChange::Delete { path }),
                    (Some(Value::String(content)), false) => {
                        if content.len() > MAX_FILE_BYTES {
                            errors.push(format!(
                                "`{path}` is {} KiB; a file is at most {} KiB",
                                content.len() / 1024,
                                MAX_FILE_BYTES / 1024
                            ));
                        }
                        total = total.saturating_add(content.len());
                        changes.push(FileChange::Write {
                            path,
                            content: content.clone(),
                        });
                    }
                    (Some(_), false) => {
                        errors.push(format!("`{path}`: `content` must be a string"))
                    }
                    (None, false) => errors.push(format!(
                        "`{path}`: give the whole new `content`, or `delete: true`"
                    )),
                }
            }
            if total > MAX_TOTAL_BYTES {
                errors.push(format!(
                    "the proposal holds {} KiB of content; at most {} KiB in all: split it",
                    total / 1024,
                    MAX_TOTAL_BYTES / 1024
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(Proposal {
            summary,
            rationale,
            changes,
        })
    } else {
        Err(errors)
    }
}

/// Checks `change` against the folder `root` it is applied to: no symbolic link on the way (it
/// could lead outside), no file where a folder is needed, a folder or a special file (a pipe
/// would hang the diff) is not replaced, a deleted file exists.
pub fn check_on_disk(root: &Path, change: &FileChange) -> Result<(), String> {
    let rel = change.path();
    let parts: Vec<&str> = rel.split('/').collect();
    let mut at = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "`{rel}`: `{}` is a symbolic link; changes through links are refused (a link \
                     can lead outside the agent folder)",
                    parts[..=i].join("/")
                ));
            }
            Ok(meta) if !last && !meta.is_dir() => {
                return Err(format!(
                    "`{rel}`: `{}` is a file, not a folder",
                    parts[..=i].join("/")
                ));
            }
            Ok(meta) if last && meta.is_dir() => {
                return Err(format!("`{rel}` is a folder; name a file"));
            }
            Ok(meta) if last && !meta.is_file() => {
                return Err(format!(
                    "`{rel}` is not a regular file (a pipe, socket or device); only files are \
                     changed"
                ));
            }
            Ok(_) => {}
            Err(_) => {
                if let FileChange::Delete { .. } = change {
                    return Err(format!("`{rel}` does not exist, so it cannot be deleted"));
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Checks that `change`, written under the agent folder `agent_dir`, stays out of `protected`:
/// the project's state folder and its `evals/` (the gate a proposal must not rewrite), which the
/// agent folder holds when it is the project's root (`--agent .`).
pub fn check_protected(
    agent_dir: &Path,
    protected: &[std::path::PathBuf],
    change: &FileChange,
) -> Result<(), String> {
    let base = agent_dir
        .canonicalize()
        .unwrap_or_else(|_| agent_dir.to_path_buf());
    let target = base.join(change.path());
    for dir in protected {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if target.starts_with(&dir) {
            return Err(format!(
                "`{}` is inside {}, which belongs to the project, not the agent; a change \
                 cannot touch it",
                change.path(),
                dir.display()
            ));
        }
    }
    Ok(())
}
