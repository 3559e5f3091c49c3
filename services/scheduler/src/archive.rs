//! The archive of finished jobs: once a job has been finished for
//! `finishedRetentionSeconds`, the leader stores its record (what
//! `DescribeServiceJob` shows, attempts included) on the `QM_ARCHIVE`
//! stream, one subject per job (`qm.v1.archive.<queue>.<share>.<jobId>`,
//! one message each), then appends an `Archive` decision and the job leaves
//! its state. The stream's `max_age` (admission's `archiveRetentionSeconds`)
//! is how long the record stays; after that the job is not found, and the
//! error says how long archived jobs are kept.
//!
//! Reads of the archive run beside the leader's loop (a task per request),
//! never in it.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use futures::StreamExt;
use qm_service::api;
use qm_tenancy::{authorize, Action};
use qm_wire::messages::{ApiError, Caller, ErrorCode, ListServiceJobs, ServiceJob};
use qm_wire::subjects;

/// How long archived jobs are kept, as users read it ("7 days").
pub fn kept_for(age: Duration) -> String {
    let s = age.as_secs();
    let (n, unit) = match s {
        0 => return "until the archive is full".into(),
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// The error for a job neither the state nor the archive holds.
pub fn not_found(job_id: &str, kept: Duration) -> ApiError {
    api::error(
        ErrorCode::NotFound,
        format!(
            "job {job_id:?} not found (archived jobs are kept {})",
            kept_for(kept)
        ),
    )
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    api::error(
        ErrorCode::Transient,
        format!("the archive of finished jobs cannot be read now: {e}; try again"),
    )
}

/// The archived record of `job_id` (None: not archived, or aged out).
pub async fn describe(archive: &Stream, job_id: &str) -> Result<Option<ServiceJob>, ApiError> {
    let Ok(subject) = subjects::archived(job_id) else {
        return Ok(None); // not a job id any job could have
    };
    match archive.get_last_raw_message_by_subject(&subject).await {
        Ok(msg) => serde_json::from_slice(&msg.payload)
            .map(Some)
            .map_err(|e| unavailable(format!("a damaged record: {e}"))),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(unavailable(e)),
    }
}

/// Where a listing continues in the archive: `archive:<sequence>`.
pub const TOKEN_PREFIX: &str = "archive:";

/// One page of archived jobs of a listing (its queue, share and status
/// filters; only the shares `caller` may read) from stream sequence
/// `from`, at most `max`. Returns the page and the sequence the next page
/// starts at (None: the archive has no more).
pub async fn list(
    archive: &Stream,
    caller: &Caller,
    l: &ListServiceJobs,
    from: u64,
    max: usize,
) -> Result<(Vec<ServiceJob>, Option<u64>), ApiError> {
    let filter = subjects::archive_of(&l.job_queue, l.quota_share_name.as_deref().unwrap_or("*"))
        .map_err(|e| api::error(ErrorCode::Invalid, e.to_string()))?;
    let consumer = archive
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: from.max(1),
            },
            filter_subject: filter,
            ..Default::default()
        })
        .await
        .map_err(unavailable)?;
    let mut consumer = consumer;
    let mut pending = consumer.info().await.map_err(unavailable)?.num_pending;
    let mut messages = consumer.messages().await.map_err(unavailable)?;
    let mut page = Vec::new();
    while pending > 0 {
        let msg = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .map_err(|_| unavailable("no record arrived in 5 s"))?
            .ok_or_else(|| unavailable("the archive consumer ended"))?
            .map_err(unavailable)?;
        pending -= 1;
        let seq = msg.info().map_err(unavailable)?.stream_sequence;
        if page.len() == max {
            return Ok((page, Some(seq)));
        }
        let Ok(job) = serde_json::from_slice::<ServiceJob>(&msg.payload) else {
            tracing::warn!(seq, "unreadable archive record skipped");
            continue;
        };
        let readable = authorize(
            caller,
            Action::ReadJob {
                queue: &job.job_queue,
                share: &job.quota_share_name,
            },
        )
        .is_ok();
        if readable && l.job_status.as_deref().is_none_or(|s| s == job.status) {
            page.push(job);
        }
    }
    Ok((page, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_as_people_say_it() {
        assert_eq!(kept_for(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(kept_for(Duration::from_secs(86_400)), "1 day");
        assert_eq!(kept_for(Duration::from_secs(7_200)), "2 hours");
        assert_eq!(kept_for(Duration::from_secs(90)), "90 seconds");
        assert_eq!(kept_for(Duration::from_secs(120)), "2 minutes");
        let e = not_found("j-1", Duration::from_secs(3 * 86_400));
        assert!(
            e.message
                .contains("\"j-1\" not found (archived jobs are kept 3 days)"),
            "{}",
            e.message
        );
    }
}
