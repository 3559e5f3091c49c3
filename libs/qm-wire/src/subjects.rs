//! Every NATS subject of API v1, defined once. Tokens taken from user data
//! (queue, share and job names, executor ids) are checked to be single
//! subject tokens, so a name can never inject wildcards or extra levels.
//!
//! | subject | what |
//! |---|---|
//! | `qm.v1.api.<principal>.<Operation>` | request/reply API (`Operation` as in AWS: `SubmitServiceJob`, ...); the NATS server lets only `<principal>` publish there (ADR 0005) |
//! | `qm.v1.events.job.<queue>.<share>.<jobId>.<STATUS>` | a job's state change |
//! | `qm.v1.events.preemption.<queue>.<share>.<jobId>.<started\|completed>` | a preemption of the job |
//! | `qm.v1.events.checkpoint.<queue>.<share>.<jobId>` | a checkpoint committed |
//! | `qm.v1.events.frames` | the job and preemption events as stored (stream `QM_EVENTS`), many to a message |
//! | `qm.v1.exec.<executorId>.command` | start/stop commands to one executor |
//! | `qm.v1.exec.<executorId>.report` | attempt lifecycle reports from an executor |
//! | `qm.v1.exec.<executorId>.heartbeat` | executor heartbeats (request; the leader answers) |
//! | `qm.v1.exec.<executorId>.logs` | an attempt's stdout/stderr (request) |
//! | `qm.v1.ckpt.<node>.<restore\|track\|flush>` | a node's checkpoint service (request) |
//! | `qm.v1.sched.request` | admission -> scheduler leader: reads, updates, terminates (request) |
//! | `qm.v1.log.>` | the durable log (stream `QM_LOG`) the scheduler's state is built from: `submit.<queue>`, `config.<queue>` (admission), `register.<executorId>` (admission), `exec.<executorId>` (that executor), `checkpoint.<node>` (that node's checkpoint service), `sched` (the leader) |
//! | `_INBOX_<principal>.>` | replies to `<principal>`'s requests (its inbox prefix; nobody else may subscribe) |
//!
//! Useful wildcards: everything about a queue, `qm.v1.events.job.training.>`;
//! a share, `qm.v1.events.job.*.QS1.>`; one job, `qm.v1.events.*.*.*.<jobId>.>`
//! (jobs and preemptions) — job ids are unique across queues.

use std::fmt;

use crate::operations::operation_enum;

pub const API_PREFIX: &str = "qm.v1.api";
pub const JOB_EVENTS: &str = "qm.v1.events.job";
pub const PREEMPTION_EVENTS: &str = "qm.v1.events.preemption";
pub const CHECKPOINT_EVENTS: &str = "qm.v1.events.checkpoint";
pub const EXEC_PREFIX: &str = "qm.v1.exec";
pub const CKPT_PREFIX: &str = "qm.v1.ckpt";
pub const LOG_PREFIX: &str = "qm.v1.log";
/// Decisions of the scheduler leader; appends are fenced by sequence.
pub const LOG_SCHED: &str = "qm.v1.log.sched";
pub const SCHED_REQUEST: &str = "qm.v1.sched.request";
/// Every scheduler process answers requests on `<prefix>.<holder>` for as
/// long as it lives, so a standby learns at once that the leader's
/// connection is gone (NATS answers "no responders") instead of waiting out
/// the lease. Only schedulers may publish or subscribe here.
pub const SCHED_PRESENCE_PREFIX: &str = "qm.v1.sched.presence";

/// The presence subject of the scheduler whose lease holder name is
/// `holder`. Characters a subject token cannot hold become `_`: two holders
/// that map to one subject only make a standby wait out the lease (one of
/// them answers), never take it early.
pub fn sched_presence(holder: &str) -> String {
    let token: String = holder
        .bytes()
        .map(|b| if token_byte(b) { b as char } else { '_' })
        .collect();
    format!("{SCHED_PRESENCE_PREFIX}.{token}")
}

/// The JetStream stream holding `qm.v1.log.>`.
pub const LOG_STREAM: &str = "QM_LOG";
/// The JetStream stream keeping the events for late readers: the leader's
/// event frames ([`EVENT_FRAMES`]) and the checkpoint events.
pub const EVENTS_STREAM: &str = "QM_EVENTS";
/// KV bucket: one key `queue.<name>` per job queue (a `QueueDocument`).
pub const CONFIG_BUCKET: &str = "qm_config";
/// KV bucket: `clientToken` (hashed) -> job id.
pub const TOKENS_BUCKET: &str = "qm_client_tokens";
/// KV bucket: the scheduler leader's lease.
pub const LEADER_BUCKET: &str = "qm_leader";
/// The JetStream stream of finished jobs' records (`qm.v1.archive.>`),
/// one per job, kept for the archive's retention.
pub const ARCHIVE_STREAM: &str = "QM_ARCHIVE";
pub const ARCHIVE_PREFIX: &str = "qm.v1.archive";
/// The JetStream stream of audit records (`qm.v1.audit.<queue>`): every
/// accepted write, copied from the log by admission and kept for
/// `auditRetentionDays`, however the log is truncated.
pub const AUDIT_STREAM: &str = "QM_AUDIT";
pub const AUDIT_PREFIX: &str = "qm.v1.audit";
/// The durable consumer of the log through which admission copies
/// accepted writes to the audit stream; the scheduler truncates the log
/// only behind what it has copied.
pub const AUDIT_COPIER: &str = "qm-audit-copier";
/// KV bucket of the AWS Batch gateway: what AWS Batch keeps and
/// Quartermaster's API does not (tags, scheduling policies, service
/// environments, the payload a job was submitted with).
pub const GATEWAY_BUCKET: &str = "qm_gateway";
/// KV bucket of the gateway: per job, the AWS request it was submitted
/// with and its tags (kept as long as the gateway's `jobRecordDays`).
pub const GATEWAY_JOBS_BUCKET: &str = "qm_gateway_jobs";
/// The header in which the gateway names the principal whose signature it
/// verified; admission believes it only on a gateway principal's subject.
pub const CALLER_HEADER: &str = "Qm-Caller";
/// KV bucket: the tenancy in effect (key [`TENANCY_KEY`], a revision per
/// change, the last 64 kept), written only by admission (`qm tenancy
/// apply`), watched by admission, the gateway, the console and `qm tenancy
/// sync-nats`.
pub const TENANCY_BUCKET: &str = "qm_tenancy";
pub const TENANCY_KEY: &str = "current";
/// Object store: the scheduler leader's snapshots of its state.
pub const SNAPSHOT_BUCKET: &str = "qm_snapshots";

/// A user-supplied value that cannot be a subject token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadToken(pub String);

impl fmt::Display for BadToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} cannot be used in a subject (it must be 1-128 letters, digits, '-' or '_')",
            self.0
        )
    }
}

impl std::error::Error for BadToken {}

/// A byte a subject token may hold: a letter, a digit, `-` or `_`.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Checks that `value` is one safe subject token: the same rule as quota share
/// names, which also covers queue names, job ids and executor ids.
pub fn token(value: &str) -> Result<&str, BadToken> {
    let ok = !value.is_empty() && value.len() <= 128 && value.bytes().all(token_byte);
    if ok {
        Ok(value)
    } else {
        Err(BadToken(value.to_string()))
    }
}

crate::for_each_operation!(operation_enum);

impl Operation {
    /// The subject `principal` sends this operation on.
    pub fn subject(self, principal: &str) -> Result<String, BadToken> {
        Ok(format!(
            "{API_PREFIX}.{}.{}",
            token(principal)?,
            self.name()
        ))
    }

    /// The principal and operation a request subject names. The principal is
    /// authentic because the NATS server lets only it publish there.
    pub fn from_subject(subject: &str) -> Option<(String, Operation)> {
        let rest = subject.strip_prefix(API_PREFIX)?.strip_prefix('.')?;
        let (principal, name) = rest.split_once('.')?;
        token(principal).ok()?;
        let op = Operation::ALL.into_iter().find(|op| op.name() == name)?;
        Some((principal.to_string(), op))
    }
}

pub fn job_event(queue: &str, share: &str, job_id: &str, status: &str) -> Result<String, BadToken> {
    Ok(format!(
        "{JOB_EVENTS}.{}.{}.{}.{}",
        token(queue)?,
        token(share)?,
        token(job_id)?,
        token(status)?
    ))
}

/// `phase` is `started` or `completed`.
pub fn preemption_event(
    queue: &str,
    share: &str,
    job_id: &str,
    phase: &str,
) -> Result<String, BadToken> {
    Ok(format!(
        "{PREEMPTION_EVENTS}.{}.{}.{}.{}",
        token(queue)?,
        token(share)?,
        token(job_id)?,
        token(phase)?
    ))
}

pub fn checkpoint_event(queue: &str, share: &str, job_id: &str) -> Result<String, BadToken> {
    Ok(format!(
        "{CHECKPOINT_EVENTS}.{}.{}.{}",
        token(queue)?,
        token(share)?,
        token(job_id)?
    ))
}

/// The inbox prefix of `principal`'s connection: replies to its requests
/// arrive under `_INBOX_<principal>.`, which only it may subscribe to.
pub fn inbox_prefix(principal: &str) -> Result<String, BadToken> {
    Ok(format!("_INBOX_{}", token(principal)?))
}

pub fn executor_command(executor: &str) -> Result<String, BadToken> {
    Ok(format!("{EXEC_PREFIX}.{}.command", token(executor)?))
}

pub fn executor_report(executor: &str) -> Result<String, BadToken> {
    Ok(format!("{EXEC_PREFIX}.{}.report", token(executor)?))
}

pub fn executor_heartbeat(executor: &str) -> Result<String, BadToken> {
    Ok(format!("{EXEC_PREFIX}.{}.heartbeat", token(executor)?))
}

pub fn executor_logs(executor: &str) -> Result<String, BadToken> {
    Ok(format!("{EXEC_PREFIX}.{}.logs", token(executor)?))
}

/// `op` is `restore`, `track` or `flush`.
pub fn checkpoint_request(node: &str, op: &str) -> Result<String, BadToken> {
    Ok(format!("{CKPT_PREFIX}.{}.{}", token(node)?, token(op)?))
}

pub fn log_submit(queue: &str) -> Result<String, BadToken> {
    Ok(format!("{LOG_PREFIX}.submit.{}", token(queue)?))
}

pub fn log_config(queue: &str) -> Result<String, BadToken> {
    Ok(format!("{LOG_PREFIX}.config.{}", token(queue)?))
}

/// An executor's own reports (only that executor may publish here).
pub fn log_executor(executor: &str) -> Result<String, BadToken> {
    Ok(format!("{LOG_PREFIX}.exec.{}", token(executor)?))
}

/// An executor's registration, written by admission once it checked that
/// the caller may act as that executor.
pub fn log_register(executor: &str) -> Result<String, BadToken> {
    Ok(format!("{LOG_PREFIX}.register.{}", token(executor)?))
}

/// Checkpoint commits of one node's checkpoint service.
pub fn log_checkpoint(node: &str) -> Result<String, BadToken> {
    Ok(format!("{LOG_PREFIX}.checkpoint.{}", token(node)?))
}

// ----- wildcards (subscriptions and stream subjects) -------------------------

/// Every API request: `qm.v1.api.<principal>.<Operation>`.
pub fn all_api_requests() -> String {
    format!("{API_PREFIX}.*.*")
}

/// Every executor's heartbeat.
pub fn all_heartbeats() -> String {
    format!("{EXEC_PREFIX}.*.heartbeat")
}

/// Every job state change and every preemption event.
pub fn all_job_and_preemption_events() -> [String; 2] {
    [format!("{JOB_EVENTS}.>"), format!("{PREEMPTION_EVENTS}.>")]
}

/// Where a finished job's record is archived.
pub fn archived_job(queue: &str, share: &str, job_id: &str) -> Result<String, BadToken> {
    Ok(format!(
        "{ARCHIVE_PREFIX}.{}.{}.{}",
        token(queue)?,
        token(share)?,
        token(job_id)?
    ))
}

/// The archived record of one job, whatever its queue and share (job ids
/// are unique across queues).
pub fn archived(job_id: &str) -> Result<String, BadToken> {
    Ok(format!("{ARCHIVE_PREFIX}.*.*.{}", token(job_id)?))
}

/// The archived records of one queue and share (`*`: all its shares).
pub fn archive_of(queue: &str, share: &str) -> Result<String, BadToken> {
    let s = if share == "*" { share } else { token(share)? };
    Ok(format!("{ARCHIVE_PREFIX}.{}.{s}.*", token(queue)?))
}

/// The archive stream's subjects.
pub fn all_archived() -> String {
    format!("{ARCHIVE_PREFIX}.>")
}

/// Where the audit record of a write to `queue` is stored.
pub fn audit_record(queue: &str) -> Result<String, BadToken> {
    Ok(format!("{AUDIT_PREFIX}.{}", token(queue)?))
}

/// Every audit record (the `QM_AUDIT` stream's subjects).
pub fn all_audit() -> String {
    format!("{AUDIT_PREFIX}.>")
}

/// Where the scheduler leader stores its job and preemption events, many
/// to a message (an [`EventFrame`](crate::messages::EventFrame), in the
/// order they were produced). Each event is also published live, unstored,
/// on its own subject (`qm.v1.events.job.…`, `qm.v1.events.preemption.…`).
pub const EVENT_FRAMES: &str = "qm.v1.events.frames";

/// Every event as published live, each on its own subject (not the
/// stored frames).
pub fn live_events() -> [String; 3] {
    [
        format!("{JOB_EVENTS}.>"),
        format!("{PREEMPTION_EVENTS}.>"),
        format!("{CHECKPOINT_EVENTS}.>"),
    ]
}

/// What the `QM_EVENTS` stream stores: the leader's event frames and the
/// checkpoint services' events.
pub fn stored_events() -> Vec<String> {
    vec![EVENT_FRAMES.into(), format!("{CHECKPOINT_EVENTS}.>")]
}

/// Events of one queue and job (each may be `*`), of every kind and share.
pub fn events_of(queue: &str, job_id: &str) -> Result<String, BadToken> {
    let q = if queue == "*" { queue } else { token(queue)? };
    let j = if job_id == "*" {
        job_id
    } else {
        token(job_id)?
    };
    Ok(format!("qm.v1.events.*.{q}.*.{j}.>"))
}

/// Job and preemption events of one share (`*`: all of the queue's) and
/// job (`*`: all).
pub fn share_events(queue: &str, share: &str, job_id: &str) -> Result<[String; 2], BadToken> {
    let q = token(queue)?;
    let s = if share == "*" { share } else { token(share)? };
    let j = if job_id == "*" {
        job_id
    } else {
        token(job_id)?
    };
    Ok([
        format!("{JOB_EVENTS}.{q}.{s}.{j}.>"),
        format!("{PREEMPTION_EVENTS}.{q}.{s}.{j}.>"),
    ])
}

/// Every request to one node's checkpoint service.
pub fn checkpoint_requests(node: &str) -> Result<String, BadToken> {
    Ok(format!("{CKPT_PREFIX}.{}.*", token(node)?))
}

/// Every log subject (the `QM_LOG` stream's).
pub fn all_log() -> String {
    format!("{LOG_PREFIX}.>")
}

/// Every stored submit and every stored configuration change (the audit
/// log's writes).
pub fn log_submits_and_configs() -> [String; 2] {
    [
        format!("{LOG_PREFIX}.submit.>"),
        format!("{LOG_PREFIX}.config.>"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_presence_subject_is_one_token_whatever_the_holder() {
        assert_eq!(sched_presence("sched-1"), "qm.v1.sched.presence.sched-1");
        // A host name with dots (or a wildcard) cannot reach another
        // subject or match many.
        let s = sched_presence("gpu-7.example.com-42");
        assert_eq!(s, "qm.v1.sched.presence.gpu-7_example_com-42");
        let w = sched_presence("*.>");
        assert_eq!(w, "qm.v1.sched.presence.___");
    }

    #[test]
    fn operations_round_trip_through_their_subjects() {
        for op in Operation::ALL {
            let subject = op.subject("alice").expect("a token");
            assert_eq!(
                Operation::from_subject(&subject),
                Some(("alice".to_string(), op))
            );
        }
        assert_eq!(Operation::from_subject("qm.v1.api.alice.DropTables"), None);
        assert_eq!(Operation::from_subject("qm.v1.api.SubmitServiceJob"), None);
        assert_eq!(
            Operation::from_subject("qm.v2.api.alice.SubmitServiceJob"),
            None
        );
        assert!(Operation::SubmitServiceJob.subject("a.b").is_err());
        assert!(Operation::SubmitServiceJob.subject(">").is_err());
    }

    #[test]
    fn names_cannot_inject_wildcards_or_levels() {
        assert_eq!(
            job_event("training", "QS1", "job-7", "RUNNING").as_deref(),
            Ok("qm.v1.events.job.training.QS1.job-7.RUNNING")
        );
        for bad in ["a.b", "*", ">", "a b", "", "ünï"] {
            assert!(job_event(bad, "QS1", "j", "RUNNING").is_err(), "{bad}");
            assert!(executor_command(bad).is_err(), "{bad}");
        }
    }
}
