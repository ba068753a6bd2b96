//! Which edges exist and where they answer: the routers of the three
//! listeners, composed once at the top so that no edge imports another.

use crate::api::{self, check, health, quotas};
use crate::edge::{self, AppState};
use crate::{portal, webhook};
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use tower_http::compression::{CompressionLayer, CompressionLevel};
use tower_http::trace::TraceLayer;

/// Portal, JSON API, health and metrics (plain HTTP; put TLS in front, or
/// use the webhook port's TLS, in production).
pub fn http_router(app: AppState) -> Router {
    let api = Router::new()
        .route("/api/v1/quotas", get(quotas::list).post(quotas::create))
        .route(
            "/api/v1/quotas/{name}",
            get(quotas::get).put(quotas::replace).delete(quotas::delete),
        )
        .route("/api/v1/quotas/{name}/usage", get(quotas::usage))
        .route("/api/v1/quotas/{name}/budgets", get(api::budgets::get))
        .route(
            "/api/v1/quotas/{name}/efficiency",
            get(api::efficiency::get),
        )
        .route("/api/v1/idle", get(api::efficiency::idle))
        .route("/api/v1/quotas/{name}/queue", get(api::queue::get))
        .route("/api/v1/quotas/{name}/shares", get(api::shares::get))
        .route("/api/v1/quotas/{name}/samples", get(api::samples::samples))
        .route("/api/v1/live", get(api::live::live))
        .route("/api/v1/live/overview", get(portal::live::overview))
        .route("/api/v1/prices", get(api::prices::get))
        .route("/api/v1/reports", get(api::reports::get))
        .route("/api/v1/check", post(check::check))
        .merge(api::transfers::router())
        .merge(api::alerts::router())
        // Inside `authenticate`: a body is read only for a known caller.
        .route_layer(middleware::from_fn(portal::guards::check_api_body))
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            portal::auth::authenticate,
        ));
    // Layers run outside in: the last added first. Sessions must be loaded
    // before the CSRF check reads the session's token.
    Router::new()
        .route("/style.css", get(health::style))
        .route("/pkg/{file}", get(api::pkg::file))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .merge(portal::router())
        .merge(api)
        .fallback(portal::no_such_page)
        .layer(middleware::from_fn_with_state(
            app.clone(),
            portal::auth::error_pages_with_navigation,
        ))
        // Inside the CSRF check: a body is read for control characters only
        // once the CSRF check (which reads at most 16 KiB of a form before
        // login) let it through.
        .layer(middleware::from_fn(portal::guards::reject_control_chars))
        .layer(middleware::from_fn(portal::auth::require_csrf))
        .layer(app.portal.session_layer())
        .layer(middleware::from_fn(portal::auth::secure_cookie_behind_tls))
        .layer(DefaultBodyLimit::max(edge::API_BODY_LIMIT))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            portal::guards::security_headers,
        ))
        // Pages, JSON and CSV gzipped for clients that accept it (a
        // department's page is much repetitive HTML, which gzip shrinks well). The
        // fastest level: the cost is bounded by what a request may render.
        // Not the webhook's: the API server's reviews are small and
        // latency is all that matters there. Pages carry their CSRF token
        // masked afresh (`auth::csrf_token`), so compression does not leak
        // it (BREACH).
        .layer(CompressionLayer::new().quality(CompressionLevel::Fastest))
        .layer(middleware::from_fn_with_state(
            (app.service.metrics.clone(), "http"),
            edge::count_refusals,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}

/// The kubelet's probes on their own listener (`--probe-listen`): with its
/// own small pool, a portal pool full of slow clients does not fail them
/// and take the pod, webhook included, out of its Service.
pub fn probe_router(app: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .layer(DefaultBodyLimit::max(0))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}

/// The admission webhook (served over HTTPS). With `token`, the reviews
/// require `Authorization: Bearer <token>` (the API server sends it from its
/// admission kubeconfig); a client certificate, when configured, is checked
/// by TLS before any of this runs.
pub fn webhook_router(app: AppState, token: Option<&str>) -> Router {
    let mut reviews = Router::new()
        .route("/validate/quotas", post(webhook::quotas))
        .route("/validate/workloads", post(webhook::workloads))
        .route("/validate/scale", post(webhook::scale))
        .route("/validate/hpa", post(webhook::hpa))
        .route("/validate/prices", post(webhook::prices))
        .route("/validate/pods", post(webhook::pods))
        .route("/mutate/workloads", post(webhook::mutate::workloads));
    if let Some(t) = token.map(str::trim).filter(|t| !t.is_empty()) {
        let expected = (
            Arc::new(crate::util::sha256_hex(t)),
            app.service.metrics.clone(),
        );
        reviews = reviews.route_layer(middleware::from_fn_with_state(
            expected,
            edge::require_webhook_token,
        ));
    }
    reviews
        .route("/healthz", get(health::healthz))
        .layer(DefaultBodyLimit::max(edge::WEBHOOK_BODY_LIMIT))
        .layer(middleware::from_fn(edge::webhook_errors_as_status))
        .layer(middleware::from_fn_with_state(
            (app.service.metrics.clone(), "webhook"),
            edge::count_refusals,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}
