//! The audit log: what to append for each change, and who appends it.
//!
//! Every quota create/update/delete through the JSON API or the portal, and
//! every change to users, roles and tokens, appends one entry with
//! [`Audited::audit`]. The change is made first; an entry that cannot be
//! written is logged at error level and the change stands (in cluster mode
//! the quota lives in the cluster, so one transaction cannot hold both).
//! The page and the CSV export are the portal's (`portal::audit`).

use super::Service;
use crate::authz::Principal;
use crate::store::accounts::User;
use crate::store::sql::SqlStore;
use crate::store::transfers::Transfer;
use quota::Quota;
use serde_json::{json, Value};
use std::sync::Arc;

use crate::store::audit::entry;

/// The target of an entry about an account.
pub fn user_target(username: &str) -> String {
    format!("user:{username}")
}

/// What the log keeps of a quota: its identity and spec (status is the
/// system's, not a person's change).
pub fn quota_json(q: &Quota) -> Value {
    json!({
        "metadata": { "name": q.name(), "resourceVersion": q.metadata.resource_version },
        "spec": q.spec,
    })
}

/// The target of a transfer's entries: the quota whose owner asked for it
/// (the source, or the destination when it asks more from its parent), so
/// the requester reads the entries of its own requests.
pub fn transfer_target(t: &Transfer) -> String {
    t.from_quota.clone().unwrap_or_else(|| t.to_quota.clone())
}

/// What the log keeps of a transfer: who asked what and where it stands
/// (the plan stays on the transfer's page).
pub fn transfer_json(t: &Transfer) -> Value {
    json!({
        "id": t.id,
        "from": t.from_quota,
        "to": t.to_quota,
        "amounts": t.amounts,
        "reason": t.reason,
        "requestedBy": t.requested_by,
        "status": t.status,
        "decidedBy": t.decided_by,
        "decisionNote": t.decision_note,
        "result": t.result,
        "revertAt": t.revert_at.map(quota::time::format_rfc3339),
        "kind": t.kind,
        "topUp": t.top_up,
    })
}

/// One line for a transfer: `#7 nlp → cv: requests.nvidia.com/gpu 2`.
pub fn transfer_summary(t: &Transfer) -> String {
    let amounts: Vec<String> = t.amounts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let from = match &t.from_quota {
        Some(f) => f.clone(),
        None => format!("the parent of {}", t.to_quota),
    };
    if let Some(u) = &t.top_up {
        let from = match u.source {
            quota::object::budgets::Source::Parent => format!("from the parent of {}", t.to_quota),
            quota::object::budgets::Source::Grant => "granted".to_string(),
        };
        return format!(
            "#{} top-up of {} {from}: {}",
            t.id,
            t.to_quota,
            amounts.join(", ")
        );
    }
    format!("#{} {from} → {}: {}", t.id, t.to_quota, amounts.join(", "))
}

/// What the log keeps of a user (never the password hash).
pub fn user_json(u: &User) -> Value {
    let mut v = json!({ "username": u.username, "isAdmin": u.is_admin, "disabled": u.disabled });
    if u.is_admin {
        // Who gave the admin role: by hand, or the group mapping (which
        // takes away only what it gave).
        v["adminSource"] = json!(u.admin_source.as_str());
    }
    v
}
/// The service and the audit log together: what a person's change goes
/// through, whichever edge (JSON API, portal) it came in by.
#[derive(Clone)]
pub struct Audited {
    pub service: Arc<Service>,
    /// The audit log (always SQL).
    pub sql: Arc<SqlStore>,
}

impl Audited {
    /// Appends an audit entry for a change `actor` just made. Never fails
    /// the caller: a write error is logged.
    pub async fn audit(
        &self,
        actor: &Principal,
        action: &str,
        target: &str,
        before: Option<Value>,
        after: Option<Value>,
        detail: &str,
    ) {
        let e = entry(
            self.service.now(),
            actor.actor(),
            action,
            target,
            before,
            after,
            detail,
        );
        if let Err(err) = self.sql.append_audit(&e).await {
            tracing::error!(error = %err, actor = %e.actor, action = %e.action, target = %e.target, "could not write an audit entry");
        }
    }
}
