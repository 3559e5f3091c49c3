//! Quartermaster's scheduling core: quota shares of GPU instance types, lending
//! and borrowing, reclaim and in-share preemption, as a pure function.
//!
//! `schedule(&Cluster, now) -> Plan` decides; `Cluster::apply` and the event
//! methods (`submit`, `attempt_ended`, `set_fleet`, ...) change state. The live
//! scheduler service and the simulator call the very same functions.
//!
//! This crate must not depend on an async runtime, NATS, the AWS SDK or any
//! I/O, and never reads a clock: time is always passed in. Nothing that decides
//! iterates a hash map. `README.md` beside this file states the problem, the
//! phases and the invariants.
//!
//! Layers, bottom first (README.md, "Layers"; `tests/layers.rs` fails on an
//! import that runs up one or closes a circle): ids and time; plain types
//! (`outcome`, `job`, `nodes`, `config`, `plan`, ...); `validate`; the state
//! (`cluster`); the pass (`pass`); what reads it (`invariants`, `dry_run`,
//! `outlook`, and the pass's entry points on the state).

pub mod budget;
pub mod class;
pub mod cluster;
pub mod config;
pub mod drill;
pub mod dry_run;
pub mod environment;
pub mod ids;
pub mod index;
pub mod invariants;
pub mod job;
pub mod ledger;
pub mod nodes;
pub mod outcome;
pub mod outlook;
pub mod pass;
pub mod plan;
pub mod reason;
pub mod runtime;
mod table;
pub mod time;
pub mod usage;
pub mod validate;

pub use budget::{BorrowBudget, BudgetStatus, BudgetWindow, OnBudgetExhausted};
pub use class::{BorrowBar, ClassRules, WorkloadClass, IMPLICIT_CLASS, MAX_CLASSES_PER_SHARE};
pub use cluster::{Cluster, DeletionBlockers, JobError, JobEvent, ShareUsage, TypeAccounting};
pub use config::{
    CapacityLimit, ConfigError, ConfigProblem, Protections, QueueConfig, QueueingStrategy,
    QuotaShare, State, Strategy, MAX_QUEUE_PRIORITY,
};
pub use drill::{compare_results, Drill, DrillRole, DrillState, DRILL_MAX_DELAY_MS};
pub use ids::{JobId, ShareIdx, TypeIdx};
pub use job::{
    Attempt, AttemptOutcome, CheckpointFirst, CheckpointMark, ExitRule, Job, JobSpec, JobStatus,
    PreemptionKind, Restore, RetryAction, StopCause, DEFAULT_GRACE_PERIOD_SECS,
    MAX_CHECKPOINT_BEFORE_PREEMPT_SECS, MAX_GRACE_PERIOD_SECS,
};
pub use ledger::{LostWork, ShareLedger};
pub use nodes::{
    pool_node_name, silence_before_lost, LostAttempt, Node, NodeId, Rank, RankEnd, RankExit,
    RankFailure, RankState, RankStates, Ranks, Slots, FENCE_MARGIN_SECS, LAUNCH_FAILED_EXIT_CODE,
    SETTLE_MISSING_AFTER_SECS, UNPLACED_STOP_GRACE_SECS,
};
pub use pass::{schedule, schedule_exhaustive, Plan, Preemption, Start};
pub use reason::{NeverFits, StatusReason, WaitReason};
pub use runtime::{Runtime, Runtimes};
pub use time::Time;
pub use usage::{
    day_of, LendRecord, Rates, Usage, UsageRecord, UsageReport, DAY_MS, USAGE_KEEP_DAYS,
};
pub use validate::{priority_problem, share_problems, validate_queue};
