//! `GET /eve/v1/traces`: the spans of the local trace store (`.eve/traces.db`), by trace, newest
//! first, for the console's waterfall of a turn (`?session=ID` keeps the traces of one session;
//! `?limit=N`, at most [`MAX_LIMIT`], how many). Operators only: spans name every session, tool
//! and model the runtime saw, so the route table gives it [`super::super::tenancy::Access::Operator`]
//! access (a stranger gets 401, a caller who is no operator 403).
//!
//! A runtime without a local store (`EVE_TRACES=off`, tracing off) answers
//! `{"enabled": false, "traces": []}`.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::super::App;
use super::super::error::ApiError;

/// Traces listed when the query names no `limit`.
const DEFAULT_LIMIT: u64 = 20;
/// Most traces one answer lists.
const MAX_LIMIT: u64 = 100;
/// Most spans shown of one trace (the earliest).
const MAX_SPANS: usize = 2_000;

/// The query: `session` and `limit`.
fn parse(query: Option<&str>) -> Result<(Option<String>, u64), ApiError> {
    let mut session = None;
    let mut limit = DEFAULT_LIMIT;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8_lossy()
            .into_owned();
        match key {
            "session" if !value.is_empty() => session = Some(value),
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid_query",
                            format!("limit `{value}` is not a whole number from 1 to {MAX_LIMIT}."),
                        )
                    })?;
            }
            _ => {}
        }
    }
    Ok((session, limit))
}

/// The traces, each with its spans (see the module's header).
pub(crate) async fn list(State(app): State<App>, RawQuery(query): RawQuery) -> Response {
    let (session, limit) = match parse(query.as_deref()) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let Some(store) = app
        .runtime
        .telemetry()
        .and_then(|t| t.local_store())
        .cloned()
    else {
        return Json(json!({"enabled": false, "traces": []})).into_response();
    };
    let read = tokio::task::spawn_blocking(move || -> rusqlite::Result<Vec<Value>> {
        let mut traces = Vec::new();
        for summary in store.list(limit, session.as_deref())? {
            let mut spans = store.spans(&summary.trace_id)?;
            let cut = spans.len() > MAX_SPANS;
            spans.truncate(MAX_SPANS);
            traces.push(json!({
                "traceId": summary.trace_id,
                "name": summary.name,
                "sessionId": summary.session_id,
                "startUs": summary.start_us,
                "durationUs": summary.duration_us,
                "spanCount": summary.spans,
                "errors": summary.errors,
                "spansCut": cut,
                "spans": spans,
            }));
        }
        Ok(traces)
    })
    .await;
    match read {
        Ok(Ok(traces)) => Json(json!({"enabled": true, "traces": traces})).into_response(),
        Ok(Err(e)) => {
            ApiError::Internal(format!("reading the local trace store: {e}")).into_response()
        }
        Err(e) => ApiError::Internal(format!("reading the local trace store: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_checked() {
        assert_eq!(parse(None).unwrap(), (None, DEFAULT_LIMIT));
        assert_eq!(
            parse(Some("session=wrun_a%2Bb&limit=5")).unwrap(),
            (Some("wrun_a+b".to_owned()), 5)
        );
        for bad in ["limit=0", "limit=101", "limit=x"] {
            let e = parse(Some(bad)).unwrap_err();
            assert_eq!(e.status().as_u16(), 400, "{bad}");
        }
    }
}
