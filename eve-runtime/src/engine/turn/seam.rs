//! The seam between the turn core and the features that plug into it.
//!
//! The core ([`super`]) owns the step machine: read the turn's view, decide the next step, call
//! the model, journal, settle the calls, commit, repeat. A feature (compaction, memory, the
//! probe, strategies, the hollow-answer check, phases, lean context, dynamic tools, hooks,
//! breakers, self-change, subagents: `crate::features`) is one [`TurnExtension`] with a handful
//! of hooks, called at fixed points of every step in the order of the turn's list
//! (`crate::features::for_turn`):
//!
//! | hook | when | what it may do |
//! | --- | --- | --- |
//! | [`TurnExtension::prepare_step`] | before `step.started` | writes committed before it (a compaction's checkpoint), and say the context or tools changed |
//! | [`TurnExtension::step_started`] | with `step.started` | writes that go out with it (`phase.changed`, `session.probed`) |
//! | [`TurnExtension::shape_request`] | before the model call | change the request (prompt blocks, tools, choice), answer it without the model, or fail the turn |
//! | [`TurnExtension::context_overflow`] | the provider said "too long" | make room (compact) or say why it cannot |
//! | [`TurnExtension::builtins`] / [`TurnExtension::call_builtin`] | a call of a built-in tool | settle it in-process, ask a principal, or wait |
//! | [`TurnExtension::answer_call`] | before any call is decided | answer it instead (a tool stub) |
//! | [`TurnExtension::gate_call`] | before a call is approved or run | refuse it |
//! | [`TurnExtension::check_input`] | before a call is reviewed, asked about or run | deny it or rewrite its input (`tool.before` hooks) |
//! | [`TurnExtension::before_run`] | a build tool's call is about to run | add to what it is given (its state), and hold something until it is settled |
//! | [`TurnExtension::after_run`] | a build tool's call succeeded | take what is the feature's out of its result, with writes that go with it, or fail it |
//! | [`TurnExtension::call_ran`] | after a call ran | writes that go with its result (breaker rows) |
//! | [`TurnExtension::take_call`] | a call is about to run | run it another way (as a task: a child started in the background) and settle it now |
//! | [`TurnExtension::parked_until`] | a parked turn is driven again | keep it parked until a timer is due (a `sleep`) |
//! | [`TurnExtension::hold`] | before a step starts | hold the turn open (work it started is still running), park it on input (new requests of its own with `Ask`), or fail it |
//! | [`TurnExtension::final_answer`] | the model answered without calls | send it back with a message, hold the turn open, add events to the turn's end, or fail the turn |
//! | [`TurnExtension::turn_ended`] | a turn stops early | let go of what its unsettled calls hold, with writes that go with the turn's end |
//!
//! A feature never commits: it adds writes to a batch the core commits with the transition
//! they belong to, so one commit per transition stays the rule. What a feature sees of the turn
//! is a [`TurnView`], read-only; its own state (a cached window, the prompt block it loaded, the
//! phase it computed) lives in the feature value, made afresh for every turn run.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use eve_compile::Tool;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::engine::{LoadedBuild, ResolvedModel, Runtime, RuntimeResult};
use crate::model::{Message, ModelRequest, ModelResponse};
use crate::store::{Batch, Budget, CallStatus, MessageRecord, SessionRecord, TurnRecord};
use crate::store::{MESSAGE_KIND_CHECKPOINT, ToolCallRecord};
use crate::tools::ToolContext;

pub(crate) use super::Answer;
pub(crate) use super::idempotency_key;

/// What a feature sees of the running turn at one of its hooks.
pub(crate) struct TurnView<'a> {
    /// The runtime: its store for reads, its configuration and services.
    pub(crate) rt: &'a Runtime,
    /// The session as the turn holds it.
    pub(crate) session: &'a SessionRecord,
    /// The root session of this session's tree (its own id for a root session).
    pub(crate) root: &'a str,
    /// The build the turn runs on.
    pub(crate) build: &'a Arc<LoadedBuild>,
    /// The model of the turn.
    pub(crate) model: &'a ResolvedModel,
    /// The turn.
    pub(crate) turn: &'a TurnRecord,
    /// The turn's cancellation.
    pub(crate) cancel: &'a CancellationToken,
    /// What a subagent's turn may spend, passed down by its parent.
    pub(crate) budget: Option<Budget>,
    /// Who sent the turn's message (a principal or a channel identity), if the channel said:
    /// kept with the message and the turn, so reading it costs nothing.
    pub(crate) sender: Option<&'a str>,
    /// The context as stored (empty where a hook runs before it is loaded).
    pub context: &'a [Message],
    /// Tokens of the last model call (input and output), as the provider reported them.
    pub(crate) last_tokens: u64,
    /// The turn's tools beyond the build's (MCP, catalogue, dynamic), once loaded: see
    /// [`Self::offered_specs`] and [`Self::validate_input`].
    pub(super) extra: Option<&'a super::tools::Extra>,
}

impl TurnView<'_> {
    /// The session's id.
    pub(crate) fn id(&self) -> &str {
        &self.session.id
    }

    /// The key under which state shared between sessions (memory notes of the `agent` and
    /// `user` scopes, per-agent breakers) is kept for `name`: `name` itself, or `name@root` when
    /// every root session is a world of its own (`RuntimeConfig::isolated_roots`).
    pub(crate) fn shared_key(&self, name: &str) -> String {
        if self.rt.inner.config.isolated_roots {
            format!("{name}@{}", self.root)
        } else {
            name.to_owned()
        }
    }

    /// The model's context window: `agent.yaml` `context_window`, else the model client's (a
    /// provider's answer is asked once per runtime). `None` when nobody knows it.
    pub(crate) async fn context_window(&self) -> Option<u64> {
        super::limits::context_window(self.rt, self.build, self.model).await
    }

    /// The session's workspace, prepared (seeded from the build) on first use.
    pub(crate) fn workspace(&self) -> RuntimeResult<PathBuf> {
        super::workspace_of(self.rt, self.build, &self.session.id)
    }

    /// The context of one process the runtime starts for the turn (a tool, a hook, a probe, a
    /// dynamic tool's provider): `sandbox` confines it, with `workspace` writable and
    /// `agent_dir` (the build's files) read-only.
    pub(crate) fn tool_context(
        &self,
        call_id: String,
        idempotency_key: String,
        workspace: PathBuf,
        agent_dir: PathBuf,
        sandbox: Option<eve_compile::EffectiveSandbox>,
    ) -> ToolContext {
        super::tool_context(
            self.rt,
            self.build,
            &self.session.id,
            call_id,
            idempotency_key,
            workspace,
            agent_dir,
            sandbox,
        )
    }
}

/// Writes of the start of a step, gathered from the features for the core to commit.
#[derive(Default)]
pub(crate) struct StepStart {
    /// Committed before `step.started` (or with it, first).
    pub(crate) before: Batch,
    /// Committed with `step.started`, after it.
    pub(crate) with: Batch,
    /// The writes replace the context (a compaction): the core reads it and the session again.
    pub(crate) context_replaced: bool,
    /// The writes change the turn's tools (dynamic tools resolved): the core loads them again.
    pub(crate) tools_changed: bool,
}

/// What [`TurnExtension::shape_request`] decided.
pub(crate) enum Shaped {
    /// Call the model with the request as shaped.
    Call,
    /// Journal this response without calling the model (a plan's wave of steps).
    Respond(ModelResponse),
    /// The turn cannot go on: a code and a message for `turn.failed`.
    Fail(&'static str, String),
}

/// What [`TurnExtension::call_builtin`] decided for a call of a built-in tool.
pub(crate) enum Handled {
    /// Settled now with this status and output; `writes` go out with the result (before it).
    Settle {
        /// The call's status.
        status: CallStatus,
        /// What the model is told.
        output: Value,
        /// Writes committed with the result.
        writes: Batch,
    },
    /// Ask a principal, with this prompt (and, for a request of a kind of its own, how).
    Ask {
        /// What the principal is asked.
        prompt: String,
        /// The request's own kind, when it is not a tool approval.
        request: Option<AskAs>,
    },
    /// The call waits on an answer already asked for.
    Wait,
    /// The call waits on a durable timer the feature keeps, due at `at_ms` (epoch ms): the turn
    /// parks with no driver held, the runtime wakes it then, and the call is asked again
    /// (see [`TurnExtension::parked_until`]). `writes` (the timer's row) go out with the park.
    WaitUntil {
        /// When the timer is due.
        at_ms: i64,
        /// Writes committed with the park.
        writes: Batch,
    },
}

/// An input request of a kind of its own (a proposed change shows the proposal).
pub(crate) struct AskAs {
    /// The request's kind.
    pub(crate) kind: String,
    /// What it shows.
    pub(crate) action: Value,
    /// Writes committed with the request (its events).
    pub(crate) writes: Batch,
}

impl Handled {
    /// Settled with no writes of its own.
    pub(crate) fn settle(status: CallStatus, output: Value) -> Self {
        Self::Settle {
            status,
            output,
            writes: Batch::new(),
        }
    }
}

/// A built-in tool a feature answers: its name, and the policy it is journaled under (its
/// declared effect), when it has one.
pub(crate) struct Builtin {
    /// The tool's name, as the model calls it.
    pub(crate) name: String,
    /// Its policy (effect and approval), when the journal or approvals need one.
    pub(crate) policy: Option<Tool>,
}

/// Where in deciding a call [`TurnExtension::gate_call`] is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateAt {
    /// Before the tool is resolved or its approval looked at (a tool withdrawn in this phase).
    Offered,
    /// After its input was validated, before it is approved or run (an open breaker).
    Run,
}

/// What [`TurnExtension::check_input`] said of a call.
pub(crate) enum InputVerdict {
    /// Run with this input.
    Allow(Value),
    /// Do not run; the model is told why.
    Deny(String),
}

/// What [`TurnExtension::take_call`] did with a call it runs another way.
pub(crate) struct Taken {
    /// The call's status.
    pub(crate) status: CallStatus,
    /// What the model is told.
    pub(crate) output: Value,
    /// Writes committed with the result (before it).
    pub(crate) writes: Batch,
}

/// What a feature holds from [`TurnExtension::before_run`] until the call is settled (a lock);
/// dropped once the result is committed.
pub(crate) type Held = Box<dyn std::any::Any + Send + Sync>;

/// What [`TurnExtension::hold`] said before a step.
pub(crate) enum Hold {
    /// Nothing holds the turn: the step starts.
    Go,
    /// The turn stays held: the core commits these writes, checks the turn's cancellation and
    /// asks again (the feature waits a bounded time inside [`TurnExtension::hold`]).
    Wait(Batch),
    /// The turn can only go on once a principal answers these requests (a child's approval):
    /// it parks on them (`input.requested`, `turn.waiting {on: "input"}`).
    Park(Vec<crate::store::InputRequestRecord>),
    /// As [`Hold::Park`], on requests of the turn's own that are new: `writes` (their rows) go
    /// out with the park and its `input.requested` (a session over budget asks to go on).
    Ask(Vec<crate::store::InputRequestRecord>, Batch),
    /// The turn cannot go on: it fails with this code and message (`turn.failed`).
    Fail(&'static str, String),
}

/// What [`TurnExtension::final_answer`] said of a final answer.
pub(crate) enum AnswerVerdict {
    /// The answer stands; these events go out with the turn's end (after `step.completed`).
    Accept(Vec<(&'static str, Value)>),
    /// The answer goes back to the model with `message` (the next step's last), and these
    /// events go out after `step.completed`.
    SendBack {
        /// What the model is told.
        message: String,
        /// Events of the send-back.
        events: Vec<(&'static str, Value)>,
    },
    /// The answer cannot stand and the turn cannot go on: it fails with this code and message
    /// (`turn.failed`), in the commit that journals the answer.
    Fail(&'static str, String),
    /// The answer stands in the context but the turn does not end: the step completes with
    /// these events, and the next step starts once no feature [`TurnExtension::hold`]s it.
    Hold(Vec<(&'static str, Value)>),
}

/// One feature of a turn. Every hook has a default that does nothing.
#[async_trait]
pub(crate) trait TurnExtension: Send + Sync {
    /// The feature's name (logs and tests).
    fn name(&self) -> &'static str;

    /// Whether the step may hold its writes back (see the core's `step`): `false` while this
    /// feature has something to load or write between `step.started` and the journal.
    fn lets_hold(&self, _view: &TurnView<'_>) -> bool {
        true
    }

    /// Whether [`Self::step_started`] needs the turn's whole tool list (MCP and dynamic tools
    /// loaded) in [`TurnView::offered_specs`].
    fn needs_tools_at_start(&self) -> bool {
        false
    }

    /// Whether [`Self::prepare_step`] reads what the writes held back hold (a new turn's start,
    /// with its message), so the core commits them first. Asked only while writes are held.
    async fn reads_committed_start(&mut self, _view: &TurnView<'_>) -> RuntimeResult<bool> {
        Ok(false)
    }

    /// Before a step starts (the turn's cancel flag and limits were checked).
    async fn prepare_step(
        &mut self,
        _view: &TurnView<'_>,
        _start: &mut StepStart,
    ) -> RuntimeResult<()> {
        Ok(())
    }

    /// Writes that go out with `step.started` (in `start.with`).
    async fn step_started(
        &mut self,
        _view: &TurnView<'_>,
        _start: &mut StepStart,
    ) -> RuntimeResult<()> {
        Ok(())
    }

    /// Shapes this step's model request (system prompt, messages, tools, tool choice); `writes`
    /// go out before the model is called (or with the held `step.started`, after it).
    async fn shape_request(
        &mut self,
        _view: &TurnView<'_>,
        _request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        Ok(Shaped::Call)
    }

    /// The provider answered that the request does not fit its window. `None`: not this
    /// feature's business; `Some(Ok(writes))`: room was made with `writes` (the core commits
    /// them, reads the context again and calls once more); `Some(Err(why))`: it cannot help.
    async fn context_overflow(
        &mut self,
        _view: &TurnView<'_>,
        _already_compacted: bool,
    ) -> RuntimeResult<Option<Result<Batch, String>>> {
        Ok(None)
    }

    /// The built-in tools this feature answers in this turn (the turn's table routes their
    /// calls to [`Self::call_builtin`]).
    fn builtins(&self, _view: &TurnView<'_>) -> Vec<Builtin> {
        Vec::new()
    }

    /// A call of one of [`Self::builtins`].
    async fn call_builtin(
        &mut self,
        _view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        Ok(Handled::settle(
            CallStatus::Failed,
            Value::String(format!("`{}` is not a built-in tool here", call.name)),
        ))
    }

    /// Before a call of any tool is decided: `Some` answers it here instead (a tool stub), before
    /// any gate, approval or run; the first feature that answers wins.
    async fn answer_call(
        &mut self,
        _view: &TurnView<'_>,
        _call: &ToolCallRecord,
    ) -> RuntimeResult<Option<Handled>> {
        Ok(None)
    }

    /// Before a call is decided, at `at`: `Some(refusal)` settles it failed with that text.
    async fn gate_call(
        &mut self,
        _view: &TurnView<'_>,
        _call: &ToolCallRecord,
        _tool: &str,
        _at: GateAt,
    ) -> RuntimeResult<Option<String>> {
        Ok(None)
    }

    /// Before a call is reviewed, asked about or run, with the input it would run with.
    async fn check_input(
        &self,
        _view: &TurnView<'_>,
        _call: &ToolCallRecord,
        input: Value,
        _workspace: &std::path::Path,
    ) -> InputVerdict {
        InputVerdict::Allow(input)
    }

    /// Before a call of the build tool `tool` runs (before it is marked running), with the JSON
    /// it is given (a process's stdin): a feature may add to it. What it returns is held until
    /// the call's result is committed (a lock ordering the calls that share what it adds).
    async fn before_run(
        &self,
        _view: &TurnView<'_>,
        _call: &ToolCallRecord,
        _tool: &Tool,
        _input: &mut Value,
    ) -> RuntimeResult<Option<Held>> {
        Ok(None)
    }

    /// A call of the build tool `tool` succeeded with `output`, before anything keeps it: a
    /// feature may take what is its own out of it and add `writes` that go with the result
    /// (the commit that settles the call); `Err(why)` fails the call with `why` instead.
    async fn after_run(
        &self,
        _view: &TurnView<'_>,
        _call: &ToolCallRecord,
        _tool: &Tool,
        _output: &mut Value,
        _writes: &mut Batch,
    ) -> RuntimeResult<Result<(), String>> {
        Ok(Ok(()))
    }

    /// After a call of `tool` ran (`ok`: it succeeded; calls whose input eve refused before
    /// running are not reported): writes that go with its result.
    async fn call_ran(
        &self,
        _view: &TurnView<'_>,
        _tool: &str,
        _ok: bool,
        _writes: &mut Batch,
    ) -> RuntimeResult<()> {
        Ok(())
    }

    /// Before a call that passed its checks runs: `Some` settles it with what the feature did
    /// instead (a subagent call started as a background task answers with its receipt).
    async fn take_call(
        &self,
        _view: &TurnView<'_>,
        _call: &ToolCallRecord,
    ) -> RuntimeResult<Option<Taken>> {
        Ok(None)
    }

    /// A turn parked with no request pending is driven again (woken, restarted, looked at by
    /// another node): `Some(at_ms)` keeps it parked until then (a timer of this feature not due
    /// yet), and the runtime wakes it at that time; `None` lets it go on.
    async fn parked_until(&self, _view: &TurnView<'_>) -> RuntimeResult<Option<i64>> {
        Ok(None)
    }

    /// Before a step starts (after the turn's cancel flag and limits were checked), whether
    /// something holds the turn open.
    async fn hold(&mut self, _view: &TurnView<'_>) -> RuntimeResult<Hold> {
        Ok(Hold::Go)
    }

    /// The model answered `answer` with no calls.
    async fn final_answer(
        &mut self,
        _view: &TurnView<'_>,
        _answer: &str,
    ) -> RuntimeResult<AnswerVerdict> {
        Ok(AnswerVerdict::Accept(Vec::new()))
    }

    /// The turn stops early (cancelled, failed, a limit) with these calls unsettled; `writes`
    /// go out with the turn's end.
    async fn turn_ended(
        &mut self,
        _view: &TurnView<'_>,
        _unsettled: &[ToolCallRecord],
        _writes: &mut Batch,
    ) -> RuntimeResult<()> {
        Ok(())
    }
}

/// A stored message row as the model sees it (a checkpoint becomes a user message holding the
/// summary and the pinned skills, verbatim).
pub(crate) fn to_message(row: &MessageRecord) -> RuntimeResult<Message> {
    if row.kind == MESSAGE_KIND_CHECKPOINT {
        let summary = row.body["summary"].as_str().unwrap_or_default();
        let mut content = format!(
            "[Earlier conversation, compacted into a summary]\n\n{}",
            summary.trim()
        );
        if let Some(skills) = row.body["skills"].as_array() {
            for skill in skills {
                let name = skill["name"].as_str().unwrap_or_default();
                let body = skill["body"].as_str().unwrap_or_default();
                content.push_str(&format!("\n\n[Loaded skill `{name}`]\n{body}"));
            }
        }
        return Ok(Message::user(content));
    }
    Ok(serde_json::from_value(row.body.clone())?)
}

/// The smaller of two optional caps (either alone when the other is unset).
pub(crate) fn min_opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Tokens and cost `session` and its descendants spent.
pub(crate) async fn spent(
    rt: &Runtime,
    session: &SessionRecord,
    build: &LoadedBuild,
) -> RuntimeResult<(u64, f64)> {
    let mut tokens = session.usage.total();
    let mut cost = session.cost_usd;
    if build.has_children() {
        let (below, below_cost) = rt.inner.store.descendant_usage(&session.id).await?;
        tokens = tokens.saturating_add(below.total());
        cost += below_cost;
    }
    Ok((tokens, cost))
}
