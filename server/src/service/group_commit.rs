//! Group commit per quota: admissions to one quota that arrive while its
//! last write is under way are decided together, one after another in the
//! order they arrived, on the latest version, and written as one
//! compare-and-swap (one status write, one statement). Each caller gets
//! its answer only once that write is durable; a write that fails answers
//! every caller of the batch with the failure, so nobody is told allowed.
//!
//! The first arrival for an idle quota starts its leader: a task of its
//! own (a caller that goes away, such as a review whose client hung up,
//! cannot strand the others), which takes the quota's name lock (so the
//! one-at-a-time writers of `Service::modify` and the batches of one quota
//! never interleave in this process), takes everything queued, and runs
//! the compare-and-swap loop of `modify` with the whole batch as its
//! decision (`quota::batch`): a lost swap re-reads and decides the whole
//! batch again (with what queued meanwhile, after it), so across replicas
//! the version still decides and nothing is over-admitted. Then it takes
//! the next batch, until none is queued.

use super::cache::{Cache, NameLocks, Proof};
use super::{Clock, ServiceError, MAX_ATTEMPTS};
use crate::metrics::{Metrics, Reread};
use crate::store::{QuotaStore, StoreError, Stored};
use quota::batch;
use quota::cash::QosMultipliers;
use quota::object::Quota;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Decisions one write carries at most; more wait for the next.
pub(super) const MAX_BATCH: usize = 256;

type Answer = Result<Box<dyn Any + Send>, ServiceError>;
type Decide =
    Box<dyn FnMut(&mut Quota) -> Result<(bool, Box<dyn Any + Send>), ServiceError> + Send>;

/// One caller's decision, waiting for its quota's leader.
pub(super) struct Job {
    decide: Decide,
    done: oneshot::Sender<Answer>,
}

/// Per quota, the jobs waiting for its leader. An entry exists exactly
/// while a leader runs for that quota.
#[derive(Default)]
pub(super) struct Queues(Mutex<HashMap<String, Vec<Job>>>);

impl Queues {
    /// Queues `job`; true when no leader runs for `name` (the caller starts one).
    fn push(&self, name: &str, job: Job) -> bool {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match q.get_mut(name) {
            Some(jobs) => {
                jobs.push(job);
                false
            }
            None => {
                q.insert(name.to_string(), vec![job]);
                true
            }
        }
    }

    /// Up to `max` jobs, oldest first. With `last`, an empty queue ends the
    /// leader: its entry goes, in the same step, so the next arrival starts
    /// another.
    fn take(&self, name: &str, max: usize, last: bool) -> Vec<Job> {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(jobs) = q.get_mut(name) else {
            return Vec::new();
        };
        if jobs.is_empty() {
            if last {
                q.remove(name);
            }
            return Vec::new();
        }
        let n = jobs.len().min(max);
        jobs.drain(..n).collect()
    }
}

/// How long a quota that lost a compare-and-swap to another writer goes
/// straight to the store's locked read-modify-write.
const CONTENDED_FOR: std::time::Duration = std::time::Duration::from_secs(2);
/// Quotas remembered as contended at most (the oldest marks go first).
const CONTENDED_MAX: usize = 4096;

/// Quotas that another replica writes too, with when that was last seen.
/// Their batches skip the optimistic swap on the cached copy — which such
/// a quota's cache almost always loses, paying a whole status write for
/// nothing — and decide under the row's lock at once (where the store has
/// one). The mark is renewed whenever the locked read finds a version this
/// process did not write, and lapses `CONTENDED_FOR` after the last sign.
#[derive(Default)]
pub(super) struct Contended(Mutex<HashMap<String, std::time::Instant>>);

impl Contended {
    fn mark(&self, name: &str) {
        let now = std::time::Instant::now();
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= CONTENDED_MAX && !m.contains_key(name) {
            m.retain(|_, at| now.duration_since(*at) < CONTENDED_FOR);
            if m.len() >= CONTENDED_MAX {
                return;
            }
        }
        m.insert(name.to_string(), now);
    }

    fn is(&self, name: &str) -> bool {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(name).is_some_and(|at| at.elapsed() < CONTENDED_FOR)
    }
}

/// What a leader needs of the service, owned (it outlives any one caller).
#[derive(Clone)]
pub(super) struct Leader {
    pub store: Arc<dyn QuotaStore>,
    pub cache: Arc<Cache>,
    pub locks: Arc<NameLocks>,
    pub queues: Arc<Queues>,
    pub contended: Arc<Contended>,
    pub metrics: Arc<Metrics>,
    pub changed: Arc<super::changed::Changed>,
    pub clock: Clock,
    pub prices: QosMultipliers,
    pub price_book: Arc<super::prices::PriceBook>,
    pub accrue_from_ledger: bool,
}

impl super::Service {
    fn leader(&self) -> Leader {
        Leader {
            store: self.store.clone(),
            cache: self.cache.clone(),
            locks: self.locks.clone(),
            queues: self.queues.clone(),
            contended: self.contended.clone(),
            metrics: self.metrics.clone(),
            changed: self.changed.clone(),
            clock: self.clock.clone(),
            prices: self.prices,
            price_book: self.price_book.clone(),
            accrue_from_ledger: self.accrue_from_ledger,
        }
    }

    /// `update_status` through the quota's group commit: `decide` runs in
    /// the leader's batch, in arrival order, on the version the batch
    /// writes; its answer comes back once that write is durable.
    pub(super) async fn commit<T: Send + 'static>(
        &self,
        name: &str,
        mut decide: impl FnMut(&mut Quota) -> Result<(bool, T), ServiceError> + Send + 'static,
    ) -> Result<T, ServiceError> {
        let (done, answer) = oneshot::channel();
        let job = Job {
            decide: Box::new(move |q| {
                decide(q).map(|(changed, out)| (changed, Box::new(out) as Box<dyn Any + Send>))
            }),
            done,
        };
        if self.queues.push(name, job) {
            let (leader, name) = (self.leader(), name.to_string());
            let lead = async move { leader.lead(&name).await };
            // On the admissions' runtime whoever arrived first (the
            // controller's runtime is niced: `Service::leaders_on`).
            match &self.leaders_on {
                Some(rt) => drop(rt.spawn(lead)),
                None => drop(tokio::spawn(lead)),
            }
        }
        let out = answer.await.map_err(|_| {
            ServiceError::Internal("the group commit of this quota stopped before answering".into())
        })??;
        Ok(*out
            .downcast::<T>()
            .expect("a job's answer has the type its caller gave"))
    }
}

impl Leader {
    async fn lead(&self, name: &str) {
        // Should this task end any other way than by finding the queue
        // empty (a panic in a decision), the quota's queue goes with it:
        // its callers are answered with an error rather than left waiting,
        // and the next arrival starts a new leader.
        let mut abandon = Abandon {
            queues: &self.queues,
            name,
            armed: true,
        };
        loop {
            // Jobs that queue while this waits join the batch.
            let _guard = self.locks.lock(name).await;
            let jobs = self.queues.take(name, MAX_BATCH, true);
            if jobs.is_empty() {
                abandon.armed = false;
                return;
            }
            self.run(name, jobs).await;
        }
    }

    fn now(&self) -> i64 {
        (self.clock)()
    }

    /// The compare-and-swap loop of `Service::modify`, for a batch.
    async fn run(&self, name: &str, mut jobs: Vec<Job>) {
        // Another replica writes this quota too: under its row's lock at
        // once (`Contended`).
        if self.contended.is(name) {
            jobs.retain(|j| !j.done.is_closed());
            if jobs.is_empty() {
                return;
            }
            if let Some(done) = self.run_locked(name, &mut jobs).await {
                self.metrics.admission_batches_locked.inc();
                return done;
            }
        }
        let mut use_cache = true;
        // After a lost compare-and-swap, the newer version as the feed
        // brought it (`cache::newer_after_conflict`): decided on with no
        // read.
        let mut newer: Option<Arc<Stored>> = None;
        let mut asked_feed = false;
        // Why the next attempt reads the quota whole, if it does.
        let mut why = Reread::Uncached;
        // A copy of at least this version is proven current (`Proof`).
        let mut proven_from: Option<i64> = None;
        for attempt in 1..=MAX_ATTEMPTS {
            // A caller that went away is not decided for (its review was
            // abandoned; nothing must be charged in its name).
            jobs.retain(|j| !j.done.is_closed());
            if attempt > 1 && jobs.len() < MAX_BATCH {
                let more = MAX_BATCH - jobs.len();
                let before = jobs.len();
                jobs.extend(self.queues.take(name, more, false));
                // A copy is proven for the reviews that were waiting
                // when its version was read, not for those that came
                // after: another writer may have moved on since.
                if jobs.len() > before {
                    proven_from = None;
                }
            }
            if jobs.is_empty() {
                return;
            }
            let cached = match newer.take() {
                Some(n) => Some(n),
                None if use_cache => self.cache.get(name),
                None => None,
            };
            let from_cache = cached.is_some();
            if !from_cache {
                self.metrics.count_quota_reread(why);
            }
            let current = match cached {
                Some(c) => c,
                None => match self.store.get(name).await {
                    Ok(Some(s)) => {
                        let s = Arc::new(s);
                        self.cache.remember(s.clone());
                        s
                    }
                    Ok(None) => {
                        self.cache.forget(name);
                        let e = ServiceError::NotFound(format!("bizrq {name} not found"));
                        return answer_all(jobs, &e);
                    }
                    Err(e) => {
                        self.cache.forget(name);
                        self.metrics.admission_batches_failed.inc();
                        return answer_all(jobs, &e.into());
                    }
                },
            };
            let mut q = super::cache::working_copy(
                &current,
                self.accrue_from_ledger,
                self.now(),
                &self.prices,
                &self.price_book.current().list,
            );
            let decided = batch::decide_in_order(&mut q, &mut jobs, |j, q| (j.decide)(q));
            if !decided.changed() {
                // Nothing to write proves a cached copy current: its
                // version, read fresh, still the stored one (one short
                // column, not the quota parsed again); else decide again
                // on the newer one the feed already holds, or on a fresh
                // read (as `modify` does).
                if from_cache && proven_from.is_none_or(|v| current.version < v) {
                    match super::cache::prove(&*self.store, name, &current).await {
                        Proof::Current => {}
                        Proof::Newer(s, v) => {
                            self.cache.remember(s.clone());
                            newer = Some(s);
                            proven_from = Some(v);
                            continue;
                        }
                        Proof::Read => {
                            use_cache = false;
                            why = Reread::Unproven;
                            continue;
                        }
                    }
                }
                self.metrics.admission_batch_size.observe(jobs.len() as f64);
                return answer(jobs, decided, Ok(()));
            }
            let written = super::cache::write_over(
                &*self.store,
                &self.cache,
                &self.changed,
                self.now(),
                &current,
                q,
            )
            .await;
            match written {
                Ok(_) => {
                    self.metrics.admission_batch_size.observe(jobs.len() as f64);
                    return answer(jobs, decided, Ok(()));
                }
                Err(StoreError::Conflict(_)) => {
                    self.metrics.cas_conflicts.inc();
                    self.contended.mark(name);
                    // Another replica writes this quota: decide the batch
                    // again under the database's lock on it, where the
                    // store has one, rather than race that replica.
                    if let Some(done) = self.run_locked(name, &mut jobs).await {
                        return done;
                    }
                    newer = super::cache::newer_after_conflict(
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
                }
                Err(e) => {
                    self.metrics.admission_batches_failed.inc();
                    return answer(jobs, decided, Err(e.into()));
                }
            }
        }
        self.metrics.cas_exhausted.inc();
        self.metrics.admission_batches_failed.inc();
        answer_all(jobs, &ServiceError::Contention(name.to_string()));
    }
}

impl Leader {
    /// The batch (with what queued meanwhile, after it) decided and written
    /// in one locked read-modify-write (`QuotaStore::modify_locked`), and
    /// answered. None: the store has no lock; the batch is still unanswered.
    async fn run_locked(&self, name: &str, jobs: &mut Vec<Job>) -> Option<()> {
        if jobs.len() < MAX_BATCH {
            let more = MAX_BATCH - jobs.len();
            jobs.extend(self.queues.take(name, more, false));
        }
        // As in `run`: nothing is decided for a caller that went away.
        jobs.retain(|j| !j.done.is_closed());
        let now = self.now();
        let mut decided = None;
        let result = {
            let jobs = &mut *jobs;
            let decided = &mut decided;
            let mut decide = |current: &Stored| {
                // A version this process did not write (nor read): another
                // writer is still at work on the quota.
                if self
                    .cache
                    .get(name)
                    .is_none_or(|c| c.version != current.version)
                {
                    self.contended.mark(name);
                }
                let mut q = super::cache::working_copy(
                    current,
                    self.accrue_from_ledger,
                    now,
                    &self.prices,
                    &self.price_book.current().list,
                );
                let d = batch::decide_in_order(&mut q, jobs, |j, q| (j.decide)(q));
                let changed = d.changed();
                *decided = Some(d);
                changed.then_some(q)
            };
            // The cached copy, however old: the charges it shares with the
            // stored version are not parsed again.
            let known = self.cache.get(name);
            self.store
                .modify_locked(name, known.as_deref(), &mut decide)
                .await?
        };
        let jobs = std::mem::take(jobs);
        match (result, decided) {
            // Decided on the row as locked: every verdict stands.
            (Ok(written), Some(decided)) => {
                if let Some(stored) = written {
                    super::cache::remember_written(&self.cache, &self.changed, now, stored);
                }
                self.metrics.admission_batch_size.observe(jobs.len() as f64);
                answer(jobs, decided, Ok(()));
            }
            (Ok(_), None) => answer_all(jobs, &ServiceError::Internal("no decision".into())),
            (Err(e), _) => {
                self.cache.forget(name);
                self.metrics.admission_batches_failed.inc();
                answer_all(jobs, &e.into());
            }
        }
        Some(())
    }
}

/// Takes a leader's queue away if the leader ends without emptying it.
struct Abandon<'a> {
    queues: &'a Queues,
    name: &'a str,
    armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Dropping the jobs drops their senders: each caller gets an error.
            let mut q = self.queues.0.lock().unwrap_or_else(|e| e.into_inner());
            q.remove(self.name);
        }
    }
}

/// Each job its answer, once the write is known (`quota::batch`).
fn answer(
    jobs: Vec<Job>,
    decided: batch::Decided<Box<dyn Any + Send>, ServiceError>,
    written: Result<(), ServiceError>,
) {
    for (job, a) in jobs
        .into_iter()
        .zip(decided.answer(written, ServiceError::clone))
    {
        // A caller that went away after its decision: nothing to tell.
        let _ = job.done.send(a);
    }
}

fn answer_all(jobs: Vec<Job>, e: &ServiceError) {
    for job in jobs {
        let _ = job.done.send(Err(e.clone()));
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::Metrics;
    use crate::service::{Persist, Service, ServiceError};
    use crate::store::sql::SqlStore;
    use crate::store::testdb::on_both_databases;
    use crate::store::{QuotaStore, StoreError, Stored};
    use async_trait::async_trait;
    use quota::cash::QosMultipliers;
    use quota::object::{Charge, Quota, QuotaSpec, QuotaStatus};
    use quota::workload::PodSet;
    use quota::KeyConfig;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    const GPU: &str = "requests.nvidia.com/gpu";

    /// The SQL store, with status writes that are slow (so reviews queue
    /// into batches), and that fail, or meet another replica's write
    /// first, when told to.
    struct Rigged {
        inner: SqlStore,
        /// Whole reads of a quota (`get`) so far.
        gets: std::sync::atomic::AtomicUsize,
        fail: AtomicBool,
        /// The store's feed, as a watch would show the quota (None: no
        /// feed, as SQL has none).
        feed: std::sync::Mutex<Option<Stored>>,
        /// Before the next status write: another replica charges this
        /// many cards to the same quota (so that write loses its swap).
        interfere: std::sync::Mutex<Option<i64>>,
        /// The feed catches up with the store during the next version
        /// read (it answers the version, then the feed holds it).
        feed_during_stamp: AtomicBool,
    }

    #[async_trait]
    impl QuotaStore for Rigged {
        async fn get(&self, name: &str) -> Result<Option<Stored>, StoreError> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            self.inner.get(name).await
        }
        async fn stamp(&self, name: &str) -> Result<Option<crate::store::Stamp>, StoreError> {
            let s = self.inner.stamp(name).await;
            if self.feed_during_stamp.swap(false, Ordering::SeqCst) {
                *self.feed.lock().unwrap() = self.inner.get(name).await?;
            }
            s
        }
        fn watched(&self, _name: &str, than: Option<i64>) -> crate::store::Watched {
            use crate::store::Watched;
            match self.feed.lock().unwrap().as_ref() {
                None => Watched::NoFeed,
                Some(s) if than.is_some_and(|t| s.version <= t) => Watched::NotNewer,
                Some(s) => Watched::Newer(Box::new(s.clone())),
            }
        }
        async fn list(&self) -> Result<Vec<Stored>, StoreError> {
            self.inner.list().await
        }
        async fn children(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
            self.inner.children(name).await
        }
        async fn create(&self, quota: &Quota) -> Result<Stored, StoreError> {
            self.inner.create(quota).await
        }
        async fn replace(&self, current: &Stored, quota: &Quota) -> Result<i64, StoreError> {
            self.inner.replace(current, quota).await
        }
        async fn replace_status(
            &self,
            current: &Stored,
            status: &QuotaStatus,
        ) -> Result<i64, StoreError> {
            tokio::time::sleep(Duration::from_millis(30)).await;
            if self.fail.load(Ordering::SeqCst) {
                return Err(StoreError::Backend("disk full".into()));
            }
            let other = self.interfere.lock().unwrap().take();
            if let Some(cards) = other {
                let theirs = self.inner.get(current.quota.name()).await?.unwrap();
                let mut q = theirs.quota.clone();
                quota::admission::charge(
                    &mut q,
                    "apps/Deployment/ns/theirs",
                    charge(cards, "theirs"),
                )
                .unwrap();
                self.inner.replace_status(&theirs, &q.status).await?;
            }
            self.inner.replace_status(current, status).await
        }
        async fn modify_locked(
            &self,
            name: &str,
            known: Option<&Stored>,
            decide: &mut (dyn for<'s> FnMut(&'s Stored) -> Option<Quota> + Send),
        ) -> Option<Result<Option<Stored>, StoreError>> {
            tokio::time::sleep(Duration::from_millis(30)).await;
            if self.fail.load(Ordering::SeqCst) {
                return Some(Err(StoreError::Backend("disk full".into())));
            }
            self.inner.modify_locked(name, known, decide).await
        }
        async fn delete(&self, current: &Stored) -> Result<(), StoreError> {
            self.inner.delete(current).await
        }
        async fn workload_quota(&self, workload: &str) -> Result<Option<String>, StoreError> {
            self.inner.workload_quota(workload).await
        }
        async fn ping(&self) -> Result<(), StoreError> {
            self.inner.ping().await
        }
    }

    fn charge(cards: i64, uid: &str) -> Charge {
        Charge {
            pod_sets: pod_sets(cards),
            hpa: None,
            since: "2026-11-23T00:00:00.000Z".into(),
            uid: uid.into(),
            admitted: None,
        }
    }

    fn pod_sets(cards: i64) -> Vec<PodSet> {
        vec![PodSet {
            name: "main".into(),
            count: cards,
            per_pod: [(GPU.to_string(), "1".parse().unwrap())].into(),
            qos: None,
        }]
    }

    async fn rigged(store: &SqlStore, hard: &str) -> (Arc<Rigged>, Arc<Service>) {
        let rigged = Arc::new(Rigged {
            inner: store.clone(),
            gets: Default::default(),
            fail: AtomicBool::new(false),
            feed: Default::default(),
            interfere: Default::default(),
            feed_during_stamp: AtomicBool::new(false),
        });
        let svc = Arc::new(Service::new(
            rigged.clone(),
            KeyConfig::default(),
            QosMultipliers::default(),
            Arc::new(Metrics::default()),
        ));
        let spec = QuotaSpec {
            parent: String::new(),
            hard: [(GPU.to_string(), hard.parse().unwrap())].into(),
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        };
        svc.create_quota("team", spec, Persist::Here, "", false)
            .await
            .unwrap();
        (rigged, svc)
    }

    /// `n` one-card charges to "team" at once; their answers in order.
    async fn charges(svc: &Arc<Service>, n: usize) -> Vec<Result<(), ServiceError>> {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let svc = svc.clone();
                tokio::spawn(async move {
                    let wref = format!("apps/Deployment/ns/w{i}");
                    svc.charge(crate::service::ChargeRequest::new(
                        "team",
                        &wref,
                        pod_sets(1),
                        &format!("uid-{i}"),
                    ))
                    .await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    async fn a_failed_batch_write_tells_nobody_allowed(store: &SqlStore) {
        let (rigged, svc) = rigged(store, "100").await;
        rigged.fail.store(true, Ordering::SeqCst);
        let answers = charges(&svc, 24).await;
        for a in &answers {
            assert!(
                matches!(a, Err(ServiceError::Internal(m)) if m.contains("disk full")),
                "{a:?}"
            );
        }
        let failed = svc.metrics.admission_batches_failed.get();
        // Some write carried several reviews, and answered each with the failure.
        assert!((1..24).contains(&failed), "{failed} failed writes");
        let stored = store.get("team").await.unwrap().unwrap();
        assert!(stored.quota.status.workloads.is_empty());
    }

    async fn a_lost_swap_decides_the_whole_batch_again(store: &SqlStore) {
        let (rigged, svc) = rigged(store, "10").await;
        // Another replica takes 8 of the 10 cards just before this
        // process's first write: that write loses the swap, and the batch
        // is decided again on what the other replica left.
        *rigged.interfere.lock().unwrap() = Some(8);
        let answers = charges(&svc, 5).await;
        let allowed = answers.iter().filter(|a| a.is_ok()).count();
        let denied = answers
            .iter()
            .filter(|a| matches!(a, Err(ServiceError::Denied(_))))
            .count();
        assert_eq!((allowed, denied), (2, 3), "{answers:?}");
        assert!(svc.metrics.cas_conflicts.get() >= 1);
        let stored = store.get("team").await.unwrap().unwrap().quota;
        assert_eq!(stored.status.workloads.len(), 3);
        assert_eq!(stored.status.used[GPU], "10".parse().unwrap());
        // Each admitted review holds its charge; the denied ones hold none.
        for (i, a) in answers.iter().enumerate() {
            let wref = format!("apps/Deployment/ns/w{i}");
            assert_eq!(stored.status.workloads.contains_key(&wref), a.is_ok());
        }
    }

    async fn a_panicking_decision_strands_nobody(store: &SqlStore) {
        let (_rigged, svc) = rigged(store, "10").await;
        let bug = {
            let svc = svc.clone();
            tokio::spawn(async move {
                svc.commit(
                    "team",
                    |_: &mut Quota| -> Result<(bool, ()), ServiceError> {
                        panic!("a bug in a decision")
                    },
                )
                .await
            })
        };
        let answer = bug.await.unwrap();
        assert!(
            matches!(answer, Err(ServiceError::Internal(_))),
            "{answer:?}"
        );
        // The quota's next admissions start a new leader.
        let answers = charges(&svc, 3).await;
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    }

    /// One card charged to `team` for w0 (uid-0), through its group commit.
    async fn charge_w0(svc: &Service) -> Result<(), ServiceError> {
        svc.charge(crate::service::ChargeRequest::new(
            "team",
            "apps/Deployment/ns/w0",
            pod_sets(1),
            "uid-0",
        ))
        .await
    }

    async fn an_unchanged_batch_is_proven_by_the_version_alone(store: &SqlStore) {
        let (rigged, svc) = rigged(store, "10").await;
        let w0 = "apps/Deployment/ns/w0";
        let again = || charge_w0(&svc);
        again().await.unwrap();
        let gets = rigged.gets.load(Ordering::SeqCst);
        // The same charge again changes nothing: the copy it was decided
        // on is proven current by its version, the quota is not read.
        again().await.unwrap();
        assert_eq!(rigged.gets.load(Ordering::SeqCst), gets);
        // Another replica releases w0: the version moved, so the same
        // charge is decided again on a fresh read, and made.
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        assert!(quota::admission::release(&mut q, w0));
        store.replace_status(&theirs, &q.status).await.unwrap();
        again().await.unwrap();
        assert!(rigged.gets.load(Ordering::SeqCst) > gets);
        let stored = store.get("team").await.unwrap().unwrap().quota;
        assert!(stored.status.workloads.contains_key(w0));
        assert_eq!(stored.status.used[GPU], "1".parse().unwrap());

        // Another replica charges w1, and the feed shows its version: the
        // same charge of w0, nothing to write, is decided again on the
        // feed's copy (proven by the version read fresh), not on a whole
        // read; so is `modify`'s decision that writes nothing.
        let theirs_charge_w = |n: usize| async move {
            theirs_charge(store, &format!("apps/Deployment/ns/w{n}"), 1).await
        };
        // `modify`'s decision that writes nothing, on whether it sees wN.
        let sees = |n: usize| {
            let wref = format!("apps/Deployment/ns/w{n}");
            let svc = svc.clone();
            async move {
                svc.update_status("team", false, |q| {
                    Ok((false, q.status.workloads.contains_key(&wref)))
                })
                .await
                .unwrap()
            }
        };
        theirs_charge_w(1).await;
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        let gets = rigged.gets.load(Ordering::SeqCst);
        again().await.unwrap();
        assert_eq!(rigged.gets.load(Ordering::SeqCst), gets, "no whole read");
        theirs_charge_w(2).await;
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        assert!(sees(2).await, "decided on the newer copy");
        assert_eq!(rigged.gets.load(Ordering::SeqCst), gets, "no whole read");
        // A feed that has not caught up: read whole, as before.
        theirs_charge_w(3).await;
        assert!(sees(3).await, "decided on the fresh read");
        assert_eq!(rigged.gets.load(Ordering::SeqCst), gets + 1);
    }

    /// "team" deleted (as `kept`) and made again with nothing charged, by
    /// another replica, then written until it reaches `kept`'s version
    /// under another uid.
    async fn made_again(store: &SqlStore, kept: &Stored) -> Stored {
        store.delete(kept).await.unwrap();
        let mut fresh = kept.quota.clone();
        fresh.metadata.uid = None;
        fresh.metadata.resource_version = None;
        fresh.status = Default::default();
        let mut made = store.create(&fresh).await.unwrap();
        assert_ne!(made.quota.metadata.uid, kept.quota.metadata.uid);
        while made.version < kept.version {
            let v = store
                .replace_status(&made, &made.quota.status)
                .await
                .unwrap();
            made = store.get("team").await.unwrap().unwrap();
            assert_eq!(made.version, v);
        }
        assert_eq!(
            made.version, kept.version,
            "the same version, another quota"
        );
        made
    }

    /// A quota deleted and made again (another replica's doing) that
    /// reaches the version of this replica's kept copy is not taken for
    /// it: the uid read with the version tells them apart, and the charge
    /// the old copy held is made again in the new quota, not answered as
    /// already there.
    async fn a_quota_made_again_at_the_same_version_is_not_the_kept_one(store: &SqlStore) {
        let (rigged, svc) = rigged(store, "10").await;
        let w0 = "apps/Deployment/ns/w0";
        let again = || charge_w0(&svc);
        again().await.unwrap();
        let kept = store.get("team").await.unwrap().unwrap();
        made_again(store, &kept).await;
        let gets = rigged.gets.load(Ordering::SeqCst);
        again().await.unwrap();
        assert!(rigged.gets.load(Ordering::SeqCst) > gets, "read whole");
        let stored = store.get("team").await.unwrap().unwrap().quota;
        assert!(stored.status.workloads.contains_key(w0), "charged again");
        assert_eq!(stored.status.used[GPU], "1".parse().unwrap());
    }

    /// Another replica charges `wref` `cards` cards in "team".
    async fn theirs_charge(store: &SqlStore, wref: &str, cards: i64) {
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        quota::admission::charge(&mut q, wref, charge(cards, "theirs")).unwrap();
        store.replace_status(&theirs, &q.status).await.unwrap();
    }

    async fn stored_version(store: &SqlStore) -> i64 {
        store.get("team").await.unwrap().unwrap().version
    }

    /// A queue round reads its quota as a whole read gives it
    /// (`Service::proven`): the copy this replica keeps, proven by the
    /// version and uid read fresh; the feed's copy where the version moved
    /// and the feed holds it; a whole read (counted `round`) where the
    /// feed has not caught up, where the quota was made again, and
    /// always with no feed.
    async fn a_rounds_read_is_proven_by_the_version_alone(store: &SqlStore) {
        let (rigged, svc) = rigged(store, "10").await;
        let gets = || rigged.gets.load(Ordering::SeqCst);
        let round_reads = || {
            svc.metrics
                .quota_rereads
                .get_or_create(&crate::metrics::CauseLabels {
                    cause: "round".into(),
                })
                .get()
        };
        // `proven`, asserting how many whole reads it made.
        let proven = |whole: usize, why: &'static str| {
            let svc = svc.clone();
            async move {
                let before = gets();
                let read = svc.proven("team").await.unwrap();
                assert_eq!(gets(), before + whole, "{why}");
                read
            }
        };
        let holds = |s: &Stored, wref: &str| s.quota.status.workloads.contains_key(wref);
        let w0 = "apps/Deployment/ns/w0";
        charge_w0(&svc).await.unwrap();
        // No feed (SQL alone): read whole, as a fresh read must be.
        let read = proven(1, "no feed: read whole").await;
        assert!(holds(&read, w0));
        assert_eq!(round_reads(), 0, "no feed: nothing proven, nothing counted");
        // A feed at the stored version: proven, no whole read.
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        let read = proven(0, "no whole read").await;
        assert_eq!(read.version, stored_version(store).await);
        // Another replica charges w1: the version moved; the feed holds it.
        theirs_charge(store, "apps/Deployment/ns/w1", 2).await;
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        let read = proven(0, "the feed's newer copy, no whole read").await;
        assert!(holds(&read, "apps/Deployment/ns/w1"));
        // Another replica writes while the version is read: the feed
        // brings that version before the proof looks (`Proof::Newer`).
        theirs_charge(store, "apps/Deployment/ns/w2", 1).await;
        rigged.feed_during_stamp.store(true, Ordering::SeqCst);
        let read = proven(0, "the feed's copy of the version read").await;
        assert!(holds(&read, "apps/Deployment/ns/w2"));
        assert_eq!(read.version, stored_version(store).await);
        assert_eq!(round_reads(), 0);
        // Again, and the feed has not caught up: read whole, counted.
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        assert!(quota::admission::release(&mut q, "apps/Deployment/ns/w1"));
        store.replace_status(&theirs, &q.status).await.unwrap();
        let read = proven(1, "read whole").await;
        assert_eq!(round_reads(), 1);
        assert!(!holds(&read, "apps/Deployment/ns/w1"));
        assert_eq!(read.version, stored_version(store).await);
        // Deleted and made again, and made to reach the kept copy's version:
        // the uid tells them apart.
        let kept = store.get("team").await.unwrap().unwrap();
        *rigged.feed.lock().unwrap() = Some(kept.clone());
        let made = made_again(store, &kept).await;
        let read = proven(1, "another quota: read whole").await;
        assert_eq!(read.quota.metadata.uid, made.quota.metadata.uid);
        assert!(read.quota.status.workloads.is_empty());
    }

    /// The controller's reconcile (`update_status_watched`) decides on the
    /// newest copy it knows, its own or its watch's, and one that writes
    /// nothing stands without reading the quota; with no feed it is
    /// proven by its version (`cache::prove`).
    async fn a_watched_decision_that_writes_nothing_reads_nothing(store: &SqlStore) {
        let (rigged, svc, w0) = rigged_with_w0(store).await;
        let gets = || rigged.gets.load(Ordering::SeqCst);
        let charged = |svc: Arc<Service>| async move {
            svc.update_status_watched(
                "team",
                |_| true,
                |q| Ok((false, q.status.workloads.contains_key(w0))),
            )
            .await
            .unwrap()
        };
        // No feed: nothing to write is proven by the version read fresh
        // (the copy kept is the stored one), not by a whole read.
        let before = gets();
        assert!(charged(svc.clone()).await);
        assert_eq!(gets(), before);
        // The feed shows the version this replica holds: no read.
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        let before = gets();
        assert!(charged(svc.clone()).await);
        assert_eq!(gets(), before);
        // Another replica releases w0 and the feed shows it: decided on
        // the feed's newer copy, still with no read.
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        assert!(quota::admission::release(&mut q, w0));
        store.replace_status(&theirs, &q.status).await.unwrap();
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        let before = gets();
        assert!(!charged(svc.clone()).await);
        assert_eq!(gets(), before);
        // `update_status` proves its copy by the version too: it moved on,
        // and the feed's newer copy is decided on with no read.
        let before = gets();
        let released = svc
            .update_status("team", false, |q| {
                Ok((false, !q.status.workloads.contains_key(w0)))
            })
            .await
            .unwrap();
        assert!(released, "decided on the newer copy");
        assert_eq!(gets(), before);
        // A feed that lags the store: a write on its copy loses the swap,
        // and is decided again on a fresh read (not on the feed again).
        let lagging = store.get("team").await.unwrap();
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        quota::admission::charge(&mut q, "apps/Deployment/ns/theirs", charge(2, "t")).unwrap();
        store.replace_status(&theirs, &q.status).await.unwrap();
        *rigged.feed.lock().unwrap() = lagging;
        let before = gets();
        let seen_theirs = svc
            .update_status_watched(
                "team",
                |_| true,
                |q| {
                    let theirs = q.status.workloads.contains_key("apps/Deployment/ns/theirs");
                    quota::admission::charge(q, w0, charge(1, "uid-0"))?;
                    Ok((true, theirs))
                },
            )
            .await
            .unwrap();
        assert!(seen_theirs, "written on the fresh read");
        assert_eq!(gets(), before + 1);
        let stored = store.get("team").await.unwrap().unwrap().quota;
        assert_eq!(stored.status.used[GPU], "3".parse().unwrap());
    }

    /// `rigged` with a quota of 10 cards, 1 of them charged to `w0`.
    async fn rigged_with_w0(store: &SqlStore) -> (Arc<Rigged>, Arc<Service>, &'static str) {
        let (rigged, svc) = rigged(store, "10").await;
        let w0 = "apps/Deployment/ns/w0";
        svc.charge(crate::service::ChargeRequest::new(
            "team",
            w0,
            pod_sets(1),
            "uid-0",
        ))
        .await
        .unwrap();
        (rigged, svc, w0)
    }

    /// A write that loses its compare-and-swap decides again on the newer
    /// version the feed shows (a watch brings it within milliseconds), not
    /// on a whole read (with no newer copy in the feed it reads:
    /// `a_watched_decision_that_writes_nothing_reads_nothing`).
    async fn a_lost_swap_decides_again_on_the_feeds_newer_copy(store: &SqlStore) {
        let (rigged, svc, _) = rigged_with_w0(store).await;
        let gets = || rigged.gets.load(Ordering::SeqCst);
        // Another replica charges 2 cards; the feed shows its version.
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        quota::admission::charge(&mut q, "apps/Deployment/ns/theirs", charge(2, "t")).unwrap();
        store.replace_status(&theirs, &q.status).await.unwrap();
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        let before = (gets(), svc.metrics.cas_conflicts.get());
        // A plain write on this replica's own (stale) copy loses the swap
        // and is decided again on the feed's copy: no read.
        let seen_theirs = svc
            .update_status("team", false, |q| {
                let theirs = q.status.workloads.contains_key("apps/Deployment/ns/theirs");
                quota::admission::charge(q, "apps/Deployment/ns/w1", charge(1, "uid-1"))?;
                Ok((true, theirs))
            })
            .await
            .unwrap();
        assert!(seen_theirs, "decided again on the newer version");
        assert_eq!(gets(), before.0, "no whole read");
        assert_eq!(svc.metrics.cas_conflicts.get(), before.1 + 1);
        // So does a batch of the group commit.
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        quota::admission::charge(&mut q, "apps/Deployment/ns/theirs2", charge(1, "t2")).unwrap();
        store.replace_status(&theirs, &q.status).await.unwrap();
        *rigged.feed.lock().unwrap() = store.get("team").await.unwrap();
        let before = (gets(), svc.metrics.cas_conflicts.get());
        svc.charge(crate::service::ChargeRequest::new(
            "team",
            "apps/Deployment/ns/w2",
            pod_sets(1),
            "uid-2",
        ))
        .await
        .unwrap();
        assert_eq!(
            svc.metrics.cas_conflicts.get(),
            before.1 + 1,
            "the batch lost a swap"
        );
        let has_lock = store
            .modify_locked("team", None, &mut |_: &Stored| None)
            .await
            .is_some();
        if !has_lock {
            // (Where the store has a row lock, PostgreSQL, the batch that
            // lost is decided under it, as `a_quota_another_replica_…`
            // shows, and the feed is not asked.)
            assert_eq!(gets(), before.0, "no whole read");
        }
        // Nothing lost or doubled: w0, w1, w2 (1 each), theirs (2),
        // theirs2 (1).
        let stored = store.get("team").await.unwrap().unwrap().quota;
        assert_eq!(stored.status.used[GPU], "6".parse().unwrap());
        let m = svc
            .metrics
            .quota_rereads
            .get_or_create(&crate::metrics::CauseLabels {
                cause: crate::metrics::Reread::Conflict.label().into(),
            });
        assert_eq!(m.get(), 0, "no read counted for a lost swap");
    }

    async fn a_quota_another_replica_writes_goes_to_the_lock_at_once(store: &SqlStore) {
        let (rigged, svc) = rigged(store, "100").await;
        // The first write loses its swap to another replica's charge.
        *rigged.interfere.lock().unwrap() = Some(1);
        assert!(charges(&svc, 2).await.iter().all(Result::is_ok));
        let conflicts = svc.metrics.cas_conflicts.get();
        assert!(conflicts >= 1);
        // The other replica writes again: this process's cached copy is
        // stale. Its next batches decide under the row's lock at once
        // (where the store has one), so no swap is lost for it.
        let theirs = store.get("team").await.unwrap().unwrap();
        let mut q = theirs.quota.clone();
        quota::admission::charge(&mut q, "apps/Deployment/ns/theirs2", charge(3, "t2")).unwrap();
        store.replace_status(&theirs, &q.status).await.unwrap();
        let answers = charges(&svc, 4).await;
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        let has_lock = store
            .modify_locked("team", None, &mut |_: &Stored| None)
            .await
            .is_some();
        if has_lock {
            assert_eq!(svc.metrics.cas_conflicts.get(), conflicts);
            assert!(svc.metrics.admission_batches_locked.get() >= 1);
        } else {
            // SQLite has no row lock (and one writer): the swap is tried.
            assert_eq!(svc.metrics.admission_batches_locked.get(), 0);
        }
        // Nothing lost or doubled: 1 + 3 theirs, w0 … w3 ours (w0, w1 again).
        let stored = store.get("team").await.unwrap().unwrap().quota;
        assert_eq!(stored.status.used[GPU], "8".parse().unwrap());
    }

    on_both_databases!(
        a_lost_swap_decides_again_on_the_feeds_newer_copy,
        a_quota_another_replica_writes_goes_to_the_lock_at_once,
        an_unchanged_batch_is_proven_by_the_version_alone,
        a_quota_made_again_at_the_same_version_is_not_the_kept_one,
        a_rounds_read_is_proven_by_the_version_alone,
        a_watched_decision_that_writes_nothing_reads_nothing,
        a_failed_batch_write_tells_nobody_allowed,
        a_lost_swap_decides_the_whole_batch_again,
        a_panicking_decision_strands_nobody,
    );
}
