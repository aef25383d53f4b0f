//! `GET /metrics`.

use super::Api;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

pub fn routes() -> Router<Arc<Api>> {
    Router::new().route("/metrics", get(|| async { "" }))
}
