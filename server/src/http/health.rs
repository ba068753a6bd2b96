//! What probes, scrapers and browsers fetch without logging in: liveness,
//! readiness (the store answers), Prometheus metrics and the stylesheet.

use super::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(app): State<AppState>) -> Response {
    match app.service.store.ping().await {
        Ok(()) => "ok".into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable").into_response()
        }
    }
}

pub async fn metrics(State(app): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.service.metrics.render(),
    )
        .into_response()
}

pub async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css")], app::STYLE).into_response()
}
