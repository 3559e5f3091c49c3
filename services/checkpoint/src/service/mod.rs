//! The requests the service answers for its node's executor (restore,
//! track, flush, untrack), each confined to the work directory and to the
//! share's S3 prefixes, and the periodic sync of tracked attempts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use qm_checkpoint::s3::{S3Config, S3Store};
use qm_service::api;
use qm_wire::messages::{ApiError, ErrorCode};
use qm_wire::subjects;
use qm_wire::system::{CheckpointReply, CheckpointRequest, QueueDocument};
use tokio::sync::Mutex;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::{JobSync, Service, Target, FLUSHED_KEPT};

mod channels;
mod restore;
mod tracking;

pub(crate) use restore::RestoreRun;
pub(crate) use tracking::abort_journaled;

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
