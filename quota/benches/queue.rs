//! Queue rules at a busy quota's scale (prints figures; not a timed test):
//!
//!   cargo bench -p quota --bench queue
//!   cargo test  -p quota --bench queue -- --smoke     # small, for CI
//!
//! One round of `next_admissions` and one `estimate` over a queue of N
//! jobs of mixed sizes and priorities against a nearly full quota with
//! 500 running jobs that declare their ends — what the controller does per
//! quota and event.

use quota::object::queue::Queued;
use quota::object::queueing::{Order, QueuePolicy};
use quota::object::{Charge, Quota, QuotaSpec};
use quota::queue::{estimate, next_admissions, Pool, Running};
use quota::workload::PodSet;
use quota::{Quantity, ResourceList};
use std::time::Instant;

const GPU: &str = "requests.nvidia.com/gpu";
const T0: i64 = 1_800_000_000_000;

fn gpus(n: i64) -> ResourceList {
    [(GPU.to_string(), Quantity::from_units(n))].into()
}

fn sets(n: i64) -> Vec<PodSet> {
    vec![PodSet {
        name: "main".into(),
        count: n,
        per_pod: gpus(1),
        qos: None,
    }]
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let sizes: &[usize] = if smoke { &[100] } else { &[100, 1_000, 5_000] };
    let mut q = Quota::new(
        "big",
        QuotaSpec {
            budgets: Default::default(),
            parent: String::new(),
            hard: gpus(1_000),
            max: ResourceList::new(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    );
    let mut running = Vec::new();
    for i in 0..500i64 {
        let w = format!("batch/Job/ns/run-{i}");
        let c = Charge {
            pod_sets: sets(1 + i % 3),
            hpa: None,
            since: quota::time::format_rfc3339(T0),
            uid: String::new(),
            admitted: None,
        };
        quota::admission::charge(&mut q, &w, c).unwrap();
        running.push(Running {
            workload_ref: w,
            usage: gpus(1 + i % 3),
            ends_ms: Some(T0 + (1 + i % 97) * 60_000),
        });
    }
    let pool = Pool::new(&q, &ResourceList::new());
    for &n in sizes {
        let queue: Vec<Queued> = (0..n as i64)
            .map(|i| Queued {
                workload_ref: format!("batch/Job/ns/q-{i}"),
                uid: i.to_string(),
                priority: [0, 0, 100, 1000][(i % 4) as usize],
                priority_classes: Vec::new(),
                submitted_ms: T0 + i * 1000,
                pod_sets: sets([1, 2, 4, 8][(i % 4) as usize]).into(),
                run_ms: Some((10 + i % 50) * 60_000),
                submitted_by: None,
                preempted: false,
            })
            .collect();
        for (name, policy) in [
            ("strict", QueuePolicy::queue()),
            (
                "best-effort",
                QueuePolicy {
                    order: Order::BestEffortFifo { aging_seconds: 600 },
                    ..QueuePolicy::queue()
                },
            ),
        ] {
            let t = Instant::now();
            let d = next_admissions(&queue, &pool, &[], &policy, T0 + n as i64 * 1000);
            let round = t.elapsed();
            let t = Instant::now();
            let e = estimate(&queue, &pool, &running, &policy, T0 + n as i64 * 1000);
            let est = t.elapsed();
            println!(
                "{n:>5} queued, {name:<11}: round {round:>10.2?} ({} decisions), estimate {est:>10.2?} ({} starts)",
                d.len(),
                e.len()
            );
        }
    }
}
