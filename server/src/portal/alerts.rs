//! Alert pages: GET /alerts (open and resolved, on the quotas the viewer
//! may see), the overview's section and the navigation's badge; a quota's
//! alert rules (/quotas/{name}/alerts); the viewer's email and alert
//! preferences (/account).

use super::auth::Viewer;
use super::PageError;
use crate::alerts::Alert;
use crate::alerts::{Kind, Level};
use crate::authz::{self, Principal};
use crate::edge::AppState;
use crate::service::alert_ops::{self, Quiet};
use crate::store::alerts::{AlertFilter, Pref};
use app::alerts::{AccountAlerts, AlertQuery, AlertRow, AlertSort, RuleRow, SortDir};
use app::layout::Flash;
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

/// Resolved alerts shown on the page, newest first.
const HISTORY_ROWS: i64 = 200;

/// An alert as the pages show it: its message with its keys by name ("A100
/// GPUs of nlp reached 80 %: 8 in use of 8; 6 keys: A100 GPUs 8 of 8 (100
/// %), …", `alerts::words`, as the emails say it); the API keeps the raw
/// keys.
pub fn row(a: Alert, cfg: &quota::KeyConfig) -> AlertRow {
    let quiet = quiet_line(&a);
    let message = crate::alerts::words(&a.message, &a.key, &a.numbers, cfg);
    AlertRow {
        id: a.id,
        kind: a.kind.as_str().to_string(),
        level: a.level.as_str().to_string(),
        message,
        quota: a.quota,
        opened: quota::time::format_when(a.opened_at),
        opened_ms: a.opened_at,
        resolved: a.resolved_at.map(quota::time::format_when),
        resolved_ms: a.resolved_at,
        quiet,
        can_quiet: false,
    }
}

/// "acknowledged by alice, 2026-11-25 16:30 UTC" or "snoozed by bob until …".
fn quiet_line(a: &Alert) -> Option<String> {
    if let Some((by, at)) = &a.acked {
        return Some(format!(
            "acknowledged by {by}, {}",
            quota::time::format_when(*at)
        ));
    }
    a.snoozed
        .as_ref()
        .filter(|(_, until)| *until > crate::util::now_ms())
        .map(|(by, until)| format!("snoozed by {by} until {}", quota::time::format_when(*until)))
}

/// Open alerts a page lists at once (worst first); the rest a link away.
const OPEN_ROWS: usize = 100;

/// Open alerts the overview groups at most (worst first, then newest): a
/// big tree's admin is shown the worst quotas, not every alert read.
const ATTENTION_ALERTS: i64 = 2_000;

fn loud(app: &AppState, quotas_in: Option<Vec<String>>) -> AlertFilter {
    AlertFilter {
        open: Some(true),
        quotas_in,
        // Acknowledged and snoozed alerts ask nobody now.
        loud_at: Some(app.service.now()),
        ..AlertFilter::default()
    }
}

/// The open alerts the viewer may see that ask for someone now, for the
/// overview: critical first, then warnings, then the rest, newest first
/// within a level, at most [`ATTENTION_ALERTS`].
pub async fn open_for(app: &AppState, p: &Principal) -> Result<Vec<AlertRow>, PageError> {
    let scope = crate::service::quota_ops::records_scope(&app.service, p).await?;
    let sql = &app.portal.sql;
    let mut out = Vec::new();
    for level in [Level::Critical, Level::Warning, Level::Info] {
        let left = ATTENTION_ALERTS - out.len() as i64;
        if left <= 0 {
            break;
        }
        let f = AlertFilter {
            level: Some(level),
            ..loud(app, scope.clone())
        };
        let cfg = &app.service.keys;
        out.extend(sql.alerts(&f, left).await?.into_iter().map(|a| row(a, cfg)));
    }
    Ok(out)
}

#[derive(Deserialize, Default)]
pub struct AlertParams {
    #[serde(default)]
    quota: String,
    #[serde(default)]
    kind: String,
    /// info, warning or critical; empty for any.
    #[serde(default)]
    level: String,
    /// The history's next page: resolved alerts older than this id.
    #[serde(default)]
    before: Option<i64>,
    /// Open alerts from this many on (worst first), a page at a time.
    #[serde(default)]
    open_from: usize,
    /// The open alerts' order: level (default), quota, kind, since, state.
    #[serde(default)]
    sort: String,
    /// asc or desc; empty: the column's first direction.
    #[serde(default)]
    dir: String,
}

impl AlertParams {
    /// The quota, kind and level filters, checked (the rest left open).
    pub fn filters(&self) -> Result<AlertFilter, PageError> {
        Ok(AlertFilter {
            kind: Kind::parse_filter(&self.kind).map_err(PageError::Invalid)?,
            level: Level::parse_filter(&self.level).map_err(PageError::Invalid)?,
            quota: Some(self.quota.trim().to_string()).filter(|s| !s.is_empty()),
            ..AlertFilter::default()
        })
    }
}

/// GET /alerts?quota=&kind=&level=&before=&open_from=&sort=&dir= — open
/// alerts (worst first, a page of [`OPEN_ROWS`]; `sort` orders the page),
/// then the history, newest first, a page at a time.
pub async fn page(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(q): Query<AlertParams>,
) -> Result<Response, PageError> {
    let AlertFilter {
        quota, kind, level, ..
    } = q.filters()?;
    let sort = AlertSort::parse(&q.sort).map_err(PageError::Invalid)?;
    let dir = SortDir::parse(&q.dir)
        .map_err(PageError::Invalid)?
        .unwrap_or(sort.first_dir());
    // Links carry the order only when it is not the default one.
    let (sort_s, dir_s) = if (sort, dir) == (AlertSort::Level, SortDir::Desc) {
        ("", "")
    } else {
        (sort.as_str(), dir.as_str())
    };
    let scope = crate::service::quota_ops::records_scope(&app.service, &viewer.principal).await?;
    let filter = |open| AlertFilter {
        quota: quota.clone(),
        kind,
        open: Some(open),
        quotas_in: scope.clone(),
        before: None,
        level,
        loud_at: None,
    };
    let sql = &app.portal.sql;
    // Worst first, then newest: read level by level only as far as this
    // page reaches, and count the rest (a big tree has thousands open).
    let total_open = sql.count_alerts(&filter(true)).await? as usize;
    let from = q.open_from.min(total_open);
    let reach = (from + OPEN_ROWS) as i64;
    let mut open: Vec<Alert> = Vec::new();
    for l in [Level::Critical, Level::Warning, Level::Info] {
        if level.is_some_and(|want| want != l) || open.len() as i64 >= reach {
            continue;
        }
        let f = AlertFilter {
            level: Some(l),
            ..filter(true)
        };
        open.extend(sql.alerts(&f, reach - open.len() as i64).await?);
    }
    let history = AlertFilter {
        before: q.before,
        ..filter(false)
    };
    let resolved = sql.alerts(&history, HISTORY_ROWS).await?;
    let older = (resolved.len() as i64 == HISTORY_ROWS)
        .then(|| resolved.last().map(|a| a.id))
        .flatten()
        .map(|id| {
            let query = serde_urlencoded::to_string([
                ("quota", q.quota.as_str()),
                ("kind", q.kind.as_str()),
                ("level", q.level.as_str()),
                ("before", id.to_string().as_str()),
                ("sort", sort_s),
                ("dir", dir_s),
            ])
            .unwrap_or_default();
            format!("/alerts?{query}")
        });
    // A page of the open alerts; the next page a link away.
    let open: Vec<Alert> = open.into_iter().skip(from).take(OPEN_ROWS).collect();
    let more_open = (from + open.len() < total_open).then(|| {
        let query = serde_urlencoded::to_string([
            ("quota", q.quota.as_str()),
            ("kind", q.kind.as_str()),
            ("level", q.level.as_str()),
            ("open_from", (from + OPEN_ROWS).to_string().as_str()),
            ("sort", sort_s),
            ("dir", dir_s),
        ])
        .unwrap_or_default();
        (total_open - from - open.len(), format!("/alerts?{query}"))
    });
    // Who may quiet which: admins all, owners their quotas' (as for rules).
    let p = &viewer.principal;
    let tree = crate::service::quota_ops::tree_for(&app.audited(), p).await?;
    let mut open_rows: Vec<AlertRow> = open
        .into_iter()
        .map(|a| {
            let can = p.is_admin || authz::can_set_alert_rules(p, &a.quota, &tree);
            AlertRow {
                can_quiet: can,
                ..row(a, &app.service.keys)
            }
        })
        .collect();
    // The page read stays the worst OPEN_ROWS (bounded, level by level);
    // the order asked for is the order of those rows. When all open
    // alerts fit on one page that is the whole list's order.
    app::alerts::sort_rows(&mut open_rows, sort, dir);
    let sorted_within = total_open > OPEN_ROWS;
    let flash = viewer.take_flash().await;
    Ok(Html(app::alerts::render_alerts_page(
        viewer.page(),
        open_rows,
        resolved
            .into_iter()
            .map(|a| row(a, &app.service.keys))
            .collect(),
        AlertQuery {
            quota: q.quota,
            kind: q.kind,
            level: q.level,
            sort,
            dir,
            open_from: from,
        },
        app::alerts::AlertPages {
            more_open,
            older,
            sorted_within,
        },
        Kind::ALL.map(|k| k.as_str().to_string()).to_vec(),
        flash,
    ))
    .into_response())
}

#[derive(Deserialize)]
pub struct SnoozeForm {
    #[serde(default)]
    hours: String,
}

/// The answer to a form that quieted an alert: back to /alerts with what
/// was done, or the refusal as the flash (a 404 page when it is not the
/// viewer's to see).
async fn quieted(
    viewer: &Viewer,
    done: Result<String, crate::service::quota_ops::ChangeError>,
) -> Result<Response, PageError> {
    use crate::service::quota_ops::ChangeError;
    use crate::service::ServiceError;
    let flash = match done {
        Ok(s) => Flash::Ok(s),
        Err(ChangeError::Forbidden(m)) => return Err(PageError::Forbidden(m)),
        Err(ChangeError::Service(e @ ServiceError::Conflict(_))) => Flash::Error(e.to_string()),
        Err(ChangeError::Service(e)) => return Err(e.into()),
    };
    viewer.set_flash(flash).await;
    Ok(Redirect::to("/alerts").into_response())
}

/// POST /alerts/{id}/ack
pub async fn ack(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<i64>,
) -> Result<Response, PageError> {
    let done = alert_ops::quiet(&app.audited(), &viewer.principal, id, Quiet::Ack).await;
    quieted(&viewer, done).await
}

/// POST /alerts/{id}/snooze (hours: one of the choices)
pub async fn snooze(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<i64>,
    Form(f): Form<SnoozeForm>,
) -> Result<Response, PageError> {
    let how = f
        .hours
        .trim()
        .parse::<i64>()
        .map_err(|_| {
            format!(
                "snooze for '{}' hours is not offered: 1, 4, 24 or 168 hours",
                f.hours.trim()
            )
        })
        .and_then(Quiet::snooze);
    let how = match how {
        Ok(how) => how,
        Err(m) => {
            viewer.set_flash(Flash::Error(m)).await;
            return Ok(Redirect::to("/alerts").into_response());
        }
    };
    let done = alert_ops::quiet(&app.audited(), &viewer.principal, id, how).await;
    quieted(&viewer, done).await
}

/// Alerts one bulk form may quiet at once: the open alerts a page shows
/// (100), their groups' ids included, with room to spare.
pub const MAX_BULK: usize = 500;

/// POST /alerts/quiet — acknowledge (`action=ack`) or snooze
/// (`action=snooze`, `hours`) the alerts ticked on the alerts page (each
/// `id` one alert or a row's group, `12,13,17`), each as its own
/// acknowledge or snooze would: authorised one by one, audited, the
/// refusals said. CSRF as every form (the router's `require_csrf`).
pub async fn quiet_many(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let back = |m: String| async {
        viewer.set_flash(Flash::Error(m)).await;
        Ok(Redirect::to("/alerts").into_response())
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .unwrap_or_default()
    };
    let mut ids: Vec<i64> = Vec::new();
    for (_, v) in fields.iter().filter(|(k, _)| k == "id") {
        for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<i64>() {
                Ok(id) if id > 0 => ids.push(id),
                _ => {
                    return back(format!(
                        "'{}' is not an alert id",
                        part.chars().take(40).collect::<String>()
                    ))
                    .await
                }
            }
        }
        if ids.len() > MAX_BULK {
            return back(format!("at most {MAX_BULK} alerts at once")).await;
        }
    }
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return back("tick at least one alert first".into()).await;
    }
    let how = match field("action") {
        "ack" => Quiet::Ack,
        "snooze" => {
            let hours = field("hours");
            match hours
                .parse::<i64>()
                .map_err(|_| ())
                .and_then(|h| Quiet::snooze(h).map_err(|_| ()))
            {
                Ok(how) => how,
                Err(()) => {
                    return back(format!(
                        "snooze for '{}' hours is not offered: 1, 4, 24 or 168 hours",
                        hours.chars().take(20).collect::<String>()
                    ))
                    .await
                }
            }
        }
        other => {
            return back(format!(
                "'{}' is not something to do with alerts: acknowledge or snooze",
                other.chars().take(20).collect::<String>()
            ))
            .await
        }
    };
    let (mut done, mut refused) = (0usize, Vec::new());
    for id in &ids {
        match alert_ops::quiet(&app.audited(), &viewer.principal, *id, how).await {
            Ok(_) => done += 1,
            Err(crate::service::quota_ops::ChangeError::Forbidden(m)) => refused.push(m),
            Err(crate::service::quota_ops::ChangeError::Service(e)) => match e {
                crate::service::ServiceError::NotFound(_)
                | crate::service::ServiceError::Conflict(_) => refused.push(e.to_string()),
                e => return Err(e.into()),
            },
        }
    }
    let verb = match how {
        Quiet::Ack => "acknowledged",
        Quiet::Snooze(_) => "snoozed",
    };
    let plural = if done == 1 { "" } else { "s" };
    let flash = if refused.is_empty() {
        Flash::Ok(format!("{done} alert{plural} {verb}"))
    } else {
        refused.dedup();
        Flash::Error(format!(
            "{done} alert{plural} {verb}; not the others: {}",
            refused.join("; ")
        ))
    };
    viewer.set_flash(flash).await;
    Ok(Redirect::to("/alerts").into_response())
}

// ---- Rules of a quota ----

async fn rules_context(
    app: &AppState,
    viewer: &Viewer,
    name: &str,
) -> Result<(quota::Quota, bool), PageError> {
    let (all, tree) = super::scope::visible_tree(app, viewer, name).await?;
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
    let stored = app.portal.sql.alert_rules(&name).await?;
    let cfg = &app.service.keys;
    // The forecast alerts open on it now, as /alerts lists them: what the
    // page says of each budget is read with them, never instead of them.
    let open_now = app
        .portal
        .sql
        .alerts(
            &AlertFilter {
                quota: Some(name.clone()),
                kind: Some(Kind::CashForecast),
                open: Some(true),
                ..AlertFilter::default()
            },
            100,
        )
        .await?;
    let mut cash: Vec<&String> = q
        .spec
        .hard
        .keys()
        .filter(|k| k.starts_with(quota::keys::CASH_PREFIX))
        .collect();
    cash.sort_by_cached_key(|k| quota::keys::display_order(k, cfg));
    let forecasts = cash
        .into_iter()
        .map(|k| {
            let ruled = crate::alerts::set_rule(&stored, k).and_then(|r| r.forecast_horizon_hours);
            let from = if ruled.is_some() {
                "its rule's horizon".to_string()
            } else if q
                .spec
                .budgets
                .get(k)
                .is_some_and(|b| b.forecast_days.is_some())
            {
                "the budget's forecastDays".to_string()
            } else {
                "the budgets' default horizon".to_string()
            };
            let open = open_now
                .iter()
                .filter(|a| a.key == *k || a.keys.contains(k))
                .map(|a| {
                    (
                        a.level.as_str().to_string(),
                        crate::alerts::words(&a.message, &a.key, &a.numbers, cfg),
                    )
                })
                .collect();
            let suspends = q.spec.budgets.get(k).is_some_and(|b| {
                matches!(
                    b.on_exhausted,
                    quota::object::budgets::Exhaustion::SuspendBatch { .. }
                )
            });
            app::alerts::ForecastLine {
                key: k.clone(),
                name: app::key_name(k, cfg),
                hours: crate::alerts::forecast_horizon(&q, &stored, k),
                from,
                suspends,
                open,
            }
        })
        .collect();
    let rules = stored
        .into_iter()
        .map(|r| RuleRow {
            key: r.key,
            warn_percent: r.warn_percent,
            crit_percent: r.crit_percent,
            forecast_horizon_hours: r.forecast_horizon_hours,
            allocation_percent: r.allocation_percent,
        })
        .collect();
    let defaults = crate::alerts::Defaults::of(&q, cfg).words();
    let mut keys: Vec<String> = q.spec.hard.keys().cloned().collect();
    keys.sort_by_cached_key(|k| quota::keys::display_order(k, cfg));
    let keys = keys
        .into_iter()
        .map(|k| {
            let name = app::key_name(&k, cfg);
            (k, name)
        })
        .collect();
    let flash = viewer.take_flash().await;
    Ok(Html(app::alerts::render_rules_page(
        viewer.page(),
        name,
        rules,
        keys,
        defaults,
        forecasts,
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
    allocation_percent: String,
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
    let said = match key.as_str() {
        "*" => "every key (*)".to_string(),
        k => app::key_name(k, &app.service.keys),
    };
    let (done, after) = if !f.delete.is_empty() {
        sql.delete_alert_rule(&name, &key).await?;
        (
            format!("the rule for {said} of {name} is removed: the defaults apply"),
            None,
        )
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
                "warn at {warn} % comes after critical at {crit} %: lower warn to {crit} % or \
                 less, or raise critical to {warn} % or more"
            )));
        }
        let horizon = number("the forecast horizon", &f.forecast_horizon_hours, None)?;
        let allocation = number("allocated %", &f.allocation_percent, None)?;
        let rule = crate::alerts::Rule {
            key: key.clone(),
            warn_percent: warn,
            crit_percent: crit,
            forecast_horizon_hours: horizon,
            allocation_percent: allocation,
        };
        sql.set_alert_rule(&name, &rule).await?;
        let notice = allocation
            .map(|p| format!(", a notice at {p} % allocated"))
            .unwrap_or_default();
        (
            format!("{said} of {name}: warn at {warn} % in use, critical at {crit} %{notice}"),
            Some(serde_json::json!({
                "key": key, "warnPercent": warn, "critPercent": crit, "forecastHorizonHours": horizon,
                "allocationPercent": allocation,
            })),
        )
    };
    app.audit(
        &viewer.principal,
        crate::store::audit::action::ALERT_RULE,
        &name,
        None,
        after,
        &done,
    )
    .await;
    // Its alerts follow the rule at once (an alert the rule no longer asks
    // for resolves), not at the next sweep: the quota is evaluated again as
    // after a write of it.
    let before_read = app.service.now();
    if let Ok(s) = app.service.get(&name).await {
        app.service
            .changed
            .mark(&name, before_read, Some(std::sync::Arc::new(s)));
    }
    viewer.set_flash(Flash::Ok(done)).await;
    Ok(Redirect::to(&format!("/quotas/{name}/alerts")).into_response())
}

// ---- The viewer's own settings ----

/// GET /account — the viewer's email address and alert preferences.
pub async fn account_page(
    State(app): State<AppState>,
    viewer: Viewer,
) -> Result<Response, PageError> {
    let id = user_id(&viewer)?;
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
        AccountAlerts {
            email,
            kinds,
            digest_hour: app.portal.config.digest_hour,
        },
        flash,
    ))
    .into_response())
}

fn user_id(viewer: &Viewer) -> Result<i64, PageError> {
    viewer
        .principal
        .user_id
        .ok_or_else(|| PageError::Forbidden("the account page is for users, not tokens".into()))
}

/// POST /account — email (empty: none) and, per kind, mute.KIND and
/// digest.KIND checkboxes. Each change is audited.
pub async fn save_account(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let id = user_id(&viewer)?;
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
    };
    let email = super::forms::parse_email(get("email").unwrap_or_default())?;
    let p = &viewer.principal;
    super::accounts::change_email(
        &app,
        p,
        id,
        &p.username,
        email,
        "alert email address changed on /account",
    )
    .await?;
    let sql = &app.portal.sql;
    let target = crate::service::audit::user_target(&p.username);
    let before = sql.alert_prefs(id).await?;
    let mut changed = Vec::new();
    for k in Kind::ALL {
        let pref = Pref {
            muted: get(&format!("mute.{}", k.as_str())).is_some(),
            digest: get(&format!("digest.{}", k.as_str())).is_some(),
        };
        if before.get(&k).copied().unwrap_or_default() != pref {
            sql.set_alert_pref(id, k, pref).await?;
            changed.push(k);
        }
    }
    if !changed.is_empty() {
        let prefs = |m: &std::collections::BTreeMap<Kind, Pref>| {
            serde_json::Value::Object(
                changed
                    .iter()
                    .map(|k| {
                        let p = m.get(k).copied().unwrap_or_default();
                        (
                            k.as_str().to_string(),
                            serde_json::json!({ "muted": p.muted, "digest": p.digest }),
                        )
                    })
                    .collect(),
            )
        };
        let after = sql.alert_prefs(id).await?;
        app.audit(
            &viewer.principal,
            crate::store::audit::action::ALERT_PREFS,
            &target,
            Some(prefs(&before)),
            Some(prefs(&after)),
            &format!(
                "alert preferences changed: {}",
                changed
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .await;
    }
    viewer
        .set_flash(Flash::Ok("your alert settings are saved".into()))
        .await;
    Ok(Redirect::to("/account").into_response())
}
