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
//! How an approved transfer runs, and why no capacity is created or lost
//! on the way, is the executor's (`executor.rs`); a budget's top-ups,
//! which move card-hours rather than hard, are `top_ups.rs`.
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

mod executor;
mod top_ups;

use crate::alerts;
use crate::authz::SYSTEM_ACTOR;
use crate::service::audit;
use crate::service::{Service, ServiceError};
use crate::store::audit::action;
use crate::store::sql::SqlStore;
use crate::store::transfers::NewTransfer;
use crate::store::transfers::{Transfer, TransferFilter, TransferKind, TransferStatus};
use executor::Executor;
use quota::object::budgets::Source;
use quota::resources::ResourceList;
use quota::transfer;
use std::sync::Arc;

/// How long an executor owns a transfer without renewing its lease. Each
/// phase is a handful of single-object writes: far shorter.
pub const LEASE_MS: i64 = 30_000;
/// Requests expire after this by default (the caller may choose).
pub const DEFAULT_TTL_MS: i64 = 7 * 24 * 3_600_000;
/// The longest reason a transfer request may give.
pub const MAX_REASON_CHARS: usize = 2_000;
/// A top-up's expiry is at most this long after its request (366 days).
pub const MAX_TOP_UP_UNTIL_MS: i64 = 366 * 24 * 3_600_000;

/// The furthest a loan's `revertAt` may be from its request: as a top-up's
/// `until`.
pub const MAX_LOAN_MS: i64 = MAX_TOP_UP_UNTIL_MS;

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
