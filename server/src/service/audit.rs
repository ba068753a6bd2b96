//! The audit log: what to append for each change, the page, and CSV export.
//!
//! Every quota create/update/delete through the JSON API or the portal, and
//! every change to users, roles and tokens, appends one entry with
//! [`AppState::audit`]. The change is made first; an entry that cannot be
//! written is logged at error level and the change stands (in cluster mode
//! the quota lives in the cluster, so one transaction cannot hold both).

use super::auth::Viewer;
use super::authz::Principal;
use super::PageError;
use crate::http::AppState;
use crate::store::accounts::User;
use crate::store::audit::{AuditFilter, AuditRecord};
use crate::store::transfers::Transfer;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use quota::Quota;
use serde::Deserialize;
use serde_json::{json, Value};

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

    /// Every action, for the page's filter (other pages add theirs here).
    pub const ALL: [&str; 20] = [
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
    ];
}

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
    })
}

/// One line for a transfer: `#7 nlp → cv: requests.nvidia.com/gpu 2`.
pub fn transfer_summary(t: &Transfer) -> String {
    let amounts: Vec<String> = t.amounts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let from = match &t.from_quota {
        Some(f) => f.clone(),
        None => format!("the parent of {}", t.to_quota),
    };
    format!("#{} {from} → {}: {}", t.id, t.to_quota, amounts.join(", "))
}

/// What the log keeps of a user (never the password hash).
pub fn user_json(u: &User) -> Value {
    json!({ "username": u.username, "isAdmin": u.is_admin, "disabled": u.disabled })
}

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

impl AppState {
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
        if let Err(err) = self.portal.sql.append_audit(&e).await {
            tracing::error!(error = %err, actor = %e.actor, action = %e.action, target = %e.target, "could not write an audit entry");
        }
    }
}

/// The page's and the export's filters, as typed.
#[derive(Deserialize, Default, Debug)]
pub struct AuditParams {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    action: String,
    /// `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]` (UTC) or RFC 3339.
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    /// Paging: entries older than this id.
    #[serde(default)]
    before: Option<i64>,
}

/// A time as typed in the filter (UTC unless it says otherwise).
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    let full = match s.len() {
        10 => format!("{s}T00:00:00Z"),
        16 => format!("{s}:00Z"),
        19 => format!("{s}Z"),
        _ => s.to_string(),
    };
    quota::time::parse_rfc3339(&full)
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

impl AuditParams {
    fn filter(&self) -> Result<AuditFilter, PageError> {
        let time = |what: &str, s: &str| match non_empty(s) {
            None => Ok(None),
            Some(t) => parse_time(&t).map(Some).ok_or_else(|| {
                PageError::Invalid(format!(
                    "{what} '{t}' is not a time: use YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)"
                ))
            }),
        };
        Ok(AuditFilter {
            actor: non_empty(&self.actor),
            target: non_empty(&self.target),
            action: non_empty(&self.action),
            from_ms: time("from", &self.from)?,
            to_ms: time("to", &self.to)?,
            before_id: self.before,
            targets_in: None,
        })
    }

    fn query_string(&self, before: Option<i64>) -> String {
        let mut pairs: Vec<(&str, String)> = [
            ("actor", &self.actor),
            ("target", &self.target),
            ("action", &self.action),
            ("from", &self.from),
            ("to", &self.to),
        ]
        .into_iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| (k, v.trim().to_string()))
        .collect();
        if let Some(b) = before {
            pairs.push(("before", b.to_string()));
        }
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }
}

/// What a viewer may read of the log: admins everything; others the
/// entries on quotas they can see, and on their own account.
async fn scoped(
    app: &AppState,
    p: &Principal,
    mut f: AuditFilter,
) -> Result<AuditFilter, PageError> {
    if let Some(mut targets) = super::visible_scope(app, p).await? {
        targets.push(user_target(&p.username));
        f.targets_in = Some(targets);
    }
    Ok(f)
}

/// Entries per page.
pub const PAGE_ROWS: i64 = 200;
/// Entries per CSV export at most.
pub const CSV_ROWS: i64 = 100_000;

fn pretty(json: Option<String>) -> Option<String> {
    json.map(|j| {
        serde_json::from_str::<Value>(&j)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or(j)
    })
}

/// GET /audit
pub async fn page(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(q): Query<AuditParams>,
) -> Result<Response, PageError> {
    let filter = scoped(&app, &viewer.principal, q.filter()?).await?;
    let rows = app.portal.sql.audit(&filter, PAGE_ROWS).await?;
    let older = (rows.len() as i64 == PAGE_ROWS)
        .then(|| {
            rows.last()
                .map(|r| format!("/audit?{}", q.query_string(Some(r.id))))
        })
        .flatten();
    let csv_href = format!("/audit.csv?{}", q.query_string(None));
    let rows = rows
        .into_iter()
        .map(|r| app::audit::AuditRow {
            id: r.id,
            at: quota::time::format_rfc3339(r.at_ms),
            actor: r.actor,
            action: r.action,
            target: r.target,
            before: pretty(r.before),
            after: pretty(r.after),
            detail: r.detail,
        })
        .collect();
    let query = app::audit::AuditQuery {
        actor: q.actor.clone(),
        target: q.target.clone(),
        action: q.action.clone(),
        from: q.from.clone(),
        to: q.to.clone(),
    };
    let flash = viewer.take_flash().await;
    Ok(Html(app::audit::render_audit_page(
        viewer.page(),
        rows,
        query,
        action::ALL.iter().map(|a| a.to_string()).collect(),
        csv_href,
        older,
        flash,
    ))
    .into_response())
}

/// GET /audit.csv: the same filters, every matching entry (up to
/// [`CSV_ROWS`]), newest first.
pub async fn csv(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(q): Query<AuditParams>,
) -> Result<Response, PageError> {
    let filter = scoped(&app, &viewer.principal, q.filter()?).await?;
    let rows = app.portal.sql.audit(&filter, CSV_ROWS).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"bizrq-audit.csv\"",
            ),
        ],
        to_csv(&rows),
    )
        .into_response())
}

/// One CSV field (RFC 4180): quoted when it holds a comma, quote or line
/// break, quotes doubled. A field a spreadsheet would run as a formula
/// (starting with `=`, `+`, `-`, `@`, tab or CR) is prefixed with `'`.
pub fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The entries as CSV with a header line, CRLF line ends.
pub fn to_csv(rows: &[AuditRecord]) -> String {
    let mut out = String::from("id,at,actor,action,target,before,after,detail\r\n");
    for r in rows {
        let fields = [
            r.id.to_string(),
            quota::time::format_rfc3339(r.at_ms),
            r.actor.clone(),
            r.action.clone(),
            r.target.clone(),
            r.before.clone().unwrap_or_default(),
            r.after.clone().unwrap_or_default(),
            r.detail.clone(),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_quoting() {
        assert_eq!(csv_field("nlp"), "nlp");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_field(r#"{"a":1,"b":2}"#), r#""{""a"":1,""b"":2}""#);
        assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_field("-1"), "'-1");
        assert_eq!(csv_field(""), "");
    }

    #[test]
    fn csv_has_a_header_and_one_line_per_entry() {
        let e = AuditRecord {
            id: 3,
            ..entry(
                0,
                "alice",
                action::QUOTA_UPDATE,
                "nlp",
                Some(json!({"spec": {"hard": {"pods": "1"}}})),
                None,
                "raised, \"a lot\"",
            )
        };
        let csv = to_csv(&[e]);
        let lines: Vec<&str> = csv.split("\r\n").collect();
        assert_eq!(lines[0], "id,at,actor,action,target,before,after,detail");
        assert_eq!(
            lines[1],
            r#"3,1970-01-01T00:00:00.000Z,alice,quota.update,nlp,"{""spec"":{""hard"":{""pods"":""1""}}}",,"raised, ""a lot""""#
        );
        assert_eq!(lines[2], "");
    }

    #[test]
    fn times_are_read_as_utc_in_the_forms_a_browser_sends() {
        assert_eq!(parse_time("1970-01-02"), Some(86_400_000));
        assert_eq!(parse_time("1970-01-01T01:00"), Some(3_600_000));
        assert_eq!(parse_time("1970-01-01T00:00:01"), Some(1_000));
        assert_eq!(parse_time("1970-01-01T02:00:00+01:00"), Some(3_600_000));
        assert_eq!(parse_time("yesterday"), None);
    }
}
