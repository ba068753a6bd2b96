//! The audit log in SQL (`audit_log`, migration 0004): appended to, read
//! by filter, never changed (triggers refuse UPDATE and DELETE).

use super::sql::SqlStore;
use super::StoreError;
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::Row;

/// The actions written to the audit log.
pub mod action {
    pub const QUOTA_CREATE: &str = "quota.create";
    pub const QUOTA_UPDATE: &str = "quota.update";
    pub const QUOTA_DELETE: &str = "quota.delete";
    pub const USER_CREATE: &str = "user.create";
    pub const USER_DISABLE: &str = "user.disable";
    pub const USER_ENABLE: &str = "user.enable";
    pub const USER_ADMIN: &str = "user.admin";
    pub const USER_PASSWORD: &str = "user.password";
    pub const ROLE_ADD: &str = "role.add";
    pub const ROLE_REMOVE: &str = "role.remove";
    pub const TOKEN_CREATE: &str = "token.create";
    pub const TOKEN_REVOKE: &str = "token.revoke";
    pub const TRANSFER_REQUEST: &str = "transfer.request";
    pub const TRANSFER_APPROVE: &str = "transfer.approve";
    pub const TRANSFER_REJECT: &str = "transfer.reject";
    /// By `bizrq`: nobody decided in time.
    pub const TRANSFER_EXPIRE: &str = "transfer.expire";
    /// By `bizrq`: a loan's return, started when it is due.
    pub const TRANSFER_RETURN: &str = "transfer.return";
    pub const ALERT_RULE: &str = "alert.rule";
    /// A user's email address, set by the user (/account) or an admin.
    pub const USER_EMAIL: &str = "user.email";
    /// A user's alert preferences (mute, digest per kind).
    pub const ALERT_PREFS: &str = "alert.prefs";
    /// An open alert acknowledged, or snoozed until a time.
    pub const ALERT_ACK: &str = "alert.ack";
    pub const ALERT_SNOOZE: &str = "alert.snooze";
    /// By `bizrq`: the price list file changed and took effect.
    pub const PRICES_RELOAD: &str = "prices.reload";
    /// By `bizrq`: a top-up executed (its ledger entries in `after`).
    pub const BUDGET_TOP_UP: &str = "budget.topUp";
    /// By `bizrq`: a top-up's expiry withdrew its unspent part.
    pub const BUDGET_TOP_UP_EXPIRE: &str = "budget.topUpExpire";
    /// By `bizrq`: work stopped by reclaim refunded (docs/budgets.md §4).
    pub const BUDGET_REFUND: &str = "budget.refund";
    /// By `bizrq`: batch work suspended because its budget is spent
    /// (`onExhausted: suspendBatch`), or because it ran past its declared
    /// run time.
    pub const BUDGET_SUSPEND: &str = "budget.suspend";
    /// A user linked to an identity provider's person (first sign-in, or
    /// a local account adopted).
    pub const USER_IDENTITY: &str = "user.identity";
    /// A user's Kubernetes username, set at sign-in or by an admin.
    pub const USER_KUBE_USERNAME: &str = "user.kubeUsername";
    /// By `bizrq`: the provider no longer refreshes a sign-in (the person
    /// left, or the provider ended the session): sessions ended.
    pub const USER_SIGNED_OUT: &str = "user.signedOut";
    /// A rule from a provider group to a role, added or removed on `/groups`.
    pub const GROUP_ROLE_ADD: &str = "groupRole.add";
    pub const GROUP_ROLE_REMOVE: &str = "groupRole.remove";
    /// By `bizrq`: the group roles file changed and took effect.
    pub const GROUP_ROLES_RELOAD: &str = "groupRoles.reload";

    /// Every action, for the page's filter (other pages add theirs here).
    pub const ALL: [&str; 33] = [
        QUOTA_CREATE,
        QUOTA_UPDATE,
        QUOTA_DELETE,
        USER_CREATE,
        USER_DISABLE,
        USER_ENABLE,
        USER_ADMIN,
        USER_PASSWORD,
        ROLE_ADD,
        ROLE_REMOVE,
        TOKEN_CREATE,
        TOKEN_REVOKE,
        TRANSFER_REQUEST,
        TRANSFER_APPROVE,
        TRANSFER_REJECT,
        TRANSFER_EXPIRE,
        TRANSFER_RETURN,
        ALERT_RULE,
        USER_EMAIL,
        ALERT_PREFS,
        ALERT_ACK,
        ALERT_SNOOZE,
        PRICES_RELOAD,
        BUDGET_TOP_UP,
        BUDGET_TOP_UP_EXPIRE,
        BUDGET_REFUND,
        BUDGET_SUSPEND,
        USER_IDENTITY,
        USER_KUBE_USERNAME,
        USER_SIGNED_OUT,
        GROUP_ROLE_ADD,
        GROUP_ROLE_REMOVE,
        GROUP_ROLES_RELOAD,
    ];
}

/// One entry of the audit log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Assigned by the database on append; increasing.
    pub id: i64,
    pub at_ms: i64,
    /// A username, or `admin-token`.
    pub actor: String,
    /// What was done, e.g. `quota.update` (see [`action`]).
    pub action: String,
    /// A quota name for quota and role changes, `user:NAME` for accounts.
    pub target: String,
    /// JSON of the object before and after (None: there was none).
    pub before: Option<String>,
    pub after: Option<String>,
    pub detail: String,
}

/// Which entries to read; every field narrows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub target: Option<String>,
    pub action: Option<String>,
    /// At or after (ms).
    pub from_ms: Option<i64>,
    /// Before (ms).
    pub to_ms: Option<i64>,
    /// Entries with a smaller id (paging back from the newest).
    pub before_id: Option<i64>,
    /// Only entries on these targets (what a non-admin may see); None: all.
    pub targets_in: Option<Vec<String>>,
}

/// Bind parameters per `IN (...)` chunk; far below either database's limit.
const IN_CHUNK: usize = 5_000;

/// An entry to append (its id is assigned by the database).
pub fn entry(
    at_ms: i64,
    actor: &str,
    action: &str,
    target: &str,
    before: Option<Value>,
    after: Option<Value>,
    detail: &str,
) -> AuditRecord {
    AuditRecord {
        id: 0,
        at_ms,
        actor: actor.to_string(),
        action: action.to_string(),
        target: target.to_string(),
        before: before.map(|v| v.to_string()),
        after: after.map(|v| v.to_string()),
        detail: detail.to_string(),
    }
}
fn from_row(row: &AnyRow) -> Result<AuditRecord, StoreError> {
    Ok(AuditRecord {
        id: row.try_get("id")?,
        at_ms: row.try_get("at_ms")?,
        actor: row.try_get("actor")?,
        action: row.try_get("action")?,
        target: row.try_get("target")?,
        before: row.try_get("before")?,
        after: row.try_get("after")?,
        detail: row.try_get("detail")?,
    })
}

impl SqlStore {
    /// Appends an entry (its `id` is ignored and assigned); returns the id.
    pub async fn append_audit(&self, e: &AuditRecord) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO audit_log (at_ms, actor, action, target, before, after, detail) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(e.at_ms)
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.target)
        .bind(e.before.as_deref())
        .bind(e.after.as_deref())
        .bind(&e.detail)
        .fetch_one(&self.write)
        .await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    /// Entries matching `f`, newest first, at most `limit`.
    pub async fn audit(&self, f: &AuditFilter, limit: i64) -> Result<Vec<AuditRecord>, StoreError> {
        enum Param<'a> {
            Text(&'a str),
            Int(i64),
        }
        if f.targets_in.as_ref().is_some_and(|t| t.is_empty()) {
            return Ok(Vec::new());
        }
        let mut clauses: Vec<String> = Vec::new();
        let mut params: Vec<Param> = Vec::new();
        for (col, v) in [
            ("actor =", &f.actor),
            ("target =", &f.target),
            ("action =", &f.action),
        ] {
            if let Some(v) = v {
                params.push(Param::Text(v));
                clauses.push(format!("{col} ${}", params.len()));
            }
        }
        for (cond, v) in [
            ("at_ms >=", f.from_ms),
            ("at_ms <", f.to_ms),
            ("id <", f.before_id),
        ] {
            if let Some(v) = v {
                params.push(Param::Int(v));
                clauses.push(format!("{cond} ${}", params.len()));
            }
        }
        // A long target list is split into OR-ed IN lists of bounded size.
        if let Some(targets) = &f.targets_in {
            let mut ors = Vec::new();
            for chunk in targets.chunks(IN_CHUNK) {
                let mut ps = Vec::new();
                for t in chunk {
                    params.push(Param::Text(t));
                    ps.push(format!("${}", params.len()));
                }
                ors.push(format!("target IN ({})", ps.join(", ")));
            }
            clauses.push(format!("({})", ors.join(" OR ")));
        }
        params.push(Param::Int(limit));
        let sql = format!(
            "SELECT id, at_ms, actor, action, target, before, after, detail FROM audit_log {} \
             ORDER BY id DESC LIMIT ${}",
            if clauses.is_empty() {
                String::new()
            } else {
                format!("WHERE {}", clauses.join(" AND "))
            },
            params.len()
        );
        let mut q = sqlx::query(&sql);
        for p in params {
            q = match p {
                Param::Text(t) => q.bind(t),
                Param::Int(i) => q.bind(i),
            };
        }
        let rows = q.fetch_all(&self.read).await?;
        rows.iter().map(from_row).collect()
    }
}
