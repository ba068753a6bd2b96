//! Heavy requests: the pages, charts, reports and exports whose work grows
//! with what they show. Each takes a [`Permit`] before it reads anything
//! (at most `per_user` at once per person and `total` at once in all;
//! one more is answered 429 with `Retry-After`, never queued), and runs
//! its CPU-bound part (drawing charts, rendering HTML, writing CSV) on
//! the render threads, not on the async runtime's.
//!
//! Why: the admission webhook shares the process and its CPUs. A page
//! that renders for seconds on a runtime thread takes that thread from
//! every request behind it, and a hundred chart requests at once each hold
//! their samples in memory. With this gate the memory of heavy requests is
//! at most `total` times one request's (each bounded by the limits in
//! docs/limits.md), the portal's runtime threads only wait for them, and
//! the render threads run at a lower scheduling priority (nice 10 on
//! Linux), as the portal's runtime does (`lib::SideRuntime`), so that an
//! admission that needs a CPU gets it first.

use crate::metrics::ScopeLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Keys of a quota page that count as one heavy request: the page holds
/// the folded samples of every key (and its children's) while it draws.
pub const KEYS_PER_PLACE: usize = 64;

/// The places a quota page of `keys` keys takes: one per
/// [`KEYS_PER_PLACE`] keys, four times that for a range whose samples are
/// kept as stored (24 h: up to 1,441 points a series, about four times a
/// year's 366).
pub fn page_places(keys: usize, kept_as_stored: bool) -> usize {
    keys.max(1).div_ceil(KEYS_PER_PLACE) * if kept_as_stored { 4 } else { 1 }
}

/// What a refused heavy request tells its client to wait, in seconds.
pub const RETRY_SECS: u64 = 2;

/// The scheduling priority of the render threads (Linux nice value).
const RENDER_NICE: i32 = 10;

/// How many heavy requests may run, and where they render.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// At once in all.
    pub total: usize,
    /// At once per person (session user or token owner).
    pub per_user: usize,
    /// Threads rendering; at least one.
    pub threads: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            total: 8,
            per_user: 2,
            threads: default_threads(),
        }
    }
}

/// Half the CPUs the process may use (at least one): the rest stay with
/// the runtime and its admissions, whatever the portal asks.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() / 2)
        .unwrap_or(1)
        .max(1)
}

/// A heavy request refused: too many of its person's, or in all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("you already have {0} heavy requests (pages with charts, reports, exports) running; try again in a few seconds")]
    PerUser(usize),
    #[error("bizrq is serving {0} heavy requests (pages with charts, reports, exports) at once, its limit; try again in a few seconds")]
    Total(usize),
}

impl Refused {
    /// Which cap, as the metric `bizrq_heavy_refused_total` labels it.
    pub fn scope(&self) -> &'static str {
        match self {
            Refused::PerUser(_) => "user",
            Refused::Total(_) => "all",
        }
    }
}

/// Refusals counted by `Refused::scope` (the server's metrics registry's
/// family, or one of its own).
pub type RefusalCounter = Family<ScopeLabels, Counter>;

/// A render job ended without a result (it panicked; the panic is in the
/// log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rendering failed; see the bizrq logs")]
pub struct Failed;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The gate and the render threads. Cheap to share behind an `Arc`.
pub struct Heavy {
    config: Config,
    running: Mutex<Running>,
    jobs: Mutex<mpsc::Sender<Job>>,
    refused: RefusalCounter,
}

#[derive(Default)]
struct Running {
    total: usize,
    by_user: HashMap<String, usize>,
}

impl Heavy {
    /// A gate counting its refusals where nobody reads them (tests).
    pub fn new(config: Config) -> Arc<Heavy> {
        Heavy::counted(config, RefusalCounter::default())
    }

    /// A gate counting its refusals in `refused`.
    pub fn counted(config: Config, refused: RefusalCounter) -> Arc<Heavy> {
        let config = Config {
            total: config.total.max(1),
            per_user: config.per_user.max(1),
            threads: config.threads.max(1),
        };
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..config.threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("bizrq-render-{i}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        // The lock is held only while waiting for a job; the
                        // sender's drop (the gate's) ends every thread.
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        match job {
                            // A panic ends the job (its caller sees it as a
                            // dropped reply), not the thread.
                            Ok(job) => {
                                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                            }
                            Err(_) => return,
                        }
                    }
                })
                .expect("spawn a render thread");
        }
        Arc::new(Heavy {
            config,
            running: Mutex::new(Running::default()),
            jobs: Mutex::new(tx),
            refused,
        })
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// A place for one heavy request of `user`, or why not. Never waits.
    pub fn enter(self: &Arc<Self>, user: &str) -> Result<Permit, Refused> {
        let mut r = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mine = r.by_user.get(user).copied().unwrap_or(0);
        let refused = if mine >= self.config.per_user {
            Some(Refused::PerUser(mine))
        } else if r.total >= self.config.total {
            Some(Refused::Total(r.total))
        } else {
            None
        };
        if let Some(why) = refused {
            drop(r);
            self.refused
                .get_or_create(&ScopeLabels {
                    scope: why.scope().to_string(),
                })
                .inc();
            return Err(why);
        }
        r.total += 1;
        *r.by_user.entry(user.to_string()).or_insert(0) += 1;
        Ok(Permit {
            place: Arc::new(Place {
                gate: self.clone(),
                user: user.to_string(),
                extra: std::sync::atomic::AtomicUsize::new(0),
            }),
        })
    }

    /// Requests refused so far by the cap of `scope` (`Refused::scope`).
    pub fn refused(&self, scope: &str) -> u64 {
        self.refused
            .get_or_create(&ScopeLabels {
                scope: scope.to_string(),
            })
            .get()
    }

    /// Heavy requests running now.
    pub fn running(&self) -> usize {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).total
    }

    fn leave(&self, user: &str, extra: usize) {
        let mut r = self.running.lock().unwrap_or_else(|e| e.into_inner());
        r.total = r.total.saturating_sub(1 + extra);
        if let Some(n) = r.by_user.get_mut(user) {
            *n -= 1;
            if *n == 0 {
                r.by_user.remove(user);
            }
        }
    }
}

/// One heavy request's place; given back when the request and every job
/// it sent to the render threads have ended.
pub struct Permit {
    place: Arc<Place>,
}

/// The place itself, held by the request and by each of its jobs.
struct Place {
    gate: Arc<Heavy>,
    user: String,
    /// Places beyond the first that `Permit::widen` took for it.
    extra: std::sync::atomic::AtomicUsize,
}

impl Drop for Place {
    fn drop(&mut self) {
        let extra = *self.extra.get_mut();
        self.gate.leave(&self.user, extra);
    }
}

impl Permit {
    /// Count this request as `places` of the gate's `total` in all (at
    /// least one, at most the whole gate): a request found, once it has read
    /// what it shows, to hold as much as several ordinary ones (a quota
    /// page of 256 keys holds the folded year of every key). Never waits:
    /// with the places not free it is refused as `enter` refuses, and its
    /// first place is given back when the permit drops. The per-person cap
    /// still counts it once. Widening again to fewer places keeps what it
    /// holds.
    pub fn widen(&self, places: usize) -> Result<(), Refused> {
        use std::sync::atomic::Ordering;
        let gate = &self.place.gate;
        let want = places.clamp(1, gate.config.total) - 1;
        let mut r = gate.running.lock().unwrap_or_else(|e| e.into_inner());
        let have = self.place.extra.load(Ordering::Relaxed);
        if want <= have {
            return Ok(());
        }
        let more = want - have;
        if r.total + more > gate.config.total {
            let why = Refused::Total(r.total);
            drop(r);
            gate.refused
                .get_or_create(&ScopeLabels {
                    scope: why.scope().to_string(),
                })
                .inc();
            return Err(why);
        }
        r.total += more;
        self.place.extra.store(want, Ordering::Relaxed);
        Ok(())
    }

    /// Runs `f` on a render thread and gives its result. The place goes
    /// with the job and is given back when `f` ends, even if the request
    /// is abandoned meanwhile: what runs never exceeds the gate's count.
    pub async fn render<T, F>(self, f: F) -> Result<T, Failed>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.work(f).await
    }

    /// Runs `f` on a render thread, the request keeping its place for
    /// more (parsing what it read before it reads on, say). The job holds
    /// the place too, so an abandoned request's job still counts until it
    /// ends.
    pub async fn work<T, F>(&self, f: F) -> Result<T, Failed>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let place = self.place.clone();
        let gate = place.gate.clone();
        let job: Job = Box::new(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            // The job's hold on the place goes before the answer: whoever
            // reads the answer of a request's last job finds it free.
            drop(place);
            // A panic (already in the log) drops `tx`: the caller gets Failed.
            if let Ok(v) = out {
                let _ = tx.send(v);
            }
        });
        let sent = gate
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job);
        // The request's own hold goes once it is answered (for `render`,
        // `self` is dropped on return).
        match sent {
            Ok(()) => rx.await.map_err(|_| Failed),
            // The threads are gone, which cannot happen while the gate lives.
            Err(_) => Err(Failed),
        }
    }
}

/// Which CPUs the portal's threads may run on, out of those the process
/// may use (`allowed`, ascending) when its CPU time is worth `usable` CPUs
/// (`std::thread::available_parallelism`: a container's CPU limit
/// included): all but the first `reserved`, and never more than `usable -
/// reserved` of them. `None`: no pin (nothing can be kept apart, or
/// `reserved` is 0).
///
/// Why a count and not only a set: under a CPU limit (a cgroup quota) the
/// process may be allowed every CPU of the node while its time is worth
/// two; a portal free to run on all of them could spend the whole quota
/// and have the admissions throttled with it. Pinned to `usable -
/// reserved` CPUs it can spend at most that.
pub fn portal_cpus(allowed: &[usize], usable: usize, reserved: usize) -> Option<Vec<usize>> {
    if reserved == 0 || allowed.len() <= reserved || usable <= reserved {
        return None;
    }
    let keep = (usable - reserved).min(allowed.len() - reserved);
    Some(allowed[allowed.len() - keep..].to_vec())
}

/// The portal's CPUs, chosen once at start (`keep_cpus_for_admissions`).
#[cfg(target_os = "linux")]
static PORTAL_CPUS: std::sync::OnceLock<Option<libc::cpu_set_t>> = std::sync::OnceLock::new();

/// Keeps `reserved` CPUs free of the portal's threads (render, password
/// hashing, the portal's runtime and the SQLite connections it opens):
/// every thread that calls `lower_priority` afterwards is pinned to the
/// others (`portal_cpus`). Called once at start, before any of them is
/// created; later calls change nothing. Returns the CPUs chosen.
#[cfg(target_os = "linux")]
pub fn keep_cpus_for_admissions(reserved: usize) -> Option<Vec<usize>> {
    let chosen = PORTAL_CPUS.get_or_init(|| {
        // SAFETY: a zeroed cpu_set_t is a valid empty set, and
        // sched_getaffinity writes at most its size into it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let got =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if got != 0 {
            return None;
        }
        let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect();
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = portal_cpus(&allowed, usable, reserved)?;
        let mut pin: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for c in cpus {
            // SAFETY: c < CPU_SETSIZE (it came from the set above).
            unsafe { libc::CPU_SET(c, &mut pin) };
        }
        Some(pin)
    });
    chosen.as_ref().map(|set| {
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, set) })
            .collect()
    })
}

#[cfg(not(target_os = "linux"))]
pub fn keep_cpus_for_admissions(_reserved: usize) -> Option<Vec<usize>> {
    None
}

/// Lowers the calling thread's scheduling priority (to nice 10) and, if
/// CPUs are kept for admissions (`keep_cpus_for_admissions`), pins it to
/// the others. On Linux both are per thread, so this leaves the other
/// threads as they are; a thread this one creates later (sqlx's SQLite
/// connection threads) inherits both. The render threads, the password
/// hashing threads and the portal's runtime call it.
#[cfg(target_os = "linux")]
pub fn lower_priority() {
    lower_priority_unpinned();
    if let Some(Some(set)) = PORTAL_CPUS.get() {
        // SAFETY: `set` is a valid cpu_set_t of ours, read only; pid 0 is
        // the calling thread.
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
        if r != 0 {
            tracing::debug!("could not pin the thread to the portal's CPUs");
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub fn lower_priority() {}

/// Lowers the calling thread's scheduling priority (to nice 10) and
/// leaves it free to run on every CPU: the controller's runtime calls it.
/// Its work is throughput (rounds, reconciles, releases) where a review
/// is latency the API server waits on: on a busy node bizrq's webhook
/// threads run first (nice ranks the process's own threads; in the Kueue
/// bench the API server's too, as it shares the process), and the
/// controller takes what they leave — on two cores that halved the webhooks' medians and cut the
/// mutating one's p99 by a sixth to a third, and the Kueue baseline
/// finished sooner (docs/benchmarks.md, "the controller yields the
/// CPU"). Not pinned as the portal is: it needs both cores when the
/// webhooks are idle.
#[cfg(target_os = "linux")]
pub fn lower_priority_unpinned() {
    // SAFETY: setpriority takes plain integers and touches no memory of ours;
    // `who` 0 is the calling thread on Linux.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, RENDER_NICE) };
    if r != 0 {
        tracing::debug!("could not lower the thread's priority");
    }
}

#[cfg(not(target_os = "linux"))]
pub fn lower_priority_unpinned() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portal_keeps_off_the_reserved_cpus_and_within_the_limit() {
        // Two CPUs, one kept: the portal runs on the second.
        assert_eq!(portal_cpus(&[0, 1], 2, 1), Some(vec![1]));
        // Eight: seven for the portal, CPU 0 free.
        assert_eq!(
            portal_cpus(&(0..8).collect::<Vec<_>>(), 8, 1),
            Some((1..8).collect())
        );
        // A node of 64 CPUs under a limit worth 2: one CPU, so the portal
        // can never spend the whole quota.
        assert_eq!(
            portal_cpus(&(0..64).collect::<Vec<_>>(), 2, 1),
            Some(vec![63])
        );
        // Nothing to keep apart: one CPU, a limit of one, or none reserved.
        assert_eq!(portal_cpus(&[0], 1, 1), None);
        assert_eq!(portal_cpus(&[0, 1, 2, 3], 1, 1), None);
        assert_eq!(portal_cpus(&[0, 1], 2, 0), None);
        assert_eq!(portal_cpus(&[0, 1], 2, 2), None);
        // A cpuset of odd CPUs: the last ones are chosen.
        assert_eq!(portal_cpus(&[3, 5, 7], 3, 1), Some(vec![5, 7]));
    }

    #[test]
    fn places_are_capped_per_user_and_in_all_and_given_back() {
        let gate = Heavy::new(Config {
            total: 3,
            per_user: 2,
            threads: 1,
        });
        let a1 = gate.enter("ana").unwrap();
        let a2 = gate.enter("ana").unwrap();
        assert_eq!(gate.enter("ana").err(), Some(Refused::PerUser(2)));
        let b1 = gate.enter("bo").unwrap();
        assert_eq!(gate.enter("cy").err(), Some(Refused::Total(3)));
        assert_eq!(gate.running(), 3);
        drop(a1);
        assert!(gate.enter("cy").is_ok(), "a place given back is free again");
        drop((a2, b1));
        assert_eq!(gate.running(), 0);
        assert!(gate.running.lock().unwrap().by_user.is_empty());
        assert_eq!((gate.refused("user"), gate.refused("all")), (1, 1));
    }

    #[test]
    fn a_page_takes_a_place_per_64_keys_and_four_for_a_day() {
        assert_eq!(page_places(0, false), 1);
        assert_eq!(page_places(64, false), 1);
        assert_eq!(page_places(65, false), 2);
        assert_eq!(page_places(256, false), 4);
        assert_eq!(page_places(256, true), 16);
    }

    #[test]
    fn a_wide_request_counts_as_several_and_gives_them_all_back() {
        let gate = Heavy::new(Config {
            total: 8,
            per_user: 2,
            threads: 1,
        });
        let wide = gate.enter("ana").unwrap();
        wide.widen(4).unwrap();
        assert_eq!(gate.running(), 4);
        // Never more than the whole gate, whatever it asks: with half of
        // it taken, a request asking for all of it is refused.
        let wider = gate.enter("bo").unwrap();
        assert_eq!(wider.widen(100).err(), Some(Refused::Total(5)));
        wider.widen(4).unwrap();
        assert_eq!(gate.running(), 8);
        assert_eq!(gate.enter("cy").err(), Some(Refused::Total(8)));
        drop(wider);
        assert_eq!(gate.running(), 4, "all its places given back");
        // Widening past what is free is refused and takes nothing more.
        let a = gate.enter("cy").unwrap();
        let b = gate.enter("dee").unwrap();
        let c = gate.enter("eve").unwrap();
        let d = gate.enter("fay").unwrap();
        assert_eq!(d.widen(2).err(), Some(Refused::Total(8)));
        assert_eq!(gate.running(), 8);
        // Asking again for the same or fewer keeps what it holds.
        wide.widen(2).unwrap();
        assert_eq!(gate.running(), 8);
        drop((wide, a, b, c, d));
        assert_eq!(gate.running(), 0);
        assert!(gate.running.lock().unwrap().by_user.is_empty());
    }

    #[tokio::test]
    async fn a_render_runs_off_the_runtime_and_keeps_its_place_until_it_ends() {
        let gate = Heavy::new(Config {
            total: 1,
            per_user: 1,
            threads: 1,
        });
        let name = gate
            .enter("ana")
            .unwrap()
            .render(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("bizrq-render-0"));
        assert_eq!(gate.running(), 0, "given back when the job ended");
        // An abandoned request's job keeps its place until the job ends.
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (go_tx, go) = std::sync::mpsc::channel::<()>();
        let p = gate.enter("ana").unwrap();
        let task = tokio::spawn(p.render(move || {
            started_tx.send(()).unwrap();
            go.recv().unwrap();
        }));
        started.await.unwrap();
        task.abort();
        let _ = task.await;
        assert_eq!(gate.enter("bo").err(), Some(Refused::Total(1)));
        go_tx.send(()).unwrap();
        for _ in 0..200 {
            if gate.running() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(gate.running(), 0);
        // Work under a place keeps it for the request; the place goes when
        // the request drops it.
        let p = gate.enter("ana").unwrap();
        let n = p.work(|| 41 + 1).await.unwrap();
        assert_eq!(n, 42);
        assert_eq!(gate.running(), 1, "still the request's");
        assert_eq!(p.render(move || n).await.unwrap(), 42);
        assert_eq!(gate.running(), 0);
        // A job that panics answers Failed and frees its place.
        let r = gate.enter("ana").unwrap().render(|| panic!("boom")).await;
        assert_eq!(r, Err::<(), _>(Failed));
        assert_eq!(gate.running(), 0);
    }
}
