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
//! (`cluster`); the policies' hooks; the pass (`pass`, a fixed pipeline of
//! phases); what reads it (`invariants`, `dry_run`, `outlook`, and the
//! pass's entry points on the state).
//!
//! Each policy is one folder under [`policy`] (budgets, workload classes,
//! drills, service environments, FAIR_SHARE, share groups, protections,
//! runtimes): its configuration, validation, state and the hooks the pass
//! calls; its parts sit in the layers above (ADR 0023).

pub mod cluster;
pub mod config;
pub mod dry_run;
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
pub mod policy;
pub mod reason;
pub mod stats;
mod table;
pub mod time;
pub mod usage;
pub mod validate;

// The policies' modules under their names before they moved to `policy/`
// (issue 50): callers keep their paths.
pub use policy::budgets as budget;
pub use policy::classes as class;
pub use policy::drills as drill;
pub use policy::environments as environment;
pub use policy::runtimes as runtime;

pub use cluster::{Cluster, DeletionBlockers, JobError, JobEvent, ShareUsage, TypeAccounting};
pub use config::{
    CapacityLimit, ConfigError, ConfigProblem, Protections, QueueConfig, QueueingStrategy,
    QuotaShare, State, Strategy, MAX_QUEUE_PRIORITY,
};
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
pub use policy::budgets::{BorrowBudget, BudgetStatus, BudgetWindow, OnBudgetExhausted};
pub use policy::classes::{
    BorrowBar, ClassRules, WorkloadClass, IMPLICIT_CLASS, MAX_CLASSES_PER_SHARE,
};
pub use policy::drills::{compare_results, Drill, DrillRole, DrillState, DRILL_MAX_DELAY_MS};
pub use policy::runtimes::{Runtime, Runtimes};
pub use reason::{NeverFits, StatusReason, WaitReason};
pub use time::Time;
pub use usage::{
    day_of, LendRecord, Rates, Usage, UsageRecord, UsageReport, DAY_MS, USAGE_KEEP_DAYS,
};
pub use validate::{priority_problem, share_problems, validate_queue};
