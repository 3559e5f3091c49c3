//! What keeps the leader's state and the log bounded: snapshots (written
//! beside the loop, after every event they cover is stored), pruning old
//! snapshots and truncating the log behind the older kept one, and when the
//! archive of finished jobs is next due. The loop decides *when* and takes
//! what it must from the state (a clone for a snapshot; the records of the
//! jobs due for the archive); encoding and everything that waits on NATS
//! runs in a task, one of each kind at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::object_store::ObjectStore;
use async_nats::jetstream::stream::Stream;
use futures::StreamExt;

use crate::snapshot::{self, Image};
use crate::state::{Cut, Positions};

/// How often the leader looks for finished jobs to archive: often, and a
/// bounded batch each time, so the archive keeps pace with finishing jobs
/// in small steps rather than in bursts that queue live traffic behind them.
const ARCHIVE_EVERY: Duration = Duration::from_millis(250);
/// Most jobs archived at once.
pub const ARCHIVE_BATCH: usize = 1_000;
/// Most archive records awaiting the server's acknowledgement at a time.
const ARCHIVE_WINDOW: usize = 64;

/// The leader's upkeep bookkeeping.
pub struct Upkeep {
    /// Log entries applied since the last snapshot was started.
    since_snapshot: u64,
    last_snapshot: Instant,
    task: Option<tokio::task::JoinHandle<()>>,
    /// False once this leader stopped leading: its snapshot task, if still
    /// running, then stores its snapshot but truncates nothing.
    leading: Arc<AtomicBool>,
    last_archive: Option<Instant>,
    /// The task storing a batch of archive records, if one runs.
    archiving: Option<tokio::task::JoinHandle<()>>,
    /// Snapshots found damaged at the start (removed after this leader's
    /// first snapshot is stored).
    pub damaged: Vec<String>,
}

impl Upkeep {
    pub fn new() -> Upkeep {
        Upkeep {
            since_snapshot: 0,
            last_snapshot: Instant::now(),
            task: None,
            leading: Arc::new(AtomicBool::new(true)),
            last_archive: None,
            archiving: None,
            damaged: Vec::new(),
        }
    }

    pub fn applied(&mut self, entries: u64) {
        self.since_snapshot += entries;
    }

    /// Whether a snapshot is due: `every` entries since the last, or some
    /// entries and `interval` since it; never while one is being written.
    pub fn snapshot_due(&self, every: u64, interval: Duration) -> bool {
        if self.task.as_ref().is_some_and(|t| !t.is_finished()) {
            return false;
        }
        self.since_snapshot >= every
            || (self.since_snapshot > 0 && self.last_snapshot.elapsed() >= interval)
    }

    /// Whether to look for finished jobs to archive now (never while a
    /// batch is being stored).
    pub fn archive_due(&mut self) -> bool {
        if self.archiving.as_ref().is_some_and(|t| !t.is_finished()) {
            return false;
        }
        if self
            .last_archive
            .is_some_and(|t| t.elapsed() < ARCHIVE_EVERY)
        {
            return false;
        }
        self.last_archive = Some(Instant::now());
        true
    }

    /// Encodes and stores the records of `jobs` on the archive stream
    /// beside the loop (one record per job, at most [`ARCHIVE_WINDOW`]
    /// unacknowledged), then tells the loop (`done`) which jobs they were.
    pub fn archive(
        &mut self,
        js: async_nats::jetstream::Context,
        jobs: Vec<qm_wire::messages::ServiceJob>,
        done: Option<tokio::sync::mpsc::UnboundedSender<Vec<String>>>,
    ) {
        self.archiving = Some(tokio::spawn(async move {
            let mut records = Vec::with_capacity(jobs.len());
            let mut job_ids = Vec::with_capacity(jobs.len());
            for job in &jobs {
                let share = match job.quota_share_name.as_str() {
                    "" => "-", // rejected before it had a share
                    s => s,
                };
                let (Ok(subject), Ok(body)) = (
                    qm_wire::subjects::archived_job(&job.job_queue, share, &job.job_id),
                    serde_json::to_vec(job),
                ) else {
                    tracing::warn!(job = %job.job_id, "job cannot be archived (its names cannot be a subject); kept");
                    continue;
                };
                records.push((subject, body.into(), async_nats::HeaderMap::new()));
                job_ids.push(job.job_id.clone());
            }
            qm_service::nats::publish_windowed_durably(&js, records, ARCHIVE_WINDOW).await;
            if let Some(done) = done {
                let _ = done.send(job_ids);
            }
        }));
    }

    /// Starts writing a snapshot of `image` at `cut` once `flushed` says
    /// every event before it is stored; then keeps the newest `keep`
    /// snapshots and truncates the log behind the oldest kept one (but
    /// never entries younger than `log_retention`, which `qm audit` reads).
    #[allow(clippy::too_many_arguments)]
    pub fn snapshot(
        &mut self,
        store: ObjectStore,
        log: Stream,
        image: Image,
        (cut, positions): (Cut, Positions),
        holder: String,
        keep: usize,
        log_retention: Duration,
        flushed: tokio::sync::oneshot::Receiver<()>,
    ) {
        self.since_snapshot = 0;
        self.last_snapshot = Instant::now();
        let leading = self.leading.clone();
        let mut damaged = std::mem::take(&mut self.damaged);
        // One stored again under the same cut was replaced by this one.
        damaged.retain(|n| *n != snapshot::name(cut));
        self.task = Some(tokio::spawn(async move {
            if flushed.await.is_err() {
                return; // the publisher is gone: so is this leader
            }
            let started = Instant::now();
            // Encoded on a thread of its own at a lower priority (nice 10):
            // it takes what the loop, NATS and the executors leave over, so
            // a snapshot does not queue live work behind it.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("qm-snapshot".into())
                .spawn(move || {
                    lower_priority();
                    let bytes =
                        snapshot::encode(&image, cut, positions, qm_service::now_ms(), &holder);
                    let _ = tx.send(bytes);
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "snapshot not encoded (no thread); the next one is tried later");
                return;
            }
            let Ok(bytes) = rx.await else {
                return;
            };
            let encoded = started.elapsed();
            if let Err(e) = snapshot::store(&store, cut, &bytes).await {
                tracing::warn!(error = %e, "snapshot not stored; the next one is tried later");
                return;
            }
            let stored = started.elapsed();
            if !leading.load(Ordering::SeqCst) {
                return;
            }
            let purged = match truncate(&store, &log, keep, &damaged, log_retention).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "old snapshots or log entries not removed; tried again after the next snapshot");
                    None
                }
            };
            tracing::info!(
                snapshot = %snapshot::name(cut),
                bytes = bytes.len(),
                encode_ms = encoded.as_millis() as u64,
                store_ms = stored.as_millis() as u64,
                log_truncated_below = ?purged,
                "snapshot stored"
            );
        }));
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.leading.store(false, Ordering::SeqCst);
    }
}

/// Keeps `keep` snapshots and purges the log below what the oldest kept
/// one needs and below the first entry younger than `retention`. Returns
/// the sequence the log now starts at, if it purged.
async fn truncate(
    store: &ObjectStore,
    log: &Stream,
    keep: usize,
    damaged: &[String],
    retention: Duration,
) -> Result<Option<u64>, async_nats::Error> {
    let Some(needed) = snapshot::prune(store, keep, damaged).await? else {
        return Ok(None);
    };
    let floor = needed
        .min(first_since(log, retention).await?)
        .min(audit_floor(log).await);
    let first = log.clone().info().await?.state.first_sequence;
    if floor <= first {
        return Ok(None);
    }
    log.purge().sequence(floor).await?;
    Ok(Some(floor))
}

/// The first log sequence admission has not yet copied to the audit stream
/// (`u64::MAX`: it has copied everything, or this is a deployment without
/// the copier, whose audit reads the log as before): the log is never
/// truncated past an accepted write whose audit record is not stored.
async fn audit_floor(log: &Stream) -> u64 {
    let info = match log.consumer_info(qm_wire::subjects::AUDIT_COPIER).await {
        Ok(i) => i,
        Err(e) => {
            tracing::debug!(error = %e, "no audit copier on the log");
            return u64::MAX;
        }
    };
    if info.num_pending == 0 && info.num_ack_pending == 0 {
        return u64::MAX;
    }
    info.ack_floor.stream_sequence + 1
}

/// The sequence of the first log entry stored less than `age` ago (the
/// next sequence if none is).
async fn first_since(log: &Stream, age: Duration) -> Result<u64, async_nats::Error> {
    let last = log.clone().info().await?.state.last_sequence;
    if age.is_zero() {
        return Ok(last + 1);
    }
    let start = time::OffsetDateTime::now_utc() - age;
    let mut consumer = log
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartTime { start_time: start },
            ..Default::default()
        })
        .await?;
    if consumer.info().await?.num_pending == 0 {
        return Ok(last + 1);
    }
    let mut messages = consumer.messages().await?;
    let first = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .map_err(|_| "the first recent log entry did not arrive in 10 s")?
        .ok_or("the log consumer ended")??;
    Ok(first.info()?.stream_sequence)
}

/// The archive's retention, read from its stream (zero if unreadable).
pub async fn archive_retention(archive: &Stream) -> Duration {
    match archive.clone().info().await {
        Ok(info) => info.config.max_age,
        Err(e) => {
            tracing::warn!(error = %e, "the archive's retention could not be read");
            Duration::ZERO
        }
    }
}

/// Lowers the calling thread's CPU priority to nice 10 (Linux sets it per
/// thread); a failure leaves it as it was.
fn lower_priority() {
    // SAFETY: setpriority only reads its integer arguments; on Linux, 0 as
    // `who` with PRIO_PROCESS means the calling thread.
    #[allow(unsafe_code)]
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
}
