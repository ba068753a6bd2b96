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
//! - the controller admits from the queue (`admit_queued`): the charge is
//!   written and the entry removed **in one write**; only then is the
//!   object unsuspended. A crash between the two leaves a charge whose uid
//!   is `queue:<object uid>` on a suspended object, which the next
//!   reconcile unsuspends;
//! - a queued workload the user unsuspends by hand and that fits is
//!   charged by the validating webhook, and that charge removes the entry
//!   in the same write (`admission::charge` here is followed by
//!   `ledger::dequeue` in one closure); one that does not fit is suspended
//!   again by the mutating webhook;
//! - a deleted workload's entry leaves with its release.

use super::{Service, ServiceError};
use quota::admission::{self, Denial};
use quota::borrow::Standing;
use quota::budget::hold;
use quota::object::Quota;
use quota::queue::{self, ledger, Check, Pool, Queued};
use quota::ResourceList;

/// What the mutating webhook does with a queueable workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Queueing {
    /// It fits now: created as written, charged by the validating webhook.
    Admits,
    /// It waits, suspended, at this 1-based position.
    Queued { position: u32, reason: String },
    /// Waiting would not help: left to the validating webhook, which
    /// refuses it with today's message.
    Never(String),
}

impl Service {
    /// What a queue of `q` plans against: hard, or for a quota that may
    /// borrow, hard + what its parent could lend it now
    /// (`queue::borrow_limits`, as the borrowing admission would).
    pub async fn queue_limits(&self, q: &Quota) -> Result<ResourceList, ServiceError> {
        if q.spec.max.is_empty() || q.spec.parent.is_empty() {
            return Ok(ResourceList::new());
        }
        let parent = match self.get(&q.spec.parent).await {
            Ok(p) => p.quota,
            Err(ServiceError::NotFound(_)) => return Ok(ResourceList::new()),
            Err(e) => return Err(e),
        };
        let kids = self.store.children(&q.spec.parent).await?;
        let standings = Standing::of_all(kids.iter().map(|s| &s.quota));
        Ok(queue::borrow_limits(
            q,
            Some(&parent),
            &standings,
            self.now(),
        ))
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
        work: Queued,
        create: bool,
        dry_run: bool,
    ) -> Result<Queueing, ServiceError> {
        let current = self.get(quota_name).await?.quota;
        let limits = self.queue_limits(&current).await?;
        let now = self.now();
        self.update_status(quota_name, dry_run, |q| {
            let mut work = work.clone();
            let dropped = create && ledger::dequeue(q, &work.workload_ref);
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
            let waiting = ledger::entries(q);
            let check = queue::would_queue_at(&waiting, &work, &pool, &[], &q.spec.queueing, now);
            match check {
                // A queued entry that now fits keeps its place with what it
                // asks now; the controller's next round admits it.
                Check::AdmitsNow if ledger::holds(q, &work.workload_ref) => {
                    let changed =
                        ledger::enqueue(q, work, 0, queue::Waiting::Quota, String::new())?;
                    Ok((changed || dropped, Queueing::Admits))
                }
                Check::AdmitsNow => Ok((dropped, Queueing::Admits)),
                Check::Never(r) => Ok((dropped, Queueing::Never(r.to_string()))),
                Check::Queues { position, reason } => {
                    let text = reason.to_string();
                    let changed =
                        ledger::enqueue(q, work, position, reason.waiting(), text.clone())?;
                    Ok((
                        changed || dropped,
                        Queueing::Queued {
                            position,
                            reason: text,
                        },
                    ))
                }
            }
        })
        .await
    }

    /// Where `work` would land, without writing (`POST /api/v1/check`).
    pub async fn would_queue(
        &self,
        quota_name: &str,
        work: Queued,
    ) -> Result<Queueing, ServiceError> {
        self.queue_workload(quota_name, work, true, true).await
    }

    /// The controller's admission of one entry: if `wref` is still queued
    /// under `uid`, charge `charge` within `limits`, reserve on its budgets
    /// for the run time its entry declares (docs/budgets.md §9), and remove
    /// the entry, in one write. `Ok(false)`: no longer queued (nothing to
    /// do); a denial: it no longer fits, it stays queued for the next round.
    pub async fn admit_queued(
        &self,
        quota_name: &str,
        wref: &str,
        uid: &str,
        charge: quota::object::Charge,
        limits: &ResourceList,
    ) -> Result<bool, ServiceError> {
        let now = self.now();
        self.update_status(quota_name, false, |q| {
            let Some(entry) = ledger::find(q, wref, uid) else {
                return Ok((false, false));
            };
            let run = hold::RunDecl::Object(Ok(entry.work.run_ms));
            let old = q.status.workloads.get(wref).cloned();
            let prices = self.price_list();
            let reserved = hold::decide(
                q,
                wref,
                old.as_ref(),
                &charge,
                &run,
                now,
                &self.prices,
                &prices,
            )
            .map_err(|r| Denial::Budget(Box::new(r)))?;
            let admitted = ledger::admit(q, wref, uid, charge.clone(), limits)?;
            if admitted {
                hold::apply(&mut q.status, wref, reserved);
            }
            Ok((admitted, admitted))
        })
        .await
    }

    /// Rewrite positions and reasons after a round (entries admitted or
    /// deleted meanwhile are not brought back).
    pub async fn restate_queue(
        &self,
        quota_name: &str,
        fresh: Vec<queue::QueueEntry>,
    ) -> Result<bool, ServiceError> {
        self.update_status(quota_name, false, |q| {
            let changed = ledger::restate(q, fresh.clone());
            Ok((changed, changed))
        })
        .await
    }

    /// Give an entry its object's uid (the mutating webhook of a CREATE
    /// sees no uid yet: the API server assigns it after mutation).
    pub async fn name_queued(
        &self,
        quota_name: &str,
        wref: &str,
        uid: &str,
    ) -> Result<bool, ServiceError> {
        self.update_status(quota_name, false, |q| {
            let mut changed = false;
            for e in q.status.queue.iter_mut() {
                if e.work.workload_ref == wref && e.work.uid.is_empty() {
                    e.work.uid = uid.to_string();
                    changed = true;
                }
            }
            Ok((changed, changed))
        })
        .await
    }
}
