//! What makes a quota reconcile besides a change of the quota itself:
//! the quotas the watches' events touch, the recheck of charges a review
//! lowered, and the full resync every `resync`. They reach kube-runtime's
//! `Controller` as `reconcile_on` triggers through one channel; the
//! Controller coalesces them, so a quota touched ten times while it waits
//! reconciles once.

use super::Context;
use crate::cluster::crd::BizGroupResourceQuota;
use crate::service::Service;
use futures::channel::mpsc::{self, UnboundedReceiver, UnboundedSender};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a deleted pod whose owners never resolved is remembered.
const TOMBSTONE_TTL_MS: i64 = 10 * 60_000;

pub(super) struct Triggers {
    tx: UnboundedSender<ObjectRef<BizGroupResourceQuota>>,
    /// Quotas triggered whose reconcile has not started: the queue depth.
    waiting: Mutex<HashSet<String>>,
}

impl Triggers {
    pub(super) fn new() -> (
        Triggers,
        UnboundedReceiver<ObjectRef<BizGroupResourceQuota>>,
    ) {
        let (tx, rx) = mpsc::unbounded();
        let t = Triggers {
            tx,
            waiting: Mutex::default(),
        };
        (t, rx)
    }

    /// Reconcile these quotas (soon, once each).
    pub(super) fn touch(&self, names: impl IntoIterator<Item = String>) {
        for name in names {
            self.waits(&name);
            // Closed only when the Controller is gone: leadership is over.
            let _ = self.tx.unbounded_send(ObjectRef::new(&name));
        }
    }

    /// Every quota, as the service lists them.
    pub(super) async fn touch_all(&self, service: &Service) {
        match service.list().await {
            Ok(all) => self.touch(all.iter().map(|q| q.name().to_string())),
            Err(e) => tracing::warn!(error = %e, "cannot list quotas for a resync"),
        }
    }

    /// `name` is triggered by its own watch (not through `touch`).
    pub(super) fn waits(&self, name: &str) {
        self.waiting.lock().unwrap().insert(name.to_string());
    }

    /// The reconcile of `name` has started (or it was found gone).
    pub(super) fn started(&self, name: &str) {
        self.waiting.lock().unwrap().remove(name);
    }

    pub(super) fn depth(&self) -> usize {
        self.waiting.lock().unwrap().len()
    }
}

impl Context {
    pub(super) fn touch(&self, touched: impl IntoIterator<Item = String>) {
        self.triggers.touch(touched);
        self.gauges();
    }

    /// Every quota, as the service lists them.
    pub(super) async fn touch_all(&self) {
        self.triggers.touch_all(&self.service).await;
        self.gauges();
    }

    /// Quotas whose charges a review lowered in this process, reconciled
    /// from what the cluster shows a moment later (`service::Recheck`): a
    /// forged DELETE or scale-down of an object that still runs is undone
    /// within seconds. Writes by other replicas come through the quota
    /// watch instead, as versions this process did not write.
    pub(super) async fn recheck_loop(self: Arc<Self>) {
        loop {
            let due = self.service.recheck.next().await;
            self.service.metrics.rechecks.inc_by(due.len() as u64);
            self.touch(due);
        }
    }

    /// The full resync: every quota reconciled, tombstones of pods that
    /// never resolved dropped, and the roles and alert rules of quotas
    /// deleted unseen forgotten after a complete list.
    pub(super) async fn resync_loop(self: Arc<Self>) {
        let every = self.cfg.resync.max(Duration::from_secs(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tick.tick().await;
            let started = std::time::Instant::now();
            let pruned = self
                .view
                .lock()
                .unwrap()
                .prune_tombstones(self.now(), TOMBSTONE_TTL_MS);
            if pruned > 0 {
                tracing::debug!(
                    pruned,
                    "tombstones of pods never resolved to a workload dropped"
                );
            }
            self.touch_all().await;
            self.forget_unlisted_quotas().await;
            self.service
                .metrics
                .reconcile_duration
                .observe(started.elapsed().as_secs_f64());
        }
    }

    /// At a resync: a complete list of the quotas from the API server (not
    /// a cache, which may be partial), and the roles and rules of any other
    /// quota go.
    async fn forget_unlisted_quotas(&self) {
        let api: Api<BizGroupResourceQuota> = Api::all(self.client.clone());
        match api.list(&Default::default()).await {
            Ok(list) => {
                let live = list.items.iter().map(|q| q.name_any()).collect();
                self.forget_quotas_not_in(&live).await;
            }
            Err(e) => tracing::debug!(error = %e, "cannot list quotas to forget deleted ones"),
        }
    }
}
