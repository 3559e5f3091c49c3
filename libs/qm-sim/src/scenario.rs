//! The scenario file: a fleet, a queue with its quota shares (the API's own
//! types, `qm_wire::messages`), and timed actions; optionally a synthetic
//! workload generator. A submission is the API's `SubmitServiceJob` fields
//! plus the simulated workload's shape, and converts to the core through the
//! API's one conversion (`qm_wire::to_core`).
//! `docs/simulate.md` documents every field with examples.

use std::collections::BTreeMap;

use qm_wire::messages as wire;
use serde::Deserialize;

/// A whole scenario.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// Instances per type at t=0, as one pooled node per type (no
    /// fragmentation). `nodes` gives the fleet node by node instead.
    #[serde(default)]
    pub fleet: BTreeMap<String, u32>,
    /// The fleet node by node (executors and their instances), so that
    /// placement and fragmentation are modelled as the live scheduler sees
    /// them.
    #[serde(default)]
    pub nodes: Vec<NodeGroup>,
    pub queue: QueueSpec,
    /// Defaults for every submitted job.
    #[serde(default)]
    pub defaults: JobDefaults,
    #[serde(default)]
    pub actions: Vec<Action>,
    /// A synthetic workload added to `actions`.
    #[serde(default)]
    pub generate: Option<Generate>,
}

/// Several queues on one fleet: a service environment (`queues` instead
/// of `queue`). Each queue has its own jobs; the fleet is the
/// environment's, shared by priority (`qm_core::environment`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvironmentScenario {
    /// As a scenario's `fleet`: the environment's instances.
    #[serde(default)]
    pub fleet: BTreeMap<String, u32>,
    /// As a scenario's `nodes`: the environment's executors.
    #[serde(default)]
    pub nodes: Vec<NodeGroup>,
    /// The environment's name (reports show it).
    #[serde(default = "default_environment")]
    pub service_environment: String,
    pub queues: Vec<QueueScenario>,
}

fn default_environment() -> String {
    "environment".into()
}

/// One queue of an [`EnvironmentScenario`], with its own jobs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueScenario {
    pub queue: QueueSpec,
    #[serde(default)]
    pub defaults: JobDefaults,
    #[serde(default)]
    pub actions: Vec<Action>,
    #[serde(default)]
    pub generate: Option<Generate>,
}

impl EnvironmentScenario {
    /// Each queue as a scenario of its own over the environment's fleet.
    pub fn scenarios(&self) -> Vec<Scenario> {
        self.queues
            .iter()
            .map(|q| Scenario {
                fleet: self.fleet.clone(),
                nodes: self.nodes.clone(),
                queue: q.queue.clone(),
                defaults: q.defaults.clone(),
                actions: q.actions.clone(),
                generate: q.generate.clone(),
            })
            .collect()
    }
}

/// `count` nodes alike, named `<name>-1` .. `<name>-<count>` (the name
/// defaults to the instance type).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeGroup {
    #[serde(default = "one")]
    pub count: u32,
    pub instance_type: String,
    /// Instances of the type each node offers.
    pub instances: u32,
    #[serde(default)]
    pub name: Option<String>,
    /// The runtimes each node offers (`process`, `container`); default
    /// `[process]`, as an executor that does not say.
    #[serde(default)]
    pub runtimes: Option<Vec<String>>,
}

impl NodeGroup {
    /// The runtimes its nodes offer, or the unknown name.
    pub fn runtimes(&self) -> Result<qm_core::Runtimes, String> {
        match &self.runtimes {
            None => Ok(qm_core::Runtimes::default()),
            Some(names) => qm_wire::to_core::runtimes(names).map_err(|e| format!("runtimes: {e}")),
        }
    }

    /// The names of the group's nodes.
    pub fn node_names(&self) -> Vec<String> {
        let prefix = self.name.as_deref().unwrap_or(&self.instance_type);
        (1..=self.count).map(|i| format!("{prefix}-{i}")).collect()
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobDefaults {
    pub startup_seconds: Option<f64>,
    pub stop_seconds: Option<f64>,
    pub checkpoint_interval_seconds: Option<f64>,
    pub checkpoint_on_stop: Option<bool>,
    pub checkpoint_seconds: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueSpec {
    pub job_queue_name: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub queueing_strategy: Option<String>,
    #[serde(default)]
    pub capacity_limits: Vec<wire::CapacityLimit>,
    /// The default `checkpointBeforePreemptSeconds` of checkpointing jobs.
    #[serde(default)]
    pub checkpoint_before_preempt_seconds: Option<u64>,
    /// FIFO (default) | FAIR_SHARE.
    #[serde(default)]
    pub idle_resource_assignment_strategy: Option<String>,
    #[serde(default)]
    pub fair_share_half_life_hours: Option<u64>,
    #[serde(default)]
    pub fair_share_rebalance_seconds: Option<u64>,
    /// Share groups, as `CreateJobQueue` takes them.
    #[serde(default)]
    pub share_groups: Vec<wire::ShareGroup>,
    /// In an environment scenario (`queues`): the queue's priority, 0-1000,
    /// higher served first.
    #[serde(default)]
    pub priority: Option<u32>,
    /// Quota shares exactly as the API takes them (`CreateQuotaShare`).
    pub quota_shares: Vec<wire::QuotaShare>,
}

/// A failure injected into one attempt of a simulated job.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureSpec {
    pub attempt: u32,
    pub after_seconds: f64,
    pub exit_code: i32,
}

/// `SubmitServiceJob` plus the simulated workload's shape.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitSpec {
    pub job_name: String,
    pub quota_share_name: String,
    pub instance_type: String,
    #[serde(default = "one")]
    pub instance_count: u32,
    /// Absent: 0, or the lowest of its workload class's band.
    #[serde(default)]
    pub scheduling_priority: Option<u32>,
    /// Its share's workload class (absent: the share's default class).
    #[serde(default)]
    pub workload_class: Option<String>,
    pub preemption_retries_before_termination: Option<u32>,
    #[serde(default)]
    pub retry_strategy: Option<wire::RetryStrategy>,
    #[serde(default)]
    pub timeout_config: Option<wire::TimeoutConfig>,
    /// `estimatedRuntimeSeconds`: what a borrowing budget holds back for
    /// one attempt (absent: its timeout).
    #[serde(default)]
    pub estimated_runtime_seconds: Option<u64>,
    pub termination_grace_period_seconds: Option<u64>,
    /// Seconds of work the job needs.
    pub duration_seconds: f64,
    /// Commits a checkpoint after each such interval of progress; absent = the
    /// job does not checkpoint and a preemption loses all its progress.
    pub checkpoint_interval_seconds: Option<f64>,
    /// Restore and launch delay of each attempt.
    pub startup_seconds: Option<f64>,
    /// Time from the stop request to the end of the attempt (capped by the
    /// grace period).
    pub stop_seconds: Option<f64>,
    /// Whether the job writes a final checkpoint when asked to stop.
    pub checkpoint_on_stop: Option<bool>,
    /// Checkpoint-then-preempt (`checkpointConfig.checkpointBeforePreemptSeconds`):
    /// when preempted, the job is first asked to checkpoint and stopped
    /// after the commit or this many seconds.
    pub checkpoint_before_preempt_seconds: Option<u64>,
    /// Seconds from the checkpoint signal to the commit of the checkpoint
    /// it asks for; absent: the job does not answer the signal.
    pub checkpoint_seconds: Option<f64>,
    #[serde(default)]
    pub failures: Vec<FailureSpec>,
    /// The job runs in this image: placed only on nodes offering the
    /// `container` runtime (`nodes[].runtimes`).
    #[serde(default)]
    pub container_image: Option<String>,
}

fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateJobSpec {
    pub job_name: String,
    pub scheduling_priority: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobRefSpec {
    pub job_name: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShareRefSpec {
    pub quota_share_name: String,
}

/// One timed action; exactly one of the verbs is set.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Action {
    /// Virtual time in seconds.
    pub at: f64,
    pub submit: Option<SubmitSpec>,
    pub update_service_job: Option<UpdateJobSpec>,
    pub terminate_service_job: Option<JobRefSpec>,
    pub create_quota_share: Option<wire::QuotaShare>,
    /// `UpdateQuotaShare`: the name and only the fields to change (`null`
    /// removes one), merged as the API merges it (`qm_wire::updates`).
    pub update_quota_share: Option<qm_wire::updates::SharePatch>,
    pub delete_quota_share: Option<ShareRefSpec>,
    pub set_fleet: Option<BTreeMap<String, u32>>,
    /// Nodes join (or a node of that name registers again, as a restarted
    /// executor: what ran there ends HOST_LOST).
    pub add_nodes: Option<NodeGroup>,
    /// A node is lost (stops heartbeating): its attempts end HOST_LOST.
    pub lose_node: Option<String>,
}

impl Action {
    /// The verbs set, with their names.
    fn verbs(&self) -> [(bool, &'static str); 9] {
        [
            (self.submit.is_some(), "submit"),
            (self.update_service_job.is_some(), "updateServiceJob"),
            (self.terminate_service_job.is_some(), "terminateServiceJob"),
            (self.create_quota_share.is_some(), "createQuotaShare"),
            (self.update_quota_share.is_some(), "updateQuotaShare"),
            (self.delete_quota_share.is_some(), "deleteQuotaShare"),
            (self.set_fleet.is_some(), "setFleet"),
            (self.add_nodes.is_some(), "addNodes"),
            (self.lose_node.is_some(), "loseNode"),
        ]
    }

    /// How many verbs are set (a valid action has exactly one).
    pub fn verb_count(&self) -> usize {
        self.verbs().iter().filter(|(set, _)| *set).count()
    }

    /// The (first) verb set.
    pub fn verb(&self) -> &'static str {
        self.verbs()
            .iter()
            .find(|(set, _)| *set)
            .map_or("none", |(_, name)| name)
    }

    /// The job the action is about, if any.
    pub fn job_name(&self) -> Option<&str> {
        if let Some(s) = &self.submit {
            return Some(&s.job_name);
        }
        if let Some(u) = &self.update_service_job {
            return Some(&u.job_name);
        }
        self.terminate_service_job
            .as_ref()
            .map(|t| t.job_name.as_str())
    }
}

/// A synthetic workload: `jobs` jobs with Poisson arrivals, spread over the
/// shares in proportion to their entitlement, reproducible from `seed`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Generate {
    pub jobs: u64,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Mean seconds between submissions.
    pub mean_interarrival_seconds: f64,
    /// Durations are log-uniform in [min, max] seconds.
    pub min_duration_seconds: f64,
    pub max_duration_seconds: f64,
    /// Instance counts drawn uniformly from this list.
    #[serde(default = "default_counts")]
    pub instance_counts: Vec<u32>,
    /// Priorities drawn uniformly from 0..=maxPriority.
    #[serde(default)]
    pub max_priority: u32,
    /// Share of jobs that checkpoint (0..=1).
    #[serde(default = "default_checkpointing")]
    pub checkpointing_fraction: f64,
    #[serde(default = "default_interval")]
    pub checkpoint_interval_seconds: f64,
}

fn default_seed() -> u64 {
    1
}

fn default_counts() -> Vec<u32> {
    vec![1]
}

fn default_checkpointing() -> f64 {
    1.0
}

fn default_interval() -> f64 {
    600.0
}
