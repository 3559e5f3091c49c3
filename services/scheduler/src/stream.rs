//! The log stream as the leader and a follower read it: the headers that
//! place a decision and an event in the applied order, a message's
//! stored time, and why reading it can end a leadership.

/// Header of a decision: the last non-decision entry its leader had applied.
pub(crate) const AFTER_HEADER: &str = "Qm-After";
/// Header of an event: where in the applied order it was produced.
pub(crate) use qm_wire::messages::{parse_position, POSITION_HEADER};

/// When the stream stored a message, in ms since the Unix epoch.
pub(crate) fn ms_of(info: &async_nats::jetstream::message::Info<'_>) -> u64 {
    (info.published.unix_timestamp_nanos() / 1_000_000).max(0) as u64
}

/// Why a leader stopped leading other than by shutdown or a lost lease; the
/// caller steps down and campaigns again.
#[derive(Debug, thiserror::Error)]
pub enum LeadError {
    /// The log stream could not be read or followed.
    #[error("reading the log: {0}")]
    Log(#[source] async_nats::Error),
    /// The ordered consumer of the log stopped delivering.
    #[error("the log consumer ended {0}")]
    LogEnded(&'static str),
    /// The events stream, read to find what was published last.
    #[error("reading the events stream: {0}")]
    Events(#[source] async_nats::Error),
    /// No snapshot and log to start from (see `snapshot::LoadError`).
    #[error("{0}")]
    Snapshot(#[from] crate::snapshot::LoadError),
    /// The log lost entries while it was being replayed (truncated by a
    /// leader that had not yet noticed it was deposed).
    #[error("the log skipped from entry {from} to {to} during the replay")]
    Gap { from: u64, to: u64 },
    /// Requests or heartbeats could not be subscribed to.
    #[error("subscribing to {subject}: {source}")]
    Subscribe {
        subject: String,
        #[source]
        source: async_nats::SubscribeError,
    },
}

pub(crate) fn log_error(e: impl Into<async_nats::Error>) -> LeadError {
    LeadError::Log(e.into())
}
