//! `GET /api/v1/quotas/{name}/shares`: the `sshare`-like table of a quota
//! (docs/queueing.md §11, "Between the submitters of one quota") — per
//! submitter, what they spent (raw and decayed with the half-life), their
//! normalised usage and shares, and SLURM's fair-share factor.
//! `?scope=subtree` adds up the quota and every quota under it (default
//! `own`, what its queue orders by). Visible to whoever may see the quota
//! (404 otherwise, as `GET /api/v1/quotas/{name}`); a heavy request
//! (`crate::heavy`), since it sums the ledger.

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::quota_ops::{self, tree_for};
use crate::service::shares;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

pub async fn get(
    State(app): State<AppState>,
    p: Principal,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let scope = shares::parse_query(raw.as_deref()).map_err(ApiError::Invalid)?;
    quota_ops::require_view(&p, &name, &tree_for(&app.audited(), &p).await?)?;
    let place = app.portal.heavy.enter(&p.username)?;
    let table = shares::read(&app.service, &app.portal.sql, &name, scope).await?;
    let body = place.render(move || shares::to_json(&table)).await?;
    Ok(Json(body).into_response())
}
