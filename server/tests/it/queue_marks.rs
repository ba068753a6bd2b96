//! Queued on the object (docs/queueing.md §12, "The entry on the
//! object"): the mutating webhook queues a create that does not fit by
//! holding it and writing its entry in the annotation `bizrq.io/queued`,
//! without a write of the quota; the controller's round folds it into
//! `status.queue`. The annotation is bizrq's alone: a forged one never
//! jumps the queue, one stripped or changed by an update comes back, and
//! one the status never got (the controller down, a crash) is folded and
//! admitted later.

use crate::cluster::{used, Cluster, T0};
use crate::queue_hold::{job, jobs, queueing_cluster};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{json, Value};

const MARK: &str = "bizrq.io/queued";

fn stored(c: &Cluster, name: &str) -> Value {
    c.fake.get("batch", "jobs", "ml", name).unwrap()
}

fn mark(c: &Cluster, name: &str) -> Option<Value> {
    stored(c, name)["metadata"]["annotations"][MARK]
        .as_str()
        .map(|v| serde_json::from_str(v).unwrap())
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

fn since_of(q: &Value, wref: &str) -> Option<i64> {
    q["status"]["queue"]
        .as_array()?
        .iter()
        .find(|e| e["workloadRef"] == wref)
        .and_then(|e| quota::time::parse_rfc3339(e["since"].as_str()?))
}

fn jobs_as(c: &Cluster, user: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::namespaced_with(c.kubectl(user), "ml", &ar)
}

async fn create_as(c: &Cluster, user: &str, obj: Value) {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    jobs_as(c, user)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

/// A held Job carrying its entry whose quota status never got it (the
/// webhook answered, then the controller was down): the watch shows it,
/// the round folds it with the mark's since, and it is admitted once
/// room frees, its mark removed with its hold. One stored with a mark
/// that claims a place before its own creation (written past the
/// webhook) is folded at its creation time instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_the_status_never_got_is_folded_and_admitted_later() {
    let c = queueing_cluster("4").await;
    c.set_clock(T0 + 60_000);
    create_as(&c, "alice", job("a", "4")).await;
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    assert!(queue_refs(&c.fake.quota("ml")).is_empty());

    // As the webhook's patch left them; the quota was never written.
    let held = |name: &str, since: i64| {
        let mut j = job(name, "2");
        j["spec"]["suspend"] = json!(true);
        j["metadata"]["annotations"] = json!({
            MARK: json!({"since": since, "submittedBy": "alice"}).to_string()
        });
        j
    };
    c.fake.put(held("w", T0 + 30_000));
    c.fake.put(held("forged", 1_000));
    let q = c
        .until("ml", "both folded", |q| queue_refs(q).len() == 2)
        .await;
    assert_eq!(since_of(&q, "batch/Job/ml/w"), Some(T0 + 30_000), "{q}");
    assert_eq!(
        since_of(&q, "batch/Job/ml/forged"),
        Some(T0),
        "a mark before its creation counts from its creation: {q}"
    );
    assert_eq!(queue_refs(&q)[0], "batch/Job/ml/forged");
    assert_eq!(used(&q, "requests.cpu"), "4", "nothing charged");

    // Room frees: both admitted by the round, charged once each.
    jobs(&c)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "both admitted", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "4"
        })
        .await;
    assert!(
        q["status"]["workloads"]["batch/Job/ml/w"]["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("queue:")),
        "{q}"
    );
    for n in ["w", "forged"] {
        for _ in 0..100 {
            if stored(&c, n)["spec"]["suspend"] != true {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let s = stored(&c, n);
        assert_ne!(s["spec"]["suspend"], true, "{n} released: {s}");
        assert!(mark(&c, n).is_none(), "{n}'s mark goes with its hold: {s}");
    }
}

/// The mark is bizrq's: a create's own value is replaced by the
/// webhook's (so a forged `since` takes no place ahead of earlier work),
/// and an update by anyone but bizrq that strips or changes it gets the
/// old value back. The queue admits in the order the webhook gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_stripped_mark_changes_no_place() {
    let c = queueing_cluster("4").await;
    create_as(&c, "alice", job("a", "4")).await;
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;

    c.set_clock(T0 + 1_000);
    create_as(&c, "bob", job("b", "3")).await;
    let b_mark = mark(&c, "b").expect("queued on itself");
    assert_eq!(b_mark["since"], T0 + 1_000);
    assert_eq!(b_mark["submittedBy"], "bob");

    // Mallory claims the first place and a high priority on her create.
    c.set_clock(T0 + 2_000);
    let mut m = job("m", "3");
    m["metadata"]["annotations"] = json!({
        MARK: json!({"since": 1, "priority": 1_000_000, "submittedBy": "bob"}).to_string()
    });
    create_as(&c, "mallory", m).await;
    let m_mark = mark(&c, "m").unwrap();
    assert_eq!(m_mark["since"], T0 + 2_000, "replaced by the webhook's");
    assert_eq!(m_mark["submittedBy"], "mallory");
    assert_eq!(m_mark["priority"], 0);

    // Updates by people: a changed mark comes back, a stripped one too.
    let forged = json!({"since": 1}).to_string();
    jobs_as(&c, "mallory")
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MARK: forged}}})),
        )
        .await
        .unwrap();
    assert_eq!(mark(&c, "m"), Some(m_mark.clone()), "changed: put back");
    jobs_as(&c, "bob")
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MARK: null}}})),
        )
        .await
        .unwrap();
    assert_eq!(mark(&c, "b"), Some(b_mark.clone()), "stripped: put back");
    // Added to a Job suspended by hand, outside the queue: removed.
    c.fake.put({
        let mut j = job("idle", "1");
        j["spec"]["suspend"] = json!(true);
        j
    });
    jobs_as(&c, "mallory")
        .patch(
            "idle",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MARK: forged}}})),
        )
        .await
        .unwrap();
    assert!(mark(&c, "idle").is_none(), "{}", stored(&c, "idle"));

    let q = c
        .until("ml", "both folded", |q| queue_refs(q).len() == 2)
        .await;
    assert_eq!(queue_refs(&q), ["batch/Job/ml/b", "batch/Job/ml/m"]);
    assert_eq!(since_of(&q, "batch/Job/ml/m"), Some(T0 + 2_000));

    // Room for one: bob's, queued first, is admitted; mallory's waits.
    jobs(&c)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "b admitted", |q| {
            queue_refs(q) == ["batch/Job/ml/m"] && used(q, "requests.cpu") == "3"
        })
        .await;
    assert!(q["status"]["workloads"]["batch/Job/ml/b"].is_object());
}
