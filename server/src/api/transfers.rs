//! `/api/v1/transfers`: request, list, read, approve and reject transfers
//! through [`TransferDesk`](crate::service::transfer_ops::TransferDesk).

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::transfer_ops::{non_empty, parse_statuses, TransferOpError};
use crate::service::transfers::TransferRequest;
use crate::service::ServiceError;
use crate::store::transfers::TransferFilter;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

/// The routes; the caller's router authenticates.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/transfers", get(api_list).post(api_request))
        .route("/api/v1/transfers/{id}", get(api_get))
        .route("/api/v1/transfers/{id}/approve", post(api_approve))
        .route("/api/v1/transfers/{id}/reject", post(api_reject))
}

impl From<TransferOpError> for ApiError {
    fn from(e: TransferOpError) -> Self {
        match e {
            TransferOpError::NotFound(m) => ApiError::Service(ServiceError::NotFound(m)),
            TransferOpError::Forbidden(m) => ApiError::Forbidden(m),
            TransferOpError::TooMany(m, secs) => ApiError::TooMany(m, secs),
            TransferOpError::Service(e) => ApiError::Service(e),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    /// Comma-separated statuses.
    #[serde(default)]
    status: String,
    #[serde(default)]
    quota: String,
    #[serde(default)]
    requested_by: String,
    #[serde(default)]
    before: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

/// The most transfers one page of the list holds.
const MAX_LIMIT: i64 = 1000;

impl ListParams {
    fn filter(&self) -> Result<TransferFilter, String> {
        // Refused rather than clamped, as the other lists do: a caller
        // asking for everything must learn it gets at most a page.
        if let Some(limit) = self.limit {
            if !(1..=MAX_LIMIT).contains(&limit) {
                return Err(format!("limit {limit} is out of range: 1 to {MAX_LIMIT}"));
            }
        }
        Ok(TransferFilter {
            statuses: parse_statuses(&self.status)?,
            quota: non_empty(&self.quota),
            requested_by: non_empty(&self.requested_by),
            before_id: self.before,
            limit: self.limit,
        })
    }
}

/// GET /api/v1/transfers?status=a,b&quota=&requestedBy=&before=&limit=
async fn api_list(
    State(app): State<AppState>,
    p: Principal,
    Query(q): Query<ListParams>,
) -> Result<Response, ApiError> {
    let filter = q.filter().map_err(ApiError::BadRequest)?;
    let items = app.transfer_desk().list(&p, filter, None).await?;
    Ok(Json(serde_json::json!({ "items": items })).into_response())
}

/// GET /api/v1/transfers/{id}
async fn api_get(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<i64>,
) -> Result<Response, ApiError> {
    let (t, _) = app.transfer_desk().get_one(&p, id).await?;
    Ok(Json(t).into_response())
}

/// POST /api/v1/transfers: a [`TransferRequest`]; 201 with the transfer.
async fn api_request(
    State(app): State<AppState>,
    p: Principal,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let req: TransferRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid transfer request: {e}")))?;
    let t = app.transfer_desk().request(&p, req).await?;
    Ok((StatusCode::CREATED, Json(t)).into_response())
}

/// POST /api/v1/transfers/{id}/approve: the transfer as it ended (`done`,
/// `rejected` by re-validation, or `approved` and waiting).
async fn api_approve(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<i64>,
) -> Result<Response, ApiError> {
    Ok(Json(app.transfer_desk().approve(&p, id).await?).into_response())
}

#[derive(Deserialize, Default)]
struct RejectBody {
    #[serde(default)]
    note: String,
}

/// POST /api/v1/transfers/{id}/reject, optionally `{"note": "…"}`.
async fn api_reject(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<i64>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let b: RejectBody = if body.iter().all(u8::is_ascii_whitespace) {
        RejectBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("invalid rejection: {e}")))?
    };
    Ok(Json(app.transfer_desk().reject(&p, id, &b.note).await?).into_response())
}
