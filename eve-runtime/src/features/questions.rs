//! Questions to the user and turns that end without a reply: the built-in `ask_question`
//! (`ask_question: true` in `agent.yaml`) and `no_reply` (`no_reply: true`), and the model-facing
//! note of a tool that ends the turn (`ends_turn: true`).
//!
//! `ask_question` parks the turn on a durable input request of kind `question` (eve's shape: the
//! prompt, the options, free text allowed), through the same path as approvals, so a parked
//! question survives a restart like an approval does. An answer (`inputResponses` with an
//! option's id or text, or a plain message that matches an option's id or label:
//! `engine::turn::approvals::respond`) settles the request; the call then settles with eve's
//! result, `{"answer": <the option's label or the user's words>, "status": "answered"}`.
//!
//! `no_reply` settles at once with eve's text and, like every tool with `ends_turn`, ends the turn
//! when it succeeds (the core's check after a step's calls settle).

use async_trait::async_trait;
use eve_compile::{Agent, Approval, Effect, Tool};
use serde_json::{Value, json};

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{AskAs, Builtin, Handled, TurnExtension, TurnView};
use crate::model::ToolSpec;
use crate::store::{ApprovalState, Batch, CallStatus, ToolCallRecord};

/// The built-in that asks the user a question.
pub(crate) const ASK_QUESTION: &str = "ask_question";
/// The built-in that ends the turn without a reply.
pub(crate) const NO_REPLY: &str = "no_reply";
/// The kind of input request a question parks on.
pub(crate) const QUESTION_KIND: &str = "question";

/// The note eve adds to the description of a tool that ends the turn.
pub(crate) const ENDS_TURN_NOTE: &str = "Calling this tool ends your turn once it succeeds: do not write \
     a reply or call other tools in the same step. If it fails, you will see the error and can \
     continue.";

const ASK_DESCRIPTION: &str = "Ask the user a question and wait for the answer. Use this only \
     when you cannot make good progress without the user's input: to choose between materially \
     different approaches, fill in a missing requirement, or confirm something risky or \
     irreversible. Do not ask for information you can find with your other tools, and do not ask \
     the user to confirm routine steps.\n\nUsage:\n- Ask one focused question that includes the \
     context needed to answer it.\n- For a decision, offer 2-3 mutually exclusive options. Put \
     the option you recommend first and end its label with \"(Recommended)\".\n- Do not add an \
     \"Other\" option; the user can always type their own answer.\n- The result's `answer` is the \
     chosen option's label or the user's own words.";

const NO_REPLY_DESCRIPTION: &str = "End your turn without sending a reply. Use this when nothing \
     needs to be said, such as when a scheduled check finds nothing to report or an action you \
     already took is the whole answer.";

/// A tool's description as the model is offered it: with eve's note when it ends the turn.
pub(crate) fn described(tool: &Tool) -> String {
    if tool.ends_turn {
        format!("{}\n\n{ENDS_TURN_NOTE}", tool.description)
            .trim_start()
            .to_owned()
    } else {
        tool.description.clone()
    }
}

fn ask_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "question": {
                "type": "string", "minLength": 1, "maxLength": 2000,
                "description": "The question to show the user, with the context needed to answer it."
            },
            "options": {
                "type": "array", "minItems": 2, "maxItems": 3,
                "description": "Two or three mutually exclusive choices, recommended option \
                                first. Omit for an open-ended question. Never include an \
                                \"Other\" option.",
                "items": {
                    "type": "object",
                    "properties": {
                        "label": {"type": "string", "minLength": 1, "maxLength": 80,
                                  "description": "User-facing label, 1-5 words."},
                        "description": {"type": "string", "minLength": 1, "maxLength": 200,
                                        "description": "One short sentence on the impact or \
                                                        tradeoff of choosing this option."}
                    },
                    "required": ["label"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["question"],
        "additionalProperties": false
    })
}

fn no_reply_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "reason": {"type": "string", "description": "Why no reply is needed. Kept in the \
                       session history; never sent."}
        },
        "additionalProperties": false
    })
}

/// Whether the agent has built-in `name` (opted in, and no authored tool of that name replaces
/// it).
fn offers(agent: &Agent, tools: &[Tool], name: &str) -> bool {
    let on = match name {
        ASK_QUESTION => agent.config.ask_question,
        NO_REPLY => agent.config.no_reply,
        _ => false,
    };
    on && !tools.iter().any(|t| t.name == name)
}

/// The specs of the built-ins `agent` opted in to (`tools`: the build's own, which replace them).
pub(crate) fn specs(agent: &Agent, tools: &[Tool]) -> Vec<ToolSpec> {
    let mut specs = Vec::new();
    if offers(agent, tools, ASK_QUESTION) {
        specs.push(ToolSpec {
            name: ASK_QUESTION.to_owned(),
            description: ASK_DESCRIPTION.to_owned(),
            input_schema: ask_schema(),
        });
    }
    if offers(agent, tools, NO_REPLY) {
        specs.push(ToolSpec {
            name: NO_REPLY.to_owned(),
            description: described(&no_reply_policy()),
            input_schema: no_reply_schema(),
        });
    }
    specs
}

fn ask_policy() -> Tool {
    crate::features::subagents::synthetic_tool(
        ASK_QUESTION,
        ASK_DESCRIPTION,
        ask_schema(),
        Approval::Never,
        Effect::Read,
    )
}

fn no_reply_policy() -> Tool {
    let mut tool = crate::features::subagents::synthetic_tool(
        NO_REPLY,
        NO_REPLY_DESCRIPTION,
        no_reply_schema(),
        Approval::Never,
        Effect::Read,
    );
    tool.ends_turn = true;
    tool
}

/// Whether a turn on `agent` needs this feature.
pub(crate) fn enabled(agent: &Agent) -> bool {
    agent.config.ask_question || agent.config.no_reply
}

/// The question a call of `ask_question` asks, as stored with its request (`action.question`)
/// and shown in `input.requested`: options whose id is their label (as eve's), free text always
/// allowed.
pub(crate) fn question_of(input: &Value) -> Value {
    let options: Option<Vec<Value>> = input["options"].as_array().map(|options| {
        options
            .iter()
            .map(|o| {
                let label = o["label"].as_str().unwrap_or_default();
                let mut option = json!({"id": label, "label": label});
                if let Some(d) = o["description"].as_str() {
                    option["description"] = json!(d);
                }
                option
            })
            .collect()
    });
    let mut question = json!({
        "allowFreeform": true,
        "display": if options.is_some() { "select" } else { "text" },
    });
    if let Some(options) = options {
        question["options"] = Value::Array(options);
    }
    question
}

/// Questions and `no_reply` as a feature of the turn.
pub(crate) struct Questions;

#[async_trait]
impl TurnExtension for Questions {
    fn name(&self) -> &'static str {
        "questions"
    }

    fn builtins(&self, view: &TurnView<'_>) -> Vec<Builtin> {
        let agent = &view.build.manifest.agent;
        let tools = &view.build.tools;
        let mut out = Vec::new();
        if offers(agent, tools, ASK_QUESTION) {
            out.push(Builtin {
                name: ASK_QUESTION.to_owned(),
                policy: Some(ask_policy()),
            });
        }
        if offers(agent, tools, NO_REPLY) {
            out.push(Builtin {
                name: NO_REPLY.to_owned(),
                policy: Some(no_reply_policy()),
            });
        }
        out
    }

    async fn call_builtin(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Handled> {
        if let Err(errors) = view.validate_input(&call.name, &call.input) {
            return Ok(Handled::settle(
                CallStatus::Failed,
                json!(format!(
                    "Invalid input for `{}`; nothing was asked:\n{}",
                    call.name,
                    errors
                        .iter()
                        .map(|e| format!("- {e}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )),
            ));
        }
        if call.name == NO_REPLY {
            return Ok(Handled::settle(
                CallStatus::Completed,
                json!("No reply was sent."),
            ));
        }
        match call.approval {
            ApprovalState::Pending => Ok(Handled::Wait),
            ApprovalState::Approved | ApprovalState::Denied => {
                let request = crate::features::selfchange::change_request(view, call).await?;
                let answer = request.as_ref().and_then(|r| r.reason.clone());
                Ok(match (call.approval == ApprovalState::Approved, answer) {
                    (true, Some(answer)) => Handled::settle(
                        CallStatus::Completed,
                        json!({"answer": answer, "status": "answered"}),
                    ),
                    _ => Handled::settle(CallStatus::Completed, json!({"status": "declined"})),
                })
            }
            _ => {
                let labels: Vec<&str> = call.input["options"]
                    .as_array()
                    .map(|o| o.iter().filter_map(|o| o["label"].as_str()).collect())
                    .unwrap_or_default();
                let mut unique = labels.clone();
                unique.sort_unstable();
                unique.dedup();
                if unique.len() != labels.len() {
                    return Ok(Handled::settle(
                        CallStatus::Failed,
                        json!(
                            "Invalid input for `ask_question`; nothing was asked: option labels must be unique."
                        ),
                    ));
                }
                let prompt = call.input["question"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let mut action = crate::engine::events::action(call);
                action["question"] = question_of(&call.input);
                Ok(Handled::Ask {
                    prompt,
                    request: Some(AskAs {
                        kind: QUESTION_KIND.to_owned(),
                        action,
                        writes: Batch::new(),
                    }),
                })
            }
        }
    }
}
