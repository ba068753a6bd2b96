//! GET /quotas/{name}/shares — the `sshare`-like table of a quota
//! (docs/queueing.md §11, "Between the submitters of one quota"),
//! server-rendered: authorised as the quota page (404 for a quota the
//! viewer may not see), a heavy request (it sums the ledger), and the same
//! query string as the API (`?scope=own|subtree`).

use super::auth::Viewer;
use super::scope::visible_tree;
use super::PageError;
use crate::edge::AppState;
use crate::service::shares::{self, Scope, Table};
use app::shares::{ShareRow, SharesPage};
use axum::extract::{Path, RawQuery, State};
use axum::response::{Html, IntoResponse, Response};

pub async fn page(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    let scope = shares::parse_query(raw.as_deref()).map_err(PageError::Invalid)?;
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    visible_tree(&app, &viewer, &name).await?;
    let table = shares::read(&app.service, &app.portal.sql, &name, scope).await?;
    let v = viewer.page();
    let html = place
        .render(move || app::shares::render_shares_page(v, page_of(&table)))
        .await?;
    Ok(Html(html).into_response())
}

/// The page's words for `t`.
pub fn page_of(t: &Table) -> SharesPage {
    let n = t.with_usage;
    let mut notes = vec![
        format!(
            "{} from {} to {}, each amount weighed by half for every {} {} of its age{}.",
            match t.scope {
                Scope::Own => "What this quota's own workloads were billed in its budget ledger".to_string(),
                Scope::Subtree => format!(
                    "What the workloads of this quota and the quotas under it ({} in all) were billed in their budget ledgers",
                    t.quotas
                ),
            },
            quota::time::format_when(t.from_ms),
            quota::time::format_when(t.now_ms),
            t.half_life_days,
            if t.half_life_days == 1 { "day" } else { "days" },
            if t.orders_queue {
                ""
            } else {
                " (the default half-life: this quota's queue does not order by it)"
            },
        ),
        "Usage is a submitter's largest fraction of everyone's decayed spending over the budget keys; \
         every submitter with usage has an equal share; the factor is 2^(−usage ÷ share): 0.5 at an \
         equal share, lower above it. A submitter without usage ranks at the median of those with \
         (marked median), never ahead of them all."
            .to_string(),
    ];
    if t.orders_queue {
        notes.push(
            "The queue admits entries of equal priority from the submitter with the highest factor first."
                .to_string(),
        );
    }
    if t.left_out > 0 {
        notes.push(format!(
            "{} more submitters with the least spending are not listed.",
            t.left_out
        ));
    }
    let rows = t
        .rows
        .iter()
        .map(|r| ShareRow {
            user: r.user.clone().unwrap_or_default(),
            unnamed: r.user.is_none(),
            raw: r
                .usage
                .iter()
                .map(|(k, u)| shares::hours(k, u.raw))
                .collect(),
            decayed: r
                .usage
                .iter()
                .map(|(k, u)| shares::hours(k, u.decayed))
                .collect(),
            usage: if r.at_median {
                format!("{} (median)", r.normalised.display())
            } else {
                r.normalised.display()
            },
            shares: shares::share_text(n),
            factor: quota::submitters::factor_display(r.factor),
        })
        .collect();
    SharesPage {
        quota: t.quota.clone(),
        scope: t.scope.as_str().to_string(),
        notes,
        rows,
    }
}
