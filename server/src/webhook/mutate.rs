//! The mutating webhook `/mutate/workloads` (docs/queueing.md §4, §10): a
//! queueable workload (a kind whose adapter can hold it back, `Adapter::hold`)
//! of a quota with `queueing: Queue` that does not fit now is created held
//! back — suspended, or with a scheduling gate on every pod template — and
//! joins the quota's queue, not charged. One that fits now is, with queue
//! marks and `--queue-fitting-creates` on, created held and marked all
//! the same, and the controller's next round admits it: the review writes
//! nothing. Otherwise it is charged here, so the room it saw is its own:
//! the validating webhook finds the charge and confirms it, and a create
//! that lost the room to a racing one queues instead of being refused.
//! Everything else passes unchanged to the validating webhook, which charges or refuses as without queueing; a held
//! object is one its adapter reads as running nothing, which the validating
//! webhook charges nothing for.

use super::{response, review_json, target, Verdict};
use crate::cluster::events;
use crate::edge::AppState;
use crate::service::notify::Notice;
use crate::service::queue::Queueing;
use crate::service::{Service, ServiceError};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kube::core::admission::AdmissionResponse;
use kube::core::TypeMeta;
use quota::budget::reservations::RunDecl;
use quota::hold::{self, Hold};
use quota::object::queue::Queued;
use quota::queue::{self, Disposition};
use quota::review::Request;
use quota::workload::adapter_for_kind;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// How many times a create that fits, and then loses its room to racing
/// creates before its charge is written, is judged again. Each lost round
/// means another admission took the room, so the next judgement mostly
/// queues it; past these rounds it passes to the validating webhook.
const HOLD_ROUNDS: usize = 4;

pub async fn workloads(State(app): State<AppState>, body: Bytes) -> Response {
    let started = Instant::now();
    let req = match quota::review::decode(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let (verdict, patch) = match super::refuse_hostile(&req) {
        Some(v) => (v, None),
        None => match mutate(&app.service, &req).await {
            Ok(out) => out,
            Err(e) => (Verdict::from_error(e), None),
        },
    };
    let decision = match (&patch, verdict.allowed) {
        (_, false) => "denied",
        (Some(_), true) => "queued",
        (None, true) => "allowed",
    };
    let patch = if verdict.allowed {
        unmark_preempted(&req, patch)
    } else {
        patch
    };
    let body = match patch {
        Some(p) => patched_review_json(&req.uid, verdict, &p),
        None => review_json(&req.uid, verdict),
    };
    app.service.metrics.observe_admission(
        "mutate-workloads",
        decision,
        started.elapsed().as_secs_f64(),
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// How `AdmissionResponse.patch` is written: the API server's field is
/// `[]byte`, which JSON carries as standard, padded base64 (RFC 4648).
const PATCH_BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The review answered with a JSONPatch, written in one pass: kube's
/// response with `patch` and `patchType` beside its fields. kube's
/// `AdmissionResponse::with_patch` is not used: it writes the patch as an
/// array of byte values, not as the base64 string the API server documents.
fn patched_review_json(uid: &str, verdict: Verdict, patch: &Value) -> Vec<u8> {
    #[derive(Serialize)]
    struct Review<'a> {
        #[serde(flatten)]
        types: &'a TypeMeta,
        response: Patched<'a>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Patched<'a> {
        #[serde(flatten)]
        response: &'a AdmissionResponse,
        patch: String,
        patch_type: &'static str,
    }
    let r = response(uid, verdict);
    let ops = serde_json::to_vec(patch).expect("patch serialises");
    let review = Review {
        types: &r.types,
        response: Patched {
            response: &r,
            patch: PATCH_BASE64.encode(ops),
            patch_type: "JSONPatch",
        },
    };
    serde_json::to_vec(&review).expect("review serialises")
}

/// A workload preempted by bizrq carries `queue::PREEMPTED_ANNOTATION`
/// while suspended, so the controller can queue it again should its entry
/// be lost. Whoever unsuspends it (its owner by hand, as bizrq removes it
/// in its own unsuspend) ends that: the annotation is removed in the same
/// write, so a later suspend by hand is never taken for a preemption.
/// `patch` is this webhook's own (a re-suspend keeps the annotation).
fn unmark_preempted(req: &Request, patch: Option<Value>) -> Option<Value> {
    if patch.is_some() || req.operation != "UPDATE" || req.sub_resource.is_some() {
        return patch;
    }
    let adapter = adapter_for_kind(&req.kind.group, &req.kind.kind)?;
    if !queue::queueable(adapter) {
        return None;
    }
    let obj: Value = serde_json::from_str(req.object.as_deref()?.get()).ok()?;
    let old: Value = serde_json::from_str(req.old_object.as_deref()?.get()).ok()?;
    let hold = adapter.hold();
    let marked = obj["metadata"]["annotations"]
        .get(queue::PREEMPTED_ANNOTATION)
        .is_some();
    let unsuspended = hold::is_held(hold, &old) && !hold::is_held(hold, &obj);
    (marked && unsuspended).then(|| {
        let path = hold::pointer(&["metadata", "annotations", queue::PREEMPTED_ANNOTATION]);
        json!([{"op": "remove", "path": path}])
    })
}

/// The decision, and the JSONPatch when the object is to be held back.
pub async fn mutate(
    svc: &Arc<Service>,
    req: &Request,
) -> Result<(Verdict, Option<Value>), ServiceError> {
    let pass = Ok((Verdict::allow(), None));
    let create = match req.operation.as_str() {
        "CREATE" => true,
        "UPDATE" => false,
        _ => return pass,
    };
    if req.sub_resource.is_some() {
        return pass;
    }
    let Some(adapter) = adapter_for_kind(&req.kind.group, &req.kind.kind) else {
        return pass;
    };
    if !queue::queueable(adapter) {
        return pass;
    }
    if let Some(ns) = req.namespace.as_deref() {
        if !svc.keys.namespaces.governs(ns) {
            return pass;
        }
    }
    let Some(raw) = req.object.as_deref() else {
        return pass;
    };
    let bad = |e: String| ServiceError::BadRequest(e);
    let obj: Value = serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))?;
    // Held back: suspended, or its pods gated (`quota::hold`).
    let hold = adapter.hold();
    let held = hold::is_held(hold, &obj);
    let old_obj = req
        .old_object
        .as_deref()
        .and_then(|o| serde_json::from_str::<Value>(o.get()).ok());
    let old_held = old_obj.as_ref().is_some_and(|o| hold::is_held(hold, o));
    // What it will run once admitted: read as if released.
    let running = hold::as_released(hold, &obj);
    let mut w = adapter
        .read(&running.to_string(), &svc.keys)
        .map_err(|e| bad(e.to_string()))?;
    super::read_status(&mut w, &req.operation);
    // Standalone: no controller would ever admit what waits, so nothing
    // queues; the validating webhook charges or refuses as without it.
    // (Read first all the same: an object the adapter refuses, say of
    // another kind than the review names, is refused here too.)
    if !svc.queueing {
        return pass;
    }
    let Some(quota_name) = w.quota().map(str::to_string) else {
        return pass;
    };
    let (ns, name) = target(req);
    let wref = adapter
        .checked_ref(&ns, &name)
        .map_err(|e| bad(e.to_string()))?;
    // Most quotas refuse (the default): this replica's copy says so without
    // a read on the admission path. A copy older than a switch to Queue
    // only means one more job is refused as before, never over-admitted;
    // a workload in that copy's queue is read fresh as any other.
    if let Some(c) = svc.cached_quota(&quota_name) {
        if c.quota.spec.queueing.mode == quota::object::queueing::Mode::Refuse
            && !queue::entries::holds(&c.quota, &wref)
        {
            return pass;
        }
    }
    // A create is judged on this replica's most recent copy, with no
    // read (`Service::recent`): what an old copy gets wrong is safe (a
    // create that fits queues, and the next round admits it; one that no
    // longer fits loses its charge's compare-and-swap and is judged again
    // on the copy that write read). An update may be the controller's
    // release of an admitted workload, which only the stored status tells.
    // A copy that shows a create's name charged is read again, fresh: the
    // charge may be an earlier object's under the name, released since,
    // and a create passed on as charged is never queued.
    let charged_in = |q: &quota::object::Quota| {
        q.status
            .workloads
            .get(&wref)
            .is_some_and(|c| c.usage().values().any(|v| v.nanos() > 0))
    };
    // bizrq's own release of a workload its round admitted (the controller
    // unsuspends what it charged, one update per admission from a queue):
    // where this replica's newest copy shows this very object charged by
    // a round (`queue:<uid>`) and not queued, it is passed on with no
    // request to the API server. The copy can be behind only where someone
    // else took this very charge back since (a new leader's repair, a
    // delete racing the release): the validating webhook that follows
    // charges on the stored quota in its compare-and-swap, so such a
    // release is charged if it fits or refused — never run uncharged — and
    // the object, held and marked still, is folded back into the queue.
    // Anyone else's release, and an own one the copy does not show so
    // charged, is read whole, fresh.
    let own_release = !create && old_held && !held && req.sent_by(&svc.service_account);
    // bizrq's own suspend of a workload its round preempted: the round's
    // write queued it (`status.queue`, this very uid, marked preempted;
    // its charge stays until its pods stop) before the suspend was sent. Where this
    // replica's newest copy shows it so, it is passed on with no request:
    // a held object runs nothing, and what it asks is unchanged (the
    // suspend changes only the hold and the preemption's annotation), so
    // its entry needs no refresh — the next round judges it as any other.
    // Before, each such suspend read the quota whole and re-judged its
    // entry in a compare-and-swap (4 ms at the median, 30 ms at the p99 on
    // the Kueue bench, 7 % of the updates). Anyone else's suspend, and a
    // copy that does not show it so, is judged on a fresh read as before.
    let own_suspend = !create && !old_held && held && req.sent_by(&svc.service_account);
    if own_suspend && !w.meta.uid.is_empty() {
        if let Ok(s) = svc.recent(&quota_name).await {
            if queue::entries::find(&s.quota, &wref, &w.meta.uid).is_some_and(|e| e.work.preempted)
            {
                return pass;
            }
        }
    }
    let admitted_here = |s: &std::sync::Arc<crate::store::Stored>| {
        s.quota
            .status
            .workloads
            .get(&wref)
            .is_some_and(|c| c.admitted_by_round(&w.meta.uid))
            && charged_in(&s.quota)
            && !queue::entries::holds(&s.quota, &wref)
    };
    let mut read = if create {
        svc.recent(&quota_name).await
    } else if own_release {
        match svc.recent(&quota_name).await {
            Ok(s) if admitted_here(&s) => Ok(s),
            _ => svc.get(&quota_name).await.map(std::sync::Arc::new),
        }
    } else {
        svc.get(&quota_name).await.map(std::sync::Arc::new)
    };
    if create && read.as_ref().is_ok_and(|s| charged_in(&s.quota)) {
        read = svc.get(&quota_name).await.map(std::sync::Arc::new);
    }
    let stored = match read {
        Ok(s) => s,
        // The validating webhook refuses a missing quota with its message.
        Err(ServiceError::NotFound(_)) => return pass,
        Err(e) => return Err(e),
    };
    let q = &stored.quota;
    let queued = queue::entries::holds(q, &wref);
    // Admitted already (charged and being unsuspended by the controller):
    // the validating webhook's business, as for any running workload.
    let charged = charged_in(q);
    if charged && !queued {
        return pass;
    }
    // Judged: a create that would run, a queued workload (refreshed, or
    // released by hand), and a held workload being released.
    let judged = if create {
        !held
    } else {
        queued || (old_held && !held)
    };
    if !judged {
        // Opted out while held with a mark not folded yet: this replica's
        // fold skips it from now on (docs/queueing.md §12, constraint 5).
        let opted_out = || {
            matches!(
                queue::disposition(adapter, &q.spec.queueing, &w.meta.labels),
                Ok(Disposition::Refuse)
            )
        };
        let marked = obj["metadata"]["annotations"][queue::mark::ANNOTATION].is_string();
        if !create && !queued && held && marked && !req.dry() && svc.marks.is_some() && opted_out()
        {
            svc.left_marked(&quota_name, &wref, &w.meta.uid);
        }
        return pass;
    }
    // A queued workload whose update changes the opt-out label is judged
    // like a create of the new object: opted out, it leaves the queue —
    // held still, it waits for its owner (nothing charged, nothing
    // queued); released, the validating webhook charges it, taking it out
    // of the queue in that write, or refuses the update, which leaves it
    // queued as it was.
    let opt_out = |o: &Value| o["metadata"]["labels"][queue::OPT_OUT_LABEL].clone();
    let relabelled = !create
        && old_obj
            .as_ref()
            .is_some_and(|o| opt_out(o) != opt_out(&obj));
    if queued && relabelled {
        match queue::disposition(adapter, &q.spec.queueing, &w.meta.labels) {
            Err(m) => return Err(bad(format!("bizrq: {m}"))),
            Ok(Disposition::Queue) => {}
            Ok(Disposition::Refuse) => {
                if held {
                    svc.leave_queue(&quota_name, &wref, req.dry()).await?;
                    if !req.dry() {
                        svc.left_marked(&quota_name, &wref, &w.meta.uid);
                    }
                }
                return pass;
            }
        }
    }
    if !queued {
        match queue::disposition(adapter, &q.spec.queueing, &w.meta.labels) {
            Err(m) => return Err(bad(format!("bizrq: {m}"))),
            Ok(Disposition::Refuse) => return pass,
            Ok(Disposition::Queue) => {}
        }
    }
    let work = Queued {
        workload_ref: wref.to_string(),
        // A CREATE's object has no uid until the API server stores it: one
        // a review states is not the API server's, and the entry must read
        // as never seen until the controller's watch names it (so it
        // expires if the object never appears).
        uid: if create {
            String::new()
        } else {
            w.meta.uid.clone()
        },
        // Resolved from the classes by `queue_workload`; a number written
        // in the template is never trusted (the API server would refuse
        // such pods anyway).
        priority: 0,
        priority_classes: queue::priority::class_names(&obj),
        submitted_ms: svc.now(),
        pod_sets: w.pod_sets.clone().into(),
        run_ms: quota::workload::runtime::max_runtime(&running)
            .ok()
            .flatten()
            .map(|r| r.ms),
        submitted_by: quota::submitters::submitter(&req.user_info.username),
        preempted: false,
    };
    // With queue marks (docs/queueing.md §12) a workload that must wait
    // and is not queued in the status yet is marked, not written into the
    // quota: `mark` is its signed entry.
    // Judged on the copy just read (no second read of the quota).
    let queue_fitting = svc.queue_fitting && create && !held && !queued;
    let (mut answer, mut mark) = svc
        .mark_workload(
            &quota_name,
            work.clone(),
            create,
            req.dry(),
            Some(stored.clone()),
            queue_fitting,
        )
        .await?;
    // With `--queue-fitting-creates` and queue marks on, a create that fits
    // now is created held and marked all the same (`Queueing::Next`): the
    // controller's next round admits it, so no review waits for a write of
    // the quota (docs/queueing.md §10). Otherwise (without marks queueing
    // is itself a write of the quota), and for one whose queue is full, a
    // create that fits is charged here, so the room it saw is its own when
    // the validating webhook comes: that review finds the charge and
    // confirms it (the same pod sets cost nothing more), never refusing
    // what this one let through. A create that lost the room to a racing
    // one is judged again, and queues. A charge whose object never
    // appears (the create failed after this review) is dropped by the
    // controller once `RESERVATION_TTL_MS` has passed, like any admission
    // its watch never shows.
    if create && !held && !queued && !req.dry() {
        for _ in 0..HOLD_ROUNDS {
            if !matches!(answer, Queueing::Admits) {
                break;
            }
            let charged = svc
                .charge(
                    crate::service::ChargeRequest::new(&quota_name, &wref, w.pod_sets.clone(), "")
                        .run_time(RunDecl::of(&w))
                        .submitted_by(Some(&req.user_info.username)),
                )
                .await;
            match charged {
                Ok(()) => return pass,
                Err(ServiceError::Denied(_)) => {
                    (answer, mark) = svc
                        .mark_workload(
                            &quota_name,
                            work.clone(),
                            create,
                            false,
                            None,
                            queue_fitting,
                        )
                        .await?;
                }
                Err(e) => return Err(e),
            }
        }
    }
    match &answer {
        Queueing::Queued { .. } | Queueing::Next if !held => {
            let how = match hold {
                Hold::PodGate(_) => "created with its pods gated",
                _ => "created suspended",
            };
            let note = match &answer {
                Queueing::Queued { position, reason } => format!(
                    "bizrq {quota_name}: queued at position {position}: {reason}; {how}, \
                     admitted when it fits"
                ),
                _ => format!(
                    "bizrq {quota_name}: fits now; {how}, admitted by the controller's next \
                     queue round"
                ),
            };
            if !req.dry() && svc.events.enabled() {
                notify_queued(svc, req, &wref, &note);
            }
            let mut patch = hold::hold_patch(hold, &obj);
            if let Some(m) = &mark {
                add_mark(&mut patch, &obj, m);
            }
            Ok((Verdict::allow().warn([note]), Some(patch)))
        }
        // Marked while held already (an UPDATE that keeps it held): the
        // mark is written alone.
        Queueing::Queued { .. } if mark.is_some() => {
            let mut patch = json!([]);
            if let Some(m) = &mark {
                add_mark(&mut patch, &obj, m);
            }
            Ok((Verdict::allow(), Some(patch)))
        }
        _ => pass,
    }
}

/// Append to the JSONPatch `patch` (of `obj`) the op that writes the mark
/// `m` in its annotation, replacing whatever the object carried there.
fn add_mark(patch: &mut Value, obj: &Value, m: &queue::mark::Mark) {
    let Some(ops) = patch.as_array_mut() else {
        return;
    };
    let value = serde_json::to_string(m).expect("a mark serialises");
    let annotations_made = obj["metadata"]["annotations"].is_object()
        || ops.iter().any(|o| o["path"] == "/metadata/annotations");
    if annotations_made {
        let path = hold::pointer(&["metadata", "annotations", queue::mark::ANNOTATION]);
        ops.push(json!({"op": "add", "path": path, "value": value}));
    } else if obj["metadata"].is_object() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations",
            "value": {queue::mark::ANNOTATION: value}}));
    }
}

fn notify_queued(svc: &Service, req: &Request, wref: &str, note: &str) {
    let api_version = match req.kind.group.as_str() {
        "" => req.kind.version.clone(),
        g => format!("{g}/{}", req.kind.version),
    };
    if let Some(regarding) = events::workload_ref(&api_version, wref) {
        svc.events.emit(Notice {
            regarding,
            warning: false,
            reason: "Queued",
            action: "Queue",
            note: note.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base64(bytes: &[u8]) -> String {
        PATCH_BASE64.encode(bytes)
    }

    #[test]
    fn base64_is_rfc_4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        // The standard alphabet, not the URL-safe one.
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    /// A patched review is the plain review of the same verdict with
    /// `patch` (the operations' JSON in base64) and `patchType` added.
    #[test]
    fn a_patched_review_is_the_review_with_its_patch_in_base64() {
        let ops = json!([{"op": "add", "path": "/spec/suspend", "value": true}]);
        let verdict = || Verdict {
            warnings: vec!["queued".into()],
            ..Verdict::allow()
        };
        let patched: Value =
            serde_json::from_slice(&patched_review_json("u-1", verdict(), &ops)).unwrap();
        let mut plain: Value = serde_json::from_slice(&review_json("u-1", verdict())).unwrap();
        plain["response"]["patch"] = json!(base64(&serde_json::to_vec(&ops).unwrap()));
        plain["response"]["patchType"] = json!("JSONPatch");
        assert_eq!(patched, plain);
        assert_eq!(patched["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(patched["kind"], "AdmissionReview");
        assert_eq!(patched["response"]["uid"], "u-1");
        assert_eq!(patched["response"]["allowed"], true);
        assert_eq!(patched["response"]["warnings"], json!(["queued"]));
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(patched["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&decoded).unwrap(), ops);
    }
}
