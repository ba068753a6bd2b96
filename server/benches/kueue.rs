//! Kueue's own scheduler benchmark, replayed on bizrq (prints figures; not
//! a timed test):
//!
//!   cargo bench -p bizrq --bench kueue                      # 5 cohorts, 15,000 Jobs
//!   cargo bench -p bizrq --bench kueue -- --cohorts 1       # 3,000 Jobs
//!   cargo test  -p bizrq --bench kueue -- --smoke           # 1 cohort, 300 Jobs (CI)
//!
//! Flags: `--cohorts N` (5), `--deadline SECS` (900), `--write-delay-ms MS`
//! (5), `--workers N` (the controller's, 5), `--order best-effort|strict`,
//! `--no-preemption`, `--no-pods`, `--delete-finished`, `--scale F` (the
//! share of each class's Jobs created; `--smoke` is 1 cohort at 0.1),
//! `--marks-off` (queues in the quota's status; by default queue marks
//! are on, their key in a Secret bizrq makes, as the shipped deployment
//! runs: docs/queueing.md §12), `--one-runtime` (bizrq served on the
//! bench's own runtime, beside its generator, kubelet and recorders, as
//! this bench ran until 2026-12-02; by default bizrq has a runtime of its
//! own, as its binary has).
//!
//! What Kueue runs (kubernetes-sigs/kueue, `test/performance/scheduler`,
//! configuration `baseline`): 5 cohorts × 6 ClusterQueues of nominal 20
//! CPUs and borrowing limit 100 (BestEffortFIFO, preemption within the
//! queue of lower priority, reclaim within the cohort); per queue three
//! generators side by side, each waiting its interval then creating one
//! workload, in turn: 350 small (1 CPU, 200 ms, priority 50, every
//! 100 ms), 100 medium (5 CPUs, 500 ms, 100, every 500 ms), 50 large (20
//! CPUs, 1 s, 200, every 1.2 s). A runner finishes each workload its run
//! time after it was admitted and leaves it there.
//!
//! The same on bizrq: each cohort a quota of hard 120 `requests.cpu`, its
//! six children hard 20 and max 120, `queueing` with best-effort order
//! that never ages (Kueue's BestEffortFIFO), preemption of lower priority
//! at once (`graceSeconds: 0`) and up to 1,000 entries from one submitter;
//! priorities from three PriorityClasses. The server runs in cluster mode
//! in this process exactly as the integration tests run it
//! (`tests/it/cluster.rs`): HTTPS webhooks and the controller under its
//! Lease, over the in-memory API server (`tests/it/fakeapi`), which sends
//! every matching write to the shipped mutating and validating webhook
//! configurations, keeps resourceVersions and serves watches, each write
//! taking `--write-delay-ms` as etcd's commit would. The API server runs
//! on threads of its own (`FakeApi::serve_on`), as kube-apiserver runs in
//! a process of its own: it shares the two CPUs with bizrq, never a
//! thread of bizrq's runtimes. Jobs are created
//! through the API as a tenant's kubectl would (not suspended: the
//! mutating webhook suspends what must wait), at Kueue's pace.
//!
//! The cluster's part is played by a job controller and a kubelet in this
//! process, at the same API boundary: when a Job is seen unsuspended they
//! create its pod, mark it Running and the Job active; its run time after
//! the Job was seen admitted, the pod Succeeded and the Job Complete, as
//! Kubernetes stores them (times in whole seconds); a Job suspended again
//! (preempted) has its pod deleted and runs anew when unsuspended.
//! Finished Jobs are left in place, as Kueue's runner leaves them
//! (`--delete-finished` deletes each once complete).
//!
//! Measured as Kueue measures: time to admission from the create to the
//! (last) admission; ClusterQueue usage as the time-weighted sum of the
//! children's `status.used` over the run, divided by their nominal (hard)
//! sum; wall time until every Job finished (Kueue's runner stops then).
//! Also: wall time until every Job was admitted, admissions per second
//! from queues, the latency of each call the API server made to the
//! mutating webhook, the largest stored quota object, and invariants
//! checked on every quota version the watch shows, each on a consistent
//! cut (the watch shows versions in the API server's order; a relist is
//! applied whole): no child above its max, no parent above its hard, no
//! child borrowing beyond the loan its parent records while every loan is
//! backed, how often and how far a cohort (the parent's children
//! together) was charged above its hard with every child within its loan
//! (the guarantee: a lender's use within its hard beside what it lent),
//! and no cohort running more than its hard by the Jobs' own truth.

// The shipped binary's allocator (`main.rs`): the server in this process
// allocates as it does in production (the system allocator was half of
// the samples in a profile of the full run).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/it/common.rs"]
mod common;

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/fakeapi/mod.rs"]
mod fakeapi;

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/cluster.rs"]
mod cluster;

use cluster::Cluster;
use fakeapi::FakeApi;
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CPU: &str = "requests.cpu";
const QUOTA_LABEL: &str = "biz.group.resource.quota";
const CLASS_LABEL: &str = "kbench.bizrq.io/class";
const TENANT: &str = "kueue-runner";
const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";
const KUBELET: &str = "system:node:node-1";
/// The child's hard and max, the parent's hard (Kueue: nominal 20,
/// borrowing limit 100, a cohort of six).
const NOMINAL: i64 = 20;
const MAX: i64 = 120;
const CHILDREN: usize = 6;

/// One of Kueue's workload classes (`configs/baseline/generator.yaml`).
struct Class {
    name: &'static str,
    cpu: i64,
    run_ms: u64,
    priority: i64,
    count: usize,
    interval_ms: u64,
}

static CLASSES: [Class; 3] = [
    Class {
        name: "small",
        cpu: 1,
        run_ms: 200,
        priority: 50,
        count: 350,
        interval_ms: 100,
    },
    Class {
        name: "medium",
        cpu: 5,
        run_ms: 500,
        priority: 100,
        count: 100,
        interval_ms: 500,
    },
    Class {
        name: "large",
        cpu: 20,
        run_ms: 1000,
        priority: 200,
        count: 50,
        interval_ms: 1200,
    },
];

/// Kueue's published baseline (`configs/baseline/rangespec.yaml`, the
/// average of 5 runs; in brackets where SchedulingEquivalenceHashing
/// changed it since).
const KUEUE_WALL: &str = "351 s";
const KUEUE_USAGE: &str = "58.7 % (55.9)";
const KUEUE_TTA: [&str; 3] = ["215.5 s", "76.8 s", "6.7 s (16.5)"];

struct Opts {
    smoke: bool,
    cohorts: usize,
    scale: f64,
    deadline: Duration,
    write_delay_ms: u64,
    workers: usize,
    strict: bool,
    preemption: bool,
    pods: bool,
    delete_finished: bool,
    marks: bool,
    one_runtime: bool,
    /// The nice value of the bench's own threads (`--harness-nice`).
    harness_nice: i32,
    /// bizrq's `--queue-fitting-creates` (off with `--admit-at-create`).
    hold_fitting: bool,
}

fn opts() -> Opts {
    let args: Vec<String> = std::env::args().collect();
    let val = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let flag = |name: &str| args.iter().any(|a| a == name);
    let smoke = flag("--smoke");
    let num = |name: &str, default: f64| {
        val(name)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite() && *n >= 0.0)
                    .unwrap_or_else(|| panic!("{name} {v}: not a number"))
            })
            .unwrap_or(default)
    };
    let order = val("--order").unwrap_or_else(|| "best-effort".into());
    assert!(
        order == "best-effort" || order == "strict",
        "--order {order}: best-effort or strict"
    );
    Opts {
        smoke,
        cohorts: (num("--cohorts", if smoke { 1.0 } else { 5.0 }) as usize).clamp(1, 100),
        scale: num("--scale", if smoke { 0.1 } else { 1.0 }).clamp(0.001, 10.0),
        deadline: Duration::from_secs(num("--deadline", if smoke { 75.0 } else { 900.0 }) as u64),
        write_delay_ms: num("--write-delay-ms", 5.0) as u64,
        workers: (num("--workers", 5.0) as usize).clamp(1, 256),
        strict: order == "strict",
        preemption: !flag("--no-preemption"),
        pods: !flag("--no-pods"),
        delete_finished: flag("--delete-finished"),
        marks: !flag("--marks-off"),
        one_runtime: flag("--one-runtime"),
        // One runtime for all: nothing of the bench's own to nice apart.
        harness_nice: if flag("--one-runtime") {
            0
        } else {
            num("--harness-nice", 5.0).clamp(0.0, 19.0) as i32
        },
        hold_fitting: !flag("--admit-at-create"),
    }
}

fn jobs_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs")
}

fn pods_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods")
}

/// A time as Kubernetes stores `metav1.Time`: RFC 3339 in whole seconds.
fn kube_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `requests.cpu` as stored ("20", "1500m") in milli-CPUs.
fn milli(q: &Value) -> i64 {
    q.as_str()
        .and_then(|s| s.parse::<quota::quantity::Quantity>().ok())
        .map_or(0, |q| (q.nanos() / 1_000_000) as i64)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The upper bound of the histogram bucket of `bizrq_admission_duration_seconds`
/// for `endpoint` holding the `q` quantile of its observations (seconds;
/// NaN when it observed none).
fn bucket_quantile(metrics: &str, endpoint: &str, q: f64) -> f64 {
    histogram_quantile(
        metrics,
        "bizrq_admission_duration_seconds",
        &format!("endpoint=\"{endpoint}\""),
        q,
    )
}

/// The `q` quantile of histogram `name`'s series labelled `label`, as the
/// upper bound of the bucket it falls in (NaN: no observation).
fn histogram_quantile(metrics: &str, name: &str, label: &str, q: f64) -> f64 {
    let bucket = format!("{name}_bucket{{");
    let buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&bucket) && l.contains(label))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    let total = buckets.iter().map(|b| b.1).fold(0.0, f64::max);
    buckets
        .iter()
        .find(|(_, n)| total > 0.0 && *n >= total * q)
        .map_or(f64::NAN, |b| b.0)
}

/// Where one Job stands, as the bench saw it.
struct JobRec {
    class: usize,
    cohort: usize,
    cq: String,
    cpu: i64,
    created: Instant,
    /// The create came back suspended: it waits in its quota's queue.
    queued_at_create: bool,
    /// Refused by the API server (a webhook), with why.
    refused: Option<String>,
    /// When the job controller last saw it admitted (unsuspended).
    admitted: Option<Instant>,
    finished: Option<Instant>,
    /// Suspended again after an admission (preempted).
    evictions: u32,
    /// Its pod runs: admitted, not suspended since, not finished.
    running: bool,
    /// How many runs started (a pod each).
    attempt: u32,
    task: Option<tokio::task::AbortHandle>,
}

/// The bench's record of the run, shared by its tasks.
#[derive(Default)]
struct Rec {
    jobs: HashMap<String, JobRec>,
    /// CPUs of the Jobs running now, per cohort and per child, by the
    /// Jobs' own truth (admitted and not finished).
    running_cohort: HashMap<usize, i64>,
    running_cq: HashMap<String, i64>,
    /// The most any cohort ran at once, and how often that was over its
    /// hard (or a child over its max).
    max_running_cohort: i64,
    over_running: u64,
    create_ms: Vec<f64>,
    /// Writes by the job controller and kubelet that failed, with why.
    cluster_errors: Vec<String>,
}

/// What the quota watch saw. The watch shows every version of every
/// quota in the order the API server wrote them (one resourceVersion
/// sequence), so the latest version of each quota after any event is the
/// store as it stood at that event's resourceVersion: a consistent cut.
/// The invariants are checked on each such cut, never on a mix of
/// versions — a relist's objects are applied together when it is done.
#[derive(Default)]
struct QuotaRec {
    /// Latest `status.used[requests.cpu]` per child, in milli-CPUs.
    used: HashMap<String, i64>,
    /// Each child's hard (milli-CPUs), its parent, and each parent's
    /// hard, own use and loans (child → milli-CPUs) at the latest cut.
    hard: HashMap<String, i64>,
    parent_of: HashMap<String, String>,
    parent_hard: HashMap<String, i64>,
    parent_self_used: HashMap<String, i64>,
    loans_of: HashMap<String, HashMap<String, i64>>,
    /// A relist under way: its objects, applied at its end.
    relisting: Option<Vec<DynamicObject>>,
    /// Time-weighted sum of the children's used (milli-CPU × ms) since
    /// `from`, and when it was last advanced.
    from: Option<Instant>,
    last: Option<Instant>,
    integral: f64,
    versions: u64,
    relists: u64,
    largest: usize,
    largest_name: String,
    /// Versions of a child above its max, of a parent above its hard, and
    /// cuts where a cohort's children were charged above the parent's hard.
    child_over_max: u64,
    parent_over_hard: u64,
    cohort_over_hard: u64,
    max_cohort_used: i64,
    /// Cuts where a child borrowed (used beyond hard) more than the loan
    /// its parent records for it: a charge the parent does not back. The
    /// largest such excess (milli-CPUs).
    beyond_loan: u64,
    max_beyond_loan: i64,
    /// Cuts where a child borrowed beyond a loan that was no longer all
    /// backed (a lender used guarantee it had lent): not counted above.
    beyond_unbacked: u64,
    /// Cuts where the children were above the parent's hard and every
    /// child's borrowing was within its loan: lenders using the
    /// guarantee they had lent, honoured at once (reclaim takes the
    /// loans back). The largest excess over hard among them (milli-CPUs).
    over_within_loans: u64,
    max_over_within_loans: i64,
    first_violation: Option<String>,
    /// The first cut counted in `over_within_loans`, for the record.
    first_over_within_loans: Option<String>,
    first_beyond_loan: Option<String>,
    first_over_max: Option<String>,
    /// Per child, its charges that hold CPUs at its latest version, in
    /// short (reference, CPUs, who wrote the charge, since), for the
    /// first borrowing beyond a loan.
    charges_of: HashMap<String, String>,
    /// The latest `status.loans` of each parent.
    loans: HashMap<String, Value>,
}

impl QuotaRec {
    fn total_used(&self) -> i64 {
        self.used.values().sum()
    }

    fn advance(&mut self, now: Instant) {
        if let (Some(_), Some(last)) = (self.from, self.last) {
            let dt = now.saturating_duration_since(last).as_secs_f64() * 1000.0;
            self.integral += self.total_used() as f64 * dt;
        }
        if self.from.is_some() {
            self.last = Some(now);
        }
    }

    fn violation(&mut self, what: String) {
        if self.first_violation.is_none() {
            self.first_violation = Some(what);
        }
    }

    /// One event of the watch: applied at once, or kept for the end of a
    /// relist.
    fn event(&mut self, ev: watcher::Event<DynamicObject>, now: Instant) {
        match ev {
            watcher::Event::Apply(q) => {
                self.versions += 1;
                self.apply(&q, now);
            }
            watcher::Event::Init => {
                // The first list is not a relist.
                if self.versions > 0 {
                    self.relists += 1;
                }
                self.relisting = Some(Vec::new());
            }
            watcher::Event::InitApply(q) => match self.relisting.as_mut() {
                Some(list) => list.push(q),
                None => self.apply(&q, now),
            },
            watcher::Event::InitDone => {
                for q in self.relisting.take().unwrap_or_default() {
                    self.versions += 1;
                    self.store(&q, now);
                }
                let parents: Vec<String> = self.parent_hard.keys().cloned().collect();
                for p in parents {
                    self.check(&p);
                }
            }
            watcher::Event::Delete(_) => {}
        }
    }

    fn apply(&mut self, q: &DynamicObject, now: Instant) {
        if let Some(parent) = self.store(q, now) {
            self.check(&parent);
        }
    }

    /// Record one quota's version; the parent whose cohort it touches.
    fn store(&mut self, q: &DynamicObject, now: Instant) -> Option<String> {
        let name = q.metadata.name.clone().unwrap_or_default();
        let used = milli(&q.data["status"]["used"][CPU]);
        let hard = milli(&q.data["spec"]["hard"][CPU]);
        let parent = q.data["spec"]["parent"].as_str().unwrap_or("").to_string();
        if parent.is_empty() {
            self.loans
                .insert(name.clone(), q.data["status"]["loans"].clone());
            let loans = q.data["status"]["loans"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(c, l)| (c.clone(), milli(&l["amount"][CPU])))
                        .collect()
                })
                .unwrap_or_default();
            self.loans_of.insert(name.clone(), loans);
            self.parent_hard.insert(name.clone(), hard);
            self.parent_self_used
                .insert(name.clone(), milli(&q.data["status"]["selfUsed"][CPU]));
            if used > hard {
                self.parent_over_hard += 1;
                self.violation(format!("{name}: used {used}m of hard {hard}m"));
            }
            return Some(name);
        }
        let max = milli(&q.data["spec"]["max"][CPU]).max(hard);
        if used > max {
            self.child_over_max += 1;
            let what = format!(
                "{name}: used {used}m above max {max}m (resourceVersion {}): {}",
                q.data["metadata"]["resourceVersion"], q.data["status"]["workloads"]
            );
            self.first_over_max.get_or_insert_with(|| what.clone());
            self.violation(what);
        }
        self.advance(now);
        let charges: Vec<String> = q.data["status"]["workloads"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(r, c)| {
                        let cpus: i64 = c["podSets"]
                            .as_array()?
                            .iter()
                            .map(|s| s["count"].as_i64().unwrap_or(0) * milli(&s["perPod"][CPU]))
                            .sum();
                        let uid = c["uid"].as_str().unwrap_or("");
                        let by = match uid.split_once(':') {
                            Some((p, _)) => p,
                            None if uid.is_empty() => "controller",
                            None => "review",
                        };
                        (cpus > 0).then(|| {
                            format!(
                                "{} {} {by}{} {}",
                                r.rsplit('/').next().unwrap_or(r),
                                cpus / 1000,
                                if c["admitted"].is_null() {
                                    ""
                                } else {
                                    " admitted"
                                },
                                c["since"].as_str().unwrap_or("").get(11..23).unwrap_or("")
                            )
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.charges_of.insert(name.clone(), charges.join("; "));
        self.used.insert(name.clone(), used);
        self.hard.insert(name.clone(), hard);
        self.parent_of.insert(name, parent.clone());
        Some(parent)
    }

    /// The cohort under `parent` at this cut: its children together
    /// against the parent's hard, and each child's borrowing against the
    /// loan the parent records.
    fn check(&mut self, parent: &str) {
        let Some(&cap) = self.parent_hard.get(parent) else {
            return;
        };
        let kids: Vec<(&String, i64)> = self
            .used
            .iter()
            .filter(|(c, _)| self.parent_of.get(*c).map(String::as_str) == Some(parent))
            .map(|(c, u)| (c, *u))
            .collect();
        let no_loans = HashMap::new();
        let loans = self.loans_of.get(parent).unwrap_or(&no_loans);
        let mut beyond = Vec::new();
        for (c, u) in &kids {
            let borrowed = u - self.hard.get(*c).copied().unwrap_or(0);
            let loan = loans.get(*c).copied().unwrap_or(0);
            if borrowed > loan {
                beyond.push((c.to_string(), borrowed, loan));
            }
        }
        let own = self.parent_self_used.get(parent).copied().unwrap_or(0);
        let cohort: i64 = kids.iter().map(|(_, u)| u).sum::<i64>() + own;
        // Whether every loan is backed at this cut: the parent's own use,
        // each child's use within its hard and every loan fit its hard.
        // When not (a lender took back guarantee it had lent), a loan is
        // cut to what is backed at the next grant, below what its child
        // may still borrow: reclaim's to take back, not an over-admission.
        let backed = own
            + kids
                .iter()
                .map(|(c, u)| (*u).min(self.hard.get(*c).copied().unwrap_or(0)))
                .sum::<i64>()
            + loans.values().sum::<i64>()
            <= cap;
        if !backed && !beyond.is_empty() {
            self.beyond_unbacked += 1;
            beyond.clear();
        }
        let mut each: Vec<String> = kids
            .iter()
            .map(|(c, u)| {
                let loan = loans.get(*c).copied().unwrap_or(0);
                format!("{c} {} (loan {})", *u as f64 / 1000.0, loan as f64 / 1000.0)
            })
            .collect();
        each.sort();
        if !beyond.is_empty() {
            self.beyond_loan += 1;
            let worst = beyond.iter().map(|(_, b, l)| b - l).max().unwrap_or(0);
            self.max_beyond_loan = self.max_beyond_loan.max(worst);
            if self.first_beyond_loan.is_none() {
                self.first_beyond_loan = Some(
                    format!(
                        "cohort {parent}: {} (used: {})",
                        beyond
                            .iter()
                            .map(|(c, b, l)| format!(
                                "{c} borrows {} on a loan of {}",
                                *b as f64 / 1000.0,
                                *l as f64 / 1000.0
                            ))
                            .collect::<Vec<_>>()
                            .join(", "),
                        each.join(", ")
                    ) + &beyond
                        .iter()
                        .map(|(c, _, _)| {
                            format!(
                                "; {c}'s charges: {}",
                                self.charges_of.get(c).map(String::as_str).unwrap_or("")
                            )
                        })
                        .collect::<String>(),
                );
            }
        }
        self.max_cohort_used = self.max_cohort_used.max(cohort);
        if cohort > cap {
            self.cohort_over_hard += 1;
            if beyond.is_empty() {
                self.over_within_loans += 1;
                self.max_over_within_loans = self.max_over_within_loans.max(cohort - cap);
            }
            // Within the loans, this is the guarantee at work (a lender
            // using what it lent, reclaim taking the loans back), shown
            // apart from a broken invariant so that the two never read alike.
            let slot = if beyond.is_empty() {
                &mut self.first_over_within_loans
            } else {
                &mut self.first_violation
            };
            if slot.is_none() {
                let loans = self.loans.get(parent).cloned().unwrap_or_default();
                *slot = Some(format!(
                    "cohort {parent}: its children use {cohort}m together, above its hard {cap}m \
                     (used: {}; the parent's loans: {loans})",
                    each.join(", ")
                ));
            }
        }
    }
}

/// The Job a tenant creates: one pod of `cpu`, its class's PriorityClass.
fn job(cq: &str, name: &str, class: &Class) -> Value {
    let cpu = class.cpu.to_string();
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": cq,
            "labels": {QUOTA_LABEL: cq, CLASS_LABEL: class.name}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"metadata": {"labels": {CLASS_LABEL: class.name}},
                "spec": {"restartPolicy": "Never", "priorityClassName": class.name,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}})
}

fn child_spec(o: &Opts, parent: &str) -> Value {
    let order = if o.strict {
        json!({"kind": "StrictFifo"})
    } else {
        // Kueue's BestEffortFIFO never ages; bizrq's longest aging is 366 days.
        json!({"kind": "BestEffortFifo", "agingSeconds": 31_622_400})
    };
    let mut queueing = json!({"mode": "Queue", "order": order, "maxPerSubmitter": 1000});
    if o.preemption {
        queueing["preemption"] = json!({"policy": "LowerPriority", "graceSeconds": 0});
    }
    json!({"parent": parent, "hard": {CPU: NOMINAL.to_string()}, "max": {CPU: MAX.to_string()},
        "queueing": queueing})
}

/// The cohorts' quotas through the JSON API, the PriorityClasses as an
/// administrator's kubectl would create them.
async fn set_up(c: &Cluster, o: &Opts) -> Vec<Vec<String>> {
    let classes: Api<DynamicObject> = Api::all_with(
        c.kubectl("admin"),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("scheduling.k8s.io", "v1", "PriorityClass"),
            "priorityclasses",
        ),
    );
    for class in &CLASSES {
        let pc: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": class.name}, "value": class.priority, "globalDefault": false}))
        .unwrap();
        classes.create(&PostParams::default(), &pc).await.unwrap();
    }
    let mut cohorts = Vec::new();
    for k in 0..o.cohorts {
        let parent = format!("cohort-{k}");
        let spec = json!({"parent": "", "hard": {CPU: (NOMINAL * CHILDREN as i64).to_string()}});
        create_quota(c, &parent, spec).await;
        let mut children = Vec::new();
        for i in 0..CHILDREN {
            let name = format!("cq-{k}-{i}");
            create_quota(c, &name, child_spec(o, &parent)).await;
            children.push(name);
        }
        cohorts.push(children);
    }
    cohorts
}

async fn create_quota(c: &Cluster, name: &str, spec: Value) {
    let (s, v) = c
        .server
        .api(
            reqwest::Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await;
    assert!(s.is_success(), "{name}: {s} {v}");
}

/// The quota watch, as Kueue's recorder watches its ClusterQueues.
fn watch_quotas(c: &Cluster, qrec: Arc<Mutex<QuotaRec>>) {
    let api: Api<DynamicObject> = Api::all_with(
        c.kubectl("kbench-recorder"),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("bizrq.io", "v1", "BizGroupResourceQuota"),
            "bizgroupresourcequotas",
        ),
    );
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            if let Ok(ev) = ev {
                qrec.lock().unwrap().event(ev, now);
            }
        }
    });
}

/// The cluster's part: the job controller and the kubelet.
#[derive(Clone)]
struct Kubelet {
    jobs_ctl: kube::Client,
    kubelet: kube::Client,
    rec: Arc<Mutex<Rec>>,
    pods: bool,
    delete_finished: bool,
}

impl Kubelet {
    fn jobs(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.jobs_ctl.clone(), ns, &jobs_resource())
    }

    fn error(&self, what: String) {
        self.rec.lock().unwrap().cluster_errors.push(what);
    }

    /// One event of the Job watch.
    fn on_job(&self, j: &DynamicObject) {
        let ns = j.metadata.namespace.clone().unwrap_or_default();
        let name = j.metadata.name.clone().unwrap_or_default();
        let key = format!("{ns}/{name}");
        let suspended = j.data["spec"]["suspend"] == true;
        let uid = j.metadata.uid.clone().unwrap_or_default();
        let now = Instant::now();
        let mut r = self.rec.lock().unwrap();
        let Some(job) = r.jobs.get_mut(&key) else {
            return;
        };
        if job.finished.is_some() {
            return;
        }
        let (cohort, cq, cpu) = (job.cohort, job.cq.clone(), job.cpu);
        if !suspended && !job.running {
            job.running = true;
            job.admitted = Some(now);
            job.attempt += 1;
            let attempt = job.attempt;
            let run = Duration::from_millis(CLASSES[job.class].run_ms);
            let me = self.clone();
            let (ns2, name2) = (ns.clone(), name.clone());
            let task = tokio::spawn(async move { me.run(&ns2, &name2, &uid, attempt, run).await });
            job.task = Some(task.abort_handle());
            let c = r.running_cohort.entry(cohort).or_default();
            *c += cpu;
            let c = *c;
            let q = r.running_cq.entry(cq).or_default();
            *q += cpu;
            let q = *q;
            r.max_running_cohort = r.max_running_cohort.max(c);
            if c > MAX || q > MAX {
                r.over_running += 1;
            }
        } else if suspended && job.running {
            // Preempted: the job controller deletes its active pod; it
            // runs anew when admitted again.
            job.running = false;
            job.evictions += 1;
            if let Some(t) = job.task.take() {
                t.abort();
            }
            let attempt = job.attempt;
            *r.running_cohort.entry(cohort).or_default() -= cpu;
            *r.running_cq.entry(cq).or_default() -= cpu;
            drop(r);
            let me = self.clone();
            tokio::spawn(async move { me.stop(&ns, &name, attempt).await });
        }
    }

    async fn stop(&self, ns: &str, name: &str, attempt: u32) {
        if self.pods {
            let pods: Api<DynamicObject> =
                Api::namespaced_with(self.jobs_ctl.clone(), ns, &pods_resource());
            let _ = pods
                .delete(&format!("{name}-{attempt}"), &DeleteParams::default())
                .await;
        }
        let status = json!({"status": {"active": 0, "conditions": [{"type": "Suspended",
            "status": "True", "reason": "JobSuspended", "lastTransitionTime": kube_now()}]}});
        if let Err(e) = self
            .jobs(ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            self.error(format!("suspend status of {ns}/{name}: {e}"));
        }
    }

    /// One run of an admitted Job: its pod made and running, then, its
    /// run time after the admission, the pod Succeeded and the Job
    /// Complete.
    async fn run(&self, ns: &str, name: &str, uid: &str, attempt: u32, run: Duration) {
        let until = tokio::time::Instant::now() + run;
        let started = kube_now();
        let pod_name = format!("{name}-{attempt}");
        let pods: Api<DynamicObject> =
            Api::namespaced_with(self.jobs_ctl.clone(), ns, &pods_resource());
        let node_pods: Api<DynamicObject> =
            Api::namespaced_with(self.kubelet.clone(), ns, &pods_resource());
        let (class, cpu) = {
            let r = self.rec.lock().unwrap();
            let j = &r.jobs[&format!("{ns}/{name}")];
            (&CLASSES[j.class], j.cpu)
        };
        if self.pods {
            // As the Job controller makes it (its template, an owner
            // reference) and the API server's Priority admission fills
            // in the priority of its class.
            let pod: DynamicObject =
                serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": ns,
                    "labels": {CLASS_LABEL: class.name, "batch.kubernetes.io/job-name": name},
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                        "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"restartPolicy": "Never", "nodeName": "node-1",
                    "priorityClassName": class.name, "priority": class.priority,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu.to_string()},
                            "limits": {"cpu": cpu.to_string()}}}]}}))
                .unwrap();
            if let Err(e) = pods.create(&PostParams::default(), &pod).await {
                self.error(format!("pod {ns}/{pod_name}: {e}"));
            }
            let running = json!({"status": {"phase": "Running", "startTime": started,
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
                    {"type": "Ready", "status": "True", "lastTransitionTime": started}],
                "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0,
                    "image": "registry.k8s.io/pause:3.10", "imageID": "",
                    "state": {"running": {"startedAt": started}}}]}});
            if let Err(e) = node_pods
                .patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&running))
                .await
            {
                self.error(format!("pod {ns}/{pod_name} running: {e}"));
            }
        }
        let active = json!({"status": {"startTime": started, "active": 1}});
        if let Err(e) = self
            .jobs(ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&active))
            .await
        {
            self.error(format!("job {ns}/{name} active: {e}"));
        }
        tokio::time::sleep_until(until).await;
        {
            // Past this point a suspend no longer stops it.
            let mut r = self.rec.lock().unwrap();
            let Some(j) = r.jobs.get_mut(&format!("{ns}/{name}")) else {
                return;
            };
            if !j.running || j.attempt != attempt {
                return;
            }
            j.running = false;
            j.task = None;
            j.finished = Some(Instant::now());
            let (cohort, cq) = (j.cohort, j.cq.clone());
            *r.running_cohort.entry(cohort).or_default() -= cpu;
            *r.running_cq.entry(cq).or_default() -= cpu;
        }
        let ended = kube_now();
        if self.pods {
            let done = json!({"status": {"phase": "Succeeded",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": ended}],
                "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0,
                    "image": "registry.k8s.io/pause:3.10", "imageID": "",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": started, "finishedAt": ended}}}]}});
            if let Err(e) = node_pods
                .patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&done))
                .await
            {
                self.error(format!("pod {ns}/{pod_name} succeeded: {e}"));
            }
        }
        let complete = json!({"status": {"active": 0, "succeeded": 1, "ready": 0,
            "startTime": started, "completionTime": ended,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                    "lastTransitionTime": ended},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                    "lastTransitionTime": ended}]}});
        if let Err(e) = self
            .jobs(ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&complete))
            .await
        {
            self.error(format!("job {ns}/{name} complete: {e}"));
        }
        if self.delete_finished {
            if let Err(e) = self.jobs(ns).delete(name, &DeleteParams::default()).await {
                self.error(format!("delete {ns}/{name}: {e}"));
            }
            if self.pods {
                let _ = pods.delete(&pod_name, &DeleteParams::default()).await;
            }
        }
    }
}

fn watch_jobs(c: &Cluster, k: Kubelet) {
    let api: Api<DynamicObject> = Api::all_with(c.kubectl(JOB_CONTROLLER), &jobs_resource());
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = ev {
                k.on_job(&j);
            }
        }
    });
}

/// Kueue's generator: per child and class, wait the interval, create one
/// Job, again, each create awaited before the next wait.
fn generate(c: &Cluster, o: &Opts, cohorts: &[Vec<String>], rec: Arc<Mutex<Rec>>) -> usize {
    let mut total = 0;
    for (k, children) in cohorts.iter().enumerate() {
        for cq in children {
            for (ci, class) in CLASSES.iter().enumerate() {
                let n = ((class.count as f64 * o.scale).round() as usize).max(1);
                total += n;
                let api: Api<DynamicObject> =
                    Api::namespaced_with(c.kubectl(TENANT), cq, &jobs_resource());
                let (cq, rec) = (cq.clone(), rec.clone());
                tokio::spawn(async move {
                    for i in 0..n {
                        tokio::time::sleep(Duration::from_millis(class.interval_ms)).await;
                        let name = format!("{}-{ci}-{i}-0", class.name);
                        let obj: DynamicObject =
                            serde_json::from_value(job(&cq, &name, class)).unwrap();
                        let key = format!("{cq}/{name}");
                        rec.lock().unwrap().jobs.insert(
                            key.clone(),
                            JobRec {
                                class: ci,
                                cohort: k,
                                cq: cq.clone(),
                                cpu: class.cpu,
                                created: Instant::now(),
                                queued_at_create: false,
                                refused: None,
                                admitted: None,
                                finished: None,
                                evictions: 0,
                                running: false,
                                attempt: 0,
                                task: None,
                            },
                        );
                        let sent = Instant::now();
                        let got = api.create(&PostParams::default(), &obj).await;
                        let took = sent.elapsed().as_secs_f64() * 1000.0;
                        let mut r = rec.lock().unwrap();
                        r.create_ms.push(took);
                        let j = r.jobs.get_mut(&key).unwrap();
                        match got {
                            Ok(created) => {
                                j.queued_at_create = created.data["spec"]["suspend"] == true
                            }
                            Err(e) => j.refused = Some(e.to_string()),
                        }
                    }
                });
            }
        }
    }
    total
}

struct Counts {
    created: usize,
    refused: usize,
    admitted: usize,
    finished: usize,
    running: usize,
}

fn counts(r: &Rec) -> Counts {
    let mut c = Counts {
        created: 0,
        refused: 0,
        admitted: 0,
        finished: 0,
        running: 0,
    };
    for j in r.jobs.values() {
        c.created += 1;
        c.refused += j.refused.is_some() as usize;
        c.admitted += j.admitted.is_some() as usize;
        c.finished += j.finished.is_some() as usize;
        c.running += j.running as usize;
    }
    c
}

/// The server's `/metrics`, or nothing when it cannot be read (a
/// connection refused under load is not the run's failure).
async fn metrics_text(c: &Cluster) -> String {
    let url = format!("http://{}/metrics", c.running.http_addr);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    match client.get(url).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The value of an unlabelled metric in Prometheus' text format.
/// The counter `family{cause="cause"}`, 0 when it was never counted.
fn counted(text: &str, family: &str, cause: &str) -> f64 {
    let n = metric(text, &format!("{family}{{cause=\"{cause}\"}}"));
    if n.is_nan() {
        0.0
    } else {
        n
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_seconds() -> f64 {
    // utime + stime of this process (fields 14 and 15), in clock ticks.
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            let u: f64 = after.get(11)?.parse().ok()?;
            let k: f64 = after.get(12)?.parse().ok()?;
            Some((u + k) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Per thread of this process: its name, and from the scheduler's
/// `schedstat` the CPU time it ran, the time it waited runnable for a CPU
/// and its time slices (ns, ns, count).
fn thread_stats() -> HashMap<u64, (String, u64, u64, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u64>().ok()) else {
            continue;
        };
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let Ok(st) = std::fs::read_to_string(e.path().join("schedstat")) else {
            continue;
        };
        let v: Vec<u64> = st
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() == 3 {
            out.insert(tid, (name.trim().to_string(), v[0], v[1], v[2]));
        }
    }
    out
}

/// What each group of threads (by name) ran and waited for a CPU since
/// `before`, one line per group, the busiest first.
fn thread_groups(before: &HashMap<u64, (String, u64, u64, u64)>) -> Vec<String> {
    let mut groups: HashMap<String, (u64, u64, u64, usize)> = HashMap::new();
    for (tid, (name, cpu, wait, slices)) in thread_stats() {
        let (c0, w0, s0) = before
            .get(&tid)
            .filter(|b| b.0 == name)
            .map_or((0, 0, 0), |b| (b.1, b.2, b.3));
        let g = groups.entry(name).or_default();
        g.0 += cpu.saturating_sub(c0);
        g.1 += wait.saturating_sub(w0);
        g.2 += slices.saturating_sub(s0);
        g.3 += 1;
    }
    let mut rows: Vec<_> = groups.into_iter().filter(|g| g.1 .0 > 0).collect();
    rows.sort_by_key(|b| std::cmp::Reverse(b.1 .0));
    rows.into_iter()
        .map(|(name, (cpu, wait, slices, n))| {
            format!(
                "  {name} ({n} threads): ran {:.1} s, waited for a CPU {:.1} s over {slices} slices \
                 ({:.2} ms a slice)",
                cpu as f64 / 1e9,
                wait as f64 / 1e9,
                wait as f64 / 1e6 / slices.max(1) as f64
            )
        })
        .collect()
}

fn main() {
    let o = opts();
    // The bench's own part — the generator, the job controller and kubelet,
    // the recorders and their invariants — on threads of its own, as
    // Kueue's runner and the cluster's controllers are processes of their
    // own: they share the two CPUs with bizrq, not bizrq's runtime.
    // The generator, job controller, kubelet and recorders stand in for
    // other machines' processes (Kueue's runner, kube-controller-manager,
    // the kubelets): at `--harness-nice` (default 5) they give the two
    // CPUs to bizrq and the API server first, as on a cluster where they
    // run elsewhere. The API server stays at bizrq's priority: its own
    // waits count in the webhook latencies it measures.
    let nice = o.harness_nice;
    let niced = move || {
        // SAFETY: setpriority takes plain integers and touches no memory;
        // on Linux it sets the calling thread's nice value.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(niced)
        .thread_name("kbench")
        .enable_all()
        .build()
        .unwrap();
    // bizrq's runtime, as its binary's `#[tokio::main]` builds it (one
    // worker per CPU); `--one-runtime` serves bizrq on the bench's own
    // runtime instead, as this bench did until 2026-12-02.
    let server = (!o.one_runtime).then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("bizrq-main")
            .enable_all()
            .build()
            .unwrap()
    });
    // The API server on threads of its own, as kube-apiserver is a process
    // of its own: it shares the two CPUs with bizrq, not bizrq's runtime.
    let api = tokio::runtime::Builder::new_multi_thread()
        .thread_name("fake-apiserver")
        .enable_all()
        .build()
        .unwrap();
    let on = server.as_ref().map(|s| s.handle().clone());
    // After every runtime is built (threads inherit their maker's nice):
    // the main thread runs the generator's loop.
    niced();
    let failed = rt.block_on(run(o, api.handle().clone(), on));
    api.shutdown_timeout(Duration::from_secs(1));
    // The server's background tasks are not awaited: the process ends here.
    if let Some(s) = server {
        s.shutdown_timeout(Duration::from_secs(1));
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    if failed {
        std::process::exit(1);
    }
}

/// The whole run; true when an invariant was broken (or, in a smoke run,
/// nothing at all was admitted).
async fn run(o: Opts, api: tokio::runtime::Handle, server: Option<tokio::runtime::Handle>) -> bool {
    let fake = FakeApi::new();
    fake.serve_on(api);
    // A bounded history, as kube-apiserver's watch cache and etcd's
    // compaction keep: the run's memory stays bounded.
    fake.bound_history(5_000);
    fake.wall_clock_stamps();
    let dir = tempfile::tempdir().unwrap();
    let workers = o.workers;
    let marks = o.marks;
    let fitting = o.hold_fitting;
    let start = Cluster::on_wall_clock(fake.clone(), dir, move |args| {
        // The shipped defaults, not the test harness's.
        args.resync_seconds = 300;
        args.discovery_seconds = 60;
        args.workers = workers;
        args.queue_mark_key_file = None;
        args.queue_mark_key_secret = marks.then(|| "bizrq-queue-mark-keys".to_string());
        args.queue_fitting_creates = fitting;
    });
    // Started on its runtime, the server serves and spawns there.
    let c = match server {
        Some(server) => server.spawn(start).await.expect("the server starts"),
        None => start.await,
    };
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let cohorts = set_up(&c, &o).await;
    for children in &cohorts {
        for q in children {
            c.until(q, "first reconcile", |q| {
                !q["status"]["lastReconcileTime"].is_null()
            })
            .await;
        }
    }
    fake.set_write_delay(Duration::from_millis(o.write_delay_ms));

    let rec = Arc::new(Mutex::new(Rec::default()));
    let qrec = Arc::new(Mutex::new(QuotaRec::default()));
    watch_quotas(&c, qrec.clone());
    watch_jobs(
        &c,
        Kubelet {
            jobs_ctl: c.kubectl(JOB_CONTROLLER),
            kubelet: c.kubectl(KUBELET),
            rec: rec.clone(),
            pods: o.pods,
            delete_finished: o.delete_finished,
        },
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    println!(
        "Kueue's scheduler benchmark (baseline) on bizrq: {} cohort(s) × {CHILDREN} quotas, \
         scale {}, write delay {} ms, {} workers, order {}, preemption {}, pods {}, finished Jobs {}, \
         queue marks {}, creates that fit {}, the bench's own threads at nice {}{}",
        o.cohorts,
        o.scale,
        o.write_delay_ms,
        o.workers,
        if o.strict { "StrictFifo" } else { "BestEffortFifo" },
        if o.preemption { "LowerPriority (grace 0)" } else { "off" },
        if o.pods { "made" } else { "none" },
        if o.delete_finished { "deleted" } else { "left" },
        if o.marks { "on" } else { "off" },
        if o.hold_fitting { "held for the next round" } else { "charged in their review" },
        o.harness_nice,
        if o.smoke { ", smoke" } else { "" },
    );
    println!("load average at start: {}", load());
    let cpu0 = cpu_seconds();
    let threads0 = thread_stats();
    let start = Instant::now();
    {
        let mut q = qrec.lock().unwrap();
        q.from = Some(start);
        q.last = Some(start);
    }
    let total = generate(&c, &o, &cohorts, rec.clone());
    let mut next_report = Duration::from_secs(10);
    let mut next_size = Duration::ZERO;
    let mut all_admitted: Option<Duration> = None;
    // What the last progress line read: CPU seconds, rounds, idle rounds.
    let mut last_line = (cpu0, 0.0, 0.0);
    let end = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let el = start.elapsed();
        let n = counts(&rec.lock().unwrap());
        if all_admitted.is_none() && n.created == total && n.admitted + n.refused == total {
            all_admitted = Some(el);
        }
        if el >= next_size {
            // The stored quotas' sizes, once a second (cheaper than on
            // every version the watch shows).
            next_size += Duration::from_secs(1);
            let sizes: Vec<(usize, String)> = fake
                .list("bizrq.io", "bizgroupresourcequotas")
                .iter()
                .map(|q| {
                    let n = serde_json::to_vec(q).map_or(0, |b| b.len());
                    (n, q["metadata"]["name"].as_str().unwrap_or("").to_string())
                })
                .collect();
            let mut r = qrec.lock().unwrap();
            for (n, name) in sizes {
                if n > r.largest {
                    r.largest = n;
                    r.largest_name = name;
                }
            }
        }
        if el >= next_report {
            next_report += Duration::from_secs(10);
            let used = qrec.lock().unwrap().total_used();
            let metrics = metrics_text(&c).await;
            let depth = metric(&metrics, "bizrq_queue_depth");
            // Over the last 10 s: the process's CPU (of the machine's
            // cores, 200 % on two), queue rounds run and those that
            // admitted nothing.
            let now = (
                cpu_seconds(),
                metric(
                    &metrics,
                    "bizrq_admission_queue_round_duration_seconds_count",
                ),
                metric(&metrics, "bizrq_admission_queue_rounds_idle_total"),
            );
            println!(
                "  {:>4} s: created {:>5}/{total}, refused {}, admitted {:>5}, finished {:>5}, running {:>4}, \
                 charged {:>5.0} CPUs, quotas awaiting a reconcile {depth:.0}, load {}, \
                 CPU {:.0} %, rounds {:.0} ({:.0} idle)",
                el.as_secs(),
                n.created,
                n.refused,
                n.admitted,
                n.finished,
                n.running,
                used as f64 / 1000.0,
                load(),
                (now.0 - last_line.0) * 10.0,
                now.1 - last_line.1,
                now.2 - last_line.2,
            );
            last_line = now;
        }
        if n.created == total && n.finished + n.refused == total {
            break el;
        }
        if el >= o.deadline {
            break el;
        }
    };
    let cpu = cpu_seconds() - cpu0;
    println!("threads by name, over the run (live at its end):");
    for line in thread_groups(&threads0) {
        println!("{line}");
    }
    let metrics = metrics_text(&c).await;
    let reconciles = metric(&metrics, "bizrq_quota_reconcile_duration_seconds_count");
    let reconcile_s = metric(&metrics, "bizrq_quota_reconcile_duration_seconds_sum");
    println!(
        "controller: {reconciles:.0} quota reconciles, {:.0} ms each on average",
        reconcile_s / reconciles.max(1.0) * 1000.0
    );
    let rounds = metric(
        &metrics,
        "bizrq_admission_queue_round_duration_seconds_count",
    );
    let round_s = metric(&metrics, "bizrq_admission_queue_round_duration_seconds_sum");
    println!(
        "scheduler: {rounds:.0} queue rounds, {:.1} ms each on average, {:.0} of them admitting nothing; {:.0} asked for and not run (nothing they read had changed, or only arrivals none of which could be admitted)",
        round_s / rounds.max(1.0) * 1000.0,
        metric(&metrics, "bizrq_admission_queue_rounds_idle_total"),
        metric(&metrics, "bizrq_admission_queue_rounds_skipped_total"),
    );
    let yielded =
        |what: &str| counted(&metrics, "bizrq_admission_queue_rounds_yielded_total", what);
    println!(
        "  rounds that left room to a fairer sibling: {:.0} admitting nothing, {:.0} admitting the rest",
        yielded("nothing"),
        yielded("admitted")
    );
    // By cause, each with how many of them admitted nothing.
    println!(
        "  rounds run (admitting nothing), by what set them apart from the quota's last idle one: {}",
        [
            "first",
            "after-partial",
            "after-fold-full",
            "after-repair",
            "after-preempt",
            "after-release-failed",
            "after-error",
            "after-limits",
            "timer",
            "due",
            "version",
            "objects",
            "classes",
            "left-room",
            "room",
            "arrivals"
        ]
        .iter()
        .map(|c| {
            let n = |family: &str| counted(&metrics, family, c);
            format!(
                "{c} {:.0} ({:.0})",
                n("bizrq_admission_queue_rounds_run_total"),
                n("bizrq_admission_queue_rounds_run_idle_total")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
    );
    {
        qrec.lock().unwrap().advance(start + end);
    }
    let (_, metrics) = c.server.get_text("/metrics").await;
    let broken = report(
        &o,
        &fake,
        &rec,
        &qrec,
        total,
        end,
        all_admitted,
        cpu,
        &metrics,
    );
    settle_held(&fake, &rec).await;
    broken
}

/// Charges of finished Jobs the quotas hold, by reference.
fn held_refs(fake: &FakeApi, r: &Rec) -> Vec<String> {
    let mut out = Vec::new();
    for q in fake.list("bizrq.io", "bizgroupresourcequotas") {
        let Some(charges) = q["status"]["workloads"].as_object() else {
            continue;
        };
        for (wref, charge) in charges {
            let finished = wref
                .strip_prefix("batch/Job/")
                .and_then(|k| r.jobs.get(k))
                .is_some_and(|j| j.finished.is_some());
            let charged = charge["podSets"]
                .as_array()
                .is_some_and(|s| s.iter().any(|p| p["count"].as_i64().unwrap_or(0) > 0));
            if finished && charged {
                out.push(wref.clone());
            }
        }
    }
    out
}

/// Whether a finished Job's charge still held at the end is a leak or the
/// controller catching up (its reconciles queued behind others): watched
/// for up to 20 s after the end.
async fn settle_held(fake: &FakeApi, rec: &Arc<Mutex<Rec>>) {
    let t0 = Instant::now();
    let first = held_refs(fake, &rec.lock().unwrap());
    if first.is_empty() {
        return;
    }
    loop {
        let now = held_refs(fake, &rec.lock().unwrap());
        if now.is_empty() || t0.elapsed() > Duration::from_secs(20) {
            println!(
                "finished Jobs charged at the end: {} ({}); {:.1} s later: {}{}",
                first.len(),
                first.join(", "),
                t0.elapsed().as_secs_f64(),
                now.len(),
                if now.is_empty() {
                    " (released: the controller caught up)"
                } else {
                    " (never released)"
                },
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The charges the quotas still hold at the end for Jobs that finished,
/// and how many of those Jobs finished, as Kubernetes stores the time (in
/// whole seconds), before the `since` of their charge (milliseconds).
fn held_charges(fake: &FakeApi, r: &Rec) {
    let (mut held, mut cpus, mut before_since) = (0usize, 0i64, 0usize);
    for q in fake.list("bizrq.io", "bizgroupresourcequotas") {
        let Some(charges) = q["status"]["workloads"].as_object() else {
            continue;
        };
        for (wref, charge) in charges {
            let Some(key) = wref.strip_prefix("batch/Job/") else {
                continue;
            };
            let Some(j) = r.jobs.get(key).filter(|j| j.finished.is_some()) else {
                continue;
            };
            // A released charge stays listed, its pod sets at count 0.
            let charged = charge["podSets"]
                .as_array()
                .is_some_and(|s| s.iter().any(|p| p["count"].as_i64().unwrap_or(0) > 0));
            if !charged {
                continue;
            }
            held += 1;
            cpus += j.cpu;
            let (ns, name) = key.split_once('/').unwrap_or_default();
            // Enough to tell which writer left it: the charge, and the
            // Job's hold, annotations and conditions as stored.
            if held <= 3 {
                let o = fake.get("batch", "jobs", ns, name).unwrap_or_default();
                println!(
                    "  still charged: {wref} in {}: {charge}; the Job: suspend {}, annotations {}, \
                     conditions {}, evictions {}, queued at create {}",
                    q["metadata"]["name"],
                    o["spec"]["suspend"],
                    o["metadata"]["annotations"],
                    o["status"]["conditions"],
                    j.evictions,
                    j.queued_at_create,
                );
            }
            let finished_at = fake
                .get("batch", "jobs", ns, name)
                .and_then(|o| {
                    o["status"]["conditions"].as_array()?.iter().find_map(|c| {
                        (c["type"] == "Complete")
                            .then(|| c["lastTransitionTime"].as_str().map(str::to_string))?
                    })
                })
                .and_then(|t| quota::time::parse_rfc3339(&t));
            let since = charge["since"]
                .as_str()
                .and_then(quota::time::parse_rfc3339);
            if let (Some(f), Some(s)) = (finished_at, since) {
                before_since += (f < s) as usize;
            }
        }
    }
    println!(
        "charges still held at the end for finished Jobs: {held} ({cpus} CPUs); of those Jobs, \
         {before_since} read as finished (whole seconds) before their charge's since (milliseconds)"
    );
}

#[allow(clippy::too_many_arguments)]
fn report(
    o: &Opts,
    fake: &FakeApi,
    rec: &Arc<Mutex<Rec>>,
    qrec: &Arc<Mutex<QuotaRec>>,
    total: usize,
    end: Duration,
    all_admitted: Option<Duration>,
    cpu: f64,
    metrics: &str,
) -> bool {
    let r = rec.lock().unwrap();
    let q = qrec.lock().unwrap();
    let n = counts(&r);
    let done = n.created == total && n.finished + n.refused == total;
    let nominal = (o.cohorts * CHILDREN) as f64 * (NOMINAL * 1000) as f64;
    let window_ms = end.as_secs_f64() * 1000.0;
    let usage = q.integral / (nominal * window_ms) * 100.0;

    // Time to admission per class, from the create to the last admission.
    let mut tta: Vec<Vec<f64>> = vec![Vec::new(); CLASSES.len()];
    let mut waiting: Vec<usize> = vec![0; CLASSES.len()];
    let mut from_queue: Vec<Instant> = Vec::new();
    let mut evictions = 0;
    let mut per_cq_waiting: BTreeMap<String, usize> = BTreeMap::new();
    for j in r.jobs.values() {
        evictions += j.evictions;
        match j.admitted {
            Some(a) => {
                tta[j.class].push(a.saturating_duration_since(j.created).as_secs_f64());
                if j.queued_at_create {
                    from_queue.push(a);
                }
            }
            None if j.refused.is_none() => {
                waiting[j.class] += 1;
                *per_cq_waiting.entry(j.cq.clone()).or_default() += 1;
            }
            None => {}
        }
    }
    for t in &mut tta {
        t.sort_by(f64::total_cmp);
    }
    from_queue.sort();
    let queue_rate = match (from_queue.first(), from_queue.last()) {
        (Some(a), Some(b)) if b > a => from_queue.len() as f64 / (*b - *a).as_secs_f64(),
        _ => f64::NAN,
    };
    // The busiest 10 s of admissions from queues.
    let mut peak = 0usize;
    let mut lo = 0;
    for hi in 0..from_queue.len() {
        while from_queue[hi] - from_queue[lo] > Duration::from_secs(10) {
            lo += 1;
        }
        peak = peak.max(hi - lo + 1);
    }
    let ms = |v: Vec<Duration>| {
        let mut v: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let mutating = ms(fake.webhook_latencies("queue.bizrq.io"));
    let validating = ms(fake.webhook_latencies("workloads.bizrq.io"));
    let mut create = r.create_ms.clone();
    create.sort_by(f64::total_cmp);

    let secs = |d: Option<Duration>| {
        d.map_or("never".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
    };
    let mean = |v: &[f64]| {
        if v.is_empty() {
            "—".to_string()
        } else {
            format!("{:.1} s", v.iter().sum::<f64>() / v.len() as f64)
        }
    };
    println!();
    println!(
        "{:<46} {:>22} {:>16} {:>14}",
        "", "bizrq", "Kueue (published)", "goal (issue)"
    );
    let row = |what: &str, ours: String, kueue: &str, goal: &str| {
        println!("{what:<46} {ours:>22} {kueue:>16} {goal:>14}");
    };
    row(
        "Jobs admitted / created",
        format!("{} / {}", n.admitted, n.created),
        &format!("{0} / {0}", total),
        "all",
    );
    row("wall time until all admitted", secs(all_admitted), "", "");
    row(
        "wall time until all finished",
        if done {
            format!("{:.1} s", end.as_secs_f64())
        } else {
            format!("> {:.0} s", end.as_secs_f64())
        },
        KUEUE_WALL,
        "< 351 s",
    );
    row(
        "ClusterQueue usage (time-weighted used/hard)",
        format!("{usage:.1} %"),
        KUEUE_USAGE,
        "> 80 %",
    );
    for (i, class) in CLASSES.iter().enumerate() {
        let v = &tta[i];
        row(
            &format!("time to admission, {} (mean)", class.name),
            mean(v),
            KUEUE_TTA[i],
            "below Kueue",
        );
        row(
            &format!(
                "  p50 / p90 (of {} admitted, {} never)",
                v.len(),
                waiting[i]
            ),
            format!("{:.1} / {:.1} s", pct(v, 0.5), pct(v, 0.9)),
            "",
            "",
        );
    }
    row(
        "admissions/s from queues (mean, peak 10 s)",
        format!("{queue_rate:.1}, {:.1}", peak as f64 / 10.0),
        "",
        "≥ 200",
    );
    row(
        "mutating webhook p50 / p99 (API server's call)",
        format!(
            "{:.1} / {:.1} ms",
            pct(&mutating, 0.5),
            pct(&mutating, 0.99)
        ),
        "",
        "p99 < 10 ms",
    );
    // Split by what the API server was writing: the tenants' creates, and
    // the updates (bizrq's own releases of what a round admitted, its
    // preemptions' suspends).
    for op in [
        "CREATE",
        "CREATE/patched",
        "CREATE/plain",
        "UPDATE",
        "UPDATE/patched",
        "UPDATE/plain",
    ] {
        let v = ms(fake.webhook_latencies(&format!("queue.bizrq.io/{op}")));
        row(
            &format!("  of {op}s ({}) p50 / p99 / max", v.len()),
            format!(
                "{:.1} / {:.1} / {:.0} ms",
                pct(&v, 0.5),
                pct(&v, 0.99),
                v.last().copied().unwrap_or(f64::NAN)
            ),
            "",
            "",
        );
    }
    // The same calls as the server timed them, from the handler's start
    // (`bizrq_admission_duration_seconds`): what the webhook itself took,
    // apart from the connection, TLS and the wait for a runtime thread.
    row(
        "  its handler's own time p50 / p99 (≤ bucket)",
        format!(
            "{:.1} / {:.1} ms",
            bucket_quantile(metrics, "mutate-workloads", 0.5) * 1000.0,
            bucket_quantile(metrics, "mutate-workloads", 0.99) * 1000.0
        ),
        "",
        "",
    );
    // What the mutating webhook answered, by decision.
    let mut decided: Vec<String> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("bizrq_admission_decisions_total{")
                && l.contains("endpoint=\"mutate-workloads\"")
        })
        .filter_map(|l| {
            let d = l.split("decision=\"").nth(1)?.split('"').next()?;
            Some(format!("{d} {}", l.rsplit(' ').next()?))
        })
        .collect();
    decided.sort();
    row("  its answers", decided.join(", "), "", "");
    // The admissions that charge at once (the group commit's paths,
    // `bizrq_admission_commit_duration_seconds`): what a review that
    // writes the quota waits, apart from the reviews that queue.
    let commits = "bizrq_admission_commit_duration_seconds";
    let mut paths: Vec<(String, f64)> = metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&format!("{commits}_count{{path=\""))?;
            let (path, n) = rest.split_once("\"} ")?;
            Some((path.to_string(), n.trim().parse().ok()?))
        })
        .collect();
    paths.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (path, n) in paths {
        let label = format!("path=\"{path}\"");
        row(
            &format!("  charges by path {path} ({n:.0}) p50 / p99 (≤ bucket)"),
            format!(
                "{:.1} / {:.1} ms",
                histogram_quantile(metrics, commits, &label, 0.5) * 1000.0,
                histogram_quantile(metrics, commits, &label, 0.99) * 1000.0
            ),
            "",
            "",
        );
    }
    row(
        "validating webhook p50 / p99",
        format!(
            "{:.1} / {:.1} ms",
            pct(&validating, 0.5),
            pct(&validating, 0.99)
        ),
        "",
        "",
    );
    row(
        "tenant's create p50 / p99",
        format!("{:.1} / {:.1} ms", pct(&create, 0.5), pct(&create, 0.99)),
        "",
        "",
    );
    // What each Job cost the API server: the quota reads and writes on
    // the admission and scheduling paths, counted whatever the bounded
    // history keeps.
    let tally = fake.tally();
    let count = |verb: &str, plural: &str| -> u64 {
        tally
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(verb)
                    .and_then(|r| r.strip_prefix(' '))
                    .is_some_and(|r| r.split('/').next() == Some(plural))
            })
            .map(|(_, v)| v)
            .sum()
    };
    const QUOTAS: &str = "bizgroupresourcequotas";
    let per_job = |x: u64| x as f64 / n.created.max(1) as f64;
    row(
        "API requests per Job: quota GETs / quota writes",
        format!(
            "{:.2} / {:.2}",
            per_job(count("get", QUOTAS)),
            per_job(count("put", QUOTAS) + count("patch", QUOTAS))
        ),
        "",
        "",
    );
    row(
        "  quota GETs whole / of the metadata alone",
        format!(
            "{:.2} / {:.2}",
            per_job(count("get", QUOTAS) - count("metadata get", QUOTAS)),
            per_job(count("metadata get", QUOTAS))
        ),
        "",
        "",
    );
    row(
        "  Job writes / quota LISTs (whole run)",
        format!(
            "{:.2} / {}",
            per_job(count("put", "jobs") + count("patch", "jobs")),
            count("list", QUOTAS)
        ),
        "",
        "",
    );
    // bizrq's own count of the whole reads its status writes and queue
    // rounds made, by cause (the API server's count above has every GET).
    let reread = |cause: &str| {
        metric(
            metrics,
            &format!("bizrq_quota_rereads_total{{cause=\"{cause}\"}}"),
        )
    };
    let per = |cause: &str| {
        let x = reread(cause);
        if x.is_nan() {
            0.0
        } else {
            x / n.created.max(1) as f64
        }
    };
    row(
        "  whole reads: lost swap / unproven / uncached / round",
        format!(
            "{:.2} / {:.2} / {:.2} / {:.2} (swaps lost {:.2})",
            per("conflict"),
            per("unproven"),
            per("uncached"),
            per("round"),
            metric(metrics, "bizrq_cas_conflicts_total") / n.created.max(1) as f64
        ),
        "",
        "",
    );
    row(
        "largest stored quota object (sampled each 1 s)",
        format!("{} B ({})", q.largest, q.largest_name),
        "",
        "< 64 KB",
    );
    row("refused creates", n.refused.to_string(), "", "0");
    row(
        "preemptions (Jobs suspended again)",
        evictions.to_string(),
        "",
        "",
    );
    row(
        "child above max (quota versions)",
        format!("{} of {}", q.child_over_max, q.versions),
        "",
        "0",
    );
    row(
        "parent above hard (versions)",
        q.parent_over_hard.to_string(),
        "",
        "0",
    );
    row(
        "cohort's children charged above its hard (cuts)",
        format!(
            "{} of {} (max {:.1} CPUs charged)",
            q.cohort_over_hard,
            q.versions,
            q.max_cohort_used as f64 / 1000.0
        ),
        "",
        "",
    );
    row(
        "  of those, every child within its loan",
        format!(
            "{} (at most {:.1} CPUs over hard)",
            q.over_within_loans,
            q.max_over_within_loans as f64 / 1000.0
        ),
        "",
        "all",
    );
    row(
        "child beyond a loan no longer backed (cuts)",
        q.beyond_unbacked.to_string(),
        "",
        "",
    );
    row(
        "child borrowing beyond its backed loan (cuts)",
        format!(
            "{} (at most {:.1} CPUs beyond)",
            q.beyond_loan,
            q.max_beyond_loan as f64 / 1000.0
        ),
        "",
        "0",
    );
    row(
        "cohort running above hard (Jobs' own truth)",
        format!("{} (max {} CPUs)", r.over_running, r.max_running_cohort),
        "",
        "0",
    );
    println!();
    println!(
        "bench process CPU {cpu:.0} s over {:.0} s wall (server, fake API server, generator and kubelet \
         share it; 2 cores); load average at end {}; quota watch relists {}",
        end.as_secs_f64(),
        load(),
        q.relists
    );
    if let Some(v) = &q.first_violation {
        println!("first invariant broken: {v}");
    }
    if let Some(v) = &q.first_over_within_loans {
        println!(
            "first cut above the parent's hard with every child within its loan (allowed: \
             lenders use the guarantee they lent; reclaim takes the loans back): {v}"
        );
    }
    if let Some(v) = &q.first_beyond_loan {
        println!("first borrowing beyond a loan: {v}");
    }
    if let Some(v) = &q.first_over_max {
        println!("first child above its max: {v}");
    }
    if !per_cq_waiting.is_empty() {
        let list: Vec<String> = per_cq_waiting
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!("never admitted, by quota: {}", list.join(", "));
    }
    let refusals: Vec<&String> = r
        .jobs
        .values()
        .filter_map(|j| j.refused.as_ref())
        .take(3)
        .collect();
    for why in refusals {
        println!("refused: {why}");
    }
    for e in r.cluster_errors.iter().take(5) {
        println!("cluster write failed: {e}");
    }
    if r.cluster_errors.len() > 5 {
        println!("… {} cluster writes failed in all", r.cluster_errors.len());
    }
    held_charges(fake, &r);
    if let Ok(dir) = std::env::var("KBENCH_DUMP") {
        // The quotas and Jobs as stored at the end, for a closer look.
        let all = json!({"quotas": fake.list("bizrq.io", "bizgroupresourcequotas"),
            "jobs": fake.list("batch", "jobs"), "pods": fake.list("", "pods")});
        let path = std::path::Path::new(&dir).join("kbench-end.json");
        // Said, never a panic: the figures above are the run's, and a
        // dump that cannot be written must not end it with a backtrace.
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, serde_json::to_vec_pretty(&all).unwrap()));
        match written {
            Ok(()) => println!("stored objects written to {}", path.display()),
            Err(e) => println!("stored objects not written to {}: {e}", path.display()),
        }
    }
    // A child past its max, or borrowing more than its parent lent it,
    // is never allowed. A cohort's children above its hard together,
    // each within its loan, is what bizrq's borrowing allows (a lender's
    // guarantee is honoured at once; the parent's reclaim takes the loans
    // back): reported, not failed.
    let broken = q.child_over_max + q.parent_over_hard + q.beyond_loan > 0;
    if broken {
        println!(
            "FAILED: a quota was stored above its max or hard, or a child borrowed beyond its loan"
        );
    }
    if o.smoke && n.admitted == 0 {
        println!("FAILED: nothing was admitted");
        return true;
    }
    broken
}
