//! Built-in tools and workspace seeding.

use std::time::{Duration, Instant};

use eve_runtime::tools::{
    Validators, builtin_tools, is_builtin, prepare_workspace, run_builtin, run_tool,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Fixture, dies_within};

#[tokio::test]
async fn write_then_read_through_the_definitions() {
    let fx = Fixture::new();
    let tools = builtin_tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["bash", "read_file", "write_file", "glob", "grep"]);
    assert!(names.iter().all(|n| is_builtin(n)));
    assert!(!is_builtin("weather"));
    let write = tools.iter().find(|t| t.name == "write_file").unwrap();
    let read = tools.iter().find(|t| t.name == "read_file").unwrap();

    let content = "one\ntwo\nthree\nfour\n";
    let r = run_tool(
        write,
        &json!({"path": "notes/deep/a.txt", "content": content}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(fx.ws_file("notes/deep/a.txt")).unwrap(),
        content
    );

    let r = run_tool(
        read,
        &json!({"path": "notes/deep/a.txt"}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output, json!(content));

    let r = run_tool(
        read,
        &json!({"path": "./notes/../notes/deep/a.txt", "offset": 2, "limit": 2}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        r.output,
        json!("two\nthree\n[more lines follow: continue with offset=4]")
    );

    let r = run_tool(
        read,
        &json!({"path": "notes/deep/a.txt", "offset": 3, "limit": 2}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(r.output, json!("three\nfour\n"));

    let r = run_tool(
        read,
        &json!({"path": "nope.txt"}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(!r.ok);
    assert!(r.error.unwrap().contains("could not read `nope.txt`"));

    let r = run_tool(
        read,
        &json!({"path": "notes"}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.error.unwrap().contains("is a directory"));
    let r = run_tool(
        write,
        &json!({"path": "notes", "content": ""}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.error.unwrap().contains("is a directory"));

    // A FIFO would block a reader forever: it is refused.
    let status = std::process::Command::new("mkfifo")
        .arg(fx.ws_file("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let r = run_tool(
        read,
        &json!({"path": "pipe"}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.error.unwrap().contains("special file"));
}

#[tokio::test]
async fn paths_cannot_leave_the_workspace() {
    let fx = Fixture::new();
    let outside = fx.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    std::fs::create_dir_all(fx.workspace()).unwrap();
    std::os::unix::fs::symlink(&outside, fx.ws_file("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), fx.ws_file("file-link")).unwrap();
    std::os::unix::fs::symlink(outside.join("new.txt"), fx.ws_file("dangling")).unwrap();
    std::fs::write(fx.ws_file("inside.txt"), "fine").unwrap();
    std::os::unix::fs::symlink("inside.txt", fx.ws_file("inner-link")).unwrap();
    // An absolute symlink is refused even when it names a file inside: where it leads depends on
    // what the path's folders are when it is followed.
    std::os::unix::fs::symlink(fx.ws_file("inside.txt"), fx.ws_file("absolute-link")).unwrap();

    let cancel = CancellationToken::new;
    for path in [
        "../outside/secret.txt",
        "a/../../outside/secret.txt",
        "link/secret.txt",
        "file-link",
        "absolute-link",
    ] {
        let r = run_builtin("read_file", &json!({"path": path}), &fx.ctx, cancel()).await;
        assert!(!r.ok, "{path} was readable");
        let error = r.error.unwrap();
        assert!(error.contains("outside the workspace"), "{path}: {error}");
    }
    let r = run_builtin(
        "read_file",
        &json!({"path": "/etc/passwd"}),
        &fx.ctx,
        cancel(),
    )
    .await;
    assert!(r.error.unwrap().contains("absolute path"));

    for path in [
        "../escape.txt",
        "link/new.txt",
        "dangling",
        "/tmp/eve-escape.txt",
    ] {
        let r = run_builtin(
            "write_file",
            &json!({"path": path, "content": "x"}),
            &fx.ctx,
            cancel(),
        )
        .await;
        assert!(!r.ok, "{path} was writable");
    }
    assert!(!outside.join("new.txt").exists());
    assert!(!fx.dir.path().join("escape.txt").exists());

    let r = run_builtin(
        "read_file",
        &json!({"path": "inner-link"}),
        &fx.ctx,
        cancel(),
    )
    .await;
    assert_eq!(
        r.output,
        json!("fine"),
        "a relative symlink inside the workspace is fine"
    );
}

#[tokio::test]
async fn bash_runs_in_the_workspace() {
    let fx = Fixture::with_env(&[("NOT_PASSED", "x")]);
    let r = run_builtin(
        "bash",
        &json!({"command": "echo hi > f.txt; cat f.txt; echo warn >&2; pwd; echo \"[${NOT_PASSED:-unset}]\""}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.ok, "{r:?}");
    let cwd = std::fs::canonicalize(fx.workspace()).unwrap();
    assert_eq!(
        r.output,
        json!(format!("hi\n{}\n[unset]\n[stderr]\nwarn", cwd.display()))
    );

    let r = run_builtin(
        "bash",
        &json!({"command": "echo out; echo bad >&2; exit 7"}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(!r.ok);
    assert_eq!(r.exit_code, Some(7));
    // stderr is in the output once; the error does not repeat it.
    assert_eq!(r.output, json!("out\n[stderr]\nbad"));
    assert_eq!(r.error.as_deref(), Some("exited with code 7"));

    let start = Instant::now();
    let r = run_builtin(
        "bash",
        &json!({"command": "sleep 1000 & echo $! > s.pid; wait", "timeout_ms": 200}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "not the 1000 s sleep"
    );
    assert!(r.error.unwrap().contains("timed out after 200 ms"));
    let pid: i32 = std::fs::read_to_string(fx.ws_file("s.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(dies_within(pid, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn builtin_schemas_validate() {
    let fx = Fixture::new();
    let validators = Validators::new(&builtin_tools());
    assert!(
        validators
            .validate("bash", &json!({"command": "ls"}))
            .is_ok()
    );
    let errors = validators
        .validate("bash", &json!({"command": 1, "timeout_ms": 0}))
        .unwrap_err();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        validators
            .validate("write_file", &json!({"path": "a"}))
            .is_err()
    );
    let r = run_builtin("nope", &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    let r = run_builtin(
        "read_file",
        &json!({"path": 3}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.error.unwrap().contains("invalid input"));
}

#[test]
fn workspace_is_seeded_once() {
    let fx = Fixture::new();
    let root = fx.ctx.agent_dir.clone();
    std::fs::create_dir_all(root.join("sandbox/workspace/notes")).unwrap();
    std::fs::write(root.join("sandbox/workspace/notes/a.txt"), "seed a").unwrap();
    std::fs::write(root.join("sandbox/workspace/top.md"), "seed top").unwrap();
    let seeds = vec![
        "sandbox/workspace/notes/a.txt".to_owned(),
        "sandbox/workspace/top.md".to_owned(),
    ];
    let ws = fx.dir.path().join("sessions/ses_01");
    prepare_workspace(&ws, &root, &seeds).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/a.txt")).unwrap(),
        "seed a"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("top.md")).unwrap(),
        "seed top"
    );

    // An existing workspace is the session's: it is never re-seeded.
    std::fs::write(ws.join("notes/a.txt"), "edited").unwrap();
    std::fs::remove_file(ws.join("top.md")).unwrap();
    prepare_workspace(&ws, &root, &seeds).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/a.txt")).unwrap(),
        "edited"
    );
    assert!(!ws.join("top.md").exists());

    // No staging folders are left behind, and a bad seed path is an error with no workspace.
    let entries: Vec<_> = std::fs::read_dir(ws.parent().unwrap()).unwrap().collect();
    assert_eq!(entries.len(), 1);
    let other = fx.dir.path().join("sessions/ses_02");
    assert!(prepare_workspace(&other, &root, &["../etc/passwd".to_owned()]).is_err());
    assert!(!other.exists());
    let empty = fx.dir.path().join("sessions/ses_03");
    prepare_workspace(&empty, &root, &[]).unwrap();
    assert!(empty.is_dir());
}

/// Peak resident set (`VmHWM`) of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The child half of the test below: reads the file and prints its peak RSS before and after.
#[tokio::test]
#[ignore = "run by read_file_of_a_huge_single_line_file_holds_little_memory in a child process"]
async fn read_file_rss_child() {
    if std::env::var_os("EVE_TEST_RSS_CHILD").is_none() {
        return;
    }
    let fx = Fixture::new();
    // 1 GiB of zero bytes and no newline, sparse: it costs no disk.
    let target = fx.ws_file("big.bin");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::File::create(&target)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let before = peak_rss_kib();
    let r = run_builtin(
        "read_file",
        &json!({"path": "big.bin", "limit": 1}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    let after = peak_rss_kib();
    let text = r.output.as_str().unwrap_or_default().len();
    println!(
        "RSS_KIB before={before} after={after} ok={} chars={text}",
        r.ok
    );
}

#[test]
fn read_file_of_a_huge_single_line_file_holds_little_memory() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tools::builtin::read_file_rss_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EVE_TEST_RSS_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.find("RSS_KIB").map(|at| &l[at..]))
        .unwrap_or_else(|| {
            panic!(
                "the child printed no measurement: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap()
            .parse()
            .unwrap()
    };
    let (before, after, chars) = (field("before="), field("after="), field("chars="));
    println!("read_file of 1 GiB on one line: peak RSS {before} KiB -> {after} KiB");
    assert!(line.contains("ok=true"), "{line}");
    assert!(
        chars > 0,
        "the capped start of the line is returned: {line}"
    );
    assert!(
        after.saturating_sub(before) < 20 * 1024,
        "peak RSS grew by {} KiB reading one capped line",
        after - before
    );
}
