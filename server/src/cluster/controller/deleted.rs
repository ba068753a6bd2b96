//! Whether a DELETE a review released really happened (docs/queueing.md
//! §6, "The room a DELETE frees stays freed"). A DELETE's review releases
//! the charge and remembers the object in `status.deleted`, and while the
//! watch still shows that object the reconcile does not charge it again.
//! But anyone who reaches the webhook can send a DELETE review of an
//! object that keeps running (a forged one, or one another webhook then
//! refused): so an entry the watch still shows `VERIFY_AFTER` after the
//! reconcile first met it is checked against the API server itself (one
//! GET of that object). Still there, the same object (being deleted or
//! not: its pods may still run): the entry goes and the object is
//! charged again as any that runs, and another released DELETE of it is
//! asked about at once. Gone (or another object of the name): the entry
//! is honoured until the watch catches up, without asking again. What
//! was learnt lives in this process only: a new leader asks again.

use super::Context;
use crate::cluster::view::kind_key;
use kube::api::{Api, DynamicObject};
use quota::object::deleted::Deleted;
use quota::workload::WorkloadRef;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after the reconcile first meets a released DELETE whose
/// object the watch still shows it asks the API server. A genuine
/// DELETE is stored milliseconds after its review, and the watch
/// delivers it soon after; asking earlier could find the object not yet
/// removed and charge it again. The reconcile first meets an entry at
/// once when another replica wrote it, and at the re-check
/// (`RECHECK_DELAY`, 3 s) when this one did: a forged DELETE is undone
/// 2–5 s after its review, plus one reconcile.
pub(super) const VERIFY_AFTER: Duration = Duration::from_secs(2);

/// At most this many GETs in one reconcile of a quota (the rest wait for
/// the next), each cut after `ASK_TIMEOUT`: a quota's reconcile is never
/// held long by a slow API server.
const MAX_ASKS: usize = 16;
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Per quota and workload: the released DELETEs the reconcile met while
/// the watch still showed their object, and the objects a GET found
/// still there after a released DELETE.
#[derive(Default)]
pub(super) struct DeleteChecks {
    met: Mutex<HashMap<String, HashMap<String, Check>>>,
    /// Per quota, by workload: the uid of an object the API server still
    /// held after a DELETE of it was released. Another released DELETE of
    /// that object (a forged review sent again, a DELETE another webhook
    /// refuses each time) is asked about at once, not after
    /// `VERIFY_AFTER`: repeating it keeps the object uncharged no longer
    /// than a GET. Kept while the watch shows that object.
    alive: Mutex<HashMap<String, HashMap<String, String>>>,
    /// Quotas to reconcile again, and when, to ask about entries met.
    again: Mutex<HashMap<String, Instant>>,
}

struct Check {
    uid: String,
    first: Instant,
    /// The API server answered that the object is gone.
    gone: bool,
}

/// What the checks of one quota found.
#[derive(Default)]
pub(super) struct Checked {
    /// Entries whose object the API server still holds: the DELETE never
    /// happened.
    pub alive: BTreeSet<String>,
    /// When to reconcile again to ask about the entries not yet asked.
    pub again: Option<Duration>,
}

impl DeleteChecks {
    /// How long until `quota` should be reconciled again to ask about
    /// the released DELETEs its last reconcile met (taken: asked once).
    pub(super) fn take_again(&self, quota: &str) -> Option<Duration> {
        let at = self.again.lock().unwrap().remove(quota)?;
        Some(at.saturating_duration_since(Instant::now()))
    }

    /// After a reconcile's write: the released DELETEs it honoured
    /// (`kept`: each still shown by the watch as its object), as read
    /// fresh in that write. One the checks before it had not met (the
    /// copy they read was older) is met now, and the quota asks to be
    /// reconciled again when it is due.
    pub(super) fn met(&self, quota: &str, kept: &[(String, String)]) {
        if kept.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut due: Option<Instant> = None;
        {
            let mut met = self.met.lock().unwrap();
            let of = met.entry(quota.to_string()).or_default();
            for (w, uid) in kept {
                let c = of.entry(w.clone()).or_insert_with(|| Check {
                    uid: uid.clone(),
                    first: now,
                    gone: false,
                });
                if c.uid != *uid {
                    *c = Check {
                        uid: uid.clone(),
                        first: now,
                        gone: false,
                    };
                }
                if !c.gone {
                    let at = c.first + VERIFY_AFTER + Duration::from_millis(50);
                    due = Some(due.map_or(at, |d| d.min(at)));
                }
            }
        }
        if let Some(at) = due {
            let mut again = self.again.lock().unwrap();
            let e = again.entry(quota.to_string()).or_insert(at);
            *e = (*e).min(at);
        }
    }

    /// `quota` was deleted: what was learnt of its DELETEs goes.
    pub(super) fn forget(&self, quota: &str) {
        self.met.lock().unwrap().remove(quota);
        self.alive.lock().unwrap().remove(quota);
        self.again.lock().unwrap().remove(quota);
    }
}

impl Context {
    /// Of the quota's released DELETEs (`deleted`), those whose object the
    /// watch (`uids`: the object uid of each workload it shows bound to
    /// the quota) still shows: asked of the API server once each has
    /// been met for `VERIFY_AFTER` (at once when that object was found
    /// still there before).
    pub(super) async fn check_deleted(
        &self,
        quota: &str,
        deleted: &BTreeMap<String, Deleted>,
        uids: &BTreeMap<String, String>,
    ) -> Checked {
        let shown: Vec<(String, String)> = deleted
            .iter()
            .filter(|(w, d)| uids.get(*w) == Some(&d.uid))
            .map(|(w, d)| (w.clone(), d.uid.clone()))
            .collect();
        let now = Instant::now();
        let mut ask = Vec::new();
        let mut out = Checked::default();
        let known_alive: HashMap<String, String> = {
            let mut alive = self.deleted_checks.alive.lock().unwrap();
            let known = match alive.get_mut(quota) {
                Some(of) => {
                    of.retain(|w, u| uids.get(w) == Some(u));
                    std::mem::take(of)
                }
                None => HashMap::new(),
            };
            alive.remove(quota);
            known
        };
        {
            let mut met = self.deleted_checks.met.lock().unwrap();
            if shown.is_empty() {
                met.remove(quota);
            } else {
                let of = met.entry(quota.to_string()).or_default();
                of.retain(|w, c| shown.iter().any(|(sw, su)| sw == w && *su == c.uid));
                for (w, uid) in &shown {
                    let c = of.entry(w.clone()).or_insert_with(|| Check {
                        uid: uid.clone(),
                        first: now,
                        gone: false,
                    });
                    if c.gone {
                        continue;
                    }
                    let age = now.duration_since(c.first);
                    let seen_alive = known_alive.get(w) == Some(uid);
                    if (age >= VERIFY_AFTER || seen_alive) && ask.len() < MAX_ASKS {
                        ask.push((w.clone(), uid.clone()));
                    } else {
                        out.wait(VERIFY_AFTER.saturating_sub(age));
                    }
                }
            }
        }
        let mut still_alive = known_alive;
        for (w, uid) in ask {
            let answer = tokio::time::timeout(ASK_TIMEOUT, self.object_alive(&w, &uid))
                .await
                .unwrap_or(None);
            match answer {
                Some(true) => {
                    out.alive.insert(w.clone());
                    still_alive.insert(w.clone(), uid.clone());
                    if let Some(of) = self.deleted_checks.met.lock().unwrap().get_mut(quota) {
                        of.remove(&w);
                    }
                }
                Some(false) => {
                    still_alive.remove(&w);
                    let mut met = self.deleted_checks.met.lock().unwrap();
                    if let Some(c) = met.get_mut(quota).and_then(|of| of.get_mut(&w)) {
                        c.gone = true;
                    }
                }
                // Unanswered: honoured, asked again a moment later.
                None => out.wait(VERIFY_AFTER),
            }
        }
        if !still_alive.is_empty() {
            self.deleted_checks
                .alive
                .lock()
                .unwrap()
                .insert(quota.to_string(), still_alive);
        }
        if let Some(d) = out.again {
            self.deleted_checks
                .again
                .lock()
                .unwrap()
                .insert(quota.to_string(), now + d);
        }
        if !out.alive.is_empty() {
            tracing::warn!(
                quota,
                workloads = ?out.alive,
                "a DELETE a review released did not happen: its object still runs and is charged again"
            );
        }
        out
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

impl Checked {
    fn wait(&mut self, d: Duration) {
        let d = d + Duration::from_millis(50);
        self.again = Some(self.again.map_or(d, |a| a.min(d)));
    }
}
