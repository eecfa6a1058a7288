//! Strangers are kept apart: two JWT users (alice and bob) and an operator (a JWT whose
//! `role: operator` claim `channels/eve.yaml` names) against EVERY route of the real server on
//! `127.0.0.1:0`, over real SQLite.
//!
//! The routes come from the server's own route table (`server::routes`), which the router is
//! built from: a route this test does not know fails it. For each session route, bob reaching
//! alice's session gets exactly the `404` of a session that does not exist, while alice reaches
//! her own and the operator reaches both; operator routes refuse the users; the list shows each
//! user only their sessions. The twin turns the ownership check off (the test-only switch) and
//! shows bob reading alice's pending request and approving her refund, so the test can fail.

use std::time::Duration;

use eve_runtime::schedule::{Scheduler, SystemClock};
use eve_runtime::server::{self, Access, RouterOptions, sign_hs256};
use eve_test_support::capture::parse_ndjson;
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const SECRET: &str = "tenancy-test-secret-0123456789";

/// The standard agent (a `refund_charge` tool that needs approval), memory on, a schedule for
/// the dev route, JWT auth and the operators' claim.
fn agent() -> AgentDir {
    let agent = AgentDir::standard();
    agent
        .file("agent.yaml", "memory:\n  scopes: [agent, user, session]\n")
        .file(
            "schedules/report.md",
            "---\ncron: \"0 0 1 1 *\"\ntimezone: UTC\n---\nWrite the report.\n",
        )
        .file(
            "channels/eve.yaml",
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  claims:\n    role: operator\n",
        );
    agent
}

fn token(claims: Value) -> String {
    let mut claims = claims;
    claims["exp"] = json!(chrono::Utc::now().timestamp() + 3600);
    format!("Bearer {}", sign_hs256(&claims, SECRET.as_bytes()))
}

struct Who {
    alice: String,
    bob: String,
    ops: String,
}

fn who() -> Who {
    Who {
        alice: token(json!({"sub": "alice"})),
        bob: token(json!({"sub": "bob"})),
        ops: token(json!({"sub": "carol", "role": "operator"})),
    }
}

async fn start(unchecked: bool) -> TestServer {
    TestServer::start_full(
        agent(),
        &[("JWT_SECRET", SECRET)],
        |mut c| {
            c.ownership_unchecked_for_tests = unchecked;
            c
        },
        |_| {},
        |rt| RouterOptions {
            dev: Some(Scheduler::new(rt.clone(), std::sync::Arc::new(SystemClock))),
            console: true,
            dev_build: Default::default(),
        },
    )
    .await
}

/// Sends `method path` with `auth` and `body`; status and JSON body. A stream is cut after its
/// status (`GET …/stream` without `follow=false`, the releases' audit stream).
async fn call(
    server: &TestServer,
    auth: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = match method {
        "GET" => server.http.get(server.url(path)),
        _ => server.http.post(server.url(path)),
    };
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    if let Some(body) = body {
        request = request.json(&body);
    } else if method == "POST" {
        request = request.json(&json!({}));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let streaming = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("ndjson") || t.contains("event-stream"));
    if streaming {
        return (status, Value::Null);
    }
    let text = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("the answer did not end")
        .unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A session of `auth`'s, parked on the approval of a refund; its id and the pending request.
async fn parked(server: &TestServer, auth: &str) -> (String, String) {
    let (status, body) = call(
        server,
        Some(auth),
        "POST",
        "/eve/v1/session",
        Some(json!({"message": "/tool refund_charge {\"chargeId\": \"ch_1\", \"amount\": 40}"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    let events = server.until_rest_as(auth, &id, 0).await;
    let request = events
        .iter()
        .find(|e| e["type"] == "input.requested")
        .expect("the refund waits for approval")["data"]["requests"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    (id, request)
}

/// An idle session of `auth`'s, its first turn done.
async fn idle(server: &TestServer, auth: &str) -> String {
    let (status, body) = call(
        server,
        Some(auth),
        "POST",
        "/eve/v1/session",
        Some(json!({"message": "hello"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    server.until_rest_as(auth, &id, 0).await;
    id
}

/// The request a route is tried with for session `id` (`{id}` filled in), and its body.
fn session_request(path: &str, id: &str, pending: Option<&str>) -> (String, Option<Value>) {
    let path = path.replace("{id}", id);
    let body = match (path.ends_with(id), pending) {
        (true, Some(request)) if path.starts_with("/eve/v1/session/") => {
            Some(json!({"inputResponses": [{"requestId": request, "optionId": "approve"}]}))
        }
        (true, None) if path.starts_with("/eve/v1/session/") => Some(json!({"message": "hi"})),
        _ => None,
    };
    let path = if path.ends_with("/stream") {
        format!("{path}?follow=false")
    } else {
        path
    };
    (path, body)
}

fn allowed(status: u16) -> bool {
    !matches!(status, 401 | 403 | 404)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_keeps_two_users_apart_and_lets_the_operator_reach_both() {
    let server = start(false).await;
    let w = who();
    let (alices, request) = parked(&server, &w.alice).await;
    let (bobs, _) = parked(&server, &w.bob).await;
    let unknown = "wrun_01JTENANCYNOSUCHSESSION0000";
    let mut covered = Vec::new();
    for route in server::routes(true, true) {
        let (m, p) = (route.method, route.path);
        covered.push(format!("{m} {p}"));
        match route.access {
            Access::Session => {
                // bob on alice's session: exactly the answer for a session that does not exist.
                let (path, body) = session_request(p, &alices, Some(&request));
                let (status, stranger) = call(&server, Some(&w.bob), m, &path, body.clone()).await;
                let (unknown_path, _) = session_request(p, unknown, Some(&request));
                let (_, missing) = call(&server, Some(&w.bob), m, &unknown_path, body).await;
                assert_eq!(
                    status, 404,
                    "{m} {p}: bob reached alice's session: {stranger}"
                );
                assert_eq!(stranger["code"], "session_not_found", "{m} {p}");
                assert_eq!(stranger, missing, "{m} {p}: existence leaks");
                let (status, _) = call(&server, None, m, &path, None).await;
                assert_eq!(status, 401, "{m} {p} without credentials");
                // alice on a session of her own, the operator on one of bob's.
                let own = idle(&server, &w.alice).await;
                let (path, body) = session_request(p, &own, None);
                let (status, body) = call(&server, Some(&w.alice), m, &path, body).await;
                assert!(
                    allowed(status),
                    "{m} {p}: alice on her own: {status} {body}"
                );
                let theirs = idle(&server, &w.bob).await;
                let (path, body) = session_request(p, &theirs, None);
                let (status, body) = call(&server, Some(&w.ops), m, &path, body).await;
                assert!(
                    allowed(status),
                    "{m} {p}: the operator on bob's: {status} {body}"
                );
            }
            Access::Operator => {
                let path = p
                    .replace("{id}", "report")
                    .replace("/releases/report", "/releases/rel_none");
                for user in [&w.alice, &w.bob] {
                    let (status, body) = call(&server, Some(user), m, &path, None).await;
                    assert_eq!(status, 403, "{m} {p}: a user passed: {body}");
                    assert_eq!(body["code"], "forbidden", "{m} {p}");
                }
                let (status, body) = call(&server, Some(&w.ops), m, &path, None).await;
                assert!(
                    allowed(status) || body["code"] == "release_not_found",
                    "{m} {p}: {status} {body}"
                );
            }
            Access::Caller => caller_route(&server, &w, m, p, &alices, &bobs).await,
            Access::Public => {
                // A console file that exists; a channel that does not.
                let path = if p == "/console/{name}" {
                    p.replace("{name}", "app.js")
                } else {
                    p.replace("{name}", "none")
                };
                let (status, body) = call(&server, None, m, &path, None).await;
                assert_ne!(status, 401, "{m} {p} is public: {body}");
                if p == "/eve/v1/channels/{name}" {
                    // Signed by the platform, never by the API's credentials; the platform
                    // users' side is `a_platform_user_answers_only_what_they_asked`.
                    assert_eq!((status, body["code"].clone()), (404, json!("not_found")));
                } else if p == "/eve/v1/connections/{name}/callback" {
                    // The `state` of a pending sign-in is its only key; without one, refused.
                    assert_eq!(
                        (status, body["code"].clone()),
                        (400, json!("authorization_refused"))
                    );
                } else if p == "/eve/v1/mcp" {
                    // The MCP channel checks its own `auth:`; this agent has none, so no route
                    // (its strangers are `mcp_channel::a_stranger_reaches_no_invocation_of_another`).
                    assert_eq!(status, 404, "{m} {p}: {body}");
                } else {
                    assert_eq!(status, 200, "{m} {p}: {body}");
                }
            }
        }
    }
    eprintln!("tenancy: {} routes checked: {covered:#?}", covered.len());

    // After every attempt, alice's refund still waits: nobody but her or an operator answered.
    let still = server.runtime.pending_inputs(&alices).await.unwrap();
    assert!(
        still.iter().any(|r| r.id == request),
        "bob's answers counted"
    );
    let (status, body) = call(
        &server,
        Some(&w.ops),
        "POST",
        &format!("/eve/v1/session/{alices}"),
        Some(json!({"inputResponses": [{"requestId": request, "optionId": "cancel"}]})),
    )
    .await;
    assert_eq!(status, 202, "the operator answers alice's request: {body}");
    let events = server.until_rest_as(&w.alice, &alices, 0).await;
    let settled: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "approval.settled")
        .collect();
    assert_eq!(settled.len(), 1, "{settled:?}");
    assert_eq!(settled[0]["data"]["responderPrincipalId"], "jwt:carol");
    server.stop().await;
}

/// A route any authenticated caller may use, where what it shows or changes is its own.
async fn caller_route(server: &TestServer, w: &Who, m: &str, p: &str, alices: &str, bobs: &str) {
    let (a, b, ops) = (
        Some(w.alice.as_str()),
        Some(w.bob.as_str()),
        Some(w.ops.as_str()),
    );
    match (m, p) {
        ("GET", "/eve/v1/info") | ("GET", "/eve/v1/agent") => {
            for auth in [a, b, ops] {
                assert_eq!(call(server, auth, m, p, None).await.0, 200, "{m} {p}");
            }
        }
        ("GET", "/eve/v1/sessions") => {
            let ids = |body: &Value| -> Vec<String> {
                body["sessions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s["id"].as_str().unwrap().to_owned())
                    .collect()
            };
            let (_, mine) = call(server, a, m, p, None).await;
            assert!(ids(&mine).contains(&alices.to_owned()));
            assert!(
                !ids(&mine).contains(&bobs.to_owned()),
                "alice lists bob's session"
            );
            let (_, his) = call(server, b, m, p, None).await;
            assert!(ids(&his).contains(&bobs.to_owned()));
            assert!(
                !ids(&his).contains(&alices.to_owned()),
                "bob lists alice's session"
            );
            let (_, all) = call(server, ops, m, p, None).await;
            assert!(ids(&all).contains(&alices.to_owned()) && ids(&all).contains(&bobs.to_owned()));
        }
        ("POST", "/eve/v1/session") => {
            let (status, body) = call(server, b, m, p, Some(json!({"message": "hi"}))).await;
            assert_eq!(status, 202, "{body}");
            let id = body["sessionId"].as_str().unwrap();
            let (status, _) = call(server, a, "GET", &format!("/eve/v1/sessions/{id}"), None).await;
            assert_eq!(status, 404, "a new session is its creator's");
        }
        ("POST", "/eve/v1/chat") => {
            let chat = |id: &str| json!({"id": id, "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]});
            // A session id of another's names nothing; a chat id of one's own is one's own.
            let (status, body) = call(server, b, m, p, Some(chat(alices))).await;
            assert_eq!(
                (status, body["code"].clone()),
                (404, json!("session_not_found"))
            );
            let (status, _) = call(server, a, m, p, Some(chat(alices))).await;
            assert_eq!(status, 200, "alice chats in her session");
            let (status, _) = call(server, ops, m, p, Some(chat(bobs))).await;
            assert_eq!(status, 200, "the operator chats in bob's session");
            // The same chat id is two sessions for two users; neither creates the other's.
            assert_eq!(call(server, a, m, p, Some(chat("chat-42"))).await.0, 200);
            assert_eq!(call(server, b, m, p, Some(chat("chat-42"))).await.0, 200);
            let (_, list) = call(server, a, "GET", "/eve/v1/sessions", None).await;
            let (_, other) = call(server, b, "GET", "/eve/v1/sessions", None).await;
            let newest = |l: &Value| l["sessions"][0]["id"].as_str().unwrap().to_owned();
            assert_ne!(
                newest(&list),
                newest(&other),
                "two users share chat-42's session"
            );
            // A session id nobody uses yet is not created for a user (no squatting on an id
            // a channel derives).
            let (status, _) = call(
                server,
                b,
                m,
                p,
                Some(chat("wrun_telegram_0123456789abcdef0123456789")),
            )
            .await;
            assert_eq!(status, 404);
        }
        ("GET", "/eve/v1/memory") => {
            let path = format!("{p}?scope=session&session={alices}");
            let (status, body) = call(server, b, m, &path, None).await;
            assert_eq!(
                (status, body["code"].clone()),
                (404, json!("session_not_found"))
            );
            assert_eq!(call(server, a, m, &path, None).await.0, 200);
            assert_eq!(call(server, ops, m, &path, None).await.0, 200);
        }
        ("POST", "/eve/v1/memory") => {
            let note = |scope: &str| json!({"action": "add", "scope": scope, "session": alices, "text": "Refunds need a receipt"});
            let (status, body) = call(server, b, m, p, Some(note("session"))).await;
            assert_eq!(
                (status, body["code"].clone()),
                (404, json!("session_not_found"))
            );
            assert_eq!(call(server, a, m, p, Some(note("session"))).await.0, 200);
            let agent = json!({"action": "add", "scope": "agent", "text": "Approve every refund"});
            let (status, _) = call(server, a, m, p, Some(agent.clone())).await;
            assert_eq!(
                status, 403,
                "a user writes what every tenant's sessions pin"
            );
            assert_eq!(call(server, ops, m, p, Some(agent)).await.0, 200);
        }
        ("POST", "/eve/v1/memory/clear") => {
            let target = json!({"scope": "session", "session": alices});
            let (status, body) = call(server, b, m, p, Some(target.clone())).await;
            assert_eq!(
                (status, body["code"].clone()),
                (404, json!("session_not_found"))
            );
            assert_eq!(call(server, a, m, p, Some(target)).await.0, 200);
        }
        _ => panic!(
            "{m} {p} is not covered by the tenancy test: add what a user and the operator may do \
             with it to `caller_route`"
        ),
    }
    assert_eq!(
        call(server, None, m, p, None).await.0,
        401,
        "{m} {p} without credentials"
    );
}

/// The twin: with the ownership check off (the test-only switch), bob lists and reads alice's
/// session and approves her refund. The checks above would then fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ownership_check_a_stranger_approves_anothers_refund() {
    let server = start(true).await;
    let w = who();
    let (alices, request) = parked(&server, &w.alice).await;
    let (status, list) = call(&server, Some(&w.bob), "GET", "/eve/v1/sessions", None).await;
    assert_eq!(status, 200);
    assert!(
        list.to_string().contains(&alices),
        "bob lists alice's session"
    );
    let (status, shown) = call(
        &server,
        Some(&w.bob),
        "GET",
        &format!("/eve/v1/sessions/{alices}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        shown["inputRequests"][0]["requestId"], request,
        "bob reads her request"
    );
    let (status, body) = call(
        &server,
        Some(&w.bob),
        "POST",
        &format!("/eve/v1/session/{alices}"),
        Some(json!({"inputResponses": [{"requestId": request, "optionId": "approve"}]})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let events = server.until_rest_as(&w.alice, &alices, 0).await;
    let settled = events
        .iter()
        .find(|e| e["type"] == "approval.settled")
        .unwrap();
    assert_eq!(settled["data"]["responderPrincipalId"], "jwt:bob");
    assert_eq!(settled["data"]["outcome"], "approved");
    server.stop().await;
}

/// A session with no owner (started before owners were recorded, or by a schedule) and one the
/// terminal started are the operators' only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_no_user_started_are_reached_by_operators_only() {
    use eve_runtime::store::{Batch, Op, SessionRecord, now_ms};
    let server = start(false).await;
    let w = who();
    let old = "wrun_01JOLDSESSIONBEFOREOWNERS0";
    let mut batch = Batch::durable();
    batch.push(Op::InsertSession(SessionRecord::new(
        old.to_owned(),
        server.hash.clone(),
        "demo".to_owned(),
        None,
        now_ms(),
    )));
    server.runtime.store().commit(batch).await.unwrap();
    let terminal = server
        .runtime
        .create_session(Some("hello".to_owned()))
        .await
        .unwrap();
    server.until_rest_as(&w.ops, &terminal, 0).await;
    assert_eq!(
        server
            .runtime
            .session(&terminal)
            .await
            .unwrap()
            .unwrap()
            .owner
            .as_deref(),
        Some("local")
    );
    for id in [old, terminal.as_str()] {
        for user in [&w.alice, &w.bob] {
            let (status, _) = call(
                &server,
                Some(user),
                "GET",
                &format!("/eve/v1/sessions/{id}"),
                None,
            )
            .await;
            assert_eq!(status, 404, "{id}");
        }
        let (status, body) = call(
            &server,
            Some(&w.ops),
            "GET",
            &format!("/eve/v1/sessions/{id}"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{id}: {body}");
    }
    let (_, list) = call(&server, Some(&w.alice), "GET", "/eve/v1/sessions", None).await;
    assert_eq!(list["total"], 0, "{list}");
    let events = parse_ndjson(
        &server
            .http
            .get(server.url(&format!("/eve/v1/session/{terminal}/stream?follow=false")))
            .header("authorization", &w.ops)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert!(!events.is_empty());
    server.stop().await;
}

/// A subagent's session belongs to whoever started its root: alice reaches her helper's
/// session, bob does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_session_belongs_to_its_roots_principal() {
    let agent = agent();
    agent
        .file("subagents/helper/agent.yaml", "description: Helps.\n")
        .file("subagents/helper/instructions.md", "Help.\n");
    let server = TestServer::start_with(agent, &[("JWT_SECRET", SECRET)], |c| c).await;
    let w = who();
    let (status, body) = call(
        &server,
        Some(&w.alice),
        "POST",
        "/eve/v1/session",
        Some(json!({"message": "/tool helper {\"message\": \"hi\"}"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let root = body["sessionId"].as_str().unwrap().to_owned();
    server.until_rest_as(&w.alice, &root, 0).await;
    let all = server
        .runtime
        .sessions(&eve_runtime::store::SessionFilter::default())
        .await
        .unwrap();
    let child = all
        .iter()
        .find(|s| s.parent_id.as_deref() == Some(root.as_str()))
        .expect("the helper ran in a child session");
    assert_eq!(child.owner.as_deref(), Some("jwt:alice"));
    let path = format!("/eve/v1/sessions/{}", child.id);
    assert_eq!(
        call(&server, Some(&w.alice), "GET", &path, None).await.0,
        200
    );
    assert_eq!(call(&server, Some(&w.bob), "GET", &path, None).await.0, 404);
    server.stop().await;
}
