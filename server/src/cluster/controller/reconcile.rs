//! One quota's reconcile: its status brought to what the cluster shows
//! (charges, cash accrued from its pods' runs, its children's carve-outs
//! and loans), then reclaim among its children. `reconcile` is what
//! kube-runtime calls; the status write is the service's compare-and-swap,
//! from the service's own copy of the quota, never from the watch's.

use super::{Context, Error};
use crate::cluster::crd::BizGroupResourceQuota;
use crate::cluster::events::quota_ref;
use crate::cluster::view::{kind_of_ref, Snapshot};
use crate::service::notify::Notice;
use crate::service::ServiceError;
use kube::runtime::controller::Action;
use kube::ResourceExt;
use quota::borrow;
use quota::budget::enforce::OwnWindows;
use quota::keys::cash_target;
use quota::reconcile::{Observed, RESERVATION_TTL_MS};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How one reconcile ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// Status written.
    Written,
    /// Status already right: nothing written.
    Unchanged,
    /// The quota was deleted before its status could be written.
    Gone,
}

impl Reconciled {
    fn label(&self) -> &'static str {
        match self {
            Reconciled::Written => "written",
            Reconciled::Unchanged => "unchanged",
            Reconciled::Gone => "gone",
        }
    }
}

/// Reconcile one quota. Whatever the outcome, the next reconcile comes
/// from a trigger: an event that touches the quota, the recheck, or the
/// periodic resync of every quota (`triggers`); only a queue with a time
/// of its own (an alert threshold, an orphan's grace) asks to run again.
pub async fn reconcile(
    quota: Arc<BizGroupResourceQuota>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = quota.name_any();
    ctx.triggers.started(&name);
    ctx.gauges();
    let started = std::time::Instant::now();
    let result = ctx.reconcile_quota(&name).await;
    ctx.gauges();
    let m = &ctx.service.metrics;
    m.quota_reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(done) => {
            m.count_reconcile(done.label());
            ctx.retries.reset(&name);
            // A queue that needs a round at a time of its own (an alert
            // threshold, an orphan's grace) asks for it; at most a resync
            // away, at least a second.
            let wake = ctx.wake.lock().unwrap().remove(&name);
            Ok(match wake {
                Some(at) => {
                    let ms = at.saturating_sub(ctx.now()).max(1000) as u64;
                    Action::requeue(Duration::from_millis(ms).min(ctx.cfg.resync))
                }
                None => Action::await_change(),
            })
        }
        Err(source) => {
            m.count_reconcile("error");
            Err(Error {
                quota: name,
                source,
            })
        }
    }
}

impl Context {
    /// Kinds whose charges the view can judge: watched and listed, or not
    /// served by the cluster at all (their objects cannot exist).
    pub(super) fn authoritative(&self) -> impl Fn(&str) -> bool + '_ {
        let installed: HashSet<String> = self.installed.lock().unwrap().keys().cloned().collect();
        let v = self.view.lock().unwrap();
        let synced: HashSet<String> = installed
            .iter()
            .filter(|k| v.is_synced(k))
            .cloned()
            .collect();
        move |kind: &str| !installed.contains(kind) || synced.contains(kind)
    }

    /// Bring one quota's status to what the cluster shows.
    pub async fn reconcile_quota(&self, name: &str) -> Result<Reconciled, ServiceError> {
        let _serial = self.one_at_a_time(name).await;
        // The store's feed at least as new as every version of this quota
        // the controller's watch delivered: a decision on it that writes
        // nothing stands (`update_status_watched`), since another writer's
        // later version comes back through the watch and reconciles again.
        // Behind it (past the bound), nothing to write is proven by a read.
        let caught_up = self.store_caught_up(name).await;
        // The reconcile's instant and what the watch shows then, taken
        // together, for the status the write decides on (`View::snapshot`
        // copies only what that status names): taken here for the newest
        // copy this replica knows, which the write decides on first; an
        // attempt on any other version takes its own, in the write (so a
        // Job read as finished has finished by its instant, and the window
        // billed ends then). Here, not in the write, where possible: the
        // write holds the quota's lock that admissions wait for.
        let mut basis = self.service.newest_quota(name).and_then(|s| {
            let m = &s.quota.metadata;
            let version = (Some(m.uid.clone()?), Some(m.resource_version.clone()?));
            let now = self.now();
            let snap = self.view.lock().unwrap().snapshot(name, &s.quota.status);
            Some((version, now, snap))
        });
        let mut now = 0;
        let mut snap = Snapshot::default();
        let authoritative = self.authoritative();
        let listed = self.service.children(name).await?;
        let (kids, confirmed) = self.service.confirm_children(name, listed).await?;
        // Reclaim is weighed only where a child may borrow or is marked.
        let reclaim_kids = kids
            .iter()
            .any(|k| !k.quota.spec.max.is_empty() || !k.quota.status.reclaim.is_empty());
        let prices = self.service.prices;
        let list = self.service.price_list();
        let mut exhausted: Vec<String> = Vec::new();
        let mut queued = false;
        let mut summarized = false;
        let mut preempting = false;
        let mut freed = false;
        // Borrowing this write ended (a borrowing charge released): what
        // its loan gives back, right after (docs/queueing.md §9). The
        // loan's generation is read before the write that fences it.
        let seen = self.service.loan_seen(name);
        let mut loan_back: Option<borrow::Giveback> = None;
        let mut paid_to: Option<i64> = None;
        let mut uid: Option<String> = None;
        let mut plans = Vec::new();
        let mut declared = Vec::new();
        // The ledger entries of the window this write accrues.
        let mut window: Option<(i64, Vec<quota::object::budgets::Entry>)> = None;
        let mut granted_alone: Vec<quota::object::budgets::Entry> = Vec::new();
        // Runs recorded late, billed back in this write (their entries).
        let mut late: Vec<quota::object::budgets::Entry> = Vec::new();
        // The stored status's outbox goes to the ledger before this write
        // replaces it (a no-op unless an append was lost).
        let stored_outbox = self
            .service
            .cached_quota(name)
            .and_then(|s| s.quota.status.ledger_outbox.clone());
        if !self.replay_outbox(name, stored_outbox.as_ref()).await {
            return Err(ServiceError::Unavailable(format!(
                "{name}: the ledger window of its status could not be appended; not writing over it"
            )));
        }
        // What a previous attempt found stored and could not know as
        // appended: replayed now, so this attempt can write over it.
        let unseen = self.ledger_unseen.lock().unwrap().remove(name);
        if !self.replay_outbox(name, unseen.as_ref()).await {
            self.ledger_unseen
                .lock()
                .unwrap()
                .extend(unseen.map(|o| (name.to_string(), o)));
            return Err(ServiceError::Unavailable(format!(
                "{name}: the ledger window of its status could not be appended; not writing over it"
            )));
        }
        let replayed = stored_outbox.as_ref().map(|o| o.key());
        let ledger_known = self.ledger_confirmed.clone();
        let stash = self.ledger_unseen.clone();
        let has_ledger = self.history.is_some();
        let mine = self.accrued_to.lock().unwrap().get(name).copied();
        // Whether this write set `lastReconcileTime` (the window is its).
        let mut stamped = false;
        // What the parent can lend, for this quota's fair share (its
        // status, for people): from the cached parent, when it may borrow.
        let lendable = self
            .service
            .cached_quota(name)
            .filter(|s| !s.quota.spec.max.is_empty() && !s.quota.spec.parent.is_empty())
            .and_then(|s| self.service.cached_quota(&s.quota.spec.parent))
            .map(|p| quota::fair::lendable(&p.quota));
        // Released DELETEs the watch still shows: the API server asked
        // whether each really happened, once honoured for a while.
        let alive = self.check_deleted(name).await;
        // The released DELETEs the write honoured, as it read them.
        let mut kept_deleted: Vec<(String, String)> = Vec::new();
        // A decision that writes nothing stands on the watch's copy only
        // when it also does nothing else: no suspension (a spent budget's
        // plan, a run time over) and no reclaim weighed; those are made
        // on a proven copy, as before.
        let stands =
            |out: &(bool, bool, (String, bool, Option<quota::Quota>), bool)| caught_up && !out.3;
        let result = self
            .service
            .update_status_watched(name, stands, |q| {
                // A held, marked object with no charge waits for a round
                // (docs/queueing.md §12): not a workload to record, or every
                // create that waits would write the quota (`View::snapshot`).
                let version = (q.metadata.uid.clone(), q.metadata.resource_version.clone());
                (now, snap) = match basis.take().filter(|(v, _, _)| *v == version) {
                    Some((_, at, taken)) => (at, taken),
                    None => {
                        let at = self.now();
                        (at, self.view.lock().unwrap().snapshot(name, &q.status))
                    }
                };
                let mut observed = std::mem::take(&mut snap.observed);
                for (wref, c) in &q.status.workloads {
                    if !authoritative(kind_of_ref(wref)) {
                        observed.entry(wref.clone()).or_insert_with(|| Observed {
                            pod_sets: c.pod_sets.clone(),
                            hpa: c.hpa.clone(),
                        });
                    }
                }
                // Released by a DELETE's review while the watch still
                // shows the object: not charged again (its room may be
                // another's now); forgotten once the watch catches up.
                let forgot = quota::reconcile::forget_deleted(
                    &mut observed,
                    &mut q.status,
                    &snap.object_uids,
                    &alive,
                    now,
                );
                kept_deleted = q
                    .status
                    .deleted
                    .iter()
                    .map(|(w, d)| (w.clone(), d.uid.clone()))
                    .collect();
                let before = q.status.clone();
                if let Some(o) = before.ledger_outbox.as_ref().filter(|_| has_ledger) {
                    let known = Some(o.key()) == replayed
                        || ledger_known.lock().unwrap().get(name) == Some(&o.key());
                    if !known {
                        // Read after the replay: append it first (next try).
                        stash.lock().unwrap().insert(name.to_string(), o.clone());
                        return Err(ServiceError::Conflict(format!(
                            "{name}: its status holds a ledger window not yet appended"
                        )));
                    }
                }
                paid_to = before
                    .last_reconcile_time
                    .as_deref()
                    .and_then(quota::time::parse_rfc3339);
                let intervals = snap.intervals();
                // A finished workload none of whose pods still runs runs
                // nothing for good: its charge goes at once instead of
                // being held as a reservation for the window after its
                // admission, so its room comes back when it ends — unless
                // the charge is a newer object's of the same name.
                quota::reconcile::release_finished(
                    &mut q.status.workloads,
                    &mut observed,
                    &snap.released,
                    &snap.finished_uids,
                );
                // A charge it kept is a newer object's of a finished one's
                // name: sized, as ever, by what the watch shows under the
                // name (the snapshot did not copy finished ones), unless
                // that is a released DELETE's object (`forget_deleted`).
                let kept: Vec<&String> = snap
                    .released
                    .keys()
                    .filter(|w| q.status.workloads.contains_key(w))
                    .filter(|w| !q.status.deleted.contains_key(*w))
                    .collect();
                if !kept.is_empty() {
                    let v = self.view.lock().unwrap();
                    v.observe_into(name, kept, &mut observed);
                }
                let out = quota::reconcile::reconcile_priced(
                    q,
                    observed,
                    &intervals,
                    now,
                    RESERVATION_TTL_MS,
                    &prices,
                    &list,
                );
                window = paid_to.filter(|p| *p < now).map(|from| {
                    let runs: Vec<(&str, quota::cash::Interval<'_>)> = snap
                        .runs
                        .iter()
                        .map(|r| (&*r.workload, r.interval()))
                        .collect();
                    let mut entries = quota::budget::ledger::run_entries(
                        name,
                        &q.spec,
                        &runs,
                        &before.users,
                        from,
                        now,
                        &prices,
                        &list,
                    );
                    entries.extend(quota::budget::ledger::carry_entries(name, &out.closed));
                    (from, entries)
                });
                // Runs recorded after a write had paid past their start
                // (their pod or workload seen late): billed back to it,
                // when that write was this controller's own.
                late = match paid_to.and_then(|paid| {
                    OwnWindows::bill_back_from(mine, paid).map(|from| (from, paid))
                }) {
                    Some((from, paid)) if snap.unbilled.iter().any(|u| *u) => {
                        let runs: Vec<(&str, quota::cash::Interval<'_>)> = snap
                            .runs
                            .iter()
                            .zip(&snap.unbilled)
                            .filter(|(_, u)| **u)
                            .map(|(r, _)| (&*r.workload, r.interval()))
                            .collect();
                        quota::budget::enforce::bill_late(
                            q, &before, &runs, from, paid, &prices, &list,
                        )
                    }
                    _ => Vec::new(),
                };
                // Scheduled grants this write adds: with the window (in its
                // outbox), or on their own when there is none yet.
                let granted = quota::budget::ledger::scheduled_entries(name, &before, &q.status);
                granted_alone = match window.as_mut() {
                    Some((_, entries)) => {
                        entries.extend(granted);
                        Vec::new()
                    }
                    None => granted,
                };
                // A finished Job's reservation settles with its charge.
                quota::budget::reservations::settle_finished(&mut q.status, &snap.finished);
                borrow::repair_children(q, &confirmed.for_repair(q, &kids), now);
                match &lendable {
                    Some(l) => q.status.fair_sharing = quota::fair::status(q, l),
                    None if q.spec.max.is_empty() => q.status.fair_sharing = None,
                    None => {}
                }
                // Spent `suspendBatch` budgets: since when, in this write.
                plans = super::budgets::exhaustion_in(q, now, |q| self.candidates(q));
                declared = self.declared_runs(q);
                let changed = out.changed || forgot || q.status.differs_visibly(&before);
                stamped = q.status.last_reconcile_time != before.last_reconcile_time;
                if changed && has_ledger {
                    // The window rides in this write (crash-safe append).
                    q.status.ledger_outbox =
                        window
                            .as_ref()
                            .map(|(from, entries)| quota::object::budgets::Outbox {
                                from_ms: *from,
                                to_ms: now,
                                entries: entries.clone(),
                                extra: Vec::new(),
                            });
                    quota::object::budgets::Outbox::carry_extra(
                        &mut q.status.ledger_outbox,
                        now,
                        late.clone(),
                    );
                }
                // Room given back here may be lent to a sibling's queue.
                freed = before
                    .used
                    .iter()
                    .any(|(k, b)| quota::resources::get(&q.status.used, k) < *b);
                loan_back = borrow::fence_release(q, &before.used, seen);
                exhausted = newly_exhausted(&before, q);
                queued = quota::queue::entries::waits_or_admits(q);
                summarized = q.status.queue_summary.is_some();
                preempting = q
                    .status
                    .reclaim
                    .values()
                    .any(|m| m.origin == quota::object::marks::Origin::Preempt);
                uid = q.metadata.uid.clone();
                let has_cash = q.spec.hard.keys().any(|k| cash_target(k).is_some());
                let borrowing = !q.spec.max.is_empty() || !q.status.reclaim.is_empty();
                // Reclaim among the children weighs this quota as written.
                let weighed = reclaim_kids.then(|| q.clone());
                let acts = !plans.is_empty() || !declared.is_empty() || weighed.is_some();
                Ok((
                    changed,
                    (
                        changed,
                        has_cash,
                        (q.spec.parent.clone(), borrowing, weighed),
                        acts,
                    ),
                ))
            })
            .await;
        let (written, has_cash, (parent, borrowing, weighed), _) = match result {
            Ok(r) => r,
            Err(ServiceError::NotFound(_)) => {
                self.accrued_to.lock().unwrap().remove(name);
                return Ok(Reconciled::Gone);
            }
            Err(e) => return Err(e),
        };
        self.deleted_met(name, &kept_deleted);
        if let (true, Some((from, entries))) = (written, window) {
            self.append_window(name, from, now, entries);
        }
        if written && !granted_alone.is_empty() {
            self.append_ledger(&granted_alone).await;
        }
        if written && !late.is_empty() {
            self.append_ledger(&late).await;
        }
        if written {
            let mut own = self.accrued_to.lock().unwrap();
            match OwnWindows::after_write(mine, stamped, paid_to, now) {
                Some(w) => own.insert(name.to_string(), w),
                None => own.remove(name),
            };
        }
        if written || !has_cash {
            // Accrued up to `now` (or nothing to accrue): the snapshot's
            // runs are billed, ended ones paid.
            self.view
                .lock()
                .unwrap()
                .settle(name, now, Some(&snap.uids));
        } else if let Some(paid_to) = paid_to {
            // Nothing written: runs that ended by the window's stored start
            // were paid by an earlier write.
            self.view.lock().unwrap().settle(name, paid_to, None);
        }
        for key in exhausted {
            self.events.emit(Notice {
                regarding: quota_ref(name, uid.clone()),
                warning: true,
                reason: "CashExhausted",
                action: "Reconcile",
                note: format!(
                    "bizrq {name}: {key} is exhausted; new workloads that need it are denied, running ones keep running"
                ),
            });
        }
        // Budgets: run times declared and over, spent budgets that suspend.
        if !declared.is_empty() {
            self.enforce_run_time(name, declared, now).await;
        }
        if !plans.is_empty() {
            self.enforce_exhaustion(name, uid.clone(), plans).await;
        }
        if let (true, Some(give)) = (written, loan_back) {
            // The loan the released work rode on goes back now, not when
            // the parent's repair finds it old (docs/queueing.md §9).
            if let Err(e) = self.service.return_loan(&parent, name, give).await {
                tracing::warn!(quota = %name, error = %e, "loan not returned; the parent's repair shrinks it later");
            }
        }
        if freed && written && !parent.is_empty() {
            self.touch_borrowers_under(&parent);
        }
        // The parent weighs borrowing and reclaim among its children: after
        // a change here, or while pods here wait for room.
        if !parent.is_empty()
            && (borrowing
                || !self
                    .view
                    .lock()
                    .unwrap()
                    .unschedulable_usage(name)
                    .is_empty())
        {
            self.triggers.touch(BTreeSet::from([parent]));
        }
        if let Some(q) = weighed {
            if let Err(e) = self.reclaim(&q, &kids, now).await {
                tracing::warn!(quota = %name, error = %e, "reclaim step failed; next reconcile retries");
            }
        }
        // A workload suspended by preemption may wait for its entry again
        // (preempt.rs, `repair_preemptions`).
        let queued = queued
            || self
                .view
                .lock()
                .unwrap()
                .any_annotated(name, quota::queue::PREEMPTED_ANNOTATION);
        // Held objects carrying a queue mark wait for a round's fold, and
        // so do this replica's pending entries to be forgotten
        // (docs/queueing.md §12). Only held ones: the mark stays on an
        // object after its admission, and would ask for a round at every
        // reconcile of its quota from then on.
        // Not those whose mark was refused already: told once, they ask
        // for no round until the object or its mark changes.
        // Without marks, held objects carrying one (stranded unless the
        // status lists them) and a summary still counting such objects ask
        // for a round, which restates the summary the alert reads.
        let queued = queued
            || (self.service.marks.is_none() && (summarized || self.has_marked_objects(name)));
        let queued = queued
            || (self.service.marks.is_some()
                && (self.has_marked_objects(name)
                    || self
                        .service
                        .marked
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .contains_key(name)));
        // Pods of charged workloads still gated (made after the admission,
        // or a release cut short) are released.
        self.release_gated(name).await;
        // Room may have freed: the scheduler runs the queue's round
        // (docs/queueing.md §4), then its preemption step — the head may
        // take room from lower-priority work (§6), and marks the queue no
        // longer needs are cancelled.
        if queued || preempting {
            self.schedule(name);
        }
        Ok(if written {
            Reconciled::Written
        } else {
            Reconciled::Unchanged
        })
    }
}

/// Cash keys that reached their budget in this reconcile.
fn newly_exhausted(before: &quota::QuotaStatus, q: &quota::Quota) -> Vec<String> {
    let was: HashSet<&str> = before.exhausted_cash_keys(&q.spec).collect();
    q.status
        .exhausted_cash_keys(&q.spec)
        .filter(|k| !was.contains(k))
        .map(str::to_string)
        .collect()
}
