//! The service layer: the one way in. The JSON API, the webhook, the portal
//! and the resync loop all change quotas through these methods, which apply
//! the `quota` crate's rules and write with compare-and-swap and retries.
//!
//! In files by job: `error` (what the service answers when it cannot),
//! `quotas` (creating, changing and deleting a quota, its carve-out in
//! its parent), `workloads` (charging, releasing and scaling workloads,
//! borrowing), `cache` (this process's copies and per-quota locks),
//! `recheck` (quotas whose charges a review lowered).

pub mod alert_ops;
pub mod audit;
pub mod changed;
pub mod charts;
pub mod forest;
mod group_commit;
pub mod notify;
pub mod prices;
pub mod queue;
pub mod queue_mark;
pub mod quota_ops;
pub mod shares;
pub mod transfer_ops;
pub mod transfers;
pub mod working;

mod cache;
mod error;
mod quotas;
mod recheck;
mod workloads;

use cache::{working_copy, write_over, Cache, NameGuard, NameLocks};
pub use error::{ServiceError, CONTENTION_RETRY_SECS, MAX_ATTEMPTS};
pub use quotas::{Confirmed, CREATE_TOKEN_ANNOTATION};
pub use recheck::{Recheck, RECHECK_DELAY};
pub(crate) use workloads::BorrowRounds;
pub use workloads::{ChargeRequest, Seen, MAX_DEFERRED};

use crate::metrics::{Metrics, Reread};
use crate::store::{QuotaStore, StoreError, Stored, Watched};
use crate::util::now_ms;
use quota::cash::QosMultipliers;
use quota::object::Quota;
use quota::queue::pending::RoundCopy;
use quota::resources::ResourceList;
use quota::KeyConfig;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

pub struct Service {
    pub store: Arc<dyn QuotaStore>,
    pub keys: KeyConfig,
    pub prices: QosMultipliers,
    /// The price list per model in force (`prices`): accrual and
    /// reservations read it through `price_list`.
    pub price_book: Arc<prices::PriceBook>,
    pub metrics: Arc<Metrics>,
    /// Standalone mode: cash accrues from the charge ledger (no pods to see).
    pub accrue_from_ledger: bool,
    /// Kubernetes Events (cluster mode; nowhere standalone).
    pub events: Arc<dyn notify::Notifier>,
    /// Quotas written since the alert engine last looked (§7: alerts
    /// are evaluated after every status change).
    pub changed: Arc<changed::Changed>,
    /// Quotas whose charges a review lowered, for the controller to confirm
    /// against the cluster (see `Recheck`).
    pub recheck: Arc<Recheck>,
    /// bizrq's own identity in the API server's reviews (`--service-account`):
    /// only its quota creates may name a carve-out already made. Empty: none may.
    pub service_account: String,
    /// PriorityClasses, for queued workloads' priority (`queue::PriorityLookup`).
    pub priorities: Arc<dyn queue::PriorityLookup>,
    /// Cluster mode: work that does not fit may wait, held back, in its
    /// quota's queue, which the controller admits from. Standalone: false,
    /// so nothing queues — nothing there would ever admit it.
    pub queueing: bool,
    /// `--queue-fitting-creates`: with marks, a create that fits is held
    /// and marked too, and the next round admits it (docs/queueing.md §10).
    pub queue_fitting: bool,
    /// Queue marks (`--queue-mark-key-file`, docs/queueing.md §12): with
    /// keys, a create that must wait is queued by a signed mark on the
    /// object and counted in `marked` until a status shows it; None: the
    /// quota's status holds every entry.
    pub marks: Option<Arc<queue_mark::MarkKeys>>,
    /// `--queue-mark-drain`: with `marks`, fold the marks already placed
    /// but sign none, and keep every entry in the status (`signing_keys`,
    /// `bound_queue`).
    pub mark_drain: bool,
    /// Per quota, the entries this replica marked that no status it read
    /// shows yet, checked and added under the lock (`quota::queue::pending`).
    /// Each quota's under its own lock, so reviews for one quota do not
    /// hold up another's.
    #[allow(clippy::type_complexity)]
    pub marked: Arc<
        std::sync::Mutex<HashMap<String, Arc<std::sync::Mutex<quota::queue::pending::Pending>>>>,
    >,
    /// Per quota, with marks on: the marks its folds accepted lately, by
    /// their text (`quota::queue::mark::Memo`), so a round reads and
    /// verifies a held object's mark once, not every round. Taken out
    /// while a fold uses it; dropped with the quota's last marked object.
    pub mark_memo: Arc<std::sync::Mutex<HashMap<String, quota::queue::mark::Memo>>>,
    /// When this replica's controller last judged its pending marks by its
    /// watch (`forget_marked`); long ago on a replica that runs no rounds,
    /// whose webhook then forgets them by time alone.
    pub marks_judged_at: Arc<std::sync::atomic::AtomicI64>,
    /// Per quota, with marks on: the whole queue as this replica's last
    /// round wrote it (its status lists only the top,
    /// `quota::queue::summary`), so the webhook's caps and positions count
    /// the marked objects the watch showed then
    /// (`quota::queue::pending::Pending::copy_entries`).
    /// Only on the replica that runs the rounds.
    pub rounds_queue: Arc<std::sync::Mutex<HashMap<String, Arc<RoundCopy>>>>,
    /// Releases a DELETE left to the background, one per (quota, workload).
    deferred: Arc<std::sync::Mutex<BTreeSet<(String, String)>>>,
    clock: Clock,
    locks: Arc<NameLocks>,
    /// Last version written or read by this process, per quota. Used only
    /// as the starting point of a compare-and-swap: a stale entry loses the
    /// swap and is re-read, so no decision is committed on stale data.
    cache: Arc<Cache>,
    /// Admissions waiting for their quota's next group commit (`group`).
    queues: Arc<group_commit::Queues>,
    /// The runtime the service was made on (the admissions'), where every
    /// group commit's leader runs, whoever started it: a leader the
    /// controller's niced runtime started would otherwise serve the
    /// webhooks' admissions to that quota from a niced thread
    /// (`lib::SideRuntime`). None outside a runtime: the caller's.
    leaders_on: Option<tokio::runtime::Handle>,
    /// Quotas another replica writes too (`group_commit::Contended`).
    contended: Arc<group_commit::Contended>,
    /// The forest the pages read, refreshed by what changed (`forest`).
    forest: Arc<forest::ForestCache>,
    /// Where the forest's reads over every quota go (`with_bulk_store`:
    /// the background's connections); `store` when not set.
    bulk: Option<Arc<dyn QuotaStore>>,
    /// Where a page reads the one quota it shows (`with_view_store`: the
    /// portal's connections); `store` when not set.
    view: Option<Arc<dyn QuotaStore>>,
}

/// Whether a quota object is written here (standalone API) or by the API
/// server after our admission answer (webhook).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persist {
    Here,
    ByApiServer,
}

impl Service {
    pub fn new(
        store: Arc<dyn QuotaStore>,
        keys: KeyConfig,
        prices: QosMultipliers,
        metrics: Arc<Metrics>,
    ) -> Service {
        Service {
            store,
            keys,
            prices,
            price_book: Default::default(),
            metrics,
            accrue_from_ledger: true,
            events: Arc::new(notify::Nowhere),
            changed: Default::default(),
            recheck: Default::default(),
            service_account: String::new(),
            priorities: Arc::new(queue::NoClasses),
            queueing: false,
            queue_fitting: false,
            marks: None,
            mark_drain: false,
            marked: Default::default(),
            mark_memo: Default::default(),
            marks_judged_at: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
            rounds_queue: Default::default(),
            deferred: Default::default(),
            clock: Arc::new(now_ms),
            locks: Default::default(),
            cache: Default::default(),
            queues: Default::default(),
            leaders_on: tokio::runtime::Handle::try_current().ok(),
            contended: Default::default(),
            forest: Default::default(),
            bulk: None,
            view: None,
        }
    }

    /// The same database through the portal's connections
    /// (`SqlStore::portal`), for the quota a page shows (`get_for_view`):
    /// read there, not through the one SQLite writer admissions commit on.
    pub fn with_view_store(mut self, view: Arc<dyn QuotaStore>) -> Service {
        self.view = Some(view);
        self
    }

    /// The same database through other connections, for the forest's
    /// reads over every quota (`SqlStore::background`), so a sweep or a
    /// page over 10,000 quotas never waits for, or holds, a connection
    /// an admission needs.
    pub fn with_bulk_store(mut self, bulk: Arc<dyn QuotaStore>) -> Service {
        self.bulk = Some(bulk);
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Service {
        self.clock = clock;
        self
    }

    /// bizrq's own identity as the API server names it in reviews: its
    /// create tokens are honoured only from it.
    pub fn with_service_account(mut self, name: String) -> Service {
        self.service_account = name;
        self
    }

    /// Where PriorityClasses are read (cluster mode: the API server).
    pub fn with_priorities(mut self, p: Arc<dyn queue::PriorityLookup>) -> Service {
        self.priorities = p;
        self
    }

    /// Where notices go (cluster mode: Kubernetes Events).
    pub fn with_notifier(mut self, events: Arc<dyn notify::Notifier>) -> Service {
        self.events = events;
        self
    }

    /// Cluster mode: a controller admits from the queues, so work that
    /// does not fit may queue.
    pub fn with_queueing(mut self) -> Service {
        self.queueing = true;
        self
    }

    /// Queue by signed marks on the objects (docs/queueing.md §12).
    pub fn with_queue_marks(mut self, keys: Option<Arc<queue_mark::MarkKeys>>) -> Service {
        self.marks = keys;
        self
    }

    /// Drain queue marks (`--queue-mark-drain`, docs/queueing.md §12):
    /// marks are folded, none signed, every entry kept in the status.
    pub fn with_queue_mark_drain(mut self, drain: bool) -> Service {
        self.mark_drain = drain;
        self
    }

    /// With marks, hold a create that fits for the next round
    /// (`--queue-fitting-creates`, docs/queueing.md §10).
    pub fn with_queue_fitting(mut self, on: bool) -> Service {
        self.queue_fitting = on;
        self
    }

    /// The keys a new mark is signed with: none without marks, and none
    /// while draining them (a create that must wait goes to the status).
    pub fn signing_keys(&self) -> Option<Arc<queue_mark::MarkKeys>> {
        self.marks.clone().filter(|_| !self.mark_drain)
    }

    /// Cluster mode: pods are seen, so cash accrues from their run time
    /// (by the controller), not from the charge ledger.
    pub fn with_accrual_from_pods(mut self) -> Service {
        self.accrue_from_ledger = false;
        self
    }

    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// The price list in force: accrual cuts at its changes, reservations
    /// assume its highest price over their run. Without one every weight
    /// is 1 (a card-hour costs its QoS multiplier, `--price-*`).
    pub fn price_list(&self) -> Arc<quota::budget::PriceList> {
        self.price_book.current().list.clone()
    }

    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    /// What the tree and the overview price a budget's burn at: the QoS
    /// multipliers and the price list in force, now.
    pub fn pricing(&self) -> quota::forecast::Pricing {
        quota::forecast::Pricing {
            qos: self.prices,
            list: self.price_list(),
            now_ms: self.now(),
        }
    }

    async fn lock(&self, name: &str) -> NameGuard {
        self.locks.lock(name).await
    }

    /// `name`'s children as the store lists them (a cluster store: its
    /// watch cache, which `caught_up_to` waits for).
    pub async fn children(&self, name: &str) -> Result<Vec<Stored>, ServiceError> {
        Ok(self.store.children(name).await?)
    }

    /// Waits (bounded) until the store's lists hold every write up to
    /// `version` (`QuotaStore::caught_up_to`); whether they do.
    pub async fn caught_up_to(&self, version: i64) -> bool {
        self.store.caught_up_to(version).await
    }

    /// Whether the store answers (readiness).
    pub async fn ping(&self) -> Result<(), ServiceError> {
        Ok(self.store.ping().await?)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(quota = name))]
    pub async fn get(&self, name: &str) -> Result<Stored, ServiceError> {
        self.store
            .get(name)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("bizrq {name} not found")))
    }

    /// `name` as recently as this replica knows it with no request: the
    /// newer of its own copy (what it last wrote or read) and the store's
    /// feed (the watch's copy, with every replica's writes it delivered);
    /// read fresh when the feed does not show it, and always on a store
    /// with no feed (SQL, where a read is local). Possibly behind the store by the
    /// watch's lag: only for a decision an old copy cannot make unsafe, as
    /// the mutating webhook's choice between "charge now" and "queue" for
    /// a create (the charge itself is a compare-and-swap that reads again
    /// when it loses; a queued create is admitted by the next round).
    pub async fn recent(&self, name: &str) -> Result<Arc<Stored>, ServiceError> {
        match self.newest_known(name) {
            (Some(c), true) => Ok(c),
            _ => self.get(name).await.map(Arc::new),
        }
    }

    /// `name` as stored now, as a whole read would give it, for a queue
    /// round that plans on it and writes over it: the newest copy this
    /// process holds (its own, or the store's feed), proven current by the
    /// version and uid read fresh with the metadata alone
    /// (`cache::prove`), or the newer copy the feed already holds for the
    /// version read; else read whole (counted as `round`). A round read
    /// every quota it ran for whole, and most copies it read were the one
    /// the feed held.
    pub async fn proven(&self, name: &str) -> Result<Stored, ServiceError> {
        let kept = match self.newest_known(name) {
            (Some(kept), true) => Some(kept),
            _ => None,
        };
        self.proven_from(name, kept).await
    }

    /// `proven`, on `kept`, the newest copy the caller already took (its
    /// `Service::recent`); None: read whole.
    pub async fn proven_from(
        &self,
        name: &str,
        kept: Option<Arc<Stored>>,
    ) -> Result<Stored, ServiceError> {
        if let Some(kept) = kept {
            match cache::prove(&*self.store, name, &kept).await {
                cache::Proof::Current => return Ok(Arc::unwrap_or_clone(kept)),
                cache::Proof::Newer(n, _) => return Ok(Arc::unwrap_or_clone(n)),
                cache::Proof::Read => {}
            }
            self.metrics.count_quota_reread(Reread::Round);
        }
        self.get(name).await
    }

    /// `name` as stored, for a page that shows it (`with_view_store`): a
    /// committed snapshot, never a version to write on.
    pub async fn get_for_view(&self, name: &str) -> Result<Stored, ServiceError> {
        self.view
            .as_ref()
            .unwrap_or(&self.store)
            .get(name)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("bizrq {name} not found")))
    }

    /// `name` as of now: in standalone mode with its cash accrued (and its
    /// ended budget periods closed) up to `now` on a copy, as the next
    /// decision would see it; in cluster mode as stored (the controller
    /// accrues from pods).
    pub async fn current(&self, name: &str) -> Result<Quota, ServiceError> {
        let stored = self.get(name).await?;
        Ok(working_copy(
            &stored,
            self.accrue_from_ledger,
            self.now(),
            &self.prices,
            &self.price_list(),
        ))
    }

    /// Every quota, fresh from the store, by name.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list(&self) -> Result<Vec<Quota>, ServiceError> {
        Ok(self
            .store
            .list()
            .await?
            .into_iter()
            .map(|s| s.quota)
            .collect())
    }

    /// The subtrees under `roots` (roots included), read without the rest
    /// of the forest (`QuotaStore::subtrees`), for what a person is shown:
    /// on the view store (`with_view_store`) like `get_for_view`. Every
    /// member's page, badge and API call reads its subtrees; on the
    /// admissions' read connections that was most of their work beside
    /// the heaviest pages (docs/limits.md, "What the portal shared").
    pub async fn subtrees(&self, roots: &[String]) -> Result<Vec<Quota>, ServiceError> {
        Ok(self
            .view
            .as_ref()
            .unwrap_or(&self.store)
            .subtrees(roots)
            .await?
            .into_iter()
            .map(|s| s.quota)
            .collect())
    }

    /// Read-modify-write of one quota's status with compare-and-swap. `f`
    /// says whether it changed anything; a dry run never writes. Conflicts
    /// re-read and retry with jittered backoff, at most `MAX_ATTEMPTS` times.
    pub async fn update_status<T>(
        &self,
        name: &str,
        dry_run: bool,
        f: impl FnMut(&mut Quota) -> Result<(bool, T), ServiceError>,
    ) -> Result<T, ServiceError> {
        self.modify(name, dry_run, None, f).await
    }

    /// `update_status` for a controller that acts on its watch, as a
    /// Kubernetes controller acts on its informer's cache: the decision is
    /// made on the newest copy this replica knows (its own writes, and the
    /// store's feed of everyone's), and one that writes nothing stands
    /// without a fresh read. That is safe where every version another
    /// writer stores reaches the caller again through the same feed (the
    /// controller reconciles each such version: a decision on a copy the
    /// feed had not caught up with is made again on the newer one). A
    /// store with no feed is read fresh, as `update_status` does. The
    /// reconcile's "nothing to change" was a whole read of the quota on
    /// most reconciles (docs/benchmarks.md, Kueue's baseline).
    ///
    /// `stands(out)`: whether a decision that writes nothing may stand on
    /// such a copy. One that acts beyond the status (suspends workloads,
    /// weighs reclaim) is proven by a fresh read first, as before: a later
    /// reconcile corrects a status, not a suspension.
    pub async fn update_status_watched<T>(
        &self,
        name: &str,
        stands: impl Fn(&T) -> bool + Sync,
        mut f: impl FnMut(&mut Quota) -> Result<(bool, T), ServiceError>,
    ) -> Result<T, ServiceError> {
        self.modify_as(name, false, None, Some(&stands), |_, q| f(q))
            .await
    }

    /// The one compare-and-swap loop. `f` may change spec (written with
    /// status) or only status (the status subresource). With
    /// `expected_version` the caller's version must still be current and a
    /// conflict is returned instead of retried.
    pub(crate) async fn modify<T>(
        &self,
        name: &str,
        dry_run: bool,
        expected_version: Option<i64>,
        mut f: impl FnMut(&mut Quota) -> Result<(bool, T), ServiceError>,
    ) -> Result<T, ServiceError> {
        self.modify_as(name, dry_run, expected_version, None, |_, q| f(q))
            .await
    }

    /// `update_status`, `f` also given the stored copy its working copy was
    /// made from (a caller that computed part of the change on that very
    /// version outside the write may use it there instead of computing it
    /// again: `Service::admit_round`). With the write, if it wrote: the
    /// version it was made on and the one it stored.
    pub(crate) async fn update_status_stamped<T>(
        &self,
        name: &str,
        f: impl FnMut(&Stored, &mut Quota) -> Result<(bool, T), ServiceError>,
    ) -> Result<(T, Option<Written>), ServiceError> {
        self.modify_written(name, false, None, None, true, f).await
    }

    async fn modify_as<T>(
        &self,
        name: &str,
        dry_run: bool,
        expected_version: Option<i64>,
        watched: Option<&(dyn Fn(&T) -> bool + Sync)>,
        f: impl FnMut(&Stored, &mut Quota) -> Result<(bool, T), ServiceError>,
    ) -> Result<T, ServiceError> {
        self.modify_written(name, dry_run, expected_version, watched, false, f)
            .await
            .map(|(out, _)| out)
    }

    /// `modify`; with `watched`: decide on the newest copy this replica
    /// knows and let a decision that writes nothing stand on it where
    /// `watched(out)` says it may, when the store has a feed
    /// (`update_status_watched`).
    async fn modify_written<T>(
        &self,
        name: &str,
        dry_run: bool,
        expected_version: Option<i64>,
        watched: Option<&(dyn Fn(&T) -> bool + Sync)>,
        stamped: bool,
        mut f: impl FnMut(&Stored, &mut Quota) -> Result<(bool, T), ServiceError>,
    ) -> Result<(T, Option<Written>), ServiceError> {
        let _guard = self.lock(name).await;
        let mut use_cache = expected_version.is_none();
        // Why the next attempt reads the quota whole, if it does.
        let mut why = match expected_version {
            Some(_) => Reread::Versioned,
            None => Reread::Uncached,
        };
        // After a lost compare-and-swap, the newer version as the feed
        // brought it: the next attempt decides on it with no read
        // (`cache::newer_after_conflict`, once per call).
        let mut newer: Option<Arc<Stored>> = None;
        let mut asked_feed = false;
        // A copy of at least this version is proven current
        // (`cache::Proof`).
        let mut proven_from: Option<i64> = None;
        for attempt in 1..=MAX_ATTEMPTS {
            let (cached, fed) = match (newer.take(), use_cache) {
                (Some(n), _) => (Some(n), true),
                (None, false) => (None, false),
                (None, true) if watched.is_some() => self.newest_known(name),
                (None, true) => (self.cached(name), false),
            };
            let from_cache = cached.is_some();
            let current = match cached {
                Some(c) => c,
                None => {
                    self.metrics.count_quota_reread(why);
                    let fresh = Arc::new(self.get(name).await.inspect_err(|_| self.forget(name))?);
                    self.remember(fresh.clone());
                    fresh
                }
            };
            check_version(name, expected_version, current.version)?;
            let mut q = working_copy(
                &current,
                self.accrue_from_ledger,
                self.now(),
                &self.prices,
                &self.price_list(),
            );
            // A refusal, or a decision that writes nothing, has no swap to
            // prove the cached copy current: its version read fresh proves
            // it, or the decision is made again on the newer copy the feed
            // already holds, or on a fresh read (`cache::prove`).
            let decided = f(&current, &mut q);
            let writes = !dry_run && matches!(decided, Ok((true, _)));
            if !writes && from_cache && proven_from.is_none_or(|v| current.version < v) {
                let stands = matches!(&decided, Ok((_, out))
                    if fed && !dry_run && watched.is_some_and(|w| w(out)));
                if !stands {
                    match cache::prove(&*self.store, name, &current).await {
                        cache::Proof::Current => {}
                        cache::Proof::Newer(s, v) => {
                            self.remember(s.clone());
                            newer = Some(s);
                            proven_from = Some(v);
                            continue;
                        }
                        cache::Proof::Read => {
                            use_cache = false;
                            why = Reread::Unproven;
                            continue;
                        }
                    }
                }
            }
            let (changed, out) = decided?;
            if !changed || dry_run {
                return Ok((out, None));
            }
            let written = write_over(
                &*self.store,
                &self.cache,
                &self.changed,
                self.now(),
                &current,
                q,
            )
            .await;
            match written {
                // Only a caller that asks is told (no copy of the name and
                // uid on every admission's write).
                Ok(version) if !stamped || version == current.version => return Ok((out, None)),
                Ok(version) => {
                    let on = crate::store::Stamp::of(&current);
                    let now = crate::store::Stamp {
                        version,
                        ..on.clone()
                    };
                    return Ok((out, Some(Written { on, now })));
                }
                Err(StoreError::Conflict(_)) if expected_version.is_none() => {
                    self.metrics.cas_conflicts.inc();
                    // Another writer stored a newer version: decided on it
                    // as the feed brings it, the write is again a
                    // compare-and-swap.
                    newer = cache::newer_after_conflict(
                        &*self.store,
                        name,
                        current.version,
                        &mut asked_feed,
                        from_cache,
                        attempt,
                    )
                    .await;
                    if newer.is_some() {
                        continue;
                    }
                    why = Reread::Conflict;
                    // The feed's copy lost: it lags the store, and would
                    // lose again. Decide again on a fresh read.
                    if fed {
                        use_cache = false;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.metrics.cas_exhausted.inc();
        Err(ServiceError::Contention(name.to_string()))
    }

    /// Load every quota into the cache, so the first admission against a
    /// quota does not pay for a read. Returns how many.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn warm_cache(&self) -> Result<usize, ServiceError> {
        let all = self.store.list().await?;
        let n = all.len();
        for s in &all {
            self.remember(Arc::new(s.clone()));
        }
        // The forest too, from the same read: the first sweep and sample
        // after start then read only what was written since.
        self.seed_forest(all).await;
        Ok(n)
    }

    /// Every quota as this process last wrote or read it (all of them
    /// after `warm_cache`; another replica's newer writes may be missing).
    pub fn cached_quotas(&self) -> Vec<Arc<Stored>> {
        self.cache.all()
    }

    /// The copy of `name` this process last wrote or read, if any: possibly
    /// stale, so only for a decision that is safe on an old copy.
    pub fn cached_quota(&self, name: &str) -> Option<Arc<Stored>> {
        self.cached(name)
    }

    /// Whether this process wrote `version` of `name` (one of its last
    /// few writes of it): its watch event is then the echo of our own
    /// write. A version only read is not: a read by an admission, or by a
    /// reconcile that decided on an earlier clock, must not hide someone
    /// else's change from the controller.
    pub fn wrote(&self, name: &str, version: i64) -> bool {
        self.cache.wrote(name, version)
    }

    /// The uid of a quota this replica has seen (cluster mode), for Events.
    pub fn cached_uid(&self, name: &str) -> Option<String> {
        self.cached(name).and_then(|s| s.quota.metadata.uid.clone())
    }

    fn cached(&self, name: &str) -> Option<Arc<Stored>> {
        self.cache.get(name)
    }

    /// The copy of `name` that `update_status_watched` decides on first
    /// (`newest_known`), if any: possibly stale.
    pub(crate) fn newest_quota(&self, name: &str) -> Option<Arc<Stored>> {
        self.newest_known(name).0
    }

    /// The newer of this process's copy of `name` and the store's feed's,
    /// with no request, and whether the store has a feed that shows it
    /// (`recent` and `update_status_watched` both decide on it). The
    /// feed's copy is not kept as this process's: only what this process
    /// read fresh or wrote is.
    fn newest_known(&self, name: &str) -> (Option<Arc<Stored>>, bool) {
        let copy = self.cached(name);
        match self.store.watched(name, copy.as_ref().map(|c| c.version)) {
            Watched::Newer(s) => (Some(Arc::new(*s)), true),
            Watched::NotNewer => (copy, true),
            Watched::NoFeed | Watched::Missing => (copy, false),
        }
    }

    fn remember(&self, stored: Arc<Stored>) {
        self.cache.remember(stored)
    }

    fn forget(&self, name: &str) {
        self.cache.forget(name)
    }

    // ---- quota objects -------------------------------------------------

    // ---- workloads -----------------------------------------------------

    // ---- resync --------------------------------------------------------
}

/// A write of a quota: the version it was made on and the one it stored
/// (`Service::update_status_stamped`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub on: crate::store::Stamp,
    pub now: crate::store::Stamp,
}

impl Written {
    /// `self` then `next`: one write from the first's version to the
    /// last's where each was made on the one before, else the last alone.
    pub fn then(self, next: Option<Written>) -> Written {
        match next {
            Some(n) if n.on == self.now => Written {
                on: self.on,
                now: n.now,
            },
            Some(n) => n,
            None => self,
        }
    }
}

/// A caller that named a version must be looking at the current one.
fn check_version(name: &str, expected: Option<i64>, current: i64) -> Result<(), ServiceError> {
    match expected {
        Some(v) if v != current => Err(ServiceError::Conflict(format!(
            "bizrq {name} is at resourceVersion {current}, not {v}; read it again"
        ))),
        _ => Ok(()),
    }
}

async fn backoff(attempt: u32) {
    let base = 1u64 << attempt.min(6);
    let jitter = rand::random::<u64>() % (base + 1);
    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
}

/// The longest name `status.users` may hold, in bytes (the CRD's bound;
/// what is written is the shorter canonical key, `quota::submitters::submitter`).
pub const MAX_USER_LEN: usize = 256;

/// A resource list as a person reads it: `k=v, k=v`.
fn show(list: &ResourceList) -> String {
    let parts: Vec<String> = list.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::Cache;
    use crate::store::Stored;
    use quota::object::{Quota, QuotaSpec};
    use std::sync::Arc;

    fn at(version: i64) -> Arc<Stored> {
        Arc::new(Stored {
            quota: Quota::new("ai", QuotaSpec::default()),
            version,
        })
    }

    /// Only a version this process wrote is an echo the controller may
    /// skip: a version only read (someone else's edit, read by an
    /// admission before its watch event came) must still be reconciled.
    #[test]
    fn only_a_written_version_is_our_own() {
        let c = Cache::default();
        c.remember(at(3));
        assert!(!c.wrote("ai", 3));
        c.remember_written(at(4));
        assert!(c.wrote("ai", 4));
        // Read back unchanged: still ours.
        c.remember(at(4));
        assert!(c.wrote("ai", 4));
        // Someone else's write, read before its event: not ours; ours
        // before it still is (its echo may come after the read).
        c.remember(at(5));
        assert!(!c.wrote("ai", 5));
        assert!(c.wrote("ai", 4));
        assert_eq!(c.get("ai").map(|s| s.version), Some(5));
        // Written again and again before the echoes come: each is ours,
        // the last `WRITTEN_KEPT` of them.
        for v in 6..6 + super::cache::WRITTEN_KEPT as i64 {
            c.remember_written(at(v));
        }
        assert!(c.wrote("ai", 6) && c.wrote("ai", 5 + super::cache::WRITTEN_KEPT as i64));
        assert!(!c.wrote("ai", 4));
        c.forget("ai");
        assert!(!c.wrote("ai", 6));
    }

    /// A round's writes (a fence, then its admissions) are one write from
    /// the first's version to the last's only where each was made on the
    /// one before.
    #[test]
    fn writes_made_one_on_another_are_one_write() {
        let s = |version| crate::store::Stamp {
            name: "ai".into(),
            version,
            uid: "u".into(),
        };
        let w = |on, now| super::Written {
            on: s(on),
            now: s(now),
        };
        assert_eq!(w(3, 4).then(Some(w(4, 5))), w(3, 5));
        assert_eq!(w(3, 4).then(None), w(3, 4));
        assert_eq!(
            w(3, 4).then(Some(w(6, 7))),
            w(6, 7),
            "another wrote between"
        );
    }
}

#[cfg(test)]
mod borrow_rounds {
    use super::workloads::{BorrowRounds, BORROW_ROUNDS, FENCE_ROUNDS};

    /// A parent's ask for a fence does not use up a round of the
    /// admission: a cut (ask, fence, ask again) met by another grant of
    /// the same child (a second fence) still leaves rounds to charge; and
    /// fences without end stop after `FENCE_ROUNDS`.
    #[test]
    fn a_fence_asked_first_takes_no_round_until_fences_run_out() {
        let mut r = BorrowRounds::default();
        r.done(true);
        r.done(true);
        let mut charged = 0;
        while r.more() {
            r.done(false);
            charged += 1;
        }
        assert_eq!(charged, BORROW_ROUNDS, "two fences left every round");

        let mut r = BorrowRounds::default();
        let mut spent = 0;
        while r.more() {
            r.done(true);
            spent += 1;
        }
        assert_eq!(spent, FENCE_ROUNDS + BORROW_ROUNDS, "bounded");
    }
}
