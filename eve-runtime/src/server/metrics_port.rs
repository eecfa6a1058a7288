//! Metrics on an address of their own (`EVE_METRICS_ADDR`, read by `eve serve` and `eve dev`):
//! a listener that answers `GET /metrics` and nothing else, without the channel's auth, for a
//! Prometheus that scrapes an internal interface. The API's own `/metrics` stays (operators
//! only); this one serves the same text to whoever reaches the address, so it is bound where
//! only the scraper reaches it (loopback, a private network). What it shows are counts by tool,
//! model and outcome: no session, turn or call id is ever a label.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::engine::Runtime;

async fn metrics(State(runtime): State<Runtime>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        runtime.metrics_text(),
    )
        .into_response()
}

async fn elsewhere() -> Response {
    (
        StatusCode::NOT_FOUND,
        "only GET /metrics is served on this address\n",
    )
        .into_response()
}

/// The router of the metrics address: `GET /metrics` of `runtime`, a 404 for anything else.
pub fn metrics_router(runtime: Runtime) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(elsewhere)
        .with_state(runtime)
}
