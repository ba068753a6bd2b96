//! Seed 004's story, in cluster mode through the emulated API server
//! (which calls the shipped mutating and validating webhooks for every
//! write, bizrq's own suspends and unsuspends included):
//!
//! - **per-project queues**: two projects, each a quota with its own
//!   queue (`queueing`), under one organisation; a job waits in its own
//!   project's queue and is judged against its own project's room;
//! - **job-level eviction**: what is taken back is a whole job, suspended
//!   with one write of its suspend flag, never some of its pods;
//! - **delayed preemption with cancel**: a high-priority job that waits
//!   marks a low-priority one, whose owner is warned; if the pressure goes
//!   away before the grace period ends the mark is cancelled and nothing is
//!   suspended; otherwise, once due, the low job is suspended and queued
//!   again, the high one admitted, and the low one admitted again when
//!   room frees.

use crate::cluster::{used, Cluster, T0};
use crate::preemption::{
    create, create_class, create_quota, delete, marks, patches, suspend_reviews, suspended,
    until_suspended, GRACE_MS,
};
use crate::support::{events, job, queue_refs, until_event};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_per_project_queues_job_level_eviction_delayed_preemption_with_cancel() {
    let c = Cluster::start().await;
    create_quota(&c, "org", "", json!({"hard": {"requests.cpu": "8"}})).await;
    create_quota(
        &c,
        "proj-a",
        "org",
        json!({"hard": {"requests.cpu": "4"},
            "queueing": {"mode": "Queue", "preemption": "LowerPriority"}}),
    )
    .await;
    create_quota(
        &c,
        "proj-b",
        "org",
        json!({"hard": {"requests.cpu": "4"}, "queueing": "Queue"}),
    )
    .await;
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_class(&c, "etl", 10).await;
    create_class(&c, "training", 1000).await;

    // Project A runs an evaluation (high) and a 3-pod ETL job (low);
    // project B is full with its own job.
    create(
        &c,
        &job("eval")
            .ns("a")
            .quota("proj-a")
            .cpu("1")
            .class("training")
            .obj(),
    )
    .await;
    create(
        &c,
        &job("etl")
            .ns("a")
            .quota("proj-a")
            .pods(3)
            .cpu("1")
            .class("etl")
            .obj(),
    )
    .await;
    create(
        &c,
        &job("b-run")
            .ns("b")
            .quota("proj-b")
            .pods(4)
            .cpu("1")
            .class("etl")
            .obj(),
    )
    .await;
    c.until("proj-a", "charged", |q| used(q, "requests.cpu") == "4")
        .await;
    c.until("proj-b", "charged", |q| used(q, "requests.cpu") == "4")
        .await;

    // Per-project queues: B's job waits in B's queue, A's in A's.
    create(
        &c,
        &job("b-next")
            .ns("b")
            .quota("proj-b")
            .cpu("1")
            .class("etl")
            .obj(),
    )
    .await;
    create(
        &c,
        &job("train-1")
            .ns("a")
            .quota("proj-a")
            .cpu("1")
            .class("training")
            .obj(),
    )
    .await;
    assert!(suspended(&c, "a", "train-1") && suspended(&c, "b", "b-next"));
    let a = c
        .until("proj-a", "etl marked", |q| marks(q) == ["batch/Job/a/etl"])
        .await;
    assert_eq!(queue_refs(&a), ["batch/Job/a/train-1"]);
    assert_eq!(
        queue_refs(&c.fake.quota("proj-b")),
        ["batch/Job/b/b-next"],
        "B's queue holds only B's work"
    );
    assert_eq!(
        a["status"]["reclaim"]["batch/Job/a/etl"]["origin"],
        "preempt"
    );
    // Job level: the whole job is to go, all its pods.
    assert_eq!(
        a["status"]["reclaim"]["batch/Job/a/etl"]["frees"]["requests.cpu"],
        "3"
    );
    until_event(&c, "PreemptionPending", "etl").await;
    // B's queue preempts nothing: its policy does not, and A's work is
    // never B's to take.
    assert!(marks(&c.fake.quota("proj-b")).is_empty());

    // The pressure goes away before the grace period ends: the
    // evaluation finishes, train-1 is admitted into its room, and the mark
    // is cancelled. Past the due time, nothing is suspended.
    c.set_clock(T0 + GRACE_MS / 2);
    delete(&c, "a", "eval").await;
    c.until("proj-a", "train-1 admitted, mark cancelled", |q| {
        queue_refs(q).is_empty() && marks(q).is_empty() && used(q, "requests.cpu") == "4"
    })
    .await;
    until_suspended(&c, "a", "train-1", false).await;
    until_event(&c, "PreemptionCancelled", "etl").await;
    c.set_clock(T0 + 2 * GRACE_MS);
    c.touch("proj-a", 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!suspended(&c, "a", "etl"));
    assert_eq!(patches(&c, "a", "etl"), 0);
    assert!(events(&c, "Preempted", "etl").is_empty());

    // Again: another high job waits; the ETL job is marked afresh, with a
    // new grace period.
    create(
        &c,
        &job("train-2")
            .ns("a")
            .quota("proj-a")
            .cpu("1")
            .class("training")
            .obj(),
    )
    .await;
    let a = c
        .until("proj-a", "etl marked again", |q| {
            marks(q) == ["batch/Job/a/etl"]
        })
        .await;
    assert_eq!(
        a["status"]["reclaim"]["batch/Job/a/etl"]["due"],
        "2026-11-21T10:15:00.000Z"
    );
    c.touch("proj-a", 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!suspended(&c, "a", "etl"), "not before it is due");

    // Due: the whole ETL job is suspended — one write of its suspend flag,
    // its parallelism as it was — and queued again; train-2 is admitted.
    c.set_clock(T0 + 2 * GRACE_MS + GRACE_MS);
    c.touch("proj-a", 3);
    until_suspended(&c, "a", "etl", true).await;
    assert_eq!(patches(&c, "a", "etl"), 1);
    let reviews = suspend_reviews(&c, "etl");
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["request"]["object"]["spec"]["parallelism"], 3);
    assert!(!c
        .fake
        .requests()
        .iter()
        .any(|r| r.contains("/jobs/etl/scale")));
    until_event(&c, "Preempted", "etl").await;
    let a = c
        .until("proj-a", "train-2 admitted, etl queued", |q| {
            queue_refs(q) == ["batch/Job/a/etl"]
                && q["status"]["queue"][0]["position"] == 1
                && q["status"]["workloads"]["batch/Job/a/train-2"]["uid"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("queue:"))
        })
        .await;
    until_suspended(&c, "a", "train-2", false).await;
    assert_eq!(used(&a, "requests.cpu"), "2");
    let entry = &a["status"]["queue"][0];
    assert_eq!(entry["podSets"][0]["count"], 3, "queued whole: {entry}");
    assert_eq!(entry["priority"], 10);
    assert_eq!(
        entry["since"], "2026-11-21T10:00:00.000Z",
        "queued again with the since of its charge"
    );
    assert_eq!(
        entry["reason"], "waits for 1 × requests.cpu: 2 free, 3 needed",
        "{entry}"
    );

    // Room frees: the ETL job is admitted again, whole.
    c.set_clock(T0 + 3 * GRACE_MS + 60_000);
    delete(&c, "a", "train-1").await;
    let a = c
        .until("proj-a", "etl admitted again", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "4"
        })
        .await;
    until_suspended(&c, "a", "etl", false).await;
    assert!(marks(&a).is_empty());

    // Admitted from A's queue in this order: train-1 (room freed),
    // train-2 (by preemption), etl (again, when room freed); B's job
    // still waits in B's queue, never admitted on A's room.
    let mut admitted: Vec<(String, String)> = c
        .fake
        .list("events.k8s.io", "events")
        .into_iter()
        .filter(|e| e["reason"] == "Admitted" && e["regarding"]["namespace"] == "a")
        .map(|e| {
            (
                e["eventTime"].as_str().unwrap_or("").to_string(),
                e["regarding"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for _ in 0..100 {
        if admitted.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        admitted = c
            .fake
            .list("events.k8s.io", "events")
            .into_iter()
            .filter(|e| e["reason"] == "Admitted" && e["regarding"]["namespace"] == "a")
            .map(|e| {
                (
                    e["eventTime"].as_str().unwrap_or("").to_string(),
                    e["regarding"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    }
    admitted.sort();
    let order: Vec<&str> = admitted.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(order, ["train-1", "train-2", "etl"], "{admitted:?}");
    assert_eq!(queue_refs(&c.fake.quota("proj-b")), ["batch/Job/b/b-next"]);
}
