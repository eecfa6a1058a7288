//! What a session workspace file becomes in the store: its contents with every secret the
//! runtime knows shown as `${NAME}`.
//!
//! A tool given a secret through its `env:` allowlist may write it into a workspace file (a
//! config file, a log, a `curl --trace`). Workspace checkpoints carry those files into the store
//! (`checkpoint.rs`), where every node of a fleet, every backup and every `pg_dump` would then
//! hold the value. So the contents are redacted at the point where a file becomes a blob, with
//! the runtime's [`Secrets`] (the same values, in the same forms, as every other write to the
//! store), and the blob is addressed by the SHA-256 of what is stored. The local file keeps the
//! value; a workspace restored from the store (on another node, or after the local copy was lost)
//! has `${NAME}` where the value was, which is what the session's tools then read. Redaction
//! rather than encryption: a key the store does not hold would have to travel to every node
//! beside the store, and a lost key would lose the workspaces; the runtime already holds the
//! values, and a tool that needs one gets it from its environment, not from a file.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::redact::Secrets;

impl crate::engine::Runtime {
    /// Tests only: this runtime's checkpoints store workspace files unredacted, as before, so a
    /// test can show a secret reaching the store without the redaction. No setting reaches it.
    #[doc(hidden)]
    pub fn set_checkpoint_secrets_in_clear_for_tests(&self, on: bool) {
        self.inner.workspaces.in_clear.store(on, Ordering::Relaxed);
    }
}

/// The secrets a checkpoint redacts from workspace files: the runtime's `secrets` (`None`: the
/// test switch above, `in_clear`).
pub(super) fn redactor(in_clear: bool, secrets: &Arc<Secrets>) -> Option<Arc<Secrets>> {
    (!in_clear).then(|| secrets.clone())
}

/// The blob a file's `contents` are stored as.
pub(super) fn blob(secrets: Option<&Secrets>, contents: Vec<u8>) -> Vec<u8> {
    match secrets {
        Some(secrets) => secrets.redact_bytes(contents),
        None => contents,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_holding_a_secret_becomes_a_blob_without_it() {
        let secrets = Secrets::new();
        secrets.learn("API_TOKEN", "tok-5be1c0ffee");
        let file = b"token=tok-5be1c0ffee\n\x00\xffbinary tok-5be1c0ffee".to_vec();
        let stored = blob(Some(&secrets), file.clone());
        assert_eq!(
            stored,
            b"token=${API_TOKEN}\n\x00\xffbinary ${API_TOKEN}".to_vec()
        );
        assert_eq!(
            blob(None, file.clone()),
            file,
            "the test switch stores it as is"
        );
        let plain = b"nothing secret".to_vec();
        assert_eq!(blob(Some(&secrets), plain.clone()), plain);
    }
}
