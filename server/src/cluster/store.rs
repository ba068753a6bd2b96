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
}

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

    async fn version(&self, name: &str) -> Result<Option<i64>, StoreError> {
        // The object's metadata alone, fresh from the API server (not the
        // watch's copy, which may not have seen another replica's write
        // yet): what proves a kept copy current.
        let req = kube::core::Request::new(BizGroupResourceQuota::url_path(&(), None))
            .get_metadata(name, &GetParams::default())
            .map_err(|e| StoreError::Backend(format!("bizrq {name}: {e}")))?;
        match self.client.request::<Versioned>(req).await {
            Ok(v) => v.version(name).map(Some),
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
mod tests {
    //! The API server played by a `tower_test` mock: each test asserts the
    //! exact requests the store makes and answers them.

    use super::*;
    use crate::metrics::Metrics;
    use crate::service::{Service, ServiceError};
    use http::{Method, Request, Response};
    use kube::client::Body;
    use serde_json::{json, Value};
    use std::sync::Arc;

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    fn mock() -> (Client, Handle) {
        let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(svc, "default"), handle)
    }

    fn object(name: &str, rv: &str, used_gpu: &str) -> Value {
        json!({
            "apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
            "metadata": {"name": name, "resourceVersion": rv, "uid": "u-1", "creationTimestamp": "2026-11-21T10:00:00Z"},
            "spec": {"parent": "", "hard": {"requests.nvidia.com/gpu": "16"}},
            "status": {"hard": {"requests.nvidia.com/gpu": "16"}, "used": {"requests.nvidia.com/gpu": used_gpu}, "selfUsed": {"requests.nvidia.com/gpu": used_gpu}}
        })
    }

    fn conflict(name: &str) -> Response<Body> {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": format!("Operation cannot be fulfilled on bizgroupresourcequotas.bizrq.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again")});
        Response::builder()
            .status(409)
            .body(Body::from(serde_json::to_vec(&status).unwrap()))
            .unwrap()
    }

    fn ok(v: &Value) -> Response<Body> {
        Response::builder()
            .status(200)
            .body(Body::from(serde_json::to_vec(v).unwrap()))
            .unwrap()
    }

    async fn expect(
        handle: &mut Handle,
        method: Method,
        path: &str,
    ) -> (Value, tower_test::mock::SendResponse<Response<Body>>) {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), method);
        assert_eq!(req.uri().path(), path);
        let bytes = http_body_util::BodyExt::collect(req.into_body())
            .await
            .unwrap()
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (body, send)
    }

    const PATH: &str = "/apis/bizrq.io/v1/bizgroupresourcequotas";

    /// `kubectl get bizrq` reads its columns from status.summary, and
    /// people read cash in card-hours: both ride in the one status write
    /// (one compare-and-swap), derived from what it writes.
    #[tokio::test]
    async fn the_status_write_carries_the_summary_and_readable_cash() {
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache).with_keys(quota::KeyConfig::default());
        let mut current =
            to_stored(&serde_json::from_value(object("nlp", "7", "0")).unwrap()).unwrap();
        current.quota.spec.hard.insert(
            "cash/requests.nvidia.com/gpu".into(),
            "1000".parse().unwrap(),
        );
        let mut status = current.quota.status.clone();
        status
            .used
            .insert("requests.nvidia.com/gpu".into(), "12".parse().unwrap());
        status.used.insert(
            "cash/requests.nvidia.com/gpu".into(),
            "422200u".parse().unwrap(),
        );
        // A quota without children: what runs in its subtree is its own.
        status
            .self_used
            .insert("requests.nvidia.com/gpu".into(), "12".parse().unwrap());
        let per_mille = quota::budget::PRICE_ONE / quota::cash::PER_MILLE;
        status.add_accrued(
            "cash/requests.nvidia.com/gpu",
            quota::budget::from_quantity("422200u".parse().unwrap()) / per_mille,
        );
        let server = tokio::spawn(async move {
            let (body, send) =
                expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
            let mut written = body.clone();
            written["metadata"]["resourceVersion"] = json!("8");
            send.send_response(ok(&written));
            body
        });
        assert_eq!(store.replace_status(&current, &status).await.unwrap(), 8);
        let body = server.await.unwrap();
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(
            body["status"]["used"]["cash/requests.nvidia.com/gpu"],
            "422200u"
        );
        assert_eq!(
            body["status"]["summary"],
            // Whole, a member it lacks removed (`null`) rather than kept.
            json!({"gpu": "12/16", "cardHoursLeft": "999.58", "borrowing": null, "reclaimPending": 0, "queued": 0})
        );
        assert_eq!(
            body["status"]["readable"],
            json!({"cash/requests.nvidia.com/gpu": "0.422 of 1000 card-hours used, 999.58 left"})
        );
    }

    /// The controller may write a new quota's status before the creator
    /// does: the creator's 409 is not a failed create.
    #[tokio::test]
    async fn a_create_whose_status_the_controller_wrote_first_succeeds() {
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let q = to_stored(&serde_json::from_value(object("nlp", "1", "0")).unwrap())
            .unwrap()
            .quota;
        let server = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::POST, PATH).await;
            let mut created = object("nlp", "5", "0");
            created.as_object_mut().unwrap().remove("status");
            send.send_response(ok(&created));
            let (body, send) =
                expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
            assert_eq!(body["metadata"]["resourceVersion"], "5");
            send.send_response(conflict("nlp"));
            let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/nlp")).await;
            send.send_response(ok(&object("nlp", "6", "0")));
        });
        let stored = store.create(&q).await.expect("created");
        assert_eq!(stored.version, 6, "the controller's status is kept");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn status_write_carries_the_resource_version_and_409_is_a_conflict() {
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let current = to_stored(&serde_json::from_value(object("nlp", "7", "0")).unwrap()).unwrap();
        let mut status = current.quota.status.clone();
        status
            .used
            .insert("requests.nvidia.com/gpu".into(), "4".parse().unwrap());
        let server = tokio::spawn(async move {
            let (body, send) =
                expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
            assert_eq!(body["metadata"]["resourceVersion"], "7");
            assert_eq!(body["status"]["used"]["requests.nvidia.com/gpu"], "4");
            send.send_response(conflict("nlp"));
        });
        let err = store.replace_status(&current, &status).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Conflict(ref n) if n == "nlp"),
            "{err:?}"
        );
        server.await.unwrap();
    }

    /// The service's compare-and-swap over the cluster: a 409 leads to a
    /// fresh GET and a retry from the new resourceVersion.
    #[tokio::test]
    async fn a_conflict_is_re_read_and_retried() {
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let mut svc = Service::new(
            Arc::new(store),
            Default::default(),
            Default::default(),
            Arc::new(Metrics::default()),
        );
        svc.accrue_from_ledger = false;
        let server = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/nlp")).await;
            send.send_response(ok(&object("nlp", "7", "0")));
            let (body, send) =
                expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
            assert_eq!(body["metadata"]["resourceVersion"], "7");
            send.send_response(conflict("nlp"));
            // Someone else charged 10 meanwhile.
            let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/nlp")).await;
            let mut theirs = object("nlp", "8", "10");
            theirs["status"]["workloads"] = json!({"apps/Deployment/ml/other": {"podSets": [{"name": "main", "count": 10, "perPod": {"requests.nvidia.com/gpu": "1"}}], "since": "2026-11-21T10:00:00.000Z"}});
            send.send_response(ok(&theirs));
            let (body, send) =
                expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
            assert_eq!(body["metadata"]["resourceVersion"], "8");
            assert_eq!(
                body["status"]["used"]["requests.nvidia.com/gpu"], "14",
                "charged on top of the fresh read"
            );
            let mut written = body.clone();
            written["metadata"]["resourceVersion"] = "9".into();
            send.send_response(ok(&written));
        });
        let per_pod: quota::ResourceList =
            [("requests.nvidia.com/gpu".to_string(), "1".parse().unwrap())].into();
        let sets = vec![quota::workload::PodSet {
            name: "main".into(),
            count: 4,
            per_pod,
            qos: None,
        }];
        svc.charge(crate::service::ChargeRequest::new(
            "nlp",
            "apps/Deployment/ml/mine",
            sets,
            "uid",
        ))
        .await
        .unwrap();
        server.await.unwrap();
        assert_eq!(svc.metrics.cas_conflicts.get(), 1);
    }

    /// A status write is a merge patch of what changed, carrying the
    /// version it was decided on; the rest of the status is not sent.
    #[tokio::test]
    async fn the_status_write_patches_only_what_changed() {
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let mut start: BizGroupResourceQuota =
            serde_json::from_value(object("nlp", "7", "0")).unwrap();
        let charge = |n: i64| quota::object::Charge {
            pod_sets: vec![quota::workload::PodSet {
                name: "main".into(),
                count: n,
                per_pod: [("requests.nvidia.com/gpu".to_string(), "1".parse().unwrap())].into(),
                qos: None,
            }],
            hpa: None,
            since: "2026-11-21T10:00:00.000Z".into(),
            uid: format!("u-{n}"),
            admitted: None,
        };
        let st = &mut start.status.as_mut().unwrap().0;
        for w in ["a", "b", "c"] {
            st.workloads
                .insert(format!("apps/Deployment/ml/{w}"), charge(1));
        }
        let current = to_stored(&start).unwrap();
        let mut status = current.quota.status.clone();
        status
            .workloads
            .insert("apps/Deployment/ml/b".into(), charge(2));
        status.workloads.remove("apps/Deployment/ml/c");
        status
            .used
            .insert("requests.nvidia.com/gpu".into(), "3".parse().unwrap());
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("a request");
            assert_eq!(req.method(), Method::PATCH);
            assert_eq!(req.uri().path(), format!("{PATH}/nlp/status"));
            assert_eq!(
                req.headers()["content-type"],
                "application/merge-patch+json"
            );
            let accept = req.headers()["accept"].to_str().unwrap();
            assert!(accept.contains("as=PartialObjectMetadata"), "{accept}");
            let bytes = http_body_util::BodyExt::collect(req.into_body())
                .await
                .unwrap()
                .to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            send.send_response(ok(
                &json!({"metadata": {"name": "nlp", "resourceVersion": "8"}}),
            ));
            body
        });
        assert_eq!(store.replace_status(&current, &status).await.unwrap(), 8);
        let body = server.await.unwrap();
        assert_eq!(body["metadata"], json!({"resourceVersion": "7"}));
        assert_eq!(
            body["status"]["workloads"],
            json!({"apps/Deployment/ml/b": {"podSets": [{"name": "main", "count": 2, "perPod": {"requests.nvidia.com/gpu": "1"}}], "uid": "u-2"},
                   "apps/Deployment/ml/c": null}),
            "only the changed charge's changed members, and the one released"
        );
        assert_eq!(
            body["status"]["used"],
            json!({"requests.nvidia.com/gpu": "3"})
        );
        assert!(body["status"]["hard"].is_null(), "unchanged: not sent");
        assert!(body["spec"].is_null());
    }

    /// Proving a kept copy current reads the object's metadata alone, from
    /// the API server.
    #[tokio::test]
    async fn version_reads_metadata_only() {
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("a request");
            assert_eq!(req.method(), Method::GET);
            assert_eq!(req.uri().path(), format!("{PATH}/nlp"));
            let accept = req.headers()["accept"].to_str().unwrap().to_string();
            assert!(accept.contains("as=PartialObjectMetadata"), "{accept}");
            send.send_response(ok(
                &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": "nlp", "resourceVersion": "12"}}),
            ));
            let (_, send) = handle.next_request().await.expect("a request");
            send.send_response(
                Response::builder()
                    .status(404)
                    .body(Body::from(
                        serde_json::to_vec(
                            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404, "message": "not found"}),
                        )
                        .unwrap(),
                    ))
                    .unwrap(),
            );
        });
        assert_eq!(store.version("nlp").await.unwrap(), Some(12));
        assert_eq!(store.version("gone").await.unwrap(), None);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn create_posts_then_writes_status_and_delete_names_its_version() {
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let q = Quota::new(
            "cv",
            quota::QuotaSpec {
                parent: String::new(),
                hard: [("pods".to_string(), "5".parse().unwrap())].into(),
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
            },
        );
        let server = tokio::spawn(async move {
            let (body, send) = expect(&mut handle, Method::POST, PATH).await;
            assert_eq!(body["metadata"]["name"], "cv");
            assert!(body["metadata"]["resourceVersion"].is_null());
            let mut created = body.clone();
            created["metadata"]["resourceVersion"] = "100".into();
            created.as_object_mut().unwrap().remove("status");
            send.send_response(ok(&created));
            let (body, send) =
                expect(&mut handle, Method::PATCH, &format!("{PATH}/cv/status")).await;
            assert_eq!(body["metadata"]["resourceVersion"], "100");
            assert_eq!(body["status"]["used"]["pods"], "0");
            let mut written = body.clone();
            written["metadata"]["resourceVersion"] = "101".into();
            send.send_response(ok(&written));
            let (body, send) = expect(&mut handle, Method::DELETE, &format!("{PATH}/cv")).await;
            assert_eq!(body["preconditions"]["resourceVersion"], "101");
            send.send_response(ok(
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
            ));
        });
        let stored = store.create(&q).await.unwrap();
        assert_eq!(stored.version, 101);
        store.delete(&stored).await.unwrap();
        server.await.unwrap();
    }

    /// A quota as the watch holds it: `used_gpu` of its own running,
    /// `kids` carved out of it (8 cards each), and the GPU column stored.
    fn with_summary(name: &str, parent: &str, own: &str, kids: &[&str], gpu: &str) -> Value {
        let mut o = object(name, "5", own);
        o["spec"]["parent"] = json!(parent);
        for k in kids {
            o["status"]["children"][*k] =
                json!({"hard": {"requests.nvidia.com/gpu": "8"}, "since": "2026-11-21T10:00:00Z"});
        }
        o["status"]["summary"] = json!({"gpu": gpu, "reclaimPending": 0, "queued": 0});
        o
    }

    /// At a parent the GPU column reads its subtree, from the watch's
    /// copy of its descendants: a child's write leaves the parents above
    /// it to restate, and only those whose stored figure differs are
    /// given (the controller writes them).
    #[tokio::test]
    async fn a_parents_column_reads_its_subtree_and_a_stale_one_is_found_above_a_write() {
        let (client, _handle) = mock();
        let (cache, mut writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let fed = store.feed();
        for o in [
            // 3 run in the team; the department runs 1 of its own and
            // carved 8 out for the team: its column said 9 (carve-out
            // and own), the subtree runs 4. The root's says 4, right.
            with_summary("team", "dept", "3", &[], "3/16"),
            with_summary("dept", "org", "1", &["team"], "9/16"),
            with_summary("org", "", "0", &["dept"], "4/16"),
            with_summary("other", "org", "0", &[], "0/16"),
        ] {
            let k: BizGroupResourceQuota = serde_json::from_value(o).unwrap();
            let ev = kube::runtime::watcher::Event::Apply(k);
            writer.apply_watcher_event(&ev);
            fed(&ev);
        }
        let dept = store.get_many(&["dept".to_string()]).await.unwrap();
        let in_use = store.in_use("dept", &dept[0].quota.status);
        assert_eq!(
            quota::resources::get(&in_use, "requests.nvidia.com/gpu"),
            "4".parse().unwrap()
        );
        let stale = |names: &[&str]| -> Vec<String> {
            let marked: Vec<(String, u64)> =
                (0..).zip(names).map(|(i, n)| (n.to_string(), i)).collect();
            store
                .stale_summaries(&marked)
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(stale(&["team"]), ["dept"]);
        // A quota gone from the watch marks nothing; its parent is marked
        // by the watch's delete.
        assert!(stale(&["gone"]).is_empty());
        assert!(stale(&["other"]).is_empty());
        assert_eq!(stale(&["org", "dept"]), ["dept"]);
    }

    /// The marks come from the cache's own feed, after the cache applied
    /// each event: a relist marks its quotas only once the cache holds the
    /// whole list, a delete marks the parent once the child is gone from
    /// the cache, and marks judged stale come oldest first (an ancestor
    /// at its first descendant's place), a mark given back keeping its
    /// place.
    #[tokio::test]
    async fn summary_marks_are_judged_on_a_cache_that_holds_them() {
        use kube::runtime::watcher::Event;
        let (client, _handle) = mock();
        let (cache, mut writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let fed = store.feed();
        let feed = |writer: &mut reflector::store::Writer<BizGroupResourceQuota>, ev| {
            // As `reflector` does: the cache first, then the event on.
            writer.apply_watcher_event(&ev);
            fed(&ev);
        };
        let quota = |o: Value| -> BizGroupResourceQuota { serde_json::from_value(o).unwrap() };
        feed(&mut writer, Event::Init);
        for o in [
            with_summary("team", "dept", "3", &[], "3/16"),
            with_summary("dept", "org", "1", &["team"], "4/16"),
            with_summary("org", "", "0", &["dept"], "4/16"),
        ] {
            feed(&mut writer, Event::InitApply(quota(o)));
        }
        // The cache holds none of the list yet: no mark to judge on it.
        assert!(store.cached().is_empty());
        assert!(store.summary_marks().is_empty());
        feed(&mut writer, Event::InitDone);
        let listed = store.summary_marks();
        let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["team", "dept", "org"]);
        // Every figure is right: nothing to restate. The department's
        // subtree is walked from the feed's index: 1 of its own, 3 below.
        assert!(store.stale_summaries(&listed).is_empty());
        let gpu_in_use = |name: &str| {
            let k = store.cache.get(&reflector::ObjectRef::new(name)).unwrap();
            let in_use = store.in_use(name, &k.status.as_ref().unwrap().0);
            quota::resources::get(&in_use, "requests.nvidia.com/gpu")
        };
        assert_eq!(gpu_in_use("dept"), "4".parse().unwrap());
        assert_eq!(gpu_in_use("org"), "4".parse().unwrap());
        // The team is deleted: the mark is its parent, and judged on a
        // cache without the team, the department's and the root's columns
        // (4 in use, 1 now) are stale; in the order marked.
        feed(
            &mut writer,
            Event::Delete(quota(with_summary("team", "dept", "3", &[], "3/16"))),
        );
        let marked = store.summary_marks();
        assert_eq!(marked.len(), 1);
        assert_eq!(marked[0].0, "dept");
        let stale = store.stale_summaries(&marked);
        let names: Vec<&str> = stale.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["dept", "org"]);
        assert_eq!(gpu_in_use("dept"), "1".parse().unwrap());
        assert_eq!(gpu_in_use("org"), "1".parse().unwrap());
        // A mark given back keeps its place ahead of a later one.
        feed(
            &mut writer,
            Event::Apply(quota(with_summary("org", "", "0", &["dept"], "4/16"))),
        );
        store.put_back_summary_marks(marked);
        let again: Vec<String> = store.summary_marks().into_iter().map(|(n, _)| n).collect();
        assert_eq!(again, ["dept", "org"]);
    }

    #[tokio::test]
    async fn lists_and_workload_lookups_come_from_the_watch_cache() {
        let (client, mut handle) = mock();
        let (cache, mut writer) = reflector::store();
        let mut child: BizGroupResourceQuota =
            serde_json::from_value(object("cv", "3", "0")).unwrap();
        child.spec.parent = "ai".into();
        child.status.as_mut().unwrap().0.workloads.insert(
            "apps/Deployment/ml/web".into(),
            quota::object::Charge {
                pod_sets: vec![],
                hpa: None,
                since: String::new(),
                uid: String::new(),
                admitted: None,
            },
        );
        let root: BizGroupResourceQuota = serde_json::from_value(object("ai", "2", "0")).unwrap();
        let store = ClusterStore::new(client, cache);
        let lists = prometheus_client::metrics::counter::Counter::default();
        let store = store.count_lookup_lists(lists.clone());
        // As `start`'s feed: the reflector applies, then the feed sees.
        let fed = store.feed();
        let mut apply = |ev: kube::runtime::watcher::Event<BizGroupResourceQuota>| {
            writer.apply_watcher_event(&ev);
            fed(&ev);
        };
        use kube::runtime::watcher::Event;
        apply(Event::Init);
        apply(Event::InitApply(child.clone()));
        apply(Event::InitApply(root));
        apply(Event::InitDone);
        let names: Vec<String> = store
            .list()
            .await
            .unwrap()
            .iter()
            .map(|s| s.quota.name().to_string())
            .collect();
        assert_eq!(names, ["ai", "cv"]);
        assert_eq!(store.children("ai").await.unwrap().len(), 1);
        // The forest's stamps and re-reads come from the same copy.
        let stamps = store.stamps().await.unwrap();
        let seen: Vec<(&str, i64)> = stamps
            .iter()
            .map(|s| (s.name.as_str(), s.version))
            .collect();
        assert_eq!(seen, [("ai", 2), ("cv", 3)]);
        let some = store
            .get_many(&["cv".to_string(), "gone".to_string()])
            .await
            .unwrap();
        assert_eq!(some.len(), 1);
        assert_eq!((some[0].quota.name(), some[0].version), ("cv", 3));
        assert_eq!(
            store
                .workload_quota("apps/Deployment/ml/web")
                .await
                .unwrap()
                .as_deref(),
            Some("cv")
        );
        let bound = std::time::Duration::from_secs(5);
        // A charge written here (version 10) that the watch has not yet
        // delivered: the lookup waits for the watch, which wakes it.
        store.reach.wrote(10);
        let store = Arc::new(store);
        let late = tokio::spawn({
            let store = store.clone();
            async move { store.workload_quota("apps/Deployment/ml/late").await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!late.is_finished(), "waits for the watch");
        let mut charged = child.clone();
        charged.metadata.resource_version = Some("10".into());
        let held = charged.status.as_ref().unwrap().0.workloads["apps/Deployment/ml/web"].clone();
        charged
            .status
            .as_mut()
            .unwrap()
            .0
            .workloads
            .insert("apps/Deployment/ml/late".into(), held);
        apply(Event::Apply(charged));
        let found = tokio::time::timeout(bound, late)
            .await
            .expect("woken by the watch");
        assert_eq!(found.unwrap().unwrap().as_deref(), Some("cv"));
        assert_eq!(lists.get(), 0);
        // A watch that never reaches this replica's latest write: past
        // `CATCH_UP`, one fresh LIST answers, counted.
        store.reach.wrote(20);
        let api = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("a request");
            assert_eq!(req.method(), "GET");
            assert_eq!(req.uri().path(), "/apis/bizrq.io/v1/bizgroupresourcequotas");
            let list = json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuotaList", "metadata": {"resourceVersion": "20"}, "items": [object("ai", "2", "0")]});
            send.send_response(
                Response::builder()
                    .body(Body::from(list.to_string().into_bytes()))
                    .unwrap(),
            );
        });
        let asked = std::time::Instant::now();
        assert_eq!(
            store
                .workload_quota("apps/Deployment/ml/none")
                .await
                .unwrap(),
            None
        );
        assert!(asked.elapsed() >= CATCH_UP, "listed only past the bound");
        api.await.unwrap();
        assert_eq!(lists.get(), 1);
    }

    /// A lookup the cache misses, for a workload it can name: one GET of
    /// the workload's metadata; no label answers at once, a label adds one
    /// GET of the quota it names; a refused GET falls back to one LIST,
    /// counted twice. Each request asserted, and none else made.
    #[tokio::test]
    async fn a_miss_reads_the_workload_then_the_quota_its_label_names() {
        let (client, mut handle) = mock();
        let (cache, mut writer) = reflector::store();
        let lists = prometheus_client::metrics::counter::Counter::default();
        let failures = prometheus_client::metrics::counter::Counter::default();
        let store = ClusterStore::new(client, cache)
            .count_lookup_lists(lists.clone())
            .count_lookup_read_failures(failures.clone());
        let fed = store.feed();
        use kube::runtime::watcher::Event;
        let ml: BizGroupResourceQuota = serde_json::from_value(object("ml", "2", "0")).unwrap();
        for ev in [Event::Init, Event::InitApply(ml), Event::InitDone] {
            writer.apply_watcher_event(&ev);
            fed(&ev);
        }
        let deployment = quota::workload::adapter_for_kind("apps", "Deployment").unwrap();
        let at = |name: &'static str| WorkloadAt {
            adapter: deployment,
            version: "v1",
            namespace: "ml",
            name,
        };
        let meta = |name: &str, labels: Value| {
            ok(
                &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": name, "namespace": "ml", "labels": labels}}),
            )
        };
        let deployments = "/apis/apps/v1/namespaces/ml/deployments";
        let store = Arc::new(store);
        let ask = |name: &'static str| {
            let store = store.clone();
            tokio::spawn(async move {
                let wref = format!("apps/Deployment/ml/{name}");
                store.workload_quota_at(&wref, &at(name)).await
            })
        };

        let free = ask("free");
        let (_, send) = expect(&mut handle, Method::GET, &format!("{deployments}/free")).await;
        send.send_response(meta("free", json!({"app": "free"})));
        assert_eq!(free.await.unwrap().unwrap(), None, "ungoverned");

        let web = ask("web");
        let (_, send) = expect(&mut handle, Method::GET, &format!("{deployments}/web")).await;
        send.send_response(meta(
            "web",
            json!({quota::keys::QUOTA_LABEL: "ml", "app": "web"}),
        ));
        let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/ml")).await;
        let mut charged = object("ml", "3", "1");
        charged["status"]["workloads"] = json!({"apps/Deployment/ml/web": {
            "podSets": [], "since": "2026-11-21T10:00:00.000Z", "uid": "d-1"}});
        send.send_response(ok(&charged));
        assert_eq!(
            web.await.unwrap().unwrap().as_deref(),
            Some("ml"),
            "another replica's charge, not yet in the cache"
        );
        assert_eq!((lists.get(), failures.get()), (0, 0));

        let hidden = ask("hidden");
        let (_, send) = expect(&mut handle, Method::GET, &format!("{deployments}/hidden")).await;
        let forbidden = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": "deployments.apps \"hidden\" is forbidden"});
        send.send_response(
            Response::builder()
                .status(403)
                .body(Body::from(serde_json::to_vec(&forbidden).unwrap()))
                .unwrap(),
        );
        let (_, send) = expect(&mut handle, Method::GET, PATH).await;
        send.send_response(ok(
            &json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuotaList",
            "metadata": {"resourceVersion": "3"}, "items": [object("ml", "3", "0")]}),
        ));
        assert_eq!(hidden.await.unwrap().unwrap(), None);
        assert_eq!((lists.get(), failures.get()), (1, 1));
        let more =
            tokio::time::timeout(std::time::Duration::from_millis(50), handle.next_request());
        assert!(more.await.is_err(), "no other request");
    }

    /// The decision behind a miss: an answer once the cache has read up to
    /// this replica's latest write, never before the first complete list.
    #[test]
    fn a_miss_is_an_answer_only_on_a_cache_at_or_past_the_latest_write() {
        assert!(
            !miss_is_answer(None, 0),
            "a cache never listed answers nothing"
        );
        assert!(miss_is_answer(Some(0), 0));
        assert!(miss_is_answer(Some(12), 10));
        assert!(miss_is_answer(Some(10), 10));
        assert!(!miss_is_answer(Some(9), 10));
    }

    /// The cache's reach follows what the reflector swapped in: a relist's
    /// objects only once it is complete, and never moves back.
    #[test]
    fn the_reach_follows_events_and_whole_lists_only() {
        use kube::runtime::watcher::Event;
        let reach = Reach::default();
        let at = |rv: &str| -> BizGroupResourceQuota {
            serde_json::from_value(object("ai", rv, "0")).unwrap()
        };
        let seen = || *reach.seen.borrow();
        assert_eq!(seen(), None);
        reach.seen(&Event::Init);
        reach.seen(&Event::InitApply(at("7")));
        reach.seen(&Event::InitApply(at("4")));
        assert_eq!(seen(), None, "a list not yet complete");
        reach.seen(&Event::InitDone);
        assert_eq!(seen(), Some(7));
        reach.seen(&Event::Apply(at("9")));
        assert_eq!(seen(), Some(9));
        reach.seen(&Event::Delete(at("11")));
        assert_eq!(seen(), Some(11));
        // A relist after a compaction can hold only older objects (the
        // newest was deleted): the reach does not move back.
        reach.seen(&Event::Init);
        reach.seen(&Event::InitApply(at("8")));
        reach.seen(&Event::InitDone);
        assert_eq!(seen(), Some(11));
    }

    fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "code": code, "reason": reason, "message": message});
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&status).unwrap()))
            .unwrap()
    }

    /// What a person gets from the JSON API when the API server answers
    /// bizrq's spec write (one request, never retried) with `answer`.
    async fn refused_write(answer: Response<Body>) -> (u16, String, String) {
        use axum::response::IntoResponse;
        let (client, mut handle) = mock();
        let (cache, _writer) = reflector::store();
        let store = ClusterStore::new(client, cache);
        let current = to_stored(&serde_json::from_value(object("nlp", "7", "0")).unwrap()).unwrap();
        let mut raised = current.quota.clone();
        raised
            .spec
            .hard
            .insert("requests.nvidia.com/gpu".into(), "20".parse().unwrap());
        let server = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::PUT, &format!("{PATH}/nlp")).await;
            send.send_response(answer);
            assert!(
                tokio::time::timeout(std::time::Duration::from_millis(100), handle.next_request())
                    .await
                    .is_err(),
                "a refusal is not retried as a stale version"
            );
        });
        let err = store.replace(&current, &raised).await.unwrap_err();
        server.await.unwrap();
        let e: ServiceError = err.into();
        let resp = crate::edge::ApiError::Service(e).into_response();
        let code = resp.status().as_u16();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        (
            code,
            v["error"]["reason"].as_str().unwrap().to_string(),
            v["error"]["message"].as_str().unwrap().to_string(),
        )
    }

    /// bizrq's own webhook refused bizrq's own write (another replica
    /// decided on a fresher parent): the person reads bizrq's reason, not
    /// "internal error", and not the API server's wrapping.
    #[tokio::test]
    async fn a_denial_by_bizrqs_own_webhook_reaches_the_person_in_bizrqs_words() {
        let said = "bizrq nlp needs 20 requests.nvidia.com/gpu carved out of ai, 4 left of 16";
        let (code, reason, message) = refused_write(status(
            403,
            "Forbidden",
            &format!("admission webhook \"quotas.bizrq.io\" denied the request: {said}"),
        ))
        .await;
        assert_eq!(
            (code, reason.as_str(), message.as_str()),
            (403, "Refused", said)
        );
    }

    /// Another admission webhook (a policy engine) keeps its name in the
    /// message, so the person knows whom to ask.
    #[tokio::test]
    async fn a_denial_by_another_webhook_names_that_webhook() {
        let msg = "admission webhook \"policy.example.com\" denied the request: quotas need an owner label";
        let (code, reason, message) = refused_write(status(403, "Forbidden", msg)).await;
        assert_eq!(
            (code, reason.as_str(), message.as_str()),
            (403, "Refused", msg)
        );
    }

    /// A webhook's 409 is its decision (a create in flight, a transfer
    /// holding the quota), not a stale resourceVersion.
    #[tokio::test]
    async fn a_webhooks_conflict_is_its_reason_not_someone_elses_change() {
        let said = "bizrq nlp is held by transfer t-1 until it finishes; try again after it";
        let (code, reason, message) = refused_write(status(
            409,
            "Conflict",
            &format!("admission webhook \"quotas.bizrq.io\" denied the request: {said}"),
        ))
        .await;
        assert_eq!(
            (code, reason.as_str(), message.as_str()),
            (409, "Conflict", said)
        );
    }

    /// The CRD's schema refused the object: a 400 with the API server's words.
    #[tokio::test]
    async fn an_object_the_crd_schema_refuses_is_a_bad_request_in_the_api_servers_words() {
        let msg = "BizGroupResourceQuota.bizrq.io \"nlp\" is invalid: spec.hard: Too many: 300: must have at most 256 items";
        let (code, reason, message) = refused_write(status(422, "Invalid", msg)).await;
        assert_eq!((code, reason.as_str()), (400, "BadRequest"));
        assert_eq!(
            message,
            format!("bizrq nlp: the API server refused it as invalid: {msg}")
        );
    }

    /// `failurePolicy: Fail` and no replica answering: a 503 saying the
    /// API server could not reach the webhook, and why.
    #[tokio::test]
    async fn an_unreachable_webhook_is_unavailable_and_says_so() {
        let (code, reason, message) = refused_write(status(
            500,
            "InternalError",
            "Internal error occurred: failed calling webhook \"quotas.bizrq.io\": failed to call webhook: Post \"https://bizrq.bizrq-system.svc:443/validate/quotas?timeout=5s\": dial tcp 10.96.12.7:443: connect: connection refused",
        ))
        .await;
        assert_eq!((code, reason.as_str()), (503, "Unavailable"));
        assert_eq!(
            message,
            "bizrq nlp was not written: the API server could not reach the admission webhook \
             quotas.bizrq.io (Post \"https://bizrq.bizrq-system.svc:443/validate/quotas?timeout=5s\": \
             dial tcp 10.96.12.7:443: connect: connection refused); check that a bizrq replica is \
             ready (kubectl -n bizrq-system get pods) and try again"
        );
    }

    /// bizrq's service account may not write (RBAC): the API server's
    /// words, for the operator, rather than "internal error".
    #[tokio::test]
    async fn a_write_rbac_forbids_says_what_the_api_server_said() {
        let msg = "bizgroupresourcequotas.bizrq.io \"nlp\" is forbidden: User \"system:serviceaccount:bizrq-system:bizrq\" cannot update resource \"bizgroupresourcequotas\" in API group \"bizrq.io\" at the cluster scope";
        let (code, _, message) = refused_write(status(403, "Forbidden", msg)).await;
        assert_eq!(code, 403);
        assert_eq!(
            message,
            format!("bizrq nlp: the API server refused it: {msg}")
        );
    }

    /// The label the validating webhook charges by, read from the
    /// metadata a lookup GETs: the same rule, controller owners included.
    #[test]
    fn a_workload_is_bound_by_its_quota_label_as_the_webhook_reads_it() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let deployment = quota::workload::adapter_for_kind("apps", "Deployment").unwrap();
        let replicaset = quota::workload::adapter_for_kind("apps", "ReplicaSet").unwrap();
        let meta = |v: Value| -> ObjectMeta { serde_json::from_value(v).unwrap() };
        let labelled = |q: &str| {
            json!({"name": "web", "namespace": "ml",
                "labels": {quota::keys::QUOTA_LABEL: q, "app": "web"}})
        };
        assert_eq!(
            bound(deployment, &meta(labelled("ml"))),
            Ok(Bound::To("ml".into()))
        );
        assert_eq!(
            bound(
                deployment,
                &meta(json!({"name": "web", "labels": {"app": "web"}}))
            ),
            Ok(Bound::Ungoverned)
        );
        assert_eq!(
            bound(deployment, &meta(labelled(""))),
            Ok(Bound::Ungoverned),
            "an empty label binds to nothing"
        );
        assert_eq!(
            bound(replicaset, &meta(labelled("ml"))),
            Ok(Bound::To("ml".into()))
        );
        let mut owned = labelled("ml");
        owned["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment",
            "name": "web", "uid": "d-1", "controller": true}]);
        assert_eq!(
            bound(replicaset, &meta(owned)),
            Ok(Bound::Ungoverned),
            "a ReplicaSet its Deployment controls is the Deployment's business"
        );
    }

    /// Only a version as the API server serves one is put in the GET's
    /// URL: an HPA's `scaleTargetRef.apiVersion` is the user's text.
    #[test]
    fn only_a_served_version_reaches_a_url() {
        for ok in ["v1", "v1alpha1", "v2beta1"] {
            assert!(servable_version(ok), "{ok}");
        }
        for bad in [
            "",
            "V1",
            "v1/../../api",
            "v1?watch=true",
            "v1#x",
            "v 1",
            &"v".repeat(64),
        ] {
            assert!(!servable_version(bad), "{bad:?}");
        }
    }
}
