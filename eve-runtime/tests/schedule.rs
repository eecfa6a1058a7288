//! Schedules with a clock moved by hand: a fire is claimed once across restarts and racing
//! schedulers, `overlap: skip|queue`, `catch_up: none|latest`, a changed cron, and the dev route.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use eve_runtime::engine::{
    DriveOutcome, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::model::mock::MockClient;
use eve_runtime::schedule::{ManualClock, Scheduler, SchedulerConfig};
use eve_runtime::server::{self, RouterOptions, ServerConfig};
use eve_runtime::store::{FireStatus, FireTrigger, ScheduleFire, SessionFilter};
use serde_json::Value;

use super::server_support::AgentDir;

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 2, h, m, s).unwrap()
}

/// An agent with one schedule `report` (`front` holds its front matter lines).
fn agent(front: &str) -> AgentDir {
    let agent = AgentDir::new();
    agent.file(
        "schedules/report.md",
        &format!("---\n{front}\n---\nWrite the report.\n"),
    );
    agent.build();
    agent
}

/// A runtime on the agent's store; `autostart: false` leaves fired sessions undriven (busy)
/// until the test drives them.
fn runtime(agent: &AgentDir, autostart: bool) -> Runtime {
    let model = ResolvedModel {
        client: Arc::new(MockClient::new("echo", None).unwrap()),
        model: "echo".to_owned(),
        model_id: "mock/echo".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let mut config = RuntimeConfig::new(
        agent.root().join(".eve"),
        Arc::new(FixedModelProvider(model)),
    )
    .unwrap();
    config.autostart = autostart;
    config.sandbox_helper = std::path::PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox"));
    Runtime::new(config)
}

fn scheduler(runtime: &Runtime, clock: &Arc<ManualClock>) -> Scheduler {
    Scheduler::with_config(
        runtime.clone(),
        clock.clone(),
        SchedulerConfig {
            grace: Duration::from_secs(60),
            max_sleep: Duration::from_millis(50),
            queue_limit: 3,
        },
    )
}

async fn fires(runtime: &Runtime) -> Vec<ScheduleFire> {
    let mut all = runtime
        .store()
        .schedule_fires("report", None, 0)
        .await
        .unwrap();
    all.reverse();
    all
}

fn summary(fires: &[ScheduleFire]) -> Vec<(String, FireStatus)> {
    fires
        .iter()
        .map(|f| {
            let t = DateTime::<Utc>::from_timestamp_millis(f.fire_at).unwrap();
            (t.format("%H:%M").to_string(), f.status)
        })
        .collect()
}

async fn scheduled_sessions(runtime: &Runtime) -> Vec<String> {
    let filter = SessionFilter {
        schedule: Some("report".to_owned()),
        ..SessionFilter::default()
    };
    runtime
        .sessions(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect()
}

#[tokio::test]
async fn a_fire_is_claimed_once_across_restarts_and_racing_schedulers() {
    let agent = agent("cron: \"*/5 * * * *\"\ntimezone: UTC");
    let clock = Arc::new(ManualClock::new(at(9, 1, 0)));
    let rt = runtime(&agent, false);
    let first = scheduler(&rt, &clock);

    // The first look records the next fire time; nothing is due yet.
    let report = first.tick().await.unwrap();
    assert!(report.fires.is_empty());
    let states = rt.store().schedule_states().await.unwrap();
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].next_fire_at, at(9, 5, 0).timestamp_millis());

    clock.set(at(9, 5, 0) + chrono::TimeDelta::milliseconds(300));
    let report = first.tick().await.unwrap();
    assert_eq!(
        summary(&report.fires),
        [("09:05".into(), FireStatus::Started)]
    );
    let session = report.fires[0].session_id.clone().unwrap();
    let record = rt.session(&session).await.unwrap().unwrap();
    assert_eq!(record.schedule.as_deref(), Some("report"));
    let inbox = rt.store().pending_inbox(&session).await.unwrap();
    assert_eq!(inbox[0].text.trim(), "Write the report.");

    // A restart (a new runtime and scheduler on the same store) at the same instant: no repeat.
    drop(first);
    let rt2 = runtime(&agent, false);
    let second = scheduler(&rt2, &clock);
    assert!(second.tick().await.unwrap().fires.is_empty());

    // Two schedulers (two processes) look at the next due fire at once: one wins.
    let rt3 = runtime(&agent, false);
    let third = scheduler(&rt3, &clock);
    rt2.drive(&session).await.unwrap();
    clock.set(at(9, 10, 1));
    let (a, b) = tokio::join!(second.tick(), third.tick());
    let won = a.unwrap().fires.len() + b.unwrap().fires.len();
    assert_eq!(won, 1, "exactly one scheduler fires 09:10");

    assert_eq!(
        summary(&fires(&rt).await),
        [
            ("09:05".into(), FireStatus::Started),
            ("09:10".into(), FireStatus::Started)
        ]
    );
    assert_eq!(scheduled_sessions(&rt).await.len(), 2);
}

#[tokio::test]
async fn overlap_skip_records_the_fire_while_the_previous_session_is_busy() {
    let agent = agent("cron: \"* * * * *\"\ntimezone: UTC\noverlap: skip");
    let clock = Arc::new(ManualClock::new(at(10, 0, 30)));
    let rt = runtime(&agent, false);
    let s = scheduler(&rt, &clock);
    s.tick().await.unwrap();
    clock.set(at(10, 1, 0));
    let first = s.tick().await.unwrap().fires[0].session_id.clone().unwrap();
    // Not driven yet: its message waits in the inbox, so it is busy.
    clock.set(at(10, 2, 0));
    let skipped = s.tick().await.unwrap().fires;
    assert_eq!(skipped[0].status, FireStatus::Skipped);
    assert!(
        skipped[0].detail.as_deref().unwrap().contains(&first),
        "{:?}",
        skipped[0].detail
    );
    assert_eq!(rt.drive(&first).await.unwrap(), DriveOutcome::Idle);
    clock.set(at(10, 3, 0));
    assert_eq!(s.tick().await.unwrap().fires[0].status, FireStatus::Started);
    assert_eq!(
        summary(&fires(&rt).await),
        [
            ("10:01".into(), FireStatus::Started),
            ("10:02".into(), FireStatus::Skipped),
            ("10:03".into(), FireStatus::Started)
        ]
    );
    assert_eq!(scheduled_sessions(&rt).await.len(), 2);
}

#[tokio::test]
async fn overlap_queue_runs_fires_in_order_after_the_previous_session() {
    let agent = agent("cron: \"* * * * *\"\ntimezone: UTC\noverlap: queue");
    let clock = Arc::new(ManualClock::new(at(11, 0, 30)));
    let rt = runtime(&agent, false);
    let s = scheduler(&rt, &clock);
    s.tick().await.unwrap();
    clock.set(at(11, 1, 0));
    let first = s.tick().await.unwrap().fires[0].session_id.clone().unwrap();
    for minute in 2..=5 {
        clock.set(at(11, minute, 0));
        s.tick().await.unwrap();
    }
    // Three wait (the limit); the fourth is skipped.
    assert_eq!(
        summary(&fires(&rt).await),
        [
            ("11:01".into(), FireStatus::Started),
            ("11:02".into(), FireStatus::Queued),
            ("11:03".into(), FireStatus::Queued),
            ("11:04".into(), FireStatus::Queued),
            ("11:05".into(), FireStatus::Skipped)
        ]
    );
    // Still busy: nothing starts.
    assert!(s.tick().await.unwrap().fires.is_empty());
    rt.drive(&first).await.unwrap();
    let started = s.tick().await.unwrap().fires;
    assert_eq!(summary(&started), [("11:02".into(), FireStatus::Started)]);
    // One at a time: 11:03 waits for 11:02's session.
    assert!(s.tick().await.unwrap().fires.is_empty());
    rt.drive(started[0].session_id.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        summary(&s.tick().await.unwrap().fires),
        [("11:03".into(), FireStatus::Started)]
    );
    assert_eq!(scheduled_sessions(&rt).await.len(), 3);
}

#[tokio::test]
async fn catch_up_none_drops_missed_fires_and_latest_runs_the_newest_once() {
    for (policy, runs) in [("none", false), ("latest", true)] {
        let agent = agent(&format!(
            "cron: \"*/5 * * * *\"\ntimezone: UTC\ncatch_up: {policy}"
        ));
        let clock = Arc::new(ManualClock::new(at(12, 1, 0)));
        let rt = runtime(&agent, false);
        scheduler(&rt, &clock).tick().await.unwrap();
        // Down from 12:01 to 12:32:30: 12:05 … 12:30 fell due; 12:30 is 2.5 minutes late.
        clock.set(at(12, 32, 30));
        let rt = runtime(&agent, false);
        let s = scheduler(&rt, &clock);
        let report = s.tick().await.unwrap();
        let sessions = scheduled_sessions(&rt).await;
        if runs {
            assert_eq!(
                summary(&report.fires),
                [
                    ("12:05".into(), FireStatus::Missed),
                    ("12:30".into(), FireStatus::Started)
                ],
                "catch_up: latest"
            );
            assert!(
                report.fires[0]
                    .detail
                    .as_deref()
                    .unwrap()
                    .starts_with("5 fires")
            );
            assert_eq!(sessions.len(), 1);
        } else {
            assert_eq!(
                summary(&report.fires),
                [("12:05".into(), FireStatus::Missed)],
                "catch_up: none"
            );
            assert!(
                report.fires[0]
                    .detail
                    .as_deref()
                    .unwrap()
                    .starts_with("6 fires")
            );
            assert!(sessions.is_empty());
        }
        // The next fire is the next occurrence, not a repeat of the missed ones.
        let state = &rt.store().schedule_states().await.unwrap()[0];
        assert_eq!(state.next_fire_at, at(12, 35, 0).timestamp_millis());
        assert!(s.tick().await.unwrap().fires.is_empty());
    }
}

#[tokio::test]
async fn a_fire_late_within_the_grace_still_runs_with_catch_up_none() {
    let agent = agent("cron: \"*/5 * * * *\"\ntimezone: UTC");
    let clock = Arc::new(ManualClock::new(at(13, 1, 0)));
    let rt = runtime(&agent, false);
    let s = scheduler(&rt, &clock);
    s.tick().await.unwrap();
    clock.set(at(13, 5, 40));
    assert_eq!(
        summary(&s.tick().await.unwrap().fires),
        [("13:05".into(), FireStatus::Started)]
    );
}

#[tokio::test]
async fn a_changed_cron_counts_the_next_fire_from_now() {
    let agent = agent("cron: \"0 * * * *\"\ntimezone: UTC");
    let clock = Arc::new(ManualClock::new(at(14, 10, 0)));
    let rt = runtime(&agent, false);
    let s = scheduler(&rt, &clock);
    s.tick().await.unwrap();
    assert_eq!(
        rt.store().schedule_states().await.unwrap()[0].next_fire_at,
        at(15, 0, 0).timestamp_millis()
    );
    agent.file(
        "schedules/report.md",
        "---\ncron: \"30 * * * *\"\ntimezone: Europe/Paris\n---\nWrite the report.\n",
    );
    agent.build();
    clock.set(at(14, 20, 0));
    assert!(s.tick().await.unwrap().fires.is_empty());
    let state = &rt.store().schedule_states().await.unwrap()[0];
    assert_eq!(state.next_fire_at, at(14, 30, 0).timestamp_millis());
    assert!(state.spec.contains("Europe/Paris"));
}

#[tokio::test]
async fn the_scheduler_loop_fires_and_drives_the_session() {
    let agent = agent("cron: \"* * * * *\"\ntimezone: UTC");
    let clock = Arc::new(ManualClock::new(at(15, 0, 59)));
    let rt = runtime(&agent, true);
    let s = scheduler(&rt, &clock);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(s.clone().run(stop.clone()));
    // The loop's first tick records the schedule's next fire; only then does the clock move.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while rt.store().schedule_states().await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the loop never recorded the schedule"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        rt.store().schedule_states().await.unwrap()[0].next_fire_at,
        at(15, 1, 0).timestamp_millis()
    );
    clock.set(at(15, 1, 0));
    s.wake();
    let mut session = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if let Some(id) = scheduled_sessions(&rt).await.first() {
            let record = rt.session(id).await.unwrap().unwrap();
            if record.turn_count == 1 && rt.store().pending_inbox(id).await.unwrap().is_empty() {
                rt.settled(id).await;
                session = Some(id.clone());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    task.await.unwrap();
    let session = session.expect("the fire's session ran a turn");
    let events = rt.events(&session, 0, 0).await.unwrap();
    let text: String = events
        .iter()
        .filter(|e| e.kind == "message.appended")
        .map(|e| e.data["messageDelta"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(text, "You said: Write the report.");
}

async fn post(base: &str, path: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_dev_route_fires_a_schedule_once_and_only_in_dev_mode() {
    let agent = agent("cron: \"0 0 1 1 *\"\ntimezone: UTC");
    let rt = runtime(&agent, true);
    let clock = Arc::new(ManualClock::new(at(16, 0, 0)));
    let mut bases = Vec::new();
    let stop = tokio_util::sync::CancellationToken::new();
    for dev in [true, false] {
        let options = RouterOptions {
            dev: dev.then(|| scheduler(&rt, &clock)),
            ..RouterOptions::default()
        };
        let config = ServerConfig {
            shutdown: stop.clone(),
            ..ServerConfig::default()
        };
        let router = server::router_with(rt.clone(), config, options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        bases.push(format!("http://{}", listener.local_addr().unwrap()));
        let stop = stop.clone();
        tokio::spawn(async move { server::serve(listener, router, stop).await.unwrap() });
    }
    let (status, body) = post(&bases[0], "/eve/v1/dev/schedules/report").await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "accepted");
    assert_eq!(body["schedule"], "report");
    let id = body["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(scheduled_sessions(&rt).await, vec![id.clone()]);
    let recorded = fires(&rt).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].trigger, FireTrigger::Manual);
    assert_eq!(recorded[0].session_id.as_deref(), Some(id.as_str()));

    let (status, body) = post(&bases[0], "/eve/v1/dev/schedules/nope").await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "schedule_not_found");
    assert_eq!(body["ok"], false);

    let (status, body) = post(&bases[1], "/eve/v1/dev/schedules/report").await;
    assert_eq!(status, 404, "not served outside dev mode: {body}");
    assert_eq!(body["code"], "not_found");
    assert_eq!(scheduled_sessions(&rt).await.len(), 1);
    rt.settled(&id).await;
    stop.cancel();
}

#[tokio::test]
async fn a_frequent_cron_down_for_months_runs_the_latest_fire_once() {
    let agent = agent("cron: \"* * * * *\"\ntimezone: UTC\ncatch_up: latest");
    let clock = Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 30).unwrap(),
    ));
    let rt = runtime(&agent, false);
    let s = scheduler(&rt, &clock);
    s.tick().await.unwrap();
    let back = Utc.with_ymd_and_hms(2026, 7, 1, 0, 0, 30).unwrap();
    clock.set(back);
    let fires = s.tick().await.unwrap().fires;
    assert_eq!(fires.len(), 2, "{fires:?}");
    assert_eq!(fires[0].status, FireStatus::Missed);
    assert!(
        fires[0]
            .detail
            .as_deref()
            .unwrap()
            .starts_with("more than "),
        "{:?}",
        fires[0].detail
    );
    assert_eq!(fires[1].status, FireStatus::Started);
    assert_eq!(
        fires[1].fire_at,
        Utc.with_ymd_and_hms(2026, 7, 1, 0, 0, 0)
            .unwrap()
            .timestamp_millis()
    );
    assert!(s.tick().await.unwrap().fires.is_empty());
}
