//! What a person looking at the queue asks, answered from the core's own
//! passes on a copy of the cluster (never a second implementation):
//!
//! - when will my waiting job start? ([`Cluster::projected_start`]: the
//!   passes replayed forward, every running job ending when it is expected
//!   to, until the job is placed);
//! - what would unblock it? ([`WaitReason::unblock`]);
//! - which of my borrowed jobs would a lender's submit stop, and what would
//!   each lose? ([`Cluster::reclaim_exposure`]).

use crate::dry_run::Victim;
use crate::ids::{ShareIdx, TypeIdx};
use crate::reason::WaitReason;

/// How many expected job ends [`Cluster::projected_start`] replays at most
/// before it says the start is further out than it looks.
pub const PROJECTION_ENDS: usize = 512;

pub use crate::dry_run::StartEstimate;

/// One lender's reclaim of one type, foreseen for a borrowing share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exposure {
    pub lender: ShareIdx,
    pub instance_type: TypeIdx,
    /// Instances of the type the lender lends now.
    pub lent: u32,
    /// The borrowing share's jobs its submit would stop, with the work
    /// each would compute again.
    pub victims: Vec<Victim>,
    /// Its submit would wait instead (the borrowed jobs are protected, the
    /// lender could not reclaim now): why.
    pub waits: Option<WaitReason>,
}
