//! `ListAuditEvents`: every accepted write (submits, resume drills,
//! configuration changes, priority updates, terminates) with its principal
//! and time. The records
//! come from the log itself, so the audit trail is exactly what the
//! scheduler acted on, but are kept in a stream of their own (`QM_AUDIT`,
//! `auditRetentionDays`, default 400): admission copies each accepted write
//! from the log there ([`copy`], through the durable consumer
//! `qm-audit-copier`), and the scheduler truncates the log only behind
//! what that consumer has copied, so no record is lost to a truncation.
//! A team sees the writes to its own shares and the configuration changes
//! of the queues it has a share in; admins and readers see everything.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::stream::Stream;
use futures::StreamExt;
use qm_service::api;
use qm_wire::messages::{
    ApiError, AuditEvent, Caller, ErrorCode, ListAuditEvents, ListAuditEventsResponse,
};
use qm_wire::subjects;
use qm_wire::system::LogEntry;

fn transient(what: &str, e: impl std::fmt::Display) -> ApiError {
    api::error(ErrorCode::Transient, format!("{what}: {e}; try again"))
}

/// The audit event a log entry records, if it is an accepted write.
pub fn event(entry: LogEntry, at: u64, sequence: u64) -> Option<AuditEvent> {
    let event = match entry {
        LogEntry::Submit {
            job_id,
            job,
            principal,
        } => AuditEvent {
            at,
            principal: principal.unwrap_or_default(),
            operation: "SubmitServiceJob".into(),
            detail: format!(
                "submitted {:?} (priority {}, {} x {})",
                job.job_name,
                job.scheduling_priority.unwrap_or(0),
                job.instance_count.unwrap_or(1),
                job.instance_type
            ),
            job_queue: job.job_queue,
            quota_share_name: job.quota_share_name,
            job_id: Some(job_id),
            sequence,
        },
        LogEntry::Drill {
            drill_id,
            resumed_job_id,
            uninterrupted_job_id,
            job,
            principal,
            ..
        } => AuditEvent {
            at,
            principal: principal.unwrap_or_default(),
            operation: "StartResumeDrill".into(),
            detail: format!(
                "resume drill {drill_id} of {:?} (class {}, {} x {}): resumed {resumed_job_id}, uninterrupted {uninterrupted_job_id}",
                job.job_name,
                job.workload_class.as_deref().unwrap_or("default"),
                job.instance_count.unwrap_or(1),
                job.instance_type
            ),
            job_queue: job.job_queue,
            quota_share_name: job.quota_share_name,
            job_id: Some(resumed_job_id),
            sequence,
        },
        LogEntry::Config {
            queue,
            revision,
            principal,
            operation,
        } => AuditEvent {
            at,
            principal: principal.unwrap_or_default(),
            operation: operation.unwrap_or_else(|| "ApplyJobQueue".into()),
            detail: format!(
                "configuration revision {revision}: {} share(s) [{}]",
                queue.quota_shares.len(),
                queue
                    .quota_shares
                    .iter()
                    .map(|s| s.quota_share_name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            job_queue: queue.job_queue.job_queue_name,
            quota_share_name: None,
            job_id: None,
            sequence,
        },
        LogEntry::Priority {
            job_id,
            scheduling_priority,
            at: when,
            principal,
            job_queue,
            quota_share_name,
        } => AuditEvent {
            at: when,
            principal: principal.unwrap_or_default(),
            operation: "UpdateServiceJob".into(),
            detail: format!("schedulingPriority -> {scheduling_priority}"),
            job_queue: job_queue.unwrap_or_default(),
            quota_share_name,
            job_id: Some(job_id),
            sequence,
        },
        LogEntry::Terminate {
            job_id,
            reason,
            at: when,
            principal,
            job_queue,
            quota_share_name,
        } => AuditEvent {
            at: when,
            principal: principal.unwrap_or_default(),
            operation: "TerminateServiceJob".into(),
            detail: format!("terminated: {reason}"),
            job_queue: job_queue.unwrap_or_default(),
            quota_share_name,
            job_id: Some(job_id),
            sequence,
        },
        LogEntry::QueueDeleted {
            job_queue,
            revision,
            at: when,
            principal,
        } => AuditEvent {
            at: when,
            principal: principal.unwrap_or_default(),
            operation: "DeleteJobQueue".into(),
            detail: format!("deleted at configuration revision {revision}"),
            job_queue,
            quota_share_name: None,
            job_id: None,
            sequence,
        },
        _ => return None,
    };
    Some(event)
}

/// May `caller` see `e`?
pub fn visible(caller: &Caller, e: &AuditEvent) -> bool {
    if qm_tenancy::sees_all(caller) {
        return true;
    }
    match &e.quota_share_name {
        Some(share) => qm_tenancy::owns(caller, &e.job_queue, share),
        None => qm_tenancy::in_queue(caller, &e.job_queue),
    }
}

fn matches(req: &ListAuditEvents, e: &AuditEvent) -> bool {
    req.job_queue.as_deref().is_none_or(|q| q == e.job_queue)
        && req
            .quota_share_name
            .as_deref()
            .is_none_or(|s| e.quota_share_name.as_deref() == Some(s))
        && req.principal.as_deref().is_none_or(|p| p == e.principal)
        && req.since.is_none_or(|t| e.at >= t)
        && req.until.is_none_or(|t| e.at < t)
}

/// Copies every accepted write from the log to the audit stream, for as
/// long as admission runs (again after any failure). Replicas share the
/// work through one durable consumer; a record copied twice is stored once
/// (its message id is the log's sequence).
pub async fn copy(js: async_nats::jetstream::Context, log: Stream) {
    loop {
        if let Err(e) = copy_from(&js, &log).await {
            tracing::warn!(error = %e, "copying audit records paused; retrying");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn copy_from(
    js: &async_nats::jetstream::Context,
    log: &Stream,
) -> Result<(), async_nats::Error> {
    let consumer = log
        .get_or_create_consumer(
            subjects::AUDIT_COPIER,
            pull::Config {
                durable_name: Some(subjects::AUDIT_COPIER.into()),
                description: Some(
                    "admission copies accepted writes to QM_AUDIT; the log is truncated only behind it"
                        .into(),
                ),
                filter_subjects: audited_subjects(),
                deliver_policy: DeliverPolicy::All,
                ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await?;
    let mut messages = consumer.messages().await?;
    while let Some(msg) = messages.next().await {
        let msg = msg?;
        let info = msg.info()?;
        let (seq, at) = (
            info.stream_sequence,
            (info.published.unix_timestamp_nanos() / 1_000_000).max(0) as u64,
        );
        let record = serde_json::from_slice::<LogEntry>(&msg.payload)
            .ok()
            .and_then(|entry| event(entry, at, seq));
        if let Some(record) = record {
            let subject = subjects::audit_record(&record.job_queue)
                .unwrap_or_else(|_| format!("{}._", subjects::AUDIT_PREFIX));
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("audit-{seq}").as_str());
            let body = serde_json::to_vec(&record)?;
            js.publish_with_headers(subject, headers, body.into())
                .await?
                .await?;
        }
        msg.ack().await?;
    }
    Ok(())
}

/// The log subjects whose entries are audited.
fn audited_subjects() -> Vec<String> {
    let mut s = subjects::log_submits_and_configs().to_vec();
    s.push(subjects::LOG_SCHED.to_string());
    s
}

/// Waits (at most 2 s) until the copier has copied everything the log held
/// when this was called: a caller sees its own writes in `qm audit`.
async fn caught_up(log: &Stream) {
    // The log as it is now: the copier must have copied up to here (the
    // writes made before this request), not until the log stops growing,
    // which on a busy queue it never does.
    let mut log_now = log.clone();
    let Ok(target) = log_now.info().await.map(|i| i.state.last_sequence) else {
        return;
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < deadline {
        match log.consumer_info(subjects::AUDIT_COPIER).await {
            Ok(i) if i.ack_floor.stream_sequence >= target => return,
            Ok(i) if i.num_pending == 0 && i.num_ack_pending == 0 => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(_) => return,
        }
    }
}

/// The audit records, oldest first, from the audit stream.
pub async fn list(
    log: &Stream,
    audit: &Stream,
    caller: &Caller,
    req: ListAuditEvents,
) -> Result<ListAuditEventsResponse, ApiError> {
    let max = req.max_results.unwrap_or(100).clamp(1, 1000) as usize;
    let from: u64 = match &req.next_token {
        Some(t) => t.parse().map_err(|_| {
            api::error(
                ErrorCode::Invalid,
                format!("nextToken {t:?} is not one this API returned"),
            )
        })?,
        None => 1,
    };
    caught_up(log).await;
    let mut audit = audit.clone();
    let last = audit
        .info()
        .await
        .map_err(|e| transient("audit records unavailable", e))?
        .state
        .last_sequence;
    let mut out = ListAuditEventsResponse::default();
    if last < from {
        return Ok(out);
    }
    let consumer = audit
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: from,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| transient("audit records unavailable", e))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| transient("audit records unavailable", e))?;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(2), messages.next()).await;
        let Ok(Some(Ok(msg))) = next else {
            break; // nothing more matches (or the read failed: what we have)
        };
        let Ok(info) = msg.info() else { break };
        let (seq, pending) = (info.stream_sequence, info.pending);
        if let Ok(e) = serde_json::from_slice::<AuditEvent>(&msg.payload) {
            if visible(caller, &e) && matches(&req, &e) {
                out.audit_events.push(e);
                if out.audit_events.len() == max && pending > 0 {
                    out.next_token = Some((seq + 1).to_string());
                    break;
                }
            }
        }
        if pending == 0 || seq >= last {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_wire::messages::SubmitServiceJob;

    fn submit(share: &str, principal: &str) -> AuditEvent {
        let entry = LogEntry::Submit {
            job_id: "j-1".into(),
            job: SubmitServiceJob {
                job_name: "x".into(),
                job_queue: "training".into(),
                quota_share_name: Some(share.into()),
                instance_type: "ml.g5.xlarge".into(),
                ..Default::default()
            },
            principal: Some(principal.into()),
        };
        event(entry, 5, 7).expect("a submit is audited")
    }

    #[test]
    fn teams_see_their_own_shares_writes_only() {
        let alice = Caller {
            principal: "alice".into(),
            role: "TEAM".into(),
            team: Some("vision".into()),
            shares: vec!["training/QS1".into()],
        };
        assert!(visible(&alice, &submit("QS1", "alice")));
        assert!(!visible(&alice, &submit("QS2", "bob")));
        let reader = Caller {
            principal: "d".into(),
            role: "READER".into(),
            ..Caller::default()
        };
        assert!(visible(&reader, &submit("QS2", "bob")));
        let e = submit("QS1", "alice");
        assert_eq!(
            (e.at, e.sequence, e.operation.as_str()),
            (5, 7, "SubmitServiceJob")
        );
        let filter = ListAuditEvents {
            principal: Some("bob".into()),
            ..Default::default()
        };
        assert!(!matches(&filter, &e));
        assert!(matches(&ListAuditEvents::default(), &e));
    }

    #[test]
    fn a_drill_is_audited_as_its_starters_write_to_its_share() {
        let entry = LogEntry::Drill {
            drill_id: "d-1".into(),
            resumed_job_id: "j-a".into(),
            uninterrupted_job_id: "j-b".into(),
            job: SubmitServiceJob {
                job_name: "rc".into(),
                job_queue: "training".into(),
                quota_share_name: Some("QS1".into()),
                instance_type: "ml.g5.xlarge".into(),
                workload_class: Some("release".into()),
                ..Default::default()
            },
            seed: 3,
            principal: Some("alice".into()),
        };
        let e = event(entry, 9, 11).expect("a drill is audited");
        assert_eq!(
            (
                e.principal.as_str(),
                e.operation.as_str(),
                e.job_id.as_deref()
            ),
            ("alice", "StartResumeDrill", Some("j-a"))
        );
        assert_eq!(e.quota_share_name.as_deref(), Some("QS1"));
        assert!(
            e.detail.contains("d-1") && e.detail.contains("class release"),
            "{}",
            e.detail
        );
    }
}
