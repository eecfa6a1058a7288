//! The HTTP server of the default `http` channel: eve's `/eve/v1` session API, plus the same
//! stream as Server-Sent Events and an AI SDK UI message stream endpoint.
//!
//! The routes are wire-compatible with eve 0.80.1 (bodies, status codes, headers, the NDJSON
//! envelope and event order), so eve's clients work unchanged; see `docs/api.md`. The server only
//! translates: every route is one call on the [`Runtime`], which owns durability. It is built
//! with axum; [`router`] gives the routes with their layers (authentication, body limit, CORS)
//! and [`serve`] runs them on a listener until the configuration's shutdown token fires, then
//! ends open streams and lets in-flight requests finish.

mod agent_info;
mod auth;
mod body;
mod channels;
mod config;
mod connections;
mod console;
mod dev;
mod dev_build;
mod error;
mod forwarded;
mod jwt;
mod listener;
mod memory;
mod metrics_port;
pub mod quota;
mod releases;
mod reload;
mod routes;
mod stream;
mod tenancy;
mod ui;
pub mod uploads;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::routing::{MethodRouter, get, post};
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use auth::{Attributes, Authenticator, Identity, Verified, sign_hs256, verify_hs256};
pub use channels::{
    ChannelError, Channels, MCP_PATH, McpChannel, REPLAY_WINDOW_SECS,
    session_id as channel_session_id,
};
pub use config::{
    API_CHANNEL, CorsOrigins, DEFAULT_BODY_LIMIT, ServerConfig, authority_host, is_loopback_host,
};
pub use dev_build::{DevBuild, FailedBuild};
pub use error::{ApiError, ServerError};
pub use forwarded::Forwarders;
pub use jwt::{JWKS_FETCHES_PER_MINUTE, JWKS_MAX_BYTES, JWKS_TIMEOUT, JWKS_TTL};
pub use listener::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, ListenerLimits,
    raise_fd_limit, serve_with,
};
pub use metrics_port::metrics_router;
pub use reload::ReloadableRouter;
pub use stream::{
    EventCursor, Next, STREAM_ERROR, STREAM_VERSION, StreamFailure, at_rest, is_rest_point,
};
pub use tenancy::{Access, Operators, Route};
pub use ui::{UI_STREAM_VERSION, chat_session_id};

use crate::engine::Runtime;
use crate::schedule::Scheduler;

/// Shared state of the handlers.
#[derive(Clone)]
pub(crate) struct App {
    pub(crate) runtime: Runtime,
    pub(crate) config: Arc<ServerConfig>,
    /// Dev mode: the scheduler the dev routes fire.
    pub(crate) scheduler: Option<Scheduler>,
    /// Dev mode: the outcome of the last rebuild (a failure the console shows).
    pub(crate) dev_build: DevBuild,
}

/// What else a router serves besides the session API.
#[derive(Debug, Clone, Default)]
pub struct RouterOptions {
    /// Dev mode (`eve dev`): adds `POST /eve/v1/dev/schedules/:id`, which fires a schedule of
    /// this scheduler once. Without it that route is a 404.
    pub dev: Option<Scheduler>,
    /// Serves the web console at `/` (always in `eve dev`; `eve serve --console`).
    pub console: bool,
    /// Dev mode: where `eve dev` records a rebuild that failed, reported by `GET /eve/v1/agent`
    /// as `failedBuild` (never set outside `eve dev`).
    pub dev_build: DevBuild,
}

fn cors_layer(origins: &CorsOrigins) -> CorsLayer {
    let allow = match origins {
        CorsOrigins::Any => AllowOrigin::any(),
        CorsOrigins::List(list) => AllowOrigin::list(
            list.iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        ),
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            HeaderName::from_static("x-eve-session-id"),
            HeaderName::from_static("x-eve-stream-format"),
            HeaderName::from_static("x-eve-stream-version"),
            HeaderName::from_static("x-eve-stream-tail-index"),
            HeaderName::from_static("x-vercel-ai-ui-message-stream"),
        ])
        .max_age(Duration::from_secs(600))
}

/// The routes of the session API over `runtime`, with authentication, the body limit and CORS.
pub fn router(runtime: Runtime, config: ServerConfig) -> Router {
    router_with(runtime, config, RouterOptions::default())
}

/// Every route of the API with who may call it: the table [`router_with`] builds the router
/// from (each route's access is enforced by a layer made from its entry), so this list is
/// complete by construction. `dev` and `console` add the routes those options add.
pub fn routes(dev: bool, console: bool) -> Vec<Route> {
    table(dev, console)
        .into_iter()
        .map(|(route, _)| route)
        .collect()
}

/// The routes with their handlers (see [`routes`]).
fn table(dev: bool, console: bool) -> Vec<(Route, MethodRouter<App>)> {
    use Access::{Caller, Operator, Public, Session};
    let r = |method: &'static str, path: &'static str, access: Access| Route {
        method,
        path,
        access,
    };
    let mut all = vec![
        (r("GET", "/eve/v1/health", Public), get(routes::health)),
        (
            r("POST", "/eve/v1/channels/{name}", Public),
            post(channels::handle),
        ),
        (
            r("GET", "/eve/v1/connections/{name}/callback", Public),
            get(connections::callback),
        ),
        // The MCP channel checks its own `auth:` (and serves `GET` and `DELETE` too).
        (
            r("POST", channels::MCP_PATH, Public),
            post(channels::mcp::handle)
                .get(channels::mcp::handle)
                .delete(channels::mcp::handle),
        ),
        (r("GET", "/eve/v1/info", Caller), get(routes::info)),
        (r("GET", "/eve/v1/agent", Caller), get(console::api::agent)),
        (r("GET", "/eve/v1/memory", Caller), get(memory::show)),
        (r("POST", "/eve/v1/memory", Caller), post(memory::write)),
        (
            r("POST", "/eve/v1/memory/clear", Caller),
            post(memory::clear),
        ),
        (
            r("GET", "/eve/v1/sessions", Caller),
            get(console::api::list),
        ),
        (
            r("POST", "/eve/v1/session", Caller),
            post(routes::create_session),
        ),
        (r("POST", "/eve/v1/chat", Caller), post(routes::chat)),
        (
            r("GET", "/eve/v1/sessions/{id}", Session),
            get(console::api::show),
        ),
        (
            r("POST", "/eve/v1/session/{id}", Session),
            post(routes::post_session),
        ),
        (
            r("POST", "/eve/v1/session/{id}/cancel", Session),
            post(routes::cancel),
        ),
        (
            r("POST", "/eve/v1/session/{id}/compact", Session),
            post(routes::compact),
        ),
        (
            r("POST", "/eve/v1/session/{id}/clear", Session),
            post(routes::clear),
        ),
        (
            r("POST", "/eve/v1/session/{id}/reset", Session),
            post(routes::reset),
        ),
        (
            r("GET", "/eve/v1/session/{id}/stream", Session),
            get(routes::stream),
        ),
        (r("GET", "/metrics", Operator), get(routes::metrics)),
        (
            r("GET", "/eve/v1/traces", Operator),
            get(console::traces::list),
        ),
        (r("GET", "/eve/v1/releases", Operator), get(releases::list)),
        (
            r("GET", "/eve/v1/releases/stream", Operator),
            get(releases::stream),
        ),
        (
            r("GET", "/eve/v1/releases/{id}", Operator),
            get(releases::show),
        ),
        (
            r("POST", "/eve/v1/releases/{id}/activate", Operator),
            post(releases::activate),
        ),
        (
            r("POST", "/eve/v1/rollback", Operator),
            post(releases::rollback),
        ),
    ];
    if dev {
        all.push((
            r("POST", "/eve/v1/dev/schedules/{id}", Operator),
            post(dev::fire_schedule),
        ));
    }
    if console {
        all.extend([
            (r("GET", "/", Public), get(console::index)),
            (r("GET", "/console/{name}", Public), get(console::file)),
        ]);
    }
    all
}

/// Like [`router`], with the dev routes when `options.dev` is set.
pub fn router_with(runtime: Runtime, config: ServerConfig, options: RouterOptions) -> Router {
    let dev = options.dev.is_some();
    let console = options.console;
    config.channels.resume_replies(&runtime, &config.shutdown);
    let app = App {
        runtime,
        config: Arc::new(config),
        scheduler: options.dev,
        dev_build: options.dev_build,
    };
    let mut open = Router::new();
    let mut guarded = Router::new();
    for (route, handler) in table(dev, console) {
        let handler = match route.access {
            Access::Public | Access::Caller => handler,
            Access::Session => handler.route_layer(axum::middleware::from_fn_with_state(
                app.clone(),
                tenancy::session_access,
            )),
            Access::Operator => {
                handler.route_layer(axum::middleware::from_fn(tenancy::operator_access))
            }
        };
        if route.access == Access::Public {
            open = open.route(route.path, handler);
        } else {
            guarded = guarded.route(route.path, handler);
        }
    }
    let guarded = guarded.route_layer(axum::middleware::from_fn_with_state(
        app.clone(),
        routes::guard,
    ));
    let mut router = open
        .merge(guarded)
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(app.config.message_limit()));
    if let Some(origins) = &app.config.cors {
        router = router.layer(cors_layer(origins));
    }
    router.with_state(app)
}

/// Serves `router` on `listener` until `shutdown` fires; then stops accepting, lets open requests
/// finish (streams end on the same token) and returns. The listener's limits are the defaults
/// with the `EVE_*_TIMEOUT_SECS` and `EVE_MAX_CONNECTIONS` variables of the process applied.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), ServerError> {
    let limits = ListenerLimits::from_env(&|name| std::env::var(name).ok())?;
    serve_with(listener, router, shutdown, limits).await
}
