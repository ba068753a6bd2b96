//! Fairness between the submitters of one quota (docs/queueing.md §11,
//! "Between the submitters of one quota"): a queue that opts in admits,
//! of entries of equal priority, the one whose submitter spent least
//! (decayed with the half-life) first; and the `sshare`-like table of the
//! API (`GET /api/v1/quotas/{name}/shares`) and the portal
//! (`/quotas/{name}/shares`), authorised as the quota's other views.
//!
//! The usage is the budget ledger's: each test writes earlier months'
//! billing into the server's database, as the controller's accrual
//! appends it, before the queue runs.

use crate::cluster::{used, Cluster, T0};
use crate::common::{bind, create_user, fresh_postgres, fresh_sqlite, Browser, Server};
use crate::support::{job, jobs_of, until_event};
use bizrq::store::sql::SqlStore;
use kube::api::{DynamicObject, PostParams};
use quota::object::budgets::{Entry, Reason};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// One core-hour at face value, in acc.
const CORE_HOUR: i128 = 3_600_000_000_000_000_000_000;

fn billed(quota: &str, user: &str, at: i64, core_hours: i128) -> Entry {
    Entry {
        quota: quota.into(),
        key: "cash/requests.cpu".into(),
        workload: format!("batch/Job/ml/{user}-{at}"),
        namespace: "ml".into(),
        model: None,
        qos: None,
        user: Some(user.into()),
        start_ms: at,
        end_ms: at + HOUR,
        amount: core_hours * CORE_HOUR,
        reason: Reason::Accrual,
        note: String::new(),
    }
}

async fn create_as(c: &Cluster, user: &str, name: &str, cpu: &str) {
    jobs_of(c, user, "ml")
        .create(&PostParams::default(), &job(name).cpu(cpu).dynamic())
        .await
        .unwrap();
}

/// `ml` (4 CPUs, queueing, `submitterFairness` when `fair`) over the fake
/// API server; alice billed 100 core-hours a day ago, bob 100 three weeks
/// ago (an eighth of it left after three half-lives). A 4-CPU Job runs;
/// alice queues one of 4 CPUs, then bob one; the running Job completes.
/// Returns the Job admitted into the room, and the cluster.
async fn who_goes_first(fair: bool) -> (&'static str, Cluster) {
    let bills = [
        billed("ml", "alice", T0 - DAY, 100),
        billed("ml", "bob", T0 - 21 * DAY, 100),
    ];
    who_goes_first_of(fair, "alice", "bob", &bills).await
}

/// `who_goes_first` with the Job `alice-1` created by `first` and `bob-1`
/// by `second`, the ledger holding `bills`: "alice" or "bob" by the Job
/// admitted.
async fn who_goes_first_of(
    fair: bool,
    first: &str,
    second: &str,
    bills: &[Entry],
) -> (&'static str, Cluster) {
    let c = Cluster::start().await;
    let sql = SqlStore::connect(&fresh_sqlite_of(&c)).await.unwrap();
    sql.append_ledger(bills).await.unwrap();
    let mut queueing = json!({"mode": "Queue"});
    if fair {
        queueing["order"] = json!({"kind": "BestEffortFifo", "agingSeconds": 3600});
        queueing["submitterFairness"] = json!({"halfLifeDays": 7});
    }
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": "4"}, "queueing": queueing}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_as(&c, "carol", "running", "4").await;
    c.until("ml", "running charged", |q| used(q, "requests.cpu") == "4")
        .await;
    c.set_clock(T0 + 60_000);
    create_as(&c, first, "alice-1", "4").await;
    c.set_clock(T0 + 120_000);
    create_as(&c, second, "bob-1", "4").await;
    c.until("ml", "both queued and named", |q| {
        q["status"]["queue"].as_array().is_some_and(|a| {
            a.len() == 2
                && a.iter()
                    .all(|e| e["uid"].as_str().is_some_and(|u| !u.is_empty()))
        })
    })
    .await;
    let q = c.fake.quota("ml");
    let since = q["status"]["workloads"]["batch/Job/ml/running"]["since"].clone();
    let mut done = c.fake.get("batch", "jobs", "ml", "running").unwrap();
    done["status"] = json!({"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": since}]});
    c.fake.put(done);
    // A held Job is in `workloads` charged at 0 pods; admitted, it leaves
    // the queue in the write that charges it.
    let queued = |q: &Value, name: &str| {
        q["status"]["queue"].as_array().is_some_and(|a| {
            a.iter()
                .any(|e| e["workloadRef"] == format!("batch/Job/ml/{name}"))
        })
    };
    let q = c
        .until("ml", "one queued Job admitted", |q| {
            !queued(q, "alice-1") || !queued(q, "bob-1")
        })
        .await;
    assert!(
        queued(&q, "alice-1") || queued(&q, "bob-1"),
        "only one fits: {q}"
    );
    assert_eq!(used(&q, "requests.cpu"), "4", "{q}");
    let first = if queued(&q, "alice-1") {
        "bob"
    } else {
        "alice"
    };
    let charged = &q["status"]["workloads"][format!("batch/Job/ml/{first}-1")];
    assert_eq!(charged["podSets"][0]["count"], 1, "{q}");
    (first, c)
}

fn fresh_sqlite_of(c: &Cluster) -> String {
    fresh_sqlite(&c._dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_submitter_with_less_decayed_usage_is_admitted_first() {
    let (first, c) = who_goes_first(true).await;
    assert_eq!(
        first, "bob",
        "bob spent less of late, though alice queued first"
    );
    // The table says why, in the order the queue took them.
    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/shares", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["ordersQueue"], true, "{v}");
    assert_eq!(v["halfLifeDays"], 7);
    let rows = v["rows"].as_array().unwrap();
    let users: Vec<&str> = rows.iter().map(|r| r["user"].as_str().unwrap()).collect();
    assert_eq!(users, ["bob", "alice"], "{v}");
    assert_eq!(rows[0]["usage"][0]["unit"], "core-hours");
    assert_eq!(rows[0]["usage"][0]["raw"], "100", "{v}");
    assert_eq!(rows[1]["usage"][0]["raw"], "100", "{v}");
    // alice's 100 at 1 day (from the middle of its hour) is ~90.6; bob's
    // at 21 days ~12.5.
    let decayed =
        |r: &Value| -> f64 { r["usage"][0]["decayed"].as_str().unwrap().parse().unwrap() };
    assert!((12.0..13.0).contains(&decayed(&rows[0])), "{v}");
    assert!((90.0..91.0).contains(&decayed(&rows[1])), "{v}");
    assert_eq!(rows[0]["shares"], "0.50");
    let factor = |r: &Value| -> f64 { r["fairShareFactor"].as_str().unwrap().parse().unwrap() };
    assert!(factor(&rows[0]) > 0.5 && factor(&rows[1]) < 0.5, "{v}");
}

/// A username longer than any limit (Kubernetes sets none): the
/// webhook's `submittedBy`, `status.users` and the ledger all key it the
/// same (`quota::submitters::submitter`), so its own usage finds it and it
/// does not go first as a stranger would. The ledger holds it as older
/// writes recorded it (cut at 256 bytes, the entry at 128).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_username_is_found_under_its_own_usage() {
    let evil = format!("system:serviceaccount:ml:{}", "é".repeat(200));
    let mut end = 256;
    while !evil.is_char_boundary(end) {
        end -= 1;
    }
    let bills = [
        billed("ml", &evil[..end], T0 - DAY, 100),
        billed("ml", "bob", T0 - 21 * DAY, 100),
    ];
    let (first, c) = who_goes_first_of(true, &evil, "bob", &bills).await;
    assert_eq!(first, "bob", "the heavy submitter's usage is found");
    let q = c.fake.quota("ml");
    let entry = &q["status"]["queue"][0];
    let by = entry["submittedBy"].as_str().unwrap();
    assert_eq!(
        Some(by),
        quota::submitters::submitter(&evil).as_deref(),
        "{q}"
    );
    assert!(by.len() <= 128 && evil.starts_with(by), "{by}");
    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/shares", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let users: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["user"].as_str())
        .collect();
    assert_eq!(users, ["bob", by], "one row, under the entry's key: {v}");
}

/// A fresh identity (a new ServiceAccount, nothing in the ledger) ranks at
/// the median of the known submitters, not at zero: against alice, the
/// only one known, it ties and first come goes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_identity_does_not_pass_the_known_submitters() {
    let bills = [billed("ml", "alice", T0 - DAY, 100)];
    let fresh = "system:serviceaccount:ml:fresh-0001";
    let (first, c) = who_goes_first_of(true, "alice", fresh, &bills).await;
    assert_eq!(first, "alice", "the newcomer gains nothing by being new");
    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/shares", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["withUsage"], 1, "{v}");
    assert_eq!(v["rows"][0]["rankedAtMedian"], false, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_submitter_fairness_the_queue_stays_first_come_first_served() {
    let (first, c) = who_goes_first(false).await;
    assert_eq!(first, "alice", "alice queued first");
    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/shares", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["ordersQueue"], false,
        "the table is shown all the same: {v}"
    );
}

/// A standalone server on `url`: `org` over `ml` and `cv`, their ledgers
/// billed for alice, bob and someone unrecorded; mia a member of `ml`,
/// olaf a member of `cv`, owen the owner of `org`.
async fn standalone_story(url: &str) {
    let server = Server::start(url).await;
    server
        .create_quota("org", "", json!({"requests.cpu": "100"}))
        .await;
    server
        .create_quota("ml", "org", json!({"requests.cpu": "50"}))
        .await;
    server
        .create_quota("cv", "org", json!({"requests.cpu": "50"}))
        .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let sql = SqlStore::connect(url).await.unwrap();
    let mut unknown = billed("ml", "x", now - 2 * DAY, 4);
    unknown.user = None;
    sql.append_ledger(&[
        billed("ml", "alice", now - 2 * HOUR, 30),
        billed("ml", "bob", now - 2 * HOUR, 10),
        billed("cv", "alice", now - 2 * HOUR, 60),
        billed("ml", "alice", now - 200 * DAY, 1000),
        unknown,
    ])
    .await
    .unwrap();
    sql.close().await;

    // The policy is checked at the API like every spec field.
    for (days, says) in [
        (json!(0), "halfLifeDays is 0"),
        (json!(366), "halfLifeDays is 366"),
        (json!(-1), "queueing"),
        (json!("7"), "queueing"),
        (json!(7), "BestEffortFifo"),
    ] {
        let (s, v) = server
            .api(
                Method::POST,
                "/api/v1/quotas",
                Some(json!({"metadata": {"name": "bad"}, "spec": {"parent": "", "hard": {"requests.cpu": "1"},
                    "queueing": {"mode": "Queue", "submitterFairness": {"halfLifeDays": days}}}})),
            )
            .await;
        assert!(s.is_client_error(), "{days}: {s} {v}");
        assert!(v.to_string().contains(says), "{days}: {v}");
    }
    let admin = Browser::admin(&server).await;
    for (u, q, role) in [
        ("mia", "ml", "member"),
        ("olaf", "cv", "member"),
        ("owen", "org", "owner"),
    ] {
        create_user(&admin, u, &format!("{u}-password-0123456")).await;
        bind(&admin, u, q, role).await;
    }
    let login = |u: &'static str| {
        let server = &server;
        async move { Browser::logged_in(server, u, &format!("{u}-password-0123456")).await }
    };
    let (mia, olaf, owen) = (login("mia").await, login("olaf").await, login("owen").await);

    // A member sees their quota's table: least spent first, the unknown
    // submitter as null (no username can pass for it), usage beyond the
    // horizon (16 half-lives) left out.
    let (s, v) = mia.api(Method::GET, "/api/v1/quotas/ml/shares", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let users: Vec<Option<&str>> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["user"].as_str())
        .collect();
    assert_eq!(users, [None, Some("bob"), Some("alice")], "{v}");
    assert!(v["rows"][0]["user"].is_null(), "{v}");
    assert_eq!((&v["submitters"], &v["withUsage"]), (&json!(3), &json!(3)));
    assert_eq!(v["rows"][2]["usage"][0]["raw"], "30", "{v}");
    assert_eq!(v["rows"][2]["usage"][0]["unit"], "core-hours");
    assert_eq!(v["rows"][2]["normalizedUsage"], "0.69", "29.8 of 43.0: {v}");
    assert_eq!(v["rows"][0]["shares"], "0.33");
    assert_eq!(v["scope"], "own");
    assert_eq!(v["ordersQueue"], false);
    // The same member may not see a sibling's, nor the parent's: 404, as
    // the quota itself.
    for path in ["/api/v1/quotas/cv/shares", "/api/v1/quotas/org/shares"] {
        let (s, v) = mia.api(Method::GET, path, None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {v}");
        let (s2, _) = mia
            .api(Method::GET, &path.replace("/shares", ""), None)
            .await;
        assert_eq!(s2, StatusCode::NOT_FOUND, "as the quota's own view");
    }
    let (s, _) = olaf
        .api(Method::GET, "/api/v1/quotas/ml/shares", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // The owner of the parent sees its subtree added up.
    let (s, v) = owen
        .api(Method::GET, "/api/v1/quotas/org/shares?scope=subtree", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["quotasRead"], 3);
    let alice = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user"] == "alice")
        .unwrap()
        .clone();
    assert_eq!(alice["usage"][0]["raw"], "90", "ml's 30 and cv's 60: {v}");
    let (s, v) = owen
        .api(Method::GET, "/api/v1/quotas/org/shares", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["rows"].as_array().unwrap().len(),
        0,
        "org runs nothing itself"
    );
    // Without a session: 401.
    let (s, _) = Browser::new(&server)
        .api(Method::GET, "/api/v1/quotas/ml/shares", None)
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Hostile query strings and names: 422 saying what to fix, or 404;
    // never a table, never the characters echoed.
    for q in [
        "scope=all",
        "scope=own&scope=subtree",
        "limit=5",
        "%E2%80%AE=1",
        "scope=%00",
        "scope=own%0A",
        &format!("scope={}", "x".repeat(300)),
        "scope[]=own",
    ] {
        let (s, v) = mia
            .api(Method::GET, &format!("/api/v1/quotas/ml/shares?{q}"), None)
            .await;
        // Control and bidi characters the edge refuses first (400).
        let edge = q.contains("%E2%80%AE") || q.contains("%00");
        let want = if edge {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        assert_eq!(s, want, "{q}: {v}");
        let text = v.to_string();
        assert!(
            !text.contains('\u{202e}') && !text.contains('\u{0}'),
            "{q}: {text}"
        );
        assert!(v["rows"].is_null(), "{q}");
    }
    for name in ["%E2%80%AEml", "ml%00", "..", &"x".repeat(300)] {
        let (s, _) = admin
            .api(Method::GET, &format!("/api/v1/quotas/{name}/shares"), None)
            .await;
        assert!(
            s == StatusCode::NOT_FOUND || s == StatusCode::BAD_REQUEST,
            "{name}: {s}"
        );
    }

    // The portal page: server-rendered, no JavaScript needed, amounts
    // with their unit, linked back; 404 for who may not see the quota.
    let page = mia.get("/quotas/ml/shares").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for want in [
        "alice",
        "bob",
        "<em>no username recorded</em>",
        "30 core-hours",
        "Factor",
        "half-life",
        "/quotas/ml",
    ] {
        assert!(page.body.contains(want), "{want} not on the page");
    }
    assert!(page.body.find("bob").unwrap() < page.body.find("alice").unwrap());
    assert_eq!(
        olaf.get("/quotas/ml/shares").await.status,
        StatusCode::NOT_FOUND
    );
    // The quota page links it, in one line.
    let quota_page = mia.get("/quotas/ml").await;
    assert!(
        quota_page.body.contains("href=\"/quotas/ml/shares\""),
        "the quota page links its shares table"
    );
    assert_eq!(
        mia.get("/quotas/ml/shares?scope=nope").await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let page = owen.get("/quotas/org/shares?scope=subtree").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("90 core-hours"), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shares_table_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    standalone_story(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shares_table_on_postgres() {
    standalone_story(&fresh_postgres().await).await;
}

/// The preemption plan weighs the queue in the round's order: with
/// `submitterFairness`, the head it makes room for is the light
/// submitter's small Job, not the heavy one's earlier large one, so it
/// marks only what that Job needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_makes_room_for_the_entry_the_round_admits_first() {
    use crate::preemption::{create_class, marks};
    let c = Cluster::start().await;
    let sql = SqlStore::connect(&fresh_sqlite_of(&c)).await.unwrap();
    sql.append_ledger(&[
        billed("ml", "alice", T0 - DAY, 100),
        billed("ml", "bob", T0 - 21 * DAY, 100),
    ])
    .await
    .unwrap();
    let spec = |preemption: &str| {
        json!({"parent": "", "hard": {"requests.cpu": "4"},
            "queueing": {"mode": "Queue", "preemption": preemption,
                "order": {"kind": "BestEffortFifo", "agingSeconds": 3600},
                "submitterFairness": {"halfLifeDays": 7}}})
    };
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"}, "spec": spec("Never")})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_class(&c, "batch-low", 1).await;
    create_class(&c, "urgent", 100).await;
    let create = |user: &str, name: &str, cpu: &str, class: &str| {
        let api = jobs_of(&c, user, "ml");
        let o: DynamicObject =
            serde_json::from_value(job(name).cpu(cpu).class(class).obj()).unwrap();
        async move { api.create(&PostParams::default(), &o).await.unwrap() }
    };
    create("carol", "low-a", "2", "batch-low").await;
    c.set_clock(T0 + 1_000);
    create("carol", "low-b", "2", "batch-low").await;
    c.until("ml", "both low Jobs charged", |q| {
        used(q, "requests.cpu") == "4"
    })
    .await;
    // alice (heavy of late) queues a 4-CPU Job first, bob a 2-CPU one.
    c.set_clock(T0 + 60_000);
    create("alice", "alice-big", "4", "urgent").await;
    c.set_clock(T0 + 120_000);
    create("bob", "bob-small", "2", "urgent").await;
    c.until("ml", "both queued and named", |q| {
        q["status"]["queue"].as_array().is_some_and(|a| {
            a.len() == 2
                && a.iter()
                    .all(|e| e["uid"].as_str().is_some_and(|u| !u.is_empty()))
        })
    })
    .await;
    // Preemption on: the round takes bob's first, so the plan does.
    let (s, v) = c
        .server
        .api(
            Method::PUT,
            "/api/v1/quotas/ml",
            Some(json!({"metadata": {"name": "ml"}, "spec": spec("LowerPriority")})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let q = c
        .until("ml", "a low Job marked", |q| !marks(q).is_empty())
        .await;
    let marked = marks(&q);
    assert_eq!(marked.len(), 1, "only the 2 CPUs bob's Job needs: {q}");
    let e = until_event(&c, "PreemptionPending", &marked[0][13..]).await;
    let note = e["note"].as_str().unwrap();
    assert!(note.contains("batch/Job/ml/bob-small"), "{note}");
}
