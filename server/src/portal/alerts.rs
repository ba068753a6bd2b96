//! Alert pages: GET /alerts (open and resolved, on the quotas the viewer
//! may see), the overview's section and the navigation's badge; a quota's
//! alert rules (/quotas/{name}/alerts); the viewer's email and alert
//! preferences (/account).

use super::auth::Viewer;
use super::authz::{self as authz, visible_names, Principal, Tree};
use super::PageError;
use crate::alerts::Kind;
use crate::http::AppState;
use crate::store::alerts::{Alert, AlertFilter, Pref};
use app::alerts::{AccountAlerts, AlertQuery, AlertRow, RuleRow};
use app::layout::Flash;
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

/// Resolved alerts shown on the page, newest first.
const HISTORY_ROWS: i64 = 200;

fn when(ms: i64) -> String {
    quota::time::format_minute(ms)
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

// ---- Rules of a quota ----

async fn rules_context(
    app: &AppState,
    viewer: &Viewer,
    name: &str,
) -> Result<(quota::Quota, bool), PageError> {
    let all = app.service.list().await?;
    let tree = Tree::from_quotas(&all);
    if !authz::can_view(&viewer.principal, name, &tree) {
        return Err(PageError::NotFound(format!("bizrq {name} not found")));
    }
    let q = all
        .into_iter()
        .find(|q| q.name() == name)
        .ok_or_else(|| PageError::NotFound(format!("bizrq {name} not found")))?;
    let can_edit = authz::can_set_alert_rules(&viewer.principal, name, &tree);
    Ok((q, can_edit))
}

/// GET /quotas/{name}/alerts — the quota's alert rules.
pub async fn rules_page(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    let (q, can_edit) = rules_context(&app, &viewer, &name).await?;
    let rules = app
        .portal
        .sql
        .alert_rules(&name)
        .await?
        .into_iter()
        .map(|r| RuleRow {
            key: r.key,
            warn_percent: r.warn_percent,
            crit_percent: r.crit_percent,
            forecast_horizon_hours: r.forecast_horizon_hours,
        })
        .collect();
    let flash = viewer.take_flash().await;
    Ok(Html(app::alerts::render_rules_page(
        viewer.page(),
        name,
        rules,
        q.spec.hard.keys().cloned().collect(),
        can_edit,
        flash,
    ))
    .into_response())
}

#[derive(Deserialize)]
pub struct RuleForm {
    key: String,
    #[serde(default)]
    warn_percent: String,
    #[serde(default)]
    crit_percent: String,
    #[serde(default)]
    forecast_horizon_hours: String,
    #[serde(default)]
    delete: String,
}

fn number(field: &str, text: &str, default: Option<i64>) -> Result<Option<i64>, PageError> {
    match text.trim() {
        "" => Ok(default),
        t => match t.parse::<i64>() {
            Ok(n) if (1..=100_000).contains(&n) => Ok(Some(n)),
            _ => Err(PageError::Invalid(format!(
                "{field} must be a whole number from 1 to 100000, not '{t}'"
            ))),
        },
    }
}

/// POST /quotas/{name}/alerts — set (or with `delete`, remove) one rule.
pub async fn save_rule(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<RuleForm>,
) -> Result<Response, PageError> {
    let (q, can_edit) = rules_context(&app, &viewer, &name).await?;
    if !can_edit {
        return Err(PageError::Forbidden(format!(
            "only owners of {name} (or of a quota above it) and admins may set its alert rules"
        )));
    }
    let key = f.key.trim().to_string();
    if key != "*" && !q.spec.hard.contains_key(&key) {
        return Err(PageError::Invalid(format!(
            "{name} has no key '{key}': choose one of its keys or '*'"
        )));
    }
    let sql = &app.portal.sql;
    let (done, after) = if !f.delete.is_empty() {
        sql.delete_alert_rule(&name, &key).await?;
        (format!("the rule for {key} of {name} is removed"), None)
    } else {
        let warn = number(
            "warn %",
            &f.warn_percent,
            Some(crate::alerts::DEFAULT_WARN_PERCENT),
        )?
        .unwrap_or(crate::alerts::DEFAULT_WARN_PERCENT);
        let crit = number(
            "critical %",
            &f.crit_percent,
            Some(crate::alerts::DEFAULT_CRIT_PERCENT),
        )?
        .unwrap_or(crate::alerts::DEFAULT_CRIT_PERCENT);
        if warn > crit {
            return Err(PageError::Invalid(format!(
                "warn at {warn} % comes after critical at {crit} %: warn must not be above critical"
            )));
        }
        let horizon = number("the forecast horizon", &f.forecast_horizon_hours, None)?;
        let rule = crate::alerts::Rule {
            key: key.clone(),
            warn_percent: warn,
            crit_percent: crit,
            forecast_horizon_hours: horizon,
        };
        sql.set_alert_rule(&name, &rule).await?;
        (
            format!("{key} of {name}: warn at {warn} %, critical at {crit} %"),
            Some(serde_json::json!({
                "key": key, "warnPercent": warn, "critPercent": crit, "forecastHorizonHours": horizon,
            })),
        )
    };
    app.audit(
        &viewer.principal,
        super::audit::action::ALERT_RULE,
        &name,
        None,
        after,
        &done,
    )
    .await;
    viewer.set_flash(Flash::Ok(done)).await;
    Ok(Redirect::to(&format!("/quotas/{name}/alerts")).into_response())
}

// ---- The viewer's own settings ----

/// GET /account — the viewer's email address and alert preferences.
pub async fn account_page(
    State(app): State<AppState>,
    viewer: Viewer,
) -> Result<Response, PageError> {
    let id = user_id(&app, &viewer).await?;
    let sql = &app.portal.sql;
    let email = sql.user_email(id).await?.unwrap_or_default();
    let prefs = sql.alert_prefs(id).await?;
    let kinds = Kind::ALL
        .into_iter()
        .map(|k| {
            let p = prefs.get(&k).copied().unwrap_or_default();
            (k.as_str().to_string(), p.muted, p.digest)
        })
        .collect();
    let flash = viewer.take_flash().await;
    Ok(Html(app::alerts::render_account_page(
        viewer.page(),
        AccountAlerts { email, kinds },
        flash,
    ))
    .into_response())
}

async fn user_id(app: &AppState, viewer: &Viewer) -> Result<i64, PageError> {
    app.portal
        .sql
        .user_by_name(&viewer.principal.username)
        .await?
        .map(|u| u.id)
        .ok_or_else(|| PageError::Forbidden("the account page is for users, not tokens".into()))
}

/// POST /account — email (empty: none) and, per kind, mute.KIND and
/// digest.KIND checkboxes.
pub async fn save_account(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let id = user_id(&app, &viewer).await?;
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
    };
    let email = get("email").unwrap_or_default();
    if !email.is_empty() && (!email.contains('@') || email.contains(char::is_whitespace)) {
        return Err(PageError::Invalid(format!(
            "'{email}' is not an email address"
        )));
    }
    let sql = &app.portal.sql;
    sql.set_user_email(id, Some(email).filter(|e| !e.is_empty()))
        .await?;
    for k in Kind::ALL {
        let pref = Pref {
            muted: get(&format!("mute.{}", k.as_str())).is_some(),
            digest: get(&format!("digest.{}", k.as_str())).is_some(),
        };
        sql.set_alert_pref(id, k, pref).await?;
    }
    viewer
        .set_flash(Flash::Ok("your alert settings are saved".into()))
        .await;
    Ok(Redirect::to("/account").into_response())
}
