//! Tools in the delta: which the model may call (the built-ins included: those of
//! `default_tools`, with the effects the runtime gives them from the one table both read,
//! `web_search` when a provider is set, `memory` and `propose_change`), and how each one's effect, approval, sandbox, environment,
//! dynamic-tool events, HTTP request, command line and bounds moved.

use std::collections::{BTreeMap, BTreeSet};

use super::code::runner_summary;
use super::hooks::list;
use super::sandbox::describe_sandbox;
use super::{ChangeKind, Differ};
use crate::manifest::*;

/// Rank of an effect: higher does more to the world.
fn effect_rank(e: Effect) -> u8 {
    match e {
        Effect::Read => 0,
        Effect::Idempotent => 1,
        Effect::Write => 2,
    }
}

fn effect_name(e: Effect) -> &'static str {
    match e {
        Effect::Read => "read",
        Effect::Idempotent => "idempotent",
        Effect::Write => "write",
    }
}

/// Rank of an approval: higher asks a human more.
fn approval_rank(a: Approval) -> u8 {
    match a {
        Approval::Never => 0,
        Approval::Auto => 1,
        Approval::Once => 2,
        Approval::Always => 3,
    }
}

pub(super) fn approval_name(a: Approval) -> &'static str {
    match a {
        Approval::Never => "never",
        Approval::Auto => "auto",
        Approval::Once => "once",
        Approval::Always => "always",
    }
}

/// What the delta compares of one tool.
pub(super) struct ToolView {
    effect: Effect,
    approval: Approval,
    sandbox: Option<EffectiveSandbox>,
    /// The tool of the build (`None` for a built-in).
    tool: Option<Tool>,
    /// The scopes the built-in `memory` writes.
    scopes: Vec<String>,
}

impl ToolView {
    fn builtin(effect: Effect, approval: Approval) -> Self {
        Self {
            effect,
            approval,
            sandbox: None,
            tool: None,
            scopes: Vec::new(),
        }
    }
}

/// The built-in `memory` tool's name.
const MEMORY: &str = "memory";
/// The built-in `propose_change` tool's name.
const PROPOSE_CHANGE: &str = "propose_change";

pub(super) fn tools_of(agent: &Agent) -> BTreeMap<String, ToolView> {
    let mut out = BTreeMap::new();
    for t in &agent.tools {
        out.insert(
            t.name.clone(),
            ToolView {
                effect: t.effect,
                approval: t.approval,
                sandbox: agent.effective_sandbox(t),
                tool: Some(t.clone()),
                scopes: Vec::new(),
            },
        );
    }
    for (name, effect) in DEFAULT_TOOL_EFFECTS {
        // `agent` (a copy of the root agent) is offered to the root agent only.
        let offered = *name != AGENT_TOOL || agent.path.is_empty();
        if offered && agent.config.builtin_on(name) {
            if out.contains_key(*name) {
                continue;
            }
            let approval = agent
                .config
                .approvals
                .get(*name)
                .copied()
                .unwrap_or_default();
            let mut view = ToolView::builtin(*effect, approval);
            view.sandbox = (*name == "bash").then(|| agent.bash_sandbox());
            out.insert((*name).to_owned(), view);
        }
    }
    if let Some(memory) = &agent.config.memory
        && !out.contains_key(MEMORY)
    {
        let mut view = ToolView::builtin(Effect::Write, Approval::Never);
        view.scopes = memory
            .scopes
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        out.insert(MEMORY.to_owned(), view);
    }
    if agent.config.self_change && agent.path.is_empty() {
        out.insert(
            PROPOSE_CHANGE.to_owned(),
            ToolView::builtin(PROPOSE_CHANGE_EFFECT, Approval::Always),
        );
    }
    out
}

pub(super) fn tool_summary(t: &ToolView) -> String {
    let mut s = format!(
        "effect {}, approval {}",
        effect_name(t.effect),
        approval_name(t.approval)
    );
    if let Some(sb) = &t.sandbox {
        s.push_str(&format!(", {}", describe_sandbox(sb)));
    }
    if !t.scopes.is_empty() {
        s.push_str(&format!(", scopes {}", t.scopes.join(",")));
    }
    s
}

/// `scheme://host[:port]` of a URL template (its text up to the path), lowercased.
fn origin(url: &str) -> String {
    let after = url.find("://").map_or(0, |i| i + 3);
    let end = url[after..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after + i);
    url[..end].to_ascii_lowercase()
}

/// Every `${VAR}` named in `text`.
fn var_refs(text: &str, out: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find('}') else { break };
        out.insert(rest[..end].to_owned());
        rest = &rest[end..];
    }
}

/// The `${VAR}` values an HTTP request sends (URL, headers, body).
fn request_vars(r: &HttpRequest) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    var_refs(&r.url, &mut out);
    for v in r.headers.values() {
        var_refs(v, &mut out);
    }
    if let Some(body) = &r.body {
        var_refs(&body.to_string(), &mut out);
    }
    out
}

impl Differ {
    pub(super) fn tool_changed(&mut self, subject: &str, old: &ToolView, new: &ToolView) {
        if old.effect != new.effect {
            let widened = effect_rank(new.effect) > effect_rank(old.effect);
            self.push(
                if widened {
                    ChangeKind::EffectWidened
                } else {
                    ChangeKind::EffectNarrowed
                },
                subject.to_owned(),
                Some(effect_name(old.effect).to_owned()),
                Some(effect_name(new.effect).to_owned()),
                widened,
            );
        }
        self.approval(subject, old.approval, new.approval);
        self.process_sandbox(subject, old.sandbox.as_ref(), new.sandbox.as_ref());
        if old.scopes != new.scopes {
            let wider = new.scopes.iter().any(|s| !old.scopes.contains(s));
            self.push(
                ChangeKind::ToolChanged,
                subject.to_owned(),
                Some(format!("scopes {}", list(&old.scopes))),
                Some(format!("scopes {}", list(&new.scopes))),
                wider,
            );
        }
        if let (Some(a), Some(b)) = (&old.tool, &new.tool) {
            self.tool_definition(subject, a, b, new.sandbox.as_ref());
        }
    }

    /// What a tool of the build runs and is given: its command line (host code when the tool
    /// runs on the host), environment, dynamic-tool events, HTTP request, timeout and output
    /// cap.
    fn tool_definition(
        &mut self,
        subject: &str,
        old: &Tool,
        new: &Tool,
        sandbox: Option<&EffectiveSandbox>,
    ) {
        if old.env != new.env {
            let added = new.env.iter().any(|e| !old.env.contains(e));
            self.push(
                ChangeKind::ToolChanged,
                subject.to_owned(),
                Some(format!("env {}", list(&old.env))),
                Some(format!("env {}", list(&new.env))),
                added,
            );
        }
        if old.dynamic != new.dynamic {
            // A provider defines tools the delta never sees; more events define more.
            let more = new.dynamic.iter().any(|e| !old.dynamic.contains(e));
            self.push(
                ChangeKind::ToolChanged,
                subject.to_owned(),
                Some(format!("dynamic {}", list(&old.dynamic))),
                Some(format!("dynamic {}", list(&new.dynamic))),
                more,
            );
        }
        match (&old.runner, &new.runner) {
            (a, b) if a == b => {}
            (Runner::Http(a), Runner::Http(b)) => {
                let (va, vb) = (request_vars(a), request_vars(b));
                let elsewhere = origin(&a.url) != origin(&b.url);
                let more = vb.iter().any(|v| !va.contains(v));
                self.push(
                    ChangeKind::ToolChanged,
                    subject.to_owned(),
                    Some(format!("{} {}", a.method, a.url)),
                    Some(format!("{} {}", b.method, b.url)),
                    elsewhere || more,
                );
            }
            (Runner::OpenApi(oa), Runner::OpenApi(ob)) => {
                // Another origin, or a request that now carries other secrets, widens reach.
                let elsewhere = origin(&oa.base_url) != origin(&ob.base_url);
                let more = oa.auth != ob.auth && ob.auth.is_some();
                self.push(
                    ChangeKind::ToolChanged,
                    subject.to_owned(),
                    Some(runner_summary(&old.runner)),
                    Some(runner_summary(&new.runner)),
                    elsewhere || more,
                );
            }
            (a, b) => {
                // A process's command line: host code when it runs on the host. An isolated
                // one is bounded by its sandbox, unless it became (or stopped being) a request.
                let host = sandbox.is_some_and(|s| s.provider == Provider::Host);
                let kind = matches!(a, Runner::Http(_) | Runner::OpenApi(_))
                    != matches!(b, Runner::Http(_) | Runner::OpenApi(_));
                if host || kind {
                    self.push(
                        if host {
                            ChangeKind::HostCodeChanged
                        } else {
                            ChangeKind::ToolChanged
                        },
                        subject.to_owned(),
                        Some(runner_summary(a)),
                        Some(runner_summary(b)),
                        true,
                    );
                }
            }
        }
        self.timeout(
            subject,
            "timeout_ms",
            Some(old.timeout_ms),
            Some(new.timeout_ms),
        );
        self.timeout(
            subject,
            "output_limit",
            Some(old.output_limit),
            Some(new.output_limit),
        );
    }

    pub(super) fn approval(&mut self, subject: &str, old: Approval, new: Approval) {
        if old == new {
            return;
        }
        let loosened = approval_rank(new) < approval_rank(old);
        self.push(
            if loosened {
                ChangeKind::ApprovalLoosened
            } else {
                ChangeKind::ApprovalTightened
            },
            subject.to_owned(),
            Some(approval_name(old).to_owned()),
            Some(approval_name(new).to_owned()),
            loosened,
        );
    }
}
