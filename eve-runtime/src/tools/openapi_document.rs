//! The fetcher `eve build` gives the compiler for OpenAPI documents named by URL
//! (`openapi: https://…` in `connections/NAME.yaml`, see `eve_compile::compile::openapi`).
//!
//! The URL is the author's, like the connection's `base_url`, so its guard is the same ("origin
//! only", `tools::guarded::origin_client`): the origin the URL names is reached wherever it is
//! (an internal API on loopback included), redirects stay within it with each hop checked, and
//! eve's own listeners are never reached. The answer must be a 2xx within
//! [`MAX_DOCUMENT_BYTES`], read while it streams, in at most [`FETCH_TIMEOUT`]. The compiler asks
//! from synchronous code that may run inside a Tokio runtime (`eve dev`), so each fetch runs on a
//! thread of its own with its own small runtime.

use std::time::Duration;

use eve_compile::compile::openapi::{Fetch, Fetcher, MAX_DOCUMENT_BYTES};

/// How long one document may take, connection to last byte.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The fetcher for builds run by a person (`eve build`, `eve dev`, `eve run`).
pub fn document_fetcher() -> Fetcher {
    Fetcher::new(Guarded)
}

struct Guarded;

impl Fetch for Guarded {
    fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let url = url.to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the fetch: {e}"))?;
            rt.block_on(async {
                tokio::time::timeout(FETCH_TIMEOUT, fetch(&url))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "no complete answer within {} s",
                            FETCH_TIMEOUT.as_secs()
                        ))
                    })
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the fetch stopped unexpectedly".to_owned()))
    }
}

async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let client = super::guarded::origin_client(&parsed, Vec::new())?;
    let response = client
        .get(parsed)
        .header(
            reqwest::header::ACCEPT,
            "application/json, application/yaml;q=0.9, */*;q=0.5",
        )
        .send()
        .await
        .map_err(|e| describe(&e))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("the server answered {status}"));
    }
    super::guarded::read_capped(response, MAX_DOCUMENT_BYTES)
        .await
        .map_err(|e| match e {
            super::guarded::CappedRead::TooLarge => format!(
                "the document is larger than {} MiB",
                MAX_DOCUMENT_BYTES / (1024 * 1024)
            ),
            super::guarded::CappedRead::Failed(e) => describe(&e),
        })
}

/// A request error in words, with the guard's refusal when it is one.
fn describe(error: &reqwest::Error) -> String {
    if let Some(refused) = super::guarded::refusal_in(error) {
        return refused.to_string();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
