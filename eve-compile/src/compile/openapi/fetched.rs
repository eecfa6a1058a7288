//! OpenAPI documents named by URL (`openapi: https://api.example.com/openapi.json`): fetched each
//! time the build runs, by the [`Fetch`] its caller gives (the CLI's is eve-runtime's guarded
//! client; the compiler itself never opens a connection), kept in `.eve/cache/openapi/`, and
//! pinned in the build by their SHA-256 (`OpenApiCall::document_sha256`, part of the manifest and
//! so of the build's hash): a build always says which bytes its tools came from, and a changed
//! document makes a new build whose capability delta shows what changed.
//!
//! When the fetch fails (the API is down, the laptop offline) the last copy fetched is used, with
//! a W013 naming the failure and the copy's age; with no copy the build fails (E061). A build
//! without a fetcher (a self-change staged by the runtime: an agent never makes the server fetch
//! a URL of its choosing) uses the cached copy only.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The largest document a build takes (a fetcher should stop reading past it).
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// Fetches a document a build names by URL. `Err` says why, in words for a diagnostic.
pub trait Fetch: Send + Sync {
    /// The document's bytes (at most [`MAX_DOCUMENT_BYTES`]).
    fn fetch(&self, url: &str) -> Result<Vec<u8>, String>;
}

/// A [`Fetch`] the build may use (`Project::fetch`, `Options::fetch`).
#[derive(Clone)]
pub struct Fetcher(pub Arc<dyn Fetch>);

impl Fetcher {
    /// Wraps `fetch`.
    pub fn new(fetch: impl Fetch + 'static) -> Self {
        Self(Arc::new(fetch))
    }
}

impl fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fetcher")
    }
}

impl PartialEq for Fetcher {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Fetcher {}

/// Whether `openapi:` names a URL rather than a file of the agent folder.
pub(super) fn is_url(location: &str) -> bool {
    location.starts_with("http://") || location.starts_with("https://")
}

/// A document obtained for a build.
pub(super) struct Document {
    pub text: String,
    pub sha256: String,
    /// Set when the fetch failed and the cached copy is used: why, and when the copy was fetched
    /// (milliseconds since the epoch).
    pub stale: Option<(String, u64)>,
}

/// What `.eve/cache/openapi/<key>.json` holds for one URL.
#[derive(Serialize, Deserialize)]
struct Cached {
    url: String,
    sha256: String,
    fetched_at_ms: u64,
    text: String,
}

fn cache_path(cache_dir: &Path, url: &str) -> PathBuf {
    let key = hex::encode(Sha256::digest(url.as_bytes()));
    cache_dir
        .join("cache")
        .join("openapi")
        .join(format!("{}.json", &key[..24]))
}

fn read_cached(cache_dir: Option<&Path>, url: &str) -> Option<Cached> {
    let bytes = std::fs::read(cache_path(cache_dir?, url)).ok()?;
    let cached: Cached = serde_json::from_slice(&bytes).ok()?;
    // A copy that is not what it says (edited, or another URL's) is no copy.
    (cached.url == url && sha256_hex(cached.text.as_bytes()) == cached.sha256).then_some(cached)
}

/// Keeps `cached` for the next build; a cache that cannot be written is no cache.
fn write_cached(cache_dir: &Path, cached: &Cached) {
    let path = cache_path(cache_dir, &cached.url);
    let Some(dir) = path.parent() else { return };
    let Ok(bytes) = serde_json::to_vec(cached) else {
        return;
    };
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    let _ = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The document at `url`: fetched now when there is a fetcher, else (or when the fetch fails) the
/// copy cached by an earlier build. `Err` says why there is neither.
pub(super) fn document(
    url: &str,
    fetch: Option<&Fetcher>,
    cache_dir: Option<&Path>,
) -> Result<Document, String> {
    let failure = match fetch {
        None => "this build fetches nothing (documents named by URL are fetched by `eve build`)"
            .to_owned(),
        Some(fetcher) => match fetcher.0.fetch(url).and_then(checked) {
            Ok(text) => {
                let sha256 = sha256_hex(text.as_bytes());
                if let Some(dir) = cache_dir {
                    let unchanged = read_cached(Some(dir), url).is_some_and(|c| c.sha256 == sha256);
                    if !unchanged {
                        write_cached(
                            dir,
                            &Cached {
                                url: url.to_owned(),
                                sha256: sha256.clone(),
                                fetched_at_ms: now_ms(),
                                text: text.clone(),
                            },
                        );
                    }
                }
                return Ok(Document {
                    text,
                    sha256,
                    stale: None,
                });
            }
            Err(e) => e,
        },
    };
    match read_cached(cache_dir, url) {
        Some(cached) => Ok(Document {
            text: cached.text,
            sha256: cached.sha256,
            stale: fetch.is_some().then_some((failure, cached.fetched_at_ms)),
        }),
        None => Err(failure),
    }
}

/// The fetched bytes as a document's text: UTF-8, within the size limit.
fn checked(bytes: Vec<u8>) -> Result<String, String> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(format!(
            "the document is larger than {} MiB",
            MAX_DOCUMENT_BYTES / (1024 * 1024)
        ));
    }
    String::from_utf8(bytes).map_err(|_| "the document is not UTF-8 text".to_owned())
}

/// When a copy was fetched, as people read it (`2026-12-06 21:40 UTC`).
pub(super) fn shown_time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || "an unknown time".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
        )
}
