//! Safe admission end to end (docs/budgets.md §2, §9): a Job that
//! declares its run time reserves cards × hours in the same write as its
//! charge, and is refused — by the webhook and by `POST /api/v1/check`,
//! in the words of docs/budgets.md "Denials" — when what is left after the
//! open reservations does not cover it; use moves from the reservation to
//! spent; a DELETE settles it; a retried review reserves nothing twice;
//! the policy (withoutRunTime, reservationCap) is validated and applied;
//! the budgets API shows the open reservations. On SQLite and PostgreSQL,
//! two replicas racing on one PostgreSQL budget, and in cluster mode over
//! the fake API server calling the shipped webhooks. Time is the service's
//! clock, so every amount is exact.

use crate::common::*;
use crate::support::{job, jobs_of, review_job_create, Review};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const T0: i64 = 1_795_255_200_000; // 2026-11-21T10:00:00Z
const HOUR: i64 = 3_600_000;
/// One card-hour at face value, in acc (docs/budgets.md §0).
const CARD_HOUR: i128 = 3_600_000_000_000_000_000_000;

async fn delete(s: &Server, uid: &str, j: &Value) {
    let r = s
        .review(
            "/validate/workloads",
            &Review::delete(uid, j.clone()).of_job().ns("ml").obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
}

fn denial(r: &Value) -> &str {
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 403, "{r}");
    r["status"]["message"].as_str().unwrap()
}

/// `status.reservations[CASH]` as workload → (reserved, used) in acc.
fn reservations(q: &Value) -> BTreeMap<String, (i128, i128)> {
    let amount = |v: &Value| v.as_str().unwrap().parse::<i128>().unwrap();
    q["status"]["reservations"][CASH]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(w, r)| (w.clone(), (amount(&r["reserved"]), amount(&r["used"]))))
                .collect()
        })
        .unwrap_or_default()
}

/// The budget's line of `GET /api/v1/quotas/{name}/budgets`.
async fn budget(s: &Server, name: &str) -> Value {
    let (st, v) = s
        .api(Method::GET, &format!("/api/v1/quotas/{name}/budgets"), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["budgets"][0].clone()
}

async fn set_budgets(s: &Server, name: &str, parent: &str, hard: Value, budgets: Value) -> Value {
    let (st, v) = s
        .api(
            Method::PUT,
            &format!("/api/v1/quotas/{name}"),
            Some(json!({"metadata": {"name": name},
                "spec": {"parent": parent, "hard": hard, "budgets": budgets}})),
        )
        .await;
    if st == StatusCode::OK {
        Value::Null
    } else {
        assert!(
            st == StatusCode::UNPROCESSABLE_ENTITY || st == StatusCode::BAD_REQUEST,
            "{st}: {v}"
        );
        v
    }
}

async fn standalone(url: &str) -> (bizrq::Running, Arc<std::sync::atomic::AtomicI64>) {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (clock, c) = test_clock(T0);
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    (running, clock)
}

/// The whole story on one database.
async fn reserve_use_settle_and_refuse(url: &str) {
    let (running, clock) = standalone(url).await;
    let s = Server::in_process(&running);
    s.create_quota("root", "", json!({GPU: "64", CASH: "1000"}))
        .await;
    s.create_quota("team", "root", json!({GPU: "16", CASH: "100"}))
        .await;

    // 8 cards for 10 h: 80 of 100 card-hours held back.
    let a = job("a").quota("team").cards(8).deadline(10 * 3600).obj();
    let r = review_job_create(&s, "u-a", None, &a).await;
    assert_eq!(r["allowed"], true, "{r}");
    let q = s.quota("team").await;
    let held = reservations(&q);
    assert_eq!(
        held.get("batch/Job/ml/a").map(|r| r.0),
        Some(80 * CARD_HOUR),
        "{q}"
    );
    let b = budget(&s, "team").await;
    assert_eq!(
        b["reservations"],
        json!({"open": 1, "reserved": "80", "cap": null, "leftAfterReservations": "20"})
    );

    // 8 cards for 3 h need 24: refused by the webhook and the dry run,
    // in the same words, and nothing changes.
    let bj = job("b").quota("team").cards(8).max_runtime("3h").obj();
    let said = "bizrq team: cash/requests.nvidia.com/gpu needs 24 card-hours for Job ml/b \
                (8 × nvidia.com/gpu for 3h), 20 left (100 this period, 0 spent, 80 reserved)";
    assert_eq!(denial(&review_job_create(&s, "u-b", None, &bj).await), said);
    let (st, v) = s.api(Method::POST, "/api/v1/check", Some(bj.clone())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (v["allowed"].as_bool(), v["message"].as_str()),
        (Some(false), Some(said))
    );
    let after = s.quota("team").await;
    assert_eq!(after["status"], q["status"], "a denial changes nothing");

    // The API server retries a's review: nothing is reserved twice.
    assert_eq!(
        review_job_create(&s, "u-a", None, &a).await["allowed"],
        true
    );
    assert_eq!(reservations(&s.quota("team").await), held);

    // 3 h on: a used 24 card-hours, moved from its reservation to spent,
    // so what is left after reservations did not change.
    clock.store(T0 + 3 * HOUR, Ordering::SeqCst);
    let b = budget(&s, "team").await;
    assert_eq!(
        (b["spent"].as_str(), b["left"].as_str()),
        (Some("24"), Some("76"))
    );
    assert_eq!(b["reservations"]["reserved"], "56", "{b}");
    assert_eq!(b["reservations"]["leftAfterReservations"], "20", "{b}");
    // b for 2 h (16) fits in those 20 now.
    let b2 = job("b").quota("team").cards(8).deadline(2 * 3600).obj();
    assert_eq!(
        review_job_create(&s, "u-b2", None, &b2).await["allowed"],
        true
    );
    let q = s.quota("team").await;
    let held = reservations(&q);
    assert_eq!(
        held["batch/Job/ml/a"],
        (80 * CARD_HOUR, 24 * CARD_HOUR),
        "{q}"
    );
    assert_eq!(held["batch/Job/ml/b"], (16 * CARD_HOUR, 0), "{q}");

    // a is deleted: its reservation is settled, the 56 it still held are
    // released; what it used stays spent.
    delete(&s, "d-a", &a).await;
    let q = s.quota("team").await;
    assert_eq!(
        reservations(&q).keys().collect::<Vec<_>>(),
        ["batch/Job/ml/b"]
    );
    let b = budget(&s, "team").await;
    assert_eq!(
        (b["spent"].as_str(), b["reservations"]["reserved"].as_str()),
        (Some("24"), Some("16"))
    );
    assert_eq!(b["reservations"]["leftAfterReservations"], "60", "{b}");

    // Without a declared run time (policy admit): admitted, nothing reserved.
    let c = job("c").quota("team").cards(1).obj();
    assert_eq!(
        review_job_create(&s, "u-c", None, &c).await["allowed"],
        true
    );
    assert_eq!(reservations(&s.quota("team").await).len(), 1);
    delete(&s, "d-c", &c).await;

    // A declaration that is wrong is refused where a budget reserves on it.
    let e = job("e").quota("team").cards(1).max_runtime("1.5h").obj();
    let m = denial(&review_job_create(&s, "u-e", None, &e).await).to_string();
    assert!(
        m.starts_with(
            "bizrq team: cash/requests.nvidia.com/gpu cannot reserve for Job ml/e: \
             annotation biz.group.resource.quota/max-runtime is '1.5h'"
        ),
        "{m}"
    );

    // Policies are validated, bounded, and then apply.
    let hard = json!({GPU: "16", CASH: "100"});
    for (budgets, says) in [
        (
            json!({CASH: {"reservationCap": "-5"}}),
            "reservationCap -5 is negative",
        ),
        (
            json!({CASH: {"reservationCap": "2000000000000"}}),
            "more than the 1000000000000 resource-hours a cap may be",
        ),
        (
            json!({CASH: {"withoutRunTime": {"kind": "reserveDefault", "horizonSeconds": 0}}}),
            "horizonSeconds 0 must be between 1 and 31622400",
        ),
        (
            json!({CASH: {"withoutRunTime": {"kind": "sometimes"}}}),
            "sometimes",
        ),
    ] {
        let v = set_budgets(&s, "team", "root", hard.clone(), budgets).await;
        assert!(v.to_string().contains(says), "{says}: {v}");
    }
    let ok = set_budgets(
        &s,
        "team",
        "root",
        hard.clone(),
        json!({CASH: {"withoutRunTime": {"kind": "refuse"}, "reservationCap": "30"}}),
    )
    .await;
    assert!(ok.is_null(), "{ok}");
    assert_eq!(
        denial(&review_job_create(&s, "u-d", None, &job("d").quota("team").cards(1).obj()).await),
        "bizrq team: cash/requests.nvidia.com/gpu admits only workloads that declare a maximum \
         run time: set spec.activeDeadlineSeconds (Job), spec.runPolicy.activeDeadlineSeconds \
         (Kubeflow) or the annotation biz.group.resource.quota/max-runtime (e.g. \"4h\") on Job ml/d"
    );
    assert_eq!(
        denial(
            &review_job_create(
                &s,
                "u-d",
                None,
                &job("d").quota("team").cards(1).deadline(20 * 3600).obj()
            )
            .await
        ),
        "bizrq team: cash/requests.nvidia.com/gpu needs 20 card-hours for Job ml/d, but open \
         reservations already hold 16 of the 30 they may hold at once"
    );
    let b = budget(&s, "team").await;
    assert_eq!(b["reservations"]["cap"], "30", "{b}");
    // The policy change is in the audit log, as a quota update.
    let admin = Browser::admin(&s).await;
    let audit = admin.get("/audit").await;
    assert!(audit.body.contains("reservationCap"), "{}", audit.body);

    // The quota page's Budgets panel shows the open reservations.
    let page = admin.get("/quotas/team").await;
    assert!(
        page.body.contains(
            "1 open reservation holds 16 card-hours (cap 30) · 60 card-hours left after them"
        ),
        "{}",
        page.body
    );
    // The edit form sets both; a horizon with a fraction is refused there.
    let form = admin.get("/quotas/team/edit").await;
    assert!(
        form.body.contains("budget.reservationCap:"),
        "{}",
        form.body
    );
    let rv = hidden_field(&form.body, "resourceVersion").unwrap();
    let post = |horizon: &'static str| {
        let (admin, rv) = (&admin, rv.clone());
        async move {
            admin
                .post(
                    "/quotas/team/edit",
                    &[
                        ("resourceVersion", &rv),
                        (&format!("hard:{GPU}"), "16"),
                        (&format!("hard:{CASH}"), "100"),
                        (&format!("budget.withoutRunTime:{CASH}"), "reserveDefault"),
                        (&format!("budget.horizon:{CASH}"), horizon),
                        (&format!("budget.reservationCap:{CASH}"), "40"),
                    ],
                )
                .await
        }
    };
    let bad = post("1.5h").await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert!(
        bad.body.contains("fractions are not accepted"),
        "{}",
        bad.body
    );
    let good = post("4h").await;
    assert_eq!(good.status, StatusCode::SEE_OTHER, "{}", good.body);
    let q = s.quota("team").await;
    assert_eq!(
        q["spec"]["budgets"][CASH],
        json!({"withoutRunTime": {"kind": "reserveDefault", "horizonSeconds": 14400},
               "reservationCap": "40", "period": {"kind": "none"}, "carry": {"kind": "none"},
               "overspend": "carry", "refund": {"kind": "none"}, "onExhausted": {"kind": "refuseNew"}}),
        "{q}"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    reserve_use_settle_and_refuse(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    reserve_use_settle_and_refuse(&fresh_postgres().await).await;
}

/// Two replicas on one PostgreSQL budget, many Jobs with declared run
/// times at once (each also retried on the other replica): what is
/// reserved never exceeds the budget, every admitted Job holds exactly its
/// reservation, and no refused one holds anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_reserve_more_than_the_budget() {
    const BUDGET: i128 = 100;
    let db = fresh_postgres().await;
    let (ra, _ca) = standalone(&db).await;
    let (rb, _cb) = standalone(&db).await;
    let a = Arc::new(Server::in_process(&ra));
    let b = Arc::new(Server::in_process(&rb));
    a.create_quota("pool", "", json!({GPU: "1000", CASH: BUDGET.to_string()}))
        .await;
    // Job i: 1 + i % 3 cards for 1 + i % 4 hours (1 to 12 card-hours).
    let need = |i: i128| (1 + i % 3) * (1 + i % 4);
    let sem = Arc::new(tokio::sync::Semaphore::new(24));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..80i64 {
        for retry in [false, true] {
            if retry && i % 3 != 0 {
                continue;
            }
            let server = if (i % 2 == 0) != retry {
                a.clone()
            } else {
                b.clone()
            };
            let sem = sem.clone();
            tasks.spawn(async move {
                let _p = sem.acquire().await.unwrap();
                let j = job(&format!("j{i}"))
                    .quota("pool")
                    .cards(1 + i % 3)
                    .deadline((1 + i % 4) * 3600)
                    .obj();
                (
                    i,
                    review_job_create(&server, &format!("uid-{i}"), None, &j).await,
                )
            });
        }
    }
    let mut admitted = BTreeSet::new();
    let mut contention = 0;
    while let Some(res) = tasks.join_next().await {
        let (i, r) = res.unwrap();
        if r["allowed"] == true {
            admitted.insert(format!("batch/Job/ml/j{i}"));
            continue;
        }
        let msg = r["status"]["message"].as_str().unwrap();
        match r["status"]["code"].as_i64() {
            Some(403) => assert!(
                msg.starts_with(&format!("bizrq pool: {CASH} needs ")),
                "{msg}"
            ),
            Some(429) => contention += 1,
            other => panic!("unexpected denial {other:?}: {msg}"),
        }
    }
    let q = a.quota("pool").await;
    let held = reservations(&q);
    let charged: BTreeSet<String> = q["status"]["workloads"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let reserved: i128 = held.values().map(|r| r.0).sum();
    let expected: i128 = admitted
        .iter()
        .map(|w| need(w.trim_start_matches("batch/Job/ml/j").parse().unwrap()))
        .sum();
    eprintln!(
        "reservations race: {} admitted holding {} of {BUDGET} card-hours, {contention} contention",
        admitted.len(),
        expected
    );
    assert_eq!(held.keys().cloned().collect::<BTreeSet<_>>(), admitted);
    assert_eq!(
        charged, admitted,
        "each admitted Job charged once, nothing else"
    );
    assert_eq!(
        reserved,
        expected * CARD_HOUR,
        "each holds exactly its need"
    );
    assert!(reserved <= BUDGET * CARD_HOUR, "over-reserved: {reserved}");
    assert!(
        held.values().all(|r| r.1 == 0),
        "nothing spent: the clock stands"
    );
    // Room left unused only where a Job bigger than it asked.
    assert!(
        expected > BUDGET - 12 || contention > 0,
        "room was left: {expected} reserved of {BUDGET}"
    );
    ra.shutdown().await;
    rb.shutdown().await;
}

/// Cluster mode: Jobs created through the API server (which calls the
/// shipped webhooks) reserve; the controller's reconcile moves use along
/// as the clock moves; a Job that completes settles its reservation, and a
/// Job's deletion settles it in the release's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_the_webhook_reserves_and_finish_or_delete_settles() {
    use crate::cluster::{used, Cluster};
    use kube::api::{DeleteParams, DynamicObject, PostParams};
    let c = Cluster::start().await;
    let (st, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"hard": {GPU: "16", CASH: "100"},
                         "budgets": {CASH: {"reservationCap": "90"}}}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let jobs = jobs_of(&c, "alice", "ml");
    let create = |j: Value| {
        let jobs = jobs.clone();
        async move {
            let o: DynamicObject = serde_json::from_value(j).unwrap();
            jobs.create(&PostParams::default(), &o)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };

    create(job("a").cards(4).deadline(10 * 3600).obj())
        .await
        .unwrap();
    let q = c
        .until("ml", "a reserved", |q| !reservations(q).is_empty())
        .await;
    assert_eq!(
        reservations(&q)["batch/Job/ml/a"],
        (40 * CARD_HOUR, 0),
        "{q}"
    );
    assert_eq!(used(&q, GPU), "4");

    // 4 × 14 h = 56 > 60 left? No: 60 left, but the cap holds 40 of 90.
    let err = create(job("b").cards(4).max_runtime("14h").obj())
        .await
        .unwrap_err();
    assert!(
        err.contains(
            "bizrq ml: cash/requests.nvidia.com/gpu needs 56 card-hours for Job ml/b, but open \
             reservations already hold 40 of the 90 they may hold at once"
        ),
        "{err}"
    );
    assert!(c.fake.get("batch", "jobs", "ml", "b").is_none());
    let err = create(job("b").cards(4).max_runtime("16h").obj())
        .await
        .unwrap_err();
    assert!(err.contains("needs 64 card-hours for Job ml/b (4 × nvidia.com/gpu for 16h), 60 left (100 this period, 0 spent, 40 reserved)"), "{err}");

    // Two hours on, the controller's reconcile has moved a's use along
    // at its admitted rate: 8 of its 40.
    c.set_clock(crate::cluster::T0 + 2 * HOUR);
    // Its pod shows up (and triggers the reconcile).
    c.fake.put(crate::cluster::pod(
        "ml",
        "a-1",
        "Job",
        "a",
        4,
        "2026-11-21T10:00:00Z",
    ));
    let q = c
        .until("ml", "a's use moved", |q| {
            reservations(q)
                .get("batch/Job/ml/a")
                .is_some_and(|r| r.1 == 8 * CARD_HOUR)
        })
        .await;
    assert_eq!(reservations(&q).len(), 1, "{q}");

    // b (4 × 14 h = 56) fits now: 100 − 8 spent − 32 a still holds = 60
    // left, and 32 + 56 = 88 within the cap of 90.
    create(job("b").cards(4).max_runtime("14h").obj())
        .await
        .unwrap();
    let q = c
        .until("ml", "b reserved", |q| reservations(q).len() == 2)
        .await;
    assert_eq!(
        reservations(&q)["batch/Job/ml/b"],
        (56 * CARD_HOUR, 0),
        "{q}"
    );

    // a completes: the controller settles its reservation (the 32 it
    // still held are released); its charge stays while its pod runs.
    let mut done = c.fake.get("batch", "jobs", "ml", "a").unwrap();
    let since = q["status"]["workloads"]["batch/Job/ml/a"]["since"].clone();
    done["status"] = json!({"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": since}]});
    c.fake.put(done);
    let q = c
        .until("ml", "a settled on finish", |q| {
            !reservations(q).contains_key("batch/Job/ml/a")
        })
        .await;
    assert_eq!(used(&q, GPU), "8", "a's pod still runs: {q}");

    // Its pod ends: a finished Job with no pod left runs nothing, so its
    // charge goes (it holds no room until it is deleted), and its record
    // with it (no entry at 0 pods, no submitter kept).
    let mut ended = crate::cluster::pod("ml", "a-1", "Job", "a", 4, "2026-11-21T10:00:00Z");
    ended["status"]["phase"] = json!("Succeeded");
    ended["status"]["containerStatuses"] = json!([{"name": "c",
        "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-21T12:00:00Z"}}}]);
    c.fake.put(ended);
    let q = c
        .until("ml", "a released once its pod ended", |q| {
            used(q, GPU) == "4"
        })
        .await;
    assert!(
        q["status"]["workloads"].get("batch/Job/ml/a").is_none(),
        "{q}"
    );
    assert!(q["status"]["users"].get("batch/Job/ml/a").is_none(), "{q}");

    // Deleting b settles its reservation in the release's write.
    jobs.delete("b", &DeleteParams::default()).await.unwrap();
    let q = c
        .until("ml", "b settled", |q| reservations(q).is_empty())
        .await;
    assert!(q["status"]["reservations"].is_null(), "{q}");
}

/// Cluster mode, queued admission: a Job that waits (suspended, not
/// charged, nothing reserved) reserves for its declared run time in the
/// write that admits it from the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_admitted_from_the_queue_reserves_then() {
    use crate::cluster::{used, Cluster};
    use kube::api::{DeleteParams, DynamicObject, PostParams};
    let c = Cluster::start().await;
    let (st, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"hard": {GPU: "4", CASH: "100"}, "queueing": "Queue"}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let jobs = jobs_of(&c, "alice", "ml");
    let create = |j: Value| {
        let jobs = jobs.clone();
        async move {
            let o: DynamicObject = serde_json::from_value(j).unwrap();
            jobs.create(&PostParams::default(), &o).await.unwrap();
        }
    };
    create(job("a").cards(4).deadline(2 * 3600).obj()).await;
    c.until("ml", "a reserved", |q| reservations(q).len() == 1)
        .await;
    // b does not fit the 4 cards: queued, suspended, nothing reserved.
    create(job("b").cards(4).deadline(3 * 3600).obj()).await;
    let q = c
        .until("ml", "b queued", |q| {
            q["status"]["queue"][0]["uid"]
                .as_str()
                .is_some_and(|u| !u.is_empty())
        })
        .await;
    assert_eq!(q["status"]["queue"][0]["runMs"], 3 * HOUR, "{q}");
    assert!(!reservations(&q).contains_key("batch/Job/ml/b"), "{q}");
    // a goes: the controller admits b, reserving 4 × 3 h in that write.
    jobs.delete("a", &DeleteParams::default()).await.unwrap();
    let q = c
        .until("ml", "b admitted", |q| {
            q["status"]["queue"].is_null() && used(q, GPU) == "4"
        })
        .await;
    assert_eq!(
        reservations(&q),
        BTreeMap::from([("batch/Job/ml/b".to_string(), (12 * CARD_HOUR, 0))]),
        "{q}"
    );
}
