//! A scripted HTTP/1.1 server on `127.0.0.1:0`: each connection gets the next [`Reply`].
//!
//! Hand-rolled on a TcpListener so a test controls every byte: chunk boundaries, delays, a
//! connection closed mid-body, a body that is not what the headers promise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a reply's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// No length: the body ends when the server closes the connection.
    Close,
    /// Chunked encoding, properly terminated.
    Chunked,
    /// Chunked encoding, the connection dropped before the terminating chunk.
    ChunkedCut,
}

/// One scripted response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub parts: Vec<Vec<u8>>,
    pub before_headers: Duration,
    pub between_parts: Duration,
    pub end: End,
}

impl Reply {
    /// A `200 text/event-stream` reply whose body is `parts`, written one by one.
    pub fn sse<S: AsRef<str>>(parts: &[S]) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            parts: parts
                .iter()
                .map(|p| p.as_ref().as_bytes().to_vec())
                .collect(),
            before_headers: Duration::ZERO,
            between_parts: Duration::ZERO,
            end: End::Chunked,
        }
    }

    /// A JSON reply.
    pub fn json(status: u16, body: serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            parts: vec![body.to_string().into_bytes()],
            before_headers: Duration::ZERO,
            between_parts: Duration::ZERO,
            end: End::Chunked,
        }
    }

    /// A reply with an arbitrary content type and body.
    pub fn raw(status: u16, content_type: &str, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            parts: vec![body.as_bytes().to_vec()],
            before_headers: Duration::ZERO,
            between_parts: Duration::ZERO,
            end: End::Chunked,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn end(mut self, end: End) -> Self {
        self.end = end;
        self
    }

    pub fn before_headers(mut self, delay: Duration) -> Self {
        self.before_headers = delay;
        self
    }

    pub fn between_parts(mut self, delay: Duration) -> Self {
        self.between_parts = delay;
        self
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: serde_json::Value,
}

/// The running server.
pub struct TestServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl TestServer {
    /// Starts a server that serves `replies` in order, one per connection; past the end it
    /// answers 500.
    pub async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let reply = replies.next().unwrap_or_else(|| {
                    Reply::json(
                        500,
                        serde_json::json!({"error": {"message": "no more replies"}}),
                    )
                });
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, reply, recorded).await;
                });
            }
        });
        Self {
            url: format!("http://{addr}"),
            requests,
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// The only request received (panics if there were more or none).
    pub fn single_request(&self) -> Recorded {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "expected one request, got {requests:#?}");
        requests.into_iter().next().unwrap()
    }
}

async fn serve(
    mut socket: TcpStream,
    reply: Reply,
    recorded: Arc<Mutex<Vec<Recorded>>>,
) -> std::io::Result<()> {
    let request = read_request(&mut socket).await?;
    recorded.lock().unwrap().push(request);
    tokio::time::sleep(reply.before_headers).await;

    let reason = match reply.status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nconnection: close\r\n",
        reply.status
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if reply.end != End::Close {
        head.push_str("transfer-encoding: chunked\r\n");
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;

    for (i, part) in reply.parts.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(reply.between_parts).await;
        }
        if reply.end == End::Close {
            socket.write_all(part).await?;
        } else if !part.is_empty() {
            socket
                .write_all(format!("{:x}\r\n", part.len()).as_bytes())
                .await?;
            socket.write_all(part).await?;
            socket.write_all(b"\r\n").await?;
        }
        socket.flush().await?;
    }
    if reply.end == End::Chunked {
        socket.write_all(b"0\r\n\r\n").await?;
    }
    socket.flush().await?;
    socket.shutdown().await?;
    Ok(())
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[header_end..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    Ok(Recorded {
        method,
        path,
        headers,
        body,
    })
}

/// An address nothing listens on.
pub async fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}
