//! The leader's tenure: until when it surely holds the lease (the lease
//! itself is `leader.rs`'s).

use std::sync::{Arc, Mutex};

/// Until when this process surely holds the lease, by its own monotonic
/// clock: the instant its last successful write of the lease was *sent*,
/// plus the TTL (a candidate waits a whole TTL after it first sees a
/// revision, which is after that write was sent), and only while its NATS
/// connection has not dropped since that write was sent (a standby may
/// take the lease at once when it sees the leader's connection gone). Past
/// it, another scheduler may lead: a leader neither answers reads nor sends
/// commands (a paused or partitioned leader that resumes cannot act on
/// stale state before it notices it was deposed).
#[derive(Clone)]
pub struct Tenure {
    held: Arc<Mutex<(tokio::time::Instant, u64)>>,
    disconnects: fn() -> u64,
}

impl Tenure {
    pub(crate) fn new(
        until: tokio::time::Instant,
        disconnects: u64,
        source: fn() -> u64,
    ) -> Tenure {
        Tenure {
            held: Arc::new(Mutex::new((until, disconnects))),
            disconnects: source,
        }
    }

    /// A renewal sent at `until - ttl`, when the connection had dropped
    /// `disconnects` times, succeeded.
    pub(crate) fn extend(&self, until: tokio::time::Instant, disconnects: u64) {
        if let Ok(mut held) = self.held.lock() {
            if until > held.0 {
                *held = (until, disconnects.max(held.1));
            }
        }
    }

    /// Whether the lease's TTL has run out since the last renewal sent
    /// (whatever the connection did).
    pub(crate) fn expired(&self) -> bool {
        self.held
            .lock()
            .map_or(true, |held| tokio::time::Instant::now() >= held.0)
    }

    /// Whether the lease is surely still this process's.
    pub fn current(&self) -> bool {
        self.held.lock().is_ok_and(|held| {
            tokio::time::Instant::now() < held.0 && (self.disconnects)() == held.1
        })
    }
}
