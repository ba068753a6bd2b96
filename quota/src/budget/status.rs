//! What a quota's status derives from its spec and its ledgers: `used`,
//! `selfUsed` and the borrowing reports (`QuotaStatus::refresh`, which a new
//! quota starts from), and the standalone cash accrual that moves the
//! ledgers along in time (`QuotaStatus::accrue_ledger`).

use super::price_list::{self, PriceList};
use super::{periods, reservations};
use crate::cash::QosMultipliers;
use crate::keys::cash_target;
use crate::object::{api_version, ObjectMeta, Quota, QuotaSpec, QuotaStatus, KIND};
use crate::resources::{self, ResourceList};
use crate::time;
use std::collections::BTreeMap;

impl QuotaStatus {
    /// Recompute `hard`, `selfUsed` and `used` from spec and ledgers, key by
    /// key of hard (the only keys status reports), without building each
    /// workload's usage; then the borrowing reports `borrowed` and `lent`.
    /// Loans do not enter `used`: a loan is lent out of idle guarantee that
    /// `used` already counts (a child's hard) or out of the uncarved rest.
    pub fn refresh(&mut self, spec: &QuotaSpec) {
        let (self_used, used) = self.usage_of(spec);
        if self.hard != spec.hard {
            self.hard = spec.hard.clone();
        }
        reservations::settle_released(self, spec);
        if !self.users.is_empty() {
            let workloads = &self.workloads;
            self.users.retain(|w, _| workloads.contains_key(w));
        }
        self.borrowed = spec.borrowed(&used);
        self.self_used = self_used;
        self.used = used;
        if !(self.loans.is_empty() && self.lent.is_empty()) {
            self.lent = resources::sum(self.loans.values().map(|l| &l.amount));
        }
    }

    /// `selfUsed` and `used` as `refresh` derives them, key by key of
    /// `spec.hard`, from the ledgers as they are; nothing is changed.
    pub fn usage_of(&self, spec: &QuotaSpec) -> (ResourceList, ResourceList) {
        let mut self_used = ResourceList::new();
        let mut used = ResourceList::new();
        for key in spec.hard.keys() {
            let own = if cash_target(key).is_some() {
                periods::own_used(self, spec, key)
            } else {
                self.held(key)
            };
            let carved = periods::carved(self, key);
            self_used.insert(key.clone(), own);
            used.insert(key.clone(), own.saturating_add(carved));
        }
        (self_used, used)
    }

    /// Standalone cash accrual: every charged workload held its usage since
    /// the later of its charge and the last window's end (called before any
    /// change to the ledger, so within a window the usage was constant).
    /// The window is cut at budget period boundaries; periods that ended
    /// by `now_ms` are closed (their records land in `budgets`). Every
    /// weight is 1 (no price list): `accrue_ledger_priced` with one.
    pub fn accrue_ledger(&mut self, spec: &QuotaSpec, now_ms: i64, prices: &QosMultipliers) {
        self.accrue_ledger_priced(spec, now_ms, prices, &PriceList::default());
    }

    /// `accrue_ledger` at the weights of `list` in force at each instant:
    /// the window is also cut at every price change, to the millisecond.
    pub fn accrue_ledger_priced(
        &mut self,
        spec: &QuotaSpec,
        now_ms: i64,
        prices: &QosMultipliers,
        list: &PriceList,
    ) {
        let last = self
            .last_reconcile_time
            .as_deref()
            .and_then(time::parse_rfc3339);
        match last {
            Some(last) if now_ms <= last => return,
            Some(last) => {
                let entries = crate::budget::ledger::charge_entries(
                    "",
                    spec,
                    &self.workloads,
                    &self.users,
                    last,
                    now_ms,
                    prices,
                    list,
                );
                self.ledger.0.extend(entries);
                let workloads = std::mem::take(&mut self.workloads);
                periods::accrue_in_periods(spec, self, last, now_ms, |a, b| {
                    let mut out = BTreeMap::new();
                    for ck in spec.hard.keys() {
                        let Some(target) = cash_target(ck) else {
                            continue;
                        };
                        let mut acc = 0i128;
                        for c in workloads.values() {
                            let start = time::parse_rfc3339(&c.since).unwrap_or(a).max(a);
                            let cost =
                                price_list::charge_cost_weighted(c, target, start, b, prices, list);
                            acc = acc.saturating_add(cost);
                        }
                        let amount = price_list::to_cash_accrued(acc);
                        if amount != 0 {
                            out.insert(ck.clone(), amount);
                        }
                    }
                    out
                });
                self.workloads = workloads;
                reservations::consume(self, last, now_ms, prices, list);
            }
            None => {
                periods::sync(spec, self, now_ms);
            }
        }
        self.last_reconcile_time = Some(time::format_rfc3339(now_ms));
        self.refresh(spec);
    }
}

impl Quota {
    pub fn new(name: &str, spec: QuotaSpec) -> Quota {
        let mut q = Quota {
            api_version: api_version(),
            kind: KIND.to_string(),
            metadata: ObjectMeta {
                name: name.to_string(),
                ..Default::default()
            },
            spec,
            status: QuotaStatus::default(),
        };
        q.status.refresh(&q.spec);
        q
    }
}
