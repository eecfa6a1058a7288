//! Memory: durable notes the agent writes itself with the built-in `memory` tool, pinned into
//! every later system prompt, and the environment probe's text beside them.
//!
//! `memory:` in `agent.yaml` turns it on and names the scopes the agent may use:
//! - `agent`: every session of this agent (`memory:agent:<agent>`);
//! - `user`: every session of this agent with the same user, the principal or channel identity
//!   that sent the turn's message (`memory:user:<agent>:<user>`); a message with no known sender
//!   (an unauthenticated API) has no user scope;
//! - `session`: this session only (`memory:session:<session>`).
//!
//! Notes live in the store ([`crate::store::NoteRecord`]), written in the same commit as the
//! call's result and a `memory.written` event, and are redacted like everything else stored. Each
//! scope keeps at most `max_chars` characters: past that the oldest notes are trimmed, and a
//! `memory.trimmed` event names them. The pinned block is rebuilt from the store at each turn (and
//! after each write), so a note written in one session is in the next session's prompt, and
//! survives restarts. Who sent a message is kept beside it at accept time (`sender:<session>`,
//! keyed by the inbox id), so a resumed turn sees the same user's notes.

mod turn;

pub(crate) use turn::MemoryFeature;

use eve_compile::{Memory, MemoryScope};
use serde_json::{Value, json};

use crate::model::ToolSpec;
use crate::store::{Batch, NoteOp, NoteRecord, Op};

/// The built-in tool's name.
pub(crate) const MEMORY_TOOL: &str = "memory";

/// Event: a note was added, replaced or removed.
pub(crate) const MEMORY_WRITTEN: &str = "memory.written";
/// Event: a scope was over its cap and its oldest notes were removed.
pub(crate) const MEMORY_TRIMMED: &str = "memory.trimmed";
/// Event: the context is near its window; this step asks the model to save what matters first.
pub(crate) const MEMORY_SAVE_OFFERED: &str = "memory.save_offered";

/// Namespace of the senders of a session's messages (key: the inbox id).
pub(crate) fn sender_namespace(session: &str) -> String {
    format!("sender:{session}")
}

/// The namespace of `scope`'s notes for agent `agent` in `session`, sent by `user`; `None` for the
/// user scope when the sender is not known.
pub(crate) fn namespace(
    scope: MemoryScope,
    agent: &str,
    session: &str,
    user: Option<&str>,
) -> Option<String> {
    match scope {
        MemoryScope::Agent => Some(format!("memory:agent:{agent}")),
        MemoryScope::User => user.map(|u| format!("memory:user:{agent}:{u}")),
        MemoryScope::Session => Some(format!("memory:session:{session}")),
    }
}

/// The `memory` tool offered to the model.
pub(crate) fn spec(memory: &Memory) -> ToolSpec {
    let scopes: Vec<&str> = memory.scopes.iter().map(|s| s.as_str()).collect();
    ToolSpec {
        name: MEMORY_TOOL.to_owned(),
        description: format!(
            "Your durable memory, shown to you at the start of every later conversation (in \
             the <memory> block of these instructions). Save what will matter later: facts \
             about the user or the work, where things are, what worked and what did not. \
             `add` a note, `replace` one by its id, `remove` one by its id. Scopes: {}. Keep \
             notes short; each scope keeps {} characters, and the oldest notes go first.",
            scopes
                .iter()
                .map(|s| match *s {
                    "agent" => "`agent` (every conversation)",
                    "user" => "`user` (every conversation with this user)",
                    _ => "`session` (this conversation only)",
                })
                .collect::<Vec<_>>()
                .join(", "),
            memory.max_chars
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "replace", "remove"]},
                "scope": {"type": "string", "enum": scopes},
                "id": {"type": "string", "description": "The note's id, for replace and remove."},
                "text": {"type": "string", "description": "The note, for add and replace."}
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    }
}

/// The pinned block: every note of each scope, in a marked block; empty when there is none.
pub(crate) fn pinned_block(scopes: &[(MemoryScope, Vec<NoteRecord>)]) -> String {
    let mut out = String::new();
    for (scope, notes) in scopes.iter().filter(|(_, n)| !n.is_empty()) {
        out.push_str(&format!("## {} notes\n", scope.as_str()));
        for note in notes {
            out.push_str(&format!("- [{}] {}\n", note.key, note.text.trim()));
        }
    }
    if out.is_empty() {
        return out;
    }
    format!(
        "\n\n<memory>\nNotes you saved earlier with the `memory` tool (ids in brackets):\n{out}</memory>\n"
    )
}

/// What one `memory` call does: its result for the model and the writes (notes and events)
/// committed with it.
pub(crate) struct Write {
    /// Whether the call succeeded.
    pub(crate) ok: bool,
    /// What the model is told.
    pub(crate) output: String,
    /// Note operations and events, for the call's settle batch.
    pub(crate) batch: Batch,
}

/// Where a write happens.
pub(crate) struct Place<'a> {
    /// The agent's settings.
    pub(crate) memory: &'a Memory,
    /// Agent name.
    pub(crate) agent: &'a str,
    /// Session id.
    pub(crate) session: &'a str,
    /// The turn's sender, if known.
    pub(crate) user: Option<&'a str>,
}

/// The scope a `memory` call with `input` addresses, and its namespace; or what the model is
/// told when there is none.
pub(crate) fn target(place: &Place<'_>, input: &Value) -> Result<(MemoryScope, String), String> {
    let scope_name = input
        .get("scope")
        .and_then(Value::as_str)
        .unwrap_or_else(|| place.memory.scopes.first().map_or("agent", |s| s.as_str()));
    let Some(scope) = place
        .memory
        .scopes
        .iter()
        .copied()
        .find(|s| s.as_str() == scope_name)
    else {
        let allowed: Vec<&str> = place.memory.scopes.iter().map(|s| s.as_str()).collect();
        return Err(format!(
            "There is no memory scope `{scope_name}` here; use {}.",
            allowed.join(", ")
        ));
    };
    let Some(ns) = namespace(scope, place.agent, place.session, place.user) else {
        return Err(
            "The user scope needs to know who the user is, and this message came without an \
             identity (an unauthenticated request). Use another scope."
                .to_owned(),
        );
    };
    Ok((scope, ns))
}

/// Carries out a `memory` call with `input` against `existing(namespace)`'s notes.
pub(crate) fn write(
    place: &Place<'_>,
    input: &Value,
    existing: &dyn Fn(&str) -> Vec<NoteRecord>,
    now: i64,
) -> Write {
    let fail = |output: String| Write {
        ok: false,
        output,
        batch: Batch::new(),
    };
    let action = input.get("action").and_then(Value::as_str).unwrap_or("");
    let (scope, ns) = match target(place, input) {
        Ok(found) => found,
        Err(output) => return fail(output),
    };
    let text = input
        .get("text")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or("");
    let id = input.get("id").and_then(Value::as_str).unwrap_or("");
    let notes = existing(&ns);
    let mut batch = Batch::new();
    let (key, output) = match action {
        "add" | "replace" if text.is_empty() => {
            return fail(format!("`{action}` needs the note's `text`."));
        }
        "add" => {
            let key = next_key(&notes);
            batch.push(Op::Note(NoteOp::Put(NoteRecord {
                namespace: ns.clone(),
                key: key.clone(),
                text: text.to_owned(),
                created_at: now,
                updated_at: now,
            })));
            let output = format!("Saved as {key} in {} memory.", scope.as_str());
            (key, output)
        }
        "replace" | "remove" => {
            let Some(note) = notes.iter().find(|n| n.key == id) else {
                let ids: Vec<&str> = notes.iter().map(|n| n.key.as_str()).collect();
                return fail(format!(
                    "There is no note `{id}` in {} memory{}.",
                    scope.as_str(),
                    if ids.is_empty() {
                        " (it is empty)".to_owned()
                    } else {
                        format!("; its notes are {}", ids.join(", "))
                    }
                ));
            };
            if action == "replace" {
                batch.push(Op::Note(NoteOp::Put(NoteRecord {
                    text: text.to_owned(),
                    updated_at: now,
                    ..note.clone()
                })));
                (id.to_owned(), format!("Replaced {id}."))
            } else {
                batch.push(Op::Note(NoteOp::Delete {
                    namespace: ns.clone(),
                    key: id.to_owned(),
                }));
                (id.to_owned(), format!("Removed {id}."))
            }
        }
        other => {
            return fail(format!(
                "`action` is `{other}`; use `add`, `replace` or `remove`."
            ));
        }
    };
    batch.event(
        place.session,
        MEMORY_WRITTEN,
        json!({"scope": scope.as_str(), "action": action, "id": key, "chars": text.chars().count()}),
    );
    // The scope after this write, trimmed to its cap from the oldest note on.
    let mut after: Vec<NoteRecord> = notes.into_iter().filter(|n| n.key != key).collect();
    if action != "remove" {
        after.push(NoteRecord {
            namespace: ns.clone(),
            key: key.clone(),
            text: text.to_owned(),
            created_at: now,
            updated_at: now,
        });
    }
    after.sort_by(|a, b| (a.updated_at, &a.key).cmp(&(b.updated_at, &b.key)));
    let mut total: usize = after.iter().map(|n| n.text.chars().count()).sum();
    let cap = usize::try_from(place.memory.max_chars).unwrap_or(usize::MAX);
    let mut trimmed = Vec::new();
    for note in &after {
        if total <= cap || note.key == key {
            continue;
        }
        total -= note.text.chars().count();
        trimmed.push(note.key.clone());
        batch.push(Op::Note(NoteOp::Delete {
            namespace: ns.clone(),
            key: note.key.clone(),
        }));
    }
    let mut output = output;
    if !trimmed.is_empty() {
        batch.event(
            place.session,
            MEMORY_TRIMMED,
            json!({"scope": scope.as_str(), "removed": trimmed, "maxChars": place.memory.max_chars}),
        );
        output.push_str(&format!(
            " {} memory was over {} characters, so its oldest notes were removed: {}.",
            scope.as_str(),
            place.memory.max_chars,
            trimmed.join(", ")
        ));
    }
    Write {
        ok: true,
        output,
        batch,
    }
}

/// The next free `n<k>` id of a scope.
fn next_key(notes: &[NoteRecord]) -> String {
    let highest = notes
        .iter()
        .filter_map(|n| n.key.strip_prefix('n')?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    format!("n{}", highest + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(max: u64) -> Memory {
        Memory {
            scopes: vec![MemoryScope::Agent, MemoryScope::User],
            max_chars: max,
            save_at: 0.75,
        }
    }

    fn note(key: &str, text: &str, at: i64) -> NoteRecord {
        NoteRecord {
            namespace: "memory:agent:a".into(),
            key: key.into(),
            text: text.into(),
            created_at: at,
            updated_at: at,
        }
    }

    fn kinds(batch: &Batch) -> Vec<String> {
        batch
            .ops
            .iter()
            .map(|op| match op {
                Op::Event { kind, .. } => kind.clone(),
                Op::Note(NoteOp::Put(n)) => format!("put {}", n.key),
                Op::Note(NoteOp::Delete { key, .. }) => format!("delete {key}"),
                _ => "other".into(),
            })
            .collect()
    }

    #[test]
    fn add_replace_remove_and_trim() {
        let m = memory(20);
        let place = Place {
            memory: &m,
            agent: "a",
            session: "s",
            user: None,
        };
        let existing = vec![note("n1", "0123456789", 1), note("n2", "abcdef", 2)];
        let w = write(
            &place,
            &json!({"action": "add", "text": "twelve chars"}),
            &|_| existing.clone(),
            3,
        );
        assert!(w.ok);
        assert_eq!(
            kinds(&w.batch),
            ["put n3", MEMORY_WRITTEN, "delete n1", MEMORY_TRIMMED]
        );
        assert!(
            w.output.contains("oldest notes were removed: n1"),
            "{}",
            w.output
        );

        let w = write(
            &place,
            &json!({"action": "remove", "id": "n9"}),
            &|_| existing.clone(),
            3,
        );
        assert!(
            !w.ok && w.output.contains("its notes are n1, n2"),
            "{}",
            w.output
        );
        let w = write(
            &place,
            &json!({"action": "add", "scope": "user", "text": "x"}),
            &|_| Vec::new(),
            3,
        );
        assert!(
            !w.ok && w.output.contains("without an identity"),
            "{}",
            w.output
        );
        let w = write(
            &place,
            &json!({"action": "add", "scope": "session", "text": "x"}),
            &|_| Vec::new(),
            3,
        );
        assert!(
            !w.ok && w.output.contains("no memory scope `session`"),
            "{}",
            w.output
        );
    }
}

/// Which notes an operator (`eve memory`, the HTTP API) addresses.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    /// One scope, or every scope.
    pub scope: Option<MemoryScope>,
    /// The user of the `user` scope (every user when `None` and reading).
    pub user: Option<String>,
    /// The session of the `session` scope (every session when `None` and reading).
    pub session: Option<String>,
}

/// Why an operator's memory request cannot be carried out.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The agent has no `memory:` in `agent.yaml`.
    #[error(
        "memory is off for agent `{0}`: add `memory: true` (or `memory: {{scopes: [...]}}`) to agent.yaml"
    )]
    Off(String),
    /// A write needs one scope, and the user or session it is about.
    #[error("{0}")]
    Target(String),
    /// The write itself was refused (an unknown id, an empty text).
    #[error("{0}")]
    Refused(String),
    /// The store failed.
    #[error(transparent)]
    Runtime(#[from] crate::engine::RuntimeError),
}

impl crate::engine::Runtime {
    /// The notes `selector` addresses, for the current build's root agent.
    pub async fn memory_notes(&self, selector: &Selector) -> Result<Vec<NoteRecord>, MemoryError> {
        let build = self.inner.builds.current()?;
        let agent = &build.manifest.agent.name;
        let store = &self.inner.store;
        let scopes = match selector.scope {
            Some(scope) => vec![scope],
            None => vec![MemoryScope::Agent, MemoryScope::User, MemoryScope::Session],
        };
        let mut out = Vec::new();
        for scope in scopes {
            let notes = match (scope, &selector.user, &selector.session) {
                (MemoryScope::Agent, _, _) => store.notes(&format!("memory:agent:{agent}")).await,
                (MemoryScope::User, Some(user), _) => {
                    store.notes(&format!("memory:user:{agent}:{user}")).await
                }
                (MemoryScope::User, None, _) => {
                    store.notes_under(&format!("memory:user:{agent}:")).await
                }
                (MemoryScope::Session, _, Some(session)) => {
                    store.notes(&format!("memory:session:{session}")).await
                }
                (MemoryScope::Session, _, None) => store.notes_under("memory:session:").await,
            };
            out.extend(notes.map_err(crate::engine::RuntimeError::from)?);
        }
        Ok(out)
    }

    /// Adds, replaces or removes one note (`input` as the `memory` tool takes it) in the scope
    /// `selector` names; returns what was done.
    pub async fn memory_write(
        &self,
        selector: &Selector,
        input: &Value,
    ) -> Result<String, MemoryError> {
        let build = self.inner.builds.current()?;
        let agent = build.manifest.agent.name.clone();
        let config = build
            .manifest
            .agent
            .config
            .memory
            .clone()
            .ok_or_else(|| MemoryError::Off(agent.clone()))?;
        let (scope, ns) = self.operator_namespace(&agent, selector)?;
        let existing = self
            .inner
            .store
            .notes(&ns)
            .await
            .map_err(crate::engine::RuntimeError::from)?;
        // An operator may write any scope the agent knows, whichever scopes it lets the model use.
        let everything = Memory {
            scopes: vec![scope],
            ..config
        };
        let mut input = input.clone();
        if let Some(fields) = input.as_object_mut() {
            fields.insert("scope".to_owned(), json!(scope.as_str()));
        }
        let session = selector.session.clone().unwrap_or_default();
        let place = Place {
            memory: &everything,
            agent: &agent,
            session: &session,
            user: selector.user.as_deref(),
        };
        let mut write = write(
            &place,
            &input,
            &|_| existing.clone(),
            crate::store::now_ms(),
        );
        if !write.ok {
            return Err(MemoryError::Refused(write.output));
        }
        // Events belong to a session's stream: an operator's write has none to go on.
        write.batch.ops.retain(|op| matches!(op, Op::Note(_)));
        self.commit(write.batch).await?;
        Ok(write.output)
    }

    /// Removes every note of the scope `selector` names; returns how many there were.
    pub async fn memory_clear(&self, selector: &Selector) -> Result<usize, MemoryError> {
        let build = self.inner.builds.current()?;
        let agent = build.manifest.agent.name.clone();
        let (_, ns) = self.operator_namespace(&agent, selector)?;
        let count = self
            .inner
            .store
            .notes(&ns)
            .await
            .map_err(crate::engine::RuntimeError::from)?
            .len();
        let mut batch = Batch::new();
        batch.push(Op::Note(NoteOp::Clear { namespace: ns }));
        self.commit(batch).await?;
        Ok(count)
    }

    /// The one namespace a write or clear addresses.
    fn operator_namespace(
        &self,
        agent: &str,
        selector: &Selector,
    ) -> Result<(MemoryScope, String), MemoryError> {
        let scope = selector.scope.unwrap_or(MemoryScope::Agent);
        let ns = namespace(
            scope,
            agent,
            selector.session.as_deref().unwrap_or(""),
            selector.user.as_deref(),
        );
        match (scope, ns) {
            (MemoryScope::User, None) => Err(MemoryError::Target(
                "the user scope needs the user (`--user`, such as `token:ALICE` or `slack:U123`)"
                    .to_owned(),
            )),
            (MemoryScope::Session, _) if selector.session.is_none() => Err(MemoryError::Target(
                "the session scope needs the session (`--session wrun_…`)".to_owned(),
            )),
            (scope, Some(ns)) => Ok((scope, ns)),
            (_, None) => Err(MemoryError::Target("no such scope".to_owned())),
        }
    }
}
