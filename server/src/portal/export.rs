//! CSV exports beside the pages: `/tree.csv` (every key of every quota the
//! viewer may see, as the bars read it) and `/alerts.csv` (the alerts the
//! page's filters select). Amounts are exact decimals in the unit the
//! header names, so a spreadsheet sums them; fields are quoted as the audit
//! export quotes them (`audit::csv_field`, formulas defused).

use super::auth::Viewer;
use super::PageError;
use crate::edge::AppState;
use crate::service::quota_ops;
use crate::store::alerts::AlertFilter;
use crate::util::csv_field;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use quota::keys::cash_target;
use quota::readable::exact;
use quota::rollup::rollup;
use quota::{resources, KeyConfig, Quota, ResourceList};
use std::collections::BTreeMap;

/// Alerts an export holds at most (newest first).
pub const ALERT_ROWS: i64 = 10_000;

/// The unit a key's amounts are counted in, for the header.
fn unit(key: &str, cfg: &KeyConfig) -> &'static str {
    let (per, unit) = app::charts::unit_of(key, cfg);
    // Bytes are exported as bytes (exact), not GiB.
    if per != quota::quantity::NANO {
        if cash_target(key).is_some() {
            "byte-hours"
        } else {
            "bytes"
        }
    } else {
        unit
    }
}

fn line(fields: &[String]) -> String {
    let l: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
    l.join(",") + "\r\n"
}

/// One line per quota and key of its hard: what the tree and the quota
/// page show, exactly. Cash keys fill `spent` (the subtree's spending)
/// and `allocated_to_children` (carved out); the others the rollup.
pub fn quotas_csv<Q, U>(quotas: &[Q], in_use: &U, cfg: &KeyConfig) -> String
where
    Q: std::borrow::Borrow<Quota>,
    U: quota::rollup::SubtreeUse + ?Sized,
{
    let mut out = String::from(
        "quota,parent,key,unit,hard,in_use_subtree,self_used,allocated_to_children,allocated_idle,unallocated,lent,borrowed,spent\r\n",
    );
    let empty = ResourceList::new();
    for q in quotas {
        let q = q.borrow();
        let rolled: BTreeMap<String, quota::rollup::KeyRollup> =
            rollup(q, in_use.of(q.name()).unwrap_or(&empty))
                .into_iter()
                .map(|r| (r.key.clone(), r))
                .collect();
        for (key, hard) in &q.spec.hard {
            let mut f = vec![
                q.name().to_string(),
                q.spec.parent.clone(),
                key.clone(),
                unit(key, cfg).to_string(),
                exact(*hard),
            ];
            match rolled.get(key) {
                Some(r) => f.extend(
                    [
                        r.in_use,
                        r.self_used,
                        r.allocated,
                        r.allocated_idle,
                        r.unallocated,
                        r.lent,
                        r.borrowed,
                    ]
                    .map(exact)
                    .into_iter()
                    .chain([String::new()]),
                ),
                // A budget: what the quota's subtree spent (the budgets
                // API's `subtreeSpent`, the figure its alerts read), and
                // what it carved out for its children under
                // `allocated_to_children` — never the sum of the two
                // (`status.used` at a parent), which read as spending.
                None => {
                    let spent = match in_use.of(q.name()) {
                        Some(sub) => resources::get(sub, key),
                        None => resources::get(&q.status.self_used, key),
                    };
                    f.extend(std::iter::repeat_n(String::new(), 2));
                    f.push(exact(quota::budget::periods::carved(&q.status, key)));
                    f.extend(std::iter::repeat_n(String::new(), 4));
                    f.push(exact(spent));
                }
            }
            out.push_str(&line(&f));
        }
    }
    out
}

fn csv_response(name: &str, body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// GET /tree.csv — the quotas the viewer may see. A heavy request
/// (`crate::heavy`), written on the render threads.
pub async fn tree(State(app): State<AppState>, viewer: Viewer) -> Result<Response, PageError> {
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    let w = app.service.working(app.service.now());
    let forest = quota_ops::visible_forest_on(&app.service, &viewer.principal, &place).await?;
    let cfg = app.service.keys.clone();
    let body = place
        .render(move || {
            // Spent as of now, as `/tree` and the quota pages show it:
            // the budgeted quotas copied, the rest shared.
            let forest = w.accrued(forest);
            quotas_csv(&forest.quotas(), &forest, &cfg)
        })
        .await?;
    Ok(csv_response("bizrq-quotas.csv", body))
}

/// GET /alerts.csv?quota=&kind=&level= — open and resolved alerts the
/// page's filters select, on the quotas the viewer may see, newest first.
pub async fn alerts(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(q): Query<super::alerts::AlertParams>,
) -> Result<Response, PageError> {
    let f = AlertFilter {
        quotas_in: quota_ops::records_scope(&app.service, &viewer.principal).await?,
        ..q.filters()?
    };
    // A heavy request (`crate::heavy`): up to `ALERT_ROWS` rows.
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    let rows = app.portal.sql.alerts(&f, ALERT_ROWS).await?;
    let out = place.render(move || alerts_csv(rows)).await?;
    Ok(csv_response("bizrq-alerts.csv", out))
}

fn alerts_csv(rows: Vec<crate::alerts::Alert>) -> String {
    let mut out = String::from(
        "id,quota,key,kind,level,message,opened_at,resolved_at,acknowledged_by,snoozed_until,keys\r\n",
    );
    for a in rows {
        out.push_str(&line(&[
            a.id.to_string(),
            a.quota.clone(),
            a.key.clone(),
            a.kind.as_str().to_string(),
            a.level.as_str().to_string(),
            a.message.clone(),
            quota::time::format_rfc3339(a.opened_at),
            a.resolved_at
                .map(quota::time::format_rfc3339)
                .unwrap_or_default(),
            a.acked.map(|(by, _)| by).unwrap_or_default(),
            a.snoozed
                .map(|(_, until)| quota::time::format_rfc3339(until))
                .unwrap_or_default(),
            // The keys a condition on keys covers, GPUs first.
            a.keys.join(" "),
        ]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::QuotaSpec;

    #[test]
    fn amounts_are_exact_in_the_unit_the_header_names() {
        assert_eq!(exact("1500m".parse().unwrap()), "1.5");
        assert_eq!(exact("1n".parse().unwrap()), "0.000000001");
        assert_eq!(exact("64Gi".parse().unwrap()), "68719476736");
        let q = Quota::new(
            "nlp",
            QuotaSpec {
                budgets: Default::default(),
                parent: "ai".into(),
                hard: [
                    ("requests.memory".to_string(), "64Gi".parse().unwrap()),
                    (
                        "cash/requests.nvidia.com/gpu".to_string(),
                        "100".parse().unwrap(),
                    ),
                ]
                .into(),
                max: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        let one = std::slice::from_ref(&q);
        let csv = quotas_csv(
            one,
            &quota::rollup::subtree_in_use(one),
            &KeyConfig::default(),
        );
        let lines: Vec<&str> = csv.split("\r\n").collect();
        assert!(lines[0].starts_with("quota,parent,key,unit,hard,"));
        assert_eq!(
            lines[1],
            "nlp,ai,cash/requests.nvidia.com/gpu,card-hours,100,,,0,,,,,0"
        );
        assert_eq!(
            lines[2],
            "nlp,ai,requests.memory,bytes,68719476736,0,0,0,0,68719476736,0,0,"
        );
    }
}
