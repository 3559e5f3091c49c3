//! The lost-work ledger's totals. Every attempt that ends preempted or with
//! its host lost throws away the work since its last committed checkpoint
//! (see [`crate::job::Job::lost_work_ms`]); the cluster adds it up per
//! share, by cause, and per beneficiary share (the work other jobs lost so
//! that this share's jobs could run). The totals are part of the state:
//! replayed from the log like everything else, kept in snapshots, and
//! they outlive the jobs they came from (finished jobs leave memory).

use serde::{Deserialize, Serialize};

use crate::outcome::AttemptOutcome;

/// Attempts that threw work away, and how much.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostWork {
    pub attempts: u64,
    /// Work to compute again, in instance-milliseconds: each attempt's
    /// lost time times its instance count.
    pub recomputed_instance_ms: u64,
}

impl LostWork {
    pub(crate) fn add(&mut self, per_instance_ms: u64, instances: u32) {
        self.attempts += 1;
        self.recomputed_instance_ms = self
            .recomputed_instance_ms
            .saturating_add(per_instance_ms.saturating_mul(u64::from(instances)));
    }

    pub fn is_empty(&self) -> bool {
        self.attempts == 0
    }
}

/// One share's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareLedger {
    /// This share's jobs, stopped for another share's (reclaims and borrowing).
    pub preempted_cross_share: LostWork,
    /// This share's jobs, stopped for a more urgent job of the share.
    pub preempted_in_share: LostWork,
    /// This share's jobs, stopped because a limit went down.
    pub preempted_limit_reduced: LostWork,
    /// This share's jobs, whose executor was lost.
    pub host_lost: LostWork,
    /// This share's jobs, stopped because its borrowing budget was spent.
    #[serde(default, skip_serializing_if = "LostWork::is_empty")]
    pub preempted_budget: LostWork,
    /// This share's jobs, stopped by FAIR_SHARE rebalancing.
    #[serde(default, skip_serializing_if = "LostWork::is_empty")]
    pub preempted_rebalance: LostWork,
    /// Other jobs (of any share), stopped for this share's jobs.
    pub lost_for_this_share: LostWork,
    /// Checkpoint bytes this share's attempts restored (what resuming
    /// moved, every rank counted).
    #[serde(default)]
    pub restored_bytes: u64,
}

impl ShareLedger {
    /// Each cause an attempt loses work for, with its totals, in a fixed
    /// order.
    pub fn causes(&self) -> [(AttemptOutcome, LostWork); 6] {
        [
            (
                AttemptOutcome::PreemptedCrossShare,
                self.preempted_cross_share,
            ),
            (AttemptOutcome::PreemptedInShare, self.preempted_in_share),
            (
                AttemptOutcome::PreemptedLimitReduced,
                self.preempted_limit_reduced,
            ),
            (AttemptOutcome::PreemptedBudget, self.preempted_budget),
            (AttemptOutcome::PreemptedRebalance, self.preempted_rebalance),
            (AttemptOutcome::HostLost, self.host_lost),
        ]
    }

    /// The causes this share's jobs lost work to (those with nothing lost
    /// left out): what `qm snapshot` and the simulator's report list.
    pub fn lost_by_cause(&self) -> impl Iterator<Item = (AttemptOutcome, LostWork)> {
        self.causes().into_iter().filter(|(_, w)| !w.is_empty())
    }

    /// Nothing lost, nothing lost for it, nothing restored: not listed.
    pub fn is_empty(&self) -> bool {
        self.lost_by_cause().next().is_none()
            && self.lost_for_this_share.is_empty()
            && self.restored_bytes == 0
    }

    pub(crate) fn cause_mut(&mut self, cause: AttemptOutcome) -> Option<&mut LostWork> {
        match cause {
            AttemptOutcome::PreemptedCrossShare => Some(&mut self.preempted_cross_share),
            AttemptOutcome::PreemptedInShare => Some(&mut self.preempted_in_share),
            AttemptOutcome::PreemptedLimitReduced => Some(&mut self.preempted_limit_reduced),
            AttemptOutcome::PreemptedBudget => Some(&mut self.preempted_budget),
            AttemptOutcome::PreemptedRebalance => Some(&mut self.preempted_rebalance),
            AttemptOutcome::HostLost => Some(&mut self.host_lost),
            _ => None,
        }
    }

    /// All causes together.
    pub fn total(&self) -> LostWork {
        self.causes()
            .iter()
            .fold(LostWork::default(), |a, (_, b)| LostWork {
                attempts: a.attempts + b.attempts,
                recomputed_instance_ms: a
                    .recomputed_instance_ms
                    .saturating_add(b.recomputed_instance_ms),
            })
    }
}
