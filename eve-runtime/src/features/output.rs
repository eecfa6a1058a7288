//! Structured output: a turn whose message carried an `outputSchema` ends with a result that
//! satisfies it, streamed as `result.completed {result}`, or fails with
//! `output_schema_not_fulfilled`.
//!
//! Every step of the turn asks for it: the schema goes into the system prompt, and into the
//! request as [`ModelRequest::output_schema`], which a provider with a structured-output mode
//! sends as that mode (OpenAI-compatible servers get `response_format: json_schema`; Anthropic has
//! none the runtime uses, so the prompt and the checks below carry it there). The model keeps its
//! tools: only its final answer must be the JSON value. That answer is parsed (a Markdown code
//! fence around it is tolerated) and validated with `jsonschema`; an answer that fails goes back
//! to the model with the validation errors, at most [`MAX_REPAIRS`] times in a turn, counted from
//! the turn's journal so a turn resumed elsewhere keeps the count.

use async_trait::async_trait;
use serde_json::Value;

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{AnswerVerdict, Shaped, TurnExtension, TurnView};
use crate::events as ev;
use crate::model::ModelRequest;
use crate::store::Batch;

/// How many times one turn's answer may go back to the model for not matching its schema.
pub(crate) const MAX_REPAIRS: usize = 2;

/// The code of a turn whose answer never matched its schema.
pub(crate) const NOT_FULFILLED: &str = "output_schema_not_fulfilled";

/// The structured-output feature of one turn.
pub(crate) struct StructuredOutput {
    schema: Value,
    validator: Option<jsonschema::Validator>,
}

impl StructuredOutput {
    /// For a turn asked for `schema` (checked when it was accepted).
    pub(crate) fn new(schema: Value) -> Self {
        let validator = jsonschema::validator_for(&schema).ok();
        Self { schema, validator }
    }

    /// The answer as a JSON value that satisfies the schema, or what is wrong with it.
    fn check(&self, answer: &str) -> Result<Value, Vec<String>> {
        let text = unfence(answer.trim());
        let value: Value = serde_json::from_str(text).map_err(|e| {
            vec![format!(
                "the answer is not a JSON value ({e}); reply with the JSON value only"
            )]
        })?;
        let Some(validator) = &self.validator else {
            return Err(vec!["the output schema does not compile".to_owned()]);
        };
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .take(20)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    format!("(root): {e}")
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(errors)
        }
    }
}

/// The text inside a Markdown code fence, when the whole answer is one.
fn unfence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // The fence's language tag (`json`), up to the first line break.
    match body.split_once('\n') {
        Some((tag, inner)) if !tag.contains(['{', '[', '"']) => inner.trim(),
        _ => body.trim(),
    }
}

#[async_trait]
impl TurnExtension for StructuredOutput {
    fn name(&self) -> &'static str {
        "output"
    }

    async fn shape_request(
        &mut self,
        _view: &TurnView<'_>,
        request: &mut ModelRequest,
        _writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        request.system.push_str(&format!(
            "\n\nYour final answer in this turn must be one JSON value that matches this JSON \
             Schema, and nothing else (no prose, no code fence). Use your tools first if you \
             need them.\n{}",
            self.schema
        ));
        request.output_schema = Some(self.schema.clone());
        Ok(Shaped::Call)
    }

    async fn final_answer(
        &mut self,
        view: &TurnView<'_>,
        answer: &str,
    ) -> RuntimeResult<AnswerVerdict> {
        let errors = match self.check(answer) {
            Ok(result) => {
                let data = ev::result_completed(view.turn, view.turn.step_index, &result);
                return Ok(AnswerVerdict::Accept(vec![(ev::RESULT_COMPLETED, data)]));
            }
            Err(errors) => errors,
        };
        // Every earlier final answer of this turn was sent back (else the turn would have
        // ended): the journal counts the repairs, here or in the process that ran them.
        let steps = view.rt.inner.store.steps(view.id(), view.turn.seq).await?;
        let repairs = steps
            .iter()
            .filter(|s| s.step_index < view.turn.step_index)
            .filter(|s| {
                s.response["tool_calls"]
                    .as_array()
                    .is_none_or(|calls| calls.is_empty())
            })
            .count();
        let listed = errors
            .iter()
            .map(|e| format!("- {e}"))
            .collect::<Vec<_>>()
            .join("\n");
        if repairs >= MAX_REPAIRS {
            return Ok(AnswerVerdict::Fail(
                NOT_FULFILLED,
                format!(
                    "The agent could not produce a result matching the requested schema \
                     ({} attempts); the last answer:\n{listed}",
                    repairs + 1
                ),
            ));
        }
        Ok(AnswerVerdict::SendBack {
            message: format!(
                "Your answer does not match the required output schema:\n{listed}\nReply again \
                 with only one JSON value that matches the schema."
            ),
            events: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn feature() -> StructuredOutput {
        StructuredOutput::new(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
            "required": ["city", "temp"],
            "additionalProperties": false,
        }))
    }

    #[test]
    fn takes_a_valid_answer_fenced_or_not() {
        let f = feature();
        let want = json!({"city": "Paris", "temp": 21});
        assert_eq!(
            f.check(r#"{"city": "Paris", "temp": 21}"#),
            Ok(want.clone())
        );
        assert_eq!(
            f.check("```json\n{\"city\": \"Paris\", \"temp\": 21}\n```"),
            Ok(want)
        );
    }

    #[test]
    fn names_what_is_wrong() {
        let f = feature();
        let errors = f.check(r#"{"city": 3}"#).unwrap_err();
        assert!(errors.iter().any(|e| e.starts_with("/city:")), "{errors:?}");
        assert!(errors.iter().any(|e| e.contains("temp")), "{errors:?}");
        let errors = f.check("It is sunny.").unwrap_err();
        assert!(errors[0].contains("not a JSON value"), "{errors:?}");
    }
}
