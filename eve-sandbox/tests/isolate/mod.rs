//! Tests of the `isolated` sandbox. Every security claim is an attack that fails isolated and
//! succeeds when the same script runs unconfined, so each test can fail.

mod escape;
mod fate;
mod limits;
mod network;
mod pool;
mod terminal;
mod view;
mod work;

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use eve_sandbox::isolate::{self, Limits, Policy};

pub fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_eve-sandbox-test-helper"))
}

pub fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

/// A temp folder outside `/tmp` (the sandbox has its own `/tmp`, which would hide any path there
/// for a reason other than the view), with a workspace, another session's workspace and a HOME.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub other: PathBuf,
    pub home: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let root = dir.path().to_path_buf();
        let ws = root.join("ws");
        let other = root.join("other");
        let home = root.join("home");
        for d in [&ws, &other, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        Fixture {
            _dir: dir,
            root,
            ws,
            other,
            home,
        }
    }

    /// The policy of an ordinary tool call: the workspace writable, the version managers on PATH
    /// readable, the real HOME recreated empty.
    pub fn policy(&self) -> Policy {
        let home = real_home();
        Policy {
            read_only: isolate::path_view(&path_var(), Some(&home), &[]).read_only,
            read_write: vec![self.ws.clone()],
            home: Some(home),
            limits: Limits::defaults(),
            ..Policy::default()
        }
    }

    /// `sh -c script` isolated by `policy`, in the workspace.
    pub fn isolated(&self, policy: &Policy, script: &str) -> Command {
        isolate::prepare_writable(&self.ws, policy).unwrap();
        let mut cmd = isolate::command(&helper(), policy, "sh", ["-c", script]).unwrap();
        self.env(&mut cmd);
        cmd
    }

    /// The same script, unconfined.
    pub fn host(&self, script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        self.env(&mut cmd);
        cmd
    }

    fn env(&self, cmd: &mut Command) {
        cmd.current_dir(&self.ws)
            .env_clear()
            .env("PATH", path_var())
            .env("HOME", real_home())
            .env("WS", &self.ws)
            .env("OTHER", &self.other)
            .env("ROOT", &self.root)
            .env("FAKE_HOME", &self.home);
    }
}

pub fn path_var() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

pub fn real_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/root".into())
}

pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` in its own process group with piped output; kills the group after `limit` (and
/// fails the test) so a broken sandbox cannot hang the suite.
pub fn run(mut cmd: Command, limit: Duration) -> Out {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            let (out, err) = (t_out.join().unwrap(), t_err.join().unwrap());
            panic!("command did not end within {limit:?}\n--- stdout\n{out}\n--- stderr\n{err}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    Out {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
        elapsed,
    }
}

pub const LIMIT: Duration = Duration::from_secs(30);

/// Polls `cond` every 20 ms until it holds or `bound` passes; returns whether it held.
pub fn eventually(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > bound {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn write(path: &Path, text: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, text).unwrap();
}
