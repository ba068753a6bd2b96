//! Quotas whose charges a review lowered, for the controller to confirm
//! against the cluster a moment later.

use std::time::Duration;

/// How long after a review lowered a quota's charges the controller
/// confirms them: time for the API server to persist a genuine change and
/// for the controller's watch to show it, so only what still exists is
/// restored.
pub const RECHECK_DELAY: Duration = Duration::from_secs(3);

/// Quotas whose charges a review lowered (a DELETE, a scale-down, a
/// relabel, an HPA lifted), each due for a re-check `RECHECK_DELAY` later.
/// Any caller that reaches the webhook can send such a review; the
/// controller reconciles the quota from what the cluster shows, which
/// restores the charge of an object that still exists. In the controller's
/// process (the Lease holder) this is the path; a write by another replica
/// reaches the controller through its quota watch, as a version it did not
/// write. One entry per quota at most.
#[derive(Default)]
pub struct Recheck {
    due: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
    notify: tokio::sync::Notify,
}

impl Recheck {
    pub fn mark(&self, quota: &str) {
        let at = tokio::time::Instant::now() + RECHECK_DELAY;
        if let Ok(mut due) = self.due.lock() {
            // The earliest stays: a stream of lowerings cannot postpone it.
            due.entry(quota.to_string()).or_insert(at);
        }
        self.notify.notify_one();
    }

    /// Wait until some quotas are due; return them (each once).
    pub async fn next(&self) -> Vec<String> {
        loop {
            let notified = self.notify.notified();
            let earliest = self.due.lock().ok().and_then(|d| d.values().min().copied());
            match earliest {
                None => notified.await,
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = notified => {}
                    }
                }
            }
            let now = tokio::time::Instant::now();
            let Ok(mut due) = self.due.lock() else {
                continue;
            };
            let ready = crate::util::take_due(&mut due, now);
            if !ready.is_empty() {
                return ready;
            }
        }
    }
}
