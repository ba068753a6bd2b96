//! A queued job's priority comes from its PriorityClass (watched, or read
//! through the API by a replica without the watch), never from its template.
use super::*;

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
