//! Jobs: submitting, describing, listing, updating and terminating them
//! (a queue's snapshots and outlooks are in `views.rs`, drills and the
//! records in `records.rs`).

use std::collections::BTreeMap;

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
