//! The web console: a page at `/` of `eve dev` (and of `eve serve --console`) to watch and drive
//! sessions, answer approvals and look at the agent, in any browser, with no network beyond the
//! server itself.
//!
//! Its HTML, CSS and JavaScript are plain files under `assets/`, embedded in the binary with
//! `include_str!`: there is no build step and nothing is fetched from elsewhere (the page's
//! content security policy forbids it). The script is `app.js` and the modules it imports (one
//! per view, and `lib.js`), served under `/console/` by file name. The page is only a client of the HTTP API: it reads the
//! session API and the read-only routes of [`api`], which sit behind the channel's guard like
//! every `/eve/v1` route. The page itself holds no data, so it is served without credentials; a
//! console of a server with `auth:` asks for the token (or lets the browser ask for basic
//! credentials) before it reads anything.

pub(crate) mod api;
pub(crate) mod traces;

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_CSS: &str = include_str!("assets/app.css");

/// The page's JavaScript modules by file name: `app.js` (routing) and those it imports.
const SCRIPTS: [(&str, &str); 7] = [
    ("app.js", include_str!("assets/app.js")),
    ("lib.js", include_str!("assets/lib.js")),
    ("sessions.js", include_str!("assets/sessions.js")),
    ("session.js", include_str!("assets/session.js")),
    ("waterfall.js", include_str!("assets/waterfall.js")),
    ("agent.js", include_str!("assets/agent.js")),
    ("releases.js", include_str!("assets/releases.js")),
];

/// What the page may load: itself, and the API of the server it came from.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}

pub(crate) async fn index() -> Response {
    asset(INDEX_HTML, "text/html; charset=utf-8")
}

/// `/console/NAME`: the style sheet or one of [`SCRIPTS`]; anything else is a 404.
pub(crate) async fn file(Path(name): Path<String>) -> Response {
    if name == "app.css" {
        return asset(APP_CSS, "text/css; charset=utf-8");
    }
    match SCRIPTS.iter().find(|(file, _)| *file == name) {
        Some((_, body)) => asset(body, "text/javascript; charset=utf-8"),
        None => (StatusCode::NOT_FOUND, "no such console file\n").into_response(),
    }
}
