//! One scheduler leader at a time: a lease in the `qm_leader` KV bucket.
//!
//! The lease is the key `scheduler`, holding who has it. A candidate takes
//! it when it is absent, released, or expired: unchanged for a whole TTL as
//! measured by the candidate's own monotonic clock (hosts' wall clocks are
//! never compared; ADR 0007), by compare-and-set on
//! the key's revision; the revision at which it took the lease is its
//! fencing epoch (revisions only grow, so a later leader always has a
//! higher epoch). The leader renews by compare-and-set; if a renewal fails
//! it has lost the lease and must stop deciding at once. Decisions are also
//! fenced in the log itself (expected-last-sequence appends), so even a
//! leader that has not yet noticed it was deposed cannot store a decision.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use tokio::sync::watch;

use qm_wire::system::{LeaderLease as Lease, LEADER_KEY as KEY};

/// The lease's value; `epoch` is written by every renewal so executors can
/// read the epoch they must obey (the taking write's own revision is it).
fn lease(holder: &str, ttl: Duration, epoch: Option<u64>) -> bytes::Bytes {
    let l = Lease {
        holder: holder.into(),
        expires_at: qm_service::now_ms() + ttl.as_millis() as u64,
        epoch,
    };
    serde_json::to_vec(&l).unwrap_or_default().into()
}

/// Waits until this process holds the lease; returns the epoch, the key's
/// current revision, and when the winning write was sent (before the
/// entry was read, so never later than the write).
pub async fn acquire(
    store: &kv::Store,
    holder: &str,
    ttl: Duration,
    role: &crate::observe::Role,
) -> (u64, u64, tokio::time::Instant) {
    let mut announced = false;
    // The lease entry's revision as first seen, and when (local monotonic
    // time): a holder renews every ttl / 3, so a revision unchanged for a
    // whole ttl by this process's own clock is expired. No wall clock of
    // another host is ever compared with ours (ADR 0007).
    let mut watched: Option<(u64, tokio::time::Instant)> = None;
    loop {
        let sent = tokio::time::Instant::now();
        let attempt = match store.entry(KEY).await {
            Ok(None) => store.create(KEY, lease(holder, ttl, None)).await.ok(),
            Ok(Some(e)) => {
                let current: Option<Lease> = serde_json::from_slice(&e.value).ok();
                let since = match watched {
                    Some((revision, at)) if revision == e.revision => at,
                    _ => {
                        let now = tokio::time::Instant::now();
                        watched = Some((e.revision, now));
                        now
                    }
                };
                let free = e.operation != kv::Operation::Put
                    || current
                        .as_ref()
                        .is_none_or(|l| l.holder == holder || l.released())
                    || since.elapsed() >= ttl;
                if free {
                    store
                        .update(KEY, lease(holder, ttl, None), e.revision)
                        .await
                        .ok()
                } else {
                    role.saw_leader();
                    if !announced {
                        tracing::info!(
                            leader = current.map(|l| l.holder).unwrap_or_default(),
                            "standing by: another scheduler holds the lease"
                        );
                        announced = true;
                    }
                    None
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "lease store unavailable");
                None
            }
        };
        if let Some(revision) = attempt {
            return (revision, revision, sent);
        }
        tokio::time::sleep(ttl / 5).await;
    }
}

/// Until when this process surely holds the lease, by its own monotonic
/// clock: the instant its last successful write of the lease was *sent*,
/// plus the TTL (a candidate waits a whole TTL after it first sees a
/// revision, which is after that write was sent). Past it, another
/// scheduler may lead: a leader neither answers reads nor sends commands
/// (a paused or partitioned leader that resumes cannot act on stale state
/// before it notices it was deposed).
#[derive(Clone)]
pub struct Tenure(Arc<Mutex<tokio::time::Instant>>);

impl Tenure {
    fn new(until: tokio::time::Instant) -> Tenure {
        Tenure(Arc::new(Mutex::new(until)))
    }

    fn extend(&self, until: tokio::time::Instant) {
        if let Ok(mut u) = self.0.lock() {
            *u = (*u).max(until);
        }
    }

    /// Whether the lease is surely still this process's.
    pub fn current(&self) -> bool {
        self.0
            .lock()
            .is_ok_and(|u| tokio::time::Instant::now() < *u)
    }
}

/// Renews the lease every `ttl / 3` in the background. The receiver turns
/// true when the lease is lost (taken by another, or not renewed in time);
/// the tenure says until when it is surely held. `taken_at` is when the
/// write that took the lease was sent.
pub fn keep(
    store: kv::Store,
    holder: String,
    ttl: Duration,
    epoch: u64,
    mut revision: u64,
    taken_at: tokio::time::Instant,
) -> (watch::Receiver<bool>, Tenure, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(false);
    let tenure = Tenure::new(taken_at + ttl);
    let held = tenure.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 3).await;
            let sent = tokio::time::Instant::now();
            match store
                .update(KEY, lease(&holder, ttl, Some(epoch)), revision)
                .await
            {
                Ok(r) => {
                    revision = r;
                    held.extend(sent + ttl);
                }
                Err(e) => {
                    let expired = !held.current();
                    let taken =
                        matches!(store.entry(KEY).await, Ok(Some(en)) if en.revision != revision);
                    if taken || expired {
                        tracing::error!(error = %e, "lost the scheduler lease");
                        let _ = tx.send(true);
                        return;
                    }
                    tracing::warn!(error = %e, "lease renewal failed; retrying");
                }
            }
        }
    });
    (rx, tenure, task)
}

/// Gives the lease up (on shutdown) so a standby takes it at its next look
/// (every third of the lease) rather than after it expires.
pub async fn release(store: &kv::Store, holder: &str) {
    if let Ok(Some(e)) = store.entry(KEY).await {
        let mine = serde_json::from_slice::<Lease>(&e.value).is_ok_and(|l| l.holder == holder);
        if mine {
            let expired = serde_json::to_vec(&Lease {
                holder: holder.into(),
                expires_at: 0,
                epoch: None,
            })
            .unwrap_or_default();
            let _ = store.update(KEY, expired.into(), e.revision).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_surely_held_only_within_a_ttl_of_its_last_write() {
        let ttl = Duration::from_secs(2);
        let taken = tokio::time::Instant::now();
        let tenure = Tenure::new(taken + ttl);
        assert!(tenure.current());
        tokio::time::advance(Duration::from_millis(1_900)).await;
        assert!(tenure.current());
        // Paused (or cut off) past the TTL without a renewal: another
        // scheduler may lead now.
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(!tenure.current());
        // A renewal sent now holds it for another TTL; a late answer to an
        // older write never shortens it.
        tenure.extend(tokio::time::Instant::now() + ttl);
        assert!(tenure.current());
        tenure.extend(taken + ttl);
        assert!(tenure.current());
    }
}
