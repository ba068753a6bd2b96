//! Budget reports (docs/budgets.md §6, docs/budgets.md "Reports"): consumption from
//! the ledger grouped by quota, child, workload, namespace, model, QoS
//! class, user, key or reason, per day, week or month or for the whole
//! range. Shared by the JSON API (`GET /api/v1/reports`), the CSV
//! (`/reports.csv`) and the portal's `/reports` page. The arithmetic is
//! `quota::budget::report`'s; this parses and bounds the request, decides
//! what the caller may see, reads the ledger and formats the answer.
//!
//! Bounded against hostile callers: every parameter is checked (a clear
//! message, status 422), the range is at most `MAX_RANGE_DAYS`, the
//! buckets at most `MAX_BUCKETS`, a read at most `MAX_ENTRIES` ledger
//! entries and an answer at most `MAX_ROWS` rows.

use crate::authz::Principal;
use crate::service::quota_ops;
use crate::service::{Service, ServiceError};
use crate::store::sql::SqlStore;
use quota::budget::report::{self, Bucket, Dimension, Report, ReportSpec};
use quota::budget::to_quantity;
use quota::keys::cash_target;
use quota::object::budgets::Reason;
use quota::object::period::{Weekday, MS_PER_DAY};
use quota::readable;
use quota::real_usage::figures::{card_hours, GpuFigures};
use quota::real_usage::report::{by_report_group, groups_real_usage, HourRow};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The longest range a report covers.
pub const MAX_RANGE_DAYS: i64 = 3_700;
/// The most time buckets one report has.
pub const MAX_BUCKETS: i64 = 1_100;
/// The most groups of ledger rows (summed in SQL) one report reads.
pub const MAX_ENTRIES: usize = 500_000;
/// The most rows one answer holds.
pub const MAX_ROWS: usize = 20_000;
/// The longest text any parameter may be.
const MAX_PARAM: usize = 320;

/// The query string, as the API, the CSV and the page take it. All
/// optional; unknown parameters are refused.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// RFC 3339 (`2026-11-01T00:00:00Z`) or a date (`2026-11-01`, local
    /// midnight at `utcOffsetMinutes`). Default: the first day of the
    /// month `to` ends in.
    pub from: Option<String>,
    /// Exclusive end, as `from`; a date means the end of that day.
    /// Default: the end of today (whole days).
    pub to: Option<String>,
    /// quota, child, workload, namespace, model, qos, user, key, reason.
    pub by: Option<String>,
    /// none, day, week, month.
    pub bucket: Option<String>,
    /// The first day of a week bucket (monday … sunday; default monday).
    pub starts_on: Option<String>,
    pub subtree: Option<String>,
    pub key: Option<String>,
    pub utc_offset_minutes: Option<String>,
    /// Comma-separated: accrual, refund, topUp, carry (default: accrual,refund).
    pub reasons: Option<String>,
    /// json (default) or csv.
    pub format: Option<String>,
}

impl Params {
    /// Every parameter with its name in the query string (`format` last).
    pub fn named(&self) -> [(&'static str, &Option<String>); 10] {
        [
            ("from", &self.from),
            ("to", &self.to),
            ("by", &self.by),
            ("bucket", &self.bucket),
            ("startsOn", &self.starts_on),
            ("subtree", &self.subtree),
            ("key", &self.key),
            ("utcOffsetMinutes", &self.utc_offset_minutes),
            ("reasons", &self.reasons),
            ("format", &self.format),
        ]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
}

/// Why a report was not made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A parameter is wrong (422): the message says which and how.
    #[error("{0}")]
    Invalid(String),
    /// Not found, or not visible to the caller (404), or the store failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

fn invalid(s: impl Into<String>) -> ReportError {
    ReportError::Invalid(s.into())
}

fn nonempty(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// A time parameter: RFC 3339, or a date at local midnight (`end`: the
/// midnight after it).
fn parse_time(name: &str, v: &str, offset_min: i32, end: bool) -> Result<i64, ReportError> {
    if v.len() > 64 {
        return Err(invalid(format!("{name} is too long for a time")));
    }
    if let Some(ms) = quota::time::parse_rfc3339(v) {
        return Ok(ms);
    }
    let date = quota::time::parse_rfc3339(&format!("{v}T00:00:00Z")).filter(|_| v.len() == 10);
    match date {
        Some(ms) => Ok(ms - offset_min as i64 * 60_000 + if end { MS_PER_DAY } else { 0 }),
        None => Err(invalid(format!(
            "{name} '{v}' is not a date: write one as 2026-11-01, or a time as 2026-11-01T00:00:00Z"
        ))),
    }
}

pub fn parse_by(v: &str) -> Option<Dimension> {
    Some(match v {
        "quota" => Dimension::Quota,
        "child" => Dimension::Child,
        "workload" => Dimension::Workload,
        "namespace" => Dimension::Namespace,
        "model" => Dimension::Model,
        "qos" => Dimension::Qos,
        "user" => Dimension::User,
        "key" => Dimension::Key,
        "reason" => Dimension::Reason,
        "quality" => Dimension::Quality,
        _ => return None,
    })
}

pub fn by_name(d: Dimension) -> &'static str {
    match d {
        Dimension::Quota => "quota",
        Dimension::Child => "child",
        Dimension::Workload => "workload",
        Dimension::Namespace => "namespace",
        Dimension::Model => "model",
        Dimension::Qos => "qos",
        Dimension::User => "user",
        Dimension::Key => "key",
        Dimension::Reason => "reason",
        Dimension::Quality => "quality",
    }
}

pub fn bucket_name(b: Bucket) -> &'static str {
    match b {
        Bucket::None => "none",
        Bucket::Day => "day",
        Bucket::Week { .. } => "week",
        Bucket::Month => "month",
    }
}

fn reason_name(r: Reason) -> &'static str {
    match r {
        Reason::Accrual => "accrual",
        Reason::Refund => "refund",
        Reason::TopUp => "topUp",
        Reason::Carry => "carry",
        Reason::Use => "use",
    }
}

fn weekday(v: &str) -> Option<Weekday> {
    serde_json::from_value(Value::String(v.to_ascii_lowercase())).ok()
}

/// The report `p` asks for, checked; `now_ms` is the default end.
pub fn parse(p: &Params, now_ms: i64) -> Result<(ReportSpec, Format), ReportError> {
    for (name, v) in p.named() {
        if v.as_ref().is_some_and(|s| s.len() > MAX_PARAM) {
            return Err(invalid(format!(
                "{name} is longer than {MAX_PARAM} characters"
            )));
        }
    }
    let offset = match nonempty(&p.utc_offset_minutes) {
        None => 0,
        Some(v) => v
            .parse::<i32>()
            .ok()
            .filter(|m| (-720..=840).contains(m))
            .ok_or_else(|| {
                invalid(format!(
                    "the UTC offset '{v}' must be a whole number of minutes from -720 to 840 (480 for UTC+8, 0 for UTC)"
                ))
            })?,
    };
    let days = quota::budget::ledger_rollup::Grid::days(offset);
    let to = match nonempty(&p.to) {
        None => days.cell_start(now_ms).saturating_add(MS_PER_DAY),
        Some(v) => parse_time("to", v, offset, true)?,
    };
    let from = match nonempty(&p.from) {
        None => month_start(to.saturating_sub(1), offset),
        Some(v) => parse_time("from", v, offset, false)?,
    };
    if to <= from {
        return Err(invalid(format!(
            "the report must end after it starts: it ends {} and starts {}",
            quota::time::format_when(to),
            quota::time::format_when(from)
        )));
    }
    if to - from > MAX_RANGE_DAYS * MS_PER_DAY {
        return Err(invalid(format!(
            "the range is longer than {MAX_RANGE_DAYS} days: report on a shorter one"
        )));
    }
    let subtree = nonempty(&p.subtree).map(str::to_string);
    if let Some(s) = &subtree {
        if s.len() > 253 {
            return Err(invalid("subtree is longer than a quota name (253)"));
        }
    }
    // By child unless asked otherwise: `make` picks the subtree (the
    // viewer's top quota) and falls back to workloads under a leaf.
    let by = match nonempty(&p.by) {
        None => Dimension::Child,
        Some(v) => parse_by(v).ok_or_else(|| {
            invalid(format!(
                "by '{v}' is not one of quota, child, workload, namespace, model, qos, user, key, reason"
            ))
        })?,
    };
    let starts_on = match nonempty(&p.starts_on) {
        None => Weekday::Monday,
        Some(v) => weekday(v).ok_or_else(|| {
            invalid(format!(
                "startsOn '{v}' is not a day of the week (monday … sunday)"
            ))
        })?,
    };
    let (bucket, width) = match nonempty(&p.bucket).unwrap_or("none") {
        "none" => (Bucket::None, i64::MAX),
        "day" => (Bucket::Day, MS_PER_DAY),
        "week" => (Bucket::Week { starts_on }, 7 * MS_PER_DAY),
        "month" => (Bucket::Month, 28 * MS_PER_DAY),
        v => {
            return Err(invalid(format!(
                "bucket '{v}' is not one of none, day, week, month"
            )))
        }
    };
    if width != i64::MAX && (to - from) / width + 2 > MAX_BUCKETS {
        return Err(invalid(format!(
            "{} buckets of a {} over this range are more than {MAX_BUCKETS}: use a longer bucket or a shorter range",
            (to - from) / width + 1,
            bucket_name(bucket)
        )));
    }
    let key = match nonempty(&p.key) {
        None => None,
        Some(k) if cash_target(k).is_some() => Some(k.to_string()),
        Some(k) => {
            return Err(invalid(format!(
                "key '{k}' is not a cash key (cash/requests.nvidia.com/gpu, cash/requests.cpu, …)"
            )))
        }
    };
    let reasons = match nonempty(&p.reasons) {
        None => vec![Reason::Accrual, Reason::Refund, Reason::Use],
        Some(v) => {
            let mut out = Vec::new();
            for r in v.split(',').map(str::trim) {
                let reason = match r {
                    "accrual" => Reason::Accrual,
                    "refund" => Reason::Refund,
                    "topUp" => Reason::TopUp,
                    "carry" => Reason::Carry,
                    "use" => Reason::Use,
                    _ => {
                        return Err(invalid(format!(
                            "reasons: '{r}' is not one of accrual, refund, use, topUp, carry"
                        )))
                    }
                };
                if !out.contains(&reason) {
                    out.push(reason);
                }
            }
            out
        }
    };
    let format = match nonempty(&p.format).unwrap_or("json") {
        "json" => Format::Json,
        "csv" => Format::Csv,
        v => return Err(invalid(format!("format '{v}' is not json or csv"))),
    };
    Ok((
        ReportSpec {
            from_ms: from,
            to_ms: to,
            by,
            bucket,
            utc_offset_minutes: offset,
            subtree,
            key,
            reasons,
        },
        format,
    ))
}

/// Local midnight at `offset` minutes of the first day of the month
/// `ms` falls in.
fn month_start(ms: i64, offset: i32) -> i64 {
    let shift = offset as i64 * 60_000;
    let local = quota::time::format_rfc3339(ms.saturating_add(shift));
    let first = format!("{}-01T00:00:00Z", &local[..7]);
    quota::time::parse_rfc3339(&first)
        .map(|m| m - shift)
        .unwrap_or(ms)
}

/// The longest query string accepted.
pub const MAX_QUERY: usize = 4096;

/// The parameters of a query string, or 422 naming what is wrong in
/// words: an option a report does not have, or one given twice, is said
/// so before the parser (whose messages name its own fields) reads them.
pub fn params_of(raw: Option<&str>) -> Result<Params, ReportError> {
    const TAKES: &str = "a report is asked for by its dates (from, to), grouping (by), \
         buckets (bucket, startsOn), subtree, budget (key), UTC offset, reasons and format";
    let raw = raw.unwrap_or("");
    if raw.len() > MAX_QUERY {
        return Err(ReportError::Invalid(format!(
            "the query string is longer than {MAX_QUERY} characters"
        )));
    }
    let known = Params::default().named().map(|(name, _)| name);
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw)
        .map_err(|_| ReportError::Invalid(format!("the address cannot be read: {TAKES}")))?;
    let mut seen = BTreeSet::new();
    for (name, _) in &pairs {
        let shown: String = name.chars().take(40).collect();
        if !known.contains(&name.as_str()) {
            return Err(invalid(format!(
                "a report has no option '{shown}': {TAKES}"
            )));
        }
        if !seen.insert(name.as_str()) {
            return Err(invalid(format!("'{shown}' is given twice: give it once")));
        }
    }
    serde_urlencoded::from_str(raw)
        .map_err(|_| ReportError::Invalid(format!("the address cannot be read: {TAKES}")))
}

/// A report made: the spec, its rows and what it read.
#[derive(Clone, Debug)]
pub struct Made {
    pub spec: ReportSpec,
    pub report: Report,
    /// Ledger entries read.
    pub entries: usize,
    /// Of them, how many cross an edge of the range (shared by time).
    pub straddling: usize,
    /// The unit of the amounts: the key's (`card-hours`), or
    /// `weighted resource-hours` when keys of several units are mixed.
    pub unit: &'static str,
    /// What was chosen or changed for the reader, in words: the subtree
    /// picked, a grouping that fits a leaf, dates moved to what the
    /// ledger keeps, where the ledger starts.
    pub notes: Vec<String>,
    /// Where real usage is read (docs/real-usage.md) and the grouping is
    /// one it knows: GPU figures by (bucket start, group), the report's
    /// efficiency columns.
    pub efficiency: Option<BTreeMap<(i64, String), GpuFigures>>,
}

/// Reads what the report `spec` asks for, over what `p` may see: a
/// subtree the caller may not see is not found; without a subtree a
/// member's report covers the quotas under their roles, an admin's the
/// whole ledger (quotas since deleted included).
pub async fn read(
    service: &Service,
    sql: &SqlStore,
    p: &Principal,
    mut spec: ReportSpec,
) -> Result<Read, ReportError> {
    let visible = quota_ops::visible_quotas(service, p).await?;
    let parents: BTreeMap<String, String> = visible
        .iter()
        .map(|q| (q.name().to_string(), q.spec.parent.clone()))
        .collect();
    let mut notes = Vec::new();
    if spec.by == Dimension::Child {
        if spec.subtree.is_none() {
            match top_quota(&parents) {
                Some(top) => spec.subtree = Some(top),
                None => spec.by = Dimension::Quota,
            }
        }
        if let Some(root) = &spec.subtree {
            let has_children = parents.values().any(|parent| parent == root);
            if parents.contains_key(root) && !has_children {
                spec.by = Dimension::Workload;
                notes.push(format!(
                    "{root} has no child quotas, so its spending is shown by workload."
                ));
            }
        }
    }
    let (stored, first) = sql.ledger_extent().await.map_err(ServiceError::from)?;
    if let Some(snapped) = quota::budget::ledger_rollup::snap(&spec, &stored) {
        let shown = |a: i64, b: i64| {
            format!(
                "{} – {}",
                quota::time::format_when(a),
                quota::time::format_when(b)
            )
        };
        notes.push(format!(
            "Spending this old is kept per whole hour or day, so the range is {} rather than {}{}.",
            shown(snapped.from_ms, snapped.to_ms),
            shown(spec.from_ms, spec.to_ms),
            if snapped.utc_offset_minutes != spec.utc_offset_minutes {
                format!(
                    ", and days are counted from midnight at UTC{:+03}:00",
                    snapped.utc_offset_minutes / 60
                )
            } else {
                String::new()
            }
        ));
        spec = snapped;
    }
    match first {
        Some(f) if f > spec.from_ms => notes.push(format!(
            "The ledger starts at {}: nothing before that was recorded.",
            quota::time::format_when(f)
        )),
        None => notes.push("The ledger holds no spending yet.".to_string()),
        _ => {}
    }
    let names: Option<Vec<String>> = match &spec.subtree {
        Some(root) => {
            if !parents.contains_key(root) {
                return Err(quota_ops::not_found(root).into());
            }
            Some(subtree_of(root, &parents))
        }
        None if p.is_admin => None,
        None => Some(parents.keys().cloned().collect()),
    };
    let working = service.working(service.now());
    // Standalone, what a budget spent since its quota's last write is in
    // no ledger row yet, though the budgets count it (a working copy
    // accrued to now): the report adds it as that write will record it.
    // The budgeted quotas in scope are read in the ledger's snapshot, so
    // what each had written is in the rows and the rest is not, however
    // busy the writes. A quota last written at or after the range's end
    // has no unwritten spending in it and is not read.
    let budgeted: Vec<String> = match working.accrues() {
        true => budgeted_in(&visible, names.as_deref(), &spec),
        false => Vec::new(),
    };
    let (agg, copies) = match sql
        .ledger_aggregate_with(&spec, names.as_deref(), MAX_ENTRIES, &budgeted)
        .await
        .map_err(ServiceError::from)?
    {
        Ok(a) => a,
        Err(refused) => return Err(invalid(refused.to_string())),
    };
    let unwritten = working.accrues().then(|| {
        let copies = copies.into_iter().map(|s| s.quota).collect();
        (working, copies)
    });
    let real_usage = real_usage_of(sql, &spec, names.as_deref(), &mut notes).await?;
    Ok(Read {
        spec,
        agg,
        parents,
        notes,
        unwritten,
        real_usage,
    })
}

/// The hourly real usage a report shows beside its amounts: None where
/// real usage was never read, for a grouping it does not know (model,
/// QoS class, key, reason), or past `MAX_ENTRIES` rows (with a note).
async fn real_usage_of(
    sql: &SqlStore,
    spec: &ReportSpec,
    names: Option<&[String]>,
    notes: &mut Vec<String>,
) -> Result<Option<Vec<HourRow>>, ReportError> {
    if !groups_real_usage(spec.by) {
        return Ok(None);
    }
    let state = sql.real_usage_state().await.map_err(ServiceError::from)?;
    if state.known_to_ms.is_none() && state.down_since_ms.is_none() {
        return Ok(None);
    }
    let rows = sql
        .real_usage_hours(names, spec.from_ms, spec.to_ms, MAX_ENTRIES)
        .await
        .map_err(ServiceError::from)?;
    if rows.is_none() {
        notes.push(format!(
            "Real usage is left out: the range holds more than {MAX_ENTRIES} hourly rows of it; \
             choose a shorter range or a subtree."
        ));
    }
    Ok(rows)
}

/// Of `visible`, the quotas in the report's scope (`names`; None: all)
/// with a budget it may count (a cash key, the report's if it names one)
/// and last written before the range ends.
fn budgeted_in(
    visible: &[quota::Quota],
    names: Option<&[String]>,
    spec: &ReportSpec,
) -> Vec<String> {
    let wanted: Option<BTreeSet<&str>> = names.map(|n| n.iter().map(String::as_str).collect());
    visible
        .iter()
        .filter(|q| {
            wanted.as_ref().is_none_or(|w| w.contains(q.name()))
                && q.spec.hard.keys().any(|k| {
                    cash_target(k).is_some() && spec.key.as_ref().is_none_or(|want| want == k)
                })
                && written_before(q, spec.to_ms)
        })
        .map(|q| q.name().to_string())
        .collect()
}

/// Whether `q` was last written before `to_ms` (or has never been): only
/// then can it have spent in a range ending at `to_ms` what no ledger row
/// holds yet.
fn written_before(q: &quota::Quota, to_ms: i64) -> bool {
    q.status
        .last_reconcile_time
        .as_deref()
        .and_then(quota::time::parse_rfc3339)
        .is_none_or(|t| t < to_ms)
}

/// What `read` read for a report: the spec as snapped, the ledger's
/// aggregated entries and the visible tree. `make` turns it into the
/// report, CPU work in the entries read (up to `MAX_ENTRIES`) that a heavy
/// request does on the render threads.
pub struct Read {
    spec: ReportSpec,
    agg: crate::store::ledger::Aggregated,
    parents: BTreeMap<String, String>,
    notes: Vec<String>,
    /// Standalone: the copies of the budgeted quotas in scope, whose
    /// spending since their last write `make` adds (`Working::unwritten`).
    unwritten: Option<(crate::service::working::Working, Vec<quota::Quota>)>,
    /// Real usage's hourly rows in scope (`real_usage_of`).
    real_usage: Option<Vec<HourRow>>,
}

/// Reads and makes the report `spec` asks for (`read`, then `Read::make`).
pub async fn make(
    service: &Service,
    sql: &SqlStore,
    p: &Principal,
    spec: ReportSpec,
) -> Result<Made, ReportError> {
    read(service, sql, p, spec).await?.make()
}

impl Read {
    /// The report, grouped and bucketed, with its unit.
    pub fn make(self) -> Result<Made, ReportError> {
        let Read {
            spec,
            mut agg,
            parents,
            notes,
            unwritten,
            real_usage,
        } = self;
        if let Some((working, copies)) = unwritten {
            for q in copies.iter().filter(|q| written_before(q, spec.to_ms)) {
                // As the ledger's read keeps rows: those starting in the
                // range, and those starting before it that reach into it.
                // They are no ledger rows yet: `rows` does not count them.
                agg.entries
                    .extend(working.unwritten(q).into_iter().filter(|e| {
                        e.start_ms < spec.to_ms
                            && (e.start_ms >= spec.from_ms || e.end_ms > spec.from_ms)
                    }));
            }
        }
        let efficiency = real_usage
            .as_deref()
            .and_then(|rows| by_report_group(rows, &spec, &parents));
        finish(spec, agg, &parents, notes, efficiency)
    }
}

fn finish(
    spec: ReportSpec,
    agg: crate::store::ledger::Aggregated,
    parents: &BTreeMap<String, String>,
    notes: Vec<String>,
    efficiency: Option<BTreeMap<(i64, String), GpuFigures>>,
) -> Result<Made, ReportError> {
    let report =
        report::report(&agg.entries, &spec, parents).map_err(|e| invalid(e.to_string()))?;
    if report.rows.len() > MAX_ROWS {
        return Err(invalid(format!(
            "the report has more than {MAX_ROWS} rows: group by something coarser, use longer buckets or a shorter range"
        )));
    }
    let units: BTreeSet<&'static str> = agg
        .entries
        .iter()
        .map(|e| quota::keys::cash_unit(&e.key))
        .chain(spec.key.as_deref().map(quota::keys::cash_unit))
        .collect();
    let unit = match units.len() {
        1 => units.into_iter().next().unwrap_or("resource-hours"),
        0 => "card-hours",
        _ => "weighted resource-hours",
    };
    Ok(Made {
        spec,
        report,
        entries: agg.rows as usize,
        straddling: agg.straddling as usize,
        unit,
        notes,
        efficiency,
    })
}

/// The quota a viewer sees highest in the tree: of the visible quotas
/// whose parent they do not see, the one over the most quotas (then by
/// name). `None` when they see none.
fn top_quota(parents: &BTreeMap<String, String>) -> Option<String> {
    parents
        .iter()
        .filter(|(_, parent)| !parents.contains_key(parent.as_str()))
        .map(|(q, _)| (subtree_of(q, parents).len(), q))
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)))
        .map(|(_, q)| q.clone())
}

/// `root` and every quota under it in `parents`.
fn subtree_of(root: &str, parents: &BTreeMap<String, String>) -> Vec<String> {
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (q, parent) in parents {
        children
            .entry(parent.as_str())
            .or_default()
            .push(q.as_str());
    }
    let mut out = vec![root.to_string()];
    let mut i = 0;
    while i < out.len() && out.len() <= parents.len() {
        if let Some(kids) = children.get(out[i].as_str()) {
            out.extend(kids.iter().map(|k| k.to_string()));
        }
        i += 1;
    }
    out
}

/// Exact resource-hours of an acc amount (rounded up to the nano-unit).
pub fn hours(acc: i128) -> String {
    readable::exact(to_quantity(acc))
}

/// Rounded, with thousands separated: `1,234.5`.
pub fn hours_readable(acc: i128) -> String {
    readable::grouped(to_quantity(acc))
}

/// The bucket's label: its start as a local date (`2026-11-01`), or the
/// range for one bucket.
pub fn bucket_label(spec: &ReportSpec, start_ms: i64) -> String {
    let local = start_ms + spec.utc_offset_minutes as i64 * 60_000;
    let date = quota::time::format_rfc3339(local);
    match spec.bucket {
        Bucket::None => format!(
            "{} – {}",
            quota::time::format_when(spec.from_ms),
            quota::time::format_when(spec.to_ms)
        ),
        Bucket::Month => date.chars().take(7).collect(),
        _ => date.chars().take(10).collect(),
    }
}

/// The JSON answer.
pub fn to_json(m: &Made) -> Value {
    let s = &m.spec;
    json!({
        "from": quota::time::format_rfc3339(s.from_ms),
        "to": quota::time::format_rfc3339(s.to_ms),
        "by": by_name(s.by),
        "bucket": bucket_name(s.bucket),
        "utcOffsetMinutes": s.utc_offset_minutes,
        "subtree": s.subtree,
        "key": s.key,
        "reasons": s.reasons.iter().map(|r| reason_name(*r)).collect::<Vec<_>>(),
        "unit": m.unit,
        "total": m.report.total.to_string(),
        "totalHours": hours(m.report.total),
        "entries": m.entries,
        "straddling": m.straddling,
        "notes": m.notes,
        "realUsage": m.efficiency.is_some(),
        "rows": m.report.rows.iter().map(|r| {
            let mut row = json!({
                "bucket": bucket_label(s, r.bucket_start_ms),
                "bucketStart": quota::time::format_rfc3339(r.bucket_start_ms),
                "group": r.group,
                "amount": r.amount.to_string(),
                "hours": hours(r.amount),
            });
            if let Some(f) = efficiency_of(m, r) {
                row["gpuHoursAllocated"] = json!(readable::exact(card_hours(f.allocated)));
                row["gpuHoursBusy"] = json!(readable::exact(card_hours(f.busy)));
                row["idleCardHours"] = json!(readable::exact(card_hours(f.idle)));
                row["efficiencyPermille"] = json!(f.efficiency_permille());
            }
            row
        }).collect::<Vec<_>>(),
    })
}

/// A report row's GPU figures, where the report shows real usage (a
/// group that held no GPU reads as zeros).
pub fn efficiency_of(m: &Made, r: &report::Row) -> Option<GpuFigures> {
    let e = m.efficiency.as_ref()?;
    Some(
        e.get(&(r.bucket_start_ms, r.group.clone()))
            .copied()
            .unwrap_or_default(),
    )
}

/// The CSV answer: one line per row, then the total. Amounts in the
/// report's unit as exact decimals (card-hours), then the same amount as
/// the ledger's exact integer (acc, 10^-18 of a unit) for reconciling.
///
/// Where the report shows real usage (docs/real-usage.md), four columns
/// follow: GPU-hours allocated and busy, efficiency in percent (empty
/// when nothing was measured) and idle card-hours, exact.
pub fn to_csv(m: &Made) -> String {
    let with_usage = m.efficiency.is_some();
    let line = |f: &[&str]| {
        let v: Vec<String> = f.iter().map(|x| crate::util::csv_field(x)).collect();
        v.join(",") + "\r\n"
    };
    let usage_cols = |f: Option<GpuFigures>| -> Vec<String> {
        match (with_usage, f) {
            (false, _) => Vec::new(),
            (true, None) => vec![String::new(); 4],
            (true, Some(f)) => vec![
                readable::exact(card_hours(f.allocated)),
                readable::exact(card_hours(f.busy)),
                f.efficiency_permille()
                    .map(|p| format!("{}.{}", p / 10, p % 10))
                    .unwrap_or_default(),
                readable::exact(card_hours(f.idle)),
            ],
        }
    };
    let unit_col = format!("amount_{}", m.unit.replace(' ', "_"));
    let mut header = vec![
        "bucket",
        "bucket_start",
        by_name(m.spec.by),
        unit_col.as_str(),
        "amount_exact_acc",
    ];
    if with_usage {
        header.extend([
            "gpu_hours_allocated",
            "gpu_hours_busy",
            "efficiency_percent",
            "idle_card_hours",
        ]);
    }
    let mut out = line(&header);
    let mut total_usage = GpuFigures::default();
    for r in &m.report.rows {
        let f = efficiency_of(m, r);
        if let Some(f) = &f {
            total_usage.add(f);
        }
        let mut fields = vec![
            bucket_label(&m.spec, r.bucket_start_ms),
            quota::time::format_rfc3339(r.bucket_start_ms),
            r.group.clone(),
            hours(r.amount),
            r.amount.to_string(),
        ];
        fields.extend(usage_cols(f));
        out.push_str(&line(
            &fields.iter().map(String::as_str).collect::<Vec<_>>(),
        ));
    }
    let mut fields = vec![
        "total".to_string(),
        String::new(),
        String::new(),
        hours(m.report.total),
        m.report.total.to_string(),
    ];
    fields.extend(usage_cols(Some(total_usage)));
    out.push_str(&line(
        &fields.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CASH: &str = "cash/requests.nvidia.com/gpu";

    /// A quota with a monthly budget of `cash` card-hours; with `run_from`,
    /// 10 cards running since then, written then (nothing accrued since).
    fn budgeted(name: &str, parent: &str, cash: i64, run_from: Option<i64>) -> quota::Quota {
        use quota::{Quantity, Quota};
        let mut q = Quota::default();
        q.metadata.name = name.into();
        q.spec.parent = parent.into();
        q.spec.hard = [
            (
                "requests.nvidia.com/gpu".to_string(),
                Quantity::from_units(16),
            ),
            (CASH.to_string(), Quantity::from_units(cash)),
        ]
        .into();
        let monthly = json!({"period": {"kind": "monthly", "anchorDay": 1}, "forecastDays": 0});
        q.spec
            .budgets
            .insert(CASH.into(), serde_json::from_value(monthly).unwrap());
        if let Some(t0) = run_from {
            let since = quota::time::format_rfc3339(t0);
            let c = quota::Charge {
                pod_sets: vec![quota::workload::PodSet {
                    name: "main".into(),
                    count: 10,
                    per_pod: [(
                        "requests.nvidia.com/gpu".to_string(),
                        Quantity::from_units(1),
                    )]
                    .into(),
                    qos: None,
                }],
                hpa: None,
                since: since.clone(),
                uid: "u".into(),
                admitted: None,
            };
            quota::admission::charge(&mut q, "batch/Job/ml/a", c).unwrap();
            q.status.last_reconcile_time = Some(since);
        }
        q
    }

    /// Where real usage is read, each row of a report grouped by what real
    /// usage knows carries its group's GPU-hours allocated and busy,
    /// efficiency and idle card-hours, in the JSON and as four CSV
    /// columns; a group that held no GPU reads as zeros, a report without
    /// real usage keeps its five columns.
    #[test]
    fn a_report_with_real_usage_has_efficiency_columns() {
        const H: i64 = 3_600_000;
        let spec = ReportSpec {
            from_ms: 0,
            to_ms: 24 * H,
            by: Dimension::User,
            bucket: Bucket::None,
            utc_offset_minutes: 0,
            subtree: None,
            key: None,
            reasons: vec![Reason::Accrual],
        };
        let row = |group: &str, hours: i128| report::Row {
            bucket_start_ms: 0,
            group: group.into(),
            amount: hours * quota::budget::PRICE_ONE * quota::quantity::NANO * H as i128,
        };
        let mut m = Made {
            spec: spec.clone(),
            report: Report {
                rows: vec![row("alice", 8), row("bob", 2)],
                total: row("", 10).amount,
            },
            entries: 2,
            straddling: 0,
            unit: "card-hours",
            notes: Vec::new(),
            efficiency: None,
        };
        let plain = to_csv(&m);
        assert!(
            plain.starts_with("bucket,bucket_start,user,amount_card-hours,amount_exact_acc\r\n"),
            "{plain}"
        );
        let rows = [HourRow {
            quota: "nlp".into(),
            hour_ms: 3 * H,
            workload: "batch/Job/ml/a".into(),
            namespace: "ml".into(),
            user: "alice".into(),
            gpu: GpuFigures {
                allocated: 8 * H,
                measured: 8 * H,
                busy: 2 * H,
                idle: 4 * H,
            },
        }];
        m.efficiency = by_report_group(&rows, &spec, &BTreeMap::new());
        let csv = to_csv(&m);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "bucket,bucket_start,user,amount_card-hours,amount_exact_acc,gpu_hours_allocated,gpu_hours_busy,efficiency_percent,idle_card_hours"
        );
        assert!(
            lines[1].contains(",alice,8,") && lines[1].ends_with(",8,2,25.0,4"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains(",bob,2,") && lines[2].ends_with(",0,0,,0"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("total,") && lines[3].ends_with(",8,2,25.0,4"),
            "{}",
            lines[3]
        );
        let j = to_json(&m);
        assert_eq!(j["realUsage"], true);
        assert_eq!(j["rows"][0]["gpuHoursBusy"], "2");
        assert_eq!(j["rows"][0]["efficiencyPermille"], 250);
        assert_eq!(
            j["rows"][1]["efficiencyPermille"],
            Value::Null,
            "nothing measured"
        );
    }

    /// A report reads the budgeted quotas whose unwritten spending it adds
    /// on the portal's store, in the ledger read's snapshot, never on the
    /// service's own store, whose connections admissions wait for: two
    /// databases tell which was read (the service's own holds nothing).
    /// team runs 10 cards from t0, not written since: five hours on, its
    /// report is the 50 card-hours its budget spent, with no word of
    /// budgets written while it was read.
    #[tokio::test]
    async fn a_report_reads_the_budgets_with_the_ledger_on_the_portals_store() {
        use crate::store::QuotaStore;
        let (own, view) = (
            crate::store::testdb::sqlite().await,
            crate::store::testdb::sqlite().await,
        );
        let t0 = quota::time::parse_rfc3339("2026-11-26T04:00:00Z").unwrap();
        view.store
            .create(&budgeted("root", "", 1200, None))
            .await
            .unwrap();
        view.store
            .create(&budgeted("team", "root", 1000, Some(t0)))
            .await
            .unwrap();
        let portal = std::sync::Arc::new(view.store.clone());
        let service = Service::new(
            std::sync::Arc::new(own.store.clone()),
            quota::KeyConfig::default(),
            quota::cash::QosMultipliers::default(),
            Default::default(),
        )
        .with_bulk_store(portal.clone())
        .with_view_store(portal)
        .with_clock(std::sync::Arc::new(move || t0 + 5 * 3_600_000));
        let (spec, _) = parse(
            &params(&[
                ("from", "2026-11-26"),
                ("to", "2026-11-27"),
                ("subtree", "root"),
            ]),
            t0 + 5 * 3_600_000,
        )
        .unwrap();
        let made = make(&service, &view.store, &Principal::admin_token(), spec)
            .await
            .unwrap();
        const CARD_HOUR: i128 = 3_600_000_000_000_000_000_000;
        assert_eq!(made.report.total, 50 * CARD_HOUR, "{made:?}");
        assert_eq!(made.entries, 0, "no ledger row was read: {made:?}");
        assert!(
            made.notes.iter().all(|n| !n.contains("being written")),
            "{:?}",
            made.notes
        );
    }

    fn params(pairs: &[(&str, &str)]) -> Params {
        let q: String = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        serde_urlencoded::from_str(&q).unwrap()
    }

    const NOW: i64 = 1_795_000_000_000;

    #[test]
    fn defaults_are_this_month_in_whole_utc_days_by_child() {
        // NOW is 2026-11-18T11:06:40Z.
        let (s, f) = parse(&Params::default(), NOW).unwrap();
        assert_eq!(
            quota::time::format_rfc3339(s.from_ms),
            "2026-11-01T00:00:00.000Z"
        );
        assert_eq!(
            quota::time::format_rfc3339(s.to_ms),
            "2026-11-19T00:00:00.000Z"
        );
        assert_eq!(
            (s.by, s.bucket, f, s.subtree),
            (Dimension::Child, Bucket::None, Format::Json, None)
        );
        assert_eq!(
            s.reasons,
            vec![Reason::Accrual, Reason::Refund, Reason::Use]
        );
        // A month at an offset starts at that offset's midnight.
        let (s, _) = parse(&params(&[("utcOffsetMinutes", "480")]), NOW).unwrap();
        assert_eq!(
            quota::time::format_rfc3339(s.from_ms),
            "2026-10-31T16:00:00.000Z"
        );
        // Only an end: its month.
        let (s, _) = parse(&params(&[("to", "2026-10-31")]), NOW).unwrap();
        assert_eq!(
            quota::time::format_rfc3339(s.from_ms),
            "2026-10-01T00:00:00.000Z"
        );
    }

    #[test]
    fn the_top_quota_is_the_highest_and_widest_visible() {
        let parents: BTreeMap<String, String> =
            [("b", "a"), ("c", "b"), ("d", "b"), ("x", "elsewhere")]
                .into_iter()
                .map(|(q, p)| (q.to_string(), p.to_string()))
                .collect();
        assert_eq!(top_quota(&parents).as_deref(), Some("b"));
        assert_eq!(top_quota(&BTreeMap::new()), None);
    }

    #[test]
    fn dates_are_local_midnights_and_to_is_inclusive() {
        let (s, _) = parse(
            &params(&[
                ("from", "2026-11-01"),
                ("to", "2026-11-30"),
                ("utcOffsetMinutes", "480"),
            ]),
            NOW,
        )
        .unwrap();
        assert_eq!(
            quota::time::format_rfc3339(s.from_ms),
            "2026-10-31T16:00:00.000Z"
        );
        assert_eq!(
            quota::time::format_rfc3339(s.to_ms),
            "2026-11-30T16:00:00.000Z"
        );
    }

    #[test]
    fn hostile_parameters_are_refused_with_what_to_do() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("from", "yesterday")], "is not a date"),
            (
                &[("from", "2026-11-02"), ("to", "2026-11-01")],
                "must end after it starts",
            ),
            (
                &[("from", "1900-01-01"), ("to", "2026-01-01")],
                "longer than 3700 days",
            ),
            (&[("by", "colour")], "is not one of quota"),
            (&[("bucket", "hour")], "is not one of none"),
            (
                &[
                    ("bucket", "day"),
                    ("from", "2020-01-01"),
                    ("to", "2026-01-01"),
                ],
                "more than 1100",
            ),
            (&[("utcOffsetMinutes", "900")], "UTC offset '900'"),
            (&[("utcOffsetMinutes", "1.5")], "from -720 to 840"),
            (&[("key", "requests.nvidia.com/gpu")], "is not a cash key"),
            (&[("reasons", "accrual,theft")], "'theft' is not one of"),
            (&[("format", "xml")], "is not json or csv"),
            (&[("startsOn", "caturday")], "is not a day of the week"),
        ];
        for (p, want) in cases {
            let e = parse(&params(p), NOW).unwrap_err().to_string();
            assert!(e.contains(want), "{p:?}: {e}");
            // In a person's words: no milliseconds, no parameter names.
            assert!(
                !e.contains(".000Z") && !e.contains("utcOffsetMinutes"),
                "{p:?}: {e}"
            );
        }
        let long = "x".repeat(400);
        let e = parse(&params(&[("subtree", &long)]), NOW)
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than 320"), "{e}");
        assert!(serde_urlencoded::from_str::<Params>("colour=red").is_err());
    }

    #[test]
    fn a_wrong_or_repeated_option_is_refused_in_words() {
        for (q, want) in [
            ("colour=red", "a report has no option 'colour'"),
            ("by=child&by=user", "'by' is given twice"),
            ("from=2026-11-01&x%20y=1", "a report has no option 'x y'"),
        ] {
            let e = params_of(Some(q)).unwrap_err().to_string();
            assert!(e.contains(want), "{q}: {e}");
            for jargon in ["`", "unknown field", "expected", "duplicate field"] {
                assert!(!e.contains(jargon), "{q}: {jargon} in {e}");
            }
        }
        let p = params_of(Some("by=user&subtree=a&utcOffsetMinutes=60")).unwrap();
        assert_eq!(
            (
                p.by.as_deref(),
                p.subtree.as_deref(),
                p.utc_offset_minutes.as_deref()
            ),
            (Some("user"), Some("a"), Some("60"))
        );
    }

    #[test]
    fn subtrees_hold_every_descendant() {
        let parents: BTreeMap<String, String> = [("a", ""), ("b", "a"), ("c", "b"), ("d", "")]
            .into_iter()
            .map(|(q, p)| (q.to_string(), p.to_string()))
            .collect();
        let mut s = subtree_of("a", &parents);
        s.sort();
        assert_eq!(s, vec!["a", "b", "c"]);
    }
}
