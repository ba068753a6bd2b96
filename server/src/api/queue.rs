//! `GET /api/v1/quotas/{name}/queue`: the quota's queue (docs/queueing.md
//! §5) — its policy and each waiting workload in admission order: place,
//! priority and the classes it comes from, since when and how long it has
//! waited, what it waits for and why, what it needs on the keys the quota
//! limits. Visible to whoever may see the quota (404 otherwise, as `GET
//! /api/v1/quotas/{name}`).

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::queue as words;
use crate::service::quota_ops::{self, tree_for};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

pub async fn get(
    State(app): State<AppState>,
    p: Principal,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    quota_ops::require_view(&p, &name, &tree_for(&app.audited(), &p).await?)?;
    // As of one `now` (`service::working`): a budget reason says what is
    // left now, as the quota page and its budgets API do.
    let w = app.service.working(app.service.now());
    let now = w.now();
    let mut q = w.copy(&app.service.get(&name).await?.quota);
    let (_, family) = app.service.queue_plan(&q).await?;
    let siblings: Vec<&quota::Quota> = family
        .iter()
        .flat_map(|f| f.kids.iter().map(|k| &**k))
        .collect();
    let parent = family.as_ref().map(|f| &f.parent);
    w.restate_budget_reasons(&mut q, parent, &siblings);
    let items: Vec<_> = q
        .status
        .queue
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let w = &e.work;
            json!({
                "position": e.position,
                "workloadRef": w.workload_ref,
                "uid": w.uid,
                "priority": w.priority,
                "priorityClasses": w.priority_classes,
                "since": quota::time::format_rfc3339(w.submitted_ms),
                "waitedSeconds": now.saturating_sub(w.submitted_ms).max(0) / 1000,
                "waiting": e.waiting,
                "reason": e.reason,
                "needs": words::needs(&q, w),
                "runSeconds": w.run_ms.map(|ms| ms / 1000),
                "estimatedStart": e.estimated_start,
                "estimate": words::estimate_words(&q.status.queue, i),
                "submittedBy": w.submitted_by,
            })
        })
        .collect();
    // With queue marks the status lists the head of the queue; its
    // summary counts the whole (docs/queueing.md §12).
    let length = quota::queue::summary::waiting(&q.status.queue, q.status.queue_summary.as_ref());
    Ok(Json(json!({
        "quota": name,
        "policy": q.spec.queueing,
        "policyText": words::policy_words(&q.spec.queueing),
        "length": length,
        "listed": items.len(),
        "summary": q.status.queue_summary,
        "items": items,
    }))
    .into_response())
}
