//! The controller's 410-and-relist path, end to end in cluster mode: its
//! Job watch falls behind while the emulated API server compacts its
//! history (`FakeApi::bound_history`), so when the watch is opened again
//! from the last version it saw, the API server answers 410 Expired, as
//! kube-apiserver does; kube-runtime's watcher lists again, and the
//! controller, from the list, learns what it missed (a deletion whose
//! event was compacted away) and acts on it.
//!
//! The fake always compacts, as kube-apiserver does: watches are served
//! from about the last 5,000 events of each kind (`WATCH_HISTORY`), while
//! the requests, reviews and stored versions the suite's tests read in
//! full (`requests()`, `reviews()`, `quota_versions`) are kept whole
//! unless a test bounds them too with `bound_history`, as this one does
//! (to two events, so that a few writes compact what the watch missed).
use crate::cluster::{used, HOUR, T0};
use crate::queue_hold::queueing_cluster;
use crate::support::{job, jobs_of, queue_refs};
use kube::api::{DynamicObject, PostParams};
use std::time::Duration;

fn tally(c: &crate::cluster::Cluster, key: &str) -> u64 {
    c.fake.tally().get(key).copied().unwrap_or(0)
}

async fn create(c: &crate::cluster::Cluster, o: &DynamicObject) {
    jobs_of(c, "alice", "ml")
        .create(&PostParams::default(), o)
        .await
        .unwrap();
}

/// Polls (10 s at most) until `key` has been tallied more than `than`.
async fn until_tallied(c: &crate::cluster::Cluster, key: &str, than: u64) -> u64 {
    for _ in 0..200 {
        let n = tally(c, key);
        if n > than {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never more than {than} of {key}: {:#?}", c.fake.tally());
}

/// `a` (4 cpu) runs on `ml` (hard 4); `b` (2 cpu) waits in its queue.
/// The controller's Job watch is ended and opened again lagging a minute
/// behind; meanwhile `a` goes without a review (as a garbage collector's
/// deletion does) and more Jobs change than the bounded history keeps.
/// Its watch is ended again: opened from a compacted version, it is told
/// 410 Expired, and the controller lists the Jobs again (a); from the
/// list it learns `a` is gone, releases its charge and admits `b` (b).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_fallen_behind_a_compacted_history_lists_again_and_misses_nothing() {
    let c = queueing_cluster("4").await;
    create(&c, &job("a").cpu("4").dynamic()).await;
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create(&c, &job("b").cpu("2").dynamic()).await;
    c.until("ml", "b queued", |q| queue_refs(q) == ["batch/Job/ml/b"])
        .await;
    let lists = tally(&c, "list jobs");
    assert!(lists >= 1, "the controller listed the Jobs at start");

    // Its watch falls behind: ended, and opened again a minute late.
    let watches = tally(&c, "watch jobs");
    c.fake
        .lag_next_watch("batch", "jobs", Duration::from_secs(60));
    c.fake.end_watches("batch", "jobs");
    until_tallied(&c, "watch jobs", watches).await;

    // Meanwhile: `a` goes, unreviewed; Jobs bound to no quota change,
    // more of them than the history keeps.
    c.fake.bound_history(2);
    c.fake.remove("batch", "jobs", "ml", "a");
    for n in 0..10 {
        let mut filler = job(&format!("filler-{n}")).ns("elsewhere").obj();
        filler["metadata"]["labels"] = serde_json::json!({});
        c.fake.put(filler);
    }
    // The charge `a`'s admission held is kept while `a` is seen (and
    // for the reservation window after it if never seen, so the clock
    // goes past that): the controller, its watch behind, still sees `a`.
    c.set_clock(T0 + 2 * HOUR + 5 * 60_000);
    c.touch("ml", 1);
    let q = c
        .until("ml", "reconciled after the window", |q| {
            q["status"]["lastReconcileTime"] != "2026-11-21T10:00:00.000Z"
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "4", "a's going unseen yet: {q}");
    assert_eq!(queue_refs(&q), ["batch/Job/ml/b"]);
    assert_eq!(tally(&c, "expired jobs"), 0);
    assert_eq!(tally(&c, "list jobs"), lists, "no relist yet");

    // Ended again: the watch from the last version it saw is told 410,
    // and the controller lists again (a) ...
    c.fake.end_watches("batch", "jobs");
    until_tallied(&c, "expired jobs", 0).await;
    until_tallied(&c, "list jobs", lists).await;

    // ... and acts on what the list shows (b): a's charge released, b
    // admitted from the queue and charged.
    let q = c
        .until("ml", "a released, b admitted", |q| {
            used(q, "requests.cpu") == "2" && queue_refs(q).is_empty()
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "2");
    // Charged first, then unsuspended.
    for _ in 0..200 {
        if c.fake.get("batch", "jobs", "ml", "b").unwrap()["spec"]["suspend"] != true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = c.fake.get("batch", "jobs", "ml", "b").unwrap();
    assert_ne!(b["spec"]["suspend"], true, "b runs: {b}");
}

/// The baseline of the test above, with the watch keeping up: `a` gone
/// unreviewed, and the reservation window past, its charge is released
/// and `b` admitted, the result the relist must reach too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_watch_that_keeps_up_the_same_going_is_seen_at_once() {
    let c = queueing_cluster("4").await;
    create(&c, &job("a").cpu("4").dynamic()).await;
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create(&c, &job("b").cpu("2").dynamic()).await;
    c.until("ml", "b queued", |q| queue_refs(q) == ["batch/Job/ml/b"])
        .await;
    c.fake.remove("batch", "jobs", "ml", "a");
    c.set_clock(T0 + 2 * HOUR + 5 * 60_000);
    c.touch("ml", 1);
    c.until("ml", "a released, b admitted", |q| {
        used(q, "requests.cpu") == "2" && queue_refs(q).is_empty()
    })
    .await;
}
