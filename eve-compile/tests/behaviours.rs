//! `agent.yaml` fields of the agent behaviours: `strategy`, `critic`, `hollow_check`,
//! `lean_context`, `limits.phases`, and tools' `phase: explore`; bad values are diagnostics
//! naming the field.

use eve_compile::{Phase, Strategy};

use crate::support::TestAgent;

fn with_yaml(yaml: &str) -> TestAgent {
    TestAgent::minimal().file("agent.yaml", yaml)
}

fn errors(agent: &TestAgent) -> Vec<String> {
    agent.check_mem().errors()
}

#[test]
fn the_behaviour_fields_compile_into_the_manifest() {
    let agent = with_yaml(
        "strategy: reflect\nhollow_check: true\ncritic: {model: mock/echo, instructions: Check it., max_rounds: 3}\n\
         lean_context: {max_inline_tools: 20, keep_inline: 5, cut_lines: 30}\n\
         limits:\n  max_steps_per_turn: 8\n  phases: {explore: 0.25, execute: 0.5, converge: 0.25, explore_tools: [bash]}\n",
    )
    .file(
        "tools/probe.yaml",
        "description: Probe.\nphase: explore\nrun: [echo]\n",
    );
    let checked = agent.check_mem();
    assert_eq!(errors(&agent), Vec::<String>::new());
    let config = &checked.output.manifest.agent.config;
    assert_eq!(config.strategy, Strategy::Reflect);
    assert!(config.hollow_check);
    let critic = config.critic.as_ref().unwrap();
    assert_eq!(critic.model.as_deref(), Some("mock/echo"));
    assert_eq!(critic.max_rounds, 3);
    assert_eq!(config.lean_context.max_inline_tools, 20);
    assert_eq!(config.lean_context.keep_inline, 5);
    assert_eq!(config.lean_context.cut_lines, 30);
    let phases = config.limits.phases.as_ref().unwrap();
    assert_eq!(
        (phases.explore, phases.execute, phases.converge),
        (0.25, 0.5, 0.25)
    );
    assert_eq!(phases.explore_tools, ["bash"]);
    assert_eq!(phases.at(0.1), Phase::Explore);
    assert_eq!(phases.at(0.5), Phase::Execute);
    assert_eq!(phases.at(0.75), Phase::Converge);
    let probe = checked
        .output
        .manifest
        .agent
        .tools
        .iter()
        .find(|t| t.name == "probe")
        .unwrap();
    assert_eq!(probe.phase, Some(Phase::Explore));
}

#[test]
fn a_critic_subagent_folder_is_the_critic_of_reflect() {
    let agent = with_yaml("strategy: reflect\n")
        .file(
            "subagents/critic/agent.yaml",
            "description: Reviews answers.\nmodel: mock/echo\n",
        )
        .file("subagents/critic/instructions.md", "Check every date.\n");
    let checked = agent.check_mem();
    let critic = checked.output.manifest.agent.config.critic.clone().unwrap();
    assert_eq!(critic.instructions, "Check every date.");
    assert_eq!(critic.model.as_deref(), Some("mock/echo"));
    assert_eq!(critic.max_rounds, 2);
}

#[test]
fn defaults_leave_the_manifest_as_it_was() {
    let checked = TestAgent::minimal().check_mem();
    let json = serde_json::to_value(&checked.output.manifest.agent.config).unwrap();
    for key in ["strategy", "critic", "hollow_check", "lean_context"] {
        assert!(json.get(key).is_none(), "{key} in {json}");
    }
    assert!(json["limits"].get("phases").is_none());
}

#[test]
fn bad_values_are_diagnostics_naming_the_field() {
    let cases = [
        ("strategy: plans\n", "`strategy` is `plans`"),
        (
            "limits:\n  phases: {explore: 0.5, execute: 0.5, converge: 0.5}\n",
            "add up to 1.5",
        ),
        (
            "limits:\n  phases: {explore: 2, execute: 0.5, converge: 0.25}\n",
            "`limits.phases.explore` is 2",
        ),
        (
            "limits:\n  phases: {explore: 0.5, execute: 0.5}\n",
            "no `converge` share",
        ),
        ("limits:\n  phases: fast\n", "must be a mapping of shares"),
        (
            "critic: {instructions: x}\n",
            "only `strategy: reflect` uses a critic",
        ),
        (
            "strategy: reflect\ncritic: {max_rounds: 0}\n",
            "`critic.max_rounds` is 0",
        ),
        (
            "strategy: reflect\ncritic: {model: gpt}\n",
            "`critic.model` is `gpt`",
        ),
        (
            "lean_context: {cut_lines: 2}\n",
            "`lean_context.cut_lines` is 2",
        ),
        (
            "lean_context: {max_inline_tools: 4, keep_inline: 9}\n",
            "more than `max_inline_tools`",
        ),
        (
            "lean_context: 3\n",
            "`lean_context` must be true, false or a mapping",
        ),
        ("hollow_check: maybe\n", "hollow_check"),
    ];
    for (yaml, expected) in cases {
        let found = errors(&with_yaml(yaml));
        assert!(
            found
                .iter()
                .any(|e| e.contains(expected) && e.contains("E011") && e.contains("agent.yaml")),
            "{yaml:?}: expected {expected:?} in {found:?}"
        );
    }
    let tool = TestAgent::minimal().file(
        "tools/probe.yaml",
        "description: Probe.\nphase: converge\nrun: [echo]\n",
    );
    let found = errors(&tool);
    assert!(
        found
            .iter()
            .any(|e| e.contains("`phase` is `converge`") && e.contains("tools/probe.yaml")),
        "{found:?}"
    );
}
