//! What a pass decides: the plan the state applies (`Cluster::apply`) and
//! the invariants read. Plain types, below the state and the pass.

use crate::ids::{JobId, ShareIdx, TypeIdx};
use crate::nodes::Ranks;
use crate::outcome::PreemptionKind;
use crate::reason::WaitReason;
use crate::time::Time;

/// A job to start now, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub job: JobId,
    pub share: ShareIdx,
    pub instance_type: TypeIdx,
    pub count: u32,
    /// Its instances if it is on borrowed capacity (it does not fit within
    /// its share's entitlement in (priority desc, start asc) order), else 0.
    pub borrowed: u32,
    /// Its nodes and slots, one rank per node (see `nodes.rs` for the
    /// placement policy).
    pub placement: Ranks,
}

/// A running job to stop so that `for_job` can start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preemption {
    pub job: JobId,
    pub kind: PreemptionKind,
    pub for_job: JobId,
}

/// What one pass decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub now: Time,
    /// Jobs to start: those within their share's entitlement at that moment
    /// first, then those that borrow, each in decision order.
    pub starts: Vec<Start>,
    pub preemptions: Vec<Preemption>,
    /// Jobs whose `attemptDurationSeconds` ran out: stop them (TIMED_OUT).
    pub timeouts: Vec<JobId>,
    /// Preempted jobs whose checkpoint-first window ended without a
    /// checkpoint: stop them now.
    pub checkpoint_deadlines: Vec<JobId>,
    /// Resume drills' subjects due to be stopped (`policy::drills`).
    pub drill_stops: Vec<JobId>,
    /// Jobs on borrowed capacity of shares whose borrowing budget is spent
    /// (`onBudgetExhausted: CHECKPOINT_AND_STOP`): checkpoint, stop, requeue.
    pub budget_stops: Vec<JobId>,
    /// Why each job the pass examined and did not start is waiting.
    pub reasons: Vec<(JobId, WaitReason)>,
    /// Admitted in the projection but waiting for preempted jobs to stop.
    pub waiting_for_release: Vec<JobId>,
    /// The next time a pass would decide differently with no other event
    /// (a protection or cool-down expiring, a timeout), if any.
    pub wake_at: Option<Time>,
    /// Types for which this pass decided nothing: until something about them
    /// changes, or `wake_at`, later passes skip them.
    pub settled: Vec<TypeIdx>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
            && self.preemptions.is_empty()
            && self.timeouts.is_empty()
            && self.checkpoint_deadlines.is_empty()
            && self.drill_stops.is_empty()
            && self.budget_stops.is_empty()
    }
}
