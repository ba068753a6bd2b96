//! Refunds for reclaimed work and the action on an exhausted budget
//! (docs/budgets.md §4), both per-quota policies.
//!
//! A refund gives back what a workload stopped by reclaim spent on work it
//! loses: nothing, the stretch since its last checkpoint, or its whole
//! run. It is written as negative ledger entries, one per group of the
//! run's accrual (model, QoS, …), so reports by any dimension stay exact.
//!
//! On exhaustion running work is not killed by default (§4); the
//! `SuspendBatch` policy suspends the quota's batch work using the budget
//! after a grace period — never online services, in reclaim's order
//! (`reclaim::on_exhausted` plans it).

use super::report::share;
use crate::object::budgets::{Entry, Reason};
use crate::object::budgets::{Exhaustion, RefundPolicy};
use crate::workload::runtime::MAX_RUN_MS;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("checkpointEverySeconds {0} must be between 1 and 31622400 (366 days)")]
    Checkpoint(i64),
    #[error("graceSeconds {0} must be between 0 and 31622400 (366 days)")]
    Grace(i64),
}

impl RefundPolicy {
    pub fn validate(&self) -> Result<(), PolicyError> {
        match *self {
            RefundPolicy::LastStretch {
                checkpoint_every_seconds: s,
            } if s <= 0 || s > MAX_RUN_MS / 1000 => Err(PolicyError::Checkpoint(s)),
            _ => Ok(()),
        }
    }

    /// The stretch of a run `[start, stopped)` that is refunded, if any.
    pub fn lost(&self, start_ms: i64, stopped_ms: i64) -> Option<(i64, i64)> {
        if stopped_ms <= start_ms {
            return None;
        }
        let from = match *self {
            RefundPolicy::None => return None,
            RefundPolicy::WholeRun => start_ms,
            RefundPolicy::LastStretch {
                checkpoint_every_seconds,
            } => {
                let every = checkpoint_every_seconds.max(1).saturating_mul(1000);
                let lost = (stopped_ms - start_ms) % every;
                if lost == 0 {
                    return None; // stopped right at a checkpoint
                }
                stopped_ms - lost
            }
        };
        Some((from, stopped_ms))
    }
}

/// The refund of a run of one workload, `[start, stopped)`, stopped by
/// reclaim: negative entries undoing the share of `accruals` (its ledger
/// entries; others are ignored) that falls in the lost stretch, one per
/// quota, key, model, QoS class, namespace and user. Calling it once per
/// reclaim is the caller's part (key it by the reclaim mark).
pub fn refund(
    policy: &RefundPolicy,
    start_ms: i64,
    stopped_ms: i64,
    accruals: &[Entry],
    note: &str,
) -> Vec<Entry> {
    refund_after(policy, start_ms, stopped_ms, i64::MIN, accruals, note)
}

/// `refund`, of the lost stretch's part from `not_before_ms` on: what an
/// earlier refund of the same run gave back (up to its end) is not given
/// back again, whichever mark stops the run now.
pub fn refund_after(
    policy: &RefundPolicy,
    start_ms: i64,
    stopped_ms: i64,
    not_before_ms: i64,
    accruals: &[Entry],
    note: &str,
) -> Vec<Entry> {
    let Some((from, to)) = policy.lost(start_ms, stopped_ms) else {
        return Vec::new();
    };
    let from = from.max(not_before_ms);
    if from >= to {
        return Vec::new();
    }
    type Group = (
        String,
        String,
        String,
        String,
        Option<String>,
        String,
        Option<String>,
    );
    let mut sums: BTreeMap<Group, (Entry, i128)> = BTreeMap::new();
    for e in accruals.iter().filter(|e| e.reason == Reason::Accrual) {
        let part = share(e, from, to);
        if part == 0 {
            continue;
        }
        let g = (
            e.quota.clone(),
            e.key.clone(),
            e.workload.clone(),
            e.namespace.clone(),
            e.model.clone(),
            format!("{:?}", e.qos),
            e.user.clone(),
        );
        let s = sums.entry(g).or_insert_with(|| (e.clone(), 0));
        s.1 = s.1.saturating_add(part);
    }
    sums.into_values()
        .map(|(e, part)| Entry {
            start_ms: from,
            end_ms: to,
            amount: -part,
            reason: Reason::Refund,
            note: note.to_string(),
            ..e
        })
        .collect()
}

impl Exhaustion {
    pub fn validate(&self) -> Result<(), PolicyError> {
        match *self {
            Exhaustion::SuspendBatch { grace_seconds: g }
                if !(0..=MAX_RUN_MS / 1000).contains(&g) =>
            {
                Err(PolicyError::Grace(g))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use crate::reclaim::{on_exhausted, Candidate, ExhaustionPlan, Stop};
    use crate::workload::PodSet;

    const GPU: &str = "requests.nvidia.com/gpu";
    const H: i64 = 3_600_000;

    fn accrual(start: i64, end: i64, amount: i128, model: &str) -> Entry {
        Entry {
            quota: "q".into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            workload: "batch/Job/ns/train".into(),
            namespace: "ns".into(),
            model: Some(model.into()),
            qos: None,
            user: None,
            start_ms: start,
            end_ms: end,
            amount,
            reason: Reason::Accrual,
            note: String::new(),
        }
    }

    #[test]
    fn the_last_stretch_since_a_checkpoint() {
        let p = RefundPolicy::LastStretch {
            checkpoint_every_seconds: 3600,
        };
        // Ran 0 .. 2.5 h, checkpoints at 1 h and 2 h: the last 30 min is lost.
        assert_eq!(p.lost(0, 5 * H / 2), Some((2 * H, 5 * H / 2)));
        assert_eq!(p.lost(0, 2 * H), None, "stopped right at a checkpoint");
        let acc = [
            accrual(0, 2 * H, 200, "A100"),
            accrual(2 * H, 3 * H, 100, "A100"),
        ];
        let r = refund(&p, 0, 5 * H / 2, &acc, "reclaimed by nlp");
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].amount, r[0].reason), (-50, Reason::Refund));
        assert_eq!((r[0].start_ms, r[0].end_ms), (2 * H, 5 * H / 2));
        assert_eq!(r[0].note, "reclaimed by nlp");
    }

    #[test]
    fn a_whole_run_by_model() {
        let acc = [accrual(0, H, 100, "A100"), accrual(0, H, 30, "T4")];
        let r = refund(&RefundPolicy::WholeRun, 0, H, &acc, "");
        let amounts: Vec<(Option<&str>, i128)> =
            r.iter().map(|e| (e.model.as_deref(), e.amount)).collect();
        assert_eq!(amounts, vec![(Some("A100"), -100), (Some("T4"), -30)]);
        assert!(refund(&RefundPolicy::None, 0, H, &acc, "").is_empty());
    }

    fn candidate(
        name: &str,
        online: bool,
        stop: Stop,
        priority: i32,
        created: i64,
        gpus: i64,
    ) -> Candidate {
        Candidate {
            workload_ref: format!("batch/Job/ns/{name}"),
            stop,
            priority,
            online,
            created_ms: created,
            pod_sets: vec![PodSet {
                name: "w".into(),
                count: 1,
                per_pod: [(GPU.to_string(), Quantity::from_units(gpus))].into(),
                qos: None,
            }],
            min_replicas: None,
            marked: false,
            idle: false,
        }
    }

    #[test]
    fn suspends_batch_work_after_grace_in_reclaim_order() {
        let cs = vec![
            candidate("old", false, Stop::Suspend, 0, 1, 1),
            candidate("new", false, Stop::Suspend, 0, 2, 1),
            candidate("important", false, Stop::Suspend, 100, 3, 1),
            candidate("serving", true, Stop::Suspend, 0, 4, 1),
            candidate("deploy", false, Stop::Scale, 0, 5, 1),
            candidate("cpu-only", false, Stop::Suspend, 0, 6, 0),
        ];
        let p = Exhaustion::SuspendBatch { grace_seconds: 600 };
        let plan = on_exhausted(&p, 0, None, 1000, GPU, &cs);
        assert_eq!(plan.since_ms, Some(1000));
        assert_eq!(plan.due_ms, Some(601_000));
        assert!(!plan.act);
        assert_eq!(
            plan.suspend,
            vec![
                "batch/Job/ns/new",
                "batch/Job/ns/old",
                "batch/Job/ns/important"
            ]
        );
        assert!(on_exhausted(&p, 0, Some(1000), 601_000, GPU, &cs).act);
        assert_eq!(
            on_exhausted(&p, 1, Some(1000), 601_000, GPU, &cs),
            ExhaustionPlan::default()
        );
        let refuse = on_exhausted(&Exhaustion::RefuseNew, -5, None, 7, GPU, &cs);
        assert!(refuse.suspend.is_empty() && refuse.due_ms.is_none());
        assert_eq!(refuse.since_ms, Some(7));
    }

    #[test]
    fn policies_validate() {
        assert!(RefundPolicy::LastStretch {
            checkpoint_every_seconds: 0
        }
        .validate()
        .is_err());
        assert!(Exhaustion::SuspendBatch { grace_seconds: -1 }
            .validate()
            .is_err());
        let p: RefundPolicy =
            serde_json::from_str(r#"{"kind":"lastStretch","checkpointEverySeconds":1800}"#)
                .unwrap();
        assert!(p.validate().is_ok());
    }
}
