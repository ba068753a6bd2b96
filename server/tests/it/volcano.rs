//! Volcano Jobs queue by gating their pods (docs/queueing.md, "Volcano
//! Job"): `batch.volcano.sh/v1alpha1` Job has no suspend flag, so the
//! mutating webhook puts bizrq's scheduling gate on every task template;
//! the pods Volcano's controller makes from them (played here by the test)
//! cannot be bound while gated (the fake API server refuses the binding
//! as kube-apiserver does); the queue charges first, then releases: the
//! hold annotation off the job, the gate off each pod, through the
//! shipped pods webhook, which refuses anyone else's removal.

use crate::cluster::{used, Cluster};
use crate::fakeapi::VOLCANOJOB;
use crate::support::queue_refs;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

const GATE: &str = "biz.group.resource.quota/queued";
const VOLCANO: &str = "system:serviceaccount:volcano-system:volcano-controllers";

/// A Volcano Job of `tasks` (name, replicas), each pod asking 1 CPU.
fn vcjob(name: &str, tasks: &[(&str, i64)]) -> Value {
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|(t, n)| {
            json!({"name": t, "replicas": n, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "trainer",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}})
        })
        .collect();
    json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": tasks}})
}

fn api(
    c: &Cluster,
    user: &str,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(c.kubectl(user), "ml", &ar)
}

fn vcjobs(c: &Cluster) -> Api<DynamicObject> {
    api(c, "alice", "batch.volcano.sh", "v1alpha1", "Job", "jobs")
}

fn pods(c: &Cluster, user: &str) -> Api<DynamicObject> {
    api(c, user, "", "v1", "Pod", "pods")
}

async fn create(c: &Cluster, obj: &Value) -> Result<(), String> {
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    vcjobs(c)
        .create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn stored(c: &Cluster, name: &str) -> Value {
    c.fake.get("batch.volcano.sh", "jobs", "ml", name).unwrap()
}

fn pod_of(c: &Cluster, name: &str) -> Value {
    c.fake.get("", "pods", "ml", name).unwrap()
}

fn gated(pod: &Value) -> bool {
    pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| g.iter().any(|g| g["name"] == GATE))
}

/// What Volcano's job controller does: a pod from the job's task template
/// as stored, owned by the job.
async fn volcano_makes_pod(c: &Cluster, job: &str, task: usize, i: usize) -> String {
    volcano_makes_pod_as_created(c, job, task, i).await.0
}

/// `volcano_makes_pod`, with the pod as the API server created it (after
/// the admission webhooks): the controller may change it right after.
async fn volcano_makes_pod_as_created(
    c: &Cluster,
    job: &str,
    task: usize,
    i: usize,
) -> (String, Value) {
    let j = stored(c, job);
    let t = &j["spec"]["tasks"][task];
    let name = format!("{job}-{}-{i}", t["name"].as_str().unwrap());
    let mut labels = t["template"]["metadata"]["labels"].clone();
    if labels.is_null() {
        labels = json!({});
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels,
            "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "name": job, "uid": j["metadata"]["uid"], "controller": true}]},
        "spec": t["template"]["spec"]});
    let o: DynamicObject = serde_json::from_value(pod).unwrap();
    let created = pods(c, VOLCANO)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
    (name, serde_json::to_value(created).unwrap())
}

/// The scheduler binding a pod (`pods/binding`): Ok, or the API server's
/// code and message.
async fn bind(c: &Cluster, pod: &str) -> Result<(), (u16, String)> {
    let body = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod, "namespace": "ml"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"}});
    let req = http::Request::post(format!("/api/v1/namespaces/ml/pods/{pod}/binding"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    match c
        .kubectl("system:kube-scheduler")
        .request::<Value>(req)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => panic!("{e}"),
    }
}

async fn json_patch(c: &Cluster, user: &str, pod: &str, ops: Value) -> Result<(), (u16, String)> {
    let req = http::Request::patch(format!("/api/v1/namespaces/ml/pods/{pod}"))
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&ops).unwrap())
        .unwrap();
    match c.kubectl(user).request::<Value>(req).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => panic!("{e}"),
    }
}

fn rv(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn until(what: &str, f: impl Fn() -> bool) {
    for _ in 0..800 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

async fn volcano_cluster() -> Cluster {
    let c = Cluster::start().await;
    c.fake.install(VOLCANOJOB);
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
    c.until_requested("volcano job watch", |r| {
        r.starts_with("GET /apis/batch.volcano.sh/v1alpha1/jobs?") && r.contains("watch=true")
    })
    .await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volcano_job_that_does_not_fit_is_gated_queued_and_released_when_room_frees() {
    let c = volcano_cluster().await;

    // Fits: admitted at once, as without queueing; nothing gated.
    create(&c, &vcjob("fits", &[("w", 3)])).await.unwrap();
    let f = stored(&c, "fits");
    assert!(f["metadata"]["annotations"].get(GATE).is_none(), "{f}");
    assert!(!gated(&f["spec"]["tasks"][0]["template"]));
    assert_eq!(used(&c.fake.quota("ml"), "requests.cpu"), "3");

    // Does not fit (3 asked, 1 free): every task template gated and
    // labelled, the job annotated, queued at position 1, not charged.
    create(&c, &vcjob("big", &[("ps", 1), ("worker", 2)]))
        .await
        .unwrap();
    let b = stored(&c, "big");
    assert_eq!(b["metadata"]["annotations"][GATE], "true", "{b}");
    for t in 0..2 {
        let tpl = &b["spec"]["tasks"][t]["template"];
        assert_eq!(
            tpl["spec"]["schedulingGates"],
            json!([{"name": GATE}]),
            "{tpl}"
        );
        assert_eq!(tpl["metadata"]["labels"][GATE], "true");
    }
    // At once without marks; after the round's fold with them.
    let q = c
        .until("ml", "big queued", |q| {
            queue_refs(q) == ["batch.volcano.sh/Job/ml/big"]
        })
        .await;
    assert_eq!(
        q["status"]["queue"][0]["reason"],
        "waits for 2 × requests.cpu: 1 free, 3 needed"
    );
    assert_eq!(used(&q, "requests.cpu"), "3", "queued: not charged");

    // Volcano's controller makes its pods from the gated templates: none
    // can be bound, by any scheduler.
    let mut made = Vec::new();
    for (t, i) in [(0, 0), (1, 0), (1, 1)] {
        made.push(volcano_makes_pod(&c, "big", t, i).await);
    }
    assert_eq!(made, ["big-ps-0", "big-worker-0", "big-worker-1"]);
    let (code, msg) = bind(&c, "big-ps-0").await.unwrap_err();
    assert_eq!(
        (code, msg.as_str()),
        (409, "Operation cannot be fulfilled on pods/binding \"big-ps-0\": pod big-ps-0 has non-empty .spec.schedulingGates")
    );

    // Nobody else removes the gate: refused by the shipped pods webhook.
    let remove = json!([{"op": "remove", "path": "/spec/schedulingGates/0"}]);
    let (code, msg) = json_patch(&c, "alice", "big-ps-0", remove.clone())
        .await
        .unwrap_err();
    assert_eq!(code, 403, "{msg}");
    assert!(
        msg.starts_with("admission webhook \"pods.bizrq.io\" denied the request: bizrq: pod ml/big-ps-0 belongs to a workload waiting in its quota's queue"),
        "{msg}"
    );
    assert!(msg.ends_with("only bizrq may remove it"), "{msg}");
    // Nor its label (which sends the pod to the webhook) while gated.
    let unlabel =
        json!([{"op": "remove", "path": "/metadata/labels/biz.group.resource.quota~1queued"}]);
    let (code, msg) = json_patch(&c, "alice", "big-ps-0", unlabel)
        .await
        .unwrap_err();
    assert!(
        code == 403 && msg.contains("stays while it is gated"),
        "{msg}"
    );
    // Adding a gate is the API server's own refusal, before any webhook.
    let add = json!([{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x"}}]);
    let (code, msg) = json_patch(&c, "alice", "big-ps-0", add).await.unwrap_err();
    assert_eq!(
        (code, msg.as_str()),
        (422, "Pod \"big-ps-0\" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'x'")
    );
    assert!(gated(&pod_of(&c, "big-ps-0")));
    // The controller knows the job (its uid named in the entry) and its
    // pods, and releases nothing while it waits.
    c.until("ml", "entry named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pod_patches = || -> Vec<String> {
        c.fake
            .requests()
            .into_iter()
            .filter(|r| r.starts_with("PATCH /api/v1/namespaces/ml/pods/"))
            .collect()
    };
    assert_eq!(
        pod_patches().len(),
        3,
        "only alice's three refused attempts"
    );
    // Held afterwards by its owner: refused (pods made before would run
    // uncharged). Here: the running job "fits".
    let late = vcjobs(&c)
        .patch(
            "fits",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {GATE: "true"}},
                "spec": {"tasks": [{"name": "w", "replicas": 3, "template": {"spec": {
                    "schedulingGates": [{"name": GATE}], "containers": [{"name": "c", "image": "trainer",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}]}})),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        late.contains("holds a workload back only from its creation"),
        "{late}"
    );

    // Room frees: "fits" is deleted. The controller charges big first,
    // then removes the hold annotation, then ungates exactly its 3 pods.
    let before = c.fake.requests().len();
    vcjobs(&c)
        .delete("fits", &DeleteParams::default())
        .await
        .unwrap();
    until("big's pods ungated", || {
        made.iter().all(|p| !gated(&pod_of(&c, p)))
    })
    .await;
    let q = c.fake.quota("ml");
    assert!(queue_refs(&q).is_empty());
    assert_eq!(used(&q, "requests.cpu"), "3", "charged once");
    let charge = &q["status"]["workloads"]["batch.volcano.sh/Job/ml/big"];
    assert_eq!(
        charge["uid"].as_str().unwrap(),
        format!("queue:{}", b["metadata"]["uid"].as_str().unwrap())
    );
    // Charge first: the first quota version holding the charge is older
    // than the job's release and every pod's.
    let charged_rv = c
        .fake
        .quota_versions("ml", 0)
        .iter()
        .find(|v| {
            v["status"]["workloads"]["batch.volcano.sh/Job/ml/big"]["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("queue:"))
        })
        .map(rv)
        .unwrap();
    let released = stored(&c, "big");
    assert!(
        released["metadata"]["annotations"].get(GATE).is_none(),
        "{released}"
    );
    assert!(charged_rv < rv(&released));
    // Volcano forbids changing task templates: they keep the gate.
    assert!(gated(&released["spec"]["tasks"][0]["template"]));
    for p in &made {
        let pod = pod_of(&c, p);
        assert!(charged_rv < rv(&pod), "{p} ungated after the charge");
        assert!(pod["metadata"]["labels"].get(GATE).is_none(), "{pod}");
    }
    // Exactly: one merge patch of the job, one JSON patch per pod, each
    // reviewed by the pods webhook as bizrq's own write.
    let after: Vec<String> = c.fake.requests()[before..]
        .iter()
        .filter(|r| r.starts_with("PATCH ") && (r.contains("/jobs/") || r.contains("/pods/")))
        .map(|r| r.split('?').next().unwrap().to_string())
        .collect();
    let mut want = vec!["PATCH /apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs/big".to_string()];
    want.extend(
        made.iter()
            .map(|p| format!("PATCH /api/v1/namespaces/ml/pods/{p}")),
    );
    assert_eq!(after, want, "{after:#?}");
    let reviews: Vec<Value> = c
        .fake
        .reviews()
        .into_iter()
        .filter(|r| {
            r["webhook"] == "pods.bizrq.io"
                && r["request"]["userInfo"]["username"] == crate::fakeapi::BIZRQ_USER
        })
        .collect();
    assert_eq!(reviews.len(), 3);
    for r in &reviews {
        assert!(gated(&r["request"]["oldObject"]) && !gated(&r["request"]["object"]));
    }
    // Ungated: the scheduler binds them.
    bind(&c, "big-ps-0").await.unwrap();
    assert_eq!(pod_of(&c, "big-ps-0")["spec"]["nodeName"], "gpu-node-1");

    // A pod Volcano makes later from the gated template (a worker
    // restarted) is released too, while the job is charged.
    c.fake.remove("", "pods", "ml", "big-worker-1");
    // Gated as created; the controller's release may already have come
    // when the test reads it back (a loaded machine).
    let (again, created) = volcano_makes_pod_as_created(&c, "big", 1, 1).await;
    assert!(gated(&created));
    until("the new pod ungated", || !gated(&pod_of(&c, &again))).await;
    bind(&c, &again).await.unwrap();
    assert_eq!(
        used(&c.fake.quota("ml"), "requests.cpu"),
        "3",
        "charged once"
    );
}

/// A release the API server does not store (refused by a webhook, or
/// failed) releases nothing: the pods of a gated kind stay gated until a
/// release of the job itself is stored (here the next reconcile's), never
/// before it, so they never run while their job is not released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_not_stored_leaves_the_pods_gated() {
    let c = volcano_cluster().await;
    create(&c, &vcjob("fits", &[("w", 3)])).await.unwrap();
    create(&c, &vcjob("big", &[("ps", 1), ("worker", 2)]))
        .await
        .unwrap();
    let mut made = Vec::new();
    for (t, i) in [(0, 0), (1, 0), (1, 1)] {
        made.push(volcano_makes_pod(&c, "big", t, i).await);
    }
    c.until("ml", "big's entry named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    // The controller's first release of big answers 500, writing nothing.
    let job = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs/big";
    c.fake.fail_next(job, 1);
    let patched = || {
        c.fake
            .requests()
            .iter()
            .filter(|r| r.starts_with(&format!("PATCH {job}")))
            .count()
    };
    vcjobs(&c)
        .delete("fits", &DeleteParams::default())
        .await
        .unwrap();
    until("the release tried", || patched() >= 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    if patched() == 1 {
        for p in &made {
            assert!(gated(&pod_of(&c, p)), "{p} ungated by a release not stored");
        }
        // The next reconcile releases it again.
        c.touch("ml", 1);
    }
    // Whenever a pod is seen ungated, its job's release is stored (the
    // pods are read first; a job released is never held again here).
    until("big's pods ungated", || {
        let ungated = made.iter().filter(|p| !gated(&pod_of(&c, p))).count();
        if ungated > 0 {
            let job = stored(&c, "big");
            assert!(
                job["metadata"]["annotations"].get(GATE).is_none(),
                "a pod ungated before its job's release was stored: {job}"
            );
        }
        ungated == made.len()
    })
    .await;
    assert_eq!(
        used(&c.fake.quota("ml"), "requests.cpu"),
        "3",
        "charged once"
    );
}

/// A crash between the queue's charge and the release leaves a charged
/// job still annotated and its pods gated: the next reconcile removes the
/// annotation and ungates the pods, and charges nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charged_volcano_job_left_gated_by_a_crash_is_released() {
    let c = volcano_cluster().await;
    let mut j = vcjob("r", &[("w", 2)]);
    j["metadata"]["uid"] = json!("uid-r");
    j["metadata"]["annotations"] = json!({GATE: "true"});
    j["spec"]["tasks"][0]["template"]["metadata"] = json!({"labels": {GATE: "true"}});
    j["spec"]["tasks"][0]["template"]["spec"]["schedulingGates"] = json!([{"name": GATE}]);
    c.fake.put(j);
    for i in 0..2 {
        volcano_makes_pod(&c, "r", 0, i).await;
    }
    // The quota as the crashed admission left it: charged, entry gone.
    let mut q = c.fake.quota("ml");
    q["status"]["workloads"] = json!({"batch.volcano.sh/Job/ml/r": {
        "podSets": [{"name": "w", "count": 2,
            "perPod": {"requests.cpu": "1", "limits.cpu": "1", "cpu": "1", "pods": "1"}}],
        "since": "2026-11-21T10:00:00.000Z", "uid": "queue:uid-r",
        "admitted": "2026-11-21T10:00:00.000Z"}});
    q["status"]["used"] = json!({"requests.cpu": "2"});
    c.fake.put(q);
    until("r's pods ungated", || {
        ["r-w-0", "r-w-1"].iter().all(|p| !gated(&pod_of(&c, p)))
    })
    .await;
    until("r released", || {
        stored(&c, "r")["metadata"]["annotations"]
            .get(GATE)
            .is_none()
    })
    .await;
    let q = c.fake.quota("ml");
    assert_eq!(used(&q, "requests.cpu"), "2", "charged once: {q}");
    assert!(queue_refs(&q).is_empty());
    bind(&c, "r-w-0").await.unwrap();
}
