//! Waiting for a condition instead of sleeping for a guessed time: poll it every few
//! milliseconds, and fail naming what never happened once a deadline generous enough for a
//! loaded machine has passed.

use std::time::{Duration, Instant};

/// Polls `check` every 10 ms until it returns `Some`, or panics with `what` after `limit`.
pub fn eventually<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits, without blocking the async runtime, until `ok` holds, checking every few
/// milliseconds; panics naming `what` after 20 s.
pub async fn eventually_async(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
