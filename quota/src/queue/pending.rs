//! Entries marked but not yet folded (docs/queueing.md §12, "the second
//! attempt", constraints 2 and 5): once the mutating webhook queues by a
//! mark on the object instead of a compare-and-swap of the quota, the
//! caps (`MAX_QUEUE`, the submitter's share) must still count every entry
//! admitted to the queue, including those the quota's status does not show
//! yet. One `Pending` per quota, held under one lock by its caller, so
//! the check and the add are one step (`join`); an entry leaves it only
//! when a status shows it (`seen`) or its object is gone (`gone`), never
//! by a timer. What left by a DELETE or an opt-out is remembered
//! (`leave`) until the watch shows it gone, so a fold never takes a stale
//! copy of it back (`skips`).
//!
//! Pure; held per quota by the server's `Service::marked` when queue marks
//! are on.

use super::entries::Full;
use crate::object::queue::{QueueEntry, Queued};
use crate::object::queueing::MAX_QUEUE;
use crate::object::Quota;
use std::collections::{BTreeMap, HashSet};

/// A quota's queue as the caps and a plan count it: `quota`'s status
/// (the entries it lists, its charges, its spec and name), and `more`,
/// entries a copy of the last round holds that the status neither lists
/// nor has charged since, borrowed from where that copy is kept (the
/// mutating webhook's review of every create counts hundreds of them and
/// copies none). A bare `&Quota` is its status alone.
#[derive(Clone, Copy, Debug)]
pub struct Counted<'a> {
    pub quota: &'a Quota,
    pub more: &'a [&'a Queued],
}

impl<'a> From<&'a Quota> for Counted<'a> {
    fn from(quota: &'a Quota) -> Counted<'a> {
        Counted { quota, more: &[] }
    }
}

impl<'a> Counted<'a> {
    /// Every entry counted: the status's, then `more`.
    pub fn entries(&self) -> impl Iterator<Item = &'a Queued> + 'a {
        let more: &'a [&'a Queued] = self.more;
        self.quota
            .status
            .queue
            .iter()
            .map(|e| &e.work)
            .chain(more.iter().copied())
    }

    /// How many entries are counted.
    pub fn len(&self) -> usize {
        self.quota.status.queue.len() + self.more.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One quota's entries marked and not yet folded, and its tombstones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// By reference: what the webhook marked.
    entries: BTreeMap<String, Queued>,
    /// By reference: the uid (empty: any) of what left the queue.
    tombs: BTreeMap<String, String>,
}

impl Pending {
    /// How many entries are pending.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The queue as the caps and a plan must see it: `q`'s status entries,
    /// then the pending entries it does not show, in the order they came.
    pub fn queue<'a>(&'a self, q: impl Into<Counted<'a>>) -> Vec<Queued> {
        self.queue_refs(q).into_iter().cloned().collect()
    }

    /// `queue`, borrowed where the entries are kept: a webhook review
    /// builds this for every create, with hundreds of entries on each
    /// side, and copies none of them.
    pub fn queue_refs<'a>(&'a self, q: impl Into<Counted<'a>>) -> Vec<&'a Queued> {
        let q = q.into();
        let mut out: Vec<&Queued> = Vec::with_capacity(q.len() + self.entries.len());
        out.extend(q.entries());
        // By reference, once.
        let listed: HashSet<&str> = out.iter().map(|e| e.workload_ref.as_str()).collect();
        let mut more: Vec<&Queued> = self
            .entries
            .values()
            .filter(|p| !listed.contains(p.workload_ref.as_str()))
            .collect();
        more.sort_by(|a, b| {
            (a.submitted_ms, &a.workload_ref).cmp(&(b.submitted_ms, &b.workload_ref))
        });
        out.extend(more);
        out
    }

    /// What the caps count of a copy of the last round's whole queue
    /// (`copy`: the status lists only its top) beyond `q`'s status: the
    /// entries the status neither lists nor has charged since, that did
    /// not leave since (a DELETE, an opt-out: `skips`), and that `keep`
    /// keeps, each name once, borrowed from the copy. It over-counts an
    /// entry gone since the round, never under-counts one that waits.
    pub fn copy_entries<'a>(
        &self,
        q: &Quota,
        copy: &'a [crate::object::queue::QueueEntry],
        keep: impl Fn(&Queued) -> bool,
    ) -> Vec<&'a Queued> {
        // What the status lists, by reference (a walk of the status per
        // entry of the copy was quadratic in the queue's length).
        let mut listed = super::entries::listed(q);
        let mut more = Vec::with_capacity(copy.len());
        for e in copy {
            let r = e.work.workload_ref.as_str();
            if listed.contains(r)
                || q.status.workloads.contains_key(r)
                || self.skips(r, &e.work.uid)
                || !keep(&e.work)
            {
                continue;
            }
            listed.insert(r);
            more.push(&e.work);
        }
        more
    }

    /// The pending entries' references and places.
    pub fn refs(&self) -> Vec<(String, i64)> {
        self.entries
            .iter()
            .map(|(r, p)| (r.clone(), p.submitted_ms))
            .collect()
    }

    /// The references of what left and is remembered.
    pub fn tombstones(&self) -> Vec<String> {
        self.tombs.keys().cloned().collect()
    }

    /// Check `work` against `q`'s caps counting the pending entries too,
    /// and add it, in one step (call under the quota's lock): past
    /// `MAX_QUEUE` or past its submitter's share it is refused and nothing
    /// is added. An entry already queued or pending under its reference is
    /// a refresh, never refused (it keeps its place).
    pub fn join(&mut self, q: &Quota, work: Queued) -> Result<(), Full> {
        self.join_within(q.into(), work, MAX_QUEUE, 0)
    }

    /// `join`, where a status that shows only the top of its queue
    /// (`summary`) counts `whole` entries waiting in all: the queue is
    /// taken to hold the larger of that and what `q` lists plus the
    /// pending entries, towards `MAX_QUEUE` (the pending ones may be among
    /// `whole` already: never counted twice). The unlisted entries'
    /// submitters are not known, so they count towards no share.
    pub fn join_beyond<'a>(
        &mut self,
        q: impl Into<Counted<'a>>,
        work: Queued,
        whole: usize,
    ) -> Result<(), Full> {
        self.join_within(q.into(), work, MAX_QUEUE, whole)
    }

    fn join_within(
        &mut self,
        q: Counted<'_>,
        mut work: Queued,
        max: usize,
        whole: usize,
    ) -> Result<(), Full> {
        // A CREATE (no uid yet) is a new object: an entry of its name
        // belongs to an older one (deleted since) and gives it no place.
        if work.uid.is_empty() {
            self.entries.remove(&work.workload_ref);
        }
        let queue = self.queue_refs(q);
        let refresh = queue
            .iter()
            .find(|e| e.workload_ref == work.workload_ref && same_object(e, &work))
            .map(|old| (old.submitted_ms, old.submitted_by.clone()));
        if let Some((since, by)) = refresh {
            work.submitted_ms = since;
            if by.is_some() {
                work.submitted_by = by;
            }
            self.unbury(&work);
            self.entries.insert(work.workload_ref.clone(), work);
            return Ok(());
        }
        if queue.len().max(whole) >= max {
            return Err(Full::Queue {
                quota: q.quota.name().to_string(),
                workload_ref: work.workload_ref,
            });
        }
        super::entries::within_share(q.quota, &work, queue.iter().copied())?;
        self.unbury(&work);
        self.entries.insert(work.workload_ref.clone(), work);
        Ok(())
    }

    /// A join of `work` lifts the tombstone of its name only when the
    /// tombstone is of the same object (or of a CREATE's, not named): one
    /// of an older object deleted under the name stays, so a fold still
    /// skips that object's stale copies.
    fn unbury(&mut self, work: &Queued) {
        if self
            .tombs
            .get(&work.workload_ref)
            .is_some_and(|t| t.is_empty() || *t == work.uid)
        {
            self.tombs.remove(&work.workload_ref);
        }
    }

    /// Forget the pending entries a status of the quota shows: waiting
    /// (the same reference and place: an older entry of the name does not
    /// count), or admitted from the queue since its place (a round folds
    /// and admits in one write, so the status may never show it waiting;
    /// an older object's charge of the name was made before the place).
    /// How many.
    pub fn seen<'a>(&mut self, q: impl Into<Counted<'a>>) -> usize {
        let q = q.into();
        let before = self.entries.len();
        if before == 0 {
            return 0;
        }
        let listed: HashSet<(&str, i64)> = q
            .entries()
            .map(|e| (e.workload_ref.as_str(), e.submitted_ms))
            .collect();
        let workloads = &q.quota.status.workloads;
        self.entries.retain(|r, p| {
            let waiting = listed.contains(&(r.as_str(), p.submitted_ms));
            let admitted = workloads.get(r).is_some_and(|c| {
                c.uid.starts_with(crate::object::QUEUE_CHARGE)
                    && crate::time::parse_rfc3339(&c.since).is_some_and(|s| s >= p.submitted_ms)
            });
            !(waiting || admitted)
        });
        before - self.entries.len()
    }

    /// Forget the pending entries placed before `before_ms`: on a replica
    /// whose watch does not judge them (it runs no rounds), once the API
    /// server can no longer store their objects. One stored since is the
    /// leader's to fold, and the fold holds the caps again.
    pub fn expire(&mut self, before_ms: i64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, p| p.submitted_ms >= before_ms);
        before - self.entries.len()
    }

    /// The watch shows the object gone, or no longer marked: its pending
    /// entry and its tombstone go.
    pub fn gone(&mut self, workload_ref: &str) {
        self.entries.remove(workload_ref);
        self.tombs.remove(workload_ref);
    }

    /// A DELETE or an opt-out took `workload_ref` (of `uid`; empty: a
    /// CREATE's, not named yet) out of the queue: its pending entry goes,
    /// and a fold skips it until the watch shows it gone (`gone`). At
    /// most `MAX_QUEUE` tombstones: past them, false, and the caller must
    /// remove the entry in the quota's compare-and-swap instead.
    pub fn leave(&mut self, workload_ref: &str, uid: &str) -> bool {
        self.entries.remove(workload_ref);
        if self.tombs.len() >= MAX_QUEUE && !self.tombs.contains_key(workload_ref) {
            return false;
        }
        self.tombs.insert(workload_ref.to_string(), uid.to_string());
        true
    }

    /// Whether `other` holds the same tombstones: a fold, which reads
    /// nothing else of a `Pending` (`skips`), skips the same objects under
    /// either.
    pub fn same_tombstones(&self, other: &Pending) -> bool {
        self.tombs == other.tombs
    }

    /// Whether a fold must skip the marked object `workload_ref` of `uid`:
    /// it left the queue, and this copy of it is older than its leaving.
    pub fn skips(&self, workload_ref: &str, uid: &str) -> bool {
        self.tombs
            .get(workload_ref)
            .is_some_and(|t| t.is_empty() || t == uid)
    }
}

/// Whether the queued `entry` of a name is `work`'s object: never for a
/// CREATE (no uid yet: a new object); for an update, an entry of the same
/// uid, or a CREATE's entry (not named yet, the object's own mark).
fn same_object(entry: &Queued, work: &Queued) -> bool {
    !work.uid.is_empty() && (entry.uid.is_empty() || entry.uid == work.uid)
}

/// A replica's copy of the whole queue its last round of a quota wrote
/// (with marks on, the status lists only the top; `copy_entries` counts
/// the rest), for every review of a create until the next round: a
/// review walks the entries ahead of its create
/// (`admit::would_queue_at`). What each entry asks is its own, computed
/// once with its pod sets (`PodSets::usage`).
#[derive(Debug)]
pub struct RoundCopy {
    entries: Vec<QueueEntry>,
}

impl RoundCopy {
    /// The entries, in the round's order.
    pub fn entries(&self) -> &[QueueEntry] {
        &self.entries
    }

    pub fn new(entries: Vec<QueueEntry>) -> RoundCopy {
        RoundCopy { entries }
    }

    /// The copy without the entries `stays` says no to.
    pub fn keeping(&self, stays: impl Fn(&QueueEntry) -> bool) -> RoundCopy {
        RoundCopy {
            entries: self.entries.iter().filter(|e| stays(e)).cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::queue::{QueueEntry, Waiting};
    use crate::object::QuotaSpec;
    use proptest::prelude::*;

    /// A round's copy without the entries it is told to drop keeps the
    /// others, in order, each still asking what it asked.
    #[test]
    fn a_rounds_copy_keeps_what_it_is_told_to() {
        let entry = |name: &str, cpus: i64| QueueEntry {
            work: Queued {
                workload_ref: format!("batch/Job/ml/{name}"),
                uid: String::new(),
                priority: 0,
                priority_classes: Vec::new(),
                submitted_ms: 0,
                pod_sets: vec![crate::workload::PodSet {
                    name: "main".into(),
                    count: 1,
                    per_pod: [(
                        "requests.cpu".to_string(),
                        crate::Quantity::from_units(cpus),
                    )]
                    .into(),
                    qos: None,
                }]
                .into(),
                run_ms: None,
                submitted_by: None,
                preempted: false,
            },
            position: 1,
            waiting: Waiting::Quota,
            reason: String::new(),
            estimated_start: None,
        };
        let copy = RoundCopy::new(vec![entry("a", 1), entry("b", 2), entry("c", 3)]);
        let kept = copy.keeping(|e| !e.work.workload_ref.ends_with("/b"));
        assert_eq!(kept.entries().len(), 2);
        let names: Vec<&str> = kept
            .entries()
            .iter()
            .map(|e| e.work.workload_ref.as_str())
            .collect();
        assert_eq!(names, ["batch/Job/ml/a", "batch/Job/ml/c"]);
        for (k, e) in kept
            .entries()
            .iter()
            .zip([&copy.entries()[0], &copy.entries()[2]])
        {
            assert_eq!(k.work.usage(), e.work.usage());
        }
    }

    fn quota(per_submitter: Option<u32>) -> Quota {
        let mut spec = QuotaSpec::default();
        if let Some(n) = per_submitter {
            spec.queueing.max_per_submitter = Some(n);
        }
        Quota::new("ml", spec)
    }

    fn work(name: &str, by: &str, at: i64) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ml/{name}"),
            uid: String::new(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: at,
            pod_sets: Vec::new().into(),
            run_ms: None,
            submitted_by: Some(by.to_string()),
            preempted: false,
        }
    }

    fn fold(q: &mut Quota, w: Queued) {
        q.status.queue.push(QueueEntry {
            work: w,
            position: 0,
            waiting: Waiting::Quota,
            reason: String::new(),
            estimated_start: None,
        });
    }

    #[test]
    fn a_rounds_copy_counts_only_what_the_status_neither_lists_nor_charges() {
        let mut q = quota(None);
        fold(&mut q, work("listed", "alice", 1));
        crate::admission::charge(
            &mut q,
            "batch/Job/ml/charged",
            work("charged", "bob", 0).charge(5),
        )
        .unwrap();
        let entry = |name: &str| QueueEntry {
            work: work(name, "bob", 2),
            position: 0,
            waiting: Waiting::Quota,
            reason: String::new(),
            estimated_start: None,
        };
        let copy: Vec<QueueEntry> = ["listed", "charged", "left", "other", "waits", "waits"]
            .iter()
            .map(|n| entry(n))
            .collect();
        let mut p = Pending::default();
        assert!(p.leave("batch/Job/ml/left", ""));
        let more = p.copy_entries(&q, &copy, |e| e.workload_ref != "batch/Job/ml/other");
        let names: Vec<&str> = more.iter().map(|e| e.workload_ref.as_str()).collect();
        assert_eq!(names, ["batch/Job/ml/waits"]);
    }

    #[test]
    fn entries_a_status_does_not_list_count_towards_the_queue_cap() {
        // A status that lists only the top of its queue: what it counts
        // beyond fills the queue as much as what it lists.
        let q = quota(None);
        let mut p = Pending::default();
        assert!(matches!(
            p.join_beyond(&q, work("a", "alice", 1), MAX_QUEUE),
            Err(Full::Queue { .. })
        ));
        assert!(p.is_empty());
        p.join_beyond(&q, work("a", "alice", 1), MAX_QUEUE - 1)
            .unwrap();
        assert_eq!(p.len(), 1);
        // A pending entry the summary counts already is not counted again.
        p.join_beyond(&q, work("b", "bob", 2), MAX_QUEUE - 1)
            .unwrap();
    }

    #[test]
    fn parallel_creates_against_one_status_never_pass_the_share() {
        // The first attempt checked each create against the status alone,
        // which showed none of them yet: all passed. Counted with the
        // pending ones, the share holds.
        let q = quota(Some(3));
        let mut p = Pending::default();
        let results: Vec<bool> = (0..6)
            .map(|i| p.join(&q, work(&format!("j{i}"), "mallory", i)).is_ok())
            .collect();
        assert_eq!(results, [true, true, true, false, false, false]);
        assert_eq!(p.len(), 3);
        // Another submitter still has their share.
        assert!(p.join(&q, work("k", "alice", 9)).is_ok());
    }

    #[test]
    fn a_refresh_keeps_its_place_and_is_never_refused() {
        let q = quota(Some(1));
        let mut p = Pending::default();
        p.join(&q, work("j", "mallory", 5)).unwrap();
        // An update of the object the CREATE made (its uid now known).
        let mut update = work("j", "mallory", 50);
        update.uid = "u1".into();
        p.join(&q, update).unwrap();
        assert_eq!(p.queue(&q)[0].submitted_ms, 5);
    }

    #[test]
    fn a_create_under_a_taken_name_never_inherits_its_place() {
        let q = quota(None);
        let mut p = Pending::default();
        p.join(&q, work("j", "mallory", 5)).unwrap();
        // Deleted (its tombstone names its uid) and created again.
        assert!(p.leave("batch/Job/ml/j", "u1"));
        p.join(&q, work("j", "mallory", 50)).unwrap();
        assert_eq!(p.queue(&q)[0].submitted_ms, 50);
        // The old object's stale copies are still skipped, the new not.
        assert!(p.skips("batch/Job/ml/j", "u1"));
        assert!(!p.skips("batch/Job/ml/j", "u2"));
        // A CREATE again (a retry, or another re-create): a new place.
        p.join(&q, work("j", "mallory", 70)).unwrap();
        assert_eq!(p.queue(&q)[0].submitted_ms, 70);
        // An update of another object of the name takes no place from
        // an entry listed with another uid.
        let mut listed = quota(None);
        let mut old = work("k", "mallory", 5);
        old.uid = "k1".into();
        listed.status.queue.push(QueueEntry {
            work: old,
            position: 1,
            waiting: Waiting::Quota,
            reason: String::new(),
            estimated_start: None,
        });
        let mut other = work("k", "mallory", 60);
        other.uid = "k2".into();
        p.join(&listed, other).unwrap();
        assert!(p.refs().contains(&("batch/Job/ml/k".to_string(), 60)));
    }

    #[test]
    fn an_entry_counts_until_the_status_shows_it_or_its_object_is_gone() {
        let mut q = quota(Some(2));
        let mut p = Pending::default();
        p.join(&q, work("a", "u", 1)).unwrap();
        p.join(&q, work("b", "u", 2)).unwrap();
        // A status showing an older entry of the name does not count it.
        fold(&mut q, work("a", "u", 0));
        assert_eq!(p.seen(&q), 0);
        q.status.queue.clear();
        // Folded: it moves from pending to the status, still counted once.
        fold(&mut q, work("a", "u", 1));
        assert_eq!(p.seen(&q), 1);
        assert_eq!(p.queue(&q).len(), 2);
        assert!(p.join(&q, work("c", "u", 3)).is_err());
        // b's object is gone: room for c.
        p.gone("batch/Job/ml/b");
        assert!(p.join(&q, work("c", "u", 3)).is_ok());
    }

    #[test]
    fn an_entry_folded_and_admitted_in_one_write_no_longer_counts() {
        let charge = |uid: &str, since: i64| crate::object::Charge {
            pod_sets: Vec::new(),
            hpa: None,
            since: crate::time::format_rfc3339(since),
            uid: uid.into(),
            admitted: None,
        };
        let mut q = quota(Some(1));
        let mut p = Pending::default();
        p.join(&q, work("a", "u", 1_000)).unwrap();
        // An older object of the name, charged before the place: still
        // counted; so is a charge the queue did not make.
        let a = "batch/Job/ml/a".to_string();
        q.status
            .workloads
            .insert(a.clone(), charge("queue:old", 999));
        assert_eq!(p.seen(&q), 0);
        q.status
            .workloads
            .insert(a.clone(), charge("review-7", 2_000));
        assert_eq!(p.seen(&q), 0);
        assert!(p.join(&q, work("b", "u", 3_000)).is_err());
        // Admitted from the queue after its place: forgotten, room for b.
        q.status.workloads.insert(a, charge("queue:new", 2_000));
        assert_eq!(p.seen(&q), 1);
        assert!(p.join(&q, work("b", "u", 3_000)).is_ok());
    }

    #[test]
    fn what_left_is_skipped_by_a_fold_until_the_watch_shows_it_gone() {
        let q = quota(None);
        let mut p = Pending::default();
        p.join(&q, work("j", "u", 1)).unwrap();
        assert!(p.leave("batch/Job/ml/j", "uid-1"));
        assert!(p.is_empty());
        assert!(p.skips("batch/Job/ml/j", "uid-1"));
        // Created again under the name: a new object, not skipped.
        assert!(!p.skips("batch/Job/ml/j", "uid-2"));
        p.gone("batch/Job/ml/j");
        assert!(!p.skips("batch/Job/ml/j", "uid-1"));
        // A CREATE's entry (no uid yet) is skipped whatever its uid.
        p.leave("batch/Job/ml/k", "");
        assert!(p.skips("batch/Job/ml/k", "any"));
    }

    #[test]
    fn tombstones_are_bounded() {
        let mut p = Pending::default();
        for i in 0..MAX_QUEUE {
            assert!(p.leave(&format!("batch/Job/ml/j{i}"), "u"));
        }
        assert!(!p.leave("batch/Job/ml/one-more", "u"));
        assert!(
            p.leave("batch/Job/ml/j0", "u"),
            "an existing one is renewed"
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Join(usize, usize),
        Fold,
        Gone(usize),
        Leave(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..12, 0usize..3).prop_map(|(w, u)| Op::Join(w, u)),
            1 => Just(Op::Fold),
            1 => (0usize..12).prop_map(Op::Gone),
            1 => (0usize..12).prop_map(Op::Leave),
        ]
    }

    proptest! {
        /// Whatever the order of joins, folds (a round writing pending
        /// entries into the status), objects gone and leavings: the queue
        /// (status and pending together) never holds more than the cap,
        /// nor a submitter more than the share, and no reference twice.
        #[test]
        fn the_caps_hold_with_entries_in_flight(
            cap in 1usize..6,
            share in 1u32..4,
            ops in prop::collection::vec(op(), 1..60),
        ) {
            let mut q = quota(Some(share));
            let mut p = Pending::default();
            for (t, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Join(w, u) => {
                        let _ = p.join_within((&q).into(), work(&format!("j{w}"), &format!("u{u}"), t as i64), cap, 0);
                    }
                    Op::Fold => {
                        for w in p.queue(&q).into_iter().skip(q.status.queue.len()) {
                            fold(&mut q, w);
                        }
                        p.seen(&q);
                    }
                    Op::Gone(w) => {
                        let r = format!("batch/Job/ml/j{w}");
                        q.status.queue.retain(|e| e.work.workload_ref != r);
                        p.gone(&r);
                    }
                    Op::Leave(w) => {
                        let r = format!("batch/Job/ml/j{w}");
                        q.status.queue.retain(|e| e.work.workload_ref != r);
                        p.leave(&r, "");
                    }
                }
                let all = p.queue(&q);
                prop_assert!(all.len() <= cap, "{} > {}", all.len(), cap);
                for u in 0..3 {
                    let by = format!("u{u}");
                    let n = all.iter().filter(|e| e.submitted_by.as_deref() == Some(by.as_str())).count();
                    prop_assert!(n <= share as usize, "{} holds {}", by, n);
                }
                let mut refs: Vec<&str> = all.iter().map(|e| e.workload_ref.as_str()).collect();
                refs.sort();
                refs.dedup();
                prop_assert_eq!(refs.len(), all.len());
            }
        }
    }
}
