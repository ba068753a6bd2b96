//! A DELETE is never refused: when its release cannot be written (every
//! compare-and-swap lost, or the database failing), the review answers
//! allowed and the release lands in the background once the store heals.
//! The store here is the real SQLite store behind a switch that makes its
//! status writes fail.

use crate::common::{deployment, fresh_sqlite, review};
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use bizrq::store::{QuotaStore, StoreError, Stored};
use bizrq::webhook::{decide, Endpoint, Request};
use quota::{Quantity, Quota, QuotaStatus};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HEALTHY: u8 = 0;
const CONFLICTS: u8 = 1;
const BROKEN: u8 = 2;

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
    let url = fresh_sqlite(dir);
    let args = bizrq::config::ServeArgs::for_tests(&url);
    let store = Arc::new(Faulty {
        inner: SqlStore::connect(&url).await.unwrap(),
        fault: AtomicU8::new(HEALTHY),
    });
    let svc = Arc::new(Service::new(
        store.clone(),
        args.key_config(),
        args.prices(),
        Default::default(),
    ));
    let spec = quota::object::QuotaSpec {
        parent: String::new(),
        hard: [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(24),
        )]
        .into(),
        max: Default::default(),
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
    for _ in 0..100 {
        if !holds(&svc).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the deferred release never landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_under_contention_is_allowed_and_released_later() {
    delete_is_allowed_and_released_later(CONFLICTS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_on_a_database_error_is_allowed_and_released_later() {
    delete_is_allowed_and_released_later(BROKEN).await;
}
