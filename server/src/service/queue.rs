//! Queued admission's writes (docs/queueing.md §4). The decisions are
//! `quota::queue`'s; here are the compare-and-swaps that carry them out.
//!
//! The protocol, and why nothing is lost or charged twice:
//! - the mutating webhook queues a workload that does not fit
//!   (`queue_workload`): its entry joins `status.queue`, not charged, and
//!   the object is created suspended;
//! - the validating webhook then sees the suspended object: nothing to
//!   charge, and a charge of nothing never touches a queued entry
//!   (`admit_rounds`'s guard);
//! - the controller's scheduler admits from the queue (`admit_round`):
//!   each charge is written and its entry removed **in one write** (a
//!   whole round of the quota in that write); only then is the object
//!   unsuspended. A crash between the two leaves a charge whose uid
//!   is `queue:<object uid>` on a suspended object, which the next
//!   reconcile unsuspends;
//! - a queued workload the user unsuspends by hand and that fits is
//!   charged by the validating webhook, and that charge removes the entry
//!   in the same write (`admission::charge` here is followed by
//!   `entries::dequeue` in one closure); one that does not fit is suspended
//!   again by the mutating webhook;
//! - a deleted workload's entry leaves with its release.

use super::{Service, ServiceError};
use quota::admission::{self, Denial};
use quota::borrow::{self, Standing};
use quota::object::queue::Queued;
use quota::object::Quota;
use quota::queue::pending::RoundCopy;
use quota::queue::priority::Classes;
use quota::queue::{self, entries, Check, Pool};
use quota::ResourceList;
use std::sync::Arc;

/// The cluster's PriorityClasses, for a queued workload's priority
/// (`quota::queue::priority`). Cluster mode: the controller's watch keeps
/// a copy on the leader; any other replica reads through the API
/// (`cluster::priority`). Standalone: no class exists.
#[async_trait::async_trait]
pub trait PriorityLookup: Send + Sync {
    /// The classes now: the watch's copy when it has listed, else a read
    /// through the API (kept briefly). An error says why none could be read.
    async fn classes(&self) -> Result<Arc<Classes>, String>;
    /// The watch's copy only, None until it has listed (or once it stopped).
    fn watched(&self) -> Option<Arc<Classes>>;
    /// The controller's watch sets its copy (None: the watch stopped).
    fn set_watched(&self, classes: Option<Classes>);
}

/// No PriorityClasses (standalone mode, nothing queues): every workload
/// is at priority 0.
pub struct NoClasses;

#[async_trait::async_trait]
impl PriorityLookup for NoClasses {
    async fn classes(&self) -> Result<Arc<Classes>, String> {
        Ok(Arc::new(Classes::default()))
    }
    fn watched(&self) -> Option<Arc<Classes>> {
        None
    }
    fn set_watched(&self, _: Option<Classes>) {}
}

/// How long after a mark's place an entry the watch never shows is still
/// counted: the API server's `--request-timeout` (60 s by default), past
/// which a create reviewed then can no longer be stored.
pub const MARK_STORE_MS: i64 = 60_000;

pub use quota::queue::fold::MarkedObject;

/// What a fold of marked objects did to a quota's queue
/// (`Service::fold_marks`).
#[derive(Debug, Default)]
pub struct Folding {
    /// Whether the queue changed.
    pub changed: bool,
    /// The marked objects left out, and why.
    pub refused: Vec<(String, queue::fold::NotFolded)>,
    /// The entries an accepted mark backs (`quota::queue::fold::Folded::marked`).
    pub backed: std::collections::BTreeSet<String>,
    /// The quota's pending marks the fold read (None: it read none, having
    /// no marked object to fold).
    pub pending: Option<quota::queue::pending::Pending>,
}

/// A quota's queue as a fold of its marked objects left it on one stored
/// version of the quota (`Service::fold_marks`): the round plans on it,
/// and its write uses it as it is while the quota is still that version,
/// instead of folding the same objects again (the fold copies what
/// hundreds of held objects run: with a loan to ask for, a round folded
/// three times).
#[derive(Debug)]
pub struct FoldedQueue {
    /// The stored version the fold read.
    pub stamp: crate::store::Stamp,
    /// `status.queue` after the fold (before any admission).
    pub queue: Vec<quota::object::queue::QueueEntry>,
    /// `Folding::backed` of that fold.
    pub backed: std::collections::BTreeSet<String>,
    /// `Folding::pending` of that fold: its tombstones are the only other
    /// thing it read (`Pending::skips`), and they change without a write
    /// of the quota (a DELETE or an opt-out of an object the status does
    /// not list); used only while they are the same.
    pub pending: Option<quota::queue::pending::Pending>,
}

/// What the mutating webhook does with a queueable workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Queueing {
    /// It fits now: created as written, charged by the validating webhook.
    Admits,
    /// It waits, suspended, at this 1-based position.
    Queued { position: u32, reason: String },
    /// It fits now, and is created held all the same, its mark counted in
    /// the queue: the controller's next round admits it (a queueing
    /// quota's create with queue marks on, `mark_workload`'s
    /// `queue_fitting`), so the review writes nothing.
    Next,
    /// Waiting would not help: left to the validating webhook, which
    /// refuses it with today's message.
    Never(String),
}

/// Whether `work`, which fits `judged` now, should leave the idle room to
/// siblings that fair sharing puts first (`fair::allot`); weighed only
/// when it would borrow.
fn fair_turn(
    family: &queue::share::Family,
    judged: &Quota,
    work: &Queued,
) -> Option<queue::FairTurn> {
    let usage = work.usage().clone();
    if !queue::share::borrows(judged, &usage) {
        return None;
    }
    let field = family.field(judged);
    let head = quota::fair::Head {
        usage,
        priority: work.priority,
        since_ms: work.submitted_ms,
    };
    let got = quota::fair::allot(
        &field.me,
        std::slice::from_ref(&head),
        &field.rivals,
        &field.lendable,
        &field.room,
    );
    let rival = got.rival.filter(|_| got.granted == 0)?;
    Some(queue::share::turn(&field.me, &field, &head.usage, rival))
}

/// How a queue's plan reads the quota's parent (`Service::plan_on`).
#[derive(Clone, Copy)]
enum ParentRead {
    /// Whole, fresh from the store.
    Fresh,
    /// As stored now, proven by its version where this replica holds it
    /// (`Service::proven`).
    Proven,
    /// As this replica knows it, with no request (`Service::recent`).
    Recent,
}

impl ParentRead {
    /// A create's plan reads recent copies (as the mutating webhook
    /// judged it); any other, fresh.
    fn of(create: bool) -> ParentRead {
        if create {
            ParentRead::Recent
        } else {
            ParentRead::Fresh
        }
    }
}

impl Service {
    /// What a queue of `q` plans against: hard, or for a quota that may
    /// borrow, hard + what its parent could lend it now
    /// (`queue::borrow_limits`, as the borrowing admission would).
    pub async fn queue_limits(&self, q: &Quota) -> Result<ResourceList, ServiceError> {
        Ok(self.queue_plan(q).await?.0)
    }

    /// `queue_limits`, and for a quota that may borrow, its parent and
    /// siblings as fair sharing weighs them (`queue::share::Family`), from
    /// one read of the parent and its children.
    pub async fn queue_plan(
        &self,
        q: &Quota,
    ) -> Result<(ResourceList, Option<queue::share::Family>), ServiceError> {
        self.plan_on(q, ParentRead::Fresh).await
    }

    /// `queue_plan` for a queue round and its preemption step: the parent
    /// as stored now, proven by its version where this replica holds it
    /// (`Service::proven`) instead of read whole.
    pub async fn round_plan(
        &self,
        q: &Quota,
    ) -> Result<(ResourceList, Option<queue::share::Family>), ServiceError> {
        self.plan_on(q, ParentRead::Proven).await
    }

    /// `queue_plan`'s limits, the parent and its children as this replica
    /// knows them with no request (`Service::recent`): what tells the
    /// scheduler whether a round could plan more than its last one.
    pub async fn queue_limits_recent(&self, q: &Quota) -> Result<ResourceList, ServiceError> {
        Ok(self.plan_on(q, ParentRead::Recent).await?.0)
    }

    /// `queue_plan`, the parent read as `how` says.
    async fn plan_on(
        &self,
        q: &Quota,
        how: ParentRead,
    ) -> Result<(ResourceList, Option<queue::share::Family>), ServiceError> {
        if q.spec.max.is_empty() || q.spec.parent.is_empty() {
            return Ok((ResourceList::new(), None));
        }
        let read = match how {
            ParentRead::Recent => self.recent(&q.spec.parent).await.map(|s| s.quota.clone()),
            ParentRead::Proven => self.proven(&q.spec.parent).await.map(|s| s.quota),
            ParentRead::Fresh => self.get(&q.spec.parent).await.map(|s| s.quota),
        };
        let parent = match read {
            Ok(p) => p,
            Err(ServiceError::NotFound(_)) => return Ok((ResourceList::new(), None)),
            Err(e) => return Err(e),
        };
        let kids = self.store.children_quotas(&q.spec.parent).await?;
        let standings = Standing::of_all(kids.iter().map(|k| &**k));
        let limits = queue::borrow_limits(q, Some(&parent), &standings, self.now());
        Ok((limits, Some(queue::share::Family { parent, kids })))
    }

    /// Judge `work` against its quota's queue and, when it must wait,
    /// queue it (or refresh its entry, keeping its `since` and place) in
    /// the quota's compare-and-swap. `work.submitted_ms` is now; an entry
    /// already queued keeps its own. The workload's own charge, if any (a
    /// suspended Job holds a charge of nothing), is left out of the pool.
    ///
    /// `create`: the object is being created, so an entry under its
    /// reference is a stale one (an earlier create that never completed,
    /// a delete bizrq missed) and is dropped first.
    pub async fn queue_workload(
        &self,
        quota_name: &str,
        mut work: Queued,
        create: bool,
        dry_run: bool,
    ) -> Result<Queueing, ServiceError> {
        let (priority, note) = self.resolve_priority(&work.priority_classes).await;
        work.priority = priority;
        let worded = |reason: String| match &note {
            Some(n) => format!("{reason}; {n}"),
            None => reason,
        };
        // What the plan's limits and fair shares come from; the judgement
        // itself is the compare-and-swap's, on the version it writes. A
        // create plans on this replica's most recent copies, with no read
        // (`Service::recent`), as the mutating webhook judged it.
        let current = if create {
            self.recent(quota_name).await?.quota.clone()
        } else {
            self.get(quota_name).await?.quota
        };
        let (limits, family) = self.plan_on(&current, ParentRead::of(create)).await?;
        let now = self.now();
        // The bound that refused it, counted once whatever copies the
        // compare-and-swap judged it on.
        let refused = std::sync::Mutex::new(None::<&'static str>);
        let decide = |q: &mut Quota| {
            *refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
            let mut work = work.clone();
            let dropped = create && entries::dequeue(q, &work.workload_ref);
            if let Some(e) = q
                .status
                .queue
                .iter()
                .find(|e| e.work.workload_ref == work.workload_ref && e.work.uid == work.uid)
            {
                work.submitted_ms = e.work.submitted_ms;
            }
            let mut judged = q.clone();
            admission::release(&mut judged, &work.workload_ref);
            let pool = Pool::new(&judged, &limits);
            let waiting = entries::entries(q);
            // Card-hour budgets weigh as in the controller's rounds.
            let budgets = queue::budgets::of(q);
            let price_list = self.price_list();
            let views: Vec<_> = budgets
                .iter()
                .map(|b| b.view(&self.prices, &price_list))
                .collect();
            let check =
                queue::would_queue_at(&waiting, &work, &pool, &views, &q.spec.queueing, now);
            // Joins the queue at `position` for `reason`, said in words.
            let join = |q: &mut quota::Quota,
                        work: quota::object::queue::Queued,
                        position: u32,
                        reason: &queue::Reason|
             -> Result<(bool, Queueing), ServiceError> {
                let text = worded(reason.to_string());
                let changed = entries::join(q, work, position, reason.waiting(), text.clone())
                    .map_err(|full| {
                        *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(full.cause());
                        Denial::from(full)
                    })?;
                Ok((
                    changed || dropped,
                    Queueing::Queued {
                        position,
                        reason: text,
                    },
                ))
            };
            match check {
                // A queued entry that now fits keeps its place with what it
                // asks now; the controller's next round admits it.
                Check::AdmitsNow if entries::holds(q, &work.workload_ref) => {
                    let changed = entries::enqueue(
                        q,
                        work,
                        0,
                        quota::object::queue::Waiting::Quota,
                        String::new(),
                    )
                    .map_err(Denial::from)?;
                    Ok((changed || dropped, Queueing::Admits))
                }
                Check::AdmitsNow => {
                    match family.as_ref().and_then(|f| fair_turn(f, &judged, &work)) {
                        // It fits on a loan, but a sibling with a smaller
                        // share waits for the same idle room: it queues
                        // behind what waits, and the sibling goes first.
                        Some(turn) => {
                            let position = u32::try_from(waiting.len() + 1).unwrap_or(u32::MAX);
                            join(q, work, position, &queue::Reason::Fair(turn))
                        }
                        None => Ok((dropped, Queueing::Admits)),
                    }
                }
                Check::Never(r) => Ok((dropped, Queueing::Never(r.to_string()))),
                Check::Queues { position, reason } => join(q, work, position, &reason),
            }
        };
        // A create that fits on the recent copy, which holds nothing under
        // its name, writes nothing: its answer needs no compare-and-swap,
        // nor the fresh read that would prove a write-less decision. The
        // caller's charge is the compare-and-swap; should it lose the room,
        // the create is judged again on the copy that charge read.
        if create {
            let mut probe = current.clone();
            if let Ok((false, Queueing::Admits)) = decide(&mut probe) {
                return Ok(Queueing::Admits);
            }
        }
        let out = self.update_status(quota_name, dry_run, decide).await;
        let cause = *refused.lock().unwrap_or_else(|e| e.into_inner());
        if let (Err(ServiceError::Denied(_)), Some(cause), false) = (&out, cause, dry_run) {
            self.metrics.count_queue_refused(cause);
        }
        out
    }

    /// `queue_workload` with queue marks on (docs/queueing.md §12): a
    /// workload that must wait is checked against the whole queue
    /// (`Pending::copy_entries`: the status's top, the marked objects the
    /// last round folded) plus the entries this replica marked and none shows yet, and added
    /// to those, under one lock (`quota::queue::pending`), with no write
    /// of the quota; the caller holds the object back and writes the
    /// signed mark this returns in its annotation. An entry the status
    /// holds already is judged as `queue_workload` does (in the quota's
    /// compare-and-swap).
    ///
    /// `read`: the copy of the quota the caller has just judged the
    /// workload on (as fresh as this would read it), used instead of a
    /// second read; None reads it here.
    pub async fn mark_workload(
        &self,
        quota_name: &str,
        mut work: Queued,
        create: bool,
        dry_run: bool,
        read: Option<Arc<super::Stored>>,
        queue_fitting: bool,
    ) -> Result<(Queueing, Option<queue::mark::Mark>), ServiceError> {
        // Draining marks: queued in the status, no mark signed.
        let Some(keys) = self.signing_keys() else {
            let out = self
                .queue_workload(quota_name, work, create, dry_run)
                .await?;
            return Ok((out, None));
        };
        // A create is judged on this replica's most recent copy, with no
        // read (`Service::recent`): an old copy can only make it wait when
        // it fits (the next round admits it) or try a charge that its
        // compare-and-swap then refuses (judged again, fresh). An update
        // of a held object may be bizrq's own release of it, which only
        // the stored status tells from a release by hand.
        let stored = match read {
            Some(s) => s,
            None if create => self.recent(quota_name).await?,
            None => Arc::new(self.get(quota_name).await?),
        };
        let current = &stored.quota;
        if entries::holds(current, &work.workload_ref) {
            let out = self
                .queue_workload(quota_name, work, create, dry_run)
                .await?;
            return Ok((out, None));
        }
        let (priority, note) = self.resolve_priority(&work.priority_classes).await;
        work.priority = priority;
        let worded = |reason: String| match &note {
            Some(n) => format!("{reason}; {n}"),
            None => reason,
        };
        let (limits, family) = self.plan_on(current, ParentRead::of(create)).await?;
        let now = self.now();
        let budgets = queue::budgets::of(current);
        let price_list = self.price_list();
        let views: Vec<_> = budgets
            .iter()
            .map(|b| b.view(&self.prices, &price_list))
            .collect();
        // A create holds no charge under its name: the copy is judged as
        // it is, not copied.
        let released;
        let judged = if current.status.workloads.contains_key(&work.workload_ref) {
            let mut q = current.clone();
            admission::release(&mut q, &work.workload_ref);
            released = q;
            &released
        } else {
            current
        };
        let pool = Pool::new(judged, &limits);
        // The caps count the whole queue: the status's top, the marked
        // objects this replica's last round folded, and its pending marks
        // (one lock per quota: creates for other quotas are not held up).
        let copy = self.rounds_copy(quota_name);
        let shared = self.pending_of(quota_name);
        let mut pending = shared.lock().unwrap_or_else(|e| e.into_inner());
        // An entry of this name the copy of the last round holds is this
        // object's only if its uid says so: a CREATE (no uid yet) or an
        // object re-created under the name never takes an older object's
        // place (its mark's place would then be older than the object, and
        // the fold refuses it). The status lists no entry of the name here
        // (`holds` above), so only the copy's can be dropped.
        // A replica that runs no rounds has no copy and counts the top
        // alone; the summary's count holds `MAX_QUEUE` there
        // (`Pending::join_beyond`), though not a submitter's share, which
        // the leader's fold holds again.
        let more = copy.as_deref().map_or_else(Vec::new, |copy| {
            pending.copy_entries(current, copy.entries(), |e| {
                e.workload_ref != work.workload_ref || (!work.uid.is_empty() && e.uid == work.uid)
            })
        });
        let counted = queue::pending::Counted {
            quota: current,
            more: &more,
        };
        let whole =
            queue::summary::waiting(&current.status.queue, current.status.queue_summary.as_ref());
        pending.seen(counted);
        // A replica running no rounds (not the leader) has no watch to
        // tell a create never stored from one waiting: what it marked
        // stops counting once the API server can no longer store it. The
        // leader's fold holds the caps again in the quota's write.
        let judged_at = self
            .marks_judged_at
            .load(std::sync::atomic::Ordering::Relaxed);
        if judged_at < now.saturating_sub(MARK_STORE_MS) {
            pending.expire(now.saturating_sub(MARK_STORE_MS));
        }
        // A mark of this object not folded yet keeps its place.
        let waiting = pending.queue_refs(counted);
        if let Some(p) = waiting.iter().find(|e| {
            e.workload_ref == work.workload_ref
                && !work.uid.is_empty()
                && (e.uid.is_empty() || e.uid == work.uid)
        }) {
            work.submitted_ms = p.submitted_ms;
        }
        let check =
            queue::would_queue_at(&waiting, &work, &pool, &views, &current.spec.queueing, now);
        let waiting = waiting.len();
        let (position, reason) = match check {
            Check::Never(r) => return Ok((Queueing::Never(r.to_string()), None)),
            Check::AdmitsNow => match family.as_ref().and_then(|f| fair_turn(f, judged, &work)) {
                Some(turn) => (
                    u32::try_from(waiting + 1).unwrap_or(u32::MAX),
                    Some(queue::Reason::Fair(turn)),
                ),
                None if queue_fitting => (u32::try_from(waiting + 1).unwrap_or(u32::MAX), None),
                None => return Ok((Queueing::Admits, None)),
            },
            Check::Queues { position, reason } => (position, Some(reason)),
        };
        let joined = if dry_run {
            pending.clone().join_beyond(counted, work.clone(), whole)
        } else {
            pending.join_beyond(counted, work.clone(), whole)
        };
        if let Err(full) = joined {
            // What fits is never refused for a full queue: it is charged
            // now, as without `queue_fitting`.
            if reason.is_none() {
                return Ok((Queueing::Admits, None));
            }
            if !dry_run {
                self.metrics.count_queue_refused(full.cause());
            }
            return Err(ServiceError::Denied(Denial::from(full)));
        }
        drop(pending);
        // A dry run is counted nowhere (its join above was on a copy): a
        // mark signed for it would be a place no cap counted, which a real
        // write could carry. It is answered held, unmarked.
        let mark = (!dry_run).then(|| {
            queue::mark::sign(
                quota_name,
                &work.workload_ref,
                work.submitted_ms,
                work.priority,
                work.submitted_by.as_deref().unwrap_or(""),
                |b| keys.sign(b),
            )
        });
        let answer = match reason {
            Some(reason) => Queueing::Queued {
                position,
                reason: worded(reason.to_string()),
            },
            None => Queueing::Next,
        };
        Ok((answer, mark))
    }

    /// Fold the marked, held objects `objects` of `q` into its queue
    /// (`quota::queue::fold`: each mark checked with our keys, what left
    /// this replica's queue skipped, the caps held again), in memory: the
    /// caller plans over `q` and writes it in the round's one
    /// compare-and-swap. Whether the queue changed, and what was refused.
    pub fn fold_marks(&self, q: &mut Quota, objects: &[Arc<MarkedObject>], now: i64) -> Folding {
        let Some(keys) = self.marks.as_ref() else {
            return Folding::default();
        };
        if objects.is_empty() {
            self.mark_memo
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(q.name());
            return Folding::default();
        }
        let pending = self
            .pending_if_any(q.name())
            .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default();
        let name = q.name().to_string();
        // An object charged already (admitted, its release not yet seen by
        // the watch, or charged by hand) is never folded again: the mark
        // stays on the object after it left the queue.
        let marked: Vec<queue::fold::Marked<'_>> = objects
            .iter()
            .filter(|o| {
                !q.status.workloads.get(&o.workload_ref).is_some_and(|c| {
                    c.uid.starts_with(quota::object::QUEUE_CHARGE)
                        || c.usage().values().any(|v| v.nanos() > 0)
                })
            })
            .map(|o| queue::fold::Marked {
                annotation: &o.annotation,
                at: queue::mark::Binding {
                    quota: &name,
                    workload_ref: &o.workload_ref,
                    created_ms: o.created_ms,
                    now_ms: now,
                },
                uid: &o.uid,
                work: &o.work,
            })
            .collect();
        // Taken out while this fold uses it: a fold of the same quota at
        // the same time (a round retried beside another) starts afresh.
        let mut memo = self
            .mark_memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name)
            .unwrap_or_default();
        let folded = queue::fold::fold_remembering(q, &marked, &pending, &mut memo, |b, m| {
            keys.verify(b, m)
        });
        self.mark_memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone(), memo);
        // The fold held the caps; one refused here stays held, marked.
        let added: std::collections::HashSet<&str> =
            folded.added.iter().map(String::as_str).collect();
        let works: Vec<Queued> = folded
            .queue
            .into_iter()
            .filter(|e| added.contains(e.workload_ref.as_str()))
            .collect();
        let changed = entries::join_all(
            q,
            works,
            quota::object::queue::Waiting::Quota,
            "queued; placed by the next round",
        );
        Folding {
            changed,
            refused: folded.refused,
            backed: folded.marked,
            pending: Some(pending),
        }
    }

    /// `name`'s pending marks, read without adding a set for the quota (an
    /// empty one left in the map would ask its reconcile for a round).
    fn pending_if_any(&self, name: &str) -> Option<Arc<std::sync::Mutex<queue::pending::Pending>>> {
        self.marked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Whether `name`'s pending marks hold the tombstones `since` holds.
    fn tombstones_unchanged(&self, name: &str, since: &quota::queue::pending::Pending) -> bool {
        match self.pending_if_any(name) {
            Some(p) => p
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .same_tombstones(since),
            None => since.same_tombstones(&Default::default()),
        }
    }

    /// The queue `q`'s status keeps after a round, with marks on: the top
    /// entries and those no mark backs, and the summary of the whole
    /// (`quota::queue::summary::bound`); `backed` are the entries a mark
    /// on their held object backs (the round's fold). Without marks the
    /// status keeps every entry and no summary. The whole queue, as it was
    /// before the cut (None where nothing is cut: marks off, or draining).
    ///
    /// Draining marks (`--queue-mark-drain`): every entry is kept, folded
    /// ones too, and no summary, so one round lists the whole queue and
    /// nothing waits by its mark alone. Without marks, `marked` (the held
    /// objects carrying a mark) that the status neither lists nor charges
    /// wait by marks nothing folds: the summary counts them
    /// (`summary::unfolded`) while there are any, for people and the
    /// alert on them.
    pub fn bound_queue(
        &self,
        q: &mut Quota,
        backed: &std::collections::BTreeSet<String>,
        marked: &[Arc<MarkedObject>],
    ) -> Option<Vec<quota::object::queue::QueueEntry>> {
        if self.marks.is_none() {
            let stranded =
                queue::summary::stranded(&q.status, marked.iter().map(|o| o.workload_ref.as_str()))
                    .len();
            q.status.queue_summary = queue::summary::unfolded(&q.status.queue, stranded);
            return None;
        }
        if self.mark_drain {
            q.status.queue_summary = None;
            return None;
        }
        let whole = std::mem::take(&mut q.status.queue);
        let (kept, summary) = queue::summary::bound(&whole, backed);
        q.status.queue = kept;
        q.status.queue_summary = (summary.total > 0).then_some(summary);
        Some(whole)
    }

    /// This replica's copy of the last round's whole queue of
    /// `quota_name` (`rounds_queue`), shared.
    pub(crate) fn rounds_copy(&self, quota_name: &str) -> Option<Arc<RoundCopy>> {
        self.rounds_queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(quota_name)
            .cloned()
    }

    /// `quota_name`'s pending marks, under their own lock (`marked`).
    fn pending_of(&self, quota_name: &str) -> Arc<std::sync::Mutex<queue::pending::Pending>> {
        let mut all = self.marked.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(all.entry(quota_name.to_string()).or_default())
    }

    /// Forget what this replica marked for `quota_name` and the watch no
    /// longer needs counted: `shown(wref)` says whether the watch shows
    /// the object bound to the quota (Some) and held with a mark (true).
    /// An entry goes once its object is shown unmarked, or not shown at
    /// all and `MARK_STORE_MS` after its place (a create the API server
    /// never stored shows nothing); a tombstone once the object is not
    /// shown.
    pub fn forget_marked(&self, quota_name: &str, now: i64, shown: impl Fn(&str) -> Option<bool>) {
        self.marks_judged_at
            .store(now, std::sync::atomic::Ordering::Relaxed);
        // The map's lock only to find the quota's set: a review of another
        // quota never waits while this one's is judged.
        let Some(shared) = self
            .marked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(quota_name)
            .cloned()
        else {
            return;
        };
        let mut p = shared.lock().unwrap_or_else(|e| e.into_inner());
        for (r, since) in p.refs() {
            let go = match shown(&r) {
                Some(marked) => !marked && since.saturating_add(MARK_STORE_MS) < now,
                None => since.saturating_add(MARK_STORE_MS) < now,
            };
            if go {
                p.gone(&r);
            }
        }
        for r in p.tombstones() {
            if shown(&r).is_none() {
                p.gone(&r);
            }
        }
        // Dropped only when empty and no one else holds it, judged with
        // both locks held (this set's, then the map's; nothing takes them
        // the other way round): a join or a leave into a dropped set
        // would be counted nowhere, and with the map's lock held no one
        // can take it meanwhile.
        if p.is_empty() && p.tombstones().is_empty() {
            let mut all = self.marked.lock().unwrap_or_else(|e| e.into_inner());
            let ours = all.get(quota_name).is_some_and(|a| Arc::ptr_eq(a, &shared));
            if ours && Arc::strong_count(&shared) == 2 {
                all.remove(quota_name);
            }
        }
    }

    /// Forget this replica's copy of the last rounds' whole queues
    /// (`rounds_queue`): of the quotas `keep` says no to (deleted), or of
    /// all when it runs no rounds any more (lost the lease). A copy kept
    /// past either would count entries no round judges again: false
    /// queue-full and share refusals, wrong positions.
    pub fn forget_rounds(&self, keep: impl Fn(&str) -> bool) {
        self.rounds_queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name, _| keep(name));
        // Nor are their marks remembered (memory only: a memo is never
        // wrong while the keys stay).
        self.mark_memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name, _| keep(name));
    }

    /// A DELETE or an opt-out took `wref` (of `uid`) out of `quota_name`'s
    /// queue: with marks on, this replica's fold skips stale copies of it
    /// and its pending entry no longer counts (`Pending::leave`).
    pub fn left_marked(&self, quota_name: &str, wref: &str, uid: &str) {
        if self.marks.is_none() {
            return;
        }
        self.pending_of(quota_name)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .leave(wref, uid);
        // Nor does the copy of the last round's queue count it any more:
        // the copy without it is built outside the lock every review
        // takes, and put in only over the copy it was built from (one a
        // round put in meanwhile is filtered in turn).
        let stays = |e: &quota::object::queue::QueueEntry| {
            e.work.workload_ref != wref || !(uid.is_empty() || e.work.uid == uid)
        };
        loop {
            let Some(copy) = self.rounds_copy(quota_name) else {
                return;
            };
            if copy.entries().iter().all(stays) {
                return;
            }
            let rest = Arc::new(copy.keeping(stays));
            let mut kept = self.rounds_queue.lock().unwrap_or_else(|e| e.into_inner());
            match kept.get_mut(quota_name) {
                Some(now) if Arc::ptr_eq(now, &copy) => {
                    let old = std::mem::replace(now, rest);
                    drop(kept);
                    drop(old);
                    return;
                }
                None => return,
                Some(_) => continue,
            }
        }
    }

    /// Take `wref` out of `quota_name`'s queue, charging nothing: a queued
    /// workload, still held, that opted out of the queue (docs/queueing.md
    /// §4, "Opting out while queued"). Whether an entry was removed.
    pub async fn leave_queue(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
    ) -> Result<bool, ServiceError> {
        self.update_status(quota_name, dry_run, |q| {
            let left = entries::dequeue(q, wref);
            Ok((left, left))
        })
        .await
    }

    /// The priority of a workload whose pod templates name `classes`
    /// (`quota::queue::priority`), and what its reason should add: a class
    /// that does not exist, or classes that could not be read (judged at 0;
    /// the controller's next round resolves them again from its watch).
    pub async fn resolve_priority(&self, classes: &[String]) -> (i32, Option<String>) {
        match self.priorities.classes().await {
            Ok(c) => {
                let r = c.resolve(classes);
                (r.value, r.note())
            }
            Err(e) => (0, Some(format!("{e}; judged at priority 0 for now"))),
        }
    }

    /// Where `work` would land, without writing (`POST /api/v1/check`).
    pub async fn would_queue(
        &self,
        quota_name: &str,
        work: Queued,
    ) -> Result<Queueing, ServiceError> {
        // With marks, against the whole queue (the status lists its top).
        Ok(self
            .mark_workload(quota_name, work, true, true, None, false)
            .await?
            .0)
    }

    /// The scheduler's admission of a whole round of `quota_name`
    /// (`quota::queue::batch`): every admission charged, reserved on its
    /// budgets and removed from the queue, and the waiting entries'
    /// positions and reasons restated (`fresh`), **in one
    /// compare-and-swap** of the quota. A quota that may borrow asks its
    /// parent once for the loan of the whole round (`borrow::lend`, in the
    /// parent's compare-and-swap) before that write; a parent that cannot
    /// lend it all answers with the loan it holds, and the round admits,
    /// in order, what fits within hard + that loan. What does not fit stays
    /// queued for the next round, never admitted past the limits. With the
    /// round's writes of the quota, as one (`Written::then`), if any.
    pub async fn admit_round(
        &self,
        quota_name: &str,
        items: &[queue::batch::Admit],
        fresh: Option<&[quota::object::queue::QueueEntry]>,
        marked: &[Arc<MarkedObject>],
        raised: &[(String, quota::reconcile::Observed)],
        folded: Option<FoldedQueue>,
    ) -> Result<(queue::batch::Batch, Option<super::Written>), ServiceError> {
        let now_ms = self.now();
        let prices = self.price_list();
        let mut loan: Option<borrow::Lent> = None;
        // The parent's ask for a fence before it cuts the loan: written
        // first in the next write of the quota.
        let mut fence_first: Option<u64> = None;
        let mut parent = String::new();
        let mut rounds = super::BorrowRounds::default();
        // The whole queue the written status was cut from (marks on).
        let whole = std::sync::Mutex::new(Vec::new());
        // The fold the round planned on, then the one a write that asked
        // for a loan (and wrote nothing) made: used as it is by the next
        // attempt on the same stored version.
        let carried = std::sync::Mutex::new(folded);
        // What the round wrote of the quota, from the version it read.
        let mut wrote: Option<super::Written> = None;
        while rounds.more() {
            let (out, written) = self
                .update_status_stamped(quota_name, |stored, q| {
                    parent.clone_from(&q.spec.parent);
                    let listed = (q.status.queue.clone(), q.status.queue_summary.clone());
                    let was = q.status.loan_fence;
                    if let Some(g) = fence_first {
                        borrow::fence(q, g);
                    }
                    let fenced = q.status.loan_fence != was;
                    // The marked objects folded first, in this write: the
                    // round plans over what this fold accepts. On the
                    // version the round planned on (or an attempt before
                    // this one wrote nothing on), with the same
                    // tombstones, the fold is that one's: the same
                    // objects, status and tombstones; marks are judged at
                    // the plan's instant, so the write admits from the
                    // very queue the round planned over.
                    let carry = carried
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take()
                        .filter(|c| {
                            c.stamp == crate::store::Stamp::of(stored)
                                && c.pending
                                    .as_ref()
                                    .is_none_or(|p| self.tombstones_unchanged(quota_name, p))
                        });
                    let (backed, pending) = match carry {
                        Some(c) => {
                            q.status.queue = c.queue;
                            (c.backed, c.pending)
                        }
                        None => {
                            let f = self.fold_marks(q, marked, now_ms);
                            (f.backed, f.pending)
                        }
                    };
                    // Charges a review lowered below what the controller's
                    // cache still shows are charged as the cache shows
                    // first, as its reconcile would: the room they seem
                    // to free is not given away (`reconcile::raise`).
                    quota::reconcile::raise(q, raised, now_ms);
                    let b =
                        queue::batch::admit(q, items, loan.as_ref(), now_ms, &self.prices, &prices);
                    if let (queue::batch::Batch::Done { .. }, Some(f)) = (&b, fresh) {
                        entries::restate(q, f.to_vec());
                    }
                    // With marks, the status keeps the top and a summary;
                    // the rest waits on its marked objects, folded back by
                    // the next round at the same places.
                    let all = self.bound_queue(q, &backed, marked);
                    let restated =
                        (&q.status.queue, &q.status.queue_summary) != (&listed.0, &listed.1);
                    match &b {
                        queue::batch::Batch::Done { admitted, .. } => {
                            *whole.lock().unwrap_or_else(|e| e.into_inner()) =
                                all.unwrap_or_default();
                            Ok((!admitted.is_empty() || restated || fenced, b))
                        }
                        // Nothing admitted nor restated yet (`batch::admit`
                        // leaves the queue as it was when it asks for a
                        // loan): the whole queue is the fold's, kept for
                        // the attempt with the loan if nothing is written.
                        queue::batch::Batch::Borrow(_) => {
                            if let (false, Some(queue)) = (fenced, all) {
                                *carried.lock().unwrap_or_else(|e| e.into_inner()) =
                                    Some(FoldedQueue {
                                        stamp: crate::store::Stamp::of(stored),
                                        queue,
                                        backed,
                                        pending,
                                    });
                            }
                            Ok((fenced, b))
                        }
                    }
                })
                .await?;
            wrote = match wrote {
                Some(w) => Some(w.then(written)),
                None => written,
            };
            let req = match out {
                queue::batch::Batch::Borrow(req) => req,
                done => {
                    if self.marks.is_some() {
                        let whole =
                            std::mem::take(&mut *whole.lock().unwrap_or_else(|e| e.into_inner()));
                        // Built, and the old copy dropped, outside the lock
                        // every review of every quota takes.
                        let copy = (!whole.is_empty()).then(|| Arc::new(RoundCopy::new(whole)));
                        let old = {
                            let mut kept =
                                self.rounds_queue.lock().unwrap_or_else(|e| e.into_inner());
                            match copy {
                                Some(copy) => kept.insert(quota_name.to_string(), copy),
                                None => kept.remove(quota_name),
                            }
                        };
                        drop(old);
                    }
                    return Ok((done, wrote));
                }
            };
            let children = Standing::of_all(
                self.store
                    .children_quotas(&parent)
                    .await?
                    .iter()
                    .map(|k| &**k),
            );
            let lent = self
                .update_status(&parent, false, |p| {
                    match borrow::lend(p, &req, &children, now_ms) {
                        Ok(borrow::Lending::Granted) => {
                            Ok((true, Ok(borrow::lent_to(p, quota_name))))
                        }
                        // A cut of the loan waits for the quota's fence.
                        Ok(borrow::Lending::FenceFirst(g)) => Ok((false, Err(g))),
                        // Not all of it: the round admits what the loan it
                        // holds covers, but only as far as that loan is
                        // still backed (a sibling may have taken back its
                        // guarantee since the loan was made): asking for
                        // nothing more cuts the loan to what is backed and
                        // renews it in this write, as a granted request
                        // does. If even that is short (the parent is
                        // over-committed), nothing beyond hard.
                        Err(_) if !p.status.loans.contains_key(quota_name) => {
                            Ok((false, Ok(borrow::Lent::default())))
                        }
                        Err(_) => {
                            let mut keep = (*req).clone();
                            for want in keep.want.values_mut() {
                                *want = quota::Quantity::ZERO;
                            }
                            match borrow::lend(p, &keep, &children, now_ms) {
                                Ok(borrow::Lending::Granted) => {
                                    Ok((true, Ok(borrow::lent_to(p, quota_name))))
                                }
                                Ok(borrow::Lending::FenceFirst(g)) => Ok((false, Err(g))),
                                Err(_) => Ok((false, Ok(borrow::Lent::default()))),
                            }
                        }
                    }
                })
                .await?;
            (loan, fence_first) = match lent {
                Ok(lent) => (Some(lent), None),
                // Asked again next round, the quota fenced at `g` first.
                Err(g) => (None, Some(g)),
            };
            rounds.done(fence_first.is_some());
        }
        Err(ServiceError::Contention(quota_name.to_string()))
    }

    /// Remove the entries `(reference, uid)` whose objects are gone (the
    /// controller's judgement): exactly those, so an entry queued again
    /// meanwhile under a new uid stays. The references removed.
    pub async fn prune_queue(
        &self,
        quota_name: &str,
        entries: &[(String, String)],
    ) -> Result<Vec<String>, ServiceError> {
        self.update_status(quota_name, false, |q| {
            let mut removed = Vec::new();
            q.status.queue.retain(|e| {
                let gone = entries
                    .iter()
                    .any(|(r, u)| *r == e.work.workload_ref && *u == e.work.uid);
                if gone {
                    removed.push(e.work.workload_ref.clone());
                }
                !gone
            });
            Ok((!removed.is_empty(), removed))
        })
        .await
    }

    /// Give entries their objects' uids, `(reference, uid)`, in one write
    /// (the mutating webhook of a CREATE sees no uid yet: the API server
    /// assigns it after mutation).
    pub async fn name_queued(
        &self,
        quota_name: &str,
        names: &[(String, String)],
    ) -> Result<bool, ServiceError> {
        self.update_status(quota_name, false, |q| {
            let mut changed = false;
            for e in q.status.queue.iter_mut() {
                if !e.work.uid.is_empty() {
                    continue;
                }
                if let Some((_, uid)) = names.iter().find(|(w, _)| *w == e.work.workload_ref) {
                    e.work.uid.clone_from(uid);
                    changed = true;
                }
            }
            Ok((changed, changed))
        })
        .await
    }
}

impl Service {
    /// Queue again a workload the queue's preemption has just suspended
    /// (docs/queueing.md §6): it joins with `work.submitted_ms` (its
    /// charge's `since`, so it keeps its place among its priority), in the
    /// quota's compare-and-swap, whatever a round would say now: a
    /// preempted job is never left suspended outside the queue. Its charge
    /// of nothing (the suspend went through the validating webhook) is
    /// replaced when it is admitted again. Whether anything changed.
    pub async fn requeue_preempted(
        &self,
        quota_name: &str,
        mut work: Queued,
    ) -> Result<bool, ServiceError> {
        let (priority, note) = self.resolve_priority(&work.priority_classes).await;
        work.priority = priority;
        let current = self.get(quota_name).await?.quota;
        let limits = self.queue_limits(&current).await?;
        let now = self.now();
        self.update_status(quota_name, false, |q| {
            let mut work = work.clone();
            if work.submitted_by.is_none() {
                work.submitted_by = q
                    .status
                    .users
                    .get(&work.workload_ref)
                    .and_then(|u| quota::submitters::submitter(u));
            }
            let mut judged = q.clone();
            admission::release(&mut judged, &work.workload_ref);
            let pool = Pool::new(&judged, &limits);
            let waiting: Vec<Queued> = entries::entries(q)
                .into_iter()
                .filter(|e| e.workload_ref != work.workload_ref)
                .collect();
            let budgets = queue::budgets::of(q);
            let price_list = self.price_list();
            let views: Vec<_> = budgets
                .iter()
                .map(|b| b.view(&self.prices, &price_list))
                .collect();
            let (position, waiting, reason) = match queue::would_queue_at(
                &waiting,
                &work,
                &pool,
                &views,
                &q.spec.queueing,
                now,
            ) {
                Check::Queues { position, reason } => {
                    (position, reason.waiting(), reason.to_string())
                }
                Check::Never(r) => (0, quota::object::queue::Waiting::Never, r.to_string()),
                Check::AdmitsNow => (
                    0,
                    quota::object::queue::Waiting::Turn,
                    "preempted; admitted again at the controller's next round".to_string(),
                ),
            };
            let reason = match &note {
                Some(n) => format!("{reason}; {n}"),
                None => reason,
            };
            let changed = entries::enqueue(q, work.clone(), position, waiting, reason)
                .map_err(Denial::from)?;
            Ok((changed, changed))
        })
        .await
    }
}

/// What a queued workload needs, as the quota page and `GET
/// /api/v1/quotas/{name}/queue` show it: its usage on the keys the quota
/// limits (cash keys aside), or, if it asks none of them, its `requests.*`.
pub fn needs(q: &Quota, work: &Queued) -> ResourceList {
    let usage = work.usage();
    let limited: ResourceList = usage
        .iter()
        .filter(|(k, v)| v.nanos() > 0 && q.spec.hard.contains_key(*k))
        .filter(|(k, _)| quota::keys::cash_target(k).is_none())
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    if !limited.is_empty() {
        return limited;
    }
    usage
        .iter()
        .filter(|(k, v)| v.nanos() > 0 && k.starts_with("requests."))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A quota's queueing policy in words, for the top of its queue.
pub fn policy_words(p: &quota::object::queueing::QueuePolicy) -> String {
    let span = |s: u64| quota::budget::runway::span((s as i64).saturating_mul(1000));
    if !p.queues() {
        return "This quota refuses work that does not fit (queueing: Refuse); what was \
                queued before is still admitted from its queue."
            .into();
    }
    let mut out = match p.order {
        quota::object::queueing::Order::StrictFifo => {
            "Work that does not fit waits here, suspended, and is admitted whole when it fits: \
             highest priority first, then first come; nothing passes a workload that waits."
                .to_string()
        }
        quota::object::queueing::Order::BestEffortFifo { aging_seconds } => format!(
            "Work that does not fit waits here, suspended, and is admitted whole when it fits: \
             highest priority first, then first come; smaller work may pass a waiting workload \
             until it has waited {}.",
            span(aging_seconds)
        ),
    };
    if p.preemption == quota::object::queueing::Preemption::LowerPriority {
        out.push_str(" The first waiting workload may reclaim running work of lower priority");
        match p.preemption_grace_seconds {
            Some(0) => out.push_str(", which is suspended at once."),
            Some(s) => out.push_str(&format!(
                ", which is suspended {} after a warning.",
                span(s)
            )),
            None => out.push('.'),
        }
    }
    if let Some(s) = p.alert_after_seconds {
        out.push_str(&format!(
            " Owners are alerted when a workload waits longer than {}.",
            span(s)
        ));
    }
    out
}

/// `3 hours ago`, or `just now`.
pub fn ago(now_ms: i64, then_ms: i64) -> String {
    let d = now_ms.saturating_sub(then_ms);
    if d < 60_000 {
        return "just now".into();
    }
    format!("{} ago", quota::budget::runway::span(d))
}

/// `1,000 (urgent)`: the value and the classes its templates name.
pub fn priority_words(work: &Queued) -> String {
    let v = quota::readable::grouped(quota::Quantity::from_units(work.priority as i64));
    if work.priority_classes.is_empty() {
        v
    } else {
        format!("{v} ({})", work.priority_classes.join(", "))
    }
}

/// An entry's estimated start in words (docs/queueing.md §5), for the
/// quota page and `GET /api/v1/quotas/{name}/queue`: `starts by about
/// 2026-11-27 14:00 UTC`, or why there is none. `queue` is the quota's
/// whole `status.queue`, in order.
pub fn estimate_words(queue: &[quota::object::queue::QueueEntry], i: usize) -> String {
    let Some(e) = queue.get(i) else {
        return String::new();
    };
    if let Some(t) = e
        .estimated_start
        .as_deref()
        .and_then(quota::time::parse_rfc3339)
    {
        return format!("starts by about {}", quota::time::format_when(t));
    }
    if e.position == 0 {
        return "no estimate yet: it joined after the last round".into();
    }
    match e.waiting {
        quota::object::queue::Waiting::Never => {
            return "no estimate: it cannot be admitted as things stand".into()
        }
        quota::object::queue::Waiting::Budget => {
            return "no estimate: budgets refill by top-ups and periods, which cannot be foreseen"
                .into()
        }
        _ => {}
    }
    if let Some(b) = queue[..i]
        .iter()
        .find(|b| b.waiting == quota::object::queue::Waiting::Budget)
    {
        return format!(
            "no estimate: behind {}, which waits for a budget",
            b.work.workload_ref
        );
    }
    if e.position as usize > queue::estimate::ESTIMATE_HEAD {
        return format!(
            "no estimate: only the first {} in line are estimated",
            queue::estimate::ESTIMATE_HEAD
        );
    }
    "no estimate: running work declares no deadline, or has outlived it".into()
}

#[cfg(test)]
mod tests {
    use crate::metrics::Metrics;
    use crate::service::queue_mark::MarkKeys;
    use crate::service::{Persist, Service};
    use crate::store::sql::SqlStore;
    use crate::store::testdb::on_both_databases;
    use quota::object::queue::Queued;
    use quota::object::queueing::QueuePolicy;
    use quota::object::QuotaSpec;
    use quota::workload::PodSet;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;

    const CPU: &str = "requests.cpu";
    const T0: i64 = 1_795_255_200_000;

    fn sets(cpus: i64) -> Vec<PodSet> {
        vec![PodSet {
            name: "main".into(),
            count: 1,
            per_pod: [(CPU.to_string(), quota::Quantity::from_units(cpus))].into(),
            qos: None,
        }]
    }

    /// A standalone service on `store` and `clock` with the quota `ml` of
    /// 4 cpu, queueing.
    async fn with_ml(store: &SqlStore, clock: crate::service::Clock) -> Service {
        let svc = Service::new(
            Arc::new(store.clone()),
            Default::default(),
            Default::default(),
            Arc::new(Metrics::default()),
        )
        .with_clock(clock);
        let spec = QuotaSpec {
            parent: String::new(),
            hard: [(CPU.to_string(), quota::Quantity::from_units(4))].into(),
            max: Default::default(),
            budgets: Default::default(),
            queueing: QueuePolicy::queue(),
            fair_sharing: Default::default(),
            idle: None,
        };
        svc.create_quota("ml", spec, Persist::Here, "", false)
            .await
            .unwrap();
        svc
    }

    on_both_databases!(a_hand_unsuspend_that_fits_counts_its_wait);
    on_both_databases!(a_rounds_write_uses_its_planned_fold_only_on_that_version);
    on_both_databases!(a_rounds_write_folds_again_once_a_marked_object_left);
    on_both_databases!(a_borrowing_rounds_attempt_with_the_loan_uses_the_fold_that_asked);

    /// Three held objects of `ml` marked in order, 1 cpu each.
    fn three_marked(keys: &MarkKeys) -> Vec<Arc<super::MarkedObject>> {
        ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let wref = format!("batch/Job/ml/{n}");
                let m = quota::queue::mark::sign("ml", &wref, T0 - 900 + i as i64, 0, "", |b| {
                    keys.sign(b)
                });
                Arc::new(super::MarkedObject {
                    workload_ref: wref.clone(),
                    annotation: serde_json::to_string(&m).unwrap(),
                    uid: format!("uid-{n}"),
                    created_ms: T0 - 1000,
                    work: Queued {
                        workload_ref: wref,
                        uid: format!("uid-{n}"),
                        priority: 0,
                        priority_classes: Vec::new(),
                        submitted_ms: T0 - 1000,
                        pod_sets: sets(1).into(),
                        run_ms: None,
                        submitted_by: None,
                        preempted: false,
                    },
                })
            })
            .collect()
    }

    /// `ml` (`with_ml`) with queue marks on, and three held objects of it
    /// marked (`three_marked`).
    async fn marked_ml(store: &SqlStore) -> (Service, Vec<Arc<super::MarkedObject>>) {
        let keys = Arc::new(MarkKeys::parse(&"ab".repeat(32)).unwrap());
        let svc = with_ml(store, Arc::new(|| T0))
            .await
            .with_queue_marks(Some(keys.clone()));
        (svc, three_marked(&keys))
    }

    /// `ml` charged 1 cpu by a review, for another workload.
    async fn charge_other(svc: &Service) {
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/other",
            sets(1),
            "review-other",
        ))
        .await
        .unwrap();
    }

    /// A round's plan on `ml` as it is stored now: the fold of `marked`
    /// (its references `expect`), then the last entry left out, which no
    /// fold does: seen only where a write uses this plan's fold.
    async fn planned(
        svc: &Service,
        marked: &[Arc<super::MarkedObject>],
        expect: &[&str],
    ) -> super::FoldedQueue {
        let stored = svc.get("ml").await.unwrap();
        let stamp = crate::store::Stamp::of(&stored);
        let mut q = stored.quota;
        let folding = svc.fold_marks(&mut q, marked, T0);
        let names: Vec<&str> = q
            .status
            .queue
            .iter()
            .map(|e| e.work.workload_ref.as_str())
            .collect();
        assert_eq!(names, expect);
        q.status.queue.pop();
        super::FoldedQueue {
            stamp,
            queue: q.status.queue,
            backed: folding.backed,
            pending: folding.pending,
        }
    }

    /// The round's write of `planned`, admitting its head; the entries
    /// waiting after it, as the status lists them (all of them: fewer
    /// than the top it lists), and how many its summary counts.
    async fn admit_head(
        svc: &Service,
        marked: &[Arc<super::MarkedObject>],
        planned: super::FoldedQueue,
    ) -> (Vec<String>, u32) {
        let head = planned.queue[0].work.clone();
        let items = vec![quota::queue::batch::Admit {
            workload_ref: head.workload_ref.clone(),
            uid: head.uid.clone(),
            charge: head.charge(T0),
        }];
        let stamp = planned.stamp.clone();
        let (_, written) = svc
            .admit_round("ml", &items, None, marked, &[], Some(planned))
            .await
            .unwrap();
        let written = written.expect("an admission is written");
        let q = svc.get("ml").await.unwrap();
        assert_eq!(
            written.now,
            crate::store::Stamp::of(&q),
            "the round's write is the version stored"
        );
        assert_eq!(written.now.uid, stamp.uid);
        let q = q.quota;
        assert!(q.status.workloads.contains_key(&head.workload_ref), "{q:?}");
        let listed = q
            .status
            .queue
            .iter()
            .map(|e| e.work.workload_ref.clone())
            .collect();
        (listed, q.status.queue_summary.map_or(0, |s| s.total))
    }

    /// A round's write folds the marked objects again only where the quota
    /// is no longer the version the round planned on: on that version it
    /// uses the planned fold as it is (here one that, unlike a fold, left
    /// the last entry out); once anything else wrote the quota, it folds.
    async fn a_rounds_write_uses_its_planned_fold_only_on_that_version(store: &SqlStore) {
        let (svc, marked) = marked_ml(store).await;
        let (a, b, c) = ("batch/Job/ml/a", "batch/Job/ml/b", "batch/Job/ml/c");
        // On the version it planned on: `b` waits, not `c` (a fold: both).
        let plan = planned(&svc, &marked, &[a, b, c]).await;
        assert_eq!(
            admit_head(&svc, &marked, plan).await,
            (vec![b.into()], 1),
            "the planned fold"
        );
        // Planned, then another write of the quota before the round's:
        // folded again, `c` waits (the plan's fold: none).
        let plan = planned(&svc, &marked, &[b, c]).await;
        charge_other(&svc).await;
        assert_eq!(
            admit_head(&svc, &marked, plan).await,
            (vec![c.into()], 1),
            "folded again"
        );
    }

    /// A marked object that left the queue between a round's plan and its
    /// write (a DELETE or an opt-out of an object the status does not
    /// list: a tombstone, no write of the quota) is not admitted from the
    /// plan's fold: the write folds again and skips it.
    async fn a_rounds_write_folds_again_once_a_marked_object_left(store: &SqlStore) {
        let (svc, marked) = marked_ml(store).await;
        let (a, b, c) = ("batch/Job/ml/a", "batch/Job/ml/b", "batch/Job/ml/c");
        let version = svc.get("ml").await.unwrap().version;
        // The plan's fold: `a`, `b` (the last, `c`, left out by `planned`).
        let plan = planned(&svc, &marked, &[a, b, c]).await;
        svc.left_marked("ml", b, "uid-b");
        assert_eq!(svc.get("ml").await.unwrap().version, version, "no write");
        // Folded again: `b` skipped, `c` waits (the plan's: `b`).
        assert_eq!(admit_head(&svc, &marked, plan).await, (vec![c.into()], 1));
    }

    /// A round of a quota that borrows: its write's first attempt asks the
    /// parent for the loan and writes nothing, and the attempt with the
    /// loan admits from that attempt's fold (the plan's, here one no fold
    /// makes), not from a fold of its own.
    async fn a_borrowing_rounds_attempt_with_the_loan_uses_the_fold_that_asked(store: &SqlStore) {
        let keys = Arc::new(MarkKeys::parse(&"ab".repeat(32)).unwrap());
        let svc = Service::new(
            Arc::new(store.clone()),
            Default::default(),
            Default::default(),
            Arc::new(Metrics::default()),
        )
        .with_clock(Arc::new(|| T0))
        .with_queue_marks(Some(keys.clone()));
        let cpus = |n| [(CPU.to_string(), quota::Quantity::from_units(n))].into();
        let spec = |parent: &str, hard, max: Option<i64>| QuotaSpec {
            parent: parent.into(),
            hard: cpus(hard),
            max: max.map(cpus).unwrap_or_default(),
            budgets: Default::default(),
            queueing: QueuePolicy::queue(),
            fair_sharing: Default::default(),
            idle: None,
        };
        svc.create_quota("org", spec("", 4, None), Persist::Here, "", false)
            .await
            .unwrap();
        svc.create_quota("ml", spec("org", 1, Some(4)), Persist::Here, "", false)
            .await
            .unwrap();
        // `ml` full: what it admits next needs a loan.
        charge_other(&svc).await;
        let marked = three_marked(&keys);
        let (a, b, c) = ("batch/Job/ml/a", "batch/Job/ml/b", "batch/Job/ml/c");
        let plan = planned(&svc, &marked, &[a, b, c]).await;
        // `b` waits, not `c`: the fold the asking attempt used (a fold
        // of its own: both).
        assert_eq!(admit_head(&svc, &marked, plan).await, (vec![b.into()], 1));
        let org = svc.get("org").await.unwrap().quota;
        assert!(
            org.status.loans.contains_key("ml"),
            "admitted on a loan: {org:?}"
        );
    }

    on_both_databases!(standalone_resync_expires_entries_never_seen);
    on_both_databases!(taking_back_a_deleted_objects_charge_takes_only_that_one);
    on_both_databases!(bizrqs_own_suspend_keeps_the_charge_for_the_reconcile);

    /// A suspend by bizrq's own write (a preemption's, a reclaim's; its
    /// review's charge names the object) of running work keeps the charge
    /// as it ran, no longer an admission: the room is not given to
    /// anyone else until the controller's reconcile sees the suspend and
    /// lowers it. A tenant's suspend lowers it at once, as before.
    async fn bizrqs_own_suspend_keeps_the_charge_for_the_reconcile(store: &SqlStore) {
        let svc = with_ml(store, Arc::new(|| T0)).await;
        let suspended = || {
            let mut s = sets(2);
            s[0].count = 0;
            s
        };
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/v",
            sets(2),
            "review-1",
        ))
        .await
        .unwrap();
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/t",
            sets(1),
            "review-2",
        ))
        .await
        .unwrap();
        let own = format!("{}obj-v", quota::object::OWN_CHARGE);
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/v",
            suspended(),
            &own,
        ))
        .await
        .unwrap();
        let q = svc.get("ml").await.unwrap().quota;
        let v = &q.status.workloads["batch/Job/ml/v"];
        assert_eq!(v.pod_sets[0].count, 1, "kept as it ran: {v:?}");
        assert_eq!(v.admitted, None, "no longer an admission");
        assert_eq!(v.uid, own);
        assert_eq!(q.status.used[CPU].nanos(), 3_000_000_000);
        // A tenant's suspend of its own Job lowers it at once.
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/t",
            suspended(),
            "review-3",
        ))
        .await
        .unwrap();
        let q = svc.get("ml").await.unwrap().quota;
        assert_eq!(q.status.used[CPU].nanos(), 2_000_000_000);
    }

    /// `release_charge_of`, what the controller calls when its release
    /// found the object gone: it gives back the charge that names that
    /// object (queued or bizrq's own), never a charge of another object
    /// under the name (a newer one's, or a tenant review's), and never a
    /// queue entry when no charge is there (a newer object waiting).
    async fn taking_back_a_deleted_objects_charge_takes_only_that_one(store: &SqlStore) {
        let svc = with_ml(store, Arc::new(|| T0)).await;
        let used = |q: quota::Quota| {
            q.status
                .used
                .get(CPU)
                .map_or(0, |v| v.nanos() / 1_000_000_000)
        };
        let own = format!("{}obj-1", quota::object::OWN_CHARGE);
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/a",
            sets(1),
            &own,
        ))
        .await
        .unwrap();
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/b",
            sets(1),
            "review-uid",
        ))
        .await
        .unwrap();
        let queued = format!("{}obj-3", quota::object::QUEUE_CHARGE);
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/c",
            sets(1),
            &queued,
        ))
        .await
        .unwrap();
        assert_eq!(used(svc.get("ml").await.unwrap().quota), 3);
        // Another object's uid, a tenant review's charge: both stay.
        assert!(!svc
            .release_charge_of("ml", "batch/Job/ml/a", "obj-2")
            .await
            .unwrap());
        assert!(!svc
            .release_charge_of("ml", "batch/Job/ml/b", "obj-2")
            .await
            .unwrap());
        assert_eq!(used(svc.get("ml").await.unwrap().quota), 3);
        // The object's own, bizrq's and the queue's: given back.
        assert!(svc
            .release_charge_of("ml", "batch/Job/ml/a", "obj-1")
            .await
            .unwrap());
        assert!(svc
            .release_charge_of("ml", "batch/Job/ml/c", "obj-3")
            .await
            .unwrap());
        assert_eq!(used(svc.get("ml").await.unwrap().quota), 1);
        // No charge, a newer object of the name queued: its entry stays.
        let work = Queued {
            workload_ref: "batch/Job/ml/w".into(),
            uid: "obj-5".into(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: T0,
            pod_sets: sets(4).into(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
        };
        let answer = svc.queue_workload("ml", work, true, false).await.unwrap();
        assert!(
            matches!(answer, super::Queueing::Queued { .. }),
            "{answer:?}"
        );
        assert!(!svc
            .release_charge_of("ml", "batch/Job/ml/w", "obj-4")
            .await
            .unwrap());
        let q = svc.get("ml").await.unwrap().quota;
        assert_eq!(q.status.queue.len(), 1, "{:?}", q.status.queue);
    }

    /// Standalone mode never queues, but entries an older version queued
    /// there from a CREATE's review (no uid: never seen, and nothing
    /// there ever names one) leave at the resync once
    /// `UNSEEN_GRACE_MS` old; a named entry stays. In cluster mode the
    /// resync leaves them to the controller's watch.
    async fn standalone_resync_expires_entries_never_seen(store: &SqlStore) {
        let clock = Arc::new(AtomicI64::new(T0));
        let c = clock.clone();
        let svc = with_ml(store, Arc::new(move || c.load(Ordering::SeqCst))).await;
        assert!(!svc.queueing, "standalone unless told");
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/run",
            sets(4),
            "u-run",
        ))
        .await
        .unwrap();
        for (name, uid) in [("ghost", ""), ("named", "u-named")] {
            let work = Queued {
                workload_ref: format!("batch/Job/ml/{name}"),
                uid: uid.into(),
                priority: 0,
                priority_classes: Vec::new(),
                submitted_ms: T0,
                pod_sets: sets(2).into(),
                run_ms: None,
                submitted_by: None,
                preempted: false,
            };
            svc.queue_workload("ml", work, true, false).await.unwrap();
        }
        let refs = |q: &quota::Quota| -> Vec<String> {
            q.status
                .queue
                .iter()
                .map(|e| e.work.workload_ref.clone())
                .collect()
        };
        clock.store(
            T0 + quota::queue::entries::UNSEEN_GRACE_MS - 1,
            Ordering::SeqCst,
        );
        svc.resync().await.unwrap();
        assert_eq!(refs(&svc.get("ml").await.unwrap().quota).len(), 2);
        clock.store(
            T0 + quota::queue::entries::UNSEEN_GRACE_MS,
            Ordering::SeqCst,
        );
        svc.resync().await.unwrap();
        assert_eq!(
            refs(&svc.get("ml").await.unwrap().quota),
            ["batch/Job/ml/named"]
        );
    }

    /// A queued Job unsuspended by hand once it fits is charged by the
    /// validating webhook's path, which removes its entry in the same
    /// write: its wait counts in the histogram as the controller's
    /// admissions do (docs/queueing.md §7).
    async fn a_hand_unsuspend_that_fits_counts_its_wait(store: &SqlStore) {
        let clock = Arc::new(AtomicI64::new(T0));
        let c = clock.clone();
        let svc = with_ml(store, Arc::new(move || c.load(Ordering::SeqCst))).await;
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/run",
            sets(4),
            "u-run",
        ))
        .await
        .unwrap();
        let work = Queued {
            workload_ref: "batch/Job/ml/b".into(),
            uid: "u-b".into(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: T0,
            pod_sets: sets(2).into(),
            run_ms: None,
            submitted_by: quota::submitters::submitter("alice"),
            preempted: false,
        };
        let answer = svc.queue_workload("ml", work, true, false).await.unwrap();
        assert!(
            matches!(answer, super::Queueing::Queued { position: 1, .. }),
            "{answer:?}"
        );
        let q = svc.get("ml").await.unwrap().quota;
        assert_eq!(
            q.status.queue[0].work.submitted_by.as_deref(),
            Some("alice")
        );
        svc.release_workload("ml", "batch/Job/ml/run", false)
            .await
            .unwrap();
        clock.store(T0 + 90_000, Ordering::SeqCst);
        // The hand unsuspend: the validating webhook charges it.
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/b",
            sets(2),
            "u-b",
        ))
        .await
        .unwrap();
        let q = svc.get("ml").await.unwrap().quota;
        assert!(q.status.queue.is_empty(), "left the queue with its charge");
        let text = svc.metrics.render();
        assert!(
            text.contains("bizrq_admission_queue_wait_seconds_count{quota=\"ml\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("bizrq_admission_queue_wait_seconds_sum{quota=\"ml\"} 90"),
            "{text}"
        );
        // A charge of a workload that was not queued counts nothing.
        svc.charge(crate::service::ChargeRequest::new(
            "ml",
            "batch/Job/ml/c",
            sets(1),
            "u-c",
        ))
        .await
        .unwrap();
        assert!(svc
            .metrics
            .render()
            .contains("bizrq_admission_queue_wait_seconds_count{quota=\"ml\"} 1"));
    }
}
