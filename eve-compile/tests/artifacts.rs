//! Build artifacts: content-addressed, reproducible, complete, and free of secret values.

use std::path::Path;
use std::time::{Duration, SystemTime};

use eve_compile::build;

use crate::support::{OnDisk, TestAgent, set_executable};

const SCRIPT: &str = "#!/usr/bin/env python3\n# ---\n# description: Weather.\n# input:\n#   type: object\n#   properties:\n#     city: {type: string}\n# ---\nprint('sunny')\n";

fn agent() -> TestAgent {
    TestAgent::minimal()
        .file("agent.yaml", "model: mock/echo\n")
        .exec("tools/weather.py", SCRIPT)
        .file(
            "tools/search.yaml",
            "description: Search.\ninput:\n  type: object\nrun: [python3, _bin/search.py]\n",
        )
        .file("tools/_bin/search.py", "print('results')\n")
        .file(
            "skills/pdf/SKILL.md",
            "---\ndescription: PDFs.\n---\nUse the tools.\n",
        )
        .file("skills/pdf/reference/forms.md", "Form fields.\n")
        .file("sandbox/workspace/notes/todo.txt", "nothing yet\n")
        .file(
            "schedules/daily.md",
            "---\ncron: \"0 9 * * 1-5\"\n---\nSummarise.\n",
        )
}

/// Every file under `dir`, recursively, relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn touch_all(dir: &Path, when: SystemTime) {
    for f in files_under(dir) {
        let file = std::fs::File::options()
            .write(true)
            .open(dir.join(&f))
            .unwrap();
        file.set_modified(when).unwrap();
    }
}

fn hash(disk: &OnDisk) -> String {
    let built = disk.build();
    assert_eq!(
        built.output.error_count(),
        0,
        "{:?}",
        built.output.diagnostics
    );
    built.hash.unwrap()
}

#[test]
fn same_input_gives_the_same_hash() {
    let disk = agent().on_disk();
    let first = disk.build();
    let second = disk.build();
    assert_eq!(first.hash, second.hash);
    assert!(!first.reused);
    assert!(second.reused, "an unchanged folder reuses its build");

    // Modification times are not content.
    touch_all(
        disk.agent_dir(),
        SystemTime::now() + Duration::from_secs(3600),
    );
    assert_eq!(hash(&disk), first.hash.clone().unwrap());

    // Nor is where the project lives: the same folder elsewhere builds to the same hash.
    let elsewhere = agent().on_disk();
    assert_eq!(hash(&elsewhere), first.hash.unwrap());
}

#[test]
fn a_torn_build_is_written_again() {
    // Builds are not synced to the disk: a power cut can leave one torn (a file cut short or
    // zeroed). The next build of the same folder finds it and writes it whole again.
    let disk = agent().on_disk();
    let first = disk.build();
    let dir = first.dir.clone().unwrap();
    let manifest = std::fs::read(dir.join("manifest.json")).unwrap();
    let pack = std::fs::read(dir.join("files.pack")).unwrap();
    for (name, torn) in [
        ("manifest.json", manifest[..manifest.len() / 2].to_vec()),
        ("manifest.json", vec![0u8; manifest.len()]),
        ("files.pack", vec![0u8; pack.len()]),
        ("files.pack", Vec::new()),
    ] {
        std::fs::write(dir.join(name), &torn).unwrap();
        let again = disk.build();
        assert_eq!(again.hash, first.hash);
        assert!(!again.reused, "a torn {name} is not reused");
        assert_eq!(std::fs::read(dir.join("manifest.json")).unwrap(), manifest);
        assert_eq!(std::fs::read(dir.join("files.pack")).unwrap(), pack);
        assert!(disk.build().reused, "the build written again is reused");
    }
}

#[test]
fn a_changed_script_changes_the_hash() {
    let disk = agent().on_disk();
    let before = hash(&disk);

    // Only the body changes: the manifest stays the same, the file does not.
    std::fs::write(
        disk.path("tools/weather.py"),
        SCRIPT.replace("sunny", "rainy"),
    )
    .unwrap();
    let after_body = hash(&disk);
    assert_ne!(before, after_body);

    // The execute bit is part of what runs.
    set_executable(&disk.path("tools/weather.py"), false).unwrap();
    let after_mode = hash(&disk);
    assert_ne!(after_body, after_mode);

    // A packaged skill's sibling file is part of the build too.
    std::fs::write(
        disk.path("skills/pdf/reference/forms.md"),
        "Other fields.\n",
    )
    .unwrap();
    assert_ne!(after_mode, hash(&disk));

    // So is a `_`-prefixed helper that a `run:` tool calls.
    let after_asset = hash(&disk);
    std::fs::write(disk.path("tools/_bin/search.py"), "print('other')\n").unwrap();
    assert_ne!(after_asset, hash(&disk));
    std::fs::write(disk.path("tools/_bin/search.py"), "print('results')\n").unwrap();

    // Going back gives the old build again.
    std::fs::write(disk.path("skills/pdf/reference/forms.md"), "Form fields.\n").unwrap();
    set_executable(&disk.path("tools/weather.py"), true).unwrap();
    std::fs::write(disk.path("tools/weather.py"), SCRIPT).unwrap();
    let again = disk.build();
    assert_eq!(again.hash.unwrap(), before);
    assert!(again.reused);
}

#[test]
fn a_changed_schema_changes_the_hash_and_the_schema_hash() {
    let disk = agent().on_disk();
    let first = disk.build();
    std::fs::write(
        disk.path("tools/weather.py"),
        SCRIPT.replace("city: {type: string}", "city: {type: string, minLength: 1}"),
    )
    .unwrap();
    let second = disk.build();
    assert_ne!(first.hash, second.hash);
    let schema_hash = |b: &build::Built| {
        b.output
            .manifest
            .agent
            .tools
            .iter()
            .find(|t| t.name == "weather")
            .unwrap()
            .schema_hash
            .clone()
    };
    assert_ne!(schema_hash(&first), schema_hash(&second));
    // The other tool's schema hash does not move.
    let search = |b: &build::Built| {
        b.output
            .manifest
            .agent
            .tools
            .iter()
            .find(|t| t.name == "search")
            .unwrap()
            .schema_hash
            .clone()
    };
    assert_eq!(search(&first), search(&second));
}

#[test]
fn the_build_folder_holds_what_the_runtime_needs() {
    let disk = agent().on_disk();
    let built = disk.build();
    let dir = built.dir.clone().unwrap();
    let state = &disk.project.state_dir;
    let current = std::fs::read_link(state.join("current")).unwrap();
    assert_eq!(
        current,
        Path::new("builds").join(built.hash.as_deref().unwrap())
    );
    // The runtime files travel in one pack …
    assert_eq!(
        files_under(&dir),
        ["diagnostics.json", "files.pack", "manifest.json"]
    );
    // … and are unpacked on first use, once.
    let loaded = build::load_current(state).unwrap();
    assert_eq!(loaded.files().unwrap(), dir.join("files"));
    assert_eq!(loaded.files().unwrap(), dir.join("files"));
    assert_eq!(
        files_under(&dir),
        [
            "diagnostics.json",
            "files.pack",
            "files/sandbox/workspace/notes/todo.txt",
            "files/skills/pdf/reference/forms.md",
            "files/tools/_bin/search.py",
            "files/tools/weather.py",
            "manifest.json",
        ]
    );
    assert_eq!(
        std::fs::read(dir.join("files/tools/weather.py")).unwrap(),
        std::fs::read(disk.path("tools/weather.py")).unwrap()
    );
    // The copied script is still executable.
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(dir.join("files/tools/weather.py"))
            .unwrap()
            .permissions()
            .mode()
    };
    assert_ne!(mode & 0o111, 0, "scripts keep their execute bit");
    assert_eq!(loaded.hash, built.hash.unwrap());
    assert_eq!(loaded.manifest, built.output.manifest);
    let counts = build::counts(&loaded.manifest.agent);
    assert_eq!((counts.tools, counts.skills, counts.schedules), (2, 1, 1));
}

#[test]
fn secret_references_stay_references() {
    let disk = TestAgent::minimal()
        .file(
            "channels/slack.yaml",
            "kind: slack\nsigning_secret: ${SLACK_SIGNING_SECRET}\nbot_token: ${SLACK_BOT_TOKEN}\n",
        )
        .file(
            "channels/eve.yaml",
            "auth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\"]\n",
        )
        .file(
            "connections/github.yaml",
            "command: github-mcp\nenv:\n  GITHUB_TOKEN: ${GITHUB_TOKEN}\n",
        )
        .file(
            "tools/issues.yaml",
            "description: Issues.\ninput:\n  type: object\nhttp:\n  method: GET\n  url: https://api.example.com/issues\n  headers:\n    Authorization: Bearer ${ISSUES_TOKEN}\n",
        )
        .on_disk();
    let built = disk.build();
    assert_eq!(
        built.output.error_count(),
        0,
        "{:?}",
        built.output.diagnostics
    );
    let manifest = std::fs::read_to_string(built.dir.unwrap().join("manifest.json")).unwrap();
    for reference in [
        "${SLACK_SIGNING_SECRET}",
        "${SLACK_BOT_TOKEN}",
        "${EVE_API_TOKEN}",
        "${GITHUB_TOKEN}",
        "Bearer ${ISSUES_TOKEN}",
    ] {
        assert!(
            manifest.contains(reference),
            "{reference} is not kept as a reference in manifest.json"
        );
    }
}

#[test]
fn a_secret_written_in_a_channel_fails_the_build_and_is_not_written() {
    let disk = TestAgent::minimal()
        .file(
            "channels/slack.yaml",
            "kind: slack\nsigning_secret: ${SLACK_SIGNING_SECRET}\nbot_token: xoxb-literal-token-value\n",
        )
        .on_disk();
    let built = disk.build();
    assert!(built.output.error_count() > 0);
    assert!(built.hash.is_none());
    assert!(!disk.project.builds_dir().exists());
    let manifest = build::to_json(&built.output.manifest);
    assert!(!manifest.contains("xoxb-literal-token-value"));
}

/// Unpacking a rebuild after one edit shares the unchanged files with the build unpacked before
/// (hard links) and writes only the changed one; no build file is ever linked to the agent
/// folder's own file.
#[test]
fn a_rebuild_shares_unchanged_files_with_the_previous_build() {
    use std::os::unix::fs::MetadataExt;
    let disk = agent().on_disk();
    let first = disk.build().dir.unwrap();
    eve_compile::pack::unpack(&first).unwrap();
    std::fs::write(
        disk.path("tools/weather.py"),
        SCRIPT.replace("sunny", "rainy"),
    )
    .unwrap();
    let second = disk.build().dir.unwrap();
    assert_ne!(first, second);
    eve_compile::pack::unpack(&second).unwrap();
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    for rel in [
        "skills/pdf/reference/forms.md",
        "sandbox/workspace/notes/todo.txt",
        "tools/_bin/search.py",
    ] {
        let (a, b) = (
            first.join("files").join(rel),
            second.join("files").join(rel),
        );
        assert_eq!(ino(&a), ino(&b), "{rel} is not shared");
        assert_ne!(
            ino(&b),
            ino(&disk.path(rel)),
            "{rel} is linked to the agent folder"
        );
    }
    let (a, b) = (
        first.join("files/tools/weather.py"),
        second.join("files/tools/weather.py"),
    );
    assert_ne!(ino(&a), ino(&b));
    assert!(
        std::fs::read_to_string(&a).unwrap().contains("sunny"),
        "the old build changed"
    );
    assert!(std::fs::read_to_string(&b).unwrap().contains("rainy"));
    // Editing the agent folder afterwards changes no build.
    std::fs::write(disk.path("skills/pdf/reference/forms.md"), "Edited.\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(second.join("files/skills/pdf/reference/forms.md")).unwrap(),
        "Form fields.\n"
    );
}

/// Many callers at once unpack a build once; a damaged pack is a clear error, never a panic.
#[test]
fn unpacking_races_and_damage() {
    let disk = agent().on_disk();
    let dir = disk.build().dir.unwrap();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| eve_compile::pack::unpack(&dir)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        assert_eq!(r.unwrap(), dir.join("files"));
    }
    assert_eq!(
        std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.'))
            .count(),
        0,
        "no staging folder is left behind"
    );

    std::fs::remove_dir_all(dir.join("files")).unwrap();
    let pack = dir.join("files.pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&pack, bytes).unwrap();
    let err = eve_compile::pack::unpack(&dir).unwrap_err().to_string();
    assert!(err.contains("files.pack is damaged"), "{err}");
    assert!(err.contains("eve build"), "{err}");
    assert!(!dir.join("files").exists());
}
