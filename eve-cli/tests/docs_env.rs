//! The environment variables of `eve_runtime::env_vars` and of the docs are the same set.
//!
//! Each constant is named in the "Environment" section of `docs/operations.md`; every `EVE_*`
//! name the docs mention is a constant (names a user picks for a secret, written `$NAME` or
//! `${NAME}`, aside); and no product source outside `env_vars.rs` spells a variable's name as a
//! string literal, so a reader of the code finds the one list and a typo is a compile error.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("eve-cli sits in the workspace")
        .to_path_buf()
}

/// The `(name, value)` of every `pub const NAME: &str = "value";` in `env_vars.rs` (`pub(crate)`
/// too: a variable only the runtime reads is still one eve reads).
fn constants() -> Vec<(String, String)> {
    let path = root().join("eve-runtime/src/env_vars.rs");
    let source = std::fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    for line in source.lines() {
        let Some(rest) = line
            .strip_prefix("pub const ")
            .or_else(|| line.strip_prefix("pub(crate) const "))
        else {
            continue;
        };
        let (name, value) = rest
            .split_once(": &str = \"")
            .unwrap_or_else(|| panic!("{}: not a `&str` constant: {line}", path.display()));
        let value = value
            .strip_suffix("\";")
            .unwrap_or_else(|| panic!("{}: constant not on one line: {line}", path.display()));
        out.push((name.to_owned(), value.to_owned()));
    }
    out
}

/// `README.md` and every `docs/*.md`, with their paths relative to the root.
fn docs() -> Vec<(String, String)> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.strip_prefix(&root).unwrap().display().to_string();
            (name, text)
        })
        .collect()
}

/// Every `EVE_X…` name in `text` that is not a `$NAME`/`${NAME}` reference.
fn eve_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let is_name = |b: u8| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_';
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("EVE_") {
        let start = i + at;
        let mut end = start + "EVE_".len();
        while end < bytes.len() && is_name(bytes[end]) {
            end += 1;
        }
        i = end;
        let glued =
            start > 0 && (is_name(bytes[start - 1]) || bytes[start - 1].is_ascii_lowercase());
        let reference = text[..start].ends_with('$') || text[..start].ends_with("${");
        if glued || reference || end == start + "EVE_".len() {
            continue;
        }
        out.insert(text[start..end].to_owned());
    }
    out
}

/// The text of the `## heading` section of `text` (up to the next `## `).
fn section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let start = text.find(&format!("\n## {heading}\n"))? + 1;
    let body = &text[start + 3..];
    let end = body.find("\n## ").map_or(body.len(), |e| e + 1);
    Some(&body[..end])
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn constants_are_named_after_their_variable() {
    let constants = constants();
    let names: BTreeSet<&str> = constants.iter().map(|(_, v)| v.as_str()).collect();
    // The parse found the real module: these are the crate's own constants.
    for known in [
        eve_runtime::env_vars::EVE_MODEL,
        eve_runtime::env_vars::EVE_AGENT,
        eve_runtime::env_vars::EVE_WORKSPACE,
        eve_runtime::env_vars::TMPDIR,
    ] {
        assert!(names.contains(known), "{known} not found in env_vars.rs");
    }
    for (name, value) in &constants {
        assert_eq!(name, value, "env_vars::{name} names another variable");
    }
    assert_eq!(names.len(), constants.len(), "a variable is named twice");
}

#[test]
fn docs_list_every_variable_and_only_those() {
    let constants: BTreeSet<String> = constants().into_iter().map(|(_, v)| v).collect();
    let docs = docs();
    let mut problems = Vec::new();

    let operations = &docs
        .iter()
        .find(|(name, _)| name == "docs/operations.md")
        .expect("docs/operations.md exists")
        .1;
    let environment = section(operations, "Environment").expect("operations.md has ## Environment");
    for name in &constants {
        if !environment.contains(&format!("`{name}`")) {
            problems.push(format!(
                "docs/operations.md: `{name}` (eve_runtime::env_vars) is not in the Environment section: add it"
            ));
        }
    }
    for (file, text) in &docs {
        for name in eve_names(text) {
            if !constants.contains(&name) {
                problems.push(format!(
                    "{file}: `{name}` is not a variable eve reads or sets: fix the name, or add it to eve-runtime/src/env_vars.rs"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn product_code_names_variables_through_the_constants() {
    let constants: Vec<String> = constants().into_iter().map(|(_, v)| v).collect();
    let root = root();
    let mut files = Vec::new();
    for krate in [
        "eve-discover",
        "eve-compile",
        "eve-sandbox",
        "eve-runtime",
        "eve-cli",
    ] {
        rust_files(&root.join(krate).join("src"), &mut files);
    }
    files.sort();
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut problems = Vec::new();
    for path in &files {
        // eve-compile's Node lookup sits below eve-runtime and cannot name its constants.
        if path.ends_with("eve-runtime/src/env_vars.rs")
            || path.ends_with("eve-compile/src/compile/modules/node.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in text.lines().enumerate() {
            for name in &constants {
                if line.contains(&format!("\"{name}\"")) {
                    problems.push(format!(
                        "{}:{}: `\"{name}\"`: use eve_runtime::env_vars::{name}",
                        path.strip_prefix(&root).unwrap().display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn eve_names_skips_references_and_prefixes() {
    let names =
        eve_names("`EVE_MODEL`, ${EVE_API_TOKEN}, $EVE_X, `EVE_*`, `EVE_`, MY_EVE_Y, EVE_LOG.");
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(names, ["EVE_LOG", "EVE_MODEL"]);
}
