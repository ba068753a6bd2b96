//! A transfer in flight as a parent's `status.transfers` records it: the
//! children's carve-outs it holds and, at the common ancestor, its
//! decision (§6; the rules are `crate::transfer`'s).

use crate::resources::ResourceList;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A transfer's decision, taken once at the LCA and recorded in its hold
/// there, so every executor of the transfer follows the same one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum Decision {
    Committed,
    Aborted { reason: String },
}

/// A transfer in flight, as recorded in a parent's `status.transfers`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// The held children → their hard on the moved keys once the transfer
    /// is done (what the transfer's own writes may set them to).
    #[serde(default)]
    pub children: BTreeMap<String, ResourceList>,
    pub since: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}
