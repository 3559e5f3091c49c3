//! The invariants every pass must keep (contract section 4), in one place:
//! debug builds assert them after each `Cluster::step` on small clusters, the
//! property tests check them after every pass over random inputs, and the
//! simulator checks them when asked (`qm simulate --check`).

//!
//! The state's own consistency (nodes, indexes) is in `state.rs`; what a
//! plan must satisfy in `plan.rs`.

use std::fmt;

mod plan;
mod state;

pub use plan::check_plan;
pub use state::{check_indexes, check_nodes};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {:?} broken: {}", self.invariant, self.detail)
    }
}

pub(crate) fn violation(invariant: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}
