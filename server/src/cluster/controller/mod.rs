//! The reconcile controller, run by the Lease holder only: kube-runtime's
//! `Controller` over the `BizGroupResourceQuota` CRD, fed by our own
//! watches of what runs.
//!
//! kube-runtime does the scheduling: one reconcile per quota at a time
//! (`--workers` at once), a quota triggered while it runs runs again after,
//! and a failed reconcile is retried with a backoff that grows per quota
//! (`error_policy`). What it cannot know is which quota a pod or a workload
//! belongs to: our watches (`watches`) keep that picture in a `View` and
//! send the names of the quotas an event touches as extra triggers
//! (`triggers`), with the periodic resync and the recheck of lowered
//! charges.
//!
//! Decisions are pure (`view`, `quota::reconcile`, `quota::tree`); this
//! module is the I/O around them. Status writes go through the service's
//! compare-and-swap loop, so a reconcile racing an admission loses the
//! swap, re-reads and decides again: nothing admitted is erased (charges
//! younger than `RESERVATION_TTL_MS` are kept even when the watch has not
//! shown their workload yet).

mod budgets;
mod deleted;
mod discovery;
mod fair;
mod gates;
mod history;
pub(crate) mod idle;
mod preempt;
mod queue;
mod raw;
mod real_usage;
mod reclaim;
mod reconcile;
mod scheduler;
mod submitters;
mod summaries;
mod triggers;
mod watches;

pub use discovery::discover;
pub use history::{sample_forever, History, WATERMARK_SETTING};
pub use reconcile::{reconcile, Reconciled};

use super::crd::BizGroupResourceQuota;
use super::events::Events;
use super::view::{kind_key, View};
use crate::service::{Service, ServiceError};
use futures::channel::mpsc::UnboundedReceiver;
use futures::StreamExt;
use kube::api::ApiResource;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{self, ObjectRef};
use kube::{Client, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use triggers::Triggers;
use watches::Gate;

#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub workers: usize,
    pub resync: Duration,
    pub reclaim_grace: Duration,
    pub discovery_every: Duration,
    pub flush_every: Duration,
    pub sample_every: Duration,
    /// How often parents' summaries (`kubectl get`'s columns) are
    /// restated after their subtree changed (`summaries`).
    pub summary_every: Duration,
    /// Real usage read from Prometheus (`real_usage`); None without
    /// `--prometheus-url`.
    pub real_usage: Option<crate::real_usage::RealUsageConfig>,
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
            summary_every: Duration::from_secs(10),
            real_usage: None,
        }
    }
}

/// A reconcile that failed: which quota, and the service's reason.
#[derive(Debug, thiserror::Error)]
#[error("bizrq {quota}: reconcile failed: {source}")]
pub struct Error {
    pub quota: String,
    #[source]
    pub source: ServiceError,
}

/// First retry of a failed reconcile; each further failure of the same
/// quota doubles it, up to `RETRY_MAX`. A success starts again from here.
pub const RETRY_FIRST: Duration = Duration::from_secs(5);
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// Failures in a row, per quota, for the retry backoff.
#[derive(Default)]
struct Retries(Mutex<HashMap<String, u32>>);

impl Retries {
    /// The delay before the next attempt at `name`, counting this failure.
    fn next(&self, name: &str) -> Duration {
        let mut m = self.0.lock().unwrap();
        let n = m.entry(name.to_string()).or_insert(0);
        let delay = RETRY_FIRST
            .saturating_mul(1u32 << (*n).min(16))
            .min(RETRY_MAX);
        *n = n.saturating_add(1);
        delay
    }

    fn reset(&self, name: &str) {
        self.0.lock().unwrap().remove(name);
    }
}

/// An outbox as appended (`quota::object::budgets::Outbox::key`).
type OutboxKey = (i64, i64, usize);

/// One quota's refused queue marks: by workload reference, the object's
/// uid, the mark refused, and until when (ms) the refusal holds: forever,
/// or for a mark placed in the future, until that place is no longer
/// (`Context::bad_marks`).
type BadMarks = HashMap<String, (String, String, i64)>;

/// Everything a reconcile and the watches share; kube-runtime hands it to
/// every `reconcile` and `error_policy` call.
pub struct Context {
    client: Client,
    service: Arc<Service>,
    history: Option<Arc<dyn History>>,
    events: Events,
    cfg: ControllerConfig,
    view: Mutex<View>,
    /// Kinds the cluster serves now ("group/Kind"), with how to reach them.
    installed: Mutex<HashMap<String, ApiResource>>,
    triggers: Triggers,
    retries: Retries,
    /// Quotas triggered before kube-runtime's store held them (the runtime
    /// drops such a trigger): their next Apply is reconciled even when it is
    /// this process's own write coming back.
    missed: Mutex<HashSet<String>>,
    /// The highest resourceVersion of a quota this controller's watch has
    /// delivered: a reconcile reads the service's store (whose own watch
    /// may lag this one) only once that store has reached it.
    quota_seen: std::sync::atomic::AtomicI64,
    /// No reconcile before the view's startup watches have listed once.
    gate: Gate,
    /// Quotas that may borrow and have a queue, by parent: room freed under
    /// a parent may be lent to them, so they are touched then (`queue`).
    borrowers: Mutex<HashMap<String, HashSet<String>>>,
    /// Fair sharing (`fair`): the quotas that left idle room to a sibling,
    /// by that sibling, given a round once the sibling's round is done;
    /// and how often each quota yielded to the same head of a sibling.
    fair: fair::Yields,
    /// When a quota's queue next needs a round although nothing changed
    /// (an entry crosses its alert threshold, an orphan's grace ends), or
    /// a released DELETE is to be asked about (`deleted`), in the
    /// service's clock: its reconcile asks to be run again then.
    wake: Mutex<HashMap<String, i64>>,
    /// The ledger window of each quota known to be in the ledger (its
    /// outbox appended in this life): its next reconcile need not append
    /// it again (`history::Context::replay_outbox`).
    ledger_confirmed: Arc<Mutex<HashMap<String, OutboxKey>>>,
    /// An outbox a reconcile found stored but not known to be appended
    /// (the service's cached copy, which the reconcile replays first, can
    /// lag what is stored — another writer may even have put an older
    /// window back): the next reconcile of the quota replays it.
    ledger_unseen: Arc<Mutex<HashMap<String, quota::object::budgets::Outbox>>>,
    /// Of each quota, the accrual windows this controller wrote itself
    /// (`enforce::OwnWindows`): late runs are billed back over them only.
    accrued_to: Mutex<HashMap<String, quota::budget::enforce::OwnWindows>>,
    /// Workloads this controller suspended for a preemption, and when: the
    /// repair of an interrupted preemption (`repair_preemptions`) does not
    /// suspend one again while its view may still lag that PATCH.
    suspended: Mutex<HashMap<String, std::time::Instant>>,
    /// The one scheduling loop over every queue (`scheduler`): the quotas
    /// whose queue waits for a round.
    scheduler: scheduler::Scheduler,
    /// When a quota whose round asked for a time of its own is touched.
    scheduler_timers: Mutex<HashMap<String, tokio::time::Instant>>,
    /// Released DELETEs whose object the watch still shows: asked of the
    /// API server once met for a while (`deleted`).
    deleted_checks: deleted::DeleteChecks,
    /// Workloads a queue round is releasing now, without its quota held
    /// (`release_all`): the reconcile's repair of gated pods
    /// (`release_gated`) leaves their pods to that release, so a pod is
    /// never ungated twice.
    releasing: Mutex<HashSet<String>>,
    /// Places for the rounds' releases in flight at once, over every
    /// round (`queue::RELEASES_IN_FLIGHT`): each is a write through the
    /// API server and both webhooks, and rounds that released all they
    /// admitted at once sent the webhooks bursts of a hundred reviews.
    release_places: tokio::sync::Semaphore,
    /// Per quota, by workload: the uid and the mark of each held object
    /// whose queue mark the fold refused (forged, misbound, unreadable).
    /// Told once (one Event), then left out of the rounds and of what asks
    /// for one, until the object or its mark changes.
    bad_marks: Mutex<HashMap<String, BadMarks>>,
    /// Per quota, held by its reconcile and by its queue round: the two
    /// never run at once (a round's releases and the reconcile's repair
    /// of the same workloads would cross).
    serial: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Per quota, its submitters' decayed usage as last read
    /// (`submitters`): what its round orders equals by.
    submitters: submitters::Cache,
    /// Workloads whose GPUs sit idle now, as the last reading of real
    /// usage found them (idle for their quota's `idle.showAfter`): reclaim
    /// takes them first.
    idle: Mutex<HashSet<String>>,
}

impl Context {
    /// Waits (at most `cluster::store::CATCH_UP`) until the service's
    /// store has read every quota version this controller's watch has
    /// delivered. The event that asked for a reconcile or a round came
    /// through that watch, but a parent's children, a borrower's parent
    /// and siblings are read from the store's cache, a watch of its own
    /// that may lag it: a child's queue head or a sibling's release
    /// written just before would be missed, and nothing would ask again.
    /// Whether it did (within the bound).
    pub(super) async fn store_caught_up(&self, name: &str) -> bool {
        let seen = self.quota_seen.load(std::sync::atomic::Ordering::SeqCst);
        let caught_up = self.service.caught_up_to(seen).await;
        if !caught_up {
            tracing::debug!(quota = %name, version = seen, "the store's cache lags the controller's watch; going on with it");
        }
        caught_up
    }

    /// An Event on a workload (`action`: the controller's part that acts,
    /// `reason`: what happened), addressed by the API version its kind is
    /// installed at and its uid as last seen.
    pub(crate) fn notify_workload(
        &self,
        wref: &str,
        warning: bool,
        action: &'static str,
        reason: &'static str,
        note: String,
    ) {
        let kind = crate::cluster::view::kind_of_ref(wref).to_string();
        let api_version = self
            .installed
            .lock()
            .unwrap()
            .get(&kind)
            .map(|ar| ar.api_version.clone())
            .unwrap_or_default();
        if let Some(mut r) = crate::cluster::events::workload_ref(&api_version, wref) {
            r.uid = self.view.lock().unwrap().workload_uid(wref);
            self.events.emit(crate::service::notify::Notice {
                regarding: r,
                warning,
                reason,
                action,
                note,
            });
        }
    }

    /// The context, and the stream of quotas the watches trigger (for
    /// `Controller::reconcile_on`).
    pub fn new(
        client: Client,
        service: Arc<Service>,
        history: Option<Arc<dyn History>>,
        events: Events,
        cfg: ControllerConfig,
    ) -> (
        Arc<Context>,
        UnboundedReceiver<ObjectRef<BizGroupResourceQuota>>,
    ) {
        let (triggers, rx) = Triggers::new();
        let view = View::new(service.keys.clone());
        let ctx = Context {
            client,
            service,
            history,
            events,
            cfg,
            view: Mutex::new(view),
            installed: Mutex::default(),
            triggers,
            retries: Retries::default(),
            missed: Mutex::default(),
            quota_seen: Default::default(),
            gate: Gate::default(),
            borrowers: Mutex::default(),
            fair: fair::Yields::default(),
            wake: Mutex::default(),
            ledger_confirmed: Arc::default(),
            accrued_to: Mutex::default(),
            ledger_unseen: Arc::default(),
            suspended: Mutex::default(),
            scheduler: scheduler::Scheduler::default(),
            scheduler_timers: Mutex::default(),
            deleted_checks: Default::default(),
            submitters: submitters::Cache::default(),
            releasing: Mutex::default(),
            release_places: tokio::sync::Semaphore::new(queue::RELEASES_IN_FLIGHT),
            bad_marks: Mutex::default(),
            serial: Mutex::default(),
            idle: Mutex::default(),
        };
        (Arc::new(ctx), rx)
    }

    fn now(&self) -> i64 {
        self.service.now()
    }

    /// Held while `name` is reconciled or its queue has its round.
    async fn one_at_a_time(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = self
            .serial
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .clone();
        m.lock_owned().await
    }

    fn gauges(&self) {
        let m = &self.service.metrics;
        m.queue_depth.set(self.triggers.depth() as i64);
        let (w, p, r) = {
            let v = self.view.lock().unwrap();
            (v.workload_count(), v.pod_count(), v.run_count())
        };
        m.set_tracked("workloads", w);
        m.set_tracked("pods", p);
        m.set_tracked("pod_runs", r);
    }
}

/// Retry a failed reconcile after a delay that grows with each failure of
/// the same quota in a row (`RETRY_FIRST`, doubled, at most `RETRY_MAX`).
pub fn error_policy(quota: Arc<BizGroupResourceQuota>, error: &Error, ctx: Arc<Context>) -> Action {
    let name = quota.name_any();
    let delay = ctx.retries.next(&name);
    tracing::warn!(quota = %name, error = %error.source, retry_in = ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

/// One term of leadership: the controller's tasks, started by `run`.
pub struct Controller {
    ctx: Arc<Context>,
    triggered: Mutex<Option<UnboundedReceiver<ObjectRef<BizGroupResourceQuota>>>>,
}

impl Controller {
    pub fn new(
        client: Client,
        service: Arc<Service>,
        history: Option<Arc<dyn History>>,
        events: Events,
        cfg: ControllerConfig,
    ) -> Arc<Controller> {
        let (ctx, rx) = Context::new(client, service, history, events, cfg);
        Arc::new(Controller {
            ctx,
            triggered: Mutex::new(Some(rx)),
        })
    }

    /// Run until the task is aborted (leadership lost) or a fatal error.
    pub async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        let ctx = self.ctx.clone();
        let Some(triggered) = self.triggered.lock().unwrap().take() else {
            anyhow::bail!("a controller runs once; make a new one for the next term");
        };
        let mut tasks = JoinSet::new();
        let watermark = ctx.restore().await?;

        // Which workload kinds exist: retried until the API answers, since
        // deciding without it would drop charges of kinds not yet watched.
        let kinds = discovery::until_discovered(&ctx.client).await;
        let mut watched: HashSet<String> = HashSet::new();
        ctx.gate.expect(2 + kinds.len()); // pods + HPAs + each workload kind
        ctx.set_installed(&kinds);
        for (adapter, ar) in kinds {
            watched.insert(kind_key(adapter.group, adapter.kind));
            tasks.spawn(ctx.clone().watch_workloads(adapter, ar, true));
        }
        tasks.spawn(ctx.clone().watch_pods(watermark));
        tasks.spawn(ctx.clone().watch_hpas());
        tasks.spawn(ctx.clone().watch_priority_classes());
        ctx.gate.opened().await;
        {
            let mut v = ctx.view.lock().unwrap();
            // From here on a run recorded after its quota was paid past
            // its start is billed back (`PodRuns`).
            v.set_live();
            tracing::info!(
                workloads = v.workload_count(),
                pods = v.pod_count(),
                "controller caches synced"
            );
        }

        tasks.spawn(ctx.clone().schedule_loop());
        tasks.spawn(ctx.clone().timer_loop());
        tasks.spawn(control(ctx.clone(), triggered));
        ctx.touch_all().await;
        tasks.spawn(ctx.clone().resync_loop());
        tasks.spawn(ctx.clone().recheck_loop());
        tasks.spawn(ctx.clone().discovery_loop(watched));
        tasks.spawn(ctx.clone().summaries_loop());
        if let (Some(cfg), Some(h)) = (ctx.cfg.real_usage.clone(), ctx.history.clone()) {
            tasks.spawn(ctx.clone().read_real_usage_forever(cfg, h));
        }
        if let Some(h) = ctx.history.clone() {
            tasks.spawn(ctx.clone().flush_loop(h.clone()));
            tasks.spawn(sample_forever(ctx.service.clone(), h, ctx.cfg.sample_every));
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
}

/// kube-runtime's `Controller` over the quotas: its store and its own
/// triggers come from the quota watch (`watches::quotas`), the rest from
/// what the other watches, the resync and the recheck touched. Its runner
/// waits for the store's first list before the first reconcile.
async fn control(
    ctx: Arc<Context>,
    triggered: UnboundedReceiver<ObjectRef<BizGroupResourceQuota>>,
) {
    let (reader, writer) = reflector::store();
    let quotas = watches::quotas(ctx.clone(), writer);
    let workers = u16::try_from(ctx.cfg.workers.max(1)).unwrap_or(u16::MAX);
    kube::runtime::Controller::for_stream(quotas, reader)
        .reconcile_on(triggered)
        .with_config(controller::Config::default().concurrency(workers))
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            match result {
                Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
                // Triggered before the store held it (just created: its
                // Apply is reconciled when it comes), or deleted since.
                Err(controller::Error::ObjectNotFound(r)) => {
                    ctx.missed.lock().unwrap().insert(r.name.clone());
                    ctx.triggers.started(&r.name);
                    ctx.gauges();
                }
                Err(e) => tracing::warn!(error = %e, "controller runtime error"),
            }
            std::future::ready(())
        })
        .await;
}

/// `name` read fresh through `api`, and whether it is held back by `hold`
/// (None: gone). What the release's repair and a suspend whose answer was
/// lost ask before they go on.
pub(super) async fn read_held(
    api: &kube::Api<kube::api::DynamicObject>,
    name: &str,
    hold: quota::hold::Hold,
) -> kube::Result<Option<bool>> {
    Ok(api
        .get_opt(name)
        .await?
        .map(|o| serde_json::to_value(&o).is_ok_and(|v| quota::hold::is_held(hold, &v))))
}

#[cfg(test)]
mod tests;
