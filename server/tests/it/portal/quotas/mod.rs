//! The quota pages and forms, and a large tree.
//!
//! Its tests: `forms` (the pages' forms), `usage` (the figures, the charts,
//! the large tree).

mod forms;
mod usage;

use super::*;
