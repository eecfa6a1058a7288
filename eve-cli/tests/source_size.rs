//! No source file of eve's crates is over 800 lines (a file that long holds more than one concern;
//! see CONVENTIONS). Checked for every file under a crate's `src/` (Rust, and the web console's
//! JavaScript, CSS and HTML) and under `scripts/`. The integration test suites under `tests/` are
//! not checked here.

use std::path::{Path, PathBuf};

/// Most lines a source file may have.
const MAX_LINES: usize = 800;

/// Extensions of the files checked.
const CHECKED: [&str; 7] = ["rs", "js", "mjs", "css", "html", "sh", "py"];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "node_modules" || name == "target" {
            continue;
        }
        if path.is_dir() {
            files(&path, out);
        } else if path
            .extension()
            .is_some_and(|e| CHECKED.contains(&e.to_string_lossy().as_ref()))
        {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_800_lines() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(repo).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("eve-") && entry.path().join("src").is_dir() {
            files(&entry.path().join("src"), &mut checked);
        }
    }
    files(&repo.join("scripts"), &mut checked);
    assert!(
        checked.len() > 100,
        "only {} files found: is the walk broken?",
        checked.len()
    );
    let mut long: Vec<String> = checked
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).ok()?.lines().count();
            (lines > MAX_LINES).then(|| {
                format!(
                    "{}: {lines} lines (at most {MAX_LINES}): split it along its concerns",
                    path.strip_prefix(repo).unwrap_or(path).display()
                )
            })
        })
        .collect();
    long.sort();
    assert!(long.is_empty(), "files too long:\n{}", long.join("\n"));
}
