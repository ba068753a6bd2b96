//! Queued admission in cluster mode (docs/queueing.md §4): Jobs created
//! through the emulated API server, which calls the shipped mutating
//! webhook before the validating one and applies its JSONPatch, as
//! kube-apiserver does; the controller admits from the queue when room
//! frees (charge first, then unsuspend).

use crate::cluster::{used, Cluster};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn job(name: &str, cpu: &str, priority: Option<i64>) -> Value {
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

fn queue_refs(q: &Value) -> Vec<String> {
    q["status"]["queue"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["workloadRef"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_does_not_fit_waits_suspended_and_is_admitted_when_room_frees() {
    let c = queueing_cluster().await;
    create(&c, &job("a", "3", None)).await.unwrap();
    assert!(!suspended(&c, "a"));
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;

    // Does not fit: created suspended, queued at position 1, not charged.
    create(&c, &job("b", "2", None)).await.unwrap();
    assert!(suspended(&c, "b"), "the mutating webhook suspends it");
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q), ["batch/Job/ml/b"]);
    let e = &q["status"]["queue"][0];
    assert_eq!(e["position"], 1);
    assert_eq!(e["waiting"], "Quota");
    assert_eq!(
        e["reason"], "waits for 1 × requests.cpu: 1 free, 2 needed",
        "{e}"
    );
    assert_eq!(used(&q, "requests.cpu"), "3", "a queued job is not charged");
    assert!(
        q["status"]["workloads"].get("batch/Job/ml/b").is_none(),
        "{q}"
    );
    // The review the mutating webhook answered, before the validating one.
    let reviews = c.fake.reviews();
    let order: Vec<&str> = reviews
        .iter()
        .filter(|r| r["request"]["name"] == "b")
        .map(|r| r["webhook"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["queue.bizrq.io", "workloads.bizrq.io"]);

    // More than the quota could ever give: refused at once, as today.
    let err = create(&c, &job("huge", "9", None)).await.unwrap_err();
    assert!(err.contains("requests.cpu"), "{err}");

    // The controller learns b's uid from its watch.
    c.until("ml", "entry named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;

    // a ends: its release frees room, the controller charges b (removing
    // its entry in the same write) and then unsuspends it.
    jobs(&c)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "b admitted", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
        })
        .await;
    assert!(q["status"]["workloads"]["batch/Job/ml/b"]["uid"]
        .as_str()
        .unwrap()
        .starts_with("queue:"));
    c.until_requested("unsuspend b", |r| {
        r.starts_with("PATCH /apis/batch/v1/namespaces/ml/jobs/b")
    })
    .await;
    for _ in 0..100 {
        if !suspended(&c, "b") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!suspended(&c, "b"), "admitted: unsuspended");
    assert_eq!(
        used(&c.fake.quota("ml"), "requests.cpu"),
        "2",
        "charged once"
    );

    // c does not fit beside b (2 + 3 > 4): queued. Unsuspended by hand it
    // is judged like a new admission: still no room, so it is suspended
    // again and keeps its place and its since.
    create(&c, &job("c", "3", None)).await.unwrap();
    let since = c.fake.quota("ml")["status"]["queue"][0]["since"].clone();
    jobs(&c)
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    assert!(
        suspended(&c, "c"),
        "suspended again by the mutating webhook"
    );
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q), ["batch/Job/ml/c"]);
    assert_eq!(q["status"]["queue"][0]["since"], since);
    assert_eq!(used(&q, "requests.cpu"), "2");

    // Deleted while queued: its entry leaves with it.
    jobs(&c)
        .delete("c", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "c dequeued", |q| queue_refs(q).is_empty())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_jobs_are_admitted_by_priority_then_first_come_never_over() {
    let c = queueing_cluster().await;
    create(&c, &job("run", "4", None)).await.unwrap();
    c.until("ml", "run charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create(&c, &job("low-1", "2", Some(1))).await.unwrap();
    create(&c, &job("low-2", "2", Some(1))).await.unwrap();
    create(&c, &job("high", "3", Some(100))).await.unwrap();
    for n in ["low-1", "low-2", "high"] {
        assert!(suspended(&c, n), "{n}");
    }
    c.until("ml", "all named, in order", |q| {
        queue_refs(q)
            == [
                "batch/Job/ml/high",
                "batch/Job/ml/low-1",
                "batch/Job/ml/low-2",
            ]
            && q["status"]["queue"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["uid"].as_str().is_some_and(|u| !u.is_empty()))
    })
    .await;
    // 4 free: high (3) first; low-1 (2) does not fit beside it and, under
    // strict FIFO, blocks low-2.
    jobs(&c)
        .delete("run", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "high admitted", |q| {
            queue_refs(q) == ["batch/Job/ml/low-1", "batch/Job/ml/low-2"]
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "3", "never over 4");
    assert_eq!(q["status"]["queue"][0]["position"], 1);
    // high ends: both lows fit (2 + 2), admitted in one round, in order.
    jobs(&c)
        .delete("high", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "lows admitted", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "4"
        })
        .await;
    assert!(q["status"]["workloads"]["batch/Job/ml/low-1"].is_object());
    assert!(q["status"]["workloads"]["batch/Job/ml/low-2"].is_object());
}

/// A crash between the admission's charge and its unsuspend leaves a
/// charged, suspended Job whose charge uid is `queue:<object uid>`: the
/// next reconcile unsuspends it, and charges nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charged_suspended_job_left_by_a_crash_is_unsuspended() {
    let c = queueing_cluster().await;
    let mut j = job("r", "2", None);
    j["metadata"]["uid"] = json!("uid-r");
    j["spec"]["suspend"] = json!(true);
    c.fake.put(j);
    // The quota as the crashed admission left it: charged, entry gone.
    let mut q = c.fake.quota("ml");
    q["status"]["workloads"] = json!({"batch/Job/ml/r": {
        "podSets": [{"name": "main", "count": 1,
            "perPod": {"requests.cpu": "2", "limits.cpu": "2", "cpu": "2", "pods": "1"}}],
        "since": "2026-11-21T10:00:00.000Z", "uid": "queue:uid-r",
        "admitted": "2026-11-21T10:00:00.000Z"}});
    q["status"]["used"] = json!({"requests.cpu": "2"});
    c.fake.put(q);
    c.until_requested("unsuspend r", |r| {
        r.starts_with("PATCH /apis/batch/v1/namespaces/ml/jobs/r")
    })
    .await;
    for _ in 0..100 {
        if !suspended(&c, "r") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!suspended(&c, "r"), "repaired: unsuspended");
    let q = c.fake.quota("ml");
    assert_eq!(used(&q, "requests.cpu"), "2", "charged once: {q}");
    assert!(queue_refs(&q).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_where_a_job_would_queue() {
    let c = queueing_cluster().await;
    create(&c, &job("a", "3", None)).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;
    let (s, v) = c
        .server
        .api(Method::POST, "/api/v1/check", Some(job("b", "2", None)))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["allowed"], false);
    assert_eq!(
        v["message"],
        "would queue at position 1: waits for 1 × requests.cpu: 1 free, 2 needed"
    );
    assert_eq!(v["queued"]["position"], 1);
    // A check writes nothing.
    assert!(queue_refs(&c.fake.quota("ml")).is_empty());
    let (_, v) = c
        .server
        .api(Method::POST, "/api/v1/check", Some(job("small", "1", None)))
        .await;
    assert_eq!(v["allowed"], true, "{v}");
}
