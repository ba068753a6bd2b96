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

mod keys;
mod parents_and_queues;
