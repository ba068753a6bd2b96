//! Marks across submitters and replicas: parallel creates never pass a
//! submitter's share, on one replica or two; a mark is folded and admitted
//! once with two replicas; the mark keys kept in a Secret bizrq creates are
//! shared by every replica, and the shipped Deployment's role may make it.
use super::*;

/// Parallel creates of one submitter never pass its share: twelve at once
/// against a share of 3 with no room, each judged against the status plus
/// what this replica marked, under one lock. Exactly three are created
/// (held and marked), the rest refused, and the queue the rounds fold
/// never holds more than three of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_creates_never_pass_a_submitters_share() {
    let c = marked_cluster(Some(3)).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let results = futures::future::join_all((0..12).map(|i| {
        let c = &c;
        async move { create(c, "mallory", job(&format!("p-{i}")).cpu("1").obj()).await }
    }))
    .await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 3, "{results:?}");
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(r.contains("maxPerSubmitter 3"), "{r}");
    }
    let q = c
        .until("ml", "the three folded", |q| queue_refs(q).len() == 3)
        .await;
    assert_eq!(used(&q, "requests.cpu"), "4");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(queue_refs(&c.fake.quota("ml")).len(), 3);
}

/// A second replica over the same API server, with the same mark key, not
/// leading (it runs no rounds) and not serving the webhooks until told.
async fn second_replica(c: &Cluster) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let keys = mark_key_file(dir.path());
    let db = crate::common::fresh_sqlite(&dir);
    Cluster::replica_configured(c.fake.clone(), dir, T0, "bizrq-1", false, &db, |a| {
        a.queue_mark_key_file = Some(keys)
    })
    .await
}

/// Two replicas: the one serving the webhooks marks a create, the leader
/// (which never reviewed it) folds it and admits it once: one charge by
/// the queue, the Job released, never both charged and waiting, and the
/// marking replica's count of it forgotten once a status shows it
/// admitted (its submitter may queue again to the share).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_a_marked_create_is_folded_and_admitted_once() {
    let c = marked_cluster(Some(1)).await;
    let other = second_replica(&c).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let start: u64 = c.fake.quota("ml")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    other.serve_webhooks();
    create(&c, "bob", job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"));
    assert_eq!(
        mark_of(&c, "b").expect("marked by the other replica")["by"],
        "bob"
    );
    // Bob's share of 1 is taken on the replica that marked b.
    let err = create(&c, "bob", job("b2").cpu("2").obj())
        .await
        .unwrap_err();
    assert!(err.contains("maxPerSubmitter 1"), "{err}");
    c.until("ml", "b folded by the leader", |q| {
        queue_refs(q) == ["batch/Job/ml/b"] && q["status"]["queue"][0]["uid"].is_string()
    })
    .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
    })
    .await;
    until_released(&c, "b").await;
    assert!(!suspended(&c, "b"), "b released");
    for n in 1..=3 {
        c.touch("ml", n);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let mut charges = std::collections::BTreeSet::new();
    for v in c.fake.quota_versions("ml", start) {
        let charge = &v["status"]["workloads"]["batch/Job/ml/b"];
        let charged = charge["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("queue:"));
        assert!(
            !(charged && queue_refs(&v).contains(&"batch/Job/ml/b".to_string())),
            "b both charged and waiting: {v}"
        );
        if charged {
            charges.insert(charge["since"].to_string());
        }
        assert!(
            ["0", "2", "4"].contains(&used(&v, "requests.cpu")),
            "b charged twice: {v}"
        );
    }
    assert_eq!(charges.len(), 1, "admitted once: {charges:?}");
    assert_eq!(used(&c.fake.quota("ml"), "requests.cpu"), "2");
    // b is admitted: bob's share on the marking replica is free again.
    create(&c, "bob", job("b3").cpu("4").obj()).await.unwrap();
    assert!(suspended(&c, "b3"));
}

/// Two replicas marking at once: each counts what it marked, so together
/// their webhooks may let through up to the share each before a status
/// shows any (the bound across replicas: the share per replica); the
/// leader's fold holds the share again in the quota's write, so no stored
/// version ever has more of one submitter waiting than the share, and what
/// is over it stays held, marked, out of the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_the_stored_queue_never_passes_a_submitters_share() {
    let c = marked_cluster(Some(3)).await;
    let other = second_replica(&c).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let start: u64 = c.fake.quota("ml")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // The leader's folds land late: the other replica marks before any
    // status shows the first replica's marks.
    let status = "/apis/bizrq.io/v1/bizgroupresourcequotas/ml/status";
    c.fake
        .slow_writes(status, std::time::Duration::from_secs(2));
    let burst = |from: usize| {
        futures::future::join_all((from..from + 6).map(|i| {
            let c = &c;
            async move { create(c, "mallory", job(&format!("p-{i}")).cpu("1").obj()).await }
        }))
    };
    let first = burst(0).await.iter().filter(|r| r.is_ok()).count();
    other.serve_webhooks();
    let second = burst(6).await.iter().filter(|r| r.is_ok()).count();
    assert_eq!(first, 3, "one replica never passes the share");
    assert!(second <= 3, "nor the other: {second}");
    c.fake.slow_writes(status, std::time::Duration::ZERO);
    c.until("ml", "three folded", |q| queue_refs(q).len() == 3)
        .await;
    for n in 1..=4 {
        c.touch("ml", n);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    for v in c.fake.quota_versions("ml", start) {
        assert!(queue_refs(&v).len() <= 3, "past the share: {v}");
        assert_eq!(used(&v, "requests.cpu"), "4", "{v}");
    }
    // Every Job created is held and marked, in the queue or out of it.
    let made: Vec<String> = (0..12)
        .map(|i| format!("p-{i}"))
        .filter(|n| c.fake.get("batch", "jobs", "ml", n).is_some())
        .collect();
    assert_eq!(made.len(), first + second);
    for n in &made {
        assert!(suspended(&c, n), "{n} held");
        assert!(mark_of(&c, n).is_some(), "{n} marked");
    }
    println!("created through two replicas: {first} + {second}, stored queue 3");
}

/// A submitter's share counts the whole queue, not the top a status
/// lists (docs/queueing.md §12): with a share of 25, thirty creates one
/// after another (each folded before the next) pass exactly 25 times,
/// though the status lists 20 of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_past_the_listed_top_still_holds() {
    let c = marked_cluster(Some(25)).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let mut ok = 0;
    for i in 0..30 {
        match create(&c, "mallory", job(&format!("p-{i:02}")).cpu("1").obj()).await {
            Ok(()) => {
                ok += 1;
                c.until("ml", "folded", |q| {
                    q["status"]["queueSummary"]["total"].as_u64() == Some(ok)
                })
                .await;
            }
            Err(e) => assert!(e.contains("maxPerSubmitter 25"), "{e}"),
        }
    }
    assert_eq!(ok, 25);
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q).len(), quota::queue::summary::TOP_ENTRIES);
    assert_eq!(q["status"]["queueSummary"]["total"], 25);
}

/// Keys from a Secret bizrq makes itself (`--queue-mark-key-secret`, the
/// shipped deployment's setting): the first replica finds none and
/// creates it with a fresh key; marks work with it; the next replica
/// reads the same Secret (not made again) and folds the marks the first
/// one signed; two replicas starting at once over no Secret end with one
/// key between them (one create wins, the other reads it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_kept_in_a_secret_bizrq_creates_are_shared_by_every_replica() {
    const SECRET: &str = "bizrq-queue-mark-keys";
    let by_secret = |a: &mut bizrq::config::ServeArgs| {
        a.queue_mark_key_file = None;
        a.queue_mark_key_secret = Some(SECRET.into());
    };
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let fake = crate::fakeapi::FakeApi::new();
    assert!(fake.get("", "secrets", "bizrq-system", SECRET).is_none());
    let c = Cluster::replica_configured(fake, dir, T0, "bizrq-0", true, &db, by_secret).await;
    let secret = c
        .fake
        .get("", "secrets", "bizrq-system", SECRET)
        .expect("created at start");
    let made = secret["metadata"]["resourceVersion"].clone();
    assert!(secret["data"]["keys"].is_string(), "{secret}");
    with_quota_ml(&c, json!("Queue"), "4").await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create(&c, "bob", job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"));
    assert!(mark_of(&c, "b").is_some(), "marked with the Secret's key");
    // A new replica: the same Secret, read, not made again; it folds the
    // mark the first one signed and admits b when room frees.
    let fake = c.fake.clone();
    c.running.shutdown().await;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::replica_configured(fake, dir, T0, "bizrq-1", true, &db, by_secret).await;
    let again = c.fake.get("", "secrets", "bizrq-system", SECRET).unwrap();
    assert_eq!(again["metadata"]["resourceVersion"], made);
    c.until("ml", "b folded by the new replica", |q| {
        queue_refs(q) == ["batch/Job/ml/b"]
    })
    .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
    })
    .await;
    // Two replicas at once over no Secret: one key between them.
    let client = c.kubectl("system:serviceaccount:bizrq-system:bizrq");
    let (x, y) = tokio::join!(
        bizrq::cluster::mark_keys::get_or_create(client.clone(), "bizrq-system", "other"),
        bizrq::cluster::mark_keys::get_or_create(client.clone(), "bizrq-system", "other"),
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.sign(b"one key"), y.sign(b"one key"));
    // A Secret that holds no usable key is refused in words.
    let broken = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "broken", "namespace": "bizrq-system"},
        "data": {"keys": "YWJjZAo="}});
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "bizrq-system",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Secret"), "secrets"),
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(broken).unwrap(),
    )
    .await
    .unwrap();
    let err = bizrq::cluster::mark_keys::get_or_create(client, "bizrq-system", "broken")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("Secret bizrq-system/broken") && err.contains("at least 32 random bytes"),
        "{err}"
    );
}

/// The shipped deployment turns marks on with the Secret bizrq makes, and
/// its RBAC lets it do so: `get` on that Secret by name and `create` on
/// Secrets, in bizrq's own namespace only (a Role, not the ClusterRole).
#[test]
fn the_shipped_deployment_keeps_its_mark_keys_in_a_secret_its_role_may_make() {
    let deployment = crate::workload_lookup::shipped("deployment.yaml");
    let env = deployment[0]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    let secret = env
        .iter()
        .find(|e| e["name"] == "BIZRQ_QUEUE_MARK_KEY_SECRET")
        .expect("BIZRQ_QUEUE_MARK_KEY_SECRET set")["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!env.iter().any(|e| e["name"] == "BIZRQ_QUEUE_MARK_KEY_FILE"));
    let rbac = crate::workload_lookup::shipped("rbac.yaml");
    let grants = |verb: &str, by_name: bool| {
        rbac.iter().any(|d| {
            d["kind"] == "Role"
                && d["metadata"]["namespace"] == "bizrq-system"
                && d["rules"].as_array().unwrap().iter().any(|r| {
                    r["apiGroups"][0] == ""
                        && r["resources"][0] == "secrets"
                        && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
                        && (!by_name
                            || r["resourceNames"]
                                .as_array()
                                .is_some_and(|n| n.iter().any(|n| *n == secret)))
                })
        })
    };
    assert!(grants("get", true), "get on {secret} by name");
    assert!(grants("create", false), "create on secrets");
    let cluster_wide = rbac.iter().any(|d| {
        d["kind"] == "ClusterRole"
            && d["rules"].as_array().unwrap().iter().any(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == "secrets")
            })
    });
    assert!(!cluster_wide, "no Secret anywhere else");
}
