use super::*;
use quota::{Mark, QuotaSpec};
use serde_json::json;

const GPU: &str = "requests.nvidia.com/gpu";
const CASH: &str = "cash/requests.nvidia.com/gpu";
const NOW: i64 = 1_800_000_000_000;

fn q(s: &str) -> Quantity {
    s.parse().unwrap()
}

fn quota(used_gpu: &str) -> Quota {
    let mut spec = QuotaSpec::default();
    spec.hard.insert(GPU.into(), q("10"));
    let mut quota = Quota::new("nlp-team", spec);
    quota.status.used.insert(GPU.into(), q(used_gpu));
    quota.status.self_used.insert(GPU.into(), q(used_gpu));
    quota
}

/// One round of the engine with the database reduced to a list of open
/// alerts: returns what opened this round.
fn round(
    quota: &Quota,
    rules: &[Rule],
    open: &mut Vec<OpenAlert>,
    next_id: &mut i64,
) -> Vec<Condition> {
    let found = grouped(
        conditions(
            quota,
            None,
            rules,
            &BTreeMap::new(),
            NOW,
            &KeyConfig::default(),
        ),
        &KeyConfig::default(),
    );
    let e = evaluate(found, open);
    open.retain(|a| !e.resolve.contains(&a.id));
    for (id, c) in &e.update {
        let a = open.iter_mut().find(|a| a.id == *id).unwrap();
        a.key = c.key.clone();
        a.keys = c.keys.clone();
    }
    for c in &e.open {
        *next_id += 1;
        open.push(as_open(*next_id, c));
    }
    e.open
}

fn as_open(id: i64, c: &Condition) -> OpenAlert {
    OpenAlert {
        id,
        kind: c.kind,
        fingerprint: c.fingerprint(),
        key: c.key.clone(),
        keys: c.keys.clone(),
    }
}

fn fingerprints(cs: &[Condition]) -> Vec<String> {
    cs.iter().map(Condition::fingerprint).collect()
}

#[test]
fn a_crossing_fires_once_resolves_when_it_clears_and_fires_again_when_it_recurs() {
    let (mut open, mut id) = (Vec::new(), 0);
    assert!(
        round(&quota("7999m"), &[], &mut open, &mut id).is_empty(),
        "79.99 % is under 80 %"
    );
    let fired = round(&quota("8"), &[], &mut open, &mut id);
    assert_eq!(fingerprints(&fired), ["threshold|nlp-team||warning"]);
    assert_eq!(fired[0].numbers["used"], "8");
    assert_eq!(fired[0].numbers["hard"], "10");
    // Still over 80 %: the open alert suppresses a repeat.
    assert!(round(&quota("9"), &[], &mut open, &mut id).is_empty());
    assert_eq!(open.len(), 1);
    // Clears: resolved.
    assert!(round(&quota("5"), &[], &mut open, &mut id).is_empty());
    assert!(open.is_empty());
    // Recurs: fires again, as a new alert.
    let again = round(&quota("8500m"), &[], &mut open, &mut id);
    assert_eq!(again.len(), 1);
    assert_eq!(open[0].id, 2);
}

#[test]
fn critical_at_100_percent_and_over_quota_above_hard() {
    let (mut open, mut id) = (Vec::new(), 0);
    let at_hard = round(&quota("10"), &[], &mut open, &mut id);
    assert_eq!(
        fingerprints(&at_hard),
        [
            "threshold|nlp-team||warning",
            "threshold|nlp-team||critical",
        ]
    );
    let over = round(&quota("10001m"), &[], &mut open, &mut id);
    assert_eq!(fingerprints(&over), ["over_quota|nlp-team||critical"]);
    assert!(
        over[0].message.contains("over quota"),
        "{}",
        over[0].message
    );
    // Back to exactly hard: over quota resolves, the thresholds stay.
    assert!(round(&quota("10"), &[], &mut open, &mut id).is_empty());
    assert_eq!(open.len(), 2);
}

#[test]
fn rules_per_key_override_the_wildcard_and_the_defaults() {
    let rules = [Rule {
        key: "*".into(),
        warn_percent: 50,
        crit_percent: 90,
        forecast_horizon_hours: None,
        allocation_percent: None,
    }];
    let fired = conditions(
        &quota("5"),
        None,
        &rules,
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(fingerprints(&fired), ["threshold|nlp-team||warning"]);
    let rules = [
        rules[0].clone(),
        Rule {
            key: GPU.into(),
            warn_percent: 60,
            crit_percent: 95,
            forecast_horizon_hours: None,
            allocation_percent: None,
        },
    ];
    assert!(conditions(
        &quota("5"),
        None,
        &rules,
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default()
    )
    .is_empty());
}

#[test]
fn a_cash_key_is_judged_on_its_spend() {
    let mut spec = QuotaSpec::default();
    spec.hard.insert(CASH.into(), q("100"));
    let mut quota = Quota::new("nlp-team", spec);
    quota.status.used.insert(CASH.into(), q("80"));
    quota.status.self_used.insert(CASH.into(), q("80"));
    let fired = conditions(
        &quota,
        None,
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(fingerprints(&fired), ["threshold|nlp-team||warning"]);
    assert!(
        fired[0]
            .message
            .contains("80 card-hours spent of 100 card-hours"),
        "{}",
        fired[0].message
    );
}

#[test]
fn reclaim_pending_while_status_reclaim_is_not_empty() {
    let mut quota = quota("1");
    quota.status.reclaim.insert(
        "default/Job/train".into(),
        Mark {
            action: quota::Action::Suspend,
            frees: Default::default(),
            marked: "2026-11-22T00:00:00Z".into(),
            due: "2026-11-22T00:10:00Z".into(),
            origin: Default::default(),
        },
    );
    let (mut open, mut id) = (Vec::new(), 0);
    let fired = round(&quota, &[], &mut open, &mut id);
    assert_eq!(fingerprints(&fired), ["reclaim_pending|nlp-team||warning"]);
    quota.status.reclaim.clear();
    assert!(round(&quota, &[], &mut open, &mut id).is_empty());
    assert!(open.is_empty(), "cleared reclaim resolves");
}

#[test]
fn reclaim_pending_says_whether_a_loan_or_the_queue_marked() {
    let mark = |origin| Mark {
        action: quota::Action::Suspend,
        frees: Default::default(),
        marked: "2026-11-22T00:00:00Z".into(),
        due: "2026-11-22T00:10:00Z".into(),
        origin,
    };
    let message = |q: &Quota| {
        let (mut open, mut id) = (Vec::new(), 0);
        round(q, &[], &mut open, &mut id)
            .into_iter()
            .find(|c| c.kind == Kind::ReclaimPending)
            .unwrap()
            .message
    };
    let mut quota = quota("1");
    quota.status.reclaim.insert(
        "batch/Job/ml/low".into(),
        mark(quota::object::marks::Origin::Preempt),
    );
    assert_eq!(
        message(&quota),
        "nlp-team's queue preempts lower-priority work for a waiting job: 1 workload(s) marked for reclaim, first due 2026-11-22T00:10:00Z"
    );
    quota
        .status
        .reclaim
        .insert("batch/Job/ml/loan".into(), mark(Default::default()));
    assert!(message(&quota).starts_with(
        "nlp-team borrows capacity its lenders need back, and its queue preempts lower-priority work: 2 workload(s)"
    ));
    quota.status.reclaim.remove("batch/Job/ml/low");
    assert!(message(&quota).starts_with("nlp-team borrows capacity its lenders need back: 1"));
}

#[test]
fn a_cash_forecast_inside_the_horizon_fires_and_outside_does_not() {
    let mut spec = QuotaSpec::default();
    spec.hard.insert(CASH.into(), q("1000"));
    let mut quota = Quota::new("nlp-team", spec.clone());
    quota.status.used.insert(CASH.into(), q("100"));
    // 900 left at 100 card-hours a day: 9 days (the budget's one forecast,
    // `quota::forecast::outlook`, as the pages show it).
    let outlook = Forecast {
        key: CASH.into(),
        now_ms: NOW,
        left: q("900"),
        carved: Quantity::ZERO,
        burn_per_hour: Quantity::from_nanos(100 * quota::quantity::NANO / 24),
        runway: quota::budget::Runway::Until {
            at_ms: NOW + 9 * 86_400_000,
        },
    };
    let forecasts: BTreeMap<String, Forecast> = [(CASH.to_string(), outlook.clone())].into();
    let rule = |hours| Rule {
        key: CASH.into(),
        warn_percent: 80,
        crit_percent: 100,
        forecast_horizon_hours: Some(hours),
        allocation_percent: None,
    };
    let fired = conditions(
        &quota,
        None,
        &[rule(10 * 24)],
        &forecasts,
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(fingerprints(&fired), ["cash_forecast|nlp-team||warning"]);
    assert_eq!(
        fired[0].message,
        "cash/requests.nvidia.com/gpu of nlp-team runs out in 9 days (2027-01-24)"
    );
    assert_eq!(
        fired[0].message,
        format!(
            "cash/requests.nvidia.com/gpu of nlp-team {}",
            outlook.words()
        ),
        "the alert says what the pages say"
    );
    assert!(conditions(
        &quota,
        None,
        &[rule(8 * 24)],
        &forecasts,
        NOW,
        &KeyConfig::default()
    )
    .is_empty());
    // No rule: the budget's default horizon, 14 days, so 9 days fires.
    assert_eq!(
        fingerprints(&conditions(
            &quota,
            None,
            &[],
            &forecasts,
            NOW,
            &KeyConfig::default()
        )),
        ["cash_forecast|nlp-team||warning"]
    );
    // The policy's forecastDays: 5 days is too short for 9; 0 turns it off.
    for (days, fires) in [(5, false), (0, false), (10, true)] {
        let mut q2 = quota.clone();
        q2.spec.budgets.insert(
            CASH.into(),
            serde_json::from_value(json!({"forecastDays": days})).unwrap(),
        );
        assert_eq!(
            !conditions(&q2, None, &[], &forecasts, NOW, &KeyConfig::default()).is_empty(),
            fires,
            "forecastDays {days}"
        );
        // A rule's own horizon wins over the policy's.
        assert!(!conditions(
            &q2,
            None,
            &[rule(10 * 24)],
            &forecasts,
            NOW,
            &KeyConfig::default()
        )
        .is_empty());
    }
}

#[test]
fn a_spent_budget_that_suspends_batch_work_is_critical() {
    let mut spec = QuotaSpec::default();
    spec.hard.insert(CASH.into(), q("100"));
    spec.budgets.insert(
        CASH.into(),
        serde_json::from_value(
            json!({"onExhausted": {"kind": "suspendBatch", "graceSeconds": 3600}, "forecastDays": 0}),
        )
        .unwrap(),
    );
    let mut quota = Quota::new("nlp-team", spec);
    quota.status.used.insert(CASH.into(), q("100"));
    quota
        .status
        .exhausted
        .insert(CASH.into(), "2026-11-21T10:00:00.000Z".into());
    let fired = conditions(
        &quota,
        None,
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    let crit: Vec<&Condition> = fired
        .iter()
        .filter(|c| c.kind == Kind::CashForecast)
        .collect();
    assert_eq!(crit.len(), 1, "{fired:?}");
    assert_eq!(crit[0].level, Level::Critical);
    assert!(
        crit[0]
            .message
            .contains("suspended from 2026-11-21T11:00:00.000Z"),
        "{}",
        crit[0].message
    );
    // Not spent any more: the time is gone from status, and the alert.
    quota.status.exhausted.clear();
    assert!(conditions(
        &quota,
        None,
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default()
    )
    .iter()
    .all(|c| c.kind != Kind::CashForecast));
}

#[test]
fn transfer_alerts_are_not_resolved_by_an_evaluation() {
    let open = [OpenAlert {
        id: 7,
        kind: Kind::TransferRequested,
        fingerprint: "transfer_requested|x|#1|info".into(),
        key: "#1".into(),
        keys: Vec::new(),
    }];
    assert!(evaluate(Vec::new(), &open).is_empty());
}

#[test]
fn the_email_has_the_message_the_numbers_and_a_link() {
    let cs = conditions(
        &quota("9"),
        None,
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    let c = &grouped(cs, &KeyConfig::default())[0];
    let m = email(c, "https://bizrq.example/", &KeyConfig::default());
    assert_eq!(
        m.subject,
        "[bizrq warning] GPUs of nlp-team reached 80 %: 9 in use of 10"
    );
    assert!(
        m.text
            .starts_with("GPUs of nlp-team reached 80 %: 9 in use of 10\n\n"),
        "{}",
        m.text
    );
    assert!(m.text.contains("  used: 9\n"), "{}", m.text);
    assert!(
        m.text.contains("https://bizrq.example/quotas/nlp-team"),
        "{}",
        m.text
    );
    assert!(
        m.html
            .contains("<a href=\"https://bizrq.example/quotas/nlp-team\">"),
        "{}",
        m.html
    );
}

/// A job that takes `used` of each of six keys of nlp-team (GPUs, A100
/// GPUs, CPU cores and their limit, CPU A4 cores, memory).
fn six_keys(used: [&str; 6]) -> Quota {
    let mut quota = quota(used[0]);
    for (i, (k, hard)) in [
        ("requests.nvidia.com/gpu.A100", "10"),
        ("requests.cpu", "100"),
        ("limits.cpu", "100"),
        ("requests.cpu.A4", "100"),
        ("requests.memory", "100Gi"),
    ]
    .into_iter()
    .enumerate()
    {
        let u: Quantity = if k == "requests.memory" {
            format!("{}Gi", used[i + 1]).parse().unwrap()
        } else {
            q(used[i + 1])
        };
        quota.spec.hard.insert(k.into(), q(hard));
        quota.status.used.insert(k.into(), u);
        quota.status.self_used.insert(k.into(), u);
    }
    quota
}

/// A rule for every key ('*') at the default thresholds: what a quota
/// that wants CPU, memory and pods watched too sets.
fn every_key() -> [Rule; 1] {
    [Rule::default_for("*")]
}

/// By default one training job over six keys warns on its GPUs only: a
/// quota that limits GPUs (or a budget) is watched on those; CPU, memory
/// and pods raise nothing unless a rule asks. Over quota is not a
/// threshold: a CPU key beyond its hard is still an alert.
#[test]
fn by_default_a_gpu_job_warns_on_its_gpus_only() {
    let cfg = KeyConfig::default();
    let quota = six_keys(["8", "9", "85", "90", "95", "80"]);
    assert_eq!(Defaults::of(&quota, &cfg), Defaults::GpusAndBudgets);
    let found = grouped(
        conditions(&quota, None, &[], &BTreeMap::new(), NOW, &cfg),
        &cfg,
    );
    assert_eq!(fingerprints(&found), ["threshold|nlp-team||warning"]);
    assert_eq!(
        found[0].keys,
        ["requests.nvidia.com/gpu", "requests.nvidia.com/gpu.A100"]
    );
    // Only CPU cores full: nothing.
    let cpu_only = six_keys(["1", "1", "99", "1", "1", "1"]);
    assert!(conditions(&cpu_only, None, &[], &BTreeMap::new(), NOW, &cfg).is_empty());
    // CPU cores beyond hard: over quota, whatever the thresholds watch.
    let over = six_keys(["1", "1", "101", "1", "1", "1"]);
    let found = conditions(&over, None, &[], &BTreeMap::new(), NOW, &cfg);
    assert_eq!(fingerprints(&found), ["over_quota|nlp-team||critical"]);
    assert_eq!(found[0].key, "requests.cpu");
    // A rule of the CPU key's own watches it, the others stay quiet.
    let cpu_rule = Rule::default_for("requests.cpu");
    let found = conditions(&cpu_only, None, &[cpu_rule], &BTreeMap::new(), NOW, &cfg);
    assert_eq!(fingerprints(&found), ["threshold|nlp-team||warning"]);
    assert_eq!(found[0].key, "requests.cpu");
}

/// A quota that limits neither GPUs nor budgets (a CPU-only cluster) is
/// watched on every key by default: someone must be told it is full. A
/// GPU key whose hard is 0 limits nothing. A budget alone narrows the
/// defaults as GPUs do.
#[test]
fn a_quota_without_gpus_or_budgets_is_watched_on_every_key() {
    let cfg = KeyConfig::default();
    let mut spec = QuotaSpec::default();
    spec.hard.insert("requests.cpu".into(), q("100"));
    spec.hard.insert("pods".into(), q("10"));
    spec.hard.insert(GPU.into(), q("0"));
    let mut cpu = Quota::new("cpu-team", spec);
    for (k, u) in [("requests.cpu", "85"), ("pods", "10")] {
        cpu.status.used.insert(k.into(), q(u));
        cpu.status.self_used.insert(k.into(), q(u));
    }
    assert_eq!(Defaults::of(&cpu, &cfg), Defaults::EveryKey);
    let found = grouped(
        conditions(&cpu, None, &[], &BTreeMap::new(), NOW, &cfg),
        &cfg,
    );
    assert_eq!(
        fingerprints(&found),
        [
            "threshold|cpu-team||warning",
            "threshold|cpu-team||critical"
        ]
    );
    assert_eq!(found[0].keys, ["requests.cpu", "pods"]);
    assert!(Defaults::EveryKey
        .words()
        .contains("every key at 80 % and 100 %"));
    assert!(Defaults::GpusAndBudgets
        .words()
        .starts_with("By default: GPU models and budgets at 80 % and 100 %"));
    // With a budget it is watched on the budget only.
    cpu.spec.hard.insert(CASH.into(), q("1000"));
    assert_eq!(Defaults::of(&cpu, &cfg), Defaults::GpusAndBudgets);
    assert!(conditions(&cpu, None, &[], &BTreeMap::new(), NOW, &cfg).is_empty());
}

/// One training job over six keys is one alert: its keys listed, GPUs
/// first, each with its figure; the worst in its title; one email. (A
/// rule for every key: by default CPU, memory and pods would be quiet.)
#[test]
fn a_crossing_on_six_keys_is_one_alert_that_names_them_gpus_first() {
    let quota = six_keys(["8", "9", "85", "90", "95", "80"]);
    let cfg = KeyConfig::default();
    let per_key = conditions(
        &quota,
        None,
        &every_key(),
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(per_key.len(), 6, "{per_key:?}");
    let found = grouped(per_key, &cfg);
    assert_eq!(found.len(), 1, "{found:?}");
    let c = &found[0];
    assert_eq!(c.fingerprint(), "threshold|nlp-team||warning");
    assert_eq!(
        c.keys,
        [
            "requests.nvidia.com/gpu",
            "requests.nvidia.com/gpu.A100",
            "requests.cpu",
            "requests.cpu.A4",
            "limits.cpu",
            "requests.memory",
        ],
        "GPUs first"
    );
    // The worst GPU key (90 % of A100 GPUs) in the title and the top
    // numbers, though CPU A4 cores are at 95 %: GPUs lead.
    assert_eq!(c.key, "requests.nvidia.com/gpu.A100");
    assert_eq!(c.numbers["used"], "9");
    assert_eq!(c.numbers["keys"][0]["figure"], "8 of 10 (80 %)");
    assert_eq!(c.numbers["keys"][5]["figure"], "80 GiB of 100 GiB (80 %)");
    let said = words(&c.message, &c.key, &c.numbers, &cfg);
    assert_eq!(
        said,
        "A100 GPUs of nlp-team reached 80 %: 9 in use of 10; 6 keys: GPUs 8 of 10 (80 %), \
         A100 GPUs 9 of 10 (90 %), CPU cores 85 of 100 (85 %), CPU A4 cores 95 of 100 (95 %), \
         CPU cores (limit) 90 of 100 (90 %), memory 80 GiB of 100 GiB (80 %)"
    );
    let m = email(c, "https://bizrq.example", &cfg);
    assert_eq!(
        m.subject,
        "[bizrq warning] A100 GPUs of nlp-team reached 80 %: 9 in use of 10 (and 5 more keys)"
    );
    assert!(
        m.text.contains(
            "Usage threshold (warning) on nlp-team, 6 keys:\n- GPUs: 8 of 10 (80 %)\n\
             - A100 GPUs: 9 of 10 (90 %)\n"
        ),
        "{}",
        m.text
    );
    assert!(m
        .text
        .ends_with("Quota: https://bizrq.example/quotas/nlp-team\n"));
    assert!(!m.text.contains("requests."), "no raw key: {}", m.text);
    assert!(m.html.contains("title=\"requests.cpu\""), "{}", m.html);
}

/// Without a GPU or budget key over, the title names the worst key (a
/// rule for every key watches CPU, memory and pods).
#[test]
fn without_a_gpu_key_the_title_names_the_worst() {
    let quota = six_keys(["1", "1", "85", "90", "95", "80"]);
    let cfg = KeyConfig::default();
    let found = grouped(
        conditions(
            &quota,
            None,
            &every_key(),
            &BTreeMap::new(),
            NOW,
            &KeyConfig::default(),
        ),
        &cfg,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].keys.len(), 4, "{found:?}");
    assert_eq!(found[0].key, "requests.cpu.A4");
    assert_eq!(found[0].numbers["used"], "95");
}

/// The alert follows its keys: a key that crosses later, or clears while
/// others hold, updates it (no second alert); it resolves when none is
/// over; another level or kind is its own alert.
#[test]
fn a_condition_updates_its_keys_and_resolves_when_none_is_over() {
    let (mut open, mut id) = (Vec::new(), 0);
    let cfg = KeyConfig::default();
    let step = |q: &Quota, open: &mut Vec<OpenAlert>, id: &mut i64| {
        let e = evaluate(
            grouped(
                conditions(q, None, &[], &BTreeMap::new(), NOW, &KeyConfig::default()),
                &cfg,
            ),
            open,
        );
        open.retain(|a| !e.resolve.contains(&a.id));
        for (i, c) in &e.update {
            let a = open.iter_mut().find(|a| a.id == *i).unwrap();
            a.key = c.key.clone();
            a.keys = c.keys.clone();
        }
        for c in &e.open {
            *id += 1;
            open.push(as_open(*id, c));
        }
        e
    };
    let e = step(
        &six_keys(["8", "1", "1", "1", "1", "1"]),
        &mut open,
        &mut id,
    );
    assert_eq!((e.open.len(), e.update.len()), (1, 0));
    assert_eq!(open[0].keys, ["requests.nvidia.com/gpu"]);
    // A100 crosses too: the same alert, now of two keys, A100 the worst.
    let e = step(
        &six_keys(["8", "9", "1", "1", "1", "1"]),
        &mut open,
        &mut id,
    );
    assert_eq!((e.open.len(), e.update.len()), (0, 1), "{e:?}");
    assert_eq!(e.update[0].0, 1);
    assert_eq!(
        open[0].keys,
        ["requests.nvidia.com/gpu", "requests.nvidia.com/gpu.A100"]
    );
    assert_eq!(open[0].key, "requests.nvidia.com/gpu.A100");
    // Nothing changed: nothing to write.
    assert!(step(
        &six_keys(["8", "9", "1", "1", "1", "1"]),
        &mut open,
        &mut id
    )
    .is_empty());
    // GPUs clear, A100 holds: updated, still one.
    let e = step(
        &six_keys(["1", "9", "1", "1", "1", "1"]),
        &mut open,
        &mut id,
    );
    assert_eq!((e.open.len(), e.update.len(), e.resolve.len()), (0, 1, 0));
    assert_eq!(open[0].keys, ["requests.nvidia.com/gpu.A100"]);
    // A100 at its hard: critical is another condition, its own alert.
    let e = step(
        &six_keys(["1", "10", "1", "1", "1", "1"]),
        &mut open,
        &mut id,
    );
    let opened: Vec<String> = e.open.iter().map(Condition::fingerprint).collect();
    assert_eq!(opened, ["threshold|nlp-team||critical"]);
    // None over: both resolve.
    let e = step(
        &six_keys(["1", "1", "1", "1", "1", "1"]),
        &mut open,
        &mut id,
    );
    assert_eq!(e.resolve.len(), 2);
    assert!(open.is_empty());
}

#[test]
fn ten_thousand_quotas_evaluate_well_under_a_second() {
    let quotas: Vec<Quota> = (0..10_000)
        .map(|i| {
            let mut q = quota(&format!("{}", i % 11));
            q.metadata.name = format!("team-{i}");
            q
        })
        .collect();
    let started = std::time::Instant::now();
    let e = evaluate_quotas(
        &quotas,
        &BTreeMap::new(),
        &BTreeMap::new(),
        &BTreeMap::new(),
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    let took = started.elapsed();
    println!("evaluated 10000 quotas in {took:?}");
    // used 8, 9, 10 warn; 10 also critical: (3 + 1) of every 11.
    assert_eq!(e.open.len(), 4 * 909);
    assert!(took < std::time::Duration::from_millis(500), "{took:?}");
}

#[test]
fn alerts_of_a_deleted_quota_resolve_but_not_on_an_empty_list() {
    let open: BTreeMap<String, Vec<OpenAlert>> = [(
        "gone".to_string(),
        vec![OpenAlert {
            id: 3,
            kind: Kind::Threshold,
            fingerprint: "threshold|gone||warning".into(),
            key: GPU.into(),
            keys: vec![GPU.into()],
        }],
    )]
    .into();
    let e = evaluate_quotas(
        &[quota("1")],
        &BTreeMap::new(),
        &BTreeMap::new(),
        &open,
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(e.resolve, [3]);
    assert!(evaluate_quotas::<Quota, _>(
        &[],
        &BTreeMap::new(),
        &BTreeMap::new(),
        &open,
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    )
    .is_empty());
}

#[test]
fn the_digest_cutoff_is_the_last_digest_hour() {
    const H: i64 = 3_600_000;
    // 1_800_000_000_000 is 2027-01-15T08:00:00Z.
    let eight = 1_800_000_000_000;
    assert_eq!(digest_cutoff(eight, 8), eight);
    assert_eq!(digest_cutoff(eight + 1, 8), eight);
    assert_eq!(digest_cutoff(eight - 1, 8), eight - 24 * H);
    assert_eq!(digest_cutoff(eight, 0), eight - 8 * H);
    assert_eq!(digest_cutoff(eight + 16 * H, 23), eight + 15 * H);
}

#[test]
fn the_digest_lists_each_alert_with_its_times_and_link() {
    use crate::alerts::Alert;
    let a = |id, quota: &str, message: &str, resolved_at| Alert {
        id,
        fingerprint: format!("f{id}"),
        kind: Kind::Threshold,
        quota: quota.into(),
        key: "requests.nvidia.com/gpu".into(),
        level: Level::Warning,
        message: message.into(),
        numbers: serde_json::json!({}),
        keys: vec!["requests.nvidia.com/gpu".into()],
        opened_at: 1_800_000_000_000,
        resolved_at,
        merged_into: None,
        acked: None,
        snoozed: None,
    };
    let e = digest_email(
        &[
            a(
                1,
                "nlp",
                "nlp: requests.nvidia.com/gpu at 80 % (8 of 10)",
                None,
            ),
            a(2, "cv<x>", "cv: at 90 %", Some(1_800_000_600_000)),
        ],
        1_800_086_400_000,
        "https://bizrq.example/",
        &KeyConfig::default(),
    );
    assert_eq!(
        e.subject,
        "[bizrq digest] 2 alerts (1 still open) up to 2027-01-16"
    );
    assert!(
        e.text.contains("nlp: GPUs at 80 % (8 of 10)"),
        "keys by name: {}",
        e.text
    );
    assert!(e.text.contains("https://bizrq.example/quotas/nlp\n"));
    assert!(e.text.contains("opened 2027-01-15 08:00 UTC, still open"));
    assert!(e
        .text
        .contains("opened 2027-01-15 08:00 UTC, resolved 2027-01-15 08:10 UTC"));
    assert!(e.html.contains("cv&lt;x&gt;"), "escaped: {}", e.html);
    assert!(e.text.contains("https://bizrq.example/account"));
}

/// research: 10 GPUs, all carved out for two children, nothing running.
fn idle_parent() -> Quota {
    let mut spec = QuotaSpec::default();
    spec.hard.insert(GPU.into(), q("10"));
    let mut research = Quota::new("research", spec);
    research.status.used.insert(GPU.into(), q("10"));
    for (child, n) in [("nlp", "6"), ("cv", "4")] {
        research.status.children.insert(
            child.into(),
            quota::object::Carve {
                hard: [(GPU.to_string(), q(n))].into(),
                since: String::new(),
                uid: String::new(),
            },
        );
    }
    research
}

#[test]
fn a_parent_that_allocated_everything_but_runs_nothing_raises_no_usage_alert() {
    let research = idle_parent();
    let nothing = quota::ResourceList::new();
    assert!(
        conditions(
            &research,
            Some(&nothing),
            &[],
            &BTreeMap::new(),
            NOW,
            &KeyConfig::default()
        )
        .is_empty(),
        "allocation is not usage, and allocation notices are off by default"
    );
    // Without its subtree known, only its own use counts: none.
    assert!(conditions(
        &research,
        None,
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default()
    )
    .is_empty());
    // 9 of its 10 run in the children: a usage warning on research.
    let running: quota::ResourceList = [(GPU.to_string(), q("9"))].into();
    let fired = conditions(
        &research,
        Some(&running),
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(fingerprints(&fired), ["threshold|research||warning"]);
    assert_eq!(
        fired[0].message,
        "requests.nvidia.com/gpu of research reached 80 %: 9 in use of 10"
    );
}

#[test]
fn an_allocation_notice_is_info_and_only_where_a_rule_asks() {
    let research = idle_parent();
    let rule = Rule {
        allocation_percent: Some(90),
        ..Rule::default_for("*")
    };
    let nothing = quota::ResourceList::new();
    let fired = conditions(
        &research,
        Some(&nothing),
        &[rule],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(fingerprints(&fired), ["allocation|research||info"]);
    assert_eq!(
        fired[0].message,
        "requests.nvidia.com/gpu of research is 90 % allocated: 10 to children and 0 used here, \
         of 10; 0 in use in its subtree"
    );
    assert!(Kind::Allocation.is_condition() && !Kind::Allocation.notifies_admins());
    // A leaf allocates nothing: no notice however full it is.
    let leaf = quota("10");
    let rule = Rule {
        allocation_percent: Some(50),
        ..Rule::default_for("*")
    };
    assert!(!conditions(
        &leaf,
        None,
        &[rule],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default()
    )
    .iter()
    .any(|c| c.kind == Kind::Allocation));
}

#[test]
fn a_queued_workload_waiting_past_the_threshold_alerts_once_and_resolves_when_it_leaves() {
    use quota::object::queue::{QueueEntry, Queued, Waiting};
    use quota::object::queueing::QueuePolicy;
    let mut quota = quota("1");
    quota.spec.queueing = QueuePolicy {
        alert_after_seconds: Some(3600),
        ..QueuePolicy::queue()
    };
    let entry = |name: &str, waited_ms: i64| QueueEntry {
        work: Queued {
            workload_ref: format!("batch/Job/ml/{name}"),
            uid: name.into(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: NOW - waited_ms,
            pod_sets: Vec::new(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
        },
        position: 1,
        waiting: Waiting::Quota,
        reason: "waits for 2 × requests.nvidia.com/gpu: 0 free, 2 needed".into(),
        estimated_start: None,
    };
    quota.status.queue = vec![entry("old", 2 * 3_600_000), entry("new", 3_599_999)];
    let (mut open, mut id) = (Vec::new(), 0);
    let fired = round(&quota, &[], &mut open, &mut id);
    assert_eq!(
        fingerprints(&fired),
        ["queue_overdue|nlp-team|batch/Job/ml/old|warning"]
    );
    assert_eq!(
        fired[0].message,
        "batch/Job/ml/old has waited 2 hours in the queue of nlp-team, longer than its 1 hour: \
         waits for 2 × requests.nvidia.com/gpu: 0 free, 2 needed"
    );
    assert_eq!(fired[0].numbers["alertAfterSeconds"], 3600);
    // Still waiting: no second alert.
    assert!(round(&quota, &[], &mut open, &mut id).is_empty());
    // Admitted (it left the queue): resolved.
    quota.status.queue.remove(0);
    assert!(round(&quota, &[], &mut open, &mut id).is_empty());
    assert!(open.is_empty(), "resolved once it left the queue");
    // With queue marks the status lists the head; the oldest entry,
    // beyond it, alerts by the summary (docs/queueing.md §12).
    let mut far = entry("far", 5 * 3_600_000);
    far.position = 30;
    let mut listed = vec![entry("new", 60_000)];
    listed.extend(
        (0..quota::queue::summary::TOP_ENTRIES - 1).map(|i| entry(&format!("n{i}"), 60_000)),
    );
    let whole: Vec<_> = listed.iter().cloned().chain([far]).collect();
    let (kept, summary) = quota::queue::summary::bound(
        whole.clone(),
        &whole.iter().map(|e| e.work.workload_ref.clone()).collect(),
    );
    quota.status.queue = kept;
    quota.status.queue_summary = Some(summary);
    let fired = round(&quota, &[], &mut open, &mut id);
    assert_eq!(
        fingerprints(&fired),
        ["queue_overdue|nlp-team|batch/Job/ml/far|warning"]
    );
    assert_eq!(fired[0].numbers["unlisted"], 1);
    quota.status.queue_summary = None;
    assert!(round(&quota, &[], &mut open, &mut id).is_empty());
    assert!(open.is_empty(), "resolved once it left the queue");
    // Without a threshold nothing alerts, however long it waits.
    quota.status.queue = vec![entry("old", 400 * 86_400_000)];
    quota.spec.queueing.alert_after_seconds = None;
    assert!(round(&quota, &[], &mut open, &mut id).is_empty());
}

/// Queue marks turned off while objects waited beyond the listed top: the
/// controller's round counts them in `queueSummary.unfolded`, and one
/// critical alert names the quota and what to do, for the admins too; it
/// resolves once a round finds none (`summary::unfolded` gives no summary).
#[test]
fn a_queue_stranded_by_turning_marks_off_alerts_the_admins_until_none_is() {
    let mut quota = quota("1");
    let (mut open, mut id) = (Vec::new(), 0);
    quota.status.queue_summary = quota::queue::summary::unfolded(&[], 7);
    let fired = round(&quota, &[], &mut open, &mut id);
    assert_eq!(
        fingerprints(&fired),
        ["queue_overdue|nlp-team|queue marks off|critical"]
    );
    assert_eq!(
        fired[0].message,
        "7 workloads bound to nlp-team wait held beyond the 0 its queue lists, placed by queue \
         marks that no bizrq replica reads: queue marks are off (no keys), so they will never be \
         admitted. Give every replica its keys again (BIZRQ_QUEUE_MARK_KEY_SECRET or \
         BIZRQ_QUEUE_MARK_KEY_FILE) and, to turn marks off for good, set \
         BIZRQ_QUEUE_MARK_DRAIN=true until no quota raises this alert"
    );
    assert_eq!(fired[0].numbers["unfolded"], 7);
    assert!(tells_admins(fired[0].kind, &fired[0].key));
    assert!(
        !tells_admins(Kind::QueueOverdue, "batch/Job/ml/old"),
        "a late entry: owners only"
    );
    // Still stranded (fewer now): the same alert, not a second one.
    quota.status.queue_summary = quota::queue::summary::unfolded(&[], 3);
    assert!(round(&quota, &[], &mut open, &mut id).is_empty());
    // A summary written with marks on counts unlisted entries too, but
    // none unfolded: no alert, and the open one resolves.
    quota.status.queue_summary = Some(quota::object::queue::Summary {
        total: 40,
        ..Default::default()
    });
    assert!(round(&quota, &[], &mut open, &mut id).is_empty());
    assert!(open.is_empty(), "resolved once a round found none stranded");
}

#[test]
fn a_parent_budget_is_judged_on_its_subtree_spending_not_its_carve_outs() {
    // research: 51,000 card-hours, 42,000 carved out for its teams, who
    // spent 18,100 between them; nothing spent by research itself.
    let mut spec = QuotaSpec::default();
    spec.hard.insert(CASH.into(), q("51000"));
    let mut parent = Quota::new("research", spec);
    parent.status.used.insert(CASH.into(), q("42000"));
    parent.status.self_used.insert(CASH.into(), q("0"));
    let mut sub = quota::ResourceList::new();
    sub.insert(CASH.into(), q("18100"));
    let fired = conditions(
        &parent,
        Some(&sub),
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert!(fingerprints(&fired).is_empty(), "{fired:?}");
    // The same subtree spending 45,000: the budget alert fires, in the
    // subtree's figures.
    sub.insert(CASH.into(), q("45000"));
    let fired = conditions(
        &parent,
        Some(&sub),
        &[],
        &BTreeMap::new(),
        NOW,
        &KeyConfig::default(),
    );
    assert_eq!(fingerprints(&fired), ["threshold|research||warning"]);
    assert!(
        fired[0]
            .message
            .contains("45,000 card-hours spent of 51,000"),
        "{}",
        fired[0].message
    );
}

/// What asks for someone again: a key joining, or a key getting worse than
/// the worst while it holds; a key leaving, or the worst leaving, does not;
/// nor does a merged alert's first rewrite (no worst named yet).
#[test]
fn a_key_joining_or_overtaking_the_worst_escalates() {
    let cfg = KeyConfig::default();
    let now = |used: [&str; 6]| {
        grouped(
            conditions(
                &six_keys(used),
                None,
                &[],
                &BTreeMap::new(),
                NOW,
                &KeyConfig::default(),
            ),
            &cfg,
        )
        .into_iter()
        .find(|c| c.level == Level::Warning)
        .unwrap()
    };
    let a100 = "requests.nvidia.com/gpu.A100";
    let was = |key: &str, keys: &[&str]| OpenAlert {
        id: 1,
        kind: Kind::Threshold,
        fingerprint: "threshold|nlp-team||warning".into(),
        key: key.into(),
        keys: keys.iter().map(|k| k.to_string()).collect(),
    };
    // GPUs over, then A100 joins (and is the worst): escalates.
    let both = now(["8", "9", "1", "1", "1", "1"]);
    let e = evaluate(vec![both.clone()], &[was(GPU, &[GPU])]);
    assert_eq!(e.escalate, [1].into());
    assert!(escalates(&was(GPU, &[GPU]), &both));
    // Both held, A100 got worse than GPUs (the worst): escalates.
    assert!(escalates(&was(GPU, &[GPU, a100]), &both));
    // A key leaving: no escalation.
    let gpu_only = now(["8", "1", "1", "1", "1", "1"]);
    assert!(!escalates(&was(a100, &[GPU, a100]), &gpu_only));
    let e = evaluate(vec![gpu_only], &[was(a100, &[GPU, a100])]);
    assert_eq!((e.update.len(), e.escalate.len()), (1, 0));
    // The worst named the same, keys the same order or not: nothing.
    assert!(!escalates(&was(a100, &[a100, GPU]), &both));
    // A merged alert (no worst yet) with the same keys: rewritten quietly.
    let e = evaluate(vec![both.clone()], &[was("", &[a100, GPU])]);
    assert_eq!((e.update.len(), e.escalate.len()), (1, 0));
    // …but a key it did not have joins loudly.
    assert!(escalates(&was("", &[a100]), &both));
}

/// An alert of one key as written before migration 0020 (by a replica not
/// yet upgraded) is its condition's: it stays open while the condition
/// holds on any key and resolves when it clears.
#[test]
fn an_alert_of_the_old_per_key_form_resolves_only_with_its_condition() {
    assert_eq!(
        condition_of("threshold|nlp-team|requests.nvidia.com/gpu|warning"),
        "threshold|nlp-team||warning"
    );
    assert_eq!(
        condition_of("threshold|nlp-team||warning"),
        "threshold|nlp-team||warning"
    );
    // A workload's alert keeps its key: it is not on keys of the quota.
    let reclaim = "reclaim_pending|nlp-team|job-a|warning";
    assert_eq!(condition_of(reclaim), reclaim);
    assert_eq!(condition_of("nonsense"), "nonsense");
    let old = OpenAlert {
        id: 7,
        kind: Kind::Threshold,
        fingerprint: "threshold|nlp-team|requests.cpu|warning".into(),
        key: "requests.cpu".into(),
        keys: Vec::new(),
    };
    let cfg = KeyConfig::default();
    let found = |used: [&str; 6]| {
        grouped(
            conditions(
                &six_keys(used),
                None,
                &[],
                &BTreeMap::new(),
                NOW,
                &KeyConfig::default(),
            ),
            &cfg,
        )
    };
    // GPUs over (not CPU): the condition holds, the old alert stays; the
    // condition's own alert opens beside it.
    let e = evaluate(
        found(["8", "1", "1", "1", "1", "1"]),
        std::slice::from_ref(&old),
    );
    assert!(e.resolve.is_empty(), "{e:?}");
    assert_eq!(fingerprints(&e.open), ["threshold|nlp-team||warning"]);
    // Nothing over: it resolves.
    let e = evaluate(found(["1", "1", "1", "1", "1", "1"]), &[old]);
    assert_eq!(e.resolve, [7]);
}

/// A quota of hundreds of keys over at once: the message and the email
/// list ten (GPUs first) and count the others; the alert's keys hold all.
#[test]
fn a_condition_on_hundreds_of_keys_lists_ten_and_counts_the_rest() {
    let mut quota = quota("9");
    for i in 0..255 {
        let key = format!("example.com/k{i:03}");
        quota.spec.hard.insert(key.clone(), q("10"));
        quota.status.used.insert(key.clone(), q("9"));
        quota.status.self_used.insert(key, q("9"));
    }
    let cfg = KeyConfig::default();
    let found = grouped(
        conditions(
            &quota,
            None,
            &every_key(),
            &BTreeMap::new(),
            NOW,
            &KeyConfig::default(),
        ),
        &cfg,
    );
    assert_eq!(found.len(), 1);
    let c = &found[0];
    assert_eq!(c.keys.len(), 256);
    assert_eq!(c.keys[0], GPU);
    assert!(c.message.contains("; 256 keys: "), "{}", c.message);
    assert!(c.message.ends_with(" and 246 more"), "{}", c.message);
    assert!(c.message.len() < 1_000, "{}", c.message.len());
    let m = email(c, "https://bizrq.example", &cfg);
    assert!(m.subject.ends_with("(and 255 more keys)"), "{}", m.subject);
    assert!(m.subject.len() < 200, "{}", m.subject);
    assert_eq!(m.text.matches("\n- ").count(), 11, "{}", m.text);
    assert!(m.text.contains("- and 246 more keys\n"), "{}", m.text);
    assert_eq!(m.html.matches("<tr>").count(), 10);
    assert!(m.html.contains("and 246 more keys"));
}
