//! What every HTTP edge shares (the JSON API, the portal and the
//! webhook): their state (`AppState`), the error → response mapping
//! (`ApiError`), the body limits, the webhook's token check and its
//! errors as Kubernetes `Status` objects, the limits on what an anonymous client can
//! take (`limits`) and the portal's sessions state (`state`). It sits
//! beneath the edges, so none of them imports another for these.

pub mod limits;
pub mod state;

use crate::authz::Principal;
use crate::service::audit::Audited;
use crate::service::transfer_ops::TransferDesk;
use crate::service::transfers::TransferService;
use crate::service::{Service, ServiceError};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use state::Portal;
use std::sync::Arc;

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

impl AppState {
    /// The service with the audit log, for a person's change.
    pub fn audited(&self) -> Audited {
        Audited {
            service: self.service.clone(),
            sql: self.portal.sql.clone(),
        }
    }

    /// Transfers as a person asks for and decides them.
    pub fn transfer_desk(&self) -> TransferDesk {
        TransferDesk {
            transfers: self.transfers.clone(),
            audited: self.audited(),
        }
    }

    /// Appends an audit entry for a change `actor` just made (see
    /// [`Audited::audit`]).
    pub async fn audit(
        &self,
        actor: &Principal,
        action: &str,
        target: &str,
        before: Option<serde_json::Value>,
        after: Option<serde_json::Value>,
        detail: &str,
    ) {
        self.audited()
            .audit(actor, action, target, before, after, detail)
            .await
    }
}

/// Errors of the JSON API: one variant, one status code; internal details
/// are logged, never sent.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed but not acceptable (422): the message says what to fix.
    #[error("{0}")]
    Invalid(String),
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

impl From<crate::heavy::Refused> for ApiError {
    fn from(e: crate::heavy::Refused) -> Self {
        ApiError::TooMany(e.to_string(), crate::heavy::RETRY_SECS)
    }
}

impl From<crate::heavy::Failed> for ApiError {
    fn from(e: crate::heavy::Failed) -> Self {
        ApiError::Service(ServiceError::Internal(e.to_string()))
    }
}

impl ApiError {
    fn status_and_reason(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            ApiError::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
            ApiError::TooMany(..) => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            ApiError::Service(e) => status_of(e),
        }
    }
}

/// The one table from a service error to an HTTP status and a reason,
/// used by the JSON API, the portal's pages and the webhook's verdicts
/// (docs/errors.md). `Internal` details are logged by the edges, never
/// sent.
pub fn status_of(e: &ServiceError) -> (StatusCode, &'static str) {
    match e {
        ServiceError::Denied(_) => (StatusCode::FORBIDDEN, "QuotaExceeded"),
        ServiceError::Tree(_) => (StatusCode::UNPROCESSABLE_ENTITY, "TreeRule"),
        ServiceError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
        ServiceError::AlreadyExists(_) => (StatusCode::CONFLICT, "AlreadyExists"),
        ServiceError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
        ServiceError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
        ServiceError::Contention(_) => (StatusCode::TOO_MANY_REQUESTS, "Contention"),
        // The API server refused one of bizrq's own writes (another
        // webhook, RBAC): in its words, as a refusal.
        ServiceError::Refused(_) => (StatusCode::FORBIDDEN, "Refused"),
        // The API server could not reach the admission webhook.
        ServiceError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "Unavailable"),
        ServiceError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Internal"),
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

/// Counts what a listener's router answered 413 or 429
/// (`bizrq_requests_refused_total`); the state is the metrics and the
/// listener's name. Outermost, so that it sees the answer sent.
pub async fn count_refusals(
    State((metrics, listener)): State<(Arc<crate::metrics::Metrics>, &'static str)>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    let resp = next.run(req).await;
    metrics.count_refused(listener, resp.status().as_u16());
    resp
}

/// The webhook's bearer token, compared by hash (as the admin token is).
pub async fn require_webhook_token(
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

/// Every answer of the webhook that is not a review — a body it cannot
/// read (400), a missing token (401), a body over [`WEBHOOK_BODY_LIMIT`]
/// (413), an unknown path or method — as a Kubernetes `Status` object in
/// JSON. The API server reads a non-2xx answer's body as a `Status` and
/// puts its message in the error it reports for the webhook call (and in
/// the refusal a user sees under `failurePolicy: Fail`); plain text
/// reaches it only as "the server responded with the status code 413 but
/// did not return more information". A review cannot be answered instead:
/// the API server refuses a response whose `uid` is not the request's, and
/// an unread body has none.
pub async fn webhook_errors_as_status(
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.is_success() || json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "bizrq webhook: the AdmissionReview is larger than {WEBHOOK_BODY_LIMIT} bytes; refused unread"
        ),
        _ if text.is_empty() => format!(
            "bizrq webhook: {}",
            status.canonical_reason().unwrap_or("error")
        ),
        _ if text.starts_with("bizrq") => text,
        _ => format!("bizrq webhook: {text}"),
    };
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": status_reason(status),
        "code": status.as_u16(),
    });
    let mut out = (status, axum::Json(body)).into_response();
    for name in [header::WWW_AUTHENTICATE, header::RETRY_AFTER, header::ALLOW] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

/// Kubernetes' `StatusReason` for a status code of the webhook.
fn status_reason(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::UNAUTHORIZED => "Unauthorized",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaType",
        StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
        s if s.is_server_error() => "InternalError",
        _ => "BadRequest",
    }
}
