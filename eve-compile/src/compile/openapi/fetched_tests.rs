//! OpenAPI documents named by URL at build time: fetched and pinned by their SHA-256, cached for
//! the next build, the cached copy used (W013) when the fetch fails, E061 with neither, and
//! `openapi_sha256` refusing another document. The fetcher here answers from memory: the one
//! eve's CLI uses (guarded HTTP) is tried against a real API in `eve-runtime/tests/openapi.rs`.

use std::sync::Mutex;

use eve_discover::{Code, Diagnostic};

use super::{Fetch, Fetcher};
use crate::manifest::*;

const URL: &str = "http://127.0.0.1:9/openapi.json";

const DOC_V1: &str = r#"{"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
"servers": [{"url": "http://127.0.0.1:9"}],
"paths": {"/items": {"get": {"operationId": "listItems", "responses": {"200": {"description": "ok"}}}}}}"#;

const DOC_V2: &str = r#"{"openapi": "3.1.0", "info": {"title": "t", "version": "2"},
"servers": [{"url": "http://127.0.0.1:9"}],
"paths": {"/items": {"get": {"operationId": "listItems", "responses": {"200": {"description": "ok"}}},
"post": {"operationId": "addItem", "responses": {"201": {"description": "made"}}}}}}"#;

/// Answers each fetch with the next of its answers (the last one again when they run out), and
/// counts the fetches.
struct Scripted {
    answers: Mutex<Vec<Result<String, String>>>,
    count: Mutex<usize>,
}

impl Fetch for Scripted {
    fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        assert_eq!(url, URL);
        *self.count.lock().unwrap() += 1;
        let mut answers = self.answers.lock().unwrap();
        let answer = if answers.len() > 1 {
            answers.remove(0)
        } else {
            answers[0].clone()
        };
        answer.map(String::into_bytes)
    }
}

fn scripted(answers: &[Result<&str, &str>]) -> Fetcher {
    Fetcher::new(Scripted {
        answers: Mutex::new(
            answers
                .iter()
                .map(|a| a.map(str::to_owned).map_err(str::to_owned))
                .collect(),
        ),
        count: Mutex::new(0),
    })
}

/// A project whose connection `api` names the document by URL, and its `.eve`.
struct Folder {
    _dir: tempfile::TempDir,
    agent: std::path::PathBuf,
    state: std::path::PathBuf,
}

fn folder(connection: &str) -> Folder {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("connections")).unwrap();
    std::fs::write(agent.join("instructions.md"), "Test.\n").unwrap();
    std::fs::write(agent.join("connections/api.yaml"), connection).unwrap();
    let state = dir.path().join(".eve");
    Folder {
        _dir: dir,
        agent,
        state,
    }
}

fn build(f: &Folder, fetch: Option<&Fetcher>) -> (Vec<Tool>, Vec<Diagnostic>) {
    let source = eve_discover::FsSource::new(&f.agent).unwrap();
    let out = crate::compile(
        &eve_discover::discover(&source),
        &crate::Options {
            name: "t".into(),
            file_prefix: "agent/".into(),
            protected_dirs: Vec::new(),
            agent_dir: Some(f.agent.clone()),
            cache_dir: Some(f.state.clone()),
            fetch: fetch.cloned(),
        },
    );
    (out.manifest.agent.tools, out.diagnostics)
}

fn pinned(tools: &[Tool]) -> Vec<(String, String, Option<String>)> {
    tools
        .iter()
        .map(|t| match &t.runner {
            Runner::OpenApi(call) => (
                t.name.clone(),
                call.document.clone(),
                call.document_sha256.clone(),
            ),
            other => panic!("{other:?}"),
        })
        .collect()
}

fn sha(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[test]
fn a_document_named_by_url_is_fetched_and_pinned_by_its_digest() {
    let f = folder(&format!("openapi: {URL}\n"));
    let fetcher = scripted(&[Ok(DOC_V1), Ok(DOC_V2)]);
    let (tools, diags) = build(&f, Some(&fetcher));
    assert!(diags.is_empty(), "{diags:#?}");
    assert_eq!(
        pinned(&tools),
        [("api__listItems".into(), URL.into(), Some(sha(DOC_V1)))]
    );
    // The next build fetches again: a changed document makes other tools and another pin.
    let (tools, diags) = build(&f, Some(&fetcher));
    assert!(diags.is_empty(), "{diags:#?}");
    let names: Vec<_> = pinned(&tools).into_iter().map(|(n, _, s)| (n, s)).collect();
    assert_eq!(
        names,
        [
            ("api__addItem".into(), Some(sha(DOC_V2))),
            ("api__listItems".into(), Some(sha(DOC_V2)))
        ]
    );
}

#[test]
fn a_failed_fetch_uses_the_copy_cached_by_the_last_build_and_says_so() {
    let f = folder(&format!("openapi: {URL}\n"));
    let (first, _) = build(&f, Some(&scripted(&[Ok(DOC_V1)])));
    let (tools, diags) = build(&f, Some(&scripted(&[Err("connection refused")])));
    assert_eq!(tools, first, "the cached copy gives the same tools");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = &diags[0];
    assert_eq!(d.code, Code::OpenApiStale);
    assert_eq!(d.file.as_deref(), Some("agent/connections/api.yaml"));
    assert_eq!(d.line, Some(1));
    assert!(
        d.message.contains("connection refused") && d.message.contains("using the copy fetched at"),
        "{}",
        d.message
    );
    // A build that fetches nothing (a proposal staged by the runtime) uses the copy quietly.
    let (tools, diags) = build(&f, None);
    assert_eq!(tools, first);
    assert!(diags.is_empty(), "{diags:#?}");
}

#[test]
fn with_no_document_and_no_copy_the_build_fails_at_the_connection() {
    let f = folder(&format!("openapi: {URL}\n"));
    for fetch in [
        Some(scripted(&[Err("the server answered 404 Not Found")])),
        None,
    ] {
        let (tools, diags) = build(&f, fetch.as_ref());
        assert!(tools.is_empty());
        assert_eq!(diags.len(), 1, "{diags:#?}");
        assert_eq!(diags[0].code, Code::InvalidOpenApi);
        assert_eq!(diags[0].file.as_deref(), Some("agent/connections/api.yaml"));
        assert!(
            diags[0]
                .message
                .starts_with(&format!("cannot fetch the OpenAPI document {URL}")),
            "{}",
            diags[0].message
        );
    }
    // A copy that was tampered with is no copy.
    build(&f, Some(&scripted(&[Ok(DOC_V1)])));
    let cache = std::fs::read_dir(f.state.join("cache/openapi"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&cache).unwrap();
    std::fs::write(&cache, text.replace("listItems", "deleteAll")).unwrap();
    let (tools, diags) = build(&f, None);
    assert!(tools.is_empty(), "{tools:#?}");
    assert_eq!(diags[0].code, Code::InvalidOpenApi);
}

#[test]
fn openapi_sha256_refuses_another_document() {
    let good = folder(&format!(
        "openapi: {URL}\nopenapi_sha256: {}\n",
        sha(DOC_V1)
    ));
    let (tools, diags) = build(&good, Some(&scripted(&[Ok(DOC_V1)])));
    assert!(diags.is_empty(), "{diags:#?}");
    assert_eq!(tools.len(), 1);
    let (tools, diags) = build(&good, Some(&scripted(&[Ok(DOC_V2)])));
    assert!(tools.is_empty(), "{tools:#?}");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].code, Code::InvalidOpenApi);
    assert_eq!(diags[0].line, Some(2), "at `openapi_sha256:`");
    assert!(
        diags[0].message.contains(&sha(DOC_V2)),
        "{}",
        diags[0].message
    );
    // A pin on a file of the agent folder means nothing: said, not ignored.
    let file = folder("openapi: specs/api.json\nopenapi_sha256: abc\n");
    std::fs::create_dir_all(file.agent.join("specs")).unwrap();
    std::fs::write(file.agent.join("specs/api.json"), DOC_V1).unwrap();
    let (_, diags) = build(&file, None);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].code, Code::InvalidConnection);
}

#[test]
fn errors_in_a_fetched_document_are_shown_at_its_url_and_line() {
    let f = folder(&format!("openapi: {URL}\n"));
    let broken = "{\"openapi\": \"3.1.0\",\n \"info\": {\"title\": \"t\", \"version\": \"1\"},\n \"paths\": {\"/a\": [}}";
    let (_, diags) = build(&f, Some(&scripted(&[Ok(broken)])));
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].code, Code::InvalidOpenApi);
    assert_eq!(diags[0].file.as_deref(), Some(URL));
    assert_eq!(diags[0].line, Some(3));
    // Too large, or not text: refused like a failed fetch.
    let big = "x".repeat(super::MAX_DOCUMENT_BYTES + 1);
    let (_, diags) = build(&f, Some(&scripted(&[Ok(&big)])));
    assert!(
        diags[0].message.contains("larger than 16 MiB"),
        "{diags:#?}"
    );
}
