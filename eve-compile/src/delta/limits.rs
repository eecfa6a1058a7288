//! Limits in the delta: every bound that keeps a turn, a call or a process small. A bound raised
//! or removed lets the agent run longer, spend more or hold more than before, so it widens:
//! `limits:` of `agent.yaml` (steps, tokens, cost and its prices, turn and model-call time,
//! response size, review time), `limits:` of `sandbox.yaml` (memory, processes, file size, CPU,
//! and any bound added there later, compared field by field), the sandbox's default timeout and
//! output cap, and each tool's, hook's and connection's own timeout and output cap.

use serde_json::Value;

use super::{ChangeKind, Differ};
use crate::manifest::*;

/// What an absent `agent.yaml` limit means, for the limits with a default in the runtime (the
/// others are unlimited when absent): the values their documentation states.
const AGENT_DEFAULTS: &[(&str, f64)] = &[
    ("model_call_seconds", 300.0),
    ("model_idle_seconds", 60.0),
    ("model_response_bytes", 8.0 * 1024.0 * 1024.0),
    ("review_seconds", 30.0),
    ("max_sleep_seconds", DEFAULT_MAX_SLEEP_SECONDS as f64),
];

/// `agent.yaml` fields of `limits:` that are not one bound (compared on their own or not at all).
const NOT_BOUNDS: &[&str] = &["phases", "price_per_million"];

/// The connection's start timeout when it sets none: 30 s.
const DEFAULT_START_TIMEOUT_MS: u64 = 30_000;

/// A bound as a number; absent is `default`, or unlimited.
fn bound(v: Option<&Value>, default: Option<f64>) -> f64 {
    match v.and_then(Value::as_f64) {
        Some(n) => n,
        None => default.unwrap_or(f64::INFINITY),
    }
}

fn show(n: f64) -> String {
    if n.is_infinite() {
        "unlimited".to_owned()
    } else if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// The fields of a serialised settings object.
fn fields(v: &Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    }
}

impl Differ {
    /// One bound before and after: raised (or removed) widens, lowered (or set) does not.
    /// Compared with the defaults (a first build, a new subagent: `self.first`), only a
    /// raised bound is listed.
    fn bound(&mut self, subject: String, old: f64, new: f64) {
        if old == new || (old.is_nan() && new.is_nan()) {
            return;
        }
        let loosened = new > old;
        if self.first && !loosened {
            return;
        }
        self.push(
            if loosened {
                ChangeKind::LimitLoosened
            } else {
                ChangeKind::LimitTightened
            },
            subject,
            Some(show(old)),
            Some(show(new)),
            loosened,
        );
    }

    /// Every bound of two settings objects, field by field (absent: `default_of`, else
    /// unlimited), so a bound added to the settings later is compared without a change here.
    fn bounds(
        &mut self,
        subject: &str,
        old: &Value,
        new: &Value,
        skip: &[&str],
        default_of: &dyn Fn(&str) -> Option<f64>,
    ) {
        let (a, b) = (fields(old), fields(new));
        let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            if skip.contains(&key.as_str()) {
                continue;
            }
            let (x, y) = (a.get(key), b.get(key));
            // Only numbers (or their absence) are bounds.
            if [x, y]
                .iter()
                .flatten()
                .any(|v| !v.is_number() && !v.is_null())
            {
                continue;
            }
            let default = default_of(key);
            self.bound(
                format!("{subject}.{key}"),
                bound(x, default),
                bound(y, default),
            );
        }
    }

    /// `limits:` of one agent's `agent.yaml`, and its critic's rounds.
    pub(super) fn limits(&mut self, prefix: &str, old: &AgentConfig, new: &AgentConfig) {
        let (a, b) = (
            serde_json::to_value(&old.limits).unwrap_or(Value::Null),
            serde_json::to_value(&new.limits).unwrap_or(Value::Null),
        );
        let default_of = |key: &str| {
            AGENT_DEFAULTS
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| *v)
        };
        self.bounds(&format!("{prefix}limits"), &a, &b, NOT_BOUNDS, &default_of);
        // Prices: a lower price counts less cost against `max_cost_usd`; none counts nothing.
        let subject = format!("{prefix}limits.price_per_million");
        match (old.limits.price_per_million, new.limits.price_per_million) {
            (Some(p), None) => self.push(
                ChangeKind::LimitLoosened,
                subject,
                Some(price(&p)),
                Some("none (cost is not counted)".to_owned()),
                true,
            ),
            (None, Some(p)) => self.push(
                ChangeKind::LimitTightened,
                subject,
                None,
                Some(price(&p)),
                false,
            ),
            (Some(p), Some(q)) if p != q => {
                let lower = q.input < p.input || q.output < p.output;
                self.push(
                    if lower {
                        ChangeKind::LimitLoosened
                    } else {
                        ChangeKind::LimitTightened
                    },
                    subject,
                    Some(price(&p)),
                    Some(price(&q)),
                    lower,
                );
            }
            _ => {}
        }
        self.prices(prefix, old, new);
        let rounds = |c: &Option<Critic>| c.as_ref().map(|c| f64::from(c.max_rounds));
        if let (Some(a), Some(b)) = (rounds(&old.critic), rounds(&new.critic)) {
            self.bound(format!("{prefix}critic.max_rounds"), a, b);
        }
    }

    /// `prices:`: a price added (it overrides eve's built-in one, which may be higher), removed
    /// (the fallback may be lower, or none) or lowered counts less cost against `max_cost_usd`,
    /// so it widens; a raised one tightens.
    fn prices(&mut self, prefix: &str, old: &AgentConfig, new: &AgentConfig) {
        let models: std::collections::BTreeSet<&String> =
            old.prices.keys().chain(new.prices.keys()).collect();
        for model in models {
            let subject = format!("{prefix}prices.{model}");
            match (old.prices.get(model), new.prices.get(model)) {
                (Some(p), None) => self.push(
                    ChangeKind::LimitLoosened,
                    subject,
                    Some(model_price(p)),
                    Some("none (the built-in price, if any)".to_owned()),
                    true,
                ),
                (None, Some(p)) => self.push(
                    ChangeKind::LimitLoosened,
                    subject,
                    Some("the built-in price, if any".to_owned()),
                    Some(model_price(p)),
                    true,
                ),
                (Some(p), Some(q)) if p != q => {
                    let cached = |m: &ModelPrice| m.cached.unwrap_or(m.input);
                    let lower = q.input < p.input || q.output < p.output || cached(q) < cached(p);
                    self.push(
                        if lower {
                            ChangeKind::LimitLoosened
                        } else {
                            ChangeKind::LimitTightened
                        },
                        subject,
                        Some(model_price(p)),
                        Some(model_price(q)),
                        lower,
                    );
                }
                _ => {}
            }
        }
    }

    /// `limits:`, `timeout` and `output_limit` of one agent's `sandbox.yaml`: every number of
    /// the settings and of their `limits:`, so a bound added to either later is compared too.
    pub(super) fn sandbox_limits(&mut self, prefix: &str, old: &Sandbox, new: &Sandbox) {
        let subject = format!("{prefix}sandbox");
        let (a, b) = (
            serde_json::to_value(old).unwrap_or(Value::Null),
            serde_json::to_value(new).unwrap_or(Value::Null),
        );
        self.bounds(&subject, &a, &b, &[], &|_| None);
        self.bounds(
            &format!("{subject}.limits"),
            &a["limits"],
            &b["limits"],
            &[],
            &|_| None,
        );
    }

    /// A process's own bound (`timeout_ms`, `output_limit`, a connection's start timeout):
    /// `None` is unlimited.
    pub(super) fn timeout(
        &mut self,
        subject: &str,
        what: &str,
        old: Option<u64>,
        new: Option<u64>,
    ) {
        let n = |v: Option<u64>| v.map_or(f64::INFINITY, |v| v as f64);
        self.bound(format!("{subject}.{what}"), n(old), n(new));
    }

    /// A connection's call and start timeouts.
    pub(super) fn connection_limits(&mut self, subject: &str, old: &Connection, new: &Connection) {
        self.timeout(
            subject,
            "timeout_ms",
            Some(old.timeout_ms),
            Some(new.timeout_ms),
        );
        let start = |c: &Connection| Some(c.start_timeout_ms.unwrap_or(DEFAULT_START_TIMEOUT_MS));
        self.timeout(subject, "start_timeout_ms", start(old), start(new));
    }
}

fn price(p: &Price) -> String {
    format!("input {} / output {} per million", p.input, p.output)
}

fn model_price(p: &ModelPrice) -> String {
    match p.cached {
        Some(c) => format!(
            "input {} / output {} / cached {} per million",
            p.input, p.output, c
        ),
        None => format!("input {} / output {} per million", p.input, p.output),
    }
}
