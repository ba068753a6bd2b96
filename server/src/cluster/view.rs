//! The controller's picture of the cluster, and its decisions about which
//! quotas an event touches. Pure: watch events go in (already parsed), the
//! names of the quotas to reconcile come out; no I/O, no clock (times are
//! passed in). `snapshot` gives `quota::reconcile` what it needs.

use quota::cash::Interval;
use quota::hold::GatedPod;
use quota::keys::{CPU_TYPE_LABEL, GPU_TYPE_LABEL, MEMORY_TYPE_LABEL};
use quota::object::queue::Queued;
use quota::object::{HpaCharge, QuotaStatus};
use quota::pods::{owning_workload, Owner, PodFacts, PodRun, PodRuns};
use quota::queue::fold::MarkedObject;
use quota::reconcile::Observed;
use quota::usage::Models;
use quota::usage::PodSpec;
use quota::workload::{adapter_for_kind, group_of, Adapter, ChargeMode, PodSet, Workload};
use quota::{KeyConfig, ResourceList};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// An object of a watched kind: namespace, group, kind, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjKey {
    namespace: String,
    group: String,
    kind: String,
    name: String,
}

/// What reclaim needs to know of a workload besides its pod sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadInfo {
    pub created_ms: Option<i64>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Highest `spec.priority` seen among its pods (PriorityClass value).
    pub priority: i32,
    /// The object's uid, so Events about it show in `kubectl describe`.
    pub uid: String,
    /// Its declared maximum run time (`workload::runtime`), for the queue's
    /// start estimates (docs/queueing.md §5).
    pub run_ms: Option<i64>,
    /// The PriorityClasses its pod templates name
    /// (`quota::queue::priority::class_names`): preemption judges a running
    /// workload by them as the queue judges its entries, even before its
    /// pods exist.
    pub priority_classes: Vec<String>,
    /// A held object carrying a queue mark (docs/queueing.md §12): what
    /// it runs once released, as its adapter reads it; None otherwise.
    pub released: Option<Vec<PodSet>>,
}

/// A governed workload as the watch shows it.
#[derive(Clone, Debug)]
struct Seen {
    quota: String,
    pod_sets: Vec<PodSet>,
    /// Its status says it finished (its reservations settle).
    finished: bool,
    /// When its status says it finished, if it says.
    finished_at: Option<i64>,
    models: Models,
    info: WorkloadInfo,
    /// Held (`info.released`) and carrying a queue mark: what a round
    /// folds, built when the object changes (`Seen::remark`), shared with
    /// every round until then.
    marked: Option<Arc<MarkedObject>>,
}

impl Seen {
    /// `marked` again, after `info` changed.
    fn remark(&mut self, wref: &str) {
        self.marked = self.info.released.as_ref().and_then(|pod_sets| {
            let annotation = self.info.annotations.get(quota::queue::mark::ANNOTATION)?;
            Some(Arc::new(MarkedObject {
                work: Queued {
                    workload_ref: wref.to_string(),
                    uid: self.info.uid.clone(),
                    priority: 0,
                    priority_classes: self.info.priority_classes.clone(),
                    submitted_ms: 0,
                    pod_sets: pod_sets.clone().into(),
                    run_ms: self.info.run_ms,
                    submitted_by: None,
                    preempted: false,
                },
                workload_ref: wref.to_string(),
                annotation: annotation.clone(),
                uid: self.info.uid.clone(),
                // No creation time: no mark may claim a place before now.
                created_ms: self.info.created_ms.unwrap_or(i64::MAX),
            }))
        });
    }
}

/// What the controller keeps of a pod, compactly (half a million of them
/// must fit): shared namespace, owner, spec and workload reference.
#[derive(Clone, Debug)]
struct Facts {
    namespace: Arc<str>,
    /// Its name: what Prometheus's series of it are labelled with.
    name: Arc<str>,
    owner: Option<Arc<Owner>>,
    spec: Arc<PodSpec>,
    scheduled_ms: Option<i64>,
    finished_ms: Option<i64>,
}

impl Facts {
    fn usage(&self, models: &Models, cfg: &KeyConfig) -> ResourceList {
        quota::usage::pod_usage(&self.spec, models, cfg)
    }

    fn qos(&self) -> quota::usage::QosClass {
        quota::usage::qos_class(&self.spec)
    }
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// A pod the controller keeps: its facts, the workload its owners resolve
/// to (governed or not yet known), and its priority.
#[derive(Clone, Debug)]
struct PodEntry {
    facts: Facts,
    /// The pod's own labels, when it has any that matter (model labels).
    /// Boxed: 8 bytes for the usual pod without any, not a 24-byte map.
    #[allow(clippy::box_collection)]
    labels: Option<Box<BTreeMap<String, String>>>,
    priority: i32,
    workload: Arc<str>,
    /// Whether it is unschedulable right now (seed 001's physical pressure).
    unschedulable: bool,
    /// Deleted before its owners resolved: kept (a tombstone) so that its
    /// run is still recorded, ending then, once they do.
    deleted_ms: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct HpaSeen {
    target: String,
    charge: HpaCharge,
}

/// Everything one reconcile of one quota needs, copied out of the view
/// (`View::snapshot`): what the watch shows of the names the status being
/// decided on holds, and every workload to record.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Each workload as the watch shows it, but those of `released` (a
    /// finished one that runs nothing any more has no size to charge;
    /// `View::observed_in` gives the few whose charge is a newer object's
    /// of the name) and held, marked objects the status does not charge
    /// (each waits for a round and is no workload to record,
    /// docs/queueing.md §12).
    pub observed: BTreeMap<String, Observed>,
    pub runs: Vec<PodRun>,
    /// The pod uid of each of `runs`, for `View::settle`.
    pub uids: Vec<String>,
    /// Whether each of `runs` was recorded late and no written status has
    /// accrued it yet (`PodRuns`): the next write bills it back from its
    /// start.
    pub unbilled: Vec<bool>,
    /// Of the names the status reserves for, the workloads whose status
    /// says they finished: their reservations settle
    /// (`quota::budget::reservations::settle_finished`).
    pub finished: BTreeSet<String>,
    /// Of the names the status charges, the finished ones that run
    /// nothing any more — the pod list is complete and no pod of theirs
    /// is left that has not ended — with when each finished: their
    /// charges may go
    /// (`quota::reconcile::release_finished`). A finished one whose pods
    /// still run (a Kubeflow job's `cleanPodPolicy: None`, a pod in a long
    /// grace period, a forged status) is charged as declared.
    pub released: BTreeMap<String, i64>,
    /// Of the names the status charges, each finished one's object uid: a
    /// charge that names its object is judged by it
    /// (`quota::reconcile::release_finished`).
    pub finished_uids: BTreeMap<String, String>,
    /// Of the names the status lists as released DELETEs, each one's
    /// object uid as the watch shows it: a released DELETE's object it
    /// still shows is not charged again (`quota::reconcile::forget_deleted`).
    pub object_uids: BTreeMap<String, String>,
}

impl Snapshot {
    pub fn intervals(&self) -> Vec<Interval<'_>> {
        self.runs.iter().map(PodRun::interval).collect()
    }
}

#[derive(Default)]
pub struct View {
    cfg: KeyConfig,
    workloads: HashMap<String, Seen>,
    /// Controller owner of every object of a workload kind that has one.
    owners: HashMap<ObjKey, Owner>,
    /// HPAs by (namespace, name).
    hpas: HashMap<(String, String), HpaSeen>,
    pods: HashMap<String, PodEntry>,
    /// Pod uids by the workload reference their owners resolve to.
    by_workload: HashMap<Arc<str>, HashSet<String>>,
    pub pod_runs: PodRuns,
    /// Kinds ("group/Kind") whose initial list is complete.
    synced: HashSet<String>,
    /// Whether the pod watch's first list is complete: until then no
    /// workload can be known to run nothing.
    pods_listed: bool,
    /// Pod-run changes not yet persisted: uid → run (None: settled/forgotten).
    dirty_runs: HashMap<String, Option<PodRun>>,
    /// Indexes, so a reconcile of one quota never scans the cluster:
    /// governed workloads by quota, HPAs by target, unschedulable pods.
    /// A quota's workloads are in one of two: `done_by_quota` holds those
    /// that finished and run nothing any more (`View::is_done`), which a
    /// reconcile reads only where its status names them; `by_quota` holds
    /// all the others. A cluster keeps its finished Jobs (Kueue's runner
    /// leaves them; a Job's TTL is often hours), and a reconcile that
    /// walked every one of them cost in proportion to the quota's history,
    /// not to what runs (docs/benchmarks.md).
    by_quota: HashMap<String, BTreeSet<String>>,
    done_by_quota: HashMap<String, BTreeSet<String>>,
    hpa_targets: HashMap<String, BTreeSet<(String, String)>>,
    unschedulable: HashSet<String>,
    /// Pods carrying bizrq's scheduling gate (`quota::hold`), by uid, with
    /// their name and the patch that removes it: released once their
    /// workload is charged.
    gated: HashMap<String, (String, serde_json::Value)>,
    /// One copy of each distinct pod spec and pod usage: the pods of a
    /// template are equal, and half a million copies would not fit.
    specs: HashSet<Arc<PodSpec>>,
    usages: HashSet<Arc<ResourceList>>,
    strs: HashSet<Arc<str>>,
    owner_refs: HashSet<Arc<Owner>>,
    /// By quota: how often what its queue round reads of its workload
    /// objects changed (`workload_changed`), so the scheduler can tell a
    /// round that would read what its last idle one read (docs/queueing.md
    /// §12, "Rounds that would change nothing").
    queue_inputs: HashMap<String, u64>,
    /// By quota: its held, marked objects that arrived (appeared held and
    /// marked: a create queued by the webhook), counted apart from
    /// `queue_inputs`, with the latest of them, so the scheduler can tell
    /// a round asked for by arrivals alone none of which it could admit
    /// (docs/queueing.md §12, "Rounds that would change nothing").
    arrivals: HashMap<String, Arrivals>,
}

/// How many of a quota's latest arrivals are kept (`View::arrivals_since`)
/// between two of its rounds that run: past that, the next round runs.
pub const ARRIVALS_KEPT: usize = 256;

/// A quota's arrivals (`View::arrivals`): how many there were, and the
/// latest of them since its last round that ran, the last one numbered
/// `count` (shared with the objects' own copies).
#[derive(Default)]
struct Arrivals {
    count: u64,
    latest: std::collections::VecDeque<Arc<MarkedObject>>,
}

/// What a queue round reads of one workload object: the quota it is bound
/// to, its uid (an entry is admitted only once the watch shows it), its
/// held, marked copy (what a fold takes) and whether bizrq preempted it.
#[derive(Clone, Debug)]
pub struct RoundFacts {
    quota: String,
    uid: String,
    marked: Option<Arc<MarkedObject>>,
    preempted: bool,
}

impl RoundFacts {
    fn same(&self, other: &RoundFacts) -> bool {
        self.quota == other.quota
            && self.uid == other.uid
            && self.preempted == other.preempted
            && match (&self.marked, &other.marked) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

/// Whether a change of one workload object from `before` to `after` (None:
/// not governed, or gone) changes what its quota's queue round reads. Not
/// when nothing it reads changed (a running Job's status), nor when the
/// only change is its hold released: an admitted object's release, which
/// adds no entry and frees no room (its charge was written before it).
pub fn changes_round(before: Option<&RoundFacts>, after: Option<&RoundFacts>) -> bool {
    match (before, after) {
        (None, None) => false,
        (Some(b), Some(a)) if b.same(a) => false,
        (Some(b), Some(a)) => {
            let released = b.marked.is_some() && a.marked.is_none();
            let rest = b.quota == a.quota && b.uid == a.uid && b.preempted == a.preempted;
            !(released && rest)
        }
        _ => true,
    }
}

/// Gated pods in a stable order (namespace, name): the patches go out so.
fn by_name(mut pods: Vec<GatedPod>) -> Vec<GatedPod> {
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    pods
}

/// The shared copy of a string in `pool`.
fn intern_str(pool: &mut HashSet<Arc<str>>, value: &str) -> Arc<str> {
    if let Some(v) = pool.get(value) {
        return v.clone();
    }
    let v: Arc<str> = Arc::from(value);
    pool.insert(v.clone());
    v
}

/// The shared copy of `value` in `pool`.
fn intern<T: std::hash::Hash + Eq>(pool: &mut HashSet<Arc<T>>, value: T) -> Arc<T> {
    if let Some(v) = pool.get(&value) {
        return v.clone();
    }
    let v = Arc::new(value);
    pool.insert(v.clone());
    v
}

fn unindex<K: std::hash::Hash + Eq, V: Ord>(index: &mut HashMap<K, BTreeSet<V>>, key: &K, v: &V) {
    if let Some(set) = index.get_mut(key) {
        set.remove(v);
        if set.is_empty() {
            index.remove(key);
        }
    }
}

/// `group/Kind` of a workload reference `group/Kind/ns/name` ("" for a
/// string that is not one).
pub fn kind_of_ref(wref: &str) -> &str {
    quota::workload::WorkloadRef::parse(wref)
        .map_or("", |r| &wref[..r.group.len() + 1 + r.kind.len()])
}

pub fn kind_key(group: &str, kind: &str) -> String {
    format!("{group}/{kind}")
}

fn add(set: &mut BTreeSet<String>, q: Option<&str>) {
    if let Some(q) = q.filter(|q| !q.is_empty()) {
        set.insert(q.to_string());
    }
}

impl View {
    fn put_workload(&mut self, wref: String, seen: Seen) {
        self.by_quota
            .entry(seen.quota.clone())
            .or_default()
            .insert(wref.clone());
        self.workloads.insert(wref.clone(), seen);
        self.refile(&wref);
    }

    /// Whether `wref`'s status says it finished and no pod of it is left
    /// that has not ended (the pod list complete): it runs nothing for
    /// good, and its charge goes (`quota::reconcile::release_finished`).
    fn is_done(&self, wref: &str) -> bool {
        self.workloads
            .get(wref)
            .is_some_and(|s| s.finished && s.finished_at.is_some())
            && !self.runs_pods(wref)
    }

    /// File `wref` in its quota's index, `done_by_quota` or `by_quota`,
    /// as it stands now: asked after every change of the workload, of a
    /// pod of it, or of whether the pod list is complete.
    fn refile(&mut self, wref: &str) {
        let done = self.is_done(wref);
        self.file(wref, done);
    }

    /// `refile` after a change of one pod of `wref`, which leaves that pod
    /// running or not: a pod that runs files it with the live ones at
    /// once, and one that ends or goes can only make a live workload
    /// done, so a done one stays as it is — neither asks `runs_pods`,
    /// which reads every pod of the workload (a finished Job's thousands
    /// of pods relisted or deleted one by one would otherwise read them
    /// all at each).
    fn refile_for_pod(&mut self, wref: &str, running: bool) {
        let Some(quota) = self.workloads.get(wref).map(|s| s.quota.as_str()) else {
            return;
        };
        let filed_done = self
            .done_by_quota
            .get(quota)
            .is_some_and(|d| d.contains(wref));
        match (running, filed_done) {
            (true, _) => self.file(wref, false),
            (false, true) => {}
            (false, false) => self.refile(wref),
        }
    }

    /// File `wref` with its quota's done workloads or its live ones.
    fn file(&mut self, wref: &str, done: bool) {
        let Some(quota) = self.workloads.get(wref).map(|s| s.quota.clone()) else {
            return;
        };
        let (from, to) = if done {
            (&mut self.by_quota, &mut self.done_by_quota)
        } else {
            (&mut self.done_by_quota, &mut self.by_quota)
        };
        if to.get(&quota).is_some_and(|set| set.contains(wref)) {
            return;
        }
        let key = wref.to_string();
        unindex(from, &quota, &key);
        to.entry(quota).or_default().insert(key);
    }

    /// Every index agrees with `is_done` for `quota`'s workloads (checked
    /// in debug builds on every snapshot: a change that forgot to refile a
    /// workload would let a finished one whose pods run go uncharged).
    fn filed_right(&self, quota: &str) -> bool {
        let live = self.by_quota.get(quota).into_iter().flatten();
        let done = self.done_by_quota.get(quota).into_iter().flatten();
        live.clone().all(|w| !self.is_done(w))
            && done.clone().all(|w| self.is_done(w))
            && live
                .chain(done)
                .all(|w| self.workloads.get(w).is_some_and(|s| s.quota == quota))
    }

    /// What a queue round reads of `wref` (None: not a governed workload).
    pub fn round_facts(&self, wref: &str) -> Option<RoundFacts> {
        self.workloads.get(wref).map(|s| RoundFacts {
            quota: s.quota.clone(),
            uid: s.info.uid.clone(),
            marked: s.marked.clone(),
            preempted: s
                .info
                .annotations
                .contains_key(quota::queue::PREEMPTED_ANNOTATION),
        })
    }

    /// `wref` changed from `before` (its `round_facts` then): the queue
    /// inputs of the quotas it was and is bound to changed, where
    /// `changes_round` says so.
    /// An object that appears held and marked (and not preempted) is an
    /// arrival (`arrivals`), counted apart.
    pub fn workload_changed(&mut self, wref: &str, before: Option<RoundFacts>) {
        let after = self.round_facts(wref);
        if !changes_round(before.as_ref(), after.as_ref()) {
            return;
        }
        if let (None, Some(a)) = (&before, &after) {
            if let Some(m) = a.marked.as_ref().filter(|_| !a.preempted) {
                let arrivals = self.arrivals.entry(a.quota.clone()).or_default();
                arrivals.count += 1;
                if arrivals.latest.len() == ARRIVALS_KEPT {
                    arrivals.latest.pop_front();
                }
                arrivals.latest.push_back(m.clone());
                return;
            }
        }
        for f in before.iter().chain(after.iter()) {
            *self.queue_inputs.entry(f.quota.clone()).or_default() += 1;
        }
    }

    /// How often what `quota`'s queue round reads of its workload objects
    /// changed, arrivals apart (an opaque count: compare for equality).
    pub fn queue_inputs(&self, quota: &str) -> u64 {
        self.queue_inputs.get(quota).copied().unwrap_or(0)
    }

    /// How many held, marked objects arrived for `quota` (numbers them:
    /// `arrivals_since`).
    pub fn arrived(&self, quota: &str) -> u64 {
        self.arrivals.get(quota).map_or(0, |a| a.count)
    }

    /// The objects that arrived for `quota` after the `since`-th, oldest
    /// first; None when they are not all kept (`ARRIVALS_KEPT`, or a round
    /// ran since: `round_runs`).
    pub fn arrivals_since(&self, quota: &str, since: u64) -> Option<Vec<Arc<MarkedObject>>> {
        let a = self.arrivals.get(quota);
        let count = a.map_or(0, |a| a.count);
        let n = usize::try_from(count.checked_sub(since)?).ok()?;
        let latest = a.map(|a| &a.latest);
        let kept = latest.map_or(0, |l| l.len());
        (n <= kept).then(|| {
            latest
                .into_iter()
                .flatten()
                .skip(kept - n)
                .cloned()
                .collect()
        })
    }

    /// The arrivals of quotas `keep` does not keep (deleted) go, with the
    /// scheduler's idle rounds they are judged against.
    pub fn forget_arrivals(&mut self, keep: impl Fn(&str) -> bool) {
        self.arrivals.retain(|q, _| keep(q));
    }

    /// `quota`'s round runs, having read `arrived(quota)`: the arrivals
    /// kept so far are its to fold, and a later round is judged only
    /// against arrivals after it.
    pub fn round_runs(&mut self, quota: &str) {
        if let Some(a) = self.arrivals.get_mut(quota) {
            a.latest.clear();
        }
    }

    fn take_workload(&mut self, wref: &str) -> Option<Seen> {
        let seen = self.workloads.remove(wref)?;
        unindex(&mut self.by_quota, &seen.quota, &wref.to_string());
        unindex(&mut self.done_by_quota, &seen.quota, &wref.to_string());
        Some(seen)
    }

    fn put_hpa(&mut self, key: (String, String), h: HpaSeen) {
        self.hpa_targets
            .entry(h.target.clone())
            .or_default()
            .insert(key.clone());
        self.hpas.insert(key, h);
    }

    fn take_hpa(&mut self, key: &(String, String)) -> Option<HpaSeen> {
        let h = self.hpas.remove(key)?;
        unindex(&mut self.hpa_targets, &h.target, key);
        Some(h)
    }

    pub fn new(cfg: KeyConfig) -> View {
        View {
            cfg,
            ..View::default()
        }
    }

    pub fn mark_synced(&mut self, group: &str, kind: &str) {
        self.synced.insert(kind_key(group, kind));
    }

    pub fn is_synced(&self, kind: &str) -> bool {
        self.synced.contains(kind)
    }

    /// The pod watch listed every pod: a workload none of whose pods is
    /// left running can be told from one whose pods are not seen yet.
    pub fn mark_pods_listed(&mut self) {
        self.pods_listed = true;
        let all: Vec<String> = self.workloads.keys().cloned().collect();
        for w in all {
            self.refile(&w);
        }
    }

    /// Whether some pod of `wref` has not ended (neither terminated nor
    /// deleted), or the pods are not all known yet.
    fn runs_pods(&self, wref: &str) -> bool {
        !self.pods_listed
            || self.by_workload.get(wref).is_some_and(|uids| {
                uids.iter().any(|u| {
                    self.pods
                        .get(u)
                        .is_some_and(|p| p.facts.finished_ms.is_none() && p.deleted_ms.is_none())
                })
            })
    }

    /// The quota of `wref` if its status says it finished: a pod of it
    /// that ends may be the last one, and free its charge.
    fn finished_quota(&self, wref: &str) -> Option<String> {
        self.workloads
            .get(wref)
            .filter(|s| s.finished)
            .map(|s| s.quota.clone())
    }

    pub fn quota_of(&self, wref: &str) -> Option<&str> {
        self.workloads.get(wref).map(|s| s.quota.as_str())
    }

    pub fn workload_count(&self) -> usize {
        self.workloads.len()
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Every workload reference known for `kind` ("group/Kind"), for
    /// finding deletions missed across a relist.
    pub fn refs_of_kind(&self, kind: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .workloads
            .keys()
            .filter(|r| kind_of_ref(r) == kind)
            .cloned()
            .collect();
        out.extend(
            self.owners
                .keys()
                .filter(|k| kind_key(&k.group, &k.kind) == kind)
                .map(|k| format!("{}/{}/{}/{}", k.group, k.kind, k.namespace, k.name)),
        );
        out.sort();
        out.dedup();
        out
    }

    /// A workload object was added or changed. Returns the quotas touched:
    /// the one it was bound to and the one it is bound to now, and those of
    /// pods whose owner chain this object completes.
    pub fn apply_workload(
        &mut self,
        adapter: &Adapter,
        w: Workload,
        created_ms: Option<i64>,
        now_ms: i64,
    ) -> BTreeSet<String> {
        let meta = &w.meta;
        let key = ObjKey {
            namespace: meta.namespace.clone(),
            group: adapter.group.to_string(),
            kind: adapter.kind.to_string(),
            name: meta.name.clone(),
        };
        let controller = Owner::controller_of(meta);
        let owner_changed = match controller {
            Some(o) => self.owners.insert(key.clone(), o.clone()) != Some(o),
            None => self.owners.remove(&key).is_some(),
        };
        let wref: String = adapter.workload_ref(&meta.namespace, &meta.name).into();
        let mut touched = BTreeSet::new();
        // A workload in a namespace bizrq does not govern is never reviewed,
        // so it is not charged either: as if it carried no label.
        let bound = if w.mode == ChargeMode::Charge && self.cfg.namespaces.governs(&meta.namespace)
        {
            w.quota().map(str::to_string)
        } else {
            None
        };
        let old = self.take_workload(&wref);
        add(&mut touched, old.as_ref().map(|s| s.quota.as_str()));
        let mut models_changed = old.is_none();
        if let Some(q) = bound {
            let models = Models::from_labels(&meta.labels, &BTreeMap::new());
            models_changed |= old
                .as_ref()
                .is_some_and(|o| o.models != models || o.quota != q);
            let priority = old.as_ref().map_or(0, |o| o.info.priority);
            let run_ms = w.run_time.as_ref().ok().copied().flatten().map(|r| r.ms);
            add(&mut touched, Some(&q));
            self.put_workload(
                wref.clone(),
                Seen {
                    quota: q,
                    pod_sets: w.pod_sets,
                    finished: w.finished,
                    finished_at: w.finished_at,
                    models,
                    info: WorkloadInfo {
                        created_ms,
                        labels: w.meta.labels.clone(),
                        annotations: w.meta.annotations.clone(),
                        priority,
                        uid: w.meta.uid.clone(),
                        run_ms,
                        priority_classes: Vec::new(),
                        released: None,
                    },
                    marked: None,
                },
            );
        }
        if owner_changed || models_changed || old.is_some() != self.workloads.contains_key(&wref) {
            touched.extend(self.reresolve(&wref, now_ms));
        }
        touched
    }

    /// A workload object is gone (`adapter`'s kind, `namespace/name`).
    pub fn delete_workload(
        &mut self,
        adapter: &Adapter,
        namespace: &str,
        name: &str,
        now_ms: i64,
    ) -> BTreeSet<String> {
        let key = ObjKey {
            namespace: namespace.to_string(),
            group: adapter.group.to_string(),
            kind: adapter.kind.to_string(),
            name: name.to_string(),
        };
        self.owners.remove(&key);
        let wref: String = adapter.workload_ref(namespace, name).into();
        let mut touched = BTreeSet::new();
        let before = self.round_facts(&wref);
        if let Some(old) = self.take_workload(&wref) {
            touched.insert(old.quota);
        }
        self.workload_changed(&wref, before);
        touched.extend(self.reresolve(&wref, now_ms));
        touched
    }

    /// Pods attached to `wref`: resolve their owners again (the chain or
    /// the binding changed) and record their runs under the new answer.
    fn reresolve(&mut self, wref: &str, now_ms: i64) -> BTreeSet<String> {
        let uids: Vec<String> = self
            .by_workload
            .get(wref)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let mut touched = BTreeSet::new();
        for uid in uids {
            let Some(mut p) = self.pods.remove(&uid) else {
                continue;
            };
            // Its owners changed: the workload they resolve to now.
            if let Some(w) = owning_workload(&p.facts.namespace, p.facts.owner.as_deref(), |o| {
                self.controller_of(&p.facts.namespace, o)
            }) {
                if *p.workload != *w {
                    if let Some(s) = self.by_workload.get_mut(&p.workload) {
                        s.remove(&uid);
                    }
                    p.workload = intern_str(&mut self.strs, &w);
                }
            }
            touched.extend(self.place_pod(uid, p, now_ms));
        }
        // Pods it had may be another's now.
        self.refile(wref);
        touched
    }

    fn controller_of(&self, namespace: &str, o: &Owner) -> Option<Owner> {
        self.owners
            .get(&ObjKey {
                namespace: namespace.to_string(),
                group: group_of(&o.api_version).to_string(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            })
            .cloned()
    }

    /// A pod was added or changed. Returns the quota whose cash its run
    /// changes (new run, start or end moved), if any.
    pub fn apply_pod(
        &mut self,
        mut facts: PodFacts,
        labels: BTreeMap<String, String>,
        priority: i32,
        unschedulable: bool,
        now_ms: i64,
    ) -> BTreeSet<String> {
        let uid = std::mem::take(&mut facts.uid);
        let spec = match self.specs.get(&facts.spec) {
            Some(shared) => shared.clone(),
            None => {
                self.specs.insert(facts.spec.clone());
                facts.spec
            }
        };
        let owner = facts.owner.map(|o| match self.owner_refs.get(&o) {
            Some(shared) => shared.clone(),
            None => {
                let o = Arc::new(o);
                self.owner_refs.insert(o.clone());
                o
            }
        });
        let facts = Facts {
            namespace: intern_str(&mut self.strs, &facts.namespace),
            name: Arc::from(facts.name.as_str()),
            owner,
            spec,
            scheduled_ms: facts.scheduled_ms,
            finished_ms: facts.finished_ms,
        };
        let labels = [CPU_TYPE_LABEL, GPU_TYPE_LABEL, MEMORY_TYPE_LABEL]
            .iter()
            .any(|k| labels.contains_key(*k))
            .then(|| Box::new(labels));
        let was_unschedulable = self.pods.get(&uid).is_some_and(|p| p.unschedulable);
        if let Some(old) = self.pods.remove(&uid) {
            if let Some(s) = self.by_workload.get_mut(&old.workload) {
                s.remove(&uid);
            }
            self.refile_for_pod(&old.workload, false);
        }
        let Some(workload) = owning_workload(&facts.namespace, facts.owner.as_deref(), |o| {
            self.controller_of(&facts.namespace, o)
        }) else {
            return BTreeSet::new();
        };
        let workload = intern_str(&mut self.strs, &workload);
        let finished_quota = self.finished_quota(&workload);
        let entry = PodEntry {
            facts,
            labels,
            priority,
            workload,
            unschedulable,
            deleted_ms: None,
        };
        let mut touched = self.place_pod(uid.clone(), entry, now_ms);
        touched.extend(finished_quota);
        if was_unschedulable != unschedulable {
            // Physical pressure appeared or went away: the parent decides.
            if let Some(q) = self
                .pods
                .get(&uid)
                .and_then(|p| self.workloads.get(&*p.workload))
            {
                touched.insert(q.quota.clone());
            }
        }
        touched
    }

    /// Index a pod under its workload (`p.workload`, resolved by the
    /// caller), and record its run if that workload is governed.
    fn place_pod(&mut self, uid: String, p: PodEntry, now_ms: i64) -> BTreeSet<String> {
        self.by_workload
            .entry(p.workload.clone())
            .or_default()
            .insert(uid.clone());
        let mut touched = BTreeSet::new();
        let previous = self.pod_runs.get(&uid).cloned();
        match self.workloads.get_mut(&*p.workload) {
            Some(seen) => {
                seen.info.priority = seen.info.priority.max(p.priority);
                if let Some(start) = p.facts.scheduled_ms {
                    let end = match (p.facts.finished_ms, p.deleted_ms) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let models = Models::from_labels(
                        &seen.info.labels,
                        p.labels.as_deref().unwrap_or(&NO_LABELS),
                    );
                    let run = PodRun {
                        quota: seen.quota.clone(),
                        usage: intern(&mut self.usages, p.facts.usage(&models, &self.cfg)),
                        qos: Some(p.facts.qos()),
                        start_ms: start,
                        end_ms: end,
                        workload: p.workload.clone(),
                    };
                    if let Some(prev) = previous.as_ref().filter(|r| r.quota != run.quota) {
                        // Moved to another quota: the old one pays up to
                        // now (its run kept under its own key until paid),
                        // the new one from now.
                        let mut old = prev.clone();
                        old.end_ms = Some(old.end_ms.map_or(now_ms, |e| e.min(now_ms)));
                        let old_key = format!("{uid}@{}", prev.quota);
                        self.pod_runs.replace(&old_key, old.clone());
                        if self.pod_runs.is_unbilled(&uid) {
                            self.pod_runs.mark_unbilled(&old_key);
                        }
                        self.dirty_runs.insert(old_key, Some(old));
                        touched.insert(prev.quota.clone());
                        let mut moved = run;
                        moved.start_ms = moved.start_ms.max(now_ms);
                        moved.end_ms = None;
                        self.pod_runs.replace(&uid, moved);
                    } else {
                        self.pod_runs.observe(&uid, run);
                    }
                }
            }
            None => {
                if previous.is_some() {
                    // No longer governed: its run ends now.
                    self.pod_runs.deleted(&uid, now_ms);
                }
            }
        }
        let now_run = self.pod_runs.get(&uid).cloned();
        if now_run != previous {
            self.dirty_runs.insert(uid.clone(), now_run.clone());
            for r in previous.iter().chain(now_run.iter()) {
                touched.insert(r.quota.clone());
            }
        }
        let workload = p.workload.clone();
        let running = p.facts.finished_ms.is_none() && p.deleted_ms.is_none();
        if p.deleted_ms.is_some() && self.pod_runs.get(&uid).is_some() {
            // A tombstone whose run is recorded has served its purpose.
            if let Some(s) = self.by_workload.get_mut(&p.workload) {
                s.remove(&uid);
            }
        } else {
            if p.unschedulable {
                self.unschedulable.insert(uid.clone());
            } else {
                self.unschedulable.remove(&uid);
            }
            self.pods.insert(uid, p);
        }
        self.refile_for_pod(&workload, running);
        touched
    }

    /// A pod is gone at `now_ms`: its run ends then (unless it ended
    /// earlier), and its quota must accrue the last stretch.
    pub fn delete_pod(&mut self, uid: &str, now_ms: i64) -> BTreeSet<String> {
        let workload = self.pods.get(uid).map(|p| p.workload.clone());
        let touched = self.drop_pod(uid, now_ms);
        if let Some(w) = workload {
            self.refile_for_pod(&w, false);
        }
        touched
    }

    /// `delete_pod` but for filing its workload again.
    fn drop_pod(&mut self, uid: &str, now_ms: i64) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        self.unschedulable.remove(uid);
        self.gated.remove(uid);
        // Gone from the cluster, whether the view still held it or had
        // dropped it (its owners stopped resolving): its paid-off run can
        // no longer be seen again.
        self.pod_runs.forget(uid);
        if let Some(mut p) = self.pods.remove(uid) {
            touched.extend(self.finished_quota(&p.workload));
            if p.unschedulable {
                if let Some(w) = self.workloads.get(&*p.workload) {
                    touched.insert(w.quota.clone());
                }
            }
            if self.pod_runs.get(uid).is_none()
                && p.facts.scheduled_ms.is_some()
                && !self.workloads.contains_key(&*p.workload)
            {
                // Its owners have not resolved yet (the pod watch ran
                // ahead of the workload watches): keep a tombstone.
                p.deleted_ms = Some(now_ms);
                p.unschedulable = false;
                self.pods.insert(uid.to_string(), p);
                return touched;
            }
            if let Some(s) = self.by_workload.get_mut(&p.workload) {
                s.remove(uid);
                if s.is_empty() {
                    self.by_workload.remove(&p.workload);
                }
            }
        }
        self.pod_runs.deleted(uid, now_ms);
        if let Some(r) = self.pod_runs.get(uid).cloned() {
            touched.insert(r.quota.clone());
            self.dirty_runs.insert(uid.to_string(), Some(r));
        }
        touched
    }

    /// Pods known from an earlier life (the persisted pod runs) that the
    /// first complete pod list did not show: deleted while nobody watched.
    /// Their runs end at `at_ms` (the last moment they were known alive).
    pub fn end_missing_pods(&mut self, listed: &HashSet<String>, at_ms: i64) -> BTreeSet<String> {
        let missing: Vec<String> = self
            .pod_runs
            .uids()
            .filter(|u| !listed.contains(*u))
            .cloned()
            .collect();
        let mut touched = BTreeSet::new();
        for uid in missing {
            self.pod_runs.deleted(&uid, at_ms);
            if let Some(r) = self.pod_runs.get(&uid).cloned() {
                touched.insert(r.quota.clone());
                self.dirty_runs.insert(uid, Some(r));
            }
        }
        touched
    }

    /// Live pods (tombstones excluded), for relists.
    pub fn pod_uids(&self) -> HashSet<String> {
        self.pods
            .iter()
            .filter(|(_, p)| p.deleted_ms.is_none())
            .map(|(u, _)| u.clone())
            .collect()
    }

    /// Forget tombstones older than `max_age_ms` whose owners never
    /// resolved to a governed workload, and shared specs and usages nothing
    /// uses any more. Returns how many tombstones.
    pub fn prune_tombstones(&mut self, now_ms: i64, max_age_ms: i64) -> usize {
        self.specs.retain(|s| Arc::strong_count(s) > 1);
        self.usages.retain(|u| Arc::strong_count(u) > 1);
        self.strs.retain(|u| Arc::strong_count(u) > 1);
        self.owner_refs.retain(|u| Arc::strong_count(u) > 1);
        let old: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.deleted_ms.is_some_and(|d| now_ms - d > max_age_ms))
            .map(|(u, _)| u.clone())
            .collect();
        for uid in &old {
            if let Some(p) = self.pods.remove(uid) {
                if let Some(s) = self.by_workload.get_mut(&p.workload) {
                    s.remove(uid);
                }
            }
        }
        old.len()
    }

    /// The pods bizrq accounts, as real usage reads them
    /// (`quota::real_usage::measure::Held`), by uid: every recorded run
    /// whose pod is known by name — from the view, or from `names` (what
    /// an earlier reading saw) for a pod deleted since, so its last
    /// stretch is read too. A moved pod's old part (`uid@quota`) is its
    /// old quota's, whose figures the move does not change.
    pub fn held(
        &self,
        names: &HashMap<String, quota::real_usage::answer::PodName>,
    ) -> Vec<(String, quota::real_usage::measure::Held)> {
        use quota::real_usage::answer::PodName;
        let mut out = Vec::new();
        for uid in self.pod_runs.uids() {
            if uid.contains('@') {
                continue;
            }
            let Some(run) = self.pod_runs.get(uid) else {
                continue;
            };
            let name = match self.pods.get(uid) {
                Some(p) if !p.facts.name.is_empty() => PodName {
                    namespace: p.facts.namespace.to_string(),
                    pod: p.facts.name.to_string(),
                },
                _ => match names.get(uid) {
                    Some(n) => n.clone(),
                    None => continue,
                },
            };
            let mut cards = 0i128;
            let mut model = None;
            for gpu in &self.cfg.gpu_resources {
                let key = format!("requests.{gpu}");
                cards += quota::resources::get(&run.usage, &key).nanos();
                if model.is_none() {
                    let prefix = format!("{key}.");
                    model = run
                        .usage
                        .keys()
                        .find_map(|k| k.strip_prefix(&prefix).map(str::to_string));
                }
            }
            out.push((
                uid.clone(),
                quota::real_usage::measure::Held {
                    name,
                    workload: run.workload.to_string(),
                    quota: run.quota.clone(),
                    cards,
                    model,
                    cpu_request: quota::resources::get(&run.usage, "requests.cpu").nanos(),
                    memory_request: quota::resources::get(&run.usage, "requests.memory").nanos(),
                    qos: run.qos.unwrap_or(quota::usage::QosClass::Guaranteed),
                    start_ms: run.start_ms,
                    end_ms: run.end_ms,
                },
            ));
        }
        out
    }

    pub fn run_count(&self) -> usize {
        self.pod_runs.len()
    }

    /// An HPA was added or changed: the quota of its target.
    pub fn apply_hpa(&mut self, h: quota::workload::Hpa) -> BTreeSet<String> {
        let key = (h.meta.namespace.clone(), h.meta.name.clone());
        let target = adapter_for_kind(&h.target_group, &h.target_kind)
            .filter(|a| a.scalable)
            .map(|a| String::from(a.workload_ref(&h.meta.namespace, &h.target_name)));
        let mut touched = BTreeSet::new();
        if let Some(old) = self.take_hpa(&key) {
            add(&mut touched, self.quota_of(&old.target));
        }
        if let Some(target) = target {
            add(&mut touched, self.quota_of(&target));
            self.put_hpa(
                key,
                HpaSeen {
                    target,
                    charge: HpaCharge {
                        name: h.meta.name.clone(),
                        max_replicas: h.max_replicas,
                    },
                },
            );
        }
        touched
    }

    pub fn delete_hpa(&mut self, namespace: &str, name: &str) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        if let Some(old) = self.take_hpa(&(namespace.to_string(), name.to_string())) {
            add(&mut touched, self.quota_of(&old.target));
        }
        touched
    }

    /// The HPAs known, as `(namespace, name)`, for relists.
    pub fn hpa_keys(&self) -> Vec<(String, String)> {
        self.hpas.keys().cloned().collect()
    }

    /// What one reconcile of `quota` needs to decide on `status`, taken in
    /// its write with its instant: its workloads as observed (with the
    /// reservation of an HPA on each), its pods' runs, and what the watch
    /// shows of the finished and deleted ones `status` names (`observe`).
    pub fn snapshot(&self, quota: &str, status: &QuotaStatus) -> Snapshot {
        debug_assert!(self.filed_right(quota), "{quota}: a workload filed wrong");
        // Of those that finished and run nothing, only the names the
        // status holds matter (`observe`): each is looked up, never the
        // quota's whole history walked.
        let named: BTreeSet<&String> = status
            .workloads
            .keys()
            .chain(status.deleted.keys())
            .chain(status.reservations.values().flat_map(|m| m.keys()))
            .collect();
        let done = self.done_by_quota.get(quota);
        let named_done = named
            .into_iter()
            .filter(|w| done.is_some_and(|d| d.contains(*w)))
            .filter_map(|w| self.workloads.get_key_value(w));
        let mut snap = self.observe(self.live_in(quota).chain(named_done), Some(status));
        for (uid, run) in self.pod_runs.runs_with_uids(quota) {
            snap.unbilled.push(self.pod_runs.is_unbilled(uid));
            snap.uids.push(uid.clone());
            snap.runs.push(run.clone());
        }
        snap
    }

    /// `snapshot` of what a queue round reads, without runs: the workloads
    /// `charged` names that are bound to `quota` (a few dozen), and those
    /// bound to it that run pods without a charge, which its reconcile
    /// charges again (a DELETE's release the watch has not delivered);
    /// never the hundreds of finished or held objects a quota keeps.
    pub fn round_seen<'a>(
        &'a self,
        quota: &str,
        charged: impl Iterator<Item = &'a String> + Clone,
    ) -> Snapshot {
        let listed: HashSet<&str> = charged.clone().map(String::as_str).collect();
        let uncharged = self.live_in(quota).filter(|(w, s)| {
            !s.finished
                && s.info.released.is_none()
                && s.pod_sets.iter().any(|p| p.count > 0)
                && !listed.contains(w.as_str())
        });
        self.observe(
            charged
                .filter_map(|w| Some((w, self.seen_in(quota, w)?)))
                .chain(uncharged),
            None,
        )
    }

    /// What a reconcile charges `wref` at, as the watch shows it.
    fn observed_of(&self, wref: &str, s: &Seen) -> Observed {
        let hpa = self
            .hpa_targets
            .get(wref)
            .and_then(|keys| keys.iter().filter_map(|k| self.hpas.get(k)).next())
            .map(|h| h.charge.clone());
        Observed {
            pod_sets: s.pod_sets.clone(),
            hpa,
        }
    }

    /// `wref` bound to `quota` as a reconcile charges it, whatever its
    /// state: for the few workloads `snapshot` leaves out of `observed`
    /// (finished, running nothing) whose charge is kept as a newer
    /// object's of the name (`quota::reconcile::release_finished`).
    pub fn observed_in(&self, quota: &str, wref: &str) -> Option<Observed> {
        self.seen_in(quota, wref).map(|s| self.observed_of(wref, s))
    }

    /// Adds to `observed` each of `names` bound to `quota`, as a reconcile
    /// charges it (`observed_in`): the few a snapshot left out that the
    /// status it decides on charges.
    pub fn observe_into<'a>(
        &self,
        quota: &str,
        names: impl IntoIterator<Item = &'a String>,
        observed: &mut BTreeMap<String, Observed>,
    ) {
        for w in names {
            if let Some(o) = self.observed_in(quota, w) {
                observed.insert(w.clone(), o);
            }
        }
    }

    /// `wref` as the watch shows it, where it is bound to `quota`.
    fn seen_in(&self, quota: &str, wref: &str) -> Option<&Seen> {
        self.workloads.get(wref).filter(|s| s.quota == quota)
    }

    /// `seen` as a reconcile reads it. With `status` (the reconcile's, the
    /// one its write decides on), only what that status can use is
    /// copied: a quota keeps hundreds of finished Jobs and of held, marked
    /// objects, and copying each one's name, uid and finish on every
    /// reconcile was most of its CPU (docs/benchmarks.md). Every reader of
    /// those fields asks only of names the status holds: a finished one's
    /// charge goes (`quota::reconcile::release_finished`, by the names it
    /// charges), a finished one's reservation settles
    /// (`settle_finished`, by the names it reserves for), a released
    /// DELETE is judged by the object the watch shows
    /// (`forget_deleted`, by the names it lists). A held, marked object
    /// waits for a round (docs/queueing.md §12) and is no workload to
    /// record, unless the status charges it (admitted by a round, its
    /// release not seen yet): then it is read as the watch shows it.
    /// Without `status` (a round's few), everything given is copied.
    fn observe<'k, 's>(
        &'s self,
        seen: impl Iterator<Item = (&'k String, &'s Seen)>,
        status: Option<&QuotaStatus>,
    ) -> Snapshot {
        let mut observed = BTreeMap::new();
        let mut finished = BTreeSet::new();
        let mut released = BTreeMap::new();
        let mut finished_uids = BTreeMap::new();
        let mut object_uids = BTreeMap::new();
        // Each asked only where its answer is used: most quotas have no
        // released DELETE and no reservation, and a lookup per workload
        // of a quota's hundreds is itself a cost.
        let charged = |w: &str| status.is_none_or(|st| st.workloads.contains_key(w));
        let deleted = |w: &str| status.is_none_or(|st| st.deleted.contains_key(w));
        let reserved =
            |w: &str| status.is_none_or(|st| st.reservations.values().any(|m| m.contains_key(w)));
        for (wref, s) in seen {
            if !s.info.uid.is_empty() && deleted(wref) {
                object_uids.insert(wref.clone(), s.info.uid.clone());
            }
            if s.finished {
                // Runs nothing for good: its charge goes
                // (`quota::reconcile::release_finished`), so it has no size
                // to copy. The reconcile asks for the few whose charge is a
                // newer object's of the name (`observed_in`).
                let gone = s.finished_at.filter(|_| self.is_done(wref));
                if reserved(wref) {
                    finished.insert(wref.clone());
                }
                if charged(wref) {
                    finished_uids.insert(wref.clone(), s.info.uid.clone());
                    if let Some(at) = gone {
                        released.insert(wref.clone(), at);
                    }
                }
                if gone.is_some() {
                    continue;
                }
            }
            if status.is_some() && s.info.released.is_some() && !charged(wref) {
                continue;
            }
            observed.insert(wref.clone(), self.observed_of(wref, s));
        }
        Snapshot {
            observed,
            runs: Vec::new(),
            uids: Vec::new(),
            unbilled: Vec::new(),
            finished,
            released,
            finished_uids,
            object_uids,
        }
    }

    /// The object uid of `wref` as the watch shows it, where it is bound
    /// to `quota` (none while the watch has not read it).
    pub fn object_uid_in(&self, quota: &str, wref: &str) -> Option<String> {
        self.seen_in(quota, wref)
            .map(|s| s.info.uid.clone())
            .filter(|u| !u.is_empty())
    }

    /// Every workload bound to `quota`, in the order of their names.
    fn workloads_in<'a>(
        &'a self,
        quota: &str,
    ) -> impl Iterator<Item = (&'a String, &'a Seen)> + 'a {
        let live = self.by_quota.get(quota).into_iter().flatten();
        let done = self.done_by_quota.get(quota).into_iter().flatten();
        crate::util::merge_sorted(live, done).filter_map(|w| self.workloads.get_key_value(w))
    }

    /// The workloads bound to `quota` but those that finished and run
    /// nothing any more (`is_done`).
    fn live_in<'a>(&'a self, quota: &str) -> impl Iterator<Item = (&'a String, &'a Seen)> + 'a {
        self.by_quota
            .get(quota)
            .into_iter()
            .flatten()
            .filter_map(|w| self.workloads.get_key_value(w))
    }

    /// Record whether the pod `uid` (applied just before) carries bizrq's
    /// gate: its name and the patch that removes it (None: it does not).
    /// The quota to reconcile, which releases it if its workload is
    /// charged.
    pub fn set_gated(
        &mut self,
        uid: &str,
        gate: Option<(String, serde_json::Value)>,
    ) -> Option<String> {
        match gate {
            Some(g) => {
                self.gated.insert(uid.to_string(), g);
                let p = self.pods.get(uid)?;
                Some(self.workloads.get(&*p.workload)?.quota.clone())
            }
            None => {
                self.gated.remove(uid);
                None
            }
        }
    }

    fn gated_pod(&self, uid: &str) -> Option<(&PodEntry, GatedPod)> {
        let (name, patch) = self.gated.get(uid)?;
        let p = self.pods.get(uid)?;
        Some((
            p,
            GatedPod {
                workload_ref: p.workload.to_string(),
                namespace: p.facts.namespace.to_string(),
                name: name.clone(),
                patch: patch.clone(),
            },
        ))
    }

    /// The pods carrying bizrq's gate whose workload is bound to `quota`.
    pub fn gated_pods(&self, quota: &str) -> Vec<GatedPod> {
        let pods = self
            .gated
            .keys()
            .filter_map(|uid| self.gated_pod(uid))
            .filter(|(p, _)| {
                self.workloads
                    .get(&*p.workload)
                    .is_some_and(|w| w.quota == quota)
            })
            .map(|(_, g)| g)
            .collect();
        by_name(pods)
    }

    /// The pods of `wref` carrying bizrq's gate, by namespace and name.
    pub fn gated_pods_of(&self, wref: &str) -> Vec<GatedPod> {
        let pods = self
            .by_workload
            .get(wref)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.gated_pod(uid).map(|(_, g)| g))
            .collect();
        by_name(pods)
    }

    /// `namespace/name` was ungated (or is gone): not released again
    /// before the watch shows it anew.
    pub fn ungated(&mut self, namespace: &str, name: &str) {
        let uids: Vec<String> = self
            .gated
            .iter()
            .filter(|(uid, (n, _))| {
                n == name
                    && self
                        .pods
                        .get(*uid)
                        .is_some_and(|p| &*p.facts.namespace == namespace)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            self.gated.remove(&uid);
        }
    }

    /// The uid of a workload the watch shows, if it shows one.
    pub fn workload_uid(&self, wref: &str) -> Option<String> {
        self.workloads
            .get(wref)
            .map(|s| s.info.uid.clone())
            .filter(|u| !u.is_empty())
    }

    /// Whether the watch shows `wref` as the object of uid `uid` (a round
    /// asks this of every entry of its queue: nothing is copied).
    pub fn is_workload(&self, wref: &str, uid: &str) -> bool {
        !uid.is_empty() && self.workloads.get(wref).is_some_and(|s| s.info.uid == uid)
    }

    /// Whether a workload bound to `quota` carries the annotation `key`.
    pub fn any_annotated(&self, quota: &str, key: &str) -> bool {
        self.workloads_in(quota)
            .any(|(_, s)| s.info.annotations.contains_key(key))
    }

    /// The annotation `key` of `wref`, where the watch shows it bound to
    /// `quota` (a reconcile asks this of its few charged workloads, not of
    /// every object the quota keeps).
    pub fn annotation_of(&self, quota: &str, wref: &str, key: &str) -> Option<&str> {
        self.seen_in(quota, wref)
            .and_then(|s| s.info.annotations.get(key))
            .map(String::as_str)
    }

    /// The runs still held of the pods of `wref` bound to
    /// `quota`, for a refund: runs already paid in full and forgotten are
    /// not among them, so what they give is at most what the run accrued.
    pub fn runs_of_workload(&self, wref: &str, quota: &str) -> Vec<quota::pods::PodRun> {
        self.by_workload
            .get(wref)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pod_runs.get(uid))
            .filter(|r| r.quota == quota)
            .cloned()
            .collect()
    }

    /// The declared run time of a workload the watch shows, if it
    /// declares one.
    pub fn workload_run_ms(&self, wref: &str) -> Option<i64> {
        self.workloads.get(wref).and_then(|s| s.info.run_ms)
    }

    /// The quota `wref` is bound to, and whether it is held with a queue
    /// mark (`set_released`); None when the watch does not show it.
    pub fn marked_held(&self, wref: &str) -> Option<(&str, bool)> {
        self.workloads
            .get(wref)
            .map(|s| (s.quota.as_str(), s.info.released.is_some()))
    }

    /// Record what the held, marked `wref` runs once released (None: not
    /// held, or not marked).
    pub fn set_released(&mut self, wref: &str, released: Option<Vec<PodSet>>) {
        if let Some(s) = self.workloads.get_mut(wref) {
            s.info.released = released;
            s.remark(wref);
        }
    }

    /// Record the PriorityClasses `wref`'s pod templates name.
    pub fn set_priority_classes(&mut self, wref: &str, classes: Vec<String>) {
        if let Some(s) = self.workloads.get_mut(wref) {
            s.info.priority_classes = classes;
            s.remark(wref);
        }
    }

    /// The workloads bound to `quota` as the watch shows them, borrowed
    /// (a quota's round reads hundreds each time: each caller copies only
    /// what it keeps of the few it takes).
    pub fn workloads_of<'a>(
        &'a self,
        quota: &str,
    ) -> impl Iterator<Item = (&'a String, &'a [PodSet], &'a WorkloadInfo)> + 'a {
        self.workloads_in(quota)
            .map(|(r, s)| (r, s.pod_sets.as_slice(), &s.info))
    }

    /// The held objects bound to `quota` that carry a queue mark, as the
    /// watch shows them, shared (`Seen::marked`).
    pub fn marked_of(&self, quota: &str) -> Vec<Arc<MarkedObject>> {
        self.workloads_in(quota)
            .filter_map(|(_, s)| s.marked.clone())
            .collect()
    }

    /// Whether any held object bound to `quota` carries a queue mark
    /// (`marked_of` would name one), without copying.
    pub fn has_marked(&self, quota: &str) -> bool {
        self.workloads_in(quota).any(|(_, s)| s.marked.is_some())
    }

    /// `workloads_of`, without those whose status says they finished: what
    /// reclaim and preemption may stop. A finished workload runs nothing
    /// and its charge goes by itself (docs/queueing.md §9), so suspending
    /// it frees nothing: taken as a victim, it would be held, queued,
    /// admitted with nothing to charge and released, again and again.
    pub fn unfinished_of<'a>(
        &'a self,
        quota: &str,
    ) -> impl Iterator<Item = (&'a String, &'a [PodSet], &'a WorkloadInfo)> + 'a {
        self.workloads_in(quota)
            .filter(|(_, s)| !s.finished)
            .map(|(r, s)| (r, s.pod_sets.as_slice(), &s.info))
    }

    /// One workload bound to `quota` as the watch shows it: what it runs
    /// and what is known of it.
    pub fn workload_in(&self, quota: &str, wref: &str) -> Option<(&[PodSet], &WorkloadInfo)> {
        self.seen_in(quota, wref)
            .map(|s| (s.pod_sets.as_slice(), &s.info))
    }

    /// Usage of the unschedulable pods of workloads bound to `quota`.
    pub fn unschedulable_usage(&self, quota: &str) -> ResourceList {
        let mut out = ResourceList::new();
        for p in self
            .unschedulable
            .iter()
            .filter_map(|u| self.pods.get(u))
            .filter(|p| p.unschedulable)
        {
            if let Some(seen) = self
                .workloads
                .get(&*p.workload)
                .filter(|s| s.quota == quota)
            {
                let models = Models::from_labels(
                    &seen.info.labels,
                    p.labels.as_deref().unwrap_or(&NO_LABELS),
                );
                quota::resources::add_into(&mut out, &p.facts.usage(&models, &self.cfg));
            }
        }
        out
    }

    /// After a status write accrued `quota` up to `up_to_ms` (the runs of
    /// its snapshot, `billed`; None: nothing written, `up_to_ms` is where
    /// the stored window starts): drop runs paid in full (and remember to
    /// forget them on disk).
    pub fn settle(&mut self, quota: &str, up_to_ms: i64, billed: Option<&[String]>) {
        for uid in self.pod_runs.settle(quota, up_to_ms, billed) {
            if !self.pods.contains_key(&uid) {
                self.pod_runs.forget(&uid);
            }
            self.dirty_runs.insert(uid, None);
        }
    }

    /// The first lists are done: runs recorded from now on may be late.
    pub fn set_live(&mut self) {
        self.pod_runs.set_live();
    }

    /// Load runs persisted by an earlier life.
    pub fn restore_runs(&mut self, runs: Vec<(String, PodRun)>) {
        for (uid, mut run) in runs {
            run.usage = match self.usages.get(&run.usage) {
                Some(shared) => shared.clone(),
                None => {
                    self.usages.insert(run.usage.clone());
                    run.usage
                }
            };
            self.pod_runs.replace(&uid, run);
        }
    }

    /// Changes whose persisting failed: to be tried again, unless a newer
    /// change of the same run came meanwhile.
    pub fn redirty(&mut self, up: Vec<(String, PodRun)>, del: Vec<String>) {
        for (uid, r) in up {
            self.dirty_runs.entry(uid).or_insert(Some(r));
        }
        for uid in del {
            self.dirty_runs.entry(uid).or_insert(None);
        }
    }

    /// Pod-run changes to persist (upserts, deletes), emptied.
    pub fn take_dirty_runs(&mut self) -> (Vec<(String, PodRun)>, Vec<String>) {
        let mut up = Vec::new();
        let mut del = Vec::new();
        for (uid, r) in self.dirty_runs.drain() {
            match r {
                Some(r) => up.push((uid, r)),
                None => del.push(uid),
            }
        }
        (up, del)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::pods::read_pod;
    use quota::Quantity;

    const T: i64 = 1_800_000_000_000;

    fn deployment(
        name: &str,
        quota: &str,
        replicas: i64,
        gpus: i64,
    ) -> (&'static Adapter, Workload) {
        let a = adapter_for_kind("apps", "Deployment").unwrap();
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"nlp","uid":"d-{name}","labels":{{"biz.group.resource.quota":"{quota}","biz.group.resource.quota/gpu-type":"A100"}}}},
               "spec":{{"replicas":{replicas},"template":{{"spec":{{"containers":[{{"name":"c","resources":{{"limits":{{"nvidia.com/gpu":"{gpus}"}}}}}}]}}}}}}}}"#
        );
        (a, a.read(&json, &KeyConfig::default()).unwrap())
    }

    fn replicaset(name: &str, deployment: &str) -> (&'static Adapter, Workload) {
        let a = adapter_for_kind("apps", "ReplicaSet").unwrap();
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"nlp","uid":"rs-{name}","labels":{{"biz.group.resource.quota":"ignored"}},
                 "ownerReferences":[{{"apiVersion":"apps/v1","kind":"Deployment","name":"{deployment}","uid":"x","controller":true}}]}},
               "spec":{{"replicas":1,"template":{{"spec":{{"containers":[{{"name":"c"}}]}}}}}}}}"#
        );
        (a, a.read(&json, &KeyConfig::default()).unwrap())
    }

    fn pod(uid: &str, rs: &str, scheduled: &str, phase: &str) -> PodFacts {
        let json = format!(
            r#"{{"metadata":{{"name":"{uid}","namespace":"nlp","uid":"{uid}",
                 "ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{rs}","uid":"y","controller":true}}]}},
               "spec":{{"containers":[{{"name":"c","resources":{{"limits":{{"nvidia.com/gpu":"2"}}}}}}]}},
               "status":{{"phase":"{phase}","conditions":[{{"type":"PodScheduled","status":"True","lastTransitionTime":"{scheduled}"}}]}}}}"#
        );
        read_pod(&json).unwrap()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// A finished Job is `released` (its charge may go) only once the pod
    /// list is complete and none of its pods is left running; the end of
    /// its last pod touches its quota, so the release follows at once.
    /// A status charging `names` (what a reconcile's snapshot copies the
    /// finished and deleted ones of).
    fn charging(names: &[&str]) -> QuotaStatus {
        let mut st = QuotaStatus::default();
        for w in names {
            st.workloads.insert(
                w.to_string(),
                quota::object::Charge {
                    pod_sets: Vec::new(),
                    hpa: None,
                    since: "2027-01-15T06:00:00Z".into(),
                    uid: String::new(),
                    admitted: None,
                },
            );
        }
        st
    }

    /// A status naming `wref` every way a reconcile reads a finished or
    /// deleted one: charged, reserved for, and released by a DELETE.
    fn naming(wref: &str) -> QuotaStatus {
        let mut st = charging(&[wref]);
        st.reservations
            .entry("nvidia.com/gpu-hours".into())
            .or_default()
            .insert(
                wref.to_string(),
                quota::object::budgets::Reservation {
                    reserved: 1,
                    used: 0,
                    at_ms: T,
                    run_ms: 1,
                },
            );
        st.deleted.insert(
            wref.to_string(),
            quota::object::deleted::Deleted {
                uid: "j-1".into(),
                at: "2027-01-15T08:00:01Z".into(),
            },
        );
        st
    }

    #[test]
    fn a_finished_job_is_released_only_when_no_pod_of_it_runs() {
        let a = adapter_for_kind("batch", "Job").unwrap();
        let job = a
            .read(
                r#"{"metadata":{"name":"j","namespace":"nlp","uid":"j-1","labels":{"biz.group.resource.quota":"nlp-team"}},
                   "spec":{"parallelism":2,"template":{"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}},
                   "status":{"conditions":[{"type":"Complete","status":"True","lastTransitionTime":"2027-01-15T08:00:00Z"}]}}"#,
                &KeyConfig::default(),
            )
            .unwrap();
        let pod = |status: &str| {
            read_pod(&format!(
                r#"{{"metadata":{{"name":"j-0","namespace":"nlp","uid":"p-0",
                     "ownerReferences":[{{"apiVersion":"batch/v1","kind":"Job","name":"j","uid":"j-1","controller":true}}]}},
                   "spec":{{"containers":[{{"name":"c","resources":{{"limits":{{"nvidia.com/gpu":"1"}}}}}}]}},
                   "status":{status}}}"#
            ))
            .unwrap()
        };
        let wref = "batch/Job/nlp/j";
        let mut v = View::default();
        v.apply_workload(a, job, None, T);
        let s = v.snapshot("nlp-team", &naming(wref));
        assert!(s.finished.contains(wref));
        assert!(s.released.is_empty(), "no pod list yet: {s:?}");
        assert_eq!(s.observed[wref].pod_sets[0].count, 2, "read as declared");

        let running = r#"{"phase":"Running","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2027-01-15T07:00:00Z"}]}"#;
        assert_eq!(
            v.apply_pod(pod(running), BTreeMap::new(), 0, false, T),
            set(&["nlp-team"])
        );
        v.mark_pods_listed();
        assert!(
            v.snapshot("nlp-team", &naming(wref)).released.is_empty(),
            "its pod still runs"
        );

        let ended = r#"{"phase":"Succeeded","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2027-01-15T07:00:00Z"}],
            "containerStatuses":[{"name":"c","state":{"terminated":{"exitCode":0,"finishedAt":"2027-01-15T08:00:00Z"}}}]}"#;
        assert_eq!(
            v.apply_pod(pod(ended), BTreeMap::new(), 0, false, T),
            set(&["nlp-team"]),
            "its last pod's end touches its quota"
        );
        let s = v.snapshot("nlp-team", &naming(wref));
        assert_eq!(
            s.released.get(wref).copied(),
            quota::time::parse_rfc3339("2027-01-15T08:00:00Z")
        );
        assert!(
            !s.observed.contains_key(wref),
            "it runs nothing for good: no size to charge, not copied"
        );
        assert_eq!(s.object_uids.get(wref).map(String::as_str), Some("j-1"));
        // A status that does not name it has no use for it: nothing of it
        // is copied (a quota keeps hundreds of finished Jobs).
        let s = v.snapshot("nlp-team", &QuotaStatus::default());
        assert!(
            s.finished.is_empty()
                && s.released.is_empty()
                && s.finished_uids.is_empty()
                && s.object_uids.is_empty()
                && s.observed.is_empty(),
            "{s:?}"
        );
        // Each is read where the status names it the way it is used:
        // charged, its release and uid; reserved for, its finish; released
        // by a DELETE, its object's uid.
        let s = v.snapshot("nlp-team", &charging(&[wref]));
        assert!(s.released.contains_key(wref) && s.finished_uids[wref] == "j-1");
        assert!(s.finished.is_empty() && s.object_uids.is_empty(), "{s:?}");
        let mut st = naming(wref);
        st.workloads.clear();
        st.deleted.clear();
        let s = v.snapshot("nlp-team", &st);
        assert!(s.finished.contains(wref) && s.released.is_empty(), "{s:?}");
        let mut st = naming(wref);
        st.workloads.clear();
        st.reservations.clear();
        let s = v.snapshot("nlp-team", &st);
        assert_eq!(s.object_uids.get(wref).map(String::as_str), Some("j-1"));
        assert!(s.finished.is_empty() && s.released.is_empty(), "{s:?}");

        // A pod deleted while running ends it too.
        v.apply_pod(pod(running), BTreeMap::new(), 0, false, T);
        assert!(
            v.snapshot("nlp-team", &QuotaStatus::default())
                .observed
                .contains_key(wref),
            "a finished Job whose pod runs again is read as declared, named or not"
        );
        assert!(v
            .snapshot("nlp-team", &charging(&[wref]))
            .released
            .is_empty());
        assert_eq!(v.delete_pod("p-0", T), set(&["nlp-team"]));
        assert!(v
            .snapshot("nlp-team", &charging(&[wref]))
            .released
            .contains_key(wref));
    }

    /// Events about a workload carry its uid (`kubectl describe` matches
    /// on it); a workload the watch has not shown has none.
    #[test]
    fn a_workload_is_known_by_its_uid() {
        let mut v = View::default();
        let (a, w) = deployment("train", "nlp-team", 2, 1);
        v.apply_workload(a, w, None, T);
        assert_eq!(
            v.workload_uid("apps/Deployment/nlp/train").as_deref(),
            Some("d-train")
        );
        assert_eq!(v.workload_uid("apps/Deployment/nlp/other"), None);
        assert!(v.is_workload("apps/Deployment/nlp/train", "d-train"));
        assert!(!v.is_workload("apps/Deployment/nlp/train", "d-other"));
        assert!(!v.is_workload("apps/Deployment/nlp/train", ""));
        assert!(!v.is_workload("apps/Deployment/nlp/other", "d-train"));
    }

    #[test]
    fn a_workload_touches_its_old_and_new_quota() {
        let mut v = View::default();
        let (a, w) = deployment("train", "nlp-team", 2, 1);
        assert_eq!(v.apply_workload(a, w, None, T), set(&["nlp-team"]));
        let (a, w) = deployment("train", "cv-team", 2, 1);
        assert_eq!(
            v.apply_workload(a, w, None, T),
            set(&["cv-team", "nlp-team"]),
            "a move reconciles both"
        );
        assert_eq!(
            v.snapshot("nlp-team", &QuotaStatus::default())
                .observed
                .len(),
            0
        );
        let s = v.snapshot("cv-team", &QuotaStatus::default());
        assert_eq!(s.observed["apps/Deployment/nlp/train"].pod_sets[0].count, 2);
        assert_eq!(v.delete_workload(a, "nlp", "train", T), set(&["cv-team"]));
        assert!(v
            .snapshot("cv-team", &QuotaStatus::default())
            .observed
            .is_empty());
    }

    /// A held, marked object waits for a round: a reconcile's snapshot
    /// leaves it out unless the status it decides on charges it (admitted
    /// by a round, its release not seen yet); then it is read as the watch
    /// shows it. A queue round reads it whole where the status charges it.
    #[test]
    fn a_held_marked_object_is_read_only_where_charged() {
        let mut v = View::default();
        let none = QuotaStatus::default();
        let (a, w) = deployment("train", "nlp-team", 2, 1);
        v.apply_workload(a, w, None, T);
        let (a, w) = deployment("serve", "nlp-team", 3, 1);
        v.apply_workload(a, w, None, T);
        let held = "apps/Deployment/nlp/serve";
        let runs = v.snapshot("nlp-team", &none).observed[held]
            .pod_sets
            .clone();
        v.set_released(held, Some(runs.clone()));
        let s = v.snapshot("nlp-team", &none);
        assert!(!s.observed.contains_key(held), "{s:?}");
        assert!(s.observed.contains_key("apps/Deployment/nlp/train"));
        let s = v.snapshot("nlp-team", &charging(&[held]));
        assert_eq!(s.observed[held].pod_sets, runs);
        assert_eq!(v.observed_in("nlp-team", held).unwrap().pod_sets, runs);
        let charged = [held.to_string()];
        let r = v.round_seen("nlp-team", charged.iter());
        assert!(r.observed.contains_key(held));
        v.set_released(held, None);
        assert!(v.snapshot("nlp-team", &none).observed.contains_key(held));
    }

    /// What a round folds of a held, marked object is built when the
    /// object changes and shared by every round until then: the same
    /// copy twice, a new one once its priority classes or release change,
    /// none once it is released or carries no mark.
    #[test]
    fn a_held_marked_objects_fold_input_is_built_once_per_change() {
        let mut v = View::default();
        let (a, mut w) = deployment("serve", "nlp-team", 3, 1);
        w.meta
            .annotations
            .insert(quota::queue::mark::ANNOTATION.to_string(), "m".into());
        v.apply_workload(a, w.clone(), None, T);
        let held = "apps/Deployment/nlp/serve";
        assert!(
            v.marked_of("nlp-team").is_empty(),
            "not held: nothing to fold"
        );
        let runs = v.snapshot("nlp-team", &QuotaStatus::default()).observed[held]
            .pod_sets
            .clone();
        v.set_released(held, Some(runs.clone()));
        let one = v.marked_of("nlp-team");
        assert_eq!(one.len(), 1);
        assert!(v.has_marked("nlp-team"));
        assert!(Arc::ptr_eq(&one[0], &v.marked_of("nlp-team")[0]), "shared");
        assert_eq!(
            (
                one[0].workload_ref.as_str(),
                one[0].annotation.as_str(),
                one[0].uid.as_str()
            ),
            (held, "m", "d-serve")
        );
        assert_eq!(one[0].work.pod_sets[..], runs[..]);
        v.set_priority_classes(held, vec!["high".into()]);
        let two = v.marked_of("nlp-team");
        assert!(!Arc::ptr_eq(&one[0], &two[0]));
        assert_eq!(two[0].work.priority_classes, vec!["high".to_string()]);
        v.set_released(held, None);
        assert!(
            v.marked_of("nlp-team").is_empty(),
            "released: nothing to fold"
        );
        // A new version of the object is read afresh, held again later.
        w.meta.annotations.clear();
        v.apply_workload(a, w, None, T);
        v.set_released(held, Some(runs));
        assert!(
            v.marked_of("nlp-team").is_empty(),
            "no mark: nothing to fold"
        );
    }

    /// What a queue round reads of its quota's objects changes when an
    /// object is held with a mark (an entry to fold), changes while held,
    /// or goes; not when a running object's status changes, nor when the
    /// only change is the hold released (what a round admitted).
    #[test]
    fn a_rounds_inputs_change_with_held_objects_and_not_with_releases() {
        let mut v = View::default();
        let (a, mut w) = deployment("serve", "nlp-team", 3, 1);
        let held = "apps/Deployment/nlp/serve";
        w.meta
            .annotations
            .insert(quota::queue::mark::ANNOTATION.to_string(), "m".into());
        let apply = |v: &mut View, w: &Workload, released: Option<Vec<PodSet>>| {
            let before = v.round_facts(held);
            v.apply_workload(a, w.clone(), None, T);
            v.set_released(held, released);
            v.workload_changed(held, before);
            v.queue_inputs("nlp-team")
        };
        let runs = vec![PodSet {
            name: "main".into(),
            count: 3,
            per_pod: Default::default(),
            qos: None,
        }];
        let first = apply(&mut v, &w, Some(runs.clone()));
        assert_eq!(first, 0, "a held, marked object appeared: an arrival");
        assert_eq!(v.arrived("nlp-team"), 1);
        let arrived = v.arrivals_since("nlp-team", 0).expect("kept");
        assert_eq!(arrived.len(), 1);
        assert_eq!(arrived[0].workload_ref, held);
        assert_eq!(v.arrivals_since("nlp-team", 1).map(|a| a.len()), Some(0));
        let again = apply(&mut v, &w, Some(runs.clone()));
        assert_ne!(again, first, "changed while held (a new copy to fold)");
        let released = apply(&mut v, &w, None);
        assert_eq!(released, again, "its hold released: admitted already");
        let running = apply(&mut v, &w, None);
        assert_eq!(running, released, "a running object's update");
        w.meta.annotations.insert(
            quota::queue::PREEMPTED_ANNOTATION.to_string(),
            "2026-11-21T10:00:00Z".into(),
        );
        let preempted = apply(&mut v, &w, None);
        assert_ne!(preempted, running, "preempted by bizrq");
        let before = v.round_facts(held);
        assert!(before.is_some());
        v.delete_workload(a, "nlp", "serve", T);
        assert_ne!(v.queue_inputs("nlp-team"), preempted, "gone");
        assert_eq!(v.queue_inputs("cv-team"), 0, "another quota's are its own");
        assert_eq!(v.arrived("nlp-team"), 1, "changes that are no arrival");
        // Appearing again, held and marked (not preempted): another
        // arrival; a round that runs takes those kept.
        w.meta
            .annotations
            .remove(quota::queue::PREEMPTED_ANNOTATION);
        apply(&mut v, &w, Some(runs.clone()));
        assert_eq!(v.arrived("nlp-team"), 2);
        assert_eq!(v.arrivals_since("nlp-team", 0).map(|a| a.len()), Some(2));
        v.round_runs("nlp-team");
        assert_eq!(v.arrivals_since("nlp-team", 2).map(|a| a.len()), Some(0));
        assert!(
            v.arrivals_since("nlp-team", 1).is_none(),
            "taken by a round"
        );
        assert!(v.arrivals_since("nlp-team", 3).is_none(), "none so far");
        assert!(!changes_round(None, None));
        assert!(changes_round(before.as_ref(), None));
        assert!(changes_round(None, before.as_ref()));
    }

    #[test]
    fn owned_replicasets_are_owner_links_not_workloads() {
        let mut v = View::default();
        let (a, w) = replicaset("train-7d9f", "train");
        assert!(v.apply_workload(a, w, None, T).is_empty());
        assert_eq!(
            v.workload_count(),
            0,
            "a ReplicaSet under a Deployment is not governed"
        );
    }

    #[test]
    fn pods_resolve_through_owners_in_any_event_order() {
        let mut v = View::default();
        // The pod arrives first, then its ReplicaSet, then its Deployment.
        let t0 = "2026-11-21T10:00:00Z";
        assert!(v
            .apply_pod(
                pod("p1", "train-7d9f", t0, "Running"),
                BTreeMap::new(),
                0,
                false,
                T
            )
            .is_empty());
        let (a, w) = replicaset("train-7d9f", "train");
        v.apply_workload(a, w, None, T);
        let (a, w) = deployment("train", "nlp-team", 1, 2);
        assert_eq!(v.apply_workload(a, w, None, T), set(&["nlp-team"]));
        let s = v.snapshot("nlp-team", &QuotaStatus::default());
        assert_eq!(
            s.runs.len(),
            1,
            "the pod's run is recorded once its chain resolves"
        );
        assert_eq!(
            s.runs[0].usage["requests.nvidia.com/gpu.A100"],
            Quantity::from_units(2),
            "with the workload's models"
        );
        assert_eq!(s.runs[0].start_ms, quota::time::parse_rfc3339(t0).unwrap());
        // A status update that changes nothing touches nothing.
        assert!(v
            .apply_pod(
                pod("p1", "train-7d9f", t0, "Running"),
                BTreeMap::new(),
                0,
                false,
                T
            )
            .is_empty());
        // Deleted: its quota accrues the last stretch.
        assert_eq!(v.delete_pod("p1", T + 5), set(&["nlp-team"]));
        assert_eq!(
            v.snapshot("nlp-team", &QuotaStatus::default()).runs[0].end_ms,
            Some(T + 5)
        );
        v.settle("nlp-team", T + 10, None);
        assert!(v
            .snapshot("nlp-team", &QuotaStatus::default())
            .runs
            .is_empty());
        let (up, del) = v.take_dirty_runs();
        assert!(
            up.is_empty() && del == vec!["p1".to_string()],
            "{up:?} {del:?}"
        );
    }

    #[test]
    fn a_label_removed_ends_the_runs_of_its_pods() {
        let mut v = View::default();
        let (a, w) = replicaset("train-7d9f", "train");
        v.apply_workload(a, w, None, T);
        let (a, w) = deployment("train", "nlp-team", 1, 2);
        v.apply_workload(a, w, None, T);
        v.apply_pod(
            pod("p1", "train-7d9f", "2026-11-21T10:00:00Z", "Running"),
            BTreeMap::new(),
            0,
            false,
            T,
        );
        let mut w = deployment("train", "x", 1, 2).1;
        w.meta.labels.remove(quota::keys::QUOTA_LABEL);
        assert_eq!(v.apply_workload(a, w, None, T + 7), set(&["nlp-team"]));
        assert_eq!(
            v.snapshot("nlp-team", &QuotaStatus::default()).runs[0].end_ms,
            Some(T + 7)
        );
    }

    #[test]
    fn hpas_reserve_on_their_target() {
        let mut v = View::default();
        let (a, w) = deployment("web", "nlp-team", 2, 1);
        v.apply_workload(a, w, None, T);
        let h = quota::workload::read_hpa(
            r#"{"metadata":{"name":"web","namespace":"nlp"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"maxReplicas":6}}"#,
        )
        .unwrap();
        assert_eq!(v.apply_hpa(h), set(&["nlp-team"]));
        let s = v.snapshot("nlp-team", &QuotaStatus::default());
        assert_eq!(
            s.observed["apps/Deployment/nlp/web"]
                .hpa
                .as_ref()
                .unwrap()
                .max_replicas,
            6
        );
        assert_eq!(v.delete_hpa("nlp", "web"), set(&["nlp-team"]));
        assert!(v.snapshot("nlp-team", &QuotaStatus::default()).observed
            ["apps/Deployment/nlp/web"]
            .hpa
            .is_none());
    }

    #[test]
    fn pods_missing_after_a_restart_end_at_the_watermark() {
        let mut v = View::default();
        let run = PodRun {
            quota: "nlp-team".into(),
            usage: Default::default(),
            qos: None,
            start_ms: T,
            end_ms: None,
            workload: "".into(),
        };
        v.restore_runs(vec![("gone".into(), run.clone()), ("alive".into(), run)]);
        let listed: HashSet<String> = ["alive".to_string()].into();
        assert_eq!(v.end_missing_pods(&listed, T + 60_000), set(&["nlp-team"]));
        let s = v.snapshot("nlp-team", &QuotaStatus::default());
        let ends: Vec<_> = s.runs.iter().map(|r| r.end_ms).collect();
        assert!(ends.contains(&Some(T + 60_000)) && ends.contains(&None));
    }

    #[test]
    fn kind_of_a_reference() {
        assert_eq!(kind_of_ref("apps/Deployment/nlp/train"), "apps/Deployment");
        assert_eq!(
            kind_of_ref("batch.volcano.sh/Job/ml/x"),
            "batch.volcano.sh/Job"
        );
        assert_eq!(kind_of_ref("not-a-reference"), "", "and no panic");
    }
}
#[cfg(test)]
mod order_tests {
    use super::*;
    use quota::pods::read_pod;

    fn obj(kind: &str, json: &str) -> (&'static Adapter, Workload) {
        let a = adapter_for_kind("apps", kind).unwrap();
        (a, a.read(json, &KeyConfig::default()).unwrap())
    }
    const D: &str = r#"{"metadata":{"name":"train","namespace":"nlp","labels":{"biz.group.resource.quota":"q"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"c"}]}}}}"#;
    const RS: &str = r#"{"metadata":{"name":"train-7d9f","namespace":"nlp","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"train","controller":true}]},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"c"}]}}}}"#;
    fn pod(uid: &str) -> PodFacts {
        read_pod(&format!(r#"{{"metadata":{{"name":"{uid}","namespace":"nlp","uid":"{uid}","ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"train-7d9f","controller":true}}]}},"spec":{{"containers":[{{"name":"c","resources":{{"limits":{{"nvidia.com/gpu":"2"}}}}}}]}},"status":{{"phase":"Running","conditions":[{{"type":"PodScheduled","status":"True","lastTransitionTime":"2026-11-21T10:00:00Z"}}]}}}}"#)).unwrap()
    }

    #[test]
    fn every_arrival_order_records_both_pods() {
        // 0 = Deployment, 1 = ReplicaSet, 2 = pod a, 3 = pod b
        let orders = [
            [0, 1, 2, 3],
            [2, 3, 1, 0],
            [2, 1, 3, 0],
            [1, 2, 0, 3],
            [3, 0, 2, 1],
            [2, 0, 3, 1],
        ];
        for order in orders {
            let mut v = View::default();
            for step in order {
                match step {
                    0 => {
                        let (a, w) = obj("Deployment", D);
                        v.apply_workload(a, w, None, 0);
                    }
                    1 => {
                        let (a, w) = obj("ReplicaSet", RS);
                        v.apply_workload(a, w, None, 0);
                    }
                    2 => {
                        v.apply_pod(pod("a"), BTreeMap::new(), 0, false, 0);
                    }
                    _ => {
                        v.apply_pod(pod("b"), BTreeMap::new(), 0, false, 0);
                    }
                }
            }
            assert_eq!(
                v.snapshot("q", &QuotaStatus::default()).runs.len(),
                2,
                "order {order:?}"
            );
        }
    }

    #[test]
    fn a_pod_deleted_before_its_owners_resolve_still_pays() {
        let mut v = View::default();
        v.apply_pod(pod("a"), BTreeMap::new(), 0, false, 0);
        assert!(v.delete_pod("a", 3_600_000).is_empty());
        let (a, w) = obj("ReplicaSet", RS);
        v.apply_workload(a, w, None, 3_700_000);
        let (a, w) = obj("Deployment", D);
        assert_eq!(
            v.apply_workload(a, w, None, 3_800_000),
            ["q".to_string()].into()
        );
        let runs = v.snapshot("q", &QuotaStatus::default()).runs;
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].end_ms, Some(3_600_000), "ends when it was deleted");
        assert_eq!(
            v.pod_count(),
            0,
            "the tombstone is gone once its run is recorded"
        );
        // A tombstone that never resolves is forgotten eventually.
        v.apply_pod(pod("b"), BTreeMap::new(), 0, false, 0);
        let mut orphan = pod("c");
        orphan.owner.as_mut().unwrap().name = "other".into();
        v.apply_pod(orphan, BTreeMap::new(), 0, false, 0);
        v.delete_pod("c", 10);
        assert_eq!(v.prune_tombstones(10 + 600_001, 600_000), 1);
    }

    /// The same Deployment, ReplicaSet and pods in a namespace bizrq does
    /// not govern are not charged (`--excluded-namespaces`), in any order.
    #[test]
    fn workloads_in_an_excluded_namespace_are_not_charged() {
        let to = |ns: &str, json: &str| {
            json.replace(r#""namespace":"nlp""#, &format!(r#""namespace":"{ns}""#))
        };
        for ns in ["kube-system", "bizrq-system", "gpu-ops"] {
            for deployment_first in [true, false] {
                let mut v = View::new(KeyConfig {
                    namespaces: quota::Namespaces::parse("kube-system,bizrq-system,gpu-ops")
                        .unwrap(),
                    ..KeyConfig::default()
                });
                let mut touched = BTreeSet::new();
                let (d, rs) = (
                    obj("Deployment", &to(ns, D)),
                    obj("ReplicaSet", &to(ns, RS)),
                );
                let mut pods = Vec::new();
                for uid in ["a", "b"] {
                    let mut p = pod(uid);
                    p.namespace = ns.to_string();
                    pods.push(p);
                }
                let mut d = Some(d);
                if deployment_first {
                    let (a, w) = d.take().unwrap();
                    touched.extend(v.apply_workload(a, w, None, 0));
                }
                touched.extend(v.apply_workload(rs.0, rs.1, None, 0));
                for p in pods {
                    touched.extend(v.apply_pod(p, BTreeMap::new(), 0, false, 0));
                }
                if let Some((a, w)) = d {
                    touched.extend(v.apply_workload(a, w, None, 0));
                }
                assert!(touched.is_empty(), "{ns}: {touched:?}");
                assert_eq!(v.quota_of(&format!("apps/Deployment/{ns}/train")), None);
                let s = v.snapshot("q", &QuotaStatus::default());
                assert!(s.observed.is_empty() && s.runs.is_empty(), "{ns}: {s:?}");
            }
        }
        // Governed by default: the same objects in "nlp" are charged.
        let mut v = View::default();
        let (a, w) = obj("Deployment", D);
        assert_eq!(v.apply_workload(a, w, None, 0), ["q".to_string()].into());
    }
}
