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
//! never uploaded. Layers: `tests/layers.rs` (services/README.md).

mod observe;
mod service;
mod settings;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use qm_checkpoint::s3::{S3Config, S3Store};
use qm_checkpoint::sync::{self, Uploaded};
use qm_service::api::{self, decode, respond};
use qm_service::nats;
use qm_wire::messages::{ApiError, ErrorCode};
use qm_wire::subjects;
use qm_wire::system::{CheckpointCommit, CheckpointRequest, QueueDocument};
use tokio::sync::Mutex;
use tracing::Instrument;

use settings::{Settings, SPEC};

/// What is known about one job's checkpoints on this node.
#[derive(Default)]
struct JobSync {
    uploaded: Uploaded,
    /// Fingerprint of the directory at the last commit.
    committed: Option<qm_checkpoint::Fingerprint>,
    last: Option<CheckpointCommit>,
    /// The attempt being tracked, and the task doing it.
    tracking: Option<(CheckpointRequest, tokio::task::JoinHandle<()>)>,
    /// When a request (restore, track, flush) last named the job: an entry
    /// nothing names for `trackLeaseSeconds` is swept (`Service::sweep`).
    touched: Option<std::time::Instant>,
    /// Swept: no longer in the service's map (a request holding it takes
    /// a new entry instead).
    swept: bool,
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
    /// Attempts flushed (ended) lately: a `track` for one of them (an
    /// executor's periodic re-assertion racing the attempt's end) must not
    /// start tracking it again. Entries go after `FLUSHED_KEPT`.
    flushed: std::sync::Mutex<HashMap<(String, u32), std::time::Instant>>,
    /// Restores by (job, attempt), under way or finished: asking again for
    /// the same attempt (an executor whose call timed out, or that polls
    /// for progress) joins the one restore instead of starting another.
    /// Entries go with the job's (flush, sweep) or when a restore failed.
    restores: std::sync::Mutex<HashMap<(String, u32), service::RestoreRun>>,
}

/// How long a flushed attempt is remembered (re-assertions come every few
/// seconds; an attempt never runs again after its flush).
const FLUSHED_KEPT: Duration = Duration::from_secs(600);

/// Where a request points (see `Service::target`).
struct Target {
    dir: PathBuf,
    store: S3Store,
    prefix: String,
}

/// A failed request: `TRANSIENT` when trying again may succeed, otherwise
/// refused (`CONFLICT` for a restore target in use, `ACCESS_DENIED` when the
/// store or the file system refuses, `INVALID` for damaged checkpoints), so
/// the executor retries only what can succeed.
fn failed(what: &str, e: sync::SyncError) -> ApiError {
    let code = match &e {
        _ if e.is_transient() => ErrorCode::Transient,
        sync::SyncError::TargetNotEmpty(_) | sync::SyncError::Superseded { .. } => {
            ErrorCode::Conflict
        }
        sync::SyncError::Store(_) | sync::SyncError::Local { .. } => ErrorCode::AccessDenied,
        _ => ErrorCode::Invalid,
    };
    api::error(code, format!("{what}: {e}"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    qm_service::main::<Settings, _, _>(&SPEC, run).await
}

async fn run(
    mut settings: Settings,
    nats_settings: qm_service::settings::NatsSettings,
    observe_settings: qm_service::settings::ObserveSettings,
) -> std::process::ExitCode {
    let work_dir = match prepare_work_dir(&mut settings) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let s3 = s3_config(&settings, &work_dir).await;
    let (client, _principal) = match qm_service::connect(&nats_settings, "checkpoint").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let js = async_nats::jetstream::new(client.clone());
    // (Commits are appended with retries until the log stream stores them.)
    let config = nats::open_bucket(&js, subjects::CONFIG_BUCKET).await;
    let Ok(subject) = subjects::checkpoint_requests(&settings.node) else {
        eprintln!("qm-checkpoint: node: not a subject-safe name");
        return std::process::ExitCode::from(2);
    };
    let Ok(mut requests) = client.subscribe(subject).await else {
        eprintln!("qm-checkpoint: cannot subscribe");
        return std::process::ExitCode::from(1);
    };
    let s3_health = observe::S3Health::default();
    s3_health.watch(S3Store::new(&s3));
    service::abort_journaled(S3Store::new(&s3));
    std::sync::LazyLock::force(&observe::METRICS);
    let endpoint = {
        let s3_health = s3_health.clone();
        let ready = Box::new(move || {
            if s3_health.up() {
                Ok(())
            } else {
                Err("S3 unreachable".to_string())
            }
        });
        qm_service::observe::Endpoint::for_service("checkpoint", &client, ready)
    };
    if let Err(code) = qm_service::serve_metrics(&observe_settings, "checkpoint", endpoint).await {
        return code;
    }
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
        flushed: std::sync::Mutex::new(HashMap::new()),
        restores: std::sync::Mutex::new(HashMap::new()),
    });
    service.forget_old_restore_records();
    tracing::info!(node = %service.settings.node, bucket = %service.settings.s3_bucket, "checkpoint service ready");
    // What ended unseen is committed and forgotten (see `Service::sweep`).
    let sweeper = spawn_sweeper(&service);
    let shutdown = nats::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            msg = requests.next() => {
                let Some(msg) = msg else { break };
                let svc = Arc::clone(&service);
                let op = msg.subject.rsplit('.').next().unwrap_or("").to_string();
                let span = qm_service::trace::process_span(&format!("qm.v1.ckpt.{{node}}.{op}"), &msg);
                tokio::spawn(async move {
                    let r = match decode::<CheckpointRequest>(&msg.payload) {
                        Err(e) => Err(e),
                        Ok(req) => match op.as_str() {
                            "restore" => svc.restore(&req).await,
                            "track" => svc.track(req).await,
                            "flush" => svc.flush(req).await,
                            "output" => svc.output(req).await,
                            "input" => svc.input(req).await,
                            other => Err(api::invalid(format!("unknown checkpoint operation {other:?}"), vec![])),
                        },
                    };
                    if let Err(e) = &r {
                        tracing::warn!(op = %op, error = %e.message, "checkpoint request failed");
                    }
                    respond(&svc.client, &msg, &r).await;
                }.instrument(span));
            }
        }
    }
    // Final commits of everything tracked, so nothing written is lost (at
    // most 20 s: with S3 unreachable, what was committed before stays the
    // newest checkpoint).
    sweeper.abort();
    qm_service::within(
        "final checkpoint commits",
        Duration::from_secs(20),
        final_commits(&service),
    )
    .await;
    qm_service::within("NATS flush", Duration::from_secs(2), client.flush()).await;
    tracing::info!("checkpoint service stopped");
    std::process::ExitCode::SUCCESS
}

/// Creates and resolves the work folder (the node's default when unset).
fn prepare_work_dir(settings: &mut Settings) -> Result<PathBuf, std::process::ExitCode> {
    if settings.work_dir.is_empty() {
        settings.work_dir = qm_wire::paths::default_node_work_dir(&settings.node);
    }
    if let Err(e) = std::fs::create_dir_all(&settings.work_dir) {
        eprintln!(
            "qm-checkpoint: cannot create workDir {}: {e}",
            settings.work_dir
        );
        return Err(std::process::ExitCode::from(2));
    }
    let work_dir = match std::fs::canonicalize(&settings.work_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "qm-checkpoint: cannot resolve workDir {}: {e}",
                settings.work_dir
            );
            return Err(std::process::ExitCode::from(2));
        }
    };
    Ok(work_dir)
}

/// The S3 store's settings: explicit keys, else the AWS default chain.
async fn s3_config(settings: &Settings, work_dir: &std::path::Path) -> S3Config {
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
        transfer: qm_checkpoint::store::Transfer {
            part_size: settings.part_size_mib << 20,
            multipart_threshold: settings.multipart_threshold_mib << 20,
            parallel: settings.transfer_parallelism,
            response_timeout_secs: settings.s3_response_timeout_seconds,
        },
        // Multipart uploads in flight, so a restart aborts what a crash left.
        journal: Some(work_dir.join(".qm-checkpoint").join("uploads")),
    };
    tracing::info!(
        credentials = if explicit_keys {
            "explicit keys"
        } else {
            "AWS default chain"
        },
        "S3 credentials"
    );
    s3
}

/// What ended unseen is committed and forgotten (see `Service::sweep`),
/// every quarter of the track lease.
fn spawn_sweeper(service: &Arc<Service>) -> tokio::task::JoinHandle<()> {
    let service = Arc::clone(service);
    let lease = Duration::from_secs(service.settings.track_lease_seconds);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(lease / 4);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let swept = service.sweep(lease).await;
            if swept > 0 {
                tracing::info!(swept, "jobs no executor named for the lease forgotten");
            }
        }
    })
}

/// Final commits of everything tracked, so nothing written is lost.
async fn final_commits(service: &Service) {
    let jobs: Vec<Arc<Mutex<JobSync>>> = service.jobs.lock().await.values().cloned().collect();
    for job in jobs {
        let mut j = job.lock().await;
        if let Some((request, t)) = j.tracking.take() {
            t.abort();
            match service
                .sync_once(&request, &mut j, &opentelemetry::Context::new())
                .await
            {
                Ok(()) => {
                    tracing::info!(job = %request.job_id, attempt = request.attempt, "final commit before stopping")
                }
                Err(e) => {
                    tracing::warn!(job = %request.job_id, error = %e.message, "final commit failed")
                }
            }
        }
    }
}
