//! Allocated against used in the JSON API (docs/real-usage.md):
//!
//! - `GET /api/v1/quotas/{name}/efficiency?range=7d` — the quota's whole
//!   subtree over the range (`24h`, `7d`, `30d`, `90d`, `1y`): GPU-hours
//!   allocated, measured and busy, idle card-hours, efficiency (in all,
//!   by workload, by submitter, by child), CPU and memory requested
//!   against used, the workloads idle now, and since when real usage is
//!   unknown if it is. Visible to whoever may see the quota (404
//!   otherwise).
//! - `GET /api/v1/idle` — the workloads idle now on the quotas the caller
//!   may see, longest idle first.
//!
//! The figures are the quota page's (`crate::efficiency`).

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::quota_ops::{self, tree_for};
use crate::service::ServiceError;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default)]
    range: String,
}

pub async fn get(
    State(app): State<AppState>,
    p: Principal,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let range = quota::series::Range::parse(&params.range).map_err(ApiError::BadRequest)?;
    let _place = app.portal.heavy.enter(&p.username)?;
    quota_ops::require_view(&p, &name, &tree_for(&app.audited(), &p).await?)?;
    let forest = app.service.forest().await?;
    if !forest.quotas.iter().any(|q| q.name() == name) {
        return Err(quota_ops::not_found(&name).into());
    }
    let e = crate::efficiency::gather(
        &app.portal.sql,
        &forest.quotas,
        &name,
        range,
        app.service.now(),
    )
    .await
    .map_err(ServiceError::from)?;
    Ok(Json(e.to_json()).into_response())
}

pub async fn idle(State(app): State<AppState>, p: Principal) -> Result<Response, ApiError> {
    let visible = quota_ops::visible_quotas(&app.service, &p).await?;
    let refs: Vec<&quota::Quota> = visible.iter().collect();
    let idle = crate::efficiency::idle_now(&app.portal.sql, &app.service, &refs).await?;
    let readings = app
        .portal
        .sql
        .real_usage_state()
        .await
        .map_err(ServiceError::from)?;
    let now = app.service.now();
    Ok(Json(json!({
        "unknownSince": readings
            .unknown_since(now, crate::efficiency::STALE_MS)
            .map(quota::time::format_rfc3339),
        "idle": idle
            .iter()
            .map(|(i, pol)| crate::efficiency::idle_json(i, pol))
            .collect::<Vec<_>>(),
    }))
    .into_response())
}
