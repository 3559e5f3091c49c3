//! Quartermaster's wire, defined once: the NATS subjects of API v1 and the
//! JSON messages on them. Services and `qm` use these types; nothing else
//! spells a subject. No runtime or NATS client here: just names and shapes,
//! and (`to_core`) what they mean to the scheduling core.
//!
//! Compatibility: within `v1` only optional fields are added; golden JSON
//! fixtures (`tests/fixtures/`) prove old messages keep decoding. Trace
//! context travels in NATS headers (`traceparent`), not in bodies.
//!
//! The API's operations are listed once, with their request and reply
//! types ([`operations`]: `Operation`, its names, and `qm-client`'s methods
//! and schemas are made from that table); a quota share update means one
//! thing everywhere ([`updates`]: the one merge admission, the simulator and
//! the dry runs call).

pub mod dates;
pub mod messages;
pub mod operations;
pub mod paths;
pub mod subjects;
pub mod system;
pub mod to_core;
pub mod updates;

/// Largest request body the API accepts, in bytes.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
