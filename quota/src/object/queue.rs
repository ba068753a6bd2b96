//! A quota's queue as its status records it (docs/queueing.md §2, §12):
//! each waiting workload (`Queued`) with its place and why it waits
//! (`QueueEntry`, in `status.queue`), and the whole queue in a few numbers
//! (`Summary`, `status.queueSummary`). The rules that fill them are
//! `crate::queue`'s.

use crate::resources::{self, ResourceList};
use crate::workload::{PodSet, WorkloadRef};
use serde::{Deserialize, Serialize};

/// One workload waiting in its quota's queue: what admission needs to
/// decide without reading the object again. Stored in `status.queue`
/// (inside a `QueueEntry`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Queued {
    /// `group/Kind/namespace/name`, as in `status.workloads`.
    pub workload_ref: String,
    /// The object's uid: a workload deleted and created again under the
    /// same name is a new entry, not this one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// PriorityClass value of its pods (`priority::Classes::resolve`; 0
    /// without one), never a number written in its template.
    #[serde(default)]
    pub priority: i32,
    /// The PriorityClasses its pod templates name (empty: none, so the
    /// global default applies): the controller resolves them again from
    /// its watch every round, so a class created or changed later counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_classes: Vec<String>,
    /// When it joined the queue (RFC 3339 `since`): first come, first served.
    #[serde(rename = "since", with = "crate::time::serde_stamp")]
    pub submitted_ms: i64,
    /// What it runs once admitted, as the adapter read it unsuspended.
    /// Shared, never copied: a round folds, orders, plans and restates
    /// every entry of its queue, and the pod sets (names and resource
    /// maps) were most of what each copy of an entry cost.
    /// Its usage over all pod sets is computed once, with them
    /// (`PodSets::usage`): every round asks it of every entry, several
    /// times (a profile of the Kueue bench's last 30 s: 7 % of all CPU).
    pub pod_sets: PodSets,
    /// Its declared maximum run time (`workload::runtime::max_runtime`), for
    /// budget reservations and start estimates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_ms: Option<i64>,
    /// Who created it, as the API server authenticated them (the
    /// AdmissionReview's `userInfo.username` at the mutating webhook), at
    /// most `MAX_SUBMITTER` bytes: shown to people, and with the
    /// reference's namespace it says whose share of the queue the entry
    /// takes (`allowance::of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    /// Queued again by its quota's preemption (docs/queueing.md §6). The
    /// entry is written before the suspend, in the write that spends the
    /// mark: while its workload still holds a charge of running pods, no
    /// round admits it and the controller suspends it (the repair of a
    /// crash between the two writes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preempted: bool,
}

impl Queued {
    /// The kind, from the reference (`Job`, `PyTorchJob`).
    pub fn kind(&self) -> &str {
        WorkloadRef::parse(&self.workload_ref).map_or("", |r| r.kind)
    }

    /// What it would be charged, over all its pod sets.
    pub fn usage(&self) -> &ResourceList {
        self.pod_sets.usage()
    }
}

/// A queued workload's pod sets, shared between every copy of its entry
/// (a round folds, orders, plans and restates every entry of its queue,
/// and the pod sets' names and resource maps were most of what each copy
/// cost), with what they charge together, computed the first time it is
/// asked and then shared too (a status read on the admission path asks
/// none). Read as the slice they are; written and read in the status as
/// the plain list (serde's `rc` feature is not asked for: it would
/// rebuild every crate that uses serde).
#[derive(Clone, Debug)]
pub struct PodSets(std::sync::Arc<(Box<[PodSet]>, std::sync::OnceLock<ResourceList>)>);

impl PodSets {
    pub fn new(sets: Vec<PodSet>) -> PodSets {
        PodSets(std::sync::Arc::new((
            sets.into_boxed_slice(),
            std::sync::OnceLock::new(),
        )))
    }

    /// The very same sets (one shared value), not merely equal ones.
    pub fn same(&self, other: &PodSets) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }

    /// What they charge together: each set's per-pod amounts times its
    /// count, summed.
    pub fn usage(&self) -> &ResourceList {
        self.0 .1.get_or_init(|| {
            let mut usage = ResourceList::new();
            for s in self.iter() {
                resources::add_into(&mut usage, &s.usage(s.count));
            }
            usage
        })
    }
}

impl From<Vec<PodSet>> for PodSets {
    fn from(sets: Vec<PodSet>) -> PodSets {
        PodSets::new(sets)
    }
}

impl std::ops::Deref for PodSets {
    type Target = [PodSet];
    fn deref(&self) -> &[PodSet] {
        &self.0 .0
    }
}

/// Equal when the sets are (the usage follows from them).
impl PartialEq for PodSets {
    fn eq(&self, other: &PodSets) -> bool {
        self.same(other) || self.0 .0 == other.0 .0
    }
}

impl Eq for PodSets {}

impl Serialize for PodSets {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0 .0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for PodSets {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PodSets, D::Error> {
        Vec::<PodSet>::deserialize(d).map(PodSets::new)
    }
}

/// One entry of `status.queue`: the queued work, its place and why it
/// waits. `since` is when it joined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEntry {
    #[serde(flatten)]
    pub work: Queued,
    pub position: u32,
    pub waiting: Waiting,
    pub reason: String,
    /// When it would start if nothing else arrived (`estimate`), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<String>,
}

/// What an entry waits for, in one word: for metrics labels and filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Waiting {
    /// Quota (hard, or max when borrowing) is short.
    Quota,
    /// A card-hour budget is short.
    Budget,
    /// It would fit, but an entry ahead of it blocks (strict FIFO, or an
    /// aged head under best-effort).
    Turn,
    /// It cannot be admitted by waiting: larger than the quota could ever
    /// hold, or refused by a rule that capacity does not change. It blocks
    /// no one; the server should tell its owner.
    Never,
}

/// `status.queueSummary`: the whole queue in a few numbers, as the round
/// that wrote it saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Entries waiting in all (those listed in `status.queue` included).
    pub total: u32,
    /// Of them, waiting for quota, for a budget, for their turn, and
    /// those that can never be admitted.
    #[serde(default)]
    pub for_quota: u32,
    #[serde(default)]
    pub for_budget: u32,
    #[serde(default)]
    pub for_turn: u32,
    #[serde(default)]
    pub never: u32,
    /// The head's `group/Kind/namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The oldest entry (earliest `since`) and its `since` (RFC 3339):
    /// the alert on waiting too long reads it when it is not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_since: Option<String>,
    /// Of `total`, the held objects that wait by a queue mark no replica
    /// folds (marks turned off while they waited beyond the listed top):
    /// never admitted until marks are on again (`stranded`). Written only
    /// by a controller without mark keys; 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfolded: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quantity;

    fn set(name: &str, count: i64, cpu: i64) -> PodSet {
        PodSet {
            name: name.into(),
            count,
            per_pod: [("requests.cpu".to_string(), Quantity::from_units(cpu))].into(),
            qos: None,
        }
    }

    /// What the pod sets charge together is each set's per-pod amounts
    /// times its count, summed; copies share the sets and that sum; the
    /// status holds the plain list.
    #[test]
    fn pod_sets_charge_their_sum_and_are_shared_by_copies() {
        let sets = PodSets::new(vec![set("a", 2, 3), set("b", 4, 1)]);
        assert_eq!(sets.usage()["requests.cpu"], Quantity::from_units(10));
        let copy = sets.clone();
        assert!(copy.same(&sets));
        assert!(std::ptr::eq(copy.usage(), sets.usage()), "computed once");
        let equal = PodSets::new(vec![set("a", 2, 3), set("b", 4, 1)]);
        assert!(!equal.same(&sets) && equal == sets);
        assert_ne!(PodSets::new(vec![set("a", 2, 3)]), sets);
        let json = serde_json::to_value(&sets).unwrap();
        assert!(
            json.is_array() && json.as_array().unwrap().len() == 2,
            "{json}"
        );
        let back: PodSets = serde_json::from_value(json).unwrap();
        assert_eq!(back, sets);
        assert_eq!(back.usage(), sets.usage());
        assert!(PodSets::new(Vec::new()).usage().is_empty());
    }
}
