//! This process's copies of the quotas it last wrote or read (the start
//! of a compare-and-swap, never a decision on its own), and one lock per
//! quota so that its writers in this process queue instead of racing.

use super::changed;
use crate::store::{QuotaStore, StoreError, Stored, Watched};
use quota::cash::QosMultipliers;
use quota::object::Quota;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// One writer per quota name in this process. Exact names rather than
/// hashed stripes: in cluster mode a spec write holds its quota's lock while
/// the API server calls our own webhook, which locks the parent, and two
/// names sharing a stripe would wait on each other until the webhook timed out.
#[derive(Default)]
pub(super) struct NameLocks(std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>);

pub(super) struct NameGuard {
    guard: Option<OwnedMutexGuard<()>>,
    name: String,
    locks: Arc<NameLocks>,
}

impl NameLocks {
    pub(super) async fn lock(self: &Arc<Self>, name: &str) -> NameGuard {
        let m = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(name.to_string()).or_default().clone()
        };
        NameGuard {
            guard: Some(m.lock_owned().await),
            name: name.to_string(),
            locks: self.clone(),
        }
    }
}

impl Drop for NameGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        // The last one out removes the entry; a waiter holds a clone.
        let mut map = self.locks.0.lock().unwrap_or_else(|e| e.into_inner());
        if map
            .get(&self.name)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            map.remove(&self.name);
        }
    }
}

/// The last version of each quota this process wrote or read, and the
/// last versions this process wrote (`WRITTEN_KEPT`): their watch events
/// are echoes of our own writes. A version only read may be someone
/// else's change not reconciled yet.
#[derive(Default)]
pub(super) struct Cache(std::sync::Mutex<HashMap<String, Cached>>);

/// A quota's cached copy and the versions of it this process wrote.
pub(super) type Cached = (Arc<Stored>, Vec<i64>);

/// Versions of one quota remembered as written by this process: a busy
/// quota is written again before the echo of its last write arrives.
pub(super) const WRITTEN_KEPT: usize = 8;

/// The copy a decision works on: the stored quota, with its cash accrued
/// up to `now` where the service accrues from its own ledger (standalone).
pub(super) fn working_copy(
    current: &Stored,
    accrue: bool,
    now: i64,
    prices: &QosMultipliers,
    list: &quota::budget::PriceList,
) -> Quota {
    current.quota.status.workloads.keep_sums();
    let mut q = current.quota.clone();
    if accrue {
        q.status.accrue_ledger_priced(&q.spec, now, prices, list);
    }
    q
}

/// A quota just written: the copy to decide on next, and a change for the
/// alert engine (`before_write`: when the write started).
pub(super) fn remember_written(
    cache: &Cache,
    changed: &changed::Changed,
    before_write: i64,
    mut stored: Stored,
) {
    // Its ledger entries are written: the cached copy need not hold them.
    stored.quota.status.ledger = Default::default();
    let stored = Arc::new(stored);
    let name = stored.quota.name().to_string();
    cache.remember_written(stored.clone());
    changed.mark(&name, before_write, Some(stored));
}

/// How long a write that lost its compare-and-swap waits for the store's
/// feed to bring the newer version before it reads the quota whole.
pub(super) const FEED_AFTER_CONFLICT: std::time::Duration = std::time::Duration::from_millis(100);

/// After a compare-and-swap lost on version `lost` (the `attempt`th): the
/// newer version as the store's feed brings it (`QuotaStore::watched_newer`,
/// no request), to decide again on. Asked once per write (`asked`): a
/// quota another replica keeps writing is read fresh after that. None:
/// read it — after a backoff where the copy that lost was itself read
/// fresh (`from_cache` false; a kept copy that lost is only behind, and
/// is read again at once). `Service::modify` and the group commit's
/// batches both ask here.
pub(super) async fn newer_after_conflict(
    store: &dyn QuotaStore,
    name: &str,
    lost: i64,
    asked: &mut bool,
    from_cache: bool,
    attempt: u32,
) -> Option<Arc<Stored>> {
    if !std::mem::replace(asked, true) {
        if let Watched::Newer(s) = store.watched_newer(name, lost, FEED_AFTER_CONFLICT).await {
            return Some(Arc::new(*s));
        }
    }
    if !from_cache {
        super::backoff(attempt).await;
    }
    None
}

/// What proves a decision that writes nothing (or refuses), made on a kept
/// copy of a quota (`prove`).
pub(super) enum Proof {
    /// The stored version and uid are the kept copy's: the decision stands.
    Current,
    /// A newer version (`.1`, read fresh) is stored, and the store's feed
    /// holds it or a later one (no request): decide again on that. It
    /// needs no proof of its own: it was the stored version at some
    /// instant after the fresh read, while the decision was being made,
    /// as a whole read's copy would have been.
    Newer(Arc<Stored>, i64),
    /// Neither: read the quota whole.
    Read,
}

/// `Proof` for a decision on `kept`, a kept copy of `name`: its version
/// and uid read fresh (`QuotaStore::stamp`, the metadata alone), and
/// where it moved on, the newer copy the store's feed already holds
/// (`QuotaStore::watched`), instead of a read and parse of the whole
/// quota — most often the version the controller or another admission
/// just wrote. Not waited for: the caller holds the quota's name lock,
/// which an admission may be waiting on, and a whole read is quicker than
/// a feed that lags.
/// `Service::modify` and the group commit's batches both prove here.
pub(super) async fn prove(store: &dyn QuotaStore, name: &str, kept: &Stored) -> Proof {
    let uid = kept.quota.metadata.uid.as_deref().unwrap_or_default();
    match store.stamp(name).await {
        Ok(Some(s)) if s.uid != uid => Proof::Read,
        Ok(Some(s)) if s.version == kept.version => Proof::Current,
        Ok(Some(s)) if s.version > kept.version => {
            let v = s.version;
            match store.watched(name, Some(v - 1)) {
                Watched::Newer(n)
                    if n.version >= v && n.quota.metadata.uid.as_deref() == Some(uid) =>
                {
                    Proof::Newer(Arc::new(*n), v)
                }
                _ => Proof::Read,
            }
        }
        _ => Proof::Read,
    }
}

/// The one write of a read-modify-write: `q` over `current` (its spec too
/// when that changed). Written, it is remembered and marked for the alert
/// engine (`before_write`: when the write started); failed, the cached copy
/// is forgotten, as it may be stale. `Service::modify` and the group
/// commit's batches both write through here.
pub(super) async fn write_over(
    store: &dyn QuotaStore,
    cache: &Cache,
    changed: &changed::Changed,
    before_write: i64,
    current: &Stored,
    mut q: Quota,
) -> Result<i64, StoreError> {
    let name = q.name().to_string();
    let written = if q.spec != current.quota.spec {
        store.replace(current, &q).await
    } else {
        store.replace_status(current, &q.status).await
    };
    match written {
        // A patch that changed nothing stored keeps the version it was
        // made on (perhaps another writer's, read): not a write of ours.
        Ok(version) if version == current.version => {
            q.status.ledger = Default::default();
            cache.remember(Arc::new(Stored { quota: q, version }));
            Ok(version)
        }
        Ok(version) => {
            q.metadata.resource_version = Some(version.to_string());
            remember_written(cache, changed, before_write, Stored { quota: q, version });
            Ok(version)
        }
        Err(e) => {
            cache.forget(&name);
            Err(e)
        }
    }
}

impl Cache {
    pub(super) fn get(&self, name: &str) -> Option<Arc<Stored>> {
        self.0.lock().ok()?.get(name).map(|(s, _)| s.clone())
    }

    /// Whether this process wrote `version` of `name` (one of its last
    /// `WRITTEN_KEPT` writes of it). Versions are never reused, so another
    /// writer's version is never taken for ours.
    pub(super) fn wrote(&self, name: &str, version: i64) -> bool {
        let Ok(c) = self.0.lock() else { return false };
        c.get(name).is_some_and(|(_, w)| w.contains(&version))
    }

    /// A copy read: what this process wrote before stays remembered.
    pub(super) fn remember(&self, stored: Arc<Stored>) {
        if let Ok(mut c) = self.0.lock() {
            let name = stored.quota.name().to_string();
            let written = c.remove(&name).map(|(_, w)| w).unwrap_or_default();
            c.insert(name, (stored, written));
        }
    }

    pub(super) fn remember_written(&self, stored: Arc<Stored>) {
        if let Ok(mut c) = self.0.lock() {
            let name = stored.quota.name().to_string();
            let mut written = c.remove(&name).map(|(_, w)| w).unwrap_or_default();
            if written.len() == WRITTEN_KEPT {
                written.remove(0);
            }
            written.push(stored.version);
            c.insert(name, (stored, written));
        }
    }

    pub(super) fn forget(&self, name: &str) {
        if let Ok(mut c) = self.0.lock() {
            c.remove(name);
        }
    }

    pub(super) fn all(&self) -> Vec<Arc<Stored>> {
        self.0
            .lock()
            .map(|c| c.values().map(|(s, _)| s.clone()).collect())
            .unwrap_or_default()
    }
}
