//! A box never holds a terminal, even when the process that starts it has one.
//!
//! The attack (a prompt-injected command under `eve chat`): open `/dev/tty` and print a fake
//! "approval granted" line on the user's terminal, make itself the terminal's foreground process
//! group (`tcsetpgrp`) or its session's controlling terminal (`TIOCSCTTY`), read what the user
//! types. The test process has no terminal of its own, so this module re-runs one test of this
//! binary ([`under_a_terminal`]) in a process that makes a fresh pseudo-terminal its controlling
//! terminal and gives it to the box as stdin, stdout and stderr (the worst a caller could do):
//! the box, cold and warm, reaches nothing of it; the same script run as a plain child of that
//! process reaches all of it, so the test can fail.

use std::io::{Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eve_sandbox::isolate::{self, Pool};
use serde_json::Value;

use super::{Fixture, LIMIT, eventually, helper};

/// Set in the environment of the re-run: [`under_a_terminal`] does its work only then.
const UNDER_TERMINAL: &str = "EVE_SANDBOX_TEST_UNDER_TERMINAL";

/// What the user typed, waiting in the terminal's input when each command starts.
const TYPED: &str = "typed-by-the-user";

/// The fake line the attack prints on the terminal.
const FAKE: &str = "APPROVAL GRANTED BY ADMIN";

/// The attack, in Python (it needs `ioctl`); writes what each attempt gave to the file named by
/// its first argument.
const ATTACK: &str = r#"
import errno, fcntl, json, os, sys, termios
report = {}
def attempt(name, fn):
    try:
        got = fn()
        report[name] = "ok" if got is None else got
    except OSError as e:
        report[name] = errno.errorcode.get(e.errno, str(e.errno))
def fake_line():
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    os.write(fd, b"\x1b[2K\r" + sys.argv[2].encode() + b"\r\n")
    os.close(fd)
attempt("open /dev/tty", fake_line)
with open("/proc/self/stat") as f:
    stat = f.read()
report["tty_nr"] = int(stat[stat.rindex(")") + 2:].split()[4])
report["terminals"] = [fd for fd in range(256) if os.isatty(fd)]
for fd in (0, 1, 2):
    attempt(f"tcsetpgrp {fd}", lambda fd=fd: os.tcsetpgrp(fd, os.getpgrp()))
attempt("read stdin", lambda: os.read(0, 200).decode(errors="replace"))
attempt("setsid", lambda: os.setsid() and None)
for fd in (0, 1, 2):
    attempt(f"TIOCSCTTY {fd}", lambda fd=fd: fcntl.ioctl(fd, termios.TIOCSCTTY, 0) and None)
attempt("open /dev/tty after setsid", fake_line)
with open(sys.argv[1], "w") as f:
    json.dump(report, f)
"#;

#[test]
fn a_box_cannot_reach_the_terminal_of_the_process_that_started_it() {
    let name = "isolate::terminal::under_a_terminal";
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UNDER_TERMINAL, "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the run under a terminal failed ({}):\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "the test under a terminal did not run:\n{text}"
    );
}

/// A pseudo-terminal that is this process's controlling terminal, and what arrived on it. Its
/// master is never closed (closing it would hang the terminal up, and the kernel would end this
/// process, the session's leader, with `SIGHUP`): it lives as long as the process.
struct Terminal {
    master: ManuallyDrop<std::fs::File>,
    slave: OwnedFd,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    /// Makes this process the leader of a new session whose controlling terminal is a fresh
    /// pseudo-terminal, and records everything written to it.
    fn take() -> Terminal {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        nix::unistd::setsid().expect("the re-run is not a process group leader");
        let master =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap()
            .into();
        rustix::process::ioctl_tiocsctty(&slave).unwrap();
        // This process really has a controlling terminal now.
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/tty")
            .expect("the pseudo-terminal is the controlling terminal");
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let seen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            master: ManuallyDrop::new(master),
            slave,
            screen,
        }
    }

    /// The user types a line.
    fn type_line(&mut self) {
        self.master
            .write_all(format!("{TYPED}\n").as_bytes())
            .unwrap();
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until everything written to the terminal so far has been recorded: a marker written
    /// now arrives after it.
    fn settle(&self, label: &str) {
        let marker = format!("[settled after {label}]");
        let mut out = std::fs::File::from(self.slave.try_clone().unwrap());
        out.write_all(marker.as_bytes()).unwrap();
        assert!(
            eventually(Duration::from_secs(10), || self.screen().contains(&marker)),
            "the terminal's output was not recorded: {:?}",
            self.screen()
        );
    }

    /// The terminal as a command's stdin, stdout and stderr.
    fn stdio(&self) -> [OwnedFd; 3] {
        [(); 3].map(|()| self.slave.try_clone().unwrap())
    }
}

fn report(f: &Fixture, label: &str) -> Value {
    let path = f.ws.join(format!("{label}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{label}: no report at {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn assert_reached_nothing(label: &str, r: &Value, term: &Terminal) {
    let refused = |key: &str, want: &[&str]| {
        let got = r[key].as_str().unwrap_or_default();
        assert!(want.contains(&got), "{label}: {key} gave {got}: {r}");
    };
    refused("open /dev/tty", &["ENOENT", "ENXIO"]);
    refused("open /dev/tty after setsid", &["ENOENT", "ENXIO"]);
    assert_eq!(r["tty_nr"], 0, "{label}: has a controlling terminal: {r}");
    assert_eq!(
        r["terminals"],
        serde_json::json!([]),
        "{label}: holds a terminal: {r}"
    );
    for fd in 0..3 {
        refused(&format!("tcsetpgrp {fd}"), &["ENOTTY"]);
        refused(&format!("TIOCSCTTY {fd}"), &["ENOTTY"]);
    }
    assert_eq!(r["read stdin"], "", "{label}: read the user's input: {r}");
    assert_eq!(r["setsid"], "ok", "{label}: {r}");
    term.settle(label);
    assert!(
        !term.screen().contains(FAKE),
        "{label}: the fake line reached the terminal: {:?}",
        term.screen()
    );
}

#[test]
#[ignore = "run under a terminal by a_box_cannot_reach_the_terminal_of_the_process_that_started_it"]
fn under_a_terminal() {
    if std::env::var_os(UNDER_TERMINAL).is_none() {
        return;
    }
    let mut term = Terminal::take();
    let f = Fixture::new();
    std::fs::write(f.ws.join("attack.py"), ATTACK).unwrap();
    let script = |label: &str| format!(r#"python3 "$WS/attack.py" "$WS/{label}.json" '{FAKE}'"#);

    // Cold: the caller's terminal handed over as all three streams.
    term.type_line();
    let mut cold = f.isolated(&f.policy(), &script("cold"));
    let [i, o, e] = term.stdio();
    cold.stdin(Stdio::from(i))
        .stdout(Stdio::from(o))
        .stderr(Stdio::from(e));
    let status = cold.status().unwrap();
    assert!(
        status.success(),
        "cold: {status}; screen {:?}",
        term.screen()
    );
    assert_reached_nothing("cold", &report(&f, "cold"), &term);

    // Warm: a box of a pool started by this process, given the terminal as its call's stdio.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let policy = f.policy();
    let status = rt.block_on(async {
        let pool = Pool::start(helper(), 1).unwrap();
        let warm = tokio::time::timeout(LIMIT, pool.take())
            .await
            .unwrap()
            .expect("the pool gives a box");
        isolate::prepare_writable(&f.ws, &policy).unwrap();
        let env: Vec<(String, String)> = [
            ("PATH", super::path_var()),
            ("HOME", super::real_home().display().to_string()),
            ("WS", f.ws.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let [i, o, e] = term.stdio();
        use std::os::fd::AsFd;
        let args = ["-c".to_owned(), script("warm")];
        let mut child = warm
            .start(
                &policy,
                "sh",
                &args,
                &env,
                &f.ws,
                [i.as_fd(), o.as_fd(), e.as_fd()],
            )
            .unwrap();
        drop((i, o, e));
        tokio::time::timeout(LIMIT, child.wait())
            .await
            .unwrap()
            .unwrap()
    });
    assert!(
        status.success(),
        "warm: {status}; screen {:?}",
        term.screen()
    );
    assert_reached_nothing("warm", &report(&f, "warm"), &term);

    // The same attack as a plain child of this process reaches everything.
    let mut host = f.host(&script("host"));
    let [i, o, e] = term.stdio();
    host.stdin(Stdio::from(i))
        .stdout(Stdio::from(o))
        .stderr(Stdio::from(e));
    let status = host.status().unwrap();
    assert!(
        status.success(),
        "host: {status}; screen {:?}",
        term.screen()
    );
    let r = report(&f, "host");
    assert_eq!(r["open /dev/tty"], "ok", "host: {r}");
    assert_ne!(r["tty_nr"], 0, "host: {r}");
    assert_eq!(r["terminals"], serde_json::json!([0, 1, 2]), "host: {r}");
    assert_eq!(r["tcsetpgrp 0"], "ok", "host: {r}");
    // What was typed before the boxes ran waited for them; only the plain child reads it.
    assert!(
        r["read stdin"].as_str().unwrap_or_default().contains(TYPED),
        "host: {r}"
    );
    assert!(
        eventually(Duration::from_secs(5), || term.screen().contains(FAKE)),
        "host: the fake line never reached the terminal: {:?}",
        term.screen()
    );
}
