//! The cluster-backed `QuotaStore`: quota objects are `BizGroupResourceQuota`
//! custom resources. Spec is written to the object (PUT), status to its
//! status subresource as a JSON merge patch of what changed (`quota::patch`:
//! a batch's charges and the totals derived from them, not every workload's
//! charge), each carrying the `resourceVersion` it was computed from, so the
//! API server is the compare-and-swap: a stale version's 409 becomes
//! `Conflict` and the service re-reads (a direct GET, never the cache) and
//! retries. The patch is computed against the status stored at that
//! version (the copy the write was decided on), so merged there it leaves
//! exactly the status decided; merged anywhere else it is refused. Any other refusal (an admission webhook's denial, an invalid
//! object, a webhook the API server cannot reach) is said to the person in
//! its own words (`from_status`). Lists and workload lookups come from a
//! watch-fed reflector cache; a lookup the cache misses reads the workload
//! itself (`workload_quota_at`).

use super::crd::BizGroupResourceQuota;
use crate::store::{QuotaStore, Stamp, StoreError, Stored, Watched, WorkloadAt};
use async_trait::async_trait;
use kube::api::{
    Api, DeleteParams, GetParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::reflector;
use kube::Client;
use kube::Resource;
use quota::object::{Quota, QuotaStatus};
use quota::{KeyConfig, ResourceList};
use std::collections::{HashMap, HashSet};

pub struct ClusterStore {
    api: Api<BizGroupResourceQuota>,
    /// For the requests whose answer is read only for its version.
    client: Client,
    cache: reflector::Store<BizGroupResourceQuota>,
    /// Which resources are GPUs, for the status summary.
    keys: KeyConfig,
    /// Quotas whose summaries may have gone stale, marked by the cache's
    /// own watch (`SummaryMarks`).
    marks: std::sync::Arc<SummaryMarks>,
    /// The cache's quotas by parent, kept by the same feed (`Kids`).
    kids: std::sync::Arc<std::sync::RwLock<Kids>>,
    /// How far the cache has read against this replica's own writes, for
    /// a workload lookup the cache misses (`Reach`).
    reach: std::sync::Arc<Reach>,
    /// Lookups answered by a LIST (the cache could not answer within
    /// `CATCH_UP`, and the workload could not be read).
    lookup_lists: prometheus_client::metrics::counter::Counter,
    /// Lookups whose GET of the workload failed, answered by a LIST.
    lookup_read_failures: prometheus_client::metrics::counter::Counter,
    /// Children converted from the watch's copy, by name, each with the
    /// version it was converted at (`children_quotas`).
    converted: std::sync::Mutex<HashMap<String, (i64, std::sync::Arc<Quota>)>>,
}

/// At most this many conversions are kept (`ClusterStore::converted`);
/// past it they are dropped and made again as asked.
const CONVERTED_KEPT: usize = 1024;

impl ClusterStore {
    /// `cache` is fed by a reflector over the same resource (see
    /// `cache_feed`); until it has synced, lists are empty.
    pub fn new(client: Client, cache: reflector::Store<BizGroupResourceQuota>) -> ClusterStore {
        ClusterStore {
            api: Api::all(client.clone()),
            client,
            cache,
            keys: KeyConfig::default(),
            marks: Default::default(),
            kids: Default::default(),
            reach: Default::default(),
            lookup_lists: Default::default(),
            lookup_read_failures: Default::default(),
            converted: Default::default(),
        }
    }

    /// Counts the lookups answered by a LIST (`workload_quota`) in `c`.
    pub fn count_lookup_lists(mut self, c: prometheus_client::metrics::counter::Counter) -> Self {
        self.lookup_lists = c;
        self
    }

    /// Counts in `c` the lookups whose GET of the workload failed
    /// (`workload_quota_at`), each then answered by a LIST.
    pub fn count_lookup_read_failures(
        mut self,
        c: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        self.lookup_read_failures = c;
        self
    }

    /// The quota in the cache whose status holds `workload`'s charge.
    fn cached_holder(&self, workload: &str) -> Option<String> {
        self.cached()
            .iter()
            .find(|k| holds(k, workload))
            .and_then(|k| k.metadata.name.clone())
    }

    /// Whether `quota` holds `workload`'s charge: from the cache when it
    /// shows the charge, else from one GET of the quota (another replica
    /// may have written it within this replica's watch lag).
    async fn holder_in(&self, quota: &str, workload: &str) -> Result<Option<String>, StoreError> {
        let cached = self.cache.get(&reflector::ObjectRef::new(quota));
        if cached.is_some_and(|k| holds(&k, workload)) {
            return Ok(Some(quota.to_string()));
        }
        let read = self
            .api
            .get_opt(quota)
            .await
            .map_err(|e| map_err(quota, e))?;
        Ok(read
            .filter(|k| holds(k, workload))
            .map(|_| quota.to_string()))
    }

    /// The binding of the workload at `at`, read with one GET of its
    /// metadata. None: no such object (gone, or a name no object of a
    /// workload kind can have).
    async fn read_bound(&self, at: &WorkloadAt<'_>) -> Result<Option<Bound>, String> {
        if !servable_version(at.version) || !quota::workload::is_dns_subdomain(at.name) {
            return Ok(None);
        }
        let a = at.adapter;
        let ar = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(a.group, at.version, a.kind),
            a.resource,
        );
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(self.client.clone(), at.namespace, &ar);
        match api.get_metadata_opt(at.name).await {
            Ok(Some(o)) => bound(a, &o.metadata).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// What the cache's feed does with each event the reflector applied:
    /// marks it (`SummaryMarks::seen`) and keeps the index by parent
    /// (`Kids::seen`). Returns the function the feed calls.
    pub fn feed(&self) -> impl Fn(&kube::runtime::watcher::Event<BizGroupResourceQuota>) {
        let (marks, kids, reach) = (self.marks.clone(), self.kids.clone(), self.reach.clone());
        move |ev| {
            kids.write().unwrap().seen(ev);
            marks.seen(ev);
            reach.seen(ev);
        }
    }

    pub fn with_keys(mut self, keys: KeyConfig) -> ClusterStore {
        self.keys = keys;
        self
    }

    /// A store over `client` with its own watch-fed cache, started here;
    /// waits (up to 30 s) for the first complete list so lists are whole.
    pub async fn start(client: Client) -> ClusterStore {
        use futures::StreamExt;
        use kube::runtime::{watcher, WatchStreamExt};
        let (reader, writer) = reflector::store();
        let api: Api<BizGroupResourceQuota> = Api::all(client.clone());
        let feed = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
            .default_backoff();
        let store = ClusterStore::new(client, reader.clone());
        let fed = store.feed();
        tokio::spawn(async move {
            let mut feed = std::pin::pin!(feed);
            while let Some(ev) = feed.next().await {
                match ev {
                    // The reflector applied the event to the cache before
                    // passing it on: a mark is judged on a copy that holds
                    // at least what it marks.
                    Ok(ev) => fed(&ev),
                    Err(e) => tracing::debug!(error = %e, "quota cache watch error; retrying"),
                }
            }
        });
        if tokio::time::timeout(
            std::time::Duration::from_secs(30),
            reader.wait_until_ready(),
        )
        .await
        .is_err()
        {
            tracing::warn!("quota cache not synced after 30 s; serving anyway (lists may be partial until it is)");
        }
        store
    }

    fn cached(&self) -> Vec<std::sync::Arc<BizGroupResourceQuota>> {
        self.cache.state()
    }

    /// What runs in `name`'s whole subtree (`quota::rollup::subtree_in_use`'s
    /// figure), with `status` as about to be written: its own `selfUsed`
    /// plus its descendants' as the watch's copy holds them. A quota that
    /// carves nothing out has no children, and its figure is its own (no
    /// walk: the admission path writes leaves). At a parent (a borrowing
    /// admission writes its lender), a walk of its subtree only, by the
    /// feed's index of children (`Kids`), each child's copy looked up in
    /// the cache; each quota once, so a parent cycle (only a store edited
    /// by hand holds one) ends the walk. A figure that a child's later
    /// write moves is restated by the controller (`controller::summaries`).
    pub fn in_use(&self, name: &str, status: &QuotaStatus) -> ResourceList {
        let mut total = status.self_used.clone();
        if status.children.is_empty() {
            return total;
        }
        let kids = self.kids.read().unwrap();
        let mut seen: HashSet<&str> = HashSet::from([name]);
        let mut next: Vec<&str> = vec![name];
        while let Some(at) = next.pop() {
            for child in kids.of.get(at).into_iter().flatten() {
                if !seen.insert(child) {
                    continue;
                }
                let k = self.cache.get(&reflector::ObjectRef::new(child));
                if let Some(st) = k.as_ref().and_then(|k| k.status.as_ref()) {
                    quota::resources::add_into(&mut total, &st.0.self_used);
                }
                next.push(child);
            }
        }
        total
    }
}

/// The cache's quotas by parent (`spec.parent`, as the usage API's
/// subtree sums read it), kept by the cache's feed after each event the
/// reflector applied; a (re)list replaces it once complete, as the cache.
#[derive(Default)]
pub struct Kids {
    parent_of: HashMap<String, String>,
    of: HashMap<String, std::collections::BTreeSet<String>>,
    listing: Vec<(String, String)>,
}

impl Kids {
    fn seen(&mut self, ev: &kube::runtime::watcher::Event<BizGroupResourceQuota>) {
        use kube::runtime::watcher::Event;
        let named = |k: &BizGroupResourceQuota| {
            (
                k.metadata.name.clone().unwrap_or_default(),
                k.spec.parent.clone(),
            )
        };
        match ev {
            Event::Apply(k) => {
                let (name, parent) = named(k);
                self.set(name, parent);
            }
            Event::Delete(k) => self.remove(k.metadata.name.as_deref().unwrap_or_default()),
            Event::Init => self.listing.clear(),
            Event::InitApply(k) => self.listing.push(named(k)),
            Event::InitDone => {
                let listed = std::mem::take(&mut self.listing);
                *self = Kids::default();
                for (name, parent) in listed {
                    self.set(name, parent);
                }
            }
        }
    }

    fn set(&mut self, name: String, parent: String) {
        self.remove(&name);
        if !parent.is_empty() {
            self.of
                .entry(parent.clone())
                .or_default()
                .insert(name.clone());
        }
        self.parent_of.insert(name, parent);
    }

    fn remove(&mut self, name: &str) {
        if let Some(parent) = self.parent_of.remove(name) {
            if let Some(kids) = self.of.get_mut(&parent) {
                kids.remove(name);
                if kids.is_empty() {
                    self.of.remove(&parent);
                }
            }
        }
    }
}

/// The quotas whose summaries for people may have gone stale: each quota
/// the cache's watch saw written, and the parent of each it saw deleted,
/// in the order first marked. The controller takes them every
/// `--summary-seconds` (`controller::summaries`) and judges them on this
/// store's cache, which already holds what marked them: the reflector
/// applies an event before passing it on, and a (re)list's objects are
/// marked only when it is complete and the cache swapped to it. A
/// separate watch's marks (the controller's) could be judged on a cache
/// behind them, find the parent fresh and be dropped.
#[derive(Default)]
pub struct SummaryMarks(std::sync::Mutex<Marks>);

#[derive(Default)]
struct Marks {
    next: u64,
    /// By name, when first marked (a mark put back keeps its place).
    names: HashMap<String, u64>,
    /// The objects of a (re)list not yet complete.
    listing: Vec<String>,
}

impl SummaryMarks {
    /// Marks what `ev` changed, once the cache holds it.
    pub fn seen(&self, ev: &kube::runtime::watcher::Event<BizGroupResourceQuota>) {
        use kube::runtime::watcher::Event;
        match ev {
            Event::Apply(k) => self.mark(k.metadata.name.as_deref().unwrap_or_default()),
            // What runs below its parent changed.
            Event::Delete(k) => self.mark(&k.spec.parent),
            Event::Init => self.0.lock().unwrap().listing.clear(),
            Event::InitApply(k) => {
                let name = k.metadata.name.clone().unwrap_or_default();
                self.0.lock().unwrap().listing.push(name);
            }
            // Every listed quota: a summary written by an older bizrq,
            // or a parent whose child vanished between lists, is judged.
            Event::InitDone => {
                let listed = std::mem::take(&mut self.0.lock().unwrap().listing);
                for name in listed {
                    self.mark(&name);
                }
            }
        }
    }

    pub fn mark(&self, name: &str) {
        if name.is_empty() {
            return;
        }
        let mut m = self.0.lock().unwrap();
        let seq = m.next;
        if let std::collections::hash_map::Entry::Vacant(v) = m.names.entry(name.to_string()) {
            v.insert(seq);
            m.next += 1;
        }
    }

    /// Every mark, oldest first; none left.
    pub fn take(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = std::mem::take(&mut self.0.lock().unwrap().names)
            .into_iter()
            .collect();
        out.sort_by_key(|(_, seq)| *seq);
        out
    }

    /// Marks taken and not dealt with, in their places.
    pub fn put_back(&self, marks: impl IntoIterator<Item = (String, u64)>) {
        let mut m = self.0.lock().unwrap();
        for (name, seq) in marks {
            let at = m.names.entry(name).or_insert(seq);
            *at = (*at).min(seq);
        }
    }
}

/// Whether `k`'s status holds `workload`'s charge.
fn holds(k: &BizGroupResourceQuota, workload: &str) -> bool {
    k.status
        .as_ref()
        .is_some_and(|s| s.0.workloads.contains_key(workload))
}

/// What a workload's own metadata says of where its charge is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    /// No quota label, or a kind that defers to its controller: no quota
    /// holds its charge, whoever wrote last.
    Ungoverned,
    /// Labelled: its charge, if it has one, is in this quota.
    To(String),
}

/// The binding of an object of `adapter`'s kind from its metadata, read
/// as the validating webhook reads it (`Adapter::read_binding`): the same
/// label, the same controller-owner rule.
pub fn bound(
    adapter: &quota::workload::Adapter,
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Result<Bound, String> {
    let json = serde_json::json!({ "metadata": metadata }).to_string();
    let w = adapter.read_binding(&json).map_err(|e| e.to_string())?;
    Ok(match w.quota() {
        Some(q) => Bound::To(q.to_string()),
        None => Bound::Ungoverned,
    })
}

/// A version a lookup may put in a URL as the API server serves one
/// (`v1`, `v1alpha2`): never a path or a query.
pub fn servable_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// How long a workload lookup the cache misses waits for the watch to
/// reach this replica's latest quota write before it lists every quota.
pub const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(1);

/// How far the watch's copy has read, against this replica's own quota
/// writes: when `workload_quota` can trust its cache for what this
/// replica charged, and when a reconcile's cache is as new as its cause.
///
/// A charge is a status write; the watch delivers a resource's events in
/// resourceVersion order, each applied to the cache before the feed sees
/// it. So once the cache holds an event at or past this replica's latest
/// write, it holds that write and every write (any replica's) before it.
/// A charge this replica made for a workload (its create reviewed here)
/// is then in the cache, and the webhook answered that create only after
/// the write: a later scale or delete of the workload, reviewed here, is
/// judged on a copy that holds the charge. Across replicas the same holds
/// for every charge written before this replica's own latest write; a
/// charge another replica wrote after it is known once this replica's
/// watch delivers it, which is why a miss is still read again
/// (docs/cluster-mode.md).
#[derive(Default)]
pub struct Reach {
    /// The highest resourceVersion of this replica's own status writes.
    written: std::sync::atomic::AtomicI64,
    /// The highest resourceVersion the cache holds; `None` until the
    /// first list is complete (an empty cache answers nothing).
    seen: tokio::sync::watch::Sender<Option<i64>>,
    /// The highest version of a (re)list not yet complete.
    listing: std::sync::Mutex<i64>,
}

/// Whether the cache holds every quota write up to `written` (any
/// replica's): never before the first complete list.
pub fn miss_is_answer(seen: Option<i64>, written: i64) -> bool {
    seen.is_some_and(|s| s >= written)
}

impl Reach {
    /// Notes one of this replica's own writes, at `version`.
    pub fn wrote(&self, version: i64) {
        self.written
            .fetch_max(version, std::sync::atomic::Ordering::SeqCst);
    }

    fn saw(&self, version: i64) {
        self.seen.send_if_modified(|s| {
            let higher = s.is_none_or(|s| version > s);
            if higher {
                *s = Some(version);
            }
            higher
        });
    }

    /// Follows the cache: an event once applied; a (re)list once complete
    /// (the reflector swaps its copy then).
    pub fn seen(&self, ev: &kube::runtime::watcher::Event<BizGroupResourceQuota>) {
        use kube::runtime::watcher::Event;
        let rv = |k: &BizGroupResourceQuota| version_of(k).unwrap_or(0);
        match ev {
            Event::Apply(k) | Event::Delete(k) => self.saw(rv(k)),
            Event::Init => *self.listing.lock().unwrap() = 0,
            Event::InitApply(k) => {
                let mut at = self.listing.lock().unwrap();
                *at = (*at).max(rv(k));
            }
            Event::InitDone => {
                let listed = std::mem::take(&mut *self.listing.lock().unwrap());
                self.saw(listed);
            }
        }
    }

    /// Waits, up to `bound`, for the cache to hold this replica's latest
    /// write (woken by the feed, never polling). True when it does.
    pub async fn caught_up(&self, bound: std::time::Duration) -> bool {
        self.reached(
            self.written.load(std::sync::atomic::Ordering::SeqCst),
            bound,
        )
        .await
    }

    /// Waits, up to `bound`, for the cache to hold every write up to
    /// `version` (woken by the feed, never polling). True when it does.
    pub async fn reached(&self, version: i64, bound: std::time::Duration) -> bool {
        let mut seen = self.seen.subscribe();
        let reached = seen.wait_for(|s| miss_is_answer(*s, version));
        let caught = tokio::time::timeout(bound, reached).await;
        matches!(caught, Ok(Ok(_)))
    }
}

/// The watch's copy of the forest by parent, for subtree sums.
struct Family<'a> {
    by_name: HashMap<&'a str, &'a BizGroupResourceQuota>,
    kids: HashMap<&'a str, Vec<&'a BizGroupResourceQuota>>,
}

impl<'a> Family<'a> {
    fn of(cached: &'a [std::sync::Arc<BizGroupResourceQuota>]) -> Family<'a> {
        let mut f = Family {
            by_name: HashMap::with_capacity(cached.len()),
            kids: HashMap::new(),
        };
        for k in cached {
            f.by_name
                .insert(k.metadata.name.as_deref().unwrap_or_default(), k);
            if !k.spec.parent.is_empty() {
                f.kids.entry(k.spec.parent.as_str()).or_default().push(k);
            }
        }
        f
    }

    /// `own` (the quota's `selfUsed`) plus every descendant's of `name`,
    /// each once: a parent cycle (only a store edited by hand holds one)
    /// ends the walk.
    fn in_use(&self, name: &str, own: &ResourceList) -> ResourceList {
        let mut total = own.clone();
        let mut seen: HashSet<&str> = HashSet::from([name]);
        let mut next: Vec<&str> = vec![name];
        while let Some(at) = next.pop() {
            for k in self.kids.get(at).into_iter().flatten() {
                let child = k.metadata.name.as_deref().unwrap_or_default();
                if !seen.insert(child) {
                    continue;
                }
                if let Some(st) = &k.status {
                    quota::resources::add_into(&mut total, &st.0.self_used);
                }
                next.push(child);
            }
        }
        total
    }

    /// Whether the summaries stored on `k` differ from what a write of
    /// its stored status would derive now (None: no status yet).
    fn stale(&self, k: &BizGroupResourceQuota, keys: &KeyConfig) -> Option<bool> {
        let status = &k.status.as_ref()?.0;
        let name = k.metadata.name.as_deref().unwrap_or_default();
        let in_use = if status.children.is_empty() {
            status.self_used.clone()
        } else {
            self.in_use(name, &status.self_used)
        };
        // The columns' text only: `readable` may hold a key the service's
        // copy lacks, which no write removes, and would be judged stale
        // for ever.
        let (summary, _) = quota::summary::summarize(&k.engine_spec(), status, &in_use, keys);
        Some(status.summary.as_ref() != Some(&summary))
    }
}

/// The object's resourceVersion, which is the store's version.
fn version_of(k: &BizGroupResourceQuota) -> Result<i64, StoreError> {
    let rv = k.metadata.resource_version.as_deref().unwrap_or("");
    rv.parse::<i64>().map_err(|_| {
        StoreError::Backend(format!(
            "bizrq {}: resourceVersion '{rv}' is not a number",
            k.metadata.name.as_deref().unwrap_or_default()
        ))
    })
}

fn to_stored(k: &BizGroupResourceQuota) -> Result<Stored, StoreError> {
    let name = k.metadata.name.clone().unwrap_or_default();
    let version = version_of(k)?;
    let quota = k
        .to_quota()
        .map_err(|e| StoreError::Backend(format!("bizrq {name}: unreadable object: {e}")))?;
    Ok(Stored { quota, version })
}

/// The object to write: the summaries for people are derived here, in the
/// same write as the status they summarise. Takes the quota by value: a
/// status write is the admission path's, and its status is moved into the
/// object rather than copied or converted through JSON.
fn to_object(
    mut q: Quota,
    version: Option<i64>,
    in_use: &ResourceList,
    keys: &KeyConfig,
) -> Result<BizGroupResourceQuota, StoreError> {
    q.status.summarize(&q.spec, in_use, keys);
    let mut k =
        BizGroupResourceQuota::from_owned(q).map_err(|e| StoreError::Backend(e.to_string()))?;
    k.metadata.resource_version = version.map(|v| v.to_string());
    Ok(k)
}

impl ClusterStore {
    /// The status write: a JSON merge patch of what changed between the
    /// status stored at `version` (`current`'s) and `status`
    /// (`quota::patch`), with the summaries for people derived from `spec`,
    /// carrying `version` as its precondition, so it is the same
    /// compare-and-swap as a whole PUT (a stale version is a 409, which is
    /// `Conflict`). A hot quota's status holds every workload's charge; a
    /// batch changes a few, and only those are serialised, sent and merged.
    async fn patch_status(
        &self,
        name: &str,
        version: i64,
        current: &Stored,
        spec: &quota::QuotaSpec,
        status: &QuotaStatus,
    ) -> Result<i64, StoreError> {
        let old = &current.quota;
        let mut members = quota::patch::status_merge_patch(&old.status, status);
        // Readable balances are per cash key of the spec: any the last
        // spec had and this one has not are removed.
        let in_use = self.in_use(name, status);
        let before = (old.spec != *spec)
            .then(|| quota::summary::summarize(&old.spec, &old.status, &in_use, &self.keys).1);
        let stored: Vec<&std::collections::BTreeMap<String, String>> =
            std::iter::once(&old.status.readable)
                .chain(&before)
                .collect();
        members.extend(quota::patch::derived_patch(
            spec, status, &in_use, &self.keys, &stored,
        ));
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": version.to_string()},
            "status": members,
        });
        let mut req = kube::core::Request::new(BizGroupResourceQuota::url_path(&(), None))
            .patch_subresource(
                "status",
                name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .map_err(|e| StoreError::Backend(format!("bizrq {name}: {e}")))?;
        // Only the new version is read of the answer (the service keeps the
        // status it wrote): asked for as metadata alone, as client-go's
        // metadata client asks, so the API server does not send the whole
        // object back (and what else comes is skipped unparsed).
        req.headers_mut().insert(
            axum::http::header::ACCEPT,
            axum::http::HeaderValue::from_static(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
            ),
        );
        let written: Versioned = self
            .client
            .request(req)
            .await
            .map_err(|e| map_err(name, e))?;
        let version = written.version(name)?;
        self.reach.wrote(version);
        Ok(version)
    }
}

/// An object as answered, read only for its version.
#[derive(serde::Deserialize)]
struct Versioned {
    metadata: VersionedMeta,
}

#[derive(serde::Deserialize)]
struct VersionedMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default)]
    uid: Option<String>,
}

impl Versioned {
    fn version(&self, name: &str) -> Result<i64, StoreError> {
        let rv = self.metadata.resource_version.as_deref().unwrap_or("");
        rv.parse::<i64>().map_err(|_| {
            StoreError::Backend(format!(
                "bizrq {name}: resourceVersion '{rv}' is not a number"
            ))
        })
    }
}

fn map_err(name: &str, e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(s) => from_status(name, &s),
        e => StoreError::Backend(format!("bizrq {name}: {e}")),
    }
}

/// bizrq's own webhooks are named `<endpoint>.bizrq.io`
/// (deploy/base/webhook.yaml): their denials are bizrq's words already.
const OWN_WEBHOOKS: &str = ".bizrq.io";

/// What the API server's refusal of a write on `name` means for the person
/// who asked. A storage conflict stays `Conflict`, which the service's
/// compare-and-swap re-reads and retries; a webhook's 409 is a decision,
/// said in the webhook's words and not retried.
fn from_status(name: &str, s: &kube::core::Status) -> StoreError {
    use crate::store::Refusal;
    let refused = StoreError::refused;
    if let Some((webhook, said)) = webhook_denial(&s.message) {
        // Another webhook's words keep its name, so the person knows whose.
        let said = match said {
            Some(said) if webhook.ends_with(OWN_WEBHOOKS) => said.to_string(),
            _ => s.message.clone(),
        };
        return match s.code {
            400 | 422 => refused(Refusal::BadRequest, said),
            404 => refused(Refusal::NotFound, said),
            409 if s.is_already_exists() => refused(Refusal::AlreadyExists, said),
            409 => refused(Refusal::Conflict, said),
            429 | 503 | 504 => refused(Refusal::Unavailable, said),
            500 => refused(Refusal::Internal, s.message.clone()),
            _ => refused(Refusal::Forbidden, said),
        };
    }
    if let Some((webhook, cause)) = webhook_unreachable(&s.message) {
        return refused(
            Refusal::Unavailable,
            format!(
                "bizrq {name} was not written: the API server could not reach the admission \
             webhook {webhook} ({cause}); check that a bizrq replica is ready \
             (kubectl -n bizrq-system get pods) and try again"
            ),
        );
    }
    let message = &s.message;
    if s.is_already_exists() {
        StoreError::AlreadyExists(name.into())
    } else if s.is_conflict() {
        StoreError::Conflict(name.into())
    } else if s.is_not_found() {
        StoreError::NotFound(name.into())
    } else if s.is_invalid() || s.code == 400 {
        refused(
            Refusal::BadRequest,
            format!("bizrq {name}: the API server refused it as invalid: {message}"),
        )
    } else if s.is_forbidden() {
        refused(
            Refusal::Forbidden,
            format!("bizrq {name}: the API server refused it: {message}"),
        )
    } else if matches!(s.code, 429 | 503 | 504) {
        refused(
            Refusal::Unavailable,
            format!(
            "bizrq {name}: the API server cannot take the change now ({} {}): {message}; try again",
            s.code, s.reason
        ),
        )
    } else {
        StoreError::Backend(format!("bizrq {name}: {s}"))
    }
}

/// `admission webhook "<name>" denied the request: <message>` (or "…
/// without explanation"), as kube-apiserver words a webhook's denial:
/// the webhook's name and its message.
fn webhook_denial(message: &str) -> Option<(&str, Option<&str>)> {
    let rest = message.strip_prefix("admission webhook \"")?;
    let (webhook, rest) = rest.split_once('"')?;
    if let Some(said) = rest.strip_prefix(" denied the request: ") {
        return Some((webhook, Some(said)));
    }
    rest.starts_with(" denied the request")
        .then_some((webhook, None))
}

/// `… failed calling webhook "<name>": <cause>`: the API server could not
/// call the webhook (unreachable, a timeout, a bad answer) under
/// `failurePolicy: Fail`.
fn webhook_unreachable(message: &str) -> Option<(&str, &str)> {
    let (_, rest) = message.split_once("failed calling webhook \"")?;
    let (webhook, cause) = rest.split_once('"')?;
    let cause = cause.strip_prefix(": ").unwrap_or(cause);
    Some((
        webhook,
        cause
            .strip_prefix("failed to call webhook: ")
            .unwrap_or(cause),
    ))
}

#[async_trait]
impl QuotaStore for ClusterStore {
    async fn get(&self, name: &str) -> Result<Option<Stored>, StoreError> {
        // Fresh from the API server: the service reads only when its own
        // copy is missing or has just lost a compare-and-swap.
        match self.api.get_opt(name).await.map_err(|e| map_err(name, e))? {
            Some(k) => Ok(Some(to_stored(&k)?)),
            None => Ok(None),
        }
    }

    fn watched(&self, name: &str, than: Option<i64>) -> Watched {
        let Some(k) = self.cache.get(&reflector::ObjectRef::new(name)) else {
            return Watched::Missing;
        };
        match version_of(&k) {
            Ok(v) if than.is_some_and(|t| v <= t) => Watched::NotNewer,
            Ok(_) => to_stored(&k).map_or(Watched::Missing, |s| Watched::Newer(Box::new(s))),
            Err(_) => Watched::Missing,
        }
    }

    async fn watched_newer(&self, name: &str, than: i64, bound: std::time::Duration) -> Watched {
        // Subscribed before the first look: a version applied after it
        // wakes the wait (the cache holds an event before the feed says
        // it has seen it).
        let mut seen = self.reach.seen.subscribe();
        let until = tokio::time::Instant::now() + bound;
        loop {
            match self.watched(name, Some(than)) {
                Watched::NotNewer => {}
                other => return other,
            }
            match tokio::time::timeout_at(until, seen.changed()).await {
                Ok(Ok(())) => {}
                _ => return Watched::NotNewer,
            }
        }
    }

    async fn stamp(&self, name: &str) -> Result<Option<Stamp>, StoreError> {
        // The object's metadata alone, fresh from the API server (not the
        // watch's copy, which may not have seen another replica's write
        // yet): what proves a kept copy current.
        let req = kube::core::Request::new(BizGroupResourceQuota::url_path(&(), None))
            .get_metadata(name, &GetParams::default())
            .map_err(|e| StoreError::Backend(format!("bizrq {name}: {e}")))?;
        match self.client.request::<Versioned>(req).await {
            Ok(v) => Ok(Some(Stamp {
                name: name.to_string(),
                version: v.version(name)?,
                uid: v.metadata.uid.unwrap_or_default(),
            })),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(None),
            Err(e) => Err(map_err(name, e)),
        }
    }

    async fn list(&self) -> Result<Vec<Stored>, StoreError> {
        let mut all = self
            .cached()
            .iter()
            .map(|k| to_stored(k))
            .collect::<Result<Vec<_>, _>>()?;
        all.sort_by(|a, b| a.quota.name().cmp(b.quota.name()));
        Ok(all)
    }

    async fn stamps(&self) -> Result<Vec<Stamp>, StoreError> {
        // From the watch's copy, as `list`: no object is converted.
        let mut all = self
            .cached()
            .iter()
            .map(|k| {
                Ok(Stamp {
                    name: k.metadata.name.clone().unwrap_or_default(),
                    version: version_of(k)?,
                    uid: k.metadata.uid.clone().unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn get_many(&self, names: &[String]) -> Result<Vec<Stored>, StoreError> {
        // From the watch's copy, as `list` (so a reader comparing `stamps`
        // gets the versions it was told of).
        let wanted: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let mut out = self
            .cached()
            .iter()
            .filter(|k| wanted.contains(k.metadata.name.as_deref().unwrap_or_default()))
            .map(|k| to_stored(k))
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.quota.name().cmp(b.quota.name()));
        Ok(out)
    }

    async fn children(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        let mut kids = self
            .cached()
            .iter()
            .filter(|k| k.spec.parent == name)
            .map(|k| to_stored(k))
            .collect::<Result<Vec<_>, _>>()?;
        kids.sort_by(|a, b| a.quota.name().cmp(b.quota.name()));
        Ok(kids)
    }

    async fn children_quotas(&self, name: &str) -> Result<Vec<std::sync::Arc<Quota>>, StoreError> {
        // The names from the feed's index by parent (not a pass over the
        // whole forest), each conversion kept until its version moves.
        let names: Vec<String> = self
            .kids
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .of
            .get(name)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let Some(k) = self.cache.get(&reflector::ObjectRef::new(&n)) else {
                continue;
            };
            if k.spec.parent != name {
                continue;
            }
            let version = version_of(&k)?;
            let kept = {
                let c = self.converted.lock().unwrap_or_else(|e| e.into_inner());
                c.get(&n)
                    .filter(|(v, _)| *v == version)
                    .map(|(_, q)| q.clone())
            };
            let q = match kept {
                Some(q) => q,
                None => {
                    let q = std::sync::Arc::new(to_stored(&k)?.quota);
                    let mut c = self.converted.lock().unwrap_or_else(|e| e.into_inner());
                    if c.len() >= CONVERTED_KEPT {
                        c.clear();
                    }
                    c.insert(n, (version, q.clone()));
                    q
                }
            };
            out.push(q);
        }
        Ok(out)
    }

    async fn subtrees(&self, roots: &[String]) -> Result<Vec<Stored>, StoreError> {
        // One pass over the watch's copy; only the subtrees are converted.
        let cached = self.cached();
        let mut kids: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for k in cached.iter() {
            kids.entry(k.spec.parent.as_str())
                .or_default()
                .push(k.metadata.name.as_deref().unwrap_or_default());
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut queue: Vec<&str> = roots.iter().map(String::as_str).collect();
        while let Some(n) = queue.pop() {
            if seen.insert(n) {
                queue.extend(kids.get(n).into_iter().flatten().copied());
            }
        }
        cached
            .iter()
            .filter(|k| seen.contains(k.metadata.name.as_deref().unwrap_or_default()))
            .map(|k| to_stored(k))
            .collect::<Result<Vec<_>, _>>()
            .map(|mut v| {
                v.sort_by(|a, b| a.quota.name().cmp(b.quota.name()));
                v
            })
    }

    async fn create(&self, quota: &Quota) -> Result<Stored, StoreError> {
        let name = quota.name();
        let mut fresh = quota.clone();
        fresh.metadata.uid = None;
        fresh.metadata.creation_timestamp = None;
        let created = self
            .api
            .create(
                &PostParams::default(),
                &to_object(fresh, None, &ResourceList::new(), &self.keys)?,
            )
            .await
            .map_err(|e| map_err(name, e))?;
        // The API server drops status on create; write it through its
        // subresource, from the version just created. The controller may
        // reconcile the new object first (its status is derived from the
        // ledgers, so either write is as good): on a conflict, re-read, and
        // keep a status someone already wrote.
        let mut current = to_stored(&created)?;
        for _ in 0..5 {
            match self.replace_status(&current, &quota.status).await {
                Ok(version) => {
                    let mut q = current.quota;
                    q.status = quota.status.clone();
                    q.metadata.resource_version = Some(version.to_string());
                    return Ok(Stored { quota: q, version });
                }
                Err(StoreError::Conflict(_)) => {
                    let Some(fresh) = self.get(name).await? else {
                        return Err(StoreError::NotFound(name.into()));
                    };
                    if !fresh.quota.status.hard.is_empty() {
                        return Ok(fresh);
                    }
                    current = fresh;
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Conflict(name.into()))
    }

    async fn replace(&self, current: &Stored, quota: &Quota) -> Result<i64, StoreError> {
        let name = quota.name();
        let mut version = current.version;
        if quota.spec != current.quota.spec {
            let written = self
                .api
                .replace(
                    name,
                    &PostParams::default(),
                    &to_object(
                        quota.clone(),
                        Some(version),
                        &self.in_use(name, &quota.status),
                        &self.keys,
                    )?,
                )
                .await
                .map_err(|e| map_err(name, e))?;
            version = version_of(&written)?;
        }
        // The spec write leaves the status as it was (`current`'s).
        self.patch_status(name, version, current, &quota.spec, &quota.status)
            .await
    }

    async fn replace_status(
        &self,
        current: &Stored,
        status: &QuotaStatus,
    ) -> Result<i64, StoreError> {
        let q = &current.quota;
        self.patch_status(q.name(), current.version, current, &q.spec, status)
            .await
    }
    async fn delete(&self, current: &Stored) -> Result<(), StoreError> {
        let name = current.quota.name();
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(current.version.to_string()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        self.api
            .delete(name, &dp)
            .await
            .map_err(|e| map_err(name, e))?;
        Ok(())
    }

    /// The quota whose status holds `workload`'s charge, from the cache.
    /// On a miss it first waits for the cache to hold this replica's latest
    /// quota write (`Reach`, up to `CATCH_UP`): a charge this replica just
    /// wrote (a scale or delete right after a create it reviewed) is then
    /// found in the cache, with no request. A miss after that is read again
    /// in one LIST of every quota, counted: another replica may have
    /// written the charge after this replica's latest write, and its watch
    /// may not have delivered it yet; a miss taken for the answer would let
    /// a scale of that workload through unjudged, past `hard`
    /// (docs/cluster-mode.md).
    async fn workload_quota(&self, workload: &str) -> Result<Option<String>, StoreError> {
        if let Some(name) = self.cached_holder(workload) {
            return Ok(Some(name));
        }
        if self.reach.caught_up(CATCH_UP).await {
            if let Some(name) = self.cached_holder(workload) {
                return Ok(Some(name));
            }
        }
        self.lookup_lists.inc();
        let listed = self
            .api
            .list(&ListParams::default())
            .await
            .map_err(|e| map_err("list", e))?;
        Ok(listed
            .items
            .iter()
            .find(|k| holds(k, workload))
            .and_then(|k| k.metadata.name.clone()))
    }

    /// The quota holding the charge of the workload stored at `at`, from
    /// the cache; on a miss, one GET of the workload's metadata decides,
    /// by the quota label the validating webhook charges by: none (or a
    /// kind that defers to its controller) is ungoverned, whatever any
    /// replica wrote; labelled `q`, the charge can only be in `q`, read
    /// from the cache or one GET of `q`. Never a LIST of every quota,
    /// except where the GET cannot answer: the object is gone or cannot
    /// be named (as `workload_quota` answers), or the GET failed (RBAC, an
    /// API error; logged and counted), so nothing passes unjudged
    /// (docs/cluster-mode.md).
    async fn workload_quota_at(
        &self,
        workload: &str,
        at: &WorkloadAt<'_>,
    ) -> Result<Option<String>, StoreError> {
        if let Some(name) = self.cached_holder(workload) {
            return Ok(Some(name));
        }
        match self.read_bound(at).await {
            Ok(Some(Bound::Ungoverned)) => Ok(None),
            Ok(Some(Bound::To(q))) => self.holder_in(&q, workload).await,
            Ok(None) => self.workload_quota(workload).await,
            Err(error) => {
                self.lookup_read_failures.inc();
                tracing::warn!(workload, %error,
                    "cannot read the workload to find its quota label; looking its charge up in a LIST of every quota (grant bizrq `get` on the kind)");
                self.workload_quota(workload).await
            }
        }
    }

    async fn caught_up_to(&self, version: i64) -> bool {
        self.reach.reached(version, CATCH_UP).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.api
            .list(&ListParams::default().limit(1))
            .await
            .map_err(|e| map_err("list", e))?;
        Ok(())
    }

    fn summary_marks(&self) -> Vec<(String, u64)> {
        self.marks.take()
    }

    fn put_back_summary_marks(&self, marks: Vec<(String, u64)>) {
        self.marks.put_back(marks)
    }

    fn stale_summaries(&self, marked: &[(String, u64)]) -> Vec<(String, u64)> {
        let cached = self.cached();
        let family = Family::of(&cached);
        let parent_of = |n: &str| family.by_name.get(n).map(|k| k.spec.parent.as_str());
        // Each quota to judge, with its earliest mark (an ancestor takes
        // that of the first mark below it).
        let mut check: HashMap<String, u64> = HashMap::new();
        let mut note = |name: String, seq: u64| {
            let at = check.entry(name).or_insert(seq);
            *at = (*at).min(seq);
        };
        for (name, seq) in marked {
            if family.by_name.contains_key(name.as_str()) {
                note(name.clone(), *seq);
            }
            for above in quota::rollup::line_above(name, parent_of) {
                note(above, *seq);
            }
        }
        let mut stale: Vec<(String, u64)> = check
            .into_iter()
            .filter(|(n, _)| {
                family
                    .by_name
                    .get(n.as_str())
                    .and_then(|k| family.stale(k, &self.keys))
                    .unwrap_or(false)
            })
            .collect();
        stale.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        stale
    }
}

#[cfg(test)]
mod tests;
