//! A quota's status as people read it: what `kubectl get bizrq` shows
//! (the `summary` printer columns) and each cash key's balance in its unit
//! (`readable`), both derived when the status is written and never read
//! back for a decision.

use crate::budget::periods;
use crate::keys::{cash_target, cash_unit, Class, Key, KeyConfig};
use crate::object::{QuotaSpec, QuotaStatus, Summary};
use crate::quantity::Quantity;
use crate::readable::decimal;
use crate::resources::{self, ResourceList};
use std::collections::BTreeMap;

impl QuotaStatus {
    /// Derive `summary` and `readable` from spec and status, as written;
    /// `in_use` is what runs in the quota's whole subtree
    /// (`summarize`).
    pub fn summarize(&mut self, spec: &QuotaSpec, in_use: &ResourceList, cfg: &KeyConfig) {
        let (summary, readable) = summarize(spec, self, in_use, cfg);
        self.summary = Some(summary);
        self.readable = readable;
    }
}

/// The summary of a quota and a readable balance per cash key, from its
/// spec, its (refreshed) status and `in_use`, what runs in its whole
/// subtree (`rollup::subtree_in_use`'s figure for it; a quota without
/// children: its own `selfUsed`). GPU keys are the generic ones
/// (`requests.nvidia.com/gpu`), else the model keys, of the configured
/// GPU resources.
pub fn summarize(
    spec: &QuotaSpec,
    status: &QuotaStatus,
    in_use: &resources::ResourceList,
    cfg: &KeyConfig,
) -> (Summary, BTreeMap<String, String>) {
    let gpu_keys = |cash: bool, model: bool| -> Vec<&String> {
        spec.hard
            .keys()
            .filter(|k| {
                Key::parse(k, cfg).is_ok_and(|p| {
                    p.cash == cash
                        && p.class == Class::Requests
                        && p.model.is_some() == model
                        && cfg.is_gpu(&p.resource)
                })
            })
            .collect()
    };
    let pick = |cash: bool| {
        let generic = gpu_keys(cash, false);
        if generic.is_empty() {
            gpu_keys(cash, true)
        } else {
            generic
        }
    };
    let total = |keys: &[&String], of: &dyn Fn(&str) -> Quantity| {
        keys.iter()
            .fold(Quantity::ZERO, |acc, k| acc.saturating_add(of(k)))
    };
    let cards = pick(false);
    let gpu = (!cards.is_empty()).then(|| {
        format!(
            "{}/{}",
            decimal(total(&cards, &|k| resources::get(in_use, k))),
            decimal(total(&cards, &|k| resources::get(&spec.hard, k)))
        )
    });
    let card_cash = pick(true);
    let card_hours_left = (!card_cash.is_empty()).then(|| {
        let left = total(&card_cash, &|k| {
            periods::left(spec, status, k).max(Quantity::ZERO)
        });
        decimal(left)
    });
    let borrowing = (!status.borrowed.is_empty()).then(|| {
        status
            .borrowed
            .iter()
            .map(|(k, q)| format!("{k}={}", decimal(*q)))
            .collect::<Vec<_>>()
            .join(",")
    });
    let readable = spec
        .hard
        .keys()
        .filter(|k| cash_target(k).is_some())
        .map(|k| (k.clone(), cash_balance_of(spec, status, k)))
        .collect();
    let summary = Summary {
        gpu,
        card_hours_left,
        borrowing,
        reclaim_pending: status.reclaim.len().try_into().unwrap_or(u32::MAX),
        queued: crate::queue::summary::waiting(&status.queue, status.queue_summary.as_ref())
            .try_into()
            .unwrap_or(u32::MAX),
    };
    (summary, readable)
}

/// A budget's balance as the budgets API has it, for people: what the
/// quota's own work spent of what it has this period (its budget, carry-in
/// and top-ups), what its children hold of it, and what is left
/// (`periods::left`, never below 0): `2 of 150 card-hours used, 148 left`;
/// at a parent `5 of 620 card-hours used by its own work, 200 allocated to
/// children, 415 left` (a carve-out is not spending).
pub fn cash_balance_of(spec: &QuotaSpec, status: &QuotaStatus, key: &str) -> String {
    let (has, spent, carved) = match periods::balance(spec, status, key) {
        Some(b) => (
            b.budget
                .saturating_add(b.carry_in)
                .saturating_add(b.top_ups),
            b.spent,
            b.carved,
        ),
        None => (
            resources::get(&spec.hard, key),
            periods::own_used(status, spec, key),
            periods::carved(status, key),
        ),
    };
    let left = periods::left(spec, status, key).max(Quantity::ZERO);
    if carved.is_zero() {
        return format!(
            "{} of {} {} used, {} left",
            decimal(spent),
            decimal(has),
            cash_unit(key),
            decimal(left)
        );
    }
    format!(
        "{} of {} {} used by its own work, {} allocated to children, {} left",
        decimal(spent),
        decimal(has),
        cash_unit(key),
        decimal(carved),
        decimal(left)
    )
}
