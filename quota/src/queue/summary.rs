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

use crate::object::queue::QueueEntry;
use crate::object::queue::Summary;
use crate::object::queue::Waiting;
use std::collections::BTreeSet;

/// How many entries a status lists, in admission order, when marks back
/// the rest: the head and enough behind it for people and for a
/// sibling's fair-sharing view (`share::field` reads the heads).
pub const TOP_ENTRIES: usize = 20;

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
/// Borrowed: only what the status keeps is copied (the caller keeps the
/// whole, for the replica's own copy).
pub fn bound(queue: &[QueueEntry], marked: &BTreeSet<String>) -> (Vec<QueueEntry>, Summary) {
    let summary = Summary::of(queue);
    let kept = queue
        .iter()
        .enumerate()
        .filter(|(i, e)| *i < TOP_ENTRIES || !marked.contains(&e.work.workload_ref))
        .map(|(_, e)| e.clone())
        .collect();
    (kept, summary)
}

/// The held objects bound to a quota that wait by a queue mark nothing
/// folds, with marks off: of `marked` (the held objects carrying a mark),
/// those its status neither lists in `queue` nor charges. With marks on a
/// round folds them back; off, they stay held for good.
pub fn stranded<'a>(
    status: &crate::object::QuotaStatus,
    marked: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    let listed: BTreeSet<&str> = status
        .queue
        .iter()
        .map(|e| e.work.workload_ref.as_str())
        .collect();
    marked
        .into_iter()
        .filter(|r| !listed.contains(r) && !status.workloads.contains_key(r))
        .collect()
}

/// The summary a status keeps with marks off: none, unless held objects
/// wait by marks nothing folds (`stranded`); then the listed queue's
/// summary, counting them in `total` and in `unfolded`, so the status
/// says how many wait unseen, and the alert on them reads it.
pub fn unfolded(queue: &[QueueEntry], stranded: usize) -> Option<Summary> {
    if stranded == 0 {
        return None;
    }
    let mut s = Summary::of(queue);
    s.unfolded = count(stranded);
    s.total = s.total.saturating_add(s.unfolded);
    Some(s)
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
    use crate::object::queue::Queued;
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
                }]
                .into(),
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
        let (kept, s) = bound(&q, &marked);
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
        let (shown, _) = crate::summary::summarize(
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
        let (kept, s) = bound(&q, &marked);
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
        let (kept, s) = bound(&q, &all_marked(&q));
        assert!(kept.iter().all(|e| e.work.submitted_ms != 1));
        assert_eq!(s.oldest.as_deref(), Some("batch/Job/ml/job-00040"));
        assert_eq!(s.oldest_ms(), Some(1));
    }

    #[test]
    fn a_short_queue_is_listed_whole() {
        let q = queue(3);
        let (kept, s) = bound(&q, &all_marked(&q));
        assert_eq!(kept, q);
        assert_eq!(s.total, 3);
        assert_eq!(waiting(&[], None), 0);
        assert_eq!(Summary::of(&[]), Summary::default());
    }

    #[test]
    fn with_marks_off_only_held_objects_nothing_lists_or_charges_are_stranded() {
        let q = queue(25);
        let (kept, _) = bound(&q, &all_marked(&q));
        let mut status = crate::object::QuotaStatus {
            queue: kept,
            ..Default::default()
        };
        // One admitted (charged, its release not yet seen).
        status.workloads.insert(
            "batch/Job/ml/job-00021".into(),
            crate::object::Charge {
                pod_sets: vec![],
                hpa: None,
                since: String::new(),
                uid: "queue:uid-00021".into(),
                admitted: None,
            },
        );
        let marked: Vec<String> = q.iter().map(|e| e.work.workload_ref.clone()).collect();
        let left = stranded(&status, marked.iter().map(String::as_str));
        assert_eq!(
            left,
            [
                "batch/Job/ml/job-00020",
                "batch/Job/ml/job-00022",
                "batch/Job/ml/job-00023",
                "batch/Job/ml/job-00024"
            ]
        );
        let s = unfolded(&status.queue, left.len()).expect("a summary while any is stranded");
        assert_eq!((s.total, s.unfolded), (24, 4), "the listed 20 and the 4");
        assert_eq!(waiting(&status.queue, Some(&s)), 24);
        assert_eq!(
            unfolded(&status.queue, 0),
            None,
            "none stranded: no summary"
        );
        let text = serde_json::to_value(&s).unwrap();
        assert_eq!(text["unfolded"], 4);
        let plain = serde_json::to_value(Summary::of(&status.queue)).unwrap();
        assert!(
            plain.get("unfolded").is_none(),
            "written only when some are: {plain}"
        );
    }

    proptest! {
        /// Whatever the queue's length, a status whose entries marks back
        /// serialises within a bound that does not grow with it.
        #[test]
        fn the_stored_queue_is_bounded_whatever_its_length(n in 0usize..=crate::object::queueing::MAX_QUEUE) {
            let q = queue(n);
            let (kept, s) = bound(&q, &all_marked(&q));
            prop_assert_eq!(kept.len(), n.min(TOP_ENTRIES));
            prop_assert_eq!(s.total as usize, n);
            let bytes = serde_json::to_vec(&kept).unwrap().len()
                + serde_json::to_vec(&s).unwrap().len();
            // ~670 bytes an entry: 20 of them and the summary.
            prop_assert!(bytes < 16 * 1024, "{} bytes for {} entries", bytes, n);
        }
    }
}
