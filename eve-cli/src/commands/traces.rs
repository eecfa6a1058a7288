//! `eve traces [list|show ID] [--json]`: the local trace store (`.eve/traces.db`), which every
//! traced runtime of the project writes (see `eve_runtime::telemetry::local`): the newest
//! traces, or one trace as a tree of its spans.

use std::collections::HashMap;
use std::process::ExitCode;

use anyhow::Context;
use eve_runtime::telemetry::config::LOCAL_FILE;
use eve_runtime::telemetry::local::{StoredSpan, TraceStore};

use crate::cli::{TracesArgs, TracesCommand, TracesListArgs};
use crate::project::locate;
use crate::sanitize::{Untrusted, json_pretty, outln};

/// Runs `eve traces`.
pub fn run(args: TracesArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let path = project.state_dir.join(LOCAL_FILE);
    if !path.exists() {
        if args.json {
            outln!("[]");
        } else {
            outln!(
                "No traces yet: {} is made when a traced runtime first runs a turn.",
                path.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let store = TraceStore::open_read(&path)
        .with_context(|| format!("cannot open the trace store {}", path.display()))?;
    match args.command {
        None => list(
            &store,
            &TracesListArgs {
                limit: 20,
                session: None,
            },
            args.json,
        ),
        Some(TracesCommand::List(list_args)) => list(&store, &list_args, args.json),
        Some(TracesCommand::Show(show_args)) => show(&store, &show_args.id, args.json),
    }
}

fn ms(us: i64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

fn list(store: &TraceStore, args: &TracesListArgs, json: bool) -> anyhow::Result<ExitCode> {
    let traces = store
        .list(args.limit, args.session.as_deref())
        .context("cannot read the trace store")?;
    if json {
        outln!("{}", json_pretty(&traces));
        return Ok(ExitCode::SUCCESS);
    }
    if traces.is_empty() {
        outln!("No traces.");
        return Ok(ExitCode::SUCCESS);
    }
    for t in traces {
        let when = chrono::DateTime::from_timestamp_micros(t.start_us)
            .map(|d| d.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default();
        outln!(
            "{}  {when}  {:>10}  {:>3} spans{}  {}  {}",
            t.trace_id,
            ms(t.duration_us),
            t.spans,
            if t.errors > 0 {
                format!(", {} failed", t.errors)
            } else {
                String::new()
            },
            Untrusted(&t.name),
            Untrusted(t.session_id.as_deref().unwrap_or("")),
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show(store: &TraceStore, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let spans = store.spans(id).context("cannot read the trace store")?;
    if spans.is_empty() {
        anyhow::bail!("no trace `{id}` in the trace store");
    }
    if json {
        outln!("{}", json_pretty(&spans));
        return Ok(ExitCode::SUCCESS);
    }
    let ids: std::collections::HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: HashMap<Option<&str>, Vec<&StoredSpan>> = HashMap::new();
    for span in &spans {
        // A span whose parent is not here (a caller's) is shown as a root.
        let parent = span.parent_id.as_deref().filter(|p| ids.contains(p));
        children.entry(parent).or_default().push(span);
    }
    let origin = spans.iter().map(|s| s.start_us).min().unwrap_or(0);
    outln!("trace {}", spans[0].trace_id);
    let mut stack: Vec<(&StoredSpan, usize)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|s| (*s, 0)).collect())
        .unwrap_or_default();
    while let Some((span, depth)) = stack.pop() {
        let status = if span.status.starts_with("error") {
            format!("  [{}]", span.status)
        } else {
            String::new()
        };
        let attributes: Vec<String> = span
            .attributes
            .iter()
            .filter(|(k, _)| {
                k.starts_with("gen_ai.usage")
                    || k.as_str() == "gen_ai.tool.call.id"
                    || k.as_str() == "eve.tool.outcome"
                    || k.as_str() == "gen_ai.response.finish_reasons"
                    || k.as_str() == "eve.approval.outcome"
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        outln!(
            "{:indent$}{}  +{}  {}{}{}",
            "",
            Untrusted(&span.name),
            ms(span.start_us - origin),
            ms(span.end_us - span.start_us),
            Untrusted(&status),
            if attributes.is_empty() {
                String::new()
            } else {
                format!("  {}", Untrusted(attributes.join(" ")))
            },
            indent = depth * 2,
        );
        if let Some(kids) = children.get(&Some(span.span_id.as_str())) {
            stack.extend(kids.iter().rev().map(|s| (*s, depth + 1)));
        }
    }
    Ok(ExitCode::SUCCESS)
}
