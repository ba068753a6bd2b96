//! `status.queue` as the writes change it (docs/queueing.md §4): join,
//! refresh, leave by deletion, and leave by admission — the last only in
//! the same write as the charge, so an entry is never in neither place
//! (lost) nor in both (charged twice).

use super::allowance;
use crate::admission::{self, Denial};
use crate::object::queue::QueueEntry;
use crate::object::queue::Queued;
use crate::object::queue::Waiting;
use crate::object::queueing::MAX_QUEUE;
use crate::object::{Charge, Quota};
use crate::resources::ResourceList;

/// How long an entry whose object has never been seen stays queued (2
/// minutes): the mutating webhook queues a CREATE before the API server
/// stores the object; past this the create is taken to have failed or
/// never to have been made (`expire_unseen`).
pub const UNSEEN_GRACE_MS: i64 = 120_000;

/// A new entry refused: the queue is full, or its submitter's share is.
/// Refused as a workload that cannot be admitted (`Denial::Invalid`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error(
        "bizrq {quota}: {workload_ref} cannot queue: the queue already holds {MAX_QUEUE} \
         workloads, the most it may; delete waiting work or raise the quota"
    )]
    Queue { quota: String, workload_ref: String },
    #[error(
        "bizrq {quota}: {workload_ref} cannot queue: {share} already has {held} workloads \
         waiting in this queue, the most one submitter may (queueing.maxPerSubmitter {cap}); \
         delete waiting work or wait for it to be admitted"
    )]
    Share {
        quota: String,
        workload_ref: String,
        /// Whom the share counts (`allowance::Share`'s words).
        share: String,
        held: usize,
        cap: usize,
    },
}

impl Full {
    /// Which bound refused it, as the metric's `cause` label spells it.
    pub fn cause(&self) -> &'static str {
        match self {
            Full::Queue { .. } => "queue_full",
            Full::Share { .. } => "submitter_share",
        }
    }
}

impl From<Full> for Denial {
    fn from(f: Full) -> Denial {
        Denial::Invalid(f.to_string())
    }
}

/// The entries of `status.queue` as admission reads them.
pub fn entries(q: &Quota) -> Vec<Queued> {
    q.status.queue.iter().map(|e| e.work.clone()).collect()
}

/// The entry of `wref` with the object uid `uid`, if queued.
pub fn find<'a>(q: &'a Quota, wref: &str, uid: &str) -> Option<&'a QueueEntry> {
    q.status
        .queue
        .iter()
        .find(|e| e.work.workload_ref == wref && e.work.uid == uid)
}

/// Whether `wref` waits in the queue (any uid).
pub fn holds(q: &Quota, wref: &str) -> bool {
    q.status.queue.iter().any(|e| e.work.workload_ref == wref)
}

/// The references `q`'s status lists, for many `holds` questions at
/// once (each `holds` walks the queue).
pub fn listed(q: &Quota) -> std::collections::HashSet<&str> {
    q.status
        .queue
        .iter()
        .map(|e| e.work.workload_ref.as_str())
        .collect()
}

/// Replace the queued `entry` of `work`'s reference by `work`; the same
/// object (uid) keeps its `since`, its submitter and its preemption.
/// Whether anything changed.
fn refresh(entry: &mut Queued, mut work: Queued) -> bool {
    if entry.uid == work.uid {
        work.submitted_ms = entry.submitted_ms;
        // Whoever changes it later, it was submitted by its creator.
        if entry.submitted_by.is_some() {
            work.submitted_by = entry.submitted_by.clone();
        }
        // A preempted entry stays one until it leaves the queue: a
        // refresh by the webhook must not make it admissible while its
        // workload still runs.
        work.preempted |= entry.preempted;
    }
    let changed = *entry != work;
    *entry = work;
    changed
}

/// Queue `work` (or refresh its entry: same reference and uid keep their
/// `since` and place, with the new pod sets, priority and run time), with
/// the position and reason the caller computed. An entry of the same
/// reference under another uid is an object deleted and made again: it is
/// replaced. Refused past `MAX_QUEUE`. Whether anything changed.
pub fn enqueue(
    q: &mut Quota,
    work: Queued,
    position: u32,
    waiting: Waiting,
    reason: String,
) -> Result<bool, Full> {
    if let Some(e) = q
        .status
        .queue
        .iter_mut()
        .find(|e| e.work.workload_ref == work.workload_ref)
    {
        return Ok(refresh(&mut e.work, work));
    }
    if q.status.queue.len() >= MAX_QUEUE {
        return Err(Full::Queue {
            quota: q.name().to_string(),
            workload_ref: work.workload_ref,
        });
    }
    q.status.queue.push(QueueEntry {
        work,
        position,
        waiting,
        reason,
        estimated_start: None,
    });
    Ok(true)
}

/// Queue `work` as a new submission (the mutating webhook): `enqueue`,
/// and refused when it would be a new entry past its submitter's share of
/// the queue (`QueuePolicy::per_submitter`, counted by `allowance::of`: a
/// person as themselves, service accounts and controllers as the
/// namespace they create in). A refresh of an entry already queued under
/// its reference is never refused.
pub fn join(
    q: &mut Quota,
    work: Queued,
    position: u32,
    waiting: Waiting,
    reason: String,
) -> Result<bool, Full> {
    if !holds(q, &work.workload_ref) {
        within_share(q, &work, q.status.queue.iter().map(|e| &e.work))?;
    }
    enqueue(q, work, position, waiting, reason)
}

/// `join` of each of `works` in turn, each at the position after the
/// entries before it, with one reason: the entries a round's fold
/// accepted (hundreds), joined with the queue indexed once instead of
/// walked per entry. Those `join` would refuse are left out. Whether
/// anything changed.
pub fn join_all(q: &mut Quota, works: Vec<Queued>, waiting: Waiting, reason: &str) -> bool {
    use std::collections::HashMap;
    let cap = q.spec.queueing.per_submitter();
    let share = allowance::key;
    let mut first: HashMap<String, usize> = HashMap::new();
    let mut held: HashMap<(bool, String), usize> = HashMap::new();
    for (i, e) in q.status.queue.iter().enumerate() {
        first.entry(e.work.workload_ref.clone()).or_insert(i);
        *held.entry(share(&e.work)).or_default() += 1;
    }
    let mut changed = false;
    for work in works {
        match first.get(&work.workload_ref) {
            Some(&i) => {
                // A refresh (`enqueue`): never refused; counted after it
                // under the share it then has.
                let e = &mut q.status.queue[i].work;
                let was = share(e);
                changed |= refresh(e, work);
                let now = share(e);
                if now != was {
                    if let Some(n) = held.get_mut(&was) {
                        *n -= 1;
                    }
                    *held.entry(now).or_default() += 1;
                }
            }
            None => {
                let mine = share(&work);
                if held.get(&mine).copied().unwrap_or(0) >= cap || q.status.queue.len() >= MAX_QUEUE
                {
                    continue;
                }
                *held.entry(mine).or_default() += 1;
                first.insert(work.workload_ref.clone(), q.status.queue.len());
                let position = u32::try_from(q.status.queue.len() + 1).unwrap_or(u32::MAX);
                q.status.queue.push(QueueEntry {
                    work,
                    position,
                    waiting,
                    reason: reason.to_string(),
                    estimated_start: None,
                });
                changed = true;
            }
        }
    }
    changed
}

/// Refused when `work`, a new entry, would be past its submitter's share
/// of `q`'s queue, whose entries are `queued` (`QueuePolicy::per_submitter`,
/// counted by `allowance::of`).
pub(crate) fn within_share<'a>(
    q: &Quota,
    work: &Queued,
    queued: impl Iterator<Item = &'a Queued>,
) -> Result<(), Full> {
    let cap = q.spec.queueing.per_submitter();
    let mine = allowance::of(work.submitted_by.as_deref(), &work.workload_ref);
    let held = queued
        .filter(|e| allowance::of(e.submitted_by.as_deref(), &e.workload_ref) == mine)
        .count();
    if held >= cap {
        return Err(Full::Share {
            quota: q.name().to_string(),
            workload_ref: work.workload_ref.clone(),
            share: mine.to_string(),
            held,
            cap,
        });
    }
    Ok(())
}

/// Remove the entries whose object was never seen (no uid: a CREATE's
/// entry the controller never named) and that joined `grace_ms` or more
/// before `now_ms`: their create was refused after the mutating webhook
/// queued it, or never happened. The references removed.
pub fn expire_unseen(q: &mut Quota, now_ms: i64, grace_ms: i64) -> Vec<String> {
    let mut removed = Vec::new();
    q.status.queue.retain(|e| {
        let expired =
            e.work.uid.is_empty() && now_ms.saturating_sub(e.work.submitted_ms) >= grace_ms;
        if expired {
            removed.push(e.work.workload_ref.clone());
        }
        !expired
    });
    removed
}

/// Queue `work`, a running workload of `q` whose preemption is due, in
/// the write that spends its mark and **before** it is suspended
/// (docs/queueing.md §6): `since` is its charge's (so it keeps its place
/// among its priority; `work.submitted_ms` where it holds none) and
/// `submittedBy` the user its admission recorded (`status.users`). The
/// entry is `preempted`: until the suspend has released its charge, no
/// round admits it and the controller suspends it. Refused past
/// `MAX_QUEUE` (the caller then leaves it running).
pub fn preempt(q: &mut Quota, mut work: Queued, reason: String) -> Result<bool, Full> {
    let charge = q.status.workloads.get(&work.workload_ref);
    if let Some(since) = charge.and_then(|c| crate::time::parse_rfc3339(&c.since)) {
        work.submitted_ms = since;
    }
    if let Some(u) = q.status.users.get(&work.workload_ref) {
        work.submitted_by = crate::submitters::submitter(u);
    }
    work.preempted = true;
    enqueue(q, work, 0, Waiting::Quota, reason)
}

/// Whether `wref` holds a charge of running pods in `q`.
pub fn runs(q: &Quota, wref: &str) -> bool {
    q.status
        .workloads
        .get(wref)
        .is_some_and(|c| c.usage().values().any(|v| v.nanos() > 0))
}

/// The entries queued by preemption whose workload still holds a charge
/// of running pods: the suspend that releases it has not been seen (not
/// made yet, failed, or the controller stopped between the two writes).
/// The controller suspends them; no round admits them meanwhile.
pub fn suspending(q: &Quota) -> Vec<&QueueEntry> {
    q.status
        .queue
        .iter()
        .filter(|e| e.work.preempted && runs(q, &e.work.workload_ref))
        .collect()
}

/// Whether a round may admit `e`: not a preempted entry still running.
pub fn admissible(q: &Quota, e: &Queued) -> bool {
    !(e.preempted && runs(q, &e.workload_ref))
}

/// Whether the controller has queue work on `q`: entries waiting, or a
/// charge made from the queue (whose object may still be suspended).
pub fn waits_or_admits(q: &Quota) -> bool {
    !q.status.queue.is_empty()
        || q.status
            .workloads
            .values()
            .any(|c| c.uid.starts_with(crate::object::QUEUE_CHARGE))
}

/// Remove `wref`'s entry (its workload was deleted): whether there was one.
pub fn dequeue(q: &mut Quota, wref: &str) -> bool {
    let before = q.status.queue.len();
    q.status.queue.retain(|e| e.work.workload_ref != wref);
    q.status.queue.len() != before
}

/// Admit the entry of `wref` with uid `uid`: `charge` written within
/// `limits` (as `admission::charge_within`) and the entry removed, in the
/// one change the caller writes. `Ok(false)` when the entry is no longer
/// queued (admitted or deleted meanwhile): nothing to do.
pub fn admit(
    q: &mut Quota,
    wref: &str,
    uid: &str,
    charge: Charge,
    limits: &ResourceList,
) -> Result<bool, Denial> {
    if find(q, wref, uid).is_none() {
        return Ok(false);
    }
    admission::charge_within(q, wref, charge, limits)?;
    dequeue(q, wref);
    Ok(true)
}

/// Positions and reasons rewritten from a round's `status` (entries no
/// longer queued are not brought back). Whether anything changed.
pub fn restate(q: &mut Quota, fresh: Vec<QueueEntry>) -> bool {
    use std::collections::HashSet;
    // By reference and uid, not a walk of the queue per entry: a round
    // restates hundreds, and the walks were quadratic in the queue.
    let queued: HashSet<(&str, &str)> = q
        .status
        .queue
        .iter()
        .map(|e| (e.work.workload_ref.as_str(), e.work.uid.as_str()))
        .collect();
    let refs: HashSet<&str> = queued.iter().map(|(r, _)| *r).collect();
    let mut named: HashSet<&str> = HashSet::with_capacity(refs.len());
    let mut next = Vec::with_capacity(q.status.queue.len());
    for f in fresh {
        let key = (f.work.workload_ref.as_str(), f.work.uid.as_str());
        if queued.contains(&key) {
            named.extend(refs.get(key.0).copied());
            next.push(f);
        }
    }
    // Entries that joined after the round was computed keep their place
    // at the end until the next round.
    for e in &q.status.queue {
        if named.insert(e.work.workload_ref.as_str()) {
            next.push(e.clone());
        }
    }
    let changed = next != q.status.queue;
    q.status.queue = next;
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::QuotaSpec;
    use crate::quantity::Quantity;
    use crate::workload::PodSet;

    const GPU: &str = "requests.nvidia.com/gpu";

    fn quota(gpus: i64) -> Quota {
        Quota::new(
            "nlp",
            QuotaSpec {
                hard: [(GPU.to_string(), Quantity::from_units(gpus))].into(),
                ..Default::default()
            },
        )
    }

    fn job(name: &str, uid: &str, gpus: i64, since: i64) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ml/{name}"),
            uid: uid.into(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: since,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: 1,
                per_pod: [(GPU.to_string(), Quantity::from_units(gpus))].into(),
                qos: Default::default(),
            }]
            .into(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
        }
    }

    #[test]
    fn a_refresh_keeps_since_and_a_new_uid_replaces() {
        let mut q = quota(4);
        assert!(enqueue(&mut q, job("a", "u1", 8, 10), 1, Waiting::Quota, "r".into()).unwrap());
        // Same object, new size: since kept.
        assert!(enqueue(&mut q, job("a", "u1", 6, 99), 1, Waiting::Quota, "r".into()).unwrap());
        assert_eq!(q.status.queue[0].work.submitted_ms, 10);
        assert_eq!(q.status.queue[0].work.usage()[GPU], Quantity::from_units(6));
        assert!(!enqueue(&mut q, job("a", "u1", 6, 99), 1, Waiting::Quota, "r".into()).unwrap());
        // Made again under the name: a new entry with its own since.
        assert!(enqueue(&mut q, job("a", "u2", 6, 99), 1, Waiting::Quota, "r".into()).unwrap());
        assert_eq!(q.status.queue.len(), 1);
        assert_eq!(q.status.queue[0].work.submitted_ms, 99);
    }

    #[test]
    fn the_queue_is_bounded() {
        let mut q = quota(4);
        for i in 0..MAX_QUEUE {
            q.status.queue.push(QueueEntry {
                work: job(&format!("j{i}"), "u", 8, 0),
                position: 0,
                waiting: Waiting::Quota,
                reason: String::new(),
                estimated_start: None,
            });
        }
        let e = enqueue(
            &mut q,
            job("last", "u", 8, 0),
            1,
            Waiting::Quota,
            "r".into(),
        )
        .unwrap_err();
        assert_eq!(e.cause(), "queue_full");
        let e = e.to_string();
        assert!(
            e.contains(&format!("already holds {MAX_QUEUE} workloads")),
            "{e}"
        );
        // A refresh of a queued entry is not a new one.
        assert!(enqueue(&mut q, job("j0", "u", 7, 0), 1, Waiting::Quota, "r".into()).is_ok());
    }

    #[test]
    fn one_submitter_holds_at_most_its_share_of_the_queue() {
        let mut q = quota(4);
        q.spec.queueing = crate::object::queueing::QueuePolicy {
            max_per_submitter: Some(2),
            ..crate::object::queueing::QueuePolicy::queue()
        };
        let by = |name: &str, who: Option<&str>| Queued {
            submitted_by: who.map(str::to_string),
            ..job(name, "", 8, 0)
        };
        let join_as = |q: &mut Quota, name: &str, who: Option<&str>| {
            join(q, by(name, who), 1, Waiting::Quota, "r".into())
        };
        join_as(&mut q, "m1", Some("mallory")).unwrap();
        join_as(&mut q, "m2", Some("mallory")).unwrap();
        let e = join_as(&mut q, "m3", Some("mallory")).unwrap_err();
        assert_eq!(e.cause(), "submitter_share");
        let e = e.to_string();
        assert_eq!(
            e,
            "bizrq nlp: batch/Job/ml/m3 cannot queue: \"mallory\" already has 2 workloads \
             waiting in this queue, the most one submitter may (queueing.maxPerSubmitter 2); \
             delete waiting work or wait for it to be admitted"
        );
        assert_eq!(q.status.queue.len(), 2, "nothing joined");
        // Others still queue; a refresh of a queued entry is never refused.
        join_as(&mut q, "a1", Some("alice")).unwrap();
        join_as(&mut q, "m1", Some("mallory")).unwrap();
        // Once one leaves, its submitter may queue again.
        dequeue(&mut q, "batch/Job/ml/m2");
        join_as(&mut q, "m3", Some("mallory")).unwrap();
    }

    #[test]
    fn service_accounts_and_controllers_count_as_the_namespace_they_create_in() {
        let mut q = quota(4);
        q.spec.queueing = crate::object::queueing::QueuePolicy {
            max_per_submitter: Some(2),
            ..crate::object::queueing::QueuePolicy::queue()
        };
        let join_as = |q: &mut Quota, ns: &str, name: &str, who: Option<&str>| {
            let work = Queued {
                workload_ref: format!("batch/Job/{ns}/{name}"),
                submitted_by: who.map(str::to_string),
                ..job(name, "", 8, 0)
            };
            join(q, work, 1, Waiting::Quota, "r".into())
        };
        // Two service accounts of team-a share team-a's allowance.
        join_as(
            &mut q,
            "team-a",
            "s1",
            Some("system:serviceaccount:team-a:one"),
        )
        .unwrap();
        join_as(
            &mut q,
            "team-a",
            "s2",
            Some("system:serviceaccount:team-a:two"),
        )
        .unwrap();
        let e = join_as(
            &mut q,
            "team-a",
            "s3",
            Some("system:serviceaccount:team-a:three"),
        )
        .unwrap_err();
        assert_eq!(e.cause(), "submitter_share");
        assert_eq!(
            e.to_string(),
            "bizrq nlp: batch/Job/team-a/s3 cannot queue: namespace \"team-a\" (its service \
             accounts and the controllers creating in it) already has 2 workloads waiting in \
             this queue, the most one submitter may (queueing.maxPerSubmitter 2); delete waiting \
             work or wait for it to be admitted"
        );
        // The CronJob controller creating in team-a is team-a too ...
        let cron = Some("system:serviceaccount:kube-system:cronjob-controller");
        assert!(join_as(&mut q, "team-a", "c1", cron).is_err());
        // ... and in team-b it is team-b's, whatever team-a holds.
        join_as(&mut q, "team-b", "c1", cron).unwrap();
        join_as(&mut q, "team-b", "c2", cron).unwrap();
        assert!(join_as(&mut q, "team-b", "c3", cron).is_err());
        // Work of nobody named counts as its namespace.
        join_as(&mut q, "team-c", "n1", None).unwrap();
        join_as(&mut q, "team-c", "n2", None).unwrap();
        assert!(join_as(&mut q, "team-c", "n3", None).is_err());
        // A person counts as themselves, in team-a as anywhere.
        join_as(&mut q, "team-a", "a1", Some("alice")).unwrap();
        join_as(&mut q, "team-b", "a2", Some("alice")).unwrap();
        assert!(join_as(&mut q, "team-c", "a3", Some("alice")).is_err());
        assert_eq!(q.status.queue.len(), 8);
        // Whose account it is does not matter: another namespace's account
        // creating in team-a counts as team-a.
        q.status.queue[0].work.submitted_by = Some("system:serviceaccount:other:x".into());
        assert!(join_as(
            &mut q,
            "team-a",
            "s3",
            Some("system:serviceaccount:team-a:one")
        )
        .is_err());
    }

    #[test]
    fn entries_never_seen_expire_after_the_grace_and_seen_ones_never() {
        let mut q = quota(4);
        for (name, uid, since) in [("old", "", 0), ("new", "", 50), ("seen", "u", 0)] {
            enqueue(
                &mut q,
                job(name, uid, 8, since),
                1,
                Waiting::Quota,
                "r".into(),
            )
            .unwrap();
        }
        assert!(expire_unseen(&mut q, 99, 100).is_empty(), "not yet");
        assert_eq!(expire_unseen(&mut q, 100, 100), ["batch/Job/ml/old"]);
        assert_eq!(expire_unseen(&mut q, i64::MAX, 100), ["batch/Job/ml/new"]);
        assert_eq!(q.status.queue.len(), 1);
        assert_eq!(q.status.queue[0].work.uid, "u", "a named entry stays");
    }

    #[test]
    fn admission_charges_and_leaves_the_queue_in_one_change() {
        let mut q = quota(4);
        enqueue(&mut q, job("a", "u1", 4, 10), 1, Waiting::Quota, "r".into()).unwrap();
        let w = job("a", "u1", 4, 10);
        // Another object under the name: not this admission's.
        assert_eq!(
            admit(
                &mut q,
                &w.workload_ref,
                "u9",
                w.charge(20),
                &ResourceList::new()
            ),
            Ok(false)
        );
        assert!(admit(
            &mut q,
            &w.workload_ref,
            "u1",
            w.charge(20),
            &ResourceList::new()
        )
        .unwrap());
        assert!(q.status.queue.is_empty());
        assert_eq!(q.status.workloads[&w.workload_ref].uid, "queue:u1");
        assert_eq!(q.status.used[GPU], Quantity::from_units(4));
        // Retried: the entry is gone, nothing is charged twice.
        assert_eq!(
            admit(
                &mut q,
                &w.workload_ref,
                "u1",
                w.charge(30),
                &ResourceList::new()
            ),
            Ok(false)
        );
        // What does not fit stays queued.
        let b = job("b", "u2", 1, 11);
        enqueue(&mut q, b.clone(), 1, Waiting::Quota, "r".into()).unwrap();
        assert!(admit(
            &mut q,
            &b.workload_ref,
            "u2",
            b.charge(20),
            &ResourceList::new()
        )
        .is_err());
        assert!(holds(&q, &b.workload_ref));
    }

    #[test]
    fn a_preempted_entry_keeps_its_charge_since_and_user_and_waits_for_its_suspend() {
        let mut q = quota(8);
        let w = job("low", "u1", 4, 500);
        let mut c = w.charge(100);
        c.since = crate::time::format_rfc3339(100);
        admission::charge(&mut q, &w.workload_ref, c).unwrap();
        q.status
            .users
            .insert(w.workload_ref.clone(), "alice".into());
        assert!(preempt(&mut q, w.clone(), "preempted".into()).unwrap());
        let e = &q.status.queue[0].work;
        assert_eq!(e.submitted_ms, 100, "since of its charge");
        assert_eq!(e.submitted_by.as_deref(), Some("alice"));
        assert!(e.preempted);
        // Still running: to be suspended, not admitted.
        assert_eq!(suspending(&q).len(), 1);
        assert!(!admissible(&q, e));
        // A webhook refresh keeps it preempted.
        let mut fresh = w.clone();
        fresh.submitted_by = Some("bob".into());
        enqueue(&mut q, fresh, 1, Waiting::Quota, "r".into()).unwrap();
        assert!(q.status.queue[0].work.preempted);
        assert_eq!(
            q.status.queue[0].work.submitted_by.as_deref(),
            Some("alice")
        );
        // The suspend went through the webhook: a charge of nothing.
        let mut zero = w.clone();
        let mut sets = zero.pod_sets.to_vec();
        sets[0].count = 0;
        zero.pod_sets = sets.into();
        admission::charge(&mut q, &w.workload_ref, zero.charge(200)).unwrap();
        assert!(suspending(&q).is_empty());
        assert!(admissible(&q, &q.status.queue[0].work));
        // Retried: the same entry, nothing doubled.
        preempt(&mut q, w.clone(), "preempted".into()).unwrap();
        assert_eq!(q.status.queue.len(), 1);
        assert_eq!(q.status.queue[0].work.submitted_ms, 100);
    }

    #[test]
    fn restate_keeps_late_joiners_and_drops_the_gone() {
        let mut q = quota(4);
        enqueue(&mut q, job("a", "u1", 8, 10), 0, Waiting::Quota, "".into()).unwrap();
        enqueue(&mut q, job("b", "u2", 8, 11), 0, Waiting::Quota, "".into()).unwrap();
        let fresh = vec![
            QueueEntry {
                work: job("b", "u2", 8, 11),
                position: 1,
                waiting: Waiting::Quota,
                reason: "waits".into(),
                estimated_start: None,
            },
            QueueEntry {
                work: job("gone", "u3", 8, 1),
                position: 2,
                waiting: Waiting::Quota,
                reason: "waits".into(),
                estimated_start: None,
            },
        ];
        assert!(restate(&mut q, fresh));
        let refs: Vec<&str> = q
            .status
            .queue
            .iter()
            .map(|e| e.work.workload_ref.as_str())
            .collect();
        assert_eq!(refs, ["batch/Job/ml/b", "batch/Job/ml/a"]);
        assert!(dequeue(&mut q, "batch/Job/ml/a"));
        assert!(!dequeue(&mut q, "batch/Job/ml/a"));
    }

    proptest::proptest! {
        /// `join_all` decides as `join` of each in turn: refreshes in
        /// place, new entries up to the submitter's share, the queue's
        /// positions as the joins would give them.
        #[test]
        fn join_all_equals_joins_one_by_one(
            listed in proptest::collection::vec((0u8..10, 0u8..3, 0u8..3), 0..12),
            works in proptest::collection::vec((0u8..14, 0u8..3, 0u8..3, 0i64..5), 0..20),
            share in proptest::option::of(1u32..5),
        ) {
            let users = ["", "alice", "bob"];
            let mk = |n: u8, uid: u8, by: u8, at: i64| {
                let mut w = job(&format!("j{n}"), &format!("u{uid}"), 1, at);
                w.submitted_by = (by > 0).then(|| users[by as usize].to_string());
                w
            };
            let mut q = quota(8);
            q.spec.queueing.max_per_submitter = share;
            for (n, uid, by) in &listed {
                let w = mk(*n, *uid, *by, 0);
                let _ = enqueue(&mut q, w, 1, Waiting::Quota, "listed".into());
            }
            let works: Vec<Queued> = works.iter().map(|(n, u, b, at)| mk(*n, *u, *b, *at)).collect();
            let mut one = q.clone();
            let mut want = false;
            for w in works.clone() {
                let position = u32::try_from(one.status.queue.len() + 1).unwrap();
                if let Ok(c) = join(&mut one, w, position, Waiting::Quota, "r".into()) {
                    want |= c;
                }
            }
            let mut all = q.clone();
            let got = join_all(&mut all, works, Waiting::Quota, "r");
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(&all.status.queue, &one.status.queue);
        }

        /// `restate` by lookups decides as its definition by walks: the
        /// round's entries still queued (same reference and uid), in the
        /// round's order, then each reference queued since, once.
        #[test]
        fn restate_equals_its_definition_by_walks(
            queued in proptest::collection::vec((0u8..8, 0u8..3), 0..14),
            fresh in proptest::collection::vec((0u8..10, 0u8..3, 0u32..20), 0..14),
        ) {
            let entry = |n: u8, uid: u8, position: u32| QueueEntry {
                work: job(&format!("j{n}"), &format!("u{uid}"), 1, 0),
                position,
                waiting: Waiting::Quota,
                reason: format!("at {position}"),
                estimated_start: None,
            };
            let mut q = quota(8);
            q.status.queue = queued.iter().map(|(n, u)| entry(*n, *u, 0)).collect();
            let fresh: Vec<QueueEntry> = fresh.iter().map(|(n, u, p)| entry(*n, *u, *p)).collect();
            let mut want = fresh
                .iter()
                .filter(|f| {
                    q.status.queue.iter().any(|e| {
                        e.work.workload_ref == f.work.workload_ref && e.work.uid == f.work.uid
                    })
                })
                .cloned()
                .collect::<Vec<_>>();
            for e in &q.status.queue {
                if !want.iter().any(|f| f.work.workload_ref == e.work.workload_ref) {
                    want.push(e.clone());
                }
            }
            let changed = want != q.status.queue;
            proptest::prop_assert_eq!(restate(&mut q, fresh), changed);
            proptest::prop_assert_eq!(&q.status.queue, &want);
        }
    }
}
