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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::redact::Secrets;

/// State folders whose checkpoints store files as they are (the behaviour before checkpoints
/// were redacted); set only by the test that shows the redaction is what keeps secrets out.
static IN_CLEAR: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Tests only: the checkpoints of the project whose state folder is `state_dir` store workspace
/// files unredacted, as before, so a test can show a secret reaching the store without the
/// redaction. Nothing else calls this; no setting reaches it.
#[doc(hidden)]
pub fn checkpoint_secrets_in_clear_for_tests(state_dir: &Path) {
    let dir = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    IN_CLEAR
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(dir);
}

/// The secrets a checkpoint of the workspaces under `state_dir` redacts from their files: the
/// runtime's `secrets` (`None`: the test switch above).
pub(super) fn redactor(state_dir: &Path, secrets: &Arc<Secrets>) -> Option<Arc<Secrets>> {
    let clear = IN_CLEAR.lock().unwrap_or_else(PoisonError::into_inner);
    if !clear.is_empty() {
        let dir = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        if clear.contains(&dir) {
            return None;
        }
    }
    Some(secrets.clone())
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
