//! All problems of a folder are reported in one build: compilation never stops at the first one.

use std::collections::BTreeSet;

use eve_discover::Code;

use crate::support::TestAgent;

const TOOL_OK: &str = "description: Search.\ninput:\n  type: object\nrun: [echo]\n";

/// Five different mistakes in five files: no instructions, a bad schema type, a bad cron, a
/// subagent without description, an invalid tool name. Plus two more for good measure.
fn five_mistakes() -> TestAgent {
    TestAgent::new()
        .file("agent.yaml", "model: mock/echo\n")
        .file(
            "tools/weather.yaml",
            "description: Weather.\ninput:\n  type: object\n  properties:\n    city: {type: objekt}\nrun: [echo]\n",
        )
        .file(
            "schedules/daily.md",
            "---\ncron: \"0 25 * * *\"\n---\nSummarise.\n",
        )
        .file("subagents/helper/instructions.md", "Help.\n")
        .file("tools/2fast.yaml", TOOL_OK)
        .exec(
            "hooks/audit.sh",
            "#!/bin/sh\n# ---\n# events: [turn.finished]\n# ---\n",
        )
        .file(
            "connections/github.yaml",
            "command: github-mcp\nurl: https://example.com/mcp\n",
        )
}

#[test]
fn five_mistakes_give_at_least_five_diagnostics_in_one_build() {
    let disk = five_mistakes().on_disk();
    let built = disk.build();
    let diags = &built.output.diagnostics;
    let codes: BTreeSet<Code> = diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.code)
        .collect();
    for expected in [
        Code::MissingInstructions,
        Code::InvalidSchema,
        Code::InvalidCron,
        Code::MissingDescription,
        Code::InvalidName,
        Code::UnknownEvent,
        Code::InvalidConnection,
    ] {
        assert!(
            codes.contains(&expected),
            "{expected} missing from {codes:?}"
        );
    }
    assert!(built.output.error_count() >= 5);
    let files: BTreeSet<&str> = diags.iter().filter_map(|d| d.file.as_deref()).collect();
    assert!(files.len() >= 5, "{files:?}");
    // A failed build writes nothing and leaves no current build behind.
    assert!(built.hash.is_none());
    assert!(!disk.project.state_dir.join("current").exists());
}

#[test]
fn several_mistakes_in_one_file_are_all_reported() {
    let checked = TestAgent::minimal()
        .file(
            "tools/search.yaml",
            "description: Search.\ninput:\n  type: object\napproval: sometimes\neffect: 3\ntimeout: soon\ndeferred: maybe\nretries: 3\nrun: [echo]\n",
        )
        .on_disk()
        .check();
    let lines: Vec<(Code, Option<u32>)> = checked
        .diagnostics()
        .iter()
        .map(|d| (d.code, d.line))
        .collect();
    assert_eq!(
        lines,
        [
            (Code::InvalidField, Some(4)),
            (Code::InvalidField, Some(5)),
            (Code::InvalidField, Some(6)),
            (Code::InvalidField, Some(7)),
            (Code::UnknownField, Some(8)),
        ],
        "{}",
        checked.rendered
    );
}

#[test]
fn diagnostics_are_sorted_by_file_and_line() {
    let checked = five_mistakes().on_disk().check();
    let keys: Vec<_> = checked
        .diagnostics()
        .iter()
        .map(|d| (d.file.clone(), d.line, d.column))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

/// Large folders are compiled on several threads: the result must be what compiling each tool
/// on its own gives, in the same order, whatever the thread count.
#[test]
fn many_tools_compile_as_each_alone() {
    let tool = |i: usize| -> (String, String) {
        let path = format!("tools/t{i:03}.yaml");
        let text = match i % 5 {
            0 => "description: Fine.\ninput:\n  type: object\nrun: [echo]\n".to_owned(),
            1 => "description: Bad type.\ninput:\n  type: objekt\nrun: [echo]\n".to_owned(),
            2 => "description: No runner.\n".to_owned(),
            3 => format!("description: Typo.\nefect: read\nrun: [echo, \"{i}\"]\n"),
            _ => "description: [unclosed\n".to_owned(),
        };
        (path, text)
    };
    let mut all = TestAgent::minimal();
    for i in 0..300 {
        let (path, text) = tool(i);
        all = all.file(&path, text);
    }
    let together = all.check_mem();
    let mut alone = Vec::new();
    for i in 0..300 {
        let (path, text) = tool(i);
        alone.extend(
            TestAgent::minimal()
                .file(&path, text)
                .check_mem()
                .diagnostics()
                .to_vec(),
        );
    }
    assert_eq!(together.diagnostics(), &alone[..]);
    let names: Vec<&str> = together
        .output
        .manifest
        .agent
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let expected: Vec<String> = (0..300)
        .filter(|i| i % 5 == 0 || i % 5 == 3)
        .map(|i| format!("t{i:03}"))
        .collect();
    assert_eq!(names, expected);
    // And twice in a row gives the same manifest and diagnostics.
    let again = all.check_mem();
    assert_eq!(again.output.manifest, together.output.manifest);
    assert_eq!(again.diagnostics(), together.diagnostics());
}

#[test]
fn a_misspelt_folder_or_provider_gets_a_did_you_mean() {
    let built = TestAgent::minimal()
        .file("agent.yaml", "model: opnai/gpt-4.1\n")
        .file("tool/search.yaml", TOOL_OK)
        .file("skill/notes.md", "---\ndescription: Notes.\n---\nx\n")
        .file("widgets/a.md", "x\n")
        .on_disk()
        .build();
    let help = |file: &str| {
        built
            .output
            .diagnostics
            .iter()
            .find(|d| d.file.as_deref() == Some(file))
            .and_then(|d| d.help.clone())
            .unwrap_or_else(|| panic!("no diagnostic for {file}"))
    };
    assert!(help("agent/tool/").starts_with("did you mean `tools/`?"));
    assert!(help("agent/skill/").starts_with("did you mean `skills/`?"));
    assert!(!help("agent/widgets/").contains("did you mean"));
    assert!(help("agent/agent.yaml").starts_with("did you mean `openai`?"));
}

/// eve's rule: a skill without `description:` is described by its first non-empty line.
#[test]
fn a_skill_without_front_matter_is_described_by_its_first_line() {
    let checked = TestAgent::minimal()
        .file(
            "skills/haiku.md",
            "\n\n# Write haiku about the weather\n\nThree lines.\n",
        )
        .file("skills/blank.md", "---\ndescription: \"\"\n---\n\n")
        .check_mem();
    let skills = &checked.output.manifest.agent.skills;
    let described: Vec<(&str, &str)> = skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str()))
        .collect();
    assert_eq!(
        described,
        [("blank", ""), ("haiku", "Write haiku about the weather")]
    );
    let warned: Vec<&str> = checked
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::MissingToolDescription)
        .map(|d| d.file.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(warned, ["agent/skills/blank.md"]);
}
