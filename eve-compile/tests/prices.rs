//! `prices:` in `agent.yaml`: each model's input, output and cached price read, every mistake a
//! coded diagnostic, and the capability delta: a price added, removed or lowered counts less cost
//! against `max_cost_usd`, so it widens (a self-change cannot lower its own bill unseen).

use eve_compile::ModelPrice;
use eve_compile::delta::{ChangeKind, capability_delta};

use crate::support::TestAgent;

fn prices_of(yaml: &str) -> (eve_compile::Manifest, Vec<String>) {
    let checked = TestAgent::minimal().file("agent.yaml", yaml).check_mem();
    (checked.output.manifest.clone(), checked.errors())
}

#[test]
fn prices_are_read_per_model() {
    let (manifest, errors) = prices_of(
        "prices:\n  openai/gpt-4.1: {input: 2.0, output: 8.0, cached: 0.5}\n  \
         openai-compatible/llama: {input: 0.6, output: 0.6}\n",
    );
    assert_eq!(errors, Vec::<String>::new());
    let prices = &manifest.agent.config.prices;
    assert_eq!(
        prices.get("openai/gpt-4.1"),
        Some(&ModelPrice {
            input: 2.0,
            output: 8.0,
            cached: Some(0.5)
        })
    );
    assert_eq!(prices["openai-compatible/llama"].cached, None);
    // No `prices:`: nothing in the manifest (its hash is what it was).
    let (manifest, _) = prices_of("model: mock/echo\n");
    assert!(manifest.agent.config.prices.is_empty());
}

#[test]
fn price_mistakes_are_coded_diagnostics() {
    for (yaml, expected) in [
        ("prices: 3\n", "`prices` must be a map"),
        (
            "prices:\n  openai/gpt-4.1: {input: 2.0}\n",
            "the prices of `openai/gpt-4.1` need",
        ),
        (
            "prices:\n  openai/gpt-4.1: {input: -1, output: 2}\n",
            "the prices of `openai/gpt-4.1` need",
        ),
    ] {
        let (_, errors) = prices_of(yaml);
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{yaml}: {errors:#?}"
        );
    }
}

#[test]
fn a_lower_price_widens_the_delta() {
    let (base, _) = prices_of("prices:\n  openai/gpt-4.1: {input: 2.0, output: 8.0}\n");
    let (lower, _) = prices_of("prices:\n  openai/gpt-4.1: {input: 0.0, output: 8.0}\n");
    let (none, _) = prices_of("model: mock/echo\n");
    let kinds = |a: &eve_compile::Manifest, b: &eve_compile::Manifest| {
        capability_delta(Some(a), b)
            .changes
            .into_iter()
            .filter(|c| c.subject.starts_with("prices."))
            .map(|c| (c.kind, c.widening))
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&base, &lower), [(ChangeKind::LimitLoosened, true)]);
    assert_eq!(kinds(&lower, &base), [(ChangeKind::LimitTightened, false)]);
    assert_eq!(kinds(&base, &none), [(ChangeKind::LimitLoosened, true)]);
    assert_eq!(kinds(&none, &base), [(ChangeKind::LimitLoosened, true)]);
    assert_eq!(kinds(&base, &base), []);
}
