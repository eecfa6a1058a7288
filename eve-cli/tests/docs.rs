//! Every command shown in the docs is run by this test.
//!
//! Longer than 800 lines on purpose: one harness (the block convention, the servers it starts,
//! the per-document fixtures) that every document's blocks run through.
//!
//! The convention (written for authors in `docs/README.md`, "Writing these docs"): every fenced
//! block in `README.md` and `docs/*.md` has a language, and shell commands go in `sh` blocks whose
//! info string says how this test proves them.
//!
//! - `sh` runs. A document's blocks run in order in one fresh temporary folder, like one terminal
//!   (the working folder and variables carry over from block to block), with `eve` on `PATH` being
//!   the binary under test, the offline mock model, stdin closed, and no network: proxy variables
//!   point at a closed port and only loopback is exempt. The block must exit 0; `sh exit=N` must
//!   exit N (put the command that fails last).
//! - `sh server` runs while a server runs. Its `eve serve`/`eve start`/`eve dev` line is started
//!   by the test in the background on a free port (`--port 0`), and `:3000` in the rest of the
//!   block is replaced by that port. The server keeps running for the `sh server` blocks that
//!   follow, until a run block or another server line; then it gets SIGTERM and must exit 0.
//! - `sh needs-key` (a real model key, a platform account) and `sh manual` (a system service, a
//!   fixed port, another host) are not run: they must parse (`bash -n`), and every `eve` command in
//!   them must name subcommands and flags that exist, as the clap definition
//!   (`eve_cli::cli::Cli::command()`) declares them.
//! - `text output` right after a run block is that block's output as a terminal shows it (stdout
//!   and stderr in the order written), line for line: `…` inside a line matches any text, and a
//!   line that is only `…` stands for lines left out (`docs_output.rs`).
//!
//! Anything else fails the test: a block without a language, an unknown `sh` attribute, shell
//! commands tagged `bash`, `console` or `shell`, a `$ ` prompt line in a block of another language.
//! `eve …` commands in inline code are checked like `needs-key` blocks (when the word after `eve`
//! is not a subcommand, the span is taken for output, such as `eve serving …`). `eve` commands in
//! every `sh` block are checked that way too, before anything runs. Relative links must point at
//! files that exist, and `#anchors` at headings that exist.
//!
//! The other way round, every command and flag has docs: each command (and visible alias) is
//! named by an `eve` command somewhere in the docs, and each flag (clap's own `--help` and
//! `--version` aside) is used by one or named in inline code in the section whose heading names
//! its command (the table of flags under `## eve serve`); global flags may be named before the
//! first heading. What is missing is reported under `docs/cli.md`, the command reference.
//!
//! Markdown is read with pulldown-cmark (CommonMark and GitHub's tables). Every problem of every
//! document is collected, one section per document, and the test fails once at the end.
//!
//! The two first commands of the README build and test eve itself (`cargo install`, the CI
//! script); running them here would be circular, so the test checks what they name instead.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{ArgAction, CommandFactory};
use pulldown_cmark::{CodeBlockKind, Event, LinkType, Options, Parser, Tag, TagEnd};

const EVE: &str = env!("CARGO_BIN_EXE_eve");
/// Longest a run block may take before it is killed and reported.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a server may take to print its address.
const SERVER_START: Duration = Duration::from_secs(30);
/// Longest a server may take to exit after SIGTERM (connections 5 s, turns 10 s, at most).
const SERVER_STOP: Duration = Duration::from_secs(20);
/// Where proxies point: a closed port, so nothing leaves the machine.
const NO_NETWORK: &str = "http://127.0.0.1:9";
/// Shell dialects whose blocks must be tagged `sh` instead.
const OTHER_SHELLS: &[&str] = &[
    "bash",
    "shell",
    "console",
    "zsh",
    "fish",
    "shell-session",
    "sh-session",
    "terminal",
    "powershell",
    "ps1",
    "cmd",
    "bat",
];

/// A check that stands in for running a command.
type Check = fn(&Path) -> Result<(), String>;

/// Commands that build or test eve itself, with the check that stands in for running them.
const SELF_COMMANDS: &[(&str, Check)] = &[
    ("cargo install --locked --path eve-cli", check_install),
    ("./scripts/test.sh", check_ci_script),
];

fn check_install(repo: &Path) -> Result<(), String> {
    let manifest = std::fs::read_to_string(repo.join("eve-cli/Cargo.toml"))
        .map_err(|e| format!("eve-cli/Cargo.toml: {e}"))?;
    if manifest.contains("[[bin]]") && manifest.contains("name = \"eve\"") {
        Ok(())
    } else {
        Err("eve-cli/Cargo.toml does not declare the `eve` binary".to_owned())
    }
}

fn check_ci_script(repo: &Path) -> Result<(), String> {
    let script = repo.join("scripts/test.sh");
    let mode = std::fs::metadata(&script)
        .map_err(|e| format!("scripts/test.sh: {e}"))?
        .permissions()
        .mode();
    if mode & 0o111 == 0 {
        return Err("scripts/test.sh is not executable".to_owned());
    }
    let ci = std::fs::read_to_string(repo.join(".ci/run")).map_err(|e| format!(".ci/run: {e}"))?;
    if ci.contains("./scripts/test.sh") {
        Ok(())
    } else {
        Err(".ci/run does not run ./scripts/test.sh".to_owned())
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `README.md` and `docs/*.md`, relative to the repository.
fn documents(repo: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .unwrap()
        .filter_map(|e| {
            let path = e.ok()?.path();
            let file = path.file_name()?;
            (path.extension()? == "md").then(|| Path::new("docs").join(file))
        })
        .collect();
    docs.sort();
    docs.insert(0, PathBuf::from("README.md"));
    docs
}

// ---------------------------------------------------------------------------------------------
// Markdown, as pulldown-cmark reads it (CommonMark with GitHub's tables)

/// A fenced block.
#[derive(Debug, Clone)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    /// The info string (`sh server`, `yaml`, …).
    info: String,
    /// The content, with the fence's indentation removed.
    body: String,
}

/// A part of a document under one heading (or before the first one).
#[derive(Debug, Clone, Default)]
struct Section {
    /// The first code span of the heading that is an `eve` command (`eve serve`), or `eve` for
    /// the part before the first heading; `None` under a heading that names no command.
    command: Option<String>,
    /// The inline code spans of the section, its heading's included.
    spans: Vec<String>,
}

/// What a document holds that this test looks at.
#[derive(Debug, Default)]
struct Markdown {
    blocks: Vec<Block>,
    /// Inline code spans outside blocks, with their line.
    spans: Vec<(usize, String)>,
    /// Fences that were opened and never closed.
    unclosed: Option<usize>,
    /// Link and image targets outside blocks (`[text](target)`), with their line.
    links: Vec<(usize, String)>,
    /// Anchors of the headings (`## Effects and resume` → `effects-and-resume`).
    anchors: BTreeSet<String>,
    /// The document cut at its headings, in order.
    sections: Vec<Section>,
}

fn parse_markdown(text: &str) -> Markdown {
    let starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |offset: usize| starts.partition_point(|&s| s <= offset);
    let mut md = Markdown {
        sections: vec![Section {
            command: Some("eve".to_owned()),
            spans: Vec::new(),
        }],
        ..Markdown::default()
    };
    let mut block: Option<Block> = None;
    // The text of the heading being read.
    let mut heading: Option<String> = None;
    let options = Options::ENABLE_TABLES;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let line = line_of(range.start);
                if !fence_closed(&text[range]) && md.unclosed.is_none() {
                    md.unclosed = Some(line);
                }
                block = Some(Block {
                    line,
                    info: info.trim().to_owned(),
                    body: String::new(),
                });
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some(mut done) = block.take() {
                    if !done.body.ends_with('\n') {
                        done.body.push('\n');
                    }
                    md.blocks.push(done);
                }
            }
            Event::Text(t) => {
                if let Some(open) = &mut block {
                    open.body.push_str(&t);
                } else if let Some(h) = &mut heading {
                    h.push_str(&t);
                }
            }
            Event::Code(code) => {
                let code = code.trim().to_owned();
                let section = md
                    .sections
                    .last_mut()
                    .expect("the first section is made above");
                if let Some(h) = &mut heading {
                    h.push_str(&code);
                    if section.command.is_none() && (code == "eve" || code.starts_with("eve ")) {
                        section.command = Some(code.clone());
                    }
                }
                section.spans.push(code.clone());
                md.spans.push((line_of(range.start), code));
            }
            Event::Start(Tag::Heading { .. }) => {
                heading = Some(String::new());
                md.sections.push(Section::default());
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    md.anchors.insert(anchor(&h));
                }
            }
            Event::Start(
                Tag::Link {
                    link_type,
                    dest_url,
                    ..
                }
                | Tag::Image {
                    link_type,
                    dest_url,
                    ..
                },
            ) if link_type != LinkType::Email => {
                md.links.push((line_of(range.start), dest_url.to_string()));
            }
            _ => {}
        }
    }
    md
}

/// Whether the source of a fenced block ends with a closing fence (pulldown-cmark runs an
/// unclosed fence to the end of the document or of its container).
fn fence_closed(source: &str) -> bool {
    let strip = |line: &str| {
        line.trim_start_matches([' ', '\t', '>'])
            .trim_end()
            .to_owned()
    };
    let mut lines = source.lines();
    let Some(open) = lines.next().map(strip) else {
        return false;
    };
    let Some(ch) = open.chars().next() else {
        return false;
    };
    let len = open.chars().take_while(|c| *c == ch).count();
    lines
        .last()
        .map(strip)
        .is_some_and(|close| close.chars().count() >= len && close.chars().all(|c| c == ch))
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// How the test proves a block.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// Not shell: not a command.
    Other,
    /// Runs and must exit with this status.
    Run(i32),
    /// Runs while a server runs.
    Server,
    /// Checked without running.
    Static,
    /// Output expected from the previous run block.
    Output,
}

fn classify(info: &str) -> Result<Kind, String> {
    let mut words = info.split_whitespace();
    let Some(lang) = words.next() else {
        return Err(
            "a fenced block without a language: tag commands `sh`, output `text`".to_owned(),
        );
    };
    let attrs: Vec<&str> = words.collect();
    if OTHER_SHELLS.contains(&lang) {
        return Err(format!(
            "a `{lang}` block: tag shell commands `sh` (with `server`, `needs-key`, `manual` or \
             `exit=N`) so this test runs or checks them"
        ));
    }
    if lang == "text" && attrs == ["output"] {
        return Ok(Kind::Output);
    }
    if lang != "sh" {
        return Ok(Kind::Other);
    }
    match attrs.as_slice() {
        [] => Ok(Kind::Run(0)),
        ["server"] => Ok(Kind::Server),
        ["needs-key"] | ["manual"] => Ok(Kind::Static),
        [attr] if attr.starts_with("exit=") => attr["exit=".len()..]
            .parse()
            .map(Kind::Run)
            .map_err(|_| format!("`sh {attr}`: the exit status must be a number")),
        _ => Err(format!(
            "unknown block tag `{info}`: use `sh`, `sh exit=N`, `sh server`, `sh needs-key` or \
             `sh manual`"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Shell words, enough to find `eve` commands and their arguments

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    /// Anything that ends a simple command: `&&`, `|`, `;`, `&`, `(`, `)`, `$(`, redirections.
    Sep,
}

fn tokenize(line: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let flush = |out: &mut Vec<Tok>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            out.push(Tok::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    word.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                word.push(e);
                            }
                        }
                        _ => word.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(d) = chars.next() {
                    word.push(d);
                }
            }
            '#' if !in_word => break,
            '$' if chars.peek() == Some(&'(') => {
                flush(&mut out, &mut word, &mut in_word);
                chars.next();
                out.push(Tok::Sep);
            }
            '&' | '|' | ';' | '(' | ')' | '<' | '>' | '`' => {
                flush(&mut out, &mut word, &mut in_word);
                out.push(Tok::Sep);
            }
            c if c.is_whitespace() => flush(&mut out, &mut word, &mut in_word),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut out, &mut word, &mut in_word);
    out
}

/// Logical lines of a script: continuations joined, here-document bodies left out.
fn logical_lines(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut heredoc: Option<String> = None;
    for line in script.lines() {
        if let Some(end) = &heredoc {
            if line.trim() == end {
                heredoc = None;
            }
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            pending.push_str(stripped);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let full = std::mem::take(&mut pending);
        heredoc = heredoc_delimiter(&full);
        out.push(full);
    }
    if !pending.is_empty() {
        out.push(pending);
    }
    out
}

/// The delimiter of a here-document started on this line (`<<'EOF'`, `<<-EOF`, `<< "EOF"`).
fn heredoc_delimiter(line: &str) -> Option<String> {
    let at = line.find("<<")?;
    let rest = &line[at + 2..];
    if rest.starts_with('<') {
        return None;
    }
    let rest = rest.trim_start_matches('-').trim_start();
    let word: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ';' | '&' | '|' | ')' | '>'))
        .collect();
    let word = word.trim_matches(|c| c == '\'' || c == '"').to_owned();
    (!word.is_empty()).then_some(word)
}

/// Every `eve` command in a script: the arguments after `eve`.
fn eve_commands(script: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for line in logical_lines(script) {
        let mut toks = tokenize(&line).into_iter().peekable();
        let mut at_start = true;
        while let Some(tok) = toks.next() {
            let word = match tok {
                Tok::Sep => {
                    at_start = true;
                    continue;
                }
                Tok::Word(w) => w,
            };
            if !at_start {
                continue;
            }
            let is_assignment = word
                .split_once('=')
                .is_some_and(|(name, _)| is_var_name(name));
            if is_assignment
                || matches!(
                    word.as_str(),
                    "exec" | "env" | "time" | "nohup" | "command" | "then" | "do" | "else" | "!"
                )
            {
                continue;
            }
            if word == "sudo" {
                while let Some(Tok::Word(flag)) = toks.peek() {
                    if !flag.starts_with('-') {
                        break;
                    }
                    let takes_value = matches!(flag.as_str(), "-u" | "-g");
                    toks.next();
                    if takes_value {
                        toks.next();
                    }
                }
                continue;
            }
            at_start = false;
            if word == "eve" || word.ends_with("/eve") {
                let mut args = Vec::new();
                while let Some(Tok::Word(arg)) = toks.peek() {
                    args.push(arg.clone());
                    toks.next();
                }
                found.push(args);
            }
        }
    }
    found
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

// ---------------------------------------------------------------------------------------------
// What the command line accepts, from its clap definition

/// One command of `eve_cli::cli::Cli`.
#[derive(Debug, Default)]
struct Node {
    /// Subcommand names and aliases, each with the name it stands for.
    subcommands: BTreeMap<String, String>,
    /// The visible aliases of the subcommands (`start` for `serve`), which the docs must name too.
    aliases: Vec<String>,
    /// Whether the command runs only with a subcommand (`eve store`), not alone (`eve sessions`).
    needs_subcommand: bool,
    /// Every flag the command accepts (`--json`, `-s`, clap's `--help`), aliases included.
    flags: BTreeSet<String>,
    /// The flags that take a value.
    value_flags: BTreeSet<String>,
    /// The flags the docs must name, with whether each is global (`--project`); clap's own
    /// `--help` and `--version` are clap's to document.
    own: Vec<(String, bool)>,
}

/// Every command path (`""`, `"run"`, `"sessions approve"`, …), canonical names only.
struct Cli(BTreeMap<String, Node>);

impl Cli {
    fn load() -> Self {
        let mut root = eve_cli::cli::Cli::command();
        root.build();
        let mut map = BTreeMap::new();
        add_command(&root, &mut Vec::new(), &mut map);
        Self(map)
    }

    /// Checks the arguments of one `eve` command. `Ok(false)`: not a command (lenient only).
    fn check(&self, args: &[String], lenient: bool) -> Result<bool, String> {
        self.walk(args, lenient, &mut Used::default())
            .map(|path| path.is_some())
    }

    /// Checks the arguments of one `eve` command and records in `used` the commands and flags it
    /// names. Returns the command path it reaches; `None`: not a command (lenient only).
    fn walk(
        &self,
        args: &[String],
        lenient: bool,
        used: &mut Used,
    ) -> Result<Option<String>, String> {
        let mut path: Vec<String> = Vec::new();
        let mut node = &self.0[""];
        let mut i = 0;
        while i < args.len() {
            let arg = if lenient {
                args[i].replace(['[', ']'], "")
            } else {
                args[i].clone()
            };
            i += 1;
            if lenient && (arg.contains('…') || arg == "...") {
                return Ok(Some(path.join(" ")));
            }
            if arg.is_empty() {
                continue;
            }
            if arg == "--" {
                break;
            }
            let shown = || format!("eve {}", path.join(" ")).trim_end().to_owned();
            if let Some(long) = arg.strip_prefix("--") {
                let name = format!("--{}", long.split('=').next().unwrap_or(long));
                if !node.flags.contains(&name) {
                    return Err(format!("`{}` has no flag `{name}`", shown()));
                }
                if node.value_flags.contains(&name) && !arg.contains('=') {
                    i += 1;
                }
                used.flags.insert((path.join(" "), name));
            } else if arg.starts_with('-') && arg.len() > 1 {
                let name: String = arg.chars().take(2).collect();
                if !node.flags.contains(&name) {
                    return Err(format!("`{}` has no flag `{name}`", shown()));
                }
                if node.value_flags.contains(&name) && arg.chars().count() == 2 {
                    i += 1;
                }
                used.flags.insert((path.join(" "), name));
            } else if !node.subcommands.is_empty() {
                let choices: Vec<&str> = if lenient {
                    arg.split('|').collect()
                } else {
                    vec![arg.as_str()]
                };
                for choice in &choices {
                    if *choice == "help" {
                        return Ok(Some(path.join(" ")));
                    }
                    if !node.subcommands.contains_key(*choice) {
                        if lenient && path.is_empty() {
                            return Ok(None);
                        }
                        return Err(format!(
                            "`{} {choice}`: no such command (there are: {})",
                            shown(),
                            node.subcommands
                                .keys()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                    let prefix = prefix_of(&path.join(" "));
                    used.commands.insert(format!("{prefix}{choice}"));
                    used.commands
                        .insert(format!("{prefix}{}", node.subcommands[*choice]));
                }
                path.push(node.subcommands[choices[0]].clone());
                node = &self.0[&path.join(" ")];
            }
        }
        let asks_help = args
            .iter()
            .any(|a| matches!(a.as_str(), "--help" | "-h" | "--version" | "-V"));
        if node.needs_subcommand && !asks_help {
            // In prose, `eve sessions` names the group of commands.
            if lenient {
                return Ok((!path.is_empty()).then(|| path.join(" ")));
            }
            return Err(format!(
                "`eve {}` needs a subcommand",
                path.join(" ").trim_end()
            ));
        }
        Ok(Some(path.join(" ")))
    }

    /// What the docs leave undocumented: every command (and visible alias) must be named by an
    /// `eve` command somewhere, and every flag must be used by one or named in inline code in the
    /// section of its command (a table row, a sentence).
    fn undocumented(&self, used: &Used) -> Vec<String> {
        let mut problems = Vec::new();
        for (path, node) in &self.0 {
            let prefix = prefix_of(path);
            for name in node
                .subcommands
                .values()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter(|n| *n != "help")
                .chain(&node.aliases)
            {
                let command = format!("{prefix}{name}");
                if !used.commands.contains(&command) {
                    problems.push(format!(
                        "`eve {command}` is not documented: give it a section in docs/cli.md \
                         (a heading naming `eve {command}`) or show it in an example"
                    ));
                }
            }
            for (flag, global) in &node.own {
                let documented = used.flags.contains(&(path.clone(), flag.clone()))
                    || used.named.iter().any(|(section, named)| {
                        named == flag
                            && (section == path
                                || path.starts_with(&format!("{section} "))
                                || (section.is_empty() && *global))
                    });
                if !documented {
                    let shown = format!("eve {path}").trim_end().to_owned();
                    problems.push(format!(
                        "`{shown}`: the flag `{flag}` is not documented: name it in inline code \
                         in the section of `{shown}` in docs/cli.md (its table of flags), or use \
                         it in an example"
                    ));
                }
            }
        }
        problems
    }
}

/// `"sessions"` → `"sessions "`, `""` → `""`: what a subcommand's path starts with.
fn prefix_of(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path} ")
    }
}

fn add_command(cmd: &clap::Command, path: &mut Vec<String>, map: &mut BTreeMap<String, Node>) {
    let mut node = Node::default();
    for arg in cmd.get_arguments() {
        let mut names = Vec::new();
        names.extend(arg.get_long().map(|l| format!("--{l}")));
        names.extend(arg.get_short().map(|s| format!("-{s}")));
        if names.is_empty() {
            continue; // positional
        }
        let builtin = matches!(arg.get_action(), ArgAction::Help | ArgAction::Version);
        if !builtin && !arg.is_hide_set() {
            node.own
                .extend(names.iter().map(|n| (n.clone(), arg.is_global_set())));
        }
        names.extend(
            arg.get_all_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(|a| format!("--{a}")),
        );
        names.extend(
            arg.get_all_short_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(|a| format!("-{a}")),
        );
        if arg.get_action().takes_values() {
            node.value_flags.extend(names.iter().cloned());
        }
        node.flags.extend(names);
    }
    node.needs_subcommand = cmd.is_subcommand_required_set();
    for sub in cmd.get_subcommands() {
        let name = sub.get_name().to_owned();
        node.subcommands.insert(name.clone(), name.clone());
        for alias in sub.get_all_aliases() {
            node.subcommands.insert(alias.to_owned(), name.clone());
        }
        node.aliases
            .extend(sub.get_visible_aliases().map(str::to_owned));
        if name != "help" {
            path.push(name);
            add_command(sub, path, map);
            path.pop();
        }
    }
    map.insert(path.join(" "), node);
}

/// What the docs name of the command line.
#[derive(Debug, Default)]
struct Used {
    /// Command paths named by `eve` commands, as written (`start`) and as meant (`serve`).
    commands: BTreeSet<String>,
    /// `(command path, flag)` of the flags `eve` commands use.
    flags: BTreeSet<(String, String)>,
    /// `(command path, flag)` of the flags inline code names in the section of a command.
    named: BTreeSet<(String, String)>,
}

impl Used {
    fn extend(&mut self, other: Used) {
        self.commands.extend(other.commands);
        self.flags.extend(other.flags);
        self.named.extend(other.named);
    }
}

/// The flags a code span names: `--template T` → `--template`, `list [--json]` → `--json`.
fn named_flags(span: &str) -> Vec<String> {
    span.split(|c: char| c.is_whitespace() || c == ',')
        .map(|w| w.trim_matches(|c| matches!(c, '[' | ']' | '(' | ')')))
        .filter(|w| w.starts_with('-') && w.len() > 1)
        .map(|w| w.split('=').next().unwrap_or(w).to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Running a document

struct Outcome {
    status: Option<i32>,
    /// Stdout and stderr as a terminal shows them: one file, in the order written.
    output: String,
    timed_out: bool,
}

struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
    line: usize,
}

struct Session {
    repo: PathBuf,
    root: tempfile::TempDir,
    env: Vec<(String, String)>,
    count: usize,
    server: Option<Server>,
}

impl Session {
    fn new(repo: &Path) -> Self {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        let work = root.path().join("work");
        let state = root.path().join("state");
        let tmp = root.path().join("tmp");
        for dir in [&bin, &work, &state, &tmp, &root.path().join("blocks")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::os::unix::fs::symlink(EVE, bin.join("eve")).unwrap();
        std::fs::write(state.join("cwd"), work.to_string_lossy().as_bytes()).unwrap();
        let path = std::env::var("PATH").unwrap_or_default();
        let mut env = vec![
            ("PATH".to_owned(), format!("{}:{path}", bin.display())),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("TZ".to_owned(), "UTC".to_owned()),
            ("TERM".to_owned(), "dumb".to_owned()),
            ("NO_COLOR".to_owned(), "1".to_owned()),
            ("TMPDIR".to_owned(), tmp.to_string_lossy().into_owned()),
            (
                "DOCTEST_STATE".to_owned(),
                state.to_string_lossy().into_owned(),
            ),
            ("NO_PROXY".to_owned(), "127.0.0.1,localhost,::1".to_owned()),
            ("no_proxy".to_owned(), "127.0.0.1,localhost,::1".to_owned()),
        ];
        for name in [
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
        ] {
            env.push((name.to_owned(), NO_NETWORK.to_owned()));
        }
        // Interpreters installed per user (pyenv, nvm) find themselves through these.
        for name in ["HOME", "USER", "LOGNAME", "PYENV_ROOT", "PYENV_VERSION"] {
            if let Ok(value) = std::env::var(name) {
                env.push((name.to_owned(), value));
            }
        }
        Self {
            repo: repo.to_path_buf(),
            root,
            env,
            count: 0,
            server: None,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// A script that restores the document's folder and variables, runs `body`, and saves them.
    fn script(&self, body: &str) -> String {
        format!(
            "set -a\n\
             if [ -f \"$DOCTEST_STATE/env\" ]; then . \"$DOCTEST_STATE/env\"; fi\n\
             cd \"$(cat \"$DOCTEST_STATE/cwd\")\"\n\
             trap '__status=$?; pwd > \"$DOCTEST_STATE/cwd\"; export -p > \"$DOCTEST_STATE/env\"; \
             exit $__status' EXIT\n\
             set -euo pipefail\n\
             {body}"
        )
    }

    /// `bash` running `script`, its stdout and stderr both going to the file returned, in the order
    /// written.
    fn command(&mut self, script: &str) -> (Command, PathBuf) {
        self.count += 1;
        let n = self.count;
        let file = self.path(&format!("blocks/{n:03}.sh"));
        std::fs::write(&file, script).unwrap();
        let out = self.path(&format!("blocks/{n:03}.out"));
        let output = File::create(&out).unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg("--noprofile")
            .arg("--norc")
            .arg(&file)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.path("work"))
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .process_group(0);
        (cmd, out)
    }

    fn run(&mut self, body: &str) -> Outcome {
        let script = self.script(body);
        let (mut cmd, out) = self.command(&script);
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > BLOCK_TIMEOUT {
                timed_out = true;
                kill_group(child.id(), "KILL");
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Whatever the block left running in the background ends with it.
        kill_group(child.id(), "KILL");
        Outcome {
            status: status.code(),
            output: std::fs::read_to_string(out).unwrap_or_default(),
            timed_out,
        }
    }

    /// Starts the server of a `sh server` line (`eve serve …`) on a free port.
    fn start_server(&mut self, line: &str, number: usize) -> Result<(), String> {
        let command = server_command(line);
        let script = format!(
            "set -a\n\
             if [ -f \"$DOCTEST_STATE/env\" ]; then . \"$DOCTEST_STATE/env\"; fi\n\
             cd \"$(cat \"$DOCTEST_STATE/cwd\")\"\n\
             set +a\n\
             exec env {command}\n"
        );
        let (mut cmd, log) = self.command(&script);
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(port) = served_port(&text) {
                self.server = Some(Server {
                    child,
                    port,
                    log,
                    line: number,
                });
                return Ok(());
            }
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!(
                    "the server `{line}` exited ({status}) before serving:\n{text}"
                ));
            }
            if start.elapsed() > SERVER_START {
                kill_group(child.id(), "KILL");
                let _ = child.wait();
                return Err(format!(
                    "the server `{line}` printed no address in {SERVER_START:?}:\n{text}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM to the server; it must exit 0.
    fn stop_server(&mut self) -> Result<(), String> {
        let Some(mut server) = self.server.take() else {
            return Ok(());
        };
        let pid = server.child.id();
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let start = Instant::now();
        let status = loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                break Some(status);
            }
            if start.elapsed() > SERVER_STOP {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        kill_group(pid, "KILL");
        let _ = server.child.wait();
        let log = std::fs::read_to_string(&server.log).unwrap_or_default();
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(format!(
                "line {}: the server exited with {s} after SIGTERM (expected 0):\n{log}",
                server.line
            )),
            None => Err(format!(
                "line {}: the server did not exit within {SERVER_STOP:?} of SIGTERM:\n{log}",
                server.line
            )),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(server) = &mut self.server {
            kill_group(server.child.id(), "KILL");
            let _ = server.child.wait();
        }
    }
}

/// The server line as the test runs it: no `&`, no comment, and `--port 0` instead of any port.
fn server_command(line: &str) -> String {
    let mut text = line.trim().to_owned();
    if let Some(at) = text.find(" #") {
        text.truncate(at);
    }
    let mut text = text.trim_end().trim_end_matches('&').trim_end().to_owned();
    for flag in [" --port ", " -p "] {
        if let Some(at) = text.find(flag) {
            let value_end = text[at + flag.len()..]
                .find(' ')
                .map_or(text.len(), |n| at + flag.len() + n);
            text.replace_range(at..value_end, "");
        }
    }
    if let Some(at) = text.find(" --port=") {
        let end = text[at + 1..].find(' ').map_or(text.len(), |n| at + 1 + n);
        text.replace_range(at..end, "");
    }
    format!("{text} --port 0")
}

fn kill_group(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
}

/// The port in `eve serving … on http://127.0.0.1:PORT`.
fn served_port(log: &str) -> Option<u16> {
    let at = log.find(" on http://")?;
    let addr: String = log[at + " on http://".len()..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    addr.rsplit(':').next()?.parse().ok()
}

fn report(outcome: &Outcome, body: &str) -> String {
    format!(
        "--- block ---\n{body}--- output (stdout and stderr) ---\n{}",
        outcome.output.trim_end()
    )
}

/// What one document gave: its failures, how many blocks ran, and what it names of the CLI.
struct DocReport {
    name: String,
    failures: Vec<String>,
    ran: usize,
    used: Used,
}

/// Checks and runs one document.
fn check_document(repo: &Path, doc: &Path, cli: &Cli) -> DocReport {
    let name = doc.display().to_string();
    let text = std::fs::read_to_string(repo.join(doc)).unwrap();
    let md = parse_markdown(&text);
    let mut used = Used::default();
    let (failures, kinds) = static_checks(repo, doc, &md, cli, &mut used);
    if !failures.is_empty() {
        return DocReport {
            name,
            failures,
            ran: 0,
            used,
        };
    }
    let (failures, ran) = run_blocks(repo, &name, &md, &kinds);
    DocReport {
        name,
        failures,
        ran,
        used,
    }
}

/// Everything checked without running: tags, links, `eve` commands and flags, shell syntax.
/// Returns the failures and the kind of each block; records in `used` what the document names
/// of the command line.
fn static_checks(
    repo: &Path,
    doc: &Path,
    md: &Markdown,
    cli: &Cli,
    used: &mut Used,
) -> (Vec<String>, Vec<Kind>) {
    let name = doc.display().to_string();
    let mut failures = Vec::new();
    let mut fail =
        |line: usize, message: String| failures.push(format!("{name}:{line}: {message}"));
    if let Some(line) = md.unclosed {
        fail(line, "a fenced block is never closed".to_owned());
    }

    // Inline code: `eve …` must name real subcommands and flags.
    for (line, span) in &md.spans {
        let span = span.replace("\\|", "|");
        if !span.starts_with("eve ") {
            continue;
        }
        for args in eve_commands(&span) {
            if let Err(e) = cli.walk(&args, true, used) {
                fail(*line, format!("in `{span}`: {e}"));
            }
        }
    }

    // Flags named in the section of a command (`--port`, `-p` in a table of `eve serve`'s).
    for section in &md.sections {
        let Some(command) = &section.command else {
            continue;
        };
        let path = if command == "eve" {
            Some(String::new())
        } else {
            eve_commands(command)
                .first()
                .and_then(|args| cli.walk(args, true, &mut Used::default()).ok().flatten())
        };
        let Some(path) = path else { continue };
        for span in &section.spans {
            for flag in named_flags(span) {
                used.named.insert((path.clone(), flag));
            }
        }
    }

    // Relative links point at files that exist, and anchors at headings that exist.
    for (line, target) in &md.links {
        if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
            continue;
        }
        let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
        let base = repo.join(doc).parent().unwrap().to_path_buf();
        let path = if file.is_empty() {
            repo.join(doc)
        } else {
            base.join(file)
        };
        if !path.exists() {
            fail(*line, format!("link to `{target}`: no such file"));
            continue;
        }
        if !fragment.is_empty() && path.extension().is_some_and(|e| e == "md") {
            let anchors = if file.is_empty() {
                md.anchors.clone()
            } else {
                parse_markdown(&std::fs::read_to_string(&path).unwrap_or_default()).anchors
            };
            if !anchors.contains(fragment) {
                fail(
                    *line,
                    format!("link to `{target}`: no heading `#{fragment}` there"),
                );
            }
        }
    }

    // Every block: a known tag, and static checks before anything runs.
    let mut kinds = Vec::new();
    for block in &md.blocks {
        let kind = match classify(&block.info) {
            Ok(kind) => kind,
            Err(e) => {
                fail(block.line, e);
                Kind::Other
            }
        };
        match kind {
            Kind::Other | Kind::Output => {
                for line in block.body.lines() {
                    if line.starts_with("$ ") {
                        fail(
                            block.line,
                            format!(
                                "`{line}` looks like a command in a `{}` block: put commands in \
                                 `sh` blocks, without the prompt",
                                block.info
                            ),
                        );
                    }
                    if let Some(exec) = line.trim().strip_prefix("ExecStart=") {
                        for args in eve_commands(exec) {
                            if let Err(e) = cli.walk(&args, false, used) {
                                fail(block.line, format!("in `{exec}`: {e}"));
                            }
                        }
                    }
                }
            }
            Kind::Run(_) | Kind::Server | Kind::Static => {
                for args in eve_commands(&block.body) {
                    if let Err(e) = cli.walk(&args, false, used) {
                        fail(block.line, format!("`eve {}`: {e}", args.join(" ")));
                    }
                }
                let syntax = Command::new("bash")
                    .args(["-n", "-c", &block.body])
                    .output()
                    .unwrap();
                if !syntax.status.success() {
                    fail(
                        block.line,
                        format!(
                            "does not parse as shell: {}",
                            String::from_utf8_lossy(&syntax.stderr).trim()
                        ),
                    );
                }
            }
        }
        kinds.push(kind);
    }
    (failures, kinds)
}

/// Runs the run and server blocks of a document in order, in one session.
fn run_blocks(repo: &Path, name: &str, md: &Markdown, kinds: &[Kind]) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut session = Session::new(repo);
    let mut ran = 0;
    let mut last: Option<Outcome> = None;
    for (block, kind) in md.blocks.iter().zip(kinds) {
        if matches!(kind, Kind::Run(_))
            && session.server.is_some()
            && let Err(e) = session.stop_server()
        {
            failures.push(format!("{name}:{e}"));
            break;
        }
        match kind {
            Kind::Other | Kind::Static => last = None,
            Kind::Output => {
                let Some(outcome) = &last else {
                    failures.push(format!(
                        "{name}:{}: a `text output` block must follow a `sh` block",
                        block.line
                    ));
                    continue;
                };
                if let Err(e) = super::docs_output::check(&block.body, &outcome.output) {
                    failures.push(format!(
                        "{name}:{}: the `text output` block is not the output: {e}\n{}",
                        block.line,
                        report(outcome, "")
                    ));
                }
            }
            Kind::Run(expected) => {
                let mut body = block.body.clone();
                for (command, check) in SELF_COMMANDS {
                    if body.contains(command) {
                        if let Err(e) = check(&session.repo) {
                            failures.push(format!("{name}:{}: `{command}`: {e}", block.line));
                        }
                        body = body.replace(command, "true");
                    }
                }
                let outcome = session.run(&body);
                ran += 1;
                if outcome.timed_out || outcome.status != Some(*expected) {
                    let what = if outcome.timed_out {
                        format!(
                            "did not finish in {BLOCK_TIMEOUT:?} (a server belongs in a \
                             `sh server` block)"
                        )
                    } else {
                        format!(
                            "exited with {:?}, expected {expected}",
                            outcome.status.unwrap_or(-1)
                        )
                    };
                    failures.push(format!(
                        "{name}:{}: {what}\n{}",
                        block.line,
                        report(&outcome, &block.body)
                    ));
                    break;
                }
                last = Some(outcome);
            }
            Kind::Server => {
                // Only a server that failed to stop or start ends the document's run.
                let before = failures.len();
                let mut rest = String::new();
                for line in block.body.lines() {
                    let serves = eve_commands(line).first().is_some_and(|args| {
                        matches!(
                            args.first().map(String::as_str),
                            Some("serve" | "start" | "dev")
                        )
                    });
                    if serves {
                        // A new server replaces the one running: it is stopped as usual.
                        if let Err(e) = session.stop_server() {
                            failures.push(format!("{name}:{e}"));
                            break;
                        }
                        if let Err(e) = session.start_server(line, block.line) {
                            failures.push(format!("{name}:{}: {e}", block.line));
                            break;
                        }
                    } else {
                        rest.push_str(line);
                        rest.push('\n');
                    }
                }
                if failures.len() > before {
                    break;
                }
                let Some(port) = session.server.as_ref().map(|s| s.port) else {
                    failures.push(format!(
                        "{name}:{}: a `sh server` block must start the server (`eve serve`) or \
                         follow one that did",
                        block.line
                    ));
                    break;
                };
                let body = rest.replace(":3000", &format!(":{port}"));
                if body.trim().is_empty() {
                    last = None;
                    continue;
                }
                let outcome = session.run(&body);
                ran += 1;
                if outcome.timed_out || outcome.status != Some(0) {
                    failures.push(format!(
                        "{name}:{}: exited with {:?}, expected 0{}\n{}",
                        block.line,
                        outcome.status,
                        if outcome.timed_out {
                            " (timed out)"
                        } else {
                            ""
                        },
                        report(&outcome, &body)
                    ));
                    break;
                }
                last = Some(outcome);
            }
        }
    }
    if let Err(e) = session.stop_server() {
        failures.push(format!("{name}:{e}"));
    }
    (failures, ran)
}

#[test]
fn every_command_in_the_docs_runs() {
    let repo = repo();
    let cli = Cli::load();
    let docs = documents(&repo);
    let mut reports: Vec<DocReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = docs
            .iter()
            .map(|doc| {
                let (repo, cli) = (&repo, &cli);
                scope.spawn(move || check_document(repo, doc, cli))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every command and flag has docs: what is missing belongs on the command reference page.
    let mut used = Used::default();
    for report in &mut reports {
        used.extend(std::mem::take(&mut report.used));
    }
    let undocumented = cli.undocumented(&used);
    if let Some(reference) = reports.iter_mut().find(|r| r.name == "docs/cli.md") {
        reference.failures.extend(
            undocumented
                .into_iter()
                .map(|problem| format!("docs/cli.md: {problem}")),
        );
    } else {
        reports.push(DocReport {
            name: "docs/cli.md".to_owned(),
            failures: vec!["docs/cli.md: no such file: it documents every command".to_owned()],
            ran: 0,
            used: Used::default(),
        });
    }
    let ran: usize = reports.iter().map(|r| r.ran).sum();
    // One section per document with problems, every problem of it, then one failure.
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.failures.is_empty())
        .map(|r| {
            format!(
                "=== {} ({} problem(s)) ===\n\n{}",
                r.name,
                r.failures.len(),
                r.failures.join("\n\n")
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} document(s) with problems:\n\n{}",
        failed.len(),
        failed.join("\n\n")
    );
    assert!(
        ran >= 20,
        "only {ran} blocks ran: is the block parser broken?"
    );
}

#[test]
fn the_convention_checks_hold() {
    // Tags.
    assert_eq!(classify("sh").unwrap(), Kind::Run(0));
    assert_eq!(classify("sh exit=3").unwrap(), Kind::Run(3));
    assert_eq!(classify("sh server").unwrap(), Kind::Server);
    assert_eq!(classify("sh needs-key").unwrap(), Kind::Static);
    assert_eq!(classify("yaml").unwrap(), Kind::Other);
    assert!(classify("").is_err());
    assert!(classify("bash").is_err());
    assert!(classify("sh skip").is_err());

    // Blocks and spans.
    let md = parse_markdown(
        "Run `eve build --json` now.\n\n  ```sh server\n  eve serve\n  ```\n\n````markdown\n```sh\nnot a block\n```\n````\n",
    );
    assert_eq!(md.blocks.len(), 2);
    assert_eq!(md.blocks[0].info, "sh server");
    assert_eq!(md.blocks[0].body, "eve serve\n");
    assert_eq!(md.spans[0], (1, "eve build --json".to_owned()));

    // Commands, past here-documents, assignments and pipes.
    let script = "cat > x <<'EOF'\neve not-a-command\nEOF\nEVE_MODEL=x eve run --yes \"hi\" | tee o\nS=$(eve sessions list --json)\n";
    assert_eq!(
        eve_commands(script),
        vec![
            vec!["run".to_owned(), "--yes".to_owned(), "hi".to_owned()],
            vec![
                "sessions".to_owned(),
                "list".to_owned(),
                "--json".to_owned()
            ],
        ]
    );

    // Flags and subcommands against --help.
    let cli = Cli::load();
    let check = |s: &str, lenient: bool| cli.check(&eve_commands(s)[0], lenient);
    assert!(check("eve run --yes hi", false).unwrap());
    assert!(check("eve start -p 0", false).unwrap());
    assert!(check("eve run --session S --json", false).unwrap());
    assert!(check("eve run --yolo hi", false).is_err());
    assert!(check("eve sessions frobnicate", false).is_err());
    assert!(check("eve store", false).is_err());
    assert!(check("eve sessions", false).unwrap());
    assert!(check("eve sessions", true).unwrap());
    assert!(check("eve sessions list|show|approve|deny", true).unwrap());
    assert!(check("eve init [DIR] [--template T]", true).unwrap());
    assert!(!check("eve serving demo", true).unwrap());
    assert!(check("eve init [--tempalte T]", true).is_err());

    // Links and anchors.
    let md = parse_markdown(
        "## `run:` tools\n## Results: output and exit status\nSee [x](a.md#b) and [y](#c).\n",
    );
    assert!(md.anchors.contains("run-tools"));
    assert!(md.anchors.contains("results-output-and-exit-status"));
    assert_eq!(
        md.links,
        vec![(3, "a.md#b".to_owned()), (3, "#c".to_owned())]
    );

    // Server lines.
    assert_eq!(server_command("eve serve"), "eve serve --port 0");
    assert_eq!(
        server_command("PORT=8080 eve start -p 8080 --host 127.0.0.1 &  # here"),
        "PORT=8080 eve start --host 127.0.0.1 --port 0"
    );
    assert_eq!(
        server_command("X=\"60@$(date +%s)\" eve dev --port=3000"),
        "X=\"60@$(date +%s)\" eve dev --port 0"
    );

    // Fences that are never closed, at the top level and in a list.
    assert_eq!(
        parse_markdown("text\n\n```sh\neve build\n").unclosed,
        Some(3)
    );
    assert_eq!(
        parse_markdown("- item\n\n  ```sh\n  eve build\n").unclosed,
        Some(3)
    );
    assert_eq!(
        parse_markdown("- item\n\n  ```sh\n  eve build\n  ```\n").unclosed,
        None
    );

    // Sections, and the flags their inline code names.
    let md = parse_markdown(
        "Takes `--project DIR`.\n## `eve serve` (also `eve start`)\n\n| flag | |\n|---|---|\n| \
         `--port`, `-p` | |\n\n## Exit codes\n\n`--json`\n",
    );
    let commands: Vec<Option<&str>> = md.sections.iter().map(|s| s.command.as_deref()).collect();
    assert_eq!(commands, vec![Some("eve"), Some("eve serve"), None]);
    assert_eq!(
        md.sections[1].spans,
        ["eve serve", "eve start", "--port", "-p"]
    );
    assert_eq!(
        named_flags("list [--schedule NAME] [--json]"),
        ["--schedule", "--json"]
    );
    assert_eq!(named_flags("--port=0"), ["--port"]);
    assert!(named_flags("eve serving demo").is_empty());

    // Every command and flag has docs.
    let nothing = cli.undocumented(&Used::default());
    for expected in [
        "`eve sessions approve` is not documented",
        "`eve start` is not documented",
        "`eve serve`: the flag `--host` is not documented",
        "`eve run`: the flag `--project` is not documented",
    ] {
        assert!(
            nothing.iter().any(|p| p.starts_with(expected)),
            "{expected}: {nothing:#?}"
        );
    }
    assert!(
        !nothing
            .iter()
            .any(|p| p.contains("`--help`") || p.contains("`--version`"))
    );
    let mut used = Used::default();
    cli.walk(&eve_commands("eve serve --port 0")[0], false, &mut used)
        .unwrap();
    used.named.insert(("serve".to_owned(), "--host".to_owned()));
    used.named.insert((String::new(), "--project".to_owned()));
    used.named.insert((String::new(), "--json".to_owned()));
    let rest = cli.undocumented(&used);
    for gone in [
        "`eve serve` is not documented",
        "`eve serve`: the flag `--port`",
        "`eve serve`: the flag `--host`",
        "the flag `--project`",
    ] {
        assert!(!rest.iter().any(|p| p.contains(gone)), "{gone}: {rest:#?}");
    }
    for left in [
        "`eve start` is not documented",
        "`eve serve`: the flag `-p`",
        // `--json` is not global: naming it before the first heading documents no command's.
        "`eve build`: the flag `--json`",
    ] {
        assert!(
            rest.iter().any(|p| p.starts_with(left)),
            "{left}: {rest:#?}"
        );
    }
}
