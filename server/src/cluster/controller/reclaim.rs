//! Reclaim among a parent's children (§5): borrowed capacity taken back,
//! whole workloads at a time, marked first and suspended or scaled down
//! after the grace period unless the pressure went away. The decisions are
//! `quota::reclaim`'s; here are the marks' status writes, the workload
//! writes (through the admission webhook, like anyone's) and their Events.

use super::Context;

use crate::cluster::view::kind_of_ref;
use crate::service::ServiceError;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use quota::borrow::Standing;
use quota::object::marks::Action;
use quota::reclaim::{self, Borrower, Candidate, Stop, Victim};
use quota::workload::{adapter_of, WorkloadRef};
use quota::ResourceList;
use std::collections::BTreeMap;

impl Context {
    /// Reclaim (§5) among the children of `parent`: what the borrowers must
    /// give back (quota pressure, and pods of children within their
    /// guarantee that cannot be scheduled), which whole workloads give it
    /// (`quota::reclaim::plan_fair`: from the largest share first), marked
    /// first and reclaimed after the grace
    /// period unless the pressure went away.
    pub(super) async fn reclaim(
        &self,
        p: &quota::Quota,
        kids: &[crate::store::Stored],
        now: i64,
    ) -> Result<(), ServiceError> {
        let standings = Standing::of_all(kids.iter().map(|s| &s.quota));
        // Idle borrowers give back first (real usage: idle for showAfter).
        let idle = self.idle.lock().unwrap().clone();
        let (pending, borrowers) = {
            let v = self.view.lock().unwrap();
            let pending: BTreeMap<String, ResourceList> = kids
                .iter()
                .map(|k| {
                    (
                        k.quota.name().to_string(),
                        v.unschedulable_usage(k.quota.name()),
                    )
                })
                .filter(|(_, u)| !u.is_empty())
                .collect();
            let borrowers: Vec<Borrower> = kids
                .iter()
                .filter_map(|k| {
                    let name = k.quota.name();
                    let borrowed = standings.get(name)?.borrowed.clone();
                    if borrowed.is_empty() {
                        return None;
                    }
                    let workloads = v
                        .unfinished_of(name)
                        .map(|(wref, pod_sets, info)| Candidate {
                            stop: adapter_of(wref).map_or(Stop::Never, Stop::of),
                            priority: info.priority,
                            online: reclaim::is_online(&info.labels, &info.annotations),
                            created_ms: info.created_ms.unwrap_or(0),
                            min_replicas: reclaim::min_replicas(&info.annotations),
                            marked: k.quota.status.reclaim.contains_key(wref),
                            idle: idle.contains(wref),
                            pod_sets: pod_sets.to_vec(),
                            workload_ref: wref.clone(),
                        })
                        .collect();
                    Some(Borrower {
                        quota: name.to_string(),
                        borrowed,
                        workloads,
                    })
                })
                .collect();
            (pending, borrowers)
        };
        let need = reclaim::need(p, &standings, &pending);
        // Taken first from the borrower with the largest fair share of
        // what the parent can lend (docs/queueing.md, "Fair sharing").
        let plan = if need.values().any(|q| q.nanos() > 0) {
            let weights = kids
                .iter()
                .map(|k| (k.quota.name().to_string(), k.quota.spec.fair_sharing.weight))
                .collect();
            reclaim::plan_fair(&borrowers, &need, &weights, &quota::fair::lendable(p))
        } else {
            Vec::new()
        };
        // A borrower whose queue chose a fair-share rule may take from
        // siblings that borrow more (docs/queueing.md §11): its victims
        // join the plan, marked and reclaimed as any.
        let mut plan = plan;
        let quotas: Vec<&quota::Quota> = kids.iter().map(|k| &k.quota).collect();
        for v in reclaim::for_fair_share(p, &quotas, &borrowers) {
            if !plan.iter().any(|w| w.workload_ref == v.workload_ref) {
                plan.push(v);
            }
        }
        let grace = self.cfg.reclaim_grace.as_millis() as i64;
        let mut executed = false;
        for k in kids {
            let name = k.quota.name();
            if k.quota.status.reclaim.is_empty() && !plan.iter().any(|v| v.quota == name) {
                continue;
            }
            // A workload stopped now is refunded (its quota's policy) in
            // the same write that removes its mark: once per mark, of what
            // the run accrued.
            let runs = self.runs_for_refund(name, &plan);
            let (prices, price_list) = (self.service.prices, self.service.price_list());
            let has_ledger = self.history.is_some();
            let (outcome, taken) = self
                .service
                .update_status(name, false, |q| {
                    let o = reclaim::reconcile_marks(name, &q.status.reclaim, &plan, now, grace);
                    let before = std::mem::take(&mut q.status.reclaim);
                    q.status.reclaim = if o.changed {
                        o.marks.clone()
                    } else {
                        before.clone()
                    };
                    let taken = super::budgets::refunds_in(
                        q,
                        &o.due,
                        &before,
                        &runs,
                        now,
                        &prices,
                        &price_list,
                    );
                    if has_ledger {
                        // The refund's entries ride in this write's outbox:
                        // a controller that stops right after it leaves
                        // them to the next reconcile's replay, not lost.
                        quota::object::budgets::Outbox::carry_extra(
                            &mut q.status.ledger_outbox,
                            now,
                            taken.iter().flat_map(|t| t.entries.clone()).collect(),
                        );
                    }
                    Ok((o.changed || !taken.is_empty(), (o, taken)))
                })
                .await?;
            self.refunded(name, &taken).await;
            for v in &outcome.marked {
                self.service.metrics.count_reclaim("marked");
                self.notify_workload(&v.workload_ref, true, "Reclaim", "ReclaimPending", format!(
                    "bizrq {}: borrowed capacity is needed back; {} in {} s unless the pressure goes away (frees {})",
                    v.quota, describe(&v.action), self.cfg.reclaim_grace.as_secs(), list(&v.frees)));
            }
            for wref in &outcome.cleared {
                self.service.metrics.count_reclaim("cleared");
                self.notify_workload(
                    wref,
                    false,
                    "Reclaim",
                    "ReclaimCancelled",
                    format!("bizrq {name}: the pressure went away; nothing will be reclaimed"),
                );
            }
            for v in &outcome.due {
                match self.execute(v).await {
                    Ok(()) => {
                        executed = true;
                        self.service.metrics.count_reclaim("executed");
                        self.notify_workload(
                            &v.workload_ref,
                            true,
                            "Reclaim",
                            "Reclaimed",
                            format!(
                                "bizrq {}: {} to give borrowed capacity back (frees {})",
                                v.quota,
                                describe(&v.action),
                                list(&v.frees)
                            ),
                        );
                    }
                    Err(e) => {
                        self.service.metrics.count_reclaim("failed");
                        tracing::warn!(workload = %v.workload_ref, error = %e, "reclaim failed");
                    }
                }
            }
        }
        if executed {
            // The room is back (the release returned the loans with it):
            // the queues waiting under this parent get a round, the one a
            // fair-share rule reclaimed for among them.
            self.touch_borrowers_under(p.name());
        }
        Ok(())
    }

    /// Carry out a reclaim: suspend a Job (or a Kubeflow job), or scale a
    /// scalable workload through its scale subresource. Both go through the
    /// admission webhook like any change, which releases the charge.
    pub(super) async fn execute(&self, v: &Victim) -> kube::Result<()> {
        let kind = kind_of_ref(&v.workload_ref).to_string();
        let Some(ar) = self.installed.lock().unwrap().get(&kind).cloned() else {
            return Ok(()); // the kind is gone, and the workload with it
        };
        let Some(WorkloadRef {
            namespace: ns,
            name,
            ..
        }) = WorkloadRef::parse(&v.workload_ref)
        else {
            return Ok(());
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        let pp = PatchParams::default();
        let result = match v.action {
            Action::Suspend => {
                // The kind's own suspend flag, e.g. spec.suspend or
                // spec.runPolicy.suspend (quota::workload's adapter table).
                let path = adapter_of(&v.workload_ref).map_or(&[][..], |a| a.suspend_path);
                let patch = path.iter().rev().fold(
                    serde_json::Value::Bool(true),
                    |inner, k| serde_json::json!({ *k: inner }),
                );
                api.patch(name, &pp, &Patch::Merge(patch)).await.map(|_| ())
            }
            Action::ScaleTo(n) => api
                .patch_scale(
                    name,
                    &pp,
                    &Patch::Merge(serde_json::json!({"spec": {"replicas": n}})),
                )
                .await
                .map(|_| ()),
        };
        match result {
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            r => r,
        }
    }
}

fn describe(a: &Action) -> String {
    match a {
        Action::Suspend => "suspended".into(),
        Action::ScaleTo(0) => "scaled to 0".into(),
        Action::ScaleTo(n) => format!("scaled down to {n}"),
    }
}

fn list(r: &ResourceList) -> String {
    r.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
