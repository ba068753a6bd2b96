//! `kubectl get bizrq`'s columns kept true at parents.
//!
//! A quota's summaries for people (`status.summary`, the printer columns,
//! and `status.readable`) are derived in the same write as its status
//! (`cluster::store`). At a parent the GPU column is what runs in its
//! whole subtree, and a child's charge writes the child only: the
//! parent's figure would go stale. So the store's own watch marks every
//! quota it sees written (and, for one deleted, its parent;
//! `SummaryMarks`), and every `summary_every` (`--summary-seconds`, 10 s
//! by default) this loop takes the marks, adds every quota above them,
//! and restates those whose stored columns differ from what a write would
//! derive now (`QuotaStore::stale_summaries`, judged off the async
//! workers on the same store's copy, which holds what marked them).
//! However many charges land below a parent in one period, it is written
//! at most once in it; a figure is at most one period (plus the watch's
//! delay) behind while the writes keep up.
//!
//! At most `MAX_PER_SECOND` restatements a second are made (200 a pass at
//! 10 s): under churn across thousands of parents, or when a new leader
//! judges every quota once, the rest stay marked, oldest first, for the
//! next pass; a column's text that would not change is not written.
//!
//! The restatement is a status write of the service's like any other
//! (`update_status`: compare-and-swap, the service's copy remembered), so
//! it never loses a charge written meanwhile and never makes the next
//! admission retry. A (re)list marks every quota, so summaries written
//! by an older bizrq are restated once when a leader starts.

use super::Context;
use crate::service::ServiceError;
use std::sync::Arc;
use std::time::Duration;

/// Restatements a second at most, whatever the churn.
pub(super) const MAX_PER_SECOND: f64 = 20.0;

/// Restatements in one pass of a loop run every `every`.
fn per_pass(every: Duration) -> usize {
    ((MAX_PER_SECOND * every.as_secs_f64()) as usize).max(1)
}

impl Context {
    pub(super) async fn summaries_loop(self: Arc<Self>) {
        let every = self.cfg.summary_every.max(Duration::from_millis(100));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.restate_summaries(per_pass(every)).await;
        }
    }

    /// One pass: the columns of the marked quotas and of every quota
    /// above them restated where they differ, at most `max` of them (the
    /// rest stay marked). Returns how many writes changed a quota.
    pub(super) async fn restate_summaries(&self, max: usize) -> usize {
        let store = self.service.store.clone();
        let marked = store.summary_marks();
        if marked.is_empty() {
            return 0;
        }
        // A pass over the whole cached forest: off the async workers.
        let judged = tokio::task::spawn_blocking(move || {
            let stale = store.stale_summaries(&marked);
            (store, stale)
        })
        .await;
        let (store, mut stale) = match judged {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(error = %e, "summaries not judged");
                return 0;
            }
        };
        let later = stale.split_off(stale.len().min(max));
        store.put_back_summary_marks(later);
        let mut written = 0;
        for (name, seq) in stale {
            let before = self.service.cached_quota(&name).map(|s| s.version);
            // A write of the status as it is: the store derives the
            // summaries again from what it writes.
            match self
                .service
                .update_status(&name, false, |_| Ok((true, ())))
                .await
            {
                Ok(()) => {
                    // A patch that changed nothing keeps the version.
                    if self.service.cached_quota(&name).map(|s| s.version) != before {
                        written += 1;
                        self.service.metrics.summaries_restated.inc();
                    }
                }
                Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(quota = %name, error = %e, "summary not restated; the next pass retries");
                    store.put_back_summary_marks(vec![(name, seq)]);
                }
            }
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_restates_at_most_twenty_a_second() {
        assert_eq!(per_pass(Duration::from_secs(10)), 200);
        assert_eq!(per_pass(Duration::from_secs(1)), 20);
        assert_eq!(per_pass(Duration::from_millis(10)), 1);
    }
}
