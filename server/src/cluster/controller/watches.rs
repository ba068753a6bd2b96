//! The watches. Workloads of every served kind, pods and HPAs feed the
//! `View`, which says which quotas each event touches; those are sent as
//! triggers. The quota watch fills kube-runtime's store and triggers a
//! quota's own reconcile; it also handles what the Controller cannot see,
//! since it reconciles only quotas in its store: a deletion (the
//! carve-out returned, roles forgotten) and quotas gone from a relist.
//!
//! After every complete (re)list, objects the view holds that the list did
//! not show are deleted from it: their deletion was missed while the
//! watch was down.

use super::raw::RawObject;
use super::Context;
use crate::cluster::crd::BizGroupResourceQuota;
use crate::cluster::view::kind_key;
use futures::{Stream, StreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ApiResource};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;
use quota::pods::read_pod_value;
use quota::workload::{read_hpa_value, Adapter, WorkloadRef};
use quota::ResourceList;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// The initial-sync gate: open once every startup watch of the view has
/// listed once, so no reconcile decides on a partial picture (it would
/// drop charges of workloads not listed yet).
#[derive(Default)]
pub(super) struct Gate {
    unsynced: AtomicUsize,
    synced: Notify,
}

impl Gate {
    /// `n` watches must list before the gate opens.
    pub(super) fn expect(&self, n: usize) {
        self.unsynced.store(n, Ordering::SeqCst);
    }

    /// One startup watch has listed.
    fn listed(&self) {
        if self.unsynced.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.synced.notify_waiters();
        }
    }

    pub(super) async fn opened(&self) {
        loop {
            let notified = self.synced.notified();
            if self.unsynced.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// What a watch reports to its handler (see `Context::drive`).
enum Change<'a> {
    Apply(&'a RawObject),
    Delete(&'a RawObject),
    /// A complete (re)list: the keys it showed, and whether it is the first.
    Listed {
        listed: HashSet<String>,
        first: bool,
    },
}

fn watch<K>(api: Api<K>) -> impl Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, watcher::Config::default()).default_backoff()
}

fn ns_name(o: &RawObject) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

/// The quota watch, as kube-runtime's `Controller::for_stream` takes it:
/// every event goes into the Controller's store, and the quotas whose own
/// change needs a reconcile come out. A quota's change also touches its
/// parent, which decides carve-outs, loans and reclaim.
pub(super) fn quotas(
    ctx: Arc<Context>,
    store: Writer<BizGroupResourceQuota>,
) -> impl Stream<Item = Result<BizGroupResourceQuota, watcher::Error>> + Send + 'static {
    let api: Api<BizGroupResourceQuota> = Api::all(ctx.client.clone());
    let events = watch(api).reflect(store).boxed();
    let watch = QuotaWatch {
        ctx,
        listed: BTreeSet::new(),
        held: HashMap::new(),
    };
    futures::stream::unfold((events, watch), |(mut events, mut watch)| async move {
        loop {
            let event = events.next().await?;
            if let Some(q) = watch.on(event).await {
                return Some((Ok(q), (events, watch)));
            }
        }
    })
}

struct QuotaWatch {
    ctx: Arc<Context>,
    /// The quotas of the (re)list under way: a deletion missed while no
    /// watch ran shows as a quota not listed.
    listed: BTreeSet<String>,
    /// What each quota held of its own room in the version last seen
    /// (`used` + `lent`, per key): a fall is room its children's queues
    /// may borrow.
    held: HashMap<String, ResourceList>,
}

/// What `q` holds of its own room: its `used` (its workloads and its
/// children's carve-outs) plus what it has lent, per key.
fn held_room(q: &BizGroupResourceQuota) -> ResourceList {
    q.status
        .as_ref()
        .map(|s| quota::resources::sum([&s.0.used, &s.0.lent]))
        .unwrap_or_default()
}

impl QuotaWatch {
    /// Room came back in `q` (a loan returned or repaired, a charge
    /// released, whoever wrote it): the borrowers queued under it get a
    /// round, whatever the order in which the writes that freed it and
    /// their rounds ran. A round that read the parent before the room came
    /// back is otherwise never followed by one that sees it.
    fn room_back(&mut self, q: &BizGroupResourceQuota) {
        let now = held_room(q);
        let Some(before) = self.held.insert(q.name_any(), now.clone()) else {
            return;
        };
        let fell = before
            .iter()
            .any(|(k, b)| quota::resources::get(&now, k) < *b);
        if fell {
            self.ctx.touch_borrowers_under(&q.name_any());
        }
    }
}

impl QuotaWatch {
    /// Handle one event; the quota, if it needs its own reconcile.
    async fn on(
        &mut self,
        event: Result<Event<BizGroupResourceQuota>, watcher::Error>,
    ) -> Option<BizGroupResourceQuota> {
        match event {
            Ok(Event::Init) => {
                self.listed.clear();
                None
            }
            // Seen before the borrowers are asked for rounds: theirs
            // wait for the store to show this version (`store_caught_up`).
            Ok(Event::InitApply(q)) => {
                self.listed.insert(q.name_any());
                self.ctx.saw_quota(&q);
                self.room_back(&q);
                self.ctx.quota_applied(q, true)
            }
            Ok(Event::Apply(q)) => {
                self.ctx.saw_quota(&q);
                self.room_back(&q);
                self.ctx.quota_applied(q, false)
            }
            Ok(Event::Delete(q)) => {
                self.held.remove(&q.name_any());
                self.ctx.quota_deleted(&q).await;
                None
            }
            Ok(Event::InitDone) => {
                let listed = std::mem::take(&mut self.listed);
                self.held.retain(|n, _| listed.contains(n));
                self.ctx.forget_quotas_not_in(&listed).await;
                None
            }
            Err(e) => {
                let m = &self.ctx.service.metrics;
                m.count_watch_error("bizrq.io/BizGroupResourceQuota");
                tracing::debug!(error = %e, "quota watch error; retrying");
                None
            }
        }
    }
}

impl Context {
    /// The newest quota version the watch has shown (what a round waits
    /// for the store to show: `store_caught_up`); `q`'s version.
    fn saw_quota(&self, q: &BizGroupResourceQuota) -> Option<i64> {
        let rv = q
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<i64>().ok());
        if let Some(v) = rv {
            self.quota_seen
                .fetch_max(v, std::sync::atomic::Ordering::SeqCst);
        }
        rv
    }

    /// A quota as the watch shows it: its parent is touched; the quota
    /// itself is returned to be reconciled unless this is a write of this
    /// process coming back (an admission or a reconcile). A (re)list's
    /// copy is always reconciled: the watch may have missed another
    /// writer's version that ours was then written over.
    fn quota_applied(
        &self,
        q: BizGroupResourceQuota,
        relist: bool,
    ) -> Option<BizGroupResourceQuota> {
        let name = q.name_any();
        let rv = self.saw_quota(&q);
        let missed = self.missed.lock().unwrap().remove(&name);
        let ours = !relist && !missed && rv.is_some_and(|v| self.service.wrote(&name, v));
        if !q.spec.parent.is_empty() {
            self.triggers.touch([q.spec.parent.clone()]);
        }
        if ours {
            self.gauges();
            return None;
        }
        self.triggers.waits(&name);
        self.gauges();
        Some(q)
    }

    /// A quota was deleted: its roles and alert rules go, and the
    /// carve-out made under its create token goes back to its parent
    /// (which is then reconciled).
    pub(super) async fn quota_deleted(&self, q: &BizGroupResourceQuota) {
        let name = q.name_any();
        self.retries.reset(&name);
        self.missed.lock().unwrap().remove(&name);
        self.service.metrics.forget_queue(&name);
        self.forget_quota(&name).await;
        if q.spec.parent.is_empty() {
            return;
        }
        let token = q
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::service::CREATE_TOKEN_ANNOTATION))
            .map(String::as_str)
            .unwrap_or("");
        self.service
            .release_gone(&q.spec.parent, &name, token)
            .await;
        self.touch(BTreeSet::from([q.spec.parent.clone()]));
    }

    /// Drive one watch: apply and delete events go to `on`, and after each
    /// complete (re)list `on` gets the keys it listed, so objects deleted
    /// while the watch was down are found. The first complete list of a
    /// startup watch (`gate`) counts towards the initial-sync gate.
    async fn drive(
        &self,
        api: Api<RawObject>,
        label: &str,
        gate: bool,
        key: impl Fn(&RawObject) -> String,
        mut on: impl FnMut(Change<'_>, i64),
    ) {
        let mut stream = watch(api).boxed();
        let mut listing: Option<HashSet<String>> = None;
        let mut first = true;
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    self.service.metrics.count_watch_error(label);
                    tracing::debug!(kind = %label, error = %e, "watch error; retrying");
                    continue;
                }
            };
            let now = self.now();
            match ev {
                Event::Init => listing = Some(HashSet::new()),
                Event::InitApply(obj) | Event::Apply(obj) => {
                    if let Some(l) = listing.as_mut() {
                        l.insert(key(&obj));
                    }
                    on(Change::Apply(&obj), now);
                }
                Event::Delete(obj) => on(Change::Delete(&obj), now),
                Event::InitDone => {
                    let listed = listing.take().unwrap_or_default();
                    on(Change::Listed { listed, first }, now);
                    if first && gate {
                        self.gate.listed();
                    }
                    first = false;
                }
            }
        }
    }

    /// The objects of one workload kind. `gate`: a startup watch; a kind
    /// found later touches every quota once listed, since quotas may hold
    /// charges of it that could not be judged before.
    pub(super) async fn watch_workloads(
        self: Arc<Self>,
        adapter: &'static Adapter,
        ar: ApiResource,
        gate: bool,
    ) {
        let label = kind_key(adapter.group, adapter.kind);
        let api: Api<RawObject> = Api::all_with(self.client.clone(), &ar);
        self.drive(api, &label, gate, ns_name, |change, now| match change {
            Change::Apply(obj) => self.apply_workload(adapter, obj, now),
            Change::Delete(obj) => {
                let ns = obj.namespace().unwrap_or_default();
                let touched =
                    self.view
                        .lock()
                        .unwrap()
                        .delete_workload(adapter, &ns, &obj.name_any(), now);
                // Its room may be lent to a sibling's queue now.
                self.touch_borrowers_beside(&touched);
                self.touch(touched);
            }
            Change::Listed { listed, first } => {
                let touched = {
                    let mut v = self.view.lock().unwrap();
                    let mut touched = BTreeSet::new();
                    for wref in v.refs_of_kind(&label) {
                        let Some(w) = WorkloadRef::parse(&wref) else {
                            continue;
                        };
                        if !listed.contains(&format!("{}/{}", w.namespace, w.name)) {
                            touched.extend(v.delete_workload(adapter, w.namespace, w.name, now));
                        }
                    }
                    v.mark_synced(adapter.group, adapter.kind);
                    touched
                };
                self.touch(touched);
                if first && !gate {
                    let me = self.clone();
                    tokio::spawn(async move { me.touch_all().await });
                }
            }
        })
        .await;
    }

    pub(super) fn apply_workload(&self, adapter: &'static Adapter, obj: &RawObject, now: i64) {
        match adapter.read_value(&obj.json, &self.service.keys) {
            Ok(w) => {
                let created = obj
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond());
                let wref = adapter.workload_ref(&w.meta.namespace, &w.meta.name);
                let classes = quota::queue::priority::class_names(&obj.json);
                // A held object carrying a queue mark: what it runs once
                // released, for the round's fold (docs/queueing.md §12);
                // with marks off, what waits by a mark nothing folds.
                let marked = w
                    .meta
                    .annotations
                    .contains_key(quota::queue::mark::ANNOTATION)
                    && quota::hold::is_held(adapter.hold(), &obj.json);
                let released = marked
                    .then(|| {
                        let running = quota::hold::as_released(adapter.hold(), &obj.json);
                        adapter.read_value(&running, &self.service.keys).ok()
                    })
                    .flatten()
                    .map(|r| r.pod_sets);
                let touched = {
                    let mut v = self.view.lock().unwrap();
                    let before = v.round_facts(&wref);
                    let touched = v.apply_workload(adapter, w, created, now);
                    v.set_priority_classes(&wref, classes);
                    v.set_released(&wref, released);
                    v.workload_changed(&wref, before);
                    touched
                };
                self.touch(touched);
            }
            Err(e) => {
                tracing::warn!(kind = adapter.kind, name = %obj.name_any(), error = %e, "unreadable workload ignored")
            }
        }
    }

    /// Every pod (by uid): its runs are what cash accrues from. After a
    /// restart, the first list ends the runs of pods persisted in the
    /// ledger that are gone now, at `watermark`.
    pub(super) async fn watch_pods(self: Arc<Self>, watermark: i64) {
        let api: Api<RawObject> =
            Api::all_with(self.client.clone(), &ApiResource::erase::<Pod>(&()));
        let uid = |o: &RawObject| o.uid().unwrap_or_default();
        self.drive(api, "Pod", true, uid, |change, now| match change {
            Change::Apply(obj) => self.apply_pod(obj, now),
            Change::Delete(obj) => {
                let touched = self.view.lock().unwrap().delete_pod(&uid(obj), now);
                self.touch(touched);
            }
            Change::Listed { listed, first } => {
                let touched = {
                    let mut v = self.view.lock().unwrap();
                    let mut touched = BTreeSet::new();
                    for uid in v.pod_uids() {
                        if !listed.contains(&uid) {
                            touched.extend(v.delete_pod(&uid, now));
                        }
                    }
                    if first {
                        // Runs an earlier life persisted for pods that
                        // are gone now: deleted while nobody watched.
                        touched.extend(v.end_missing_pods(&listed, watermark));
                    }
                    v.mark_pods_listed();
                    touched
                };
                self.touch(touched);
            }
        })
        .await;
    }

    pub(super) fn apply_pod(&self, obj: &RawObject, now: i64) {
        // Only pods with a controller owner can belong to a workload.
        let owned = obj
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o.iter().any(|o| o.controller == Some(true)));
        if !owned {
            return;
        }
        let facts = match read_pod_value(&obj.json) {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(pod = %obj.name_any(), error = %e, "unreadable pod ignored");
                return;
            }
        };
        let (priority, unschedulable) = (facts.priority, facts.unschedulable);
        let uid = facts.uid.clone();
        let gate = quota::hold::ungate_patch(&obj.json).map(|p| (facts.name.clone(), p));
        let labels = obj
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let touched = {
            let mut v = self.view.lock().unwrap();
            let mut touched = v.apply_pod(facts, labels, priority, unschedulable, now);
            // Gated by bizrq: its quota's reconcile releases it once its
            // workload is charged (`release_gated`).
            touched.extend(v.set_gated(&uid, gate));
            touched
        };
        self.touch(touched);
    }

    /// HPAs: a workload's charge reserves room for its HPA's maxReplicas.
    pub(super) async fn watch_hpas(self: Arc<Self>) {
        let ar = ApiResource::erase::<HorizontalPodAutoscaler>(&());
        let api: Api<RawObject> = Api::all_with(self.client.clone(), &ar);
        self.drive(
            api,
            "HorizontalPodAutoscaler",
            true,
            ns_name,
            |change, _now| match change {
                Change::Apply(obj) => match read_hpa_value(&obj.json) {
                    Ok(h) => {
                        let touched = self.view.lock().unwrap().apply_hpa(h);
                        self.touch(touched);
                    }
                    Err(e) => tracing::debug!(error = %e, "unreadable HPA ignored"),
                },
                Change::Delete(obj) => {
                    let ns = obj.namespace().unwrap_or_default();
                    let touched = self.view.lock().unwrap().delete_hpa(&ns, &obj.name_any());
                    self.touch(touched);
                }
                Change::Listed { listed, .. } => {
                    let touched = {
                        let mut v = self.view.lock().unwrap();
                        let mut touched = BTreeSet::new();
                        for (ns, name) in v.hpa_keys() {
                            if !listed.contains(&format!("{ns}/{name}")) {
                                touched.extend(v.delete_hpa(&ns, &name));
                            }
                        }
                        touched
                    };
                    self.touch(touched);
                }
            },
        )
        .await;
    }

    /// PriorityClasses, the copy queued admission resolves priorities from
    /// (`service.priorities`). None until the first list, and none again
    /// once the watch stops (leadership lost): the webhook then reads
    /// through the API. A class change needs no reconcile of its own: the
    /// next round of each queue resolves its entries again.
    pub(super) async fn watch_priority_classes(self: Arc<Self>) {
        struct Forget(Arc<dyn crate::service::queue::PriorityLookup>);
        impl Drop for Forget {
            fn drop(&mut self) {
                self.0.set_watched(None);
            }
        }
        let lookup = self.service.priorities.clone();
        let _forget = Forget(lookup.clone());
        let ar = ApiResource::erase::<PriorityClass>(&());
        let api: Api<RawObject> = Api::all_with(self.client.clone(), &ar);
        let mut objects: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let mut listed_once = false;
        let name = |o: &RawObject| o.name_any();
        self.drive(api, "PriorityClass", false, name, |change, _now| {
            match change {
                Change::Apply(o) => {
                    objects.insert(o.name_any(), o.json.clone());
                }
                Change::Delete(o) => {
                    objects.remove(&o.name_any());
                }
                Change::Listed { listed, .. } => {
                    objects.retain(|k, _| listed.contains(k));
                    listed_once = true;
                }
            }
            if listed_once {
                let classes = quota::queue::priority::Classes::from_objects(objects.values());
                lookup.set_watched(Some(classes));
            }
        })
        .await;
    }
}
