//! [`TestAgent`]: a project folder in a temp dir holding `agent/`, written the way a user writes
//! one (instructions, `agent.yaml`, script tools with front matter), for tests that then compile
//! it, serve it or run the `eve` binary on it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A project in a temp dir: `agent/instructions.md`, `agent/agent.yaml` with
/// `default_tools: false`, and whatever a test adds. Removed when dropped.
pub struct TestAgent {
    pub dir: tempfile::TempDir,
}

impl Default for TestAgent {
    fn default() -> Self {
        Self::new()
    }
}

impl TestAgent {
    /// The smallest agent: instructions and no built-in tools.
    pub fn new() -> Self {
        let me = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        me.file("instructions.md", "You are a test agent.\n");
        me.file("agent.yaml", "default_tools: false\n");
        me
    }

    /// The project folder (holds `agent/`, and `.eve/` once built).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A path in the project folder.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// Writes `agent/<rel>`, atomically: a watcher never sees half a file.
    pub fn file(&self, rel: &str, content: &str) -> &Self {
        self.write(rel, content, false);
        self
    }

    /// An executable file `agent/<rel>` with exactly `text` (a tool script with its own front
    /// matter), written atomically.
    pub fn script(&self, rel: &str, text: &str) -> &Self {
        self.write(rel, text, true);
        self
    }

    /// A shell tool `agent/tools/<name>.sh`: front matter `front` (YAML lines, each written as a
    /// `# ` comment between `# ---` lines), then `body`.
    pub fn tool(&self, name: &str, front: &str, body: &str) -> &Self {
        let mut text = String::from("#!/bin/sh\n# ---\n");
        for line in front.lines() {
            text.push_str(&format!("# {line}\n"));
        }
        text.push_str("# ---\n");
        text.push_str(body);
        self.script(&format!("tools/{name}.sh"), &text)
    }

    fn write(&self, rel: &str, content: &str, executable: bool) {
        let path = self.root().join("agent").join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let tmp = path.with_file_name(format!(
            ".{}.tmp",
            path.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&tmp, content).unwrap();
        if executable {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::rename(&tmp, &path).unwrap();
    }
}
