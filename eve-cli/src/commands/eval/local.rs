//! Running the cases in this process: one runtime and one private store for the whole suite, a
//! fresh session per case, against the current build.
//!
//! The suite's state folder is a temporary folder with `builds/` pointing at the project's builds
//! and `current` naming the build the suite started on; its store holds every case's sessions,
//! and nothing of the project's. Opening one store and one runtime for the suite (instead of one
//! per case) is what makes a mock suite fast: the cost of a case is its turns, not creating a
//! database. Cases stay apart:
//! - each case runs in a new session, so its messages, events and workspace
//!   (`sandboxes/<session>`) are its own;
//! - the runtime keeps what sessions otherwise share (notes of the `agent` and `user` memory
//!   scopes, per-agent breakers) per root session ([`RuntimeConfig::isolated_roots`]), so no
//!   case sees another's notes;
//! - a case's `mock` script and `model` are its own: [`CaseModels`] resolves models by the
//!   session tree a turn runs in, through the process environment with `EVE_MODEL` and
//!   `EVE_MOCK_SCRIPT` set from the case.
//!
//! The temporary folder is the system's (`TMPDIR`): the isolated sandbox must be able to enter
//! the session workspaces in it, which rules out `/dev/shm` (the sandbox mounts its own `/dev`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use eve_compile::evals::{CommandExpect, EvalCase, Failure, Turn};
use eve_compile::{Agent, Project};
use eve_runtime::engine::{
    Accept, BuildStore, DriveOutcome, Extra, ModelProvider, ResolvedModel, Runtime, RuntimeConfig,
    SessionRef, SettingsModelProvider,
};
use eve_runtime::env_vars::{EVE_MOCK_SCRIPT, EVE_MODEL, HOME, LANG, PATH};
use eve_runtime::exec::{Executor, Launch};
use eve_runtime::features::turn_input::TurnInput;
use eve_runtime::model::ModelError;
use eve_runtime::tools::{EnvLookup, process_env};

use super::Run;

/// Models by session tree: each case's root session resolves through the case's environment;
/// anything else through the process's.
struct CaseModels {
    default: SettingsModelProvider,
    cases: Mutex<HashMap<String, Arc<SettingsModelProvider>>>,
}

impl CaseModels {
    fn provider(&self, root: &str) -> Option<Arc<SettingsModelProvider>> {
        self.cases.lock().ok()?.get(root).cloned()
    }
}

impl ModelProvider for CaseModels {
    fn resolve(&self, agent: &Agent) -> Result<ResolvedModel, ModelError> {
        self.default.resolve(agent)
    }

    fn resolve_in(&self, agent: &Agent, root: &str) -> Result<ResolvedModel, ModelError> {
        match self.provider(root) {
            Some(p) => p.resolve(agent),
            None => self.default.resolve(agent),
        }
    }
}

/// A case's models, registered for its session until the case is done (also when its deadline
/// drops the run).
struct Registered<'a> {
    models: &'a CaseModels,
    session: String,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Ok(mut cases) = self.models.cases.lock() {
            cases.remove(&self.session);
        }
    }
}

/// The in-process runner.
pub(crate) struct Local {
    agent: Agent,
    /// The suite's state folder (inside `_tmp`).
    dir: PathBuf,
    models: Arc<CaseModels>,
    rt: Runtime,
    _tmp: tempfile::TempDir,
}

impl Local {
    /// Prepares the runner for the current build of `project`: checks the model of every case
    /// that has no mock script, and opens the suite's store.
    pub fn new(project: &Project, cases: &[EvalCase]) -> anyhow::Result<Self> {
        Self::for_build(project, cases, None)
    }

    /// [`Local::new`] for build `hash` (a release candidate) instead of the current build.
    pub fn for_build(
        project: &Project,
        cases: &[EvalCase],
        hash: Option<&str>,
    ) -> anyhow::Result<Self> {
        let store = BuildStore::new(&project.state_dir);
        let hash = match hash {
            Some(h) => h.to_owned(),
            None => store.current_hash()?,
        };
        let build = store.get(&hash)?;
        // Unpacked once here, so parallel cases never race to unpack the same build.
        build.files()?;
        let agent = build.manifest.agent.clone();
        for case in cases {
            let provider = SettingsModelProvider::new(case_env(case));
            check_agent(&provider, &agent).with_context(|| {
                format!(
                    "case `{}` ({}:{}) cannot run",
                    case.id, case.file, case.line
                )
            })?;
        }
        let builds = std::path::absolute(project.builds_dir())?;
        let tmp = tempfile::Builder::new()
            .prefix("eve-eval-")
            .tempdir()
            .context("cannot create a temporary folder for the eval store")?;
        let dir = tmp.path().join("state");
        std::fs::create_dir_all(&dir)?;
        std::os::unix::fs::symlink(&builds, dir.join("builds"))?;
        std::fs::write(dir.join("current"), &hash)?;
        let models = Arc::new(CaseModels {
            default: SettingsModelProvider::new(process_env()),
            cases: Mutex::new(HashMap::new()),
        });
        let mut config = RuntimeConfig::new(&dir, models.clone())
            .with_context(|| format!("cannot open a store in {}", dir.display()))?;
        config.secrets = crate::logs::secrets();
        config.autostart = false;
        config.isolated_roots = true;
        let rt = Runtime::new(config);
        Ok(Self {
            agent,
            dir,
            models,
            rt,
            _tmp: tmp,
        })
    }

    /// Runs the case's turns; answers approvals where the case says; runs the scorer.
    pub async fn run(&self, case: &EvalCase) -> anyhow::Result<Run> {
        let rt = &self.rt;
        let mut turns = case.messages.iter();
        let first = match turns.next() {
            Some(Turn::User(m)) => m.clone(),
            _ => bail!("the case does not start with a user message"),
        };
        // Nothing drives the session before `drive` (no autostart), so the case's models are
        // registered before its first turn resolves one.
        let id = rt
            .accept(turn(SessionRef::new_session(None), &first, case))
            .await?
            .context("the new session was not stored")?
            .session;
        if let Ok(mut cases) = self.models.cases.lock() {
            cases.insert(
                id.clone(),
                Arc::new(SettingsModelProvider::new(case_env(case))),
            );
        }
        let _registered = Registered {
            models: &self.models,
            session: id.clone(),
        };
        let mut failures = Vec::new();
        loop {
            let outcome = rt.drive(&id).await?;
            let next = turns.next();
            match (outcome, next) {
                (DriveOutcome::Busy { pid }, _) => {
                    bail!("session {id} is driven by another process (pid {pid})")
                }
                (DriveOutcome::Cancelled, _) | (_, None) => break,
                (DriveOutcome::WaitingInput(requests), Some(Turn::Answer { approve, reason })) => {
                    for r in &requests {
                        rt.answer_input(&id, Some(&r.id), *approve, reason.clone())
                            .await?;
                    }
                }
                (DriveOutcome::WaitingInput(requests), Some(Turn::User(_))) => {
                    let names: Vec<&str> = requests.iter().map(|r| r.tool_name.as_str()).collect();
                    failures.push(Failure::new(
                        "messages",
                        "an answer (`{approve: true}` or `{approve: false}`) before the next message",
                        format!(
                            "the turn was waiting for approval of {}; the rest of the case was not sent",
                            names.join(", ")
                        ),
                    ));
                    break;
                }
                (_, Some(Turn::User(m))) => {
                    rt.accept(turn(SessionRef::Existing(id.clone()), m, case))
                        .await?
                        .context("the message was not stored")?;
                }
                (_, Some(Turn::Answer { .. })) => {
                    failures.push(Failure::new(
                        "messages",
                        "the turn to wait for an approval that the case answers",
                        "it ended without asking for one; the rest of the case was not sent",
                    ));
                    break;
                }
            }
        }
        if let Some(cmd) = &case.expect.command
            && let Some(f) = self.score(rt, &self.dir, &id, cmd).await?
        {
            failures.push(f);
        }
        let events = rt
            .events(&id, 0, 0)
            .await?
            .into_iter()
            .map(|e| (e.kind, e.data))
            .collect();
        let cost_usd = rt.session(&id).await?.map_or(0.0, |s| s.cost_usd);
        Ok(Run {
            events,
            cost_usd,
            failures,
            session: id,
        })
    }

    /// Runs the scorer in the session's workspace, confined like the agent's `bash` tool.
    async fn score(
        &self,
        rt: &Runtime,
        dir: &Path,
        session: &str,
        cmd: &CommandExpect,
    ) -> anyhow::Result<Option<Failure>> {
        let workspace = dir.join("sandboxes").join(session);
        // The agent's run may have left symlinks in its workspace: the scorer's files are written
        // beneath it, never through one leading out.
        let beneath = eve_runtime::tools::Beneath::create(&workspace)
            .with_context(|| format!("cannot open the workspace {}", workspace.display()))?;
        for (path, text) in &cmd.files {
            beneath
                .write(std::path::Path::new(path), text.as_bytes())
                .with_context(|| {
                    format!("cannot write the scorer's file {path} beneath the session's workspace")
                })?;
        }
        let env_of = process_env();
        let env: Vec<(String, String)> = [PATH, HOME, LANG]
            .into_iter()
            .filter_map(|k| env_of(k).map(|v| (k.to_owned(), v)))
            .collect();
        let home = env_of(HOME).map(PathBuf::from);
        let effective = self.agent.bash_sandbox();
        let confinement = Executor::confinement(
            Some(&effective),
            &self.agent.sandbox,
            Some(&workspace),
            None,
            home.as_deref(),
        );
        let (program, args) = cmd
            .run
            .split_first()
            .context("the scorer command is empty")?;
        let launch = Launch {
            program: program.as_str(),
            args,
            env: &env,
            cwd: &workspace,
            confinement: &confinement,
        };
        let mut prepared = rt.executor().prepare(&launch).await?;
        prepared
            .command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let child = prepared
            .command
            .spawn()
            .with_context(|| format!("cannot start the scorer `{program}`"))?;
        let shown = cmd.run.join(" ");
        let timeout = std::time::Duration::from_secs(cmd.timeout_seconds);
        let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(out) => out?,
            Err(_) => {
                return Ok(Some(Failure::new(
                    "command",
                    format!("the scorer `{}` to exit 0", short(&shown)),
                    format!(
                        "it ran longer than {} s and was killed",
                        cmd.timeout_seconds
                    ),
                )));
            }
        };
        drop(prepared.guard);
        if output.status.success() {
            return Ok(None);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let tail = tail(if stderr.trim().is_empty() {
            &stdout
        } else {
            &stderr
        });
        let status = output.status.code().map_or_else(
            || "was killed by a signal".to_owned(),
            |c| format!("exited {c}"),
        );
        Ok(Some(Failure::new(
            "command",
            format!("the scorer `{}` to exit 0", short(&shown)),
            format!("it {status}: {tail}"),
        )))
    }
}

/// The environment a case's models see: the process's, with the case's model and mock script.
fn case_env(case: &EvalCase) -> EnvLookup {
    let base = process_env();
    let model = match (&case.model, &case.mock) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(_)) => Some("mock/echo".to_owned()),
        (None, None) => None,
    };
    let script = case.mock.as_ref().map(ToString::to_string);
    Arc::new(move |k: &str| {
        if k == EVE_MODEL && model.is_some() {
            return model.clone();
        }
        if k == EVE_MOCK_SCRIPT && script.is_some() {
            return script.clone();
        }
        base(k)
    })
}

fn check_agent(provider: &SettingsModelProvider, agent: &Agent) -> anyhow::Result<()> {
    let settings = provider
        .settings(agent)
        .and_then(|s| s.validate().map(|()| s))
        .map_err(|e| anyhow::anyhow!("the model of agent `{}` cannot be used: {e}", agent.name))?;
    if let Some(script) = &settings.mock_script {
        eve_runtime::model::mock::load_any_script(script)
            .map_err(|e| anyhow::anyhow!("its `mock` script is not usable: {e}"))?;
    }
    for sub in &agent.subagents {
        check_agent(provider, sub)?;
    }
    Ok(())
}

fn short(s: &str) -> String {
    eve_compile::evals::check::short(s, 80)
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    let start = lines.len().saturating_sub(8);
    eve_compile::evals::check::short(&lines[start..].join("\n"), 1200)
}

/// A user turn of `case` for `session`: the case's `output_schema`, if any, asked of it.
fn turn(session: SessionRef, text: &str, case: &EvalCase) -> Accept {
    let mut accept = Accept::message(session, text);
    accept.extra.push(Extra::Owner(
        eve_runtime::engine::LOCAL_PRINCIPAL.to_owned(),
    ));
    if let Some(schema) = &case.output_schema {
        accept.extra.push(Extra::Input(TurnInput {
            output_schema: Some(schema.clone()),
            ..TurnInput::default()
        }));
    }
    accept
}
