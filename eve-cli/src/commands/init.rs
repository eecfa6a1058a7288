//! `eve init`: scaffold a working agent project from a template embedded in the binary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use include_dir::{Dir, include_dir};

use crate::cli::InitArgs;
use crate::render::{paint, stderr_color};
use crate::sanitize::{errln, outln};

static TEMPLATES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../templates");

/// Template names with their one-line descriptions (the first line of each template's README).
fn templates() -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = TEMPLATES
        .dirs()
        .filter_map(|d| {
            let name = d.path().file_name()?.to_str()?;
            let about = d
                .get_file(d.path().join("TEMPLATE.md"))
                .and_then(|f| f.contents_utf8())
                .and_then(|t| t.lines().next())
                .unwrap_or("")
                .to_owned();
            Some((name, about))
        })
        .collect();
    out.sort();
    out
}

pub fn run(args: InitArgs, base: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    if args.list {
        if args.json {
            let all: Vec<serde_json::Value> = templates()
                .into_iter()
                .map(|(name, about)| serde_json::json!({"name": name, "description": about}))
                .collect();
            outln!("{}", crate::sanitize::json_pretty(&all));
            return Ok(ExitCode::SUCCESS);
        }
        for (name, about) in templates() {
            outln!("{name:<12} {about}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(id) = &args.model {
        // Checked before anything is written.
        super::set::check_model_id(id)?;
    }
    let Some(template) = TEMPLATES.get_dir(&args.template) else {
        let names: Vec<&str> = templates().into_iter().map(|(n, _)| n).collect();
        anyhow::bail!(
            "unknown template `{}`; available: {}",
            args.template,
            names.join(", ")
        );
    };
    let here = std::env::current_dir()?;
    let base = base.map_or_else(|| here.clone(), |b| here.join(b));
    let dir = match &args.dir {
        Some(d) => base.join(d),
        None => base,
    };
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!("{} exists and is not a folder", dir.display());
    }
    let non_empty = dir.is_dir() && std::fs::read_dir(&dir)?.next().is_some();
    if non_empty && !args.force {
        anyhow::bail!(
            "{} is not empty; choose a new folder (`eve init my-agent`) or pass --force to add the template's files (existing files are kept)",
            dir.display()
        );
    }
    let name = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.clone())
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("my-agent")
        .to_owned();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = 0usize;
    let mut kept = Vec::new();
    write_dir(
        template,
        template.path(),
        &dir,
        &name,
        &mut written,
        &mut kept,
    )?;
    if args.model.is_some() || args.reasoning.is_some() {
        let config = dir.join("agent").join("agent.yaml");
        super::set::edit_file(&config, args.model.as_deref(), args.reasoning.as_deref())
            .with_context(|| format!("cannot set the model in {}", config.display()))?;
    }
    let color = stderr_color();
    for k in &kept {
        errln!("  kept existing {}", k.display());
    }
    errln!(
        "{} {} from template `{}` ({written} files)",
        paint(color, "1;32", "Created"),
        dir.display(),
        args.template
    );
    // The folder to `cd` into from where the user is (`-C` may have put it elsewhere).
    let shown = (dir != here).then(|| {
        dir.strip_prefix(&here)
            .unwrap_or(&dir)
            .display()
            .to_string()
    });
    errln!("\nNext:");
    if let Some(d) = shown {
        errln!("  cd {d}");
    }
    errln!("  eve build");
    errln!("  eve run \"hello\"");
    Ok(ExitCode::SUCCESS)
}

fn write_dir(
    dir: &Dir<'_>,
    base: &Path,
    target: &Path,
    name: &str,
    written: &mut usize,
    kept: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    for file in dir.files() {
        let rel = file.path().strip_prefix(base).unwrap_or(file.path());
        if rel == Path::new("TEMPLATE.md") {
            continue;
        }
        // Dotfiles cannot travel inside the template folder unaltered; `gitignore` becomes `.gitignore`.
        let rel = if rel == Path::new("gitignore") {
            PathBuf::from(".gitignore")
        } else {
            rel.to_path_buf()
        };
        let dest = target.join(&rel);
        if dest.exists() {
            kept.push(rel);
            continue;
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let contents = match file.contents_utf8() {
            Some(text) => text.replace("{{name}}", name).into_bytes(),
            None => file.contents().to_vec(),
        };
        std::fs::write(&dest, &contents)
            .with_context(|| format!("cannot write {}", dest.display()))?;
        if contents.starts_with(b"#!") {
            make_executable(&dest)?;
        }
        *written += 1;
    }
    for sub in dir.dirs() {
        write_dir(sub, base, target, name, written, kept)?;
    }
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> anyhow::Result<()> {
    Ok(())
}
