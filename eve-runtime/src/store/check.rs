//! `eve store check`: a full check of a store on demand, and what it found.
//!
//! The start-up check (`sqlite/integrity.rs`) is bounded: `quick_check` within a time limit, the
//! mark, the files. This one reads everything, once, when asked: the backend's own check of its
//! storage (SQLite's `PRAGMA integrity_check` and a scan of every stored text; PostgreSQL's
//! `amcheck` when the extension is installed), then eve's consistency checks, here and shared by
//! both backends through [`CheckReads`]: every session's events and messages are read back with
//! the runtime's own decoders and numbered without a gap up to the counts the session row keeps,
//! its turns, steps, tool calls and input requests decode, every workspace checkpoint names blobs
//! that are stored and whose contents still hash to their names, and releases, their audit events
//! and notes decode. A row that fails a read the runtime would make is a problem named by table
//! and key, never a silent skip; a problem in one session does not stop the others.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{InputRequestRecord, StepRecord, ToolCallRecord, TurnRecord};
use super::{
    MessageRecord, NoteRecord, ReleaseRecord, SessionRecord, StoreResult, StoredEvent,
    WorkspaceCheckpoint,
};

/// Problems listed per check at most (the rest are counted).
const LISTED: usize = 50;
/// Rows read at once while paging through events and messages.
const PAGE: usize = 1000;

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    /// It ran and found nothing wrong.
    Passed,
    /// It found problems.
    Failed,
    /// It could not run here (said in `detail`).
    Skipped,
}

/// One check of a store and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckItem {
    /// Short name (`integrity_check`, `events`, …).
    pub name: &'static str,
    /// How it ended.
    pub status: CheckStatus,
    /// What it covered, or why it was skipped.
    pub detail: String,
    /// What is wrong, one line each (at most [`LISTED`], then a count of the rest).
    pub problems: Vec<String>,
}

impl CheckItem {
    /// A check that ran, with `problems` (none: passed).
    pub(crate) fn ran(name: &'static str, detail: impl Into<String>, problems: Problems) -> Self {
        Self {
            name,
            status: if problems.is_empty() {
                CheckStatus::Passed
            } else {
                CheckStatus::Failed
            },
            detail: detail.into(),
            problems: problems.into_lines(),
        }
    }

    /// A check that could not run, and why.
    pub(crate) fn skipped(name: &'static str, why: impl Into<String>) -> Self {
        Self {
            name,
            status: CheckStatus::Skipped,
            detail: why.into(),
            problems: Vec::new(),
        }
    }
}

/// Problems found by one check: the first [`LISTED`] kept, the rest counted.
#[derive(Debug, Default)]
pub(crate) struct Problems {
    lines: Vec<String>,
    more: usize,
}

impl Problems {
    /// Records one problem.
    pub(crate) fn push(&mut self, line: impl Into<String>) {
        if self.lines.len() < LISTED {
            self.lines.push(line.into());
        } else {
            self.more += 1;
        }
    }

    /// Whether none was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    fn into_lines(mut self) -> Vec<String> {
        if self.more > 0 {
            self.lines
                .push(format!("… and {} more problems like these", self.more));
        }
        self.lines
    }
}

/// What was read, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CheckCounts {
    /// Sessions.
    pub sessions: u64,
    /// Events of those sessions.
    pub events: u64,
    /// Messages of those sessions.
    pub messages: u64,
    /// Workspace checkpoints.
    pub workspaces: u64,
    /// Workspace blobs read and hashed.
    pub blobs: u64,
    /// Releases.
    pub releases: u64,
}

/// What `eve store check` found in one store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreCheck {
    /// The store: its file, or its URL with the password redacted.
    pub store: String,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Every check, in the order run.
    pub checks: Vec<CheckItem>,
    /// What was read.
    pub counts: CheckCounts,
}

impl StoreCheck {
    /// An empty report for `store`.
    pub(crate) fn new(store: impl Into<String>, backend: &'static str) -> Self {
        Self {
            store: store.into(),
            backend,
            checks: Vec::new(),
            counts: CheckCounts::default(),
        }
    }

    /// Whether no check failed.
    pub fn ok(&self) -> bool {
        !self.checks.iter().any(|c| c.status == CheckStatus::Failed)
    }
}

/// The reads eve's consistency checks make, as the runtime makes them: each backend answers
/// with its own decoders (a read-only connection for SQLite, the store itself for PostgreSQL).
#[async_trait::async_trait]
pub(crate) trait CheckReads: Send + Sync {
    async fn sessions(&self) -> StoreResult<Vec<SessionRecord>>;
    async fn events(&self, session: &str, from: u64, limit: usize)
    -> StoreResult<Vec<StoredEvent>>;
    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>>;
    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>>;
    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>>;
    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>>;
    async fn input_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>>;
    async fn workspace(&self, session: &str) -> StoreResult<Option<WorkspaceCheckpoint>>;
    async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>>;
    async fn releases(&self) -> StoreResult<Vec<ReleaseRecord>>;
    async fn release_events(&self, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>>;
    async fn notes(&self) -> StoreResult<Vec<NoteRecord>>;
}

/// Every [`super::Store`] answers the checks' reads with its own methods.
#[async_trait::async_trait]
impl<S: super::Store + ?Sized> CheckReads for S {
    async fn sessions(&self) -> StoreResult<Vec<SessionRecord>> {
        super::Store::sessions(self, &super::SessionFilter::default()).await
    }
    async fn events(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<StoredEvent>> {
        super::Store::events(self, session, from, limit).await
    }
    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>> {
        super::Store::messages(self, session, from, limit).await
    }
    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
        super::Store::turn(self, session, seq).await
    }
    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
        super::Store::steps(self, session, turn).await
    }
    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>> {
        super::Store::tool_calls(self, session, turn).await
    }
    async fn input_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>> {
        super::Store::input_requests(self, session, false).await
    }
    async fn workspace(&self, session: &str) -> StoreResult<Option<WorkspaceCheckpoint>> {
        super::Store::workspace(self, session).await
    }
    async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        super::Store::blob(self, hash).await
    }
    async fn releases(&self) -> StoreResult<Vec<ReleaseRecord>> {
        super::Store::releases(self).await
    }
    async fn release_events(&self, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        super::Store::release_events(self, from, limit).await
    }
    async fn notes(&self) -> StoreResult<Vec<NoteRecord>> {
        super::Store::notes_under(self, "").await
    }
}

/// Reads a numbered series page by page (`read(from, limit)`), checking that the numbers run
/// from 0 without a gap; returns the number after the last one read. A page that cannot be read
/// is read again one item at a time, so the problem names the item, and the read goes on past
/// it.
async fn numbered<T, F, Fut>(
    what: &str,
    mut read: F,
    number: impl Fn(&T) -> u64,
    problems: &mut Problems,
) -> u64
where
    F: FnMut(u64, usize) -> Fut,
    Fut: std::future::Future<Output = StoreResult<Vec<T>>>,
{
    let mut next = 0u64;
    loop {
        let page = match read(next, PAGE).await {
            Ok(page) => page,
            Err(_) => {
                // One at a time up to the page's end: each unreadable item is a problem.
                let mut any = false;
                for at in next..next + PAGE as u64 {
                    match read(at, 1).await {
                        Ok(one) if one.is_empty() => return next.max(at),
                        Ok(_) => any = true,
                        Err(e) => {
                            any = true;
                            problems.push(format!("{what}: index {at} cannot be read: {e}"));
                        }
                    }
                }
                if !any {
                    return next;
                }
                next += PAGE as u64;
                continue;
            }
        };
        let n = page.len();
        for item in &page {
            let at = number(item);
            if at != next {
                problems.push(format!(
                    "{what}: index {at} follows index {} (a gap or a repeat)",
                    next.wrapping_sub(1)
                ));
            }
            next = at + 1;
        }
        if n < PAGE {
            return next;
        }
    }
}

/// eve's consistency checks over `store`, appended to `report`.
pub(crate) async fn consistency(store: &dyn CheckReads, report: &mut StoreCheck) {
    let sessions = match store.sessions().await {
        Ok(s) => s,
        Err(e) => {
            let mut problems = Problems::default();
            problems.push(format!("the sessions cannot be read: {e}"));
            report
                .checks
                .push(CheckItem::ran("sessions", "every session row", problems));
            return;
        }
    };
    report.counts.sessions = sessions.len() as u64;
    let mut events = Problems::default();
    let mut messages = Problems::default();
    let mut turns = Problems::default();
    let mut workspaces = Problems::default();
    for session in &sessions {
        let id = session.id.as_str();
        let read = numbered(
            &format!("session {id}: events"),
            |from, limit| store.events(id, from, limit),
            |e: &StoredEvent| e.index,
            &mut events,
        )
        .await;
        report.counts.events += read;
        if read != session.event_count {
            events.push(format!(
                "session {id}: {read} events read back, the session row counts {}",
                session.event_count
            ));
        }
        let read = numbered(
            &format!("session {id}: messages"),
            |from, limit| store.messages(id, from, limit),
            |m: &MessageRecord| m.seq,
            &mut messages,
        )
        .await;
        report.counts.messages += read;
        if read != session.message_count {
            messages.push(format!(
                "session {id}: {read} messages read back, the session row counts {}",
                session.message_count
            ));
        }
        check_turns(store, session, &mut turns).await;
        check_workspace(store, id, report, &mut workspaces).await;
    }
    report.checks.push(CheckItem::ran(
        "events",
        "every session's events decode and are numbered from 0 up to the session's count",
        events,
    ));
    report.checks.push(CheckItem::ran(
        "messages",
        "every session's messages decode and are numbered from 0 up to the session's count",
        messages,
    ));
    report.checks.push(CheckItem::ran(
        "turns",
        "every session's turns, steps, tool calls and input requests decode",
        turns,
    ));
    report.checks.push(CheckItem::ran(
        "workspaces",
        "every workspace checkpoint decodes and its blobs are stored with contents matching \
         their SHA-256",
        workspaces,
    ));
    check_releases(store, report).await;
}

async fn check_turns(store: &dyn CheckReads, session: &SessionRecord, problems: &mut Problems) {
    let id = session.id.as_str();
    for seq in 0..session.turn_count {
        match store.turn(id, seq).await {
            Ok(None) => continue,
            Ok(Some(_)) => {}
            Err(e) => {
                problems.push(format!("session {id}: turn {seq} cannot be read: {e}"));
                continue;
            }
        }
        if let Err(e) = store.steps(id, seq).await {
            problems.push(format!(
                "session {id}: the steps of turn {seq} cannot be read: {e}"
            ));
        }
        if let Err(e) = store.tool_calls(id, seq).await {
            problems.push(format!(
                "session {id}: the tool calls of turn {seq} cannot be read: {e}"
            ));
        }
    }
    if let Err(e) = store.input_requests(id).await {
        problems.push(format!(
            "session {id}: the input requests cannot be read: {e}"
        ));
    }
}

async fn check_workspace(
    store: &dyn CheckReads,
    id: &str,
    report: &mut StoreCheck,
    problems: &mut Problems,
) {
    let checkpoint = match store.workspace(id).await {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(e) => {
            problems.push(format!(
                "session {id}: the workspace checkpoint cannot be read: {e}"
            ));
            return;
        }
    };
    report.counts.workspaces += 1;
    let mut seen = std::collections::HashSet::new();
    for entry in &checkpoint.entries {
        if !seen.insert(entry.hash.as_str()) {
            continue;
        }
        match store.blob(&entry.hash).await {
            Ok(Some(data)) => {
                report.counts.blobs += 1;
                let hash = hex::encode(Sha256::digest(&data));
                if hash != entry.hash {
                    problems.push(format!(
                        "session {id}: workspace file `{}`: blob {} holds contents whose \
                         SHA-256 is {hash}",
                        entry.path, entry.hash
                    ));
                }
            }
            Ok(None) => problems.push(format!(
                "session {id}: workspace file `{}` names blob {}, which is not stored",
                entry.path, entry.hash
            )),
            Err(e) => problems.push(format!(
                "session {id}: workspace file `{}`: blob {} cannot be read: {e}",
                entry.path, entry.hash
            )),
        }
    }
}

async fn check_releases(store: &dyn CheckReads, report: &mut StoreCheck) {
    let mut problems = Problems::default();
    match store.releases().await {
        Ok(releases) => report.counts.releases = releases.len() as u64,
        Err(e) => problems.push(format!("the releases cannot be read: {e}")),
    }
    numbered(
        "release audit events",
        |from, limit| store.release_events(from, limit),
        |e: &StoredEvent| e.index,
        &mut problems,
    )
    .await;
    if let Err(e) = store.notes().await {
        problems.push(format!("the notes cannot be read: {e}"));
    }
    report.checks.push(CheckItem::ran(
        "releases",
        "releases, their audit events and the notes decode",
        problems,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_past_the_limit_are_counted() {
        let mut p = Problems::default();
        for i in 0..LISTED + 3 {
            p.push(format!("problem {i}"));
        }
        let item = CheckItem::ran("x", "y", p);
        assert_eq!(item.status, CheckStatus::Failed);
        assert_eq!(item.problems.len(), LISTED + 1);
        assert_eq!(
            item.problems.last().map(String::as_str),
            Some("… and 3 more problems like these")
        );
        assert_eq!(
            CheckItem::ran("x", "y", Problems::default()).status,
            CheckStatus::Passed
        );
    }
}
