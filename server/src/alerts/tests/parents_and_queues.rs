//! Alerts at parents and on queues: carve-outs are not spending, idle
//! allocations, queued work waiting past its threshold, escalation.

use super::keys::{every_key, six_keys};
use super::*;

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
            pod_sets: Vec::new().into(),
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
        &whole,
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
