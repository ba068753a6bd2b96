//! The quota crate's integration tests, one binary: each module checks one
//! part of the engine from its public API. Proptest keeps the failures it
//! found (and replays them first) in `quota/tests/proptest-regressions/`,
//! one file per module (`queue.rs` → `queue.txt`): with a `main.rs` here,
//! that is where its default persistence looks.

mod batch;
mod borrowing;
mod budgets;
mod fair;
mod hold;
mod ledger;
mod patch;
mod prices;
mod properties;
mod queue;
mod real_usage;
mod refunds;
mod reservations;
mod submitters;
mod topups;
mod transfers;
mod updates;
mod usage_never_lowered;
