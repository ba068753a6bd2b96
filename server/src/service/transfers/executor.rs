//! How an approved transfer runs: holds, plan, give, decide, receive or
//! undo, let go, each step one guarded write, so that a crashed executor's
//! work is finished by another from where it stopped.
//!
//! # Execution protocol
//!
//! An executor owns a row while its lease (`lease_until`, renewed at each
//! phase) runs; `recover` (at startup and at every sweep) takes over rows
//! whose lease ran out, so a crashed executor's transfer is finished by
//! another, from where it stopped.
//!
//! 1. **Hold.** In the parent of every quota on the way (and at the LCA,
//!    which also records the decision) the transfer's id is written into
//!    `status.transfers` with the carve-outs it is about to change. A
//!    carve-out held by another transfer refuses: everything taken is let
//!    go and the row waits as `approved` (holding nothing while waiting,
//!    two transfers cannot deadlock). While held, a carve-out changes only
//!    as the transfer plans: edits and deletes of those quotas are refused
//!    (409), and the resync's carve-out repair leaves them alone.
//! 2. **Plan.** With the holds in place the quotas on the way are read
//!    again and the plan is made from them (re-validation: the room may be
//!    gone since the request). A refusal lets go of the holds and rejects
//!    the transfer with the reason. The plan is stored in the row before any
//!    quota changes; an executor that finds one follows it, never re-plans.
//! 3. **Give.** Bottom-up from the source, each quota's hard is lowered,
//!    then its parent's carve-out of it (`Plan::giving`).
//! 4. **Decide.** One CAS on the LCA's status, the linearisation point:
//!    if the receiving side's raise fits its remainder, the giving side's
//!    carve-out is lowered and the receiving side's raised in that one
//!    write, with `Committed` recorded in the hold; otherwise only
//!    `Aborted` and the reason are recorded. Recorded in the LCA, the
//!    decision is taken once, whichever executor gets there, and copied to
//!    the row (`outcome`). Two transfers after the same room serialise on
//!    this write: the second finds the room gone and is rejected.
//! 5. **Receive** (committed): top-down, each parent's carve-out of the
//!    child below is raised, then the child's hard (`Plan::receiving`).
//!    **Undo** (aborted): the giving steps reversed, top-down.
//! 6. **Let go** of the holds, then the row becomes `done` (or `rejected`
//!    with the reason).
//!
//! Every step is one write to one object, guarded by the plan's values: it
//! writes only if it finds the `before` values, does nothing if it finds
//! the `after` values (a retry, or another executor's work), and refuses
//! otherwise. So a recovery simply runs the whole remaining protocol again.
//! In cluster mode a hard is written through the API server and so through
//! the quota webhook, whose carve-out check lets exactly the planned values
//! through a held carve-out.
//!
//! # What a reader sees mid-way, and why no capacity is created or lost
//!
//! Between steps a reader sees some quotas changed and others not: the
//! source lowered before the destination is raised, and a carve-out ahead
//! of (or behind) its child's hard by the amount. The order keeps two
//! things true after every write:
//! - every carve-out is at least its child's hard: a child never holds
//!   guarantee its parent does not count as handed out (on the way up the
//!   child is lowered first; on the way down the parent raises first);
//! - no quota but the destination (and the LCA, when quota is given back
//!   to it) shows more room than before: an intermediate quota's own hard
//!   and its carve-out of the child below move in the order that makes it
//!   look *fuller* in between, never emptier, so nothing concurrent can
//!   take room that is about to be used.
//!
//! Hence Σ of carve-outs at every parent stays within what that parent was
//! itself given, whatever interleaves; the amount is at all times either
//! with the giving side, in flight (held by a carve-out ahead of its child,
//! unusable by anyone), or with the receiving side. When all steps are
//! done, every carve-out equals its child's hard again and `used = selfUsed
//! + Σ children's hard` holds everywhere.

use super::{CrashPoint, LEASE_MS};
use crate::authz::SYSTEM_ACTOR;
use crate::service::audit;
use crate::service::{Service, ServiceError};
use crate::store::sql::SqlStore;
use crate::store::transfers::Outcome;
use crate::store::transfers::{Transfer, TransferKind, TransferStatus};
use quota::object::budgets::Entry;
use quota::object::transfers::Decision;
use quota::object::Quota;
use quota::resources::ResourceList;
use quota::transfer::{self, Plan, Step};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Attempts to take the holds before waiting for the sweep.
const HOLD_ATTEMPTS: u32 = 6;

/// What runs transfers: cheap to clone, so a run goes on in its own task
/// even when the request that started it is dropped half-way.
#[derive(Clone)]
pub(super) struct Executor {
    pub(super) service: Arc<Service>,
    pub(super) store: Arc<SqlStore>,
    pub(super) crash: Arc<std::sync::Mutex<Option<CrashPoint>>>,
}

/// Why an execution stopped before its end.
pub(super) enum Halt {
    /// Crashed (tests), or another executor has the row.
    Stopped,
    Error(ServiceError),
}

impl From<ServiceError> for Halt {
    fn from(e: ServiceError) -> Self {
        Halt::Error(e)
    }
}

impl From<crate::store::StoreError> for Halt {
    fn from(e: crate::store::StoreError) -> Self {
        Halt::Error(e.into())
    }
}

impl Executor {
    /// Appends an audit entry for what the system did to a transfer. Never
    /// fails the caller: a write error is logged.
    pub(super) async fn audit(
        &self,
        act: &str,
        before: Option<&Transfer>,
        after: &Transfer,
        detail: &str,
    ) {
        let e = crate::store::audit::entry(
            self.service.now(),
            SYSTEM_ACTOR,
            act,
            &audit::transfer_target(after),
            before.map(audit::transfer_json),
            Some(audit::transfer_json(after)),
            detail,
        );
        if let Err(err) = self.store.append_audit(&e).await {
            tracing::error!(error = %err, transfer = after.id, action = act, "could not write an audit entry");
        }
    }

    /// Run transfer `id` in its own task (`lease`: already taken by the
    /// caller) and wait for it.
    pub(super) async fn spawn(
        &self,
        id: i64,
        lease: Option<i64>,
    ) -> Result<Transfer, ServiceError> {
        let me = self.clone();
        let run = tokio::spawn(async move { me.run(id, lease).await });
        match run.await {
            Ok(r) => r,
            Err(e) => Err(ServiceError::Internal(format!("transfer {id}: {e}"))),
        }
    }

    async fn run(&self, id: i64, lease: Option<i64>) -> Result<Transfer, ServiceError> {
        let mut lease = lease;
        match self.execute(id, &mut lease).await {
            Ok(()) | Err(Halt::Stopped) => {}
            Err(Halt::Error(e)) => {
                tracing::warn!(transfer = id, error = %e, "transfer interrupted; recovery finishes it");
                return Err(e);
            }
        }
        self.store
            .transfer(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("transfer {id} not found")))
    }

    pub(super) fn crashed(&self, at: CrashPoint) -> Result<(), Halt> {
        if *self.crash.lock().unwrap() == Some(at) {
            return Err(Halt::Stopped);
        }
        Ok(())
    }

    /// Take or renew the lease; stop if another executor has the row.
    pub(super) async fn renew(&self, id: i64, lease: &mut Option<i64>) -> Result<(), Halt> {
        let now = self.service.now();
        let until = now + LEASE_MS;
        if !self.store.lease_transfer(id, now, *lease, until).await? {
            return Err(Halt::Stopped);
        }
        *lease = Some(until);
        Ok(())
    }

    async fn execute(&self, id: i64, lease: &mut Option<i64>) -> Result<(), Halt> {
        let t = self
            .store
            .transfer(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("transfer {id} not found")))?;
        if t.status.is_final() {
            return self.let_go_after_end(&t).await;
        }
        self.renew(id, lease).await?;
        let t = self
            .store
            .transfer(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("transfer {id} not found")))?;
        if t.kind == TransferKind::TopUp {
            return self.execute_top_up(&t, lease).await;
        }
        let key = t.key();
        let plan = match &t.plan {
            Some(p) => p.clone(),
            None => match self.prepare(&t).await? {
                Prepared::Plan(p) => {
                    self.crashed(CrashPoint::AfterHolds)?;
                    if !self.store.set_transfer_plan(id, &p).await? {
                        return Err(Halt::Stopped);
                    }
                    p
                }
                Prepared::Refused(reason) if t.reverts.is_some() => {
                    // A loan's return waits for room instead of giving up.
                    self.store.park_transfer(id, &reason).await?;
                    return Ok(());
                }
                Prepared::Refused(reason) => {
                    // Nothing held, nothing changed.
                    self.finish(&t, TransferStatus::Rejected, Some(&reason))
                        .await?;
                    self.store.clear_transfer_lease(id).await?;
                    return Ok(());
                }
                Prepared::Busy(why) => {
                    self.store.park_transfer(id, &why).await?;
                    return Ok(());
                }
            },
        };
        self.renew(id, lease).await?;
        let decision = match t.outcome {
            Some(_) => self.decided(&t, &plan).await?,
            None => {
                let mut refused = None;
                for step in plan.giving() {
                    match self.step(&step, &key).await {
                        Ok(()) => {}
                        Err(e) if permanent(&e) => {
                            refused = Some(e.to_string());
                            break;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                self.crashed(CrashPoint::AfterGiving)?;
                let (lca, k, p) = (plan.lca.clone(), key.clone(), plan.clone());
                let decision = self
                    .service
                    .update_status(&lca, false, move |q| {
                        let (changed, d) = match &refused {
                            None => transfer::commit(q, &k, &p)?,
                            Some(reason) => transfer::abort(q, &k, reason)?,
                        };
                        Ok((changed, d))
                    })
                    .await?;
                self.store
                    .set_transfer_outcome(id, Outcome::of(&decision))
                    .await?;
                decision
            }
        };
        self.crashed(CrashPoint::AfterCommit)?;
        self.renew(id, lease).await?;
        let steps = match decision {
            Decision::Committed => plan.receiving(),
            Decision::Aborted { .. } => plan.undo_giving(),
        };
        let mut failure: Option<String> = None;
        for step in steps {
            match self.step(&step, &key).await {
                Ok(()) => {}
                Err(e) if permanent(&e) => {
                    failure = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.crashed(CrashPoint::AfterReceiving)?;
        // The row ends first, keeping its lease: a final row with a lease
        // still has holds to let go, which recovery does if we stop here.
        match (&decision, failure) {
            (_, Some(why)) => {
                tracing::error!(transfer = id, error = %why, "transfer failed after its decision; the resync squares the carve-outs");
                self.finish(&t, TransferStatus::Failed, Some(&why)).await?;
            }
            (Decision::Committed, None) => {
                let warnings = (!plan.warnings.is_empty()).then(|| plan.warnings.join("\n"));
                self.finish(&t, TransferStatus::Done, warnings.as_deref())
                    .await?;
            }
            (Decision::Aborted { reason }, None) if t.reverts.is_some() => {
                // A loan's return waits for room instead of giving up; it
                // starts afresh, so its holds (and decision) go first.
                self.release(&plan, &key).await?;
                self.store.park_transfer(id, reason).await?;
                return Ok(());
            }
            (Decision::Aborted { reason }, None) => {
                self.finish(&t, TransferStatus::Rejected, Some(reason))
                    .await?;
            }
        }
        self.crashed(CrashPoint::AfterEnd)?;
        self.release(&plan, &key).await?;
        self.store.clear_transfer_lease(id).await?;
        Ok(())
    }

    /// The one place a top-up's ledger entries (`report::Entry`, reason
    /// `topUp`) go: the budget ledger (`SqlStore::append_ledger`,
    /// idempotent, so a recovery that executes again adds nothing), and the
    /// audit log, whose entry's `after` holds the transfer and its entries,
    /// exact in acc.
    pub(super) async fn record_entries(
        &self,
        act: &str,
        t: &Transfer,
        entries: &[Entry],
        detail: &str,
    ) {
        let mut after = audit::transfer_json(t);
        after["entries"] = serde_json::to_value(entries).unwrap_or_default();
        let e = crate::store::audit::entry(
            self.service.now(),
            SYSTEM_ACTOR,
            act,
            &audit::transfer_target(t),
            None,
            Some(after),
            detail,
        );
        if let Err(err) = self.store.append_audit(&e).await {
            tracing::error!(error = %err, transfer = t.id, action = act, "could not write an audit entry");
        }
        if let Err(err) = self.store.append_ledger(entries).await {
            tracing::error!(error = %err, transfer = t.id, action = act, "could not append a top-up's ledger entries");
        }
    }

    /// A final transfer whose holds were not all let go (its executor
    /// stopped after the row ended).
    async fn let_go_after_end(&self, t: &Transfer) -> Result<(), Halt> {
        let now = self.service.now();
        let Some(held) = t.lease_until.filter(|l| *l < now) else {
            return Err(Halt::Stopped);
        };
        if !self
            .store
            .take_final_lease(t.id, held, now + LEASE_MS)
            .await?
        {
            return Err(Halt::Stopped);
        }
        if let Some(plan) = &t.plan {
            self.release(plan, &t.key()).await?;
        }
        self.store.clear_transfer_lease(t.id).await?;
        Ok(())
    }

    pub(super) async fn finish(
        &self,
        t: &Transfer,
        status: TransferStatus,
        result: Option<&str>,
    ) -> Result<(), Halt> {
        let now = self.service.now();
        self.store
            .finish_transfer(t.id, status, result, now)
            .await?;
        tracing::info!(transfer = t.id, from = ?t.from_quota, to = %t.to_quota, %status, result = ?result, "transfer ended");
        Ok(())
    }

    /// The decision a previous run recorded: in the LCA's hold while it is
    /// there, else (holds let go, only the row left to finish) the row's.
    async fn decided(&self, t: &Transfer, plan: &Plan) -> Result<Decision, Halt> {
        let lca = self.service.get(&plan.lca).await?;
        let held = lca
            .quota
            .status
            .transfers
            .get(&t.key())
            .and_then(|h| h.decision.clone());
        Ok(match (held, t.outcome) {
            (Some(d), _) => d,
            (None, Some(Outcome::Committed)) => Decision::Committed,
            (None, _) => Decision::Aborted {
                reason: t
                    .result
                    .clone()
                    .unwrap_or_else(|| format!("refused at {}", plan.lca)),
            },
        })
    }

    /// One guarded write of the plan (see `quota::transfer::apply`).
    async fn step(&self, step: &Step, key: &str) -> Result<(), ServiceError> {
        let (s, k) = (step.clone(), key.to_string());
        self.service
            .modify(step.quota(), false, None, move |q| {
                Ok((transfer::apply(q, &s, &k)?, ()))
            })
            .await
    }

    /// Let go of every hold, the LCA's last (it carries the decision).
    async fn release(&self, plan: &Plan, key: &str) -> Result<(), ServiceError> {
        let mut parents: Vec<String> = plan.holds().into_keys().collect();
        parents.sort_by_key(|p| *p == plan.lca);
        for parent in parents {
            let k = key.to_string();
            match self
                .service
                .update_status(&parent, false, move |q| Ok((transfer::release(q, &k), ())))
                .await
            {
                Ok(()) | Err(ServiceError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The quotas on the way from `from` (or `to`'s parent) to `to`, with
    /// all their ancestors, fresh from the store.
    async fn family(
        &self,
        from: Option<&str>,
        to: &str,
    ) -> Result<BTreeMap<String, Quota>, ServiceError> {
        let mut out = BTreeMap::new();
        let mut todo: Vec<String> = from.into_iter().map(str::to_string).collect();
        todo.push(to.to_string());
        while let Some(name) = todo.pop() {
            if name.is_empty() || out.contains_key(&name) || out.len() > 10_000 {
                continue;
            }
            let Some(s) = self.service.store.get(&name).await? else {
                continue; // `transfer::path` names what is missing
            };
            todo.push(s.quota.spec.parent.clone());
            out.insert(name, s.quota);
        }
        Ok(out)
    }

    /// A plan against the tree as it is now (nothing held).
    pub(super) async fn plan_now(
        &self,
        from: Option<&str>,
        to: &str,
        amounts: &ResourceList,
    ) -> Result<Plan, ServiceError> {
        let family = self.family(from, to).await?;
        Ok(transfer::plan(
            &family,
            from,
            to,
            amounts,
            &self.service.keys,
        )?)
    }

    /// Steps 1–2 of the protocol: hold, then plan from fresh state.
    async fn prepare(&self, t: &Transfer) -> Result<Prepared, Halt> {
        let key = t.key();
        let mut busy = String::new();
        for attempt in 0..HOLD_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(20 << attempt.min(5))).await;
            }
            let first = match self
                .plan_now(t.from_quota.as_deref(), &t.to_quota, &t.amounts)
                .await
            {
                Ok(p) => p,
                Err(e) if refusal(&e) => return Ok(Prepared::Refused(e.to_string())),
                Err(e @ ServiceError::Conflict(_)) => {
                    busy = e.to_string();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let holds = first.holds();
            let mut taken = Vec::new();
            let mut conflict = None;
            for (parent, children) in &holds {
                let (k, c, now) = (key.clone(), children.clone(), self.service.now());
                match self
                    .service
                    .update_status(parent, false, move |q| {
                        Ok((transfer::hold(q, &k, &c, now)?, ()))
                    })
                    .await
                {
                    Ok(()) => taken.push(parent.clone()),
                    Err(e @ (ServiceError::Conflict(_) | ServiceError::NotFound(_))) => {
                        conflict = Some(e);
                        break;
                    }
                    Err(e) => {
                        self.let_go(&taken, &key).await;
                        return Err(e.into());
                    }
                }
            }
            if let Some(e) = conflict {
                self.let_go(&taken, &key).await;
                busy = e.to_string();
                continue;
            }
            // Held: nothing on the way can change now but by this transfer.
            match self
                .plan_now(t.from_quota.as_deref(), &t.to_quota, &t.amounts)
                .await
            {
                Ok(p) if p.holds() == holds => return Ok(Prepared::Plan(p)),
                Ok(_) => {
                    // Moved between the first look and the holds: again.
                    self.let_go(&taken, &key).await;
                    busy = format!("the quotas of transfer {key} changed while it started");
                }
                Err(e) => {
                    self.let_go(&taken, &key).await;
                    if refusal(&e) {
                        return Ok(Prepared::Refused(e.to_string()));
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(Prepared::Busy(format!("waiting: {busy}")))
    }

    async fn let_go(&self, parents: &[String], key: &str) {
        for parent in parents {
            let k = key.to_string();
            if let Err(e) = self
                .service
                .update_status(parent, false, move |q| Ok((transfer::release(q, &k), ())))
                .await
            {
                tracing::warn!(%parent, transfer = key, error = %e, "could not let go of a hold; recovery will");
            }
        }
    }
}

enum Prepared {
    Plan(Plan),
    /// Re-validation refused it: nothing changed, nothing held.
    Refused(String),
    /// Other transfers hold quotas on the way: nothing held; try later.
    Busy(String),
}

/// A step that can never succeed by trying again: its quota moved or went.
fn permanent(e: &ServiceError) -> bool {
    matches!(e, ServiceError::Conflict(_) | ServiceError::NotFound(_))
}

/// A plan refused by the rules (not by contention or the store).
fn refusal(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::Denied(_) | ServiceError::BadRequest(_) | ServiceError::NotFound(_)
    )
}
