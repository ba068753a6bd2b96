//! `/reports` (the page) and `/reports.csv`: budget reports for a person
//! logged in (`crate::reports`: the same parameters, checks and
//! visibility as `GET /api/v1/reports`). The page works without scripts:
//! its form is a GET, its chart inline SVG. A wrong parameter shows the
//! form again with what to fix (status 422).

use super::auth::Viewer;
use super::PageError;
use crate::edge::AppState;
use crate::reports::{self, Made, Params, ReportError};
use crate::service::ServiceError;
use app::reports::{ReportForm, ReportRow, ReportsPage};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use quota::budget::report::Bucket;
use quota::keys::cash_target;
use std::collections::{BTreeMap, BTreeSet};

/// Groups drawn as their own layer; the rest are summed as "others".
const LAYERS: usize = 7;

fn form_of(p: &Params) -> ReportForm {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    ReportForm {
        from: s(&p.from),
        to: s(&p.to),
        by: p.by.clone().unwrap_or_else(|| "child".into()),
        bucket: p.bucket.clone().unwrap_or_else(|| "day".into()),
        subtree: s(&p.subtree),
        key: s(&p.key),
        utc_offset_minutes: s(&p.utc_offset_minutes),
    }
}

fn query_of(p: &Params, format: &str) -> String {
    // The page's own links name their format; the asked one is dropped.
    let pairs: Vec<(&str, &str)> = p
        .named()
        .into_iter()
        .filter(|(k, _)| *k != "format")
        .filter_map(|(k, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| (k, v)))
        .chain((!format.is_empty()).then_some(("format", format)))
        .collect();
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// A report row's real usage in words: "2 of 8 GPU-hours busy (25 %),
/// 4 idle".
fn efficiency_words(f: &quota::real_usage::figures::GpuFigures) -> String {
    use quota::real_usage::figures::card_hours;
    if f.allocated == 0 {
        return "no GPU held".into();
    }
    let h = |ms: i64| quota::readable::grouped(card_hours(ms));
    format!(
        "{} of {} GPU-hours busy ({}), {} idle",
        h(f.busy),
        h(f.allocated),
        f.efficiency_words(),
        h(f.idle)
    )
}

/// The page's strings and chart for a report made.
pub fn page_of(m: &Made) -> (String, String, Vec<ReportRow>, String, String) {
    let s = &m.spec;
    let unit = m.unit;
    let with_unit = |acc: i128| format!("{} {unit}", reports::hours_readable(acc));
    let per = match s.bucket {
        Bucket::None => String::new(),
        b => format!(" per {}", reports::bucket_name(b)),
    };
    let offset = if s.utc_offset_minutes == 0 {
        "UTC".to_string()
    } else {
        let m = s.utc_offset_minutes;
        format!(
            "UTC{}{:02}:{:02}",
            if m < 0 { '-' } else { '+' },
            m.abs() / 60,
            m.abs() % 60
        )
    };
    let title = format!(
        "Spending by {}{per}{}, {} – {} ({offset})",
        reports::by_name(s.by),
        s.subtree
            .as_deref()
            .map(|t| format!(" under {t}"))
            .unwrap_or_default(),
        quota::time::format_when(s.from_ms),
        quota::time::format_when(s.to_ms),
    );
    // Layers: the groups with the most, the rest as "others".
    let mut by_group: BTreeMap<&str, i128> = BTreeMap::new();
    for r in &m.report.rows {
        *by_group.entry(&r.group).or_insert(0) += r.amount;
    }
    let mut order: Vec<(&str, i128)> = by_group.into_iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let kept: Vec<&str> = order.iter().take(LAYERS).map(|(g, _)| *g).collect();
    let buckets: Vec<i64> = m
        .report
        .rows
        .iter()
        .map(|r| r.bucket_start_ms)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: BTreeMap<i64, usize> = buckets.iter().enumerate().map(|(i, b)| (*b, i)).collect();
    let mut layers: Vec<(String, Vec<f64>)> = kept
        .iter()
        .map(|g| (g.to_string(), vec![0.0; buckets.len()]))
        .collect();
    let others = order.len().saturating_sub(LAYERS);
    if others > 0 {
        layers.push((format!("{others} others"), vec![0.0; buckets.len()]));
    }
    for r in &m.report.rows {
        let layer = kept.iter().position(|g| *g == r.group).unwrap_or(LAYERS);
        let hours = quota::budget::to_quantity(r.amount).nanos() as f64 / 1e9;
        let last = layers.len() - 1;
        layers[layer.min(last)].1[index[&r.bucket_start_ms]] += hours;
    }
    let labels: Vec<String> = buckets
        .iter()
        .map(|b| reports::bucket_label(s, *b))
        .collect();
    let chart_title = format!("{title}, {unit}");
    let chart = app::charts::both(|frame| {
        app::charts::report_chart(&chart_title, &labels, &layers, unit, frame)
    });
    let rows = m
        .report
        .rows
        .iter()
        .map(|r| ReportRow {
            bucket: reports::bucket_label(s, r.bucket_start_ms),
            group: r.group.clone(),
            amount: with_unit(r.amount),
            sort: reports::hours(r.amount),
            efficiency: reports::efficiency_of(m, r).map(|f| efficiency_words(&f)),
        })
        .collect();
    let reconcile = format!(
        "Total {} = the sum of the {} ledger entries in this range, to the acc ({} acc, {} exactly){}.",
        with_unit(m.report.total),
        quota::readable::group_thousands(&m.entries.to_string()),
        quota::readable::group_thousands(&m.report.total.to_string()),
        quota::readable::group_thousands(&reports::hours(m.report.total)),
        match m.straddling {
            0 => String::new(),
            n => format!("; {n} of them cross its edges and count by the share of their time inside it"),
        }
    );
    (title, chart, rows, with_unit(m.report.total), reconcile)
}

/// GET /reports
pub async fn page(
    State(app): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    // A heavy request (`crate::heavy`).
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    let visible =
        crate::service::quota_ops::visible_quotas(&app.service, &viewer.principal).await?;
    let quotas: Vec<String> = visible.iter().map(|q| q.name().to_string()).collect();
    let keys: Vec<String> = visible
        .iter()
        .flat_map(|q| q.spec.hard.keys())
        .filter(|k| cash_target(k).is_some())
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let params = reports::params_of(raw.as_deref());
    let form = params.as_ref().map(form_of).unwrap_or_default();
    let mut page = ReportsPage {
        form,
        quotas,
        keys,
        ..Default::default()
    };
    let made = async {
        let mut p = params?;
        // The page buckets by day unless asked otherwise.
        p.bucket.get_or_insert_with(|| "day".into());
        let (spec, _) = reports::parse(&p, app.service.now())?;
        let read = reports::read(&app.service, &app.portal.sql, &viewer.principal, spec).await?;
        // Aggregated on a render thread, with what the form and notes need.
        let made = place
            .work(move || {
                read.make().map(|m| {
                    let (s, notes) = (m.spec.clone(), m.notes.clone());
                    (s, notes, page_of(&m))
                })
            })
            .await
            .map_err(|e| ReportError::Service(ServiceError::Internal(e.to_string())))??;
        Ok::<_, ReportError>((made, p))
    }
    .await;
    let status = match made {
        Ok(((s, notes, (title, chart, mut rows, total, reconcile)), p)) => {
            if s.by == quota::budget::report::Dimension::User {
                // Who each Kubernetes username is here, where linked.
                let linked = app.portal.sql.kube_usernames().await.unwrap_or_default();
                for r in &mut rows {
                    r.group = crate::identity::kube_name::shown(&linked, &r.group);
                }
            }
            page.title = title;
            page.chart = chart;
            page.rows = rows;
            page.total = total;
            page.reconcile = reconcile;
            page.csv_href = format!("/reports.csv?{}", query_of(&p, ""));
            page.json_href = format!("/api/v1/reports?{}", query_of(&p, ""));
            // The form shows what was reported on, defaults and
            // snapping included, so the next change starts from it.
            let day = |ms: i64| {
                quota::time::format_rfc3339(ms + s.utc_offset_minutes as i64 * 60_000)[..10]
                    .to_string()
            };
            let days = quota::budget::ledger_rollup::Grid::days(s.utc_offset_minutes);
            let (whole_from, whole_to) = (days.aligned(s.from_ms), days.aligned(s.to_ms));
            page.form.from = if whole_from {
                day(s.from_ms)
            } else {
                quota::time::format_rfc3339(s.from_ms)
            };
            page.form.to = if whole_to {
                day(s.to_ms - 1)
            } else {
                quota::time::format_rfc3339(s.to_ms)
            };
            page.form.by = reports::by_name(s.by).into();
            page.form.subtree = s.subtree.clone().unwrap_or_default();
            if s.utc_offset_minutes != 0 {
                page.form.utc_offset_minutes = s.utc_offset_minutes.to_string();
            }
            page.notes = notes;
            StatusCode::OK
        }
        Err(ReportError::Invalid(e)) => {
            page.error = Some(e);
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Err(ReportError::Service(e)) => return Err(e.into()),
    };
    let flash = viewer.take_flash().await;
    Ok((
        status,
        Html(app::reports::render_reports_page(
            viewer.page(),
            page,
            flash,
        )),
    )
        .into_response())
}

/// GET /reports.csv
pub async fn csv(
    State(app): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    // A heavy request (`crate::heavy`).
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    let made = async {
        let p = reports::params_of(raw.as_deref())?;
        let (spec, _) = reports::parse(&p, app.service.now())?;
        reports::read(&app.service, &app.portal.sql, &viewer.principal, spec).await
    }
    .await;
    match made {
        Ok(read) => Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"bizrq-report.csv\"",
                ),
            ],
            place
                .render(move || read.make().map(|m| reports::to_csv(&m)))
                .await?
                .map_err(|e| match e {
                    ReportError::Invalid(e) => PageError::Invalid(e),
                    ReportError::Service(e) => e.into(),
                })?,
        )
            .into_response()),
        Err(ReportError::Invalid(e)) => Err(PageError::Invalid(e)),
        Err(ReportError::Service(e)) => Err(e.into()),
    }
}
