//! `/api/v1/quotas`: quota objects in the CRD's shape. Everything goes
//! through the service layer; every route is authorised with `authz` (the
//! caller is a [`Principal`]): quotas
//! the caller may not see answer 404 as if they did not exist, changes it
//! may not make answer 403. Changes are written to the audit log.

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::service::quota_ops::{self, tree_for, ChangeError};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use quota::object::{api_version, QuotaSpec, KIND};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct WriteParams {
    /// `All` decides without writing, as Kubernetes' `dryRun=All`.
    #[serde(default)]
    dry_run: Option<String>,
    /// For DELETE: only if the object is still at this version.
    #[serde(default)]
    resource_version: Option<String>,
}

impl WriteParams {
    fn dry(&self) -> Result<bool, ApiError> {
        match self.dry_run.as_deref() {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(o) => Err(ApiError::BadRequest(format!(
                "dryRun must be 'All', not '{o}'"
            ))),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct QuotaInput {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: MetaInput,
    spec: QuotaSpec,
    /// Status is ours; accepted (so a GET can be edited and PUT back) and ignored.
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MetaInput {
    name: String,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    uid: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    creation_timestamp: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    #[allow(dead_code)]
    annotations: Option<BTreeMap<String, String>>,
}

fn parse_quota(body: &[u8]) -> Result<QuotaInput, ApiError> {
    let input: QuotaInput = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid {KIND}: {e}")))?;
    if let Some(v) = input.api_version.as_deref().filter(|v| *v != api_version()) {
        return Err(ApiError::BadRequest(format!(
            "apiVersion '{v}' is not served; use {}",
            api_version()
        )));
    }
    if let Some(k) = input.kind.as_deref().filter(|k| *k != KIND) {
        return Err(ApiError::BadRequest(format!("kind '{k}' is not {KIND}")));
    }
    Ok(input)
}

fn parse_version(v: Option<&str>) -> Result<Option<i64>, ApiError> {
    v.filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>().map_err(|_| {
                ApiError::BadRequest(format!("resourceVersion '{s}' is not one of ours"))
            })
        })
        .transpose()
}

impl From<ChangeError> for ApiError {
    fn from(e: ChangeError) -> Self {
        match e {
            ChangeError::Forbidden(m) => ApiError::Forbidden(m),
            ChangeError::Service(e) => ApiError::Service(e),
        }
    }
}

pub async fn list(State(app): State<AppState>, p: Principal) -> Result<Response, ApiError> {
    // Every visible quota whole: a heavy request's place.
    let _place = app.portal.heavy.enter(&p.username)?;
    let items = quota_ops::visible_quotas(&app.service, &p).await?;
    Ok(Json(serde_json::json!({
        "apiVersion": api_version(),
        "kind": format!("{KIND}List"),
        "items": items,
    }))
    .into_response())
}

pub async fn get(
    State(app): State<AppState>,
    p: Principal,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    quota_ops::require_view(&p, &name, &tree_for(&app.audited(), &p).await?)?;
    // The object as stored, as `kubectl get` has it (its ledger is what
    // this status accrued; `lastReconcileTime` says up to when). The
    // figures as of now are the usage, budgets and queue views.
    Ok(Json(app.service.get(&name).await?.quota).into_response())
}

/// GET /api/v1/quotas/{name}/usage: each non-cash key of the quota as its
/// bars show it (`quota::rollup`): in use in the whole subtree, its own
/// use, allocated to children (and of that, idle), unallocated, lent and
/// borrowed, free now and borrowable now. The subtree counts every
/// descendant, also those the caller may not see by name. A heavy request
/// (`crate::heavy`): it takes a place before reading the subtree and the
/// family, and rolls them up on the render threads.
pub async fn usage(
    State(app): State<AppState>,
    p: Principal,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let place = app.portal.heavy.enter(&p.username)?;
    quota_ops::require_view(&p, &name, &tree_for(&app.audited(), &p).await?)?;
    let all = app.service.subtrees(std::slice::from_ref(&name)).await?;
    let q = all
        .iter()
        .find(|q| q.name() == name)
        .ok_or_else(|| quota_ops::not_found(&name))?;
    // Free now and borrowable now as the quota page's keys table has them
    // (one computation: its parent and siblings, `with_borrowing`).
    let family = app.service.family_of(q).await?;
    let w = app.service.working(app.service.now());
    let now = w.now();
    let body = place
        .render(move || {
            // The copies the quota page's keys table reads.
            let all = w.quotas(all);
            let Some(q) = all.iter().find(|q| q.name() == name) else {
                return serde_json::Value::Null;
            };
            let in_use = quota::rollup::subtree_in_use(&all)
                .remove(&name)
                .unwrap_or_default();
            let (parent, siblings) = crate::service::forest::family_in(family.as_deref(), q);
            let rolled = quota::rollup::with_borrowing(
                q,
                quota::rollup::rollup(q, &in_use),
                parent,
                &siblings,
                now,
            );
            let keys: Vec<serde_json::Value> = rolled
                .into_iter()
                .map(|r| {
                    let borrows = q.spec.max.contains_key(&r.key);
                    serde_json::json!({
                        "freeNow": r.free_now,
                        "borrowableNow": borrows.then_some(r.borrowable_now),
                        "key": r.key,
                        "hard": r.hard,
                        "inUse": r.in_use,
                        "selfUsed": r.self_used,
                        "allocated": r.allocated,
                        "allocatedIdle": r.allocated_idle,
                        "unallocated": r.unallocated,
                        "lent": r.lent,
                        "borrowed": r.borrowed,
                    })
                })
                .collect();
            serde_json::json!({ "quota": name, "keys": keys })
        })
        .await?;
    Ok(Json(body).into_response())
}

/// Creating a child of X needs ownership of X or an ancestor (roots: admins).
/// Refused before anything else, so a refusal says nothing of X.
pub async fn create(
    State(app): State<AppState>,
    principal: Principal,
    Query(p): Query<WriteParams>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let input = parse_quota(&body)?;
    let dry = p.dry()?;
    let tree = tree_for(&app.audited(), &principal).await?;
    let name = &input.metadata.name;
    let q = quota_ops::create(&app.audited(), &principal, &tree, name, input.spec, dry).await?;
    Ok((StatusCode::CREATED, Json(q)).into_response())
}

pub async fn replace(
    State(app): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
    Query(p): Query<WriteParams>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let input = parse_quota(&body)?;
    if input.metadata.name != name {
        return Err(ApiError::BadRequest(format!(
            "metadata.name '{}' does not match the URL's '{name}'",
            input.metadata.name
        )));
    }
    let version = parse_version(input.metadata.resource_version.as_deref())?;
    let dry = p.dry()?;
    let tree = tree_for(&app.audited(), &principal).await?;
    let q = quota_ops::update(
        &app.audited(),
        &principal,
        &tree,
        &name,
        input.spec,
        version,
        dry,
    )
    .await?;
    Ok(Json(q).into_response())
}

pub async fn delete(
    State(app): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
    Query(p): Query<WriteParams>,
) -> Result<Response, ApiError> {
    let version = parse_version(p.resource_version.as_deref())?;
    let dry = p.dry()?;
    let tree = tree_for(&app.audited(), &principal).await?;
    quota_ops::delete(&app.audited(), &principal, &tree, &name, version, dry).await?;
    Ok(
        Json(serde_json::json!({ "status": "Success", "details": { "name": name, "kind": KIND } }))
            .into_response(),
    )
}
