//! Temporary: each old hand-written Job builder against the support builder.
use crate::support::*;
use kube::api::DynamicObject;
use serde_json::{json, Value};
const MAX_RUNTIME: &str = "biz.group.resource.quota/max-runtime";

fn old_borrow_return_job(ns: &str, quota: &str, name: &str, pods: i64, cpu: i64) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": pods, "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu.to_string()}, "limits": {"cpu": cpu.to_string()}}}]}}}}))
    .unwrap()
}

fn old_fair_sharing_job(ns: &str, quota: &str, name: &str, cpu: i64) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu.to_string()}, "limits": {"cpu": cpu.to_string()}}}]}}}}))
    .unwrap()
}

fn old_kueue_scenario_job_object(
    name: &str,
    team: &str,
    cpus: i64,
    class: Option<&str>,
) -> DynamicObject {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": team}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpus.to_string()}, "limits": {"cpu": cpus.to_string()}}}]}}}});
    if let Some(c) = class {
        j["spec"]["template"]["spec"]["priorityClassName"] = json!(c);
    }
    serde_json::from_value(j).unwrap()
}

fn old_ledger_job(name: &str, quota: &str, cards: i64, model: Option<&str>) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": cards, "completions": cards,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}});
    if let Some(m) = model {
        j["metadata"]["labels"]["biz.group.resource.quota/gpu-type"] = json!(m);
    }
    j
}

fn old_preemption_job(
    ns: &str,
    quota: &str,
    name: &str,
    pods: i64,
    cpu: &str,
    class: &str,
) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": pods, "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "priorityClassName": class,
                "containers": [{"name": "c", "image": "trainer",
                    "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}})
}

fn old_shares_job(name: &str, cpu: &str) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}}))
    .unwrap()
}

fn old_prices_job(name: &str, cards: i64, model: Option<&str>, run_s: Option<i64>) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "team"}},
        "spec": {"parallelism": cards, "completions": cards,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}});
    if let Some(m) = model {
        j["metadata"]["labels"]["biz.group.resource.quota/gpu-type"] = json!(m);
    }
    if let Some(s) = run_s {
        j["spec"]["activeDeadlineSeconds"] = json!(s);
    }
    j
}

fn old_queue_flood_job(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}})
}

fn old_queue_flood_job_in(ns: &str, name: &str, cpu: &str) -> Value {
    let mut j = old_queue_flood_job(name, cpu);
    j["metadata"]["namespace"] = json!(ns);
    j
}

fn old_queue_hold_job(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}})
}

fn old_queue_marks_job(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}})
}

fn old_queue_visible_job(name: &str, cpu: &str, deadline_s: Option<i64>) -> DynamicObject {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}});
    if let Some(d) = deadline_s {
        j["spec"]["activeDeadlineSeconds"] = json!(d);
    }
    serde_json::from_value(j).unwrap()
}

fn old_queueing_job(name: &str, cpu: &str, priority: Option<i64>) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}});
    if let Some(p) = priority {
        j["spec"]["template"]["spec"]["priority"] = json!(p);
    }
    j
}

fn old_queueing_job_in(ns: &str, quota: &str, name: &str, cpu: &str) -> Value {
    let mut j = old_queueing_job(name, cpu, None);
    j["metadata"]["namespace"] = json!(ns);
    j["metadata"]["labels"]["biz.group.resource.quota"] = json!(quota);
    j
}

fn old_refunds_job(
    ns: &str,
    name: &str,
    quota: &str,
    pods: i64,
    cpu: &str,
    runtime: Option<&str>,
) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": pods, "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}});
    if let Some(r) = runtime {
        j["metadata"]["annotations"] = json!({"biz.group.resource.quota/max-runtime": r});
    }
    j
}

fn old_reservations_job(
    name: &str,
    quota: &str,
    cards: i64,
    deadline: Option<i64>,
    note: Option<&str>,
) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": cards, "completions": cards,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}});
    if let Some(d) = deadline {
        j["spec"]["activeDeadlineSeconds"] = json!(d);
    }
    if let Some(n) = note {
        j["metadata"]["annotations"] = json!({"biz.group.resource.quota/max-runtime": n});
    }
    j
}

fn old_scenario_job(ns: &str, name: &str, quota: &str, parallelism: i64, cpu: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": parallelism, "completions": parallelism,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "nginx",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}})
}

fn old_updates_job(
    name: &str,
    quota: &str,
    cards: i64,
    deadline: Option<i64>,
    note: Option<&str>,
) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
            "labels": {"biz.group.resource.quota": quota}},
        "spec": {"parallelism": cards, "completions": cards,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}});
    if let Some(d) = deadline {
        j["spec"]["activeDeadlineSeconds"] = json!(d);
    }
    if let Some(n) = note {
        j["metadata"]["annotations"] = json!({MAX_RUNTIME: n});
    }
    j
}

#[test]
fn every_old_builder_equals_the_support_builder() {
    assert_eq!(
        serde_json::to_value(old_borrow_return_job("ml", "team", "a", 2, 4)).unwrap(),
        serde_json::to_value(job("a").quota("team").pods(2).cpu("4").dynamic()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(old_borrow_return_job("cv", "ml", "b", 1, 1)).unwrap(),
        serde_json::to_value(job("b").ns("cv").cpu("1").dynamic()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(old_fair_sharing_job("ml", "team", "a", 4)).unwrap(),
        serde_json::to_value(job("a").quota("team").cpu("4").dynamic()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(old_fair_sharing_job("ns-b", "ml", "b", 1)).unwrap(),
        serde_json::to_value(job("b").ns("ns-b").cpu("1").dynamic()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(old_kueue_scenario_job_object("a", "team", 3, None)).unwrap(),
        serde_json::to_value(job("a").quota("team").cpu("3").dynamic()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(old_kueue_scenario_job_object("b", "ml", 1, Some("high"))).unwrap(),
        serde_json::to_value(job("b").cpu("1").class("high").dynamic()).unwrap()
    );
    assert_eq!(
        old_ledger_job("x", "a", 2, Some("A100")),
        job("x").quota("a").cards(2).model("A100").obj()
    );
    assert_eq!(
        old_ledger_job("y", "b", 1, None),
        job("y").quota("b").cards(1).obj()
    );
    assert_eq!(
        old_preemption_job("ml", "team", "a", 2, "4", "high"),
        job("a").quota("team").pods(2).cpu("4").class("high").obj()
    );
    assert_eq!(
        old_preemption_job("ns", "ml", "b", 1, "500m", "low"),
        job("b").ns("ns").cpu("500m").class("low").obj()
    );
    assert_eq!(
        serde_json::to_value(old_shares_job("a", "4")).unwrap(),
        serde_json::to_value(job("a").cpu("4").dynamic()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(old_shares_job("b", "1")).unwrap(),
        serde_json::to_value(job("b").cpu("1").dynamic()).unwrap()
    );
    assert_eq!(
        old_prices_job("a", 4, Some("A100"), None),
        job("a").quota("team").cards(4).model("A100").obj()
    );
    assert_eq!(
        old_prices_job("d", 1, None, Some(4 * 3600)),
        job("d").quota("team").cards(1).deadline(4 * 3600).obj()
    );
    assert_eq!(
        old_prices_job("e", 2, Some("H100"), Some(60)),
        job("e")
            .quota("team")
            .cards(2)
            .model("H100")
            .deadline(60)
            .obj()
    );
    assert_eq!(old_queue_flood_job("a", "3"), job("a").cpu("3").obj());
    assert_eq!(
        old_queue_flood_job_in("ns-b", "a", "2"),
        job("a").ns("ns-b").cpu("2").obj()
    );
    assert_eq!(old_queue_hold_job("a", "3"), job("a").cpu("3").obj());
    assert_eq!(old_queue_marks_job("a", "4"), job("a").cpu("4").obj());
    assert_eq!(
        serde_json::to_value(old_queue_visible_job("a", "3", None)).unwrap(),
        serde_json::to_value(job("a").cpu("3").dynamic()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(old_queue_visible_job("b", "1", Some(600))).unwrap(),
        serde_json::to_value(job("b").cpu("1").deadline(600).dynamic()).unwrap()
    );
    assert_eq!(old_queueing_job("a", "3", None), job("a").cpu("3").obj());
    assert_eq!(
        old_queueing_job("b", "1", Some(100)),
        job("b").cpu("1").priority(100).obj()
    );
    assert_eq!(
        old_queueing_job_in("ns", "q", "a", "2"),
        job("a").ns("ns").quota("q").cpu("2").obj()
    );
    assert_eq!(
        old_refunds_job("ns-a", "train", "user-a", 2, "2", Some("2h")),
        job("train")
            .image("x")
            .ns("ns-a")
            .quota("user-a")
            .pods(2)
            .cpu("2")
            .max_runtime("2h")
            .obj()
    );
    assert_eq!(
        old_refunds_job("ns-b", "j", "user-b", 1, "1", None),
        job("j")
            .image("x")
            .ns("ns-b")
            .quota("user-b")
            .cpu("1")
            .obj()
    );
    assert_eq!(
        old_reservations_job("a", "team", 2, Some(3600), Some("2h")),
        job("a")
            .quota("team")
            .cards(2)
            .deadline(3600)
            .max_runtime("2h")
            .obj()
    );
    assert_eq!(
        old_reservations_job("b", "team", 1, None, None),
        job("b").quota("team").cards(1).obj()
    );
    assert_eq!(
        old_reservations_job("c", "ml", 1, Some(20), None),
        job("c").cards(1).deadline(20).obj()
    );
    assert_eq!(
        old_reservations_job("d", "ml", 3, None, Some("1h")),
        job("d").cards(3).max_runtime("1h").obj()
    );
    assert_eq!(
        old_scenario_job("ml", "a", "team", 3, "2"),
        job("a").image("nginx").quota("team").pods(3).cpu("2").obj()
    );
    assert_eq!(
        old_updates_job("a", "team", 2, Some(3600), Some("2h")),
        job("a")
            .named_uid()
            .quota("team")
            .cards(2)
            .deadline(3600)
            .max_runtime("2h")
            .obj()
    );
    assert_eq!(
        old_updates_job("b", "team", 1, None, None),
        job("b").named_uid().quota("team").cards(1).obj()
    );
    assert_eq!(
        old_updates_job("c", "t", 1, None, Some("9h")),
        job("c")
            .named_uid()
            .quota("t")
            .cards(1)
            .max_runtime("9h")
            .obj()
    );
}

// The review builders, against the old hand-written ones.
use crate::common::review;

fn old_reservations_job_review(uid: &str, object: Option<Value>, old: Option<Value>) -> Value {
    let fixture = if object.is_some() {
        "deployment-create.json"
    } else {
        "deployment-delete.json"
    };
    let mut r = review(fixture, uid, object, old);
    let gvk = json!({"group": "batch", "version": "v1", "kind": "Job"});
    let gvr = json!({"group": "batch", "version": "v1", "resource": "jobs"});
    r["request"]["kind"] = gvk.clone();
    r["request"]["requestKind"] = gvk;
    r["request"]["resource"] = gvr.clone();
    r["request"]["requestResource"] = gvr;
    r["request"]["namespace"] = "ml".into();
    r
}

fn old_updates_job_review(uid: &str, object: Value, old: Option<Value>) -> Value {
    let update = old.is_some();
    let mut r = review("deployment-create.json", uid, Some(object), old);
    let gvk = json!({"group": "batch", "version": "v1", "kind": "Job"});
    let gvr = json!({"group": "batch", "version": "v1", "resource": "jobs"});
    r["request"]["kind"] = gvk.clone();
    r["request"]["requestKind"] = gvk;
    r["request"]["resource"] = gvr.clone();
    r["request"]["requestResource"] = gvr;
    r["request"]["namespace"] = "ml".into();
    if update {
        r["request"]["operation"] = "UPDATE".into();
    }
    r
}

fn old_edges_job_review(uid: &str, job: Value) -> Value {
    let mut rv = review("deployment-create.json", uid, Some(job), None);
    let r = &mut rv["request"];
    r["kind"] = json!({"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"});
    r["resource"] = json!({"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"});
    r["name"] = "bert".into();
    r["namespace"] = "ml".into();
    rv
}

fn old_queue_flood_job_review(uid: &str, user: &str, object: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid,
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": object["metadata"]["name"], "namespace": "ml", "operation": "CREATE",
            "userInfo": {"username": user}, "object": object, "dryRun": false}})
}

fn old_queue_flood_review_by(uid: &str, user: &str, object: Value) -> Value {
    let mut r = old_queue_flood_job_review(uid, user, object);
    r["request"]["namespace"] = r["request"]["object"]["metadata"]["namespace"].clone();
    r
}

fn old_ledger_admit_review(uid: &str, user: &str, j: &Value) -> Value {
    let mut r = review("deployment-create.json", uid, Some(j.clone()), None);
    let gvk = json!({"group": "batch", "version": "v1", "kind": "Job"});
    let gvr = json!({"group": "batch", "version": "v1", "resource": "jobs"});
    r["request"]["kind"] = gvk.clone();
    r["request"]["requestKind"] = gvk;
    r["request"]["resource"] = gvr.clone();
    r["request"]["requestResource"] = gvr;
    r["request"]["namespace"] = "ml".into();
    r["request"]["userInfo"]["username"] = user.into();
    r
}

#[test]
fn every_old_review_equals_the_support_builder() {
    let a = job("a").quota("team").cards(2).obj();
    let b = job("b").ns("ns-b").cpu("2").obj();
    assert_eq!(
        old_reservations_job_review("u", Some(a.clone()), None),
        Review::create("u", a.clone()).of_job().ns("ml").obj()
    );
    assert_eq!(
        old_reservations_job_review("u", None, Some(a.clone())),
        Review::delete("u", a.clone()).of_job().ns("ml").obj()
    );
    assert_eq!(
        old_updates_job_review("u", a.clone(), None),
        Review::create("u", a.clone()).of_job().ns("ml").obj()
    );
    assert_eq!(
        old_updates_job_review("u", b.clone(), Some(a.clone())),
        Review::update("u", b.clone(), a.clone())
            .of_job()
            .ns("ml")
            .obj()
    );
    assert_eq!(
        old_edges_job_review("neg", a.clone()),
        Review::create("neg", a.clone())
            .kind("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
            .name("bert")
            .ns("ml")
            .obj()
    );
    assert_eq!(
        old_queue_flood_job_review("u", "mallory", a.clone()),
        Review::bare_job_create("u", "mallory", a.clone()).obj()
    );
    assert_eq!(
        old_queue_flood_review_by("u", "alice", b.clone()),
        Review::bare_job_create("u", "alice", b.clone())
            .ns_of_object()
            .obj()
    );
    assert_eq!(
        old_ledger_admit_review("x", "carol", &a),
        Review::create("x", a.clone())
            .of_job()
            .ns("ml")
            .user("carol")
            .obj()
    );
    // The three reviews written out inline (queue_hold, queueing, queue_marks).
    let ghost = job("ghost").cpu("2").obj();
    assert_eq!(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "uid-ghost",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": "ghost", "namespace": "ml", "operation": "CREATE",
            "userInfo": {"username": "mallory"}, "object": ghost.clone(), "dryRun": false}}),
        Review::bare_job_create("uid-ghost", "mallory", ghost).obj()
    );
}
