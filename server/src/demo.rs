//! `bizrq serve --demo`: seed an empty standalone database with a sample
//! organisation — a tree of quotas, running workloads, users and roles, a
//! pending transfer and four weeks of usage history — so a first run shows
//! a living dashboard. Everything goes through the service layer the API
//! uses, so every tree rule holds; only the history is written directly,
//! computed from the same charges at earlier times.

use crate::authz::Role;
use crate::portal::auth::hash_password;
use crate::service::audit;
use crate::service::transfers::{TransferRequest, TransferService, DEFAULT_TTL_MS};
use crate::service::{Persist, Service, ServiceError};
use crate::store::audit::action;
use crate::store::history::{DAY_MS, HOUR_MS};
use crate::store::sql::SqlStore;
use quota::keys::{cash_target, CPU_TYPE_LABEL, GPU_TYPE_LABEL, QUOTA_LABEL};
use quota::object::{Quota, QuotaSpec};
use quota::resources::{self, ResourceList};
use quota::workload::{adapter_for_kind, PodSet};
use quota::Quantity;
use serde_json::json;
use std::collections::BTreeMap;

pub mod real_usage;

/// Root of the demo tree.
pub const ROOT: &str = "acme";
/// How far back the seeded history goes.
pub const HISTORY_MS: i64 = 28 * DAY_MS;
/// Who the audit log says did the seeding.
const ACTOR: &str = "demo";
const CASH_GPU: &str = "cash/requests.nvidia.com/gpu";
const CPU_MODELS: [&str; 4] = ["A1", "A2", "A3", "A4"];
const GPU_MODELS: [&str; 4] = ["T4", "V100", "A30", "A100"];

/// What `--demo` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The database already held this many quotas: nothing was touched.
    AlreadyPopulated(usize),
    Seeded(Seeded),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeded {
    pub quotas: usize,
    pub workloads: usize,
    /// Demo users, in the order they were created, with their roles.
    pub users: Vec<(String, Role, String)>,
    /// The password of every demo user, when it was generated (shown once).
    pub generated_password: Option<String>,
    pub samples: usize,
    pub transfer_id: i64,
    /// Entries recorded in `nlp`'s queue (`queued_work`).
    pub queued: usize,
}

#[derive(Clone, Copy)]
enum Kind {
    Deployment,
    Job,
}

#[derive(Clone, Copy)]
enum Load {
    /// Runs around the clock (training).
    Steady,
    /// Follows people: full on weekday working hours (UTC), less at night,
    /// least at weekends (online services).
    Diurnal,
    /// Submitted on working days, half of it over the weekend (batch).
    Weekdays,
}

#[derive(Clone, Copy)]
struct Work {
    kind: Kind,
    name: &'static str,
    replicas: i64,
    cpu_model: &'static str,
    cpu: i64,
    mem_gi: i64,
    gpu: Option<(&'static str, i64)>,
    /// Days before now it started (history shows nothing before).
    started_days_ago: i64,
    load: Load,
}

struct Team {
    name: &'static str,
    dept: &'static str,
    /// Cores of CPU models A1..A4.
    cpu: [i64; 4],
    mem_gi: i64,
    /// Cards of GPU models T4, V100, A30, A100.
    gpu: [i64; 4],
    pods: i64,
    /// Days the card-hour budget lasts at the current burn.
    runway_days: i64,
    /// Borrowing: (GPU model index, ceiling of that model and of all GPUs).
    max: Option<(usize, i64, i64)>,
    work: Vec<Work>,
}

const DEPTS: [&str; 3] = ["research", "platform", "product"];

#[allow(clippy::too_many_arguments)]
fn w(
    kind: Kind,
    name: &'static str,
    replicas: i64,
    cpu_model: &'static str,
    cpu: i64,
    mem_gi: i64,
    gpu: Option<(&'static str, i64)>,
    started_days_ago: i64,
    load: Load,
) -> Work {
    Work {
        kind,
        name,
        replicas,
        cpu_model,
        cpu,
        mem_gi,
        gpu,
        started_days_ago,
        load,
    }
}

fn teams() -> Vec<Team> {
    use Kind::*;
    use Load::*;
    let team = |name, dept, cpu, mem_gi, gpu, pods, runway_days, work| Team {
        name,
        dept,
        cpu,
        mem_gi,
        gpu,
        pods,
        runway_days,
        max: None,
        work,
    };
    let mut t = vec![
        // The busy one: a pre-training run started six days ago holds most
        // of its A100s, and its card-hours run out within ten days.
        team(
            "nlp",
            "research",
            [0, 0, 0, 96],
            1024,
            [0, 0, 0, 32],
            200,
            8,
            vec![
                w(
                    Deployment,
                    "llm-pretrain",
                    6,
                    "A4",
                    12,
                    128,
                    Some(("A100", 4)),
                    6,
                    Steady,
                ),
                w(
                    Job,
                    "tokenizer-eval",
                    2,
                    "A4",
                    8,
                    64,
                    Some(("A100", 2)),
                    28,
                    Weekdays,
                ),
            ],
        ),
        team(
            "vision",
            "research",
            [0, 0, 64, 32],
            768,
            [0, 16, 0, 16],
            150,
            30,
            vec![
                w(
                    Deployment,
                    "detector-train",
                    2,
                    "A3",
                    16,
                    128,
                    Some(("V100", 4)),
                    20,
                    Steady,
                ),
                w(
                    Job,
                    "segmentation-sweep",
                    4,
                    "A4",
                    6,
                    48,
                    Some(("A100", 2)),
                    28,
                    Weekdays,
                ),
                w(Deployment, "vision-api", 3, "A3", 4, 16, None, 28, Diurnal),
            ],
        ),
        team(
            "speech",
            "research",
            [0, 0, 48, 0],
            384,
            [0, 8, 8, 0],
            100,
            45,
            vec![
                w(
                    Deployment,
                    "asr-finetune",
                    1,
                    "A3",
                    16,
                    96,
                    Some(("V100", 4)),
                    12,
                    Steady,
                ),
                w(
                    Deployment,
                    "tts-serving",
                    2,
                    "A3",
                    4,
                    24,
                    Some(("A30", 2)),
                    28,
                    Diurnal,
                ),
            ],
        ),
        team(
            "rl",
            "research",
            [0, 32, 16, 0],
            256,
            [4, 0, 4, 0],
            100,
            60,
            vec![
                w(Job, "selfplay", 8, "A2", 2, 8, None, 28, Weekdays),
                w(
                    Deployment,
                    "policy-learner",
                    1,
                    "A3",
                    8,
                    64,
                    Some(("A30", 2)),
                    9,
                    Steady,
                ),
            ],
        ),
        team(
            "infra",
            "platform",
            [64, 64, 0, 0],
            512,
            [8, 0, 0, 0],
            300,
            90,
            vec![
                w(Deployment, "prometheus", 2, "A1", 8, 64, None, 28, Steady),
                w(Deployment, "log-indexer", 4, "A2", 6, 24, None, 28, Diurnal),
                w(
                    Deployment,
                    "gpu-canary",
                    2,
                    "A1",
                    1,
                    2,
                    Some(("T4", 1)),
                    28,
                    Steady,
                ),
            ],
        ),
        team(
            "data",
            "platform",
            [0, 96, 32, 0],
            1024,
            [8, 0, 8, 0],
            250,
            40,
            vec![
                w(Job, "spark-etl", 10, "A2", 8, 64, None, 28, Weekdays),
                w(
                    Deployment,
                    "feature-store",
                    3,
                    "A3",
                    4,
                    32,
                    None,
                    28,
                    Diurnal,
                ),
                w(
                    Job,
                    "embedding-backfill",
                    2,
                    "A3",
                    4,
                    32,
                    Some(("A30", 2)),
                    4,
                    Steady,
                ),
            ],
        ),
        team(
            "mlops",
            "platform",
            [0, 32, 0, 32],
            256,
            [0, 0, 8, 8],
            150,
            35,
            vec![
                w(
                    Deployment,
                    "model-registry",
                    2,
                    "A2",
                    2,
                    8,
                    None,
                    28,
                    Steady,
                ),
                w(
                    Deployment,
                    "notebook-pool",
                    6,
                    "A4",
                    4,
                    32,
                    Some(("A30", 1)),
                    28,
                    Diurnal,
                ),
            ],
        ),
        team(
            "search",
            "product",
            [0, 0, 64, 32],
            512,
            [16, 0, 8, 0],
            200,
            50,
            vec![
                w(
                    Deployment,
                    "ranker-serving",
                    8,
                    "A3",
                    4,
                    16,
                    Some(("T4", 1)),
                    28,
                    Diurnal,
                ),
                w(
                    Job,
                    "reranker-distill",
                    2,
                    "A4",
                    8,
                    64,
                    Some(("A30", 2)),
                    10,
                    Weekdays,
                ),
            ],
        ),
        team(
            "recsys",
            "product",
            [0, 0, 96, 64],
            1024,
            [0, 16, 0, 16],
            250,
            20,
            vec![
                w(
                    Deployment,
                    "recsys-train",
                    3,
                    "A4",
                    16,
                    192,
                    Some(("A100", 4)),
                    28,
                    Steady,
                ),
                w(
                    Deployment,
                    "candidate-gen",
                    6,
                    "A3",
                    8,
                    32,
                    Some(("V100", 1)),
                    28,
                    Diurnal,
                ),
            ],
        ),
        team(
            "assistant",
            "product",
            [0, 0, 0, 64],
            512,
            [8, 0, 0, 16],
            200,
            25,
            vec![
                w(
                    Deployment,
                    "chat-serving",
                    4,
                    "A4",
                    8,
                    64,
                    Some(("A100", 2)),
                    28,
                    Diurnal,
                ),
                w(
                    Deployment,
                    "safety-classifier",
                    4,
                    "A4",
                    2,
                    8,
                    Some(("T4", 1)),
                    21,
                    Diurnal,
                ),
            ],
        ),
    ];
    // Two teams may borrow idle capacity beyond their guarantee (§5).
    t[0].max = Some((3, 40, 40));
    t[3].max = Some((2, 8, 12));
    t
}

/// Shared services bound to the platform department itself, so a node with
/// children also has usage of its own.
fn platform_own_work() -> Vec<Work> {
    vec![w(
        Kind::Deployment,
        "ingress-gateway",
        3,
        "A1",
        2,
        4,
        None,
        28,
        Load::Diurnal,
    )]
}

fn units(n: i64) -> Quantity {
    Quantity::from_units(n)
}

fn gi(n: i64) -> Quantity {
    Quantity::from_nanos(n as i128 * (1i128 << 30) * 1_000_000_000)
}

/// Every key of the tree, for CPU cores per model, memory, GPUs per model,
/// pods and card-hours.
fn hard(cpu: [i64; 4], mem_gi: i64, gpu: [i64; 4], pods: i64, cash: i64) -> ResourceList {
    let mut h = ResourceList::new();
    let cores: i64 = cpu.iter().sum();
    h.insert("requests.cpu".into(), units(cores));
    h.insert("limits.cpu".into(), units(cores));
    for (m, n) in CPU_MODELS.iter().zip(cpu) {
        h.insert(format!("limits.cpu.{m}"), units(n));
    }
    h.insert("requests.memory".into(), gi(mem_gi));
    h.insert("requests.nvidia.com/gpu".into(), units(gpu.iter().sum()));
    for (m, n) in GPU_MODELS.iter().zip(gpu) {
        h.insert(format!("requests.nvidia.com/gpu.{m}"), units(n));
    }
    h.insert("pods".into(), units(pods));
    h.insert(CASH_GPU.into(), units(cash));
    h
}

/// Hours since the epoch that are weekday working hours (UTC), weekday
/// nights, weekends: the load in percent of a workload's full size.
fn load_percent(load: Load, at_ms: i64) -> i64 {
    let day = at_ms.div_euclid(DAY_MS);
    let hour = at_ms.rem_euclid(DAY_MS) / HOUR_MS;
    // 1970-01-01 was a Thursday: Monday is 0.
    let weekend = (day + 3).rem_euclid(7) >= 5;
    let working = (8..19).contains(&hour);
    match (load, weekend, working) {
        (Load::Steady, ..) => 100,
        (Load::Diurnal, false, true) => 100,
        (Load::Diurnal, false, false) => 60,
        (Load::Diurnal, true, _) => 40,
        (Load::Weekdays, false, _) => 100,
        (Load::Weekdays, true, _) => 50,
    }
}

/// Replicas of a workload running at `at_ms`, seen from `now_ms`.
fn replicas_at(work: &Work, at_ms: i64, now_ms: i64) -> i64 {
    if at_ms < now_ms - work.started_days_ago * DAY_MS {
        return 0;
    }
    // Rounded up: something runs whenever the workload exists.
    (work.replicas * load_percent(work.load, at_ms) + 99) / 100
}

/// A workload as the webhook would read it from the cluster.
struct Bound {
    quota: String,
    wref: String,
    pod_sets: Vec<PodSet>,
    work: Work,
}

fn object(quota: &str, work: &Work) -> serde_json::Value {
    let mut labels = json!({
        "app": work.name,
        QUOTA_LABEL: quota,
        CPU_TYPE_LABEL: work.cpu_model,
    });
    let mut res = json!({"cpu": work.cpu.to_string(), "memory": format!("{}Gi", work.mem_gi)});
    if let Some((model, n)) = work.gpu {
        labels[GPU_TYPE_LABEL] = model.into();
        res["nvidia.com/gpu"] = n.to_string().into();
    }
    let template = json!({
        "metadata": {"labels": {"app": work.name}},
        "spec": {"containers": [{
            "name": work.name,
            "image": format!("registry.acme.example/{quota}/{}:1.0", work.name),
            "resources": {"requests": res, "limits": res},
        }]},
    });
    let metadata = json!({"name": work.name, "namespace": quota, "labels": labels});
    match work.kind {
        Kind::Deployment => json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": work.replicas, "selector": {"matchLabels": {"app": work.name}}, "template": template},
        }),
        // Batch work declares its longest run (what start estimates and
        // budget reservations read).
        Kind::Job => json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {"parallelism": work.replicas, "completions": work.replicas * 50,
                "activeDeadlineSeconds": JOB_DEADLINE_H * 3600, "template": template},
        }),
    }
}

fn bind(service: &Service, quota: &str, work: Work) -> Result<Bound, ServiceError> {
    let (group, kind) = match work.kind {
        Kind::Deployment => ("apps", "Deployment"),
        Kind::Job => ("batch", "Job"),
    };
    let adapter = adapter_for_kind(group, kind)
        .ok_or_else(|| ServiceError::Internal(format!("no adapter for {kind}")))?;
    let read = adapter
        .read(&object(quota, &work).to_string(), &service.keys)
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    Ok(Bound {
        quota: quota.to_string(),
        wref: adapter.workload_ref(quota, work.name).into(),
        pod_sets: read.pod_sets,
        work,
    })
}

/// Every demo workload, read as the webhook reads it, at its size now.
fn bound_all(service: &Service) -> Result<Vec<Bound>, ServiceError> {
    let mut all_work: Vec<(String, Work)> = Vec::new();
    for t in teams() {
        for wk in &t.work {
            all_work.push((t.name.to_string(), *wk));
        }
    }
    for wk in platform_own_work() {
        all_work.push(("platform".to_string(), wk));
    }
    all_work
        .into_iter()
        .map(|(quota, wk)| bind(service, &quota, wk))
        .collect()
}

/// The pod sets of a workload at `count` replicas.
fn scaled(pod_sets: &[PodSet], count: i64) -> Vec<PodSet> {
    pod_sets
        .iter()
        .map(|s| PodSet { count, ..s.clone() })
        .collect()
}

/// Cash accumulator units one hour of `pod_sets` costs on `cash_key`.
fn hour_cost(service: &Service, pod_sets: &[PodSet], cash_key: &str) -> i128 {
    let Some(target) = cash_target(cash_key) else {
        return 0;
    };
    pod_sets
        .iter()
        .map(|s| quota::cash::set_cost(s, s.count, target, HOUR_MS, &service.prices))
        .sum()
}

/// Who submitted a demo quota's workloads: its member (a department's own
/// work, its owner), as the webhook records `userInfo.username`.
fn submitter(quota: &str) -> String {
    if DEPTS.contains(&quota) {
        format!("owner-{quota}")
    } else {
        format!("member-{quota}")
    }
}

/// Start times of the hourly history intervals, oldest first: the hour
/// starting at `now − 28 d` up to the one ending at `now`.
fn hours(now_ms: i64) -> impl Iterator<Item = i64> {
    (1..=HISTORY_MS / HOUR_MS)
        .rev()
        .map(move |k| now_ms - k * HOUR_MS)
}

/// Every demo Job declares this run time (`activeDeadlineSeconds`).
const JOB_DEADLINE_H: i64 = 6;

/// The team whose quota queues (`spec.queueing: Queue`).
const QUEUE_TEAM: &str = "nlp";

/// Jobs waiting in `nlp`'s queue: (name, pods, A100 per pod, run hours,
/// minutes since submitted, submitter).
const QUEUED: [(&str, i64, i64, i64, i64, &str); 3] = [
    ("finetune-13b", 8, 2, 10, 125, "dana@acme.example"),
    ("eval-harness", 1, 2, 1, 50, "li.wei@acme.example"),
    ("continual-pretrain", 4, 2, 1080, 20, "sam@acme.example"),
];

/// `nlp`'s queue as recorded status. Standalone mode has no object to
/// suspend, so nothing queues or leaves a queue there (docs/queueing.md
/// §7): these entries are written once, as the controller's round would
/// state them at seeding — the same pure functions (`next_admissions`
/// against its pool, limits and card-hour budget, `estimate::for_status`
/// against its charged work and their declared ends, `status`) — so the
/// portal's queue views show what a cluster shows. They stay as seeded.
async fn record_queue(service: &Service, now: i64) -> anyhow::Result<usize> {
    use quota::object::queue::Queued;
    use quota::queue::{self, Pool};
    let adapter = adapter_for_kind("batch", "Job").expect("Job adapter");
    let mut waiting: Vec<Queued> = Vec::new();
    for (name, pods, cards, run_h, ago_min, by) in QUEUED {
        let work = w(
            Kind::Job,
            name,
            pods,
            "A4",
            1,
            16,
            Some(("A100", cards)),
            0,
            Load::Steady,
        );
        let mut obj = object(QUEUE_TEAM, &work);
        obj["spec"]["activeDeadlineSeconds"] = json!(run_h * 3600);
        let read = adapter.read(&obj.to_string(), &service.keys)?;
        waiting.push(Queued {
            workload_ref: adapter.workload_ref(QUEUE_TEAM, name).into(),
            uid: crate::util::new_uid(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: now - ago_min * 60_000,
            pod_sets: read.pod_sets.into(),
            run_ms: Some(run_h * HOUR_MS),
            submitted_by: quota::submitters::submitter(by),
            preempted: false,
        });
    }
    // Charged work ends at its admission + its declared run time.
    let runs: BTreeMap<String, i64> = teams()
        .into_iter()
        .filter(|t| t.name == QUEUE_TEAM)
        .flat_map(|t| t.work)
        .filter(|w| matches!(w.kind, Kind::Job))
        .map(|w| {
            let a = adapter_for_kind("batch", "Job").expect("Job adapter");
            (
                a.workload_ref(QUEUE_TEAM, w.name).into(),
                JOB_DEADLINE_H * HOUR_MS,
            )
        })
        .collect();
    let q = service.get(QUEUE_TEAM).await?.quota;
    let limits = service.queue_limits(&q).await?;
    let price_list = service.price_list();
    let entries = {
        let pool = Pool::new(&q, &limits);
        let budgets = queue::budgets::of(&q);
        let views: Vec<_> = budgets
            .iter()
            .map(|b| b.view(&service.prices, &price_list))
            .collect();
        let decisions = queue::next_admissions(&waiting, &pool, &views, &q.spec.queueing, now);
        let running: Vec<queue::Running> = q
            .status
            .workloads
            .iter()
            .map(|(wref, c)| {
                let start = c
                    .admitted
                    .as_deref()
                    .and_then(quota::time::parse_rfc3339)
                    .or_else(|| quota::time::parse_rfc3339(&c.since))
                    .unwrap_or(now);
                queue::Running {
                    workload_ref: wref.clone(),
                    usage: c.usage(),
                    ends_ms: runs.get(wref).map(|r| start + r),
                }
            })
            .collect();
        let estimates = queue::estimate::for_status(
            &waiting,
            &decisions,
            &pool,
            &running,
            &q.spec.queueing,
            now,
            queue::estimate::ESTIMATE_HEAD,
        );
        queue::status(&waiting, &decisions, &estimates)
    };
    let n = entries.len();
    service
        .update_status(QUEUE_TEAM, false, |q| {
            q.status.queue = entries.clone();
            Ok((true, ()))
        })
        .await?;
    Ok(n)
}

/// Round up to a multiple of `step`.
fn ceil_to(n: i128, step: i128) -> i128 {
    ((n + step - 1) / step) * step
}

/// Seed the demo organisation when the database holds no quota.
pub async fn seed(
    service: &Service,
    sql: &SqlStore,
    transfers: &TransferService,
    password: Option<&str>,
) -> anyhow::Result<Outcome> {
    let existing = service.list().await?.len();
    if existing > 0 {
        return Ok(Outcome::AlreadyPopulated(existing));
    }
    let now = service.now();
    let teams = teams();

    // The workloads, read as the webhook reads them, at their size now.
    let mut bound: Vec<Bound> = Vec::new();
    let mut team_specs: Vec<(&str, &str, QuotaSpec)> = Vec::new();
    let mut work_of: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for b in bound_all(service)? {
        work_of
            .entry(b.quota.clone())
            .or_default()
            .push(bound.len());
        bound.push(b);
    }

    // Card-hours spent over the history, per quota, hour by hour: the
    // budget of each team lasts `runway_days` more at today's burn.
    let spent_by = |quota: &str| -> i128 {
        let mut total = 0i128;
        for i in work_of.get(quota).into_iter().flatten() {
            let b = &bound[*i];
            for at in hours(now) {
                total += hour_cost(
                    service,
                    &scaled(&b.pod_sets, replicas_at(&b.work, at, now)),
                    CASH_GPU,
                );
            }
        }
        total
    };
    let burn_now = |quota: &str| -> i128 {
        work_of
            .get(quota)
            .into_iter()
            .flatten()
            .map(|i| {
                let b = &bound[*i];
                hour_cost(
                    service,
                    &scaled(&b.pod_sets, replicas_at(&b.work, now, now)),
                    CASH_GPU,
                )
            })
            .sum()
    };
    let unit = quota::cash::MS_PER_HOUR * quota::cash::PER_MILLE * 1_000_000_000;
    for t in &teams {
        let budget = spent_by(t.name) + burn_now(t.name) * 24 * t.runway_days as i128;
        let cash = (ceil_to(budget, 500 * unit) / unit) as i64;
        let mut spec = QuotaSpec {
            parent: t.dept.to_string(),
            hard: hard(t.cpu, t.mem_gi, t.gpu, t.pods, cash),
            ..Default::default()
        };
        if t.name == QUEUE_TEAM {
            spec.queueing = quota::object::queueing::QueuePolicy::queue();
        }
        if let Some((model, ceiling, all)) = t.max {
            spec.max.insert(
                format!("requests.nvidia.com/gpu.{}", GPU_MODELS[model]),
                units(ceiling),
            );
            spec.max
                .insert("requests.nvidia.com/gpu".into(), units(all));
        }
        team_specs.push((t.name, t.dept, spec));
    }

    // Departments and the root: what their children hold, and room to spare.
    let spare = |scale: i64, cash: i64| {
        hard(
            [16 * scale; 4],
            256 * scale,
            [4 * scale; 4],
            100 * scale,
            cash,
        )
    };
    let mut dept_specs: Vec<(&str, QuotaSpec)> = Vec::new();
    for d in DEPTS {
        let mut h = ResourceList::new();
        for (_, dept, s) in &team_specs {
            if *dept == d {
                resources::add_into(&mut h, &s.hard);
            }
        }
        let cash = resources::get(&h, CASH_GPU).nanos() / 1_000_000_000;
        resources::add_into(&mut h, &spare(1, ceil_to(cash / 5, 1000) as i64));
        dept_specs.push((
            d,
            QuotaSpec {
                parent: ROOT.into(),
                hard: h,
                ..Default::default()
            },
        ));
    }
    let mut root = ResourceList::new();
    for (_, s) in &dept_specs {
        resources::add_into(&mut root, &s.hard);
    }
    let cash = resources::get(&root, CASH_GPU).nanos() / 1_000_000_000;
    resources::add_into(&mut root, &spare(4, ceil_to(cash / 10, 1000) as i64));

    // The tree, top down, through the same checks as the API.
    let mut created: Vec<Quota> = Vec::new();
    let root_spec = QuotaSpec {
        hard: root,
        ..Default::default()
    };
    created.push(
        service
            .create_quota(ROOT, root_spec, Persist::Here, "", false)
            .await?,
    );
    for (d, s) in dept_specs {
        created.push(service.create_quota(d, s, Persist::Here, "", false).await?);
    }
    for (t, _, s) in team_specs {
        created.push(service.create_quota(t, s, Persist::Here, "", false).await?);
    }
    for q in &created {
        let entry = crate::store::audit::entry(
            now,
            ACTOR,
            action::QUOTA_CREATE,
            q.name(),
            None,
            Some(audit::quota_json(q)),
            "demo organisation",
        );
        sql.append_audit(&entry).await?;
    }

    // What runs now, charged as the webhook charges it, with who asked
    // (the review's userInfo.username): the ledger's entries carry it.
    for b in &bound {
        let count = replicas_at(&b.work, now, now);
        let user = submitter(&b.quota);
        service
            .charge(
                crate::service::ChargeRequest::new(
                    &b.quota,
                    &b.wref,
                    scaled(&b.pod_sets, count),
                    &crate::util::new_uid(),
                )
                .submitted_by(Some(user.as_str())),
            )
            .await?;
    }

    // Four weeks of history: each quota as it is now, with the workloads at
    // their size of each hour and the card-hours spent before it; the
    // engine's own refresh derives used and selfUsed. Each hour's spending
    // is written to the budget ledger as the standalone accrual writes it
    // (`charge_entries`: per workload, model, QoS class and user), and the
    // status spends exactly the ledger's sum, so reports over the history
    // agree with the budgets to the acc.
    let current = service.list().await?;
    let mut spent: BTreeMap<String, i128> = BTreeMap::new();
    let mut samples = 0;
    let mut ledger: Vec<quota::object::budgets::Entry> = Vec::new();
    let list = service.price_list();
    for at in hours(now) {
        let mut past = Vec::with_capacity(current.len());
        for q in &current {
            let mut q = q.clone();
            for i in work_of.get(q.name()).into_iter().flatten() {
                let b = &bound[*i];
                let count = replicas_at(&b.work, at, now);
                if count == 0 {
                    q.status.workloads.remove(&b.wref);
                } else if let Some(c) = q.status.workloads.get_mut(&b.wref) {
                    c.pod_sets = scaled(&b.pod_sets, count);
                }
            }
            let before = spent.get(q.name()).copied().unwrap_or(0);
            q.status.cash_accrued.clear();
            q.status.add_accrued(CASH_GPU, before);
            q.status.refresh(&q.spec);
            let mut held = q.status.workloads.clone();
            let since = quota::time::format_rfc3339(at);
            for c in held.values_mut() {
                c.since = since.clone();
            }
            let entries = quota::budget::ledger::charge_entries(
                q.name(),
                &q.spec,
                &held,
                &q.status.users,
                at,
                at + HOUR_MS,
                &service.prices,
                &list,
            );
            // The ledger holds acc, the status its per-mille unit; whole
            // cards for whole hours divide exactly.
            let hour = quota::budget::price_list::to_cash_accrued(
                entries
                    .iter()
                    .filter(|e| e.key == CASH_GPU)
                    .map(|e| e.amount)
                    .sum(),
            );
            ledger.extend(entries);
            spent.insert(q.name().to_string(), before + hour);
            past.push(q);
        }
        samples += sql.record_samples(at, &past).await?;
    }

    for chunk in ledger.chunks(5_000) {
        sql.append_ledger(chunk).await?;
    }
    // Today's status spends exactly what the history did, on top of what
    // accrued since the charges.
    for (name, amount) in &spent {
        service
            .update_status(name, false, |q| {
                q.status.add_accrued(CASH_GPU, *amount);
                q.status.refresh(&q.spec);
                Ok((*amount != 0, ()))
            })
            .await?;
    }
    // Four weeks of real usage, invented as Prometheus would answer it.
    real_usage::seed(service, sql, &bound).await?;
    // nlp's queue, before the latest sample: that sample is today's status.
    let queued = record_queue(service, now).await?;
    let latest = service.list().await?;
    samples += sql.record_samples(service.now(), &latest).await?;
    sql.compact_samples(service.now()).await?;

    // People: an owner per department, a member per team, one password.
    let (password, generated_password) = match password.filter(|p| !p.is_empty()) {
        Some(p) => (p.to_string(), None),
        None => {
            let p = crate::util::hex(&rand::random::<[u8; 8]>());
            (p.clone(), Some(p))
        }
    };
    // One hash for all: they share the password anyway, and argon2 is slow.
    let hash = hash_password(password).await?;
    let mut people: Vec<(String, Role, String)> = DEPTS
        .iter()
        .map(|d| (format!("owner-{d}"), Role::Owner, d.to_string()))
        .collect();
    people.extend(teams.iter().map(|t| {
        (
            format!("member-{}", t.name),
            Role::Member,
            t.name.to_string(),
        )
    }));
    for (username, role, quota) in &people {
        let user = sql.create_user(username, &hash, false, now).await?;
        // An address each, so a demo pointed at an SMTP server (aiosmtpd)
        // mails its owners their alerts.
        sql.set_user_email(user.id, Some(&format!("{username}@acme.example")))
            .await?;
        sql.set_binding(user.id, quota, *role, now).await?;
        for entry in [
            crate::store::audit::entry(
                now,
                ACTOR,
                action::USER_CREATE,
                &audit::user_target(username),
                None,
                Some(audit::user_json(&user)),
                "demo user",
            ),
            crate::store::audit::entry(
                now,
                ACTOR,
                action::ROLE_ADD,
                quota,
                None,
                Some(json!({"user": username, "quota": quota, "role": role.as_str()})),
                &format!("{username} is {} of {quota}", role.as_str()),
            ),
        ] {
            sql.append_audit(&entry).await?;
        }
    }

    // Vision wants the V100s speech is not using, waiting for an approver.
    let amounts: ResourceList = [
        ("requests.nvidia.com/gpu.V100".to_string(), units(4)),
        ("requests.nvidia.com/gpu".to_string(), units(4)),
    ]
    .into();
    let transfer = transfers
        .request(
            TransferRequest {
                from: Some("speech".into()),
                to: "vision".into(),
                amounts,
                reason: "detector-train needs 4 more V100 for the benchmark sprint; \
                         speech's asr-finetune only uses half of theirs"
                    .into(),
                revert_at: None,
                kind: Default::default(),
                source: None,
                until: None,
            },
            "owner-research",
            now,
            DEFAULT_TTL_MS,
        )
        .await?;

    Ok(Outcome::Seeded(Seeded {
        quotas: created.len(),
        workloads: bound.len(),
        users: people,
        generated_password,
        samples,
        transfer_id: transfer.id,
        queued,
    }))
}
