//! What every Quartermaster service shares, so that the services stay thin:
//! configuration from file and environment ([`settings`]), NATS connection and
//! the JetStream streams and buckets ([`nats`]), request decoding and replies
//! ([`api`]), wire <-> core conversion ([`convert`]) and the typed API client
//! `qm` and the tests use ([`client`]).

pub mod api;
pub mod client;
pub mod convert;
pub mod nats;
pub mod settings;

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
