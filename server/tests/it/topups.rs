//! Top-ups end to end (docs/budgets.md §5) through the transfer flow and a
//! real database, on SQLite and PostgreSQL: hostile requests refused with
//! nothing changed, a grant, a top-up from the parent that conserves the
//! two budgets, two approvals racing for the parent's last budget, a crash
//! between the parent's write and the child's finished by recovery, an
//! expiry that withdraws only what is unspent (and gives it back to the
//! parent), and a policy's scheduled top-up from the parent started once
//! per period by two replicas. Then the JSON API with owners (a grant is
//! an admin's), and cluster mode through the fake API server.

use crate::common::*;
use bizrq::alert_engine::TransferAlerts;
use bizrq::metrics::Metrics;
use bizrq::service::transfers::{
    CrashPoint, TransferRequest, TransferService, DEFAULT_TTL_MS, LEASE_MS,
};
use bizrq::service::{Persist, Service, ServiceError};
use bizrq::store::audit::AuditFilter;
use bizrq::store::sql::SqlStore;
use bizrq::store::transfers::{TransferKind, TransferStatus};
use quota::budget::from_quantity;
use quota::budget::reservations::state_of;
use quota::object::budgets::BudgetPolicy;
use quota::object::budgets::Source;
use quota::object::QuotaSpec;
use quota::time::parse_rfc3339;
use quota::workload::PodSet;
use quota::Quantity;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const GPU: &str = "requests.nvidia.com/gpu";
const H: i64 = 3_600_000;

fn t(s: &str) -> i64 {
    parse_rfc3339(s).unwrap()
}

fn hours(h: i64) -> i128 {
    from_quantity(Quantity::from_units(h))
}

fn monthly(extra: serde_json::Value) -> BudgetPolicy {
    let mut p = json!({"period": {"kind": "monthly", "anchorDay": 1}});
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    serde_json::from_value(p).unwrap()
}

fn spec(parent: &str, cash: &str, policy: Option<BudgetPolicy>) -> QuotaSpec {
    let gpus = if parent.is_empty() { "16" } else { "4" };
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

fn ask(to: &str, amount: &str, source: Option<Source>, until: Option<i64>) -> TransferRequest {
    TransferRequest {
        from: None,
        to: to.into(),
        amounts: resources(&[(CASH, amount)]),
        reason: "the paper deadline".into(),
        revert_at: None,
        kind: TransferKind::TopUp,
        source,
        until,
    }
}

struct World {
    sql: Arc<SqlStore>,
    svc: Arc<Service>,
    transfers: TransferService,
    clock: Arc<std::sync::atomic::AtomicI64>,
    c: bizrq::service::Clock,
}

async fn world(url: &str) -> World {
    let sql = Arc::new(SqlStore::connect(url).await.unwrap());
    let (clock, c) = test_clock(t("2026-11-10T00:00:00Z"));
    let (svc, transfers) = replica(&sql, c.clone());
    World {
        sql,
        svc,
        transfers,
        clock,
        c,
    }
}

fn replica(sql: &Arc<SqlStore>, c: bizrq::service::Clock) -> (Arc<Service>, TransferService) {
    let svc = Arc::new(
        Service::new(
            sql.clone(),
            Default::default(),
            Default::default(),
            Arc::new(Metrics::default()),
        )
        .with_clock(c),
    );
    let transfers = TransferService::new(
        svc.clone(),
        sql.clone(),
        Arc::new(TransferAlerts {
            sql: sql.clone(),
            service: svc.clone(),
            public_url: "http://127.0.0.1:3000".into(),
        }),
    );
    (svc, transfers)
}

impl World {
    fn now(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// (available, spent) of the key's budget now, in acc.
    async fn budget(&self, name: &str) -> (i128, i128) {
        let q = self.svc.current(name).await.unwrap();
        let s = state_of(&q, CASH);
        (s.available(), s.spent)
    }

    async fn request(&self, req: TransferRequest) -> Result<i64, ServiceError> {
        self.transfers
            .request(req, "alice", self.now(), DEFAULT_TTL_MS)
            .await
            .map(|t| t.id)
    }

    async fn audits(&self, action: &str) -> Vec<serde_json::Value> {
        let f = AuditFilter {
            action: Some(action.into()),
            ..Default::default()
        };
        self.sql
            .audit(&f, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|r| serde_json::from_str(r.after.as_deref().unwrap_or("null")).unwrap())
            .collect()
    }
}

async fn top_ups_through_the_transfer_flow(url: &str) {
    let w = world(url).await;
    let now = w.now();
    w.svc
        .create_quota(
            "org",
            spec("", "1000", Some(monthly(json!({})))),
            Persist::Here,
            "",
            false,
        )
        .await
        .unwrap();
    w.svc
        .create_quota(
            "nlp",
            spec("org", "100", Some(monthly(json!({})))),
            Persist::Here,
            "",
            false,
        )
        .await
        .unwrap();
    w.svc
        .create_quota("tiny", spec("org", "1", None), Persist::Here, "", false)
        .await
        .unwrap();
    // org's own budget is 1000 less its children's 101.
    assert_eq!(w.budget("org").await, (hours(899), 0));

    // Hostile requests: a clear refusal each, nothing stored or changed.
    let before = (w.budget("org").await, w.budget("nlp").await);
    let long = "x".repeat(2001);
    let cases: Vec<(TransferRequest, &str)> = vec![
        (
            ask("nlp", "-5", Some(Source::Grant), None),
            "is not positive",
        ),
        (
            ask("nlp", "0", Some(Source::Grant), None),
            "is not positive",
        ),
        (
            ask("nlp", "1000000001", Some(Source::Grant), None),
            "more than the 1000000000",
        ),
        (
            TransferRequest {
                amounts: resources(&[(GPU, "2")]),
                ..ask("nlp", "1", Some(Source::Grant), None)
            },
            "is not a cash key",
        ),
        (
            TransferRequest {
                amounts: resources(&[(CASH, "2"), ("cash/requests.cpu", "2")]),
                ..ask("nlp", "1", Some(Source::Grant), None)
            },
            "exactly one cash key",
        ),
        (
            ask("nlp", "5", Some(Source::Grant), Some(now - 1)),
            "until must be in the future",
        ),
        (
            ask("nlp", "5", Some(Source::Grant), Some(now + 400 * 24 * H)),
            "at most 366 days",
        ),
        (
            TransferRequest {
                from: Some("org".into()),
                ..ask("nlp", "5", Some(Source::Grant), None)
            },
            "leave from out",
        ),
        (ask("nlp", "5", None, None), "needs a source"),
        (
            TransferRequest {
                reason: long,
                ..ask("nlp", "5", Some(Source::Grant), None)
            },
            "at most 2000 characters",
        ),
        (
            TransferRequest {
                amounts: resources(&[("cash/requests.cpu", "2")]),
                ..ask("nlp", "1", Some(Source::Grant), None)
            },
            "is not a cash key of its hard",
        ),
        (
            ask("org", "5", Some(Source::Parent), None),
            "a root of the tree",
        ),
        (
            ask("nlp", "900", Some(Source::Parent), None),
            "gives 900, only 899 is left",
        ),
        (ask("nowhere", "5", Some(Source::Grant), None), "not found"),
    ];
    for (req, says) in cases {
        let e = w.request(req).await.unwrap_err();
        assert!(e.to_string().contains(says), "{e} should say {says}");
        assert!(
            !matches!(e, ServiceError::Internal(_)),
            "{e} is the caller's to fix"
        );
    }
    assert!(w
        .transfers
        .list(&Default::default())
        .await
        .unwrap()
        .is_empty());
    assert_eq!((w.budget("org").await, w.budget("nlp").await), before);

    // A grant: new budget for this period, audited with its entry.
    let id = w
        .request(ask("nlp", "50", Some(Source::Grant), None))
        .await
        .unwrap();
    let done = w.transfers.approve(id, "admin", w.now()).await.unwrap();
    assert_eq!(done.status, TransferStatus::Done, "{:?}", done.result);
    assert_eq!(w.budget("nlp").await, (hours(150), 0));
    assert_eq!(w.budget("org").await, (hours(899), 0));
    let logged = w.audits("budget.topUp").await;
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["entries"][0]["reason"], "topUp");
    assert_eq!(logged[0]["entries"][0]["quota"], "nlp");
    assert_eq!(logged[0]["entries"][0]["amount"], hours(50).to_string());
    // Approving again changes nothing.
    assert!(w.transfers.approve(id, "admin", w.now()).await.is_err());
    assert_eq!(w.budget("nlp").await, (hours(150), 0));

    // From the parent: the two budgets together hold what they held.
    let id = w
        .request(ask("nlp", "30", Some(Source::Parent), None))
        .await
        .unwrap();
    let done = w.transfers.approve(id, "owner", w.now()).await.unwrap();
    assert_eq!(done.status, TransferStatus::Done, "{:?}", done.result);
    assert_eq!(w.budget("org").await, (hours(869), 0));
    assert_eq!(w.budget("nlp").await, (hours(180), 0));
    let logged = w.audits("budget.topUp").await;
    let entries = &logged[0]["entries"];
    assert_eq!(entries[1]["quota"], "org");
    assert_eq!(entries[1]["amount"], (-hours(30)).to_string());

    // Two requests for most of what the parent has: both fit when asked,
    // the second is refused when it executes, changing nothing.
    let a = w
        .request(ask("nlp", "500", Some(Source::Parent), None))
        .await
        .unwrap();
    let b = w
        .request(ask("nlp", "500", Some(Source::Parent), None))
        .await
        .unwrap();
    let (ra, rb) = tokio::join!(
        w.transfers.approve(a, "owner", w.now()),
        w.transfers.approve(b, "owner", w.now())
    );
    let mut statuses = [ra.unwrap(), rb.unwrap()];
    statuses.sort_by_key(|t| t.status == TransferStatus::Done);
    assert_eq!(statuses[0].status, TransferStatus::Rejected);
    assert!(
        statuses[0]
            .result
            .as_deref()
            .unwrap()
            .contains("gives 500, only 369 is left"),
        "{:?}",
        statuses[0].result
    );
    assert_eq!(statuses[1].status, TransferStatus::Done);
    assert_eq!(w.budget("org").await, (hours(369), 0));
    assert_eq!(w.budget("nlp").await, (hours(680), 0));

    // A crash after the parent gave: recovery finishes it, once.
    w.transfers.crash_at(Some(CrashPoint::AfterGiving));
    let id = w
        .request(ask("nlp", "10", Some(Source::Parent), None))
        .await
        .unwrap();
    let stopped = w.transfers.approve(id, "owner", w.now()).await.unwrap();
    assert_eq!(stopped.status, TransferStatus::Executing);
    assert_eq!(w.budget("org").await, (hours(359), 0));
    assert_eq!(w.budget("nlp").await, (hours(680), 0));
    w.transfers.crash_at(None);
    w.clock.fetch_add(LEASE_MS + 1, Ordering::SeqCst);
    w.transfers.recover().await.unwrap();
    w.transfers.recover().await.unwrap();
    assert_eq!(
        w.transfers.get(id).await.unwrap().status,
        TransferStatus::Done
    );
    assert_eq!(w.budget("org").await, (hours(359), 0));
    assert_eq!(w.budget("nlp").await, (hours(690), 0));

    // Expiry withdraws only what is unspent: tiny (1, no period) gets 10
    // for two hours and spends 4 of its 11 meanwhile.
    let now = w.now();
    let id = w
        .request(ask("tiny", "10", Some(Source::Grant), Some(now + 2 * H)))
        .await
        .unwrap();
    w.transfers.approve(id, "admin", now).await.unwrap();
    w.svc
        .charge(bizrq::service::ChargeRequest::new(
            "tiny",
            "batch/Job/ml/a",
            cards(2),
            "u1",
        ))
        .await
        .unwrap();
    w.clock.fetch_add(H, Ordering::SeqCst);
    assert_eq!(w.transfers.expire_top_ups(w.now()).await.unwrap(), 0);
    w.clock.fetch_add(H, Ordering::SeqCst);
    assert_eq!(w.transfers.expire_top_ups(w.now()).await.unwrap(), 1);
    assert_eq!(w.budget("tiny").await, (hours(4), hours(4)));
    let row = w.transfers.get(id).await.unwrap();
    let u = row.top_up.unwrap();
    assert_eq!(u.withdrawn, Some(Quantity::from_units(7)));
    assert_eq!(w.transfers.expire_top_ups(w.now()).await.unwrap(), 0);
    assert_eq!(w.budget("tiny").await, (hours(4), hours(4)));
    let logged = w.audits("budget.topUpExpire").await;
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["entries"][0]["amount"], (-hours(7)).to_string());

    // From the parent with an expiry: the unspent part goes back to it.
    let now = w.now();
    let id = w
        .request(ask("nlp", "20", Some(Source::Parent), Some(now + H)))
        .await
        .unwrap();
    w.transfers.approve(id, "owner", now).await.unwrap();
    assert_eq!(w.budget("org").await, (hours(339), 0));
    w.clock.fetch_add(H, Ordering::SeqCst);
    w.transfers.sweep(w.now()).await.unwrap();
    assert_eq!(w.budget("org").await, (hours(359), 0));
    assert_eq!(w.budget("nlp").await, (hours(690), 0));

    // A scheduled top-up from the parent: two replicas start it once.
    let mut s = w.svc.get("nlp").await.unwrap().quota.spec;
    s.budgets.insert(
        CASH.into(),
        monthly(json!({"scheduledTopUp": {"amount": "5", "source": "parent"}})),
    );
    w.svc
        .update_quota("nlp", s, None, Persist::Here, false)
        .await
        .unwrap();
    let (_, other) = replica(&w.sql, w.c.clone());
    let (x, y) = tokio::join!(
        w.transfers.schedule_top_ups(w.now()),
        other.schedule_top_ups(w.now())
    );
    assert_eq!(x.unwrap() + y.unwrap(), 1);
    assert_eq!(w.transfers.schedule_top_ups(w.now()).await.unwrap(), 0);
    assert_eq!(w.budget("org").await, (hours(354), 0));
    assert_eq!(w.budget("nlp").await, (hours(695), 0));
    // December: the period closed with its top-ups; the next one gets its own.
    w.clock.store(t("2026-12-01T01:00:00Z"), Ordering::SeqCst);
    w.svc.resync().await.unwrap();
    let (x, y) = tokio::join!(
        other.schedule_top_ups(w.now()),
        w.transfers.schedule_top_ups(w.now())
    );
    assert_eq!(x.unwrap() + y.unwrap(), 1);
    let nlp = w.svc.get("nlp").await.unwrap().quota;
    let p = &nlp.status.budgets[CASH];
    assert_eq!(p.closed[0].top_ups, hours(595));
    assert_eq!(p.top_ups, hours(5));
    assert_eq!(w.budget("nlp").await, (hours(105), 0));
    assert_eq!(w.budget("org").await, (hours(894), 0));
}

fn cards(n: i64) -> Vec<PodSet> {
    vec![PodSet {
        name: "main".into(),
        count: n,
        per_pod: resources(&[(GPU, "1")]),
        qos: None,
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_ups_through_the_transfer_flow_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    top_ups_through_the_transfer_flow(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_ups_through_the_transfer_flow_postgres() {
    top_ups_through_the_transfer_flow(&fresh_postgres().await).await;
}

async fn post(b: &Browser, body: serde_json::Value) -> (reqwest::StatusCode, serde_json::Value) {
    b.api(reqwest::Method::POST, "/api/v1/transfers", Some(body))
        .await
}

/// The JSON API and the portal with owners: an owner of nlp asks; a
/// grant is an admin's to approve (an owner of the parent gets 403), a
/// top-up from the parent is the parent's owner's; hostile requests are
/// 400 with nothing stored; the budgets API and panel show the top-ups,
/// the panel links to the form, and the transfer page shows both budgets
/// before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_portal_ask_for_and_approve_top_ups() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (_clock, c) = test_clock(t("2026-11-20T00:00:00Z"));
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota("org", "", json!({GPU: "16", CASH: "1000"}))
        .await;
    s.create_quota("nlp", "org", json!({GPU: "4", CASH: "100"}))
        .await;
    let admin = Browser::admin(&s).await;
    create_user(&admin, "nina", "nina-password-0123456").await;
    create_user(&admin, "olga", "olga-password-0123456").await;
    bind(&admin, "nina", "nlp", "owner").await;
    bind(&admin, "olga", "org", "owner").await;
    let nina = Browser::logged_in(&s, "nina", "nina-password-0123456").await;
    let olga = Browser::logged_in(&s, "olga", "olga-password-0123456").await;
    let top_up = |amount: &str, source: &str| {
        json!({"kind": "topUp", "to": "nlp", "amounts": {CASH: amount},
               "source": source, "reason": "the paper deadline"})
    };

    for (body, says) in [
        (top_up("-1", "grant"), "is not positive"),
        (top_up("0", "grant"), "is not positive"),
        (top_up("1e12", "grant"), "more than the 1000000000"),
        (
            json!({"kind": "topUp", "to": "nlp", "amounts": {GPU: "1"}, "source": "grant", "reason": "x"}),
            "is not a cash key",
        ),
        (
            json!({"kind": "topUp", "to": "nlp", "amounts": {CASH: "1"}, "source": "grant",
                   "reason": "x", "until": 1}),
            "until must be in the future",
        ),
        (
            json!({"kind": "topUp", "to": "nlp", "amounts": {CASH: "1"}, "source": "grant",
                   "reason": "x".repeat(2001)}),
            "at most 2000 characters",
        ),
    ] {
        let (st, v) = post(&nina, body).await;
        assert_eq!(st, reqwest::StatusCode::BAD_REQUEST, "{v}");
        assert!(v.to_string().contains(says), "{v} should say {says}");
    }
    let (st, v) = post(&nina, top_up("5", "bank")).await;
    assert_eq!(st, reqwest::StatusCode::BAD_REQUEST, "{v}");
    let (_, v) = admin
        .api(reqwest::Method::GET, "/api/v1/transfers", None)
        .await;
    assert_eq!(v["items"].as_array().unwrap().len(), 0, "{v}");

    // A grant: olga owns the parent, but only an admin approves a grant.
    let (st, v) = post(&nina, top_up("50", "grant")).await;
    assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");
    let grant = v["id"].as_i64().unwrap();
    assert_eq!(v["kind"], "topUp");
    let (st, v) = olga
        .api(
            reqwest::Method::POST,
            &format!("/api/v1/transfers/{grant}/approve"),
            None,
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::FORBIDDEN, "{v}");
    assert!(v.to_string().contains("a grant adds new budget"), "{v}");
    let (st, v) = admin
        .api(
            reqwest::Method::POST,
            &format!("/api/v1/transfers/{grant}/approve"),
            None,
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    assert_eq!(v["status"], "done", "{v}");

    // From the parent: nina cannot approve her own; olga sees both
    // budgets before and after, and approves.
    let (st, v) = post(&nina, top_up("30", "parent")).await;
    assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");
    let from_parent = v["id"].as_i64().unwrap();
    let (st, _) = nina
        .api(
            reqwest::Method::POST,
            &format!("/api/v1/transfers/{from_parent}/approve"),
            None,
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::FORBIDDEN);
    let page = olga.get(&format!("/transfers/{from_parent}")).await;
    assert_eq!(page.status, reqwest::StatusCode::OK);
    for want in [
        "Budget left before",
        "from the budget of org this period",
        "cash/requests.nvidia.com/gpu 900",
        "cash/requests.nvidia.com/gpu 870",
        "cash/requests.nvidia.com/gpu 150",
        "cash/requests.nvidia.com/gpu 180",
    ] {
        assert!(page.body.contains(want), "{want}: {}", page.body);
    }
    let (st, v) = olga
        .api(
            reqwest::Method::POST,
            &format!("/api/v1/transfers/{from_parent}/approve"),
            None,
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    assert_eq!(v["status"], "done", "{v}");

    let (st, v) = nina
        .api(reqwest::Method::GET, "/api/v1/quotas/nlp/budgets", None)
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    assert_eq!(v["budgets"][0]["topUps"], "80", "{v}");
    assert_eq!(v["budgets"][0]["left"], "180", "{v}");
    let (_, v) = olga
        .api(reqwest::Method::GET, "/api/v1/quotas/org/budgets", None)
        .await;
    assert_eq!(v["budgets"][0]["topUps"], "-30", "{v}");

    // The panel links to the form, filled in as a top-up; the form asks.
    let page = nina.get("/quotas/nlp").await;
    assert!(page.body.contains("(top-ups 80)"), "{}", page.body);
    let href = "/transfers?topup=nlp&amp;key=cash/requests.nvidia.com/gpu#top-up";
    assert!(page.body.contains(href), "{}", page.body);
    let form = nina
        .get("/transfers?topup=nlp&key=cash/requests.nvidia.com/gpu")
        .await;
    assert_eq!(form.status, reqwest::StatusCode::OK);
    assert!(
        form.body.contains(r#"value="topUp" checked"#),
        "{}",
        form.body
    );
    let asked = nina
        .post(
            "/transfers",
            &[
                ("to", "nlp"),
                ("key", CASH),
                ("amount", "12"),
                ("kind", "topUp"),
                ("source", "grant"),
                ("until", "2026-12-24T00:00"),
                ("reason", "one more run"),
            ],
        )
        .await;
    assert_eq!(
        asked.status,
        reqwest::StatusCode::SEE_OTHER,
        "{}",
        asked.body
    );
    let bad = nina
        .post(
            "/transfers",
            &[
                ("to", "nlp"),
                ("key", CASH),
                ("amount", "12"),
                ("kind", "topUp"),
                ("source", "grant"),
                ("until", "2020-01-01T00:00"),
                ("reason", "too late"),
            ],
        )
        .await;
    assert_eq!(bad.status, reqwest::StatusCode::BAD_REQUEST, "{}", bad.body);
    assert!(
        bad.body.contains("until must be in the future"),
        "{}",
        bad.body
    );
    running.shutdown().await;
}

/// Cluster mode: a grant and a top-up from the parent land in the quota
/// objects' status through the fake API server, and stay there across
/// the controller's reconciles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_writes_top_ups_to_the_quota_objects() {
    use crate::cluster::Cluster;
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota("org", "", json!({GPU: "16", CASH: "1000"}))
        .await;
    s.create_quota("nlp", "org", json!({GPU: "4", CASH: "100"}))
        .await;
    for (amount, source) in [("50", "grant"), ("30", "parent")] {
        let (st, v) = s
            .api(
                reqwest::Method::POST,
                "/api/v1/transfers",
                Some(
                    json!({"kind": "topUp", "to": "nlp", "amounts": {CASH: amount},
                            "source": source, "reason": "deadline"}),
                ),
            )
            .await;
        assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");
        let id = v["id"].as_i64().unwrap();
        let (st, v) = s
            .api(
                reqwest::Method::POST,
                &format!("/api/v1/transfers/{id}/approve"),
                None,
            )
            .await;
        assert_eq!(st, reqwest::StatusCode::OK, "{v}");
        assert_eq!(v["status"], "done", "{v}");
    }
    let acc = |hours: i128| (hours * 3_600_000_000_000_000_000_000).to_string();
    let nlp = c
        .until("nlp", "the top-ups in status", |q| {
            q["status"]["budgets"][CASH]["topUps"] == acc(80)
        })
        .await;
    assert_eq!(
        nlp["status"]["budgets"][CASH]["topUpLog"][1]["id"], "t2",
        "{nlp}"
    );
    c.until("org", "the parent gave", |q| {
        q["status"]["budgets"][CASH]["topUps"] == acc(-30)
    })
    .await;
    // A parent that cannot cover it: refused at the request, nothing stored.
    let (st, v) = s
        .api(
            reqwest::Method::POST,
            "/api/v1/transfers",
            Some(
                json!({"kind": "topUp", "to": "nlp", "amounts": {CASH: "871"},
                        "source": "parent", "reason": "deadline"}),
            ),
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::CONFLICT, "{v}");
    assert!(v.to_string().contains("only 870 is left"), "{v}");
    let (st, v) = s
        .api(reqwest::Method::GET, "/api/v1/quotas/nlp/budgets", None)
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    assert_eq!(v["budgets"][0]["left"], "180", "{v}");
    // Still there after a spec change and the writes that follow it.
    let (st, v) = s
        .api(
            reqwest::Method::PUT,
            "/api/v1/quotas/nlp",
            Some(json!({"metadata": {"name": "nlp"},
                "spec": {"parent": "org", "hard": {GPU: "5", CASH: "100"}}})),
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    c.until("nlp", "the change in status, the top-ups kept", |q| {
        q["status"]["hard"][GPU] == "5" && q["status"]["budgets"][CASH]["topUps"] == acc(80)
    })
    .await;
}
