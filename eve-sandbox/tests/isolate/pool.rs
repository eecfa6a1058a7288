//! The warm path: a box of an `isolate::Pool` confines like the cold path, serves one call, and
//! the next call sees nothing of the one before; idle boxes die with their pool.

use std::io::Read;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use eve_sandbox::isolate::{self, Policy, Pool};

use super::{Fixture, LIMIT, eventually, helper, path_var, real_home, run};

struct Answer {
    code: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The environment the fixture's cold commands get, plus `extra`.
fn env(f: &Fixture, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("PATH", path_var()),
        ("HOME", real_home().display().to_string()),
        ("WS", f.ws.display().to_string()),
        ("ROOT", f.root.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    env
}

/// Runs `sh -c script` in a box taken from `pool` (failing the test when the pool has none: the
/// call must come from the pool), with `stdin` as its input.
async fn call(
    pool: &Pool,
    f: &Fixture,
    policy: &Policy,
    script: &str,
    extra: &[(&str, &str)],
    stdin: &[u8],
) -> Answer {
    isolate::prepare_writable(&f.ws, policy).unwrap();
    let warm = pool.take().await.expect("the pool had no box to give");
    let (in_r, mut in_w) = std::io::pipe().unwrap();
    let (mut out_r, out_w) = std::io::pipe().unwrap();
    let (mut err_r, err_w) = std::io::pipe().unwrap();
    let args = vec!["-c".to_owned(), script.to_owned()];
    let mut child = warm
        .start(
            policy,
            "sh",
            &args,
            &env(f, extra),
            &f.ws,
            [in_r.as_fd(), out_w.as_fd(), err_w.as_fd()],
        )
        .unwrap();
    drop((in_r, out_w, err_w));
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = in_w.write_all(&input);
    });
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_r.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_r.read_to_string(&mut s);
        s
    });
    let status = match tokio::time::timeout(LIMIT, child.wait()).await {
        Ok(status) => status.unwrap(),
        Err(_) => {
            let _ = child.start_kill();
            panic!("the warm call did not end within {LIMIT:?}");
        }
    };
    writer.join().unwrap();
    use std::os::unix::process::ExitStatusExt;
    Answer {
        code: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn pool(size: usize) -> Pool {
    Pool::start(helper(), size).unwrap()
}

/// Waits until `pool` holds `n` ready boxes.
async fn filled(pool: &Pool, n: usize) {
    let deadline = Instant::now() + LIMIT;
    while pool.idle() < n {
        assert!(
            Instant::now() < deadline,
            "the pool did not fill: {:?}",
            pool.last_error()
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

const FIRST: &str = r#"echo left-in-tmp > /tmp/first-call-file; echo left-in-home > "$HOME/first-call-home"
echo left-in-ws > "$WS/first-call-ws"
setsid sleep 313 > /dev/null 2>&1 < /dev/null &
echo "pid:$!"; echo "env:$FIRST_CALL_SECRET""#;

const SECOND: &str = r#"cat /tmp/first-call-file "$HOME/first-call-home" 2>/dev/null
for p in /proc/[0-9]*; do tr '\0' ' ' < "$p/cmdline"; echo; tr '\0' '\n' < "$p/environ"; done 2>/dev/null
echo "env:$FIRST_CALL_SECRET"; cat "$WS/first-call-ws""#;

/// A box serves one call: the second call from the same pool sees no file the first wrote in its
/// private `/tmp` or `HOME`, no process it left running (`setsid`), and none of its environment;
/// the workspace, which is shared on purpose, still holds what the first call wrote there. Run
/// unconfined, the same two scripts see the file and the process, so the test can fail.
#[test]
fn a_second_call_from_the_pool_sees_nothing_of_the_first() {
    let f = Fixture::new();
    let policy = f.policy();
    let rt = runtime();
    let (first, second) = rt.block_on(async {
        let pool = pool(1);
        filled(&pool, 1).await;
        let first = call(
            &pool,
            &f,
            &policy,
            FIRST,
            &[("FIRST_CALL_SECRET", "marker-of-the-first-call")],
            b"",
        )
        .await;
        // The second box is the refill, started while the first call ran.
        let second = call(&pool, &f, &policy, SECOND, &[], b"").await;
        (first, second)
    });
    assert_eq!(first.code, 0, "first: {first:?}");
    assert!(
        first.stdout.contains("env:marker-of-the-first-call"),
        "first: {first:?}"
    );
    assert_eq!(second.code, 0, "second: {second:?}");
    assert!(!second.stdout.contains("left-in-tmp"), "second: {second:?}");
    assert!(
        !second.stdout.contains("left-in-home"),
        "second: {second:?}"
    );
    assert!(!second.stdout.contains("sleep 313"), "second: {second:?}");
    assert!(
        !second.stdout.contains("marker-of-the-first-call"),
        "second: {second:?}"
    );
    assert!(second.stdout.contains("left-in-ws"), "second: {second:?}");

    // Unconfined, what the first call leaves behind is there for the next one.
    let marker = format!("/tmp/first-call-file-{}", std::process::id());
    let host_first = run(
        f.host(&FIRST.replace("/tmp/first-call-file", &marker)),
        LIMIT,
    );
    let pid: i32 = host_first
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("pid:"))
        .and_then(|p| p.trim().parse().ok())
        .unwrap();
    let host_second = run(
        f.host(&SECOND.replace("/tmp/first-call-file", &marker)),
        LIMIT,
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = std::fs::remove_file(&marker);
    assert!(
        host_second.stdout.contains("left-in-tmp"),
        "unconfined: {host_second:?}"
    );
    assert!(
        host_second.stdout.contains("sleep 313"),
        "unconfined: {host_second:?}"
    );
}

/// A warm box is confined as the cold path's is: secrets of `/etc` masked, the host's processes
/// invisible, nothing writable outside the workspace, the host's loopback unreachable, no
/// capabilities; stdin, the exit status and a missing program behave as they do cold.
#[test]
fn a_warm_box_confines_like_the_cold_path() {
    let f = Fixture::new();
    let policy = f.policy();
    let me = std::process::id();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        r#"cat /etc/shadow 2>&1 | head -c 200; echo
test -e /proc/{me} && echo HOST-PID-SEEN
touch "$ROOT/outside" 2>/dev/null && echo WROTE-OUTSIDE
touch "$WS/inside" && echo WROTE-INSIDE
bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo REACHED-HOST-LOOPBACK
grep CapEff /proc/self/status
cat; exit 7"#
    );
    let shadow_host = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    let rt = runtime();
    let (answer, missing) = rt.block_on(async {
        let pool = pool(2);
        filled(&pool, 2).await;
        let answer = call(&pool, &f, &policy, &script, &[], b"from-stdin\n").await;
        let missing = call(
            &pool,
            &f,
            &policy,
            "exec no-such-program-anywhere",
            &[],
            b"",
        )
        .await;
        (answer, missing)
    });
    drop(listener);
    assert_eq!(answer.code, 7, "{answer:?}");
    if shadow_host.contains("root:") {
        assert!(!answer.stdout.contains("root:"), "{answer:?}");
    }
    assert!(!answer.stdout.contains("HOST-PID-SEEN"), "{answer:?}");
    assert!(!answer.stdout.contains("WROTE-OUTSIDE"), "{answer:?}");
    assert!(!f.root.join("outside").exists());
    assert!(answer.stdout.contains("WROTE-INSIDE"), "{answer:?}");
    assert!(f.ws.join("inside").exists());
    assert!(
        !answer.stdout.contains("REACHED-HOST-LOOPBACK"),
        "{answer:?}"
    );
    assert!(
        answer.stdout.contains("CapEff:\t0000000000000000"),
        "{answer:?}"
    );
    assert!(answer.stdout.contains("from-stdin"), "{answer:?}");
    assert_eq!(missing.code, 127, "{missing:?}");
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Children of any thread of `pid` (the pool's boxes are its refill thread's children).
fn children_of_all_threads(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn is_warm_box(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| c.split(|b| *b == 0).any(|arg| arg == b"--eve-sandbox-warm"))
        .unwrap_or(false)
}

/// Idle boxes (both stages) are gone once their pool is dropped, and a box is in its own process
/// group, apart from the caller's.
#[test]
fn idle_boxes_die_with_their_pool() {
    let rt = runtime();
    let me = std::process::id();
    let boxes = rt.block_on(async {
        let pool = pool(2);
        filled(&pool, 2).await;
        let mut found = Vec::new();
        let ready = eventually(LIMIT, || {
            found = children_of_all_threads(me)
                .into_iter()
                .filter(|p| is_warm_box(*p))
                .flat_map(|stage1| {
                    let mut tree = vec![stage1];
                    tree.extend(children(stage1));
                    tree
                })
                .collect();
            found.len() >= 4
        });
        assert!(ready, "expected two boxes of two stages: {found:?}");
        for pid in &found {
            let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(*pid as i32)))
                .unwrap()
                .as_raw();
            assert_ne!(
                pgid,
                nix::unistd::getpgrp().as_raw(),
                "a box shares our group"
            );
        }
        drop(pool);
        found
    });
    let gone = eventually(LIMIT, || boxes.iter().all(|p| !alive(*p)));
    assert!(gone, "idle boxes outlived their pool: {boxes:?}");
}

/// Starts `sh -c script` in a box taken from `pool`, with no input and its output discarded.
fn start_call(
    warm: isolate::Warm,
    f: &Fixture,
    policy: &Policy,
    script: &str,
) -> isolate::WarmProcess {
    isolate::prepare_writable(&f.ws, policy).unwrap();
    let null = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    let args = vec!["-c".to_owned(), script.to_owned()];
    warm.start(
        policy,
        "sh",
        &args,
        &env(f, &[]),
        &f.ws,
        [null.as_fd(), null.as_fd(), null.as_fd()],
    )
    .unwrap()
}

/// A box taken while another is ready is replaced once its call is over, not while it runs (on
/// a small machine the replacement's start would compete with the call); a box taken from a
/// pool it leaves empty is replaced at once, so the next call need not wait for this one.
#[test]
fn a_taken_box_is_replaced_after_its_call_unless_the_pool_ran_dry() {
    let f = Fixture::new();
    let policy = f.policy();
    let rt = runtime();
    rt.block_on(async {
        let pool = pool(2);
        filled(&pool, 2).await;
        let warm = pool.take().await.expect("a ready box");
        let mut running = start_call(warm, &f, &policy, "sleep 1");
        // Longer than a box takes to start on an idle machine; the call is still running.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(pool.idle(), 1, "the replacement started during the call");
        running.wait().await.unwrap();
        filled(&pool, 2).await;

        let pool = self::pool(1);
        filled(&pool, 1).await;
        let warm = pool.take().await.expect("a ready box");
        let mut running = start_call(warm, &f, &policy, "sleep 30");
        filled(&pool, 1).await;
        assert!(
            running.id().is_some_and(alive),
            "the call ended before the pool was refilled"
        );
        running.start_kill().unwrap();
        running.wait().await.unwrap();
    });
}
