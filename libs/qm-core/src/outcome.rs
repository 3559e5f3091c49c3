//! How an attempt ends and why the scheduler stops one: plain outcomes
//! that jobs, nodes, reasons and ledgers all name.

/// `terminationGracePeriodSeconds` when a job gives none: as SageMaker
/// gives a stopped training job.
pub const DEFAULT_GRACE_PERIOD_SECS: u64 = 120;

/// The longest `terminationGracePeriodSeconds` a job may ask for (a day):
/// executors wait this long on shutdown, so it must stay a sane duration.
pub const MAX_GRACE_PERIOD_SECS: u64 = 86_400;

/// Why the scheduler stops a running attempt.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum PreemptionKind {
    /// Lent capacity reclaimed by its owner.
    CrossShare,
    /// A more urgent job of the same share.
    InShare,
    /// The share's limit was lowered below its usage and another share needs it.
    LimitReduced,
    /// The share's borrowing budget is spent (`onBudgetExhausted:
    /// CHECKPOINT_AND_STOP`): its borrowed jobs stop, for no other job.
    BudgetExhausted,
    /// FAIR_SHARE rebalancing: a borrower over its fair part gives a
    /// borrowed instance to one under it (`pass/rebalance.rs`).
    Rebalance,
}

impl PreemptionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionKind::CrossShare => "CROSS_SHARE",
            PreemptionKind::InShare => "IN_SHARE",
            PreemptionKind::LimitReduced => "LIMIT_REDUCED",
            PreemptionKind::BudgetExhausted => "BUDGET_EXHAUSTED",
            PreemptionKind::Rebalance => "REBALANCE",
        }
    }

    pub fn outcome(self) -> AttemptOutcome {
        match self {
            PreemptionKind::CrossShare => AttemptOutcome::PreemptedCrossShare,
            PreemptionKind::InShare => AttemptOutcome::PreemptedInShare,
            PreemptionKind::LimitReduced => AttemptOutcome::PreemptedLimitReduced,
            PreemptionKind::BudgetExhausted => AttemptOutcome::PreemptedBudget,
            PreemptionKind::Rebalance => AttemptOutcome::PreemptedRebalance,
        }
    }
}

/// How an attempt ended.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum AttemptOutcome {
    Succeeded,
    Failed,
    PreemptedCrossShare,
    PreemptedInShare,
    PreemptedLimitReduced,
    /// Stopped because its share's borrowing budget was spent.
    PreemptedBudget,
    /// Stopped by FAIR_SHARE rebalancing, for a borrower under its part.
    PreemptedRebalance,
    HostLost,
    TimedOut,
    Cancelled,
    /// Stopped by a resume drill (`policy::drills`): requeued, spending no budget.
    PreemptedDrill,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "SUCCEEDED",
            AttemptOutcome::Failed => "FAILED",
            AttemptOutcome::PreemptedCrossShare => "PREEMPTED_CROSS_SHARE",
            AttemptOutcome::PreemptedInShare => "PREEMPTED_IN_SHARE",
            AttemptOutcome::PreemptedLimitReduced => "PREEMPTED_LIMIT_REDUCED",
            AttemptOutcome::PreemptedBudget => "PREEMPTED_BUDGET",
            AttemptOutcome::PreemptedRebalance => "PREEMPTED_REBALANCE",
            AttemptOutcome::HostLost => "HOST_LOST",
            AttemptOutcome::TimedOut => "TIMED_OUT",
            AttemptOutcome::Cancelled => "CANCELLED",
            AttemptOutcome::PreemptedDrill => "PREEMPTED_DRILL",
        }
    }

    pub fn is_preemption(self) -> bool {
        matches!(
            self,
            AttemptOutcome::PreemptedCrossShare
                | AttemptOutcome::PreemptedInShare
                | AttemptOutcome::PreemptedLimitReduced
                | AttemptOutcome::PreemptedBudget
                | AttemptOutcome::PreemptedRebalance
        )
    }
}
