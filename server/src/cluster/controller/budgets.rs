//! What the controller enforces of budgets (docs/budgets.md §2, §4):
//!
//! - **Refunds.** A workload stopped by reclaim gets back what its quota's
//!   `refund` policy says, in the same status write (compare-and-swap on
//!   the borrower) that removes its reclaim mark, so a mark is refunded at
//!   most once whichever replica leads (`refunds_in`). After the write:
//!   the entries appended to the ledger (spawned and retried, before
//!   anything awaits), a `Refunded` Event on the workload, and an audit
//!   record (`record_refund_entries`, `budget.refund`).
//! - **Declared run time.** A workload that declared its run time with the
//!   annotation `biz.group.resource.quota/max-runtime` and still runs at
//!   its end is suspended (Job-like kinds only), with a `RunTimeExceeded`
//!   Event. `activeDeadlineSeconds` is Kubernetes' own to enforce.
//! - **Exhaustion.** A cash key whose policy is `suspendBatch` and whose
//!   budget is spent keeps `status.exhausted[key]` (since when), in the
//!   reconcile's own write; once the grace is over its batch workloads are
//!   suspended in reclaim's order (`BudgetExhausted` Events, audited as
//!   `budget.suspend`). Online services and scalable kinds are never
//!   touched.
//!
//! The decisions are `quota::budget::{enforce, refund}`'s; here is the I/O.

use super::Context;
use crate::authz::SYSTEM_ACTOR;
use crate::cluster::events::quota_ref;
use crate::service::notify::Notice;
use crate::store::audit::{action, entry};
use quota::budget::enforce::{self, Running};
use quota::budget::price_list::{accrue_priced, Holding};
use quota::budget::{reservations, to_quantity, PriceList};
use quota::cash::QosMultipliers;
use quota::keys::cash_target;
use quota::object::budgets::Entry;
use quota::object::budgets::{Exhaustion, RefundPolicy};
use quota::object::marks::{Action, Mark};
use quota::pods::PodRun;
use quota::reclaim::{self, Candidate, Stop, Victim};
use quota::reclaim::{on_exhausted, ExhaustionPlan};
use quota::workload::runtime::{parse_duration, MAX_RUNTIME_ANNOTATION};
use quota::workload::{adapter_of, WorkloadRef};
use quota::Quota;
use std::collections::BTreeMap;

/// The pod runs a refund reads, copied out of the view before the
/// compare-and-swap: of each workload that may be stopped, and all of the
/// quota's (what its next reconcile bills).
#[derive(Clone, Debug, Default)]
pub(super) struct RefundRuns {
    pub of: BTreeMap<String, Vec<PodRun>>,
    pub all: Vec<PodRun>,
}

/// A refund taken into a borrower's status: which workload, which mark.
#[derive(Clone, Debug)]
pub(super) struct Taken {
    pub workload: String,
    pub mark: String,
    pub entries: Vec<Entry>,
}

/// Inside the borrower's compare-and-swap, after its marks were reconciled:
/// the refunds due to the workloads reclaim stops now (`due`, whose marks
/// `before` held), taken into `q`'s status. A workload is refunded for its
/// run since it was charged (`Charge::since`) up to `now`, from the runs
/// the controller still holds of its pods (`runs`), at the prices in force
/// — never more than that, nor than the period has spent once what its
/// runs accrued since `lastReconcileTime` is billed (`runs.all`: every
/// run of the quota, which its next reconcile bills).
pub(super) fn refunds_in(
    q: &mut Quota,
    due: &[Victim],
    before: &BTreeMap<String, Mark>,
    runs: &RefundRuns,
    now: i64,
    prices: &QosMultipliers,
    list: &PriceList,
) -> Vec<Taken> {
    let policies: Vec<(String, String, RefundPolicy, quota::object::period::Period)> = q
        .spec
        .budgets
        .iter()
        .filter(|(k, p)| p.refund != RefundPolicy::None && q.spec.hard.contains_key(*k))
        .filter_map(|(k, p)| {
            cash_target(k).map(|t| (k.clone(), t.to_string(), p.refund, p.period.clone()))
        })
        .collect();
    if policies.is_empty() {
        return Vec::new();
    }
    // Stopped now. What the status has not billed yet (since
    // `lastReconcileTime`) its next reconcile bills from the same pod runs
    // (`runs.all`, all of the borrower's): it counts as spent for the cap.
    let stopped = now;
    let billed = q
        .status
        .last_reconcile_time
        .as_deref()
        .and_then(quota::time::parse_rfc3339)
        .unwrap_or(now)
        .min(now);
    let intervals: Vec<_> = runs.all.iter().map(PodRun::interval).collect();
    let pairs: Vec<(String, String)> = policies
        .iter()
        .map(|(k, t, _, _)| (k.clone(), t.clone()))
        .collect();
    let pending =
        quota::budget::price_list::accrue_weighted(&intervals, &pairs, billed, now, prices, list);
    let mut taken = Vec::new();
    for v in due.iter().filter(|v| v.action.stops()) {
        let Some(mark) = before.get(&v.workload_ref) else {
            continue;
        };
        let Some(start) = q
            .status
            .workloads
            .get(&v.workload_ref)
            .and_then(|c| quota::time::parse_rfc3339(&c.since))
        else {
            continue;
        };
        let namespace = WorkloadRef::parse(&v.workload_ref)
            .map(|r| r.namespace)
            .unwrap_or_default();
        let pod_runs = runs
            .of
            .get(&v.workload_ref)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let holdings: Vec<Holding<'_>> = pod_runs
            .iter()
            .map(|r| Holding {
                workload: &v.workload_ref,
                namespace,
                user: None,
                usage: &r.usage,
                qos: r.qos,
                start_ms: r.start_ms,
                end_ms: r.end_ms,
            })
            .collect();
        let mut spent = enforce::spent(&q.status);
        for (k, per_mille) in &pending {
            *spent.entry(k.clone()).or_insert(0) += quota::budget::from_cash_accrued(*per_mille);
        }
        let note = format!(
            "reclaimed by {}'s lenders (mark of {})",
            q.name(),
            mark.marked
        );
        // A stretch of a run is refunded once: a workload marked again
        // (its stop failed, or a replica deciding on a stale view marked
        // it anew) gets back only what it ran since its last refund.
        let not_before = enforce::refunded_until(&q.status, &v.workload_ref).unwrap_or(i64::MIN);
        let mut entries = Vec::new();
        for (key, target, policy, period) in &policies {
            let accruals = accrue_priced(
                q.name(),
                &holdings,
                &[(key.clone(), target.clone())],
                start,
                stopped,
                prices,
                list,
                period,
            );
            entries.extend(enforce::refund_due_after(
                policy, start, stopped, not_before, &accruals, &spent, &note,
            ));
        }
        let entries =
            enforce::take_refund(&mut q.status, &v.workload_ref, &mark.marked, entries, now);
        if !entries.is_empty() {
            taken.push(Taken {
                workload: v.workload_ref.clone(),
                mark: mark.marked.clone(),
                entries,
            });
        }
    }
    if !taken.is_empty() {
        let spec = q.spec.clone();
        q.status.refresh(&spec);
    }
    taken
}

/// In words: `1.5 core-hours of cash/requests.cpu`.
fn amounts(entries: &[Entry]) -> String {
    enforce::refunded_total(entries)
        .iter()
        .map(|(k, acc)| format!("{} of {k}", quota::readable::cash(k, to_quantity(*acc))))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Context {
    /// The runs of the pods of the workloads `plan` may stop in `quota`, for
    /// `refunds_in` (read before the compare-and-swap; the view is not
    /// locked inside it).
    pub(super) fn runs_for_refund(&self, quota: &str, plan: &[Victim]) -> RefundRuns {
        let v = self.view.lock().unwrap();
        let of: BTreeMap<String, Vec<PodRun>> = plan
            .iter()
            .filter(|p| p.quota == quota && p.action.stops())
            .map(|p| {
                (
                    p.workload_ref.clone(),
                    v.runs_of_workload(&p.workload_ref, quota),
                )
            })
            .collect();
        let all = if of.is_empty() {
            Vec::new()
        } else {
            v.pod_runs.runs_of(quota).cloned().collect()
        };
        RefundRuns { of, all }
    }

    /// After the write that took them: the entries to the budget ledger,
    /// then tell the workload's owners and audit them.
    pub(super) async fn refunded(&self, quota: &str, taken: &[Taken]) {
        // The ledger's part first, before anything here awaits: the append
        // is spawned (and retried), so a reconcile aborted from here on —
        // a leader that lost its Lease is stopped at once — cannot leave
        // the refund in the status and out of the ledger.
        for t in taken {
            self.append_ledger_soon(t.entries.clone());
        }
        for t in taken {
            self.service.metrics.count_reclaim("refunded");
            let (from, to) = (
                t.entries.iter().map(|e| e.start_ms).min().unwrap_or(0),
                t.entries.iter().map(|e| e.end_ms).max().unwrap_or(0),
            );
            self.notify_workload(
                &t.workload,
                false,
                "Reclaim",
                "Refunded",
                format!(
                    "bizrq {quota}: refunded {} for the work lost to reclaim ({} to {})",
                    amounts(&t.entries),
                    quota::time::format_rfc3339(from),
                    quota::time::format_rfc3339(to)
                ),
            );
            self.record_refund_entries(quota, &t.workload, &t.mark, &t.entries)
                .await;
        }
    }

    /// The audit of refund entries whose status write succeeded (the
    /// ledger has them from `refunded`, through `History::append_ledger`,
    /// idempotent: an entry's id is a hash of all its fields, the note
    /// naming the mark, so a retry adds nothing): one `budget.refund`
    /// audit record per refund, actor `bizrq`, target the quota, with the
    /// entries (amounts in acc, as decimal strings) in its `after`.
    pub(super) async fn record_refund_entries(
        &self,
        quota: &str,
        workload: &str,
        mark: &str,
        entries: &[Entry],
    ) {
        let Some(h) = &self.history else {
            tracing::info!(quota, workload, refund = %amounts(entries), "refunded (no audit log in this process)");
            return;
        };
        let e = entry(
            self.now(),
            SYSTEM_ACTOR,
            action::BUDGET_REFUND,
            quota,
            None,
            Some(serde_json::json!({
                "workload": workload,
                "mark": mark,
                "entries": entries,
            })),
            &format!(
                "{workload} refunded {} (reclaim mark of {mark})",
                amounts(entries)
            ),
        );
        if let Err(err) = h.append_audit(&e).await {
            tracing::error!(error = %err, quota, workload, "could not write the audit entry of a refund");
        }
    }

    /// Workloads of `quota` that declared their run time with the
    /// annotation, with when their run started and how long it may run
    /// (`enforce::Running::declared`: as their reservation says, if they
    /// hold one, else from their charge). Only charged, suspendable
    /// workloads count (a suspended Job holds no charge).
    pub(super) fn declared_runs(&self, q: &Quota) -> Vec<(String, i64, i64)> {
        // Only charged ones count: looked up one by one, never the
        // hundreds of finished objects a quota may keep.
        let v = self.view.lock().unwrap();
        q.status
            .workloads
            .iter()
            .filter(|(wref, _)| adapter_of(wref).map(Stop::of) == Some(Stop::Suspend))
            .filter_map(|(wref, charge)| {
                let text = v.annotation_of(q.name(), wref, MAX_RUNTIME_ANNOTATION)?;
                // A wrong annotation was refused or reported at admission.
                let run = parse_duration(text).ok()?;
                // Charged and running: a suspended Job keeps a charge of
                // no pods, and is not stopped again.
                if !charge.usage().values().any(|n| n.nanos() > 0) {
                    return None;
                }
                let reserved = q
                    .status
                    .reservations
                    .values()
                    .filter_map(|m| m.get(wref))
                    .min_by_key(|r| r.at_ms);
                let charged = quota::time::parse_rfc3339(&charge.since);
                let r = Running::declared(wref, run, reserved, charged)?;
                Some((wref.clone(), r.start_ms, r.run_ms))
            })
            .collect()
    }

    /// Suspend what ran past its declared run time; ask to run again at
    /// the next declared end.
    pub(super) async fn enforce_run_time(
        &self,
        quota: &str,
        runs: Vec<(String, i64, i64)>,
        now: i64,
    ) {
        let running: Vec<Running<'_>> = runs
            .iter()
            .map(|(w, start, run)| Running {
                workload: w,
                start_ms: *start,
                run_ms: *run,
            })
            .collect();
        let (over, next) = enforce::overdue(&running, now);
        if let Some(at) = next {
            self.wake_at(quota, at);
        }
        for w in over {
            let r = running.iter().find(|r| r.workload == w).unwrap();
            let why = format!(
                "bizrq {quota}: {w} declared a run time of {} ({MAX_RUNTIME_ANNOTATION}) and ran past it (since {}); suspended",
                quota::workload::runtime::format_duration(r.run_ms),
                quota::time::format_rfc3339(r.deadline_ms())
            );
            self.suspend(quota, w, "RunTimeExceeded", why).await;
        }
    }

    /// Suspend a Job-like workload through its own suspend flag (the
    /// webhook releases its charge, so the next reconcile does not find it
    /// again): an Event `reason` on it and an audit entry `budget.suspend`.
    async fn suspend(&self, quota: &str, wref: &str, reason: &'static str, why: String) {
        let v = Victim {
            quota: quota.to_string(),
            workload_ref: wref.to_string(),
            action: Action::Suspend,
            frees: Default::default(),
        };
        match self.execute(&v).await {
            Ok(()) => {
                self.notify_workload(wref, true, "Budget", reason, why.clone());
                if let Some(h) = &self.history {
                    let e = entry(
                        self.now(),
                        SYSTEM_ACTOR,
                        action::BUDGET_SUSPEND,
                        quota,
                        None,
                        Some(serde_json::json!({"workload": wref, "reason": reason})),
                        &why,
                    );
                    if let Err(err) = h.append_audit(&e).await {
                        tracing::error!(error = %err, quota, workload = wref, "could not write the audit entry of a suspension");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(quota, workload = wref, error = %e, reason, "suspending failed; the next reconcile retries");
            }
        }
    }

    /// The quota's batch candidates as reclaim sees them (for exhaustion).
    pub(super) fn candidates(&self, q: &Quota) -> Vec<Candidate> {
        let v = self.view.lock().unwrap();
        v.workloads_of(q.name())
            .filter(|(wref, _, _)| q.status.workloads.contains_key(wref))
            .map(|(wref, pod_sets, info)| Candidate {
                stop: adapter_of(wref).map_or(Stop::Never, Stop::of),
                priority: info.priority,
                online: reclaim::is_online(&info.labels, &info.annotations),
                created_ms: info.created_ms.unwrap_or(0),
                min_replicas: reclaim::min_replicas(&info.annotations),
                marked: q.status.reclaim.contains_key(wref),
                idle: false,
                pod_sets: pod_sets.to_vec(),
                workload_ref: wref.clone(),
            })
            .collect()
    }

    /// Act on the plans of spent `suspendBatch` budgets: suspend the batch
    /// work once the grace is over, warn (once per key and since-time)
    /// while it is pending, and ask to run again when it falls due.
    pub(super) async fn enforce_exhaustion(
        &self,
        quota: &str,
        uid: Option<String>,
        plans: Vec<(String, ExhaustionPlan)>,
    ) {
        for (key, plan) in plans {
            let Some(due) = plan.due_ms else { continue };
            if !plan.act {
                self.wake_at(quota, due);
                self.events.emit(Notice {
                    regarding: quota_ref(quota, uid.clone()),
                    warning: true,
                    reason: "BudgetExhausted",
                    action: "Budget",
                    note: format!(
                        "bizrq {quota}: {key} is spent; {} batch workload(s) using it will be suspended at {} unless it is topped up or a new period starts",
                        plan.suspend.len(),
                        quota::time::format_rfc3339(due)
                    ),
                });
                continue;
            }
            for w in &plan.suspend {
                let why = format!(
                    "bizrq {quota}: {key} is spent since {} and its policy suspends batch work after {} s (onExhausted suspendBatch); suspended",
                    plan.since_ms.map(quota::time::format_rfc3339).unwrap_or_default(),
                    (due - plan.since_ms.unwrap_or(due)) / 1000
                );
                self.suspend(quota, w, "BudgetExhausted", why).await;
            }
        }
    }
}

/// Inside the quota's reconcile write: for every cash key whose policy is
/// `suspendBatch`, whether it is spent (available − spent ≤ 0) and since
/// when, kept in `status.exhausted`; the plans of the spent ones.
/// `candidates` is asked only when some key is spent.
pub(super) fn exhaustion_in(
    q: &mut Quota,
    now: i64,
    candidates: impl Fn(&Quota) -> Vec<Candidate>,
) -> Vec<(String, ExhaustionPlan)> {
    let keys: Vec<(String, Exhaustion)> = q
        .spec
        .budgets
        .iter()
        .filter(|(k, p)| {
            matches!(p.on_exhausted, Exhaustion::SuspendBatch { .. })
                && q.spec.hard.contains_key(*k)
        })
        .map(|(k, p)| (k.clone(), p.on_exhausted))
        .collect();
    // A key whose policy no longer suspends forgets its time.
    q.status
        .exhausted
        .retain(|k, _| keys.iter().any(|(key, _)| key == k));
    let mut cands: Option<Vec<Candidate>> = None;
    let mut plans = Vec::new();
    for (key, policy) in keys {
        let Some(target) = cash_target(&key).map(str::to_string) else {
            continue;
        };
        let unspent = reservations::state_of(q, &key).unspent();
        let since = q
            .status
            .exhausted
            .get(&key)
            .and_then(|s| quota::time::parse_rfc3339(s));
        if unspent > 0 {
            q.status.exhausted.remove(&key);
            continue;
        }
        let cs = cands.get_or_insert_with(|| candidates(q));
        let plan = on_exhausted(&policy, unspent, since, now, &target, cs);
        match plan.since_ms {
            Some(s) if since != Some(s) => {
                q.status
                    .exhausted
                    .insert(key.clone(), quota::time::format_rfc3339(s));
            }
            None => {
                q.status.exhausted.remove(&key);
            }
            _ => {}
        }
        plans.push((key, plan));
    }
    plans
}
