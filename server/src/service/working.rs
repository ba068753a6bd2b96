//! One request's figures from one copy of its quotas, taken once at one
//! `now`.
//!
//! In standalone mode the service accrues a budget's spending from its
//! own ledger whenever it decides (`working_copy`): between two writes the
//! stored status lags behind what the next admission would see, and a
//! budget period that ended is still open in it. A page that read one
//! figure from the stored version and another from a copy accrued "now"
//! showed two "left" for one budget (and the old period beside the new
//! one). So every reader of a request — the quota page and its charts
//! page, `/tree` and its rows, the overview, `/tree.csv`, the API's
//! quota, usage, budgets, queue and samples — takes one [`Working`] with
//! one `now` and asks it for every quota it shows: each is accrued and its
//! ended periods closed up to that `now`, as the next decision would see
//! it, and the subtree figures are summed from those copies. In cluster
//! mode the controller accrues from pods, and the stored version is the
//! working copy.

use super::forest::Forest;
use super::Service;
use quota::budget::PriceList;
use quota::cash::QosMultipliers;
use quota::keys::cash_target;
use quota::{Quota, ResourceList};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// How a request's quotas are copied: the service's accrual rule, prices
/// and one `now`.
#[derive(Clone)]
pub struct Working {
    accrue: bool,
    now: i64,
    prices: QosMultipliers,
    list: Arc<PriceList>,
}

impl Service {
    /// The working copies of one request, all at `now`.
    pub fn working(&self, now: i64) -> Working {
        Working {
            accrue: self.accrue_from_ledger,
            now,
            prices: self.prices,
            list: self.price_list(),
        }
    }
}

impl Working {
    /// Copies at `now`, accrued or not, at face price.
    #[cfg(test)]
    pub(crate) fn for_tests(accrue: bool, now: i64) -> Working {
        Working {
            accrue,
            now,
            prices: QosMultipliers::default(),
            list: Arc::new(PriceList::default()),
        }
    }

    /// The request's one `now`.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// What budgets are priced and forecast at, at the request's `now`.
    pub fn pricing(&self) -> quota::forecast::Pricing {
        quota::forecast::Pricing {
            qos: self.prices,
            list: self.list.clone(),
            now_ms: self.now,
        }
    }

    /// Whether copies differ from what is stored: only where the service
    /// accrues from its own ledger.
    pub fn accrues(&self) -> bool {
        self.accrue
    }

    /// `q` accrued in place up to `now` (nothing changes in cluster mode,
    /// nor for a quota without a budget).
    pub fn accrue(&self, q: &mut Quota) {
        if !self.accrue || !has_budget(q) {
            return;
        }
        let Quota { spec, status, .. } = q;
        status.accrue_ledger_priced(spec, self.now, &self.prices, &self.list);
        // Nothing here is written: the entries of this copy go nowhere.
        status.ledger = Default::default();
    }

    /// The ledger entries `q` accrues from its last write up to `now`:
    /// what its next write will record, which the working copy counts
    /// already (none in cluster mode, where the controller accrues, nor
    /// for a quota without a budget). A report adds them to the ledger's
    /// rows, so its total is the budgets' spending.
    pub fn unwritten(&self, q: &Quota) -> Vec<quota::object::budgets::Entry> {
        if !self.accrue || !has_budget(q) {
            return Vec::new();
        }
        let name = q.name();
        let from = q
            .status
            .last_reconcile_time
            .as_deref()
            .and_then(quota::time::parse_rfc3339);
        let mut copy = q.clone();
        copy.status.ledger = Default::default();
        let Quota { spec, status, .. } = &mut copy;
        status.accrue_ledger_priced(spec, self.now, &self.prices, &self.list);
        // As the SQL store's write adds them (`ledger_entries_of`): the
        // windows accrued, named; the carry of the periods closed; the
        // scheduled top-ups granted.
        let mut entries = status.ledger.since(from);
        for e in &mut entries {
            e.quota = name.to_string();
        }
        let closed = quota::budget::periods::new_records(&q.status, status);
        entries.extend(quota::budget::ledger::carry_entries(name, &closed));
        entries.extend(quota::budget::ledger::scheduled_entries(
            name, &q.status, status,
        ));
        entries
    }

    /// A working copy of `q`.
    pub fn copy(&self, q: &Quota) -> Quota {
        let mut q = q.clone();
        self.accrue(&mut q);
        q
    }

    /// `quotas` as of `now`, in place.
    pub fn quotas(&self, mut quotas: Vec<Quota>) -> Vec<Quota> {
        for q in &mut quotas {
            self.accrue(q);
        }
        quotas
    }

    /// `name` as of `now` and what its whole subtree uses (Σ `selfUsed` of
    /// the working copies of it and its descendants, spending included),
    /// from the kept forest: only the subtree's budgets are copied, and
    /// their change of `selfUsed` moved along their lines onto the kept
    /// forest's subtree usage (`moved`, `rollup::line_above`: as `/tree`
    /// moves it, so a cycle in a hand-edited store gives one figure on
    /// both). None when `name` is not in it.
    pub fn subtree_of(&self, f: &Forest, name: &str) -> Option<(Quota, ResourceList)> {
        let at = f.quotas.iter().position(|q| q.name() == name)?;
        if !self.accrue {
            return Some((f.quotas[at].clone(), f.in_use_of(name).clone()));
        }
        let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, c) in f.quotas.iter().enumerate() {
            children.entry(c.spec.parent.as_str()).or_default().push(i);
        }
        let mut places = Vec::new();
        let mut next = vec![at];
        let mut seen: HashSet<usize> = HashSet::new();
        while let Some(i) = next.pop() {
            if !seen.insert(i) {
                continue;
            }
            if has_budget(&f.quotas[i]) {
                places.push(i);
            }
            let below = children.get(f.quotas[i].name());
            next.extend(below.into_iter().flatten().copied());
        }
        let parents: HashMap<&str, &str> = f
            .quotas
            .iter()
            .map(|q| (q.name(), q.spec.parent.as_str()))
            .collect();
        let copies = self.copies_at(f, &places);
        let mut moved = moved(
            copies.iter().map(|(i, c)| {
                let line = quota::rollup::line_above(c.name(), |at| {
                    parents.get(at).copied().filter(|p| parents.contains_key(p))
                });
                (&f.quotas[*i].status.self_used, c, line)
            }),
            |n| f.in_use.get(n),
        );
        let in_use = moved
            .remove(name)
            .unwrap_or_else(|| f.in_use_of(name).clone());
        let q = match copies.into_iter().find(|(i, _)| *i == at) {
            Some((_, q)) => q,
            None => f.quotas[at].clone(),
        };
        Some((q, in_use))
    }

    /// `q`'s queue as of `now`: what a round on this copy says of each
    /// entry that waits for a budget, or that the round finds waiting for
    /// one (`quota::queue::next_admissions` against the copy's pool and
    /// budgets). A stored reason was worded at its round, on the copy of
    /// then ("needs 24, 5,239.79 left"); the page around it shows what is
    /// left now. Only budget reasons change between a stored quota and its
    /// working copy, so the others stay as their round stated them (fair
    /// turns included); entries the round would admit keep theirs until
    /// the next round admits them. `parent` and `siblings` give a borrower
    /// its ceiling; a borrower without its parent keeps its reasons.
    pub fn restate_budget_reasons(
        &self,
        q: &mut Quota,
        parent: Option<&Quota>,
        siblings: &[&Quota],
    ) {
        use quota::object::queue::Waiting;
        use quota::queue::{self, Decision, Pool};
        if q.status.queue.is_empty() || (!q.spec.max.is_empty() && parent.is_none()) {
            return;
        }
        let standings = quota::borrow::Standing::of_all(siblings.iter().copied());
        let limits = queue::borrow_limits(q, parent, &standings, self.now);
        let budgets = queue::budgets::of(q);
        let views: Vec<_> = budgets
            .iter()
            .map(|b| b.view(&self.prices, &self.list))
            .collect();
        let decisions = queue::next_admissions(
            &queue::entries::entries(q),
            &Pool::new(q, &limits),
            &views,
            &q.spec.queueing,
            self.now,
        );
        let waits: HashMap<&str, &queue::Reason> = decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Wait(w) => Some((w.workload_ref.as_str(), &w.reason)),
                Decision::Admit(_) => None,
            })
            .collect();
        let mut restated = Vec::new();
        for (i, e) in q.status.queue.iter().enumerate() {
            if let Some(r) = waits.get(e.work.workload_ref.as_str()) {
                if e.waiting == Waiting::Budget || r.waiting() == Waiting::Budget {
                    restated.push((i, r.waiting(), r.to_string()));
                }
            }
        }
        for (i, waiting, reason) in restated {
            let e = &mut q.status.queue[i];
            e.waiting = waiting;
            e.reason = reason;
        }
    }
}

/// A forest as of `now` for a reader of every quota that changes none
/// (the alert sweep): only the quotas with a budget are copied and
/// accrued, the others are the kept forest's, shared; a quota's subtree
/// usage is the kept forest's moved by its copies' change of `selfUsed`
/// along their lines — what `subtree_in_use` of all the copies sums,
/// without copying nor summing the forest again.
pub struct Accrued {
    forest: Arc<Forest>,
    /// By their place in `forest.quotas`.
    copies: HashMap<usize, Quota>,
    /// The subtree usage of the quotas on a copy's line, moved.
    moved: HashMap<String, ResourceList>,
}

impl Working {
    /// The places in `f.quotas` of the quotas whose copy may differ from
    /// the stored one: those with a budget, none in cluster mode.
    pub fn to_accrue(&self, f: &Forest) -> Vec<usize> {
        if !self.accrue {
            return Vec::new();
        }
        (0..f.quotas.len())
            .filter(|&i| has_budget(&f.quotas[i]))
            .collect()
    }

    /// The copies of the quotas at `places` in `f.quotas`: CPU, for a
    /// chunk at a time.
    pub fn copies_at(&self, f: &Forest, places: &[usize]) -> Vec<(usize, Quota)> {
        places
            .iter()
            .map(|&i| (i, self.copy(&f.quotas[i])))
            .collect()
    }

    /// `f` as of `now`, at once (`to_accrue`, `copies_at` and
    /// `Accrued::of` in one).
    pub fn accrued(&self, f: Arc<Forest>) -> Accrued {
        let copies = self.copies_at(&f, &self.to_accrue(&f));
        Accrued::of(f, copies)
    }
}

impl Accrued {
    /// `forest` with `copies` (by place) in place of its quotas.
    pub fn of(forest: Arc<Forest>, copies: Vec<(usize, Quota)>) -> Accrued {
        let parents: HashMap<&str, &str> = forest
            .quotas
            .iter()
            .map(|q| (q.name(), q.spec.parent.as_str()))
            .collect();
        // The line a page's sum and the alerts' walk too: a cycle broken
        // where `subtree_in_use` breaks it.
        let line = |name: &str| -> Vec<String> {
            quota::rollup::line_above(name, |at| {
                parents.get(at).copied().filter(|p| parents.contains_key(p))
            })
        };
        let moved = moved(
            copies
                .iter()
                .map(|(i, c)| (&forest.quotas[*i].status.self_used, c, line(c.name()))),
            |name| forest.in_use.get(name),
        );
        let copies = copies.into_iter().collect();
        Accrued {
            forest,
            copies,
            moved,
        }
    }

    /// Every quota as of `now`, in the kept forest's order.
    pub fn quotas(&self) -> Vec<&Quota> {
        (0..self.forest.quotas.len())
            .map(|i| self.copies.get(&i).unwrap_or(&self.forest.quotas[i]))
            .collect()
    }

    /// What `name`'s whole subtree uses as of `now` (empty for a quota
    /// the forest does not hold).
    pub fn in_use_of(&self, name: &str) -> &ResourceList {
        self.moved
            .get(name)
            .unwrap_or_else(|| self.forest.in_use_of(name))
    }

    /// How many quotas were copied.
    pub fn copied(&self) -> usize {
        self.copies.len()
    }

    /// How many quotas the forest holds.
    pub fn len(&self) -> usize {
        self.forest.quotas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.forest.quotas.is_empty()
    }
}

impl quota::rollup::SubtreeUse for Accrued {
    fn of(&self, name: &str) -> Option<&ResourceList> {
        self.moved
            .get(name)
            .or_else(|| self.forest.in_use.get(name))
    }
}

/// Subtree usage moved by working copies: each `(self_used, copy, line)` —
/// what a quota's `selfUsed` was where `base` summed it, its copy, and the
/// quotas above it nearest first — adds the copy's change of `selfUsed`
/// (a budget's accrual, or a period's close taking it back) to the usage
/// of the quota and of each quota on its line, starting from `base`'s.
/// Only the quotas on a changed line are in the result.
pub fn moved<'a>(
    changes: impl IntoIterator<Item = (&'a ResourceList, &'a Quota, Vec<String>)>,
    base: impl Fn(&str) -> Option<&'a ResourceList>,
) -> HashMap<String, ResourceList> {
    use quota::resources::get;
    let mut out: HashMap<String, ResourceList> = HashMap::new();
    for (was, copy, line) in changes {
        let now = &copy.status.self_used;
        if was == now {
            continue;
        }
        let keys: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
        let delta: Vec<(&String, quota::Quantity)> = keys
            .into_iter()
            .map(|k| (k, get(now, k).saturating_sub(get(was, k))))
            .filter(|(_, d)| !d.is_zero())
            .collect();
        for at in std::iter::once(copy.name().to_string()).chain(line) {
            let list = out
                .entry(at)
                .or_insert_with_key(|at| base(at).cloned().unwrap_or_default());
            for (k, d) in &delta {
                let v = get(list, k).saturating_add(*d);
                list.insert((*k).clone(), v);
            }
        }
    }
    out
}

/// A quota whose copy can differ from its stored version: one with a
/// budget (a cash key of hard) or a budget status left from one.
pub fn has_budget(q: &Quota) -> bool {
    q.spec.hard.keys().any(|k| cash_target(k).is_some()) || !q.status.budgets.is_empty()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use quota::rollup::subtree_in_use;
    use quota::QuotaSpec;

    fn quota(name: &str, parent: &str, hard: &[(&str, &str)]) -> Quota {
        let hard: ResourceList = hard
            .iter()
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect();
        Quota::new(
            name,
            QuotaSpec {
                parent: parent.into(),
                hard,
                ..Default::default()
            },
        )
    }

    fn working(accrue: bool, now: i64) -> Working {
        Working::for_tests(accrue, now)
    }

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";

    fn at(s: &str) -> i64 {
        quota::time::parse_rfc3339(s).unwrap()
    }

    /// `q` running `cards` cards since `since`, accrued up to then.
    pub(crate) fn running(mut q: Quota, cards: i64, since: i64) -> Quota {
        let since = quota::time::format_rfc3339(since);
        let c = quota::Charge {
            pod_sets: vec![quota::workload::PodSet {
                name: "main".into(),
                count: cards,
                per_pod: [(GPU.to_string(), "1".parse().unwrap())].into(),
                qos: None,
            }],
            hpa: None,
            since: since.clone(),
            uid: "u".into(),
            admitted: None,
        };
        let wref = format!("batch/Job/x/{}", q.name());
        quota::admission::charge(&mut q, &wref, c).unwrap();
        q.status.last_reconcile_time = Some(since);
        q
    }

    /// A quota with 16 GPUs and a monthly budget of `cash` card-hours.
    pub(crate) fn budget(name: &str, parent: &str, cash: &str) -> Quota {
        let mut q = quota(name, parent, &[(GPU, "16"), (CASH, cash)]);
        let monthly = serde_json::json!({"period": {"kind": "monthly", "anchorDay": 1}});
        q.spec
            .budgets
            .insert(CASH.into(), serde_json::from_value(monthly).unwrap());
        q
    }

    /// root → `depts` departments → `teams` teams each, the root and the
    /// departments with a budget (the teams too if `team_budgets`), every
    /// team running one card since `t0`.
    pub(crate) fn big_forest(
        depts: usize,
        teams: usize,
        team_budgets: bool,
        t0: i64,
    ) -> Vec<Quota> {
        let mut out = vec![budget("root", "", "1000000")];
        for d in 0..depts {
            let dept = format!("d{d:03}");
            out.push(budget(&dept, "root", "10000"));
            for t in 0..teams {
                let name = format!("{dept}-t{t:03}");
                let team = match team_budgets {
                    true => budget(&name, &dept, "100"),
                    false => quota(&name, &dept, &[(GPU, "16")]),
                };
                out.push(running(team, 1, t0));
            }
        }
        out
    }

    /// root (a budget) ← a (a budget, 2 cards) ← a1 (a budget, 1 card),
    /// root ← b (no budget, 4 cards), and c, whose parent is not there.
    fn budgeted_forest() -> Vec<Quota> {
        let t0 = at("2026-11-30T12:00:00Z");
        vec![
            budget("root", "", "5000"),
            running(budget("a", "root", "2000"), 2, t0),
            running(budget("a1", "a", "500"), 1, t0),
            running(quota("b", "root", &[(GPU, "8")]), 4, t0),
            running(budget("c", "gone", "100"), 1, t0),
        ]
    }

    /// The sweep's copies (`accrued`: only the budgeted quotas copied, the
    /// subtree usage of the kept forest moved along their lines) say what
    /// copying every quota and summing their subtrees again says, ten
    /// hours on and across a month's end (November's spending closed).
    #[test]
    fn a_forest_accrued_sums_what_its_copies_sum() {
        let f = Arc::new(Forest::of(budgeted_forest()));
        for (now, root_spent) in [("2026-11-30T22:00:00Z", 30), ("2026-12-01T02:00:00Z", 6)] {
            let w = working(true, at(now));
            let a = w.accrued(f.clone());
            assert_eq!(a.copied(), 4, "b has no budget: shared");
            let copies = w.quotas(f.quotas.clone());
            let whole = subtree_in_use(&copies);
            let mine: Vec<&Quota> = a.quotas();
            assert_eq!(mine.len(), copies.len());
            for (q, c) in mine.iter().zip(&copies) {
                assert_eq!(*q, c, "{now}: {}", c.name());
                for key in [GPU, CASH] {
                    assert_eq!(
                        quota::resources::get(a.in_use_of(c.name()), key),
                        quota::resources::get(&whole[c.name()], key),
                        "{now}: {} {key}",
                        c.name()
                    );
                }
            }
            assert_eq!(
                quota::resources::get(a.in_use_of("root"), CASH),
                quota::Quantity::from_units(root_spent),
                "{now}: a and a1 spent 3 card-hours an hour"
            );
        }
        // Nothing is copied where the controller accrues.
        let a = working(false, at("2026-12-01T02:00:00Z")).accrued(f.clone());
        assert_eq!(a.copied(), 0);
        assert_eq!(a.in_use_of("root"), f.in_use_of("root"));
    }

    /// A parent cycle (only a store edited by hand holds one): a → b → c
    /// → a, x below b, each a budget running cards. A quota's page
    /// (`subtree_of`) and `/tree` (`accrued`) move each copy's spending
    /// along the same line (`rollup::line_above`), so they say one figure
    /// for every member, the figure summing every copy again says (`/tree`
    /// once moved a's spending onto b and c, whose sum does not hold a).
    #[test]
    fn a_cycle_gives_one_figure_on_the_tree_and_on_the_page() {
        let t0 = at("2026-11-30T12:00:00Z");
        let f = Arc::new(Forest::of(vec![
            running(budget("a", "b", "1000"), 1, t0),
            running(budget("b", "c", "1000"), 2, t0),
            running(budget("c", "a", "1000"), 4, t0),
            running(budget("x", "b", "1000"), 8, t0),
        ]));
        let w = working(true, at("2026-11-30T22:00:00Z"));
        let tree = w.accrued(f.clone());
        let whole = subtree_in_use(&w.quotas(f.quotas.clone()));
        for name in ["a", "b", "c", "x"] {
            let (_, page) = w.subtree_of(&f, name).unwrap();
            for key in [GPU, CASH] {
                let sum = quota::resources::get(&whole[name], key);
                assert_eq!(quota::resources::get(&page, key), sum, "{name} {key}");
                assert_eq!(
                    quota::resources::get(tree.in_use_of(name), key),
                    sum,
                    "{name} {key}"
                );
            }
        }
        // a, the first by name, holds the whole cycle: 15 cards for 10 h.
        assert_eq!(
            quota::resources::get(tree.in_use_of("a"), CASH),
            quota::Quantity::from_units(150)
        );
    }

    /// A quota's page copies only the budgets of its subtree and says
    /// what copying and summing every quota of it says.
    #[test]
    fn a_page_copies_its_subtrees_budgets_and_sums_what_they_sum() {
        let f = Forest::of(budgeted_forest());
        for now in ["2026-11-30T22:00:00Z", "2026-12-01T02:00:00Z"] {
            let w = working(true, at(now));
            let whole = subtree_in_use(&w.quotas(f.quotas.clone()));
            for name in ["root", "a", "a1", "b", "c"] {
                let (q, in_use) = w.subtree_of(&f, name).unwrap();
                let copy = w.copy(f.quotas.iter().find(|q| q.name() == name).unwrap());
                assert_eq!(q, copy, "{now}: {name}");
                for key in [GPU, CASH] {
                    assert_eq!(
                        quota::resources::get(&in_use, key),
                        quota::resources::get(&whole[name], key),
                        "{now}: {name} {key}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_quota_without_a_budget_is_shared_not_copied() {
        let f = Arc::new(Forest::of(vec![
            quota("a", "", &[("requests.nvidia.com/gpu", "4")]),
            quota("b", "", &[("cash/requests.nvidia.com/gpu", "10")]),
        ]));
        let a = working(true, 1_000).accrued(f.clone());
        assert_eq!(a.copied(), 1);
        let quotas = a.quotas();
        assert!(std::ptr::eq(quotas[0], &f.quotas[0]), "a is shared");
        assert!(!std::ptr::eq(quotas[1], &f.quotas[1]), "b is a copy");
        let cluster = working(false, 1_000).accrued(f.clone());
        assert_eq!(cluster.copied(), 0, "the controller accrues");
        assert!(cluster
            .quotas()
            .iter()
            .zip(&f.quotas)
            .all(|(q, k)| std::ptr::eq(*q, k)));
    }
}
