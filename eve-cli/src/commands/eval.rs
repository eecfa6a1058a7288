//! `eve eval`: run the cases of `evals/` and report what passed.
//!
//! The cases are discovered and checked first (`eve_compile::evals`); a case file with errors
//! stops the suite before anything runs (exit 2), as a broken agent does. Each selected case then
//! runs in a fresh session, in parallel up to `--max-concurrency`: in this process against the
//! current build, every case on one private store that keeps cases apart (`local`), or against a
//! running server over the session API (`remote`, `--url`). What the session did is checked against the case's expectations
//! (`eve_compile::evals::check`, then the judge and the scorer command), and the results are
//! printed as a table, JSON, and JUnit XML (`report`), all from the same data.

mod judge;
mod local;
mod remote;
mod report;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use eve_compile::evals::{self, EvalCase, Failure, Observed};
use eve_compile::render::{Style, render_all};
use serde_json::Value;

use crate::cli::EvalArgs;
use crate::project::{locate, source_reader};
use crate::render::{paint, plural, stderr_color};
use crate::sanitize::{Untrusted, errln, out, outln};

/// Exit status when the suite could not run.
const EXIT_SUITE: u8 = 2;

/// How long a case may run when it sets no `max_seconds`.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);

/// What running one case in a session produced.
pub(crate) struct Run {
    /// The session's events, oldest first: `(type, data)`.
    pub events: Vec<(String, Value)>,
    /// Cost in US dollars, when the runner knows it.
    pub cost_usd: f64,
    /// Failures found by the runner itself (an approval nobody answered, the scorer command).
    pub failures: Vec<Failure>,
    /// The session id.
    pub session: String,
}

/// The result of one case.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct CaseResult {
    pub id: String,
    pub file: String,
    pub line: u32,
    pub tags: Vec<String>,
    /// `passed`, `failed` or `error`.
    pub result: &'static str,
    pub session: Option<String>,
    pub steps: u64,
    pub tokens: u64,
    pub cost_usd: f64,
    pub seconds: f64,
    pub failures: Vec<Failure>,
    /// Why the case could not run to the end.
    pub error: Option<String>,
    /// The judge's score, when the case has one.
    pub judge_score: Option<f64>,
    /// Tools called, in order, with their inputs.
    pub calls: Vec<evals::ObservedCall>,
}

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let color = stderr_color();
    let Some(suite) = evals::load(&project.root) else {
        errln!(
            "{} no `evals/` folder in {}: add cases as evals/NAME.yaml (see docs/evals.md)",
            paint(color, "1;31", "error:"),
            project.root.display()
        );
        return Ok(ExitCode::from(EXIT_SUITE));
    };
    if !suite.diagnostics.is_empty() {
        errln!(
            "{}",
            render_all(
                &suite.diagnostics,
                &source_reader(&project),
                Style { color }
            )
        );
    }
    if suite.error_count() > 0 {
        errln!(
            "{} the eval cases have {}; fix them and run again",
            paint(color, "1;31", "error:"),
            plural(suite.error_count(), "error")
        );
        return Ok(ExitCode::from(EXIT_SUITE));
    }
    let cases = match select(&suite.cases, &args) {
        Ok(c) => c,
        Err(e) => {
            errln!("{} {}", paint(color, "1;31", "error:"), Untrusted(&e));
            return Ok(ExitCode::from(EXIT_SUITE));
        }
    };
    if args.list {
        report::list(&cases, args.json);
        return Ok(ExitCode::SUCCESS);
    }
    if cases.is_empty() {
        errln!(
            "{} no case matches the selection",
            paint(color, "1;31", "error:")
        );
        return Ok(ExitCode::from(EXIT_SUITE));
    }
    if cases.iter().any(|c| c.expect.judge.is_some())
        && let Err(e) = judge::check_config(&cases, args.judge_model.as_deref())
    {
        errln!("{} {}", paint(color, "1;31", "error:"), Untrusted(&e));
        return Ok(ExitCode::from(EXIT_SUITE));
    }
    let runner: Arc<Runner> = match &args.url {
        Some(url) => Arc::new(Runner::Remote(remote::Remote::new(
            url,
            args.token.clone(),
        )?)),
        None => {
            if !crate::commands::run::build_agent(&project)? {
                return Ok(ExitCode::from(EXIT_SUITE));
            }
            match local::Local::new(&project, &cases) {
                Ok(l) => Arc::new(Runner::Local(Box::new(l))),
                Err(e) => {
                    errln!(
                        "{} {}",
                        paint(color, "1;31", "error:"),
                        Untrusted(format!("{e:#}"))
                    );
                    return Ok(ExitCode::from(EXIT_SUITE));
                }
            }
        }
    };
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let started = Instant::now();
    let results = tokio.block_on(run_all(
        runner,
        cases,
        args.max_concurrency.max(1),
        args.judge_model.clone(),
    ));
    let elapsed = started.elapsed();
    if let Some(path) = &args.junit {
        std::fs::write(path, report::junit(&results, elapsed))
            .with_context(|| format!("cannot write the JUnit report {}", path.display()))?;
    }
    if args.json {
        outln!("{}", report::json(&results, elapsed));
    } else {
        out!(
            "{}",
            report::table(&results, elapsed, crate::render::stdout_color())
        );
    }
    let all_passed = results.iter().all(|r| r.result == "passed");
    Ok(if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the cases tagged with any of `tags` against build `hash`, in this process: the gate a
/// release candidate must pass (`gate:` in `agent.yaml`).
pub(crate) async fn gate(
    project: &eve_compile::Project,
    hash: &str,
    tags: &[String],
) -> eve_runtime::store::GateReport {
    use eve_runtime::store::{GateCase, GateReport};
    let mut report = GateReport {
        tags: tags.to_vec(),
        ..GateReport::default()
    };
    let Some(suite) = evals::load(&project.root) else {
        report.error = Some(format!(
            "the gate needs eval cases tagged {}, and {} has no `evals/` folder",
            tags.join(", "),
            project.root.display()
        ));
        return report;
    };
    if suite.error_count() > 0 {
        report.error = Some(format!(
            "the eval cases have {}; `eve eval --list` shows them",
            plural(suite.error_count(), "error")
        ));
        return report;
    }
    let cases: Vec<EvalCase> = suite
        .cases
        .iter()
        .filter(|c| c.tags.iter().any(|t| tags.contains(t)))
        .cloned()
        .collect();
    if cases.is_empty() {
        report.error = Some(format!(
            "no eval case is tagged {} (the gate would pass nothing)",
            tags.join(", ")
        ));
        return report;
    }
    let runner = match local::Local::for_build(project, &cases, Some(hash)) {
        Ok(l) => Arc::new(Runner::Local(Box::new(l))),
        Err(e) => {
            report.error = Some(format!("{e:#}"));
            return report;
        }
    };
    for r in run_all(runner, cases, 2, None).await {
        let reason = r
            .error
            .clone()
            .or_else(|| (r.result != "passed").then(|| report::first_problem(&r)));
        report.cases.push(GateCase {
            id: r.id,
            result: r.result.to_owned(),
            reason,
        });
    }
    report
}

/// The cases named by the ids and tags, in suite order. An id that names nothing is an error.
fn select(all: &[EvalCase], args: &EvalArgs) -> Result<Vec<EvalCase>, String> {
    let named = |c: &EvalCase, id: &str| {
        c.id == id
            || c.id
                .strip_prefix(id)
                .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('#'))
    };
    for id in &args.ids {
        if !all.iter().any(|c| named(c, id)) {
            let known: Vec<&str> = all.iter().map(|c| c.id.as_str()).take(20).collect();
            return Err(format!(
                "no eval case `{id}`; the cases are: {} (`eve eval --list` shows them all)",
                known.join(", ")
            ));
        }
    }
    Ok(all
        .iter()
        .filter(|c| args.ids.is_empty() || args.ids.iter().any(|id| named(c, id)))
        .filter(|c| args.tag.is_empty() || c.tags.iter().any(|t| args.tag.contains(t)))
        .filter(|c| !c.tags.iter().any(|t| args.exclude_tag.contains(t)))
        .cloned()
        .collect())
}

/// Runs one case's turns in a fresh session: here, or on a server.
pub(crate) enum Runner {
    Local(Box<local::Local>),
    Remote(remote::Remote),
}

impl Runner {
    async fn run(&self, case: &EvalCase) -> anyhow::Result<Run> {
        match self {
            Runner::Local(l) => l.run(case).await,
            Runner::Remote(r) => r.run(case).await,
        }
    }
}

async fn run_all(
    runner: Arc<Runner>,
    cases: Vec<EvalCase>,
    concurrency: usize,
    judge_model: Option<String>,
) -> Vec<CaseResult> {
    let total = cases.len();
    let progress = Arc::new(report::Progress::new(
        total,
        std::io::stderr().is_terminal(),
    ));
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::with_capacity(total);
    for case in cases {
        let runner = runner.clone();
        let gate = gate.clone();
        let progress = progress.clone();
        let judge_model = judge_model.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            progress.start(&case.id);
            let result = run_case(runner.as_ref(), &case, judge_model.as_deref()).await;
            progress.done(&case.id, result.result);
            result
        }));
    }
    let mut out = Vec::with_capacity(total);
    for t in tasks {
        match t.await {
            Ok(r) => out.push(r),
            Err(e) => out.push(CaseResult {
                id: "?".to_owned(),
                file: String::new(),
                line: 0,
                tags: Vec::new(),
                result: "error",
                session: None,
                steps: 0,
                tokens: 0,
                cost_usd: 0.0,
                seconds: 0.0,
                failures: Vec::new(),
                error: Some(format!("the case's task stopped: {e}")),
                judge_score: None,
                calls: Vec::new(),
            }),
        }
    }
    progress.finish();
    out
}

async fn run_case(runner: &Runner, case: &EvalCase, judge_model: Option<&str>) -> CaseResult {
    let start = Instant::now();
    let deadline = case
        .expect
        .max_seconds
        .map_or(DEFAULT_DEADLINE, |s| Duration::from_secs_f64(s.max(0.001)));
    let run = tokio::time::timeout(deadline, runner.run(case)).await;
    let seconds = start.elapsed().as_secs_f64();
    let mut result = CaseResult {
        id: case.id.clone(),
        file: case.file.clone(),
        line: case.line,
        tags: case.tags.clone(),
        result: "passed",
        session: None,
        steps: 0,
        tokens: 0,
        cost_usd: 0.0,
        seconds,
        failures: Vec::new(),
        error: None,
        judge_score: None,
        calls: Vec::new(),
    };
    let run = match run {
        Ok(Ok(run)) => run,
        Ok(Err(e)) => {
            result.result = "error";
            result.error = Some(format!("{e:#}"));
            return result;
        }
        Err(_) => {
            result.result = "failed";
            result.failures.push(Failure::new(
                "max_seconds",
                format!("the case to finish within {:.1} s", deadline.as_secs_f64()),
                "it was still running and was stopped".to_owned(),
            ));
            return result;
        }
    };
    let mut seen = Observed {
        cost_usd: run.cost_usd,
        seconds,
        ..Observed::default()
    };
    seen.add_events(run.events.iter().map(|(k, d)| (k.as_str(), d)));
    result.session = Some(run.session.clone());
    result.steps = seen.steps;
    result.tokens = seen.tokens;
    result.cost_usd = seen.cost_usd;
    result.failures = evals::check(case, &seen);
    result.failures.extend(run.failures);
    if let Some(j) = &case.expect.judge {
        match judge::grade(j, judge_model, &judge::transcript(&run.events)).await {
            Ok((score, reason)) => {
                result.judge_score = Some(score);
                if score < j.threshold {
                    result.failures.push(Failure::new(
                        "judge",
                        format!("a score of at least {} for: {}", j.threshold, j.rubric),
                        format!("the judge gave {score}: {reason}"),
                    ));
                }
            }
            Err(e) => {
                result.result = "error";
                result.error = Some(format!("the judge could not grade the case: {e:#}"));
            }
        }
    }
    result.calls = seen.calls;
    if result.error.is_none() && !result.failures.is_empty() {
        result.result = "failed";
    }
    result
}
