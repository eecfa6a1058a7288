//! Every command shown in the docs is run by this test.
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
//!   them must name subcommands and flags that exist, as `--help` lists them.
//! - `text output` right after a run block: each of its lines must appear in that block's output,
//!   `…` matching anything.
//!
//! Anything else fails the test: a block without a language, an unknown `sh` attribute, shell
//! commands tagged `bash`, `console` or `shell`, a `$ ` prompt line in a block of another language.
//! `eve …` commands in inline code are checked like `needs-key` blocks (when the word after `eve`
//! is not a subcommand, the span is taken for output, such as `eve serving …`). `eve` commands in
//! every `sh` block are checked that way too, before anything runs. Relative links must point at
//! files that exist, and `#anchors` at headings that exist.
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
// Markdown

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

/// What a document holds that this test looks at.
#[derive(Debug, Default)]
struct Markdown {
    blocks: Vec<Block>,
    /// Inline code spans outside blocks, with their line.
    spans: Vec<(usize, String)>,
    /// Fences that were opened and never closed.
    unclosed: Option<usize>,
    /// Link targets outside blocks (`[text](target)`), with their line.
    links: Vec<(usize, String)>,
    /// Anchors of the headings (`## Effects and resume` → `effects-and-resume`).
    anchors: BTreeSet<String>,
}

fn parse_markdown(text: &str) -> Markdown {
    let mut md = Markdown::default();
    let mut open: Option<(usize, char, usize, usize, String, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some((start, ch, len, ind, info, body)) = &mut open {
            let run = trimmed.chars().take_while(|c| c == ch).count();
            if run >= *len && trimmed[run * ch.len_utf8()..].trim().is_empty() {
                md.blocks.push(Block {
                    line: *start,
                    info: info.clone(),
                    body: body.join("\n") + "\n",
                });
                open = None;
            } else {
                let strip = line.len() - line.trim_start_matches(' ').len();
                body.push(line[strip.min(*ind)..].to_owned());
            }
            continue;
        }
        let fence = ['`', '~']
            .into_iter()
            .map(|c| (c, trimmed.chars().take_while(|x| *x == c).count()))
            .find(|(_, n)| *n >= 3);
        if let Some((ch, len)) = fence {
            let info = trimmed[len..].trim().to_owned();
            if ch == '`' && info.contains('`') {
                spans(line, i + 1, &mut md.spans);
                continue;
            }
            open = Some((i + 1, ch, len, indent, info, Vec::new()));
            continue;
        }
        spans(line, i + 1, &mut md.spans);
        links(line, i + 1, &mut md.links);
        if trimmed.starts_with('#') {
            md.anchors.insert(anchor(trimmed.trim_start_matches('#')));
        }
    }
    if let Some((start, ..)) = open {
        md.unclosed = Some(start);
    }
    md
}

/// Inline code spans of one line (a run of N backticks up to the next run of exactly N).
fn spans(line: &str, number: usize, out: &mut Vec<(usize, String)>) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|c| **c == '`').count();
        let start = i + n;
        let mut j = start;
        let mut end = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = chars[j..].iter().take_while(|c| **c == '`').count();
                if m == n {
                    end = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match end {
            Some(e) => {
                let text: String = chars[start..e].iter().collect();
                out.push((number, text.trim().to_owned()));
                i = e + n;
            }
            None => i = start,
        }
    }
}

/// Targets of the Markdown links of one line.
fn links(line: &str, number: usize, out: &mut Vec<(usize, String)>) {
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push((number, target.to_owned()));
        rest = &after[end..];
    }
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
// What `eve --help` says exists

#[derive(Debug, Default)]
struct Help {
    subcommands: BTreeSet<String>,
    flags: BTreeSet<String>,
    value_flags: BTreeSet<String>,
}

/// Help of every subcommand path (`""`, `"run"`, `"sessions approve"`, …).
struct Cli(BTreeMap<String, Help>);

impl Cli {
    fn load() -> Self {
        let mut map = BTreeMap::new();
        let mut queue = vec![Vec::<String>::new()];
        while let Some(path) = queue.pop() {
            let out = Command::new(EVE)
                .args(&path)
                .arg("--help")
                .env_remove("EVE_PROJECT")
                .env_remove("EVE_AGENT_DIR")
                .output()
                .unwrap();
            assert!(out.status.success(), "eve {path:?} --help failed");
            let help = parse_help(&String::from_utf8_lossy(&out.stdout));
            for sub in &help.subcommands {
                if sub != "help" {
                    let mut next = path.clone();
                    next.push(sub.clone());
                    queue.push(next);
                }
            }
            map.insert(path.join(" "), help);
        }
        Self(map)
    }

    /// Checks the arguments of one `eve` command. `Ok(false)`: not a command (lenient only).
    fn check(&self, args: &[String], lenient: bool) -> Result<bool, String> {
        let mut path: Vec<String> = Vec::new();
        let mut help = &self.0[""];
        let mut i = 0;
        while i < args.len() {
            let arg = if lenient {
                args[i].replace(['[', ']'], "")
            } else {
                args[i].clone()
            };
            i += 1;
            if lenient && (arg.contains('…') || arg == "...") {
                return Ok(true);
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
                if !help.flags.contains(&name) {
                    return Err(format!("`{}` has no flag `{name}`", shown()));
                }
                if help.value_flags.contains(&name) && !arg.contains('=') {
                    i += 1;
                }
            } else if arg.starts_with('-') && arg.len() > 1 {
                let name: String = arg.chars().take(2).collect();
                if !help.flags.contains(&name) {
                    return Err(format!("`{}` has no flag `{name}`", shown()));
                }
                if help.value_flags.contains(&name) && arg.chars().count() == 2 {
                    i += 1;
                }
            } else if !help.subcommands.is_empty() {
                let choices: Vec<&str> = if lenient {
                    arg.split('|').collect()
                } else {
                    vec![arg.as_str()]
                };
                for choice in &choices {
                    if *choice == "help" {
                        return Ok(true);
                    }
                    if !help.subcommands.contains(*choice) {
                        if lenient && path.is_empty() {
                            return Ok(false);
                        }
                        return Err(format!(
                            "`{} {choice}`: no such command (there are: {})",
                            shown(),
                            help.subcommands
                                .iter()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
                path.push(choices[0].to_owned());
                help = &self.0[&path.join(" ")];
            }
        }
        let asks_help = args
            .iter()
            .any(|a| matches!(a.as_str(), "--help" | "-h" | "--version" | "-V"));
        if !help.subcommands.is_empty() && !asks_help {
            // In prose, `eve sessions` names the group of commands.
            if lenient {
                return Ok(!path.is_empty());
            }
            return Err(format!(
                "`eve {}` needs a subcommand",
                path.join(" ").trim_end()
            ));
        }
        Ok(true)
    }
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = "";
    let mut commands_text = String::new();
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line.trim_end_matches(':');
            continue;
        }
        let body = line.strip_prefix("  ");
        let starts_entry = body.is_some_and(|b| !b.starts_with(' ') && !b.is_empty());
        match section {
            "Commands" => {
                commands_text.push(' ');
                commands_text.push_str(line.trim());
                if starts_entry && let Some(name) = line.split_whitespace().next() {
                    help.subcommands.insert(name.to_owned());
                }
            }
            // `  -C, --project <DIR>` or `      --json`; wrapped descriptions are indented more.
            "Options"
                if line.len() - line.trim_start().len() <= 6
                    && line.trim_start().starts_with('-') =>
            {
                let mut names = Vec::new();
                for word in line.split_whitespace() {
                    if word.starts_with('-') {
                        names.push(word.trim_end_matches(',').to_owned());
                    } else if word.starts_with('<') {
                        help.value_flags.extend(names.iter().cloned());
                    } else {
                        break;
                    }
                }
                help.flags.extend(names);
            }
            _ => {}
        }
    }
    // `[alias: start]`, `[aliases: a, b]`, possibly wrapped over two lines.
    let mut rest = commands_text.as_str();
    while let Some(at) = rest.find("[alias") {
        let after = &rest[at..];
        let Some(end) = after.find(']') else { break };
        if let Some((_, names)) = after[..end].split_once(':') {
            for name in names.split(',') {
                help.subcommands.insert(name.trim().to_owned());
            }
        }
        rest = &after[end..];
    }
    help
}

// ---------------------------------------------------------------------------------------------
// Running a document

struct Outcome {
    status: Option<i32>,
    stdout: String,
    stderr: String,
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

    fn command(&mut self, script: &str) -> (Command, PathBuf, PathBuf) {
        self.count += 1;
        let n = self.count;
        let file = self.path(&format!("blocks/{n:03}.sh"));
        std::fs::write(&file, script).unwrap();
        let out = self.path(&format!("blocks/{n:03}.out"));
        let err = self.path(&format!("blocks/{n:03}.err"));
        let mut cmd = Command::new("bash");
        cmd.arg("--noprofile")
            .arg("--norc")
            .arg(&file)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.path("work"))
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .process_group(0);
        (cmd, out, err)
    }

    fn run(&mut self, body: &str) -> Outcome {
        let script = self.script(body);
        let (mut cmd, out, err) = self.command(&script);
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
            stdout: std::fs::read_to_string(out).unwrap_or_default(),
            stderr: std::fs::read_to_string(err).unwrap_or_default(),
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
        let (mut cmd, _, log) = self.command(&script);
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

/// Whether `line` matches `pattern`, where `…` in the pattern matches any text.
fn matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    let mut rest = line;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    parts.len() > 1 || rest.is_empty()
}

fn report(outcome: &Outcome, body: &str) -> String {
    format!(
        "--- block ---\n{body}--- stdout ---\n{}\n--- stderr ---\n{}",
        outcome.stdout.trim_end(),
        outcome.stderr.trim_end()
    )
}

/// Checks and runs one document; returns its failures and how many blocks ran.
fn check_document(repo: &Path, doc: &Path, cli: &Cli) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(repo.join(doc)).unwrap();
    let md = parse_markdown(&text);
    let (failures, kinds) = static_checks(repo, doc, &md, cli);
    if !failures.is_empty() {
        return (failures, 0);
    }
    run_blocks(repo, &doc.display().to_string(), &md, &kinds)
}

/// Everything checked without running: tags, links, `eve` commands and flags, shell syntax.
/// Returns the failures and the kind of each block.
fn static_checks(repo: &Path, doc: &Path, md: &Markdown, cli: &Cli) -> (Vec<String>, Vec<Kind>) {
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
            if let Err(e) = cli.check(&args, true) {
                fail(*line, format!("in `{span}`: {e}"));
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
                            if let Err(e) = cli.check(&args, false) {
                                fail(block.line, format!("in `{exec}`: {e}"));
                            }
                        }
                    }
                }
            }
            Kind::Run(_) | Kind::Server | Kind::Static => {
                for args in eve_commands(&block.body) {
                    if let Err(e) = cli.check(&args, false) {
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
                let lines: Vec<&str> = outcome
                    .stdout
                    .lines()
                    .chain(outcome.stderr.lines())
                    .map(str::trim_end)
                    .collect();
                for expected in block.body.lines().map(str::trim_end) {
                    if !expected.is_empty() && !lines.iter().any(|l| matches(expected, l)) {
                        failures.push(format!(
                            "{name}:{}: expected output line `{expected}` not found\n{}",
                            block.line,
                            report(outcome, "")
                        ));
                    }
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
                if !failures.is_empty() {
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
    let results: Vec<(Vec<String>, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = docs
            .iter()
            .map(|doc| {
                let (repo, cli) = (&repo, &cli);
                scope.spawn(move || check_document(repo, doc, cli))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failures: Vec<&String> = results.iter().flat_map(|(f, _)| f).collect();
    let ran: usize = results.iter().map(|(_, n)| n).sum();
    assert!(
        failures.is_empty(),
        "{} problem(s) in the docs:\n\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
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
    assert!(check("eve sessions", false).is_err());
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

    // Expected output.
    assert!(matches("session wrun_…", "session wrun_01ABC"));
    assert!(matches("You said: hello", "You said: hello"));
    assert!(!matches("You said: hello", "You said: hello!"));
    assert!(matches("… returned: {…}", "x returned: {\"a\": 1}"));
}
