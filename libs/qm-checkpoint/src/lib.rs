//! Quartermaster's checkpoint store: a job's checkpoint directory synced to
//! S3-compatible object storage as content-addressed blobs plus a manifest
//! written last, and restored, verified, into a fresh directory.
//!
//! Must not depend on a specific object store: it talks to [`ObjectStore`];
//! the checkpoint service supplies the S3 implementation.

pub mod confined;
pub mod input;
pub mod manifest;
pub mod output;
pub mod s3;
pub mod store;
pub mod sync;

pub use manifest::{FileEntry, Manifest};
pub use store::{MemoryStore, ObjectStore, Progress, StoreError};
pub use sync::{
    commit, fingerprint, restore, restore_staged, restore_staging, retain, scan, CommitInfo,
    Fingerprint, Restored, SyncError, Uploaded,
};
