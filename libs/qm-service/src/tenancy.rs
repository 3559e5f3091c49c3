//! The tenancy in effect, followed while the service runs (ADR 0020).
//!
//! A service starts with its tenancy file (or none) and then follows the
//! `qm_tenancy` bucket: each revision `qm tenancy apply` stores is put in
//! effect as soon as the bucket's watch delivers it (milliseconds), with no
//! restart. A stored revision that does not validate is logged and never
//! put in effect; the one before stays. A bucket that is not there (an
//! older admission, or NATS authorization from before this release) leaves
//! the file in effect, and is looked for again every few seconds.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use qm_tenancy::live::{read_revision, TenancyRevision};
use qm_tenancy::Tenancy;
use qm_wire::subjects;
use tokio::sync::watch;

/// The tenancy a service acts on now.
#[derive(Clone, Debug)]
pub struct Effective {
    pub tenancy: Arc<Tenancy>,
    /// The stored revision (0: the service's own file, no revision yet).
    pub revision: u64,
}

/// A handle on the tenancy in effect; cheap to clone and to read.
#[derive(Clone, Debug)]
pub struct LiveTenancy {
    rx: watch::Receiver<Effective>,
}

impl LiveTenancy {
    /// A tenancy that never changes (tests, and tools that read a file).
    pub fn fixed(tenancy: Tenancy) -> LiveTenancy {
        let (tx, rx) = watch::channel(Effective {
            tenancy: Arc::new(tenancy),
            revision: 0,
        });
        // The channel stays open (and its value readable) without a sender.
        drop(tx);
        LiveTenancy { rx }
    }

    /// The tenancy in effect now.
    pub fn get(&self) -> Arc<Tenancy> {
        Arc::clone(&self.rx.borrow().tenancy)
    }

    /// The revision in effect now (0: the file).
    pub fn revision(&self) -> u64 {
        self.rx.borrow().revision
    }

    /// Notified at each revision put in effect from now on (not of the
    /// ones before: its `changed()` waits for the next).
    pub fn changes(&self) -> watch::Receiver<Effective> {
        let mut rx = self.rx.clone();
        rx.mark_unchanged();
        rx
    }
}

/// How long a service waits at start for the stored tenancy before it
/// serves on its file.
pub const FIRST_READ: Duration = Duration::from_secs(10);

/// Starts with `initial` and follows the stored revisions for as long as
/// the process runs. `service` names the follower in its log lines.
///
/// Returns once the tenancy to start with is known: the newest stored
/// revision that validates (not just the newest: one that does not is
/// skipped), or, when no bucket or revision is there, `initial`. A bucket
/// that cannot be read within [`FIRST_READ`] leaves `initial` in effect
/// until it can.
pub async fn follow(
    client: async_nats::Client,
    service: &'static str,
    initial: Tenancy,
) -> LiveTenancy {
    let (tx, rx) = watch::channel(Effective {
        tenancy: Arc::new(initial),
        revision: 0,
    });
    let js = jetstream::new(client);
    let first = tokio::time::timeout(FIRST_READ, async {
        let bucket = js.get_key_value(subjects::TENANCY_BUCKET).await.ok()?;
        newest_valid(&bucket, service).await
    })
    .await;
    match first {
        Ok(Some(r)) => put_in_effect(service, &tx, r),
        Ok(None) => {}
        Err(_) => {
            tracing::warn!(service, "the stored tenancy could not be read at start; the tenancy file is in effect until it can");
        }
    }
    tokio::spawn(async move {
        let mut told = false;
        loop {
            match js.get_key_value(subjects::TENANCY_BUCKET).await {
                Ok(bucket) => {
                    told = false;
                    if let Err(e) = follow_bucket(&bucket, service, &tx).await {
                        tracing::warn!(service, error = %e, "following the tenancy paused; retrying");
                    }
                }
                Err(e) if !told => {
                    told = true;
                    tracing::info!(service, error = %e, "no stored tenancy yet (the {} bucket); the tenancy file is in effect", subjects::TENANCY_BUCKET);
                }
                Err(_) => {}
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    LiveTenancy { rx }
}

/// The newest revision in the bucket's history that validates.
pub async fn newest_valid(bucket: &kv::Store, service: &'static str) -> Option<TenancyRevision> {
    let mut history = bucket.history(subjects::TENANCY_KEY).await.ok()?;
    let mut newest = None;
    while let Some(Ok(entry)) = history.next().await {
        if entry.operation != kv::Operation::Put {
            continue;
        }
        match read_revision(&entry.value, entry.revision) {
            Ok(r) => newest = Some(r),
            Err(e) => {
                tracing::error!(service, error = %e, "a stored tenancy revision does not validate; it is skipped");
            }
        }
    }
    newest
}

async fn follow_bucket(
    bucket: &kv::Store,
    service: &'static str,
    tx: &watch::Sender<Effective>,
) -> Result<(), async_nats::Error> {
    let mut updates = bucket.watch_with_history(subjects::TENANCY_KEY).await?;
    while let Some(entry) = updates.next().await {
        let entry = entry?;
        if entry.operation != kv::Operation::Put {
            continue;
        }
        let in_effect = tx.borrow().revision;
        if entry.revision <= in_effect {
            continue;
        }
        match read_revision(&entry.value, entry.revision) {
            Ok(r) => {
                put_in_effect(service, tx, r);
            }
            Err(e) => {
                tracing::error!(service, error = %e, in_effect, "a stored tenancy revision was not put in effect; the one before stays");
            }
        }
    }
    Ok(())
}

fn put_in_effect(service: &'static str, tx: &watch::Sender<Effective>, r: TenancyRevision) {
    tracing::info!(
        service,
        revision = r.revision,
        by = %r.principal,
        changes = r.changes.len(),
        principals = r.tenancy.principals().len(),
        "tenancy revision in effect"
    );
    tx.send_replace(Effective {
        tenancy: Arc::new(r.tenancy),
        revision: r.revision,
    });
}

/// How often a followed keys file is looked at.
pub const KEYS_FILE_EVERY: Duration = Duration::from_secs(1);

/// An AWS keys file (access key id -> secret) followed while the service
/// runs: read again whenever it changes (a new key works, a removed one
/// stops working, within [`KEYS_FILE_EVERY`] plus a read). A file that no
/// longer reads or validates is logged and the keys before stay.
#[derive(Clone, Debug)]
pub struct KeysFile {
    rx: watch::Receiver<Arc<std::collections::BTreeMap<String, String>>>,
}

type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(path: &std::path::Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

impl KeysFile {
    /// Keys that never change (tests; a console without a keys file).
    pub fn fixed(keys: std::collections::BTreeMap<String, String>) -> KeysFile {
        let (tx, rx) = watch::channel(Arc::new(keys));
        drop(tx);
        KeysFile { rx }
    }

    /// Reads `path` now (Err: it does not read or validate) and follows it.
    pub fn follow(path: &std::path::Path, service: &'static str) -> Result<KeysFile, String> {
        let mut seen = stamp(path);
        let keys = qm_tenancy::aws::load_keys(path)?;
        let (tx, rx) = watch::channel(Arc::new(keys));
        let path = path.to_path_buf();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(KEYS_FILE_EVERY).await;
                if tx.is_closed() {
                    return;
                }
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                match qm_tenancy::aws::load_keys(&path) {
                    Ok(keys) => {
                        tracing::info!(service, file = %path.display(), keys = keys.len(), "the keys file changed: its keys are in effect");
                        tx.send_replace(Arc::new(keys));
                    }
                    Err(e) => {
                        tracing::error!(service, error = %e, "the keys file changed but cannot be used; the keys before stay");
                    }
                }
            }
        });
        Ok(KeysFile { rx })
    }

    /// The keys in effect now.
    pub fn get(&self) -> Arc<std::collections::BTreeMap<String, String>> {
        Arc::clone(&self.rx.borrow())
    }
}
