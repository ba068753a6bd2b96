//! The audit log's page and its CSV export: filters, paging, and what a
//! viewer may read. What is appended, and by whom: `service::audit`.

use super::auth::Viewer;
use super::PageError;
use crate::authz::Principal;
use crate::edge::AppState;
use crate::service::audit::user_target;
use crate::store::audit::action;
use crate::store::audit::{AuditFilter, AuditRecord};
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

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
    if let Some(mut targets) = crate::service::quota_ops::records_scope(&app.service, p).await? {
        targets.push(user_target(&p.username));
        f.targets_in = Some(targets);
    }
    Ok(f)
}

/// Entries per page.
pub const PAGE_ROWS: i64 = 200;
/// Entries per CSV export at most.
pub const CSV_ROWS: i64 = 100_000;

/// What an entry changed, a line per field, when it has both sides:
/// `spec.hard.requests.nvidia.com/gpu: 8 → 10`, `+ spec.max.pods: 20`,
/// `− spec.max.pods: 20`. The resourceVersion, which every write moves, is
/// left out. Empty when a side is missing or unreadable.
pub fn changed_fields(before: Option<&str>, after: Option<&str>) -> Vec<String> {
    let read = |j: Option<&str>| j.and_then(|j| serde_json::from_str::<Value>(j).ok());
    let (Some(b), Some(a)) = (read(before), read(after)) else {
        return Vec::new();
    };
    let (mut old, mut new) = (BTreeMap::new(), BTreeMap::new());
    flatten(&b, "", &mut old);
    flatten(&a, "", &mut new);
    let paths: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    paths
        .into_iter()
        .filter(|p| !p.ends_with("resourceVersion"))
        .filter_map(|p| match (old.get(p), new.get(p)) {
            (Some(o), Some(n)) if o != n && !same_quantity(o, n) => Some(format!("{p}: {o} → {n}")),
            (None, Some(n)) => Some(format!("+ {p}: {n}")),
            (Some(o), None) => Some(format!("− {p}: {o}")),
            _ => None,
        })
        .collect()
}

/// `1099511627776` and `1Ti`: one amount written two ways, not a change
/// (a form saved as it was rewrites it).
fn same_quantity(a: &str, b: &str) -> bool {
    matches!((a.parse::<quota::Quantity>(), b.parse::<quota::Quantity>()), (Ok(x), Ok(y)) if x == y)
}

/// Leaves of a JSON value by dotted path; arrays and scalars as one value
/// (strings without quotes).
fn flatten(v: &Value, at: &str, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                flatten(v, &path, out);
            }
        }
        Value::String(s) => {
            out.insert(at.to_string(), s.clone());
        }
        Value::Null => {}
        other => {
            out.insert(at.to_string(), other.to_string());
        }
    }
}

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
            at: quota::time::format_when(r.at_ms),
            actor: r.actor,
            action: r.action,
            target: r.target,
            changes: changed_fields(r.before.as_deref(), r.after.as_deref()),
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
    // Up to `CSV_ROWS` rows: a heavy request's place.
    let _place = app.portal.heavy.enter(&viewer.principal.username)?;
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

/// One CSV field (RFC 4180), formulas defused (`util::csv_field`).
use crate::util::csv_field;

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
    use crate::store::audit::entry;
    use serde_json::json;

    /// Saving the edit form as it was rewrote `1099511627776` as `1Ti`, and
    /// the audit listed that as a change of the memory hard.
    #[test]
    fn an_amount_written_another_way_is_not_a_change() {
        let before = json!({"spec": {"hard": {"requests.memory": "1099511627776", "pods": "8"}}});
        let after = json!({"spec": {"hard": {"requests.memory": "1Ti", "pods": "10"}}});
        assert_eq!(
            changed_fields(Some(&before.to_string()), Some(&after.to_string())),
            ["spec.hard.pods: 8 → 10"]
        );
    }

    #[test]
    fn csv_quotes_what_needs_quoting() {
        assert_eq!(csv_field("nlp"), "nlp");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_field(r#"{"a":1,"b":2}"#), r#""{""a"":1,""b"":2}""#);
        assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_field("-1"), "-1");
        assert_eq!(csv_field("-0.25"), "-0.25");
        assert_eq!(csv_field("-1+2"), "'-1+2");
        assert_eq!(csv_field("-"), "'-");
        assert_eq!(csv_field(""), "");
    }

    #[test]
    fn formulas_behind_whitespace_full_width_signs_and_pipes_are_defused() {
        for cell in [
            " =1+1",
            "\n=1+1",
            "\r\n=1+1",
            " \t=1+1",
            "\u{3000}=1+1",
            "\u{200B}=1+1",
            "\u{FEFF}@SUM(A1)",
            "＝1+1",
            "＋1",
            "－1",
            "＠SUM(A1)",
            "|calc!A1",
            "  |calc!A1",
            " -5",
        ] {
            let f = csv_field(cell);
            let inner = f
                .strip_prefix('"')
                .and_then(|f| f.strip_suffix('"'))
                .unwrap_or(&f);
            assert!(inner.starts_with('\''), "{cell:?} came out as {f:?}");
        }
        for text in ["a = b", "ok|fine", "x\n=y", "ＡＢＣ", "-7"] {
            assert!(
                !csv_field(text).trim_start_matches('"').starts_with('\''),
                "{text:?}"
            );
        }
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
