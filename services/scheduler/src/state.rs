//! The scheduler's state: a projection of the `QM_LOG` stream. Applying the
//! same entries in the same order gives the same state (no clock reads, no
//! hash-map iteration that decides anything), which is what makes a restart
//! or a new leader safe: it replays the log and continues.
//!
//! Applying an entry returns its [`Effects`]: job events to publish and
//! commands for executors. A replaying scheduler drops them (they were
//! published when the entry was first applied); resends are derived from the
//! state itself (`Scheduled` attempts, `stopping` jobs).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use qm_core::{
    schedule, AttemptOutcome, CheckpointMark, Cluster, JobId, JobStatus, Plan, Preemption,
    PreemptionKind, Start, StatusReason, Time,
};
use qm_service::convert;
use qm_wire::messages::{
    AttemptDetail, ExecutorInstances, JobStateChange, PreemptionEvent, PreemptionSummary,
    RegisterExecutor, ServiceJob, SubmitServiceJob,
};
use qm_wire::system::{
    CheckpointCommit, ExecCommand, LogEntry, PassRecord, Placement, PreemptionRecord,
    QueueDocument, Report, ReportPhase, StartRecord,
};

/// Something to publish after an entry was applied (live only).
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Job(JobStateChange, String),
    Preemption(PreemptionEvent, String),
    Command(String, ExecCommand),
}

pub type Effects = Vec<Effect>;

impl Effect {
    /// A job or preemption event (not a command).
    pub fn is_event(&self) -> bool {
        matches!(self, Effect::Job(..) | Effect::Preemption(..))
    }
}

/// Where an event was produced in the order the leader applied entries:
/// (`a`, `b`, `i`) with `a` the input's sequence (or a decision's
/// `Qm-After`), `b` 0 for an input (else the decision's sequence), `i` the
/// event's index among that entry's events. Ordered like the application.
pub type Position = (u64, u64, u64);

/// Numbers events by [`Position`]: the live leader and a replay use this
/// one type, so a replay finds the positions the leader published.
#[derive(Clone, Copy, Debug, Default)]
pub struct Positions(Position);

impl Positions {
    /// Numbering continues at `p` (its next event is `p`).
    pub fn at(p: Position) -> Positions {
        Positions(p)
    }

    /// The input stored at `seq` is applied next.
    pub fn input(&mut self, seq: u64) {
        self.0 = (seq, 0, 0);
    }

    /// The decision stored at `seq`, decided after input `after`, is
    /// applied next.
    pub fn decision(&mut self, after: u64, seq: u64) {
        self.0 = (after, seq, 0);
    }

    /// The position of the next event.
    pub fn next_event(&mut self) -> Position {
        let p = self.0;
        self.0 .2 += 1;
        p
    }
}

/// One stored log entry as a replay reads it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub seq: u64,
    /// For a decision: the sequence of the last input its leader had
    /// applied when it decided (`Qm-After`); None for an input.
    pub after: Option<u64>,
    pub entry: LogEntry,
    /// The stored time, milliseconds since the Unix epoch.
    pub at: u64,
}

/// What the scheduler keeps per job beyond the core's state.
#[derive(Clone, Debug)]
pub struct JobMeta {
    pub public_id: String,
    pub submit: SubmitServiceJob,
    /// Executor of each attempt (index = attempt - 1).
    pub hosts: Vec<String>,
}

pub struct QueueState {
    pub cluster: Cluster,
    pub ids: HashMap<String, JobId>,
    pub meta: BTreeMap<JobId, JobMeta>,
    pub config_revision: u64,
}

#[derive(Clone, Debug)]
pub struct ExecutorState {
    pub registration: RegisterExecutor,
    pub live: bool,
    /// Per instance type: each slot's holder (job, attempt).
    pub slots: BTreeMap<String, Vec<Option<(JobId, u32)>>>,
}

impl ExecutorState {
    fn offered(&self, instance_type: &str) -> u32 {
        self.slots.get(instance_type).map_or(0, |s| s.len() as u32)
    }

    fn free(&self, instance_type: &str) -> Vec<u32> {
        self.slots.get(instance_type).map_or(Vec::new(), |s| {
            (0..s.len() as u32)
                .filter(|i| s[*i as usize].is_none())
                .collect()
        })
    }
}

/// Where an attempt runs: one rank per executor, each with its progress.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    pub attempt: u32,
    pub placement: Vec<Placement>,
    pub ranks: Vec<RankProgress>,
    /// The exit of the first rank that did not exit 0 (the cause; the
    /// others are then stopped and end by signal).
    pub first_failure: Option<Option<i32>>,
}

/// What one rank (one executor's share of an attempt) reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RankProgress {
    /// Commanded to start; nothing reported yet.
    #[default]
    Commanded,
    Starting,
    Running,
    /// Ended, with the exit code (None: killed by a signal or not launched).
    Ended(Option<i32>),
}

impl Placed {
    fn rank_of(&self, executor_id: &str) -> Option<usize> {
        self.placement
            .iter()
            .position(|p| p.executor_id == executor_id)
    }

    /// The attempt's exit code once every rank ended: that of the first
    /// rank to end without exiting 0, else 0.
    fn exit_code(&self) -> Option<Option<i32>> {
        let all_ended = self
            .ranks
            .iter()
            .all(|r| matches!(r, RankProgress::Ended(_)));
        all_ended.then(|| self.first_failure.unwrap_or(Some(0)))
    }
}

/// A job the scheduler could not accept after admission stored it (its queue
/// or share changed in between): it is reported FAILED with the reason.
#[derive(Clone, Debug)]
pub struct Rejected {
    pub submit: SubmitServiceJob,
    pub reason: String,
    pub at: u64,
}

#[derive(Default)]
pub struct State {
    pub queues: BTreeMap<String, QueueState>,
    pub executors: BTreeMap<String, ExecutorState>,
    /// (queue, job) -> placement of its current attempt.
    pub placements: BTreeMap<(String, JobId), Placed>,
    /// (queue, job) of attempts the scheduler asked to stop, not yet ended.
    pub stopping: BTreeSet<(String, JobId)>,
    pub rejected: BTreeMap<String, Rejected>,
    /// Which queue each public job id is in.
    pub job_queue: HashMap<String, String>,
    pub epoch: u64,
    /// The log's time: never goes backwards.
    pub clock: u64,
}

fn kind_of(name: &str) -> Option<PreemptionKind> {
    [
        PreemptionKind::CrossShare,
        PreemptionKind::InShare,
        PreemptionKind::LimitReduced,
    ]
    .into_iter()
    .find(|k| k.as_str() == name)
}

impl State {
    /// Rebuilds the state from a stored log (in stream order), applying each
    /// decision right after the input its leader had last applied, in the
    /// order they were stored: exactly the order the leader applied them.
    /// Returns the events produced after position `published` (none when
    /// `published` is None), for a new leader to republish.
    pub fn replay(
        &mut self,
        log: Vec<Logged>,
        published: Option<Position>,
    ) -> Vec<(Position, Effect)> {
        let mut inputs = Vec::new();
        let mut decisions: BTreeMap<u64, Vec<Logged>> = BTreeMap::new();
        for l in log {
            match l.after {
                Some(after) => decisions.entry(after).or_default().push(l),
                None => inputs.push(l),
            }
        }
        let mut out = Vec::new();
        let mut positions = Positions::default();
        let mut apply = |state: &mut State, a: u64, l: Logged| {
            match l.after {
                Some(_) => positions.decision(a, l.seq),
                None => positions.input(l.seq),
            }
            let fx = state.apply(l.entry, l.at);
            let Some(published) = published else { return };
            for e in fx.into_iter().filter(Effect::is_event) {
                let position = positions.next_event();
                if position > published {
                    out.push((position, e));
                }
            }
        };
        for d in decisions.remove(&0).unwrap_or_default() {
            apply(self, 0, d);
        }
        for l in inputs {
            let seq = l.seq;
            apply(self, seq, l);
            for d in decisions.remove(&seq).unwrap_or_default() {
                apply(self, seq, d);
            }
        }
        // Decisions after inputs that are gone (never: the stream keeps all).
        for (after, list) in decisions {
            for d in list {
                apply(self, after, d);
            }
        }
        out
    }

    /// Applies one log entry stored at `at` (ms since the epoch).
    pub fn apply(&mut self, entry: LogEntry, at: u64) -> Effects {
        self.clock = self.clock.max(at);
        let now = self.clock;
        let mut fx = Vec::new();
        match entry {
            LogEntry::Submit { job_id, job, .. } => self.submit(job_id, job, now),
            LogEntry::Config {
                queue, revision, ..
            } => self.configure(queue, revision, now, &mut fx),
            LogEntry::Register(r) => self.register(r, now, &mut fx),
            LogEntry::Report(r) => self.report(r, now, &mut fx),
            LogEntry::Checkpoint(c) => self.checkpoint(c),
            LogEntry::Leader { epoch, .. } => self.epoch = self.epoch.max(epoch),
            LogEntry::Pass(record) => {
                self.clock = self.clock.max(record.now);
                self.apply_pass(&record, None, &mut fx)
            }
            LogEntry::Priority {
                job_id,
                scheduling_priority,
                ..
            } => {
                if let Some((q, id)) = self.locate(&job_id) {
                    let _ = self
                        .queue_mut(&q)
                        .cluster
                        .update_priority(id, scheduling_priority);
                }
            }
            LogEntry::Terminate { job_id, .. } => {
                if let Some((q, id)) = self.locate(&job_id) {
                    if let Ok(true) = self.queue_mut(&q).cluster.terminate(id, Time(now)) {
                        self.stopping.insert((q.clone(), id));
                        self.stop_command(&q, id, &mut fx);
                    }
                }
            }
            LogEntry::ExecutorLost { executor_id, .. } => {
                self.lose_executor(&executor_id, now, &mut fx)
            }
        }
        self.collect_events(&mut fx);
        fx
    }

    fn queue_mut(&mut self, q: &str) -> &mut QueueState {
        self.queues.get_mut(q).expect("located queue exists")
    }

    /// The queue and core id of a public job id.
    pub fn locate(&self, job_id: &str) -> Option<(String, JobId)> {
        let q = self.job_queue.get(job_id)?;
        let id = *self.queues.get(q)?.ids.get(job_id)?;
        Some((q.clone(), id))
    }

    fn submit(&mut self, job_id: String, job: SubmitServiceJob, now: u64) {
        if self.job_queue.contains_key(&job_id) || self.rejected.contains_key(&job_id) {
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
                qs.ids.insert(job_id.clone(), id);
                qs.meta.insert(
                    id,
                    JobMeta {
                        public_id: job_id.clone(),
                        submit: job.clone(),
                        hosts: Vec::new(),
                    },
                );
                self.job_queue.insert(job_id, job.job_queue);
            }
            Err(e) => self.reject(job_id, job, e.to_string(), now),
        }
    }

    fn reject(&mut self, job_id: String, submit: SubmitServiceJob, reason: String, at: u64) {
        tracing::warn!(job = %job_id, %reason, "stored job rejected by the scheduler");
        self.rejected
            .insert(job_id, Rejected { submit, reason, at });
    }

    fn configure(&mut self, doc: QueueDocument, revision: u64, now: u64, fx: &mut Effects) {
        let name = doc.job_queue.job_queue_name.clone();
        if self
            .queues
            .get(&name)
            .is_some_and(|q| q.config_revision >= revision)
        {
            return; // already applied (a retried append)
        }
        let config = match convert::queue(&doc) {
            Ok(c) => c,
            Err(p) => {
                tracing::error!(queue = %name, problems = ?p, "stored configuration is invalid; ignored");
                return;
            }
        };
        match self.queues.get_mut(&name) {
            Some(qs) => match qs.cluster.update_queue(config, Time(now)) {
                Ok(stops) => {
                    qs.config_revision = revision;
                    for id in stops {
                        self.stopping.insert((name.clone(), id));
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
                        },
                    );
                    self.refresh_fleet(&name, now);
                }
                Err(e) => tracing::error!(queue = %name, error = %e, "configuration refused"),
            },
        }
    }

    /// Sets each type's fleet of `queue` to what its live executors offer.
    fn refresh_fleet(&mut self, queue: &str, now: u64) {
        let mut fleet: BTreeMap<String, u32> = BTreeMap::new();
        for e in self.executors.values() {
            if e.registration.job_queue == queue {
                for t in e.slots.keys() {
                    *fleet.entry(t.clone()).or_default() += if e.live { e.offered(t) } else { 0 };
                }
            }
        }
        let Some(qs) = self.queues.get_mut(queue) else {
            return;
        };
        for (t, n) in fleet {
            if qs.cluster.type_idx(&t).map(|i| qs.cluster.fleet_of(i)) != Some(n) {
                let lost = qs.cluster.set_fleet(&t, n, Time(now));
                debug_assert!(lost.is_empty(), "attempts on lost hosts end first");
            }
        }
    }

    fn register(&mut self, r: RegisterExecutor, now: u64, fx: &mut Effects) {
        let same = self.executors.get(&r.executor_id).is_some_and(|e| {
            e.live
                && e.registration.incarnation == r.incarnation
                && e.registration.instances == r.instances
                && e.registration.job_queue == r.job_queue
        });
        if same {
            return;
        }
        // A new incarnation (restart) or a changed offer: what ran there is gone.
        self.lose_executor(&r.executor_id, now, fx);
        let old_queue = self
            .executors
            .get(&r.executor_id)
            .map(|e| e.registration.job_queue.clone());
        let mut slots: BTreeMap<String, Vec<Option<(JobId, u32)>>> = BTreeMap::new();
        for ExecutorInstances {
            instance_type,
            count,
            ..
        } in &r.instances
        {
            slots
                .entry(instance_type.clone())
                .or_default()
                .extend(std::iter::repeat_n(None, *count as usize));
        }
        let queue = r.job_queue.clone();
        self.executors.insert(
            r.executor_id.clone(),
            ExecutorState {
                registration: r,
                live: true,
                slots,
            },
        );
        if let Some(old) = old_queue.filter(|o| *o != queue) {
            self.refresh_fleet(&old, now);
        }
        self.refresh_fleet(&queue, now);
    }

    /// Ends every attempt placed on the executor as HOST_LOST and takes its
    /// instances out of the fleet.
    fn lose_executor(&mut self, executor_id: &str, now: u64, fx: &mut Effects) {
        let Some(e) = self.executors.get_mut(executor_id) else {
            return;
        };
        let queue = e.registration.job_queue.clone();
        let mut held: BTreeSet<(JobId, u32)> = BTreeSet::new();
        for slots in e.slots.values_mut() {
            for s in slots.iter_mut() {
                if let Some(h) = s.take() {
                    held.insert(h);
                }
            }
        }
        e.live = false;
        for (id, attempt) in held {
            // Ranks of the attempt on other executors stop too (their
            // executors' heartbeats would stop them anyway, later).
            fx.extend(
                self.stop_commands(&queue, id)
                    .into_iter()
                    .filter(|c| !matches!(c, Effect::Command(e, _) if e == executor_id)),
            );
            self.release(&queue, id);
            if let Some(qs) = self.queues.get_mut(&queue) {
                let _ = qs.cluster.attempt_lost(id, attempt, Time(now));
            }
            self.stopping.remove(&(queue.clone(), id));
        }
        self.refresh_fleet(&queue, now);
    }

    /// Frees the slots of the job's current placement.
    fn release(&mut self, queue: &str, id: JobId) {
        if let Some(Placed { placement, .. }) = self.placements.remove(&(queue.to_string(), id)) {
            let instance_type = self
                .queues
                .get(queue)
                .and_then(|q| q.meta.get(&id))
                .map(|m| m.submit.instance_type.clone())
                .unwrap_or_default();
            for p in placement {
                if let Some(slots) = self
                    .executors
                    .get_mut(&p.executor_id)
                    .and_then(|e| e.slots.get_mut(&instance_type))
                {
                    for i in p.slots {
                        if let Some(s) = slots.get_mut(i as usize) {
                            if s.is_some_and(|(j, _)| j == id) {
                                *s = None;
                            }
                        }
                    }
                }
            }
        }
    }

    fn report(&mut self, r: Report, now: u64, fx: &mut Effects) {
        let Some((q, id)) = self.locate(&r.job_id) else {
            return;
        };
        // Only an executor the attempt was placed on may report it.
        let key = (q.clone(), id);
        let rank = self
            .placements
            .get(&key)
            .filter(|p| p.attempt == r.attempt)
            .and_then(|p| p.rank_of(&r.executor_id));
        let Some(rank) = rank else {
            tracing::debug!(job = %r.job_id, attempt = r.attempt, executor = %r.executor_id, "stale report ignored");
            return;
        };
        let t = Time(now);
        let stopping = self.queues[&q].cluster.job(id).and_then(|j| j.stopping);
        let placed = self.placements.get_mut(&key).expect("placed");
        let before = placed.ranks[rank];
        if matches!(before, RankProgress::Ended(_)) {
            return; // a rank ends once
        }
        let cluster = &mut self.queues.get_mut(&q).expect("located").cluster;
        match r.phase {
            ReportPhase::Starting => {
                placed.ranks[rank] = RankProgress::Starting;
                // The first rank to start moves the attempt to STARTING
                // (every rank restores the same checkpoint).
                let mark = r.restored.map(|c| CheckpointMark {
                    at: Time(c.created_at),
                    step: c.step.unwrap_or(0),
                });
                let _ = cluster.attempt_starting(id, r.attempt, mark, t);
            }
            ReportPhase::Running => {
                placed.ranks[rank] = RankProgress::Running;
                // RUNNING once every rank runs.
                if placed.ranks.iter().all(|p| *p == RankProgress::Running) {
                    let _ = cluster.attempt_running(id, r.attempt, t);
                }
            }
            ReportPhase::Ended => {
                let exit = if r.error.is_some() {
                    Some(127)
                } else {
                    r.exit_code
                };
                placed.ranks[rank] = RankProgress::Ended(exit);
                if exit != Some(0) && placed.first_failure.is_none() {
                    placed.first_failure = Some(exit);
                }
                let Some(exit) = placed.exit_code() else {
                    // Other ranks still run. One that failed, or any rank of
                    // an attempt being stopped, stops them all.
                    if exit != Some(0) && stopping.is_none() && self.stopping.insert(key.clone()) {
                        tracing::info!(job = %r.job_id, attempt = r.attempt, rank, "a rank failed; stopping the others");
                        self.stop_command(&q, id, fx);
                    }
                    return;
                };
                let cluster = &mut self.queues.get_mut(&q).expect("located").cluster;
                if let Ok(outcome) = cluster.attempt_ended(id, r.attempt, exit, t) {
                    self.release(&q, id);
                    self.stopping.remove(&key);
                    if let Some(qm_core::StopCause::Preempted { kind, for_job }) = stopping {
                        if outcome.is_preemption() {
                            self.preemption_event(
                                &q,
                                id,
                                r.attempt,
                                kind,
                                for_job,
                                "completed",
                                now,
                                fx,
                            );
                        }
                    }
                }
            }
        }
    }

    fn checkpoint(&mut self, c: CheckpointCommit) {
        if let Some((q, id)) = self.locate(&c.job_id) {
            let mark = CheckpointMark {
                at: Time(c.created_at),
                step: c.step.unwrap_or(0),
            };
            let _ = self
                .queue_mut(&q)
                .cluster
                .checkpoint_committed(id, c.attempt, mark);
        }
    }

    /// Runs one scheduling pass of `queue` at `now` and places its starts.
    /// Returns the record to append (None when the pass decided nothing that
    /// must be logged) and the plan to apply once the record is stored.
    pub fn plan(&self, queue: &str, now: u64) -> Option<(PassRecord, Plan)> {
        let qs = self.queues.get(queue)?;
        let mut plan = schedule(&qs.cluster, Time(now));
        // Place starts on executors with free slots of the type.
        let mut free: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
        for (eid, e) in &self.executors {
            if e.live && e.registration.job_queue == queue {
                for t in e.slots.keys() {
                    free.insert((eid.clone(), t.clone()), e.free(t));
                }
            }
        }
        let mut starts = Vec::new();
        let mut kept = Vec::new();
        for s in &plan.starts {
            let meta = &qs.meta[&s.job];
            let t = &meta.submit.instance_type;
            match place(&mut free, t, s.count) {
                Some(placement) => {
                    starts.push(StartRecord {
                        job_id: meta.public_id.clone(),
                        attempt: qs.cluster.next_attempt(s.job),
                        borrowed: s.borrowed,
                        placement,
                    });
                    kept.push(*s);
                }
                None => tracing::error!(
                    job = %meta.public_id,
                    "the core started a job the executors' free instances cannot hold; it waits"
                ),
            }
        }
        plan.starts = kept;
        let name = |id: JobId| qs.meta[&id].public_id.clone();
        let record = PassRecord {
            job_queue: queue.to_string(),
            now,
            starts,
            preemptions: plan
                .preemptions
                .iter()
                .map(|p| PreemptionRecord {
                    job_id: name(p.job),
                    kind: p.kind.as_str().into(),
                    for_job_id: name(p.for_job),
                })
                .collect(),
            timeouts: plan.timeouts.iter().map(|id| name(*id)).collect(),
        };
        Some((record, plan))
    }

    /// Applies a stored pass. Live, `plan` is the plan the record came from
    /// (it also carries waiting reasons); replaying, the plan is rebuilt
    /// from the record.
    pub fn apply_pass(&mut self, record: &PassRecord, plan: Option<Plan>, fx: &mut Effects) {
        let q = record.job_queue.clone();
        let Some(qs) = self.queues.get(&q) else {
            return;
        };
        let plan = match plan {
            Some(p) => p,
            None => {
                let id = |s: &str| qs.ids.get(s).copied();
                let mut p = Plan {
                    now: Time(record.now),
                    ..Default::default()
                };
                for s in &record.starts {
                    if let Some(job) = id(&s.job_id).and_then(|j| qs.cluster.job(j)) {
                        p.starts.push(Start {
                            job: job.id,
                            share: job.spec.share,
                            instance_type: job.spec.instance_type,
                            count: job.spec.count,
                            borrowed: s.borrowed,
                        });
                    }
                }
                for pr in &record.preemptions {
                    if let (Some(job), Some(for_job), Some(kind)) =
                        (id(&pr.job_id), id(&pr.for_job_id), kind_of(&pr.kind))
                    {
                        p.preemptions.push(Preemption { job, kind, for_job });
                    }
                }
                p.timeouts = record.timeouts.iter().filter_map(|s| id(s)).collect();
                p
            }
        };
        self.queue_mut(&q).cluster.apply(&plan);
        for s in &record.starts {
            let qs = self.queue_mut(&q);
            let Some(&id) = qs.ids.get(&s.job_id) else {
                continue;
            };
            let meta = qs.meta.get_mut(&id).expect("known job");
            let host = s
                .placement
                .first()
                .map(|p| p.executor_id.clone())
                .unwrap_or_default();
            meta.hosts
                .resize(s.attempt.saturating_sub(1) as usize, String::new());
            meta.hosts.push(host);
            let t = meta.submit.instance_type.clone();
            for p in &s.placement {
                if let Some(slots) = self
                    .executors
                    .get_mut(&p.executor_id)
                    .and_then(|e| e.slots.get_mut(&t))
                {
                    for i in &p.slots {
                        if let Some(slot) = slots.get_mut(*i as usize) {
                            *slot = Some((id, s.attempt));
                        }
                    }
                }
            }
            self.placements.insert(
                (q.clone(), id),
                Placed {
                    attempt: s.attempt,
                    placement: s.placement.clone(),
                    ranks: vec![RankProgress::Commanded; s.placement.len()],
                    first_failure: None,
                },
            );
            fx.extend(self.start_commands(&q, id, false));
        }
        let mut stops: Vec<JobId> = plan.timeouts.clone();
        for p in &plan.preemptions {
            stops.push(p.job);
            let attempt = self.queues[&q]
                .cluster
                .job(p.job)
                .and_then(|j| j.current_attempt())
                .map_or(0, |a| a.number);
            self.preemption_event(
                &q, p.job, attempt, p.kind, p.for_job, "started", record.now, fx,
            );
        }
        for id in stops {
            self.stopping.insert((q.clone(), id));
            self.stop_command(&q, id, fx);
        }
    }

    /// Applies a pass this leader planned and stored: the live counterpart
    /// of applying a `Pass` entry.
    pub fn apply_planned(&mut self, record: &PassRecord, plan: Plan) -> Effects {
        self.clock = self.clock.max(record.now);
        let mut fx = Vec::new();
        self.apply_pass(record, Some(plan), &mut fx);
        self.collect_events(&mut fx);
        fx
    }

    /// Applies a pass that decided nothing to log (waiting reasons only).
    pub fn apply_reasons(&mut self, queue: &str, plan: &Plan) -> Effects {
        let mut fx = Vec::new();
        if let Some(qs) = self.queues.get_mut(queue) {
            qs.cluster.apply(plan);
        }
        self.collect_events(&mut fx);
        fx
    }

    /// The start commands of a placed attempt, one per rank (`unreported`:
    /// only the ranks that have not reported yet, for resending).
    pub fn start_commands(&self, q: &str, id: JobId, unreported: bool) -> Vec<Effect> {
        let Some(placed) = self.placements.get(&(q.to_string(), id)) else {
            return Vec::new();
        };
        let Some(meta) = self.queues.get(q).and_then(|qs| qs.meta.get(&id)) else {
            return Vec::new();
        };
        let hosts: Vec<String> = if placed.placement.len() > 1 {
            placed
                .placement
                .iter()
                .map(|p| {
                    self.executors
                        .get(&p.executor_id)
                        .and_then(|e| e.registration.address.clone())
                        .unwrap_or_else(|| p.executor_id.clone())
                })
                .collect()
        } else {
            Vec::new()
        };
        placed
            .placement
            .iter()
            .zip(&placed.ranks)
            .enumerate()
            .filter(|(_, (_, progress))| !unreported || **progress == RankProgress::Commanded)
            .map(|(rank, (p, _))| {
                Effect::Command(
                    p.executor_id.clone(),
                    ExecCommand::Start {
                        epoch: self.epoch,
                        job_id: meta.public_id.clone(),
                        attempt: placed.attempt,
                        job_queue: q.to_string(),
                        quota_share_name: meta.submit.quota_share_name.clone().unwrap_or_default(),
                        command: meta.submit.command.clone(),
                        environment: meta.submit.environment.clone(),
                        instance_type: meta.submit.instance_type.clone(),
                        slots: p.slots.clone(),
                        checkpoints: meta.submit.checkpoint_config.is_some(),
                        checkpoint_config: meta.submit.checkpoint_config.clone(),
                        rank: rank as u32,
                        hosts: hosts.clone(),
                    },
                )
            })
            .collect()
    }

    /// The stop commands of a stopping attempt, one per rank still running
    /// (for sending and resending).
    pub fn stop_commands(&self, q: &str, id: JobId) -> Vec<Effect> {
        let Some(placed) = self.placements.get(&(q.to_string(), id)) else {
            return Vec::new();
        };
        let Some(qs) = self.queues.get(q) else {
            return Vec::new();
        };
        let (Some(job), Some(meta)) = (qs.cluster.job(id), qs.meta.get(&id)) else {
            return Vec::new();
        };
        let reason = job.status_reason.render(&|j| {
            qs.meta
                .get(&j)
                .map_or_else(|| j.to_string(), |m| m.public_id.clone())
        });
        placed
            .placement
            .iter()
            .zip(&placed.ranks)
            .filter(|(_, progress)| !matches!(progress, RankProgress::Ended(_)))
            .map(|(p, _)| {
                Effect::Command(
                    p.executor_id.clone(),
                    ExecCommand::Stop {
                        epoch: self.epoch,
                        job_id: meta.public_id.clone(),
                        attempt: placed.attempt,
                        grace_seconds: job.spec.grace_period_secs,
                        reason: reason.clone(),
                    },
                )
            })
            .collect()
    }

    fn stop_command(&self, q: &str, id: JobId, fx: &mut Effects) {
        fx.extend(self.stop_commands(q, id));
    }

    #[allow(clippy::too_many_arguments)]
    fn preemption_event(
        &self,
        q: &str,
        id: JobId,
        attempt: u32,
        kind: PreemptionKind,
        for_job: JobId,
        phase: &str,
        at: u64,
        fx: &mut Effects,
    ) {
        let Some(qs) = self.queues.get(q) else { return };
        let name = |j: JobId| {
            qs.meta
                .get(&j)
                .map_or_else(|| j.to_string(), |m| m.public_id.clone())
        };
        let share = qs
            .meta
            .get(&id)
            .and_then(|m| m.submit.quota_share_name.clone())
            .unwrap_or_default();
        let event = PreemptionEvent {
            job_id: name(id),
            attempt,
            kind: kind.as_str().into(),
            for_job_id: name(for_job),
            phase: phase.into(),
            at,
        };
        if let Ok(subject) = qm_wire::subjects::preemption_event(q, &share, &event.job_id, phase) {
            fx.push(Effect::Preemption(event, subject));
        }
    }

    fn collect_events(&mut self, fx: &mut Effects) {
        for (q, qs) in self.queues.iter_mut() {
            let events = qs.cluster.drain_events();
            for e in events {
                let Some(meta) = qs.meta.get(&e.job) else {
                    continue;
                };
                let name = |j: JobId| {
                    qs.meta
                        .get(&j)
                        .map_or_else(|| j.to_string(), |m| m.public_id.clone())
                };
                let share = meta.submit.quota_share_name.clone().unwrap_or_default();
                let attempt = qs
                    .cluster
                    .job(e.job)
                    .and_then(|j| j.attempts.last())
                    .map(|a| a.number);
                let change = JobStateChange {
                    job_id: meta.public_id.clone(),
                    job_name: meta.submit.job_name.clone(),
                    job_queue: q.clone(),
                    quota_share_name: share.clone(),
                    from: e.from.as_str().into(),
                    to: e.to.as_str().into(),
                    status_reason: e.reason.render(&name),
                    attempt,
                    at: e.at.as_millis(),
                };
                if let Ok(subject) =
                    qm_wire::subjects::job_event(q, &share, &meta.public_id, e.to.as_str())
                {
                    fx.push(Effect::Job(change, subject));
                }
            }
        }
    }

    /// Ranks placed but not yet reported starting: their start commands.
    pub fn unstarted(&self) -> Vec<Effect> {
        self.placements
            .keys()
            .filter(|(q, id)| {
                self.queues[q].cluster.job(*id).is_some_and(|j| {
                    matches!(j.status, JobStatus::Scheduled | JobStatus::Starting)
                        && j.stopping.is_none()
                })
            })
            .flat_map(|(q, id)| self.start_commands(q, *id, true))
            .collect()
    }

    /// Stop commands of every attempt being stopped.
    pub fn stops(&self) -> Vec<Effect> {
        self.stopping
            .iter()
            .flat_map(|(q, id)| self.stop_commands(q, *id))
            .collect()
    }

    /// The attempts an executor should hold, as (jobId, attempt).
    pub fn expected_on(&self, executor_id: &str) -> BTreeSet<(String, u32)> {
        let mut out = BTreeSet::new();
        if let Some(e) = self.executors.get(executor_id) {
            let q = &e.registration.job_queue;
            for slots in e.slots.values() {
                for (id, attempt) in slots.iter().flatten() {
                    if let Some(m) = self.queues.get(q).and_then(|qs| qs.meta.get(id)) {
                        out.insert((m.public_id.clone(), *attempt));
                    }
                }
            }
        }
        out
    }

    // ----- reads -----------------------------------------------------------

    pub fn describe(&self, job_id: &str, now: u64) -> Option<ServiceJob> {
        if let Some(r) = self.rejected.get(job_id) {
            return Some(ServiceJob {
                job_id: job_id.into(),
                job_name: r.submit.job_name.clone(),
                job_queue: r.submit.job_queue.clone(),
                quota_share_name: r.submit.quota_share_name.clone().unwrap_or_default(),
                status: "FAILED".into(),
                status_reason: format!("REJECTED: {}", r.reason),
                instance_type: r.submit.instance_type.clone(),
                instance_count: r.submit.instance_count.unwrap_or(1),
                scheduling_priority: r.submit.scheduling_priority.unwrap_or(0),
                created_at: r.at,
                ..Default::default()
            });
        }
        let (q, id) = self.locate(job_id)?;
        Some(self.service_job(&q, id, now))
    }

    pub fn service_job(&self, q: &str, id: JobId, now: u64) -> ServiceJob {
        let qs = &self.queues[q];
        let job = qs.cluster.job(id).expect("known job");
        let meta = &qs.meta[&id];
        let name = |j: JobId| {
            qs.meta
                .get(&j)
                .map_or_else(|| j.to_string(), |m| m.public_id.clone())
        };
        let reason = match job.status {
            JobStatus::Runnable => qs
                .cluster
                .explain(id, Time(now))
                .map_or(job.status_reason, StatusReason::Waiting),
            _ => job.status_reason,
        };
        let detail = |a: &qm_core::Attempt| AttemptDetail {
            attempt: a.number,
            executor_id: meta.hosts.get(a.number as usize - 1).cloned(),
            started_at: a.started_at.map(Time::as_millis),
            stopped_at: a.stopped_at.map(Time::as_millis),
            exit_code: a.exit_code,
            outcome: a.outcome.map(|o| o.as_str().into()),
            restored_checkpoint_step: a.restored.map(|c| c.step),
            last_checkpoint_step: a.last_checkpoint.map(|c| c.step),
        };
        let preempted: Vec<AttemptDetail> = job
            .attempts
            .iter()
            .filter(|a| a.outcome.is_some_and(AttemptOutcome::is_preemption))
            .map(detail)
            .collect();
        ServiceJob {
            job_id: meta.public_id.clone(),
            job_name: meta.submit.job_name.clone(),
            job_queue: q.into(),
            quota_share_name: meta.submit.quota_share_name.clone().unwrap_or_default(),
            status: job.status.as_str().into(),
            status_reason: reason.render(&name),
            instance_type: meta.submit.instance_type.clone(),
            instance_count: job.spec.count,
            scheduling_priority: job.spec.priority,
            on_borrowed_capacity: qs.cluster.is_on_borrowed_capacity(id),
            created_at: job.submitted_at.as_millis(),
            attempts: job.attempts.iter().map(detail).collect(),
            preemption_summary: (!preempted.is_empty()).then(|| PreemptionSummary {
                preempted_attempt_count: preempted.len() as u32,
                recent_preempted_attempts: preempted.into_iter().rev().take(5).collect(),
            }),
        }
    }
}

/// Chooses slots for `count` instances of `instance_type`: the executor with
/// the most free slots that holds them all, else spread over several.
fn place(
    free: &mut BTreeMap<(String, String), Vec<u32>>,
    instance_type: &str,
    count: u32,
) -> Option<Vec<Placement>> {
    let mut candidates: Vec<(&(String, String), usize)> = free
        .iter()
        .filter(|((_, t), _)| t == instance_type)
        .map(|(k, v)| (k, v.len()))
        .collect();
    let total: usize = candidates.iter().map(|(_, n)| n).sum();
    if total < count as usize {
        return None;
    }
    // Most free first, then executor id (deterministic).
    candidates.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let keys: Vec<(String, String)> = candidates.iter().map(|(k, _)| (*k).clone()).collect();
    let mut need = count as usize;
    let mut out = Vec::new();
    for key in keys {
        if need == 0 {
            break;
        }
        let slots = free.get_mut(&key).expect("candidate exists");
        let take: Vec<u32> = slots.drain(..need.min(slots.len())).collect();
        need -= take.len();
        if !take.is_empty() {
            out.push(Placement {
                executor_id: key.0.clone(),
                slots: take,
            });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_wire::messages::ExecutorInstances;

    fn doc() -> QueueDocument {
        serde_yaml_ng::from_str(include_str!("../../../examples/queues/three-shares.yaml"))
            .expect("queue document")
    }

    fn submit(name: &str, share: &str, priority: u32) -> SubmitServiceJob {
        SubmitServiceJob {
            job_name: name.into(),
            job_queue: "training".into(),
            quota_share_name: Some(share.into()),
            instance_type: "ml.g5.xlarge".into(),
            scheduling_priority: Some(priority),
            checkpoint_config: Some(Default::default()),
            command: vec!["train".into()],
            ..Default::default()
        }
    }

    fn report(job: &str, attempt: u32, phase: ReportPhase, exit: Option<i32>) -> LogEntry {
        LogEntry::Report(Report {
            executor_id: "node-1".into(),
            job_id: job.into(),
            attempt,
            phase,
            exit_code: exit,
            signal: None,
            restored: None,
            error: None,
        })
    }

    /// What users can observe of a state.
    fn observable(s: &State) -> Vec<String> {
        let mut out = Vec::new();
        for (q, qs) in &s.queues {
            for j in qs.cluster.jobs() {
                let attempts: Vec<String> = j
                    .attempts
                    .iter()
                    .map(|a| format!("{}:{:?}", a.number, a.outcome))
                    .collect();
                out.push(format!(
                    "{q} {} {} prio={} {attempts:?} stopping={:?}",
                    qs.meta[&j.id].public_id, j.status, j.spec.priority, j.stopping
                ));
            }
        }
        out.push(format!("{:?}", s.placements));
        out.push(format!("{:?}", s.stopping));
        out
    }

    /// What a leader did live: its state, the log it stored, and the events
    /// it published with their positions (numbered as the runner does).
    struct Live {
        state: State,
        log: Vec<Logged>,
        events: Vec<(Position, Effect)>,
    }

    /// Runs a leader live over `inputs` (passing after each).
    fn live(inputs: Vec<LogEntry>) -> Live {
        let mut l = Live {
            state: State::default(),
            log: Vec::new(),
            events: Vec::new(),
        };
        let mut t = 1_000;
        let mut seq = 0;
        let mut positions = Positions::default();
        // Numbers the events of `fx` as the runner publishes them.
        let mut publish = |positions: &mut Positions, fx: Effects| {
            for e in fx.into_iter().filter(Effect::is_event) {
                l.events.push((positions.next_event(), e));
            }
        };
        for entry in inputs {
            t += 1_000;
            seq += 1;
            let input = seq;
            positions.input(input);
            publish(&mut positions, l.state.apply(entry.clone(), t));
            l.log.push(Logged {
                seq,
                after: None,
                entry,
                at: t,
            });
            let queues: Vec<String> = l.state.queues.keys().cloned().collect();
            for q in queues {
                if let Some((record, plan)) = l.state.plan(&q, t) {
                    let decided = !(record.starts.is_empty()
                        && record.preemptions.is_empty()
                        && record.timeouts.is_empty());
                    if decided {
                        seq += 1;
                        l.log.push(Logged {
                            seq,
                            after: Some(input),
                            entry: LogEntry::Pass(record.clone()),
                            at: t,
                        });
                        positions.decision(input, seq);
                        publish(&mut positions, l.state.apply_planned(&record, plan));
                    } else {
                        publish(&mut positions, l.state.apply_reasons(&q, &plan));
                    }
                }
            }
        }
        l
    }

    #[test]
    fn replaying_the_log_rebuilds_what_the_leader_saw() {
        let register = LogEntry::Register(RegisterExecutor {
            executor_id: "node-1".into(),
            job_queue: "training".into(),
            instances: vec![ExecutorInstances {
                instance_type: "ml.g5.xlarge".into(),
                count: 3,
                gpus: vec![],
            }],
            incarnation: "a".into(),
            checkpoint_node: None,
            address: None,
        });
        let sub = |id: &str, name: &str, share: &str, p: u32| LogEntry::Submit {
            job_id: id.into(),
            job: submit(name, share, p),
            principal: None,
        };
        let inputs = vec![
            LogEntry::Config {
                queue: doc(),
                revision: 1,
                principal: None,
                operation: None,
            },
            register,
            sub("j3", "p3", "QS1", 3),
            sub("j2", "p2", "QS1", 2),
            sub("j1", "p1", "QS1", 1),
            report("j3", 1, ReportPhase::Running, None),
            report("j2", 1, ReportPhase::Running, None),
            sub("jq", "qs2", "QS2", 1),
            // p2 was preempted for the QS2 job: its process exits.
            report("j2", 1, ReportPhase::Ended, Some(0)),
            LogEntry::Priority {
                job_id: "j1".into(),
                scheduling_priority: 4,
                at: 0,
                principal: None,
                job_queue: None,
                quota_share_name: None,
            },
            report("j3", 1, ReportPhase::Ended, Some(0)),
            sub("j3", "p3-again", "QS1", 9), // a retried append: ignored
        ];
        let Live {
            state: leader,
            log,
            events,
        } = live(inputs);
        // The story happened: p2 reclaimed, p3 preempted in-share, p1 placed.
        let p2 = leader.describe("j2", 100_000).expect("p2");
        assert_eq!(
            p2.attempts[0].outcome.as_deref(),
            Some("PREEMPTED_CROSS_SHARE")
        );
        let p3 = leader.describe("j3", 100_000).expect("p3");
        assert_eq!(
            p3.attempts[0].outcome.as_deref(),
            Some("PREEMPTED_IN_SHARE")
        );
        assert_eq!(p3.job_name, "p3");
        let p1 = leader.describe("j1", 100_000).expect("p1");
        assert_eq!(p1.status, "SCHEDULED");
        // A new leader replays the log and ends in the same state.
        let mut replayed = State::default();
        assert!(replayed.replay(log.clone(), None).is_empty());
        assert_eq!(observable(&replayed), observable(&leader));
        assert_eq!(replayed.unstarted().len(), leader.unstarted().len());
        // A leader that crashed after storing entries but before publishing
        // their events: the next one republishes exactly the missing ones,
        // whatever the last published event was. Waiting-reason updates
        // (RUNNABLE -> RUNNABLE) are not in the log (they come last among an
        // entry's events); a new leader's first pass derives them afresh, so
        // they are not republished, but a cut may fall on one.
        let waiting = |e: &Effect| matches!(e, Effect::Job(c, _) if c.from == "RUNNABLE" && c.to == "RUNNABLE");
        let logged: Vec<(Position, Effect)> = events
            .iter()
            .filter(|(_, e)| !waiting(e))
            .cloned()
            .collect();
        assert!(events.iter().any(|(_, e)| waiting(e)));
        assert!(logged.len() > 10, "the story produced events");
        for (cut, (published, _)) in events.iter().enumerate() {
            let mut again = State::default();
            let expected: Vec<(Position, Effect)> = logged
                .iter()
                .filter(|(p, _)| p > published)
                .cloned()
                .collect();
            assert_eq!(
                again.replay(log.clone(), Some(*published)),
                expected,
                "cut after event {cut} at {published:?}"
            );
        }
        let mut again = State::default();
        assert_eq!(again.replay(log, Some((0, 0, 0))), logged);
    }

    #[test]
    fn a_lost_or_restarted_executor_ends_its_attempts_host_lost() {
        let reg = |inc: &str| {
            LogEntry::Register(RegisterExecutor {
                executor_id: "node-1".into(),
                job_queue: "training".into(),
                instances: vec![ExecutorInstances {
                    instance_type: "ml.g5.xlarge".into(),
                    count: 1,
                    gpus: vec![],
                }],
                incarnation: inc.into(),
                checkpoint_node: None,
                address: None,
            })
        };
        let Live { state: mut s, .. } = live(vec![
            LogEntry::Config {
                queue: doc(),
                revision: 1,
                principal: None,
                operation: None,
            },
            reg("a"),
            LogEntry::Submit {
                job_id: "j".into(),
                job: submit("j", "QS1", 1),
                principal: None,
            },
            report("j", 1, ReportPhase::Running, None),
        ]);
        s.apply(reg("b"), 50_000);
        let j = s.describe("j", 50_000).expect("job");
        assert_eq!(j.attempts[0].outcome.as_deref(), Some("HOST_LOST"));
        assert_eq!(j.status, "RUNNABLE");
        // A report from the old incarnation's attempt changes nothing.
        s.apply(report("j", 1, ReportPhase::Ended, Some(0)), 51_000);
        assert_eq!(s.describe("j", 51_000).expect("job").status, "RUNNABLE");
        s.apply(
            LogEntry::ExecutorLost {
                executor_id: "node-1".into(),
                incarnation: "b".into(),
                at: 0,
            },
            52_000,
        );
        assert!(!s.executors["node-1"].live);
        let qs = &s.queues["training"];
        let t = qs.cluster.type_idx("ml.g5.xlarge").expect("type");
        assert_eq!(
            qs.cluster.fleet_of(t),
            0,
            "a lost executor's instances leave the fleet"
        );
    }

    /// The executors `fx` sends stop commands to.
    fn stopped(fx: &Effects) -> Vec<&str> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Command(executor, ExecCommand::Stop { .. }) => Some(executor.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_job_spread_over_executors_runs_as_one_gang() {
        let node = |id: &str| {
            LogEntry::Register(RegisterExecutor {
                executor_id: id.into(),
                job_queue: "training".into(),
                instances: vec![ExecutorInstances {
                    instance_type: "ml.g5.xlarge".into(),
                    count: 1,
                    gpus: vec![],
                }],
                incarnation: "a".into(),
                checkpoint_node: None,
                address: Some(format!("{id}.cluster.local")),
            })
        };
        let rank = |executor: &str, phase: ReportPhase, exit: Option<i32>| {
            LogEntry::Report(Report {
                executor_id: executor.into(),
                job_id: "g".into(),
                attempt: 1,
                phase,
                exit_code: exit,
                signal: None,
                restored: None,
                error: None,
            })
        };
        let mut job = submit("gang", "QS1", 1);
        job.instance_count = Some(2);
        let Live {
            state: mut s,
            events,
            ..
        } = live(vec![
            LogEntry::Config {
                queue: doc(),
                revision: 1,
                principal: None,
                operation: None,
            },
            node("node-1"),
            node("node-2"),
            LogEntry::Submit {
                job_id: "g".into(),
                job,
                principal: None,
            },
        ]);
        // One start command per executor, with its rank and every address.
        let starts: Vec<(String, u32, Vec<String>)> = events
            .iter()
            .map(|(_, e)| e.clone())
            .chain(s.unstarted())
            .filter_map(|e| match e {
                Effect::Command(executor, ExecCommand::Start { rank, hosts, .. }) => {
                    Some((executor, rank, hosts))
                }
                _ => None,
            })
            .collect();
        let hosts = vec![
            "node-1.cluster.local".to_string(),
            "node-2.cluster.local".to_string(),
        ];
        assert_eq!(
            starts,
            vec![
                ("node-1".to_string(), 0, hosts.clone()),
                ("node-2".to_string(), 1, hosts.clone()),
            ]
        );
        let status = |s: &State| s.describe("g", 100_000).expect("g").status;
        s.apply(rank("node-1", ReportPhase::Starting, None), 10_000);
        s.apply(rank("node-1", ReportPhase::Running, None), 10_001);
        assert_eq!(status(&s), "STARTING", "RUNNING only once every rank runs");
        assert_eq!(s.unstarted().len(), 1, "rank 1's start is resent");
        s.apply(rank("node-2", ReportPhase::Starting, None), 10_002);
        s.apply(rank("node-2", ReportPhase::Running, None), 10_003);
        assert_eq!(status(&s), "RUNNING");
        // Rank 1 fails: rank 0 is stopped, and the attempt ends with rank 1's
        // exit code once rank 0 has exited too.
        let fx = s.apply(rank("node-2", ReportPhase::Ended, Some(3)), 10_004);
        assert_eq!(stopped(&fx), vec!["node-1"]);
        assert_eq!(status(&s), "RUNNING");
        assert_eq!(s.stops().len(), 1, "the stop is resent until rank 0 ends");
        s.apply(rank("node-1", ReportPhase::Ended, None), 10_005);
        let g = s.describe("g", 100_000).expect("g");
        assert_eq!(g.status, "FAILED");
        assert_eq!(g.attempts[0].exit_code, Some(3));
        assert!(s.placements.is_empty(), "both instances are free again");
        // A stale report from a rank of the ended attempt changes nothing.
        s.apply(rank("node-2", ReportPhase::Running, None), 10_006);
        assert_eq!(s.describe("g", 100_000).expect("g").status, "FAILED");

        // A second gang loses one of its executors: the whole attempt ends
        // HOST_LOST and the rank on the surviving executor is stopped.
        let mut job = submit("gang-2", "QS1", 1);
        job.instance_count = Some(2);
        s.apply(
            LogEntry::Submit {
                job_id: "g2".into(),
                job,
                principal: None,
            },
            20_000,
        );
        let (record, plan) = s.plan("training", 20_001).expect("a pass");
        assert_eq!(record.starts.len(), 1, "{record:?}");
        s.apply_planned(&record, plan);
        let fx = s.apply(
            LogEntry::ExecutorLost {
                executor_id: "node-2".into(),
                incarnation: "a".into(),
                at: 0,
            },
            20_002,
        );
        assert_eq!(stopped(&fx), vec!["node-1"]);
        let g2 = s.describe("g2", 100_000).expect("g2");
        assert_eq!(
            g2.attempts[0].outcome.as_deref(),
            Some("HOST_LOST"),
            "{g2:#?}"
        );
        assert!(s.placements.is_empty());
    }
}
