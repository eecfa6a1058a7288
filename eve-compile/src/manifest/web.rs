//! `web:` in `agent.yaml`, resolved: where the built-in `web_fetch` may go (the public internet
//! unless the lists narrow or widen it), its caps, and the provider of `web_search`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bytes `web_fetch` downloads of one page at most by default: 2 MiB.
pub const DEFAULT_WEB_MAX_BYTES: u64 = 2 * 1024 * 1024;
/// Time one `web_fetch` or `web_search` call has by default: 30 s.
pub const DEFAULT_WEB_TIMEOUT_MS: u64 = 30_000;
/// Results `web_search` returns by default.
pub const DEFAULT_SEARCH_RESULTS: u32 = 5;

/// `web:`: the egress rules and caps of `web_fetch`, and `web_search`'s provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Web {
    /// Whether any public address may be fetched (`public: true`, the default); `false` leaves
    /// only what `allow` lists.
    pub public: bool,
    /// Destinations reached even when they are guarded (loopback, private ranges, link-local,
    /// metadata, this host's addresses): `host`, `host:port`, `*.suffix`, an IP address, or a CIDR
    /// range (`10.1.0.0/16`) matched against the addresses a name resolves to. A `*.suffix` entry
    /// widens `public: false` to those names but never to guarded addresses. eve's own listeners
    /// are never reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Destinations never reached, whatever else says: the same forms as `allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Bytes of one page downloaded at most; the rest is never read.
    pub max_bytes: u64,
    /// Time one call has, in milliseconds (connection, redirects and body together).
    pub timeout_ms: u64,
    /// The provider of `web_search`; the tool is offered only when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<WebSearch>,
}

impl Default for Web {
    fn default() -> Self {
        Self {
            public: true,
            allow: Vec::new(),
            deny: Vec::new(),
            max_bytes: DEFAULT_WEB_MAX_BYTES,
            timeout_ms: DEFAULT_WEB_TIMEOUT_MS,
            search: None,
        }
    }
}

impl Web {
    /// Whether nothing differs from the defaults (so the manifest leaves `web` out).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// `web.search`: which search API `web_search` asks, and with which key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearch {
    /// The provider.
    pub provider: SearchProvider,
    /// The endpoint: required for `searxng` (the instance's base URL), the provider's own API
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The environment variable holding the key (`BRAVE_API_KEY`, `TAVILY_API_KEY` by default;
    /// SearXNG needs none unless this is set, then it is sent as a bearer token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Results returned at most (1 to 20).
    pub max_results: u32,
}

/// A search API `web_search` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchProvider {
    /// Brave Search API (`GET /res/v1/web/search`, `X-Subscription-Token`).
    Brave,
    /// Tavily (`POST /search`, bearer key).
    Tavily,
    /// A SearXNG instance's JSON API (`GET /search?format=json`).
    Searxng,
}

impl SearchProvider {
    /// The name as written in `agent.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Brave => "brave",
            Self::Tavily => "tavily",
            Self::Searxng => "searxng",
        }
    }

    /// The environment variable read for the key when `key_env` says nothing.
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            Self::Brave => Some("BRAVE_API_KEY"),
            Self::Tavily => Some("TAVILY_API_KEY"),
            Self::Searxng => None,
        }
    }

    /// The endpoint asked when `url` says nothing.
    pub fn default_url(self) -> Option<&'static str> {
        match self {
            Self::Brave => Some("https://api.search.brave.com/res/v1/web/search"),
            Self::Tavily => Some("https://api.tavily.com/search"),
            Self::Searxng => None,
        }
    }
}
