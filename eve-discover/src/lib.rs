//! Agent folder discovery: walk an agent folder and put every file in its slot.
//!
//! An agent is a folder; the path of a file is its identity. Discovery reads the tree (from disk or
//! from memory), classifies each entry by the conventions (`tools/`, `skills/`, `subagents/`, …),
//! derives names from paths, and reports anything it does not understand as a [`Diagnostic`]. It never
//! parses YAML and never runs anything: that is compilation's job (`eve-compile`).
//!
//! This file holds what discovery gives (the classified [`AgentDir`] and [`Discovery`]); the
//! walker that lists and reads the folder is `walk.rs`, the rules of each slot folder `slots.rs`,
//! the name rules (ignored entries, stems, "did you mean") `names.rs`, and where the bytes come
//! from `source.rs`.

mod diagnostic;
pub mod evals;
mod names;
mod refused;
mod slots;
mod source;
mod walk;

pub use diagnostic::{Code, Diagnostic, Severity, error_count};
pub use evals::{EvalDiscovery, EvalFile, discover_evals};
pub use names::{closest, is_ignored, split_ext};
pub use source::{DirEntry, EntryKind, FsSource, MemSource, Source, threads_for};

use walk::Walker;

/// How deep subagents (and folders inside tools/skills) may nest before discovery stops.
pub const MAX_DEPTH: usize = 16;

/// A text file read from the agent folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Path relative to the root agent folder, with `/` separators (e.g. `tools/weather.py`).
    pub path: String,
    /// The file's contents.
    pub text: String,
    /// Whether an execute bit is set.
    pub executable: bool,
}

/// A file whose name (derived from its path) is its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The derived name (`tools/sub/get.py` → `sub-get`).
    pub name: String,
    /// The file.
    pub file: SourceFile,
}

/// A tool file: a YAML definition or a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFile {
    /// The derived name.
    pub name: String,
    /// The file.
    pub file: SourceFile,
    /// `tools/NAME.yaml` (declarative) rather than a script.
    pub yaml: bool,
}

/// A skill: `skills/NAME.md`, or `skills/NAME/SKILL.md` with sibling files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// The derived name.
    pub name: String,
    /// The markdown file.
    pub file: SourceFile,
    /// Other files of a packaged skill, relative to the root agent folder.
    pub assets: Vec<String>,
}

/// A subagent folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subagent {
    /// The folder name.
    pub name: String,
    /// Its contents: a full agent.
    pub agent: AgentDir,
}

/// `sandbox/`: configuration and the files seeded into every session workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxDir {
    /// `sandbox/sandbox.yaml`.
    pub config: Option<SourceFile>,
    /// Files under `sandbox/workspace/`, relative to the root agent folder.
    pub workspace: Vec<String>,
}

/// One agent folder, classified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentDir {
    /// Path of this folder relative to the root agent (`""` for the root).
    pub path: String,
    /// `agent.yaml`.
    pub config: Option<SourceFile>,
    /// `instructions.md`.
    pub instructions: Option<SourceFile>,
    /// The `.md` files of `instructions/`, in file-name order (read after `instructions.md`).
    pub instructions_dir: Vec<SourceFile>,
    /// `tools/**`.
    pub tools: Vec<ToolFile>,
    /// `skills/**`.
    pub skills: Vec<SkillFile>,
    /// `subagents/*/`.
    pub subagents: Vec<Subagent>,
    /// `subagents/*.yaml`: remote agents (other eve deployments).
    pub remote_subagents: Vec<Named>,
    /// `schedules/*.md`.
    pub schedules: Vec<Named>,
    /// `hooks/*`.
    pub hooks: Vec<Named>,
    /// `connections/*.yaml`.
    pub connections: Vec<Named>,
    /// `channels/*.yaml`.
    pub channels: Vec<Named>,
    /// `sandbox/`.
    pub sandbox: Option<SandboxDir>,
    /// `agent.ts` and `instructions.ts` (or `.mts`, `.js`, `.mjs`): modules as eve writes them
    /// (`defineAgent`, `defineInstructions`), read by Node at build.
    pub modules: Vec<SourceFile>,
}

impl AgentDir {
    /// Number of files discovered in this agent and its subagents.
    pub fn file_count(&self) -> usize {
        usize::from(self.config.is_some())
            + usize::from(self.instructions.is_some())
            + self.instructions_dir.len()
            + self.tools.len()
            + self
                .skills
                .iter()
                .map(|s| 1 + s.assets.len())
                .sum::<usize>()
            + self.schedules.len()
            + self.hooks.len()
            + self.connections.len()
            + self.channels.len()
            + self.remote_subagents.len()
            + self
                .sandbox
                .as_ref()
                .map_or(0, |s| usize::from(s.config.is_some()) + s.workspace.len())
            + self
                .subagents
                .iter()
                .map(|s| s.agent.file_count())
                .sum::<usize>()
    }
}

/// The result of walking an agent folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// The root agent.
    pub agent: AgentDir,
    /// Everything discovery could not make sense of.
    pub diagnostics: Vec<Diagnostic>,
}

/// Walks the agent folder behind `source`.
pub fn discover(source: &dyn Source) -> Discovery {
    discover_in(source, false)
}

/// Walks an agent folder that is also its project's folder (the flat layout): the project's own
/// files at its root (`package.json`, `node_modules/`, `evals/`, `README.md`, …) are not agent
/// files and are passed over without a word.
pub fn discover_flat(source: &dyn Source) -> Discovery {
    discover_in(source, true)
}

fn discover_in(source: &dyn Source, flat: bool) -> Discovery {
    let mut walker = Walker::new(source);
    walker.flat = flat;
    let agent = walker.agent("", 0);
    Discovery {
        agent,
        diagnostics: walker.diagnostics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_slot() {
        let src = MemSource::new()
            .file("agent.yaml", "model: mock/echo\n")
            .file("instructions.md", "Be brief.")
            .executable("tools/weather.py", "# ---\n# description: w\n# ---\n")
            .file("tools/search.yaml", "description: s\n")
            .executable("tools/gh/issues.sh", "#!/bin/sh\n")
            .file("tools/_helper.py", "")
            .file("tools/weather.test.py", "")
            .file("skills/flat.md", "---\ndescription: f\n---\nbody")
            .file("skills/pkg/SKILL.md", "---\ndescription: p\n---\n")
            .file("skills/pkg/ref/data.csv", "a,b")
            .file("subagents/helper/agent.yaml", "description: h\n")
            .file("subagents/helper/instructions.md", "help")
            .file("subagents/helper/tools/t.yaml", "description: t\n")
            .file("schedules/daily.md", "---\ncron: '0 9 * * *'\n---\nReport.")
            .executable("hooks/audit.sh", "#!/bin/sh\n")
            .file("connections/gh.yaml", "url: http://x\n")
            .file("channels/eve.yaml", "kind: http\n")
            .file("sandbox/sandbox.yaml", "{}\n")
            .file("sandbox/workspace/notes/a.txt", "x")
            .file(".hidden/x", "");
        let d = discover(&src);
        assert!(d.diagnostics.is_empty(), "{:?}", d.diagnostics);
        let a = &d.agent;
        let tools: Vec<_> = a.tools.iter().map(|t| (t.name.as_str(), t.yaml)).collect();
        assert_eq!(
            tools,
            [("gh-issues", false), ("search", true), ("weather", false)]
        );
        assert_eq!(a.skills[1].name, "pkg");
        assert_eq!(a.skills[1].assets, ["skills/pkg/ref/data.csv"]);
        assert_eq!(
            a.subagents[0].agent.tools[0].file.path,
            "subagents/helper/tools/t.yaml"
        );
        assert_eq!(a.schedules[0].name, "daily");
        assert_eq!(a.hooks[0].name, "audit");
        assert_eq!(
            a.sandbox.as_ref().map(|s| s.workspace.clone()),
            Some(vec!["sandbox/workspace/notes/a.txt".to_owned()])
        );
    }

    #[test]
    fn reports_unknown_and_bad_entries() {
        let src = MemSource::new()
            .file("instructions.md", "x")
            .file("notes.txt", "x")
            .file("widgets/a.md", "x")
            .file("skills/pkg/other.md", "x")
            .file("tools/bin.py", vec![0xff, 0xfe])
            .escaping_link("tools/link.py");
        let d = discover(&src);
        let codes: Vec<_> = d
            .diagnostics
            .iter()
            .map(|d| (d.code.as_str(), d.file.clone().unwrap_or_default()))
            .collect();
        assert!(codes.contains(&("W001", "notes.txt".into())), "{codes:?}");
        assert!(codes.contains(&("W001", "widgets/".into())), "{codes:?}");
        assert!(codes.contains(&("E012", "skills/pkg/".into())), "{codes:?}");
        assert!(
            codes.contains(&("E003", "tools/bin.py".into())),
            "{codes:?}"
        );
        assert!(
            codes.contains(&("E004", "tools/link.py".into())),
            "{codes:?}"
        );
    }

    /// Files are read ahead on several threads, but only those the listing found to be files: a
    /// FIFO named like a skill's SKILL.md or a tool is reported, never opened (it would block).
    #[cfg(unix)]
    #[test]
    fn reads_only_what_the_listing_found_as_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["tools", "skills/fifo", "skills/pkg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for i in 0..100 {
            std::fs::write(root.join(format!("tools/t{i:03}.yaml")), "description: t\n").unwrap();
            std::fs::write(
                root.join(format!("skills/s{i:03}.md")),
                "---\ndescription: s\n---\n",
            )
            .unwrap();
        }
        std::fs::write(
            root.join("skills/pkg/SKILL.md"),
            "---\ndescription: p\n---\n",
        )
        .unwrap();
        let made = ["skills/fifo/SKILL.md", "tools/t050x.sh"].iter().all(|f| {
            std::process::Command::new("mkfifo")
                .arg(root.join(f))
                .status()
                .is_ok_and(|s| s.success())
        });
        if !made {
            return;
        }
        let d = discover(&FsSource::new(root).unwrap());
        let a = &d.agent;
        assert_eq!(a.tools.len(), 100);
        assert_eq!(a.tools[50].file.text, "description: t\n");
        assert_eq!(a.skills.len(), 101);
        assert!(a.skills.iter().any(|s| s.name == "pkg"));
        let found: Vec<_> = d
            .diagnostics
            .iter()
            .map(|d| (d.code.as_str(), d.file.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            found,
            [
                ("W001", "skills/fifo/SKILL.md".to_owned()),
                ("E012", "skills/fifo/".to_owned()),
                ("W001", "tools/t050x.sh".to_owned()),
            ]
        );
    }
}
