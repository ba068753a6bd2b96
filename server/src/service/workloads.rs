//! Workloads charged, released and scaled through the service: one
//! admission is a compare-and-swap on its quota (grouped with the
//! admissions that arrive with it, `group`), with a loan from the parent
//! when it borrows; a release gives the loan it rode on back in the same
//! write.

use super::error::ServiceError;
use super::Service;
use crate::store::{Stored, WorkloadAt};
use quota::admission::{self, Denial};
use quota::borrow;
use quota::budget::reservations::{self, RunDecl};
use quota::object::{Charge, HpaCharge, Quota};
use quota::resources::ResourceList;
use quota::workload::PodSet;
use quota::Quantity;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Borrowing admissions: rounds of (lend in the parent, charge the child).
pub(super) const BORROW_ROUNDS: usize = 3;

/// Rounds a borrowing admission may spend, beyond `BORROW_ROUNDS`, on a
/// parent's ask to fence a grant before it cuts the loan
/// (`borrow::Lending::FenceFirst`): such a round decides nothing, and a
/// cut takes one (ask, fence and ask again, charge), so with three rounds
/// in all a grant made meanwhile (another admission of the same child)
/// left none for the charge.
pub(super) const FENCE_ROUNDS: usize = 3;

/// The rounds of one borrowing admission (a direct one or a queue round).
#[derive(Default)]
pub(crate) struct BorrowRounds {
    asked: usize,
    fenced: usize,
}

impl BorrowRounds {
    /// Whether another round may run.
    pub(crate) fn more(&self) -> bool {
        self.asked < BORROW_ROUNDS
    }

    /// A round ended; `fence` when the parent asked for a fence first,
    /// which counts against `FENCE_ROUNDS` while any are left.
    pub(crate) fn done(&mut self, fence: bool) {
        if fence && self.fenced < FENCE_ROUNDS {
            self.fenced += 1;
        } else {
            self.asked += 1;
        }
    }
}

/// How many times a loan's return meets a grant made after its fence
/// before it is left to the parent's repair.
pub(super) const RETURN_ROUNDS: usize = 3;

/// What an admission makes of a workload's current charge (None: nothing
/// to change), given it and the admission's time; called again for each
/// decision (a retried batch, a borrowing round).
pub(super) type Build = Arc<dyn Fn(Option<&Charge>, &str) -> Option<Charge> + Send + Sync>;

/// What an admission found and did.
#[derive(Clone, Debug, Default)]
pub(super) struct Admitted {
    /// The workload held a charge in the quota.
    held: bool,
    /// The new charge is below the old one on some key.
    lowered: bool,
    /// The lowered charge ended borrowing: its parent and what the loan
    /// gives back at once (`Service::return_loan`).
    giveback: Option<(String, borrow::Giveback)>,
    /// It left the quota's queue with this charge (a queued workload
    /// unsuspended by hand that fits): when it had joined, for the
    /// queue's wait-time histogram.
    queued_since: Option<i64>,
}

/// One round of an admission on its quota: done, or short, with the loan
/// the parent (named) could grant.
pub(super) enum Round {
    Done(Admitted),
    Short(Denial, Option<(String, borrow::LoanRequest)>),
}

pub(super) fn missing_quota(e: ServiceError, quota_name: &str) -> ServiceError {
    match e {
        ServiceError::NotFound(_) => ServiceError::NotFound(format!(
            "bizrq {quota_name} does not exist (named by the label {})",
            quota::keys::QUOTA_LABEL
        )),
        e => e,
    }
}

/// Whether `new` charges less than `old` of some key (a scale-down, a
/// smaller template, an HPA lifted).
pub(super) fn lowers(new: &Charge, old: &Charge) -> bool {
    !quota::reconcile::covers(&new.usage(), &old.usage())
}

/// The charge a DELETE found: the `uid` of the admission that last changed
/// it (None: there was none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub uid: Option<String>,
}

/// Deferred releases running at once; beyond, the reconcile drops the
/// charges (a store down for long makes many, each holding a task).
pub const MAX_DEFERRED: usize = 1024;

/// Takes a deferred release off the pending set when its task ends.
pub(super) struct Pending(
    Arc<std::sync::Mutex<BTreeSet<(String, String)>>>,
    (String, String),
);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

/// Retries of a release a DELETE could not write at once: 8 waits from
/// 0.5 s doubling to 30 s, about a minute and a half in all.
pub(super) const RELEASE_RETRIES: u32 = 8;

pub(super) const RELEASE_FIRST_WAIT: Duration = Duration::from_millis(500);

pub(super) const RELEASE_MAX_WAIT: Duration = Duration::from_secs(30);

pub(super) const RELEASE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// One workload's charge as an admission asks for it
/// (`Service::charge`): `quota` and `workload` (its reference,
/// `group/Kind/namespace/name`), what it runs (`pod_sets`), the uid of
/// the review or object it comes from, and, set when known, the run time
/// it declares, who submitted it and whether it is only a dry run.
pub struct ChargeRequest<'a> {
    pub quota: &'a str,
    pub workload: &'a str,
    pub pod_sets: Vec<PodSet>,
    /// The run time the workload declares (`Workload::run_time`); none
    /// declared by default.
    pub run: RunDecl,
    pub uid: &'a str,
    /// The AdmissionReview's `userInfo.username`.
    pub user: Option<&'a str>,
    pub dry_run: bool,
}

impl<'a> ChargeRequest<'a> {
    pub fn new(quota: &'a str, workload: &'a str, pod_sets: Vec<PodSet>, uid: &'a str) -> Self {
        ChargeRequest {
            quota,
            workload,
            pod_sets,
            run: RunDecl::Object(Ok(None)),
            uid,
            user: None,
            dry_run: false,
        }
    }

    pub fn run_time(self, run: RunDecl) -> Self {
        ChargeRequest { run, ..self }
    }

    pub fn submitted_by(self, user: Option<&'a str>) -> Self {
        ChargeRequest { user, ..self }
    }

    pub fn dry_run(self, dry_run: bool) -> Self {
        ChargeRequest { dry_run, ..self }
    }
}

/// Siblings read again after a refused loan (`Service::reread_holders`).
pub(super) const MAX_SIBLING_READS: usize = 16;

impl Service {
    /// The standings of `parent`'s children for a loan (`borrow::lend`):
    /// as the store lists them (in cluster mode the watch's copy), each
    /// replaced by this replica's own copy where that is newer (what it
    /// wrote itself, before the watch echoes it).
    pub(super) async fn siblings(
        &self,
        parent: &str,
    ) -> Result<BTreeMap<String, borrow::Standing>, ServiceError> {
        Ok(self
            .store
            .children(parent)
            .await?
            .iter()
            .map(|s| {
                let own = self
                    .cached(s.quota.name())
                    .filter(|c| c.version > s.version);
                let q = own.as_deref().map_or(&s.quota, |c| &c.quota);
                (q.name().to_string(), borrow::Standing::of(q))
            })
            .collect())
    }

    /// After a refusal judged on `standings`: the siblings whose copy
    /// shows use of a key `wanted` names (only those can have given room
    /// back since), read again from the store, the [`MAX_SIBLING_READS`]
    /// using most first. Bounded, so a tenant whose creates keep being
    /// refused costs a few GETs each, whatever the size of the family. A
    /// sibling gone since holds nothing.
    pub(super) async fn reread_holders(
        &self,
        standings: &mut BTreeMap<String, borrow::Standing>,
        asker: &str,
        wanted: &ResourceList,
    ) -> Result<(), ServiceError> {
        use futures::{StreamExt, TryStreamExt};
        let mut holders: Vec<(Quantity, String)> = standings
            .iter()
            .filter(|(name, _)| name.as_str() != asker)
            .map(|(name, st)| {
                let held = wanted
                    .keys()
                    .map(|k| quota::resources::get(&st.used, k))
                    .fold(Quantity::ZERO, Quantity::saturating_add);
                (held, name.clone())
            })
            .filter(|(held, _)| held.nanos() > 0)
            .collect();
        holders.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        holders.truncate(MAX_SIBLING_READS);
        let read: Vec<(String, Option<Stored>)> = futures::stream::iter(holders)
            .map(|(_, name)| async move {
                let s = self.store.get(&name).await?;
                Ok::<_, ServiceError>((name, s))
            })
            .buffered(8)
            .try_collect()
            .await?;
        for (name, stored) in read {
            match stored {
                Some(s) => standings.insert(name, borrow::Standing::of(&s.quota)),
                None => standings.remove(&name),
            };
        }
        Ok(())
    }

    /// Charge a workload as `req` asks (`ChargeRequest`): its quota's
    /// budgets reserve on the run time it declares in the same write
    /// (docs/budgets.md §2, `budget::reservations`), and who asked is recorded in
    /// `status.users` there too, so the ledger's entries of the workload
    /// carry it (docs/budgets.md §6) as the canonical submitter key
    /// (`quota::submitters::submitter`: scrubbed, at most `MAX_SUBMITTER` bytes).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = req.quota, workload = req.workload, dry_run = req.dry_run))]
    pub async fn charge(&self, req: ChargeRequest<'_>) -> Result<(), ServiceError> {
        let ChargeRequest {
            quota: quota_name,
            workload: wref,
            pod_sets,
            run,
            uid,
            user,
            dry_run,
        } = req;
        let uid = uid.to_string();
        // The canonical submitter key (`submitters::submitter`): the name the
        // queue entries carry, so the ledger bills usage to it.
        let user = user.and_then(quota::submitters::submitter);
        let admitted = self
            .admit(
                quota_name,
                wref,
                dry_run,
                run,
                user,
                Arc::new(move |old, now| {
                    Some(Charge {
                        pod_sets: pod_sets.clone(),
                        hpa: old.and_then(|c| c.hpa.clone()),
                        since: now.to_string(),
                        uid: uid.clone(),
                        admitted: Some(now.to_string()),
                    })
                }),
            )
            .await
            .map_err(|e| missing_quota(e, quota_name))?;
        if admitted.lowered && !dry_run {
            self.recheck.mark(quota_name);
        }
        if let (Some((parent, give)), false) = (admitted.giveback, dry_run) {
            self.give_back(&parent, quota_name, give).await;
        }
        Ok(())
    }

    /// Charge `wref` in `quota_name` what `build` makes of its current
    /// charge (None: nothing to change). Within hard it is one
    /// compare-and-swap on the quota, shared with the admissions to the
    /// same quota that arrive meanwhile (its group commit, `group`; a dry
    /// run is decided alone and writes nothing). Beyond hard, a quota with
    /// `max` borrows (§5): the loan is granted in its parent's status first
    /// (a compare-and-swap there, one at a time, so two children never take
    /// the same idle unit), then the charge is made within hard + loan, in
    /// the child's group commit again. Bounded rounds: a race that spends
    /// the room between the two answers with a denial.
    pub(super) async fn admit(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        run: RunDecl,
        user: Option<String>,
        build: Build,
    ) -> Result<Admitted, ServiceError> {
        let started = std::time::Instant::now();
        let mut path = if dry_run { "dry_run" } else { "group" };
        let result = self
            .admit_rounds(quota_name, wref, dry_run, run, user, build, &mut path)
            .await;
        // A bounded set of paths (never a quota's name): how the answer
        // was reached, so a slow path shows apart from the others.
        let path = match &result {
            _ if dry_run => path,
            Err(ServiceError::Denied(_) | ServiceError::NotFound(_)) => "denied",
            Err(_) => "error",
            Ok(_) => path,
        };
        self.metrics
            .observe_commit(path, started.elapsed().as_secs_f64());
        result
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn admit_rounds(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        run: RunDecl,
        user: Option<String>,
        build: Build,
        path: &mut &'static str,
    ) -> Result<Admitted, ServiceError> {
        let qos = self.prices;
        let prices = self.price_list();
        let now_ms = self.now();
        let now = quota::time::format_rfc3339(now_ms);
        // The parent's answer to the last loan request (None: none asked).
        let mut loan: Option<borrow::Lent> = None;
        // The parent's ask for a fence before it cuts the loan
        // (`borrow::Lending::FenceFirst`): written in the next round's
        // compare-and-swap of the child, before its charge is tried.
        let mut fence_first: Option<u64> = None;
        // The loan's generation before this write: a charge lowered here
        // (a scale-down) that ends borrowing gives the loan back at once.
        let seen = self.loan_seen(quota_name);
        let mut last_denial = None;
        let mut rounds = BorrowRounds::default();
        while rounds.more() {
            let decide = {
                let (build, wref, now, loan, run, prices, user) = (
                    build.clone(),
                    wref.to_string(),
                    now.clone(),
                    loan.clone(),
                    run.clone(),
                    prices.clone(),
                    user.clone(),
                );
                move |q: &mut Quota| -> Result<(bool, Round), ServiceError> {
                    // Every grant up to the parent's ask is retired before
                    // anything else is decided here: a charge in flight on
                    // it is refused, so the parent may cut it.
                    let was = q.status.loan_fence;
                    if let Some(g) = fence_first {
                        borrow::fence(q, g);
                    }
                    let fenced = q.status.loan_fence != was;
                    let old = q.status.workloads.get(&wref);
                    let held = old.is_some();
                    // Admitted from the queue: the controller recorded its
                    // submitter, and its unsuspend (bizrq's own write) is
                    // not who asked.
                    let from_queue =
                        old.is_some_and(|o| o.uid.starts_with(quota::object::QUEUE_CHARGE));
                    let Some(c) = build(old, &now) else {
                        let nothing = Admitted {
                            held,
                            ..Default::default()
                        };
                        return Ok((fenced, Round::Done(nothing)));
                    };
                    // A review of bizrq's own write (a queue's release)
                    // of an object whose DELETE was already reviewed and
                    // released here (`status.deleted` names that object):
                    // the write lands before the DELETE is stored, and the
                    // object goes with it. Charged, the room stayed held
                    // until the reservation's TTL; nothing is charged.
                    if old.is_none()
                        && c.object_uid().is_some_and(|u| {
                            q.status.deleted.get(&wref).is_some_and(|d| d.uid == u)
                        })
                    {
                        let nothing = Admitted {
                            held,
                            ..Default::default()
                        };
                        return Ok((fenced, Round::Done(nothing)));
                    }
                    // bizrq's own suspend (a preemption's, a reclaim's) of
                    // running work frees nothing yet: its pods run until
                    // the workload controller sees the suspend. The charge
                    // stays as it ran, no longer an admission, so the
                    // controller's reconcile lowers it as soon as its watch
                    // shows the suspend (`quota::reconcile`); lowered here,
                    // the room went to another admission while that
                    // reconcile still saw it running and charged it back,
                    // the quota then borrowing beyond its loan.
                    let runs_now = old.is_some_and(|o| o.usage().values().any(|v| v.nanos() > 0));
                    if runs_now
                        && c.uid.starts_with(quota::object::OWN_CHARGE)
                        && c.usage().values().all(|v| v.nanos() == 0)
                    {
                        let mut changed = fenced;
                        if let Some(o) = q.status.workloads.get_mut(&wref) {
                            if o.admitted.is_some() || o.uid != c.uid {
                                o.admitted = None;
                                o.uid = c.uid;
                                changed = true;
                            }
                        }
                        let kept = Admitted {
                            held,
                            ..Default::default()
                        };
                        return Ok((changed, Round::Done(kept)));
                    }
                    // A queued workload, suspended, has nothing to charge:
                    // it stays queued and uncharged (docs/queueing.md §4).
                    // One queued by preemption still holds its running
                    // charge until this, its suspend, releases it (the
                    // entry stays: preempt.rs in the controller).
                    let queued = quota::queue::entries::holds(q, &wref);
                    let nothing = c.usage().values().all(|v| v.nanos() == 0);
                    if queued && nothing && !quota::queue::entries::runs(q, &wref) {
                        let nothing = Admitted {
                            held,
                            ..Default::default()
                        };
                        return Ok((fenced, Round::Done(nothing)));
                    }
                    let mut lowered = old.is_some_and(|o| lowers(&c, o));
                    // Budgets first: a refusal changes nothing, and the
                    // reservations are written with the charge below.
                    let reserved = match reservations::decide(
                        q, &wref, old, &c, &run, now_ms, &qos, &prices,
                    ) {
                        Ok(r) => r,
                        Err(r) => {
                            let d = Denial::Budget(Box::new(r));
                            return Ok((fenced, Round::Short(d, None)));
                        }
                    };
                    // A reservation that shrank (an update declaring a
                    // shorter run) leaves room the queue may take.
                    lowered |= q.status.reservations.iter().any(|(k, m)| {
                        m.get(&wref).is_some_and(|h| {
                            reserved
                                .get(k)
                                .is_none_or(|r| r.outstanding() < h.outstanding())
                        })
                    });
                    let before = lowered.then(|| q.status.used.clone());
                    match borrow::charge_or_request(q, &wref, c, loan.as_ref()) {
                        // Charged: it leaves the queue in the same write.
                        Ok(changed) => {
                            let giveback = before
                                .and_then(|b| borrow::fence_release(q, &b, seen))
                                .map(|g| (q.spec.parent.clone(), g));
                            let held_changed = reservations::apply(&mut q.status, &wref, reserved);
                            let queued_since = q
                                .status
                                .queue
                                .iter()
                                .find(|e| e.work.workload_ref == wref)
                                .map(|e| e.work.submitted_ms);
                            let left =
                                queued && !nothing && quota::queue::entries::dequeue(q, &wref);
                            // Who asked, for the ledger (docs/budgets.md §6).
                            let by = match &user {
                                // A suspend asks for nothing: who asked for
                                // the work is still its submitter.
                                Some(u)
                                    if !(nothing
                                        || from_queue && q.status.users.contains_key(&wref))
                                        && q.status.users.get(&wref) != Some(u) =>
                                {
                                    q.status.users.insert(wref.clone(), u.clone());
                                    true
                                }
                                _ => false,
                            };
                            let changed = changed || held_changed || left || by || fenced;
                            let queued_since = queued_since.filter(|_| left);
                            Ok((
                                changed,
                                Round::Done(Admitted {
                                    held,
                                    lowered,
                                    giveback,
                                    queued_since,
                                }),
                            ))
                        }
                        // A refusal changes nothing but the fence; as one
                        // it is proven by the write of its batch, or read
                        // again fresh.
                        Err((d, req)) => Ok((
                            fenced,
                            Round::Short(d, req.map(|r| (q.spec.parent.clone(), *r))),
                        )),
                    }
                }
            };
            let round = if dry_run {
                self.update_status(quota_name, true, decide).await?
            } else {
                self.commit(quota_name, decide).await?
            };
            let (denial, request) = match round {
                Round::Done(admitted) => {
                    if let (Some(since), false) = (admitted.queued_since, dry_run) {
                        // Admitted from the queue by a hand unsuspend: a
                        // wait like the controller's admissions.
                        let waited = now_ms.saturating_sub(since).max(0);
                        self.metrics
                            .observe_queue_wait(quota_name, waited as f64 / 1000.0);
                    }
                    return Ok(admitted);
                }
                Round::Short(d, request) => (d, request),
            };
            let Some((parent, req)) = request else {
                return Err(denial.into());
            };
            if !dry_run {
                *path = "borrowing";
            }
            let child = quota_name.to_string();
            type Standings = std::collections::BTreeMap<String, borrow::Standing>;
            let lend = |p: &mut Quota,
                        children: &Standings|
             -> Result<(bool, Result<borrow::Lent, u64>), ServiceError> {
                match borrow::lend(p, &req, children, now_ms)? {
                    borrow::Lending::Granted => Ok((true, Ok(borrow::lent_to(p, &child)))),
                    // A dry run writes no fence: it answers as the cut
                    // would once fenced (nothing of it is written).
                    borrow::Lending::FenceFirst(g) if dry_run => {
                        let fenced = borrow::LoanRequest {
                            fence: g,
                            ..req.clone()
                        };
                        borrow::lend(p, &fenced, children, now_ms)?;
                        Ok((true, Ok(borrow::lent_to(p, &child))))
                    }
                    borrow::Lending::FenceFirst(g) => Ok((false, Err(g))),
                }
            };
            let mut standings = self.siblings(&parent).await?;
            let lent = match self
                .update_status(&parent, dry_run, |p| lend(p, &standings))
                .await
            {
                // Refused on the siblings' usage as the watch showed it:
                // one that released since (by another replica's write)
                // may have left the room. Judged once more with those
                // that use what is asked read again from the store.
                Err(ServiceError::Denied(_)) => {
                    self.reread_holders(&mut standings, quota_name, &req.want)
                        .await?;
                    self.update_status(&parent, dry_run, |p| lend(p, &standings))
                        .await?
                }
                r => r?,
            };
            (loan, fence_first) = match lent {
                Ok(lent) => (Some(lent), None),
                // Asked again next round, the child fenced at `g` first.
                Err(g) => (None, Some(g)),
            };
            rounds.done(fence_first.is_some());
            last_denial = Some(denial);
        }
        // Out of rounds while the parent still asks for a fence: the loan
        // is being cut under other admissions of this child, which is
        // contention (asked again), not this admission's denial.
        if fence_first.is_some() {
            return Err(ServiceError::Contention(quota_name.to_string()));
        }
        Err(last_denial
            .map(ServiceError::Denied)
            .unwrap_or_else(|| ServiceError::Contention(quota_name.to_string())))
    }

    /// Check that usage would fit without charging it (CronJob).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = quota_name))]
    pub async fn check_usage(
        &self,
        quota_name: &str,
        usage: &ResourceList,
    ) -> Result<(), ServiceError> {
        self.update_status(quota_name, true, |q| {
            admission::check(q, usage)?;
            Ok((false, ()))
        })
        .await
        .map_err(|e| missing_quota(e, quota_name))
    }

    /// Give back what a workload holds. Always allowed; a quota that is gone
    /// holds nothing. The controller confirms it against the cluster. The
    /// loan the release ends goes back to the parent right after (an
    /// UPDATE that moves the workload to another quota).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = quota_name, workload = wref, dry_run = dry_run))]
    pub async fn release_workload(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
    ) -> Result<(), ServiceError> {
        self.release_where(quota_name, wref, dry_run, |_| true)
            .await
            .map(|_| ())
    }

    /// Give back `wref`'s charge in `quota_name` only if it is the charge
    /// of the object `object_uid` that bizrq's own writes left: admitted
    /// from the queue or written by a review of bizrq's own write
    /// (`Charge::object_uid`). The controller calls it when its write
    /// to that object found it deleted: the write's review may have
    /// charged it after the DELETE's release, and the object the charge
    /// stands for is gone. A charge of a newer object of the same name
    /// (its CREATE's review) is never this one, and stays. Whether it
    /// was given back.
    pub async fn release_charge_of(
        &self,
        quota_name: &str,
        wref: &str,
        object_uid: &str,
    ) -> Result<bool, ServiceError> {
        if object_uid.is_empty() {
            return Ok(false);
        }
        let object_uid = object_uid.to_string();
        // Only that charge: a queue entry of the name is a newer object's.
        self.release_where(quota_name, wref, false, move |c| {
            c.is_some_and(|c| c.object_uid() == Some(object_uid.as_str()))
        })
        .await
    }

    /// Give back what `wref` holds in `quota_name` (its charge, and its
    /// queue entry) when `release` accepts its charge (None: it holds
    /// none); otherwise nothing changes. Whether anything was given back.
    pub(super) async fn release_where(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        release: impl Fn(Option<&Charge>) -> bool + Send + Sync + 'static,
    ) -> Result<bool, ServiceError> {
        let seen = self.loan_seen(quota_name);
        let decide = {
            let wref = wref.to_string();
            move |q: &mut Quota| {
                if !release(q.status.workloads.get(&wref)) {
                    return Ok((false, (false, None)));
                }
                let before = q.status.used.clone();
                let dequeued = quota::queue::entries::dequeue(q, &wref);
                let released = admission::release(q, &wref) || dequeued;
                let give =
                    borrow::fence_release(q, &before, seen).map(|g| (q.spec.parent.clone(), g));
                Ok((released, (released, give)))
            }
        };
        // In its quota's group commit, like the charges it gives way to.
        let result = if dry_run {
            self.update_status(quota_name, true, decide).await
        } else {
            self.commit(quota_name, decide).await
        };
        match result {
            Ok((released, give)) => {
                if released && !dry_run {
                    self.recheck.mark(quota_name);
                    if let Some((parent, give)) = give {
                        self.give_back(&parent, quota_name, give).await;
                    }
                }
                Ok(released)
            }
            Err(ServiceError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The generation of the loan `child`'s parent holds for it, as this
    /// process last saw the parent (0 when it saw none), for a child that
    /// may borrow; read before a release's write (`borrow::fence_release`).
    /// A stale copy is safe: the return then finds a later grant, fences
    /// it and tries again.
    pub fn loan_seen(&self, child: &str) -> Option<u64> {
        let c = self.cached(child)?;
        let spec = &c.quota.spec;
        if spec.max.is_empty() || spec.parent.is_empty() {
            return None;
        }
        let seen = self
            .cached(&spec.parent)
            .and_then(|p| p.quota.status.loans.get(child).map(|l| l.generation));
        Some(seen.unwrap_or(0))
    }

    /// Give back to `parent`, in its compare-and-swap, what `child`'s loan
    /// holds beyond what the child borrowed at its release's fence
    /// (`borrow::return_loan`). A grant after the fence is fenced in turn
    /// (a write of the child) and the return tried again, at most
    /// `RETURN_ROUNDS` times; past them, or without a parent, nothing goes
    /// back now (the parent's repair shrinks the loan after
    /// `LOAN_TTL_MS`). Whether the parent changed.
    pub async fn return_loan(
        &self,
        parent: &str,
        child: &str,
        mut give: borrow::Giveback,
    ) -> Result<bool, ServiceError> {
        if parent.is_empty() {
            return Ok(false);
        }
        for round in 1..=RETURN_ROUNDS {
            let result = self
                .update_status(parent, false, |p| {
                    Ok(match borrow::return_loan(p, child, &give) {
                        borrow::Returned::Back(changed) => (changed, Ok(changed)),
                        borrow::Returned::NoLoan => (false, Ok(false)),
                        borrow::Returned::Granted(g) => (false, Err(g)),
                    })
                })
                .await;
            let granted = match result {
                Ok(Ok(changed)) => return Ok(changed),
                Ok(Err(g)) => g,
                Err(ServiceError::NotFound(_)) => return Ok(false),
                Err(e) => return Err(e),
            };
            if round == RETURN_ROUNDS {
                // No return is tried after this fence: it would only refuse
                // the charge riding the grant, for nothing.
                break;
            }
            give = match self
                .update_status(child, false, |q| {
                    let was = q.status.loan_fence;
                    let give = borrow::fence(q, granted);
                    Ok((q.status.loan_fence != was, give))
                })
                .await
            {
                Ok(g) => g,
                Err(ServiceError::NotFound(_)) => return Ok(false),
                Err(e) => return Err(e),
            };
        }
        Ok(false)
    }

    /// `return_loan`, its failure logged: the loan is then the parent's
    /// repair's to shrink.
    pub(super) async fn give_back(&self, parent: &str, child: &str, give: borrow::Giveback) {
        match self.return_loan(parent, child, give).await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(quota = child, error = %e, "loan not returned; the parent's repair shrinks it later")
            }
        }
    }

    /// A DELETE's release of `wref` from `quota_name`, as
    /// `release_workload`, noting in `seen` the `uid` of the charge it found
    /// (the admission that last changed it) at its first read, so that
    /// when the write fails or is cut short a deferred release takes that
    /// charge and not the one of an object created again under the name.
    /// The release remembers the deleted object (`object_uid`, the old
    /// object's) in `status.deleted`, so the controller does not charge it
    /// again while its watch still shows it (`reconcile::note_deleted`).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = quota_name, workload = wref, dry_run = dry_run))]
    pub async fn release_for_delete(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        seen: &mut Option<Seen>,
        object_uid: &str,
    ) -> Result<(), ServiceError> {
        // What the loan gives back after this release, and to which
        // parent: right after its write.
        let loan_seen = self.loan_seen(quota_name);
        let mut loan_back = None;
        let now = self.now();
        // Only a controller's watch can show a deleted object (cluster
        // mode): standalone, nothing would ever forget the entry.
        let remember = !self.accrue_from_ledger;
        let result = self
            .update_status(quota_name, dry_run, |q| {
                if seen.is_none() {
                    *seen = Some(Seen {
                        uid: q.status.workloads.get(wref).map(|c| c.uid.clone()),
                    });
                }
                let before = q.status.used.clone();
                let dequeued = quota::queue::entries::dequeue(q, wref);
                let charged = admission::release(q, wref);
                if charged && remember {
                    quota::reconcile::note_deleted(&mut q.status, wref, object_uid, now);
                }
                let released = charged || dequeued;
                loan_back = borrow::fence_release(q, &before, loan_seen)
                    .map(|g| (q.spec.parent.clone(), g));
                Ok((released, released))
            })
            .await;
        match result {
            Ok(released) => {
                if released && !dry_run {
                    self.recheck.mark(quota_name);
                    if let Some((parent, give)) = loan_back {
                        self.give_back(&parent, quota_name, give).await;
                    }
                }
                Ok(())
            }
            Err(ServiceError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A DELETE is never refused: release `wref` from `quota` (None: from
    /// the quota it is bound to, which could not be read) in the background,
    /// with bounded retries and backoff. With `seen` (the charge as the
    /// DELETE found it) only that charge is released: another one belongs
    /// to an object created again under the same name, or to a change
    /// after the DELETE. Without it, only a charge admitted before
    /// `deleted_at` is (a comparison of clocks that may be two replicas'),
    /// and the quota is re-checked. One task per (quota, workload), at most
    /// `MAX_DEFERRED` at once; what is over the cap or still fails after
    /// the retries is left to the controller, whose reconcile drops charges
    /// of objects that are gone (cluster mode). The release remembers the
    /// deleted object `object_uid` as `release_for_delete` does.
    pub fn defer_release(
        self: &Arc<Self>,
        quota: Option<String>,
        wref: &str,
        seen: Option<Seen>,
        object_uid: &str,
        deleted_at: i64,
        error: &ServiceError,
    ) {
        let key = (quota.clone().unwrap_or_default(), wref.to_string());
        {
            let mut pending = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            if pending.contains(&key) {
                return;
            }
            if pending.len() >= MAX_DEFERRED {
                self.metrics.deferred_releases_over_cap.inc();
                tracing::warn!(workload = wref, error = %error,
                    "release not written and {MAX_DEFERRED} deferred releases already pending; the controller's reconcile drops the charge of an object that is gone");
                return;
            }
            pending.insert(key.clone());
        }
        self.metrics.deferred_releases.inc();
        tracing::warn!(workload = wref, quota = quota.as_deref().unwrap_or("(binding unknown)"), error = %error,
            "release deferred: the DELETE is allowed and the release retried in the background");
        let (svc, wref, object_uid) = (self.clone(), wref.to_string(), object_uid.to_string());
        tokio::spawn(async move {
            let _pending = Pending(svc.deferred.clone(), key);
            let mut wait = RELEASE_FIRST_WAIT;
            for attempt in 1..=RELEASE_RETRIES {
                let jitter = rand::random::<u64>() % (wait.as_millis() as u64 / 2 + 1);
                tokio::time::sleep(wait + Duration::from_millis(jitter)).await;
                let attempt_once = svc.release_deferred(
                    quota.as_deref(),
                    &wref,
                    seen.as_ref(),
                    &object_uid,
                    deleted_at,
                );
                // A hanging store must not hold the task (and its place
                // under the cap) for ever.
                match tokio::time::timeout(RELEASE_ATTEMPT_TIMEOUT, attempt_once)
                    .await
                    .unwrap_or_else(|_| Err(ServiceError::Internal("timed out".into())))
                {
                    Ok(()) => {
                        tracing::info!(workload = %wref, attempt, "deferred release written");
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(workload = %wref, attempt, error = %e, "deferred release failed again")
                    }
                }
                wait = (wait * 2).min(RELEASE_MAX_WAIT);
            }
            svc.metrics.deferred_releases_abandoned.inc();
            tracing::error!(workload = %wref, "deferred release still failing after {RELEASE_RETRIES} attempts; the controller's reconcile drops the charge of an object that is gone");
        });
    }

    pub(super) async fn release_deferred(
        &self,
        quota: Option<&str>,
        wref: &str,
        seen: Option<&Seen>,
        object_uid: &str,
        deleted_at: i64,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let remember = !self.accrue_from_ledger;
        let holders: Vec<String> = match quota {
            Some(q) => vec![q.to_string()],
            None => self.holder_of(wref, None).await?.into_iter().collect(),
        };
        for name in holders {
            let result = self
                .update_status(&name, false, |q| {
                    let Some(c) = q.status.workloads.get(wref) else {
                        return Ok((false, false));
                    };
                    let other = match seen {
                        Some(s) => s.uid.as_deref() != Some(c.uid.as_str()),
                        None => c
                            .admitted
                            .as_deref()
                            .and_then(quota::time::parse_rfc3339)
                            .is_some_and(|t| t > deleted_at),
                    };
                    let released = !other && admission::release(q, wref);
                    if released && remember {
                        quota::reconcile::note_deleted(&mut q.status, wref, object_uid, now);
                    }
                    Ok((released, released))
                })
                .await;
            match result {
                // Whatever was decided here, the cluster has the last word.
                Ok(released) => {
                    if released || seen.is_none() {
                        self.recheck.mark(&name);
                    }
                }
                Err(ServiceError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The quota that charges `wref`, if any, found through its binding;
    /// `at`, where the API server keeps the workload, bounds a lookup the
    /// cache misses to reading it (`QuotaStore::workload_quota_at`).
    pub async fn holder_of(
        &self,
        wref: &str,
        at: Option<&WorkloadAt<'_>>,
    ) -> Result<Option<String>, ServiceError> {
        Ok(match at {
            Some(at) => self.store.workload_quota_at(wref, at).await?,
            None => self.store.workload_quota(wref).await?,
        })
    }

    /// Change the charge a workload already holds (found through its
    /// binding; `at`, where the API server keeps it, bounds a lookup the
    /// cache misses to reading it, `QuotaStore::workload_quota_at`) and
    /// charge the difference. `change` returns false when it does not
    /// apply. Returns false when the workload holds no charge (not
    /// governed). The changed charge takes `uid` (the review's); `None`
    /// keeps the charge's own (a DELETE's review, whose uid is never
    /// checked, since a DELETE is never refused).
    pub(super) async fn change_held(
        &self,
        wref: &str,
        at: Option<&WorkloadAt<'_>>,
        uid: Option<&str>,
        dry_run: bool,
        change: impl Fn(&mut Charge) -> bool + Send + Sync + 'static,
    ) -> Result<bool, ServiceError> {
        let Some(quota_name) = self.holder_of(wref, at).await? else {
            return Ok(false);
        };
        let uid = uid.map(str::to_string);
        let admitted = self
            .admit(
                &quota_name,
                wref,
                dry_run,
                RunDecl::AsReserved,
                None,
                Arc::new(move |old, now| {
                    let mut c = old?.clone();
                    if !change(&mut c) {
                        return None;
                    }
                    if let Some(uid) = &uid {
                        c.uid = uid.clone();
                    }
                    c.admitted = Some(now.to_string());
                    Some(c)
                }),
            )
            .await?;
        if admitted.lowered && !dry_run {
            self.recheck.mark(&quota_name);
        }
        if let (Some((parent, give)), false) = (admitted.giveback, dry_run) {
            self.give_back(&parent, &quota_name, give).await;
        }
        Ok(admitted.held)
    }

    /// A scale subresource change of the workload stored `at`: the held
    /// charge at the new replica count (for workloads of a single pod
    /// set). Returns false when not governed.
    #[tracing::instrument(level = "debug", skip_all, fields(workload = wref, replicas = replicas, dry_run = dry_run))]
    pub async fn scale_workload(
        &self,
        wref: &str,
        at: &WorkloadAt<'_>,
        replicas: i64,
        uid: &str,
        dry_run: bool,
    ) -> Result<bool, ServiceError> {
        self.change_held(wref, Some(at), Some(uid), dry_run, move |c| {
            if c.pod_sets.len() != 1 {
                return false;
            }
            c.pod_sets[0].count = replicas;
            true
        })
        .await
    }

    /// An HPA targeting a held workload (stored `at`, when the HPA names
    /// where) reserves `maxReplicas` (or stops reserving, with `None`).
    /// Returns false when the target is not governed. `uid`: the review's,
    /// as `change_held` takes it.
    #[tracing::instrument(level = "debug", skip_all, fields(workload = wref, hpa = hpa_name, dry_run = dry_run))]
    pub async fn set_hpa(
        &self,
        wref: &str,
        at: Option<&WorkloadAt<'_>>,
        hpa: Option<HpaCharge>,
        hpa_name: &str,
        uid: Option<&str>,
        dry_run: bool,
    ) -> Result<bool, ServiceError> {
        let hpa_name = hpa_name.to_string();
        self.change_held(wref, at, uid, dry_run, move |c| match &hpa {
            Some(h) => {
                c.hpa = Some(h.clone());
                true
            }
            // Only the HPA that made the reservation lifts it.
            None if c.hpa.as_ref().is_some_and(|h| h.name == hpa_name) => {
                c.hpa = None;
                true
            }
            None => false,
        })
        .await
    }
}
