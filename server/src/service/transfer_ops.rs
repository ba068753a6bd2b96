//! A person's transfer requests and decisions (§6, docs/semantics.md):
//! authorised, capped, made through [`TransferService`], audited. The JSON
//! API (`api::transfers`) and the portal's pages (`portal::transfers`) both
//! go through this one set of operations.
//!
//! Who may do what (`authz::can_*_transfer`):
//! - **see** a transfer: admins, and whoever sees either end; others get
//!   404, as for a transfer that does not exist;
//! - **request**: an owner of the quota that pays — `from`, or, asking for
//!   more from the parent, the destination. The destination need not be
//!   visible to the requester (a team gives to a sibling it cannot see);
//! - **approve / reject**: an admin, or an owner of the lowest common
//!   ancestor of both ends or of any ancestor of it — so an owner of `nlp`
//!   cannot approve its own `nlp → cv` (they meet at the parent), nor its
//!   own request for more from the parent, but decides moves inside `nlp`.
//!
//! - a top-up (kind `topUp`, docs/budgets.md §5) is requested by an owner
//!   of the quota that receives it; one from the parent is decided like
//!   "more from the parent" (an owner of the parent or above), a grant
//!   only by an admin.
//!
//! Every request, approval and rejection is audited here (the expiry and a
//! loan's return by the service itself, as `bizrq`).

use super::audit::{transfer_json, transfer_summary, transfer_target, Audited};
use super::transfers::{TransferRequest, TransferService, DEFAULT_TTL_MS};
use super::{Service, ServiceError};
use crate::authz::{self, Principal, Tree};
use crate::store::audit::action;
use crate::store::transfers::{Transfer, TransferFilter, TransferStatus};
use quota::Quota;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why an operation on transfers was refused.
#[derive(Debug, thiserror::Error)]
pub enum TransferOpError {
    /// Missing, or not the caller's to see.
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    /// A per-user cap on requests (429); retry after so many seconds.
    #[error("{0}")]
    TooMany(String, u64),
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// Requests a user may have waiting for a decision at once.
pub const MAX_OPEN_REQUESTS: i64 = 20;
/// Requests a user may make in an hour.
pub const MAX_REQUESTS_PER_HOUR: i64 = 30;
const HOUR_MS: i64 = 3_600_000;

fn not_found(id: i64) -> TransferOpError {
    TransferOpError::NotFound(format!("transfer {id} not found"))
}

/// The tree as it is now: who sees and owns what, and where transfers meet.
pub struct Scope {
    pub quotas: BTreeMap<String, Quota>,
    pub tree: Tree,
}

impl Scope {
    /// From the forest the service keeps (`Service::forest`): each call
    /// reads only the quotas' stamps and what was written since the last,
    /// never the whole forest again (reading and parsing every quota for a
    /// member's transfer list is slow on a large forest).
    pub async fn load(service: &Service) -> Result<Scope, ServiceError> {
        Ok(Scope::of(service.forest().await?.quotas.clone()))
    }

    /// The scope of quotas a caller has already read.
    pub fn of(all: Vec<Quota>) -> Scope {
        let tree = Tree::from_quotas(&all);
        let quotas = all.into_iter().map(|q| (q.name().to_string(), q)).collect();
        Scope { quotas, tree }
    }

    pub fn sees(&self, p: &Principal, t: &Transfer) -> bool {
        authz::can_view_transfer(p, t.from_quota.as_deref(), &t.to_quota, &self.tree)
    }

    /// Where the ends meet: the plan's, once it is made; else the tree's.
    pub fn lca(&self, t: &Transfer) -> Option<String> {
        t.plan.as_ref().map(|p| p.lca.clone()).or_else(|| {
            quota::transfer::approvers_scope(&self.quotas, t.from_quota.as_deref(), &t.to_quota)
                .ok()
        })
    }

    /// A grant (a top-up of new budget) is an admin's to decide; anything
    /// else also an owner of where both ends meet (for a top-up from the
    /// parent: the parent) or above.
    pub fn may_decide(&self, p: &Principal, t: &Transfer) -> bool {
        if is_grant(t) {
            return p.is_admin;
        }
        authz::can_decide_transfer(p, self.lca(t).as_deref(), &self.tree)
    }
}

/// A top-up granted as new budget (only an admin approves it).
pub fn is_grant(t: &Transfer) -> bool {
    t.top_up
        .as_ref()
        .is_some_and(|u| u.source == quota::object::budgets::Source::Grant)
}

impl Scope {
    /// Only for `TransferDesk::decidable`'s words.
    fn deciders(&self, t: &Transfer) -> String {
        if is_grant(t) {
            return "an admin (a grant adds new budget)".to_string();
        }
        match self.lca(t) {
            Some(l) => format!("an admin or an owner of {l} (where both ends meet) or above"),
            None => "an admin (its quotas are gone)".to_string(),
        }
    }
}

/// The operations, for one caller's request: the transfer protocol and the
/// audit log.
pub struct TransferDesk {
    pub transfers: Arc<TransferService>,
    pub audited: Audited,
}

impl TransferDesk {
    /// The transfers `p` may see, newest first.
    /// `scope`: the tree, when the caller has it (else read for non-admins).
    pub async fn list(
        &self,
        p: &Principal,
        mut filter: TransferFilter,
        scope: Option<&Scope>,
    ) -> Result<Vec<Transfer>, TransferOpError> {
        let want = filter.limit.unwrap_or(100).clamp(1, 1000) as usize;
        if p.is_admin {
            return Ok(self.transfers.list(&filter).await?);
        }
        // Filtered after reading: read as many as one page may hold.
        filter.limit = Some(1000);
        let loaded;
        let scope = match scope {
            Some(s) => s,
            None => {
                loaded = Scope::load(&self.audited.service).await?;
                &loaded
            }
        };
        let mut out: Vec<Transfer> = self
            .transfers
            .list(&filter)
            .await?
            .into_iter()
            .filter(|t| scope.sees(p, t))
            .collect();
        out.truncate(want);
        Ok(out)
    }

    /// One transfer, if `p` may see it, and whether `p` may decide it.
    pub async fn get_one(
        &self,
        p: &Principal,
        id: i64,
    ) -> Result<(Transfer, Scope), TransferOpError> {
        let t = match self.transfers.get(id).await {
            Ok(t) => t,
            Err(ServiceError::NotFound(_)) => return Err(not_found(id)),
            Err(e) => return Err(e.into()),
        };
        let scope = Scope::load(&self.audited.service).await?;
        if !scope.sees(p, &t) {
            return Err(not_found(id));
        }
        Ok((t, scope))
    }

    pub async fn request(
        &self,
        p: &Principal,
        req: TransferRequest,
    ) -> Result<Transfer, TransferOpError> {
        let scope = Scope::load(&self.audited.service).await?;
        let payer = req.from.as_deref().unwrap_or(&req.to);
        // Both ends answer as a quota that does not exist unless the requester
        // sees them: a request can then neither probe which names exist nor
        // mail the owners of quotas the requester knows nothing of. (The payer
        // first: a caller that may not give out of it learns nothing more.)
        let unseen = |end: &str| {
            (!p.is_admin && !authz::can_view(p, end, &scope.tree))
                .then(|| TransferOpError::NotFound(format!("bizrq {end} not found")))
        };
        if let Some(e) = unseen(payer) {
            return Err(e);
        }
        // A top-up from the parent's budget is an ask anyone who sees the
        // quota may make (a member's "Ask for more budget"); the parent's
        // owners decide.
        let budget_ask = req.from.is_none()
            && req.kind == crate::store::transfers::TransferKind::TopUp
            && req.source == Some(quota::object::budgets::Source::Parent)
            && authz::can_ask_for_budget(p, &req.to, &scope.tree);
        if !budget_ask && !authz::can_request_transfer(p, req.from.as_deref(), &req.to, &scope.tree)
        {
            return Err(TransferOpError::Forbidden(match &req.from {
                Some(f) => format!("only an owner of {f} may give quota out of it"),
                None => format!(
                    "only an owner of {} may ask its parent for more quota; a member may ask for \
                     more budget (a top-up from the parent's budget)",
                    req.to
                ),
            }));
        }
        if let Some(e) = unseen(&req.to) {
            return Err(e);
        }
        // One request at a time in this process, so the caps below hold.
        let _gate = self.transfers.request_gate.lock().await;
        if !p.is_admin {
            let now = self.audited.service.now();
            let (open, recent, first) = self
                .audited
                .sql
                .requests_by(p.actor(), now - HOUR_MS)
                .await
                .map_err(ServiceError::from)?;
            if open >= MAX_OPEN_REQUESTS {
                return Err(TransferOpError::TooMany(
                    format!(
                        "you have {open} transfer requests waiting for a decision, the most allowed; \
                         wait for them to be decided or expire"
                    ),
                    3600,
                ));
            }
            if recent >= MAX_REQUESTS_PER_HOUR {
                let secs = (first.unwrap_or(now) + HOUR_MS - now).max(1000) / 1000;
                return Err(TransferOpError::TooMany(
                    format!(
                        "you made {recent} transfer requests in the last hour, the most allowed; \
                         try again in {} minutes",
                        (secs + 59) / 60
                    ),
                    secs as u64,
                ));
            }
        }
        let t = self
            .transfers
            .request(req, p.actor(), self.audited.service.now(), DEFAULT_TTL_MS)
            .await?;
        self.audited
            .audit(
                p,
                action::TRANSFER_REQUEST,
                &transfer_target(&t),
                None,
                Some(transfer_json(&t)),
                &format!("{}; {}", transfer_summary(&t), t.reason),
            )
            .await;
        Ok(t)
    }

    /// The requests waiting for `p`'s decision (ids, newest first).
    /// `scope`: the tree, when the caller has it.
    pub async fn awaiting(
        &self,
        p: &Principal,
        scope: Option<&Scope>,
    ) -> Result<Vec<i64>, TransferOpError> {
        let waiting = TransferFilter {
            statuses: vec![TransferStatus::Requested],
            limit: Some(1000),
            ..Default::default()
        };
        if p.is_admin {
            // An admin sees and decides every request: no tree to read.
            let all = self.transfers.list(&waiting).await?;
            return Ok(all.into_iter().map(|t| t.id).collect());
        }
        let loaded;
        let scope = match scope {
            Some(s) => s,
            None => {
                loaded = Scope::load(&self.audited.service).await?;
                &loaded
            }
        };
        Ok(self
            .list(p, waiting, Some(scope))
            .await?
            .into_iter()
            .filter(|t| scope.may_decide(p, t))
            .map(|t| t.id)
            .collect())
    }

    /// The check both decisions make: visible (else 404), and `p` may decide.
    pub async fn decidable(
        &self,
        p: &Principal,
        id: i64,
        verb: &str,
    ) -> Result<Transfer, TransferOpError> {
        let (t, scope) = self.get_one(p, id).await?;
        if !scope.may_decide(p, &t) {
            let who = scope.deciders(&t);
            return Err(TransferOpError::Forbidden(format!(
                "only {who} may {verb} transfer {id}"
            )));
        }
        Ok(t)
    }

    pub async fn approve(&self, p: &Principal, id: i64) -> Result<Transfer, TransferOpError> {
        let before = self.decidable(p, id, "approve").await?;
        let result = self
            .transfers
            .approve(id, p.actor(), self.audited.service.now())
            .await;
        let after = match &result {
            Ok(t) => t.clone(),
            // Refused before anything changed: nothing to log.
            Err(ServiceError::Conflict(_) | ServiceError::NotFound(_)) => return Ok(result?),
            // Approved, then the execution stopped (recovery finishes it).
            Err(_) => self.transfers.get(id).await?,
        };
        let outcome = match after.status {
            TransferStatus::Done => "executed".to_string(),
            TransferStatus::Rejected => format!(
                "refused on re-validation: {}",
                after.result.as_deref().unwrap_or("")
            ),
            s => format!(
                "{s}: {}",
                after.result.as_deref().unwrap_or("the sweep runs it")
            ),
        };
        self.audited
            .audit(
                p,
                action::TRANSFER_APPROVE,
                &transfer_target(&after),
                Some(transfer_json(&before)),
                Some(transfer_json(&after)),
                &format!("{}; {outcome}", transfer_summary(&after)),
            )
            .await;
        Ok(result?)
    }

    pub async fn reject(
        &self,
        p: &Principal,
        id: i64,
        note: &str,
    ) -> Result<Transfer, TransferOpError> {
        let before = self.decidable(p, id, "reject").await?;
        let note = note.trim();
        let after = self
            .transfers
            .reject(id, p.actor(), note, self.audited.service.now())
            .await?;
        let detail = match note {
            "" => transfer_summary(&after),
            n => format!("{}; {n}", transfer_summary(&after)),
        };
        self.audited
            .audit(
                p,
                action::TRANSFER_REJECT,
                &transfer_target(&after),
                Some(transfer_json(&before)),
                Some(transfer_json(&after)),
                &detail,
            )
            .await;
        Ok(after)
    }
}

/// Statuses from a comma-separated list, as the API and the pages take them.
pub fn parse_statuses(s: &str) -> Result<Vec<TransferStatus>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            TransferStatus::parse(s).ok_or_else(|| {
                let all: Vec<&str> = TransferStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!("'{s}' is not a transfer status: use {}", all.join(", "))
            })
        })
        .collect()
}

/// A form or query field: trimmed, or None when empty.
pub fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}
