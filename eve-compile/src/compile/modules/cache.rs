//! The build's cache of module evaluations, so that a rebuild whose modules did not change starts
//! no Node at all.
//!
//! An entry is kept per agent folder in the state folder (`.eve/cache/modules-<hash>.json`). Its
//! key is the SHA-256 of what decides the evaluation: eve's own JavaScript (the shim, the hooks,
//! the evaluator), the Node binary (path, size, modification time), the request and every
//! module's text. It is used only while every file Node loaded for it (the modules' imports, the
//! packages in `node_modules`) and every `package.json` above the agent folder is as it was (size
//! and modification time); anything else evaluates again and replaces the entry. A cache that
//! cannot be read or written is no cache: the build evaluates as if it had none.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{EVALUATE, SETUP, SHIM};

/// One cached evaluation.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Entry {
    key: String,
    /// The Node's version, so that no process is started to ask it again.
    pub(super) version: (u64, u64),
    /// Node's answer, as it printed it.
    pub(super) answer: Value,
    /// The files the answer depends on: path, size, modification time (ns since the epoch; 0 and
    /// 0 for a file that did not exist).
    stamps: Vec<(PathBuf, u64, u128)>,
}

/// Where one agent folder's evaluation is cached, and under which key.
pub(super) struct Cache {
    file: PathBuf,
    key: String,
}

fn stamp(path: &Path) -> (u64, u128) {
    match std::fs::metadata(path) {
        Ok(m) => (
            m.len(),
            m.modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(1, |d| d.as_nanos()),
        ),
        Err(_) => (0, 0),
    }
}

impl Cache {
    /// The cache of the agent folder `agent_path` (`""` for the root) in `cache_dir`, for an
    /// evaluation by `node` of `request` over modules with `texts`.
    pub(super) fn new(
        cache_dir: &Path,
        agent_path: &str,
        node: &Path,
        request: &Value,
        texts: &[&str],
    ) -> Self {
        let mut h = Sha256::new();
        for part in [SHIM, SETUP, EVALUATE] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let (len, modified) = stamp(node);
        h.update(format!("{}\0{len}\0{modified}\0", node.display()).as_bytes());
        h.update(request.to_string().as_bytes());
        for text in texts {
            h.update([0]);
            h.update(text.as_bytes());
        }
        let key = hex::encode(h.finalize());
        let name = hex::encode(Sha256::digest(agent_path.as_bytes()));
        Self {
            file: cache_dir
                .join("cache")
                .join(format!("modules-{}.json", &name[..16])),
            key,
        }
    }

    /// The cached evaluation, when it is still the one this build would make.
    pub(super) fn get(&self) -> Option<Entry> {
        let entry: Entry = serde_json::from_slice(&std::fs::read(&self.file).ok()?).ok()?;
        let fresh = entry.key == self.key
            && entry
                .stamps
                .iter()
                .all(|(path, len, modified)| stamp(path) == (*len, *modified));
        fresh.then_some(entry)
    }

    /// Keeps `answer` (Node's, from `version`) with the stamps of the files it depends on: those
    /// Node loaded (`file://` URLs) and the `package.json` files of `agent_dir` and above.
    pub(super) fn put(&self, agent_dir: &Path, version: (u64, u64), answer: &Value) {
        let mut paths: Vec<PathBuf> = answer
            .get("loaded")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(|url| url.strip_prefix("file://"))
            .map(|p| PathBuf::from(super::loaded::percent_decode(p)))
            .collect();
        paths.extend(agent_dir.ancestors().map(|d| d.join("package.json")));
        let stamps = paths
            .into_iter()
            .map(|p| {
                let (len, modified) = stamp(&p);
                (p, len, modified)
            })
            .collect();
        let entry = Entry {
            key: self.key.clone(),
            version,
            answer: answer.clone(),
            stamps,
        };
        let Ok(bytes) = serde_json::to_vec(&entry) else {
            return;
        };
        if let Some(dir) = self.file.parent()
            && std::fs::create_dir_all(dir).is_ok()
        {
            // Written aside, then renamed: a build that stops half-way leaves no torn entry.
            let tmp = self
                .file
                .with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, &self.file).is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
}
