//! `agent.yaml` fields of the release policy: `activation`, `gate`, `rollback`. They compile into
//! the root agent's config; bad values, and any of them in a subagent, are diagnostics naming the
//! file, the line and the field.

use eve_compile::{Activation, RollbackPolicy};

use crate::support::TestAgent;

fn with_yaml(yaml: &str) -> TestAgent {
    TestAgent::minimal().file("agent.yaml", yaml)
}

fn errors(agent: &TestAgent) -> Vec<String> {
    agent.check_mem().errors()
}

#[test]
fn the_policy_compiles_into_the_manifest() {
    let agent = with_yaml(
        "activation: review\ngate: [smoke, safety, smoke]\nrollback: {failures: 3, window: 10m}\n",
    );
    assert_eq!(errors(&agent), Vec::<String>::new());
    let config = agent.check_mem().output.manifest.agent.config;
    assert_eq!(config.activation, Activation::Review);
    assert_eq!(config.gate, ["safety", "smoke"], "sorted, once each");
    assert_eq!(
        config.rollback,
        Some(RollbackPolicy {
            failures: 3,
            window_ms: 600_000
        })
    );
    // Absent: auto, no gate, no rollback (and the manifest does not mention them).
    let plain = with_yaml("default_tools: false\n")
        .check_mem()
        .output
        .manifest;
    assert_eq!(plain.agent.config.activation, Activation::Auto);
    assert!(plain.agent.config.gate.is_empty() && plain.agent.config.rollback.is_none());
    let json = serde_json::to_string(&plain).unwrap();
    assert!(
        !json.contains("activation") && !json.contains("rollback"),
        "{json}"
    );
}

#[test]
fn bad_values_are_diagnostics_naming_the_field() {
    let cases = [
        ("activation: maybe\n", "activation"),
        ("gate: [\"two words\"]\n", "gate"),
        ("gate: {smoke: true}\n", "gate"),
        ("rollback: 3\n", "rollback"),
        ("rollback: {failures: 0, window: 1m}\n", "rollback.failures"),
        ("rollback: {window: 1m}\n", "no `failures`"),
        ("rollback: {failures: 2}\n", "no `window`"),
        ("rollback: {failures: 2, window: soon}\n", "window"),
    ];
    for (yaml, needle) in cases {
        let errs = errors(&with_yaml(yaml));
        assert!(
            errs.iter()
                .any(|e| e.contains("agent/agent.yaml:1") && e.contains(needle)),
            "{yaml:?}: {errs:?}"
        );
    }
}

#[test]
fn an_unknown_rollback_field_is_a_warning() {
    let agent = with_yaml("rollback: {failures: 2, window: 1m, when: now}\n");
    let checked = agent.check_mem();
    assert!(
        checked
            .diagnostics()
            .iter()
            .any(|d| !d.is_error() && d.message.contains("when")),
        "{:?}",
        checked.diagnostics()
    );
    assert!(checked.output.manifest.agent.config.rollback.is_some());
}

#[test]
fn a_subagent_cannot_set_the_projects_policy() {
    let agent = TestAgent::minimal()
        .file("subagents/helper/instructions.md", "Help.\n")
        .file(
            "subagents/helper/agent.yaml",
            "description: Helps.\nactivation: auto\ngate: []\n",
        );
    let errs = errors(&agent);
    assert!(
        errs.iter()
            .any(|e| e.contains("subagents/helper/agent.yaml")
                && e.contains("`activation` is set in a subagent")),
        "{errs:?}"
    );
}
