//! Unit tests of the capability delta, on small manifests built from JSON.

use super::*;

pub(super) fn manifest(tools: Vec<Tool>) -> Manifest {
    let json = serde_json::json!({
        "version": 1,
        "eve_version": "0",
        "agent": {
            "name": "a", "path": "", "instructions": "",
            "config": {
                "compaction": {"enabled": true, "threshold": 0.8},
                "limits": {"max_steps_per_turn": 50},
                "default_tools": false,
                "turn_policy": "queue"
            },
            "tools": [], "skills": [], "subagents": [], "schedules": [], "hooks": [],
            "connections": [], "channels": [],
            "sandbox": {"provider": "isolated", "workspace": [], "timeout_ms": 1, "output_limit": 1}
        }
    });
    let mut m: Manifest = serde_json::from_value(json).unwrap();
    m.agent.tools = tools;
    m
}

pub(super) fn tool(name: &str, effect: Effect, approval: Approval) -> Tool {
    Tool {
        name: name.to_owned(),
        source: format!("tools/{name}.sh"),
        description: String::new(),
        input_schema: serde_json::json!({"type": "object"}),
        schema_hash: String::new(),
        approval,
        effect,
        timeout_ms: 1,
        output_limit: 1,
        deferred: false,
        env: Vec::new(),
        dynamic: Vec::new(),
        phase: None,
        ends_turn: false,
        approval_prompt: None,
        runner: Runner::Command {
            argv: vec!["true".to_owned()],
        },
    }
}

#[test]
fn same_manifest_has_no_delta() {
    let m = manifest(vec![tool("x", Effect::Read, Approval::Never)]);
    let d = capability_delta(Some(&m), &m);
    assert!(d.is_empty(), "{d:?}");
    assert!(!d.widens());
}

#[test]
fn added_write_tool_and_loosened_approval_widen() {
    let a = manifest(vec![tool("x", Effect::Read, Approval::Always)]);
    let b = manifest(vec![
        tool("x", Effect::Read, Approval::Never),
        tool("y", Effect::Write, Approval::Never),
    ]);
    let d = capability_delta(Some(&a), &b);
    let kinds: Vec<_> = d
        .changes
        .iter()
        .map(|c| (c.kind, c.subject.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (ChangeKind::ApprovalLoosened, "x"),
            (ChangeKind::ToolAdded, "y")
        ]
    );
    assert!(d.changes.iter().all(|c| c.widening));
    // Back again: nothing widens.
    let back = capability_delta(Some(&b), &a);
    assert!(!back.widens(), "{back:?}");
    assert!(back.render().contains("tool_removed y"));
    assert!(d.render().starts_with("! "));
}

#[test]
fn effect_order_and_first_build() {
    let a = manifest(vec![tool("x", Effect::Read, Approval::Never)]);
    let b = manifest(vec![tool("x", Effect::Idempotent, Approval::Never)]);
    let d = capability_delta(Some(&a), &b);
    assert_eq!(d.changes[0].kind, ChangeKind::EffectWidened);
    let d = capability_delta(Some(&b), &a);
    assert_eq!(d.changes[0].kind, ChangeKind::EffectNarrowed);
    assert!(!d.widens());
    let first = capability_delta(None, &a);
    assert_eq!(first.changes[0].kind, ChangeKind::ToolAdded);
    assert!(first.widens());
}

#[test]
fn network_policy_and_subagents() {
    let a = manifest(vec![]);
    let mut b = a.clone();
    b.agent.sandbox.network = Network::Allow(vec!["api.example.com".to_owned()]);
    b.agent.config.activation = Activation::Review;
    let d = capability_delta(Some(&a), &b);
    assert!(
        d.changes
            .iter()
            .any(|c| c.kind == ChangeKind::NetworkWidened && c.widening)
    );
    assert!(
        d.changes
            .iter()
            .any(|c| c.kind == ChangeKind::PolicyTightened && !c.widening)
    );
    // Loosening the policy is itself a widening.
    let d = capability_delta(Some(&b), &a);
    assert!(
        d.changes
            .iter()
            .any(|c| c.kind == ChangeKind::PolicyLoosened && c.widening)
    );
    let mut c = a.clone();
    let mut sub = manifest(vec![tool("deep", Effect::Write, Approval::Never)]).agent;
    sub.name = "helper".to_owned();
    c.agent.subagents.push(sub);
    let d = capability_delta(Some(&a), &c);
    let subjects: Vec<_> = d.changes.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, ["helper", "helper/deep"]);
}

#[test]
fn widening_web_rules_is_a_network_capability() {
    let a = manifest(vec![]);
    let widened = |d: &Delta, subject: &str| {
        d.changes
            .iter()
            .any(|c| c.kind == ChangeKind::NetworkWidened && c.widening && c.subject == subject)
    };
    // An `allow` entry added (here: the metadata address) widens.
    let mut b = a.clone();
    b.agent.config.web.allow = vec!["169.254.169.254".to_owned()];
    let d = capability_delta(Some(&a), &b);
    assert!(widened(&d, "web.allow"), "{:?}", d.changes);
    assert!(d.widens());
    // Taken back: listed, not widening.
    let d = capability_delta(Some(&b), &a);
    assert!(
        d.changes
            .iter()
            .any(|c| c.subject == "web.allow" && !c.widening)
    );
    assert!(!d.widens(), "{:?}", d.changes);
    // A `deny` entry removed widens; one added does not.
    let mut denied = a.clone();
    denied.agent.config.web.deny = vec!["*.internal.example".to_owned()];
    assert!(widened(&capability_delta(Some(&denied), &a), "web.deny"));
    assert!(!capability_delta(Some(&a), &denied).widens());
    // `public: false` back to `true` widens.
    let mut closed = a.clone();
    closed.agent.config.web.public = false;
    assert!(widened(&capability_delta(Some(&closed), &a), "web.public"));
    assert!(!capability_delta(Some(&a), &closed).widens());
    // A first build lists what it allows beyond the defaults.
    assert!(widened(&capability_delta(None, &b), "web.allow"));
    assert!(
        !capability_delta(None, &closed)
            .changes
            .iter()
            .any(|c| c.subject.starts_with("web."))
    );
    // The same rules: nothing.
    assert!(capability_delta(Some(&b), &b).changes.is_empty());
}
