//! A budget's top-ups (docs/budgets.md §5): card-hours given to a quota's
//! cash key from its parent's budget or granted from outside, for a time,
//! withdrawn unspent when they expire. Requested, decided and run as
//! transfers (kind `topUp`); what moves is budget, recorded as ledger
//! entries on both sides, not hard.

use super::executor::{Executor, Halt};
use super::{CrashPoint, TransferRequest, TransferService, MAX_TOP_UP_UNTIL_MS};
use crate::alerts;
use crate::authz::SYSTEM_ACTOR;
use crate::service::audit;
use crate::service::{Service, ServiceError};
use crate::store::audit::action;
use crate::store::transfers::NewTransfer;
use crate::store::transfers::{TopUp, Transfer, TransferStatus};
use quota::budget::topup::{self, TopUpError};
use quota::object::budgets::Entry;
use quota::object::budgets::Source;

impl TransferService {
    /// A request of kind `topUp` (docs/budgets.md §5): one cash key of
    /// `to`'s hard, a positive bounded amount, a source, an optional expiry
    /// in the future. From the parent, the parent must cover it now (and
    /// again when it executes). Nothing is stored unless all of it holds.
    pub(super) async fn request_top_up(
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
}

impl Executor {
    /// A top-up (docs/budgets.md §5), crash-safe by its marks: from the
    /// parent, the parent gives first (`t<id>-from`, refused unless what it
    /// has left covers it), then the quota receives (`t<id>`); each write
    /// finds its mark on a retry and changes nothing, so a recovery runs
    /// the whole again. A quota that cannot receive (gone, the key gone)
    /// hands the amount back to the parent (`t<id>-back`) and the top-up is
    /// rejected with the reason.
    pub(super) async fn execute_top_up(
        &self,
        t: &Transfer,
        lease: &mut Option<i64>,
    ) -> Result<(), Halt> {
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
                _ => {
                    self.apply_top_up(parent, move |q| topup::give(q, &k, &from_id, amount, now))
                        .await?
                }
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
            .apply_top_up(&t.to_quota, move |q| {
                topup::receive(q, &k, &to_id, amount, now)
            })
            .await?;
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
        // A parent that is gone or refuses keeps nothing to give back to.
        self.apply_top_up(parent, move |q| topup::receive_acc(q, &k, &back, acc, now))
            .await
            .map(|_| ())
    }

    /// One step of a top-up on `quota`'s status: `Ok(Err(reason))` when
    /// the step refuses or the quota is gone (what rejects a top-up),
    /// nothing written; `Err` only when the store fails.
    async fn apply_top_up<E: std::fmt::Display>(
        &self,
        quota: &str,
        mut step: impl FnMut(&mut quota::Quota) -> Result<bool, E>,
    ) -> Result<Result<(), String>, ServiceError> {
        self.service
            .update_status(quota, false, move |q| {
                Ok(match step(q) {
                    Ok(changed) => (changed, Ok(())),
                    Err(e) => (false, Err(e.to_string())),
                })
            })
            .await
            .or_else(|e| match e {
                ServiceError::NotFound(m) => Ok(Err(m)),
                e => Err(e),
            })
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
