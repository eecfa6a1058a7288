//! Diagnostics for people: rustc-style text with the offending source line and a caret.
//!
//! The same [`Diagnostic`] values are serialised as JSON for machines; this module only decides how
//! they look on a terminal. Colour is opt-in so snapshots and pipes get plain text.

use std::fmt::Write as _;

use eve_discover::{Diagnostic, Severity};

/// Rendering options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// Emit ANSI colours.
    pub color: bool,
}

impl Style {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// Renders one diagnostic. `source` returns the text of a file given its displayed path.
pub fn render(d: &Diagnostic, source: &dyn Fn(&str) -> Option<String>, style: Style) -> String {
    let mut out = String::new();
    let (label, colour) = match d.severity {
        Severity::Error => ("error", "1;31"),
        Severity::Warning => ("warning", "1;33"),
        Severity::Note => ("note", "1;36"),
    };
    let _ = writeln!(
        out,
        "{}{} {}",
        style.paint(colour, &format!("{label}[{}]", d.code)),
        style.paint("1", ":"),
        style.paint("1", &d.message)
    );
    let blue = "1;34";
    if let Some(file) = &d.file {
        let loc = match (d.line, d.column) {
            (Some(l), Some(c)) => format!("{file}:{l}:{c}"),
            (Some(l), None) => format!("{file}:{l}"),
            _ => file.clone(),
        };
        let snippet = d.line.and_then(|line| {
            let text = source(file)?;
            let src_line = text
                .lines()
                .nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
            Some((line, src_line.replace('\t', "    ")))
        });
        let width = snippet.as_ref().map_or(1, |(l, _)| l.to_string().len());
        let pad = " ".repeat(width);
        let _ = writeln!(out, "{pad}{} {loc}", style.paint(blue, "-->"));
        if let Some((line, text)) = snippet {
            let col = d.column.unwrap_or(1).max(1) as usize;
            let caret_at = text.chars().take(col - 1).count();
            let caret_len = text
                .chars()
                .skip(caret_at)
                // The token: up to a space, a key's colon, or a YAML flow indicator
                // (`{type: objekt}` marks `objekt`, not `objekt}`).
                .take_while(|c| !c.is_whitespace() && !matches!(c, ':' | ',' | '}' | ']'))
                .count()
                .max(1);
            let _ = writeln!(out, "{pad} {}", style.paint(blue, "|"));
            let _ = writeln!(
                out,
                "{} {} {text}",
                style.paint(blue, &line.to_string()),
                style.paint(blue, "|")
            );
            let _ = writeln!(
                out,
                "{pad} {} {}{}",
                style.paint(blue, "|"),
                " ".repeat(caret_at),
                style.paint(colour, &"^".repeat(caret_len))
            );
        }
        if let Some(help) = &d.help {
            let mut lines = help.lines();
            if let Some(first) = lines.next() {
                let _ = writeln!(out, "{pad} {} {first}", style.paint(blue, "= help:"));
                for more in lines {
                    let _ = writeln!(out, "{pad}         {more}");
                }
            }
        }
    } else if let Some(help) = &d.help {
        let _ = writeln!(out, "  {} {help}", style.paint(blue, "= help:"));
    }
    out
}

/// Renders all diagnostics, separated by blank lines.
pub fn render_all(
    diags: &[Diagnostic],
    source: &dyn Fn(&str) -> Option<String>,
    style: Style,
) -> String {
    diags
        .iter()
        .map(|d| render(d, source, style))
        .collect::<Vec<_>>()
        .join("\n")
}
