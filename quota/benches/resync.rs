//! Full-resync benchmark of the controller's pure decision (prints figures;
//! not a timed test):
//!
//!   cargo bench -p quota --bench resync                  # 10k quotas, 100k workloads, 500k pods
//!   cargo test  -p quota --bench resync -- --smoke       # small, for CI
//!
//! From an in-memory snapshot — quotas with their current ledgers, the
//! workloads the controller observes (already turned into pod sets by their
//! adapters, as the controller keeps them) and every pod's run — it groups
//! workloads and pods by quota and reconciles every quota: ledger merge with
//! reservations, cash accrual from pod runs, derived usage. Reports time and
//! the process's peak resident memory.

use quota::cash::{Interval, QosMultipliers};
use quota::object::{Charge, Quota, QuotaSpec};
use quota::quantity::Quantity;
use quota::reconcile::{reconcile, Observed, RESERVATION_TTL_MS};
use quota::workload::PodSet;
use quota::ResourceList;
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
    let (n_quotas, n_workloads, pods_per) = if smoke {
        (300, 3_000, 5)
    } else {
        (10_000, 100_000, 5)
    };
    println!(
        "quota full-resync benchmark ({} build{})",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        if smoke { ", smoke" } else { "" }
    );

    // Snapshot: root → departments → teams.
    let hard = |n: i64| {
        let mut h = list(&[
            ("requests.nvidia.com/gpu", n),
            ("requests.nvidia.com/gpu.A100", n),
            ("limits.cpu", n * 8),
            ("pods", n * 10),
        ]);
        h.insert(
            "cash/requests.nvidia.com/gpu".into(),
            Quantity::from_units(n * 1000),
        );
        h
    };
    let depts = ((n_quotas as f64).sqrt() as usize).max(1);
    let mut quotas = vec![Quota::new(
        "root",
        QuotaSpec {
            parent: String::new(),
            hard: hard(1_000_000),
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    )];
    let mut teams = Vec::new();
    'outer: for d in 0..depts {
        quotas.push(Quota::new(
            &format!("dept-{d}"),
            QuotaSpec {
                parent: "root".into(),
                hard: hard(10_000),
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        ));
        for t in 0..depts {
            if quotas.len() >= n_quotas {
                break 'outer;
            }
            teams.push(quotas.len());
            quotas.push(Quota::new(
                &format!("team-{d}-{t}"),
                QuotaSpec {
                    parent: format!("dept-{d}"),
                    hard: hard(100),
                    max: Default::default(),
                    budgets: Default::default(),
                    queueing: Default::default(),
                    fair_sharing: Default::default(),
                    idle: None,
                },
            ));
        }
    }
    for q in &mut quotas {
        q.status.last_reconcile_time = Some(quota::time::format_rfc3339(T0));
    }

    // Workloads: each with one pod set of `pods_per` pods; a third already
    // charged as observed, a third admitted moments ago at a different size
    // (the cache lags), a third new to the ledger.
    let per_pod = list(&[
        ("requests.nvidia.com/gpu", 1),
        ("requests.nvidia.com/gpu.A100", 1),
        ("limits.nvidia.com/gpu", 1),
        ("requests.cpu", 4),
        ("cpu", 4),
        ("limits.cpu", 4),
        ("limits.cpu.A4", 4),
        ("pods", 1),
    ]);
    let now = T0 + 300_000;
    let mut observed: Vec<(usize, String, Observed)> = Vec::with_capacity(n_workloads);
    for w in 0..n_workloads {
        let qi = teams[w % teams.len()];
        let wref = format!("apps/Deployment/ns-{}/w-{w}", w % 97);
        let sets = vec![PodSet {
            name: "main".into(),
            count: pods_per as i64,
            per_pod: per_pod.clone(),
            qos: None,
        }];
        match w % 3 {
            0 => {
                let c = Charge {
                    pod_sets: sets.clone(),
                    hpa: None,
                    since: quota::time::format_rfc3339(T0 - 3_600_000),
                    uid: String::new(),
                    admitted: None,
                };
                quotas[qi].status.workloads.insert(wref.clone(), c);
            }
            1 => {
                let mut bigger = sets.clone();
                bigger[0].count += 1;
                let c = Charge {
                    pod_sets: bigger,
                    hpa: None,
                    since: quota::time::format_rfc3339(now - 1000),
                    uid: "u".into(),
                    admitted: Some(quota::time::format_rfc3339(now - 1000)),
                };
                quotas[qi].status.workloads.insert(wref.clone(), c);
            }
            _ => {}
        }
        observed.push((
            qi,
            wref,
            Observed {
                pod_sets: sets,
                hpa: None,
            },
        ));
    }
    // Pods: each holds its pod set's usage from its start; one in ten ended
    // (deleted) within the window.
    struct Run {
        workload: u32,
        start: i64,
        end: Option<i64>,
    }
    let mut runs = Vec::with_capacity(n_workloads * pods_per);
    for w in 0..n_workloads {
        for p in 0..pods_per {
            let start = T0 - 60_000 * ((w + p) % 240) as i64;
            let end = ((w + p) % 10 == 0).then(|| T0 + 1_000 * ((w * 7 + p) % 300) as i64);
            runs.push(Run {
                workload: w as u32,
                start,
                end,
            });
        }
    }
    for q in &mut quotas {
        let spec = q.spec.clone();
        q.status.refresh(&spec);
    }
    let rss_snapshot = peak_rss_mib();
    println!(
        "snapshot: {} quotas, {} workloads, {} pods; peak RSS so far {:.0} MiB",
        quotas.len(),
        observed.len(),
        runs.len(),
        rss_snapshot
    );

    // The resync: group by quota, then reconcile each.
    let started = Instant::now();
    let usage_of: Vec<&ResourceList> = observed
        .iter()
        .map(|(_, _, o)| &o.pod_sets[0].per_pod)
        .collect();
    let mut intervals: Vec<Vec<Interval>> = (0..quotas.len()).map(|_| Vec::new()).collect();
    for r in &runs {
        let (qi, _, _) = &observed[r.workload as usize];
        intervals[*qi].push(Interval {
            usage: usage_of[r.workload as usize],
            qos: None,
            start_ms: r.start,
            end_ms: r.end,
        });
    }
    let mut by_quota: Vec<BTreeMap<String, Observed>> =
        (0..quotas.len()).map(|_| BTreeMap::new()).collect();
    for (qi, wref, o) in observed.iter() {
        by_quota[*qi].insert(wref.clone(), o.clone());
    }
    let grouped = started.elapsed();
    let prices = QosMultipliers::default();
    let mut changed = 0;
    let mut reserved = 0;
    for (qi, q) in quotas.iter_mut().enumerate() {
        let out = reconcile(
            q,
            std::mem::take(&mut by_quota[qi]),
            &intervals[qi],
            now,
            RESERVATION_TTL_MS,
            &prices,
        );
        changed += out.changed as usize;
        reserved += out.reserved.len();
    }
    let elapsed = started.elapsed();
    println!(
        "full resync: {:.0} ms ({:.0} ms grouping, {:.0} ms reconciling); {changed} quotas changed, {reserved} reservations kept; peak RSS {:.0} MiB",
        elapsed.as_secs_f64() * 1e3,
        grouped.as_secs_f64() * 1e3,
        (elapsed - grouped).as_secs_f64() * 1e3,
        peak_rss_mib()
    );
    // Sanity: every team holds what its workloads and reservations say.
    let used: i128 = teams
        .iter()
        .map(|t| quota::resources::get(&quotas[*t].status.used, "requests.nvidia.com/gpu").nanos())
        .sum();
    // A third were admitted one pod larger moments ago: those reservations hold.
    let bigger = (0..n_workloads).filter(|w| w % 3 == 1).count() as i128;
    let expect = (n_workloads as i128 * pods_per as i128 + bigger) * quota::quantity::NANO;
    assert_eq!(used, expect);
}
