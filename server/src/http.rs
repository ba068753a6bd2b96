//! HTTP wiring: routers, shared state, the error → response mapping,
//! health and metrics. Authentication and the portal's pages are in
//! `portal`.

use crate::portal::{self, Portal};
use crate::service::{Service, ServiceError};
use crate::transfers::TransferService;
use crate::{api, webhook};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use tower_http::trace::TraceLayer;

/// API bodies are quota objects or one workload: 1 MiB is generous.
pub const API_BODY_LIMIT: usize = 1 << 20;
/// An AdmissionReview carries object and oldObject, each up to etcd's
/// 1.5 MiB request limit, plus envelope.
pub const WEBHOOK_BODY_LIMIT: usize = 4 << 20;

#[derive(Clone)]
pub struct AppState {
    pub service: Arc<Service>,
    /// SHA-256 of the admin bearer token.
    pub token_sha256: Arc<String>,
    /// Accounts, sessions and the audit log (always SQL).
    pub portal: Arc<Portal>,
    /// Quota transfers (requests, approvals, execution), for the portal's
    /// pages and the JSON API.
    pub transfers: Arc<TransferService>,
}

/// Errors of the JSON API: one variant, one status code; internal details
/// are logged, never sent.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("{0}")]
    BadRequest(String),
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// Authenticated, but not allowed (see `portal::authz`).
    #[error("{0}")]
    Forbidden(String),
    /// The body is over the limit (413).
    #[error("{0}")]
    TooLarge(String),
    /// Too many requests (429); retry after so many seconds.
    #[error("{0}")]
    TooMany(String, u64),
}

impl ApiError {
    fn status_and_reason(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
            ApiError::TooMany(..) => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            ApiError::Service(e) => e.status(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, reason) = self.status_and_reason();
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, "internal error");
            "internal error; see the bizrq logs".to_string()
        } else {
            self.to_string()
        };
        let body = serde_json::json!({ "error": { "status": status.as_u16(), "reason": reason, "message": message } });
        let mut resp = (status, axum::Json(body)).into_response();
        let retry = match &self {
            ApiError::TooMany(_, secs) => Some(*secs),
            ApiError::Service(e) => e.retry_after(),
            _ => None,
        };
        if let Some(secs) = retry {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// Portal, JSON API, health and metrics (plain HTTP; put TLS in front, or
/// use the webhook port's TLS, in production).
pub fn http_router(app: AppState) -> Router {
    let api = Router::new()
        .route("/api/v1/quotas", get(api::list).post(api::create))
        .route(
            "/api/v1/quotas/{name}",
            get(api::get).put(api::replace).delete(api::delete),
        )
        .route("/api/v1/check", post(api::check))
        .merge(portal::transfers::api())
        .merge(portal::alerts::api())
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            portal::auth::authenticate,
        ));
    // Layers run outside in: the last added first. Sessions must be loaded
    // before the CSRF check reads the session's token.
    Router::new()
        .route("/style.css", get(style))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(portal::router())
        .merge(api)
        // Inside the CSRF check: a body is read for control characters only
        // once the CSRF check (which reads at most 16 KiB of a form before
        // login) let it through.
        .layer(middleware::from_fn(portal::edge::reject_control_chars))
        .layer(middleware::from_fn(portal::auth::require_csrf))
        .layer(app.portal.session_layer())
        .layer(middleware::from_fn(portal::auth::secure_cookie_behind_tls))
        .layer(DefaultBodyLimit::max(API_BODY_LIMIT))
        .layer(middleware::from_fn(portal::edge::security_headers))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}

/// The kubelet's probes on their own listener (`--probe-listen`): with its
/// own small pool, a portal pool full of slow clients does not fail them
/// and take the pod, webhook included, out of its Service.
pub fn probe_router(app: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
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
        .route("/validate/hpa", post(webhook::hpa));
    if let Some(t) = token.map(str::trim).filter(|t| !t.is_empty()) {
        let expected = (
            Arc::new(crate::util::sha256_hex(t)),
            app.service.metrics.clone(),
        );
        reviews = reviews.route_layer(middleware::from_fn_with_state(
            expected,
            require_webhook_token,
        ));
    }
    reviews
        .route("/healthz", get(healthz))
        .layer(DefaultBodyLimit::max(WEBHOOK_BODY_LIMIT))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}

/// The webhook's bearer token, compared by hash (as the admin token is).
async fn require_webhook_token(
    State((expected, metrics)): State<(Arc<String>, Arc<crate::metrics::Metrics>)>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if given.is_some_and(|t| crate::util::sha256_hex(t) == *expected) {
        return next.run(req).await;
    }
    metrics.webhook_unauthorized.inc();
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "bizrq webhook: missing or wrong bearer token",
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(app): State<AppState>) -> Response {
    match app.service.store.ping().await {
        Ok(()) => "ok".into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable").into_response()
        }
    }
}

async fn metrics(State(app): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.service.metrics.render(),
    )
        .into_response()
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css")], app::STYLE).into_response()
}
