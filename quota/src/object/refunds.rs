//! A refund as a quota's `status.refunds` records it (docs/budgets.md §4;
//! what is refunded and when is `crate::budget::enforce`'s).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A refund as `status.refunds` keeps it, by workload reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refunded {
    /// The reclaim mark it refunds (the mark's `marked` time, RFC 3339):
    /// one refund per mark.
    pub mark: String,
    /// When it was refunded (RFC 3339).
    pub at: String,
    /// The refunded stretch of the run, RFC 3339.
    pub from: String,
    pub to: String,
    /// Per cash key, the amount given back, in acc (a positive decimal
    /// string; the ledger entries are its negatives).
    pub amounts: BTreeMap<String, String>,
}
