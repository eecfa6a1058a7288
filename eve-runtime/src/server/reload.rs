//! A router that can be replaced while it serves: `eve dev` swaps in the routes of each good
//! build (new auth, CORS, body limit) without closing the listener.
//!
//! Each request is handed to the router current when it arrives; a request (or an open stream)
//! that started on the previous one finishes there.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::Request;
use tower_service::Service;

/// Holds the router requests go to. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct ReloadableRouter {
    current: Arc<RwLock<Router>>,
}

impl std::fmt::Debug for ReloadableRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadableRouter").finish_non_exhaustive()
    }
}

impl ReloadableRouter {
    /// Starts with `router`.
    pub fn new(router: Router) -> Self {
        Self {
            current: Arc::new(RwLock::new(router)),
        }
    }

    /// Sends the next requests to `router`.
    pub fn replace(&self, router: Router) {
        match self.current.write() {
            Ok(mut current) => *current = router,
            Err(poisoned) => *poisoned.into_inner() = router,
        }
    }

    fn current(&self) -> Router {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A router that forwards every request to the current one (give it to [`super::serve`]).
    pub fn router(&self) -> Router {
        let cell = self.clone();
        Router::new().fallback(move |request: Request| {
            let mut router = cell.current();
            async move {
                match router.call(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            }
        })
    }
}
