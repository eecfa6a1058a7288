//! `eve serve` on a kernel without `openat2` says at start that `read_file` and `write_file`
//! will refuse (the file tools never fall back to a path walk a tool could race). The kernel
//! here has it, so `EVE_TEST_NO_OPENAT2=1` stands in for one that does not; the twin without it
//! says nothing of the kind.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::serve::{build, eve};

/// The lines `eve serve` prints before it serves.
fn start_lines(root: &std::path::Path, env: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = eve(root, &["serve", "--port", "0"]);
    cmd.envs(env.iter().copied());
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("eve serve did not start: {lines:#?}");
        };
        if line.starts_with("eve serving ") {
            break;
        }
        lines.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn serve_says_at_start_when_the_file_tools_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("instructions.md"), "You are a test agent.\n").unwrap();
    std::fs::write(agent.join("agent.yaml"), "default_tools: true\n").unwrap();
    build(dir.path());

    let missing = start_lines(dir.path(), &[("EVE_TEST_NO_OPENAT2", "1")]);
    let said = missing
        .iter()
        .find(|l| l.contains("read_file and write_file cannot run on this machine"))
        .unwrap_or_else(|| panic!("nothing said: {missing:#?}"));
    assert!(
        said.contains("openat2") && said.contains("Linux 5.6"),
        "{said}"
    );

    let present = start_lines(dir.path(), &[]);
    assert!(
        !present.iter().any(|l| l.contains("openat2")),
        "{present:#?}"
    );
}
