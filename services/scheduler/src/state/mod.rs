//! The scheduler's state: a projection of the `QM_LOG` stream. Applying the
//! same entries in the same order gives the same state (no clock reads, no
//! hash-map iteration that decides anything), which is what makes a restart
//! or a new leader safe: it replays the log and continues.
//!
//! Applying an entry returns its [`Effects`]: job events to publish and
//! commands for executors. A replaying scheduler drops them (they were
//! published when the entry was first applied); resends are derived from the
//! state itself (attempts whose ranks have not reported, `stopping` jobs).
//!
//! Nothing here decides: where a job runs, which ranks make an attempt and
//! how it ends, and what a lost executor does to its attempts are the core's
//! (`qm_core::nodes`). This module turns log entries into core calls and the
//! core's answers into commands and events.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the state, applying an entry, submits and configuration |
//! | `positions.rs` | replaying the log, event positions |
//! | `executors.rs` | registrations, lost executors, reports, checkpoints |
//! | `passes.rs` | running a pass and applying a stored one |
//! | `commands.rs` | start and stop commands, events |
//! | `views.rs` | what `DescribeServiceJob` shows |

mod commands;
mod drills;
mod environments;
mod executors;
pub mod governance;
mod meta;
mod passes;
mod positions;
pub mod usage;
mod views;

#[cfg(test)]
mod memory;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use qm_core::{Cluster, JobId, PreemptionKind, Time};
use qm_wire::messages::{
    JobStateChange, PreemptionEvent, RegisterExecutor, ServiceJob, SubmitServiceJob,
};
use qm_wire::system::{ExecCommand, LogEntry, QueueDocument};
use qm_wire::to_core as convert;
use serde::{Deserialize, Serialize};

pub use meta::JobMeta;
pub use positions::{Cut, Logged, Position, Positions, Replay};

/// Something to publish after an entry was applied (live only).
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Job(JobStateChange, String),
    Preemption(PreemptionEvent, String),
    Command(String, Box<ExecCommand>),
}

pub type Effects = Vec<Effect>;

impl Effect {
    /// A job or preemption event (not a command).
    pub fn is_event(&self) -> bool {
        matches!(self, Effect::Job(..) | Effect::Preemption(..))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredQueueState")]
pub struct QueueState {
    pub cluster: Cluster,
    /// Each job's core id by its public id (the key is its `meta`'s).
    pub ids: HashMap<Arc<str>, JobId>,
    pub meta: BTreeMap<JobId, JobMeta>,
    pub config_revision: u64,
    /// Shares whose containers may not run as root (`runAsNonRoot`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub non_root_shares: std::collections::BTreeSet<String>,
    /// Resume drills' public ids and their jobs', by the core's drill id
    /// (the jobs' outlive their archiving).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drill_ids: BTreeMap<u64, drills::DrillNames>,
    /// The policy-stability record: share -> week start -> counts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub governance: BTreeMap<String, BTreeMap<u64, governance::WeekRecord>>,
    /// Jobs lent capacity is being reclaimed for, since when (ms).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reclaim_pending: BTreeMap<JobId, u64>,
}

impl QueueState {
    /// The public id of a job (its core id if unknown).
    pub fn public_id(&self, id: JobId) -> String {
        self.meta
            .get(&id)
            .map_or_else(|| id.to_string(), |m| m.public_id.to_string())
    }

    /// A job enters the queue's indexes under its public id.
    fn insert(&mut self, id: JobId, public_id: &str, submit: &SubmitServiceJob) {
        let public: Arc<str> = public_id.into();
        self.ids.insert(Arc::clone(&public), id);
        self.meta.insert(id, JobMeta::new(public, submit));
    }
}

/// [`QueueState`] as a snapshot holds it: read, its id index is rebuilt
/// from the jobs' own ids, so that each public id is held once.
#[derive(Deserialize)]
struct StoredQueueState {
    cluster: Cluster,
    ids: HashMap<String, JobId>,
    meta: BTreeMap<JobId, JobMeta>,
    config_revision: u64,
    #[serde(default)]
    non_root_shares: std::collections::BTreeSet<String>,
    #[serde(default)]
    drill_ids: BTreeMap<u64, drills::DrillNames>,
    #[serde(default)]
    governance: BTreeMap<String, BTreeMap<u64, governance::WeekRecord>>,
    #[serde(default)]
    reclaim_pending: BTreeMap<JobId, u64>,
}

impl From<StoredQueueState> for QueueState {
    fn from(s: StoredQueueState) -> QueueState {
        let mut ids: HashMap<Arc<str>, JobId> = s
            .meta
            .iter()
            .map(|(id, m)| (Arc::clone(&m.public_id), *id))
            .collect();
        // An id without its job's record (none is written so) is kept.
        for (public, id) in s.ids {
            if !ids.contains_key(public.as_str()) {
                ids.insert(public.into(), id);
            }
        }
        QueueState {
            cluster: s.cluster,
            ids,
            meta: s.meta,
            config_revision: s.config_revision,
            non_root_shares: s.non_root_shares,
            drill_ids: s.drill_ids,
            governance: s.governance,
            reclaim_pending: s.reclaim_pending,
        }
    }
}

/// An executor as it registered. Its instances are a node of its queue's
/// cluster (`qm_core::nodes`), which knows what runs where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorState {
    pub registration: RegisterExecutor,
    pub live: bool,
}

/// A job the scheduler could not accept after admission stored it (its queue
/// or share changed in between): it is reported FAILED with the reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    pub submit: SubmitServiceJob,
    pub reason: String,
    pub at: u64,
}

/// A job of a queue: the key of per-job sets across queues.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QueueJob {
    pub queue: String,
    pub job: JobId,
}

impl QueueJob {
    pub fn new(queue: &str, job: JobId) -> QueueJob {
        QueueJob {
            queue: queue.to_string(),
            job,
        }
    }
}

/// Everything here is in a snapshot (see `snapshot.rs`): what is added
/// must be serializable and keep old snapshots readable (`serde(default)`).
/// A snapshot also holds `job_queue` (each public job id's queue), which
/// schedulers before issue 34 kept and read; this one finds a job's queue
/// in the queues' id indexes and ignores the map when it reads one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "StoredState")]
pub struct State {
    pub queues: BTreeMap<String, QueueState>,
    pub executors: BTreeMap<String, ExecutorState>,
    /// Attempts the scheduler asked to stop (all their ranks), not yet ended.
    pub stopping: BTreeSet<QueueJob>,
    pub rejected: BTreeMap<String, Rejected>,
    pub epoch: u64,
    /// The log's time: never goes backwards.
    pub clock: u64,
    /// Deleted queues and the configuration revision each was deleted at:
    /// a configuration of theirs at or before it is never applied again
    /// (a newer one makes the queue anew).
    pub deleted_queues: BTreeMap<String, u64>,
}

/// [`State`] as a snapshot holds it (see [`State`] on `job_queue`).
#[derive(Deserialize)]
struct StoredState {
    queues: BTreeMap<String, QueueState>,
    executors: BTreeMap<String, ExecutorState>,
    stopping: BTreeSet<QueueJob>,
    rejected: BTreeMap<String, Rejected>,
    #[serde(default)]
    #[allow(dead_code)]
    job_queue: serde::de::IgnoredAny,
    epoch: u64,
    clock: u64,
    #[serde(default)]
    deleted_queues: BTreeMap<String, u64>,
}

impl From<StoredState> for State {
    fn from(s: StoredState) -> State {
        State {
            queues: s.queues,
            executors: s.executors,
            stopping: s.stopping,
            rejected: s.rejected,
            epoch: s.epoch,
            clock: s.clock,
            deleted_queues: s.deleted_queues,
        }
    }
}

/// Each public job id's queue, as a map (written for the schedulers that
/// read it; see [`State`]).
struct JobQueues<'a>(&'a BTreeMap<String, QueueState>);

impl Serialize for JobQueues<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let jobs = self.0.values().map(|qs| qs.ids.len()).sum();
        let mut map = s.serialize_map(Some(jobs))?;
        for (q, qs) in self.0 {
            for public in qs.ids.keys() {
                map.serialize_entry(&**public, q)?;
            }
        }
        map.end()
    }
}

impl Serialize for State {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let fields = if self.deleted_queues.is_empty() { 7 } else { 8 };
        let mut out = s.serialize_struct("State", fields)?;
        out.serialize_field("queues", &self.queues)?;
        out.serialize_field("executors", &self.executors)?;
        out.serialize_field("stopping", &self.stopping)?;
        out.serialize_field("rejected", &self.rejected)?;
        out.serialize_field("job_queue", &JobQueues(&self.queues))?;
        out.serialize_field("epoch", &self.epoch)?;
        out.serialize_field("clock", &self.clock)?;
        if !self.deleted_queues.is_empty() {
            out.serialize_field("deleted_queues", &self.deleted_queues)?;
        }
        out.end()
    }
}

fn kind_of(name: &str) -> Option<PreemptionKind> {
    [
        PreemptionKind::CrossShare,
        PreemptionKind::InShare,
        PreemptionKind::LimitReduced,
        PreemptionKind::BudgetExhausted,
        PreemptionKind::Rebalance,
    ]
    .into_iter()
    .find(|k| k.as_str() == name)
}

impl State {
    /// Applies one log entry stored at `at` (ms since the epoch).
    pub fn apply(&mut self, entry: LogEntry, at: u64) -> Effects {
        // A decision the leader logged took effect at its own time (a
        // pass's `now`, the `at` of a priority change, a termination, a
        // loss or an archive), not when the log stored it: every replica
        // applies it at that time, as the leader did (the usage ledger and
        // the attempts' times are then the same everywhere). A lease entry
        // changes nothing that has a time.
        let at = match &entry {
            LogEntry::Pass(record) => record.now,
            LogEntry::Priority { at, .. }
            | LogEntry::Terminate { at, .. }
            | LogEntry::ExecutorLost { at, .. }
            | LogEntry::Archive { at, .. }
            | LogEntry::QueueDeleted { at, .. } => *at,
            LogEntry::Leader { .. } => self.clock,
            _ => at,
        };
        self.clock = self.clock.max(at);
        let now = self.clock;
        let touched = self.touched_by(&entry);
        // Whatever this entry changes changes at its time (the ledger of
        // usage counts up to it first).
        for qs in self.queues.values_mut() {
            qs.cluster.advance_usage(Time(now));
        }
        let mut fx = Vec::new();
        match entry {
            LogEntry::Submit { job_id, job, .. } => self.submit(job_id, job, now),
            LogEntry::Drill {
                drill_id,
                resumed_job_id,
                uninterrupted_job_id,
                job,
                seed,
                ..
            } => self.drill(
                drill_id,
                [resumed_job_id, uninterrupted_job_id],
                job,
                seed,
                now,
            ),
            LogEntry::Config {
                queue,
                revision,
                principal,
                ..
            } => self.configure(queue, revision, principal, now, &mut fx),
            LogEntry::Register(r) => self.register(r, now, &mut fx),
            LogEntry::Report(r) => self.report(r, now, &mut fx),
            LogEntry::Reports { reports } => {
                for r in reports {
                    self.report(r, now, &mut fx);
                }
            }
            LogEntry::Checkpoint(c) => self.checkpoint(c, &mut fx),
            LogEntry::CheckpointLagging(lag) => {
                // Only the attempt's own checkpoint node says it lags.
                let located = self
                    .locate(&lag.job_id)
                    .filter(|(q, id)| self.syncing_node(q, *id, lag.attempt) == lag.node);
                if let Some((q, id)) = located {
                    let _ = self.queue_mut(&q).cluster.checkpoint_lagging(
                        id,
                        lag.attempt,
                        Time(lag.since),
                        lag.error,
                    );
                }
            }
            LogEntry::Leader { epoch, .. } => self.epoch = self.epoch.max(epoch),
            LogEntry::Pass(record) => {
                self.clock = self.clock.max(record.now);
                self.apply_pass(&record, None, &mut fx)
            }
            LogEntry::Priority {
                job_id,
                scheduling_priority,
                principal,
                ..
            } => {
                if let Some((q, id)) = self.locate(&job_id) {
                    let changed = self
                        .queue_mut(&q)
                        .cluster
                        .update_priority(id, scheduling_priority)
                        .is_ok();
                    if changed {
                        let share = self.share_name(&q, id);
                        if let Some(w) = self.week(&q, &share, now) {
                            *w.priority_changes
                                .entry(principal.unwrap_or_else(|| "unknown".into()))
                                .or_default() += 1;
                        }
                    }
                }
            }
            LogEntry::Terminate {
                job_id, principal, ..
            } => {
                if let Some((q, id)) = self.locate(&job_id) {
                    let live = self
                        .queues
                        .get(&q)
                        .and_then(|qs| qs.cluster.job(id))
                        .is_some_and(|j| !j.status.is_final());
                    if live {
                        let share = self.share_name(&q, id);
                        if let Some(w) = self.week(&q, &share, now) {
                            *w.terminations
                                .entry(principal.unwrap_or_else(|| "unknown".into()))
                                .or_default() += 1;
                        }
                        self.note_finished(&q, id);
                    }
                    if let Ok(true) = self.queue_mut(&q).cluster.terminate(id, Time(now)) {
                        self.stopping.insert(QueueJob::new(&q, id));
                        self.stop_command(&q, id, &mut fx);
                    }
                }
            }
            LogEntry::ExecutorLost { executor_id, .. } => {
                self.lose_executor(&executor_id, now, &mut fx)
            }
            LogEntry::Archive { job_ids, .. } => self.forget(&job_ids),
            LogEntry::QueueDeleted {
                job_queue,
                revision,
                ..
            } => self.delete_queue(&job_queue, revision),
        }
        self.share_environments(touched, now);
        self.collect_events(&mut fx);
        fx
    }

    /// After loading a snapshot: the next pass looks at every type again
    /// (waiting reasons and what a pass found settled are not in the log,
    /// so a new leader derives them afresh, as after a replay).
    pub fn reconsider(&mut self) {
        for qs in self.queues.values_mut() {
            qs.cluster.reconsider();
        }
        self.share_environments(environments::Touched::All, self.clock);
    }

    fn queue_mut(&mut self, q: &str) -> &mut QueueState {
        self.queues.get_mut(q).expect("located queue exists")
    }

    /// The queue and core id of a public job id.
    pub fn locate(&self, job_id: &str) -> Option<(String, JobId)> {
        self.queues
            .iter()
            .find_map(|(q, qs)| Some((q.clone(), *qs.ids.get(job_id)?)))
    }

    /// Whether a job of this public id is in a queue.
    pub fn knows(&self, job_id: &str) -> bool {
        self.queues.values().any(|qs| qs.ids.contains_key(job_id))
    }

    /// Jobs in the queues (not counting rejected ones).
    pub fn jobs(&self) -> usize {
        self.queues.values().map(|qs| qs.ids.len()).sum()
    }

    fn submit(&mut self, job_id: String, job: SubmitServiceJob, now: u64) {
        if self.knows(&job_id) || self.rejected.contains_key(&job_id) {
            return; // a retried append of a job we already have
        }
        let Some(qs) = self.queues.get_mut(&job.job_queue) else {
            self.reject(job_id, job, "the job queue no longer exists".into(), now);
            return;
        };
        let spec = match convert::job_spec(&job, &mut qs.cluster) {
            Ok(spec) => spec,
            Err(problems) => {
                let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
                self.reject(job_id, job, text.join("; "), now);
                return;
            }
        };
        match qs.cluster.submit(spec, Time(now)) {
            Ok(id) => {
                let core = qs.cluster.job(id).expect("just submitted");
                if core.borrow_bar == Some(qm_core::BorrowBar::ResumeNotVerified) {
                    let share = qs.cluster.share_config(core.spec.share).name.clone();
                    qs.week(&share, now).missing_proof += 1;
                }
                qs.insert(id, &job_id, &job);
            }
            Err(e) => self.reject(job_id, job, e.to_string(), now),
        }
    }

    /// `DeleteJobQueue`, decided: the queue leaves the state with what is
    /// left of it (the leader decides it only once no job is), and its
    /// executors wait, registered, for a queue of that name to exist again.
    fn delete_queue(&mut self, queue: &str, revision: u64) {
        if self
            .queues
            .get(queue)
            .is_some_and(|qs| qs.config_revision > revision)
        {
            return; // made anew since (not written so by a leader)
        }
        if let Some(qs) = self.queues.remove(queue) {
            if !qs.ids.is_empty() {
                tracing::warn!(
                    queue,
                    jobs = qs.ids.len(),
                    "a deleted queue still held jobs; they go with it"
                );
            }
        }
        self.stopping.retain(|qj| qj.queue != queue);
        let kept = self.deleted_queues.entry(queue.to_string()).or_default();
        *kept = (*kept).max(revision);
    }

    /// Finished jobs archived by the leader leave the state (a job not
    /// finished, or not known, is left as it is).
    fn forget(&mut self, job_ids: &[String]) {
        for job_id in job_ids {
            if self.rejected.remove(job_id).is_some() {
                continue;
            }
            let Some((q, id)) = self.locate(job_id) else {
                continue;
            };
            let qs = self.queue_mut(&q);
            if qs.cluster.forget(id).is_ok() {
                qs.ids.remove(job_id.as_str());
                qs.meta.remove(&id);
            }
        }
    }

    /// Finished jobs (and rejected ones) that finished at or before
    /// `cutoff`, at most `limit`, as `DescribeServiceJob` shows them: what
    /// the leader archives next.
    pub fn due_for_archive(&self, cutoff: u64, limit: usize) -> Vec<ServiceJob> {
        let mut due: Vec<ServiceJob> = self
            .rejected
            .iter()
            .filter(|(_, r)| r.at <= cutoff)
            .take(limit)
            .filter_map(|(id, _)| self.describe(id, cutoff))
            .collect();
        for (q, qs) in &self.queues {
            let left = limit.saturating_sub(due.len());
            for id in qs.cluster.finished_before(Time(cutoff), left) {
                due.push(self.service_job(q, id, cutoff));
            }
        }
        due
    }

    /// The finished jobs of `queue` still in the state, as their records
    /// read at `now`, at most `limit`: archived whatever their age when the
    /// queue is being deleted.
    pub fn finished_of(&self, queue: &str, now: u64, limit: usize) -> Vec<ServiceJob> {
        let Some(qs) = self.queues.get(queue) else {
            return Vec::new();
        };
        qs.cluster
            .finished_before(Time(u64::MAX), limit)
            .into_iter()
            .map(|id| self.service_job(queue, id, now))
            .collect()
    }

    pub(crate) fn reject(
        &mut self,
        job_id: String,
        submit: SubmitServiceJob,
        reason: String,
        at: u64,
    ) {
        tracing::warn!(job = %job_id, %reason, "stored job rejected by the scheduler");
        self.rejected
            .insert(job_id, Rejected { submit, reason, at });
    }

    fn configure(
        &mut self,
        doc: QueueDocument,
        revision: u64,
        principal: Option<String>,
        now: u64,
        fx: &mut Effects,
    ) {
        let name = doc.job_queue.job_queue_name.clone();
        if self
            .queues
            .get(&name)
            .is_some_and(|q| q.config_revision >= revision)
        {
            return; // already applied (a retried append)
        }
        if self
            .deleted_queues
            .get(&name)
            .is_some_and(|&r| r >= revision)
        {
            return; // a configuration of the queue since deleted
        }
        let config = match convert::queue(&doc) {
            Ok(c) => c,
            Err(p) => {
                tracing::error!(queue = %name, problems = ?p, "stored configuration is invalid; ignored");
                return;
            }
        };
        let non_root_shares: std::collections::BTreeSet<String> = doc
            .quota_shares
            .iter()
            .filter(|s| s.run_as_non_root == Some(true))
            .map(|s| s.quota_share_name.clone())
            .collect();
        // Shares this change creates or changes, for the stability record.
        let before = self.queues.get(&name).map(|qs| qs.cluster.queue_config());
        let changed: Vec<String> = config
            .shares
            .iter()
            .filter(|new| {
                before
                    .as_ref()
                    .is_none_or(|b| b.share(&new.name) != Some(*new))
            })
            .map(|s| s.name.clone())
            .collect();
        let by = principal.unwrap_or_else(|| "unknown".into());
        match self.queues.get_mut(&name) {
            Some(qs) => match qs.cluster.update_queue(config, Time(now)) {
                Ok(stops) => {
                    qs.config_revision = revision;
                    qs.non_root_shares = non_root_shares;
                    for share in &changed {
                        *qs.week(share, now)
                            .config_changes
                            .entry(by.clone())
                            .or_default() += 1;
                    }
                    for id in stops {
                        self.stopping.insert(QueueJob::new(&name, id));
                        self.stop_command(&name, id, fx);
                    }
                }
                Err(e) => {
                    tracing::error!(queue = %name, error = %e, "configuration change refused")
                }
            },
            None => match Cluster::new(config, &[]) {
                Ok(cluster) => {
                    self.queues.insert(
                        name.clone(),
                        QueueState {
                            cluster,
                            ids: HashMap::new(),
                            meta: BTreeMap::new(),
                            config_revision: revision,
                            non_root_shares,
                            drill_ids: BTreeMap::new(),
                            governance: BTreeMap::new(),
                            reclaim_pending: BTreeMap::new(),
                        },
                    );
                    // Executors of its environment that registered before
                    // the queue existed.
                    self.add_serving_executors(&name, now);
                }
                Err(e) => tracing::error!(queue = %name, error = %e, "configuration refused"),
            },
        }
    }
}
