//! The seed's story: run-time billing with a reclaimed job refunded once;
//! a spent budget suspends its batch work after the grace.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_run_time_billing_with_a_reclaimed_job_refunded() {
    let c = Cluster::start().await;
    let s = &c.server;
    seed_004_quotas(&c).await;
    // A hostile refund policy is refused, naming the key, and changes nothing.
    for bad in [
        json!({"kind": "lastStretch", "checkpointEverySeconds": 0}),
        json!({"kind": "lastStretch", "checkpointEverySeconds": -5}),
        json!({"kind": "lastStretch", "checkpointEverySeconds": 31_622_401}),
        json!({"kind": "lastStretch", "checkpointEverySeconds": 1.5}),
        json!({"kind": "sometimes"}),
    ] {
        let (st, v) = s
            .api(
                Method::PUT,
                "/api/v1/quotas/user-a",
                Some(
                    json!({"metadata": {"name": "user-a"}, "spec": {"parent": "pool",
                    "hard": {"requests.cpu": "6", KEY: "100"}, "max": {"requests.cpu": "10"},
                    "budgets": {KEY: {"refund": bad}}}}),
                ),
            )
            .await;
        // 422 naming the key for a rule, 400 for what is not a policy.
        assert!(
            st == StatusCode::UNPROCESSABLE_ENTITY || st == StatusCode::BAD_REQUEST,
            "{bad}: {v}"
        );
        if st == StatusCode::UNPROCESSABLE_ENTITY {
            let m = v["error"]["message"].as_str().unwrap();
            assert!(
                m.contains("budget cash/requests.cpu: checkpointEverySeconds"),
                "{m}"
            );
        }
    }
    assert_eq!(
        c.fake.quota("user-a")["spec"]["budgets"][KEY]["refund"]["checkpointEverySeconds"],
        1800
    );

    // Seed 004's billing by run time: both of A's Jobs declare theirs and
    // reserve it; `sweep` borrows.
    let train = job("train")
        .image("x")
        .ns("ns-a")
        .quota("user-a")
        .pods(2)
        .cpu("2")
        .max_runtime("2h")
        .obj();
    let sweep = job("sweep")
        .image("x")
        .ns("ns-a")
        .quota("user-a")
        .pods(2)
        .cpu("2")
        .max_runtime("10h")
        .obj();
    create_job(&c, &train).await.unwrap();
    create_job(&c, &sweep).await.unwrap();
    let job1 = job("job-1")
        .image("x")
        .ns("ns-b")
        .quota("user-b")
        .cpu("3")
        .obj();
    let job2 = job("job-2")
        .image("x")
        .ns("ns-b")
        .quota("user-b")
        .cpu("5")
        .obj();
    create_job(&c, &job1).await.unwrap();
    create_job(&c, &job2).await.unwrap();
    let a = c
        .until("user-a", "both reserved", |q| {
            q["status"]["reservations"][KEY]
                .as_object()
                .is_some_and(|m| m.len() == 2)
        })
        .await;
    assert_eq!(a["status"]["borrowed"]["requests.cpu"], "2", "{a}");

    for o in [&train, &sweep, &job1, &job2] {
        c.fake.put(o.clone());
    }
    for p in ["train-x", "train-y"] {
        c.fake.put(running("ns-a", p, "train", "2", 100));
    }
    for p in ["sweep-x", "sweep-y"] {
        c.fake.put(running("ns-a", p, "sweep", "2", 0));
    }
    c.fake.put(running("ns-b", "job-1-x", "job-1", "3", 0));
    let mut pending = running("ns-b", "job-2-x", "job-2", "5", 0);
    pending["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu."}]});
    c.fake.put(pending);

    // B needs its room back: the low-priority `sweep` is marked, not `train`.
    let a = c
        .until("user-a", "sweep marked", |q| {
            q["status"]["reclaim"].is_object()
        })
        .await;
    let marks: Vec<&String> = a["status"]["reclaim"].as_object().unwrap().keys().collect();
    assert_eq!(marks, ["batch/Job/ns-a/sweep"], "{a}");

    // 10:50: A's status bills the 50 minutes, then the grace (5 min) is
    // long over and the parent's reclaim suspends `sweep`.
    c.set_clock(T0 + 50 * MIN);
    c.touch("user-a", 1);
    until_suspended(&c, "ns-a", "sweep").await;
    let expected = per_mille(8, 50 * MIN as i128) - per_mille(4, 20 * MIN as i128);
    let a = c
        .until("user-a", "refunded and billed to 10:50", |q| {
            q["status"]["refunds"].is_object()
                && q["status"]["lastReconcileTime"] == "2026-11-21T10:50:00.000Z"
                && accrued(q) == expected
        })
        .await;
    let r = &a["status"]["refunds"]["batch/Job/ns-a/sweep"];
    // Checkpoints every 30 min from 10:00: 10:30 → 10:50 is lost.
    assert_eq!(r["from"], "2026-11-21T10:30:00.000Z", "{a}");
    assert_eq!(r["to"], "2026-11-21T10:50:00.000Z", "{a}");
    let refund = per_mille(4, 20 * MIN as i128);
    assert_eq!(
        r["amounts"][KEY],
        (refund * 1000).to_string(),
        "in acc: {a}"
    );
    // Billed: train 4 cores × 50 min + sweep 4 × 50 min, less the refund.
    assert_eq!(accrued(&a), per_mille(8, 50 * MIN as i128) - refund, "{a}");
    let e = until_first_event(&c, "Refunded", "sweep").await;
    let note = e["note"].as_str().unwrap();
    assert!(
        note.contains("refunded 1.33 core-hours of cash/requests.cpu"),
        "{note}"
    );

    // Refunded once per mark: more reconciles give nothing more.
    c.fake.remove("", "pods", "ns-a", "sweep-x");
    c.fake.remove("", "pods", "ns-a", "sweep-y");
    c.touch("user-a", 2);
    c.touch("pool", 3);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = c.fake.quota("user-a");
    assert_eq!(accrued(&again), accrued(&a), "{again}");
    assert_eq!(again["status"]["refunds"], a["status"]["refunds"]);

    // The audit log has the refund, with its entries.
    let admin = Browser::admin(s).await;
    let audit = admin.get("/audit?action=budget.refund").await;
    assert_eq!(
        audit.body.matches("<code>budget.refund</code>").count(),
        1,
        "one refund: {}",
        audit.body
    );
    assert!(audit.body.contains("sweep"), "{}", audit.body);

    // 12:01: `train` declared 2 h from 10:00 and still runs: suspended.
    assert!(c.fake.get("batch", "jobs", "ns-a", "train").unwrap()["spec"]["suspend"].is_null());
    c.set_clock(T0 + 2 * HOUR + MIN);
    c.touch("user-a", 4);
    until_suspended(&c, "ns-a", "train").await;
    let e = until_first_event(&c, "RunTimeExceeded", "train").await;
    assert!(
        e["note"]
            .as_str()
            .unwrap()
            .contains("declared a run time of 2h"),
        "{e}"
    );
    assert_eq!(e["type"], "Warning");
    // B's Jobs declared nothing and are never stopped.
    for j in ["job-1", "job-2"] {
        assert!(c.fake.get("batch", "jobs", "ns-b", j).unwrap()["spec"]["suspend"].is_null());
    }
    let audit = admin.get("/audit?action=budget.suspend").await;
    assert!(audit.body.contains("RunTimeExceeded"), "{}", audit.body);
}

/// `onExhausted: suspendBatch` in cluster mode: `ex` may spend 2
/// core-hours; a batch Job and an online Deployment of a core each spend
/// them in an hour. The quota says since when it is spent and warns; 10
/// minutes later the Job is suspended, the online service keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_suspends_its_batch_work_after_the_grace() {
    let c = Cluster::start().await;
    let s = &c.server;
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ex"}, "spec": {"parent": "",
                "hard": {"requests.cpu": "10", KEY: "2"},
                "budgets": {KEY: {"onExhausted": {"kind": "suspendBatch", "graceSeconds": 600}}}}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let batch = job("batch")
        .image("x")
        .ns("ns-x")
        .quota("ex")
        .cpu("1")
        .obj();
    create_job(&c, &batch).await.unwrap();
    let serve = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": "ns-x",
            "labels": {"biz.group.resource.quota": "ex", "bizrq.io/online": "true"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serve"}},
            "template": {"metadata": {"labels": {"app": "serve"}}, "spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}});
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(c.kubectl("alice"), "ns-x", &ar);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(serve.clone()).unwrap(),
    )
    .await
    .unwrap();
    c.fake.put(batch.clone());
    c.fake.put(serve.clone());
    c.fake.put(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "serve-1", "namespace": "ns-x",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve", "uid": "x", "controller": true}]},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}}));
    c.fake.put(running("ns-x", "batch-x", "batch", "1", 0));
    let mut sp = pod(
        "ns-x",
        "serve-x",
        "ReplicaSet",
        "serve-1",
        0,
        "2026-11-21T10:00:00Z",
    );
    sp["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}});
    c.fake.put(sp);
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 2")
        .await;
    c.until("ex", "window opened", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;

    // 11:00: 2 cores × 1 h, the budget is spent. Pending: a warning, no
    // suspension yet.
    c.set_clock(T0 + HOUR);
    c.touch("ex", 1);
    let q = c
        .until("ex", "spent, since recorded", |q| {
            q["status"]["exhausted"][KEY] == "2026-11-21T11:00:00.000Z"
        })
        .await;
    assert_eq!(q["status"]["used"][KEY], "2", "{q}");
    let e = until_first_event(&c, "BudgetExhausted", "ex").await;
    assert!(
        e["note"]
            .as_str()
            .unwrap()
            .contains("will be suspended at 2026-11-21T11:10:00.000Z"),
        "{e}"
    );
    assert!(c.fake.get("batch", "jobs", "ns-x", "batch").unwrap()["spec"]["suspend"].is_null());

    // 11:11: the grace is over: the batch Job is suspended, not the service.
    c.set_clock(T0 + HOUR + 11 * MIN);
    c.touch("ex", 2);
    until_suspended(&c, "ns-x", "batch").await;
    let e = until_first_event(&c, "BudgetExhausted", "batch").await;
    assert!(e["note"].as_str().unwrap().contains("suspendBatch"), "{e}");
    assert_eq!(
        c.fake.get("apps", "deployments", "ns-x", "serve").unwrap()["spec"]["replicas"],
        1,
        "online services are never stopped"
    );
    let admin = Browser::admin(s).await;
    let audit = admin.get("/audit?action=budget.suspend").await;
    assert!(audit.body.contains("BudgetExhausted"), "{}", audit.body);
}
