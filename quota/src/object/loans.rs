//! A child's loan as its lender's `status.loans` records it (§5; the
//! rules that grant, return and repair loans are `crate::borrow`'s).

use crate::resources::ResourceList;
use serde::{Deserialize, Serialize};

/// A child's loan, as recorded in its parent's `status.loans`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Loan {
    /// What the child may use beyond its hard, per key.
    pub amount: ResourceList,
    /// When first granted (RFC 3339).
    pub since: String,
    /// When last raised or renewed (RFC 3339); `since` when empty. Repair
    /// leaves a loan this recent alone: its charge may be in flight.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub raised: String,
    /// The parent's `loanGeneration` when this loan was last granted
    /// (`lend`); 0 in loans stored before generations were kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
