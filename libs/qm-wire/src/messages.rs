//! The JSON bodies of API v1, shaped like the AWS Batch API (camelCase field
//! names of `SubmitServiceJob`, `DescribeServiceJob`, ...). Wire types are
//! separate from the core's domain types; services translate. Within v1 only
//! optional fields are ever added (golden fixtures in `tests/` prove old
//! messages keep decoding); unknown fields are ignored on decode.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Every reply: exactly one of `ok` or `error`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reply<T> {
    Ok(T),
    Error(ApiError),
}

/// What kind of failure, for retries and exit codes (never string matching).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    pub field: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiError {
    pub code: ErrorCode,
    /// One line a person can act on.
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

// ----- configuration -----------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityLimit {
    pub capacity_unit: String,
    pub max_capacity: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSharingConfiguration {
    /// RESERVE | LEND | LEND_AND_BORROW
    pub strategy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SharePreemptionConfiguration {
    /// ENABLED | DISABLED
    pub in_share_preemption: String,
}

/// Quartermaster's per-share protections (all off when absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protections {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_runtime_before_preemption_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reborrow_cooldown_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_requires_checkpoint: Option<bool>,
}

/// `CreateQuotaShare` / `UpdateQuotaShare` (update: only given fields change)
/// and the body of `DescribeQuotaShare`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShare {
    /// May be left out inside a queue document (`qm apply -f`).
    #[serde(default)]
    pub job_queue: String,
    pub quota_share_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
}

/// `CreateJobQueue` / `UpdateJobQueue`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobQueue {
    pub job_queue_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// BEST_EFFORT_FIFO | STRICT_FIFO
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queueing_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_limits: Vec<CapacityLimit>,
    /// The `checkpointConfig.checkpointBeforePreemptSeconds` of the queue's
    /// checkpointing jobs that give none (default 0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_before_preempt_seconds: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareRef {
    pub job_queue: String,
    pub quota_share_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueRef {
    pub job_queue: String,
}

// ----- jobs ----------------------------------------------------------------

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobPreemptionConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_retries_before_termination: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluateOnExit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exit_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status_reason: Option<String>,
    /// RETRY | EXIT
    pub action: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evaluate_on_exit: Vec<EvaluateOnExit>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutConfig {
    pub attempt_duration_seconds: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// A parsed `s3://bucket/prefix` URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Uri {
    pub bucket: String,
    /// Not empty, without a trailing `/`.
    pub prefix: String,
}

/// Parses `s3://bucket/prefix`, naming what is wrong: the bucket must be
/// a valid S3 bucket name (3-63 lowercase letters, digits, `.` and `-`,
/// starting and ending with a letter or digit); the prefix (a trailing `/`
/// allowed) must be a [`safe_relative_path`](crate::paths::safe_relative_path).
pub fn parse_s3_uri(uri: &str) -> Result<S3Uri, String> {
    let rest = uri
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{uri:?} must start with s3://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let ok_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !(3..=63).contains(&bucket.len())
        || !bucket.chars().all(ok_char)
        || !ok_end(bucket.chars().next())
        || !ok_end(bucket.chars().last())
    {
        return Err(format!(
            "bucket {bucket:?} is not a valid S3 bucket name (3-63 lowercase letters, digits, '.' and '-')"
        ));
    }
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return Err(format!(
            "{uri:?} needs a prefix after the bucket (s3://{bucket}/some/prefix), so checkpoints do not mix with the bucket's other objects"
        ));
    }
    if !crate::paths::safe_relative_path(prefix) {
        return Err(format!(
            "prefix {prefix:?} must be '/'-separated names, none empty, '.' or '..'"
        ));
    }
    Ok(S3Uri {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    })
}

/// Checks a `localPath` (a trailing `/` allowed): it must stay inside the
/// attempt's directory ([`safe_relative_path`](crate::paths::safe_relative_path)).
pub fn check_local_path(path: &str) -> Result<(), String> {
    if !crate::paths::safe_relative_path(path.trim_end_matches('/')) {
        return Err(format!(
            "{path:?} must be a relative path inside the attempt's directory (no '..', not absolute)"
        ));
    }
    Ok(())
}

/// Checks an image reference as the container engine reads one:
/// `[host[:port]/]path[:tag][@sha256:<64 hex>]`, path components of
/// lowercase letters, digits and `.`, `_`, `-` separators, a tag of at most
/// 128 word characters, `.` and `-`, 255 characters in all.
pub fn check_image_reference(image: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{image:?} is not an image reference: {why}"));
    if image.is_empty() || image.len() > 255 {
        return bad("it must be 1-255 characters");
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let hex = d.strip_prefix("sha256:").unwrap_or("");
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return bad("a digest is sha256: and 64 lowercase hex digits");
        }
    }
    // A tag follows the last ':' after the last '/' (a ':' before it is a
    // registry's port).
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (path, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    if let Some(tag) = tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && !tag.starts_with(['.', '-'])
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !ok {
            return bad(
                "a tag is 1-128 letters, digits, '_', '.' and '-', not starting with '.' or '-'",
            );
        }
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    // The first component is a registry host when it has a '.' or ':' or
    // is localhost; it may hold uppercase letters and a port.
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        let host = parts.remove(0);
        let (h, port) = match host.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        };
        let host_ok = !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
        let port_ok = port.is_none_or(|p| {
            p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok_and(|n| n > 0)
        });
        if !host_ok || !port_ok {
            return bad("the registry is a host name with an optional :port");
        }
    }
    for part in &parts {
        let ok = !part.is_empty()
            && part.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return bad(
                "each path component is lowercase letters and digits, separated by '.', '_' or '-'",
            );
        }
    }
    Ok(())
}

/// One input channel of a container job (SageMaker's `InputDataConfig`
/// entry with an `S3DataSource` of type `S3Prefix`, File mode).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// Checks a channel name: 1-64 letters, digits, `.`, `_` and `-`, not `.`
/// or `..` (it becomes a folder and a variable's name).
pub fn check_channel_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1-64 letters, digits, '.', '_' and '-'"
        ))
    }
}

/// Where a job's outputs are uploaded when it succeeds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputDataConfig {
    /// `s3://bucket/prefix`: `/opt/ml/model` becomes
    /// `<prefix>/<jobId>/output/model.tar.gz` and `/opt/ml/output/data`
    /// `output.tar.gz`. It must lie where the job's share may write (its
    /// `checkpointS3Prefixes`, as for checkpoints).
    pub s3_output_path: String,
}

/// `SubmitServiceJob`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitServiceJobResponse {
    pub job_id: String,
    pub job_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRef {
    pub job_id: String,
}

/// `UpdateServiceJob`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateServiceJob {
    pub job_id: String,
    pub scheduling_priority: u32,
}

/// `TerminateServiceJob`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminateServiceJob {
    pub job_id: String,
    #[serde(default)]
    pub reason: String,
}

/// `ListServiceJobs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptDetail {
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// SUCCEEDED | FAILED | PREEMPTED_CROSS_SHARE | PREEMPTED_IN_SHARE |
    /// PREEMPTED_LIMIT_REDUCED | HOST_LOST | TIMED_OUT | CANCELLED
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionSummary {
    pub preempted_attempt_count: u32,
    #[serde(default)]
    pub recent_preempted_attempts: Vec<AttemptDetail>,
}

/// `DescribeServiceJob`'s body, and each entry of `ListServiceJobs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJob {
    pub job_id: String,
    pub job_name: String,
    pub job_queue: String,
    pub quota_share_name: String,
    pub status: String,
    #[serde(default)]
    pub status_reason: String,
    pub instance_type: String,
    pub instance_count: u32,
    pub scheduling_priority: u32,
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
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListServiceJobsResponse {
    pub job_summary_list: Vec<ServiceJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One share's use of one type in a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// Attempts that threw work away, and how much (instance-milliseconds:
/// each attempt's lost time times its instances).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LostWorkTotal {
    pub attempts: u64,
    pub recomputed_instance_ms: u64,
}

/// One share's lost-work totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobOutlook {
    /// STARTS | PREEMPTS | WAITS | NOT_WAITING
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
}

// ----- executors -------------------------------------------------------------

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorInstances {
    pub instance_type: String,
    pub count: u32,
    /// GPU indices per instance, when the node has GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<Vec<u32>>,
}

/// `RegisterExecutor`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterExecutor {
    pub executor_id: String,
    pub job_queue: String,
    pub instances: Vec<ExecutorInstances>,
    /// Changes when the executor process restarts: the attempts of an
    /// earlier incarnation are gone (they end HOST_LOST).
    #[serde(default)]
    pub incarnation: String,
    /// The node's checkpoint service (`qm.v1.ckpt.<node>.*`); defaults to
    /// the executor id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_node: Option<String>,
    /// The address the node's processes are reached at by the other nodes
    /// of a multi-node job (`QM_HOSTS`); defaults to the executor id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// After how many seconds without an acknowledged heartbeat this
    /// executor stops its attempts on its own (self-fencing). The scheduler
    /// declares it lost only after that, the longest grace of its attempts
    /// and a margin (ADR 0007). Absent: an executor that does not fence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_after_seconds: Option<u64>,
    /// How it launches attempts: `process` (host commands) and/or
    /// `container` (images). Absent: `process` only, as every executor
    /// before runtimes existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<String>,
}

// ----- events ----------------------------------------------------------------

/// Published on `qm.v1.events.job.<queue>.<share>.<jobId>.<STATUS>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStateChange {
    pub job_id: String,
    pub job_name: String,
    pub job_queue: String,
    pub quota_share_name: String,
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub status_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Milliseconds since the Unix epoch.
    pub at: u64,
}

/// Published on `qm.v1.events.preemption.<queue>.<share>.<jobId>.<phase>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionEvent {
    pub job_id: String,
    pub attempt: u32,
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED
    pub kind: String,
    pub for_job_id: String,
    /// started | completed
    pub phase: String,
    pub at: u64,
}

/// Published on `qm.v1.events.checkpoint.<queue>.<jobId>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointCommitted {
    pub job_id: String,
    pub attempt: u32,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    pub at: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_are_checked_as_the_engine_reads_them() {
        for ok in [
            "ubuntu",
            "quartermaster/pytorch-trainer:local",
            "registry.local:5000/team-a/trainer:1.2-rc_3",
            "localhost/x",
            "Registry.Example.com/a/b",
        ] {
            assert!(
                check_image_reference(ok).is_ok(),
                "{ok}: {:?}",
                check_image_reference(ok)
            );
        }
        let digest = format!("team/trainer@sha256:{}", "0123456789abcdef".repeat(4));
        assert!(check_image_reference(&digest).is_ok());
        for (bad, says) in [
            ("", "1-255"),
            ("Team/X", "lowercase"),
            ("team/x:", "a tag"),
            ("team/x:-1", "a tag"),
            ("team/x@sha256:abc", "digest"),
            ("team//x", "lowercase"),
            ("team/x y", "lowercase"),
            ("host:99999/x", "registry"),
        ] {
            let e = check_image_reference(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn s3_uris_are_parsed_or_refused_with_the_reason() {
        assert_eq!(
            parse_s3_uri("s3://team-a.ckpt/runs/llm-7b/").expect("valid"),
            S3Uri {
                bucket: "team-a.ckpt".into(),
                prefix: "runs/llm-7b".into()
            }
        );
        let refused = |uri: &str, says: &str| {
            let e = parse_s3_uri(uri).expect_err(uri);
            assert!(e.contains(says), "{uri}: {e}");
        };
        refused("https://bucket/x", "must start with s3://");
        refused("s3://Bucket/x", "not a valid S3 bucket name");
        refused("s3://ab/x", "not a valid S3 bucket name");
        refused("s3://-bucket/x", "not a valid S3 bucket name");
        refused("s3://bucket", "needs a prefix");
        refused("s3://bucket/", "needs a prefix");
        refused("s3://bucket/a//b", "none empty");
        refused("s3://bucket/a/../b", "none empty");
    }

    #[test]
    fn local_paths_stay_inside_the_attempt_directory() {
        assert!(check_local_path("checkpoint").is_ok());
        assert!(check_local_path("out/ckpt/").is_ok());
        for bad in ["", "/opt/ml/checkpoints", "../x", "a/../../x", "a//b", "."] {
            assert!(check_local_path(bad).is_err(), "{bad:?}");
        }
    }
}

// ----- identity and audit --------------------------------------------------

/// Who asked, as admission established it: the principal the NATS server
/// authenticated (from the request's subject), with its role and shares
/// from the tenancy file. `WhoAmI` returns it; admission sends it along with
/// every request it relays to the scheduler, which checks it again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Caller {
    pub principal: String,
    /// ADMIN | READER | TEAM | SERVICE
    pub role: String,
    /// The caller's team (role TEAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The shares the caller's team owns: `queue/share` or `queue/*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<String>,
}

/// `ListAuditEvents`: every accepted write, filtered. A team sees the
/// writes to its own shares (and configuration changes of its queues).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListAuditEvents {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Milliseconds since the Unix epoch, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Milliseconds since the Unix epoch, exclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One accepted write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// Milliseconds since the Unix epoch.
    pub at: u64,
    pub principal: String,
    /// The API operation (`SubmitServiceJob`, `UpdateServiceJob`, ...).
    pub operation: String,
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// What changed, in a few words.
    pub detail: String,
    /// Where the write is in the log (stream sequence).
    pub sequence: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListAuditEventsResponse {
    pub audit_events: Vec<AuditEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// `GetServiceJobLogs`: an attempt's output (default: the latest attempt).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetServiceJobLogs {
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_bytes: Option<u64>,
}
