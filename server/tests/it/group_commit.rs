//! Group commit per quota: many concurrent reviews aimed at one quota are
//! decided in batches and written once per batch, and still no charge is
//! lost or doubled and the quota is never over-admitted — on SQLite with
//! one server, and on PostgreSQL with two servers racing on one quota.

use crate::common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Sends `n` one-card Deployment CREATEs named `d{i}` to `quota`, `in_flight`
/// at once, spread over `servers`; returns (admitted, refused for
/// contention). Every other refusal must be the quota's own denial.
async fn flood(
    servers: &[Arc<Server>],
    quota: &str,
    n: usize,
    in_flight: usize,
) -> (BTreeSet<String>, usize) {
    let sem = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (server, sem, quota) = (
            servers[i % servers.len()].clone(),
            sem.clone(),
            quota.to_string(),
        );
        tasks.spawn(async move {
            let _p = sem.acquire().await.unwrap();
            let name = format!("d{i}");
            let r = server
                .review(
                    "/validate/workloads",
                    &review(
                        "deployment-create.json",
                        &format!("uid-{i}"),
                        Some(deployment(&name, &quota, 1, 1)),
                        None,
                    ),
                )
                .await;
            (name, r)
        });
    }
    let mut admitted = BTreeSet::new();
    let mut contention = 0;
    while let Some(res) = tasks.join_next().await {
        let (name, r) = res.unwrap();
        if r["allowed"] == true {
            admitted.insert(name);
            continue;
        }
        let msg = r["status"]["message"].as_str().unwrap().to_string();
        match r["status"]["code"].as_i64() {
            Some(403) => assert!(
                msg.starts_with(&format!("bizrq {quota}: requests.nvidia.com/gpu asks 1,")),
                "{msg}"
            ),
            Some(429) => contention += 1,
            other => panic!("unexpected refusal {other:?}: {msg}"),
        }
    }
    (admitted, contention)
}

/// The workloads `quota` holds a charge for, by object name.
fn held(q: &Value) -> BTreeSet<String> {
    q["status"]["workloads"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.rsplit('/').next().unwrap().to_string())
        .collect()
}

/// A metric's value summed over a server's `/metrics` lines that start with `name`.
async fn metric(server: &Server, name: &str) -> f64 {
    let (_, text) = server.get_text("/metrics").await;
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn one_quota_under_a_flood_fills_exactly_in_batches() {
    const HARD: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(Server::start(&fresh_sqlite(&dir)).await);
    s.create_quota(
        "pool",
        "",
        json!({"requests.nvidia.com/gpu": HARD.to_string(), "pods": "1000"}),
    )
    .await;
    // 32 at once: the webhook's cap of connections from one address.
    let (admitted, contention) = flood(std::slice::from_ref(&s), "pool", 200, 32).await;
    // One process: every review is decided by the quota's group commit,
    // nobody is refused for contention, and the room is used exactly.
    assert_eq!(contention, 0);
    assert_eq!(admitted.len(), HARD, "{admitted:?}");
    let q = s.quota("pool").await;
    assert_eq!(
        held(&q),
        admitted,
        "each admitted workload charged once, nothing else"
    );
    assert_eq!(
        q["status"]["used"]["requests.nvidia.com/gpu"],
        HARD.to_string()
    );

    // The writes carried batches: fewer writes than decisions.
    let decisions = metric(&s, "bizrq_admission_batch_size_sum").await;
    let writes = metric(&s, "bizrq_admission_batch_size_count").await;
    eprintln!("group commit: {decisions} decisions in {writes} batches");
    assert!(decisions >= 200.0, "{decisions}");
    assert!(
        writes < decisions,
        "{writes} batches for {decisions} decisions"
    );
    assert_eq!(
        metric(&s, "bizrq_admission_batches_failed_total").await,
        0.0
    );
    assert!(
        metric(
            &s,
            "bizrq_admission_commit_duration_seconds_count{path=\"group\"}"
        )
        .await
            >= 200.0
    );

    // Releases and new charges racing on the quota still balance.
    let gone: Vec<String> = admitted.iter().take(HARD / 2).cloned().collect();
    let mut tasks = tokio::task::JoinSet::new();
    for name in gone.clone() {
        let s = s.clone();
        tasks.spawn(async move {
            let r = s
                .review(
                    "/validate/workloads",
                    &review(
                        "deployment-delete.json",
                        &format!("del-{name}"),
                        None,
                        Some(deployment(&name, "pool", 1, 1)),
                    ),
                )
                .await;
            assert_eq!(r["allowed"], true, "a DELETE is never refused: {r}");
        });
    }
    let more = {
        let s = s.clone();
        tokio::spawn(async move {
            let mut admitted = BTreeSet::new();
            let sem = Arc::new(tokio::sync::Semaphore::new(8));
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..60 {
                let (s, sem) = (s.clone(), sem.clone());
                tasks.spawn(async move {
                    let _p = sem.acquire().await.unwrap();
                    let name = format!("e{i}");
                    let r = s
                        .review(
                            "/validate/workloads",
                            &review(
                                "deployment-create.json",
                                &format!("uid-e{i}"),
                                Some(deployment(&name, "pool", 1, 1)),
                                None,
                            ),
                        )
                        .await;
                    (name, r["allowed"] == true)
                });
            }
            while let Some(r) = tasks.join_next().await {
                let (name, ok) = r.unwrap();
                if ok {
                    admitted.insert(name);
                }
            }
            admitted
        })
    };
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let late = more.await.unwrap();
    let q = s.quota("pool").await;
    let expected: BTreeSet<String> = admitted
        .iter()
        .filter(|n| !gone.contains(n))
        .chain(late.iter())
        .cloned()
        .collect();
    assert_eq!(held(&q), expected, "no charge lost or doubled");
    assert!(expected.len() <= HARD, "over-admitted: {}", expected.len());
    assert_eq!(
        q["status"]["used"]["requests.nvidia.com/gpu"],
        expected.len().to_string()
    );
}

#[tokio::test]
async fn two_replicas_flooding_one_quota_never_over_admit() {
    const HARD: usize = 100;
    let db = fresh_postgres().await;
    let a = Arc::new(Server::start(&db).await);
    let b = Arc::new(Server::start(&db).await);
    a.create_quota(
        "pool",
        "",
        json!({"requests.nvidia.com/gpu": HARD.to_string(), "pods": "1000"}),
    )
    .await;
    let (admitted, contention) = flood(&[a.clone(), b.clone()], "pool", 400, 64).await;
    let q = a.quota("pool").await;
    eprintln!(
        "group commit, two replicas: {} admitted of {HARD}, {contention} refused for contention; \
         batches {} / {}",
        admitted.len(),
        metric(&a, "bizrq_admission_batch_size_count").await,
        metric(&b, "bizrq_admission_batch_size_count").await,
    );
    assert!(admitted.len() <= HARD, "over-admitted: {}", admitted.len());
    assert_eq!(
        held(&q),
        admitted,
        "each admitted workload charged once, nothing else"
    );
    assert_eq!(
        q["status"]["used"]["requests.nvidia.com/gpu"],
        admitted.len().to_string()
    );
    // A refusal for contention is the only way room stays unused.
    assert!(
        admitted.len() + contention >= HARD,
        "room was left unused: {} admitted, {contention} contention",
        admitted.len()
    );
    // The two replicas' batches lose swaps to each other and decide again;
    // none gives up.
    assert_eq!(contention, 0, "refused for contention");
    assert_eq!(
        metric(&a, "bizrq_admission_batches_failed_total").await,
        0.0
    );
    assert_eq!(
        metric(&b, "bizrq_admission_batches_failed_total").await,
        0.0
    );
}
