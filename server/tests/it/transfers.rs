//! Quota transfers end to end through the service and a real database, on
//! SQLite and PostgreSQL: both ends change or neither, competing approvals,
//! a crash at every phase finished by recovery, expiry and loans. After
//! every scenario, used == selfUsed + Σ children's hard at every quota.

use crate::common::*;
use bizrq::alert_engine::TransferAlerts;
use bizrq::metrics::Metrics;
use bizrq::service::transfers::{CrashPoint, TransferRequest, TransferService, LEASE_MS};
use bizrq::service::{Persist, Service, ServiceError};
use bizrq::store::sql::SqlStore;
use bizrq::store::transfers::{TransferFilter, TransferStatus};
use quota::object::QuotaSpec;
use quota::Quantity;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

const T0: i64 = 1_800_000_000_000;
const HOUR: i64 = 3_600_000;

struct World {
    sql: Arc<SqlStore>,
    svc: Arc<Service>,
    transfers: TransferService,
    clock: Arc<AtomicI64>,
    _dir: Option<tempfile::TempDir>,
}

impl World {
    async fn sqlite() -> World {
        let dir = tempfile::tempdir().unwrap();
        let url = fresh_sqlite(&dir);
        World::at(&url, Some(dir)).await
    }

    async fn postgres() -> World {
        World::at(&fresh_postgres().await, None).await
    }

    async fn at(url: &str, dir: Option<tempfile::TempDir>) -> World {
        let sql = Arc::new(SqlStore::connect(url).await.unwrap());
        let (clock, c) = test_clock(T0);
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
        let w = World {
            sql,
            svc,
            transfers,
            clock,
            _dir: dir,
        };
        // ai ── cv ── det 10, seg 4      (cv: 16, 2 left)
        //    └─ nlp ── llm 20            (nlp: 24, 4 left)
        w.create("ai", "", "64").await;
        w.create("cv", "ai", "16").await;
        w.create("nlp", "ai", "24").await;
        w.create("det", "cv", "10").await;
        w.create("seg", "cv", "4").await;
        w.create("llm", "nlp", "20").await;
        w
    }

    fn now(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    fn advance(&self, ms: i64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
    }

    async fn create(&self, name: &str, parent: &str, gpus: &str) {
        let pods = match parent {
            "" => "1000",
            "ai" => "100",
            _ => "10",
        };
        let spec = QuotaSpec {
            parent: parent.into(),
            hard: resources(&[(GPU, gpus), ("pods", pods)]),
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        };
        self.svc
            .create_quota(name, spec, Persist::Here, "", false)
            .await
            .unwrap();
    }

    async fn gpus(&self, name: &str) -> Quantity {
        self.svc.get(name).await.unwrap().quota.spec.hard[GPU]
    }

    async fn all_gpus(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for q in self.svc.list().await.unwrap() {
            out.push((q.name().to_string(), q.spec.hard[GPU].to_string()));
        }
        out
    }

    async fn request(&self, from: Option<&str>, to: &str, gpus: &str) -> i64 {
        self.try_request(from, to, gpus, None).await.unwrap()
    }

    async fn try_request(
        &self,
        from: Option<&str>,
        to: &str,
        gpus: &str,
        revert_at: Option<i64>,
    ) -> Result<i64, ServiceError> {
        let req = TransferRequest {
            from: from.map(str::to_string),
            to: to.into(),
            amounts: resources(&[(GPU, gpus)]),
            reason: "training deadline".into(),
            revert_at,
            kind: Default::default(),
            source: None,
            until: None,
        };
        Ok(self
            .transfers
            .request(req, "alice", self.now(), 24 * HOUR)
            .await?
            .id)
    }

    /// used == selfUsed + Σ children's hard at every quota, every carve-out
    /// is its child's hard, and nothing is held.
    async fn assert_consistent(&self) {
        let all = self.svc.list().await.unwrap();
        for p in &all {
            let kids: Vec<_> = all.iter().filter(|c| c.spec.parent == p.name()).collect();
            for k in p.spec.hard.keys() {
                let sum = kids.iter().fold(Quantity::ZERO, |a, c| {
                    a.saturating_add(quota::resources::get(&c.spec.hard, k))
                });
                assert_eq!(
                    quota::resources::get(&p.status.used, k),
                    quota::resources::get(&p.status.self_used, k).saturating_add(sum),
                    "{}: used {k} is not selfUsed + Σ children's hard",
                    p.name()
                );
            }
            for c in &kids {
                assert_eq!(
                    p.status.children[c.name()].hard,
                    c.spec.hard,
                    "{}'s carve-out of {}",
                    p.name(),
                    c.name()
                );
            }
            assert!(
                p.status.transfers.is_empty(),
                "{} still holds {:?}",
                p.name(),
                p.status.transfers
            );
        }
    }
}

fn q(s: &str) -> Quantity {
    s.parse().unwrap()
}

// ---- both quotas change, or neither ---------------------------------------

async fn approved_transfers_move_quota(w: World) {
    // Siblings.
    let id = w.request(Some("det"), "seg", "3").await;
    let t = w.transfers.approve(id, "admin", w.now()).await.unwrap();
    assert_eq!(t.status, TransferStatus::Done, "{:?}", t.result);
    assert_eq!(t.decided_by.as_deref(), Some("admin"));
    assert_eq!(t.plan.as_ref().unwrap().lca, "cv");
    assert_eq!((w.gpus("det").await, w.gpus("seg").await), (q("7"), q("7")));
    w.assert_consistent().await;

    // More from the parent: nlp has 4 left.
    let id = w.request(None, "llm", "4").await;
    let t = w.transfers.approve(id, "admin", w.now()).await.unwrap();
    assert_eq!(t.status, TransferStatus::Done, "{:?}", t.result);
    assert_eq!(
        (w.gpus("nlp").await, w.gpus("llm").await),
        (q("24"), q("24"))
    );
    w.assert_consistent().await;

    // Across subtrees, through ai.
    let id = w.request(Some("det"), "llm", "2").await;
    let t = w
        .transfers
        .approve(id, "owner-of-ai", w.now())
        .await
        .unwrap();
    assert_eq!(t.status, TransferStatus::Done, "{:?}", t.result);
    assert_eq!(
        w.all_gpus().await,
        [
            ("ai", "64"),
            ("cv", "14"),
            ("det", "5"),
            ("llm", "26"),
            ("nlp", "26"),
            ("seg", "7")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    w.assert_consistent().await;
}

async fn a_refused_approval_changes_nothing(w: World) {
    // Fits when asked (cv has 2 left)…
    let id = w.request(None, "seg", "2").await;
    // …but the room is taken before it is approved.
    w.create("ocr", "cv", "2").await;
    let before = w.all_gpus().await;
    let t = w.transfers.approve(id, "admin", w.now()).await.unwrap();
    assert_eq!(t.status, TransferStatus::Rejected);
    assert_eq!(
        t.result.as_deref(),
        Some("bizrq cv: requests.nvidia.com/gpu asks 2, 0 left of 16")
    );
    assert_eq!(w.all_gpus().await, before);
    w.assert_consistent().await;
    let rejected = w.sql.alerts(&Default::default(), 1).await.unwrap();
    assert_eq!(
        rejected[0].message,
        format!("Transfer #{id} of 2 {GPU} from its parent to seg rejected on re-validation: bizrq cv: {GPU} asks 2, 0 left of 16"),
        "re-validation's refusal is an alert too"
    );

    // Refused at the request already, naming key and amount.
    let err = w.try_request(None, "seg", "1", None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq cv: requests.nvidia.com/gpu asks 1, 0 left of 16"
    );
    let err = w
        .try_request(Some("seg"), "det", "5", None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq seg: requests.nvidia.com/gpu gives 5, its hard is only 4: give 4 at most"
    );
    // Refused at the common ancestor after the giving side was lowered:
    // the room there goes (ai is lowered below what it carved, which §2
    // allows) while the transfer is half-way; it undoes what it gave.
    let id = w.request(Some("det"), "llm", "1").await;
    w.transfers.crash_at(Some(CrashPoint::AfterGiving));
    w.transfers.approve(id, "admin", w.now()).await.unwrap();
    w.transfers.crash_at(None);
    assert_eq!(
        (w.gpus("det").await, w.gpus("cv").await),
        (q("9"), q("15")),
        "given, mid-way"
    );
    let mut ai = w.svc.get("ai").await.unwrap().quota.spec;
    ai.hard.insert(GPU.into(), q("30"));
    w.svc
        .update_quota("ai", ai, None, Persist::Here, false)
        .await
        .unwrap();
    w.advance(LEASE_MS + 1);
    w.transfers.recover().await.unwrap();
    let t = w.transfers.get(id).await.unwrap();
    assert_eq!(t.status, TransferStatus::Rejected);
    assert_eq!(
        t.result.as_deref(),
        Some("bizrq ai: requests.nvidia.com/gpu asks 1, 0 left of 30")
    );
    // Refused by recovery, not by a person: the rejection is reported once,
    // also when recovery runs again or another replica reports it too.
    let rejected = || async {
        let f = bizrq::store::alerts::AlertFilter {
            kind: Some(bizrq::alerts::Kind::TransferRejected),
            ..Default::default()
        };
        let all = w.sql.alerts(&f, 100).await.unwrap();
        all.into_iter()
            .filter(|a| a.key == format!("#{id}"))
            .collect::<Vec<_>>()
    };
    let once = rejected().await;
    assert_eq!(once.len(), 1, "{once:?}");
    assert!(once[0].message.contains("on re-validation"), "{once:?}");
    w.transfers.recover().await.unwrap();
    use bizrq::service::transfers::TransferWatcher;
    TransferAlerts {
        sql: w.sql.clone(),
        service: w.svc.clone(),
        public_url: "http://bizrq.test".into(),
    }
    .decided(bizrq::alerts::Kind::TransferRejected, &t)
    .await;
    assert_eq!(rejected().await.len(), 1);
    let mut after = w.all_gpus().await;
    after.retain(|(n, _)| n != "ai");
    let mut expected = before.clone();
    expected.retain(|(n, _)| n != "ai");
    assert_eq!(after, expected, "both sides as they were");
    w.assert_consistent().await;
}

// ---- concurrency ----------------------------------------------------------

async fn competing_approvals_one_wins(w: World) {
    // cv has 2 left; two requests of 2 for two of its children.
    let a = w.request(None, "det", "2").await;
    let b = w.request(None, "seg", "2").await;
    let (ra, rb) = tokio::join!(
        w.transfers.approve(a, "admin", w.now()),
        w.transfers.approve(b, "admin", w.now())
    );
    let statuses = [ra.unwrap(), rb.unwrap()];
    let done = statuses
        .iter()
        .filter(|t| t.status == TransferStatus::Done)
        .count();
    let rejected: Vec<_> = statuses
        .iter()
        .filter(|t| t.status == TransferStatus::Rejected)
        .collect();
    assert_eq!((done, rejected.len()), (1, 1), "{statuses:?}");
    assert_eq!(
        rejected[0].result.as_deref(),
        Some("bizrq cv: requests.nvidia.com/gpu asks 2, 0 left of 16")
    );
    let sum = w.gpus("det").await.saturating_add(w.gpus("seg").await);
    assert_eq!(sum, q("16"), "exactly one got the 2");
    w.assert_consistent().await;

    // Many at once for one room (nlp: 4 left), several through the same
    // carve-out: they wait for each other's holds; exactly 4 units move.
    w.create("asr", "nlp", "0").await;
    let mut ids = Vec::new();
    for i in 0..8 {
        let to = if i % 2 == 0 { "llm" } else { "asr" };
        ids.push(w.request(None, to, "1").await);
    }
    let runs = ids
        .iter()
        .map(|id| w.transfers.approve(*id, "admin", w.now()));
    let ends = futures::future::join_all(runs).await;
    for e in &ends {
        assert!(e.is_ok(), "{e:?}");
    }
    // Whatever waited runs at the sweep.
    for _ in 0..10 {
        w.transfers.recover().await.unwrap();
    }
    let mut done = 0;
    for id in ids {
        let t = w.transfers.get(id).await.unwrap();
        match t.status {
            TransferStatus::Done => done += 1,
            TransferStatus::Rejected => assert_eq!(
                t.result.as_deref(),
                Some("bizrq nlp: requests.nvidia.com/gpu asks 1, 0 left of 24")
            ),
            s => panic!("transfer {id} is {s}: {:?}", t.result),
        }
    }
    assert_eq!(done, 4);
    assert_eq!(
        w.gpus("llm").await.saturating_add(w.gpus("asr").await),
        q("24")
    );
    w.assert_consistent().await;
}

// ---- crashes --------------------------------------------------------------

async fn a_crash_at_any_point_is_finished_by_recovery(w: World) {
    let points = [
        CrashPoint::AfterHolds,
        CrashPoint::AfterGiving,
        CrashPoint::AfterCommit,
        CrashPoint::AfterReceiving,
    ];
    for (i, point) in points.into_iter().enumerate() {
        let id = w.request(Some("det"), "llm", "1").await;
        w.transfers.crash_at(Some(point));
        let t = w.transfers.approve(id, "admin", w.now()).await.unwrap();
        w.transfers.crash_at(None);
        assert_eq!(t.status, TransferStatus::Executing, "{point:?}");
        let ai = w.svc.get("ai").await.unwrap().quota;
        assert!(
            ai.status.transfers.contains_key(&id.to_string()),
            "{point:?}: ai holds"
        );

        // Mid-way: a held quota cannot be edited or deleted…
        let mut spec = w.svc.get("llm").await.unwrap().quota.spec;
        spec.hard.insert(GPU.into(), q("1"));
        let err = w
            .svc
            .update_quota("llm", spec, None, Persist::Here, false)
            .await
            .unwrap_err();
        assert!(matches!(err, ServiceError::Conflict(_)), "{point:?}: {err}");
        let err = w
            .svc
            .delete_quota("llm", None, Persist::Here, false)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("transfer {id} is moving quota through it")),
            "{point:?}: {err}"
        );
        // …and the resync's repair leaves its carve-outs alone.
        w.advance(10 * 60_000);
        w.svc.resync().await.unwrap();
        // Recovery waits for the lease (the executor might be alive)…
        w.advance(-(10 * 60_000) + LEASE_MS / 2);
        w.transfers.recover().await.unwrap();
        assert_eq!(
            w.transfers.get(id).await.unwrap().status,
            TransferStatus::Executing
        );
        // …then finishes it.
        w.advance(10 * 60_000 + LEASE_MS);
        w.transfers.recover().await.unwrap();
        let t = w.transfers.get(id).await.unwrap();
        assert_eq!(t.status, TransferStatus::Done, "{point:?}: {:?}", t.result);
        assert_eq!(t.lease_until, None, "{point:?}");
        let n = i as i64 + 1;
        assert_eq!(
            w.gpus("det").await,
            Quantity::from_units(10 - n),
            "{point:?}"
        );
        assert_eq!(
            w.gpus("cv").await,
            Quantity::from_units(16 - n),
            "{point:?}"
        );
        assert_eq!(
            w.gpus("nlp").await,
            Quantity::from_units(24 + n),
            "{point:?}"
        );
        assert_eq!(
            w.gpus("llm").await,
            Quantity::from_units(20 + n),
            "{point:?}"
        );
        w.svc.resync().await.unwrap();
        w.assert_consistent().await;
    }
}

async fn a_crash_after_the_row_ended_lets_go_at_recovery(w: World) {
    // Stopped between "done" and letting go of the holds.
    let id = w.request(Some("det"), "seg", "1").await;
    w.transfers.crash_at(Some(CrashPoint::AfterEnd));
    let t = w.transfers.approve(id, "admin", w.now()).await.unwrap();
    w.transfers.crash_at(None);
    assert_eq!(t.status, TransferStatus::Done);
    assert!(t.lease_until.is_some(), "holds are still to let go");
    let cv = w.svc.get("cv").await.unwrap().quota;
    assert!(cv.status.transfers.contains_key(&id.to_string()));
    w.advance(LEASE_MS + 1);
    w.transfers.recover().await.unwrap();
    let t = w.transfers.get(id).await.unwrap();
    assert_eq!((t.status, t.lease_until), (TransferStatus::Done, None));
    w.assert_consistent().await;
}

// ---- lifecycle ------------------------------------------------------------

async fn requests_expire_and_are_decided_once(w: World) {
    let id = w.request(Some("det"), "seg", "1").await;
    let other = w.request(Some("det"), "seg", "1").await;
    let rejected = w
        .transfers
        .reject(other, "bob", "not this quarter", w.now())
        .await
        .unwrap();
    assert_eq!(rejected.status, TransferStatus::Rejected);
    assert_eq!(rejected.decision_note.as_deref(), Some("not this quarter"));
    assert!(w.transfers.approve(other, "admin", w.now()).await.is_err());

    w.advance(24 * HOUR + 1);
    let err = w.transfers.approve(id, "admin", w.now()).await.unwrap_err();
    assert!(err.to_string().contains("expired"), "{err}");
    assert_eq!(
        w.transfers.get(id).await.unwrap().status,
        TransferStatus::Expired
    );

    let late = w.request(Some("det"), "seg", "1").await;
    w.advance(24 * HOUR);
    assert_eq!(w.transfers.expire_due(w.now()).await.unwrap(), 1);
    assert_eq!(
        w.transfers.get(late).await.unwrap().status,
        TransferStatus::Expired
    );

    let listed = w
        .transfers
        .list(&TransferFilter {
            statuses: vec![TransferStatus::Expired],
            quota: Some("seg".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|t| t.id).collect::<Vec<_>>(), [late, id]);
    assert_eq!(w.all_gpus().await.len(), 6);
    assert_eq!(w.gpus("det").await, q("10"), "nothing moved");
    w.assert_consistent().await;
}

async fn a_loan_returns_on_its_own(w: World) {
    let id = w
        .try_request(Some("det"), "seg", "3", Some(w.now() + HOUR))
        .await
        .unwrap();
    let t = w.transfers.approve(id, "admin", w.now()).await.unwrap();
    assert_eq!(t.status, TransferStatus::Done);
    assert_eq!(w.gpus("seg").await, q("7"));
    w.transfers.sweep(w.now()).await.unwrap();
    assert_eq!(w.gpus("seg").await, q("7"), "not due yet");

    w.advance(HOUR);
    w.transfers.sweep(w.now()).await.unwrap();
    assert_eq!(
        (w.gpus("det").await, w.gpus("seg").await),
        (q("10"), q("4"))
    );
    let loan = w.transfers.get(id).await.unwrap();
    let back = w.transfers.get(loan.reverted_by.unwrap()).await.unwrap();
    assert_eq!(
        (back.status, back.reverts),
        (TransferStatus::Done, Some(id))
    );
    assert_eq!(back.from_quota.as_deref(), Some("seg"));
    w.transfers.sweep(w.now()).await.unwrap();
    assert_eq!(w.gpus("det").await, q("10"), "returned once");
    w.assert_consistent().await;

    // A loan from the parent goes back to the parent's remainder; when the
    // borrower's hard was lowered below the loan, the return waits.
    let id = w
        .try_request(None, "llm", "4", Some(w.now() + HOUR))
        .await
        .unwrap();
    w.transfers.approve(id, "admin", w.now()).await.unwrap();
    let mut spec = w.svc.get("llm").await.unwrap().quota.spec;
    spec.hard.insert(GPU.into(), q("2"));
    w.svc
        .update_quota("llm", spec.clone(), None, Persist::Here, false)
        .await
        .unwrap();
    w.advance(HOUR);
    w.transfers.sweep(w.now()).await.unwrap();
    let back = w
        .transfers
        .get(w.transfers.get(id).await.unwrap().reverted_by.unwrap())
        .await
        .unwrap();
    assert_eq!(back.status, TransferStatus::Approved);
    assert_eq!(
        back.result.as_deref(),
        Some("bizrq llm: requests.nvidia.com/gpu gives 4, its hard is only 2: give 2 at most")
    );
    spec.hard.insert(GPU.into(), q("24"));
    w.svc
        .update_quota("llm", spec, None, Persist::Here, false)
        .await
        .unwrap();
    w.transfers.sweep(w.now()).await.unwrap();
    assert_eq!(
        w.transfers.get(back.id).await.unwrap().status,
        TransferStatus::Done
    );
    assert_eq!(w.gpus("llm").await, q("20"));
    w.assert_consistent().await;

    // Cash cannot be lent.
    let req = TransferRequest {
        from: Some("det".into()),
        to: "seg".into(),
        amounts: resources(&[("cash/requests.nvidia.com/gpu", "1")]),
        reason: "x".into(),
        revert_at: Some(w.now() + HOUR),
        kind: Default::default(),
        source: None,
        until: None,
    };
    let err = w
        .transfers
        .request(req, "alice", w.now(), HOUR)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("a loan cannot carry cash/"),
        "{err}"
    );
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name(super::World::sqlite().await).await })*
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name(super::World::postgres().await).await })*
        }
    };
}

// ---- alerts -----------------------------------------------------------------

async fn transfer_events_raise_alerts_to_owners_and_admins(w: World) {
    use bizrq::alerts::Kind;
    use bizrq::authz::Role;
    let owner = w.sql.create_user("olga", "x", false, T0).await.unwrap();
    w.sql
        .set_user_email(owner.id, Some("olga@example.com"))
        .await
        .unwrap();
    w.sql
        .set_binding(owner.id, "cv", Role::Owner, T0)
        .await
        .unwrap();
    let admin = w.sql.create_user("root", "x", true, T0).await.unwrap();
    w.sql
        .set_user_email(admin.id, Some("root@example.com"))
        .await
        .unwrap();

    let id = w.request(Some("det"), "seg", "1").await;
    let open = w.sql.open_alerts().await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].kind, open[0].quota.as_str()),
        (Kind::TransferRequested, "seg")
    );
    assert!(
        open[0].message.starts_with(&format!(
            "Transfer #{id} of 1 {GPU} from det to seg requested by alice"
        )),
        "{}",
        open[0].message
    );
    // seg has no owner: cv's owner, and the admin.
    let to: Vec<String> = w
        .sql
        .outbox()
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.recipient)
        .collect();
    assert_eq!(to, ["olga@example.com", "root@example.com"]);

    w.transfers
        .reject(id, "root", "not now", w.now())
        .await
        .unwrap();
    assert!(
        w.sql.open_alerts().await.unwrap().is_empty(),
        "the decision resolves the request"
    );
    let all = w.sql.alerts(&Default::default(), 10).await.unwrap();
    assert_eq!(all[0].kind, Kind::TransferRejected);
    assert_eq!(w.sql.outbox().await.unwrap().len(), 4);

    let id = w.request(Some("det"), "seg", "1").await;
    w.transfers.approve(id, "root", w.now()).await.unwrap();
    let all = w.sql.alerts(&Default::default(), 10).await.unwrap();
    assert!(all
        .iter()
        .any(|a| a.kind == Kind::TransferApproved && a.key == format!("#{id}")));
    assert!(w.sql.open_alerts().await.unwrap().is_empty());

    // Nobody decides: the request's alert resolves when it expires.
    w.request(Some("det"), "seg", "1").await;
    assert_eq!(w.sql.open_alerts().await.unwrap().len(), 1);
    w.advance(25 * HOUR);
    assert_eq!(w.transfers.expire_due(w.now()).await.unwrap(), 1);
    assert!(w.sql.open_alerts().await.unwrap().is_empty());
}

on_both!(
    transfer_events_raise_alerts_to_owners_and_admins,
    approved_transfers_move_quota,
    a_refused_approval_changes_nothing,
    competing_approvals_one_wins,
    a_crash_at_any_point_is_finished_by_recovery,
    a_crash_after_the_row_ended_lets_go_at_recovery,
    requests_expire_and_are_decided_once,
    a_loan_returns_on_its_own,
);
