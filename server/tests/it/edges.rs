//! Hostile input at the admission edges: a negative amount and a name
//! longer than Kubernetes allows are refused with a message naming them,
//! and nothing is charged or stored.

use crate::common::*;
use crate::support::Review;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn pytorch_job(gpus: &str) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "worker", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}}}}}
    })
}

#[tokio::test]
async fn a_negative_gpu_request_is_refused_by_the_webhook_and_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota(
        "ml",
        "",
        json!({"requests.nvidia.com/gpu": "40", "pods": "200"}),
    )
    .await;
    let said = "bizrq: container \"worker\" of PyTorchJob ml/bert: requests nvidia.com/gpu is negative (-100)";

    let r = s
        .review(
            "/validate/workloads",
            &Review::create("neg", pytorch_job("-100"))
                .kind("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
                .name("bert")
                .ns("ml")
                .obj(),
        )
        .await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 400);
    assert_eq!(r["status"]["message"], said);
    assert_eq!(s.used("ml", "requests.nvidia.com/gpu").await, "0");
    assert_eq!(s.used("ml", "pods").await, "0");

    let (st, v) = s
        .api(Method::POST, "/api/v1/check", Some(pytorch_job("-100")))
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["message"], said, "{v}");

    // The same job asking 2 cards is charged as ever.
    let r = s
        .review(
            "/validate/workloads",
            &Review::create("pos", pytorch_job("2"))
                .kind("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
                .name("bert")
                .ns("ml")
                .obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(s.used("ml", "requests.nvidia.com/gpu").await, "2");
}

/// An 8 KB name once failed on the database's index; now it never gets
/// that far.
#[tokio::test]
async fn a_name_longer_than_kubernetes_allows_is_refused_before_any_write() {
    let s = Server::start(&fresh_postgres().await).await;
    s.create_quota("nlp-team", "", json!({"requests.nvidia.com/gpu": "64"}))
        .await;
    let long = "n".repeat(8 * 1024);
    let mut d = deployment("d", "nlp-team", 1, 4);
    d["metadata"]["name"] = long.clone().into();
    let mut rv = review("deployment-create.json", "long", Some(d), None);
    rv["request"]["name"] = long.into();
    let r = s.review("/validate/workloads", &rv).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 400);
    assert_eq!(
        r["status"]["message"],
        "bizrq: Deployment: name is 8192 characters long; Kubernetes allows at most 253"
    );
    assert_eq!(s.used("nlp-team", "requests.nvidia.com/gpu").await, "0");
}
