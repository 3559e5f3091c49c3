//! What a checkpoint service shows an operator (see `docs/metrics.md`):
//! commits, restores, bytes, failures, and whether S3 answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use prometheus::{HistogramVec, IntCounterVec, IntGauge};
use qm_checkpoint::s3::S3Store;
use qm_checkpoint::store::ObjectStore;
use qm_service::observe::{counter, histogram, register, SLOW_SECONDS};

pub struct Metrics {
    pub commits: IntCounterVec,
    pub commit: HistogramVec,
    pub bytes: IntCounterVec,
    pub restore: HistogramVec,
    pub jobs: IntGauge,
    pub s3_up: IntGauge,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    Metrics {
    commits: counter(
        "qm_checkpoint_commits_total",
        "Checkpoint commits, by result: committed, or failed (S3 error, unreadable directory), refused (a later attempt committed).",
        &["result"],
    ),
    commit: histogram(
        "qm_checkpoint_commit_duration_seconds",
        "Time to commit a changed checkpoint directory (upload of new files and the manifest).",
        &["result"],
        SLOW_SECONDS,
    ),
    bytes: counter(
        "qm_checkpoint_bytes_total",
        "Bytes of checkpoints committed and restored (the files' sizes; a file already stored is not uploaded again).",
        &["direction"],
    ),
    restore: histogram(
        "qm_checkpoint_restore_duration_seconds",
        "Time to restore a job's newest checkpoint before its attempt starts, by result: restored, none (nothing to restore) or failed.",
        &["result"],
        SLOW_SECONDS,
    ),
    jobs: register(IntGauge::new(
        "qm_checkpoint_jobs",
        "Jobs this service holds state for (restored or tracked attempts not yet flushed).",
    )),
    s3_up: register(IntGauge::new(
        "qm_checkpoint_s3_up",
        "1 when the last probe of the S3 bucket (every 10 s) answered, 0 otherwise.",
    )),
}
});

/// Whether the bucket answered the last probe.
#[derive(Clone, Default)]
pub struct S3Health(Arc<AtomicBool>);

impl S3Health {
    pub fn up(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Probes the bucket now and every 10 s (a listing of one small
    /// prefix, bounded at 5 s).
    pub fn watch(&self, store: S3Store) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let probe = store.list("qm-readyz/");
                let up = matches!(
                    tokio::time::timeout(Duration::from_secs(5), probe).await,
                    Ok(Ok(_))
                );
                if up != me.up() {
                    if up {
                        tracing::info!("S3 answers");
                    } else {
                        tracing::warn!("S3 does not answer");
                    }
                }
                me.0.store(up, Ordering::SeqCst);
                METRICS.s3_up.set(i64::from(up));
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        });
    }
}
