//! Workload writes as the shipped webhook configurations say: rules and
//! selectors, failure policies, HPA writes, excluded namespaces (neither
//! charged by the controller nor by a review), a governed PyTorchJob not
//! scaled past bizrq.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_writes_are_reviewed_as_the_shipped_rules_and_selectors_say() {
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    let kubectl = c.kubectl("alice");
    let pp = PostParams::default();
    let deploy = |ns: &str, name: &str, replicas: i64| -> Deployment {
        let mut d = deployment(name, "nlp-team", replicas, 2);
        d["metadata"]["namespace"] = json!(ns);
        serde_json::from_value(d).unwrap()
    };
    let nlp: Api<Deployment> = Api::namespaced(kubectl.clone(), "nlp");

    // Within quota: admitted, stored, charged.
    nlp.create(&pp, &deploy("nlp", "small", 1)).await.unwrap();
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "2");
    let r = c.fake.reviews().last().unwrap().clone();
    assert_eq!(r["webhook"], "workloads.bizrq.io");
    let req = &r["request"];
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(
        req["kind"],
        json!({"group": "apps", "version": "v1", "kind": "Deployment"})
    );
    assert_eq!(
        req["resource"],
        json!({"group": "apps", "version": "v1", "resource": "deployments"})
    );
    assert_eq!(
        (req["namespace"].as_str(), req["name"].as_str()),
        (Some("nlp"), Some("small"))
    );
    assert_eq!(req["userInfo"]["username"], "alice");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["options"]["kind"], "CreateOptions");
    assert!(req["oldObject"].is_null());

    // Over quota: kubectl gets the webhook's denial as a 403.
    let (code, reason, message) = refusal(nlp.create(&pp, &deploy("nlp", "big", 2)).await);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{message}");
    assert!(
        message.starts_with("admission webhook \"workloads.bizrq.io\" denied the request: bizrq nlp-team: requests.nvidia.com/gpu asks 4, 2 left of 4"),
        "{message}"
    );
    assert!(c.fake.get("apps", "deployments", "nlp", "big").is_none());

    // A dry run is reviewed as one, and neither stored nor charged.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    nlp.create(&dry, &deploy("nlp", "trial", 1)).await.unwrap();
    let req = c.fake.reviews().last().unwrap()["request"].clone();
    assert_eq!(
        (req["name"].as_str(), &req["dryRun"]),
        (Some("trial"), &json!(true))
    );
    assert_eq!(req["options"]["dryRun"], json!(["All"]));
    assert!(c.fake.get("apps", "deployments", "nlp", "trial").is_none());
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "2");

    // The scale subresource is reviewed as a Scale, old and new.
    let (code, _, message) = refusal(
        nlp.patch_scale(
            "small",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with("admission webhook \"scale.bizrq.io\" denied"),
        "{message}"
    );
    let req = c.fake.reviews().last().unwrap()["request"].clone();
    assert_eq!(
        (req["subResource"].as_str(), req["kind"]["kind"].as_str()),
        (Some("scale"), Some("Scale"))
    );
    assert_eq!(
        (
            &req["object"]["spec"]["replicas"],
            &req["oldObject"]["spec"]["replicas"]
        ),
        (&json!(3), &json!(1))
    );

    // Not reviewed: kube-system (namespaceSelector) and unlabelled
    // workloads (objectSelector) — both stored without asking bizrq.
    let before = c.fake.reviews().len();
    let system: Api<Deployment> = Api::namespaced(kubectl.clone(), "kube-system");
    system
        .create(&pp, &deploy("kube-system", "dns", 9))
        .await
        .unwrap();
    let mut plain = deploy("nlp", "plain", 9);
    plain
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("biz.group.resource.quota");
    nlp.create(&pp, &plain).await.unwrap();
    assert_eq!(
        c.fake.reviews().len(),
        before,
        "{:#?}",
        &c.fake.reviews()[before..]
    );
    assert!(c
        .fake
        .get("apps", "deployments", "kube-system", "dns")
        .is_some());
    c.fake.remove("apps", "deployments", "kube-system", "dns");

    // A delete is reviewed (and releases the charge).
    nlp.delete("small", &DeleteParams::default()).await.unwrap();
    let r = c.fake.reviews().last().unwrap().clone();
    assert_eq!(
        (r["webhook"].as_str(), r["request"]["operation"].as_str()),
        (Some("workload-deletes.bizrq.io"), Some("DELETE"))
    );
    assert!(r["request"]["object"].is_null());
    assert_eq!(r["request"]["oldObject"]["metadata"]["name"], "small");
    c.until("nlp-team", "released", |q| q["status"]["used"][GPU] == "0")
        .await;
    c.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_webhook_refuses_under_fail_and_lets_ignore_through() {
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    let kubectl = c.kubectl("alice");
    let nlp: Api<Deployment> = Api::namespaced(kubectl.clone(), "nlp");
    let d: Deployment = serde_json::from_value(deployment("small", "nlp-team", 1, 2)).unwrap();
    nlp.create(&PostParams::default(), &d).await.unwrap();

    // The Service loses its endpoint: nothing listens there any more.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let ca = std::fs::read_to_string(c.ca_path()).unwrap();
    c.fake
        .admit_with(&crate::cluster::shipped_webhooks(), &ca, gone);
    let (code, reason, message) = refusal(
        quotas(kubectl.clone())
            .create(&PostParams::default(), &quota_object("cv", "", "1"))
            .await,
    );
    assert_eq!((code, reason.as_str()), (500, "InternalError"), "{message}");
    assert!(
        message.starts_with("Internal error occurred: failed calling webhook \"quotas.bizrq.io\": failed to call webhook: Post \"https://bizrq.bizrq-system.svc:443/validate/quotas?timeout=5s\": "),
        "{message}"
    );
    let d2: Deployment = serde_json::from_value(deployment("other", "nlp-team", 1, 1)).unwrap();
    let (code, _, message) = refusal(nlp.create(&PostParams::default(), &d2).await);
    assert_eq!(code, 500, "{message}");
    // bizrq's own writes are refused too: its JSON API says so.
    let (st, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "cv"}, "spec": {"parent": "", "hard": {GPU: "1"}}})),
        )
        .await;
    assert!(st.is_server_error(), "{st} {v}");
    // Deletes are Ignore: the delete proceeds (the controller releases).
    nlp.delete("small", &DeleteParams::default()).await.unwrap();
    assert!(c.fake.get("apps", "deployments", "nlp", "small").is_none());

    // The endpoint is back: so are quota writes.
    c.serve_webhooks();
    quotas(kubectl)
        .create(&PostParams::default(), &quota_object("cv", "", "1"))
        .await
        .unwrap();
    c.running.shutdown().await;
}

/// An HPA reserves its maxReplicas through `hpa.bizrq.io` (Fail); its
/// delete goes to `hpa-deletes.bizrq.io` (Ignore) and lifts the reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpa_writes_reach_the_hpa_webhooks() {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "8"}))
        .await;
    let kubectl = c.kubectl("alice");
    let d: Deployment = serde_json::from_value(deployment("train", "nlp-team", 1, 2)).unwrap();
    Api::<Deployment>::namespaced(kubectl.clone(), "nlp")
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(kubectl, "nlp");
    let hpa = |max: i64| -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "train", "namespace": "nlp"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train"},
                "minReplicas": 1, "maxReplicas": max}}))
        .unwrap()
    };
    // 5 × 2 GPUs cannot be reserved in 8.
    let (code, _, message) = refusal(hpas.create(&PostParams::default(), &hpa(5)).await);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with("admission webhook \"hpa.bizrq.io\" denied the request: "),
        "{message}"
    );
    hpas.create(&PostParams::default(), &hpa(4)).await.unwrap();
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "8");
    hpas.delete("train", &DeleteParams::default())
        .await
        .unwrap();
    let r = c.fake.reviews().last().unwrap().clone();
    assert_eq!(r["webhook"], "hpa-deletes.bizrq.io");
    // The delete lifts the reservation at once; a reconcile whose HPA cache
    // still shows the HPA may put it back until the watch delivers the
    // deletion, so the end state is awaited.
    c.until("nlp-team", "the HPA reservation lifted", |q| {
        q["status"]["used"][GPU] == "2"
    })
    .await;
    c.running.shutdown().await;
}

/// The shipped configuration with its namespaceSelectors removed, as
/// someone editing it by hand might: kube-system's writes then reach bizrq.
fn webhooks_without_namespace_selectors() -> String {
    let selector = "  namespaceSelector:\n    matchExpressions:\n    - key: kubernetes.io/metadata.name\n      operator: NotIn\n      values: [\"kube-system\", \"bizrq-system\"]\n";
    let shipped = crate::cluster::shipped_webhooks();
    assert_eq!(
        shipped.matches(selector).count(),
        6,
        "the shipped selectors"
    );
    shipped.replace(selector, "")
}

/// The controller watches every namespace, but charges only workloads in
/// the namespaces the webhook governs: a labelled 9 × 2-GPU Deployment
/// running in kube-system is no part of its quota; the same kind of
/// Deployment in nlp is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_charges_no_workload_in_an_excluded_namespace() {
    use crate::cluster::{pod, replicaset};
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    // As the API server stores them (kube-system is never reviewed); the
    // excluded namespace's objects first, so any reconcile that sees nlp's
    // Deployment has seen kube-system's too.
    for (ns, replicas) in [("kube-system", 9), ("nlp", 1)] {
        let mut d = deployment("train", "nlp-team", replicas, 2);
        d["metadata"]["namespace"] = ns.into();
        c.fake.put(d);
        c.fake.put(replicaset(ns, "train"));
        for i in 0..replicas.min(2) {
            let name = format!("train-{ns}-{i}");
            c.fake.put(pod(
                ns,
                &name,
                "ReplicaSet",
                "train-7d9f",
                2,
                "2026-11-21T10:00:00Z",
            ));
        }
    }
    let q = c
        .until("nlp-team", "nlp's Deployment observed", |q| {
            q["status"]["workloads"]["apps/Deployment/nlp/train"].is_object()
        })
        .await;
    let workloads: Vec<&String> = q["status"]["workloads"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(workloads, ["apps/Deployment/nlp/train"], "{q}");
    assert_eq!(q["status"]["used"][GPU], "2", "{q}");
    // Both namespaces' pods are watched; only nlp's runs are charged.
    c.until_metric("bizrq_controller_tracked{kind=\"pods\"} 3")
        .await;
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.until_metric("bizrq_controller_tracked{kind=\"workloads\"} 1")
        .await;
    c.running.shutdown().await;
}

/// A webhook configuration edited by hand sends kube-system's writes to
/// bizrq anyway: the webhook allows them, charging nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_from_an_excluded_namespace_is_allowed_uncharged() {
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    let ca = std::fs::read_to_string(c.ca_path()).unwrap();
    c.fake.admit_with(
        &webhooks_without_namespace_selectors(),
        &ca,
        c.running.webhook_addr,
    );
    let kubectl = c.kubectl("alice");
    let before = c.fake.reviews().len();
    let d: Deployment = serde_json::from_value(deployment("dns", "nlp-team", 9, 2)).unwrap();
    let mut d = d;
    d.metadata.namespace = Some("kube-system".into());
    Api::<Deployment>::namespaced(kubectl.clone(), "kube-system")
        .create(&PostParams::default(), &d)
        .await
        .expect("allowed: kube-system is not governed");
    let reviews = c.fake.reviews();
    let sent: Vec<&Value> = reviews[before..]
        .iter()
        .filter(|r| r["request"]["namespace"] == "kube-system")
        .collect();
    assert_eq!(
        sent.len(),
        1,
        "the edited configuration sent it: {reviews:#?}"
    );
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "0");
    // The same in a governed namespace is refused: 18 GPUs do not fit in 4.
    let nlp: Deployment = serde_json::from_value(deployment("dns", "nlp-team", 9, 2)).unwrap();
    let (code, _, message) = refusal(
        Api::<Deployment>::namespaced(kubectl, "nlp")
            .create(&PostParams::default(), &nlp)
            .await,
    );
    assert_eq!(code, 403, "{message}");
    c.running.shutdown().await;
}

/// `kubectl scale pytorchjob` goes through Kubeflow's scale subresource
/// (its Worker replicas), which the shipped scale webhook reviews: for a
/// governed job a Scale alone cannot be charged (one replica type of
/// several), so it is refused with what to do instead; an ungoverned job
/// scales freely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_pytorchjob_is_not_scaled_past_bizrq() {
    let c = Cluster::start().await;
    c.fake.install(crate::fakeapi::PYTORCHJOB);
    c.server
        .create_quota("nlp-team", "", json!({GPU: "8"}))
        .await;
    let gvk = GroupVersionKind::gvk("kubeflow.org", "v1", "PyTorchJob");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "pytorchjobs");
    let jobs: Api<DynamicObject> = Api::namespaced_with(c.kubectl("alice"), "nlp", &ar);
    let job = |name: &str, quota: Option<&str>| -> DynamicObject {
        let mut v = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "nlp"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "worker", "image": "trainer",
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}}}});
        if let Some(q) = quota {
            v["metadata"]["labels"] = json!({"biz.group.resource.quota": q});
        }
        serde_json::from_value(v).unwrap()
    };
    let pp = PostParams::default();
    jobs.create(&pp, &job("bert", Some("nlp-team")))
        .await
        .unwrap();
    c.until("nlp-team", "the job charged", |q| {
        q["status"]["used"][GPU] == "1"
    })
    .await;
    // And bizrq's own cache of the quotas has the charge.
    let seen = || async {
        let (_, q) = c
            .server
            .api(Method::GET, "/api/v1/quotas/nlp-team", None)
            .await;
        (q["status"]["used"][GPU] == "1").then_some(())
    };
    crate::common::poll_until(200, std::time::Duration::from_millis(50), seen)
        .await
        .expect("bizrq's cache has the charge");
    let scale = |name: &'static str| {
        let jobs = jobs.clone();
        async move {
            jobs.patch_scale(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"replicas": 8}})),
            )
            .await
        }
    };
    let (code, _, message) = refusal(scale("bert").await);
    assert_eq!(code, 400, "{message}");
    assert!(
        message.starts_with(
            "admission webhook \"scale.bizrq.io\" denied the request: bizrq: PyTorchJob nlp/bert is governed by a quota and cannot be scaled through its scale subresource"
        ),
        "{message}"
    );
    assert_eq!(
        c.fake
            .get("kubeflow.org", "pytorchjobs", "nlp", "bert")
            .unwrap()["spec"]["replicas"],
        Value::Null,
        "nothing was scaled"
    );
    jobs.create(&pp, &job("free", None)).await.unwrap();
    scale("free").await.expect("an ungoverned job scales");
    c.running.shutdown().await;
}
