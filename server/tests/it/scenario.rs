//! The seeds' stories in cluster mode: quotas made through bizrq's JSON
//! API, workloads created as kubectl creates them — both through the
//! emulated API server, which sends them to bizrq's webhooks as the shipped
//! configuration says — and the controller watching what was stored.
//!
//! Seed 000: model-qualified keys (`limits.cpu` 10 with `limits.cpu.A4` 4),
//! the tree rules, and cash (CPU-core-hours) running out.
//! Seed 001: users A (min 6, max 10) and B (min 12, max 14); A's Job and
//! B's Job-1 fit; A's NoteBook borrows from B; B's Job-2 is B's own
//! guarantee — it is admitted, its pod cannot be scheduled, and A's Job
//! (batch, lower priority), not the NoteBook (online), is reclaimed after
//! the grace period.
//! Seed 000 with a monthly period: the cash story again, then the month
//! closes at its boundary and the budget starts over.

use crate::cluster::{pod, used, Cluster, HOUR, T0};
use crate::support::job;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{json, Value};
use std::time::Duration;

fn quota(name: &str, parent: &str, hard: Value, max: Option<Value>) -> Value {
    let mut spec = json!({"parent": parent, "hard": hard});
    if let Some(m) = max {
        spec["max"] = m;
    }
    json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota", "metadata": {"name": name}, "spec": spec})
}

fn deployment(
    ns: &str,
    name: &str,
    quota: &str,
    replicas: i64,
    cpu: &str,
    extra_labels: Value,
) -> Value {
    let mut labels = json!({"biz.group.resource.quota": quota});
    for (k, v) in extra_labels.as_object().unwrap() {
        labels[k] = v.clone();
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}})
}

/// Create `obj` as `kubectl create` does. Returns what kubectl saw:
/// `{"allowed": true}`, or the API server's refusal as
/// `{"allowed": false, "status": {"code", "reason", "message"}}`.
async fn admit(c: &Cluster, obj: &Value) -> Value {
    let api_version = obj["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().unwrap();
    let plural = match kind {
        "Deployment" => "deployments",
        "Job" => "jobs",
        "BizGroupResourceQuota" => "bizgroupresourcequotas",
        other => panic!("no resource for {other}"),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let client = c.kubectl("alice");
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    };
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    match api.create(&PostParams::default(), &o).await {
        Ok(_) => json!({"allowed": true}),
        Err(kube::Error::Api(st)) => json!({"allowed": false,
            "status": {"code": st.code, "reason": st.reason, "message": st.message}}),
        Err(e) => panic!("kubectl create {kind}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_model_keys_tree_rules_and_cash() {
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota(
        "vivo",
        "",
        json!({"limits.cpu": "20", "limits.cpu.A4": "8", "cash/limits.cpu": "200"}),
    )
    .await;
    // A child must carry every key of its parent.
    let r = admit(&c, &quota("ai", "vivo", json!({"limits.cpu": "10"}), None)).await;
    assert_eq!(r["allowed"], false);
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.cpu.A4"),
        "{r}"
    );
    s.create_quota(
        "ai",
        "vivo",
        json!({"limits.cpu": "10", "limits.cpu.A4": "4", "cash/limits.cpu": "100"}),
    )
    .await;

    // 4 cores of A4: both limits.cpu.A4 and limits.cpu count them.
    let a4 = deployment(
        "ai",
        "a4-train",
        "ai",
        2,
        "2",
        json!({"biz.group.resource.quota/cpu-type": "A4"}),
    );
    assert_eq!(admit(&c, &a4).await["allowed"], true);
    let q = c
        .until("ai", "A4 charged", |q| used(q, "limits.cpu.A4") == "4")
        .await;
    assert_eq!(used(&q, "limits.cpu"), "4");
    // No more A4 …
    let more = deployment(
        "ai",
        "a4-more",
        "ai",
        1,
        "1",
        json!({"biz.group.resource.quota/cpu-type": "A4"}),
    );
    let r = admit(&c, &more).await;
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "admission webhook \"workloads.bizrq.io\" denied the request: bizrq ai: limits.cpu.A4 asks 1, 0 left of 4"
    );
    // … yet 6 cores of another model fit.
    let other = deployment(
        "ai",
        "x86",
        "ai",
        3,
        "2",
        json!({"biz.group.resource.quota/cpu-type": "X86"}),
    );
    assert_eq!(admit(&c, &other).await["allowed"], true);
    c.until("ai", "10 cores", |q| used(q, "limits.cpu") == "10")
        .await;
    // The X86 work is done: kubectl deletes it, the webhook releases it.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(c.kubectl("alice"), "ai");
    deployments
        .delete("x86", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    c.until("ai", "X86 released", |q| used(q, "limits.cpu") == "4")
        .await;

    // Cash: 100 core-hours. The A4 Deployment's two pods (2 cores each)
    // run 25 hours: 100 core-hours, spent.
    c.fake.put(a4);
    c.fake.put(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "a4-train-1", "namespace": "ai",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "a4-train", "uid": "x", "controller": true}]},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}}));
    for p in ["p1", "p2"] {
        let mut pd = pod(
            "ai",
            p,
            "ReplicaSet",
            "a4-train-1",
            0,
            "2026-11-21T10:00:00Z",
        );
        pd["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}});
        c.fake.put(pd);
    }
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 2")
        .await;
    c.until("ai", "window opened", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    c.set_clock(T0 + 25 * HOUR);
    c.fake.remove("", "pods", "ai", "p2");
    let q = c
        .until("ai", "cash spent", |q| used(q, "cash/limits.cpu") == "100")
        .await;
    assert_eq!(q["status"]["hard"]["cash/limits.cpu"], "100");
    // New work that needs CPU is denied; running work is not touched.
    let late = deployment("ai", "late", "ai", 0, "1", json!({}));
    let r = admit(&c, &late).await;
    assert_eq!(
        r["allowed"], true,
        "a workload asking nothing is not stopped by cash: {r}"
    );
    let scaled = deployment("ai", "late2", "ai", 1, "100m", json!({}));
    let r = admit(&c, &scaled).await;
    assert_eq!(r["allowed"], false);
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "admission webhook \"workloads.bizrq.io\" denied the request: bizrq ai: cash/limits.cpu is exhausted"
        ),
        "{msg}"
    );
    assert!(
        c.fake.get("", "pods", "ai", "p1").is_some(),
        "running pods stay"
    );
    // Owners hear of it as an Event on the quota.
    let mut found = false;
    for _ in 0..100 {
        found = c
            .fake
            .list("events.k8s.io", "events")
            .iter()
            .any(|e| e["reason"] == "CashExhausted" && e["regarding"]["name"] == "ai");
        if found {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(found, "{:#?}", c.fake.list("events.k8s.io", "events"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_001_borrowing_and_ordered_reclaim() {
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota("pool", "", json!({"requests.cpu": "18"}))
        .await;
    s.create_quota("user-a", "pool", json!({"requests.cpu": "6"}))
        .await;
    s.create_quota("user-b", "pool", json!({"requests.cpu": "12"}))
        .await;
    for (name, hard, max) in [("user-a", "6", "10"), ("user-b", "12", "14")] {
        let (st, v) = s
            .api(
                reqwest::Method::PUT,
                &format!("/api/v1/quotas/{name}"),
                Some(quota(
                    name,
                    "pool",
                    json!({"requests.cpu": hard}),
                    Some(json!({"requests.cpu": max})),
                )),
            )
            .await;
        assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    }

    // 1. A's Job (2 × 2 cores) and B's Job-1 (1 × 3) fit their guarantees.
    let job_a = job("job")
        .image("nginx")
        .ns("ns-a")
        .quota("user-a")
        .pods(2)
        .cpu("2")
        .obj();
    let job1 = job("job-1")
        .image("nginx")
        .ns("ns-b")
        .quota("user-b")
        .cpu("3")
        .obj();
    assert_eq!(admit(&c, &job_a).await["allowed"], true);
    assert_eq!(admit(&c, &job1).await["allowed"], true);
    // 2. A's NoteBook (2 × 2): 8 > 6, borrowed from B's idle guarantee.
    let notebook = deployment(
        "ns-a",
        "notebook",
        "user-a",
        2,
        "2",
        json!({"bizrq.io/online": "true"}),
    );
    let r = admit(&c, &notebook).await;
    assert_eq!(r["allowed"], true, "{r}");
    let a = c
        .until("user-a", "borrowing", |q| used(q, "requests.cpu") == "8")
        .await;
    assert_eq!(a["status"]["borrowed"]["requests.cpu"], "2");
    let pool = c.fake.quota("pool");
    assert_eq!(
        pool["status"]["loans"]["user-a"]["amount"]["requests.cpu"], "2",
        "{pool}"
    );
    // Beyond max is refused, saying so.
    let r = admit(&c, &deployment("ns-a", "more", "user-a", 3, "1", json!({}))).await;
    assert_eq!(r["allowed"], false);
    assert!(
        r["status"]["message"].as_str().unwrap().contains("max 10"),
        "{r}"
    );
    // 3. B's Job-2 (1 × 5) is within B's own guarantee: always admitted.
    let job2 = job("job-2")
        .image("nginx")
        .ns("ns-b")
        .quota("user-b")
        .cpu("5")
        .obj();
    assert_eq!(admit(&c, &job2).await["allowed"], true);
    c.until("user-b", "job-2 charged", |q| {
        used(q, "requests.cpu") == "8"
    })
    .await;

    // The cluster: everything runs but Job-2, whose pod cannot be scheduled.
    for o in [&job_a, &job1, &job2, &notebook] {
        c.fake.put(o.clone());
    }
    c.fake.put(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "notebook-1", "namespace": "ns-a",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "notebook", "uid": "x", "controller": true}]},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}}));
    let running = |ns: &str, name: &str, kind: &str, owner: &str, cpu: &str, priority: i64| {
        let mut p = pod(ns, name, kind, owner, 0, "2026-11-21T10:00:00Z");
        p["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": cpu}, "limits": {"cpu": cpu}});
        p["spec"]["priority"] = json!(priority);
        p
    };
    c.fake.put(running("ns-a", "job-x", "Job", "job", "2", 0));
    c.fake.put(running("ns-a", "job-y", "Job", "job", "2", 0));
    c.fake.put(running(
        "ns-a",
        "nb-x",
        "ReplicaSet",
        "notebook-1",
        "2",
        1000,
    ));
    c.fake.put(running(
        "ns-a",
        "nb-y",
        "ReplicaSet",
        "notebook-1",
        "2",
        1000,
    ));
    c.fake
        .put(running("ns-b", "job-1-x", "Job", "job-1", "3", 0));
    let mut pending = running("ns-b", "job-2-x", "Job", "job-2", "5", 0);
    pending["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu."}]});
    c.fake.put(pending);

    // B asks for its room back: A's Job is marked, not the NoteBook.
    let a = c
        .until("user-a", "reclaim marked", |q| {
            q["status"]["reclaim"].is_object()
        })
        .await;
    let marks = a["status"]["reclaim"].as_object().unwrap();
    assert_eq!(
        marks.keys().collect::<Vec<_>>(),
        ["batch/Job/ns-a/job"],
        "{a}"
    );
    assert_eq!(marks["batch/Job/ns-a/job"]["action"], "suspend");
    assert!(
        c.fake.get("batch", "jobs", "ns-a", "job").unwrap()["spec"]["suspend"].is_null(),
        "not before the grace period"
    );
    // After the grace period (300 s by default), it is suspended.
    c.set_clock(T0 + 6 * 60_000);
    let mut touch = c.fake.quota("pool");
    touch["metadata"]["labels"] = json!({"touched": "1"});
    c.fake.put(touch);
    for _ in 0..200 {
        if c.fake.get("batch", "jobs", "ns-a", "job").unwrap()["spec"]["suspend"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let j = c.fake.get("batch", "jobs", "ns-a", "job").unwrap();
    assert_eq!(j["spec"]["suspend"], true, "A's Job is suspended: {j}");
    let nb = c
        .fake
        .get("apps", "deployments", "ns-a", "notebook")
        .unwrap();
    assert_eq!(
        nb["spec"]["replicas"], 2,
        "the online NoteBook keeps running"
    );
    assert!(c
        .fake
        .requests()
        .iter()
        .any(|r| r.starts_with("PATCH /apis/batch/v1/namespaces/ns-a/jobs/job")));
    // Events are published in the background, after the write they tell of.
    let told = |reason: &str| {
        c.fake
            .list("events.k8s.io", "events")
            .iter()
            .any(|e| e["reason"] == reason && e["regarding"]["name"] == "job")
    };
    for reason in ["ReclaimPending", "Reclaimed"] {
        for _ in 0..100 {
            if told(reason) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            told(reason),
            "{reason}: {:#?}",
            c.fake.list("events.k8s.io", "events")
        );
    }
}

/// Seed 000's cash story with a monthly period: `ai` may spend 100
/// CPU-core-hours a calendar month (anchored on the 1st, UTC, overspend
/// forgiven). Two pods of 2 cores spend it in 25 hours; new CPU work is
/// denied while the running pod goes on (cash never stops running work);
/// at 1 December 00:00 the month closes — the pod's run is cut at the
/// boundary to the millisecond — and the budget starts again, so new work
/// is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_cash_story_with_a_monthly_period() {
    use reqwest::Method;
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota(
        "vivo",
        "",
        json!({"limits.cpu": "20", "cash/limits.cpu": "200"}),
    )
    .await;
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ai"},
                "spec": {"parent": "vivo", "hard": {"limits.cpu": "10", "cash/limits.cpu": "100"},
                         "budgets": {"cash/limits.cpu": {"period": {"kind": "monthly", "anchorDay": 1},
                                                         "overspend": "forgive"}}}})),
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");

    let train = deployment("ai", "train", "ai", 2, "2", json!({}));
    assert_eq!(admit(&c, &train).await["allowed"], true);
    c.fake.put(train);
    c.fake.put(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "train-1", "namespace": "ai",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "train", "uid": "x", "controller": true}]},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}}));
    for p in ["p1", "p2"] {
        let mut pd = pod("ai", p, "ReplicaSet", "train-1", 0, "2026-11-21T10:00:00Z");
        pd["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}});
        c.fake.put(pd);
    }
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 2")
        .await;
    c.until("ai", "window opened", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;

    // 25 hours × 4 cores: the month's 100 core-hours are spent.
    c.set_clock(T0 + 25 * HOUR);
    c.fake.remove("", "pods", "ai", "p2");
    c.until("ai", "cash spent", |q| used(q, "cash/limits.cpu") == "100")
        .await;
    let more = deployment("ai", "more", "ai", 1, "100m", json!({}));
    let r = admit(&c, &more).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("cash/limits.cpu is exhausted"),
        "{r}"
    );
    assert!(
        c.fake.get("", "pods", "ai", "p1").is_some(),
        "running work stays"
    );

    // p1 runs on into December; it stops at 01:00 on the 1st.
    const DEC_1: i64 = 1_796_083_200_000; // 2026-12-01T00:00:00Z
    c.set_clock(DEC_1 + HOUR);
    c.fake.remove("", "pods", "ai", "p1");
    let q = c
        .until("ai", "November closed", |q| {
            q["status"]["budgets"]["cash/limits.cpu"]["closed"][0].is_object()
        })
        .await;
    let b = &q["status"]["budgets"]["cash/limits.cpu"];
    let acc = |hours: i128| (hours * 3_600_000_000_000_000_000_000).to_string();
    assert_eq!(b["start"], "2026-12-01T00:00:00.000Z", "{q}");
    // November: p2 25 h × 2 + p1 (21 Nov 10:00 → 1 Dec 00:00 = 230 h) × 2.
    assert_eq!(b["closed"][0]["spent"], acc(510), "{q}");
    assert_eq!(
        b["closed"][0]["carried"],
        acc(0),
        "forgiven, not carried: {q}"
    );
    assert_eq!(b["closed"][0]["forgiven"], acc(410), "{q}");
    // December so far: p1's last hour, cut at midnight.
    assert_eq!(used(&q, "cash/limits.cpu"), "2", "{q}");
    let (st, v) = s.api(Method::GET, "/api/v1/quotas/ai/budgets", None).await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    let budget = &v["budgets"][0];
    assert_eq!(
        (budget["spent"].as_str(), budget["left"].as_str()),
        (Some("2"), Some("98")),
        "{v}"
    );
    assert_eq!(budget["closed"][0]["spent"], "510", "{v}");

    // A new month: new CPU work is admitted again.
    assert_eq!(admit(&c, &more).await["allowed"], true);
}
