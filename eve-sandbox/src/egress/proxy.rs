//! The accept loop and one client connection of the egress proxy.
//!
//! Each accepted connection runs as a task in a `JoinSet` owned by the accept loop, so stopping
//! the loop aborts them all. A connection reads one request head (size- and time-capped), decides
//! with the policy, resolves once and checks each address (both in [`super::resolve`], shared with
//! the runtime's own requests), connects to a checked address and then
//! splices bytes: both ways for `CONNECT`, request body up and response down for plain http.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinSet;
use tokio::time::timeout;

use super::head::{self, HeadError, Kind, RequestHead, ResponseHead};
use super::resolve::{Denied, resolve};
use super::{EgressConfig, Refusal};

/// Largest upstream response head rewritten; a larger one is relayed unchanged.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// What a refused client may still send after its answer before the connection is dropped.
const DRAIN_BYTES: usize = 256 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

pub(super) async fn serve(
    listener: UnixListener,
    config: Arc<EgressConfig>,
    mut stopped: oneshot::Receiver<()>,
) {
    let max = config.limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let mut client = match accepted {
                    Ok((client, _)) => client,
                    Err(_) => {
                        // Out of descriptors or memory: give the connections in hand a moment
                        // to finish instead of spinning on accept.
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                if connections.len() >= 2 * max {
                    // Far over the cap: not even a 503 (each holds a task for its drain time).
                    continue;
                }
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let config = config.clone();
                        connections.spawn(async move {
                            handle(client, &config).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        connections.spawn(async move {
                            let body = "eve egress: too many connections at once from this tool; retry later";
                            reply(&mut client, 503, "Service Unavailable", body).await;
                        });
                    }
                }
            }
        }
    }
    connections.shutdown().await;
}

/// Serves one client connection to its end; every failure is answered or closes it.
async fn handle(mut client: UnixStream, config: &EgressConfig) {
    let limits = config.limits;
    let mut buf = Vec::with_capacity(4096);
    let read = timeout(
        limits.head_timeout,
        read_head(&mut client, &mut buf, limits.head_bytes),
    )
    .await;
    let (request, end) = match read {
        Err(_) | Ok(Err(ReadError::Closed)) => return,
        Ok(Err(ReadError::TooLarge)) => {
            let body = format!(
                "eve egress: request head larger than {} bytes",
                limits.head_bytes
            );
            return reply(&mut client, 431, "Request Header Fields Too Large", &body).await;
        }
        Ok(Err(ReadError::Bad(why))) => {
            return reply(
                &mut client,
                400,
                "Bad Request",
                &format!("eve egress: {why}"),
            )
            .await;
        }
        Ok(Ok(parsed)) => parsed,
    };
    let early = buf.split_off(end);
    let RequestHead { kind, host, port } = request;

    let upstream = match open(&host, port, config).await {
        Ok(stream) => stream,
        Err(Failure::Refused(reason)) => {
            let body = format!("eve egress: refused {host}:{port}: {reason}");
            (config.on_refused)(Refusal { host, port, reason });
            return reply(&mut client, 403, "Forbidden", &body).await;
        }
        Err(Failure::BadHost) => {
            let body = format!("eve egress: `{host}` is not a valid host name or IP address");
            return reply(&mut client, 400, "Bad Request", &body).await;
        }
        Err(Failure::Upstream(why)) => {
            let body = format!("eve egress: cannot reach {host}:{port}: {why}");
            return reply(&mut client, 502, "Bad Gateway", &body).await;
        }
    };
    let mut upstream = upstream;
    match kind {
        Kind::Connect => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
                || upstream.write_all(&early).await.is_err()
            {
                return;
            }
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
        Kind::Forward { head } => {
            if upstream.write_all(&head).await.is_err() || upstream.write_all(&early).await.is_err()
            {
                let body = format!("eve egress: {host}:{port} closed the connection");
                return reply(&mut client, 502, "Bad Gateway", &body).await;
            }
            forward(client, upstream).await;
        }
    }
}

/// Answers and closes. Closing a Unix socket with unread input resets it, and the client would
/// lose the answer: so after the answer, the rest of what the client sent is read and dropped
/// (bounded in bytes and time) until it closes its side.
async fn reply(client: &mut UnixStream, status: u16, reason: &str, body: &str) {
    if client
        .write_all(&head::response(status, reason, body))
        .await
        .is_err()
    {
        return;
    }
    let _ = client.shutdown().await;
    let drain = async {
        let mut chunk = [0u8; 4096];
        let mut left = DRAIN_BYTES;
        while left > 0 {
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = timeout(DRAIN_TIME, drain).await;
}

enum ReadError {
    Closed,
    TooLarge,
    Bad(String),
}

/// Reads until `buf` holds a complete request head; returns it and where it ends.
async fn read_head(
    client: &mut UnixStream,
    buf: &mut Vec<u8>,
    cap: usize,
) -> Result<(RequestHead, usize), ReadError> {
    let mut chunk = [0u8; 4096];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|_| ReadError::Closed)?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        match head::parse(buf) {
            Ok(parsed) if parsed.1 <= cap => return Ok(parsed),
            Ok(_) => return Err(ReadError::TooLarge),
            Err(HeadError::Partial) if buf.len() >= cap => return Err(ReadError::TooLarge),
            Err(HeadError::Partial) => {}
            Err(HeadError::TooManyHeaders) => return Err(ReadError::TooLarge),
            Err(HeadError::Bad(why)) => return Err(ReadError::Bad(why)),
        }
    }
}

enum Failure {
    Refused(String),
    BadHost,
    Upstream(String),
}

/// Decides, resolves once, checks every address ([`resolve`]), and connects to a checked one.
async fn open(host: &str, port: u16, config: &EgressConfig) -> Result<TcpStream, Failure> {
    let limit = config.limits.connect_timeout;
    let allowed = resolve(host, port, &config.policy, &config.own_listeners, limit)
        .await
        .map_err(|denied| match denied {
            Denied::Refused(why) => Failure::Refused(why),
            Denied::BadHost => Failure::BadHost,
            Denied::Unresolved(why) => Failure::Upstream(why),
        })?;
    let mut last = String::new();
    for addr in allowed {
        match timeout(limit, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = format!("connecting to {addr}: {e}"),
            Err(_) => {
                last = format!(
                    "connecting to {addr} took longer than {} s",
                    limit.as_secs_f32()
                )
            }
        }
    }
    Err(Failure::Upstream(last))
}

/// Relays a plain-http exchange: the rest of the request up, the response down with its head
/// rewritten to `Connection: close`; ends when the upstream finishes its response.
async fn forward(client: UnixStream, upstream: TcpStream) {
    let (mut client_r, mut client_w) = client.into_split();
    let (mut up_r, mut up_w) = upstream.into_split();
    {
        let upload = tokio::io::copy(&mut client_r, &mut up_w);
        let download = relay_response(&mut up_r, &mut client_w);
        tokio::pin!(upload, download);
        let mut uploading = true;
        loop {
            tokio::select! {
                _ = &mut download => break,
                _ = &mut upload, if uploading => uploading = false,
            }
        }
    }
    let _ = client_w.shutdown().await;
}

async fn relay_response<R, W>(up: &mut R, client: &mut W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        match head::response_head(&buf) {
            ResponseHead::Interim(end) => {
                // `100 Continue` and friends pass unchanged; the final response follows.
                client.write_all(&buf[..end]).await?;
                buf.drain(..end);
            }
            ResponseHead::Final(rewritten, end) => {
                client.write_all(&rewritten).await?;
                client.write_all(&buf[end..]).await?;
                break;
            }
            ResponseHead::Partial if buf.len() < MAX_RESPONSE_HEAD => {
                let n = up.read(&mut chunk).await?;
                if n == 0 {
                    client.write_all(&buf).await?;
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            ResponseHead::Partial | ResponseHead::NotHttp => {
                client.write_all(&buf).await?;
                break;
            }
        }
    }
    tokio::io::copy(up, client).await?;
    client.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn relayed(upstream: &[u8]) -> String {
        let (mut up_w, mut up_r) = tokio::io::duplex(1 << 20);
        let (mut cl_w, mut cl_r) = tokio::io::duplex(1 << 20);
        up_w.write_all(upstream).await.unwrap();
        drop(up_w);
        relay_response(&mut up_r, &mut cl_w).await.unwrap();
        drop(cl_w);
        let mut out = String::new();
        cl_r.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn interim_responses_pass_and_the_final_one_says_close() {
        let out = relayed(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
        )
        .await;
        assert_eq!(
            out,
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        );
    }

    #[tokio::test]
    async fn what_is_not_an_http_response_is_relayed_unchanged() {
        assert_eq!(relayed(b"SSH-2.0-x\r\n").await, "SSH-2.0-x\r\n");
        assert_eq!(
            relayed(b"HTTP/1.1 200 OK\r\nX: y").await,
            "HTTP/1.1 200 OK\r\nX: y"
        );
    }
}
