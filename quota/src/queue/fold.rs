//! The fold of marked, held objects into the queue a round plans over
//! (docs/queueing.md §12, "the second attempt", constraints 1, 3 and 4):
//! each mark is checked (`mark::accept`), what left is skipped
//! (`Pending::skips`), the caps hold over the status's entries and what
//! the fold adds, and what the object runs (its pod sets, run time and
//! priority classes) is read from the object, never from the mark. The
//! round plans only over the queue this returns: an entry the fold
//! refuses never takes room nor heads a strict FIFO queue.
//!
//! Pure; run by `Service::fold_marks` in the round when queue marks are on.

use super::allowance;
use super::entries::Full;
use super::mark::{self, Binding, Refused};
use super::pending::Pending;
use crate::object::queue::Queued;
use crate::object::queueing::MAX_QUEUE;
use crate::object::Quota;
use std::collections::HashMap;

/// A held object carrying a queue mark, as the controller's watch shows
/// it, owned: the watch's copy keeps one per held, marked object, built
/// when the object changes, and a round reads them shared instead of
/// copying what each runs every round (a quota holds hundreds while its
/// queue is long).
#[derive(Clone, Debug, PartialEq)]
pub struct MarkedObject {
    pub workload_ref: String,
    /// The annotation's value (`mark::ANNOTATION`).
    pub annotation: String,
    pub uid: String,
    /// Its `creationTimestamp` (ms; `i64::MAX` while unknown: no mark may
    /// claim a place before now).
    pub created_ms: i64,
    /// What it runs once released, read from the object.
    pub work: Queued,
}

/// A held object carrying a mark, as the controller's watch shows it.
#[derive(Clone, Debug)]
pub struct Marked<'a> {
    /// The annotation's value (`mark::ANNOTATION`).
    pub annotation: &'a str,
    /// The object it was read on.
    pub at: Binding<'a>,
    /// The object's uid.
    pub uid: &'a str,
    /// What the object runs, read from it unsuspended by its adapter:
    /// pod sets, run time, priority and priority classes. Its place and
    /// submitter are the mark's. Borrowed: a round folds hundreds and
    /// copies only what it keeps.
    pub work: &'a Queued,
}

/// Why a marked object is not in the queue a round plans over. It stays
/// held; the server tells its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotFolded {
    /// Its mark is not accepted (forged, misbound, hostile, unreadable).
    Mark(Refused),
    /// It left the queue (deleted, opted out): a stale copy.
    Left,
    /// The queue or its submitter's share is full.
    Full(Full),
}

/// What a fold gives the round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    /// The queue to plan over: the status's entries (refreshed from their
    /// objects where marked) and the entries accepted, in that order.
    pub queue: Vec<Queued>,
    /// The references added to the queue by this fold.
    pub added: Vec<String>,
    /// The marked objects left out, and why.
    pub refused: Vec<(String, NotFolded)>,
    /// The references in `queue` an accepted mark backs (added by this
    /// fold, or already queued and refreshed from their marked object):
    /// a status may leave them out (`summary::bound`), since the next fold
    /// takes them back from their objects at the same place.
    pub marked: std::collections::BTreeSet<String>,
}

/// Fold `marked` into `q`'s queue (call in the round's compare-and-swap
/// of `q`; the caller writes `queue` with the round's admissions).
/// `verify` is the MAC check of `mark::accept`.
pub fn fold(
    q: &Quota,
    marked: &[Marked<'_>],
    pending: &Pending,
    verify: impl Fn(&[u8], &str) -> bool,
) -> Folded {
    fold_within(
        q,
        marked,
        pending,
        &mut mark::Memo::default(),
        verify,
        MAX_QUEUE,
    )
}

/// `fold`, the marks read and verified through `memo` (kept by the
/// caller from one fold of `q` to the next: a text accepted once is not
/// read or verified again; `mark::Memo`), which it turns at the end.
pub fn fold_remembering(
    q: &Quota,
    marked: &[Marked<'_>],
    pending: &Pending,
    memo: &mut mark::Memo,
    verify: impl Fn(&[u8], &str) -> bool,
) -> Folded {
    let out = fold_within(q, marked, pending, memo, verify, MAX_QUEUE);
    memo.turn();
    out
}

fn fold_within(
    q: &Quota,
    marked: &[Marked<'_>],
    pending: &Pending,
    memo: &mut mark::Memo,
    verify: impl Fn(&[u8], &str) -> bool,
    max: usize,
) -> Folded {
    let mut out = Folded {
        queue: q.status.queue.iter().map(|e| e.work.clone()).collect(),
        ..Folded::default()
    };
    let cap = q.spec.queueing.per_submitter();
    // Each mark judged first, then the accepted ones taken in the order
    // of their places (the mark's `since`, then the name): first come
    // first, so a cap refuses the latest marks, never an older one. The
    // object's own `submitted_ms` says nothing of its place.
    let mut accepted: Vec<(&Marked<'_>, std::sync::Arc<mark::Mark>)> = Vec::new();
    for m in marked {
        let r = m.at.workload_ref.to_string();
        if pending.skips(&r, m.uid) {
            out.refused.push((r, NotFolded::Left));
            continue;
        }
        match memo.accept(m.annotation, &m.at, &verify) {
            Ok(a) => accepted.push((m, a)),
            Err(e) => out.refused.push((r, NotFolded::Mark(e))),
        }
    }
    accepted
        .sort_by(|(m, a), (n, b)| (a.since, m.at.workload_ref).cmp(&(b.since, n.at.workload_ref)));
    // The queue as it grows, indexed by reference and counted by share,
    // so each mark is placed in constant time: hundreds of marks are
    // folded by every round, twice (a walk of the queue per mark was
    // quadratic in its length). An entry a mark replaces is left as a
    // gap (`None`) and the rest keep their order.
    let mut queue: Vec<Option<Queued>> = std::mem::take(&mut out.queue)
        .into_iter()
        .map(Some)
        .collect();
    let mut by_ref: HashMap<String, Vec<usize>> = HashMap::new();
    let mut held: HashMap<(bool, String), usize> = HashMap::new();
    for (i, e) in queue.iter().flatten().enumerate() {
        by_ref.entry(e.workload_ref.clone()).or_default().push(i);
        *held.entry(allowance::key(e)).or_default() += 1;
    }
    let mut live = queue.len();
    for (m, accepted) in accepted {
        let r = m.at.workload_ref;
        let first = by_ref.get(r).and_then(|at| at.first().copied());
        if let Some(e) = first.and_then(|i| queue[i].as_mut()) {
            if e.uid.is_empty() || e.uid == m.uid {
                // Already queued: what it runs is read again from the
                // object (its pod sets shared, not copied: most rounds
                // fold the same hundreds of objects again); its place and
                // submitter stay as queued. Backed by its mark only where
                // the mark holds that very place (a preempted entry's
                // place is its charge's, not a mark's).
                let backed = !e.preempted && e.submitted_ms == accepted.since;
                refresh(e, m.work, m.uid);
                if backed {
                    out.marked.insert(r.to_string());
                }
                continue;
            }
        }
        let r = r.to_string();
        let mut work = m.work.clone();
        work.workload_ref.clone_from(&r);
        work.uid = m.uid.to_string();
        work.submitted_ms = accepted.since;
        work.submitted_by = (!accepted.by.is_empty()).then(|| accepted.by.clone());
        // An entry of the name under another uid is an earlier object's,
        // gone (two objects never hold one name at once): the new one
        // takes its own place, never the old one's.
        for i in by_ref.remove(&r).unwrap_or_default() {
            if let Some(old) = queue[i].take() {
                live -= 1;
                if let Some(n) = held.get_mut(&allowance::key(&old)) {
                    *n -= 1;
                }
            }
        }
        if live >= max {
            out.refused.push((
                r.clone(),
                NotFolded::Full(Full::Queue {
                    quota: q.name().to_string(),
                    workload_ref: r,
                }),
            ));
            continue;
        }
        let mine = allowance::key(&work);
        let n = held.get(&mine).copied().unwrap_or(0);
        if n >= cap {
            let full = Full::Share {
                quota: q.name().to_string(),
                workload_ref: r.clone(),
                share: allowance::of(work.submitted_by.as_deref(), &r).to_string(),
                held: n,
                cap,
            };
            out.refused.push((r, NotFolded::Full(full)));
            continue;
        }
        *held.entry(mine).or_default() += 1;
        live += 1;
        by_ref.entry(r.clone()).or_default().push(queue.len());
        out.marked.insert(r.clone());
        out.added.push(r);
        queue.push(Some(work));
    }
    out.queue = queue.into_iter().flatten().collect();
    out
}

/// A queued entry `e` read again from its marked object's `work` (uid
/// `uid`): what it runs, its priority and uid are the object's; its
/// reference, place and submitter stay the entry's; preempted if either
/// says so. Copies only what differs; the pod sets are shared.
fn refresh(e: &mut Queued, work: &Queued, uid: &str) {
    let Queued {
        workload_ref: _,
        uid: _,
        priority,
        priority_classes,
        submitted_ms: _,
        pod_sets,
        run_ms,
        submitted_by: _,
        preempted,
    } = work;
    if e.uid != uid {
        e.uid = uid.to_string();
    }
    e.priority = *priority;
    if e.priority_classes != *priority_classes {
        e.priority_classes.clone_from(priority_classes);
    }
    // Shared with the object's read (its copy, not the entry's, so a
    // quantity written in another format — `1Gi`, `1073741824` — is
    // written as the object now writes it).
    if !e.pod_sets.same(pod_sets) {
        e.pod_sets = pod_sets.clone();
    }
    e.run_ms = *run_ms;
    e.preempted |= *preempted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::queue::{QueueEntry, Waiting};
    use crate::object::QuotaSpec;
    use crate::queue::mark::sign;
    use crate::workload::PodSet;

    const T: i64 = 1_800_000_000_000;

    fn mac(b: &[u8]) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for x in b {
            h = (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    fn verify(b: &[u8], m: &str) -> bool {
        mac(b) == m
    }

    fn quota(share: Option<u32>) -> Quota {
        let mut spec = QuotaSpec::default();
        spec.queueing.max_per_submitter = share;
        Quota::new("ml", spec)
    }

    fn r(name: &str) -> &'static str {
        Box::leak(format!("batch/Job/ml/{name}").into_boxed_str())
    }

    fn object(name: &str, pods: i64, run_ms: Option<i64>) -> Queued {
        Queued {
            workload_ref: r(name).to_string(),
            uid: String::new(),
            priority: 0,
            priority_classes: Vec::new(),
            // Whatever the object says of its place is ignored.
            submitted_ms: 0,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: pods,
                per_pod: Default::default(),
                qos: None,
            }]
            .into(),
            run_ms,
            submitted_by: None,
            preempted: false,
        }
    }

    fn leak(work: Queued) -> &'static Queued {
        Box::leak(Box::new(work))
    }

    fn marked(name: &str, annotation: &'static str, since_created: i64) -> Marked<'static> {
        Marked {
            annotation,
            at: Binding {
                quota: "ml",
                workload_ref: r(name),
                created_ms: since_created,
                now_ms: T + 600_000,
            },
            uid: Box::leak(format!("uid-{name}").into_boxed_str()),
            work: leak(object(name, 1, Some(60_000))),
        }
    }

    fn signed(name: &str, since: i64, by: &str) -> &'static str {
        let m = sign("ml", r(name), since, 0, by, mac);
        Box::leak(serde_json::to_string(&m).unwrap().into_boxed_str())
    }

    #[test]
    fn accepted_marks_join_in_their_order_with_the_objects_own_work() {
        let q = quota(None);
        let f = fold(
            &q,
            &[
                marked("b", signed("b", T + 2, "bob"), T),
                marked("a", signed("a", T + 1, "alice"), T),
            ],
            &Pending::default(),
            verify,
        );
        assert_eq!(f.added, [r("a"), r("b")]);
        assert_eq!(f.queue[0].submitted_ms, T + 1);
        assert_eq!(f.queue[0].submitted_by.as_deref(), Some("alice"));
        assert_eq!(f.queue[0].uid, "uid-a");
        assert_eq!(f.queue[0].run_ms, Some(60_000), "read from the object");
        assert!(f.refused.is_empty());
        assert_eq!(
            f.marked.iter().map(String::as_str).collect::<Vec<_>>(),
            [r("a"), r("b")],
            "both backed by their marks"
        );
    }

    #[test]
    fn marks_join_in_the_order_of_their_places_not_their_names() {
        // The object's own `submitted_ms` says nothing (0): the accepted
        // mark's `since` is the place. "z" queued first, "a" later; with a
        // share of one, the later one is the one refused.
        let q = quota(Some(1));
        let f = fold(
            &q,
            &[
                marked("a", signed("a", T + 9, "alice"), T),
                marked("z", signed("z", T + 1, "alice"), T),
            ],
            &Pending::default(),
            verify,
        );
        assert_eq!(f.added, [r("z")]);
        assert_eq!(f.queue[0].submitted_ms, T + 1);
        assert!(
            matches!(f.refused.as_slice(), [(x, NotFolded::Full(Full::Share { .. }))] if x == r("a")),
            "{:?}",
            f.refused
        );
        let f = fold(
            &quota(None),
            &[
                marked("a", signed("a", T + 9, "alice"), T),
                marked("z", signed("z", T + 1, "bob"), T),
            ],
            &Pending::default(),
            verify,
        );
        assert_eq!(f.added, [r("z"), r("a")]);
    }

    #[test]
    fn a_refused_mark_is_never_planned_over() {
        // A forged mark claims the earliest place: under strict FIFO it
        // would head the queue and block everyone, or take room nobody
        // got. It is not in the queue the round plans over.
        let q = quota(None);
        let mut forged: mark::Mark = serde_json::from_str(signed("x", T + 5, "eve")).unwrap();
        forged.since = T;
        let forged: &'static str =
            Box::leak(serde_json::to_string(&forged).unwrap().into_boxed_str());
        let f = fold(
            &q,
            &[
                marked("x", forged, T),
                marked("a", signed("a", T + 1, "alice"), T),
            ],
            &Pending::default(),
            verify,
        );
        assert_eq!(f.queue.len(), 1);
        assert_eq!(f.queue[0].workload_ref, r("a"));
        assert_eq!(
            f.refused,
            [(r("x").to_string(), NotFolded::Mark(Refused::Mac))]
        );
    }

    #[test]
    fn what_left_is_not_folded_back_from_a_stale_copy() {
        let q = quota(None);
        let mut p = Pending::default();
        p.leave(r("a"), "uid-a");
        let f = fold(
            &q,
            &[marked("a", signed("a", T + 1, "alice"), T)],
            &p,
            verify,
        );
        assert!(f.queue.is_empty());
        assert_eq!(f.refused, [(r("a").to_string(), NotFolded::Left)]);
    }

    #[test]
    fn an_entry_already_queued_is_refreshed_from_its_object_and_keeps_its_place() {
        let mut q = quota(None);
        let mut old = object("a", 1, Some(1_000));
        old.submitted_ms = T + 1;
        old.submitted_by = Some("alice".into());
        old.uid = "uid-a".into();
        q.status.queue.push(QueueEntry {
            work: old,
            position: 1,
            waiting: Waiting::Quota,
            reason: String::new(),
            estimated_start: None,
        });
        let mut m = marked("a", signed("a", T + 1, "alice"), T);
        m.work = leak(object("a", 3, Some(90_000)));
        let f = fold(&q, &[m], &Pending::default(), verify);
        assert!(f.added.is_empty());
        assert_eq!(f.queue.len(), 1);
        assert_eq!(f.queue[0].pod_sets[0].count, 3);
        assert_eq!(f.queue[0].run_ms, Some(90_000));
        assert_eq!(f.queue[0].submitted_ms, T + 1);
        assert!(f.marked.contains(r("a")), "its mark holds its place");
        // The same pods, written by the object in another format: the
        // entry takes the object's.
        let mut m = marked("a", signed("a", T + 1, "alice"), T);
        let mut w = object("a", 3, Some(90_000));
        let mut listed = w.clone();
        let mem: crate::quantity::Quantity = "1Gi".parse().unwrap();
        let mut sets = w.pod_sets.to_vec();
        sets[0].per_pod.insert(
            "memory".into(),
            mem.with_format(crate::quantity::Format::DecimalSi),
        );
        w.pod_sets = sets.into();
        let mut sets = listed.pod_sets.to_vec();
        sets[0].per_pod.insert("memory".into(), mem);
        listed.pod_sets = sets.into();
        listed.uid = "uid-a".into();
        listed.submitted_ms = T + 1;
        let mut q2 = q.clone();
        q2.status.queue[0].work = listed;
        m.work = leak(w.clone());
        let f = fold(&q2, &[m], &Pending::default(), verify);
        assert_eq!(
            serde_json::to_value(&f.queue[0].pod_sets[..]).unwrap(),
            serde_json::to_value(&w.pod_sets[..]).unwrap()
        );
        // Queued by preemption (its place is its charge's): no mark backs
        // it, so a status must keep it.
        q.status.queue[0].work.preempted = true;
        let mut m = marked("a", signed("a", T + 1, "alice"), T);
        m.work = leak(object("a", 3, Some(90_000)));
        let f = fold(&q, &[m], &Pending::default(), verify);
        assert!(f.marked.is_empty());
    }

    #[test]
    fn an_object_created_again_under_the_name_never_takes_the_old_place() {
        let mut q = quota(None);
        let mut old = object("a", 1, None);
        old.submitted_ms = T - 1_000;
        old.uid = "uid-old".into();
        q.status.queue.push(QueueEntry {
            work: old,
            position: 1,
            waiting: Waiting::Quota,
            reason: String::new(),
            estimated_start: None,
        });
        let f = fold(
            &q,
            &[marked("a", signed("a", T + 7, "alice"), T)],
            &Pending::default(),
            verify,
        );
        assert_eq!(f.queue.len(), 1, "one entry per name");
        assert_eq!(f.queue[0].uid, "uid-a");
        assert_eq!(f.queue[0].submitted_ms, T + 7);
    }

    #[test]
    fn the_caps_refuse_the_latest_marks_and_hold_them_unfolded() {
        let q = quota(Some(2));
        let f = fold_within(
            &q,
            &[
                marked("c", signed("c", T + 3, "mallory"), T),
                marked("a", signed("a", T + 1, "mallory"), T),
                marked("b", signed("b", T + 2, "mallory"), T),
                marked("d", signed("d", T + 4, "alice"), T),
                marked("e", signed("e", T + 5, "bob"), T),
            ],
            &Pending::default(),
            &mut mark::Memo::default(),
            verify,
            3,
        );
        assert_eq!(f.added, [r("a"), r("b"), r("d")]);
        let refused: Vec<(&str, &str)> = f
            .refused
            .iter()
            .map(|(w, n)| match n {
                NotFolded::Full(full) => (w.as_str(), full.cause()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            refused,
            [(r("c"), "submitter_share"), (r("e"), "queue_full")]
        );
    }

    /// The fold as first written, a walk of the queue per mark: what the
    /// indexed fold must equal.
    fn reference(q: &Quota, accepted: &[(Queued, i64, &str)], max: usize) -> Folded {
        let mut out = Folded {
            queue: q.status.queue.iter().map(|e| e.work.clone()).collect(),
            ..Folded::default()
        };
        let cap = q.spec.queueing.per_submitter();
        for (w, since, by) in accepted {
            let r = w.workload_ref.clone();
            let mut work = w.clone();
            work.submitted_ms = *since;
            work.submitted_by = (!by.is_empty()).then(|| by.to_string());
            if let Some(e) = out.queue.iter_mut().find(|e| e.workload_ref == r) {
                if e.uid.is_empty() || e.uid == work.uid {
                    let backed = !e.preempted && e.submitted_ms == *since;
                    work.submitted_ms = e.submitted_ms;
                    work.submitted_by.clone_from(&e.submitted_by);
                    work.preempted |= e.preempted;
                    *e = work;
                    if backed {
                        out.marked.insert(r);
                    }
                    continue;
                }
            }
            out.queue.retain(|e| e.workload_ref != r);
            if out.queue.len() >= max {
                out.refused.push((
                    r.clone(),
                    NotFolded::Full(Full::Queue {
                        quota: q.name().to_string(),
                        workload_ref: r,
                    }),
                ));
                continue;
            }
            let mine = allowance::of(work.submitted_by.as_deref(), &r);
            let held = out
                .queue
                .iter()
                .filter(|e| allowance::of(e.submitted_by.as_deref(), &e.workload_ref) == mine)
                .count();
            if held >= cap {
                let full = Full::Share {
                    quota: q.name().to_string(),
                    workload_ref: r.clone(),
                    share: mine.to_string(),
                    held,
                    cap,
                };
                out.refused.push((r, NotFolded::Full(full)));
                continue;
            }
            out.marked.insert(r.clone());
            out.added.push(r);
            out.queue.push(work);
        }
        out
    }

    proptest::proptest! {
        /// Queues listed with duplicates, marks of objects created again
        /// under a listed name, shares and a queue cap that refuse: the
        /// indexed fold decides as the walk did, entry for entry.
        #[test]
        fn the_indexed_fold_equals_the_walk(
            listed in proptest::collection::vec((0u8..12, 0u8..3, 0u8..3, proptest::bool::ANY, 0i64..4), 0..14),
            marks in proptest::collection::vec((0u8..16, 0u8..3, 0u8..4), 0..24),
            share in proptest::option::of(1u32..5),
            max in 1usize..30,
        ) {
            let mut q = quota(share);
            let users = ["", "alice", "bob", "system:serviceaccount:ml:ci"];
            for (n, uid, by, preempted, at) in &listed {
                // Half of them listed with other pods, some with other
                // priority classes and priority than their objects now
                // carry: a refresh copies what differs.
                let mut work = object(&format!("o{n}"), 1 + i64::from(*n % 2), None);
                if *at == 2 {
                    work.priority_classes = vec!["high".into()];
                    work.priority = 7;
                }
                work.uid = if *uid == 0 { String::new() } else { format!("uid-o{n}-{uid}") };
                work.submitted_by = (*by > 0).then(|| users[*by as usize].to_string());
                work.preempted = *preempted;
                work.submitted_ms = T + at;
                q.status.queue.push(crate::object::queue::QueueEntry {
                    work,
                    position: 1,
                    waiting: Waiting::Quota,
                    reason: String::new(),
                    estimated_start: None,
                });
            }
            let mut all: Vec<Marked<'static>> = Vec::new();
            let mut seen = std::collections::BTreeSet::new();
            for (i, (n, uid, by)) in marks.iter().enumerate() {
                let name = format!("o{n}");
                // One mark per object name: a watch shows one object of a
                // name at a time.
                if !seen.insert(name.clone()) {
                    continue;
                }
                let since = T + i as i64 % 4;
                let mut m = marked(&name, signed(&name, since, users[*by as usize]), T);
                m.uid = Box::leak(format!("uid-{name}-{uid}").into_boxed_str());
                all.push(m);
            }
            let mut memo = mark::Memo::default();
            let got = fold_within(&q, &all, &Pending::default(), &mut memo, verify, max);
            // Folded again through the memo, with no key at all: every
            // mark is taken from it, and the fold is the same.
            memo.turn();
            let again = fold_within(&q, &all, &Pending::default(), &mut memo, |_, _| false, max);
            proptest::prop_assert_eq!(&again.queue, &got.queue);
            proptest::prop_assert_eq!(&again.added, &got.added);
            proptest::prop_assert_eq!(format!("{:?}", again.refused), format!("{:?}", got.refused));
            // The reference takes the accepted marks in the same order.
            let mut accepted: Vec<(Queued, i64, &str)> = all
                .iter()
                .map(|m| {
                    let a = mark::accept(m.annotation, &m.at, verify).unwrap();
                    let mut w = m.work.clone();
                    w.workload_ref = m.at.workload_ref.to_string();
                    w.uid = m.uid.to_string();
                    (w, a.since, Box::leak(a.by.into_boxed_str()) as &str)
                })
                .collect();
            accepted.sort_by(|a, b| (a.1, &a.0.workload_ref).cmp(&(b.1, &b.0.workload_ref)));
            let want = reference(&q, &accepted, max);
            proptest::prop_assert_eq!(&got.queue, &want.queue);
            proptest::prop_assert_eq!(&got.added, &want.added);
            proptest::prop_assert_eq!(&got.marked, &want.marked);
            proptest::prop_assert_eq!(format!("{:?}", got.refused), format!("{:?}", want.refused));
        }
    }
}
