//! Signature checks shared by the platforms, and this process's memory of deliveries accepted.
//!
//! Every comparison involving a secret is constant-time: HMACs through [`Mac::verify_slice`],
//! shared tokens as SHA-256 digests (so not even their length leaks). Timestamps are checked
//! against a window in both directions, so a captured request cannot be replayed later.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ChannelError;
use super::header;

/// The header `name` that carries a request's signature (or secret): a 401 when it is missing or
/// empty.
pub(crate) fn signature_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<&'a str, ChannelError> {
    header(headers, name)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ChannelError::unauthorized(format!("The `{name}` header is missing.")))
}

/// Checks that `presented_hex` is the HMAC-SHA256 of `parts` with `key`: a 401 saying
/// `mismatch` when it is not.
pub(crate) fn check_hmac_hex(
    key: &[u8],
    parts: &[&[u8]],
    presented_hex: &str,
    mismatch: &str,
) -> Result<(), ChannelError> {
    if verify_hmac_hex(key, parts, presented_hex) {
        Ok(())
    } else {
        Err(ChannelError::unauthorized(mismatch))
    }
}

/// HMAC-SHA256 of the concatenation of `parts` with `key`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        // HMAC takes keys of any length; this branch cannot be reached.
        Err(_) => Vec::new(),
    }
}

/// Whether `presented_hex` is the HMAC-SHA256 of `parts` with `key`, compared in constant time.
pub(crate) fn verify_hmac_hex(key: &[u8], parts: &[&[u8]], presented_hex: &str) -> bool {
    let Ok(presented) = hex::decode(presented_hex.trim()) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    for part in parts {
        mac.update(part);
    }
    mac.verify_slice(&presented).is_ok()
}

/// Whether two shared secrets are equal, in time independent of their content and length.
pub(crate) fn same_secret(expected: &[u8], presented: &[u8]) -> bool {
    let a: [u8; 32] = Sha256::digest(expected).into();
    let b: [u8; 32] = Sha256::digest(presented).into();
    a.ct_eq(&b).into()
}

/// Checks a signed Unix timestamp (seconds) against `now`: a 401 when it is missing, not a number,
/// or more than `window` seconds away.
pub(crate) fn check_timestamp(
    value: Option<&str>,
    now: i64,
    window: i64,
    header: &str,
) -> Result<i64, ChannelError> {
    let value = value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ChannelError::unauthorized(format!("The `{header}` header is missing.")))?;
    let ts: i64 = value.parse().map_err(|_| {
        ChannelError::unauthorized(format!("The `{header}` header is not a Unix timestamp."))
    })?;
    if now.abs_diff(ts) > window.unsigned_abs() {
        return Err(ChannelError::unauthorized(format!(
            "The request timestamp is more than {window} seconds away from now: it is stale or \
             replayed (check the sender's clock)."
        )));
    }
    Ok(ts)
}

/// How long a delivery id is remembered.
const SEEN_TTL: Duration = Duration::from_secs(60 * 60);
/// At most this many delivery ids are remembered per channel.
const SEEN_MAX: usize = 10_000;

/// Delivery ids (Slack `event_id`, Telegram `update_id`) accepted recently by this process: the
/// fast path against a platform's retry arriving while the first delivery is still being
/// accepted. The store decides (it remembers every accepted delivery id with its message, across
/// restarts); this only spares it the work.
#[derive(Default)]
pub(crate) struct Seen {
    inner: Mutex<SeenInner>,
}

#[derive(Default)]
struct SeenInner {
    ids: HashSet<String>,
    order: VecDeque<(Instant, String)>,
}

impl Seen {
    /// Claims `id`: `true` the first time, `false` while it is remembered.
    pub(crate) fn claim(&self, id: &str) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return true;
        };
        let now = Instant::now();
        while let Some((at, _)) = inner.order.front() {
            if now.duration_since(*at) < SEEN_TTL && inner.order.len() < SEEN_MAX {
                break;
            }
            if let Some((_, old)) = inner.order.pop_front() {
                inner.ids.remove(&old);
            }
        }
        if !inner.ids.insert(id.to_owned()) {
            return false;
        }
        inner.order.push_back((now, id.to_owned()));
        true
    }

    /// Forgets `id` (its delivery was not accepted after all, so a retry must be taken).
    pub(crate) fn release(&self, id: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.ids.remove(id);
            inner.order.retain(|(_, i)| i != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_round_trip_and_forgery() {
        let sig = hex::encode(hmac_sha256(b"k", &[b"v0:1:", b"body"]));
        assert!(verify_hmac_hex(b"k", &[b"v0:1:body"], &sig));
        assert!(!verify_hmac_hex(b"other", &[b"v0:1:body"], &sig));
        assert!(!verify_hmac_hex(b"k", &[b"v0:1:body"], "zz"));
        assert!(!verify_hmac_hex(b"k", &[b"v0:1:body"], ""));
    }

    #[test]
    fn timestamps_outside_the_window_are_refused() {
        assert!(check_timestamp(Some("1000"), 1000 + 300, 300, "t").is_ok());
        assert!(check_timestamp(Some("1000"), 1000 + 301, 300, "t").is_err());
        assert!(check_timestamp(Some("2000"), 1000, 300, "t").is_err());
        assert!(check_timestamp(Some("x"), 1000, 300, "t").is_err());
        assert!(check_timestamp(None, 1000, 300, "t").is_err());
        assert!(check_timestamp(Some("-9223372036854775808"), i64::MAX, 300, "t").is_err());
    }

    #[test]
    fn seen_claims_once_until_released() {
        let seen = Seen::default();
        assert!(seen.claim("a"));
        assert!(!seen.claim("a"));
        seen.release("a");
        assert!(seen.claim("a"));
    }
}
