//! Preemption from a quota's queue (docs/queueing.md §6) in cluster mode:
//! Jobs created through the emulated API server, which calls the shipped
//! mutating and validating webhooks for every matching write (bizrq's own
//! suspend and unsuspend included). A queued job of higher priority marks
//! lower-priority running batch work of its quota (`status.reclaim`,
//! origin `preempt`), which is suspended after the grace period and queued
//! again, unless room comes otherwise first; Deployments and online
//! services are never taken.
//!
//! Its tests: `marks` (when preemption marks and suspends), `suspends`
//! (what is suspended, and repairs); the helpers here are shared with
//! other modules (seed004, shares).

mod marks;
mod suspends;

use crate::cluster::{used, Cluster, T0};
use crate::support::{events, job, queue_refs, until_event};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

pub const GRACE_MS: i64 = 300_000;

fn api(
    c: &Cluster,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(c.kubectl("alice"), ns, &ar)
}

pub fn jobs(c: &Cluster, ns: &str) -> Api<DynamicObject> {
    api(c, ns, "batch", "v1", "Job", "jobs")
}

pub async fn create(c: &Cluster, obj: &Value) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let a = match kind {
        "Job" => jobs(c, ns),
        "Deployment" => api(c, ns, "apps", "v1", "Deployment", "deployments"),
        "JobSet" => api(c, ns, "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
        k => panic!("{k}"),
    };
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    a.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", obj["metadata"]["name"]));
}

pub async fn delete(c: &Cluster, ns: &str, name: &str) {
    jobs(c, ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

pub async fn create_class(c: &Cluster, name: &str, value: i64) {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.k8s.io", "v1", "PriorityClass"),
        "priorityclasses",
    );
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": value}))
    .unwrap();
    Api::<DynamicObject>::all_with(c.kubectl("alice"), &ar)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

pub async fn create_quota(c: &Cluster, name: &str, parent: &str, spec: Value) {
    let mut spec = spec;
    spec["parent"] = json!(parent);
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

pub fn suspended(c: &Cluster, ns: &str, name: &str) -> bool {
    c.fake.get("batch", "jobs", ns, name).unwrap()["spec"]["suspend"] == true
}

pub async fn until_suspended(c: &Cluster, ns: &str, name: &str, want: bool) {
    for _ in 0..400 {
        if suspended(c, ns, name) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{ns}/{name} suspended should be {want}: {}",
        c.fake.get("batch", "jobs", ns, name).unwrap()
    );
}

pub fn marks(q: &Value) -> Vec<String> {
    q["status"]["reclaim"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The suspend PATCHes sent for `ns/name` so far.
pub fn patches(c: &Cluster, ns: &str, name: &str) -> usize {
    let path = format!("PATCH /apis/batch/v1/namespaces/{ns}/jobs/{name}");
    c.fake
        .requests()
        .iter()
        .filter(|r| r.starts_with(&path) && !r[path.len()..].starts_with('/'))
        .count()
}

/// The validating reviews of UPDATEs of `name` whose object is suspended:
/// what the API server was asked to store when it was suspended.
pub fn suspend_reviews(c: &Cluster, name: &str) -> Vec<Value> {
    c.fake
        .reviews()
        .into_iter()
        .filter(|r| r["webhook"] == "workloads.bizrq.io")
        .filter(|r| r["request"]["operation"] == "UPDATE" && r["request"]["name"] == name)
        .filter(|r| r["request"]["object"]["spec"]["suspend"] == true)
        .collect()
}

async fn preempting_cluster() -> Cluster {
    preempting_cluster_of(json!({"hard": {"requests.cpu": "5"},
        "queueing": {"mode": "Queue", "preemption": "LowerPriority"}}))
    .await
}

/// The quota `ml` of `spec`, the Job watch running, the classes
/// `batch-low` (1) and `urgent` (100) made.
async fn preempting_cluster_of(spec: Value) -> Cluster {
    let c = Cluster::start().await;
    create_quota(&c, "ml", "", spec).await;
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_class(&c, "batch-low", 1).await;
    create_class(&c, "urgent", 100).await;
    c
}

fn jobset(name: &str, class: &str) -> Value {
    let tpl = |pods: i64| {
        json!({"spec": {"parallelism": pods, "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "priorityClassName": class,
                "containers": [{"name": "c", "image": "trainer",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}})
    };
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": tpl(1)},
            {"name": "workers", "replicas": 2, "template": tpl(1)}]}})
}
