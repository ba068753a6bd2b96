//! The controller's decision: what a quota's status should be, given what
//! the cluster shows. Pure: the quota, the workloads bound to it as the
//! controller's cache sees them, and its pods' runs in; the new status out.
//!
//! The cache lags the admission webhook: a charge admitted a moment ago may
//! belong to an object the cache has not seen (or has seen only in its old
//! form). Such a charge is a reservation: it is kept, as admitted, until
//! `ttl_ms` after its admission, and only then does the cache's view win.
//! A reservation only ever holds room, never frees it: a charge an
//! admission lowered (a scale-down, a smaller template) yields at once to a
//! larger one the cache still shows, so a review that lowers a charge —
//! genuine but not yet in effect, or forged — frees nothing that runs.

use crate::budget::periods;
use crate::budget::PriceList;
use crate::cash::{Interval, QosMultipliers};
use crate::keys::cash_target;
use crate::object::deleted::Deleted;
use crate::object::period::PeriodRecord;
use crate::object::{Charge, HpaCharge, Quota, QuotaStatus, Workloads};
use crate::resources::{self, ResourceList};
use crate::time;
use crate::workload::PodSet;
use std::collections::{BTreeMap, BTreeSet};

/// How long an admitted charge outranks the controller's cache.
pub const RESERVATION_TTL_MS: i64 = 120_000;

/// Prefix of the pod sets a reconcile adds to a reservation that neither
/// covers what the cache shows nor is covered by it (say, a model changed
/// and not yet seen): both are held until one of them wins.
pub const OBSERVED_PREFIX: &str = "observed:";

/// Kubernetes writes when a workload finished in whole seconds (a Job's
/// `completionTime`, a pod's `finishedAt`); a charge's `since` has
/// milliseconds. A finish stamped second S happened in [S, S + 1 s).
pub const FINISH_RESOLUTION_MS: i64 = 1_000;

/// Finished workloads whose pods have all ended, each with when it
/// finished (`finished`: the caller has seen every pod of them end): each
/// runs nothing for good, so it leaves the picture — its observed entry
/// and its charge go in this reconcile, not held as a reservation nor
/// kept at 0 pods (a quota whose finished Jobs stay, as Kueue leaves
/// them, kept a record of each: 148 KB objects at 15,000 Jobs). Its
/// submitter goes with the charge (`QuotaStatus::refresh`); the window
/// this reconcile bills, which holds the last of its runs, still names
/// it (the status before the write). A charge that names its object
/// (`Charge::object_uid`: bizrq admitted or released it) is that
/// object's by its uid, whatever the clocks say: it goes when the
/// finished object (`uids`) is the one it names, and stays when it names
/// another (a newer object of the same name). Otherwise, not
/// when its charge was first made after it finished: then the finished
/// object is an older one of the same name that a stale cache still
/// shows (deleted and created again), and the charge is the new one's; it
/// stays, observed as declared, until the cache catches up. "After" allows
/// for the finish's whole-second stamp (`FINISH_RESOLUTION_MS`): a Job
/// charged at 12:00:00.700 that ran 200 ms finished "at 12:00:00", and its
/// charge goes (it was kept until the Job was deleted, so short Jobs
/// filled their quotas with finished work). A charge whose first time
/// cannot be read stays alike. The references released.
pub fn release_finished(
    workloads: &mut Workloads,
    observed: &mut BTreeMap<String, Observed>,
    finished: &BTreeMap<String, i64>,
    uids: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let mut released = BTreeSet::new();
    for (wref, &at) in finished {
        if let Some(c) = workloads.get(wref) {
            let finished_uid = uids.get(wref).filter(|u| !u.is_empty());
            let newer = match (c.object_uid(), finished_uid) {
                (Some(charged), Some(done)) => charged != done,
                _ => time::parse_rfc3339(&c.since)
                    .is_none_or(|since| since >= at.saturating_add(FINISH_RESOLUTION_MS)),
            };
            if newer {
                continue;
            }
        }
        observed.remove(wref);
        workloads.remove(wref);
        released.insert(wref.clone());
    }
    released
}

/// The charges a review lowered below what the cache still shows (a
/// preemption's suspend the watch has not seen yet, a scale-down whose
/// pods still run): each with what is observed. The reconcile charges
/// them back up to it (a lowered charge never outranks the cache), so a
/// queue round that gave their room away first would leave the quota
/// borrowing beyond its loan once it does; the round raises them itself,
/// in its own write (`raise`), and plans with them raised. Finished
/// workloads (`released`) and charges the cache shows no more of are not
/// raised.
///
/// A charge a review took away entirely while the cache still shows its
/// workload running (a DELETE's release the watch has not delivered yet)
/// is the extreme of one lowered: the reconcile charges it again from its
/// cache (`reconcile`, an observed workload without a charge), so it is
/// among them too, and `raise` charges it as observed.
///
/// Not a workload whose DELETE a review released (`status.deleted`) while
/// the watch still shows that very object (`uids`: each observed
/// workload's object uid): its room was given back at the DELETE, and
/// charging it again would store the quota past hard once another
/// admission took that room (`forget_deleted`).
pub fn lowered_below_observed(
    workloads: &Workloads,
    observed: &BTreeMap<String, Observed>,
    released: &BTreeMap<String, i64>,
    deleted: &BTreeMap<String, Deleted>,
    uids: &BTreeMap<String, String>,
) -> Vec<(String, Observed)> {
    let lowered = workloads
        .iter()
        .filter(|(wref, _)| !released.contains_key(*wref))
        // A new object of the name charged while the watch still shows
        // the deleted one: not raised to the deleted one's size.
        .filter(|(wref, _)| !deleted_and_seen(deleted, uids, wref))
        .filter_map(|(wref, c)| {
            let obs = observed.get(wref)?;
            below(c, obs).then(|| (wref.clone(), obs.clone()))
        });
    let taken = observed
        .iter()
        .filter(|(wref, _)| !released.contains_key(*wref) && !workloads.contains_key(wref))
        .filter(|(wref, _)| !deleted_and_seen(deleted, uids, wref))
        .filter(|(_, obs)| runs_anything(obs))
        .map(|(wref, obs)| (wref.clone(), obs.clone()));
    lowered.chain(taken).collect()
}

/// Whether `obs` holds anything (a held workload runs nothing).
fn runs_anything(obs: &Observed) -> bool {
    let c = Charge {
        pod_sets: obs.pod_sets.clone(),
        hpa: obs.hpa.clone(),
        since: String::new(),
        uid: String::new(),
        admitted: None,
    };
    c.usage().values().any(|v| v.nanos() > 0)
}

/// Charge each of `raised` (`lowered_below_observed`) as observed, where
/// its charge is still below it or gone (charged since `now_ms`, as the
/// reconcile charges an observed workload), and restate the usage.
/// Whether any charge changed.
pub fn raise(q: &mut Quota, raised: &[(String, Observed)], now_ms: i64) -> bool {
    let mut changed = false;
    for (wref, obs) in raised {
        match q.status.workloads.get_mut(wref) {
            Some(c) => {
                if below(c, obs) {
                    c.pod_sets = obs.pod_sets.clone();
                    c.hpa = obs.hpa.clone();
                    c.admitted = None;
                    changed = true;
                }
            }
            // Released by a DELETE since the plan was read: not again.
            None if q.status.deleted.contains_key(wref) => {}
            None => {
                q.status.workloads.insert(
                    wref.clone(),
                    Charge {
                        pod_sets: obs.pod_sets.clone(),
                        hpa: obs.hpa.clone(),
                        since: time::format_rfc3339(now_ms),
                        uid: String::new(),
                        admitted: None,
                    },
                );
                changed = true;
            }
        }
    }
    if changed {
        q.status.refresh(&q.spec);
    }
    changed
}

/// How long a released DELETE is remembered (`status.deleted`) when the
/// watch still shows the object: a watch that lags this much is broken,
/// and a DELETE another webhook refused after bizrq's review released
/// it leaves its object running uncharged no longer than this.
pub const DELETED_TTL_MS: i64 = 600_000;

/// At most this many released DELETEs are remembered per quota (about
/// 115 bytes each, 15 KB of the status at most): the oldest goes first. One forgotten early is only
/// the transient recharge `status.deleted` prevents, never a lost charge.
pub const MAX_DELETED: usize = 128;

/// The longest object uid a released DELETE is remembered by: the API
/// server's are 36-character UUIDs.
pub const MAX_DELETED_UID: usize = 128;

/// A DELETE's review released `wref`'s charge, the object `uid`'s, at
/// `now_ms`: remembered in `status.deleted` so that the controller does
/// not charge it again from a watch that still shows it (an object
/// without a uid, an unreadable old object, is not; nor one whose uid is
/// longer than any the API server makes, `MAX_DELETED_UID`: the review
/// is hostile, and the status stays small).
pub fn note_deleted(status: &mut QuotaStatus, wref: &str, uid: &str, now_ms: i64) {
    if uid.is_empty() || uid.len() > MAX_DELETED_UID {
        return;
    }
    status
        .deleted
        .retain(|_, d| time::parse_rfc3339(&d.at).is_some_and(|t| now_ms - t < DELETED_TTL_MS));
    status.deleted.insert(
        wref.to_string(),
        Deleted {
            uid: uid.to_string(),
            at: time::format_rfc3339(now_ms),
        },
    );
    while status.deleted.len() > MAX_DELETED {
        let oldest = status
            .deleted
            .iter()
            .min_by_key(|(_, d)| time::parse_rfc3339(&d.at).unwrap_or(i64::MIN))
            .map(|(w, _)| w.clone());
        match oldest {
            Some(w) => status.deleted.remove(&w),
            None => break,
        };
    }
}

/// Whether `wref` is a released DELETE's object that the watch (`uids`)
/// still shows.
fn deleted_and_seen(
    deleted: &BTreeMap<String, Deleted>,
    uids: &BTreeMap<String, String>,
    wref: &str,
) -> bool {
    deleted
        .get(wref)
        .is_some_and(|d| uids.get(wref) == Some(&d.uid))
}

/// Before a reconcile: an observed workload whose DELETE a review
/// released (`status.deleted`), which the watch (`uids`: the object uid
/// of each workload it shows) still shows as that object is taken out of
/// `observed`, whatever charge its name holds (a new object of the name
/// created at once keeps its own charge) — its room went back at the
/// DELETE, and another admission may have taken it; charging it again
/// from the lagging watch would store the quota past hard until the
/// watch delivers the delete. The entries the watch no longer shows as
/// their object (it delivered the delete, or shows a new object of the
/// name), those older than `DELETED_TTL_MS`, and those the API server
/// was asked about and still holds (`alive`: the DELETE never happened —
/// a forged review, or one another webhook refused — so the object is
/// charged again like any running one) are forgotten. Whether
/// `status.deleted` changed.
pub fn forget_deleted(
    observed: &mut BTreeMap<String, Observed>,
    status: &mut QuotaStatus,
    uids: &BTreeMap<String, String>,
    alive: &BTreeSet<String>,
    now_ms: i64,
) -> bool {
    if status.deleted.is_empty() {
        return false;
    }
    let before = status.deleted.len();
    status.deleted.retain(|wref, d| {
        let young = time::parse_rfc3339(&d.at).is_some_and(|t| now_ms - t < DELETED_TTL_MS);
        young && uids.get(wref) == Some(&d.uid) && !alive.contains(wref)
    });
    // What the watch shows of each is the deleted object, even where a
    // new object of the name holds a charge (created again at once): that
    // charge is kept as any admission the watch does not show yet, never
    // raised to the deleted object's size.
    for wref in status.deleted.keys() {
        observed.remove(wref);
    }
    status.deleted.len() != before
}

/// Whether charge `c` holds less than `obs` shows running and nothing
/// more (the cache shows more, on every key at least as much).
fn below(c: &Charge, obs: &Observed) -> bool {
    let seen = Charge {
        pod_sets: obs.pod_sets.clone(),
        hpa: obs.hpa.clone(),
        ..c.clone()
    }
    .usage();
    let charged = c.usage();
    covers(&seen, &charged) && !covers(&charged, &seen)
}

/// Whether `a` holds at least `b` of every key.
pub fn covers(a: &ResourceList, b: &ResourceList) -> bool {
    resources::diff(b, a).values().all(|q| q.nanos() <= 0)
}

/// A workload bound to the quota, as observed: its pod sets from its spec,
/// and the reservation of an HPA that targets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub pod_sets: Vec<PodSet>,
    pub hpa: Option<HpaCharge>,
}

/// What a reconcile changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Anything a reader of status would see differently.
    pub changed: bool,
    /// Charges dropped: their workloads are gone and their admission is old.
    pub dropped: Vec<String>,
    /// Charges kept only as reservations (admitted, not yet observed as such).
    pub reserved: Vec<String>,
    /// Budget periods closed by this reconcile, by cash key (also kept,
    /// newest first, in `status.budgets`).
    pub closed: Vec<(String, PeriodRecord)>,
}

fn admitted_within(c: &Charge, now_ms: i64, ttl_ms: i64) -> bool {
    c.admitted
        .as_deref()
        .and_then(time::parse_rfc3339)
        .is_some_and(|t| now_ms - t < ttl_ms)
}

/// Bring `q`'s status to what the cluster shows at `now_ms`:
/// - the charge of each observed workload becomes its observed pod sets,
///   unless an admission changed it less than `ttl_ms` ago (kept as is);
/// - a charge whose workload is not observed is kept while its admission is
///   younger than `ttl_ms`, then dropped;
/// - cash accrues from `runs` over `[lastReconcileTime, now)`, and
///   `lastReconcileTime` moves to `now` with it, so a retried reconcile
///   (the status write lost its compare-and-swap) accrues the same window
///   again from the same start, never twice.
pub fn reconcile(
    q: &mut Quota,
    observed: BTreeMap<String, Observed>,
    runs: &[Interval<'_>],
    now_ms: i64,
    ttl_ms: i64,
    prices: &QosMultipliers,
) -> Outcome {
    reconcile_priced(
        q,
        observed,
        runs,
        now_ms,
        ttl_ms,
        prices,
        &PriceList::default(),
    )
}

/// `reconcile`, cash accruing at the weights of `list` in force at each
/// instant (the window cut at every price change, to the millisecond).
pub fn reconcile_priced(
    q: &mut Quota,
    observed: BTreeMap<String, Observed>,
    runs: &[Interval<'_>],
    now_ms: i64,
    ttl_ms: i64,
    prices: &QosMultipliers,
    list: &PriceList,
) -> Outcome {
    let before = q.status.clone();
    let mut out = Outcome::default();
    let now = time::format_rfc3339(now_ms);
    let mut held = std::mem::take(&mut q.status.workloads);
    let mut next = crate::object::Workloads::new();
    for (wref, obs) in observed {
        let charge = match held.remove(&wref) {
            Some(mut c) if admitted_within(&c, now_ms, ttl_ms) => {
                // What an earlier reconcile added: decide from the admission.
                c.pod_sets.retain(|s| !s.name.starts_with(OBSERVED_PREFIX));
                let seen = Charge {
                    pod_sets: obs.pod_sets.clone(),
                    hpa: obs.hpa.clone(),
                    ..c.clone()
                };
                let (admitted, running) = (c.usage(), seen.usage());
                if covers(&admitted, &running) {
                    if !c.same_as(&seen) {
                        out.reserved.push(wref.clone());
                    }
                    c
                } else if covers(&running, &admitted) {
                    // Lowered by a review, yet the cache shows more.
                    c.pod_sets = obs.pod_sets;
                    c.hpa = obs.hpa;
                    c.admitted = None;
                    c
                } else {
                    out.reserved.push(wref.clone());
                    c.pod_sets.extend(obs.pod_sets.into_iter().map(|mut s| {
                        s.name = format!("{OBSERVED_PREFIX}{}", s.name);
                        s
                    }));
                    c
                }
            }
            Some(mut c) => {
                c.pod_sets = obs.pod_sets;
                c.hpa = obs.hpa;
                c.admitted = None;
                c
            }
            None => Charge {
                pod_sets: obs.pod_sets,
                hpa: obs.hpa,
                since: now.clone(),
                uid: String::new(),
                admitted: None,
            },
        };
        next.insert(wref, charge);
    }
    for (wref, c) in held {
        if admitted_within(&c, now_ms, ttl_ms) {
            out.reserved.push(wref.clone());
            next.insert(wref, c);
        } else {
            out.dropped.push(wref);
        }
    }
    q.status.workloads = next;

    let last = q
        .status
        .last_reconcile_time
        .as_deref()
        .and_then(time::parse_rfc3339);
    match last.filter(|l| *l < now_ms) {
        Some(last) => {
            let keys: Vec<(String, String)> = q
                .spec
                .hard
                .keys()
                .filter_map(|k| cash_target(k).map(|t| (k.clone(), t.to_string())))
                .collect();
            // Cut at budget period boundaries: each piece in its period.
            out.closed =
                periods::accrue_in_periods(&q.spec, &mut q.status, last, now_ms, |a, b| {
                    if keys.is_empty() {
                        return BTreeMap::new();
                    }
                    crate::budget::price_list::accrue_weighted(runs, &keys, a, b, prices, list)
                });
            // Reservations are used at their admitted charge's rate, an
            // upper bound of what the pods accrue (`budget::reservations`).
            crate::budget::reservations::consume(&mut q.status, last, now_ms, prices, list);
        }
        None => periods::sync(&q.spec, &mut q.status, now_ms),
    }
    if last.is_none_or(|l| l < now_ms) {
        q.status.last_reconcile_time = Some(now);
    }
    q.status.refresh(&q.spec);

    // The first accrual window must be written down, or the next
    // reconcile would find none again and never accrue.
    out.changed = q.status.differs_visibly(&before)
        || (before.last_reconcile_time.is_none() && q.status.last_reconcile_time.is_some());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::QuotaSpec;
    use crate::object::{OWN_CHARGE, QUEUE_CHARGE};
    use crate::quantity::Quantity;
    use crate::resources::{self, ResourceList};

    const T0: i64 = 1_800_000_000_000;

    #[test]
    fn a_finished_workload_releases_only_a_charge_made_before_it_finished() {
        let charge = |since: &str| Charge {
            pod_sets: sets(4),
            hpa: None,
            since: since.into(),
            uid: "u".into(),
            admitted: Some(since.into()),
        };
        let mut workloads = Workloads::new();
        // Charged at 10:00, finished at 11:00: released.
        workloads.insert("batch/Job/n/done".into(), charge("2026-11-29T10:00:00Z"));
        // Charged at 12:00 (created again), the cache's old object
        // finished at 11:00: kept.
        workloads.insert("batch/Job/n/again".into(), charge("2026-11-29T12:00:00Z"));
        workloads.insert("batch/Job/n/unreadable".into(), charge("yesterday"));
        // Charged at 11:00:00.700, ran 200 ms: its finish is stamped
        // 11:00:00 (whole seconds), and it is released.
        workloads.insert(
            "batch/Job/n/short".into(),
            charge("2026-11-29T11:00:00.700Z"),
        );
        // Charged a whole second after the stamp: another object's.
        workloads.insert(
            "batch/Job/n/later".into(),
            charge("2026-11-29T11:00:01.000Z"),
        );
        let mut observed: BTreeMap<String, Observed> = workloads
            .iter()
            .map(|(w, _)| {
                (
                    w.clone(),
                    Observed {
                        pod_sets: sets(4),
                        hpa: None,
                    },
                )
            })
            .collect();
        let at = time::parse_rfc3339("2026-11-29T11:00:00Z").unwrap();
        // Charges that name their object: judged by uid, not by time.
        // Written by bizrq's release a second after the finish stamp
        // (clocks, or a late write): the finished object's own, it goes.
        // Admitted from the queue before the finish, for another object
        // (the name created again): it stays.
        for (name, since, uid) in [
            (
                "own",
                "2026-11-29T11:00:05.000Z",
                format!("{OWN_CHARGE}obj-1"),
            ),
            (
                "other",
                "2026-11-29T10:00:00Z",
                format!("{QUEUE_CHARGE}obj-2"),
            ),
        ] {
            let mut c = charge(since);
            c.uid = uid;
            workloads.insert(format!("batch/Job/n/{name}"), c);
            let o = Observed {
                pod_sets: sets(4),
                hpa: None,
            };
            observed.insert(format!("batch/Job/n/{name}"), o);
        }
        let finished: BTreeMap<String, i64> = observed.keys().map(|w| (w.clone(), at)).collect();
        let uids: BTreeMap<String, String> = [
            ("batch/Job/n/own".to_string(), "obj-1".to_string()),
            ("batch/Job/n/other".to_string(), "obj-3".to_string()),
        ]
        .into();
        let released = release_finished(&mut workloads, &mut observed, &finished, &uids);
        assert_eq!(
            released,
            BTreeSet::from([
                "batch/Job/n/done".to_string(),
                "batch/Job/n/own".to_string(),
                "batch/Job/n/short".to_string()
            ]),
        );
        for gone in ["batch/Job/n/done", "batch/Job/n/short"] {
            assert!(!observed.contains_key(gone), "{gone}");
            assert!(!workloads.contains_key(gone), "{gone}");
        }
        for kept in [
            "batch/Job/n/other",
            "batch/Job/n/again",
            "batch/Job/n/unreadable",
            "batch/Job/n/later",
        ] {
            assert_eq!(observed[kept].pod_sets[0].count, 4, "{kept}");
            assert!(workloads.get(kept).unwrap().admitted.is_some(), "{kept}");
        }
    }

    #[test]
    fn a_charge_a_review_lowered_below_the_cache_is_raised_to_it() {
        let mut q = gpu_quota(8);
        let since = "2026-11-29T10:00:00Z";
        let charge = |count: i64| gpu_charge(count, since, "u", Some(since));
        // Suspended by a review (0), the cache still shows 4 running.
        q.status
            .workloads
            .insert("batch/Job/n/victim".into(), charge(0));
        // Charged 2, the cache shows 2: nothing to raise.
        q.status
            .workloads
            .insert("batch/Job/n/even".into(), charge(2));
        // Charged 3, the cache shows 1 (a fresh admission): kept.
        q.status
            .workloads
            .insert("batch/Job/n/fresh".into(), charge(3));
        // Finished: its charge goes, never raised.
        q.status
            .workloads
            .insert("batch/Job/n/done".into(), charge(0));
        q.status.refresh(&q.spec.clone());
        let obs = gpu_obs;
        let observed: BTreeMap<String, Observed> = [
            ("batch/Job/n/victim".to_string(), obs(4)),
            ("batch/Job/n/even".to_string(), obs(2)),
            ("batch/Job/n/fresh".to_string(), obs(1)),
            ("batch/Job/n/done".to_string(), obs(1)),
        ]
        .into();
        let finished: BTreeMap<String, i64> = [("batch/Job/n/done".to_string(), T0)].into();
        let raised = lowered_below_observed(
            &q.status.workloads,
            &observed,
            &finished,
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        let refs: Vec<&str> = raised.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(refs, ["batch/Job/n/victim"]);
        assert!(raise(&mut q, &raised, T0));
        assert_eq!(
            q.status.used["requests.nvidia.com/gpu"],
            Quantity::from_units(9)
        );
        assert_eq!(q.status.workloads["batch/Job/n/victim"].admitted, None);
        // Raised already (by the reconcile, or a round before): no change.
        assert!(!raise(&mut q, &raised, T0));
        // A DELETE's review released "gone" while the cache still shows it
        // running 2: the reconcile would charge it again, so a round plans
        // with it charged (since now); a held one (0 running) is not.
        let mut observed = observed;
        observed.insert("batch/Job/n/gone".into(), obs(2));
        observed.insert("batch/Job/n/held".into(), obs(0));
        let raised = lowered_below_observed(
            &q.status.workloads,
            &observed,
            &finished,
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        let refs: Vec<&str> = raised.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(refs, ["batch/Job/n/gone"]);
        assert!(raise(&mut q, &raised, T0));
        assert_eq!(
            q.status.used["requests.nvidia.com/gpu"],
            Quantity::from_units(11)
        );
        assert_eq!(
            q.status.workloads["batch/Job/n/gone"].since,
            crate::time::format_rfc3339(T0)
        );
    }

    /// `a` (4 GPUs) is deleted: the DELETE's review releases its charge
    /// and remembers it (`note_deleted`), and a create takes its room
    /// (`b`, 8 of 8). The watch still shows `a` running: the round does
    /// not plan nor write it raised, the reconcile does not charge it
    /// again (the quota would be stored at 12 of 8), and once the watch
    /// delivers the delete — or shows a new object of the name — the
    /// entry is forgotten. An unreadable old object (no uid) is not
    /// remembered, and the oldest entries go beyond `MAX_DELETED`.
    #[test]
    fn a_released_delete_the_watch_still_shows_is_not_charged_again() {
        let mut q = gpu_quota(8);
        let since = crate::time::format_rfc3339(T0);
        let charge = |count: i64| gpu_charge(count, &since, "req", None);
        let obs = gpu_obs;
        let (a, b) = ("batch/Job/n/a", "batch/Job/n/b");
        q.status.workloads.insert(b.into(), charge(8));
        note_deleted(&mut q.status, a, "uid-a", T0);
        note_deleted(&mut q.status, "batch/Job/n/unread", "", T0);
        let hostile = "u".repeat(MAX_DELETED_UID + 1);
        note_deleted(&mut q.status, "batch/Job/n/hostile", &hostile, T0);
        assert_eq!(q.status.deleted.len(), 1);
        q.status.refresh(&q.spec.clone());
        let mut observed: BTreeMap<String, Observed> =
            [(a.to_string(), obs(4)), (b.to_string(), obs(8))].into();
        let uids: BTreeMap<String, String> = [
            (a.to_string(), "uid-a".to_string()),
            (b.to_string(), "uid-b".to_string()),
        ]
        .into();
        let none = BTreeMap::new();
        let raised = lowered_below_observed(
            &q.status.workloads,
            &observed,
            &none,
            &q.status.deleted,
            &uids,
        );
        assert!(raised.is_empty(), "{raised:?}");
        // A round that read its plan before the DELETE's write: not again.
        assert!(!raise(&mut q, &[(a.to_string(), obs(4))], T0));
        assert!(!forget_deleted(
            &mut observed,
            &mut q.status,
            &uids,
            &BTreeSet::new(),
            T0 + 1_000
        ));
        assert!(!observed.contains_key(a));
        reconcile(
            &mut q,
            observed,
            &[],
            T0 + 1_000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert_eq!(
            q.status.used["requests.nvidia.com/gpu"],
            Quantity::from_units(8)
        );
        assert!(!q.status.workloads.contains_key(a));
        // A new object of the name: forgotten, and charged as any.
        let mut observed: BTreeMap<String, Observed> = [(a.to_string(), obs(1))].into();
        let again: BTreeMap<String, String> = [(a.to_string(), "uid-a2".to_string())].into();
        assert!(forget_deleted(
            &mut observed,
            &mut q.status,
            &again,
            &BTreeSet::new(),
            T0 + 2_000
        ));
        assert!(q.status.deleted.is_empty() && observed.contains_key(a));
        // The watch delivered the delete: forgotten too; and past the TTL.
        note_deleted(&mut q.status, a, "uid-a", T0);
        assert!(forget_deleted(
            &mut BTreeMap::new(),
            &mut q.status,
            &BTreeMap::new(),
            &BTreeSet::new(),
            T0 + 1
        ));
        note_deleted(&mut q.status, a, "uid-a", T0);
        let mut observed: BTreeMap<String, Observed> = [(a.to_string(), obs(4))].into();
        assert!(forget_deleted(
            &mut observed,
            &mut q.status,
            &uids,
            &BTreeSet::new(),
            T0 + DELETED_TTL_MS
        ));
        assert!(observed.contains_key(a));
        // The API server still holds the very object (a forged DELETE, or
        // one another webhook refused): forgotten at once, charged again.
        note_deleted(&mut q.status, a, "uid-a", T0);
        let mut observed: BTreeMap<String, Observed> = [(a.to_string(), obs(4))].into();
        let alive: BTreeSet<String> = [a.to_string()].into();
        assert!(forget_deleted(
            &mut observed,
            &mut q.status,
            &uids,
            &alive,
            T0 + 1
        ));
        assert!(q.status.deleted.is_empty() && observed.contains_key(a));
        // Created again at once, smaller (2): while the watch still shows
        // the deleted object (4), the new charge is neither planned nor
        // reconciled up to the deleted one's size.
        note_deleted(&mut q.status, a, "uid-a", T0);
        q.status.workloads.insert(a.into(), charge(2));
        q.status.refresh(&q.spec.clone());
        let raised = lowered_below_observed(
            &q.status.workloads,
            &[(a.to_string(), obs(4))].into(),
            &none,
            &q.status.deleted,
            &uids,
        );
        assert!(raised.is_empty(), "{raised:?}");
        let mut observed: BTreeMap<String, Observed> = [(a.to_string(), obs(4))].into();
        forget_deleted(
            &mut observed,
            &mut q.status,
            &uids,
            &BTreeSet::new(),
            T0 + 1,
        );
        assert!(!observed.contains_key(a));
        q.status.workloads.remove(a);
        q.status.deleted.clear();
        // Bounded: the oldest go first.
        for i in 0..MAX_DELETED + 5 {
            note_deleted(
                &mut q.status,
                &format!("batch/Job/n/j{i:04}"),
                "u",
                T0 + i as i64,
            );
        }
        assert_eq!(q.status.deleted.len(), MAX_DELETED);
        assert!(!q.status.deleted.contains_key("batch/Job/n/j0004"));
        assert!(q.status.deleted.contains_key("batch/Job/n/j0005"));
    }

    /// A root quota of `hard` GPUs.
    fn gpu_quota(hard: i64) -> Quota {
        let spec = QuotaSpec {
            hard: gpus(hard),
            ..Default::default()
        };
        Quota::new("q", spec)
    }

    /// A charge of `count` pods of one GPU each.
    fn gpu_charge(count: i64, since: &str, uid: &str, admitted: Option<&str>) -> Charge {
        Charge {
            pod_sets: vec![PodSet {
                name: "main".into(),
                count,
                per_pod: gpus(1),
                qos: None,
            }],
            hpa: None,
            since: since.into(),
            uid: uid.into(),
            admitted: admitted.map(Into::into),
        }
    }

    /// `n` pods of one GPU each, as the cache shows them.
    fn gpu_obs(n: i64) -> Observed {
        Observed {
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: n,
                per_pod: gpus(1),
                qos: None,
            }],
            hpa: None,
        }
    }

    fn gpus(n: i64) -> ResourceList {
        [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(n),
        )]
        .into()
    }
    fn sets(count: i64) -> Vec<PodSet> {
        vec![PodSet {
            name: "main".into(),
            count,
            per_pod: gpus(1),
            qos: None,
        }]
    }
    fn quota() -> Quota {
        let mut hard = gpus(100);
        hard.insert(
            "cash/requests.nvidia.com/gpu".into(),
            Quantity::from_units(1000),
        );
        let mut q = Quota::new(
            "q",
            QuotaSpec {
                parent: String::new(),
                hard,
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        q.status.last_reconcile_time = Some(time::format_rfc3339(T0));
        q
    }
    fn admitted(count: i64, at: i64) -> Charge {
        Charge {
            pod_sets: sets(count),
            hpa: None,
            since: time::format_rfc3339(at),
            uid: "u".into(),
            admitted: Some(time::format_rfc3339(at)),
        }
    }
    fn obs(count: i64) -> Observed {
        Observed {
            pod_sets: sets(count),
            hpa: None,
        }
    }
    fn used(q: &Quota) -> Quantity {
        resources::get(&q.status.used, "requests.nvidia.com/gpu")
    }

    #[test]
    fn fresh_admissions_outrank_the_cache_until_the_ttl() {
        let mut q = quota();
        // Admitted 5 replicas just now; the cache still shows the old 2.
        q.status.workloads.insert("w".into(), admitted(5, T0));
        // Admitted, not yet in the cache at all.
        q.status.workloads.insert("new".into(), admitted(3, T0));
        // Old charge whose workload is gone.
        q.status
            .workloads
            .insert("gone".into(), admitted(4, T0 - 10 * RESERVATION_TTL_MS));
        let out = reconcile(
            &mut q,
            [("w".to_string(), obs(2))].into(),
            &[],
            T0 + 1000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert_eq!(out.dropped, vec!["gone".to_string()]);
        assert_eq!(out.reserved, vec!["w".to_string(), "new".to_string()]);
        assert_eq!(used(&q), Quantity::from_units(8), "5 + 3 held, 4 released");

        // Past the TTL the cache wins: w at 2, new never appeared.
        let out = reconcile(
            &mut q,
            [("w".to_string(), obs(2))].into(),
            &[],
            T0 + RESERVATION_TTL_MS + 1,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert_eq!(out.dropped, vec!["new".to_string()]);
        assert_eq!(used(&q), Quantity::from_units(2));
        assert_eq!(q.status.workloads["w"].admitted, None);
    }

    #[test]
    fn a_lowered_reservation_yields_to_what_still_runs() {
        let mut q = quota();
        // A review scaled w from 5 to 1 just now; the cache still shows 5
        // (forged, or not yet in effect).
        q.status.workloads.insert("w".into(), admitted(1, T0));
        let out = reconcile(
            &mut q,
            [("w".to_string(), obs(5))].into(),
            &[],
            T0 + 1000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert!(out.reserved.is_empty());
        assert_eq!(used(&q), Quantity::from_units(5));
        assert_eq!(q.status.workloads["w"].admitted, None);
        // Once the cache shows the scale-down, it is charged at 1.
        reconcile(
            &mut q,
            [("w".to_string(), obs(1))].into(),
            &[],
            T0 + 2000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert_eq!(used(&q), Quantity::from_units(1));
    }

    #[test]
    fn a_reservation_of_another_model_holds_both_until_one_wins() {
        let mut q = quota();
        q.spec
            .hard
            .insert("requests.cpu".into(), Quantity::from_units(100));
        let mut cpu = admitted(0, T0);
        cpu.pod_sets[0].per_pod = [("requests.cpu".to_string(), Quantity::from_units(1))].into();
        cpu.pod_sets[0].count = 3;
        q.status.workloads.insert("w".into(), cpu.clone());
        let cpu_used = |q: &Quota| resources::get(&q.status.used, "requests.cpu");
        // Admitted as 3 CPUs; the cache still shows 2 GPUs: both held.
        for at in [T0 + 1000, T0 + 2000] {
            let out = reconcile(
                &mut q,
                [("w".to_string(), obs(2))].into(),
                &[],
                at,
                RESERVATION_TTL_MS,
                &QosMultipliers::default(),
            );
            assert_eq!(out.reserved, vec!["w".to_string()]);
            assert_eq!(used(&q), Quantity::from_units(2));
            assert_eq!(cpu_used(&q), Quantity::from_units(3));
        }
        // The cache catches up: only the admission is left.
        reconcile(
            &mut q,
            [(
                "w".to_string(),
                Observed {
                    pod_sets: cpu.pod_sets.clone(),
                    hpa: None,
                },
            )]
            .into(),
            &[],
            T0 + 3000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert_eq!(used(&q), Quantity::ZERO);
        assert_eq!(cpu_used(&q), Quantity::from_units(3));
    }

    #[test]
    fn workloads_seen_without_admission_are_charged() {
        let mut q = quota();
        let out = reconcile(
            &mut q,
            [("a".to_string(), obs(7))].into(),
            &[],
            T0 + 1,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert!(out.changed);
        assert_eq!(used(&q), Quantity::from_units(7));
    }

    #[test]
    fn cash_from_pod_runs_including_a_pod_deleted_in_between() {
        let mut q = quota();
        let one = gpus(1);
        let runs = [
            // Running the whole hour.
            Interval {
                usage: &one,
                qos: None,
                start_ms: T0 - 1000,
                end_ms: None,
            },
            // Deleted half an hour in: its last stretch is still charged.
            Interval {
                usage: &one,
                qos: None,
                start_ms: T0 - 1000,
                end_ms: Some(T0 + 1_800_000),
            },
        ];
        reconcile(
            &mut q,
            BTreeMap::new(),
            &runs,
            T0 + 3_600_000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        let spent = resources::get(&q.status.used, "cash/requests.nvidia.com/gpu");
        assert_eq!(spent, "1500m".parse().unwrap());
        // Reconciling again at the same instant accrues nothing more.
        let out = reconcile(
            &mut q,
            BTreeMap::new(),
            &runs,
            T0 + 3_600_000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        assert!(!out.changed);
        assert_eq!(
            resources::get(&q.status.used, "cash/requests.nvidia.com/gpu"),
            spent
        );
    }

    #[test]
    fn a_retry_from_the_same_status_accrues_the_same_window_once() {
        let q0 = quota();
        let one = gpus(1);
        let runs = [Interval {
            usage: &one,
            qos: None,
            start_ms: T0,
            end_ms: None,
        }];
        let mut first = q0.clone();
        reconcile(
            &mut first,
            BTreeMap::new(),
            &runs,
            T0 + 3_600_000,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        // The write lost its compare-and-swap; the retry starts from the
        // stored status again, a little later.
        let mut retry = q0.clone();
        reconcile(
            &mut retry,
            BTreeMap::new(),
            &runs,
            T0 + 3_600_500,
            RESERVATION_TTL_MS,
            &QosMultipliers::default(),
        );
        let spent = |q: &Quota| q.status.accrued("cash/requests.nvidia.com/gpu");
        assert!(spent(&retry) > spent(&first) && spent(&retry) < 2 * spent(&first));
    }
}
