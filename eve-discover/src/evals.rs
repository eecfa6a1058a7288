//! Discovery of `evals/`: the eval cases that sit beside the agent folder, not inside it.
//!
//! An eval case file is `evals/NAME.yaml` (or `.yml`), in nested folders if wanted; its path
//! (without the extension) is the prefix of its cases' ids. Like the agent walk, this never parses
//! YAML (that is `eve_compile::evals`): it finds the files, reads them as text, and reports
//! anything it does not understand. The same ignore rules apply (`_x`, `.x`, `*.test.*`).

use crate::names::{join, split_ext};
use crate::walk::Walker;
use crate::{Code, Diagnostic, EntryKind, MAX_DEPTH, Source, SourceFile};

/// One eval case file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalFile {
    /// The id prefix of its cases: the path under `evals/` without the extension
    /// (`evals/weather/paris.yaml` → `weather/paris`).
    pub stem: String,
    /// The file; its path is relative to the `evals/` folder.
    pub file: SourceFile,
}

/// The result of walking `evals/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvalDiscovery {
    /// Case files, sorted by path.
    pub files: Vec<EvalFile>,
    /// Problems found; paths are relative to the `evals/` folder.
    pub diagnostics: Vec<Diagnostic>,
}

/// Walks the `evals/` folder behind `source` (rooted at that folder).
pub fn discover_evals(source: &dyn Source) -> EvalDiscovery {
    let mut walker = Walker::new(source);
    let mut files = Vec::new();
    walk(&mut walker, "", 0, &mut files);
    files.sort_by(|a, b| a.file.path.cmp(&b.file.path));
    EvalDiscovery {
        files,
        diagnostics: walker.diagnostics,
    }
}

fn walk(w: &mut Walker<'_>, dir: &str, depth: usize, out: &mut Vec<EvalFile>) {
    if depth > MAX_DEPTH {
        w.push(
            Diagnostic::new(
                Code::TooDeep,
                format!("{dir}/"),
                format!("eval folders nest deeper than {MAX_DEPTH} levels; eve stops here"),
            )
            .help("flatten the folder"),
        );
        return;
    }
    for e in w.list(dir) {
        let path = join(dir, &e.name);
        match e.kind {
            EntryKind::Dir => walk(w, &path, depth + 1, out),
            _ => match split_ext(&e.name) {
                (stem, Some("yaml" | "yml")) => {
                    let stem = join(dir, stem);
                    if let Some(file) = w.read_text(path, e.executable) {
                        out.push(EvalFile { stem, file });
                    }
                }
                (_, Some("md" | "txt")) => {}
                _ => w.push(
                    Diagnostic::new(
                        Code::UnknownEvalEntry,
                        path,
                        "not an eval case file".to_owned(),
                    )
                    .help(
                        "eval cases are `evals/NAME.yaml`; prefix the name with `_` to keep \
                         other files here (fixtures, scripts)",
                    ),
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemSource;

    #[test]
    fn finds_nested_case_files_and_reports_others() {
        let src = MemSource::new()
            .file("weather.yaml", "messages: [hi]\n")
            .file("deep/more/x.yml", "[]\n")
            .file("notes.md", "# notes\n")
            .file("_fixtures/data.json", "{}")
            .file("script.py", "print(1)\n");
        let d = discover_evals(&src);
        let stems: Vec<&str> = d.files.iter().map(|f| f.stem.as_str()).collect();
        assert_eq!(stems, ["deep/more/x", "weather"]);
        assert_eq!(d.diagnostics.len(), 1);
        assert_eq!(d.diagnostics[0].code, Code::UnknownEvalEntry);
        assert_eq!(d.diagnostics[0].file.as_deref(), Some("script.py"));
    }
}
