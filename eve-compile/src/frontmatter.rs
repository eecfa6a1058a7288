//! Front matter: YAML at the top of a markdown file, or in the leading comment block of a script.
//!
//! Markdown uses `---` fences. Scripts use a comment block whose first and last lines are `# ---`
//! (or `// ---`, `-- ---`, `; ---`), after an optional shebang. The extracted YAML keeps track of
//! where it came from so parse errors point at the right line of the original file.

/// Front matter found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    /// The YAML text (comment prefixes removed).
    pub yaml: String,
    /// Line offset: YAML line 1 is file line `line_offset + 1`.
    pub line_offset: u32,
    /// Column offset added by a stripped comment prefix.
    pub column_offset: u32,
    /// Everything after the front matter (markdown body); empty for scripts.
    pub body: String,
}

/// Why front matter could not be extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unterminated {
    /// 1-based line of the opening fence.
    pub line: u32,
    /// The fence that was expected to close it.
    pub fence: String,
}

/// Splits markdown front matter. No front matter → `Ok(None)`.
pub fn markdown(text: &str) -> Result<Option<FrontMatter>, Unterminated> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    if first.trim_end() != "---" {
        return Ok(None);
    }
    let mut yaml = String::new();
    let mut consumed = first.len();
    for line in lines {
        consumed += line.len();
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            return Ok(Some(FrontMatter {
                yaml,
                line_offset: 1,
                column_offset: 0,
                body: text[consumed..].to_owned(),
            }));
        }
        yaml.push_str(line);
    }
    Err(Unterminated {
        line: 1,
        fence: "---".to_owned(),
    })
}

const COMMENT_PREFIXES: &[&str] = &["#", "//", "--", ";"];

/// Extracts front matter from a script's leading comment block. No block → `Ok(None)`.
pub fn script(text: &str) -> Result<Option<FrontMatter>, Unterminated> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate().peekable();
    // Skip a shebang, a `"use strict"`-free preamble of blank lines, and encoding cookies.
    let mut open: Option<(usize, &str, usize)> = None;
    for (i, line) in lines.by_ref() {
        let t = line.trim();
        if t.is_empty() || (i == 0 && t.starts_with("#!")) || t.starts_with("# -*-") {
            continue;
        }
        for prefix in COMMENT_PREFIXES {
            if let Some(rest) = t.strip_prefix(prefix)
                && rest.trim() == "---"
            {
                let indent = line.len() - line.trim_start().len();
                open = Some((i, prefix, indent));
            }
        }
        break;
    }
    let Some((open_line, prefix, indent)) = open else {
        return Ok(None);
    };
    let mut yaml = String::new();
    let mut column_offset = u32::MAX;
    for (_, line) in lines {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix(prefix) else {
            break;
        };
        if rest.trim() == "---" {
            let strip = indent + prefix.len() + 1;
            return Ok(Some(FrontMatter {
                yaml,
                line_offset: u32::try_from(open_line + 1).unwrap_or(u32::MAX),
                column_offset: if column_offset == u32::MAX {
                    u32::try_from(strip).unwrap_or(0)
                } else {
                    column_offset
                },
                body: String::new(),
            }));
        }
        // Strip the prefix and one following space, keeping YAML indentation.
        let content = rest.strip_prefix(' ').unwrap_or(rest);
        if !content.trim().is_empty() {
            let stripped = line.len() - content.len();
            column_offset = column_offset.min(u32::try_from(stripped).unwrap_or(0));
        }
        yaml.push_str(content);
        yaml.push('\n');
    }
    Err(Unterminated {
        line: u32::try_from(open_line + 1).unwrap_or(u32::MAX),
        fence: format!("{prefix} ---"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_front_matter() {
        let fm = markdown("---\ndescription: x\n---\nBody\n")
            .unwrap()
            .unwrap();
        assert_eq!(fm.yaml, "description: x\n");
        assert_eq!(fm.body, "Body\n");
        assert!(markdown("# Title\n").unwrap().is_none());
        assert_eq!(markdown("---\na: 1\n").unwrap_err().line, 1);
    }

    #[test]
    fn script_front_matter() {
        let src = "#!/usr/bin/env python3\n# ---\n# description: Weather\n# input:\n#   type: object\n# ---\nprint(1)\n";
        let fm = script(src).unwrap().unwrap();
        assert_eq!(fm.yaml, "description: Weather\ninput:\n  type: object\n");
        assert_eq!(fm.line_offset, 2);
        let js = "// ---\n// description: x\n// ---\n";
        assert_eq!(script(js).unwrap().unwrap().yaml, "description: x\n");
        assert!(script("print(1)\n").unwrap().is_none());
        assert!(script("# ---\n# a: 1\nprint(1)\n").is_err());
    }
}
