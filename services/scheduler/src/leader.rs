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
//!
//! A crashed leader is not waited out. Every scheduler process answers on
//! its own presence subject (`qm.v1.sched.presence.<holder>`) from start to
//! exit; when the holder's connection closes (the process died, or its host
//! closed the socket) NATS drops that subscription and a probe gets "no
//! responders" at once. A standby that gets that answer twice, a probe
//! interval apart, for the same lease revision, takes the lease right away
//! (ADR 0011). A leader that is alive but was disconnected is covered by
//! the other half: its tenure ends the moment its connection drops and
//! starts again only with a renewal sent after that (a renewal fails if a
//! standby took the lease meanwhile). A paused or partitioned leader keeps
//! its connection as the server sees it, so its standby waits out the TTL
//! as before.

use std::time::Duration;

use async_nats::jetstream::kv;
use tokio::sync::watch;

use qm_wire::system::{LeaderLease as Lease, LEADER_KEY as KEY};

pub use crate::tenure::Tenure;

/// How often a standby probes the leader's presence.
const PROBE_EVERY: Duration = Duration::from_millis(150);
/// How long a probe waits for the leader's answer; no answer in time is
/// "alive" (a slow leader is not a dead one).
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Subscribes to this process's presence subject and makes sure the server
/// has the subscription (a flush round trip) before returning: a scheduler
/// must answer probes before it can win the lease, or a standby could take
/// a lease just won from a leader whose subscription had not arrived yet.
pub async fn present(
    client: &async_nats::Client,
    holder: &str,
) -> Result<async_nats::Subscriber, async_nats::Error> {
    let probes = client
        .subscribe(qm_wire::subjects::sched_presence(holder))
        .await?;
    client.flush().await?;
    Ok(probes)
}

/// Answers presence probes until the process exits (whether it leads or
/// stands by).
pub async fn answer_presence(client: async_nats::Client, mut probes: async_nats::Subscriber) {
    use futures::StreamExt;
    while let Some(probe) = probes.next().await {
        if let Some(reply) = probe.reply {
            let _ = client.publish(reply, bytes::Bytes::new()).await;
        }
    }
}

/// Whether the lease holder `holder`'s connection is surely gone: NATS
/// says no process subscribes to its presence subject.
async fn gone(client: &async_nats::Client, holder: &str) -> bool {
    let probe = client.request(
        qm_wire::subjects::sched_presence(holder),
        bytes::Bytes::new(),
    );
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, probe).await,
        Ok(Err(e)) if e.kind() == async_nats::client::RequestErrorKind::NoResponders
    )
}

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

/// The lease as taken: the epoch, the key's current revision, when the
/// winning write was sent (before the entry was read, so never later than
/// the write), and this process's NATS disconnect count before it was sent.
pub struct Taken {
    pub epoch: u64,
    pub revision: u64,
    pub sent: tokio::time::Instant,
    pub disconnects: u64,
}

/// Waits until this process holds the lease.
pub async fn acquire(
    client: &async_nats::Client,
    store: &kv::Store,
    holder: &str,
    ttl: Duration,
    role: &crate::observe::Role,
) -> Taken {
    let mut announced = false;
    // The lease entry's revision as first seen, and when (local monotonic
    // time): a holder renews every ttl / 3, so a revision unchanged for a
    // whole ttl by this process's own clock is expired. No wall clock of
    // another host is ever compared with ours (ADR 0007).
    let mut watched: Option<(u64, tokio::time::Instant)> = None;
    // The revision whose holder's presence is probed, and how many probes
    // in a row found no process answering for it.
    let mut absent: Option<(u64, u32)> = None;
    loop {
        let disconnects = qm_service::nats::disconnects();
        let sent = tokio::time::Instant::now();
        let mut other: Option<(u64, String)> = None;
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
                let crashed = absent.is_some_and(|(r, n)| r == e.revision && n >= 2);
                let free = e.operation != kv::Operation::Put
                    || current
                        .as_ref()
                        .is_none_or(|l| l.holder == holder || l.released())
                    || since.elapsed() >= ttl
                    || crashed;
                if free {
                    if crashed {
                        tracing::warn!(
                            leader = current.as_ref().map(|l| l.holder.as_str()).unwrap_or_default(),
                            "the leader's connection is gone (no process answers for it); taking the lease now"
                        );
                    }
                    store
                        .update(KEY, lease(holder, ttl, None), e.revision)
                        .await
                        .ok()
                } else {
                    role.saw_leader();
                    if !announced {
                        tracing::info!(
                            leader = current
                                .as_ref()
                                .map(|l| l.holder.as_str())
                                .unwrap_or_default(),
                            "standing by: another scheduler holds the lease"
                        );
                        announced = true;
                    }
                    other = current.map(|l| (e.revision, l.holder));
                    None
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "lease store unavailable");
                None
            }
        };
        if let Some(revision) = attempt {
            return Taken {
                epoch: revision,
                revision,
                sent,
                disconnects,
            };
        }
        // Until the next look at the lease (a fifth of it), probe the
        // holder's presence; two absences in a row end the wait at once.
        let next = tokio::time::Instant::now() + ttl / 5;
        match other {
            Some((revision, leader)) => {
                if absent.is_some_and(|(r, _)| r != revision) {
                    absent = None;
                }
                while tokio::time::Instant::now() < next {
                    tokio::time::sleep(PROBE_EVERY).await;
                    if gone(client, &leader).await {
                        let n = absent.map_or(0, |(_, n)| n) + 1;
                        absent = Some((revision, n));
                        if n >= 2 {
                            break;
                        }
                    } else {
                        absent = None;
                    }
                }
            }
            None => {
                absent = None;
                tokio::time::sleep_until(next).await;
            }
        }
    }
}

/// Renews the lease every `ttl / 3` in the background, and at once after
/// this process's NATS connection dropped (its tenure is void until a
/// renewal sent after the drop succeeds). The receiver turns true when the
/// lease is lost (taken by another, or not renewed in time); the tenure
/// says until when it is surely held.
pub fn keep(
    store: kv::Store,
    holder: String,
    ttl: Duration,
    taken: &Taken,
) -> (watch::Receiver<bool>, Tenure, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(false);
    let tenure = Tenure::new(
        taken.sent + ttl,
        taken.disconnects,
        qm_service::nats::disconnects,
    );
    let held = tenure.clone();
    let (epoch, mut revision) = (taken.epoch, taken.revision);
    let mut seen = taken.disconnects;
    let task = tokio::spawn(async move {
        loop {
            let due = tokio::time::Instant::now() + ttl / 3;
            while tokio::time::Instant::now() < due && qm_service::nats::disconnects() == seen {
                tokio::time::sleep(Duration::from_millis(50).min(ttl / 3)).await;
            }
            seen = qm_service::nats::disconnects();
            let sent = tokio::time::Instant::now();
            match store
                .update(KEY, lease(&holder, ttl, Some(epoch)), revision)
                .await
            {
                Ok(r) => {
                    revision = r;
                    held.extend(sent + ttl, seen);
                }
                Err(e) => {
                    let expired = held.expired();
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

    static DROPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    fn drops() -> u64 {
        DROPS.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn never() -> u64 {
        0
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_surely_held_only_within_a_ttl_of_its_last_write() {
        let ttl = Duration::from_secs(2);
        let taken = tokio::time::Instant::now();
        let tenure = Tenure::new(taken + ttl, 0, never);
        assert!(tenure.current());
        tokio::time::advance(Duration::from_millis(1_900)).await;
        assert!(tenure.current());
        // Paused (or cut off) past the TTL without a renewal: another
        // scheduler may lead now.
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(!tenure.current());
        assert!(tenure.expired());
        // A renewal sent now holds it for another TTL; a late answer to an
        // older write never shortens it.
        tenure.extend(tokio::time::Instant::now() + ttl, 0);
        assert!(tenure.current());
        tenure.extend(taken + ttl, 0);
        assert!(tenure.current());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_connection_ends_the_tenure_until_a_later_renewal() {
        let ttl = Duration::from_secs(5);
        let tenure = Tenure::new(tokio::time::Instant::now() + ttl, drops(), drops);
        assert!(tenure.current());
        // The connection drops: a standby may see the leader gone and take
        // the lease at once, so this leader stops acting although its TTL
        // has not run out.
        let before = drops();
        DROPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert!(!tenure.current());
        assert!(!tenure.expired(), "renewals still go on");
        // A renewal sent before the drop (answered late) does not restore it...
        tokio::time::advance(Duration::from_millis(100)).await;
        tenure.extend(tokio::time::Instant::now() + ttl, before);
        assert!(!tenure.current());
        // ...one sent after it does.
        tokio::time::advance(Duration::from_millis(100)).await;
        tenure.extend(tokio::time::Instant::now() + ttl, drops());
        assert!(tenure.current());
    }
}
