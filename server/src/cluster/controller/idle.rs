//! Idle GPUs taken back (docs/real-usage.md): under `idle.action:
//! Suspend`, batch work idle past its quota's `idle.after` is marked in
//! `status.reclaim` (origin `idle`), told with a `ReclaimPending` Event,
//! and suspended through the reclaim path (`Context::execute`, a write
//! the admission webhook reviews like anyone's) once the reclaim grace is
//! over — unless it got busy meanwhile, when the mark is cleared.
//! Serving workloads are only told. The marks are reconciled by
//! `quota::reclaim::reconcile_marks_of(Origin::Idle, …)`, which leaves
//! the borrowing reclaim's and the queue's marks alone.

use super::Context;
use quota::object::idle::IdleAction;
use quota::object::marks::{Action, Origin};
use quota::real_usage::idle::{policy_of, standing, IdleNow, Standing};
use quota::reclaim::{reconcile_marks_of, Victim};
use quota::workload::adapter_of;
use quota::Quota;
use std::collections::{BTreeMap, HashMap};

/// Whether a workload is batch work idle reclaim may suspend: a kind with
/// a suspend flag (a Job, a Kubeflow or Volcano job).
pub fn suspendable(wref: &str) -> bool {
    adapter_of(wref).is_some_and(|a| !a.suspend_path.is_empty())
}

/// The workloads to suspend, by quota: idle past `after` under
/// `Suspend`, and suspendable.
pub fn victims(quotas: &[Quota], idle: &[IdleNow]) -> BTreeMap<String, Vec<Victim>> {
    let by_name: HashMap<&str, &Quota> = quotas.iter().map(|q| (q.name(), q)).collect();
    let mut out: BTreeMap<String, Vec<Victim>> = BTreeMap::new();
    for i in idle {
        let Some(q) = by_name.get(i.quota.as_str()) else {
            continue;
        };
        let policy = policy_of(q, |n| by_name.get(n).copied());
        if standing(&i.streak, &policy) != Standing::Told(IdleAction::Suspend)
            || !suspendable(&i.workload)
        {
            continue;
        }
        // Only what is still charged: a workload suspended already (its
        // charge released) may hold its cards until its pods are gone,
        // and is not suspended again.
        let Some(frees) = q.status.workloads.get(&i.workload).map(|c| c.usage()) else {
            continue;
        };
        out.entry(i.quota.clone()).or_default().push(Victim {
            quota: i.quota.clone(),
            workload_ref: i.workload.clone(),
            action: Action::Suspend,
            frees,
        });
    }
    out
}

impl Context {
    /// Marks, clears and carries out idle reclaim on every quota that has
    /// idle work to suspend or idle marks left.
    pub(super) async fn reclaim_idle(&self, quotas: &[Quota], idle: &[IdleNow], now: i64) {
        let mut plans = victims(quotas, idle);
        for q in quotas {
            if q.status.reclaim.values().any(|m| m.origin == Origin::Idle) {
                plans.entry(q.name().to_string()).or_default();
            }
        }
        let grace = self.cfg.reclaim_grace.as_millis() as i64;
        for (name, plan) in plans {
            let outcome = self
                .service
                .update_status(&name, false, |q| {
                    let o = reconcile_marks_of(
                        Origin::Idle,
                        &name,
                        &q.status.reclaim,
                        &plan,
                        now,
                        grace,
                    );
                    if o.changed {
                        q.status.reclaim = o.marks.clone();
                    }
                    Ok((o.changed, o))
                })
                .await;
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    tracing::warn!(quota = %name, error = %e, "idle reclaim: the marks could not be written");
                    continue;
                }
            };
            let why = |wref: &str| {
                idle.iter()
                    .find(|i| i.workload == wref)
                    .map(IdleNow::words)
                    .unwrap_or_else(|| "its GPUs sit idle".into())
            };
            for v in &outcome.marked {
                self.service.metrics.count_reclaim("marked");
                self.notify_workload(
                    &v.workload_ref,
                    true,
                    "Reclaim",
                    "ReclaimPending",
                    format!(
                        "bizrq {}: {}; suspended in {} s unless it gets busy (idle.action Suspend)",
                        v.quota,
                        why(&v.workload_ref),
                        self.cfg.reclaim_grace.as_secs()
                    ),
                );
            }
            for wref in &outcome.cleared {
                self.service.metrics.count_reclaim("cleared");
                self.notify_workload(
                    wref,
                    false,
                    "Reclaim",
                    "ReclaimCancelled",
                    format!(
                        "bizrq {name}: its GPUs are busy again (or it ended); it is not suspended"
                    ),
                );
            }
            for v in &outcome.due {
                match self.execute(v).await {
                    Ok(()) => {
                        self.service.metrics.count_reclaim("executed");
                        self.notify_workload(
                            &v.workload_ref,
                            true,
                            "Reclaim",
                            "Reclaimed",
                            format!(
                                "bizrq {}: suspended, {} (idle.action Suspend)",
                                v.quota,
                                why(&v.workload_ref)
                            ),
                        );
                    }
                    Err(e) => {
                        self.service.metrics.count_reclaim("failed");
                        tracing::warn!(workload = %v.workload_ref, error = %e, "idle reclaim failed");
                    }
                }
            }
        }
    }
}
