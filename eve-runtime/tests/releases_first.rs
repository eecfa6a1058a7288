//! A project's first release without its store: `release_first_build` records it beside the
//! SQLite store that does not exist yet (no database is created), the store's next open takes it
//! in before anything reads it, exactly once (also when the file outlives the commit, as after a
//! crash), with the events the runtime's own path writes; a file cut short is moved aside and the
//! build `.eve/current` names recorded instead; anything but a project without a store is left to
//! the runtime.

use eve_compile::Project;
use eve_runtime::releases::{ReleaseOpts, ReleaseOutcome, release_first_build};
use eve_runtime::store::{ReleaseStatus, SqliteStore, Store};

use crate::server_support::{AgentDir, runtime};

fn candidate(agent: &AgentDir) -> String {
    let project = Project::at(agent.root(), agent.root().join("agent"));
    let built = eve_compile::build::build_candidate(&project).unwrap();
    built
        .hash
        .unwrap_or_else(|| panic!("build failed: {:#?}", built.output.diagnostics))
}

fn agent() -> AgentDir {
    let agent = AgentDir::new();
    agent.file("agent.yaml", "default_tools: false\nactivation: review\n");
    agent.tool(
        "look",
        "description: look.\neffect: read\ninput:\n  type: object",
        "cat >/dev/null\necho ok\n",
    );
    agent
}

fn first(agent: &AgentDir, hash: &str) -> Option<ReleaseOutcome> {
    let state = agent.root().join(".eve");
    release_first_build(
        &state.join("eve.db"),
        &state,
        hash,
        "local:test",
        ReleaseOpts::default(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_build_is_recorded_beside_the_store_and_taken_in_once_by_its_next_open() {
    let agent = agent();
    let hash = candidate(&agent);
    let state = agent.root().join(".eve");
    let db = state.join("eve.db");
    let Some(ReleaseOutcome::Activated(r)) = first(&agent, &hash) else {
        panic!("a project's first build activates");
    };
    assert_eq!(r.status, ReleaseStatus::Active);
    assert_eq!(r.build_hash, hash);
    assert!(r.delta.widens(), "the first delta is all the build can do");
    assert!(!db.exists(), "no store is created");
    assert!(state.join("eve.db.release").is_file());
    assert_eq!(
        eve_compile::build::current_hash(&state).as_deref(),
        Some(hash.as_str())
    );
    // A second first build while one is recorded: the runtime's path.
    assert_eq!(first(&agent, &hash), None);

    // Kept aside to put back after the store took it in, as a crash before its removal leaves it.
    let recorded = std::fs::read(state.join("eve.db.release")).unwrap();
    let rt = runtime(&agent.root());
    let all = rt.releases_list().await.unwrap();
    assert_eq!(all, vec![r.clone()], "stored as the runtime reports it");
    assert!(
        !state.join("eve.db.release").exists(),
        "removed once stored"
    );
    let kinds: Vec<String> = rt
        .release_events(0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["release.built", "release.activated"]);
    let events_at: Vec<i64> = rt
        .release_events(0, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.at)
        .collect();
    assert_eq!(
        events_at,
        [r.created_at, r.created_at],
        "the time it was recorded"
    );
    drop(rt);

    std::fs::write(state.join("eve.db.release"), recorded).unwrap();
    let store = SqliteStore::open(&db).unwrap();
    assert_eq!(
        store.releases().await.unwrap().len(),
        1,
        "not recorded twice"
    );
    assert_eq!(store.release_events(0, 100).await.unwrap().len(), 2);
    assert!(!state.join("eve.db.release").exists());
    store.close_and_wait();

    // With a store, nothing is recorded beside it.
    assert_eq!(first(&agent, &hash), None);
    assert!(!state.join("eve.db.release").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_build_is_judged_against_the_recorded_first_release() {
    let agent = agent();
    let v1 = candidate(&agent);
    let Some(ReleaseOutcome::Activated(r1)) = first(&agent, &v1) else {
        panic!("a project's first build activates");
    };
    // v2 widens: v1's `activation: review` parks it, so v1 was taken in before v2 was judged.
    agent.tool(
        "deploy",
        "description: deploy.\neffect: write\ninput:\n  type: object",
        "cat >/dev/null\necho ok\n",
    );
    let v2 = candidate(&agent);
    assert_eq!(first(&agent, &v2), None, "a recorded release is there");
    let rt = runtime(&agent.root());
    let outcome = rt
        .release_build(&v2, "local:test", ReleaseOpts::default())
        .await
        .unwrap();
    let ReleaseOutcome::Pending(r2) = outcome else {
        panic!("v1's review parks v2: {outcome:?}");
    };
    assert_eq!(r2.base.as_deref(), Some(r1.id.as_str()));
    assert_eq!(
        rt.active_release().await.unwrap().map(|r| r.id),
        Some(r1.id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_release_cut_short_is_moved_aside_and_the_current_build_recorded_instead() {
    let agent = agent();
    let hash = candidate(&agent);
    let state = agent.root().join(".eve");
    assert!(first(&agent, &hash).is_some());
    // What a power loss can leave of a file that was not synced.
    std::fs::write(state.join("eve.db.release"), b"").unwrap();
    let rt = runtime(&agent.root());
    // The next release decision records the build `.eve/current` names first.
    let judged = rt.candidate(&hash).await.unwrap();
    let active = judged
        .base
        .expect("the current build is the active release");
    assert_eq!(active.build_hash, hash);
    assert_eq!(active.principal, "runtime", "recorded from .eve/current");
    assert!(!state.join("eve.db.release").exists());
    assert!(state.join("eve.db.release.unreadable").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_with_a_current_build_from_before_releases_is_left_to_the_runtime() {
    let agent = agent();
    let hash = candidate(&agent);
    let state = agent.root().join(".eve");
    std::os::unix::fs::symlink(format!("builds/{hash}"), state.join("current")).unwrap();
    assert_eq!(first(&agent, &hash), None);
    assert!(!state.join("eve.db.release").exists());
}
