//! An AdmissionReview body as the webhook reads it: `review::decode`, the
//! request's target, then each endpoint's reading of the object through
//! the adapter of its kind (workloads, scale, HPA, quotas). What an adapter
//! admits is charged and released on a quota: usage never goes negative
//! and a release gives back exactly what the charge took. A review the
//! string check passes (`Request::hostile_field`) stores no string that
//! holds a character no identifier may hold (`quota::text`): not its uid,
//! username, workload reference, pod-set names nor resource keys; and the
//! check's message holds none either (it is logged and shown).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quota::admission::{self, Step};
use quota::keys::KeyConfig;
use quota::object::{Charge, Quota, QuotaSpec};
use quota::quantity::{Quantity, MAX_NANOS};
use quota::text::hostile_char;
use quota::workload::{adapter_for_kind, adapter_for_resource, read_hpa, read_scale_replicas};
use serde::Deserialize;

/// As the webhook reads a quota under review.
#[derive(Deserialize)]
struct QuotaObject {
    #[serde(default)]
    metadata: quota::object::ObjectMeta,
    #[serde(default)]
    spec: QuotaSpec,
}

fuzz_target!(|data: &[u8]| {
    let Ok(req) = quota::review::decode(data) else {
        return;
    };
    let cfg = KeyConfig::default();
    let hostile = req.hostile_field();
    if let Some(h) = &hostile {
        assert!(hostile_char(&h.field[..]).is_none(), "{h:?}");
        for m in [h.refusal(), h.let_through()] {
            assert_eq!(hostile_char(&m), None, "{m:?}");
        }
        assert!(quota::text::is_hostile(h.found), "{h:?}");
    }
    if let Some(h) = req.hostile_target() {
        assert!(hostile.is_some(), "the target's check is a part: {h:?}");
    }
    let clean = hostile.is_none();
    if clean {
        for s in [&req.uid, &req.user_info.username] {
            assert_eq!(hostile_char(s), None, "{s:?}");
        }
    }
    let (ns, name) = req.target();
    let object = req.object.as_deref().map(|r| r.get());
    let old_object = req.old_object.as_deref().map(|r| r.get());

    // /validate/workloads
    if let Some(adapter) = adapter_for_kind(&req.kind.group, &req.kind.kind) {
        if let Ok(wref) = adapter.checked_ref(&ns, &name) {
            // A reference reads back as the namespace and name that made it.
            let back = quota::workload::WorkloadRef::parse(&wref).map(|r| (r.namespace, r.name));
            assert_eq!(back, Some((ns.as_str(), name.as_str())), "{wref}");
            let new = object.and_then(|o| adapter.read(o, &cfg).ok());
            let old = old_object.and_then(|o| adapter.read_binding(o).ok());
            if clean {
                assert_eq!(hostile_char(&wref), None, "{wref:?}");
                for set in new.iter().flat_map(|w| &w.pod_sets) {
                    assert_eq!(hostile_char(&set.name), None, "{set:?}");
                    for key in set.per_pod.keys() {
                        assert_eq!(hostile_char(key), None, "{key:?}");
                    }
                }
            }
            for step in admission::plan(old.as_ref(), new.as_ref()) {
                match step {
                    Step::Charge { workload, .. } => charge_and_release(&wref, workload),
                    Step::Check { usage, .. } => {
                        assert!(usage.values().all(|v| !v.is_negative()), "{usage:?}")
                    }
                    Step::Release { .. } => {}
                }
            }
        }
    }
    // /validate/scale
    if adapter_for_resource(&req.resource.group, &req.resource.resource).is_some() {
        if let Some(Ok(n)) = object.map(read_scale_replicas) {
            assert!((0..=quota::workload::MAX_REPLICAS).contains(&n), "{n}");
        }
    }
    // /validate/hpa
    for raw in [object, old_object].into_iter().flatten() {
        if let Ok(h) = read_hpa(raw) {
            assert!(h.max_replicas >= 0);
        }
    }
    // /validate/quotas
    if let Some(Ok(q)) = object.map(serde_json::from_str::<QuotaObject>) {
        let name = if q.metadata.name.is_empty() {
            name
        } else {
            q.metadata.name
        };
        if quota::tree::validate_spec(&name, &q.spec, &cfg).is_ok() {
            let all = q.spec.hard.values().chain(q.spec.max.values());
            assert!(all.into_iter().all(|v| !v.is_negative()));
        }
    }
});

/// Charges a workload into a quota with room for anything, then releases it.
fn charge_and_release(wref: &str, w: &quota::Workload) {
    let usage = w.usage();
    for (k, v) in &usage {
        assert!(!v.is_negative() && v.nanos() <= MAX_NANOS, "{k} = {v}");
    }
    let hard = usage
        .keys()
        .map(|k| (k.clone(), Quantity::from_nanos(MAX_NANOS)))
        .collect();
    let mut q = Quota::new(
        "q",
        QuotaSpec {
            parent: String::new(),
            hard,
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    );
    let before = q.status.used.clone();
    let charge = Charge {
        pod_sets: w.pod_sets.clone(),
        hpa: None,
        since: String::new(),
        uid: String::new(),
        admitted: None,
    };
    if admission::charge(&mut q, wref, charge).is_ok() {
        for (k, v) in &q.status.used {
            assert!(!v.is_negative(), "{k} = {v}");
        }
    }
    admission::release(&mut q, wref);
    assert_eq!(
        q.status.used, before,
        "a release gives back what the charge took"
    );
}
