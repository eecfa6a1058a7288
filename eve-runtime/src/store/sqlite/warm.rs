//! What a server's start does so that its first turn costs what later ones do: the statements a
//! turn runs, prepared on the write connection and on the read connections before a client
//! arrives.
//!
//! Every connection parses each statement the first time it runs it (and keeps it prepared, see
//! `schema::STATEMENT_CACHE`); on a fresh server that parsing, and the first reads of the pages a
//! turn touches, land in the first turn. Here the write connection rehearses a turn's writes (a
//! session, its message, a turn, a step, events, a message) inside a savepoint it rolls back, and
//! each read connection runs a turn's reads for a session that cannot exist. Nothing is written:
//! the rehearsal is undone before its transaction commits, and the reads find nothing.

use rusqlite::Connection;
use serde_json::json;

use super::schema::open_connection;
use super::{Inner, READERS_WARMED, apply, composition, leases, reads};
use crate::store::{
    Batch, InboxRecord, Op, SessionRecord, StepRecord, StoreResult, TurnPhase, TurnRecord,
    TurnStatus, UsageTotals, now_ms,
};

/// The id the rehearsal writes under and the reads look for: not one eve makes (`wrun_…`). Were
/// a session of that id ever there, the rehearsal's insert would fail and be rolled back, and the
/// reads would only read it: nothing of it is changed.
const NO_SESSION: &str = "\u{0}warm";

/// Runs a turn's writes inside a savepoint and rolls them back, on the write connection (inside
/// its transaction).
pub(super) fn rehearse_writes(conn: &Connection) -> StoreResult<()> {
    conn.execute_batch("SAVEPOINT warm")?;
    let outcome = apply::apply(conn, turn_batch());
    conn.execute_batch("ROLLBACK TO warm; RELEASE warm")?;
    outcome?;
    // The write connection reads a session back after a step's commit.
    reads::session(conn, NO_SESSION)?;
    Ok(())
}

/// Runs a turn's point reads for a session that does not exist (each finds nothing), on a read
/// connection (outside a transaction: some of the reads take their own snapshot).
pub(super) fn rehearse_reads(conn: &Connection) -> StoreResult<()> {
    reads::drive_state(conn, NO_SESSION)?;
    reads::turn_view(conn, NO_SESSION)?;
    reads::session(conn, NO_SESSION)?;
    reads::last_turn(conn, NO_SESSION)?;
    reads::turn(conn, NO_SESSION, 1)?;
    reads::pending_inbox(conn, NO_SESSION)?;
    reads::input_requests(conn, NO_SESSION, true)?;
    reads::input_requests(conn, NO_SESSION, false)?;
    reads::tool_calls(conn, NO_SESSION, 1)?;
    reads::context(conn, NO_SESSION)?;
    reads::events(conn, NO_SESSION, 0, 1)?;
    reads::messages(conn, NO_SESSION, 0, 1)?;
    leases::lease(conn, NO_SESSION)?;
    composition::link(conn, NO_SESSION)?;
    composition::dynamic_tools(conn, NO_SESSION)?;
    composition::turn_inbox(conn, NO_SESSION, 1)?;
    composition::hook_cursors(conn, NO_SESSION)?;
    composition::has_children(conn, NO_SESSION)?;
    Ok(())
}

/// Opens `READERS_WARMED` read connections into the pool, each with the schema parsed and a
/// turn's reads prepared; stops at the first that fails or once the pool is full.
pub(super) fn open_readers(inner: &Inner) {
    for _ in 0..READERS_WARMED {
        // The first statement reads and parses the schema: done here, not in a turn.
        let Ok(conn) = open_connection(&inner.path) else {
            return;
        };
        if conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })
            .is_err()
        {
            return;
        }
        if let Err(e) = rehearse_reads(&conn) {
            tracing::debug!(error = %e, "a turn's reads were not prepared at start");
        }
        if !inner.give_back(conn) {
            return;
        }
    }
}

/// What accepting a message and a one-step turn write, in one batch.
fn turn_batch() -> Batch {
    let now = now_ms();
    let inbox = InboxRecord::new(NO_SESSION, "warm", now);
    let inbox_id = inbox.id.clone();
    let session = SessionRecord::new(
        NO_SESSION.to_owned(),
        String::new(),
        String::new(),
        None,
        now,
    );
    let turn = TurnRecord {
        session_id: NO_SESSION.to_owned(),
        seq: 1,
        status: TurnStatus::Running,
        phase: TurnPhase::Model,
        step_index: 0,
        step_started: true,
        build_hash: String::new(),
        inbox_id: Some(inbox_id.clone()),
        started_at: now,
        ended_at: None,
        stop_reason: None,
        usage: UsageTotals::default(),
    };
    let mut batch = Batch::new();
    batch.push(Op::InsertSession(session.clone()));
    batch.push(Op::InsertInbox(inbox));
    for kind in ["session.started", "turn.started", "message.appended"] {
        batch.push(Op::Event {
            session_id: NO_SESSION.to_owned(),
            kind: kind.to_owned(),
            data: json!({}),
        });
    }
    batch.push(Op::PutTurn(turn.clone()));
    batch.push(Op::ConsumeInbox {
        id: inbox_id,
        turn_seq: 1,
    });
    batch.push(Op::PutStep(StepRecord {
        session_id: NO_SESSION.to_owned(),
        turn_seq: 1,
        step_index: 0,
        model_id: String::new(),
        response: json!({}),
        at: now,
    }));
    batch.push(Op::AppendMessage {
        session_id: NO_SESSION.to_owned(),
        turn_seq: Some(1),
        kind: "assistant".to_owned(),
        body: json!({}),
    });
    batch.push(Op::PutTurn(TurnRecord {
        status: TurnStatus::Completed,
        phase: TurnPhase::Done,
        ended_at: Some(now),
        ..turn
    }));
    batch.push(Op::UpdateSession(session));
    batch
}

#[cfg(test)]
mod tests {
    use super::super::schema::{migrate, open_connection};
    use super::*;

    /// The tables a turn writes.
    const TABLES: [&str; 6] = ["sessions", "inbox", "events", "turns", "steps", "messages"];

    fn rows(conn: &Connection, table: &str) -> i64 {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    /// A new store whose first transaction ran `job` and committed.
    fn store_after(job: impl FnOnce(&Connection)) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open_connection(&dir.path().join("eve.db")).unwrap();
        migrate(&mut conn).unwrap();
        let tx = conn.transaction().unwrap();
        job(&tx);
        tx.commit().unwrap();
        (dir, conn)
    }

    /// The rehearsal runs every write of its batch (it would report the first that failed) and
    /// leaves no row behind, in the transaction it ran in nor after it commits.
    #[test]
    fn a_rehearsed_turn_leaves_nothing_behind() {
        let (_dir, conn) = store_after(|tx| {
            rehearse_writes(tx).unwrap();
            tx.execute_batch(super::super::PROBE).unwrap();
        });
        rehearse_reads(&conn).unwrap();
        for table in TABLES {
            assert_eq!(
                rows(&conn, table),
                0,
                "{table} has rows after the rehearsal"
            );
        }
        assert_eq!(
            rows(&conn, "health_probe"),
            1,
            "the transaction itself committed"
        );
    }

    /// The same batch without the savepoint's rollback writes a session, its message and its
    /// events: what the test above checks is not there is what the rehearsal writes.
    #[test]
    fn the_batch_without_its_rollback_writes_a_turn() {
        let (_dir, conn) = store_after(|tx| {
            apply::apply(tx, turn_batch()).unwrap();
        });
        for table in TABLES {
            assert!(rows(&conn, table) > 0, "{table} is empty");
        }
        assert!(reads::session(&conn, NO_SESSION).unwrap().is_some());
    }
}
