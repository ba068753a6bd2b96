//! The mutating webhook's "admit now" holds the room it saw
//! (docs/queueing.md §4, "Admit now holds the room"): a create of a
//! queueing quota that fits is charged by the mutating review, so the
//! validating review finds the charge and confirms it; a create that loses
//! the room to a racing one queues. Nothing is refused that could wait, and
//! nothing is admitted over hard. A hold whose create never comes is
//! dropped by the controller after the reservation window.

use crate::cluster::{used, Cluster, T0};
use crate::support::{job, jobs_of, Review};
use kube::api::{DynamicObject, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

pub(crate) async fn queueing_cluster(hard: &str) -> Cluster {
    let c = Cluster::start().await;
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": hard}, "queueing": "Queue"}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    c
}

pub(crate) fn queue_len(q: &Value) -> usize {
    q["status"]["queue"].as_array().map_or(0, |a| a.len())
}

/// Twenty Jobs of 4 cpu created at once on a quota of 20 with 7 used:
/// every create succeeds (the validating webhook refuses none), three run
/// (charged once each, 19 of 20), the other seventeen are created
/// suspended and queued, and hard is never passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_on_a_queueing_quota_are_admitted_or_queued_never_refused() {
    let c = queueing_cluster("20").await;
    let a: DynamicObject = serde_json::from_value(job("a").cpu("7").obj()).unwrap();
    jobs_of(&c, "alice", "ml")
        .create(&PostParams::default(), &a)
        .await
        .unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "7")
        .await;

    let mut set = tokio::task::JoinSet::new();
    for i in 0..20 {
        let api = jobs_of(&c, "alice", "ml");
        let o: DynamicObject =
            serde_json::from_value(job(&format!("j{i}")).cpu("4").obj()).unwrap();
        set.spawn(async move {
            api.create(&PostParams::default(), &o)
                .await
                .map(|_| ())
                .map_err(|e| format!("j{i}: {e}"))
        });
    }
    let mut refused = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Err(e) = r.unwrap() {
            refused.push(e);
        }
    }
    assert!(refused.is_empty(), "refused: {refused:?}");
    // Each went through both webhooks, and the validating one let all pass.
    let validated = c
        .fake
        .reviews()
        .iter()
        .filter(|r| {
            r["webhook"] == "workloads.bizrq.io"
                && r["request"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with('j'))
        })
        .count();
    assert_eq!(validated, 20);

    let running: Vec<String> = (0..20)
        .map(|i| format!("j{i}"))
        .filter(|n| c.fake.get("batch", "jobs", "ml", n).unwrap()["spec"]["suspend"] != true)
        .collect();
    let q = c.until("ml", "17 queued", |q| queue_len(q) == 17).await;
    assert_eq!(running.len(), 3, "{running:?} {q}");
    assert_eq!(
        used(&q, "requests.cpu"),
        "19",
        "each runner charged once: {q}"
    );
    assert_eq!(queue_len(&q), 17, "{q}");
    for n in &running {
        let wref = format!("batch/Job/ml/{n}");
        assert!(q["status"]["workloads"].get(&wref).is_some(), "{wref}: {q}");
        assert!(
            !q["status"]["queue"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["workloadRef"] == wref.as_str()),
            "{wref} both runs and waits: {q}"
        );
    }
}

/// A review sent only to the mutating webhook (a create that another
/// webhook or the API server then fails) holds its room: charged, so a
/// racing create cannot take it. The validating review never comes and
/// the object never appears: within the reservation window the hold
/// stays, past it the controller drops it and the room is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutating_hold_whose_create_never_comes_is_released() {
    let c = queueing_cluster("4").await;
    let a: DynamicObject = serde_json::from_value(job("a").cpu("1").obj()).unwrap();
    jobs_of(&c, "alice", "ml")
        .create(&PostParams::default(), &a)
        .await
        .unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "1")
        .await;

    let review = Review::bare_job_create("uid-ghost", "mallory", job("ghost").cpu("2").obj()).obj();
    let r = c.server.review("/mutate/workloads", &review).await;
    assert_eq!(r["allowed"], true, "{r}");
    assert!(r["patch"].is_null(), "fits now, not suspended: {r}");
    let q = c.fake.quota("ml");
    assert_eq!(
        used(&q, "requests.cpu"),
        "3",
        "the room it saw is held: {q}"
    );
    assert!(q["status"]["workloads"].get("batch/Job/ml/ghost").is_some());

    // The held room is not given to another: b (2) waits.
    let b: DynamicObject = serde_json::from_value(job("b").cpu("2").obj()).unwrap();
    jobs_of(&c, "alice", "ml")
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
    assert_eq!(
        c.fake.get("batch", "jobs", "ml", "b").unwrap()["spec"]["suspend"],
        true
    );

    // Within the window the hold stays.
    c.set_clock(T0 + 119_000);
    c.touch("ml", 1);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let q = c.fake.quota("ml");
    assert!(
        q["status"]["workloads"].get("batch/Job/ml/ghost").is_some(),
        "{q}"
    );
    // Past it the hold is dropped and the room goes to b from the queue.
    c.set_clock(T0 + 121_000);
    c.touch("ml", 2);
    let q = c
        .until("ml", "ghost's hold dropped, b admitted", |q| {
            q["status"]["workloads"].get("batch/Job/ml/ghost").is_none()
                && used(q, "requests.cpu") == "3"
                && queue_len(q) == 0
        })
        .await;
    assert!(
        q["status"]["workloads"].get("batch/Job/ml/b").is_some(),
        "{q}"
    );
}

const QUOTA_ML: &str = "/apis/bizrq.io/v1/bizgroupresourcequotas/ml";

/// The GETs of the quota `ml` the fake API server has served (not its
/// watch), whole or of its metadata alone.
fn quota_gets(c: &Cluster) -> usize {
    c.fake
        .requests()
        .iter()
        .filter(|r| {
            r.strip_prefix(&format!("GET {QUOTA_ML}"))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'))
        })
        .count()
}

/// The whole reads of the quota `ml` the fake API server has served: its
/// GETs less those answered with the metadata alone.
fn quota_reads(c: &Cluster) -> usize {
    let metadata = c
        .fake
        .metadata_gets()
        .iter()
        .filter(|p| *p == QUOTA_ML)
        .count();
    quota_gets(c) - metadata
}

/// The controller's unsuspend of a workload its round admitted (one per
/// admission from a queue) is decided on the replica's newest copy, which
/// shows the round's charge of that very object: no request for the quota
/// at all, not even its version. The same release by anyone else is
/// judged on a fresh whole read, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_own_release_is_decided_without_a_read_of_its_quota() {
    let c = queueing_cluster("4").await;
    let jobs = jobs_of(&c, "alice", "ml");
    let a: DynamicObject = serde_json::from_value(job("a").cpu("4").obj()).unwrap();
    jobs.create(&PostParams::default(), &a).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    // b waits; a's end gives its room to b, admitted by a round and
    // unsuspended by the controller.
    let b: DynamicObject = serde_json::from_value(job("b").cpu("4").obj()).unwrap();
    jobs.create(&PostParams::default(), &b).await.unwrap();
    jobs.delete("a", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    c.until_round_charged("ml", "batch/Job/ml/b", "b admitted by a round")
        .await;
    let stored = c.until_job_released("b").await;
    assert_ne!(stored["spec"]["suspend"], true, "b released: {stored}");
    let mut held = stored.clone();
    held["spec"]["suspend"] = true.into();
    let release = |user: &str| {
        Review::update("release-b", stored.clone(), held.clone())
            .of_job()
            .ns("ml")
            .name("b")
            .user(user)
            .obj()
    };
    let own = crate::fakeapi::BIZRQ_USER;
    // A reconcile may read the quota meanwhile: a review with no read of
    // its own is what is looked for (every one would read, were the
    // review to read).
    let mut unread = false;
    for _ in 0..5 {
        let before = quota_gets(&c);
        let m = c.server.review("/mutate/workloads", &release(own)).await;
        assert_eq!(m["allowed"], true, "{m}");
        assert!(m["patch"].is_null(), "passed on as it is: {m}");
        if quota_gets(&c) == before {
            unread = true;
            break;
        }
    }
    assert!(unread, "the own release read the quota every time");
    let before = quota_reads(&c);
    let m = c
        .server
        .review("/mutate/workloads", &release("alice"))
        .await;
    assert_eq!(m["allowed"], true, "{m}");
    assert!(
        quota_reads(&c) > before,
        "anyone else's release is judged on a fresh whole read"
    );
}
