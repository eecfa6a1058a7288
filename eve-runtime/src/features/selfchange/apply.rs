//! Applying an approved proposal (the second move): `agent/` must be as it was when the
//! proposal was staged; the checked changes are written into it, it must build to the reviewed
//! hash, the changed paths are staged in git (not committed), and the build is activated as a
//! release with the approver as its principal.

use std::path::Path;

use serde_json::{Value, json};

use super::{
    CHANGE_APPROVED, CHANGE_DENIED, ChangeStep, Proposal, apply, change_request, check_protected,
    fingerprint, staging_dir,
};
use crate::engine::events as ev;
use crate::engine::turn::seam::TurnView;
use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use crate::store::{Batch, CallStatus, ToolCallRecord};

/// Writes an approved proposal into `agent/`, stages it in git, and activates its build.
pub(super) async fn apply_change(
    view: &TurnView<'_>,
    call: &ToolCallRecord,
    id: &str,
    proposal: &Proposal,
) -> RuntimeResult<ChangeStep> {
    let request = change_request(view, call).await?;
    let by = request
        .as_ref()
        .and_then(|r| r.responder.clone())
        .unwrap_or_else(|| ev::LOCAL_PRINCIPAL.to_owned());
    let shown = request
        .as_ref()
        .map(|r| r.action["proposal"].clone())
        .unwrap_or(Value::Null);
    let staged_hash = shown["build"].as_str().unwrap_or_default().to_owned();
    let base = shown["base"].as_str().unwrap_or_default().to_owned();
    let result = shown["result"].as_str().unwrap_or_default().to_owned();
    let state_dir = view.rt.inner.config.state_dir.clone();
    let agent_dir = view.rt.agent_dir();
    let conflict = |text: String| {
        let _ = std::fs::remove_dir_all(staging_dir(&state_dir, id));
        text
    };
    if staged_hash.is_empty() || base.is_empty() {
        let text = conflict(format!(
            "The change `{id}` was approved, but its staged proposal is missing; nothing \
             was written. Propose it again."
        ));
        return refused_after_approval(view, call, id, &by, text).await;
    }
    // Written already (a restart after the write): the folder is the staged result.
    let changes = proposal.changes.clone();
    let (dir, b, r) = (agent_dir.clone(), base.clone(), result.clone());
    let protected = view.rt.protected_dirs();
    let written = tokio::task::spawn_blocking(move || -> Result<Vec<String>, String> {
        for change in &changes {
            check_protected(&dir, &protected, change)?;
        }
        let now = fingerprint(&dir)?;
        if now == r {
            return Ok(changes.iter().map(|c| c.path().to_owned()).collect());
        }
        if now != b {
            return Err(
                "The agent folder changed since the proposal was staged (someone edited it); \
                 nothing was written, so no edit was lost. Look at the folder as it is now \
                 and propose again."
                    .to_owned(),
            );
        }
        apply(&dir, &changes)?;
        Ok(changes.iter().map(|c| c.path().to_owned()).collect())
    })
    .await
    .map_err(|e| RuntimeError::Other(format!("applying stopped: {e}")))?;
    let paths = match written {
        Ok(paths) => paths,
        Err(why) => {
            let text = conflict(format!(
                "The change `{id}` was approved by {by}, but: {why}"
            ));
            return refused_after_approval(view, call, id, &by, text).await;
        }
    };
    // What is in `agent/` now must be what was reviewed: the same build.
    let rt = view.rt.clone();
    let dir = agent_dir.clone();
    let rebuilt = tokio::task::spawn_blocking(move || rt.build_unpointed(dir))
        .await
        .map_err(|e| RuntimeError::Other(format!("building stopped: {e}")))??;
    let hash = match rebuilt {
        Ok((hash, _)) if hash == staged_hash => hash,
        Ok((hash, _)) => {
            let text = conflict(format!(
                "The change `{id}` was written into the agent folder, but the folder now \
                 builds to `{hash}`, not the reviewed `{staged_hash}`; it was not activated. \
                 Check the folder and build it with `eve build`."
            ));
            return refused_after_approval(view, call, id, &by, text).await;
        }
        Err(output) => {
            let text = conflict(format!(
                "The change `{id}` was written into the agent folder, but it no longer \
                 builds ({} errors); it was not activated.",
                output.error_count()
            ));
            return refused_after_approval(view, call, id, &by, text).await;
        }
    };
    let git = git_stage(&agent_dir, &paths).await;
    let release = match view.rt.activate_proposal(&hash, &by).await {
        Ok(release) => release,
        Err(e) => {
            let text = conflict(format!(
                "The change `{id}` was written into the agent folder, but activating its \
                 build `{hash}` failed: {e}. Activate it with `eve activate {hash}`."
            ));
            return refused_after_approval(view, call, id, &by, text).await;
        }
    };
    let _ = std::fs::remove_dir_all(staging_dir(&view.rt.inner.config.state_dir, id));
    let mut batch = Batch::new();
    let data = json!({
        "id": id, "callId": call.call_id, "by": by, "summary": proposal.summary,
        "files": paths, "build": hash, "release": release, "git": git,
    });
    view.rt
        .change_event(&mut batch, view.id(), CHANGE_APPROVED, data)
        .await?;
    let git_note = match git["staged"].as_bool() {
        Some(true) => " The changed files are staged in git (not committed).",
        _ => "",
    };
    Ok(ChangeStep::Settle(
        CallStatus::Completed,
        json!(format!(
            "The change `{id}` was approved by {by}: {} written into the agent folder and \
             build `{hash}` is active as release {}.{git_note} It applies from the next \
             message on.",
            paths.join(", "),
            release.as_str().unwrap_or("?")
        )),
        batch,
    ))
}

/// An approved proposal that could not be applied: the call fails with `text`, recorded as
/// `change.denied` (`conflict: true`), with the approver.
async fn refused_after_approval(
    view: &TurnView<'_>,
    call: &ToolCallRecord,
    id: &str,
    by: &str,
    text: String,
) -> RuntimeResult<ChangeStep> {
    let mut batch = Batch::new();
    let data = json!({"id": id, "callId": call.call_id, "by": by, "reason": text,
                      "conflict": true});
    view.rt
        .change_event(&mut batch, view.id(), CHANGE_DENIED, data)
        .await?;
    Ok(ChangeStep::Settle(CallStatus::Failed, json!(text), batch))
}
/// Stages `paths` (relative to `agent_dir`) in git when `agent_dir` is in a work tree: `{staged:
/// true, repo}`; `{staged: false, why}` otherwise (no git, not a repository, `git add` failed).
async fn git_stage(agent_dir: &Path, paths: &[String]) -> Value {
    let dir = agent_dir.to_path_buf();
    let paths = paths.to_vec();
    tokio::task::spawn_blocking(move || {
        let top = std::process::Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["rev-parse", "--show-toplevel"])
            .stderr(std::process::Stdio::null())
            .output();
        let top = match top {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
            Ok(_) => return json!({"staged": false, "why": "not a git repository"}),
            Err(_) => return json!({"staged": false, "why": "git is not installed"}),
        };
        let added = std::process::Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["add", "-A", "--"])
            .args(&paths)
            .output();
        match added {
            Ok(o) if o.status.success() => json!({"staged": true, "repo": top, "paths": paths}),
            Ok(o) => json!({"staged": false, "repo": top,
                            "why": String::from_utf8_lossy(&o.stderr).trim().to_owned()}),
            Err(e) => json!({"staged": false, "why": e.to_string()}),
        }
    })
    .await
    .unwrap_or_else(|e| json!({"staged": false, "why": e.to_string()}))
}

impl Runtime {
    /// Activates a staged build as a release, `by` the approver (the active release's policy
    /// still applies: a failing gate refuses it). Returns the release id.
    async fn activate_proposal(&self, hash: &str, by: &str) -> RuntimeResult<Value> {
        let release = self.activate(hash, by, false).await?;
        Ok(json!(release.id))
    }
}
