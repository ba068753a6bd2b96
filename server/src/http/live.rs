//! `/api/v1/live`: what the page frame shows that changes on its own (the
//! count of open alerts), for the badge island to poll. Counted as the
//! pages count it: open alerts on the quotas the caller may see.

use crate::authz::Principal;
use crate::http::{ApiError, AppState};
use crate::service::changes::records_scope;
use crate::store::alerts::AlertFilter;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bizrq_islands::LiveReply;

/// GET /api/v1/live
pub async fn live(State(app): State<AppState>, p: Principal) -> Result<Response, ApiError> {
    let f = AlertFilter {
        open: Some(true),
        quotas_in: records_scope(&app.service, &p).await?,
        ..AlertFilter::default()
    };
    let open = app
        .portal
        .sql
        .alerts(&f, i64::MAX)
        .await
        .map_err(crate::service::ServiceError::from)?
        .len();
    Ok(Json(LiveReply { open_alerts: open }).into_response())
}
