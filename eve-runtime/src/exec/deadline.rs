//! One deadline for every outside call: a tool process, an HTTP tool request, an MCP call.
//!
//! Each of them must end, whatever the other side does; this is the one place that says how a
//! call that took too long is reported, so the model reads the same sentence for all three.

use std::future::Future;
use std::time::Duration;

/// A call ran past its deadline. Shown in milliseconds, as tool timeouts are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {} ms", .0.as_millis())]
pub struct DeadlineExceeded(pub Duration);

impl DeadlineExceeded {
    #[cfg(test)]
    /// The deadline in milliseconds, saturating.
    pub(crate) fn millis(&self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Runs `fut` until it finishes or `limit` passes.
pub async fn with_deadline<T>(
    limit: Duration,
    fut: impl Future<Output = T>,
) -> Result<T, DeadlineExceeded> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| DeadlineExceeded(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_deadline_in_milliseconds() {
        let late = DeadlineExceeded(Duration::from_millis(1500));
        assert_eq!(late.to_string(), "timed out after 1500 ms");
        assert_eq!(late.millis(), 1500);
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_cut() {
        let slow = with_deadline(Duration::from_millis(10), std::future::pending::<()>()).await;
        assert_eq!(slow, Err(DeadlineExceeded(Duration::from_millis(10))));
        let fast = with_deadline(Duration::from_secs(5), async { 7 }).await;
        assert_eq!(fast, Ok(7));
    }
}
