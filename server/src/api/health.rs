//! What probes, scrapers and browsers fetch without logging in: liveness,
//! readiness (the store answers), Prometheus metrics and the stylesheet.

use crate::edge::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(app): State<AppState>) -> Response {
    match app.service.ping().await {
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

/// GET /style.css: revalidated by its ETag (a hash of the stylesheet this
/// binary carries), so a browser fetches it once per version and an
/// upgrade is seen at the next page.
pub async fn style(headers: axum::http::HeaderMap) -> Response {
    static ETAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let etag = ETAG.get_or_init(|| {
        use sha2::Digest;
        let h = sha2::Sha256::digest(app::STYLE.as_bytes());
        format!("\"{}\"", &crate::util::hex(&h)[..16])
    });
    let cache = (header::CACHE_CONTROL, "no-cache");
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag.as_str()), cache],
        )
            .into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/css"),
            (header::ETAG, etag.as_str()),
            cache,
        ],
        app::STYLE,
    )
        .into_response()
}
