//! What model calls cost: the built-in price table of common models, the prices `agent.yaml`
//! adds or overrides (`prices:`), and the cost of one call's usage.
//!
//! The built-in table holds the list prices the providers published as of **2025-10** (US
//! dollars per million tokens, standard tier, no batch discount). Prices change: `agent.yaml`
//! `prices:` wins over this table, and `limits.price_per_million` (input and output only) is
//! still read for a model `prices:` does not name.

use eve_compile::{AgentConfig, ModelPrice};

use super::Usage;

/// The date of the built-in prices (see the module's header).
pub const BUILTIN_PRICES_DATE: &str = "2025-10";

/// The built-in prices: model id, input, output, cached input (per million tokens).
pub const BUILTIN_PRICES: &[(&str, f64, f64, f64)] = &[
    ("openai/gpt-5", 1.25, 10.0, 0.125),
    ("openai/gpt-5-mini", 0.25, 2.0, 0.025),
    ("openai/gpt-5-nano", 0.05, 0.40, 0.005),
    ("openai/gpt-4.1", 2.0, 8.0, 0.50),
    ("openai/gpt-4.1-mini", 0.40, 1.60, 0.10),
    ("openai/gpt-4.1-nano", 0.10, 0.40, 0.025),
    ("openai/gpt-4o", 2.50, 10.0, 1.25),
    ("openai/gpt-4o-mini", 0.15, 0.60, 0.075),
    ("openai/o3", 2.0, 8.0, 0.50),
    ("openai/o4-mini", 1.10, 4.40, 0.275),
    ("anthropic/claude-opus-4-1", 15.0, 75.0, 1.50),
    ("anthropic/claude-sonnet-4-5", 3.0, 15.0, 0.30),
    ("anthropic/claude-sonnet-4", 3.0, 15.0, 0.30),
    ("anthropic/claude-haiku-4-5", 1.0, 5.0, 0.10),
    ("anthropic/claude-3-5-haiku", 0.80, 4.0, 0.08),
];

/// The price of `model_id` for an agent configured with `config`: its `prices:` entry, else
/// `limits.price_per_million`, else the built-in table; `None` when nobody knows it.
pub fn price_of(config: &AgentConfig, model_id: &str) -> Option<ModelPrice> {
    if let Some(price) = config.prices.get(model_id) {
        return Some(*price);
    }
    if let Some(p) = config.limits.price_per_million {
        return Some(ModelPrice {
            input: p.input,
            output: p.output,
            cached: None,
        });
    }
    builtin(model_id)
}

/// The built-in price of `model_id` (a dated snapshot suffix, `-2025-04-14`, is ignored).
pub fn builtin(model_id: &str) -> Option<ModelPrice> {
    let found = |id: &str| {
        BUILTIN_PRICES
            .iter()
            .find(|(m, ..)| *m == id)
            .map(|&(_, input, output, cached)| ModelPrice {
                input,
                output,
                cached: Some(cached),
            })
    };
    if let Some(price) = found(model_id) {
        return Some(price);
    }
    // `openai/gpt-4.1-2025-04-14`, `anthropic/claude-sonnet-4-5-20250929`: drop trailing
    // all-digit segments one at a time.
    let mut cut = model_id;
    while let Some((head, tail)) = cut.rsplit_once('-') {
        if tail.is_empty() || !tail.chars().all(|c| c.is_ascii_digit()) {
            break;
        }
        cut = head;
        if let Some(price) = found(cut) {
            return Some(price);
        }
    }
    None
}

/// What `usage` costs at `price`, in US dollars: input tokens read from the cache at the cached
/// price (the input price when none is given), the rest of the input and the output at theirs.
pub fn cost(price: &ModelPrice, usage: &Usage) -> f64 {
    let cached = usage.cache_read_tokens.min(usage.input_tokens);
    let fresh = usage.input_tokens - cached;
    (fresh as f64 * price.input
        + cached as f64 * price.cached.unwrap_or(price.input)
        + usage.output_tokens as f64 * price.output)
        / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_cost_the_cached_price() {
        let price = builtin("openai/gpt-4.1").unwrap();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
            cache_read_tokens: 400_000,
            estimated: false,
        };
        let expected = 0.6 * 2.0 + 0.4 * 0.5 + 8.0;
        assert!((cost(&price, &usage) - expected).abs() < 1e-9);
        assert_eq!(builtin("openai/gpt-4.1-2025-04-14"), Some(price));
        assert_eq!(
            builtin("anthropic/claude-sonnet-4-5-20250929").map(|p| p.input),
            Some(3.0)
        );
        assert_eq!(builtin("openai/unknown-model"), None);
    }
}
