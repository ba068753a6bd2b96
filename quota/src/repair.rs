//! Repair of a status that holds strings no identifier may hold
//! (`crate::text`), stored by a version that did not refuse them at
//! admission: a username, a review uid, a workload name or an extra
//! resource name with NUL or another control character. On PostgreSQL one
//! such string failed every later write of the quota that carried it.
//!
//! What is repaired, and how:
//! - a charge, queue entry, reservation, reclaim mark or refund under a
//!   workload reference that is hostile is dropped: no Kubernetes object
//!   has such a name, so nothing runs under it;
//! - in a charge or queue entry that stays, a hostile resource key is
//!   dropped from its pod sets (no quota's hard holds such a key, so it
//!   counted against nothing) and a hostile uid, pod-set name, HPA name or
//!   submitter has each hostile character replaced by U+FFFD;
//! - `status.users`: entries of dropped charges go, hostile usernames are
//!   scrubbed (U+FFFD) so the ledger still says who asked;
//! - then `used` and `selfUsed` are computed again (`QuotaStatus::refresh`).

use crate::object::{Charge, QuotaSpec, QuotaStatus};
use crate::resources::ResourceList;
use crate::text::{hostile_char, scrub};
use crate::workload::PodSet;

/// Repairs `status` in place; returns what was changed, one line each, for
/// the person running the repair (empty: the status was clean and is left
/// exactly as it was).
pub fn repair(status: &mut QuotaStatus, spec: &QuotaSpec) -> Vec<String> {
    let mut done = Vec::new();
    let hostile = |s: &str| hostile_char(s).is_some();
    let shown = |s: &str| s.escape_debug().to_string();

    let mut dropped = Vec::new();
    let mut cleaned = Vec::new();
    for (wref, charge) in status.workloads.iter() {
        if hostile(wref) {
            dropped.push(wref.clone());
        } else if let Some(clean) = clean_charge(charge) {
            cleaned.push((wref.clone(), clean));
        }
    }
    for wref in dropped {
        status.workloads.remove(&wref);
        done.push(format!("dropped the charge of {}", shown(&wref)));
    }
    for (wref, charge) in cleaned {
        status.workloads.insert(wref.clone(), charge);
        done.push(format!("scrubbed the charge of {wref}"));
    }

    let before = status.queue.len();
    status.queue.retain(|e| !hostile(&e.work.workload_ref));
    if status.queue.len() != before {
        done.push(format!(
            "dropped {} queue entries",
            before - status.queue.len()
        ));
    }
    for e in &mut status.queue {
        let w = &mut e.work;
        let mut sets = w.pod_sets.to_vec();
        let mut changed = clean_pod_sets(&mut sets);
        if changed {
            w.pod_sets = sets.into();
        }
        changed |= scrub_in_place(&mut w.uid);
        if let Some(by) = &mut w.submitted_by {
            changed |= scrub_in_place(by);
        }
        if changed {
            done.push(format!("scrubbed the queue entry of {}", w.workload_ref));
        }
    }

    for (what, n) in [
        ("reclaim marks", drop_hostile_keys(&mut status.reclaim)),
        ("refunds", drop_hostile_keys(&mut status.refunds)),
        ("users", drop_hostile_keys(&mut status.users)),
    ] {
        if n > 0 {
            done.push(format!("dropped {n} {what}"));
        }
    }
    let mut reservations = 0;
    for held in status.reservations.values_mut() {
        reservations += drop_hostile_keys(held);
    }
    if reservations > 0 {
        done.push(format!("dropped {reservations} reservations"));
    }
    for (wref, user) in status.users.iter_mut() {
        if scrub_in_place(user) {
            done.push(format!("scrubbed the username of {wref}"));
        }
    }
    if hostile_keys(&status.used) || hostile_keys(&status.self_used) || !done.is_empty() {
        status.refresh(spec);
        if done.is_empty() {
            done.push("computed used and selfUsed again".to_string());
        }
    }
    done
}

fn hostile_keys(list: &ResourceList) -> bool {
    list.keys().any(|k| hostile_char(k).is_some())
}

fn drop_hostile_keys<V>(map: &mut std::collections::BTreeMap<String, V>) -> usize {
    let before = map.len();
    map.retain(|k, _| hostile_char(k).is_none());
    before - map.len()
}

fn scrub_in_place(s: &mut String) -> bool {
    if hostile_char(s).is_none() {
        return false;
    }
    *s = scrub(s).into_owned();
    true
}

/// Hostile keys out of each pod set, hostile names scrubbed.
fn clean_pod_sets(sets: &mut [PodSet]) -> bool {
    let mut changed = false;
    for set in sets {
        let before = set.per_pod.len();
        set.per_pod.retain(|k, _| hostile_char(k).is_none());
        changed |= set.per_pod.len() != before;
        changed |= scrub_in_place(&mut set.name);
    }
    changed
}

/// The charge with its hostile strings repaired, or None when it has none.
fn clean_charge(charge: &Charge) -> Option<Charge> {
    let mut c = charge.clone();
    let mut changed = clean_pod_sets(&mut c.pod_sets);
    changed |= scrub_in_place(&mut c.uid);
    if let Some(h) = &mut c.hpa {
        changed |= scrub_in_place(&mut h.name);
    }
    changed.then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;

    fn set(keys: &[(&str, i64)]) -> PodSet {
        PodSet {
            name: "main".into(),
            count: 1,
            per_pod: keys
                .iter()
                .map(|(k, n)| (k.to_string(), Quantity::from_units(*n)))
                .collect(),
            qos: None,
        }
    }

    fn charge(keys: &[(&str, i64)], uid: &str) -> Charge {
        Charge {
            pod_sets: vec![set(keys)],
            hpa: None,
            since: "2026-11-29T00:00:00Z".into(),
            uid: uid.into(),
            admitted: None,
        }
    }

    fn spec() -> QuotaSpec {
        serde_json::from_value(serde_json::json!({"hard": {"requests.cpu": "10", "pods": "10"}}))
            .unwrap()
    }

    #[test]
    fn a_poisoned_status_is_repaired_and_a_clean_one_left_alone() {
        let spec = spec();
        let mut clean = QuotaStatus::default();
        clean.workloads.insert(
            "apps/Deployment/ml/web".into(),
            charge(&[("requests.cpu", 2), ("pods", 1)], "u1"),
        );
        clean
            .users
            .insert("apps/Deployment/ml/web".into(), "alice".into());
        clean.refresh(&spec);
        let before = clean.clone();
        assert!(repair(&mut clean, &spec).is_empty());
        assert_eq!(clean, before);

        let mut s = before.clone();
        s.workloads.insert(
            "apps/Deployment/ml/we\0b".into(),
            charge(&[("requests.cpu", 3), ("pods", 1)], "u2"),
        );
        s.users
            .insert("apps/Deployment/ml/we\0b".into(), "bob".into());
        s.workloads.insert(
            "apps/Deployment/ml/job".into(),
            charge(
                &[
                    ("requests.cpu", 1),
                    ("pods", 1),
                    ("requests.example.com/f\0o", 1),
                ],
                "r\0",
            ),
        );
        s.users
            .insert("apps/Deployment/ml/job".into(), "mal\0lory".into());
        s.refresh(&spec);
        assert_eq!(s.used["requests.cpu"], Quantity::from_units(6));

        let done = repair(&mut s, &spec);
        assert_eq!(
            done,
            [
                "dropped the charge of apps/Deployment/ml/we\\0b",
                "scrubbed the charge of apps/Deployment/ml/job",
                "dropped 1 users",
                "scrubbed the username of apps/Deployment/ml/job",
            ]
        );
        assert_eq!(
            s.used["requests.cpu"],
            Quantity::from_units(3),
            "the dropped charge is released"
        );
        assert_eq!(s.used["pods"], Quantity::from_units(2));
        let job = &s.workloads["apps/Deployment/ml/job"];
        assert_eq!(job.uid, "r\u{FFFD}");
        assert!(!job.pod_sets[0].per_pod.keys().any(|k| k.contains('\0')));
        assert_eq!(s.users["apps/Deployment/ml/job"], "mal\u{FFFD}lory");
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("\\u0000"), "{json}");
        assert!(
            repair(&mut s, &spec).is_empty(),
            "a repaired status is clean"
        );
    }
}
