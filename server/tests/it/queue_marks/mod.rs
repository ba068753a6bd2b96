//! Queue marks on (`--queue-mark-key-file`, docs/queueing.md §12): the
//! mutating webhook queues a create by a signed mark on the object, with
//! no write of the quota, counting what it marked against the caps until
//! a status shows it; the controller's round folds the marked, held
//! objects into the queue in its one write. Through the fake API server
//! and both webhooks. (Every other queue test runs with marks on too
//! under `BIZRQ_TEST_QUEUE_MARKS=1`.)
//!
//! Its tests, by what they test: `folding` (one marked create's path),
//! `replicas` (shares, two replicas, the key Secret), `long_queues`
//! (beyond the listed top, draining, turning marks off); the helpers they
//! share are here.

mod folding;
mod long_queues;
mod replicas;

use crate::cluster::{mark_key_file, used, Cluster, MARK_KEY, T0};
use crate::support::{events, job, metric, queue_refs, until_event, Review};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn jobs(c: &Cluster, user: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::namespaced_with(c.kubectl(user), "ml", &ar)
}

async fn create(c: &Cluster, user: &str, obj: Value) -> Result<(), String> {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    jobs(c, user)
        .create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn stored(c: &Cluster, name: &str) -> Value {
    c.fake.get("batch", "jobs", "ml", name).unwrap()
}

fn suspended(c: &Cluster, name: &str) -> bool {
    stored(c, name)["spec"]["suspend"] == true
}

/// Waits (5 s at most) for the round's release of `name` to show on the
/// stored object; the caller asserts it.
async fn until_released(c: &Cluster, name: &str) {
    c.until_job_released(name).await;
}

fn mark_of(c: &Cluster, name: &str) -> Option<Value> {
    stored(c, name)["metadata"]["annotations"]["queue.bizrq.io/entry"]
        .as_str()
        .map(|s| serde_json::from_str(s).unwrap())
}

/// A replica with marks on, its quota `ml` of 4 cpu queueing, with
/// `share` as its `maxPerSubmitter`.
async fn marked_cluster(share: Option<u32>) -> Cluster {
    marked_cluster_of(share, "4").await
}

/// `marked_cluster`, its quota `ml` of `cpu`.
async fn marked_cluster_of(share: Option<u32>, cpu: &str) -> Cluster {
    marked_cluster_with(share, cpu, false).await
}

/// `marked_cluster_of`, with `--queue-fitting-creates` as `hold_fitting`.
async fn marked_cluster_with(share: Option<u32>, cpu: &str, hold_fitting: bool) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let keys = mark_key_file(dir.path());
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::replica_configured(
        crate::fakeapi::FakeApi::new(),
        dir,
        T0,
        "bizrq-0",
        true,
        &db,
        |a| {
            a.queue_mark_key_file = Some(keys);
            a.queue_fitting_creates = hold_fitting;
        },
    )
    .await;
    let queueing = match share {
        Some(n) => json!({"mode": "Queue", "maxPerSubmitter": n}),
        None => json!("Queue"),
    };
    with_quota_ml(&c, queueing, cpu).await;
    c
}

/// The quota `ml` of `cpu` with `queueing`, made through the API on `c`,
/// once the controller watches Jobs.
async fn with_quota_ml(c: &Cluster, queueing: Value, cpu: &str) {
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": cpu}, "queueing": queueing}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
}

/// A mark as the webhook would write it, signed with `key` (hex).
fn mark(quota: &str, name: &str, since: i64, by: &str, key: &str) -> String {
    let keys = bizrq::service::queue_mark::MarkKeys::parse(key).unwrap();
    let m = quota::queue::mark::sign(quota, &format!("batch/Job/ml/{name}"), since, 0, by, |b| {
        keys.sign(b)
    });
    serde_json::to_string(&m).unwrap()
}

pub(crate) fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("the patch is base64")
}
