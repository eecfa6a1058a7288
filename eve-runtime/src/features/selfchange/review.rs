//! What a reviewer reads of a proposal's files: every file that differs between `agent/` and the
//! staged copy the proposal was applied to, each with its own diff and its own cap.
//!
//! One diff for the whole proposal, cut after so many lines, let one padded file (60 KB of
//! `instructions.md`) push every other file's diff out of sight, a `sandbox: host` tool's among
//! them. So the list is computed from the two folders themselves (what is there, not what the
//! proposal says it changes): every file added, removed, rewritten, renamed (removed and added
//! with the same bytes) or whose mode changed, each listed up front, and each file's diff cut on
//! its own, saying how much of that file's diff is not shown. Files that are prompt (Markdown
//! outside `tools/` and `hooks/`) come after the others, so code is read first.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::folder::walk;
use super::{FILE_DIFF_MAX_BYTES, FILE_DIFF_MAX_LINES};

/// One entry of a folder, as compared.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    /// `f` file, `l` symbolic link, `d` folder.
    kind: u8,
    /// Permission bits.
    mode: u32,
    /// A file's bytes, a link's target.
    bytes: Vec<u8>,
}

impl Node {
    fn sha(&self) -> String {
        hex::encode(Sha256::digest(&self.bytes))
    }
}

fn nodes(root: &Path) -> Result<BTreeMap<String, Node>, String> {
    let mut entries = Vec::new();
    walk(root, "", 0, &mut entries).map_err(|e| format!("cannot read {}: {e}", root.display()))?;
    let mut out = BTreeMap::new();
    for (rel, kind, mode) in entries {
        let path = root.join(&rel);
        let bytes = match kind {
            b'f' => std::fs::read(&path).map_err(|e| format!("cannot read {rel}: {e}"))?,
            b'l' => std::fs::read_link(&path)
                .map_err(|e| format!("cannot read {rel}: {e}"))?
                .to_string_lossy()
                .into_owned()
                .into_bytes(),
            _ => Vec::new(),
        };
        out.insert(
            rel,
            Node {
                kind,
                mode: mode & 0o7777,
                bytes,
            },
        );
    }
    Ok(out)
}

/// One changed file.
struct Changed {
    path: String,
    status: &'static str,
    from: Option<String>,
    old: Option<Node>,
    new: Option<Node>,
}

/// Every file that differs between `before` (`agent/`) and `after` (the staged copy), in the
/// order a reviewer reads them, each as `{path, status, from, modeBefore, modeAfter,
/// bytesBefore, bytesAfter, diff, cut}`: `status` is `added`, `removed`, `modified`, `renamed`
/// (`from` names the old path) or `mode` (only the permission bits changed); `cut` is `null`, or
/// `{lines, bytes}` of this file's diff not shown.
pub(crate) fn review(before: &Path, after: &Path) -> Result<Vec<Value>, String> {
    let (a, b) = (nodes(before)?, nodes(after)?);
    let mut removed: Vec<(String, Node)> = Vec::new();
    let mut added: Vec<(String, Node)> = Vec::new();
    let mut changed: Vec<Changed> = Vec::new();
    for (path, old) in &a {
        match b.get(path) {
            None if old.kind != b'd' => removed.push((path.clone(), old.clone())),
            Some(new) if new != old && !(old.kind == b'd' && new.kind == b'd') => {
                let status = if new.kind == old.kind && new.bytes == old.bytes {
                    "mode"
                } else {
                    "modified"
                };
                changed.push(Changed {
                    path: path.clone(),
                    status,
                    from: None,
                    old: Some(old.clone()),
                    new: Some(new.clone()),
                });
            }
            _ => {}
        }
    }
    for (path, new) in &b {
        if new.kind != b'd' && !a.contains_key(path) {
            added.push((path.clone(), new.clone()));
        }
    }
    // A file removed and one added with the same bytes: renamed.
    let mut by_sha: BTreeMap<(u8, String), Vec<(String, Node)>> = BTreeMap::new();
    for (path, node) in removed {
        by_sha
            .entry((node.kind, node.sha()))
            .or_default()
            .push((path, node));
    }
    for (path, new) in added {
        let from = by_sha.get_mut(&(new.kind, new.sha())).and_then(Vec::pop);
        changed.push(match from {
            Some((from, old)) => Changed {
                path,
                status: "renamed",
                from: Some(from),
                old: Some(old),
                new: Some(new),
            },
            None => Changed {
                path,
                status: "added",
                from: None,
                old: None,
                new: Some(new),
            },
        });
    }
    for (path, old) in by_sha.into_values().flatten() {
        changed.push(Changed {
            path,
            status: "removed",
            from: None,
            old: Some(old),
            new: None,
        });
    }
    changed.sort_by(|x, y| (is_prompt(&x.path), &x.path).cmp(&(is_prompt(&y.path), &y.path)));
    Ok(changed.iter().map(entry).collect())
}

/// Markdown outside `tools/` and `hooks/`: instructions and skills, read after the code.
fn is_prompt(path: &str) -> bool {
    path.ends_with(".md") && !path.split('/').any(|p| p == "tools" || p == "hooks")
}

fn entry(c: &Changed) -> Value {
    let mode = |n: &Option<Node>| n.as_ref().map(|n| format!("{:o}", n.mode));
    let size = |n: &Option<Node>| n.as_ref().map(|n| n.bytes.len());
    let (text, cut) = cap(&file_diff(c));
    json!({
        "path": c.path,
        "status": c.status,
        "from": c.from,
        "modeBefore": mode(&c.old),
        "modeAfter": mode(&c.new),
        "bytesBefore": size(&c.old),
        "bytesAfter": size(&c.new),
        "diff": text,
        "cut": cut.map(|(lines, bytes)| json!({"lines": lines, "bytes": bytes})),
    })
}

/// A file's whole diff, git's way: a `diff --git` line, its mode and rename lines, then the
/// unified diff of its text (or a line for a binary file or a link).
fn file_diff(c: &Changed) -> String {
    let old_path = c.from.as_deref().unwrap_or(&c.path);
    let mut out = format!("diff --git a/{old_path} b/{}\n", c.path);
    match (&c.old, &c.new) {
        (None, Some(n)) => out.push_str(&format!("new file mode {}\n", git_mode(n))),
        (Some(o), None) => out.push_str(&format!("deleted file mode {}\n", git_mode(o))),
        (Some(o), Some(n)) => {
            if o.mode != n.mode || o.kind != n.kind {
                out.push_str(&format!(
                    "old mode {}\nnew mode {}\n",
                    git_mode(o),
                    git_mode(n)
                ));
            }
            if let Some(from) = &c.from {
                out.push_str(&format!("rename from {from}\nrename to {}\n", c.path));
            }
        }
        (None, None) => {}
    }
    let text = |n: &Option<Node>| match n {
        None => Some(String::new()),
        Some(n) if n.kind == b'f' => String::from_utf8(n.bytes.clone()).ok(),
        Some(_) => None,
    };
    match (text(&c.old), text(&c.new)) {
        (Some(old), Some(new)) if old == new && c.old.is_some() && c.new.is_some() => {}
        (Some(old), Some(new)) => {
            let a = if c.old.is_some() {
                format!("a/{old_path}")
            } else {
                "/dev/null".to_owned()
            };
            let b = if c.new.is_some() {
                format!("b/{}", c.path)
            } else {
                "/dev/null".to_owned()
            };
            let diff = similar::TextDiff::from_lines(&old, &new)
                .unified_diff()
                .context_radius(3)
                .header(&a, &b)
                .to_string();
            out.push_str(&diff);
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        _ => {
            let describe = |n: &Option<Node>| match n {
                None => "nothing".to_owned(),
                Some(n) if n.kind == b'l' => {
                    format!("a symbolic link to {}", String::from_utf8_lossy(&n.bytes))
                }
                Some(n) => format!("{} bytes of binary data", n.bytes.len()),
            };
            out.push_str(&format!(
                "{}: {} -> {}\n",
                c.path,
                describe(&c.old),
                describe(&c.new)
            ));
        }
    }
    out
}

fn git_mode(n: &Node) -> String {
    let kind = match n.kind {
        b'l' => 0o120000,
        _ => 0o100000,
    };
    format!("{:o}", kind | (n.mode & 0o777))
}

/// `text` cut at [`FILE_DIFF_MAX_LINES`] lines or [`FILE_DIFF_MAX_BYTES`] bytes, ending with a
/// line that says how much of this file's diff is not shown; the cut's `(lines, bytes)`.
pub(crate) fn cap(text: &str) -> (String, Option<(usize, usize)>) {
    let lines = text.lines().count();
    if lines <= FILE_DIFF_MAX_LINES && text.len() <= FILE_DIFF_MAX_BYTES {
        return (text.to_owned(), None);
    }
    let mut kept = String::new();
    let mut shown = 0;
    let mut shown_bytes = 0;
    for line in text.lines() {
        if shown == FILE_DIFF_MAX_LINES {
            break;
        }
        if kept.len() + line.len() + 1 > FILE_DIFF_MAX_BYTES {
            // A line longer than what is left (a minified script) shows its head, never nothing.
            let room = FILE_DIFF_MAX_BYTES.saturating_sub(kept.len() + 1);
            let mut end = room.min(line.len());
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            if end > 0 {
                kept.push_str(&line[..end]);
                kept.push_str("…\n");
                shown_bytes += end;
            }
            break;
        }
        kept.push_str(line);
        kept.push('\n');
        shown_bytes += line.len() + 1;
        shown += 1;
    }
    let (rest_lines, rest_bytes) = (lines - shown, text.len().saturating_sub(shown_bytes));
    kept.push_str(&format!(
        "… {} more of this file's diff not shown ({rest_lines} more line{})\n",
        size(rest_bytes),
        if rest_lines == 1 { "" } else { "s" }
    ));
    (kept, Some((rest_lines, rest_bytes)))
}

/// `58 KiB`, `312 bytes`.
pub(crate) fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// The files' diffs one after the other (each already cut on its own), and whether any was cut.
pub(crate) fn joined(files: &[Value]) -> (String, bool) {
    let mut out = String::new();
    let mut cut = false;
    for f in files {
        out.push_str(f["diff"].as_str().unwrap_or_default());
        cut |= !f["cut"].is_null();
    }
    (out, cut)
}
