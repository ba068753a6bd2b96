//! `kubectl get bizrq`'s columns kept true at parents.
//!
//! A quota's summaries for people (`status.summary`, the printer columns,
//! and `status.readable`) are derived in the same write as its status
//! (`cluster::store`). At a parent the GPU column is what runs in its
//! whole subtree, and a child's charge writes the child only: the
//! parent's figure would go stale. So the quota watch marks every quota
//! it sees written (and, for one deleted, its parent), and every
//! `summary_every` (`--summary-seconds`, 10 s by default) this loop takes
//! the marked quotas, adds every quota above them, and restates the
//! summaries of those whose stored ones differ from what a write would
//! derive now (`QuotaStore::stale_summaries`). However many charges land
//! below a parent in one period, it is written at most once in it; a
//! figure is at most one period (plus the watch's delay) behind. A write
//! that carries the same figures is not made.
//!
//! The restatement is a status write of the service's like any other
//! (`update_status`: compare-and-swap, the service's copy remembered), so
//! it never loses a charge written meanwhile and never makes the next
//! admission retry. A (re)list marks every quota, so summaries written
//! by an older bizrq are restated once when a leader starts.

use super::Context;
use crate::service::ServiceError;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// The quotas seen written since the last pass.
#[derive(Default)]
pub(super) struct Marked(Mutex<BTreeSet<String>>);

impl Marked {
    pub(super) fn mark(&self, name: &str) {
        self.0.lock().unwrap().insert(name.to_string());
    }

    fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn put_back(&self, names: impl IntoIterator<Item = String>) {
        self.0.lock().unwrap().extend(names);
    }
}

impl Context {
    pub(super) async fn summaries_loop(self: Arc<Self>) {
        let every = self
            .cfg
            .summary_every
            .max(std::time::Duration::from_millis(100));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.restate_summaries().await;
        }
    }

    /// One pass: the summaries of the marked quotas and of every quota
    /// above them restated where they differ. Returns how many were
    /// written.
    pub(super) async fn restate_summaries(&self) -> usize {
        let marked = self.summaries.take();
        if marked.is_empty() {
            return 0;
        }
        let stale = self.service.store.stale_summaries(&marked);
        let mut written = 0;
        for name in stale {
            // A write of the status as it is: the store derives the
            // summaries again from what it writes.
            match self
                .service
                .update_status(&name, false, |_| Ok((true, ())))
                .await
            {
                Ok(()) => {
                    written += 1;
                    self.service.metrics.summaries_restated.inc();
                }
                Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(quota = %name, error = %e, "summary not restated; the next pass retries");
                    self.summaries.put_back([name]);
                }
            }
        }
        written
    }
}
