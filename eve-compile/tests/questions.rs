//! The fields of questions and turn endings: `ask_question`/`no_reply` in `agent.yaml`, and a
//! tool's `ends_turn` and `approval_prompt` (whose placeholders `eve build` checks); an authored
//! tool cannot take the name of a built-in the agent opted in to.

use crate::support::TestAgent;

#[test]
fn the_fields_compile_into_the_manifest() {
    let agent = TestAgent::minimal()
        .file("agent.yaml", "ask_question: true\nno_reply: true\n")
        .file(
            "tools/refund.yaml",
            "description: Refund.\nends_turn: true\n\
             approval_prompt: \"Refund {{input.amount}} to {{ input.charge.id }}?\"\nrun: [echo]\n",
        );
    let checked = agent.check_mem();
    assert_eq!(checked.errors(), Vec::<String>::new());
    let manifest = &checked.output.manifest;
    assert!(manifest.agent.config.ask_question && manifest.agent.config.no_reply);
    let tool = &manifest.agent.tools[0];
    assert!(tool.ends_turn);
    assert_eq!(
        tool.approval_prompt.as_deref(),
        Some("Refund {{input.amount}} to {{ input.charge.id }}?")
    );
}

#[test]
fn a_bad_placeholder_and_a_taken_name_are_errors() {
    let agent = TestAgent::minimal()
        .file("agent.yaml", "ask_question: true\n")
        .file(
            "tools/refund.yaml",
            "description: Refund.\napproval_prompt: \"Refund {{env.SECRET}}?\"\nrun: [echo]\n",
        )
        .file(
            "tools/ask_question.yaml",
            "description: Mine.\nrun: [echo]\n",
        );
    let errors = agent.check_mem().errors().join("\n");
    assert!(
        errors.contains("`approval_prompt` has `{{env.SECRET}}`"),
        "{errors}"
    );
    assert!(
        errors.contains("`ask_question` is reserved by eve"),
        "{errors}"
    );
    // Without the opt-in the name is the agent's own.
    let agent = TestAgent::minimal().file(
        "tools/ask_question.yaml",
        "description: Mine.\nrun: [echo]\n",
    );
    assert_eq!(agent.check_mem().errors(), Vec::<String>::new());
}
