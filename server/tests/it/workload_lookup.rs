//! Which quota holds a workload (what a `/scale` or an HPA is judged
//! against), in cluster mode through the fake API server: answered by the
//! quota watch's copy; a workload the copy does not hold is read itself,
//! in one GET, and its quota label decides: none is ungoverned, a quota
//! named is read (its copy, then one GET), since another replica may have
//! charged the workload within this one's watch lag. Never a LIST of every
//! quota, but where the workload cannot be read (docs/cluster-mode.md).

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

/// A GET of the object `name` of `plural` in `ml` (its metadata or whole),
/// not of a subresource.
fn gets(r: &str, plural: &str, name: &str) -> bool {
    let at = format!("GET /apis/apps/v1/namespaces/ml/{plural}/{name}");
    r.strip_prefix(&at)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'))
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

/// Each scale of a Deployment no quota label governs (an HPA moving it)
/// reads the Deployment in one GET and lists no quota; its delete reads
/// nothing. The scale and delete of a Deployment a quota holds are
/// answered from the watch's copy, with no request of the lookup's own,
/// and a scale past `hard` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ungoverned_scale_reads_its_deployment_once_and_lists_no_quota() {
    let c = cluster().await;
    create(&c, deployment("free", None, 1)).await;
    create(&c, deployment("web", Some("ml"), 1)).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "1")
        .await;
    let before = c.fake.requests().len();
    for n in [3, 7, 2] {
        scale(&c, "free", n).await.expect("an ungoverned scale");
    }
    deployments(&c)
        .delete("free", &DeleteParams::default())
        .await
        .expect("deleted");
    let ungoverned = c.fake.requests()[before..].to_vec();
    assert!(
        !ungoverned.iter().any(|r| lists_quotas(r)),
        "no LIST of the quotas: {ungoverned:#?}"
    );
    assert_eq!(
        ungoverned
            .iter()
            .filter(|r| gets(r, "deployments", "free"))
            .count(),
        3,
        "one GET of the Deployment per scale, none for its delete: {ungoverned:#?}"
    );
    let before = c.fake.requests().len();
    scale(&c, "web", 2).await.expect("within the quota");
    let (code, message) = scale(&c, "web", 9).await.expect_err("over the quota");
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("ml"), "{message}");
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
    c.until_metric("bizrq_workload_lookup_lists_total 0").await;
    c.until_metric("bizrq_workload_lookup_read_failures_total 0")
        .await;
}

/// A scale right after the create, while the quota watch lags the
/// create's charge by 2 s (past the 1 s the lookup once waited before its
/// LIST): the lookup reads the Deployment, finds its label, reads the
/// quota it names in one GET, and the scale is judged against the charge:
/// refused past `hard`, with no LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_while_the_watch_lags_is_judged_by_the_label_not_a_list() {
    let c = cluster().await;
    c.fake.set_watch_delay(Duration::from_secs(2));
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
    assert_eq!(
        after
            .iter()
            .filter(|r| gets(r, "deployments", "web"))
            .count(),
        1,
        "one GET of the Deployment: {after:#?}"
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

/// Two replicas over one API server: A reviews the create and charges it;
/// B, whose quota watch lags A's write by 3 s and which has written
/// nothing itself, reviews the scale. B's copy does not hold the charge,
/// the Deployment's label names `ml`, and one GET of `ml` finds it: the
/// scale is judged against it and refused past `hard`, with no LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_of_a_workload_another_replica_charged_is_judged_against_the_charge() {
    let c = cluster().await;
    c.fake
        .lag_next_watch("bizrq.io", "bizgroupresourcequotas", Duration::from_secs(3));
    let b = Cluster::replica(
        c.fake.clone(),
        tempfile::tempdir().unwrap(),
        crate::cluster::T0,
        "bizrq-b",
        false,
    )
    .await;
    create(&c, deployment("web", Some("ml"), 1)).await;
    assert_eq!(used(&c.fake.quota("ml"), "requests.cpu"), "1", "A charged");
    b.serve_webhooks();
    let before = c.fake.requests().len();
    let (code, message) = scale(&c, "web", 9)
        .await
        .expect_err("judged against A's charge");
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("ml"), "{message}");
    scale(&c, "web", 3).await.expect("within the quota");
    let q = c.fake.quota("ml");
    assert_eq!(used(&q, "requests.cpu"), "3", "{q}");
    let after = c.fake.requests()[before..].to_vec();
    assert!(
        !after.iter().any(|r| lists_quotas(r)),
        "no LIST of the quotas: {after:#?}"
    );
    b.until_metric("bizrq_workload_lookup_lists_total 0").await;
    b.running.shutdown().await;
}

/// A lookup that cannot read the Deployment (the API server refuses the
/// GET, as RBAC refuses an identity without `get`, or fails it) falls
/// back to one LIST of every quota, counted twice (the LIST, the failed
/// read), and judges the scale on it: nothing passes unjudged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_that_cannot_be_read_is_looked_up_in_one_list() {
    let c = cluster().await;
    create(&c, deployment("free", None, 1)).await;
    c.fake
        .fail_reads("/apis/apps/v1/namespaces/ml/deployments/free", 1);
    let before = c.fake.requests().len();
    scale(&c, "free", 5).await.expect("an ungoverned scale");
    let after = c.fake.requests()[before..].to_vec();
    assert_eq!(
        after.iter().filter(|r| lists_quotas(r)).count(),
        1,
        "one LIST: {after:#?}"
    );
    c.until_metric("bizrq_workload_lookup_read_failures_total 1")
        .await;
    c.fake.set_watch_delay(Duration::from_secs(2));
    create(&c, deployment("web", Some("ml"), 0)).await;
    c.fake
        .forbid_reads("/apis/apps/v1/namespaces/ml/deployments/web", 1);
    let before = c.fake.requests().len();
    let (code, message) = scale(&c, "web", 500)
        .await
        .expect_err("judged, not ungoverned");
    assert_eq!(code, 403, "{message}");
    let stored = c.fake.get("apps", "deployments", "ml", "web").unwrap();
    assert_eq!(stored["spec"]["replicas"], 0, "not scaled");
    let after = c.fake.requests()[before..].to_vec();
    assert_eq!(
        after.iter().filter(|r| lists_quotas(r)).count(),
        1,
        "one LIST: {after:#?}"
    );
    c.until_metric("bizrq_workload_lookup_lists_total 2").await;
    c.until_metric("bizrq_workload_lookup_read_failures_total 2")
        .await;
}

/// An HPA's target is looked up as a scale's is: an HPA on a Deployment no
/// label governs reads it in one GET and lists nothing; one on a governed
/// Deployment whose charge the lagging watch has not delivered is refused
/// when its `maxReplicas` cannot fit, with no LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_target_is_read_in_one_get_not_a_list() {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    let c = cluster().await;
    create(&c, deployment("free", None, 1)).await;
    c.fake.set_watch_delay(Duration::from_secs(2));
    create(&c, deployment("web", Some("ml"), 1)).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(c.kubectl("alice"), "ml");
    let hpa = |target: &str, max: i64| -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": target, "namespace": "ml"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                "minReplicas": 1, "maxReplicas": max}}))
        .unwrap()
    };
    let before = c.fake.requests().len();
    hpas.create(&PostParams::default(), &hpa("free", 50))
        .await
        .expect("an ungoverned target");
    let (code, _, message) =
        crate::admission::refusal(hpas.create(&PostParams::default(), &hpa("web", 9)).await);
    assert_eq!(code, 403, "{message}");
    let after = c.fake.requests()[before..].to_vec();
    assert!(
        !after.iter().any(|r| lists_quotas(r)),
        "no LIST of the quotas: {after:#?}"
    );
    for target in ["free", "web"] {
        assert_eq!(
            after
                .iter()
                .filter(|r| gets(r, "deployments", target))
                .count(),
            1,
            "one GET of {target}: {after:#?}"
        );
    }
    c.until_metric("bizrq_workload_lookup_lists_total 0").await;
}

/// The documents of a shipped manifest under `deploy/base`.
pub(crate) fn shipped(file: &str) -> Vec<Value> {
    use serde::Deserialize;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/base")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|d| !d.is_null())
        .collect()
}

/// The shipped ClusterRole lets the lookup GET every object it reads:
/// each kind whose `/scale` the shipped scale webhook matches, and each
/// kind bizrq governs (what an HPA's target can be). Without it, each
/// such lookup falls back to a LIST of every quota.
#[test]
fn the_shipped_role_lets_the_lookup_get_every_object_it_reads() {
    let rbac = shipped("rbac.yaml");
    let role = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "bizrq")
        .expect("the ClusterRole bizrq");
    let has = |list: &Value, x: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v == x || v == "*"))
    };
    let grants_get = |group: &str, resource: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            has(&r["apiGroups"], group) && has(&r["resources"], resource) && has(&r["verbs"], "get")
        })
    };
    let webhooks = shipped("webhook.yaml");
    let scale = webhooks
        .iter()
        .flat_map(|d| d["webhooks"].as_array().cloned().unwrap_or_default())
        .find(|w| w["name"] == "scale.bizrq.io")
        .expect("the scale webhook");
    let mut scaled = 0;
    for rule in scale["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                let parent = resource.as_str().unwrap().strip_suffix("/scale").unwrap();
                let group = group.as_str().unwrap();
                assert!(grants_get(group, parent), "get on {parent}.{group}");
                scaled += 1;
            }
        }
    }
    assert!(scaled >= 7, "{scale:#}");
    for a in quota::workload::ADAPTERS {
        assert!(
            grants_get(a.group, a.resource),
            "get on {}.{}",
            a.resource,
            a.group
        );
    }
}
