//! Preemption from a quota's queue (docs/queueing.md §6, policy
//! `preemption: LowerPriority`): after a queue round, the first entry that
//! waits for quota may take room back from running batch work of lower
//! priority in the same quota. The choice is `quota::queue::preempt`'s;
//! it goes through the reclaim path's marks (`status.reclaim`, origin
//! `preempt`, so the parent's reclaim of loans never clears them nor they
//! its): the owners are warned, the grace period runs, and only then is
//! the workload queued again and suspended. If the head is admitted
//! otherwise, deleted, or no longer needs them before they are due, the
//! marks are cancelled and the owners told.
//!
//! A due preemption spans two writes, so it is ordered for a crash between
//! them: **the queue entry first**, in the quota's compare-and-swap that
//! spends the mark (`ledger::preempt`: its charge's `since`, the user its
//! admission recorded, flagged `preempted`), **then the suspend** (a merge
//! PATCH of the suspend flag and the annotation `bizrq.io/preempted`,
//! through the webhooks, which release the charge). Between the two the
//! workload is queued and still charged: no round admits such an entry,
//! and every reconcile suspends it (`repair_preemptions`) until the
//! release shows. Nothing is lost (the entry is there before the job
//! stops), nothing is charged twice (the running charge is the only one
//! until the suspend releases it), and nothing is suspended twice by
//! plan (the mark is spent in the first write). A suspended workload that
//! carries the annotation but has no entry (one queued by an older
//! version, whose order was the reverse) is queued again; one suspended by
//! hand carries none and is never queued by the controller.

use super::Context;
use crate::cluster::view::kind_of_ref;
use crate::service::ServiceError;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use quota::object::marks::Origin;
use quota::object::queue::Queued;
use quota::object::queueing::Preemption;
use quota::queue;
use quota::queue::preempt::{self, Weighed};
use quota::reclaim::{self, Candidate, Stop, Victim};
use quota::workload::{adapter_of, WorkloadRef};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long after its suspend PATCH a workload still running in the view
/// is taken for the view lagging, not for a suspend that never happened:
/// the repair leaves it alone meanwhile (a second suspend would change
/// nothing, but tell its owner and count the preemption twice).
const SUSPEND_SEEN_WITHIN: Duration = Duration::from_secs(10);

impl Context {
    /// Mark, cancel or carry out `name`'s preemptions as its queue stands
    /// now. Runs after each queue round, and while marks of its own
    /// remain (to cancel them once the queue no longer needs them). The
    /// preemptions due, already queued in this step's write, are left in
    /// `due` for `carry_out_all`, once the caller no longer holds the
    /// quota.
    pub(super) async fn preempt_for_queue(
        &self,
        name: &str,
        now: i64,
        due: &mut Vec<(String, Victim)>,
    ) -> Result<Option<crate::service::Written>, ServiceError> {
        // As a whole read gives it (`Service::proven`).
        let q = self.service.proven(name).await?.quota;
        let ours = preempt::under_way(&q);
        let wants =
            q.spec.queueing.preemption == Preemption::LowerPriority && !q.status.queue.is_empty();
        if !wants && !ours {
            return Ok(None);
        }
        let found = if wants {
            self.preemption_plan(&q, now).await?.reclaim()
        } else {
            None
        };
        let (head, plan) = found.unwrap_or_default();
        // The queue's own grace when its policy names one (short work
        // cannot wait what a service's reclaim gives), else reclaim's.
        let grace = q
            .spec
            .queueing
            .preemption_grace_ms(self.cfg.reclaim_grace.as_millis() as i64);
        // What each victim joins the queue with, should it fall due: as the
        // watch shows it now, running (after the suspend it shows 0 pods).
        let works: BTreeMap<String, Queued> = {
            let v = self.view.lock().unwrap();
            plan.iter()
                .filter_map(|p| {
                    let (pod_sets, info) = v.workload_in(name, &p.workload_ref)?;
                    Some((&p.workload_ref, pod_sets, info))
                })
                .filter(|(_, sets, _)| sets.iter().any(|s| s.count > 0))
                .map(|(w, pod_sets, info)| {
                    let work = Queued {
                        workload_ref: w.clone(),
                        uid: info.uid.clone(),
                        priority: info.priority,
                        priority_classes: info.priority_classes.clone(),
                        submitted_ms: info.created_ms.unwrap_or(now),
                        pod_sets: pod_sets.to_vec().into(),
                        run_ms: info.run_ms,
                        submitted_by: None,
                        preempted: true,
                    };
                    (w.clone(), work)
                })
                .collect()
        };
        let reason = format!(
            "preempted for {head}, of higher priority; waits to be admitted again when it fits"
        );
        let ((outcome, queued), written) = self
            .service
            .update_status_stamped(name, |_, q| {
                let o = reclaim::reconcile_marks_of(
                    Origin::Preempt,
                    name,
                    &q.status.reclaim,
                    &plan,
                    now,
                    grace,
                );
                let mut changed = o.changed;
                if o.changed {
                    q.status.reclaim = o.marks.clone();
                }
                // Queued in the write that spends the mark, before the
                // suspend: a crash after this write leaves an entry to
                // repair, never a suspended job outside the queue.
                let mut queued = Vec::new();
                for v in &o.due {
                    let Some(work) = works.get(&v.workload_ref) else {
                        continue; // gone, or already stopped: nothing to take
                    };
                    // Past MAX_QUEUE it is not queued, so not suspended.
                    if let Ok(c) = queue::entries::preempt(q, work.clone(), reason.clone()) {
                        changed |= c;
                        queued.push(v.workload_ref.clone());
                    }
                }
                Ok((changed, (o, queued)))
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
                    grace / 1000,
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
            if queued.contains(&v.workload_ref) {
                due.push((head.clone(), v.clone()));
            } else {
                metrics.count_preemption(name, "failed");
                tracing::warn!(workload = %v.workload_ref, "preemption due but not queued (gone, stopped, or the queue is full); left running");
            }
        }
        // Nothing else happens when a mark falls due: run again then.
        let next_due = outcome
            .marks
            .values()
            .filter(|m| m.origin == Origin::Preempt)
            .filter_map(|m| quota::time::parse_rfc3339(&m.due))
            .min();
        if let Some(at) = next_due {
            self.wake_at(name, at);
        }
        // A mark that fell due is not what the round planned (its victim
        // may not have been queued: the queue full): the next round runs.
        Ok(written.filter(|_| outcome.due.is_empty()))
    }

    /// The running work of quota `q` a queue's preemption may weigh, as
    /// the watch shows it, each at its pods' priority or its templates'
    /// classes (as `classes` has them) where no pod shows one yet: never
    /// judged lower than either.
    pub(super) fn preemptible(
        &self,
        q: &quota::Quota,
        classes: Option<&quota::queue::priority::Classes>,
    ) -> Vec<Candidate> {
        let resolve = |names: &[String], seen: i32| -> i32 {
            classes.map_or(seen, |c| c.resolve(names).value.max(seen))
        };
        let v = self.view.lock().unwrap();
        v.unfinished_of(q.name())
            // Running something first: a quota holds hundreds of
            // suspended, queued objects, and `holds` walks the queue.
            .filter(|(wref, sets, _)| {
                sets.iter().any(|s| s.count > 0) && !queue::entries::holds(q, wref)
            })
            .map(|(wref, pod_sets, info)| Candidate {
                stop: adapter_of(wref).map_or(Stop::Never, Stop::of),
                priority: resolve(&info.priority_classes, info.priority),
                online: reclaim::is_online(&info.labels, &info.annotations),
                created_ms: info.created_ms.unwrap_or(0),
                min_replicas: None,
                marked: q
                    .status
                    .reclaim
                    .get(wref)
                    .is_some_and(|m| m.origin == Origin::Preempt),
                idle: false,
                pod_sets: pod_sets.to_vec(),
                workload_ref: wref.clone(),
            })
            .collect()
    }

    /// The head and its victims this round (`preempt::for_queue`), over the
    /// entries whose object the watch has seen, each judged at the
    /// priority of its classes now, against the running work of the quota
    /// as the watch shows it. A queue round weighs its own round instead
    /// (`admit_from_queue`).
    pub(super) async fn preemption_plan(
        &self,
        q: &quota::Quota,
        now: i64,
    ) -> Result<Weighed, ServiceError> {
        let classes = self.service.priorities.classes().await.ok();
        let (known, _) = self.known_entries(q, classes.as_deref());
        if known.is_empty() {
            return Ok(Weighed::Nothing);
        }
        let running = self.preemptible(q, classes.as_deref());
        // Nothing below the queue's highest priority runs (a backlog of
        // equals): no plan can take anything, so no round is walked.
        if !preempt::may_take(&known, &running) {
            return Ok(Weighed::Nothing);
        }
        // The same order as the round (`queue_pool`): by submitters' usage
        // where the policy asks, so the head planned for is the one admitted.
        let limits = self.service.round_plan(q).await?.0;
        let pool = self.queue_pool(q, &limits).await;
        let budgets = queue::budgets::of(q);
        let price_list = self.service.price_list();
        let views: Vec<_> = budgets
            .iter()
            .map(|b| b.view(&self.service.prices, &price_list))
            .collect();
        Ok(preempt::weigh(
            &known,
            &pool,
            &views,
            &q.spec.queueing,
            now,
            &running,
            None,
        ))
    }

    /// The preemptions `preempt_for_queue` left due, carried out at once
    /// without the quota held: each suspend is a write through the API
    /// server and both webhooks, seconds under load, and the quota's
    /// reconcile (a finished workload's charge released, docs/queueing.md
    /// §9) must not wait for them. Each victim is queued already (crash
    /// safety as before: a suspend not made is the repair's).
    pub(super) async fn carry_out_all(&self, name: &str, due: Vec<(String, Victim)>) {
        futures::future::join_all(due.iter().map(|(head, v)| self.carry_out(name, head, v))).await;
    }

    /// A preemption due, its entry already queued: suspend the victim
    /// (`suspend_preempted`), then tell its owner.
    async fn carry_out(&self, name: &str, head: &str, v: &Victim) {
        let metrics = &self.service.metrics;
        if let Err(e) = self.suspend_preempted(&v.workload_ref).await {
            metrics.count_preemption(name, "failed");
            tracing::warn!(workload = %v.workload_ref, error = %e, "preemption's suspend failed; queued already, the next reconcile suspends it");
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
    }

    /// Suspend a preempted workload: one merge PATCH of its adapter's
    /// suspend flag and the annotation `bizrq.io/preempted` (when), through
    /// the webhooks like anyone's write (the validating one releases its
    /// charge). Idempotent: a repeat changes nothing. Gone: nothing to do.
    pub(super) async fn suspend_preempted(&self, wref: &str) -> kube::Result<()> {
        let kind = kind_of_ref(wref).to_string();
        let Some(ar) = self.installed.lock().unwrap().get(&kind).cloned() else {
            return Ok(());
        };
        let (Some(r), Some(adapter)) = (WorkloadRef::parse(wref), adapter_of(wref)) else {
            return Ok(());
        };
        let mut patch = adapter.with_suspend(&serde_json::json!({}), true);
        patch["metadata"] = serde_json::json!({"annotations": {
            queue::PREEMPTED_ANNOTATION: quota::time::format_rfc3339(self.now())}});
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), r.namespace, &ar);
        match api
            .patch(r.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                self.just_suspended(wref);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => {
                // The write may have been made and only its answer lost:
                // seen suspended now, it is not suspended again by the
                // repair while the watch has yet to show it (a second
                // suspend would tell its owner and count it twice).
                if let Ok(Some(true)) = super::read_held(&api, r.name, adapter.hold()).await {
                    self.just_suspended(wref);
                }
                Err(e)
            }
        }
    }

    /// `wref` suspended by this controller now: the repair leaves it alone
    /// for `SUSPEND_SEEN_WITHIN`, while the watch catches up.
    fn just_suspended(&self, wref: &str) {
        let mut done = self.suspended.lock().unwrap();
        done.retain(|_, at| at.elapsed() < SUSPEND_SEEN_WITHIN);
        done.insert(wref.to_string(), Instant::now());
    }

    /// The repairs of a preemption interrupted between its two writes
    /// (module doc), run at each reconcile of `name` before its round:
    /// an entry queued by preemption whose workload still holds a charge
    /// of running pods is suspended; a workload suspended by preemption
    /// (annotated) that is neither queued nor charged is queued again,
    /// with its charge's `since` or its creation time.
    pub(super) async fn repair_preemptions(&self, name: &str, q: &quota::Quota) {
        let (suspend, requeue) = {
            let just_suspended = self.suspended.lock().unwrap().clone();
            let v = self.view.lock().unwrap();
            // Still running as the watch shows it (one it shows suspended
            // has had its suspend; the release follows it).
            let suspend: Vec<String> = queue::entries::suspending(q)
                .into_iter()
                .filter(|e| v.is_workload(&e.work.workload_ref, &e.work.uid))
                // Suspended by this controller a moment ago: the view lags.
                .filter(|e| {
                    just_suspended
                        .get(&e.work.workload_ref)
                        .is_none_or(|at| at.elapsed() >= SUSPEND_SEEN_WITHIN)
                })
                .filter(|e| {
                    v.workload_in(name, &e.work.workload_ref)
                        .is_some_and(|(sets, _)| sets.iter().any(|s| s.count > 0))
                })
                .map(|e| e.work.workload_ref.clone())
                .collect();
            let requeue: Vec<(
                String,
                Vec<quota::workload::PodSet>,
                crate::cluster::view::WorkloadInfo,
            )> = v
                .workloads_of(name)
                .filter(|(w, sets, info)| {
                    info.annotations.contains_key(queue::PREEMPTED_ANNOTATION)
                        && sets.iter().all(|s| s.count == 0)
                        && !queue::entries::holds(q, w)
                        && !queue::entries::runs(q, w)
                })
                .map(|(w, sets, info)| (w.clone(), sets.to_vec(), info.clone()))
                .collect();
            (suspend, requeue)
        };
        for wref in suspend {
            match self.suspend_preempted(&wref).await {
                Ok(()) => {
                    tracing::info!(quota = %name, workload = %wref, "preempted workload queued but still running: suspended");
                    self.service.metrics.count_preemption(name, "executed");
                    self.notify_workload(
                        &wref,
                        true,
                        "Preempt",
                        "Preempted",
                        format!("bizrq {name}: suspended for its quota's queue, as decided before; queued again, admitted when it fits"),
                    );
                }
                Err(e) => {
                    tracing::warn!(workload = %wref, error = %e, "preempted workload could not be suspended; the next reconcile tries again")
                }
            }
        }
        for (wref, _, info) in requeue {
            let since = q
                .status
                .workloads
                .get(&wref)
                .and_then(|c| quota::time::parse_rfc3339(&c.since));
            let Some(work) = self.requeued(&wref, info, since).await else {
                continue;
            };
            match self.service.requeue_preempted(name, work).await {
                Ok(_) => {
                    tracing::info!(quota = %name, workload = %wref, "preempted workload found suspended outside the queue: queued again")
                }
                Err(e) => {
                    tracing::warn!(workload = %wref, error = %e, "a preempted workload could not be queued again")
                }
            }
        }
    }

    /// The entry of a workload suspended by preemption: what it runs once
    /// unsuspended (read from the object, as the mutating webhook reads a
    /// queued one), its classes and declared run time, its uid. None when
    /// the object is gone or runs nothing.
    async fn requeued(
        &self,
        wref: &str,
        info: crate::cluster::view::WorkloadInfo,
        since: Option<i64>,
    ) -> Option<Queued> {
        let kind = kind_of_ref(wref).to_string();
        let ar = self.installed.lock().unwrap().get(&kind).cloned()?;
        let r = WorkloadRef::parse(wref)?;
        let adapter = adapter_of(wref)?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), r.namespace, &ar);
        let obj = api.get_opt(r.name).await.ok().flatten()?;
        let json = adapter.with_suspend(&serde_json::to_value(&obj).ok()?, false);
        let mut w = adapter.read(&json.to_string(), &self.service.keys).ok()?;
        // The API server's own status: a finished one is not admitted.
        w.finish();
        if w.pod_sets.iter().all(|s| s.count == 0) {
            return None;
        }
        Some(Queued {
            workload_ref: wref.to_string(),
            uid: obj.metadata.uid.clone().unwrap_or(info.uid),
            priority: info.priority,
            priority_classes: queue::priority::class_names(&json),
            submitted_ms: since.or(info.created_ms).unwrap_or_else(|| self.now()),
            pod_sets: w.pod_sets.into(),
            run_ms: quota::workload::runtime::max_runtime(&json)
                .ok()
                .flatten()
                .map(|r| r.ms),
            submitted_by: None,
            preempted: true,
        })
    }
}

fn words(r: &quota::ResourceList) -> String {
    r.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
