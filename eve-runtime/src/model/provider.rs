//! The default [`ModelProvider`]: model settings from the environment and `agent.yaml`.
//!
//! Precedence is the model module's (`EVE_MODEL` > `agent.yaml` `model` > `mock/echo`); the
//! context window comes from `agent.yaml` when set. Clients are built once per distinct settings
//! and shared by every session using them.

use std::collections::HashMap;
use std::sync::Mutex;

use eve_compile::Agent;

use crate::engine::{ModelProvider, ResolvedModel};
use crate::model::{ModelError, ModelSettings, client};
use crate::tools::EnvLookup;

/// Resolves models with [`ModelSettings::resolve`].
pub struct SettingsModelProvider {
    env: EnvLookup,
    cache: Mutex<HashMap<String, ResolvedModel>>,
}

impl std::fmt::Debug for SettingsModelProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingsModelProvider")
            .finish_non_exhaustive()
    }
}

impl SettingsModelProvider {
    /// A provider reading variables through `env`.
    pub fn new(env: EnvLookup) -> Self {
        Self {
            env,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The settings an agent resolves to.
    pub fn settings(&self, agent: &Agent) -> Result<ModelSettings, ModelError> {
        let env = self.env.clone();
        let mut settings = ModelSettings::resolve(agent.config.model.as_deref(), &move |k| env(k))?;
        settings.context_window = agent.config.context_window;
        let limits = &agent.config.limits;
        if let Some(s) = limits.model_call_seconds {
            settings.call_timeout = std::time::Duration::from_secs(s);
        }
        if let Some(s) = limits.model_idle_seconds {
            settings.idle_timeout = std::time::Duration::from_secs(s);
        }
        if let Some(n) = limits.model_response_bytes {
            settings.response_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        Ok(settings)
    }
}

impl ModelProvider for SettingsModelProvider {
    fn resolve(&self, agent: &Agent) -> Result<ResolvedModel, ModelError> {
        let settings = self.settings(agent)?;
        let mock = settings.provider.protocol() == crate::model::Protocol::Mock;
        let key = if mock {
            // A per-agent mock script plays each agent's own steps.
            format!("{settings:?}#{}", agent.path)
        } else {
            format!("{settings:?}")
        };
        if let Ok(cache) = self.cache.lock()
            && let Some(found) = cache.get(&key)
        {
            return Ok(found.clone());
        }
        let model_client: std::sync::Arc<dyn crate::model::ModelClient> = if mock {
            std::sync::Arc::new(
                crate::model::mock::MockClient::new(
                    &settings.model,
                    settings.mock_script.as_deref(),
                )?
                .with_context_window(settings.context_window)
                .for_agent(&agent.name, &agent.path),
            )
        } else {
            client(&settings)?
        };
        let resolved = ResolvedModel {
            client: model_client,
            model: settings.model.clone(),
            model_id: format!("{}/{}", settings.provider, settings.model),
            context_window: settings.context_window,
            price_per_million: agent
                .config
                .limits
                .price_per_million
                .map(|p| (p.input, p.output)),
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, resolved.clone());
        }
        Ok(resolved)
    }
}

/// A provider that always answers with the same model (tests, embedding).
#[derive(Debug, Clone)]
pub struct FixedModelProvider(pub ResolvedModel);

impl ModelProvider for FixedModelProvider {
    fn resolve(&self, _agent: &Agent) -> Result<ResolvedModel, ModelError> {
        Ok(self.0.clone())
    }
}

/// The stand-in for a model that cannot be built (no API key, no base URL, an unknown
/// provider): every call fails with the configuration error, so the turn that needed the model
/// ends with `turn.failed` carrying the message that says what to set, instead of leaving the
/// session `running` with nothing on its stream.
pub(crate) struct UnavailableModel {
    message: String,
}

impl UnavailableModel {
    /// A resolved model for `agent` whose calls fail with `error`.
    pub(crate) fn resolved(agent: &Agent, error: &ModelError) -> ResolvedModel {
        let named = agent
            .config
            .model
            .clone()
            .unwrap_or_else(|| crate::model::DEFAULT_MODEL.to_owned());
        ResolvedModel {
            client: std::sync::Arc::new(Self {
                message: error.to_string(),
            }),
            model: named
                .split_once('/')
                .map_or(named.as_str(), |(_, m)| m)
                .to_owned(),
            model_id: named,
            context_window: agent.config.context_window,
            price_per_million: None,
        }
    }
}

#[async_trait::async_trait]
impl crate::model::ModelClient for UnavailableModel {
    async fn stream(
        &self,
        _request: &crate::model::ModelRequest,
        _on_event: &mut (dyn FnMut(crate::model::ModelEvent) + Send),
    ) -> Result<crate::model::ModelResponse, ModelError> {
        Err(ModelError::Config(self.message.clone()))
    }

    async fn context_window(&self, _model: &str) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::model::Provider;

    #[test]
    fn the_build_knows_exactly_the_runtime_providers() {
        assert_eq!(
            eve_compile::manifest::KNOWN_PROVIDERS.len(),
            Provider::ALL.len()
        );
        for p in Provider::ALL {
            assert!(
                eve_compile::manifest::KNOWN_PROVIDERS.contains(&p.name()),
                "{p} is missing from eve_compile::manifest::KNOWN_PROVIDERS"
            );
        }
        for spelling in ["llama.cpp", "OpenAI", "openai_compatible", "llama-cpp"] {
            assert!(Provider::parse(spelling).is_some());
            assert!(
                eve_compile::manifest::is_known_provider(spelling),
                "{spelling}"
            );
        }
        assert!(!eve_compile::manifest::is_known_provider("foo"));
    }
}
