//! The runtime's own file actions against symlinks a tool plants in the workspace.
//!
//! `read_file`, `write_file`, `glob`, `grep`, workspace checkpoints and restores, and handing the
//! workspace to the sandbox user run in eve's process, as root here. A tool of the same session can change the
//! workspace while they run. Each attack is run against the runtime and against a twin that
//! shows it lands where the protection is off: a naive resolver kept only here (check a path,
//! then open it, as the file tools once did), a walk by path (`EVE_TEST_UNSAFE_WALK`), or a plain
//! open of the planted path.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use eve_compile::Provider;
use eve_runtime::engine::{
    BreakerPolicy, FixedModelProvider, ResolvedModel, Runtime, RuntimeConfig,
};
use eve_runtime::env_vars::{EVE_TEST_NO_OPENAT2, EVE_TEST_UNSAFE_WALK};
use eve_runtime::model::mock::{MockClient, load_script};
use eve_runtime::store::{SqliteStore, Store, WorkspaceEntry, WorkspacePut};
use eve_runtime::tools::run_builtin;
use serde_json::{Value, json};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

use crate::engine_support::{TestProject, agent, run_prompt};
use crate::tools::Fixture;

const SECRET: &str = "OUTSIDE-SECRET";
/// A deep path: the longer a check takes, the wider the gap a check-then-open leaves.
const DEEP: &str = "d1/d2/d3/d4/d5/d6";
/// Rounds each race runs at least, and the time it may take to see the naive twin win (a loaded
/// machine rarely runs the swapping thread and the caller at once).
const ATTEMPTS: usize = 2000;
const RACE_LIMIT: Duration = Duration::from_secs(15);
/// Time the hand-over race runs at most.
const BUDGET: Duration = Duration::from_secs(3);

/// Swaps two paths with `renameat2(RENAME_EXCHANGE)` until stopped: `sub` is by turns a real
/// folder of the workspace and a symlink to a folder outside it. Returns the number of swaps.
fn flipper(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &a,
                rustix::fs::CWD,
                &b,
                rustix::fs::RenameFlags::EXCHANGE,
            )
            .unwrap();
            swaps += 1;
        }
        swaps
    })
}

/// A workspace whose `sub/DEEP/secret.txt` is harmless, with `alt` a symlink to a folder outside
/// whose `DEEP/secret.txt` holds [`SECRET`] (root's only).
fn racing_layout(fx: &Fixture) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let outside = fx.dir.path().join("outside");
    std::fs::create_dir_all(outside.join(DEEP)).unwrap();
    let secret = outside.join(DEEP).join("secret.txt");
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(fx.ws_file("sub").join(DEEP)).unwrap();
    std::fs::write(fx.ws_file("sub").join(DEEP).join("secret.txt"), "inside").unwrap();
    std::os::unix::fs::symlink(&outside, fx.ws_file("alt")).unwrap();
    outside
}

/// Files named `w-*` anywhere under `dir`.
fn written_under(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if entry.file_name().to_string_lossy().starts_with("w-") {
                n += 1;
            }
        }
    }
    n
}

/// The file tools' resolution before this protection: each component checked (a symlink must
/// resolve inside), then the path handed back to be opened by name.
fn naive_resolve(workspace: &Path, path: &str) -> Option<PathBuf> {
    let root = workspace.canonicalize().ok()?;
    let mut current = root.clone();
    for component in Path::new(path).components() {
        let Component::Normal(part) = component else {
            return None;
        };
        current.push(part);
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => match current.canonicalize() {
                Ok(target) if target.starts_with(&root) => {}
                _ => return None,
            },
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Some(root.join(path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_swapped_for_a_symlink_mid_call_is_never_followed() {
    let fx = Fixture::new();
    let outside = racing_layout(&fx);
    let target = format!("sub/{DEEP}/secret.txt");
    let stop = Arc::new(AtomicBool::new(false));
    let flips = flipper(fx.ws_file("sub"), fx.ws_file("alt"), stop.clone());

    // Turn by turn, under the same swaps: the runtime's own read_file and write_file, then the
    // naive resolver (check, then open by name). Until the naive one has won both races and
    // [`ATTEMPTS`] rounds ran, or the time is up.
    let (mut rounds, mut secret_reads, mut inside_reads, mut refused) = (0, 0, 0, 0);
    let (mut naive_secret, mut naive_writes) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < RACE_LIMIT
        && (rounds < ATTEMPTS || naive_secret == 0 || naive_writes == 0)
    {
        let cancel = CancellationToken::new;
        let r = run_builtin("read_file", &json!({"path": target}), &fx.ctx, cancel()).await;
        let text = r.output.as_str().unwrap_or_default().to_owned();
        if text.contains(SECRET) {
            secret_reads += 1;
        } else if r.ok {
            inside_reads += 1;
        } else {
            refused += 1;
        }
        let path = format!("sub/{DEEP}/w-{rounds}.txt");
        let _ = run_builtin(
            "write_file",
            &json!({"path": path, "content": "x"}),
            &fx.ctx,
            cancel(),
        )
        .await;

        if let Some(path) = naive_resolve(fx.workspace(), &target)
            && std::fs::read_to_string(&path).is_ok_and(|t| t.contains(SECRET))
        {
            naive_secret += 1;
        }
        let naive = format!("sub/{DEEP}/n-{rounds}.txt");
        if let Some(path) = naive_resolve(fx.workspace(), &naive)
            && std::fs::write(path, "x").is_ok()
            && outside.join(DEEP).join(format!("n-{rounds}.txt")).exists()
        {
            naive_writes += 1;
        }
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = flips.join().unwrap();
    let runtime_writes_outside = written_under(&outside);
    eprintln!(
        "read_file/write_file race: {rounds} rounds ({swaps} swaps, {:?}): the runtime read the \
         secret {secret_reads} times (the inside file {inside_reads}, refused {refused}) and \
         wrote {runtime_writes_outside} files outside; the naive resolver read it {naive_secret} \
         times and wrote {naive_writes} files outside",
        start.elapsed()
    );
    assert_eq!(secret_reads, 0, "read_file followed the swapped symlink");
    assert_eq!(runtime_writes_outside, 0, "write_file wrote outside");
    assert!(
        inside_reads > 0,
        "the race never let the honest read through"
    );
    assert!(
        naive_secret > 0 && naive_writes > 0,
        "the naive resolver did not win both races in {rounds} rounds: the race is not real here \
         (read {naive_secret}, wrote {naive_writes})"
    );
}

/// `eve_sandbox`'s hand-over of the workspace to the sandbox user, before this protection: a
/// path walked by name.
fn naive_chown_tree(path: &Path, id: u32) {
    let _ = std::os::unix::fs::lchown(path, Some(id), Some(id));
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for entry in entries.flatten() {
            naive_chown_tree(&entry.path(), id);
        }
    }
}

#[test]
fn handing_the_workspace_to_the_sandbox_user_never_follows_a_swapped_symlink() {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the hand-over to the sandbox user happens only when eve is root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    for i in 0..40 {
        // Same names inside and out: a name walked through the swapped folder lands outside.
        std::fs::write(ws.join("sub").join(format!("f{i}")), "inside").unwrap();
        std::fs::write(outside.join(format!("f{i}")), "root's").unwrap();
    }
    std::os::unix::fs::symlink(&outside, ws.join("alt")).unwrap();
    let handed = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().metadata().unwrap().uid() != 0)
            .count()
    };
    let policy = eve_sandbox::isolate::Policy::default();
    let stop = Arc::new(AtomicBool::new(false));
    let flips = flipper(ws.join("sub"), ws.join("alt"), stop.clone());
    let (mut attempts, start) = (0, Instant::now());
    while attempts < ATTEMPTS / 4 && start.elapsed() < BUDGET {
        eve_sandbox::isolate::prepare_writable(&ws, &policy).unwrap();
        attempts += 1;
    }
    let runtime_handed = handed(&outside);
    let mut naive_tries = 0;
    while naive_tries < attempts {
        naive_chown_tree(&ws, eve_sandbox::isolate::DEFAULT_UID);
        naive_tries += 1;
        if handed(&outside) > 0 && naive_tries > 10 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = flips.join().unwrap();
    let naive_handed = handed(&outside);
    eprintln!(
        "chown race: {attempts} hand-overs ({swaps} swaps): {runtime_handed} files outside handed \
         to the sandbox user; the naive walk handed {naive_handed} in {naive_tries} tries"
    );
    assert_eq!(
        runtime_handed, 0,
        "the hand-over followed the swapped symlink"
    );
    assert!(
        naive_handed > 0,
        "the naive walk never won in {naive_tries} tries: the race is not real here"
    );
}

/// What the model was shown for each call of a session's turn `turn`, with the tool's name and
/// input path.
async fn outputs(rt: &Runtime, id: &str, turn: u64) -> Vec<(String, String, bool)> {
    rt.store()
        .tool_calls(id, turn)
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            let text = match &c.output {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let path = c.input["path"].as_str().unwrap_or("").to_owned();
            (format!("{} {path}", c.name), text, c.is_error)
        })
        .collect()
}

fn ws_of(p: &TestProject, id: &str) -> PathBuf {
    p.state_dir.join("sandboxes").join(id)
}

/// Files under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                let rel = entry
                    .path()
                    .strip_prefix(dir)
                    .unwrap()
                    .display()
                    .to_string();
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn planted_symlinks_are_refused_by_the_file_tools_checkpoints_and_restores() {
    use std::os::unix::fs::PermissionsExt;
    let p = TestProject::new();
    let root = p.state_dir.parent().unwrap().to_path_buf();
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::set_permissions(
        outside.join("secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let out = outside.display().to_string();
    // Planted from inside the box, by the model's own bash (the workspace is at
    // `<root>/.eve/sandboxes/<session>`: `../../..` is `<root>`).
    let plant = format!(
        "mkdir -p real/deep a && echo inside > real/deep/f.txt && ln -s '{out}' link && \
         ln -s '{out}/secret.txt' file-link && ln -s '{out}' a/b && \
         ln -s '{out}/new.txt' dangling && ln -s ../../.. up && ln -s real rel && \
         ln -s /proc/self/root magic && (ln '{out}/secret.txt' hard 2>/dev/null; true) && \
         (ln /etc/passwd hard-etc 2>/dev/null; true) && \
         echo planted"
    );
    let read = |path: &str| json!({"name": "read_file", "input": {"path": path}});
    let write = |path: &str| json!({"name": "write_file", "input": {"path": path, "content": "x"}});
    let mut a = agent();
    a.config.default_tools = true;
    a.sandbox.provider = Provider::Isolated;
    p.write_build(&a, &[]);
    // The mock plays the step whose index is the number of answers in its history: the second
    // runtime below plays on from the third.
    let script = json!([
        {"tool_calls": [{"name": "bash", "input": {"command": plant}}]},
        {"tool_calls": [
            read("link/secret.txt"), read("file-link"), read("a/b/secret.txt"),
            read("up/outside/secret.txt"), read("magic/etc/hostname"), read("hard"),
            read("hard-etc"),
            read("../../../outside/secret.txt"), read(&format!("{out}/secret.txt")),
            read("rel/deep/f.txt"),
            write("link/new.txt"), write("dangling"), write("a/b/new.txt"),
            write("up/outside/new.txt"), write("rel/deep/w.txt")
        ]},
        {"text": "done"},
        {"tool_calls": [read("link/restored.txt")]},
        {"text": "done"}
    ]);
    let rt = p.runtime(script.clone());
    let (id, _) = run_prompt(&rt, "go").await;
    let ws = ws_of(&p, &id);
    let seen = outputs(&rt, &id, 0).await;
    assert!(seen[0].1.contains("planted"), "{seen:?}");
    for (call, text, is_error) in &seen[1..] {
        let fine = call.contains(" rel/");
        if fine {
            assert!(!is_error, "{call}: {text}");
        } else {
            assert!(is_error, "{call} went through: {text}");
            assert!(!text.contains(SECRET), "{call} read the secret");
            // A box cannot link a file of another mount into its workspace.
            let why = if call.ends_with(" hard") || call.ends_with(" hard-etc") {
                "could not read"
            } else if call.contains(&out) {
                "absolute path"
            } else {
                "outside the workspace"
            };
            assert!(text.contains(why), "{call}: {text}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("real/deep/w.txt")).unwrap(),
        "x",
        "a relative symlink that stays inside is followed"
    );
    assert_eq!(
        files_under(&outside),
        ["secret.txt"],
        "nothing written outside"
    );
    {
        use std::os::unix::fs::MetadataExt;
        let owner = ws.metadata().unwrap().uid();
        assert_eq!(
            ws.join("real/deep/w.txt").metadata().unwrap().uid(),
            owner,
            "what write_file creates belongs to the workspace's owner, not to eve's root"
        );
    }
    // The twin: the planted links do lead to the secret for whoever follows them.
    for planted in [
        "link/secret.txt",
        "file-link",
        "a/b/secret.txt",
        "up/outside/secret.txt",
    ] {
        assert_eq!(
            std::fs::read_to_string(ws.join(planted)).unwrap(),
            SECRET,
            "{planted}"
        );
    }

    // The checkpoint holds the workspace's own files, nothing reached through a link.
    let checkpoint = rt.store().workspace(&id).await.unwrap().unwrap();
    let paths: Vec<&str> = checkpoint.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["real/deep/f.txt", "real/deep/w.txt"], "{paths:?}");
    for entry in &checkpoint.entries {
        let blob = rt
            .store()
            .blob(&entry.hash)
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(!String::from_utf8_lossy(&blob).contains(SECRET));
    }

    // A newer checkpoint (another node's) names files where this copy has links out: the
    // restore writes them into the workspace, never through the links.
    let restored = b"RESTORED".to_vec();
    let hash = hex::encode(sha2::Sha256::digest(&restored));
    let entry = |path: &str| WorkspaceEntry {
        path: path.to_owned(),
        hash: hash.clone(),
        size: restored.len() as u64,
        mode: 0o4755,
    };
    rt.store()
        .put_workspace(WorkspacePut {
            session_id: id.clone(),
            entries: vec![
                entry("a/b/restored.txt"),
                entry("link/restored.txt"),
                entry("up/outside/restored.txt"),
            ],
            dirs: Vec::new(),
            blobs: vec![(hash.clone(), restored.clone())],
            fence: None,
        })
        .await
        .unwrap();
    drop(rt);
    let rt = p.runtime(script);
    rt.post_message(&id, "again").await.unwrap();
    rt.drive(&id).await.unwrap();
    let seen = outputs(&rt, &id, 1).await;
    let events: Vec<String> = rt
        .events(&id, 0, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| format!("{} {}", e.kind, e.data))
        .collect();
    let last = seen.last().unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(last.1, "RESTORED", "{last:?}");
    assert_eq!(
        files_under(&outside),
        ["secret.txt"],
        "the restore wrote outside"
    );
    assert!(ws.join("link").symlink_metadata().unwrap().is_dir());
    let mode = ws
        .join("link/restored.txt")
        .metadata()
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7000, 0, "no set-id bit is restored: {mode:o}");
}

/// A runtime on `p` whose tools see `extra` in their environment.
fn runtime_with_env(p: &TestProject, steps: Value, extra: &'static [(&str, &str)]) -> Runtime {
    let steps = load_script(&steps.to_string()).unwrap();
    let model = ResolvedModel {
        client: Arc::new(MockClient::from_steps(steps)),
        model: "script".to_owned(),
        model_id: "mock/script".to_owned(),
        context_window: None,
        price_per_million: None,
    };
    let store = SqliteStore::open(p.state_dir.join("eve.db")).unwrap();
    Runtime::new(RuntimeConfig {
        state_dir: p.state_dir.clone(),
        store: Arc::new(store) as Arc<dyn Store>,
        models: Arc::new(FixedModelProvider(model)),
        env: Arc::new(move |name: &str| {
            extra
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
                .or_else(|| std::env::var(name).ok())
        }),
        autostart: false,
        lease_ttl: Duration::from_secs(15),
        breaker: BreakerPolicy::default(),
        sandbox_helper: PathBuf::from(env!("CARGO_BIN_EXE_eve-runtime-sandbox")),
        secrets: Default::default(),
        isolated_roots: false,
    })
}

#[tokio::test]
async fn without_openat2_the_file_tools_refuse_and_the_start_report_says_why() {
    for missing in [true, false] {
        let p = TestProject::new();
        let mut a = agent();
        a.config.default_tools = true;
        p.write_build(&a, &[]);
        let env: &'static [(&str, &str)] = if missing {
            &[(EVE_TEST_NO_OPENAT2, "1")]
        } else {
            &[]
        };
        let rt = runtime_with_env(
            &p,
            json!([
                {"tool_calls": [
                    {"name": "write_file", "input": {"path": "a.txt", "content": "hello"}}
                ]},
                {"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
                {"text": "done"}
            ]),
            env,
        );
        let report = rt.sandbox_report().await.unwrap();
        let (id, _) = run_prompt(&rt, "go").await;
        let seen = outputs(&rt, &id, 0).await;
        let written = ws_of(&p, &id).join("a.txt").exists();
        if missing {
            let error = report.file_tools_error.expect("the start report names it");
            assert!(
                error.contains("openat2") && error.contains("5.6"),
                "{error}"
            );
            for (call, text, is_error) in &seen {
                assert!(is_error, "{call} ran without openat2: {text}");
                assert!(
                    text.contains("cannot run on this machine") && text.contains("Linux 5.6"),
                    "{call}: {text}"
                );
            }
            assert!(!written);
        } else {
            assert_eq!(report.file_tools_error, None);
            assert!(seen.iter().all(|(_, _, e)| !e), "{seen:?}");
            assert!(written);
        }
    }
}

/// `glob` and `grep` over `fx`'s whole workspace: what they listed and found, joined.
async fn search_all(fx: &Fixture) -> String {
    let mut seen = String::new();
    for (tool, input) in [
        ("grep", json!({"pattern": SECRET, "limit": 1000})),
        ("glob", json!({"pattern": "**/*", "limit": 1000})),
    ] {
        let r = run_builtin(tool, &input, &fx.ctx, CancellationToken::new()).await;
        seen.push_str(r.output["content"].as_str().unwrap_or_default());
        seen.push('\n');
    }
    seen
}

#[tokio::test]
async fn glob_and_grep_never_follow_planted_symlinks() {
    let fx = Fixture::new();
    let outside = fx.dir.path().join("outside");
    std::fs::create_dir_all(outside.join("nested")).unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::write(outside.join("nested/only-outside.txt"), SECRET).unwrap();
    std::fs::create_dir_all(fx.ws_file("real")).unwrap();
    std::fs::write(fx.ws_file("real/ok.txt"), "inside\n").unwrap();
    let ws = fx.workspace();
    for (link, target) in [
        ("dir-link", outside.clone()),
        ("file-link.txt", outside.join("secret.txt")),
        ("real/up", PathBuf::from("../..")),
        ("real/abs", PathBuf::from("/")),
        ("real/proc", PathBuf::from("/proc/self/root")),
    ] {
        std::os::unix::fs::symlink(&target, ws.join(link)).unwrap();
    }
    // A `.gitignore` that is a symlink to a file outside is not read either.
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join(".gitignore")).unwrap();

    let seen = search_all(&fx).await;
    assert!(!seen.contains(SECRET), "{seen}");
    assert!(!seen.contains("only-outside"), "{seen}");
    assert!(seen.contains("real/ok.txt"), "{seen}");
    // A symlink given as the path is refused, not followed.
    for path in ["dir-link", "real/up", "real/abs/etc"] {
        let r = run_builtin(
            "grep",
            &json!({"pattern": SECRET, "path": path}),
            &fx.ctx,
            CancellationToken::new(),
        )
        .await;
        assert!(!r.ok && r.input_refused, "{path}: {r:?}");
    }
    // The twin: a walk that follows symlinks (ripgrep's `-L`) finds the secret in this workspace.
    let followed = std::process::Command::new(crate::tools::search::rg())
        .current_dir(ws)
        .args([
            "--no-config",
            "-L",
            "--hidden",
            "-l",
            SECRET,
            "dir-link",
            "file-link.txt",
        ])
        .output()
        .unwrap();
    let followed = String::from_utf8_lossy(&followed.stdout);
    assert!(followed.contains("only-outside.txt"), "{followed}");
    assert!(followed.contains("file-link.txt"), "{followed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_and_grep_are_never_steered_out_by_a_folder_swapped_mid_walk() {
    let fx = Fixture::new();
    let naive = Fixture::with_env(&[(EVE_TEST_UNSAFE_WALK, "1")]);
    for f in [&fx, &naive] {
        let outside = racing_layout(f);
        std::fs::write(outside.join(DEEP).join("only-outside.txt"), "x").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flips = flipper(fx.ws_file("sub"), fx.ws_file("alt"), stop.clone());
    let naive_flips = flipper(naive.ws_file("sub"), naive.ws_file("alt"), stop.clone());

    // Turn by turn under the same swaps: the runtime's walk, then the naive one (by path), until
    // the naive one was steered out and [`ATTEMPTS`] / 10 rounds ran, or the time is up.
    let (mut rounds, mut escaped, mut inside, mut naive_escaped) = (0, 0, 0, 0);
    let start = Instant::now();
    while start.elapsed() < RACE_LIMIT && (rounds < ATTEMPTS / 10 || naive_escaped == 0) {
        let seen = search_all(&fx).await;
        if seen.contains(SECRET) || seen.contains("only-outside") {
            escaped += 1;
        } else if seen.contains("secret.txt") {
            inside += 1;
        }
        let seen = search_all(&naive).await;
        if seen.contains(SECRET) || seen.contains("only-outside") {
            naive_escaped += 1;
        }
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = flips.join().unwrap() + naive_flips.join().unwrap();
    eprintln!(
        "glob/grep race: {rounds} rounds of both tools ({swaps} swaps, {:?}): the runtime's walk \
         reached outside {escaped} times (saw the inside file {inside}); the walk by path {naive_escaped} times",
        start.elapsed()
    );
    assert_eq!(escaped, 0, "glob/grep followed a swapped symlink");
    assert!(inside > 0, "the race never let the honest walk through");
    assert!(
        naive_escaped > 0,
        "the walk by path was never steered out in {rounds} rounds: the race is not real here"
    );
}
