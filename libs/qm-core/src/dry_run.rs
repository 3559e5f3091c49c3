//! Dry runs of configuration changes: what a change would do to running and
//! waiting work, computed on a copy of the cluster.

use crate::ids::JobId;
use crate::pass::Plan;
use crate::reason::NeverFits;
use crate::time::Time;

/// What applying a queue configuration would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DryRun {
    /// Running jobs that would be on borrowed capacity (preemptible by reclaim)
    /// and are not now.
    pub become_preemptible: Vec<JobId>,
    /// Running jobs that are preemptible now and would no longer be.
    pub become_protected: Vec<JobId>,
    /// RUNNABLE jobs that could never run under the new configuration.
    pub become_unfittable: Vec<(JobId, NeverFits)>,
    /// Jobs that deleting shares would stop or fail.
    pub terminated: Vec<JobId>,
    /// Unfinished jobs the change moves to another workload class (theirs
    /// is removed) or to another priority (their band no longer holds
    /// theirs): (job, class, priority) after the change.
    pub reclassified: Vec<(JobId, Option<String>, u32)>,
    /// The pass that would follow the change at `now`.
    pub next_pass: Plan,
}

/// A running job a placement would stop, and what it would lose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    pub job: JobId,
    pub kind: crate::job::PreemptionKind,
    /// Milliseconds of its work (per instance) since its last committed
    /// checkpoint, or since it began running: what it would recompute.
    pub work_at_risk_ms: u64,
}

/// What the next pass would do for one job: the core's own pass on a copy
/// of the cluster, never a second implementation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutlook {
    /// It starts at once: `borrowed` of its instances on capacity other
    /// shares lend (the others its share's own), `lenders` the shares with
    /// idle capacity of its type they lend from.
    Starts {
        borrowed: u32,
        own: u32,
        lenders: Vec<crate::ids::ShareIdx>,
    },
    /// It starts once these jobs have stopped, preempted for it.
    Preempts { victims: Vec<Victim> },
    /// It waits: why, the RUNNABLE jobs of its share and type ahead of it
    /// in line (first few), how many are ahead in all, and when it is
    /// expected to start ([`Cluster::projected_start`]).
    Waits {
        reason: crate::reason::WaitReason,
        ahead: Vec<JobId>,
        position: usize,
        estimate: StartEstimate,
    },
    /// It is not RUNNABLE (running, finished): nothing to foresee.
    NotWaiting(crate::job::JobStatus),
}

/// How many jobs ahead in line a [`JobOutlook::Waits`] names at most.
pub const AHEAD_SHOWN: usize = 5;

/// When a waiting job is expected to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartEstimate {
    /// The next pass places it.
    Now,
    /// Once the running jobs ahead of it end when they are expected to
    /// (their `estimatedRuntimeSeconds`, else their attempt timeout).
    At(Time),
    /// It cannot be foreseen: `without_estimate` running jobs that declare
    /// no expected run hold what it needs (their ends are unknown), or more
    /// than [`PROJECTION_ENDS`] jobs end first (`beyond`: the time reached).
    Unknown {
        without_estimate: u32,
        beyond: Option<Time>,
    },
}
