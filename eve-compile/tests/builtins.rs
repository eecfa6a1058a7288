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

const SEARCH: &str = "web:\n  search:\n    provider: brave\n";

#[test]
fn web_search_is_on_with_a_provider_and_off_by_the_map() {
    // Without a provider it is never on, whatever `default_tools` says.
    assert!(!on(None, &[]).0.contains(&"web_search"));
    // With one, it is among the defaults, and a map or a list turns it (or `web_fetch`) off.
    let (names, codes) = on(Some(SEARCH), &[]);
    assert_eq!(
        names,
        [
            "bash",
            "read_file",
            "write_file",
            "web_fetch",
            "web_search",
            "agent"
        ]
    );
    assert_eq!(codes, []);
    let yaml = format!("{SEARCH}default_tools: {{web_search: false}}\n");
    assert!(!on(Some(&yaml), &[]).0.contains(&"web_search"));
    let yaml = format!("{SEARCH}default_tools: {{web_fetch: false}}\n");
    let names = on(Some(&yaml), &[]).0;
    assert!(!names.contains(&"web_fetch") && names.contains(&"web_search"));
    let yaml = format!("{SEARCH}default_tools: [bash, web_search]\n");
    assert_eq!(on(Some(&yaml), &[]), (vec!["bash", "web_search"], vec![]));
}

#[test]
fn turning_on_web_search_without_a_provider_is_a_note() {
    for yaml in [
        "default_tools: {web_search: true}\n",
        "default_tools: [bash, web_search]\n",
    ] {
        let checked = TestAgent::minimal().file("agent.yaml", yaml).check_mem();
        let codes: Vec<Code> = checked.diagnostics().iter().map(|d| d.code).collect();
        assert_eq!(codes, [Code::BuiltinUnset], "{}", checked.rendered);
        assert!(
            checked.rendered.contains("note[N002]"),
            "{}",
            checked.rendered
        );
        assert!(
            checked.rendered.contains("web.search"),
            "{}",
            checked.rendered
        );
        assert_eq!(checked.output.error_count(), 0);
        assert!(
            !checked
                .output
                .manifest
                .agent
                .config
                .builtins_on()
                .contains(&"web_search")
        );
    }
    // Leaving it to the defaults says nothing.
    let (_, codes) = on(Some("default_tools: {glob: true}\n"), &[]);
    assert_eq!(codes, []);
}

#[test]
fn sleep_is_opt_in_with_a_cap() {
    assert!(!on(None, &[]).0.contains(&"sleep"));
    let names = on(Some("default_tools: {sleep: true}\n"), &[]).0;
    assert!(names.contains(&"sleep") && names.contains(&"bash"));
    let checked = TestAgent::minimal()
        .file(
            "agent.yaml",
            "default_tools: [sleep]\nlimits:\n  max_sleep_seconds: 120\n",
        )
        .check_mem();
    assert_eq!(checked.output.error_count(), 0, "{}", checked.rendered);
    let config = &checked.output.manifest.agent.config;
    assert_eq!(config.builtins_on(), ["sleep"]);
    assert_eq!(config.limits.max_sleep_seconds, Some(120));
}
