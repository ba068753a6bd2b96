//! Prometheus metrics: admission latency and decisions, the charge's
//! commit by path and the group commit's batch sizes, CAS conflicts,
//! resync and reconcile durations, the controller's queue, leadership,
//! watch errors, reclaim, the email outbox, deferred releases, re-checks
//! and the listeners' connections.

use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub mod real_usage;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub endpoint: String,
    pub decision: String,
}

/// A background task beside admissions: `alert_sweep`, `usage_sample`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    pub path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    pub listener: String,
    pub reason: String,
}

/// Which cap refused a heavy request: `all` (in all) or `user` (per person).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub scope: String,
}

/// A request a router refused for a limit: its listener and status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub listener: String,
    pub code: String,
}

/// Why a status write read its quota whole (`quota_rereads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reread {
    /// No copy kept.
    Uncached,
    /// A change asked on a given version.
    Versioned,
    /// A decision that writes nothing or refuses, made on a kept copy,
    /// proven on a fresh one.
    Unproven,
    /// A compare-and-swap lost, and the watch did not bring the newer
    /// version in time.
    Conflict,
    /// A queue round's read, its kept copy not proven current
    /// (`Service::proven`).
    Round,
}

impl Reread {
    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Reread::Uncached => "uncached",
            Reread::Versioned => "versioned",
            Reread::Unproven => "unproven",
            Reread::Conflict => "conflict",
            Reread::Round => "round",
        }
    }
}

/// Which bound of a queue refused a new entry (`ledger::Full::cause`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub quota: String,
    pub waiting: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabels {
    pub quota: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptLabels {
    pub quota: String,
    pub result: String,
}

/// What happens to a preemption mark (docs/queueing.md §6).
pub const PREEMPTION_RESULTS: [&str; 4] = ["marked", "cancelled", "executed", "failed"];

type HistogramFamily = Family<EndpointLabels, Histogram, fn() -> Histogram>;

/// Quotas whose queue is exported under their own `quota` label, per
/// process. A queue is a quota's choice (`queueing: Queue`) and a tree may
/// hold 10,000 quotas: at most this many names keep the queue metrics to
/// a few thousand series (each quota: 4 length gauges, the oldest wait, a
/// histogram of 15 buckets). Quotas beyond it count in the totals
/// (`quota="_all"`) and their waits in `quota="_other"`.
pub const QUEUE_METRIC_QUOTAS: usize = 200;

/// The four ways an entry waits, as `status.queue` spells them.
pub const WAITING: [&str; 4] = ["Quota", "Budget", "Turn", "Never"];

/// What the controller last saw of each quota's queue, for the totals.
#[derive(Default)]
struct QueueSeen {
    /// Per quota: entries by `WAITING`, and the oldest wait in seconds.
    by_quota: std::collections::HashMap<String, ([i64; 4], i64)>,
    /// Quotas given a label of their own (at most `QUEUE_METRIC_QUOTAS`).
    labelled: std::collections::HashSet<String>,
}

pub struct Metrics {
    registry: Registry,
    pub admission_duration: HistogramFamily,
    pub decisions: Family<DecisionLabels, Counter>,
    /// A workload charge from its arrival in the service to its durable
    /// answer, by path: `group` (the quota's group commit), `borrowing`
    /// (a loan from the parent first), `dry_run`.
    pub admission_commit_duration: Family<PathLabels, Histogram, fn() -> Histogram>,
    /// Decisions one group-commit write carried.
    pub admission_batch_size: Histogram,
    /// Group-commit writes that failed (every caller of the batch was
    /// answered with the failure).
    pub admission_batches_failed: Counter,
    /// Group-commit batches decided under the row's lock at once, their
    /// quota being written by another replica too.
    pub admission_batches_locked: Counter,
    /// Quota writes one SQL statement carried (`store::sql::Writes`).
    pub store_write_batch_size: Histogram,
    pub cas_conflicts: Counter,
    pub cas_exhausted: Counter,
    /// Whole reads of a quota a read-modify-write made, by why
    /// (`count_quota_reread`).
    pub quota_rereads: Family<CauseLabels, Counter>,
    pub reconcile_duration: Histogram,
    /// One quota's reconcile (controller).
    pub quota_reconcile_duration: Histogram,
    pub reconciles: Family<ResultLabels, Counter>,
    pub queue_depth: Gauge,
    pub leader: Gauge,
    pub watch_errors: Family<KindLabels, Counter>,
    pub reclaim_actions: Family<ResultLabels, Counter>,
    pub events_dropped: Counter,
    /// Kubernetes Events the API server refused or that could not be sent.
    pub events_failed: Counter,
    /// What the controller tracks: governed workloads, pods, pod runs.
    pub tracked: Family<KindLabels, Gauge>,
    /// Email accepted by the SMTP server.
    pub mail_sent: Counter,
    /// Send attempts that failed (each is retried with backoff).
    pub mail_failures: Counter,
    /// Outbox rows not yet accepted by the SMTP server.
    pub mail_queue_depth: Gauge,
    /// Workload releases a DELETE could not write at once (retried in the
    /// background; the DELETE was allowed).
    pub deferred_releases: Counter,
    /// One run of a background task over every quota (the alert sweep,
    /// the usage sampler), start to end, yields and waits included.
    pub background_duration: Family<TaskLabels, Histogram, fn() -> Histogram>,
    /// Deferred releases still not written after every retry.
    pub deferred_releases_abandoned: Counter,
    /// Deferred releases not started: the cap of tasks at once was reached
    /// (left to the controller's reconcile).
    pub deferred_releases_over_cap: Counter,
    /// Quotas re-checked against the cluster after a review lowered a charge.
    pub rechecks: Counter,
    /// Summaries for people (`kubectl get`'s columns) restated by the
    /// controller, without a write of the quota's own.
    pub summaries_restated: Counter,
    /// Lookups of a workload's quota answered by a LIST of every quota:
    /// the workload could not be read, and the watch's copy could not
    /// answer within `cluster::store::CATCH_UP` (cluster mode).
    pub workload_lookup_lists: Counter,
    /// Lookups whose GET of the workload itself failed (RBAC, an API
    /// error), answered by a LIST of every quota instead (cluster mode).
    pub workload_lookup_read_failures: Counter,
    /// Requests answered 503 because the listener's budget of buffered body
    /// bytes was spent.
    pub body_budget_exhausted: Family<ListenerLabels, Counter>,
    /// Webhook requests refused for a missing or wrong bearer token.
    pub webhook_unauthorized: Counter,
    /// Open connections per listener.
    pub open_connections: Family<ListenerLabels, Gauge>,
    /// Of those, TLS connections over their address's cap waiting for a
    /// place (`listen::Peers::wait`), per listener.
    pub waiting_connections: Family<ListenerLabels, Gauge>,
    /// Connections closed by a limit or a timeout, per listener and reason.
    pub connections_closed: Family<ClosedLabels, Counter>,
    /// Workloads waiting in a quota's queue, by what they wait for
    /// (controller, on the leader).
    pub queue_length: Family<QueueLabels, Gauge>,
    /// How long the oldest entry of a quota's queue has waited, seconds.
    pub queue_oldest_wait: Family<QuotaLabels, Gauge>,
    /// Time from joining a quota's queue to admission from it, seconds.
    pub queue_wait: Family<QuotaLabels, Histogram, fn() -> Histogram>,
    queue_seen: std::sync::Mutex<QueueSeen>,
    /// The queue's preemptions of lower-priority work, per quota (capped
    /// as the queue's series) and `PREEMPTION_RESULTS`.
    pub queue_preemptions: Family<PreemptLabels, Counter>,
    /// New queue entries refused by a bound of the queue, by cause.
    pub queue_refused: Family<CauseLabels, Counter>,
    /// Queue rounds the scheduler ran, every quota together.
    pub queue_rounds: Counter,
    /// Of those, the rounds that admitted nothing.
    pub queue_rounds_idle: Counter,
    /// Queue rounds that left room to a fairer sibling (fair sharing),
    /// and of those, the ones that admitted nothing.
    pub queue_rounds_yielded: Family<CauseLabels, Counter>,
    /// Rounds asked for and not run: nothing they read had changed since
    /// the quota's last round that planned no admission.
    pub queue_rounds_skipped: Counter,
    /// Rounds run, by what made them differ from the quota's last idle
    /// round (`Scheduler::why_run`).
    pub queue_rounds_run: Family<CauseLabels, Counter>,
    /// Of the rounds run, those that admitted nothing, by the same cause.
    pub queue_rounds_run_idle: Family<CauseLabels, Counter>,
    /// One queue round, from its reads to its write (not the releases).
    pub queue_round_duration: Histogram,
    /// Heavy requests (pages with charts, charts, reports, exports)
    /// answered 429 by a cap, by scope (`heavy::Refused::scope`).
    pub heavy_refused: Family<ScopeLabels, Counter>,
    /// Requests a router answered 413 (too large) or 429 (too many), by
    /// listener and code.
    pub requests_refused: Family<RefusedLabels, Counter>,
    /// Real usage read from Prometheus (`real_usage`).
    pub real_usage: real_usage::RealUsageMetrics,
}

fn wait_histogram() -> Histogram {
    // 1 min … ~11 days
    Histogram::new(exponential_buckets(60.0, 2.0, 15))
}

fn latency_histogram() -> Histogram {
    // 100 µs … ~1.6 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bizrq");
        let admission_duration: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let decisions = Family::<DecisionLabels, Counter>::default();
        let cas_conflicts = Counter::default();
        let cas_exhausted = Counter::default();
        let admission_commit_duration: Family<PathLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        // 1 … 1024
        let admission_batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 11));
        let admission_batches_failed = Counter::default();
        let admission_batches_locked = Counter::default();
        let store_write_batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 9));
        registry.register(
            "store_write_batch_size",
            "Quota writes (of different quotas) carried by one SQL statement: writes that arrive while another is under way go out together",
            store_write_batch_size.clone(),
        );
        registry.register(
            "admission_batches_locked",
            "Group-commit batches decided under the quota row's lock at once, because another replica writes the quota too (no optimistic compare-and-swap first)",
            admission_batches_locked.clone(),
        );
        registry.register(
            "admission_commit_duration_seconds",
            "Time from a workload charge's arrival in the service to its durable answer, by path: group (charged in its quota's group commit), borrowing (a loan from the parent first), dry_run, denied (the quota or a budget refused; nothing written), error (the write failed, or contention)",
            admission_commit_duration.clone(),
        );
        registry.register(
            "admission_batch_size",
            "Admission decisions carried by one group-commit write to a quota",
            admission_batch_size.clone(),
        );
        registry.register(
            "admission_batches_failed",
            "Group-commit writes that failed; every admission of the batch got the failure",
            admission_batches_failed.clone(),
        );
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "admission_duration_seconds",
            "Time to answer an AdmissionReview, by endpoint",
            admission_duration.clone(),
        );
        registry.register(
            "admission_decisions",
            "AdmissionReview answers by endpoint and decision",
            decisions.clone(),
        );
        registry.register(
            "cas_conflicts",
            "Status writes that lost a compare-and-swap and were retried",
            cas_conflicts.clone(),
        );
        let quota_rereads = Family::<CauseLabels, Counter>::default();
        registry.register(
            "quota_rereads",
            "Whole reads of a quota a status write made before deciding, by cause: uncached (no copy kept), versioned (a change asked on a given version), unproven (a decision that writes nothing or refuses, made on a kept copy, proven on a fresh one), conflict (a compare-and-swap lost, and the watch did not bring the newer version within 100 ms), round (a queue round's read whose kept copy was not proven current)",
            quota_rereads.clone(),
        );
        registry.register(
            "cas_retries_exhausted",
            "Changes refused after every compare-and-swap attempt conflicted",
            cas_exhausted.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of a full resync (every quota)",
            reconcile_duration.clone(),
        );
        let quota_reconcile_duration = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        let reconciles = Family::<ResultLabels, Counter>::default();
        let queue_depth = Gauge::default();
        let leader = Gauge::default();
        let watch_errors = Family::<KindLabels, Counter>::default();
        let reclaim_actions = Family::<ResultLabels, Counter>::default();
        let events_dropped = Counter::default();
        let events_failed = Counter::default();
        registry.register(
            "quota_reconcile_duration_seconds",
            "Duration of one quota's reconcile by the controller",
            quota_reconcile_duration.clone(),
        );
        registry.register(
            "reconciles",
            "Quota reconciles by result (written, unchanged, error)",
            reconciles.clone(),
        );
        registry.register(
            "queue_depth",
            "Quotas waiting in the controller's work queue",
            queue_depth.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the controller Lease",
            leader.clone(),
        );
        registry.register(
            "watch_errors",
            "Watch stream errors by kind (each is retried with backoff)",
            watch_errors.clone(),
        );
        registry.register(
            "reclaim_actions",
            "Reclaim marks, executions and clears",
            reclaim_actions.clone(),
        );
        registry.register(
            "events_dropped",
            "Kubernetes Events not published because the queue was full",
            events_dropped.clone(),
        );
        registry.register(
            "events_failed",
            "Kubernetes Events the API server refused or that could not be sent (each logged at warn)",
            events_failed.clone(),
        );
        let tracked = Family::<KindLabels, Gauge>::default();
        registry.register(
            "controller_tracked",
            "Objects the controller tracks: governed workloads, pods, unpaid pod runs",
            tracked.clone(),
        );
        let mail_sent = Counter::default();
        let mail_failures = Counter::default();
        let mail_queue_depth = Gauge::default();
        registry.register(
            "mail_sent",
            "Emails accepted by the SMTP server",
            mail_sent.clone(),
        );
        registry.register(
            "mail_failures",
            "Email send attempts that failed and will be retried",
            mail_failures.clone(),
        );
        registry.register(
            "mail_queue_depth",
            "Emails in the outbox not yet accepted by the SMTP server",
            mail_queue_depth.clone(),
        );
        let deferred_releases = Counter::default();
        let background_duration: Family<TaskLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 16)));
        registry.register(
            "background_duration_seconds",
            "One run of a background task over every quota (alert_sweep, usage_sample)",
            background_duration.clone(),
        );
        let deferred_releases_abandoned = Counter::default();
        let deferred_releases_over_cap = Counter::default();
        let body_budget_exhausted = Family::<ListenerLabels, Counter>::default();
        let rechecks = Counter::default();
        let summaries_restated = Counter::default();
        let workload_lookup_lists = Counter::default();
        registry.register(
            "workload_lookup_lists",
            "Lookups of which quota holds a workload answered by a LIST of every quota: a workload that could not be read (its GET failed or found it gone; a DELETE without a readable old object; a deferred release), after the quota watch's copy had not caught up with bizrq's own latest quota write within 1 s",
            workload_lookup_lists.clone(),
        );
        let workload_lookup_read_failures = Counter::default();
        registry.register(
            "workload_lookup_read_failures",
            "Lookups of which quota holds a workload (a /scale, an HPA's target) whose GET of the workload failed (RBAC, an API error), answered by a LIST of every quota instead",
            workload_lookup_read_failures.clone(),
        );
        let webhook_unauthorized = Counter::default();
        let open_connections = Family::<ListenerLabels, Gauge>::default();
        let waiting_connections = Family::<ListenerLabels, Gauge>::default();
        let connections_closed = Family::<ClosedLabels, Counter>::default();
        registry.register(
            "deferred_releases",
            "Workload releases a DELETE could not write at once, retried in the background (the DELETE was allowed)",
            deferred_releases.clone(),
        );
        registry.register(
            "deferred_releases_abandoned",
            "Deferred releases still failing after every retry (left to the controller's reconcile)",
            deferred_releases_abandoned.clone(),
        );
        registry.register(
            "deferred_releases_over_cap",
            "Deferred releases not started because the cap of background releases was reached (left to the controller's reconcile)",
            deferred_releases_over_cap.clone(),
        );
        registry.register(
            "body_budget_exhausted",
            "Requests answered 503 because the listener's budget of buffered request-body bytes was spent",
            body_budget_exhausted.clone(),
        );
        registry.register(
            "rechecks",
            "Quotas re-checked against the cluster after an admission review lowered a charge",
            rechecks.clone(),
        );
        registry.register(
            "summaries_restated",
            "Quota summaries (kubectl get's columns) restated by the controller after their subtree changed",
            summaries_restated.clone(),
        );
        registry.register(
            "webhook_unauthorized",
            "Webhook requests refused for a missing or wrong bearer token",
            webhook_unauthorized.clone(),
        );
        registry.register(
            "open_connections",
            "Open connections by listener (http, webhook)",
            open_connections.clone(),
        );
        registry.register(
            "waiting_connections",
            "Of the open connections, those over their address's cap waiting for a place (TLS listeners: an API server's burst of dials), by listener",
            waiting_connections.clone(),
        );
        registry.register(
            "connections_closed",
            "Connections closed by a limit or timeout, by listener and reason (limit, peer_limit: over an address's cap, closed at accept or after waiting the handshake timeout for a place, handshake_evicted, idle, header_timeout, tls_handshake_timeout, tls_error)",
            connections_closed.clone(),
        );
        let queue_length = Family::<QueueLabels, Gauge>::default();
        let queue_oldest_wait = Family::<QuotaLabels, Gauge>::default();
        let queue_wait: Family<QuotaLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(wait_histogram);
        registry.register(
            "admission_queue_length",
            "Workloads waiting in a quota's queue, by what they wait for (Quota, Budget, Turn, Never); quota=\"_all\" sums every quota; set by the controller's leader",
            queue_length.clone(),
        );
        registry.register(
            "admission_queue_oldest_wait_seconds",
            "How long the oldest entry of a quota's queue has waited; set by the controller's leader",
            queue_oldest_wait.clone(),
        );
        registry.register(
            "admission_queue_wait_seconds",
            "Time from joining a quota's queue to being admitted from it by the controller",
            queue_wait.clone(),
        );
        let queue_preemptions = Family::<PreemptLabels, Counter>::default();
        registry.register(
            "admission_queue_preemptions",
            "Lower-priority workloads a quota's queue preempted for a waiting entry: marked (owners warned), cancelled (room came otherwise), executed (suspended and queued again), failed (the suspend failed)",
            queue_preemptions.clone(),
        );
        let queue_refused = Family::<CauseLabels, Counter>::default();
        registry.register(
            "admission_queue_refused",
            "Workloads refused a place in a quota's queue by its bounds: queue_full (the queue holds the most it may), submitter_share (the submitter's share, queueing.maxPerSubmitter, is full)",
            queue_refused.clone(),
        );
        let queue_rounds = Counter::default();
        registry.register(
            "admission_queue_rounds",
            "Queue rounds the controller's scheduler ran (each asked for by a reconcile of a quota with a queue, held marked objects or preemption marks, or by room freed)",
            queue_rounds.clone(),
        );
        let queue_rounds_idle = Counter::default();
        registry.register(
            "admission_queue_rounds_idle",
            "Queue rounds that ended without error and admitted nothing (the quota full, its queue's heads waiting for room, or nothing new since the last round)",
            queue_rounds_idle.clone(),
        );
        let queue_rounds_yielded = Family::<CauseLabels, Counter>::default();
        registry.register(
            "admission_queue_rounds_yielded",
            "Queue rounds that held back admissions a fairer sibling goes before (fair sharing), by what else they did: admitted (some, within what they kept) or nothing",
            queue_rounds_yielded.clone(),
        );
        let queue_rounds_skipped = Counter::default();
        registry.register(
            "admission_queue_rounds_skipped",
            "Queue rounds asked for and not run, because nothing they read had changed since the quota's last round that planned no admission (its version, the room its parent could lend it, its held objects, the PriorityClasses), or only the room to borrow grew while a sibling's round may take it back first; such a quota still gets a round within 10 s of being asked. Also rounds asked for by queued creates alone, none of which could be admitted (folded by a round within 2 s)",
            queue_rounds_skipped.clone(),
        );
        let queue_rounds_run = Family::<CauseLabels, Counter>::default();
        registry.register(
            "admission_queue_rounds_run",
            "Queue rounds run, by what set each apart from the quota's last round that planned no admission: first (the quota's first round this process runs, or its inputs unread), after-partial, after-fold-full, after-repair, after-preempt, after-release-failed, after-error, after-limits (its last round was kept as no such round: it admitted fewer than it planned, or admitted while its fold left marked objects out, repaired a crash, preempted, saw a release fail, failed, or started or stopped borrowing), timer (a time a round asked for came), due (its record ran out: 10 s, or a time a round asked to be woken at), version (the quota's version), objects (its held objects), classes (the PriorityClasses), left-room (room its last round left to a fairer sibling is still there for what it queues), room (more room to borrow), arrivals (queued creates one of which could be admitted, or kept no longer)",
            queue_rounds_run.clone(),
        );
        let queue_rounds_run_idle = Family::<CauseLabels, Counter>::default();
        registry.register(
            "admission_queue_rounds_run_idle",
            "Of the queue rounds run, those that ended without error and admitted nothing, by the same cause as bizrq_admission_queue_rounds_run_total",
            queue_rounds_run_idle.clone(),
        );
        let queue_round_duration = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "admission_queue_round_duration_seconds",
            "Duration of one quota's queue round, from its reads to its one write (the releases of what it admitted after it are not counted)",
            queue_round_duration.clone(),
        );
        let heavy_refused = Family::<ScopeLabels, Counter>::default();
        registry.register(
            "heavy_refused",
            "Heavy requests (pages with charts, charts, reports, exports) answered 429 by a cap: scope all (--heavy-requests in all) or user (--heavy-requests-per-user)",
            heavy_refused.clone(),
        );
        let requests_refused = Family::<RefusedLabels, Counter>::default();
        registry.register(
            "requests_refused",
            "Requests a listener's router answered 413 (body too large) or 429 (a login, transfer, contention or heavy-request cap), by listener (http, webhook) and code; the listeners' own refusals are body_budget_exhausted and connections_closed",
            requests_refused.clone(),
        );
        let real_usage = real_usage::RealUsageMetrics::register(&mut registry);
        Metrics {
            real_usage,
            queue_refused,
            heavy_refused,
            requests_refused,
            queue_preemptions,
            queue_rounds,
            queue_rounds_idle,
            queue_rounds_yielded,
            queue_rounds_skipped,
            queue_rounds_run,
            queue_rounds_run_idle,
            queue_round_duration,
            queue_length,
            queue_oldest_wait,
            queue_wait,
            queue_seen: Default::default(),
            registry,
            deferred_releases,
            background_duration,
            deferred_releases_abandoned,
            deferred_releases_over_cap,
            body_budget_exhausted,
            rechecks,
            summaries_restated,
            workload_lookup_lists,
            workload_lookup_read_failures,
            webhook_unauthorized,
            open_connections,
            waiting_connections,
            connections_closed,
            mail_sent,
            mail_failures,
            mail_queue_depth,
            tracked,
            quota_reconcile_duration,
            reconciles,
            queue_depth,
            leader,
            watch_errors,
            reclaim_actions,
            events_dropped,
            events_failed,
            admission_duration,
            decisions,
            admission_commit_duration,
            admission_batch_size,
            admission_batches_failed,
            admission_batches_locked,
            store_write_batch_size,
            cas_conflicts,
            cas_exhausted,
            quota_rereads,
            reconcile_duration,
        }
    }
}

impl Metrics {
    /// A whole read of a quota by a status write, counted by why.
    pub fn count_quota_reread(&self, why: Reread) {
        self.quota_rereads
            .get_or_create(&CauseLabels {
                cause: why.label().to_string(),
            })
            .inc();
    }

    /// A new queue entry refused by a bound (`ledger::Full::cause`).
    pub fn count_queue_refused(&self, cause: &str) {
        self.queue_refused
            .get_or_create(&CauseLabels {
                cause: cause.to_string(),
            })
            .inc();
    }

    /// A router's answer refused for a limit (413, 429), counted.
    pub fn count_refused(&self, listener: &str, code: u16) {
        if matches!(code, 413 | 429) {
            self.requests_refused
                .get_or_create(&RefusedLabels {
                    listener: listener.to_string(),
                    code: code.to_string(),
                })
                .inc();
        }
    }

    /// A background task's run ended (`task` as in `TaskLabels`): its
    /// duration observed, and logged under the target `bizrq::background`
    /// (debug), where the admission bench reads when sweeps ran.
    pub fn background_done(&self, task: &str, started: std::time::Instant, quotas: usize) {
        let took = started.elapsed();
        self.background_duration
            .get_or_create(&TaskLabels {
                task: task.to_string(),
            })
            .observe(took.as_secs_f64());
        tracing::debug!(
            target: "bizrq::background",
            task,
            quotas,
            ms = took.as_secs_f64() * 1e3,
            "background task done"
        );
    }

    pub fn count_reconcile(&self, result: &str) {
        self.reconciles
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    pub fn count_reclaim(&self, result: &str) {
        self.reclaim_actions
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    pub fn set_tracked(&self, kind: &str, n: usize) {
        self.tracked
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(n as i64);
    }

    pub fn connections(&self, listener: &str) -> Gauge {
        self.open_connections
            .get_or_create(&ListenerLabels {
                listener: listener.into(),
            })
            .clone()
    }

    pub fn waiting_connections(&self, listener: &str) -> Gauge {
        self.waiting_connections
            .get_or_create(&ListenerLabels {
                listener: listener.into(),
            })
            .clone()
    }

    pub fn count_connection_closed(&self, listener: &str, reason: &str) {
        self.connections_closed
            .get_or_create(&ClosedLabels {
                listener: listener.into(),
                reason: reason.into(),
            })
            .inc();
    }

    pub fn count_watch_error(&self, kind: &str) {
        self.watch_errors
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
    }

    pub fn observe_admission(&self, endpoint: &str, decision: &str, seconds: f64) {
        self.admission_duration
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.into(),
            })
            .observe(seconds);
        self.decisions
            .get_or_create(&DecisionLabels {
                endpoint: endpoint.into(),
                decision: decision.into(),
            })
            .inc();
    }

    pub fn observe_commit(&self, path: &str, seconds: f64) {
        self.admission_commit_duration
            .get_or_create(&PathLabels { path: path.into() })
            .observe(seconds);
    }

    /// Whether `quota` has (or now gets) a label of its own; the first
    /// `QUEUE_METRIC_QUOTAS` quotas seen do.
    fn queue_label(seen: &mut QueueSeen, quota: &str) -> bool {
        if seen.labelled.contains(quota) {
            return true;
        }
        if seen.labelled.len() < QUEUE_METRIC_QUOTAS {
            seen.labelled.insert(quota.to_string());
            return true;
        }
        false
    }

    /// A quota's queue as the controller's round left it: entries by
    /// `WAITING` and the oldest wait (seconds). An empty queue clears it.
    pub fn set_queue(&self, quota: &str, counts: [i64; 4], oldest_seconds: i64) {
        let mut seen = self.queue_seen.lock().unwrap();
        let empty = counts.iter().all(|c| *c == 0);
        if empty {
            seen.by_quota.remove(quota);
        } else {
            seen.by_quota
                .insert(quota.to_string(), (counts, oldest_seconds));
        }
        // A label once given stays (an emptied queue reads 0), so the
        // names exported never exceed the cap; a deleted quota frees its.
        if (!empty && Self::queue_label(&mut seen, quota)) || seen.labelled.contains(quota) {
            for (w, n) in WAITING.iter().zip(counts) {
                self.queue_length
                    .get_or_create(&QueueLabels {
                        quota: quota.into(),
                        waiting: (*w).into(),
                    })
                    .set(n);
            }
            self.queue_oldest_wait
                .get_or_create(&QuotaLabels {
                    quota: quota.into(),
                })
                .set(oldest_seconds);
        }
        let mut total = [0i64; 4];
        for (c, _) in seen.by_quota.values() {
            for (t, n) in total.iter_mut().zip(c) {
                *t = t.saturating_add(*n);
            }
        }
        for (w, n) in WAITING.iter().zip(total) {
            self.queue_length
                .get_or_create(&QueueLabels {
                    quota: "_all".into(),
                    waiting: (*w).into(),
                })
                .set(n);
        }
    }

    /// A deleted quota's queue series go, and its label with them.
    pub fn forget_queue(&self, quota: &str) {
        let mut seen = self.queue_seen.lock().unwrap();
        seen.by_quota.remove(quota);
        if seen.labelled.remove(quota) {
            let q = || QuotaLabels {
                quota: quota.into(),
            };
            for w in WAITING {
                self.queue_length.remove(&QueueLabels {
                    quota: quota.into(),
                    waiting: w.into(),
                });
            }
            self.queue_oldest_wait.remove(&q());
            self.queue_wait.remove(&q());
            for r in PREEMPTION_RESULTS {
                self.queue_preemptions.remove(&PreemptLabels {
                    quota: quota.into(),
                    result: r.into(),
                });
            }
        }
    }

    /// An entry of `quota` admitted from its queue after `seconds`.
    pub fn observe_queue_wait(&self, quota: &str, seconds: f64) {
        let mut seen = self.queue_seen.lock().unwrap();
        let label = if Self::queue_label(&mut seen, quota) {
            quota
        } else {
            "_other"
        };
        self.queue_wait
            .get_or_create(&QuotaLabels {
                quota: label.into(),
            })
            .observe(seconds);
    }

    /// A preemption mark of `quota`'s queue reached `result`
    /// (`PREEMPTION_RESULTS`).
    pub fn count_preemption(&self, quota: &str, result: &str) {
        let mut seen = self.queue_seen.lock().unwrap();
        let label = if Self::queue_label(&mut seen, quota) {
            quota
        } else {
            "_other"
        };
        self.queue_preemptions
            .get_or_create(&PreemptLabels {
                quota: label.into(),
                result: result.into(),
            })
            .inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod queue_tests {
    use super::*;

    #[test]
    fn queue_series_are_capped_per_quota_and_summed() {
        let m = Metrics::default();
        for i in 0..QUEUE_METRIC_QUOTAS + 5 {
            m.set_queue(&format!("q{i}"), [1, 0, 2, 0], 60);
            m.observe_queue_wait(&format!("q{i}"), 90.0);
        }
        let text = m.render();
        let labelled = text
            .lines()
            .filter(|l| l.starts_with("bizrq_admission_queue_oldest_wait_seconds{"))
            .count();
        assert_eq!(labelled, QUEUE_METRIC_QUOTAS, "at most the cap of names");
        let total = (QUEUE_METRIC_QUOTAS + 5) as i64;
        assert!(text.contains(&format!(
            "bizrq_admission_queue_length{{quota=\"_all\",waiting=\"Quota\"}} {total}"
        )));
        assert!(text.contains(&format!(
            "bizrq_admission_queue_length{{quota=\"_all\",waiting=\"Turn\"}} {}",
            2 * total
        )));
        assert!(text.contains("bizrq_admission_queue_wait_seconds_count{quota=\"_other\"} 5"));
        // An emptied queue reads 0 under its label; a deleted quota's go.
        m.set_queue("q0", [0; 4], 0);
        let text = m.render();
        assert!(text.contains("bizrq_admission_queue_length{quota=\"q0\",waiting=\"Quota\"} 0"));
        m.forget_queue("q0");
        assert!(!m.render().contains("quota=\"q0\""));
    }

    #[test]
    fn preemptions_count_per_quota_under_the_same_cap() {
        let m = Metrics::default();
        for i in 0..QUEUE_METRIC_QUOTAS + 3 {
            m.count_preemption(&format!("q{i}"), "marked");
        }
        m.count_preemption("q0", "executed");
        let text = m.render();
        assert!(text
            .contains("bizrq_admission_queue_preemptions_total{quota=\"q0\",result=\"marked\"} 1"));
        assert!(text.contains(
            "bizrq_admission_queue_preemptions_total{quota=\"q0\",result=\"executed\"} 1"
        ));
        assert!(text.contains(
            "bizrq_admission_queue_preemptions_total{quota=\"_other\",result=\"marked\"} 3"
        ));
        m.forget_queue("q0");
        assert!(!m.render().contains("quota=\"q0\""));
    }
}
