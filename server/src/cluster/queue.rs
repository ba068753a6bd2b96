//! The controller's work queue: quota names to reconcile. A name queued
//! twice is reconciled once; a name being reconciled is never handed to a
//! second worker, and if it is queued meanwhile it runs again afterwards
//! (the event may have come after the worker took its snapshot).

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use tokio::sync::Notify;

#[derive(Default)]
struct Inner {
    order: VecDeque<String>,
    queued: HashSet<String>,
    running: HashSet<String>,
    /// Queued while running: requeued when the worker is done.
    again: HashSet<String>,
    closed: bool,
}

#[derive(Default)]
pub struct Queue {
    inner: Mutex<Inner>,
    notify: Notify,
}

impl Queue {
    pub fn push(&self, name: &str) {
        let mut g = self.inner.lock().unwrap();
        if g.running.contains(name) {
            g.again.insert(name.to_string());
            return;
        }
        if g.queued.insert(name.to_string()) {
            g.order.push_back(name.to_string());
            drop(g);
            self.notify.notify_one();
        }
    }

    pub fn extend<I: IntoIterator<Item = String>>(&self, names: I) {
        for n in names {
            self.push(&n);
        }
    }

    /// Waiting names (not counting those being reconciled).
    pub fn depth(&self) -> usize {
        self.inner.lock().unwrap().order.len()
    }

    /// The next name to reconcile, waiting for one; `None` once closed.
    pub async fn pop(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            {
                let mut g = self.inner.lock().unwrap();
                if g.closed {
                    return None;
                }
                if let Some(n) = g.order.pop_front() {
                    g.queued.remove(&n);
                    g.running.insert(n.clone());
                    if !g.order.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(n);
                }
            }
            notified.await;
        }
    }

    /// The worker finished `name`.
    pub fn done(&self, name: &str) {
        let mut g = self.inner.lock().unwrap();
        g.running.remove(name);
        if g.again.remove(name) && g.queued.insert(name.to_string()) {
            g.order.push_back(name.to_string());
            drop(g);
            self.notify.notify_one();
        }
    }

    pub fn close(&self) {
        self.inner.lock().unwrap().closed = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn duplicates_collapse_and_running_names_run_again_after() {
        let q = Queue::default();
        q.push("a");
        q.push("b");
        q.push("a");
        assert_eq!(q.depth(), 2);
        let first = q.pop().await.unwrap();
        assert_eq!(first, "a");
        q.push("a"); // while "a" runs
        assert_eq!(q.depth(), 1, "not handed to a second worker");
        assert_eq!(q.pop().await.unwrap(), "b");
        q.done("b");
        q.done("a");
        assert_eq!(q.pop().await.unwrap(), "a", "runs again after");
        q.close();
        assert_eq!(q.pop().await, None);
    }
}
