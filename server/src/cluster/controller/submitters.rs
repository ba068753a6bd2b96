//! The submitters' decayed usage a queue's round orders by, when the
//! quota's policy asks for it (`queueing.submitterFairness`,
//! docs/queueing.md §11, "Between the submitters of one quota"): read
//! from the budget ledger the controller appends to, summed in SQL per
//! submitter, cash key and bucket and folded as it streams
//! (`SqlStore::submitter_usage`), and kept for `REFRESH` so a busy
//! queue's rounds do not each sum the ledger (a half-life is days; a
//! minute's lag changes no order that matters).

use super::Context;
use quota::submitters::{self, Usages};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a quota's usage read is used before it is read again.
pub const REFRESH: Duration = Duration::from_secs(60);

/// One quota's usage as read: when, under which half-life (ms), and what
/// it was (None: not readable, so the round goes first come first served).
type Read = (Instant, i64, Option<Arc<Usages>>);

/// Per quota, its last `Read`.
#[derive(Default)]
pub struct Cache(Mutex<HashMap<String, Read>>);

impl Context {
    /// The pool `q`'s round and its preemption plan weigh the queue over:
    /// with its submitters' usage where the policy asks, so the plan takes
    /// room for the entry the round would admit first.
    pub(super) async fn queue_pool(
        &self,
        q: &quota::Quota,
        limits: &quota::resources::ResourceList,
    ) -> quota::queue::Pool {
        let pool = quota::queue::Pool::new(q, limits);
        match self.submitter_usages(q).await {
            Some(u) => pool.with_submitters(u),
            None => pool,
        }
    }

    /// The usage `q`'s round orders its equals by, or None when its policy
    /// does not ask for it, there is no ledger, or it cannot be read (a
    /// warning says why).
    pub(super) async fn submitter_usages(&self, q: &quota::Quota) -> Option<Arc<Usages>> {
        let h = q.spec.queueing.submitter_half_life_ms()?;
        let history = self.history.as_ref()?;
        let name = q.name();
        if let Some((at, was_h, u)) = self.submitters.0.lock().unwrap().get(name) {
            if *was_h == h && at.elapsed() < REFRESH {
                return u.clone();
            }
        }
        let now = self.now();
        let read = history
            .submitter_usage(&[name.to_string()], now, h, submitters::MAX_PAIRS)
            .await;
        let usages = match read {
            Ok(Ok(tally)) => Some(Arc::new(Usages::of(&tally))),
            Ok(Err(why)) => {
                tracing::warn!(quota = %name.escape_debug(), %why,
                    "the budget ledger's submitters' usage was not read; this round goes first come, first served");
                None
            }
            Err(e) => {
                tracing::warn!(quota = %name.escape_debug(), error = %e,
                    "reading submitters' usage failed; this round goes first come, first served");
                None
            }
        };
        self.submitters
            .0
            .lock()
            .unwrap()
            .insert(name.to_string(), (Instant::now(), h, usages.clone()));
        usages
    }
}
