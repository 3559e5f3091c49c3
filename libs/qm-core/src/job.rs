//! Jobs, their attempts, and the job state machine.
//!
//! ```text
//! SUBMITTED -> RUNNABLE -> SCHEDULED -> STARTING -> RUNNING -> SUCCEEDED | FAILED
//!                 ^            |            |           |
//!                 +------------+------------+-----------+  preempted, host lost,
//!                                                          or failed with retries left
//! ```
//!
//! * SCHEDULED: instances are assigned. STARTING: the executor restores the
//!   latest checkpoint and launches the process. RUNNING: the process is up.
//! * A job in SCHEDULED, STARTING or RUNNING may be asked to stop (preemption,
//!   timeout, cancel). It keeps its state, with a statusReason saying so, until
//!   the executor reports the attempt ended; then it goes back to RUNNABLE or
//!   ends in FAILED.
//! * Preemptions spend `preemptionRetriesBeforeTermination`, failures spend
//!   `retryStrategy.attempts`, host losses spend neither (up to a system cap).

use std::fmt;

use crate::ids::{JobId, ShareIdx, TypeIdx};
pub use crate::outcome::{
    AttemptOutcome, PreemptionKind, DEFAULT_GRACE_PERIOD_SECS, MAX_GRACE_PERIOD_SECS,
};
use crate::reason::StatusReason;
use crate::time::Time;

/// The longest `checkpointBeforePreemptSeconds` (job or queue default): a
/// beneficiary waits this long plus the victim's grace at most.
pub const MAX_CHECKPOINT_BEFORE_PREEMPT_SECS: u64 = 3_600;

/// A job's status.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum JobStatus {
    Submitted,
    Runnable,
    Scheduled,
    Starting,
    Running,
    Succeeded,
    Failed,
}

impl JobStatus {
    /// Every status, in the order a job moves through them.
    pub const ALL: [JobStatus; 7] = [
        JobStatus::Submitted,
        JobStatus::Runnable,
        JobStatus::Scheduled,
        JobStatus::Starting,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
    ];

    /// The status named `name` (as [`JobStatus::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Submitted => "SUBMITTED",
            JobStatus::Runnable => "RUNNABLE",
            JobStatus::Scheduled => "SCHEDULED",
            JobStatus::Starting => "STARTING",
            JobStatus::Running => "RUNNING",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
        }
    }

    /// SCHEDULED, STARTING or RUNNING: the job holds instances.
    pub fn holds_instances(self) -> bool {
        matches!(
            self,
            JobStatus::Scheduled | JobStatus::Starting | JobStatus::Running
        )
    }

    pub fn is_final(self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed)
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do when an attempt fails and a rule matches (`evaluateOnExit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RetryAction {
    Retry,
    Exit,
}

/// One `evaluateOnExit` rule. Patterns may end in `*` (prefix match), as in AWS
/// Batch; a rule with no pattern matches everything.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExitRule {
    pub on_exit_code: Option<String>,
    pub on_status_reason: Option<String>,
    pub action: RetryAction,
}

fn glob_matches(pattern: &str, value: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix),
        None => pattern == value,
    }
}

impl ExitRule {
    pub fn matches(&self, exit_code: Option<i32>, status_reason: &str) -> bool {
        let code_ok = self
            .on_exit_code
            .as_deref()
            .is_none_or(|p| exit_code.is_some_and(|code| glob_matches(p, &code.to_string())));
        let reason_ok = self
            .on_status_reason
            .as_deref()
            .is_none_or(|p| glob_matches(p, status_reason));
        code_ok && reason_ok
    }
}

/// What a user submits, in core terms (names resolved to ordinals).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub share: ShareIdx,
    pub instance_type: TypeIdx,
    /// `instanceCount` >= 1; all or nothing.
    pub count: u32,
    /// `schedulingPriority` 0..=9999, higher first.
    pub priority: u32,
    /// `preemptionRetriesBeforeTermination`: None = unlimited, 0 = fail at the
    /// first preemption.
    pub preemption_retries: Option<u32>,
    /// `retryStrategy.attempts` 1..=10: attempts allowed for failures.
    pub retry_attempts: u32,
    pub evaluate_on_exit: Vec<ExitRule>,
    /// `timeoutConfig.attemptDurationSeconds`.
    pub attempt_timeout_secs: Option<u64>,
    /// `estimatedRuntimeSeconds`: how long one attempt is expected to run
    /// (a borrowing budget holds this back; None: `attempt_timeout_secs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_runtime_secs: Option<u64>,
    /// `terminationGracePeriodSeconds` (default 120).
    pub grace_period_secs: u64,
    /// Whether the job checkpoints (has a `checkpointConfig`). Gates borrowing
    /// in shares with `borrowRequiresCheckpoint`.
    pub checkpoints: bool,
    /// `checkpointConfig.checkpointBeforePreemptSeconds`: when preempted
    /// while running, the job is first asked to checkpoint and stopped once
    /// a checkpoint committed after the request, or after this long (0:
    /// stopped at once). None: the queue's default.
    #[serde(default)]
    pub checkpoint_before_preempt_secs: Option<u64>,
    /// How it is launched: `container` when it names an image. Placed only
    /// on nodes offering it (`policy::runtimes`).
    #[serde(default)]
    pub runtime: crate::Runtime,
    /// Its workload class (`policy::classes`); None: the share's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// What it runs, as resume drills name it (`image:<reference>` or
    /// `command:<sha256>`): a class that borrows only with a resume proof
    /// looks for a passed drill of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
    /// Set on the two jobs of a resume drill (`policy::drills`): they run on
    /// their share's own capacity and never count as real work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<crate::policy::drills::DrillRole>,
}

impl JobSpec {
    /// How long one attempt is expected to run: its estimate, else its
    /// attempt timeout (what a borrowing budget holds back for it).
    pub fn expected_runtime_secs(&self) -> Option<u64> {
        self.estimated_runtime_secs.or(self.attempt_timeout_secs)
    }

    /// A spec with the API's defaults.
    pub fn new(
        name: impl Into<String>,
        share: ShareIdx,
        instance_type: TypeIdx,
        count: u32,
    ) -> Self {
        JobSpec {
            name: name.into(),
            share,
            instance_type,
            count,
            priority: 0,
            preemption_retries: None,
            retry_attempts: 1,
            evaluate_on_exit: Vec::new(),
            attempt_timeout_secs: None,
            estimated_runtime_secs: None,
            grace_period_secs: DEFAULT_GRACE_PERIOD_SECS,
            checkpoints: false,
            checkpoint_before_preempt_secs: None,
            runtime: crate::Runtime::Process,
            class: None,
            artifact: None,
            drill: None,
        }
    }
}

/// A committed checkpoint, as the checkpoint service announces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointMark {
    pub at: Time,
    pub step: u64,
}

/// One try at running a job.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Attempt {
    /// 1-based.
    pub number: u32,
    pub scheduled_at: Time,
    pub started_at: Option<Time>,
    pub running_at: Option<Time>,
    pub stopped_at: Option<Time>,
    pub exit_code: Option<i32>,
    pub outcome: Option<AttemptOutcome>,
    /// The checkpoint this attempt restored before it started.
    pub restored: Option<CheckpointMark>,
    /// The last checkpoint this attempt committed.
    pub last_checkpoint: Option<CheckpointMark>,
    /// Where it runs (ran): one rank per node.
    pub placement: crate::nodes::Ranks,
    /// What each rank has reported (index = rank).
    pub ranks: crate::nodes::RankStates,
    /// The first rank that ended without exiting 0, if one did.
    pub first_failure: Option<crate::nodes::RankFailure>,
    /// The job this attempt was preempted for (the lost-work ledger).
    #[serde(default)]
    pub preempted_for: Option<JobId>,
    /// Bytes its ranks' restores moved (every rank restores).
    #[serde(default)]
    pub restored_bytes: u64,
    /// Newer checkpoints its restore skipped, with why (damaged or
    /// incomplete): the restore fell back to an older one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restore_skipped: Vec<String>,
    /// Since when its checkpoints are not uploaded, and why (cleared by the
    /// next commit). Informational: scheduling does not look at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_lag: Option<(Time, String)>,
    /// What the attempt's process declared as its result
    /// (`$QM_RESULT_FILE`), for resume drills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// What a rank reports of its restore as it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restore {
    /// The checkpoint restored (None: there was none).
    pub mark: Option<CheckpointMark>,
    /// Bytes moved.
    pub bytes: u64,
    /// Newer checkpoints skipped, with why.
    pub skipped: Vec<String>,
}

impl From<Option<CheckpointMark>> for Restore {
    fn from(mark: Option<CheckpointMark>) -> Restore {
        Restore {
            mark,
            ..Restore::default()
        }
    }
}

/// A preempted job asked to checkpoint before it is stopped
/// (checkpoint-then-preempt): its stop waits for a checkpoint committed at
/// or after `asked_at`, or until `until`, whichever comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointFirst {
    pub asked_at: Time,
    pub until: Time,
}

/// A stop the scheduler asked for and the executor has not yet confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StopCause {
    Preempted {
        kind: PreemptionKind,
        for_job: JobId,
    },
    TimedOut,
    Cancelled,
    /// A resume drill stops its subject once (`policy::drills`).
    Drill,
}

/// A job as the core keeps it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub status: JobStatus,
    pub status_reason: StatusReason,
    pub submitted_at: Time,
    /// When the job last became RUNNABLE: its place in line among equal priorities.
    pub runnable_since: Time,
    pub attempts: Vec<Attempt>,
    pub preempted_attempts: u32,
    /// Of those, stops that spend no preemption retry (a budget stop, a
    /// rebalancing move).
    #[serde(default, skip_serializing_if = "crate::config::is_default")]
    pub free_preemptions: u32,
    pub failed_attempts: u32,
    pub host_lost_attempts: u32,
    /// Set while a stop is in progress.
    pub stopping: Option<StopCause>,
    /// The last committed checkpoint of any attempt (what the next one restores).
    pub last_checkpoint: Option<CheckpointMark>,
    /// When it became SUCCEEDED or FAILED.
    #[serde(default)]
    pub finished_at: Option<Time>,
    /// Preempted, and asked to checkpoint before it is stopped: the stop
    /// itself waits (see [`CheckpointFirst`]).
    #[serde(default)]
    pub checkpoint_first: Option<CheckpointFirst>,
    /// Why it may not run on borrowed capacity, if it may not (kept up to
    /// date as the configuration and resume proofs change; the indexes
    /// file it by this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_bar: Option<crate::policy::classes::BorrowBar>,
}

impl Job {
    /// A job submitted at `now`: SUBMITTED, with no attempt yet.
    pub fn new(id: JobId, spec: JobSpec, now: Time) -> Job {
        Job {
            id,
            spec,
            status: JobStatus::Submitted,
            status_reason: StatusReason::None,
            submitted_at: now,
            runnable_since: now,
            attempts: Vec::new(),
            preempted_attempts: 0,
            free_preemptions: 0,
            failed_attempts: 0,
            host_lost_attempts: 0,
            stopping: None,
            last_checkpoint: None,
            finished_at: None,
            checkpoint_first: None,
            borrow_bar: None,
        }
    }

    pub fn current_attempt(&self) -> Option<&Attempt> {
        self.attempts.last().filter(|a| a.outcome.is_none())
    }

    /// When the current attempt got its instances.
    pub fn started_at(&self) -> Option<Time> {
        self.current_attempt().map(|a| a.scheduled_at)
    }

    /// Milliseconds of work the current attempt would lose if stopped now: time
    /// since its last committed checkpoint, or since it started if it has none.
    pub fn work_at_risk(&self, now: Time) -> u64 {
        match self.current_attempt() {
            Some(attempt) => {
                let since = attempt
                    .last_checkpoint
                    .map(|c| c.at)
                    .or(attempt.running_at)
                    .unwrap_or(attempt.scheduled_at);
                now.millis_since(since)
            }
            None => 0,
        }
    }

    /// Milliseconds of work attempt `number` threw away, per instance: for
    /// an attempt that ended preempted or with its host lost, the time from
    /// its last committed checkpoint (or from when it began running, if it
    /// committed none) to its stop, which the next attempt must compute
    /// again. None for an attempt that has not ended or ended otherwise.
    pub fn lost_work_ms(&self, number: u32) -> Option<u64> {
        let a = self.attempts.iter().find(|a| a.number == number)?;
        let lost = a
            .outcome
            .is_some_and(|o| o.is_preemption() || o == AttemptOutcome::HostLost);
        if !lost {
            return None;
        }
        let since = a
            .last_checkpoint
            .map(|c| c.at)
            .or(a.running_at)
            .unwrap_or(a.scheduled_at);
        Some(a.stopped_at?.millis_since(since))
    }

    /// The most recent preempted attempts (newest last), as AWS's
    /// `preemptionSummary.recentPreemptedAttempts` (at most 5).
    pub fn recent_preempted_attempts(&self) -> Vec<&Attempt> {
        let mut recent: Vec<&Attempt> = self
            .attempts
            .iter()
            .filter(|a| a.outcome.is_some_and(AttemptOutcome::is_preemption))
            .collect();
        let keep_from = recent.len().saturating_sub(5);
        recent.drain(..keep_from);
        recent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(number: u32, outcome: Option<AttemptOutcome>) -> Attempt {
        Attempt {
            number,
            scheduled_at: Time(1_000),
            started_at: Some(Time(2_000)),
            running_at: Some(Time(3_000)),
            stopped_at: outcome.map(|_| Time(10_000)),
            exit_code: None,
            outcome,
            restored: None,
            last_checkpoint: None,
            placement: Default::default(),
            ranks: Default::default(),
            first_failure: None,
            preempted_for: None,
            restored_bytes: 0,
            restore_skipped: Vec::new(),
            checkpoint_lag: None,
            result: None,
        }
    }

    #[test]
    fn every_status_is_found_by_its_name() {
        for s in JobStatus::ALL {
            assert_eq!(JobStatus::from_name(s.as_str()), Some(s));
        }
        assert_eq!(JobStatus::from_name("running"), None);
    }

    #[test]
    fn lost_work_runs_from_the_last_checkpoint_or_the_start_to_the_stop() {
        let mut job = Job {
            id: JobId(1),
            spec: JobSpec::new("j", crate::ShareIdx(0), crate::TypeIdx(0), 2),
            status: JobStatus::Runnable,
            status_reason: Default::default(),
            submitted_at: Time(0),
            runnable_since: Time(0),
            attempts: vec![
                attempt(1, Some(AttemptOutcome::PreemptedCrossShare)),
                attempt(2, Some(AttemptOutcome::HostLost)),
                attempt(3, Some(AttemptOutcome::Failed)),
                attempt(4, None),
            ],
            preempted_attempts: 1,
            free_preemptions: 0,
            failed_attempts: 1,
            host_lost_attempts: 1,
            stopping: None,
            last_checkpoint: None,
            finished_at: None,
            checkpoint_first: None,
            borrow_bar: None,
        };
        // No checkpoint: all work since it began running is lost.
        assert_eq!(job.lost_work_ms(1), Some(7_000));
        job.attempts[1].last_checkpoint = Some(CheckpointMark {
            at: Time(8_500),
            step: 40,
        });
        assert_eq!(job.lost_work_ms(2), Some(1_500));
        // A failure is not lost to the system; a running attempt has lost nothing yet.
        assert_eq!(job.lost_work_ms(3), None);
        assert_eq!(job.lost_work_ms(4), None);
        assert_eq!(job.lost_work_ms(9), None);
    }

    #[test]
    fn exit_rules_match_codes_and_reasons_with_prefix_globs() {
        let rule = ExitRule {
            on_exit_code: Some("13*".into()),
            on_status_reason: None,
            action: RetryAction::Exit,
        };
        assert!(rule.matches(Some(137), "x"));
        assert!(!rule.matches(Some(1), "x"));
        assert!(!rule.matches(None, "x"));
        let rule = ExitRule {
            on_exit_code: None,
            on_status_reason: Some("Host*".into()),
            action: RetryAction::Retry,
        };
        assert!(rule.matches(None, "Host EC2 terminated"));
        assert!(!rule.matches(None, "OOM"));
    }
}
