//! `GET /api/v1/quotas/{name}/budgets`: each cash key's budget now — its
//! policy, the current period (start, end), budget, carry-in, spent this
//! period, left, when it renews, its one forecast (`runway`: `runs out in
//! 8.3 days (2026-12-07)`, `runsOutAt`, `burnPerHour`), its
//! open reservations (`reservations`: how many, what they hold back, the
//! cap, and what is left after them) — and
//! its closed periods, newest first (`?limit=` 1–200, default 12;
//! `?before=` an RFC 3339 period start, for the next page). Visible to
//! whoever may see the quota (404 otherwise, as `GET /api/v1/quotas/{name}`).

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::quota_ops::{self, tree_for};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Params {
    limit: Option<String>,
    before: Option<String>,
}

const DEFAULT_LIMIT: i64 = 12;

pub async fn get(
    State(app): State<AppState>,
    p: Principal,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    // A heavy request (`crate::heavy`): it copies and accrues the quota's
    // whole subtree and reads the ledger, so it takes a place first.
    let place = app.portal.heavy.enter(&p.username)?;
    quota_ops::require_view(&p, &name, &tree_for(&app.audited(), &p).await?)?;
    let limit = match params.limit.as_deref() {
        None | Some("") => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=crate::store::budgets::MAX_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit must be a whole number from 1 to {}",
                    crate::store::budgets::MAX_PAGE
                ))
            })?,
    };
    let before = match params.before.as_deref() {
        None | Some("") => None,
        Some(b) if b.len() <= 64 => Some(quota::time::parse_rfc3339(b).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "before '{b}' is not an RFC 3339 time such as 2026-12-01T00:00:00Z"
            ))
        })?),
        Some(_) => {
            return Err(ApiError::BadRequest(
                "before is too long for an RFC 3339 time".into(),
            ))
        }
    };
    // The quota and its subtree as of one `now` (`service::working`): the
    // copies the quota page reads, so its budgets box says what this does.
    let w = app.service.working(app.service.now());
    let now = w.now();
    let forest = app.service.forest().await?;
    let (copies, at) = (w.clone(), name.clone());
    let (q, subtree) = place
        .work(move || copies.subtree_of(&forest, &at))
        .await?
        .ok_or_else(|| quota_ops::not_found(&name))?;
    let pricing = w.pricing();
    let mut views = crate::budgets::views(
        &app.portal.sql,
        &q,
        &pricing,
        Some(&subtree),
        now,
        limit,
        pricing.list.currency.as_ref(),
    )
    .await
    .map_err(crate::service::ServiceError::from)?;
    if let Some(before) = before {
        // The next page: periods that started before `before`.
        for v in &mut views {
            v.closed = app
                .portal
                .sql
                .budget_periods(&name, &v.key, before, limit)
                .await
                .map_err(crate::service::ServiceError::from)?;
            if v.closed.is_empty() {
                if let Some(p) = q.status.budgets.get(&v.key) {
                    v.closed = p
                        .closed
                        .iter()
                        .filter(|r| r.start_ms < before)
                        .take(limit as usize)
                        .cloned()
                        .collect();
                }
            }
        }
    }
    let budgets: Vec<serde_json::Value> = views.iter().map(|v| v.to_json()).collect();
    Ok(Json(serde_json::json!({
        "quota": name,
        "now": quota::time::format_rfc3339(now),
        "budgets": budgets,
    }))
    .into_response())
}
