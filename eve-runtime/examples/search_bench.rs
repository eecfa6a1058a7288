//! `bench/search.sh`: the built-in `glob` and `grep` against `rg` itself on one generated
//! workspace of 10,000 files, each query run `RUNS` times in turn (built-in, then `rg`), the
//! medians and their ratio printed. The built-in runs in this process through
//! `eve_runtime::tools::run_builtin`, as a turn calls it; `rg` is started as a process per query,
//! as eve's own tools start it in their box.
//!
//! Usage: `search_bench RG WORKSPACE [RUNS]` (the workspace made by `bench/search.sh`).

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eve_runtime::tools::{ToolContext, run_builtin};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(rg), Some(ws)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: search_bench RG WORKSPACE [RUNS]");
        return ExitCode::from(2);
    };
    let runs: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(10);
    let ws = PathBuf::from(ws);
    let ctx = ToolContext {
        session_id: "ses_bench".into(),
        call_id: "call_bench".into(),
        idempotency_key: "ses_bench:call_bench".into(),
        workspace: ws.clone(),
        agent_dir: ws.clone(),
        env: Arc::new(|_: &str| None),
        http: Default::default(),
        exec: Default::default(),
        confinement: eve_runtime::exec::Confinement::Host,
        network: None,
        progress: None,
        web: Default::default(),
        traceparent: None,
    };
    let queries: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "glob",
            json!({"pattern": "**/*.rs", "limit": 1000}),
            vec!["--files", "--glob", "**/*.rs"],
        ),
        (
            "glob",
            json!({"pattern": "*", "limit": 1000}),
            vec!["--files", "--glob", "*"],
        ),
        (
            "grep",
            json!({"pattern": "spotted_7", "limit": 1000}),
            vec!["--line-number", "--max-count", "1000", "spotted_7"],
        ),
        (
            "grep",
            json!({"pattern": "fn\\s+\\w+_7\\(", "glob": "*.rs"}),
            vec![
                "--line-number",
                "--max-count",
                "100",
                "--glob",
                "*.rs",
                "fn\\s+\\w+_7\\(",
            ],
        ),
        (
            "grep",
            json!({"pattern": "NEEDLE", "ignoreCase": true, "limit": 1}),
            vec![
                "--line-number",
                "--max-count",
                "1",
                "--ignore-case",
                "NEEDLE",
            ],
        ),
    ];
    println!(
        "{:<48} {:>12} {:>12} {:>8}",
        "query (10,000 files)", "built-in ms", "rg ms", "ratio"
    );
    let mut worst: f64 = 0.0;
    for (tool, input, rg_args) in &queries {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let r = run_builtin(tool, input, &ctx, CancellationToken::new()).await;
            ours.push(t.elapsed());
            if !r.ok {
                eprintln!("{tool} {input}: {r:?}");
                return ExitCode::FAILURE;
            }
            let t = Instant::now();
            let out = Command::new(rg)
                .current_dir(&ws)
                .args([
                    "--no-config",
                    "--color=never",
                    "--hidden",
                    "--glob",
                    "!.git/*",
                ])
                .args(rg_args)
                .output();
            theirs.push(t.elapsed());
            if out.map_or(true, |o| o.status.code().is_none_or(|c| c > 1)) {
                eprintln!("rg {rg_args:?} failed");
                return ExitCode::FAILURE;
            }
        }
        let (a, b) = (median(ours), median(theirs));
        let ratio = ms(a) / ms(b).max(0.001);
        worst = worst.max(ratio);
        println!(
            "{:<48} {:>12.2} {:>12.2} {:>7.2}x",
            format!("{tool} {input}")
                .chars()
                .take(48)
                .collect::<String>(),
            ms(a),
            ms(b),
            ratio
        );
    }
    println!("worst ratio built-in / rg: {worst:.2}x (target: within 2x)");
    ExitCode::SUCCESS
}
