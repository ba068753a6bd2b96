//! The validating admission webhook: `admission.k8s.io/v1` AdmissionReview in,
//! AdmissionReview out. Each object is parsed once, straight into what its
//! adapter needs; decisions come from the service layer.

use crate::cluster::events::{self, Refusal};
use crate::edge::AppState;
use crate::service::{Persist, Service, ServiceError, CREATE_TOKEN_ANNOTATION};
use crate::store::WorkloadAt;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::admission::AdmissionResponse;
use kube::core::response::{Status, StatusDetails, StatusSummary};
use quota::budget::reservations::RunDecl;
use quota::object::{HpaCharge, QuotaSpec, KIND};
use quota::workload::{
    adapter_for_kind, adapter_for_resource, read_hpa, read_scale_replicas, Adapter, Workload,
    WorkloadKey,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::Instant;

use quota::review::Request;

pub mod mutate;

/// An admission answer before it is wrapped in a review.
#[derive(Debug, Default)]
pub struct Verdict {
    pub allowed: bool,
    pub code: u16,
    pub message: String,
    pub warnings: Vec<String>,
    /// Set when a quota or tree rule refused: what the Events say.
    pub refusal: Option<Refusal>,
    /// The Status reason (Kubernetes' words); the API server hands it on.
    pub reason: Option<&'static str>,
    /// Seconds to wait before trying again (`status.details.retryAfterSeconds`).
    pub retry_after: Option<u64>,
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

    /// A refusal, coded by the one table (`edge::status_of`,
    /// docs/errors.md).
    pub fn from_error(e: ServiceError) -> Verdict {
        let (status, reason) = crate::edge::status_of(&e);
        let refusal = events::refusal(&e);
        let retry_after = e.retry_after();
        let message = match e {
            ServiceError::Internal(_) => {
                tracing::error!(error = %e, "admission failed; denying");
                "bizrq: internal error while deciding; denied (see bizrq logs)".to_string()
            }
            e => e.to_string(),
        };
        Verdict {
            allowed: false,
            code: status.as_u16(),
            message,
            warnings: Vec::new(),
            refusal,
            reason: Some(status_reason(status, reason)),
            retry_after,
        }
    }
}

/// The table's reason in Kubernetes' `StatusReason` words, which clients
/// (kubectl, client-go's `IsForbidden`, ...) understand.
fn status_reason(status: StatusCode, reason: &'static str) -> &'static str {
    match status {
        _ if reason == "AlreadyExists" => reason,
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::CONFLICT => "Conflict",
        StatusCode::UNPROCESSABLE_ENTITY => "Invalid",
        StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
        _ => "InternalError",
    }
}

/// The review answered, in kube's `AdmissionReview` envelope. Only the
/// response side uses kube's types: building it costs a few small
/// allocations per review, nothing next to decoding the request, which
/// stays `quota::review`'s (straight into what the adapters need).
pub fn review_json(uid: &str, v: Verdict) -> Vec<u8> {
    serde_json::to_vec(&response(uid, v).into_review()).expect("review serialises")
}

/// The answer to the review `uid` in kube's `AdmissionResponse`.
fn response(uid: &str, v: Verdict) -> AdmissionResponse {
    // `invalid` is kube's one constructor without a typed request; every
    // field that matters is set below.
    let mut r = AdmissionResponse::invalid("");
    r.uid = uid.to_string();
    r.allowed = v.allowed;
    r.result = if v.allowed {
        Status::default()
    } else {
        Status {
            status: Some(StatusSummary::Failure),
            code: v.code,
            message: v.message,
            reason: v
                .reason
                .unwrap_or_else(|| {
                    let code = StatusCode::from_u16(v.code);
                    status_reason(code.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), "")
                })
                .to_string(),
            details: v.retry_after.map(|secs| StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: secs.try_into().unwrap_or(u32::MAX),
            }),
            metadata: None,
        }
    };
    r.warnings = (!v.warnings.is_empty()).then_some(v.warnings);
    r
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Quotas,
    Workloads,
    Scale,
    Hpa,
    Prices,
    Pods,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Quotas => "quotas",
            Endpoint::Workloads => "workloads",
            Endpoint::Scale => "scale",
            Endpoint::Hpa => "hpa",
            Endpoint::Prices => "prices",
            Endpoint::Pods => "pods",
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
pub async fn prices(State(app): State<AppState>, body: Bytes) -> Response {
    handle(&app, Endpoint::Prices, &body).await
}
pub async fn pods(State(app): State<AppState>, body: Bytes) -> Response {
    handle(&app, Endpoint::Pods, &body).await
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
        // Escaped: a refused review's strings may hold control characters.
        // The uid cut to its bound: a refused one may be as long as a body.
        tracing::info!(uid = %req.uid_for_log().escape_debug(), endpoint = endpoint.name(), op = %req.operation.escape_debug(),
            kind = %req.kind.kind.escape_debug(),
            name = %req.name.as_deref().unwrap_or("").escape_debug(),
            namespace = %req.namespace.as_deref().unwrap_or("").escape_debug(),
            message = %verdict.message, "denied");
    }
    if let Some(refusal) = verdict.refusal.as_ref().filter(|_| !req.dry()) {
        if app.service.events.enabled() {
            let uid_of = |q: &str| app.service.cached_uid(q);
            for n in denial_notices(endpoint, &req, refusal, &verdict.message, uid_of) {
                app.service.events.emit(n);
            }
        }
    }
    let decision = if verdict.allowed { "allowed" } else { "denied" };
    let body = review_json(&req.uid, verdict);
    app.service.metrics.observe_admission(
        endpoint.name(),
        decision,
        started.elapsed().as_secs_f64(),
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A denial as Kubernetes Events: on the object under review — the
/// workload, the scale subresource's parent, the HPA or the quota — and on
/// each quota whose limit refused it (its owners watch it).
fn denial_notices(
    endpoint: Endpoint,
    req: &Request,
    refusal: &Refusal,
    message: &str,
    uid_of: impl Fn(&str) -> Option<String>,
) -> Vec<crate::service::notify::Notice> {
    let scale = endpoint == Endpoint::Scale || req.sub_resource.as_deref() == Some("scale");
    let action = match req.operation.as_str() {
        _ if scale => "Scale",
        "CREATE" => "Create",
        "DELETE" => "Delete",
        _ => "Update",
    };
    events::denial_notices(
        &subject(endpoint, req, scale),
        action,
        refusal,
        message,
        uid_of,
    )
}

/// The object a review is about. A scale review's object is a `Scale`; the
/// object it scales is the request's resource. The uid comes from the old
/// object (a Scale carries its parent's); a refused CREATE has none, its
/// object never exists.
fn subject(endpoint: Endpoint, req: &Request, scale: bool) -> ObjectReference {
    let join = |group: &str, version: &str| match group {
        "" => version.to_string(),
        g => format!("{g}/{version}"),
    };
    let (api_version, kind) = if endpoint == Endpoint::Quotas {
        (quota::object::api_version(), KIND.to_string())
    } else if scale {
        let kind = adapter_for_resource(&req.resource.group, &req.resource.resource)
            .map(|a| a.kind.to_string())
            .unwrap_or_else(|| req.resource.resource.clone());
        (join(&req.resource.group, &req.resource.version), kind)
    } else {
        (
            join(&req.kind.group, &req.kind.version),
            req.kind.kind.clone(),
        )
    };
    let (namespace, name) = target(req);
    let uid = match req.operation.as_str() {
        "CREATE" => None,
        _ => req
            .old_object
            .as_deref()
            .map(|r| quota::review::raw_meta(r).uid),
    };
    ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind),
        namespace: Some(namespace).filter(|ns| !ns.is_empty()),
        name: Some(name),
        uid: uid.filter(|u| !u.is_empty()),
        ..ObjectReference::default()
    }
}

pub async fn decide(svc: &Arc<Service>, endpoint: Endpoint, req: &Request) -> Verdict {
    if let Some(v) = refuse_hostile(req) {
        return v;
    }
    // The webhook configuration keeps these away; one edited by hand may
    // not. The controller does not charge them either (`--excluded-namespaces`).
    if endpoint != Endpoint::Quotas && endpoint != Endpoint::Prices {
        if let Some(ns) = req.namespace.as_deref() {
            if !svc.keys.namespaces.governs(ns) {
                return Verdict::allow().warn([format!(
                    "bizrq: namespace {ns} is not governed by bizrq (--excluded-namespaces); not charged"
                )]);
            }
        }
    }
    let result = match endpoint {
        Endpoint::Quotas => review_quota(svc, req).await,
        Endpoint::Workloads if req.sub_resource.as_deref() == Some("scale") => {
            review_scale(svc, req).await
        }
        Endpoint::Workloads => review_workload(svc, req).await,
        Endpoint::Scale => review_scale(svc, req).await,
        Endpoint::Hpa => review_hpa(svc, req).await,
        Endpoint::Prices => review_prices(req),
        Endpoint::Pods => review_pod(svc, req),
    };
    result.unwrap_or_else(Verdict::from_error)
}

/// A review holding a string no Kubernetes name, label, uid or username
/// holds (NUL, another control, a bidirectional override;
/// `Request::hostile_field`) is refused before anything is read or stored
/// under it, with the field named: one such string kept in a status fails
/// every later write of the quota on PostgreSQL. A DELETE is never
/// refused: one whose object is named so is let through touching nothing
/// (its CREATE was refused, so nothing is charged under that name; a
/// charge an older version stored is removed by `bizrq repair`).
///
/// A review uid past its bound is refused likewise
/// (`Request::oversized_uid`).
pub(crate) fn refuse_hostile(req: &Request) -> Option<Verdict> {
    if req.operation == "DELETE" {
        let h = req.hostile_target()?;
        return Some(Verdict::allow().warn([h.let_through()]));
    }
    let message = match req.oversized_uid() {
        Some(m) => m,
        None => req.hostile_field()?.refusal(),
    };
    Some(Verdict {
        allowed: false,
        code: StatusCode::BAD_REQUEST.as_u16(),
        message,
        reason: Some("BadRequest"),
        ..Verdict::default()
    })
}

/// What a reviewed object's status may say. An UPDATE carries the status
/// the API server keeps (it restores the stored one before admission), so
/// a finished object's edit charges nothing; where its pods still run the
/// controller, which sees them, charges them again at once (a lowered
/// charge never outranks what its cache shows). A CREATE's status is the
/// client's own, cleared by the API server only after mutating admission:
/// a forged `Complete` must not read as running nothing.
pub(crate) fn read_status(w: &mut Workload, operation: &str) {
    if operation == "UPDATE" {
        w.finish();
    } else {
        w.ignore_status();
    }
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
fn checked_ref(adapter: &Adapter, ns: &str, name: &str) -> Result<WorkloadKey, ServiceError> {
    adapter
        .checked_ref(ns, name)
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
    let wref = checked_ref(adapter, &ns, &name)?;
    let dry = req.dry();
    match req.operation.as_str() {
        "DELETE" => {
            release_deleted(svc, adapter, req, &wref).await;
            Ok(Verdict::allow())
        }
        "CREATE" | "UPDATE" => {
            if req.operation == "UPDATE" {
                refuse_late_gate(adapter, req)?;
            }
            let mut new = read(adapter, &req.object, svc)?;
            if let Some(w) = new.as_mut() {
                read_status(w, &req.operation);
            }
            let old = if req.operation == "UPDATE" {
                read_old(adapter, &req.old_object)?
            } else {
                None
            };
            let warnings = new.as_ref().map(|w| w.warnings.clone()).unwrap_or_default();
            let changes = match (req.operation.as_str(), &new) {
                ("UPDATE", Some(w)) => Some(update_changes(adapter, req, w, svc)),
                _ => None,
            };
            for step in quota::admission::plan(old.as_ref(), new.as_ref()) {
                match step {
                    // A create the mutating webhook held and marked waits
                    // outside the quota (docs/queueing.md §12): it runs
                    // nothing, so there is nothing to charge, and a record
                    // of it would write the quota for every create that
                    // waits. The round charges it when it admits it.
                    quota::admission::Step::Charge { quota, workload }
                        if waits_marked(svc, adapter, req, quota, &wref, workload) => {}
                    quota::admission::Step::Charge { quota, workload } => {
                        let sets = workload.pod_sets.clone();
                        let run = match &changes {
                            Some(c) => RunDecl::of_update(workload, c),
                            None => RunDecl::of(workload),
                        };
                        // bizrq's own writes (a queue's release, a
                        // preemption's suspend) are not who asked for the
                        // work: its submitter stays as recorded. Their
                        // charge names the object (`OWN_CHARGE`), so the
                        // controller can take back one its write left
                        // when that write found the object deleted.
                        let own = req.sent_by(&svc.service_account);
                        let by = (!own).then_some(req.user_info.username.as_str());
                        let uid = match own {
                            true => format!("{}{}", quota::object::OWN_CHARGE, workload.meta.uid),
                            false => req.uid.clone(),
                        };
                        svc.charge(
                            crate::service::ChargeRequest::new(quota, &wref, sets, &uid)
                                .run_time(run)
                                .submitted_by(by)
                                .dry_run(dry),
                        )
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

/// A CREATE, with queue marks on, of an object the mutating webhook held
/// and marked: a kind that can wait in a queue (`quota::queue::queueable`),
/// held back now (`quota::hold::is_held`), running nothing, and carrying a
/// mark we accept for this quota and this object, placed now
/// (`quota::queue::mark::accept`: our MAC, its quota, its ref, its
/// `since`). Anything else is charged as any create: a kind that cannot
/// wait (a Deployment) or an unsigned or misbound mark never skips the
/// charge, so a later `/scale` or UPDATE finds the charge it changes.
fn waits_marked(
    svc: &Service,
    adapter: &Adapter,
    req: &Request,
    quota_name: &str,
    wref: &str,
    w: &Workload,
) -> bool {
    let Some(keys) = svc.marks.as_ref() else {
        return false;
    };
    if req.operation != "CREATE"
        || !quota::queue::queueable(adapter)
        || w.usage().values().any(|v| v.nanos() != 0)
    {
        return false;
    }
    let Some(annotation) = w.meta.annotations.get(quota::queue::mark::ANNOTATION) else {
        return false;
    };
    let held = req
        .object
        .as_deref()
        .and_then(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok())
        .is_some_and(|o| quota::hold::is_held(adapter.hold(), &o));
    if !held {
        return false;
    }
    // A create is made now: the mark the mutating webhook just signed is
    // placed now, and a mark copied from an older object is refused, as
    // the fold refuses it against the object's creationTimestamp.
    let now = svc.now();
    let at = quota::queue::mark::Binding {
        quota: quota_name,
        workload_ref: wref,
        created_ms: now,
        now_ms: now,
    };
    quota::queue::mark::accept(annotation, &at, |b, m| keys.verify(b, m)).is_ok()
}

/// What an UPDATE changes of what admission, budgets and queueing read
/// (`quota::update`): what the new object is judged on again. An old
/// object that cannot be read whole is taken to have changed everything.
fn update_changes(
    adapter: &Adapter,
    req: &Request,
    new: &Workload,
    svc: &Service,
) -> quota::update::Changes {
    match read(adapter, &req.old_object, svc) {
        Ok(Some(mut old)) => {
            old.finish();
            quota::update::changed(&old, new)
        }
        _ => quota::update::Changes::all(),
    }
}

/// A pod's UPDATE (not its status): the scheduling gate of a workload
/// waiting in its queue (`quota::hold::GATE`), and the label that sends
/// the pod here, are removed by bizrq's own service account only — when
/// the quota admits the workload. Nothing is charged here.
fn review_pod(svc: &Service, req: &Request) -> Result<Verdict, ServiceError> {
    if req.operation != "UPDATE" || req.sub_resource.is_some() {
        return Ok(Verdict::allow());
    }
    let parse = |raw: &Option<Box<RawValue>>| {
        raw.as_deref()
            .map(|r| serde_json::from_str::<serde_json::Value>(r.get()))
            .transpose()
            .map_err(|e| ServiceError::BadRequest(format!("bizrq: cannot read Pod: {e}")))
            .map(Option::unwrap_or_default)
    };
    let (old, new) = (parse(&req.old_object)?, parse(&req.object)?);
    quota::hold::pod_update(&old, &new, req.sent_by(&svc.service_account))
        .map_err(ServiceError::Refused)?;
    Ok(Verdict::allow())
}

/// A workload held back by gating its pods (`quota::hold`, a Volcano Job)
/// is held only from its creation: its pods made before are not gated, so
/// holding it later would charge nothing while they run. The mutating
/// webhook's own re-hold (a held workload released by hand that does not
/// fit) is an UPDATE of a held object, and passes.
fn refuse_late_gate(adapter: &Adapter, req: &Request) -> Result<(), ServiceError> {
    let hold = adapter.hold();
    if !matches!(hold, quota::hold::Hold::PodGate(_)) {
        return Ok(());
    }
    let held = |raw: &Option<Box<RawValue>>| {
        raw.as_deref()
            .and_then(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok())
            .is_some_and(|o| quota::hold::is_held(hold, &o))
    };
    if held(&req.object) && !held(&req.old_object) {
        let (ns, name) = target(req);
        return Err(ServiceError::BadRequest(format!(
            "bizrq: {} {ns}/{name}: annotation {} holds a workload back only from its creation \
             (its pods made before are not gated); remove it, or delete the workload and \
             create it again",
            adapter.kind,
            quota::hold::GATE
        )));
    }
    Ok(())
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
    // The old object's quota, and its uid (a queue mark's tombstone).
    let (mut holders, uid, read): (Vec<String>, String, bool) = match read_old(
        adapter,
        &req.old_object,
    ) {
        Ok(old) => (
            old.as_ref()
                .and_then(|w| w.quota())
                .map(str::to_string)
                .into_iter()
                .collect(),
            old.as_ref().map(|w| w.meta.uid.clone()).unwrap_or_default(),
            old.is_some(),
        ),
        Err(e) => {
            tracing::warn!(uid = %req.uid, workload = wref, error = %e, "DELETE with an unreadable oldObject; releasing by binding");
            (Vec::new(), String::new(), false)
        }
    };
    let deadline = tokio::time::Instant::now() + RELEASE_IN_REQUEST;
    // The old object's label says where its charge is, as it said to
    // every review that charged it: only a DELETE without a readable old
    // object looks its charge up by reference (docs/cluster-mode.md).
    if !read {
        match tokio::time::timeout_at(deadline, svc.holder_of(wref, None)).await {
            Ok(Ok(Some(q))) if !holders.contains(&q) => holders.push(q),
            Ok(Ok(_)) => {}
            Ok(Err(e)) if !dry => svc.defer_release(None, wref, None, &uid, deleted_at, &e),
            Err(_) if !dry => svc.defer_release(None, wref, None, &uid, deleted_at, &timed_out()),
            _ => {}
        }
    }
    if !dry {
        for q in &holders {
            svc.left_marked(q, wref, &uid);
        }
    }
    for q in holders {
        let mut seen = None;
        let release = svc.release_for_delete(&q, wref, dry, &mut seen, &uid);
        let error = match tokio::time::timeout_at(deadline, release).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(_) => timed_out(),
        };
        if !dry {
            svc.defer_release(Some(q), wref, seen, &uid, deleted_at, &error);
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
    if req.operation != "UPDATE" {
        return Ok(Verdict::allow());
    }
    if !adapter.scalable {
        // A /scale of a kind with several pod sets (Kubeflow's specReplicasPath
        // is one replica type's count) cannot be charged from the Scale
        // alone: refused for a governed workload, never let through unpaid.
        let (ns, name) = target(req);
        let wref = checked_ref(adapter, &ns, &name)?;
        let at = scaled_at(adapter, req, &ns, &name);
        if svc.holder_of(&wref, Some(&at)).await?.is_none() {
            return Ok(Verdict::allow());
        }
        return Err(ServiceError::BadRequest(format!(
            "bizrq: {} {ns}/{name} is governed by a quota and cannot be scaled through its \
             scale subresource; change its replicas in the object itself (kubectl edit or \
             patch), which bizrq charges",
            adapter.kind
        )));
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
        &scaled_at(adapter, req, &ns, &name),
        replicas,
        &req.uid,
        req.dry(),
    )
    .await?;
    Ok(Verdict::allow())
}

/// The object a `/scale` review scales, where the API server keeps it:
/// the review's resource (at the version the webhook configuration
/// matched), its namespace and name.
fn scaled_at<'a>(
    adapter: &'static Adapter,
    req: &'a Request,
    ns: &'a str,
    name: &'a str,
) -> WorkloadAt<'a> {
    WorkloadAt {
        adapter,
        version: &req.resource.version,
        namespace: ns,
        name,
    }
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
    let old = parse(&req.old_object)?;
    let new = if req.operation == "DELETE" {
        None
    } else {
        parse(&req.object)?
    };
    let old_target = old.as_ref().and_then(|h| hpa_target(&ns, h));
    let new_target = new.as_ref().and_then(|h| hpa_target(&ns, h));
    let new_ref = new_target.as_ref().map(|(r, _)| r);
    if let (Some(h), Some((wref, at))) = (&new, &new_target) {
        let charge = HpaCharge {
            name: name.clone(),
            max_replicas: h.max_replicas,
        };
        svc.set_hpa(
            wref,
            Some(at),
            Some(charge),
            &name,
            Some(&req.uid),
            req.dry(),
        )
        .await?;
    }
    if let Some((wref, at)) = old_target.filter(|(r, _)| Some(r) != new_ref) {
        // A DELETE's review uid is not checked (`refuse_hostile`: a
        // DELETE is never refused), so it is not stored: the lowered
        // charge keeps its own.
        let uid = (req.operation != "DELETE").then_some(req.uid.as_str());
        let lifted = svc
            .set_hpa(&wref, Some(&at), None, &name, uid, req.dry())
            .await;
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

/// An HPA's target: its reference, and where the API server keeps it.
fn hpa_target<'a>(ns: &'a str, h: &'a quota::workload::Hpa) -> Option<(String, WorkloadAt<'a>)> {
    let adapter = adapter_for_kind(&h.target_group, &h.target_kind)?;
    let at = WorkloadAt {
        adapter,
        version: &h.target_version,
        namespace: ns,
        name: &h.target_name,
    };
    Some((adapter.workload_ref(ns, &h.target_name).into(), at))
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
            // bizrq's own create names the carve-out it already made; the
            // annotation is honoured only from bizrq's identity (anyone may
            // write it, and copy a token from a parent's status). Anyone
            // else's create carves under this review's uid.
            let token = obj
                .metadata
                .annotations
                .get(CREATE_TOKEN_ANNOTATION)
                .filter(|t| !t.is_empty() && req.sent_by(&svc.service_account))
                .unwrap_or(&req.uid);
            svc.create_quota(&name, obj.spec, Persist::ByApiServer, token, dry)
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

/// A PriceList write: the whole document must compile (the same rules as
/// the standalone file), or the API server refuses it and the list in
/// force stays. An admitted change is logged (the API server's audit log
/// has the write itself).
fn review_prices(req: &Request) -> Result<Verdict, ServiceError> {
    use quota::budget::price_list_doc::{self, PriceListObject};
    if req.sub_resource.is_some() || !matches!(req.operation.as_str(), "CREATE" | "UPDATE") {
        return Ok(Verdict::allow());
    }
    let raw = req
        .object
        .as_deref()
        .ok_or_else(|| ServiceError::BadRequest(format!("{} without object", req.operation)))?;
    if raw.get().len() > price_list_doc::MAX_DOCUMENT_BYTES {
        return Err(ServiceError::BadRequest(format!(
            "bizrq: a price list is at most {} bytes",
            price_list_doc::MAX_DOCUMENT_BYTES
        )));
    }
    // Through a Value: serde's errors then name the field, not a column.
    let mut obj: PriceListObject = serde_json::from_str::<serde_json::Value>(raw.get())
        .and_then(serde_json::from_value)
        .map_err(|e| ServiceError::BadRequest(format!("bizrq: price list: {e}")))?;
    if obj.metadata.name.is_empty() {
        obj.metadata.name = target(req).1;
    }
    let list = obj
        .compile()
        .map_err(|e| ServiceError::BadRequest(format!("bizrq: price list: {e}")))?;
    if !req.dry() {
        tracing::info!(user = %req.user_info.username, op = %req.operation,
            versions = list.versions.len(), currency = ?list.currency.as_ref().map(|c| &c.unit),
            "price list change admitted");
    }
    Ok(Verdict::allow())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::events::{
        quota_ref, ADMISSION_DENIED, CASH_EXHAUSTED, QUOTA_EXCEEDED, TREE_RULE_VIOLATED,
    };
    use crate::service::notify::Notice;
    use serde_json::json;

    fn request(v: serde_json::Value) -> Request {
        serde_json::from_value(v).unwrap()
    }

    fn refused_by(quota: &str, reason: &'static str) -> Refusal {
        Refusal {
            reason,
            quotas: vec![quota.to_string()],
        }
    }

    fn uid_of(q: &str) -> Option<String> {
        Some(format!("uid-of-{q}"))
    }

    fn deployment(uid: Option<&str>) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            namespace: Some("nlp".into()),
            name: Some("train".into()),
            uid: uid.map(str::to_string),
            ..ObjectReference::default()
        }
    }

    const MSG: &str = "bizrq nlp-team: requests.nvidia.com/gpu asks 12, 8 left of 16";

    /// A refused `kubectl scale` regards the Deployment (the scale
    /// subresource's parent, with its uid), not a `Scale`.
    #[test]
    fn a_refused_scale_is_told_on_the_deployment() {
        let req = request(json!({
            "uid": "r-1",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "subResource": "scale", "name": "train", "namespace": "nlp", "operation": "UPDATE",
            "object": {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "train", "namespace": "nlp", "uid": "d-1"}, "spec": {"replicas": 9}},
            "oldObject": {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "train", "namespace": "nlp", "uid": "d-1"}, "spec": {"replicas": 2}}
        }));
        let refusal = refused_by("nlp-team", QUOTA_EXCEEDED);
        for endpoint in [Endpoint::Workloads, Endpoint::Scale] {
            let out = denial_notices(endpoint, &req, &refusal, MSG, uid_of);
            assert_eq!(
                out,
                [
                    Notice {
                        regarding: quota_ref("nlp-team", Some("uid-of-nlp-team".into())),
                        warning: true,
                        reason: ADMISSION_DENIED,
                        action: "Scale",
                        note: format!("Scale of Deployment nlp/train refused: {MSG}"),
                    },
                    Notice {
                        regarding: deployment(Some("d-1")),
                        warning: true,
                        reason: QUOTA_EXCEEDED,
                        action: "Scale",
                        note: MSG.into(),
                    }
                ]
            );
        }
    }

    #[test]
    fn a_refused_update_regards_the_workload_by_its_old_uid() {
        let req = request(json!({
            "uid": "r-2",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "train", "namespace": "nlp", "operation": "UPDATE",
            "object": {"metadata": {"name": "train", "namespace": "nlp", "uid": "d-1"}},
            "oldObject": {"metadata": {"name": "train", "namespace": "nlp", "uid": "d-1"}}
        }));
        let out = denial_notices(
            Endpoint::Workloads,
            &req,
            &refused_by("cv", CASH_EXHAUSTED),
            MSG,
            uid_of,
        );
        assert_eq!(out[0].regarding.name.as_deref(), Some("cv"));
        assert_eq!(out[1].regarding, deployment(Some("d-1")));
        assert_eq!((out[1].reason, out[1].action), (CASH_EXHAUSTED, "Update"));
    }

    /// A refused CREATE never makes the object: the Event regards it by
    /// kind, namespace and name, without the uid the API server had
    /// assigned to the object it then dropped.
    #[test]
    fn a_refused_create_regards_the_workload_without_uid() {
        let req = request(json!({
            "uid": "r-3",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "train", "namespace": "nlp", "operation": "CREATE",
            "object": {"metadata": {"name": "train", "namespace": "nlp", "uid": "never-stored"}}
        }));
        let out = denial_notices(
            Endpoint::Workloads,
            &req,
            &refused_by("nlp-team", QUOTA_EXCEEDED),
            MSG,
            uid_of,
        );
        assert_eq!(out[1].regarding, deployment(None));
        assert_eq!(out[1].action, "Create");
    }

    /// A quota UPDATE or DELETE refused by a tree rule regards the quota
    /// itself (cluster-scoped: no namespace), never a workload.
    #[test]
    fn a_refused_quota_delete_regards_the_quota_only() {
        let req = request(json!({
            "uid": "r-4",
            "kind": {"group": "bizrq.io", "version": "v1", "kind": "BizGroupResourceQuota"},
            "resource": {"group": "bizrq.io", "version": "v1", "resource": "bizgroupresourcequotas"},
            "name": "ai", "operation": "DELETE",
            "oldObject": {"metadata": {"name": "ai", "uid": "q-ai"}, "spec": {"hard": {}}}
        }));
        let refusal = Refusal {
            reason: TREE_RULE_VIOLATED,
            quotas: vec![],
        };
        let msg = "bizrq ai: only leaves can be deleted; children: nlp";
        let out = denial_notices(Endpoint::Quotas, &req, &refusal, msg, uid_of);
        assert_eq!(
            out,
            [Notice {
                regarding: quota_ref("ai", Some("q-ai".into())),
                warning: true,
                reason: TREE_RULE_VIOLATED,
                action: "Delete",
                note: msg.into(),
            }]
        );
    }

    /// "bizrq nlp does not fit in its parent: bizrq ai: …": the new quota
    /// (by name) and its parent, whose remainder was too small.
    #[test]
    fn a_child_that_does_not_fit_is_told_on_it_and_its_parent() {
        let req = request(json!({
            "uid": "r-5",
            "kind": {"group": "bizrq.io", "version": "v1", "kind": "BizGroupResourceQuota"},
            "resource": {"group": "bizrq.io", "version": "v1", "resource": "bizgroupresourcequotas"},
            "name": "nlp", "operation": "CREATE",
            "object": {"metadata": {"name": "nlp"}, "spec": {"parent": "ai", "hard": {}}}
        }));
        let msg = "bizrq nlp does not fit in its parent: bizrq ai: requests.nvidia.com/gpu asks 8, 6 left of 16";
        let out = denial_notices(
            Endpoint::Quotas,
            &req,
            &refused_by("ai", QUOTA_EXCEEDED),
            msg,
            uid_of,
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].regarding, quota_ref("nlp", None));
        assert_eq!(out[0].regarding, quota_ref("ai", Some("uid-of-ai".into())));
        assert_eq!(
            out[0].note,
            format!("Create of BizGroupResourceQuota nlp refused: {msg}")
        );
    }
}
