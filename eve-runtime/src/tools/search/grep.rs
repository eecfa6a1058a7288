//! `grep`: ripgrep's search (`grep-regex`, `grep-searcher`) over the files the walk lists, its
//! lines printed as ripgrep prints them (`path:line:text`, context `path-line-text`, `--`
//! between groups), binary files skipped as ripgrep skips them (a NUL byte ends the file's
//! search), `limit` matching lines per file (`--max-count`).

use std::path::PathBuf;
use std::sync::Mutex;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::walk::{self, Found};
use super::{
    DEFAULT_LIMIT, Env, GREP, MAX_LIMIT, MAX_OUTPUT_BYTES, WALK_TIME, cap_line, overrides, start,
    start_error, walk_of,
};
use crate::tools::error::ToolError;

/// The input of `grep`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GrepInput {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    ignore_case: Option<bool>,
    literal: Option<bool>,
    context: Option<u64>,
    limit: Option<u64>,
}

/// One line of a file's result.
enum Line {
    Match(u64, Vec<u8>),
    Context(u64, Vec<u8>),
    Break,
}

/// What one file gave.
struct Hits {
    rel: PathBuf,
    lines: Vec<Line>,
}

/// Collects one file's lines, stopping after `limit` matching lines and the context after the
/// last.
struct Collect {
    limit: u64,
    after: usize,
    matches: u64,
    after_left: usize,
    lines: Vec<Line>,
    binary: bool,
}

impl Sink for Collect {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.matches >= self.limit {
            return Ok(false);
        }
        self.matches += 1;
        self.lines.push(Line::Match(
            mat.line_number().unwrap_or(0),
            mat.bytes().to_vec(),
        ));
        if self.matches >= self.limit {
            self.after_left = self.after;
            return Ok(self.after_left > 0);
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if self.matches >= self.limit {
            if *ctx.kind() != SinkContextKind::After || self.after_left == 0 {
                return Ok(false);
            }
            self.after_left -= 1;
        }
        self.lines.push(Line::Context(
            ctx.line_number().unwrap_or(0),
            ctx.bytes().to_vec(),
        ));
        Ok(self.matches < self.limit || self.after_left > 0)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, Self::Error> {
        if !self.lines.is_empty() {
            self.lines.push(Line::Break);
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// The matcher ripgrep builds for these options.
fn matcher(input: &GrepInput) -> Result<RegexMatcher, ToolError> {
    RegexMatcherBuilder::new()
        .case_insensitive(input.ignore_case.unwrap_or(false))
        .fixed_strings(input.literal.unwrap_or(false))
        .line_terminator(Some(b'\n'))
        .build(&input.pattern)
        .map_err(|e| ToolError::InvalidInput(format!("`pattern` is not a valid regex: {e}")))
}

/// Searches one file; `None` when it has no match, is binary, or is no longer a regular file.
fn search(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    found: &Found,
    limit: u64,
    context: usize,
) -> Option<Hits> {
    let file = found.open()?;
    let mut sink = Collect {
        limit,
        after: context,
        matches: 0,
        after_left: 0,
        lines: Vec::new(),
        binary: false,
    };
    searcher.search_file(matcher, &file, &mut sink).ok()?;
    while matches!(sink.lines.last(), Some(Line::Break)) {
        sink.lines.pop();
    }
    (sink.matches > 0 && !sink.binary).then(|| Hits {
        rel: found.rel.clone(),
        lines: sink.lines,
    })
}

/// Runs `grep`: `{content, matchCount, path, truncated}`.
pub(crate) fn grep(env: &Env, input: GrepInput) -> Result<(Value, bool), ToolError> {
    let (rel, shown) = start(input.path.as_deref())?;
    let limit = input.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let context = usize::try_from(input.context.unwrap_or(0).min(MAX_LIMIT)).unwrap_or(0);
    let matcher = matcher(&input)?;
    let overrides = overrides(input.glob.as_deref())?;
    let builder = {
        let mut b = SearcherBuilder::new();
        b.line_number(true)
            .binary_detection(BinaryDetection::quit(b'\0'))
            .before_context(context)
            .after_context(context);
        b
    };
    let searchers: Mutex<Vec<Searcher>> = Mutex::new(Vec::new());
    let hits = Mutex::new(Vec::new());
    let each = |found: Found| {
        let mut searcher = searchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_else(|| builder.build());
        let got = search(&mut searcher, &matcher, &found, limit, context);
        searchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(searcher);
        if let Some(got) = got {
            hits.lock().unwrap_or_else(|e| e.into_inner()).push(got);
        }
    };
    let ended = match walk::walk(&walk_of(env, &rel, &overrides), each) {
        Ok(ended) => ended,
        // A file given as the path is searched as ripgrep searches a file it is given.
        Err(walk::StartError::File(found)) => {
            let mut searcher = builder.build();
            if let Some(got) = search(&mut searcher, &matcher, &found, limit, context) {
                hits.lock().unwrap_or_else(|e| e.into_inner()).push(got);
            }
            walk::Ended::default()
        }
        Err(e) => return Err(start_error(&shown, e, GREP)),
    };
    let mut hits = hits.into_inner().unwrap_or_else(|e| e.into_inner());
    hits.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(render(hits, &shown, limit, context > 0, ended.stopped))
}

/// The lines of all files, as ripgrep prints them, capped.
fn render(
    hits: Vec<Hits>,
    shown: &str,
    limit: u64,
    separate: bool,
    stopped: bool,
) -> (Value, bool) {
    let mut out: Vec<String> = Vec::new();
    let mut bytes = 0usize;
    let mut matches = 0u64;
    let mut cut = false;
    let mut limited = false;
    'files: for (i, file) in hits.iter().enumerate() {
        let path = file.rel.to_string_lossy();
        let file_matches = file
            .lines
            .iter()
            .filter(|l| matches!(l, Line::Match(..)))
            .count();
        limited |= u64::try_from(file_matches).unwrap_or(u64::MAX) >= limit;
        let sep = (separate && i > 0).then(|| (false, "--".to_owned()));
        for (is_match, line) in sep.into_iter().chain(file.lines.iter().map(|l| match l {
            Line::Match(n, text) => (true, format!("{path}:{n}:{}", text_of(text))),
            Line::Context(n, text) => (false, format!("{path}-{n}-{}", text_of(text))),
            Line::Break => (false, "--".to_owned()),
        })) {
            let line = cap_line(&line);
            if bytes + line.len() + 1 > MAX_OUTPUT_BYTES && !out.is_empty() {
                cut = true;
                break 'files;
            }
            bytes += line.len() + 1;
            matches += u64::from(is_match);
            out.push(line);
        }
    }
    if out.is_empty() {
        let content = if stopped {
            format!(
                "No matches found before the search stopped after {}s",
                WALK_TIME.as_secs()
            )
        } else {
            "No matches found".to_owned()
        };
        return (
            json!({"content": content, "matchCount": 0, "path": shown, "truncated": stopped}),
            false,
        );
    }
    let mut notes = Vec::new();
    if limited {
        notes.push(format!(
            "Match limit reached ({limit} per file). Use a larger limit or more specific pattern."
        ));
    }
    if cut {
        notes.push(format!(
            "Output truncated at {MAX_OUTPUT_BYTES} bytes. Use a more specific path or pattern."
        ));
    }
    if stopped {
        notes.push(format!(
            "The search stopped after {}s: results are partial.",
            WALK_TIME.as_secs()
        ));
    }
    let mut content = out.join("\n");
    let truncated = !notes.is_empty();
    if truncated {
        content.push_str(&format!("\n\n[{}]", notes.join(" ")));
    }
    (
        json!({"content": content, "matchCount": matches, "path": shown, "truncated": truncated}),
        cut,
    )
}

/// A line's text without its line terminator, invalid UTF-8 replaced.
fn text_of(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}
