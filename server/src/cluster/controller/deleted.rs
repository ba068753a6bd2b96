//! Whether a DELETE a review released really happened (docs/queueing.md
//! §6, "The room a DELETE frees stays freed"). A DELETE's review releases
//! the charge and remembers the object in `status.deleted`, and while the
//! watch still shows that object the reconcile does not charge it again
//! (`quota::reconcile::forget_deleted`). But anyone who reaches the
//! webhook can send a DELETE review of an object that keeps running (a
//! forged one, or one another webhook then refused): so an entry a
//! reconcile's write honoured is asked of the API server itself (one GET
//! of that object) `VERIFY_AFTER` later. Still there, the same object
//! (being deleted or not: its pods may still run): the entry goes and the
//! object is charged again as any that runs, and a released DELETE of it
//! again is asked about at once. Gone (or another object of the name):
//! the entry is honoured until the watch catches up, without asking
//! again. What was learnt lives in this process only: a new leader asks
//! again.

use super::Context;
use crate::cluster::view::kind_key;
use kube::api::{Api, DynamicObject};
use quota::workload::WorkloadRef;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after a reconcile's write first honoured a released DELETE
/// the API server is asked about its object. A genuine DELETE is stored
/// milliseconds after its review, and the watch delivers it soon after;
/// asking earlier could find the object not yet removed and charge it
/// again. A reconcile first honours an entry at once when another
/// replica wrote it, and at the re-check (`RECHECK_DELAY`, 3 s) when
/// this one did: a forged DELETE is undone 2–5 s after its review, plus
/// one reconcile.
pub(super) const VERIFY_AFTER: Duration = Duration::from_secs(2);

/// At most this many GETs in one reconcile of a quota (the rest wait for
/// the next), each cut after `ASK_TIMEOUT`: a quota's reconcile is never
/// held long by a slow API server.
const MAX_ASKS: usize = 16;
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Per quota, by workload: what the reconciles learnt of the objects of
/// released DELETEs their watch still showed.
#[derive(Default)]
pub(super) struct DeleteChecks(Mutex<HashMap<String, HashMap<String, Known>>>);

struct Known {
    /// The object's uid, as `status.deleted` and the watch name it.
    uid: String,
    /// When a write first honoured its DELETE (or honoured it again).
    since: Instant,
    state: State,
    /// Its DELETE was honoured by the quota's last write.
    kept: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not asked yet: asked once honoured for `VERIFY_AFTER`.
    Unasked,
    /// The API server no longer holds it: honoured until the watch
    /// catches up.
    Gone,
    /// The API server still held it after a released DELETE: known while
    /// the watch shows it, so that a released DELETE of it again (a forged
    /// review sent again, a DELETE another webhook refuses each time) is
    /// asked about at once and frees nothing for longer than a GET.
    Alive,
}

impl Known {
    /// When to ask about it (`None`: not to be asked).
    fn ask_at(&self) -> Option<Instant> {
        match (self.kept, self.state) {
            (true, State::Unasked) => Some(self.since + VERIFY_AFTER),
            // A released DELETE of an object found still there: at once.
            (true, State::Alive) => Some(self.since),
            _ => None,
        }
    }
}

impl DeleteChecks {
    /// `quota` was deleted: what was learnt of its DELETEs goes.
    pub(super) fn forget(&self, quota: &str) {
        self.0.lock().unwrap().remove(quota);
    }
}

impl Context {
    /// Before a reconcile's write: of the released DELETEs the quota's
    /// last write honoured, those due are asked of the API server while
    /// the watch still shows their object (bound to the quota, with the
    /// uid the DELETE released). The workloads whose object it still
    /// holds: their DELETE never happened.
    pub(super) async fn check_deleted(&self, quota: &str) -> BTreeSet<String> {
        let now = Instant::now();
        let names: Vec<String> = match self.deleted_checks.0.lock().unwrap().get(quota) {
            Some(of) => of.keys().cloned().collect(),
            None => return BTreeSet::new(),
        };
        // The object uid of each as the watch shows it, read apart from
        // the checks' lock (one lock at a time).
        let uids: BTreeMap<String, String> = {
            let v = self.view.lock().unwrap();
            names
                .into_iter()
                .filter_map(|w| Some((v.object_uid_in(quota, &w)?, w)))
                .map(|(uid, w)| (w, uid))
                .collect()
        };
        let (ask, more) = {
            let mut all = self.deleted_checks.0.lock().unwrap();
            let Some(of) = all.get_mut(quota) else {
                return BTreeSet::new();
            };
            // What the watch no longer shows as that object is done with.
            of.retain(|w, k| uids.get(w) == Some(&k.uid));
            if of.is_empty() {
                all.remove(quota);
                return BTreeSet::new();
            }
            let due: Vec<(String, String)> = of
                .iter()
                .filter(|(_, k)| k.ask_at().is_some_and(|at| at <= now))
                .map(|(w, k)| (w.clone(), k.uid.clone()))
                .collect();
            let more = due.len() > MAX_ASKS;
            (due.into_iter().take(MAX_ASKS).collect::<Vec<_>>(), more)
        };
        let mut alive = BTreeSet::new();
        let mut again = more;
        for (w, uid) in ask {
            let answer = tokio::time::timeout(ASK_TIMEOUT, self.object_alive(&w, &uid))
                .await
                .unwrap_or(None);
            let state = match answer {
                Some(true) => {
                    alive.insert(w.clone());
                    State::Alive
                }
                Some(false) => State::Gone,
                // Unanswered: honoured, asked again a moment later.
                None => {
                    again = true;
                    continue;
                }
            };
            let mut all = self.deleted_checks.0.lock().unwrap();
            if let Some(k) = all.get_mut(quota).and_then(|of| of.get_mut(&w)) {
                if k.uid == uid {
                    k.state = state;
                }
            }
        }
        if again {
            self.wake_at(quota, self.now() + VERIFY_AFTER.as_millis() as i64);
        }
        if !alive.is_empty() {
            tracing::warn!(
                quota,
                workloads = ?alive,
                "a DELETE a review released did not happen: its object still runs and is charged again"
            );
        }
        alive
    }

    /// After a reconcile's write: the released DELETEs it honoured
    /// (`kept`: reference and object uid, each shown by the watch as that
    /// object), as read fresh in that write. Each is asked about when due,
    /// and the quota is reconciled again then.
    pub(super) fn deleted_met(&self, quota: &str, kept: &[(String, String)]) {
        let now = Instant::now();
        let next = {
            let mut all = self.deleted_checks.0.lock().unwrap();
            let of = all.entry(quota.to_string()).or_default();
            for k in of.values_mut() {
                k.kept = false;
            }
            for (w, uid) in kept {
                let k = of.entry(w.clone()).or_insert_with(|| Known {
                    uid: uid.clone(),
                    since: now,
                    state: State::Unasked,
                    kept: true,
                });
                if k.uid != *uid {
                    *k = Known {
                        uid: uid.clone(),
                        since: now,
                        state: State::Unasked,
                        kept: false,
                    };
                }
                k.kept = true;
            }
            of.retain(|_, k| k.kept || k.state == State::Alive);
            let next = of.values().filter_map(Known::ask_at).min();
            if of.is_empty() {
                all.remove(quota);
            }
            next
        };
        if let Some(at) = next {
            let wait = at.saturating_duration_since(now).as_millis() as i64;
            self.wake_at(quota, self.now() + wait);
        }
    }

    /// Whether the API server holds object `uid` of `wref` (being deleted
    /// or not: an object whose deletion waits for finalizers or for its
    /// pods to stop may still run, and is charged until it is gone).
    /// `None`: it could not be asked (its kind not known to this
    /// controller, or the API server did not answer).
    async fn object_alive(&self, wref: &str, uid: &str) -> Option<bool> {
        let r = WorkloadRef::parse(wref)?;
        let ar = self
            .installed
            .lock()
            .unwrap()
            .get(&kind_key(r.group, r.kind))
            .cloned()?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), r.namespace, &ar);
        match api.get_opt(r.name).await {
            Ok(Some(o)) => Some(o.metadata.uid.as_deref() == Some(uid)),
            Ok(None) => Some(false),
            Err(e) => {
                tracing::warn!(workload = wref, error = %e, "cannot ask whether a deleted object is gone; asking again");
                None
            }
        }
    }
}
