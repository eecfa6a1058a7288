//! Sandbox settings: `sandbox/sandbox.yaml`, the `sandbox:`/`network:` fields of tools, hooks and
//! connections, their diagnostics, and the effective sandbox the runtime and `eve info` use.

use eve_compile::{EffectiveSandbox, Network, Provider, SandboxLimits};
use eve_discover::Code;

use crate::support::{Checked, TestAgent};

const TOOL: &str = "description: Search.\ninput:\n  type: object\nrun: [echo]\n";
const HOOK: &str = "#!/bin/sh\n# ---\n# events: [turn.completed]\n# ---\ncat\n";

fn codes(c: &Checked) -> Vec<(String, String)> {
    c.diagnostics()
        .iter()
        .map(|d| (d.code.as_str().to_owned(), d.message.clone()))
        .collect()
}

fn count(c: &Checked, code: Code) -> usize {
    c.diagnostics().iter().filter(|d| d.code == code).count()
}

fn iso(network: Network) -> EffectiveSandbox {
    EffectiveSandbox {
        provider: Provider::Isolated,
        network,
    }
}

fn host() -> EffectiveSandbox {
    EffectiveSandbox {
        provider: Provider::Host,
        network: Network::All,
    }
}

#[test]
fn defaults_are_isolated_without_network() {
    let c = TestAgent::minimal().file("tools/t.yaml", TOOL).check_mem();
    assert!(c.diagnostics().is_empty(), "{:?}", codes(&c));
    let a = &c.output.manifest.agent;
    assert_eq!(a.sandbox.provider, Provider::Isolated);
    assert_eq!(a.sandbox.network, Network::None);
    assert_eq!(a.sandbox.limits, SandboxLimits::default());
    assert_eq!(a.effective_sandbox(&a.tools[0]), Some(iso(Network::None)));
    assert_eq!(a.bash_sandbox(), iso(Network::None));
}

#[test]
fn every_setting_reaches_the_manifest() {
    let c = TestAgent::minimal()
        .file(
            "sandbox/sandbox.yaml",
            "provider: isolated\ntimeout: 30s\nnetwork: [api.github.com, \"*.slack.com:443\", \"127.0.0.1:8123\", \"[::1]:9000\"]\nread: [~/data, /opt/models]\nwrite: /srv/cache\nlimits: {memory: 2GiB, processes: 512, file_size: 1073741824, cpu_seconds: 60}\n",
        )
        .file("tools/t.yaml", TOOL)
        .check_mem();
    assert!(c.diagnostics().is_empty(), "{:?}", codes(&c));
    let sb = &c.output.manifest.agent.sandbox;
    insta::assert_json_snapshot!(serde_json::json!({
        "provider": sb.provider, "timeout_ms": sb.timeout_ms, "network": sb.network,
        "read": sb.read, "write": sb.write, "limits": sb.limits,
    }), @r###"
    {
      "provider": "isolated",
      "timeout_ms": 30000,
      "network": [
        "api.github.com",
        "*.slack.com:443",
        "127.0.0.1:8123",
        "[::1]:9000"
      ],
      "read": [
        "~/data",
        "/opt/models"
      ],
      "write": [
        "/srv/cache"
      ],
      "limits": {
        "memory": 2147483648,
        "processes": 512,
        "file_size": 1073741824,
        "cpu_seconds": 60
      }
    }
    "###);
}

#[test]
fn per_tool_hook_and_connection_settings() {
    let c = TestAgent::minimal()
        .file("sandbox/sandbox.yaml", "network: [api.github.com]\n")
        .file("tools/plain.yaml", TOOL)
        .file("tools/wide.yaml", format!("{TOOL}network: all\n"))
        .file("tools/narrow.yaml", format!("{TOOL}network: none\n"))
        .file("tools/hosted.yaml", format!("{TOOL}sandbox: host\n"))
        .file(
            "tools/web.yaml",
            "description: Web.\nhttp: {url: \"https://example.com\"}\n",
        )
        .file(
            "tools/py.py",
            "# ---\n# description: Py.\n# sandbox: isolated\n# network: [\"pypi.org:443\"]\n# ---\nprint(1)\n",
        )
        .exec("hooks/audit.sh", HOOK)
        .exec(
            "hooks/notify.sh",
            "#!/bin/sh\n# ---\n# events: [turn.completed]\n# sandbox: host\n# ---\ncat\n",
        )
        .file("connections/gh.yaml", "command: gh-mcp\n")
        .file(
            "connections/boxed.yaml",
            "command: boxed-mcp\nsandbox: isolated\nnetwork: [api.github.com]\n",
        )
        .file("connections/remote.yaml", "url: https://example.com/mcp\n")
        .check_mem();
    let a = &c.output.manifest.agent;
    let eff = |n: &str| a.effective_sandbox(a.tool(n).unwrap());
    let gh = || Network::Allow(vec!["api.github.com".to_owned()]);
    assert_eq!(eff("plain"), Some(iso(gh())));
    assert_eq!(eff("wide"), Some(iso(Network::All)));
    assert_eq!(eff("narrow"), Some(iso(Network::None)));
    assert_eq!(eff("hosted"), Some(host()));
    assert_eq!(eff("web"), None, "an HTTP tool starts no process");
    assert_eq!(
        eff("py"),
        Some(iso(Network::Allow(vec!["pypi.org:443".to_owned()])))
    );
    assert_eq!(a.bash_sandbox(), iso(gh()));
    let hook = |n: &str| a.hook_sandbox(a.hooks.iter().find(|h| h.name == n).unwrap());
    assert_eq!(hook("audit"), iso(gh()));
    assert_eq!(hook("notify"), host());
    let conn = |n: &str| a.connection_sandbox(a.connections.iter().find(|h| h.name == n).unwrap());
    assert_eq!(
        conn("gh"),
        Some(host()),
        "MCP stdio servers are host by default"
    );
    assert_eq!(conn("boxed"), Some(iso(gh())));
    assert_eq!(conn("remote"), None);

    // W010 for the tool and the hook that say host, W011 for the two tools that widen.
    let w010: Vec<_> = c
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::Unconfined)
        .collect();
    assert_eq!(w010.len(), 2, "{:?}", codes(&c));
    assert!(w010.iter().any(|d| {
        d.file.as_deref() == Some("agent/tools/hosted.yaml")
            && d.message
                .contains("runs unconfined: it can read the server's files and environment")
    }));
    assert!(
        w010.iter()
            .any(|d| d.file.as_deref() == Some("agent/hooks/notify.sh"))
    );
    let w011: Vec<_> = c
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::NetworkWidened)
        .collect();
    let files: Vec<_> = w011.iter().map(|d| d.file.clone().unwrap()).collect();
    assert_eq!(
        files,
        ["agent/tools/py.py", "agent/tools/wide.yaml"],
        "{:?}",
        codes(&c)
    );
    assert_eq!(c.output.error_count(), 0, "{:?}", codes(&c));
}

#[test]
fn a_host_agent_warns_once_naming_its_tools_and_bash_stays_host() {
    let c = TestAgent::minimal()
        .file("sandbox/sandbox.yaml", "provider: host\n")
        .file("tools/a.yaml", TOOL)
        .file(
            "tools/boxed.yaml",
            format!("{TOOL}sandbox: isolated\nnetwork: all\n"),
        )
        .exec("hooks/audit.sh", HOOK)
        .check_mem();
    let a = &c.output.manifest.agent;
    assert_eq!(a.bash_sandbox(), host());
    assert_eq!(a.effective_sandbox(a.tool("a").unwrap()), Some(host()));
    assert_eq!(
        a.effective_sandbox(a.tool("boxed").unwrap()),
        Some(iso(Network::All)),
        "a tool may narrow a host agent"
    );
    let w010: Vec<_> = c
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::Unconfined)
        .collect();
    assert_eq!(w010.len(), 1, "{:?}", codes(&c));
    assert_eq!(w010[0].file.as_deref(), Some("agent/sandbox/sandbox.yaml"));
    assert!(
        w010[0].message.contains("(bash, a, hook audit)"),
        "{}",
        w010[0].message
    );
    assert_eq!(count(&c, Code::NetworkWidened), 1, "{:?}", codes(&c));
}

#[test]
fn provider_local_reads_as_isolated_with_a_warning() {
    let c = TestAgent::minimal()
        .file("sandbox/sandbox.yaml", "provider: local\n")
        .check_mem();
    assert_eq!(c.output.manifest.agent.sandbox.provider, Provider::Isolated);
    assert_eq!(c.summary(), ["W010 agent/sandbox/sandbox.yaml:1"]);
    let d = &c.diagnostics()[0];
    assert!(d.message.contains("`provider: isolated`"), "{}", d.message);
    assert!(
        d.help
            .as_deref()
            .unwrap()
            .contains("`provider: host` keeps the old unconfined")
    );
}

#[test]
fn every_bad_setting_is_reported_in_one_build() {
    let c = TestAgent::minimal()
        .file(
            "sandbox/sandbox.yaml",
            "provider: docker\nnetwork: [\"https://x.com\", \"h:0\", \"h:70000\", \"a*.b\", 7]\nread: [data]\nwrite: [/srv/x/.eve/builds, ../up]\nlimits: {memory: lots, processes: -1, file_size: 2 parsecs, cpu_seconds: \"10\", swap: 1}\nnetworks: all\n",
        )
        .file("tools/t.yaml", format!("{TOOL}sandbox: jail\nnetwork: everything\n"))
        .exec(
            "hooks/h.sh",
            "#!/bin/sh\n# ---\n# events: [turn.completed]\n# network: {a: 1}\n# ---\n",
        )
        .file("connections/r.yaml", "url: https://example.com/mcp\nsandbox: isolated\n")
        .check_mem();
    let e080: Vec<_> = c
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::InvalidSandbox)
        .map(|d| {
            format!(
                "{}:{} {}",
                d.file.as_deref().unwrap(),
                d.line.unwrap_or(0),
                d.message
            )
        })
        .collect();
    insta::assert_debug_snapshot!(e080);
    // The typos of field names are warnings that know the new fields.
    let w002: Vec<_> = c
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::UnknownField)
        .collect();
    assert_eq!(w002.len(), 2, "{:?}", codes(&c));
    assert!(w002.iter().any(|d| {
        d.help
            .as_deref()
            .unwrap()
            .contains("did you mean `network`")
    }));
    assert!(w002.iter().any(|d| d.message.contains("`swap`")));
}

#[test]
fn write_may_not_cover_the_project() {
    let agent = TestAgent::minimal();
    let disk = agent.on_disk();
    let dir = disk.agent_dir().to_path_buf();
    let project = dir.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(dir.join("sandbox")).unwrap();
    let list = [
        project.display().to_string(),
        dir.join("tools").display().to_string(),
        project.join(".eve").display().to_string(),
        "/".to_owned(),
        "/srv/ok".to_owned(),
    ];
    std::fs::write(
        dir.join("sandbox/sandbox.yaml"),
        format!("write: {}\n", serde_json::to_string(&list).unwrap()),
    )
    .unwrap();
    let built = disk.check();
    let bad = built
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::InvalidSandbox)
        .count();
    assert_eq!(bad, 4, "{:?}", codes(&built));
    assert_eq!(built.output.manifest.agent.sandbox.write, ["/srv/ok"]);
}

#[test]
fn network_serialises_as_written() {
    for (net, json) in [
        (Network::None, "\"none\""),
        (Network::All, "\"all\""),
        (Network::Allow(vec!["a.com:443".into()]), "[\"a.com:443\"]"),
    ] {
        assert_eq!(serde_json::to_string(&net).unwrap(), json);
        assert_eq!(serde_json::from_str::<Network>(json).unwrap(), net);
    }
    assert_eq!(
        serde_json::from_str::<Provider>("\"local\"").unwrap(),
        Provider::Isolated,
        "manifests of older builds still load"
    );
}

#[test]
fn a_connection_may_give_its_server_longer_to_start() {
    let agent = TestAgent::minimal()
        .file(
            "connections/slow.yaml",
            "command: npx\nargs: [-y, some-server]\nstart_timeout: 2m\n",
        )
        .file("connections/plain.yaml", "command: plain-server\n");
    let checked = agent.check_mem();
    assert_eq!(checked.errors(), Vec::<String>::new());
    let connections = &checked.output.manifest.agent.connections;
    let by_name = |n: &str| connections.iter().find(|c| c.name == n).unwrap();
    assert_eq!(by_name("slow").start_timeout_ms, Some(120_000));
    assert_eq!(
        by_name("plain").start_timeout_ms,
        None,
        "the runtime's default"
    );
    let bad = TestAgent::minimal()
        .file("connections/slow.yaml", "command: x\nstart_timeout: soon\n")
        .check_mem()
        .errors();
    assert!(
        bad.iter()
            .any(|e| e.contains("agent/connections/slow.yaml") && e.contains("start_timeout")),
        "{bad:?}"
    );
}
