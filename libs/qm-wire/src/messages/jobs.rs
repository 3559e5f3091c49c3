//! Jobs: submitting, describing, listing, updating and terminating them, a
//! queue's snapshot, and what a submit would do.

use std::collections::BTreeMap;

use super::BorrowBudget;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobPreemptionConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_retries_before_termination: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvaluateOnExit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exit_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status_reason: Option<String>,
    /// RETRY | EXIT
    #[schemars(extend("enum" = ["RETRY", "EXIT"]))]
    pub action: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evaluate_on_exit: Vec<EvaluateOnExit>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutConfig {
    pub attempt_duration_seconds: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointConfig {
    /// `s3://bucket/prefix`: where this job's checkpoints live (manifests
    /// under `prefix/manifests/`, file contents under `prefix/blobs/`).
    /// Default: the checkpoint service's bucket, prefix `<queue>/<jobId>`.
    /// Two jobs given the same URI share (and overwrite) checkpoints, as
    /// in SageMaker: reuse one only to resume a job's work in another job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_uri: Option<String>,
    /// The directory given to the process as `QM_CHECKPOINT_DIR`, relative
    /// to the attempt's working directory; default `checkpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_path: Option<String>,
    /// Checkpoint-then-preempt: when the job is preempted while running,
    /// it is first sent `checkpointSignal` and stopped only once a
    /// checkpoint committed after that, or after this many seconds
    /// (0: stopped at once; at most 3600). Default: the queue's
    /// `checkpointBeforePreemptSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_before_preempt_seconds: Option<u64>,
    /// The signal that asks the job to checkpoint now: `SIGUSR1`
    /// (default), `SIGUSR2`, `SIGHUP` or `SIGINT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_signal: Option<String>,
}

/// The signal that asks a job to checkpoint now, unless it names another.
pub const DEFAULT_CHECKPOINT_SIGNAL: &str = "SIGUSR1";

/// The signals a job may choose to be asked to checkpoint with.
pub const CHECKPOINT_SIGNALS: [&str; 4] = ["SIGUSR1", "SIGUSR2", "SIGHUP", "SIGINT"];

/// One input channel of a container job (SageMaker's `InputDataConfig`
/// entry with an `S3DataSource` of type `S3Prefix`, File mode).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputChannel {
    /// 1-64 letters, digits, `.`, `_` and `-`: the folder under
    /// `/opt/ml/input/data`.
    pub channel_name: String,
    /// `s3://bucket/prefix`: every object under the folder `prefix/` (not a
    /// sibling `prefix-other/`: the share's read rule has a folder boundary).
    /// It must lie where the job's share may read (`inputS3Prefixes`;
    /// default: its own checkpoint area).
    pub s3_uri: String,
    /// `FullyReplicated` (default: every node gets every object) or
    /// `ShardedByS3Key` (each node its share, by key order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_data_distribution_type: Option<String>,
}

impl InputChannel {
    pub fn sharded(&self) -> bool {
        self.s3_data_distribution_type.as_deref() == Some("ShardedByS3Key")
    }
}

/// Where a job's outputs are uploaded when it succeeds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputDataConfig {
    /// `s3://bucket/prefix`: `/opt/ml/model` becomes
    /// `<prefix>/<jobId>/output/model.tar.gz` and `/opt/ml/output/data`
    /// `output.tar.gz`. It must lie where the job's share may write (its
    /// `checkpointS3Prefixes`, as for checkpoints).
    pub s3_output_path: String,
}

/// `SubmitServiceJob`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubmitServiceJob {
    pub job_name: String,
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    pub instance_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<JobPreemptionConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_strategy: Option<RetryStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_config: Option<TimeoutConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_config: Option<CheckpointConfig>,
    /// The program and its arguments (never a shell string). With a
    /// `containerImage`: the container's argv, replacing the image's
    /// entrypoint; empty: the image's entrypoint with the argument `train`,
    /// as SageMaker starts a training image.
    #[serde(default)]
    pub command: Vec<String>,
    /// An OCI image to run the job in (`registry/repository:tag` or
    /// `@sha256:...`): the job runs in the `container` runtime, with the
    /// SageMaker training-container contract (`/opt/ml`). Only images under
    /// the share's `imagePrefixes` in the tenancy are accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image: Option<String>,
    /// Where a successful container job's `/opt/ml/model` and
    /// `/opt/ml/output/data` go (SageMaker's `OutputDataConfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_data_config: Option<OutputDataConfig>,
    /// A container job's input channels, downloaded into
    /// `/opt/ml/input/data/<channelName>` before it starts (File mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_data_config: Vec<InputChannel>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Same token, same job: a retried submit never creates a second job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
    /// Its share's workload class (default: the share's default class).
    /// Its `schedulingPriority` must lie in the class's band; left out, it
    /// is the band's lowest value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_class: Option<String>,
    /// How long one attempt is expected to run, in seconds: what a share's
    /// borrowing budget holds back for it when it borrows (absent: its
    /// `timeoutConfig.attemptDurationSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_runtime_seconds: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubmitServiceJobResponse {
    pub job_id: String,
    pub job_name: String,
    /// When the job was first submitted (ms since the Unix epoch, the
    /// admission service's clock; a retry with the same client token gets
    /// the first submit's time): follow its events `since` a little
    /// before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_at: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRef {
    pub job_id: String,
}

/// `UpdateServiceJob`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateServiceJob {
    pub job_id: String,
    pub scheduling_priority: u32,
}

/// `TerminateServiceJob`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminateServiceJob {
    pub job_id: String,
    #[serde(default)]
    pub reason: String,
}

/// `ListServiceJobs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListServiceJobs {
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One attempt, as `DescribeServiceJob` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptDetail {
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    /// When it was placed: its instances are held from here to
    /// `stoppedAt` (what the usage ledger counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// SUCCEEDED | FAILED | PREEMPTED_CROSS_SHARE | PREEMPTED_IN_SHARE |
    /// PREEMPTED_LIMIT_REDUCED | HOST_LOST | TIMED_OUT | CANCELLED
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["SUCCEEDED", "FAILED", "PREEMPTED_CROSS_SHARE", "PREEMPTED_IN_SHARE", "PREEMPTED_LIMIT_REDUCED", "PREEMPTED_BUDGET", "PREEMPTED_REBALANCE", "PREEMPTED_DRILL", "HOST_LOST", "TIMED_OUT", "CANCELLED", null]))]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_checkpoint_step: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_step: Option<u64>,
    /// The lost-work ledger, for an attempt that ended preempted or with its
    /// host lost: milliseconds of work (per instance) from its last
    /// committed checkpoint, or from when it began running, to its stop,
    /// which the next attempt computes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recomputed_ms: Option<u64>,
    /// A preempted attempt's beneficiary: the job it was stopped for, and
    /// that job's share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_for_job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_for_share: Option<String>,
    /// Checkpoint bytes this attempt's restore moved (every rank counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_bytes: Option<u64>,
    /// Newer checkpoints its restore skipped, with why (damaged or
    /// incomplete): the attempt resumed from an older one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restore_skipped: Vec<String>,
    /// Since when this attempt's checkpoints are not uploaded (ms since the
    /// Unix epoch), and the checkpoint service's last error: the lag until
    /// its next commit. Absent while commits succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_upload_failing_since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_upload_error: Option<String>,
    /// Why the attempt failed, in the job's words (a container's
    /// `/opt/ml/output/failure`, first 1,024 characters) or the runtime's
    /// (killed for its memory limit; an image that could not be pulled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// What a starting attempt is doing before its job runs: pulling its
    /// image, downloading an input channel (the last step reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionSummary {
    pub preempted_attempt_count: u32,
    #[serde(default)]
    pub recent_preempted_attempts: Vec<AttemptDetail>,
}

/// `DescribeServiceJob`'s body, and each entry of `ListServiceJobs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJob {
    pub job_id: String,
    pub job_name: String,
    pub job_queue: String,
    pub quota_share_name: String,
    #[schemars(extend("enum" = ["SUBMITTED", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED"]))]
    pub status: String,
    #[serde(default)]
    pub status_reason: String,
    pub instance_type: String,
    pub instance_count: u32,
    pub scheduling_priority: u32,
    /// Its workload class (absent: the share declares none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_class: Option<String>,
    /// Whether it runs (in part) on capacity borrowed from other shares.
    #[serde(default)]
    pub on_borrowed_capacity: bool,
    pub created_at: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptDetail>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_summary: Option<PreemptionSummary>,
    /// A RUNNABLE job's place in line among equal priorities: when it last
    /// became RUNNABLE (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runnable_since: Option<u64>,
    /// The tags it was submitted with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The image it runs in (the `container` runtime), if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image: Option<String>,
    /// `DescribeServiceJob` of a job that has not ended: its trace's id
    /// (W3C, 32 hex digits), to find its one trace in a tracing backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListServiceJobsResponse {
    pub job_summary_list: Vec<ServiceJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One share's use of one type in a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareUsage {
    pub quota_share_name: String,
    pub instance_type: String,
    pub entitlement: u32,
    pub used: u32,
    pub borrowed: u32,
    pub lent: u32,
    pub idle: u32,
}

/// `GetJobQueueSnapshot`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobQueueSnapshot {
    pub job_queue: String,
    /// The first waiting jobs in line, with why they wait.
    pub front_of_queue: Vec<ServiceJob>,
    pub shares: Vec<ShareUsage>,
    /// The first RUNNABLE job of each share the caller may read (in
    /// dispatch order), even when it is too far back for `frontOfQueue`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub front_of_quota_shares: Vec<ServiceJob>,
    /// The lost-work ledger's totals, per share that has lost work or
    /// been the beneficiary of others' (since the queue's state began;
    /// they outlive the jobs they came from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_work: Vec<ShareLostWork>,
    /// The borrowing budgets of the shares the caller may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetBurnDown>,
}

/// Attempts that threw work away, and how much (instance-milliseconds:
/// each attempt's lost time times its instances).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LostWorkTotal {
    pub attempts: u64,
    pub recomputed_instance_ms: u64,
}

/// One share's lost-work totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareLostWork {
    pub quota_share_name: String,
    /// This share's attempts, by cause: PREEMPTED_CROSS_SHARE,
    /// PREEMPTED_IN_SHARE, PREEMPTED_LIMIT_REDUCED, HOST_LOST (causes with
    /// nothing lost are left out).
    #[serde(default)]
    pub by_cause: BTreeMap<String, LostWorkTotal>,
    /// Other jobs' attempts, preempted for this share's jobs.
    #[serde(default)]
    pub lost_for_this_share: LostWorkTotal,
    /// Checkpoint bytes this share's attempts restored.
    #[serde(default)]
    pub restored_bytes: u64,
}

/// A job another would stop (`DryRunServiceJob`, `ExplainServiceJob`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutlookVictim {
    pub job_id: String,
    /// Only when the caller may read the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    pub quota_share_name: String,
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED
    pub kind: String,
    /// Its work since its last committed checkpoint (or since it began
    /// running), per instance: what it would compute again.
    pub work_at_risk_seconds: f64,
}

/// `DryRunServiceJob` (a submit that changes nothing) and
/// `ExplainServiceJob` (a waiting job): what the next scheduling pass
/// would do for the job, from the scheduling core's own pass on a copy of
/// the live state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobOutlook {
    /// STARTS | PREEMPTS | WAITS | NOT_WAITING
    #[schemars(extend("enum" = ["STARTS", "PREEMPTS", "WAITS", "NOT_WAITING"]))]
    pub outcome: String,
    /// `ExplainServiceJob`: the job explained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// NOT_WAITING: its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// STARTS: instances on its share's own capacity, and borrowed.
    #[serde(default)]
    pub own_instances: u32,
    #[serde(default)]
    pub borrowed_instances: u32,
    /// STARTS with borrowing: the shares with idle capacity of its type
    /// that they lend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lending_shares: Vec<String>,
    /// PREEMPTS: the jobs that would be stopped for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub victims: Vec<OutlookVictim>,
    /// WAITS: why, as `DescribeServiceJob` would say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// WAITS: the jobs of its share and type ahead of it in line (first 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<String>,
    /// WAITS: how many jobs of its share and type are ahead of it in line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_in_line: Option<u32>,
    /// WAITS: when it is expected to start (ms since the Unix epoch), the
    /// scheduling passes replayed forward with every running job ending
    /// when it is expected to (its estimatedRuntimeSeconds, else its
    /// attempt timeout). Absent when that cannot be foreseen
    /// (`estimateNote` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_note: Option<String>,
    /// WAITS: what would let it start, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unblock: Option<String>,
}

/// One job a configuration change would affect (`DryRunUpdateQuotaShare`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AffectedJob {
    pub job_id: String,
    /// Only when the caller may read the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    pub quota_share_name: String,
    /// What changes for it, in a few words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// `DryRunUpdateQuotaShare` (a share update checked as an update is, and
/// not stored): what applying it now would do, from the core's own dry run
/// on a copy of the live state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueChangeOutlook {
    pub job_queue: String,
    /// Running jobs that would be on borrowed capacity, preemptible by a
    /// lender's reclaim, and are not now.
    pub become_preemptible: Vec<AffectedJob>,
    /// Running jobs preemptible now that would no longer be.
    pub become_protected: Vec<AffectedJob>,
    /// Waiting jobs that could never run under the change (why).
    pub become_unfittable: Vec<AffectedJob>,
    /// Jobs moved to another workload class or priority.
    pub reclassified: Vec<AffectedJob>,
    /// Jobs the change would stop or fail (a deleted share's).
    pub terminated: Vec<AffectedJob>,
    /// The pass after the change: jobs it would start, and jobs it would
    /// preempt (limit reduced or reclaimed).
    pub next_pass_starts: Vec<AffectedJob>,
    pub next_pass_preemptions: Vec<OutlookVictim>,
}

/// `GetReclaimExposure`: which of a share's jobs on borrowed capacity each
/// lending share would preempt if it submitted now (reading the share).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetReclaimExposure {
    pub job_queue: String,
    pub quota_share_name: String,
}

/// One lender's reclaim of one instance type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LenderExposure {
    pub lending_share: String,
    pub instance_type: String,
    /// Instances of the type it lends now.
    pub lent: u32,
    /// The share's jobs a submit of the lender's would stop, with the work
    /// each would compute again.
    #[serde(default)]
    pub victims: Vec<OutlookVictim>,
    /// Its submit would wait instead: why (the borrowed jobs are protected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimExposure {
    pub job_queue: String,
    pub quota_share_name: String,
    pub exposures: Vec<LenderExposure>,
}

/// `StartResumeDrill`: runs `job` twice on its share's own capacity, one
/// copy stopped after its first committed checkpoint and resumed, one
/// uninterrupted, and compares what they declare as their result
/// (`docs/workload-classes.md`). Its right is a submit's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartResumeDrill {
    pub job: SubmitServiceJob,
    /// Draws the point at which the resumed copy is stopped (default: one
    /// drawn by admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartResumeDrillResponse {
    pub drill_id: String,
    /// The copy that is stopped and resumed.
    pub resumed_job_id: String,
    pub uninterrupted_job_id: String,
}

/// `ListResumeDrills`: a queue's drills, those of the shares the caller
/// may read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResumeDrills {
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
}

/// One resume drill and its outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeDrill {
    pub drill_id: String,
    pub job_queue: String,
    pub quota_share_name: String,
    pub workload_class: String,
    /// What it proves: `image:<reference>` or `command:<sha256>`.
    pub artifact: String,
    /// RUNNING | PASSED | FAILED
    pub status: String,
    /// Why it failed: what differed, or why it could not be decided.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status_reason: String,
    pub resumed_job_id: String,
    pub uninterrupted_job_id: String,
    pub started_at: u64,
    /// When the resumed copy was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// Work the stop cost the resumed copy (ms per instance, since its
    /// last checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recomputed_ms: Option<u64>,
    /// The checkpoint step the resumed copy restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_step: Option<u64>,
    /// From the resumed attempt's placement to its process running, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResumeDrillsResponse {
    pub drills: Vec<ResumeDrill>,
}

/// `GetPolicyStabilityRecord`: per share and week, how often the
/// arrangement needed people (priority changes, terminations,
/// configuration changes) and how it treated work (preemptions, owners'
/// reclaim waits, drills, borrowing refused for a missing resume proof).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetPolicyStabilityRecord {
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Weeks that end after this (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

/// A count by who caused it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ByPrincipal {
    pub principal: String,
    pub count: u32,
}

/// Preemptions of one kind and workload class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionCount {
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED
    pub kind: String,
    pub workload_class: String,
    pub count: u32,
}

/// Seconds, nearest-rank percentiles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitPercentiles {
    pub count: u32,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// One share's week.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareWeek {
    pub quota_share_name: String,
    /// Its Monday, `YYYY-MM-DD` (weeks start Monday 00:00 UTC).
    pub week: String,
    pub week_start: u64,
    pub priority_changes: Vec<ByPrincipal>,
    pub terminations: Vec<ByPrincipal>,
    pub configuration_changes: Vec<ByPrincipal>,
    /// Of this share's jobs.
    pub preemptions: Vec<PreemptionCount>,
    /// Jobs of this share preempted a third time this week.
    pub jobs_preempted_more_than_twice: u32,
    /// How long this share's jobs waited for lent capacity back: from the
    /// reclaim's first preemption to their start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_wait_seconds: Option<WaitPercentiles>,
    pub drills_passed: u32,
    pub drills_failed: u32,
    /// Jobs submitted in a class that borrows only with a resume proof,
    /// for an image or command without one.
    pub borrow_refusals_missing_proof: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStabilityRecord {
    pub job_queue: String,
    /// Oldest week first, shares in name order within a week.
    pub weeks: Vec<ShareWeek>,
}

/// `GetUsage`: the usage ledger of a queue, per share, instance type,
/// workload class and day (or week), from the days asked for, of the shares
/// the caller may read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetUsage {
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// The first day, `YYYY-MM-DD` (UTC); default: 6 days before `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The last day, `YYYY-MM-DD` (UTC), included; default: today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `DAY` (default) or `WEEK` (weeks start Monday 00:00 UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// Recomputed work of one cause, in instance-seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecomputedUsage {
    /// PREEMPTED_CROSS_SHARE | PREEMPTED_IN_SHARE | PREEMPTED_LIMIT_REDUCED | HOST_LOST
    pub cause: String,
    pub instance_seconds: f64,
}

/// One share's use of one instance type, in one workload class, over one
/// period. Instance-seconds, to the millisecond.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// The period's first day, `YYYY-MM-DD`.
    pub period: String,
    pub quota_share_name: String,
    pub instance_type: String,
    pub workload_class: String,
    /// Held within the share's entitlement.
    pub own_instance_seconds: f64,
    /// Held beyond it (see `lending` for whose capacity it was).
    pub borrowed_instance_seconds: f64,
    /// Queued (RUNNABLE) instances, waiting.
    pub waiting_instance_seconds: f64,
    /// Work thrown away by preempted attempts and lost hosts, by cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recomputed: Vec<RecomputedUsage>,
    /// Held by resume drills' jobs (part of `ownInstanceSeconds`).
    #[serde(default)]
    pub drill_instance_seconds: f64,
    /// Resume drills started.
    #[serde(default)]
    pub drills: u64,
}

/// Capacity one share borrowed from another (or from the queue's
/// unassigned capacity) over one period: the lender lent it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LendingRow {
    pub period: String,
    pub instance_type: String,
    pub borrower: String,
    /// The lending share; absent: capacity no share is entitled to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lender: Option<String>,
    pub instance_seconds: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    pub job_queue: String,
    pub from: String,
    pub to: String,
    /// DAY or WEEK.
    pub by: String,
    /// The report counts up to this moment (ms since the Unix epoch).
    pub as_of: u64,
    /// Period, share, type, class order.
    pub rows: Vec<UsageRow>,
    /// Borrowed capacity by period, type, borrower and lender: rows whose
    /// borrower or lender the caller may read.
    pub lending: Vec<LendingRow>,
    /// The borrowing budgets of the shares shown, as of `asOf`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetBurnDown>,
}

/// A share's borrowing budget now: what it allows, what the window (or the
/// decayed sum) holds, what running borrowed jobs are still expected to
/// use, and when it runs out or refills. Instance-hours.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetBurnDown {
    pub quota_share_name: String,
    pub budget: BorrowBudget,
    /// FINISH | CHECKPOINT_AND_STOP
    pub on_budget_exhausted: String,
    pub used_instance_hours: f64,
    pub committed_instance_hours: f64,
    /// The budget less what is used (at least 0).
    pub left_instance_hours: f64,
    /// Instances borrowed now, every type together.
    pub borrowing_instances: u32,
    /// When it is spent at the current rate (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhausts_at: Option<u64>,
    /// When the count next falls: an hour leaves the window (rolling
    /// windows only; a half-life refills continuously).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refills_at: Option<u64>,
}
