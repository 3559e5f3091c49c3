//! Tracked attempts: their checkpoint directory committed when it changed,
//! and a commit that keeps failing reported to the scheduler as lag.

use std::sync::Arc;
use std::time::Duration;

use qm_checkpoint::s3::S3Store;
use qm_checkpoint::sync::{self, CommitInfo};
use qm_service::{nats, now_ms};
use qm_wire::messages::{ApiError, ErrorCode};
use qm_wire::subjects;
use qm_wire::system::{CheckpointCommit, CheckpointReply, CheckpointRequest, LogEntry};

use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::{failed, JobSync, Service, Target};

impl Service {
    pub(crate) async fn track(
        self: &Arc<Self>,
        req: CheckpointRequest,
    ) -> Result<CheckpointReply, ApiError> {
        self.target(&req).await?;
        let ended = self
            .flushed
            .lock()
            .is_ok_and(|f| f.contains_key(&(req.job_id.clone(), req.attempt)));
        if ended {
            // Its end was flushed already: nothing more to track.
            return Ok(CheckpointReply::default());
        }
        let job = self.job(&req.job_id).await;
        let mut j = job.lock().await;
        if matches!(&j.tracking, Some((r, t)) if r.attempt == req.attempt && !t.is_finished()) {
            return Ok(CheckpointReply {
                checkpoint: j.last.clone(),
                skipped: vec![],
                ..CheckpointReply::default()
            });
        }
        if let Some((_, t)) = j.tracking.take() {
            t.abort();
        }
        let me = Arc::clone(self);
        let job2 = Arc::clone(&job);
        let interval = Duration::from_millis(self.settings.scan_interval_ms);
        let request = req.clone();
        let parent = tracing::Span::current().context();
        let task = tokio::spawn(async move {
            // Failing commits: since when, and what was last reported.
            let mut lag: Option<Lag> = None;
            loop {
                tokio::time::sleep(interval).await;
                let mut j = job2.lock().await;
                match me.sync_once(&request, &mut j, &parent).await {
                    Ok(()) => lag = None,
                    // A later attempt committed: this one is a stale copy,
                    // and every further commit would be refused too.
                    Err(e) if e.code == ErrorCode::Conflict => {
                        tracing::warn!(job = %request.job_id, attempt = request.attempt, error = %e.message, "tracking stopped");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(job = %request.job_id, error = %e.message, "sync failed; retrying");
                        drop(j);
                        let l = lag.get_or_insert_with(|| Lag {
                            since: now_ms(),
                            reported: None,
                        });
                        if l.due(&e.message) {
                            me.report_lag(&request, l.since, &e.message).await;
                            l.reported = Some((e.message, std::time::Instant::now()));
                        }
                    }
                }
            }
        });
        j.tracking = Some((req, task));
        Ok(CheckpointReply {
            checkpoint: j.last.clone(),
            skipped: vec![],
            ..CheckpointReply::default()
        })
    }

    /// Commits the directory if it changed since the last commit.
    /// `parent`: the trace context the commit's span continues (the
    /// request's own; for a tracker's commits, the `track` request's; an
    /// empty context leaves the span under the current one).
    pub(crate) async fn sync_once(
        &self,
        req: &CheckpointRequest,
        j: &mut JobSync,
        parent: &opentelemetry::Context,
    ) -> Result<(), ApiError> {
        let target = self.target(req).await?;
        let print =
            sync::fingerprint(&target.dir).map_err(|e| failed("cannot read the directory", e))?;
        if print.is_empty() || j.committed.as_ref() == Some(&print) {
            return Ok(());
        }
        let span = tracing::info_span!(
            "commit",
            otel.name = "commit checkpoint",
            otel.status_code = tracing::field::Empty,
            qm.job_id = %req.job_id,
            qm.queue = %req.job_queue,
            qm.share = %req.quota_share_name,
            qm.attempt = req.attempt,
            qm.checkpoint.seq = tracing::field::Empty,
            qm.checkpoint.bytes = tracing::field::Empty,
        );
        qm_service::trace::follow(&span, parent.clone());
        let started = std::time::Instant::now();
        let result = self
            .commit(req, j, print, target)
            .instrument(span.clone())
            .await;
        let m = &crate::observe::METRICS;
        let label = match &result {
            Ok(_) => "committed",
            Err(e) if e.code == ErrorCode::Conflict => "refused",
            Err(_) => "failed",
        };
        if result.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        m.commits.with_label_values(&[label]).inc();
        m.commit
            .with_label_values(&[label])
            .observe(started.elapsed().as_secs_f64());
        result
    }

    async fn commit(
        &self,
        req: &CheckpointRequest,
        j: &mut JobSync,
        print: qm_checkpoint::Fingerprint,
        target: Target,
    ) -> Result<(), ApiError> {
        let Target { dir, store, prefix } = target;
        // A file rewritten mid-upload: nothing was committed; try again soon
        // (a workload that checkpoints often must not starve its commits).
        // The number another writer took first: list again, next number.
        let mut tries = 0;
        let manifest = loop {
            let seqs = sync::manifest_seqs(&store, &prefix)
                .await
                .map_err(|e| failed("cannot list checkpoints", e))?;
            let info = CommitInfo {
                seq: seqs.iter().max().map_or(1, |s| s + 1),
                attempt: req.attempt,
                job_id: Some(req.job_id.clone()),
                epoch: req.epoch,
                step: None, // read from qm-checkpoint.json within the snapshot
                created_at_ms: now_ms(),
            };
            match sync::commit(&store, &prefix, &dir, info, &mut j.uploaded).await {
                Ok(m) => break m,
                Err(e @ (sync::SyncError::Changed(_) | sync::SyncError::Taken { .. }))
                    if tries < 10 =>
                {
                    tries += 1;
                    tracing::debug!(job = %req.job_id, error = %e, "commit again");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e @ sync::SyncError::Superseded { .. }) => {
                    tracing::warn!(job = %req.job_id, attempt = req.attempt, error = %e, "commit refused: a later attempt has committed");
                    return Err(failed("commit refused", e));
                }
                Err(e) => return Err(failed("commit failed", e)),
            }
        };
        j.committed = Some(print);
        let commit = CheckpointCommit {
            job_queue: req.job_queue.clone(),
            job_id: req.job_id.clone(),
            attempt: req.attempt,
            seq: manifest.seq,
            step: manifest.step,
            created_at: manifest.created_at_ms,
            // The scheduler takes it from the subject this is stored on.
            node: None,
        };
        let bytes: u64 = manifest.files.iter().map(|f| f.size).sum();
        let current = tracing::Span::current();
        current.record("qm.checkpoint.seq", commit.seq);
        current.record("qm.checkpoint.bytes", bytes);
        crate::observe::METRICS
            .bytes
            .with_label_values(&["committed"])
            .inc_by(bytes);
        tracing::info!(job = %req.job_id, attempt = req.attempt, seq = commit.seq, step = ?commit.step, files = manifest.files.len(), "checkpoint committed");
        j.last = Some(commit.clone());
        if let Ok(body) = serde_json::to_vec(&LogEntry::Checkpoint(commit.clone())) {
            if let Ok(subject) = subjects::log_checkpoint(&self.settings.node) {
                nats::append_durably(
                    &self.js,
                    subject,
                    body.into(),
                    Some(format!("ckpt-{}-{}", req.job_id, commit.seq)),
                )
                .await;
            }
        }
        if let (Ok(body), Ok(subject)) = (
            serde_json::to_vec(&commit),
            subjects::checkpoint_event(&req.job_queue, &req.quota_share_name, &req.job_id),
        ) {
            // Stored in QM_EVENTS (acknowledged, retried through an outage,
            // stored once): integrations read every commit from there.
            nats::append_durably(
                &self.js,
                subject,
                body.into(),
                Some(format!("ckpt-event-{}-{}", req.job_id, commit.seq)),
            )
            .await;
        }
        let orphans_before = now_ms().saturating_sub(sync::ORPHAN_GRACE.as_millis() as u64);
        if let Err(e) = sync::retain(&store, &prefix, self.settings.keep, orphans_before).await {
            tracing::warn!(job = %req.job_id, error = %e, "retention failed");
        }
        Ok(())
    }

    /// Tells the scheduler (through the log) that the attempt's checkpoints
    /// are not being uploaded since `since`, and why: `qm describe` shows
    /// the lag until the next commit ends it.
    async fn report_lag(&self, req: &CheckpointRequest, since: u64, error: &str) {
        let entry = LogEntry::CheckpointLagging(qm_wire::system::CheckpointLag {
            job_queue: req.job_queue.clone(),
            job_id: req.job_id.clone(),
            attempt: req.attempt,
            since,
            error: error.to_string(),
            // The scheduler takes it from the subject.
            node: None,
        });
        if let (Ok(body), Ok(subject)) = (
            serde_json::to_vec(&entry),
            subjects::log_checkpoint(&self.settings.node),
        ) {
            nats::append_durably(&self.js, subject, body.into(), None).await;
        }
    }
}

/// Aborts, in the background, the multipart uploads to `store`'s bucket
/// that this node's journal says a crash left in flight (their parts would
/// otherwise take space until the bucket's own lifecycle rules, if any,
/// removed them).
pub(crate) fn abort_journaled(store: S3Store) {
    tokio::spawn(async move {
        match store.abort_journaled().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                bucket = store.bucket(),
                uploads = n,
                "aborted uploads a crash left in flight"
            ),
            Err(e) => {
                tracing::warn!(bucket = store.bucket(), error = %e, "cannot abort uploads a crash left in flight; the journal keeps them for the next start")
            }
        }
    });
}

/// A tracked attempt whose commits fail: since when, and the error last
/// reported to the scheduler with when.
struct Lag {
    since: u64,
    reported: Option<(String, std::time::Instant)>,
}

impl Lag {
    /// Reported at the first failure, and again when the error changes,
    /// at most once a minute: the log is not flooded while S3 is away.
    fn due(&self, error: &str) -> bool {
        match &self.reported {
            None => true,
            Some((last, at)) => last != error && at.elapsed() >= Duration::from_secs(60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lag_is_reported_at_once_then_only_for_a_new_error_a_minute_later() {
        let ago = |secs| {
            std::time::Instant::now()
                .checked_sub(Duration::from_secs(secs))
                .expect("the clock is past that")
        };
        let lag = |reported| Lag { since: 0, reported };
        assert!(lag(None).due("timed out"), "the first failure");
        let just = lag(Some(("timed out".to_string(), ago(0))));
        assert!(!just.due("timed out"));
        assert!(!just.due("connection refused"), "not twice in a minute");
        let minute = lag(Some(("timed out".to_string(), ago(61))));
        assert!(minute.due("connection refused"), "a new error, later");
        assert!(!minute.due("timed out"), "the same error is not repeated");
    }
}
