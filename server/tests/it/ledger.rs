//! The budget ledger and its reports end to end (docs/budgets.md §6, §9;
//! docs/budgets.md "Reports"). Standalone on SQLite and PostgreSQL: each write's
//! accrual lands in the ledger in the same transaction as the status, so
//! per quota the ledger's sum is what `status.cashAccrued` says, to the
//! acc; the user of each admission review is on its entries; reports by
//! child, user and model, per day, agree with the ledger as JSON, CSV and
//! the /reports page, and with the budgets, whose spending since a
//! quota's last write they add; a wrong parameter is 422 and a member sees only
//! their subtree. In a cluster (the fake API server, the shipped
//! webhooks) the controller appends each window it accrues from the pods.

use crate::common::*;
use crate::support::{admit_job, job};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const T0: i64 = 1_795_255_200_000; // 2026-11-21T10:00:00Z
const HOUR: i64 = 3_600_000;
const CARD_HOUR: i128 = 3_600_000_000_000_000_000_000;

/// `status.cashAccrued` in acc.
fn accrued_acc(q: &Value) -> i128 {
    let per_mille: i128 = q["status"]["cashAccrued"][CASH]
        .as_str()
        .unwrap_or("0")
        .parse()
        .unwrap();
    quota::budget::from_cash_accrued(per_mille)
}

fn acc(v: &Value) -> i128 {
    v.as_str().unwrap().parse().unwrap()
}

async fn report(s: &Server, query: &str) -> Value {
    let (st, v) = s
        .api(Method::GET, &format!("/api/v1/reports?{query}"), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{query}: {v}");
    v
}

const RANGE: &str = "from=2026-11-20&to=2026-11-22";

async fn standalone_story(url: &str) {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (clock, c) = test_clock(T0);
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota(
        "org",
        "",
        json!({"requests.nvidia.com/gpu": "16", CASH: "1000"}),
    )
    .await;
    s.create_quota(
        "a",
        "org",
        json!({"requests.nvidia.com/gpu": "8", CASH: "400"}),
    )
    .await;
    s.create_quota(
        "b",
        "org",
        json!({"requests.nvidia.com/gpu": "8", CASH: "400"}),
    )
    .await;
    // a: 2 A100 by alice from T0; b: 1 card by bob from T0 + 30 min.
    admit_job(
        &s,
        "x",
        Some("alice"),
        &job("x").quota("a").cards(2).model("A100").obj(),
    )
    .await;
    clock.store(T0 + HOUR / 2, Ordering::SeqCst);
    admit_job(&s, "y", Some("bob"), &job("y").quota("b").cards(1).obj()).await;
    // Writes at T0 + 2 h accrue both windows; at T0 + 3 h a's again.
    clock.store(T0 + 2 * HOUR, Ordering::SeqCst);
    admit_job(
        &s,
        "x2",
        Some("carol"),
        &job("x2").quota("a").cards(1).obj(),
    )
    .await;
    admit_job(&s, "y2", Some("bob"), &job("y2").quota("b").cards(1).obj()).await;
    clock.store(T0 + 3 * HOUR, Ordering::SeqCst);
    admit_job(
        &s,
        "x3",
        Some("carol"),
        &job("x3").quota("a").cards(1).obj(),
    )
    .await;

    // Per quota, a report is what its budget spent, to the acc: a's
    // status as written at T0 + 3 h; b's as written at T0 + 2 h plus its
    // two cards' last hour, which its next write will record and which
    // its budget (a copy accrued to now) counts already.
    let (qa, qb) = (s.quota("a").await, s.quota("b").await);
    let (a, written_b) = (accrued_acc(&qa), accrued_acc(&qb));
    assert_eq!(a, 2 * 3 * CARD_HOUR + CARD_HOUR, "{qa}");
    assert_eq!(written_b, 3 * CARD_HOUR / 2, "{qb}");
    let b = written_b + 2 * CARD_HOUR;
    assert_eq!(qa["status"]["users"]["batch/Job/ml/x"], "alice", "{qa}");
    for (q, want) in [("a", a), ("b", b)] {
        let r = report(&s, &format!("{RANGE}&subtree={q}&by=quota")).await;
        assert_eq!(acc(&r["total"]), want, "{q}: {r}");
        let (_, budgets) = s
            .api(Method::GET, &format!("/api/v1/quotas/{q}/budgets"), None)
            .await;
        assert_eq!(
            budgets["budgets"][0]["spent"],
            json!(quota::budget::to_quantity(want).to_string()),
            "{q}: the report is the budgets API's spending"
        );
    }
    // By child per day: the rows are a and b, and add up to the total.
    let r = report(&s, &format!("{RANGE}&subtree=org&bucket=day")).await;
    assert_eq!(r["by"], "child");
    assert_eq!(acc(&r["total"]), a + b, "{r}");
    let rows = r["rows"].as_array().unwrap();
    let groups: Vec<&str> = rows.iter().map(|x| x["group"].as_str().unwrap()).collect();
    assert_eq!(groups, vec!["a", "b"], "{r}");
    assert_eq!(rows[0]["bucket"], "2026-11-21");
    assert_eq!(rows.iter().map(|x| acc(&x["amount"])).sum::<i128>(), a + b);
    assert_eq!(r["totalHours"], "10.5", "{r}");
    // By user and by model: who asked, from the reviews.
    let r = report(&s, &format!("{RANGE}&by=user&key={CASH}")).await;
    let by_user: Vec<(String, i128)> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["group"].as_str().unwrap().to_string(), acc(&x["amount"])))
        .collect();
    assert_eq!(
        by_user,
        vec![
            ("alice".to_string(), 6 * CARD_HOUR),
            ("bob".to_string(), 7 * CARD_HOUR / 2),
            ("carol".to_string(), CARD_HOUR)
        ],
        "{r}"
    );
    let r = report(&s, &format!("{RANGE}&by=model")).await;
    assert_eq!(r["rows"][0]["group"], "(no model)", "{r}");
    assert_eq!(r["rows"][1]["group"], "A100", "{r}");
    // A range cutting a's first window shares it by time, exactly.
    let r = report(
        &s,
        "from=2026-11-21T10:00:00Z&to=2026-11-21T11:00:00Z&subtree=a",
    )
    .await;
    assert_eq!(acc(&r["total"]), 2 * CARD_HOUR, "{r}");
    assert_eq!(r["straddling"], 1, "{r}");

    // The CSV: the same rows and the exact total.
    let admin = Browser::admin(&s).await;
    let csv = admin
        .get(&format!("/reports.csv?{RANGE}&subtree=org&bucket=day"))
        .await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(
        csv.body
            .starts_with("bucket,bucket_start,child,amount_card-hours,amount_exact_acc\r\n"),
        "{}",
        csv.body
    );
    assert!(
        csv.body.ends_with(&format!("total,,,10.5,{}\r\n", a + b)),
        "{}",
        csv.body
    );
    let (st, api_csv) = s
        .get_text(&format!(
            "/api/v1/reports?{RANGE}&subtree=org&bucket=day&format=csv"
        ))
        .await;
    assert!(
        st == StatusCode::OK || st == StatusCode::UNAUTHORIZED,
        "{st}"
    );
    if st == StatusCode::OK {
        assert_eq!(api_csv, csv.body);
    }
    // The page: chart, table, total and how it reconciles.
    let page = admin.get(&format!("/reports?{RANGE}&subtree=org")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for want in [
        "<svg",
        "chart-report",
        "<td data-label=\"Group\" class=\"name\">a</td>",
        "10.5 card-hours",
        "ledger entries in this range",
        "href=\"/reports.csv?",
    ] {
        assert!(page.body.contains(want), "{want}: {}", page.body);
    }
    // With nothing asked, the page opens on an answer: this month in
    // whole UTC days, over the admin's top quota (org), by child, with
    // where the ledger starts; the JSON and CSV answer the same.
    let page = admin.get("/reports").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for want in [
        "Spending by child per day under org",
        "2026-11-01 00:00 UTC – 2026-11-22 00:00 UTC",
        "<td data-label=\"Group\" class=\"name\">a</td>",
        "<td data-label=\"Group\" class=\"name\">b</td>",
        "10.5 card-hours",
        "The ledger starts at 2026-11-21 10:00 UTC",
        "value=\"2026-11-01\"",
        "value=\"2026-11-21\"",
        "value=\"org\"",
    ] {
        assert!(page.body.contains(want), "{want}: {}", page.body);
    }
    let r = report(&s, "").await;
    assert_eq!((&r["by"], &r["subtree"]), (&json!("child"), &json!("org")));
    assert_eq!(r["from"], "2026-11-01T00:00:00.000Z", "{r}");
    assert_eq!(r["to"], "2026-11-22T00:00:00.000Z", "{r}");
    assert_eq!(acc(&r["total"]), a + b, "{r}");
    // Under a quota with no children: by workload, said in words.
    let r = report(&s, "subtree=a").await;
    assert_eq!(r["by"], "workload", "{r}");
    assert_eq!(acc(&r["total"]), a, "{r}");
    assert!(
        r["notes"][0]
            .as_str()
            .unwrap()
            .contains("a has no child quotas"),
        "{r}"
    );
    let csv = admin.get("/reports.csv").await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(
        csv.body.contains("2026-11-01 – 2026-11-22") || csv.body.contains(",a,"),
        "{}",
        csv.body
    );
    assert!(
        csv.body.ends_with(&format!(",10.5,{}\r\n", a + b)),
        "{}",
        csv.body
    );
    // A budget's Report link opens as Reports does: this month in whole
    // UTC days, by child under the quota (by workload under a leaf).
    for (name, says) in [
        ("org", "Spending by child per day under org"),
        ("a", "Spending by workload per day under a"),
    ] {
        let quota_page = admin.get(&format!("/quotas/{name}")).await;
        let link = quota_page
            .body
            .split("href=\"")
            .filter_map(|h| h.split('"').next())
            .find(|h| h.starts_with(&format!("/reports?subtree={name}&")))
            .unwrap_or_else(|| panic!("{name}'s Report link: {}", quota_page.body))
            .replace("&amp;", "&");
        let report = admin.get(&link).await;
        assert_eq!(report.status, StatusCode::OK, "{link}: {}", report.body);
        assert!(
            report.body.contains(says)
                && report
                    .body
                    .contains("2026-11-01 00:00 UTC – 2026-11-22 00:00 UTC"),
            "{link} opens on {says}, this month: {}",
            report.body
        );
    }

    // Hostile parameters: 422 with what to fix; nothing anonymous.
    for (q, want) in [
        (
            "from=yesterday",
            "'yesterday' is not a date: write one as 2026-11-01",
        ),
        (
            "from=2026-11-22&to=2026-11-20",
            "must end after it starts: it ends 2026-11-21 00:00 UTC",
        ),
        ("utcOffsetMinutes=900", "the UTC offset '900'"),
        (
            "bucket=day&from=2000-01-01&to=2026-01-01",
            "longer than 3700 days",
        ),
        ("bucket=day&from=2016-01-01&to=2026-01-01", "more than 1100"),
        ("colour=red", "a report has no option 'colour'"),
        ("from=2026-11-01&from=2026-11-02", "'from' is given twice"),
        ("key=requests.cpu", "is not a cash key"),
    ] {
        let (st, v) = s
            .api(Method::GET, &format!("/api/v1/reports?{q}"), None)
            .await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{q}: {v}");
        let said = v["error"]["message"].as_str().unwrap();
        assert!(said.contains(want), "{q}: {v}");
        // In a person's words: none of the parser's or a standard's names.
        for jargon in [
            "`",
            "unknown field",
            "expected",
            "RFC",
            ".000Z",
            "utcOffsetMinutes",
        ] {
            assert!(!said.contains(jargon), "{q}: {jargon} in {said}");
        }
    }
    let page = admin.get("/reports?by=colour").await;
    assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(page.body.contains("is not one of quota"), "{}", page.body);
    let (st, _) = s.api_with(Method::GET, "/api/v1/reports", None, None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);

    // A member of b sees b only: org is not found, and by default their
    // report is b's. An hour on, both quotas have spending no write has
    // recorded yet (a's four cards, b's two): bob's report adds b's, and
    // none of a's.
    clock.store(T0 + 4 * HOUR, Ordering::SeqCst);
    let a_now = a + 4 * CARD_HOUR;
    let b_now = b + 2 * CARD_HOUR;
    for (q, want) in [("a", a_now), ("b", b_now)] {
        let r = report(&s, &format!("{RANGE}&subtree={q}&by=quota")).await;
        assert_eq!(acc(&r["total"]), want, "{q}: {r}");
    }
    create_user(&admin, "bob", "a long password 1").await;
    bind(&admin, "bob", "b", "member").await;
    let bob = Browser::logged_in(&s, "bob", "a long password 1").await;
    let (st, v) = bob
        .api(
            Method::GET,
            &format!("/api/v1/reports?{RANGE}&subtree=org"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let (st, v) = bob
        .api(Method::GET, &format!("/api/v1/reports?{RANGE}"), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(acc(&v["total"]), b_now, "{v}");
    // A range from T0 + 3.5 h takes the last half hour of b's unwritten
    // window (T0 + 2 h to now, two cards): the same before b's next write
    // records it as after, when the ledger's read keeps the row as one
    // reaching into the range.
    let half = "from=2026-11-21T13:30:00Z&to=2026-11-22&subtree=b&by=quota";
    let before = acc(&report(&s, half).await["total"]);
    assert_eq!(before, CARD_HOUR, "two cards' last half hour");
    admit_job(&s, "y3", Some("bob"), &job("y3").quota("b").cards(1).obj()).await;
    assert_eq!(acc(&report(&s, half).await["total"]), before);
    running.shutdown().await;
}

/// A report's CSV by user carries the usernames of the reviews as they
/// came: one a spreadsheet would run as a formula (behind a space, in
/// full-width signs, a DDE pipe) is defused with a leading `'`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_csv_defuses_formulas_in_usernames() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (clock, c) = test_clock(T0);
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota(
        "org",
        "",
        json!({"requests.nvidia.com/gpu": "16", CASH: "1000"}),
    )
    .await;
    let users = [
        " =1+1",
        "\u{3000}@SUM(A1)",
        "＝1+1",
        "＋1",
        "|calc!A1",
        "  -2+3",
    ];
    for (i, u) in users.iter().enumerate() {
        admit_job(
            &s,
            &format!("u{i}"),
            Some(u),
            &job(&format!("j{i}")).quota("org").cards(1).obj(),
        )
        .await;
    }
    // A later write accrues their first hour into the ledger.
    clock.store(T0 + HOUR, Ordering::SeqCst);
    admit_job(
        &s,
        "late",
        Some("zed"),
        &job("late").quota("org").cards(1).obj(),
    )
    .await;
    let admin = Browser::admin(&s).await;
    let csv = admin
        .get(&format!("/reports.csv?{RANGE}&by=user&key={CASH}"))
        .await;
    assert_eq!(csv.status, StatusCode::OK, "{}", csv.body);
    let groups: Vec<&str> = csv
        .body
        .split("\r\n")
        .skip(1)
        .filter_map(|l| l.split(',').nth(2))
        .collect();
    for u in users {
        assert!(
            groups.contains(&format!("'{u}").as_str()),
            "{u:?} defused in {groups:?}"
        );
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    standalone_story(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_postgres() {
    standalone_story(&fresh_postgres().await).await;
}

/// Cluster mode: the controller accrues from the pods and appends each
/// window to the ledger after its status write; the ledger's sum is what
/// the status accrued, and the entries name the user whose request the
/// shipped webhook admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_the_controller_appends_what_it_accrues() {
    use crate::cluster::{pod, Cluster};
    use kube::api::{DynamicObject, PostParams};
    use std::time::Duration;
    let c = Cluster::start().await;
    let jobs = c.cash_team_watching_jobs().await;
    let j: DynamicObject = serde_json::from_value(job("a").quota("team").cards(4).obj()).unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let q = c
        .until("team", "the user recorded", |q| {
            !q["status"]["users"]["batch/Job/ml/a"].is_null()
        })
        .await;
    let user = q["status"]["users"]["batch/Job/ml/a"]
        .as_str()
        .unwrap()
        .to_string();
    // The pod runs and the controller has recorded its run before time
    // moves: pod seen and its Job resolved (a reconcile at the later time
    // without the run would pay the window without it; waiting for the pod
    // alone raced the Job's watch event).
    c.fake
        .put(pod("ml", "a-1", "Job", "a", 4, "2026-11-21T10:00:00Z"));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.set_clock(T0 + 2 * HOUR);
    c.touch("team", 1);
    let q = c.until("team", "accrued", |q| accrued_acc(q) != 0).await;
    let want = accrued_acc(&q);
    assert_eq!(want, 8 * CARD_HOUR, "{q}");
    let r = poll_until(100, Duration::from_millis(100), || async {
        let r = report(&c.server, &format!("{RANGE}&by=user")).await;
        (acc(&r["total"]) == want).then_some(r)
    })
    .await
    .expect("the ledger reaches what the status accrued");
    assert_eq!(r["rows"][0]["group"], user.as_str(), "{r}");
    assert_eq!(r["rows"].as_array().unwrap().len(), 1, "{r}");
    // More time, another pod, another window: still equal, nothing
    // doubled.
    c.fake
        .put(pod("ml", "a-2", "Job", "a", 4, "2026-11-21T12:30:00Z"));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 2")
        .await;
    c.set_clock(T0 + 3 * HOUR);
    c.touch("team", 2);
    let q = c
        .until("team", "accrued again", |q| accrued_acc(q) > want)
        .await;
    let want = accrued_acc(&q);
    poll_until(100, Duration::from_millis(100), || async {
        let r = report(&c.server, RANGE).await;
        (acc(&r["total"]) == want).then_some(())
    })
    .await
    .expect("the second window too, once");
}

/// Cluster mode: a run the controller records only after a status write
/// has paid past its start (here its pod comes after that write; in a
/// cluster, a pod or workload watch running behind, or a workload kind
/// discovered late) is billed back from its start by the next write, into
/// the status and the ledger alike, and never twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_seen_after_its_window_was_paid_is_billed_back_once() {
    use crate::cluster::{pod, Cluster};
    use kube::api::{DynamicObject, PostParams};
    use std::time::Duration;
    let c = Cluster::start().await;
    let jobs = c.cash_team_watching_jobs().await;
    let j: DynamicObject = serde_json::from_value(job("a").quota("team").cards(4).obj()).unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    c.until_metric("bizrq_controller_tracked{kind=\"workloads\"} 1")
        .await;
    // Two hours on, a write pays the window without the pod: nothing
    // accrues.
    c.set_clock(T0 + 2 * HOUR);
    c.touch("team", 1);
    let q = c
        .until("team", "paid to 12:00", |q| {
            q["status"]["lastReconcileTime"] == "2026-11-21T12:00:00.000Z"
        })
        .await;
    assert_eq!(accrued_acc(&q), 0, "{q}");
    // Now the pod shows, running since 10:00: the next write, at the same
    // instant, bills it back to 10:00.
    c.fake
        .put(pod("ml", "a-1", "Job", "a", 4, "2026-11-21T10:00:00Z"));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.touch("team", 2);
    let q = c
        .until("team", "billed back", |q| accrued_acc(q) != 0)
        .await;
    assert_eq!(accrued_acc(&q), 8 * CARD_HOUR, "4 cards x 2 h: {q}");
    let r = poll_until(100, Duration::from_millis(100), || async {
        let r = report(&c.server, RANGE).await;
        (acc(&r["total"]) == 8 * CARD_HOUR).then_some(r)
    })
    .await
    .expect("the ledger holds what was billed back");
    assert_eq!(r["rows"].as_array().unwrap().len(), 1, "{r}");
    // An hour on: one more hour, the two before not again.
    c.set_clock(T0 + 3 * HOUR);
    c.touch("team", 3);
    let q = c
        .until("team", "paid to 13:00", |q| {
            q["status"]["lastReconcileTime"] == "2026-11-21T13:00:00.000Z"
        })
        .await;
    assert_eq!(accrued_acc(&q), 12 * CARD_HOUR, "4 cards x 3 h: {q}");
    poll_until(100, Duration::from_millis(100), || async {
        let r = report(&c.server, RANGE).await;
        (acc(&r["total"]) == 12 * CARD_HOUR).then_some(())
    })
    .await
    .expect("the ledger equals the status");
}

/// Cluster mode, crash-safe: the controller writes a window's status and
/// then cannot append it (every append fails here), and stops. The
/// window rode in the status write (`status.ledgerOutbox`), so the next
/// controller appends it before it writes again: in the ledger once, and
/// the windows after it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_lost_between_status_write_and_append_is_appended_once() {
    use crate::cluster::{pod, Cluster};
    use crate::fakeapi::FakeApi;
    use kube::api::{DynamicObject, PostParams};
    use std::time::Duration;
    let fake = FakeApi::new();
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::start_on(fake.clone(), dir, T0).await;
    let jobs = c.cash_team_watching_jobs().await;
    let j: DynamicObject = serde_json::from_value(job("a").quota("team").cards(4).obj()).unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    c.until("team", "charged", |q| {
        !q["status"]["users"]["batch/Job/ml/a"].is_null()
    })
    .await;
    // The pod runs, and the controller has recorded its run before time
    // moves (pod and Job both seen; else a reconcile at the later time could write an empty window first,
    // which the ledger below refuses, and nothing could be written after).
    fake.put(pod("ml", "a-1", "Job", "a", 4, "2026-11-21T10:00:00Z"));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    // From now on the ledger refuses every window: the status write goes
    // through, the append after it does not.
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER crash BEFORE INSERT ON budget_ledger_windows \
         BEGIN SELECT RAISE(ABORT, 'the controller stopped here'); END",
    )
    .execute(&pool)
    .await
    .unwrap();
    c.set_clock(T0 + 2 * HOUR);
    // Something happens to the quota: it is reconciled at the new time.
    c.touch("team", 1);
    let q = c
        .until("team", "accrued, the window in the outbox", |q| {
            accrued_acc(q) != 0 && !q["status"]["ledgerOutbox"]["entries"].is_null()
        })
        .await;
    let want = accrued_acc(&q);
    assert_eq!(want, 8 * CARD_HOUR, "{q}");
    let rows: (i64,) = sqlx::query_as("SELECT count(*) FROM budget_ledger")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows.0, 0, "the append failed");
    // The controller stops; the ledger works again; a new one starts.
    let Cluster {
        running, _dir: dir, ..
    } = c;
    running.shutdown().await;
    sqlx::query("DROP TRIGGER crash")
        .execute(&pool)
        .await
        .unwrap();
    let c = Cluster::start_on(fake.clone(), dir, T0 + 2 * HOUR).await;
    poll_until(100, Duration::from_millis(100), || async {
        let r = report(&c.server, RANGE).await;
        (acc(&r["total"]) == want).then_some(())
    })
    .await
    .expect("the lost window is appended from the status's outbox");
    // Once: its window record is there once, and later windows add only
    // themselves.
    c.set_clock(T0 + 3 * HOUR);
    fake.put(pod("ml", "a-2", "Job", "a", 4, "2026-11-21T12:30:00Z"));
    let q = c
        .until("team", "accrued again", |q| accrued_acc(q) > want)
        .await;
    let want = accrued_acc(&q);
    poll_until(100, Duration::from_millis(100), || async {
        let r = report(&c.server, RANGE).await;
        (acc(&r["total"]) == want).then_some(())
    })
    .await
    .expect("the ledger equals what the status accrued, nothing doubled");
    let windows: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT start_ms) FROM budget_ledger_windows WHERE quota = 'team'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(windows.0, windows.1);
    pool.close().await;
}
