//! The virtual-time engine: feeds scenario actions and simulated executor
//! reports into the core, runs a pass whenever something happened, and applies
//! its plan, exactly as the live scheduler does with real events.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use crate::trace::{Decisions, NodeSlots, Preempted, RankPhase, Recorded, Started, SubmittedJob};
use qm_core::invariants::{self, Violation};
pub use qm_core::Time;
use qm_core::{
    CheckpointMark, Cluster, ConfigError, ConfigProblem, JobError, JobId, NodeId, PreemptionKind,
    RankExit, TypeIdx,
};

use crate::report::{Recorder, Report};
use crate::rng::SplitMix64;
use crate::scenario::{Action, Generate, Scenario, SubmitSpec};
use qm_wire::messages as wire;
use qm_wire::system::QueueDocument;
use qm_wire::to_core;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot read the scenario: {0}")]
    Parse(String),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("action {index} (at {at}s): {message}")]
    Action {
        index: usize,
        at: f64,
        message: String,
    },
    #[error("at t={at}: {violation}")]
    Invariant { at: Time, violation: Violation },
}

/// How to run.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Stop at this virtual time (the report shows the state then).
    pub until: Option<Time>,
    /// Keep every transition (needed for the timeline; off for huge runs).
    pub record_timeline: bool,
    /// Check the core's invariants after every pass (slow; for tests).
    pub check_invariants: bool,
    /// Keep every input fed to the core and every pass (`trace`), to drive
    /// the live scheduler with the same sequence.
    pub record_inputs: bool,
    /// Sample each share's instances in use this often (the report's
    /// `usageSamples`); None: no samples.
    pub sample_every: Option<Time>,
    /// Stop at the first action the core refuses (for scenario authors).
    /// Otherwise a refused action is recorded in the report (`rejected`)
    /// and the run goes on, as a real queue goes on after a refused request.
    pub strict: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            until: None,
            record_timeline: true,
            check_invariants: false,
            record_inputs: false,
            sample_every: None,
            strict: false,
        }
    }
}

/// Progress of a long run, for the CLI's progress line.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub now: Time,
    pub submitted: u64,
    pub finished: u64,
    pub passes: u64,
}

/// Parses a scenario from YAML (or JSON, which is YAML).
///
/// Unknown fields anywhere are errors (naming their path), so a typo never
/// passes silently, also inside the API's own types the scenario uses.
pub fn parse(text: &str) -> Result<Scenario, SimError> {
    let mut unknown = Vec::new();
    let scenario: Scenario =
        serde_ignored::deserialize(serde_yaml_ng::Deserializer::from_str(text), |path| {
            unknown.push(path.to_string())
        })
        .map_err(|e| SimError::Parse(e.to_string()))?;
    if !unknown.is_empty() {
        return Err(SimError::Parse(format!(
            "unknown field{} {}",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", ")
        )));
    }
    Ok(scenario)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Action(usize),
    Generate,
    Running(JobId, u32),
    Checkpoint(JobId, u32, u64),
    /// A job asked to checkpoint before its preemption commits one.
    Asked(JobId, u32),
    Complete(JobId, u32),
    Fail(JobId, u32, i32),
    StopDone(JobId, u32),
    Wake,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Waiting,
    Starting(u32),
    Running(u32),
    Stopping(u32),
    Done,
}

/// Bound on passes at one instant (they converge in one or two).
const MAX_PASSES_PER_INSTANT: usize = 16;

/// The simulated workload of one job.
#[derive(Clone, Debug)]
pub(crate) struct SimJob {
    pub name: String,
    pub duration: u64,
    pub interval: Option<u64>,
    pub startup: u64,
    pub stop: u64,
    pub checkpoint_on_stop: bool,
    /// How long the job takes to commit a checkpoint when asked (None: it
    /// does not answer the checkpoint signal).
    pub checkpoint_when_asked: Option<u64>,
    pub failures: Vec<(u32, u64, i32)>,
    phase: Phase,
    /// Progress (ms of work) saved in the last committed checkpoint.
    pub committed: u64,
    /// When that checkpoint was committed.
    committed_at: Option<Time>,
    /// When the current attempt began working, and its progress then.
    run_from: Option<(Time, u64)>,
    /// Work lost to preemptions, host losses and failures (ms).
    pub recomputed: u64,
}

impl SimJob {
    fn progress(&self, now: Time) -> u64 {
        self.run_from.map_or(self.committed, |(since, base)| {
            (base + now.millis_since(since)).min(self.duration)
        })
    }
}

fn ms(secs: f64) -> u64 {
    Time::from_secs_f64(secs).as_millis()
}

/// A synthetic workload being generated, one submission at a time.
struct Generator {
    spec: Generate,
    rng: SplitMix64,
    /// Jobs generated so far.
    made: u64,
    /// `(share, type)` targets and their weights (the share's entitlement).
    targets: Vec<((String, String), u32)>,
}

/// A running simulation.
pub struct Simulation {
    pub(crate) cluster: Cluster,
    pub(crate) jobs: Vec<SimJob>,
    names: HashMap<String, JobId>,
    actions: Vec<Action>,
    generator: Option<Generator>,
    defaults: crate::scenario::JobDefaults,
    queue: BinaryHeap<Reverse<(Time, u64, Ev)>>,
    seq: u64,
    now: Time,
    options: Options,
    pub(crate) recorder: Recorder,
    passes: u64,
    /// Instants for which a wake-up event is queued.
    wakes: BTreeSet<Time>,
    /// Inputs and passes, when `Options::record_inputs`.
    trace: Option<Vec<Recorded>>,
}

impl Simulation {
    /// Builds a simulation; the configuration is validated whole.
    pub fn new(scenario: Scenario, options: Options) -> Result<Simulation, SimError> {
        let q = &scenario.queue;
        let doc = QueueDocument {
            job_queue: wire::JobQueue {
                job_queue_name: q.job_queue_name.clone(),
                state: q.state.clone(),
                queueing_strategy: q.queueing_strategy.clone(),
                capacity_limits: q.capacity_limits.clone(),
                checkpoint_before_preempt_seconds: q.checkpoint_before_preempt_seconds,
            },
            quota_shares: q.quota_shares.clone(),
        };
        let queue = to_core::queue(&doc).map_err(ConfigError)?;
        let fleet: Vec<(&str, u32)> = scenario
            .fleet
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        let mut cluster = Cluster::new(queue, &fleet)?;
        for group in &scenario.nodes {
            if group.count == 0 || group.instances == 0 {
                return Err(SimError::Action {
                    index: 0,
                    at: 0.0,
                    message: "nodes: each group needs count >= 1 and instances >= 1".into(),
                });
            }
            let runtimes = group.runtimes().map_err(|message| SimError::Action {
                index: 0,
                at: 0.0,
                message: format!("nodes: {message}"),
            })?;
            for name in group.node_names() {
                let offer = [(group.instance_type.as_str(), group.instances)];
                cluster.register_node(&name, "1", &offer, runtimes, Time::ZERO);
            }
        }
        let mut actions = scenario.actions;
        for (i, a) in actions.iter().enumerate() {
            if !(a.at.is_finite() && a.at >= 0.0) {
                return Err(SimError::Action {
                    index: i,
                    at: a.at,
                    message: "`at` must be a time in seconds >= 0".into(),
                });
            }
        }
        // Stable: actions at the same time keep file order.
        let mut order: Vec<usize> = (0..actions.len()).collect();
        order.sort_by(|&a, &b| actions[a].at.total_cmp(&actions[b].at).then(a.cmp(&b)));
        actions = order.into_iter().map(|i| actions[i].clone()).collect();
        let mut sim = Simulation {
            cluster,
            jobs: Vec::new(),
            names: HashMap::new(),
            actions,
            generator: None,
            defaults: scenario.defaults,
            queue: BinaryHeap::new(),
            seq: 0,
            now: Time::ZERO,
            options,
            recorder: Recorder::new(options.record_timeline)
                .sampling(options.sample_every.map(Time::as_millis)),
            passes: 0,
            wakes: BTreeSet::new(),
            trace: options.record_inputs.then(Vec::new),
        };
        for (name, count) in &scenario.fleet {
            sim.record(Recorded::Node {
                at: Time::ZERO,
                name: qm_core::pool_node_name(name),
                incarnation: String::new(),
                offers: vec![(name.clone(), *count)],
            });
        }
        for group in &scenario.nodes {
            for name in group.node_names() {
                sim.record(Recorded::Node {
                    at: Time::ZERO,
                    name,
                    incarnation: "1".into(),
                    offers: vec![(group.instance_type.clone(), group.instances)],
                });
            }
        }
        for i in 0..sim.actions.len() {
            let at = Time::from_secs_f64(sim.actions[i].at);
            sim.push(at, Ev::Action(i));
        }
        if let Some(gen) = scenario.generate {
            sim.start_generator(gen)?;
        }
        Ok(sim)
    }

    fn start_generator(&mut self, gen: Generate) -> Result<(), SimError> {
        let bad = |message: &str| SimError::Action {
            index: 0,
            at: 0.0,
            message: format!("generate: {message}"),
        };
        if gen.mean_interarrival_seconds <= 0.0
            || gen.min_duration_seconds <= 0.0
            || gen.max_duration_seconds < gen.min_duration_seconds
        {
            return Err(bad("needs meanInterarrivalSeconds > 0 and 0 < minDurationSeconds <= maxDurationSeconds"));
        }
        if gen.instance_counts.is_empty() || gen.instance_counts.contains(&0) {
            return Err(bad("instanceCounts must list counts >= 1"));
        }
        // Shares weighted by entitlement, one (type, weight) per limit.
        let mut targets = Vec::new();
        for s in self.cluster.share_indices() {
            let share = self.cluster.share_config(s);
            for limit in &share.capacity_limits {
                if limit.max_capacity > 0 {
                    let weight = u32::try_from(limit.max_capacity).unwrap_or(u32::MAX);
                    targets.push(((share.name.clone(), limit.capacity_unit.clone()), weight));
                }
            }
        }
        if targets.is_empty() {
            return Err(bad("no share has capacity to submit to"));
        }
        let rng = SplitMix64::new(gen.seed);
        self.generator = Some(Generator {
            spec: gen,
            rng,
            made: 0,
            targets,
        });
        self.push(Time::ZERO, Ev::Generate);
        Ok(())
    }

    fn push(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    fn job(&mut self, id: JobId) -> &mut SimJob {
        &mut self.jobs[(id.0 - 1) as usize]
    }

    /// Runs to the end (or `until`), calling `progress` now and then.
    pub fn run(self, progress: &mut dyn FnMut(Progress)) -> Result<Report, SimError> {
        self.run_traced(progress).map(|(report, _)| report)
    }

    /// Runs to the end, and returns the inputs and passes it fed the core
    /// too (empty unless `Options::record_inputs`).
    pub fn run_traced(
        mut self,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(Report, Vec<Recorded>), SimError> {
        let mut since_progress = 0u32;
        while let Some(Reverse((at, _, _))) = self.queue.peek().copied() {
            if self.options.until.is_some_and(|u| at > u) {
                break;
            }
            self.recorder.advance(&self.cluster, self.now, at);
            self.now = at;
            // Checkpoint commits and processes coming up change nothing a
            // pass decides on; any other event may. (Under STRICT_FIFO a pass
            // always runs: there a second pass may still start a job.)
            let mut needs_pass =
                self.cluster.queueing_strategy() == qm_core::QueueingStrategy::StrictFifo;
            while let Some(Reverse((t, _, ev))) = self.queue.peek().copied() {
                if t != at {
                    break;
                }
                self.queue.pop();
                needs_pass |= !matches!(ev, Ev::Checkpoint(..) | Ev::Running(..));
                self.handle(ev)?;
            }
            if needs_pass {
                self.pass()?;
            }
            since_progress += 1;
            if since_progress >= 50_000 {
                since_progress = 0;
                progress(Progress {
                    now: self.now,
                    submitted: self.jobs.len() as u64,
                    finished: self.recorder.finished,
                    passes: self.passes,
                });
            }
        }
        let end = self.options.until.unwrap_or(self.now).max(self.now);
        self.recorder.advance(&self.cluster, self.now, end);
        self.now = end;
        let trace = self.trace.take().unwrap_or_default();
        Ok((crate::report::build(&self, end), trace))
    }

    /// Passes at the current time until one decides nothing more (the live
    /// scheduler gets the same from its once-a-second pass).
    fn pass(&mut self) -> Result<(), SimError> {
        for _ in 0..MAX_PASSES_PER_INSTANT {
            if !self.one_pass()? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One pass; returns whether it decided anything.
    fn one_pass(&mut self) -> Result<bool, SimError> {
        let now = self.now;
        let plan = self.cluster.schedule(now);
        self.passes += 1;
        if self.options.check_invariants {
            invariants::check_plan(&self.cluster, &plan)
                .map_err(|violation| SimError::Invariant { at: now, violation })?;
        }
        self.cluster.apply(&plan);
        if self.trace.is_some() {
            let decided = self.decisions(&plan);
            self.record(Recorded::Pass { at: now, decided });
        }
        for p in &plan.preemptions {
            self.recorder.preemption(now, p.job, p.kind, p.for_job);
            if self.cluster.checkpoint_first(p.job).is_none() {
                self.request_stop(p.job);
                continue;
            }
            // Checkpoint-then-preempt: it runs on until its checkpoint is
            // committed (or the window ends: a checkpoint deadline).
            let job = &self.jobs[(p.job.0 - 1) as usize];
            if let (Phase::Running(n), Some(after)) = (job.phase, job.checkpoint_when_asked) {
                self.push(now.plus_millis(after), Ev::Asked(p.job, n));
            }
        }
        for id in plan.timeouts.iter().chain(&plan.checkpoint_deadlines) {
            self.request_stop(*id);
        }
        for start in &plan.starts {
            let attempt = self
                .cluster
                .job(start.job)
                .map_or(1, |j| j.attempts.len() as u32);
            let job = &self.jobs[(start.job.0 - 1) as usize];
            let restored = job.committed_at.map(|at| CheckpointMark {
                at,
                step: job.committed / 1000,
            });
            let startup = job.startup;
            // Every rank restores and launches: the first one makes the
            // attempt STARTING, as on real executors.
            for node in self.rank_nodes(start.job) {
                self.cluster
                    .rank_starting(start.job, attempt, node, restored.into(), now)
                    .expect("a started job has that attempt");
                self.record_rank(
                    start.job,
                    attempt,
                    node,
                    RankPhase::Starting(restored.map(|m| (m.at, m.step))),
                );
            }
            self.job(start.job).phase = Phase::Starting(attempt);
            self.recorder.started(start.job, now);
            self.recorder.placed(start.placement.len());
            self.push(now.plus_millis(startup), Ev::Running(start.job, attempt));
        }
        // One wake-up per instant, however many passes ask for it.
        if let Some(wake) = plan.wake_at {
            if self.wakes.insert(wake) {
                self.push(wake, Ev::Wake);
            }
        }
        self.record_events();
        Ok(!plan.is_empty())
    }

    fn record_events(&mut self) {
        for event in self.cluster.drain_events() {
            if event.to.is_final() {
                self.jobs[(event.job.0 - 1) as usize].phase = Phase::Done;
                self.recorder.finished(event.job, event.at);
            }
            self.recorder.transition(event);
        }
    }

    /// The scheduler asked a running job to stop: its work stops now.
    fn request_stop(&mut self, id: JobId) {
        let now = self.now;
        let cancelled = self
            .cluster
            .job(id)
            .is_some_and(|j| j.stopping == Some(qm_core::StopCause::Cancelled));
        let job = self.job(id);
        let attempt = match job.phase {
            Phase::Starting(n) | Phase::Running(n) => n,
            _ => return,
        };
        let progress = job.progress(now);
        if job.checkpoint_on_stop {
            job.committed = progress;
            job.committed_at = Some(now);
        } else if !cancelled {
            // Lost work is recomputed by the next attempt; a cancelled job has none.
            job.recomputed += progress - job.committed;
        }
        job.run_from = None;
        job.phase = Phase::Stopping(attempt);
        let stop = job.stop;
        self.push(now.plus_millis(stop), Ev::StopDone(id, attempt));
    }

    /// The nodes of the job's current attempt, in rank order.
    fn rank_nodes(&self, id: JobId) -> Vec<NodeId> {
        self.cluster
            .job(id)
            .and_then(|j| j.current_attempt())
            .map(|a| a.placement.iter().map(|r| r.node).collect())
            .unwrap_or_default()
    }

    /// Every rank of the attempt ends, the first with `first` and the
    /// others with `rest` (the core then ends the attempt by its gang rules).
    fn end_ranks(&mut self, id: JobId, n: u32, first: Option<i32>, rest: Option<i32>) {
        let now = self.now;
        for (i, node) in self.rank_nodes(id).into_iter().enumerate() {
            let code = if i == 0 { first } else { rest };
            self.cluster
                .rank_ended(id, n, node, RankExit::Exited(code), now)
                .expect("attempt is current");
            self.record_rank(id, n, node, RankPhase::Ended(code));
        }
    }

    fn record(&mut self, r: Recorded) {
        if let Some(trace) = &mut self.trace {
            trace.push(r);
        }
    }

    fn record_rank(&mut self, id: JobId, attempt: u32, node: NodeId, phase: RankPhase) {
        if self.trace.is_some() {
            let job = self.jobs[(id.0 - 1) as usize].name.clone();
            let node = self.cluster.node(node).name.clone();
            self.record(Recorded::Rank {
                at: self.now,
                job,
                attempt,
                node,
                phase,
            });
        }
    }

    fn job_name(&self, id: JobId) -> String {
        self.jobs[(id.0 - 1) as usize].name.clone()
    }

    /// A plan's decisions by name.
    fn decisions(&self, plan: &qm_core::Plan) -> Decisions {
        Decisions {
            starts: plan
                .starts
                .iter()
                .map(|s| Started {
                    job: self.job_name(s.job),
                    attempt: self.cluster.next_attempt(s.job) - 1,
                    placement: s
                        .placement
                        .iter()
                        .map(|r| NodeSlots {
                            node: self.cluster.node(r.node).name.clone(),
                            slots: r.slots.to_vec(),
                        })
                        .collect(),
                })
                .collect(),
            preemptions: plan
                .preemptions
                .iter()
                .map(|p| Preempted {
                    job: self.job_name(p.job),
                    kind: p.kind.as_str().to_string(),
                    for_job: self.job_name(p.for_job),
                })
                .collect(),
            timeouts: plan.timeouts.iter().map(|id| self.job_name(*id)).collect(),
        }
    }

    /// The job's host is gone: its uncommitted work is lost.
    fn lose(&mut self, id: JobId) {
        let now = self.now;
        let job = self.job(id);
        job.recomputed += job.progress(now) - job.committed;
        job.run_from = None;
        job.phase = Phase::Waiting;
    }

    /// The attempt commits a checkpoint holding `mark` ms of work; one a
    /// checkpoint-first window waited for lets the stop go ahead.
    fn commit(&mut self, id: JobId, n: u32, mark: u64) {
        let now = self.now;
        let step = mark / 1000;
        let answered = self
            .cluster
            .checkpoint_committed(id, n, CheckpointMark { at: now, step })
            .expect("attempt is current");
        if self.trace.is_some() {
            let job = self.job_name(id);
            self.record(Recorded::Checkpoint {
                at: now,
                job,
                attempt: n,
                step,
            });
        }
        let job = self.job(id);
        job.committed = mark;
        job.committed_at = Some(now);
        if answered {
            self.request_stop(id);
        }
    }

    fn live(&self, id: JobId, attempt: u32) -> bool {
        matches!(self.jobs[(id.0 - 1) as usize].phase, Phase::Running(n) if n == attempt)
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        let now = self.now;
        match ev {
            Ev::Action(i) => match self.action(i) {
                Err(SimError::Action { index, at, message })
                    if !self.options.strict && self.actions[index].verb_count() == 1 =>
                {
                    let a = &self.actions[index];
                    self.recorder
                        .rejected_actions
                        .push(crate::report::RejectedOut {
                            t: at,
                            action: index,
                            verb: a.verb().into(),
                            job_name: a.job_name().map(str::to_string),
                            error_code: "ClientException".into(),
                            message,
                        });
                }
                other => other?,
            },
            Ev::Generate => self.generate()?,
            Ev::Wake => {
                self.wakes.remove(&now);
            }
            Ev::Running(id, n) => {
                if self.jobs[(id.0 - 1) as usize].phase != Phase::Starting(n) {
                    return Ok(());
                }
                for node in self.rank_nodes(id) {
                    self.cluster
                        .rank_running(id, n, node, now)
                        .expect("attempt is current");
                    self.record_rank(id, n, node, RankPhase::Running);
                }
                let job = self.job(id);
                job.phase = Phase::Running(n);
                job.run_from = Some((now, job.committed));
                let left = job.duration - job.committed;
                let next_mark = job
                    .interval
                    .map(|i| (job.committed / i + 1) * i)
                    .filter(|m| *m < job.duration);
                let failure = job.failures.iter().find(|f| f.0 == n).map(|f| (f.1, f.2));
                let committed = job.committed;
                match failure {
                    Some((after, code)) if after < left => {
                        self.push(now.plus_millis(after), Ev::Fail(id, n, code))
                    }
                    _ => self.push(now.plus_millis(left), Ev::Complete(id, n)),
                }
                if let Some(mark) = next_mark {
                    self.push(
                        now.plus_millis(mark - committed),
                        Ev::Checkpoint(id, n, mark),
                    );
                }
            }
            Ev::Asked(id, n) => {
                if !self.live(id, n) || self.cluster.checkpoint_first(id).is_none() {
                    return Ok(());
                }
                let mark = self.job(id).progress(now);
                self.commit(id, n, mark);
            }
            Ev::Checkpoint(id, n, mark) => {
                if !self.live(id, n) {
                    return Ok(());
                }
                self.commit(id, n, mark);
                let job = self.job(id);
                if let Some(next) = job.interval.map(|i| mark + i).filter(|m| *m < job.duration) {
                    self.push(now.plus_millis(next - mark), Ev::Checkpoint(id, n, next));
                }
            }
            Ev::Complete(id, n) => {
                if !self.live(id, n) {
                    return Ok(());
                }
                let job = self.job(id);
                job.committed = job.duration;
                job.run_from = None;
                self.end_ranks(id, n, Some(0), Some(0));
            }
            Ev::Fail(id, n, code) => {
                if !self.live(id, n) {
                    return Ok(());
                }
                let job = self.job(id);
                job.recomputed += job.progress(now) - job.committed;
                job.run_from = None;
                job.phase = Phase::Waiting;
                // Rank 0 fails; the core has the others stopped (by signal).
                self.end_ranks(id, n, Some(code), None);
            }
            Ev::StopDone(id, n) => {
                if self.jobs[(id.0 - 1) as usize].phase != Phase::Stopping(n) {
                    return Ok(());
                }
                self.job(id).phase = Phase::Waiting;
                let code = if self.jobs[(id.0 - 1) as usize].checkpoint_on_stop {
                    Some(0)
                } else {
                    None
                };
                self.end_ranks(id, n, code, code);
            }
        }
        self.record_events();
        Ok(())
    }

    fn job_id(&self, index: usize, name: &str) -> Result<JobId, SimError> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| SimError::Action {
                index,
                at: self.actions[index].at,
                message: format!("no job named {name:?} was submitted before this action"),
            })
    }

    fn action(&mut self, index: usize) -> Result<(), SimError> {
        let now = self.now;
        let action = self.actions[index].clone();
        let fail = |message: String| SimError::Action {
            index,
            at: action.at,
            message,
        };
        if action.verb_count() != 1 {
            return Err(fail("an action needs exactly one of submit, updateServiceJob, terminateServiceJob, createQuotaShare, updateQuotaShare, deleteQuotaShare, setFleet, addNodes, loseNode".into()));
        }
        if let Some(submit) = &action.submit {
            self.submit(submit).map_err(fail)?;
        } else if let Some(update) = &action.update_service_job {
            let id = self.job_id(index, &update.job_name)?;
            self.cluster
                .update_priority(id, update.scheduling_priority)
                .map_err(|e| fail(e.to_string()))?;
            self.record(Recorded::Priority {
                at: now,
                job: update.job_name.clone(),
                priority: update.scheduling_priority,
            });
            self.recorder.policy_change();
        } else if let Some(job) = &action.terminate_service_job {
            let id = self.job_id(index, &job.job_name)?;
            self.record(Recorded::Terminate {
                at: now,
                job: job.job_name.clone(),
            });
            if self
                .cluster
                .terminate(id, now)
                .map_err(|e| fail(e.to_string()))?
            {
                self.request_stop(id);
            }
        } else if let Some(group) = &action.add_nodes {
            if group.count == 0 {
                return Err(fail("addNodes: count must be >= 1".into()));
            }
            let incarnation = now.as_millis().to_string();
            let runtimes = group
                .runtimes()
                .map_err(|e| fail(format!("addNodes: {e}")))?;
            for name in group.node_names() {
                let offer = [(group.instance_type.as_str(), group.instances)];
                for lost in self
                    .cluster
                    .register_node(&name, &incarnation, &offer, runtimes, now)
                {
                    self.lose(lost.job);
                }
                self.record(Recorded::Node {
                    at: now,
                    name,
                    incarnation: incarnation.clone(),
                    offers: vec![(group.instance_type.clone(), group.instances)],
                });
            }
        } else if let Some(name) = &action.lose_node {
            if self.cluster.node_id(name).is_none() {
                return Err(fail(format!("no node named {name:?}")));
            }
            for lost in self.cluster.lose_node(name, now) {
                self.lose(lost.job);
            }
            self.record(Recorded::NodeLost {
                at: now,
                name: name.clone(),
            });
        } else if let Some(fleet) = &action.set_fleet {
            for (instance_type, count) in fleet {
                for id in self.cluster.set_fleet(instance_type, *count, now) {
                    self.lose(id);
                }
                self.record(Recorded::Node {
                    at: now,
                    name: qm_core::pool_node_name(instance_type),
                    incarnation: String::new(),
                    offers: vec![(instance_type.clone(), *count)],
                });
            }
        } else {
            let mut config = self.cluster.queue_config();
            let mut problems: Vec<ConfigProblem> = Vec::new();
            if let Some(spec) = &action.create_quota_share {
                if config.share(&spec.quota_share_name).is_some() {
                    return Err(fail(format!(
                        "quota share {:?} already exists",
                        spec.quota_share_name
                    )));
                }
                config
                    .shares
                    .push(to_core::share(spec, "createQuotaShare", &mut problems));
            } else if let Some(spec) = &action.update_quota_share {
                let Some(share) = config
                    .shares
                    .iter_mut()
                    .find(|s| s.name == spec.quota_share_name)
                else {
                    return Err(fail(format!(
                        "no quota share named {:?}",
                        spec.quota_share_name
                    )));
                };
                to_core::merge_share(share, spec, "updateQuotaShare", &mut problems);
            } else if let Some(spec) = &action.delete_quota_share {
                let before = config.shares.len();
                config.shares.retain(|s| s.name != spec.quota_share_name);
                if config.shares.len() == before {
                    return Err(fail(format!(
                        "no quota share named {:?}",
                        spec.quota_share_name
                    )));
                }
            }
            if !problems.is_empty() {
                return Err(fail(ConfigError(problems).to_string()));
            }
            let stops = self
                .cluster
                .update_queue(config, now)
                .map_err(|e| fail(e.to_string()))?;
            self.record(Recorded::Config { at: now });
            for id in stops {
                self.request_stop(id);
            }
            self.recorder.policy_change();
        }
        Ok(())
    }

    fn submit(&mut self, spec: &SubmitSpec) -> Result<JobId, String> {
        if self.names.contains_key(&spec.job_name) {
            return Err(format!(
                "job name {:?} is already used in this scenario",
                spec.job_name
            ));
        }
        // The API's submission, converted as admission converts it.
        let interval = spec
            .checkpoint_interval_seconds
            .or(self.defaults.checkpoint_interval_seconds);
        let job = wire::SubmitServiceJob {
            job_name: spec.job_name.clone(),
            job_queue: self.cluster.queue_name().to_string(),
            quota_share_name: Some(spec.quota_share_name.clone()),
            instance_type: spec.instance_type.clone(),
            instance_count: Some(spec.instance_count),
            scheduling_priority: Some(spec.scheduling_priority),
            preemption_configuration: Some(wire::JobPreemptionConfiguration {
                preemption_retries_before_termination: spec.preemption_retries_before_termination,
            }),
            retry_strategy: spec.retry_strategy.clone(),
            timeout_config: spec.timeout_config.clone(),
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            checkpoint_config: interval.map(|_| wire::CheckpointConfig {
                checkpoint_before_preempt_seconds: spec.checkpoint_before_preempt_seconds,
                ..Default::default()
            }),
            command: vec!["simulated".into()],
            container_image: spec.container_image.clone(),
            ..Default::default()
        };
        let mut core = to_core::job_spec(&job, &mut self.cluster)
            .map_err(|problems| JobError::Invalid(problems).to_string())?;
        let mut problems = Vec::new();
        core.checkpoints = interval.is_some();
        if !(spec.duration_seconds.is_finite() && spec.duration_seconds > 0.0) {
            problems.push(ConfigProblem {
                field: "durationSeconds".into(),
                message: "must be > 0".into(),
            });
        }
        if spec
            .checkpoint_seconds
            .is_some_and(|i| !(i.is_finite() && i >= 0.0))
        {
            problems.push(ConfigProblem {
                field: "checkpointSeconds".into(),
                message: "must be >= 0".into(),
            });
        }
        if interval.is_some_and(|i| !(i.is_finite() && i > 0.0)) {
            problems.push(ConfigProblem {
                field: "checkpointIntervalSeconds".into(),
                message: "must be > 0".into(),
            });
        }
        if !problems.is_empty() {
            return Err(JobError::Invalid(problems).to_string());
        }
        let grace_ms = core.grace_period_secs * 1000;
        let submitted = SubmittedJob {
            name: spec.job_name.clone(),
            share: spec.quota_share_name.clone(),
            instance_type: spec.instance_type.clone(),
            count: core.count,
            priority: core.priority,
            checkpoints: core.checkpoints,
            grace_seconds: core.grace_period_secs,
            retry_attempts: core.retry_attempts,
            timeout_seconds: core.attempt_timeout_secs,
            preemption_retries: core.preemption_retries,
        };
        let id = self
            .cluster
            .submit(core, self.now)
            .map_err(|e| e.to_string())?;
        self.record(Recorded::Submit {
            at: self.now,
            job: submitted,
        });
        assert_eq!(
            id.0 as usize,
            self.jobs.len() + 1,
            "the core numbers jobs 1, 2, 3, ..."
        );
        self.jobs.push(SimJob {
            name: spec.job_name.clone(),
            duration: ms(spec.duration_seconds).max(1),
            interval: interval.map(|i| ms(i).max(1)),
            startup: ms(spec
                .startup_seconds
                .or(self.defaults.startup_seconds)
                .unwrap_or(0.0)),
            stop: ms(spec
                .stop_seconds
                .or(self.defaults.stop_seconds)
                .unwrap_or(0.0))
            .min(grace_ms),
            checkpoint_on_stop: spec
                .checkpoint_on_stop
                .or(self.defaults.checkpoint_on_stop)
                .unwrap_or(false),
            checkpoint_when_asked: spec
                .checkpoint_seconds
                .or(self.defaults.checkpoint_seconds)
                .map(ms),
            failures: spec
                .failures
                .iter()
                .map(|f| (f.attempt, ms(f.after_seconds), f.exit_code))
                .collect(),
            phase: Phase::Waiting,
            committed: 0,
            committed_at: None,
            run_from: None,
            recomputed: 0,
        });
        self.names.insert(spec.job_name.clone(), id);
        self.recorder.submitted(id, self.now);
        Ok(id)
    }

    fn generate(&mut self) -> Result<(), SimError> {
        let Some(mut g) = self.generator.take() else {
            return Ok(());
        };
        let total_weight: u64 = g.targets.iter().map(|(_, w)| u64::from(*w)).sum();
        let mut pick = g.rng.below(total_weight);
        let ((share, instance_type), _) = g
            .targets
            .iter()
            .find(|(_, w)| {
                if pick < u64::from(*w) {
                    true
                } else {
                    pick -= u64::from(*w);
                    false
                }
            })
            .expect("pick is below the total weight");
        let gen = &g.spec;
        let (lo, hi) = (gen.min_duration_seconds.ln(), gen.max_duration_seconds.ln());
        let duration = (lo + (hi - lo) * g.rng.unit()).exp();
        let count = gen.instance_counts[g.rng.below(gen.instance_counts.len() as u64) as usize];
        let checkpoints = g.rng.unit() < gen.checkpointing_fraction;
        let spec = SubmitSpec {
            job_name: format!("gen-{:07}", g.made + 1),
            quota_share_name: share.clone(),
            instance_type: instance_type.clone(),
            instance_count: count,
            scheduling_priority: g.rng.below(u64::from(gen.max_priority) + 1) as u32,
            preemption_retries_before_termination: None,
            retry_strategy: None,
            timeout_config: None,
            termination_grace_period_seconds: None,
            duration_seconds: (duration * 1000.0).round() / 1000.0,
            checkpoint_interval_seconds: checkpoints.then_some(gen.checkpoint_interval_seconds),
            startup_seconds: None,
            stop_seconds: None,
            checkpoint_on_stop: None,
            checkpoint_before_preempt_seconds: None,
            checkpoint_seconds: None,
            failures: Vec::new(),
            container_image: None,
        };
        if self.submit(&spec).is_err() {
            // A generated job that the configuration forbids is counted, not fatal.
            self.recorder.rejected += 1;
        }
        g.made += 1;
        if g.made < g.spec.jobs {
            let gap = -g.spec.mean_interarrival_seconds * (1.0 - g.rng.unit()).ln();
            let next = self.now.plus_millis(ms(gap));
            self.push(next, Ev::Generate);
            self.generator = Some(g);
        }
        Ok(())
    }

    pub(crate) fn type_indices(&self) -> Vec<TypeIdx> {
        (0..self.cluster.type_count())
            .map(|t| TypeIdx(t as u16))
            .collect()
    }

    pub(crate) fn passes(&self) -> u64 {
        self.passes
    }

    pub(crate) fn preemption_kind_counts(&self) -> BTreeMap<PreemptionKind, u64> {
        self.recorder.kind_counts()
    }
}

/// Parses and runs a scenario in one go.
pub fn simulate(text: &str, options: Options) -> Result<Report, SimError> {
    let scenario = parse(text)?;
    Simulation::new(scenario, options)?.run(&mut |_| {})
}

/// Simulates and returns every input fed to the core and every pass, in
/// order (`trace`), with the report.
pub fn simulate_recorded(
    text: &str,
    options: Options,
) -> Result<(Report, Vec<Recorded>), SimError> {
    let scenario = parse(text)?;
    let options = Options {
        record_inputs: true,
        ..options
    };
    Simulation::new(scenario, options)?.run_traced(&mut |_| {})
}
