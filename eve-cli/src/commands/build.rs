//! `eve build`: discover, compile, write `.eve/builds/<hash>/`, point `.eve/current` at it.

use std::process::ExitCode;

use eve_compile::build;
use eve_compile::render::{Style, render_all};
use serde_json::json;

use crate::cli::BuildArgs;
use crate::project::{locate, source_reader};
use crate::render::{duration, plural, stderr_color};

pub fn run(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let built = build::build(&project)?;
    super::store::publish_if_asked(args.publish, &project, built.hash.as_deref())?;
    let out = &built.output;
    let errors = out.error_count();
    let warnings = out.diagnostics.len() - errors;
    let counts = build::counts(&out.manifest.agent);
    if args.json {
        let report = json!({
            "ok": errors == 0,
            "hash": built.hash,
            "dir": built.dir,
            "reused": built.reused,
            "elapsed_ms": built.elapsed.as_secs_f64() * 1000.0,
            "counts": counts,
            "errors": errors,
            "warnings": warnings,
            "diagnostics": out.diagnostics,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(if errors == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let color = stderr_color();
    if !out.diagnostics.is_empty() {
        eprintln!(
            "{}",
            render_all(&out.diagnostics, &source_reader(&project), Style { color })
        );
    }
    if errors > 0 {
        eprintln!(
            "{} build failed: {}{}",
            crate::render::paint(color, "1;31", "error:"),
            plural(errors, "error"),
            if warnings > 0 {
                format!(", {}", plural(warnings, "warning"))
            } else {
                String::new()
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    let hash = built.hash.unwrap_or_default();
    let mut parts = vec![plural(counts.tools, "tool"), plural(counts.skills, "skill")];
    for (n, w) in [
        (counts.subagents, "subagent"),
        (counts.schedules, "schedule"),
        (counts.hooks, "hook"),
        (counts.connections, "connection"),
        (counts.channels, "channel"),
    ] {
        if n > 0 {
            parts.push(plural(n, w));
        }
    }
    eprintln!(
        "{} `{}` in {}: {} → .eve/builds/{hash}{}{}",
        crate::render::paint(color, "1;32", "Built"),
        out.manifest.agent.name,
        duration(built.elapsed),
        parts.join(", "),
        if built.reused { " (unchanged)" } else { "" },
        if warnings > 0 {
            format!(" ({})", plural(warnings, "warning"))
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
