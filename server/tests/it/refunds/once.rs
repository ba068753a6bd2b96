//! A refund is made once, whatever fails: two leaders racing on one mark;
//! a job marked again after its stop failed; a ledger append that fails is
//! appended by a retry; a controller that never appended it is outlived.
use super::*;

/// The budget ledger of `user-a`'s key as stored: (reason, amount in acc,
/// note) per entry.
async fn ledger_rows(db: &str) -> Vec<(String, i128, String)> {
    const Q: &str = "SELECT reason, amount, note FROM budget_ledger WHERE quota = 'user-a' AND key = 'cash/requests.cpu'";
    let rows: Vec<(String, String, String)> = if db.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(db).await.unwrap();
        let r = sqlx::query_as(Q).fetch_all(&pool).await.unwrap();
        pool.close().await;
        r
    } else {
        let pool = sqlx::SqlitePool::connect(db).await.unwrap();
        let r = sqlx::query_as(Q).fetch_all(&pool).await.unwrap();
        pool.close().await;
        r
    };
    rows.into_iter()
        .map(|(r, a, n)| (r, a.parse().unwrap(), n))
        .collect()
}

/// Seed 004 up to the mark: `pool` (18 cpu) over `user-a` (6, max 10,
/// refunding `lastStretch` every 30 min) and `user-b` (12); `train` and
/// `sweep` of A run from 10:00 (`sweep` borrowing), B's Job-2 cannot be
/// scheduled, and `sweep` is marked. Returns the mark (`marked`).
async fn seed_004_until_marked(c: &Cluster) -> Value {
    seed_004_quotas(c).await;
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
    for j in [&train, &sweep, &job1, &job2] {
        create_job(c, j).await.unwrap();
    }
    c.until("user-a", "both reserved", |q| {
        q["status"]["reservations"][KEY]
            .as_object()
            .is_some_and(|m| m.len() == 2)
    })
    .await;
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
    let q = c
        .until("user-a", "sweep marked", |q| {
            q["status"]["reclaim"].is_object()
        })
        .await;
    let mark = q["status"]["reclaim"][SWEEP]["marked"].clone();
    assert!(mark.is_string(), "{q}");
    mark
}

/// Seed 004's reclaim with two controllers at once, sharing the history
/// database `db`. Production runs two replicas and one Lease: the leader
/// runs the controller, the other follows. A leader whose renewal hangs (a
/// stalled connection: no answer, no error) stops at its renew deadline
/// (10 s), before its 15 s Lease can expire for the other replica; two
/// controllers still run at once when a stall outlasts the Lease without
/// the leader's deadline passing — its process paused (a stopped
/// container, a long GC or swap stall: its timers do not fire), or a renew
/// deadline configured long against the stall. Replica A models that: its
/// renew deadline (10 min, set past the flag's check) outlasts the test,
/// and `hang_lease_calls` on its own link to the API server stalls its
/// renewals while B takes the expired Lease over. Both then reconcile
/// `pool` when `sweep`'s mark falls due, and the fake API server holds
/// their refund writes of `user-a`'s status until both have arrived (a
/// replica sends one status write of a quota at a time, so two held at
/// once are both replicas'), then lets them meet at the compare-and-swap.
async fn two_leaders_refund_one_mark(db: &str) {
    let fake = FakeApi::new();
    let link_a = fake.own_link();
    let a = Cluster::replica_configured(
        link_a.clone(),
        tempfile::tempdir().unwrap(),
        T0,
        "bizrq-0",
        true,
        db,
        // A stalled leader whose stall outlasts the Lease: its renew
        // deadline does not pass while this test runs. The CLI refuses a
        // deadline not below the Lease's 15 s; the field is set directly.
        |args| args.lease_renew_deadline_seconds = 600,
    )
    .await;
    a.until_requested("lease create", |r| {
        r.starts_with("POST /apis/coordination.k8s.io/v1/namespaces/bizrq-system/leases")
    })
    .await;
    a.until_metric("bizrq_leader 1").await;
    let b = Cluster::replica_on(
        fake.own_link(),
        tempfile::tempdir().unwrap(),
        T0,
        "bizrq-1",
        false,
        db,
    )
    .await;
    let mark = seed_004_until_marked(&a).await;

    // A's Lease renewal hangs; a minute on, B finds the Lease expired and
    // takes it over. A never hears it, nor reaches its renew deadline:
    // both run the controller.
    link_a.hang_lease_calls(true);
    let t1 = T0 + MIN;
    a.set_clock(t1);
    b.set_clock(t1);
    for _ in 0..400 {
        let holder = fake
            .get(
                "coordination.k8s.io",
                "leases",
                "bizrq-system",
                "bizrq-controller",
            )
            .unwrap()["spec"]["holderIdentity"]
            .clone();
        if holder == "bizrq-1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.until_metric("bizrq_leader 1").await;
    // B's controller has synced its own picture of the pods.
    let (_, text) = a.server.get_text("/metrics").await;
    let runs = text
        .lines()
        .find(|l| l.starts_with("bizrq_controller_tracked{kind=\"pod_runs\"}"))
        .unwrap()
        .to_string();
    b.until_metric(&runs).await;
    assert_eq!(
        metric(&a.server, "bizrq_leader").await,
        1.0,
        "A still leads"
    );
    for quota in ["user-a", "user-b"] {
        a.until(quota, "reconciled at 10:01", |q| {
            q["status"]["lastReconcileTime"] == "2026-11-21T10:01:00.000Z"
        })
        .await;
    }
    // What racing accrual writes left to retry (5 s backoff) settles.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (refunded_a, refunded_b) = (
        metric(
            &a.server,
            "bizrq_reclaim_actions_total{result=\"refunded\"}",
        )
        .await,
        metric(
            &b.server,
            "bizrq_reclaim_actions_total{result=\"refunded\"}",
        )
        .await,
    );
    assert_eq!((refunded_a, refunded_b), (0.0, 0.0));
    let conflicts = (
        metric(&a.server, "bizrq_cas_conflicts_total").await,
        metric(&b.server, "bizrq_cas_conflicts_total").await,
    );

    // 10:50: the mark is long due. Both controllers reconcile `pool`; their
    // refund writes of `user-a` meet.
    let race = fake.race_writes(
        USER_A_STATUS,
        2,
        |b| b["status"]["refunds"][SWEEP].is_object(),
        Duration::from_secs(60),
    );
    let t2 = T0 + 50 * MIN;
    a.set_clock(t2);
    b.set_clock(t2);
    a.touch("pool", 1);
    let mut raced = Vec::new();
    for _ in 0..1400 {
        raced = race.lock().unwrap().clone();
        if raced.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        raced.len(),
        2,
        "both controllers tried the refund: {raced:#?}"
    );
    for (body, _, together) in &raced {
        assert!(together, "held until both had arrived: {body}");
        assert_eq!(body["status"]["refunds"][SWEEP]["mark"], mark, "{body}");
    }
    until_suspended(&a, "ns-a", "sweep").await;
    let mut codes: Vec<u16> = raced.iter().map(|r| r.1).collect();
    codes.sort();
    assert_eq!(codes, [200, 409], "one swap won, one lost: {raced:#?}");
    // The loser re-read and decided again: no second refund.
    let refund = per_mille(4, 20 * MIN as i128);
    a.touch("user-a", 2);
    let expected = per_mille(8, 50 * MIN as i128) - refund;
    let q = a
        .until("user-a", "refunded once and billed to 10:50", |q| {
            q["status"]["refunds"].is_object()
                && q["status"]["lastReconcileTime"] == "2026-11-21T10:50:00.000Z"
                && accrued(q) == expected
        })
        .await;
    let r = &q["status"]["refunds"];
    assert_eq!(r.as_object().unwrap().len(), 1, "{q}");
    assert_eq!(r[SWEEP]["mark"], mark, "{q}");
    assert_eq!(r[SWEEP]["from"], "2026-11-21T10:30:00.000Z", "{q}");
    assert_eq!(r[SWEEP]["to"], "2026-11-21T10:50:00.000Z", "{q}");
    assert_eq!(r[SWEEP]["amounts"][KEY], (refund * 1000).to_string());
    let refunded = metric(
        &a.server,
        "bizrq_reclaim_actions_total{result=\"refunded\"}",
    )
    .await
        + metric(
            &b.server,
            "bizrq_reclaim_actions_total{result=\"refunded\"}",
        )
        .await;
    assert_eq!(refunded, 1.0, "one replica took the refund");
    let lost = metric(&a.server, "bizrq_cas_conflicts_total").await
        + metric(&b.server, "bizrq_cas_conflicts_total").await;
    assert!(
        lost > conflicts.0 + conflicts.1,
        "the loser's swap conflicted"
    );

    // Later reconciles of both, past another grace, give nothing more.
    // Sweep's pods stop at 10:50 (both controllers see them go first:
    // until then they run and are billed).
    const PODS: &str = "bizrq_controller_tracked{kind=\"pods\"}";
    let pods = metric(&a.server, PODS).await;
    fake.remove("", "pods", "ns-a", "sweep-x");
    fake.remove("", "pods", "ns-a", "sweep-y");
    for c in [&a, &b] {
        c.until_metric(&format!("{PODS} {}", pods - 2.0)).await;
    }
    let t3 = T0 + 60 * MIN;
    a.set_clock(t3);
    b.set_clock(t3);
    a.touch("pool", 3);
    a.touch("user-a", 4);
    let q = a
        .until("user-a", "billed to 11:00", |q| {
            q["status"]["lastReconcileTime"] == "2026-11-21T11:00:00.000Z"
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let q2 = fake.quota("user-a");
    assert_eq!(q2["status"]["refunds"], q["status"]["refunds"], "{q2}");
    assert_eq!(q2["status"]["refunds"][SWEEP]["mark"], mark, "{q2}");
    // Train's 4 cores, 10:50 to 11:00, and nothing else.
    assert_eq!(
        accrued(&q2),
        expected + per_mille(4, 10 * MIN as i128),
        "{q2}"
    );
    // The loser's reclaim, deciding again on the fresh read from a view
    // that still showed `sweep` borrowing, may have marked it anew: that
    // mark is cleared once the suspension gave the room back, not due.
    assert!(
        q2["status"]["reclaim"]
            .as_object()
            .is_none_or(|m| m.is_empty()),
        "{q2}"
    );
    let events: Vec<Value> = fake
        .list("events.k8s.io", "events")
        .into_iter()
        .filter(|e| e["reason"] == "Refunded")
        .collect();
    assert_eq!(events.len(), 1, "{events:#?}");

    // The ledger: one refund entry set, of that mark, and in all what the
    // status accrued.
    let want = quota::budget::from_cash_accrued(accrued(&q2));
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows = ledger_rows(db).await;
        if rows.iter().map(|r| r.1).sum::<i128>() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rows.iter().map(|r| r.1).sum::<i128>(),
        want,
        "the ledger is what the status accrued: {rows:#?}"
    );
    let refunds: Vec<&(String, i128, String)> = rows.iter().filter(|r| r.0 == "refund").collect();
    assert_eq!(
        refunds.iter().map(|r| r.1).sum::<i128>(),
        -(refund * 1000),
        "{rows:#?}"
    );
    let notes: std::collections::BTreeSet<&str> = refunds.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(notes.len(), 1, "one refund, of one mark: {notes:?}");
    assert!(
        notes.iter().all(|n| n.contains(mark.as_str().unwrap())),
        "{notes:?}"
    );

    // A's renewal comes back: it finds B holding the Lease and stops.
    link_a.hang_lease_calls(false);
    a.until_metric("bizrq_leader 0").await;
    a.running.shutdown().await;
    b.running.shutdown().await;
}

/// Issue 13: two controllers racing on one refund mark, sharing one
/// PostgreSQL database, three times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leaders_racing_on_one_mark_refund_it_once_postgres() {
    for _ in 0..3 {
        two_leaders_refund_one_mark(&fresh_postgres().await).await;
    }
}

/// The same race with both replicas on one SQLite file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leaders_racing_on_one_mark_refund_it_once_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    two_leaders_refund_one_mark(&fresh_sqlite(&dir)).await;
}

/// A reclaim whose stop never got through (the Job's suspend patch is
/// lost: 503, nothing written) keeps its refund — the mark is gone either
/// way — and the Job runs on, still borrowing, so it is marked again and
/// stopped at the next grace. That second refund gives back only what ran
/// since the first one ended (10:50 → 10:56), not the stretch from the
/// last checkpoint again (10:30 → 10:56): a stretch of a run is refunded
/// once, whatever the marks. In the status, the Events and the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_marked_again_after_its_stop_failed_is_not_refunded_twice() {
    let c = Cluster::start().await;
    let db = crate::common::fresh_sqlite(&c._dir);
    let first = seed_004_until_marked(&c).await;
    c.fake
        .unreachable_next("/apis/batch/v1/namespaces/ns-a/jobs/sweep", 1);
    c.set_clock(T0 + 50 * MIN);
    c.touch("pool", 1);
    c.until("user-a", "refunded at 10:50", |q| {
        q["status"]["refunds"][SWEEP]["mark"] == first
    })
    .await;
    c.until_metric("bizrq_reclaim_actions_total{result=\"failed\"} 1")
        .await;
    assert!(c.fake.get("batch", "jobs", "ns-a", "sweep").unwrap()["spec"]["suspend"].is_null());
    // Still borrowing, B still waiting: marked again at 10:50.
    c.touch("pool", 2);
    let q = c
        .until("user-a", "marked again", |q| {
            q["status"]["reclaim"][SWEEP]["marked"] == "2026-11-21T10:50:00.000Z"
        })
        .await;
    let second = q["status"]["reclaim"][SWEEP]["marked"].clone();
    // 10:56: past the grace, stopped this time.
    c.set_clock(T0 + 56 * MIN);
    c.touch("pool", 3);
    until_suspended(&c, "ns-a", "sweep").await;
    c.touch("user-a", 4);
    let first_refund = per_mille(4, 20 * MIN as i128);
    let second_refund = per_mille(4, 6 * MIN as i128);
    let expected = per_mille(8, 56 * MIN as i128) - first_refund - second_refund;
    let q = c
        .until("user-a", "refunded again and billed to 10:56", |q| {
            q["status"]["refunds"][SWEEP]["mark"] == second
                && q["status"]["lastReconcileTime"] == "2026-11-21T10:56:00.000Z"
        })
        .await;
    let r = &q["status"]["refunds"][SWEEP];
    assert_eq!(r["from"], "2026-11-21T10:50:00.000Z", "{q}");
    assert_eq!(r["to"], "2026-11-21T10:56:00.000Z", "{q}");
    assert_eq!(r["amounts"][KEY], (second_refund * 1000).to_string(), "{q}");
    assert_eq!(accrued(&q), expected, "{q}");
    let notes: Vec<String> = c
        .fake
        .list("events.k8s.io", "events")
        .into_iter()
        .filter(|e| e["reason"] == "Refunded")
        .map(|e| e["note"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(notes.len(), 2, "{notes:#?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("(2026-11-21T10:50:00.000Z to 2026-11-21T10:56:00.000Z)")),
        "{notes:#?}"
    );
    // The ledger: both refunds, each of its own mark, once; in all what
    // the status accrued.
    let want = quota::budget::from_cash_accrued(expected);
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows = ledger_rows(&db).await;
        if rows.iter().map(|r| r.1).sum::<i128>() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(rows.iter().map(|r| r.1).sum::<i128>(), want, "{rows:#?}");
    let refunded: i128 = rows.iter().filter(|r| r.0 == "refund").map(|r| r.1).sum();
    assert_eq!(
        refunded,
        -(first_refund + second_refund) * 1000,
        "{rows:#?}"
    );
    c.running.shutdown().await;
}

/// The refund's ledger append fails at first (the database refuses refund
/// rows for a moment): the refund stands in the status, and a retry puts
/// its entries in the ledger — once — so the ledger's total is still what
/// the status accrued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_whose_ledger_append_fails_is_appended_by_a_retry() {
    let c = Cluster::start().await;
    let db = crate::common::fresh_sqlite(&c._dir);
    let mark = seed_004_until_marked(&c).await;
    let pool = refuse_refund_rows(&db).await;
    c.set_clock(T0 + 50 * MIN);
    c.touch("pool", 1);
    until_suspended(&c, "ns-a", "sweep").await;
    until_first_event(&c, "Refunded", "sweep").await;
    // The first attempt has met the trigger; the database heals.
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("DROP TRIGGER refuse_refunds")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    c.touch("user-a", 2);
    refunded_once_and_in_the_ledger(&c, &db, &mark).await;
    c.running.shutdown().await;
}

/// The refund's ledger append fails for longer than its retries last (as
/// if the controller died right after the status write that took the
/// refund): its entries rode in that write's `status.ledgerOutbox`
/// (`extra`), so the next reconcile appends them before it writes over
/// the outbox — refusing to write at all while it cannot — and the ledger
/// still ends equal to what the status accrued, the refund in it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_outlives_a_controller_that_never_appended_it() {
    let c = Cluster::start().await;
    let db = crate::common::fresh_sqlite(&c._dir);
    let mark = seed_004_until_marked(&c).await;
    let pool = refuse_refund_rows(&db).await;
    c.set_clock(T0 + 50 * MIN);
    c.touch("pool", 1);
    until_suspended(&c, "ns-a", "sweep").await;
    until_first_event(&c, "Refunded", "sweep").await;
    let q = c
        .until("user-a", "the refund in the outbox", |q| {
            q["status"]["refunds"][SWEEP]["mark"] == mark
                && q["status"]["ledgerOutbox"]["extra"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|e| e["reason"] == "refund"))
        })
        .await;
    assert!(q["status"]["ledgerOutbox"]["extra"].is_array());
    // Every retry of the spawned append (about 6 s of backoff) fails.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(ledger_rows(&db).await.iter().all(|r| r.0 != "refund"));
    // A reconcile meanwhile cannot append the outbox: it writes nothing.
    c.touch("user-a", 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stuck = c
        .fake
        .get("bizrq.io", "bizgroupresourcequotas", "", "user-a")
        .unwrap();
    assert!(
        stuck["status"]["ledgerOutbox"]["extra"].is_array(),
        "{stuck:#}"
    );
    // The database heals: the next reconcile appends, then writes on.
    sqlx::query("DROP TRIGGER refuse_refunds")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    c.touch("user-a", 3);
    refunded_once_and_in_the_ledger(&c, &db, &mark).await;
    c.running.shutdown().await;
}

/// A trigger that makes the history database refuse refund rows (drop
/// `refuse_refunds` to heal it); the pool it was made on.
async fn refuse_refund_rows(db: &str) -> sqlx::SqlitePool {
    let pool = sqlx::SqlitePool::connect(db).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_refunds BEFORE INSERT ON budget_ledger \
         WHEN NEW.reason = 'refund' BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool
}

/// `user-a` refunded `mark`'s 20 minutes of 4 cores once and billed to
/// 10:50, and the ledger in `db` equal to its accrual with the refund in
/// it once.
async fn refunded_once_and_in_the_ledger(c: &Cluster, db: &str, mark: &Value) {
    let refund = per_mille(4, 20 * MIN as i128);
    let expected = per_mille(8, 50 * MIN as i128) - refund;
    let q = c
        .until("user-a", "refunded and billed to 10:50", |q| {
            q["status"]["refunds"][SWEEP]["mark"] == *mark
                && q["status"]["lastReconcileTime"] == "2026-11-21T10:50:00.000Z"
                && accrued(q) == expected
        })
        .await;
    let want = quota::budget::from_cash_accrued(accrued(&q));
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows = ledger_rows(db).await;
        if rows.iter().map(|r| r.1).sum::<i128>() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(rows.iter().map(|r| r.1).sum::<i128>(), want, "{rows:#?}");
    let refunded: i128 = rows.iter().filter(|r| r.0 == "refund").map(|r| r.1).sum();
    assert_eq!(refunded, -refund * 1000, "{rows:#?}");
}
