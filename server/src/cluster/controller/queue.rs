//! Admission from a quota's queue (docs/queueing.md §4, controller): the
//! scheduler (`scheduler`) runs one round (`quota::queue::next_admissions`)
//! whenever a reconcile of a quota with a queue asks for it — on releases,
//! spec changes and the resync; the round's admissions are **charged
//! first**, all in the quota's one compare-and-swap that also removes
//! their entries (`Service::admit_round`), and only then are
//! the workloads released (`release`: unsuspended, or for a kind held by
//! gating its pods, the hold annotation removed and its pods ungated). A
//! crash between the two leaves a charge whose uid is `queue:<object uid>`
//! on a held object: the next reconcile finds it (`repair`) and releases
//! it; pods still gated under a charged workload are released at every
//! reconcile (`gates`). Nothing is charged twice (the
//! entry is gone once charged) and nothing is lost (it leaves the queue
//! only with its charge).
//!
//! A quota that may borrow (`max` and a parent) plans against what its
//! parent could lend now and admits on a loan as the webhook's borrowing
//! path does (the loan in the parent's compare-and-swap — one for the
//! whole round — then the charges within hard + loan): never past the
//! limits, and such work is reclaimed in the loans' order like any
//! borrower's.

use super::Context;

/// How long an entry whose object the controller has never seen stays
/// queued (`quota::queue::entries::UNSEEN_GRACE_MS`).
pub const ORPHAN_GRACE_MS: i64 = queue::entries::UNSEEN_GRACE_MS;

/// How many of the rounds' releases (`Context::release_all`) are in
/// flight at once, over every round: enough to overlap the API server's
/// writes, few enough that the webhooks never see a round's whole batch
/// at once. A release is a PATCH through both webhooks and the API
/// server's write, ~20 ms on a busy node, so this bounds the rate at
/// which queued work can start: 8 held the Kueue baseline's tail of
/// small Jobs to ~400 a second, 16 lets it reach ~530 with the
/// webhooks' p99 within a few milliseconds of 8's (docs/benchmarks.md,
/// "the controller yields the CPU").
pub const RELEASES_IN_FLIGHT: usize = 16;

/// How long one release holds its place (`RELEASES_IN_FLIGHT`) at most;
/// past it the release goes on without one.
pub const RELEASE_PLACE_HELD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(5);

use crate::cluster::view::kind_of_ref;
use crate::service::ServiceError;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use quota::object::queue::Queued;
use quota::queue::{self, Decision, Pool};
use quota::workload::{adapter_for_kind, WorkloadRef};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a round leaves to release once the quota is no longer held.
#[derive(Default)]
pub(super) struct ToRelease {
    /// Charged by an admission whose release did not happen (crash repair):
    /// reference and the uid the charge names.
    repairs: Vec<(String, String)>,
    /// Admitted by this round: reference and the uid it was admitted under.
    admitted: Vec<(String, String)>,
    /// How many admissions the round planned (before any was left to a
    /// fairer sibling, or not granted its loan).
    planned: usize,
    /// Marked objects its fold left out because the queue or a
    /// submitter's share was full: an admission makes room for them.
    fold_full: bool,
    /// The limits it planned within (`Service::round_plan`), once read.
    pub(super) limits: Option<quota::resources::ResourceList>,
    /// Where it admitted all it planned and its queue could not preempt
    /// its own running work: the least limits on which a round on its
    /// write could admit anything still queued (`quota::queue::room::floor`;
    /// None too where nothing could be, on this spec). Room to borrow
    /// that grows without reaching them changes nothing a round plans
    /// (`RoundInputs::reach`).
    pub(super) reach: Option<quota::resources::ResourceList>,
    /// It left room to a fairer sibling and admitted the rest: a round on
    /// the same inputs runs while the room still reaches `reach`, grown or
    /// not (`RoundInputs::left_room`).
    pub(super) left_room: bool,
    /// The version of the quota it planned on (`reach` holds for that
    /// version only).
    pub(super) planned_on: Option<crate::store::Stamp>,
    /// Its write of the quota, if it wrote (`Service::admit_round`).
    pub(super) written: Option<crate::service::Written>,
    /// It left room to a fairer sibling while its queue may preempt its
    /// own running work: never the base of a skip (the next round's
    /// preemption step weighs the room the sibling took).
    pub(super) unkept_yield: bool,
}

impl ToRelease {
    /// Whether the round admitted nothing.
    pub(super) fn admitted_none(&self) -> bool {
        self.admitted.is_empty()
    }

    /// Why the round is not settled, if it is not. Settled: it admitted
    /// every admission it planned and found
    /// nothing to repair (a round that planned nothing too): once its own
    /// write is the quota's version and its releases went through, a round
    /// on the same inputs would plan no admission — what fit was taken
    /// (`scheduler`).
    /// Not one that admitted while its fold left marked objects out for a
    /// full queue or share: the next round has room to fold them.
    ///
    /// The answer is the cause its next round runs for
    /// (`bizrq_admission_queue_rounds_run_total{cause}`): it repaired
    /// a crash, admitted fewer than it planned (a loan not granted; room
    /// left to a fairer sibling is not planned, but such a round whose
    /// queue may preempt is not settled either: `unkept_yield`), or
    /// admitted while its fold left marked objects out.
    pub(super) fn unsettled(&self) -> Option<&'static str> {
        if !self.repairs.is_empty() {
            Some("after-repair")
        } else if self.admitted.len() != self.planned || self.unkept_yield {
            Some("after-partial")
        } else if !self.admitted.is_empty() && self.fold_full {
            Some("after-fold-full")
        } else {
            None
        }
    }
}

impl Context {
    /// One round of admissions from `name`'s queue, the crash repair, and
    /// the restated positions. Errors are the next reconcile's to retry.
    /// What the round charged and the crash repair found charged but held
    /// is left in `out` to be released (`release_all`) once the caller no
    /// longer holds the quota (`one_at_a_time`), even when the round
    /// failed after the repair.
    ///
    /// `recent` is the copy of the quota the round's inputs were read from
    /// (`Service::recent`, after the store caught up with the watch: the
    /// caller's `store_caught_up`), proven current here rather than taken
    /// and converted again.
    pub(super) async fn admit_from_queue(
        &self,
        name: &str,
        now: i64,
        out: &mut ToRelease,
        recent: Option<Arc<crate::store::Stored>>,
    ) -> Result<(), ServiceError> {
        let t0 = std::time::Instant::now();
        self.service.metrics.queue_rounds.inc();
        // As a whole read gives it, most often without one: the copy the
        // feed held, proven current by its version (`Service::proven_from`).
        let stored = self.service.proven_from(name, recent).await?;
        let mut stamp = crate::store::Stamp::of(&stored);
        let q = stored.quota;
        let snap = self
            .view
            .lock()
            .unwrap()
            .round_seen(name, q.status.workloads.keys());
        // Lowered by a review (a preemption's suspend) while the watch
        // still shows them running: planned and written as the watch shows
        // them, so the round never gives away room the next reconcile
        // charges again (`quota::reconcile::lowered_below_observed`).
        let raised = quota::reconcile::lowered_below_observed(
            &q.status.workloads,
            &snap.observed,
            &snap.released,
            &q.status.deleted,
            &snap.object_uids,
        );
        let repairs: Vec<(String, String)> = {
            // An earlier round's release still in flight is not one that
            // did not happen: released twice, its second write could land
            // after the object's DELETE and charge it again.
            let releasing = self.releasing.lock().unwrap();
            q.status
                .workloads
                .iter()
                .filter(|(_, c)| c.uid.starts_with(quota::object::QUEUE_CHARGE))
                .filter(|(wref, _)| !releasing.contains(*wref))
                .filter(|(wref, _)| {
                    // Observed running nothing: held back (a finished
                    // workload runs nothing too, and is not held).
                    !snap.finished.contains(*wref)
                        && snap
                            .observed
                            .get(*wref)
                            .is_some_and(|o| o.pod_sets.iter().all(|s| s.count == 0))
                })
                .map(|(wref, c)| {
                    let uid = c
                        .uid
                        .strip_prefix(quota::object::QUEUE_CHARGE)
                        .unwrap_or_default();
                    (wref.clone(), uid.to_string())
                })
                .collect()
        };
        // Charged by an admission whose release did not happen.
        out.repairs = repairs;
        // A preemption stopped between its entry and its suspend.
        self.repair_preemptions(name, &q).await;
        // Held objects carrying a queue mark (docs/queueing.md §12), folded
        // into the queue this round plans over and in its one write.
        let marked = self.marked_objects(name);
        if self.service.marks.is_some() {
            let v = self.view.lock().unwrap();
            self.service.forget_marked(name, now, |r| {
                v.marked_held(r)
                    .filter(|(quota, _)| *quota == name)
                    .map(|(_, marked)| marked)
            });
        }
        if q.status.queue.is_empty() && marked.is_empty() && q.status.queue_summary.is_none() {
            self.after_round(name, Some(t0));
            self.note_borrower(&q, false);
            self.service.metrics.set_queue(name, [0; 4], 0);
            return Ok(());
        }
        // Entries made by a CREATE's mutation carry no uid yet (the API
        // server assigns it after): the watch knows it.
        let unnamed: Vec<(String, String)> = {
            let v = self.view.lock().unwrap();
            q.status
                .queue
                .iter()
                .filter(|e| e.work.uid.is_empty())
                .filter_map(|e| {
                    let uid = v.workload_uid(&e.work.workload_ref)?;
                    Some((e.work.workload_ref.clone(), uid))
                })
                .collect()
        };
        if !unnamed.is_empty() {
            self.service.name_queued(name, &unnamed).await?;
        }
        let reread = |stored: crate::store::Stored, stamp: &mut crate::store::Stamp| {
            *stamp = crate::store::Stamp::of(&stored);
            stored.quota
        };
        let q = if unnamed.is_empty() {
            q
        } else {
            reread(self.service.proven(name).await?, &mut stamp)
        };
        let mut q = match self.prune_orphans(name, &q, now).await? {
            true => reread(self.service.proven(name).await?, &mut stamp),
            false => q,
        };
        out.planned_on = Some(stamp.clone());
        let folding = self.service.fold_marks(&mut q, &marked, now);
        // The write uses this fold while the quota is still this version.
        let folded_at =
            self.service
                .marks
                .is_some()
                .then_some((stamp, folding.backed, folding.pending));
        quota::reconcile::raise(&mut q, &raised, now);
        out.fold_full = folding
            .refused
            .iter()
            .any(|(_, why)| matches!(why, queue::fold::NotFolded::Full(_)));
        for (wref, why) in folding.refused {
            self.not_folded(name, &wref, &why, &marked);
        }
        // Only entries whose object the watch has seen (with its uid) are
        // admitted: the unsuspend needs the object. A preempted entry whose
        // workload still runs waits for its suspend (preempt.rs).
        // Priorities from the PriorityClasses as the watch has them now (a
        // class created or changed since an entry queued counts); a number
        // written in a template never does (`quota::queue::priority`).
        let classes = self.service.priorities.classes().await.ok();
        let (known, mut notes) = self.known_entries(&q, classes.as_deref());
        // Hard, or for a quota that may borrow, hard + what its parent
        // could lend now (`queue::borrow_limits`): each admission then asks
        // for its loan in the parent's compare-and-swap, as the webhook's
        // borrowing path does, so the plan is never more than is granted.
        let t_read = t0.elapsed();
        let (limits, family) = self.service.round_plan(&q).await?;
        out.limits = Some(limits.clone());
        // Equals by their submitters' decayed usage, where the policy asks
        // (`submitters`, docs/queueing.md §11).
        let pool = self.queue_pool(&q, &limits).await;
        // Card-hour budgets: an entry waits for one as for quota.
        let budgets = queue::budgets::of(&q);
        let price_list = self.service.price_list();
        let views: Vec<_> = budgets
            .iter()
            .map(|b| b.view(&self.service.prices, &price_list))
            .collect();
        let (decisions, after, _) =
            queue::admit::round(&known, &pool, &views, &q.spec.queueing, now);
        // A head that preemption would not admit says what else it waits
        // for (its budget, its turn): a person sees why nothing is taken.
        // Weighed on this very round, not on another walk of the queue; the
        // running work is read only where the policy preempts.
        let running = (q.spec.queueing.preemption
            == quota::object::queueing::Preemption::LowerPriority
            && !known.is_empty())
        .then(|| self.preemptible(&q, classes.as_deref()));
        if let Some(running) = &running {
            let made = Some((decisions.as_slice(), &after));
            if let queue::preempt::Weighed::Futile { head, after } =
                queue::preempt::weigh(&known, &pool, &views, &q.spec.queueing, now, running, made)
            {
                let n = queue::preempt::futile_words(&after);
                notes
                    .entry(head)
                    .and_modify(|o| *o = format!("{o}; {n}"))
                    .or_insert(n);
            }
        }
        // Idle room a sibling with a smaller share waits for is left to it
        // (fair sharing, `fair`).
        let borrows = decisions
            .iter()
            .any(|d| matches!(d, Decision::Admit(a) if !a.borrows.is_empty()));
        let field = family.filter(|_| borrows).map(|f| f.field(&q));
        let (decisions, yielded) = self.yield_to_fairer(name, &known, decisions, field);
        // What it planned is what it means to admit: room left to a
        // fairer sibling is not (the round is kept with the least it could
        // still admit: `ToRelease::reach`).
        out.planned = decisions
            .iter()
            .filter(|d| matches!(d, Decision::Admit(_)))
            .count();
        if yielded {
            let what = if out.planned == 0 {
                "nothing"
            } else {
                "admitted"
            };
            self.service
                .metrics
                .queue_rounds_yielded
                .get_or_create(&crate::metrics::CauseLabels {
                    cause: what.to_string(),
                })
                .inc();
        }
        // As the last round left them: with marks, the whole queue that
        // round wrote the top of.
        let last = self.service.rounds_copy(name);
        let before: BTreeMap<String, (u32, quota::object::queue::Waiting)> = last
            .as_deref()
            .map_or(q.status.queue.as_slice(), |c| c.entries())
            .iter()
            .map(|e| (e.work.workload_ref.clone(), (e.position, e.waiting)))
            .collect();
        let estimates = self.estimates(&q, &known, &decisions, &pool, now);
        let mut fresh = queue::status(&known, &decisions, &estimates);
        for e in fresh.iter_mut() {
            if let Some(n) = notes.get(&e.work.workload_ref) {
                e.reason = format!("{}; {n}", e.reason);
            }
        }
        // The whole round in one write of the quota (and one loan asked of
        // its parent): every admission charged and dequeued together with
        // the restated positions (`Service::admit_round`); the holds are
        // released right after (`release_all`).
        let uids: BTreeMap<&str, &str> = known
            .iter()
            .map(|e| (e.workload_ref.as_str(), e.uid.as_str()))
            .collect();
        let items: Vec<queue::batch::Admit> = decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Admit(a) => Some(queue::batch::Admit {
                    workload_ref: a.workload_ref.clone(),
                    uid: uids
                        .get(a.workload_ref.as_str())
                        .copied()
                        .unwrap_or("")
                        .to_string(),
                    charge: a.charge.clone(),
                }),
                Decision::Wait(_) => None,
            })
            .collect();
        let t_plan = t0.elapsed();
        // Before the write, which takes the fold's queue from `q`.
        self.export(name, &q, &known, &fresh, now);
        let folded = folded_at.map(
            |(stamp, backed, pending)| crate::service::queue::FoldedQueue {
                stamp,
                queue: std::mem::take(&mut q.status.queue),
                backed,
                pending,
            },
        );
        let (batch, written) = self
            .service
            .admit_round(name, &items, Some(&fresh), &marked, &raised, folded)
            .await?;
        out.written = written;
        let admitted = match batch {
            queue::batch::Batch::Done { admitted, left, .. } => {
                // Planned as fitting but not admitted for want of a loan (a
                // sibling took the parent's room first): another round
                // soon, planned against what the parent holds then.
                if left
                    .iter()
                    .any(|(_, d)| !matches!(d, quota::admission::Denial::Budget(_)))
                {
                    self.schedule_after(name, std::time::Duration::from_secs(1));
                }
                admitted
            }
            // Only before the parent answered; `admit_round` asks it.
            queue::batch::Batch::Borrow(_) => Vec::new(),
        };
        for wref in &admitted {
            if let Some(e) = known.iter().find(|e| e.workload_ref == *wref) {
                let waited = now.saturating_sub(e.submitted_ms).max(0);
                self.service
                    .metrics
                    .observe_queue_wait(name, waited as f64 / 1000.0);
            }
        }
        tracing::debug!(quota = %name, waiting = known.len(), planned = items.len(), admitted = admitted.len(), read = ?t_read, planned_at = ?t_plan, written_at = ?t0.elapsed(), "queue round");
        // Not where its queue may preempt its own running work: its
        // preemption step weighed the room it left as free, and once the
        // sibling takes it the next round's step may plan one.
        let may_preempt = running
            .as_deref()
            .is_some_and(|r| queue::preempt::may_take(&known, r));
        if admitted.len() == out.planned {
            if may_preempt {
                out.unkept_yield = yielded;
            } else {
                out.reach = queue::room::floor(&q, &pool, &known, &decisions, &admitted);
                out.left_room = yielded;
            }
        }
        out.admitted = admitted
            .into_iter()
            .map(|w| {
                let uid = uids.get(w.as_str()).copied().unwrap_or("").to_string();
                (w, uid)
            })
            .collect();
        // With marks, a place beyond the listed top is told once, when it
        // joins: every admission moves every place behind it, and a queue
        // of hundreds would send hundreds of Events a round.
        let told = |e: &quota::object::queue::QueueEntry| {
            self.service.marks.is_none()
                || (e.position as usize) <= queue::summary::TOP_ENTRIES
                || !before.contains_key(&e.work.workload_ref)
        };
        for e in fresh.iter().filter(|e| told(e)) {
            if before.get(&e.work.workload_ref) != Some(&(e.position, e.waiting)) {
                self.notify_workload(
                    &e.work.workload_ref,
                    false,
                    "Queue",
                    "Queued",
                    format!(
                        "bizrq {name}: queued at position {}: {}",
                        e.position, e.reason
                    ),
                );
            }
        }
        let waits = !fresh.is_empty();
        let policy = q.spec.queueing;
        let overdue = fresh
            .iter()
            .any(|e| policy.alerts(e.work.submitted_ms, now));
        let next_alert = fresh
            .iter()
            .filter(|e| !policy.alerts(e.work.submitted_ms, now))
            .filter_map(|e| {
                let after = policy.alert_after_seconds? as i64;
                Some(
                    e.work
                        .submitted_ms
                        .saturating_add(after.saturating_mul(1000)),
                )
            })
            .min();
        self.note_borrower(&q, waits);
        self.after_round(name, out.admitted.is_empty().then_some(t0));
        if overdue {
            // Nothing else writes when an entry crosses its threshold:
            // the alert engine evaluates the quota as it stands now.
            if let Some(s) = self.service.cached_quota(name) {
                self.service.changed.mark(name, now, Some(s));
            }
        }
        if let Some(at) = next_alert {
            self.wake_at(name, at);
        }
        Ok(())
    }

    /// The entries of `q`'s queue a round may admit — those whose object
    /// the watch has seen under the entry's uid — each at the priority of
    /// its classes as `classes` has them, and what an entry's reason adds
    /// where its classes could not all be resolved.
    pub(super) fn known_entries(
        &self,
        q: &quota::Quota,
        classes: Option<&quota::queue::priority::Classes>,
    ) -> (Vec<Queued>, BTreeMap<String, String>) {
        let mut notes = BTreeMap::new();
        let v = self.view.lock().unwrap();
        let known = queue::entries::entries(q)
            .into_iter()
            .filter(|e| v.is_workload(&e.workload_ref, &e.uid) && queue::entries::admissible(q, e))
            .map(|mut e| {
                if let Some(c) = classes {
                    let r = c.resolve(&e.priority_classes);
                    e.priority = r.value;
                    if let Some(n) = r.note() {
                        notes.insert(e.workload_ref.clone(), n);
                    }
                }
                e
            })
            .collect();
        (known, notes)
    }

    /// The held objects bound to `name` that carry a queue mark, as the
    /// watch shows them, with what each runs once released; not those
    /// whose mark a fold refused already (`bad_marks`), which are told
    /// once and then ask for no round. With marks off, every held object
    /// carrying a mark: none is folded, and those the status neither lists
    /// nor charges are counted as stranded (`Service::bound_queue`).
    pub(super) fn marked_objects(
        &self,
        name: &str,
    ) -> Vec<Arc<crate::service::queue::MarkedObject>> {
        if self.service.marks.is_none() {
            return self.held_marked(name);
        }
        let mut objects = self.held_marked(name);
        let now = self.now();
        let mut bad = self.bad_marks.lock().unwrap();
        if let Some(refused) = bad.get_mut(name) {
            // A refusal is remembered while its object is held with that
            // very mark: a new object of the name, or a new mark, is
            // judged again; so is a mark placed in the future once its
            // place is no longer.
            refused.retain(|r, (uid, mark, until)| {
                now < *until
                    && objects
                        .iter()
                        .any(|o| o.workload_ref == *r && o.uid == *uid && o.annotation == *mark)
            });
            objects.retain(|o| {
                refused
                    .get(&o.workload_ref)
                    .is_none_or(|(uid, mark, _)| *uid != o.uid || *mark != o.annotation)
            });
            if refused.is_empty() {
                bad.remove(name);
            }
        }
        objects
    }

    /// Whether `marked_objects` would name any, without copying what each
    /// runs (a reconcile asks after every write whether a round is due; a
    /// quota holds hundreds while its queue is long). Where refusals are
    /// remembered (rare), `marked_objects` itself answers, so they are
    /// dropped as before once their object or mark is gone.
    pub(super) fn has_marked_objects(&self, name: &str) -> bool {
        if self.service.marks.is_some() && self.bad_marks.lock().unwrap().contains_key(name) {
            return !self.marked_objects(name).is_empty();
        }
        self.view.lock().unwrap().has_marked(name)
    }

    fn held_marked(&self, name: &str) -> Vec<Arc<crate::service::queue::MarkedObject>> {
        self.view.lock().unwrap().marked_of(name)
    }

    /// A marked, held object left out of the queue: said on the object
    /// (an Event). A mark refused is said once: the refusal is remembered
    /// by the object's uid and mark (`bad_marks`), and the object asks
    /// for no round from then on. A queue full is said each round that
    /// leaves it out (it joins once there is room).
    fn not_folded(
        &self,
        name: &str,
        wref: &str,
        why: &queue::fold::NotFolded,
        marked: &[Arc<crate::service::queue::MarkedObject>],
    ) {
        use queue::fold::NotFolded;
        let text = match why {
            // A stale copy of what left: nothing to tell.
            NotFolded::Left => return,
            NotFolded::Mark(r) => {
                let Some(o) = marked.iter().find(|o| o.workload_ref == wref) else {
                    return;
                };
                // Time changes only a refusal of a place in the future
                // (`mark::accept`: beyond now and its skew allowance): it
                // holds until then; every other one for good.
                let until = match r {
                    // The watch has not read its creation time yet.
                    queue::mark::Refused::Since if o.created_ms == i64::MAX => 0,
                    queue::mark::Refused::Since => {
                        serde_json::from_str::<queue::mark::Mark>(&o.annotation)
                            .ok()
                            .map(|m| m.since.saturating_sub(queue::mark::SKEW_MS))
                            .filter(|t| *t > self.now())
                            .unwrap_or(i64::MAX)
                    }
                    _ => i64::MAX,
                };
                let first = self
                    .bad_marks
                    .lock()
                    .unwrap()
                    .entry(name.to_string())
                    .or_default()
                    .insert(
                        wref.to_string(),
                        (o.uid.clone(), o.annotation.clone(), until),
                    )
                    .is_none_or(|(uid, mark, _)| uid != o.uid || mark != o.annotation);
                if !first {
                    return;
                }
                format!("bizrq {name}: its queue mark is not accepted ({r:?}); it stays held: remove the annotation {} to be judged again", queue::mark::ANNOTATION)
            }
            NotFolded::Full(f) => format!(
                "bizrq {name}: {}; it stays held, marked, until the queue has room",
                quota::admission::Denial::from(f.clone())
            ),
        };
        self.notify_workload(wref, true, "Queue", "NotQueued", text);
    }

    /// Estimated starts for `status.queue` (docs/queueing.md §5): the
    /// quota's charged work runs to its declared end (its admission, or
    /// its charge's `since`, + the run time the watch read from the
    /// object); work that declares none, or has outlived it, never ends in
    /// the simulation, so what waits for it gets no estimate. Computed
    /// every round over the first `ESTIMATE_HEAD` entries: rounds run on
    /// every event that can free room and on the resync, which is the
    /// timer.
    fn estimates(
        &self,
        q: &quota::Quota,
        known: &[Queued],
        decisions: &[Decision],
        pool: &Pool,
        now: i64,
    ) -> BTreeMap<String, i64> {
        let running: Vec<queue::Running> = {
            let v = self.view.lock().unwrap();
            q.status
                .workloads
                .iter()
                .map(|(wref, c)| {
                    let start = c
                        .admitted
                        .as_deref()
                        .and_then(quota::time::parse_rfc3339)
                        .or_else(|| quota::time::parse_rfc3339(&c.since));
                    // Work past its declared end still holds its charge
                    // (a finished Job not yet deleted): when it goes
                    // cannot be told, so it counts as declaring none.
                    let ends_ms = match (start, v.workload_run_ms(wref)) {
                        (Some(s), Some(run)) => Some(s.saturating_add(run)).filter(|e| *e > now),
                        _ => None,
                    };
                    queue::Running {
                        workload_ref: wref.clone(),
                        usage: c.usage(),
                        ends_ms,
                    }
                })
                .collect()
        };
        queue::estimate::for_status(
            known,
            decisions,
            pool,
            &running,
            &q.spec.queueing,
            now,
            queue::estimate::ESTIMATE_HEAD,
        )
    }

    /// The queue's metrics after a round: the restated entries, and those
    /// the round left out (not yet seen by the watch) as they were stored.
    fn export(
        &self,
        name: &str,
        q: &quota::Quota,
        known: &[Queued],
        fresh: &[quota::object::queue::QueueEntry],
        now: i64,
    ) {
        let mut counts = [0i64; 4];
        let mut oldest = 0i64;
        let rest = q
            .status
            .queue
            .iter()
            .filter(|e| !known.iter().any(|k| k.workload_ref == e.work.workload_ref));
        for e in fresh.iter().chain(rest) {
            let i = match e.waiting {
                quota::object::queue::Waiting::Quota => 0,
                quota::object::queue::Waiting::Budget => 1,
                quota::object::queue::Waiting::Turn => 2,
                quota::object::queue::Waiting::Never => 3,
            };
            counts[i] += 1;
            oldest = oldest.max(now.saturating_sub(e.work.submitted_ms) / 1000);
        }
        self.service.metrics.set_queue(name, counts, oldest);
    }

    /// Entries whose object is not there (docs/queueing.md §7): one never
    /// seen `ORPHAN_GRACE_MS` after it queued (its create was refused after
    /// the mutating webhook queued it, or never happened), one whose object
    /// the watch saw and is gone (a delete whose release was missed), and
    /// one queued under an earlier object of the name (uid differs), which
    /// is said on the object now there. Judged only for kinds the watch
    /// has listed. Whether any was removed.
    async fn prune_orphans(
        &self,
        name: &str,
        q: &quota::Quota,
        now: i64,
    ) -> Result<bool, ServiceError> {
        let authoritative = self.authoritative();
        let mut gone: Vec<(String, String)> = Vec::new();
        let mut replaced: Vec<String> = Vec::new();
        let mut next_due: Option<i64> = None;
        {
            let v = self.view.lock().unwrap();
            for e in &q.status.queue {
                let (wref, uid) = (&e.work.workload_ref, &e.work.uid);
                if !authoritative(kind_of_ref(wref)) {
                    continue;
                }
                match v.workload_uid(wref) {
                    Some(seen) if uid.is_empty() || *uid == seen => {}
                    Some(_) => {
                        gone.push((wref.clone(), uid.clone()));
                        replaced.push(wref.clone());
                    }
                    None if !uid.is_empty() => gone.push((wref.clone(), uid.clone())),
                    None => {
                        let due = e.work.submitted_ms.saturating_add(ORPHAN_GRACE_MS);
                        if now >= due {
                            gone.push((wref.clone(), String::new()));
                        } else {
                            next_due = Some(next_due.map_or(due, |d| d.min(due)));
                        }
                    }
                }
            }
        }
        if let Some(at) = next_due {
            self.wake_at(name, at);
        }
        if gone.is_empty() {
            return Ok(false);
        }
        let pruned = self.service.prune_queue(name, &gone).await?;
        for wref in &pruned {
            if replaced.contains(wref) {
                self.notify_workload(
                    wref,
                    true,
                    "Queue",
                    "QueueEntryRemoved",
                    format!(
                        "bizrq {name}: the queue entry of an earlier object named {wref} was                          removed; this object is not queued"
                    ),
                );
            }
            tracing::info!(quota = %name, workload = %wref, "queue entry without its object removed");
        }
        Ok(!pruned.is_empty())
    }

    /// For a benchmark outside the crate (`server/benches/queue.rs`): the
    /// kinds discovery would have found, and the view changed as the
    /// watches would change it. Not used by the server.
    #[doc(hidden)]
    pub fn seed_for_bench(
        &self,
        kinds: &[(&'static quota::workload::Adapter, kube::api::ApiResource)],
        f: impl FnOnce(&mut crate::cluster::view::View),
    ) {
        self.set_installed(kinds);
        f(&mut self.view.lock().unwrap());
    }

    /// Run `name`'s queue again at `at` (the service's clock), or earlier
    /// if already asked.
    pub(super) fn wake_at(&self, name: &str, at: i64) {
        {
            let mut w = self.wake.lock().unwrap();
            let e = w.entry(name.to_string()).or_insert(at);
            *e = (*e).min(at);
        }
        // The round that asked sees the time: none put off past it.
        self.scheduler.due_at(name, at);
    }

    /// Keep `q` among the borrowers with a queue under its parent while
    /// it may borrow and `waits`.
    fn note_borrower(&self, q: &quota::Quota, waits: bool) {
        let parent = &q.spec.parent;
        if parent.is_empty() {
            return;
        }
        let mut b = self.borrowers.lock().unwrap();
        if waits && !q.spec.max.is_empty() {
            b.entry(parent.clone())
                .or_default()
                .insert(q.name().to_string());
        } else if let Some(set) = b.get_mut(parent) {
            set.remove(q.name());
            if set.is_empty() {
                b.remove(parent);
            }
        }
    }

    /// Room freed under `parent` (a child's workload deleted or lowered):
    /// the borrowers waiting in a queue under it get a round of the
    /// scheduler, since their parent may lend them that room now. The one
    /// fair sharing gives it first (`quota::queue::share::first_to_borrow`,
    /// on this process's copies) gets its round now, and the others once
    /// that round is done (`after_round`): they find what it left, and a
    /// round that finds no more room than its last idle one is not run.
    /// Before, every one of them ran at once, and each worked out the
    /// same allotment to find it was not the fairest.
    pub(super) fn touch_borrowers_under(&self, parent: &str) {
        let names: Vec<String> = self
            .borrowers
            .lock()
            .unwrap()
            .get(parent)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let first = (names.len() > 1)
            .then(|| self.first_to_borrow(parent, &names))
            .flatten();
        let Some(first) = first else {
            for n in &names {
                self.schedule(n);
            }
            return;
        };
        for n in names.iter().filter(|n| **n != first) {
            self.after_round_of(first.clone(), n);
        }
        self.schedule(&first);
    }

    /// `share::first_to_borrow` of `names` under `parent`, as this
    /// process's copies have them; None where one is not held.
    fn first_to_borrow(&self, parent: &str, names: &[String]) -> Option<String> {
        let parent = self.service.cached_quota(parent)?;
        let kids = names
            .iter()
            .map(|n| self.service.cached_quota(n))
            .collect::<Option<Vec<_>>>()?;
        let kids: Vec<&quota::Quota> = kids.iter().map(|s| &s.quota).collect();
        queue::share::first_to_borrow(&parent.quota, &kids)
    }

    /// `touch_borrowers_under` the parent of each of `quotas`, as this
    /// process's copy has it.
    pub(super) fn touch_borrowers_beside(&self, quotas: &std::collections::BTreeSet<String>) {
        for name in quotas {
            if let Some(s) = self.service.cached_quota(name) {
                if !s.quota.spec.parent.is_empty() {
                    self.touch_borrowers_under(&s.quota.spec.parent);
                }
            }
        }
    }

    /// Mark what `out` will release as being released (`releasing`), so
    /// the reconcile leaves their pods to `release_all`.
    pub(super) fn mark_releasing(&self, out: &ToRelease) {
        self.releasing.lock().unwrap().extend(
            out.repairs
                .iter()
                .chain(&out.admitted)
                .map(|(w, _)| w.clone()),
        );
    }

    /// Release what a round left in `out`: the crash repair's and the
    /// round's admissions, each in one of the places every round's
    /// releases share (`RELEASES_IN_FLIGHT`), each "Admitted" event after
    /// its release. Called without the quota held: each release is a write
    /// through the API server and both admission webhooks, which may take
    /// seconds under load, and the quota's reconcile (a finished
    /// workload's charge released, docs/queueing.md §9) must not wait for
    /// them. The charges are written already; what the reconcile sees
    /// meanwhile is what it sees right after the round's write when the
    /// watch has not caught up yet (a fresh admission kept as a
    /// reservation).
    /// Whether every release went through (a failed one is the next
    /// round's to repair).
    pub(super) async fn release_all(&self, name: &str, out: ToRelease) -> bool {
        let all: Vec<String> = out
            .repairs
            .iter()
            .chain(&out.admitted)
            .map(|(w, _)| w.clone())
            .collect();
        self.releasing.lock().unwrap().extend(all.iter().cloned());
        // Each in one of the places shared by every round's releases, for
        // `RELEASE_PLACE_HELD_AT_MOST` at most: a write the API server
        // holds up (the client has no read timeout) goes on without its
        // place rather than hold every other quota's releases behind it.
        // Never cancelled: a release dropped midway could still land,
        // after the repair's second one (`util::in_place`).
        let mut all_released = true;
        for (list, repair) in [(&out.repairs, true), (&out.admitted, false)] {
            let done = futures::future::join_all(list.iter().map(|(w, u)| {
                crate::util::in_place(
                    &self.release_places,
                    RELEASE_PLACE_HELD_AT_MOST,
                    self.release(name, w, u, repair),
                )
            }))
            .await;
            all_released &= done.into_iter().all(|released| released);
        }
        {
            let mut releasing = self.releasing.lock().unwrap();
            for w in &all {
                releasing.remove(w);
            }
        }
        for (wref, _) in &out.admitted {
            self.notify_workload(
                wref,
                false,
                "Queue",
                "Admitted",
                format!("bizrq {name}: admitted from the queue; released"),
            );
        }
        all_released
    }

    /// The object `uid` a release wrote to is gone: its charge, if the
    /// release's review wrote it back after the DELETE's, is taken back
    /// now rather than held as a reservation until `RESERVATION_TTL_MS`.
    async fn gone_after_release(&self, quota: &str, wref: &str, uid: &str) {
        match self.service.release_charge_of(quota, wref, uid).await {
            Ok(true) => {
                tracing::info!(workload = %wref, %uid, "released into a deleted object: its charge taken back")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(workload = %wref, error = %e, "the charge of a deleted object could not be taken back; the reconcile drops it")
            }
        }
    }

    /// Release a workload the queue admitted (its charge is in place): a
    /// merge patch of what holds it back (`quota::hold::release_patch`: the
    /// suspend flag to false, or the hold annotation removed), through the
    /// admission webhooks like anyone's write; then the gate off each of
    /// its pods the watch shows (`gates`; none for a suspended kind).
    /// The patch names `uid` (the object the charge was written for) as a
    /// precondition: the API server refuses it (409) when the name now
    /// holds another object, created again after the charge, which must
    /// not be released on the old one's charge (docs/queueing.md §12,
    /// constraint 5). Nothing is ungated then either.
    ///
    /// A `repair` (a charge whose release seemed not to happen) reads the
    /// object first and leaves it alone when it is no longer held: the
    /// watch lagged behind a release that did happen, and a second write
    /// is a review that could land after the object's DELETE.
    ///
    /// A release that finds the object gone (deleted, or its name holding
    /// a newer object) takes back the charge of that object
    /// (`Service::release_charge_of`): the patch's review may have charged
    /// it again after the DELETE's review released it.
    ///
    /// Whether the object was released (or left alone by a repair that
    /// found it released already).
    async fn release(&self, quota: &str, wref: &str, uid: &str, repair: bool) -> bool {
        let kind = kind_of_ref(wref).to_string();
        let Some(ar) = self.installed.lock().unwrap().get(&kind).cloned() else {
            return false;
        };
        let Some(WorkloadRef {
            namespace, name, ..
        }) = WorkloadRef::parse(wref)
        else {
            return false;
        };
        let Some(adapter) = kind
            .split_once('/')
            .and_then(|(g, k)| adapter_for_kind(g, k))
        else {
            return false;
        };
        let Some(mut patch) = quota::hold::release_patch(adapter.hold()) else {
            return false;
        };
        // Admitted again: no longer preempted, and no longer waiting by a
        // mark (docs/queueing.md §12): a later suspend by hand must not be
        // taken for a preemption, nor fold the object back into the queue
        // at its old place.
        patch["metadata"]["annotations"][queue::PREEMPTED_ANNOTATION] = serde_json::Value::Null;
        patch["metadata"]["annotations"][queue::mark::ANNOTATION] = serde_json::Value::Null;
        if !uid.is_empty() {
            patch["metadata"]["uid"] = serde_json::Value::String(uid.to_string());
        }
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &ar);
        if repair {
            match super::read_held(&api, name, adapter.hold()).await {
                Ok(Some(true)) => {}
                Ok(Some(false) | None) => return true,
                // Unread: the patch's own preconditions decide.
                Err(e) => {
                    tracing::debug!(workload = %wref, error = %e, "repair: the object could not be read first")
                }
            }
        }
        // Only a release the API server stored releases the pods of a
        // gated kind: refused (the validating webhook found no room, the
        // charge taken back since the round wrote it), failed or gone, its
        // pods would run uncharged. The object stays held and marked; the
        // next reconcile releases it again while it is charged, and the
        // fold queues it again once it is not.
        if let Err(e) = api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            match e {
                kube::Error::Api(s) if s.is_not_found() => {
                    self.gone_after_release(quota, wref, uid).await;
                }
                // 409 as a uid precondition's failure; 422 as the immutable
                // field's, should an API server word it so.
                kube::Error::Api(s)
                    if s.message.contains("UID in precondition")
                        || (s.code == 422 && s.message.contains("metadata.uid")) =>
                {
                    tracing::info!(workload = %wref, %uid, error = %s.message, "not released: the name holds another object now");
                    self.gone_after_release(quota, wref, uid).await;
                }
                e => {
                    tracing::warn!(workload = %wref, error = %e, "release failed; the next reconcile repairs it");
                }
            }
            return false;
        }
        let pods = self.view.lock().unwrap().gated_pods_of(wref);
        self.ungate(&pods).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::ToRelease;

    fn round(planned: usize, admitted: usize, repairs: usize) -> ToRelease {
        let item = |i: usize| (format!("batch/Job/ml/j{i}"), format!("u{i}"));
        ToRelease {
            planned,
            admitted: (0..admitted).map(item).collect(),
            repairs: (0..repairs).map(item).collect(),
            ..ToRelease::default()
        }
    }

    /// A round is the base of a skip (`scheduler`) only when it admitted
    /// every admission it planned and repaired nothing; idle is one such.
    /// Else it says why not: the cause its next round runs for.
    #[test]
    fn a_round_settles_only_when_it_admitted_all_it_planned_and_repaired_nothing() {
        assert_eq!(round(0, 0, 0).unsettled(), None, "nothing planned");
        assert_eq!(round(3, 3, 0).unsettled(), None, "all it planned");
        assert_eq!(
            round(3, 2, 0).unsettled(),
            Some("after-partial"),
            "one not granted its loan"
        );
        assert_eq!(
            round(0, 0, 1).unsettled(),
            Some("after-repair"),
            "a charge repaired"
        );
        assert_eq!(round(2, 2, 1).unsettled(), Some("after-repair"));
        let mut preempts = round(2, 2, 0);
        preempts.unkept_yield = true;
        assert_eq!(
            preempts.unsettled(),
            Some("after-partial"),
            "left room while its queue may preempt"
        );
        let mut full = round(2, 2, 0);
        full.fold_full = true;
        assert_eq!(
            full.unsettled(),
            Some("after-fold-full"),
            "its admissions make room to fold what waited"
        );
        let mut full = round(0, 0, 0);
        full.fold_full = true;
        assert_eq!(
            full.unsettled(),
            None,
            "nothing admitted: the queue is as full"
        );
    }
}
