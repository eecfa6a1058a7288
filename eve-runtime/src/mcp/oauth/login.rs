//! `eve connections login NAME`: the operator's authorization code flow for an app-scoped OAuth
//! connection. A loopback listener on a port picked by the system is the redirect URI; the
//! authorization URL is shown; the one request that reaches `/callback` is handed to rmcp, which
//! accepts it only when its `state` is one this login stored (a forged or replayed `state` is
//! refused) and then exchanges the code (PKCE S256) and stores the token in eve's store.

use std::sync::Arc;
use std::time::Duration;

use eve_compile::{Connection, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::connect::{config, probe_challenge};
use super::store::{APP_PRINCIPAL, TokenPlace};
use super::{Authorizer, OAuthError, UserAgent};
use crate::mcp::EnvLookup;
use crate::mcp::error::McpError;
use crate::mcp::transport::expand_env;

/// Longest wait for the browser to come back to the loopback redirect.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Shows the authorization URL to the operator.
pub type Show = Box<dyn Fn(&str) + Send + Sync>;

/// The loopback redirect target of one login.
struct Loopback {
    listener: tokio::sync::Mutex<TcpListener>,
    base: String,
    show: Show,
    timeout: Duration,
}

#[async_trait::async_trait]
impl UserAgent for Loopback {
    async fn authorize(&self, url: &str) -> Result<String, OAuthError> {
        (self.show)(url);
        let listener = self.listener.lock().await;
        tokio::time::timeout(self.timeout, wait_for_callback(&listener, &self.base))
            .await
            .map_err(|_| {
                OAuthError::UserAgent(format!(
                    "no browser came back to {}/callback within {} s",
                    self.base,
                    self.timeout.as_secs()
                ))
            })?
    }
}

/// Serves the loopback listener until a request for `/callback` arrives: its full URL.
async fn wait_for_callback(listener: &TcpListener, base: &str) -> Result<String, OAuthError> {
    loop {
        let (mut socket, _) = listener
            .accept()
            .await
            .map_err(|e| OAuthError::UserAgent(e.to_string()))?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&head);
        let target = text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("GET "))
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or("");
        if target == "/callback" || target.starts_with("/callback?") {
            let body = "Authorization received; you can close this window.";
            let _ = socket
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
            return Ok(format!("{base}{target}"));
        }
        let _ = socket
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
    }
}

/// Runs the authorization code flow for `connection` (app credentials) and stores its token.
/// `show` is given the authorization URL; the browser must come back within `timeout`.
pub async fn login(
    connection: &Connection,
    env: &EnvLookup,
    store: Arc<dyn crate::store::Store>,
    show: Show,
    timeout: Duration,
) -> Result<(), McpError> {
    let name = connection.name.as_str();
    let fail = |reason: String| McpError::Unauthorized {
        connection: name.to_owned(),
        reason,
    };
    let (Transport::Http { url, .. }, Some(settings)) = (&connection.transport, &connection.oauth)
    else {
        return Err(McpError::Config {
            connection: name.to_owned(),
            reason: "it has no `oauth:` block over `url:`: there is nothing to log in to"
                .to_owned(),
        });
    };
    let url = expand_env(url, env, name, "url")?;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| fail(format!("cannot listen on a loopback port: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| fail(e.to_string()))?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let place = TokenPlace {
        store,
        connection: name.to_owned(),
        principal: APP_PRINCIPAL.to_owned(),
    };
    let config = config(
        connection,
        settings,
        env,
        &format!("{base}/callback"),
        Some(place),
    )?;
    let agent = Arc::new(Loopback {
        listener: tokio::sync::Mutex::new(listener),
        base,
        show,
        timeout,
    });
    let authorizer = Authorizer::new(&url, config, Vec::new(), agent)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let challenge = probe_challenge(&url, Vec::new()).await;
    authorizer
        .authorize(challenge.as_deref())
        .await
        .map_err(|e| fail(e.to_string()))
}
