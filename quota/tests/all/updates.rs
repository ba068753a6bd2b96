//! An update is judged as a create of the new object would be, given what
//! the old one holds (docs/budgets.md §2, "Updates"; `quota::update`).
//!
//! For every kind in the adapter table, pairs of objects that differ in
//! one input admission, budgets, queueing or pricing read — pod count,
//! GPUs per pod, GPU model label, QoS class, declared run time (the kind's
//! field or the annotation: longer, shorter, removed, wrong), priority
//! class, quota label, opt-out label — are judged twice at one instant:
//! the old object admitted and then updated to the new one, as the
//! webhook does it; and the new object created on the quotas as they
//! were before the old one came. Both are allowed or both refused (a
//! budget's refusal in the same words); allowed, the workload holds the
//! same charge and the same reservations, and each quota the same use; a
//! check of the new object afterwards fits and changes nothing.
//! `update::changed` reports the input that was changed whenever the two
//! objects read differently.

use proptest::prelude::*;
use quota::admission::{self, Denial, Step};
use quota::budget::price_list::{PriceList, PriceVersion, Weight};
use quota::budget::reservations::{self, RunDecl};
use quota::cash::QosMultipliers;
use quota::object::budgets::{BudgetPolicy, WithoutRunTime};
use quota::object::{Charge, Quota, QuotaSpec};
use quota::update::{changed, Input};
use quota::workload::{ChargeMode, Workload, ADAPTERS};
use quota::{KeyConfig, Quantity};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const GPU: &str = "requests.nvidia.com/gpu";
const CASH: &str = "cash/requests.nvidia.com/gpu";
const NOW: i64 = 1_795_255_200_000;

/// How a workload declares its run time.
#[derive(Clone, Debug, PartialEq)]
enum Run {
    None,
    /// The kind's own field where it has one (a Job's or a Kubeflow job's
    /// activeDeadlineSeconds), else the annotation.
    Field(i64),
    Annotation(String),
}

#[derive(Clone, Debug)]
struct Params {
    pods: i64,
    gpus: i64,
    model: Option<&'static str>,
    burstable: bool,
    run: Run,
    priority: Option<&'static str>,
    quota: Option<&'static str>,
    opt_out: bool,
}

fn run() -> impl Strategy<Value = Run> {
    prop_oneof![
        Just(Run::None),
        prop_oneof![Just(60), Just(3600), Just(7200), Just(32400)].prop_map(Run::Field),
        prop_oneof![Just("1m"), Just("2h"), Just("9h"), Just("1.5h")]
            .prop_map(|s| Run::Annotation(s.to_string())),
    ]
}

fn params() -> impl Strategy<Value = Params> {
    (
        1i64..4,
        0i64..3,
        prop::option::of(prop_oneof![Just("A100"), Just("H100")]),
        any::<bool>(),
        run(),
        prop::option::of(prop_oneof![Just("low"), Just("high")]),
        prop_oneof![Just(Some("team")), Just(Some("other")), Just(None)],
        any::<bool>(),
    )
        .prop_map(
            |(pods, gpus, model, burstable, run, priority, quota, opt_out)| Params {
                pods,
                gpus,
                model,
                burstable,
                run,
                priority,
                quota,
                opt_out,
            },
        )
}

/// `p` with one input changed (`which` of the eight), to `to`'s value.
fn mutate(p: &Params, which: usize, to: &Params) -> Params {
    let mut n = p.clone();
    match which {
        0 => n.pods = to.pods,
        1 => n.gpus = to.gpus,
        2 => n.model = to.model,
        3 => n.burstable = to.burstable,
        4 => n.run = to.run.clone(),
        5 => n.priority = to.priority,
        6 => n.quota = to.quota,
        _ => n.opt_out = to.opt_out,
    }
    n
}

const INPUTS: [Input; 8] = [
    Input::Counts,
    Input::Requests,
    Input::Model,
    Input::Qos,
    Input::RunTime,
    Input::PriorityClass,
    Input::Quota,
    Input::OptOut,
];

fn template(p: &Params) -> Value {
    let mut requests = json!({"cpu": "1", "memory": "1Gi"});
    let mut limits = json!({});
    if !p.burstable {
        limits = json!({"cpu": "1", "memory": "1Gi"});
    }
    if p.gpus > 0 {
        requests["nvidia.com/gpu"] = json!(p.gpus.to_string());
        limits["nvidia.com/gpu"] = json!(p.gpus.to_string());
    }
    let mut spec = json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "i",
        "resources": {"requests": requests, "limits": limits}}]});
    if let Some(c) = p.priority {
        spec["priorityClassName"] = json!(c);
    }
    json!({"spec": spec})
}

/// The object of `kind` (an adapter's kind, by its index) for `p`.
fn object(kind: usize, p: &Params) -> Value {
    let a = &ADAPTERS[kind];
    let tpl = template(p);
    let api = if a.group.is_empty() {
        "v1".to_string()
    } else {
        format!("{}/v1", a.group)
    };
    let mut labels = serde_json::Map::new();
    if let Some(q) = p.quota {
        labels.insert("biz.group.resource.quota".into(), json!(q));
    }
    if p.opt_out {
        labels.insert("bizrq.io/queueing".into(), json!("Refuse"));
    }
    if let Some(m) = p.model {
        labels.insert("biz.group.resource.quota/gpu-type".into(), json!(m));
    }
    let mut o = json!({"apiVersion": api, "kind": a.kind,
        "metadata": {"name": "w", "namespace": "ml", "uid": "u-w", "labels": labels}});
    let mut field: Option<&[&str]> = None;
    o["spec"] = match (a.group, a.kind) {
        ("batch", "Job") => {
            field = Some(&["spec", "activeDeadlineSeconds"]);
            json!({"parallelism": p.pods, "template": tpl})
        }
        ("batch", "CronJob") => json!({"schedule": "* * * * *",
            "jobTemplate": {"spec": {"parallelism": p.pods, "template": tpl}}}),
        ("kubeflow.org", _) => {
            field = Some(&["spec", "runPolicy", "activeDeadlineSeconds"]);
            let specs = match a.kind {
                "TFJob" => "tfReplicaSpecs",
                "PyTorchJob" => "pytorchReplicaSpecs",
                _ => "mpiReplicaSpecs",
            };
            json!({specs: {"Worker": {"replicas": p.pods, "template": tpl}}, "runPolicy": {}})
        }
        ("batch.volcano.sh", _) => {
            json!({"tasks": [{"name": "worker", "replicas": p.pods, "template": tpl}]})
        }
        ("jobset.x-k8s.io", _) => json!({"replicatedJobs": [{"name": "w", "replicas": 1,
            "template": {"spec": {"parallelism": p.pods, "template": tpl}}}]}),
        _ => json!({"replicas": p.pods, "template": tpl}),
    };
    let annotate = |o: &mut Value, text: &str| {
        o["metadata"]["annotations"] = json!({"biz.group.resource.quota/max-runtime": text});
    };
    match (&p.run, field) {
        (Run::None, _) => {}
        (Run::Field(s), Some(path)) => {
            let mut cur = &mut o;
            for k in &path[..path.len() - 1] {
                cur = &mut cur[*k];
            }
            cur[path[path.len() - 1]] = json!(s);
        }
        (Run::Field(s), None) => annotate(&mut o, &s.to_string()),
        (Run::Annotation(t), _) => annotate(&mut o, t),
    }
    o
}

fn read(kind: usize, p: &Params) -> Workload {
    ADAPTERS[kind]
        .read(&object(kind, p).to_string(), &KeyConfig::default())
        .expect("generated objects are valid")
}

/// Everything a decision reads of `w`, to tell whether two objects read
/// the same.
fn reading(w: &Workload) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}",
        w.quota(),
        w.pod_sets,
        w.run_time,
        w.priority_classes,
        w.meta.labels.get("bizrq.io/queueing")
    )
}

#[derive(Clone, Debug)]
struct World {
    budget: i64,
    cards: i64,
    policy: WithoutRunTime,
    cap: Option<i64>,
    /// Another workload's reservation in `team`: cards × hours.
    other: (i64, i64),
}

fn world() -> impl Strategy<Value = World> {
    (
        0i64..60,
        2i64..16,
        prop_oneof![
            Just(WithoutRunTime::Admit),
            Just(WithoutRunTime::Refuse),
            Just(WithoutRunTime::ReserveDefault {
                horizon_seconds: 3600
            }),
        ],
        prop::option::of(1i64..60),
        (0i64..3, 0i64..4),
    )
        .prop_map(|(budget, cards, policy, cap, other)| World {
            budget,
            cards,
            policy,
            cap,
            other,
        })
}

fn quota(name: &str, w: &World) -> Quota {
    let units = |n: i64| Quantity::from_units(n);
    Quota::new(
        name,
        QuotaSpec {
            hard: [
                (GPU.to_string(), units(w.cards)),
                (format!("{GPU}.H100"), units(w.cards / 2)),
                ("requests.cpu".to_string(), units(100)),
                (CASH.to_string(), units(w.budget)),
            ]
            .into(),
            budgets: [(
                CASH.to_string(),
                BudgetPolicy {
                    without_run_time: w.policy,
                    reservation_cap: w.cap.map(units),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        },
    )
}

fn prices() -> (QosMultipliers, PriceList) {
    let qos = QosMultipliers {
        guaranteed: 1000,
        burstable: 1500,
        best_effort: 1000,
    };
    let list = PriceList {
        versions: vec![PriceVersion {
            effective_ms: 0,
            weights: [("nvidia.com/gpu.H100".to_string(), Weight(2500))].into(),
            default_weight: Weight(1000),
            quality: None,
        }],
        currency: None,
    };
    (qos, list)
}

fn charge_of(w: &Workload, now_ms: i64) -> Charge {
    let now = quota::time::format_rfc3339(now_ms);
    Charge {
        pod_sets: w.pod_sets.clone(),
        hpa: None,
        since: now.clone(),
        uid: "review".into(),
        admitted: Some(now),
    }
}

type Quotas = BTreeMap<String, Quota>;

/// A denial as compared: a budget's in its words; a hard key's by quota
/// and key (an update asks the difference it adds, of what is left beside
/// what it holds; a create all it needs).
fn said(d: &Denial) -> String {
    match d {
        Denial::Short(s) => s
            .iter()
            .map(|x| format!("{} {} is short", x.quota, x.key))
            .collect::<Vec<_>>()
            .join("; "),
        other => other.to_string(),
    }
}

/// The webhook's review of `old` → `new` (old None: a create) at `now`,
/// each step a write of its own quota: the charge (with its budgets'
/// reservations) first, so a refusal leaves everything as it was.
fn review_at(
    qs: &mut Quotas,
    old: Option<&Workload>,
    new: &Workload,
    run: RunDecl,
    now: i64,
) -> Result<(), String> {
    let (qos, list) = prices();
    let wref = "batch/Job/ml/w";
    for step in admission::plan(old, Some(new)) {
        match step {
            Step::Charge { quota, workload } => {
                let q = qs.get_mut(quota).unwrap();
                let held = q.status.workloads.get(wref).cloned();
                let c = charge_of(workload, now);
                let reserved =
                    reservations::decide(q, wref, held.as_ref(), &c, &run, now, &qos, &list)
                        .map_err(|r| said(&Denial::Budget(Box::new(r))))?;
                let mut next = q.clone();
                admission::charge(&mut next, wref, c).map_err(|d| said(&d))?;
                reservations::apply(&mut next.status, wref, reserved);
                next.status.refresh(&next.spec.clone());
                *q = next;
            }
            Step::Check { quota, usage } => {
                let q = qs.get_mut(quota).unwrap();
                admission::check(&mut q.clone(), &usage).map_err(|d| said(&d))?;
            }
            Step::Release { quota } => {
                admission::release(qs.get_mut(quota).unwrap(), wref);
            }
        }
    }
    Ok(())
}

/// `review_at` at `NOW`, the instant the old object was admitted.
fn review(
    qs: &mut Quotas,
    old: Option<&Workload>,
    new: &Workload,
    run: RunDecl,
) -> Result<(), String> {
    review_at(qs, old, new, run, NOW)
}

/// What the workload holds and each quota uses.
fn holdings(qs: &Quotas) -> String {
    let wref = "batch/Job/ml/w";
    qs.values()
        .map(|q| {
            let res: BTreeMap<_, _> = q
                .status
                .reservations
                .iter()
                .filter_map(|(k, m)| m.get(wref).map(|r| (k.clone(), r.clone())))
                .collect();
            format!(
                "{}: charge {:?} reserved {:?} used {:?}",
                q.name(),
                q.status.workloads.get(wref).map(|c| &c.pod_sets),
                res,
                q.status
                    .used
                    .iter()
                    .filter(|(_, v)| !v.is_zero())
                    .collect::<Vec<_>>()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn base(w: &World) -> Quotas {
    let (qos, list) = prices();
    let mut qs: Quotas = ["team", "other"]
        .iter()
        .map(|n| (n.to_string(), quota(n, w)))
        .collect();
    // Another workload's reservation in team, where it fits.
    let (cards, hours) = w.other;
    if cards > 0 && hours > 0 {
        let q = qs.get_mut("team").unwrap();
        let x = Charge {
            pod_sets: vec![quota::workload::PodSet {
                name: "main".into(),
                count: cards,
                per_pod: [(GPU.to_string(), Quantity::from_units(1))].into(),
                qos: None,
            }],
            hpa: None,
            since: String::new(),
            uid: "x".into(),
            admitted: None,
        };
        let run = RunDecl::Object(Ok(Some(hours * 3_600_000)));
        if let Ok(r) = reservations::decide(q, "batch/Job/ml/x", None, &x, &run, NOW, &qos, &list) {
            if admission::charge(q, "batch/Job/ml/x", x).is_ok() {
                reservations::apply(&mut q.status, "batch/Job/ml/x", r);
                q.status.refresh(&q.spec.clone());
            }
        }
    }
    qs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn an_update_is_judged_as_a_create_of_the_new_object(
        kind in 0..ADAPTERS.len(),
        world in world(),
        old_p in params(),
        to in params(),
        which in 0usize..8,
    ) {
        let new_p = mutate(&old_p, which, &to);
        let old = read(kind, &old_p);
        let new = read(kind, &new_p);
        let changes = changed(&old, &new);
        // The input changed is reported whenever the objects read apart;
        // objects that read alike report nothing.
        if reading(&old) == reading(&new) {
            prop_assert!(changes.is_empty(), "{changes:?}");
        } else {
            prop_assert!(changes.contains(INPUTS[which]), "{:?}: {changes:?}", INPUTS[which]);
        }

        let before = base(&world);
        let mut updated = before.clone();
        // The old object must have been admitted for there to be an update.
        prop_assume!(review(&mut updated, None, &old, RunDecl::of(&old)).is_ok());
        let u = review(&mut updated, Some(&old), &new, RunDecl::of_update(&new, &changes));
        let mut created = before.clone();
        let c = review(&mut created, None, &new, RunDecl::of(&new));
        if changes.budget() && new.run_time.is_ok() && !asks_more(&world, &old, &new, NOW).rise {
            // A decrease is never refused, though a create may be (it
            // held nothing and now declares a run the budget cannot hold).
            prop_assert_eq!(&u, &Ok(()), "decrease {:?} → {:?}", old_p, new_p);
            prop_assume!(c.is_ok());
        }
        prop_assert_eq!(&u, &c, "update {:?} → {:?}", old_p, new_p);
        if u.is_ok() {
            prop_assert_eq!(holdings(&updated), holdings(&created));
            // And a check of the new object (the API's dry run judges it
            // as changed, given what it holds) fits and changes nothing.
            let mut checked = updated.clone();
            let run = match RunDecl::of(&new) {
                RunDecl::Object(r) => RunDecl::Changed(r),
                other => other,
            };
            prop_assert_eq!(review(&mut checked, Some(&new), &new, run), Ok(()));
            prop_assert_eq!(holdings(&checked), holdings(&updated));
        }
    }
}

/// What an update asks beyond what the old object held, by the rules of
/// docs/budgets.md "Updates", worked out from the objects: a higher cost
/// rate (cards × weight × QoS multiplier), or an end later than the old
/// reservation's (the old run ends at `NOW` + its run time; with none held
/// it is unbounded). A run that is over restarts at `now` when the rate
/// rose.
struct Asks {
    rise: bool,
    /// Judged as a create of the new object at `now` would be.
    restart: bool,
}

fn asks_more(world: &World, old: &Workload, new: &Workload, now: i64) -> Asks {
    let (qos, _) = prices();
    let rate = |w: &Workload| -> i128 {
        if w.quota().is_none() {
            return 0;
        }
        w.pod_sets.iter().fold(0, |sum, s| {
            let cards = s.per_pod.get(GPU).map_or(0, |q| q.nanos()) * s.count as i128;
            let weight = if s.per_pod.contains_key(&format!("{GPU}.H100")) {
                2500
            } else {
                1000
            };
            sum + cards * weight * qos.for_class(s.qos)
        })
    };
    let horizon = match world.policy {
        WithoutRunTime::ReserveDefault { horizon_seconds } => Some(horizon_seconds * 1000),
        _ => None,
    };
    let run = |w: &Workload| match &w.run_time {
        Ok(r) => r.as_ref().map(|r| r.ms).or(horizon),
        Err(_) => None,
    };
    let (old_rate, new_rate) = (rate(old), rate(new));
    let old_end = if old_rate > 0 { run(old) } else { None };
    let rate_rose = new_rate > old_rate;
    let old_over = old_end.is_none_or(|e| NOW + e <= now);
    let start = if rate_rose && old_over { now } else { NOW };
    let end_later = match (old_end, run(new)) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(o), Some(n)) => start + n > NOW + o,
    };
    // A model label charges the model's key anew, which a spent cash key
    // refuses as any increase of its resource (`admission::check_fits`).
    let models = |w: &Workload| -> Vec<String> {
        w.pod_sets
            .iter()
            .flat_map(|s| s.per_pod.keys())
            .filter(|k| k.starts_with(&format!("{GPU}.")))
            .cloned()
            .collect()
    };
    let model_added = models(new).iter().any(|k| !models(old).contains(k));
    // A kind that is only checked (a CronJob: each run is charged when it
    // starts) is checked whole on every update, as its next run would be.
    let checked = new.mode == ChargeMode::CheckOnly;
    Asks {
        rise: rate_rose || end_later || model_added || checked,
        restart: now == NOW || start == now,
    }
}

/// Another workload spends all of `team`'s budget.
fn spend_all(qs: &mut Quotas, world: &World) {
    let q = qs.get_mut("team").unwrap();
    let all = quota::budget::from_quantity(Quantity::from_units(world.budget));
    q.status
        .add_accrued(CASH, quota::budget::price_list::to_cash_accrued(all));
    q.status.refresh(&q.spec.clone());
}

/// What the workload's reservation in each quota still holds back.
fn outstanding(qs: &Quotas) -> BTreeMap<String, i128> {
    qs.values()
        .filter_map(|q| {
            let r = q.status.reservations.get(CASH)?.get("batch/Job/ml/w")?;
            Some((q.name().to_string(), r.outstanding()))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        max_global_rejects: 20_000,
        ..ProptestConfig::default()
    })]

    /// Later on — part of the run gone, or all of it, the budget perhaps
    /// spent by others — an update that asks no more (no higher rate, no
    /// later end) is allowed and holds back no more than before; one whose
    /// rate rose after its run ended starts its run again and is judged as
    /// a create of the new object then.
    #[test]
    fn a_later_update_is_refused_only_when_it_asks_more(
        kind in 0..ADAPTERS.len(),
        world in world(),
        old_p in params(),
        to in params(),
        which in 0usize..5,
        elapsed in prop_oneof![Just(0i64), Just(1_800_000), Just(7_200_000), Just(36_000_000)],
        spent in any::<bool>(),
    ) {
        let new_p = mutate(&old_p, which, &to);
        let old = read(kind, &old_p);
        let new = read(kind, &new_p);
        let changes = changed(&old, &new);
        prop_assume!(changes.budget() && new.run_time.is_ok());
        let now = NOW + elapsed;
        let asks = asks_more(&world, &old, &new, now);

        let mut before = base(&world);
        let mut updated = before.clone();
        prop_assume!(review(&mut updated, None, &old, RunDecl::of(&old)).is_ok());
        if spent {
            spend_all(&mut updated, &world);
            spend_all(&mut before, &world);
        }
        let held = outstanding(&updated);
        let run = RunDecl::of_update(&new, &changes);
        let u = review_at(&mut updated, Some(&old), &new, run, now);
        if !asks.rise {
            prop_assert_eq!(&u, &Ok(()), "decrease {:?} → {:?}", old_p, new_p);
            let after = outstanding(&updated);
            for (q, h) in &held {
                let a = after.get(q).copied().unwrap_or(0);
                prop_assert!(a <= *h, "{q}: holds back {a}, held {h}");
            }
        } else if asks.restart && !spent {
            let mut created = before.clone();
            let c = review_at(&mut created, None, &new, RunDecl::of(&new), now);
            prop_assert_eq!(&u, &c, "update {:?} → {:?}", old_p, new_p);
            if u.is_ok() {
                prop_assert_eq!(holdings(&updated), holdings(&created));
            }
        }
    }
}

/// The case, standalone, in the pure decision: 10 card-hours, a
/// 4-GPU Job declaring one hour reserves 4; declaring nine hours after
/// admission needs 36 and is refused in a create's words; declaring half
/// an hour releases half of what it holds.
#[test]
fn a_run_time_lengthened_after_admission_is_refused_and_a_shorter_one_releases() {
    let w = World {
        budget: 10,
        cards: 8,
        policy: WithoutRunTime::Refuse,
        cap: None,
        other: (0, 0),
    };
    let job = |run: Run| Params {
        pods: 4,
        gpus: 1,
        model: None,
        burstable: false,
        run,
        priority: None,
        quota: Some("team"),
        opt_out: false,
    };
    let job_kind = ADAPTERS
        .iter()
        .position(|a| a.group == "batch" && a.kind == "Job")
        .unwrap();
    let hour = read(job_kind, &job(Run::Field(3600)));
    let mut qs = base(&w);
    review(&mut qs, None, &hour, RunDecl::of(&hour)).unwrap();
    let held = holdings(&qs);
    let nine = read(job_kind, &job(Run::Field(32400)));
    let e = review(
        &mut qs,
        Some(&hour),
        &nine,
        RunDecl::of_update(&nine, &changed(&hour, &nine)),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "bizrq team: cash/requests.nvidia.com/gpu needs 36 card-hours for Job ml/w \
         (4 × nvidia.com/gpu for 9h), 10 left (10 this period, 0 spent, 0 reserved)"
    );
    assert_eq!(holdings(&qs), held, "a refusal changes nothing");
    // Removed under `refuse`: refused, as a create without one is.
    let none = read(job_kind, &job(Run::None));
    let e = review(
        &mut qs,
        Some(&hour),
        &none,
        RunDecl::of_update(&none, &changed(&hour, &none)),
    )
    .unwrap_err();
    assert!(
        e.contains("admits only workloads that declare a maximum run time"),
        "{e}"
    );
    // Half an hour: 2 card-hours held, 2 released.
    let half = read(job_kind, &job(Run::Field(1800)));
    review(
        &mut qs,
        Some(&hour),
        &half,
        RunDecl::of_update(&half, &changed(&hour, &half)),
    )
    .unwrap();
    let r = &qs["team"].status.reservations[CASH]["batch/Job/ml/w"];
    assert_eq!(
        quota::budget::to_quantity(r.outstanding()),
        Quantity::from_units(2)
    );
    assert_eq!((r.at_ms, r.run_ms), (NOW, 1_800_000));
}
