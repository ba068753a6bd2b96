//! The validating admission webhook: `admission.k8s.io/v1` AdmissionReview in,
//! AdmissionReview out. Each object is parsed once, straight into what its
//! adapter needs; decisions come from the service layer.

use crate::cluster::events::{denied_quota, quota_ref, workload_ref, Events, Notice};
use crate::http::AppState;
use crate::service::{Persist, Service, ServiceError};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use quota::object::{HpaCharge, QuotaSpec, KIND};
use quota::workload::{
    adapter_for_kind, adapter_for_resource, read_hpa, read_scale_replicas, Adapter, Workload,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::Instant;

pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Deserialize)]
struct Review {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    request: Option<Request>,
}

#[derive(Default, Deserialize)]
pub struct Gvk {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Default, Deserialize)]
pub struct Gvr {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    #[serde(default)]
    pub kind: Gvk,
    #[serde(default)]
    pub resource: Gvr,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: String,
    #[serde(default)]
    pub object: Option<Box<RawValue>>,
    #[serde(default)]
    pub old_object: Option<Box<RawValue>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

impl Request {
    fn dry(&self) -> bool {
        self.dry_run == Some(true)
    }
}

/// An admission answer before it is wrapped in a review.
#[derive(Debug, Default)]
pub struct Verdict {
    pub allowed: bool,
    pub code: u16,
    pub message: String,
    pub warnings: Vec<String>,
}

impl Verdict {
    pub fn allow() -> Verdict {
        Verdict {
            allowed: true,
            code: 200,
            ..Default::default()
        }
    }

    fn warn(mut self, w: impl IntoIterator<Item = String>) -> Verdict {
        self.warnings.extend(w);
        self
    }

    pub fn from_error(e: ServiceError) -> Verdict {
        let code = match &e {
            ServiceError::Denied(_) | ServiceError::Tree(_) => 403,
            ServiceError::NotFound(_) => 404,
            ServiceError::AlreadyExists(_) | ServiceError::Conflict(_) => 409,
            ServiceError::BadRequest(_) => 400,
            ServiceError::Contention(_) => 429,
            ServiceError::Internal(_) => 500,
        };
        if code == 500 {
            tracing::error!(error = %e, "admission failed; denying");
        }
        let message = match e {
            ServiceError::Internal(_) => {
                "bizrq: internal error while deciding; denied (see bizrq logs)".to_string()
            }
            e => e.to_string(),
        };
        Verdict {
            allowed: false,
            code,
            message,
            warnings: Vec::new(),
        }
    }
}

#[derive(Serialize)]
struct ReviewOut<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct StatusOut<'a> {
    code: u16,
    message: &'a str,
    reason: &'static str,
}

pub fn review_json(uid: &str, v: &Verdict) -> Vec<u8> {
    let out = ReviewOut {
        api_version: REVIEW_API_VERSION,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid,
            allowed: v.allowed,
            status: (!v.allowed).then_some(StatusOut {
                code: v.code,
                message: &v.message,
                reason: match v.code {
                    403 => "Forbidden",
                    404 => "NotFound",
                    409 => "Conflict",
                    429 => "TooManyRequests",
                    400 => "BadRequest",
                    _ => "InternalError",
                },
            }),
            warnings: &v.warnings,
        },
    };
    serde_json::to_vec(&out).expect("review serialises")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Quotas,
    Workloads,
    Scale,
    Hpa,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Quotas => "quotas",
            Endpoint::Workloads => "workloads",
            Endpoint::Scale => "scale",
            Endpoint::Hpa => "hpa",
        }
    }
}

pub async fn quotas(State(app): State<AppState>, body: Bytes) -> Response {
    handle(&app, Endpoint::Quotas, &body).await
}
pub async fn workloads(State(app): State<AppState>, body: Bytes) -> Response {
    handle(&app, Endpoint::Workloads, &body).await
}
pub async fn scale(State(app): State<AppState>, body: Bytes) -> Response {
    handle(&app, Endpoint::Scale, &body).await
}
pub async fn hpa(State(app): State<AppState>, body: Bytes) -> Response {
    handle(&app, Endpoint::Hpa, &body).await
}

fn bad_request(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, msg).into_response()
}

async fn handle(app: &AppState, endpoint: Endpoint, body: &[u8]) -> Response {
    let started = Instant::now();
    let review: Review = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("malformed AdmissionReview: {e}")),
    };
    if review.api_version != REVIEW_API_VERSION {
        return bad_request(format!(
            "AdmissionReview apiVersion '{}' is not served; use {REVIEW_API_VERSION}",
            review.api_version
        ));
    }
    let Some(req) = review.request else {
        return bad_request("AdmissionReview has no request".into());
    };
    let verdict = decide(&app.service, endpoint, &req).await;
    if !verdict.allowed {
        tracing::info!(uid = %req.uid, endpoint = endpoint.name(), op = %req.operation, kind = %req.kind.kind,
            name = req.name.as_deref().unwrap_or(""), namespace = req.namespace.as_deref().unwrap_or(""),
            message = %verdict.message, "denied");
    }
    if !verdict.allowed && verdict.code == 403 && !req.dry() && app.service.events.enabled() {
        publish_denial(&app.service.events, &req, &verdict.message);
    }
    let decision = if verdict.allowed { "allowed" } else { "denied" };
    app.service.metrics.observe_admission(
        endpoint.name(),
        decision,
        started.elapsed().as_secs_f64(),
    );
    (
        [(header::CONTENT_TYPE, "application/json")],
        review_json(&req.uid, &verdict),
    )
        .into_response()
}

/// A denial as Kubernetes Events: on the quota (its owners watch it) and
/// on the workload when it already exists (`kubectl describe` shows it).
fn publish_denial(events: &Events, req: &Request, message: &str) {
    let Some(quota) = denied_quota(message) else {
        return;
    };
    events.emit(Notice {
        regarding: quota_ref(quota),
        warning: true,
        reason: "AdmissionDenied",
        action: "Admit",
        note: format!(
            "{} {}/{}: {message}",
            req.operation,
            req.kind.kind,
            req.name.as_deref().unwrap_or("")
        ),
    });
    if req.operation != "CREATE" {
        let (ns, name) = target(req);
        let api_version = if req.kind.group.is_empty() {
            req.kind.version.clone()
        } else {
            format!("{}/{}", req.kind.group, req.kind.version)
        };
        let wref = format!("{}/{}/{ns}/{name}", req.kind.group, req.kind.kind);
        if let Some(r) = workload_ref(&api_version, &wref) {
            events.emit(Notice {
                regarding: r,
                warning: true,
                reason: "QuotaExceeded",
                action: "Admit",
                note: message.to_string(),
            });
        }
    }
}

pub async fn decide(svc: &Arc<Service>, endpoint: Endpoint, req: &Request) -> Verdict {
    let result = match endpoint {
        Endpoint::Quotas => review_quota(svc, req).await,
        Endpoint::Workloads if req.sub_resource.as_deref() == Some("scale") => {
            review_scale(svc, req).await
        }
        Endpoint::Workloads => review_workload(svc, req).await,
        Endpoint::Scale => review_scale(svc, req).await,
        Endpoint::Hpa => review_hpa(svc, req).await,
    };
    result.unwrap_or_else(Verdict::from_error)
}

fn raw_meta_name(raw: &RawValue) -> (String, String) {
    #[derive(Deserialize, Default)]
    struct M {
        #[serde(default)]
        metadata: quota::usage::ObjectMeta,
    }
    let m: M = serde_json::from_str(raw.get()).unwrap_or_default();
    (m.metadata.namespace, m.metadata.name)
}

/// Namespace and name of the object under review (the request's own fields
/// first; generated names appear in the object).
fn target(req: &Request) -> (String, String) {
    let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    if let (Some(ns), Some(name)) = (given(&req.namespace), given(&req.name)) {
        return (ns, name);
    }
    // Only then read the object's metadata (cluster-scoped objects have no
    // namespace; a generated name is in the object).
    let from_obj = req
        .object
        .as_deref()
        .or(req.old_object.as_deref())
        .map(raw_meta_name)
        .unwrap_or_default();
    let ns = given(&req.namespace).unwrap_or(from_obj.0);
    let name = given(&req.name)
        .or(Some(from_obj.1).filter(|s| !s.is_empty()))
        .unwrap_or_else(|| req.uid.clone());
    (ns, name)
}

fn read(
    adapter: &Adapter,
    raw: &Option<Box<RawValue>>,
    svc: &Service,
) -> Result<Option<Workload>, ServiceError> {
    raw.as_deref()
        .map(|r| adapter.read(r.get(), &svc.keys))
        .transpose()
        .map_err(|e| ServiceError::BadRequest(e.to_string()))
}

/// The old object of an UPDATE or DELETE: only its binding is needed.
fn read_old(
    adapter: &Adapter,
    raw: &Option<Box<RawValue>>,
) -> Result<Option<Workload>, ServiceError> {
    raw.as_deref()
        .map(|r| adapter.read_binding(r.get()))
        .transpose()
        .map_err(|e| ServiceError::BadRequest(e.to_string()))
}

async fn review_workload(svc: &Arc<Service>, req: &Request) -> Result<Verdict, ServiceError> {
    let Some(adapter) = adapter_for_kind(&req.kind.group, &req.kind.kind) else {
        return Ok(Verdict::allow().warn([format!(
            "bizrq: kind {}/{} is not governed by bizrq",
            req.kind.group, req.kind.kind
        )]));
    };
    if req.sub_resource.is_some() {
        return Ok(Verdict::allow()); // status and other subresources hold no spec
    }
    let (ns, name) = target(req);
    let wref = adapter.workload_ref(&ns, &name);
    let dry = req.dry();
    match req.operation.as_str() {
        "DELETE" => {
            release_deleted(svc, adapter, req, &wref).await;
            Ok(Verdict::allow())
        }
        "CREATE" | "UPDATE" => {
            let new = read(adapter, &req.object, svc)?;
            let old = if req.operation == "UPDATE" {
                read_old(adapter, &req.old_object)?
            } else {
                None
            };
            let warnings = new.as_ref().map(|w| w.warnings.clone()).unwrap_or_default();
            for step in quota::admission::plan(old.as_ref(), new.as_ref()) {
                match step {
                    quota::admission::Step::Charge { quota, workload } => {
                        svc.charge_workload(quota, &wref, workload.pod_sets.clone(), &req.uid, dry)
                            .await?
                    }
                    quota::admission::Step::Check { quota, usage } => {
                        svc.check_usage(quota, &usage).await?
                    }
                    quota::admission::Step::Release { quota } => {
                        svc.release_workload(quota, &wref, dry).await?
                    }
                }
            }
            Ok(Verdict::allow().warn(warnings))
        }
        _ => Ok(Verdict::allow()),
    }
}

/// A DELETE is never refused (the webhook configuration and the docs
/// promise it): what cannot be released now is released in the background
/// (`Service::defer_release`), and an unreadable old object still releases
/// the charge the workload is bound to. The release in the request is cut
/// at `RELEASE_IN_REQUEST`, below the API server's wait for the webhook,
/// so a hanging store defers it rather than dropping it with the request.
async fn release_deleted(svc: &Arc<Service>, adapter: &Adapter, req: &Request, wref: &str) {
    let dry = req.dry();
    let deleted_at = svc.now();
    let mut holders: Vec<String> = match read_old(adapter, &req.old_object) {
        Ok(old) => old
            .as_ref()
            .and_then(|w| w.quota())
            .map(str::to_string)
            .into_iter()
            .collect(),
        Err(e) => {
            tracing::warn!(uid = %req.uid, workload = wref, error = %e, "DELETE with an unreadable oldObject; releasing by binding");
            Vec::new()
        }
    };
    let deadline = tokio::time::Instant::now() + RELEASE_IN_REQUEST;
    match tokio::time::timeout_at(deadline, svc.store.workload_quota(wref)).await {
        Ok(Ok(Some(q))) if !holders.contains(&q) => holders.push(q),
        Ok(Ok(_)) => {}
        Ok(Err(e)) if !dry => svc.defer_release(None, wref, None, deleted_at, &e.into()),
        Err(_) if !dry => svc.defer_release(None, wref, None, deleted_at, &timed_out()),
        _ => {}
    }
    for q in holders {
        let mut seen = None;
        let release = svc.release_for_delete(&q, wref, dry, &mut seen);
        let error = match tokio::time::timeout_at(deadline, release).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(_) => timed_out(),
        };
        if !dry {
            svc.defer_release(Some(q), wref, seen, deleted_at, &error);
        }
    }
}

/// How long a DELETE's release may take in the request: below the 5 s the
/// webhook configuration gives the API server to wait.
const RELEASE_IN_REQUEST: std::time::Duration = std::time::Duration::from_secs(3);

fn timed_out() -> ServiceError {
    ServiceError::Internal(format!(
        "the store did not answer within {} s",
        RELEASE_IN_REQUEST.as_secs()
    ))
}

async fn review_scale(svc: &Service, req: &Request) -> Result<Verdict, ServiceError> {
    let Some(adapter) = adapter_for_resource(&req.resource.group, &req.resource.resource) else {
        return Ok(Verdict::allow());
    };
    if req.operation != "UPDATE" || !adapter.scalable {
        return Ok(Verdict::allow());
    }
    let raw = req
        .object
        .as_deref()
        .ok_or_else(|| ServiceError::BadRequest("scale review without object".into()))?;
    let replicas =
        read_scale_replicas(raw.get()).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
    let (ns, name) = target(req);
    svc.scale_workload(
        &adapter.workload_ref(&ns, &name),
        replicas,
        &req.uid,
        req.dry(),
    )
    .await?;
    Ok(Verdict::allow())
}

async fn review_hpa(svc: &Service, req: &Request) -> Result<Verdict, ServiceError> {
    let parse = |raw: &Option<Box<RawValue>>| {
        raw.as_deref()
            .map(|r| read_hpa(r.get()))
            .transpose()
            .map_err(|e| ServiceError::BadRequest(e.to_string()))
    };
    let (ns, name) = target(req);
    let target_ref = |h: &quota::workload::Hpa| {
        adapter_for_kind(&h.target_group, &h.target_kind)
            .map(|a| a.workload_ref(&ns, &h.target_name))
    };
    let old = parse(&req.old_object)?;
    let new = if req.operation == "DELETE" {
        None
    } else {
        parse(&req.object)?
    };
    let old_ref = old.as_ref().and_then(target_ref);
    let new_ref = new.as_ref().and_then(target_ref);
    if let (Some(h), Some(wref)) = (&new, &new_ref) {
        let charge = HpaCharge {
            name: name.clone(),
            max_replicas: h.max_replicas,
        };
        svc.set_hpa(wref, Some(charge), &name, &req.uid, req.dry())
            .await?;
    }
    if let Some(wref) = old_ref.filter(|r| Some(r) != new_ref.as_ref()) {
        let lifted = svc.set_hpa(&wref, None, &name, &req.uid, req.dry()).await;
        match lifted {
            Ok(_) => {}
            // Deleting an HPA only lowers a charge: never refused. In a
            // cluster the controller's reconcile lifts the reservation
            // once its HPA watch shows the HPA gone.
            Err(e) if req.operation == "DELETE" => {
                svc.metrics.deferred_releases.inc();
                tracing::warn!(uid = %req.uid, hpa = %name, workload = %wref, error = %e,
                    "HPA reservation not lifted now; the DELETE is allowed and the reconcile lifts it");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Verdict::allow())
}

#[derive(Deserialize)]
struct QuotaObject {
    #[serde(default)]
    metadata: quota::object::ObjectMeta,
    #[serde(default)]
    spec: QuotaSpec,
}

async fn review_quota(svc: &Service, req: &Request) -> Result<Verdict, ServiceError> {
    if req.kind.kind != KIND {
        return Ok(Verdict::allow().warn([format!("bizrq: /validate/quotas only reviews {KIND}")]));
    }
    if req.sub_resource.is_some() {
        return Ok(Verdict::allow()); // status is ours to write
    }
    let parse = |raw: &Option<Box<RawValue>>| -> Result<Option<QuotaObject>, ServiceError> {
        raw.as_deref()
            .map(|r| serde_json::from_str::<QuotaObject>(r.get()))
            .transpose()
            .map_err(|e| ServiceError::BadRequest(format!("cannot read {KIND}: {e}")))
    };
    let (_, name) = target(req);
    let dry = req.dry();
    match req.operation.as_str() {
        "CREATE" => {
            let obj = parse(&req.object)?
                .ok_or_else(|| ServiceError::BadRequest("CREATE without object".into()))?;
            let name = if obj.metadata.name.is_empty() {
                name
            } else {
                obj.metadata.name
            };
            svc.create_quota(&name, obj.spec, Persist::ByApiServer, &req.uid, dry)
                .await?;
        }
        "UPDATE" => {
            let new = parse(&req.object)?
                .ok_or_else(|| ServiceError::BadRequest("UPDATE without object".into()))?;
            let old = parse(&req.old_object)?;
            if old.as_ref().map(|o| &o.spec) != Some(&new.spec) {
                svc.update_quota(&name, new.spec, None, Persist::ByApiServer, dry)
                    .await?;
            }
        }
        "DELETE" => {
            svc.delete_quota(&name, None, Persist::ByApiServer, dry)
                .await?
        }
        _ => {}
    }
    Ok(Verdict::allow())
}
