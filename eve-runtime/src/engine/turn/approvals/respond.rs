//! Answers as people give them: eve's `InputResponse` (`{requestId, optionId?, text?}`) checked
//! against the request it answers, and a plain message that answers the pending requests it
//! matches, as eve's channels resolve text (an option's id, then its label, case-insensitive and
//! trimmed, then its 1-based number, then free text where the request takes it).
//!
//! Both end in the one answer path ([`Runtime::answer_input_with`]): the first answer wins, the
//! principal is recorded, the parked turn resumes.

use super::Answer;
use crate::engine::{Caller, Runtime, RuntimeError, RuntimeResult};
use crate::features::questions::QUESTION_KIND;
use crate::store::InputRequestRecord;

/// The kind of a tool's approval request.
const TOOL_APPROVAL: &str = "tool-approval";

/// One answer to one request, as a client sends it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputAnswer {
    /// The option chosen: `approve` or `cancel` for an approval, an option's id for a question.
    pub option_id: Option<String>,
    /// Free text: the reason given with an approval's answer, or a question's answer in the
    /// user's words.
    pub text: Option<String>,
}

/// One option of a request: its id and label.
struct Choice {
    id: String,
    label: String,
}

/// The options `request` offers, and whether it takes free text.
fn choices(request: &InputRequestRecord) -> (Vec<Choice>, bool) {
    if request.kind == QUESTION_KIND {
        let question = &request.action["question"];
        let options: Vec<Choice> = question["options"]
            .as_array()
            .map(|o| {
                o.iter()
                    .map(|o| Choice {
                        id: o["id"].as_str().unwrap_or_default().to_owned(),
                        label: o["label"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let free = question["allowFreeform"].as_bool().unwrap_or(true) || options.is_empty();
        return (options, free);
    }
    let options = [("approve", "Approve"), ("cancel", "Cancel")]
        .into_iter()
        .map(|(id, label)| Choice {
            id: id.to_owned(),
            label: label.to_owned(),
        })
        .collect();
    (options, false)
}

/// What `answer` means for `request`: approve (a question's answer counts as approved) and the
/// text kept with it (a question's answer: the option's id or the user's words).
pub(crate) fn interpret(
    request: &InputRequestRecord,
    answer: &InputAnswer,
) -> RuntimeResult<(bool, Option<String>)> {
    let (options, free) = choices(request);
    let text = answer
        .text
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    if request.kind != QUESTION_KIND {
        return match answer.option_id.as_deref() {
            Some("approve") => Ok((true, text.map(str::to_owned))),
            Some("cancel") => Ok((false, text.map(str::to_owned))),
            _ => Err(RuntimeError::InvalidAnswer(format!(
                "request `{}` is an approval: answer it with `optionId` \"approve\" or \"cancel\"",
                request.id
            ))),
        };
    }
    if let Some(id) = answer.option_id.as_deref() {
        return match options.iter().find(|o| o.id == id) {
            Some(option) => Ok((true, Some(option.id.clone()))),
            None => Err(RuntimeError::InvalidAnswer(format!(
                "request `{}` has no option `{id}`; its options are {}",
                request.id,
                listed(&options)
            ))),
        };
    }
    match text {
        Some(text) if free => Ok((true, Some(text.to_owned()))),
        Some(_) => Err(RuntimeError::InvalidAnswer(format!(
            "request `{}` takes one of its options ({}), not free text",
            request.id,
            listed(&options)
        ))),
        None => Err(RuntimeError::InvalidAnswer(format!(
            "an answer to request `{}` needs `optionId` or `text`",
            request.id
        ))),
    }
}

fn listed(options: &[Choice]) -> String {
    if options.is_empty() {
        return "none".to_owned();
    }
    options
        .iter()
        .map(|o| format!("`{}`", o.id))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The answer `text` gives `request`, when it gives one (eve's `resolveTextToResponse`).
pub fn resolve_text(text: &str, request: &InputRequestRecord) -> Option<InputAnswer> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return None;
    }
    let lower = trimmed.to_lowercase();
    let (options, free) = choices(request);
    let chosen = options
        .iter()
        .find(|o| o.id.to_lowercase() == lower)
        .or_else(|| options.iter().find(|o| o.label.to_lowercase() == lower))
        .or_else(|| {
            lower
                .parse::<usize>()
                .ok()
                .filter(|n| *n >= 1)
                .and_then(|n| options.get(n - 1))
        });
    if let Some(option) = chosen {
        return Some(InputAnswer {
            option_id: Some(option.id.clone()),
            text: None,
        });
    }
    free.then(|| InputAnswer {
        option_id: None,
        text: Some(trimmed.to_owned()),
    })
}

/// Whether a plain message may answer a request of `kind`: approvals of tools and questions (a
/// proposed change to the agent is answered explicitly).
fn answerable_by_text(kind: &str) -> bool {
    kind == TOOL_APPROVAL || kind == QUESTION_KIND
}

impl Runtime {
    /// Answers request `request_id` of `session` (or of a session below it) with `answer`, as
    /// `caller`. A bad answer (an option the request does not have, text where it takes none) is
    /// [`RuntimeError::InvalidAnswer`] and leaves the request pending.
    pub async fn respond_input_by(
        &self,
        session: &str,
        request_id: &str,
        answer: &InputAnswer,
        caller: &Caller,
    ) -> RuntimeResult<InputRequestRecord> {
        let request = self
            .pending_inputs(session)
            .await?
            .into_iter()
            .find(|r| r.id == request_id);
        let (approve, reason) = match &request {
            Some(request) => interpret(request, answer)?,
            // Not pending: the answer path says why (answered first, withdrawn, unknown).
            None => (answer.option_id.as_deref() != Some("cancel"), None),
        };
        let answer = Answer {
            approve,
            reason,
            principal: caller.id(),
            may_activate: caller.is_operator(),
            authorization: None,
        };
        self.answer_input_with(session, Some(request_id), answer)
            .await
    }

    /// A plain message sent to `session` by `caller`: when it answers pending requests (an
    /// approval's option by id, label or number; a question's option, or its free text), they
    /// are answered with it and the requests are returned; otherwise nothing happens and the
    /// list is empty (the message is an ordinary message).
    pub async fn answer_by_text(
        &self,
        session: &str,
        text: &str,
        caller: &Caller,
    ) -> RuntimeResult<Vec<InputRequestRecord>> {
        let pending = self.pending_inputs(session).await?;
        let matched: Vec<(String, InputAnswer)> = pending
            .iter()
            .filter(|r| answerable_by_text(&r.kind))
            .filter_map(|r| resolve_text(text, r).map(|a| (r.id.clone(), a)))
            .collect();
        let mut answered = Vec::with_capacity(matched.len());
        for (id, answer) in matched {
            answered.push(self.respond_input_by(session, &id, &answer, caller).await?);
        }
        Ok(answered)
    }
}

/// The option ids a question stored with its request offers (for tests and clients).
pub fn option_ids(request: &InputRequestRecord) -> Vec<String> {
    choices(request).0.into_iter().map(|c| c.id).collect()
}
