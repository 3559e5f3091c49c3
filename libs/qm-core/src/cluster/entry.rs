//! The pass's entry points on the state: `schedule`, `step` (a pass, its
//! invariants checked in debug builds, applied) and `explain`. They sit
//! above the pass and the invariants (`tests/layers.rs`), though they are
//! methods of `Cluster`.

use crate::ids::JobId;
use crate::plan::Plan;
use crate::reason::WaitReason;
use crate::time::Time;

use super::Cluster;

/// Largest cluster (in jobs) on which debug builds check every `step`.
const DEBUG_CHECK_MAX_JOBS: usize = 2_000;

impl Cluster {
    /// Runs a scheduling pass at `now` without changing anything.
    pub fn schedule(&self, now: Time) -> Plan {
        crate::pass::schedule(self, now)
    }

    /// Runs a pass and applies it; returns the plan. Debug builds check the
    /// contract's invariants on small clusters (the check copies the state).
    pub fn step(&mut self, now: Time) -> Plan {
        let plan = crate::pass::schedule(self, now);
        if cfg!(debug_assertions) && self.jobs.len() <= DEBUG_CHECK_MAX_JOBS {
            if let Err(violation) = crate::invariants::check_plan(self, &plan) {
                panic!("{violation}");
            }
        }
        self.apply(&plan);
        plan
    }

    /// Why a job waits, computed now. For a job the last pass examined this is
    /// its recorded reason; otherwise the fit check is run for it alone.
    pub fn explain(&self, id: JobId, now: Time) -> Option<WaitReason> {
        let job = self.jobs.get(&id)?;
        if job.status != crate::job::JobStatus::Runnable {
            return None;
        }
        if let Some(wait) = job
            .status_reason
            .wait()
            .filter(|w| *w != WaitReason::Queued)
        {
            return Some(wait);
        }
        Some(crate::pass::explain(self, id, now))
    }
}
