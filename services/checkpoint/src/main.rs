//! `qm-checkpoint`: a node's checkpoint service. Answers, for the executor
//! on the same node:
//! - `qm.v1.ckpt.<node>.restore`: restore the job's newest complete
//!   checkpoint (every blob verified) into the attempt's empty directory;
//! - `qm.v1.ckpt.<node>.track`: while the attempt runs, upload new and
//!   changed files and commit a manifest (written last) whenever the
//!   directory changed, announcing each commit on the log and as an event;
//! - `qm.v1.ckpt.<node>.flush`: after the process exited, a final commit;
//!   the executor reports the attempt ended only after this answered.
//!
//! Layout in the bucket: `<queue>/<jobId>/manifests/<seq>.json` and
//! `<queue>/<jobId>/blobs/<sha256>` (see libs/qm-checkpoint); a job's
//! `checkpointConfig.s3Uri` (`s3://bucket/prefix`) replaces bucket and
//! prefix (the node's credentials must reach that bucket), but only under
//! the prefixes the job's share allows (`checkpointS3Prefixes`; default
//! `<queue>/shares/<share>/` of the configured bucket).
//!
//! Only directories inside `workDir` (the node's executor work directory)
//! are accepted, and only when no part of the path is a symbolic link, so a
//! request (or a job that swapped its directory for a link) cannot make the
//! service read or write anywhere else. Files inside that are links are
//! never uploaded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use qm_checkpoint::s3::{S3Config, S3Store};
use qm_checkpoint::sync::{self, CommitInfo, Uploaded};
use qm_service::api::{self, decode, respond};
use qm_service::{nats, now_ms, settings};
use qm_wire::messages::{ApiError, ErrorCode};
use qm_wire::subjects;
use qm_wire::system::{
    CheckpointCommit, CheckpointReply, CheckpointRequest, LogEntry, QueueDocument,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

const USAGE: &str = "qm-checkpoint [--config FILE]

Syncs attempts' checkpoint directories to S3-compatible storage for the
executor on this node. Settings (file keys, or environment variables
QM_CHECKPOINT_<KEY>):
  node             QM_CHECKPOINT_NODE                  required: the executor's checkpointNode
  workDir          QM_CHECKPOINT_WORK_DIR              the executor's workDir; only directories
                                                       inside it are synced (default
                                                       /tmp/qm-executor-<node>)
  s3Endpoint       QM_CHECKPOINT_S3_ENDPOINT           e.g. http://127.0.0.1:3900 (empty: AWS)
  s3Region         QM_CHECKPOINT_S3_REGION             default garage
  s3Bucket         QM_CHECKPOINT_S3_BUCKET             required
  s3AccessKeyId    QM_CHECKPOINT_S3_ACCESS_KEY_ID      explicit keys; when empty, the AWS
  s3SecretAccessKey QM_CHECKPOINT_S3_SECRET_ACCESS_KEY default chain (AWS_* variables,
                                                       profile, web identity, instance
                                                       metadata)
  scanIntervalMs   QM_CHECKPOINT_SCAN_INTERVAL_MS      default 1000
  keep             QM_CHECKPOINT_KEEP                  manifests kept per job, default 5

A checkpoint directory may hold qm-checkpoint.json with {\"step\": N}: the
step is recorded in the manifest. Files whose names start with '.' are
never uploaded (write temporary files that way, then rename).
NATS connection (QM_NATS_<KEY> or QM_CHECKPOINT_NATS_<KEY>):
  natsUrl natsPrincipal natsNkeyFile natsCreds natsUser natsPassword
  natsCaFile natsCertFile natsKeyFile";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    node: String,
    work_dir: String,
    s3_endpoint: String,
    s3_region: String,
    s3_bucket: String,
    s3_access_key_id: String,
    s3_secret_access_key: String,
    scan_interval_ms: u64,
    keep: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node: String::new(),
            work_dir: String::new(),
            s3_endpoint: String::new(),
            s3_region: "garage".into(),
            s3_bucket: String::new(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: String::new(),
            scan_interval_ms: 1000,
            keep: 5,
        }
    }
}

impl settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if let Err(e) = subjects::token(&self.node) {
            p.push(format!("node: {e}"));
        }
        if self.s3_bucket.is_empty() {
            p.push("s3Bucket: is required".into());
        }
        if self.s3_access_key_id.is_empty() != self.s3_secret_access_key.is_empty() {
            p.push("s3AccessKeyId and s3SecretAccessKey: give both (or neither, for the AWS default credentials chain)".into());
        }
        if !self.work_dir.is_empty() && !std::path::Path::new(&self.work_dir).is_absolute() {
            p.push(format!(
                "workDir: {:?} must be an absolute path",
                self.work_dir
            ));
        }
        if self.scan_interval_ms < 50 {
            p.push("scanIntervalMs: must be >= 50".into());
        }
        if self.keep == 0 {
            p.push("keep: must be >= 1".into());
        }
        p
    }
}

/// What is known about one job's checkpoints on this node.
#[derive(Default)]
struct JobSync {
    uploaded: Uploaded,
    /// Fingerprint of the directory at the last commit.
    committed: Option<qm_checkpoint::Fingerprint>,
    last: Option<CheckpointCommit>,
    /// The attempt being tracked, and the task doing it.
    tracking: Option<(CheckpointRequest, tokio::task::JoinHandle<()>)>,
}

struct Service {
    settings: Settings,
    /// The work directory, resolved (no symbolic links): every request's
    /// directory must lie inside it.
    work_dir: PathBuf,
    /// Queue configurations (for `checkpointS3Prefixes`), read at most every
    /// few seconds per queue.
    config: async_nats::jetstream::kv::Store,
    queues: std::sync::Mutex<HashMap<String, (std::time::Instant, Option<QueueDocument>)>>,
    /// The configured bucket's connection settings, and a store per bucket
    /// used so far (jobs may name their own with `checkpointConfig.s3Uri`).
    s3: S3Config,
    stores: std::sync::Mutex<HashMap<String, S3Store>>,
    js: async_nats::jetstream::Context,
    client: async_nats::Client,
    jobs: Mutex<HashMap<String, Arc<Mutex<JobSync>>>>,
}

/// Where a request points (see `Service::target`).
struct Target {
    dir: PathBuf,
    store: S3Store,
    prefix: String,
}

fn failed(what: &str, e: impl std::fmt::Display) -> ApiError {
    api::error(ErrorCode::Transient, format!("{what}: {e}"))
}

impl Service {
    async fn job(&self, job_id: &str) -> Arc<Mutex<JobSync>> {
        let mut jobs = self.jobs.lock().await;
        Arc::clone(jobs.entry(job_id.to_string()).or_default())
    }

    /// `dir` if it is a real directory inside the work directory: absolute,
    /// no `.` or `..`, and no symbolic link anywhere on the way (resolving
    /// it changes nothing).
    fn confined(&self, dir: &str) -> Result<PathBuf, ApiError> {
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
    async fn queue(&self, queue: &str) -> Result<Option<QueueDocument>, ApiError> {
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
            .map_err(|e| failed("configuration store unavailable", e))?;
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
    async fn target(&self, req: &CheckpointRequest) -> Result<Target, ApiError> {
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
                        .and_then(|s| s.checkpoint_s3_prefixes.clone())
                });
                qm_tenancy::checkpoint_uri_allowed(
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
                S3Store::new(&S3Config {
                    bucket,
                    ..self.s3.clone()
                })
            })
            .clone();
        Ok(Target { dir, store, prefix })
    }

    async fn restore(&self, req: &CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        let Target { dir, store, prefix } = self.target(req).await?;
        let restored = sync::restore(&store, &prefix, &dir)
            .await
            .map_err(|e| failed("restore failed", e))?;
        let checkpoint = restored.manifest.map(|m| CheckpointCommit {
            job_queue: req.job_queue.clone(),
            job_id: req.job_id.clone(),
            attempt: m.attempt,
            seq: m.seq,
            step: m.step,
            created_at: m.created_at_ms,
        });
        if let Some(c) = &checkpoint {
            tracing::info!(job = %req.job_id, attempt = req.attempt, seq = c.seq, step = ?c.step, "restored");
        }
        let job = self.job(&req.job_id).await;
        let mut j = job.lock().await;
        j.committed = sync::fingerprint(&dir).ok();
        j.last.clone_from(&checkpoint);
        Ok(CheckpointReply {
            checkpoint,
            skipped: restored
                .skipped
                .iter()
                .map(|(seq, why)| format!("{seq}: {why}"))
                .collect(),
        })
    }

    /// Commits the directory if it changed since the last commit.
    async fn sync_once(&self, req: &CheckpointRequest, j: &mut JobSync) -> Result<(), ApiError> {
        let Target { dir, store, prefix } = self.target(req).await?;
        let print = sync::fingerprint(&dir).map_err(|e| failed("cannot read the directory", e))?;
        if print.is_empty() || j.committed.as_ref() == Some(&print) {
            return Ok(());
        }
        let seqs = sync::manifest_seqs(&store, &prefix)
            .await
            .map_err(|e| failed("cannot list checkpoints", e))?;
        let info = CommitInfo {
            seq: seqs.iter().max().map_or(1, |s| s + 1),
            attempt: req.attempt,
            step: None, // read from qm-checkpoint.json within the snapshot
            created_at_ms: now_ms(),
        };
        // A file rewritten mid-upload: nothing was committed; try again soon
        // (a workload that checkpoints often must not starve its commits).
        let mut tries = 0;
        let manifest = loop {
            match sync::commit(&store, &prefix, &dir, info, &mut j.uploaded).await {
                Ok(m) => break m,
                Err(sync::SyncError::Changed(path)) if tries < 10 => {
                    tries += 1;
                    tracing::debug!(job = %req.job_id, path = %path.display(), "file changed during commit; again");
                    tokio::time::sleep(Duration::from_millis(20)).await;
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
        };
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
        if let Err(e) = sync::retain(&store, &prefix, self.settings.keep).await {
            tracing::warn!(job = %req.job_id, error = %e, "retention failed");
        }
        Ok(())
    }

    async fn track(self: &Arc<Self>, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        self.target(&req).await?;
        let job = self.job(&req.job_id).await;
        let mut j = job.lock().await;
        if matches!(&j.tracking, Some((r, t)) if r.attempt == req.attempt && !t.is_finished()) {
            return Ok(CheckpointReply {
                checkpoint: j.last.clone(),
                skipped: vec![],
            });
        }
        if let Some((_, t)) = j.tracking.take() {
            t.abort();
        }
        let me = Arc::clone(self);
        let job2 = Arc::clone(&job);
        let interval = Duration::from_millis(self.settings.scan_interval_ms);
        let request = req.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let mut j = job2.lock().await;
                if let Err(e) = me.sync_once(&request, &mut j).await {
                    tracing::warn!(job = %request.job_id, error = %e.message, "sync failed; retrying");
                }
            }
        });
        j.tracking = Some((req, task));
        Ok(CheckpointReply {
            checkpoint: j.last.clone(),
            skipped: vec![],
        })
    }

    async fn flush(&self, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        self.target(&req).await?;
        let job = self.job(&req.job_id).await;
        let mut j = job.lock().await;
        if let Some((_, t)) = j.tracking.take() {
            t.abort();
        }
        self.sync_once(&req, &mut j).await?;
        let reply = CheckpointReply {
            checkpoint: j.last.clone(),
            skipped: vec![],
        };
        drop(j);
        self.jobs.lock().await.remove(&req.job_id);
        Ok(reply)
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (mut settings, nats_settings) = match qm_service::start::<Settings>("checkpoint", USAGE) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if settings.work_dir.is_empty() {
        settings.work_dir = format!("/tmp/qm-executor-{}", settings.node);
    }
    if let Err(e) = std::fs::create_dir_all(&settings.work_dir) {
        eprintln!(
            "qm-checkpoint: cannot create workDir {}: {e}",
            settings.work_dir
        );
        return std::process::ExitCode::from(2);
    }
    let work_dir = match std::fs::canonicalize(&settings.work_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "qm-checkpoint: cannot resolve workDir {}: {e}",
                settings.work_dir
            );
            return std::process::ExitCode::from(2);
        }
    };
    let explicit_keys = !settings.s3_access_key_id.is_empty();
    let s3 = S3Config {
        endpoint: (!settings.s3_endpoint.is_empty()).then(|| settings.s3_endpoint.clone()),
        region: settings.s3_region.clone(),
        access_key_id: settings.s3_access_key_id.clone(),
        secret_access_key: settings.s3_secret_access_key.clone(),
        credentials: if explicit_keys {
            None
        } else {
            Some(qm_checkpoint::s3::default_chain().await)
        },
        bucket: settings.s3_bucket.clone(),
        force_path_style: true,
    };
    tracing::info!(
        credentials = if explicit_keys {
            "explicit keys"
        } else {
            "AWS default chain"
        },
        "S3 credentials"
    );
    let (client, _principal) = match qm_service::connect(&nats_settings, "checkpoint").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let js = async_nats::jetstream::new(client.clone());
    // (Commits are appended with retries until the log stream stores them.)
    let config = nats::open_bucket(&js, subjects::CONFIG_BUCKET).await;
    let subject = format!("{}.{}.*", subjects::CKPT_PREFIX, settings.node);
    let Ok(mut requests) = client.subscribe(subject).await else {
        eprintln!("qm-checkpoint: cannot subscribe");
        return std::process::ExitCode::from(1);
    };
    let service = Arc::new(Service {
        settings,
        work_dir,
        config,
        queues: std::sync::Mutex::new(HashMap::new()),
        stores: std::sync::Mutex::new(HashMap::from([(s3.bucket.clone(), S3Store::new(&s3))])),
        s3,
        js,
        client: client.clone(),
        jobs: Mutex::new(HashMap::new()),
    });
    tracing::info!(node = %service.settings.node, bucket = %service.settings.s3_bucket, "checkpoint service ready");
    let shutdown = nats::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            msg = requests.next() => {
                let Some(msg) = msg else { break };
                let svc = Arc::clone(&service);
                tokio::spawn(async move {
                    let op = msg.subject.rsplit('.').next().unwrap_or("").to_string();
                    let r = match decode::<CheckpointRequest>(&msg.payload) {
                        Err(e) => Err(e),
                        Ok(req) => match op.as_str() {
                            "restore" => svc.restore(&req).await,
                            "track" => svc.track(req).await,
                            "flush" => svc.flush(req).await,
                            other => Err(api::invalid(format!("unknown checkpoint operation {other:?}"), vec![])),
                        },
                    };
                    if let Err(e) = &r {
                        tracing::warn!(op = %op, error = %e.message, "checkpoint request failed");
                    }
                    respond(&svc.client, &msg, &r).await;
                });
            }
        }
    }
    // Final commits of everything tracked, so nothing written is lost.
    let jobs: Vec<Arc<Mutex<JobSync>>> = service.jobs.lock().await.values().cloned().collect();
    for job in jobs {
        let mut j = job.lock().await;
        if let Some((request, t)) = j.tracking.take() {
            t.abort();
            match service.sync_once(&request, &mut j).await {
                Ok(()) => {
                    tracing::info!(job = %request.job_id, attempt = request.attempt, "final commit before stopping")
                }
                Err(e) => {
                    tracing::warn!(job = %request.job_id, error = %e.message, "final commit failed")
                }
            }
        }
    }
    let _ = client.flush().await;
    tracing::info!("checkpoint service stopped");
    std::process::ExitCode::SUCCESS
}
