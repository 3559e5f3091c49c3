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
//! prefix (the node's credentials must reach that bucket).

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
use qm_wire::system::{CheckpointCommit, CheckpointReply, CheckpointRequest, LogEntry};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

const USAGE: &str = "qm-checkpoint [--config FILE]

Syncs attempts' checkpoint directories to S3-compatible storage for the
executor on this node. Settings (file keys, or environment variables
QM_CHECKPOINT_<KEY>):
  natsUrl          QM_NATS_URL                         default nats://127.0.0.1:4222
  node             QM_CHECKPOINT_NODE                  required: the executor's checkpointNode
  s3Endpoint       QM_CHECKPOINT_S3_ENDPOINT           e.g. http://127.0.0.1:3900 (empty: AWS)
  s3Region         QM_CHECKPOINT_S3_REGION             default garage
  s3Bucket         QM_CHECKPOINT_S3_BUCKET             required
  s3AccessKeyId    QM_CHECKPOINT_S3_ACCESS_KEY_ID      required
  s3SecretAccessKey QM_CHECKPOINT_S3_SECRET_ACCESS_KEY required
  scanIntervalMs   QM_CHECKPOINT_SCAN_INTERVAL_MS      default 1000
  keep             QM_CHECKPOINT_KEEP                  manifests kept per job, default 5

A checkpoint directory may hold qm-checkpoint.json with {\"step\": N}: the
step is recorded in the manifest. Files whose names start with '.' are
never uploaded (write temporary files that way, then rename).";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    nats_url: String,
    node: String,
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
            nats_url: "nats://127.0.0.1:4222".into(),
            node: String::new(),
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
        for (field, value) in [
            ("s3Bucket", &self.s3_bucket),
            ("s3AccessKeyId", &self.s3_access_key_id),
            ("s3SecretAccessKey", &self.s3_secret_access_key),
        ] {
            if value.is_empty() {
                p.push(format!("{field}: is required"));
            }
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

    /// Checks a request and resolves where it points: the attempt's local
    /// directory, and the store and prefix of the job's checkpoints (its
    /// `s3Uri`, else the configured bucket under `<queue>/<jobId>`).
    fn target(&self, req: &CheckpointRequest) -> Result<Target, ApiError> {
        subjects::token(&req.job_queue)
            .map_err(|e| api::invalid(format!("jobQueue: {e}"), vec![]))?;
        subjects::token(&req.job_id).map_err(|e| api::invalid(format!("jobId: {e}"), vec![]))?;
        let dir = PathBuf::from(&req.dir);
        if !dir.is_absolute() {
            return Err(api::invalid(
                format!("dir: {:?} must be an absolute path", req.dir),
                vec![],
            ));
        }
        let (bucket, prefix) = match &req.s3_uri {
            Some(uri) => {
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
        let Target { dir, store, prefix } = self.target(req)?;
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
        let Target { dir, store, prefix } = self.target(req)?;
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
            if let Ok(subject) = subjects::log_checkpoint(&req.job_queue) {
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
            subjects::checkpoint_event(&req.job_queue, &req.job_id),
        ) {
            let _ = self.client.publish(subject, body.into()).await;
        }
        if let Err(e) = sync::retain(&store, &prefix, self.settings.keep).await {
            tracing::warn!(job = %req.job_id, error = %e, "retention failed");
        }
        Ok(())
    }

    async fn track(self: &Arc<Self>, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        self.target(&req)?;
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
        self.target(&req)?;
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
    let settings = match qm_service::start::<Settings>("checkpoint", USAGE) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let s3 = S3Config {
        endpoint: (!settings.s3_endpoint.is_empty()).then(|| settings.s3_endpoint.clone()),
        region: settings.s3_region.clone(),
        access_key_id: settings.s3_access_key_id.clone(),
        secret_access_key: settings.s3_secret_access_key.clone(),
        bucket: settings.s3_bucket.clone(),
        force_path_style: true,
    };
    let client = match qm_service::connect(&settings.nats_url, "checkpoint").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    // The log stream must exist before commits are appended to it.
    let storage = nats::storage_with_retry(&client).await;
    let subject = format!("{}.{}.*", subjects::CKPT_PREFIX, settings.node);
    let Ok(mut requests) = client.subscribe(subject).await else {
        eprintln!("qm-checkpoint: cannot subscribe");
        return std::process::ExitCode::from(1);
    };
    let service = Arc::new(Service {
        settings,
        stores: std::sync::Mutex::new(HashMap::from([(s3.bucket.clone(), S3Store::new(&s3))])),
        s3,
        js: storage.js,
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
