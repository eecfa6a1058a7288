//! `eve acp`: the agent over the Agent Client Protocol (v1), JSON-RPC 2.0 on stdin and stdout,
//! for editors (Zed, JetBrains, Neovim plugins).
//!
//! The agent runs in this process on the project's store (built first, like `eve run`), or in a
//! running server reached with `--url` (the session API, a bearer token from `EVE_TOKEN`): the
//! same `Backend` as `eve chat`. An ACP session is an eve session: `session/new` creates one,
//! `session/load` resumes any stored one (its history replayed as updates, an unfinished turn
//! followed to its end), `session/prompt` sends a message and streams the turn as
//! `session/update`s (`updates.rs`) until it rests, approvals become
//! `session/request_permission`s, and `session/cancel` cancels the turn. Stdout carries frames
//! only; everything else goes to stderr.

mod content;
pub(crate) mod rpc;
mod updates;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use eve_runtime::engine::events as ev;
use eve_runtime::env_vars::EVE_TOKEN;
use eve_runtime::server;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::chat::backend::{Backend, Remote};
use crate::cli::AcpArgs;
use crate::project::locate;
use crate::sanitize::{Untrusted, errln};
use rpc::{Frame, Out, Read, RpcError};
use updates::{Mapper, Pending, unanswered};

/// The ACP protocol version spoken.
const PROTOCOL_VERSION: u64 = 1;
/// How long after a step requested calls an approval request may still come before the calls
/// are reported running (eve asks in the commit right after the step's).
const ASK_WINDOW: Duration = Duration::from_millis(150);
/// How long in-flight requests may finish after stdin closes.
const DRAIN: Duration = Duration::from_secs(10);

pub fn run(args: AcpArgs) -> anyhow::Result<ExitCode> {
    let local = match &args.url {
        Some(_) => None,
        None => {
            let project = locate(&args.project)?;
            if !super::run::build_agent(&project)? {
                return Ok(ExitCode::FAILURE);
            }
            super::run::check_models(&project, args.model.model.as_deref())?;
            Some(project)
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(async move {
            let backend = match local {
                Some(project) => {
                    let rt =
                        super::open_runtime(&project, args.model.model.as_deref(), true).await?;
                    super::serve::report_view(&rt);
                    Backend::Local(rt)
                }
                None => {
                    let token = std::env::var(EVE_TOKEN).ok().filter(|t| !t.is_empty());
                    let remote = Remote::new(args.url.as_deref().unwrap_or_default(), token)?;
                    remote.check().await?;
                    Backend::Remote(remote)
                }
            };
            serve(backend, tokio::io::stdin(), tokio::io::stdout()).await;
            Ok(ExitCode::SUCCESS)
        })
}

/// Serves one ACP connection on `input` and `output` until `input` ends.
pub(crate) async fn serve<R, W>(backend: Backend, input: R, output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, writer) = Out::spawn(output);
    let conn = Arc::new(Conn {
        out,
        backend,
        sessions: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        waiting: Mutex::new(HashMap::new()),
        initialized: AtomicBool::new(false),
    });
    let mut reader = BufReader::new(input);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let line = match rpc::read_frame(&mut reader, rpc::MAX_FRAME_BYTES).await {
            Ok(Read::Line(line)) => line,
            Ok(Read::TooLong) => {
                conn.out.error(
                    &Value::Null,
                    &RpcError::new(
                        rpc::INVALID_REQUEST,
                        format!("the frame is over {} bytes", rpc::MAX_FRAME_BYTES),
                    ),
                );
                continue;
            }
            Ok(Read::Eof) => break,
            Err(e) => {
                errln!("eve acp: cannot read stdin: {e}");
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match rpc::parse(&line) {
            Err(malformed) => match malformed.id {
                Some(id) => conn.out.error(&id, &malformed.error),
                None => errln!(
                    "eve acp: a malformed notification was dropped: {}",
                    malformed.error.message
                ),
            },
            Ok(Frame::Response { id, outcome }) => conn.answered(&id, outcome),
            Ok(Frame::Notification { method, params }) => conn.notification(&method, &params),
            // Answered in order, so nothing read after it finds the connection uninitialised.
            Ok(Frame::Request { id, method, params }) if method == "initialize" => {
                match conn.initialize(&params) {
                    Ok(result) => {
                        conn.initialized.store(true, Ordering::Relaxed);
                        conn.out.result(&id, result);
                    }
                    Err(error) => conn.out.error(&id, &error),
                }
            }
            Ok(Frame::Request { id, .. }) if !conn.initialized.load(Ordering::Relaxed) => {
                conn.out.error(
                    &id,
                    &RpcError::new(rpc::INVALID_REQUEST, "call `initialize` first"),
                );
            }
            Ok(Frame::Request { id, method, params }) => {
                let conn = conn.clone();
                tasks.spawn(async move {
                    match conn.request(&method, &params).await {
                        Ok((result, then)) => {
                            conn.out.result(&id, result);
                            if let Some(then) = then {
                                tokio::spawn(then);
                            }
                        }
                        Err(error) => conn.out.error(&id, &error),
                    }
                });
            }
        }
        while tasks.try_join_next().is_some() {}
    }
    // The client is gone: what waits on its answers ends; requests in flight get a moment.
    conn.waiting
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
    let _ = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    drop(conn);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

/// An ACP session of this connection.
struct Session {
    id: String,
    /// Held by whatever follows the session's turn (a prompt, a loaded session's resume).
    turn: tokio::sync::Mutex<()>,
    /// Cancelled by `session/cancel`; a fresh one for each prompt.
    cancel: Mutex<CancellationToken>,
    /// Tools the user allowed for the rest of this session ("always allow").
    always: Mutex<HashSet<String>>,
    /// The workspace paths in tool inputs are relative to (in-process only).
    workspace: Option<PathBuf>,
}

impl Session {
    fn token(&self) -> CancellationToken {
        self.cancel
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn fresh_token(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *self.cancel.lock().unwrap_or_else(PoisonError::into_inner) = token.clone();
        token
    }
}

/// What a request answers, and work to start once the answer is written.
type Answer = Result<(Value, Option<BoxFuture<'static, ()>>), RpcError>;

struct Conn {
    out: Out,
    backend: Backend,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Ids of our requests to the client.
    next_id: AtomicU64,
    /// Our requests waiting for the client's answer.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Result<Value, Value>>>>,
    /// `initialize` was answered.
    initialized: AtomicBool,
}

/// An error of the session API, as the client sees it (secrets redacted).
fn internal(e: impl std::fmt::Display) -> RpcError {
    let text = e.to_string();
    let redacted = crate::logs::secrets().redact(&text).to_string();
    RpcError::new(rpc::INTERNAL_ERROR, redacted)
}

fn string_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params[key]
        .as_str()
        .ok_or_else(|| RpcError::params(format!("`{key}` (a string) is required")))
}

/// `cwd` and `mcpServers`, which `session/new` and `session/load` require.
fn check_setup(params: &Value) -> Result<(), RpcError> {
    if !params.is_object() {
        return Err(RpcError::params("params must be an object"));
    }
    let cwd = string_param(params, "cwd")?;
    if !cwd.starts_with('/') {
        return Err(RpcError::params(format!(
            "`cwd` must be an absolute path, found `{cwd}`"
        )));
    }
    match params["mcpServers"].as_array() {
        None => Err(RpcError::params("`mcpServers` (an array) is required")),
        Some(servers) => {
            if !servers.is_empty() {
                errln!(
                    "eve acp: the client's {} MCP server(s) are not connected: the agent uses \
                     the connections in its own agent/connections/",
                    servers.len()
                );
            }
            Ok(())
        }
    }
}

impl Conn {
    async fn request(self: &Arc<Self>, method: &str, params: &Value) -> Answer {
        match method {
            "authenticate" => Ok((json!({}), None)),
            "session/new" => self.new_session(params).await.map(|v| (v, None)),
            "session/load" => self.load_session(params).await,
            "session/prompt" => self.prompt(params).await.map(|v| (v, None)),
            _ => Err(RpcError::new(
                rpc::METHOD_NOT_FOUND,
                format!("`{method}` is not a method this agent has"),
            )),
        }
    }

    fn notification(self: &Arc<Self>, method: &str, params: &Value) {
        match method {
            "session/cancel" => {
                let Some(id) = params["sessionId"].as_str() else {
                    errln!("eve acp: session/cancel without `sessionId` was dropped");
                    return;
                };
                let Some(session) = self.session(id) else {
                    errln!(
                        "eve acp: session/cancel for unknown session {}",
                        Untrusted(id)
                    );
                    return;
                };
                session.token().cancel();
                let conn = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = conn.backend.cancel(&session.id).await {
                        errln!(
                            "eve acp: cannot cancel the turn: {}",
                            Untrusted(format!("{e:#}"))
                        );
                    }
                });
            }
            // Cancelling one of our own requests, or anything else: nothing to do.
            _ => tracing::debug!(method, "ACP notification ignored"),
        }
    }

    /// The client's answer to request `id` of ours.
    fn answered(&self, id: &Value, outcome: Result<Value, Value>) {
        let waiter = id.as_u64().and_then(|id| {
            self.waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id)
        });
        match waiter {
            Some(tx) => {
                let _ = tx.send(outcome);
            }
            None => errln!("eve acp: an answer to no request of ours ({id}) was dropped"),
        }
    }

    fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn add_session(&self, id: &str) -> Arc<Session> {
        let workspace = match &self.backend {
            Backend::Local(rt) => Some(rt.state_dir().join("sandboxes").join(id)),
            Backend::Remote(_) => None,
        };
        let session = Arc::new(Session {
            id: id.to_owned(),
            turn: tokio::sync::Mutex::new(()),
            cancel: Mutex::new(CancellationToken::new()),
            always: Mutex::new(HashSet::new()),
            workspace,
        });
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_insert(session)
            .clone()
    }

    fn update(&self, session: &str, update: Value) {
        self.out.notify(
            "session/update",
            json!({"sessionId": session, "update": update}),
        );
    }

    fn initialize(&self, params: &Value) -> Result<Value, RpcError> {
        if params["protocolVersion"].as_u64().is_none() {
            return Err(RpcError::params(
                "`protocolVersion` (an integer) is required",
            ));
        }
        // The version asked for when it is ours, else the latest we speak (the client decides).
        Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": false, "sse": false},
                "sessionCapabilities": {},
            },
            "agentInfo": {"name": "eve", "title": "eve", "version": env!("CARGO_PKG_VERSION")},
            "authMethods": [],
        }))
    }

    async fn new_session(&self, params: &Value) -> Result<Value, RpcError> {
        check_setup(params)?;
        let id = self.backend.create().await.map_err(internal)?;
        self.add_session(&id);
        Ok(json!({"sessionId": id}))
    }

    /// Replays the session's history, then (after the answer) follows an unfinished turn and
    /// asks what it waits on.
    async fn load_session(self: &Arc<Self>, params: &Value) -> Answer {
        check_setup(params)?;
        let id = string_param(params, "sessionId")?;
        let history = self.backend.history(id).await.map_err(|e| {
            RpcError::new(rpc::RESOURCE_NOT_FOUND, format!("{e:#}"))
                .with_data(json!({"sessionId": id}))
        })?;
        let session = self.add_session(id);
        let mut mapper = Mapper::new(true, session.workspace.clone());
        for event in &history {
            for update in mapper.map(event) {
                self.update(id, update);
            }
        }
        mapper.live();
        if let Backend::Local(rt) = &self.backend {
            // Finish whatever the session had left (an unfinished turn, an answered wait).
            let rt = rt.clone();
            let id = id.to_owned();
            tokio::spawn(async move { rt.drive(&id).await });
        }
        let pending = unanswered(&history);
        let resting = history
            .last()
            .is_none_or(|e| server::is_rest_point(e["type"].as_str().unwrap_or_default()));
        if pending.is_empty() && resting {
            return Ok((json!({}), None));
        }
        let conn = self.clone();
        let from = history.len() as u64;
        let then: BoxFuture<'static, ()> = Box::pin(async move {
            let _turn = session.turn.lock().await;
            let token = session.fresh_token();
            if let Err(e) = conn
                .follow_turn(&session, &mut mapper, from, pending, &token)
                .await
            {
                errln!(
                    "eve acp: following session {}: {}",
                    session.id,
                    Untrusted(&e.message)
                );
            }
        });
        Ok((json!({}), Some(then)))
    }

    async fn prompt(&self, params: &Value) -> Result<Value, RpcError> {
        let id = string_param(params, "sessionId")?;
        let session = self.session(id).ok_or_else(|| {
            RpcError::new(
                rpc::RESOURCE_NOT_FOUND,
                format!("no session `{id}` in this connection: create it with session/new or load it with session/load"),
            )
        })?;
        let text = content::prompt_text(&params["prompt"])?;
        let _turn = session.turn.lock().await;
        let token = session.fresh_token();
        let from = self.backend.tail(id).await.map_err(internal)?;
        self.backend.send(id, &text).await.map_err(internal)?;
        if token.is_cancelled() {
            let _ = self.backend.cancel(id).await;
        }
        let mut mapper = Mapper::new(false, session.workspace.clone());
        let stop = self
            .follow_turn(&session, &mut mapper, from, Vec::new(), &token)
            .await?;
        Ok(json!({"stopReason": stop}))
    }

    /// Follows the session from event `from` until it rests, sending updates and asking the
    /// approvals it parks on (`pending` first); the stop reason of the turn that ended.
    async fn follow_turn(
        &self,
        session: &Session,
        mapper: &mut Mapper,
        mut from: u64,
        mut pending: Vec<Pending>,
        token: &CancellationToken,
    ) -> Result<&'static str, RpcError> {
        let mut end: Option<Value> = None;
        loop {
            for request in std::mem::take(&mut pending) {
                if !token.is_cancelled() {
                    self.ask(session, mapper, &request, token).await?;
                }
            }
            let follow = self
                .backend
                .follow(&session.id, from)
                .await
                .map_err(internal)?;
            // The follower reads on its own task, so the wait for an approval request below
            // never cancels a read.
            let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
            let pump = tokio::spawn(async move {
                let mut follow = follow;
                loop {
                    let next = follow.next().await;
                    let stop = !matches!(next, Ok(Some(_)));
                    if tx.send(next).is_err() || stop {
                        break;
                    }
                }
            });
            let mut seen: Vec<Value> = Vec::new();
            loop {
                let next = if mapper.unsure() {
                    match tokio::time::timeout(ASK_WINDOW, events.recv()).await {
                        Ok(next) => next,
                        Err(_) => {
                            for update in mapper.running() {
                                self.update(&session.id, update);
                            }
                            continue;
                        }
                    }
                } else {
                    events.recv().await
                };
                let event = match next {
                    Some(Ok(Some(event))) => event,
                    Some(Ok(None)) | None => break,
                    Some(Err(e)) => {
                        pump.abort();
                        return Err(internal(format!("{e:#}")));
                    }
                };
                if event.is_null() {
                    continue;
                }
                for update in mapper.map(&event) {
                    self.update(&session.id, update);
                }
                seen.push(event);
            }
            from += seen.len() as u64;
            if let Some(e) = seen.iter().rev().find(|e| {
                matches!(
                    e["type"].as_str().unwrap_or_default(),
                    ev::TURN_COMPLETED | ev::TURN_CANCELLED | ev::TURN_FAILED
                )
            }) {
                end = Some(e.clone());
            }
            let Some(last) = seen.last() else { break };
            if last["type"] != ev::TURN_WAITING {
                break;
            }
            if last["data"]["on"] == "tasks" {
                // Work the turn started is still running; it resumes on its own.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            pending = unanswered(&seen)
                .into_iter()
                .filter(|p| p.kind == "tool-approval")
                .collect();
            if pending.is_empty() || token.is_cancelled() {
                // Parked on something ACP cannot ask (a question), or cancelled.
                break;
            }
        }
        if token.is_cancelled() {
            return Ok("cancelled");
        }
        let Some(end) = end else {
            return Ok("end_turn");
        };
        match end["type"].as_str().unwrap_or_default() {
            ev::TURN_CANCELLED => Ok("cancelled"),
            ev::TURN_FAILED => {
                let error = &end["data"]["error"];
                let all = end["data"].to_string();
                if error["code"] == "limit_exceeded" && all.contains("max_steps_per_turn") {
                    return Ok("max_turn_requests");
                }
                if error["code"] == "limit_exceeded" && all.contains("max_tokens") {
                    return Ok("max_tokens");
                }
                Err(RpcError::new(
                    rpc::INTERNAL_ERROR,
                    format!(
                        "the turn failed: {}",
                        error["message"].as_str().unwrap_or("unknown error")
                    ),
                )
                .with_data(json!({"code": error["code"]})))
            }
            _ => Ok("end_turn"),
        }
    }

    /// Asks the client about one approval and answers it with the user's choice.
    async fn ask(
        &self,
        session: &Session,
        mapper: &Mapper,
        request: &Pending,
        token: &CancellationToken,
    ) -> Result<(), RpcError> {
        let always = session
            .always
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&request.tool);
        let approve = if always {
            true
        } else {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            self.waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, tx);
            self.out.request(
                id,
                "session/request_permission",
                json!({
                    "sessionId": session.id,
                    "toolCall": mapper.permission_call(request),
                    "options": [
                        {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                        {"optionId": "allow-always",
                         "name": format!("Always allow {} in this session", request.tool),
                         "kind": "allow_always"},
                        {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
                    ],
                }),
            );
            let answer = tokio::select! {
                answer = rx => answer,
                () = token.cancelled() => {
                    self.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
                    return Ok(());
                }
            };
            let Ok(answer) = answer else {
                return Err(RpcError::new(
                    rpc::INTERNAL_ERROR,
                    "the connection closed before the permission was answered; the turn stays \
                     parked (load the session again to answer)",
                ));
            };
            match answer {
                Ok(result) => match result["outcome"]["outcome"].as_str() {
                    Some("selected") => match result["outcome"]["optionId"].as_str() {
                        Some("allow-once") => true,
                        Some("allow-always") => {
                            session
                                .always
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .insert(request.tool.clone());
                            true
                        }
                        _ => false,
                    },
                    Some("cancelled") => {
                        token.cancel();
                        if let Err(e) = self.backend.cancel(&session.id).await {
                            errln!(
                                "eve acp: cannot cancel the turn: {}",
                                Untrusted(format!("{e:#}"))
                            );
                        }
                        return Ok(());
                    }
                    // An answer we cannot read is no approval.
                    _ => false,
                },
                Err(error) => {
                    errln!(
                        "eve acp: the client could not ask for permission ({}): the call is denied",
                        Untrusted(error.to_string())
                    );
                    false
                }
            }
        };
        match self
            .backend
            .answer(&session.id, &request.request, approve, None)
            .await
        {
            Ok(Some(note)) => errln!("eve acp: {}", Untrusted(note)),
            Ok(None) => {}
            Err(e) => return Err(internal(format!("{e:#}"))),
        }
        Ok(())
    }
}
