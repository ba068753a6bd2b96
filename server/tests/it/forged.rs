//! Forged reviews in cluster mode: whoever reaches the webhook can send a
//! DELETE or a scale-down of a workload that still runs. The release is
//! written (a DELETE is never refused), and the controller confirms it
//! against the cluster within seconds: what still runs is charged again.

use crate::cluster::{used, Cluster, T0};
use crate::common::{deployment, review, Server};
use crate::fakeapi::FakeApi;
use serde_json::json;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GPU: &str = "requests.nvidia.com/gpu";

/// A quota of 24 cards, all held by the Deployment `train` (3 × 8), which
/// the API server stores and the controller has seen.
async fn running_train(c: &Cluster) -> serde_json::Value {
    c.server
        .create_quota("team", "", json!({ GPU: "24" }))
        .await;
    let d = deployment("train", "team", 3, 8);
    let r = c
        .server
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-create", Some(d.clone()), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    c.fake.put(d.clone());
    c.until_metric("bizrq_controller_tracked{kind=\"workloads\"} 1")
        .await;
    // Let the reconcile that the Deployment's arrival queued finish, so
    // that only a re-check can undo what follows.
    tokio::time::sleep(Duration::from_secs(1)).await;
    d
}

fn forged_delete(d: &serde_json::Value, uid: &str) -> serde_json::Value {
    review("deployment-delete.json", uid, None, Some(d.clone()))
}

/// `team` as `undone` says, within 10 s of `since` (a forged review's
/// answer).
async fn undone_within_10_s(
    c: &Cluster,
    what: &str,
    since: Instant,
    undone: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let q = c.until("team", what, undone).await;
    assert!(
        since.elapsed() < Duration::from_secs(10),
        "{what}: undone after {:?}",
        since.elapsed()
    );
    q
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_delete_of_a_running_deployment_is_undone_within_10_s() {
    let c = Cluster::start().await;
    let d = running_train(&c).await;
    assert_eq!(used(&c.fake.quota("team"), GPU), "24");

    let r = c
        .server
        .review("/validate/workloads", &forged_delete(&d, "forged-1"))
        .await;
    assert_eq!(r["allowed"], true, "a DELETE is never refused: {r}");
    let forged_at = Instant::now();
    // The release is written before the answer. (The controller's quota
    // watch may see it before this replica has noted the version as its
    // own, and reconcile at once; the re-check undoes it in any case.)
    let q = undone_within_10_s(&c, "train charged again", forged_at, |q| {
        used(q, GPU) == "24"
    })
    .await;
    assert!(
        q["status"]["workloads"]["apps/Deployment/nlp/train"].is_object(),
        "{q}"
    );
    c.until_metric("bizrq_rechecks_total 1").await;
    // The DELETE's memory went with the GET that found it running.
    let q = c
        .until("team", "the forged DELETE forgotten", |q| {
            q["status"]["deleted"].is_null()
        })
        .await;
    assert_eq!(used(&q, GPU), "24", "{q}");

    // The same forged review sent again: undone again (asked at once,
    // the object having been found running once).
    let r = c
        .server
        .review("/validate/workloads", &forged_delete(&d, "forged-again"))
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let again_at = Instant::now();
    undone_within_10_s(&c, "train charged again, twice", again_at, |q| {
        used(q, GPU) == "24" && q["status"]["deleted"].is_null()
    })
    .await;
    c.until_metric("bizrq_rechecks_total 2").await;

    // A genuine DELETE (the API server removes the object after our
    // answer) stays released: the re-check finds nothing to restore.
    let r = c
        .server
        .review("/validate/workloads", &forged_delete(&d, "genuine-1"))
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    c.fake.remove("apps", "deployments", "nlp", "train");
    c.until_metric("bizrq_rechecks_total 3").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(used(&c.fake.quota("team"), GPU), "0");
    c.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_scale_down_of_a_running_deployment_is_undone_within_10_s() {
    let c = Cluster::start().await;
    let _d = running_train(&c).await;
    let mut scale = review("scale-update.json", "forged-scale", None, None);
    scale["request"]["name"] = "train".into();
    scale["request"]["object"]["metadata"]["name"] = "train".into();
    scale["request"]["object"]["spec"]["replicas"] = 0.into();
    let r = c.server.review("/validate/workloads", &scale).await;
    assert_eq!(r["allowed"], true, "{r}");
    let forged_at = Instant::now();
    // A reservation never frees what runs: the lowered charge, though
    // admitted a moment ago, yields to the 3 replicas the cluster shows.
    undone_within_10_s(&c, "train charged again", forged_at, |q| {
        used(q, GPU) == "24"
    })
    .await;
    c.until_metric("bizrq_rechecks_total 1").await;
    c.running.shutdown().await;
}

/// A second replica over the same API server: not the Lease holder, so its
/// own re-check marks reach no controller. The leader's quota watch sees
/// the release as a version it did not write and reconciles at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_delete_sent_to_a_replica_that_does_not_lead_is_undone() {
    let fake = FakeApi::new();
    let leader = Cluster::start_on(fake.clone(), tempfile::tempdir().unwrap(), T0).await;
    leader
        .until_requested("lease create", |r| {
            r.starts_with("POST /apis/coordination.k8s.io/v1/namespaces/bizrq-system/leases")
        })
        .await;
    let d = running_train(&leader).await;

    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&crate::common::fresh_sqlite(&dir));
    args.pod_name = Some("bizrq-1".into());
    args.resync_seconds = 3600;
    let clock = Arc::new(AtomicI64::new(T0));
    let c = clock.clone();
    let other = bizrq::start_with(
        &args,
        Some(fake.client()),
        Some(Arc::new(move || c.load(Ordering::SeqCst))),
    )
    .await
    .expect("second replica starts");
    let other_server = Server::in_process(&other);

    let r = other_server
        .review("/validate/workloads", &forged_delete(&d, "forged-2"))
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let forged_at = Instant::now();
    undone_within_10_s(&leader, "train charged again", forged_at, |q| {
        used(q, GPU) == "24"
    })
    .await;
    let lease = fake
        .get(
            "coordination.k8s.io",
            "leases",
            "bizrq-system",
            "bizrq-controller",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "bizrq-0", "{lease}");
    other.shutdown().await;
    leader.running.shutdown().await;
}

/// A forged DELETE review of a child quota that still exists returns its
/// carve-out to the parent; the parent's reconcile, due a moment later,
/// carves it again from the children the cluster shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_delete_of_a_child_quota_that_still_exists_is_undone_within_10_s() {
    let c = Cluster::start().await;
    c.server.create_quota("org", "", json!({ GPU: "24" })).await;
    c.server
        .create_quota("team", "org", json!({ GPU: "8" }))
        .await;
    c.until("org", "team carved", |q| {
        q["status"]["children"]["team"].is_object()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let team = c.fake.quota("team");
    let mut forged = crate::common::fixture("quota-create.json");
    forged["request"]["uid"] = "forged-quota-delete".into();
    forged["request"]["operation"] = "DELETE".into();
    forged["request"]["name"] = "team".into();
    forged["request"]["object"] = serde_json::Value::Null;
    forged["request"]["oldObject"] = team;
    forged["request"]["options"] = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    let r = c.server.review("/validate/quotas", &forged).await;
    assert_eq!(r["allowed"], true, "{r}");
    let forged_at = Instant::now();
    let org = c
        .until("org", "team carved again", |q| {
            q["status"]["children"]["team"].is_object()
        })
        .await;
    // The parent was marked for a re-check (nothing else here lowers).
    c.until_metric("bizrq_rechecks_total 1").await;
    assert!(
        forged_at.elapsed() < Duration::from_secs(10),
        "undone after {:?}: {org}",
        forged_at.elapsed()
    );
    c.running.shutdown().await;
}
