//! The opt-out label on a workload already queued (docs/queueing.md §4,
//! "Opting out while queued"): an update that adds
//! `bizrq.io/queueing: Refuse` is judged like a create of the new object.
//! Still suspended, it leaves the queue and waits for its owner, charged
//! nothing; unsuspended, it is charged if it fits or refused if not, and a
//! refused update leaves it queued as it was.

use crate::cluster::{used, Cluster};
use crate::queue_hold::{queue_len, queueing_cluster};
use crate::support::{job, jobs_of};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

async fn create(c: &Cluster, obj: Value) {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    jobs_of(c, "alice", "ml")
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

async fn patch(c: &Cluster, name: &str, p: Value) -> Result<(), String> {
    jobs_of(c, "alice", "ml")
        .patch(name, &PatchParams::default(), &Patch::Merge(p))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn suspended(c: &Cluster, name: &str) -> bool {
    c.fake.get("batch", "jobs", "ml", name).unwrap()["spec"]["suspend"] == true
}

fn queued(q: &Value, name: &str) -> bool {
    let wref = format!("batch/Job/ml/{name}");
    q["status"]["queue"]
        .as_array()
        .is_some_and(|a| a.iter().any(|e| e["workloadRef"] == wref.as_str()))
}

const OPT_OUT: &str = "bizrq.io/queueing";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opting_out_while_queued_is_judged_like_a_create() {
    let c = queueing_cluster("4").await;
    create(&c, job("a").cpu("3").obj()).await;
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;
    create(&c, job("b").cpu("2").obj()).await;
    create(&c, job("c").cpu("2").obj()).await;
    assert!(suspended(&c, "b") && suspended(&c, "c"));
    c.until("ml", "b and c queued", |q| queue_len(q) == 2).await;

    // A wrong value is refused, naming the label; nothing changes.
    let err = patch(&c, "b", json!({"metadata": {"labels": {OPT_OUT: "Never"}}}))
        .await
        .unwrap_err();
    assert!(err.contains("the only value is Refuse"), "{err}");
    assert!(queued(&c.fake.quota("ml"), "b"));

    // Opted out and released at once, with 1 cpu left: refused as a
    // create of it would be, and still queued, still suspended.
    let err = patch(
        &c,
        "c",
        json!({"metadata": {"labels": {OPT_OUT: "Refuse"}}, "spec": {"suspend": false}}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("requests.cpu"), "{err}");
    assert!(suspended(&c, "c"));
    let q = c.fake.quota("ml");
    assert!(queued(&q, "c"), "{q}");
    assert_eq!(used(&q, "requests.cpu"), "3");

    // Opted out, still suspended: out of the queue, charged nothing.
    patch(
        &c,
        "b",
        json!({"metadata": {"labels": {OPT_OUT: "Refuse"}}}),
    )
    .await
    .unwrap();
    assert!(suspended(&c, "b"));
    let q = c.fake.quota("ml");
    assert!(!queued(&q, "b"), "{q}");
    assert!(queued(&q, "c"), "{q}");
    assert_eq!(used(&q, "requests.cpu"), "3");
    // Its owner's to release now: refused while it does not fit, never
    // queued again.
    let err = patch(&c, "b", json!({"spec": {"suspend": false}}))
        .await
        .unwrap_err();
    assert!(err.contains("requests.cpu"), "{err}");
    assert!(suspended(&c, "b"));
    assert!(!queued(&c.fake.quota("ml"), "b"));

    // Room frees: the queue admits c, never b.
    jobs_of(&c, "alice", "ml")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "c admitted", |q| {
        used(q, "requests.cpu") == "2" && queue_len(q) == 0
    })
    .await;
    // Released right after the write that charged it.
    for _ in 0..100 {
        if !suspended(&c, "c") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!suspended(&c, "c"));
    assert!(suspended(&c, "b"), "b opted out: the queue never admits it");
    // Released by its owner where it fits: charged like a create.
    patch(&c, "b", json!({"spec": {"suspend": false}}))
        .await
        .unwrap();
    let q = c.fake.quota("ml");
    assert_eq!(used(&q, "requests.cpu"), "4", "{q}");
    assert!(q["status"]["workloads"].get("batch/Job/ml/b").is_some());
}
