//! Every example in `examples/` builds, and its scripted conversation (`conversation.json`) plays
//! through the real `eve run` with the mock model.
//!
//! `conversation.json`: `{prompt, script, expect_stdout?, expect_stderr?, env?, args?}`; `script` is
//! the mock provider's script (see docs/models.md).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const EVE: &str = env!("CARGO_BIN_EXE_eve");

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".eve" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn eve(dir: &Path, args: &[&str], env: &[(String, String)]) -> std::process::Output {
    let mut cmd = Command::new(EVE);
    cmd.args(args)
        .current_dir(dir)
        .env_remove("EVE_PROJECT")
        .env_remove("EVE_AGENT")
        .env_remove("EVE_BASE_URL")
        .env_remove("EVE_API_KEY")
        .env_remove("EVE_MOCK_SCRIPT")
        .env("EVE_MODEL", "mock/echo")
        .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_example_builds_and_plays_its_conversation() {
    let mut names: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("agent").is_dir())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no examples found");
    for example in names {
        let name = example.file_name().unwrap().to_string_lossy().into_owned();
        let conv_path = example.join("conversation.json");
        assert!(
            conv_path.is_file(),
            "examples/{name} has no conversation.json"
        );
        assert!(
            example.join("README.md").is_file(),
            "examples/{name} has no README.md"
        );
        let conv: Value =
            serde_json::from_str(&std::fs::read_to_string(&conv_path).unwrap()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(&name);
        copy_dir(&example, &dir);

        let dir_text = dir.to_string_lossy().into_owned();
        let mut env: Vec<(String, String)> = conv
            .get("env")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let value = v.as_str().unwrap_or_default().replace("{dir}", &dir_text);
                        (k.clone(), value)
                    })
                    .collect()
            })
            .unwrap_or_default();
        if strings(conv.get("needs")).iter().any(|n| n == "python-mcp") {
            let python = crate::support_dev::test_python();
            let bin = python.parent().unwrap().to_string_lossy().into_owned();
            let path = std::env::var("PATH").unwrap_or_default();
            env.push(("PATH".to_owned(), format!("{bin}:{path}")));
        }
        let build = eve(&dir, &["build"], &env);
        assert!(
            build.status.success(),
            "examples/{name}: eve build failed:\n{}",
            String::from_utf8_lossy(&build.stderr)
        );

        env.push(("EVE_MOCK_SCRIPT".to_owned(), conv["script"].to_string()));
        let prompt = conv["prompt"].as_str().unwrap().to_owned();
        let mut args = vec!["run".to_owned(), "--yes".to_owned()];
        args.extend(strings(conv.get("args")));
        args.push(prompt);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = eve(&dir, &args, &env);
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            run.status.success(),
            "examples/{name}: eve run failed:\n{stdout}\n{stderr}"
        );
        for want in strings(conv.get("expect_stdout")) {
            assert!(
                stdout.contains(&want),
                "examples/{name}: stdout lacks {want:?}:\n{stdout}"
            );
        }
        for want in strings(conv.get("expect_stderr")) {
            assert!(
                stderr.contains(&want),
                "examples/{name}: stderr lacks {want:?}:\n{stderr}"
            );
        }
    }
}
