//! The cluster state the core schedules over: one job queue with its quota
//! shares, the fleet, and every job, with the indexes a pass needs kept up to
//! date on every event (no full re-sort per event).
//!
//! Mutations are events (submit, attempt ended, fleet changed, ...). Each one
//! that changes a job's status records a [`JobEvent`]; callers drain them with
//! [`Cluster::drain_events`] to publish or report them.

mod accounting;
mod apply;
pub(crate) mod budget;
mod classes;
mod configure;
mod drills;
mod dry_run;
mod entry;
mod lifecycle;
mod nodes;
mod outlook;
pub use lifecycle::DeletionBlockers;
mod usage;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::config::{
    self, ConfigError, ConfigProblem, QueueConfig, QueueingStrategy, QuotaShare, State, Strategy,
};
use crate::ids::{JobId, ShareIdx, TypeIdx};
use crate::index::{borrowed_jobs, QueueKey, RunKey, RunnableQueue};
use crate::job::{
    Attempt, AttemptOutcome, CheckpointMark, Job, JobSpec, JobStatus, RetryAction, StopCause,
};
use crate::nodes::{Node, NodeId, RankState};
use crate::reason::{NeverFits, StatusReason, WaitReason};
use crate::table::JobTable;
use crate::time::Time;

/// How many times a job may lose its host before it fails, by default.
pub const DEFAULT_HOST_LOST_CAP: u32 = 5;

/// A status change of one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobEvent {
    pub at: Time,
    pub job: JobId,
    pub from: JobStatus,
    pub to: JobStatus,
    pub reason: StatusReason,
}

/// Per share and type: entitlement, usage and the indexes of its jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ShareType {
    /// `maxCapacity` for this type (0 if the share names none).
    pub entitlement: u32,
    /// Jobs holding instances and not being stopped, in borrowed-classification order.
    pub running: BTreeSet<RunKey>,
    /// Instances held by `running`.
    pub running_usage: u32,
    /// Instances held by jobs being stopped; freed when their attempts end.
    pub stopping_usage: u32,
    /// Of those, held by jobs that may not borrow (a `BorrowBar`).
    #[serde(rename = "stopping_noncheckpointing")]
    pub stopping_barred: u32,
    pub runnable: RunnableQueue,
    /// Last time capacity of this type was reclaimed from the share (cool-down).
    pub reclaimed_at: Option<Time>,
}

/// A share's configuration and runtime state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ShareSlot {
    pub config: QuotaShare,
    /// Deleted shares keep their slot so that indexes stay stable.
    pub deleted: bool,
    /// Indexed by [`TypeIdx`].
    pub types: Vec<ShareType>,
}

/// Accounting of one instance type, as section 3 of the contract defines it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeAccounting {
    /// `F`: instances of the type (fleet, capped by the queue's limit).
    pub fleet: u32,
    /// Sum of `U_s`, counting jobs still being stopped.
    pub in_use: u32,
    /// `U0 = max(0, F - sum(E_s))`.
    pub unassigned: u32,
    /// `L`: unassigned plus idle entitlement of lending shares.
    pub lendable: u32,
    /// `B`: sum of what shares hold beyond their entitlement.
    pub borrowed: u32,
}

/// One share's use of one type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareUsage {
    pub entitlement: u32,
    /// Instances held (including jobs being stopped).
    pub used: u32,
    pub borrowed: u32,
    /// Idle entitlement that others are using right now (0 for RESERVE).
    pub lent: u32,
    pub idle: u32,
}

/// Ways a submit, update or terminate can be refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("invalid job ({} problem{}): {}", .0.len(), if .0.len() == 1 { "" } else { "s" }, .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<ConfigProblem>),
    #[error("job {0} not found")]
    NotFound(JobId),
    #[error("job {job} is {status}; {action} needs a job that is {needs}")]
    WrongState {
        job: JobId,
        status: JobStatus,
        action: &'static str,
        needs: &'static str,
    },
    #[error("attempt {attempt} of job {job} is not its current attempt (stale report ignored)")]
    StaleAttempt { job: JobId, attempt: u32 },
}

/// Whether a pass may skip a type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Settled {
    /// Something changed: the next pass looks at it.
    #[default]
    No,
    /// The last pass found nothing to do; a pass before `until` (or at any
    /// time, if None) would find nothing again.
    Until(Option<Time>),
}

/// The scheduling state of one job queue and its fleet.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cluster {
    pub(crate) queue_name: String,
    pub(crate) queue_state: State,
    pub(crate) queueing: QueueingStrategy,
    pub(crate) queue_limits: Vec<config::CapacityLimit>,
    pub(crate) shares: Vec<ShareSlot>,
    pub(crate) types: Vec<String>,
    type_index: BTreeMap<String, TypeIdx>,
    /// Registered instances per type.
    pub(crate) fleet: Vec<u32>,
    pub(crate) jobs: JobTable,
    /// Attempt deadlines (`attemptDurationSeconds`) of running jobs.
    pub(crate) deadlines: BTreeSet<(Time, JobId)>,
    /// The queue's default `checkpointBeforePreemptSeconds`.
    #[serde(default)]
    pub(crate) checkpoint_before_preempt_secs: u64,
    /// How lendable capacity goes to borrowers, and FAIR_SHARE's memory.
    #[serde(default, skip_serializing_if = "config::is_default")]
    pub(crate) idle_assignment: config::IdleAssignment,
    #[serde(
        default = "config::half_life",
        skip_serializing_if = "config::is_half_life"
    )]
    pub(crate) fair_share_half_life_hours: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fair_share_rebalance_secs: Option<u64>,
    /// Share groups (`policy::groups`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) groups: Vec<config::ShareGroup>,
    /// Under FAIR_SHARE: each share's recent borrowing, decayed (`policy::fair_share`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) fair_use: BTreeMap<ShareIdx, crate::policy::budgets::BudgetUse>,
    /// Ends of the checkpoint-first windows of preempted jobs (see
    /// [`crate::job::CheckpointFirst`]): at the end the stop goes ahead.
    #[serde(default)]
    pub(crate) checkpoint_windows: BTreeSet<(Time, JobId)>,
    /// The lost-work ledger's totals, indexed by [`ShareIdx`] (shorter
    /// when the last shares have lost nothing yet).
    #[serde(default)]
    pub(crate) ledger: Vec<crate::ledger::ShareLedger>,
    pub host_lost_cap: u32,
    /// Passed resume drills: share name -> class name -> artifacts
    /// (`JobSpec::artifact`) proven to resume.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) resume_proofs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Resume drills, running and done, by id (`policy::drills`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) drills: BTreeMap<u64, crate::policy::drills::Drill>,
    /// When each running drill's subject is to be stopped.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) drill_stops: BTreeSet<(Time, JobId)>,
    /// The usage ledger (`usage.rs`): what each share used, day by day.
    #[serde(default)]
    pub(crate) usage: crate::usage::UsageLedger,
    /// What each share with a borrowing budget borrowed, as its budget
    /// measures it (`policy::budgets`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) budget_use: BTreeMap<ShareIdx, crate::policy::budgets::BudgetUse>,
    events: Vec<JobEvent>,
    /// RUNNABLE jobs no pass has given a reason yet (new or requeued).
    pub(crate) unexplained: BTreeSet<JobId>,
    /// Per type: whether the last pass found nothing to do for it (and
    /// nothing about it has changed since). Every change to a type's jobs,
    /// fleet or configuration unsettles it.
    pub(crate) settled: Vec<Settled>,
    /// Jobs for which preemptions were started and that have not started
    /// yet. The capacity being released is theirs: passes consider them
    /// first (see `Pass::honour_claims`), so a victim cannot take it back
    /// ahead of them. A claim ends when its job leaves RUNNABLE.
    pub(crate) claims: BTreeSet<JobId>,
    /// Every node ever registered (executors; see `nodes.rs`).
    pub(crate) nodes: Vec<Node>,
    pub(crate) node_index: BTreeMap<String, NodeId>,
    /// Per type: the nodes offering it, by index.
    pub(crate) nodes_of_type: Vec<Vec<NodeId>>,
    /// Per type: live instances withheld from this queue because another
    /// queue of its service environment holds them (`policy::environments`).
    #[serde(default, skip_serializing_if = "none_withheld")]
    pub(crate) withheld: Vec<u32>,
    /// `serviceEnvironment` and `priority` (`policy::environments`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) service_environment: Option<String>,
    #[serde(default, skip_serializing_if = "config::is_default")]
    pub(crate) priority: u32,
}

fn none_withheld(v: &[u32]) -> bool {
    v.iter().all(|n| *n == 0)
}

impl Cluster {
    /// A cluster for `queue` (validated whole) over `fleet` (instances per type).
    pub fn new(queue: QueueConfig, fleet: &[(&str, u32)]) -> Result<Cluster, ConfigError> {
        crate::validate::validate_queue(&queue)?;
        let mut cluster = Cluster {
            queue_name: queue.name.clone(),
            queue_state: queue.state,
            queueing: queue.queueing_strategy,
            queue_limits: queue.capacity_limits.clone(),
            shares: Vec::new(),
            types: Vec::new(),
            type_index: BTreeMap::new(),
            fleet: Vec::new(),
            jobs: JobTable::default(),
            deadlines: BTreeSet::new(),
            checkpoint_before_preempt_secs: 0,
            idle_assignment: config::IdleAssignment::Fifo,
            fair_share_half_life_hours: config::DEFAULT_FAIR_SHARE_HALF_LIFE_HOURS,
            fair_share_rebalance_secs: None,
            groups: Vec::new(),
            fair_use: BTreeMap::new(),
            checkpoint_windows: BTreeSet::new(),
            ledger: Vec::new(),
            host_lost_cap: DEFAULT_HOST_LOST_CAP,
            resume_proofs: BTreeMap::new(),
            drills: BTreeMap::new(),
            drill_stops: BTreeSet::new(),
            usage: Default::default(),
            budget_use: BTreeMap::new(),
            events: Vec::new(),
            unexplained: BTreeSet::new(),
            settled: Vec::new(),
            claims: BTreeSet::new(),
            nodes: Vec::new(),
            node_index: BTreeMap::new(),
            nodes_of_type: Vec::new(),
            withheld: Vec::new(),
            service_environment: None,
            priority: 0,
        };
        for (name, count) in fleet {
            cluster.set_fleet(name, *count, Time::ZERO);
        }
        cluster.install_queue(queue, Time::ZERO);
        Ok(cluster)
    }

    // ----- names and lookups ------------------------------------------------

    pub fn queue_name(&self) -> &str {
        &self.queue_name
    }

    pub fn queueing_strategy(&self) -> QueueingStrategy {
        self.queueing
    }

    /// The queue's configuration, as last applied (deleted shares left out).
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            name: self.queue_name.clone(),
            state: self.queue_state,
            queueing_strategy: self.queueing,
            capacity_limits: self.queue_limits.clone(),
            shares: self
                .shares
                .iter()
                .filter(|s| !s.deleted)
                .map(|s| s.config.clone())
                .collect(),
            checkpoint_before_preempt_secs: self.checkpoint_before_preempt_secs,
            idle_assignment: self.idle_assignment,
            fair_share_half_life_hours: self.fair_share_half_life_hours,
            fair_share_rebalance_secs: self.fair_share_rebalance_secs,
            groups: self.groups.clone(),
            service_environment: self.service_environment.clone(),
            priority: self.priority,
        }
    }

    /// The service environment the queue draws capacity from (its own name
    /// unless it names one).
    pub fn environment(&self) -> &str {
        self.service_environment
            .as_deref()
            .unwrap_or(&self.queue_name)
    }

    /// The queue's priority in its environment.
    pub fn priority(&self) -> u32 {
        self.priority
    }

    /// Live instances of type `t` withheld from this queue: other queues of
    /// its environment hold them.
    pub fn withheld_of(&self, t: TypeIdx) -> u32 {
        self.withheld.get(t.index()).copied().unwrap_or(0)
    }

    /// Whether any live instance is withheld from this queue.
    pub fn withholds_any(&self) -> bool {
        !none_withheld(&self.withheld)
    }

    /// The type's ordinal, adding it to the type table if new.
    pub fn intern_type(&mut self, name: &str) -> TypeIdx {
        if let Some(t) = self.type_index.get(name) {
            return *t;
        }
        let t = TypeIdx(u16::try_from(self.types.len()).expect("fewer than 65536 instance types"));
        self.types.push(name.to_string());
        self.type_index.insert(name.to_string(), t);
        self.fleet.push(0);
        self.nodes_of_type.push(Vec::new());
        self.settled.push(Settled::No);
        for share in &mut self.shares {
            let entitlement = share.config.entitlement(name);
            share.types.push(ShareType {
                entitlement,
                ..ShareType::default()
            });
        }
        t
    }

    pub fn type_idx(&self, name: &str) -> Option<TypeIdx> {
        self.type_index.get(name).copied()
    }

    pub fn type_name(&self, t: TypeIdx) -> &str {
        &self.types[t.index()]
    }

    pub fn type_count(&self) -> usize {
        self.types.len()
    }

    /// A live (not deleted) share by name.
    pub fn share_idx(&self, name: &str) -> Option<ShareIdx> {
        self.shares
            .iter()
            .position(|s| !s.deleted && s.config.name == name)
            .map(|i| ShareIdx(u16::try_from(i).expect("share slots fit in u16")))
    }

    pub fn share_config(&self, s: ShareIdx) -> &QuotaShare {
        &self.shares[s.index()].config
    }

    /// Live shares, in configuration order.
    pub fn share_indices(&self) -> impl Iterator<Item = ShareIdx> + '_ {
        (0..self.shares.len())
            .filter(|&i| !self.shares[i].deleted)
            .map(|i| ShareIdx(u16::try_from(i).expect("share slots fit in u16")))
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Every job, in id order.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    pub(crate) fn st(&self, s: ShareIdx, t: TypeIdx) -> &ShareType {
        &self.shares[s.index()].types[t.index()]
    }

    /// The share's state of a type, to change: its usage is accrued first.
    pub(crate) fn st_mut(&mut self, s: ShareIdx, t: TypeIdx) -> &mut ShareType {
        self.touch_usage(s, t);
        &mut self.shares[s.index()].types[t.index()]
    }

    /// The next pass looks at every type (none is settled).
    pub fn reconsider(&mut self) {
        for s in &mut self.settled {
            *s = Settled::No;
        }
    }

    /// Events recorded since the last drain, oldest first.
    pub fn drain_events(&mut self) -> Vec<JobEvent> {
        std::mem::take(&mut self.events)
    }
}
