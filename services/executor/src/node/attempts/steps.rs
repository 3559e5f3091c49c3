//! The steps of obeying a command and running an attempt, apart from the
//! sequence in `attempts.rs` that calls them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use qm_wire::system::{AttemptKey, CheckpointRequest, EndCause, ReportPhase};
use tracing::Instrument;

use crate::node::{Executor, Running};
use crate::process;

impl Executor {
    /// Where the attempt's checkpoint directory is on the host, refused
    /// where the job's localPath would leave the attempt's directory.
    pub(super) fn checkpoint_dir(
        &self,
        job_id: &str,
        attempt: u32,
        local_path: Option<&str>,
        in_container: bool,
    ) -> Result<PathBuf, String> {
        let local = local_path.unwrap_or("checkpoint");
        // Admission checks localPath; a command that bypassed it
        // must still not write outside the attempt's directory.
        // A container's checkpoint directory is mounted at
        // /<localPath>; on the host it is always `checkpoint`, never
        // inside the `ml` folders the host reads after the run.
        let host_local = if in_container { "checkpoint" } else { local };
        qm_wire::messages::check_local_path(local)
            .map(|()| self.attempt_dir(job_id, attempt).join(host_local))
    }

    /// The GPUs of the instance slots an attempt was given.
    pub(super) fn gpus_for(&self, instance_type: &str, slots: &[u32]) -> Vec<u32> {
        slots
            .iter()
            .flat_map(|s| {
                self.gpus
                    .get(instance_type)
                    .and_then(|g| g.get(*s as usize))
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Records a starting attempt; false (nothing to do) when it already
    /// runs or ended here: a start is idempotent per (job, attempt).
    pub(super) fn register_attempt(&self, key: AttemptKey, running: Running) -> bool {
        let finished = self
            .finished
            .lock()
            .map(|f| f.contains(&key))
            .unwrap_or(true);
        let Ok(mut attempts) = self.attempts.lock() else {
            return false;
        };
        if finished || attempts.contains_key(&key) {
            return false; // idempotent per (job, attempt)
        }
        attempts.insert(key, running);
        true
    }

    /// Obeys a stop: signals the attempt running here, or reports the end
    /// of one that already ended (or never started) here.
    pub(super) fn stop_attempt(
        &self,
        job_id: &str,
        attempt: u32,
        grace_seconds: u64,
        reason: &str,
    ) {
        let span = tracing::info_span!(
            "stop",
            otel.name = "stop attempt",
            qm.job_id = %job_id,
            qm.attempt = attempt,
            qm.stop.reason = %reason,
            qm.stop.grace_seconds = grace_seconds,
        );
        let _in = span.enter();
        let key = AttemptKey::new(job_id.to_string(), attempt);
        let held = match self.attempts.lock() {
            Ok(attempts) => match attempts.get(&key) {
                Some(r) => {
                    if r.stop.borrow().is_none() {
                        tracing::info!(job = %job_id, attempt, grace_seconds, %reason, "stopping");
                    }
                    let _ = r.stop.send(Some(grace_seconds));
                    true
                }
                None => false,
            },
            Err(_) => return,
        };
        if held {
            return;
        }
        let finished = match self.finished.lock() {
            Ok(f) => f.get(&key).cloned(),
            Err(_) => return,
        };
        match finished {
            // It ended here: report its end again (stored once by
            // its message id), in case that report was lost.
            Some(Some(ended)) => {
                tracing::info!(job = %job_id, attempt, %reason, "stop for an attempt that already ended here: its end is reported again");
                self.send(ended);
            }
            Some(None) => {} // ended while draining: withdrawn instead
            None => {
                // Its start never arrived (or is yet to): the stop
                // settles it as ended, and a late start is ignored.
                tracing::info!(job = %job_id, attempt, %reason, "stop for an attempt never started here: answered as ended");
                let mut ended = self.report(job_id, attempt, ReportPhase::Ended);
                ended.cause = Some(EndCause::NotStarted);
                self.finish(ended);
            }
        }
    }

    /// Asks the checkpoint service to track a launched attempt, beside the
    /// process (a failure is asked again with the next re-assertion).
    pub(super) fn spawn_tracking(self: &Arc<Self>, request: CheckpointRequest) {
        let me = Arc::clone(self);
        tokio::spawn(
            async move {
                if let Err(e) = me.checkpoint("track", &request, 3).await {
                    tracing::warn!(job = %request.job_id, error = %e, "checkpoint tracking not started; asked again with the next re-assertion");
                }
            }
            .in_current_span(),
        );
    }

    /// Whether the attempt's watcher fenced it (this executor did not renew
    /// the deadline in time: it was frozen or stuck): the end is a lost
    /// host's.
    pub(super) fn watcher_fenced(&self, job_dir: &Path, job_id: &str, attempt: u32) -> bool {
        let watcher_fenced = qm_fence::read_exit(&qm_fence::exit_record(job_dir, attempt))
            .is_some_and(|(_, fenced)| fenced);
        if watcher_fenced {
            tracing::warn!(job = %job_id, attempt, "the attempt's watcher fenced it");
            if let Ok(mut a) = self.attempts.lock() {
                if let Some(r) = a.get_mut(&AttemptKey::new(job_id.to_string(), attempt)) {
                    r.fenced = true;
                }
            }
        }
        watcher_fenced
    }

    /// The final checkpoint flush of an attempt that ended; its tracking is
    /// no longer re-asserted.
    pub(super) async fn flush_ended(&self, request: &CheckpointRequest) {
        let (job_id, attempt) = (&request.job_id, request.attempt);
        // No more re-assertions of tracking for it: it has ended.
        if let Ok(mut a) = self.attempts.lock() {
            if let Some(r) = a.get_mut(&AttemptKey::new(job_id.clone(), attempt)) {
                r.sync = None;
            }
        }
        if let Err(e) = self.checkpoint("flush", request, 5).await {
            tracing::error!(job = %job_id, attempt, error = %e, "final checkpoint flush failed; the next attempt restores the last committed one");
        }
    }
}

/// The result the attempt's process left (`process::RESULT_FILE` on the
/// host, the SageMaker layout's in a container).
pub(super) fn attempt_result(launch: &process::Launch, dir: &Path) -> Option<String> {
    match launch.image {
        None => {
            crate::sagemaker::owned_text(&dir.join(process::RESULT_FILE), process::RESULT_CHARS)
        }
        Some(_) => crate::sagemaker::owned_text(
            &crate::sagemaker::Layout::new(dir).result(),
            process::RESULT_CHARS,
        ),
    }
}
