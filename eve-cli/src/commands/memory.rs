//! `eve memory`: the notes the agent keeps with its `memory` tool, straight from the project's
//! store: `show` prints them (every scope, or one; `--json` for scripts), `edit` adds, replaces
//! or removes one, `clear` empties a scope. A running `eve serve` or `eve dev` sees a change at
//! the next turn (notes are read from the store at each turn's start).

use std::process::ExitCode;

use eve_compile::MemoryScope;
use eve_runtime::engine::memory::Selector;
use eve_runtime::store::rfc3339;
use serde_json::json;

use super::block_on;
use super::run::open_runtime;
use crate::cli::{MemoryEditArgs, MemoryShowArgs, MemoryTargetArgs};
use crate::project::locate;
use crate::render::{paint, stderr_color, stdout_color};
use crate::sanitize::{Untrusted, errln, json_pretty, outln};

fn selector(target: &MemoryTargetArgs) -> Selector {
    Selector {
        scope: target.scope.as_deref().map(|s| match s {
            "user" => MemoryScope::User,
            "session" => MemoryScope::Session,
            _ => MemoryScope::Agent,
        }),
        user: target.user.clone(),
        session: target.session.clone(),
    }
}

/// `memory:agent:NAME` → `agent`; `memory:user:NAME:U` → `user U`; `memory:session:S` → `session S`.
fn scope_label(namespace: &str) -> String {
    let parts: Vec<&str> = namespace.splitn(4, ':').collect();
    match parts.as_slice() {
        ["memory", "agent", ..] => "agent".to_owned(),
        ["memory", "user", _, user] => format!("user {user}"),
        ["memory", "session", session] => format!("session {session}"),
        _ => namespace.to_owned(),
    }
}

pub fn show(args: MemoryShowArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.target.project)?;
    let notes = block_on(async {
        let runtime = open_runtime(&project).await?;
        anyhow::Ok(runtime.memory_notes(&selector(&args.target)).await?)
    })??;
    if args.json {
        let all: Vec<_> = notes
            .iter()
            .map(|n| {
                json!({
                    "scope": scope_label(&n.namespace), "namespace": n.namespace, "id": n.key,
                    "text": n.text, "createdAt": rfc3339(n.created_at),
                    "updatedAt": rfc3339(n.updated_at),
                })
            })
            .collect();
        outln!("{}", json_pretty(&all));
        return Ok(ExitCode::SUCCESS);
    }
    if notes.is_empty() {
        errln!("no notes yet: the agent writes them with its `memory` tool (agent.yaml `memory:`)");
        return Ok(ExitCode::SUCCESS);
    }
    let color = stdout_color();
    let mut current = String::new();
    for note in &notes {
        let label = scope_label(&note.namespace);
        if label != current {
            // The label names a platform user or a session.
            outln!("{}", paint(color, "1", &format!("{}:", Untrusted(&label))));
            current = label;
        }
        // The agent wrote the note (from what a model, a tool or a user said).
        outln!("  {:<5} {}", Untrusted(&note.key), Untrusted(&note.text));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn edit(args: MemoryEditArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.target.project)?;
    let input = match (&args.add, &args.replace, &args.remove) {
        (Some(text), _, _) => json!({"action": "add", "text": text}),
        (_, Some(id), _) => json!({"action": "replace", "id": id, "text": args.text}),
        (_, _, Some(id)) => json!({"action": "remove", "id": id}),
        _ => {
            anyhow::bail!("say what to change: --add TEXT, --replace ID --text TEXT or --remove ID")
        }
    };
    let done = block_on(async {
        let runtime = open_runtime(&project).await?;
        anyhow::Ok(
            runtime
                .memory_write(&selector(&args.target), &input)
                .await?,
        )
    })??;
    errln!(
        "{} {}",
        paint(stderr_color(), "1;32", "memory:"),
        Untrusted(&done)
    );
    Ok(ExitCode::SUCCESS)
}

pub fn clear(args: MemoryTargetArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let removed = block_on(async {
        let runtime = open_runtime(&project).await?;
        anyhow::Ok(runtime.memory_clear(&selector(&args)).await?)
    })??;
    errln!(
        "{} removed {removed} note{}",
        paint(stderr_color(), "1;32", "memory:"),
        if removed == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}
