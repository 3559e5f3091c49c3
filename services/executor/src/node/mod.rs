//! The node: its registration, heartbeats, the scheduler lease whose epoch
//! commands must carry, durable reports, and draining on shutdown.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::Retryable;
use qm_service::client::Client;
use qm_service::nats;
use qm_wire::messages::{ExecutorInstances, RegisterExecutor};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{
    AttemptKey, CheckpointRequest, Heartbeat, HeartbeatAck, LogEntry, Report, ReportPhase,
};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

mod attempts;
mod launch;

use crate::outbox::{fnv1a, report_id, Outbox};
use crate::settings::Settings;

/// A running attempt: how to stop it.
pub(crate) struct Running {
    pub(crate) stop: watch::Sender<Option<u64>>,
    pub(crate) instance_type: String,
    pub(crate) slots: Vec<u32>,
    /// The job's grace period, for stops the executor decides itself.
    pub(crate) grace_seconds: u64,
    /// The checkpoint service's request for this attempt, when this node
    /// syncs its checkpoints (rank 0 of a job with a checkpointConfig).
    pub(crate) sync: Option<CheckpointRequest>,
    /// Stopped by self-fencing: its end is reported as such (HOST_LOST).
    pub(crate) fenced: bool,
    /// Where its signals go (a process group or a container), once
    /// launched.
    pub(crate) target: Option<crate::runtime::SignalTarget>,
    /// Checkpoint-then-preempt: the process was sent its checkpoint signal
    /// (once per attempt; a resent command is not sent again).
    pub(crate) asked_to_checkpoint: bool,
    /// The attempt's span: what the executor sends for it later (a
    /// re-asserted `track`) continues the job's trace.
    pub(crate) span: tracing::Span,
}

pub struct Executor {
    pub(crate) settings: Settings,
    pub(crate) client: async_nats::Client,
    /// Who this executor is to NATS (registers as it).
    pub(crate) principal: String,
    pub(crate) incarnation: String,
    /// GPU indices per instance slot, per type.
    pub(crate) gpus: BTreeMap<String, Vec<Vec<u32>>>,
    /// `qm-supervise`, when this executor offers the process runtime.
    pub(crate) supervisor: Option<crate::process::Supervisor>,
    /// The container engine, when this executor offers that runtime.
    pub(crate) engine: crate::runtime::SharedEngine,
    pub(crate) attempts: Mutex<HashMap<AttemptKey, Running>>,
    /// Attempts that ran here and ended, with the end reported (None: it
    /// ended while draining and was not reported), for
    /// `finishedRetentionSeconds`: a repeated start is ignored, and a stop
    /// for one reports its end again.
    pub(crate) finished: Mutex<crate::record::Ended<AttemptKey, Option<Report>>>,
    /// The scheduler's lease, where the epoch commands must carry is read.
    pub(crate) leader: async_nats::jetstream::kv::Store,
    /// The lease's epoch as last read, and when.
    pub(crate) epoch: Mutex<Option<(u64, tokio::time::Instant)>>,
    pub(crate) reports: mpsc::UnboundedSender<Vec<Report>>,
    /// Every report queued and not yet stored by the log.
    pub(crate) outbox: Arc<Outbox>,
    /// Shutting down: attempts end without reports; withdrawing the
    /// instances afterwards ends them HOST_LOST, so they are requeued (a
    /// trainer exiting 0 after SIGTERM must not read as success).
    pub(crate) draining: std::sync::atomic::AtomicBool,
    /// When the last heartbeat the leader acknowledged (knowing this
    /// incarnation) was sent: the scheduler heard from this executor after
    /// that instant (local monotonic time, never compared across hosts).
    pub(crate) contact: Mutex<tokio::time::Instant>,
    /// Fenced: no acknowledged heartbeat for `fenceAfterSeconds`; every
    /// attempt was stopped and starts are refused until contact returns.
    pub(crate) fenced: std::sync::atomic::AtomicBool,
    /// The same deadline as `contact` gives, in the file every attempt's
    /// watcher reads (`fence.rs`): it holds when this executor's own loop
    /// does not run.
    pub(crate) fence: qm_fence::Fence,
}

impl Executor {
    /// Removes the directories of attempts that ended more than
    /// `finishedRetentionSeconds` ago, every [`crate::sweep::SWEEP_EVERY`]
    /// (see `sweep.rs`).
    pub(crate) async fn sweep_attempt_dirs(self: Arc<Self>) {
        let retention = Duration::from_secs(self.settings.finished_retention_seconds);
        let mut every = tokio::time::interval(crate::sweep::SWEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let running: std::collections::HashSet<(String, u32)> = match self.attempts.lock() {
                Ok(a) => a.keys().map(|k| (k.job_id.clone(), k.attempt)).collect(),
                Err(_) => return,
            };
            let work_dir = std::path::PathBuf::from(&self.settings.work_dir);
            let removed = tokio::task::spawn_blocking(move || {
                crate::sweep::sweep(&work_dir, &running, retention, std::time::SystemTime::now())
            })
            .await
            .unwrap_or(0);
            if removed > 0 {
                tracing::info!(
                    removed,
                    "directories of attempts that ended long ago removed"
                );
            }
            if let Some(engine) = &self.engine {
                // Containers no attempt of this incarnation accounts for
                // (a launch interrupted between create and record).
                let allowed = || {
                    let attempts = self.attempts.lock().ok()?;
                    Some(
                        attempts
                            .keys()
                            .map(|k| (k.job_id.clone(), k.attempt))
                            .collect(),
                    )
                };
                engine.reconcile(&allowed).await;
            }
        }
    }
    pub(crate) fn registration(&self, draining: bool) -> RegisterExecutor {
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
            service_environment: (!self.settings.service_environment.is_empty())
                .then(|| self.settings.service_environment.clone()),
            instances,
            incarnation: self.incarnation.clone(),
            checkpoint_node: Some(self.settings.checkpoint_node.clone()),
            address: Some(self.settings.advertise_address.clone()),
            fence_after_seconds: Some(self.settings.fence_after_seconds),
            runtimes: self.settings.runtimes.clone(),
        }
    }

    /// Registers through admission, retrying until it is accepted (when
    /// draining for shutdown, no new try starts after 15 s, so with the
    /// client's 10 s timeout it gives up within 25 s: the scheduler's
    /// heartbeat timeout ends the attempts anyway).
    pub(crate) async fn register(&self, draining: bool) {
        let client = Client::new(self.client.clone(), self.principal.clone());
        let give_up = tokio::time::Instant::now() + Duration::from_secs(15);
        let registration = self.registration(draining);
        let call =
            || client.call::<_, serde_json::Value>(Operation::RegisterExecutor, &registration);
        let registered = call
            .retry(qm_service::retry::forever(Duration::from_millis(200)))
            .when(|_| !draining || tokio::time::Instant::now() < give_up)
            .notify(|e, _| tracing::warn!(error = %e, "registration failed; retrying"))
            .await;
        match registered {
            Ok(_) => tracing::info!(draining, "registered with the scheduler"),
            Err(e) => tracing::warn!(
                error = %e,
                "could not withdraw the instances; the scheduler will time this executor out"
            ),
        }
    }

    pub(crate) fn report(&self, job_id: &str, attempt: u32, phase: ReportPhase) -> Report {
        Report::new(&self.settings.executor_id, job_id, attempt, phase)
    }

    pub(crate) fn send(&self, r: Report) {
        self.send_together(vec![r]);
    }

    /// Queues reports to be appended together: with `batchReports` on they
    /// share one log entry (STARTING and RUNNING of a process that started
    /// at once: one stored message, two events).
    pub(crate) fn send_together(&self, reports: Vec<Report>) {
        for r in &reports {
            self.outbox.hold(r);
        }
        let _ = self.reports.send(reports);
    }

    /// The epoch of the scheduler's current lease. A cached value is used
    /// while it matches what a command says and is under two seconds old;
    /// anything else is read again from the lease itself.
    pub(crate) async fn lease_epoch(&self, claimed: u64) -> Option<u64> {
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

    pub(crate) fn held(&self) -> Vec<AttemptKey> {
        self.attempts
            .lock()
            .map(|a| a.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) async fn heartbeats(self: Arc<Self>) {
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
            let sent = tokio::time::Instant::now();
            let sent_boot = qm_fence::boot_now_ns();
            let request = self.client.request(subject.clone(), body.into());
            let answered = tokio::time::timeout(Duration::from_secs(2), request).await;
            crate::observe::METRICS
                .heartbeats
                .with_label_values(&[match &answered {
                    Ok(Ok(_)) => "acknowledged",
                    _ => "missed",
                }])
                .inc();
            if let Ok(Ok(reply)) = answered {
                if let Ok(ack) = serde_json::from_slice::<HeartbeatAck>(&reply.payload) {
                    if ack.known {
                        if let Ok(mut c) = self.contact.lock() {
                            *c = (*c).max(sent);
                        }
                        if let Err(e) = self.fence.renew(sent_boot) {
                            // The watchers keep the last deadline they read:
                            // they fence when it passes.
                            tracing::error!(path = %self.fence.path().display(), error = %e, "cannot renew the fence deadline");
                        }
                    } else {
                        tracing::info!("the scheduler does not know this executor; registering");
                        self.register(false).await;
                    }
                }
            }
            // Re-assert checkpoint tracking now and then (the checkpoint
            // service may have restarted).
            if beats % 5 == 0 {
                let tracked: Vec<(CheckpointRequest, tracing::Span)> = self
                    .attempts
                    .lock()
                    .map(|a| {
                        a.values()
                            .filter_map(|r| r.sync.clone().map(|s| (s, r.span.clone())))
                            .collect()
                    })
                    .unwrap_or_default();
                for (request, span) in tracked {
                    let me = Arc::clone(&self);
                    tokio::spawn(
                        async move {
                            let _ = me.checkpoint("track", &request, 1).await;
                        }
                        .instrument(span),
                    );
                }
            }
        }
    }

    /// Self-fencing (ADR 0007): checks four times a second whether a
    /// heartbeat was acknowledged within `fenceAfterSeconds`. When none was,
    /// every attempt is stopped with its grace (SIGTERM, grace, SIGKILL)
    /// and its end reported as fenced, and starts are refused until a
    /// heartbeat is acknowledged again. The scheduler declares this executor
    /// lost only after the same deadline plus the longest grace and a
    /// margin, so a job never runs here and elsewhere at once.
    pub(crate) async fn fence_watch(self: Arc<Self>) {
        use std::sync::atomic::Ordering;
        let limit = Duration::from_secs(self.settings.fence_after_seconds);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let silent = self.contact.lock().map_or(Duration::ZERO, |c| c.elapsed());
            let fenced = self.fenced.load(Ordering::SeqCst);
            if silent > limit && !fenced {
                self.fenced.store(true, Ordering::SeqCst);
                let Ok(mut attempts) = self.attempts.lock() else {
                    continue;
                };
                tracing::error!(
                    seconds = silent.as_secs(),
                    attempts = attempts.len(),
                    "no heartbeat acknowledged by the scheduler: fencing (stopping every attempt; starts refused until contact returns)"
                );
                for (key, r) in attempts.iter_mut() {
                    r.fenced = true;
                    if r.stop.borrow().is_none() {
                        tracing::warn!(job = %key.job_id, attempt = key.attempt, grace_seconds = r.grace_seconds, "stopping: fenced");
                        let _ = r.stop.send(Some(r.grace_seconds));
                    }
                }
            } else if silent <= limit && fenced {
                self.fenced.store(false, Ordering::SeqCst);
                tracing::info!("heartbeats acknowledged again: no longer fenced");
            }
        }
    }

    /// SIGTERM: stop every attempt with its job's own grace period, flush
    /// their checkpoints, and withdraw the instances so the scheduler
    /// requeues them at once.
    pub(crate) async fn drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let running: Vec<AttemptKey> = self.held();
        let mut longest = 0;
        if let Ok(a) = self.attempts.lock() {
            for r in a.values() {
                let _ = r.stop.send(Some(r.grace_seconds));
                longest = longest.max(r.grace_seconds);
                tracing::info!(instance_type = %r.instance_type, slots = ?r.slots, grace_seconds = r.grace_seconds, "stopping for shutdown");
            }
        }
        // Their grace, then time to flush checkpoints and report.
        // (Graces come in commands: bounded as the core bounds them at submit.)
        let wait = longest.min(qm_core::MAX_GRACE_PERIOD_SECS) + 10;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
        while !self.held().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !running.is_empty() {
            tracing::info!(attempts = running.len(), "attempts stopped for shutdown");
        }
    }
}

/// Appends reports to the log in order, each until acknowledged, and tells
/// the outbox which were stored.
pub(crate) async fn reporter(
    js: async_nats::jetstream::Context,
    subject: String,
    mut rx: mpsc::UnboundedReceiver<Vec<Report>>,
    outbox: Arc<Outbox>,
    batch: bool,
) {
    // Whatever is queued goes out together, pipelined (one round trip for
    // the batch, not one per report), and with `batchReports` as few
    // entries as the size allows.
    let mut queued = Vec::new();
    while rx.recv_many(&mut queued, 512).await > 0 {
        let reports: Vec<Report> = queued.drain(..).flatten().collect();
        let ids: Vec<String> = reports.iter().map(report_id).collect();
        nats::append_batch_durably(&js, appends(&subject, reports, batch)).await;
        outbox.delivered(&ids);
    }
}

/// Most bytes of reports one `Reports` entry holds (a report's declared
/// result alone may be 16 KiB; NATS refuses messages over 1 MiB).
const BATCH_BYTES: usize = 256 * 1024;

/// Reports as log appends, each with its message id: one entry per report,
/// or (`batch`) consecutive reports together in `Reports` entries of at
/// most [`BATCH_BYTES`], whose id is made of its reports' ids (the same
/// batch sent again is stored once).
pub(crate) fn appends(subject: &str, reports: Vec<Report>, batch: bool) -> Vec<nats::Append> {
    let single = |r: Report| {
        let id = report_id(&r);
        let body = serde_json::to_vec(&LogEntry::Report(r)).ok()?;
        Some((subject.to_string(), bytes::Bytes::from(body), id))
    };
    if !batch {
        return reports.into_iter().filter_map(single).collect();
    }
    let mut groups: Vec<Vec<(Report, usize)>> = Vec::new();
    let mut bytes = 0;
    for r in reports {
        let size = serde_json::to_vec(&r).map_or(0, |b| b.len());
        match groups.last_mut() {
            Some(g) if bytes + size <= BATCH_BYTES => {
                bytes += size;
                g.push((r, size));
            }
            _ => {
                bytes = size;
                groups.push(vec![(r, size)]);
            }
        }
    }
    groups
        .into_iter()
        .filter_map(|mut g| {
            if g.len() == 1 {
                return single(g.pop()?.0);
            }
            let reports: Vec<Report> = g.into_iter().map(|(r, _)| r).collect();
            let ids: Vec<String> = reports.iter().map(report_id).collect();
            let h = fnv1a(ids.iter().flat_map(|id| id.bytes().chain([0])));
            let id = format!(
                "{}-batch-{}-{h:016x}",
                reports[0].executor_id,
                reports.len()
            );
            let body = serde_json::to_vec(&LogEntry::Reports { reports }).ok()?;
            Some((subject.to_string(), bytes::Bytes::from(body), id))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_wire::system::ReportPhase;

    fn decoded(append: &nats::Append) -> LogEntry {
        serde_json::from_slice(&append.1).expect("an entry")
    }

    fn reports(n: usize) -> Vec<Report> {
        (0..n)
            .map(|i| Report::new("node-1", &format!("j-{i}"), 1, ReportPhase::Running))
            .collect()
    }

    #[test]
    fn reports_queued_together_are_one_entry_when_batched() {
        let subject = "qm.v1.log.exec.node-1";
        // Not batched: one entry each, named by the report.
        let each = appends(subject, reports(3), false);
        assert_eq!(each.len(), 3);
        assert!(matches!(decoded(&each[0]), LogEntry::Report(_)));
        assert_eq!(each[0].2, report_id(&reports(1)[0]));
        // Batched: one entry, in order, bound to the executor's subject.
        let batched = appends(subject, reports(3), true);
        assert_eq!(batched.len(), 1);
        let mut entry = decoded(&batched[0]);
        entry.bind_to_subject(subject).expect("its own reports");
        let LogEntry::Reports { reports: got } = entry else {
            panic!("a batch")
        };
        assert_eq!(got, reports(3));
        // The same batch sent again has the same id (stored once); another
        // batch has another.
        assert_eq!(appends(subject, reports(3), true)[0].2, batched[0].2);
        assert_ne!(appends(subject, reports(2), true)[0].2, batched[0].2);
        // A batch of one is the plain entry, as an unbatched executor's.
        let one = appends(subject, reports(1), true);
        assert!(matches!(decoded(&one[0]), LogEntry::Report(_)));
        assert_eq!(one[0].2, each[0].2);
    }

    #[test]
    fn a_batch_is_split_before_it_grows_too_large() {
        // Results of 16 KiB each: 40 of them are 640 KiB.
        let big: Vec<Report> = reports(40)
            .into_iter()
            .map(|r| Report {
                result: Some("x".repeat(16 * 1024)),
                ..r
            })
            .collect();
        let batched = appends("qm.v1.log.exec.node-1", big.clone(), true);
        assert!(batched.len() >= 3, "{} entries", batched.len());
        assert!(batched.iter().all(|a| a.1.len() <= BATCH_BYTES + 1024));
        let mut back = Vec::new();
        for a in &batched {
            match decoded(a) {
                LogEntry::Reports { reports } => back.extend(reports),
                LogEntry::Report(r) => back.push(r),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back, big, "every report, in order");
    }
}
