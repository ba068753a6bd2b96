//! Invariants of the engine under arbitrary inputs.

use proptest::prelude::*;
use quota::admission;
use quota::cash::{self, Interval, QosMultipliers};
use quota::object::{Charge, Quota, QuotaSpec};
use quota::quantity::{Format, Quantity, MAX_NANOS};
use quota::resources::{self, ResourceList};
use quota::tree;
use quota::workload::PodSet;
use std::collections::BTreeMap;

const KEYS: [&str; 3] = ["requests.nvidia.com/gpu", "limits.cpu", "pods"];
const T: &str = "2026-01-01T00:00:00.000Z";

fn list(vals: &[i64]) -> ResourceList {
    KEYS.iter()
        .zip(vals)
        .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
        .collect()
}

fn charge(per_pod: &[i64], count: i64) -> Charge {
    Charge {
        pod_sets: vec![PodSet {
            name: "main".into(),
            count,
            per_pod: list(per_pod),
            qos: None,
        }],
        hpa: None,
        since: T.into(),
        uid: String::new(),
        admitted: None,
    }
}

fn format() -> impl Strategy<Value = Format> {
    prop_oneof![
        Just(Format::DecimalSi),
        Just(Format::BinarySi),
        Just(Format::DecimalExponent)
    ]
}

proptest! {
    #[test]
    fn quantity_prints_and_parses_back(nanos in -MAX_NANOS..=MAX_NANOS, f in format()) {
        let q = Quantity::from_nanos(nanos).with_format(f);
        let printed = q.to_string();
        let back: Quantity = printed.parse().unwrap();
        prop_assert_eq!(back.nanos(), nanos, "{}", printed);
    }

    #[test]
    fn written_quantities_parse_print_parse(int in 0u64..1_000_000, frac in proptest::option::of(0u32..1000), suffix in prop::sample::select(vec!["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e3", "e-3", "E6"])) {
        let text = match frac { Some(f) => format!("{int}.{f}{suffix}"), None => format!("{int}{suffix}") };
        let q: Quantity = text.parse().unwrap();
        let again: Quantity = q.to_string().parse().unwrap();
        prop_assert_eq!(q, again);
    }

    /// Whatever sequence of charges, releases and retries arrives, used never
    /// exceeds hard and always equals the sum of what is held.
    #[test]
    fn no_over_admission(hard in prop::collection::vec(0i64..40, 3),
                         ops in prop::collection::vec((0usize..6, prop::collection::vec(0i64..5, 3), 0i64..6, any::<bool>()), 1..60)) {
        let mut q = Quota::new("q", QuotaSpec { parent: String::new(), hard: list(&hard), max: Default::default(), budgets: Default::default(), queueing: Default::default(), fair_sharing: Default::default(), idle: None, });
        let mut held: BTreeMap<String, ResourceList> = BTreeMap::new();
        for (w, per_pod, count, release) in ops {
            let wref = format!("w{w}");
            if release {
                admission::release(&mut q, &wref);
                held.remove(&wref);
            } else {
                let c = charge(&per_pod, count);
                if admission::charge(&mut q, &wref, c.clone()).is_ok() {
                    held.insert(wref, c.usage());
                }
            }
            let total = resources::sum(held.values());
            for k in KEYS {
                prop_assert!(resources::get(&q.status.used, k) <= resources::get(&q.spec.hard, k), "{k} over hard");
                prop_assert_eq!(resources::get(&q.status.used, k), resources::get(&total, k));
            }
        }
    }

    /// used == selfUsed + Σ children's hard at every node, and no parent is
    /// ever carved beyond its hard, under creates, resizes, deletes, charges.
    #[test]
    fn carve_outs_balance(ops in prop::collection::vec((0u8..4, 0usize..8, 0usize..8, prop::collection::vec(0i64..30, 3)), 1..80)) {
        let mut nodes: Vec<Quota> = vec![Quota::new("n0", QuotaSpec { parent: String::new(), hard: list(&[100, 100, 100]), max: Default::default(), budgets: Default::default(), queueing: Default::default(), fair_sharing: Default::default(), idle: None, })];
        // Lowering hard is allowed below used; such nodes may be over.
        let mut lowered: std::collections::BTreeSet<String> = Default::default();
        let idx = |nodes: &Vec<Quota>, name: &str| nodes.iter().position(|n| n.name() == name);
        for (op, a, b, vals) in ops {
            let a = a % nodes.len();
            match op {
                0 => { // create a child of a
                    let name = format!("n{}", nodes.len() + b * 100);
                    if idx(&nodes, &name).is_some() { continue; }
                    let hard = list(&vals);
                    if tree::carve(&mut nodes[a], &name, &hard, T).is_ok() {
                        let parent = nodes[a].name().to_string();
                        nodes.push(Quota::new(&name, QuotaSpec { parent, hard, max: Default::default(), budgets: Default::default(), queueing: Default::default(), fair_sharing: Default::default(), idle: None, }));
                    }
                }
                1 => { // resize a (not the root)
                    if a == 0 { continue; }
                    let p = idx(&nodes, &nodes[a].spec.parent.clone()).unwrap();
                    let hard = list(&vals);
                    let name = nodes[a].name().to_string();
                    if tree::carve(&mut nodes[p], &name, &hard, T).is_ok() {
                        if KEYS.iter().any(|k| resources::get(&hard, k) < resources::get(&nodes[a].spec.hard, k)) {
                            lowered.insert(name.clone());
                        }
                        nodes[a].spec.hard = hard;
                        let spec = nodes[a].spec.clone();
                        nodes[a].status.refresh(&spec);
                    }
                }
                2 => { // delete a if leaf
                    if a == 0 || nodes.iter().any(|n| n.spec.parent == nodes[a].name()) { continue; }
                    let p = idx(&nodes, &nodes[a].spec.parent.clone()).unwrap();
                    let name = nodes[a].name().to_string();
                    tree::uncarve(&mut nodes[p], &name);
                    nodes.remove(a);
                }
                _ => { let _ = admission::charge(&mut nodes[a], &format!("w{b}"), charge(&vals[..], 1)); }
            }
            for n in &nodes {
                let mut expect = resources::project(&n.status.self_usage(), &n.spec.hard);
                for c in nodes.iter().filter(|c| c.spec.parent == n.name()) {
                    resources::add_into(&mut expect, &c.spec.hard);
                }
                for k in KEYS {
                    prop_assert_eq!(resources::get(&n.status.used, k), resources::get(&expect, k), "{} {}", n.name(), k);
                    if !lowered.contains(n.name()) {
                        prop_assert!(resources::get(&n.status.used, k) <= resources::get(&n.spec.hard, k), "{} over on {}", n.name(), k);
                    }
                }
            }
        }
    }

    /// Accruing [a,c) equals accruing [a,b) then [b,c), to the last unit.
    #[test]
    fn accrual_is_additive(ivs in prop::collection::vec((0i64..9, 0i64..10_000_000, proptest::option::of(0i64..10_000_000), 0u8..3), 0..20),
                           a in 0i64..5_000_000, split in 0i64..5_000_000, len in 0i64..10_000_000) {
        let b = a + split.min(len);
        let c = a + len;
        let usages: Vec<ResourceList> = ivs.iter().map(|(n, ..)| list(&[*n, *n * 3, 1])).collect();
        let intervals: Vec<Interval> = ivs.iter().zip(&usages).map(|((_, s, e, qos), usage)| Interval {
            usage,
            qos: Some([quota::usage::QosClass::Guaranteed, quota::usage::QosClass::Burstable, quota::usage::QosClass::BestEffort][*qos as usize]),
            start_ms: *s,
            end_ms: e.map(|e| e.max(*s)),
        }).collect();
        let keys: Vec<(String, String)> = KEYS.iter().map(|k| (format!("cash/{k}"), k.to_string())).collect();
        let prices = QosMultipliers { guaranteed: 1000, burstable: 700, best_effort: 333 };
        let whole = cash::accrue(&intervals, &keys, a, c, &prices);
        let mut parts = cash::accrue(&intervals, &keys, a, b, &prices);
        for (k, v) in cash::accrue(&intervals, &keys, b, c, &prices) {
            *parts.entry(k).or_insert(0) += v;
        }
        parts.retain(|_, v| *v != 0);
        let mut whole = whole;
        whole.retain(|_, v| *v != 0);
        prop_assert_eq!(whole, parts);
    }
}

proptest! {
    /// Standalone accrual from the charge ledger: accruing at b then c is
    /// accruing at c once, and equals the interval accrual of the same holds.
    #[test]
    fn ledger_accrual_is_additive_and_matches_intervals(
        charges in prop::collection::vec((0i64..8, 0i64..4, 0i64..3_600_000), 1..10),
        b in 1i64..10_000_000, c_extra in 0i64..10_000_000)
    {
        let spec = QuotaSpec { parent: String::new(), hard: [("cash/requests.nvidia.com/gpu".to_string(), Quantity::from_units(1_000_000))].into(), max: Default::default(), budgets: Default::default(), queueing: Default::default(), fair_sharing: Default::default(), idle: None, };
        let mut q = Quota::new("q", spec.clone());
        q.status.last_reconcile_time = Some(quota::time::format_rfc3339(0));
        let mut usages = Vec::new();
        for (i, (gpus, count, since)) in charges.iter().enumerate() {
            let mut c = charge(&[*gpus, 0, 0], *count);
            c.since = quota::time::format_rfc3339(*since);
            usages.push((c.usage(), *since));
            q.status.workloads.insert(format!("w{i}"), c);
        }
        let intervals: Vec<Interval> = usages.iter().map(|(usage, since)| Interval { usage, qos: None, start_ms: *since, end_ms: None }).collect();
        let c = b + c_extra;
        let mut split = q.clone();
        split.status.accrue_ledger(&spec, b, &QosMultipliers::default());
        split.status.accrue_ledger(&spec, c, &QosMultipliers::default());
        let mut once = q.clone();
        once.status.accrue_ledger(&spec, c, &QosMultipliers::default());
        let key = "cash/requests.nvidia.com/gpu";
        prop_assert_eq!(split.status.accrued(key), once.status.accrued(key));
        let keys = vec![(key.to_string(), "requests.nvidia.com/gpu".to_string())];
        let expect = cash::accrue(&intervals, &keys, 0, c, &QosMultipliers::default()).get(key).copied().unwrap_or(0);
        prop_assert_eq!(once.status.accrued(key), expect);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Subtree usage moved write by write (`rollup::SubtreeUsage::apply`)
    /// reads what a whole build of the same quotas reads, key by key;
    /// a quota it does not know, or one with a new parent, is refused.
    #[test]
    fn subtree_usage_moved_by_writes_equals_a_whole_build(
        parents in prop::collection::vec(any::<prop::sample::Index>(), 1..25),
        first in prop::collection::vec(prop::collection::vec(0i64..50, 2), 25),
        writes in prop::collection::vec((any::<prop::sample::Index>(), prop::collection::vec(0i64..50, 2)), 0..60),
    ) {
        use quota::rollup::{subtree_in_use, SubtreeUsage};
        let usage = |v: &[i64]| -> ResourceList {
            [("cpu", v[0]), ("requests.nvidia.com/gpu", v[1])]
                .into_iter()
                .filter(|(_, n)| *n != 0)
                .map(|(k, n)| (k.to_string(), Quantity::from_units(n)))
                .collect()
        };
        // Quota i's parent is one of 0..i (or none): a forest.
        let mut quotas: Vec<Quota> = parents
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let parent = if i == 0 || p.index(3) == 0 {
                    String::new()
                } else {
                    format!("q{}", p.index(i))
                };
                let mut q = Quota::new(&format!("q{i}"), QuotaSpec { parent, ..Default::default() });
                q.status.self_used = usage(&first[i]);
                q
            })
            .collect();
        let mut kept = SubtreeUsage::build(&quotas);
        for (at, v) in &writes {
            let i = at.index(quotas.len());
            quotas[i].status.self_used = usage(v);
            prop_assert!(kept.apply(&quotas[i]));
        }
        let whole = subtree_in_use(&quotas);
        prop_assert_eq!(kept.in_use().len(), whole.len());
        for (name, list) in &whole {
            for key in ["cpu", "requests.nvidia.com/gpu"] {
                prop_assert_eq!(
                    resources::get(&kept.in_use()[name], key),
                    resources::get(list, key),
                    "{} {}", name, key
                );
            }
        }
        // What it cannot place, it refuses.
        let stranger = Quota::new("stranger", QuotaSpec::default());
        prop_assert!(!kept.apply(&stranger));
        if let Some(q) = quotas.iter().find(|q| !q.spec.parent.is_empty()) {
            let mut moved = q.clone();
            moved.spec.parent = String::new();
            prop_assert!(!kept.apply(&moved));
        }
    }
}
