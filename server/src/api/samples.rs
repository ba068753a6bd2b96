//! `/api/v1/quotas/{name}/samples?key=&range=&chart=`: one chart of a
//! quota over a range, as its page draws it (the SVG, the values table and
//! every point with its exact values), for the chart island to swap in
//! without a reload. Authorised as the quota page is: a quota the caller
//! may not see answers 404.

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::quota_ops::{self, tree_for};
use app::chart_section::{self, Inputs, Kind};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use quota::series::Range;
use serde::Deserialize;

/// Query of GET /api/v1/quotas/{name}/samples.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct Params {
    key: String,
    /// 24h, 7d (default), 30d, 90d or 1y.
    #[serde(default)]
    range: String,
    /// usage, burn-down, children or efficiency (GPUs allocated against
    /// busy, from real usage; any GPU key); default the key's own chart.
    #[serde(default)]
    chart: String,
}

/// GET /api/v1/quotas/{name}/samples
pub async fn samples(
    State(app): State<AppState>,
    p: Principal,
    Path(name): Path<String>,
    q: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let range = Range::parse(&q.range).map_err(ApiError::BadRequest)?;
    let key = q.key.trim();
    if key.is_empty() {
        return Err(ApiError::BadRequest("key is required".into()));
    }
    let kind = Kind::parse(&q.chart, key).map_err(ApiError::BadRequest)?;
    // A heavy request (`crate::heavy`): a place before anything is read.
    let place = app.portal.heavy.enter(&p.username)?;
    quota_ops::require_view(&p, &name, &tree_for(&app.audited(), &p).await?)?;
    if kind == Kind::Efficiency {
        return efficiency(&app, &name, key, range).await;
    }
    // The quota and its subtree (its children's charts), not the forest.
    // As of one `now` (`service::working`), as the quota page draws it:
    // the live point and the forecast from the same copies.
    let w = app.service.working(app.service.now());
    let now = w.now();
    let all = app.service.subtrees(std::slice::from_ref(&name)).await?;
    let copies = w.clone();
    let (all, in_use) = place
        .work(move || {
            let all = copies.quotas(all);
            let in_use = quota::rollup::subtree_in_use(&all);
            (all, in_use)
        })
        .await
        .map_err(|e| crate::service::ServiceError::Internal(e.to_string()))?;
    let quota = all
        .iter()
        .find(|x| x.name() == name)
        .ok_or_else(|| quota_ops::not_found(&name))?;
    // Read a chunk at a time, parsed and folded on the render threads;
    // of the quota's own samples only this key.
    let g = crate::service::charts::gather(
        &app.portal.sql,
        &place,
        (&all, &in_use),
        quota,
        (range, now),
        if kind == Kind::Children {
            crate::service::charts::Children::ByKey(key)
        } else {
            crate::service::charts::Children::None
        },
        Some(key),
    )
    .await?;
    let outlooks = quota::forecast::outlooks(quota, &w.pricing());
    let (key, cfg) = (key.to_string(), app.service.keys.clone());
    drop(all);
    let panel = place
        .render(move || {
            let inputs = Inputs {
                own: &g.own,
                live: &g.live,
                children: &g.children,
                children_omitted: g.children_omitted,
                stacks: &g.stacks,
                range,
                now_ms: now,
                cfg: &cfg,
                outlooks: &outlooks,
            };
            chart_section::panel(&inputs, &key, kind)
                .map(|panel| chart_section::reply(&name, range, now, panel, &cfg))
                .ok_or_else(|| {
                    quota_ops::not_found(&format!(
                        "{name}: no {} chart of {key} (no hard or use of it in the {})",
                        kind.as_str(),
                        range.words()
                    ))
                })
        })
        .await??;
    Ok(Json(panel).into_response())
}

/// The quota page's chart of GPUs allocated against busy over `range`
/// (`crate::efficiency`, as the page and `GET .../efficiency` read it);
/// 404 where real usage was never read.
async fn efficiency(
    app: &AppState,
    name: &str,
    key: &str,
    range: Range,
) -> Result<Response, ApiError> {
    let cfg = app.service.keys.clone();
    if !quota::keys::is_gpu_key(key, &cfg) {
        return Err(ApiError::BadRequest(format!(
            "the efficiency chart is of GPUs: {key} is not a GPU key"
        )));
    }
    let forest = app.service.forest().await?;
    if !forest.quotas.iter().any(|q| q.name() == name) {
        return Err(quota_ops::not_found(name).into());
    }
    let now = app.service.now();
    let e = crate::efficiency::gather(&app.portal.sql, &forest.quotas, name, range, now)
        .await
        .map_err(crate::service::ServiceError::from)?;
    let panel = e.panel(&cfg).ok_or_else(|| {
        quota_ops::not_found(&format!("{name}: no real usage read (no efficiency chart)"))
    })?;
    // The page's panel stands under the first GPU resource; asked under
    // another GPU key, the same figures answer under that key.
    let panel = chart_section::Panel {
        key: key.to_string(),
        ..panel
    };
    Ok(Json(chart_section::reply(name, range, now, panel, &cfg)).into_response())
}
