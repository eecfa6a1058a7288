//! `GET /eve/v1/session/:id/stream`: a session's events as NDJSON (eve's wire format) or as
//! Server-Sent Events, bounded or following live.
//!
//! Both formats carry the same stored events in the same order with eve's envelope. A bounded read
//! (`follow=false`) returns the events stored when the request arrived and ends; its last index is
//! sent as `x-eve-stream-tail-index`. A follow sends the stored events from `startIndex`, then live
//! ones, and ends once the session comes to rest: after a `session.waiting` or `turn.waiting`
//! that is the newest stored event while the session has no work left (no accepted message, no
//! answered input, no running turn). A follow that starts at rest waits for the next turn, so a
//! reconnecting client never spins. Every open stream ends when the server shuts down.
//!
//! With `?streamControlVersion=1` (eve's stream control, which its client asks for whenever it
//! reconnects by itself) an NDJSON follow also sends a heartbeat (an empty line) after a quiet
//! interval, and ends after its lease (60 s) with the control line
//! `{"$eve":"stream.lease-ended","version":1}`: the client reconnects from its cursor, so no
//! reader is held open forever by a host that does not report a closed connection.
//!
//! A read that fails (a damaged page, a stored value that does not decode) is never an empty
//! stream: before the response starts, the first read is made and its failure is the route's
//! error (`500 store_damaged`); once events were sent, the stream ends with a `stream.error`
//! line (`{"type": "stream.error", "data": {"code", "error"}, "meta": {"at"}}`, also the `data:`
//! of an SSE message; an `error` chunk in the AI SDK stream). Both are logged as errors.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::Stream;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::ui::UiStream;
use crate::engine::{EventFollower, Runtime, RuntimeError, RuntimeResult, events as ev};
use crate::store::{SessionStatus, StoredEvent};

/// eve's stream format version, sent as `x-eve-stream-version`.
pub const STREAM_VERSION: &str = "26";
/// Longest quiet interval of an NDJSON stream under stream control before a heartbeat line (eve's
/// client gives up on a stream idle for 15 s).
pub(crate) const CONTROL_HEARTBEAT: Duration = Duration::from_secs(10);
/// The control line that ends a stream's lease (`streamControlVersion=1`).
pub(crate) const LEASE_ENDED: &str = "{\"$eve\":\"stream.lease-ended\",\"version\":1}\n";
/// Events read from the store at once by a bounded read.
const PAGE: u64 = 256;

/// Events after which a session may be at rest.
pub fn is_rest_point(kind: &str) -> bool {
    matches!(
        kind,
        ev::SESSION_WAITING | ev::TURN_WAITING | "session.completed" | "session.failed"
    )
}

/// Whether the session is at rest right after the event at `index`: it is the newest stored
/// event and nothing is left to do until a client acts. A failed read counts as rest.
pub async fn at_rest(runtime: &Runtime, session: &str, index: u64) -> bool {
    rest_after(runtime, session, index).await.unwrap_or(true)
}

/// [`at_rest`], with a failed read of the session said.
async fn rest_after(runtime: &Runtime, session: &str, index: u64) -> RuntimeResult<bool> {
    let Some(record) = runtime.session(session).await? else {
        return Ok(true);
    };
    if record.event_count > index + 1 || record.cancel_requested {
        return Ok(false);
    }
    Ok(match record.status {
        SessionStatus::Running => false,
        SessionStatus::Waiting => !runtime.pending_inputs(session).await?.is_empty(),
        SessionStatus::Idle => {
            let empty = runtime.store().pending_inbox(session).await?.is_empty();
            if !empty {
                return Ok(false);
            }
            // The record and the inbox are two reads: a turn that started between them took the
            // message out of the inbox in the same commit that stored its first events, so a
            // second look at the record tells a real rest from a turn just begun.
            match runtime.session(session).await? {
                Some(again) => {
                    again.event_count == record.event_count && again.status == SessionStatus::Idle
                }
                None => true,
            }
        }
    })
}

/// Why a stream ended before its end: the error body the route would have answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFailure {
    /// Machine-readable code (`store_damaged`, `internal_error`).
    pub(crate) code: &'static str,
    /// What went wrong and what to do, as the client sees it.
    pub error: String,
}

impl StreamFailure {
    /// Logs `error` (a read for the stream of `stream`, a session id, failed) and says it as the
    /// client sees it.
    pub(crate) fn of(stream: &str, error: RuntimeError) -> Self {
        tracing::error!(stream, error = %error, "a read for an event stream failed; the stream ends with an error");
        let api = ApiError::from(error);
        Self {
            code: api.code(),
            error: api.to_string(),
        }
    }

    /// The `stream.error` envelope.
    fn wire(&self) -> serde_json::Value {
        serde_json::json!({
            "type": STREAM_ERROR,
            "data": {"code": self.code, "error": self.error},
            "meta": {"at": crate::store::rfc3339(crate::store::now_ms())},
        })
    }

    /// The last line of an NDJSON stream, or the last message of an SSE one.
    pub(crate) fn bytes(&self, sse: bool) -> Bytes {
        if sse {
            Bytes::from(format!("data: {}\n\n", self.wire()))
        } else {
            Bytes::from(format!("{}\n", self.wire()))
        }
    }
}

/// The last line of a stream a failed read ended: not a stored event (no `meta.id`, no index).
pub const STREAM_ERROR: &str = "stream.error";

/// What a cursor produced.
pub enum Next {
    /// An event.
    Event(StoredEvent),
    /// Nothing for a heartbeat interval.
    Tick,
    /// The stream is over.
    End,
    /// A read failed (logged already): the stream ends with this error.
    Failed(StreamFailure),
}

enum Mode {
    Bounded {
        next: u64,
        end: u64,
        buffer: VecDeque<StoredEvent>,
    },
    Follow {
        follower: Box<EventFollower>,
        /// An event taken from the follower and not yet returned: kept here while the rest
        /// check runs, so a caller that drops [`EventCursor::next`] midway loses nothing.
        pending: Option<StoredEvent>,
    },
    Done,
}

/// Reads a session's events, bounded or following, ending at rest or on shutdown.
pub struct EventCursor {
    runtime: Runtime,
    session: String,
    /// Index of the first event it reads.
    start: u64,
    mode: Mode,
    shutdown: CancellationToken,
}

impl EventCursor {
    /// Stored events with indexes in `start..end`, then the end.
    pub(crate) fn bounded(
        runtime: Runtime,
        session: String,
        start: u64,
        end: u64,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            runtime,
            session,
            start,
            mode: Mode::Bounded {
                next: start,
                end,
                buffer: VecDeque::new(),
            },
            shutdown,
        }
    }

    /// Events from `start` on, stored then live, until the session is at rest.
    pub fn follow(
        runtime: Runtime,
        session: String,
        start: u64,
        shutdown: CancellationToken,
    ) -> Self {
        let follower = runtime.follow(&session, start);
        Self {
            runtime,
            session,
            start,
            mode: Mode::Follow {
                follower: Box::new(follower),
                pending: None,
            },
            shutdown,
        }
    }

    /// Makes the cursor's first read of the store now, so its failure can be the route's
    /// answer instead of an empty stream; the events read are the first [`Self::next`] returns.
    pub(crate) async fn prefetch(&mut self) -> RuntimeResult<()> {
        match &mut self.mode {
            Mode::Done => Ok(()),
            Mode::Bounded { next, end, buffer } => {
                if buffer.is_empty() && *next < *end {
                    let limit = usize::try_from((*end - *next).min(PAGE)).unwrap_or(256);
                    let events = self.runtime.events(&self.session, *next, limit).await?;
                    buffer.extend(events.into_iter().filter(|e| e.index < *end));
                }
                Ok(())
            }
            Mode::Follow { follower, .. } => follower.prefetch().await,
        }
    }

    /// The next event; [`Next::Tick`] after `heartbeat` without one (when given). Cancel-safe:
    /// dropping the future before it completes loses no event.
    pub async fn next(&mut self, heartbeat: Option<Duration>) -> Next {
        match &mut self.mode {
            Mode::Done => Next::End,
            Mode::Bounded { next, end, buffer } => {
                if buffer.is_empty() && *next < *end {
                    let limit = usize::try_from((*end - *next).min(PAGE)).unwrap_or(256);
                    match self.runtime.events(&self.session, *next, limit).await {
                        Ok(events) => buffer.extend(events.into_iter().filter(|e| e.index < *end)),
                        Err(e) => {
                            self.mode = Mode::Done;
                            return Next::Failed(StreamFailure::of(&self.session, e));
                        }
                    }
                }
                match buffer.pop_front() {
                    Some(event) => {
                        *next = event.index + 1;
                        Next::Event(event)
                    }
                    None => {
                        self.mode = Mode::Done;
                        Next::End
                    }
                }
            }
            Mode::Follow { follower, pending } => {
                if pending.is_none() {
                    let wait = heartbeat.unwrap_or(Duration::from_secs(3600));
                    let event = tokio::select! {
                        () = self.shutdown.cancelled() => {
                            self.mode = Mode::Done;
                            return Next::End;
                        }
                        () = tokio::time::sleep(wait), if heartbeat.is_some() => return Next::Tick,
                        result = follower.next() => result,
                    };
                    match event {
                        Ok(event) => *pending = Some(event),
                        Err(e) => {
                            self.mode = Mode::Done;
                            return Next::Failed(StreamFailure::of(&self.session, e));
                        }
                    }
                }
                let Some(event) = pending.as_ref() else {
                    return Next::End;
                };
                let rest = if is_rest_point(&event.kind) {
                    match rest_after(&self.runtime, &self.session, event.index).await {
                        Ok(rest) => rest,
                        Err(e) => {
                            self.mode = Mode::Done;
                            return Next::Failed(StreamFailure::of(&self.session, e));
                        }
                    }
                } else {
                    false
                };
                let Some(event) = pending.take() else {
                    return Next::End;
                };
                if rest {
                    self.mode = Mode::Done;
                }
                Next::Event(event)
            }
        }
    }
}

/// How events are written on the wire.
pub(crate) enum Format {
    /// eve's NDJSON: a blank line, then one envelope per line; with stream control, a blank
    /// line after each quiet interval too.
    Ndjson {
        /// `streamControlVersion=1`.
        control: bool,
    },
    /// Server-Sent Events: `id: <index>` and `data: <envelope>` per event.
    Sse,
    /// The AI SDK UI message stream.
    Ui(Box<UiStream>),
}

impl Format {
    fn prelude(&mut self, out: &mut VecDeque<Bytes>) {
        match self {
            Self::Ndjson { .. } => out.push_back(Bytes::from_static(b"\n")),
            Self::Sse => out.push_back(Bytes::from_static(b"retry: 1000\n\n")),
            Self::Ui(ui) => ui.start(out),
        }
    }

    fn event(
        &mut self,
        event: &StoredEvent,
        deliveries: Option<Vec<String>>,
        out: &mut VecDeque<Bytes>,
    ) {
        let wire = || {
            let mut wire = event.to_wire();
            if let Some(ids) = &deliveries {
                wire["meta"]["deliveryIds"] = serde_json::json!(ids);
            }
            wire
        };
        match self {
            Self::Ndjson { .. } => {
                let mut line = wire().to_string();
                line.push('\n');
                out.push_back(Bytes::from(line));
            }
            Self::Sse => out.push_back(Bytes::from(format!(
                "id: {}\ndata: {}\n\n",
                event.index,
                wire()
            ))),
            Self::Ui(ui) => ui.event(event, out),
        }
    }

    fn wants_deliveries(&self) -> bool {
        !matches!(self, Self::Ui(_))
    }

    fn tick(&mut self, out: &mut VecDeque<Bytes>) {
        match self {
            Self::Ndjson { control: true } => out.push_back(Bytes::from_static(b"\n")),
            Self::Ndjson { control: false } => {}
            Self::Sse | Self::Ui(_) => out.push_back(Bytes::from_static(b": keep-alive\n\n")),
        }
    }

    fn end(&mut self, out: &mut VecDeque<Bytes>) {
        if let Self::Ui(ui) = self {
            ui.finish(out);
        }
    }

    /// Ends the stream with `failure`: the `stream.error` line, its SSE message, or the AI SDK
    /// stream's `error` chunk before its end.
    fn fail(&mut self, failure: &StreamFailure, out: &mut VecDeque<Bytes>) {
        match self {
            Self::Ndjson { .. } => out.push_back(failure.bytes(false)),
            Self::Sse => out.push_back(failure.bytes(true)),
            Self::Ui(ui) => {
                let chunk = serde_json::json!({"type": "error", "errorText": failure.error});
                out.push_back(Bytes::from(format!("data: {chunk}\n\n")));
                ui.finish(out);
            }
        }
    }

    fn heartbeat(&self, interval: Duration) -> Option<Duration> {
        match self {
            Self::Ndjson { control: false } => None,
            Self::Ndjson { control: true } => Some(interval.min(CONTROL_HEARTBEAT)),
            Self::Sse | Self::Ui(_) => Some(interval),
        }
    }
}

/// Which accepted messages an event answers, for `meta.deliveryIds`: eve's client sends a
/// message, gets its `deliveryId` (the inbox id) and reads the stream until the turn boundary of
/// the events tagged with it. An event of a turn (its `data.sequence`) carries the id of the
/// message that turn took, and from each message steered into the running turn on (its own
/// `message.received`), that message's id too, so a client that sent it sees the turn that
/// answered it end. An event outside any turn (`session.waiting`, `context.cleared`, a
/// compaction announced for the next turn) carries the ids of the latest turn before it, as eve
/// does. Turns are looked up once per stream.
pub(crate) struct Deliveries {
    runtime: Runtime,
    session: String,
    turns: std::collections::HashMap<u64, Option<TurnDeliveries>>,
    current: Option<u64>,
    primed: Option<u64>,
}

/// The delivery ids of one turn as far as the stream has shown them.
struct TurnDeliveries {
    /// The message that started the turn, then those steered into it (as far as loaded).
    ids: Vec<String>,
    /// `message.received` events of the turn seen so far.
    received: usize,
    /// How many of `ids` the turn's events carry now (at least the first).
    shown: usize,
}

/// Pages read backwards to find the turn a stream that starts mid-way is in.
const PRIME_PAGES: u64 = 8;

impl Deliveries {
    /// For the stream of `session` whose first event has index `start`.
    pub(crate) fn new(runtime: Runtime, session: String, start: u64) -> Self {
        Self {
            runtime,
            session,
            turns: std::collections::HashMap::new(),
            current: None,
            primed: (start > 0).then_some(start),
        }
    }

    /// The turn's deliveries (`None`: no such turn; `Some(None)`: a turn no message started).
    async fn turn(&mut self, seq: u64) -> Option<Option<&mut TurnDeliveries>> {
        if !self.turns.contains_key(&seq) {
            let turn = self
                .runtime
                .store()
                .turn(&self.session, seq)
                .await
                .ok()
                .flatten()?;
            let found = turn.inbox_id.map(|own| TurnDeliveries {
                ids: vec![own],
                received: 0,
                shown: 1,
            });
            self.turns.insert(seq, found);
        }
        self.turns.get_mut(&seq).map(Option::as_mut)
    }

    /// The ids of the messages turn `seq` took, its own first, from the store.
    async fn taken(&self, seq: u64, own: &str) -> Vec<String> {
        let mut ids = vec![own.to_owned()];
        if let Ok(all) = self.runtime.store().turn_inbox(&self.session, seq).await {
            ids.extend(all.into_iter().filter(|id| id != own));
        }
        ids
    }

    /// The turn an event belongs to by its data. Session-level events name the *next* turn in
    /// their data (a reset, a clear, a manual compaction): they belong to the turn before them,
    /// whatever exists by the time they are read, so they name none here.
    fn sequence(event: &StoredEvent) -> Option<u64> {
        let session_level = matches!(
            event.kind.as_str(),
            ev::SESSION_RESET
                | ev::CONTEXT_CLEARED
                | ev::COMPACTION_COMPLETED
                | ev::SESSION_WAITING
        );
        if session_level {
            return None;
        }
        event
            .data
            .get("sequence")
            .and_then(serde_json::Value::as_u64)
    }

    /// Finds the turn the events before `start` ended in. The stream joins it mid-way, so every
    /// message it has taken by now counts as shown.
    async fn prime(&mut self, start: u64) {
        let mut hi = start;
        for _ in 0..PRIME_PAGES {
            if hi == 0 {
                return;
            }
            let lo = hi.saturating_sub(32);
            let limit = usize::try_from(hi - lo).unwrap_or(32);
            let Ok(events) = self.runtime.events(&self.session, lo, limit).await else {
                return;
            };
            for event in events.iter().rev().filter(|e| e.index < hi) {
                let Some(seq) = Self::sequence(event) else {
                    continue;
                };
                let own = match self.turn(seq).await {
                    None => continue,
                    Some(None) => None,
                    Some(Some(t)) => Some(t.ids[0].clone()),
                };
                if let Some(own) = own {
                    let ids = self.taken(seq, &own).await;
                    if let Some(Some(t)) = self.turns.get_mut(&seq) {
                        t.shown = ids.len();
                        t.received = ids.len();
                        t.ids = ids;
                    }
                }
                self.current = Some(seq);
                return;
            }
            hi = lo;
        }
    }

    /// The delivery ids of `event` (`None`: it answers no accepted message).
    pub(crate) async fn of(&mut self, event: &StoredEvent) -> Option<Vec<String>> {
        if let Some(start) = self.primed.take() {
            self.prime(start).await;
        }
        let seq = match Self::sequence(event) {
            Some(seq) if self.turn(seq).await.is_some() => Some(seq),
            // `session.started` is committed with the first turn, just before it.
            _ if event.kind == ev::SESSION_STARTED && self.current.is_none() => Some(0),
            _ => self.current,
        }?;
        self.current = Some(seq);
        let steered = {
            let turn = self.turn(seq).await.flatten()?;
            if event.kind == ev::MESSAGE_RECEIVED && Self::sequence(event) == Some(seq) {
                turn.received += 1;
            }
            turn.shown = turn.shown.max(turn.received);
            (turn.ids.len() < turn.shown).then(|| turn.ids[0].clone())
        };
        if let Some(own) = steered {
            let ids = self.taken(seq, &own).await;
            if let Some(Some(turn)) = self.turns.get_mut(&seq) {
                turn.ids = ids;
            }
        }
        let turn = self.turn(seq).await.flatten()?;
        Some(turn.ids[..turn.shown.min(turn.ids.len())].to_vec())
    }
}

struct BodyState {
    deliveries: Option<Deliveries>,
    cursor: EventCursor,
    format: Format,
    heartbeat: Option<Duration>,
    /// When the lease of a stream under stream control ends.
    lease: Option<tokio::time::Instant>,
    out: VecDeque<Bytes>,
    started: bool,
    finished: bool,
}

/// The response body: the cursor's events in `format`; a stream under stream control ends with
/// [`LEASE_ENDED`] after `lease`.
pub(crate) fn body_stream(
    cursor: EventCursor,
    format: Format,
    heartbeat: Duration,
    lease: Option<Duration>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let deliveries = format
        .wants_deliveries()
        .then(|| Deliveries::new(cursor.runtime.clone(), cursor.session.clone(), cursor.start));
    let state = BodyState {
        deliveries,
        heartbeat: format.heartbeat(heartbeat),
        lease: lease.map(|l| tokio::time::Instant::now() + l),
        cursor,
        format,
        out: VecDeque::new(),
        started: false,
        finished: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(chunk) = st.out.pop_front() {
                return Some((Ok(chunk), st));
            }
            if st.finished {
                return None;
            }
            if !st.started {
                st.started = true;
                st.format.prelude(&mut st.out);
                continue;
            }
            let next = match st.lease {
                Some(deadline) => {
                    let within = tokio::select! {
                        next = st.cursor.next(st.heartbeat) => Some(next),
                        () = tokio::time::sleep_until(deadline) => None,
                    };
                    match within {
                        Some(next) => next,
                        None => {
                            st.out.push_back(Bytes::from_static(LEASE_ENDED.as_bytes()));
                            st.finished = true;
                            continue;
                        }
                    }
                }
                None => st.cursor.next(st.heartbeat).await,
            };
            match next {
                Next::Event(event) => {
                    let ids = match &mut st.deliveries {
                        Some(d) => d.of(&event).await,
                        None => None,
                    };
                    st.format.event(&event, ids, &mut st.out);
                }
                Next::Tick => st.format.tick(&mut st.out),
                Next::End => {
                    st.format.end(&mut st.out);
                    st.finished = true;
                }
                Next::Failed(failure) => {
                    st.format.fail(&failure, &mut st.out);
                    st.finished = true;
                }
            }
        }
    })
}

/// Query parameters of the stream route.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StreamQuery {
    /// `startIndex`: absolute (≥ 0) or from the end (< 0).
    pub(crate) start_index: i64,
    /// `follow` (default `true`).
    pub(crate) follow: bool,
    /// `includeTailIndex`.
    pub(crate) include_tail_index: bool,
    /// `streamControlVersion=1`: heartbeats and a lease on an NDJSON follow (another version is
    /// ignored, as eve does).
    pub(crate) stream_control: bool,
}

fn flag(name: &str, value: &str) -> Result<bool, ApiError> {
    match value.to_ascii_lowercase().as_str() {
        "" | "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(ApiError::bad_request(
            "invalid_query",
            format!("`{name}` must be true or false (1 or 0), found `{value}`."),
        )),
    }
}

/// Parses the query string of the stream route.
pub(crate) fn parse_query(query: Option<&str>) -> Result<StreamQuery, ApiError> {
    let mut out = StreamQuery {
        follow: true,
        ..StreamQuery::default()
    };
    let Some(query) = query else {
        return Ok(out);
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| ApiError::bad_request("invalid_query", "The query is not UTF-8."))?;
        match key {
            "startIndex" => {
                out.start_index = value.trim().parse().map_err(|_| {
                    ApiError::bad_request(
                        "invalid_query",
                        format!("`startIndex` must be an integer, found `{value}`."),
                    )
                })?;
            }
            "follow" => out.follow = flag(key, &value)?,
            "includeTailIndex" => out.include_tail_index = flag(key, &value)?,
            "streamControlVersion" => out.stream_control = value.trim() == "1",
            _ => {}
        }
    }
    Ok(out)
}

/// Whether the client asked for Server-Sent Events.
pub(crate) fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

/// `Last-Event-ID`, when it is an event index.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Serves the stream of `session`.
pub(crate) async fn respond(
    runtime: Runtime,
    session: String,
    query: StreamQuery,
    headers: &HeaderMap,
    heartbeat: Duration,
    lease: Duration,
    shutdown: CancellationToken,
) -> Result<Response, ApiError> {
    let record = runtime
        .session(&session)
        .await?
        .ok_or(ApiError::SessionNotFound)?;
    let count = record.event_count;
    let sse = wants_sse(headers);
    let start = match (
        sse.then(|| last_event_id(headers)).flatten(),
        query.start_index,
    ) {
        (Some(last), _) => last.saturating_add(1),
        (None, n) if n >= 0 => n.unsigned_abs(),
        (None, n) => count.saturating_sub(n.unsigned_abs()),
    };
    let tail = i64::try_from(count).unwrap_or(i64::MAX) - 1;
    let mut cursor = if query.follow {
        EventCursor::follow(runtime, session.clone(), start, shutdown)
    } else {
        EventCursor::bounded(runtime, session.clone(), start, count, shutdown)
    };
    // A first read that fails is the answer (logged as an error), never a 200 with no events.
    cursor.prefetch().await?;
    // A lease bounds a follow only: a bounded read ends by itself.
    let control = !sse && query.stream_control && query.follow;
    let format = if sse {
        Format::Sse
    } else {
        Format::Ndjson { control }
    };
    let lease = control.then_some(lease);
    let mut response = Response::new(Body::from_stream(body_stream(
        cursor, format, heartbeat, lease,
    )));
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, no-transform"),
    );
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if sse {
            "text/event-stream; charset=utf-8"
        } else {
            "application/x-ndjson; charset=utf-8"
        }),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(v) = HeaderValue::from_str(&session) {
        h.insert("x-eve-session-id", v);
    }
    h.insert(
        "x-eve-stream-format",
        HeaderValue::from_static(if sse { "sse" } else { "ndjson" }),
    );
    if !query.follow || query.include_tail_index {
        h.insert("x-eve-stream-tail-index", HeaderValue::from(tail));
    }
    h.insert(
        "x-eve-stream-version",
        HeaderValue::from_static(STREAM_VERSION),
    );
    Ok(response)
}
