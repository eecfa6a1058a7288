//! Approvals, in one place: whether a call must be approved before it runs, the reviewer that
//! judges `approval: auto` calls ([`reviewer`]), the input requests a turn parks on, and
//! answering them ([`Runtime::answer_input`]), which lets the parked turn resume. The order of
//! the gates a call passes (input validation, the features' gates and `tool.before` verdicts,
//! the reviewer, then a principal) is `super::calls`' `decide`.

use eve_compile::{Approval, Tool};
use serde_json::Value;

mod respond;
mod reviewer;

pub use respond::{InputAnswer, option_ids, resolve_text};

use super::TurnDriver;
use super::seam::AskAs;
use crate::engine::events as ev;
use crate::engine::events::LOCAL_PRINCIPAL;
use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use reviewer as review;

/// The agent name a reviewer is resolved under (see `review_call`).
const REVIEWER: &str = "review";
use crate::store::*;

impl TurnDriver<'_> {
    /// Parks `asks` (calls with the prompt to show) on approval: each call is marked pending and
    /// gets an input request, in one durable commit.
    pub(super) async fn request_approvals(
        &self,
        turn: &TurnRecord,
        step: u64,
        asks: Vec<(ToolCallRecord, String, Option<AskAs>)>,
        reviewed: Batch,
    ) -> RuntimeResult<()> {
        // The reviewer's verdicts on these calls go out with the requests: a resume finds the
        // call asked about, never unreviewed.
        let mut batch = Batch::durable();
        batch.ops.extend(reviewed.ops);
        let now = now_ms();
        for (mut call, prompt, ask_as) in asks {
            call.approval = ApprovalState::Pending;
            call.status = CallStatus::Pending;
            // A feature's request of its own kind (a proposed change), else a tool approval.
            let (kind, action) = match ask_as {
                Some(ask) => {
                    batch.ops.extend(ask.writes.ops);
                    (ask.kind, ask.action)
                }
                None => ("tool-approval".to_owned(), ev::action(&call)),
            };
            let request = InputRequestRecord {
                id: format!("apr_{}", ulid::Ulid::new()),
                session_id: self.session.id.clone(),
                turn_seq: turn.seq,
                step_index: step,
                call_id: call.call_id.clone(),
                tool_name: call.name.clone(),
                kind,
                prompt,
                action,
                status: RequestStatus::Pending,
                reason: None,
                created_at: now,
                answered_at: None,
                responder: None,
            };
            batch
                .push(Op::PutToolCall(call))
                .push(Op::PutInputRequest(request));
        }
        self.rt.commit(batch).await?;
        Ok(())
    }

    /// Asks the reviewer about an `approval: auto` call of `tool` with `input` (see
    /// `engine::review`), charges its tokens to the session and `turn`, and returns the verdict
    /// with its `approval.reviewed` data. The caller journals both.
    async fn review_call(
        &mut self,
        turn: &mut TurnRecord,
        call_id: &str,
        tool: &Tool,
        input: &Value,
    ) -> (review::Verdict, Value) {
        let agent = &self.build.manifest.agent;
        // The reviewer is resolved as an agent of its own named `review`, so a per-agent mock
        // script can answer reviews apart from the agent's steps (its `review` entry); a real
        // provider resolves the same model either way.
        let mut with = agent.clone();
        with.name = REVIEWER.to_owned();
        with.path = REVIEWER.to_owned();
        if let Some(id) = agent.config.review_model.as_deref() {
            with.config.model = Some(id.to_owned());
        }
        let reviewer = agent
            .config
            .review_model
            .clone()
            .unwrap_or_else(|| self.model.model_id.clone());
        let own = self.rt.inner.config.models.resolve_in(&with, &self.root);
        let model = match (&own, agent.config.review_model.is_some()) {
            (Ok(m), _) => Ok(m),
            (Err(_), false) => Ok(&self.model),
            (Err(e), true) => Err(e.to_string()),
        };
        let sandbox = match agent.effective_sandbox(tool) {
            Some(s) => format!("{}, network: {}", s.provider.as_str(), s.network.describe()),
            None => "none from eve: it runs outside the tool sandbox (an HTTP request, a \
                     built-in or an MCP server's tool)"
                .to_owned(),
        };
        let seconds = agent
            .config
            .limits
            .review_seconds
            .unwrap_or(review::DEFAULT_REVIEW_SECONDS);
        let result = match model {
            Ok(model) => {
                let subject = review::Subject {
                    tool,
                    sandbox,
                    input,
                };
                let price = (model.model_id.clone(), model.price_per_million);
                let result =
                    review::review(model, &subject, std::time::Duration::from_secs(seconds)).await;
                (result, price)
            }
            Err(e) => (
                review::Review {
                    verdict: review::Verdict::Failed(format!(
                        "the review model `{reviewer}` cannot be used: {e}"
                    )),
                    usage: Default::default(),
                },
                (String::new(), None),
            ),
        };
        let (result, (model_id, price)) = result;
        self.charge(turn, &result.usage, &model_id, price);
        let data = review::event(call_id, &tool.name, &result, &reviewer);
        (result.verdict, data)
    }

    /// Asks the reviewer about each `approval: auto` call in `reviews`. A call judged safe is
    /// journaled `reviewed` with its verdict, then joins `to_run`; any other joins `asks`, and its
    /// verdict is returned to be committed with the approval requests.
    pub(super) async fn review_calls(
        &mut self,
        turn: &mut TurnRecord,
        step: u64,
        reviews: Vec<ToolCallRecord>,
        to_run: &mut Vec<ToolCallRecord>,
        asks: &mut Vec<(ToolCallRecord, String, Option<AskAs>)>,
    ) -> RuntimeResult<Batch> {
        let mut asked = Batch::new();
        for mut call in reviews {
            let Some(resolved) = self.target(&call.name, &call.input) else {
                continue;
            };
            let input = resolved.as_called(&call).input.clone();
            let (verdict, data) = self
                .review_call(turn, &call.call_id, &resolved.policy, &input)
                .await;
            let data = ev::approval_reviewed(turn, step, data);
            if let review::Verdict::Safe(_) = verdict {
                call.approval = ApprovalState::Reviewed;
                let mut batch = Batch::new();
                batch
                    .event(self.id(), ev::APPROVAL_REVIEWED, data)
                    .push(Op::PutToolCall(call.clone()))
                    .push(Op::UpdateSession(self.session.clone()))
                    .push(Op::PutTurn(turn.clone()));
                self.rt.commit(batch).await?;
                to_run.push(call);
            } else {
                asked.event(self.id(), ev::APPROVAL_REVIEWED, data);
                asks.push((call, verdict.prompt(&resolved.policy.name), None));
            }
        }
        if !asked.is_empty() {
            asked
                .push(Op::UpdateSession(self.session.clone()))
                .push(Op::PutTurn(turn.clone()));
        }
        Ok(asked)
    }

    /// The prompt a principal is asked to approve a call of `tool` with: its `approval_prompt`
    /// with the call's input filled in as inert text (`eve_compile::prompt_template`), else
    /// `Approve <tool>?`.
    pub(super) fn approval_prompt(&self, tool: &Tool, input: &Value) -> String {
        match &tool.approval_prompt {
            Some(template)
                if self
                    .rt
                    .inner
                    .naive_prompts
                    .load(std::sync::atomic::Ordering::Relaxed) =>
            {
                naive_render(template, input)
            }
            Some(template) => eve_compile::prompt_template::render(template, input),
            None => format!("Approve {}?", tool.name),
        }
    }

    /// Whether a call of `tool` must be approved before it runs (an `auto` tool is decided by
    /// its reviewer first, in `turn::calls`).
    pub(super) fn needs_approval(&self, tool: &Tool) -> bool {
        match tool.approval {
            Approval::Never | Approval::Auto => false,
            Approval::Always => true,
            Approval::Once => !self.session.approved_tools.contains(&tool.name),
        }
    }

    /// The reason given with the denial of `call`, if any.
    pub(super) async fn denial_reason(
        &self,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Option<String>> {
        let requests = self
            .rt
            .inner
            .store
            .input_requests(&self.session.id, false)
            .await?;
        Ok(requests
            .into_iter()
            .rev()
            .find(|r| r.turn_seq == call.turn_seq && r.call_id == call.call_id)
            .and_then(|r| r.reason))
    }
}

impl Runtime {
    /// Answers an input request (the session's only pending one when `request_id` is `None`) as
    /// the [`LOCAL_PRINCIPAL`](crate::engine::LOCAL_PRINCIPAL) (the terminal, `eve sessions approve|deny`). Returns the request as
    /// answered.
    pub async fn answer_input(
        &self,
        session: &str,
        request_id: Option<&str>,
        approve: bool,
        reason: Option<String>,
    ) -> RuntimeResult<InputRequestRecord> {
        self.answer_input_as(session, request_id, approve, reason, LOCAL_PRINCIPAL)
            .await
    }

    /// Answers an input request on behalf of `principal`, the authenticated identity of whoever
    /// answered (`token:EVE_API_TOKEN`, `jwt:<sub>`, `basic:<user>`, `slack:<user id>`,
    /// `anonymous`, `local`…). The principal is stored with the answer and shown in
    /// `approval.settled` and `input.resolved` (`responderPrincipalId`).
    ///
    /// The first answer wins: the store settles the request by compare-and-set in the commit
    /// that announces it, so of answers racing (in this process or across processes and nodes)
    /// exactly one commits its `approval.settled`; every other gets
    /// [`RuntimeError::InputAlreadyAnswered`] with the answer that won.
    ///
    /// Approving a proposed change to the agent activates a release, an operator's act: here a
    /// JWT principal may not (see [`Runtime::answer_input_by`] to decide by the operators of
    /// `channels/eve.yaml`).
    pub async fn answer_input_as(
        &self,
        session: &str,
        request_id: Option<&str>,
        approve: bool,
        reason: Option<String>,
        principal: &str,
    ) -> RuntimeResult<InputRequestRecord> {
        let answer = Answer {
            approve,
            reason,
            principal,
            may_activate: !principal.starts_with("jwt:"),
            authorization: None,
            attributes: None,
        };
        self.answer_input_with(session, request_id, answer).await
    }

    /// [`Runtime::answer_input_as`] for `caller`: only an operator approves a proposed change
    /// to the agent (a tenant may deny it).
    pub(crate) async fn answer_input_by(
        &self,
        session: &str,
        request_id: Option<&str>,
        approve: bool,
        reason: Option<String>,
        caller: &crate::engine::Caller,
    ) -> RuntimeResult<InputRequestRecord> {
        let answer = Answer {
            approve,
            reason,
            principal: caller.id(),
            may_activate: caller.is_operator(),
            authorization: None,
            attributes: Some(caller.attributes()),
        };
        self.answer_input_with(session, request_id, answer).await
    }

    pub(crate) async fn answer_input_with(
        &self,
        session: &str,
        request_id: Option<&str>,
        answer: Answer<'_>,
    ) -> RuntimeResult<InputRequestRecord> {
        // Another answer to another request of the same turn may commit between this one's
        // reads and its commit (the store then refuses it as `InputsMoved`): read again, so the
        // last answer of a turn always sees its wait resolved. Each retry follows a commit that
        // settled a request, so retries are bounded by the turn's requests.
        let mut moved = 0usize;
        loop {
            let outcome = self.answer_once(session, request_id, &answer).await;
            match outcome {
                Err(RuntimeError::Store(StoreError::InputsMoved { .. })) if moved < MAX_MOVED => {
                    moved += 1;
                }
                Err(RuntimeError::Store(StoreError::AlreadyAnswered(stored))) => {
                    return Err(already_answered(*stored));
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`Runtime::answer_input_as`].
    async fn answer_once(
        &self,
        session: &str,
        request_id: Option<&str>,
        answer: &Answer<'_>,
    ) -> RuntimeResult<InputRequestRecord> {
        let Answer {
            approve,
            principal,
            may_activate,
            ..
        } = *answer;
        let reason = answer.reason.clone();
        self.require_session(session).await?;
        let pending = self.inner.store.input_requests(session, true).await?;
        // A request of a subagent's session, answered on an ancestor (the root's stream shows it).
        if let Some(answered) = self
            .answer_for_descendant(session, request_id, &pending, answer)
            .await?
        {
            return Ok(answered);
        }
        if let Some(id) = request_id
            && !pending.iter().any(|r| r.id == id)
            && let Some(stored) = self.answered_request(session, id).await?
        {
            return Err(already_answered(stored));
        }
        let mut request = match request_id {
            Some(id) => pending
                .iter()
                .find(|r| r.id == id)
                .cloned()
                .ok_or_else(|| {
                    RuntimeError::NoSuchRequest(format!(
                        "session `{session}` has no pending input request `{id}`"
                    ))
                })?,
            None => match pending.as_slice() {
                [only] => only.clone(),
                [] => {
                    return Err(RuntimeError::NoSuchRequest(format!(
                        "session `{session}` has no pending input request"
                    )));
                }
                many => {
                    let ids: Vec<&str> = many.iter().map(|r| r.id.as_str()).collect();
                    return Err(RuntimeError::NoSuchRequest(format!(
                        "session `{session}` has {} pending requests ({}); name one",
                        many.len(),
                        ids.join(", ")
                    )));
                }
            },
        };
        // Approving a change to the agent activates a release: an operator's act, as for the
        // release routes, not an API end user's (a JWT principal may still deny it).
        if approve && request.kind == crate::features::selfchange::REQUEST_KIND && !may_activate {
            return Err(RuntimeError::Release(format!(
                "approving the proposed change `{}` to the agent activates a release, an \
                 operator's act (a principal named under `operators:` in channels/eve.yaml, or \
                 the terminal), and {principal} is not one; it stays pending",
                request.action["proposal"]["id"]
                    .as_str()
                    .unwrap_or(&request.id)
            )));
        }
        // An authorization is granted by signing in, never by an answer: only the callback
        // route (which exchanged the code) settles one as authorized; a person may decline it.
        let signing_in = request.kind == crate::mcp::oauth::user::REQUEST_KIND;
        if signing_in && approve && answer.authorization != Some("authorized") {
            return Err(RuntimeError::InvalidAnswer(format!(
                "input request `{}` asks the user to sign in to `{}`: it is completed by signing \
                 in at the URL it shows, not by an answer (it may be declined)",
                request.id,
                request.action["connection"].as_str().unwrap_or_default()
            )));
        }
        request.status = if approve {
            RequestStatus::Approved
        } else {
            RequestStatus::Denied
        };
        request.reason = reason.filter(|r| !r.trim().is_empty());
        request.answered_at = Some(now_ms());
        request.responder = Some(principal.to_owned());
        // The other requests of this turn still waiting, as read: the store refuses the commit
        // if one of them was answered meanwhile (see `answer_input_as`).
        let others_pending: Vec<String> = pending
            .iter()
            .filter(|r| r.id != request.id && r.turn_seq == request.turn_seq)
            .map(|r| r.id.clone())
            .collect();
        let still_pending = !others_pending.is_empty();
        let mut batch = Batch::durable();
        if self
            .inner
            .unguarded_answers
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            batch.push(Op::PutInputRequest(request.clone()));
        } else {
            batch.push(Op::AnswerInputRequest {
                request: request.clone(),
                others_pending,
            });
        }
        let calls_now = self
            .inner
            .store
            .tool_calls(session, request.turn_seq)
            .await?;
        if let Some(mut call) = calls_now
            .iter()
            .find(|c| c.call_id == request.call_id)
            .cloned()
        {
            call.approval = match (approve, signing_in) {
                // Signed in: the call is decided again, its own approval included.
                (true, true) => ApprovalState::None,
                (true, false) => ApprovalState::Approved,
                (false, _) => ApprovalState::Denied,
            };
            batch.push(Op::PutToolCall(call));
        }
        // A question (or a session's budget) is answered, not approved: `input.resolved` alone
        // says so, as eve's.
        if signing_in {
            let outcome =
                answer
                    .authorization
                    .unwrap_or(if approve { "authorized" } else { "declined" });
            batch.event(
                session,
                ev::AUTHORIZATION_COMPLETED,
                ev::authorization_completed(&request, outcome),
            );
        } else if request.kind != crate::features::questions::QUESTION_KIND
            && request.kind != crate::features::session_limit::REQUEST_KIND
        {
            batch.event(
                session,
                ev::APPROVAL_SETTLED,
                ev::approval_settled(&request, approve, answer.attributes),
            );
            if let Some(op) = answer
                .attributes
                .and_then(|a| crate::tenancy::record_responder_attributes(&request, a))
            {
                batch.push(op);
            }
        }
        if !still_pending {
            // Resolutions of this wait: answered requests whose calls have not run yet.
            let waiting_calls: Vec<&str> = calls_now
                .iter()
                .filter(|c| !c.status.is_terminal() && c.call_id != request.call_id)
                .filter(|c| matches!(c.approval, ApprovalState::Approved | ApprovalState::Denied))
                .map(|c| c.call_id.as_str())
                .collect();
            let mut answered: Vec<InputRequestRecord> = Vec::new();
            if !waiting_calls.is_empty() {
                for r in self.inner.store.input_requests(session, false).await? {
                    if r.turn_seq == request.turn_seq
                        && waiting_calls.contains(&r.call_id.as_str())
                        && matches!(r.status, RequestStatus::Approved | RequestStatus::Denied)
                    {
                        answered.retain(|a| a.call_id != r.call_id);
                        answered.push(r);
                    }
                }
            }
            answered.push(request.clone());
            // A sign-in is announced by `authorization.completed` alone, as eve's.
            answered.retain(|r| r.kind != crate::mcp::oauth::user::REQUEST_KIND);
            if !answered.is_empty() {
                batch.event(session, ev::INPUT_RESOLVED, ev::input_resolved(&answered));
            }
        }
        self.commit(batch).await?;
        if !still_pending {
            self.kick(session);
        }
        Ok(request)
    }

    /// Tests only: `approval_prompt` templates are filled the naive way (each placeholder
    /// replaced by the raw value, again until none is left), so a test can show what inert
    /// rendering stops.
    #[doc(hidden)]
    pub fn set_naive_prompts_for_tests(&self, on: bool) {
        self.inner
            .naive_prompts
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Tests only: answers overwrite an input request whatever its state, as before the store
    /// settled them by compare-and-set, so a test can show racing answers all counting.
    #[doc(hidden)]
    pub fn set_unguarded_answers_for_tests(&self, on: bool) {
        self.inner
            .unguarded_answers
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The request `id` of `session` or of a session below it, when it is no longer pending
    /// (answered, or withdrawn): what an answer to it that came too late is told.
    pub(crate) async fn answered_request(
        &self,
        session: &str,
        id: &str,
    ) -> RuntimeResult<Option<InputRequestRecord>> {
        let Some(stored) = self.inner.store.input_request(id).await? else {
            return Ok(None);
        };
        if stored.status == RequestStatus::Pending {
            return Ok(None);
        }
        // Up the parents of the request's session, to `session` (subagents nest a few deep).
        let mut at = Some(stored.session_id.clone());
        for _ in 0..MAX_DEPTH {
            match at {
                Some(s) if s == session => return Ok(Some(stored)),
                Some(s) => {
                    at = self
                        .inner
                        .store
                        .session(&s)
                        .await?
                        .and_then(|r| r.parent_id);
                }
                None => break,
            }
        }
        Ok(None)
    }
}

/// One answer to an input request, as given.
pub(crate) struct Answer<'a> {
    /// Approve, or deny.
    pub(crate) approve: bool,
    /// The reason given with it.
    pub(crate) reason: Option<String>,
    /// Who answered (recorded with it).
    pub(crate) principal: &'a str,
    /// Whether it may approve a proposed change to the agent (an operator's act).
    pub(crate) may_activate: bool,
    /// The outcome of a completed sign-in (`authorized`, `declined`, `failed`): only the
    /// callback route settles an authorization request as authorized.
    pub(crate) authorization: Option<&'a str>,
    /// The attributes of who answered (the claims its JWT method names), recorded with the
    /// answer (`approval.settled` `responderAttributes`, and the session's principal notes).
    pub(crate) attributes: Option<&'a serde_json::Map<String, Value>>,
}

/// Retries of an answer whose turn's other requests were answered meanwhile.
const MAX_MOVED: usize = 64;
/// Deepest subagent nesting looked through for a request answered below a session.
const MAX_DEPTH: usize = 64;

impl RuntimeError {
    /// The error for an answer to `stored`, a request no longer pending: answered first by
    /// someone else ([`RuntimeError::InputAlreadyAnswered`], with the answer that won), or
    /// withdrawn (its turn was cancelled).
    pub(crate) fn from_settled(stored: InputRequestRecord) -> Self {
        if stored.status == RequestStatus::Cancelled {
            return Self::NoSuchRequest(format!(
                "input request `{}` was withdrawn (its turn was cancelled or reset)",
                stored.id
            ));
        }
        Self::InputAlreadyAnswered(Box::new(stored))
    }
}

fn already_answered(stored: InputRequestRecord) -> RuntimeError {
    RuntimeError::from_settled(stored)
}

/// A template filled the naive way (raw values, replaced until no placeholder is left): what
/// [`Runtime::set_naive_prompts_for_tests`] switches to.
fn naive_render(template: &str, input: &Value) -> String {
    let mut out = template.to_owned();
    for _ in 0..8 {
        let Some(start) = out.find("{{input.") else {
            break;
        };
        let Some(len) = out[start..].find("}}") else {
            break;
        };
        let field = out[start + 8..start + len].trim().to_owned();
        let value = match &input[field.as_str()] {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        out.replace_range(start..start + len + 2, &value);
    }
    out
}
