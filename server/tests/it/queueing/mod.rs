//! Queued admission in cluster mode (docs/queueing.md §4): Jobs created
//! through the emulated API server, which calls the shipped mutating
//! webhook before the validating one and applies its JSONPatch, as
//! kube-apiserver does; the controller admits from the queue when room
//! frees (charge first, then unsuspend).
//!
//! Its tests, by what they test: `admission` (order, rounds, repairs),
//! `priority` (PriorityClasses), `loans` (borrowing and giving back),
//! `waiting` (budgets, alerts, pruning, the page); the helpers they share
//! are here.

mod admission;
mod loans;
mod priority;
mod waiting;

use crate::cluster::{used, Cluster};
use crate::support::{job, queue_refs, until_event_where, Review};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn jobs(c: &Cluster) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::namespaced_with(c.kubectl("alice"), "ml", &ar)
}

async fn create(c: &Cluster, obj: &Value) -> Result<(), String> {
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    jobs(c)
        .create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn suspended(c: &Cluster, name: &str) -> bool {
    c.fake.get("batch", "jobs", "ml", name).unwrap()["spec"]["suspend"] == true
}

async fn queueing_cluster() -> Cluster {
    let c = Cluster::start().await;
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": "4"}, "queueing": "Queue"}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    c
}

fn priority_classes(c: &Cluster) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.k8s.io", "v1", "PriorityClass"),
        "priorityclasses",
    );
    Api::all_with(c.kubectl("admin"), &ar)
}

async fn create_class(c: &Cluster, name: &str, value: i64, global_default: bool) {
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": value, "globalDefault": global_default}))
    .unwrap();
    priority_classes(c)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

fn with_class(mut j: Value, class: &str) -> Value {
    j["spec"]["template"]["spec"]["priorityClassName"] = json!(class);
    j
}

fn entry<'a>(q: &'a Value, name: &str) -> &'a Value {
    q["status"]["queue"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|e| e["workloadRef"] == format!("batch/Job/ml/{name}"))
        })
        .unwrap_or(&Value::Null)
}
