//! What a quota's charges hold together, key by key, kept as they change
//! (`Workloads::sums`), so that `QuotaStatus::held` and `self_usage` read a
//! total instead of walking every charge. `refresh` runs several times per
//! admission, and walking a busy quota's charges key by key each time was
//! the largest cost of an admission (README, Benchmarks, "The allocator
//! and kept sums").
//!
//! A sum is the very value the walk gives: the walk adds, charge by charge
//! in reference order and pod set by pod set, each amount per pod times
//! the set's charged count, and its result prints in the format of the
//! first of those terms that is not zero (`Quantity::saturating_add` keeps
//! the format of a non-zero left side). A sum keeps that term's format and
//! its charge's reference, so a change before it, or to it, can move the
//! format as the walk would. Sums are kept only while they are exact: a
//! negative term, or one that overflows, is not summed (such a charge is
//! refused on admission, so only a hand-edited status holds one), and the
//! walk answers instead.

use super::Charge;
use crate::quantity::{Format, Quantity};
use std::collections::BTreeMap;

/// One key's sum over every charge.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KeySum {
    /// Exact, and more than zero: a key that sums to zero has no entry.
    nanos: i128,
    /// The format of the first non-zero term, in the walk's order…
    format: Format,
    /// …and the charge it belongs to.
    first: String,
}

/// Every key's sum (`KeySum`); a key none of the charges holds has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Sums(BTreeMap<String, KeySum>);

/// One charge's terms, key by key: the nanos it holds (more than zero) and
/// the format of its first non-zero pod-set term. None: a term is negative
/// or overflows, and cannot be summed exactly.
fn terms(c: &Charge) -> Option<Vec<(&str, i128, Format)>> {
    let mut out: Vec<(&str, i128, Format)> = Vec::new();
    for set in &c.pod_sets {
        let n = i128::from(c.charged_count(set));
        for (k, q) in &set.per_pod {
            let t = q.nanos().checked_mul(n)?;
            if t < 0 {
                return None;
            }
            if t == 0 {
                continue;
            }
            match out.iter_mut().find(|(ok, ..)| *ok == k.as_str()) {
                Some(e) => e.1 = e.1.checked_add(t)?,
                None => out.push((k.as_str(), t, q.format())),
            }
        }
    }
    Some(out)
}

impl Sums {
    /// The sums of `charges`, in reference order; None where they cannot be
    /// summed exactly.
    pub(super) fn of<'a>(charges: impl Iterator<Item = (&'a String, &'a Charge)>) -> Option<Sums> {
        let mut sums = Sums::default();
        for (wref, c) in charges {
            sums.replace(wref, None, Some(c))?;
        }
        Some(sums)
    }

    /// What the charges hold of `key`, as the walk gives it.
    pub(super) fn get(&self, key: &str) -> Quantity {
        self.0.get(key).map_or(Quantity::ZERO, |s| {
            Quantity::from_nanos(s.nanos).with_format(s.format)
        })
    }

    /// Every key held, as `QuotaStatus::self_usage` gives it.
    pub(super) fn all(&self) -> crate::resources::ResourceList {
        self.0
            .iter()
            .map(|(k, s)| {
                (
                    k.clone(),
                    Quantity::from_nanos(s.nanos).with_format(s.format),
                )
            })
            .collect()
    }

    /// The charge of `wref` goes from `old` to `new` (None: absent). None
    /// when the sums can no longer be kept (a term that cannot be summed,
    /// or the first term of a key gone with no way to tell the next but a
    /// walk): the caller drops them, and they are summed again when next
    /// asked.
    pub(super) fn replace(
        &mut self,
        wref: &str,
        old: Option<&Charge>,
        new: Option<&Charge>,
    ) -> Option<()> {
        let old = old.map(terms).unwrap_or(Some(Vec::new()))?;
        let new = new.map(terms).unwrap_or(Some(Vec::new()))?;
        // Keys whose first term was `wref`'s and is gone: the new charge
        // may give it again, else only a walk finds the next.
        let mut lost: Vec<&str> = Vec::new();
        for (k, t, _) in &old {
            let s = self.0.get_mut(*k)?;
            s.nanos = s.nanos.checked_sub(*t)?;
            if s.first == wref {
                lost.push(k);
            }
        }
        for (k, t, format) in new {
            match self.0.get_mut(k) {
                None => {
                    let first = wref.to_string();
                    self.0.insert(
                        k.to_string(),
                        KeySum {
                            nanos: t,
                            format,
                            first,
                        },
                    );
                }
                Some(s) => {
                    s.nanos = s.nanos.checked_add(t)?;
                    if let Some(i) = lost.iter().position(|l| *l == k) {
                        lost.swap_remove(i);
                        s.format = format;
                    } else if wref < s.first.as_str() {
                        s.format = format;
                        s.first = wref.to_string();
                    }
                }
            }
        }
        for (k, ..) in &old {
            let s = &self.0[*k];
            if s.nanos < 0 {
                return None;
            }
            if s.nanos == 0 {
                // Every term of the key was this charge's.
                self.0.remove(*k);
                lost.retain(|l| l != k);
            }
        }
        lost.is_empty().then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Charge, HpaCharge, QuotaStatus, Workloads};
    use crate::quantity::Quantity;
    use crate::workload::PodSet;
    use proptest::prelude::*;

    const KEYS: [&str; 3] = ["cpu", "memory", "requests.nvidia.com/gpu"];
    /// Amounts written in each format, and zero; one negative (a hand-edited
    /// status), and one that overflows a sum times the largest count.
    const AMOUNTS: [&str; 9] = [
        "0",
        "1",
        "500m",
        "2Gi",
        "1536Mi",
        "1e3",
        "3",
        "-1",
        "9223372036854775807",
    ];

    fn charge() -> impl Strategy<Value = Charge> {
        let set = (
            prop::collection::btree_map(0..KEYS.len(), 0..AMOUNTS.len(), 0..3),
            // Large counts overflow a sum (i64::MAX at once, i32::MAX
            // in a few terms of the largest amount); a negative one is a
            // hand-edited status.
            prop_oneof![
                8 => 0i64..4,
                1 => Just(i64::from(i32::MAX)),
                1 => Just(i64::MAX),
                1 => Just(-1i64),
            ],
        )
            .prop_map(|(per_pod, count)| PodSet {
                name: "main".into(),
                count,
                per_pod: per_pod
                    .into_iter()
                    .map(|(k, a)| (KEYS[k].to_string(), AMOUNTS[a].parse().unwrap()))
                    .collect(),
                qos: None,
            });
        (
            prop::collection::vec(set, 0..3),
            prop::option::weighted(0.2, 0i64..6),
        )
            .prop_map(|(pod_sets, hpa)| Charge {
                hpa: hpa.map(|max_replicas| HpaCharge {
                    name: "h".into(),
                    max_replicas,
                }),
                pod_sets,
                since: "2026-11-28T00:00:00.000Z".into(),
                uid: String::new(),
                admitted: None,
            })
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(usize, Charge),
        InsertJson(usize, Charge),
        Remove(usize),
        Resize(usize, i64),
        Retain(usize),
        Clear,
        /// Every charge's first pod set one pod larger (`values_mut`).
        GrowAll,
        /// The charges written as JSON and read back.
        Reread,
        /// A copy is taken; later ops change the original, and the
        /// copy must stay as it was…
        Fork,
        /// …but for what is done to the copy itself.
        ChangeFork(usize, Charge),
    }

    fn op() -> impl Strategy<Value = Op> {
        let w = 0usize..6;
        prop_oneof![
            6 => (w.clone(), charge()).prop_map(|(w, c)| Op::Insert(w, c)),
            2 => (w.clone(), charge()).prop_map(|(w, c)| Op::InsertJson(w, c)),
            3 => w.clone().prop_map(Op::Remove),
            2 => (w.clone(), 0i64..5).prop_map(|(w, n)| Op::Resize(w, n)),
            1 => w.clone().prop_map(Op::Retain),
            1 => Just(Op::Clear),
            1 => Just(Op::GrowAll),
            1 => Just(Op::Reread),
            1 => Just(Op::Fork),
            1 => (w, charge()).prop_map(|(w, c)| Op::ChangeFork(w, c)),
        ]
    }

    fn wref(i: usize) -> String {
        format!("batch/Job/ns/w{i}")
    }

    /// Same value, and, where it is not zero, same format (zero prints
    /// "0" in every format).
    fn same(a: &Quantity, b: &Quantity) -> bool {
        a == b && (a.is_zero() || a.format() == b.format())
    }

    /// `status`'s sums (kept in its own charges, so that the next change
    /// keeps them, when the test asks at every step) against the walk.
    fn check(status: &QuotaStatus) -> Result<(), TestCaseError> {
        let w = &status.workloads;
        for key in KEYS {
            let (kept, walk) = (status.held(key), w.walk(key));
            prop_assert!(same(&kept, &walk), "{key}: kept {kept:?}, walked {walk:?}");
        }
        let (kept, walk) = (status.self_usage(), w.walk_usage());
        prop_assert_eq!(
            kept.keys().collect::<Vec<_>>(),
            walk.keys().collect::<Vec<_>>()
        );
        for (k, v) in &kept {
            prop_assert!(same(v, &walk[k]), "{k}: kept {v:?}, walked {:?}", walk[k]);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Whatever is done to a quota's charges, what they hold reads as
        /// the walk over them gives it, format included: asked for after
        /// every step (so the sums are kept through the changes) or only
        /// at the end (summed whole), and in a copy that went its own way.
        #[test]
        fn kept_sums_read_as_the_walk_over_the_charges(
            ops in prop::collection::vec(op(), 1..40),
            ask_each_step in any::<bool>(),
        ) {
            let mut status = QuotaStatus::default();
            let mut forks: Vec<(QuotaStatus, Workloads)> = Vec::new();
            for op in ops {
                let w = &mut status.workloads;
                match op {
                    Op::Insert(i, c) => {
                        w.insert(wref(i), c);
                    }
                    Op::InsertJson(i, c) => {
                        let json = serde_json::to_string(&c).unwrap();
                        let known = forks.last().map(|(f, _)| &f.workloads);
                        w.insert_json(wref(i), json, known).unwrap();
                    }
                    Op::Remove(i) => {
                        w.remove(&wref(i));
                    }
                    Op::Resize(i, n) => {
                        if let Some(s) = w.get_mut(&wref(i)).and_then(|c| c.pod_sets.first_mut()) {
                            s.count = n;
                        }
                    }
                    Op::Retain(i) => w.retain(|k, _| *k != wref(i)),
                    Op::Clear => w.clear(),
                    Op::GrowAll => {
                        for c in w.values_mut() {
                            if let Some(s) = c.pod_sets.first_mut() {
                                s.count = s.count.saturating_add(1);
                            }
                        }
                    }
                    Op::Reread => {
                        *w = serde_json::from_str(&serde_json::to_string(w).unwrap()).unwrap();
                    }
                    Op::Fork => {
                        let copy = status.clone();
                        let deep: Workloads = status
                            .workloads
                            .iter()
                            .map(|(k, c)| (k.clone(), c.clone()))
                            .collect();
                        forks.push((copy, deep));
                    }
                    Op::ChangeFork(i, c) => {
                        if let Some((copy, deep)) = forks.last_mut() {
                            check(copy)?;
                            copy.workloads.insert(wref(i), c.clone());
                            deep.insert(wref(i), c);
                            check(copy)?;
                        }
                    }
                }
                if ask_each_step {
                    check(&status)?;
                }
            }
            check(&status)?;
            for (copy, deep) in &forks {
                prop_assert_eq!(&copy.workloads, deep);
                check(copy)?;
            }
        }
    }
}
