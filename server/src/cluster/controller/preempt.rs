//! Preemption from a quota's queue (docs/queueing.md §6, policy
//! `preemption: LowerPriority`): after a queue round, the first entry that
//! waits for quota may take room back from running batch work of lower
//! priority in the same quota. The choice is `quota::queue::preempt`'s;
//! it goes through the reclaim path's marks (`status.reclaim`, origin
//! `preempt`, so the parent's reclaim of loans never clears them nor they
//! its): the owners are warned, the grace period runs, and only then is
//! the workload suspended (`Context::execute`, through the webhooks like
//! anyone's write) and queued again. If the head is admitted otherwise,
//! deleted, or no longer needs them before they are due, the marks are
//! cancelled and the owners told.

use super::Context;
use crate::cluster::view::kind_of_ref;
use crate::service::ServiceError;
use kube::api::{Api, DynamicObject};
use quota::queue::{self, preempt, Pool, Preemption, Queued};
use quota::reclaim::{self, Candidate, Origin, Stop, Victim};
use quota::workload::{adapter_for_kind, WorkloadRef};

impl Context {
    /// Mark, cancel or carry out `name`'s preemptions as its queue stands
    /// now. Runs after each queue round, and while marks of its own
    /// remain (to cancel them once the queue no longer needs them).
    pub(super) async fn preempt_for_queue(&self, name: &str, now: i64) -> Result<(), ServiceError> {
        let q = self.service.get(name).await?.quota;
        let ours = q
            .status
            .reclaim
            .values()
            .any(|m| m.origin == Origin::Preempt);
        let wants =
            q.spec.queueing.preemption == Preemption::LowerPriority && !q.status.queue.is_empty();
        if !wants && !ours {
            return Ok(());
        }
        let found = if wants {
            self.preemption_plan(&q, now).await?
        } else {
            None
        };
        let (head, plan) = found.unwrap_or_default();
        let grace = self.cfg.reclaim_grace.as_millis() as i64;
        let outcome = self
            .service
            .update_status(name, false, |q| {
                let o = reclaim::reconcile_marks_of(
                    Origin::Preempt,
                    name,
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
            .await?;
        let metrics = &self.service.metrics;
        for v in &outcome.marked {
            metrics.count_preemption(name, "marked");
            self.notify_workload(
                &v.workload_ref,
                true,
                "Preempt",
                "PreemptionPending",
                format!(
                    "bizrq {name}: {head}, of higher priority, waits in the queue for this room; \
                     suspended in {} s unless room frees otherwise (frees {}), then queued again",
                    self.cfg.reclaim_grace.as_secs(),
                    words(&v.frees)
                ),
            );
        }
        for wref in &outcome.cleared {
            metrics.count_preemption(name, "cancelled");
            self.notify_workload(
                wref,
                false,
                "Preempt",
                "PreemptionCancelled",
                format!(
                    "bizrq {name}: the queue no longer needs this room; nothing will be preempted"
                ),
            );
        }
        for v in &outcome.due {
            self.carry_out(name, &q, &head, v).await;
        }
        // Nothing else happens when a mark falls due: run again then.
        let next_due = outcome
            .marks
            .values()
            .filter(|m| m.origin == Origin::Preempt)
            .filter_map(|m| quota::time::parse_rfc3339(&m.due))
            .min();
        if let Some(at) = next_due {
            let mut w = self.wake.lock().unwrap();
            let e = w.entry(name.to_string()).or_insert(at);
            *e = (*e).min(at);
        }
        Ok(())
    }

    /// The head and its victims this round (`preempt::for_queue`), over the
    /// entries whose object the watch has seen, each judged at the
    /// priority of its classes now, against the running work of the quota
    /// as the watch shows it.
    async fn preemption_plan(
        &self,
        q: &quota::Quota,
        now: i64,
    ) -> Result<Option<(String, Vec<Victim>)>, ServiceError> {
        let classes = self.service.priorities.classes().await.ok();
        let resolve = |names: &[String], seen: i32| -> i32 {
            classes
                .as_ref()
                .map_or(seen, |c| c.resolve(names).value.max(seen))
        };
        let (known, running) = {
            let v = self.view.lock().unwrap();
            let known: Vec<Queued> = queue::ledger::entries(q)
                .into_iter()
                .filter(|e| {
                    !e.uid.is_empty() && v.workload_uid(&e.workload_ref).as_deref() == Some(&e.uid)
                })
                .map(|mut e| {
                    if let Some(c) = &classes {
                        e.priority = c.resolve(&e.priority_classes).value;
                    }
                    e
                })
                .collect();
            let running: Vec<Candidate> = v
                .workloads_of(q.name())
                .into_iter()
                .filter(|(wref, sets, _)| {
                    !queue::ledger::holds(q, wref) && sets.iter().any(|s| s.count > 0)
                })
                .map(|(wref, pod_sets, info)| Candidate {
                    stop: adapter_of(&wref).map_or(Stop::Never, Stop::of),
                    // Its pods' priority, or its templates' classes where
                    // no pod shows one yet: never judged lower than either.
                    priority: resolve(&info.priority_classes, info.priority),
                    online: reclaim::is_online(&info.labels, &info.annotations),
                    created_ms: info.created_ms.unwrap_or(0),
                    min_replicas: None,
                    marked: q
                        .status
                        .reclaim
                        .get(&wref)
                        .is_some_and(|m| m.origin == Origin::Preempt),
                    pod_sets,
                    workload_ref: wref,
                })
                .collect();
            (known, running)
        };
        if known.is_empty() {
            return Ok(None);
        }
        let limits = self.service.queue_limits(q).await?;
        let pool = Pool::new(q, &limits);
        let budgets = queue::budgets::of(q);
        let price_list = self.service.price_list();
        let views: Vec<_> = budgets
            .iter()
            .map(|b| b.view(&self.service.prices, &price_list))
            .collect();
        Ok(preempt::for_queue(
            &known,
            &pool,
            &views,
            &q.spec.queueing,
            now,
            &running,
        ))
    }

    /// A preemption due: suspend the victim (the reclaim path's own
    /// execution, through the webhooks, which release its charge), then
    /// queue it again with its charge's `since`.
    async fn carry_out(&self, name: &str, q: &quota::Quota, head: &str, v: &Victim) {
        let metrics = &self.service.metrics;
        // What it runs, as the watch shows it before the suspend (after
        // it, the watch shows 0 pods): what it runs once admitted again.
        let seen = self
            .view
            .lock()
            .unwrap()
            .workloads_of(name)
            .into_iter()
            .find(|(w, _, _)| *w == v.workload_ref);
        if let Err(e) = self.execute(v).await {
            metrics.count_preemption(name, "failed");
            tracing::warn!(workload = %v.workload_ref, error = %e, "preemption failed; the next round marks it afresh if still needed");
            return;
        }
        metrics.count_preemption(name, "executed");
        self.notify_workload(
            &v.workload_ref,
            true,
            "Preempt",
            "Preempted",
            format!(
                "bizrq {name}: suspended for {head}, of higher priority (frees {}); queued again, \
                 admitted when it fits",
                words(&v.frees)
            ),
        );
        let since = q
            .status
            .workloads
            .get(&v.workload_ref)
            .and_then(|c| quota::time::parse_rfc3339(&c.since));
        let Some((_, pod_sets, info)) = seen else {
            return;
        };
        let Some(work) = self.requeued(v, pod_sets, info, since).await else {
            return;
        };
        if let Err(e) = self.service.requeue_preempted(name, work).await {
            tracing::warn!(workload = %v.workload_ref, error = %e, "a preempted workload could not be queued again");
        }
    }

    /// The entry of a preempted workload: what it ran, its classes and
    /// declared run time (read from the object), its uid. None when the
    /// object is gone.
    async fn requeued(
        &self,
        v: &Victim,
        pod_sets: Vec<quota::workload::PodSet>,
        info: crate::cluster::view::WorkloadInfo,
        since: Option<i64>,
    ) -> Option<Queued> {
        if pod_sets.iter().all(|s| s.count == 0) {
            return None;
        }
        let kind = kind_of_ref(&v.workload_ref).to_string();
        let ar = self.installed.lock().unwrap().get(&kind).cloned()?;
        let r = WorkloadRef::parse(&v.workload_ref)?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), r.namespace, &ar);
        let obj = api.get_opt(r.name).await.ok().flatten()?;
        let json = serde_json::to_value(&obj).ok()?;
        Some(Queued {
            workload_ref: v.workload_ref.clone(),
            uid: obj.metadata.uid.clone().unwrap_or(info.uid),
            priority: info.priority,
            priority_classes: queue::priority::class_names(&json),
            submitted_ms: since.or(info.created_ms).unwrap_or_else(|| self.now()),
            pod_sets,
            run_ms: quota::budget::runtime::max_runtime(&json)
                .ok()
                .flatten()
                .map(|r| r.ms),
            // Queued again by the controller: who created it was not
            // recorded with its charge.
            submitted_by: None,
        })
    }
}

/// The adapter of the workload `wref` (`group/Kind/ns/name`).
fn adapter_of(wref: &str) -> Option<&'static quota::workload::Adapter> {
    let (group, kind) = kind_of_ref(wref).split_once('/')?;
    adapter_for_kind(group, kind)
}

fn words(r: &quota::ResourceList) -> String {
    r.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
