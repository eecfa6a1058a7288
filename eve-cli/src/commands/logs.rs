//! `eve logs`: the log `eve dev` writes under `.eve/logs/` (JSON lines, rotated: `dev.log.1`
//! then `dev.log`), all of it or one session's lines (those logged inside its turns carry the
//! session in their `turn` span; others name it in a `session` field), printed as text or as the
//! stored JSON, and followed as it grows with `--follow`.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

use crate::cli::LogsArgs;
use crate::logs::DEV_LOG;
use crate::project::locate;
use crate::sanitize::{Untrusted, json_line, outln};

/// How often `--follow` looks for new lines.
const POLL: Duration = Duration::from_millis(200);

pub fn run(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let project = locate(&args.project)?;
    let path = project.state_dir.join(DEV_LOG);
    let rotated = PathBuf::from(format!("{}.1", path.display()));
    if !path.exists() && !rotated.exists() && !args.follow {
        anyhow::bail!(
            "no log at {}: `eve dev` writes it (`eve serve` logs to standard error only)",
            path.display()
        );
    }
    let show = |line: &str| print_line(line, &args);
    if let Ok(file) = std::fs::File::open(&rotated) {
        for line in BufReader::new(file).lines().map_while(Result::ok) {
            show(&line);
        }
    }
    let mut offset = 0;
    if let Ok(file) = std::fs::File::open(&path) {
        offset = read_from(file, 0, &show);
    }
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        std::thread::sleep(POLL);
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        let size = file.metadata().map_or(0, |m| m.len());
        if size < offset {
            // Rotated: the rest of the old file is `dev.log.1` now.
            if let Ok(old) = std::fs::File::open(&rotated) {
                read_from(old, offset, &show);
            }
            offset = 0;
        }
        if size > offset {
            offset = read_from(file, offset, &show);
        }
    }
}

/// Prints the whole lines of `file` from `offset`; the offset after the last whole line.
fn read_from(mut file: std::fs::File, offset: u64, show: &dyn Fn(&str)) -> u64 {
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return offset;
    }
    let mut reader = BufReader::new(file);
    let mut at = offset;
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(n) if line.ends_with('\n') => {
                at += n as u64;
                show(line.trim_end());
            }
            // A line still being written: read again next time.
            Ok(_) => break,
        }
    }
    at
}

/// The session a log line belongs to: its `turn` span's, or a `session` field.
pub fn session_of(line: &Value) -> Option<&str> {
    line["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|s| s["session"].as_str())
        .or_else(|| line["span"]["session"].as_str())
        .or_else(|| line["fields"]["session"].as_str())
}

fn print_line(line: &str, args: &LogsArgs) {
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return;
    };
    if let Some(wanted) = &args.session
        && !session_of(&value).is_some_and(|s| s.starts_with(wanted.as_str()))
    {
        return;
    }
    if args.json {
        outln!("{}", json_line(&value));
        return;
    }
    outln!("{}", Untrusted(&text_of(&value)));
}

/// A stored line as text: time, level, target, message, the other fields, and the turn's
/// session and turn ids when it has them.
pub fn text_of(value: &Value) -> String {
    let mut text = format!(
        "{} {:>5} {}: {}",
        value["timestamp"].as_str().unwrap_or_default(),
        value["level"].as_str().unwrap_or_default(),
        value["target"].as_str().unwrap_or_default(),
        value["fields"]["message"].as_str().unwrap_or_default()
    );
    if let Some(fields) = value["fields"].as_object() {
        for (k, v) in fields.iter().filter(|(k, _)| *k != "message") {
            match v.as_str() {
                Some(s) => text.push_str(&format!(" {k}={s}")),
                None => text.push_str(&format!(" {k}={v}")),
            }
        }
    }
    if let Some(span) = value["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == "turn")
    {
        text.push_str(&format!(
            " [{} {}]",
            span["session"].as_str().unwrap_or_default(),
            span["turn"].as_str().unwrap_or_default()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_turns_line_names_its_session() {
        let line = json!({"timestamp": "2026-12-06T10:00:00Z", "level": "WARN",
            "target": "eve_runtime::engine", "fields": {"message": "slow", "tool": "bash"},
            "spans": [{"name": "turn", "session": "wrun_01ABC", "turn": "turn_0"}]});
        assert_eq!(session_of(&line), Some("wrun_01ABC"));
        assert_eq!(
            text_of(&line),
            "2026-12-06T10:00:00Z  WARN eve_runtime::engine: slow tool=bash [wrun_01ABC turn_0]"
        );
        assert_eq!(
            session_of(&json!({"fields": {"session": "wrun_9"}})),
            Some("wrun_9")
        );
        assert_eq!(session_of(&json!({"fields": {}})), None);
    }
}
