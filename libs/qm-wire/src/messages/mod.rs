//! The JSON bodies of API v1, shaped like the AWS Batch API (camelCase field
//! names of `SubmitServiceJob`, `DescribeServiceJob`, ...). Wire types are
//! separate from the core's domain types; services translate. Within v1 only
//! optional fields are ever added (golden fixtures in `tests/` prove old
//! messages keep decoding); unknown fields are ignored on decode.

use serde::{Deserialize, Serialize};

mod audit;
mod checks;
mod events;
mod executors;
mod jobs;
mod records;
mod views;

pub use audit::*;
pub use checks::*;
pub use events::*;
pub use executors::*;
pub use jobs::*;
pub use records::*;
pub use views::*;

/// Every reply: exactly one of `ok` or `error`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Reply<T> {
    Ok(T),
    Error(ApiError),
}

/// What kind of failure, for retries and exit codes (never string matching).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// The request is wrong; `problems` says where. Do not retry unchanged.
    Invalid,
    NotFound,
    /// The request conflicts with the current state (e.g. share still ENABLED).
    Conflict,
    /// Try again later (storage or a dependency is unavailable).
    Transient,
    Internal,
    /// The caller is authenticated but may not do this (the message names
    /// the principal, the operation and the share). Do not retry.
    AccessDenied,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    pub field: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiError {
    pub code: ErrorCode,
    /// One line a person can act on.
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

// ----- configuration -----------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityLimit {
    pub capacity_unit: String,
    pub max_capacity: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSharingConfiguration {
    /// RESERVE | LEND | LEND_AND_BORROW
    #[schemars(extend("enum" = ["RESERVE", "LEND", "LEND_AND_BORROW"]))]
    pub strategy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharePreemptionConfiguration {
    /// ENABLED | DISABLED
    #[schemars(extend("enum" = ["ENABLED", "DISABLED"]))]
    pub in_share_preemption: String,
}

/// Quartermaster's per-share protections (all off when absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Protections {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_runtime_before_preemption_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reborrow_cooldown_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_requires_checkpoint: Option<bool>,
}

/// A share's `borrowBudget`: instance-hours of borrowed capacity per
/// rolling window (`windowHours`) or of borrowed usage decayed with a
/// half-life (`halfLifeHours`); exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BorrowBudget {
    /// Instance-hours (fractions allowed, to the instance-second).
    pub instance_hours: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_hours: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_life_hours: Option<u64>,
}

// Instance-hours are a finite number (admission refuses others), so
// equality is an equivalence.
impl Eq for BorrowBudget {}

/// A field an update may set, leave alone (absent) or remove (`null`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A workload class's priority band: `schedulingPriority` `min..=max`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PriorityBand {
    pub min: u32,
    pub max: u32,
}

/// One workload class of a share (Quartermaster's; see
/// `docs/workload-classes.md`). Absent fields take the defaults: may
/// borrow, no resume proof, preemptible by any class, the share's
/// minimum runtime, the job's or queue's checkpoint-then-preempt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadClass {
    pub name: String,
    pub priority_band: PriorityBand,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub may_borrow: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_requires_resume_proof: Option<bool>,
    /// Classes whose jobs may preempt this class's jobs in-share; absent:
    /// any class; empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible_by: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_runtime_before_preemption_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_before_preempt_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_checkpoint: Option<bool>,
    /// How far a resume drill's metrics may differ, in parts per million
    /// of the larger value (1000 = 0.1%; default 0: equal; at most
    /// 1,000,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_tolerance_ppm: Option<u32>,
}

/// `CreateQuotaShare` / `UpdateQuotaShare` (update: only given fields change)
/// and the body of `DescribeQuotaShare`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShare {
    /// May be left out inside a queue document (`qm apply -f`).
    #[serde(default)]
    pub job_queue: String,
    pub quota_share_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ENABLED", "DISABLED", null]))]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_limits: Option<Vec<CapacityLimit>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_sharing_configuration: Option<ResourceSharingConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<SharePreemptionConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protections: Option<Protections>,
    /// Where jobs of this share may keep checkpoints with
    /// `checkpointConfig.s3Uri`: `s3://bucket/prefix/` entries, a URI must
    /// lie under one. Default (absent): only under the checkpoint bucket's
    /// `<queue>/shares/<share>/`, so no share can reach another's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_s3_prefixes: Option<Vec<String>>,
    /// The images jobs of this share may run (`containerImage`): each entry
    /// a repository (`registry.local/team-a/trainer`, any tag or digest of
    /// it) or a prefix ending in `/` (`registry.local/team-a/`, every
    /// repository under it). Default (absent or empty): no image; such a
    /// share runs host commands only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_prefixes: Option<Vec<String>>,
    /// Where jobs of this share may read input channels
    /// (`inputDataConfig[].s3Uri`): `s3://bucket/prefix/` entries. Default
    /// (absent): only under the checkpoint bucket's
    /// `<queue>/shares/<share>/`, as for checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_s3_prefixes: Option<Vec<String>>,
    /// The share's containers may not run as root: an image whose user is
    /// root (or none) runs as the executor's `runAsUser` (default 65534,
    /// nobody) instead. Default (absent): the image's user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Up to 10 kinds of work with their own priority band and
    /// interruption policy. Absent: one implicit class, `default`, with
    /// the share's protections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_classes: Option<Vec<WorkloadClass>>,
    /// The class of jobs that name none; default: the first class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_workload_class: Option<String>,
    /// How much a LEND_AND_BORROW share may borrow over time; `null` in an
    /// update removes it. Absent: no budget (or, in an update, unchanged).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub borrow_budget: Option<Option<BorrowBudget>>,
    /// FINISH (default) | CHECKPOINT_AND_STOP: what running borrowed jobs do
    /// when the budget is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_budget_exhausted: Option<String>,
    /// 1-100 (default 1): its part of idle capacity under FAIR_SHARE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_weight: Option<u32>,
    /// The share group it belongs to (`shareGroups` of its queue); `null`
    /// in an update takes it out of its group.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub share_group: Option<Option<String>>,
}

/// `CreateJobQueue` / `UpdateJobQueue`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobQueue {
    pub job_queue_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ENABLED", "DISABLED", null]))]
    pub state: Option<String>,
    /// BEST_EFFORT_FIFO | STRICT_FIFO
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["BEST_EFFORT_FIFO", "STRICT_FIFO", null]))]
    pub queueing_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_limits: Vec<CapacityLimit>,
    /// The `checkpointConfig.checkpointBeforePreemptSeconds` of the queue's
    /// checkpointing jobs that give none (default 0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_before_preempt_seconds: Option<u64>,
    /// FIFO (default) | FAIR_SHARE: how lendable capacity goes to
    /// borrowers (docs/fair-share.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["FIFO", "FAIR_SHARE", null]))]
    pub idle_resource_assignment_strategy: Option<String>,
    /// Under FAIR_SHARE: how fast past borrowing is forgotten (default 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_half_life_hours: Option<u64>,
    /// Under FAIR_SHARE: rebalancing preemption between borrowers, each job
    /// at most once per this many seconds of its run (absent: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_rebalance_seconds: Option<u64>,
    /// Share groups (departments): shares that lend to each other first,
    /// with a borrow limit for them together (docs/share-groups.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub share_groups: Vec<ShareGroup>,
    /// The service environment whose executors run the queue's jobs
    /// (docs/semantics-decisions.md, "Service environments"); absent: the
    /// executors started for this queue by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment: Option<String>,
    /// 0-1000 (default 0): in a service environment, the queue with the
    /// higher priority takes free capacity first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

/// One share group of a queue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShareGroup {
    pub share_group_name: String,
    /// Percent of the group's shares' entitlements they may borrow
    /// together; -1 (default): unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareRef {
    pub job_queue: String,
    pub quota_share_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueRef {
    pub job_queue: String,
}

/// `ListJobQueues`: the names of the queues the caller may read, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobQueueNames {
    pub job_queues: Vec<String>,
}

/// `ListQuotaShares`: the shares of a queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareList {
    pub quota_shares: Vec<QuotaShare>,
}

/// A request or an answer with no fields (`{}`): `WhoAmI` and
/// `ListJobQueues` ask with it; a deletion and a registration answer it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Empty {}
