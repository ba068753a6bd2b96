//! The room a DELETE frees (docs/queueing.md §6), in cluster mode through
//! the fake API server: a Job's DELETE is reviewed and its charge released
//! while the controller's Job watch lags a minute behind, and another
//! Job's create takes the room at once. The controller still sees the
//! deleted Job running; before `status.deleted`, its reconcile charged it
//! again from that view and the quota was stored at 8 CPUs of 4 until the
//! watch delivered the delete. Now the DELETE's release remembers the
//! object, and no stored version of the quota passes its hard.

use crate::cluster::{used, Cluster, T0};
use crate::support::{job, jobs_of};
use kube::api::{DeleteParams, PostParams};
use serde_json::{json, Value};
use std::time::Duration;

fn tally(c: &Cluster, key: &str) -> u64 {
    c.fake.tally().get(key).copied().unwrap_or(0)
}

/// Every reconcile the controller finished, whatever it wrote.
async fn reconciles(c: &Cluster) -> u64 {
    let (_, text) = c.server.get_text("/metrics").await;
    text.lines()
        .filter(|l| l.starts_with("bizrq_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Touches `ml` (the clock at `at`) and waits until a reconcile has run
/// after it.
async fn reconcile_at(c: &Cluster, at: i64, n: i64) {
    let before = reconciles(c).await;
    c.set_clock(at);
    c.touch("ml", n);
    for _ in 0..400 {
        if reconciles(c).await > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no reconcile after touch {n}");
}

fn rv(q: &Value) -> u64 {
    q["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_the_lagging_watch_still_shows_is_not_charged_again_past_hard() {
    let c = Cluster::start().await;
    c.server
        .create_quota("ml", "", json!({"requests.cpu": "4"}))
        .await;
    c.until("ml", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let jobs = jobs_of(&c, "alice", "ml");
    jobs.create(&PostParams::default(), &job("a").cpu("4").dynamic())
        .await
        .unwrap();
    c.until("ml", "a charged and seen", |q| {
        used(q, "requests.cpu") == "4" && q["status"]["workloads"]["batch/Job/ml/a"].is_object()
    })
    .await;
    // The controller sees `a` (a reconcile after the create's window).
    reconcile_at(&c, T0 + 60_000, 1).await;

    // The controller's Job watch falls a minute behind.
    let watches = tally(&c, "watch jobs");
    c.fake
        .lag_next_watch("batch", "jobs", Duration::from_secs(60));
    c.fake.end_watches("batch", "jobs");
    for _ in 0..200 {
        if tally(&c, "watch jobs") > watches {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        tally(&c, "watch jobs") > watches,
        "the Job watch was opened again"
    );
    let from = rv(&c.fake.quota("ml"));

    // `a` is deleted (its review releases the charge) and `b` takes the
    // room at once.
    jobs.delete("a", &DeleteParams::default()).await.unwrap();
    let q = c.fake.quota("ml");
    assert_eq!(used(&q, "requests.cpu"), "0", "released in the review: {q}");
    assert!(
        q["status"]["deleted"]["batch/Job/ml/a"]["uid"].is_string(),
        "the DELETE remembered: {q}"
    );
    jobs.create(&PostParams::default(), &job("b").cpu("4").dynamic())
        .await
        .unwrap();
    assert_eq!(used(&c.fake.quota("ml"), "requests.cpu"), "4");

    // Reconciles while the watch still shows `a` running.
    // (The clock moves seconds, not minutes: b's admission is kept
    // as a reservation for 2 minutes while the lagging watch hides b.)
    for n in [2, 3] {
        reconcile_at(&c, T0 + 60_000 + n * 10_000, n).await;
    }
    let q = c.fake.quota("ml");
    assert!(q["status"]["workloads"]["batch/Job/ml/a"].is_null(), "{q}");
    assert!(
        q["status"]["workloads"]["batch/Job/ml/b"].is_object(),
        "{q}"
    );
    for v in c.fake.quota_versions("ml", from) {
        let cpu: f64 = used(&v, "requests.cpu").parse().unwrap_or(0.0);
        assert!(cpu <= 4.0, "stored past hard: {v}");
    }

    // The watch catches up (opened again without the lag): it delivers
    // the delete, and the entry is forgotten at the next reconcile.
    c.fake.end_watches("batch", "jobs");
    for n in 4..200 {
        reconcile_at(&c, T0 + 100_000, n).await;
        if c.fake.quota("ml")["status"]["deleted"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let q = c.fake.quota("ml");
    assert!(q["status"]["deleted"].is_null(), "forgotten: {q}");
    assert_eq!(used(&q, "requests.cpu"), "4", "{q}");
}
