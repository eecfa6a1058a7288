//! `web:` in `agent.yaml`: the defaults when absent, each key read, a search provider with its
//! endpoint and key variable, and every mistake a coded diagnostic naming the file and the key.

use eve_compile::{SearchProvider, Web, WebSearch};

use crate::support::TestAgent;

fn web_of(yaml: &str) -> (Web, Vec<String>) {
    let agent = TestAgent::minimal().file("agent.yaml", yaml);
    let checked = agent.check_mem();
    (
        checked.output.manifest.agent.config.web.clone(),
        checked.errors(),
    )
}

#[test]
fn web_defaults_to_the_public_internet_and_no_search() {
    let (web, errors) = web_of("model: mock/echo\n");
    assert_eq!(errors, Vec::<String>::new());
    assert_eq!(web, Web::default());
    assert!(web.public && web.allow.is_empty() && web.search.is_none());
    assert_eq!((web.max_bytes, web.timeout_ms), (2 * 1024 * 1024, 30_000));
}

#[test]
fn web_reads_its_lists_caps_and_provider() {
    let (web, errors) = web_of(
        "web:\n  public: false\n  allow: [\"127.0.0.1:8080\", 10.20.0.0/16, \"*.corp.example\"]\n  \
         deny: [ads.example]\n  max_bytes: 4096\n  timeout: 5s\n  \
         search: {provider: searxng, url: \"http://10.20.0.5:8888\", max_results: 50}\n",
    );
    assert_eq!(errors, Vec::<String>::new());
    assert!(!web.public);
    assert_eq!(
        web.allow,
        ["127.0.0.1:8080", "10.20.0.0/16", "*.corp.example"]
    );
    assert_eq!(web.deny, ["ads.example"]);
    assert_eq!((web.max_bytes, web.timeout_ms), (4096, 5000));
    assert_eq!(
        web.search,
        Some(WebSearch {
            provider: SearchProvider::Searxng,
            url: Some("http://10.20.0.5:8888".to_owned()),
            key_env: None,
            max_results: 20,
        })
    );
    let (web, errors) = web_of("web:\n  search: {provider: brave, key_env: MY_BRAVE}\n");
    assert_eq!(errors, Vec::<String>::new());
    let search = web.search.unwrap();
    assert_eq!(
        (
            search.provider,
            search.key_env.as_deref(),
            search.max_results
        ),
        (SearchProvider::Brave, Some("MY_BRAVE"), 5)
    );
}

#[test]
fn web_mistakes_are_coded_diagnostics() {
    for (yaml, expected) in [
        ("web: true\n", "`web` must be a mapping"),
        (
            "web:\n  allow: [\"https://example.com\"]\n",
            "a URL is not a host",
        ),
        (
            "web:\n  deny: [10.0.0.0/33]\n",
            "`/33` is not a prefix length from 0 to 32",
        ),
        (
            "web:\n  allow: [banana/8]\n",
            "`banana` before `/` is not an IP address",
        ),
        ("web:\n  search: {provider: google}\n", "provider"),
        (
            "web:\n  search: {url: \"https://x.example\"}\n",
            "names no `provider`",
        ),
        (
            "web:\n  search: {provider: searxng}\n",
            "`provider: searxng` needs the instance's `url`",
        ),
        (
            "web:\n  search: {provider: tavily, key_env: \"tvly-secret value\"}\n",
            "not an environment variable name",
        ),
    ] {
        let (_, errors) = web_of(yaml);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("agent/agent.yaml") && e.contains(expected)),
            "{yaml}: {errors:?}"
        );
    }
    let agent = TestAgent::minimal()
        .file("subagents/helper/instructions.md", "Help.\n")
        .file(
            "subagents/helper/agent.yaml",
            "description: Helps.\nweb: {public: false}\n",
        );
    let errors = agent.check_mem().errors();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("subagents/helper/agent.yaml")
                && e.contains("the web rules are the whole agent's")),
        "{errors:?}"
    );
}
