//! Restores: once per attempt, their answers kept across restarts of the
//! service (restore records) and forgotten when the attempt is done.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use qm_checkpoint::sync::{self, Uploaded};
use qm_checkpoint::Progress;
use qm_service::api;
use qm_wire::messages::{ApiError, ErrorCode};
use qm_wire::system::{CheckpointCommit, CheckpointReply, CheckpointRequest, TransferProgress};

use tracing::Instrument;

use crate::{failed, Service, Target};

/// One attempt's restore: how far it has come, and its answer once done.
#[derive(Clone)]
pub(crate) struct RestoreRun {
    progress: Arc<Progress>,
    done: tokio::sync::watch::Receiver<Option<Result<CheckpointReply, ApiError>>>,
}

impl Service {
    /// Restores the attempt's checkpoint, once per attempt: a request for
    /// an attempt whose restore is under way joins it, one for an attempt
    /// restored already gets the same answer (also after this service
    /// restarted: see [`Service::record_restore`]). With
    /// `answerWithinMs` the reply comes by then, `pending` with the
    /// progress if the restore goes on; without, when it has finished.
    pub(crate) async fn restore(
        self: &Arc<Self>,
        req: &CheckpointRequest,
    ) -> Result<CheckpointReply, ApiError> {
        let target = self.target(req).await?;
        let key = (req.job_id.clone(), req.attempt);
        let run = {
            let mut restores = self
                .restores
                .lock()
                .map_err(|_| api::error(ErrorCode::Internal, "restore table poisoned"))?;
            match restores.get(&key) {
                Some(run) => run.clone(),
                None => {
                    let run = self.start_restore(req.clone(), target);
                    restores.insert(key, run.clone());
                    run
                }
            }
        };
        // Keeps the job's entry alive while its executor waits.
        drop(self.job(&req.job_id).await);
        let mut done = run.done.clone();
        // Waits until the restore ends (or `answerWithinMs` passes); a
        // restore still going answers with its progress.
        let wait = done.wait_for(Option::is_some);
        match req.answer_within_ms {
            None => drop(wait.await),
            Some(ms) => drop(tokio::time::timeout(Duration::from_millis(ms), wait).await),
        }
        let result = done.borrow().clone();
        match result {
            Some(result) => result,
            None => Ok(CheckpointReply {
                pending: true,
                progress: Some(TransferProgress {
                    bytes_moved: run.progress.moved(),
                    bytes_total: run.progress.total(),
                }),
                ..CheckpointReply::default()
            }),
        }
    }

    fn start_restore(self: &Arc<Self>, req: CheckpointRequest, target: Target) -> RestoreRun {
        let progress = Arc::new(Progress::default());
        let (tx, rx) = tokio::sync::watch::channel(None);
        let me = Arc::clone(self);
        let moved = Arc::clone(&progress);
        tokio::spawn(
            async move {
                let result = me.restore_once(&req, target, &moved).await;
                if result.is_err() {
                    // Failed: the next request starts afresh.
                    if let Ok(mut r) = me.restores.lock() {
                        r.remove(&(req.job_id.clone(), req.attempt));
                    }
                }
                let _ = tx.send(Some(result));
            }
            .in_current_span(),
        );
        RestoreRun { progress, done: rx }
    }

    async fn restore_once(
        &self,
        req: &CheckpointRequest,
        target: Target,
        progress: &Progress,
    ) -> Result<CheckpointReply, ApiError> {
        let Target { dir, store, prefix } = target;
        let record = self.restore_record(req);
        // Restored before this service restarted: the same answer.
        if let Some(reply) = std::fs::read(&record)
            .ok()
            .and_then(|b| serde_json::from_slice::<CheckpointReply>(&b).ok())
        {
            let placed = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some());
            if placed || reply.checkpoint.is_none() {
                tracing::info!(job = %req.job_id, attempt = req.attempt, "restored before this service restarted: answered again");
                return Ok(reply);
            }
        }
        let started = std::time::Instant::now();
        let staged = sync::restore_staged(&store, &prefix, &dir, progress).await;
        let m = &crate::observe::METRICS;
        let result = match &staged {
            Ok(s) if s.restored.manifest.is_some() => "restored",
            Ok(_) => "none",
            Err(_) => "failed",
        };
        let staged = staged.map_err(|e| failed("restore failed", e));
        let staged = match staged {
            Ok(s) => s,
            Err(e) => {
                m.restore
                    .with_label_values(&[result])
                    .observe(started.elapsed().as_secs_f64());
                return Err(e);
            }
        };
        let restored = &staged.restored;
        let checkpoint = restored.manifest.as_ref().map(|m| CheckpointCommit {
            job_queue: req.job_queue.clone(),
            job_id: req.job_id.clone(),
            attempt: m.attempt,
            seq: m.seq,
            step: m.step,
            created_at: m.created_at_ms,
            node: None,
        });
        let reply = CheckpointReply {
            checkpoint: checkpoint.clone(),
            skipped: restored
                .skipped
                .iter()
                .map(|(seq, why)| format!("{seq}: {why}"))
                .collect(),
            progress: Some(TransferProgress {
                bytes_moved: progress.moved(),
                bytes_total: progress.total(),
            }),
            ..CheckpointReply::default()
        };
        // Recorded before it is moved into place, so a restart in between
        // answers a retry instead of refusing the non-empty directory.
        self.record_restore(&record, &reply);
        staged
            .place(&dir)
            .await
            .map_err(|e| failed("restore failed", e))?;
        m.restore
            .with_label_values(&[result])
            .observe(started.elapsed().as_secs_f64());
        if let Some(manifest) = &restored.manifest {
            m.bytes
                .with_label_values(&["restored"])
                .inc_by(manifest.files.iter().map(|f| f.size).sum());
        }
        if let Some(c) = &checkpoint {
            tracing::info!(job = %req.job_id, attempt = req.attempt, seq = c.seq, step = ?c.step, bytes = progress.total(), seconds = started.elapsed().as_secs_f64(), "restored");
        }
        let job = self.job(&req.job_id).await;
        let mut j = job.lock().await;
        j.committed = sync::fingerprint(&dir).ok();
        j.last.clone_from(&checkpoint);
        if let Some(manifest) = &restored.manifest {
            j.uploaded = Uploaded::of(manifest);
        }
        Ok(reply)
    }

    /// Where the answer to an attempt's restore is kept across restarts
    /// of this service (until the job is flushed or swept, at most a day).
    fn restore_record(&self, req: &CheckpointRequest) -> PathBuf {
        self.work_dir
            .join(".qm-checkpoint")
            .join("restores")
            .join(format!("{}.{}.json", req.job_id, req.attempt))
    }

    fn record_restore(&self, record: &std::path::Path, reply: &CheckpointReply) {
        use std::os::unix::fs::DirBuilderExt;
        let written = record.parent().map_or(Ok(()), |d| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
        });
        let written = written.and_then(|()| {
            let tmp = record.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(reply).unwrap_or_default())?;
            std::fs::rename(&tmp, record)
        });
        if let Err(e) = written {
            tracing::warn!(record = %record.display(), error = %e, "restore not recorded; a retry after a restart would find the directory in use");
        }
    }

    /// Forgets the job's restores of attempts up to `through` (all: None):
    /// those attempts ended (flushed or swept). A later attempt's restore
    /// stays: an old attempt's final flush can end after the next attempt
    /// restored, and forgetting that restore made its executor's retried
    /// request restore again into the directory already in use.
    pub(super) fn forget_restores(&self, job_id: &str, through: Option<u32>) {
        if let Ok(mut r) = self.restores.lock() {
            r.retain(|(job, attempt), _| !forgotten(job_id, through, job, *attempt));
        }
        let dir = self.work_dir.join(".qm-checkpoint").join("restores");
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some((job, attempt)) = name
                    .strip_suffix(".json")
                    .and_then(|n| n.rsplit_once('.'))
                    .and_then(|(j, a)| Some((j.to_string(), a.parse::<u32>().ok()?)))
                else {
                    continue;
                };
                if forgotten(job_id, through, &job, attempt) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    /// Whether a later attempt of the job has a restore in hand.
    pub(super) fn later_restore(&self, job_id: &str, attempt: u32) -> bool {
        self.restores
            .lock()
            .is_ok_and(|r| r.keys().any(|(j, a)| j == job_id && *a > attempt))
    }

    /// Restore records older than a day (their attempts ended while this
    /// service was down, or their restores finished after the attempt was
    /// given up) are removed: at start, and with every sweep.
    pub(crate) fn forget_old_restore_records(&self) {
        let dir = self.work_dir.join(".qm-checkpoint").join("restores");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(24 * 3600));
            if old {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Whether forgetting `job_id`'s restores through attempt `through` (all:
/// None) forgets the restore of `job`'s attempt `attempt`.
fn forgotten(job_id: &str, through: Option<u32>, job: &str, attempt: u32) -> bool {
    job == job_id && through.is_none_or(|t| attempt <= t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_forgets_its_own_attempts_restores_not_a_later_ones() {
        assert!(forgotten("j-1", Some(1), "j-1", 1));
        assert!(
            !forgotten("j-1", Some(1), "j-1", 2),
            "the next attempt's restore stays"
        );
        assert!(!forgotten("j-1", Some(1), "j-10", 1), "another job");
        assert!(
            forgotten("j-1", None, "j-1", 7),
            "a sweep forgets every attempt"
        );
    }
}
