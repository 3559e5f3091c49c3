//! The requests the service answers for its node's executor (restore,
//! track, flush, untrack), each confined to the work directory and to the
//! share's S3 prefixes, and the periodic sync of tracked attempts.

use super::*;
use qm_checkpoint::Progress;
use qm_wire::system::TransferProgress;

/// One attempt's restore: how far it has come, and its answer once done.
#[derive(Clone)]
pub(crate) struct RestoreRun {
    progress: Arc<Progress>,
    done: tokio::sync::watch::Receiver<Option<Result<CheckpointReply, ApiError>>>,
}
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

impl Service {
    pub(crate) async fn job(&self, job_id: &str) -> Arc<Mutex<JobSync>> {
        loop {
            let job = {
                let mut jobs = self.jobs.lock().await;
                let job = Arc::clone(jobs.entry(job_id.to_string()).or_default());
                crate::observe::METRICS.jobs.set(jobs.len() as i64);
                job
            };
            let mut j = job.lock().await;
            if !j.swept {
                j.touched = Some(std::time::Instant::now());
                drop(j);
                return job;
            }
            // Swept while this request waited for it: a new entry.
            drop(j);
            let mut jobs = self.jobs.lock().await;
            if jobs.get(job_id).is_some_and(|k| Arc::ptr_eq(k, &job)) {
                jobs.remove(job_id);
            }
        }
    }

    /// Ends what ended unseen: a job no request named for `lease` (its
    /// executor stopped re-asserting the tracking: the attempt ended
    /// without a flush, the executor died or was cut off, or a restore was
    /// never followed by a start). Its tracking task gets a last commit of
    /// what is in the directory, then the entry goes. Returns how many.
    pub(crate) async fn sweep(&self, lease: Duration) -> usize {
        let entries: Vec<(String, Arc<Mutex<JobSync>>)> = self
            .jobs
            .lock()
            .await
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        let mut swept = 0;
        for (job_id, job) in entries {
            let mut j = job.lock().await;
            if j.touched.is_some_and(|t| t.elapsed() < lease) {
                continue;
            }
            if let Some((req, task)) = j.tracking.take() {
                task.abort();
                tracing::info!(job = %job_id, attempt = req.attempt, lease_seconds = lease.as_secs(), "tracking not re-asserted: a last commit, then forgotten");
                if let Err(e) = self
                    .sync_once(&req, &mut j, &tracing::Span::current().context())
                    .await
                {
                    tracing::warn!(job = %job_id, error = %e.message, "last commit failed");
                }
            }
            j.swept = true;
            drop(j);
            let mut jobs = self.jobs.lock().await;
            // Unless a request made it anew meanwhile.
            if jobs.get(&job_id).is_some_and(|k| Arc::ptr_eq(k, &job)) {
                jobs.remove(&job_id);
                self.forget_restores(&job_id, None);
                swept += 1;
            }
            crate::observe::METRICS.jobs.set(jobs.len() as i64);
        }
        self.forget_old_restore_records();
        swept
    }

    /// `dir` if it is a real directory inside the work directory: absolute,
    /// no `.` or `..`, and no symbolic link anywhere on the way (resolving
    /// it changes nothing).
    pub(crate) fn confined(&self, dir: &str) -> Result<PathBuf, ApiError> {
        let refuse = |why: &str| api::invalid(format!("dir: {dir:?} {why}"), vec![]);
        let path = PathBuf::from(dir);
        if !path.is_absolute() {
            return Err(refuse("must be an absolute path"));
        }
        if path.components().any(|c| {
            matches!(
                c,
                std::path::Component::ParentDir | std::path::Component::CurDir
            )
        }) {
            return Err(refuse("must not contain '.' or '..'"));
        }
        let resolved = std::fs::canonicalize(&path)
            .map_err(|e| refuse(&format!("cannot be resolved: {e}")))?;
        if resolved != path {
            return Err(refuse(&format!(
                "goes through a symbolic link (it resolves to {})",
                resolved.display()
            )));
        }
        if !resolved.starts_with(&self.work_dir) || resolved == self.work_dir {
            return Err(refuse(&format!(
                "is outside the work directory {}",
                self.work_dir.display()
            )));
        }
        if !std::fs::symlink_metadata(&resolved).is_ok_and(|m| m.is_dir()) {
            return Err(refuse("is not a directory"));
        }
        Ok(resolved)
    }

    /// The queue's configuration, cached for a few seconds.
    pub(crate) async fn queue(&self, queue: &str) -> Result<Option<QueueDocument>, ApiError> {
        if let Ok(cache) = self.queues.lock() {
            if let Some((at, doc)) = cache.get(queue) {
                if at.elapsed() < Duration::from_secs(5) {
                    return Ok(doc.clone());
                }
            }
        }
        let entry = self
            .config
            .entry(format!("queue.{queue}"))
            .await
            .map_err(|e| {
                api::error(
                    ErrorCode::Transient,
                    format!("configuration store unavailable: {e}"),
                )
            })?;
        let doc = entry
            .filter(|e| e.operation == async_nats::jetstream::kv::Operation::Put)
            .and_then(|e| serde_json::from_slice::<QueueDocument>(&e.value).ok());
        if let Ok(mut cache) = self.queues.lock() {
            cache.insert(queue.to_string(), (std::time::Instant::now(), doc.clone()));
        }
        Ok(doc)
    }

    /// Checks a request and resolves where it points: the attempt's local
    /// directory, and the store and prefix of the job's checkpoints (its
    /// `s3Uri`, else the configured bucket under `<queue>/<jobId>`).
    pub(crate) async fn target(&self, req: &CheckpointRequest) -> Result<Target, ApiError> {
        self.target_for(req, false).await
    }

    /// [`Service::target`], for reading an input channel when `input`: its
    /// `s3Uri` must lie under the share's `inputS3Prefixes` (default: its
    /// own area, as checkpoints).
    async fn target_for(&self, req: &CheckpointRequest, input: bool) -> Result<Target, ApiError> {
        subjects::token(&req.job_queue)
            .map_err(|e| api::invalid(format!("jobQueue: {e}"), vec![]))?;
        subjects::token(&req.job_id).map_err(|e| api::invalid(format!("jobId: {e}"), vec![]))?;
        let dir = self.confined(&req.dir)?;
        let (bucket, prefix) = match &req.s3_uri {
            Some(uri) => {
                subjects::token(&req.quota_share_name)
                    .map_err(|e| api::invalid(format!("quotaShareName: {e}"), vec![]))?;
                let doc = self.queue(&req.job_queue).await?;
                let allowed = doc.as_ref().and_then(|d| {
                    d.quota_shares
                        .iter()
                        .find(|s| s.quota_share_name == req.quota_share_name)
                        .and_then(|s| {
                            if input {
                                s.input_s3_prefixes.clone()
                            } else {
                                s.checkpoint_s3_prefixes.clone()
                            }
                        })
                });
                let check = if input {
                    qm_tenancy::input_uri_allowed
                } else {
                    qm_tenancy::checkpoint_uri_allowed
                };
                check(
                    uri,
                    allowed.as_deref(),
                    Some(&self.s3.bucket),
                    &req.job_queue,
                    &req.quota_share_name,
                )
                .map_err(|e| api::error(ErrorCode::AccessDenied, format!("s3Uri: {e}")))?;
                let u = qm_wire::messages::parse_s3_uri(uri)
                    .map_err(|e| api::invalid(format!("s3Uri: {e}"), vec![]))?;
                (u.bucket, u.prefix)
            }
            None => (
                self.s3.bucket.clone(),
                format!("{}/{}", req.job_queue, req.job_id),
            ),
        };
        let mut stores = self
            .stores
            .lock()
            .map_err(|_| api::error(ErrorCode::Internal, "store cache poisoned"))?;
        let store = stores
            .entry(bucket.clone())
            .or_insert_with(|| {
                let store = S3Store::new(&S3Config {
                    bucket,
                    ..self.s3.clone()
                });
                abort_journaled(store.clone());
                store
            })
            .clone();
        Ok(Target { dir, store, prefix })
    }

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
    fn forget_restores(&self, job_id: &str, through: Option<u32>) {
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
    fn later_restore(&self, job_id: &str, attempt: u32) -> bool {
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
            let _ = self.client.publish(subject, body.into()).await;
        }
        let orphans_before = now_ms().saturating_sub(sync::ORPHAN_GRACE.as_millis() as u64);
        if let Err(e) = sync::retain(&store, &prefix, self.settings.keep, orphans_before).await {
            tracing::warn!(job = %req.job_id, error = %e, "retention failed");
        }
        Ok(())
    }

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

    /// Uploads a succeeded container attempt's outputs: `dir` is its `ml`
    /// folder, `s3Uri` its `outputDataConfig.s3OutputPath` (where the
    /// share may write, as checkpoints): `model/` becomes
    /// `<prefix>/<jobId>/output/model.tar.gz`, `output/data/`
    /// `output.tar.gz` (`qm_checkpoint::output`).
    pub(crate) async fn output(&self, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        if req.s3_uri.is_none() {
            return Err(api::invalid("s3Uri: the output path is required", vec![]));
        }
        let target = self.target(&req).await?;
        let mut folders = Vec::new();
        for (folder, object) in [("model", "model.tar.gz"), ("output/data", "output.tar.gz")] {
            let path = target.dir.join(folder);
            // The job wrote these folders: one swapped for a link is not
            // followed out of the attempt's directory.
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                if !meta.is_dir() {
                    return Err(api::invalid(
                        format!("{folder}: is not a directory (a link is never followed)"),
                        vec![],
                    ));
                }
            }
            folders.push((path, object));
        }
        let scratch = target.dir.parent().unwrap_or(&target.dir).to_path_buf();
        let started = std::time::Instant::now();
        let uploaded = qm_checkpoint::output::upload(
            &target.store,
            &target.prefix,
            &req.job_id,
            &folders,
            &scratch,
        )
        .await
        .map_err(|e| failed("output upload failed", e))?;
        for (key, bytes) in &uploaded {
            tracing::info!(job = %req.job_id, attempt = req.attempt, key, bytes, seconds = started.elapsed().as_secs_f64(), "output uploaded");
        }
        Ok(CheckpointReply::default())
    }

    /// Downloads an input channel into `dir` (the attempt's empty
    /// `ml/input/data/<channel>`): every object under `s3Uri`, or this
    /// node's part of it (`shard`), where the share may read
    /// (`qm_checkpoint::input`).
    pub(crate) async fn input(&self, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        let Some(uri) = req.s3_uri.clone() else {
            return Err(api::invalid(
                "s3Uri: the channel's S3 URI is required",
                vec![],
            ));
        };
        let target = self.target_for(&req, true).await?;
        // The channel is the folder the URI names: every key under
        // `<prefix>/`, the very prefix the share's rule was checked
        // against (a listing of the raw path would also match a sibling
        // `<prefix>-other/` the share may not read).
        let prefix = qm_wire::messages::parse_s3_uri(&uri)
            .map(|u| qm_checkpoint::input::channel_folder(&u.prefix))
            .map_err(|e| api::invalid(format!("s3Uri: {e}"), vec![]))?;
        let (sharded, rank, nodes) = match req.shard {
            Some(s) => (true, s.rank, s.nodes.max(1)),
            None => (false, 0, 1),
        };
        let progress = qm_checkpoint::Progress::default();
        let started = std::time::Instant::now();
        let got = qm_checkpoint::input::download(
            &target.store,
            &prefix,
            &target.dir,
            sharded,
            rank,
            nodes,
            &progress,
        )
        .await
        .map_err(|e| failed("input download failed", e))?;
        tracing::info!(job = %req.job_id, attempt = req.attempt, channel = %target.dir.display(), files = got.files, bytes = got.bytes, seconds = started.elapsed().as_secs_f64(), "input channel downloaded");
        Ok(CheckpointReply {
            progress: Some(qm_wire::system::TransferProgress {
                bytes_moved: got.bytes,
                bytes_total: got.bytes,
            }),
            ..Default::default()
        })
    }

    pub(crate) async fn flush(&self, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        self.target(&req).await?;
        if let Ok(mut f) = self.flushed.lock() {
            f.retain(|_, at| at.elapsed() < FLUSHED_KEPT);
            f.insert((req.job_id.clone(), req.attempt), std::time::Instant::now());
        }
        let job = self.job(&req.job_id).await;
        let mut j = job.lock().await;
        if let Some((_, t)) = j.tracking.take() {
            t.abort();
        }
        self.sync_once(&req, &mut j, &tracing::Span::current().context())
            .await?;
        let reply = CheckpointReply {
            checkpoint: j.last.clone(),
            skipped: vec![],
            ..CheckpointReply::default()
        };
        drop(j);
        self.forget_restores(&req.job_id, Some(req.attempt));
        let mut jobs = self.jobs.lock().await;
        // The next attempt may already have restored (its entry holds what
        // it restored): then the job stays.
        if !self.later_restore(&req.job_id, req.attempt) {
            jobs.remove(&req.job_id);
        }
        crate::observe::METRICS.jobs.set(jobs.len() as i64);
        Ok(reply)
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
