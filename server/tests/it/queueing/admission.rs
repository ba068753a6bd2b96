//! Admission from the queue: a job that does not fit waits suspended and is
//! admitted when room frees, by priority then arrival, never over; a
//! deletion, a crash or a round cut short leaves no charge and nothing held;
//! a round is written whole in one write; `check` says where a job would
//! queue; a create is judged without reading its quota or its parent.
use super::*;

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
    c.until_round_charged("ml", "batch/Job/ml/w", "w admitted by the round")
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

/// The other order of the test above: the DELETE's review comes first
/// and releases the queue's charge of `w` (remembering the object in
/// `status.deleted`), its store waits, and the round's release is
/// reviewed and stored in between — so the release's write succeeds (the
/// object is still there) and no 404 tells the controller to take its
/// charge back. Before `status.deleted`, that review charged `w` again
/// and the charge stayed until the reservation's TTL (for ever on the
/// tests' frozen clock); now the review of bizrq's own write of a
/// deleted object charges nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reviewed_after_its_jobs_delete_charges_nothing() {
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
    let path = "/apis/batch/v1/namespaces/ml/jobs/w";
    // The release's PATCH: held 2 s before its reviews.
    c.fake
        .pause_next_validation(path, std::time::Duration::from_secs(2));
    jobs(&c)
        .delete("run", &DeleteParams::default())
        .await
        .unwrap();
    c.until_round_charged("ml", "batch/Job/ml/w", "w admitted by the round")
        .await;
    c.until_requested("the release sent", |r| {
        r.starts_with(&format!("PATCH {path}"))
    })
    .await;
    // w's DELETE: reviewed now, stored 4 s later.
    c.fake.slow_writes(path, std::time::Duration::from_secs(4));
    let api = jobs(&c);
    let deleting = tokio::spawn(async move { api.delete("w", &DeleteParams::default()).await });
    let reviewed = |op: &str| {
        let hook = match op {
            "DELETE" => "workload-deletes.bizrq.io",
            _ => "workloads.bizrq.io",
        };
        c.fake.reviews().iter().any(|r| {
            r["request"]["name"] == "w" && r["request"]["operation"] == op && r["webhook"] == hook
        })
    };
    // (Bounds well past the 2 s pause: a loaded CI machine answers late.)
    for _ in 0..500 {
        if reviewed("DELETE") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reviewed("DELETE"), "the DELETE's review never came");
    // (A review is logged when sent: its release is awaited.)
    c.until("ml", "released by the DELETE's review", |q| {
        used(q, "requests.cpu") == "0" && !q["status"]["deleted"]["batch/Job/ml/w"].is_null()
    })
    .await;
    // The release is stored at once, before the DELETE.
    c.fake.slow_writes(path, std::time::Duration::ZERO);
    for _ in 0..500 {
        if reviewed("UPDATE") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reviewed("UPDATE"), "the release's review never came");
    deleting.await.unwrap().unwrap();
    assert!(c.fake.get("batch", "jobs", "ml", "w").is_none());
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
        Review::bare_job_create(
            &format!("uid-{name}"),
            "alice",
            job(name).quota("a").cpu(cpu).obj(),
        )
        .obj()
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
