//! What `eve eval` prints: the live progress line, the summary table, JSON and JUnit XML.
//!
//! The three outputs are views of the same [`CaseResult`]s: JSON carries every field; JUnit
//! puts each failure's expectation, expected and actual text in `<failure>` and the counts in
//! the suite's attributes, so CI systems show what the table shows. A failure quotes what the
//! model said: the table shows it through [`Untrusted`], JSON escapes it ([`json_line`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use eve_compile::evals::EvalCase;
use serde_json::json;

use super::CaseResult;
use crate::render::{duration, paint};
use crate::sanitize::{Untrusted, erase_err_line, err, json_line, neutralise, outln};

/// The live line on a terminal: `[12/200] 11 passed, 1 failed · running weather#3`.
pub struct Progress {
    total: usize,
    live: bool,
    state: Mutex<(usize, usize, usize, Vec<String>)>,
    started: Instant,
}

impl Progress {
    pub fn new(total: usize, live: bool) -> Self {
        Self {
            total,
            live,
            state: Mutex::new((0, 0, 0, Vec::new())),
            started: Instant::now(),
        }
    }

    pub fn start(&self, id: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.3.push(id.to_owned());
            self.draw(&s);
        }
    }

    pub fn done(&self, id: &str, result: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.3.retain(|r| r != id);
            match result {
                "passed" => s.0 += 1,
                "failed" => s.1 += 1,
                _ => s.2 += 1,
            }
            self.draw(&s);
        }
    }

    fn draw(&self, s: &(usize, usize, usize, Vec<String>)) {
        if !self.live {
            return;
        }
        let done = s.0 + s.1 + s.2;
        let running =
            s.3.first()
                .map_or(String::new(), |r| format!(" · running {r}"));
        let line = format!(
            "[{done}/{}] {} passed, {} failed, {} errors{running} ({})",
            self.total,
            s.0,
            s.1,
            s.2,
            duration(self.started.elapsed())
        );
        erase_err_line();
        err!(
            "{}",
            crate::render::paint(true, "2", &neutralise(&cut(&line, 100)))
        );
    }

    pub fn finish(&self) {
        if self.live {
            erase_err_line();
        }
    }
}

fn cut(s: &str, n: usize) -> String {
    eve_compile::evals::check::short(s, n)
}

/// `eve eval --list`.
pub fn list(cases: &[EvalCase], as_json: bool) {
    if as_json {
        let v: Vec<_> = cases
            .iter()
            .map(|c| json!({"id": c.id, "file": c.file, "line": c.line, "tags": c.tags}))
            .collect();
        outln!("{}", json_line(&json!({"cases": v})));
        return;
    }
    for c in cases {
        if c.tags.is_empty() {
            outln!("{}", c.id);
        } else {
            outln!("{}  [{}]", c.id, c.tags.join(", "));
        }
    }
}

struct Counts {
    passed: usize,
    failed: usize,
    errors: usize,
}

fn counts(results: &[CaseResult]) -> Counts {
    Counts {
        passed: results.iter().filter(|r| r.result == "passed").count(),
        failed: results.iter().filter(|r| r.result == "failed").count(),
        errors: results.iter().filter(|r| r.result == "error").count(),
    }
}

/// The first thing wrong with a case, as one line.
pub fn first_problem(r: &CaseResult) -> String {
    if let Some(e) = &r.error {
        return format!("error: {e}");
    }
    r.failures
        .first()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// The summary table and the totals line.
pub fn table(results: &[CaseResult], elapsed: Duration, color: bool) -> String {
    let width = results
        .iter()
        .map(|r| r.id.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    let mut out = format!(
        "{:<width$}  {:<6}  {:>5}  {:>7}  {:>8}  {:>7}  {}\n",
        "case", "result", "steps", "tokens", "cost", "time", "first failed expectation"
    );
    for r in results {
        let (code, word) = match r.result {
            "passed" => ("32", "pass"),
            "failed" => ("31", "FAIL"),
            _ => ("33", "ERROR"),
        };
        let id = eve_compile::evals::check::short(&r.id, width);
        out.push_str(&format!(
            "{id:<width$}  {}  {:>5}  {:>7}  {:>8}  {:>7}  {}\n",
            paint(color, code, &format!("{word:<6}")),
            r.steps,
            r.tokens,
            format!("${:.4}", r.cost_usd),
            duration(Duration::from_secs_f64(r.seconds)),
            Untrusted(first_problem(r))
        ));
    }
    let c = counts(results);
    let total = results.len();
    out.push_str(&format!(
        "\n{}/{total} passed ({} failed, {} errors) in {}; pass@1 {}/{total}\n",
        c.passed,
        c.failed,
        c.errors,
        duration(elapsed),
        c.passed
    ));
    out
}

/// Every result as one JSON document.
pub fn json(results: &[CaseResult], elapsed: Duration) -> String {
    let c = counts(results);
    json_line(&json!({
        "total": results.len(),
        "passed": c.passed,
        "failed": c.failed,
        "errors": c.errors,
        "seconds": elapsed.as_secs_f64(),
        "cases": results,
    }))
}

fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => {}
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one `<testsuite>` of one `<testcase>` per case.
pub fn junit(results: &[CaseResult], elapsed: Duration) -> String {
    let c = counts(results);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let head = format!(
        "tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{:.3}\"",
        results.len(),
        c.failed,
        c.errors,
        elapsed.as_secs_f64()
    );
    out.push_str(&format!("<testsuites name=\"eve eval\" {head}>\n"));
    out.push_str(&format!("  <testsuite name=\"evals\" {head}>\n"));
    for r in results {
        out.push_str(&format!(
            "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\">\n",
            xml(&r.id),
            xml(&r
                .file
                .trim_end_matches(".yaml")
                .trim_end_matches(".yml")
                .replace('/', ".")),
            xml(&r.file),
            r.line,
            r.seconds
        ));
        out.push_str(&format!(
            "      <properties><property name=\"steps\" value=\"{}\"/><property name=\"tokens\" value=\"{}\"/><property name=\"cost_usd\" value=\"{}\"/>{}</properties>\n",
            r.steps,
            r.tokens,
            r.cost_usd,
            r.session
                .as_ref()
                .map(|s| format!("<property name=\"session\" value=\"{}\"/>", xml(s)))
                .unwrap_or_default()
        ));
        if let Some(e) = &r.error {
            out.push_str(&format!(
                "      <error message=\"{}\" type=\"error\">{}</error>\n",
                xml(&eve_compile::evals::check::short(e, 200)),
                xml(e)
            ));
        } else if let Some(first) = r.failures.first() {
            let body: Vec<String> = r.failures.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
                xml(&eve_compile::evals::check::short(&first.to_string(), 200)),
                xml(&first.expectation),
                xml(&body.join("\n"))
            ));
        }
        out.push_str("    </testcase>\n");
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}
