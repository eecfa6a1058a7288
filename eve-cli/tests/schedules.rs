//! Schedules in the real `eve serve` with a sped-up clock (`EVE_SCHEDULE_CLOCK`, 30× real time:
//! a per-minute cron fires every two seconds): SIGKILL between fires and restart; every fire time
//! from the first to the last has exactly one session, none skipped and none doubled.

use std::time::Duration;

use serde_json::Value;

use super::support_dev::{Project, Server, eventually};

const SPEED: i64 = 30;

fn fired(project: &Project) -> i64 {
    if !project.path(".eve/eve.db").exists() {
        return 0;
    }
    project.count("SELECT COUNT(*) FROM sessions WHERE schedule='tick'")
}

#[test]
fn no_fire_is_skipped_or_doubled_across_a_sigkill_and_restart() {
    let project = Project::new();
    project.file(
        "schedules/tick.md",
        "---\ncron: \"* * * * *\"\ntimezone: UTC\ncatch_up: latest\n---\nTick.\n",
    );
    project.build();
    let anchor = chrono::Utc::now().timestamp_millis();
    let clock = format!("{SPEED}@{anchor}");
    let start = || {
        let mut cmd = project.eve(&["serve", "--port", "0"]);
        cmd.env("EVE_SCHEDULE_CLOCK", &clock);
        Server::start(cmd)
    };

    let server = start();
    eventually(Duration::from_secs(40), "two fires", || {
        (fired(&project) >= 2).then_some(())
    });
    // Between fires (one just happened; the next is about two seconds away): kill, restart.
    server.kill();
    let killed_at = fired(&project);
    let server = start();
    eventually(Duration::from_secs(40), "three more fires", || {
        (fired(&project) >= killed_at + 3).then_some(())
    });
    assert_eq!(server.stop(), Some(0));

    let db = project.db();
    let mut stmt = db
        .prepare(
            "SELECT fire_at, status, session_id FROM schedule_fires \
             WHERE schedule='tick' AND trigger='cron' ORDER BY fire_at",
        )
        .unwrap();
    let fires: Vec<(i64, String, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(fires.len() >= 5, "{fires:?}");
    for (at, status, session) in &fires {
        assert_eq!(status, "started", "{fires:?}");
        assert!(session.is_some());
        assert_eq!(at % 60_000, 0, "fire times are whole minutes: {fires:?}");
    }
    for pair in fires.windows(2) {
        assert_eq!(
            pair[1].0 - pair[0].0,
            60_000,
            "consecutive minutes, none skipped or doubled: {fires:?}"
        );
    }
    // One session per fire, tagged with the schedule, each holding the prompt.
    let sessions = project.count("SELECT COUNT(*) FROM sessions WHERE schedule='tick'");
    assert_eq!(sessions, fires.len() as i64);
    let distinct = project
        .count("SELECT COUNT(DISTINCT session_id) FROM schedule_fires WHERE schedule='tick'");
    assert_eq!(distinct, sessions);
    let prompts = project.count("SELECT COUNT(*) FROM inbox WHERE text LIKE 'Tick.%'");
    assert_eq!(prompts, sessions);

    let listed = project
        .eve(&["sessions", "list", "--schedule", "tick", "--json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len() as i64, sessions);
}
