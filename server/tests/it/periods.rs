//! Budget periods end to end (docs/budgets.md §9): a monthly period closes
//! at its boundary with the accrual split to the millisecond, carry-over
//! and debt apply, a closed period is stored once even with two replicas,
//! a budget spent in one month admits work again in the next, bad
//! policies are refused with a message naming the key, and the budgets
//! API and the quota page show the numbers. Time is the service's clock.

use crate::common::*;
use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service, ServiceError};
use bizrq::store::sql::SqlStore;
use quota::budget::to_quantity;
use quota::object::budgets::BudgetPolicy;
use quota::object::QuotaSpec;
use quota::time::parse_rfc3339;
use quota::workload::PodSet;
use quota::Quantity;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const GPU: &str = "requests.nvidia.com/gpu";

fn t(s: &str) -> i64 {
    parse_rfc3339(s).unwrap()
}

fn monthly(carry: serde_json::Value) -> BudgetPolicy {
    serde_json::from_value(json!({
        "period": {"kind": "monthly", "anchorDay": 1},
        "carry": carry,
    }))
    .unwrap()
}

fn spec(parent: &str, gpus: &str, cash: &str, policy: Option<BudgetPolicy>) -> QuotaSpec {
    QuotaSpec {
        parent: parent.into(),
        hard: resources(&[(GPU, gpus), (CASH, cash)]),
        max: Default::default(),
        budgets: policy
            .map(|p| [(CASH.to_string(), p)].into())
            .unwrap_or_default(),
        queueing: Default::default(),
        fair_sharing: Default::default(),
        idle: None,
    }
}

fn cards(n: i64) -> Vec<PodSet> {
    vec![PodSet {
        name: "main".into(),
        count: n,
        per_pod: resources(&[(GPU, "1")]),
        qos: None,
    }]
}

async fn service(url: &str, clock: bizrq::service::Clock) -> (Service, SqlStore) {
    let store = SqlStore::connect(url).await.unwrap();
    let svc = Service::new(
        Arc::new(store.clone()),
        Default::default(),
        Default::default(),
        Arc::new(Metrics::default()),
    )
    .with_clock(clock);
    (svc, store)
}

/// A month spent to the last card-hour refuses new GPU work; the boundary
/// closes November (spent 12 of 10: a debt of 2 carries) with the accrual
/// split exactly at midnight, and December admits it again.
async fn a_month_closes_at_its_boundary(url: &str) {
    let (clock, c) = test_clock(t("2026-11-30T21:00:00Z"));
    let (svc, store) = service(url, c).await;
    svc.create_quota(
        "root",
        spec("", "16", "1000", None),
        Persist::Here,
        "",
        false,
    )
    .await
    .unwrap();
    let policy = monthly(json!({"kind": "percent", "percent": 50}));
    svc.create_quota(
        "team",
        spec("root", "8", "10", Some(policy)),
        Persist::Here,
        "",
        false,
    )
    .await
    .unwrap();
    svc.charge(bizrq::service::ChargeRequest::new(
        "team",
        "batch/Job/ml/a",
        cards(4),
        "u1",
    ))
    .await
    .unwrap();

    // 2.5 h × 4 cards = 10 card-hours: the month's budget is spent.
    clock.store(t("2026-11-30T23:30:00Z"), Ordering::SeqCst);
    let refused = svc
        .charge(bizrq::service::ChargeRequest::new(
            "team",
            "batch/Job/ml/b",
            cards(1),
            "u2",
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ServiceError::Denied(_)) || refused.to_string().contains(CASH),
        "{refused}"
    );
    assert!(refused.to_string().contains(CASH), "{refused}");

    // Half an hour and a millisecond into December.
    clock.store(t("2026-12-01T00:30:00.001Z"), Ordering::SeqCst);
    svc.resync().await.unwrap();
    let team = svc.get("team").await.unwrap().quota;
    let p = &team.status.budgets[CASH];
    assert_eq!(p.start.as_deref(), Some("2026-12-01T00:00:00.000Z"));
    assert_eq!(p.end.as_deref(), Some("2027-01-01T00:00:00.000Z"));
    let record = &p.closed[0];
    assert_eq!(record.start_ms, t("2026-11-01T00:00:00Z"));
    assert_eq!(record.end_ms, t("2026-12-01T00:00:00Z"));
    // November: 3 h × 4 cards, exactly; 2 over the budget carry as a debt.
    assert_eq!(to_quantity(record.spent), Quantity::from_units(12));
    assert_eq!(to_quantity(record.carried), Quantity::from_units(-2));
    assert_eq!(to_quantity(p.carry_in), Quantity::from_units(-2));
    // December: 4 cards × 30 min 1 ms = 2.000001111… card-hours, rounded up.
    let spent = to_quantity(quota::budget::from_cash_accrued(team.status.accrued(CASH)));
    assert_eq!(spent, Quantity::from_nanos(2_000_001_112));
    // Left: 10 − 2 (debt) − 2.000001111…, rounded down: never overstated.
    let used = team.status.used[CASH];
    assert_eq!(
        Quantity::from_units(10).saturating_sub(used),
        Quantity::from_nanos(5_999_998_888)
    );
    let stored = store
        .budget_periods("team", CASH, i64::MAX, 10)
        .await
        .unwrap();
    assert_eq!(stored, vec![record.clone()]);

    // The budget started again: the refused workload is admitted now.
    svc.charge(bizrq::service::ChargeRequest::new(
        "team",
        "batch/Job/ml/b",
        cards(1),
        "u2",
    ))
    .await
    .unwrap();

    // Into January: what December left carries, at most 50 % of its 10.
    svc.release_workload("team", "batch/Job/ml/a", false)
        .await
        .unwrap();
    svc.release_workload("team", "batch/Job/ml/b", false)
        .await
        .unwrap();
    clock.store(t("2027-01-01T00:00:00Z"), Ordering::SeqCst);
    svc.resync().await.unwrap();
    let team = svc.get("team").await.unwrap().quota;
    let p = &team.status.budgets[CASH];
    let dec = &p.closed[0];
    assert_eq!(dec.start_ms, t("2026-12-01T00:00:00Z"));
    // Left 10 − 2 − spent; carries within 5 card-hours.
    let left =
        10 * 3_600_000_000_000_000_000_000i128 - 2 * 3_600_000_000_000_000_000_000 - dec.spent;
    assert_eq!(dec.carried, left.min(5 * 3_600_000_000_000_000_000_000));
    assert_eq!(dec.carried + dec.expired, left);
    assert_eq!(
        store
            .budget_periods("team", CASH, i64::MAX, 10)
            .await
            .unwrap()
            .len(),
        2
    );
    // Paging: the periods that started before December.
    let older = store
        .budget_periods("team", CASH, t("2026-12-01T00:00:00Z"), 10)
        .await
        .unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].start_ms, t("2026-11-01T00:00:00Z"));
}

#[tokio::test]
async fn a_month_closes_at_its_boundary_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_month_closes_at_its_boundary(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn a_month_closes_at_its_boundary_postgres() {
    a_month_closes_at_its_boundary(&fresh_postgres().await).await;
}

/// Two replicas on one PostgreSQL database both reconcile after the
/// boundary: the period is closed once and stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_store_a_closed_period_once() {
    let url = fresh_postgres().await;
    let (clock, c) = test_clock(t("2026-11-30T22:00:00Z"));
    let (a, store) = service(&url, c.clone()).await;
    let (b, _) = service(&url, c).await;
    let policy = monthly(json!({"kind": "all"}));
    a.create_quota(
        "root",
        spec("", "16", "100", Some(policy)),
        Persist::Here,
        "",
        false,
    )
    .await
    .unwrap();
    a.charge(bizrq::service::ChargeRequest::new(
        "root",
        "batch/Job/ml/a",
        cards(2),
        "u1",
    ))
    .await
    .unwrap();
    clock.store(t("2026-12-01T01:00:00Z"), Ordering::SeqCst);
    let (ra, rb) = tokio::join!(a.resync(), b.resync());
    ra.unwrap();
    rb.unwrap();
    // And again, after a crash-like retry from a stale copy.
    let (ra, rb) = tokio::join!(b.resync(), a.resync());
    ra.unwrap();
    rb.unwrap();
    let stored = store
        .budget_periods("root", CASH, i64::MAX, 50)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(to_quantity(stored[0].spent), Quantity::from_units(4));
    assert_eq!(to_quantity(stored[0].carried), Quantity::from_units(96));
    let root = a.get("root").await.unwrap().quota;
    assert_eq!(root.status.budgets[CASH].closed.len(), 1);
    assert_eq!(
        to_quantity(root.status.budgets[CASH].carry_in),
        Quantity::from_units(96)
    );
}

/// The JSON API and the portal: a bad policy is refused with a message
/// naming the key and nothing changes; a good one is saved (and audited),
/// and the budgets API and the quota page show the period's numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_portal_show_and_set_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (clock, c) = test_clock(t("2026-11-20T00:00:00Z"));
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota("root", "", json!({GPU: "16", CASH: "5000"}))
        .await;

    // Not a cash key of hard; an anchor day that is no day.
    for (budgets, says) in [
        (
            json!({"cash/requests.cpu": {"period": {"kind": "weekly", "startsOn": "monday"}}}),
            "spec.budgets.cash/requests.cpu: a budget policy needs a cash key of spec.hard",
        ),
        (
            json!({CASH: {"period": {"kind": "monthly", "anchorDay": 32}}}),
            "cash/requests.nvidia.com/gpu: monthly anchorDay 32 is not a day of the month",
        ),
        (
            json!({CASH: {"period": {"kind": "none"}, "carry": {"kind": "all"}}}),
            "carry needs a weekly or monthly period",
        ),
    ] {
        let (st, v) = s
            .api(
                Method::PUT,
                "/api/v1/quotas/root",
                Some(json!({"metadata": {"name": "root"},
                    "spec": {"hard": {GPU: "16", CASH: "5000"}, "budgets": budgets}})),
            )
            .await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(v.to_string().contains(says), "{v}");
    }
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/root",
            Some(json!({"metadata": {"name": "root"},
                "spec": {"hard": {GPU: "16", CASH: "5000"},
                         "budgets": {CASH: {"period": {"kind": "monthly", "anchorDay": 1},
                                            "carry": {"kind": "amount", "amount": "200"}}}}})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");

    running
        .service
        .charge(bizrq::service::ChargeRequest::new(
            "root",
            "batch/Job/ml/a",
            cards(2),
            "u1",
        ))
        .await
        .unwrap();
    clock.store(t("2026-11-30T00:00:00Z"), Ordering::SeqCst);
    running.service.resync().await.unwrap();
    // 10 days × 24 h × 2 cards = 480 card-hours spent in November.
    clock.store(t("2026-12-01T12:00:00Z"), Ordering::SeqCst);
    let (st, v) = s
        .api(Method::GET, "/api/v1/quotas/root/budgets", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let b = &v["budgets"][0];
    assert_eq!(b["key"], CASH);
    assert_eq!(b["period"]["start"], "2026-12-01T00:00:00.000Z");
    assert_eq!(b["renewsAt"], "2027-01-01T00:00:00.000Z");
    assert_eq!(b["budget"], "5k");
    assert_eq!(b["carryIn"], "200");
    // 12 h × 2 cards in December.
    assert_eq!(b["spent"], "24");
    assert_eq!(b["left"], "5176");
    let nov = &b["closed"][0];
    assert_eq!(nov["start"], "2026-11-01T00:00:00.000Z");
    assert_eq!(nov["spent"], "528");
    assert_eq!(nov["carried"], "200");
    assert_eq!(nov["expired"], "4272");
    let (st, _) = s
        .api(Method::GET, "/api/v1/quotas/root/budgets?limit=0", None)
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, _) = s
        .api(Method::GET, "/api/v1/quotas/nowhere/budgets", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // The quota page's panel.
    let admin = Browser::logged_in(&s, "admin", ADMIN_PASSWORD).await;
    let page = admin.get("/quotas/root").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("5,176 card-hours left of 5,000 this month (carry-in 200) · renews 2027-01-01 00:00 UTC"),
        "{}",
        page.body
    );

    // The edit form: a bad anchor day is refused on the form, naming the key.
    let form = admin.get("/quotas/root/edit").await;
    let rv = hidden_field(&form.body, "resourceVersion").unwrap();
    let bad = admin
        .post(
            "/quotas/root/edit",
            &[
                ("resourceVersion", &rv),
                (&format!("hard:{GPU}"), "16"),
                (&format!("hard:{CASH}"), "5000"),
                (&format!("budget.period:{CASH}"), "monthly"),
                (&format!("budget.anchor:{CASH}"), "40"),
                (&format!("budget.carry:{CASH}"), "none"),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert!(bad.body.contains("anchorDay 40"), "{}", bad.body);
    let good = admin
        .post(
            "/quotas/root/edit",
            &[
                ("resourceVersion", &rv),
                (&format!("hard:{GPU}"), "16"),
                (&format!("hard:{CASH}"), "5000"),
                (&format!("budget.period:{CASH}"), "weekly"),
                (&format!("budget.startsOn:{CASH}"), "monday"),
                (&format!("budget.carry:{CASH}"), "percent"),
                (&format!("budget.carryValue:{CASH}"), "20"),
            ],
        )
        .await;
    assert_eq!(good.status, StatusCode::SEE_OTHER, "{}", good.body);
    let q = s.quota("root").await;
    assert_eq!(q["spec"]["budgets"][CASH]["period"]["kind"], "weekly");
    assert_eq!(q["spec"]["budgets"][CASH]["carry"]["percent"], 20);
    // The change is in the audit log with the budgets it changed.
    let audit = admin.get("/audit").await;
    assert!(audit.body.contains("budgets"), "{}", audit.body);
    running.shutdown().await;
}

/// Cluster mode: the controller's reconcile cuts the pods' accrual at the
/// week's boundary, closes the week into `status.budgets` (carry all) and
/// the budgets API reads it from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_closes_a_week_at_its_boundary() {
    use crate::cluster::{pod, replicaset, used, Cluster, HOUR, T0};
    let c = Cluster::start().await;
    let s = &c.server;
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "team"},
                "spec": {"hard": {GPU: "8", CASH: "100"},
                         "budgets": {CASH: {"period": {"kind": "weekly", "startsOn": "sunday"},
                                            "carry": {"kind": "all"}}}}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let d = deployment("train", "team", 1, 2);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-1", Some(d.clone()), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    c.fake.put(d);
    c.fake.put(replicaset("nlp", "train"));
    // 2026-11-21 is a Saturday: the week ends at Sunday 00:00 UTC, 14 h on.
    c.fake.put(pod(
        "nlp",
        "train-1",
        "ReplicaSet",
        "train-7d9f",
        2,
        "2026-11-21T10:00:00Z",
    ));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.until("team", "window opened", |q| {
        q["status"]["lastReconcileTime"] == "2026-11-21T10:00:00.000Z"
    })
    .await;
    c.set_clock(T0 + 16 * HOUR);
    c.fake.remove("", "pods", "nlp", "train-1");
    let q = c
        .until("team", "the week closed", |q| {
            q["status"]["budgets"][CASH]["closed"][0].is_object()
        })
        .await;
    let p = &q["status"]["budgets"][CASH];
    let acc = |hours: i128| (hours * 3_600_000_000_000_000_000_000).to_string();
    assert_eq!(p["start"], "2026-11-22T00:00:00.000Z", "{q}");
    assert_eq!(p["closed"][0]["spent"], acc(28), "14 h × 2 cards: {q}");
    assert_eq!(p["closed"][0]["carried"], acc(72), "{q}");
    assert_eq!(p["carryIn"], acc(72), "{q}");
    // 2 h × 2 cards this week, less the 72 carried in.
    assert_eq!(used(&q, CASH), "-68", "{q}");
    let (st, v) = s
        .api(Method::GET, "/api/v1/quotas/team/budgets", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let b = &v["budgets"][0];
    assert_eq!(
        (b["spent"].as_str(), b["left"].as_str()),
        (Some("4"), Some("168")),
        "{v}"
    );
    assert_eq!(b["closed"][0]["spent"], "28", "{v}");
}
