//! No workload ever lowers usage below what releasing it gives back: a
//! charge only ever raises `used`, and its release restores `used` exactly.
//! Objects come from every adapter with signed, huge and tiny counts and
//! amounts, as a hostile CRD (Kubeflow, Volcano) may hold them.

use proptest::prelude::*;
use quota::admission;
use quota::keys::KeyConfig;
use quota::object::{Charge, HpaCharge, Quota, QuotaSpec};
use quota::quantity::{Quantity, MAX_NANOS};
use quota::resources::{self, ResourceList};
use quota::workload::{PodSet, ADAPTERS};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const KEYS: [&str; 9] = [
    "pods",
    "cpu",
    "requests.cpu",
    "limits.cpu",
    "memory",
    "requests.memory",
    "limits.memory",
    "requests.nvidia.com/gpu",
    "limits.nvidia.com/gpu",
];

fn amount() -> impl Strategy<Value = String> {
    prop_oneof![
        (-200i64..200).prop_map(|n| n.to_string()),
        (
            -9i64..9,
            prop::sample::select(vec!["m", "n", "Ki", "Gi", "E", "Ei", "e18", "e-3"])
        )
            .prop_map(|(n, s)| format!("{n}{s}")),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775807".to_string()),
        Just("-0".to_string()),
    ]
}

fn resource_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(vec!["cpu", "memory", "nvidia.com/gpu"]).prop_map(String::from),
        amount(),
        0..3,
    )
}

fn container() -> impl Strategy<Value = Value> {
    (resource_map(), resource_map(), any::<bool>()).prop_map(|(requests, limits, sidecar)| {
        let mut c = json!({"name": "c", "resources": {"requests": requests, "limits": limits}});
        if sidecar {
            c["restartPolicy"] = json!("Always");
        }
        c
    })
}

fn template() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(container(), 0..3),
        prop::collection::vec(container(), 0..2),
        resource_map(),
    )
        .prop_map(|(containers, inits, overhead)| {
            json!({"spec": {"containers": containers, "initContainers": inits, "overhead": overhead}})
        })
}

fn count() -> impl Strategy<Value = i64> {
    prop_oneof![
        -3i64..6,
        Just(i64::MIN),
        Just(i64::MAX),
        Just(2_147_483_647),
        Just(2_147_483_648),
    ]
}

/// An object of `ADAPTERS[kind]` with pod template `tpl` counted `n` times.
fn object(kind: usize, tpl: Value, n: i64, other: i64) -> String {
    let a = &ADAPTERS[kind];
    let spec = match (a.group, a.kind) {
        ("batch", "Job") => json!({"parallelism": n, "completions": other, "template": tpl}),
        ("batch", "CronJob") => {
            json!({"jobTemplate": {"spec": {"parallelism": n, "template": tpl}}})
        }
        ("kubeflow.org", _) => json!({"tfReplicaSpecs": {
            "Worker": {"replicas": n, "template": tpl.clone()},
            "PS": {"replicas": other, "template": tpl}}}),
        ("batch.volcano.sh", _) => json!({"tasks": [
            {"name": "w", "replicas": n, "template": tpl.clone()},
            {"replicas": other, "template": tpl}]}),
        _ => json!({"replicas": n, "template": tpl}),
    };
    json!({"metadata": {"name": "w", "namespace": "ml",
        "labels": {"biz.group.resource.quota": "q"}}, "spec": spec})
    .to_string()
}

/// A quota with room for anything and something already charged.
fn quota() -> Quota {
    let hard: ResourceList = KEYS
        .iter()
        .map(|k| (k.to_string(), Quantity::from_nanos(MAX_NANOS)))
        .collect();
    let mut q = Quota::new(
        "q",
        QuotaSpec {
            parent: String::new(),
            hard,
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    );
    let held = PodSet {
        name: "main".into(),
        count: 3,
        per_pod: [
            (
                "requests.nvidia.com/gpu".to_string(),
                Quantity::from_units(2),
            ),
            ("cpu".to_string(), Quantity::from_units(4)),
            ("pods".to_string(), Quantity::from_units(1)),
        ]
        .into(),
        qos: None,
    };
    admission::charge(&mut q, "other", charge(vec![held], None)).unwrap();
    q
}

fn charge(pod_sets: Vec<PodSet>, hpa: Option<i64>) -> Charge {
    Charge {
        pod_sets,
        hpa: hpa.map(|max_replicas| HpaCharge {
            name: "h".into(),
            max_replicas,
        }),
        since: "2026-01-01T00:00:00.000Z".into(),
        uid: String::new(),
        admitted: None,
    }
}

/// Charges `c` as `w` into `q` and releases it: used never drops below
/// where it was, and comes back to exactly that.
fn charge_and_release(q: &mut Quota, c: Charge) -> Result<(), TestCaseError> {
    let before = q.status.used.clone();
    if admission::charge(q, "w", c).is_ok() {
        for k in KEYS {
            prop_assert!(
                resources::get(&q.status.used, k) >= resources::get(&before, k),
                "charging lowered {}: {} → {}",
                k,
                resources::get(&before, k),
                resources::get(&q.status.used, k)
            );
        }
    } else {
        prop_assert_eq!(&q.status.used, &before, "a refused charge changed used");
    }
    admission::release(q, "w");
    prop_assert_eq!(
        &q.status.used,
        &before,
        "releasing did not give back the charge"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever an adapter admits uses nothing negative, and charging it
    /// then releasing it leaves `used` where it was, never lower between.
    #[test]
    fn no_workload_ever_lowers_usage_below_what_releasing_it_gives_back(
        kind in 0..ADAPTERS.len(), tpl in template(), n in count(), other in count())
    {
        let a = &ADAPTERS[kind];
        let json = object(kind, tpl, n, other);
        let Ok(w) = a.read(&json, &KeyConfig::default()) else { return Ok(()) };
        for (k, v) in w.usage() {
            prop_assert!(!v.is_negative() && v.nanos() <= MAX_NANOS, "{} {}: {} = {}", a.kind, json, k, v);
        }
        let mut q = quota();
        charge_and_release(&mut q, charge(w.pod_sets, None))?;
    }

    /// The same of a charge that did not come through an adapter: counts
    /// changed later by a scale or an HPA, amounts of any sign and size.
    #[test]
    fn no_charge_ever_lowers_usage_below_what_releasing_it_gives_back(
        sets in prop::collection::vec((count(), prop::collection::btree_map(
            prop::sample::select(KEYS.to_vec()).prop_map(String::from),
            prop_oneof![-5i128..5, Just(MAX_NANOS), Just(-MAX_NANOS), Just(i128::MAX), Just(i128::MIN)]
                .prop_map(|u| if u.unsigned_abs() < 5 { u * 1_000_000_000 } else { u })
                .prop_map(Quantity::from_nanos),
            0..4)), 1..3),
        hpa in proptest::option::of(count()))
    {
        let pod_sets = sets.into_iter().enumerate().map(|(i, (count, per_pod))| PodSet {
            name: format!("s{i}"), count, per_pod, qos: None,
        }).collect();
        let mut q = quota();
        charge_and_release(&mut q, charge(pod_sets, hpa))?;
    }
}
