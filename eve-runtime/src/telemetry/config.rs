//! What tracing is set up with, read from the standard `OTEL_*` variables and eve's
//! `EVE_TRACES_*` ones: where spans are exported (OTLP over HTTP/protobuf), with which headers,
//! under which service name, how traces are sampled, whether prompt and output content is
//! captured, and the bounds of the local trace store.
//!
//! The exporter's endpoint and headers are the operator's configuration, read from the process
//! environment only: nothing an agent or a caller sends changes where spans go.

use std::path::PathBuf;

use crate::env_vars;
use std::time::Duration;

/// How traces are sampled (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// A fraction of traces, by trace id.
    Ratio(f64),
    /// As the caller's trace was sampled when there is one, else `root`.
    ParentBased(SamplingRoot),
}

/// What a parent-based sampler does for a trace that starts here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplingRoot {
    /// Sample it.
    On,
    /// Drop it.
    Off,
    /// Sample a fraction, by trace id.
    Ratio(f64),
}

impl Sampling {
    /// From `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`; the default (and what an
    /// unknown name falls back to) is `parentbased_always_on`.
    pub fn from_env(sampler: Option<&str>, arg: Option<&str>) -> Self {
        let ratio = arg
            .and_then(|a| a.trim().parse::<f64>().ok())
            .filter(|r| (0.0..=1.0).contains(r))
            .unwrap_or(1.0);
        match sampler.map(str::trim).unwrap_or("") {
            "always_on" => Self::AlwaysOn,
            "always_off" => Self::AlwaysOff,
            "traceidratio" => Self::Ratio(ratio),
            "parentbased_always_off" => Self::ParentBased(SamplingRoot::Off),
            "parentbased_traceidratio" => Self::ParentBased(SamplingRoot::Ratio(ratio)),
            _ => Self::ParentBased(SamplingRoot::On),
        }
    }

    /// Whether a trace with `trace_id` is sampled, given the caller's decision when the trace
    /// joins a caller's.
    pub fn decide(&self, trace_id: [u8; 16], parent_sampled: Option<bool>) -> bool {
        let ratio = |r: f64| {
            // The spec's TraceIdRatioBased: the trace id's low 8 bytes against the ratio.
            let low = u64::from_be_bytes(trace_id[8..16].try_into().unwrap_or([0; 8])) >> 1;
            (low as f64) < r * (1u64 << 63) as f64
        };
        match *self {
            Self::AlwaysOn => true,
            Self::AlwaysOff => false,
            Self::Ratio(r) => ratio(r),
            Self::ParentBased(root) => match parent_sampled {
                Some(sampled) => sampled,
                None => match root {
                    SamplingRoot::On => true,
                    SamplingRoot::Off => false,
                    SamplingRoot::Ratio(r) => ratio(r),
                },
            },
        }
    }
}

/// Where OTLP spans go.
#[derive(Debug, Clone, PartialEq)]
pub struct Otlp {
    /// The traces endpoint (`…/v1/traces`).
    pub endpoint: String,
    /// Headers sent with every export (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `…_HEADERS`).
    pub headers: Vec<(String, String)>,
}

/// The local trace store's place and bounds (`EVE_TRACES_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct Local {
    /// The SQLite file.
    pub path: PathBuf,
    /// Traces older than this go (`EVE_TRACES_MAX_AGE_MS`, default seven days)…
    pub max_age: Duration,
    /// …and the oldest go while the store is larger than this (`EVE_TRACES_MAX_TOTAL_BYTES`,
    /// default 512 MB)…
    pub max_bytes: u64,
    /// …but the newest this many traces always stay (`EVE_TRACES_RETAIN_COUNT`, default 20).
    pub retain: u64,
}

/// Everything tracing is set up with.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// `service.name` of the resource (`OTEL_SERVICE_NAME`, default `eve`).
    pub service_name: String,
    /// The OTLP export, when an endpoint is configured.
    pub otlp: Option<Otlp>,
    /// The local trace store, unless `EVE_TRACES=off`.
    pub local: Option<Local>,
    /// How traces are sampled.
    pub sampling: Sampling,
    /// Prompt, output, tool input and result content on spans
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`), redacted.
    pub capture_content: bool,
}

/// The local trace store's file in a project's state folder.
pub const LOCAL_FILE: &str = "traces.db";

impl TelemetryConfig {
    /// From the environment `env` (the process's, in the binary), with the local store in
    /// `state_dir`. `None` when tracing is off: `OTEL_SDK_DISABLED=true`, or no OTLP endpoint and
    /// `EVE_TRACES=off`.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        state_dir: &std::path::Path,
    ) -> Result<Option<Self>, String> {
        let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if get(env_vars::OTEL_SDK_DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let endpoint = match get(env_vars::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) {
            Some(e) => Some(e.trim().to_owned()),
            None => get(env_vars::OTEL_EXPORTER_OTLP_ENDPOINT)
                .map(|e| format!("{}/v1/traces", e.trim().trim_end_matches('/'))),
        };
        if let Some(e) = &endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(format!(
                "OTLP endpoint `{e}`: expected an http:// or https:// URL"
            ));
        }
        let headers = get(env_vars::OTEL_EXPORTER_OTLP_TRACES_HEADERS)
            .or_else(|| get(env_vars::OTEL_EXPORTER_OTLP_HEADERS))
            .map(|h| parse_headers(&h))
            .transpose()?
            .unwrap_or_default();
        let otlp = endpoint.map(|endpoint| Otlp { endpoint, headers });
        let number = |name: &str, default: u64| -> Result<u64, String> {
            match get(name) {
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{name}={v}: expected a whole number")),
                None => Ok(default),
            }
        };
        let local_off = get(env_vars::EVE_TRACES).is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "off" | "0" | "false"
            )
        });
        let local = if local_off {
            None
        } else {
            Some(Local {
                path: state_dir.join(LOCAL_FILE),
                max_age: Duration::from_millis(number(
                    env_vars::EVE_TRACES_MAX_AGE_MS,
                    7 * 24 * 3600 * 1000,
                )?),
                max_bytes: number(env_vars::EVE_TRACES_MAX_TOTAL_BYTES, 512 * 1024 * 1024)?,
                retain: number(env_vars::EVE_TRACES_RETAIN_COUNT, 20)?,
            })
        };
        if otlp.is_none() && local.is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            service_name: get(env_vars::OTEL_SERVICE_NAME).unwrap_or_else(|| "eve".to_owned()),
            otlp,
            local,
            sampling: Sampling::from_env(
                get(env_vars::OTEL_TRACES_SAMPLER).as_deref(),
                get(env_vars::OTEL_TRACES_SAMPLER_ARG).as_deref(),
            ),
            capture_content: get(env_vars::OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        }))
    }
}

/// `key=value,key2=value2`, values percent-decoded (the OTLP exporter spec's format).
pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(
                "OTEL_EXPORTER_OTLP_HEADERS: expected `key=value` pairs separated by commas"
                    .to_owned(),
            );
        };
        let value = percent_encoding::percent_decode_str(value.trim())
            .decode_utf8()
            .map_err(|_| "OTEL_EXPORTER_OTLP_HEADERS: a value is not UTF-8".to_owned())?;
        out.push((key.trim().to_owned(), value.into_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Option<TelemetryConfig>, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        TelemetryConfig::from_env(&env, std::path::Path::new("/s"))
    }

    #[test]
    fn endpoints_headers_and_switches_follow_the_otel_variables() {
        let c = config(&[
            (
                env_vars::OTEL_EXPORTER_OTLP_ENDPOINT,
                "http://collector:4318/",
            ),
            (env_vars::OTEL_EXPORTER_OTLP_HEADERS, "api-key=a%20b,x=1"),
            (env_vars::OTEL_SERVICE_NAME, "support"),
        ])
        .unwrap()
        .unwrap();
        let otlp = c.otlp.unwrap();
        assert_eq!(otlp.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(
            otlp.headers,
            vec![("api-key".into(), "a b".into()), ("x".into(), "1".into())]
        );
        assert_eq!(c.service_name, "support");
        assert!(!c.capture_content);
        let c = config(&[(env_vars::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "https://h/x")])
            .unwrap()
            .unwrap();
        assert_eq!(c.otlp.unwrap().endpoint, "https://h/x");
        assert_eq!(c.local.unwrap().path, PathBuf::from("/s/traces.db"));
        assert!(
            config(&[
                (env_vars::OTEL_SDK_DISABLED, "true"),
                (env_vars::OTEL_EXPORTER_OTLP_ENDPOINT, "http://c")
            ])
            .unwrap()
            .is_none()
        );
        assert!(config(&[(env_vars::EVE_TRACES, "off")]).unwrap().is_none());
        assert!(config(&[(env_vars::OTEL_EXPORTER_OTLP_ENDPOINT, "collector:4318")]).is_err());
        assert!(config(&[(env_vars::OTEL_EXPORTER_OTLP_HEADERS, "novalue")]).is_err());
        assert!(config(&[(env_vars::EVE_TRACES_MAX_AGE_MS, "soon")]).is_err());
    }

    #[test]
    fn samplers_decide_by_parent_and_trace_id() {
        let low = [0u8; 16];
        let high = [0xffu8; 16];
        let s = Sampling::from_env(Some("traceidratio"), Some("0.5"));
        assert!(s.decide(low, None) && !s.decide(high, None));
        let s = Sampling::from_env(None, None);
        assert!(s.decide(high, None) && !s.decide(high, Some(false)));
        assert!(!Sampling::from_env(Some("always_off"), None).decide(low, Some(true)));
        let s = Sampling::from_env(Some("parentbased_always_off"), None);
        assert!(!s.decide(low, None) && s.decide(low, Some(true)));
    }
}
