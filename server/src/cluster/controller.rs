//! The reconcile controller (run by the Lease holder only): watches quotas,
//! the workload kinds the cluster serves (discovered, and rediscovered so a
//! CRD installed later is picked up; a kind that is missing is simply not
//! watched), HPAs and pods; maps each event to the quotas it touches (the
//! workload's label; pods up their owner references) and reconciles those
//! with a pool of workers, plus a full resync on a timer.
//!
//! Decisions are pure (`view`, `quota::reconcile`, `quota::tree`); this
//! module is the I/O around them. Status writes go through the service's
//! compare-and-swap loop, so a reconcile racing an admission loses the
//! swap, re-reads and decides again: nothing admitted is erased (charges
//! younger than `RESERVATION_TTL_MS` are kept even when the watch has not
//! shown their workload yet).

use super::crd::BizGroupResourceQuota;
use super::events::{quota_ref, workload_ref, Events, Notice};
use super::queue::Queue;
use super::view::{kind_key, kind_of_ref, View};
use crate::service::{Service, ServiceError};
use crate::store::StoreError;
use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, ResourceExt};
use quota::borrow::{self, Standing};
use quota::keys::cash_target;
use quota::pods::read_pod;
use quota::pods::PodRun;
use quota::reclaim::{self, Action, Borrower, Candidate, Stop, Victim};
use quota::reconcile::{Observed, RESERVATION_TTL_MS};
use quota::workload::{adapter_for_kind, read_hpa, Adapter, WorkloadRef, ADAPTERS};
use quota::ResourceList;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// Setting holding the last time the controller knew its pod picture was
/// current: pods persisted in the ledger but gone after a restart are
/// charged up to this moment.
pub const WATERMARK_SETTING: &str = "controller_watermark_ms";

/// How long a deleted pod whose owners never resolved is remembered.
const TOMBSTONE_TTL_MS: i64 = 10 * 60_000;

/// What the controller keeps in the SQL database: its pod ledger (so a
/// restart loses no stretch of any pod), a watermark, and usage samples.
#[async_trait::async_trait]
pub trait History: Send + Sync + 'static {
    async fn load_pod_runs(&self) -> Result<Vec<(String, PodRun)>, StoreError>;
    async fn save_pod_runs(
        &self,
        upserts: &[(String, PodRun)],
        deletes: &[String],
    ) -> Result<(), StoreError>;
    async fn setting(&self, key: &str) -> Result<Option<String>, StoreError>;
    async fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// One usage sample per quota (unchanged ones skipped); how many written.
    async fn record_samples(
        &self,
        at_ms: i64,
        quotas: &[quota::Quota],
    ) -> Result<usize, StoreError>;
    /// Downsampling and retention of old samples.
    async fn compact_samples(&self, now_ms: i64) -> Result<(), StoreError>;
    /// A quota was deleted: its role bindings and alert rules go with it.
    async fn forget_quota(&self, _name: &str, _now_ms: i64) -> Result<(), StoreError> {
        Ok(())
    }
    /// A complete list found these quotas: any other's roles and rules go.
    async fn forget_quotas_not_in(
        &self,
        _live: &BTreeSet<String>,
        _now_ms: i64,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub workers: usize,
    pub resync: Duration,
    pub reclaim_grace: Duration,
    pub discovery_every: Duration,
    pub flush_every: Duration,
    pub sample_every: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            workers: 5,
            resync: Duration::from_secs(300),
            reclaim_grace: Duration::from_secs(300),
            discovery_every: Duration::from_secs(60),
            flush_every: Duration::from_secs(5),
            sample_every: Duration::from_secs(60),
        }
    }
}

pub struct Controller {
    client: Client,
    service: Arc<Service>,
    history: Option<Arc<dyn History>>,
    events: Events,
    cfg: ControllerConfig,
    view: Mutex<View>,
    queue: Queue,
    /// Kinds the cluster serves now ("group/Kind"), with how to reach them.
    installed: Mutex<HashMap<String, ApiResource>>,
    /// Startup watches whose first list is not complete yet.
    unsynced: AtomicUsize,
    synced: Notify,
}

#[async_trait::async_trait]
impl History for crate::store::sql::SqlStore {
    async fn load_pod_runs(&self) -> Result<Vec<(String, PodRun)>, StoreError> {
        crate::store::sql::SqlStore::load_pod_runs(self).await
    }
    async fn save_pod_runs(
        &self,
        upserts: &[(String, PodRun)],
        deletes: &[String],
    ) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::save_pod_runs(self, upserts, deletes).await
    }
    async fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        crate::store::sql::SqlStore::setting(self, key).await
    }
    async fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::set_setting(self, key, value).await
    }
    async fn record_samples(
        &self,
        at_ms: i64,
        quotas: &[quota::Quota],
    ) -> Result<usize, StoreError> {
        crate::store::sql::SqlStore::record_samples(self, at_ms, quotas).await
    }
    async fn compact_samples(&self, now_ms: i64) -> Result<(), StoreError> {
        let stats = crate::store::sql::SqlStore::compact_samples(self, now_ms).await?;
        tracing::debug!(?stats, "usage samples compacted");
        Ok(())
    }
    async fn forget_quota(&self, name: &str, now_ms: i64) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::forget_quota(self, name, now_ms).await?;
        Ok(())
    }
    async fn forget_quotas_not_in(
        &self,
        live: &BTreeSet<String>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::forget_quotas_not_in(self, live, now_ms).await?;
        Ok(())
    }
}

/// What a watch reports to its handler (see `Controller::drive`).
enum Change<'a> {
    Apply(&'a DynamicObject),
    Delete(&'a DynamicObject),
    /// A complete (re)list: the keys it showed, and whether it is the first.
    Listed {
        listed: HashSet<String>,
        first: bool,
    },
}

/// How one reconcile ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Reconciled {
    Written,
    Unchanged,
    Gone,
}

impl Controller {
    pub fn new(
        client: Client,
        service: Arc<Service>,
        history: Option<Arc<dyn History>>,
        events: Events,
        cfg: ControllerConfig,
    ) -> Arc<Controller> {
        let view = View::new(service.keys.clone());
        Arc::new(Controller {
            client,
            service,
            history,
            events,
            cfg,
            view: Mutex::new(view),
            queue: Queue::default(),
            installed: Mutex::default(),
            unsynced: AtomicUsize::new(0),
            synced: Notify::new(),
        })
    }

    fn now(&self) -> i64 {
        self.service.now()
    }

    fn enqueue(&self, touched: BTreeSet<String>) {
        self.queue.extend(touched);
        self.gauges();
    }

    fn gauges(&self) {
        self.service
            .metrics
            .queue_depth
            .set(self.queue.depth() as i64);
        let (w, p, r) = {
            let v = self.view.lock().unwrap();
            (v.workload_count(), v.pod_count(), v.run_count())
        };
        let m = &self.service.metrics;
        m.set_tracked("workloads", w);
        m.set_tracked("pods", p);
        m.set_tracked("pod_runs", r);
    }

    /// Run until the task is aborted (leadership lost) or a fatal error.
    pub async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        let mut tasks = JoinSet::new();
        let watermark = self.restore().await?;

        // Which workload kinds exist: retried until the API answers, since
        // deciding without it would drop charges of kinds not yet watched.
        let kinds = loop {
            match discover(&self.client).await {
                Ok(k) => break k,
                Err(e) => {
                    tracing::warn!(error = %e, "API discovery failed; retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        };
        let mut watched: HashSet<String> = HashSet::new();
        // quotas + pods + HPAs + each workload kind
        self.unsynced.store(3 + kinds.len(), Ordering::SeqCst);
        self.set_installed(&kinds);
        for (adapter, ar) in kinds {
            watched.insert(kind_key(adapter.group, adapter.kind));
            tasks.spawn(self.clone().watch_workloads(adapter, ar, true));
        }
        tasks.spawn(self.clone().watch_quotas());
        tasks.spawn(self.clone().watch_pods(watermark));
        tasks.spawn(self.clone().watch_hpas());

        while self.unsynced.load(Ordering::SeqCst) > 0 {
            let notified = self.synced.notified();
            if self.unsynced.load(Ordering::SeqCst) == 0 {
                break;
            }
            notified.await;
        }
        {
            let v = self.view.lock().unwrap();
            tracing::info!(
                workloads = v.workload_count(),
                pods = v.pod_count(),
                "controller caches synced"
            );
        }
        self.enqueue_all().await;

        for _ in 0..self.cfg.workers.max(1) {
            tasks.spawn(self.clone().worker());
        }
        tasks.spawn(self.clone().resync_loop());
        tasks.spawn(self.clone().recheck_loop());
        tasks.spawn(self.clone().discovery_loop(watched));
        if self.history.is_some() {
            tasks.spawn(self.clone().flush_loop());
            let h = self.history.clone().expect("checked");
            tasks.spawn(sample_forever(
                self.service.clone(),
                h,
                self.cfg.sample_every,
            ));
        }
        while let Some(r) = tasks.join_next().await {
            if let Err(e) = r {
                if e.is_panic() {
                    anyhow::bail!("controller task panicked: {e}");
                }
            }
        }
        Ok(())
    }

    /// Load the pod ledger an earlier life persisted; returns the
    /// watermark to end runs of pods that vanished meanwhile.
    async fn restore(&self) -> anyhow::Result<i64> {
        let Some(h) = &self.history else {
            return Ok(self.now());
        };
        let runs = h.load_pod_runs().await?;
        let n = runs.len();
        self.view.lock().unwrap().restore_runs(runs);
        let watermark = h
            .setting(WATERMARK_SETTING)
            .await?
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| self.now());
        if n > 0 {
            tracing::info!(runs = n, watermark, "pod ledger restored");
        }
        Ok(watermark)
    }

    fn set_installed(&self, kinds: &[(&'static Adapter, ApiResource)]) {
        *self.installed.lock().unwrap() = kinds
            .iter()
            .map(|(a, ar)| (kind_key(a.group, a.kind), ar.clone()))
            .collect();
    }

    fn initial_sync_done(&self) {
        if self.unsynced.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.synced.notify_waiters();
        }
    }

    async fn enqueue_all(&self) {
        match self.service.store.list().await {
            Ok(all) => {
                self.enqueue(all.iter().map(|s| s.quota.name().to_string()).collect());
            }
            Err(e) => tracing::warn!(error = %e, "cannot list quotas for a resync"),
        }
    }

    /// At a resync: a complete list of the quotas from the API server (not
    /// a cache, which may be partial), and the roles and rules of any other
    /// quota go.
    async fn forget_unlisted_quotas(&self) {
        let api: Api<BizGroupResourceQuota> = Api::all(self.client.clone());
        match api.list(&Default::default()).await {
            Ok(list) => {
                let live = list.items.iter().map(|q| q.name_any()).collect();
                self.forget_quotas_not_in(&live).await;
            }
            Err(e) => tracing::debug!(error = %e, "cannot list quotas to forget deleted ones"),
        }
    }

    /// Roles and alert rules of quotas not in `live` (a complete list) go:
    /// their deletion was missed.
    async fn forget_quotas_not_in(&self, live: &BTreeSet<String>) {
        if let Some(h) = &self.history {
            if let Err(e) = h.forget_quotas_not_in(live, self.service.now()).await {
                tracing::warn!(error = %e, "could not remove the roles and alert rules of deleted quotas");
            }
        }
    }

    // ---- watches -------------------------------------------------------

    /// Drive one watch: apply and delete events go to `on`, and after each
    /// complete (re)list `on` gets the keys it listed, so objects deleted
    /// while the watch was down are found. The first complete list of a
    /// startup watch (`gate`) opens the controller's initial-sync gate.
    async fn drive(
        &self,
        api: Api<DynamicObject>,
        label: &str,
        gate: bool,
        key: impl Fn(&DynamicObject) -> String,
        mut on: impl FnMut(Change<'_>, i64),
    ) {
        let mut stream = watcher(api).boxed();
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
                        self.initial_sync_done();
                    }
                    first = false;
                }
            }
        }
    }

    async fn watch_workloads(
        self: Arc<Self>,
        adapter: &'static Adapter,
        ar: ApiResource,
        gate: bool,
    ) {
        let label = kind_key(adapter.group, adapter.kind);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let ns_name =
            |o: &DynamicObject| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
        self.drive(api, &label, gate, ns_name, |change, now| match change {
            Change::Apply(obj) => self.apply_workload(adapter, obj, now),
            Change::Delete(obj) => {
                let ns = obj.namespace().unwrap_or_default();
                let touched =
                    self.view
                        .lock()
                        .unwrap()
                        .delete_workload(adapter, &ns, &obj.name_any(), now);
                self.enqueue(touched);
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
                self.enqueue(touched);
                if first && !gate {
                    // A kind picked up later: quotas may hold charges of it.
                    let me = self.clone();
                    tokio::spawn(async move { me.enqueue_all().await });
                }
            }
        })
        .await;
    }

    fn apply_workload(&self, adapter: &'static Adapter, obj: &DynamicObject, now: i64) {
        let json = match serde_json::to_string(obj) {
            Ok(j) => j,
            Err(_) => return,
        };
        match adapter.read(&json, &self.service.keys) {
            Ok(w) => {
                let created = obj
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond());
                let touched = self
                    .view
                    .lock()
                    .unwrap()
                    .apply_workload(adapter, w, created, now);
                self.enqueue(touched);
            }
            Err(e) => {
                tracing::warn!(kind = adapter.kind, name = %obj.name_any(), error = %e, "unreadable workload ignored")
            }
        }
    }

    async fn watch_quotas(self: Arc<Self>) {
        let api: Api<BizGroupResourceQuota> = Api::all(self.client.clone());
        let mut stream = watcher(api).boxed();
        let mut first = true;
        // The quotas of the (re)list under way: a deletion missed while no
        // watch ran shows as a quota not listed.
        let mut listed = BTreeSet::new();
        while let Some(ev) = stream.next().await {
            if let Ok(Event::InitApply(q)) = &ev {
                listed.insert(q.name_any());
            }
            match ev {
                Ok(Event::Apply(q)) | Ok(Event::InitApply(q)) => {
                    let name = q.name_any();
                    let rv = q
                        .metadata
                        .resource_version
                        .as_deref()
                        .and_then(|v| v.parse::<i64>().ok());
                    // A write of this process coming back (an admission or
                    // a reconcile): nothing new for the quota itself, but its
                    // parent decides carve-outs, loans and reclaim.
                    let ours = rv.is_some() && rv == self.service.cached_version(&name);
                    let mut touched = BTreeSet::new();
                    if !ours {
                        touched.insert(name);
                    }
                    if !q.spec.parent.is_empty() {
                        touched.insert(q.spec.parent.clone());
                    }
                    self.enqueue(touched);
                }
                Ok(Event::Delete(q)) => {
                    if let Some(h) = &self.history {
                        let name = q.name_any();
                        if let Err(e) = h.forget_quota(&name, self.service.now()).await {
                            tracing::warn!(quota = %name, error = %e, "could not remove the roles and alert rules of a deleted quota");
                        }
                    }
                    if !q.spec.parent.is_empty() {
                        // The child is gone: its carve-out may go back now.
                        let token = q
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(crate::service::CREATE_TOKEN_ANNOTATION))
                            .map(String::as_str)
                            .unwrap_or("");
                        self.service
                            .release_gone(&q.spec.parent, &q.name_any(), token)
                            .await;
                        self.enqueue(BTreeSet::from([q.spec.parent.clone()]));
                    }
                }
                Ok(Event::Init) => listed.clear(),
                Ok(Event::InitDone) => {
                    self.forget_quotas_not_in(&std::mem::take(&mut listed))
                        .await;
                    if first {
                        first = false;
                        self.initial_sync_done();
                    }
                }
                Err(e) => {
                    self.service
                        .metrics
                        .count_watch_error("bizrq.io/BizGroupResourceQuota");
                    tracing::debug!(error = %e, "quota watch error; retrying");
                }
            }
        }
    }

    async fn watch_pods(self: Arc<Self>, watermark: i64) {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &ApiResource::erase::<Pod>(&()));
        let uid = |o: &DynamicObject| o.uid().unwrap_or_default();
        self.drive(api, "Pod", true, uid, |change, now| match change {
            Change::Apply(obj) => self.apply_pod(obj, now),
            Change::Delete(obj) => {
                let touched = self.view.lock().unwrap().delete_pod(&uid(obj), now);
                self.enqueue(touched);
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
                    touched
                };
                self.enqueue(touched);
            }
        })
        .await;
    }

    fn apply_pod(&self, obj: &DynamicObject, now: i64) {
        // Only pods with a controller owner can belong to a workload.
        let owned = obj
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o.iter().any(|o| o.controller == Some(true)));
        if !owned {
            return;
        }
        let Ok(json) = serde_json::to_string(obj) else {
            return;
        };
        let facts = match read_pod(&json) {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(pod = %obj.name_any(), error = %e, "unreadable pod ignored");
                return;
            }
        };
        let (priority, unschedulable) = (facts.priority, facts.unschedulable);
        let labels = obj
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let touched =
            self.view
                .lock()
                .unwrap()
                .apply_pod(facts, labels, priority, unschedulable, now);
        self.enqueue(touched);
    }

    async fn watch_hpas(self: Arc<Self>) {
        let ar = ApiResource::erase::<HorizontalPodAutoscaler>(&());
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let ns_name =
            |o: &DynamicObject| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
        self.drive(
            api,
            "HorizontalPodAutoscaler",
            true,
            ns_name,
            |change, _now| match change {
                Change::Apply(obj) => {
                    let Ok(json) = serde_json::to_string(obj) else {
                        return;
                    };
                    match read_hpa(&json) {
                        Ok(h) => {
                            let touched = self.view.lock().unwrap().apply_hpa(h);
                            self.enqueue(touched);
                        }
                        Err(e) => tracing::debug!(error = %e, "unreadable HPA ignored"),
                    }
                }
                Change::Delete(obj) => {
                    let ns = obj.namespace().unwrap_or_default();
                    let touched = self.view.lock().unwrap().delete_hpa(&ns, &obj.name_any());
                    self.enqueue(touched);
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
                    self.enqueue(touched);
                }
            },
        )
        .await;
    }

    async fn discovery_loop(self: Arc<Self>, mut watched: HashSet<String>) {
        let mut tasks = JoinSet::new();
        loop {
            tokio::time::sleep(self.cfg.discovery_every).await;
            match discover(&self.client).await {
                Ok(kinds) => {
                    self.set_installed(&kinds);
                    for (adapter, ar) in kinds {
                        let k = kind_key(adapter.group, adapter.kind);
                        if watched.insert(k.clone()) {
                            tracing::info!(kind = %k, "workload kind installed: watching it");
                            tasks.spawn(self.clone().watch_workloads(adapter, ar, false));
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "API discovery failed"),
            }
        }
    }

    // ---- work ----------------------------------------------------------

    async fn worker(self: Arc<Self>) {
        while let Some(name) = self.queue.pop().await {
            self.service
                .metrics
                .queue_depth
                .set(self.queue.depth() as i64);
            let started = std::time::Instant::now();
            let result = self.reconcile(&name).await;
            self.queue.done(&name);
            self.gauges();
            self.service
                .metrics
                .quota_reconcile_duration
                .observe(started.elapsed().as_secs_f64());
            match result {
                Ok(Reconciled::Written) => self.service.metrics.count_reconcile("written"),
                Ok(Reconciled::Unchanged) => self.service.metrics.count_reconcile("unchanged"),
                Ok(Reconciled::Gone) => self.service.metrics.count_reconcile("gone"),
                Err(e) => {
                    self.service.metrics.count_reconcile("error");
                    tracing::warn!(quota = %name, error = %e, "reconcile failed; retrying in 5 s");
                    let me = self.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        me.enqueue(BTreeSet::from([name]));
                    });
                }
            }
        }
    }

    /// Kinds whose charges the view can judge: watched and listed, or not
    /// served by the cluster at all (their objects cannot exist).
    fn authoritative(&self) -> impl Fn(&str) -> bool + '_ {
        let installed: HashSet<String> = self.installed.lock().unwrap().keys().cloned().collect();
        let v = self.view.lock().unwrap();
        let synced: HashSet<String> = installed
            .iter()
            .filter(|k| v.is_synced(k))
            .cloned()
            .collect();
        move |kind: &str| !installed.contains(kind) || synced.contains(kind)
    }

    /// Bring one quota's status to what the cluster shows.
    pub async fn reconcile(&self, name: &str) -> Result<Reconciled, ServiceError> {
        let now = self.now();
        let snap = self.view.lock().unwrap().snapshot(name);
        let authoritative = self.authoritative();
        let listed = self.service.store.children(name).await?;
        let (kids, confirmed) = self.service.confirm_children(name, listed).await?;
        // Reclaim is weighed only where a child may borrow or is marked.
        let reclaim_kids = kids
            .iter()
            .any(|k| !k.quota.spec.max.is_empty() || !k.quota.status.reclaim.is_empty());
        let prices = self.service.prices;
        let mut exhausted: Vec<String> = Vec::new();
        let mut paid_to: Option<i64> = None;
        let mut uid: Option<String> = None;
        let result = self
            .service
            .update_status(name, false, |q| {
                let mut observed = snap.observed.clone();
                for (wref, c) in &q.status.workloads {
                    if !authoritative(kind_of_ref(wref)) {
                        observed.entry(wref.clone()).or_insert_with(|| Observed {
                            pod_sets: c.pod_sets.clone(),
                            hpa: c.hpa.clone(),
                        });
                    }
                }
                let before = q.status.clone();
                paid_to = before
                    .last_reconcile_time
                    .as_deref()
                    .and_then(quota::time::parse_rfc3339);
                let intervals = snap.intervals();
                let out = quota::reconcile::reconcile(
                    q,
                    observed,
                    &intervals,
                    now,
                    RESERVATION_TTL_MS,
                    &prices,
                );
                borrow::repair_children(q, &confirmed.for_repair(q, &kids), now);
                let changed = out.changed || q.status.differs_visibly(&before);
                exhausted = newly_exhausted(&before, q);
                uid = q.metadata.uid.clone();
                let has_cash = q.spec.hard.keys().any(|k| cash_target(k).is_some());
                let borrowing = !q.spec.max.is_empty() || !q.status.reclaim.is_empty();
                // Reclaim among the children weighs this quota as written.
                let weighed = reclaim_kids.then(|| q.clone());
                Ok((
                    changed,
                    (
                        changed,
                        has_cash,
                        (q.spec.parent.clone(), borrowing, weighed),
                    ),
                ))
            })
            .await;
        let (written, has_cash, (parent, borrowing, weighed)) = match result {
            Ok(r) => r,
            Err(ServiceError::NotFound(_)) => return Ok(Reconciled::Gone),
            Err(e) => return Err(e),
        };
        if written || !has_cash {
            // Accrued up to `now` (or nothing to accrue): ended runs are paid.
            self.view.lock().unwrap().settle(name, now);
        } else if let Some(paid_to) = paid_to {
            // Nothing written: runs that ended by the window's stored start
            // were paid by an earlier write.
            self.view.lock().unwrap().settle(name, paid_to);
        }
        for key in exhausted {
            self.events.emit(Notice {
                regarding: quota_ref(name, uid.clone()),
                warning: true,
                reason: "CashExhausted",
                action: "Reconcile",
                note: format!(
                    "bizrq {name}: {key} is exhausted; new workloads that need it are denied, running ones keep running"
                ),
            });
        }
        // The parent weighs borrowing and reclaim among its children: after
        // a change here, or while pods here wait for room.
        if !parent.is_empty()
            && (borrowing
                || !self
                    .view
                    .lock()
                    .unwrap()
                    .unschedulable_usage(name)
                    .is_empty())
        {
            self.enqueue(BTreeSet::from([parent]));
        }
        if let Some(q) = weighed {
            if let Err(e) = self.reclaim(&q, &kids, now).await {
                tracing::warn!(quota = %name, error = %e, "reclaim step failed; next reconcile retries");
            }
        }
        Ok(if written {
            Reconciled::Written
        } else {
            Reconciled::Unchanged
        })
    }

    /// Reclaim (§5) among the children of `parent`: what the borrowers must
    /// give back (quota pressure, and pods of children within their
    /// guarantee that cannot be scheduled), which whole workloads give it
    /// (`quota::reclaim::plan`), marked first and reclaimed after the grace
    /// period unless the pressure went away.
    async fn reclaim(
        &self,
        p: &quota::Quota,
        kids: &[crate::store::Stored],
        now: i64,
    ) -> Result<(), ServiceError> {
        let standings = Standing::of_all(kids.iter().map(|s| &s.quota));
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
                        .workloads_of(name)
                        .into_iter()
                        .map(|(wref, pod_sets, info)| Candidate {
                            stop: adapter_of(&wref).map_or(Stop::Never, Stop::of),
                            priority: info.priority,
                            online: reclaim::is_online(&info.labels, &info.annotations),
                            created_ms: info.created_ms.unwrap_or(0),
                            min_replicas: reclaim::min_replicas(&info.annotations),
                            marked: k.quota.status.reclaim.contains_key(&wref),
                            pod_sets,
                            workload_ref: wref,
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
        let plan = if need.values().any(|q| q.nanos() > 0) {
            reclaim::plan(&borrowers, &need)
        } else {
            Vec::new()
        };
        let grace = self.cfg.reclaim_grace.as_millis() as i64;
        for k in kids {
            let name = k.quota.name();
            if k.quota.status.reclaim.is_empty() && !plan.iter().any(|v| v.quota == name) {
                continue;
            }
            let outcome = self
                .service
                .update_status(name, false, |q| {
                    let o = reclaim::reconcile_marks(name, &q.status.reclaim, &plan, now, grace);
                    if o.changed {
                        q.status.reclaim = o.marks.clone();
                    }
                    Ok((o.changed, o))
                })
                .await?;
            for v in &outcome.marked {
                self.service.metrics.count_reclaim("marked");
                self.notify_workload(&v.workload_ref, true, "ReclaimPending", format!(
                    "bizrq {}: borrowed capacity is needed back; {} in {} s unless the pressure goes away (frees {})",
                    v.quota, describe(&v.action), self.cfg.reclaim_grace.as_secs(), list(&v.frees)));
            }
            for wref in &outcome.cleared {
                self.service.metrics.count_reclaim("cleared");
                self.notify_workload(
                    wref,
                    false,
                    "ReclaimCancelled",
                    format!("bizrq {name}: the pressure went away; nothing will be reclaimed"),
                );
            }
            for v in &outcome.due {
                match self.execute(v).await {
                    Ok(()) => {
                        self.service.metrics.count_reclaim("executed");
                        self.notify_workload(
                            &v.workload_ref,
                            true,
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
        Ok(())
    }

    fn notify_workload(&self, wref: &str, warning: bool, reason: &'static str, note: String) {
        let kind = kind_of_ref(wref).to_string();
        let api_version = self
            .installed
            .lock()
            .unwrap()
            .get(&kind)
            .map(|ar| ar.api_version.clone())
            .unwrap_or_default();
        if let Some(mut r) = workload_ref(&api_version, wref) {
            r.uid = self.view.lock().unwrap().workload_uid(wref);
            self.events.emit(Notice {
                regarding: r,
                warning,
                reason,
                action: "Reclaim",
                note,
            });
        }
    }

    /// Carry out a reclaim: suspend a Job (or a Kubeflow job), or scale a
    /// scalable workload through its scale subresource. Both go through the
    /// admission webhook like any change, which releases the charge.
    async fn execute(&self, v: &Victim) -> kube::Result<()> {
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

    /// Quotas whose charges a review lowered in this process, reconciled
    /// from what the cluster shows a moment later (`service::Recheck`): a
    /// forged DELETE or scale-down of an object that still runs is undone
    /// within seconds. Writes by other replicas come through the quota
    /// watch instead, as versions this process did not write.
    async fn recheck_loop(self: Arc<Self>) {
        loop {
            let due = self.service.recheck.next().await;
            self.service.metrics.rechecks.inc_by(due.len() as u64);
            self.enqueue(due.into_iter().collect());
        }
    }

    async fn resync_loop(self: Arc<Self>) {
        let every = self.cfg.resync.max(Duration::from_secs(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tick.tick().await;
            let started = std::time::Instant::now();
            let pruned = self
                .view
                .lock()
                .unwrap()
                .prune_tombstones(self.now(), TOMBSTONE_TTL_MS);
            if pruned > 0 {
                tracing::debug!(
                    pruned,
                    "tombstones of pods never resolved to a workload dropped"
                );
            }
            self.enqueue_all().await;
            self.forget_unlisted_quotas().await;
            self.service
                .metrics
                .reconcile_duration
                .observe(started.elapsed().as_secs_f64());
        }
    }

    /// Persist pod-run changes and the watermark, so a restart loses no
    /// stretch of any pod.
    async fn flush_loop(self: Arc<Self>) {
        let Some(h) = self.history.clone() else {
            return;
        };
        loop {
            tokio::time::sleep(self.cfg.flush_every).await;
            if let Err(e) = self.flush(h.as_ref()).await {
                tracing::warn!(error = %e, "persisting pod runs failed; will retry");
            }
        }
    }

    pub async fn flush(&self, h: &dyn History) -> anyhow::Result<()> {
        let now = self.now();
        let (up, del) = self.view.lock().unwrap().take_dirty_runs();
        if !up.is_empty() || !del.is_empty() {
            if let Err(e) = h.save_pod_runs(&up, &del).await {
                self.view.lock().unwrap().redirty(up, del);
                return Err(e.into());
            }
        }
        h.set_setting(WATERMARK_SETTING, &now.to_string()).await?;
        Ok(())
    }
}

/// Usage samples for the portal's charts: every quota once per `every`
/// (the store skips unchanged ones), compacted hourly. Both modes run it.
pub async fn sample_forever(service: Arc<Service>, h: Arc<dyn History>, every: Duration) {
    let every = every.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    let mut last_compaction: Option<i64> = None;
    loop {
        tick.tick().await;
        let now = service.now();
        match service.list().await {
            Ok(all) => {
                if let Err(e) = h.record_samples(now, &all).await {
                    tracing::warn!(error = %e, "recording usage samples failed");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list quotas for samples"),
        }
        if last_compaction.is_none_or(|t| now - t >= 3_600_000) {
            last_compaction = Some(now);
            if let Err(e) = h.compact_samples(now).await {
                tracing::warn!(error = %e, "compacting usage samples failed");
            }
        }
    }
}

/// The adapter of the workload `wref` (`group/Kind/ns/name`).
fn adapter_of(wref: &str) -> Option<&'static Adapter> {
    let (group, kind) = kind_of_ref(wref).split_once('/')?;
    adapter_for_kind(group, kind)
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

/// Cash keys that reached their budget in this reconcile.
fn newly_exhausted(before: &quota::QuotaStatus, q: &quota::Quota) -> Vec<String> {
    let was: HashSet<&str> = before.exhausted_cash_keys(&q.spec).collect();
    q.status
        .exhausted_cash_keys(&q.spec)
        .filter(|k| !was.contains(k))
        .map(str::to_string)
        .collect()
}

fn watcher<K>(api: Api<K>) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, watcher::Config::default()).default_backoff()
}

/// The workload kinds the cluster serves, with the version to watch (the
/// group's preferred version when it has the kind, else the first that does).
pub async fn discover(client: &Client) -> kube::Result<Vec<(&'static Adapter, ApiResource)>> {
    let wanted: BTreeSet<&str> = ADAPTERS.iter().map(|a| a.group).collect();
    let groups = client.list_api_groups().await?;
    let mut out = Vec::new();
    for g in groups
        .groups
        .iter()
        .filter(|g| wanted.contains(g.name.as_str()))
    {
        let mut versions: Vec<&str> = Vec::new();
        if let Some(p) = &g.preferred_version {
            versions.push(&p.group_version);
        }
        versions.extend(g.versions.iter().map(|v| v.group_version.as_str()));
        let mut pending: Vec<&'static Adapter> =
            ADAPTERS.iter().filter(|a| a.group == g.name).collect();
        let mut seen = HashSet::new();
        for gv in versions {
            if pending.is_empty() || !seen.insert(gv) {
                continue;
            }
            let list = match client.list_api_group_resources(gv).await {
                Ok(l) => l,
                // A group version that vanished between the two calls.
                Err(kube::Error::Api(s)) if s.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            pending.retain(|a| {
                let Some(r) = list
                    .resources
                    .iter()
                    .find(|r| r.kind == a.kind && !r.name.contains('/'))
                else {
                    return true;
                };
                let version = gv.rsplit('/').next().unwrap_or(gv).to_string();
                out.push((
                    *a,
                    ApiResource {
                        group: g.name.clone(),
                        version,
                        api_version: gv.to_string(),
                        kind: a.kind.to_string(),
                        plural: r.name.clone(),
                    },
                ));
                false
            });
        }
    }
    Ok(out)
}
