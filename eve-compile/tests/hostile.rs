//! Hostile input: generated agent folders (random names, unicode and reserved ones, random bytes in
//! front matter and YAML, deep nesting, empty files, folders where files belong, non-UTF-8 names,
//! execute bits, sockets, symlinks inside and out of the folder) go through discover + compile +
//! render (+ build on disk). Nothing may panic, and every diagnostic must name a file.
//!
//! The default run is short; set `PROPTEST_CASES` for a longer one (the disk test runs a quarter
//! as many cases as the memory test).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};

use eve_compile::build;
use eve_compile::render::{Style, render_all};
use eve_discover::{Diagnostic, FsSource};

use crate::support::{Checked, TestAgent, checked_from_source, set_executable};

/// Cases for the in-memory run: `PROPTEST_CASES`, or a number that keeps the default run short.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const SLOTS: &[&str] = &[
    "tools",
    "skills",
    "subagents",
    "schedules",
    "hooks",
    "connections",
    "channels",
    "sandbox",
    "workspace",
    "agent.yaml",
    "agent.yml",
    "instructions.md",
    "SKILL.md",
    "sandbox.yaml",
];

const ODD_NAMES: &[&str] = &[
    "eve",
    "eve.yaml",
    "load_skill.py",
    "eve__x.sh",
    "bash.yaml",
    "_private",
    ".hidden",
    "weather.test.py",
    "gh__issues.yaml",
    "gh.yaml",
    "a b.py",
    "-x.yaml",
    "1.yaml",
    ".yaml",
    "noext",
    "x.md",
    "x.json",
    "CON",
    "...",
    " ",
];

const EXTS: &[&str] = &[
    "", ".yaml", ".yml", ".py", ".sh", ".md", ".js", ".txt", ".rb", ".exe",
];

const LINK_TARGETS: &[&str] = &[
    ".",
    "..",
    "../..",
    "../../..",
    "/",
    "/etc/passwd",
    "/nonexistent/eve",
    "missing.md",
    "instructions.md",
    "../instructions.md",
    "../tools",
    "tools",
    "loop",
];

/// Files that look right, to be mutated.
const TEMPLATES: &[&str] = &[
    "description: Search.\ninput:\n  type: object\n  properties:\n    q: {type: string}\n  required: [q]\nrun: [echo, hi]\neffect: read\ntimeout: 5s\n",
    "description: Issues.\ninput:\n  type: object\nhttp:\n  method: POST\n  url: https://api.example.com/{{input.q}}\n  headers:\n    Authorization: Bearer ${TOKEN}\n  body: {q: \"{{input.q}}\"}\n",
    "#!/usr/bin/env python3\n# ---\n# description: Weather.\n# input:\n#   type: object\n#   properties:\n#     city: {type: string}\n# dynamic: [session.started]\n# ---\nprint(1)\n",
    "// ---\n// description: JS tool.\n// interpreter: [node]\n// ---\nconsole.log(1)\n",
    "---\ndescription: Haiku.\nlicense: MIT\nmetadata: {a: 1}\n---\nThree lines.\n",
    "---\ncron: \"*/5 * * * *\"\ntimezone: Europe/Paris\noverlap: queue\ncatch_up: latest\n---\nReport.\n",
    "#!/bin/sh\n# ---\n# events: [turn.completed, tool.before]\n# timeout: 2s\n# ---\ncat\n",
    "command: npx\nargs: [-y, server]\nenv: {TOKEN: \"${TOKEN}\"}\ntools: {allow: [a], block: [b]}\napproval: always\n",
    "url: https://example.com/mcp\nheaders: {Authorization: \"Bearer ${T}\"}\n",
    "kind: slack\nsigning_secret: ${S}\nbot_token: ${B}\nauth: {type: jwt, secret: \"${J}\"}\n",
    "auth:\n  type: basic\n  username: u\n  password: ${P}\n",
    "model: openai/gpt-4.1\nreasoning: high\ncontext_window: 128000\ncompaction: {enabled: true, threshold: 0.8}\nlimits: {max_steps_per_turn: 3, max_cost_usd: 1.5}\ndescription: Sub.\n",
    "provider: local\ntimeout: 30s\noutput_limit: 1000\n",
    "---\ntitle: x\n---\nYou are helpful.\n",
    // Aliases that expand a lot, and deep nesting.
    "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e]\n",
    "input: {type: object, properties: {a: {type: object, properties: {b: {type: array, items: {type: [string, objekt]}}}}}}\nrun: x\n",
    "input:\n  type: object\n  $schema: http://example.com/nope\n  pattern: \"[\"\nrun: [x]\n",
];

#[derive(Debug, Clone)]
enum Kind {
    File { executable: bool },
    Dir,
    Symlink(&'static str),
    Socket,
}

#[derive(Debug, Clone)]
struct Node {
    path: Vec<String>,
    /// On disk, the last name gets a byte that is not UTF-8.
    bad_name: bool,
    kind: Kind,
    bytes: Vec<u8>,
}

fn sanitize(name: String) -> String {
    let mut n: String = name
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    while n.len() > 200 {
        n.pop();
    }
    if n.is_empty() || n == "." || n == ".." {
        n.insert(0, 'x');
    }
    n
}

fn segment() -> BoxedStrategy<String> {
    prop_oneof![
        5 => select(SLOTS).prop_map(str::to_owned),
        2 => select(ODD_NAMES).prop_map(str::to_owned),
        3 => ("[a-zA-Z][a-zA-Z0-9_-]{0,10}", select(EXTS)).prop_map(|(n, e)| format!("{n}{e}")),
        2 => ("\\PC{1,12}", select(EXTS)).prop_map(|(n, e)| sanitize(n + e)),
        1 => "[a-z]{60,70}\\.yaml",
    ]
    .boxed()
}

fn path() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        6 => vec(segment(), 1..5),
        // Deep chains: nested subagents, tool folders and skill assets.
        1 => (vec(select(&["subagents", "a", "tools", "x", "skills", "workspace"][..]), 10..40), segment())
            .prop_map(|(chain, last)| {
                let mut p: Vec<String> = chain.into_iter().map(str::to_owned).collect();
                p.push(last);
                p
            }),
        1 => (1usize..20, segment()).prop_map(|(n, last)| {
            let mut p: Vec<String> = std::iter::repeat_n(["subagents", "a"], n)
                .flatten()
                .map(str::to_owned)
                .collect();
            p.push(last);
            p
        }),
    ]
    .boxed()
}

#[derive(Debug, Clone)]
enum Mutation {
    None,
    Insert(Index, Vec<u8>),
    Truncate(Index),
    Replace(Index, u8),
    Repeat(Index, u8),
}

fn apply(template: &str, m: Mutation) -> Vec<u8> {
    let mut b = template.as_bytes().to_vec();
    match m {
        Mutation::None => {}
        Mutation::Insert(i, bytes) => {
            let at = i.index(b.len() + 1);
            b.splice(at..at, bytes);
        }
        Mutation::Truncate(i) => b.truncate(i.index(b.len() + 1)),
        Mutation::Replace(i, byte) => {
            if !b.is_empty() {
                let at = i.index(b.len());
                b[at] = byte;
            }
        }
        Mutation::Repeat(i, times) => {
            let at = i.index(b.len() + 1);
            let chunk = b[at..].to_vec();
            for _ in 0..times % 8 {
                b.extend_from_slice(&chunk);
            }
        }
    }
    b
}

fn mutation() -> BoxedStrategy<Mutation> {
    prop_oneof![
        2 => Just(Mutation::None),
        3 => (any::<Index>(), vec(any::<u8>(), 1..8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        2 => (any::<Index>(), select(&[":", "\n", "  ", "- ", "---\n", "# ---\n", "{", "[", "\"", "'", "&x ", "*x", "!!binary ", "\t", "${", "\u{feff}"][..]))
            .prop_map(|(i, s)| Mutation::Insert(i, s.as_bytes().to_vec())),
        // Plausible wrong values, at random places.
        3 => (any::<Index>(), select(&["objekt", "61 ", "Mars/Olympus", "turn.finished", "sometimes", "ftp://x", "url: https://x\n", "command: x\n", "null", "[]", "{}", "-1", "1e999", "yes", "\nretries: 3\n", "\nkind: telegram\n", "\ntype: string\n"][..]))
            .prop_map(|(i, s)| Mutation::Insert(i, s.as_bytes().to_vec())),
        2 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, t)| Mutation::Repeat(i, t)),
    ]
    .boxed()
}

fn content() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        2 => vec(any::<u8>(), 0..256),
        6 => (select(TEMPLATES), mutation()).prop_map(|(t, m)| apply(t, m)),
        2 => "[ -~\\n\\t]{0,200}".prop_map(String::into_bytes),
        1 => "\\PC{0,80}".prop_map(String::into_bytes),
        // Front matter around random YAML-ish text.
        2 => ("[ -~\\n]{0,120}", select(&["---\n", "# ---\n", "// ---\n", "#!/bin/sh\n# ---\n"][..]), any::<bool>())
            .prop_map(|(yaml, fence, close)| {
                let body: String = if fence.contains('#') || fence.contains("//") {
                    let prefix = if fence.contains("//") { "// " } else { "# " };
                    yaml.lines().map(|l| format!("{prefix}{l}\n")).collect()
                } else {
                    yaml
                };
                let closing = if close { fence.trim_start_matches("#!/bin/sh\n") } else { "" };
                format!("{fence}{body}{closing}text\n").into_bytes()
            }),
    ]
    .boxed()
}

fn kind() -> BoxedStrategy<Kind> {
    prop_oneof![
        12 => any::<bool>().prop_map(|executable| Kind::File { executable }),
        1 => Just(Kind::Dir),
        3 => select(LINK_TARGETS).prop_map(Kind::Symlink),
        1 => Just(Kind::Socket),
    ]
    .boxed()
}

fn node() -> BoxedStrategy<Node> {
    prop_oneof![
        2 => (path(), prop::bool::weighted(0.05), kind(), content()).prop_map(
            |(path, bad_name, kind, bytes)| Node {
                path,
                bad_name,
                kind,
                bytes,
            }
        ),
        3 => slotted(),
    ]
    .boxed()
}

/// Names drawn from a small pool, so that collisions, reserved names and connection prefixes
/// happen often.
const NAME_POOL: &[&str] = &[
    "a",
    "b",
    "gh",
    "gh__issues",
    "load_skill",
    "eve",
    "eve__x",
    "bash",
    "café",
    "2x",
    "weather",
];

/// Where each template belongs.
const SLOTTED: &[(&str, &str, usize)] = &[
    ("tools/", ".yaml", 0),
    ("tools/", ".yaml", 1),
    ("tools/", ".py", 2),
    ("tools/", ".js", 3),
    ("skills/", ".md", 4),
    ("schedules/", ".md", 5),
    ("hooks/", ".sh", 6),
    ("connections/", ".yaml", 7),
    ("connections/", ".yaml", 8),
    ("channels/", ".yaml", 9),
    ("channels/", ".yaml", 10),
    ("subagents/", "/agent.yaml", 11),
    ("tools/", ".yaml", 15),
    ("tools/", ".yaml", 16),
];

/// A file in the slot its content belongs to, with a mutated template and a pooled name.
fn slotted() -> BoxedStrategy<Node> {
    (
        select(SLOTTED),
        prop_oneof![3 => select(NAME_POOL).prop_map(str::to_owned), 1 => segment()],
        mutation(),
        any::<bool>(),
    )
        .prop_map(|((dir, ext, template), name, m, executable)| {
            let mut path: Vec<String> = dir
                .trim_end_matches('/')
                .split('/')
                .map(str::to_owned)
                .collect();
            let stem = name.split('.').next().unwrap_or("x").to_owned();
            if let Some(rest) = ext.strip_prefix('/') {
                path.push(stem);
                path.push(rest.to_owned());
            } else {
                path.push(format!("{stem}{ext}"));
            }
            Node {
                path,
                bad_name: false,
                kind: Kind::File { executable },
                bytes: apply(TEMPLATES[template], m),
            }
        })
        .boxed()
}

/// A tree always has a plausible skeleton, so generated files land in real slots.
fn tree() -> BoxedStrategy<Vec<Node>> {
    (any::<bool>(), vec(node(), 0..24))
        .prop_map(|(with_instructions, mut nodes)| {
            if with_instructions {
                nodes.insert(
                    0,
                    Node {
                        path: vec!["instructions.md".to_owned()],
                        bad_name: false,
                        kind: Kind::File { executable: false },
                        bytes: b"Be brief.\n".to_vec(),
                    },
                );
            }
            nodes
        })
        .boxed()
}

/// What must hold for any input: diagnostics name files, positions are 1-based, and everything
/// serialises and renders.
fn check_invariants(diags: &[Diagnostic], rendered: &str) {
    for d in diags {
        let file = d.file.as_deref().unwrap_or("");
        assert!(!file.is_empty(), "diagnostic without a file: {d:?}");
        assert!(d.line.is_none_or(|l| l >= 1), "line 0: {d:?}");
        assert!(d.column.is_none_or(|c| c >= 1), "column 0: {d:?}");
        assert!(!d.message.is_empty(), "empty message: {d:?}");
        assert!(
            rendered.contains(&format!("[{}]", d.code)),
            "not rendered: {d:?}"
        );
    }
    serde_json::to_string(diags).unwrap();
}

fn run_mem(nodes: &[Node]) {
    let mut agent = TestAgent::new();
    for n in nodes {
        let path = n.path.join("/");
        agent = match &n.kind {
            Kind::File { executable: true } => agent.exec(&path, n.bytes.clone()),
            Kind::File { executable: false } => agent.file(&path, n.bytes.clone()),
            Kind::Dir | Kind::Socket => agent,
            Kind::Symlink(t) => agent.symlink(&path, *t),
        };
    }
    let checked = agent.check_mem();
    check_invariants(checked.diagnostics(), &checked.rendered);
    build::to_json(&checked.output.manifest);
}

/// Lays the nodes out under `agent`; entries that cannot be created (a file where a folder
/// already is, a name the file system refuses) are skipped, as they would be in real life.
fn write_tree(agent: &Path, nodes: &[Node], sockets: &mut Vec<std::os::unix::net::UnixListener>) {
    for n in nodes {
        let mut full = agent.to_path_buf();
        for (i, seg) in n.path.iter().enumerate() {
            if i + 1 == n.path.len() && n.bad_name {
                let mut bytes = seg.as_bytes().to_vec();
                bytes.push(0xff);
                full.push(std::ffi::OsStr::from_bytes(&bytes));
            } else {
                full.push(seg);
            }
        }
        if let Some(parent) = full.parent()
            && std::fs::create_dir_all(parent).is_err()
        {
            continue;
        }
        let _ = match &n.kind {
            Kind::File { executable } => {
                std::fs::write(&full, &n.bytes).and_then(|()| set_executable(&full, *executable))
            }
            Kind::Dir => std::fs::create_dir_all(&full),
            Kind::Symlink("loop") => std::os::unix::fs::symlink(&full, &full),
            Kind::Symlink(t) => std::os::unix::fs::symlink(t, &full),
            Kind::Socket => std::os::unix::net::UnixListener::bind(&full).map(|l| sockets.push(l)),
        };
    }
}

fn run_disk(nodes: &[Node]) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("demo");
    let agent = root.join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    let mut sockets = Vec::new();
    write_tree(&agent, nodes, &mut sockets);
    let project = eve_compile::Project::at(root.clone(), agent.clone());
    let start = Instant::now();
    let src = FsSource::new(&agent).unwrap();
    let checked: Checked =
        checked_from_source(&src, &|f| std::fs::read_to_string(root.join(f)).ok());
    check_invariants(checked.diagnostics(), &checked.rendered);
    // The full build (writing `.eve/`) must not fail on what discovery accepted.
    let built = build::build(&project).unwrap();
    if built.output.error_count() == 0 {
        let loaded = build::load_current(&project.state_dir).unwrap();
        assert_eq!(loaded.manifest, built.output.manifest);
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "building a {}-entry folder took {:?}",
        nodes.len(),
        start.elapsed()
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(256),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn generated_folders_in_memory_never_panic(nodes in tree()) {
        run_mem(&nodes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(256) / 4,
        max_shrink_iters: 500,
        ..ProptestConfig::default()
    })]

    #[test]
    fn generated_folders_on_disk_never_panic(nodes in tree()) {
        run_disk(&nodes);
    }
}

/// Random bytes as any single slot file, each one compiled in isolation.
#[test]
fn random_bytes_in_every_slot() {
    const SLOT_FILES: &[&str] = &[
        "agent.yaml",
        "instructions.md",
        "tools/t.yaml",
        "tools/t.py",
        "skills/s.md",
        "skills/p/SKILL.md",
        "schedules/s.md",
        "hooks/h.sh",
        "connections/c.yaml",
        "channels/c.yaml",
        "channels/eve.yaml",
        "sandbox/sandbox.yaml",
        "subagents/x/agent.yaml",
    ];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: cases(256) / 2,
        ..ProptestConfig::default()
    });
    runner
        .run(&(select(SLOT_FILES), content()), |(slot, bytes)| {
            let checked = TestAgent::minimal().exec(slot, bytes).check_mem();
            check_invariants(checked.diagnostics(), &checked.rendered);
            Ok(())
        })
        .unwrap();
}

/// Folders that link back to themselves: discovery stops and says so instead of walking forever.
#[test]
fn symlink_loops_end() {
    let disk = TestAgent::minimal()
        .file("tools/t.yaml", "description: T.\nrun: [echo]\n")
        .symlink("tools/a", ".")
        .symlink("tools/b", ".")
        .symlink("tools/c", "..")
        .symlink("skills/p/SKILL.md", "../../instructions.md")
        .symlink("skills/p/again", ".")
        .symlink("skills/p/more", ".")
        .symlink("sandbox/workspace/up", "..")
        .symlink("sandbox/workspace/here", ".")
        .symlink("subagents/me", "..")
        .symlink("tools/self", "self")
        .on_disk();
    let start = Instant::now();
    let checked = disk.check();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "discovery took {:?}",
        start.elapsed()
    );
    check_invariants(checked.diagnostics(), &checked.rendered);
    assert!(
        checked.output.error_count() > 0,
        "a loop is an error: {}",
        checked.rendered
    );
}

/// Rendering is total: any diagnostic against any source text renders.
#[test]
fn rendering_handles_any_position() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: cases(256),
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(
                "\\PC{0,40}",
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u32>()),
                "(\\PC|\\t|\\n){0,200}",
            ),
            |(file, line, column, text)| {
                let mut d =
                    Diagnostic::new(eve_discover::Code::YamlSyntax, file, "m").help("h\nmore");
                d.line = line;
                d.column = column;
                let out = render_all(&[d], &|_| Some(text.clone()), Style { color: true });
                prop_assert!(out.contains("E010"));
                Ok(())
            },
        )
        .unwrap();
}

/// Nested aliases that would expand to millions of values are refused, quickly.
#[test]
fn alias_bombs_are_refused_quickly() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x]\n");
    for l in 1..9 {
        let uses = vec![format!("*a{}", l - 1); 8].join(", ");
        text.push_str(&format!("a{l}: &a{l} [{uses}]\n"));
    }
    let start = Instant::now();
    let checked = TestAgent::minimal().file("agent.yaml", text).check_mem();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    let d = &checked.diagnostics()[0];
    assert_eq!(
        d.code,
        eve_discover::Code::YamlSyntax,
        "{}",
        checked.rendered
    );
    assert!(d.message.contains("more than"), "{}", d.message);
}

/// Deep YAML nesting in a tool file is reported, not a stack overflow.
#[test]
fn deeply_nested_yaml_is_an_error_not_a_crash() {
    for depth in [100usize, 1_000, 10_000, 100_000] {
        let text = format!(
            "description: x\nrun: [echo]\ninput: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let checked = TestAgent::minimal()
            .file("tools/deep.yaml", text.clone())
            .check_mem();
        check_invariants(checked.diagnostics(), &checked.rendered);
        let text = format!(
            "input:\n{}",
            (0..depth.min(2000))
                .map(|i| format!("{}a:\n", " ".repeat(i + 1)))
                .collect::<String>()
        );
        let checked = TestAgent::minimal()
            .file("tools/deep.yaml", text)
            .check_mem();
        check_invariants(checked.diagnostics(), &checked.rendered);
    }
}

/// The generator is worth something only if it reaches most diagnostic classes: count what 300
/// generated folders (fixed seed) produce in memory. (Unreadable files and symlinks need a disk.)
#[test]
fn generated_folders_reach_most_codes() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..300 {
        let nodes = tree().new_tree(&mut runner).unwrap().current();
        let mut agent = TestAgent::new();
        for n in &nodes {
            if let Kind::File { executable } = n.kind {
                let path = n.path.join("/");
                agent = if executable {
                    agent.exec(&path, n.bytes.clone())
                } else {
                    agent.file(&path, n.bytes.clone())
                };
            }
        }
        for d in agent.check_mem().diagnostics() {
            seen.insert(d.code);
        }
    }
    let missing: Vec<_> = eve_discover::Code::ALL
        .iter()
        .filter(|c| !seen.contains(c))
        .collect();
    println!("not reached: {missing:?}");
    assert!(
        seen.len() >= 20,
        "only {} codes reached; missing {missing:?}",
        seen.len()
    );
}
