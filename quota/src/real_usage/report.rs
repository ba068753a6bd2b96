//! Efficiency in budget reports (docs/real-usage.md, docs/budgets.md
//! "Reports"): the hourly rows of real usage grouped as a report groups
//! its ledger entries — by quota, child, workload, namespace or submitter,
//! in the same buckets — so each report row can show the GPU-hours its
//! group held and used. Real usage is kept per whole hour: an hour counts
//! in the bucket it starts in, and in the range when it starts in it.

use super::figures::GpuFigures;
use crate::budget::report::{bucket_start, under, Dimension, ReportSpec};
use std::collections::BTreeMap;

/// One workload's GPU figures for one hour (a row of the store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HourRow {
    pub quota: String,
    pub hour_ms: i64,
    pub workload: String,
    pub namespace: String,
    /// The submitter; "" when unknown.
    pub user: String,
    pub gpu: GpuFigures,
}

/// Whether a report grouped `by` can show real usage: the groups real
/// usage knows (not model, QoS class, cash key or reason).
pub fn groups_real_usage(by: Dimension) -> bool {
    matches!(
        by,
        Dimension::Quota
            | Dimension::Child
            | Dimension::Workload
            | Dimension::Namespace
            | Dimension::User
    )
}

/// The rows' GPU figures by (bucket start, group), as `budget::report`
/// keys its rows; None for a dimension real usage does not group by.
/// `parents`: quota → parent, for `subtree` and `Child`.
pub fn by_report_group(
    rows: &[HourRow],
    spec: &ReportSpec,
    parents: &BTreeMap<String, String>,
) -> Option<BTreeMap<(i64, String), GpuFigures>> {
    if !groups_real_usage(spec.by) {
        return None;
    }
    let mut out: BTreeMap<(i64, String), GpuFigures> = BTreeMap::new();
    for r in rows {
        if r.hour_ms < spec.from_ms || r.hour_ms >= spec.to_ms {
            continue;
        }
        let child = match &spec.subtree {
            Some(root) => match under(&r.quota, root, parents) {
                Some(c) => c,
                None => continue,
            },
            None => None,
        };
        let group = match spec.by {
            Dimension::Quota => r.quota.clone(),
            Dimension::Child => child.unwrap_or("(self)").to_string(),
            Dimension::Workload => r.workload.clone(),
            Dimension::Namespace => r.namespace.clone(),
            // As the ledger names a submitter it does not know.
            Dimension::User if r.user.is_empty() => "(unknown)".to_string(),
            Dimension::User => r.user.clone(),
            _ => return None,
        };
        out.entry((bucket_start(spec, r.hour_ms), group))
            .or_default()
            .add(&r.gpu);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::report::Bucket;
    use crate::object::period::MS_PER_DAY;

    const H: i64 = 3_600_000;
    const DAY0: i64 = 1_795_219_200_000; // a UTC midnight

    fn row(
        quota: &str,
        hour_ms: i64,
        workload: &str,
        user: &str,
        alloc: i64,
        busy: i64,
    ) -> HourRow {
        HourRow {
            quota: quota.into(),
            hour_ms,
            workload: workload.into(),
            namespace: "ml".into(),
            user: user.into(),
            gpu: GpuFigures {
                allocated: alloc,
                measured: alloc,
                busy,
                idle: 0,
            },
        }
    }

    fn spec(by: Dimension, bucket: Bucket, subtree: Option<&str>) -> ReportSpec {
        ReportSpec {
            from_ms: DAY0,
            to_ms: DAY0 + 2 * MS_PER_DAY,
            by,
            bucket,
            utc_offset_minutes: 0,
            subtree: subtree.map(str::to_string),
            key: None,
            reasons: vec![crate::object::budgets::Reason::Accrual],
        }
    }

    #[test]
    fn real_usage_is_grouped_and_bucketed_as_the_report_is() {
        let parents: BTreeMap<String, String> =
            [("ai", ""), ("nlp", "ai"), ("cv", "ai"), ("nlp-a", "nlp")]
                .iter()
                .map(|(q, p)| (q.to_string(), p.to_string()))
                .collect();
        let rows = [
            row("nlp", DAY0 + 23 * H, "batch/Job/ml/a", "alice", 2 * H, H),
            row("nlp-a", DAY0 + 24 * H, "batch/Job/ml/b", "", 4 * H, H),
            row("cv", DAY0 + 25 * H, "batch/Job/ml/c", "bob", H, H),
            // Outside the range: before it, and at its end.
            row("nlp", DAY0 - H, "batch/Job/ml/a", "alice", H, H),
            row("nlp", DAY0 + 48 * H, "batch/Job/ml/a", "alice", H, H),
        ];
        let by_child = by_report_group(
            &rows,
            &spec(Dimension::Child, Bucket::Day, Some("nlp")),
            &parents,
        )
        .unwrap();
        assert_eq!(
            by_child
                .iter()
                .map(|((b, g), f)| (*b, g.as_str(), f.allocated))
                .collect::<Vec<_>>(),
            [(DAY0, "(self)", 2 * H), (DAY0 + MS_PER_DAY, "nlp-a", 4 * H)]
        );
        let by_user =
            by_report_group(&rows, &spec(Dimension::User, Bucket::None, None), &parents).unwrap();
        assert_eq!(
            by_user
                .iter()
                .map(|((b, g), f)| (*b, g.as_str(), f.busy))
                .collect::<Vec<_>>(),
            [(DAY0, "(unknown)", H), (DAY0, "alice", H), (DAY0, "bob", H)]
        );
        assert!(
            by_report_group(&rows, &spec(Dimension::Qos, Bucket::None, None), &parents).is_none()
        );
    }
}
