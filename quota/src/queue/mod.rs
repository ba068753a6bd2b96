//! Queued admission (issue 15, docs/queueing.md): batch work that does not
//! fit its quota waits, suspended, in the quota's queue instead of being
//! refused, and is admitted whole once it fits. Pure like the rest of the
//! crate: the queue, the quota, budgets and "now" come in, decisions go
//! out; the server writes them (charge first, then unsuspend).
//!
//! | module | what it decides |
//! |---|---|
//! | `order` | the admission order, and which waiting entry blocks |
//! | `admit` | one round of admissions (`next_admissions`), `status.queue`, `would_queue_at` |
//! | `reason` | why an entry waits, in words |
//! | `room` | the ceiling a borrower's queue may plan against |
//! | `preempt` | which running batch work the head may reclaim |
//! | `estimate` | when entries would start, from declared run times |
//! | `priority` | a workload's priority from the PriorityClasses its templates name |
//! | `budgets` | a quota's card-hour budgets as a round weighs them |
//! | `ledger` | `status.queue` as writes change it: join, refresh, leave |
//! | `share` | whose share of a queue an entry counts against (`maxPerSubmitter`) |
//! | `summary` | the bounded queue a status shows with marks on: the top entries and a summary |
//! | `inputs` | which versions of a quota a round reads alike (a round on either would plan the same) |
//!
//! What the queue keeps in a quota — `spec.queueing`, `status.queue` and
//! `status.queueSummary` — is plain data in `crate::object::queueing` and
//! `crate::object::queue`.

pub mod admit;
pub mod allowance;
pub mod batch;
pub mod budgets;
pub mod entries;
pub mod estimate;
pub mod fold;
pub mod inputs;
pub mod mark;
pub mod order;
pub mod pending;
pub mod preempt;
pub mod priority;
pub mod reason;
pub mod room;
pub mod share;
pub mod summary;

pub use admit::{
    next_admissions, status, would_queue_at, Admission, BudgetView, Check, Decision, Pool, Wait,
};
pub use estimate::{estimate, Running};
pub use order::order;
pub use preempt::{plan as preemption_plan, Preempt};
pub use reason::{FairTurn, Need, Reason};
pub use room::borrow_limits;

use crate::object::queue::Queued;
use crate::object::queueing::QueuePolicy;
use crate::object::Charge;
use crate::workload::{Adapter, ChargeMode};
use std::collections::BTreeMap;

/// Annotation bizrq writes on a workload in the same PATCH that suspends
/// it for its quota's preemption (value: when, RFC 3339), and removes when
/// it unsuspends it, or when anyone else does (the mutating webhook). A
/// suspended workload that carries it and is in neither `status.queue`
/// nor charged is queued again by the controller; one suspended by hand
/// never carries it, and is never queued by anyone but its owner.
pub const PREEMPTED_ANNOTATION: &str = "bizrq.io/preempted";

/// Label on a workload: `Refuse` opts it out of its quota's queue (it is
/// refused at once when it does not fit, as without queueing).
pub const OPT_OUT_LABEL: &str = "bizrq.io/queueing";

impl Queued {
    /// The charge admission writes for it at `now_ms`. `uid` names the
    /// admission (see `Admission::request_uid`).
    pub fn charge(&self, now_ms: i64) -> Charge {
        let now = crate::time::format_rfc3339(now_ms);
        Charge {
            pod_sets: self.pod_sets.to_vec(),
            hpa: None,
            since: now.clone(),
            uid: request_uid(self),
            admitted: Some(now),
        }
    }
}

/// The uid a queue admission writes in the charge, so a reconcile that
/// finds a charge and a suspended object knows the charge was its own
/// (crash between charge and unsuspend, docs/queueing.md §4).
pub fn request_uid(q: &Queued) -> String {
    format!("{}{}", crate::object::QUEUE_CHARGE, q.uid)
}

/// Whether a kind can wait in a queue: it is charged (not only checked)
/// and its adapter knows how to hold it back (`Adapter::hold`: a suspend
/// flag or a gate on its pods).
pub fn queueable(adapter: &Adapter) -> bool {
    adapter.mode == ChargeMode::Charge && adapter.hold() != crate::hold::Hold::Never
}

/// What admission does with a workload that does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    Refuse,
    Queue,
}

/// Whether a workload of `adapter`'s kind, with `labels`, queues under
/// `policy` when it does not fit. A wrong opt-out value is an error, never
/// silently ignored.
pub fn disposition(
    adapter: &Adapter,
    policy: &QueuePolicy,
    labels: &BTreeMap<String, String>,
) -> Result<Disposition, String> {
    let opted_out = match labels.get(OPT_OUT_LABEL).map(|v| v.trim()) {
        None => false,
        Some("Refuse") => true,
        Some(v) => {
            return Err(format!(
                "label {OPT_OUT_LABEL} is '{v}': the only value is Refuse (opt out of the queue)"
            ))
        }
    };
    Ok(if policy.queues() && queueable(adapter) && !opted_out {
        Disposition::Queue
    } else {
        Disposition::Refuse
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::adapter_for_kind;

    #[test]
    fn only_suspendable_charged_kinds_queue() {
        let q = QueuePolicy::queue();
        let none = BTreeMap::new();
        for (g, k, want) in [
            ("batch", "Job", Disposition::Queue),
            ("kubeflow.org", "PyTorchJob", Disposition::Queue),
            ("kubeflow.org", "MPIJob", Disposition::Queue),
            ("apps", "Deployment", Disposition::Refuse),
            ("apps", "StatefulSet", Disposition::Refuse),
            ("batch", "CronJob", Disposition::Refuse),
            // No suspend flag: held by a scheduling gate on its pods.
            ("batch.volcano.sh", "Job", Disposition::Queue),
        ] {
            let a = adapter_for_kind(g, k).unwrap();
            assert_eq!(disposition(a, &q, &none), Ok(want), "{g}/{k}");
        }
        let job = adapter_for_kind("batch", "Job").unwrap();
        assert_eq!(
            disposition(job, &QueuePolicy::default(), &none),
            Ok(Disposition::Refuse)
        );
        let out: BTreeMap<String, String> = [(OPT_OUT_LABEL.into(), "Refuse".into())].into();
        assert_eq!(disposition(job, &q, &out), Ok(Disposition::Refuse));
        let bad: BTreeMap<String, String> = [(OPT_OUT_LABEL.into(), "no".into())].into();
        assert!(disposition(job, &q, &bad).unwrap_err().contains("'no'"));
    }

    #[test]
    fn an_entry_serialises_with_its_since_stamp() {
        let q = Queued {
            workload_ref: "batch/Job/ml/train".into(),
            uid: "u1".into(),
            priority: 5,
            priority_classes: Vec::new(),
            submitted_ms: 1_800_000_000_000,
            pod_sets: vec![].into(),
            run_ms: Some(3_600_000),
            submitted_by: None,
            preempted: false,
        };
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(
            json,
            r#"{"workloadRef":"batch/Job/ml/train","uid":"u1","priority":5,"since":"2027-01-15T08:00:00.000Z","podSets":[],"runMs":3600000}"#
        );
        assert_eq!(serde_json::from_str::<Queued>(&json).unwrap(), q);
        assert_eq!(q.kind(), "Job");
        assert_eq!(q.charge(0).uid, "queue:u1");
    }
}
