//! Holding a queued Volcano Job by gating its pods (`quota::hold`), over
//! arbitrary task lists: the mutating webhook's patch always makes a held
//! job whatever its templates held before, keeps everything else, reads
//! the same through the typed adapter, and holding twice changes nothing;
//! released, the job reads as what it runs.

use proptest::prelude::*;
use quota::hold::{self, Hold, GATE};
use quota::workload::adapter_for_kind;
use quota::KeyConfig;
use serde_json::{json, Value};

/// RFC 6902 `add` as kube-apiserver applies it (members, and `-` of a
/// list): what `hold_patch` writes. A member added twice is a bug.
fn apply(obj: &mut Value, ops: &Value) {
    for op in ops.as_array().unwrap() {
        assert_eq!(op["op"], "add", "{op}");
        let path = op["path"].as_str().unwrap();
        let (parent, last) = path.rsplit_once('/').unwrap();
        let last = last.replace("~1", "/").replace("~0", "~");
        match obj.pointer_mut(parent).expect("the parent exists") {
            Value::Object(m) => assert!(m.insert(last, op["value"].clone()).is_none(), "{path}"),
            Value::Array(a) => {
                assert_eq!(last, "-");
                a.push(op["value"].clone());
            }
            other => panic!("{path} in {other}"),
        }
    }
}

/// A task template: with or without metadata, labels, spec, other gates,
/// bizrq's gate already.
fn template() -> impl Strategy<Value = Value> {
    (0u8..3, 0u8..3, any::<bool>(), any::<bool>(), 1i64..4).prop_map(
        |(meta, spec, other_gate, ours, cpu)| {
            let mut t = json!({});
            match meta {
                1 => t["metadata"] = json!({}),
                2 => t["metadata"] = json!({"labels": {"team": "nlp"}}),
                _ => {}
            }
            if spec > 0 || other_gate || ours {
                t["spec"] = json!({"containers": [{"name": "c",
                    "resources": {"requests": {"cpu": cpu.to_string()}}}]});
                let mut gates = Vec::new();
                if other_gate {
                    gates.push(json!({"name": "example.com/other"}));
                }
                if ours {
                    gates.push(json!({"name": GATE}));
                }
                if !gates.is_empty() || spec == 2 {
                    t["spec"]["schedulingGates"] = Value::Array(gates);
                }
            }
            t
        },
    )
}

fn vcjob(tasks: &[(Value, i64)], annotated: bool) -> Value {
    let tasks: Vec<Value> = tasks
        .iter()
        .enumerate()
        .map(|(i, (t, n))| json!({"name": format!("t{i}"), "replicas": n, "template": t}))
        .collect();
    let mut j = json!({"metadata": {"name": "v", "namespace": "ml"}, "spec": {"tasks": tasks}});
    if annotated {
        j["metadata"]["annotations"] = json!({GATE: "true", "note": "x"});
    }
    j
}

fn gates(t: &Value) -> Vec<String> {
    t["spec"]["schedulingGates"]
        .as_array()
        .map(|g| {
            g.iter()
                .map(|g| g["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

proptest! {
    #[test]
    fn the_hold_patch_always_holds_and_keeps_the_rest(
        tasks in prop::collection::vec((template(), 0i64..4), 1..5),
        annotated in any::<bool>(),
    ) {
        let a = adapter_for_kind("batch.volcano.sh", "Job").unwrap();
        let hold = a.hold();
        prop_assert!(matches!(hold, Hold::PodGate(_)));
        let before = vcjob(&tasks, annotated);
        let read = |o: &Value| a.read(&o.to_string(), &KeyConfig::default()).unwrap();
        // The typed reader and the JSON one agree on "held".
        let counts = |o: &Value| read(o).pod_sets.iter().map(|s| s.count).collect::<Vec<_>>();
        let replicas: Vec<i64> = tasks.iter().map(|(_, n)| *n).collect();
        let held_before = hold::is_held(hold, &before);
        let zeros = vec![0; tasks.len()];
        prop_assert_eq!(counts(&before), if held_before { zeros.clone() } else { replicas.clone() });
        let mut after = before.clone();
        apply(&mut after, &hold::hold_patch(hold, &before));
        prop_assert!(hold::is_held(hold, &after));
        prop_assert_eq!(counts(&after), zeros, "held: runs nothing");
        prop_assert_eq!(hold::hold_patch(hold, &after), json!([]), "holding twice changes nothing");
        for (i, (t, _)) in tasks.iter().enumerate() {
            let got = &after["spec"]["tasks"][i]["template"];
            // Other gates kept, in order, ours once.
            let mut want = gates(t);
            if !want.iter().any(|g| g == GATE) {
                want.push(GATE.to_string());
            }
            prop_assert_eq!(gates(got), want);
            prop_assert_eq!(&got["metadata"]["labels"][GATE], "true");
            if t["metadata"]["labels"]["team"] == "nlp" {
                prop_assert_eq!(&got["metadata"]["labels"]["team"], "nlp");
            }
            prop_assert_eq!(&got["spec"]["containers"], &t["spec"]["containers"]);
        }
        // Released: what it runs is what it would have run unheld.
        let released = hold::as_released(hold, &after);
        prop_assert!(!hold::is_held(hold, &released));
        prop_assert_eq!(counts(&released), replicas);
        if annotated {
            prop_assert_eq!(&released["metadata"]["annotations"]["note"], "x");
        }
    }
}
