//! The service layer: the one way in. The JSON API, the webhook, the portal
//! and the resync loop all change quotas through these methods, which apply
//! the `quota` crate's rules and write with compare-and-swap and retries.
//!
//! # Child quotas and their carve-outs
//!
//! A parent's status holds one carve-out per child (`status.children`);
//! `parent.used = selfUsed + Σ carve-outs`, and a child's create or raise
//! must fit in `hard − used`. The invariant: **a carve-out is never below
//! what its stored child holds** (unless the child was written past the
//! webhook, which the repair then records as over quota). A child write
//! the webhook allows may still never be stored — a finalizer keeps a
//! deleted child, a later webhook refuses, two writes race on one
//! resourceVersion, a write is lost — so nothing that frees room is done
//! on the strength of a review or of a write in flight. Room is taken
//! before a write, and given back only after the stored child shows it.
//!
//! 1. **Create** (`create_quota`): the name must be free; the child's hard
//!    is carved under a token (fit-checked compare-and-swap on the
//!    parent), then the object is created carrying the token
//!    (`CREATE_TOKEN_ANNOTATION`). Its review finds the carve-out under
//!    that token and passes. The annotation is honoured only when the
//!    review names bizrq's own identity (`Service::service_account`):
//!    anyone else's create carves under its review's uid, so a copied token
//!    neither takes over nor resizes bizrq's create in flight, and a create
//!    under a token asking another size than was carved is refused. A
//!    failed create returns the carve-out only if it is still under its
//!    token.
//! 2. **Change** (`update_quota`): raise first. The carve-out becomes, key
//!    by key, the larger of itself and the new hard (`tree::carve_raise`;
//!    a raise of the child renews its `since`), both before bizrq's own
//!    write and in every review. A review never lowers. After bizrq's own
//!    write, done or failed, a fresh read of the child settles the
//!    carve-out (`tree::settle_carve`): lowered to the stored hard if no
//!    other raise was carved since its own step, else as the repair would.
//! 3. **Delete** (`delete_quota`): the review checks the rules and frees
//!    nothing. bizrq's own delete returns the carve-out once a fresh read
//!    shows the child gone (not terminating), and only the carve-out it saw
//!    before (a name created again carves under a token of its own). A
//!    delete by anyone else is seen by the controller's quota watch:
//!    `release_gone` returns the carve-out made under the deleted object's
//!    token, and the parent's repair any other once it is not young.
//! 4. **Repair** (`quota::tree::repair_carves`, run by the controller and
//!    the standalone resync): each carve-out follows its stored child; a
//!    carve-out younger than `CARVE_TTL_MS` is only raised (a write may be
//!    in flight behind it), an older one is set to the child's hard, and
//!    one whose child is gone is returned.
//!
//! Windows. A crash between a carve-out and its write leaves room taken,
//! not given: the repair returns it after `CARVE_TTL_MS`. A write refused
//! or failed after its raise settles it as one that succeeded does; a
//! raise another writer's raise followed, one whose write's fate is
//! unknown (`Unavailable`), or one lost with a crash, stays
//! (never set back to a value read before another writer's): the repair
//! lowers it to the stored child once it is old. A lowering waits, at worst, for the window of a recent raise.
//! A child deleted by anyone but bizrq within `CARVE_TTL_MS` of its own
//! kubectl create keeps its carve-out until the repair after the window
//! (its name is refused meanwhile, as for a create in flight). In every
//! window the parent's used counts at least what its children hold, so a
//! sibling can never be carved room a child still holds.

pub mod alert_ops;
pub mod audit;
pub mod changed;
pub mod changes;
pub mod charts;
pub mod forest;
mod group;
pub mod notify;
pub mod prices;
pub mod queue;
pub mod queue_mark;
pub mod shares;
pub mod transfer_ops;
pub mod transfers;
pub mod working;

use crate::metrics::Metrics;
use crate::store::{QuotaStore, StoreError, Stored, Watched, WorkloadAt};
use crate::util::{new_uid, now_ms};
use axum::http::StatusCode;
use quota::admission::{self, Denial};
use quota::borrow;
use quota::budget::hold::{self, RunDecl};
use quota::cash::Prices;
use quota::object::{Charge, HpaCharge, Quota, QuotaSpec};
use quota::resources::ResourceList;
use quota::transfer::TransferError;
use quota::tree::{self, TreeError};
use quota::workload::PodSet;
use quota::KeyConfig;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// Compare-and-swap attempts before giving up (fail closed). Within one
/// process writers of a quota are queued by a lock, so conflicts only come
/// from other replicas.
pub const MAX_ATTEMPTS: u32 = 12;
pub use quota::tree::CARVE_TTL_MS;
/// The annotation by which a quota bizrq creates itself names its create:
/// for a child, the carve-out made in the parent (the parent's
/// `status.children[name].uid`).
/// In cluster mode the API server sends that create back to bizrq's own
/// webhook, possibly on another replica: the token tells the webhook that
/// the carve-out is this create's, not a concurrent one's (docs/cluster-mode.md).
pub const CREATE_TOKEN_ANNOTATION: &str = "bizrq.io/create-token";
/// Borrowing admissions: rounds of (lend in the parent, charge the child).
const BORROW_ROUNDS: usize = 3;
/// Rounds a borrowing admission may spend, beyond `BORROW_ROUNDS`, on a
/// parent's ask to fence a grant before it cuts the loan
/// (`borrow::Lending::FenceFirst`): such a round decides nothing, and a
/// cut takes one (ask, fence and ask again, charge), so with three rounds
/// in all a grant made meanwhile (another admission of the same child)
/// left none for the charge.
const FENCE_ROUNDS: usize = 3;

/// The rounds of one borrowing admission (a direct one or a queue round).
#[derive(Default)]
pub(crate) struct BorrowRounds {
    asked: usize,
    fenced: usize,
}

impl BorrowRounds {
    /// Whether another round may run.
    pub(crate) fn more(&self) -> bool {
        self.asked < BORROW_ROUNDS
    }

    /// A round ended; `fence` when the parent asked for a fence first,
    /// which counts against `FENCE_ROUNDS` while any are left.
    pub(crate) fn done(&mut self, fence: bool) {
        if fence && self.fenced < FENCE_ROUNDS {
            self.fenced += 1;
        } else {
            self.asked += 1;
        }
    }
}
/// How many times a loan's return meets a grant made after its fence
/// before it is left to the parent's repair.
const RETURN_ROUNDS: usize = 3;

#[derive(Clone, Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Denied(#[from] Denial),
    #[error(transparent)]
    Tree(TreeError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    BadRequest(String),
    #[error(
        "bizrq {0}: too many concurrent changes, gave up after {MAX_ATTEMPTS} attempts; try again"
    )]
    Contention(String),
    /// The API server refused a write: an admission webhook's denial, or
    /// its own authorisation.
    #[error("{0}")]
    Refused(String),
    /// A dependency cannot answer now (the API server, or its call to an
    /// admission webhook); trying again later may succeed.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

/// Seconds a client should wait before retrying after `Contention`: the
/// writers it lost to finish within milliseconds.
pub const CONTENTION_RETRY_SECS: u64 = 1;

impl ServiceError {
    /// The one table from a service error to an HTTP status and a reason,
    /// used by the JSON API, the portal's pages and the webhook's verdicts
    /// (docs/errors.md). `Internal` details are logged by the edges, never
    /// sent.
    pub fn status(&self) -> (StatusCode, &'static str) {
        match self {
            ServiceError::Denied(_) => (StatusCode::FORBIDDEN, "QuotaExceeded"),
            ServiceError::Tree(_) => (StatusCode::UNPROCESSABLE_ENTITY, "TreeRule"),
            ServiceError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            ServiceError::AlreadyExists(_) => (StatusCode::CONFLICT, "AlreadyExists"),
            ServiceError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
            ServiceError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            ServiceError::Contention(_) => (StatusCode::TOO_MANY_REQUESTS, "Contention"),
            // The API server refused one of bizrq's own writes (another
            // webhook, RBAC): in its words, as a refusal.
            ServiceError::Refused(_) => (StatusCode::FORBIDDEN, "Refused"),
            // The API server could not reach the admission webhook.
            ServiceError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "Unavailable"),
            ServiceError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Internal"),
        }
    }

    /// Seconds to wait before trying again, for the errors that pass.
    pub fn retry_after(&self) -> Option<u64> {
        matches!(self, ServiceError::Contention(_)).then_some(CONTENTION_RETRY_SECS)
    }
}

impl From<TreeError> for ServiceError {
    fn from(e: TreeError) -> Self {
        match e {
            // Not a broken rule: the change must wait for a transfer.
            TreeError::Held { .. } => ServiceError::Conflict(e.to_string()),
            // A request over a limit: 400 naming it, as the API's other
            // bounds answer.
            TreeError::TooManyKeys { .. }
            | TreeError::TooWide { .. }
            | TreeError::TooDeep { .. } => ServiceError::BadRequest(e.to_string()),
            e => ServiceError::Tree(e),
        }
    }
}

impl From<TransferError> for ServiceError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::NotFound(n) => ServiceError::NotFound(format!("bizrq {n} not found")),
            TransferError::DoesNotFit(short) => ServiceError::Denied(Denial::Short(short)),
            TransferError::Held { .. }
            | TransferError::InFlux { .. }
            | TransferError::Moved(_)
            | TransferError::NotHeld { .. } => ServiceError::Conflict(e.to_string()),
            TransferError::Invalid(_)
            | TransferError::MissingKey { .. }
            | TransferError::Insufficient { .. } => ServiceError::BadRequest(e.to_string()),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(n) => ServiceError::NotFound(format!("bizrq {n} not found")),
            StoreError::AlreadyExists(n) => {
                ServiceError::AlreadyExists(format!("bizrq {n} already exists"))
            }
            StoreError::Conflict(n) => ServiceError::Conflict(format!(
                "bizrq {n} was changed by someone else; read it again"
            )),
            StoreError::Backend(m) => ServiceError::Internal(m),
            StoreError::Refused(e) => *e,
        }
    }
}

pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

pub struct Service {
    pub store: Arc<dyn QuotaStore>,
    pub keys: KeyConfig,
    pub prices: Prices,
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
    pub marked: Arc<std::sync::Mutex<HashMap<String, quota::queue::pending::Pending>>>,
    /// When this replica's controller last judged its pending marks by its
    /// watch (`forget_marked`); long ago on a replica that runs no rounds,
    /// whose webhook then forgets them by time alone.
    pub marks_judged_at: Arc<std::sync::atomic::AtomicI64>,
    /// Per quota, with marks on: the whole queue as this replica's last
    /// round wrote it (its status lists only the top,
    /// `quota::queue::summary`), so the webhook's caps and positions count
    /// the marked objects the watch showed then (`Service::whole_queue`).
    /// Only on the replica that runs the rounds.
    pub rounds_queue:
        Arc<std::sync::Mutex<HashMap<String, Arc<Vec<quota::object::queue::QueueEntry>>>>>,
    /// Releases a DELETE left to the background, one per (quota, workload).
    deferred: Arc<std::sync::Mutex<BTreeSet<(String, String)>>>,
    clock: Clock,
    locks: Arc<NameLocks>,
    /// Last version written or read by this process, per quota. Used only
    /// as the starting point of a compare-and-swap: a stale entry loses the
    /// swap and is re-read, so no decision is committed on stale data.
    cache: Arc<Cache>,
    /// Admissions waiting for their quota's next group commit (`group`).
    queues: Arc<group::Queues>,
    /// Quotas another replica writes too (`group::Contended`).
    contended: Arc<group::Contended>,
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
        prices: Prices,
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
            marks: None,
            mark_drain: false,
            marked: Default::default(),
            marks_judged_at: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
            rounds_queue: Default::default(),
            deferred: Default::default(),
            clock: Arc::new(now_ms),
            locks: Default::default(),
            cache: Default::default(),
            queues: Default::default(),
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
    pub fn pricing(&self) -> app::tree::Pricing {
        app::tree::Pricing {
            qos: self.prices,
            list: self.price_list(),
            now_ms: self.now(),
        }
    }

    async fn lock(&self, name: &str) -> NameGuard {
        self.locks.lock(name).await
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
        let copy = self.cached(name);
        match (
            self.store.watched(name, copy.as_ref().map(|c| c.version)),
            copy,
        ) {
            (Watched::Newer(s), _) => Ok(Arc::new(*s)),
            (Watched::NotNewer, Some(c)) => Ok(c),
            _ => self.get(name).await.map(Arc::new),
        }
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
        let _guard = self.lock(name).await;
        let mut use_cache = expected_version.is_none();
        for attempt in 1..=MAX_ATTEMPTS {
            let cached = if use_cache { self.cached(name) } else { None };
            let from_cache = cached.is_some();
            let current = match cached {
                Some(c) => c,
                None => {
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
            // prove the cached copy current: decide again on a fresh read.
            let (changed, out) = match f(&mut q) {
                Err(_) if from_cache => {
                    use_cache = false;
                    continue;
                }
                r => r?,
            };
            if !changed || dry_run {
                if from_cache {
                    use_cache = false;
                    continue;
                }
                return Ok(out);
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
                Ok(()) => return Ok(out),
                Err(StoreError::Conflict(_)) if expected_version.is_none() => {
                    self.metrics.cas_conflicts.inc();
                    if !from_cache {
                        backoff(attempt).await;
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

    fn remember(&self, stored: Arc<Stored>) {
        self.cache.remember(stored)
    }

    fn forget(&self, name: &str) {
        self.cache.forget(name)
    }

    // ---- quota objects -------------------------------------------------

    /// Create a quota: rules checked, carved out of the parent first (so two
    /// concurrent children can never both take the last unit), then stored.
    ///
    /// The carve-out carries a token (`token`, or a fresh one): the parent's
    /// `status.children[name].uid`. A create made here writes the token on
    /// the object as `CREATE_TOKEN_ANNOTATION`; in cluster mode the API server
    /// sends that create to the webhook (`Persist::ByApiServer`, with the
    /// annotation as `token`), which finds the carve-out under the same token
    /// and passes it unchanged. A carve-out under another token is another
    /// create's, in flight or crashed (dropped after `CARVE_TTL_MS`).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = name, dry_run = dry_run))]
    pub async fn create_quota(
        &self,
        name: &str,
        spec: QuotaSpec,
        persist: Persist,
        token: &str,
        dry_run: bool,
    ) -> Result<Quota, ServiceError> {
        tree::validate_spec(name, &spec, &self.keys)?;
        // Under review the object is not stored yet; one that is means a
        // second create of the name (the API server admits before it looks).
        if self.store.get(name).await?.is_some() {
            return Err(already_exists(name));
        }
        let token = if token.is_empty() {
            new_uid()
        } else {
            token.to_string()
        };
        if !spec.parent.is_empty() {
            self.check_ancestry(name, &spec.parent).await?;
            let since = quota::time::format_rfc3339(self.now());
            let (hard, child, token2) = (spec.hard.clone(), name.to_string(), token.clone());
            self.update_status(&spec.parent, dry_run, move |p| {
                // One without a token was made by a repair for a child of
                // this name, which is gone (checked above): it is stale.
                if let Some(c) = p.status.children.get(&child) {
                    // The carve-out made for this create is exactly its
                    // hard: a create under its token asking another size
                    // is not the one it was made for.
                    if c.uid == token2 && c.hard != hard {
                        return Err(ServiceError::Conflict(format!(
                            "bizrq {child}: the carve-out in {} under this create's token is {}, \
                             the object asks {}; a create cannot resize it",
                            p.name(),
                            show(&c.hard),
                            show(&hard),
                        )));
                    }
                    if !c.uid.is_empty() && c.uid != token2 {
                        return Err(ServiceError::Conflict(format!(
                            "bizrq {child} is being created by another request, which already \
                             carved it out of {} (since {}); retry once that create is done, or \
                             after {} s if it never finishes",
                            p.name(),
                            c.since,
                            CARVE_TTL_MS / 1000
                        )));
                    }
                }
                let changed = tree::carve(p, &child, &hard, &since)?;
                if let Some(c) = p.status.children.get_mut(&child) {
                    c.uid = token2.clone();
                }
                Ok((changed, ()))
            })
            .await
            .map_err(|e| match e {
                ServiceError::NotFound(_) => TreeError::ParentMissing {
                    child: name.into(),
                    parent: spec.parent.clone(),
                }
                .into(),
                e => e,
            })?;
        }
        let mut quota = Quota::new(name, spec);
        if persist == Persist::ByApiServer || dry_run {
            return Ok(quota);
        }
        quota.metadata.uid = Some(token.clone());
        quota
            .metadata
            .annotations
            .insert(CREATE_TOKEN_ANNOTATION.to_string(), token.clone());
        let before_write = self.now();
        let result = match self.store.create(&quota).await {
            Ok(stored) => Ok(stored),
            // The answer may be lost after the write (a timeout, a retry
            // that met our own object): the object carrying our token is ours.
            Err(e) => match self.store.get(name).await {
                Ok(Some(s)) if created_by(&s.quota, &token) => Ok(s),
                _ => Err(e),
            },
        };
        match result {
            Ok(stored) => {
                self.changed
                    .mark(name, before_write, Some(Arc::new(stored.clone())));
                Ok(stored.quota)
            }
            Err(e) => {
                if !quota.spec.parent.is_empty() {
                    self.uncarve_if_ours(&quota.spec.parent, name, &token).await;
                }
                Err(e.into())
            }
        }
    }

    /// Return `child`'s carve-out to `parent` if it is still the one made
    /// under `token` (a later create of the same name carves under its own).
    async fn uncarve_if_ours(&self, parent: &str, child: &str, token: &str) {
        let res = self
            .update_status(parent, false, |p| {
                let ours = p.status.children.get(child).is_some_and(|c| c.uid == token);
                Ok((ours && tree::uncarve(p, child), ()))
            })
            .await;
        if let Err(e) = res {
            tracing::warn!(parent, child, error = %e, "could not return a carve-out; the resync will");
        }
    }

    /// Parents are immutable and must exist, so a cycle needs bad data; read
    /// the line anyway rather than trust it (`tree::check_ancestry`).
    async fn check_ancestry(&self, name: &str, parent: &str) -> Result<(), ServiceError> {
        let mut forest = quota::lineage::Forest::new([(name, parent)]);
        while let Some(at) = forest.next_unknown(name).map(str::to_string) {
            // A line already past the limit (a store from before it) is
            // not walked to its end: one read per level.
            if forest.len() > tree::MAX_DEPTH {
                return Err(TreeError::TooDeep {
                    name: name.into(),
                    depth: forest.len() + 1,
                }
                .into());
            }
            let Some(p) = self.store.get(&at).await? else {
                break;
            };
            forest.insert(at, p.quota.spec.parent.clone());
        }
        Ok(tree::check_ancestry(name, &forest)?)
    }

    /// Change a quota's spec. Raises are carved out of the parent first;
    /// lowering always passes. `expected_version` makes it a strict
    /// compare-and-swap for the caller; without it, conflicts with status
    /// writes are retried here.
    #[tracing::instrument(level = "debug", skip_all, fields(quota = name, dry_run = dry_run))]
    pub async fn update_quota(
        &self,
        name: &str,
        spec: QuotaSpec,
        expected_version: Option<i64>,
        persist: Persist,
        dry_run: bool,
    ) -> Result<Quota, ServiceError> {
        tree::validate_spec(name, &spec, &self.keys)?;
        let current = self.get(name).await?;
        check_version(name, expected_version, current.version)?;
        let old = current.quota.spec.clone();
        if spec.parent != old.parent {
            return Err(TreeError::ParentImmutable {
                name: name.into(),
                from: old.parent,
                to: spec.parent,
            }
            .into());
        }
        let added: ResourceList = spec
            .hard
            .iter()
            .filter(|(k, _)| !old.hard.contains_key(*k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if !added.is_empty() {
            let children = self.store.children(name).await?;
            let hards: Vec<(&str, &ResourceList)> = children
                .iter()
                .map(|c| (c.quota.name(), &c.quota.spec.hard))
                .collect();
            tree::check_children_cover(name, &added, &hards)?;
        }
        let carved = !old.parent.is_empty() && old.hard != spec.hard;
        let mut carve_before = None;
        if carved {
            // Raise first (see the module doc): never lowered here, as the
            // write may yet be refused or lost.
            let since = quota::time::format_rfc3339(self.now());
            let renew = tree::raises(&old.hard, &spec.hard);
            let (hard, child) = (spec.hard.clone(), name.to_string());
            carve_before = self
                .update_status(&old.parent, dry_run, move |p| {
                    if tree::holder(p, &child).is_some() {
                        // A transfer owns this carve-out until it is done:
                        // only its own planned value passes (in cluster
                        // mode, its spec write comes back here through the
                        // webhook), and the transfer moves the carve-out in
                        // its own order.
                        tree::check_not_held(p, &child, &hard)?;
                        return Ok((false, None));
                    }
                    let changed = tree::carve_raise(p, &child, &hard, renew, &since)?;
                    Ok((changed, p.status.children.get(&child).cloned()))
                })
                .await?;
        }
        if persist == Persist::ByApiServer || dry_run {
            let mut q = current.quota.clone();
            q.spec = spec;
            q.status.refresh(&q.spec);
            return Ok(q);
        }
        let result = self.replace_spec(name, &spec, expected_version).await;
        // The carve-out follows the child as a fresh read shows it stored,
        // whether this write went through or was refused: a raise left
        // behind by a failed write reads to transfers as a change in flight
        // (409) until the repair. It is never set back to a value read
        // before a concurrent writer's: unless it is exactly as this raise
        // left it, it is only lowered once no longer young
        // (`tree::settle_carve`). A write whose fate is unknown (the API
        // server did not answer) may still land: its raise stays for the
        // repair.
        let unknown = matches!(result, Err(ServiceError::Unavailable(_)));
        if carved && !unknown {
            self.settle_carve(&old.parent, name, carve_before).await;
        }
        result
    }

    /// After a spec write of `child`, done or failed: its carve-out in
    /// `parent` follows the child as stored now (`tree::settle_carve`). Best effort:
    /// what is left undone, the repair does.
    async fn settle_carve(&self, parent: &str, child: &str, before: Option<quota::object::Carve>) {
        let stored = match self.store.get(child).await {
            Ok(Some(s)) => s.quota.spec.hard,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(parent, child, error = %e, "could not read a child to settle its carve-out; the repair will");
                return;
            }
        };
        let now = self.now();
        let res = self
            .update_status(parent, false, |p| {
                Ok((
                    tree::settle_carve(p, child, before.as_ref(), &stored, now),
                    (),
                ))
            })
            .await;
        if let Err(e) = res {
            tracing::warn!(parent, child, error = %e, "could not settle a carve-out; the repair will");
        }
    }

    async fn replace_spec(
        &self,
        name: &str,
        spec: &QuotaSpec,
        expected_version: Option<i64>,
    ) -> Result<Quota, ServiceError> {
        self.modify(name, false, expected_version, |q| {
            q.spec = spec.clone();
            q.status.refresh(&q.spec);
            Ok((true, ()))
        })
        .await?;
        Ok(self.get(name).await?.quota)
    }

    /// Delete a leaf and return its carve-out to the parent.
    #[tracing::instrument(level = "debug", skip_all, fields(quota = name, dry_run = dry_run))]
    pub async fn delete_quota(
        &self,
        name: &str,
        expected_version: Option<i64>,
        persist: Persist,
        dry_run: bool,
    ) -> Result<(), ServiceError> {
        let current = self.get(name).await?;
        check_version(name, expected_version, current.version)?;
        let parent = current.quota.spec.parent.clone();
        let children = self.store.children(name).await?;
        tree::check_leaf(&current.quota, children.iter().map(|c| c.quota.name()))?;
        // The token of the carve-out this leaf holds: only that one is
        // returned below (see `uncarve_if_ours`).
        let mut carve_token = None;
        if !parent.is_empty() {
            // A transfer moving quota through this leaf holds its carve-out
            // until it is done; the leaf goes after that.
            if let Some(p) = self.store.get(&parent).await? {
                if let Some(id) = tree::holder(&p.quota, name) {
                    return Err(TreeError::Held {
                        child: name.into(),
                        parent,
                        transfer: id.into(),
                    }
                    .into());
                }
                carve_token = p.quota.status.children.get(name).map(|c| c.uid.clone());
            }
        }
        if dry_run {
            return Ok(());
        }
        if persist == Persist::ByApiServer {
            // The review of a DELETE frees nothing: a finalizer, or a later
            // webhook refusing, may keep the child. Its carve-out goes back
            // when the child is gone (the controller's repair, on the
            // quota's Delete event); a re-check soon confirms the parent.
            if !parent.is_empty() {
                self.recheck.mark(&parent);
            }
            return Ok(());
        }
        {
            let _guard = self.lock(name).await;
            let mut current = current;
            for attempt in 1..=MAX_ATTEMPTS {
                let before_write = self.now();
                match self.store.delete(&current).await {
                    Ok(()) => {
                        self.changed.mark(name, before_write, None);
                        break;
                    }
                    Err(StoreError::Conflict(_))
                        if expected_version.is_none() && attempt < MAX_ATTEMPTS =>
                    {
                        backoff(attempt).await;
                        current = self.get(name).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if !parent.is_empty() {
            // Returned only if a fresh read shows the child gone: in cluster
            // mode a finalizer keeps it terminating, and then the repair
            // returns the carve-out once the API server removes it.
            match self.store.get(name).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    tracing::info!(%parent, child = name, "deleted quota still terminating; its carve-out goes back once it is gone");
                    self.recheck.mark(&parent);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(%parent, child = name, error = %e, "could not confirm a delete; the repair returns the carve-out");
                    self.recheck.mark(&parent);
                    return Ok(());
                }
            }
            // The name may since have been created again with a carve-out
            // of its own: return only the one seen before the delete, or
            // one a repair made (no token) while the leaf still existed.
            let child = name.to_string();
            match self
                .update_status(&parent, false, |p| {
                    let ours = match p.status.children.get(&child) {
                        Some(c) => c.uid.is_empty() || Some(&c.uid) == carve_token.as_ref(),
                        None => true,
                    };
                    if !ours {
                        return Ok((false, ()));
                    }
                    let uncarved = tree::uncarve(p, &child);
                    let unlent = borrow::drop_loan(p, &child);
                    Ok((uncarved || unlent, ()))
                })
                .await
            {
                Ok(()) | Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(%parent, child = name, error = %e, "could not return a carve-out; the resync will")
                }
            }
        }
        Ok(())
    }

    // ---- workloads -----------------------------------------------------

    /// Charge a workload's pod sets to a quota (the difference from what it
    /// holds there), for a workload that declares no run time. Keeps an HPA
    /// reservation already in place.
    pub async fn charge_workload(
        &self,
        quota_name: &str,
        wref: &str,
        pod_sets: Vec<PodSet>,
        uid: &str,
        dry_run: bool,
    ) -> Result<(), ServiceError> {
        let run = RunDecl::Object(Ok(None));
        self.charge_with_run_time(quota_name, wref, pod_sets, run, uid, dry_run)
            .await
    }

    /// `charge_workload` with the run time the workload declares
    /// (`Workload::run_time`): its quota's budgets reserve on it in the
    /// same write as the charge (docs/budgets.md §2, `budget::hold`).
    pub async fn charge_with_run_time(
        &self,
        quota_name: &str,
        wref: &str,
        pod_sets: Vec<PodSet>,
        run: RunDecl,
        uid: &str,
        dry_run: bool,
    ) -> Result<(), ServiceError> {
        self.charge_by(quota_name, wref, pod_sets, run, uid, None, dry_run)
            .await
    }

    /// `charge_with_run_time` that also records who asked (`user`, the
    /// AdmissionReview's `userInfo.username`) in `status.users`, in the
    /// same write: the ledger's entries of the workload carry it
    /// (docs/budgets.md §6), as the canonical submitter key
    /// (`quota::submitters::submitter`: scrubbed, at most `MAX_SUBMITTER` bytes).
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(level = "debug", skip_all, fields(quota = quota_name, workload = wref, dry_run = dry_run))]
    pub async fn charge_by(
        &self,
        quota_name: &str,
        wref: &str,
        pod_sets: Vec<PodSet>,
        run: RunDecl,
        uid: &str,
        user: Option<&str>,
        dry_run: bool,
    ) -> Result<(), ServiceError> {
        let uid = uid.to_string();
        // The canonical submitter key (`submitters::submitter`): the name the
        // queue entries carry, so the ledger bills usage to it.
        let user = user.and_then(quota::submitters::submitter);
        let admitted = self
            .admit(
                quota_name,
                wref,
                dry_run,
                run,
                user,
                Arc::new(move |old, now| {
                    Some(Charge {
                        pod_sets: pod_sets.clone(),
                        hpa: old.and_then(|c| c.hpa.clone()),
                        since: now.to_string(),
                        uid: uid.clone(),
                        admitted: Some(now.to_string()),
                    })
                }),
            )
            .await
            .map_err(|e| missing_quota(e, quota_name))?;
        if admitted.lowered && !dry_run {
            self.recheck.mark(quota_name);
        }
        if let (Some((parent, give)), false) = (admitted.giveback, dry_run) {
            self.give_back(&parent, quota_name, give).await;
        }
        Ok(())
    }

    /// Charge `wref` in `quota_name` what `build` makes of its current
    /// charge (None: nothing to change). Within hard it is one
    /// compare-and-swap on the quota, shared with the admissions to the
    /// same quota that arrive meanwhile (its group commit, `group`; a dry
    /// run is decided alone and writes nothing). Beyond hard, a quota with
    /// `max` borrows (§5): the loan is granted in its parent's status first
    /// (a compare-and-swap there, one at a time, so two children never take
    /// the same idle unit), then the charge is made within hard + loan, in
    /// the child's group commit again. Bounded rounds: a race that spends
    /// the room between the two answers with a denial.
    async fn admit(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        run: RunDecl,
        user: Option<String>,
        build: Build,
    ) -> Result<Admitted, ServiceError> {
        let started = std::time::Instant::now();
        let mut path = if dry_run { "dry_run" } else { "group" };
        let result = self
            .admit_rounds(quota_name, wref, dry_run, run, user, build, &mut path)
            .await;
        // A bounded set of paths (never a quota's name): how the answer
        // was reached, so a slow path shows apart from the others.
        let path = match &result {
            _ if dry_run => path,
            Err(ServiceError::Denied(_) | ServiceError::NotFound(_)) => "denied",
            Err(_) => "error",
            Ok(_) => path,
        };
        self.metrics
            .observe_commit(path, started.elapsed().as_secs_f64());
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn admit_rounds(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        run: RunDecl,
        user: Option<String>,
        build: Build,
        path: &mut &'static str,
    ) -> Result<Admitted, ServiceError> {
        let qos = self.prices;
        let prices = self.price_list();
        let now_ms = self.now();
        let now = quota::time::format_rfc3339(now_ms);
        // The parent's answer to the last loan request (None: none asked).
        let mut loan: Option<borrow::Lent> = None;
        // The parent's ask for a fence before it cuts the loan
        // (`borrow::Lending::FenceFirst`): written in the next round's
        // compare-and-swap of the child, before its charge is tried.
        let mut fence_first: Option<u64> = None;
        // The loan's generation before this write: a charge lowered here
        // (a scale-down) that ends borrowing gives the loan back at once.
        let seen = self.loan_seen(quota_name);
        let mut last_denial = None;
        let mut rounds = BorrowRounds::default();
        while rounds.more() {
            let decide = {
                let (build, wref, now, loan, run, prices, user) = (
                    build.clone(),
                    wref.to_string(),
                    now.clone(),
                    loan.clone(),
                    run.clone(),
                    prices.clone(),
                    user.clone(),
                );
                move |q: &mut Quota| -> Result<(bool, Round), ServiceError> {
                    // Every grant up to the parent's ask is retired before
                    // anything else is decided here: a charge in flight on
                    // it is refused, so the parent may cut it.
                    let was = q.status.loan_fence;
                    if let Some(g) = fence_first {
                        borrow::fence(q, g);
                    }
                    let fenced = q.status.loan_fence != was;
                    let old = q.status.workloads.get(&wref);
                    let held = old.is_some();
                    // Admitted from the queue: the controller recorded its
                    // submitter, and its unsuspend (bizrq's own write) is
                    // not who asked.
                    let from_queue =
                        old.is_some_and(|o| o.uid.starts_with(quota::object::QUEUE_CHARGE));
                    let Some(c) = build(old, &now) else {
                        let nothing = Admitted {
                            held,
                            ..Default::default()
                        };
                        return Ok((fenced, Round::Done(nothing)));
                    };
                    // bizrq's own suspend (a preemption's, a reclaim's) of
                    // running work frees nothing yet: its pods run until
                    // the workload controller sees the suspend. The charge
                    // stays as it ran, no longer an admission, so the
                    // controller's reconcile lowers it as soon as its watch
                    // shows the suspend (`quota::reconcile`); lowered here,
                    // the room went to another admission while that
                    // reconcile still saw it running and charged it back,
                    // the quota then borrowing beyond its loan.
                    let runs_now = old.is_some_and(|o| o.usage().values().any(|v| v.nanos() > 0));
                    if runs_now
                        && c.uid.starts_with(quota::object::OWN_CHARGE)
                        && c.usage().values().all(|v| v.nanos() == 0)
                    {
                        let mut changed = fenced;
                        if let Some(o) = q.status.workloads.get_mut(&wref) {
                            if o.admitted.is_some() || o.uid != c.uid {
                                o.admitted = None;
                                o.uid = c.uid;
                                changed = true;
                            }
                        }
                        let kept = Admitted {
                            held,
                            ..Default::default()
                        };
                        return Ok((changed, Round::Done(kept)));
                    }
                    // A queued workload, suspended, has nothing to charge:
                    // it stays queued and uncharged (docs/queueing.md §4).
                    // One queued by preemption still holds its running
                    // charge until this, its suspend, releases it (the
                    // entry stays: preempt.rs in the controller).
                    let queued = quota::queue::ledger::holds(q, &wref);
                    let nothing = c.usage().values().all(|v| v.nanos() == 0);
                    if queued && nothing && !quota::queue::ledger::runs(q, &wref) {
                        let nothing = Admitted {
                            held,
                            ..Default::default()
                        };
                        return Ok((fenced, Round::Done(nothing)));
                    }
                    let mut lowered = old.is_some_and(|o| lowers(&c, o));
                    // Budgets first: a refusal changes nothing, and the
                    // reservations are written with the charge below.
                    let reserved =
                        match hold::decide(q, &wref, old, &c, &run, now_ms, &qos, &prices) {
                            Ok(r) => r,
                            Err(r) => {
                                let d = Denial::Budget(Box::new(r));
                                return Ok((fenced, Round::Short(d, None)));
                            }
                        };
                    // A reservation that shrank (an update declaring a
                    // shorter run) leaves room the queue may take.
                    lowered |= q.status.reservations.iter().any(|(k, m)| {
                        m.get(&wref).is_some_and(|h| {
                            reserved
                                .get(k)
                                .is_none_or(|r| r.outstanding() < h.outstanding())
                        })
                    });
                    let before = lowered.then(|| q.status.used.clone());
                    match borrow::charge_or_request(q, &wref, c, loan.as_ref()) {
                        // Charged: it leaves the queue in the same write.
                        Ok(changed) => {
                            let giveback = before
                                .and_then(|b| borrow::fence_release(q, &b, seen))
                                .map(|g| (q.spec.parent.clone(), g));
                            let held_changed = hold::apply(&mut q.status, &wref, reserved);
                            let queued_since = q
                                .status
                                .queue
                                .iter()
                                .find(|e| e.work.workload_ref == wref)
                                .map(|e| e.work.submitted_ms);
                            let left =
                                queued && !nothing && quota::queue::ledger::dequeue(q, &wref);
                            // Who asked, for the ledger (docs/budgets.md §6).
                            let by = match &user {
                                // A suspend asks for nothing: who asked for
                                // the work is still its submitter.
                                Some(u)
                                    if !(nothing
                                        || from_queue && q.status.users.contains_key(&wref))
                                        && q.status.users.get(&wref) != Some(u) =>
                                {
                                    q.status.users.insert(wref.clone(), u.clone());
                                    true
                                }
                                _ => false,
                            };
                            let changed = changed || held_changed || left || by || fenced;
                            let queued_since = queued_since.filter(|_| left);
                            Ok((
                                changed,
                                Round::Done(Admitted {
                                    held,
                                    lowered,
                                    giveback,
                                    queued_since,
                                }),
                            ))
                        }
                        // A refusal changes nothing but the fence; as one
                        // it is proven by the write of its batch, or read
                        // again fresh.
                        Err((d, req)) => Ok((
                            fenced,
                            Round::Short(d, req.map(|r| (q.spec.parent.clone(), *r))),
                        )),
                    }
                }
            };
            let round = if dry_run {
                self.update_status(quota_name, true, decide).await?
            } else {
                self.commit(quota_name, decide).await?
            };
            let (denial, request) = match round {
                Round::Done(admitted) => {
                    if let (Some(since), false) = (admitted.queued_since, dry_run) {
                        // Admitted from the queue by a hand unsuspend: a
                        // wait like the controller's admissions.
                        let waited = now_ms.saturating_sub(since).max(0);
                        self.metrics
                            .observe_queue_wait(quota_name, waited as f64 / 1000.0);
                    }
                    return Ok(admitted);
                }
                Round::Short(d, request) => (d, request),
            };
            let Some((parent, req)) = request else {
                return Err(denial.into());
            };
            if !dry_run {
                *path = "borrowing";
            }
            let children = quota::borrow::Standing::of_all(
                self.store.children(&parent).await?.iter().map(|s| &s.quota),
            );
            let child = quota_name.to_string();
            let lent = self
                .update_status(&parent, dry_run, |p| {
                    match borrow::lend(p, &req, &children, now_ms)? {
                        borrow::Lending::Granted => Ok((true, Ok(borrow::lent_to(p, &child)))),
                        // A dry run writes no fence: it answers as the cut
                        // would once fenced (nothing of it is written).
                        borrow::Lending::FenceFirst(g) if dry_run => {
                            let fenced = borrow::LoanRequest {
                                fence: g,
                                ..req.clone()
                            };
                            borrow::lend(p, &fenced, &children, now_ms)?;
                            Ok((true, Ok(borrow::lent_to(p, &child))))
                        }
                        borrow::Lending::FenceFirst(g) => Ok((false, Err(g))),
                    }
                })
                .await?;
            (loan, fence_first) = match lent {
                Ok(lent) => (Some(lent), None),
                // Asked again next round, the child fenced at `g` first.
                Err(g) => (None, Some(g)),
            };
            rounds.done(fence_first.is_some());
            last_denial = Some(denial);
        }
        // Out of rounds while the parent still asks for a fence: the loan
        // is being cut under other admissions of this child, which is
        // contention (asked again), not this admission's denial.
        if fence_first.is_some() {
            return Err(ServiceError::Contention(quota_name.to_string()));
        }
        Err(last_denial
            .map(ServiceError::Denied)
            .unwrap_or_else(|| ServiceError::Contention(quota_name.to_string())))
    }

    /// Check that usage would fit without charging it (CronJob).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = quota_name))]
    pub async fn check_usage(
        &self,
        quota_name: &str,
        usage: &ResourceList,
    ) -> Result<(), ServiceError> {
        self.update_status(quota_name, true, |q| {
            admission::check(q, usage)?;
            Ok((false, ()))
        })
        .await
        .map_err(|e| missing_quota(e, quota_name))
    }

    /// Give back what a workload holds. Always allowed; a quota that is gone
    /// holds nothing. The controller confirms it against the cluster. The
    /// loan the release ends goes back to the parent right after (an
    /// UPDATE that moves the workload to another quota).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = quota_name, workload = wref, dry_run = dry_run))]
    pub async fn release_workload(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
    ) -> Result<(), ServiceError> {
        self.release_where(quota_name, wref, dry_run, |_| true)
            .await
            .map(|_| ())
    }

    /// Give back `wref`'s charge in `quota_name` only if it is the charge
    /// of the object `object_uid` that bizrq's own writes left: admitted
    /// from the queue or written by a review of bizrq's own write
    /// (`Charge::object_uid`). The controller calls it when its write
    /// to that object found it deleted: the write's review may have
    /// charged it after the DELETE's release, and the object the charge
    /// stands for is gone. A charge of a newer object of the same name
    /// (its CREATE's review) is never this one, and stays. Whether it
    /// was given back.
    pub async fn release_charge_of(
        &self,
        quota_name: &str,
        wref: &str,
        object_uid: &str,
    ) -> Result<bool, ServiceError> {
        if object_uid.is_empty() {
            return Ok(false);
        }
        let object_uid = object_uid.to_string();
        // Only that charge: a queue entry of the name is a newer object's.
        self.release_where(quota_name, wref, false, move |c| {
            c.is_some_and(|c| c.object_uid() == Some(object_uid.as_str()))
        })
        .await
    }

    /// Give back what `wref` holds in `quota_name` (its charge, and its
    /// queue entry) when `release` accepts its charge (None: it holds
    /// none); otherwise nothing changes. Whether anything was given back.
    async fn release_where(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        release: impl Fn(Option<&Charge>) -> bool + Send + Sync + 'static,
    ) -> Result<bool, ServiceError> {
        let seen = self.loan_seen(quota_name);
        let decide = {
            let wref = wref.to_string();
            move |q: &mut Quota| {
                if !release(q.status.workloads.get(&wref)) {
                    return Ok((false, (false, None)));
                }
                let before = q.status.used.clone();
                let dequeued = quota::queue::ledger::dequeue(q, &wref);
                let released = admission::release(q, &wref) || dequeued;
                let give =
                    borrow::fence_release(q, &before, seen).map(|g| (q.spec.parent.clone(), g));
                Ok((released, (released, give)))
            }
        };
        // In its quota's group commit, like the charges it gives way to.
        let result = if dry_run {
            self.update_status(quota_name, true, decide).await
        } else {
            self.commit(quota_name, decide).await
        };
        match result {
            Ok((released, give)) => {
                if released && !dry_run {
                    self.recheck.mark(quota_name);
                    if let Some((parent, give)) = give {
                        self.give_back(&parent, quota_name, give).await;
                    }
                }
                Ok(released)
            }
            Err(ServiceError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The generation of the loan `child`'s parent holds for it, as this
    /// process last saw the parent (0 when it saw none), for a child that
    /// may borrow; read before a release's write (`borrow::fence_release`).
    /// A stale copy is safe: the return then finds a later grant, fences
    /// it and tries again.
    pub fn loan_seen(&self, child: &str) -> Option<u64> {
        let c = self.cached(child)?;
        let spec = &c.quota.spec;
        if spec.max.is_empty() || spec.parent.is_empty() {
            return None;
        }
        let seen = self
            .cached(&spec.parent)
            .and_then(|p| p.quota.status.loans.get(child).map(|l| l.generation));
        Some(seen.unwrap_or(0))
    }

    /// Give back to `parent`, in its compare-and-swap, what `child`'s loan
    /// holds beyond what the child borrowed at its release's fence
    /// (`borrow::return_loan`). A grant after the fence is fenced in turn
    /// (a write of the child) and the return tried again, at most
    /// `RETURN_ROUNDS` times; past them, or without a parent, nothing goes
    /// back now (the parent's repair shrinks the loan after
    /// `LOAN_TTL_MS`). Whether the parent changed.
    pub async fn return_loan(
        &self,
        parent: &str,
        child: &str,
        mut give: borrow::Giveback,
    ) -> Result<bool, ServiceError> {
        if parent.is_empty() {
            return Ok(false);
        }
        for round in 1..=RETURN_ROUNDS {
            let result = self
                .update_status(parent, false, |p| {
                    Ok(match borrow::return_loan(p, child, &give) {
                        borrow::Returned::Back(changed) => (changed, Ok(changed)),
                        borrow::Returned::NoLoan => (false, Ok(false)),
                        borrow::Returned::Granted(g) => (false, Err(g)),
                    })
                })
                .await;
            let granted = match result {
                Ok(Ok(changed)) => return Ok(changed),
                Ok(Err(g)) => g,
                Err(ServiceError::NotFound(_)) => return Ok(false),
                Err(e) => return Err(e),
            };
            if round == RETURN_ROUNDS {
                // No return is tried after this fence: it would only refuse
                // the charge riding the grant, for nothing.
                break;
            }
            give = match self
                .update_status(child, false, |q| {
                    let was = q.status.loan_fence;
                    let give = borrow::fence(q, granted);
                    Ok((q.status.loan_fence != was, give))
                })
                .await
            {
                Ok(g) => g,
                Err(ServiceError::NotFound(_)) => return Ok(false),
                Err(e) => return Err(e),
            };
        }
        Ok(false)
    }

    /// `return_loan`, its failure logged: the loan is then the parent's
    /// repair's to shrink.
    async fn give_back(&self, parent: &str, child: &str, give: borrow::Giveback) {
        match self.return_loan(parent, child, give).await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(quota = child, error = %e, "loan not returned; the parent's repair shrinks it later")
            }
        }
    }

    /// A DELETE's release of `wref` from `quota_name`, as
    /// `release_workload`, noting in `seen` the `uid` of the charge it found
    /// (the admission that last changed it) at its first read, so that
    /// when the write fails or is cut short a deferred release takes that
    /// charge and not the one of an object created again under the name.
    #[tracing::instrument(level = "debug", skip_all, fields(quota = quota_name, workload = wref, dry_run = dry_run))]
    pub async fn release_for_delete(
        &self,
        quota_name: &str,
        wref: &str,
        dry_run: bool,
        seen: &mut Option<Seen>,
    ) -> Result<(), ServiceError> {
        // What the loan gives back after this release, and to which
        // parent: right after its write.
        let loan_seen = self.loan_seen(quota_name);
        let mut loan_back = None;
        let result = self
            .update_status(quota_name, dry_run, |q| {
                if seen.is_none() {
                    *seen = Some(Seen {
                        uid: q.status.workloads.get(wref).map(|c| c.uid.clone()),
                    });
                }
                let before = q.status.used.clone();
                let dequeued = quota::queue::ledger::dequeue(q, wref);
                let released = admission::release(q, wref) || dequeued;
                loan_back = borrow::fence_release(q, &before, loan_seen)
                    .map(|g| (q.spec.parent.clone(), g));
                Ok((released, released))
            })
            .await;
        match result {
            Ok(released) => {
                if released && !dry_run {
                    self.recheck.mark(quota_name);
                    if let Some((parent, give)) = loan_back {
                        self.give_back(&parent, quota_name, give).await;
                    }
                }
                Ok(())
            }
            Err(ServiceError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A DELETE is never refused: release `wref` from `quota` (None: from
    /// the quota it is bound to, which could not be read) in the background,
    /// with bounded retries and backoff. With `seen` (the charge as the
    /// DELETE found it) only that charge is released: another one belongs
    /// to an object created again under the same name, or to a change
    /// after the DELETE. Without it, only a charge admitted before
    /// `deleted_at` is (a comparison of clocks that may be two replicas'),
    /// and the quota is re-checked. One task per (quota, workload), at most
    /// `MAX_DEFERRED` at once; what is over the cap or still fails after
    /// the retries is left to the controller, whose reconcile drops charges
    /// of objects that are gone (cluster mode).
    pub fn defer_release(
        self: &Arc<Self>,
        quota: Option<String>,
        wref: &str,
        seen: Option<Seen>,
        deleted_at: i64,
        error: &ServiceError,
    ) {
        let key = (quota.clone().unwrap_or_default(), wref.to_string());
        {
            let mut pending = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            if pending.contains(&key) {
                return;
            }
            if pending.len() >= MAX_DEFERRED {
                self.metrics.deferred_releases_over_cap.inc();
                tracing::warn!(workload = wref, error = %error,
                    "release not written and {MAX_DEFERRED} deferred releases already pending; the controller's reconcile drops the charge of an object that is gone");
                return;
            }
            pending.insert(key.clone());
        }
        self.metrics.deferred_releases.inc();
        tracing::warn!(workload = wref, quota = quota.as_deref().unwrap_or("(binding unknown)"), error = %error,
            "release deferred: the DELETE is allowed and the release retried in the background");
        let (svc, wref) = (self.clone(), wref.to_string());
        tokio::spawn(async move {
            let _pending = Pending(svc.deferred.clone(), key);
            let mut wait = RELEASE_FIRST_WAIT;
            for attempt in 1..=RELEASE_RETRIES {
                let jitter = rand::random::<u64>() % (wait.as_millis() as u64 / 2 + 1);
                tokio::time::sleep(wait + Duration::from_millis(jitter)).await;
                let attempt_once =
                    svc.release_deferred(quota.as_deref(), &wref, seen.as_ref(), deleted_at);
                // A hanging store must not hold the task (and its place
                // under the cap) for ever.
                match tokio::time::timeout(RELEASE_ATTEMPT_TIMEOUT, attempt_once)
                    .await
                    .unwrap_or_else(|_| Err(ServiceError::Internal("timed out".into())))
                {
                    Ok(()) => {
                        tracing::info!(workload = %wref, attempt, "deferred release written");
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(workload = %wref, attempt, error = %e, "deferred release failed again")
                    }
                }
                wait = (wait * 2).min(RELEASE_MAX_WAIT);
            }
            svc.metrics.deferred_releases_abandoned.inc();
            tracing::error!(workload = %wref, "deferred release still failing after {RELEASE_RETRIES} attempts; the controller's reconcile drops the charge of an object that is gone");
        });
    }

    async fn release_deferred(
        &self,
        quota: Option<&str>,
        wref: &str,
        seen: Option<&Seen>,
        deleted_at: i64,
    ) -> Result<(), ServiceError> {
        let holders: Vec<String> = match quota {
            Some(q) => vec![q.to_string()],
            None => self.store.workload_quota(wref).await?.into_iter().collect(),
        };
        for name in holders {
            let result = self
                .update_status(&name, false, |q| {
                    let Some(c) = q.status.workloads.get(wref) else {
                        return Ok((false, false));
                    };
                    let other = match seen {
                        Some(s) => s.uid.as_deref() != Some(c.uid.as_str()),
                        None => c
                            .admitted
                            .as_deref()
                            .and_then(quota::time::parse_rfc3339)
                            .is_some_and(|t| t > deleted_at),
                    };
                    let released = !other && admission::release(q, wref);
                    Ok((released, released))
                })
                .await;
            match result {
                // Whatever was decided here, the cluster has the last word.
                Ok(released) => {
                    if released || seen.is_none() {
                        self.recheck.mark(&name);
                    }
                }
                Err(ServiceError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Change the charge a workload already holds (found through its
    /// binding; `at`, where the API server keeps it, bounds a lookup the
    /// cache misses to reading it, `QuotaStore::workload_quota_at`) and
    /// charge the difference. `change` returns false when it does not
    /// apply. Returns false when the workload holds no charge (not
    /// governed).
    async fn change_held(
        &self,
        wref: &str,
        at: Option<&WorkloadAt<'_>>,
        uid: &str,
        dry_run: bool,
        change: impl Fn(&mut Charge) -> bool + Send + Sync + 'static,
    ) -> Result<bool, ServiceError> {
        let holder = match at {
            Some(at) => self.store.workload_quota_at(wref, at).await?,
            None => self.store.workload_quota(wref).await?,
        };
        let Some(quota_name) = holder else {
            return Ok(false);
        };
        let uid = uid.to_string();
        let admitted = self
            .admit(
                &quota_name,
                wref,
                dry_run,
                RunDecl::AsReserved,
                None,
                Arc::new(move |old, now| {
                    let mut c = old?.clone();
                    if !change(&mut c) {
                        return None;
                    }
                    c.uid = uid.clone();
                    c.admitted = Some(now.to_string());
                    Some(c)
                }),
            )
            .await?;
        if admitted.lowered && !dry_run {
            self.recheck.mark(&quota_name);
        }
        if let (Some((parent, give)), false) = (admitted.giveback, dry_run) {
            self.give_back(&parent, &quota_name, give).await;
        }
        Ok(admitted.held)
    }

    /// A scale subresource change of the workload stored `at`: the held
    /// charge at the new replica count (for workloads of a single pod
    /// set). Returns false when not governed.
    #[tracing::instrument(level = "debug", skip_all, fields(workload = wref, replicas = replicas, dry_run = dry_run))]
    pub async fn scale_workload(
        &self,
        wref: &str,
        at: &WorkloadAt<'_>,
        replicas: i64,
        uid: &str,
        dry_run: bool,
    ) -> Result<bool, ServiceError> {
        self.change_held(wref, Some(at), uid, dry_run, move |c| {
            if c.pod_sets.len() != 1 {
                return false;
            }
            c.pod_sets[0].count = replicas;
            true
        })
        .await
    }

    /// An HPA targeting a held workload (stored `at`, when the HPA names
    /// where) reserves `maxReplicas` (or stops reserving, with `None`).
    /// Returns false when the target is not governed.
    #[tracing::instrument(level = "debug", skip_all, fields(workload = wref, hpa = hpa_name, dry_run = dry_run))]
    pub async fn set_hpa(
        &self,
        wref: &str,
        at: Option<&WorkloadAt<'_>>,
        hpa: Option<HpaCharge>,
        hpa_name: &str,
        uid: &str,
        dry_run: bool,
    ) -> Result<bool, ServiceError> {
        let hpa_name = hpa_name.to_string();
        self.change_held(wref, at, uid, dry_run, move |c| match &hpa {
            Some(h) => {
                c.hpa = Some(h.clone());
                true
            }
            // Only the HPA that made the reservation lifts it.
            None if c.hpa.as_ref().is_some_and(|h| h.name == hpa_name) => {
                c.hpa = None;
                true
            }
            None => false,
        })
        .await
    }

    /// A child quota the cluster reports deleted (the controller's quota
    /// watch): its carve-out goes back to `parent` now, young or not, if a
    /// fresh read confirms the child gone and the carve-out is the one made
    /// under the deleted object's create token (`token`, from its
    /// annotation: a later create of the name carves under a token of its
    /// own). Anything else is left to the parent's repair, which returns a
    /// gone child's carve-out once it is no longer young.
    pub async fn release_gone(&self, parent: &str, child: &str, token: &str) {
        if token.is_empty() || !matches!(self.store.get(child).await, Ok(None)) {
            return;
        }
        let res = self
            .update_status(parent, false, |p| {
                let ours = p.status.children.get(child).is_some_and(|c| c.uid == token);
                let released = ours && tree::holder(p, child).is_none() && tree::uncarve(p, child);
                Ok((released, ()))
            })
            .await;
        match res {
            Ok(()) | Err(ServiceError::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(parent, child, error = %e, "could not return a deleted child's carve-out; the repair will")
            }
        }
    }

    /// The children of `parent` for its repair, from a list that can lag
    /// behind the API server (the controller's watch cache). A listed child
    /// that holds no carve-out in the parent is the one case where lag does
    /// harm: a delete not yet seen would get its carve-out back and keep it.
    /// Those few are read fresh, and dropped when gone; see `Confirmed`.
    #[tracing::instrument(level = "debug", skip_all, fields(quota = parent))]
    pub async fn confirm_children(
        &self,
        parent: &str,
        listed: Vec<Stored>,
    ) -> Result<(Vec<Stored>, Confirmed), ServiceError> {
        let carved: BTreeSet<String> = self
            .cached(parent)
            .map(|p| p.quota.status.children.keys().cloned().collect())
            .unwrap_or_default();
        let mut kept = Vec::with_capacity(listed.len());
        let mut confirmed = Confirmed::default();
        for kid in listed {
            if carved.contains(kid.quota.name()) {
                kept.push(kid);
            } else if let Some(fresh) = self.store.get(kid.quota.name()).await? {
                confirmed.0.insert(fresh.quota.name().to_string());
                kept.push(fresh);
            }
        }
        Ok((kept, confirmed))
    }

    // ---- resync --------------------------------------------------------

    /// Periodic full resync in standalone mode: make every parent's carve-out
    /// ledger match its children (dropping carve-outs of creates that never
    /// finished, after `CARVE_TTL_MS`), accrue cash, refresh used. Returns
    /// how many quotas it had to write.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn resync(&self) -> Result<usize, ServiceError> {
        let started = std::time::Instant::now();
        let all = self.store.list().await?;
        let mut children: BTreeMap<&str, Vec<&Quota>> = BTreeMap::new();
        for s in &all {
            if !s.quota.spec.parent.is_empty() {
                children
                    .entry(&s.quota.spec.parent)
                    .or_default()
                    .push(&s.quota);
            }
        }
        let mut written = 0;
        for s in &all {
            let name = s.quota.name().to_string();
            let kids = children.remove(name.as_str()).unwrap_or_default();
            let now = self.now();
            let listed = &s.quota.status;
            let result = self
                .update_status(&name, false, |q| {
                    borrow::repair_children(q, &kids, now);
                    // Standalone, nothing names a queue's entries (no
                    // watch): one a CREATE's review left (older versions
                    // queued here too) expires; nothing queues now.
                    if !self.queueing {
                        let grace = quota::queue::ledger::UNSEEN_GRACE_MS;
                        quota::queue::ledger::expire_unseen(q, now, grace);
                    }
                    // Write only what a reader would see change.
                    let changed = q.status.differs_visibly(listed);
                    Ok((changed, changed))
                })
                .await;
            match result {
                Ok(changed) => written += changed as usize,
                Err(ServiceError::NotFound(_)) => {}
                Err(e) => tracing::warn!(quota = %name, error = %e, "resync failed for one quota"),
            }
        }
        self.metrics
            .reconcile_duration
            .observe(started.elapsed().as_secs_f64());
        Ok(written)
    }
}

/// What an admission makes of a workload's current charge (None: nothing
/// to change), given it and the admission's time; called again for each
/// decision (a retried batch, a borrowing round).
type Build = Arc<dyn Fn(Option<&Charge>, &str) -> Option<Charge> + Send + Sync>;

/// What an admission found and did.
#[derive(Clone, Debug, Default)]
struct Admitted {
    /// The workload held a charge in the quota.
    held: bool,
    /// The new charge is below the old one on some key.
    lowered: bool,
    /// The lowered charge ended borrowing: its parent and what the loan
    /// gives back at once (`Service::return_loan`).
    giveback: Option<(String, borrow::Giveback)>,
    /// It left the quota's queue with this charge (a queued workload
    /// unsuspended by hand that fits): when it had joined, for the
    /// queue's wait-time histogram.
    queued_since: Option<i64>,
}

/// One round of an admission on its quota: done, or short, with the loan
/// the parent (named) could grant.
enum Round {
    Done(Admitted),
    Short(Denial, Option<(String, borrow::LoanRequest)>),
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

/// Children of a parent read fresh by `Service::confirm_children`.
#[derive(Debug, Default)]
pub struct Confirmed(BTreeSet<String>);

impl Confirmed {
    /// The children a repair of `parent`, as it is about to be written, may
    /// trust: those it holds a carve-out for, and those confirmed to exist.
    /// A child without either is left out (no carve-out is made for it this
    /// time; the next reconcile confirms it).
    pub fn for_repair<'a>(&self, parent: &Quota, kids: &'a [Stored]) -> Vec<&'a Quota> {
        kids.iter()
            .map(|s| &s.quota)
            .filter(|k| parent.status.children.contains_key(k.name()) || self.0.contains(k.name()))
            .collect()
    }
}

/// A resource list as a person reads it: `k=v, k=v`.
fn show(list: &ResourceList) -> String {
    let parts: Vec<String> = list.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(", ")
}

fn already_exists(name: &str) -> ServiceError {
    ServiceError::AlreadyExists(format!("bizrq {name} already exists"))
}

/// Whether `q` is the object of the create that carved under `token`.
fn created_by(q: &Quota, token: &str) -> bool {
    q.metadata
        .annotations
        .get(CREATE_TOKEN_ANNOTATION)
        .map(String::as_str)
        == Some(token)
}

fn missing_quota(e: ServiceError, quota_name: &str) -> ServiceError {
    match e {
        ServiceError::NotFound(_) => ServiceError::NotFound(format!(
            "bizrq {quota_name} does not exist (named by the label {})",
            quota::keys::QUOTA_LABEL
        )),
        e => e,
    }
}

/// Whether `new` charges less than `old` of some key (a scale-down, a
/// smaller template, an HPA lifted).
fn lowers(new: &Charge, old: &Charge) -> bool {
    !quota::reconcile::covers(&new.usage(), &old.usage())
}

/// The charge a DELETE found: the `uid` of the admission that last changed
/// it (None: there was none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub uid: Option<String>,
}

/// Deferred releases running at once; beyond, the reconcile drops the
/// charges (a store down for long makes many, each holding a task).
pub const MAX_DEFERRED: usize = 1024;

/// Takes a deferred release off the pending set when its task ends.
struct Pending(
    Arc<std::sync::Mutex<BTreeSet<(String, String)>>>,
    (String, String),
);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

/// Retries of a release a DELETE could not write at once: 8 waits from
/// 0.5 s doubling to 30 s, about a minute and a half in all.
const RELEASE_RETRIES: u32 = 8;
const RELEASE_FIRST_WAIT: Duration = Duration::from_millis(500);
const RELEASE_MAX_WAIT: Duration = Duration::from_secs(30);
const RELEASE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after a review lowered a quota's charges the controller
/// confirms them: time for the API server to persist a genuine change and
/// for the controller's watch to show it, so only what still exists is
/// restored.
pub const RECHECK_DELAY: Duration = Duration::from_secs(3);

/// Quotas whose charges a review lowered (a DELETE, a scale-down, a
/// relabel, an HPA lifted), each due for a re-check `RECHECK_DELAY` later.
/// Any caller that reaches the webhook can send such a review; the
/// controller reconciles the quota from what the cluster shows, which
/// restores the charge of an object that still exists. In the controller's
/// process (the Lease holder) this is the path; a write by another replica
/// reaches the controller through its quota watch, as a version it did not
/// write. One entry per quota at most.
#[derive(Default)]
pub struct Recheck {
    due: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
    notify: tokio::sync::Notify,
}

impl Recheck {
    pub fn mark(&self, quota: &str) {
        let at = tokio::time::Instant::now() + RECHECK_DELAY;
        if let Ok(mut due) = self.due.lock() {
            // The earliest stays: a stream of lowerings cannot postpone it.
            due.entry(quota.to_string()).or_insert(at);
        }
        self.notify.notify_one();
    }

    /// Wait until some quotas are due; return them (each once).
    pub async fn next(&self) -> Vec<String> {
        loop {
            let notified = self.notify.notified();
            let earliest = self.due.lock().ok().and_then(|d| d.values().min().copied());
            match earliest {
                None => notified.await,
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = notified => {}
                    }
                }
            }
            let now = tokio::time::Instant::now();
            let Ok(mut due) = self.due.lock() else {
                continue;
            };
            let ready: Vec<String> = due
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(n, _)| n.clone())
                .collect();
            for n in &ready {
                due.remove(n);
            }
            if !ready.is_empty() {
                return ready;
            }
        }
    }
}

async fn backoff(attempt: u32) {
    let base = 1u64 << attempt.min(6);
    let jitter = rand::random::<u64>() % (base + 1);
    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
}

/// One writer per quota name in this process. Exact names rather than
/// hashed stripes: in cluster mode a spec write holds its quota's lock while
/// the API server calls our own webhook, which locks the parent, and two
/// names sharing a stripe would wait on each other until the webhook timed out.
#[derive(Default)]
struct NameLocks(std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>);

struct NameGuard {
    guard: Option<OwnedMutexGuard<()>>,
    name: String,
    locks: Arc<NameLocks>,
}

impl NameLocks {
    async fn lock(self: &Arc<Self>, name: &str) -> NameGuard {
        let m = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(name.to_string()).or_default().clone()
        };
        NameGuard {
            guard: Some(m.lock_owned().await),
            name: name.to_string(),
            locks: self.clone(),
        }
    }
}

/// The longest name `status.users` may hold, in bytes (the CRD's bound;
/// what is written is the shorter canonical key, `quota::submitters::submitter`).
pub const MAX_USER_LEN: usize = 256;

/// The last version of each quota this process wrote or read, and the
/// last versions this process wrote (`WRITTEN_KEPT`): their watch events
/// are echoes of our own writes. A version only read may be someone
/// else's change not reconciled yet.
#[derive(Default)]
struct Cache(std::sync::Mutex<HashMap<String, Cached>>);

/// A quota's cached copy and the versions of it this process wrote.
type Cached = (Arc<Stored>, Vec<i64>);

/// Versions of one quota remembered as written by this process: a busy
/// quota is written again before the echo of its last write arrives.
const WRITTEN_KEPT: usize = 8;

/// The copy a decision works on: the stored quota, with its cash accrued
/// up to `now` where the service accrues from its own ledger (standalone).
fn working_copy(
    current: &Stored,
    accrue: bool,
    now: i64,
    prices: &Prices,
    list: &quota::budget::PriceList,
) -> Quota {
    current.quota.status.workloads.keep_sums();
    let mut q = current.quota.clone();
    if accrue {
        q.status.accrue_ledger_priced(&q.spec, now, prices, list);
    }
    q
}

/// A quota just written: the copy to decide on next, and a change for the
/// alert engine (`before_write`: when the write started).
fn remember_written(
    cache: &Cache,
    changed: &changed::Changed,
    before_write: i64,
    mut stored: Stored,
) {
    // Its ledger entries are written: the cached copy need not hold them.
    stored.quota.status.ledger = Default::default();
    let stored = Arc::new(stored);
    let name = stored.quota.name().to_string();
    cache.remember_written(stored.clone());
    changed.mark(&name, before_write, Some(stored));
}

/// The one write of a read-modify-write: `q` over `current` (its spec too
/// when that changed). Written, it is remembered and marked for the alert
/// engine (`before_write`: when the write started); failed, the cached copy
/// is forgotten, as it may be stale. `Service::modify` and the group
/// commit's batches both write through here.
async fn write_over(
    store: &dyn QuotaStore,
    cache: &Cache,
    changed: &changed::Changed,
    before_write: i64,
    current: &Stored,
    mut q: Quota,
) -> Result<(), StoreError> {
    let name = q.name().to_string();
    let written = if q.spec != current.quota.spec {
        store.replace(current, &q).await
    } else {
        store.replace_status(current, &q.status).await
    };
    match written {
        // A patch that changed nothing stored keeps the version it was
        // made on (perhaps another writer's, read): not a write of ours.
        Ok(version) if version == current.version => {
            q.status.ledger = Default::default();
            cache.remember(Arc::new(Stored { quota: q, version }));
            Ok(())
        }
        Ok(version) => {
            q.metadata.resource_version = Some(version.to_string());
            remember_written(cache, changed, before_write, Stored { quota: q, version });
            Ok(())
        }
        Err(e) => {
            cache.forget(&name);
            Err(e)
        }
    }
}

impl Cache {
    fn get(&self, name: &str) -> Option<Arc<Stored>> {
        self.0.lock().ok()?.get(name).map(|(s, _)| s.clone())
    }

    /// Whether this process wrote `version` of `name` (one of its last
    /// `WRITTEN_KEPT` writes of it). Versions are never reused, so another
    /// writer's version is never taken for ours.
    fn wrote(&self, name: &str, version: i64) -> bool {
        let Ok(c) = self.0.lock() else { return false };
        c.get(name).is_some_and(|(_, w)| w.contains(&version))
    }

    /// A copy read: what this process wrote before stays remembered.
    fn remember(&self, stored: Arc<Stored>) {
        if let Ok(mut c) = self.0.lock() {
            let name = stored.quota.name().to_string();
            let written = c.remove(&name).map(|(_, w)| w).unwrap_or_default();
            c.insert(name, (stored, written));
        }
    }

    fn remember_written(&self, stored: Arc<Stored>) {
        if let Ok(mut c) = self.0.lock() {
            let name = stored.quota.name().to_string();
            let mut written = c.remove(&name).map(|(_, w)| w).unwrap_or_default();
            if written.len() == WRITTEN_KEPT {
                written.remove(0);
            }
            written.push(stored.version);
            c.insert(name, (stored, written));
        }
    }

    fn forget(&self, name: &str) {
        if let Ok(mut c) = self.0.lock() {
            c.remove(name);
        }
    }

    fn all(&self) -> Vec<Arc<Stored>> {
        self.0
            .lock()
            .map(|c| c.values().map(|(s, _)| s.clone()).collect())
            .unwrap_or_default()
    }
}

impl Drop for NameGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        // The last one out removes the entry; a waiter holds a clone.
        let mut map = self.locks.0.lock().unwrap_or_else(|e| e.into_inner());
        if map
            .get(&self.name)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            map.remove(&self.name);
        }
    }
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
        for v in 6..6 + super::WRITTEN_KEPT as i64 {
            c.remember_written(at(v));
        }
        assert!(c.wrote("ai", 6) && c.wrote("ai", 5 + super::WRITTEN_KEPT as i64));
        assert!(!c.wrote("ai", 4));
        c.forget("ai");
        assert!(!c.wrote("ai", 6));
    }
}

#[cfg(test)]
mod borrow_rounds {
    use super::{BorrowRounds, BORROW_ROUNDS, FENCE_ROUNDS};

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
