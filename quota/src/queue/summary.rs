//! The bounded queue a status shows (docs/queueing.md §12, "The bounded
//! summary"): with queue marks on, the queue a round plans over lives on
//! the held, marked objects (each carries its place in its mark, and the
//! round folds them, `fold`), so the quota's status keeps only what people
//! read — the first `TOP_ENTRIES` entries in admission order with their
//! reasons, and a `Summary` of the whole: how many wait, for what, the
//! head and the oldest. A quota object no longer grows with its queue.
//!
//! What may never leave the status: an entry no mark backs (queued by
//! preemption, or by the status path before marks were turned on) has no
//! other home, so it stays whatever its position (`bound`). Pure.

use super::admit::QueueEntry;
use super::reason::Waiting;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// How many entries a status lists, in admission order, when marks back
/// the rest: the head and enough behind it for people and for a
/// sibling's fair-sharing view (`share::field` reads the heads).
pub const TOP_ENTRIES: usize = 20;

/// `status.queueSummary`: the whole queue in a few numbers, as the round
/// that wrote it saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Entries waiting in all (those listed in `status.queue` included).
    pub total: u32,
    /// Of them, waiting for quota, for a budget, for their turn, and
    /// those that can never be admitted.
    #[serde(default)]
    pub for_quota: u32,
    #[serde(default)]
    pub for_budget: u32,
    #[serde(default)]
    pub for_turn: u32,
    #[serde(default)]
    pub never: u32,
    /// The head's `group/Kind/namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The oldest entry (earliest `since`) and its `since` (RFC 3339):
    /// the alert on waiting too long reads it when it is not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_since: Option<String>,
}

impl Summary {
    /// The summary of `queue`, whole and in admission order.
    pub fn of(queue: &[QueueEntry]) -> Summary {
        let mut s = Summary {
            total: count(queue.len()),
            head: queue.first().map(|e| e.work.workload_ref.clone()),
            ..Summary::default()
        };
        for e in queue {
            let n = match e.waiting {
                Waiting::Quota => &mut s.for_quota,
                Waiting::Budget => &mut s.for_budget,
                Waiting::Turn => &mut s.for_turn,
                Waiting::Never => &mut s.never,
            };
            *n = n.saturating_add(1);
        }
        if let Some(o) = queue
            .iter()
            .min_by(|a, b| a.work.submitted_ms.cmp(&b.work.submitted_ms))
        {
            s.oldest = Some(o.work.workload_ref.clone());
            s.oldest_since = Some(crate::time::format_rfc3339(o.work.submitted_ms));
        }
        s
    }

    /// The oldest entry's `since` in ms, if any.
    pub fn oldest_ms(&self) -> Option<i64> {
        self.oldest_since
            .as_deref()
            .and_then(crate::time::parse_rfc3339)
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The queue a status keeps, and its summary: `queue` (whole, in
/// admission order) cut to its first `TOP_ENTRIES` entries, plus every
/// entry beyond them that `marked` does not name (no mark backs it, so the
/// status is its only home). Positions and reasons are kept as given.
pub fn bound(queue: Vec<QueueEntry>, marked: &BTreeSet<String>) -> (Vec<QueueEntry>, Summary) {
    let summary = Summary::of(&queue);
    let kept = queue
        .into_iter()
        .enumerate()
        .filter(|(i, e)| *i < TOP_ENTRIES || !marked.contains(&e.work.workload_ref))
        .map(|(_, e)| e)
        .collect();
    (kept, summary)
}

/// How many wait in a status's queue: its summary's count where it has
/// one (the status lists only the top), else the entries it lists. An
/// entry listed that the summary has not counted yet (queued since by a
/// write that keeps no summary) counts too.
pub fn waiting(queue: &[QueueEntry], summary: Option<&Summary>) -> usize {
    let listed = queue.len();
    match summary {
        Some(s) => (s.total as usize).max(listed),
        None => listed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Queued;
    use crate::workload::PodSet;
    use proptest::prelude::*;

    fn entry(i: usize, waiting: Waiting) -> QueueEntry {
        QueueEntry {
            work: Queued {
                workload_ref: format!("batch/Job/ml/job-{i:05}"),
                uid: format!("uid-{i:05}-{}", "u".repeat(30)),
                priority: 0,
                priority_classes: vec!["batch-low".into()],
                submitted_ms: 1_800_000_000_000 + (i as i64 % 97) * 1_000,
                pod_sets: vec![PodSet {
                    name: "main".into(),
                    count: 4,
                    per_pod: [
                        ("requests.cpu".to_string(), crate::Quantity::from_units(8)),
                        (
                            "requests.nvidia.com/gpu".to_string(),
                            crate::Quantity::from_units(1),
                        ),
                    ]
                    .into(),
                    qos: None,
                }],
                run_ms: Some(3_600_000),
                submitted_by: Some("system:serviceaccount:ml:submitter".into()),
                preempted: false,
            },
            position: u32::try_from(i + 1).unwrap(),
            waiting,
            reason: "requests.nvidia.com/gpu asks 4, 0 free of 16 (max 32, 0 to borrow)".into(),
            estimated_start: Some("2027-01-15T09:00:00.000Z".into()),
        }
    }

    fn queue(n: usize) -> Vec<QueueEntry> {
        (0..n)
            .map(|i| {
                let w = [
                    Waiting::Quota,
                    Waiting::Turn,
                    Waiting::Budget,
                    Waiting::Never,
                ][i % 4];
                entry(i, w)
            })
            .collect()
    }

    fn all_marked(q: &[QueueEntry]) -> BTreeSet<String> {
        q.iter().map(|e| e.work.workload_ref.clone()).collect()
    }

    #[test]
    fn the_status_lists_the_top_and_counts_the_rest() {
        let q = queue(600);
        let marked = all_marked(&q);
        let (kept, s) = bound(q.clone(), &marked);
        assert_eq!(kept.len(), TOP_ENTRIES);
        assert_eq!(kept[..], q[..TOP_ENTRIES], "the top, in order, unchanged");
        assert_eq!(s.total, 600);
        assert_eq!(
            (s.for_quota, s.for_turn, s.for_budget, s.never),
            (150, 150, 150, 150)
        );
        assert_eq!(s.head.as_deref(), Some("batch/Job/ml/job-00000"));
        assert_eq!(s.oldest.as_deref(), Some("batch/Job/ml/job-00000"));
        assert_eq!(waiting(&kept, Some(&s)), 600);
        // kubectl's Queued column counts the whole queue.
        let status = crate::object::QuotaStatus {
            queue: kept,
            queue_summary: Some(s),
            ..Default::default()
        };
        let (shown, _) = crate::readable::summarize(
            &crate::object::QuotaSpec::default(),
            &status,
            &Default::default(),
            &crate::keys::KeyConfig::default(),
        );
        assert_eq!(shown.queued, 600);
    }

    #[test]
    fn an_entry_no_mark_backs_is_never_cut() {
        // A preempted entry (or one queued before marks were on) has no
        // object-side place: cutting it from the status would lose it.
        let q = queue(100);
        let mut marked = all_marked(&q);
        marked.remove("batch/Job/ml/job-00070");
        let (kept, s) = bound(q, &marked);
        assert_eq!(kept.len(), TOP_ENTRIES + 1);
        assert_eq!(
            kept[TOP_ENTRIES].work.workload_ref,
            "batch/Job/ml/job-00070"
        );
        assert_eq!(s.total, 100);
    }

    #[test]
    fn the_oldest_is_named_even_beyond_the_top() {
        let mut q = queue(50);
        q[40].work.submitted_ms = 1;
        let (kept, s) = bound(q.clone(), &all_marked(&q));
        assert!(kept.iter().all(|e| e.work.submitted_ms != 1));
        assert_eq!(s.oldest.as_deref(), Some("batch/Job/ml/job-00040"));
        assert_eq!(s.oldest_ms(), Some(1));
    }

    #[test]
    fn a_short_queue_is_listed_whole() {
        let q = queue(3);
        let (kept, s) = bound(q.clone(), &all_marked(&q));
        assert_eq!(kept, q);
        assert_eq!(s.total, 3);
        assert_eq!(waiting(&[], None), 0);
        assert_eq!(Summary::of(&[]), Summary::default());
    }

    proptest! {
        /// Whatever the queue's length, a status whose entries marks back
        /// serialises within a bound that does not grow with it.
        #[test]
        fn the_stored_queue_is_bounded_whatever_its_length(n in 0usize..=crate::queue::MAX_QUEUE) {
            let q = queue(n);
            let (kept, s) = bound(q.clone(), &all_marked(&q));
            prop_assert_eq!(kept.len(), n.min(TOP_ENTRIES));
            prop_assert_eq!(s.total as usize, n);
            let bytes = serde_json::to_vec(&kept).unwrap().len()
                + serde_json::to_vec(&s).unwrap().len();
            // ~670 bytes an entry: 20 of them and the summary.
            prop_assert!(bytes < 16 * 1024, "{} bytes for {} entries", bytes, n);
        }
    }
}
