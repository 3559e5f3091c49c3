//! `qm-executor`: one per node (or pool). Registers the node's instances and
//! GPUs, heartbeats, launches each attempt's process (argv, no shell) in its
//! own directory with `QM_JOB_ID`, `QM_ATTEMPT`, `QM_CHECKPOINT_DIR` and
//! `CUDA_VISIBLE_DEVICES`, captures its output, stops it (SIGTERM, grace,
//! SIGKILL) when told, and reports every transition durably.
//!
//! Before a launch the node's checkpoint service restores the job's latest
//! checkpoint into the attempt's directory; after the process exits it
//! flushes, and only then is the attempt reported ended.

mod gpus;
mod process;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use qm_service::client::Client;
use qm_service::{nats, settings};
use qm_wire::messages::{ExecutorInstances, RegisterExecutor};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{
    CheckpointReply, CheckpointRequest, ExecCommand, Heartbeat, HeartbeatAck, LogEntry,
    LogsRequest, LogsResponse, Report, ReportPhase,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

const USAGE: &str = "qm-executor [--config FILE]

Launches and stops training processes for the scheduler. Settings (file keys,
or environment variables QM_EXECUTOR_<KEY>):
  executorId         QM_EXECUTOR_EXECUTOR_ID        required (letters, digits, - and _)
  jobQueue           QM_EXECUTOR_JOB_QUEUE          required
  instances          QM_EXECUTOR_INSTANCES          required, e.g.
                     [{\"instanceType\":\"ml.g5.xlarge\",\"count\":2,\"gpusPerInstance\":1}]
  gpus               QM_EXECUTOR_GPUS               GPU indices to hand out; default:
                                                    discovered with nvidia-smi when any
                                                    instance has gpusPerInstance > 0
  workDir            QM_EXECUTOR_WORK_DIR           default /tmp/qm-executor-<executorId>
  checkpointNode     QM_EXECUTOR_CHECKPOINT_NODE    default: the executor id
  advertiseAddress   QM_EXECUTOR_ADVERTISE_ADDRESS  how other nodes of a multi-node job
                                                    reach this one (QM_HOSTS); default:
                                                    the host name
  heartbeatSeconds   QM_EXECUTOR_HEARTBEAT_SECONDS  default 1
  runAsUser          QM_EXECUTOR_RUN_AS_USER        run every attempt as this uid (and
  runAsGroup         QM_EXECUTOR_RUN_AS_GROUP       gid); default: the executor's own
NATS connection (QM_NATS_<KEY> or QM_EXECUTOR_NATS_<KEY>):
  natsUrl natsPrincipal natsNkeyFile natsCreds natsUser natsPassword
  natsCaFile natsCertFile natsKeyFile

Commands are obeyed only when their epoch is the current scheduler lease's
(read from the qm_leader bucket, never taken from a message). A job sees
only PATH, HOME, LANG, LC_ALL, TZ and TMPDIR of the executor's environment,
plus its own environment and the QM_* variables.";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceSpec {
    pub instance_type: String,
    pub count: u32,
    #[serde(default)]
    pub gpus_per_instance: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    pub executor_id: String,
    pub job_queue: String,
    pub instances: Vec<InstanceSpec>,
    pub gpus: Option<Vec<u32>>,
    pub work_dir: String,
    pub checkpoint_node: String,
    pub advertise_address: String,
    pub heartbeat_seconds: u64,
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            executor_id: String::new(),
            job_queue: String::new(),
            instances: Vec::new(),
            gpus: None,
            work_dir: String::new(),
            checkpoint_node: String::new(),
            advertise_address: String::new(),
            heartbeat_seconds: 1,
            run_as_user: None,
            run_as_group: None,
        }
    }
}

impl settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if let Err(e) = subjects::token(&self.executor_id) {
            p.push(format!("executorId: {e}"));
        }
        if let Err(e) = subjects::token(&self.job_queue) {
            p.push(format!("jobQueue: {e}"));
        }
        if !self.checkpoint_node.is_empty() {
            if let Err(e) = subjects::token(&self.checkpoint_node) {
                p.push(format!("checkpointNode: {e}"));
            }
        }
        if self.instances.is_empty() {
            p.push("instances: at least one {instanceType, count} is required".into());
        }
        for (i, inst) in self.instances.iter().enumerate() {
            if inst.instance_type.is_empty() {
                p.push(format!("instances[{i}].instanceType: is required"));
            }
            if inst.count == 0 {
                p.push(format!("instances[{i}].count: must be >= 1"));
            }
        }
        if self.heartbeat_seconds == 0 {
            p.push("heartbeatSeconds: must be >= 1".into());
        }
        if self.run_as_user.is_some() != self.run_as_group.is_some() {
            p.push("runAsUser and runAsGroup: give both or neither".into());
        }
        p
    }
}

/// A running attempt: how to stop it.
struct Running {
    stop: watch::Sender<Option<u64>>,
    instance_type: String,
    slots: Vec<u32>,
    /// The job's grace period, for stops the executor decides itself.
    grace_seconds: u64,
    /// The checkpoint service's request for this attempt, when this node
    /// syncs its checkpoints (rank 0 of a job with a checkpointConfig).
    sync: Option<CheckpointRequest>,
}

pub struct Executor {
    settings: Settings,
    client: async_nats::Client,
    /// Who this executor is to NATS (registers as it).
    principal: String,
    incarnation: String,
    /// GPU indices per instance slot, per type.
    gpus: BTreeMap<String, Vec<Vec<u32>>>,
    attempts: Mutex<HashMap<(String, u32), Running>>,
    /// Attempts that ran here and ended: a repeated start is ignored.
    finished: Mutex<HashSet<(String, u32)>>,
    /// The scheduler's lease, where the epoch commands must carry is read.
    leader: async_nats::jetstream::kv::Store,
    /// The lease's epoch as last read, and when.
    epoch: Mutex<Option<(u64, tokio::time::Instant)>>,
    reports: mpsc::UnboundedSender<Report>,
    /// Shutting down: attempts end without reports; withdrawing the
    /// instances afterwards ends them HOST_LOST, so they are requeued (a
    /// trainer exiting 0 after SIGTERM must not read as success).
    draining: std::sync::atomic::AtomicBool,
}

impl Executor {
    fn registration(&self, draining: bool) -> RegisterExecutor {
        let instances = if draining {
            Vec::new()
        } else {
            self.settings
                .instances
                .iter()
                .map(|i| ExecutorInstances {
                    instance_type: i.instance_type.clone(),
                    count: i.count,
                    gpus: self.gpus.get(&i.instance_type).cloned().unwrap_or_default(),
                })
                .collect()
        };
        RegisterExecutor {
            executor_id: self.settings.executor_id.clone(),
            job_queue: self.settings.job_queue.clone(),
            instances,
            incarnation: self.incarnation.clone(),
            checkpoint_node: Some(self.settings.checkpoint_node.clone()),
            address: Some(self.settings.advertise_address.clone()),
        }
    }

    /// Registers through admission, retrying until it is accepted (when
    /// draining for shutdown, for 15 s at most: the scheduler's heartbeat
    /// timeout ends the attempts anyway).
    async fn register(&self, draining: bool) {
        let client = Client::new(self.client.clone(), self.principal.clone());
        let mut delay = Duration::from_millis(200);
        let give_up = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            if draining && tokio::time::Instant::now() > give_up {
                tracing::warn!(
                    "could not withdraw the instances; the scheduler will time this executor out"
                );
                return;
            }
            match client
                .call::<_, serde_json::Value>(
                    Operation::RegisterExecutor,
                    &self.registration(draining),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(draining, "registered with the scheduler");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "registration failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    fn report(&self, job_id: &str, attempt: u32, phase: ReportPhase) -> Report {
        Report {
            executor_id: self.settings.executor_id.clone(),
            job_id: job_id.into(),
            attempt,
            phase,
            exit_code: None,
            signal: None,
            restored: None,
            error: None,
        }
    }

    fn send(&self, r: Report) {
        let _ = self.reports.send(r);
    }

    async fn checkpoint(
        &self,
        op: &str,
        req: &CheckpointRequest,
        tries: u32,
    ) -> Result<CheckpointReply, String> {
        let client = Client {
            nats: self.client.clone(),
            timeout: Duration::from_secs(120),
            principal: self.principal.clone(),
        };
        let subject = subjects::checkpoint_request(&self.settings.checkpoint_node, op)
            .map_err(|e| e.to_string())?;
        let body: bytes::Bytes = serde_json::to_vec(req).map_err(|e| e.to_string())?.into();
        let mut last = String::new();
        for i in 0..tries {
            match client
                .request_raw::<CheckpointReply>(subject.clone(), body.clone(), "checkpoint")
                .await
            {
                Ok(r) => return Ok(r),
                Err(e) => {
                    last = e.to_string();
                    tracing::warn!(op, job = %req.job_id, error = %last, "checkpoint service call failed");
                    tokio::time::sleep(Duration::from_millis(500 * u64::from(i + 1))).await;
                }
            }
        }
        Err(last)
    }

    fn attempt_dir(&self, job_id: &str, attempt: u32) -> PathBuf {
        PathBuf::from(&self.settings.work_dir)
            .join(job_id)
            .join(format!("attempt-{attempt}"))
    }

    /// The epoch of the scheduler's current lease. A cached value is used
    /// while it matches what a command says and is under two seconds old;
    /// anything else is read again from the lease itself.
    async fn lease_epoch(&self, claimed: u64) -> Option<u64> {
        let cached = self.epoch.lock().ok().and_then(|e| *e);
        if let Some((epoch, at)) = cached {
            if epoch == claimed && at.elapsed() < Duration::from_secs(2) {
                return Some(epoch);
            }
        }
        let entry = match self.leader.entry(qm_wire::system::LEADER_KEY).await {
            Ok(Some(e)) if e.operation == async_nats::jetstream::kv::Operation::Put => e,
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the scheduler lease");
                return cached.map(|(epoch, _)| epoch);
            }
        };
        let lease: qm_wire::system::LeaderLease = serde_json::from_slice(&entry.value).ok()?;
        let epoch = lease.epoch_at(entry.revision);
        if let Ok(mut e) = self.epoch.lock() {
            *e = Some((epoch, tokio::time::Instant::now()));
        }
        Some(epoch)
    }

    async fn command(self: &Arc<Self>, cmd: ExecCommand) {
        let (epoch, job_id) = match &cmd {
            ExecCommand::Start { epoch, job_id, .. } | ExecCommand::Stop { epoch, job_id, .. } => {
                (*epoch, job_id.clone())
            }
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
                ..
            } => {
                let grace_seconds = grace_seconds.unwrap_or(qm_core::DEFAULT_GRACE_PERIOD_SECS);
                let key = (job_id.clone(), attempt);
                let config = checkpoint_config.unwrap_or_default();
                let local = config.local_path.as_deref().unwrap_or("checkpoint");
                // Admission checks localPath; a command that bypassed it
                // must still not write outside the attempt's directory.
                let checkpoint_dir = qm_wire::messages::check_local_path(local)
                    .map(|()| self.attempt_dir(&job_id, attempt).join(local))
                    .map_err(|e| format!("checkpointConfig.localPath: {e}"));
                let checkpoint = match &checkpoint_dir {
                    Ok(dir) if checkpoints => Some(CheckpointRequest {
                        job_queue: job_queue.clone(),
                        quota_share_name: quota_share_name.clone(),
                        job_id: job_id.clone(),
                        attempt,
                        dir: dir.display().to_string(),
                        s3_uri: config.s3_uri.clone(),
                    }),
                    _ => None,
                };
                let gpus: Vec<u32> = slots
                    .iter()
                    .flat_map(|s| {
                        self.gpus
                            .get(&instance_type)
                            .and_then(|g| g.get(*s as usize))
                            .cloned()
                            .unwrap_or_default()
                    })
                    .collect();
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
                };
                let (tx, rx) = watch::channel(None);
                {
                    let finished = self
                        .finished
                        .lock()
                        .map(|f| f.contains(&key))
                        .unwrap_or(true);
                    let Ok(mut attempts) = self.attempts.lock() else {
                        return;
                    };
                    if finished || attempts.contains_key(&key) {
                        return; // idempotent per (job, attempt)
                    }
                    attempts.insert(
                        key,
                        Running {
                            stop: tx,
                            instance_type,
                            slots,
                            grace_seconds,
                            sync: launch.syncs_checkpoints().cloned(),
                        },
                    );
                }
                let me = Arc::clone(self);
                tokio::spawn(async move { me.run_attempt(launch, rx).await });
            }
            ExecCommand::Stop {
                job_id,
                attempt,
                grace_seconds,
                reason,
                ..
            } => {
                if let Ok(attempts) = self.attempts.lock() {
                    if let Some(r) = attempts.get(&(job_id.clone(), attempt)) {
                        if r.stop.borrow().is_none() {
                            tracing::info!(job = %job_id, attempt, grace_seconds, %reason, "stopping");
                        }
                        let _ = r.stop.send(Some(grace_seconds));
                    }
                }
            }
        }
    }

    async fn run_attempt(
        self: Arc<Self>,
        launch: process::Launch,
        mut stop: watch::Receiver<Option<u64>>,
    ) {
        let (job_id, attempt) = (launch.job_id.clone(), launch.attempt);
        let dir = self.attempt_dir(&job_id, attempt);
        let mut ended = self.report(&job_id, attempt, ReportPhase::Ended);
        let ckpt_dir = match &launch.checkpoint_dir {
            Ok(d) => d.clone(),
            Err(e) => {
                ended.error = Some(e.clone());
                return self.finish(ended);
            }
        };
        if let Err(e) = std::fs::create_dir_all(&ckpt_dir) {
            ended.error = Some(format!("cannot create {}: {e}", ckpt_dir.display()));
            return self.finish(ended);
        }
        if let Some((uid, gid)) = launch.run_as {
            // The unprivileged process writes its output and checkpoints.
            for d in [&dir, &ckpt_dir] {
                if let Err(e) = std::os::unix::fs::chown(d, Some(uid), Some(gid)) {
                    ended.error = Some(format!("cannot hand {} to uid {uid}: {e}", d.display()));
                    return self.finish(ended);
                }
            }
        }
        let restored = if let Some(request) = &launch.checkpoint {
            match self.checkpoint("restore", request, 5).await {
                Ok(r) => r,
                Err(e) => {
                    ended.error = Some(format!("checkpoint restore failed: {e}"));
                    return self.finish(ended);
                }
            }
        } else {
            CheckpointReply::default()
        };
        let mut starting = self.report(&job_id, attempt, ReportPhase::Starting);
        starting.restored = restored.checkpoint.clone();
        self.send(starting);
        let stopped = stop.borrow().is_some();
        if stopped {
            return self.finish(ended); // stopped before it launched
        }
        let mut child = match process::spawn(&launch, &dir, &ckpt_dir) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(job = %job_id, attempt, error = %e, "launch failed");
                ended.error = Some(e);
                if let Some(request) = launch.syncs_checkpoints() {
                    let _ = self.checkpoint("flush", request, 3).await;
                }
                return self.finish(ended);
            }
        };
        tracing::info!(job = %job_id, attempt, pid = child.id(), restored = ?restored.checkpoint.as_ref().map(|c| c.seq), "launched");
        self.send(self.report(&job_id, attempt, ReportPhase::Running));
        if let Some(request) = launch.syncs_checkpoints() {
            if let Err(e) = self.checkpoint("track", request, 3).await {
                tracing::warn!(job = %job_id, error = %e, "checkpoint tracking not started");
            }
        }
        let status = process::wait_or_stop(&mut child, &mut stop).await;
        ended.exit_code = status.0;
        ended.signal = status.1;
        tracing::info!(job = %job_id, attempt, exit_code = ?status.0, signal = ?status.1, "process ended");
        let Some(request) = launch.syncs_checkpoints() else {
            return self.finish(ended);
        };
        if let Err(e) = self.checkpoint("flush", request, 5).await {
            tracing::error!(job = %job_id, attempt, error = %e, "final checkpoint flush failed; the next attempt restores the last committed one");
        }
        self.finish(ended);
    }

    fn finish(&self, ended: Report) {
        let key = (ended.job_id.clone(), ended.attempt);
        if let Ok(mut a) = self.attempts.lock() {
            a.remove(&key);
        }
        if let Ok(mut f) = self.finished.lock() {
            if f.len() > 100_000 {
                f.clear();
            }
            f.insert(key);
        }
        if !self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            self.send(ended);
        }
    }

    fn held(&self) -> Vec<(String, u32)> {
        self.attempts
            .lock()
            .map(|a| a.keys().cloned().collect())
            .unwrap_or_default()
    }

    async fn heartbeats(self: Arc<Self>) {
        let subject = match subjects::executor_heartbeat(&self.settings.executor_id) {
            Ok(s) => s,
            Err(_) => return,
        };
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.heartbeat_seconds));
        let mut beats: u64 = 0;
        loop {
            tick.tick().await;
            beats += 1;
            let hb = Heartbeat {
                executor_id: self.settings.executor_id.clone(),
                incarnation: self.incarnation.clone(),
                attempts: self.held(),
            };
            let Ok(body) = serde_json::to_vec(&hb) else {
                continue;
            };
            let request = self.client.request(subject.clone(), body.into());
            if let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_secs(2), request).await {
                if let Ok(ack) = serde_json::from_slice::<HeartbeatAck>(&reply.payload) {
                    if !ack.known {
                        tracing::info!("the scheduler does not know this executor; registering");
                        self.register(false).await;
                    }
                }
            }
            // Re-assert checkpoint tracking now and then (the checkpoint
            // service may have restarted).
            if beats % 5 == 0 {
                let tracked: Vec<CheckpointRequest> = self
                    .attempts
                    .lock()
                    .map(|a| a.values().filter_map(|r| r.sync.clone()).collect())
                    .unwrap_or_default();
                for request in tracked {
                    let me = Arc::clone(&self);
                    tokio::spawn(async move {
                        let _ = me.checkpoint("track", &request, 1).await;
                    });
                }
            }
        }
    }

    fn logs(&self, req: &LogsRequest) -> Result<LogsResponse, String> {
        subjects::token(&req.job_id).map_err(|e| format!("jobId: {e}"))?;
        let dir = self.attempt_dir(&req.job_id, req.attempt);
        if !dir.exists() {
            return Err(format!(
                "no logs of attempt {} of job {} on executor {}",
                req.attempt, req.job_id, self.settings.executor_id
            ));
        }
        let tail = req.tail_bytes.unwrap_or(64 * 1024);
        let (stdout, cut_out) = process::tail(&dir.join("stdout.log"), tail);
        let (stderr, cut_err) = process::tail(&dir.join("stderr.log"), tail);
        Ok(LogsResponse {
            stdout,
            stderr,
            truncated: cut_out || cut_err,
        })
    }

    /// SIGTERM: stop every attempt with its job's own grace period, flush
    /// their checkpoints, and withdraw the instances so the scheduler
    /// requeues them at once.
    async fn drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let running: Vec<(String, u32)> = self.held();
        let mut longest = 0;
        if let Ok(a) = self.attempts.lock() {
            for r in a.values() {
                let _ = r.stop.send(Some(r.grace_seconds));
                longest = longest.max(r.grace_seconds);
                tracing::info!(instance_type = %r.instance_type, slots = ?r.slots, grace_seconds = r.grace_seconds, "stopping for shutdown");
            }
        }
        // Their grace, then time to flush checkpoints and report.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(longest + 10);
        while !self.held().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !running.is_empty() {
            tracing::info!(attempts = running.len(), "attempts stopped for shutdown");
        }
    }
}

/// Appends reports to the log in order, each until acknowledged.
async fn reporter(
    js: async_nats::jetstream::Context,
    subject: String,
    mut rx: mpsc::UnboundedReceiver<Report>,
) {
    // Whatever is queued goes out together, pipelined (one round trip for
    // the batch, not one per report).
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 512).await > 0 {
        let appends = batch
            .drain(..)
            .filter_map(|r: Report| {
                let id = format!("{}-{}-{}-{:?}", r.executor_id, r.job_id, r.attempt, r.phase);
                let body = serde_json::to_vec(&LogEntry::Report(r)).ok()?;
                Some((subject.clone(), body.into(), id))
            })
            .collect();
        nats::append_batch_durably(&js, appends).await;
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (mut settings, nats_settings) = match qm_service::start::<Settings>("executor", USAGE) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if settings.work_dir.is_empty() {
        settings.work_dir = format!("/tmp/qm-executor-{}", settings.executor_id);
    }
    if settings.advertise_address.is_empty() {
        settings.advertise_address = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| settings.executor_id.clone());
    }
    if settings.checkpoint_node.is_empty() {
        settings.checkpoint_node = settings.executor_id.clone();
    }
    let gpus = match gpus::assign(&settings.instances, settings.gpus.clone()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("qm-executor: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&settings.work_dir) {
        eprintln!(
            "qm-executor: cannot create workDir {}: {e}",
            settings.work_dir
        );
        return std::process::ExitCode::from(2);
    }
    let (client, principal) = match qm_service::connect(&nats_settings, "executor").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let js = async_nats::jetstream::new(client.clone());
    let leader = nats::open_bucket(&js, subjects::LEADER_BUCKET).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let report_subject = match subjects::log_executor(&settings.executor_id) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qm-executor: executorId: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let reporter = tokio::spawn(reporter(js, report_subject, rx));
    let executor = Arc::new(Executor {
        incarnation: qm_service::random_hex(),
        gpus,
        client: client.clone(),
        principal,
        attempts: Mutex::new(HashMap::new()),
        finished: Mutex::new(HashSet::new()),
        leader,
        epoch: Mutex::new(None),
        reports: tx,
        draining: std::sync::atomic::AtomicBool::new(false),
        settings,
    });
    let (Ok(mut commands), Ok(mut logs)) = (
        client
            .subscribe(
                subjects::executor_command(&executor.settings.executor_id).unwrap_or_default(),
            )
            .await,
        client
            .subscribe(subjects::executor_logs(&executor.settings.executor_id).unwrap_or_default())
            .await,
    ) else {
        eprintln!("qm-executor: cannot subscribe");
        return std::process::ExitCode::from(1);
    };
    executor.register(false).await;
    let beats = tokio::spawn(Arc::clone(&executor).heartbeats());
    tracing::info!(executor = %executor.settings.executor_id, incarnation = %executor.incarnation, "executor ready");
    let shutdown = nats::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            cmd = commands.next() => {
                let Some(cmd) = cmd else { break };
                match serde_json::from_slice::<ExecCommand>(&cmd.payload) {
                    Ok(c) => executor.command(c).await,
                    Err(e) => tracing::warn!(error = %e, "unreadable command ignored"),
                }
            }
            req = logs.next() => {
                let Some(req) = req else { break };
                let r = qm_service::api::decode::<LogsRequest>(&req.payload)
                    .and_then(|l| executor.logs(&l).map_err(|e| qm_service::api::error(qm_wire::messages::ErrorCode::NotFound, e)));
                qm_service::api::respond(&client, &req, &r).await;
            }
        }
    }
    tracing::info!("shutting down: stopping attempts and withdrawing instances");
    executor.drain().await;
    executor.register(true).await;
    beats.abort();
    drop(executor);
    // Let the reporter deliver what is queued.
    let _ = tokio::time::timeout(Duration::from_secs(10), reporter).await;
    let _ = client.flush().await;
    std::process::ExitCode::SUCCESS
}
