//! What the docs quote of eve's own output, checked against eve: the README's diagnostic example
//! is what `eve build` prints for the mistake it describes, and the documented default log
//! filters are the ones `eve serve` and `eve dev` use. (Commands in the docs are run by `docs.rs`.)

use std::path::Path;

use assert_cmd::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The body of the first fenced block of `lang` after `from` in `text`.
fn block_after<'a>(text: &'a str, from: &str, lang: &str) -> &'a str {
    let start = text.find(from).unwrap_or_else(|| panic!("no `{from}`"));
    let rest = &text[start..];
    let open = format!("```{lang}\n");
    let body = &rest[rest
        .find(&open)
        .unwrap_or_else(|| panic!("no {lang} block"))
        + open.len()..];
    &body[..body.find("```").unwrap()]
}

#[test]
fn the_readmes_diagnostic_example_is_what_eve_build_prints() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let tool = block_after(
        &readme,
        "with YAML front matter in its leading comment block",
        "python",
    );
    let shown = block_after(&readme, "With `{type: objekt}` in the tool above", "text");
    assert!(
        tool.contains("{type: string}"),
        "the README's tool changed: {tool}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let eve = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_eve"));
        cmd.current_dir(tmp.path().join("demo"))
            .env("NO_COLOR", "1")
            .env_remove("EVE_MODEL");
        cmd
    };
    Command::new(env!("CARGO_BIN_EXE_eve"))
        .current_dir(tmp.path())
        .args(["init", "demo"])
        .assert()
        .success();
    std::fs::write(
        tmp.path().join("demo/agent/tools/weather.py"),
        tool.replace("{type: string}", "{type: objekt}"),
    )
    .unwrap();
    let out = eve().arg("build").output().unwrap();
    let printed =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(shown.trim_end()),
        "README.md shows:\n{shown}\neve build prints:\n{printed}"
    );
}

#[test]
fn the_documented_default_log_filters_are_the_ones_in_use() {
    let cli = std::fs::read_to_string(repo().join("docs/cli.md")).unwrap();
    let row = cli
        .lines()
        .find(|l| l.starts_with("| `EVE_LOG` |"))
        .expect("docs/cli.md lists EVE_LOG");
    for filter in [eve_cli::logs::SERVE_FILTER, eve_cli::logs::DEV_FILTER] {
        assert!(
            row.contains(&format!("`{filter}`")),
            "{row} does not name `{filter}`"
        );
    }
    let operations = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    assert!(operations.contains(&format!("`{}`", eve_cli::logs::DEV_FILTER)));
}
