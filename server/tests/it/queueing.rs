//! Queued admission in cluster mode (docs/queueing.md §4): Jobs created
//! through the emulated API server, which calls the shipped mutating
//! webhook before the validating one and applies its JSONPatch, as
//! kube-apiserver does; the controller admits from the queue when room
//! frees (charge first, then unsuspend).

use crate::cluster::{used, Cluster};
use crate::support::{job, queue_refs, until_event_where};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

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

/// Wait until the server's own list (its watch's copy, where loans and
/// rounds read the siblings) shows `quota` as `f` wants.
async fn until_listed(c: &Cluster, quota: &str, f: impl Fn(&Value) -> bool) {
    for _ in 0..800 {
        let (_, all) = c.server.api(Method::GET, "/api/v1/quotas", None).await;
        let items = all.get("items").unwrap_or(&all);
        if items
            .as_array()
            .into_iter()
            .flatten()
            .any(|q| q["metadata"]["name"] == quota && f(q))
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{quota} never listed as wanted");
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
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    assert!(!suspended(&c, "a"));
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;

    // Does not fit: created suspended, queued at position 1, not charged.
    create(&c, &job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"), "the mutating webhook suspends it");
    // At once without marks; after the round's fold with them.
    let q = c
        .until("ml", "b queued", |q| queue_refs(q) == ["batch/Job/ml/b"])
        .await;
    let e = &q["status"]["queue"][0];
    assert_eq!(e["submittedBy"], "alice");
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
    let err = create(&c, &job("huge").cpu("9").obj()).await.unwrap_err();
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
    // Admitted by the controller, charged for the user who submitted it:
    // the budget ledger's `user` is theirs, not bizrq's service account.
    assert_eq!(q["status"]["users"]["batch/Job/ml/b"], "alice", "{q}");
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
    create(&c, &job("c").cpu("3").obj()).await.unwrap();
    // At once without marks; after the round's fold with them.
    let since = c
        .until("ml", "c queued", |q| queue_refs(q) == ["batch/Job/ml/c"])
        .await["status"]["queue"][0]["since"]
        .clone();
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

/// A Job deleted while the controller's release of it is under review:
/// the DELETE's review releases the charge the round wrote, then the
/// release's own review (delayed, as a loaded webhook delays it) charges
/// the Job again, and its write finds the Job gone (404). The controller
/// takes that charge back at once (`Service::release_charge_of`): the
/// quota does not hold a deleted Job's room until the reservation's TTL
/// (never, on this frozen clock), and the charge bizrq's own write made
/// names no submitter of bizrq's service account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_deleted_while_its_release_is_reviewed_leaves_no_charge() {
    let c = queueing_cluster().await;
    create(&c, &job("run").cpu("4").obj()).await.unwrap();
    c.until("ml", "run charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create(&c, &job("w").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "w"));
    c.until("ml", "w queued and named", |q| {
        queue_refs(q) == ["batch/Job/ml/w"]
            && q["status"]["queue"][0]["uid"]
                .as_str()
                .is_some_and(|u| !u.is_empty())
    })
    .await;
    // The release's PATCH: read, then held 1.5 s before its reviews.
    c.fake.pause_next_validation(
        "/apis/batch/v1/namespaces/ml/jobs/w",
        std::time::Duration::from_millis(1500),
    );
    jobs(&c)
        .delete("run", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "w admitted by the round", |q| {
        q["status"]["workloads"]["batch/Job/ml/w"]["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("queue:"))
    })
    .await;
    c.until_requested("the release sent", |r| {
        r.starts_with("PATCH /apis/batch/v1/namespaces/ml/jobs/w")
    })
    .await;
    // Deleted while the release waits for its review.
    jobs(&c)
        .delete("w", &DeleteParams::default())
        .await
        .unwrap();
    assert!(c.fake.get("batch", "jobs", "ml", "w").is_none());
    // The release's review comes after the DELETE's: it charges w again.
    let reviewed = || {
        c.fake.reviews().iter().any(|r| {
            r["request"]["name"] == "w"
                && r["request"]["operation"] == "UPDATE"
                && r["webhook"] == "workloads.bizrq.io"
        })
    };
    for _ in 0..100 {
        if reviewed() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(reviewed(), "the release's review never came");
    let q = c
        .until("ml", "no charge left for the deleted Job", |q| {
            used(q, "requests.cpu") == "0"
                && q["status"]["workloads"].get("batch/Job/ml/w").is_none()
        })
        .await;
    assert!(q["status"]["users"].get("batch/Job/ml/w").is_none(), "{q}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_jobs_are_admitted_by_priority_then_first_come_never_over() {
    let c = queueing_cluster().await;
    create_class(&c, "batch-low", 1, false).await;
    create_class(&c, "urgent", 100, false).await;
    create(&c, &job("run").cpu("4").obj()).await.unwrap();
    c.until("ml", "run charged", |q| used(q, "requests.cpu") == "4")
        .await;
    // Created last and named after the others, so neither its arrival
    // nor its name puts it first: only its class does.
    let low = |n: &str| with_class(job(n).cpu("2").obj(), "batch-low");
    create(&c, &low("low-1")).await.unwrap();
    create(&c, &low("low-2")).await.unwrap();
    create(&c, &with_class(job("z-high").cpu("3").obj(), "urgent"))
        .await
        .unwrap();
    for n in ["low-1", "low-2", "z-high"] {
        assert!(suspended(&c, n), "{n}");
    }
    c.until("ml", "all named, in order", |q| {
        queue_refs(q)
            == [
                "batch/Job/ml/z-high",
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
    // 4 free: z-high (3) first; low-1 (2) does not fit beside it and, under
    // strict FIFO, blocks low-2.
    jobs(&c)
        .delete("run", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "z-high admitted, positions restated", |q| {
            // The admission's write removes the entry; the positions are
            // restated by the round's next write.
            queue_refs(q) == ["batch/Job/ml/low-1", "batch/Job/ml/low-2"]
                && q["status"]["queue"][0]["position"] == 1
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "3", "never over 4");
    assert_eq!(q["status"]["queue"][0]["position"], 1);
    // z-high ends: both lows fit (2 + 2), admitted in one round, in order.
    jobs(&c)
        .delete("z-high", &DeleteParams::default())
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
    let mut j = job("r").cpu("2").obj();
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

/// A round of the scheduler that admitted several entries in its one
/// write and stopped before releasing them leaves several charged,
/// suspended Jobs: the next round releases every one, charging nothing
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_cut_short_after_its_write_is_released_whole() {
    let c = queueing_cluster().await;
    let mut workloads = serde_json::Map::new();
    for n in ["r1", "r2"] {
        let mut j = job(n).cpu("2").obj();
        j["metadata"]["uid"] = json!(format!("uid-{n}"));
        j["spec"]["suspend"] = json!(true);
        c.fake.put(j);
        workloads.insert(
            format!("batch/Job/ml/{n}"),
            json!({"podSets": [{"name": "main", "count": 1,
                "perPod": {"requests.cpu": "2", "limits.cpu": "2", "cpu": "2", "pods": "1"}}],
                "since": "2026-11-21T10:00:00.000Z", "uid": format!("queue:uid-{n}"),
                "admitted": "2026-11-21T10:00:00.000Z"}),
        );
    }
    let mut q = c.fake.quota("ml");
    q["status"]["workloads"] = Value::Object(workloads);
    q["status"]["used"] = json!({"requests.cpu": "4"});
    c.fake.put(q);
    for _ in 0..200 {
        if !suspended(&c, "r1") && !suspended(&c, "r2") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        !suspended(&c, "r1") && !suspended(&c, "r2"),
        "both released"
    );
    let q = c.fake.quota("ml");
    assert_eq!(used(&q, "requests.cpu"), "4", "each charged once: {q}");
    assert!(queue_refs(&q).is_empty());
}

/// A release names the object it was charged for (`metadata.uid` as a
/// precondition, docs/queueing.md §12 constraint 5): a charge left by a
/// crash for an object since deleted never releases the object created
/// again under its name, held and waiting its own turn. The API server
/// refuses that patch (409); the one with the right uid is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_never_unholds_an_object_created_again_under_the_name() {
    let c = queueing_cluster().await;
    let mut workloads = serde_json::Map::new();
    for (n, stored, charged) in [
        ("old", "uid-new", "uid-old"),
        ("same", "uid-same", "uid-same"),
    ] {
        let mut j = job(n).cpu("2").obj();
        j["metadata"]["uid"] = json!(stored);
        j["spec"]["suspend"] = json!(true);
        c.fake.put(j);
        workloads.insert(
            format!("batch/Job/ml/{n}"),
            json!({"podSets": [{"name": "main", "count": 1,
                "perPod": {"requests.cpu": "2", "limits.cpu": "2", "cpu": "2", "pods": "1"}}],
                "since": "2026-11-21T10:00:00.000Z", "uid": format!("queue:{charged}"),
                "admitted": "2026-11-21T10:00:00.000Z"}),
        );
    }
    let mut q = c.fake.quota("ml");
    q["status"]["workloads"] = Value::Object(workloads);
    q["status"]["used"] = json!({"requests.cpu": "4"});
    c.fake.put(q);
    let patched = |c: &Cluster| {
        c.fake
            .requests()
            .iter()
            .any(|r| r.starts_with("PATCH /apis/batch/v1/namespaces/ml/jobs/old"))
    };
    for _ in 0..200 {
        if !suspended(&c, "same") && patched(&c) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!suspended(&c, "same"), "the charged object is released");
    assert!(patched(&c), "the other's release was tried");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        suspended(&c, "old"),
        "the object created again under the name stays held"
    );
}

/// The scheduler writes a round whole: the charges of every Job it admits
/// and their removal from the queue in one compare-and-swap. Every version
/// of the quota the watch shows has the round's Jobs all waiting or all
/// charged (never some of each, none in both places or in neither), and
/// never more than its hard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_is_written_whole_in_one_write() {
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};
    let c = queueing_cluster().await;
    create(&c, &job("run").cpu("4").obj()).await.unwrap();
    c.until("ml", "run charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let names: Vec<String> = (0..4).map(|i| format!("w-{i}")).collect();
    for n in &names {
        create(&c, &job(n).cpu("1").obj()).await.unwrap();
    }
    c.until("ml", "all four queued and named", |q| {
        queue_refs(q).len() == 4
            && q["status"]["queue"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["uid"].as_str().is_some_and(|u| !u.is_empty()))
    })
    .await;
    let versions = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let api: Api<DynamicObject> = Api::all_with(
        c.kubectl("recorder"),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("bizrq.io", "v1", "BizGroupResourceQuota"),
            "bizgroupresourcequotas",
        ),
    );
    let rec = versions.clone();
    let watch = tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(q) | watcher::Event::InitApply(q)) = ev {
                if q.metadata.name.as_deref() == Some("ml") {
                    rec.lock().unwrap().push(serde_json::to_value(&q).unwrap());
                }
            }
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    jobs(&c)
        .delete("run", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "all four admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "4"
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    watch.abort();
    let versions = versions.lock().unwrap().clone();
    let mut whole = 0;
    for q in &versions {
        let charged = names
            .iter()
            .filter(|n| {
                // A held Job is recorded at 0 pods: charged means pods.
                q["status"]["workloads"][format!("batch/Job/ml/{n}")]["podSets"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|p| p["count"].as_i64() > Some(0)))
            })
            .count();
        // With queue marks the status lists the top of the queue and its
        // summary counts the whole (docs/queueing.md §12).
        let queued = q["status"]["queueSummary"]["total"]
            .as_u64()
            .map_or(queue_refs(q).len(), |t| t as usize);
        assert!(
            charged == 0 || charged == 4,
            "a round written in parts: {q}"
        );
        assert_eq!(charged + queued, 4, "lost or in both places: {q}");
        if charged == 4 {
            whole += 1;
        }
    }
    assert!(whole > 0, "the watch saw the round's write: {versions:?}");
    for n in &names {
        assert!(!suspended(&c, n), "{n} released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_where_a_job_would_queue() {
    let c = queueing_cluster().await;
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;
    let (s, v) = c
        .server
        .api(Method::POST, "/api/v1/check", Some(job("b").cpu("2").obj()))
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
        .api(
            Method::POST,
            "/api/v1/check",
            Some(job("small").cpu("1").obj()),
        )
        .await;
    assert_eq!(v["allowed"], true, "{v}");
}

fn priority_classes(c: &Cluster) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.k8s.io", "v1", "PriorityClass"),
        "priorityclasses",
    );
    Api::all_with(c.kubectl("admin"), &ar)
}

async fn create_class(c: &Cluster, name: &str, value: i64, global_default: bool) {
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": value, "globalDefault": global_default}))
    .unwrap();
    priority_classes(c)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

fn with_class(mut j: Value, class: &str) -> Value {
    j["spec"]["template"]["spec"]["priorityClassName"] = json!(class);
    j
}

fn entry<'a>(q: &'a Value, name: &str) -> &'a Value {
    q["status"]["queue"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|e| e["workloadRef"] == format!("batch/Job/ml/{name}"))
        })
        .unwrap_or(&Value::Null)
}

/// Priority is the value of the PriorityClass the pod template names, as
/// the API server's Priority admission gives the pods: a `priority` typed
/// into the template jumps nothing, a missing class is judged at 0 and
/// said, and the global default applies to a template that names none —
/// also when it is created after the job queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_comes_from_the_priority_class_not_from_the_template() {
    let c = queueing_cluster().await;
    c.until_requested("PriorityClass watch", |r| {
        r.starts_with("GET /apis/scheduling.k8s.io/v1/priorityclasses?") && r.contains("watch=true")
    })
    .await;
    // The API server's own classes are served like any other.
    let listed = priority_classes(&c)
        .list(&Default::default())
        .await
        .unwrap();
    let names: Vec<String> = listed
        .items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["system-cluster-critical", "system-node-critical"]);
    create_class(&c, "high", 1000, false).await;
    create_class(&c, "low", 10, false).await;

    create(&c, &job("run").cpu("4").obj()).await.unwrap();
    c.until("ml", "run charged", |q| used(q, "requests.cpu") == "4")
        .await;
    // A number in the template, the highest a pod could have: ignored.
    create(&c, &job("forged").cpu("1").priority(2_000_000_000).obj())
        .await
        .unwrap();
    create(&c, &with_class(job("low").cpu("1").obj(), "low"))
        .await
        .unwrap();
    create(&c, &with_class(job("ghost").cpu("1").obj(), "nope"))
        .await
        .unwrap();
    create(&c, &with_class(job("high").cpu("1").obj(), "high"))
        .await
        .unwrap();
    let q = c
        .until("ml", "ordered by class", |q| {
            queue_refs(q)
                == [
                    "batch/Job/ml/high",
                    "batch/Job/ml/low",
                    "batch/Job/ml/forged",
                    "batch/Job/ml/ghost",
                ]
        })
        .await;
    assert_eq!(entry(&q, "high")["priority"], 1000);
    assert_eq!(entry(&q, "low")["priority"], 10);
    assert_eq!(entry(&q, "forged")["priority"], 0, "{q}");
    assert_eq!(entry(&q, "ghost")["priority"], 0);
    let reason = entry(&q, "ghost")["reason"].as_str().unwrap();
    assert!(
        reason.ends_with(
            "PriorityClass 'nope' does not exist: judged at priority 0, and the API server \
             refuses its pods until it is created"
        ),
        "{reason}"
    );
    assert_eq!(entry(&q, "high")["priorityClasses"], json!(["high"]));

    // A global default created later lifts the job that names no class
    // above "low" at the next round (a change of a queued job triggers one).
    create_class(&c, "batch-default", 50, true).await;
    c.fake.put({
        let mut j = c.fake.get("batch", "jobs", "ml", "ghost").unwrap();
        j["metadata"]["labels"]["touched"] = json!("yes");
        j
    });
    let q = c
        .until("ml", "the default applies", |q| {
            queue_refs(q)
                == [
                    "batch/Job/ml/high",
                    "batch/Job/ml/forged",
                    "batch/Job/ml/low",
                    "batch/Job/ml/ghost",
                ]
        })
        .await;
    assert_eq!(entry(&q, "forged")["priority"], 50);
    assert_eq!(
        entry(&q, "ghost")["priority"],
        0,
        "a missing class is not the default"
    );
}

/// A job that fits the quota but not what is left of its card-hour
/// budget waits for the budget as it would for quota, and its reason says
/// which (status.queue and the Queued Event); a top-up admits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_waits_for_card_hours_and_a_top_up_admits_it() {
    let c = Cluster::start().await;
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "queueing": "Queue",
                    "hard": {"requests.cpu": "8", "cash/requests.cpu": "10"}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    // 4 cores for at most 3 h: 12 core-hours to reserve, 10 left.
    let mut big = job("big").cpu("4").obj();
    big["spec"]["activeDeadlineSeconds"] = json!(3 * 3600);
    create(&c, &big).await.unwrap();
    assert!(
        suspended(&c, "big"),
        "fits the quota, not the budget: queued"
    );
    let want = "waits for core-hours of cash/requests.cpu: needs 12, 10 left";
    // At once without marks; after the round's fold with them.
    let q = c
        .until("ml", "big queued", |q| {
            queue_refs(q) == ["batch/Job/ml/big"]
        })
        .await;
    assert_eq!(q["status"]["queue"][0]["waiting"], "Budget", "{q}");
    assert_eq!(q["status"]["queue"][0]["reason"], want);
    assert_eq!(used(&q, "requests.cpu"), "0");
    let e = until_event_where(&c, "Queued on big", |e| {
        e["reason"] == "Queued" && e["regarding"]["name"] == "big"
    })
    .await;
    assert!(e["note"].as_str().unwrap().contains(want), "{e}");

    // The controller's rounds agree: still waiting, for the same reason.
    c.until("ml", "named by the controller", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    assert_eq!(c.fake.quota("ml")["status"]["queue"][0]["reason"], want);

    // A top-up to 20 core-hours: the next round admits it.
    let patch = json!({"spec": {"hard": {"cash/requests.cpu": "20"}}});
    crate::admission::quotas(c.kubectl("admin"))
        .patch("ml", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let q = c
        .until("ml", "big admitted", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "4"
        })
        .await;
    assert!(q["status"]["workloads"]["batch/Job/ml/big"]["uid"]
        .as_str()
        .unwrap()
        .starts_with("queue:"));
}

async fn create_in(c: &Cluster, ns: &str, obj: &Value) -> Result<(), String> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    let api: Api<DynamicObject> = Api::namespaced_with(c.kubectl("alice"), ns, &ar);
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    api.create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A quota that may borrow (`max`) admits from its queue on a loan from
/// its parent once a sibling's room is idle: the loan is granted in the
/// parent's status and the charge made within hard + loan, as the
/// webhook's borrowing path does; never past max nor past what is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrower_admits_from_its_queue_on_a_loan_when_a_sibling_goes_idle() {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "8"}})),
        (
            "a",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "7"}, "queueing": "Queue"}),
        ),
        ("b", "org", json!({"hard": {"requests.cpu": "4"}})),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_in(&c, "ml", &job("a1").quota("a").cpu("4").obj())
        .await
        .unwrap();
    create_in(&c, "web", &job("b1").ns("web").quota("b").cpu("4").obj())
        .await
        .unwrap();
    c.until("b", "b1 charged", |q| used(q, "requests.cpu") == "4")
        .await;
    // The lender judges a loan on its watch's copy of the siblings: until
    // that copy shows b1's charge, b looks idle and a loan is right (it
    // would be reclaimed once b's use shows, §5). Waited for here, as a
    // cluster's watch is seconds behind at most.
    until_listed(&c, "b", |q| used(q, "requests.cpu") == "4").await;
    // a is full and b uses all of its share: nothing idle to lend.
    create_in(&c, "ml", &job("a2").quota("a").cpu("2").obj())
        .await
        .unwrap();
    create_in(&c, "ml", &job("a3").quota("a").cpu("2").obj())
        .await
        .unwrap();
    assert!(suspended(&c, "a2") && suspended(&c, "a3"));
    let q = c
        .until("a", "both named", |q| {
            queue_refs(q).len() == 2
                && q["status"]["queue"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|e| e["uid"].as_str().is_some_and(|u| !u.is_empty()))
        })
        .await;
    assert_eq!(
        q["status"]["queue"][0]["reason"],
        "waits for 2 × requests.cpu: 0 free, 2 needed"
    );
    // b1 ends: 4 idle in org, but a may borrow only up to max 7: a2 (2)
    // rides a loan, a3 (2 more: 8 > 7) keeps waiting.
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::<DynamicObject>::namespaced_with(c.kubectl("alice"), "web", &ar)
        .delete("b1", &DeleteParams::default())
        .await
        .unwrap();
    c.until("a", "a2 admitted on a loan", |q| {
        queue_refs(q) == ["batch/Job/ml/a3"] && used(q, "requests.cpu") == "6"
    })
    .await;
    // The round's restated reason: nothing free within hard, 1 more to
    // borrow up to max (said apart, as the quota page's columns).
    c.until("a", "a3's reason restated", |q| {
        q["status"]["queue"][0]["reason"]
            == "waits for 1 × requests.cpu: 0 free now, 1 more to borrow, 2 needed"
    })
    .await;
    let org = c.fake.quota("org");
    assert_eq!(
        org["status"]["loans"]["a"]["amount"]["requests.cpu"], "2",
        "the loan is in the parent's status: {org}"
    );
    for _ in 0..100 {
        if !suspended(&c, "a2") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!suspended(&c, "a2"), "admitted: unsuspended");
    assert!(suspended(&c, "a3"));
}

/// Capacity comes back at once (docs/queueing.md §9): a Job that ran on
/// a loan and finishes (Complete, not deleted) releases its charge when
/// it finishes, and its loan goes back to the parent right after, with
/// the clock never moving (no reservation window, no loan age, no
/// resync): the parent lends nothing to the idle child and a sibling's
/// Job that needs the same room is admitted on a loan at once, never
/// queued. A Job that fails gives its room back alike, and a deleted one
/// returns its loan in the DELETE's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_gives_its_room_and_its_loan_back_at_once() {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "8"}})),
        (
            "a",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "8"}, "queueing": "Queue"}),
        ),
        (
            "b",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "8"}, "queueing": "Queue"}),
        ),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let loan =
        |who: &str| c.fake.quota("org")["status"]["loans"][who]["amount"]["requests.cpu"].clone();
    create_in(&c, "ml", &job("a1").quota("a").cpu("8").obj())
        .await
        .unwrap();
    assert!(!suspended(&c, "a1"), "admitted on a loan of b's idle room");
    assert_eq!(loan("a"), "4");

    // a1 completes: its charge goes, then its loan.
    finish(&c, "a", "ml", "a1", "Complete");
    c.until("a", "a1's charge released on finish", |q| {
        used(q, "requests.cpu") == "0"
    })
    .await;
    c.until("org", "a's loan returned", |q| {
        q["status"]["loans"].get("a").is_none()
    })
    .await;
    let org = c.fake.quota("org");
    assert!(
        org["status"]["lent"]
            .as_object()
            .is_none_or(|l| l.values().all(|v| v == "0")),
        "nothing lent to an idle child: {org}"
    );

    // b's Job of 8 needs the same room on a loan: admitted at once.
    create_in(&c, "web", &job("b1").ns("web").quota("b").cpu("8").obj())
        .await
        .unwrap();
    let b1 = c.fake.get("batch", "jobs", "web", "b1").unwrap();
    assert_ne!(b1["spec"]["suspend"], true, "not queued: {b1}");
    let q = c
        .until("b", "b1 charged", |q| used(q, "requests.cpu") == "8")
        .await;
    assert!(queue_refs(&q).is_empty(), "{q}");
    assert_eq!(loan("b"), "4");

    // A failed Job gives its room back as well; a later edit of it
    // charges nothing.
    finish(&c, "b", "web", "b1", "Failed");
    c.until("b", "b1's charge released on failure", |q| {
        used(q, "requests.cpu") == "0"
    })
    .await;
    c.until("org", "b's loan returned", |q| {
        q["status"]["loans"].get("b").is_none()
    })
    .await;

    // Deleted while running on a loan: the DELETE's release returns it.
    create_in(&c, "ml", &job("a2").quota("a").cpu("6").obj())
        .await
        .unwrap();
    c.until("a", "a2 charged", |q| used(q, "requests.cpu") == "6")
        .await;
    assert_eq!(loan("a"), "2");
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::<DynamicObject>::namespaced_with(c.kubectl("alice"), "ml", &ar)
        .delete("a2", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        c.fake.quota("org")["status"]["loans"].get("a").is_none(),
        "returned by the time the DELETE is answered: {}",
        c.fake.quota("org")
    );
}

/// The scheduler's round on a short loan (`Service::admit_round`, the
/// pure rule `quota::queue::batch`'s
/// `a_short_loan_admits_within_hard_and_the_loan_still_backed_only`): the
/// parent refuses the round's loan, and the loan the child still holds
/// from a grant whose charge never came (a crash between the two writes)
/// is no longer backed, since the lender took part of its guarantee back.
/// The round asks for nothing more, which cuts that loan to what is
/// backed, and admits in order only what fits within hard + the cut loan,
/// never against the stale one: the parent is never lent past its hard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_on_a_short_loan_admits_only_what_the_backed_loan_covers() {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "10"}})),
        (
            "kid",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "12"}, "queueing": "Queue"}),
        ),
        ("sib", "org", json!({"hard": {"requests.cpu": "6"}})),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    // The parent is full: sib runs its 6, kid its 4.
    for (ns, q, name, cpu) in [
        ("web", "sib", "s0", "2"),
        ("web", "sib", "s1", "4"),
        ("ml", "kid", "k0", "4"),
    ] {
        create_in(&c, ns, &job(name).ns(ns).quota(q).cpu(cpu).obj())
            .await
            .unwrap();
    }
    c.until("sib", "sib full", |q| used(q, "requests.cpu") == "6")
        .await;
    c.until("kid", "kid at its hard", |q| used(q, "requests.cpu") == "4")
        .await;
    // Three Jobs of 1 wait for room.
    for name in ["j0", "j1", "j2"] {
        create_in(&c, "ml", &job(name).quota("kid").cpu("1").obj())
            .await
            .unwrap();
        assert!(
            c.fake.get("batch", "jobs", "ml", name).unwrap()["spec"]["suspend"] == true,
            "{name} queued"
        );
    }
    // A grant of 6 whose charge never came, as a crash between the two
    // writes leaves it (young, so the parent's repair keeps it).
    let mut org = c.fake.quota("org");
    let at = quota::time::format_rfc3339(crate::cluster::T0);
    org["status"]["loans"] =
        json!({"kid": {"amount": {"requests.cpu": "6"}, "since": at, "raised": at}});
    org["status"]["lent"] = json!({"requests.cpu": "6"});
    c.fake.put(org);
    let start = c.fake.quota("org")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    // s0 ends: 2 of sib's guarantee idle. The round wants 3 on loan (kid
    // at 4 + 3), which would need 11 of 10: refused. The stale loan of 6
    // would admit all three; cut to the 2 still backed, two go.
    finish(&c, "sib", "web", "s0", "Complete");
    let kid = c
        .until("kid", "j0 and j1 admitted", |q| {
            used(q, "requests.cpu") == "6"
        })
        .await;
    assert_eq!(queue_refs(&kid), vec!["batch/Job/ml/j2".to_string()]);
    for name in ["j0", "j1"] {
        let mut n = 0;
        while suspended(&c, name) {
            n += 1;
            assert!(n < 400, "{name} never released");
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }
    assert!(suspended(&c, "j2"), "j2 waits");
    assert_eq!(
        c.fake.quota("org")["status"]["loans"]["kid"]["amount"]["requests.cpu"],
        "2"
    );
    // Never past the parent's hard: no version of kid charged beyond
    // hard + what the parent could back (sib 4 + kid 4 + 2 = 10).
    for q in c.fake.quota_versions("kid", start) {
        assert!(
            used(&q, "requests.cpu").parse::<i64>().unwrap_or(0) <= 6,
            "{q}"
        );
    }
}

/// Mark Job `ns/name`, charged to `quota`, finished with `condition`, as
/// the Job controller does, at the time its charge was made.
fn finish(c: &Cluster, quota: &str, ns: &str, name: &str, condition: &str) {
    let since = c.fake.quota(quota)["status"]["workloads"][format!("batch/Job/{ns}/{name}")]
        ["since"]
        .clone();
    assert!(since.is_string(), "{name} charged to {quota}");
    let mut done = c.fake.get("batch", "jobs", ns, name).unwrap();
    done["status"] = json!({"conditions": [
        {"type": condition, "status": "True", "lastTransitionTime": since}]});
    c.fake.put(done);
}

/// A finished workload frees its room only once none of its pods runs
/// (docs/queueing.md §9): a Job that reads Complete while one of its
/// pods is still Running (a pod in a long grace period, a Kubeflow job's
/// `cleanPodPolicy: None`, a status forged by whoever may write it) keeps
/// its charge and the loan it rides on; once that pod ends, both go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_keeps_its_charge_while_a_pod_of_it_still_runs() {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "8"}})),
        (
            "a",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "8"}, "queueing": "Queue"}),
        ),
        ("b", "org", json!({"hard": {"requests.cpu": "4"}})),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    c.until_requested("pod watch", |r| {
        r.starts_with("GET /api/v1/pods?") && r.contains("watch=true")
    })
    .await;
    let loan =
        |who: &str| c.fake.quota("org")["status"]["loans"][who]["amount"]["requests.cpu"].clone();
    // Its pod, as the Job controller makes it.
    let running = crate::cluster::pod("ml", "a1-0", "Job", "a1", 0, "2026-11-21T10:00:00Z");
    c.fake.put(running.clone());
    create_in(&c, "ml", &job("a1").quota("a").cpu("8").obj())
        .await
        .unwrap();
    c.until("a", "a1 charged", |q| used(q, "requests.cpu") == "8")
        .await;
    assert_eq!(loan("a"), "4");

    // a1 reads Complete, its pod still runs: nothing is released.
    finish(&c, "a", "ml", "a1", "Complete");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let q = c.fake.quota("a");
    assert_eq!(used(&q, "requests.cpu"), "8", "charge kept: {q}");
    assert_eq!(loan("a"), "4", "loan kept");

    // The pod ends: the charge goes, then the loan.
    let mut ended = running;
    ended["status"]["phase"] = json!("Succeeded");
    ended["status"]["containerStatuses"] = json!([{"name": "c",
        "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-21T10:00:00Z"}}}]);
    c.fake.put(ended);
    c.until("a", "a1's charge released once its pod ended", |q| {
        used(q, "requests.cpu") == "0"
    })
    .await;
    c.until("org", "a's loan returned", |q| {
        q["status"]["loans"].get("a").is_none()
    })
    .await;
}

async fn overdue_alerts(c: &Cluster) -> Vec<Value> {
    let (s, v) = c
        .server
        .api(
            Method::GET,
            "/api/v1/alerts?quota=ml&kind=queue_overdue",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["items"].as_array().cloned().unwrap_or_default()
}

/// `queueing.alertAfterSeconds`: a workload queued longer raises an alert
/// to its quota's owners through the alert engine (kind queue_overdue,
/// one per entry), resolved when it leaves the queue. The threshold is
/// validated with the spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_queued_past_the_alert_threshold_alerts_until_it_is_admitted() {
    let c = Cluster::start().await;
    let spec = |after: u64| {
        json!({"metadata": {"name": "ml"},
            "spec": {"parent": "", "hard": {"requests.cpu": "4"},
                "queueing": {"mode": "Queue", "alertAfterSeconds": after}}})
    };
    let (s, v) = c
        .server
        .api(Method::POST, "/api/v1/quotas", Some(spec(0)))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v.to_string().contains("alertAfterSeconds is 0"), "{v}");
    let (s, v) = c
        .server
        .api(Method::POST, "/api/v1/quotas", Some(spec(3600)))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    create(&c, &job("b").cpu("2").obj()).await.unwrap();
    c.until("ml", "b named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    assert!(
        overdue_alerts(&c).await.is_empty(),
        "not waited an hour yet"
    );
    c.until_metric("bizrq_admission_queue_length{quota=\"ml\",waiting=\"Quota\"} 1")
        .await;
    c.until_metric("bizrq_admission_queue_length{quota=\"_all\",waiting=\"Quota\"} 1")
        .await;

    // Two hours later (a change of b gives the queue a round; in a
    // cluster the controller's own wake-up at the threshold does).
    c.set_clock(crate::cluster::T0 + 2 * crate::cluster::HOUR);
    let mut b = c.fake.get("batch", "jobs", "ml", "b").unwrap();
    b["metadata"]["labels"]["touched"] = json!("1");
    c.fake.put(b);
    let mut open = Vec::new();
    for _ in 0..400 {
        open = overdue_alerts(&c).await;
        if !open.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(open.len(), 1, "{open:?}");
    let a = &open[0];
    assert_eq!(a["key"], "batch/Job/ml/b");
    assert_eq!(a["level"], "warning");
    assert_eq!(a["state"], "open");
    assert_eq!(
        a["message"],
        "batch/Job/ml/b has waited 2 hours in the queue of ml, longer than its 1 hour: \
         waits for 1 × requests.cpu: 1 free, 2 needed"
    );

    // a ends, b is admitted: its alert resolves.
    jobs(&c)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| queue_refs(q).is_empty())
        .await;
    // Its wait, joined at T0 and admitted 2 h later, is in the histogram.
    c.until_metric("bizrq_admission_queue_wait_seconds_sum{quota=\"ml\"} 7200")
        .await;
    c.until_metric("bizrq_admission_queue_wait_seconds_count{quota=\"ml\"} 1")
        .await;
    c.until_metric("bizrq_admission_queue_length{quota=\"ml\",waiting=\"Quota\"} 0")
        .await;
    let mut state = Value::Null;
    for _ in 0..400 {
        let all = overdue_alerts(&c).await;
        state = all[0]["state"].clone();
        if state == "resolved" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, "resolved");
    assert_eq!(overdue_alerts(&c).await.len(), 1, "fired once");
}

fn stored_entry(name: &str, uid: &str) -> Value {
    json!({"workloadRef": format!("batch/Job/ml/{name}"), "uid": uid, "priority": 0,
        "since": "2026-11-21T10:00:00.000Z",
        "podSets": [{"name": "main", "count": 1, "perPod": {"requests.cpu": "1"}}],
        "position": 9, "waiting": "Quota", "reason": "waits"})
}

/// Entries whose object is not there leave the queue: one whose object
/// the controller never saw, 2 minutes after it queued (its create was
/// refused after the mutating webhook queued it); one whose object is
/// gone; one queued under an earlier object of the name (said in an
/// Event on the object there now). A live entry stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_entries_without_their_object_are_pruned() {
    let c = queueing_cluster().await;
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    create(&c, &job("b").cpu("2").obj()).await.unwrap();
    c.until("ml", "b named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    // c exists now as a new object; its entry names an earlier one.
    let mut cj = job("c").cpu("1").obj();
    cj["metadata"]["uid"] = json!("uid-c-new");
    cj["spec"]["suspend"] = json!(true);
    c.fake.put(cj);
    let mut q = c.fake.quota("ml");
    let queue = q["status"]["queue"].as_array_mut().unwrap();
    queue.push(stored_entry("ghost", ""));
    queue.push(stored_entry("lost", "uid-lost"));
    queue.push(stored_entry("c", "uid-c-old"));
    c.fake.put(q);
    let q = c
        .until("ml", "gone and replaced pruned", |q| {
            queue_refs(q) == ["batch/Job/ml/b", "batch/Job/ml/ghost"]
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "3");
    until_event_where(&c, "QueueEntryRemoved on c", |e| {
        e["reason"] == "QueueEntryRemoved" && e["regarding"]["name"] == "c"
    })
    .await;

    // Within its grace the never-seen entry stays; past it, it goes.
    c.set_clock(crate::cluster::T0 + 119_000);
    let mut b = c.fake.get("batch", "jobs", "ml", "b").unwrap();
    b["metadata"]["labels"]["touched"] = json!("1");
    c.fake.put(b.clone());
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        queue_refs(&c.fake.quota("ml")),
        ["batch/Job/ml/b", "batch/Job/ml/ghost"]
    );
    c.set_clock(crate::cluster::T0 + 121_000);
    b["metadata"]["labels"]["touched"] = json!("2");
    c.fake.put(b);
    c.until("ml", "ghost pruned", |q| {
        queue_refs(q) == ["batch/Job/ml/b"]
    })
    .await;
}

/// The queue on the quota's page (position, workload, priority, needs,
/// reason, queued since) and as JSON at GET /api/v1/quotas/{name}/queue,
/// both seen by whoever may see the quota, and by no one else (404, as
/// GET /api/v1/quotas/{name}).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_shown_on_the_quota_page_and_as_json_to_who_may_see_it() {
    use crate::common::{bind, create_user, Browser};
    let c = queueing_cluster().await;
    create_class(&c, "urgent", 1000, false).await;
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    create(&c, &with_class(job("b").cpu("2").obj(), "urgent"))
        .await
        .unwrap();
    c.until("ml", "b named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    c.set_clock(crate::cluster::T0 + 3 * crate::cluster::HOUR);

    let admin = Browser::admin(&c.server).await;
    let page = admin.get("/quotas/ml").await;
    assert_eq!(page.status, StatusCode::OK);
    let html = &page.body;
    let table = &html[html.find(r#"<table class="queue">"#).expect(html)..];
    let table = &table[..table.find("</table>").unwrap()];
    for want in [
        "Queue (1)",
        "batch/Job/ml/b",
        "1,000 (urgent)",
        "2 CPU cores",
        "waits for 1 × CPU cores: 1 free, 2 needed",
        "3 hours ago",
        "2026-11-21 10:00 UTC",
    ] {
        assert!(
            table.contains(want) || html.contains(want),
            "{want} not on the page: {table}"
        );
    }
    assert!(
        html.contains("nothing passes a workload that waits"),
        "the policy in words"
    );

    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/queue", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["length"], 1);
    assert_eq!(v["policy"]["mode"], "Queue");
    let e = &v["items"][0];
    assert_eq!(e["position"], 1);
    assert_eq!(e["workloadRef"], "batch/Job/ml/b");
    assert_eq!(e["priority"], 1000);
    assert_eq!(e["priorityClasses"], json!(["urgent"]));
    assert_eq!(e["since"], "2026-11-21T10:00:00.000Z");
    assert_eq!(e["waitedSeconds"], 3 * 3600);
    assert_eq!(e["waiting"], "Quota");
    assert_eq!(e["needs"], json!({"requests.cpu": "2"}));
    assert_eq!(e["reason"], "waits for 1 × requests.cpu: 1 free, 2 needed");

    // Visibility: as the quota itself. A member sees it; a user without a
    // role on it gets the same 404 as for the quota.
    create_user(&admin, "mia", "mia-password-0123456").await;
    create_user(&admin, "olaf", "olaf-password-0123456").await;
    bind(&admin, "mia", "ml", "member").await;
    let mia = Browser::logged_in(&c.server, "mia", "mia-password-0123456").await;
    let (s, v) = mia.api(Method::GET, "/api/v1/quotas/ml/queue", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["length"], 1);
    let olaf = Browser::logged_in(&c.server, "olaf", "olaf-password-0123456").await;
    let (s_queue, v_queue) = olaf.api(Method::GET, "/api/v1/quotas/ml/queue", None).await;
    let (s_quota, v_quota) = olaf.api(Method::GET, "/api/v1/quotas/ml", None).await;
    assert_eq!(s_queue, StatusCode::NOT_FOUND, "{v_queue}");
    assert_eq!(s_quota, StatusCode::NOT_FOUND);
    assert_eq!(v_queue, v_quota, "the same answer as for the quota");
    let (s, _) = olaf
        .api(Method::GET, "/api/v1/quotas/nope/queue", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// The mutating webhook on a replica that does not run the controller
/// (so has no PriorityClass watch) reads the classes through the API: one
/// LIST, kept 30 s, so a burst of creates costs one read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_the_watch_reads_priority_classes_through_the_api() {
    use crate::fakeapi::FakeApi;
    let fake = FakeApi::new();
    let leader = Cluster::replica(
        fake.clone(),
        tempfile::tempdir().unwrap(),
        crate::cluster::T0,
        "bizrq-a",
        false,
    )
    .await;
    leader.until_metric("bizrq_leader 1").await;
    let c = Cluster::replica(
        fake.clone(),
        tempfile::tempdir().unwrap(),
        crate::cluster::T0,
        "bizrq-b",
        true,
    )
    .await;
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
    leader
        .until_requested("PriorityClass watch", |r| {
            r.starts_with("GET /apis/scheduling.k8s.io/v1/priorityclasses?")
                && r.contains("watch=true")
        })
        .await;
    create_class(&c, "urgent", 1000, false).await;
    let lists = || {
        fake.requests()
            .iter()
            .filter(|r| {
                r.starts_with("GET /apis/scheduling.k8s.io/v1/priorityclasses")
                    && !r.contains("watch=true")
            })
            .count()
    };
    let before = lists();
    create(&c, &job("run").cpu("4").obj()).await.unwrap();
    create(&c, &with_class(job("b").cpu("2").obj(), "urgent"))
        .await
        .unwrap();
    create(&c, &with_class(job("c").cpu("2").obj(), "urgent"))
        .await
        .unwrap();
    // Judged by the serving replica's webhook, before any round: in the
    // entry it writes in the status, or with marks on in the mark.
    if crate::cluster::marks_on() {
        for name in ["b", "c"] {
            let o = fake.get("batch", "jobs", "ml", name).unwrap();
            let m: Value = serde_json::from_str(
                o["metadata"]["annotations"]["queue.bizrq.io/entry"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(m["priority"], 1000, "{name}: {m}");
        }
    } else {
        let q = fake.quota("ml");
        assert_eq!(entry(&q, "b")["priority"], 1000, "{q}");
        assert_eq!(entry(&q, "c")["priority"], 1000);
    }
    assert_eq!(lists(), before + 1, "one LIST for both creates");
    leader.running.shutdown().await;
    c.running.shutdown().await;
}

/// Finished Jobs give their room back at once even while their quota's
/// queue round is still releasing what it admitted (docs/queueing.md §9):
/// the release of a queued Job (its unsuspend, through the API server and
/// both webhooks) can take seconds under load, and the reconcile that
/// lowers a finished Job's charge must not wait for it. Three quotas
/// under one parent, each with four Jobs of 1 CPU running (their pods
/// Running) and a fifth queued; one Job of each completes, so each
/// queue's round admits its fifth, whose release is slowed to 10 s; then
/// the other three of each complete at once, their pods Succeeded. Every
/// one of those charges is gone within a few seconds, long before the
/// slowed releases are answered (before, they stayed until then: the
/// reconcile waited for the round to let its quota go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_give_their_room_back_while_a_round_still_releases() {
    let c = Cluster::start().await;
    let kids = ["q0", "q1", "q2"];
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "12"}})),
        (
            "q0",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "queueing": "Queue"}),
        ),
        (
            "q1",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "queueing": "Queue"}),
        ),
        (
            "q2",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "queueing": "Queue"}),
        ),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    c.until_requested("pod watch", |r| {
        r.starts_with("GET /api/v1/pods?") && r.contains("watch=true")
    })
    .await;
    c.fake.set_write_delay(std::time::Duration::from_millis(5));
    let pod_of = |q: &str, i: usize| {
        crate::cluster::pod(
            "ml",
            &format!("{q}-j{i}-0"),
            "Job",
            &format!("{q}-j{i}"),
            0,
            "2026-11-21T10:00:00Z",
        )
    };
    for q in kids {
        for i in 0..4 {
            create_in(&c, "ml", &job(&format!("{q}-j{i}")).quota(q).cpu("1").obj())
                .await
                .unwrap();
            c.fake.put(pod_of(q, i));
        }
        c.until(q, "four Jobs charged", |v| used(v, "requests.cpu") == "4")
            .await;
        create_in(&c, "ml", &job(&format!("{q}-w")).quota(q).cpu("1").obj())
            .await
            .unwrap();
        assert!(suspended(&c, &format!("{q}-w")), "queued");
        c.fake.slow_writes(
            &format!("/apis/batch/v1/namespaces/ml/jobs/{q}-w"),
            std::time::Duration::from_secs(10),
        );
    }
    let end = |q: &str, i: usize| {
        let mut ended = pod_of(q, i);
        ended["status"]["phase"] = json!("Succeeded");
        ended["status"]["containerStatuses"] = json!([{"name": "c",
            "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-21T10:00:01Z"}}}]);
        ended
    };
    // One Job of each completes: its room goes to the queued Job, whose
    // release then hangs.
    for q in kids {
        c.fake.put(end(q, 0));
        finish(&c, q, "ml", &format!("{q}-j0"), "Complete");
    }
    for q in kids {
        let wref = format!("batch/Job/ml/{q}-w");
        c.until(q, "the queued Job admitted", |v| {
            v["status"]["workloads"].get(&wref).is_some() && used(v, "requests.cpu") == "4"
        })
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for q in kids {
        assert!(
            suspended(&c, &format!("{q}-w")),
            "its release is still under way"
        );
    }
    // The other three of each complete at once, their pods Succeeded.
    let started = std::time::Instant::now();
    for q in kids {
        for i in 1..4 {
            c.fake.put(end(q, i));
            finish(&c, q, "ml", &format!("{q}-j{i}"), "Complete");
        }
    }
    for q in kids {
        let mut last = Value::Null;
        while started.elapsed() < std::time::Duration::from_secs(4) {
            last = c.fake.quota(q);
            if used(&last, "requests.cpu") == "1" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(
            used(&last, "requests.cpu"),
            "1",
            "{q}: the finished Jobs' charges still held {:?} after they completed, while the round's release hangs: {last}",
            started.elapsed()
        );
    }
    for q in kids {
        assert!(
            suspended(&c, &format!("{q}-w")),
            "released within the bound, before the slowed releases were answered"
        );
    }
}

/// The mutating webhook judges a create on this replica's copies of its
/// quota and of the quota's parent, with no read of either
/// (`Service::recent`; docs/queueing.md §4): with every GET of both
/// answered 500, a create that fits is charged at once and one past `max`
/// is queued, none refused. (A create on a loan, and the validating
/// review, which prove a write-less decision with a fresh read, are sent
/// while reads work.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_is_judged_with_no_read_of_its_quota_or_its_parent() {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "8"}})),
        (
            "a",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "6"}, "queueing": "Queue"}),
        ),
        ("b", "org", json!({"hard": {"requests.cpu": "4"}})),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    for q in ["org", "a", "b"] {
        c.until(q, "first reconcile", |q| {
            !q["status"]["lastReconcileTime"].is_null()
        })
        .await;
    }
    let path = |q: &str| format!("/apis/bizrq.io/v1/bizgroupresourcequotas/{q}");
    let review = |name: &str, cpu: &str| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": format!("uid-{name}"),
                "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                "name": name, "namespace": "ml", "operation": "CREATE",
                "userInfo": {"username": "alice"}, "object": job(name).quota("a").cpu(cpu).obj(),
                "dryRun": false}})
    };
    let fail_reads = |n: usize| {
        for q in ["org", "a"] {
            c.fake.fail_reads(&path(q), n);
        }
    };
    fail_reads(1_000_000);
    let a1 = c
        .server
        .review("/mutate/workloads", &review("a1", "3"))
        .await;
    // A create on a loan proves the child's copy before it asks the parent
    // (a loan sized on an old copy could take more than is needed): the
    // one read on this path.
    fail_reads(0);
    let a2 = c
        .server
        .review("/mutate/workloads", &review("a2", "2"))
        .await;
    fail_reads(1_000_000);
    let a3 = c
        .server
        .review("/mutate/workloads", &review("a3", "2"))
        .await;
    fail_reads(0);
    assert_eq!(a1["allowed"], true, "{a1}");
    assert!(a1["patch"].is_null(), "fits: admitted as written: {a1}");
    assert_eq!(a2["allowed"], true, "{a2}");
    assert!(a2["patch"].is_null(), "fits on a loan of 1: {a2}");
    assert_eq!(a3["allowed"], true, "{a3}");
    assert!(a3["patch"].is_string(), "past max 6: held and queued: {a3}");
    let q = c.fake.quota("a");
    assert_eq!(used(&q, "requests.cpu"), "5", "{q}");
    assert!(
        q["status"]["workloads"].get("batch/Job/ml/a3").is_none(),
        "{q}"
    );
    for (name, cpu) in [("a1", "3"), ("a2", "2")] {
        let v = c
            .server
            .review("/validate/workloads", &review(name, cpu))
            .await;
        assert_eq!(v["allowed"], true, "the validating review confirms: {v}");
    }
    assert_eq!(used(&c.fake.quota("a"), "requests.cpu"), "5");
}
