//! What a quota's numbers mean to people at every level of the tree.
//!
//! At a parent, `status.used` is mostly what it carved out for its
//! children (§2, docs/semantics.md), not work running: a parent that lent
//! or allocated everything reads "100 %" with nothing running. The rollup
//! splits each key of a quota's hard into what runs in its whole subtree
//! (`in_use`), what is allocated to children but idle, and what is
//! unallocated, with what it lent and borrowed beside them. Pure: the
//! quotas come in, the numbers come out.
//!
//! Cash keys (budgets) are spent, not allocated: they are left out here.

use crate::keys::cash_target;
use crate::quantity::Quantity;
use crate::resources::{add_into, get, ResourceList};
use crate::Quota;
use std::collections::{BTreeMap, BTreeSet};

/// One key of one quota, as people read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRollup {
    pub key: String,
    /// What the quota may hold (`status.hard`).
    pub hard: Quantity,
    /// What runs in the quota's whole subtree: its own workloads and all
    /// its descendants' (their `selfUsed`).
    pub in_use: Quantity,
    /// What its own workloads hold.
    pub self_used: Quantity,
    /// What its children's carve-outs hold (running or not).
    pub allocated: Quantity,
    /// Allocated to children but not running there (never negative: a
    /// child that borrows runs more than it was given).
    pub allocated_idle: Quantity,
    /// Neither used here nor allocated: `hard − selfUsed − allocated`,
    /// never negative.
    pub unallocated: Quantity,
    /// Lent to children beyond their hard.
    pub lent: Quantity,
    /// Used beyond its own hard, on loan from its parent.
    pub borrowed: Quantity,
    /// What admission can still give here within its own hard: hard −
    /// (its own use + what its children's carve-outs hold), never negative
    /// (equal to `unallocated`; named for what a person asks of it).
    pub free_now: Quantity,
    /// What it could borrow beyond that now, up to its `max`, out of what
    /// its parent can lend (`queue::room::borrow_limits`, the ceiling its
    /// queue plans against): a queue's "N free" is `free_now +
    /// borrowable_now`. Zero without a max, or from [`rollup`] alone
    /// ([`with_borrowing`] fills it).
    pub borrowable_now: Quantity,
}

impl KeyRollup {
    /// Whole percent of hard, for a bar: (in use, allocated idle). Each is
    /// capped so that together they never pass 100.
    pub fn bar_percents(&self) -> (u32, u32) {
        let hard = self.hard.nanos();
        if hard <= 0 {
            return (if self.in_use.nanos() > 0 { 100 } else { 0 }, 0);
        }
        let pct = |n: i128| (n.max(0).saturating_mul(100) / hard).min(100) as u32;
        let used = pct(self.in_use.nanos());
        let idle = pct(self.allocated_idle.nanos()).min(100 - used);
        (used, idle)
    }

    /// Whole percent of hard in use in the subtree (over 100 when it
    /// borrows beyond its hard).
    pub fn in_use_percent(&self) -> u32 {
        percent(self.in_use, self.hard)
    }

    /// Whole percent of hard allocated to children or used here.
    pub fn allocated_percent(&self) -> u32 {
        percent(self.allocated.saturating_add(self.self_used), self.hard)
    }
}

fn percent(part: Quantity, whole: Quantity) -> u32 {
    if whole.nanos() > 0 {
        (part.nanos().max(0).saturating_mul(100) / whole.nanos()).min(u32::MAX as i128) as u32
    } else if part.nanos() > 0 {
        100
    } else {
        0
    }
}

/// What a usage sample records as a quota's `used`: for every resource key
/// what runs in its whole subtree (`in_use`, from [`subtree_in_use`]) —
/// the keys table's "in use", at a parent never what it carved out for
/// its children — and for every cash key what `status.used` spent.
pub fn sampled_used(status: &crate::QuotaStatus, in_use: Option<&ResourceList>) -> ResourceList {
    let mut out: ResourceList = status
        .used
        .iter()
        .filter(|(k, _)| cash_target(k).is_some())
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    for (k, v) in in_use.into_iter().flatten() {
        if cash_target(k).is_none() && !v.is_zero() {
            out.insert(k.clone(), *v);
        }
    }
    out
}

/// Every quota's subtree usage (Σ `selfUsed` of it and its descendants),
/// by name. Bounded on bad data: on a parent cycle the walk stops where the
/// cycle closes, so it ends and nothing is counted twice.
pub fn subtree_in_use<Q: std::borrow::Borrow<Quota>>(
    quotas: &[Q],
) -> BTreeMap<String, ResourceList> {
    let mut children: BTreeMap<&str, Vec<&Quota>> = BTreeMap::new();
    let mut by_name: BTreeMap<&str, &Quota> = BTreeMap::new();
    for q in quotas {
        let q = q.borrow();
        by_name.insert(q.name(), q);
        if !q.spec.parent.is_empty() {
            children.entry(q.spec.parent.as_str()).or_default().push(q);
        }
    }
    let mut out: BTreeMap<String, ResourceList> = BTreeMap::new();
    for name in by_name.keys() {
        fill(name, &by_name, &children, &mut out, &mut BTreeSet::new());
    }
    out
}

/// What runs in each quota's subtree, by name: `subtree_in_use`'s map, or
/// a view that moves some of it (the server's working copies).
pub trait SubtreeUse {
    fn of(&self, name: &str) -> Option<&ResourceList>;
}

impl SubtreeUse for BTreeMap<String, ResourceList> {
    fn of(&self, name: &str) -> Option<&ResourceList> {
        self.get(name)
    }
}

/// Subtree usage (`subtree_in_use`) kept current between whole builds:
/// built once from every known quota, then moved by each written quota's
/// change of `selfUsed` — the difference added to it and to each quota
/// above it — so what one write changes costs its depth, not the tree's
/// size. A write it cannot place (a quota it does not know, or one whose
/// parent changed) is refused, and the caller builds it whole again.
/// Property test (`tests/all/properties.rs`): after any sequence of usage
/// changes it reads, key by key, what `subtree_in_use` of the same quotas
/// reads.
#[derive(Clone, Debug, Default)]
pub struct SubtreeUsage {
    parent: std::collections::HashMap<String, String>,
    self_used: std::collections::HashMap<String, ResourceList>,
    in_use: BTreeMap<String, ResourceList>,
}

impl SubtreeUsage {
    pub fn build<Q: std::borrow::Borrow<Quota>>(quotas: &[Q]) -> SubtreeUsage {
        let mut out = SubtreeUsage {
            in_use: subtree_in_use(quotas),
            ..SubtreeUsage::default()
        };
        for q in quotas {
            let q = q.borrow();
            out.parent
                .insert(q.name().to_string(), q.spec.parent.clone());
            out.self_used
                .insert(q.name().to_string(), q.status.self_used.clone());
        }
        out
    }

    /// Each known quota's subtree usage (read keys with `resources::get`:
    /// a key may be held at zero where a whole build leaves it out).
    pub fn in_use(&self) -> &BTreeMap<String, ResourceList> {
        &self.in_use
    }

    pub fn len(&self) -> usize {
        self.parent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The `selfUsed` of `name` that the sums hold.
    pub fn self_used_of(&self, name: &str) -> Option<&ResourceList> {
        self.self_used.get(name)
    }

    /// The known quotas below any of `names` (their descendants, none of
    /// `names` among them), each once. One pass over the known quotas
    /// when there are none; a cycle ends a walk.
    pub fn below(&self, names: &BTreeSet<&str>) -> Vec<String> {
        if !self.parent.values().any(|p| names.contains(p.as_str())) {
            return Vec::new();
        }
        let mut children: std::collections::HashMap<&str, Vec<&str>> =
            std::collections::HashMap::new();
        for (c, p) in &self.parent {
            children.entry(p.as_str()).or_default().push(c.as_str());
        }
        let mut out = Vec::new();
        let mut seen: BTreeSet<&str> = names.clone();
        let mut next: Vec<&str> = names.iter().copied().collect();
        while let Some(at) = next.pop() {
            for c in children.get(at).into_iter().flatten() {
                if seen.insert(c) {
                    out.push(c.to_string());
                    next.push(c);
                }
            }
        }
        out
    }

    /// The known quotas above `name` whose subtree usage counts it,
    /// nearest first ([`line_above`]: a cycle is broken where
    /// [`subtree_in_use`] breaks it).
    pub fn ancestors(&self, name: &str) -> Vec<String> {
        line_above(name, |n| {
            self.parent
                .get(n)
                .filter(|p| self.parent.contains_key(p.as_str()))
                .map(String::as_str)
        })
    }

    /// `q` as just written. False, and nothing changed: `q` is not known,
    /// its parent is not the one known, or its line above closes a cycle
    /// (build again).
    pub fn apply(&mut self, q: &Quota) -> bool {
        let name = q.name();
        if self.parent.get(name) != Some(&q.spec.parent) {
            return false;
        }
        let old = self.self_used.get(name).cloned().unwrap_or_default();
        if old == q.status.self_used {
            return true;
        }
        let above = self.ancestors(name);
        let closes_cycle = self
            .parent
            .get(above.last().map(String::as_str).unwrap_or(name))
            .is_some_and(|p| p == name || above.contains(p));
        if closes_cycle {
            return false;
        }
        let keys: BTreeSet<&String> = old.keys().chain(q.status.self_used.keys()).collect();
        let delta: Vec<(&String, Quantity)> = keys
            .into_iter()
            .map(|k| (k, get(&q.status.self_used, k).saturating_sub(get(&old, k))))
            .filter(|(_, d)| !d.is_zero())
            .collect();
        for at in std::iter::once(name).chain(above.iter().map(String::as_str)) {
            let list = self.in_use.entry(at.to_string()).or_default();
            for (k, d) in &delta {
                let v = get(list, k).saturating_add(*d);
                list.insert((*k).clone(), v);
            }
        }
        self.self_used
            .insert(name.to_string(), q.status.self_used.clone());
        true
    }
}

/// The quotas whose subtree usage ([`subtree_in_use`]) counts `name`'s
/// `selfUsed`, nearest first: its ancestors up to its root, or up to
/// where the sum breaks a parent cycle. A cycle (the API refuses one;
/// only a store edited by hand holds one) has no quota above it, so the
/// sum reaches it first from its first member by name, and follows every
/// link of it but that member's own to its parent: the line of a quota
/// in or below the cycle ends at that member. Every reader that moves
/// use or spending along lines (`/tree`, a quota's page, the alerts)
/// walks this line, so each says what summing again would say. Cost: the
/// line's length (at most 16 levels in a valid tree) plus the cycle's.
/// `parent_of` gives a known quota's parent (None at a root, or where the
/// parent is not known).
pub fn line_above<'a>(name: &'a str, parent_of: impl Fn(&str) -> Option<&'a str>) -> Vec<String> {
    let mut path: Vec<&'a str> = vec![name];
    let mut at_index: std::collections::HashMap<&'a str, usize> =
        std::collections::HashMap::from([(name, 0)]);
    let mut at = name;
    while let Some(p) = parent_of(at).filter(|p| !p.is_empty()) {
        if let Some(&j) = at_index.get(p) {
            // path[j..] is the cycle: the line ends at its first member.
            let first = (j..path.len()).min_by_key(|&i| path[i]).unwrap_or(j);
            path.truncate(first + 1);
            break;
        }
        at_index.insert(p, path.len());
        path.push(p);
        at = p;
    }
    path[1..].iter().map(|s| s.to_string()).collect()
}

/// Post-order fill of `out[name]`; `on_path` stops a cycle.
fn fill<'a>(
    name: &'a str,
    by_name: &BTreeMap<&'a str, &'a Quota>,
    children: &BTreeMap<&'a str, Vec<&'a Quota>>,
    out: &mut BTreeMap<String, ResourceList>,
    on_path: &mut BTreeSet<&'a str>,
) {
    if out.contains_key(name) || !on_path.insert(name) {
        return;
    }
    let mut total = by_name
        .get(name)
        .map(|q| q.status.self_used.clone())
        .unwrap_or_default();
    for c in children.get(name).map(Vec::as_slice).unwrap_or_default() {
        fill(c.name(), by_name, children, out, on_path);
        if let Some(sub) = out.get(c.name()) {
            add_into(&mut total, sub);
        }
    }
    on_path.remove(name);
    out.insert(name.to_string(), total);
}

/// The keys of `q`'s hard, rolled up; `in_use` is `q`'s subtree usage (from
/// [`subtree_in_use`]). Keys whose hard is zero and that nothing uses are
/// left out, as are cash keys.
pub fn rollup(q: &Quota, in_use: &ResourceList) -> Vec<KeyRollup> {
    let st = &q.status;
    let hard_of = if st.hard.is_empty() {
        &q.spec.hard
    } else {
        &st.hard
    };
    let allocated = st.allocated();
    hard_of
        .iter()
        .filter(|(k, _)| cash_target(k).is_none())
        .filter_map(|(k, hard)| {
            let in_use = get(in_use, k);
            if hard.is_zero() && in_use.is_zero() {
                return None;
            }
            let self_used = get(&st.self_used, k);
            let allocated = get(&allocated, k);
            let children_in_use = in_use.saturating_sub(self_used);
            let zero_floor = |q: Quantity| if q.is_negative() { Quantity::ZERO } else { q };
            Some(KeyRollup {
                key: k.clone(),
                hard: *hard,
                in_use,
                self_used,
                allocated,
                allocated_idle: zero_floor(allocated.saturating_sub(children_in_use)),
                unallocated: zero_floor(hard.saturating_sub(self_used).saturating_sub(allocated)),
                lent: get(&st.lent, k),
                borrowed: get(&st.borrowed, k),
                // hard − used, as admission reads it (used = selfUsed +
                // allocated): the same amount as unallocated, named for
                // what a person asks of it.
                free_now: zero_floor(hard.saturating_sub(self_used).saturating_sub(allocated)),
                borrowable_now: Quantity::ZERO,
            })
        })
        .collect()
}

/// `rows` (`rollup(q, _)`) with what `q` could borrow now filled in:
/// `parent` is `q`'s parent and `siblings` its parent's children as
/// stored (`q` among them or not), as `borrow::lend` reads them.
pub fn with_borrowing(
    q: &Quota,
    mut rows: Vec<KeyRollup>,
    parent: Option<&Quota>,
    siblings: &[&Quota],
    now_ms: i64,
) -> Vec<KeyRollup> {
    if q.spec.max.is_empty() {
        return rows;
    }
    let standings = crate::borrow::Standing::of_all(siblings.iter().copied());
    let ceiling = crate::queue::room::borrow_limits(q, parent, &standings, now_ms);
    for r in &mut rows {
        let Some(limit) = ceiling.get(&r.key) else {
            continue;
        };
        let base = get(&q.status.used, &r.key).max(r.hard);
        let more = limit.saturating_sub(base);
        r.borrowable_now = if more.is_negative() {
            Quantity::ZERO
        } else {
            more
        };
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Carve, QuotaSpec};
    use proptest::prelude::*;

    const GPU: &str = "requests.nvidia.com/gpu";

    fn q(name: &str, parent: &str, hard: i64, self_used: i64, carves: &[(&str, i64)]) -> Quota {
        let spec = QuotaSpec {
            parent: parent.into(),
            hard: [(GPU.to_string(), Quantity::from_units(hard))].into(),
            ..QuotaSpec::default()
        };
        let mut q = Quota::new(name, spec);
        q.status.hard = q.spec.hard.clone();
        q.status
            .self_used
            .insert(GPU.into(), Quantity::from_units(self_used));
        for (c, n) in carves {
            q.status.children.insert(
                c.to_string(),
                Carve {
                    hard: [(GPU.to_string(), Quantity::from_units(*n))].into(),
                    since: String::new(),
                    uid: String::new(),
                },
            );
        }
        q
    }

    fn units(x: Quantity) -> i64 {
        (x.nanos() / 1_000_000_000) as i64
    }

    /// research lent 18 A100s to idle children: nothing runs, and the
    /// rollup says so instead of "full".
    #[test]
    fn an_idle_parent_that_allocated_everything_is_idle_not_full() {
        let all = [
            q("research", "", 24, 0, &[("nlp", 12), ("cv", 12)]),
            q("nlp", "research", 12, 0, &[]),
            q("cv", "research", 12, 3, &[]),
        ];
        let sub = subtree_in_use(&all);
        let r = &rollup(&all[0], &sub["research"])[0];
        assert_eq!(units(r.in_use), 3);
        assert_eq!(units(r.allocated), 24);
        assert_eq!(units(r.allocated_idle), 21);
        assert_eq!(units(r.unallocated), 0);
        assert_eq!(r.bar_percents(), (12, 87));
        assert_eq!(r.in_use_percent(), 12);
        assert_eq!(r.allocated_percent(), 100);
        // Everything is carved out: nothing is free for its own work.
        assert_eq!(units(r.free_now), 0);
        assert_eq!(units(r.borrowable_now), 0);
    }

    /// A parent's sample records what runs below it, not its carve-outs:
    /// research carved 24 out and its children run 3, so its chart reads
    /// 3 (then 10 when nlp starts 7); its budget's spending stays as spent.
    #[test]
    fn a_parents_sample_is_its_subtrees_running_use_not_its_carve_outs() {
        const CASH: &str = "cash/requests.nvidia.com/gpu";
        let mut research = q("research", "", 24, 0, &[("nlp", 12), ("cv", 12)]);
        research.status.used = [
            (GPU.to_string(), Quantity::from_units(24)),
            (CASH.to_string(), Quantity::from_units(500)),
        ]
        .into();
        let mut all = vec![
            research,
            q("nlp", "research", 12, 0, &[]),
            q("cv", "research", 12, 3, &[]),
        ];
        let sampled = |all: &[Quota]| {
            let sub = subtree_in_use(all);
            sampled_used(&all[0].status, sub.get("research"))
        };
        let got = sampled(&all);
        assert_eq!(units(get(&got, GPU)), 3, "what runs, not the 24 carved out");
        assert_eq!(units(get(&got, CASH)), 500, "a budget's spending as spent");
        all[1]
            .status
            .self_used
            .insert(GPU.into(), Quantity::from_units(7));
        assert_eq!(
            units(get(&sampled(&all), GPU)),
            10,
            "it moves with the children"
        );
        // A leaf's sample is its own use.
        let sub = subtree_in_use(&all);
        assert_eq!(
            units(get(&sampled_used(&all[2].status, sub.get("cv")), GPU)),
            3
        );
        // Nothing running anywhere: no resource key at all (reads as 0).
        all[1].status.self_used.clear();
        all[2].status.self_used.clear();
        assert!(!sampled(&all).contains_key(GPU));
    }

    /// A child with a max may borrow its siblings' idle guarantee: free
    /// now is within its hard, borrowable now is what the parent could
    /// lend it now, and together they are the ceiling its queue reads.
    #[test]
    fn free_and_borrowable_now_add_up_to_what_a_queue_may_plan_on() {
        let mut parent = q("research", "", 24, 0, &[("nlp", 12), ("cv", 12)]);
        parent.status.used = [(GPU.to_string(), Quantity::from_units(24))].into();
        let mut nlp = q("nlp", "research", 12, 9, &[]);
        nlp.status.used = nlp.status.self_used.clone();
        nlp.spec.max = [(GPU.to_string(), Quantity::from_units(20))].into();
        let mut cv = q("cv", "research", 12, 3, &[]);
        cv.status.used = cv.status.self_used.clone();
        let sub = subtree_in_use(&[parent.clone(), nlp.clone(), cv.clone()]);
        let rows = with_borrowing(
            &nlp,
            rollup(&nlp, &sub["nlp"]),
            Some(&parent),
            &[&nlp, &cv],
            0,
        );
        // 12 − 9 = 3 free; cv idles 9, but max caps the loan at 8.
        assert_eq!(
            (units(rows[0].free_now), units(rows[0].borrowable_now)),
            (3, 8)
        );
        // Without a parent to ask, nothing is borrowable.
        let alone = with_borrowing(&nlp, rollup(&nlp, &sub["nlp"]), None, &[], 0);
        assert_eq!(units(alone[0].borrowable_now), 0);
    }

    /// A line on a cycle ends at its first member by name; a quota
    /// below the cycle climbs into it and ends there too.
    #[test]
    fn a_cycles_line_ends_at_its_first_member() {
        // a → b → c → a, x below b, y above nothing (a root).
        let parents: BTreeMap<&str, &str> =
            [("a", "b"), ("b", "c"), ("c", "a"), ("x", "b"), ("y", "")].into();
        let line = |n: &'static str| line_above(n, |at| parents.get(at).copied());
        assert_eq!(line("a"), Vec::<String>::new());
        assert_eq!(line("c"), ["a"]);
        assert_eq!(line("b"), ["c", "a"]);
        assert_eq!(line("x"), ["b", "c", "a"]);
        assert_eq!(line("y"), Vec::<String>::new());
        let me: BTreeMap<&str, &str> = [("m", "m")].into();
        assert_eq!(
            line_above("m", |at| me.get(at).copied()),
            Vec::<String>::new()
        );
    }

    proptest! {
        /// On any parents (cycles, self-parents and unknown parents
        /// included), a quota's subtree usage is the `selfUsed` of every
        /// quota whose line holds it, and of itself: what moving a change
        /// along `line_above` adds is what summing again adds.
        #[test]
        fn subtree_usage_is_the_sum_along_lines(
            parents in proptest::collection::vec(0usize..10, 1..9),
            used in proptest::collection::vec(0i64..100, 9),
        ) {
            let name = |i: usize| format!("q{i}");
            let quotas: Vec<Quota> = parents
                .iter()
                .enumerate()
                .map(|(i, &p)| {
                    // 9: a root; beyond the list: an unknown parent.
                    let parent = if p == 9 { String::new() } else { name(p) };
                    q(&name(i), &parent, 10, used[i], &[])
                })
                .collect();
            let whole = subtree_in_use(&quotas);
            let known: BTreeMap<String, String> = quotas
                .iter()
                .map(|q| (q.name().to_string(), q.spec.parent.clone()))
                .collect();
            let mut summed: BTreeMap<String, i64> = BTreeMap::new();
            for q in &quotas {
                let line = line_above(q.name(), |at| {
                    known.get(at).filter(|p| known.contains_key(p.as_str())).map(String::as_str)
                });
                for at in std::iter::once(q.name().to_string()).chain(line) {
                    *summed.entry(at).or_default() += units(get(&q.status.self_used, GPU));
                }
            }
            for q in &quotas {
                prop_assert_eq!(
                    units(get(&whole[q.name()], GPU)),
                    summed[q.name()],
                    "{} in {:?}", q.name(), known
                );
            }
        }
    }

    #[test]
    fn a_cycle_in_bad_data_ends_and_counts_each_quota_once() {
        let all = [q("a", "b", 4, 1, &[]), q("b", "a", 4, 2, &[])];
        let sub = subtree_in_use(&all);
        for (name, own) in [("a", 1), ("b", 2)] {
            let n = units(get(&sub[name], GPU));
            assert!((own..=3).contains(&n), "{name}: {n}");
        }
    }

    #[test]
    fn keys_with_no_hard_and_no_use_are_left_out() {
        let mut a = q("a", "", 0, 0, &[]);
        a.status
            .hard
            .insert("requests.cpu".into(), Quantity::from_units(8));
        let r = rollup(&a, &ResourceList::new());
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].key, "requests.cpu");
    }

    proptest! {
        /// On any tree, a quota's subtree usage is its own plus its
        /// children's subtree usage, and the parts of the bar never pass
        /// 100 %.
        #[test]
        fn subtree_usage_adds_up(
            parents in proptest::collection::vec(0usize..8, 1..12),
            used in proptest::collection::vec(0i64..50, 12),
        ) {
            // Quota i's parent is a quota of a lower index (or a root): a tree.
            let all: Vec<Quota> = parents.iter().enumerate().map(|(i, p)| {
                let parent = if i == 0 || *p >= i { String::new() } else { format!("q{p}") };
                q(&format!("q{i}"), &parent, 40, used[i], &[])
            }).collect();
            let sub = subtree_in_use(&all);
            let total: i64 = all.iter().filter(|x| x.spec.parent.is_empty())
                .map(|x| units(get(&sub[x.name()], GPU))).sum();
            prop_assert_eq!(total, used[..all.len()].iter().sum::<i64>());
            for x in &all {
                let kids: i64 = all.iter().filter(|c| c.spec.parent == x.name())
                    .map(|c| units(get(&sub[c.name()], GPU))).sum();
                prop_assert_eq!(units(get(&sub[x.name()], GPU)), units(get(&x.status.self_used, GPU)) + kids);
                for r in rollup(x, &sub[x.name()]) {
                    let (a, b) = r.bar_percents();
                    prop_assert!(a + b <= 100);
                }
            }
        }
    }
}
