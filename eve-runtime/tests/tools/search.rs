//! `glob` and `grep` against ripgrep itself: a generated 10,000-file workspace (nested
//! `.gitignore` files with negations, hidden files, a `.git` folder, binary files, CRLF and long
//! lines), the same queries through the built-ins and through `rg` with the flags eve's own tools
//! pass it, the same results. `rg` is the Debian package `scripts/setup-test-deps.sh` unpacks into
//! `target/rg` (or `EVE_TEST_RG`).

use std::path::{Path, PathBuf};
use std::process::Command;

use eve_runtime::tools::run_builtin;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Fixture;

/// The `rg` binary the tests compare with.
pub fn rg() -> PathBuf {
    if let Ok(path) = std::env::var("EVE_TEST_RG") {
        return PathBuf::from(path);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/rg/usr/bin/rg");
    assert!(
        path.exists(),
        "ripgrep is not at {}: run scripts/setup-test-deps.sh (or set EVE_TEST_RG)",
        path.display()
    );
    path
}

/// A small deterministic generator (no dependency, same tree on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "needle", "Needle", "haystack", "fn", "let", "struct",
    "error", "Error", "log", "value", "é", "日本", "TODO", "x", "y", "z",
];

/// Lays out `files` files under `ws` and returns how many it wrote.
pub fn generate(ws: &Path, files: usize) -> usize {
    let mut rng = Lcg(0x5eed);
    let exts = ["rs", "md", "txt", "log", "json", "ts", "py"];
    let dirs = [
        "",
        "src",
        "src/core",
        "src/core/deep",
        "src/util",
        "docs",
        "docs/guide",
        "build",
        "build/out",
        "target/debug",
        "node_modules/pkg",
        "logs",
        ".hidden",
        ".hidden/inner",
        "tests",
        "tests/fixtures",
        "vendor/lib",
        "a/b/c/d/e/f",
        "keep",
        "keep/sub",
    ];
    std::fs::create_dir_all(ws.join(".git/objects/ab")).unwrap();
    std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main needle\n").unwrap();
    std::fs::write(ws.join(".git/objects/ab/cdef"), "needle in git\n").unwrap();
    std::fs::write(
        ws.join(".gitignore"),
        "*.log\n!keep.log\nbuild/\ntarget\n/node_modules\n# a comment\n\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("src/core")).unwrap();
    std::fs::write(
        ws.join("src/.gitignore"),
        "*.json\n!keep.json\ncore/deep/*.txt\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("keep")).unwrap();
    std::fs::write(ws.join("keep/.ignore"), "sub/\n").unwrap();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(ws.join("docs/.rgignore"), "guide/*.ts\n").unwrap();
    let mut written = 0;
    for i in 0..files {
        let dir = dirs[usize::try_from(rng.below(dirs.len() as u64)).unwrap()];
        let ext = exts[usize::try_from(rng.below(exts.len() as u64)).unwrap()];
        let name = match rng.below(40) {
            0 => format!("keep.{ext}"),
            1 => format!(".dot{i}.{ext}"),
            _ => format!("f{i}.{ext}"),
        };
        let path = ws.join(dir).join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let lines = 1 + rng.below(30);
        let mut text = String::new();
        for _ in 0..lines {
            let words = rng.below(12);
            let mut line: Vec<&str> = (0..words)
                .map(|_| WORDS[usize::try_from(rng.below(WORDS.len() as u64)).unwrap()])
                .collect();
            if rng.below(1000) == 0 {
                line.push("fn spotted_7()");
            }
            text.push_str(&line.join(" "));
            text.push_str(if rng.below(20) == 0 { "\r\n" } else { "\n" });
        }
        if rng.below(200) == 0 {
            text.push_str(&"needle ".repeat(500));
            text.push('\n');
        }
        let bytes = if rng.below(100) == 0 {
            // Binary: a NUL early on, a match after it.
            let mut b = b"\0\x01\x02 needle spotted_7\n".to_vec();
            b.extend_from_slice(text.as_bytes());
            b
        } else {
            text.into_bytes()
        };
        std::fs::write(&path, bytes).unwrap();
        written += 1;
    }
    written
}

/// Runs a built-in and returns its output object.
pub async fn call(fx: &Fixture, tool: &str, input: Value) -> Value {
    let r = run_builtin(tool, &input, &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{tool} {input}: {r:?}");
    r.output
}

/// `rg` run in `ws` with eve's flags and `args`; its stdout lines.
fn rg_lines(ws: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new(rg())
        .current_dir(ws)
        .args([
            // The workspace's own parents' ignore files count (as in ours, up to the workspace);
            // the temp folder above it has none.
            "--no-config",
            "--no-ignore-global",
            "--color=never",
            "--hidden",
            "--glob",
            "!.git/*",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "rg {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches('\r').to_owned())
        .collect()
}

/// The lines of a built-in's `content`, without `--` separators, sorted.
fn sorted(content: &str) -> Vec<String> {
    let mut lines: Vec<String> = content
        .lines()
        .filter(|l| *l != "--")
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_and_grep_find_what_ripgrep_finds_in_10000_files() {
    let fx = Fixture::new();
    let ws = fx.workspace().to_path_buf();
    assert_eq!(generate(&ws, 10_000), 10_000);

    for pattern in [
        "src/**/*.rs",
        "f1*.md",
        "src/**/*.txt",
        "docs/**/*.{json,ts}",
        "keep.*",
        "**/deep/**",
    ] {
        let out = call(&fx, "glob", json!({"pattern": pattern, "limit": 1000})).await;
        let mut want = rg_lines(&ws, &["--files", "--glob", pattern]);
        want.sort();
        assert!(!want.is_empty(), "{pattern}: the oracle found nothing");
        assert!(
            want.len() < 1000,
            "{pattern}: {} files, over the limit",
            want.len()
        );
        let content = out["content"].as_str().unwrap();
        assert_eq!(sorted(content), want, "glob {pattern}");
        assert_eq!(out["count"], want.len(), "glob {pattern}");
        assert_eq!(out["truncated"], false);
        eprintln!("glob {pattern}: {} files, as rg", want.len());
    }

    let cases: &[(Value, &[&str])] = &[
        (json!({"pattern": "spotted_7"}), &["spotted_7"]),
        (
            json!({"pattern": "fn\\s+\\w+_7\\(", "glob": "*.rs"}),
            &["--glob", "*.rs", "fn\\s+\\w+_7\\("],
        ),
        (
            json!({"pattern": "SPOTTED_7", "ignoreCase": true}),
            &["--ignore-case", "SPOTTED_7"],
        ),
        (
            json!({"pattern": "spotted_7()", "literal": true, "path": "src"}),
            &["--fixed-strings", "spotted_7()", "src"],
        ),
        (
            json!({"pattern": "spotted_7", "context": 1, "glob": "*.{md,txt}"}),
            &["--context", "1", "--glob", "*.{md,txt}", "spotted_7"],
        ),
        (
            json!({"pattern": "日本 x", "path": "docs"}),
            &["日本 x", "docs"],
        ),
    ];
    for (input, args) in cases {
        let mut input = input.clone();
        input["limit"] = json!(1000);
        let out = call(&fx, "grep", input.clone()).await;
        let mut rg_args = vec!["--line-number", "--max-count", "1000"];
        rg_args.extend(args.iter().copied());
        let mut want = rg_lines(&ws, &rg_args);
        want.retain(|l| l != "--");
        want.sort();
        assert!(!want.is_empty(), "{input}: the oracle found nothing");
        let content = out["content"].as_str().unwrap();
        assert_eq!(out["truncated"], false, "{input}: {content}");
        let ours = sorted(content);
        let only_ours: Vec<_> = ours.iter().filter(|l| !want.contains(l)).collect();
        let only_rg: Vec<_> = want.iter().filter(|l| !ours.contains(l)).collect();
        assert!(
            only_ours.is_empty() && only_rg.is_empty() && ours.len() == want.len(),
            "grep {input}: only ours {only_ours:#?}\nonly rg's {only_rg:#?}"
        );
        assert!(out["matchCount"].as_u64().unwrap() > 0);
        eprintln!("grep {input}: {} lines, as rg", want.len());
    }
}

#[tokio::test]
async fn output_is_capped_and_says_so() {
    let fx = Fixture::new();
    let ws = fx.workspace().to_path_buf();
    std::fs::create_dir_all(&ws).unwrap();
    for i in 0..300 {
        std::fs::write(
            ws.join(format!("f{i:03}.txt")),
            format!("needle {}\n", "x".repeat(100)).repeat(50) + &"n".repeat(5000) + "needle\n",
        )
        .unwrap();
    }
    let out = call(&fx, "glob", json!({"pattern": "*.txt", "limit": 5})).await;
    assert_eq!(out["count"], 5);
    assert_eq!(out["truncated"], true);
    let content = out["content"].as_str().unwrap();
    assert!(content.starts_with("f000.txt\nf001.txt\n"), "{content}");
    assert!(
        content.contains("showing first 5 results out of 300"),
        "{content}"
    );

    let out = call(&fx, "grep", json!({"pattern": "needle", "limit": 3})).await;
    let content = out["content"].as_str().unwrap();
    assert_eq!(out["truncated"], true);
    assert!(content.len() <= 51_200 + 300, "{}", content.len());
    assert!(
        content.contains("Match limit reached (3 per file)"),
        "{content}"
    );
    assert!(
        content.contains("Output truncated at 51200 bytes"),
        "{content}"
    );
    assert!(
        content.starts_with("f000.txt:1:needle xxx") && content.contains("\nf000.txt:3:needle xxx"),
        "{content}"
    );
    assert!(!content.contains("f000.txt:4:"), "3 per file");
    // A line longer than 2000 characters is cut.
    let out = call(&fx, "grep", json!({"pattern": "nnnn", "path": "f007.txt"})).await;
    let content = out["content"].as_str().unwrap();
    assert!(content.ends_with(" [truncated]"), "{content}");
    assert_eq!(out["matchCount"], 1);

    let out = call(&fx, "grep", json!({"pattern": "absent-word"})).await;
    assert_eq!(out["content"], "No matches found");
    let out = call(&fx, "glob", json!({"pattern": "*.nothing"})).await;
    assert_eq!(out["content"], "No files found");
}

#[tokio::test]
async fn bad_input_is_a_clear_refusal() {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.workspace().join("dir")).unwrap();
    std::fs::write(fx.workspace().join("dir/a.txt"), "a\n").unwrap();
    std::os::unix::fs::symlink("dir", fx.workspace().join("link")).unwrap();
    for (tool, input, says) in [
        ("grep", json!({"pattern": "("}), "not a valid regex"),
        (
            "grep",
            json!({"pattern": "a", "path": "../x"}),
            "outside the workspace",
        ),
        (
            "glob",
            json!({"pattern": "*", "path": "/etc"}),
            "absolute path",
        ),
        (
            "glob",
            json!({"pattern": "*", "path": "link"}),
            "is a symlink",
        ),
        (
            "glob",
            json!({"pattern": "*", "path": "dir/a.txt"}),
            "is a file",
        ),
        (
            "glob",
            json!({"pattern": "*", "path": "missing"}),
            "could not search",
        ),
        (
            "glob",
            json!({"pattern": "a[", "path": "dir"}),
            "not a glob",
        ),
        ("grep", json!({"pattern": "a", "nope": 1}), "unknown field"),
    ] {
        let r = run_builtin(tool, &input, &fx.ctx, CancellationToken::new()).await;
        assert!(!r.ok, "{tool} {input}: {r:?}");
        let error = r.error.unwrap();
        assert!(error.contains(says), "{tool} {input}: {error}");
        assert!(
            r.input_refused || error.contains("could not search"),
            "{tool} {input}: {error}"
        );
    }
    // A file given as the path is searched.
    let out = call(&fx, "grep", json!({"pattern": "a", "path": "dir/a.txt"})).await;
    assert_eq!(out["content"], "dir/a.txt:1:a");
}
