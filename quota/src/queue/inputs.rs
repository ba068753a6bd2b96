//! Which versions of a quota a queue round reads alike (docs/queueing.md
//! §12, "Rounds that would change nothing"). A round asked for on a
//! version that differs from the quota's last idle round's only in what no
//! round reads would plan nothing again, as on the same version: the
//! scheduler puts it off as it does an unchanged one.
//!
//! What no round reads: the derived, for-people or bookkeeping parts of
//! the status a reconcile rewrites — `fairSharing` (the share its parent's
//! room gives it, moved by every sibling's loan), `summary`, `readable`,
//! `lastReconcileTime`, the ledger (pending and outbox) and
//! `qualityBilledTo`. Everything else is compared, metadata and spec
//! included; each field of the status is named below, so a field added to
//! it must be placed on one side or the other before this compiles.

use crate::object::{ObjectMeta, Quota, QuotaStatus};

/// Whether a queue round reading `b` reads what one reading `a` did.
pub fn reads_same(a: &Quota, b: &Quota) -> bool {
    meta_same(&a.metadata, &b.metadata) && a.spec == b.spec && status_same(&a.status, &b.status)
}

/// The object's identity and its labels and annotations; not its version.
fn meta_same(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    let ObjectMeta {
        name,
        resource_version: _,
        uid,
        creation_timestamp,
        labels,
        annotations,
    } = a;
    *name == b.name
        && *uid == b.uid
        && *creation_timestamp == b.creation_timestamp
        && *labels == b.labels
        && *annotations == b.annotations
}

fn status_same(a: &QuotaStatus, b: &QuotaStatus) -> bool {
    let QuotaStatus {
        hard,
        used,
        self_used,
        last_reconcile_time: _,
        children,
        workloads,
        cash_accrued,
        budgets,
        reservations,
        loans,
        loan_generation,
        loan_fence,
        lent,
        borrowed,
        reclaim,
        transfers,
        summary: _,
        queue,
        queue_summary,
        fair_sharing: _,
        users,
        deleted,
        ledger: _,
        ledger_outbox: _,
        quality_billed_to: _,
        readable: _,
        refunds,
        exhausted,
    } = a;
    *hard == b.hard
        && *used == b.used
        && *self_used == b.self_used
        && *children == b.children
        && *workloads == b.workloads
        && *cash_accrued == b.cash_accrued
        && *budgets == b.budgets
        && *reservations == b.reservations
        && *loans == b.loans
        && *loan_generation == b.loan_generation
        && *loan_fence == b.loan_fence
        && *lent == b.lent
        && *borrowed == b.borrowed
        && *reclaim == b.reclaim
        && *transfers == b.transfers
        && *queue == b.queue
        && *queue_summary == b.queue_summary
        && *users == b.users
        && *deleted == b.deleted
        && *refunds == b.refunds
        && *exhausted == b.exhausted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Charge, Quota};

    fn charge() -> Charge {
        Charge {
            pod_sets: Vec::new(),
            hpa: None,
            since: "2026-12-05T00:00:00.000Z".into(),
            uid: "u".into(),
            admitted: None,
        }
    }

    fn quota() -> Quota {
        let mut q: Quota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cq-0-0", "uid": "u1", "resourceVersion": "7"},
            "spec": {"parent": "cohort-0", "hard": {"requests.cpu": "20"},
                     "max": {"requests.cpu": "120"}, "queueing": "Queue"},
        }))
        .unwrap();
        q.status.hard = q.spec.hard.clone();
        q
    }

    #[test]
    fn what_no_round_reads_may_differ() {
        let a = quota();
        let mut b = a.clone();
        b.metadata.resource_version = Some("8".into());
        b.status.last_reconcile_time = Some("2026-12-05T05:00:00Z".into());
        b.status.fair_sharing = Some(Default::default());
        b.status
            .readable
            .insert("cash".into(), "0.42 of 1000".into());
        b.status.quality_billed_to = Some("org".into());
        b.status.summary = Some(Default::default());
        b.status.ledger_outbox = Some(crate::object::budgets::Outbox {
            from_ms: 1,
            to_ms: 2,
            entries: Vec::new(),
            extra: Vec::new(),
        });
        assert!(reads_same(&a, &b));
        assert!(reads_same(&b, &a));
    }

    #[test]
    fn what_a_round_reads_may_not() {
        let a = quota();
        type Change = fn(&mut Quota);
        let changes: [(&str, Change); 12] = [
            ("uid", |q| q.metadata.uid = Some("u2".into())),
            ("annotation", |q| {
                q.metadata.annotations.insert("a".into(), "b".into());
            }),
            ("spec.hard", |q| {
                q.spec
                    .hard
                    .insert("requests.cpu".into(), "21".parse().unwrap());
            }),
            ("used", |q| {
                q.status
                    .used
                    .insert("requests.cpu".into(), "1".parse().unwrap());
            }),
            ("a charge", |q| {
                q.status.workloads.insert("ml/Job/j".into(), charge());
            }),
            ("a loan", |q| q.status.loan_generation = 1),
            ("the fence", |q| q.status.loan_fence = 1),
            ("lent", |q| {
                q.status
                    .lent
                    .insert("requests.cpu".into(), "1".parse().unwrap());
            }),
            ("borrowed", |q| {
                q.status
                    .borrowed
                    .insert("requests.cpu".into(), "1".parse().unwrap());
            }),
            ("a queue summary", |q| {
                q.status.queue_summary = Some(Default::default())
            }),
            ("a submitter", |q| {
                q.status.users.insert("alice".into(), "1".into());
            }),
            ("exhausted", |q| {
                q.status.exhausted.insert("cash".into(), "now".into());
            }),
        ];
        for (what, change) in changes {
            let mut b = a.clone();
            change(&mut b);
            assert!(!reads_same(&a, &b), "{what}");
            assert!(!reads_same(&b, &a), "{what}");
        }
    }
}
