//! Queued admission at scale (issue 15; prints figures, not a timed test):
//!
//!   cargo bench -p bizrq --bench queue                # 10,000 queued Jobs across 1,000 quotas
//!   cargo test  -p bizrq --bench queue -- --smoke     # 20 quotas, for CI
//!
//! What runs is the controller's own code, in process: a `Context` (the
//! one `bizrq serve` builds) over a `Service` on SQLite, its view filled
//! as the Job watch fills it, and a Kubernetes client whose API server
//! answers at once. Every quota holds 10 CPUs, all taken by one running
//! Job, and 10 queued Jobs of 1 to 3 CPUs (queued through the mutating
//! webhook's compare-and-swap, `Service::queue_workload`).
//!
//! For each quota in turn the running Job ends: its release is written
//! (the validating webhook's DELETE) — **room freed** — then the watch's
//! delete reaches the view and the quota is reconciled
//! (`Context::reconcile_quota`: usage from the view, then the queue's
//! round, the charge-and-dequeue compare-and-swap, estimates, the restated
//! queue), until the **unsuspend PATCH** of the first admitted Job leaves
//! the client. Reported: p50 / p99 / max of that time over all quotas, the
//! whole reconcile's, and the process's resident memory (VmRSS after the
//! queues are filled; VmHWM at the end).
//!
//! Left out, because they are the cluster's and not bizrq's: the watch
//! delivering the delete (kube-apiserver's latency), the API server's
//! write of the quota status (here a SQLite write on local disk), and the
//! PATCH's round trip. In a cluster each adds its own latency; the figure
//! is what bizrq adds on top.

use bizrq::cluster::controller::{Context, ControllerConfig};
use bizrq::cluster::events::Events;
use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use http::{Method, Request, Response};
use kube::api::{ApiResource, GroupVersionKind};
use kube::client::Body;
use quota::object::queue::Queued;
use quota::object::queueing::QueuePolicy;
use quota::object::QuotaSpec;
use quota::quantity::Quantity;
use quota::workload::{adapter_for_kind, PodSet};
use quota::KeyConfig;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T0: i64 = 1_800_000_000_000;
const CPU: &str = "requests.cpu";

fn status_kib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

fn mib(kib: f64) -> String {
    format!("{:.0} MiB", kib / 1024.0)
}

fn job_json(quota: &str, name: &str, cpus: i64, suspended: bool) -> String {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": suspended,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": cpus.to_string()}, "limits": {"cpu": cpus.to_string()}}}]}}}})
    .to_string()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (quotas, per) = if smoke {
        (20usize, 10usize)
    } else {
        (1_000, 10)
    };
    println!(
        "queue benchmark ({} build{}): {} queued Jobs across {quotas} quotas",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        if smoke { ", smoke" } else { "" },
        quotas * per
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(quotas, per));
}

async fn run(quotas: usize, per: usize) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bizrq.db").display());
    let store = SqlStore::connect(&url).await.unwrap();
    let service = Arc::new(
        Service::new(
            Arc::new(store),
            KeyConfig::default(),
            Default::default(),
            Arc::new(Metrics::default()),
        )
        .with_clock(Arc::new(|| T0 + 3_600_000)),
    );
    // The API server: answers every call at once; notes when each PATCH
    // (an unsuspend) arrives.
    let patched: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = patched.clone();
    let api = tower::service_fn(move |req: Request<Body>| {
        let seen = seen.clone();
        async move {
            if req.method() == Method::PATCH {
                let name = req
                    .uri()
                    .path()
                    .rsplit('/')
                    .next()
                    .unwrap_or("")
                    .to_string();
                seen.lock()
                    .unwrap()
                    .entry(name)
                    .or_insert_with(Instant::now);
            }
            let body = json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "x", "namespace": "ns"}});
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        }
    });
    let client = kube::Client::new(api, "default");
    let (ctx, _triggers) = Context::new(
        client,
        service.clone(),
        None,
        Events::default(),
        ControllerConfig::default(),
    );
    let adapter = adapter_for_kind("batch", "Job").unwrap();
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    let cfg = KeyConfig::default();
    let started = Instant::now();
    let mut sizes: Vec<Vec<i64>> = Vec::new();
    for i in 0..quotas {
        let name = format!("q{i:04}");
        let spec = QuotaSpec {
            parent: String::new(),
            hard: [(CPU.to_string(), Quantity::from_units(10))].into(),
            max: Default::default(),
            budgets: Default::default(),
            queueing: QueuePolicy::queue(),
            fair_sharing: Default::default(),
            idle: None,
        };
        service
            .create_quota(&name, spec, Persist::Here, "", false)
            .await
            .unwrap();
        let run = format!("{name}-run");
        let w = adapter
            .read(&job_json(&name, &run, 10, false), &cfg)
            .unwrap();
        service
            .charge(bizrq::service::ChargeRequest::new(
                &name,
                &format!("batch/Job/ns/{run}"),
                w.pod_sets.clone(),
                &format!("uid-{run}"),
            ))
            .await
            .unwrap();
        ctx.seed_for_bench(&[(adapter, ar.clone())], |v| {
            v.apply_workload(adapter, w, Some(T0), T0);
        });
        let mut s = Vec::new();
        for k in 0..per {
            let cpus = 1 + ((i + k) % 3) as i64;
            let job = format!("{name}-j{k:02}");
            let w = adapter
                .read(&job_json(&name, &job, cpus, true), &cfg)
                .unwrap();
            let work = Queued {
                workload_ref: format!("batch/Job/ns/{job}"),
                uid: format!("uid-{job}"),
                priority: 0,
                priority_classes: Vec::new(),
                submitted_ms: T0 + k as i64,
                pod_sets: vec![PodSet {
                    name: "main".into(),
                    count: 1,
                    per_pod: [(CPU.to_string(), Quantity::from_units(cpus))].into(),
                    qos: None,
                }]
                .into(),
                run_ms: Some(3_600_000),
                submitted_by: Some("bench".into()),
                preempted: false,
            };
            service
                .queue_workload(&name, work, true, false)
                .await
                .unwrap();
            ctx.seed_for_bench(&[(adapter, ar.clone())], |v| {
                v.apply_workload(adapter, w, Some(T0), T0);
            });
            s.push(cpus);
        }
        sizes.push(s);
    }
    let queued: usize = queued_total(&service, quotas).await;
    assert_eq!(queued, quotas * per, "every Job queued");
    println!(
        "  filled in {:.1} s; resident memory {} (VmRSS)",
        started.elapsed().as_secs_f64(),
        mib(status_kib("VmRSS:"))
    );

    let mut to_unsuspend: Vec<Duration> = Vec::new();
    let mut reconciles: Vec<Duration> = Vec::new();
    let mut admitted = 0usize;
    for i in 0..quotas {
        let name = format!("q{i:04}");
        let run = format!("{name}-run");
        service
            .release_workload(&name, &format!("batch/Job/ns/{run}"), false)
            .await
            .unwrap();
        let freed = Instant::now();
        ctx.seed_for_bench(&[(adapter, ar.clone())], |v| {
            v.delete_workload(adapter, "ns", &run, T0);
        });
        ctx.reconcile_quota(&name).await.unwrap();
        // The reconcile asks the scheduler for the round; run it here.
        ctx.queue_round(&name).await;
        let done = Instant::now();
        reconciles.push(done - freed);
        // The first in line is j00 (earliest since, priority 0).
        let first = format!("{name}-j00");
        let at = patched.lock().unwrap().get(&first).copied();
        match at {
            Some(t) => to_unsuspend.push(t - freed),
            None => panic!("{first} was not unsuspended"),
        }
        let q = service.get(&name).await.unwrap().quota;
        admitted += per - q.status.queue.len();
        let used = quota::resources::get(&q.status.used, CPU);
        assert!(used <= Quantity::from_units(10), "{name} over its hard");
    }
    to_unsuspend.sort();
    reconciles.sort();
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    println!(
        "  room freed -> first queued Job unsuspended: p50 {}, p99 {}, max {} ({} quotas, {admitted} Jobs admitted)",
        ms(pct(&to_unsuspend, 0.5)),
        ms(pct(&to_unsuspend, 0.99)),
        ms(*to_unsuspend.last().unwrap()),
        to_unsuspend.len()
    );
    println!(
        "  whole reconcile (usage, round, charges, estimates, restated queue): p50 {}, p99 {}",
        ms(pct(&reconciles, 0.5)),
        ms(pct(&reconciles, 0.99))
    );
    println!(
        "  resident memory now {} (VmRSS), peak {} (VmHWM)",
        mib(status_kib("VmRSS:")),
        mib(status_kib("VmHWM:"))
    );
}

/// Entries queued over all quotas, as stored.
async fn queued_total(service: &Service, quotas: usize) -> usize {
    let mut n = 0;
    for i in 0..quotas {
        n += service
            .get(&format!("q{i:04}"))
            .await
            .unwrap()
            .quota
            .status
            .queue
            .len();
    }
    n
}
