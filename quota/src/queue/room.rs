//! The ceiling a borrower's queue may plan against (docs/queueing.md §3):
//! per key of its `max`, what it could use if its parent lent it all the
//! idle capacity it can lend now. Worked out by asking `borrow::lend`, on
//! a copy of the parent, for everything up to max and reading from its
//! answer how much it would lend — so the queue and the real borrowing
//! admission can never disagree about what is idle.

use super::admit::{Decision, Pool};
use crate::admission::Denial;
use crate::borrow::{self, LoanRequest, Standing};
use crate::object::queue::Queued;
use crate::object::Quota;
use crate::resources::{self, ResourceList};
use std::collections::BTreeMap;

/// `limits` for `Pool::new` of `child`: on each key of its max, its used
/// (or hard, if more) plus what `parent` could lend it beyond that now,
/// capped by max. Empty for a quota that cannot borrow (no max, or no
/// parent given). `children` are the parent's children as stored, as for
/// `borrow::lend`.
pub fn borrow_limits(
    child: &Quota,
    parent: Option<&Quota>,
    children: &BTreeMap<String, Standing>,
    now_ms: i64,
) -> ResourceList {
    let Some(parent) = parent.filter(|_| !child.spec.max.is_empty()) else {
        return ResourceList::new();
    };
    let mut req = LoanRequest::of(child.name());
    for (k, m) in &child.spec.max {
        let h = resources::get(&child.spec.hard, k);
        let u = resources::get(&child.status.used, k);
        let want = m.saturating_sub(h);
        if want.nanos() <= 0 {
            continue;
        }
        req.want.insert(k.clone(), want);
        req.asked.insert(k.clone(), m.saturating_sub(u));
        req.used.insert(k.clone(), u);
        req.hard.insert(k.clone(), h);
        req.max.insert(k.clone(), *m);
    }
    let mut probe = parent.clone();
    let short = match borrow::lend(&mut probe, &req, children, now_ms) {
        Ok(_) => Vec::new(),
        Err(Denial::Short(s)) => s,
        // lend denies only with shortfalls; anything else lends nothing.
        Err(_) => return ResourceList::new(),
    };
    child
        .spec
        .max
        .iter()
        .map(|(k, m)| {
            let limit = match short.iter().find(|s| &s.key == k) {
                None => *m,
                Some(s) => {
                    let base = resources::get(&child.status.used, k)
                        .max(resources::get(&child.spec.hard, k));
                    let more = s
                        .borrowing
                        .as_ref()
                        .map(|b| b.to_borrow)
                        .unwrap_or_default();
                    base.saturating_add(more).min(*m)
                }
            };
            (k.clone(), limit)
        })
        .collect()
}

/// The least `limits` (as `borrow_limits` gives them) on which work of
/// `usage` fits `quota` with `used` charged: per key it needs beyond hard,
/// `used + usage` (`admission::ceiling` is hard, or the limit capped by
/// max, whichever is more). Empty: it fits within hard, whatever the
/// limits. None: it never fits this spec (beyond max, or beyond a hard it
/// may not borrow past). Keys hard does not name are not limited.
///
/// A queue round that left room to a fairer sibling keeps this for the
/// least of what still waits (`least`): a round on the same quota
/// version plans an admission again only where the room it could borrow
/// reaches it (`fits_on`), so the rounds asked for after the sibling's
/// need not run (docs/queueing.md §12).
pub fn limits_to_fit(
    quota: &Quota,
    used: &ResourceList,
    usage: &ResourceList,
) -> Option<ResourceList> {
    let mut need = ResourceList::new();
    for (k, d) in usage {
        if d.nanos() <= 0 {
            continue;
        }
        let Some(hard) = quota.spec.hard.get(k) else {
            continue;
        };
        let n = resources::get(used, k).saturating_add(*d);
        if n <= *hard {
            continue;
        }
        match quota.spec.max.get(k) {
            Some(m) if n <= *m => {
                need.insert(k.clone(), n);
            }
            _ => return None,
        }
    }
    Some(need)
}

/// Whether `limits` reach `need` (`limits_to_fit`) on every key it names
/// (a key `limits` does not name is zero there).
pub fn fits_on(need: &ResourceList, limits: &ResourceList) -> bool {
    need.iter().all(|(k, v)| resources::get(limits, k) >= *v)
}

/// Per key, the least of `usages` (zero on a key one of them does not
/// name): what every one of them asks at least, so work that this does
/// not fit, none of them fits. Empty for no usages.
pub fn least<'a>(usages: impl IntoIterator<Item = &'a ResourceList>) -> ResourceList {
    let mut it = usages.into_iter();
    let Some(first) = it.next() else {
        return ResourceList::new();
    };
    let mut least = first.clone();
    for u in it {
        least.retain(|k, v| match u.get(k) {
            Some(x) => {
                *v = (*v).min(*x);
                true
            }
            None => false,
        });
    }
    least
}

/// The floor a queue round that left room to a fairer sibling is kept
/// with (docs/queueing.md §12): the least limits on which a round on `q`
/// as that round wrote it — `pool`'s used with `admitted` (of
/// `decisions`) charged — could admit any of `known` it did not admit
/// (`limits_to_fit` of their `least` usage). Below them, on the same
/// version, nothing still queued fits. None: nothing still queued could
/// ever fit this spec.
pub fn floor(
    q: &Quota,
    pool: &Pool,
    known: &[Queued],
    decisions: &[Decision],
    admitted: &[String],
) -> Option<ResourceList> {
    let taken = |w: &str| admitted.iter().any(|a| a == w);
    let mut after = pool.clone();
    for d in decisions {
        if let Decision::Admit(a) = d {
            if taken(&a.workload_ref) {
                after.take(&a.usage);
            }
        }
    }
    let least = least(
        known
            .iter()
            .filter(|e| !taken(&e.workload_ref))
            .map(|e| e.usage()),
    );
    limits_to_fit(q, after.used(), &least)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission;
    use crate::object::queue::Queued;
    use crate::object::queueing::QueuePolicy;
    use crate::object::{Charge, QuotaSpec};
    use crate::quantity::Quantity;
    use crate::queue::{next_admissions, Decision, Pool};
    use crate::workload::PodSet;

    const CPU: &str = "requests.cpu";
    const T0: i64 = 1_800_000_000_000;

    fn cpu(n: i64) -> ResourceList {
        [(CPU.to_string(), Quantity::from_units(n))].into()
    }
    fn node(name: &str, parent: &str, hard: i64, max: Option<i64>) -> Quota {
        Quota::new(
            name,
            QuotaSpec {
                budgets: Default::default(),
                parent: parent.into(),
                hard: cpu(hard),
                max: max.map(cpu).unwrap_or_default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        )
    }
    fn pods(n: i64) -> Vec<PodSet> {
        vec![PodSet {
            name: "main".into(),
            count: n,
            per_pod: cpu(1),
            qos: None,
        }]
    }
    /// A queued Job of `n` pods of one CPU.
    fn job(name: &str, n: i64) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ns/{name}"),
            uid: name.into(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: T0,
            pod_sets: pods(n).into(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
        }
    }
    fn run(q: &mut Quota, w: &str, n: i64) {
        let c = Charge {
            pod_sets: pods(n),
            hpa: None,
            since: crate::time::format_rfc3339(T0),
            uid: String::new(),
            admitted: None,
        };
        admission::charge(q, w, c).unwrap();
    }

    #[test]
    fn a_borrower_may_plan_up_to_what_its_parent_can_lend() {
        // p 10 = a 4 (max 8) + b 4 + c 2; b uses 3, a 4: 3 idle.
        let mut p = node("p", "", 10, None);
        for (n, h) in [("a", 4), ("b", 4), ("c", 2)] {
            crate::tree::carve(&mut p, n, &cpu(h), "2026-01-01T00:00:00Z").unwrap();
        }
        let mut a = node("a", "p", 4, Some(8));
        let mut b = node("b", "p", 4, None);
        let c = node("c", "p", 2, None);
        run(&mut b, "w", 3);
        run(&mut a, "w", 4);
        let kids = Standing::of_all([&a, &b, &c]);
        let limits = borrow_limits(&a, Some(&p), &kids, T0);
        assert_eq!(limits, cpu(7));
        assert!(
            p.status.loans.is_empty(),
            "the parent itself is not touched"
        );
        // c idle too and b gone quiet: up to max.
        let quiet = Standing::of_all([&a, &node("b", "p", 4, None), &c]);
        assert_eq!(borrow_limits(&a, Some(&p), &quiet, T0), cpu(8));
        // No parent, or no max: hard only.
        assert!(borrow_limits(&a, None, &kids, T0).is_empty());
        assert!(borrow_limits(&b, Some(&p), &kids, T0).is_empty());
        // The queue then admits 3 and no more, and the real path agrees.
        let d = next_admissions(
            &[job("x", 3), job("y", 1)],
            &Pool::new(&a, &limits),
            &[],
            &QueuePolicy::queue(),
            T0,
        );
        let Decision::Admit(x) = &d[0] else {
            panic!("{d:?}")
        };
        assert_eq!(x.borrows, cpu(3));
        assert!(matches!(d[1], Decision::Wait(_)));
        let req = borrow::needed(&a, &x.usage).unwrap().unwrap();
        borrow::lend(&mut p, &req, &kids, T0).unwrap();
        let l = borrow::limits(&a, &borrow::loan_of(&p, "a"));
        admission::charge_within(&mut a, &x.workload_ref, x.charge.clone(), &l).unwrap();
    }

    /// `limits_to_fit` and `fits_on` say what `admission::ceiling` says:
    /// work fits on limits exactly where they reach its need.
    #[test]
    fn the_limits_to_fit_are_where_the_ceiling_admits() {
        let q = node("a", "p", 4, Some(8));
        let fits = |used: i64, ask: i64, limits: &ResourceList| {
            let u = resources::get(&cpu(used), CPU).saturating_add(Quantity::from_units(ask));
            u <= admission::ceiling(&q, CPU, limits).unwrap()
        };
        for used in 0..10 {
            for ask in 1..10 {
                let need = limits_to_fit(&q, &cpu(used), &cpu(ask));
                for l in 0..12 {
                    let limits = cpu(l);
                    let said = need.as_ref().is_some_and(|n| fits_on(n, &limits));
                    assert_eq!(
                        said,
                        fits(used, ask, &limits),
                        "used {used}, ask {ask}, limits {l}"
                    );
                }
                let said = need
                    .as_ref()
                    .is_some_and(|n| fits_on(n, &ResourceList::new()));
                assert_eq!(said, fits(used, ask, &ResourceList::new()), "no limits");
            }
        }
        // Within hard: nothing needed; past max: never.
        assert_eq!(
            limits_to_fit(&q, &cpu(1), &cpu(3)),
            Some(ResourceList::new())
        );
        assert_eq!(limits_to_fit(&q, &cpu(1), &cpu(8)), None);
        assert_eq!(limits_to_fit(&q, &cpu(1), &cpu(5)), Some(cpu(6)));
        // A key hard does not name is not limited.
        let gpu: ResourceList = [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(3),
        )]
        .into();
        assert_eq!(limits_to_fit(&q, &cpu(0), &gpu), Some(ResourceList::new()));
        // A quota that may not borrow: past hard, never.
        let b = node("b", "p", 4, None);
        assert_eq!(limits_to_fit(&b, &cpu(3), &cpu(2)), None);
    }

    /// On two keys, one within hard and one beyond: only the one beyond
    /// is needed, and limits must reach it there.
    #[test]
    fn the_limits_to_fit_name_only_the_keys_beyond_hard() {
        let mem = |n: i64| ("requests.memory".to_string(), Quantity::from_units(n));
        let mut q = node("a", "p", 4, Some(8));
        q.spec.hard.extend([mem(10)]);
        q.spec.max.extend([mem(16)]);
        let used: ResourceList = [(CPU.to_string(), Quantity::from_units(4)), mem(2)].into();
        let ask: ResourceList = [(CPU.to_string(), Quantity::from_units(2)), mem(3)].into();
        let need = limits_to_fit(&q, &used, &ask).unwrap();
        assert_eq!(need, cpu(6), "memory fits within hard");
        let limits = |c: i64, m: i64| -> ResourceList {
            [(CPU.to_string(), Quantity::from_units(c)), mem(m)].into()
        };
        for (c, m) in [(5, 16), (6, 10), (8, 16), (6, 0)] {
            let l = limits(c, m);
            let ceiling_fits = ask.iter().all(|(k, d)| {
                resources::get(&used, k).saturating_add(*d)
                    <= admission::ceiling(&q, k, &l).unwrap()
            });
            assert_eq!(
                fits_on(&need, &l),
                ceiling_fits,
                "limits cpu {c}, memory {m}"
            );
        }
        // Beyond hard on memory too, past its max: never.
        let big: ResourceList = [(CPU.to_string(), Quantity::from_units(2)), mem(15)].into();
        assert_eq!(limits_to_fit(&q, &used, &big), None);
    }

    /// `least` is a lower bound of every usage: what it does not fit,
    /// none of them fits.
    #[test]
    fn the_least_usage_is_below_every_one() {
        let mem = |n: i64| ("requests.memory".to_string(), Quantity::from_units(n));
        let a: ResourceList = [(CPU.to_string(), Quantity::from_units(5)), mem(2)].into();
        let b: ResourceList = [(CPU.to_string(), Quantity::from_units(1)), mem(7)].into();
        let c = cpu(3);
        assert_eq!(
            least([&a, &b]),
            [(CPU.to_string(), Quantity::from_units(1)), mem(2)].into()
        );
        assert_eq!(least([&a, &b, &c]), cpu(1), "c asks no memory");
        assert_eq!(least(std::iter::empty()), ResourceList::new());
        let q = node("a", "p", 4, Some(8));
        for limits in 0..12 {
            let limits = cpu(limits);
            let floor = limits_to_fit(&q, &cpu(4), &least([&a, &b, &c]));
            for u in [&a, &b, &c] {
                let one = limits_to_fit(&q, &cpu(4), u).is_some_and(|n| fits_on(&n, &limits));
                assert!(
                    !one || floor.as_ref().is_some_and(|f| fits_on(f, &limits)),
                    "one fits where the least does not"
                );
            }
        }
    }

    /// The floor is taken over what the round did not admit (the
    /// entries it left to a sibling and those that waited), on its used
    /// with what it admitted charged: 3 admitted of hard 4, the least
    /// still queued 2, so limits of 5 at least.
    #[test]
    fn the_floor_is_the_least_still_queued_on_what_was_admitted() {
        let q = node("kid", "org", 4, Some(8));
        let pool = Pool::new(&q, &cpu(8));
        let known = vec![job("a", 3), job("b", 4), job("c", 2)];
        let (decisions, _, _) =
            crate::queue::admit::round(&known, &pool, &[], &Default::default(), 1_000);
        let admits = |d: &[Decision]| {
            d.iter()
                .filter_map(|d| match d {
                    Decision::Admit(a) => Some(a.workload_ref.clone()),
                    Decision::Wait(_) => None,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(admits(&decisions), ["batch/Job/ns/a", "batch/Job/ns/b"]);
        // b left to a sibling: a alone admitted.
        let a = vec!["batch/Job/ns/a".to_string()];
        assert_eq!(floor(&q, &pool, &known, &decisions, &a), Some(cpu(5)));
        // Nothing admitted: the least, 2, fits within hard whatever the
        // room.
        assert_eq!(
            floor(&q, &pool, &known, &decisions, &[]),
            Some(ResourceList::new())
        );
        // Past max: nothing still queued could ever fit.
        let mut small = q.clone();
        small.spec.max = cpu(4);
        assert_eq!(floor(&small, &pool, &known, &decisions, &a), None);
    }
}
