//! What Node loaded while it read the modules, carried into the build: the files of the agent
//! folder they import (`lib/`) and the `node_modules` packages (each with its `package.json`
//! files), found as Node finds them, in the agent folder or any folder above it.

use std::path::{Path, PathBuf};

use super::super::Compiler;

impl Compiler {
    /// Adds the files Node loaded from `node_modules` (the agent folder's or the nearest one above
    /// it, as Node resolves them) and from the agent folder to the build, with each package's
    /// `package.json`.
    pub(super) fn carry_loaded(&mut self, agent_dir: &Path, loaded: &[String]) {
        // The agent folder and every folder above it: Node looks for `node_modules` in each.
        let roots: Vec<PathBuf> = agent_dir.ancestors().map(Path::to_path_buf).collect();
        for url in loaded {
            let Some(path) = url.strip_prefix("file://").map(percent_decode) else {
                continue;
            };
            let path = PathBuf::from(path);
            if let Ok(rel) = path.strip_prefix(agent_dir)
                && !rel.starts_with("node_modules")
            {
                if let Some(rel) = rel.to_str() {
                    self.files.insert(rel.to_owned());
                }
                continue;
            }
            let Some(rel) = roots
                .iter()
                .filter_map(|root| path.strip_prefix(root.join("node_modules")).ok())
                .next()
            else {
                continue;
            };
            let Some(rel) = rel.to_str() else { continue };
            self.files.insert(format!("node_modules/{rel}"));
            let parts: Vec<&str> = rel.split('/').collect();
            let package = if parts.first().is_some_and(|p| p.starts_with('@')) && parts.len() > 2 {
                format!("{}/{}", parts[0], parts[1])
            } else {
                parts.first().map(|p| (*p).to_owned()).unwrap_or_default()
            };
            // Every package.json between the file and its package root (nested `exports`).
            let mut dir = Path::new(rel).parent();
            while let Some(d) = dir {
                if d.as_os_str().is_empty() || !d.starts_with(&package) {
                    break;
                }
                let candidate = format!("node_modules/{}/package.json", d.display());
                if roots.iter().any(|r| r.join(&candidate).is_file()) {
                    self.files.insert(candidate);
                }
                dir = d.parent();
            }
        }
    }
}

/// `%xx` escapes of a file URL's path decoded.
pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
