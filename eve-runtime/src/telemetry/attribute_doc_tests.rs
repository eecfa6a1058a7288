//! `docs/observability.md` lists every span attribute the code sets, and nothing else: the
//! attribute names quoted in the span code against the ones in the doc's attribute table.

use std::collections::BTreeSet;

const PREFIXES: [&str; 3] = ["gen_ai.", "eve.", "error."];

/// Names starting with one of [`PREFIXES`] right after `open` and ending at one of `close`.
fn names(text: &str, open: char, close: &[char]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(open) {
        let rest = &text[i + open.len_utf8()..];
        if !PREFIXES.iter().any(|p| rest.starts_with(p)) {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_' || *c == '.')
            .collect();
        if rest[name.len()..].starts_with(close) {
            out.insert(name);
        }
    }
    out
}

#[test]
fn the_docs_list_every_span_attribute_the_code_sets() {
    let code = [
        include_str!("emit.rs"),
        include_str!("observe.rs"),
        include_str!("mod.rs"),
    ]
    .concat();
    let in_code = names(&code, '"', &['"']);
    let doc = include_str!("../../../docs/observability.md");
    let table = doc
        .split("### Attributes")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .expect("docs/observability.md has an `### Attributes` section");
    // `name` or `name=value` in backticks.
    let in_doc = names(table, '`', &['`', '=']);
    assert!(
        in_code.len() > 30,
        "attribute names found in the code: {in_code:?}"
    );
    let undocumented: Vec<_> = in_code.difference(&in_doc).collect();
    let unset: Vec<_> = in_doc.difference(&in_code).collect();
    assert!(
        undocumented.is_empty() && unset.is_empty(),
        "set but not in docs/observability.md: {undocumented:?}; documented but never set: {unset:?}"
    );
}

#[test]
fn the_scan_reads_quoted_and_backticked_names() {
    let code = r#"KeyValue::new("eve.step", 1); self.text("gen_ai.tool.name", x); "evening""#;
    assert_eq!(
        names(code, '"', &['"']).into_iter().collect::<Vec<_>>(),
        ["eve.step", "gen_ai.tool.name"]
    );
    let doc = "| `chat` | `gen_ai.operation.name=chat`, `eve.turn` (the turn) |";
    assert_eq!(
        names(doc, '`', &['`', '=']).into_iter().collect::<Vec<_>>(),
        ["eve.turn", "gen_ai.operation.name"]
    );
}
