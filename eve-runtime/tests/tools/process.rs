//! Script and `run:` tools: the process protocol.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use eve_compile::Runner;
use eve_runtime::tools::run_tool;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Fixture, dies_within, tool};

#[tokio::test]
async fn stdout_json_is_a_structured_result() {
    let fx = Fixture::new();
    let t = fx.sh_tool("j", r#"echo '{"temp": 21.5, "ok": true}'"#);
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output, json!({"temp": 21.5, "ok": true}));
    assert_eq!(r.exit_code, Some(0));
    assert!(!r.truncated);
    assert_eq!(r.error, None);
}

#[tokio::test]
async fn stdout_text_is_a_string_without_trailing_newlines() {
    let fx = Fixture::new();
    let t = fx.sh_tool("t", r"printf 'line one\nline two\n\n'");
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output, json!("line one\nline two"));
}

#[tokio::test]
async fn non_zero_exit_carries_code_and_stderr_tail() {
    let fx = Fixture::new();
    // 10 KiB of noise first: only the tail of stderr is reported.
    let t = fx.sh_tool(
        "fail",
        "echo partial; head -c 10240 /dev/zero | tr '\\0' 'x' >&2; echo >&2; echo 'city not found' >&2; exit 3",
    );
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.output, json!("partial"));
    let error = r.error.unwrap();
    assert!(error.starts_with("exited with code 3"), "{error}");
    assert!(error.ends_with("city not found"), "{error}");
    assert!(
        error.len() < 2 * 1024 + 100,
        "stderr tail is bounded: {}",
        error.len()
    );
}

#[tokio::test]
async fn environment_is_an_allowlist() {
    let fx = Fixture::with_env(&[("LISTED_TOKEN", "tok-1"), ("UNLISTED_SECRET", "nope")]);
    let mut t = fx.sh_tool("env", "env");
    t.env = vec!["LISTED_TOKEN".into(), "NOT_SET_ANYWHERE".into()];
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{r:?}");
    let text = r.output.as_str().unwrap().to_owned();
    let env: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(env.get("LISTED_TOKEN"), Some(&"tok-1"));
    assert!(!env.contains_key("UNLISTED_SECRET"), "{text}");
    assert!(!env.contains_key("NOT_SET_ANYWHERE"), "{text}");
    // The test process's own environment does not leak through.
    assert!(!env.contains_key("CARGO_MANIFEST_DIR"), "{text}");
    assert_eq!(env.get("EVE_SESSION_ID"), Some(&"ses_01"));
    assert_eq!(env.get("EVE_CALL_ID"), Some(&"call_01"));
    assert_eq!(
        env.get("EVE_IDEMPOTENCY_KEY").copied(),
        Some(fx.ctx.idempotency_key.as_str())
    );
    assert_eq!(
        env.get("EVE_WORKSPACE").copied(),
        Some(fx.workspace().to_str().unwrap())
    );
    assert_eq!(
        env.get("EVE_AGENT_DIR").copied(),
        Some(fx.ctx.agent_dir.to_str().unwrap())
    );
    for name in ["PATH", "HOME", "LANG", "TZ"] {
        assert!(env.contains_key(name), "{name} missing: {text}");
    }
    assert_eq!(env.get("TZ"), Some(&"UTC"));
}

#[tokio::test]
async fn input_arrives_on_stdin_and_cwd_is_the_new_workspace() {
    let fx = Fixture::new();
    assert!(!fx.workspace().exists());
    let t = tool(
        "cat",
        Runner::Command {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "cat > got.json; cat got.json".into(),
            ],
        },
    );
    let input = json!({"city": "Zürich", "days": [1, 2]});
    let r = run_tool(&t, &input, &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output, input);
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.ws_file("got.json")).unwrap()).unwrap();
    assert_eq!(written, input);
}

#[tokio::test]
async fn argv_env_references_are_resolved_and_unset_ones_run_nothing() {
    let fx = Fixture::with_env(&[("GREETING", "hello there")]);
    // The call's own variables are resolved anywhere on the command line; a secret in the script
    // of `sh -c` is left for the shell, which reads it from the environment eve gives it.
    let t = tool(
        "greet",
        Runner::Command {
            argv: vec![
                "sh".into(),
                "-c".into(),
                r#"printf '%s|%s|%s' "${GREETING}" "$1" "$(cat /proc/$$/cmdline | tr '\0' ' ')""#
                    .into(),
                "sh".into(),
                "id=${EVE_CALL_ID}".into(),
            ],
        },
    );
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.ok, "{r:?}");
    let out = r.output.as_str().unwrap().to_owned();
    assert!(out.starts_with("hello there|id=call_01|"), "{out}");
    let cmdline = out
        .split_once("|sh -c ")
        .map(|(_, c)| c)
        .unwrap_or_default();
    assert!(
        !cmdline.contains("hello there"),
        "the secret is not on sh's command line: {out}"
    );
    assert!(cmdline.contains("${GREETING}"), "{out}");

    // A secret as an argument of its own would be on the command line: refused, nothing runs.
    let t = tool(
        "argv",
        Runner::Command {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "touch ran".into(),
                "sh".into(),
                "${GREETING}".into(),
            ],
        },
    );
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    let error = r.error.unwrap();
    assert!(
        error.contains("`${GREETING}`") && error.contains("env: [GREETING]"),
        "{error}"
    );
    assert!(!fx.ws_file("ran").exists(), "nothing ran");

    let t = tool(
        "unset",
        Runner::Command {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "touch ran; echo ${NOT_SET}".into(),
            ],
        },
    );
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    let error = r.error.unwrap();
    assert!(
        error.contains("`${NOT_SET}`") && error.contains("not set"),
        "{error}"
    );
    assert!(!fx.ws_file("ran").exists(), "nothing ran");
}

#[tokio::test]
async fn python_script_through_its_interpreter() {
    let fx = Fixture::new();
    // Not executable: it runs through the interpreter.
    let path = "tools/weather.py";
    std::fs::write(
        fx.ctx.agent_dir.join(path),
        "# ---\n# description: weather\n# ---\nimport json, os, sys\n\
         data = json.load(sys.stdin)\n\
         print(json.dumps({'city': data['city'], 'cwd': os.getcwd(), 'key': os.environ['EVE_IDEMPOTENCY_KEY']}))\n",
    )
    .unwrap();
    let t = tool(
        "weather",
        Runner::Script {
            path: path.into(),
            interpreter: vec!["python3".into()],
        },
    );
    let r = run_tool(
        &t,
        &json!({"city": "Oslo"}),
        &fx.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(r.ok, "{r:?}");
    let cwd = std::fs::canonicalize(fx.workspace()).unwrap();
    assert_eq!(
        r.output,
        json!({"city": "Oslo", "cwd": cwd.to_str().unwrap(), "key": "ses_01:call_01"})
    );
}

#[tokio::test]
async fn missing_program_is_a_spawn_error() {
    let fx = Fixture::new();
    let t = tool(
        "missing",
        Runner::Command {
            argv: vec!["/nonexistent/eve-tool".into()],
        },
    );
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    assert_eq!(r.exit_code, None);
    let error = r.error.unwrap();
    assert!(
        error.contains("could not start `/nonexistent/eve-tool`"),
        "{error}"
    );
}

#[tokio::test]
async fn non_executable_script_without_interpreter_says_what_to_do() {
    let fx = Fixture::new();
    let mut t = fx.sh_tool("plain", "echo hi");
    let Runner::Script { path, .. } = t.runner.clone() else {
        unreachable!()
    };
    let file = fx.ctx.agent_dir.join(&path);
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    let error = r.error.unwrap();
    assert!(error.contains("chmod +x"), "{error}");
    t.runner = Runner::Script {
        path,
        interpreter: vec!["sh".into()],
    };
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert_eq!(r.output, json!("hi"));
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let fx = Fixture::new();
    let mut t = fx.sh_tool(
        "hang",
        "sleep 1000 &\necho $! > sleeper.pid\necho started\nwait",
    );
    t.timeout_ms = 300;
    let start = Instant::now();
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    let elapsed = start.elapsed();
    assert!(!r.ok);
    assert!(
        elapsed < Duration::from_secs(10),
        "returned after {elapsed:?}"
    );
    assert!(elapsed >= Duration::from_millis(300));
    let error = r.error.unwrap();
    assert!(error.contains("timed out after 300 ms"), "{error}");
    assert_eq!(r.output, json!("started"), "partial output is kept");
    let pid: i32 = std::fs::read_to_string(fx.ws_file("sleeper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        dies_within(pid, Duration::from_secs(10)).await,
        "sleeper {pid} survived"
    );
}

#[tokio::test]
async fn leftover_background_process_does_not_hold_the_call() {
    let fx = Fixture::new();
    // The sleeper inherits stdout and would keep the pipe open for 1000 s.
    let t = fx.sh_tool("bg", "sleep 1000 &\necho $! > sleeper.pid\necho done");
    let start = Instant::now();
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(r.ok, "{r:?}");
    assert_eq!(r.output, json!("done"));
    let pid: i32 = std::fs::read_to_string(fx.ws_file("sleeper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(dies_within(pid, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn cancellation_kills_the_group_promptly() {
    let fx = Fixture::new();
    let t = fx.sh_tool("long", "sleep 1000 &\necho $! > sleeper.pid\nwait");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let start = Instant::now();
    let r = run_tool(&t, &json!({}), &fx.ctx, cancel).await;
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(!r.ok);
    assert!(r.error.unwrap().contains("cancelled"));
    let pid: i32 = std::fs::read_to_string(fx.ws_file("sleeper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(dies_within(pid, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn output_is_capped_and_the_cap_is_said() {
    let fx = Fixture::new();
    // 10 MiB on stdout and 10 MiB on stderr: both must be drained without blocking the child.
    let mut t = fx.sh_tool(
        "flood",
        "head -c 10485760 /dev/zero | tr '\\0' 'a'\nhead -c 10485760 /dev/zero | tr '\\0' 'e' >&2",
    );
    t.output_limit = 64 * 1024;
    t.timeout_ms = 60_000;
    let start = Instant::now();
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    assert!(r.ok, "{:?}", r.error);
    assert!(r.truncated);
    let text = r.output.as_str().unwrap();
    assert!(
        text.ends_with("\n[output truncated at 65536 bytes]"),
        "{}",
        &text[text.len() - 60..]
    );
    assert_eq!(
        text.len(),
        65536 + "\n[output truncated at 65536 bytes]".len()
    );
    assert!(text.starts_with("aaaa"));
}

#[tokio::test]
async fn truncated_json_is_text() {
    let fx = Fixture::new();
    let mut t = fx.sh_tool(
        "bigjson",
        r#"printf '{"data": "%s"}' "$(head -c 5000 /dev/zero | tr '\0' 'z')""#,
    );
    t.output_limit = 100;
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(r.truncated);
    assert!(r.output.as_str().unwrap().starts_with("{\"data\": \"zzz"));
}

#[tokio::test]
async fn invalid_utf8_is_replaced_not_a_panic() {
    let fx = Fixture::new();
    let t = fx.sh_tool(
        "bytes",
        r"printf 'ok \377\376 end'; printf 'bad \377' >&2; exit 1",
    );
    let r = run_tool(&t, &json!({}), &fx.ctx, CancellationToken::new()).await;
    assert!(!r.ok);
    assert_eq!(r.output, json!("ok \u{FFFD}\u{FFFD} end"));
    assert!(r.error.unwrap().contains("bad \u{FFFD}"));
}
