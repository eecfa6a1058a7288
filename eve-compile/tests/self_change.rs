//! `self_change` in `agent.yaml`: off by default, `true` on the root agent turns on the
//! `propose_change` tool; a non-boolean, or the field in a subagent, is a coded diagnostic
//! naming the file and the field; an agent's own tool cannot take the built-in's name.

use crate::support::TestAgent;

fn errors(agent: &TestAgent) -> Vec<String> {
    agent.check_mem().errors()
}

#[test]
fn self_change_is_opt_in_and_a_boolean() {
    let off = TestAgent::minimal().file("agent.yaml", "default_tools: false\n");
    assert!(!off.check_mem().output.manifest.agent.config.self_change);
    let on = TestAgent::minimal().file("agent.yaml", "self_change: true\n");
    assert_eq!(errors(&on), Vec::<String>::new());
    assert!(on.check_mem().output.manifest.agent.config.self_change);
    for bad in ["\"yes\"", "1", "[true]"] {
        let agent = TestAgent::minimal().file("agent.yaml", format!("self_change: {bad}\n"));
        let errors = errors(&agent);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("E011 agent/agent.yaml:1")
                    && e.contains("`self_change` must be true or false")),
            "{bad}: {errors:?}"
        );
    }
}

#[test]
fn a_subagent_cannot_turn_on_self_change() {
    let agent = TestAgent::minimal()
        .file("subagents/helper/instructions.md", "Help.\n")
        .file(
            "subagents/helper/agent.yaml",
            "description: Helps.\nself_change: true\n",
        );
    let errors = errors(&agent);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("subagents/helper/agent.yaml")
                && e.contains("`self_change` is set in a subagent")),
        "{errors:?}"
    );
    let sub = &agent.check_mem().output.manifest.agent.subagents[0];
    assert!(!sub.config.self_change);
}

#[test]
fn propose_change_is_reserved_when_self_change_is_on() {
    let tool = "#!/bin/sh\n# ---\n# description: Not the built-in.\n# ---\necho hi\n";
    let on = TestAgent::minimal()
        .file("agent.yaml", "self_change: true\n")
        .file("tools/propose_change.sh", tool);
    let errors = errors(&on);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("E006 agent/tools/propose_change.sh")
                && e.contains("`propose_change` is reserved")),
        "{errors:?}"
    );
    // Without self-change the name is the agent's to use.
    let off = TestAgent::minimal().file("tools/propose_change.sh", tool);
    assert_eq!(self::errors(&off), Vec::<String>::new());
}
