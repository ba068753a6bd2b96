//! What the portal's islands fetch to redraw part of a page in place,
//! rendered by the same components and computed by the same functions as
//! the pages themselves (docs/portal.md "Portal islands"):
//!
//! - `GET /tree/rows?parent=&at=&depth=&sort=&open=&closed=`: the rows the
//!   tree page shows under a quota once it is opened (HTML `<tr>`s, at
//!   most `app::tree::MAX_ROWS_UNDER`), on the quotas the viewer may see.
//! - `GET /api/v1/live/overview`: the overview's changing parts (the bars
//!   of the viewer's quotas, "needs attention", the open alerts count).

use super::auth::Viewer;
use super::PageError;
use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::{quota_ops, ServiceError};
use app::{TreeQuery, TreeSort};
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bizrq_islands::{CardLive, OverviewReply};
use quota::rollup::subtree_in_use;
use serde::Deserialize;

/// The deepest a row may be said to sit (`at`): deeper than any tree the
/// store accepts, small enough that indentation stays a number.
const MAX_AT: usize = 1_000;

#[derive(Deserialize, Default)]
pub struct RowsParams {
    #[serde(default)]
    parent: String,
    /// The parent's depth on the page.
    #[serde(default)]
    at: usize,
    /// The page's fold depth; absent: the page is not folded.
    #[serde(default)]
    depth: Option<usize>,
    #[serde(default)]
    sort: String,
    #[serde(default)]
    open: String,
    #[serde(default)]
    closed: String,
}

/// GET /tree/rows — the rows under `parent` as the tree page would show
/// them once ▸ opened it: 404 when the viewer may not see `parent` (or
/// there is none), 422 for a name or depth out of range. An admin's read
/// is `parent`'s subtree only; others read what they may see, as the page.
pub async fn tree_rows(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(p): Query<RowsParams>,
) -> Result<Response, PageError> {
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    let parent = p.parent.trim();
    if parent.is_empty() || parent.len() > 253 {
        return Err(PageError::Invalid(
            "parent must name a quota (1–253 characters)".into(),
        ));
    }
    if p.at > MAX_AT || p.depth.is_some_and(|d| d > MAX_AT) {
        return Err(PageError::Invalid(format!(
            "at and depth must be depths from 0 to {MAX_AT}"
        )));
    }
    let w = app.service.working(app.service.now());
    let (quotas, _) = super::scope::visible_tree(&app, &viewer, parent).await?;
    let query = TreeQuery {
        depth: p.depth,
        sort: TreeSort::parse(&p.sort),
        open: TreeQuery::names(&p.open),
        closed: TreeQuery::names(&p.closed),
        ..TreeQuery::default()
    };
    // The page's model columns, asked of what the page shows: an admin's
    // page the whole (kept) forest, anyone else's what `quotas` holds.
    let forest = match viewer.principal.is_admin {
        true => Some(quota_ops::visible_forest_on(&app.service, &viewer.principal, &place).await?),
        false => None,
    };
    let (cfg, parent) = (app.service.keys.clone(), parent.to_string());
    // The rows as of the request's `now`, as `/tree` and the quota pages
    // show them (`service::working`), summed and drawn on the render
    // threads.
    let html = place
        .render(move || {
            let quotas = w.quotas(quotas);
            let in_use = subtree_in_use(&quotas);
            let models = match &forest {
                Some(all) => app::tree::model_columns(&all.quotas, &cfg),
                None => app::tree::model_columns(&quotas, &cfg),
            };
            let rows = app::tree::tree_rows(&quotas, &in_use, &cfg, &w.pricing(), query.sort);
            app::tree::rows_under(rows, &parent, p.at, &query).map(|(rows, page, more)| {
                app::tree::render_tree_rows(rows, &page, more, &parent, &models, &cfg)
            })
        })
        .await?
        .ok_or_else(|| PageError::NotFound(format!("bizrq {} not found", p.parent.trim())))?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response())
}

fn api_error(e: PageError) -> ApiError {
    match e {
        PageError::Service(e) => ApiError::Service(e),
        PageError::Forbidden(m) => ApiError::Forbidden(m),
        PageError::NotFound(m) => ApiError::Service(ServiceError::NotFound(m)),
        PageError::Invalid(m) => ApiError::BadRequest(m),
        PageError::TooMany(m, s) | PageError::Busy(m, s) => ApiError::TooMany(m, s),
        PageError::Internal(m) => ApiError::Service(ServiceError::Internal(m)),
    }
}

/// GET /api/v1/live/overview — the overview's changing parts for its
/// island: its quota cards' bars and counts, its "needs attention"
/// section and its queued work, drawn by the page's components from the same reads (the
/// quotas the caller may see, their subtree use, the attention items, the
/// transfers awaiting the caller, the open alerts). Not the forecasts:
/// they move with the samples, hourly, and the page's reload has them.
pub async fn overview(State(app): State<AppState>, p: Principal) -> Result<Response, ApiError> {
    // Its cost grows with the visible forest: a heavy request's place.
    let place = app.portal.heavy.enter(&p.username)?;
    let w = app.service.working(app.service.now());
    let data = super::quotas::overview_data(&app, &p, &place, &w).await?;
    let all = data.forest.quotas();
    let cfg = &app.service.keys;
    let mine = super::quotas::my_quotas(&all, &p);
    let family = super::quotas::cards_family(&app.service, mine.iter().map(|(q, _)| *q)).await?;
    let pricing = w.pricing();
    let cards = mine
        .into_iter()
        .map(|(q, _)| {
            let in_use = data.forest.in_use_of(q.name());
            let keys = app::key_usages(q, in_use, cfg);
            // The card's one line is in its `.keys`: redrawn with its bars.
            let strip = super::quotas::card_strip(q, in_use, family.as_deref(), &pricing, cfg);
            let children = all.iter().filter(|c| c.spec.parent == q.name()).count();
            CardLive {
                name: q.name().to_string(),
                counts: app::quotas::card_counts(q.status.workloads.len(), children),
                keys: app::quotas::card_keys_html(strip, keys),
            }
        })
        .collect();
    // The queued work's budget reasons at the same `now` as the
    // attention items (on the render threads, as the page does).
    let linked = app
        .portal
        .sql
        .kube_usernames()
        .await
        .map_err(|e| ApiError::Service(e.into()))?;
    let queued = {
        let (forest, p, w, cfg) = (
            data.forest.clone(),
            p.clone(),
            w.clone(),
            app.service.keys.clone(),
        );
        place
            .work(move || {
                let (rows, more) =
                    super::quotas::queued_in_my_quotas(&forest.quotas(), &p, &w, &cfg, &linked);
                app::queue::overview_html(rows, more)
            })
            .await
            .map_err(|e| ApiError::Service(ServiceError::Internal(e.to_string())))?
    };
    let open_alerts = crate::service::alert_ops::open_count(&app.audited(), &p).await?;
    let open = super::alerts::open_for(&app, &p).await.map_err(api_error)?;
    let attention =
        app::alerts::attention_html(open, open_alerts, data.awaiting_me, data.attention);
    let reply = OverviewReply {
        open_alerts,
        attention,
        cards,
        queued,
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(reply)).into_response())
}
