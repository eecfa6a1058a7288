//! Rows of the features' tables: schedules and their fires, composition (subagent links and
//! calls, dynamic tools), channel replies, notes, releases and their events, builds, and
//! workspace checkpoints.

use serde_json::Value;

use super::{Cell, StoredRow};
use crate::store::workspaces::tree_from_json;
use crate::store::{
    BuildInfo, ChannelReplyRecord, ChannelReplyUpdate, DynamicToolRecord, FireStatus, FireTrigger,
    NoteRecord, RELEASE_STREAM, ReleaseRecord, ReplyClaim, ReplyHeld, ScheduleFire, ScheduleState,
    Sending, StoreResult, StoredBuild, StoredEvent, SubagentCall, SubagentLink,
    WorkspaceCheckpoint,
};
// ---- schedules ----------------------------------------------------------------------------

pub(crate) const SCHEDULE_COLS: &str = "name, spec, next_fire_at, updated_at";

pub(crate) fn schedule(r: &dyn StoredRow) -> StoreResult<ScheduleState> {
    Ok(ScheduleState {
        name: r.text(0)?,
        spec: r.text(1)?,
        next_fire_at: r.int(2)?,
        updated_at: r.int(3)?,
    })
}

pub(crate) const FIRE_COLS: &str =
    "schedule, fire_at, trigger, status, session_id, detail, created_at, updated_at";

pub(crate) fn fire(r: &dyn StoredRow) -> StoreResult<ScheduleFire> {
    Ok(ScheduleFire {
        schedule: r.text(0)?,
        fire_at: r.int(1)?,
        trigger: r.state(2, FireTrigger::parse)?,
        status: r.state(3, FireStatus::parse)?,
        session_id: r.opt_text(4)?,
        detail: r.opt_text(5)?,
        created_at: r.int(6)?,
        updated_at: r.int(7)?,
    })
}

/// The values of a fire's write, updated now.
pub(crate) fn fire_values(f: &ScheduleFire, now: i64) -> Vec<Cell> {
    cells![
        &f.schedule,
        f.fire_at,
        f.trigger.as_str(),
        f.status.as_str(),
        f.session_id.as_ref(),
        f.detail.as_ref(),
        f.created_at,
        now,
    ]
}

// ---- composition --------------------------------------------------------------------------

pub(crate) const LINK_COLS: &str =
    "session_id, parent_id, call_id, root_id, agent_path, created_at";

pub(crate) fn link(r: &dyn StoredRow) -> StoreResult<SubagentLink> {
    Ok(SubagentLink {
        session_id: r.text(0)?,
        parent_id: r.text(1)?,
        call_id: r.text(2)?,
        root_id: r.text(3)?,
        agent_path: r.text(4)?,
        created_at: r.int(5)?,
    })
}

pub(crate) fn link_values(l: &SubagentLink) -> Vec<Cell> {
    cells![
        &l.session_id,
        &l.parent_id,
        &l.call_id,
        &l.root_id,
        &l.agent_path,
        l.created_at,
    ]
}

pub(crate) const SUBCALL_COLS: &str =
    "parent_id, turn_seq, call_id, child_id, inbox_id, task_id, budget, created_at";

pub(crate) fn subcall(r: &dyn StoredRow) -> StoreResult<SubagentCall> {
    Ok(SubagentCall {
        parent_id: r.text(0)?,
        turn_seq: r.count(1)?,
        call_id: r.text(2)?,
        child_id: r.text(3)?,
        inbox_id: r.text(4)?,
        task_id: r.text(5)?,
        budget: r.json(6)?,
        created_at: r.int(7)?,
    })
}

pub(crate) fn subcall_values(c: &SubagentCall) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &c.parent_id,
        c.turn_seq,
        &c.call_id,
        &c.child_id,
        &c.inbox_id,
        &c.task_id,
        Cell::json(&c.budget)?,
        c.created_at,
    ])
}

pub(crate) const DYNAMIC_TOOL_COLS: &str = "session_id, name, provider, description, input_schema, \
    provider_tool, build_hash, turn_seq, resolved_at";

pub(crate) fn dynamic_tool(r: &dyn StoredRow) -> StoreResult<DynamicToolRecord> {
    Ok(DynamicToolRecord {
        session_id: r.text(0)?,
        name: r.text(1)?,
        provider: r.text(2)?,
        description: r.text(3)?,
        input_schema: r.json(4)?,
        provider_tool: r.json(5)?,
        build_hash: r.text(6)?,
        turn_seq: r.count(7)?,
        resolved_at: r.int(8)?,
    })
}

pub(crate) fn dynamic_tool_values(t: &DynamicToolRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &t.session_id,
        &t.name,
        &t.provider,
        &t.description,
        Cell::json(&t.input_schema)?,
        Cell::json(&t.provider_tool)?,
        &t.build_hash,
        t.turn_seq,
        t.resolved_at,
    ])
}

/// The values of an observe hook's delivery cursor: session, hook, next event index, and now.
pub(crate) fn cursor_values(session_id: &str, hook: &str, delivered: u64, now: i64) -> Vec<Cell> {
    cells![session_id, hook, delivered, now]
}

/// The values of a turn's dynamic-tool resolution: session, turn, detail, and now.
pub(crate) fn resolution_values(
    session_id: &str,
    turn_seq: u64,
    detail: &Value,
    now: i64,
) -> StoreResult<Vec<Cell>> {
    Ok(cells![session_id, turn_seq, Cell::json(detail)?, now])
}

// ---- channels -----------------------------------------------------------------------------

pub(crate) const REPLY_COLS: &str = "inbox_id, channel, session_id, from_index, address, announced, done, \
    detail, owner_pid, owner_host, created_at, updated_at, owner_token, owner_expires_at, sending";

pub(crate) fn reply(r: &dyn StoredRow) -> StoreResult<ChannelReplyRecord> {
    Ok(ChannelReplyRecord {
        inbox_id: r.text(0)?,
        channel: r.text(1)?,
        session_id: r.text(2)?,
        from_index: r.count(3)?,
        address: r.json(4)?,
        announced: r.json(5)?,
        done: r.flag(6)?,
        detail: r.opt_text(7)?,
        owner_pid: r.small(8)?,
        owner_host: r.text(9)?,
        created_at: r.int(10)?,
        updated_at: r.int(11)?,
        owner_token: r.count(12)?,
        owner_expires_at: r.int(13)?,
        sending: r.opt_json(14)?,
    })
}

/// The values of a reply's insert, written now: [`REPLY_COLS`] with one value for both times
/// (the statement binds its 11th placeholder to `created_at` and `updated_at`).
pub(crate) fn reply_insert(r: &ChannelReplyRecord, now: i64) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &r.inbox_id,
        &r.channel,
        &r.session_id,
        r.from_index,
        Cell::json(&r.address)?,
        Cell::json(&r.announced)?,
        r.done,
        r.detail.as_ref(),
        r.owner_pid,
        &r.owner_host,
        now,
        r.owner_token,
        r.owner_expires_at,
        Cell::opt_json(r.sending.as_ref())?,
    ])
}

/// The values of a reply's progress: inbox id, address, announced, done, detail, and now.
pub(crate) fn reply_update(u: &ChannelReplyUpdate, now: i64) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &u.inbox_id,
        Cell::json(&u.address)?,
        Cell::json(&u.announced)?,
        u.done,
        u.detail.as_ref(),
        now,
    ])
}

/// Hands `r` to `claim`'s process: a new fencing token, a fresh hold, updated now.
pub(crate) fn take_reply(r: &mut ChannelReplyRecord, claim: &ReplyClaim, now: i64) {
    r.owner_token = r.owner_token.saturating_add(1);
    r.owner_expires_at = now.saturating_add(claim.ttl_ms);
    r.owner_pid = claim.pid;
    r.owner_host = claim.host.clone();
    r.updated_at = now;
}

/// The values of a reply taken by a new owner: inbox id, pid, host, now, token, expiry.
pub(crate) fn reply_owner(r: &ChannelReplyRecord) -> Vec<Cell> {
    cells![
        &r.inbox_id,
        r.owner_pid,
        &r.owner_host,
        r.updated_at,
        r.owner_token,
        r.owner_expires_at,
    ]
}

/// The values of a send starting under `held`: inbox id, token, what is sent, the hold's new
/// expiry, and now.
pub(crate) fn send_values(
    held: &ReplyHeld,
    sending: &Sending,
    expires: i64,
    now: i64,
) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &held.inbox_id,
        held.token,
        Cell::json(sending)?,
        expires,
        now
    ])
}

// ---- notes, releases, builds --------------------------------------------------------------

pub(crate) const NOTE_COLS: &str = "namespace, key, text, created_at, updated_at";

pub(crate) fn note(r: &dyn StoredRow) -> StoreResult<NoteRecord> {
    Ok(NoteRecord {
        namespace: r.text(0)?,
        key: r.text(1)?,
        text: r.text(2)?,
        created_at: r.int(3)?,
        updated_at: r.int(4)?,
    })
}

pub(crate) fn note_values(n: &NoteRecord) -> Vec<Cell> {
    cells![&n.namespace, &n.key, &n.text, n.created_at, n.updated_at]
}

/// A release row holds the whole record as JSON, its build and status in columns too.
pub(crate) const RELEASE_COLS: &str = "id, build_hash, status, created_at, record";

pub(crate) fn release(r: &dyn StoredRow) -> StoreResult<ReleaseRecord> {
    r.json(4)
}

pub(crate) fn release_values(r: &ReleaseRecord) -> StoreResult<Vec<Cell>> {
    Ok(cells![
        &r.id,
        &r.build_hash,
        r.status.as_str(),
        r.created_at,
        Cell::json(r)?,
    ])
}

pub(crate) const RELEASE_EVENT_COLS: &str = "idx, id, type, data, at";

pub(crate) fn release_event(r: &dyn StoredRow) -> StoreResult<StoredEvent> {
    Ok(StoredEvent {
        session_id: RELEASE_STREAM.to_owned(),
        index: r.count(0)?,
        id: r.text(1)?,
        kind: r.text(2)?,
        data: r.json(3)?,
        at: r.int(4)?,
    })
}

/// The values of a release event (in [`RELEASE_EVENT_COLS`] order).
pub(crate) fn release_event_values(e: &StoredEvent) -> StoreResult<Vec<Cell>> {
    Ok(cells![e.index, &e.id, &e.kind, Cell::json(&e.data)?, e.at])
}

pub(crate) const BUILD_COLS: &str = "hash, manifest, diagnostics, pack, bytes, created_at";

pub(crate) fn build(r: &dyn StoredRow) -> StoreResult<StoredBuild> {
    Ok(StoredBuild {
        hash: r.text(0)?,
        manifest: r.text(1)?,
        diagnostics: r.text(2)?,
        pack: r.bytes(3)?,
        created_at: r.int(5)?,
    })
}

/// The values of a build's insert, its size counted.
pub(crate) fn build_values(b: &StoredBuild) -> Vec<Cell> {
    let bytes = b.manifest.len() + b.diagnostics.len() + b.pack.len();
    cells![
        &b.hash,
        &b.manifest,
        &b.diagnostics,
        &b.pack,
        bytes as u64,
        b.created_at,
    ]
}

pub(crate) const BUILD_INFO_COLS: &str = "hash, bytes, created_at";

pub(crate) fn build_info(r: &dyn StoredRow) -> StoreResult<BuildInfo> {
    Ok(BuildInfo {
        hash: r.text(0)?,
        bytes: r.count(1)?,
        created_at: r.int(2)?,
    })
}

pub(crate) const WORKSPACE_COLS: &str = "version, tree, bytes, updated_at";

/// A session's latest workspace checkpoint.
pub(crate) fn workspace(r: &dyn StoredRow, session: &str) -> StoreResult<WorkspaceCheckpoint> {
    let (entries, dirs) = tree_from_json(&r.text(1)?)?;
    Ok(WorkspaceCheckpoint {
        session_id: session.to_owned(),
        version: r.count(0)?,
        entries,
        dirs,
        bytes: r.count(2)?,
        updated_at: r.int(3)?,
    })
}
