//! Tools in the delta: which the model may call (the built-ins of `default_tools` included), and
//! how each one's effect, approval and sandbox moved.

use std::collections::BTreeMap;

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
}

/// Built-in tools offered with `default_tools: true`, with the effect the runtime gives them.
const DEFAULT_TOOLS: &[(&str, Effect)] = &[
    ("bash", Effect::Write),
    ("read_file", Effect::Read),
    ("write_file", Effect::Write),
];

pub(super) fn tools_of(agent: &Agent) -> BTreeMap<String, ToolView> {
    let mut out = BTreeMap::new();
    for t in &agent.tools {
        out.insert(
            t.name.clone(),
            ToolView {
                effect: t.effect,
                approval: t.approval,
                sandbox: agent.effective_sandbox(t),
            },
        );
    }
    if agent.config.default_tools {
        for (name, effect) in DEFAULT_TOOLS {
            if out.contains_key(*name) {
                continue;
            }
            let sandbox = (*name == "bash").then(|| agent.bash_sandbox());
            out.insert(
                (*name).to_owned(),
                ToolView {
                    effect: *effect,
                    approval: agent
                        .config
                        .approvals
                        .get(*name)
                        .copied()
                        .unwrap_or_default(),
                    sandbox,
                },
            );
        }
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
    s
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
