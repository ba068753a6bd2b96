//! The `BizGroupResourceQuota` object as plain data: spec, status and the
//! ledgers kept in status (carve-outs of children, charges of workloads,
//! cash accumulators), with their serde and what derives from them alone.
//! The types of the status's parts are the submodules (`budgets`,
//! `period`, `loans`, `marks`, `queue`, `queueing`, `refunds`,
//! `transfers`); the rules that change them import this module, never the
//! other way. `used` and `selfUsed` are always derived from the ledgers by
//! `QuotaStatus::refresh` (`crate::budget::status`), and so are the
//! borrowing reports `lent` and `borrowed` (§5). Transfers in flight hold
//! carve-outs here too (`transfers`, §6).

use crate::keys::cash_target;
use crate::quantity::Quantity;
use crate::resources::{self, ResourceList};
use crate::workload::PodSet;
use budgets::{BudgetPolicy, Outbox, Pending, PeriodStatus, Reservations};
use deleted::Deleted;
use fair_sharing::{FairSharing, FairStatus};
use loans::Loan;
use marks::Mark;
use queue::QueueEntry;
use queueing::QueuePolicy;
use refunds::Refunded;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use transfers::Hold;

pub mod budgets;
pub mod deleted;
pub mod fair_sharing;
pub mod idle;
pub mod loans;
pub mod marks;
pub mod period;
pub mod queue;
pub mod queueing;
pub mod refunds;
mod sums;
pub mod transfers;

/// What `kubectl get bizrq` shows first (the CRD's printer columns): the
/// figures the portal and the API show, never a parent's carve-outs read
/// as use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// GPU cards in use in the quota's whole subtree over its hard
    /// (`12/16`): the keys table's "in use" (`rollup`), over its GPU keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Card-hours left on its GPU cash keys for its own new work,
    /// rounded, never below 0 (`812.5`): `budget::periods::left`, the
    /// budgets API's `left` (carry-in and top-ups in, its children's
    /// carve-outs out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_hours_left: Option<String>,
    /// What it uses beyond hard, on loan from its parent
    /// (`requests.nvidia.com/gpu=4`); absent when nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing: Option<String>,
    /// Workloads marked for reclaim.
    #[serde(default)]
    pub reclaim_pending: u32,
    /// Workloads waiting in the quota's queue.
    #[serde(default)]
    pub queued: u32,
}

pub const API_GROUP: &str = "bizrq.io";
pub const API_VERSION: &str = "v1";
pub const KIND: &str = "BizGroupResourceQuota";
pub const PLURAL: &str = "bizgroupresourcequotas";
pub const SHORT_NAME: &str = "bizrq";

pub fn api_version() -> String {
    format!("{API_GROUP}/{API_VERSION}")
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuotaSpec {
    /// "" for a root of the tree.
    #[serde(default)]
    pub parent: String,
    /// Guaranteed quota, carved out of the parent.
    #[serde(default)]
    pub hard: ResourceList,
    /// Optional ceiling including borrowed capacity.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub max: ResourceList,
    /// Budget policies of cash keys of hard (docs/budgets.md): period,
    /// carry-over and the rest. Absent or `{}`: one budget forever.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub budgets: BTreeMap<String, BudgetPolicy>,
    /// What happens to suspendable batch work that does not fit: refused
    /// (the default) or queued (docs/queueing.md).
    #[serde(default, skip_serializing_if = "QueuePolicy::is_default")]
    pub queueing: QueuePolicy,
    /// Its weight among its siblings when they share the parent's idle
    /// capacity (docs/queueing.md, "Fair sharing"); weight 1 when absent.
    #[serde(default, skip_serializing_if = "FairSharing::is_default")]
    pub fair_sharing: FairSharing,
    /// When its workloads' GPUs count as idle, and what then happens
    /// (docs/real-usage.md); absent: its nearest ancestor's, or the
    /// defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<idle::IdlePolicy>,
}

impl QuotaSpec {
    /// What `used` takes beyond hard on the keys of max: what a node with
    /// that usage borrows from its parent (§5). Empty without a max.
    pub fn borrowed(&self, used: &ResourceList) -> ResourceList {
        self.max
            .keys()
            .filter_map(|k| {
                let over = resources::get(used, k).saturating_sub(resources::get(&self.hard, k));
                (over.nanos() > 0).then(|| (k.clone(), over))
            })
            .collect()
    }
}

/// What a workload holds in a quota: its pod sets and, for an HPA target,
/// the HPA's `maxReplicas`, which is what is charged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Charge {
    pub pod_sets: Vec<PodSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa: Option<HpaCharge>,
    /// When it was first charged (RFC 3339).
    pub since: String,
    /// The admission request that last changed it.
    #[serde(default)]
    pub uid: String,
    /// When an admission last changed it (RFC 3339). A reconcile keeps an
    /// entry this recent even when its cache does not show the change yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HpaCharge {
    pub name: String,
    pub max_replicas: i64,
}

/// A charge's `uid` when the controller's round admitted it from the
/// queue: this prefix, then the object's uid.
pub const QUEUE_CHARGE: &str = "queue:";

/// A charge's `uid` when a review of bizrq's own write of the object (a
/// queue's release, a preemption's suspend) wrote it: this prefix, then
/// the object's uid. Anyone else's review leaves the request's uid.
pub const OWN_CHARGE: &str = "bizrq:";

impl Charge {
    /// The uid of the object this charge was written for, when its `uid`
    /// names one (`QUEUE_CHARGE`, `OWN_CHARGE`); None for a charge a
    /// tenant's review wrote (its `uid` is the request's).
    pub fn object_uid(&self) -> Option<&str> {
        self.uid
            .strip_prefix(QUEUE_CHARGE)
            .or_else(|| self.uid.strip_prefix(OWN_CHARGE))
            .filter(|u| !u.is_empty())
    }

    /// Whether a queue round admitted this charge for the object of
    /// `object_uid` (`QUEUE_CHARGE`, then that uid; never for an unnamed
    /// object).
    pub fn admitted_by_round(&self, object_uid: &str) -> bool {
        !object_uid.is_empty() && self.uid.strip_prefix(QUEUE_CHARGE) == Some(object_uid)
    }

    /// Count of a pod set as charged: an HPA's maxReplicas reserves room for
    /// the single scalable set.
    pub fn charged_count(&self, set: &PodSet) -> i64 {
        match &self.hpa {
            Some(h) if self.pod_sets.len() == 1 => set.count.max(h.max_replicas),
            _ => set.count,
        }
    }

    pub fn usage(&self) -> ResourceList {
        let mut out = ResourceList::new();
        for s in &self.pod_sets {
            resources::add_into(&mut out, &s.usage(self.charged_count(s)));
        }
        out
    }

    /// Same charge in quota terms (ignores when and by which request).
    pub fn same_as(&self, other: &Charge) -> bool {
        self.pod_sets == other.pod_sets && self.hpa == other.hpa
    }
}

/// A quota's charges, by workload reference: a map whose charges are
/// shared between copies of the status. Deciding on a quota starts from a
/// copy of the stored one, and a busy quota holds thousands of charges of
/// which one admission changes one: a copy shares every charge it does not
/// change (a change to one, through `get_mut` or `insert`, is made on a
/// copy of that one only), and dropping a copy drops pointers, not charges.
/// A charge keeps its JSON once serialised, so writing a status serialises
/// only the charges that changed since the last write.
/// It reads as a `BTreeMap<String, Charge>`, and is one in JSON.
/// What the charges hold together is kept beside them once asked for
/// (`sums`), and moved by each charge added or removed.
#[derive(Clone, Default)]
pub struct Workloads {
    charges: BTreeMap<String, Arc<Shared>>,
    /// Unset until asked for, and after a change it cannot follow (a
    /// charge changed in place); None: the charges cannot be summed
    /// exactly, and `QuotaStatus::held` walks them instead.
    sums: OnceLock<Option<Arc<sums::Sums>>>,
}

impl PartialEq for Workloads {
    fn eq(&self, other: &Workloads) -> bool {
        self.charges == other.charges
    }
}

impl Eq for Workloads {}

/// The charge of `wref` goes from `old` to `new`: the kept sums follow it,
/// or are dropped (and summed again when next asked) when they cannot.
fn track(
    sums: &mut OnceLock<Option<Arc<sums::Sums>>>,
    wref: &str,
    old: Option<&Charge>,
    new: Option<&Charge>,
) {
    let kept = match sums.get_mut() {
        None => return,
        Some(Some(s)) => Arc::make_mut(s).replace(wref, old, new).is_some(),
        Some(None) => false,
    };
    if !kept {
        *sums = OnceLock::new();
    }
}

/// One charge, and its JSON once serialised. Only `Workloads` reaches the
/// charge mutably, and forgets the JSON as it does.
#[derive(Clone)]
struct Shared {
    charge: Charge,
    json: OnceLock<Box<serde_json::value::RawValue>>,
}

std::thread_local! {
    /// Set while `QuotaStatus::to_json_without_workloads` serialises: the
    /// status is then written without its charges (`Workloads::skipped`).
    /// Serialising is synchronous, so a flag of the thread is the call's own.
    static WITHOUT_WORKLOADS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The changes from one `Workloads` to another (`Workloads::changes_since`):
/// each charge added or changed, with its JSON, and each reference gone.
#[derive(Debug, Default)]
pub struct WorkloadChanges<'a> {
    pub written: Vec<(&'a str, &'a serde_json::value::RawValue)>,
    pub removed: Vec<&'a str>,
}

impl WorkloadChanges<'_> {
    pub fn is_empty(&self) -> bool {
        self.written.is_empty() && self.removed.is_empty()
    }
}

impl Shared {
    /// The charge's JSON, serialised once.
    fn json(&self) -> serde_json::Result<&serde_json::value::RawValue> {
        if let Some(json) = self.json.get() {
            return Ok(json);
        }
        let json = serde_json::value::to_raw_value(&self.charge)?;
        Ok(self.json.get_or_init(|| json))
    }

    fn new(charge: Charge) -> Arc<Shared> {
        Arc::new(Shared {
            charge,
            json: OnceLock::new(),
        })
    }

    fn charge_mut(this: &mut Arc<Shared>) -> &mut Charge {
        let s = Arc::make_mut(this);
        s.json = OnceLock::new();
        &mut s.charge
    }

    fn into_charge(this: Arc<Shared>) -> Charge {
        Arc::unwrap_or_clone(this).charge
    }
}

impl PartialEq for Shared {
    fn eq(&self, other: &Shared) -> bool {
        self.charge == other.charge
    }
}

impl Eq for Shared {}

impl Serialize for Shared {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json().map_err(serde::ser::Error::custom)?.serialize(s)
    }
}

impl Workloads {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        self.charges.len()
    }
    pub fn is_empty(&self) -> bool {
        self.charges.is_empty()
    }
    pub fn contains_key(&self, wref: &str) -> bool {
        self.charges.contains_key(wref)
    }
    pub fn get(&self, wref: &str) -> Option<&Charge> {
        self.charges.get(wref).map(|c| &c.charge)
    }
    pub fn get_key_value(&self, wref: &str) -> Option<(&String, &Charge)> {
        self.charges
            .get_key_value(wref)
            .map(|(k, c)| (k, &c.charge))
    }
    /// The charge to change: copied first if another status shares it.
    pub fn get_mut(&mut self, wref: &str) -> Option<&mut Charge> {
        let c = self.charges.get_mut(wref)?;
        self.sums = OnceLock::new();
        Some(Shared::charge_mut(c))
    }
    pub fn insert(&mut self, wref: String, charge: Charge) -> Option<Charge> {
        let old = self.charges.get(&wref).map(|c| &c.charge);
        track(&mut self.sums, &wref, old, Some(&charge));
        self.charges
            .insert(wref, Shared::new(charge))
            .map(Shared::into_charge)
    }
    pub fn remove(&mut self, wref: &str) -> Option<Charge> {
        let old = self.charges.remove(wref)?;
        track(&mut self.sums, wref, Some(&old.charge), None);
        Some(Shared::into_charge(old))
    }
    pub fn clear(&mut self) {
        self.charges.clear();
        self.sums = OnceLock::new();
    }
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &Charge) -> bool) {
        let before = self.charges.len();
        self.charges.retain(|k, c| keep(k, &c.charge));
        if self.charges.len() != before {
            self.sums = OnceLock::new();
        }
    }
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator + Clone {
        self.charges.keys()
    }
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Charge> + ExactSizeIterator + Clone {
        self.charges.values().map(|c| &c.charge)
    }
    /// Each charge to change (each copied first if shared).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Charge> {
        self.sums = OnceLock::new();
        self.charges.values_mut().map(Shared::charge_mut)
    }
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&String, &Charge)> + ExactSizeIterator + Clone {
        self.charges.iter().map(|(k, c)| (k, &c.charge))
    }

    /// What the charges hold of `key`, walked charge by charge in reference
    /// order and pod set by pod set: the definition the kept sums (`sums`)
    /// give exactly, and the answer where they cannot be kept.
    fn walk(&self, key: &str) -> Quantity {
        let mut total = Quantity::ZERO;
        for c in self.values() {
            for s in &c.pod_sets {
                if let Some(q) = s.per_pod.get(key) {
                    total = total.saturating_add(q.saturating_mul(c.charged_count(s) as i128));
                }
            }
        }
        total
    }

    /// Every key the charges hold, walked as `walk` does.
    fn walk_usage(&self) -> ResourceList {
        let mut out = ResourceList::new();
        for c in self.values() {
            resources::add_into(&mut out, &c.usage());
        }
        out
    }

    /// Sums what the charges hold now, unless already kept: copies made
    /// from here on share the sums instead of each summing again (a
    /// version read from the store, from which every admission copies).
    pub fn keep_sums(&self) {
        self.sums();
    }

    /// What the charges hold together, summed once and then kept through
    /// `insert` and `remove`; None when they cannot be summed exactly.
    fn sums(&self) -> Option<&sums::Sums> {
        self.sums
            .get_or_init(|| sums::Sums::of(self.iter()).map(Arc::new))
            .as_deref()
    }

    /// Adds a charge read back as JSON, keeping that JSON as the charge's
    /// own (it is written again as it was read, not serialised anew).
    /// `known`: another copy's charges (an older version of the same
    /// quota): its charge of `wref`, if it has that very JSON, is shared
    /// instead of parsed again.
    pub fn insert_json(
        &mut self,
        wref: String,
        json: String,
        known: Option<&Workloads>,
    ) -> serde_json::Result<()> {
        let shared = match known
            .and_then(|k| k.charges.get(&wref))
            .filter(|c| c.json.get().is_some_and(|j| j.get() == json))
        {
            Some(same) => same.clone(),
            None => {
                let json = serde_json::value::RawValue::from_string(json)?;
                let charge: Charge = serde_json::from_str(json.get())?;
                Arc::new(Shared {
                    charge,
                    json: OnceLock::from(json),
                })
            }
        };
        let old = self.charges.get(&wref).map(|c| &c.charge);
        track(&mut self.sums, &wref, old, Some(&shared.charge));
        self.charges.insert(wref, shared);
        Ok(())
    }

    /// What a store that keeps charges apart (a row each) must do to
    /// turn `base` into `self`: write each charge that is new or changed,
    /// and remove each reference `self` no longer holds. A charge `self`
    /// shares with `base` is unchanged without being compared; one copied
    /// is compared, and written only if it differs.
    pub fn changes_since<'a>(
        &'a self,
        base: &'a Workloads,
    ) -> serde_json::Result<WorkloadChanges<'a>> {
        let mut out = WorkloadChanges::default();
        let mut old = base.charges.iter().peekable();
        for (k, c) in &self.charges {
            while let Some((ok, _)) = old.next_if(|(ok, _)| ok.as_str() < k.as_str()) {
                out.removed.push(ok.as_str());
            }
            let same = old
                .next_if(|(ok, _)| *ok == k)
                .is_some_and(|(_, oc)| Arc::ptr_eq(c, oc) || oc.charge == c.charge);
            if !same {
                out.written.push((k.as_str(), c.json()?));
            }
        }
        out.removed.extend(old.map(|(k, _)| k.as_str()));
        Ok(out)
    }

    /// Whether a status is serialised without its charges: when it has
    /// none, or in `QuotaStatus::to_json_without_workloads`.
    fn skipped(&self) -> bool {
        self.is_empty() || WITHOUT_WORKLOADS.with(std::cell::Cell::get)
    }
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// `&Workloads` iterated: each reference and its charge, in order.
pub struct WorkloadsIter<'a>(std::collections::btree_map::Iter<'a, String, Arc<Shared>>);

impl<'a> Iterator for WorkloadsIter<'a> {
    type Item = (&'a String, &'a Charge);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, c)| (k, &c.charge))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<'a> IntoIterator for &'a Workloads {
    type Item = (&'a String, &'a Charge);
    type IntoIter = WorkloadsIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        WorkloadsIter(self.charges.iter())
    }
}

/// `Workloads` taken apart: each reference and its charge, in order.
pub struct WorkloadsIntoIter(std::collections::btree_map::IntoIter<String, Arc<Shared>>);

impl Iterator for WorkloadsIntoIter {
    type Item = (String, Charge);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, c)| (k, Shared::into_charge(c)))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl IntoIterator for Workloads {
    type Item = (String, Charge);
    type IntoIter = WorkloadsIntoIter;
    fn into_iter(self) -> Self::IntoIter {
        WorkloadsIntoIter(self.charges.into_iter())
    }
}

impl FromIterator<(String, Charge)> for Workloads {
    fn from_iter<I: IntoIterator<Item = (String, Charge)>>(iter: I) -> Self {
        Workloads {
            charges: iter.into_iter().map(|(k, c)| (k, Shared::new(c))).collect(),
            sums: OnceLock::new(),
        }
    }
}

impl Extend<(String, Charge)> for Workloads {
    fn extend<I: IntoIterator<Item = (String, Charge)>>(&mut self, iter: I) {
        self.charges
            .extend(iter.into_iter().map(|(k, c)| (k, Shared::new(c))));
        self.sums = OnceLock::new();
    }
}

impl From<BTreeMap<String, Charge>> for Workloads {
    fn from(m: BTreeMap<String, Charge>) -> Self {
        m.into_iter().collect()
    }
}

impl<const N: usize> From<[(String, Charge); N]> for Workloads {
    fn from(a: [(String, Charge); N]) -> Self {
        a.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Workloads {
    type Output = Charge;
    fn index(&self, wref: &str) -> &Charge {
        self.get(wref).expect("no charge for this workload")
    }
}

impl std::ops::Index<&String> for Workloads {
    type Output = Charge;
    fn index(&self, wref: &String) -> &Charge {
        &self[wref.as_str()]
    }
}

impl Serialize for Workloads {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.charges.iter().map(|(k, c)| (k, &**c)))
    }
}

impl<'de> Deserialize<'de> for Workloads {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::<String, Charge>::deserialize(d).map(Workloads::from)
    }
}

/// A child's carve-out as recorded in its parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Carve {
    pub hard: ResourceList,
    /// When the carve-out took this amount.
    pub since: String,
    /// The request that created the child, so a failed create removes only
    /// its own carve-out and never a concurrent winner's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaStatus {
    #[serde(default)]
    pub hard: ResourceList,
    /// selfUsed + Σ children's hard (+ cash spent), for the keys of hard.
    #[serde(default)]
    pub used: ResourceList,
    /// Usage of workloads bound directly to this node.
    #[serde(default)]
    pub self_used: ResourceList,
    /// End of the last cash accrual window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<String>,
    /// Carve-outs of children, by child name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub children: BTreeMap<String, Carve>,
    /// Charges of bound workloads, by workload reference
    /// (`group/Kind/namespace/name`).
    #[serde(default, skip_serializing_if = "Workloads::skipped")]
    pub workloads: Workloads,
    /// Exact cash accumulators per cash key, in nano-units × milliseconds ×
    /// per-mille price (integers as strings, so nothing is rounded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cash_accrued: BTreeMap<String, String>,
    /// The current period of each cash key that has one (spec.budgets):
    /// its window, carry-in and last closed periods. `cashAccrued` then
    /// holds what was spent in this period (`budget::periods`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub budgets: BTreeMap<String, PeriodStatus>,
    /// Open reservations of budgets (docs/budgets.md §2), by cash key then
    /// by workload reference: what a workload that declared its run time
    /// holds back of the budget. Written only with the workload's charge,
    /// and settled when the charge goes (`budget::reservations`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reservations: Reservations,
    /// Loans granted to children beyond their hard, by child name (§5). A
    /// child's loan lives here, in the lender, so two children borrowing at
    /// once serialise on this object's compare-and-swap.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub loans: BTreeMap<String, Loan>,
    /// As a lender: the generation of the latest loan granted here; each
    /// grant (`borrow::lend`) takes the next, so a loan's generation says
    /// whether it was granted again since it was read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loan_generation: u64,
    /// As a borrower: no charge rides a loan its parent granted at this
    /// generation or before. A release that gives its loan back at once
    /// raises it in the release's own write (`borrow::fence_release`), so
    /// an admission in flight on the loan it returns asks again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loan_fence: u64,
    /// Σ loans: what this node has lent its children (derived).
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub lent: ResourceList,
    /// used − hard where positive, on the keys of spec.max: what this node
    /// uses beyond its guarantee, on loan from its parent (derived).
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub borrowed: ResourceList,
    /// Workloads of this node marked for reclaim, by workload reference:
    /// what will be done to each and when (§5, delayed reclaim).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reclaim: BTreeMap<String, Mark>,
    /// Transfers in flight through this node, by transfer id: the
    /// carve-outs of children each one is changing, held so that nothing
    /// else changes them meanwhile, and — at the transfer's common ancestor
    /// — its decision, taken once (§6, `transfer`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub transfers: BTreeMap<String, Hold>,
    /// For people: what `kubectl get` shows (derived by `summarize` when
    /// the status is written to the cluster; never read back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Workloads waiting, suspended and not charged, in admission order
    /// (docs/queueing.md §2). An entry leaves only in the write that
    /// charges it, or when its workload is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<QueueEntry>,
    /// With queue marks on (docs/queueing.md §12): the whole queue in a
    /// few numbers, since `queue` then lists only its first
    /// `queue::summary::TOP_ENTRIES` entries (and those no mark backs).
    /// Written by the controller's round; None without marks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_summary: Option<queue::Summary>,
    /// For people: its weight and dominant share of what its parent can
    /// lend, for a quota that may borrow (derived by the controller's
    /// queue round; never read for a decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairStatus>,
    /// Who asked for each charged workload (the AdmissionReview's
    /// `userInfo.username` at admission), by workload reference: the
    /// ledger's entries carry it (docs/budgets.md §6). Dropped with the
    /// charge.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, String>,
    /// Workloads whose DELETE a review released, by workload reference,
    /// with the deleted object's uid: while the controller's watch still
    /// shows that object, its reconcile and queue rounds do not charge it
    /// again (the room was given back at the DELETE). An entry goes once
    /// the watch shows that object no more, or after
    /// `reconcile::DELETED_TTL_MS`; at most `reconcile::MAX_DELETED`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deleted: BTreeMap<String, Deleted>,
    /// Ledger entries accrued on this copy and not yet written (never
    /// serialized, never compared: `budgets::Pending`).
    #[serde(skip)]
    pub ledger: Pending,
    /// Cluster mode: the ledger entries of the window this write accrued,
    /// until the next write (`budgets::Outbox`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_outbox: Option<Outbox>,
    /// Billing by quality (docs/real-usage.md): the end of the last window
    /// of real usage billed here (RFC 3339), advanced in the write that
    /// bills it, so no window is billed twice (`real_usage::billing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_billed_to: Option<String>,
    /// For people: each cash key's balance in its unit, rounded
    /// (`0.42 of 1000 card-hours used, 999.58 left`;
    /// `summary::cash_balance_of`). The exact amounts
    /// stay in `used` and `cashAccrued`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub readable: BTreeMap<String, String>,
    /// Refunds given for work stopped by reclaim (docs/budgets.md §4), by
    /// workload reference: the newest per workload, at most
    /// `enforce::KEEP_REFUNDS`. Written in the same write that removes the
    /// reclaim mark, so a mark is refunded at most once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refunds: BTreeMap<String, Refunded>,
    /// Since when each spent cash key has been spent (RFC 3339), kept for
    /// the `suspendBatch` policy's grace period (docs/budgets.md §4).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exhausted: BTreeMap<String, String>,
}

impl QuotaStatus {
    /// The status's JSON without its charges, for a store that keeps each
    /// charge apart (the SQL store's `charges` rows): `workloads` is left
    /// out as when empty, and reads back empty.
    pub fn to_json_without_workloads(&self) -> serde_json::Result<String> {
        struct Reset(bool);
        impl Drop for Reset {
            fn drop(&mut self) {
                WITHOUT_WORKLOADS.with(|c| c.set(self.0));
            }
        }
        let _reset = Reset(WITHOUT_WORKLOADS.with(|c| c.replace(true)));
        serde_json::to_string(self)
    }

    pub fn accrued(&self, cash_key: &str) -> i128 {
        self.cash_accrued
            .get(cash_key)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    pub fn add_accrued(&mut self, cash_key: &str, amount: i128) {
        if amount == 0 {
            return;
        }
        let v = self.accrued(cash_key).saturating_add(amount);
        self.cash_accrued
            .insert(cash_key.to_string(), v.to_string());
    }

    /// Cash keys of `spec` whose budget is spent (`used ≥ hard`): new work
    /// that needs their resource is refused, running work is not stopped.
    pub fn exhausted_cash_keys<'a>(
        &'a self,
        spec: &'a QuotaSpec,
    ) -> impl Iterator<Item = &'a str> + 'a {
        spec.hard
            .iter()
            .filter(|(k, h)| cash_target(k).is_some() && resources::get(&self.used, k) >= **h)
            .map(|(k, _)| k.as_str())
    }

    /// Whether a reader would see `self` differ from `other`: anything but
    /// `lastReconcileTime` (an accrual window that moved without cash spent
    /// is not worth a write; the next window starts where this one did) and
    /// the summaries derived from the rest.
    pub fn differs_visibly(&self, other: &QuotaStatus) -> bool {
        self.hard != other.hard
            || self.used != other.used
            || self.self_used != other.self_used
            || self.children != other.children
            || self.workloads != other.workloads
            || self.cash_accrued != other.cash_accrued
            || self.budgets != other.budgets
            || self.reservations != other.reservations
            || self.loans != other.loans
            || self.loan_generation != other.loan_generation
            || self.loan_fence != other.loan_fence
            || self.lent != other.lent
            || self.borrowed != other.borrowed
            || self.reclaim != other.reclaim
            || self.refunds != other.refunds
            || self.exhausted != other.exhausted
            || self.transfers != other.transfers
            || self.queue != other.queue
            || self.queue_summary != other.queue_summary
            || self.fair_sharing != other.fair_sharing
    }

    /// Everything bound directly here, on all keys (not only those of hard).
    pub fn self_usage(&self) -> ResourceList {
        match self.workloads.sums() {
            Some(sums) => sums.all(),
            None => self.workloads.walk_usage(),
        }
    }

    /// What the bound workloads hold of one key: their kept sum, or, where
    /// they cannot be summed exactly, a walk over them.
    pub fn held(&self, key: &str) -> Quantity {
        match self.workloads.sums() {
            Some(sums) => sums.get(key),
            None => self.workloads.walk(key),
        }
    }

    /// What all children's carve-outs hold here, key by key.
    pub fn allocated(&self) -> ResourceList {
        resources::sum(self.children.values().map(|c| &c.hard))
    }

    /// The carve-out `child` holds here (empty: none).
    pub fn carved(&self, child: &str) -> ResourceList {
        self.children
            .get(child)
            .map(|c| c.hard.clone())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A quota in the CRD's shape, as the JSON API and the cluster exchange it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    #[serde(default = "api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: QuotaSpec,
    #[serde(default)]
    pub status: QuotaStatus,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn kind() -> String {
    KIND.to_string()
}

impl Quota {
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::PodSet;

    fn charge(cards: i64) -> Charge {
        Charge {
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: cards,
                per_pod: [("requests.nvidia.com/gpu".to_string(), "1".parse().unwrap())].into(),
                qos: None,
            }],
            hpa: None,
            since: "2026-11-28T00:00:00.000Z".into(),
            uid: "u".into(),
            admitted: None,
        }
    }

    /// A copy shares its charges; a change through the copy is made on a
    /// copy of that charge only, and the JSON each keeps is of the charge
    /// as it is, never as it was when first written.
    #[test]
    fn a_copy_of_the_charges_changes_apart_and_writes_as_it_is() {
        let mut a: Workloads =
            [("w1".to_string(), charge(1)), ("w2".to_string(), charge(2))].into();
        let first = serde_json::to_string(&a).unwrap();
        let mut b = a.clone();
        b.get_mut("w1").unwrap().pod_sets[0].count = 7;
        for c in b.values_mut() {
            c.uid = "changed".into();
        }
        b.insert("w3".into(), charge(3));
        // `a` as it was, and as it was written.
        assert_eq!(a.get("w1").unwrap().pod_sets[0].count, 1);
        assert_eq!(a.get("w2").unwrap().uid, "u");
        assert_eq!(serde_json::to_string(&a).unwrap(), first);
        // `b` as changed, written as a map of charges would be.
        let plain: BTreeMap<String, Charge> = b.clone().into_iter().collect();
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            serde_json::to_value(&plain).unwrap()
        );
        let back: Workloads = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        assert_ne!(a, b);
        // A change made in place after a write shows in the next one.
        a.get_mut("w2").unwrap().pod_sets[0].count = 9;
        assert!(serde_json::to_string(&a).unwrap().contains("\"count\":9"));
        assert_eq!(a.remove("w2").unwrap().pod_sets[0].count, 9);
        assert_eq!(b["w2"].pod_sets[0].count, 2);
    }

    /// The changes a store keeping charges apart writes: what is new or
    /// changed (a copied charge changed back to what it was is not), and
    /// what is gone, on both sides of every other reference.
    #[test]
    fn the_changes_between_two_copies_are_what_differs() {
        let base: Workloads = ["a", "b", "c", "d", "f"]
            .map(|w| (w.to_string(), charge(1)))
            .into();
        let mut next = base.clone();
        assert!(next.changes_since(&base).unwrap().is_empty());
        next.remove("a");
        next.get_mut("b").unwrap().pod_sets[0].count = 2;
        next.get_mut("c").unwrap().pod_sets[0].count = 1;
        next.remove("d");
        next.insert("e".into(), charge(3));
        next.remove("f");
        next.insert("g".into(), charge(4));
        let changes = next.changes_since(&base).unwrap();
        let written: Vec<_> = changes
            .written
            .iter()
            .map(|(k, j)| (*k, serde_json::from_str::<Charge>(j.get()).unwrap()))
            .collect();
        assert_eq!(
            written,
            vec![("b", next["b"].clone()), ("e", charge(3)), ("g", charge(4))]
        );
        assert_eq!(changes.removed, vec!["a", "d", "f"]);
        assert_eq!(
            Workloads::new().changes_since(&base).unwrap().removed,
            vec!["a", "b", "c", "d", "f"]
        );
        assert_eq!(
            base.changes_since(&Workloads::new()).unwrap().written.len(),
            5
        );
    }

    /// A status without its charges reads back with none, and the charges
    /// read back from their JSON write again as they were read.
    #[test]
    fn a_status_writes_without_its_charges_and_they_read_back_apart() {
        let mut status = QuotaStatus {
            workloads: [("w1".to_string(), charge(2))].into(),
            ..Default::default()
        };
        status.used = [("requests.nvidia.com/gpu".to_string(), "2".parse().unwrap())].into();
        let bare = status.to_json_without_workloads().unwrap();
        assert!(!bare.contains("workloads"), "{bare}");
        assert!(serde_json::to_string(&status)
            .unwrap()
            .contains("workloads"));
        let mut back: QuotaStatus = serde_json::from_str(&bare).unwrap();
        assert!(back.workloads.is_empty());
        assert_eq!(back.used, status.used);
        let json = serde_json::to_string(&status.workloads["w1"]).unwrap();
        back.workloads
            .insert_json("w1".into(), json.clone(), None)
            .unwrap();
        assert_eq!(back.workloads, status.workloads);
        assert_eq!(
            back.workloads
                .changes_since(&Workloads::new())
                .unwrap()
                .written[0]
                .1
                .get(),
            json
        );
        assert!(back
            .workloads
            .insert_json("w2".into(), "{".into(), None)
            .is_err());
        // Read again beside a copy that has w1 with that very JSON: shared,
        // not parsed; another JSON for it is parsed.
        let mut again = Workloads::new();
        again
            .insert_json("w1".into(), json.clone(), Some(&back.workloads))
            .unwrap();
        assert!(Arc::ptr_eq(
            &again.charges["w1"],
            &back.workloads.charges["w1"]
        ));
        let mut other = Workloads::new();
        let json3 = serde_json::to_string(&charge(3)).unwrap();
        other
            .insert_json("w1".into(), json3, Some(&back.workloads))
            .unwrap();
        assert!(!Arc::ptr_eq(
            &other.charges["w1"],
            &back.workloads.charges["w1"]
        ));
        assert_eq!(other["w1"], charge(3));
    }
}
