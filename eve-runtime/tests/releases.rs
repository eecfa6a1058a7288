//! Releases on the runtime: real builds of a real agent folder, a runtime on a real SQLite store.
//! The active release's policy governs the next build (a candidate cannot relax its own
//! review); `candidate` records nothing; a project upgraded from before releases treats
//! `.eve/current` as its first release; another process's activation is followed through the
//! store even when this node's `.eve/current` was never touched; the releases' audit stream is
//! followed stored then live, with no gap and no repeat.

use std::sync::Arc;
use std::time::Duration;

use eve_compile::{ChangeKind, Project};
use eve_runtime::engine::Runtime;
use eve_runtime::releases::{ReleaseOpts, ReleaseOutcome, Verdict};
use eve_runtime::store::{ReleaseStatus, SqliteStore};

use crate::server_support::{AgentDir, runtime};

const LIMIT: Duration = Duration::from_secs(20);

fn candidate(agent: &AgentDir) -> String {
    let project = Project::at(agent.root(), agent.root().join("agent"));
    let built = eve_compile::build::build_candidate(&project).unwrap();
    built
        .hash
        .unwrap_or_else(|| panic!("build failed: {:#?}", built.output.diagnostics))
}

fn tool(agent: &AgentDir, name: &str, effect: &str) {
    agent.tool(
        name,
        &format!("description: {name}.\neffect: {effect}\ninput:\n  type: object"),
        "cat >/dev/null\necho ok\n",
    );
}

async fn release(rt: &Runtime, hash: &str) -> ReleaseOutcome {
    rt.release_build(hash, "local:test", ReleaseOpts::default())
        .await
        .unwrap()
}

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_active_release_governs_and_a_candidate_cannot_relax_its_own_review() {
    let agent = AgentDir::new();
    agent.file("agent.yaml", "default_tools: false\nactivation: review\n");
    tool(&agent, "look", "read");
    let v1 = candidate(&agent);
    let rt = runtime(&agent.root());
    // The first build activates, review or not: there is nothing to compare it with.
    let ReleaseOutcome::Activated(r1) = release(&rt, &v1).await else {
        panic!("the first build activates");
    };
    assert_eq!(rt.builds().current_hash().unwrap(), v1);

    // v2 turns review off and adds a tool: still parked, by v1's policy.
    agent.file("agent.yaml", "default_tools: false\nactivation: auto\n");
    tool(&agent, "deploy", "write");
    let v2 = candidate(&agent);
    let judged = rt.candidate(&v2).await.unwrap();
    assert_eq!(judged.verdict, Verdict::Pending);
    assert_eq!(
        judged.base.as_ref().map(|b| b.id.clone()),
        Some(r1.id.clone())
    );
    let kinds: Vec<(ChangeKind, &str, bool)> = judged
        .delta
        .changes
        .iter()
        .map(|c| (c.kind, c.subject.as_str(), c.widening))
        .collect();
    assert_eq!(
        kinds,
        [
            (ChangeKind::PolicyLoosened, "activation", true),
            (ChangeKind::ToolAdded, "deploy", true)
        ]
    );
    assert_eq!(
        rt.releases_list().await.unwrap().len(),
        1,
        "a candidate records nothing"
    );
    let ReleaseOutcome::Pending(r2) = release(&rt, &v2).await else {
        panic!("a widening build waits under review");
    };
    assert_eq!(rt.builds().current_hash().unwrap(), v1, "v1 still serves");
    // Building it again does not record it twice.
    let again = release(&rt, &v2).await;
    assert_eq!(again.release().id, r2.id);

    // A narrowing build activates under review.
    std::fs::remove_file(agent.root().join("agent/tools/deploy.sh")).unwrap();
    agent.file("agent.yaml", "default_tools: false\nactivation: review\n");
    std::fs::remove_file(agent.root().join("agent/tools/look.sh")).unwrap();
    let v3 = candidate(&agent);
    let ReleaseOutcome::Activated(r3) = release(&rt, &v3).await else {
        panic!("a build that widens nothing activates under review");
    };
    assert!(!r3.delta.widens(), "{:?}", r3.delta);
    assert_eq!(rt.builds().current_hash().unwrap(), v3);

    // A principal activates the pending one; the rollback goes back to v3, then to an id.
    let a = rt.activate(&r2.id, "token:OPS", false).await.unwrap();
    assert_eq!(a.activated_by.as_deref(), Some("token:OPS"));
    assert_eq!(rt.builds().current_hash().unwrap(), v2);
    let back = rt.rollback(None, "local:test", "testing").await.unwrap();
    assert_eq!(back.id, r3.id);
    let first = rt
        .rollback(Some(&r1.id), "local:test", "further")
        .await
        .unwrap();
    assert_eq!(first.build_hash, v1);
    assert_eq!(
        std::fs::read_link(agent.root().join(".eve/current")).unwrap(),
        std::path::Path::new("builds").join(&v1),
        "the link follows the active release"
    );
    let statuses: Vec<ReleaseStatus> = rt
        .releases_list()
        .await
        .unwrap()
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(
        statuses,
        [
            ReleaseStatus::Active,
            ReleaseStatus::RolledBack,
            ReleaseStatus::RolledBack,
        ]
    );
    // Nothing to roll back to that was never active.
    let err = rt
        .rollback(Some("nope"), "local:test", "x")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_project_treats_its_current_build_as_the_first_release() {
    let agent = AgentDir::new();
    agent.file("agent.yaml", "default_tools: false\n");
    tool(&agent, "look", "read");
    // Built before releases existed: `.eve/current` and no rows.
    let old = agent.build();
    let rt = runtime(&agent.root());
    tool(&agent, "more", "read");
    let new = candidate(&agent);
    let ReleaseOutcome::Activated(r) = release(&rt, &new).await else {
        panic!("auto activates");
    };
    let all = rt.releases_list().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].build_hash, old);
    assert_eq!(all[0].status, ReleaseStatus::Superseded);
    assert_eq!(r.base.as_deref(), Some(all[0].id.as_str()));
    let kinds: Vec<(ChangeKind, &str)> = r
        .delta
        .changes
        .iter()
        .map(|c| (c.kind, c.subject.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [(ChangeKind::ToolAdded, "more")],
        "the delta is against the old build"
    );
}

fn node(state_dir: &std::path::Path, store: Arc<dyn eve_runtime::store::Store>) -> Runtime {
    let model = eve_runtime::engine::ResolvedModel {
        client: Arc::new(eve_runtime::model::mock::MockClient::new("echo", None).unwrap()),
        model: "echo".to_owned(),
        model_id: "mock/echo".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    Runtime::new(eve_runtime::engine::RuntimeConfig::with_store(
        state_dir,
        store,
        Arc::new(eve_runtime::engine::FixedModelProvider(model)),
    ))
}

/// Two nodes of a fleet on one PostgreSQL store, each with its own state folder: an activation
/// on one is the other's current build at once (it hears the commit), a rollback too. Only the
/// first node has the builds on disk: the second loads each release's build from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_node_follows_another_nodes_activation_on_postgres() {
    let Some(base) = crate::store_postgres::server_url() else {
        return;
    };
    let url = crate::store_postgres::fresh_schema(&base).await;
    let agent = AgentDir::new();
    agent.file("agent.yaml", "default_tools: false\n");
    tool(&agent, "look", "read");
    let v1 = candidate(&agent);
    tool(&agent, "more", "read");
    let v2 = candidate(&agent);
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        if i == 0 {
            std::os::unix::fs::symlink(agent.root().join(".eve/builds"), dir.path().join("builds"))
                .unwrap();
        }
        let store = Arc::new(eve_runtime::store::PgStore::connect(&url).await.unwrap());
        nodes.push(node(dir.path(), store));
    }
    let ReleaseOutcome::Activated(r1) = release(&nodes[0], &v1).await else {
        panic!("the first build activates");
    };
    until("node 2 to follow v1", async || {
        (nodes[1].builds().current().ok()?.hash == v1).then_some(())
    })
    .await;
    release(&nodes[0], &v2).await;
    until("node 2 to follow v2", async || {
        (nodes[1].builds().current().ok()?.hash == v2).then_some(())
    })
    .await;
    assert!(
        dirs[1]
            .path()
            .join("builds")
            .join(&v2)
            .join("manifest.json")
            .is_file(),
        "node 2 fetched the build from the store"
    );
    let back = nodes[1]
        .rollback(None, "token:OPS", "node 2 says no")
        .await
        .unwrap();
    assert_eq!(back.id, r1.id);
    until("node 1 to follow the rollback", async || {
        (nodes[0].builds().current_hash().ok()? == v1).then_some(())
    })
    .await;
    let kinds: Vec<String> = nodes[0]
        .release_events(0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "release.built",
            "release.activated",
            "release.built",
            "release.activated",
            "release.rolled_back"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_activation_is_followed_through_the_store() {
    let agent = AgentDir::new();
    agent.file("agent.yaml", "default_tools: false\n");
    tool(&agent, "look", "read");
    let v1 = candidate(&agent);
    tool(&agent, "more", "read");
    let v2 = candidate(&agent);
    let here = runtime(&agent.root());
    release(&here, &v1).await;

    // A second node: its own state folder (its own `.eve/current`), the same store and builds.
    let node = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(agent.root().join(".eve/builds"), node.path().join("builds"))
        .unwrap();
    std::os::unix::fs::symlink(
        std::path::Path::new("builds").join(&v1),
        node.path().join("current"),
    )
    .unwrap();
    let store = Arc::new(SqliteStore::open(agent.root().join(".eve/eve.db")).unwrap());
    let model = eve_runtime::engine::ResolvedModel {
        client: Arc::new(eve_runtime::model::mock::MockClient::new("echo", None).unwrap()),
        model: "echo".to_owned(),
        model_id: "mock/echo".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let config = eve_runtime::engine::RuntimeConfig::with_store(
        node.path(),
        store,
        Arc::new(eve_runtime::engine::FixedModelProvider(model)),
    );
    let there = Runtime::new(config);
    until("the node to follow v1", async || {
        (there.builds().current_hash().ok()? == v1).then_some(())
    })
    .await;

    let mut follower = there.follow_releases(0);
    let ReleaseOutcome::Activated(r2) = release(&here, &v2).await else {
        panic!("auto activates");
    };
    until("the node to follow v2", async || {
        (there.builds().current_hash().ok()? == v2).then_some(())
    })
    .await;
    // The audit stream, read on the other node: stored, then what arrives, in order.
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let e = tokio::time::timeout(LIMIT, follower.next())
            .await
            .unwrap()
            .unwrap();
        seen.push((
            e.index,
            e.kind.clone(),
            e.data["releaseId"].as_str().unwrap_or("").to_owned(),
        ));
    }
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "no gap, no repeat"
    );
    assert_eq!(seen[2].1, "release.built");
    assert_eq!(seen[3], (3, "release.activated".to_owned(), r2.id.clone()));
    // An audit event another part of the runtime writes (a proposed change) joins the stream.
    let e = here
        .audit(
            eve_runtime::releases::CHANGE_PROPOSED,
            serde_json::json!({"summary": "x"}),
        )
        .await
        .unwrap();
    assert_eq!(e.index, 4);
    let next = tokio::time::timeout(LIMIT, follower.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.index, next.kind.as_str()), (4, "change.proposed"));
}

/// Every release route is an operator's: a JWT user (not named under `operators:`) can neither
/// read releases nor activate or roll back; the operator reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_an_operators_and_a_jwt_user_can_neither_read_nor_change_them() {
    use crate::server_support::TestServer;
    use eve_runtime::server::sign_hs256;
    use serde_json::json;
    let secret = "jwt-releases-secret-0123456789";
    let agent = AgentDir::standard();
    agent.file(
        "channels/eve.yaml",
        "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  subjects: [ops]\n",
    );
    let server = TestServer::start_with(agent, &[("JWT_SECRET", secret)], |c| c).await;
    let ReleaseOutcome::Activated(r1) = release(&server.runtime, &server.hash).await else {
        panic!("the first build activates");
    };
    let now = chrono::Utc::now().timestamp();
    let alice = format!(
        "Bearer {}",
        sign_hs256(
            &json!({"sub": "alice", "exp": now + 300}),
            secret.as_bytes()
        )
    );
    let ops = format!(
        "Bearer {}",
        sign_hs256(&json!({"sub": "ops", "exp": now + 300}), secret.as_bytes())
    );
    let get = |auth: String| {
        server
            .http
            .get(server.url("/eve/v1/releases"))
            .header("authorization", auth)
            .send()
    };
    assert_eq!(get(alice.clone()).await.unwrap().status(), 403);
    let shown = get(ops).await.unwrap();
    assert_eq!(shown.status(), 200);
    let body: serde_json::Value = shown.json().await.unwrap();
    assert_eq!(body["active"], r1.id.as_str());
    for path in [
        format!("/eve/v1/releases/{}/activate", r1.id),
        "/eve/v1/rollback".to_owned(),
    ] {
        let response = server
            .http
            .post(server.url(&path))
            .header("authorization", &alice)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{path}");
    }
    let all = server.runtime.releases_list().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].status, ReleaseStatus::Active);
    server.shutdown.cancel();
}

/// A release restored by an automatic rollback is never rolled forward again: failures on it
/// raise one `release.rollback_held` alert, and the release rolled back stays rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_rollback_never_ping_pongs() {
    let agent = AgentDir::new();
    agent.file(
        "agent.yaml",
        "default_tools: false\nrollback: {failures: 2, window: 10m}\n",
    );
    let flaky = |description: &str| {
        agent.tool(
            "flaky",
            &format!(
                "description: {description}\neffect: read\ninput:\n  type: object\nsandbox: host"
            ),
            "grep -q fail && { echo broken >&2; exit 1; }; echo fine\n",
        );
    };
    flaky("Good.");
    let v1 = candidate(&agent);
    let rt = runtime(&agent.root());
    let ReleaseOutcome::Activated(good) = release(&rt, &v1).await else {
        panic!("the first build activates")
    };
    flaky("Bad.");
    let v2 = candidate(&agent);
    let ReleaseOutcome::Activated(bad) = release(&rt, &v2).await else {
        panic!("a clean build activates")
    };
    let failing_turn = async || {
        let id = rt
            .create_session(Some("/tool flaky {\"fail\": true}".to_owned()))
            .await
            .unwrap();
        rt.drive(&id).await.unwrap();
    };
    let active = async || rt.active_release().await.unwrap().unwrap().id;
    failing_turn().await;
    failing_turn().await;
    until("the automatic rollback to the good release", async || {
        (active().await == good.id).then_some(())
    })
    .await;
    // Failures on the restored release: an alert, no move.
    for _ in 0..3 {
        failing_turn().await;
    }
    let held = until("the held rollback's alert", async || {
        let events = rt.release_events(0, 0).await.unwrap();
        let held: Vec<_> = events
            .into_iter()
            .filter(|e| e.kind == "release.rollback_held")
            .collect();
        (!held.is_empty()).then_some(held)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(active().await, good.id, "the good release stays active");
    assert_eq!(
        rt.release(&bad.id).await.unwrap().status,
        ReleaseStatus::RolledBack
    );
    let events = rt.release_events(0, 0).await.unwrap();
    let rolled = events
        .iter()
        .filter(|e| e.kind == "release.rolled_back")
        .count();
    assert_eq!(rolled, 1, "one rollback, never a second one forward");
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == "release.rollback_held")
            .count(),
        1,
        "one alert per activation"
    );
    let reason = held[0].data["reason"].as_str().unwrap();
    assert!(
        reason.contains("restored by an automatic rollback"),
        "{reason}"
    );

    // Building the rolled-back folder again (what `eve run` and `eve dev` do) does not bring it
    // back: only a principal's activation does.
    let again = release(&rt, &v2).await;
    assert!(
        matches!(&again, ReleaseOutcome::Rejected(r) if r.id == bad.id),
        "{again:?}"
    );
    assert_eq!(active().await, good.id);
}
