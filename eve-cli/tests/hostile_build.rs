//! `eve build` on malformed agent folders, as users bring them, on the real binary: each gets
//! coded diagnostics naming the file and exit 1, never a panic (exit 101) or a silent pass.
//! Also the binary's output piped into a reader that goes away (`eve build 2>&1 | head`).

use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};

fn eve(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eve"));
    cmd.current_dir(dir)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env_remove("EVE_MODEL")
        .env("NO_COLOR", "1");
    cmd
}

/// A project in a temp dir with a valid `agent.yaml` and `instructions.md`.
fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("agent/agent.yaml"), "model: mock/echo\n");
    write(&tmp.path().join("agent/instructions.md"), "Be brief.\n");
    tmp
}

fn write(path: &Path, text: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Runs `eve build`; returns the exit code and stderr.
fn build(dir: &Path) -> (i32, String) {
    let out = eve(dir).arg("build").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

fn schedule(dir: &Path, name: &str, cron: &str) {
    write(
        &dir.join(format!("agent/schedules/{name}.md")),
        format!("---\ncron: \"{cron}\"\n---\nSummarise the day.\n"),
    );
}

fn script_tool(dir: &Path, file: &str) {
    let path = dir.join("agent/tools").join(file);
    write(
        &path,
        "#!/bin/sh\n# ---\n# description: Says hi.\n# ---\necho '{}'\n",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_cron_expression_that_never_fires_is_an_error_naming_the_file() {
    let p = project();
    schedule(p.path(), "feb30", "0 9 30 2 *");
    schedule(p.path(), "apr31", "0 0 31 4 *");
    // Rare but real: February 29th on a Monday (day of month and weekday both given).
    schedule(p.path(), "leap", "0 0 29 2 1");
    let (code, stderr) = build(p.path());
    assert_eq!(code, 1, "{stderr}");
    for file in ["agent/schedules/feb30.md", "agent/schedules/apr31.md"] {
        assert!(
            stderr.contains(&format!("--> {file}:2:7")),
            "{file}: {stderr}"
        );
    }
    assert_eq!(stderr.matches("error[E030]").count(), 2, "{stderr}");
    assert!(stderr.contains("never fires"), "{stderr}");
    assert!(!stderr.contains("leap.md"), "{stderr}");
}

#[test]
fn a_binary_instructions_file_is_reported_once_as_not_utf8() {
    let p = project();
    let mut bytes = b"Be brief.\n".to_vec();
    bytes.extend([0xff, 0xfe, 0, 1].iter().cycle().take(4096));
    write(&p.path().join("agent/instructions.md"), bytes);
    let (code, stderr) = build(p.path());
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("error[E003]"), "{stderr}");
    assert!(stderr.contains("--> agent/instructions.md:2:1"), "{stderr}");
    // The file exists: saying it is missing would send the user looking for the wrong thing.
    assert!(!stderr.contains("E001"), "{stderr}");
    assert!(stderr.contains("build failed: 1 error"), "{stderr}");
}

#[test]
fn names_that_differ_only_by_case_clash() {
    let p = project();
    script_tool(p.path(), "Search.sh");
    script_tool(p.path(), "search.sh");
    for name in ["Notes", "notes"] {
        write(
            &p.path().join(format!("agent/skills/{name}.md")),
            "---\ndescription: How notes are kept.\n---\nKeep them short.\n",
        );
    }
    let (code, stderr) = build(p.path());
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stderr.matches("error[E007]").count(), 2, "{stderr}");
    assert!(
        stderr.contains("the tool name `search` differs only by case from `Search`"),
        "{stderr}"
    );
    assert!(stderr.contains("--> agent/tools/search.sh"), "{stderr}");
    assert!(stderr.contains("--> agent/skills/notes.md"), "{stderr}");
}

#[test]
fn a_folder_where_a_tool_file_belongs_is_named_not_skipped_silently() {
    let p = project();
    std::fs::create_dir_all(p.path().join("agent/tools/search.py")).unwrap();
    let (code, stderr) = build(p.path());
    assert_eq!(code, 0, "a warning only: {stderr}");
    assert!(
        stderr.contains("warning[W001]: folder holds no tools"),
        "{stderr}"
    );
    assert!(stderr.contains("--> agent/tools/search.py/"), "{stderr}");
}

#[test]
fn a_skill_larger_than_any_context_is_refused_quickly() {
    let p = project();
    let mut text = b"---\ndescription: Everything.\n---\n".to_vec();
    text.resize(6 * 1024 * 1024, b'a');
    write(&p.path().join("agent/skills/everything.md"), text);
    let started = std::time::Instant::now();
    let (code, stderr) = build(p.path());
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("error[E011]"), "{stderr}");
    assert!(
        stderr.contains("--> agent/skills/everything.md"),
        "{stderr}"
    );
    assert!(stderr.contains("over the limit of 4 MiB"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn malformed_folders_that_were_already_handled_stay_coded() {
    // Each: what to lay out, and a code and file that must be named.
    type Layout = fn(&Path);
    let cases: Vec<(&str, Layout, &str, &str)> = vec![
        (
            "invalid front matter",
            |d| {
                write(
                    &d.join("agent/skills/a.md"),
                    "---\ndescription: [unclosed\n---\nbody\n",
                )
            },
            "E010",
            "agent/skills/a.md:2",
        ),
        (
            "symlink loop",
            |d| {
                std::fs::create_dir_all(d.join("agent/tools")).unwrap();
                symlink("loop.sh", d.join("agent/tools/loop.sh")).unwrap();
            },
            "E004",
            "agent/tools/loop.sh",
        ),
        (
            "folder link to a parent",
            |d| {
                std::fs::create_dir_all(d.join("agent/skills/x")).unwrap();
                write(
                    &d.join("agent/skills/x/SKILL.md"),
                    "---\ndescription: x\n---\nx\n",
                );
                symlink("..", d.join("agent/skills/x/up")).unwrap();
            },
            "E004",
            "agent/skills/x/up",
        ),
        (
            "file name not UTF-8",
            |d| {
                use std::os::unix::ffi::OsStrExt;
                let name = std::ffi::OsStr::from_bytes(b"a\xffb.md");
                write(
                    &d.join("agent/skills").join(name),
                    "---\ndescription: x\n---\nx\n",
                );
            },
            "E003",
            "agent/skills/a",
        ),
        (
            "cron out of range",
            |d| schedule(d, "late", "61 25 * * *"),
            "E030",
            "agent/schedules/late.md:2:7",
        ),
        (
            "cron step zero",
            |d| schedule(d, "zero", "*/0 * * * *"),
            "E030",
            "agent/schedules/zero.md:2:7",
        ),
    ];
    for (name, layout, code, file) in cases {
        let p = project();
        layout(p.path());
        let (exit, stderr) = build(p.path());
        assert_eq!(exit, 1, "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("error[{code}]")),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(&format!("--> {file}")), "{name}: {stderr}");
    }
}

#[test]
fn output_into_a_reader_that_goes_away_ends_quietly_not_with_a_panic() {
    // `eve build 2>&1 | head -1`: the diagnostics go to stderr, whose reader leaves after a few
    // bytes. A panic on the failed write would exit 101.
    let p = project();
    // Far more than a pipe holds, so some writes come after the reader left.
    for i in 0..400 {
        schedule(p.path(), &format!("s{i}"), "61 * * * *");
    }
    let mut child = eve(p.path())
        .arg("build")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut first = [0u8; 16];
    stderr.read_exact(&mut first).unwrap();
    drop(stderr);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(141), "{status:?}");
}
