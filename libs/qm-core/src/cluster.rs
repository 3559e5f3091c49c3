//! The cluster state the core schedules over: one job queue with its quota
//! shares, the fleet, and every job, with the indexes a pass needs kept up to
//! date on every event (no full re-sort per event).
//!
//! Mutations are events (submit, attempt ended, fleet changed, ...). Each one
//! that changes a job's status records a [`JobEvent`]; callers drain them with
//! [`Cluster::drain_events`] to publish or report them.

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub at: Time,
    pub job: JobId,
    pub from: JobStatus,
    pub to: JobStatus,
    pub reason: StatusReason,
}

/// Per share and type: entitlement, usage and the indexes of its jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ShareType {
    /// `maxCapacity` for this type (0 if the share names none).
    pub entitlement: u32,
    /// Jobs holding instances and not being stopped, in borrowed-classification order.
    pub running: BTreeSet<RunKey>,
    /// Instances held by `running`.
    pub running_usage: u32,
    /// Instances held by jobs being stopped; freed when their attempts end.
    pub stopping_usage: u32,
    /// Of those, held by jobs that do not checkpoint.
    pub stopping_noncheckpointing: u32,
    pub runnable: RunnableQueue,
    /// Last time capacity of this type was reclaimed from the share (cool-down).
    pub reclaimed_at: Option<Time>,
}

/// A share's configuration and runtime state.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// The scheduling state of one job queue and its fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    pub host_lost_cap: u32,
    events: Vec<JobEvent>,
    /// RUNNABLE jobs no pass has given a reason yet (new or requeued).
    pub(crate) unexplained: BTreeSet<JobId>,
    /// Per type: `Some(wake)` when the last pass found nothing to do for the
    /// type and nothing about it has changed since; a pass before `wake` (or
    /// at any time, if None) would find nothing again, so it skips the type.
    /// Every change to a type's jobs, fleet or configuration clears it.
    pub(crate) settled: Vec<Option<Option<Time>>>,
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
}

impl Cluster {
    /// A cluster for `queue` (validated whole) over `fleet` (instances per type).
    pub fn new(queue: QueueConfig, fleet: &[(&str, u32)]) -> Result<Cluster, ConfigError> {
        config::validate_queue(&queue)?;
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
            host_lost_cap: DEFAULT_HOST_LOST_CAP,
            events: Vec::new(),
            unexplained: BTreeSet::new(),
            settled: Vec::new(),
            claims: BTreeSet::new(),
            nodes: Vec::new(),
            node_index: BTreeMap::new(),
            nodes_of_type: Vec::new(),
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
        }
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
        self.settled.push(None);
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

    fn st_mut(&mut self, s: ShareIdx, t: TypeIdx) -> &mut ShareType {
        &mut self.shares[s.index()].types[t.index()]
    }

    /// Events recorded since the last drain, oldest first.
    pub fn drain_events(&mut self) -> Vec<JobEvent> {
        std::mem::take(&mut self.events)
    }

    // ----- accounting -------------------------------------------------------

    /// `F` for a type: the fleet, capped by the queue's own limit if it has one.
    pub fn effective_fleet(&self, t: TypeIdx) -> u32 {
        let fleet = self.fleet[t.index()];
        let cap = self
            .queue_limits
            .iter()
            .find(|l| l.capacity_unit == self.types[t.index()])
            .map(|l| config::clamp_u32(l.max_capacity));
        cap.map_or(fleet, |cap| cap.min(fleet))
    }

    pub fn fleet_of(&self, t: TypeIdx) -> u32 {
        self.fleet[t.index()]
    }

    /// Instances of `t` held by share `s` (running and being stopped).
    pub fn share_usage(&self, s: ShareIdx, t: TypeIdx) -> ShareUsage {
        self.usage_snapshot(t)
            .into_iter()
            .find(|(share, _)| *share == s)
            .map(|(_, usage)| usage)
            .unwrap_or_default()
    }

    /// Every live share's use of `t`, in O(shares). What a share has lent is
    /// an attribution: borrowing is backed by unassigned capacity first, and
    /// the rest by lending shares in proportion to their idle entitlement (so
    /// it can be fractional; reported rounded down here).
    pub fn usage_snapshot(&self, t: TypeIdx) -> Vec<(ShareIdx, ShareUsage)> {
        self.share_usages(t, self.accounting(t)).collect()
    }

    /// Every live share's use of `t`, without allocating (see
    /// [`Cluster::usage_snapshot`]).
    pub fn share_usages(
        &self,
        t: TypeIdx,
        acc: TypeAccounting,
    ) -> impl Iterator<Item = (ShareIdx, ShareUsage)> + '_ {
        let lender_idle = acc.lendable - acc.unassigned;
        let to_back = acc.borrowed.saturating_sub(acc.unassigned).min(lender_idle);
        self.share_indices().map(move |s| {
            let st = self.st(s, t);
            let used = st.running_usage + st.stopping_usage;
            let idle = st.entitlement.saturating_sub(used);
            let lent = if self.shares[s.index()].config.strategy.lends() && lender_idle > 0 {
                u32::try_from(u64::from(idle) * u64::from(to_back) / u64::from(lender_idle))
                    .unwrap_or(0)
            } else {
                0
            };
            let usage = ShareUsage {
                entitlement: st.entitlement,
                used,
                borrowed: used.saturating_sub(st.entitlement),
                lent,
                idle,
            };
            (s, usage)
        })
    }

    /// Section 3's accounting for one type, counting jobs being stopped.
    pub fn accounting(&self, t: TypeIdx) -> TypeAccounting {
        let fleet = self.effective_fleet(t);
        let mut acc = TypeAccounting {
            fleet,
            ..TypeAccounting::default()
        };
        let mut sum_e = 0u64;
        let mut idle_lent = 0u32;
        for s in self.share_indices() {
            let st = self.st(s, t);
            let used = st.running_usage + st.stopping_usage;
            sum_e += u64::from(st.entitlement);
            acc.in_use += used;
            acc.borrowed += used.saturating_sub(st.entitlement);
            if self.shares[s.index()].config.strategy.lends() {
                idle_lent += st.entitlement.saturating_sub(used);
            }
        }
        acc.unassigned = u32::try_from(u64::from(fleet).saturating_sub(sum_e)).unwrap_or(0);
        acc.lendable = acc.unassigned + idle_lent;
        acc
    }

    /// Running jobs of a share and type that are on borrowed capacity, in
    /// (priority desc, start asc) order.
    pub fn borrowed_jobs(&self, s: ShareIdx, t: TypeIdx) -> Vec<JobId> {
        let st = self.st(s, t);
        let order: Vec<RunKey> = st.running.iter().copied().collect();
        let ckpt_first = self.shares[s.index()]
            .config
            .protections
            .borrow_requires_checkpoint;
        borrowed_jobs(&order, st.entitlement, ckpt_first)
            .into_iter()
            .map(|k| k.job)
            .collect()
    }

    /// Whether a running job is on borrowed capacity.
    pub fn is_on_borrowed_capacity(&self, id: JobId) -> bool {
        self.jobs.get(&id).is_some_and(|job| {
            job.status.holds_instances()
                && job.stopping.is_none()
                && self
                    .borrowed_jobs(job.spec.share, job.spec.instance_type)
                    .contains(&id)
        })
    }

    /// The RUNNABLE jobs of a share and type, in line order.
    pub fn runnable_in_order(&self, s: ShareIdx, t: TypeIdx) -> Vec<JobId> {
        self.st(s, t)
            .runnable
            .in_order()
            .into_iter()
            .map(|(k, _)| k.job)
            .collect()
    }

    pub fn runnable_count(&self) -> usize {
        self.shares
            .iter()
            .flat_map(|s| s.types.iter())
            .map(|st| st.runnable.len())
            .sum()
    }

    // ----- never fits -------------------------------------------------------

    /// The limit that keeps a job of `count` instances of `t` in share `s`
    /// (that does or does not checkpoint) from ever running under the current
    /// configuration and fleet, if any.
    pub fn never_fits(
        &self,
        s: ShareIdx,
        t: TypeIdx,
        count: u32,
        checkpoints: bool,
    ) -> Option<NeverFits> {
        let share = &self.shares[s.index()].config;
        let entitlement = self.st(s, t).entitlement;
        if let Some(queue_limit) = self
            .queue_limits
            .iter()
            .find(|l| l.capacity_unit == self.types[t.index()])
            .map(|l| config::clamp_u32(l.max_capacity))
        {
            if count > queue_limit {
                return Some(NeverFits::QueueLimit { count, queue_limit });
            }
        }
        match share.strategy {
            Strategy::Reserve | Strategy::Lend if count > entitlement => {
                return Some(NeverFits::ShareLimit {
                    count,
                    max_capacity: entitlement,
                })
            }
            Strategy::LendAndBorrow if share.borrow_limit >= 0 => {
                let max_holding = share.max_holding(entitlement);
                if count > max_holding {
                    return Some(NeverFits::ShareLimitPlusBorrowLimit { count, max_holding });
                }
            }
            _ => {}
        }
        if share.strategy == Strategy::LendAndBorrow
            && share.protections.borrow_requires_checkpoint
            && !checkpoints
            && count > entitlement
        {
            return Some(NeverFits::BorrowRequiresCheckpoint {
                count,
                max_capacity: entitlement,
            });
        }
        let fleet = self.effective_fleet(t);
        if fleet > 0 && count > fleet {
            return Some(NeverFits::FleetMaximum { count, fleet });
        }
        if share.strategy == Strategy::LendAndBorrow && count > entitlement && fleet > 0 {
            // What the share could ever hold: its own entitlement plus everything
            // that could be lent to it (unassigned capacity and other lenders).
            let mut sum_e = 0u64;
            let mut others_lendable = 0u64;
            for o in self.share_indices() {
                let e = u64::from(self.st(o, t).entitlement);
                sum_e += e;
                if o != s && self.shares[o.index()].config.strategy.lends() {
                    others_lendable += e;
                }
            }
            let unassigned = u64::from(fleet).saturating_sub(sum_e);
            let reachable =
                (u64::from(entitlement) + unassigned + others_lendable).min(u64::from(fleet));
            let reachable = u32::try_from(reachable).unwrap_or(u32::MAX);
            if count > reachable {
                return Some(NeverFits::AllBorrowableCapacity { count, reachable });
            }
        }
        None
    }

    // ----- submit and job updates ------------------------------------------

    /// Validates and queues a job; it is RUNNABLE when this returns. Every
    /// problem is reported at once. A job that the configuration alone forbids
    /// is rejected; one that only the current fleet forbids is accepted and
    /// waits with a `MISCONFIGURATION:` reason (executors may still register).
    pub fn submit(&mut self, spec: JobSpec, now: Time) -> Result<JobId, JobError> {
        let mut problems = Vec::new();
        let problem = |field: &str, message: String| ConfigProblem {
            field: field.into(),
            message,
        };
        if self.queue_state == State::Disabled {
            problems.push(problem(
                "jobQueue",
                format!(
                    "job queue {:?} is DISABLED and accepts no new jobs",
                    self.queue_name
                ),
            ));
        }
        let share_ok =
            spec.share.index() < self.shares.len() && !self.shares[spec.share.index()].deleted;
        if !share_ok {
            problems.push(problem(
                "quotaShareName",
                "no such quota share in this queue".into(),
            ));
        } else if self.shares[spec.share.index()].config.state == State::Disabled {
            problems.push(problem(
                "quotaShareName",
                format!(
                    "quota share {:?} is DISABLED and accepts no new jobs",
                    self.shares[spec.share.index()].config.name
                ),
            ));
        }
        if spec.instance_type.index() >= self.types.len() {
            problems.push(problem("instanceType", "unknown instance type".into()));
        }
        if spec.count == 0 {
            problems.push(problem("instanceCount", "must be >= 1".into()));
        }
        problems.extend(config::priority_problem(spec.priority));
        if !(1..=10).contains(&spec.retry_attempts) {
            problems.push(problem(
                "retryStrategy.attempts",
                format!("must be 1..=10, got {}", spec.retry_attempts),
            ));
        }
        if spec.attempt_timeout_secs == Some(0) {
            problems.push(problem(
                "timeoutConfig.attemptDurationSeconds",
                "must be >= 1".into(),
            ));
        }
        if share_ok && spec.instance_type.index() < self.types.len() && spec.count > 0 {
            if let Some(limit) =
                self.never_fits(spec.share, spec.instance_type, spec.count, spec.checkpoints)
            {
                if limit.is_configuration_only() {
                    problems.push(problem(
                        "instanceCount",
                        format!("MISCONFIGURATION: {}", limit.describe()),
                    ));
                }
            }
        }
        if !problems.is_empty() {
            return Err(JobError::Invalid(problems));
        }
        let id = self.jobs.next_id();
        let job = Job {
            id,
            spec,
            status: JobStatus::Submitted,
            status_reason: StatusReason::None,
            submitted_at: now,
            runnable_since: now,
            attempts: Vec::new(),
            preempted_attempts: 0,
            failed_attempts: 0,
            host_lost_attempts: 0,
            stopping: None,
            last_checkpoint: None,
        };
        self.jobs.insert(job);
        self.make_runnable(id, now, StatusReason::Waiting(WaitReason::Queued));
        Ok(id)
    }

    pub(crate) fn job_mut(&mut self, id: JobId) -> Result<&mut Job, JobError> {
        self.jobs.get_mut(&id).ok_or(JobError::NotFound(id))
    }

    /// Something about type `t` changed: the next pass must look at it.
    pub(crate) fn unsettle(&mut self, t: TypeIdx) {
        self.settled[t.index()] = None;
    }

    fn transition(&mut self, id: JobId, to: JobStatus, reason: StatusReason, now: Time) {
        let (t, from) = (self.jobs[&id].spec.instance_type, self.jobs[&id].status);
        // Reason updates and SCHEDULED -> STARTING -> RUNNING change nothing
        // a pass looks at.
        if from != to && !(from.holds_instances() && to.holds_instances()) {
            self.unsettle(t);
        }
        if to != JobStatus::Runnable {
            self.claims.remove(&id);
        }
        let job = self.jobs.get_mut(&id).expect("transition of a known job");
        let from = job.status;
        job.status = to;
        job.status_reason = reason;
        self.events.push(JobEvent {
            at: now,
            job: id,
            from,
            to,
            reason,
        });
    }

    fn queue_key(job: &Job) -> QueueKey {
        QueueKey {
            priority: Reverse(job.spec.priority),
            runnable_since: job.runnable_since,
            job: job.id,
        }
    }

    fn run_key(job: &Job) -> RunKey {
        RunKey {
            priority: Reverse(job.spec.priority),
            started: job.started_at().unwrap_or(job.runnable_since),
            job: job.id,
            count: job.spec.count,
            checkpoints: job.spec.checkpoints,
        }
    }

    fn make_runnable(&mut self, id: JobId, now: Time, reason: StatusReason) {
        let job = self.jobs.get_mut(&id).expect("known job");
        job.runnable_since = now;
        job.stopping = None;
        let key = Self::queue_key(job);
        let (s, t, count, ckpt) = (
            job.spec.share,
            job.spec.instance_type,
            job.spec.count,
            job.spec.checkpoints,
        );
        self.st_mut(s, t).runnable.insert(key, count, ckpt);
        self.unexplained.insert(id);
        self.transition(id, JobStatus::Runnable, reason, now);
    }

    /// `UpdateServiceJob`: a new `schedulingPriority` for a RUNNABLE or running
    /// job, used from the next pass on (which may preempt).
    pub fn update_priority(&mut self, id: JobId, priority: u32) -> Result<u32, JobError> {
        if let Some(problem) = config::priority_problem(priority) {
            return Err(JobError::Invalid(vec![problem]));
        }
        let job = self.jobs.get(&id).ok_or(JobError::NotFound(id))?;
        if job.status.is_final() {
            return Err(JobError::WrongState {
                job: id,
                status: job.status,
                action: "updating the priority",
                needs: "RUNNABLE, SCHEDULED, STARTING or RUNNING",
            });
        }
        let old = job.spec.priority;
        let (s, t, count, ckpt) = (
            job.spec.share,
            job.spec.instance_type,
            job.spec.count,
            job.spec.checkpoints,
        );
        let (qkey, rkey, status, stopping) = (
            Self::queue_key(job),
            Self::run_key(job),
            job.status,
            job.stopping,
        );
        self.unsettle(t);
        let job = self.jobs.get_mut(&id).expect("checked above");
        job.spec.priority = priority;
        let (new_q, new_r) = (Self::queue_key(job), Self::run_key(job));
        let st = self.st_mut(s, t);
        if status == JobStatus::Runnable && st.runnable.remove(&qkey, count, ckpt) {
            st.runnable.insert(new_q, count, ckpt);
        } else if status.holds_instances() && stopping.is_none() && st.running.remove(&rkey) {
            st.running.insert(new_r);
        }
        Ok(old)
    }

    /// `TerminateServiceJob`: a RUNNABLE job fails at once; a running one is
    /// asked to stop (with its grace period) and ends FAILED, `CANCELLED`.
    /// Returns true when a stop must be sent to the executor.
    pub fn terminate(&mut self, id: JobId, now: Time) -> Result<bool, JobError> {
        let job = self.jobs.get(&id).ok_or(JobError::NotFound(id))?;
        match job.status {
            JobStatus::Submitted | JobStatus::Runnable => {
                self.remove_runnable(id);
                self.transition(id, JobStatus::Failed, StatusReason::Cancelled, now);
                Ok(false)
            }
            s if s.holds_instances() => {
                if job.stopping.is_some_and(|c| c == StopCause::Cancelled) {
                    return Ok(false);
                }
                self.begin_stop(
                    id,
                    StopCause::Cancelled,
                    StatusReason::CancelInProgress,
                    now,
                );
                Ok(true)
            }
            status => Err(JobError::WrongState {
                job: id,
                status,
                action: "terminating",
                needs: "not yet SUCCEEDED or FAILED",
            }),
        }
    }

    fn remove_runnable(&mut self, id: JobId) {
        let job = &self.jobs[&id];
        let (key, s, t, count, ckpt) = (
            Self::queue_key(job),
            job.spec.share,
            job.spec.instance_type,
            job.spec.count,
            job.spec.checkpoints,
        );
        self.st_mut(s, t).runnable.remove(&key, count, ckpt);
        self.unexplained.remove(&id);
    }

    /// Moves a running job to "being stopped": it keeps its instances (and its
    /// status) until the executor reports the attempt ended.
    pub(crate) fn begin_stop(
        &mut self,
        id: JobId,
        cause: StopCause,
        reason: StatusReason,
        now: Time,
    ) {
        let t = self.jobs[&id].spec.instance_type;
        self.unsettle(t);
        let job = self.jobs.get_mut(&id).expect("known job");
        let already = job.stopping.is_some();
        job.stopping = Some(cause);
        let status = job.status;
        self.transition(id, status, reason, now);
        let job = &self.jobs[&id];
        if already {
            return;
        }
        let key = Self::run_key(job);
        let deadline = job
            .spec
            .attempt_timeout_secs
            .and_then(|secs| job.started_at().map(|t| t.plus_secs(secs)));
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if let Some(deadline) = deadline {
            self.deadlines.remove(&(deadline, id));
        }
        let checkpoints = self.jobs[&id].spec.checkpoints;
        let st = self.st_mut(s, t);
        st.running.remove(&key);
        st.running_usage -= count;
        st.stopping_usage += count;
        if !checkpoints {
            st.stopping_noncheckpointing += count;
        }
    }

    // ----- executor reports -------------------------------------------------

    pub(crate) fn current_attempt_mut(
        &mut self,
        id: JobId,
        attempt: u32,
    ) -> Result<&mut Attempt, JobError> {
        let job = self.job_mut(id)?;
        match job.attempts.last_mut() {
            Some(a) if a.number == attempt && a.outcome.is_none() => Ok(a),
            _ => Err(JobError::StaleAttempt { job: id, attempt }),
        }
    }

    /// The executor is restoring the checkpoint and launching the process.
    pub fn attempt_starting(
        &mut self,
        id: JobId,
        attempt: u32,
        restored: Option<CheckpointMark>,
        now: Time,
    ) -> Result<(), JobError> {
        let a = self.current_attempt_mut(id, attempt)?;
        a.started_at = Some(now);
        a.restored = restored;
        let reason = self.jobs[&id].status_reason;
        if self.jobs[&id].status == JobStatus::Scheduled {
            self.transition(id, JobStatus::Starting, reason, now);
        }
        Ok(())
    }

    /// The process is up.
    pub fn attempt_running(&mut self, id: JobId, attempt: u32, now: Time) -> Result<(), JobError> {
        let a = self.current_attempt_mut(id, attempt)?;
        a.running_at = Some(now);
        a.started_at.get_or_insert(now);
        let reason = self.jobs[&id].status_reason;
        if matches!(
            self.jobs[&id].status,
            JobStatus::Scheduled | JobStatus::Starting
        ) {
            self.transition(id, JobStatus::Running, reason, now);
        }
        Ok(())
    }

    /// A checkpoint of the attempt was committed (its manifest written).
    pub fn checkpoint_committed(
        &mut self,
        id: JobId,
        attempt: u32,
        mark: CheckpointMark,
    ) -> Result<(), JobError> {
        let a = self.current_attempt_mut(id, attempt)?;
        a.last_checkpoint = Some(mark);
        self.job_mut(id)?.last_checkpoint = Some(mark);
        Ok(())
    }

    /// The attempt's process ended (exit code, or None if killed by a signal).
    /// If the scheduler had asked it to stop, the stop decides the outcome
    /// (a trainer exits 0 after saving on SIGTERM; that is not success).
    pub fn attempt_ended(
        &mut self,
        id: JobId,
        attempt: u32,
        exit_code: Option<i32>,
        now: Time,
    ) -> Result<AttemptOutcome, JobError> {
        self.current_attempt_mut(id, attempt)?;
        let job = &self.jobs[&id];
        let outcome = match job.stopping {
            Some(StopCause::Preempted { kind, .. }) => kind.outcome(),
            Some(StopCause::TimedOut) => AttemptOutcome::TimedOut,
            Some(StopCause::Cancelled) => AttemptOutcome::Cancelled,
            None if exit_code == Some(0) => AttemptOutcome::Succeeded,
            None => AttemptOutcome::Failed,
        };
        self.end_attempt(id, exit_code, outcome, now);
        Ok(outcome)
    }

    /// The attempt's executor stopped heartbeating: the attempt ends HOST_LOST.
    pub fn attempt_lost(&mut self, id: JobId, attempt: u32, now: Time) -> Result<(), JobError> {
        self.current_attempt_mut(id, attempt)?;
        self.end_attempt(id, None, AttemptOutcome::HostLost, now);
        Ok(())
    }

    fn end_attempt(
        &mut self,
        id: JobId,
        exit_code: Option<i32>,
        outcome: AttemptOutcome,
        now: Time,
    ) {
        // Release the instances.
        let job = &self.jobs[&id];
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if job.stopping.is_some() {
            let checkpoints = job.spec.checkpoints;
            let st = self.st_mut(s, t);
            st.stopping_usage -= count;
            if !checkpoints {
                st.stopping_noncheckpointing -= count;
            }
        } else {
            let key = Self::run_key(job);
            let deadline = job
                .spec
                .attempt_timeout_secs
                .and_then(|secs| job.started_at().map(|t| t.plus_secs(secs)));
            if let Some(deadline) = deadline {
                self.deadlines.remove(&(deadline, id));
            }
            let st = self.st_mut(s, t);
            st.running.remove(&key);
            st.running_usage -= count;
        }
        let job = self.jobs.get_mut(&id).expect("known job");
        let a = job.attempts.last_mut().expect("current attempt exists");
        // The placement is kept: where the attempt ran.
        let placement = a.placement.clone();
        a.stopped_at = Some(now);
        a.exit_code = exit_code;
        a.outcome = Some(outcome);
        self.release_slots(id, t, &placement);
        let job = self.jobs.get_mut(&id).expect("known job");
        let share_deleted = self.shares[s.index()].deleted;
        let next = match outcome {
            AttemptOutcome::Succeeded => (JobStatus::Succeeded, StatusReason::Succeeded),
            AttemptOutcome::Cancelled if share_deleted => {
                (JobStatus::Failed, StatusReason::ShareDeleted)
            }
            AttemptOutcome::Cancelled => (JobStatus::Failed, StatusReason::Cancelled),
            o if o.is_preemption() => {
                job.preempted_attempts += 1;
                let spent = job
                    .spec
                    .preemption_retries
                    .is_some_and(|max| job.preempted_attempts > max);
                if spent {
                    (
                        JobStatus::Failed,
                        StatusReason::PreemptionRetriesExhausted(o),
                    )
                } else {
                    (JobStatus::Runnable, StatusReason::Requeued(o))
                }
            }
            AttemptOutcome::HostLost => {
                job.host_lost_attempts += 1;
                if job.host_lost_attempts > self.host_lost_cap {
                    (JobStatus::Failed, StatusReason::HostLostCapExceeded)
                } else {
                    (JobStatus::Runnable, StatusReason::Requeued(outcome))
                }
            }
            _ => {
                // Failed or timed out: spends retryStrategy.attempts.
                job.failed_attempts += 1;
                let reason_text = outcome.as_str();
                let rule = job
                    .spec
                    .evaluate_on_exit
                    .iter()
                    .find(|r| r.matches(exit_code, reason_text));
                let action = rule.map_or(RetryAction::Retry, |r| r.action);
                if action == RetryAction::Retry && job.failed_attempts < job.spec.retry_attempts {
                    (JobStatus::Runnable, StatusReason::Requeued(outcome))
                } else {
                    (JobStatus::Failed, StatusReason::AttemptsExhausted(outcome))
                }
            }
        };
        match next {
            (JobStatus::Runnable, reason) => self.make_runnable(id, now, reason),
            (status, reason) => {
                self.jobs.get_mut(&id).expect("known job").stopping = None;
                self.transition(id, status, reason, now);
            }
        }
    }

    // ----- fleet ------------------------------------------------------------

    // ----- configuration ----------------------------------------------------

    /// Applies a whole new queue configuration (validated whole first). Shares
    /// are matched by name: new ones are created, missing ones deleted (they
    /// must be DISABLED first; deleting terminates their jobs). Lowering a
    /// limit stops nothing: the excess becomes borrowed and is reclaimed when
    /// another share needs it. Returns the jobs that must be told to stop.
    pub fn update_queue(
        &mut self,
        queue: QueueConfig,
        now: Time,
    ) -> Result<Vec<JobId>, ConfigError> {
        config::validate_queue(&queue)?;
        let mut problems = Vec::new();
        if queue.name != self.queue_name {
            problems.push(ConfigProblem {
                field: "jobQueueName".into(),
                message: format!("is {:?}; this is queue {:?}", queue.name, self.queue_name),
            });
        }
        for slot in self.shares.iter().filter(|s| !s.deleted) {
            let kept = queue.shares.iter().any(|n| n.name == slot.config.name);
            if !kept && slot.config.state != State::Disabled {
                problems.push(ConfigProblem {
                    field: "quotaShares".into(),
                    message: format!(
                        "quota share {:?} would be deleted but is ENABLED; set its state to DISABLED first",
                        slot.config.name
                    ),
                });
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError(problems));
        }
        Ok(self.install_queue(queue, now))
    }

    fn install_queue(&mut self, queue: QueueConfig, now: Time) -> Vec<JobId> {
        self.settled.iter_mut().for_each(|s| *s = None);
        self.queue_state = queue.state;
        self.queueing = queue.queueing_strategy;
        self.queue_limits = queue.capacity_limits.clone();
        for limit in queue.shares.iter().flat_map(|s| s.capacity_limits.iter()) {
            self.intern_type(&limit.capacity_unit);
        }
        let mut to_delete = Vec::new();
        for (i, slot) in self.shares.iter().enumerate() {
            if !slot.deleted && !queue.shares.iter().any(|n| n.name == slot.config.name) {
                to_delete.push(ShareIdx(u16::try_from(i).expect("share slots fit in u16")));
            }
        }
        for share in queue.shares {
            let existing = self.share_idx(&share.name);
            let types: Vec<u32> = self.types.iter().map(|t| share.entitlement(t)).collect();
            match existing {
                Some(s) => {
                    let slot = &mut self.shares[s.index()];
                    for (st, e) in slot.types.iter_mut().zip(types) {
                        st.entitlement = e;
                    }
                    slot.config = share;
                }
                None => self.shares.push(ShareSlot {
                    config: share,
                    deleted: false,
                    types: types
                        .into_iter()
                        .map(|entitlement| ShareType {
                            entitlement,
                            ..ShareType::default()
                        })
                        .collect(),
                }),
            }
        }
        let mut stops = Vec::new();
        for s in to_delete {
            self.shares[s.index()].deleted = true;
            let ids: Vec<JobId> = self
                .jobs
                .values()
                .filter(|j| j.spec.share == s && !j.status.is_final())
                .map(|j| j.id)
                .collect();
            for id in ids {
                if self.jobs[&id].status == JobStatus::Runnable {
                    self.remove_runnable(id);
                    self.transition(id, JobStatus::Failed, StatusReason::ShareDeleted, now);
                } else if self.jobs[&id].status.holds_instances() {
                    if self.jobs[&id].stopping.is_none() {
                        stops.push(id);
                    }
                    self.begin_stop(
                        id,
                        StopCause::Cancelled,
                        StatusReason::CancelInProgress,
                        now,
                    );
                }
            }
        }
        stops
    }

    // ----- applying a pass --------------------------------------------------

    /// Applies a plan made by [`Cluster::schedule`] at `now`.
    pub fn apply(&mut self, plan: &crate::pass::Plan) {
        let now = plan.now;
        for t in &plan.settled {
            self.settled[t.index()] = Some(plan.wake_at);
        }
        for stop in &plan.timeouts {
            self.begin_stop(
                *stop,
                StopCause::TimedOut,
                StatusReason::TimeoutInProgress,
                now,
            );
        }
        for p in &plan.preemptions {
            self.claims.insert(p.for_job);
            let cause = StopCause::Preempted {
                kind: p.kind,
                for_job: p.for_job,
            };
            let reason = StatusReason::PreemptionInProgress {
                kind: p.kind,
                for_job: p.for_job,
            };
            self.begin_stop(p.job, cause, reason, now);
            if p.kind != crate::job::PreemptionKind::InShare {
                let job = &self.jobs[&p.job];
                let (s, t) = (job.spec.share, job.spec.instance_type);
                self.st_mut(s, t).reclaimed_at = Some(now);
            }
        }
        for start in &plan.starts {
            let id = start.job;
            self.remove_runnable(id);
            let job = self.jobs.get_mut(&id).expect("planned job exists");
            debug_assert!(!plan.settled.contains(&job.spec.instance_type));
            let number = job.attempts.len() as u32 + 1;
            job.attempts.push(Attempt {
                number,
                scheduled_at: now,
                started_at: None,
                running_at: None,
                stopped_at: None,
                exit_code: None,
                outcome: None,
                restored: None,
                last_checkpoint: None,
                ranks: vec![RankState::Commanded; start.placement.len()],
                placement: start.placement.clone(),
                first_failure: None,
                ranks_stopping: false,
            });
            let key = Self::run_key(job);
            let deadline = job
                .spec
                .attempt_timeout_secs
                .map(|secs| now.plus_secs(secs));
            let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
            if let Some(deadline) = deadline {
                self.deadlines.insert((deadline, id));
            }
            self.hold_slots(id, t, &start.placement);
            let st = self.st_mut(s, t);
            st.running.insert(key);
            st.running_usage += count;
            self.transition(
                id,
                JobStatus::Scheduled,
                StatusReason::Scheduled {
                    borrowed: start.borrowed,
                },
                now,
            );
        }
        // A changed waiting reason is an event too: it tells users why a job waits.
        for (id, wait) in &plan.reasons {
            self.unexplained.remove(id);
            let reason = StatusReason::Waiting(*wait);
            let changed = self.jobs.get(id).is_some_and(|job| {
                job.status == JobStatus::Runnable && job.status_reason != reason
            });
            if changed {
                self.transition(*id, JobStatus::Runnable, reason, now);
            }
        }
    }

    /// The next attempt number a start of `id` would get.
    pub fn next_attempt(&self, id: JobId) -> u32 {
        self.jobs
            .get(&id)
            .map_or(1, |j| j.attempts.len() as u32 + 1)
    }
}
