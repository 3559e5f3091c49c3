//! The runtime rule during a pass (`crate::policy::runtimes` states it): a job
//! starts only where its runtime is offered.
//!
//! Hooks: [`RuntimeRule::gate`] (before a job is tried at all),
//! [`RuntimeRule::promise`] (when it is admitted or taken back).
//!
//! Decides: whether a job may be tried at all for want of nodes offering
//! its runtime. A *restricted* job (only some live nodes of its type offer
//! its runtime) is tried only while those nodes have enough instances free
//! now; then it is fitted like any job, reclaim included: its victims are
//! only ever needed for the quota arithmetic (which counts a type's
//! instances as interchangeable), never for room on a node. It never waits
//! for, nor preempts to free, the instances of a particular node.
//!
//! Guarantees afterwards: two restricted jobs of a pass are never promised
//! the same free instances (what is promised is counted until the job is
//! taken back), so every restricted job admitted can be placed unless a job
//! that may run anywhere was placed there first (it then waits one pass).

use std::collections::BTreeMap;

use crate::cluster::Cluster;
use crate::ids::TypeIdx;
use crate::job::Job;
use crate::policy::runtimes::Runtime;
use crate::reason::WaitReason;

/// What the live nodes of a type offer in one runtime.
#[derive(Clone, Copy, Debug)]
struct RuntimeOffer {
    /// Instances offered by live nodes that offer the runtime.
    offered: u32,
    /// Of those, free now (jobs being stopped still hold theirs).
    free: u32,
    /// Every live node of the type offers the runtime.
    everywhere: bool,
}

/// The runtime rule of one pass: what live nodes offer per (type,
/// runtime), computed once a pass, and the free instances promised to
/// restricted admitted jobs.
#[derive(Debug, Default)]
pub struct RuntimeRule {
    offers: BTreeMap<(TypeIdx, Runtime), RuntimeOffer>,
    promised: BTreeMap<(TypeIdx, Runtime), u32>,
}

impl RuntimeRule {
    fn offer(&mut self, c: &Cluster, t: TypeIdx, runtime: Runtime) -> RuntimeOffer {
        if let Some(o) = self.offers.get(&(t, runtime)) {
            return *o;
        }
        let mut offer = RuntimeOffer {
            offered: 0,
            free: 0,
            everywhere: true,
        };
        for n in &c.nodes_of_type[t.index()] {
            let node = &c.nodes[n.index()];
            if !node.live || node.offered(t) == 0 {
                continue;
            }
            if node.runtimes.contains(runtime) {
                offer.offered += node.offered(t);
                offer.free += node.free_count(t);
            } else {
                offer.everywhere = false;
            }
        }
        self.offers.insert((t, runtime), offer);
        offer
    }

    /// Whether `job` may be tried in this pass (`fleet`: the instances of
    /// its type the pass sees): `Ok(true)` when it is restricted (and its
    /// nodes have room now), `Ok(false)` when it may use any instance of its
    /// type; the reason it cannot start otherwise.
    pub fn gate(&mut self, c: &Cluster, fleet: u32, job: &Job) -> Result<bool, WaitReason> {
        let (t, runtime, count) = (job.spec.instance_type, job.spec.runtime, job.spec.count);
        if fleet == 0 {
            return Ok(false); // FLEET_LACKS_TYPE says more
        }
        let offer = self.offer(c, t, runtime);
        if offer.offered < count {
            return Err(WaitReason::NoExecutorOffersRuntime {
                runtime,
                offered: offer.offered,
            });
        }
        if offer.everywhere {
            return Ok(false);
        }
        let promised = self.promised.get(&(t, runtime)).copied().unwrap_or(0);
        let free = offer.free.saturating_sub(promised);
        if free < count {
            return Err(WaitReason::RuntimeInstancesBusy { runtime, free });
        }
        Ok(true)
    }

    /// Counts (or, taken back, uncounts) what a restricted job was promised.
    pub fn promise(&mut self, c: &Cluster, job: &Job, taken_back: bool) {
        let (t, runtime, count) = (job.spec.instance_type, job.spec.runtime, job.spec.count);
        if self.offer(c, t, runtime).everywhere {
            return;
        }
        let promised = self.promised.entry((t, runtime)).or_default();
        *promised = if taken_back {
            promised.saturating_sub(count)
        } else {
            *promised + count
        };
    }
}

/// Whether a failure is the runtime rule's (it says nothing about jobs of
/// other runtimes, so it must not end a sweep for larger counts).
pub fn is_runtime_reason(reason: &WaitReason) -> bool {
    matches!(
        reason,
        WaitReason::NoExecutorOffersRuntime { .. } | WaitReason::RuntimeInstancesBusy { .. }
    )
}
