//! Alert pages: GET /alerts (open and resolved, on the quotas the viewer
//! may see), the overview's section and the navigation's badge.

use super::auth::Viewer;
use super::authz::{visible_names, Principal, Tree};
use super::PageError;
use crate::alerts::Kind;
use crate::http::AppState;
use crate::store::alerts::{Alert, AlertFilter};
use app::alerts::{AlertQuery, AlertRow};
use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

/// Resolved alerts shown on the page, newest first.
const HISTORY_ROWS: i64 = 200;

fn when(ms: i64) -> String {
    quota::time::format_rfc3339(ms)[..16].replace('T', " ")
}

pub fn row(a: Alert) -> AlertRow {
    AlertRow {
        id: a.id,
        kind: a.kind.as_str().to_string(),
        quota: a.quota,
        level: a.level.as_str().to_string(),
        message: a.message,
        opened: when(a.opened_at),
        resolved: a.resolved_at.map(when),
    }
}

/// Of `alerts`, those on quotas `p` may see (admins: all, also on quotas
/// since deleted).
async fn visible_alerts(
    app: &AppState,
    p: &Principal,
    alerts: Vec<Alert>,
) -> Result<Vec<Alert>, PageError> {
    if p.is_admin {
        return Ok(alerts);
    }
    let all = app.service.list().await?;
    let names = visible_names(p, &Tree::from_quotas(&all));
    Ok(alerts
        .into_iter()
        .filter(|a| names.contains(&a.quota))
        .collect())
}

/// The open alerts the viewer may see, newest first (overview, badge).
pub async fn open_for(app: &AppState, p: &Principal) -> Result<Vec<AlertRow>, PageError> {
    let open = app.portal.sql.open_alerts().await?;
    Ok(visible_alerts(app, p, open)
        .await?
        .into_iter()
        .map(row)
        .collect())
}

#[derive(Deserialize, Default)]
pub struct AlertParams {
    #[serde(default)]
    quota: String,
    #[serde(default)]
    kind: String,
}

/// GET /alerts?quota=&kind= — open alerts, then the history.
pub async fn page(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(q): Query<AlertParams>,
) -> Result<Response, PageError> {
    let kind = match q.kind.trim() {
        "" => None,
        k => Some(Kind::parse(k).ok_or_else(|| {
            PageError::Invalid(format!(
                "unknown alert kind '{k}': one of {}",
                Kind::ALL.map(Kind::as_str).join(", ")
            ))
        })?),
    };
    let quota = Some(q.quota.trim().to_string()).filter(|s| !s.is_empty());
    let filter = |open| AlertFilter {
        quota: quota.clone(),
        kind,
        open: Some(open),
    };
    let sql = &app.portal.sql;
    let open = sql.alerts(&filter(true), i64::MAX).await?;
    let resolved = sql.alerts(&filter(false), HISTORY_ROWS).await?;
    let p = &viewer.principal;
    let open = visible_alerts(&app, p, open).await?;
    let resolved = visible_alerts(&app, p, resolved).await?;
    let flash = viewer.take_flash().await;
    Ok(Html(app::alerts::render_alerts_page(
        viewer.page(),
        open.into_iter().map(row).collect(),
        resolved.into_iter().map(row).collect(),
        AlertQuery {
            quota: q.quota,
            kind: q.kind,
        },
        Kind::ALL.map(|k| k.as_str().to_string()).to_vec(),
        flash,
    ))
    .into_response())
}
