//! The virtual-time engine: feeds scenario actions and simulated executor
//! reports into the core, runs a pass whenever something happened, and applies
//! its plan, exactly as the live scheduler does with real events.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use crate::trace::{Decisions, NodeSlots, Preempted, RankPhase, Recorded, Started};
use qm_core::invariants::{self, Violation};
pub use qm_core::Time;
use qm_core::{CheckpointMark, Cluster, ConfigError, JobId, NodeId, PreemptionKind, TypeIdx};

use crate::report::{Recorder, Report};
use crate::rng::SplitMix64;
use crate::scenario::{Action, Generate, Scenario};
use qm_wire::messages as wire;
use qm_wire::system::QueueDocument;
use qm_wire::to_core;

mod actions;
pub mod environment;
mod events;

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
    parse_as(text)
}

/// Whether the scenario is a service environment's (it lists `queues`).
pub fn is_environment(text: &str) -> bool {
    serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text)
        .ok()
        .and_then(|v| v.get("queues").cloned())
        .is_some()
}

/// Parses a service environment's scenario (`queues`), as [`parse`] does.
pub fn parse_environment(text: &str) -> Result<crate::scenario::EnvironmentScenario, SimError> {
    parse_as(text)
}

fn parse_as<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, SimError> {
    let mut unknown = Vec::new();
    let scenario: T =
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
    /// Each share as the API stores it: what `updateQuotaShare` merges onto
    /// (`qm_wire::updates`, as admission does).
    pub(crate) shares: Vec<wire::QuotaShare>,
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
                idle_resource_assignment_strategy: q.idle_resource_assignment_strategy.clone(),
                fair_share_half_life_hours: q.fair_share_half_life_hours,
                fair_share_rebalance_seconds: q.fair_share_rebalance_seconds,
                share_groups: q.share_groups.clone(),
                priority: q.priority,
                ..Default::default()
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
            shares: doc.quota_shares,
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
        while let Some(at) = self.next_at() {
            if self.needs_pass_at(at)? {
                self.pass()?;
            }
            since_progress += 1;
            if since_progress >= 50_000 {
                since_progress = 0;
                progress(self.progress());
            }
        }
        let end = self.options.until.unwrap_or(self.now).max(self.now);
        Ok(self.finish(end))
    }

    /// The time of the next event (None: nothing left before `until`).
    pub(crate) fn next_at(&self) -> Option<Time> {
        let Reverse((at, _, _)) = self.queue.peek().copied()?;
        self.options.until.is_none_or(|u| at <= u).then_some(at)
    }

    /// Moves the clock to `at` and handles every event due then; returns
    /// whether a pass must follow.
    pub(crate) fn needs_pass_at(&mut self, at: Time) -> Result<bool, SimError> {
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
        Ok(needs_pass)
    }

    pub(crate) fn progress(&self) -> Progress {
        Progress {
            now: self.now,
            submitted: self.jobs.len() as u64,
            finished: self.recorder.finished,
            passes: self.passes,
        }
    }

    /// The report (and the trace, if kept) at `end`.
    pub(crate) fn finish(mut self, end: Time) -> (Report, Vec<Recorded>) {
        self.recorder.advance(&self.cluster, self.now, end);
        self.now = end;
        let trace = self.trace.take().unwrap_or_default();
        (crate::report::build(&self, end), trace)
    }

    pub(crate) fn now(&self) -> Time {
        self.now
    }

    /// Passes at the current time until one decides nothing more (the live
    /// scheduler gets the same from its once-a-second pass).
    pub(crate) fn pass(&mut self) -> Result<(), SimError> {
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
        // A budget stop is recorded as a preemption for the job itself.
        let budget = plan
            .budget_stops
            .iter()
            .map(|id| (*id, PreemptionKind::BudgetExhausted, *id));
        let preempted: Vec<_> = plan
            .preemptions
            .iter()
            .map(|p| (p.job, p.kind, p.for_job))
            .chain(budget)
            .collect();
        for (id, kind, for_job) in preempted {
            self.recorder.preemption(now, id, kind, for_job);
            if self.cluster.checkpoint_first(id).is_none() {
                self.request_stop(id);
                continue;
            }
            // Checkpoint-then-preempt: it runs on until its checkpoint is
            // committed (or the window ends: a checkpoint deadline).
            let job = &self.jobs[(id.0 - 1) as usize];
            if let (Phase::Running(n), Some(after)) = (job.phase, job.checkpoint_when_asked) {
                self.push(now.plus_millis(after), Ev::Asked(id, n));
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
