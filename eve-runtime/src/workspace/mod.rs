//! What a session's files are outside a turn: its workspace carried between nodes, and the
//! build files its tools execute checked against what `eve build` recorded.
//!
//! - `checkpoint.rs` checkpoints a session's workspace into the store after each step that ran
//!   tools and restores it on the node where the session continues ([`Workspaces`]).
//! - `walk.rs` is the checkpoint's walk of the folder, which never follows a symlink.
//! - `checkpoint_blobs.rs` is what a file becomes in the store (its contents with every secret
//!   redacted).
//! - [`integrity`] checks every build file a tool, hook or provider will execute against the
//!   manifest's SHA-256 before it runs ([`integrity::FileChecks`]).
//!
//! - [`attachments`] stages files (uploads, tools' images) under `.eve/attachments/<sha256>/`
//!   and reads them back, beneath a handle of the workspace.
//!
//! Nothing here is process-global: a runtime creates its [`Workspaces`] (on the runtime) and its
//! [`integrity::FileChecks`] (on its build store) when it is created, so two runtimes in one
//! process never see each other's indexes, digests or verified builds. The engine calls in
//! with what each step needs (the session, its fencing token, the tool about to run) and
//! records what comes back.

pub mod attachments;
mod checkpoint;
mod checkpoint_blobs;
pub mod integrity;
mod walk;

pub(crate) use checkpoint::DEFAULT_MAX_BYTES;
pub(crate) use checkpoint::Workspaces;
