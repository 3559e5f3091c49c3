//! What a policy's hooks may read of a pass: the cluster, the moment, and
//! the pass's projection (jobs being stopped count as gone, jobs it admits
//! as running). The pass implements [`Projection`]; hooks are generic over
//! it, so they are called without indirection and never import the pass.

use crate::cluster::Cluster;
use crate::ids::{ShareIdx, TypeIdx};
use crate::index::RunKey;
use crate::job::Job;
use crate::time::Time;

/// A pass's projection, read-only.
pub trait Projection {
    /// The state the pass plans over.
    fn cluster(&self) -> &Cluster;
    /// The moment of the pass.
    fn now(&self) -> Time;
    /// Instances share `s` holds of type `t` in the projection.
    fn used(&self, s: ShareIdx, t: TypeIdx) -> u32;
    /// Share `s`'s entitlement of type `t` (0 if it names none).
    fn entitlement(&self, s: ShareIdx, t: TypeIdx) -> u32;
    /// Whether share `s` lends its idle capacity.
    fn lends(&self, s: ShareIdx) -> bool;
    /// Share `s`'s jobs holding type `t` in the projection, in the
    /// borrowed classification's order.
    fn running(&self, s: ShareIdx, t: TypeIdx) -> Vec<RunKey>;

    /// A job of the cluster.
    fn job(&self, id: crate::ids::JobId) -> &Job {
        &self.cluster().jobs[&id]
    }
}
