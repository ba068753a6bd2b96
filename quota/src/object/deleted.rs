//! Workloads whose DELETE a review released while the controller's watch
//! may still show them running (`status.deleted`, docs/queueing.md §6,
//! "The room a DELETE frees"): the rules that read and keep them are
//! `reconcile::note_deleted` and `reconcile::forget_deleted`.

use serde::{Deserialize, Serialize};

/// One released DELETE, by workload reference in `status.deleted`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    /// The uid of the object the DELETE removed.
    pub uid: String,
    /// When its charge was released (RFC 3339).
    pub at: String,
}
