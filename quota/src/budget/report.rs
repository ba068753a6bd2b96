//! The budget ledger and its reports (docs/budgets.md §6). Every change of
//! a budget is an `Entry`; a report groups entries by one dimension and
//! by time bucket. An entry that spans buckets is shared out in
//! proportion to time with cumulative flooring, so the shares of any
//! partition add up to the entry exactly: a report's rows sum to its
//! total, and its total is the ledger's sum, to the unit of acc.

use crate::object::budgets::{Entry, Reason};
use crate::object::period::{Period, Weekday, MS_PER_DAY};
use crate::quantity::serde_acc;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

impl Reason {
    /// Whether the amount counts as spending (accrual and refunds) rather
    /// than budget (top-ups and carry).
    pub fn is_spending(self) -> bool {
        matches!(self, Reason::Accrual | Reason::Refund | Reason::Use)
    }
}

impl Entry {
    /// The carry entry a closed period leaves for reports: what it carried
    /// into the next period, at the boundary (None when nothing carried).
    pub fn carry(
        record: &crate::object::period::PeriodRecord,
        quota: &str,
        key: &str,
    ) -> Option<Entry> {
        (record.carried != 0).then(|| Entry {
            quota: quota.to_string(),
            key: key.to_string(),
            workload: String::new(),
            namespace: String::new(),
            model: None,
            qos: None,
            user: None,
            start_ms: record.end_ms,
            end_ms: record.end_ms,
            amount: record.carried,
            reason: Reason::Carry,
            note: String::new(),
        })
    }
}

/// What rows are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Dimension {
    /// The quota an entry was written to.
    Quota,
    /// The child of the report's subtree root it lies under (`(self)` for
    /// the root's own). Needs `subtree`.
    Child,
    Workload,
    Namespace,
    Model,
    Qos,
    User,
    Key,
    Reason,
    /// The quality of service it was billed as (`quality_class`): a
    /// class's request, use above request, BestEffort use.
    Quality,
}

/// What an entry was billed as, by quality of service
/// (docs/real-usage.md, "Billing by quality"): `Guaranteed request`,
/// `Burstable request`, `BestEffort request` (accrual by class),
/// `above request` and `BestEffort use` (use), else the reason.
pub fn quality_class(reason: Reason, qos: Option<crate::usage::QosClass>) -> &'static str {
    use crate::usage::QosClass::*;
    match (reason, qos) {
        (Reason::Accrual, Some(Guaranteed) | None) => "Guaranteed request",
        (Reason::Accrual, Some(Burstable)) => "Burstable request",
        (Reason::Accrual, Some(BestEffort)) => "BestEffort request",
        (Reason::Use, Some(BestEffort)) => "BestEffort use",
        (Reason::Use, _) => "above request",
        (Reason::Refund, _) => "refund",
        (Reason::TopUp, _) => "top-up",
        (Reason::Carry, _) => "carry",
    }
}

/// The time buckets of a report, at local midnight of `utcOffsetMinutes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Bucket {
    /// The whole range is one bucket.
    #[default]
    None,
    Day,
    #[serde(rename_all = "camelCase")]
    Week {
        starts_on: Weekday,
    },
    /// Calendar months.
    Month,
}

fn spending() -> Vec<Reason> {
    vec![Reason::Accrual, Reason::Refund, Reason::Use]
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportSpec {
    #[serde(rename = "from", with = "crate::time::serde_stamp")]
    pub from_ms: i64,
    #[serde(rename = "to", with = "crate::time::serde_stamp")]
    pub to_ms: i64,
    pub by: Dimension,
    #[serde(default)]
    pub bucket: Bucket,
    #[serde(default)]
    pub utc_offset_minutes: i32,
    /// Only this quota and its descendants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtree: Option<String>,
    /// Only this cash key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Which kinds of entry count; spending (accrual and refunds) unless set.
    #[serde(default = "spending")]
    pub reasons: Vec<Reason>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("the report ends ({to}) at or before it starts ({from})")]
    EmptyRange { from: String, to: String },
    #[error("a report by child needs a subtree root")]
    ChildWithoutSubtree,
    #[error("{0}")]
    Period(#[from] crate::object::period::PeriodError),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub bucket_start_ms: i64,
    pub group: String,
    #[serde(with = "serde_acc")]
    pub amount: i128,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// By bucket, then group; only non-zero rows.
    pub rows: Vec<Row>,
    #[serde(with = "serde_acc")]
    pub total: i128,
}

impl ReportSpec {
    fn validate(&self) -> Result<(), ReportError> {
        if self.to_ms <= self.from_ms {
            return Err(ReportError::EmptyRange {
                from: crate::time::format_rfc3339(self.from_ms),
                to: crate::time::format_rfc3339(self.to_ms),
            });
        }
        if self.by == Dimension::Child && self.subtree.is_none() {
            return Err(ReportError::ChildWithoutSubtree);
        }
        self.bucket_period().validate()?;
        Ok(())
    }

    /// Buckets as a period: the same calendar rules as budgets.
    fn bucket_period(&self) -> BucketPeriod {
        let off = self.utc_offset_minutes;
        match self.bucket {
            Bucket::None => BucketPeriod(Period::None, false),
            Bucket::Day => BucketPeriod(
                Period::Weekly {
                    starts_on: Weekday::Monday,
                    utc_offset_minutes: off,
                },
                true,
            ),
            Bucket::Week { starts_on } => BucketPeriod(
                Period::Weekly {
                    starts_on,
                    utc_offset_minutes: off,
                },
                false,
            ),
            Bucket::Month => BucketPeriod(
                Period::Monthly {
                    anchor_day: 1,
                    utc_offset_minutes: off,
                },
                false,
            ),
        }
    }
}

/// A bucket calendar: a period, or days (`true`: every local midnight).
struct BucketPeriod(Period, bool);

impl BucketPeriod {
    fn validate(&self) -> Result<(), crate::object::period::PeriodError> {
        self.0.validate()
    }

    fn start(&self, ms: i64, off_ms: i64) -> i64 {
        if self.1 {
            ms.saturating_add(off_ms).div_euclid(MS_PER_DAY) * MS_PER_DAY - off_ms
        } else {
            self.0.at(ms).start_ms
        }
    }

    fn cuts(&self, from: i64, to: i64, off_ms: i64) -> Vec<i64> {
        if self.1 {
            let mut out = Vec::new();
            let mut d = self.start(from, off_ms) + MS_PER_DAY;
            while d < to {
                out.push(d);
                d += MS_PER_DAY;
            }
            out
        } else {
            self.0.boundaries(from, to).collect()
        }
    }
}

/// The bucket boundaries strictly inside `spec`'s range (none for
/// `Bucket::None`).
pub fn cuts(spec: &ReportSpec) -> Vec<i64> {
    if spec.bucket == Bucket::None || spec.to_ms <= spec.from_ms {
        return Vec::new();
    }
    let off_ms = spec.utc_offset_minutes as i64 * 60_000;
    spec.bucket_period().cuts(spec.from_ms, spec.to_ms, off_ms)
}

/// The start of the bucket `ms` falls in (`spec.from_ms` for
/// `Bucket::None`).
pub fn bucket_start(spec: &ReportSpec, ms: i64) -> i64 {
    match spec.bucket {
        Bucket::None => spec.from_ms,
        _ => spec
            .bucket_period()
            .start(ms, spec.utc_offset_minutes as i64 * 60_000),
    }
}

/// ⌊amount × (t − s) / len⌋ for s ≤ t ≤ s + len, exact for any amount that
/// fits (the remainder product is done in u128).
fn cumulative(amount: i128, s: i64, t: i64, len: i64) -> i128 {
    let (len, x) = (len as i128, (t as i128) - (s as i128));
    let (q, r) = (amount.div_euclid(len), amount.rem_euclid(len));
    let part = (r as u128 * x as u128 / len as u128) as i128;
    q.saturating_mul(x).saturating_add(part)
}

/// The share of `e` within `[a, b)` (a subset of its span), such that the
/// shares of consecutive pieces add up to the whole amount.
pub fn share(e: &Entry, a: i64, b: i64) -> i128 {
    if e.end_ms <= e.start_ms {
        return if e.start_ms >= a && e.start_ms < b {
            e.amount
        } else {
            0
        };
    }
    let (a, b) = (a.max(e.start_ms), b.min(e.end_ms));
    if b <= a {
        return 0;
    }
    let len = e.end_ms - e.start_ms;
    cumulative(e.amount, e.start_ms, b, len) - cumulative(e.amount, e.start_ms, a, len)
}

/// Whether `quota` is `root` or below it, and if below, which child of
/// `root` it descends from. `parents`: quota → parent ("" for a root).
pub(crate) fn under<'a>(
    quota: &'a str,
    root: &str,
    parents: &'a BTreeMap<String, String>,
) -> Option<Option<&'a str>> {
    let mut at = quota;
    let mut child = None;
    for _ in 0..=parents.len() {
        if at == root {
            return Some(child);
        }
        child = Some(at);
        at = parents
            .get(at)
            .map(String::as_str)
            .filter(|p| !p.is_empty())?;
    }
    None // a cycle: no sane subtree
}

fn group_of(e: &Entry, by: Dimension, child: Option<&str>) -> String {
    let or = |s: &Option<String>, none: &str| s.clone().unwrap_or_else(|| none.to_string());
    match by {
        Dimension::Quota => e.quota.clone(),
        Dimension::Child => child.unwrap_or("(self)").to_string(),
        Dimension::Workload => e.workload.clone(),
        Dimension::Namespace => e.namespace.clone(),
        Dimension::Model => or(&e.model, "(no model)"),
        Dimension::Qos => e
            .qos
            .map(|q| format!("{q:?}"))
            .unwrap_or_else(|| "(unknown)".into()),
        Dimension::User => or(&e.user, "(unknown)"),
        Dimension::Key => e.key.clone(),
        Dimension::Reason => format!("{:?}", e.reason),
        Dimension::Quality => quality_class(e.reason, e.qos).to_string(),
    }
}

/// Groups `entries` as `spec` says. `parents` (quota → parent) is needed
/// for `subtree` and `Dimension::Child`; entries outside the subtree,
/// other keys and other reasons are left out. The part of an entry
/// outside `[from, to)` is left out by the same proportional rule.
pub fn report(
    entries: &[Entry],
    spec: &ReportSpec,
    parents: &BTreeMap<String, String>,
) -> Result<Report, ReportError> {
    spec.validate()?;
    let buckets = spec.bucket_period();
    let off_ms = spec.utc_offset_minutes as i64 * 60_000;
    let mut rows: BTreeMap<(i64, String), i128> = BTreeMap::new();
    let mut total = 0i128;
    for e in entries {
        if !spec.reasons.contains(&e.reason) || spec.key.as_ref().is_some_and(|k| *k != e.key) {
            continue;
        }
        let child = match &spec.subtree {
            Some(root) => match under(&e.quota, root, parents) {
                Some(c) => c,
                None => continue,
            },
            None => None,
        };
        let group = group_of(e, spec.by, child);
        let (a, b) = if e.end_ms <= e.start_ms {
            (e.start_ms, e.start_ms.saturating_add(1))
        } else {
            (e.start_ms.max(spec.from_ms), e.end_ms.min(spec.to_ms))
        };
        if b <= a || a < spec.from_ms || a >= spec.to_ms {
            continue;
        }
        let cuts = buckets.cuts(a, b, off_ms);
        for (x, y) in crate::object::period::split(a, b, cuts) {
            let amount = share(e, x, y);
            let bucket = match spec.bucket {
                Bucket::None => spec.from_ms,
                _ => buckets.start(x, off_ms),
            };
            let r = rows.entry((bucket, group.clone())).or_insert(0);
            *r = r.saturating_add(amount);
            total = total.saturating_add(amount);
        }
    }
    Ok(Report {
        rows: rows
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|((bucket_start_ms, group), amount)| Row {
                bucket_start_ms,
                group,
                amount,
            })
            .collect(),
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_rfc3339;
    use crate::usage::QosClass;

    fn t(s: &str) -> i64 {
        parse_rfc3339(s).unwrap()
    }

    fn entry(quota: &str, model: &str, start: &str, end: &str, amount: i128) -> Entry {
        Entry {
            quota: quota.into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            workload: format!("batch/Job/{quota}/w"),
            namespace: quota.into(),
            model: Some(model.into()),
            qos: Some(QosClass::Guaranteed),
            user: None,
            start_ms: t(start),
            end_ms: t(end),
            amount,
            reason: Reason::Accrual,
            note: String::new(),
        }
    }

    fn spec(by: Dimension, bucket: Bucket, from: &str, to: &str) -> ReportSpec {
        ReportSpec {
            from_ms: t(from),
            to_ms: t(to),
            by,
            bucket,
            utc_offset_minutes: 0,
            subtree: None,
            key: None,
            reasons: spending(),
        }
    }

    #[test]
    fn an_entry_across_midnight_is_shared_by_time() {
        let e = entry(
            "a",
            "A100",
            "2026-03-01T23:00:00Z",
            "2026-03-02T02:00:00Z",
            3000,
        );
        let r = report(
            &[e],
            &spec(
                Dimension::Model,
                Bucket::Day,
                "2026-03-01T00:00:00Z",
                "2026-03-03T00:00:00Z",
            ),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(
            r.rows.iter().map(|r| r.amount).collect::<Vec<_>>(),
            vec![1000, 2000]
        );
        assert_eq!(r.rows[1].bucket_start_ms, t("2026-03-02T00:00:00Z"));
        assert_eq!(r.total, 3000);
    }

    #[test]
    fn shares_of_an_odd_amount_still_add_up() {
        let e = entry(
            "a",
            "A100",
            "2026-03-01T00:00:00Z",
            "2026-03-01T00:00:00.003Z",
            10,
        );
        let parts: Vec<i128> = (0..3)
            .map(|i| share(&e, e.start_ms + i, e.start_ms + i + 1))
            .collect();
        assert_eq!(parts.iter().sum::<i128>(), 10);
        assert_eq!(parts, vec![3, 3, 4]);
        let neg = Entry { amount: -10, ..e };
        assert_eq!(
            (0..3)
                .map(|i| share(&neg, neg.start_ms + i, neg.start_ms + i + 1))
                .sum::<i128>(),
            -10
        );
    }

    #[test]
    fn subtree_and_children() {
        let parents: BTreeMap<String, String> = [
            ("root", ""),
            ("ai", "root"),
            ("nlp", "ai"),
            ("cv", "ai"),
            ("other", "root"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let es = vec![
            entry(
                "nlp",
                "A100",
                "2026-03-01T00:00:00Z",
                "2026-03-01T01:00:00Z",
                5,
            ),
            entry(
                "cv",
                "T4",
                "2026-03-01T00:00:00Z",
                "2026-03-01T01:00:00Z",
                7,
            ),
            entry(
                "ai",
                "T4",
                "2026-03-01T00:00:00Z",
                "2026-03-01T01:00:00Z",
                11,
            ),
            entry(
                "other",
                "T4",
                "2026-03-01T00:00:00Z",
                "2026-03-01T01:00:00Z",
                13,
            ),
        ];
        let mut s = spec(
            Dimension::Child,
            Bucket::None,
            "2026-03-01T00:00:00Z",
            "2026-04-01T00:00:00Z",
        );
        assert_eq!(
            report(&es, &s, &parents),
            Err(ReportError::ChildWithoutSubtree)
        );
        s.subtree = Some("ai".into());
        let r = report(&es, &s, &parents).unwrap();
        let got: Vec<(&str, i128)> = r
            .rows
            .iter()
            .map(|r| (r.group.as_str(), r.amount))
            .collect();
        assert_eq!(got, vec![("(self)", 11), ("cv", 7), ("nlp", 5)]);
        assert_eq!(r.total, 23);
    }

    #[test]
    fn months_and_ranges_clip() {
        let e = entry(
            "a",
            "A100",
            "2026-01-31T00:00:00Z",
            "2026-02-02T00:00:00Z",
            48,
        );
        let r = report(
            std::slice::from_ref(&e),
            &spec(
                Dimension::Quota,
                Bucket::Month,
                "2026-01-01T00:00:00Z",
                "2026-12-01T00:00:00Z",
            ),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(r.rows.len(), 2);
        assert_eq!((r.rows[0].amount, r.rows[1].amount), (24, 24));
        let r = report(
            &[e],
            &spec(
                Dimension::Quota,
                Bucket::None,
                "2026-02-01T00:00:00Z",
                "2026-02-01T12:00:00Z",
            ),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(r.total, 12);
    }

    #[test]
    fn budget_entries_count_only_when_asked() {
        let mut top = entry(
            "a",
            "A100",
            "2026-03-01T10:00:00Z",
            "2026-03-01T10:00:00Z",
            99,
        );
        top.reason = Reason::TopUp;
        let mut s = spec(
            Dimension::Reason,
            Bucket::Day,
            "2026-03-01T00:00:00Z",
            "2026-03-02T00:00:00Z",
        );
        assert_eq!(
            report(&[top.clone()], &s, &BTreeMap::new()).unwrap().total,
            0
        );
        s.reasons = vec![Reason::TopUp];
        let r = report(&[top], &s, &BTreeMap::new()).unwrap();
        assert_eq!(r.total, 99);
        assert_eq!(r.rows[0].group, "TopUp");
    }
}
