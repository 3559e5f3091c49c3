//! Dense identifiers. Names live at the edges; inside the core everything is
//! an ordinal, so per-share and per-type state are plain vectors.

use std::fmt;

/// A job's identity, unique within a cluster and ordered by submission. Job id
/// is the last tie-breaker of every ordering, which keeps passes deterministic.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job-{}", self.0)
    }
}

/// Index of a quota share in its queue (stable: deleted shares leave a tombstone).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ShareIdx(pub u16);

impl ShareIdx {
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Index of an instance type in the cluster's type table.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TypeIdx(pub u16);

impl TypeIdx {
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}
