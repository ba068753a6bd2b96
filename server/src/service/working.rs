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
use quota::cash::Prices;
use quota::keys::cash_target;
use quota::rollup::subtree_in_use;
use quota::{Quota, ResourceList};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// How a request's quotas are copied: the service's accrual rule, prices
/// and one `now`.
#[derive(Clone)]
pub struct Working {
    accrue: bool,
    now: i64,
    prices: Prices,
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
    /// The request's one `now`.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// What budgets are priced and forecast at, at the request's `now`.
    pub fn pricing(&self) -> app::tree::Pricing {
        app::tree::Pricing {
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

    /// A forest as of `now`, its subtree usage summed from the working
    /// copies; the same forest, shared, where nothing accrues. CPU work
    /// over the whole forest: call it on the render threads.
    pub fn forest(&self, f: Arc<Forest>) -> Arc<Forest> {
        if !self.accrue || !f.quotas.iter().any(has_budget) {
            return f;
        }
        let quotas = match Arc::try_unwrap(f) {
            Ok(f) => f.quotas,
            Err(shared) => shared.quotas.clone(),
        };
        Arc::new(Forest::of(self.quotas(quotas)))
    }

    /// `name` as of `now` and what its whole subtree uses (Σ `selfUsed` of
    /// the working copies of it and its descendants, spending included),
    /// from the kept forest: only the subtree is copied. None when `name`
    /// is not in it.
    pub fn subtree_of(&self, f: &Forest, name: &str) -> Option<(Quota, ResourceList)> {
        let q = f.quotas.iter().find(|q| q.name() == name)?;
        if !self.accrue {
            return Some((q.clone(), f.in_use_of(name).clone()));
        }
        let mut children: HashMap<&str, Vec<&Quota>> = HashMap::new();
        for c in &f.quotas {
            children.entry(c.spec.parent.as_str()).or_default().push(c);
        }
        let mut subtree = Vec::new();
        let mut next = vec![q];
        let mut seen: HashSet<&str> = HashSet::new();
        while let Some(at) = next.pop() {
            if !seen.insert(at.name()) {
                continue;
            }
            subtree.push(self.copy(at));
            next.extend(children.get(at.name()).into_iter().flatten().copied());
        }
        let in_use = subtree_in_use(&subtree).remove(name).unwrap_or_default();
        let q = subtree.into_iter().find(|q| q.name() == name)?;
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
        use quota::queue::{self, Decision, Pool, Waiting};
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
            &queue::ledger::entries(q),
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

/// A quota whose copy can differ from its stored version: one with a
/// budget (a cash key of hard) or a budget status left from one.
fn has_budget(q: &Quota) -> bool {
    q.spec.hard.keys().any(|k| cash_target(k).is_some()) || !q.status.budgets.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
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
        Working {
            accrue,
            now,
            prices: Prices::default(),
            list: Arc::new(PriceList::default()),
        }
    }

    #[test]
    fn a_quota_without_a_budget_is_shared_not_copied() {
        let f = Arc::new(Forest::of(vec![quota(
            "a",
            "",
            &[("requests.nvidia.com/gpu", "4")],
        )]));
        let w = working(true, 1_000);
        assert!(Arc::ptr_eq(&w.forest(f.clone()), &f));
        let with_cash = Arc::new(Forest::of(vec![quota(
            "b",
            "",
            &[("cash/requests.nvidia.com/gpu", "10")],
        )]));
        assert!(Arc::ptr_eq(
            &working(false, 1_000).forest(with_cash.clone()),
            &with_cash
        ));
    }
}
