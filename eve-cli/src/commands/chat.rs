//! `eve chat`: an interactive terminal client.
//!
//! By default the agent runs in this process (built first, like `eve run`, on the project's store);
//! with `--url` it talks to a running `eve serve`/`eve dev` over the session API (`--token` for
//! bearer auth). Either way the reply streams to stdout, reasoning is dimmed, each tool call is one
//! line on stderr, and an approval is a y/n question. Lines starting with a slash command
//! (`/new`, `/compact`, `/clear`, `/cancel`, `/model`, `/info`, `/exit`, `/help`) act on the
//! session or the chat (`settings`: the model per session, the agent summary); any other line,
//! `/tool …` included, is a message. Ctrl-C cancels the running turn; at the prompt, a second
//! Ctrl-C exits. Without a terminal, lines are read from stdin as they come (scripts, tests).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use eve_runtime::engine::events as ev;
use eve_runtime::server;
use serde_json::Value;
use tokio::sync::mpsc;

use super::run::build_agent;
use crate::cli::ChatArgs;
use crate::project::locate;
use crate::render::{paint, stderr_color, stdout_color};
use crate::sanitize::{Untrusted, errln, neutralise, own_styles};
use crate::term::{Printer, Spinner, compact, is_yes};

pub(crate) mod backend;
mod settings;

use backend::{Backend, Remote};
use settings::SessionModels;

const HELP: &str = "\
/new      start a new session
/compact  compact the session's context now
/clear    empty the session's context (its history stays in the store)
/cancel   cancel the running or parked turn
/model    show the model and the known models; /model PROVIDER/NAME switches this session's model
/info     the agent, its model, context window, reasoning and tools, and where each came from
/exit     leave (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)
/help     this list
Anything else is sent to the agent (an unknown /word is not: start the line with // to send
it as it is). Up and down recall earlier lines (kept in .eve/chat_history); Ctrl-C cancels a
running turn.";

pub fn run(args: ChatArgs) -> anyhow::Result<ExitCode> {
    let usage = args.usage;
    let local = match &args.url {
        Some(_) => None,
        None => {
            let project = locate(&args.project)?;
            if !build_agent(&project)? {
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
            let wanted = super::sessions::wanted(args.session.as_deref(), args.last)?;
            // History is kept per project, under `.eve/` (with `--url`, when run in one).
            let history = match &local {
                Some(project) => Some(project.state_dir.join(HISTORY_FILE)),
                None => locate(&args.project)
                    .ok()
                    .filter(|p| p.state_dir.is_dir())
                    .map(|p| p.state_dir.join(HISTORY_FILE)),
            };
            let local_project = local.clone();
            let mut models = None;
            let (backend, resume) = match local {
                Some(project) => {
                    let chosen = Arc::new(SessionModels::new(args.model.model.as_deref()));
                    models = Some(chosen.clone());
                    let rt = super::open_runtime_with(&project, chosen, true).await?;
                    super::serve::report_view(&rt);
                    let resume = match wanted {
                        Some(w) => Some(super::sessions::resolve(&rt, &project, w).await?),
                        None => None,
                    };
                    (Backend::Local(rt), resume)
                }
                None => {
                    let remote =
                        Remote::new(args.url.as_deref().unwrap_or_default(), args.token.clone())?;
                    // An unreachable server or refused credentials (a wrong token, or none for
                    // a server that wants one) end the chat here, before anything is typed.
                    remote.check().await?;
                    let resume = match wanted {
                        Some(w) => Some(remote.resolve(w).await?),
                        None => None,
                    };
                    (Backend::Remote(remote), resume)
                }
            };
            let mut chat = Chat::new(backend, history, local_project, models);
            if usage {
                chat.printer.always_usage();
            }
            chat.run(resume).await
        })
}

/// An input request seen on the stream and not yet answered.
#[derive(Debug, Clone)]
struct Request {
    id: String,
    prompt: String,
    input: Value,
}

/// Requests of `input.requested` events that no later `approval.settled` answered.
fn unanswered(events: &[Value]) -> Vec<Request> {
    let mut open: Vec<Request> = Vec::new();
    for event in events {
        match event["type"].as_str().unwrap_or_default() {
            ev::INPUT_REQUESTED => {
                for r in event["data"]["requests"].as_array().into_iter().flatten() {
                    let Some(id) = r["requestId"].as_str() else {
                        continue;
                    };
                    open.retain(|o| o.id != id);
                    open.push(Request {
                        id: id.to_owned(),
                        prompt: r["prompt"].as_str().unwrap_or("Approve?").to_owned(),
                        input: r["action"]["input"].clone(),
                    });
                }
            }
            ev::APPROVAL_SETTLED => {
                let id = event["data"]["requestId"].as_str().unwrap_or_default();
                open.retain(|o| o.id != id);
            }
            ev::TURN_CANCELLED | ev::TURN_FAILED | ev::TURN_COMPLETED => open.clear(),
            _ => {}
        }
    }
    open
}

/// What the user typed, or pressed.
enum Input {
    Line(String),
    Interrupt,
    Eof,
}

/// Where typed lines come from: a line editor on a terminal (history, arrows, Ctrl-U…), else
/// stdin line by line (scripts, tests).
enum Reader {
    Piped(mpsc::UnboundedReceiver<String>),
    Editor {
        /// Asks the editor thread for one line: the prompt, and whether to keep it in history.
        ask: std::sync::mpsc::Sender<(String, bool)>,
        answers: mpsc::UnboundedReceiver<Input>,
    },
}

/// The line editor on its own thread (it blocks), asked for one line at a time, so that between
/// prompts the terminal is left alone for the streamed reply and Ctrl-C reaches the turn.
fn editor_thread(history: Option<std::path::PathBuf>) -> Reader {
    let (ask, asks) = std::sync::mpsc::channel::<(String, bool)>();
    let (tx, answers) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let config = rustyline::Config::builder()
            .max_history_size(HISTORY_SIZE)
            .map(|b| b.auto_add_history(false).build())
            .unwrap_or_default();
        let Ok(mut editor) = rustyline::DefaultEditor::with_config(config) else {
            let _ = tx.send(Input::Eof);
            return;
        };
        if let Some(path) = &history {
            let _ = editor.load_history(path);
        }
        while let Ok((prompt, remember)) = asks.recv() {
            let input = match editor.readline(&prompt) {
                Ok(line) => {
                    if remember && !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                        if let Some(path) = &history
                            && let Err(e) = editor.save_history(path)
                        {
                            tracing::debug!(error = %e, "cannot save the chat history");
                        }
                    }
                    Input::Line(line)
                }
                Err(rustyline::error::ReadlineError::Interrupted) => Input::Interrupt,
                Err(_) => Input::Eof,
            };
            if tx.send(input).is_err() {
                break;
            }
        }
    });
    Reader::Editor { ask, answers }
}

fn piped_reader() -> Reader {
    let (line_tx, lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = line.trim_end_matches(['\n', '\r']).to_owned();
                    if line_tx.send(text).is_err() {
                        break;
                    }
                }
            }
        }
    });
    Reader::Piped(lines)
}

/// How often the spinner turns.
const SPIN_TICK: std::time::Duration = std::time::Duration::from_millis(100);
/// The history file, in the project's `.eve/`.
const HISTORY_FILE: &str = "chat_history";
/// Lines kept in the history file.
const HISTORY_SIZE: usize = 1000;

/// The first word of lines `eve chat` acts on itself.
const COMMANDS: [&str; 9] = [
    "/new", "/compact", "/clear", "/cancel", "/model", "/info", "/exit", "/quit", "/help",
];

/// What a typed line is: one of [`COMMANDS`], a message, or a slash word nobody knows (caught
/// here, not sent to the model). `/tool …` is a message (the mock model's way to call a tool),
/// and `//text` sends `/text`.
#[derive(Debug, PartialEq)]
enum Typed<'a> {
    Command(&'a str),
    Message(&'a str),
    Unknown(&'a str),
}

fn classify(text: &str) -> Typed<'_> {
    if let Some(rest) = text.strip_prefix("//") {
        return Typed::Message(&text[text.len() - rest.len() - 1..]);
    }
    if !text.starts_with('/') {
        return Typed::Message(text);
    }
    let word = text.split_whitespace().next().unwrap_or_default();
    if COMMANDS.contains(&word) {
        Typed::Command(word)
    } else if word == "/tool" {
        Typed::Message(text)
    } else {
        Typed::Unknown(word)
    }
}

struct Chat {
    backend: Backend,
    session: Option<String>,
    printer: Printer,
    color: bool,
    interactive: bool,
    /// A spinner while the model is silent or a tool runs (stderr is a terminal).
    spin: bool,
    reader: Reader,
    interrupts: mpsc::UnboundedReceiver<()>,
    /// The project of a local chat, and the MCP connections already said to be down.
    project: Option<eve_compile::Project>,
    warned: std::collections::HashSet<String>,
    /// The model provider of an in-process chat, and the model `/model` chose (for the current
    /// session and the ones `/new` starts).
    models: Option<Arc<SessionModels>>,
    chosen: Option<String>,
}

impl Chat {
    fn new(
        backend: Backend,
        history: Option<std::path::PathBuf>,
        project: Option<eve_compile::Project>,
        models: Option<Arc<SessionModels>>,
    ) -> Self {
        let interactive = std::io::stdin().is_terminal();
        let reader = if interactive {
            editor_thread(history)
        } else {
            piped_reader()
        };
        let (int_tx, interrupts) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if int_tx.send(()).is_err() {
                    break;
                }
            }
        });
        let color = stderr_color();
        let mut printer = Printer::new(false);
        // On a terminal the reply is labelled and coloured; piped, stdout holds only the text.
        if std::io::stdout().is_terminal() {
            printer.label_replies(&paint(stdout_color(), "1;32", "agent:"), stdout_color());
        }
        Self {
            backend,
            session: None,
            printer,
            color,
            interactive,
            spin: interactive && std::io::stderr().is_terminal(),
            reader,
            interrupts,
            project,
            warned: std::collections::HashSet::new(),
            models,
            chosen: None,
        }
    }

    /// A dim line on stderr; it may carry a session id a server sent, so it is neutralised.
    fn note(&self, text: &str) {
        errln!("{}", paint(self.color, "2", &neutralise(text)));
    }

    /// An error may quote the server, a tool or the model.
    fn error(&self, e: &anyhow::Error) {
        errln!(
            "{} {}",
            paint(self.color, "1;31", "error:"),
            Untrusted(format!("{e:#}"))
        );
    }

    /// One line from the user; `remember` keeps it in the history (not for approval answers).
    async fn input(&mut self, prompt: &str, remember: bool) -> Input {
        match &mut self.reader {
            Reader::Piped(lines) => tokio::select! {
                line = lines.recv() => match line {
                    Some(line) => Input::Line(line),
                    None => Input::Eof,
                },
                Some(()) = self.interrupts.recv() => Input::Interrupt,
            },
            Reader::Editor { ask, answers } => {
                // The line editor prints the prompt itself: through the same filter as the rest.
                let prompt = own_styles(prompt).into_owned();
                if ask.send((prompt, remember)).is_err() {
                    return Input::Eof;
                }
                // The editor reads Ctrl-C itself while it has the terminal.
                let answer = answers.recv().await.unwrap_or(Input::Eof);
                while self.interrupts.try_recv().is_ok() {}
                answer
            }
        }
    }

    async fn run(mut self, resume: Option<String>) -> anyhow::Result<ExitCode> {
        if let Some(id) = resume {
            let history = self.backend.history(&id).await?;
            self.note(&format!("session {id} ({} events)", history.len()));
            self.session = Some(id.clone());
            if let Backend::Local(rt) = &self.backend {
                // Finish whatever the session had left (an unfinished turn, an answered wait).
                let rt = rt.clone();
                let id = id.clone();
                tokio::spawn(async move { rt.drive(&id).await });
            }
            // A parked turn asks its questions; an unfinished one is followed to its end.
            let tail = history.len() as u64;
            let pending = unanswered(&history);
            let resting = history
                .last()
                .is_none_or(|e| server::is_rest_point(e["type"].as_str().unwrap_or_default()));
            if !pending.is_empty() {
                if !self.approve(&id, &pending, false).await? {
                    return Ok(self.leave());
                }
                self.follow_turn(&id, Some(tail)).await?;
            } else if !resting {
                self.follow_turn(&id, Some(tail)).await?;
            }
        } else if self.interactive {
            self.note("eve chat: type a message, /help for commands, Ctrl-D to leave");
        }
        let mut armed = false;
        loop {
            let prompt = paint(self.color, "1", "you> ");
            let line = match self.input(&prompt, true).await {
                Input::Eof => break,
                Input::Interrupt => {
                    if armed {
                        errln!();
                        break;
                    }
                    armed = true;
                    errln!();
                    self.note("(press Ctrl-C again, or type /exit, to leave)");
                    continue;
                }
                Input::Line(line) => line,
            };
            armed = false;
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let command = match classify(text) {
                Typed::Command(word) => word,
                Typed::Unknown(word) => {
                    errln!(
                        "{} unknown command {word}: /help lists the commands (start the line \
                         with // to send it to the agent as it is)",
                        paint(self.color, "1;33", "eve chat:")
                    );
                    continue;
                }
                Typed::Message(message) => {
                    if let Err(e) = self.message(message).await {
                        self.error(&e);
                    }
                    continue;
                }
            };
            match command {
                "/exit" | "/quit" => break,
                "/model" => {
                    let arg = text.split_whitespace().nth(1).map(str::to_owned);
                    if let Err(e) = self.switch_model(arg.as_deref()) {
                        self.error(&e);
                    }
                }
                "/info" => match self.info().await {
                    Ok(lines) => {
                        for line in lines {
                            errln!("{}", Untrusted(line));
                        }
                    }
                    Err(e) => self.error(&e),
                },
                "/help" => errln!("{HELP}"),
                "/new" => {
                    self.session = None;
                    self.note("(new session: it starts with your next message)");
                }
                "/cancel" => match self.session.clone() {
                    None => self.note("(no session yet)"),
                    Some(id) => match self.backend.cancel(&id).await {
                        Ok(true) => {
                            self.note("(cancelling the turn)");
                            if let Err(e) = self.follow_turn(&id, None).await {
                                self.error(&e);
                            }
                        }
                        Ok(false) => self.note("(no turn to cancel)"),
                        Err(e) => self.error(&e),
                    },
                },
                cmd @ ("/compact" | "/clear") => match self.session.clone() {
                    None => self.note("(no session yet)"),
                    Some(id) => {
                        let what = &cmd[1..];
                        match self.backend.control(&id, what).await {
                            Ok(()) => self.note(if what == "compact" {
                                "(context compacted)"
                            } else {
                                "(context cleared)"
                            }),
                            Err(e) => self.error(&e),
                        }
                    }
                },
                _ => {}
            }
        }
        Ok(self.leave())
    }

    /// `/model [ID]`: without an id, the model in force and the known models; with one, that
    /// model for this session from its next turn (checked first: an unusable model changes
    /// nothing).
    fn switch_model(&mut self, id: Option<&str>) -> anyhow::Result<()> {
        let (Some(models), Some(project)) = (self.models.clone(), self.project.as_ref()) else {
            anyhow::bail!(
                "with --url the server's model answers: set it where the server runs \
                 (`eve set model`, EVE_MODEL); /info shows it"
            );
        };
        let agent = settings::current_agent(project)?;
        let Some(id) = id else {
            for line in settings::model_lines(&models, &agent, self.session.as_deref()) {
                errln!("{line}");
            }
            return Ok(());
        };
        match &self.session {
            Some(session) => models.choose(session, id, &agent)?,
            // No session yet: checked now, chosen when the first message creates it.
            None => models.check(id, &agent).map(drop)?,
        }
        self.chosen = Some(id.to_owned());
        self.note(&format!(
            "(model: {id} for this session, from its next turn)"
        ));
        Ok(())
    }

    /// `/info`: the agent, its model, window, reasoning and tools.
    async fn info(&self) -> anyhow::Result<Vec<String>> {
        match (&self.backend, &self.models, &self.project) {
            (Backend::Remote(remote), ..) => {
                let info = remote.get("/eve/v1/info").await?;
                Ok(settings::remote_info(
                    &info,
                    &remote.shown_base(),
                    self.session.as_deref(),
                ))
            }
            (Backend::Local(_), Some(models), Some(project)) => {
                let agent = settings::current_agent(project)?;
                Ok(settings::local_info(models, &agent, self.session.as_deref()).await)
            }
            _ => anyhow::bail!("no agent to describe"),
        }
    }

    /// Says how to come back; the exit code.
    fn leave(&mut self) -> ExitCode {
        self.printer.finish_line();
        if let Some(id) = &self.session {
            self.note(&format!(
                "continue with: {}",
                self.backend.continue_command(id)
            ));
        }
        ExitCode::SUCCESS
    }

    /// Sends a message (creating the session on the first one) and follows the turn.
    async fn message(&mut self, text: &str) -> anyhow::Result<()> {
        let id = match self.session.clone() {
            Some(id) => id,
            None => {
                let id = self.backend.create().await?;
                self.note(&format!("session {id}"));
                self.session = Some(id.clone());
                if let (Some(models), Some(chosen), Some(project)) =
                    (&self.models, &self.chosen, &self.project)
                {
                    models.choose(&id, chosen, &settings::current_agent(project)?)?;
                }
                id
            }
        };
        let from = self.backend.tail(&id).await?;
        self.backend.send(&id, text).await?;
        self.follow_turn(&id, Some(from)).await?;
        if let (Backend::Local(rt), Some(project)) = (&self.backend, &self.project) {
            super::run::warn_connections_down(rt, project, &mut self.warned, self.color).await;
        }
        Ok(())
    }

    /// Follows the session from `from` (its tail when `None`) until it rests, answering
    /// approvals on the way; Ctrl-C cancels the turn.
    async fn follow_turn(&mut self, id: &str, from: Option<u64>) -> anyhow::Result<()> {
        let mut from = match from {
            Some(from) => from,
            None => self.backend.tail(id).await?,
        };
        loop {
            let follow = self.backend.follow(id, from).await?;
            // The follower runs on its own task, so the spinner's ticks never cancel a read.
            let (tx, mut events) = mpsc::unbounded_channel();
            let pump = tokio::spawn(async move {
                let mut follow = follow;
                loop {
                    match follow.next().await {
                        Ok(Some(event)) => {
                            if tx.send(Ok(event)).is_err() {
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            break;
                        }
                    }
                }
            });
            let mut spinner = Spinner::new(self.spin, self.color);
            let mut seen: Vec<Value> = Vec::new();
            loop {
                let tick = async {
                    if spinner.enabled() {
                        tokio::time::sleep(SPIN_TICK).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                let event = tokio::select! {
                    event = events.recv() => event,
                    Some(()) = self.interrupts.recv() => {
                        spinner.clear();
                        self.printer.finish_line();
                        match self.backend.cancel(id).await {
                            Ok(true) => self.note("(cancelling the turn)"),
                            Ok(false) => {}
                            Err(e) => self.error(&e),
                        }
                        continue;
                    }
                    () = tick => {
                        spinner.tick(self.printer.at_line_start());
                        continue;
                    }
                };
                let event = match event {
                    Some(Ok(event)) => event,
                    Some(Err(e)) => {
                        spinner.clear();
                        pump.abort();
                        return Err(e);
                    }
                    None => break,
                };
                if event.is_null() {
                    continue;
                }
                spinner.event(&event);
                self.printer.wire(&event);
                self.report(&event);
                seen.push(event);
            }
            spinner.clear();
            self.printer.finish_line();
            from += seen.len() as u64;
            let parked = seen.last().is_some_and(|e| e["type"] == ev::TURN_WAITING);
            let pending = unanswered(&seen);
            if !parked || pending.is_empty() {
                self.backend.settle(id).await;
                return Ok(());
            }
            if !self.approve(id, &pending, true).await? {
                return Ok(());
            }
        }
    }

    /// Notices for events the printer leaves out.
    fn report(&self, event: &Value) {
        match event["type"].as_str().unwrap_or_default() {
            ev::TURN_FAILED => {
                let error = &event["data"]["error"];
                errln!(
                    "{} {} ({})",
                    paint(self.color, "1;31", "turn failed:"),
                    Untrusted(error["message"].as_str().unwrap_or("unknown error")),
                    Untrusted(error["code"].as_str().unwrap_or("error"))
                );
            }
            ev::TURN_CANCELLED => self.note("(turn cancelled)"),
            ev::CONTEXT_CLEARED => {}
            _ => {}
        }
    }

    /// Asks about each request; `false` when stdin ended before an answer. `shown`: the tool
    /// calls were printed already (`→ tool {input}`), so the question does not repeat the input.
    /// A deny asks for a reason on a terminal (the model is told it).
    async fn approve(
        &mut self,
        id: &str,
        requests: &[Request],
        shown: bool,
    ) -> anyhow::Result<bool> {
        for r in requests {
            // The prompt comes from the tool's definition or a server; the line editor prints
            // it as it is, so it is neutralised here.
            let question = if shown {
                format!(
                    "{} {} [y/N] ",
                    paint(self.color, "1;33", "approve?"),
                    Untrusted(&r.prompt)
                )
            } else {
                format!(
                    "{} {} {} [y/N] ",
                    paint(self.color, "1;33", "approve?"),
                    Untrusted(&r.prompt),
                    compact(&r.input)
                )
            };
            if !self.interactive {
                errln!("{question}");
            }
            let approve = match self.input(&question, false).await {
                Input::Line(answer) => is_yes(&answer),
                Input::Interrupt => {
                    errln!();
                    false
                }
                Input::Eof => {
                    self.note(&format!(
                        "(no answer: the turn stays parked; answer with `eve sessions approve {id} {}`)",
                        r.id
                    ));
                    return Ok(false);
                }
            };
            let reason = if !approve && self.interactive {
                let prompt = format!(
                    "{} ",
                    paint(self.color, "1;33", "reason for the model (Enter for none)>")
                );
                match self.input(&prompt, false).await {
                    Input::Line(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
                    _ => None,
                }
            } else {
                None
            };
            if let Some(note) = self.backend.answer(id, &r.id, approve, reason).await? {
                self.note(&note);
            }
        }
        Ok(true)
    }
}
