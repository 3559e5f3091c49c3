//! Status reasons: why a job is where it is, specific enough to act on.
//!
//! Reasons are small enums, not strings, so a million waiting jobs cost little;
//! [`StatusReason::render`] turns one into the text users see, with job names
//! supplied by the caller.

use crate::ids::JobId;
use crate::outcome::{AttemptOutcome, PreemptionKind};
use crate::time::Time;
use crate::Runtime;

/// A limit that makes a job unable to run under the current configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NeverFits {
    /// RESERVE or LEND share: `instanceCount` > the share's `maxCapacity`.
    ShareLimit { count: u32, max_capacity: u32 },
    /// LEND_AND_BORROW share: `instanceCount` > `maxCapacity * (1 + borrowLimit/100)`.
    ShareLimitPlusBorrowLimit { count: u32, max_holding: u32 },
    /// LEND_AND_BORROW with unlimited borrowing: more than the share's own
    /// capacity plus everything others could lend.
    AllBorrowableCapacity { count: u32, reachable: u32 },
    /// More than the share's entitlement, in a share that lets only
    /// checkpointing jobs borrow, for a job that does not checkpoint.
    BorrowRequiresCheckpoint { count: u32, max_capacity: u32 },
    /// More than the share's entitlement, for a job whose workload class
    /// never borrows.
    ClassMayNotBorrow { count: u32, max_capacity: u32 },
    /// More than the share's entitlement, for a resume drill (drills run on
    /// their share's own capacity).
    DrillOnOwnCapacity { count: u32, max_capacity: u32 },
    /// More than the queue's `capacityLimits` allow.
    QueueLimit { count: u32, queue_limit: u32 },
    /// More instances than the fleet has of the type.
    FleetMaximum { count: u32, fleet: u32 },
}

impl NeverFits {
    /// Whether the configuration alone forbids it (admission rejects these);
    /// the other limits depend on the fleet, which changes as executors come
    /// and go.
    pub fn is_configuration_only(self) -> bool {
        matches!(
            self,
            NeverFits::ShareLimit { .. }
                | NeverFits::ShareLimitPlusBorrowLimit { .. }
                | NeverFits::QueueLimit { .. }
                | NeverFits::BorrowRequiresCheckpoint { .. }
                | NeverFits::ClassMayNotBorrow { .. }
                | NeverFits::DrillOnOwnCapacity { .. }
        )
    }

    pub fn describe(self) -> String {
        match self {
            NeverFits::ShareLimit { count, max_capacity } => format!(
                "instanceCount {count} exceeds the share limit (maxCapacity {max_capacity}) and the share does not borrow"
            ),
            NeverFits::ShareLimitPlusBorrowLimit { count, max_holding } => format!(
                "instanceCount {count} exceeds the share limit plus its borrow limit ({max_holding} instances)"
            ),
            NeverFits::AllBorrowableCapacity { count, reachable } => format!(
                "instanceCount {count} exceeds the share's capacity plus all borrowable capacity ({reachable} instances)"
            ),
            NeverFits::BorrowRequiresCheckpoint { count, max_capacity } => format!(
                "instanceCount {count} exceeds the share limit (maxCapacity {max_capacity}) and the share lets only checkpointing jobs borrow; add a checkpointConfig"
            ),
            NeverFits::ClassMayNotBorrow { count, max_capacity } => format!(
                "instanceCount {count} exceeds the share limit (maxCapacity {max_capacity}) and the job's workload class never borrows (mayBorrow: false)"
            ),
            NeverFits::DrillOnOwnCapacity { count, max_capacity } => format!(
                "instanceCount {count} exceeds the share limit (maxCapacity {max_capacity}) and a resume drill runs on its share's own capacity"
            ),
            NeverFits::QueueLimit { count, queue_limit } => format!(
                "instanceCount {count} exceeds the queue's capacity limit ({queue_limit} instances)"
            ),
            NeverFits::FleetMaximum { count, fleet } => format!(
                "instanceCount {count} exceeds the fleet maximum ({fleet} instances registered)"
            ),
        }
    }
}

/// Why a RUNNABLE job did not start in the last pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WaitReason {
    /// Not looked at by a pass yet.
    Queued,
    /// Cannot fit under the current configuration.
    Misconfiguration(NeverFits),
    /// RESERVE/LEND share (or borrowing not possible) and its own capacity is in use.
    OwnCapacityInUse { used: u32, entitlement: u32 },
    /// Borrowing would exceed `maxCapacity * (1 + borrowLimit/100)`.
    BorrowLimitReached { used: u32, max_holding: u32 },
    /// Its share group's shares already borrow `borrowed` instances of the
    /// type together, and may borrow `limit` (the group's `borrowLimit`
    /// of their entitlements, `policy::groups`).
    GroupBorrowLimitReached { borrowed: u32, limit: u32 },
    /// No idle capacity that lenders offer (or unassigned capacity) is left.
    NoLendableCapacity { lendable: u32, borrowed: u32 },
    /// The fleet has no free instance and nothing can be reclaimed.
    FleetFull { in_use: u32, fleet: u32 },
    /// As `FleetFull`, in a queue whose service environment's other queues
    /// hold `held` more instances of the type (`policy::environments`): a queue
    /// never preempts another's jobs, so it waits for one to end.
    EnvironmentCapacityHeld { held: u32, in_use: u32, fleet: u32 },
    /// The fleet has no instance of the type at all.
    FleetLacksType,
    /// Its capacity is being reclaimed; it starts when the preempted jobs stop.
    WaitingForRelease,
    /// Its lent capacity is held by jobs protected by `minRuntimeBeforePreemptionSeconds`.
    VictimsProtectedUntil(Time),
    /// The share's capacity was reclaimed recently (`reborrowCooldownSeconds`).
    ReborrowCooldownUntil(Time),
    /// The share requires checkpointing to borrow, and this job does not checkpoint.
    BorrowRequiresCheckpoint,
    /// Its share's capacity is in use and its workload class never borrows.
    ClassMayNotBorrow,
    /// Its workload class borrows only once a resume drill has passed for
    /// what the job runs, and none has.
    ResumeNotVerified,
    /// Its share's borrowing budget has too little left for it (`policy::budgets`):
    /// `left_min` instance-minutes are left (after what running borrowed
    /// jobs are expected to use; rounded down), it needs `need_min`
    /// (rounded up; `u32::MAX`: it declares no expected run, and the share
    /// lets running borrowed jobs finish), and enough is back at minute
    /// `refills_at_min` (rounded up; `u32::MAX`: not while the budget stays
    /// as it is). Whole minutes, so the reason, an event when it changes,
    /// changes at most once a minute. Saturated at `u32::MAX - 1`.
    BorrowBudget {
        left_min: u32,
        need_min: u32,
        refills_at_min: u32,
    },
    /// STRICT_FIFO: the head of the share must start first.
    StrictFifoBehind(JobId),
    /// Running jobs of its share have equal or higher priority (or a
    /// class its class may not preempt).
    InSharePreemptionNotPossible,
    /// Live executors that offer the job's runtime offer `offered`
    /// instances of its type, fewer than it asks for (`policy::runtimes`).
    NoExecutorOffersRuntime { runtime: Runtime, offered: u32 },
    /// Only some executors of its type offer the job's runtime, and they
    /// have `free` instances free now: it starts on those without
    /// preempting anyone (`policy::runtimes`).
    RuntimeInstancesBusy { runtime: Runtime, free: u32 },
}

/// A job's statusReason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum StatusReason {
    #[default]
    None,
    Waiting(WaitReason),
    /// Admitted; `borrowed` of its instances are on borrowed capacity.
    Scheduled {
        borrowed: u32,
    },
    PreemptionInProgress {
        kind: PreemptionKind,
        for_job: JobId,
    },
    TimeoutInProgress,
    CancelInProgress,
    /// A resume drill stops it, to resume it from its checkpoint.
    DrillStopInProgress,
    /// Requeued after an attempt ended this way.
    Requeued(AttemptOutcome),
    /// Ended: preempted more often than `preemptionRetriesBeforeTermination` allows.
    PreemptionRetriesExhausted(AttemptOutcome),
    /// Ended: failed and no retry left (or an `evaluateOnExit` rule said EXIT).
    AttemptsExhausted(AttemptOutcome),
    /// Ended: lost its host more often than the system allows.
    HostLostCapExceeded,
    Cancelled,
    ShareDeleted,
    Succeeded,
}

impl StatusReason {
    /// The text users see; `name` renders a job id (e.g. as its jobName).
    pub fn render(&self, name: &dyn Fn(JobId) -> String) -> String {
        match *self {
            StatusReason::None => String::new(),
            StatusReason::Waiting(wait) => render_wait(wait, name),
            StatusReason::Scheduled { borrowed: 0 } => "SCHEDULED: on its share's own capacity".into(),
            StatusReason::Scheduled { borrowed } => {
                format!("SCHEDULED: {borrowed} instance(s) on borrowed capacity (preemptible by the owner)")
            }
            StatusReason::PreemptionInProgress {
                kind: PreemptionKind::BudgetExhausted,
                ..
            } => "PREEMPTION_IN_PROGRESS: its share's borrowing budget is spent (onBudgetExhausted: CHECKPOINT_AND_STOP); it checkpoints, stops and is requeued".into(),
            StatusReason::PreemptionInProgress { kind, for_job } => format!(
                "PREEMPTION_IN_PROGRESS: {} preemption to run {}",
                kind.as_str(),
                name(for_job)
            ),
            StatusReason::TimeoutInProgress => "TIMEOUT_IN_PROGRESS: attemptDurationSeconds reached".into(),
            StatusReason::CancelInProgress => "CANCEL_IN_PROGRESS: terminated by a user".into(),
            StatusReason::DrillStopInProgress => "DRILL_STOP_IN_PROGRESS: a resume drill stops it, to resume it from its last checkpoint".into(),
            StatusReason::Requeued(outcome) => format!("REQUEUED: last attempt ended {}", outcome.as_str()),
            StatusReason::PreemptionRetriesExhausted(outcome) => format!(
                "PREEMPTION_RETRIES_EXHAUSTED: attempt ended {} and preemptionRetriesBeforeTermination is spent",
                outcome.as_str()
            ),
            StatusReason::AttemptsExhausted(outcome) => format!(
                "ATTEMPTS_EXHAUSTED: attempt ended {} with no retry left",
                outcome.as_str()
            ),
            StatusReason::HostLostCapExceeded => "HOST_LOST: lost its host more often than the system allows".into(),
            StatusReason::Cancelled => "CANCELLED: terminated by a user".into(),
            StatusReason::ShareDeleted => "CANCELLED: its quota share was deleted".into(),
            StatusReason::Succeeded => "SUCCEEDED: the process exited 0".into(),
        }
    }

    pub fn wait(self) -> Option<WaitReason> {
        match self {
            StatusReason::Waiting(wait) => Some(wait),
            _ => None,
        }
    }
}

fn render_wait(wait: WaitReason, name: &dyn Fn(JobId) -> String) -> String {
    match wait {
        WaitReason::Queued => "QUEUED: waiting for the next scheduling pass".into(),
        WaitReason::Misconfiguration(limit) => format!("MISCONFIGURATION: {}", limit.describe()),
        WaitReason::OwnCapacityInUse { used, entitlement } => format!(
            "WAITING_FOR_SHARE_CAPACITY: its share uses {used} of its {entitlement} instance(s) and cannot borrow"
        ),
        WaitReason::BorrowLimitReached { used, max_holding } => format!(
            "BORROW_LIMIT_REACHED: its share uses {used} instance(s); share limit plus borrow limit is {max_holding}"
        ),
        WaitReason::GroupBorrowLimitReached { borrowed, limit } => format!(
            "GROUP_BORROW_LIMIT_REACHED: its share group's shares borrow {borrowed} instance(s) together; the group's borrow limit allows {limit}"
        ),
        WaitReason::NoLendableCapacity { lendable: 0, .. } => {
            "NO_LENDABLE_CAPACITY: no share lends idle capacity of this type right now (RESERVE shares keep theirs)".into()
        }
        WaitReason::NoLendableCapacity { lendable, borrowed } => format!(
            "NO_LENDABLE_CAPACITY: {borrowed} of {lendable} lendable instance(s) already borrowed"
        ),
        WaitReason::FleetFull { in_use, fleet } => format!(
            "WAITING_FOR_FLEET_CAPACITY: {in_use} of {fleet} instance(s) in use and none can be reclaimed"
        ),
        WaitReason::EnvironmentCapacityHeld { held, in_use, fleet } => format!(
            "WAITING_FOR_ENVIRONMENT_CAPACITY: other queues of its service environment hold {held} instance(s) of the type and are not preempted for it; this queue uses {in_use} of the {fleet} left to it"
        ),
        WaitReason::FleetLacksType => "FLEET_LACKS_TYPE: no executor offers this instance type".into(),
        WaitReason::WaitingForRelease => {
            "WAITING_FOR_RECLAIM: capacity is being reclaimed for it; it starts when the preempted jobs stop".into()
        }
        WaitReason::VictimsProtectedUntil(t) => format!(
            "WAITING_FOR_MIN_RUNTIME: the jobs holding its capacity cannot be preempted before {t} (minRuntimeBeforePreemptionSeconds)"
        ),
        WaitReason::ReborrowCooldownUntil(t) => format!(
            "REBORROW_COOLDOWN: its share's capacity was reclaimed recently; it may borrow again at {t}"
        ),
        WaitReason::BorrowRequiresCheckpoint => {
            "BORROW_REQUIRES_CHECKPOINT: the share lets only checkpointing jobs borrow; add a checkpointConfig".into()
        }
        WaitReason::ClassMayNotBorrow => {
            "WAITING_FOR_SHARE_CAPACITY: its share's capacity is in use and its workload class never borrows (mayBorrow: false)".into()
        }
        WaitReason::BorrowBudget {
            left_min,
            need_min,
            refills_at_min,
        } => {
            let hours = |m: u32| format!("{:.2}", f64::from(m) / 60.0);
            let need = if need_min == u32::MAX {
                "it declares no expected run (estimatedRuntimeSeconds or timeoutConfig), and with onBudgetExhausted FINISH only such jobs borrow".to_string()
            } else {
                format!("it needs {} (its expected run times the instances it borrows)", hours(need_min))
            };
            let refill = if refills_at_min == u32::MAX {
                String::new()
            } else {
                format!(
                    "; enough is back at {}",
                    Time::from_secs(u64::from(refills_at_min) * 60)
                )
            };
            format!(
                "BORROW_BUDGET: {} instance-hours of its share's borrowing budget are left; {need}{refill}",
                hours(left_min)
            )
        }
        WaitReason::ResumeNotVerified => {
            "RESUME_NOT_VERIFIED: its workload class borrows only once a resume drill has passed for this image or command (qm drill)".into()
        }
        WaitReason::StrictFifoBehind(head) => format!(
            "STRICT_FIFO: waiting behind {}, the head of its share",
            name(head)
        ),
        WaitReason::InSharePreemptionNotPossible => {
            "WAITING_FOR_SHARE_CAPACITY: running jobs of its share have equal or higher priority, or a workload class its class may not preempt".into()
        }
        WaitReason::NoExecutorOffersRuntime { runtime, offered: 0 } => format!(
            "NO_EXECUTOR_FOR_RUNTIME: no live executor offers the {runtime} runtime for this instance type; it starts once one registers (executor setting runtimes)"
        ),
        WaitReason::NoExecutorOffersRuntime { runtime, offered } => format!(
            "NO_EXECUTOR_FOR_RUNTIME: live executors that offer the {runtime} runtime have only {offered} instance(s) of this type, fewer than the job asks for"
        ),
        WaitReason::RuntimeInstancesBusy { runtime, free } => format!(
            "WAITING_FOR_RUNTIME_CAPACITY: only some executors of this type offer the {runtime} runtime and they have {free} instance(s) free; it starts once they have room (no job is preempted to make it)"
        ),
    }
}

impl WaitReason {
    /// What would let a job waiting for this reason start, in a sentence
    /// for the person who owns it.
    pub fn unblock(&self) -> String {
        match self {
            WaitReason::Queued => "nothing: the next pass (within a second) looks at it".into(),
            WaitReason::Misconfiguration(_) => "a change: it asks for more than its share could ever hold; lower its instanceCount, or ask an admin to raise the share's limits".into(),
            WaitReason::OwnCapacityInUse { used, entitlement } => format!(
                "its share's own jobs freeing capacity ({used} of {entitlement} instances in use), a lower-priority job of the share being preempted for it (raise its priority), or the share being allowed to borrow"
            ),
            WaitReason::BorrowLimitReached { used, max_holding } => format!(
                "its share's jobs releasing instances (it holds {used}, its borrow limit allows {max_holding}), or an admin raising the share's borrowLimit"
            ),
            WaitReason::GroupBorrowLimitReached { borrowed, limit } => format!(
                "its share group borrowing less ({borrowed} of {limit} instances borrowed together), or an admin raising the group's borrowLimit"
            ),
            WaitReason::NoLendableCapacity { .. } => "another share lending idle capacity of its type, its own share's capacity freeing up, or more instances in the fleet".into(),
            WaitReason::FleetFull { in_use, fleet } => format!(
                "a running job ending ({in_use} of the fleet's {fleet} instances in use), or more instances in the fleet"
            ),
            WaitReason::EnvironmentCapacityHeld { .. } => "a job of another queue of its service environment ending (queues are served by priority; none preempts another's jobs), or a running job of its own queue ending".into(),
            WaitReason::FleetLacksType => "an executor offering its instance type registering".into(),
            WaitReason::WaitingForRelease => "the jobs preempted for it stopping (it starts then, within their grace period)".into(),
            WaitReason::VictimsProtectedUntil(_) => "time: the jobs holding its capacity are protected by their minimum runtime until the time its reason names".into(),
            WaitReason::ReborrowCooldownUntil(_) => "time: its share may borrow again once its reborrowCooldownSeconds pass, or its own capacity freeing up".into(),
            WaitReason::BorrowRequiresCheckpoint => "a checkpointConfig on the job (its share lets only checkpointing jobs borrow), or its share's own capacity freeing up".into(),
            WaitReason::ClassMayNotBorrow => "its share's own capacity freeing up (its workload class never borrows), or submitting it in a class that may borrow".into(),
            WaitReason::ResumeNotVerified => "a passed resume drill of what it runs (qm drill), or its share's own capacity freeing up".into(),
            WaitReason::BorrowBudget { .. } => "its share's borrowing budget refilling, a smaller estimatedRuntimeSeconds, or its share's own capacity freeing up".into(),
            WaitReason::StrictFifoBehind(_) => "the job at the head of its share's line starting first (STRICT_FIFO)".into(),
            WaitReason::InSharePreemptionNotPossible => "a running job of its share ending, or a higher priority for it than theirs".into(),
            WaitReason::NoExecutorOffersRuntime { runtime, offered } => format!(
                "executors offering the {runtime:?} runtime with more instances of its type (they offer {offered})"
            ),
            WaitReason::RuntimeInstancesBusy { runtime, free } => format!(
                "instances of executors offering the {runtime:?} runtime freeing up ({free} free now)"
            ),
        }
    }
}
