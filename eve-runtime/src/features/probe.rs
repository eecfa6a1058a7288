//! The environment probe (`probe:` in `agent.yaml`): what the agent's sandbox offers, in its
//! system prompt from the session's start, so the model stops guessing what exists.
//!
//! The probe is a shell script run once per session **inside the sandbox the `bash` tool gets**
//! (the same confinement, workspace and time limit), so it reports what the agent can actually
//! use, not what the host has: the OS, the shell, the version line of each configured program
//! found on PATH, and a listing of the workspace (at most [`MAX_ENTRIES`] entries and
//! [`MAX_LISTING_CHARS`] characters). Its text is stored with the session (`probe:<session>`)
//! with a `session.probed` event, so a resumed session, or one continued on another node, shows
//! the model the identical text; it is never run twice for one session.

use std::time::Duration;

use async_trait::async_trait;
use eve_compile::{Agent, Approval, Effect, Runner, Tool};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::engine::RuntimeResult;
use crate::engine::turn::seam::{Shaped, TurnExtension, TurnView};
use crate::model::ModelRequest;
use crate::store::{Batch, NoteOp, NoteRecord, Op, now_ms};
use crate::tools::{ToolContext, run_tool};

/// The probe as a feature of the turn: its block in the system prompt.
#[derive(Default)]
pub(crate) struct Probe {
    /// The session's probe text, once read or probed.
    text: Option<String>,
}

#[async_trait]
impl TurnExtension for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }

    async fn shape_request(
        &mut self,
        view: &TurnView<'_>,
        request: &mut ModelRequest,
        writes: &mut Batch,
    ) -> RuntimeResult<Shaped> {
        if self.text.is_none() {
            self.text = Some(text(view, writes).await?);
        }
        request
            .system
            .push_str(self.text.as_deref().unwrap_or_default());
        Ok(Shaped::Call)
    }
}

/// The session's probe text: stored, or probed now (once) in the `bash` tool's sandbox, with
/// its note and `session.probed` added to `writes`.
async fn text(view: &TurnView<'_>, writes: &mut Batch) -> RuntimeResult<String> {
    let ns = namespace(view.id());
    if let Some(note) = view.rt.inner.store.note(&ns, "text").await? {
        return Ok(note.text);
    }
    let agent = &view.build.manifest.agent;
    let Some(config) = agent.config.probe.clone() else {
        return Ok(String::new());
    };
    let workspace = view.workspace()?;
    let agent_dir = view.build.dir.join(eve_compile::pack::FILES);
    let ctx = view.tool_context(
        format!("probe_{}", view.turn.seq),
        format!("probe-{}", view.id()),
        workspace,
        agent_dir,
        Some(agent.bash_sandbox()),
    );
    let found = run(agent, &config, &ctx).await;
    let now = now_ms();
    writes
        .push(Op::Note(NoteOp::Put(NoteRecord {
            namespace: ns,
            key: "text".to_owned(),
            text: found.text.clone(),
            created_at: now,
            updated_at: now,
        })))
        .event(
            view.id(),
            SESSION_PROBED,
            json!({"programs": found.programs, "chars": found.text.chars().count()}),
        );
    // What is stored is what every later turn reads: redacted as the commit redacts it.
    Ok(view.rt.secrets().redact(&found.text).into_owned())
}

/// Event: the probe ran; `programs` found, `chars` of text.
pub(crate) const SESSION_PROBED: &str = "session.probed";

/// Entries of the workspace listing shown at most.
pub(crate) const MAX_ENTRIES: usize = 100;
/// Characters of the workspace listing shown at most.
pub(crate) const MAX_LISTING_CHARS: usize = 2_000;
/// How long the probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Namespace of a session's probe text.
pub(crate) fn namespace(session: &str) -> String {
    format!("probe:{session}")
}

/// The probe script for `probe`: one `key=value`-ish report on stdout. Program names were checked
/// at build time (letters, digits, `._+-`), so they are safe in the script.
fn script(probe: &eve_compile::Probe) -> String {
    let programs = probe.programs.join(" ");
    let mut s = String::from(
        "os=$(uname -srm 2>/dev/null)\n\
         if [ -r /etc/os-release ]; then . /etc/os-release 2>/dev/null; os=\"$os ($PRETTY_NAME)\"; fi\n\
         echo \"OS: $os\"\n\
         echo \"Date: $(date '+%Y-%m-%d (%A) %H:%M %Z' 2>/dev/null)\"\n\
         echo \"Shell: ${SHELL:-sh} ($(command -v sh))\"\n\
         echo \"Working folder: $(pwd)\"\n",
    );
    s.push_str(&format!(
        "for p in {programs}; do\n\
         \x20 if path=$(command -v \"$p\" 2>/dev/null); then\n\
         \x20   v=$(\"$p\" --version 2>&1 </dev/null | head -n 1)\n\
         \x20   echo \"program: $p: $v ($path)\"\n\
         \x20 else echo \"missing: $p\"; fi\n\
         done\n"
    ));
    if probe.listing {
        s.push_str(&format!(
            "echo listing:\nls -1Ap 2>/dev/null | head -n {}\necho \"total: $(ls -1A 2>/dev/null | wc -l)\"\n",
            MAX_ENTRIES
        ));
    }
    s
}

/// The synthetic tool the probe runs as: `sh -c SCRIPT`, read-only, never asked about.
fn tool(probe: &eve_compile::Probe) -> Tool {
    Tool {
        name: "environment_probe".to_owned(),
        source: crate::tools::BUILTIN_ARGV.to_owned(),
        description: "The environment probe.".to_owned(),
        input_schema: json!({"type": "object"}),
        schema_hash: String::new(),
        approval: Approval::Never,
        effect: Effect::Read,
        timeout_ms: u64::try_from(PROBE_TIMEOUT.as_millis()).unwrap_or(10_000),
        output_limit: 64 * 1024,
        deferred: false,
        env: Vec::new(),
        dynamic: Vec::new(),
        phase: None,
        ends_turn: false,
        approval_prompt: None,
        runner: Runner::Command {
            argv: vec!["sh".to_owned(), "-c".to_owned(), script(probe)],
        },
    }
}

/// What the probe found: the prompt text and the programs present.
pub(crate) struct Found {
    /// The block for the system prompt.
    pub(crate) text: String,
    /// Names of the programs found.
    pub(crate) programs: Vec<String>,
}

/// Runs the probe of `agent` in `ctx` (the `bash` tool's confinement) and formats its report.
pub(crate) async fn run(agent: &Agent, probe: &eve_compile::Probe, ctx: &ToolContext) -> Found {
    let result = run_tool(&tool(probe), &json!({}), ctx, CancellationToken::new()).await;
    let raw = match &result.output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if !result.ok && raw.trim().is_empty() {
        let why = result.error.unwrap_or_else(|| "no output".to_owned());
        return Found {
            text: format!(
                "\n\n<environment>\nThe environment probe failed ({why}); check what exists \
                 before relying on it.\n</environment>\n"
            ),
            programs: Vec::new(),
        };
    }
    format(agent.bash_sandbox().provider.as_str(), &raw)
}

/// Turns the probe script's report into the prompt block.
fn format(provider: &str, raw: &str) -> Found {
    let mut head = Vec::new();
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let mut listing: Vec<&str> = Vec::new();
    let mut total = None;
    let mut in_listing = false;
    for line in raw.lines() {
        if in_listing {
            if let Some(n) = line.strip_prefix("total: ") {
                total = n.trim().parse::<usize>().ok();
            } else {
                listing.push(line);
            }
        } else if line == "listing:" {
            in_listing = true;
        } else if let Some(p) = line.strip_prefix("program: ") {
            found.push(p.to_owned());
        } else if let Some(p) = line.strip_prefix("missing: ") {
            missing.push(p.to_owned());
        } else if !line.trim().is_empty() {
            head.push(line.to_owned());
        }
    }
    let mut text = String::from(
        "\n\n<environment>\nWhere your tools run (probed at the start of this session, inside your sandbox",
    );
    text.push_str(&format!(", sandbox `{provider}`):\n"));
    for line in &head {
        text.push_str(line);
        text.push('\n');
    }
    if !found.is_empty() {
        text.push_str("Programs:\n");
        for p in &found {
            text.push_str(&format!("- {}\n", shorten(p, 200)));
        }
    }
    if !missing.is_empty() {
        text.push_str(&format!("Not installed: {}\n", missing.join(", ")));
    }
    if !listing.is_empty() || total.is_some() {
        let shown: Vec<&str> = listing.iter().take(MAX_ENTRIES).copied().collect();
        let mut block = shown.join("\n");
        if block.chars().count() > MAX_LISTING_CHARS {
            block = block.chars().take(MAX_LISTING_CHARS).collect();
            if let Some(cut) = block.rfind('\n') {
                block.truncate(cut);
            }
        }
        let listed = block.lines().count();
        let total = total.unwrap_or(listed);
        if total == 0 {
            text.push_str("The workspace is empty.\n");
        } else {
            text.push_str(&format!("Workspace ({total} entries):\n{block}\n"));
            if total > listed {
                text.push_str(&format!("[{} more not listed]\n", total - listed));
            }
        }
    }
    text.push_str("</environment>\n");
    let programs = found
        .iter()
        .filter_map(|p| p.split(':').next().map(str::to_owned))
        .collect();
    Found { text, programs }
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars().take(max).collect::<String>() + "…"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_is_bounded() {
        let names: Vec<String> = (0..150)
            .map(|i| format!("file_{i:03}_{}", "x".repeat(30)))
            .collect();
        let raw = format!(
            "OS: Linux\nprogram: git: git version 2.43 (/usr/bin/git)\nmissing: docker\nlisting:\n{}\ntotal: 150\n",
            names
                .iter()
                .take(MAX_ENTRIES)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
        let found = format("isolated", &raw);
        assert_eq!(found.programs, ["git"]);
        assert!(found.text.contains("Not installed: docker"));
        assert!(found.text.contains("Workspace (150 entries)"));
        let listing = found.text.split("entries):\n").nth(1).unwrap();
        let listing = listing.split("\n[").next().unwrap();
        assert!(
            listing.chars().count() <= MAX_LISTING_CHARS,
            "{}",
            listing.len()
        );
        assert!(found.text.contains("more not listed]"));
    }
}
