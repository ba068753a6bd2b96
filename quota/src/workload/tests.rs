use super::runtime;
use super::*;
use crate::quantity::Quantity;

#[test]
fn an_object_of_another_kind_than_the_request_names_is_refused() {
    let job = adapter_for_kind("batch", "Job").unwrap();
    let keys = KeyConfig::default();
    let spec =
        r#""spec":{"template":{"spec":{"containers":[{"resources":{"requests":{"cpu":"1"}}}]}}}"#;
    let deployment = format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web","namespace":"ml"}},{spec}}}"#
    );
    let e = job.read(&deployment, &keys).unwrap_err().to_string();
    assert_eq!(
        e,
        "bizrq: the request is for a Job (batch) but its object says apiVersion \"apps/v1\", \
         kind \"Deployment\": refused, an object is judged only as the kind it is"
    );
    let value: serde_json::Value = serde_json::from_str(&deployment).unwrap();
    assert_eq!(
        job.read_value(&value, &keys).unwrap_err().to_string(),
        e,
        "a parsed object is judged alike"
    );
    // The kind alone, or the group alone, wrong is as wrong.
    for bad in [
        format!(r#"{{"apiVersion":"batch/v1","kind":"CronJob",{spec}}}"#),
        format!(r#"{{"apiVersion":"apps/v1","kind":"Job",{spec}}}"#),
        format!(r#"{{"kind":"Deployment",{spec}}}"#),
    ] {
        assert!(job.read(&bad, &keys).is_err(), "{bad}");
    }
    // Its own kind, any version, or no type at all (a list's items).
    for good in [
        format!(r#"{{"apiVersion":"batch/v1","kind":"Job",{spec}}}"#),
        format!(r#"{{"apiVersion":"batch/v2","kind":"Job",{spec}}}"#),
        format!(r#"{{{spec}}}"#),
    ] {
        assert!(job.read(&good, &keys).is_ok(), "{good}");
    }
}

/// A workload asking for more distinct resource names than
/// `MAX_RESOURCE_NAMES` is refused naming the limit; at the limit it
/// is read.
#[test]
fn a_workload_with_more_resource_names_than_the_limit_is_refused() {
    let job = adapter_for_kind("batch", "Job").unwrap();
    let with = |n: usize| {
        let requests: Vec<String> = (0..n)
            .map(|i| format!(r#""example.com/r{i:05}":"1""#))
            .collect();
        format!(
            r#"{{"metadata":{{"name":"wide","namespace":"ml"}},"spec":{{"template":{{"spec":{{"containers":[{{"resources":{{"requests":{{{}}}}}}}]}}}}}}}}"#,
            requests.join(",")
        )
    };
    let keys = KeyConfig::default();
    let e = job.read(&with(20_000), &keys).unwrap_err().to_string();
    assert!(
        e.contains("different resources; a workload may ask for at most 64"),
        "{e}"
    );
    let fits = job.read(&with(10), &keys).unwrap();
    assert!(fits.usage().len() <= MAX_RESOURCE_NAMES);
}

/// The adapters read the declared run time as `runtime::max_runtime`
/// reads the object, without a second parse; a wrong one is kept as an
/// error, not refused (only a budget that reserves on it refuses).
#[test]
fn adapters_read_the_declared_run_time_as_max_runtime_does() {
    let objects = [
        (
            "batch",
            "Job",
            r#"{"metadata":{"name":"j","namespace":"n","annotations":{"biz.group.resource.quota/max-runtime":"3h"}},"spec":{"activeDeadlineSeconds":7200}}"#,
        ),
        (
            "kubeflow.org",
            "PyTorchJob",
            r#"{"metadata":{"name":"p","namespace":"n"},"spec":{"runPolicy":{"activeDeadlineSeconds":600}}}"#,
        ),
        (
            "apps",
            "Deployment",
            r#"{"metadata":{"name":"d","namespace":"n","annotations":{"biz.group.resource.quota/max-runtime":"1d"}},"spec":{}}"#,
        ),
        (
            "batch",
            "Job",
            r#"{"metadata":{"name":"j","namespace":"n"},"spec":{"activeDeadlineSeconds":null}}"#,
        ),
        (
            "batch",
            "Job",
            r#"{"metadata":{"name":"j","namespace":"n","annotations":{"biz.group.resource.quota/max-runtime":"1.5h"}}}"#,
        ),
        (
            "batch",
            "Job",
            r#"{"metadata":{"name":"j","namespace":"n"},"spec":{"activeDeadlineSeconds":0}}"#,
        ),
    ];
    let mut got = Vec::new();
    for (group, kind, json) in objects {
        let w = read(group, kind, json);
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(w.run_time, runtime::max_runtime(&value), "{json}");
        got.push(w.run_time.map(|r| r.map(|r| r.ms)).ok());
    }
    assert_eq!(
        got,
        [
            Some(Some(7_200_000)),
            Some(Some(600_000)),
            Some(Some(86_400_000)),
            Some(None),
            None,
            None
        ]
    );
}

#[test]
fn a_finished_job_says_so() {
    let done = |group, kind, status: &str| {
        let json = format!(r#"{{"metadata":{{"name":"j","namespace":"n"}},"status":{status}}}"#);
        read(group, kind, &json).finished
    };
    assert!(done(
        "batch",
        "Job",
        r#"{"conditions":[{"type":"Complete","status":"True"}]}"#
    ));
    assert!(done(
        "batch",
        "Job",
        r#"{"conditions":[{"type":"Failed","status":"True"}]}"#
    ));
    assert!(!done(
        "batch",
        "Job",
        r#"{"conditions":[{"type":"Suspended","status":"True"},{"type":"Complete","status":"False"}]}"#
    ));
    assert!(!done("batch", "Job", "null"));
    assert!(done(
        "kubeflow.org",
        "PyTorchJob",
        r#"{"conditions":[{"type":"Succeeded","status":"True"}]}"#
    ));
    assert!(!done(
        "apps",
        "Deployment",
        r#"{"conditions":[{"type":"Complete","status":"True"}]}"#
    ));
}

#[test]
fn a_finished_job_runs_nothing() {
    let job = |status: &str| {
        format!(
            r#"{{"metadata":{{"name":"j","namespace":"n"}},"spec":{{"parallelism":3,"template":{TPL}}},"status":{status}}}"#
        )
    };
    let running = read("batch", "Job", &job("null"));
    assert_eq!(gpus(&running), Quantity::from_units(6));
    for done in [
        r#"{"conditions":[{"type":"Complete","status":"True","lastTransitionTime":"2026-11-29T11:00:00Z"}]}"#,
        r#"{"conditions":[{"type":"Failed","status":"True","lastTransitionTime":"2026-11-29T11:00:00Z"}]}"#,
    ] {
        let mut w = read("batch", "Job", &job(done));
        assert!(w.finished);
        assert_eq!(
            w.finished_at,
            crate::time::parse_rfc3339("2026-11-29T11:00:00Z")
        );
        // Read as declared: its pods may still run.
        assert_eq!(gpus(&w), Quantity::from_units(6), "{done}");
        let mut created = w.clone();
        w.finish();
        assert_eq!(gpus(&w), Quantity::from_units(0), "{done}");
        assert_eq!(w.pod_sets.len(), 1, "its pod sets kept, at 0 pods");
        // A CREATE's status is the client's: ignored.
        created.ignore_status();
        created.finish();
        assert!(!created.finished);
        assert_eq!(gpus(&created), Quantity::from_units(6), "{done}");
    }
}

fn read(group: &str, kind: &str, json: &str) -> Workload {
    adapter_for_kind(group, kind)
        .unwrap()
        .read(json, &KeyConfig::default())
        .unwrap()
}
fn gpus(w: &Workload) -> Quantity {
    crate::resources::get(&w.usage(), "requests.nvidia.com/gpu")
}
const TPL: &str = r#"{"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}"#;

#[test]
fn deployment_replicas_times_template() {
    let w = read(
        "apps",
        "Deployment",
        &format!(
            r#"{{"metadata":{{"name":"d","labels":{{"biz.group.resource.quota":"nlp"}}}},"spec":{{"replicas":3,"template":{TPL}}}}}"#
        ),
    );
    assert_eq!(w.quota(), Some("nlp"));
    assert_eq!(gpus(&w), Quantity::from_units(6));
    assert_eq!(
        crate::resources::get(&w.usage(), "pods"),
        Quantity::from_units(3)
    );
    let w = read(
        "apps",
        "StatefulSet",
        &format!(r#"{{"spec":{{"template":{TPL}}}}}"#),
    );
    assert_eq!(gpus(&w), Quantity::from_units(2), "replicas default to 1");
}

#[test]
fn replicaset_with_a_controller_is_not_governed() {
    let w = read(
        "apps",
        "ReplicaSet",
        &format!(
            r#"{{"metadata":{{"labels":{{"biz.group.resource.quota":"nlp"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"Deployment","name":"d","controller":true}}]}},"spec":{{"replicas":2,"template":{TPL}}}}}"#
        ),
    );
    assert_eq!(w.quota(), None);
    // An Argo Rollout's ReplicaSets are the Rollout's: not charged twice.
    let w = read(
        "apps",
        "ReplicaSet",
        &format!(
            r#"{{"metadata":{{"labels":{{"biz.group.resource.quota":"nlp"}},"ownerReferences":[{{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","name":"r","controller":true}}]}},"spec":{{"replicas":2,"template":{TPL}}}}}"#
        ),
    );
    assert_eq!(w.quota(), None);
    // A ReplicaSet of its own is governed.
    let w = read(
        "apps",
        "ReplicaSet",
        &format!(
            r#"{{"metadata":{{"labels":{{"biz.group.resource.quota":"nlp"}}}},"spec":{{"replicas":2,"template":{TPL}}}}}"#
        ),
    );
    assert_eq!(w.quota(), Some("nlp"));
}

#[test]
fn job_parallelism_completions_and_suspend() {
    let w = read(
        "batch",
        "Job",
        &format!(r#"{{"spec":{{"parallelism":4,"completions":2,"template":{TPL}}}}}"#),
    );
    assert_eq!(gpus(&w), Quantity::from_units(4));
    let w = read(
        "batch",
        "Job",
        &format!(r#"{{"spec":{{"parallelism":4,"suspend":true,"template":{TPL}}}}}"#),
    );
    assert_eq!(gpus(&w), Quantity::ZERO);
}

#[test]
fn cronjob_checks_one_run() {
    let w = read(
        "batch",
        "CronJob",
        &format!(
            r#"{{"spec":{{"suspend":true,"jobTemplate":{{"spec":{{"parallelism":3,"template":{TPL}}}}}}}}}"#
        ),
    );
    assert_eq!(w.mode, ChargeMode::CheckOnly);
    assert_eq!(gpus(&w), Quantity::from_units(6));
}

#[test]
fn kubeflow_replica_specs() {
    let tf = read(
        "kubeflow.org",
        "TFJob",
        &format!(
            r#"{{"spec":{{"tfReplicaSpecs":{{"PS":{{"replicas":1,"template":{TPL}}},"Worker":{{"replicas":4,"template":{TPL}}}}}}}}}"#
        ),
    );
    assert_eq!(gpus(&tf), Quantity::from_units(10));
    let pt = read(
        "kubeflow.org",
        "PyTorchJob",
        &format!(
            r#"{{"spec":{{"pytorchReplicaSpecs":{{"Master":{{"template":{TPL}}},"Worker":{{"replicas":3,"template":{TPL}}}}}}}}}"#
        ),
    );
    assert_eq!(gpus(&pt), Quantity::from_units(8));
    let mpi = read(
        "kubeflow.org",
        "MPIJob",
        &format!(
            r#"{{"spec":{{"runPolicy":{{"suspend":true}},"mpiReplicaSpecs":{{"Worker":{{"replicas":3,"template":{TPL}}}}}}}}}"#
        ),
    );
    assert_eq!(gpus(&mpi), Quantity::ZERO);
}

#[test]
fn volcano_tasks() {
    let w = read(
        "batch.volcano.sh",
        "Job",
        &format!(
            r#"{{"spec":{{"minAvailable":3,"tasks":[{{"name":"ps","replicas":1,"template":{TPL}}},{{"replicas":2,"template":{TPL}}}]}}}}"#
        ),
    );
    assert_eq!(gpus(&w), Quantity::from_units(6));
    assert_eq!(w.pod_sets[1].name, "task-1");
    // Held in its queue (annotation and every template gated): it
    // runs nothing, as a suspended Job; counts are checked all the same.
    let gated = r#"{"spec":{"schedulingGates":[{"name":"biz.group.resource.quota/queued"}],"containers":[{"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}"#;
    let obj = |ann: &str, tpl2: &str, n: i64| {
        format!(
            r#"{{"metadata":{{"annotations":{{{ann}}}}},"spec":{{"tasks":[{{"replicas":{n},"template":{gated}}},{{"replicas":2,"template":{tpl2}}}]}}}}"#
        )
    };
    let held = r#""biz.group.resource.quota/queued":"true""#;
    let w = read("batch.volcano.sh", "Job", &obj(held, gated, 1));
    assert_eq!(gpus(&w), Quantity::ZERO);
    assert_eq!(
        w.pod_sets.iter().map(|s| s.count).collect::<Vec<_>>(),
        [0, 0]
    );
    // Released (annotation gone), or a template left ungated: it runs.
    assert_eq!(
        gpus(&read("batch.volcano.sh", "Job", &obj("", gated, 1))),
        Quantity::from_units(3)
    );
    assert_eq!(
        gpus(&read("batch.volcano.sh", "Job", &obj(held, TPL, 1))),
        Quantity::from_units(5)
    );
    let a = adapter_for_kind("batch.volcano.sh", "Job").unwrap();
    assert!(a
        .read(&obj(held, gated, -1), &KeyConfig::default())
        .is_err());
    assert_eq!(
        a.hold(),
        crate::hold::Hold::PodGate(&["spec", "tasks", "*", "template"])
    );
    assert!(crate::queue::queueable(a));
    // Never suspended by reclaim or preemption: nothing stops its pods.
    assert_eq!(crate::reclaim::Stop::of(a), crate::reclaim::Stop::Never);
}

#[test]
fn jobset_replicated_jobs() {
    let tpl = |p: i64, c: i64| {
        format!(
            r#"{{"spec":{{"parallelism":{p},"completions":{c},"suspend":true,"template":{TPL}}}}}"#
        )
    };
    let obj = |suspend: bool| {
        format!(
            r#"{{"spec":{{"suspend":{suspend},"replicatedJobs":[{{"name":"driver","template":{}}},{{"name":"workers","replicas":3,"template":{}}}]}}}}"#,
            tpl(1, 1),
            tpl(4, 2)
        )
    };
    let w = read("jobset.x-k8s.io", "JobSet", &obj(false));
    // driver: 1 × 1; workers: 3 Jobs × min(4, 2): the templates' own
    // suspend flags are the JobSet controller's, not read.
    assert_eq!(
        w.pod_sets.iter().map(|s| s.count).collect::<Vec<_>>(),
        [1, 6]
    );
    assert_eq!(gpus(&w), Quantity::from_units(14));
    assert_eq!(w.pod_sets[1].name, "workers");
    let s = read("jobset.x-k8s.io", "JobSet", &obj(true));
    assert_eq!(gpus(&s), Quantity::ZERO, "suspended: runs nothing");
    let a = adapter_for_kind("jobset.x-k8s.io", "JobSet").unwrap();
    assert_eq!(a.suspend_path, ["spec", "suspend"]);
    assert!(crate::queue::queueable(a));
    // Hostile counts are refused, suspended or not.
    let keys = KeyConfig::default();
    for bad in [
        r#"{"spec":{"suspend":true,"replicatedJobs":[{"name":"w","replicas":-1}]}}"#,
        r#"{"spec":{"replicatedJobs":[{"name":"w","replicas":100000,"template":{"spec":{"parallelism":100000}}}]}}"#,
    ] {
        let e = a.read(bad, &keys).unwrap_err().to_string();
        assert!(e.contains("replicatedJob"), "{e}");
    }
    // Finished on its condition.
    let done = r#"{"spec":{},"status":{"conditions":[{"type":"Completed","status":"True"}]}}"#;
    assert!(a.read(done, &keys).unwrap().finished);
}

#[test]
fn rollout_and_lookup_by_resource() {
    let a = adapter_for_resource("argoproj.io", "rollouts").unwrap();
    assert_eq!(a.kind, "Rollout");
    assert_eq!(a.workload_ref("ml", "r"), "argoproj.io/Rollout/ml/r");
    assert!(adapter_for_kind("", "Pod").is_none());
}

#[test]
fn scale_and_hpa() {
    assert_eq!(
        read_scale_replicas(
            r#"{"apiVersion":"autoscaling/v1","kind":"Scale","spec":{"replicas":7}}"#
        )
        .unwrap(),
        7
    );
    let h = read_hpa(r#"{"metadata":{"name":"h","namespace":"ml"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"minReplicas":1,"maxReplicas":10}}"#).unwrap();
    assert_eq!((h.target_group.as_str(), h.max_replicas), ("apps", 10));
    assert_eq!(h.target_version, "v1", "where a lookup GETs the target");
    assert_eq!((group_of("v1"), version_of("v1")), ("", "v1"));
}

#[test]
fn binding_reads_only_metadata() {
    // An old object is read for its binding alone: its spec is not parsed.
    let a = adapter_for_kind("batch", "CronJob").unwrap();
    let w = a
        .read_binding(r#"{"metadata":{"name":"n","labels":{"biz.group.resource.quota":"ml"}},"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}}}}}"#)
        .unwrap();
    assert_eq!(
        (w.quota(), w.mode, w.pod_sets.len()),
        (Some("ml"), ChargeMode::CheckOnly, 0)
    );
}

/// One object of each adapter's kind: `tpl` as its pod template and
/// `n` as the count its spec holds.
fn each_kind(tpl: &str, n: &str) -> Vec<(&'static Adapter, String)> {
    let meta = r#""metadata":{"name":"bert","namespace":"ml"}"#;
    ADAPTERS
        .iter()
        .map(|a| {
            let spec = match (a.group, a.kind) {
                ("batch", "Job") => format!(r#"{{"parallelism":{n},"template":{tpl}}}"#),
                ("batch", "CronJob") => {
                    format!(r#"{{"jobTemplate":{{"spec":{{"parallelism":{n},"template":{tpl}}}}}}}"#)
                }
                ("kubeflow.org", _) => format!(
                    r#"{{"pytorchReplicaSpecs":{{"Worker":{{"replicas":{n},"template":{tpl}}}}}}}"#
                ),
                ("batch.volcano.sh", _) => {
                    format!(r#"{{"tasks":[{{"name":"w","replicas":{n},"template":{tpl}}}]}}"#)
                }
                ("jobset.x-k8s.io", _) => format!(
                    r#"{{"replicatedJobs":[{{"name":"w","replicas":{n},"template":{{"spec":{{"template":{tpl}}}}}}}]}}"#
                ),
                _ => format!(r#"{{"replicas":{n},"template":{tpl}}}"#),
            };
            (a, format!(r#"{{{meta},"spec":{spec}}}"#))
        })
        .collect()
}

fn refusal(a: &Adapter, json: &str) -> String {
    match a.read(json, &KeyConfig::default()) {
        Err(AdapterError::Invalid(m)) => m,
        other => panic!("{} {}: {other:?}", a.group, a.kind),
    }
}

#[test]
fn a_negative_request_is_refused_naming_the_container_and_key() {
    let tpl = r#"{"spec":{"containers":[{"name":"worker","resources":{"requests":{"nvidia.com/gpu":"-100"}}}]}}"#;
    for (a, json) in each_kind(tpl, "2") {
        assert_eq!(
            refusal(a, &json),
            format!(
                "bizrq: container \"worker\" of {} ml/bert: requests nvidia.com/gpu is negative (-100)",
                a.kind
            )
        );
    }
}

#[test]
fn a_negative_limit_init_container_or_overhead_is_refused() {
    for (tpl, says) in [
        (
            r#"{"spec":{"containers":[{"resources":{"limits":{"cpu":"-1"}}}]}}"#,
            "container #0 of",
        ),
        (
            r#"{"spec":{"containers":[],"initContainers":[{"name":"setup","resources":{"limits":{"memory":"-1Gi"}}}]}}"#,
            "init container \"setup\" of",
        ),
        (
            r#"{"spec":{"containers":[],"overhead":{"cpu":"-250m"}}}"#,
            "pod overhead of",
        ),
    ] {
        for (a, json) in each_kind(tpl, "1") {
            let m = refusal(a, &json);
            assert!(m.contains(says) && m.contains("is negative (-"), "{m}");
        }
    }
}

#[test]
fn a_negative_or_huge_count_is_refused() {
    for n in ["-1", "2147483648"] {
        for (a, json) in each_kind(TPL, n) {
            let m = refusal(a, &json);
            assert!(
                m.starts_with(&format!("bizrq: {} ml/bert: ", a.kind)),
                "{m}"
            );
            assert!(m.contains(n), "{m}");
        }
    }
    // Completions too, and a suspended Job's counts all the same.
    let job = adapter_for_kind("batch", "Job").unwrap();
    let m = refusal(
        job,
        &format!(r#"{{"spec":{{"suspend":true,"completions":-3,"template":{TPL}}}}}"#),
    );
    assert!(m.ends_with("spec.completions is negative (-3)"), "{m}");
}

#[test]
fn what_no_quota_could_account_is_refused() {
    // Each amount parses (2^63 - 1 units), but one pod of two such
    // containers, or many pods of one, comes to more.
    let big = r#"{"resources":{"requests":{"cpu":"9223372036854775807"}}}"#;
    let two = format!(r#"{{"spec":{{"containers":[{big},{big}]}}}}"#);
    for (a, json) in each_kind(&two, "1") {
        assert!(refusal(a, &json).contains("one pod comes to"));
    }
    let one = format!(r#"{{"spec":{{"containers":[{big}]}}}}"#);
    for (a, json) in each_kind(&one, "3") {
        assert!(refusal(a, &json).contains("its pods come to"));
    }
}

#[test]
fn names_longer_than_kubernetes_allows_are_refused() {
    let a = adapter_for_kind("apps", "Deployment").unwrap();
    let long = "n".repeat(254);
    let json = format!(r#"{{"metadata":{{"name":"{long}"}},"spec":{{"template":{TPL}}}}}"#);
    assert_eq!(
        refusal(a, &json),
        "bizrq: Deployment: metadata.name is 254 characters long; Kubernetes allows at most 253"
    );
    let json = format!(
        r#"{{"metadata":{{"name":"d","namespace":"{}"}}}}"#,
        "s".repeat(64)
    );
    assert!(refusal(a, &json).contains("metadata.namespace is 64 characters"));
    assert!(a.checked_ref("ml", &long).is_err());
    assert!(a.checked_ref(&"s".repeat(64), "d").is_err());
    assert_eq!(
        a.checked_ref("ml", &"n".repeat(253)).unwrap(),
        a.workload_ref("ml", &"n".repeat(253))
    );
    assert!(WorkloadRef::parse(&a.workload_ref("ml", &long)).is_none());
    assert!(WorkloadRef::parse(&format!("apps/{}/ml/d", "K".repeat(64))).is_none());
    assert!(WorkloadRef::parse("apps/Deployment/ml/d").is_some());
}

/// A `WorkloadKey` made by an adapter is the string the store keeps, its
/// parts read back as they were given, and parsing a string checks it as
/// `WorkloadRef::parse` does.
#[test]
fn a_workload_key_is_its_reference_and_reads_back_its_parts() {
    let a = adapter_for_kind("batch", "Job").unwrap();
    let key = a.checked_ref("ml", "train").unwrap();
    assert_eq!(key, "batch/Job/ml/train");
    assert_eq!(key.as_str(), &*key);
    let parts = key.parts();
    assert_eq!(
        (parts.group, parts.kind, parts.namespace, parts.name),
        ("batch", "Job", "ml", "train")
    );
    assert_eq!(parts.adapter().map(|a| a.kind), Some("Job"));
    assert_eq!(WorkloadKey::parse("batch/Job/ml/train"), Some(key.clone()));
    assert_eq!(String::from(key), "batch/Job/ml/train");
    let core = adapter_for_kind("", "Pod").map(|p| p.workload_ref("ml", "p"));
    if let Some(core) = core {
        assert_eq!(core.parts().group, "");
        assert_eq!(core.parts().name, "p");
    }
    assert_eq!(WorkloadKey::parse("batch/Job/ml"), None);
    assert_eq!(
        WorkloadKey::parse(&format!("apps/{}/ml/d", "K".repeat(64))),
        None
    );
}

/// Found by fuzzing (admission_review): a namespace "/nlp" made the
/// reference "apps/Deployment//nlp/d", which reads back as namespace ""
/// and name "nlp/d": a charge filed under another workload's name.
#[test]
fn a_name_or_namespace_that_would_not_read_back_is_refused() {
    let a = adapter_for_kind("batch.volcano.sh", "Job").unwrap();
    for (ns, name) in [
        ("/nlp", "d"),
        ("nlp", "a/b"),
        ("nlp", "50%"),
        ("Nlp", "d"),
        ("-x", "d"),
        ("nlp", ".."),
    ] {
        let err = a.checked_ref(ns, name).unwrap_err().to_string();
        assert!(err.starts_with("bizrq: Job: "), "{err}");
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"{ns}"}}}}"#);
        assert!(refusal(a, &json).contains("is not a"), "{ns} {name}");
    }
    for (ns, name) in [("nlp", "d"), ("", "d"), ("ml-2", "Train.v1:x")] {
        let wref = a.checked_ref(ns, name).unwrap();
        let back = WorkloadRef::parse(&wref).map(|r| (r.namespace, r.name));
        assert_eq!(back, Some((ns, name)));
    }
}

/// Standalone, nothing but bizrq checks a name (issue 29): one the API
/// server would refuse is refused as it would be, naming the field.
#[test]
fn an_object_name_that_is_not_a_dns_subdomain_is_refused() {
    let a = adapter_for_kind("apps", "Deployment").unwrap();
    for bad in [
        "Web", "web_1", "-web", "web-", "we..b", ".web", "web.", "wéb", "a b", "a:b",
    ] {
        let json = format!(
            r#"{{"metadata":{{"name":"{bad}","namespace":"nlp"}},"spec":{{"template":{TPL}}}}}"#
        );
        let err = refusal(a, &json);
        assert!(
            err.contains("metadata.name") && err.contains("is not a DNS-1123 subdomain"),
            "{bad}: {err}"
        );
    }
    for good in ["web", "web-1", "a.b-c.d9", "0", &"n".repeat(253)] {
        let json = format!(
            r#"{{"metadata":{{"name":"{good}","namespace":"nlp"}},"spec":{{"template":{TPL}}}}}"#
        );
        assert!(a.read(&json, &KeyConfig::default()).is_ok(), "{good}");
    }
    // A CREATE whose name the API server is still to generate.
    let json = format!(
        r#"{{"metadata":{{"generateName":"web-","namespace":"nlp"}},"spec":{{"template":{TPL}}}}}"#
    );
    assert!(a.read(&json, &KeyConfig::default()).is_ok());
    assert!(!is_dns_subdomain(&"n".repeat(254)));
}

#[test]
fn a_negative_scale_or_hpa_is_refused() {
    let err = read_scale_replicas(r#"{"spec":{"replicas":-5}}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq: Scale: spec.replicas is negative (-5)"
    );
    let err = read_hpa(
        r#"{"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web"},"maxReplicas":-1}}"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq: HorizontalPodAutoscaler: spec.maxReplicas is negative (-1)"
    );
    let long = "w".repeat(254);
    let hpa = format!(
        r#"{{"spec":{{"scaleTargetRef":{{"kind":"Deployment","name":"{long}"}},"maxReplicas":1}}}}"#
    );
    assert!(read_hpa(&hpa).is_err());
}

/// The controller reads what its watches parsed; the webhook reads the
/// review's text. Both must come to the same workload, or the same
/// refusal, for every kind: numbers as numbers or strings, nulls,
/// negative counts, bad quantities.
#[test]
fn a_parsed_object_reads_as_its_text() {
    let templates = [
        (TPL, "3"),
        (TPL, "-1"),
        (
            r#"{"spec":{"containers":[{"resources":{"requests":{"cpu":0.5,"nvidia.com/gpu":2}}}]}}"#,
            "2",
        ),
        (
            r#"{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}"#,
            "1",
        ),
        (r#"{"metadata":null,"spec":null}"#, "null"),
    ];
    for (tpl, n) in templates {
        for (a, json) in each_kind(tpl, n) {
            let value: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(
                format!("{:?}", a.read_value(&value, &KeyConfig::default())),
                crate::test_util::positionless(format!(
                    "{:?}",
                    a.read(&json, &KeyConfig::default())
                )),
                "{json}"
            );
        }
    }
    for json in [
        r#"{"metadata":{"name":"h","namespace":"ml"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"minReplicas":1,"maxReplicas":10}}"#,
        r#"{"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web"},"maxReplicas":-1}}"#,
        r#"{"spec":{}}"#,
    ] {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            format!("{:?}", read_hpa_value(&value)),
            crate::test_util::positionless(format!("{:?}", read_hpa(json))),
            "{json}"
        );
    }
}

#[test]
fn bad_quantity_is_a_clear_error() {
    let err = adapter_for_kind("apps", "Deployment")
        .unwrap()
        .read(r#"{"spec":{"template":{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}}}"#, &KeyConfig::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("'lots' is not a quantity"),
        "{err}"
    );
}
