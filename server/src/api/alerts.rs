//! `/api/v1/alerts`: the alerts on the quotas the caller may see, newest
//! first, paged; one alert by id.

use crate::alerts::Alert;
use crate::alerts::{Kind, Level};
use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::alert_ops::{self, Quiet};
use crate::service::quota_ops::records_scope;
use crate::store::alerts::AlertFilter;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

/// The routes; the caller's router authenticates.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/alerts", get(api_list))
        .route("/api/v1/alerts/{id}", get(api_get))
        .route("/api/v1/alerts/{id}/ack", post(api_ack))
        .route("/api/v1/alerts/{id}/snooze", post(api_snooze))
}

/// Query of GET /api/v1/alerts.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct ApiParams {
    #[serde(default)]
    quota: String,
    #[serde(default)]
    kind: String,
    /// open, resolved or all (default).
    #[serde(default)]
    state: String,
    /// info, warning or critical; empty for any.
    #[serde(default)]
    level: String,
    /// 1 to 1000, default 100.
    limit: Option<i64>,
    /// Paging: alerts older than this id (the previous page's `next`).
    before: Option<i64>,
    /// `condition`: kept for clients that ask for it; every alert is one
    /// condition (its keys listed in it), so the items are the same, each
    /// with its `ids`.
    #[serde(default)]
    group: String,
}

const API_MAX_LIMIT: i64 = 1000;

/// An alert as the API shows it: `key` the one its title names, `keys`
/// (raw) and `names` (as the pages and emails say them) those it covers,
/// GPUs first; `message` with raw keys, `said` as people read it.
pub fn alert_json(a: &Alert, cfg: &quota::KeyConfig) -> serde_json::Value {
    serde_json::json!({
        "id": a.id,
        "kind": a.kind.as_str(),
        "quota": a.quota,
        "key": a.key,
        "keys": a.keys,
        "names": a.keys.iter().map(|k| quota::keys::display_name(k, cfg)).collect::<Vec<_>>(),
        "level": a.level.as_str(),
        "message": a.message,
        "said": crate::alerts::words(&a.message, &a.key, &a.numbers, cfg),
        "numbers": a.numbers,
        "mergedInto": a.merged_into,
        "state": if a.resolved_at.is_some() { "resolved" } else { "open" },
        "openedAt": quota::time::format_rfc3339(a.opened_at),
        "resolvedAt": a.resolved_at.map(quota::time::format_rfc3339),
        "acknowledgedBy": a.acked.as_ref().map(|(by, _)| by),
        "acknowledgedAt": a.acked.as_ref().map(|(_, at)| quota::time::format_rfc3339(*at)),
        "snoozedBy": a.snoozed.as_ref().map(|(by, _)| by),
        "snoozedUntil": a.snoozed.as_ref().map(|(_, until)| quota::time::format_rfc3339(*until)),
    })
}

/// GET /api/v1/alerts?quota=&kind=&state=&limit=&before= — newest first,
/// on the quotas the caller may see; `next` is the `before` of the next
/// page (null on the last).
pub async fn api_list(
    State(app): State<AppState>,
    p: Principal,
    q: Result<Query<ApiParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let kind = Kind::parse_filter(&q.kind).map_err(ApiError::BadRequest)?;
    let level = Level::parse_filter(&q.level).map_err(ApiError::BadRequest)?;
    let open = match q.state.trim() {
        "" | "all" => None,
        "open" => Some(true),
        "resolved" => Some(false),
        other => {
            return Err(ApiError::BadRequest(format!(
                "unknown state '{other}': open, resolved or all"
            )))
        }
    };
    let grouped = match q.group.trim() {
        "" => false,
        "condition" => true,
        other => {
            return Err(ApiError::BadRequest(format!(
                "unknown group '{other}': condition, or none"
            )))
        }
    };
    let limit = q.limit.unwrap_or(100);
    if !(1..=API_MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit {limit} is out of range: 1 to {API_MAX_LIMIT}"
        )));
    }
    let f = AlertFilter {
        quota: Some(q.quota.trim().to_string()).filter(|s| !s.is_empty()),
        kind,
        open,
        quotas_in: records_scope(&app.service, &p).await?,
        before: q.before,
        level,
        loud_at: None,
    };
    let items = app
        .portal
        .sql
        .alerts(&f, limit)
        .await
        .map_err(crate::service::ServiceError::from)?;
    let next = (items.len() as i64 == limit)
        .then(|| items.last().map(|a| a.id))
        .flatten();
    let cfg = &app.service.keys;
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|a| {
            let mut item = alert_json(a, cfg);
            if grouped {
                item["ids"] = serde_json::json!([a.id]);
            }
            item
        })
        .collect();
    Ok(axum::Json(serde_json::json!({
        "items": items,
        "next": next,
    }))
    .into_response())
}

/// GET /api/v1/alerts/{id} — one alert (404 when it is not the caller's
/// to see, as when it does not exist).
pub async fn api_get(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let missing = || {
        ApiError::Service(crate::service::ServiceError::NotFound(format!(
            "alert {id} not found"
        )))
    };
    let n: i64 = id.parse().map_err(|_| missing())?;
    let a = app
        .portal
        .sql
        .alert(n)
        .await
        .map_err(crate::service::ServiceError::from)?
        .ok_or_else(missing)?;
    if let Some(names) = records_scope(&app.service, &p).await? {
        if !names.contains(&a.quota) {
            return Err(missing());
        }
    }
    Ok(axum::Json(alert_json(&a, &app.service.keys)).into_response())
}

fn alert_id(id: &str) -> Result<i64, ApiError> {
    id.parse().map_err(|_| {
        ApiError::Service(crate::service::ServiceError::NotFound(format!(
            "alert {id} not found"
        )))
    })
}

/// POST /api/v1/alerts/{id}/ack — the alert as it is now.
async fn api_ack(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = alert_id(&id)?;
    alert_ops::quiet(&app.audited(), &p, id, Quiet::Ack).await?;
    api_get(State(app), p, Path(id.to_string())).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SnoozeBody {
    hours: i64,
}

/// POST /api/v1/alerts/{id}/snooze `{"hours": 4}` — the alert as it is now.
async fn api_snooze(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let id = alert_id(&id)?;
    let b: SnoozeBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!("invalid snooze: {e}; expected {{\"hours\": 4}}"))
    })?;
    let how = Quiet::snooze(b.hours).map_err(ApiError::BadRequest)?;
    alert_ops::quiet(&app.audited(), &p, id, how).await?;
    api_get(State(app), p, Path(id.to_string())).await
}
