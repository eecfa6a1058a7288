//! The local trace store: every span the runtime sends is also kept in a SQLite file beside the
//! project's store (`.eve/traces.db`), so a developer reads traces with `eve traces` and the dev
//! console without running a collector. Bounded as eve's is: traces older than
//! `EVE_TRACES_MAX_AGE_MS` go, then the oldest while the spans kept are larger than
//! `EVE_TRACES_MAX_TOTAL_BYTES`, but the newest `EVE_TRACES_RETAIN_COUNT` traces always stay.
//! `EVE_TRACES=off` turns it off.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::Value as OtelValue;
use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::config::Local;

/// One span as kept.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSpan {
    /// The trace.
    pub trace_id: String,
    /// The span.
    pub span_id: String,
    /// Its parent (`None` for a trace's root here).
    pub parent_id: Option<String>,
    /// Its name.
    pub name: String,
    /// `internal`, `client`, …
    pub kind: String,
    /// Start, epoch microseconds.
    pub start_us: i64,
    /// End, epoch microseconds.
    pub end_us: i64,
    /// `ok`, `unset`, or `error: <message>`.
    pub status: String,
    /// Its attributes.
    pub attributes: Map<String, Value>,
    /// The session it belongs to.
    pub session_id: Option<String>,
}

/// A trace, summed up for a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceSummary {
    /// The trace.
    pub trace_id: String,
    /// Its root span's name (the earliest span's, when the root is elsewhere).
    pub name: String,
    /// The session.
    pub session_id: Option<String>,
    /// Start, epoch microseconds.
    pub start_us: i64,
    /// Duration, microseconds.
    pub duration_us: i64,
    /// Spans kept.
    pub spans: u64,
    /// Spans with an error status.
    pub errors: u64,
}

/// The store.
pub struct TraceStore {
    conn: Mutex<Connection>,
    bounds: Option<Local>,
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn json_of(value: &OtelValue) -> Value {
    match value {
        OtelValue::Bool(b) => json!(b),
        OtelValue::I64(i) => json!(i),
        OtelValue::F64(f) => json!(f),
        OtelValue::String(s) => json!(s.as_str()),
        OtelValue::Array(a) => match a {
            opentelemetry::Array::Bool(v) => json!(v),
            opentelemetry::Array::I64(v) => json!(v),
            opentelemetry::Array::F64(v) => json!(v),
            opentelemetry::Array::String(v) => {
                json!(v.iter().map(|s| s.as_str().to_owned()).collect::<Vec<_>>())
            }
            _ => json!(a.to_string()),
        },
        other => json!(other.to_string()),
    }
}

impl TraceStore {
    /// Opens (creating) the store at `bounds.path`, and sweeps it.
    pub fn open(bounds: Local) -> rusqlite::Result<Self> {
        let store = Self::open_at(&bounds.path, Some(bounds.clone()))?;
        store.sweep()?;
        Ok(store)
    }

    /// Opens the store at `path` to read it (no sweeping).
    pub fn open_read(path: &Path) -> rusqlite::Result<Self> {
        Self::open_at(path, None)
    }

    fn open_at(path: &Path, bounds: Option<Local>) -> rusqlite::Result<Self> {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS spans (
                trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT,
                name TEXT NOT NULL, kind TEXT NOT NULL, start_us INTEGER NOT NULL,
                end_us INTEGER NOT NULL, status TEXT NOT NULL, attributes TEXT NOT NULL,
                session_id TEXT, bytes INTEGER NOT NULL,
                PRIMARY KEY (trace_id, span_id));
             CREATE INDEX IF NOT EXISTS spans_start ON spans(start_us);
             CREATE INDEX IF NOT EXISTS spans_session ON spans(session_id);",
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
            bounds,
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `spans`.
    pub fn insert(&self, spans: &[SpanData]) -> rusqlite::Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut put = tx.prepare_cached(
                "INSERT OR REPLACE INTO spans (trace_id, span_id, parent_id, name, kind, start_us,
                 end_us, status, attributes, session_id, bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?;
            for span in spans {
                let mut attributes = Map::new();
                for kv in &span.attributes {
                    attributes.insert(kv.key.as_str().to_owned(), json_of(&kv.value));
                }
                let session = attributes
                    .get("eve.session.id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let attributes = Value::Object(attributes).to_string();
                let status = match &span.status {
                    Status::Ok => "ok".to_owned(),
                    Status::Unset => "unset".to_owned(),
                    Status::Error { description } => format!("error: {description}"),
                };
                let parent = (span.parent_span_id != SpanId::INVALID)
                    .then(|| span.parent_span_id.to_string());
                let name = span.name.to_string();
                let bytes = (attributes.len() + name.len() + status.len() + 80) as i64;
                put.execute(params![
                    span.span_context.trace_id().to_string(),
                    span.span_context.span_id().to_string(),
                    parent,
                    name,
                    format!("{:?}", span.span_kind).to_lowercase(),
                    micros(span.start_time),
                    micros(span.end_time),
                    status,
                    attributes,
                    session,
                    bytes,
                ])?;
            }
        }
        tx.commit()
    }

    /// Drops what the bounds do not keep.
    pub fn sweep(&self) -> rusqlite::Result<()> {
        let Some(bounds) = &self.bounds else {
            return Ok(());
        };
        let conn = self.conn();
        // The newest traces that always stay.
        let keep = "SELECT trace_id FROM spans GROUP BY trace_id ORDER BY MAX(end_us) DESC
                    LIMIT ?1";
        let cutoff = micros(SystemTime::now())
            - i64::try_from(bounds.max_age.as_micros()).unwrap_or(i64::MAX);
        conn.execute(
            &format!(
                "DELETE FROM spans WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id
                 HAVING MAX(end_us) < ?2) AND trace_id NOT IN ({keep})"
            ),
            params![bounds.retain as i64, cutoff],
        )?;
        let max = i64::try_from(bounds.max_bytes).unwrap_or(i64::MAX);
        loop {
            let total: i64 =
                conn.query_row("SELECT COALESCE(SUM(bytes), 0) FROM spans", [], |r| {
                    r.get(0)
                })?;
            if total <= max {
                break;
            }
            let oldest: Option<String> = conn
                .query_row(
                    &format!(
                        "SELECT trace_id FROM spans WHERE trace_id NOT IN ({keep})
                         GROUP BY trace_id ORDER BY MAX(end_us) ASC LIMIT 1"
                    ),
                    params![bounds.retain as i64],
                    |r| r.get(0),
                )
                .ok();
            let Some(oldest) = oldest else { break };
            conn.execute("DELETE FROM spans WHERE trace_id = ?1", params![oldest])?;
        }
        Ok(())
    }

    /// The newest `limit` traces, newest first (of `session` only, when given).
    pub fn list(&self, limit: u64, session: Option<&str>) -> rusqlite::Result<Vec<TraceSummary>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT trace_id, MIN(start_us), MAX(end_us), COUNT(*),
                    SUM(CASE WHEN status LIKE 'error%' THEN 1 ELSE 0 END),
                    (SELECT name FROM spans r WHERE r.trace_id = s.trace_id
                        ORDER BY (r.parent_id IS NULL OR r.parent_id NOT IN
                            (SELECT span_id FROM spans p WHERE p.trace_id = s.trace_id)) DESC,
                        r.start_us ASC LIMIT 1),
                    MAX(session_id)
             FROM spans s WHERE (?2 IS NULL OR session_id = ?2)
             GROUP BY trace_id ORDER BY MIN(start_us) DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map(params![limit as i64, session], |r| {
            let start: i64 = r.get(1)?;
            let end: i64 = r.get(2)?;
            Ok(TraceSummary {
                trace_id: r.get(0)?,
                start_us: start,
                duration_us: end - start,
                spans: r.get::<_, i64>(3)? as u64,
                errors: r.get::<_, i64>(4)? as u64,
                name: r.get(5)?,
                session_id: r.get(6)?,
            })
        })?;
        rows.collect()
    }

    /// Every span of trace `trace_id` (a prefix of at least 8 characters will do), by start.
    pub fn spans(&self, trace_id: &str) -> rusqlite::Result<Vec<StoredSpan>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT trace_id, span_id, parent_id, name, kind, start_us, end_us, status,
                    attributes, session_id
             FROM spans WHERE trace_id = ?1 OR (length(?1) >= 8 AND trace_id LIKE ?1 || '%')
             ORDER BY start_us ASC, end_us DESC",
        )?;
        let rows = stmt.query_map(params![trace_id], |r| {
            let attributes: String = r.get(8)?;
            Ok(StoredSpan {
                trace_id: r.get(0)?,
                span_id: r.get(1)?,
                parent_id: r.get(2)?,
                name: r.get(3)?,
                kind: r.get(4)?,
                start_us: r.get(5)?,
                end_us: r.get(6)?,
                status: r.get(7)?,
                attributes: serde_json::from_str(&attributes).unwrap_or_default(),
                session_id: r.get(9)?,
            })
        })?;
        rows.collect()
    }
}

/// The exporter that keeps spans in a [`TraceStore`].
#[derive(Clone)]
pub struct Exporter {
    store: Arc<TraceStore>,
    exports: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("local trace store")
    }
}

impl Exporter {
    /// Keeps spans in `store`.
    pub fn new(store: Arc<TraceStore>) -> Self {
        Self {
            store,
            exports: Arc::default(),
        }
    }
}

impl SpanExporter for Exporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.store
            .insert(&batch)
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        // Sweep now and then (every 64 exports), not on every batch.
        let n = self
            .exports
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n % 64 == 63 {
            self.store
                .sweep()
                .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        }
        Ok(())
    }
}
