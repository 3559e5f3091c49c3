//! Attempts: obeying start and stop commands (fenced by the lease's
//! epoch, idempotent per attempt), running each process with its restored
//! checkpoint, flushing checkpoints after it exits, and serving its logs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::Retryable;
use qm_service::client::{CallError, Client};
use qm_wire::messages::ErrorCode;
use qm_wire::subjects;
use qm_wire::system::{
    AttemptKey, CheckpointReply, CheckpointRequest, EndCause, ExecCommand, LogsRequest,
    LogsResponse, Report, ReportPhase, TransferProgress,
};
use tokio::sync::watch;
use tracing::Instrument;

use crate::error::{CheckpointCallError, LaunchError};
use crate::node::{Executor, Running};
use crate::process;

mod steps;

use steps::attempt_result;

impl Executor {
    pub(crate) async fn command(self: &Arc<Self>, cmd: ExecCommand) {
        let (epoch, job_id) = match &cmd {
            ExecCommand::Start { epoch, job_id, .. }
            | ExecCommand::Stop { epoch, job_id, .. }
            | ExecCommand::Checkpoint { epoch, job_id, .. } => (*epoch, job_id.clone()),
        };
        // Ids become path components: only subject-safe tokens.
        if let Err(e) = subjects::token(&job_id) {
            tracing::warn!(error = %e, "command with an unsafe job id ignored");
            return;
        }
        if let ExecCommand::Start { job_queue, .. } = &cmd {
            if let Err(e) = subjects::token(job_queue) {
                tracing::warn!(job = %job_id, error = %e, "start with an unsafe job queue ignored");
                return;
            }
        }
        let current = self.lease_epoch(epoch).await;
        if current != Some(epoch) {
            tracing::warn!(
                epoch,
                current = ?current,
                job = %job_id,
                "command ignored: its epoch is not the current scheduler lease's"
            );
            return;
        }
        match cmd {
            ExecCommand::Start {
                job_id,
                attempt,
                job_queue,
                quota_share_name,
                command,
                environment,
                instance_type,
                slots,
                checkpoints,
                checkpoint_config,
                rank,
                hosts,
                grace_seconds,
                container_image,
                output_s3_uri,
                input_channels,
                run_as_non_root,
                ..
            } => {
                let grace_seconds = grace_seconds.unwrap_or(qm_core::DEFAULT_GRACE_PERIOD_SECS);
                let key = AttemptKey::new(job_id.clone(), attempt);
                if self.fenced.load(std::sync::atomic::Ordering::SeqCst) {
                    // The scheduler resends it once contact returns, or
                    // declares this executor lost and places it elsewhere.
                    tracing::warn!(job = %job_id, attempt, "start refused: fenced (no heartbeat acknowledged)");
                    return;
                }
                let config = checkpoint_config.unwrap_or_default();
                let checkpoint_dir = self.checkpoint_dir(
                    &job_id,
                    attempt,
                    config.local_path.as_deref(),
                    container_image.is_some(),
                );
                let checkpoint = match &checkpoint_dir {
                    Ok(dir) if checkpoints => Some(CheckpointRequest {
                        job_queue: job_queue.clone(),
                        quota_share_name: quota_share_name.clone(),
                        job_id: job_id.clone(),
                        attempt,
                        dir: dir.display().to_string(),
                        s3_uri: config.s3_uri.clone(),
                        epoch: Some(epoch),
                        answer_within_ms: None,
                        shard: None,
                    }),
                    _ => None,
                };
                let gpus = self.gpus_for(&instance_type, &slots);
                let launch = process::Launch {
                    job_id,
                    attempt,
                    job_queue,
                    command,
                    environment,
                    gpus,
                    checkpoint_dir,
                    checkpoint,
                    rank,
                    hosts,
                    run_as: self.settings.run_as_user.zip(self.settings.run_as_group),
                    image: container_image,
                    local_path: config.local_path.clone(),
                    instances: slots.len() as u32,
                    instance_type: instance_type.clone(),
                    output_s3_uri,
                    quota_share_name: quota_share_name.clone(),
                    input_channels,
                    run_as_non_root,
                    grace_seconds,
                };
                let span = tracing::info_span!(
                    "attempt",
                    otel.name = "run attempt",
                    qm.job_id = %launch.job_id,
                    qm.queue = %launch.job_queue,
                    qm.share = %quota_share_name,
                    qm.attempt = attempt,
                    qm.executor = %self.settings.executor_id,
                    process.exit.code = tracing::field::Empty,
                    otel.status_code = tracing::field::Empty,
                );
                let (tx, rx) = watch::channel(None);
                let running = Running {
                    stop: tx,
                    instance_type,
                    slots,
                    grace_seconds,
                    sync: launch.syncs_checkpoints().cloned(),
                    fenced: false,
                    target: None,
                    asked_to_checkpoint: false,
                    span: span.clone(),
                };
                if !self.register_attempt(key, running) {
                    return;
                }
                let me = Arc::clone(self);
                tokio::spawn(async move { me.run_attempt(launch, rx).await }.instrument(span));
            }
            ExecCommand::Checkpoint {
                job_id,
                attempt,
                signal,
                ..
            } => self.ask_to_checkpoint(&job_id, attempt, &signal),
            ExecCommand::Stop {
                job_id,
                attempt,
                grace_seconds,
                reason,
                ..
            } => self.stop_attempt(&job_id, attempt, grace_seconds, &reason),
        }
    }

    /// Checkpoint-then-preempt: sends the running process its checkpoint
    /// signal, once per attempt (the scheduler stops it after the commit or
    /// when the window ends). An attempt that is not running here, or not
    /// launched yet, has nothing to save: the stop follows.
    fn ask_to_checkpoint(&self, job_id: &str, attempt: u32, signal: &str) {
        let Some(number) = process::checkpoint_signal(signal) else {
            tracing::warn!(job = %job_id, attempt, signal, "checkpoint request with an unknown signal ignored");
            return;
        };
        let Ok(mut attempts) = self.attempts.lock() else {
            return;
        };
        let Some(running) = attempts.get_mut(&AttemptKey::new(job_id.to_string(), attempt)) else {
            return;
        };
        if running.asked_to_checkpoint || running.stop.borrow().is_some() {
            return;
        }
        if let Some(target) = &running.target {
            running.asked_to_checkpoint = true;
            tracing::info!(job = %job_id, attempt, signal, "asked to checkpoint before it is preempted");
            target.send(number, signal);
        }
    }

    pub(crate) async fn run_attempt(
        self: Arc<Self>,
        launch: process::Launch,
        mut stop: watch::Receiver<Option<u64>>,
    ) {
        let (job_id, attempt) = (launch.job_id.clone(), launch.attempt);
        let dir = self.attempt_dir(&job_id, attempt);
        let mut ended = self.report(&job_id, attempt, ReportPhase::Ended);
        // A stop is obeyed at once, also while the checkpoint is restored.
        let preparing = self.prepare(&launch, &dir).instrument(tracing::info_span!(
            "prepare",
            otel.name = "prepare attempt"
        ));
        let prepared = tokio::select! {
            prepared = preparing => prepared,
            () = stop_requested(stop.clone()) => {
                tracing::info!(job = %job_id, attempt, "stopped before it launched (while it was being prepared)");
                return self.finish(ended);
            }
        };
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(job = %job_id, attempt, error = %e, "launch failed");
                ended.error = Some(e.to_string());
                return self.finish(ended);
            }
        };
        let (ckpt_dir, restored) = prepared;
        let mut starting = self.report(&job_id, attempt, ReportPhase::Starting);
        starting.restored = restored.checkpoint.clone();
        starting.restored_bytes = restored.progress.as_ref().map(|p| p.bytes_moved);
        starting.restore_skipped.clone_from(&restored.skipped);
        // A host process starts in a moment: with batchReports its STARTING
        // waits for its RUNNING (or its end), and both are one log entry.
        let mut held = None;
        if self.settings.batch_reports && launch.image.is_none() {
            held = Some(starting);
        } else {
            self.send(starting);
        }
        let stopped = stop.borrow().is_some();
        if stopped {
            if let Some(starting) = held.take() {
                self.send(starting);
            }
            return self.finish(ended); // stopped before it launched
        }
        // Each step of the preparation (pulling the image, downloading an
        // input channel) is logged and reported, for describe.
        let progress = |text: String| {
            tracing::info!(job = %job_id, attempt, "{text}");
            let mut step = self.report(&job_id, attempt, ReportPhase::Starting);
            step.progress = Some(text);
            self.send(step);
        };
        let launching = self.launch(&launch, &dir, &ckpt_dir, &progress);
        let launched = if launch.image.is_none() {
            // A host process starts in a moment (its supervisor says so):
            // never cut short, so a process that started is always waited
            // for and recorded; a stop that came meanwhile is obeyed by
            // wait_or_stop at once.
            launching.await
        } else {
            tokio::select! {
                launched = launching => launched,
                () = stop_requested(stop.clone()) => {
                    tracing::info!(job = %job_id, attempt, "stopped before it launched (while its image or container was being prepared)");
                    Err(LaunchError::Stopped)
                }
            }
        };
        let launched = match launched {
            Ok(l) => l,
            Err(e) => {
                if let Some(starting) = held.take() {
                    self.send(starting);
                }
                if !matches!(e, LaunchError::Stopped) {
                    tracing::warn!(job = %job_id, attempt, error = %e, "launch failed");
                    ended.error = Some(e.to_string());
                }
                if let Some(request) = launch.syncs_checkpoints() {
                    let _ = self.checkpoint("flush", request, 3).await;
                }
                return self.finish(ended);
            }
        };
        let launched_at_ms = qm_service::now_ms();
        if let Ok(mut a) = self.attempts.lock() {
            if let Some(r) = a.get_mut(&AttemptKey::new(job_id.clone(), attempt)) {
                r.target = launched.target();
            }
        }
        let what = launched.describe();
        tracing::info!(job = %job_id, attempt, launched = %what, restored = ?restored.checkpoint.as_ref().map(|c| c.seq), "launched");
        let running = self.report(&job_id, attempt, ReportPhase::Running);
        match held.take() {
            Some(starting) => self.send_together(vec![starting, running]),
            None => self.send(running),
        }
        // Tracking is asked for beside the process, never before watching
        // for stops: a slow checkpoint service must not delay a SIGTERM
        // (the periodic re-assertion asks again if this call fails).
        if let Some(request) = launch.syncs_checkpoints() {
            self.spawn_tracking(request.clone());
        }
        let running = tracing::info_span!(
            "process",
            otel.name = "process",
            qm.launched = %what,
            process.exit.code = tracing::field::Empty,
            process.exit.signal = tracing::field::Empty,
        );
        let end = launched
            .wait_or_stop(&mut stop)
            .instrument(running.clone())
            .await;
        let status = (end.exit_code, end.signal);
        if let Some(code) = status.0 {
            running.record("process.exit.code", code);
            tracing::Span::current().record("process.exit.code", code);
        }
        if let Some(signal) = status.1 {
            running.record("process.exit.signal", signal);
        }
        ended.reason = end.reason;
        ended.result = attempt_result(&launch, &dir);
        drop(running);
        let job_dir = dir.parent().unwrap_or(&dir);
        let watcher_fenced = self.watcher_fenced(job_dir, &job_id, attempt);
        process::record_run(job_dir, attempt, launched_at_ms, qm_service::now_ms());
        ended.exit_code = status.0;
        ended.signal = status.1;
        tracing::info!(job = %job_id, attempt, exit_code = ?status.0, signal = ?status.1, "process ended");
        // Its own end unless a stop reached it while it ran (a stop that
        // came just after it exited does not make it a stopped run).
        let on_its_own = !end.stopped && !watcher_fenced;
        if on_its_own {
            // Kept on disk before anything else (the uploads and the flush
            // below may wait through an outage): should this executor stop
            // or die meanwhile, the next one reports it.
            self.outbox.keep_end(&ended);
        }
        if status.0 == Some(0) && on_its_own {
            if let Err(e) = self.upload_outputs(&launch, &dir).await {
                // SageMaker fails a job whose model cannot be delivered.
                tracing::error!(job = %job_id, attempt, error = %e, "outputs not uploaded: the attempt fails");
                ended.exit_code = None;
                ended.error = Some(format!("the outputs could not be uploaded: {e}"));
                self.outbox.keep_end(&ended);
            }
        }
        if let Some(request) = launch.syncs_checkpoints() {
            self.flush_ended(request).await;
        }
        self.finish(ended);
    }

    /// Rank 0 of a succeeded container job with an output path: the node's
    /// checkpoint service (which holds the S3 credentials) uploads its
    /// `/opt/ml/model` and `/opt/ml/output/data`.
    async fn upload_outputs(
        &self,
        launch: &process::Launch,
        dir: &Path,
    ) -> Result<(), crate::error::CheckpointCallError> {
        let (Some(uri), true, true) = (
            &launch.output_s3_uri,
            launch.image.is_some(),
            launch.rank == 0,
        ) else {
            return Ok(());
        };
        let request = CheckpointRequest {
            job_queue: launch.job_queue.clone(),
            quota_share_name: launch
                .checkpoint
                .as_ref()
                .map(|c| c.quota_share_name.clone())
                .unwrap_or_else(|| launch.quota_share_name.clone()),
            job_id: launch.job_id.clone(),
            attempt: launch.attempt,
            dir: dir.join("ml").display().to_string(),
            s3_uri: Some(uri.clone()),
            epoch: None,
            answer_within_ms: None,
            shard: None,
        };
        self.checkpoint_within("output", &request, 2, TRANSFER_CALL)
            .await
            .map(|_| ())
    }

    /// Downloads the job's input channels into `data` (the attempt's
    /// `ml/input/data`), one folder each, through the node's checkpoint
    /// service (which holds the S3 credentials and checks the share may
    /// read there). Returns the bytes moved.
    pub(crate) async fn download_inputs(
        &self,
        launch: &process::Launch,
        data: &Path,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<u64, LaunchError> {
        let mut total = 0;
        for c in &launch.input_channels {
            qm_wire::messages::check_channel_name(&c.channel_name)
                .map_err(|e| LaunchError::Contract(format!("inputDataConfig: {e}")))?;
            let dir = data.join(&c.channel_name);
            std::fs::create_dir_all(&dir).map_err(|source| LaunchError::CreateDir {
                path: dir.clone(),
                source,
            })?;
            progress(format!(
                "downloading input channel {} from {}",
                c.channel_name, c.s3_uri
            ));
            let request = CheckpointRequest {
                job_queue: launch.job_queue.clone(),
                quota_share_name: launch.quota_share_name.clone(),
                job_id: launch.job_id.clone(),
                attempt: launch.attempt,
                dir: dir.display().to_string(),
                s3_uri: Some(c.s3_uri.clone()),
                epoch: None,
                answer_within_ms: None,
                shard: c.sharded().then_some(qm_wire::system::InputShard {
                    rank: launch.rank,
                    nodes: launch.hosts.len().max(1) as u32,
                }),
            };
            let reply = self
                .checkpoint_within("input", &request, 2, TRANSFER_CALL)
                .await
                .map_err(|e| LaunchError::Input {
                    channel: c.channel_name.clone(),
                    reason: e.to_string(),
                })?;
            let bytes = reply.progress.map_or(0, |p| p.bytes_moved);
            progress(format!(
                "input channel {} downloaded: {bytes} bytes",
                c.channel_name
            ));
            total += bytes;
        }
        Ok(total)
    }

    /// The attempt's checkpoint directory, created (and handed to the
    /// unprivileged user), and the checkpoint restored into it.
    async fn prepare(
        &self,
        launch: &process::Launch,
        dir: &Path,
    ) -> Result<(PathBuf, CheckpointReply), LaunchError> {
        let ckpt_dir = launch
            .checkpoint_dir
            .clone()
            .map_err(LaunchError::LocalPath)?;
        crate::sweep::create_attempt_dir(&ckpt_dir).map_err(|source| LaunchError::CreateDir {
            path: ckpt_dir.clone(),
            source,
        })?;
        if launch.image.is_some() {
            // A container reaches only its mounts; nobody else on the node
            // reaches what it writes (it may run as root and leave set-uid
            // files, or be another tenant's process job's user).
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(
                |source| LaunchError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                },
            )?;
        } else if let Some((uid, gid)) = launch.run_as {
            // The unprivileged process writes its output and checkpoints.
            for d in [dir, &ckpt_dir] {
                std::os::unix::fs::chown(d, Some(uid), Some(gid)).map_err(|source| {
                    LaunchError::HandOver {
                        path: d.to_path_buf(),
                        uid,
                        source,
                    }
                })?;
            }
        }
        let restored = match &launch.checkpoint {
            Some(request) => self.restore(request).await.map_err(LaunchError::Restore)?,
            None => CheckpointReply::default(),
        };
        Ok((ckpt_dir, restored))
    }

    pub(crate) fn finish(&self, mut ended: Report) {
        let key = AttemptKey::new(ended.job_id.clone(), ended.attempt);
        // Its process ended on its own (its end is kept on disk): that end
        // is reported as it was, even if this executor fenced or began to
        // drain while its outputs and checkpoint were being saved.
        let kept = self.outbox.is_kept(&ended.job_id, ended.attempt);
        if let Ok(mut a) = self.attempts.lock() {
            if a.remove(&key).is_some_and(|r| r.fenced) && !kept {
                ended.cause = Some(EndCause::Fenced);
            }
        }
        let result = crate::observe::result(&ended);
        crate::observe::METRICS
            .ended
            .with_label_values(&[result])
            .inc();
        if !matches!(result, "succeeded" | "not_started") {
            tracing::Span::current().record("otel.status_code", "ERROR");
        }
        let reported = kept || !self.draining.load(std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut f) = self.finished.lock() {
            f.insert(
                std::time::Instant::now(),
                key,
                reported.then(|| ended.clone()),
            );
        }
        if reported {
            self.send(ended);
        }
    }

    /// Restores the attempt's checkpoint for as long as the restore makes
    /// progress: the checkpoint service answers every [`RESTORE_POLL`] with
    /// how far it has come (a 100 GiB checkpoint takes minutes), and asking
    /// again joins the same restore. It fails when nothing moved, or the
    /// service did not answer, for `restoreStallSeconds`, or at once when
    /// the service refuses.
    async fn restore(
        &self,
        request: &CheckpointRequest,
    ) -> Result<CheckpointReply, CheckpointCallError> {
        let stall = Duration::from_secs(self.settings.restore_stall_seconds);
        let req = CheckpointRequest {
            answer_within_ms: Some(RESTORE_POLL.as_millis() as u64),
            ..request.clone()
        };
        let (mut progress, mut moved_at) = (TransferProgress::default(), Instant::now());
        let mut last: Option<String>;
        loop {
            // The service answers within the poll; more is a lost call.
            match self.call("restore", &req, RESTORE_POLL * 3).await? {
                Ok(reply) if !reply.pending => return Ok(reply),
                Ok(reply) => {
                    let now = reply.progress.unwrap_or_default();
                    if now.bytes_moved != progress.bytes_moved {
                        moved_at = Instant::now();
                    }
                    progress = now;
                    last = None;
                    tracing::info!(
                        job = %req.job_id,
                        attempt = req.attempt,
                        moved_mib = progress.bytes_moved >> 20,
                        total_mib = progress.bytes_total >> 20,
                        "restoring the checkpoint"
                    );
                }
                Err(e) if refused(&e) => {
                    tracing::warn!(job = %req.job_id, error = %e, "checkpoint service refused the restore");
                    return Err(CheckpointCallError::Refused(e));
                }
                Err(e) => {
                    tracing::warn!(job = %req.job_id, error = %e, "checkpoint service did not answer the restore; asking again");
                    last = Some(e.to_string());
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            if moved_at.elapsed() >= stall {
                return Err(CheckpointCallError::Stalled {
                    seconds: stall.as_secs(),
                    moved: progress.bytes_moved,
                    total: progress.bytes_total,
                    last,
                });
            }
        }
    }

    /// One call to the node's checkpoint service.
    async fn call(
        &self,
        op: &str,
        req: &CheckpointRequest,
        timeout: Duration,
    ) -> Result<Result<CheckpointReply, CallError>, CheckpointCallError> {
        let client = Client {
            nats: self.client.clone(),
            timeout,
            principal: self.principal.clone(),
            acting_for: None,
        };
        let subject = subjects::checkpoint_request(&self.settings.checkpoint_node, op)
            .map_err(|e| CheckpointCallError::Request(e.to_string()))?;
        let body: bytes::Bytes = serde_json::to_vec(req)
            .map_err(|e| CheckpointCallError::Request(e.to_string()))?
            .into();
        Ok(client
            .request_raw::<CheckpointReply>(subject, body, "checkpoint")
            .await)
    }

    /// Calls the node's checkpoint service (`op`: track, flush), up to
    /// `tries` times with backoff while it does not answer (within
    /// [`CHECKPOINT_CALL`] each) or fails transiently; a refusal is
    /// returned at once.
    pub(crate) async fn checkpoint(
        &self,
        op: &str,
        req: &CheckpointRequest,
        tries: usize,
    ) -> Result<CheckpointReply, CheckpointCallError> {
        self.checkpoint_within(op, req, tries, CHECKPOINT_CALL)
            .await
    }

    /// [`Executor::checkpoint`], each try answered within `timeout` (an
    /// input download or an output upload moves the whole data set).
    pub(crate) async fn checkpoint_within(
        &self,
        op: &str,
        req: &CheckpointRequest,
        tries: usize,
        timeout: Duration,
    ) -> Result<CheckpointReply, CheckpointCallError> {
        let call = || async {
            match self.call(op, req, timeout).await {
                Ok(answer) => answer,
                Err(e) => Err(CallError::Transport(e.to_string())),
            }
        };
        let schedule = qm_service::retry::forever(Duration::from_millis(500))
            .with_max_times(tries.saturating_sub(1));
        call.retry(schedule)
            .when(|e| !refused(e))
            .notify(|e, _| tracing::warn!(op, job = %req.job_id, error = %e, "checkpoint service call failed; retrying"))
            .await
            .map_err(|e| {
                if refused(&e) {
                    tracing::warn!(op, job = %req.job_id, error = %e, "checkpoint service refused the request");
                    CheckpointCallError::Refused(e)
                } else {
                    CheckpointCallError::Unavailable { tries, last: e }
                }
            })
    }

    pub(crate) fn attempt_dir(&self, job_id: &str, attempt: u32) -> PathBuf {
        PathBuf::from(&self.settings.work_dir)
            .join(job_id)
            .join(format!("attempt-{attempt}"))
    }

    pub(crate) fn logs(&self, req: &LogsRequest) -> Result<LogsResponse, String> {
        subjects::token(&req.job_id).map_err(|e| format!("jobId: {e}"))?;
        let dir = self.attempt_dir(&req.job_id, req.attempt);
        if !dir.exists() {
            return Err(format!(
                "no logs of attempt {} of job {} on executor {} (an attempt's directory is kept finishedRetentionSeconds, {} s, after it ends)",
                req.attempt, req.job_id, self.settings.executor_id, self.settings.finished_retention_seconds
            ));
        }
        Ok(process::logs_answer(&dir, req.tail_bytes))
    }
}

/// How often a restore answers with its progress.
const RESTORE_POLL: Duration = Duration::from_secs(10);

/// How long a track or flush call may go unanswered before it is sent again.
const CHECKPOINT_CALL: Duration = Duration::from_secs(120);

/// How long an input download or an output upload may take before it is
/// asked for again (once): the whole data set moves in one call.
const TRANSFER_CALL: Duration = Duration::from_secs(3600);

/// A refusal: the same request fails again, so it is not retried.
fn refused(e: &CallError) -> bool {
    e.code().is_some_and(|c| c != ErrorCode::Transient)
}

/// Returns once a stop was asked for (never, if the attempt's stop channel
/// is gone).
async fn stop_requested(mut stop: watch::Receiver<Option<u64>>) {
    if stop.wait_for(Option::is_some).await.is_err() {
        std::future::pending::<()>().await;
    }
}
