//! Retrying with backoff, one schedule for the whole system (the `backon`
//! crate): exponential from a first delay, doubling, capped at 5 s, with
//! jitter (up to as much again) so that services restarted together do not
//! retry in step. The
//! client's own retries (connecting, submitting, following events) and the
//! services' (`qm_service::retry` is this module) use it.

use std::time::Duration;

use backon::ExponentialBuilder;

/// Longest wait between two tries before jitter (which adds up to as much
/// again, so a wait is at most twice this).
pub const MAX_DELAY: Duration = Duration::from_secs(5);

/// Retries until it succeeds: first after `first`, then doubling up to
/// [`MAX_DELAY`], with jitter.
pub fn forever(first: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// The value of a retry built on [`forever`]: it only ends when the work
/// succeeds, so an error cannot come back.
pub fn settled<T, E>(retried: Result<T, E>) -> T {
    match retried {
        Ok(v) => v,
        Err(_) => unreachable!("retried forever"),
    }
}
