//! Staging a proposal (the first move): `agent/` copied into `.eve/staging/<id>/`, the changes
//! applied to the copy, the copy built without moving `.eve/current`, the release candidate
//! computed, and what a reviewer is shown written beside it; a proposal that does not build or
//! fails the gate goes back to the model instead.

use std::path::{Path, PathBuf};

use eve_compile::Project;
use serde_json::{Value, json};

use super::folder::copy_tree;
use super::review::{joined, size};
use super::{
    FileChange, LISTED_DIAGNOSTICS, PROPOSE_CHANGE, Proposal, REQUEST_KIND, apply, check_on_disk,
    check_protected, fingerprint, proposal_id, review, staging_dir,
};
use crate::engine::events as ev;
use crate::engine::{Runtime, RuntimeError, RuntimeResult};
use crate::store::ToolCallRecord;

/// A diagnostic as one line for the model and the reviewer.
fn diagnostic_line(d: &eve_discover::Diagnostic) -> String {
    let at = match (&d.file, d.line) {
        (Some(f), Some(l)) => format!("{f}:{l}: "),
        (Some(f), None) => format!("{f}: "),
        _ => String::new(),
    };
    let severity = serde_json::to_value(d.severity)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let code = serde_json::to_value(d.code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let help = d
        .help
        .as_deref()
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    format!("{at}{severity} {code}: {}{help}", d.message)
}

/// What staging found.
pub(super) enum Staged {
    /// The proposal cannot be offered: what the model is told.
    Refused(String),
    /// Built and checked: the proposal as shown for approval (`action.proposal`).
    Offered(Value),
}

impl Runtime {
    /// A project whose agent folder is `agent_dir` and whose state is this runtime's.
    fn project_for(&self, agent_dir: PathBuf) -> Project {
        let state_dir = self.inner.config.state_dir.clone();
        let root = state_dir
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Project {
            root,
            agent_dir,
            state_dir,
            interpreter_path: None,
            // An agent never makes the server fetch a URL of its choosing: an OpenAPI document
            // named by URL comes from the copy `eve build` cached.
            fetch: None,
        }
    }

    /// What a proposal must never write, wherever the agent folder is: the project's state
    /// folder and its `evals/`.
    pub(super) fn protected_dirs(&self) -> Vec<PathBuf> {
        let project = self.project_for(self.agent_dir());
        vec![project.state_dir.clone(), project.root.join("evals")]
    }

    /// Tests only: proposals' builds fetch the OpenAPI documents their connections name by URL,
    /// as `eve build` does (the protection off), so a test can show an agent making the server
    /// fetch a URL of its choosing. No setting reaches it.
    #[doc(hidden)]
    pub fn set_proposals_fetch_for_tests(&self, on: bool) {
        self.inner
            .proposals_fetch
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The fetcher of a proposal's build: none (the switch above aside).
    fn proposals_fetch(&self) -> Option<eve_compile::compile::openapi::Fetcher> {
        self.inner
            .proposals_fetch
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(crate::tools::openapi_document::document_fetcher)
    }

    /// Compiles `agent_dir` as the project's agent (named as `eve build` names it, diagnostics
    /// under `agent/`) and writes the build without activating it. `Err` holds the diagnostics
    /// lines when the build has errors.
    pub(super) fn build_unpointed(
        &self,
        agent_dir: PathBuf,
    ) -> RuntimeResult<Result<(String, eve_compile::Output), eve_compile::Output>> {
        let project = self.project_for(agent_dir);
        let real = self.project_for(self.agent_dir());
        let source = eve_discover::FsSource::new(&project.agent_dir).map_err(|e| {
            RuntimeError::Other(format!("cannot open {}: {e}", project.agent_dir.display()))
        })?;
        let discovery = eve_discover::discover(&source);
        let mut output = eve_compile::compile(
            &discovery,
            &eve_compile::Options {
                name: real.name(),
                file_prefix: real.display_prefix(),
                protected_dirs: vec![project.state_dir.clone(), real.agent_dir.clone()],
                agent_dir: Some(project.agent_dir.clone()),
                // The caches of `eve build`: module evaluations, and the OpenAPI documents it
                // fetched (a proposal's build fetches nothing).
                cache_dir: Some(real.state_dir.clone()),
                fetch: self.proposals_fetch(),
            },
        );
        if output.error_count() > 0 {
            return Ok(Err(output));
        }
        let (hash, _, _) = eve_compile::build::write_candidate(&project, &mut output)
            .map_err(|e| RuntimeError::Other(format!("cannot write the build: {e}")))?;
        Ok(Ok((hash, output)))
    }

    /// Stages `proposal` (call `id`): copy, apply, build, candidate. Blocking file work runs off
    /// the async threads.
    pub(super) async fn stage_proposal(
        &self,
        id: &str,
        proposal: &Proposal,
    ) -> RuntimeResult<Staged> {
        let agent_dir = self.agent_dir();
        let staging = staging_dir(&self.inner.config.state_dir, id);
        let rt = self.clone();
        let changes = proposal.changes.clone();
        let prepared =
            tokio::task::spawn_blocking(move || rt.prepare_staging(&agent_dir, &staging, &changes))
                .await
                .map_err(|e| RuntimeError::Other(format!("staging stopped: {e}")))??;
        let (base, result, files, built) = match prepared {
            Err(refused) => return Ok(Staged::Refused(refused)),
            Ok(p) => p,
        };
        let staging = staging_dir(&self.inner.config.state_dir, id);
        let (hash, output) = match built {
            Err(output) => {
                let _ = std::fs::remove_dir_all(&staging);
                let lines: Vec<String> = output
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == eve_discover::Severity::Error)
                    .map(diagnostic_line)
                    .collect();
                return Ok(Staged::Refused(format!(
                    "The proposal was not offered for approval: the changed agent folder does not \
                     build ({} error{}). Fix these and propose again:\n{}",
                    lines.len(),
                    if lines.len() == 1 { "" } else { "s" },
                    lines
                        .iter()
                        .map(|l| format!("- {l}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )));
            }
            Ok(built) => built,
        };
        let candidate = self.proposal_candidate(&hash).await?;
        if let Some(failed) = candidate.failed_evals() {
            let _ = std::fs::remove_dir_all(&staging);
            return Ok(Staged::Refused(format!(
                "The proposal was not offered for approval: the gate evals failed on its build \
                 `{hash}`. Failing cases:\n{failed}\nFix the change and propose again."
            )));
        }
        let warnings: Vec<String> = output
            .diagnostics
            .iter()
            .filter(|d| d.severity != eve_discover::Severity::Error)
            .map(diagnostic_line)
            .collect();
        let (diff_text, truncated) = joined(&files);
        let mut shown = json!({
            "id": id,
            "summary": proposal.summary,
            "rationale": proposal.rationale,
            "files": files,
            "diff": diff_text,
            "diffTruncated": truncated,
            "build": hash,
            "diagnostics": {
                "errors": 0,
                "warnings": warnings.len(),
                "items": warnings.iter().take(LISTED_DIAGNOSTICS).collect::<Vec<_>>(),
            },
            "evals": candidate.evals,
            "delta": candidate.delta,
            "widens": candidate.widens,
            "deltaText": candidate.delta_text,
            "activeBuild": candidate.active,
            "base": base,
            "result": result,
        });
        shown["text"] = json!(render_text(&shown));
        let record = serde_json::to_vec_pretty(&shown)?;
        std::fs::write(staging.join("proposal.json"), record).map_err(|e| {
            RuntimeError::Other(format!(
                "cannot write the proposal in {}: {e}",
                staging.display()
            ))
        })?;
        Ok(Staged::Offered(shown))
    }

    /// The blocking part of staging: fingerprints, the copy, the changes applied to it, the diff
    /// and the build. `Ok(Err)` is a refusal for the model.
    #[allow(clippy::type_complexity)]
    fn prepare_staging(
        &self,
        agent_dir: &Path,
        staging: &Path,
        changes: &[FileChange],
    ) -> RuntimeResult<
        Result<
            (
                String,
                String,
                Vec<Value>,
                Result<(String, eve_compile::Output), eve_compile::Output>,
            ),
            String,
        >,
    > {
        if !agent_dir.is_dir() {
            return Ok(Err(format!(
                "The agent folder {} is not there, so no change can be proposed.",
                agent_dir.display()
            )));
        }
        if changes
            .iter()
            .any(|c| c.path() == "agent" || c.path().starts_with("agent/"))
            && !agent_dir.join("agent").exists()
        {
            return Ok(Err(
                "Paths are relative to the agent folder: write `skills/x.md`, not \
                 `agent/skills/x.md`. Nothing was staged."
                    .to_owned(),
            ));
        }
        let protected = self.protected_dirs();
        let problems: Vec<String> = changes
            .iter()
            .filter_map(|c| {
                check_protected(agent_dir, &protected, c)
                    .and_then(|()| check_on_disk(agent_dir, c))
                    .err()
            })
            .collect();
        if !problems.is_empty() {
            return Ok(Err(format!(
                "The proposal was refused; nothing was staged:\n{}",
                problems
                    .iter()
                    .map(|p| format!("- {p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )));
        }
        let base = fingerprint(agent_dir).map_err(RuntimeError::Other)?;
        let _ = std::fs::remove_dir_all(staging);
        let copy = staging.join("agent");
        if let Err(e) = copy_tree(agent_dir, &copy) {
            let _ = std::fs::remove_dir_all(staging);
            return Ok(Err(format!("The proposal could not be staged: {e}")));
        }
        if let Err(e) = apply(&copy, changes) {
            let _ = std::fs::remove_dir_all(staging);
            return Ok(Err(format!(
                "The proposal was refused; nothing was staged:\n{e}"
            )));
        }
        let result = fingerprint(&copy).map_err(RuntimeError::Other)?;
        // What the reviewer reads is the difference of the two folders, not the proposal's list.
        let files = match review(agent_dir, &copy) {
            Ok(files) => files,
            Err(e) => {
                let _ = std::fs::remove_dir_all(staging);
                return Ok(Err(format!("The proposal could not be staged: {e}")));
            }
        };
        let built = self.build_unpointed(copy)?;
        Ok(Ok((base, result, files, built)))
    }

    /// The candidate of a staged build as shown: delta against the active release and the gate
    /// evals of the active release's policy ([`Runtime::candidate`]; nothing is recorded).
    async fn proposal_candidate(&self, hash: &str) -> RuntimeResult<CandidateView> {
        let candidate = self.candidate(hash).await?;
        let evals = match &candidate.checks.gate {
            None => Value::Null,
            Some(report) => {
                let cases: Vec<Value> = report
                    .cases
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "passed": c.result == "passed",
                                    "result": c.result, "reason": c.reason})
                    })
                    .collect();
                let failed = report.failed().count() + usize::from(report.error.is_some());
                json!({
                    "tags": report.tags,
                    "passed": report.cases.len() - report.failed().count(),
                    "failed": failed,
                    "error": report.error,
                    "cases": cases,
                })
            }
        };
        Ok(CandidateView {
            widens: candidate.delta.widens(),
            delta_text: candidate.delta.render(),
            delta: serde_json::to_value(&candidate.delta)?,
            evals,
            active: candidate.base.map(|b| b.build_hash),
        })
    }
}

/// The plain-text card of a proposal (`action.proposal.text`): what the terminal, channels and
/// logs show a reviewer.
pub fn render_text(p: &Value) -> String {
    let s = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
    let mut out = String::new();
    out.push_str(&format!("Proposed change {}: {}\n", s("id"), s("summary")));
    out.push_str(&format!("Why: {}\n", s("rationale")));
    let files = p["files"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!(
        "Files ({}; each diff below is cut on its own):\n",
        files.len()
    ));
    for f in &files {
        out.push_str(&format!("  - {}\n", file_line(f)));
    }
    out.push_str(&format!(
        "Build {}: {} errors, {} warnings\n",
        s("build"),
        p["diagnostics"]["errors"],
        p["diagnostics"]["warnings"]
    ));
    match &p["evals"] {
        Value::Null => out.push_str("Evals: no gate configured\n"),
        evals => out.push_str(&format!("Evals: {}\n", eval_summary(evals))),
    }
    let delta = s("deltaText");
    if p["widens"] == true {
        out.push_str("Capability delta (WIDENS what the agent may do):\n");
    } else {
        out.push_str("Capability delta:\n");
    }
    if delta.trim().is_empty() {
        out.push_str("  (no capability changes)\n");
    } else {
        for line in delta.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str("Diff:\n");
    out.push_str(&s("diff"));
    out
}

/// One changed file in the card's list: `modified tools/deploy.sh (812 -> 1904 bytes; diff cut:
/// 3 KiB not shown)`, `renamed tools/a.sh -> tools/b.sh (mode 755 -> 644)`.
fn file_line(f: &Value) -> String {
    let s = |k: &str| f[k].as_str().unwrap_or_default();
    let n = |k: &str| f[k].as_u64();
    let path = s("path");
    let mut line = match s("status") {
        "renamed" => format!("renamed {} -> {path}", s("from")),
        "mode" => format!("mode changed {path}"),
        status => format!("{status} {path}"),
    };
    let mut notes = Vec::new();
    match (n("bytesBefore"), n("bytesAfter")) {
        (Some(a), Some(b)) if a != b => notes.push(format!("{a} -> {b} bytes")),
        (None, Some(b)) => notes.push(format!("{b} bytes")),
        _ => {}
    }
    match (f["modeBefore"].as_str(), f["modeAfter"].as_str()) {
        (Some(a), Some(b)) if a != b => notes.push(format!("mode {a} -> {b}")),
        (None, Some(b)) => notes.push(format!("mode {b}")),
        _ => {}
    }
    if let Some(bytes) = f["cut"]["bytes"].as_u64() {
        notes.push(format!(
            "diff cut: {} not shown",
            size(usize::try_from(bytes).unwrap_or(usize::MAX))
        ));
    }
    if !notes.is_empty() {
        line.push_str(&format!(" ({})", notes.join("; ")));
    }
    line
}

/// One line about gate eval results: `3 passed, 0 failed (tags: smoke)`.
fn eval_summary(evals: &Value) -> String {
    let passed = evals["passed"].as_u64().unwrap_or(0);
    let failed = evals["failed"].as_u64().unwrap_or(0);
    let tags = evals["tags"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    if tags.is_empty() {
        format!("{passed} passed, {failed} failed")
    } else {
        format!("{passed} passed, {failed} failed (tags: {tags})")
    }
}

/// A proposal's release candidate as shown: delta against the active release, gate evals.
pub(super) struct CandidateView {
    /// The delta (JSON), `null` when none could be computed.
    pub(crate) delta: Value,
    /// Whether the delta widens anything.
    pub(crate) widens: bool,
    /// The delta rendered, one change a line.
    pub(crate) delta_text: String,
    /// Gate evals: `{passed, failed, tags, cases: [{id, passed, reason}]}`, or `null` without a
    /// gate.
    pub(crate) evals: Value,
    /// The active build it is compared with.
    pub(crate) active: Option<String>,
}

impl CandidateView {
    /// The failing gate cases, one a line, when any failed.
    fn failed_evals(&self) -> Option<String> {
        let failed: Vec<String> = self.evals["cases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["passed"] == false)
            .map(|c| {
                format!(
                    "- {}: {}",
                    c["id"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or("failed")
                )
            })
            .collect();
        if failed.is_empty() && self.evals["failed"].as_u64().unwrap_or(0) == 0 {
            None
        } else {
            Some(failed.join("\n"))
        }
    }
}

/// The request shown for a staged proposal of `call`: kind and action (with `proposal`), read
/// from the staging folder; `None` when `call` is no proposal or nothing is staged.
pub(crate) fn staged_request(state_dir: &Path, call: &ToolCallRecord) -> Option<(String, Value)> {
    if call.name != PROPOSE_CHANGE {
        return None;
    }
    let id = proposal_id(call);
    let text = std::fs::read(staging_dir(state_dir, &id).join("proposal.json")).ok()?;
    let proposal: Value = serde_json::from_slice(&text).ok()?;
    let mut action = ev::action(call);
    action["proposal"] = proposal;
    Some((REQUEST_KIND.to_owned(), action))
}

/// Removes the staging folder of `call`'s proposal, if it is one (its turn ended without an
/// answer: cancelled, failed, out of time).
pub(crate) fn discard_staged(state_dir: &Path, call: &ToolCallRecord) {
    if call.name == PROPOSE_CHANGE {
        let _ = std::fs::remove_dir_all(staging_dir(state_dir, &proposal_id(call)));
    }
}

/// `change.proposed`: what was offered for approval (the proposal without its file contents).
pub(crate) fn proposed_event(call: &ToolCallRecord, action: &Value) -> Value {
    let p = &action["proposal"];
    let files: Vec<Value> = p["files"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let mut f = f.clone();
            if let Some(map) = f.as_object_mut() {
                map.remove("diff");
            }
            f
        })
        .collect();
    json!({
        "id": p["id"], "callId": call.call_id, "summary": p["summary"],
        "rationale": p["rationale"], "files": files, "build": p["build"],
        "diagnostics": {"errors": p["diagnostics"]["errors"], "warnings": p["diagnostics"]["warnings"]},
        "evals": p["evals"], "delta": p["delta"], "widens": p["widens"],
    })
}
