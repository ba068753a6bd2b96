//! Full resync through the controller's own code (prints figures; not a
//! timed test):
//!
//!   cargo bench -p bizrq --bench controller                 # 10k quotas, 100k workloads, 500k pods
//!   cargo test  -p bizrq --bench controller -- --smoke      # small, for CI
//!
//! The controller's view (`bizrq::cluster::view::View`) is filled as the
//! watches would fill it — 100,000 Deployments read by their adapter, their
//! ReplicaSets, 500,000 pods resolved up their owners, one in ten deleted
//! inside the window — and then every one of 10,001 quotas is reconciled as
//! a worker does it, minus the API call: the view's snapshot of the quota,
//! `quota::reconcile` (ledger merge with reservations, cash accrual from
//! pod runs, derived usage), carve-out repair, and settling paid runs.
//! Reports the time of each phase and the process's peak resident memory.

use bizrq::cluster::view::View;
use quota::cash::QosMultipliers;
use quota::object::{Charge, Quota, QuotaSpec};
use quota::pods::{Owner, PodFacts};
use quota::quantity::Quantity;
use quota::reconcile::{reconcile, RESERVATION_TTL_MS};
use quota::workload::adapter_for_kind;
use quota::{KeyConfig, ResourceList};
use std::collections::BTreeMap;
use std::time::Instant;

const T0: i64 = 1_800_000_000_000;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn list(pairs: &[(&str, i64)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
        .collect()
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (n_depts, teams_per_dept, per_team, pods_per) = if smoke {
        (10, 10, 10, 5)
    } else {
        (100, 99, 10, 5)
    };
    println!(
        "controller full-resync benchmark ({} build{})",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        if smoke { ", smoke" } else { "" }
    );
    let cfg = KeyConfig::default();
    let hard = |gpus: i64| {
        list(&[
            ("requests.nvidia.com/gpu", gpus),
            ("requests.cpu", gpus * 8),
            ("cash/requests.nvidia.com/gpu", gpus * 1000),
        ])
    };
    // The tree: root, departments, teams; statuses as the last resync left them.
    let mut quotas: Vec<Quota> = Vec::new();
    let mut root = Quota::new(
        "root",
        QuotaSpec {
            parent: String::new(),
            hard: hard(1_000_000),
            max: ResourceList::new(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    );
    root.status.last_reconcile_time = Some(quota::time::format_rfc3339(T0));
    quotas.push(root);
    let mut kids: BTreeMap<String, BTreeMap<String, ResourceList>> = BTreeMap::new();
    for d in 0..n_depts {
        let dn = format!("dept-{d}");
        let mut q = Quota::new(
            &dn,
            QuotaSpec {
                parent: "root".into(),
                hard: hard(10_000),
                max: ResourceList::new(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        q.status.last_reconcile_time = Some(quota::time::format_rfc3339(T0));
        kids.entry("root".into())
            .or_default()
            .insert(dn.clone(), q.spec.hard.clone());
        quotas.push(q);
        for t in 0..teams_per_dept {
            let tn = format!("team-{d}-{t}");
            let mut q = Quota::new(
                &tn,
                QuotaSpec {
                    parent: dn.clone(),
                    hard: hard(100),
                    max: ResourceList::new(),
                    budgets: Default::default(),
                    queueing: Default::default(),
                    fair_sharing: Default::default(),
                    idle: None,
                },
            );
            q.status.last_reconcile_time = Some(quota::time::format_rfc3339(T0));
            kids.entry(dn.clone())
                .or_default()
                .insert(tn.clone(), q.spec.hard.clone());
            quotas.push(q);
        }
    }

    // Ingest, as the watches deliver it.
    let started = Instant::now();
    let mut view = View::new(cfg.clone());
    let deploy = adapter_for_kind("apps", "Deployment").unwrap();
    let rs = adapter_for_kind("apps", "ReplicaSet").unwrap();
    let spec: quota::usage::PodSpec = serde_json::from_str(
        r#"{"containers":[{"name":"t","resources":{"requests":{"cpu":"8","nvidia.com/gpu":"1"},"limits":{"cpu":"8","nvidia.com/gpu":"1"}}}]}"#,
    )
    .unwrap();
    let mut n_workloads = 0;
    let mut n_pods = 0;
    for d in 0..n_depts {
        for t in 0..teams_per_dept {
            let team = format!("team-{d}-{t}");
            let ns = format!("ns-{d}-{t}");
            for w in 0..per_team {
                let name = format!("w{w}");
                let json = format!(
                    r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"biz.group.resource.quota":"{team}","biz.group.resource.quota/gpu-type":"A100"}}}},
                       "spec":{{"replicas":{pods_per},"template":{{"spec":{{"containers":[{{"name":"t","resources":{{"requests":{{"cpu":"8","nvidia.com/gpu":"1"}},"limits":{{"cpu":"8","nvidia.com/gpu":"1"}}}}}}]}}}}}}}}"#
                );
                view.apply_workload(deploy, deploy.read(&json, &cfg).unwrap(), Some(T0), T0);
                let rs_json = format!(
                    r#"{{"metadata":{{"name":"{name}-1","namespace":"{ns}","ownerReferences":[{{"apiVersion":"apps/v1","kind":"Deployment","name":"{name}","controller":true}}]}},"spec":{{"replicas":{pods_per},"template":{{"spec":{{"containers":[{{"name":"t"}}]}}}}}}}}"#
                );
                view.apply_workload(rs, rs.read(&rs_json, &cfg).unwrap(), Some(T0), T0);
                n_workloads += 1;
                for p in 0..pods_per {
                    let facts = PodFacts {
                        uid: format!("{ns}-{name}-{p}"),
                        namespace: ns.clone(),
                        name: format!("{name}-1-{p}"),
                        owner: Some(Owner {
                            api_version: "apps/v1".into(),
                            kind: "ReplicaSet".into(),
                            name: format!("{name}-1"),
                        }),
                        // Each pod arrives parsed on its own, as from a watch.
                        spec: std::sync::Arc::new(spec.clone()),
                        scheduled_ms: Some(T0 - 3_600_000),
                        finished_ms: None,
                        priority: 0,
                        unschedulable: false,
                    };
                    view.apply_pod(facts, BTreeMap::new(), 0, false, T0);
                    n_pods += 1;
                }
                if n_workloads % 1000 == 0 {
                    // The controller persists run changes every few seconds.
                    let _ = view.take_dirty_runs();
                }
            }
        }
    }
    // One pod in ten is deleted half-way through the window.
    let mut deleted = 0;
    for d in 0..n_depts {
        for t in 0..teams_per_dept {
            for w in 0..per_team {
                if (d + t + w) % 2 == 0 {
                    view.delete_pod(&format!("ns-{d}-{t}-w{w}-0"), T0 + 1_800_000);
                    deleted += 1;
                }
            }
        }
    }
    let _ = view.take_dirty_runs();
    let ingest = started.elapsed();
    let ingest_rss = peak_rss_mib();
    println!(
        "  ingested {} quotas, {n_workloads} workloads (+ as many ReplicaSets), {n_pods} pods ({deleted} deleted in the window): {:.0} ms",
        quotas.len(),
        ingest.as_secs_f64() * 1e3
    );

    // Full resync: every quota, as a worker reconciles it.
    let now = T0 + 3_600_000;
    let prices = QosMultipliers::default();
    let started = Instant::now();
    let mut written = 0;
    let mut card_hours = Quantity::ZERO;
    for q in &mut quotas {
        let name = q.name().to_string();
        let snap = view.snapshot(&name, &q.status);
        // A third of the charges were admitted moments ago at another size.
        for (i, (wref, obs)) in snap.observed.iter().enumerate() {
            let mut sets = obs.pod_sets.clone();
            if i % 3 == 0 {
                sets[0].count += 1;
            }
            q.status.workloads.insert(
                wref.clone(),
                Charge {
                    pod_sets: sets,
                    hpa: None,
                    since: quota::time::format_rfc3339(T0),
                    uid: String::new(),
                    admitted: (i % 3 == 0)
                        .then(|| quota::time::format_rfc3339(now - RESERVATION_TTL_MS / 2)),
                },
            );
        }
        let intervals = snap.intervals();
        let out = reconcile(
            q,
            snap.observed.clone(),
            &intervals,
            now,
            RESERVATION_TTL_MS,
            &prices,
        );
        quota::tree::repair_carves(q, kids.get(&name).unwrap_or(&BTreeMap::new()), now);
        written += out.changed as usize;
        view.settle(&name, now, Some(&snap.uids));
        if name.starts_with("team-") {
            card_hours = card_hours.saturating_add(quota::resources::get(
                &q.status.self_used,
                "cash/requests.nvidia.com/gpu",
            ));
        }
    }
    let resync = started.elapsed();
    println!(
        "  full resync of {} quotas: {:.0} ms ({written} changed; {card_hours} card-hours accrued across teams)",
        quotas.len(),
        resync.as_secs_f64() * 1e3
    );
    println!(
        "  peak RSS: {:.0} MiB ({ingest_rss:.0} MiB after ingest, of which quota statuses with their charges are part)",
        peak_rss_mib()
    );
    // 1 h each; those deleted half-way, ½ h.
    let expected = (n_pods as i128 - deleted as i128) * quota::quantity::NANO
        + deleted as i128 * quota::quantity::NANO / 2;
    assert_eq!(
        card_hours.nanos(),
        expected,
        "every pod's hour (half for those deleted half-way), exactly"
    );
}
