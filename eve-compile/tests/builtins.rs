//! `default_tools` in its three forms, and an authored tool replacing a built-in: which built-ins
//! the manifest says are on, and the notes the build prints.

use eve_discover::Code;

use crate::support::TestAgent;

const TOOL: &str = "description: My own.\ninput:\n  type: object\nrun: [echo]\n";

/// The built-ins on for an `agent.yaml` of `yaml`, with the codes the build reported.
fn on(yaml: Option<&str>, extra: &[(&str, &str)]) -> (Vec<&'static str>, Vec<Code>) {
    let mut agent = TestAgent::minimal();
    if let Some(yaml) = yaml {
        agent = agent.file("agent.yaml", yaml);
    }
    for (path, body) in extra {
        agent = agent.file(path, *body);
    }
    let checked = agent.check_mem();
    let codes = checked.diagnostics().iter().map(|d| d.code).collect();
    (checked.output.manifest.agent.config.builtins_on(), codes)
}

#[test]
fn default_tools_is_a_bool_a_list_or_a_map() {
    let defaults = ["bash", "read_file", "write_file", "web_fetch", "agent"];
    assert_eq!(on(None, &[]), (defaults.to_vec(), vec![]));
    assert_eq!(on(Some("default_tools: true\n"), &[]).0, defaults);
    assert_eq!(
        on(Some("default_tools: false\n"), &[]).0,
        Vec::<&str>::new()
    );
    // A list: exactly those, in the table's order, each once.
    assert_eq!(
        on(Some("default_tools: [grep, bash, grep]\n"), &[]),
        (vec!["bash", "grep"], vec![])
    );
    assert_eq!(on(Some("default_tools: []\n"), &[]).0, Vec::<&str>::new());
    // A map: the defaults, changed one by one.
    assert_eq!(
        on(
            Some("default_tools: {glob: true, grep: true, write_file: false}\n"),
            &[]
        ),
        (
            vec!["bash", "read_file", "glob", "grep", "web_fetch", "agent"],
            vec![]
        )
    );
    assert_eq!(
        on(Some("default_tools: {bash: false, agent: false}\n"), &[]).0,
        ["read_file", "write_file", "web_fetch"]
    );
    // Mistakes are errors that name the field, and leave the name out.
    let (names, codes) = on(Some("default_tools: [bash, gerp]\n"), &[]);
    assert_eq!((names, codes), (vec!["bash"], vec![Code::InvalidField]));
    let (_, codes) = on(Some("default_tools: {glob: 1}\n"), &[]);
    assert_eq!(codes, [Code::InvalidField]);
    let (names, codes) = on(Some("default_tools: maybe\n"), &[]);
    assert_eq!(
        (names, codes),
        (defaults.to_vec(), vec![Code::InvalidField])
    );
}

#[test]
fn an_authored_tool_replaces_the_builtin_of_its_name_with_a_note() {
    let checked = TestAgent::minimal()
        .file("agent.yaml", "default_tools: {grep: true}\n")
        .file("tools/bash.yaml", TOOL)
        .file("tools/grep.yaml", TOOL)
        .check_mem();
    let notes: Vec<_> = checked
        .diagnostics()
        .iter()
        .map(|d| (d.code, d.file.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        notes,
        [
            (Code::BuiltinReplaced, "agent/tools/bash.yaml".to_owned()),
            (Code::BuiltinReplaced, "agent/tools/grep.yaml".to_owned())
        ],
        "{}",
        checked.rendered
    );
    assert!(
        checked.rendered.contains("note[N001]"),
        "{}",
        checked.rendered
    );
    assert_eq!(checked.output.error_count(), 0, "a note is not an error");
    let agent = &checked.output.manifest.agent;
    assert_eq!(
        agent.replaced_builtin("bash").unwrap().source,
        "tools/bash.yaml"
    );
    assert!(!agent.runs_builtin("bash"));
    assert!(agent.runs_builtin("read_file"));

    // A tool at the name of a built-in that is off is just a tool: no note.
    let checked = TestAgent::minimal()
        .file("agent.yaml", "default_tools: false\n")
        .file("tools/bash.yaml", TOOL)
        .file("tools/glob.yaml", TOOL)
        .check_mem();
    assert!(checked.diagnostics().is_empty(), "{}", checked.rendered);
    assert!(
        checked
            .output
            .manifest
            .agent
            .replaced_builtin("bash")
            .is_none()
    );
}
