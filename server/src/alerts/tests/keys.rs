//! Alerts over many keys: one alert per quota, kind and level that names
//! its keys (GPUs first), the default rules on GPUs and budgets, the
//! digest.

use super::*;

/// A job that takes `used` of each of six keys of nlp-team (GPUs, A100
/// GPUs, CPU cores and their limit, CPU A4 cores, memory).
pub(super) fn six_keys(used: [&str; 6]) -> Quota {
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
pub(super) fn every_key() -> [Rule; 1] {
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
