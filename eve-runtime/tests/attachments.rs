//! Files in messages and in tool results, through the real server and runtime: the channel's
//! upload policy (`413`/`415` in eve's shape), staging under `.eve/attachments/<sha256>/` that a
//! planted symlink cannot redirect (with the naive twin that it does redirect), history and
//! events that keep references and never the bytes, a tool's image reaching a model as an image
//! part, and a staged file read again by a runtime started after the first one stopped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use eve_runtime::engine::{FixedModelProvider, ResolvedModel};
use eve_runtime::model::{Message, Provider};
use eve_runtime::server::uploads::UploadPolicy;
use eve_runtime::workspace::attachments::{Upload, load, stage};
use serde_json::{Value, json};
use sha2::Digest;

use crate::model::fast_settings;
use crate::model::server::{Reply, TestServer as ModelServer};
use crate::model::wire::oa;
use crate::server_support::{AgentDir, TestServer};

/// A real 1×1 PNG.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn png() -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(PNG_B64)
        .unwrap()
}

/// A small real PDF.
fn pdf() -> Vec<u8> {
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n".to_vec()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// eve's client's `createTextWithFileContent` with a PNG, plus a PDF part.
fn message_with_files() -> Value {
    json!([
        {"type": "text", "text": "What is in these?"},
        {"type": "file", "data": format!("data:image/png;base64,{PNG_B64}"), "mediaType": "image/png",
         "filename": "dot.png"},
        {"type": "file", "data": format!("data:application/pdf;base64,{}", b64(&pdf())),
         "mediaType": "application/pdf", "filename": "report.pdf"},
    ])
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn workspace(server: &TestServer, session: &str) -> PathBuf {
    server.agent.root().join(".eve/sandboxes").join(session)
}

#[tokio::test]
async fn upload_policy_answers_413_and_415_in_eves_shape() {
    let server = TestServer::start_with(AgentDir::standard(), &[], |mut c| {
        c.uploads = UploadPolicy {
            max_bytes: 100,
            allowed: Some(vec!["image/*".to_owned()]),
        };
        c
    })
    .await;
    let big = vec![7u8; 101];
    let (status, body) = server
        .post(
            "/eve/v1/session",
            json!({"message": [
                {"type": "text", "text": "hi"},
                {"type": "file", "data": b64(&big), "mediaType": "image/png", "filename": "big.png"},
            ]}),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], "payload_too_large");
    assert_eq!(body["ok"], false);
    assert_eq!(
        body["error"],
        "big.png (101 bytes) exceeds the 100-byte upload limit."
    );
    assert_eq!(
        body["violations"],
        json!([{"byteLength": 101, "filename": "big.png", "kind": "too-large", "limit": 100,
                "mediaType": "image/png"}])
    );

    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": [
                {"type": "text", "text": "read this"},
                {"type": "file", "data": b64(&pdf()), "mediaType": "application/pdf", "filename": "r.pdf"},
            ]}),
        )
        .await;
    assert_eq!(status, 415, "{body}");
    assert_eq!(body["code"], "unsupported_media_type");
    assert_eq!(body["violations"][0]["kind"], "disallowed-media-type");
    assert_eq!(
        body["violations"][0]["allowedMediaTypes"],
        json!(["image/*"])
    );
    // Nothing refused was staged.
    assert!(!workspace(&server, &id).join(".eve/attachments").exists());

    // A file within the policy is taken.
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": [
                {"type": "text", "text": "a dot"},
                {"type": "file", "data": PNG_B64, "mediaType": "image/png"},
            ]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // Bad parts are a 400, never a fetch.
    let (status, body) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": [{"type": "file", "data": "https://example.com/x.png", "mediaType": "image/png"}]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    server.stop().await;
}

#[tokio::test]
async fn message_files_are_staged_and_history_and_events_keep_references() {
    let server = TestServer::start(AgentDir::standard()).await;
    let (status, body) = server
        .post("/eve/v1/session", json!({"message": message_with_files()}))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let events = server.until_rest(&id, 0).await;
    let received = events
        .iter()
        .find(|e| e["type"] == "message.received")
        .unwrap();
    assert_eq!(received["data"]["message"], "What is in these?");
    assert_eq!(
        received["data"]["parts"],
        json!([
            {"text": "What is in these?", "type": "text"},
            {"filename": "dot.png", "mediaType": "image/png", "size": png().len(), "type": "file"},
            {"filename": "report.pdf", "mediaType": "application/pdf", "size": pdf().len(), "type": "file"},
        ])
    );
    // The files are in the workspace under their hash.
    let ws = workspace(&server, &id);
    let png_path = format!(".eve/attachments/{}/dot.png", sha(&png()));
    assert_eq!(std::fs::read(ws.join(&png_path)).unwrap(), png());
    assert_eq!(
        std::fs::read(ws.join(format!(".eve/attachments/{}/report.pdf", sha(&pdf())))).unwrap(),
        pdf()
    );
    // The mock model takes no files: it got a note with each path (and echoes it).
    let reply: String = events
        .iter()
        .filter(|e| e["type"] == "message.appended")
        .map(|e| e["data"]["messageDelta"].as_str().unwrap_or_default())
        .collect();
    assert!(reply.contains(&png_path), "{reply}");
    // History keeps the reference, never the bytes; so do the events.
    let history = server.runtime.store().context(&id).await.unwrap();
    let first: Message = serde_json::from_value(history[0].body.clone()).unwrap();
    let Message::User { attachments, .. } = first else {
        panic!("{first:?}")
    };
    assert_eq!(attachments.len(), 2);
    assert_eq!(attachments[0].path, png_path);
    assert!(attachments.iter().all(|a| a.data.is_none()));
    let stored =
        serde_json::to_string(&history.iter().map(|r| &r.body).collect::<Vec<_>>()).unwrap();
    assert!(!stored.contains(PNG_B64) && !stored.contains(&b64(&pdf())));
    let all = serde_json::to_string(&server.all(&id).await).unwrap();
    assert!(!all.contains(PNG_B64) && !all.contains(&b64(&pdf())));
    server.stop().await;
}

/// A tool of the session plants `.eve/attachments` as a symlink to a folder outside the
/// workspace. Staging fails and writes nothing there; a naive stager (make the folders, write
/// the file, by path) writes through it.
#[tokio::test]
async fn staging_never_follows_a_symlink_planted_at_attachments() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join(".eve")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join(".eve/attachments")).unwrap();
    let upload = Upload {
        media_type: "image/png".into(),
        filename: Some("dot.png".into()),
        bytes: png(),
    };
    assert!(stage(ws.path(), &upload).is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

    // The twin: the same staging by path lands outside.
    naive_stage(ws.path(), &upload);
    let landed = outside.path().join(sha(&png())).join("dot.png");
    assert_eq!(std::fs::read(&landed).unwrap(), png());

    // `.eve` itself a symlink, and a symlink at the file's own name: never followed either.
    let ws2 = tempfile::tempdir().unwrap();
    let outside2 = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside2.path(), ws2.path().join(".eve")).unwrap();
    assert!(stage(ws2.path(), &upload).is_err());
    assert_eq!(std::fs::read_dir(outside2.path()).unwrap().count(), 0);

    let ws3 = tempfile::tempdir().unwrap();
    let target = outside2.path().join("victim");
    std::fs::write(&target, b"keep me").unwrap();
    let dir = ws3.path().join(".eve/attachments").join(sha(&png()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("dot.png")).unwrap();
    let staged = stage(ws3.path(), &upload).unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    assert!(
        !std::fs::symlink_metadata(dir.join("dot.png"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(load(ws3.path(), &staged).unwrap(), png());
    // Reading never follows one either: the symlink back in place is refused.
    std::fs::remove_file(dir.join("dot.png")).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("dot.png")).unwrap();
    assert!(load(ws3.path(), &staged).is_err());
}

/// The naive stager the runtime does not use: paths checked by nobody, followed by the kernel.
fn naive_stage(workspace: &Path, upload: &Upload) {
    let dir = workspace.join(".eve/attachments").join(sha(&upload.bytes));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(upload.filename.as_deref().unwrap()), &upload.bytes).unwrap();
}

/// The same attack through the API: a message's file to a session whose workspace has the
/// symlink is refused, and nothing lands outside.
#[tokio::test]
async fn a_planted_symlink_fails_the_message_not_the_host() {
    let server = TestServer::start(AgentDir::standard()).await;
    let id = server.create("hello").await;
    server.until_rest(&id, 0).await;
    let outside = tempfile::tempdir().unwrap();
    let ws = workspace(&server, &id);
    std::fs::create_dir_all(ws.join(".eve")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join(".eve/attachments")).unwrap();
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": message_with_files()}),
        )
        .await;
    assert_eq!(status, 500);
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    server.stop().await;
}

/// A model spoken to over Chat Completions, scripted.
fn scripted(url: &str) -> ResolvedModel {
    let settings = fast_settings(Provider::OpenAiCompatible, &format!("{url}/v1"));
    ResolvedModel {
        client: eve_runtime::model::client(&settings).unwrap(),
        model: "test-model".into(),
        model_id: "openai-compatible/test-model".into(),
        // Known, so the client does not ask the server (whose replies are scripted).
        context_window: Some(128_000),
        price_per_million: None,
    }
}

fn text_reply(t: &str) -> Reply {
    Reply::sse(&[oa::role(), oa::text(t), oa::finish("stop"), oa::done()])
}

async fn serve(agent: AgentDir, url: &str) -> TestServer {
    let model = scripted(url);
    TestServer::start_full(
        agent,
        &[],
        |c| c,
        move |c| c.models = Arc::new(FixedModelProvider(model)),
        |_| Default::default(),
    )
    .await
}

/// The user message in a Chat Completions request that carries image parts.
fn image_urls(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|p| p["type"] == "image_url")
        .map(|p| p["image_url"]["url"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_tool_returning_an_image_reaches_the_model_as_an_image_part() {
    let model = ModelServer::start(vec![
        Reply::sse(&[
            oa::role(),
            oa::tool_start(0, "call_1", "chart", "{}"),
            oa::finish("tool_calls"),
            oa::done(),
        ]),
        text_reply("A red dot."),
    ])
    .await;
    let agent = AgentDir::new();
    agent.tool(
        "chart",
        "description: Draws a chart.\neffect: read\ninput: {type: object}",
        &format!(
            "cat >/dev/null\nprintf '%s' '{{\"type\": \"content\", \"value\": [{{\"type\": \"text\", \
             \"text\": \"the chart\"}}, {{\"type\": \"file\", \"data\": {{\"type\": \"data\", \"data\": \
             \"{PNG_B64}\"}}, \"mediaType\": \"image/png\", \"filename\": \"chart.png\"}}]}}'\n"
        ),
    );
    let server = serve(agent, &model.url).await;
    let id = server.create("Draw the chart.").await;
    let events = server.until_rest(&id, 0).await;
    assert!(
        events.iter().any(|e| e["type"] == "turn.completed"),
        "{events:#?}"
    );
    // The stream keeps the result with a reference to the staged file, not the bytes.
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .unwrap();
    let output = &result["data"]["result"]["output"];
    let path = format!(".eve/attachments/{}/chart.png", sha(&png()));
    assert_eq!(
        output["value"][0],
        json!({"type": "text", "text": "the chart"})
    );
    assert_eq!(output["value"][1]["type"], "file");
    assert_eq!(output["value"][1]["path"], path);
    assert_eq!(output["value"][1]["mediaType"], "image/png");
    assert!(!serde_json::to_string(&events).unwrap().contains(PNG_B64));
    assert_eq!(
        std::fs::read(workspace(&server, &id).join(&path)).unwrap(),
        png()
    );
    // The model got the image itself, after the tool's result.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1].body;
    let tool = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(tool["content"], "the chart");
    assert_eq!(
        image_urls(second),
        vec![format!("data:image/png;base64,{PNG_B64}")]
    );
    server.stop().await;
}

/// A message's files are accepted and answered by one runtime; the next turn runs on a runtime
/// started after that one stopped, and its model call still carries the files, read again from
/// the workspace and checked against their hash.
#[tokio::test]
async fn a_staged_file_survives_a_runtime_restart() {
    let model = ModelServer::start(vec![
        text_reply("A dot and a report."),
        text_reply("Still a dot."),
    ])
    .await;
    let server = serve(AgentDir::standard(), &model.url).await;
    let (status, body) = server
        .post("/eve/v1/session", json!({"message": message_with_files()}))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    server.until_rest(&id, 0).await;
    let agent = server.stop_keeping().await;
    // The next process: a new runtime on the same project and store.
    let server = serve(agent, &model.url).await;
    let from = server.count(&id).await;
    let (status, _) = server
        .post(
            &format!("/eve/v1/session/{id}"),
            json!({"message": "Look again."}),
        )
        .await;
    assert_eq!(status, 202);
    let events = server.until_rest(&id, from).await;
    assert!(
        events.iter().any(|e| e["type"] == "turn.completed"),
        "{events:#?}"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            image_urls(&request.body),
            vec![format!("data:image/png;base64,{PNG_B64}")]
        );
        assert_eq!(request.path, "/v1/chat/completions");
        let user = &request.body["messages"][1]["content"];
        assert_eq!(user[2]["type"], "file", "{user}");
        assert_eq!(
            user[2]["file"]["file_data"],
            format!("data:application/pdf;base64,{}", b64(&pdf()))
        );
    }
    server.stop().await;
}

/// The AI SDK chat endpoint takes the AI SDK's file parts (`url` a data URL) under the same
/// policy: staged, and listed in `message.received`.
#[tokio::test]
async fn the_chat_endpoint_takes_file_parts() {
    let server = TestServer::start(AgentDir::standard()).await;
    let response = server
        .http
        .post(server.url("/eve/v1/chat"))
        .json(
            &json!({"id": "files-chat", "messages": [{"id": "m1", "role": "user", "parts": [
                {"type": "text", "text": "What is this?"},
                {"type": "file", "mediaType": "image/png", "filename": "dot.png",
                 "url": format!("data:image/png;base64,{PNG_B64}")},
            ]}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-eve-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let stream = response.text().await.unwrap();
    assert!(
        stream.contains("[DONE]") || stream.contains("finish"),
        "{stream}"
    );
    let events = server.all(&id).await;
    let received = events
        .iter()
        .find(|e| e["type"] == "message.received")
        .unwrap();
    assert_eq!(received["data"]["parts"][1]["filename"], "dot.png");
    let path = format!(".eve/attachments/{}/dot.png", sha(&png()));
    assert_eq!(
        std::fs::read(workspace(&server, &id).join(path)).unwrap(),
        png()
    );
    server.stop().await;
}
