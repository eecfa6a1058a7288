//! Tool stubs: fixed results for named tools, set when a session is created (`stubs`, eve's
//! `ToolStub`), for that session and its subagents. Only operators and eval runs may set them
//! (the HTTP route refuses anyone else with `403 stubs_forbidden`): a stub replaces what a tool
//! does, which is the operator's decision, never a stranger's.
//!
//! A rule names a tool (`get_weather` for the root agent, `researcher/get_weather` for a
//! subagent's), may `match` input properties with JSON Schemas (each named property must exist
//! and satisfy its schema), and gives one `outcome` or a list of `outcomes` used in turn (the last
//! repeats): `{"response": …}` settles the call with that result, `{"throw": {"message", "name"?}}`
//! fails it. A call no rule matches runs the real tool. The rules are kept with the root session
//! (a note under `stubs:<root>`), and so is how far each rule's list went, so a session resumed
//! elsewhere answers the same way.

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::engine::turn::seam::{Handled, TurnExtension, TurnView};
use crate::engine::{RuntimeError, RuntimeResult};
use crate::store::{Batch, CallStatus, NoteOp, NoteRecord, Op, ToolCallRecord, now_ms};

/// The most rules one session may have (eve's limit).
pub(crate) const MAX_RULES: usize = 100;

/// The namespace of the stubs of the session tree rooted at `root`.
pub(crate) fn namespace(root: &str) -> String {
    format!("stubs:{root}")
}

/// The key of the rules in [`namespace`] (a rule's position is under `position:<id>`).
const RULES: &str = "rules";

/// Checks `stubs` as a request body sends them (an array of eve's `ToolStub`): a clear message
/// for the first thing wrong.
pub(crate) fn check(stubs: &Value) -> Result<(), String> {
    let Some(rules) = stubs.as_array() else {
        return Err("`stubs` must be an array of tool stubs.".to_owned());
    };
    if rules.len() > MAX_RULES {
        return Err(format!("`stubs` has more than {MAX_RULES} rules."));
    }
    let mut ids = std::collections::HashSet::new();
    for (i, rule) in rules.iter().enumerate() {
        let at = |what: &str| format!("`stubs[{i}]`: {what}");
        let Some(obj) = rule.as_object() else {
            return Err(at("must be an object"));
        };
        let id = obj.get("id").and_then(Value::as_str).unwrap_or_default();
        if id.is_empty() {
            return Err(at("`id` must be a non-empty string"));
        }
        if !ids.insert(id.to_owned()) {
            return Err(format!("Duplicate tool stub id \"{id}\"."));
        }
        let tool = obj.get("tool").and_then(Value::as_str).unwrap_or_default();
        if tool.is_empty() || tool.split('/').any(str::is_empty) {
            return Err(at("`tool` must name a tool (`name`, or `subagent/name`)"));
        }
        if let Some(matches) = obj.get("match") {
            let Some(matches) = matches.as_object() else {
                return Err(at("`match` must map input properties to JSON Schemas"));
            };
            for (property, schema) in matches {
                if !(schema.is_boolean() || schema.is_object())
                    || jsonschema::validator_for(schema).is_err()
                {
                    return Err(at(&format!(
                        "`match.{property}` is not a valid JSON Schema"
                    )));
                }
            }
        }
        let outcomes = match (obj.get("outcome"), obj.get("outcomes")) {
            (Some(one), None) => vec![one],
            (None, Some(Value::Array(many))) if !many.is_empty() => many.iter().collect(),
            _ => {
                return Err(at(
                    "give exactly one of `outcome` or a non-empty `outcomes`",
                ));
            }
        };
        for outcome in outcomes {
            let ok = match outcome.as_object() {
                Some(o) if o.len() == 1 && o.contains_key("response") => true,
                Some(o) if o.len() == 1 => o
                    .get("throw")
                    .and_then(|t| t.get("message"))
                    .is_some_and(Value::is_string),
                _ => false,
            };
            if !ok {
                return Err(at(
                    "an outcome is `{\"response\": …}` or `{\"throw\": {\"message\": …}}`",
                ));
            }
        }
    }
    Ok(())
}

/// The write that keeps `stubs` (checked by [`check`]) with the new root session `root`.
pub(crate) fn keep(root: &str, stubs: &Value) -> Op {
    let now = now_ms();
    Op::Note(NoteOp::Put(NoteRecord {
        namespace: namespace(root),
        key: RULES.to_owned(),
        text: stubs.to_string(),
        created_at: now,
        updated_at: now,
    }))
}

/// The tool stubs of a turn: loaded on the turn's first call.
#[derive(Default)]
pub(crate) struct Stubs {
    loaded: Option<Loaded>,
}

struct Loaded {
    rules: Vec<Value>,
    /// How far each rule's `outcomes` went.
    positions: HashMap<String, u64>,
    /// The agent path of this session (`""` for the root agent).
    path: String,
}

impl Stubs {
    async fn load(&mut self, view: &TurnView<'_>) -> RuntimeResult<&Loaded> {
        if self.loaded.is_none() {
            let notes = view.rt.inner.store.notes(&namespace(view.root)).await?;
            let mut rules = Vec::new();
            let mut positions = HashMap::new();
            for note in notes {
                if note.key == RULES {
                    rules = serde_json::from_str::<Vec<Value>>(&note.text).map_err(|e| {
                        RuntimeError::Other(format!("the session's tool stubs do not read: {e}"))
                    })?;
                } else if let Some(id) = note.key.strip_prefix("position:") {
                    positions.insert(id.to_owned(), note.text.parse().unwrap_or(0));
                }
            }
            let path = if rules.is_empty() || view.session.parent_id.is_none() {
                String::new()
            } else {
                view.rt.agent_path(view.session).await?
            };
            self.loaded = Some(Loaded {
                rules,
                positions,
                path,
            });
        }
        Ok(self.loaded.get_or_insert_with(|| Loaded {
            rules: Vec::new(),
            positions: HashMap::new(),
            path: String::new(),
        }))
    }
}

/// Whether `rule` answers a call of `tool` with `input`.
fn matches(rule: &Value, tool: &str, input: &Value) -> bool {
    if rule["tool"].as_str() != Some(tool) {
        return false;
    }
    let Some(constraints) = rule.get("match").and_then(Value::as_object) else {
        return true;
    };
    constraints.iter().all(|(property, schema)| {
        input
            .get(property)
            .is_some_and(|value| jsonschema::validator_for(schema).is_ok_and(|v| v.is_valid(value)))
    })
}

#[async_trait]
impl TurnExtension for Stubs {
    fn name(&self) -> &'static str {
        "stubs"
    }

    async fn answer_call(
        &mut self,
        view: &TurnView<'_>,
        call: &ToolCallRecord,
    ) -> RuntimeResult<Option<Handled>> {
        if call.kind == "load-skill" {
            return Ok(None);
        }
        let root = view.root.to_owned();
        let loaded = self.load(view).await?;
        if loaded.rules.is_empty() {
            return Ok(None);
        }
        let tool = if loaded.path.is_empty() {
            call.name.clone()
        } else {
            format!("{}/{}", loaded.path, call.name)
        };
        let Some(rule) = loaded
            .rules
            .iter()
            .find(|r| matches(r, &tool, &call.input))
            .cloned()
        else {
            return Ok(None);
        };
        let id = rule["id"].as_str().unwrap_or_default().to_owned();
        let outcomes: Vec<Value> = match rule.get("outcomes").and_then(Value::as_array) {
            Some(list) => list.clone(),
            None => vec![rule["outcome"].clone()],
        };
        let position = loaded.positions.get(&id).copied().unwrap_or(0);
        let index = usize::try_from(position)
            .unwrap_or(usize::MAX)
            .min(outcomes.len().saturating_sub(1));
        let outcome = &outcomes[index];
        let mut writes = Batch::new();
        let now = now_ms();
        writes.push(Op::Note(NoteOp::Put(NoteRecord {
            namespace: namespace(&root),
            key: format!("position:{id}"),
            text: (position + 1).to_string(),
            created_at: now,
            updated_at: now,
        })));
        if let Some(loaded) = self.loaded.as_mut() {
            loaded.positions.insert(id, position + 1);
        }
        let (status, output) = match outcome.get("throw") {
            Some(thrown) => {
                let name = thrown["name"].as_str().unwrap_or("Error");
                let message = thrown["message"].as_str().unwrap_or_default();
                (CallStatus::Failed, json!(format!("{name}: {message}")))
            }
            None => (CallStatus::Completed, outcome["response"].clone()),
        };
        Ok(Some(Handled::Settle {
            status,
            output,
            writes,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_rules_as_eve_does() {
        let good = json!([
            {"id": "a", "tool": "get_weather", "outcome": {"response": {"sky": "grey"}}},
            {"id": "b", "tool": "researcher/search", "match": {"q": {"type": "string"}},
             "outcomes": [{"response": 1}, {"throw": {"message": "down"}}]},
        ]);
        assert_eq!(check(&good), Ok(()));
        for bad in [
            json!({}),
            json!([{"tool": "x", "outcome": {"response": 1}}]),
            json!([{"id": "a", "tool": "x"}]),
            json!([{"id": "a", "tool": "x", "outcome": {"response": 1}},
                   {"id": "a", "tool": "y", "outcome": {"response": 1}}]),
            json!([{"id": "a", "tool": "x", "outcome": {"oops": 1}}]),
            json!([{"id": "a", "tool": "x", "match": {"q": 3}, "outcome": {"response": 1}}]),
        ] {
            assert!(check(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_rule_matches_its_tool_and_its_input() {
        let rule = json!({"id": "a", "tool": "t", "match": {"city": {"const": "Paris"}},
                          "outcome": {"response": 1}});
        assert!(matches(&rule, "t", &json!({"city": "Paris"})));
        assert!(!matches(&rule, "t", &json!({"city": "Rome"})));
        assert!(!matches(&rule, "t", &json!({})));
        assert!(!matches(&rule, "u", &json!({"city": "Paris"})));
    }
}
