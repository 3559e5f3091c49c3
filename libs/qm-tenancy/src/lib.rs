//! Quartermaster's trust model, in one place:
//!
//! - [`Tenancy`]: the tenancy file (teams and the shares they own, admins,
//!   readers, and one identity per service or node), validated whole;
//! - [`authorize`]: who may do what on which share (admission and the
//!   scheduler both call it: the second check is defence in depth);
//! - [`nats`]: the nats-server authorization the file compiles to (least
//!   privilege per principal, enforced by the server itself) and the nkey
//!   credentials of each principal.
//!
//! No I/O except reading and writing the files named by the caller; no
//! async runtime.

pub mod aws;
mod diff;
pub mod live;
pub mod nats;

pub use diff::changes;

mod authorize;
mod places;
mod tenancy;

pub use authorize::*;
pub use places::*;
pub use tenancy::*;

#[cfg(test)]
mod tests;
