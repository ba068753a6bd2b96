//! Which quota holds a workload (what a `/scale` or a DELETE is judged
//! against), in cluster mode through the fake API server: answered by the
//! quota watch's copy, after waiting for it to hold this replica's latest
//! quota write when it does not yet; a workload the copy does not hold is
//! read again in one LIST of every quota, since another replica may have
//! charged it after this one's latest write (docs/cluster-mode.md).

use crate::cluster::{used, Cluster};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{json, Value};
use std::time::Duration;

fn deployment(name: &str, quota: Option<&str>, replicas: i64) -> Value {
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "web",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}});
    if let Some(q) = quota {
        d["metadata"]["labels"] = json!({"biz.group.resource.quota": q});
    }
    d
}

fn deployments(c: &Cluster) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    );
    Api::namespaced_with(c.kubectl("alice"), "ml", &ar)
}

async fn create(c: &Cluster, obj: Value) {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    deployments(c)
        .create(&PostParams::default(), &o)
        .await
        .expect("created");
}

async fn scale(c: &Cluster, name: &str, replicas: i64) -> Result<(), (u16, String)> {
    deployments(c)
        .patch_scale(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .map(|_| ())
        .map_err(|e| {
            let (code, _, message) = crate::admission::refusal::<()>(Err(e));
            (code, message)
        })
}

/// A LIST of every quota (not a watch, not the readiness probe's `limit=1`).
fn lists_quotas(r: &str) -> bool {
    let Some(rest) = r.strip_prefix("GET /apis/bizrq.io/v1/bizgroupresourcequotas") else {
        return false;
    };
    (rest.is_empty() || rest.starts_with('?'))
        && !rest.contains("watch=")
        && !rest.contains("limit=1&")
        && !rest.ends_with("limit=1")
}

/// The quota `ml` (4 CPUs, charged at once) written through this replica
/// and reconciled, the controller watching Deployments.
async fn cluster() -> Cluster {
    let c = Cluster::start().await;
    c.server
        .create_quota("ml", "", json!({"requests.cpu": "4"}))
        .await;
    c.until("ml", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    c.until_requested("deployment watch", |r| {
        r.starts_with("GET /apis/apps/v1/deployments?") && r.contains("watch=true")
    })
    .await;
    c
}

/// The scale and delete of a Deployment a quota holds are answered from
/// the watch's copy, with no LIST of the quotas, though this replica has
/// just written the charge; an HPA moving a Deployment no quota holds is
/// read again in one LIST per scale (another replica may have charged it
/// after this one's latest write), each counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_scale_or_delete_lists_no_quota_an_ungoverned_scale_lists_once() {
    let c = cluster().await;
    create(&c, deployment("free", None, 1)).await;
    create(&c, deployment("web", Some("ml"), 1)).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "1")
        .await;
    let before = c.fake.requests().len();
    for n in [3, 7, 2] {
        scale(&c, "free", n).await.expect("an ungoverned scale");
    }
    let ungoverned = c.fake.requests()[before..].to_vec();
    assert_eq!(
        ungoverned.iter().filter(|r| lists_quotas(r)).count(),
        3,
        "one LIST per ungoverned scale: {ungoverned:#?}"
    );
    c.until_metric("bizrq_workload_lookup_lists_total 3").await;
    let before = c.fake.requests().len();
    scale(&c, "web", 2).await.expect("within the quota");
    let (code, message) = scale(&c, "web", 9).await.expect_err("over the quota");
    assert_eq!(code, 403, "{message}");
    deployments(&c)
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    let q = c
        .until("ml", "released", |q| used(q, "requests.cpu") == "0")
        .await;
    assert!(
        q["status"]["workloads"]["apps/Deployment/ml/web"].is_null(),
        "{q}"
    );
    let after = c.fake.requests()[before..].to_vec();
    assert!(
        !after.iter().any(|r| lists_quotas(r)),
        "no LIST of the quotas: {after:#?}"
    );
    c.until_metric("bizrq_workload_lookup_lists_total 3").await;
}

/// A scale right after the create, while the quota watch lags the
/// create's charge by less than the bound, waits for the watch (woken by
/// it) and is judged against the charge: refused, with no LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_right_after_the_create_waits_for_the_watch_not_a_list() {
    let c = cluster().await;
    c.fake.set_watch_delay(Duration::from_millis(200));
    let before = c.fake.requests().len();
    create(&c, deployment("web", Some("ml"), 0)).await;
    let (code, message) = scale(&c, "web", 500)
        .await
        .expect_err("judged, not ungoverned");
    assert_eq!(code, 403, "{message}");
    let stored = c.fake.get("apps", "deployments", "ml", "web").unwrap();
    assert_eq!(stored["spec"]["replicas"], 0, "not scaled");
    let after = c.fake.requests()[before..].to_vec();
    assert!(
        !after.iter().any(|r| lists_quotas(r)),
        "no LIST of the quotas: {after:#?}"
    );
    c.until_metric("bizrq_workload_lookup_lists_total 0").await;
}

/// A delete right after the create, while the watch has not delivered the
/// create's charge, releases the charge in the delete's review (and lists
/// nothing). The controller's own watches lag as much, so it may record
/// the Deployment again from its late view before it sees the delete; the
/// release is asserted on the versions the API server stored before the
/// delete returned, which the controller could not have written, and the
/// charge is gone in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_right_after_the_create_releases_while_the_watch_lags() {
    let c = cluster().await;
    c.fake.set_watch_delay(Duration::from_millis(200));
    let before = c.fake.requests().len();
    create(&c, deployment("web", Some("ml"), 3)).await;
    let charged = c.fake.quota("ml");
    assert_eq!(used(&charged, "requests.cpu"), "3");
    let at: u64 = charged["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    deployments(&c)
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    let versions = c.fake.quota_versions("ml", at);
    assert!(
        versions.iter().any(|q| used(q, "requests.cpu") == "0"
            && q["status"]["workloads"]["apps/Deployment/ml/web"].is_null()),
        "released in the delete's review: {versions:#?}"
    );
    let after = c.fake.requests()[before..].to_vec();
    assert!(
        !after.iter().any(|r| lists_quotas(r)),
        "no LIST of the quotas: {after:#?}"
    );
    c.until("ml", "released for good", |q| {
        used(q, "requests.cpu") == "0"
            && q["status"]["workloads"]["apps/Deployment/ml/web"].is_null()
    })
    .await;
}

/// A watch lagging past the bound (2 s here, 1 s the bound): the lookup
/// reads one LIST of every quota, counted, and the scale is still judged
/// against the charge the watch has not delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_lagging_past_the_bound_is_read_around_by_one_list() {
    let c = cluster().await;
    c.fake.set_watch_delay(Duration::from_secs(2));
    let before = c.fake.requests().len();
    create(&c, deployment("web", Some("ml"), 0)).await;
    let (code, message) = scale(&c, "web", 500)
        .await
        .expect_err("judged, not ungoverned");
    assert_eq!(code, 403, "{message}");
    let after = c.fake.requests()[before..].to_vec();
    assert_eq!(
        after.iter().filter(|r| lists_quotas(r)).count(),
        1,
        "one LIST: {after:#?}"
    );
    c.until_metric("bizrq_workload_lookup_lists_total 1").await;
}
