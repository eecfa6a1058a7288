//! Resolving the project from command-line flags, once per command.

use eve_compile::Project;

use crate::cli::ProjectArgs;

/// Locates the project named by `--project`/`--agent` (or the current folder).
pub fn locate(args: &ProjectArgs) -> anyhow::Result<Project> {
    Ok(Project::locate(
        args.project.as_deref(),
        args.agent.as_deref(),
    )?)
}

/// Reads a file by the path diagnostics show (relative to the project root).
pub fn source_reader(project: &Project) -> impl Fn(&str) -> Option<String> + '_ {
    move |file: &str| std::fs::read_to_string(project.root.join(file)).ok()
}
