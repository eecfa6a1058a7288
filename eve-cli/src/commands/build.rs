//! `eve build`: discover, compile, write `.eve/builds/<hash>/`, and hand the build to the
//! runtime as a release: activated (`.eve/current` then points at it), pending review (the
//! delta and the `eve activate` command are printed; exit 0), or refused by the gate (the failed
//! cases are printed; exit 1).

use std::process::ExitCode;

use eve_compile::build;
use eve_compile::render::{Style, render_all};
use eve_runtime::releases::{ReleaseOutcome, source_revision};
use serde_json::json;

use crate::cli::BuildArgs;
use crate::project::{locate, source_reader};
use crate::render::{duration, plural, stderr_color};
use crate::sanitize::{errln, outln};

pub fn run(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    // The release records the source revision: git runs while the agent compiles.
    let agent_dir = project.agent_dir.clone();
    let source = std::thread::spawn(move || source_revision(&agent_dir));
    let built = build::build_candidate(&project)?;
    super::store::publish_if_asked(args.publish, &project, built.hash.as_deref())?;
    let out = &built.output;
    let errors = out.error_count();
    let warnings = out.diagnostics.len() - errors;
    let counts = build::counts(&out.manifest.agent);
    // A release activated before this command ran was already the active one.
    let before = eve_runtime::store::now_ms();
    let outcome = match &built.hash {
        Some(hash) => {
            let source = source.join().unwrap_or_default();
            Some(super::releases::release_build_step(
                &project, hash, args.force, source,
            )?)
        }
        None => None,
    };
    let refused = matches!(outcome, Some(ReleaseOutcome::Rejected(_)));
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
            "node": out.node,
            "release": outcome.as_ref().map(super::releases::outcome_json),
        });
        outln!("{}", crate::sanitize::json_pretty(&report));
        return Ok(if errors == 0 && !refused {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let color = stderr_color();
    if let Some(node) = &out.node {
        errln!(
            "{}",
            crate::render::paint(color, "2", &format!("modules evaluated with Node {node}"))
        );
    }
    if !out.diagnostics.is_empty() {
        errln!(
            "{}",
            render_all(&out.diagnostics, &source_reader(&project), Style { color })
        );
    }
    if errors > 0 {
        errln!(
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
    let parts = crate::render::counted(&counts);
    errln!(
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
    if let Some(ReleaseOutcome::Activated(r)) = &outcome
        && r.activated_at.is_some_and(|at| at < before)
    {
        errln!(
            "{}",
            crate::render::paint(
                color,
                "2",
                &format!("release {} stays active (no change)", r.id)
            )
        );
    } else if let Some(outcome) = &outcome
        && super::releases::print_outcome(outcome, color)
    {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
