//! A workload marked for reclaim or preemption, as its quota's
//! `status.reclaim` records it: what will be done to it, when, and who
//! marked it (the rules that mark are `crate::reclaim`'s and
//! `crate::queue::preempt`'s).

use crate::resources::ResourceList;
use serde::{Deserialize, Serialize};

/// What reclaim does to a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// Set the replicas (a Job's parallelism) of its single pod set.
    ScaleTo(i64),
    /// Suspend it (`spec.suspend: true`); everything it runs is freed.
    Suspend,
}

impl Action {
    /// Whether it stops the workload altogether.
    pub fn stops(&self) -> bool {
        matches!(self, Action::Suspend | Action::ScaleTo(0))
    }
}

/// Who marked a workload: the parent's reclaim of borrowed capacity, or
/// the quota's own queue preempting lower-priority work
/// (docs/queueing.md §6). Each side reconciles only its own marks, so
/// neither clears the other's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// Reclaim of a loan by the parent (`plan`); what a mark without an
    /// `origin` field is, so statuses written before it read the same.
    #[default]
    Borrow,
    /// Preemption by a higher-priority entry of the quota's queue
    /// (`queue::preempt`).
    Preempt,
    /// Batch work whose GPUs sat idle past its quota's `idle.after`, under
    /// `idle.action: Suspend` (docs/real-usage.md); cleared if it gets busy
    /// within the grace.
    Idle,
}

impl Origin {
    pub fn is_borrow(&self) -> bool {
        *self == Origin::Borrow
    }
}

/// A workload marked for reclaim, in its quota's `status.reclaim`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mark {
    pub action: Action,
    /// What the action frees, as planned.
    pub frees: ResourceList,
    /// When the owners were first warned (RFC 3339).
    pub marked: String,
    /// When it will be reclaimed if still needed (RFC 3339).
    pub due: String,
    /// Who marked it; left out for `borrow`.
    #[serde(default, skip_serializing_if = "Origin::is_borrow")]
    pub origin: Origin,
}
