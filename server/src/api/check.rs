//! `POST /api/v1/check`: would this workload be admitted, and what would
//! it be charged? A dry run through the same service call as the webhook.

use crate::authz::{self, Principal};
use crate::edge::{ApiError, AppState};
use crate::service::queue::Queueing;
use crate::service::quota_ops::{not_found, tree_for};
use crate::service::ServiceError;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use quota::workload::{adapter_for_kind, group_of, ChargeMode};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// Would this workload be admitted? Answers with the decision and the usage
/// it would be charged, without charging. A quota the caller may not see
/// answers as one that does not exist.
pub async fn check(
    State(app): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Response, ApiError> {
    let svc = &app.service;
    let tm: TypeMeta = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid workload: {e}")))?;
    let adapter = adapter_for_kind(group_of(&tm.api_version), &tm.kind).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "kind '{}' of '{}' is not a workload kind bizrq governs",
            tm.kind, tm.api_version
        ))
    })?;
    let body =
        std::str::from_utf8(&body).map_err(|_| ApiError::BadRequest("body is not UTF-8".into()))?;
    let mut w = adapter
        .read(body, &svc.keys)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    // The body's status is the caller's own, as a CREATE's: a forged
    // `Complete` does not make it run nothing.
    w.ignore_status();
    let usage = w.usage();
    let Some(quota) = w.quota() else {
        return Ok(Json(serde_json::json!({
            "allowed": true, "governed": false, "usage": usage,
            "message": format!("not bound to a quota (no {} label)", quota::keys::QUOTA_LABEL),
        }))
        .into_response());
    };
    if !authz::can_view(
        &principal,
        quota,
        &tree_for(&app.audited(), &principal).await?,
    ) {
        return Ok(Json(serde_json::json!({
            "allowed": false, "governed": true, "quota": quota,
            "message": not_found(quota).to_string(), "usage": usage, "warnings": w.warnings,
        }))
        .into_response());
    }
    let wref = adapter.workload_ref(&w.meta.namespace, &w.meta.name);
    if let Some((position, reason)) = would_queue(&app, adapter, &w, quota, &wref, body).await? {
        return Ok(Json(serde_json::json!({
            "allowed": false, "governed": true, "quota": quota,
            "queued": {"position": position, "reason": reason},
            "message": format!("would queue at position {position}: {reason}"),
            "usage": usage, "warnings": w.warnings,
        }))
        .into_response());
    }
    let decision = match w.mode {
        ChargeMode::Charge => {
            // Judged as the object would be if created, given what the
            // workload of that name already holds: the same decision an
            // update to it gets (`RunDecl::Changed`).
            let run = match quota::budget::reservations::RunDecl::of(&w) {
                quota::budget::reservations::RunDecl::Object(r) => {
                    quota::budget::reservations::RunDecl::Changed(r)
                }
                other => other,
            };
            svc.charge(
                crate::service::ChargeRequest::new(quota, &wref, w.pod_sets.clone(), "check")
                    .run_time(run)
                    .dry_run(true),
            )
            .await
        }
        ChargeMode::CheckOnly => svc.check_usage(quota, &usage).await,
    };
    let (allowed, message) = match decision {
        Ok(()) => (true, format!("fits in bizrq {quota}")),
        Err(e @ (ServiceError::Denied(_) | ServiceError::NotFound(_))) => (false, e.to_string()),
        Err(e) => return Err(e.into()),
    };
    Ok(Json(serde_json::json!({
        "allowed": allowed, "governed": true, "quota": quota, "message": message,
        "usage": usage, "warnings": w.warnings,
    }))
    .into_response())
}

/// Where a workload of a queueing quota would wait, as the mutating
/// webhook would queue it (docs/queueing.md §4.6); None when it would not
/// queue (it fits now, waiting would not help, or the quota refuses).
async fn would_queue(
    app: &AppState,
    adapter: &quota::workload::Adapter,
    w: &quota::workload::Workload,
    quota_name: &str,
    wref: &str,
    body: &str,
) -> Result<Option<(u32, String)>, ApiError> {
    let svc = &app.service;
    if !svc.queueing {
        return Ok(None);
    }
    let q = match svc.get(quota_name).await {
        Ok(s) => s.quota,
        Err(ServiceError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match quota::queue::disposition(adapter, &q.spec.queueing, &w.meta.labels) {
        Ok(quota::queue::Disposition::Queue) => {}
        Ok(quota::queue::Disposition::Refuse) => return Ok(None),
        Err(m) => return Err(ApiError::BadRequest(format!("bizrq: {m}"))),
    }
    let obj: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let work = quota::object::queue::Queued {
        workload_ref: wref.to_string(),
        uid: String::new(),
        priority: 0,
        priority_classes: quota::queue::priority::class_names(&obj),
        submitted_ms: svc.now(),
        pod_sets: w.pod_sets.clone().into(),
        run_ms: quota::workload::runtime::max_runtime(&obj)
            .ok()
            .flatten()
            .map(|r| r.ms),
        submitted_by: None,
        preempted: false,
    };
    Ok(match svc.would_queue(quota_name, work).await? {
        Queueing::Queued { position, reason } => Some((position, reason)),
        Queueing::Admits | Queueing::Next | Queueing::Never(_) => None,
    })
}
