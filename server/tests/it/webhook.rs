//! The webhook over HTTPS with AdmissionReviews shaped as kube-apiserver
//! sends them, on SQLite and on PostgreSQL.

use crate::common::*;
use serde_json::json;

async fn scenario(db: &str) {
    let s = Server::start(db).await;
    s.create_quota(
        "ai-platform",
        "",
        json!({"requests.nvidia.com/gpu": "64", "requests.nvidia.com/gpu.A100": "32", "limits.cpu": "512", "pods": "200", "cash/requests.nvidia.com/gpu": "10000"}),
    )
    .await;
    s.create_quota(
        "nlp-team",
        "ai-platform",
        json!({"requests.nvidia.com/gpu": "32", "requests.nvidia.com/gpu.A100": "16", "limits.cpu": "256", "limits.cpu.A4": "40", "pods": "100", "cash/requests.nvidia.com/gpu": "1000"}),
    )
    .await;

    // CREATE: 2 replicas × 4 A100 cards; 8 A4 cores each (the 2-core init
    // container is below the 8 of the main one, so it adds nothing).
    let d2 = deployment("train-a100", "nlp-team", 2, 4);
    let r = s
        .review(
            "/validate/workloads",
            &review(
                "deployment-create.json",
                "uid-create",
                Some(d2.clone()),
                None,
            ),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let q = s.quota("nlp-team").await;
    assert_eq!(q["status"]["used"]["requests.nvidia.com/gpu.A100"], "8");
    assert_eq!(q["status"]["used"]["requests.nvidia.com/gpu"], "8");
    assert_eq!(q["status"]["used"]["limits.cpu.A4"], "16");
    assert_eq!(q["status"]["used"]["pods"], "2");
    assert_eq!(q["status"]["selfUsed"]["limits.cpu"], "16");

    // A dry run that does not fit is denied with the numbers; one that fits
    // is allowed; neither charges.
    let big = deployment("big", "nlp-team", 3, 4);
    let mut rv = review("deployment-create.json", "uid-dry-big", Some(big), None);
    rv["request"]["dryRun"] = true.into();
    let r = s.review("/validate/workloads", &rv).await;
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 403);
    assert_eq!(
        r["status"]["message"],
        "bizrq nlp-team: requests.nvidia.com/gpu.A100 asks 12, 8 left of 16"
    );
    let mut rv = review(
        "deployment-create.json",
        "uid-dry-small",
        Some(deployment("small", "nlp-team", 1, 4)),
        None,
    );
    rv["request"]["dryRun"] = true.into();
    assert_eq!(s.review("/validate/workloads", &rv).await["allowed"], true);
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "8",
        "dry runs never charge"
    );

    // UPDATE 2 → 3 replicas charges the difference; the same review again
    // (an API-server retry) changes nothing.
    let d3 = deployment("train-a100", "nlp-team", 3, 4);
    let upd = review(
        "deployment-update.json",
        "uid-update",
        Some(d3.clone()),
        Some(d2.clone()),
    );
    assert_eq!(s.review("/validate/workloads", &upd).await["allowed"], true);
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "12"
    );
    assert_eq!(s.review("/validate/workloads", &upd).await["allowed"], true);
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "12",
        "a retried review is not charged twice"
    );

    // scale subresource: 3 → 5 does not fit; 3 → 1 does.
    let scale5 = fixture("scale-update.json");
    let r = s.review("/validate/scale", &scale5).await;
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "bizrq nlp-team: requests.nvidia.com/gpu.A100 asks 8, 4 left of 16"
    );
    let mut scale1 = fixture("scale-update.json");
    scale1["request"]["uid"] = "uid-scale-1".into();
    scale1["request"]["object"]["spec"]["replicas"] = 1.into();
    assert_eq!(s.review("/validate/scale", &scale1).await["allowed"], true);
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "4"
    );
    assert_eq!(s.used("nlp-team", "pods").await, "1");

    // An HPA whose maxReplicas could not fit is denied; one that fits
    // reserves maxReplicas, so the HPA's own scale-ups are already paid for.
    let hpa10 = fixture("hpa-create.json");
    let r = s.review("/validate/hpa", &hpa10).await;
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "bizrq nlp-team: limits.cpu.A4 asks 72, 32 left of 40; requests.nvidia.com/gpu asks 36, 28 left of 32; requests.nvidia.com/gpu.A100 asks 36, 12 left of 16"
    );
    let mut hpa4 = fixture("hpa-create.json");
    hpa4["request"]["uid"] = "uid-hpa-4".into();
    hpa4["request"]["object"]["spec"]["maxReplicas"] = 4.into();
    assert_eq!(s.review("/validate/hpa", &hpa4).await["allowed"], true);
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "16"
    );
    let mut scale4 = fixture("scale-update.json");
    scale4["request"]["uid"] = "uid-scale-4".into();
    scale4["request"]["object"]["spec"]["replicas"] = 4.into();
    assert_eq!(s.review("/validate/scale", &scale4).await["allowed"], true);
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "16"
    );

    // Deleting the HPA lifts the reservation back to the 4 running replicas.
    let mut hpa_del = fixture("hpa-create.json");
    hpa_del["request"]["uid"] = "uid-hpa-del".into();
    hpa_del["request"]["operation"] = "DELETE".into();
    hpa_del["request"]["oldObject"] = hpa4["request"]["object"].clone();
    hpa_del["request"]["object"] = serde_json::Value::Null;
    assert_eq!(s.review("/validate/hpa", &hpa_del).await["allowed"], true);
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "16"
    );

    // DELETE with oldObject releases at once.
    let del = review("deployment-delete.json", "uid-delete", None, Some(d3));
    assert_eq!(s.review("/validate/workloads", &del).await["allowed"], true);
    let q = s.quota("nlp-team").await;
    assert_eq!(q["status"]["used"]["requests.nvidia.com/gpu.A100"], "0");
    assert!(
        q["status"]["workloads"].is_null(),
        "ledger empty: {}",
        q["status"]
    );

    // A label naming a quota that does not exist is refused, not ignored.
    let r = s
        .review(
            "/validate/workloads",
            &review(
                "deployment-create.json",
                "uid-typo",
                Some(deployment("typo", "nlp-tema", 1, 1)),
                None,
            ),
        )
        .await;
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 404);
    assert!(r["status"]["message"]
        .as_str()
        .unwrap()
        .contains("nlp-tema does not exist"));

    // Moving a workload to another quota charges the new one and releases the old.
    s.create_quota(
        "cv-team",
        "ai-platform",
        json!({"requests.nvidia.com/gpu": "8", "requests.nvidia.com/gpu.A100": "8", "limits.cpu": "64", "pods": "10", "cash/requests.nvidia.com/gpu": "100"}),
    )
    .await;
    let d = deployment("mover", "nlp-team", 1, 2);
    assert_eq!(
        s.review(
            "/validate/workloads",
            &review("deployment-create.json", "uid-m1", Some(d.clone()), None)
        )
        .await["allowed"],
        true
    );
    let moved = deployment("mover", "cv-team", 1, 2);
    assert_eq!(
        s.review(
            "/validate/workloads",
            &review("deployment-update.json", "uid-m2", Some(moved), Some(d))
        )
        .await["allowed"],
        true
    );
    assert_eq!(s.used("nlp-team", "requests.nvidia.com/gpu").await, "0");
    assert_eq!(s.used("cv-team", "requests.nvidia.com/gpu").await, "2");
    // The workload's binding followed it: a scale review now charges cv-team.
    let mut scale_mover = fixture("scale-update.json");
    scale_mover["request"]["uid"] = "uid-m3".into();
    scale_mover["request"]["name"] = "mover".into();
    scale_mover["request"]["object"]["spec"]["replicas"] = 3.into();
    assert_eq!(
        s.review("/validate/scale", &scale_mover).await["allowed"],
        true
    );
    assert_eq!(s.used("cv-team", "requests.nvidia.com/gpu").await, "6");
    assert_eq!(s.used("nlp-team", "requests.nvidia.com/gpu").await, "0");

    // Quota objects: a child that does not fit its parent is refused with
    // the key and the numbers.
    let r = s
        .review("/validate/quotas", &fixture("quota-create.json"))
        .await;
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "bizrq speech-team does not fit in its parent: bizrq ai-platform: requests.nvidia.com/gpu.A100 asks 100, 8 left of 32"
    );

    // Reviews the webhook cannot read get a clear 400.
    let (code, text) = s
        .post_review_raw("/validate/workloads", b"{not json".to_vec())
        .await;
    assert_eq!(code, 400);
    assert!(text.contains("malformed AdmissionReview"), "{text}");
    let mut v1beta1 = fixture("deployment-create.json");
    v1beta1["apiVersion"] = "admission.k8s.io/v1beta1".into();
    let (code, text) = s
        .post_review_raw("/validate/workloads", serde_json::to_vec(&v1beta1).unwrap())
        .await;
    assert_eq!(code, 400);
    assert!(text.contains("use admission.k8s.io/v1"), "{text}");

    // Bodies over the webhook's limit are refused before they are read,
    // with a Status object the API server puts in its error, as are the
    // reviews it cannot read.
    let (code, text) = s
        .post_review_raw(
            "/validate/workloads",
            vec![b' '; bizrq::edge::WEBHOOK_BODY_LIMIT + 1024],
        )
        .await;
    assert_eq!(code, 413);
    let status: serde_json::Value = serde_json::from_str(&text).expect("413 in JSON");
    assert_eq!(
        (&status["kind"], &status["reason"], &status["code"]),
        (
            &"Status".into(),
            &"RequestEntityTooLarge".into(),
            &413.into()
        ),
        "{text}"
    );
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("larger than 4194304 bytes")),
        "{text}"
    );
    let (code, text) = s
        .post_review_raw("/validate/workloads", b"{not json".to_vec())
        .await;
    assert_eq!(code, 400);
    let status: serde_json::Value = serde_json::from_str(&text).expect("400 in JSON");
    assert_eq!(status["reason"], "BadRequest", "{text}");

    // Metrics saw the decisions.
    let (_, metrics) = s.get_text("/metrics").await;
    assert!(
        metrics.contains("bizrq_admission_duration_seconds_bucket"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "bizrq_admission_decisions_total{endpoint=\"workloads\",decision=\"denied\"}"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn fixtures_over_https_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    scenario(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn fixtures_over_https_on_postgres() {
    scenario(&fresh_postgres().await).await;
}

#[tokio::test]
async fn kinds_beyond_deployments() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota(
        "ml",
        "",
        json!({"requests.nvidia.com/gpu": "16", "pods": "50"}),
    )
    .await;
    let tpl = json!({"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}});
    let labels = json!({"biz.group.resource.quota": "ml"});
    let send = |group: &str,
                version: &str,
                kind: &str,
                resource: &str,
                obj: serde_json::Value,
                uid: &str| {
        let mut r = fixture("deployment-create.json");
        r["request"]["uid"] = uid.into();
        r["request"]["kind"] = json!({"group": group, "version": version, "kind": kind});
        r["request"]["resource"] =
            json!({"group": group, "version": version, "resource": resource});
        r["request"]["name"] = obj["metadata"]["name"].clone();
        r["request"]["object"] = obj;
        r
    };
    // PyTorchJob: master + 3 workers × 2 cards = 8.
    let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt", "namespace": "ml", "labels": labels},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": tpl}, "Worker": {"replicas": 3, "template": tpl}}}});
    assert_eq!(
        s.review(
            "/validate/workloads",
            &send("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", pt, "k1")
        )
        .await["allowed"],
        true
    );
    // A suspended Job counts zero; a Volcano job of 2 tasks × 2 pods × 2 = 8 fills the rest.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml", "labels": labels},
        "spec": {"parallelism": 8, "suspend": true, "template": tpl}});
    assert_eq!(
        s.review(
            "/validate/workloads",
            &send("batch", "v1", "Job", "jobs", job, "k2")
        )
        .await["allowed"],
        true
    );
    let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "vc", "namespace": "ml", "labels": labels},
        "spec": {"minAvailable": 4, "tasks": [{"name": "a", "replicas": 2, "template": tpl}, {"name": "b", "replicas": 2, "template": tpl}]}});
    assert_eq!(
        s.review(
            "/validate/workloads",
            &send("batch.volcano.sh", "v1alpha1", "Job", "jobs", vc, "k3")
        )
        .await["allowed"],
        true
    );
    assert_eq!(s.used("ml", "requests.nvidia.com/gpu").await, "16");
    // A CronJob whose one run could not fit is refused; its charge is its Jobs'.
    let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "ml", "labels": labels},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"parallelism": 1, "template": tpl}}}});
    let r = s
        .review(
            "/validate/workloads",
            &send("batch", "v1", "CronJob", "cronjobs", cj, "k4"),
        )
        .await;
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "bizrq ml: requests.nvidia.com/gpu asks 2, 0 left of 16"
    );
    // A ReplicaSet owned by a Deployment is the Deployment's business.
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": "ml", "labels": labels,
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "x", "controller": true}]},
        "spec": {"replicas": 5, "template": tpl}});
    assert_eq!(
        s.review(
            "/validate/workloads",
            &send("apps", "v1", "ReplicaSet", "replicasets", rs, "k5")
        )
        .await["allowed"],
        true
    );
    // Unlabelled and unknown kinds are not governed.
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}});
    let r = s
        .review(
            "/validate/workloads",
            &send("", "v1", "Pod", "pods", pod, "k6"),
        )
        .await;
    assert_eq!(r["allowed"], true);
    assert!(r["warnings"][0].as_str().unwrap().contains("not governed"));
    assert_eq!(s.used("ml", "requests.nvidia.com/gpu").await, "16");
}
