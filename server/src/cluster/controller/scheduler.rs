//! The one scheduling loop over every queue (docs/queueing.md §12, "One
//! scheduler over every queue"). A quota's reconcile does not run its queue's round: it
//! asks for one (`schedule`), and this loop, one task for the whole
//! controller, takes every quota asked for since its last cycle and runs
//! their rounds:
//!
//! - **every queue asked for gets its round in the next cycle**: a cycle
//!   takes the whole set at once, so no queue waits behind the reconcile
//!   workers' backlog nor behind other queues' rounds for more than one
//!   cycle (rounds inside the per-quota reconciles leave most queues of a
//!   busy controller without one for minutes: docs/queueing.md §12);
//! - **in fair order**: the rounds start, `--workers` at once, the quota
//!   whose dominant share (`quota::fair`) of its parent's room is smallest
//!   first (ties by name). Who gets which part of a parent's idle room is
//!   still `fair::allot`'s in each round, and every charge and loan goes
//!   through the compare-and-swaps, so rounds side by side never admit
//!   past a limit;
//! - **a round is one write** of the quota (`Service::admit_round`: every
//!   admission's charge, the entries' removal and the restated queue in
//!   one compare-and-swap; one loan asked of the parent for the whole
//!   round), then the holds released together, then the quota's
//!   preemption step, in that order.
//!
//! A quota's round and its reconcile never run at once (`one_at_a_time`),
//! except for the releases of
//! what the round admitted and the suspends of the preemptions it made
//! due: those are writes through the API server and
//! both webhooks, seconds under load, and run without the quota held, so
//! a finished workload's charge is released by its reconcile at once and
//! not after them (docs/queueing.md §9).
//!
//! Crash safety is the round's own (`queue.rs`): an entry leaves the queue
//! only in the write that charges it, and a charge `queue:<uid>` on a held
//! object is released by the next round.
//!
//! **A round that would change nothing is not run** (docs/queueing.md §12,
//! "Rounds that would change nothing"): a quota is asked for a round by
//! every reconcile while it has a queue, and most of those come from
//! changes a round does not read (its siblings' admissions, its running
//! pods). Where everything a round reads is as it was at the quota's last
//! round that planned no admission (`RoundInputs`: the quota's version, the
//! room its parent could lend it, its held objects as the watch shows them,
//! the PriorityClasses), the round would plan nothing again, and is not
//! run. Time is not among those inputs: a quota asked for meanwhile gets a
//! round at the latest `UNCHANGED_AT_MOST` after its idle one.

use super::Context;
use quota::queue::priority::Classes;
use quota::resources::{self, ResourceList};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a quota asked for a round goes without one because nothing
/// it reads changed: what depends on time alone (a mark placed in the
/// future reaching its place, a budget's new period) is seen by then.
pub(super) const UNCHANGED_AT_MOST: Duration = Duration::from_secs(10);

/// The longest a quota asked for a round goes without one because only
/// held, marked objects arrived that it could not admit (`Judged::Arrived`):
/// their folding into the queue (their places in the status, their
/// Events) waits this long at most.
pub(super) const ARRIVED_AT_MOST: Duration = Duration::from_secs(2);

/// What a queue round plans from, as this process knows it before the
/// round reads (so a change that lands meanwhile makes the next one
/// differ, never the reverse).
#[derive(Clone, Debug)]
pub(super) struct RoundInputs {
    /// The quota's version: its spec, charges and listed queue.
    pub stamp: crate::store::Stamp,
    /// The copy of the quota at `stamp` (None where this process does
    /// not hold it: then only the same version reads the same).
    pub copy: Option<Arc<crate::store::Stored>>,
    /// What it may fill up to with what its parent could lend it now
    /// (`quota::queue::borrow_limits`; empty: it cannot borrow).
    pub limits: ResourceList,
    /// Its workload objects as a round reads them (`View::queue_inputs`),
    /// arrivals apart.
    pub held: u64,
    /// How many held, marked objects had arrived (`View::arrived`).
    pub arrived: u64,
    /// The PriorityClasses as the watch has them (None: no watch).
    pub classes: Option<Arc<Classes>>,
    /// Its parent's name (not compared: the stamp holds the spec).
    pub parent: String,
    /// Set on a kept round whose queue could not preempt its own running
    /// work, planned on `stamp` (`ToRelease::reach`): the least limits on
    /// which a round on the same inputs could admit anything still
    /// queued. Room to borrow that grew without reaching them is no
    /// change: nothing queued fits it.
    pub reach: Option<ResourceList>,
    /// The round left room to a fairer sibling (`ToRelease::left_room`):
    /// a round on the same inputs runs where the limits still reach
    /// `reach`, whether or not the room grew: the sibling did not take all
    /// it was left.
    pub left_room: bool,
}

/// What to do with a round asked for, against the quota's last idle one
/// (`Scheduler::judge`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Judged {
    /// Something it reads changed, or there is no idle round to go by.
    Run,
    /// Nothing it reads changed: put off for this long at most.
    PutOff(Duration),
    /// Only the room its parent could lend it grew: a sibling's round in
    /// progress may take it back first (for this long at most).
    RoomGrew(Duration),
    /// Only held, marked objects arrived, after the `since`-th: put off
    /// for this long at most where none of them could be admitted
    /// (`Context::arrivals_wait`).
    Arrived { since: u64, left: Duration },
}

impl RoundInputs {
    /// Whether a round reading `now` plans what the round that read `self`
    /// planned, when that one planned no admission (or admitted all it
    /// planned): the same quota, held
    /// objects and classes, and on no key more room to borrow (a sibling's
    /// admission only takes room; its release gives some, and is a change)
    /// or, where `self` knows what anything still queued needs at least,
    /// no more than stays short of it (`reach`); nor, where `self` left
    /// room to a fairer sibling, room still reaching its `reach` (`left_room`).
    pub fn unchanged(&self, now: &RoundInputs) -> bool {
        self.arrived == now.arrived
            && self.same_but_room(now)
            && self.no_room_for_more(now)
            && !self.left_room_fits(now)
    }

    /// Whether only held, marked objects arrived since `self`: everything
    /// else as `unchanged` asks.
    pub fn only_arrived(&self, now: &RoundInputs) -> bool {
        now.arrived > self.arrived
            && self.same_but_room(now)
            && self.no_room_for_more(now)
            && !self.left_room_fits(now)
    }

    /// Whether the room to borrow in `now` admits nothing `self` did not:
    /// no key has more (`no_more_room`), or what grew does not reach the
    /// least anything still queued needs (`reach`).
    fn no_room_for_more(&self, now: &RoundInputs) -> bool {
        self.no_more_room(now)
            || self
                .reach
                .as_ref()
                .is_some_and(|r| !quota::queue::room::fits_on(r, &now.limits))
    }

    /// Whether `self` left room to a fairer sibling and the limits in
    /// `now` still reach what it could admit (`reach`).
    fn left_room_fits(&self, now: &RoundInputs) -> bool {
        self.left_room
            && self
                .reach
                .as_ref()
                .is_some_and(|r| quota::queue::room::fits_on(r, &now.limits))
    }

    /// Whether no key has more room to borrow in `now` than in `self`.
    fn no_more_room(&self, now: &RoundInputs) -> bool {
        match (self.limits.is_empty(), now.limits.is_empty()) {
            (true, true) => true,
            (false, false) => now
                .limits
                .iter()
                .all(|(k, v)| *v <= resources::get(&self.limits, k)),
            _ => false,
        }
    }

    /// Whether a round reads `now`'s version of the quota as `self`'s: the
    /// same version, or one that differs only in what no round reads
    /// (`quota::queue::inputs::reads_same`: the share its parent's room
    /// gives it, which every sibling's loan moves, a reconcile's time, the
    /// summaries for people).
    fn same_quota(&self, now: &RoundInputs) -> bool {
        self.stamp == now.stamp
            || self
                .copy
                .as_ref()
                .zip(now.copy.as_ref())
                .is_some_and(|(a, b)| quota::queue::inputs::reads_same(&a.quota, &b.quota))
    }

    /// Whether everything but the room to borrow (and the arrivals) is as
    /// in `self`.
    pub fn same_but_room(&self, now: &RoundInputs) -> bool {
        self.same_quota(now)
            && self.held == now.held
            && self.classes == now.classes
            && self.limits.is_empty() == now.limits.is_empty()
    }
}

#[derive(Default)]
struct Rounds {
    running: BTreeSet<String>,
    again: BTreeSet<String>,
    /// Of `running`, those whose round has handed over to the quotas
    /// waiting for it (`Context::after_round`): what is left of it (its
    /// releases, its preemption step) takes no room a sibling waits for.
    handed: BTreeSet<String>,
}

#[derive(Default)]
pub(super) struct Scheduler {
    /// Quotas whose queue needs a round, since the cycle that last took
    /// them.
    dirty: Mutex<BTreeSet<String>>,
    /// Quotas whose round is running now, and those of them asked for
    /// again meanwhile.
    /// (One lock for both: a round ending while the loop marks it for
    /// another must not miss the mark.)
    rounds: Mutex<Rounds>,
    wake: tokio::sync::Notify,
    /// By quota: what its last round read, when that round planned no
    /// admission, and until when a round on the same inputs is put off;
    /// or why it was not kept so (the cause its next round runs for:
    /// `why_run`).
    idle: Mutex<HashMap<String, Last>>,
    /// By quota: the earliest time (ms) a round asked to be woken at
    /// (`Context::wake_at`) since its last round ended.
    due: Mutex<HashMap<String, i64>>,
    /// Rounds put off, asked for again directly (not through a
    /// reconcile) when their idle round's record runs out.
    later: Mutex<HashMap<String, Instant>>,
}

/// A quota's last round, as the scheduler keeps it.
enum Last {
    /// Kept as the base of a skip (boxed: a record of the room it read
    /// and what its queue needs is far larger than a cause).
    Kept(Box<Idle>),
    /// Not kept, for this cause.
    Not(&'static str),
}

/// A quota's last round that planned no admission.
struct Idle {
    inputs: RoundInputs,
    /// Rounds on the same inputs are put off until then.
    until: Instant,
    /// When it started.
    started: Instant,
    /// A round asked for since was put off behind a sibling's round for
    /// room that grew; the next such one runs.
    waited: bool,
}

impl Scheduler {
    /// What to do with `name`'s round, reading `now`, against its last
    /// idle round (`Judged`). A round put off behind a sibling's
    /// (`waited`) is not put off so again until one finds nothing changed.
    fn judge(&self, name: &str, now: &RoundInputs) -> Judged {
        let mut idle = self.idle.lock().unwrap();
        let Some(Last::Kept(i)) = idle.get_mut(name) else {
            return Judged::Run;
        };
        let Some(left) = i
            .until
            .checked_duration_since(Instant::now())
            .filter(|l| !l.is_zero())
        else {
            return Judged::Run;
        };
        if i.inputs.unchanged(now) {
            i.waited = false;
            Judged::PutOff(left)
        } else if i.inputs.only_arrived(now) {
            // The arrivals' own, shorter bound: their places are told then.
            match (i.started + ARRIVED_AT_MOST)
                .checked_duration_since(Instant::now())
                .filter(|l| !l.is_zero())
            {
                Some(a) => Judged::Arrived {
                    since: i.inputs.arrived,
                    left: left.min(a),
                },
                None => Judged::Run,
            }
        } else if i.inputs.same_but_room(now) && i.inputs.arrived == now.arrived && !i.waited {
            // Room that grew, or room a fairer sibling was left and did not
            // take (yet): another sibling whose round runs or is asked for
            // may take it first. Fair sharing left room to each sibling
            // the allotment gave some, and this round follows the one it
            // named only; once more behind another is the least that
            // spares it a round that yields again for each.
            Judged::RoomGrew(left)
        } else {
            Judged::Run
        }
    }

    /// What sets `now` apart from `name`'s last idle round, for a round
    /// judged to run (`bizrq_admission_queue_rounds_run_total{cause}`).
    fn why_run(&self, name: &str, now: &RoundInputs) -> &'static str {
        let idle = self.idle.lock().unwrap();
        let i = match idle.get(name) {
            Some(Last::Kept(i)) => i,
            Some(Last::Not(why)) => return why,
            None => return "first",
        };
        let was = &i.inputs;
        if i.until <= Instant::now() {
            "due"
        } else if !was.same_quota(now) {
            "version"
        } else if was.held != now.held {
            "objects"
        } else if was.classes != now.classes {
            "classes"
        } else if was.no_more_room(now) && was.left_room_fits(now) {
            "left-room"
        } else if was.arrived != now.arrived && was.no_room_for_more(now) {
            "arrivals"
        } else {
            "room"
        }
    }

    /// `name`'s round is put off behind a sibling's (`Judged::RoomGrew`).
    fn waits(&self, name: &str) {
        if let Some(Last::Kept(i)) = self.idle.lock().unwrap().get_mut(name) {
            i.waited = true;
        }
    }

    /// A quota other than `name` under `parent` whose round runs or is
    /// asked for (by this process's copies).
    fn sibling_in_round(
        &self,
        name: &str,
        parent: &str,
        parent_of: impl Fn(&str) -> Option<String>,
    ) -> Option<String> {
        if parent.is_empty() {
            return None;
        }
        // A round that handed over already is followed by no other hand-over
        // unless it runs again.
        let running: Vec<String> = {
            let r = self.rounds.lock().unwrap();
            r.running
                .iter()
                .filter(|q| !r.handed.contains(*q) || r.again.contains(*q))
                .cloned()
                .collect()
        };
        let dirty: Vec<String> = self.dirty.lock().unwrap().iter().cloned().collect();
        running
            .into_iter()
            .chain(dirty)
            .filter(|q| q != name)
            .find(|q| parent_of(q).as_deref() == Some(parent))
    }

    /// `name`'s round handed over to those waiting for it
    /// (`Context::after_round`).
    pub(super) fn handed_over(&self, name: &str) {
        let mut r = self.rounds.lock().unwrap();
        if r.running.contains(name) {
            r.handed.insert(name.to_string());
        }
    }

    /// A round of `name` asked to be woken at `at_ms`.
    pub(super) fn due_at(&self, name: &str, at_ms: i64) {
        let mut due = self.due.lock().unwrap();
        let e = due.entry(name.to_string()).or_insert(at_ms);
        *e = (*e).min(at_ms);
    }

    /// Ask for `name`'s round again at `at`, directly.
    fn again_at(&self, name: &str, at: Instant) {
        let mut later = self.later.lock().unwrap();
        let e = later.entry(name.to_string()).or_insert(at);
        *e = (*e).min(at);
    }

    /// The rounds put off whose time came.
    fn due_again(&self) -> Vec<String> {
        crate::util::take_due(&mut self.later.lock().unwrap(), Instant::now())
    }

    /// The idle rounds of quotas `keep` does not keep (deleted) go.
    pub(super) fn forget(&self, keep: impl Fn(&str) -> bool) {
        self.idle.lock().unwrap().retain(|q, _| keep(q));
    }

    /// The idle rounds of `names` go, for `why` (a time a round asked for
    /// came: `timer_loop`).
    fn drop_idle(&self, names: &[String], why: &'static str) {
        let mut idle = self.idle.lock().unwrap();
        for n in names {
            if let Some(last @ Last::Kept(_)) = idle.get_mut(n) {
                *last = Last::Not(why);
            }
        }
    }

    /// `name`'s round that read `inputs` ended, having started at
    /// `started` (now `now_ms` by the controller's clock): settled (it
    /// admitted all it planned, repaired nothing, released all it
    /// admitted and preempted no one: `inputs` given) or not (why: the
    /// cause the next round runs for). A round on the
    /// same inputs is put off until `UNCHANGED_AT_MOST` after this one
    /// started, and never past a time this one asked to be woken at.
    fn ended(
        &self,
        name: &str,
        inputs: Result<RoundInputs, &'static str>,
        started: Instant,
        now_ms: i64,
    ) {
        let due = self.due.lock().unwrap().remove(name);
        let mut until = started + UNCHANGED_AT_MOST;
        if let Some(at) = due {
            let ms = u64::try_from(at.saturating_sub(now_ms)).unwrap_or(0);
            until = until.min(Instant::now() + Duration::from_millis(ms));
        }
        let last = match inputs {
            Ok(inputs) => Last::Kept(Box::new(Idle {
                inputs,
                until,
                started,
                waited: false,
            })),
            Err(why) => Last::Not(why),
        };
        self.idle.lock().unwrap().insert(name.to_string(), last);
    }
}

impl Context {
    /// Ask for a round of `name`'s queue (and its preemption step) in the
    /// scheduler's next cycle.
    pub(super) fn schedule(&self, name: &str) {
        self.scheduler
            .dirty
            .lock()
            .unwrap()
            .insert(name.to_string());
        self.scheduler.wake.notify_one();
    }

    /// The scheduler: cycles for as long as the controller runs. A cycle
    /// starts the rounds of every quota asked for, in fair order, at most
    /// `--workers` running at once, and does not wait for them to end: a
    /// slow round (a release through both webhooks, a preemption step)
    /// holds one place, never the next cycle. A quota whose round is still
    /// running when it is asked for again gets its next round as soon as
    /// that one ends. The rounds are the loop's own tasks: they end with it.
    pub(super) async fn schedule_loop(self: Arc<Self>) {
        let places = Arc::new(tokio::sync::Semaphore::new(self.cfg.workers.max(1)));
        let mut rounds = tokio::task::JoinSet::new();
        loop {
            self.scheduler.wake.notified().await;
            while rounds.try_join_next().is_some() {}
            let names = std::mem::take(&mut *self.scheduler.dirty.lock().unwrap());
            if names.is_empty() {
                continue;
            }
            let count = names.len();
            for name in self.fair_order(names) {
                {
                    let mut r = self.scheduler.rounds.lock().unwrap();
                    if !r.running.insert(name.clone()) {
                        r.again.insert(name);
                        continue;
                    }
                    r.handed.remove(&name);
                }
                let Ok(place) = places.clone().acquire_owned().await else {
                    return;
                };
                let ctx = self.clone();
                rounds.spawn(async move {
                    ctx.queue_round(&name).await;
                    let again = {
                        let mut r = ctx.scheduler.rounds.lock().unwrap();
                        r.running.remove(&name);
                        r.handed.remove(&name);
                        r.again.remove(&name)
                    };
                    if again {
                        ctx.schedule(&name);
                    }
                    drop(place);
                });
            }
            tracing::debug!(quotas = count, "scheduler cycle started");
        }
    }

    /// Ask for another round of `name` in `after` (a round that could not
    /// admit all it planned because the parent lent less than it saw: the
    /// next round plans against what the parent holds then).
    pub(super) fn schedule_after(&self, name: &str, after: Duration) {
        let mut timers = self.scheduler_timers.lock().unwrap();
        let due = tokio::time::Instant::now() + after;
        let e = timers.entry(name.to_string()).or_insert(due);
        *e = (*e).min(due);
    }

    /// `names` in fair order: the quota whose dominant share of its
    /// parent's lendable room is smallest first (a quota that cannot
    /// borrow has share 0), then by name.
    fn fair_order(&self, names: BTreeSet<String>) -> Vec<String> {
        let mut v: Vec<(quota::fair::Dominant, String)> = names
            .into_iter()
            .map(|name| {
                let share = self
                    .service
                    .cached_quota(&name)
                    .filter(|s| !s.quota.spec.parent.is_empty())
                    .and_then(|s| {
                        let p = self.service.cached_quota(&s.quota.spec.parent)?;
                        Some(
                            quota::fair::Sibling::of(&s.quota)
                                .share(&quota::fair::lendable(&p.quota)),
                        )
                    })
                    .unwrap_or(quota::fair::Dominant::ZERO);
                (share, name)
            })
            .collect();
        v.sort_by(|a, b| a.0.share.cmp(&b.0.share).then_with(|| a.1.cmp(&b.1)));
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// One quota's queue round and then its preemption step (marks made,
    /// cancelled or carried out as the queue stands after the round).
    /// Errors are logged: the next reconcile of the quota asks again.
    pub async fn queue_round(&self, name: &str) {
        let mut release = super::queue::ToRelease::default();
        let started = Instant::now();
        let (inputs, unsettled, limits, written, reach) = {
            let _serial = self.one_at_a_time(name).await;
            // What the round would read, as new as what asked for it.
            self.store_caught_up(name).await;
            let (inputs, read) = match self.round_inputs(name).await {
                Some((i, stored)) => (Some(i), Some(stored)),
                None => (None, None),
            };
            let judged = inputs
                .as_ref()
                .map_or(Judged::Run, |i| self.scheduler.judge(name, i));
            // Put off for nothing changed: it takes none of any room left
            // to it (`after_round`); behind a sibling's round it may yet.
            let took_none = matches!(judged, Judged::PutOff(_) | Judged::Arrived { .. });
            let put_off = match judged {
                Judged::Run => None,
                // It would plan nothing again.
                Judged::PutOff(left) => Some(left),
                // Room freed under the parent is first its owner's: a
                // sibling whose round runs or is asked for takes back
                // what its own queue needs, and this round follows it
                // (`after_round`), once. So too room left to fairer
                // siblings: each the allotment gave some takes its part
                // before this round weighs what is left.
                Judged::RoomGrew(left) => {
                    let parent = inputs.as_ref().map_or("", |i| i.parent.as_str());
                    let lender = self.scheduler.sibling_in_round(name, parent, |q| {
                        self.service
                            .cached_quota(q)
                            .map(|s| s.quota.spec.parent.clone())
                    });
                    lender.map(|l| {
                        self.scheduler.waits(name);
                        self.after_round_of(l, name);
                        left
                    })
                }
                // None of them could be admitted: a round would plan
                // nothing again (their places are told at the latest
                // `ARRIVED_AT_MOST` after the idle round).
                Judged::Arrived { since, left } => inputs
                    .as_ref()
                    .zip(read.as_deref())
                    .filter(|(i, stored)| self.arrivals_wait(name, since, stored, &i.limits))
                    .map(|_| left),
            };
            if let Some(left) = put_off {
                // Asked for once more when the idle round is
                // `UNCHANGED_AT_MOST` old, at the latest. Siblings that
                // left it room get their rounds, as after one that ran.
                self.service.metrics.queue_rounds_skipped.inc();
                self.scheduler.again_at(name, Instant::now() + left);
                self.after_round(name, took_none.then_some(started));
                return;
            }
            // This round folds the arrivals kept so far.
            self.view.lock().unwrap().round_runs(name);
            let why = inputs
                .as_ref()
                .map_or("first", |i| self.scheduler.why_run(name, i));
            self.service
                .metrics
                .queue_rounds_run
                .get_or_create(&crate::metrics::CauseLabels {
                    cause: why.to_string(),
                })
                .inc();
            let now = self.now();
            let t0 = std::time::Instant::now();
            let done = self.admit_from_queue(name, now, &mut release, read).await;
            if let Err(e) = &done {
                tracing::warn!(quota = %name, error = %e, "queue step failed; next reconcile retries");
                // Those waiting for this round (room left to it, room freed
                // under its parent) are not left waiting for the retry.
                self.after_round(name, None);
            }
            let m = &self.service.metrics;
            m.queue_round_duration.observe(t0.elapsed().as_secs_f64());
            if done.is_ok() && release.admitted_none() {
                m.queue_rounds_idle.inc();
                m.queue_rounds_run_idle
                    .get_or_create(&crate::metrics::CauseLabels {
                        cause: why.to_string(),
                    })
                    .inc();
            }
            // A round that admitted all it planned is kept as one that
            // planned nothing (`ToRelease::unsettled` says none): its own write,
            // adopted below, is what the next round would read.
            let unsettled = match &done {
                Err(_) => Some("after-error"),
                Ok(()) => release.unsettled(),
            };
            let limits = release.limits.take();
            let written = release.written.take();
            // Only on the version its inputs read.
            let reach = release
                .reach
                .take()
                .filter(|_| release.planned_on.as_ref() == inputs.as_ref().map(|i| &i.stamp))
                .map(|r| (r, release.left_room));
            // Marked as being released before the quota is let go: a
            // reconcile in between would otherwise ungate their pods
            // (`release_gated`) before the round releases the workloads.
            self.mark_releasing(&release);
            (inputs, unsettled, limits, written, reach)
        };
        // The releases are writes through the webhooks: the quota is not
        // held meanwhile, so its reconcile never waits for them.
        let released = self.release_all(name, release).await;
        let mut due = Vec::new();
        let (preempted, stepped) = {
            let _serial = self.one_at_a_time(name).await;
            let now = self.now();
            let step = self.preempt_for_queue(name, now, &mut due).await;
            if let Err(e) = &step {
                tracing::warn!(quota = %name, error = %e, "preemption step failed; next reconcile retries");
            }
            (step.is_err() || !due.is_empty(), step.ok().flatten())
        };
        // The step's own write (its marks, none due) follows the round's:
        // both are what it planned.
        let written = match written {
            Some(w) => Some(w.then(stepped)),
            None => stepped,
        };
        // Where the room it planned within was less than it was told
        // (another replica's loan, a sibling's admission in between), the
        // less: a round is put off only while the room is no more than
        // that.
        let inputs = match inputs {
            None => Err("first"),
            Some(_) if unsettled.is_some() => Err(unsettled.unwrap_or_default()),
            Some(_) if !released => Err("after-release-failed"),
            Some(_) if preempted => Err("after-preempt"),
            Some(i) => Ok(i),
        }
        .and_then(|mut i| {
            // None: it planned nothing (its queue was empty), and the
            // room as read is what a round on the same inputs would find
            // nothing to plan in.
            if let Some(planned) = limits {
                if i.limits.is_empty() != planned.is_empty() {
                    return Err("after-limits");
                }
                for (k, v) in i.limits.iter_mut() {
                    *v = (*v).min(resources::get(&planned, k));
                }
            }
            // Its own writes (the restated queue, the preemption step's
            // marks) from the version it read are what it planned: the
            // next round reads the last.
            if let Some(w) = written.filter(|w| w.on == i.stamp) {
                i.stamp = w.now;
                // Its copy, where this process's cache holds that one.
                i.copy = self
                    .service
                    .cached_quota(name)
                    .filter(|c| crate::store::Stamp::of(c) == i.stamp);
            }
            (i.reach, i.left_room) = reach.map_or((None, false), |(r, left)| (Some(r), left));
            Ok(i)
        });
        self.scheduler.ended(name, inputs, started, self.now());
        // The suspends likewise.
        self.carry_out_all(name, due).await;
        // A time of its own (an alert threshold, an orphan's grace): the
        // quota is reconciled then, which asks for its round.
        let at = self.wake.lock().unwrap().get(name).copied();
        if let Some(at) = at {
            let ms = at.saturating_sub(self.now()).max(1000) as u64;
            self.schedule_after(name, Duration::from_millis(ms).min(self.cfg.resync));
        }
    }

    /// What `name`'s round would plan from, as this process knows it now
    /// (`RoundInputs`), with the copy of the quota they were read from;
    /// None when it cannot say (the quota unread).
    async fn round_inputs(&self, name: &str) -> Option<(RoundInputs, Arc<crate::store::Stored>)> {
        let stored = self.service.recent(name).await.ok()?;
        let limits = self.service.queue_limits_recent(&stored.quota).await.ok()?;
        let (held, arrived) = {
            let v = self.view.lock().unwrap();
            (v.queue_inputs(name), v.arrived(name))
        };
        let inputs = RoundInputs {
            stamp: crate::store::Stamp::of(&stored),
            copy: Some(stored.clone()),
            limits,
            held,
            arrived,
            classes: self.service.priorities.watched(),
            parent: stored.quota.spec.parent.clone(),
            reach: None,
            left_room: false,
        };
        Some((inputs, stored))
    }

    /// Whether none of the held, marked objects that arrived for `name`
    /// after the `since`-th could be admitted by a round now
    /// (`quota::queue::preempt::arrivals_wait`), on `stored` and `limits`,
    /// the quota and room the round's inputs were read from (the idle
    /// round's version, no more room: `Judged::Arrived`): each needs more
    /// than is free, and — where its policy preempts — none outranks
    /// running work it could suspend, nor are preemptions under way that
    /// a new head could change (`preempt::under_way`). False when the
    /// arrivals were not all kept.
    fn arrivals_wait(
        &self,
        name: &str,
        since: u64,
        stored: &crate::store::Stored,
        limits: &ResourceList,
    ) -> bool {
        let Some(arrivals) = self.view.lock().unwrap().arrivals_since(name, since) else {
            return false;
        };
        let q = &stored.quota;
        let classes = self.service.priorities.watched();
        let preempts =
            q.spec.queueing.preemption == quota::object::queueing::Preemption::LowerPriority;
        if preempts && quota::queue::preempt::under_way(q) {
            return false;
        }
        let works: Vec<quota::object::queue::Queued> = arrivals
            .iter()
            .map(|m| {
                let mut w = m.work.clone();
                // Unknown classes: as if it outranked everything.
                w.priority = classes
                    .as_deref()
                    .map_or(i32::MAX, |c| c.resolve(&w.priority_classes).value);
                w
            })
            .collect();
        let running = preempts.then(|| self.preemptible(q, classes.as_deref()));
        let pool = quota::queue::Pool::new(q, limits);
        quota::queue::preempt::arrivals_wait(&works, &pool, running.as_deref())
    }

    /// Quotas whose round asked for a time of its own are touched then.
    pub(super) async fn timer_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            let now = tokio::time::Instant::now();
            let due = crate::util::take_due(&mut self.scheduler_timers.lock().unwrap(), now);
            for name in self.scheduler.due_again() {
                self.schedule(&name);
            }
            if !due.is_empty() {
                // A time the round asked for (a preemption falling due, an
                // orphan's grace, a loan to ask again, a round put off) is
                // a change of its own: the next round runs.
                self.scheduler.drop_idle(&due, "timer");
                self.touch(due);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-21T10:00:00Z
    const T0: i64 = 1_795_255_200_000;

    fn inputs(version: i64, held: u64, cpu: Option<&str>) -> RoundInputs {
        RoundInputs {
            stamp: crate::store::Stamp {
                name: "a".into(),
                version,
                uid: "u".into(),
            },
            copy: None,
            limits: cpu
                .map(|c| ResourceList::from([("requests.cpu".to_string(), c.parse().unwrap())]))
                .unwrap_or_default(),
            held,
            arrived: 0,
            classes: None,
            parent: "org".into(),
            reach: None,
            left_room: false,
        }
    }

    /// `inputs` with its copy of the quota: `change`d from a plain one.
    fn with_copy(version: i64, change: impl FnOnce(&mut quota::Quota)) -> RoundInputs {
        let mut q: quota::Quota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "uid": "u"},
            "spec": {"parent": "org", "hard": {"requests.cpu": "4"}, "queueing": "Queue"},
        }))
        .unwrap();
        change(&mut q);
        let mut i = inputs(version, 3, Some("6"));
        i.copy = Some(Arc::new(crate::store::Stored { quota: q, version }));
        i
    }

    /// A new version that differs only in what no round reads (a
    /// sibling's loan moved its fair share; a reconcile's time) reads as
    /// the idle round's: put off. One that released a charge runs, for
    /// its version.
    #[test]
    fn a_version_a_round_reads_alike_is_put_off() {
        let s = Scheduler::default();
        s.ended("a", Ok(with_copy(7, |_| ())), Instant::now(), T0);
        let shares = with_copy(8, |q| {
            q.status.fair_sharing = Some(Default::default());
            q.status.last_reconcile_time = Some("2026-11-21T10:00:01Z".into());
        });
        assert!(put_off(&s, "a", &shares).is_some(), "only its share moved");
        let freed = with_copy(9, |q| {
            q.status
                .used
                .insert("requests.cpu".into(), "1".parse().unwrap());
        });
        assert_eq!(put_off(&s, "a", &freed), None);
        assert_eq!(s.why_run("a", &freed), "version");
        // Without a copy on either side, only the same version reads alike.
        let mut bare = shares.clone();
        bare.copy = None;
        assert_eq!(put_off(&s, "a", &bare), None);
    }

    fn put_off(s: &Scheduler, name: &str, i: &RoundInputs) -> Option<Duration> {
        match s.judge(name, i) {
            Judged::PutOff(left) => Some(left),
            _ => None,
        }
    }

    /// A round plans what the last idle one planned only where nothing it
    /// reads changed and no key has more room to borrow.
    #[test]
    fn a_round_is_unchanged_only_on_the_same_inputs_and_no_more_room() {
        let idle = inputs(7, 3, Some("6"));
        assert!(idle.unchanged(&inputs(7, 3, Some("6"))));
        assert!(
            idle.unchanged(&inputs(7, 3, Some("5"))),
            "a sibling's admission only takes room"
        );
        assert!(!idle.unchanged(&inputs(7, 3, Some("6.5"))), "room freed");
        assert!(!idle.unchanged(&inputs(8, 3, Some("6"))), "a new version");
        assert!(!idle.unchanged(&inputs(7, 4, Some("6"))), "held objects");
        assert!(
            !idle.unchanged(&inputs(7, 3, None)),
            "no longer borrowing: judged again"
        );
        assert!(!inputs(7, 3, None).unchanged(&inputs(7, 3, Some("1"))));
        assert!(inputs(7, 3, None).unchanged(&inputs(7, 3, None)));
        let mut more = inputs(7, 3, Some("6"));
        more.limits
            .insert("requests.memory".into(), "1Gi".parse().unwrap());
        assert!(!idle.unchanged(&more), "a key with room it had none of");
        let mut classes = inputs(7, 3, Some("6"));
        classes.classes = Some(Arc::new(Classes::default()));
        assert!(!idle.unchanged(&classes), "PriorityClasses changed");
    }

    /// An unchanged round is put off until its idle one is
    /// `UNCHANGED_AT_MOST` old, no longer; a round that was not idle
    /// forgets the record.
    #[test]
    fn an_unchanged_round_is_put_off_at_most_so_long() {
        let s = Scheduler::default();
        let i = inputs(7, 3, Some("6"));
        assert_eq!(put_off(&s, "a", &i), None, "no idle round yet");
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        let left = put_off(&s, "a", &i).expect("put off");
        assert!(left <= UNCHANGED_AT_MOST && left > UNCHANGED_AT_MOST / 2);
        assert_eq!(put_off(&s, "a", &inputs(8, 3, Some("6"))), None);
        assert_eq!(put_off(&s, "b", &i), None, "another quota's");
        let long_ago = Instant::now()
            .checked_sub(UNCHANGED_AT_MOST + Duration::from_millis(1))
            .unwrap_or_else(Instant::now);
        s.ended("a", Ok(i.clone()), long_ago, T0);
        assert_eq!(put_off(&s, "a", &i), None, "old enough: run it");
        // A time the round asked to be woken at comes first.
        s.due_at("a", T0 + 2_000);
        s.due_at("a", T0 + 1_000);
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        let left = put_off(&s, "a", &i).expect("put off");
        assert!(left <= Duration::from_secs(1), "{left:?}");
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        assert!(
            put_off(&s, "a", &i).unwrap() > Duration::from_secs(5),
            "a wake is the next round's only"
        );
        s.due_at("a", T0 - 1);
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        assert_eq!(put_off(&s, "a", &i), None, "a time already past");
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        s.ended("a", Err("after-partial"), Instant::now(), T0);
        assert_eq!(put_off(&s, "a", &i), None, "a round that did something");
        // The next round runs for what kept the last one from being kept.
        assert_eq!(s.why_run("a", &i), "after-partial");
        assert_eq!(s.why_run("b", &i), "first", "no round yet");
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        assert_eq!(s.why_run("a", &inputs(8, 3, Some("6"))), "version");
        s.drop_idle(&["a".to_string(), "b".to_string()], "timer");
        assert_eq!(put_off(&s, "a", &i), None, "a time it asked for came");
        assert_eq!(s.why_run("a", &i), "timer");
        assert_eq!(s.why_run("b", &i), "first", "none was kept for b");
        s.forget(|q| q != "a");
        assert_eq!(s.why_run("a", &i), "first", "a quota made again");
        // Put off rounds are asked for again when their time comes.
        s.again_at("a", Instant::now() + Duration::from_secs(5));
        s.again_at("a", long_ago);
        s.again_at("b", Instant::now() + Duration::from_secs(5));
        assert_eq!(s.due_again(), vec!["a".to_string()]);
        assert!(s.due_again().is_empty());
    }

    /// Arrivals alone are judged apart (`Context::arrivals_wait`), and put
    /// off for `ARRIVED_AT_MOST` after the idle round at most; with any
    /// other change, or more room, the round runs.
    #[test]
    fn arrivals_alone_are_judged_apart_for_a_shorter_while() {
        let s = Scheduler::default();
        let i = inputs(7, 3, Some("6"));
        let with = |mut n: RoundInputs, arrived: u64| {
            n.arrived = arrived;
            n
        };
        assert!(i.only_arrived(&with(i.clone(), 2)));
        assert!(!i.unchanged(&with(i.clone(), 2)));
        assert!(!with(i.clone(), 2).only_arrived(&i), "fewer: no arrival");
        assert!(!i.only_arrived(&i), "none arrived");
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        // What sets a round apart, said for those that run.
        assert_eq!(s.why_run("a", &with(i.clone(), 2)), "arrivals");
        assert_eq!(s.why_run("a", &inputs(8, 3, Some("6"))), "version");
        assert_eq!(s.why_run("a", &inputs(7, 4, Some("6"))), "objects");
        assert_eq!(s.why_run("a", &with(inputs(7, 3, Some("7")), 2)), "room");
        assert_eq!(s.why_run("b", &i), "first");
        match s.judge("a", &with(i.clone(), 2)) {
            Judged::Arrived { since, left } => {
                assert_eq!(since, 0);
                assert!(left <= ARRIVED_AT_MOST && left > ARRIVED_AT_MOST / 2);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(
                s.judge("a", &with(inputs(7, 3, Some("5")), 2)),
                Judged::Arrived { .. }
            ),
            "less room"
        );
        assert_eq!(
            s.judge("a", &with(inputs(7, 3, Some("7")), 2)),
            Judged::Run,
            "more room too"
        );
        assert_eq!(s.judge("a", &with(inputs(7, 4, Some("6")), 2)), Judged::Run);
        assert_eq!(s.judge("a", &with(inputs(8, 3, Some("6")), 2)), Judged::Run);
        // An idle round older than the arrivals' bound: they run it; the
        // same inputs without arrivals are still put off.
        let a_while_ago = Instant::now()
            .checked_sub(ARRIVED_AT_MOST + Duration::from_millis(1))
            .unwrap_or_else(Instant::now);
        s.ended("a", Ok(i.clone()), a_while_ago, T0);
        assert_eq!(s.judge("a", &with(i.clone(), 2)), Judged::Run);
        assert!(matches!(s.judge("a", &i), Judged::PutOff(_)));
    }

    /// A round kept after it left room to a fairer sibling is the base of
    /// a skip only while the room it could borrow no longer reaches what
    /// it could still admit (`RoundInputs::reach`, `left_room`): the sibling took it.
    /// Where the limits still reach it, the round runs, room grown or not,
    /// after one more sibling's round where one runs or is asked for.
    #[test]
    fn a_round_that_left_room_runs_again_only_where_the_room_is_still_there() {
        let s = Scheduler::default();
        let mut left = inputs(7, 3, Some("26"));
        // Used 20 after its write; the least still queued asks 1: 21.
        left.reach = Some(ResourceList::from([(
            "requests.cpu".to_string(),
            "21".parse().unwrap(),
        )]));
        left.left_room = true;
        s.ended("a", Ok(left.clone()), Instant::now(), T0);
        assert!(
            matches!(s.judge("a", &inputs(7, 3, Some("20"))), Judged::PutOff(_)),
            "the sibling took it all"
        );
        assert!(
            matches!(s.judge("a", &inputs(7, 3, Some("20.5"))), Judged::PutOff(_)),
            "less than the least still queued is left"
        );
        // Left: another sibling in a round may take it first, once.
        for left in ["21", "26", "30"] {
            assert!(
                matches!(s.judge("a", &inputs(7, 3, Some(left))), Judged::RoomGrew(_)),
                "{left} left: put off behind a sibling in a round"
            );
        }
        assert_eq!(s.why_run("a", &inputs(7, 3, Some("24"))), "left-room");
        s.waits("a");
        assert_eq!(s.judge("a", &inputs(7, 3, Some("21"))), Judged::Run, "left");
        assert_eq!(
            s.judge("a", &inputs(7, 3, Some("26"))),
            Judged::Run,
            "the sibling took none of it"
        );
        assert_eq!(
            s.judge("a", &inputs(7, 3, Some("30"))),
            Judged::Run,
            "grown"
        );
        // A round that found the room taken puts the next off once again.
        assert!(matches!(
            s.judge("a", &inputs(7, 3, Some("20"))),
            Judged::PutOff(_)
        ));
        assert!(matches!(
            s.judge("a", &inputs(7, 3, Some("21"))),
            Judged::RoomGrew(_)
        ));
        // Without the floor, the same inputs were put off.
        s.ended("a", Ok(inputs(7, 3, Some("26"))), Instant::now(), T0);
        assert!(matches!(
            s.judge("a", &inputs(7, 3, Some("21"))),
            Judged::PutOff(_)
        ));
        // Arrivals alone, with the room still there: run.
        s.ended("a", Ok(left.clone()), Instant::now(), T0);
        let mut arrived = inputs(7, 3, Some("26"));
        arrived.arrived = 2;
        assert_eq!(s.judge("a", &arrived), Judged::Run);
        let mut arrived = inputs(7, 3, Some("20"));
        arrived.arrived = 2;
        assert!(matches!(s.judge("a", &arrived), Judged::Arrived { .. }));
    }

    /// Room that grew without reaching what anything still queued needs at
    /// least (`RoundInputs::reach`) changes nothing: the round is put off
    /// as on the same room. Room that reaches it runs the round (after a
    /// sibling's, once), as room that grew on a round with no reach.
    #[test]
    fn room_that_grew_short_of_the_least_queued_need_changes_nothing() {
        let s = Scheduler::default();
        let mut i = inputs(7, 3, Some("20"));
        // Used 20 after its write; the least still queued asks 5: 25.
        i.reach = Some(ResourceList::from([(
            "requests.cpu".to_string(),
            "25".parse().unwrap(),
        )]));
        assert!(i.unchanged(&inputs(7, 3, Some("24"))), "short of it");
        assert!(!i.unchanged(&inputs(7, 3, Some("25"))), "reaching it");
        assert!(!i.unchanged(&inputs(8, 3, Some("24"))), "a new version");
        assert!(!i.unchanged(&inputs(7, 4, Some("24"))), "held objects");
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        assert!(matches!(
            s.judge("a", &inputs(7, 3, Some("24.9"))),
            Judged::PutOff(_)
        ));
        assert!(matches!(
            s.judge("a", &inputs(7, 3, Some("25"))),
            Judged::RoomGrew(_)
        ));
        assert_eq!(s.why_run("a", &inputs(7, 3, Some("25"))), "room");
        // Room on a key the least need does not name admits nothing while
        // the one it names stays short.
        let mut more = inputs(7, 3, Some("24"));
        more.limits
            .insert("requests.memory".into(), "1Gi".parse().unwrap());
        assert!(i.unchanged(&more));
        // Arrivals alone are judged on what the arrivals need.
        let mut arrived = inputs(7, 3, Some("24"));
        arrived.arrived = 2;
        assert!(i.only_arrived(&arrived));
        assert_eq!(s.why_run("a", &arrived), "arrivals");
    }

    /// Room that grew alone puts a round off behind a sibling's once; the
    /// next such round runs, unless one in between found nothing changed.
    #[test]
    fn room_that_grew_puts_a_round_off_behind_a_siblings_once() {
        let s = Scheduler::default();
        let i = inputs(7, 3, Some("6"));
        s.ended("a", Ok(i.clone()), Instant::now(), T0);
        let more = inputs(7, 3, Some("8"));
        assert!(matches!(s.judge("a", &more), Judged::RoomGrew(_)));
        s.waits("a");
        assert_eq!(s.judge("a", &more), Judged::Run, "once");
        assert!(matches!(s.judge("a", &i), Judged::PutOff(_)), "taken back");
        assert!(
            matches!(s.judge("a", &more), Judged::RoomGrew(_)),
            "after a round that found nothing changed, again"
        );
        assert_eq!(
            s.judge("a", &inputs(8, 3, Some("8"))),
            Judged::Run,
            "room and more changed"
        );
        assert_eq!(s.judge("a", &inputs(7, 3, None)), Judged::Run);
        // Siblings in a round, by their parent.
        s.rounds.lock().unwrap().running.insert("a".into());
        s.rounds.lock().unwrap().running.insert("x".into());
        s.dirty.lock().unwrap().insert("b".into());
        let parent = |q: &str| Some(if q == "x" { "other" } else { "org" }.to_string());
        assert_eq!(s.sibling_in_round("a", "org", parent), Some("b".into()));
        assert_eq!(s.sibling_in_round("b", "org", parent), Some("a".into()));
        assert_eq!(s.sibling_in_round("a", "", parent), None, "no parent");
        s.dirty.lock().unwrap().clear();
        assert_eq!(s.sibling_in_round("a", "org", parent), None, "itself only");
        // A sibling whose round handed over already is followed by no
        // other hand-over, unless it runs again.
        s.rounds.lock().unwrap().running.insert("b".into());
        assert_eq!(s.sibling_in_round("a", "org", parent), Some("b".into()));
        s.handed_over("b");
        assert_eq!(s.sibling_in_round("a", "org", parent), None, "handed over");
        s.rounds.lock().unwrap().again.insert("b".into());
        assert_eq!(
            s.sibling_in_round("a", "org", parent),
            Some("b".into()),
            "runs again"
        );
        s.handed_over("z");
        assert!(
            !s.rounds.lock().unwrap().handed.contains("z"),
            "not running"
        );
    }
}
