//! Messages between the services: the durable log the scheduler's state is a
//! projection of, commands to executors, executor reports and heartbeats, and
//! requests to a node's checkpoint service. Integrators may read them (they
//! are documented in `docs/asyncapi.yaml`) but only the services write them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::messages::{JobQueue, QuotaShare, RegisterExecutor, SubmitServiceJob};

/// A queue with all its shares: what `qm apply -f` sends and what the
/// configuration bucket stores per queue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueDocument {
    pub job_queue: JobQueue,
    #[serde(default)]
    pub quota_shares: Vec<QuotaShare>,
}

/// One entry of the `QM_LOG` stream (subjects `qm.v1.log.>`). The scheduler
/// rebuilds its whole state by applying these in stream order; times of
/// entries other than `Pass` are the stream's own timestamps.
// An entry is decoded, applied and dropped (a replay holds only the
// entries between two decisions), so the size of the largest variant (a
// submit) costs nothing worth an indirection on every other one.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "camelCase")]
pub enum LogEntry {
    /// Written by admission before it answers the submit.
    #[serde(rename_all = "camelCase")]
    Submit {
        job_id: String,
        job: SubmitServiceJob,
        /// Who submitted it (absent in logs written before authentication).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
    },
    /// A resume drill, written by admission before it answers
    /// `StartResumeDrill`: `job` run twice, as `resumedJobId` (stopped
    /// after its first committed checkpoint and resumed) and
    /// `uninterruptedJobId`.
    #[serde(rename_all = "camelCase")]
    Drill {
        drill_id: String,
        resumed_job_id: String,
        uninterrupted_job_id: String,
        job: SubmitServiceJob,
        seed: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
    },
    /// A queue's whole configuration, written by admission after the
    /// configuration bucket accepted it at `revision`.
    #[serde(rename_all = "camelCase")]
    Config {
        queue: QueueDocument,
        revision: u64,
        /// Who changed it, and with which operation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        operation: Option<String>,
    },
    /// An executor (re)started or reconnected.
    Register(RegisterExecutor),
    /// An attempt's lifecycle, from its executor.
    Report(Report),
    /// Several reports of one executor stored as one entry, applied in
    /// order as if each were its own `Report` entry: an executor with
    /// `batchReports` on appends what it has queued together (STARTING and
    /// RUNNING of a process that starts at once always share one). Every
    /// report must be the subject's executor's. A scheduler that does not
    /// know this kind skips it (ADR 0009, rule 3: executors write it only
    /// once every scheduler reads it).
    #[serde(rename_all = "camelCase")]
    Reports {
        reports: Vec<Report>,
    },
    /// A checkpoint committed, from a checkpoint service.
    Checkpoint(CheckpointCommit),
    /// A checkpoint service cannot upload an attempt's checkpoints (S3
    /// unreachable or refusing): written when its commits start failing
    /// and when the error changes (at most once a minute); the next commit
    /// ends it. A scheduler that does not know it skips it.
    CheckpointLagging(CheckpointLag),
    /// Everything below is written only by the scheduler leader, fenced.
    #[serde(rename_all = "camelCase")]
    Leader {
        epoch: u64,
        holder: String,
    },
    Pass(PassRecord),
    #[serde(rename_all = "camelCase")]
    Priority {
        job_id: String,
        scheduling_priority: u32,
        at: u64,
        /// Who asked, and the job's queue and share (for the audit log).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_queue: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quota_share_name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Terminate {
        job_id: String,
        reason: String,
        at: u64,
        /// Who asked, and the job's queue and share (for the audit log).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_queue: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quota_share_name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ExecutorLost {
        executor_id: String,
        incarnation: String,
        at: u64,
    },
    /// Finished jobs whose records the leader stored in the archive
    /// (`QM_ARCHIVE`): they leave the state (`finishedRetentionSeconds`).
    #[serde(rename_all = "camelCase")]
    Archive {
        job_ids: Vec<String>,
        at: u64,
    },
    /// `DeleteJobQueue`, decided by the leader once the queue was DISABLED
    /// at configuration `revision` and held no job (its finished jobs
    /// archived first): the queue leaves the state, and a configuration of
    /// it at `revision` or before is never applied again.
    #[serde(rename_all = "camelCase")]
    QueueDeleted {
        job_queue: String,
        revision: u64,
        at: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
    },
}

impl LogEntry {
    /// Checks that this entry may be stored on log `subject`: each subject
    /// carries one kind of entry, and the identity the entry claims is the
    /// one the subject names (NATS lets a principal publish only to its
    /// own subjects, so the subject, not the body, says who wrote it). An
    /// executor's identity cannot report for another executor, nor write a
    /// submit, a configuration or a decision on its own subject.
    ///
    /// A checkpoint entry's node is set from the subject.
    pub fn bind_to_subject(&mut self, subject: &str) -> Result<(), String> {
        use crate::subjects::{LOG_PREFIX, LOG_SCHED};
        let wrong = |what: &str| Err(format!("{what} on {subject}"));
        if subject == LOG_SCHED {
            return match self {
                LogEntry::Leader { .. }
                | LogEntry::Pass(_)
                | LogEntry::Priority { .. }
                | LogEntry::Terminate { .. }
                | LogEntry::ExecutorLost { .. }
                | LogEntry::Archive { .. }
                | LogEntry::QueueDeleted { .. } => Ok(()),
                _ => wrong("an entry only admission, executors or checkpoint services write"),
            };
        }
        let rest = subject
            .strip_prefix(LOG_PREFIX)
            .and_then(|r| r.strip_prefix('.'))
            .unwrap_or_default();
        let (family, name) = rest.split_once('.').unwrap_or((rest, ""));
        if name.is_empty() || name.contains('.') {
            return wrong("an entry");
        }
        match (family, self) {
            ("submit", LogEntry::Submit { job, .. }) if job.job_queue == name => Ok(()),
            ("submit", LogEntry::Drill { job, .. }) if job.job_queue == name => Ok(()),
            ("config", LogEntry::Config { queue, .. })
                if queue.job_queue.job_queue_name == name =>
            {
                Ok(())
            }
            ("register", LogEntry::Register(r)) if r.executor_id == name => Ok(()),
            ("exec", LogEntry::Report(r)) if r.executor_id == name => Ok(()),
            ("exec", LogEntry::Reports { reports })
                if !reports.is_empty() && reports.iter().all(|r| r.executor_id == name) =>
            {
                Ok(())
            }
            ("checkpoint", LogEntry::Checkpoint(c)) => {
                c.node = Some(name.to_string());
                Ok(())
            }
            ("checkpoint", LogEntry::CheckpointLagging(lag)) => {
                lag.node = Some(name.to_string());
                Ok(())
            }
            (_, LogEntry::Submit { .. }) => wrong("a submit for another queue, or"),
            (_, LogEntry::Drill { .. }) => wrong("a drill for another queue, or"),
            (_, LogEntry::Config { .. }) => wrong("a configuration of another queue, or"),
            (_, LogEntry::Register(_)) => wrong("another executor's registration, or"),
            (_, LogEntry::Report(_)) => wrong("another executor's report, or"),
            (_, LogEntry::Reports { .. }) => {
                wrong("an empty batch of reports, another executor's report, or")
            }
            _ => wrong("an entry of another kind"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReportPhase {
    /// Restored (or found no) checkpoint, launching.
    Starting,
    Running,
    /// The process ended and its checkpoints were flushed.
    Ended,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub executor_id: String,
    pub job_id: String,
    pub attempt: u32,
    pub phase: ReportPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored: Option<CheckpointCommit>,
    /// Starting: bytes the restore moved (absent: none, or an older
    /// executor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_bytes: Option<u64>,
    /// Starting: newer checkpoints the restore skipped, with why (it fell
    /// back to an older one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restore_skipped: Vec<String>,
    /// Why a launch failed (no process ran), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// An attempt the executor ended on its own account (absent: its
    /// process ended, or could not be launched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<EndCause>,
    /// Ended: why the run failed, in the job's words (the first 1,024
    /// characters of a container's `/opt/ml/output/failure`) or the
    /// runtime's (killed for its memory limit). Shown as the attempt's
    /// `statusReason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Starting, sent again while the executor prepares the attempt: what
    /// it is doing (pulling the image, downloading an input channel). A
    /// reader that does not know it sees a repeated STARTING, which changes
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Ended: what the process declared as its result in
    /// `$QM_RESULT_FILE` (at most 16 KiB), which resume drills compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

impl Report {
    /// A report of `phase` with nothing else to say yet (no exit, no
    /// restore, no error): the fields that apply are set after.
    pub fn new(executor_id: &str, job_id: &str, attempt: u32, phase: ReportPhase) -> Report {
        Report {
            executor_id: executor_id.into(),
            job_id: job_id.into(),
            attempt,
            phase,
            exit_code: None,
            signal: None,
            restored: None,
            restored_bytes: None,
            restore_skipped: Vec::new(),
            error: None,
            cause: None,
            reason: None,
            progress: None,
            result: None,
        }
    }
}

/// Why an executor ended an attempt itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EndCause {
    /// It lost contact with the scheduler for `fenceAfterSeconds` and
    /// stopped the attempt so that it never runs twice (ADR 0007): the
    /// attempt ends HOST_LOST.
    Fenced,
    /// A stop arrived for an attempt this executor never started (its start
    /// was lost): it is answered as ended, and a late start is ignored.
    NotStarted,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointCommit {
    pub job_queue: String,
    pub job_id: String,
    pub attempt: u32,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// The checkpoint node that stored it: set by the scheduler from the
    /// log subject it was stored on (which only that node's checkpoint
    /// service may publish to), never taken from the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// An attempt whose checkpoints are not being uploaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointLag {
    pub job_queue: String,
    pub job_id: String,
    pub attempt: u32,
    /// When its commits started failing (ms since the Unix epoch).
    pub since: u64,
    /// The last failure, as the checkpoint service saw it.
    pub error: String,
    /// The checkpoint node that stored it: set by the scheduler from the
    /// log subject, never taken from the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// Where an attempt runs: instance slots on one executor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub executor_id: String,
    pub slots: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartRecord {
    pub job_id: String,
    pub attempt: u32,
    /// Instances on borrowed capacity.
    pub borrowed: u32,
    pub placement: Vec<Placement>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionRecord {
    pub job_id: String,
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED (BUDGET_EXHAUSTED stops are
    /// `PassRecord::budget_stops`)
    pub kind: String,
    pub for_job_id: String,
}

/// What one scheduling pass decided, at `now` (ms since the Unix epoch).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PassRecord {
    pub job_queue: String,
    pub now: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts: Vec<StartRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preemptions: Vec<PreemptionRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeouts: Vec<String>,
    /// Preempted jobs whose checkpoint-first window ran out: stopped now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoint_deadlines: Vec<String>,
    /// Resume drills' subjects stopped now, to resume from their checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drill_stops: Vec<String>,
    /// Jobs on borrowed capacity of shares whose borrowing budget is spent
    /// (`onBudgetExhausted: CHECKPOINT_AND_STOP`): checkpoint, stop, requeue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budget_stops: Vec<String>,
}

impl PassRecord {
    /// Whether the pass decided nothing the log must record (waiting
    /// reasons only).
    pub fn decides_nothing(&self) -> bool {
        self.starts.is_empty()
            && self.preemptions.is_empty()
            && self.timeouts.is_empty()
            && self.checkpoint_deadlines.is_empty()
            && self.drill_stops.is_empty()
            && self.budget_stops.is_empty()
    }
}

/// On `qm.v1.exec.<executorId>.command`, which only the scheduler may
/// publish. Every command carries the leader's fencing epoch: an executor
/// obeys a command only if its epoch is the one of the current lease in
/// the `qm_leader` bucket (never raised from a message). Starts are
/// idempotent per (job, attempt).
// A command is built, serialized and dropped (never stored in bulk), so the
// size of its largest variant costs nothing worth an indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ExecCommand {
    #[serde(rename_all = "camelCase")]
    Start {
        epoch: u64,
        job_id: String,
        attempt: u32,
        job_queue: String,
        /// The job's share (checkpoint events name it).
        #[serde(default)]
        quota_share_name: String,
        command: Vec<String>,
        #[serde(default)]
        environment: BTreeMap<String, String>,
        instance_type: String,
        slots: Vec<u32>,
        /// The job has a `checkpointConfig`: restore, sync and flush its
        /// checkpoint directory through the node's checkpoint service.
        #[serde(default)]
        checkpoints: bool,
        /// The job's `checkpointConfig`, when it has one (where in S3, and
        /// where in the attempt's directory).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint_config: Option<crate::messages::CheckpointConfig>,
        /// This node's rank in a job spread over several executors (0: the
        /// node that syncs checkpoints; the others only restore them).
        #[serde(default)]
        rank: u32,
        /// Every node's address, in rank order (`QM_HOSTS`); empty for a
        /// job on one executor.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hosts: Vec<String>,
        /// The job's `terminationGracePeriodSeconds`: the grace of a stop
        /// the executor decides itself (when it is shut down). Absent from
        /// older schedulers: the contract's default, 120.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grace_seconds: Option<u64>,
        /// The job's `containerImage`: run it in the `container` runtime
        /// (an executor placed it only if it offers that runtime).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container_image: Option<String>,
        /// The job's `outputDataConfig.s3OutputPath`: rank 0 has the node's
        /// checkpoint service upload its outputs there when it succeeds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_s3_uri: Option<String>,
        /// The job's input channels: every rank has the node's checkpoint
        /// service download its part before the container starts.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        input_channels: Vec<crate::messages::InputChannel>,
        /// The job's share forbids root in containers (`runAsNonRoot`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        run_as_non_root: bool,
    },
    /// SIGTERM, then SIGKILL after `grace_seconds`.
    #[serde(rename_all = "camelCase")]
    Stop {
        epoch: u64,
        job_id: String,
        attempt: u32,
        grace_seconds: u64,
        reason: String,
    },
    /// Checkpoint-then-preempt: send the process `signal` (once per
    /// attempt), asking it to checkpoint now; the scheduler sends the
    /// `Stop` once that checkpoint is committed or the window ran out. An
    /// executor that does not know this command ignores it (the job is then
    /// stopped when the window ends).
    #[serde(rename_all = "camelCase")]
    Checkpoint {
        epoch: u64,
        job_id: String,
        attempt: u32,
        /// `SIGUSR1`, `SIGUSR2`, `SIGHUP` or `SIGINT`.
        signal: String,
    },
}

/// An executor's heartbeat (a request on `qm.v1.exec.<executorId>.heartbeat`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    pub executor_id: String,
    pub incarnation: String,
    /// Every attempt it holds.
    #[serde(default)]
    pub attempts: Vec<AttemptKey>,
}

/// One attempt of one job: what an executor holds and the scheduler expects.
/// On the wire it is the pair `[jobId, attempt]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "(String, u32)", into = "(String, u32)")]
pub struct AttemptKey {
    pub job_id: String,
    pub attempt: u32,
}

impl AttemptKey {
    pub fn new(job_id: impl Into<String>, attempt: u32) -> Self {
        AttemptKey {
            job_id: job_id.into(),
            attempt,
        }
    }
}

impl From<(String, u32)> for AttemptKey {
    fn from((job_id, attempt): (String, u32)) -> Self {
        AttemptKey { job_id, attempt }
    }
}

impl From<AttemptKey> for (String, u32) {
    fn from(k: AttemptKey) -> Self {
        (k.job_id, k.attempt)
    }
}

impl std::fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} attempt {}", self.job_id, self.attempt)
    }
}

/// The leader's answer to a heartbeat.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatAck {
    /// False: the scheduler does not know this incarnation; register again.
    pub known: bool,
    pub epoch: u64,
}

/// `qm logs`: on `qm.v1.exec.<executorId>.logs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogsRequest {
    pub job_id: String,
    pub attempt: u32,
    /// Only the last this many bytes of each stream (default 64 KiB, at
    /// most 256 KiB, and less when the answer would not fit in one message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogsResponse {
    pub stdout: String,
    pub stderr: String,
    /// True when the start of a stream was cut off.
    #[serde(default)]
    pub truncated: bool,
}

/// To a node's checkpoint service: `qm.v1.ckpt.<node>.restore|track|flush`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRequest {
    pub job_queue: String,
    /// The job's share: its checkpoint events name it, and its
    /// `checkpointS3Prefixes` bound `s3Uri`.
    #[serde(default)]
    pub quota_share_name: String,
    pub job_id: String,
    pub attempt: u32,
    /// The attempt's local checkpoint directory (absolute).
    pub dir: String,
    /// `s3://bucket/prefix` of the job's checkpoints (its
    /// `checkpointConfig.s3Uri`); default: the service's bucket, prefix
    /// `<queue>/<jobId>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_uri: Option<String>,
    /// The scheduler's fencing epoch of the start command, recorded in the
    /// attempt's manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Restore only: answer within this many milliseconds, with the
    /// restore's progress if it has not finished (`pending`); the restore
    /// goes on, and asking again for the same attempt joins it. Absent
    /// (older executors): answer when the restore has finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_within_ms: Option<u64>,
    /// Input only: this node's part of a `ShardedByS3Key` channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<InputShard>,
}

/// Node `rank` of `nodes` (a sharded input channel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputShard {
    pub rank: u32,
    pub nodes: u32,
}

/// How far a restore has come.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferProgress {
    /// Bytes written so far (never decreases).
    pub bytes_moved: u64,
    /// Bytes of the checkpoint being restored (0 until one is chosen).
    pub bytes_total: u64,
}

/// Reply to restore and flush: the checkpoint restored or last committed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointCommit>,
    /// Damaged or incomplete checkpoints skipped by a restore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Restore with `answerWithinMs`: not finished yet; ask again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<TransferProgress>,
}

/// Admission -> scheduler leader, on `qm.v1.sched.request`: an API operation
/// the leader answers from its state (reads, priority updates, terminates).
/// The reply is the API reply, relayed unchanged.
///
/// On the wire: `{"operation": "<Operation>", "body": {...}, "caller": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedRequest {
    #[serde(flatten)]
    pub operation: SchedOperation,
    /// Who asked (the scheduler checks the job's share against it).
    #[serde(default)]
    pub caller: crate::messages::Caller,
}

/// The operations the scheduler leader answers, each with its request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "operation", content = "body")]
pub enum SchedOperation {
    DescribeServiceJob(crate::messages::JobRef),
    ListServiceJobs(crate::messages::ListServiceJobs),
    GetJobQueueSnapshot(crate::messages::QueueRef),
    UpdateServiceJob(crate::messages::UpdateServiceJob),
    TerminateServiceJob(crate::messages::TerminateServiceJob),
    /// A submit admission validated, to foresee and not to store.
    DryRunServiceJob(Box<crate::messages::SubmitServiceJob>),
    ExplainServiceJob(crate::messages::JobRef),
    ListResumeDrills(crate::messages::ListResumeDrills),
    GetPolicyStabilityRecord(crate::messages::GetPolicyStabilityRecord),
    GetUsage(crate::messages::GetUsage),
    GetReclaimExposure(crate::messages::GetReclaimExposure),
    /// A configuration admission validated and did not store: what it
    /// would do (`DryRunUpdateQuotaShare`).
    DryRunJobQueue(QueueDocument),
    /// `DeleteJobQueue` of the queue admission read DISABLED at `revision`.
    DeleteJobQueue(DeleteJobQueueRequest),
}

/// What admission asks the leader when a queue is deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteJobQueueRequest {
    pub job_queue: String,
    /// The configuration revision admission found DISABLED.
    pub revision: u64,
}

impl SchedOperation {
    /// The API operation's name (`DescribeServiceJob`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            SchedOperation::DescribeServiceJob(_) => "DescribeServiceJob",
            SchedOperation::ListServiceJobs(_) => "ListServiceJobs",
            SchedOperation::GetJobQueueSnapshot(_) => "GetJobQueueSnapshot",
            SchedOperation::UpdateServiceJob(_) => "UpdateServiceJob",
            SchedOperation::TerminateServiceJob(_) => "TerminateServiceJob",
            SchedOperation::DryRunServiceJob(_) => "DryRunServiceJob",
            SchedOperation::ExplainServiceJob(_) => "ExplainServiceJob",
            SchedOperation::ListResumeDrills(_) => "ListResumeDrills",
            SchedOperation::GetPolicyStabilityRecord(_) => "GetPolicyStabilityRecord",
            SchedOperation::GetUsage(_) => "GetUsage",
            SchedOperation::GetReclaimExposure(_) => "GetReclaimExposure",
            SchedOperation::DryRunJobQueue(_) => "DryRunUpdateQuotaShare",
            SchedOperation::DeleteJobQueue(_) => "DeleteJobQueue",
        }
    }

    /// Whether it changes state (appended to the log by the leader).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            SchedOperation::UpdateServiceJob(_)
                | SchedOperation::TerminateServiceJob(_)
                | SchedOperation::DeleteJobQueue(_)
        )
    }
}

/// The scheduler leader's lease: the value of key `scheduler` in the
/// `qm_leader` bucket. Executors read it to learn the fencing epoch they
/// obey: [`LeaderLease::epoch_at`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderLease {
    pub holder: String,
    /// When the holder expects it to lapse, in milliseconds since the Unix
    /// epoch by the holder's own clock: informational only (candidates
    /// judge expiry by their own elapsed time, never by comparing clocks).
    /// 0: released by its holder on shutdown.
    pub expires_at: u64,
    /// The holder's fencing epoch (the key's revision when it took the
    /// lease); absent in the write that takes it, whose revision it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

/// The key of the lease in the `qm_leader` bucket.
pub const LEADER_KEY: &str = "scheduler";

impl LeaderLease {
    /// Given up by its holder: free to take at once.
    pub fn released(&self) -> bool {
        self.expires_at == 0
    }

    /// The epoch of the lease stored at `revision`.
    pub fn epoch_at(&self, revision: u64) -> u64 {
        self.epoch.unwrap_or(revision)
    }
}
