//! Loading builds by hash, so a session can stay pinned to the build it started on.
//!
//! `eve build` writes immutable, content-addressed builds under `.eve/builds/<hash>/` and points
//! `.eve/current` at the newest. The runtime loads a build once (manifest, the tool table with the
//! built-ins, validators, the system prompt) and keeps it by hash: an idle session moves to the
//! current build at its next message, a busy one finishes its turn on its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use eve_compile::{Agent, Manifest, Skill, Tool};

use crate::engine::{RuntimeError, RuntimeResult};

pub mod publish;
use crate::mcp::{CALL_TOOL, SEARCH_TOOLS};
use crate::model::ToolSpec;
use crate::tools::{Validators, builtin_tools, web_tools};
use crate::workspace::integrity::{Digests, FileChecks};

/// Name of the built-in skill loader tool.
pub const LOAD_SKILL: &str = "load_skill";

/// A loaded build.
#[derive(Debug)]
pub struct LoadedBuild {
    /// Content hash.
    pub hash: String,
    /// `.eve/builds/<hash>`.
    pub(crate) dir: PathBuf,
    /// The manifest.
    pub manifest: Manifest,
    /// Every tool the model may call: the agent's, then the built-ins that are on (`default_tools`;
    /// `web_search` when `web.search` names a provider).
    pub(crate) tools: Vec<Tool>,
    /// Input validators of [`LoadedBuild::tools`], built once.
    pub(crate) validators: Validators,
    /// Tool specs sent to the model (with `load_skill` when the agent has skills). Deferred tools
    /// are left out: the system prompt names them and `search_tools`/`call_tool` (added per turn
    /// run, with the MCP catalogue) reach them.
    pub(crate) specs: Vec<ToolSpec>,
    /// The system prompt: instructions plus the skills and deferred tools blocks.
    pub(crate) system_prompt: String,
    /// Dynamic tool scripts (`dynamic:` set): run at session and turn start to define tools; not
    /// offered themselves.
    pub(crate) providers: Vec<Tool>,
    /// Whether this agent or one of its subagents has observe hooks.
    pub(crate) observe_hooks: bool,
    /// Whether the build's tools are many enough (`lean_context.max_inline_tools`) to be offered
    /// through the catalogue, with only the most used inline.
    pub(crate) auto_catalogue: bool,
    /// What its build store knows of its builds' files (whether `files/` was verified).
    checks: Arc<FileChecks>,
}

impl LoadedBuild {
    /// Builds the runtime view of a manifest.
    pub(crate) fn new(hash: String, dir: PathBuf, manifest: Manifest) -> Self {
        let agent = &manifest.agent;
        let (providers, mut tools): (Vec<Tool>, Vec<Tool>) = agent
            .tools
            .iter()
            .cloned()
            .partition(|t| !t.dynamic.is_empty());
        // The built-ins that are on (`web_search` only with a provider: `builtins_on`); an
        // authored tool of the same name replaces one.
        let web = web_tools(&agent.config.web);
        for mut tool in builtin_tools().into_iter().chain(web) {
            if !agent.config.builtin_on(&tool.name) {
                continue;
            }
            if let Some(approval) = agent.config.approvals.get(&tool.name) {
                tool.approval = *approval;
            }
            if !tools.iter().any(|t| t.name == tool.name) {
                tools.push(tool);
            }
        }
        let mut validators = Validators::new(&tools);
        let mut specs: Vec<ToolSpec> = tools
            .iter()
            .filter(|t| !t.deferred)
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: crate::features::questions::described(t),
                input_schema: t.input_schema.clone(),
            })
            .collect();
        let reflect = agent.config.strategy == eve_compile::Strategy::Reflect;
        for sub in &agent.subagents {
            if reflect && sub.name == "critic" {
                // The critic reviews answers; it is not a tool of the agent.
                continue;
            }
            let spec = crate::features::subagents::tool_spec(sub);
            validators.insert(&spec.name, &spec.input_schema);
            specs.push(spec);
        }
        if crate::features::tasks::enabled(agent) {
            for spec in crate::features::tasks::specs() {
                if !tools.iter().any(|t| t.name == spec.name) {
                    validators.insert(&spec.name, &spec.input_schema);
                    specs.push(spec);
                }
            }
        }
        if crate::features::subagents::offers_agent_tool(agent) {
            let copy = crate::features::subagents::root_copy(agent);
            let spec = crate::features::subagents::tool_spec(&copy);
            validators.insert(&spec.name, &spec.input_schema);
            specs.push(spec);
        }
        let observe_hooks = crate::features::hooks::has_observe_hooks(agent);
        if !agent.skills.is_empty() {
            specs.push(load_skill_spec());
        }
        if let Some(memory) = &agent.config.memory
            && !tools
                .iter()
                .any(|t| t.name == crate::features::memory::MEMORY_TOOL)
        {
            let spec = crate::features::memory::spec(memory);
            validators.insert(&spec.name, &spec.input_schema);
            specs.push(spec);
        }
        if agent.config.self_change && agent.path.is_empty() {
            specs.push(crate::features::selfchange::spec());
        }
        if crate::features::sleep::enabled(agent) {
            let spec = crate::features::sleep::spec(agent);
            validators.insert(&spec.name, &spec.input_schema);
            specs.push(spec);
        }
        for spec in crate::features::questions::specs(agent, &tools) {
            validators.insert(&spec.name, &spec.input_schema);
            specs.push(spec);
        }
        let files = std::path::absolute(dir.join(eve_compile::pack::FILES))
            .unwrap_or_else(|_| dir.join(eve_compile::pack::FILES));
        let mut system_prompt = system_prompt_with_files(&manifest, Some(&files));
        let lean = agent.config.lean_context;
        let catalogued = specs
            .iter()
            .filter(|s| tools.iter().any(|t| t.name == s.name))
            .count();
        let auto_catalogue =
            lean.max_inline_tools > 0 && catalogued > lean.max_inline_tools as usize;
        if auto_catalogue {
            system_prompt.truncate(system_prompt.trim_end().len());
            system_prompt.push_str(&format!(
                "\n\n## Tool catalogue\n\nThis agent has {catalogued} tools; only the most used \
                 are offered directly. To use another, find it with `{SEARCH_TOOLS}` (describe \
                 what you need; it returns names and input schemas), then run it with \
                 `{CALL_TOOL}` (`name` and `input`).\n"
            ));
        }
        Self {
            hash,
            dir,
            manifest,
            tools,
            validators,
            specs,
            system_prompt,
            providers,
            observe_hooks,
            auto_catalogue,
            checks: Arc::new(FileChecks::new()),
        }
    }

    /// The same build, its files checked with `checks` (its build store's).
    fn checked_by(mut self, checks: &Arc<FileChecks>) -> Self {
        self.checks = checks.clone();
        self
    }

    /// The view of this build for the agent at `path` (`""`: the root; a subagent's manifest
    /// `path` otherwise): its instructions, tools, subagents, hooks and connections.
    pub(crate) fn for_agent(&self, path: &str) -> Option<LoadedBuild> {
        fn find<'a>(agent: &'a Agent, path: &str) -> Option<&'a Agent> {
            if agent.path == path {
                return Some(agent);
            }
            agent.subagents.iter().find_map(|a| find(a, path))
        }
        let agent = find(&self.manifest.agent, path)?;
        let manifest = Manifest {
            agent: agent.clone(),
            ..self.manifest.clone()
        };
        Some(
            LoadedBuild::new(self.hash.clone(), self.dir.clone(), manifest)
                .checked_by(&self.checks),
        )
    }

    /// Folder holding the agent's files (`files/` of the build): scripts, seeds. Unpacked from
    /// the build's pack the first time anything asks.
    pub fn files(&self) -> RuntimeResult<PathBuf> {
        self.checks
            .files_verified(&self.dir, &self.manifest.files)
            .map_err(|e| RuntimeError::Build {
                what: self.hash.clone(),
                message: e.to_string(),
            })
    }

    /// Whether a skill of this agent or of a subagent is packaged with other files, which tools
    /// read from the build's `files/` (so it is unpacked before a session's first turn).
    pub(crate) fn has_skill_files(&self) -> bool {
        fn any(agent: &Agent) -> bool {
            agent.skills.iter().any(|s| !s.files.is_empty()) || agent.subagents.iter().any(any)
        }
        any(&self.manifest.agent)
    }

    /// What `load_skill` returns: the skill's body, then where its other files are.
    pub(crate) fn skill_text(&self, skill: &Skill) -> String {
        match skill_files_note(skill, &self.files_path()) {
            Some(note) => format!("{}\n\n{note}", skill.body.trim_end()),
            None => skill.body.clone(),
        }
    }

    /// Absolute path of the build's `files/` (unpacked or not).
    pub(crate) fn files_path(&self) -> PathBuf {
        let files = self.dir.join(eve_compile::pack::FILES);
        std::path::absolute(&files).unwrap_or(files)
    }

    /// Whether sessions of this agent start child sessions: it has subagents, or a plan runs
    /// its steps in children (`strategy: plan`, here or in a subagent).
    pub(crate) fn has_children(&self) -> bool {
        fn plans(agent: &Agent) -> bool {
            agent.config.strategy == eve_compile::Strategy::Plan
                || agent.subagents.iter().any(plans)
        }
        !self.manifest.agent.subagents.is_empty() || plans(&self.manifest.agent)
    }

    /// A tool by name.
    pub(crate) fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

fn load_skill_spec() -> ToolSpec {
    ToolSpec {
        name: LOAD_SKILL.to_owned(),
        description: "Load a skill by name: returns its full instructions. Load a skill before \
                      following it."
            .to_owned(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The skill's name."}},
            "required": ["name"],
            "additionalProperties": false
        }),
    }
}

/// How many of a skill's files the system prompt and `load_skill` name.
const LISTED_SKILL_FILES: usize = 20;

/// Where a packaged skill's other files are, for the model: `Files of this skill are in
/// <files>/skills/review/: references/x.md, …` (up to [`LISTED_SKILL_FILES`], then "and N more").
/// `None` for a skill without other files.
pub(crate) fn skill_files_note(skill: &Skill, files: &Path) -> Option<String> {
    if skill.files.is_empty() {
        return None;
    }
    let folder = Path::new(&skill.source)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = if folder.is_empty() {
        String::new()
    } else {
        format!("{folder}/")
    };
    let names: Vec<&str> = skill
        .files
        .iter()
        .map(|f| f.strip_prefix(&prefix).unwrap_or(f))
        .collect();
    let mut list = names
        .iter()
        .take(LISTED_SKILL_FILES)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED_SKILL_FILES {
        list.push_str(&format!(", and {} more", names.len() - LISTED_SKILL_FILES));
    }
    let dir = files.join(&folder);
    Some(format!(
        "Files of this skill are in {}/: {list} (read-only; read them with `read_file` at that path).",
        dir.display()
    ))
}

/// Instructions, then a block listing the skills that are not deferred, then one naming the
/// deferred tools (each with the first line of its description).
pub fn system_prompt(manifest: &Manifest) -> String {
    system_prompt_with_files(manifest, None)
}

/// [`system_prompt`], with each packaged skill's folder under `files` (the build's absolute
/// `files/`) and its files named.
pub(crate) fn system_prompt_with_files(manifest: &Manifest, files: Option<&Path>) -> String {
    let agent = &manifest.agent;
    let mut prompt = agent.instructions.trim_end().to_owned();
    let listed: Vec<_> = agent.skills.iter().filter(|s| !s.deferred).collect();
    let unlisted = agent.skills.len() - listed.len();
    if !listed.is_empty() || unlisted > 0 {
        prompt.push_str(
            "\n\n## Skills\n\nSkills hold instructions for specific tasks. When one applies, load it \
             with the `load_skill` tool (by name) and follow it.\n\n",
        );
        for skill in listed {
            prompt.push_str(&format!("- {}: {}\n", skill.name, skill.description.trim()));
            if let Some(note) = files.and_then(|f| skill_files_note(skill, f)) {
                prompt.push_str(&format!("  {note}\n"));
            }
        }
        if unlisted > 0 {
            prompt.push_str(&format!(
                "- {unlisted} more skill{} not listed here: find {} with `{SEARCH_TOOLS}`.\n",
                if unlisted == 1 { " is" } else { "s are" },
                if unlisted == 1 { "it" } else { "them" },
            ));
        }
    }
    // Dynamic tool providers are never offered, deferred or not.
    let deferred: Vec<_> = agent
        .tools
        .iter()
        .filter(|t| t.deferred && t.dynamic.is_empty())
        .collect();
    if !deferred.is_empty() {
        prompt.truncate(prompt.trim_end().len());
        prompt.push_str(&format!(
            "\n\n## More tools\n\nThese tools are available but not listed with the others. To use \
             one, get its input schema with `{SEARCH_TOOLS}` (search for its name), then run it with \
             `{CALL_TOOL}` (`name` and `input`).\n\n"
        ));
        for tool in deferred {
            let summary = tool.description.trim().lines().next().unwrap_or("").trim();
            if summary.is_empty() {
                prompt.push_str(&format!("- {}\n", tool.name));
            } else {
                prompt.push_str(&format!("- {}: {summary}\n", tool.name));
            }
        }
    }
    prompt
}

/// Builds on disk, loaded on demand and kept by hash.
pub struct BuildStore {
    state_dir: PathBuf,
    loaded: Mutex<HashMap<String, Arc<LoadedBuild>>>,
    hooks_seen: std::sync::atomic::AtomicBool,
    subagents_seen: std::sync::atomic::AtomicBool,
    /// Learns the secrets each build references as it is loaded, resolved in this environment.
    secrets: Option<(Arc<crate::redact::Secrets>, crate::tools::EnvLookup)>,
    /// The active release's build, with what `.eve/current` named when it was learnt.
    active: Mutex<Option<(String, Option<String>)>>,
    /// Where a build missing from disk is fetched from (the fleet's store).
    source: Option<Arc<dyn crate::store::Store>>,
    /// What is known of the builds' files: verified digests, manifests read, verified builds.
    checks: Arc<FileChecks>,
}

impl std::fmt::Debug for BuildStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildStore")
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

impl BuildStore {
    /// Builds under `<state_dir>/builds`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            loaded: Mutex::new(HashMap::new()),
            hooks_seen: std::sync::atomic::AtomicBool::new(false),
            subagents_seen: std::sync::atomic::AtomicBool::new(false),
            secrets: None,
            active: Mutex::new(None),
            source: None,
            checks: Arc::new(FileChecks::new()),
        }
    }

    /// Fetches a build that is not on disk from `store` (where `eve build --publish` and
    /// `eve serve` put theirs) before giving up on it.
    pub(crate) fn with_source(mut self, store: Arc<dyn crate::store::Store>) -> Self {
        self.source = Some(store);
        self
    }

    /// Teaches `secrets` every `${VAR}` and `env:` name of each build as it is loaded, before
    /// anything of it runs.
    pub(crate) fn with_secrets(
        mut self,
        secrets: Arc<crate::redact::Secrets>,
        env: crate::tools::EnvLookup,
    ) -> Self {
        self.secrets = Some((secrets, env));
        self
    }

    /// Hash of the current build: the active release's (the store is the source of truth,
    /// followed by the runtime), else the build `.eve/current` points at. When the link moved
    /// since the active release was learnt (another process activated, and this one has not
    /// read the store yet), the link wins.
    pub fn current_hash(&self) -> RuntimeResult<String> {
        let linked = current_hash(&self.state_dir).ok();
        if let Ok(active) = self.active.lock()
            && let Some((hash, seen)) = active.as_ref()
            && (linked.is_none() || *seen == linked)
        {
            return Ok(hash.clone());
        }
        match linked {
            Some(hash) => Ok(hash),
            None => current_hash(&self.state_dir),
        }
    }

    /// Follows the active release's build (`None`: there is none; `.eve/current` decides).
    pub(crate) fn set_active(&self, hash: Option<String>) {
        let linked = current_hash(&self.state_dir).ok();
        if let Ok(mut active) = self.active.lock() {
            *active = hash.map(|h| (h, linked));
        }
    }

    /// The build with this hash.
    pub fn get(&self, hash: &str) -> RuntimeResult<Arc<LoadedBuild>> {
        if let Ok(cache) = self.loaded.lock()
            && let Some(build) = cache.get(hash)
        {
            return Ok(build.clone());
        }
        let (hash, dir, manifest) = match load_build(&self.state_dir, Some(hash)) {
            Ok(found) => found,
            // Not on this node: another node built it and published it to the store.
            Err(missing) => match &self.source {
                Some(store)
                    if valid_hash(hash)
                        && !self
                            .state_dir
                            .join("builds")
                            .join(hash)
                            .join("manifest.json")
                            .is_file() =>
                {
                    match publish::fetch_build_blocking(store, &self.state_dir, hash)? {
                        Some(_) => load_build(&self.state_dir, Some(hash))?,
                        None => {
                            return Err(RuntimeError::Build {
                                what: hash.to_owned(),
                                message: format!(
                                    "it is neither in {} nor in the store: run \
                                     `eve build --publish` on the node that built it",
                                    self.state_dir.join("builds").display()
                                ),
                            });
                        }
                    }
                }
                _ => return Err(missing),
            },
        };
        if let Some((secrets, env)) = &self.secrets {
            match serde_json::to_value(&manifest) {
                Ok(value) => secrets.learn_manifest(&value, &**env),
                Err(e) => {
                    tracing::warn!(build = %hash, error = %e, "cannot list the build's secrets")
                }
            }
        }
        let build =
            Arc::new(LoadedBuild::new(hash.clone(), dir, manifest).checked_by(&self.checks));
        // Skill files are read at the path the system prompt states, from the first turn on.
        if build.has_skill_files()
            && let Err(e) = build.files()
        {
            tracing::warn!(build = %hash, error = %e, "cannot unpack the build's skill files");
        }
        if build.observe_hooks {
            self.hooks_seen
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if build.has_children() {
            self.subagents_seen
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if let Ok(mut cache) = self.loaded.lock() {
            cache.insert(hash, build.clone());
        }
        Ok(build)
    }

    /// The current build.
    pub fn current(&self) -> RuntimeResult<Arc<LoadedBuild>> {
        let hash = self.current_hash()?;
        self.get(&hash)
    }

    /// The view of build `hash` for the agent at `path` (`""` is the root agent).
    pub(crate) fn agent(&self, hash: &str, path: &str) -> RuntimeResult<Arc<LoadedBuild>> {
        let root = self.get(hash)?;
        if path.is_empty() {
            return Ok(root);
        }
        let key = format!("{hash}#{path}");
        if let Ok(cache) = self.loaded.lock()
            && let Some(build) = cache.get(&key)
        {
            return Ok(build.clone());
        }
        if let Some(base) = path.strip_suffix(crate::features::subagents::COPY_SUFFIX) {
            // The child sessions of the built-in `agent`: the root agent, without `agent`.
            let base = self.agent(hash, base)?;
            let mut manifest = base.manifest.clone();
            manifest.agent = crate::features::subagents::root_copy(&manifest.agent);
            let view = Arc::new(
                LoadedBuild::new(base.hash.clone(), base.dir.clone(), manifest)
                    .checked_by(&self.checks),
            );
            if let Ok(mut cache) = self.loaded.lock() {
                cache.insert(key, view.clone());
            }
            return Ok(view);
        }
        let view = match path.strip_suffix(crate::features::strategy::WORKER_SUFFIX) {
            // The child sessions of a plan's steps: the agent itself, running `react`.
            Some(base) => {
                let base = self.agent(hash, base)?;
                let mut manifest = base.manifest.clone();
                manifest.agent = crate::features::strategy::worker_agent(&manifest.agent);
                Arc::new(
                    LoadedBuild::new(base.hash.clone(), base.dir.clone(), manifest)
                        .checked_by(&self.checks),
                )
            }
            None => Arc::new(root.for_agent(path).ok_or_else(|| RuntimeError::Build {
                what: hash.to_owned(),
                message: format!("the build has no subagent at `{path}`"),
            })?),
        };
        if let Ok(mut cache) = self.loaded.lock() {
            cache.insert(key, view.clone());
        }
        Ok(view)
    }

    /// Whether any build loaded so far has subagents (lets approval routing and the wait for
    /// children's requests skip their queries when none does).
    pub(crate) fn subagents_seen(&self) -> bool {
        self.subagents_seen
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether any build loaded so far has observe hooks (lets event delivery skip all work when
    /// no agent uses them).
    pub(crate) fn observe_hooks_seen(&self) -> bool {
        self.hooks_seen.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What this store knows of its builds' files.
    pub(crate) fn file_checks(&self) -> Arc<FileChecks> {
        self.checks.clone()
    }

    /// The file digests of the build `hash` in `build_dir`: the loaded build's when `build_dir`
    /// is this store's folder of that build, else those of the `manifest.json` in `build_dir`.
    pub(crate) fn digests(&self, hash: &str, build_dir: &Path) -> Option<Digests> {
        let own = self.state_dir.join("builds").join(hash);
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        if absolute(&own) == absolute(build_dir)
            && let Ok(build) = self.get(hash)
        {
            return Some(Arc::new(build.manifest.files.clone()));
        }
        self.checks.digests_on_disk(build_dir)
    }

    /// The unpacked files of build `hash`, checked against its manifest's digests like
    /// [`LoadedBuild::files`], without loading the build.
    pub(crate) fn unpack(&self, hash: &str) -> RuntimeResult<PathBuf> {
        let dir = self.state_dir.join("builds").join(hash);
        let digests = self.checks.digests_on_disk(&dir).unwrap_or_default();
        self.checks
            .files_verified(&dir, &digests)
            .map_err(|e| RuntimeError::Build {
                what: hash.to_owned(),
                message: e.to_string(),
            })
    }
}

fn valid_hash(hash: &str) -> bool {
    !hash.is_empty()
        && hash
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn current_hash(state_dir: &Path) -> RuntimeResult<String> {
    let link = state_dir.join("current");
    let name = match std::fs::read_link(&link) {
        Ok(target) => target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        Err(_) => std::fs::read_to_string(&link)
            .map(|s| s.trim().to_owned())
            .map_err(|e| RuntimeError::Build {
                what: link.display().to_string(),
                message: format!("{e}; run `eve build` first"),
            })?,
    };
    if !valid_hash(&name) {
        return Err(RuntimeError::Build {
            what: link.display().to_string(),
            message: format!("`{name}` is not a build hash; run `eve build` again"),
        });
    }
    Ok(name)
}

/// Reads `<state_dir>/builds/<hash>/manifest.json` (the current build when `hash` is `None`).
/// Returns the hash, the build folder and the manifest.
pub fn load_build(
    state_dir: &Path,
    hash: Option<&str>,
) -> RuntimeResult<(String, PathBuf, Manifest)> {
    let hash = match hash {
        Some(h) => h.to_owned(),
        None => current_hash(state_dir)?,
    };
    if !valid_hash(&hash) {
        return Err(RuntimeError::Build {
            what: hash,
            message: "not a build hash".to_owned(),
        });
    }
    let dir = state_dir.join("builds").join(&hash);
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(|e| RuntimeError::Build {
        what: hash.clone(),
        message: format!("{}: {e}", path.display()),
    })?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| RuntimeError::Build {
        what: hash.clone(),
        message: format!("{}: {e}", path.display()),
    })?;
    Ok((hash, dir, manifest))
}
