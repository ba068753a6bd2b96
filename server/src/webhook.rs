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
use std::time::Instant;

pub use quota::review::{Gvk, Gvr, Request, REVIEW_API_VERSION};

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
    let req = match quota::review::decode(body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
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

pub async fn decide(svc: &Service, endpoint: Endpoint, req: &Request) -> Verdict {
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

fn target(req: &Request) -> (String, String) {
    req.target()
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

/// The reference of a workload named by the request: a name Kubernetes
/// would not take (too long, a '/' in it) is refused before anything is
/// stored under it.
fn checked_ref(adapter: &Adapter, ns: &str, name: &str) -> Result<String, ServiceError> {
    adapter
        .checked_ref(ns, name)
        .map_err(|e| ServiceError::BadRequest(e.to_string()))
}

async fn review_workload(svc: &Service, req: &Request) -> Result<Verdict, ServiceError> {
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
    let wref = checked_ref(adapter, &ns, &name)?;
    let dry = req.dry();
    match req.operation.as_str() {
        "DELETE" => {
            let old = read_old(adapter, &req.old_object)?;
            let mut holders: Vec<String> = old
                .as_ref()
                .and_then(|w| w.quota())
                .map(str::to_string)
                .into_iter()
                .collect();
            if let Some(q) = svc.store.workload_quota(&wref).await? {
                if !holders.contains(&q) {
                    holders.push(q);
                }
            }
            for q in holders {
                svc.release_workload(&q, &wref, dry).await?;
            }
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
        &checked_ref(adapter, &ns, &name)?,
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
    quota::workload::check_target(&ns, &name)
        .map_err(|p| ServiceError::BadRequest(format!("bizrq: HorizontalPodAutoscaler: {p}")))?;
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
        svc.set_hpa(&wref, None, &name, &req.uid, req.dry()).await?;
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
