//! Transfers on arbitrary trees: two transfers whose steps interleave in
//! any order never let a child hold more than its parent carved for it, never
//! show room anywhere it could be taken but where quota arrives, and leave
//! every ledger balanced, each quota changed by exactly what was committed —
//! also when an admin lowers a common ancestor half-way (allowed by §2),
//! so that a transfer is refused after giving and must undo it.

use proptest::prelude::*;
use quota::object::transfers::Decision;
use quota::object::{Quota, QuotaSpec};
use quota::quantity::Quantity;
use quota::resources::{self, ResourceList};
use quota::transfer::{self, Plan, Step};
use quota::tree;
use quota::KeyConfig;
use std::collections::BTreeMap;

const GPU: &str = "requests.nvidia.com/gpu";
const T: &str = "2026-01-01T00:00:00.000Z";

fn gpus(n: i64) -> ResourceList {
    [(GPU.to_string(), Quantity::from_units(n))].into()
}

fn name(i: usize) -> String {
    format!("q{i}")
}

/// A tree of `shape.len() + 1` quotas: quota i+1's parent is
/// `shape[i].0 % (i+1)`, its hard a share (`shape[i].1` in %) of what its
/// parent has left, carved as the service would.
fn build(root: i64, shape: &[(usize, u8)]) -> BTreeMap<String, Quota> {
    let mut t = BTreeMap::new();
    t.insert(name(0), Quota::new(&name(0), spec("", root)));
    for (i, (p, share)) in shape.iter().enumerate() {
        let parent = name(p % (i + 1));
        let pq = &t[&parent];
        let left = (resources::get(&pq.spec.hard, GPU).nanos()
            - resources::get(&pq.status.used, GPU).nanos())
            / 1_000_000_000;
        let hard = (left * i128::from(*share) / 100) as i64;
        let s = spec(&parent, hard);
        tree::carve(t.get_mut(&parent).unwrap(), &name(i + 1), &s.hard, T).unwrap();
        t.insert(name(i + 1), Quota::new(&name(i + 1), s));
    }
    t
}

fn spec(parent: &str, hard: i64) -> QuotaSpec {
    QuotaSpec {
        parent: parent.into(),
        hard: gpus(hard),
        max: Default::default(),
        budgets: Default::default(),
        queueing: Default::default(),
        fair_sharing: Default::default(),
        idle: None,
    }
}

fn left(q: &Quota) -> i128 {
    resources::get(&q.spec.hard, GPU).nanos() - resources::get(&q.status.used, GPU).nanos()
}

/// One transfer's writes, in order: giving, the decision, then receiving or
/// undoing (known only once decided), then letting go.
struct Run {
    id: String,
    plan: Plan,
    giving: Vec<Step>,
    decided: Option<Decision>,
    after: Vec<Step>,
    done: bool,
}

impl Run {
    /// Makes the next write; false when finished.
    fn next(&mut self, t: &mut BTreeMap<String, Quota>) -> bool {
        if self.done {
            return false;
        }
        if !self.giving.is_empty() {
            let s = self.giving.remove(0);
            transfer::apply(t.get_mut(s.quota()).unwrap(), &s, &self.id).unwrap();
        } else if self.decided.is_none() {
            let (_, d) =
                transfer::commit(t.get_mut(&self.plan.lca).unwrap(), &self.id, &self.plan).unwrap();
            self.after = match d {
                Decision::Committed => self.plan.receiving(),
                Decision::Aborted { .. } => self.plan.undo_giving(),
            };
            self.decided = Some(d);
        } else if !self.after.is_empty() {
            let s = self.after.remove(0);
            transfer::apply(t.get_mut(s.quota()).unwrap(), &s, &self.id).unwrap();
        } else {
            for parent in self.plan.holds().keys() {
                transfer::release(t.get_mut(parent).unwrap(), &self.id);
            }
            self.done = true;
        }
        true
    }
}

/// Hold what `plan` changes, or nothing if another transfer holds some.
fn hold_all(t: &mut BTreeMap<String, Quota>, plan: &Plan, id: &str) -> bool {
    let mut taken = Vec::new();
    for (parent, kids) in plan.holds() {
        if transfer::hold(t.get_mut(&parent).unwrap(), id, &kids, 0).is_err() {
            for p in taken {
                transfer::release(t.get_mut(&p).unwrap(), id);
            }
            return false;
        }
        taken.push(parent);
    }
    true
}

type Ask = (Option<usize>, usize, i64);

fn ask() -> impl Strategy<Value = Ask> {
    (proptest::option::of(0usize..8), 0usize..8, 1i64..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn interleaved_transfers_never_promise_capacity_twice(
        root in 20i64..80,
        shape in proptest::collection::vec((0usize..8, 0u8..=100), 1..8),
        asks in (ask(), ask()),
        order in proptest::collection::vec(any::<bool>(), 64),
        squeeze in proptest::option::of(0usize..12),
    ) {
        let mut t = build(root, &shape);
        let n = t.len();
        let start = t.clone();
        let cfg = KeyConfig::default();
        let mut runs = Vec::new();
        for (i, (from, to, amount)) in [asks.0, asks.1].into_iter().enumerate() {
            let from = from.map(|f| name(f % n));
            let Ok(plan) = transfer::plan(&t, from.as_deref(), &name(to % n), &gpus(amount), &cfg) else {
                continue;
            };
            let id = i.to_string();
            if !hold_all(&mut t, &plan, &id) {
                continue;
            }
            // Planned again with the holds in place, as the executor does.
            let plan = transfer::plan(&t, from.as_deref(), &name(to % n), &gpus(amount), &cfg).unwrap();
            runs.push(Run { id, giving: plan.giving(), plan, decided: None, after: vec![], done: false });
        }
        let mut arrives: Vec<String> = runs.iter().flat_map(|r| [r.plan.to.clone(), r.plan.lca.clone()]).collect();
        let mut turn = order.into_iter().cycle();
        let mut squeezed = None;
        for writes in 0.. {
            if squeeze == Some(writes) {
                // The first transfer's LCA is lowered to nothing, unless a
                // transfer changes its hard (the service would refuse then).
                if let Some(lca) = runs.first().map(|r| r.plan.lca.clone()) {
                    let parent = t[&lca].spec.parent.clone();
                    let on_a_path = runs
                        .iter()
                        .any(|r| r.plan.up.iter().chain(&r.plan.down).any(|c| c.quota == lca));
                    if !on_a_path {
                        let q = t.get_mut(&lca).unwrap();
                        q.spec.hard = gpus(0);
                        q.status.refresh(&q.spec.clone());
                        if let Some(p) = t.get_mut(&parent) {
                            // Room the admin gave back, not the transfer.
                            tree::carve(p, &lca, &gpus(0), T).unwrap();
                            arrives.push(parent);
                        }
                        squeezed = Some(lca);
                    }
                }
            }
            let pick = usize::from(turn.next().unwrap()) % runs.len().max(1);
            let moved = runs.get_mut(pick).is_some_and(|r| r.next(&mut t))
                || runs.iter_mut().any(|r| r.next(&mut t));
            if !moved {
                break;
            }
            for c in t.values().filter(|c| !c.spec.parent.is_empty()) {
                let carve = &t[&c.spec.parent].status.children[c.name()].hard;
                prop_assert!(
                    resources::get(carve, GPU) >= resources::get(&c.spec.hard, GPU),
                    "{} holds more than {} carved for it", c.name(), c.spec.parent
                );
            }
            for (name, q) in &t {
                if !arrives.contains(name) {
                    prop_assert!(left(q) <= left(&start[name]), "{name} shows room that is not there");
                }
            }
        }
        // Every ledger balanced, nothing held, each quota changed by exactly
        // what its committed transfers planned.
        let mut expected: BTreeMap<String, i128> = start
            .iter()
            .map(|(n, q)| (n.clone(), resources::get(&q.spec.hard, GPU).nanos()))
            .collect();
        if let Some(lca) = &squeezed {
            expected.insert(lca.clone(), 0);
        }
        for r in runs.iter().filter(|r| r.decided == Some(Decision::Committed)) {
            for c in r.plan.up.iter().chain(&r.plan.down) {
                let d = resources::get(&c.after, GPU).nanos() - resources::get(&c.before, GPU).nanos();
                *expected.get_mut(&c.quota).unwrap() += d;
            }
        }
        for (name, q) in &t {
            prop_assert!(q.status.transfers.is_empty());
            prop_assert_eq!(resources::get(&q.spec.hard, GPU).nanos(), expected[name], "{}", name);
            let mut fresh = q.clone();
            fresh.status.refresh(&q.spec);
            prop_assert_eq!(&fresh.status.used, &q.status.used);
            for (child, carve) in &q.status.children {
                prop_assert_eq!(&carve.hard, &t[child].spec.hard);
            }
        }
    }
}
