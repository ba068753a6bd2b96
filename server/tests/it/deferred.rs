//! A DELETE is never refused: when its release cannot be written (every
//! compare-and-swap lost, or the database failing), the review answers
//! allowed and the release lands in the background once the store heals.
//! The store here is the real SQLite store behind a switch that makes its
//! status writes fail, or hang.

use crate::common::{deployment, fresh_sqlite, review};
use crate::support::metric_text;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use bizrq::store::{QuotaStore, StoreError, Stored};
use bizrq::webhook::{decide, Endpoint};
use quota::review::Request;
use quota::{Quantity, Quota, QuotaStatus};
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HEALTHY: u8 = 0;
const CONFLICTS: u8 = 1;
const BROKEN: u8 = 2;
const HANGING: u8 = 3;

/// SQLite, whose status writes lose every compare-and-swap (`CONFLICTS`)
/// or fail outright (`BROKEN`) while the switch says so.
struct Faulty {
    inner: SqlStore,
    fault: AtomicU8,
}

#[async_trait::async_trait]
impl QuotaStore for Faulty {
    async fn get(&self, name: &str) -> Result<Option<Stored>, StoreError> {
        self.inner.get(name).await
    }
    async fn list(&self) -> Result<Vec<Stored>, StoreError> {
        self.inner.list().await
    }
    async fn children(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        self.inner.children(name).await
    }
    async fn create(&self, quota: &Quota) -> Result<Stored, StoreError> {
        self.inner.create(quota).await
    }
    async fn replace(&self, current: &Stored, quota: &Quota) -> Result<i64, StoreError> {
        self.inner.replace(current, quota).await
    }
    async fn replace_status(
        &self,
        current: &Stored,
        status: &QuotaStatus,
    ) -> Result<i64, StoreError> {
        match self.fault.load(Ordering::SeqCst) {
            CONFLICTS => Err(StoreError::Conflict(current.quota.name().to_string())),
            BROKEN => Err(StoreError::Backend("disk I/O error".into())),
            HANGING => std::future::pending().await,
            _ => self.inner.replace_status(current, status).await,
        }
    }
    async fn delete(&self, current: &Stored) -> Result<(), StoreError> {
        self.inner.delete(current).await
    }
    async fn workload_quota(&self, workload: &str) -> Result<Option<String>, StoreError> {
        self.inner.workload_quota(workload).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
}

const WREF: &str = "apps/Deployment/nlp/train";

/// A service over a faulty store, with `team` (24 cards) charged 24 by the
/// Deployment `train`.
async fn charged(dir: &tempfile::TempDir) -> (Arc<Service>, Arc<Faulty>) {
    charged_at(dir, None).await
}

/// `charged`, on the clock `clock` when given.
async fn charged_at(
    dir: &tempfile::TempDir,
    clock: Option<Arc<AtomicI64>>,
) -> (Arc<Service>, Arc<Faulty>) {
    let url = fresh_sqlite(dir);
    let args = bizrq::config::ServeArgs::for_tests(&url);
    let store = Arc::new(Faulty {
        inner: SqlStore::connect(&url).await.unwrap(),
        fault: AtomicU8::new(HEALTHY),
    });
    let mut svc = Service::new(
        store.clone(),
        args.key_config(),
        args.prices(),
        Default::default(),
    );
    if let Some(c) = clock {
        svc = svc.with_clock(Arc::new(move || c.load(Ordering::SeqCst)));
    }
    let svc = Arc::new(svc);
    let spec = quota::object::QuotaSpec {
        parent: String::new(),
        hard: [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(24),
        )]
        .into(),
        max: Default::default(),
        budgets: Default::default(),
        queueing: Default::default(),
        fair_sharing: Default::default(),
        idle: None,
    };
    svc.create_quota("team", spec, Persist::Here, "", false)
        .await
        .unwrap();
    let d = deployment("train", "team", 3, 8);
    let v = decide(
        &svc,
        Endpoint::Workloads,
        &request(review("deployment-create.json", "u-create", Some(d), None)),
    )
    .await;
    assert!(v.allowed, "{}", v.message);
    assert!(holds(&svc).await);
    (svc, store)
}

fn request(review: serde_json::Value) -> Request {
    serde_json::from_value(review["request"].clone()).unwrap()
}

async fn holds(svc: &Service) -> bool {
    let q = svc.get("team").await.unwrap().quota;
    q.status.workloads.contains_key(WREF)
}

async fn delete_is_allowed_and_released_later(fault: u8) {
    let dir = tempfile::tempdir().unwrap();
    let (svc, store) = charged(&dir).await;
    store.fault.store(fault, Ordering::SeqCst);
    let d = deployment("train", "team", 3, 8);
    let v = decide(
        &svc,
        Endpoint::Workloads,
        &request(review("deployment-delete.json", "u-delete", None, Some(d))),
    )
    .await;
    assert!(
        v.allowed,
        "a DELETE is never refused: {} {}",
        v.code, v.message
    );
    assert!(
        holds(&svc).await,
        "not released yet: the store refuses writes"
    );
    assert!(svc
        .metrics
        .render()
        .contains("bizrq_deferred_releases_total 1"));
    store.fault.store(HEALTHY, Ordering::SeqCst);
    until_released(&svc).await;
}

async fn until_released(svc: &Service) {
    for _ in 0..100 {
        if !holds(svc).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the deferred release never landed");
}

fn delete_review(uid: &str) -> Request {
    let d = deployment("train", "team", 3, 8);
    request(review("deployment-delete.json", uid, None, Some(d)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_under_contention_is_allowed_and_released_later() {
    delete_is_allowed_and_released_later(CONFLICTS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_on_a_database_error_is_allowed_and_released_later() {
    delete_is_allowed_and_released_later(BROKEN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_on_a_hanging_store_is_answered_in_time_and_released_later() {
    let dir = tempfile::tempdir().unwrap();
    let (svc, store) = charged(&dir).await;
    store.fault.store(HANGING, Ordering::SeqCst);
    // The API server gives the webhook 5 s; the release in the request is
    // cut before, and deferred rather than dropped with the request.
    let v = tokio::time::timeout(
        Duration::from_millis(4500),
        decide(&svc, Endpoint::Workloads, &delete_review("u-delete")),
    )
    .await
    .expect("the DELETE was answered before the API server's 5 s");
    assert!(v.allowed, "{} {}", v.code, v.message);
    assert_eq!(
        metric_text(&svc.metrics.render(), "bizrq_deferred_releases_total"),
        "1"
    );
    store.fault.store(HEALTHY, Ordering::SeqCst);
    until_released(&svc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_release_marks_the_quota_for_a_recheck() {
    let dir = tempfile::tempdir().unwrap();
    let (svc, store) = charged(&dir).await;
    store.fault.store(BROKEN, Ordering::SeqCst);
    let v = decide(&svc, Endpoint::Workloads, &delete_review("u-delete")).await;
    assert!(v.allowed);
    store.fault.store(HEALTHY, Ordering::SeqCst);
    until_released(&svc).await;
    // The release lowered `team`: the controller confirms it against the
    // cluster like any other lowering.
    let due = tokio::time::timeout(Duration::from_secs(10), svc.recheck.next())
        .await
        .expect("team was marked for a re-check");
    assert_eq!(due, vec!["team".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_release_spares_the_charge_of_an_object_created_again() {
    // Two replicas whose clocks differ: the one that admits the object
    // created again runs a second behind the one that took the DELETE.
    let clock = Arc::new(AtomicI64::new(1_795_255_200_000));
    let dir = tempfile::tempdir().unwrap();
    let (svc, store) = charged_at(&dir, Some(clock.clone())).await;
    store.fault.store(BROKEN, Ordering::SeqCst);
    clock.fetch_add(10_000, Ordering::SeqCst);
    let v = decide(&svc, Endpoint::Workloads, &delete_review("u-delete")).await;
    assert!(v.allowed);
    // The store heals and `train` is created again (2 replicas now) before
    // the deferred release runs (its first retry waits half a second),
    // admitted at a time before the DELETE's. (Created again identical,
    // its admission writes nothing and cannot be told apart: the release
    // takes the charge, and the re-check it marks charges it again.)
    store.fault.store(HEALTHY, Ordering::SeqCst);
    clock.fetch_sub(1_000, Ordering::SeqCst);
    let d = deployment("train", "team", 2, 8);
    let v = decide(
        &svc,
        Endpoint::Workloads,
        &request(review("deployment-create.json", "u-again", Some(d), None)),
    )
    .await;
    assert!(v.allowed, "{}", v.message);
    // Past every retry the deferred release would make.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let q = svc.get("team").await.unwrap().quota;
    let c = q
        .status
        .workloads
        .get(WREF)
        .expect("the new charge is kept");
    assert_eq!(c.uid, "u-again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_releases_are_one_per_workload_and_capped() {
    let dir = tempfile::tempdir().unwrap();
    let (svc, store) = charged(&dir).await;
    store.fault.store(BROKEN, Ordering::SeqCst);
    // The same DELETE again and again (the API server retries): one
    // background release.
    for i in 0..5 {
        let v = decide(&svc, Endpoint::Workloads, &delete_review(&format!("u-{i}"))).await;
        assert!(v.allowed);
    }
    assert_eq!(
        metric_text(&svc.metrics.render(), "bizrq_deferred_releases_total"),
        "1"
    );
    // Many workloads: beyond the cap of tasks, counted and left to the
    // reconcile.
    let error = bizrq::service::ServiceError::Internal("disk I/O error".into());
    let cap = bizrq::service::MAX_DEFERRED;
    for i in 0..cap + 9 {
        svc.defer_release(
            Some("team".into()),
            &format!("apps/Deployment/x/w{i}"),
            None,
            "",
            0,
            &error,
        );
    }
    assert_eq!(
        metric_text(&svc.metrics.render(), "bizrq_deferred_releases_total"),
        cap.to_string()
    );
    assert_eq!(
        metric_text(
            &svc.metrics.render(),
            "bizrq_deferred_releases_over_cap_total"
        ),
        "10"
    );
}
