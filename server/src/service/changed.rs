//! Quotas written since the alert engine last looked: the service marks
//! each write here, the engine (`alert_engine`) takes the batch.

use crate::store::Stored;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A quota as a write left it: the stored object (None: deleted) and the
/// time just before the write, when it was at the latest that current.
#[derive(Clone, Debug)]
pub struct Seen {
    pub quota: Option<Arc<Stored>>,
    pub at_ms: i64,
}

/// Quotas this process wrote since the alert engine last looked: every
/// status change is evaluated within `SETTLE`, from the object written, at
/// no extra read.
#[derive(Default)]
pub struct Changed {
    seen: std::sync::Mutex<BTreeMap<String, Seen>>,
    notify: tokio::sync::Notify,
}

impl Changed {
    /// `name` was written (`quota`; None: deleted) by a write started at `at_ms`.
    pub fn mark(&self, name: &str, at_ms: i64, quota: Option<Arc<Stored>>) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(name.to_string(), Seen { quota, at_ms });
        }
        self.notify.notify_one();
    }

    /// What was written since the last call.
    pub fn take(&self) -> BTreeMap<String, Seen> {
        self.seen
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }

    /// Puts back a batch whose evaluation failed; what was marked since
    /// is newer and stays.
    pub fn restore(&self, batch: BTreeMap<String, Seen>) {
        if let Ok(mut seen) = self.seen.lock() {
            for (name, s) in batch {
                seen.entry(name).or_insert(s);
            }
        }
        self.notify.notify_one();
    }

    /// Until something is marked (at once if something was, unseen).
    pub async fn wait(&self) {
        self.notify.notified().await
    }
}
