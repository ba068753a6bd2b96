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

/// Open alerts on the quotas `p` may see that ask for someone now (not
/// acknowledged, not snoozed): the navigation's badge, on the pages and
/// here alike. One COUNT, whatever the size of the tree.
pub async fn open_alert_count(
    app: &AppState,
    p: &Principal,
) -> Result<usize, crate::service::ServiceError> {
    let f = AlertFilter {
        open: Some(true),
        quotas_in: records_scope(&app.service, p).await?,
        loud_at: Some(app.service.now()),
        ..AlertFilter::default()
    };
    Ok(app.portal.sql.count_alerts(&f).await? as usize)
}

/// GET /api/v1/live
pub async fn live(State(app): State<AppState>, p: Principal) -> Result<Response, ApiError> {
    let open = open_alert_count(&app, &p).await?;
    Ok(Json(LiveReply { open_alerts: open }).into_response())
}
