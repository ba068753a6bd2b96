//! Quota transfers (§6, docs/semantics.md): requests, approval, and an execution that
//! changes every quota on the way or none, correct under concurrency and
//! crashes. The rules and the plan are `quota::transfer`'s; this module runs
//! them against the store, one compare-and-swap per object, through the
//! service's one CAS loop. Who may approve is the caller's to check
//! (`quota::transfer::approvers_scope` says whose subtree it is).
//!
//! # Lifecycle
//!
//! A row in `transfers` (migration 0005) goes `requested` → (`approve`)
//! `executing` → `done`; or `requested` → `rejected` (`reject`) | `expired`
//! (`expire_due`); or `executing` → `rejected` when the re-validation at
//! approval refuses it (the result says why; no quota changed), or
//! `approved` when it must wait for another transfer through the same
//! quotas (the sweep runs it later). `failed` is reserved for a transfer
//! whose quotas were changed behind its holds after it committed (only
//! possible by going around bizrq, e.g. editing the CRD with the webhook
//! off); what it had taken then sits in the common ancestor's remainder.
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
//!
//! # Loans
//!
//! A transfer with `revert_at` is a loan: once `done`, the sweep gives it
//! back at that time by a transfer of the same amounts the other way (to
//! the source's quota, or back to the parent's remainder), approved by
//! `bizrq`, linked both ways (`reverts`, `reverted_by`). The return is a
//! transfer like any other, with one difference: when it does not fit —
//! the destination quota's hard was lowered below the amount meanwhile, or
//! the LCA is over-committed — it is not rejected but waits (`approved`,
//! the reason in `result`) and is tried again at every sweep until it fits.
//! A return may leave the borrower below its used (lowering is always
//! allowed; the plan warns). Loans carry no cash keys.

use crate::alerts;
use crate::service::audit;
use crate::service::{Service, ServiceError};
use crate::store::audit::action;
use crate::store::sql::SqlStore;
use crate::store::transfers::{NewTransfer, Outcome};
use crate::store::transfers::{TopUp, Transfer, TransferFilter, TransferKind, TransferStatus};
use quota::budget::topup::{self, TopUpError};
use quota::object::budgets::Entry;
use quota::object::budgets::Source;
use quota::object::transfers::Decision;
use quota::object::Quota;
use quota::resources::ResourceList;
use quota::transfer::{self, Plan, Step};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long an executor owns a transfer without renewing its lease. Each
/// phase is a handful of single-object writes: far shorter.
pub const LEASE_MS: i64 = 30_000;
/// Requests expire after this by default (the caller may choose).
pub const DEFAULT_TTL_MS: i64 = 7 * 24 * 3_600_000;
/// Who approves the return of a loan.
pub const SYSTEM_ACTOR: &str = "bizrq";
/// The longest reason a transfer request may give.
pub const MAX_REASON_CHARS: usize = 2_000;
/// A top-up's expiry is at most this long after its request (366 days).
pub const MAX_TOP_UP_UNTIL_MS: i64 = 366 * 24 * 3_600_000;

/// The furthest a loan's `revertAt` may be from its request: as a top-up's
/// `until`.
pub const MAX_LOAN_MS: i64 = MAX_TOP_UP_UNTIL_MS;
/// Attempts to take the holds before waiting for the sweep.
const HOLD_ATTEMPTS: u32 = 6;

/// What a requester asks for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferRequest {
    /// None: from the parent of `to` (its uncarved remainder).
    #[serde(default)]
    pub from: Option<String>,
    pub to: String,
    pub amounts: ResourceList,
    pub reason: String,
    /// A loan: given back at this time (epoch milliseconds).
    #[serde(default)]
    pub revert_at: Option<i64>,
    /// `move` (default) or `topUp` (docs/budgets.md §5): `amounts` names
    /// one cash key of `to`, `from` is absent.
    #[serde(default)]
    pub kind: TransferKind,
    /// A top-up's source: `parent` or `grant`.
    #[serde(default)]
    pub source: Option<Source>,
    /// A top-up's expiry (epoch milliseconds): its unspent part is
    /// withdrawn then.
    #[serde(default)]
    pub until: Option<i64>,
}

/// Where a test stops an execution, as a crash would: nothing after it
/// runs, the lease is kept until it runs out.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    AfterHolds,
    AfterGiving,
    AfterCommit,
    AfterReceiving,
    AfterEnd,
}

/// Who hears of a transfer's life: the alert engine
/// (`alert_engine::TransferAlerts`), passed in at startup, so the service
/// does not depend on it. Failures are the watcher's to log: a decision
/// stands whatever happens to its alert.
#[async_trait::async_trait]
pub trait TransferWatcher: Send + Sync {
    /// Requested, approved or rejected (`kind` says which).
    async fn decided(&self, kind: alerts::Kind, t: &Transfer);
    /// Expired at `now_ms` with nobody deciding it.
    async fn expired(&self, t: &Transfer, now_ms: i64);
}

pub struct TransferService {
    exec: Executor,
    /// Who hears of requests, decisions and expiries (the alert engine).
    watcher: Arc<dyn TransferWatcher>,
    /// Requests are admitted one at a time, so the per-user caps of
    /// `transfer_ops` cannot be passed by sending many at once.
    pub(crate) request_gate: tokio::sync::Mutex<()>,
}

/// What runs transfers: cheap to clone, so a run goes on in its own task
/// even when the request that started it is dropped half-way.
#[derive(Clone)]
struct Executor {
    service: Arc<Service>,
    store: Arc<SqlStore>,
    crash: Arc<std::sync::Mutex<Option<CrashPoint>>>,
}

/// Why an execution stopped before its end.
enum Halt {
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

impl TransferService {
    pub fn new(
        service: Arc<Service>,
        store: Arc<SqlStore>,
        watcher: Arc<dyn TransferWatcher>,
    ) -> TransferService {
        TransferService {
            exec: Executor {
                service,
                store,
                crash: Default::default(),
            },
            watcher,
            request_gate: tokio::sync::Mutex::new(()),
        }
    }

    /// Requested, approved, rejected: an alert to the receiving quota's
    /// owners and the admins. A failure is logged; the decision stands.
    async fn alert(&self, kind: alerts::Kind, t: &Transfer) {
        self.watcher.decided(kind, t).await;
    }

    /// Stop the next executions at `point`, as a crash would (tests).
    #[doc(hidden)]
    pub fn crash_at(&self, point: Option<CrashPoint>) {
        *self.exec.crash.lock().unwrap() = point;
    }

    /// Ask to move `req.amounts` from `req.from` (or the parent) to `req.to`.
    /// Checked against the tree as it is now, so a request that could not be
    /// approved is refused at once, with the key and the amount. The reason
    /// is mailed to owners and admins, so it is bounded
    /// ([`MAX_REASON_CHARS`]).
    pub async fn request(
        &self,
        req: TransferRequest,
        actor: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Transfer, ServiceError> {
        if actor.trim().is_empty() {
            return Err(ServiceError::BadRequest(
                "a transfer needs a requester".into(),
            ));
        }
        if req.reason.trim().is_empty() {
            return Err(ServiceError::BadRequest(
                "a transfer needs a reason, for the approver and the audit log".into(),
            ));
        }
        let length = req.reason.trim().chars().count();
        if length > MAX_REASON_CHARS {
            return Err(ServiceError::BadRequest(format!(
                "a transfer's reason has at most {MAX_REASON_CHARS} characters, not {length}"
            )));
        }
        if ttl_ms <= 0 {
            return Err(ServiceError::BadRequest(format!(
                "a request must stay open for some time, not {ttl_ms} ms"
            )));
        }
        if req.kind == TransferKind::TopUp {
            return self.request_top_up(req, actor, now_ms, ttl_ms).await;
        }
        if req.source.is_some() || req.until.is_some() {
            return Err(ServiceError::BadRequest(
                "source and until are for a top-up (kind topUp); a move of hard has neither".into(),
            ));
        }
        if let Some(at) = req.revert_at {
            if at <= now_ms {
                return Err(ServiceError::BadRequest(
                    "a loan must be given back in the future".into(),
                ));
            }
            // A loan of a year and more is a transfer for good that still
            // holds a row the sweep reads, and a time far enough ahead
            // overflows what it is added to.
            if at.saturating_sub(now_ms) > MAX_LOAN_MS {
                return Err(ServiceError::BadRequest(
                    "revertAt: a loan is given back at most 366 days from now; transfer for good instead"
                        .into(),
                ));
            }
            transfer::check_loan(&req.amounts)?;
        }
        self.exec
            .plan_now(req.from.as_deref(), &req.to, &req.amounts)
            .await?;
        let t = self
            .exec
            .store
            .insert_transfer(&NewTransfer {
                from_quota: req.from.as_deref(),
                to_quota: &req.to,
                amounts: &req.amounts,
                reason: req.reason.trim(),
                requested_by: actor,
                requested_at: now_ms,
                expires_at: now_ms.saturating_add(ttl_ms),
                revert_at: req.revert_at,
                top_up: None,
            })
            .await?;
        self.alert(alerts::Kind::TransferRequested, &t).await;
        Ok(t)
    }

    /// A request of kind `topUp` (docs/budgets.md §5): one cash key of
    /// `to`'s hard, a positive bounded amount, a source, an optional expiry
    /// in the future. From the parent, the parent must cover it now (and
    /// again when it executes). Nothing is stored unless all of it holds.
    async fn request_top_up(
        &self,
        req: TransferRequest,
        actor: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Transfer, ServiceError> {
        let (key, amount) = check_top_up(&req, now_ms)?;
        let source = req.source.unwrap_or(Source::Grant);
        let to = self.exec.service.get(&req.to).await?.quota;
        if !to.spec.hard.contains_key(&key) {
            return Err(top_up_error(TopUpError::NotABudget {
                quota: req.to.clone(),
                key,
            }));
        }
        let parent = match source {
            Source::Grant => None,
            Source::Parent if to.spec.parent.is_empty() => {
                return Err(ServiceError::BadRequest(format!(
                    "{} is a root of the tree: it has no parent to top up from; ask for a grant",
                    req.to
                )))
            }
            Source::Parent => {
                let mut probe = self.exec.service.get(&to.spec.parent).await?.quota;
                topup::give(&mut probe, &key, "request", amount, now_ms).map_err(top_up_error)?;
                Some(to.spec.parent.clone())
            }
        };
        let top_up = TopUp {
            source,
            parent,
            until: req.until,
            scheduled_for: None,
            expired_at: None,
            withdrawn: None,
        };
        let t = self
            .exec
            .store
            .insert_transfer(&NewTransfer {
                from_quota: None,
                to_quota: &req.to,
                amounts: &req.amounts,
                reason: req.reason.trim(),
                requested_by: actor,
                requested_at: now_ms,
                expires_at: now_ms.saturating_add(ttl_ms),
                revert_at: None,
                top_up: Some(&top_up),
            })
            .await?;
        self.alert(alerts::Kind::TransferRequested, &t).await;
        Ok(t)
    }

    /// Applies the expiry of every done top-up whose `until` has passed:
    /// its unspent part is withdrawn from the receiving quota's period (and
    /// given back to the parent it came from), recorded in the row once
    /// and audited by the caller whose update recorded it. Returns how
    /// many were recorded here.
    pub async fn expire_top_ups(&self, now_ms: i64) -> Result<usize, ServiceError> {
        let mut n = 0;
        for t in self.exec.store.top_ups_due(now_ms).await? {
            match self.exec.expire_top_up(&t, now_ms).await {
                Ok(true) => n += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(transfer = t.id, error = %e, "a top-up's expiry did not finish; the next sweep tries again")
                }
            }
        }
        Ok(n)
    }

    /// Starts each policy's scheduled top-up from the parent for the
    /// current period of its quota, once per period: a row approved by
    /// `bizrq` under a unique schedule key (so racing sweeps and replicas
    /// insert one), then executed like any top-up from the parent (the
    /// parent must cover it, or it is rejected with the reason). Returns
    /// how many were started here.
    pub async fn schedule_top_ups(&self, now_ms: i64) -> Result<usize, ServiceError> {
        let mut started = 0;
        for q in self.exec.service.list().await? {
            if q.spec.parent.is_empty() {
                continue;
            }
            for (key, policy) in &q.spec.budgets {
                let Some(s) = policy
                    .scheduled_top_up
                    .as_ref()
                    .filter(|s| s.source == Source::Parent)
                else {
                    continue;
                };
                let Some(start) = q
                    .status
                    .budgets
                    .get(key)
                    .filter(|p| p.funded)
                    .and_then(|p| p.start.clone())
                else {
                    continue;
                };
                let top_up = TopUp {
                    source: Source::Parent,
                    parent: Some(q.spec.parent.clone()),
                    until: None,
                    scheduled_for: Some(start.clone()),
                    expired_at: None,
                    withdrawn: None,
                };
                let amounts = [(key.clone(), s.amount)].into();
                let Some(id) = self
                    .exec
                    .store
                    .insert_scheduled(
                        q.name(),
                        &amounts,
                        &top_up,
                        &format!("{} {key} {start}", q.name()),
                        &format!("scheduled top-up of the period from {start}"),
                        SYSTEM_ACTOR,
                        now_ms,
                    )
                    .await?
                else {
                    continue;
                };
                started += 1;
                if let Some(t) = self.exec.store.transfer(id).await? {
                    self.exec
                        .audit(
                            action::TRANSFER_REQUEST,
                            None,
                            &t,
                            &format!("{}; scheduled by the policy", audit::transfer_summary(&t)),
                        )
                        .await;
                }
                match self.exec.spawn(id, None).await {
                    Ok(t) if t.status == TransferStatus::Rejected => {
                        self.alert(alerts::Kind::TransferRejected, &t).await
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(transfer = id, error = %e, "a scheduled top-up did not finish; recovery finishes it")
                    }
                }
            }
        }
        Ok(started)
    }

    /// Approve a request and execute it. Returns the transfer as it ends:
    /// `done`, `rejected` (re-validation refused it; `result` says why and
    /// no quota changed), or `approved` (waiting for another transfer
    /// through the same quotas; the sweep runs it). The caller has checked
    /// that `actor` may approve (an admin, or an owner of the LCA).
    pub async fn approve(
        &self,
        id: i64,
        actor: &str,
        now_ms: i64,
    ) -> Result<Transfer, ServiceError> {
        let lease = self.exec.service.now().max(now_ms) + LEASE_MS;
        if !self
            .exec
            .store
            .approve_transfer(id, actor, now_ms, lease)
            .await?
        {
            let t = self.get(id).await?;
            if t.status == TransferStatus::Requested && t.expires_at <= now_ms {
                self.expire_due(now_ms).await?;
                return Err(ServiceError::Conflict(format!(
                    "transfer {id} expired at {}; request it again",
                    quota::time::format_rfc3339(t.expires_at)
                )));
            }
            return Err(ServiceError::Conflict(format!(
                "transfer {id} is {}, not waiting for approval",
                t.status
            )));
        }
        if let Ok(t) = self.get(id).await {
            self.alert(alerts::Kind::TransferApproved, &t).await;
        }
        let t = self.exec.spawn(id, Some(lease)).await?;
        // Re-validation refused it after all: say so, as for a rejection.
        if t.status == TransferStatus::Rejected {
            self.alert(alerts::Kind::TransferRejected, &t).await;
        }
        Ok(t)
    }

    /// Refuse a request, with a note for the requester.
    pub async fn reject(
        &self,
        id: i64,
        actor: &str,
        note: &str,
        now_ms: i64,
    ) -> Result<Transfer, ServiceError> {
        // The note is mailed with the rejection, like a request's reason.
        let length = note.chars().count();
        if length > MAX_REASON_CHARS {
            return Err(ServiceError::BadRequest(format!(
                "a rejection's note has at most {MAX_REASON_CHARS} characters, not {length}"
            )));
        }
        if !self
            .exec
            .store
            .reject_transfer(id, actor, note, now_ms)
            .await?
        {
            let t = self.get(id).await?;
            return Err(ServiceError::Conflict(format!(
                "transfer {id} is {}, not waiting for approval",
                t.status
            )));
        }
        let t = self.get(id).await?;
        self.alert(alerts::Kind::TransferRejected, &t).await;
        Ok(t)
    }

    /// Expire the requests nobody decided by `now_ms`; how many. Each
    /// expiry is audited (actor `bizrq`) by the one caller whose UPDATE
    /// expired it.
    pub async fn expire_due(&self, now_ms: i64) -> Result<u64, ServiceError> {
        let expired = self.exec.store.expire_transfers(now_ms).await?;
        for t in &expired {
            self.watcher.expired(t, now_ms).await;
            let before = Transfer {
                status: TransferStatus::Requested,
                finished_at: None,
                ..t.clone()
            };
            self.exec
                .audit(
                    action::TRANSFER_EXPIRE,
                    Some(&before),
                    t,
                    &format!(
                        "{}; nobody decided by {}",
                        audit::transfer_summary(t),
                        quota::time::format_rfc3339(t.expires_at)
                    ),
                )
                .await;
        }
        Ok(expired.len() as u64)
    }

    pub async fn list(&self, filter: &TransferFilter) -> Result<Vec<Transfer>, ServiceError> {
        Ok(self.exec.store.transfers(filter).await?)
    }

    pub async fn get(&self, id: i64) -> Result<Transfer, ServiceError> {
        self.exec
            .store
            .transfer(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("transfer {id} not found")))
    }

    /// Run every approved or executing transfer nobody is running (lease
    /// free or run out): transfers waiting for holds, and those a crash
    /// stopped half-way, which continue where they stopped. Returns how
    /// many ended (done, rejected or failed).
    pub async fn recover(&self) -> Result<usize, ServiceError> {
        let now = self.exec.service.now();
        let mut ended = 0;
        for id in self.exec.store.transfers_to_run(now).await? {
            match self.exec.spawn(id, None).await {
                Ok(t) if t.status.is_final() => {
                    ended += 1;
                    // The approver may have died before reporting the
                    // approval (its "requested" alert would stay open), and
                    // re-validation may refuse it now: report both. A
                    // transfer's alert of a kind exists once, so a report
                    // made already is not repeated.
                    if t.decided_by.as_deref().is_some_and(|d| d != SYSTEM_ACTOR) {
                        self.alert(alerts::Kind::TransferApproved, &t).await;
                    }
                    if t.status == TransferStatus::Rejected {
                        self.alert(alerts::Kind::TransferRejected, &t).await;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(transfer = id, error = %e, "transfer not finished; the next sweep tries again")
                }
            }
        }
        Ok(ended)
    }

    /// Give back the loans due at `now_ms`; how many returns ended done.
    pub async fn return_loans(&self, now_ms: i64) -> Result<usize, ServiceError> {
        let mut done = 0;
        for loan in self.exec.store.loans_due(now_ms).await? {
            let Some(plan) = &loan.plan else { continue };
            // Back the way it came: to the source's quota, or to the parent.
            let Some(id) = self
                .exec
                .store
                .insert_return(&loan, &loan.to_quota, &plan.source, SYSTEM_ACTOR, now_ms)
                .await?
            else {
                continue;
            };
            if let Some(ret) = self.exec.store.transfer(id).await? {
                self.exec
                    .audit(
                        action::TRANSFER_RETURN,
                        None,
                        &ret,
                        &format!(
                            "{}; gives back loan #{}",
                            audit::transfer_summary(&ret),
                            loan.id
                        ),
                    )
                    .await;
            }
            match self.exec.spawn(id, None).await {
                Ok(t) if t.status == TransferStatus::Done => done += 1,
                Ok(t) => {
                    tracing::info!(loan = loan.id, transfer = id, status = %t.status, result = ?t.result, "a loan's return waits")
                }
                Err(e) => {
                    tracing::warn!(loan = loan.id, transfer = id, error = %e, "a loan's return did not finish")
                }
            }
        }
        Ok(done)
    }

    /// The periodic pass: expire requests, run what is pending or was
    /// interrupted, give back loans due.
    pub async fn sweep(&self, now_ms: i64) -> Result<(), ServiceError> {
        self.expire_due(now_ms).await?;
        self.recover().await?;
        self.return_loans(now_ms).await?;
        self.schedule_top_ups(now_ms).await?;
        self.expire_top_ups(now_ms).await?;
        Ok(())
    }
}

impl Executor {
    /// Appends an audit entry for what the system did to a transfer. Never
    /// fails the caller: a write error is logged.
    async fn audit(&self, act: &str, before: Option<&Transfer>, after: &Transfer, detail: &str) {
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
    async fn spawn(&self, id: i64, lease: Option<i64>) -> Result<Transfer, ServiceError> {
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

    fn crashed(&self, at: CrashPoint) -> Result<(), Halt> {
        if *self.crash.lock().unwrap() == Some(at) {
            return Err(Halt::Stopped);
        }
        Ok(())
    }

    /// Take or renew the lease; stop if another executor has the row.
    async fn renew(&self, id: i64, lease: &mut Option<i64>) -> Result<(), Halt> {
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

    /// A top-up (docs/budgets.md §5), crash-safe by its marks: from the
    /// parent, the parent gives first (`t<id>-from`, refused unless what it
    /// has left covers it), then the quota receives (`t<id>`); each write
    /// finds its mark on a retry and changes nothing, so a recovery runs
    /// the whole again. A quota that cannot receive (gone, the key gone)
    /// hands the amount back to the parent (`t<id>-back`) and the top-up is
    /// rejected with the reason.
    async fn execute_top_up(&self, t: &Transfer, lease: &mut Option<i64>) -> Result<(), Halt> {
        let id = t.id;
        let Some(u) = t.top_up.clone() else {
            self.finish(
                t,
                TransferStatus::Failed,
                Some("a top-up without its source"),
            )
            .await?;
            self.store.clear_transfer_lease(id).await?;
            return Ok(());
        };
        let Some((key, amount)) = t.amounts.iter().next().map(|(k, v)| (k.clone(), *v)) else {
            self.finish(
                t,
                TransferStatus::Failed,
                Some("a top-up without an amount"),
            )
            .await?;
            self.store.clear_transfer_lease(id).await?;
            return Ok(());
        };
        let now = self.service.now();
        let parent = match (u.source, &u.parent) {
            (Source::Parent, Some(p)) => Some(p.clone()),
            _ => None,
        };
        if let Some(parent) = &parent {
            // The parent at the request must still be the parent.
            let moved = match self.service.get(&t.to_quota).await {
                Ok(s) => (s.quota.spec.parent != *parent)
                    .then(|| format!("{} is no longer a child of {parent}", t.to_quota)),
                Err(ServiceError::NotFound(m)) => Some(m),
                Err(e) => return Err(e.into()),
            };
            let (k, from_id) = (key.clone(), format!("t{id}-from"));
            let given = match moved {
                Some(m) if topup_mark_missing(&self.service, parent, &key, &from_id).await => {
                    Err(m)
                }
                _ => self
                    .service
                    .update_status(parent, false, move |q| {
                        Ok(match topup::give(q, &k, &from_id, amount, now) {
                            Ok(changed) => (changed, Ok(())),
                            Err(e) => (false, Err(e.to_string())),
                        })
                    })
                    .await
                    .or_else(|e| match e {
                        ServiceError::NotFound(m) => Ok(Err(m)),
                        e => Err(e),
                    })?,
            };
            if let Err(reason) = given {
                self.finish(t, TransferStatus::Rejected, Some(&reason))
                    .await?;
                self.store.clear_transfer_lease(id).await?;
                return Ok(());
            }
            self.crashed(CrashPoint::AfterGiving)?;
            self.renew(id, lease).await?;
        }
        let (k, to_id) = (key.clone(), format!("t{id}"));
        let received = self
            .service
            .update_status(&t.to_quota, false, move |q| {
                Ok(match topup::receive(q, &k, &to_id, amount, now) {
                    Ok(changed) => (changed, Ok(())),
                    Err(e) => (false, Err(e.to_string())),
                })
            })
            .await
            .or_else(|e| match e {
                ServiceError::NotFound(m) => Ok(Err(m)),
                e => Err(e),
            })?;
        if let Err(reason) = received {
            if let Some(parent) = &parent {
                let acc = quota::budget::from_quantity(amount);
                self.give_back(parent, &key, id, acc, now).await?;
            }
            self.finish(t, TransferStatus::Rejected, Some(&reason))
                .await?;
            self.store.clear_transfer_lease(id).await?;
            return Ok(());
        }
        self.crashed(CrashPoint::AfterCommit)?;
        let ended = self
            .store
            .finish_transfer(id, TransferStatus::Done, None, self.service.now())
            .await?;
        if ended {
            let mut entries = vec![top_up_entry(&t.to_quota, &key, from_q(amount), now, t)];
            if let Some(parent) = &parent {
                entries.push(top_up_entry(parent, &key, -from_q(amount), now, t));
            }
            let done = self.store.transfer(id).await?.unwrap_or_else(|| t.clone());
            self.record_entries(
                action::BUDGET_TOP_UP,
                &done,
                &entries,
                &format!("{}; executed", audit::transfer_summary(&done)),
            )
            .await;
        }
        self.store.clear_transfer_lease(id).await?;
        Ok(())
    }

    /// The expiry of one done top-up (see `expire_top_ups`): true when this
    /// caller recorded it.
    async fn expire_top_up(&self, t: &Transfer, now: i64) -> Result<bool, ServiceError> {
        let (Some(u), Some((key, _))) = (t.top_up.clone(), t.amounts.iter().next()) else {
            return Ok(false);
        };
        let (k, id) = (key.clone(), format!("t{}", t.id));
        let withdrawn = match self
            .service
            .update_status(&t.to_quota, false, move |q| {
                let (w, changed) = topup::expire(q, &k, &id, now);
                Ok((changed, w))
            })
            .await
        {
            Ok(w) => w,
            Err(ServiceError::NotFound(_)) => 0,
            Err(e) => return Err(e),
        };
        let parent = match (u.source, &u.parent) {
            (Source::Parent, Some(p)) if withdrawn > 0 => Some(p.clone()),
            _ => None,
        };
        if let Some(parent) = &parent {
            self.give_back(parent, key, t.id, withdrawn, now).await?;
        }
        let recorded = TopUp {
            expired_at: Some(now),
            withdrawn: Some(quota::budget::to_quantity(withdrawn)),
            ..u
        };
        if !self.store.set_top_up_expired(t.id, &recorded).await? {
            return Ok(false);
        }
        let after = Transfer {
            top_up: Some(recorded),
            ..t.clone()
        };
        let mut entries = Vec::new();
        if withdrawn > 0 {
            entries.push(top_up_entry(&t.to_quota, key, -withdrawn, now, t));
            if let Some(parent) = &parent {
                entries.push(top_up_entry(parent, key, withdrawn, now, t));
            }
        }
        self.record_entries(
            action::BUDGET_TOP_UP_EXPIRE,
            &after,
            &entries,
            &format!(
                "{}; expired, {} withdrawn (unspent)",
                audit::transfer_summary(&after),
                quota::budget::to_quantity(withdrawn)
            ),
        )
        .await;
        Ok(true)
    }

    /// Gives `acc` of `key` back to `parent` (a top-up that could not be
    /// received, or the unspent part withdrawn at expiry), once: the mark
    /// `t<id>-back` makes a retry change nothing. A parent gone meanwhile
    /// has nothing to receive it.
    async fn give_back(
        &self,
        parent: &str,
        key: &str,
        id: i64,
        acc: i128,
        now: i64,
    ) -> Result<(), ServiceError> {
        let (k, back) = (key.to_string(), format!("t{id}-back"));
        match self
            .service
            .update_status(parent, false, move |q| {
                Ok(match topup::receive_acc(q, &k, &back, acc, now) {
                    Ok(changed) => (changed, ()),
                    Err(_) => (false, ()),
                })
            })
            .await
        {
            Ok(()) | Err(ServiceError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The one place a top-up's ledger entries (`report::Entry`, reason
    /// `topUp`) go: the budget ledger (`SqlStore::append_ledger`,
    /// idempotent, so a recovery that executes again adds nothing), and the
    /// audit log, whose entry's `after` holds the transfer and its entries,
    /// exact in acc.
    async fn record_entries(&self, act: &str, t: &Transfer, entries: &[Entry], detail: &str) {
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

    async fn finish(
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
    async fn plan_now(
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

/// Checks a top-up request before anything is read: the key and amount
/// (one cash key, more than zero, at most `topup::MAX_TOP_UP_HOURS`), no
/// `from` nor `revertAt`, a source, an expiry in the future and within
/// `MAX_TOP_UP_UNTIL_MS`.
fn check_top_up(
    req: &TransferRequest,
    now_ms: i64,
) -> Result<(String, quota::Quantity), ServiceError> {
    let bad = |m: &str| Err(ServiceError::BadRequest(m.to_string()));
    if req.from.is_some() {
        return bad("a top-up comes from the parent or is granted: leave from out and set source");
    }
    if req.revert_at.is_some() {
        return bad("a top-up is not a loan: set until for when its unspent part is withdrawn");
    }
    if req.source.is_none() {
        return bad("a top-up needs a source: parent (the parent's budget pays) or grant (an admin grants new budget)");
    }
    let mut keys = req.amounts.iter();
    let (Some((key, amount)), None) = (keys.next(), keys.next()) else {
        return bad("a top-up names exactly one cash key in amounts, e.g. {\"cash/requests.nvidia.com/gpu\": \"50\"}");
    };
    if quota::keys::cash_target(key).is_none_or(str::is_empty) {
        return Err(ServiceError::BadRequest(format!(
            "a top-up adds to a budget: '{key}' is not a cash key (cash/<resource key>)"
        )));
    }
    topup::check_amount(*amount).map_err(top_up_error)?;
    if let Some(until) = req.until {
        if until <= now_ms {
            return bad("a top-up's until must be in the future");
        }
        if until - now_ms > MAX_TOP_UP_UNTIL_MS {
            return bad("a top-up's until is at most 366 days away");
        }
    }
    Ok((key.clone(), *amount))
}

/// A refused top-up as the API answers it: bad input 400, a budget that
/// cannot give it 409.
fn top_up_error(e: TopUpError) -> ServiceError {
    match e {
        TopUpError::NotCovered { .. } | TopUpError::TooMany { .. } => {
            ServiceError::Conflict(e.to_string())
        }
        e => ServiceError::BadRequest(e.to_string()),
    }
}

fn from_q(q: quota::Quantity) -> i128 {
    quota::budget::from_quantity(q)
}

/// A top-up's ledger entry (docs/budgets.md §6): an instant, positive
/// where budget is added, negative where it is given away or withdrawn.
fn top_up_entry(quota: &str, key: &str, amount: i128, at: i64, t: &Transfer) -> Entry {
    Entry {
        quota: quota.to_string(),
        key: key.to_string(),
        workload: String::new(),
        namespace: String::new(),
        model: None,
        qos: None,
        user: Some(t.requested_by.clone()),
        start_ms: at,
        end_ms: at,
        amount,
        reason: quota::object::budgets::Reason::TopUp,
        note: format!("transfer #{}: {}", t.id, t.reason),
    }
}

/// Whether `quota` lacks top-up mark `id` on `key` (or is gone): a
/// give that never happened needs no undoing.
async fn topup_mark_missing(service: &Service, quota: &str, key: &str, id: &str) -> bool {
    match service.get(quota).await {
        Ok(s) => topup::mark(&s.quota, key, id).is_none(),
        Err(_) => true,
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
