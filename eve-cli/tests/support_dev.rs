//! Support for tests of `eve dev`, `eve chat`, schedules and the AI SDK client: a project in a
//! temp folder (the shared [`TestAgent`]), the real binary started with its stderr lines
//! collected, blocking HTTP, and reads of the store.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use eve_test_support::eventually;
use eve_test_support::{TestAgent, json_or_text};

pub const EVE: &str = env!("CARGO_BIN_EXE_eve");

/// A project folder: `agent/` with instructions, and whatever a test adds ([`TestAgent`]).
pub struct Project {
    pub agent: TestAgent,
}

impl Project {
    pub fn new() -> Self {
        Self {
            agent: TestAgent::new(),
        }
    }

    pub fn root(&self) -> &Path {
        self.agent.root()
    }

    /// Writes `agent/<rel>` (atomically: a watcher never sees half a file).
    pub fn file(&self, rel: &str, content: &str) -> &Self {
        self.agent.file(rel, content);
        self
    }

    /// A shell tool `tools/<name>.sh`: front matter lines `front`, then `body`.
    pub fn tool(&self, name: &str, front: &str, body: &str) -> &Self {
        self.agent.tool(name, front, body);
        self
    }

    /// `eve ARGS` here, with the `mock/echo` model and no colour.
    pub fn eve(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(EVE);
        cmd.args(args)
            .current_dir(self.root())
            .env_remove("EVE_PROJECT")
            .env_remove("EVE_AGENT")
            .env_remove("EVE_MOCK_SCRIPT")
            .env_remove("EVE_BASE_URL")
            .env_remove("EVE_URL")
            .env_remove("EVE_TOKEN")
            .env_remove("EVE_SCHEDULE_CLOCK")
            .env_remove("PORT")
            .env("EVE_MODEL", "mock/echo")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        cmd
    }

    /// `eve build`, which must succeed.
    pub fn build(&self) {
        let out = self.eve(&["build"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn db(&self) -> rusqlite::Connection {
        store(self.root())
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.agent.path(rel)
    }
}

/// A running `eve serve` or `eve dev`, its stderr collected line by line.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `cmd` and waits for its `eve serving … on http://…` line.
    pub fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut server = Self {
            child,
            port: 0,
            lines,
        };
        let banner = server.wait_line(Duration::from_secs(20), |l| l.starts_with("eve serving "));
        server.port = banner.rsplit(':').next().unwrap().trim().parse().unwrap();
        server
    }

    /// Every stderr line so far.
    pub fn stderr(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits for a stderr line matching `pred` (searching all lines); returns it.
    pub fn wait_line(&mut self, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
        self.wait_line_after(0, limit, pred)
    }

    /// Like [`Server::wait_line`], among lines from index `from` on.
    pub fn wait_line_after(
        &mut self,
        from: usize,
        limit: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(line) = self.stderr().iter().skip(from).find(|l| pred(l)) {
                return line.clone();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "eve exited ({status}); stderr:\n{}",
                    self.stderr().join("\n")
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "no matching line within {limit:?}; stderr:\n{}",
                    self.stderr().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let (status, text) = http(self.port, "GET", path, None, None);
        (status, json_or_text(text))
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = http(self.port, "POST", path, Some(body), None);
        (status, json_or_text(text))
    }

    /// Events of a session's stream read that ends by itself.
    pub fn stream(&self, session: &str, query: &str) -> Vec<Value> {
        let (status, text) = http(
            self.port,
            "GET",
            &format!("/eve/v1/session/{session}/stream{query}"),
            None,
            None,
        );
        assert_eq!(status, 200, "{text}");
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// SIGKILL, and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM; returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("eve did not exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The project's store (`.eve/eve.db`), opened beside the `eve` processes that write it.
pub fn store(root: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(root.join(".eve/eve.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

/// A blocking HTTP/1.1 request with `Connection: close`; returns status and decoded body.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> (u16, String) {
    response(send(port, method, path, body, token), Vec::new())
}

/// Sends a request with `Connection: close`; the response is left to read.
pub fn send(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream
}

/// Reads a response to its end (`raw` is what was already read of it); returns status and
/// decoded body (chunked transfer encoding undone).
pub fn response(mut stream: TcpStream, mut raw: Vec<u8>) -> (u16, String) {
    stream.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut payload = raw[split + 4..].to_vec();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = Vec::new();
        let mut rest = payload.as_slice();
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16)
                    .unwrap();
            rest = &rest[line_end + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        payload = out;
    }
    (status, String::from_utf8(payload).unwrap())
}

/// A python with the `mcp` package: `EVE_TEST_PYTHON`, or the venv of `scripts/setup-test-deps.sh`.
pub fn test_python() -> PathBuf {
    if let Some(p) = std::env::var_os("EVE_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python3");
    assert!(
        venv.exists(),
        "this test needs Python's `mcp` package: run scripts/setup-test-deps.sh \
         (or set EVE_TEST_PYTHON to a python that has it)"
    );
    venv
}
