//! How the docs test (`docs.rs`) compares a `text output` block with what its command printed.
//!
//! The block shows the output as a terminal shows it (stdout and stderr in the order they were
//! written), line for line and in order. Inside a line, `…` matches any text (an id, a hash, a
//! duration). A line that is only `…` stands for lines left out: any number of output lines,
//! none included. So the only gaps a block may have are the ones it shows, and output that
//! grows, shrinks or changes order fails the test instead of drifting away from the docs.

/// Whether `line` matches `pattern`, where `…` in the pattern matches any text.
pub fn matches(pattern: &str, line: &str) -> bool {
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

/// The line of a block that stands for left-out lines.
const GAP: &str = "…";

/// Lines of `text` without trailing blanks, and without blank lines at the end.
fn lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Checks the `text output` block `block` against `output`; the error says which line of the
/// block does not fit, and what the output has there.
pub fn check(block: &str, output: &str) -> Result<(), String> {
    let expected = lines(block);
    let got = lines(output);
    // The output positions reachable after matching the block's first `i` lines, in order.
    let mut reach: Vec<usize> = vec![0];
    for (i, pattern) in expected.iter().enumerate() {
        let next: Vec<usize> = if *pattern == GAP {
            let from = reach.iter().copied().min().unwrap_or(got.len());
            (from..=got.len()).collect()
        } else {
            reach
                .iter()
                .filter(|&&j| j < got.len() && matches(pattern, got[j]))
                .map(|&j| j + 1)
                .collect()
        };
        if next.is_empty() {
            let at = reach.iter().copied().min().unwrap_or(0);
            let there = got.get(at).map_or("the output ends there".to_owned(), |l| {
                format!("the output has `{l}` there")
            });
            let placed = if at == 0 {
                String::new()
            } else {
                format!(" after output line {at}")
            };
            return Err(format!(
                "line {} of the block, `{pattern}`, is not the next output line{placed}: \
                 {there} (a block shows the output line for line; put a `…` line where lines \
                 are left out)",
                i + 1
            ));
        }
        reach = next;
    }
    if reach.contains(&got.len()) {
        return Ok(());
    }
    let at = reach.iter().copied().min().unwrap_or(0);
    Err(format!(
        "the output goes on after the block's last line: `{}` is not shown (show it, or end the \
         block with a `…` line)",
        got.get(at).copied().unwrap_or_default()
    ))
}

#[test]
fn an_output_block_matches_line_for_line_with_visible_gaps() {
    assert!(matches("session wrun_…", "session wrun_01ABC"));
    assert!(matches("You said: hello", "You said: hello"));
    assert!(!matches("You said: hello", "You said: hello!"));
    assert!(matches("… returned: {…}", "x returned: {\"a\": 1}"));

    let out = "session wrun_01\n→ get_weather {}\n← get_weather: ok\nget_weather returned: {}\n";
    // The whole output, with `…` inside lines.
    assert!(check("session wrun_…\n→ …\n← …: ok\n… returned: {}\n", out).is_ok());
    // Left-out lines, said with `…` lines: at the start, in the middle, at the end, or nothing
    // left out where a gap stands.
    assert!(check("…\nget_weather returned: {}\n", out).is_ok());
    assert!(check("session wrun_01\n…\nget_weather returned: {}\n", out).is_ok());
    assert!(check("session wrun_01\n…\n", out).is_ok());
    assert!(check("…\nsession wrun_01\n→ get_weather {}\n…\n", out).is_ok());
    // Shortened without saying so: a line missing at the start, in the middle, at the end.
    let e = check("get_weather returned: {}\n", out).unwrap_err();
    assert!(e.contains("line 1 of the block"), "{e}");
    assert!(e.contains("`session wrun_01` there"), "{e}");
    let e = check("session wrun_01\nget_weather returned: {}\n", out).unwrap_err();
    assert!(e.contains("after output line 1"), "{e}");
    let e = check("session wrun_01\n→ get_weather {}\n", out).unwrap_err();
    assert!(e.contains("`← get_weather: ok` is not shown"), "{e}");
    // Out of order (a reply shown before the tool lines it came after).
    assert!(check("…\nget_weather returned: {}\n→ get_weather {}\n…\n", out).is_err());
    // A line the output does not have, and output that ends early.
    assert!(check("session wrun_01\n…\nsomething else\n", out).is_err());
    let e = check("…\nget_weather returned: {}\nmore\n", out).unwrap_err();
    assert!(e.contains("the output ends there"), "{e}");
    // Blank lines count, except at the end.
    assert!(check("a\nb\n", "a\n\nb\n").is_err());
    assert!(check("a\n\nb\n", "a\n\nb\n\n\n").is_ok());
}
