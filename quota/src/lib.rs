//! bizrq's quota engine: the pure part of the product. No I/O, no async, no
//! clock — time and state come in as arguments, decisions go out as values.
//! The server and the portal's server-rendered pages use it; the browser's
//! bundle (`islands`) does not depend on it.

pub mod admission;
pub mod batch;
pub mod borrow;
pub mod budget;
pub mod cash;
pub mod fair;
pub mod forecast;
pub mod hold;
pub mod keys;
pub mod lineage;
pub mod namespaces;
pub mod object;
pub mod patch;
pub mod pods;
pub mod quantity;
pub mod queue;
pub mod readable;
pub mod real_usage;
pub mod reclaim;
pub mod reconcile;
pub mod repair;
pub mod resources;
pub mod review;
pub mod rollup;
pub mod series;
pub mod strip;
pub mod submitters;
pub mod summary;
pub mod text;
pub mod time;
pub mod transfer;
pub mod tree;
pub mod update;
pub mod usage;
pub mod workload;

pub use admission::{Borrowing, Denial, Shortfall};
pub use borrow::{LoanRequest, Standing};
pub use keys::KeyConfig;
pub use namespaces::Namespaces;
pub use object::loans::Loan;
pub use object::marks::{Action, Mark};
pub use object::{Charge, Quota, QuotaSpec, QuotaStatus};
pub use quantity::Quantity;
pub use reclaim::Victim;
pub use resources::ResourceList;
pub use tree::TreeError;
pub use workload::{Adapter, Workload};

/// What the tests of several modules share.
#[cfg(test)]
pub(crate) mod test_util {
    /// A parse error of text says where it is (`at line 1 column 9`); one
    /// of a parsed value cannot. Otherwise the two must say the same.
    pub fn positionless(debug: String) -> String {
        match debug.find(" at line ") {
            Some(i) => {
                let end = debug[i..].find('"').map_or(debug.len(), |j| i + j);
                format!("{}{}", &debug[..i], &debug[end..])
            }
            None => debug,
        }
    }
}
