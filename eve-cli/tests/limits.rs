//! Session budgets seen from the terminal: `limits.max_cost_usd` with the agent's prices stops a
//! turn before the next model call, with the reason.

use std::process::Command;

const EVE: &str = env!("CARGO_BIN_EXE_eve");

#[test]
fn the_cost_limit_stops_the_turn_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = tmp.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::write(agent.join("instructions.md"), "Test agent.\n").unwrap();
    std::fs::write(
        agent.join("agent.yaml"),
        "default_tools: false\nlimits:\n  max_cost_usd: 0.05\n  price_per_million: {input: 1000, output: 1000}\n",
    )
    .unwrap();
    std::fs::write(
        agent.join("tools/noop.yaml"),
        "description: Does nothing.\neffect: read\nrun: [\"true\"]\n",
    )
    .unwrap();
    // Each step reports 100 tokens: $0.10 at $1,000 per million, over the $0.05 budget.
    let script = r#"[{"tool_calls": [{"name": "noop"}], "usage": {"input_tokens": 90, "output_tokens": 10}},
                     {"text": "never reached", "usage": {"input_tokens": 90, "output_tokens": 10}}]"#;
    let run = Command::new(EVE)
        .args(["run", "go"])
        .current_dir(tmp.path())
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env("EVE_MODEL", "mock/echo")
        .env("EVE_MOCK_SCRIPT", script)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success(),
        "a stopped turn is a failure: {stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("never reached"),
        "no model call after the budget: {stdout}"
    );
    assert!(
        stderr.contains("max_cost_usd"),
        "the reason is said: {stderr}"
    );
}
