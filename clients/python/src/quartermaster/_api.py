"""The API's types and operations, generated from docs/asyncapi.yaml by
tools/generate.py: do not edit (regenerate instead)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from ._model import Model


@dataclass(kw_only=True)
class AffectedJob(Model):
    """One job a configuration change would affect (`DryRunUpdateQuotaShare`)."""

    detail: Optional[str] = None
    """What changes for it, in a few words."""
    job_id: str
    job_name: Optional[str] = None
    """Only when the caller may read the job."""
    quota_share_name: str

    _spec: ClassVar[tuple] = (('detail', 'detail', 'str', False), ('job_id', 'jobId', 'str', True), ('job_name', 'jobName', 'str', False), ('quota_share_name', 'quotaShareName', 'str', True))


@dataclass(kw_only=True)
class ApiError(Model):
    """ApiError"""

    code: Any
    message: str
    """One line a person can act on."""
    problems: list[Problem] = field(default_factory=list)

    _spec: ClassVar[tuple] = (('code', 'code', 'any', True), ('message', 'message', 'str', True), ('problems', 'problems', ('list', ('model', 'Problem')), False))


@dataclass(kw_only=True)
class ApplyTenancy(Model):
    """`ApplyTenancy` (admins only)."""

    dry_run: Optional[bool] = None
    """Check it and say what would change; store nothing."""
    expected_revision: Optional[int] = None
    """Apply only if this is still the revision in effect (so two admins' changes cannot silently overwrite each other)."""
    tenancy: "Tenancy"

    _spec: ClassVar[tuple] = (('dry_run', 'dryRun', 'bool', False), ('expected_revision', 'expectedRevision', 'int', False), ('tenancy', 'tenancy', ('model', 'Tenancy'), True))


@dataclass(kw_only=True)
class ApplyTenancyResponse(Model):
    """ApplyTenancyResponse"""

    applied: bool
    """Stored (false: a dry run, or nothing changed)."""
    changes: list[str]
    previous_revision: int
    """The revision it replaced (0: none)."""
    revision: int
    """The new revision (a dry run, or no change: the one in effect)."""

    _spec: ClassVar[tuple] = (('applied', 'applied', 'bool', True), ('changes', 'changes', ('list', 'str'), True), ('previous_revision', 'previousRevision', 'int', True), ('revision', 'revision', 'int', True))


@dataclass(kw_only=True)
class AttemptDetail(Model):
    """One attempt, as `DescribeServiceJob` shows it."""

    attempt: int
    checkpoint_upload_error: Optional[str] = None
    checkpoint_upload_failing_since: Optional[int] = None
    """Since when this attempt's checkpoints are not uploaded (ms since the Unix epoch), and the checkpoint service's last error: the lag until its next commit. Absent while commits succeed."""
    executor_id: Optional[str] = None
    exit_code: Optional[int] = None
    last_checkpoint_step: Optional[int] = None
    outcome: Optional[str] = None
    """SUCCEEDED | FAILED | PREEMPTED_CROSS_SHARE | PREEMPTED_IN_SHARE | PREEMPTED_LIMIT_REDUCED | HOST_LOST | TIMED_OUT | CANCELLED"""
    preempted_for_job_id: Optional[str] = None
    """A preempted attempt's beneficiary: the job it was stopped for, and that job's share."""
    preempted_for_share: Optional[str] = None
    progress: Optional[str] = None
    """What a starting attempt is doing before its job runs: pulling its image, downloading an input channel (the last step reported)."""
    recomputed_ms: Optional[int] = None
    """The lost-work ledger, for an attempt that ended preempted or with its host lost: milliseconds of work (per instance) from its last committed checkpoint, or from when it began running, to its stop, which the next attempt computes again."""
    restore_skipped: list[str] = field(default_factory=list)
    """Newer checkpoints its restore skipped, with why (damaged or incomplete): the attempt resumed from an older one."""
    restored_bytes: Optional[int] = None
    """Checkpoint bytes this attempt's restore moved (every rank counted)."""
    restored_checkpoint_step: Optional[int] = None
    scheduled_at: Optional[int] = None
    """When it was placed: its instances are held from here to `stoppedAt` (what the usage ledger counts)."""
    started_at: Optional[int] = None
    status_reason: Optional[str] = None
    """Why the attempt failed, in the job's words (a container's `/opt/ml/output/failure`, first 1,024 characters) or the runtime's (killed for its memory limit; an image that could not be pulled)."""
    stopped_at: Optional[int] = None

    _spec: ClassVar[tuple] = (('attempt', 'attempt', 'int', True), ('checkpoint_upload_error', 'checkpointUploadError', 'str', False), ('checkpoint_upload_failing_since', 'checkpointUploadFailingSince', 'int', False), ('executor_id', 'executorId', 'str', False), ('exit_code', 'exitCode', 'int', False), ('last_checkpoint_step', 'lastCheckpointStep', 'int', False), ('outcome', 'outcome', 'str', False), ('preempted_for_job_id', 'preemptedForJobId', 'str', False), ('preempted_for_share', 'preemptedForShare', 'str', False), ('progress', 'progress', 'str', False), ('recomputed_ms', 'recomputedMs', 'int', False), ('restore_skipped', 'restoreSkipped', ('list', 'str'), False), ('restored_bytes', 'restoredBytes', 'int', False), ('restored_checkpoint_step', 'restoredCheckpointStep', 'int', False), ('scheduled_at', 'scheduledAt', 'int', False), ('started_at', 'startedAt', 'int', False), ('status_reason', 'statusReason', 'str', False), ('stopped_at', 'stoppedAt', 'int', False))


@dataclass(kw_only=True)
class AuditEvent(Model):
    """One accepted write."""

    at: int
    """Milliseconds since the Unix epoch."""
    detail: str
    """What changed, in a few words."""
    job_id: Optional[str] = None
    job_queue: str
    operation: str
    """The API operation (`SubmitServiceJob`, `UpdateServiceJob`, ...)."""
    principal: str
    quota_share_name: Optional[str] = None
    sequence: int
    """Where the write is in the log (stream sequence)."""

    _spec: ClassVar[tuple] = (('at', 'at', 'int', True), ('detail', 'detail', 'str', True), ('job_id', 'jobId', 'str', False), ('job_queue', 'jobQueue', 'str', True), ('operation', 'operation', 'str', True), ('principal', 'principal', 'str', True), ('quota_share_name', 'quotaShareName', 'str', False), ('sequence', 'sequence', 'int', True))


@dataclass(kw_only=True)
class BorrowBudget(Model):
    """A share's `borrowBudget`: instance-hours of borrowed capacity per rolling window (`windowHours`) or of borrowed usage decayed with a half-life (`halfLifeHours`); exactly one of the two."""

    half_life_hours: Optional[int] = None
    instance_hours: float
    """Instance-hours (fractions allowed, to the instance-second)."""
    window_hours: Optional[int] = None

    _spec: ClassVar[tuple] = (('half_life_hours', 'halfLifeHours', 'int', False), ('instance_hours', 'instanceHours', 'float', True), ('window_hours', 'windowHours', 'int', False))


@dataclass(kw_only=True)
class BudgetBurnDown(Model):
    """A share's borrowing budget now: what it allows, what the window (or the decayed sum) holds, what running borrowed jobs are still expected to use, and when it runs out or refills. Instance-hours."""

    borrowing_instances: int
    """Instances borrowed now, every type together."""
    budget: "BorrowBudget"
    committed_instance_hours: float
    exhausts_at: Optional[int] = None
    """When it is spent at the current rate (ms since the Unix epoch)."""
    left_instance_hours: float
    """The budget less what is used (at least 0)."""
    on_budget_exhausted: str
    """FINISH | CHECKPOINT_AND_STOP"""
    quota_share_name: str
    refills_at: Optional[int] = None
    """When the count next falls: an hour leaves the window (rolling windows only; a half-life refills continuously)."""
    used_instance_hours: float

    _spec: ClassVar[tuple] = (('borrowing_instances', 'borrowingInstances', 'int', True), ('budget', 'budget', ('model', 'BorrowBudget'), True), ('committed_instance_hours', 'committedInstanceHours', 'float', True), ('exhausts_at', 'exhaustsAt', 'int', False), ('left_instance_hours', 'leftInstanceHours', 'float', True), ('on_budget_exhausted', 'onBudgetExhausted', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True), ('refills_at', 'refillsAt', 'int', False), ('used_instance_hours', 'usedInstanceHours', 'float', True))


@dataclass(kw_only=True)
class ByPrincipal(Model):
    """A count by who caused it."""

    count: int
    principal: str

    _spec: ClassVar[tuple] = (('count', 'count', 'int', True), ('principal', 'principal', 'str', True))


@dataclass(kw_only=True)
class Caller(Model):
    """Who asked, as admission established it: the principal the NATS server authenticated (from the request's subject), with its role and shares from the tenancy file. `WhoAmI` returns it; admission sends it along with every request it relays to the scheduler, which checks it again."""

    principal: str
    role: str
    """ADMIN | READER | TEAM | SERVICE"""
    shares: list[str] = field(default_factory=list)
    """The shares the caller's team owns: `queue/share` or `queue/*`."""
    team: Optional[str] = None
    """The caller's team (role TEAM)."""

    _spec: ClassVar[tuple] = (('principal', 'principal', 'str', True), ('role', 'role', 'str', True), ('shares', 'shares', ('list', 'str'), False), ('team', 'team', 'str', False))


@dataclass(kw_only=True)
class CapacityLimit(Model):
    """CapacityLimit"""

    capacity_unit: str
    max_capacity: int

    _spec: ClassVar[tuple] = (('capacity_unit', 'capacityUnit', 'str', True), ('max_capacity', 'maxCapacity', 'int', True))


@dataclass(kw_only=True)
class CheckpointCommit(Model):
    """CheckpointCommit"""

    attempt: int
    created_at: int
    """Milliseconds since the Unix epoch."""
    job_id: str
    job_queue: str
    node: Optional[str] = None
    """The checkpoint node that stored it: set by the scheduler from the log subject it was stored on (which only that node's checkpoint service may publish to), never taken from the body."""
    seq: int
    step: Optional[int] = None

    _spec: ClassVar[tuple] = (('attempt', 'attempt', 'int', True), ('created_at', 'createdAt', 'int', True), ('job_id', 'jobId', 'str', True), ('job_queue', 'jobQueue', 'str', True), ('node', 'node', 'str', False), ('seq', 'seq', 'int', True), ('step', 'step', 'int', False))


@dataclass(kw_only=True)
class CheckpointConfig(Model):
    """CheckpointConfig"""

    checkpoint_before_preempt_seconds: Optional[int] = None
    """Checkpoint-then-preempt: when the job is preempted while running, it is first sent `checkpointSignal` and stopped only once a checkpoint committed after that, or after this many seconds (0: stopped at once; at most 3600). Default: the queue's `checkpointBeforePreemptSeconds`."""
    checkpoint_signal: Optional[str] = None
    """The signal that asks the job to checkpoint now: `SIGUSR1` (default), `SIGUSR2`, `SIGHUP` or `SIGINT`."""
    local_path: Optional[str] = None
    """The directory given to the process as `QM_CHECKPOINT_DIR`, relative to the attempt's working directory; default `checkpoint`."""
    s3_uri: Optional[str] = None
    """`s3://bucket/prefix`: where this job's checkpoints live (manifests under `prefix/manifests/`, file contents under `prefix/blobs/`). Default: the checkpoint service's bucket, prefix `<queue>/<jobId>`. Two jobs given the same URI share (and overwrite) checkpoints, as in SageMaker: reuse one only to resume a job's work in another job."""

    _spec: ClassVar[tuple] = (('checkpoint_before_preempt_seconds', 'checkpointBeforePreemptSeconds', 'int', False), ('checkpoint_signal', 'checkpointSignal', 'str', False), ('local_path', 'localPath', 'str', False), ('s3_uri', 's3Uri', 'str', False))


@dataclass(kw_only=True)
class CheckpointIdentity(Model):
    """CheckpointIdentity"""

    nodes: list[str]

    _spec: ClassVar[tuple] = (('nodes', 'nodes', ('list', 'str'), True),)


@dataclass(kw_only=True)
class DescribeTenancy(Model):
    """`DescribeTenancy` (admins and readers): the revision in effect, or an earlier one still in the history."""

    revision: Optional[int] = None

    _spec: ClassVar[tuple] = (('revision', 'revision', 'int', False),)


Empty = Any


ErrorCode = Any


@dataclass(kw_only=True)
class EvaluateOnExit(Model):
    """EvaluateOnExit"""

    action: str
    """RETRY | EXIT"""
    on_exit_code: Optional[str] = None
    on_status_reason: Optional[str] = None

    _spec: ClassVar[tuple] = (('action', 'action', 'str', True), ('on_exit_code', 'onExitCode', 'str', False), ('on_status_reason', 'onStatusReason', 'str', False))


@dataclass(kw_only=True)
class EventFrame(Model):
    """Stored on `qm.v1.events.frames` (stream `QM_EVENTS`): job and preemption events of the scheduler leader, consecutive and in the order they were produced, many to a message. Each was also published live, unstored, on its own subject. The message's `Qm-Position` header is its last event's position: every event up to it is stored."""

    events: list[FramedEvent]

    _spec: ClassVar[tuple] = (('events', 'events', ('list', ('model', 'FramedEvent')), True),)


EventKind = Any


@dataclass(kw_only=True)
class EventPage(Model):
    """The answer to `ListEvents`."""

    after: str
    """Resume here for the next page: past every event this page returned, and past the stored events it skipped (those the caller may not read or did not ask for), so a follower never reads them again. Equal to the request's `after` when nothing new was stored."""
    caught_up: bool
    """True when the page ends at the newest event stored when it was read (ask again with `waitSeconds` to wait for more)."""
    events: list[StoredEvent]
    gap: Optional[bool] = None
    """True when events stored after the request's cursor have aged out of the stream (`eventsRetentionDays`) before they were read: the page goes on from the oldest kept, and what was between is lost."""

    _spec: ClassVar[tuple] = (('after', 'after', 'str', True), ('caught_up', 'caughtUp', 'bool', True), ('events', 'events', ('list', ('model', 'StoredEvent')), True), ('gap', 'gap', 'bool', False))


@dataclass(kw_only=True)
class ExecutorIdentity(Model):
    """ExecutorIdentity"""

    checkpoint_nodes: list[str] = field(default_factory=list)
    """The checkpoint nodes its executors call; default: the executor ids."""
    executors: list[str]
    """Executor ids (`executorId` settings) this principal runs."""

    _spec: ClassVar[tuple] = (('checkpoint_nodes', 'checkpointNodes', ('list', 'str'), False), ('executors', 'executors', ('list', 'str'), True))


@dataclass(kw_only=True)
class ExecutorInstances(Model):
    """ExecutorInstances"""

    count: int
    gpus: list[list[int]] = field(default_factory=list)
    """GPU indices per instance, when the node has GPUs."""
    instance_type: str

    _spec: ClassVar[tuple] = (('count', 'count', 'int', True), ('gpus', 'gpus', ('list', ('list', 'int')), False), ('instance_type', 'instanceType', 'str', True))


@dataclass(kw_only=True)
class FramedEvent(Model):
    """One event of an [`EventFrame`]: the subject it was published on, its position (`a.b.i`, as its `Qm-Position` header said) and its payload (a [`JobStateChange`] or a [`PreemptionEvent`], by the subject)."""

    event: Any
    position: str
    subject: str

    _spec: ClassVar[tuple] = (('event', 'event', 'any', True), ('position', 'position', 'str', True), ('subject', 'subject', 'str', True))


@dataclass(kw_only=True)
class GetPolicyStabilityRecord(Model):
    """`GetPolicyStabilityRecord`: per share and week, how often the arrangement needed people (priority changes, terminations, configuration changes) and how it treated work (preemptions, owners' reclaim waits, drills, borrowing refused for a missing resume proof)."""

    job_queue: str
    quota_share_name: Optional[str] = None
    since: Optional[int] = None
    """Weeks that end after this (ms since the Unix epoch)."""

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', False), ('since', 'since', 'int', False))


@dataclass(kw_only=True)
class GetReclaimExposure(Model):
    """`GetReclaimExposure`: which of a share's jobs on borrowed capacity each lending share would preempt if it submitted now (reading the share)."""

    job_queue: str
    quota_share_name: str

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True))


@dataclass(kw_only=True)
class GetServiceJobLogs(Model):
    """`GetServiceJobLogs`: an attempt's output (default: the latest attempt)."""

    attempt: Optional[int] = None
    job_id: str
    tail_bytes: Optional[int] = None

    _spec: ClassVar[tuple] = (('attempt', 'attempt', 'int', False), ('job_id', 'jobId', 'str', True), ('tail_bytes', 'tailBytes', 'int', False))


@dataclass(kw_only=True)
class GetUsage(Model):
    """`GetUsage`: the usage ledger of a queue, per share, instance type, workload class and day (or week), from the days asked for, of the shares the caller may read."""

    by: Optional[str] = None
    """`DAY` (default) or `WEEK` (weeks start Monday 00:00 UTC)."""
    from_: Optional[str] = None
    """The first day, `YYYY-MM-DD` (UTC); default: 6 days before `to`."""
    job_queue: str
    quota_share_name: Optional[str] = None
    to: Optional[str] = None
    """The last day, `YYYY-MM-DD` (UTC), included; default: today."""

    _spec: ClassVar[tuple] = (('by', 'by', 'str', False), ('from_', 'from', 'str', False), ('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', False), ('to', 'to', 'str', False))


@dataclass(kw_only=True)
class InputChannel(Model):
    """One input channel of a container job (SageMaker's `InputDataConfig` entry with an `S3DataSource` of type `S3Prefix`, File mode)."""

    channel_name: str
    """1-64 letters, digits, `.`, `_` and `-`: the folder under `/opt/ml/input/data`."""
    s3_data_distribution_type: Optional[str] = None
    """`FullyReplicated` (default: every node gets every object) or `ShardedByS3Key` (each node its share, by key order)."""
    s3_uri: str
    """`s3://bucket/prefix`: every object under the folder `prefix/` (not a sibling `prefix-other/`: the share's read rule has a folder boundary). It must lie where the job's share may read (`inputS3Prefixes`; default: its own checkpoint area)."""

    _spec: ClassVar[tuple] = (('channel_name', 'channelName', 'str', True), ('s3_data_distribution_type', 's3DataDistributionType', 'str', False), ('s3_uri', 's3Uri', 'str', True))


@dataclass(kw_only=True)
class JobOutlook(Model):
    """`DryRunServiceJob` (a submit that changes nothing) and `ExplainServiceJob` (a waiting job): what the next scheduling pass would do for the job, from the scheduling core's own pass on a copy of the live state."""

    ahead: list[str] = field(default_factory=list)
    """WAITS: the jobs of its share and type ahead of it in line (first 5)."""
    borrowed_instances: Optional[int] = None
    estimate_note: Optional[str] = None
    estimated_start: Optional[int] = None
    """WAITS: when it is expected to start (ms since the Unix epoch), the scheduling passes replayed forward with every running job ending when it is expected to (its estimatedRuntimeSeconds, else its attempt timeout). Absent when that cannot be foreseen (`estimateNote` says why)."""
    job_id: Optional[str] = None
    """`ExplainServiceJob`: the job explained."""
    lending_shares: list[str] = field(default_factory=list)
    """STARTS with borrowing: the shares with idle capacity of its type that they lend."""
    outcome: str
    """STARTS | PREEMPTS | WAITS | NOT_WAITING"""
    own_instances: Optional[int] = None
    """STARTS: instances on its share's own capacity, and borrowed."""
    position_in_line: Optional[int] = None
    """WAITS: how many jobs of its share and type are ahead of it in line."""
    status: Optional[str] = None
    """NOT_WAITING: its status."""
    status_reason: Optional[str] = None
    """WAITS: why, as `DescribeServiceJob` would say it."""
    unblock: Optional[str] = None
    """WAITS: what would let it start, in a sentence."""
    victims: list[OutlookVictim] = field(default_factory=list)
    """PREEMPTS: the jobs that would be stopped for it."""

    _spec: ClassVar[tuple] = (('ahead', 'ahead', ('list', 'str'), False), ('borrowed_instances', 'borrowedInstances', 'int', False), ('estimate_note', 'estimateNote', 'str', False), ('estimated_start', 'estimatedStart', 'int', False), ('job_id', 'jobId', 'str', False), ('lending_shares', 'lendingShares', ('list', 'str'), False), ('outcome', 'outcome', 'str', True), ('own_instances', 'ownInstances', 'int', False), ('position_in_line', 'positionInLine', 'int', False), ('status', 'status', 'str', False), ('status_reason', 'statusReason', 'str', False), ('unblock', 'unblock', 'str', False), ('victims', 'victims', ('list', ('model', 'OutlookVictim')), False))


@dataclass(kw_only=True)
class JobPreemptionConfiguration(Model):
    """JobPreemptionConfiguration"""

    preemption_retries_before_termination: Optional[int] = None

    _spec: ClassVar[tuple] = (('preemption_retries_before_termination', 'preemptionRetriesBeforeTermination', 'int', False),)


@dataclass(kw_only=True)
class JobQueue(Model):
    """`CreateJobQueue` / `UpdateJobQueue`."""

    capacity_limits: list[CapacityLimit] = field(default_factory=list)
    checkpoint_before_preempt_seconds: Optional[int] = None
    """The `checkpointConfig.checkpointBeforePreemptSeconds` of the queue's checkpointing jobs that give none (default 0: off)."""
    fair_share_half_life_hours: Optional[int] = None
    """Under FAIR_SHARE: how fast past borrowing is forgotten (default 24)."""
    fair_share_rebalance_seconds: Optional[int] = None
    """Under FAIR_SHARE: rebalancing preemption between borrowers, each job at most once per this many seconds of its run (absent: off)."""
    idle_resource_assignment_strategy: Optional[str] = None
    """FIFO (default) | FAIR_SHARE: how lendable capacity goes to borrowers (docs/fair-share.md)."""
    job_queue_name: str
    priority: Optional[int] = None
    """0-1000 (default 0): in a service environment, the queue with the higher priority takes free capacity first."""
    queueing_strategy: Optional[str] = None
    """BEST_EFFORT_FIFO | STRICT_FIFO"""
    service_environment: Optional[str] = None
    """The service environment whose executors run the queue's jobs (docs/semantics-decisions.md, "Service environments"); absent: the executors started for this queue by name."""
    share_groups: list[ShareGroup] = field(default_factory=list)
    """Share groups (departments): shares that lend to each other first, with a borrow limit for them together (docs/share-groups.md)."""
    state: Optional[str] = None

    _spec: ClassVar[tuple] = (('capacity_limits', 'capacityLimits', ('list', ('model', 'CapacityLimit')), False), ('checkpoint_before_preempt_seconds', 'checkpointBeforePreemptSeconds', 'int', False), ('fair_share_half_life_hours', 'fairShareHalfLifeHours', 'int', False), ('fair_share_rebalance_seconds', 'fairShareRebalanceSeconds', 'int', False), ('idle_resource_assignment_strategy', 'idleResourceAssignmentStrategy', 'str', False), ('job_queue_name', 'jobQueueName', 'str', True), ('priority', 'priority', 'int', False), ('queueing_strategy', 'queueingStrategy', 'str', False), ('service_environment', 'serviceEnvironment', 'str', False), ('share_groups', 'shareGroups', ('list', ('model', 'ShareGroup')), False), ('state', 'state', 'str', False))


@dataclass(kw_only=True)
class JobQueueNames(Model):
    """`ListJobQueues`: the names of the queues the caller may read, sorted."""

    job_queues: list[str]

    _spec: ClassVar[tuple] = (('job_queues', 'jobQueues', ('list', 'str'), True),)


@dataclass(kw_only=True)
class JobQueueSnapshot(Model):
    """`GetJobQueueSnapshot`."""

    budgets: list[BudgetBurnDown] = field(default_factory=list)
    """The borrowing budgets of the shares the caller may read."""
    front_of_queue: list[ServiceJob]
    """The first waiting jobs in line, with why they wait."""
    front_of_quota_shares: list[ServiceJob] = field(default_factory=list)
    """The first RUNNABLE job of each share the caller may read (in dispatch order), even when it is too far back for `frontOfQueue`."""
    job_queue: str
    lost_work: list[ShareLostWork] = field(default_factory=list)
    """The lost-work ledger's totals, per share that has lost work or been the beneficiary of others' (since the queue's state began; they outlive the jobs they came from)."""
    shares: list[ShareUsage]

    _spec: ClassVar[tuple] = (('budgets', 'budgets', ('list', ('model', 'BudgetBurnDown')), False), ('front_of_queue', 'frontOfQueue', ('list', ('model', 'ServiceJob')), True), ('front_of_quota_shares', 'frontOfQuotaShares', ('list', ('model', 'ServiceJob')), False), ('job_queue', 'jobQueue', 'str', True), ('lost_work', 'lostWork', ('list', ('model', 'ShareLostWork')), False), ('shares', 'shares', ('list', ('model', 'ShareUsage')), True))


@dataclass(kw_only=True)
class JobRef(Model):
    """JobRef"""

    job_id: str

    _spec: ClassVar[tuple] = (('job_id', 'jobId', 'str', True),)


@dataclass(kw_only=True)
class JobStateChange(Model):
    """Published on `qm.v1.events.job.<queue>.<share>.<jobId>.<STATUS>`."""

    at: int
    """Milliseconds since the Unix epoch."""
    attempt: Optional[int] = None
    from_: str
    job_id: str
    job_name: str
    job_queue: str
    quota_share_name: str
    status_reason: Optional[str] = None
    to: str

    _spec: ClassVar[tuple] = (('at', 'at', 'int', True), ('attempt', 'attempt', 'int', False), ('from_', 'from', 'str', True), ('job_id', 'jobId', 'str', True), ('job_name', 'jobName', 'str', True), ('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True), ('status_reason', 'statusReason', 'str', False), ('to', 'to', 'str', True))


@dataclass(kw_only=True)
class LenderExposure(Model):
    """One lender's reclaim of one instance type."""

    instance_type: str
    lending_share: str
    lent: int
    """Instances of the type it lends now."""
    victims: list[OutlookVictim] = field(default_factory=list)
    """The share's jobs a submit of the lender's would stop, with the work each would compute again."""
    waits: Optional[str] = None
    """Its submit would wait instead: why (the borrowed jobs are protected)."""

    _spec: ClassVar[tuple] = (('instance_type', 'instanceType', 'str', True), ('lending_share', 'lendingShare', 'str', True), ('lent', 'lent', 'int', True), ('victims', 'victims', ('list', ('model', 'OutlookVictim')), False), ('waits', 'waits', 'str', False))


@dataclass(kw_only=True)
class LendingRow(Model):
    """Capacity one share borrowed from another (or from the queue's unassigned capacity) over one period: the lender lent it."""

    borrower: str
    instance_seconds: float
    instance_type: str
    lender: Optional[str] = None
    """The lending share; absent: capacity no share is entitled to."""
    period: str

    _spec: ClassVar[tuple] = (('borrower', 'borrower', 'str', True), ('instance_seconds', 'instanceSeconds', 'float', True), ('instance_type', 'instanceType', 'str', True), ('lender', 'lender', 'str', False), ('period', 'period', 'str', True))


@dataclass(kw_only=True)
class ListAuditEvents(Model):
    """`ListAuditEvents`: every accepted write, filtered. A team sees the writes to its own shares (and configuration changes of its queues)."""

    job_queue: Optional[str] = None
    max_results: Optional[int] = None
    next_token: Optional[str] = None
    principal: Optional[str] = None
    quota_share_name: Optional[str] = None
    since: Optional[int] = None
    """Milliseconds since the Unix epoch, inclusive."""
    until: Optional[int] = None
    """Milliseconds since the Unix epoch, exclusive."""

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', False), ('max_results', 'maxResults', 'int', False), ('next_token', 'nextToken', 'str', False), ('principal', 'principal', 'str', False), ('quota_share_name', 'quotaShareName', 'str', False), ('since', 'since', 'int', False), ('until', 'until', 'int', False))


@dataclass(kw_only=True)
class ListAuditEventsResponse(Model):
    """ListAuditEventsResponse"""

    audit_events: list[AuditEvent]
    next_token: Optional[str] = None

    _spec: ClassVar[tuple] = (('audit_events', 'auditEvents', ('list', ('model', 'AuditEvent')), True), ('next_token', 'nextToken', 'str', False))


@dataclass(kw_only=True)
class ListEvents(Model):
    """`ListEvents`: the stored events (stream `QM_EVENTS`, kept 7 days) the caller may read, oldest first, from a cursor on. Job state changes, preemptions and committed checkpoints of the shares the caller may read (a team: its own shares; admins and readers: all), narrowed by the optional queue, share and job."""

    after: Optional[str] = None
    """A cursor this API returned (an event's `cursor`, or a page's `after`): the events stored after it. Absent: from the oldest event kept."""
    job_id: Optional[str] = None
    job_queue: Optional[str] = None
    max_results: Optional[int] = None
    """At most this many events (1-1000, default 100)."""
    quota_share_name: Optional[str] = None
    since: Optional[int] = None
    """Without `after`: from the events stored since this time (ms since the Unix epoch) instead of the oldest kept."""
    wait_seconds: Optional[int] = None
    """When no event is there to return, wait up to this many seconds for one (0-20, default 0): a long poll."""

    _spec: ClassVar[tuple] = (('after', 'after', 'str', False), ('job_id', 'jobId', 'str', False), ('job_queue', 'jobQueue', 'str', False), ('max_results', 'maxResults', 'int', False), ('quota_share_name', 'quotaShareName', 'str', False), ('since', 'since', 'int', False), ('wait_seconds', 'waitSeconds', 'int', False))


@dataclass(kw_only=True)
class ListResumeDrills(Model):
    """`ListResumeDrills`: a queue's drills, those of the shares the caller may read."""

    job_queue: str
    quota_share_name: Optional[str] = None

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', False))


@dataclass(kw_only=True)
class ListResumeDrillsResponse(Model):
    """ListResumeDrillsResponse"""

    drills: list[ResumeDrill]

    _spec: ClassVar[tuple] = (('drills', 'drills', ('list', ('model', 'ResumeDrill')), True),)


@dataclass(kw_only=True)
class ListServiceJobs(Model):
    """`ListServiceJobs`."""

    job_queue: str
    job_status: Optional[str] = None
    max_results: Optional[int] = None
    next_token: Optional[str] = None
    quota_share_name: Optional[str] = None

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', True), ('job_status', 'jobStatus', 'str', False), ('max_results', 'maxResults', 'int', False), ('next_token', 'nextToken', 'str', False), ('quota_share_name', 'quotaShareName', 'str', False))


@dataclass(kw_only=True)
class ListServiceJobsResponse(Model):
    """ListServiceJobsResponse"""

    job_summary_list: list[ServiceJob]
    next_token: Optional[str] = None

    _spec: ClassVar[tuple] = (('job_summary_list', 'jobSummaryList', ('list', ('model', 'ServiceJob')), True), ('next_token', 'nextToken', 'str', False))


ListTenancyRevisions = Any


@dataclass(kw_only=True)
class ListTenancyRevisionsResponse(Model):
    """ListTenancyRevisionsResponse"""

    revisions: list[RevisionSummary]

    _spec: ClassVar[tuple] = (('revisions', 'revisions', ('list', ('model', 'RevisionSummary')), True),)


@dataclass(kw_only=True)
class LogsResponse(Model):
    """LogsResponse"""

    stderr: str
    stdout: str
    truncated: Optional[bool] = None
    """True when the start of a stream was cut off."""

    _spec: ClassVar[tuple] = (('stderr', 'stderr', 'str', True), ('stdout', 'stdout', 'str', True), ('truncated', 'truncated', 'bool', False))


@dataclass(kw_only=True)
class LostWorkTotal(Model):
    """Attempts that threw work away, and how much (instance-milliseconds: each attempt's lost time times its instances)."""

    attempts: int
    recomputed_instance_ms: int

    _spec: ClassVar[tuple] = (('attempts', 'attempts', 'int', True), ('recomputed_instance_ms', 'recomputedInstanceMs', 'int', True))


@dataclass(kw_only=True)
class OutlookVictim(Model):
    """A job another would stop (`DryRunServiceJob`, `ExplainServiceJob`)."""

    job_id: str
    job_name: Optional[str] = None
    """Only when the caller may read the job."""
    kind: str
    """CROSS_SHARE | IN_SHARE | LIMIT_REDUCED"""
    quota_share_name: str
    work_at_risk_seconds: float
    """Its work since its last committed checkpoint (or since it began running), per instance: what it would compute again."""

    _spec: ClassVar[tuple] = (('job_id', 'jobId', 'str', True), ('job_name', 'jobName', 'str', False), ('kind', 'kind', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True), ('work_at_risk_seconds', 'workAtRiskSeconds', 'float', True))


@dataclass(kw_only=True)
class OutputDataConfig(Model):
    """Where a job's outputs are uploaded when it succeeds."""

    s3_output_path: str
    """`s3://bucket/prefix`: `/opt/ml/model` becomes `<prefix>/<jobId>/output/model.tar.gz` and `/opt/ml/output/data` `output.tar.gz`. It must lie where the job's share may write (its `checkpointS3Prefixes`, as for checkpoints)."""

    _spec: ClassVar[tuple] = (('s3_output_path', 's3OutputPath', 'str', True),)


@dataclass(kw_only=True)
class PolicyStabilityRecord(Model):
    """PolicyStabilityRecord"""

    job_queue: str
    weeks: list[ShareWeek]
    """Oldest week first, shares in name order within a week."""

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', True), ('weeks', 'weeks', ('list', ('model', 'ShareWeek')), True))


@dataclass(kw_only=True)
class PreemptionCount(Model):
    """Preemptions of one kind and workload class."""

    count: int
    kind: str
    """CROSS_SHARE | IN_SHARE | LIMIT_REDUCED"""
    workload_class: str

    _spec: ClassVar[tuple] = (('count', 'count', 'int', True), ('kind', 'kind', 'str', True), ('workload_class', 'workloadClass', 'str', True))


@dataclass(kw_only=True)
class PreemptionEvent(Model):
    """Published on `qm.v1.events.preemption.<queue>.<share>.<jobId>.<phase>`."""

    at: int
    attempt: int
    for_job_id: str
    job_id: str
    kind: str
    """CROSS_SHARE | IN_SHARE | LIMIT_REDUCED"""
    phase: str
    """started | completed"""

    _spec: ClassVar[tuple] = (('at', 'at', 'int', True), ('attempt', 'attempt', 'int', True), ('for_job_id', 'forJobId', 'str', True), ('job_id', 'jobId', 'str', True), ('kind', 'kind', 'str', True), ('phase', 'phase', 'str', True))


@dataclass(kw_only=True)
class PreemptionSummary(Model):
    """PreemptionSummary"""

    preempted_attempt_count: int
    recent_preempted_attempts: list[AttemptDetail] = field(default_factory=list)

    _spec: ClassVar[tuple] = (('preempted_attempt_count', 'preemptedAttemptCount', 'int', True), ('recent_preempted_attempts', 'recentPreemptedAttempts', ('list', ('model', 'AttemptDetail')), False))


@dataclass(kw_only=True)
class PriorityBand(Model):
    """A workload class's priority band: `schedulingPriority` `min..=max`."""

    max: int
    min: int

    _spec: ClassVar[tuple] = (('max', 'max', 'int', True), ('min', 'min', 'int', True))


@dataclass(kw_only=True)
class Problem(Model):
    """Problem"""

    field: str
    message: str

    _spec: ClassVar[tuple] = (('field', 'field', 'str', True), ('message', 'message', 'str', True))


@dataclass(kw_only=True)
class Protections(Model):
    """Quartermaster's per-share protections (all off when absent)."""

    borrow_requires_checkpoint: Optional[bool] = None
    min_runtime_before_preemption_seconds: Optional[int] = None
    reborrow_cooldown_seconds: Optional[int] = None

    _spec: ClassVar[tuple] = (('borrow_requires_checkpoint', 'borrowRequiresCheckpoint', 'bool', False), ('min_runtime_before_preemption_seconds', 'minRuntimeBeforePreemptionSeconds', 'int', False), ('reborrow_cooldown_seconds', 'reborrowCooldownSeconds', 'int', False))


@dataclass(kw_only=True)
class QueueChangeOutlook(Model):
    """`DryRunUpdateQuotaShare` (a share update checked as an update is, and not stored): what applying it now would do, from the core's own dry run on a copy of the live state."""

    become_preemptible: list[AffectedJob]
    """Running jobs that would be on borrowed capacity, preemptible by a lender's reclaim, and are not now."""
    become_protected: list[AffectedJob]
    """Running jobs preemptible now that would no longer be."""
    become_unfittable: list[AffectedJob]
    """Waiting jobs that could never run under the change (why)."""
    job_queue: str
    next_pass_preemptions: list[OutlookVictim]
    next_pass_starts: list[AffectedJob]
    """The pass after the change: jobs it would start, and jobs it would preempt (limit reduced or reclaimed)."""
    reclassified: list[AffectedJob]
    """Jobs moved to another workload class or priority."""
    terminated: list[AffectedJob]
    """Jobs the change would stop or fail (a deleted share's)."""

    _spec: ClassVar[tuple] = (('become_preemptible', 'becomePreemptible', ('list', ('model', 'AffectedJob')), True), ('become_protected', 'becomeProtected', ('list', ('model', 'AffectedJob')), True), ('become_unfittable', 'becomeUnfittable', ('list', ('model', 'AffectedJob')), True), ('job_queue', 'jobQueue', 'str', True), ('next_pass_preemptions', 'nextPassPreemptions', ('list', ('model', 'OutlookVictim')), True), ('next_pass_starts', 'nextPassStarts', ('list', ('model', 'AffectedJob')), True), ('reclassified', 'reclassified', ('list', ('model', 'AffectedJob')), True), ('terminated', 'terminated', ('list', ('model', 'AffectedJob')), True))


@dataclass(kw_only=True)
class QueueDocument(Model):
    """A queue with all its shares: what `qm apply -f` sends and what the configuration bucket stores per queue."""

    job_queue: "JobQueue"
    quota_shares: list[QuotaShare] = field(default_factory=list)

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', ('model', 'JobQueue'), True), ('quota_shares', 'quotaShares', ('list', ('model', 'QuotaShare')), False))


@dataclass(kw_only=True)
class QueueRef(Model):
    """QueueRef"""

    job_queue: str

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', True),)


@dataclass(kw_only=True)
class QuotaShare(Model):
    """`CreateQuotaShare` / `UpdateQuotaShare` (update: only given fields change) and the body of `DescribeQuotaShare`."""

    borrow_budget: Optional["BorrowBudget"] = None
    """How much a LEND_AND_BORROW share may borrow over time; `null` in an update removes it. Absent: no budget (or, in an update, unchanged)."""
    capacity_limits: Optional[list[CapacityLimit]] = None
    checkpoint_s3_prefixes: Optional[list[str]] = None
    """Where jobs of this share may keep checkpoints with `checkpointConfig.s3Uri`: `s3://bucket/prefix/` entries, a URI must lie under one. Default (absent): only under the checkpoint bucket's `<queue>/shares/<share>/`, so no share can reach another's."""
    default_workload_class: Optional[str] = None
    """The class of jobs that name none; default: the first class."""
    fair_share_weight: Optional[int] = None
    """1-100 (default 1): its part of idle capacity under FAIR_SHARE."""
    image_prefixes: Optional[list[str]] = None
    """The images jobs of this share may run (`containerImage`): each entry a repository (`registry.local/team-a/trainer`, any tag or digest of it) or a prefix ending in `/` (`registry.local/team-a/`, every repository under it). Default (absent or empty): no image; such a share runs host commands only."""
    input_s3_prefixes: Optional[list[str]] = None
    """Where jobs of this share may read input channels (`inputDataConfig[].s3Uri`): `s3://bucket/prefix/` entries. Default (absent): only under the checkpoint bucket's `<queue>/shares/<share>/`, as for checkpoints."""
    job_queue: Optional[str] = None
    """May be left out inside a queue document (`qm apply -f`)."""
    on_budget_exhausted: Optional[str] = None
    """FINISH (default) | CHECKPOINT_AND_STOP: what running borrowed jobs do when the budget is spent."""
    preemption_configuration: Optional["SharePreemptionConfiguration"] = None
    protections: Optional["Protections"] = None
    quota_share_name: str
    resource_sharing_configuration: Optional["ResourceSharingConfiguration"] = None
    run_as_non_root: Optional[bool] = None
    """The share's containers may not run as root: an image whose user is root (or none) runs as the executor's `runAsUser` (default 65534, nobody) instead. Default (absent): the image's user."""
    share_group: Optional[str] = None
    """The share group it belongs to (`shareGroups` of its queue); `null` in an update takes it out of its group."""
    state: Optional[str] = None
    workload_classes: Optional[list[WorkloadClass]] = None
    """Up to 10 kinds of work with their own priority band and interruption policy. Absent: one implicit class, `default`, with the share's protections."""

    _spec: ClassVar[tuple] = (('borrow_budget', 'borrowBudget', ('model', 'BorrowBudget'), False), ('capacity_limits', 'capacityLimits', ('list', ('model', 'CapacityLimit')), False), ('checkpoint_s3_prefixes', 'checkpointS3Prefixes', ('list', 'str'), False), ('default_workload_class', 'defaultWorkloadClass', 'str', False), ('fair_share_weight', 'fairShareWeight', 'int', False), ('image_prefixes', 'imagePrefixes', ('list', 'str'), False), ('input_s3_prefixes', 'inputS3Prefixes', ('list', 'str'), False), ('job_queue', 'jobQueue', 'str', False), ('on_budget_exhausted', 'onBudgetExhausted', 'str', False), ('preemption_configuration', 'preemptionConfiguration', ('model', 'SharePreemptionConfiguration'), False), ('protections', 'protections', ('model', 'Protections'), False), ('quota_share_name', 'quotaShareName', 'str', True), ('resource_sharing_configuration', 'resourceSharingConfiguration', ('model', 'ResourceSharingConfiguration'), False), ('run_as_non_root', 'runAsNonRoot', 'bool', False), ('share_group', 'shareGroup', 'str', False), ('state', 'state', 'str', False), ('workload_classes', 'workloadClasses', ('list', ('model', 'WorkloadClass')), False))


@dataclass(kw_only=True)
class QuotaShareList(Model):
    """`ListQuotaShares`: the shares of a queue."""

    quota_shares: list[QuotaShare]

    _spec: ClassVar[tuple] = (('quota_shares', 'quotaShares', ('list', ('model', 'QuotaShare')), True),)


@dataclass(kw_only=True)
class ReclaimExposure(Model):
    """ReclaimExposure"""

    exposures: list[LenderExposure]
    job_queue: str
    quota_share_name: str

    _spec: ClassVar[tuple] = (('exposures', 'exposures', ('list', ('model', 'LenderExposure')), True), ('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True))


@dataclass(kw_only=True)
class RecomputedUsage(Model):
    """Recomputed work of one cause, in instance-seconds."""

    cause: str
    """PREEMPTED_CROSS_SHARE | PREEMPTED_IN_SHARE | PREEMPTED_LIMIT_REDUCED | HOST_LOST"""
    instance_seconds: float

    _spec: ClassVar[tuple] = (('cause', 'cause', 'str', True), ('instance_seconds', 'instanceSeconds', 'float', True))


@dataclass(kw_only=True)
class RegisterExecutor(Model):
    """`RegisterExecutor`."""

    address: Optional[str] = None
    """The address the node's processes are reached at by the other nodes of a multi-node job (`QM_HOSTS`); defaults to the executor id."""
    checkpoint_node: Optional[str] = None
    """The node's checkpoint service (`qm.v1.ckpt.<node>.*`); defaults to the executor id."""
    executor_id: str
    fence_after_seconds: Optional[int] = None
    """After how many seconds without an acknowledged heartbeat this executor stops its attempts on its own (self-fencing). The scheduler declares it lost only after that, the longest grace of its attempts and a margin (ADR 0007). Absent: an executor that does not fence."""
    incarnation: Optional[str] = None
    """Changes when the executor process restarts: the attempts of an earlier incarnation are gone (they end HOST_LOST)."""
    instances: list[ExecutorInstances]
    job_queue: Optional[str] = None
    """The queue it serves (its environment is the queue's name); empty when it joins a `serviceEnvironment` instead."""
    runtimes: list[str] = field(default_factory=list)
    """How it launches attempts: `process` (host commands) and/or `container` (images). Absent: `process` only, as every executor before runtimes existed."""
    service_environment: Optional[str] = None
    """The service environment it joins: it runs the jobs of every queue attached to it (`jobQueue` then is empty)."""

    _spec: ClassVar[tuple] = (('address', 'address', 'str', False), ('checkpoint_node', 'checkpointNode', 'str', False), ('executor_id', 'executorId', 'str', True), ('fence_after_seconds', 'fenceAfterSeconds', 'int', False), ('incarnation', 'incarnation', 'str', False), ('instances', 'instances', ('list', ('model', 'ExecutorInstances')), True), ('job_queue', 'jobQueue', 'str', False), ('runtimes', 'runtimes', ('list', 'str'), False), ('service_environment', 'serviceEnvironment', 'str', False))


@dataclass(kw_only=True)
class ResourceSharingConfiguration(Model):
    """ResourceSharingConfiguration"""

    borrow_limit: Optional[int] = None
    strategy: str
    """RESERVE | LEND | LEND_AND_BORROW"""

    _spec: ClassVar[tuple] = (('borrow_limit', 'borrowLimit', 'int', False), ('strategy', 'strategy', 'str', True))


@dataclass(kw_only=True)
class ResumeDrill(Model):
    """One resume drill and its outcome."""

    artifact: str
    """What it proves: `image:<reference>` or `command:<sha256>`."""
    drill_id: str
    finished_at: Optional[int] = None
    job_queue: str
    quota_share_name: str
    recomputed_ms: Optional[int] = None
    """Work the stop cost the resumed copy (ms per instance, since its last checkpoint)."""
    restore_ms: Optional[int] = None
    """From the resumed attempt's placement to its process running, ms."""
    restored_step: Optional[int] = None
    """The checkpoint step the resumed copy restored."""
    resumed_job_id: str
    started_at: int
    status: str
    """RUNNING | PASSED | FAILED"""
    status_reason: Optional[str] = None
    """Why it failed: what differed, or why it could not be decided."""
    stopped_at: Optional[int] = None
    """When the resumed copy was stopped."""
    uninterrupted_job_id: str
    workload_class: str

    _spec: ClassVar[tuple] = (('artifact', 'artifact', 'str', True), ('drill_id', 'drillId', 'str', True), ('finished_at', 'finishedAt', 'int', False), ('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True), ('recomputed_ms', 'recomputedMs', 'int', False), ('restore_ms', 'restoreMs', 'int', False), ('restored_step', 'restoredStep', 'int', False), ('resumed_job_id', 'resumedJobId', 'str', True), ('started_at', 'startedAt', 'int', True), ('status', 'status', 'str', True), ('status_reason', 'statusReason', 'str', False), ('stopped_at', 'stoppedAt', 'int', False), ('uninterrupted_job_id', 'uninterruptedJobId', 'str', True), ('workload_class', 'workloadClass', 'str', True))


@dataclass(kw_only=True)
class RetryStrategy(Model):
    """RetryStrategy"""

    attempts: Optional[int] = None
    evaluate_on_exit: list[EvaluateOnExit] = field(default_factory=list)

    _spec: ClassVar[tuple] = (('attempts', 'attempts', 'int', False), ('evaluate_on_exit', 'evaluateOnExit', ('list', ('model', 'EvaluateOnExit')), False))


@dataclass(kw_only=True)
class RevisionSummary(Model):
    """One line of `ListTenancyRevisions` (admins and readers), newest first."""

    at: int
    changes: list[str]
    principal: str
    revision: int
    source: str

    _spec: ClassVar[tuple] = (('at', 'at', 'int', True), ('changes', 'changes', ('list', 'str'), True), ('principal', 'principal', 'str', True), ('revision', 'revision', 'int', True), ('source', 'source', 'str', True))


@dataclass(kw_only=True)
class ServiceJob(Model):
    """`DescribeServiceJob`'s body, and each entry of `ListServiceJobs`."""

    attempts: list[AttemptDetail] = field(default_factory=list)
    container_image: Optional[str] = None
    """The image it runs in (the `container` runtime), if it names one."""
    created_at: int
    instance_count: int
    instance_type: str
    job_id: str
    job_name: str
    job_queue: str
    on_borrowed_capacity: Optional[bool] = None
    """Whether it runs (in part) on capacity borrowed from other shares."""
    preemption_summary: Optional["PreemptionSummary"] = None
    quota_share_name: str
    runnable_since: Optional[int] = None
    """A RUNNABLE job's place in line among equal priorities: when it last became RUNNABLE (ms since the Unix epoch)."""
    scheduling_priority: int
    status: str
    status_reason: Optional[str] = None
    tags: dict[str, str] = field(default_factory=dict)
    """The tags it was submitted with."""
    trace_id: Optional[str] = None
    """`DescribeServiceJob` of a job that has not ended: its trace's id (W3C, 32 hex digits), to find its one trace in a tracing backend."""
    workload_class: Optional[str] = None
    """Its workload class (absent: the share declares none)."""

    _spec: ClassVar[tuple] = (('attempts', 'attempts', ('list', ('model', 'AttemptDetail')), False), ('container_image', 'containerImage', 'str', False), ('created_at', 'createdAt', 'int', True), ('instance_count', 'instanceCount', 'int', True), ('instance_type', 'instanceType', 'str', True), ('job_id', 'jobId', 'str', True), ('job_name', 'jobName', 'str', True), ('job_queue', 'jobQueue', 'str', True), ('on_borrowed_capacity', 'onBorrowedCapacity', 'bool', False), ('preemption_summary', 'preemptionSummary', ('model', 'PreemptionSummary'), False), ('quota_share_name', 'quotaShareName', 'str', True), ('runnable_since', 'runnableSince', 'int', False), ('scheduling_priority', 'schedulingPriority', 'int', True), ('status', 'status', 'str', True), ('status_reason', 'statusReason', 'str', False), ('tags', 'tags', ('dict', 'str'), False), ('trace_id', 'traceId', 'str', False), ('workload_class', 'workloadClass', 'str', False))


@dataclass(kw_only=True)
class Services(Model):
    """One identity per service instance or node (or node group)."""

    admission: list[str] = field(default_factory=list)
    """Principals of admission instances (stateless; one identity for all replicas is fine)."""
    checkpoint: dict[str, CheckpointIdentity] = field(default_factory=dict)
    """Checkpoint service principal -> the nodes it serves."""
    console: list[str] = field(default_factory=list)
    """Principals of web console instances (`qm-console`): they may speak for the people (admins, readers, team users) who signed in to them, and for no service; they read every event to push live updates, each filtered to what its viewer may read (ADR 0018)."""
    executors: dict[str, ExecutorIdentity] = field(default_factory=dict)
    """Executor principal -> the executor ids it may act as."""
    gateway: list[str] = field(default_factory=list)
    """Principals of AWS Batch gateway instances: they may speak for the principals `awsAccessKeys` names, and for no one else."""
    nats_auth: list[str] = field(default_factory=list)
    """Principals of `qm tenancy sync-nats`, which writes each NATS server's authorization from the tenancy in effect and has the server reload it: they read the tenancy and nothing else."""
    scheduler: list[str] = field(default_factory=list)
    """Principals of scheduler instances (the leader and its standbys)."""

    _spec: ClassVar[tuple] = (('admission', 'admission', ('list', 'str'), False), ('checkpoint', 'checkpoint', ('dict', ('model', 'CheckpointIdentity')), False), ('console', 'console', ('list', 'str'), False), ('executors', 'executors', ('dict', ('model', 'ExecutorIdentity')), False), ('gateway', 'gateway', ('list', 'str'), False), ('nats_auth', 'natsAuth', ('list', 'str'), False), ('scheduler', 'scheduler', ('list', 'str'), False))


@dataclass(kw_only=True)
class ShareGroup(Model):
    """One share group of a queue."""

    borrow_limit: Optional[int] = None
    """Percent of the group's shares' entitlements they may borrow together; -1 (default): unlimited."""
    share_group_name: str

    _spec: ClassVar[tuple] = (('borrow_limit', 'borrowLimit', 'int', False), ('share_group_name', 'shareGroupName', 'str', True))


@dataclass(kw_only=True)
class ShareLostWork(Model):
    """One share's lost-work totals."""

    by_cause: dict[str, LostWorkTotal] = field(default_factory=dict)
    """This share's attempts, by cause: PREEMPTED_CROSS_SHARE, PREEMPTED_IN_SHARE, PREEMPTED_LIMIT_REDUCED, HOST_LOST (causes with nothing lost are left out)."""
    lost_for_this_share: Optional[Any] = None
    """Other jobs' attempts, preempted for this share's jobs."""
    quota_share_name: str
    restored_bytes: Optional[int] = None
    """Checkpoint bytes this share's attempts restored."""

    _spec: ClassVar[tuple] = (('by_cause', 'byCause', ('dict', ('model', 'LostWorkTotal')), False), ('lost_for_this_share', 'lostForThisShare', 'any', False), ('quota_share_name', 'quotaShareName', 'str', True), ('restored_bytes', 'restoredBytes', 'int', False))


@dataclass(kw_only=True)
class SharePreemptionConfiguration(Model):
    """SharePreemptionConfiguration"""

    in_share_preemption: str
    """ENABLED | DISABLED"""

    _spec: ClassVar[tuple] = (('in_share_preemption', 'inSharePreemption', 'str', True),)


@dataclass(kw_only=True)
class ShareRef(Model):
    """ShareRef"""

    job_queue: str
    quota_share_name: str

    _spec: ClassVar[tuple] = (('job_queue', 'jobQueue', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True))


@dataclass(kw_only=True)
class ShareUsage(Model):
    """One share's use of one type in a snapshot."""

    borrowed: int
    entitlement: int
    idle: int
    instance_type: str
    lent: int
    quota_share_name: str
    used: int

    _spec: ClassVar[tuple] = (('borrowed', 'borrowed', 'int', True), ('entitlement', 'entitlement', 'int', True), ('idle', 'idle', 'int', True), ('instance_type', 'instanceType', 'str', True), ('lent', 'lent', 'int', True), ('quota_share_name', 'quotaShareName', 'str', True), ('used', 'used', 'int', True))


@dataclass(kw_only=True)
class ShareWeek(Model):
    """One share's week."""

    borrow_refusals_missing_proof: int
    """Jobs submitted in a class that borrows only with a resume proof, for an image or command without one."""
    configuration_changes: list[ByPrincipal]
    drills_failed: int
    drills_passed: int
    jobs_preempted_more_than_twice: int
    """Jobs of this share preempted a third time this week."""
    preemptions: list[PreemptionCount]
    """Of this share's jobs."""
    priority_changes: list[ByPrincipal]
    quota_share_name: str
    reclaim_wait_seconds: Optional["WaitPercentiles"] = None
    """How long this share's jobs waited for lent capacity back: from the reclaim's first preemption to their start."""
    terminations: list[ByPrincipal]
    week: str
    """Its Monday, `YYYY-MM-DD` (weeks start Monday 00:00 UTC)."""
    week_start: int

    _spec: ClassVar[tuple] = (('borrow_refusals_missing_proof', 'borrowRefusalsMissingProof', 'int', True), ('configuration_changes', 'configurationChanges', ('list', ('model', 'ByPrincipal')), True), ('drills_failed', 'drillsFailed', 'int', True), ('drills_passed', 'drillsPassed', 'int', True), ('jobs_preempted_more_than_twice', 'jobsPreemptedMoreThanTwice', 'int', True), ('preemptions', 'preemptions', ('list', ('model', 'PreemptionCount')), True), ('priority_changes', 'priorityChanges', ('list', ('model', 'ByPrincipal')), True), ('quota_share_name', 'quotaShareName', 'str', True), ('reclaim_wait_seconds', 'reclaimWaitSeconds', ('model', 'WaitPercentiles'), False), ('terminations', 'terminations', ('list', ('model', 'ByPrincipal')), True), ('week', 'week', 'str', True), ('week_start', 'weekStart', 'int', True))


@dataclass(kw_only=True)
class StartResumeDrill(Model):
    """`StartResumeDrill`: runs `job` twice on its share's own capacity, one copy stopped after its first committed checkpoint and resumed, one uninterrupted, and compares what they declare as their result (`docs/workload-classes.md`). Its right is a submit's."""

    job: "SubmitServiceJob"
    seed: Optional[int] = None
    """Draws the point at which the resumed copy is stopped (default: one drawn by admission)."""

    _spec: ClassVar[tuple] = (('job', 'job', ('model', 'SubmitServiceJob'), True), ('seed', 'seed', 'int', False))


@dataclass(kw_only=True)
class StartResumeDrillResponse(Model):
    """StartResumeDrillResponse"""

    drill_id: str
    resumed_job_id: str
    """The copy that is stopped and resumed."""
    uninterrupted_job_id: str

    _spec: ClassVar[tuple] = (('drill_id', 'drillId', 'str', True), ('resumed_job_id', 'resumedJobId', 'str', True), ('uninterrupted_job_id', 'uninterruptedJobId', 'str', True))


@dataclass(kw_only=True)
class StoredEvent(Model):
    """One stored event, as `ListEvents` returns it."""

    cursor: str
    """Resume after this event: pass it as `after`."""
    event: Any
    """The event: a [`JobStateChange`], a [`PreemptionEvent`] or a [`CheckpointCommit`], by `kind`."""
    job_id: str
    job_queue: str
    kind: Any
    position: Optional[str] = None
    """Its `Qm-Position` (job and preemption events; a checkpoint has none)."""
    quota_share_name: str
    subject: str
    """The subject it was published on live."""

    _spec: ClassVar[tuple] = (('cursor', 'cursor', 'str', True), ('event', 'event', 'any', True), ('job_id', 'jobId', 'str', True), ('job_queue', 'jobQueue', 'str', True), ('kind', 'kind', 'any', True), ('position', 'position', 'str', False), ('quota_share_name', 'quotaShareName', 'str', True), ('subject', 'subject', 'str', True))


@dataclass(kw_only=True)
class SubmitServiceJob(Model):
    """`SubmitServiceJob`."""

    checkpoint_config: Optional["CheckpointConfig"] = None
    client_token: Optional[str] = None
    """Same token, same job: a retried submit never creates a second job."""
    command: list[str] = field(default_factory=list)
    """The program and its arguments (never a shell string). With a `containerImage`: the container's argv, replacing the image's entrypoint; empty: the image's entrypoint with the argument `train`, as SageMaker starts a training image."""
    container_image: Optional[str] = None
    """An OCI image to run the job in (`registry/repository:tag` or `@sha256:...`): the job runs in the `container` runtime, with the SageMaker training-container contract (`/opt/ml`). Only images under the share's `imagePrefixes` in the tenancy are accepted."""
    environment: dict[str, str] = field(default_factory=dict)
    estimated_runtime_seconds: Optional[int] = None
    """How long one attempt is expected to run, in seconds: what a share's borrowing budget holds back for it when it borrows (absent: its `timeoutConfig.attemptDurationSeconds`)."""
    input_data_config: list[InputChannel] = field(default_factory=list)
    """A container job's input channels, downloaded into `/opt/ml/input/data/<channelName>` before it starts (File mode)."""
    instance_count: Optional[int] = None
    instance_type: str
    job_name: str
    job_queue: str
    output_data_config: Optional["OutputDataConfig"] = None
    """Where a successful container job's `/opt/ml/model` and `/opt/ml/output/data` go (SageMaker's `OutputDataConfig`)."""
    preemption_configuration: Optional["JobPreemptionConfiguration"] = None
    quota_share_name: Optional[str] = None
    retry_strategy: Optional["RetryStrategy"] = None
    scheduling_priority: Optional[int] = None
    tags: dict[str, str] = field(default_factory=dict)
    termination_grace_period_seconds: Optional[int] = None
    timeout_config: Optional["TimeoutConfig"] = None
    workload_class: Optional[str] = None
    """Its share's workload class (default: the share's default class). Its `schedulingPriority` must lie in the class's band; left out, it is the band's lowest value."""

    _spec: ClassVar[tuple] = (('checkpoint_config', 'checkpointConfig', ('model', 'CheckpointConfig'), False), ('client_token', 'clientToken', 'str', False), ('command', 'command', ('list', 'str'), False), ('container_image', 'containerImage', 'str', False), ('environment', 'environment', ('dict', 'str'), False), ('estimated_runtime_seconds', 'estimatedRuntimeSeconds', 'int', False), ('input_data_config', 'inputDataConfig', ('list', ('model', 'InputChannel')), False), ('instance_count', 'instanceCount', 'int', False), ('instance_type', 'instanceType', 'str', True), ('job_name', 'jobName', 'str', True), ('job_queue', 'jobQueue', 'str', True), ('output_data_config', 'outputDataConfig', ('model', 'OutputDataConfig'), False), ('preemption_configuration', 'preemptionConfiguration', ('model', 'JobPreemptionConfiguration'), False), ('quota_share_name', 'quotaShareName', 'str', False), ('retry_strategy', 'retryStrategy', ('model', 'RetryStrategy'), False), ('scheduling_priority', 'schedulingPriority', 'int', False), ('tags', 'tags', ('dict', 'str'), False), ('termination_grace_period_seconds', 'terminationGracePeriodSeconds', 'int', False), ('timeout_config', 'timeoutConfig', ('model', 'TimeoutConfig'), False), ('workload_class', 'workloadClass', 'str', False))


@dataclass(kw_only=True)
class SubmitServiceJobResponse(Model):
    """SubmitServiceJobResponse"""

    job_id: str
    job_name: str
    submitted_at: Optional[int] = None
    """When the job was first submitted (ms since the Unix epoch, the admission service's clock; a retry with the same client token gets the first submit's time): follow its events `since` a little before."""

    _spec: ClassVar[tuple] = (('job_id', 'jobId', 'str', True), ('job_name', 'jobName', 'str', True), ('submitted_at', 'submittedAt', 'int', False))


@dataclass(kw_only=True)
class Team(Model):
    """Team"""

    shares: list[str]
    """`queue/share`, or `queue/*` for every share of a queue."""
    users: list[str]

    _spec: ClassVar[tuple] = (('shares', 'shares', ('list', 'str'), True), ('users', 'users', ('list', 'str'), True))


@dataclass(kw_only=True)
class Tenancy(Model):
    """The tenancy file. See `docs/tenancy.md` for the format with an example."""

    admins: list[str] = field(default_factory=list)
    """Principals that may change queues and shares and act on any job."""
    aws_access_keys: dict[str, str] = field(default_factory=dict)
    """AWS access key id -> the principal (an admin, reader or team user) the AWS Batch gateway may act for when a request is signed with that key. The secrets are not here: they live only in the gateway's keys file (ADR 0012)."""
    nkeys: dict[str, list[str]] = field(default_factory=dict)
    """Principal -> the public NATS nkeys (`U...`) it may connect with: one, or two while a key is being rotated (both work until the old one is removed). The seeds are never here: each stays in its owner's `.nk` file. `qm tenancy apply --keys DIR` fills this in from the `.nk` files `qm auth` writes; a principal a new revision lists no keys for keeps the keys it had."""
    readers: list[str] = field(default_factory=list)
    """Principals that may read everything and change nothing."""
    services: Optional[Any] = None
    teams: dict[str, Team] = field(default_factory=dict)
    """Team name -> its shares and users."""

    _spec: ClassVar[tuple] = (('admins', 'admins', ('list', 'str'), False), ('aws_access_keys', 'awsAccessKeys', ('dict', 'str'), False), ('nkeys', 'nkeys', ('dict', ('list', 'str')), False), ('readers', 'readers', ('list', 'str'), False), ('services', 'services', 'any', False), ('teams', 'teams', ('dict', ('model', 'Team')), False))


@dataclass(kw_only=True)
class TenancyRevision(Model):
    """One revision of the tenancy, as stored."""

    at: int
    """Milliseconds since the Unix epoch."""
    changes: list[str] = field(default_factory=list)
    """Who gains and loses what against the revision before."""
    file_digests: list[str] = field(default_factory=list)
    """The SHA-256 of every tenancy file text admission has applied (carried along by later revisions, oldest first, the last [`FILE_DIGESTS`]): a file is applied only if its text never was, so a restart, or a replica with an older file, undoes nothing."""
    principal: str
    """Who made it (an admin, or admission itself for its tenancy file)."""
    revision: Optional[int] = None
    """The bucket's revision number (set when read; 0 in a request)."""
    source: str
    """How it was made: `qm tenancy apply`, or `tenancy file <path>`."""
    tenancy: "Tenancy"

    _spec: ClassVar[tuple] = (('at', 'at', 'int', True), ('changes', 'changes', ('list', 'str'), False), ('file_digests', 'fileDigests', ('list', 'str'), False), ('principal', 'principal', 'str', True), ('revision', 'revision', 'int', False), ('source', 'source', 'str', True), ('tenancy', 'tenancy', ('model', 'Tenancy'), True))


@dataclass(kw_only=True)
class TerminateServiceJob(Model):
    """`TerminateServiceJob`."""

    job_id: str
    reason: Optional[str] = None

    _spec: ClassVar[tuple] = (('job_id', 'jobId', 'str', True), ('reason', 'reason', 'str', False))


@dataclass(kw_only=True)
class TimeoutConfig(Model):
    """TimeoutConfig"""

    attempt_duration_seconds: int

    _spec: ClassVar[tuple] = (('attempt_duration_seconds', 'attemptDurationSeconds', 'int', True),)


@dataclass(kw_only=True)
class UpdateServiceJob(Model):
    """`UpdateServiceJob`."""

    job_id: str
    scheduling_priority: int

    _spec: ClassVar[tuple] = (('job_id', 'jobId', 'str', True), ('scheduling_priority', 'schedulingPriority', 'int', True))


@dataclass(kw_only=True)
class UsageReport(Model):
    """UsageReport"""

    as_of: int
    """The report counts up to this moment (ms since the Unix epoch)."""
    budgets: list[BudgetBurnDown] = field(default_factory=list)
    """The borrowing budgets of the shares shown, as of `asOf`."""
    by: str
    """DAY or WEEK."""
    from_: str
    job_queue: str
    lending: list[LendingRow]
    """Borrowed capacity by period, type, borrower and lender: rows whose borrower or lender the caller may read."""
    rows: list[UsageRow]
    """Period, share, type, class order."""
    to: str

    _spec: ClassVar[tuple] = (('as_of', 'asOf', 'int', True), ('budgets', 'budgets', ('list', ('model', 'BudgetBurnDown')), False), ('by', 'by', 'str', True), ('from_', 'from', 'str', True), ('job_queue', 'jobQueue', 'str', True), ('lending', 'lending', ('list', ('model', 'LendingRow')), True), ('rows', 'rows', ('list', ('model', 'UsageRow')), True), ('to', 'to', 'str', True))


@dataclass(kw_only=True)
class UsageRow(Model):
    """One share's use of one instance type, in one workload class, over one period. Instance-seconds, to the millisecond."""

    borrowed_instance_seconds: float
    """Held beyond it (see `lending` for whose capacity it was)."""
    drill_instance_seconds: Optional[float] = None
    """Held by resume drills' jobs (part of `ownInstanceSeconds`)."""
    drills: Optional[int] = None
    """Resume drills started."""
    instance_type: str
    own_instance_seconds: float
    """Held within the share's entitlement."""
    period: str
    """The period's first day, `YYYY-MM-DD`."""
    quota_share_name: str
    recomputed: list[RecomputedUsage] = field(default_factory=list)
    """Work thrown away by preempted attempts and lost hosts, by cause."""
    waiting_instance_seconds: float
    """Queued (RUNNABLE) instances, waiting."""
    workload_class: str

    _spec: ClassVar[tuple] = (('borrowed_instance_seconds', 'borrowedInstanceSeconds', 'float', True), ('drill_instance_seconds', 'drillInstanceSeconds', 'float', False), ('drills', 'drills', 'int', False), ('instance_type', 'instanceType', 'str', True), ('own_instance_seconds', 'ownInstanceSeconds', 'float', True), ('period', 'period', 'str', True), ('quota_share_name', 'quotaShareName', 'str', True), ('recomputed', 'recomputed', ('list', ('model', 'RecomputedUsage')), False), ('waiting_instance_seconds', 'waitingInstanceSeconds', 'float', True), ('workload_class', 'workloadClass', 'str', True))


@dataclass(kw_only=True)
class WaitPercentiles(Model):
    """Seconds, nearest-rank percentiles."""

    count: int
    max: float
    p50: float
    p90: float
    p99: float

    _spec: ClassVar[tuple] = (('count', 'count', 'int', True), ('max', 'max', 'float', True), ('p50', 'p50', 'float', True), ('p90', 'p90', 'float', True), ('p99', 'p99', 'float', True))


@dataclass(kw_only=True)
class WorkloadClass(Model):
    """One workload class of a share (Quartermaster's; see `docs/workload-classes.md`). Absent fields take the defaults: may borrow, no resume proof, preemptible by any class, the share's minimum runtime, the job's or queue's checkpoint-then-preempt."""

    borrow_requires_resume_proof: Optional[bool] = None
    checkpoint_before_preempt_seconds: Optional[int] = None
    may_borrow: Optional[bool] = None
    min_runtime_before_preemption_seconds: Optional[int] = None
    name: str
    preemptible_by: Optional[list[str]] = None
    """Classes whose jobs may preempt this class's jobs in-share; absent: any class; empty: none."""
    priority_band: "PriorityBand"
    requires_checkpoint: Optional[bool] = None
    result_tolerance_ppm: Optional[int] = None
    """How far a resume drill's metrics may differ, in parts per million of the larger value (1000 = 0.1%; default 0: equal; at most 1,000,000)."""

    _spec: ClassVar[tuple] = (('borrow_requires_resume_proof', 'borrowRequiresResumeProof', 'bool', False), ('checkpoint_before_preempt_seconds', 'checkpointBeforePreemptSeconds', 'int', False), ('may_borrow', 'mayBorrow', 'bool', False), ('min_runtime_before_preemption_seconds', 'minRuntimeBeforePreemptionSeconds', 'int', False), ('name', 'name', 'str', True), ('preemptible_by', 'preemptibleBy', ('list', 'str'), False), ('priority_band', 'priorityBand', ('model', 'PriorityBand'), True), ('requires_checkpoint', 'requiresCheckpoint', 'bool', False), ('result_tolerance_ppm', 'resultTolerancePpm', 'int', False))


MODELS = {"AffectedJob": AffectedJob, "ApiError": ApiError, "ApplyTenancy": ApplyTenancy, "ApplyTenancyResponse": ApplyTenancyResponse, "AttemptDetail": AttemptDetail, "AuditEvent": AuditEvent, "BorrowBudget": BorrowBudget, "BudgetBurnDown": BudgetBurnDown, "ByPrincipal": ByPrincipal, "Caller": Caller, "CapacityLimit": CapacityLimit, "CheckpointCommit": CheckpointCommit, "CheckpointConfig": CheckpointConfig, "CheckpointIdentity": CheckpointIdentity, "DescribeTenancy": DescribeTenancy, "EvaluateOnExit": EvaluateOnExit, "EventFrame": EventFrame, "EventPage": EventPage, "ExecutorIdentity": ExecutorIdentity, "ExecutorInstances": ExecutorInstances, "FramedEvent": FramedEvent, "GetPolicyStabilityRecord": GetPolicyStabilityRecord, "GetReclaimExposure": GetReclaimExposure, "GetServiceJobLogs": GetServiceJobLogs, "GetUsage": GetUsage, "InputChannel": InputChannel, "JobOutlook": JobOutlook, "JobPreemptionConfiguration": JobPreemptionConfiguration, "JobQueue": JobQueue, "JobQueueNames": JobQueueNames, "JobQueueSnapshot": JobQueueSnapshot, "JobRef": JobRef, "JobStateChange": JobStateChange, "LenderExposure": LenderExposure, "LendingRow": LendingRow, "ListAuditEvents": ListAuditEvents, "ListAuditEventsResponse": ListAuditEventsResponse, "ListEvents": ListEvents, "ListResumeDrills": ListResumeDrills, "ListResumeDrillsResponse": ListResumeDrillsResponse, "ListServiceJobs": ListServiceJobs, "ListServiceJobsResponse": ListServiceJobsResponse, "ListTenancyRevisionsResponse": ListTenancyRevisionsResponse, "LogsResponse": LogsResponse, "LostWorkTotal": LostWorkTotal, "OutlookVictim": OutlookVictim, "OutputDataConfig": OutputDataConfig, "PolicyStabilityRecord": PolicyStabilityRecord, "PreemptionCount": PreemptionCount, "PreemptionEvent": PreemptionEvent, "PreemptionSummary": PreemptionSummary, "PriorityBand": PriorityBand, "Problem": Problem, "Protections": Protections, "QueueChangeOutlook": QueueChangeOutlook, "QueueDocument": QueueDocument, "QueueRef": QueueRef, "QuotaShare": QuotaShare, "QuotaShareList": QuotaShareList, "ReclaimExposure": ReclaimExposure, "RecomputedUsage": RecomputedUsage, "RegisterExecutor": RegisterExecutor, "ResourceSharingConfiguration": ResourceSharingConfiguration, "ResumeDrill": ResumeDrill, "RetryStrategy": RetryStrategy, "RevisionSummary": RevisionSummary, "ServiceJob": ServiceJob, "Services": Services, "ShareGroup": ShareGroup, "ShareLostWork": ShareLostWork, "SharePreemptionConfiguration": SharePreemptionConfiguration, "ShareRef": ShareRef, "ShareUsage": ShareUsage, "ShareWeek": ShareWeek, "StartResumeDrill": StartResumeDrill, "StartResumeDrillResponse": StartResumeDrillResponse, "StoredEvent": StoredEvent, "SubmitServiceJob": SubmitServiceJob, "SubmitServiceJobResponse": SubmitServiceJobResponse, "Team": Team, "Tenancy": Tenancy, "TenancyRevision": TenancyRevision, "TerminateServiceJob": TerminateServiceJob, "TimeoutConfig": TimeoutConfig, "UpdateServiceJob": UpdateServiceJob, "UsageReport": UsageReport, "UsageRow": UsageRow, "WaitPercentiles": WaitPercentiles, "WorkloadClass": WorkloadClass}


# Every API operation: (request model, reply model); None: a plain dict.
OPERATIONS = {
    "ApplyJobQueue": (QueueDocument, QueueDocument),
    "ApplyTenancy": (ApplyTenancy, ApplyTenancyResponse),
    "CreateJobQueue": (JobQueue, JobQueue),
    "CreateQuotaShare": (QuotaShare, QuotaShare),
    "DeleteJobQueue": (QueueRef, None),
    "DeleteQuotaShare": (ShareRef, None),
    "DescribeJobQueue": (QueueRef, QueueDocument),
    "DescribeQuotaShare": (ShareRef, QuotaShare),
    "DescribeServiceJob": (JobRef, ServiceJob),
    "DescribeTenancy": (DescribeTenancy, TenancyRevision),
    "DryRunServiceJob": (SubmitServiceJob, JobOutlook),
    "DryRunUpdateQuotaShare": (QuotaShare, QueueChangeOutlook),
    "ExplainServiceJob": (JobRef, JobOutlook),
    "GetJobQueueSnapshot": (QueueRef, JobQueueSnapshot),
    "GetPolicyStabilityRecord": (GetPolicyStabilityRecord, PolicyStabilityRecord),
    "GetReclaimExposure": (GetReclaimExposure, ReclaimExposure),
    "GetServiceJobLogs": (GetServiceJobLogs, LogsResponse),
    "GetUsage": (GetUsage, UsageReport),
    "ListAuditEvents": (ListAuditEvents, ListAuditEventsResponse),
    "ListEvents": (ListEvents, EventPage),
    "ListJobQueues": (None, JobQueueNames),
    "ListQuotaShares": (QueueRef, QuotaShareList),
    "ListResumeDrills": (ListResumeDrills, ListResumeDrillsResponse),
    "ListServiceJobs": (ListServiceJobs, ListServiceJobsResponse),
    "ListTenancyRevisions": (None, ListTenancyRevisionsResponse),
    "RegisterExecutor": (RegisterExecutor, None),
    "StartResumeDrill": (StartResumeDrill, StartResumeDrillResponse),
    "SubmitServiceJob": (SubmitServiceJob, SubmitServiceJobResponse),
    "TerminateServiceJob": (TerminateServiceJob, ServiceJob),
    "UpdateJobQueue": (None, JobQueue),
    "UpdateQuotaShare": (QuotaShare, QuotaShare),
    "UpdateServiceJob": (UpdateServiceJob, ServiceJob),
    "WhoAmI": (None, Caller),
}


class Operations:
    """One method per API operation (docs/asyncapi.yaml), named after it."""

    async def apply_job_queue(self, request: Optional[QueueDocument] = None, /, **fields: Any) -> QueueDocument:
        """ApplyJobQueue: the request as a QueueDocument or as its fields (snake_case)."""
        return await self._call("ApplyJobQueue", request, fields)

    async def apply_tenancy(self, request: Optional[ApplyTenancy] = None, /, **fields: Any) -> ApplyTenancyResponse:
        """ApplyTenancy: the request as a ApplyTenancy or as its fields (snake_case)."""
        return await self._call("ApplyTenancy", request, fields)

    async def create_job_queue(self, request: Optional[JobQueue] = None, /, **fields: Any) -> JobQueue:
        """CreateJobQueue: the request as a JobQueue or as its fields (snake_case)."""
        return await self._call("CreateJobQueue", request, fields)

    async def create_quota_share(self, request: Optional[QuotaShare] = None, /, **fields: Any) -> QuotaShare:
        """CreateQuotaShare: the request as a QuotaShare or as its fields (snake_case)."""
        return await self._call("CreateQuotaShare", request, fields)

    async def delete_job_queue(self, request: Optional[QueueRef] = None, /, **fields: Any) -> dict:
        """DeleteJobQueue: the request as a QueueRef or as its fields (snake_case)."""
        return await self._call("DeleteJobQueue", request, fields)

    async def delete_quota_share(self, request: Optional[ShareRef] = None, /, **fields: Any) -> dict:
        """DeleteQuotaShare: the request as a ShareRef or as its fields (snake_case)."""
        return await self._call("DeleteQuotaShare", request, fields)

    async def describe_job_queue(self, request: Optional[QueueRef] = None, /, **fields: Any) -> QueueDocument:
        """DescribeJobQueue: the request as a QueueRef or as its fields (snake_case)."""
        return await self._call("DescribeJobQueue", request, fields)

    async def describe_quota_share(self, request: Optional[ShareRef] = None, /, **fields: Any) -> QuotaShare:
        """DescribeQuotaShare: the request as a ShareRef or as its fields (snake_case)."""
        return await self._call("DescribeQuotaShare", request, fields)

    async def describe_service_job(self, request: Optional[JobRef] = None, /, **fields: Any) -> ServiceJob:
        """DescribeServiceJob: the request as a JobRef or as its fields (snake_case)."""
        return await self._call("DescribeServiceJob", request, fields)

    async def describe_tenancy(self, request: Optional[DescribeTenancy] = None, /, **fields: Any) -> TenancyRevision:
        """DescribeTenancy: the request as a DescribeTenancy or as its fields (snake_case)."""
        return await self._call("DescribeTenancy", request, fields)

    async def dry_run_service_job(self, request: Optional[SubmitServiceJob] = None, /, **fields: Any) -> JobOutlook:
        """DryRunServiceJob: the request as a SubmitServiceJob or as its fields (snake_case)."""
        return await self._call("DryRunServiceJob", request, fields)

    async def dry_run_update_quota_share(self, request: Optional[QuotaShare] = None, /, **fields: Any) -> QueueChangeOutlook:
        """DryRunUpdateQuotaShare: the request as a QuotaShare or as its fields (snake_case)."""
        return await self._call("DryRunUpdateQuotaShare", request, fields)

    async def explain_service_job(self, request: Optional[JobRef] = None, /, **fields: Any) -> JobOutlook:
        """ExplainServiceJob: the request as a JobRef or as its fields (snake_case)."""
        return await self._call("ExplainServiceJob", request, fields)

    async def get_job_queue_snapshot(self, request: Optional[QueueRef] = None, /, **fields: Any) -> JobQueueSnapshot:
        """GetJobQueueSnapshot: the request as a QueueRef or as its fields (snake_case)."""
        return await self._call("GetJobQueueSnapshot", request, fields)

    async def get_policy_stability_record(self, request: Optional[GetPolicyStabilityRecord] = None, /, **fields: Any) -> PolicyStabilityRecord:
        """GetPolicyStabilityRecord: the request as a GetPolicyStabilityRecord or as its fields (snake_case)."""
        return await self._call("GetPolicyStabilityRecord", request, fields)

    async def get_reclaim_exposure(self, request: Optional[GetReclaimExposure] = None, /, **fields: Any) -> ReclaimExposure:
        """GetReclaimExposure: the request as a GetReclaimExposure or as its fields (snake_case)."""
        return await self._call("GetReclaimExposure", request, fields)

    async def get_service_job_logs(self, request: Optional[GetServiceJobLogs] = None, /, **fields: Any) -> LogsResponse:
        """GetServiceJobLogs: the request as a GetServiceJobLogs or as its fields (snake_case)."""
        return await self._call("GetServiceJobLogs", request, fields)

    async def get_usage(self, request: Optional[GetUsage] = None, /, **fields: Any) -> UsageReport:
        """GetUsage: the request as a GetUsage or as its fields (snake_case)."""
        return await self._call("GetUsage", request, fields)

    async def list_audit_events(self, request: Optional[ListAuditEvents] = None, /, **fields: Any) -> ListAuditEventsResponse:
        """ListAuditEvents: the request as a ListAuditEvents or as its fields (snake_case)."""
        return await self._call("ListAuditEvents", request, fields)

    async def list_events(self, request: Optional[ListEvents] = None, /, **fields: Any) -> EventPage:
        """ListEvents: the request as a ListEvents or as its fields (snake_case)."""
        return await self._call("ListEvents", request, fields)

    async def list_job_queues(self, request: Optional[dict] = None, /, **fields: Any) -> JobQueueNames:
        """ListJobQueues: the request as a dict or as its fields (snake_case)."""
        return await self._call("ListJobQueues", request, fields)

    async def list_quota_shares(self, request: Optional[QueueRef] = None, /, **fields: Any) -> QuotaShareList:
        """ListQuotaShares: the request as a QueueRef or as its fields (snake_case)."""
        return await self._call("ListQuotaShares", request, fields)

    async def list_resume_drills(self, request: Optional[ListResumeDrills] = None, /, **fields: Any) -> ListResumeDrillsResponse:
        """ListResumeDrills: the request as a ListResumeDrills or as its fields (snake_case)."""
        return await self._call("ListResumeDrills", request, fields)

    async def list_service_jobs(self, request: Optional[ListServiceJobs] = None, /, **fields: Any) -> ListServiceJobsResponse:
        """ListServiceJobs: the request as a ListServiceJobs or as its fields (snake_case)."""
        return await self._call("ListServiceJobs", request, fields)

    async def list_tenancy_revisions(self, request: Optional[dict] = None, /, **fields: Any) -> ListTenancyRevisionsResponse:
        """ListTenancyRevisions: the request as a dict or as its fields (snake_case)."""
        return await self._call("ListTenancyRevisions", request, fields)

    async def register_executor(self, request: Optional[RegisterExecutor] = None, /, **fields: Any) -> dict:
        """RegisterExecutor: the request as a RegisterExecutor or as its fields (snake_case)."""
        return await self._call("RegisterExecutor", request, fields)

    async def start_resume_drill(self, request: Optional[StartResumeDrill] = None, /, **fields: Any) -> StartResumeDrillResponse:
        """StartResumeDrill: the request as a StartResumeDrill or as its fields (snake_case)."""
        return await self._call("StartResumeDrill", request, fields)

    async def submit_service_job(self, request: Optional[SubmitServiceJob] = None, /, **fields: Any) -> SubmitServiceJobResponse:
        """SubmitServiceJob: the request as a SubmitServiceJob or as its fields (snake_case)."""
        return await self._call("SubmitServiceJob", request, fields)

    async def terminate_service_job(self, request: Optional[TerminateServiceJob] = None, /, **fields: Any) -> ServiceJob:
        """TerminateServiceJob: the request as a TerminateServiceJob or as its fields (snake_case)."""
        return await self._call("TerminateServiceJob", request, fields)

    async def update_job_queue(self, request: Optional[dict] = None, /, **fields: Any) -> JobQueue:
        """UpdateJobQueue: the request as a dict or as its fields (snake_case)."""
        return await self._call("UpdateJobQueue", request, fields)

    async def update_quota_share(self, request: Optional[QuotaShare] = None, /, **fields: Any) -> QuotaShare:
        """UpdateQuotaShare: the request as a QuotaShare or as its fields (snake_case)."""
        return await self._call("UpdateQuotaShare", request, fields)

    async def update_service_job(self, request: Optional[UpdateServiceJob] = None, /, **fields: Any) -> ServiceJob:
        """UpdateServiceJob: the request as a UpdateServiceJob or as its fields (snake_case)."""
        return await self._call("UpdateServiceJob", request, fields)

    async def who_am_i(self, request: Optional[dict] = None, /, **fields: Any) -> Caller:
        """WhoAmI: the request as a dict or as its fields (snake_case)."""
        return await self._call("WhoAmI", request, fields)
