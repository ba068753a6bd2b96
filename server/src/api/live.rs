//! `/api/v1/live`: what the page frame shows that changes on its own (the
//! count of open alerts), for the badge island to poll. Counted as the
//! pages count it: open alerts on the quotas the caller may see.

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bizrq_islands::LiveReply;

/// GET /api/v1/live
pub async fn live(State(app): State<AppState>, p: Principal) -> Result<Response, ApiError> {
    let open = crate::service::alert_ops::open_count(&app.audited(), &p).await?;
    Ok(Json(LiveReply { open_alerts: open }).into_response())
}
