//! Durable notes: short texts kept in a namespace, outside any one turn. The agent's memory lives
//! here (`memory:agent:…`, `memory:user:…`, `memory:session:…`, written by the `memory` tool and
//! `eve memory`), and so does what a session fixes at its start (`probe:<session>`, the
//! environment probe), so a resumed session, or one continued on another node, reads the same text.
//!
//! Notes are written with [`NoteOp`]s inside a [`super::Batch`], atomically with the events that
//! announce them, and read by namespace ([`super::Store::notes`]) or by namespace prefix
//! ([`super::Store::notes_under`]).

use serde::{Deserialize, Serialize};

/// One note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteRecord {
    /// Where it belongs (`memory:agent:<agent>`, `probe:<session>`, …).
    pub namespace: String,
    /// Its id within the namespace.
    pub key: String,
    /// The text.
    pub text: String,
    /// First written, ms since the epoch.
    pub created_at: i64,
    /// Last written, ms since the epoch.
    pub updated_at: i64,
}

/// A write to the notes.
#[derive(Debug, Clone)]
pub enum NoteOp {
    /// Inserts a note or replaces its text (its `created_at` is kept when it exists).
    Put(NoteRecord),
    /// Removes one note (nothing when it does not exist).
    Delete {
        /// Namespace.
        namespace: String,
        /// Key.
        key: String,
    },
    /// Removes every note of a namespace.
    Clear {
        /// Namespace.
        namespace: String,
    },
}
