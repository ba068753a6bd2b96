//! A queue nobody can flood (docs/queueing.md, "Bounds"): one submitter
//! holds at most its share of a queue, entries whose object never appears
//! expire, standalone mode never queues, and a review whose object is not
//! the kind it names is refused, on the mutating webhook as on the
//! validating one.

use crate::cluster::{used, Cluster, T0};
use crate::common::{on_both, Server};
use crate::support::{job, jobs_of, queue_refs, Review};
use kube::api::{DynamicObject, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A Deployment of `replicas` pods of 1 cpu each, bound to `ml`.
fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "web",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}})
}

/// A Deployment sent under `kind: Job` is refused by both webhooks with a
/// message that says what is wrong, never read as a Job nor patched at
/// `/spec/suspend`. The caller checks that nothing was charged or queued.
async fn assert_kind_mismatch_refused(s: &Server) {
    for path in ["/mutate/workloads", "/validate/workloads"] {
        let r = s
            .review(
                path,
                &Review::bare_job_create("uid-mismatch", "mallory", deployment("web", 2)).obj(),
            )
            .await;
        assert_eq!(r["allowed"], false, "{path}: {r}");
        assert!(r.get("patch").is_none(), "{path}: nothing patched: {r}");
        let msg = r["status"]["message"].as_str().unwrap();
        assert_eq!(
            msg,
            "bizrq: the request is for a Job (batch) but its object says apiVersion \"apps/v1\", \
             kind \"Deployment\": refused, an object is judged only as the kind it is",
            "{path}"
        );
        assert_eq!(r["status"]["code"], 400, "{path}: {r}");
    }
}

fn unchanged(before: &Value, after: &Value) {
    assert_eq!(after["status"]["used"], before["status"]["used"]);
    assert_eq!(queue_refs(after), queue_refs(before));
}

async fn create(c: &Cluster, user: &str, obj: Value) -> Result<(), String> {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    jobs_of(c, user, "ml")
        .create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

on_both!(standalone_never_queues_and_refuses_a_kind_mismatch);

/// Standalone mode has no controller to admit from a queue: a quota with
/// `queueing: Queue` refuses what does not fit, as without queueing. The
/// mutating webhook passes the Job unchanged (no suspend), the validating
/// one refuses it, the check endpoint says so, and nothing is queued.
async fn standalone_never_queues_and_refuses_a_kind_mismatch(s: &Server) {
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": "4"}, "queueing": "Queue"}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let r = s
        .review(
            "/validate/workloads",
            &Review::bare_job_create("uid-a", "alice", job("a").cpu("3").obj()).obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(s.used("ml", "requests.cpu").await, "3");

    let b = Review::bare_job_create("uid-b", "alice", job("b").cpu("2").obj()).obj();
    let m = s.review("/mutate/workloads", &b).await;
    assert_eq!(m["allowed"], true, "{m}");
    assert!(m.get("patch").is_none(), "not suspended: {m}");
    assert!(m.get("warnings").is_none(), "no queued warning: {m}");
    let r = s.review("/validate/workloads", &b).await;
    assert_eq!(r["allowed"], false, "{r}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(msg.contains("requests.cpu asks 2, 1 left of 4"), "{msg}");

    let (st, v) = s
        .api(Method::POST, "/api/v1/check", Some(job("b").cpu("2").obj()))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["allowed"], false, "{v}");
    assert!(v.get("queued").is_none(), "{v}");
    assert!(
        !v["message"].as_str().unwrap().contains("would queue"),
        "{v}"
    );
    let q = s.quota("ml").await;
    assert!(queue_refs(&q).is_empty(), "{q}");
    assert_eq!(s.used("ml", "requests.cpu").await, "3");

    let before = s.quota("ml").await;
    assert_kind_mismatch_refused(s).await;
    unchanged(&before, &s.quota("ml").await);
}

/// Cluster mode: reviews of Jobs that are never created, all by one
/// submitter, take at most its share of the queue (the default, 100):
/// the next is refused with a message naming the limit, while another
/// user's real Job still queues. Two minutes on, the controller has
/// removed every entry whose object never appeared; the real one stays
/// and the submitter may queue again.
/// A CREATE's status is the client's own (the API server clears it only
/// after mutating admission): a Job created with a forged
/// `status.conditions: [{type: Complete}]` is read as running what its
/// spec says — queued by the mutating webhook, refused by the validating
/// one, and `/api/v1/check` says it would not fit — never admitted at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_finished_status_on_create_is_not_read_as_running_nothing() {
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
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;

    let mut forged = job("f").cpu("2").obj();
    forged["status"] = json!({"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-21T09:00:00Z"}]});
    let r = c
        .server
        .review(
            "/mutate/workloads",
            &Review::bare_job_create("uid-f", "mallory", forged.clone()).obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert!(r["patch"].is_string(), "queued, suspended: {r}");
    // Queued in the status, or with marks on by a mark in the patch
    // (docs/queueing.md §12; the object is never created here).
    if crate::cluster::marks_on() {
        let patch = String::from_utf8(crate::queue_marks::base64_decode(
            r["patch"].as_str().unwrap(),
        ))
        .unwrap();
        assert!(
            patch.contains("queue.bizrq.io/entry"),
            "it waits for its 2 cpu: {patch}"
        );
    } else {
        assert!(
            queue_refs(&c.fake.quota("ml")).contains(&"batch/Job/ml/f".to_string()),
            "it waits for its 2 cpu"
        );
    }

    let mut forged2 = job("g").cpu("2").obj();
    forged2["status"] = forged["status"].clone();
    let r = c
        .server
        .review(
            "/validate/workloads",
            &Review::bare_job_create("uid-g", "mallory", forged2.clone()).obj(),
        )
        .await;
    assert_eq!(r["allowed"], false, "{r}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(msg.contains("requests.cpu"), "{msg}");

    let (st, v) = c
        .server
        .api(Method::POST, "/api/v1/check", Some(forged2))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["allowed"], false, "{v}");
    assert_eq!(v["usage"]["requests.cpu"], "2", "{v}");
    assert_eq!(
        used(&c.fake.quota("ml"), "requests.cpu"),
        "3",
        "nothing charged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_of_jobs_never_created_cannot_fill_the_queue() {
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
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;

    let ghost = |i: usize| {
        let mut j = job(&format!("ghost-{i}")).cpu("2").obj();
        // A uid the review makes up is not the API server's: the entry
        // still reads as never seen.
        j["metadata"]["uid"] = json!(format!("forged-{i}"));
        Review::bare_job_create(&format!("uid-ghost-{i}"), "mallory", j).obj()
    };
    for i in 0..100 {
        let r = c.server.review("/mutate/workloads", &ghost(i)).await;
        assert_eq!(r["allowed"], true, "{i}: {r}");
        assert!(r["patch"].is_string(), "{i}: queued, suspended: {r}");
    }
    let r = c.server.review("/mutate/workloads", &ghost(100)).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(
        r["status"]["message"],
        "bizrq ml: batch/Job/ml/ghost-100 cannot queue: \"mallory\" already has 100 workloads \
         waiting in this queue, the most one submitter may (queueing.maxPerSubmitter 100); \
         delete waiting work or wait for it to be admitted"
    );
    let q = c.fake.quota("ml");
    if crate::cluster::marks_on() {
        // Counted in this replica's pending entries, never in the status
        // (docs/queueing.md §12): nothing of the ghosts is stored.
        assert!(queue_refs(&q).is_empty(), "{q}");
    } else {
        assert_eq!(queue_refs(&q).len(), 100);
        assert!(
            q["status"]["queue"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["uid"].as_str().unwrap_or("").is_empty()),
            "no forged uid stored"
        );
    }

    // Another user's real Job still queues behind them.
    create(&c, "bob", job("b").cpu("2").obj()).await.unwrap();
    assert_eq!(
        c.fake.get("batch", "jobs", "ml", "b").unwrap()["spec"]["suspend"],
        true
    );
    c.until("ml", "b queued and named", |q| {
        q["status"]["queue"].as_array().is_some_and(|a| {
            a.iter()
                .any(|e| e["workloadRef"] == "batch/Job/ml/b" && e["uid"] != "")
        })
    })
    .await;

    // Within the grace they stay; past it the never-seen entries go. With
    // marks on, the grace is the API server's request timeout
    // (`MARK_STORE_MS`): until then the pending marks still fill the share.
    if crate::cluster::marks_on() {
        c.set_clock(T0 + 59_000);
        c.touch("ml", 1);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let r = c.server.review("/mutate/workloads", &ghost(100)).await;
        assert_eq!(r["allowed"], false, "{r}");
    } else {
        c.set_clock(T0 + 119_000);
        c.touch("ml", 1);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(queue_refs(&c.fake.quota("ml")).len(), 101);
    }
    c.set_clock(T0 + 121_000);
    c.touch("ml", 2);
    let q = c
        .until("ml", "ghosts expired", |q| {
            queue_refs(q) == ["batch/Job/ml/b"]
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "3");
    let mut r = c.server.review("/mutate/workloads", &ghost(100)).await;
    // With marks on, forgotten by the next round after the grace.
    for _ in 0..100 {
        if r["allowed"] == true || !crate::cluster::marks_on() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        r = c.server.review("/mutate/workloads", &ghost(100)).await;
    }
    assert_eq!(r["allowed"], true, "mallory may queue again: {r}");

    let before = c.fake.quota("ml");
    assert_kind_mismatch_refused(&c.server).await;
    unchanged(&before, &c.fake.quota("ml"));
}

/// Cluster mode: a queue's share is counted by whom the work is for, not by
/// the account that sent it. Two service accounts of one namespace share
/// its share; the CronJob controller's account creating in two namespaces
/// takes each namespace's share, never one across tenants; a person counts
/// as themselves in a namespace whose share is full. Each refusal counts in
/// `bizrq_admission_queue_refused_total{cause="submitter_share"}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_accounts_and_controllers_take_the_share_of_the_namespace_they_create_in() {
    let c = Cluster::start().await;
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": "4"},
                    "queueing": {"mode": "Queue", "maxPerSubmitter": 2}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;

    let mut n = 0;
    let mut send = |user: &str, ns: &str| {
        n += 1;
        Review::bare_job_create(
            &format!("uid-{n}"),
            user,
            job(&format!("j-{n}")).ns(ns).cpu("2").obj(),
        )
        .ns_of_object()
        .obj()
    };
    let queued = |r: &Value| r["allowed"] == true && r["patch"].is_string();
    let share_full = |r: &Value, wref: &str, who: &str| {
        assert_eq!(r["allowed"], false, "{r}");
        assert_eq!(
            r["status"]["message"],
            format!(
                "bizrq ml: {wref} cannot queue: {who} already has 2 workloads waiting in this \
                 queue, the most one submitter may (queueing.maxPerSubmitter 2); delete waiting \
                 work or wait for it to be admitted"
            )
        );
    };
    let team_a = "namespace \"team-a\" (its service accounts and the controllers creating in it)";
    let team_b = "namespace \"team-b\" (its service accounts and the controllers creating in it)";

    // Two of team-a's accounts share team-a's share.
    for sa in [
        "system:serviceaccount:team-a:one",
        "system:serviceaccount:team-a:two",
    ] {
        let r = c
            .server
            .review("/mutate/workloads", &send(sa, "team-a"))
            .await;
        assert!(queued(&r), "{sa}: {r}");
    }
    let r = c
        .server
        .review(
            "/mutate/workloads",
            &send("system:serviceaccount:team-a:three", "team-a"),
        )
        .await;
    share_full(&r, "batch/Job/team-a/j-3", team_a);

    // The CronJob controller creating in team-a counts as team-a (full),
    // in team-b as team-b: one tenant's cron jobs never take another's.
    let cron = "system:serviceaccount:kube-system:cronjob-controller";
    let r = c
        .server
        .review("/mutate/workloads", &send(cron, "team-a"))
        .await;
    share_full(&r, "batch/Job/team-a/j-4", team_a);
    for _ in 0..2 {
        let r = c
            .server
            .review("/mutate/workloads", &send(cron, "team-b"))
            .await;
        assert!(queued(&r), "{r}");
    }
    let r = c
        .server
        .review("/mutate/workloads", &send(cron, "team-b"))
        .await;
    share_full(&r, "batch/Job/team-b/j-7", team_b);

    // A person in team-a counts as themselves.
    let r = c
        .server
        .review("/mutate/workloads", &send("bob", "team-a"))
        .await;
    assert!(queued(&r), "{r}");

    // With marks on, these reviews' entries are counted in the replica's
    // pending marks, never in the status (their objects are never
    // created): the refusals above are what shows the shares.
    let q = c.fake.quota("ml");
    let mut refs = queue_refs(&q);
    refs.sort();
    if crate::cluster::marks_on() {
        assert!(refs.is_empty(), "{q}");
    } else {
        assert_eq!(
            refs,
            [
                "batch/Job/team-a/j-1",
                "batch/Job/team-a/j-2",
                "batch/Job/team-a/j-8",
                "batch/Job/team-b/j-5",
                "batch/Job/team-b/j-6",
            ]
        );
    }
    let (_, text) = c.server.get_text("/metrics").await;
    assert!(
        text.contains("bizrq_admission_queue_refused_total{cause=\"submitter_share\"} 3"),
        "{text}"
    );
}
