//! Why an attempt could not be launched, and why a call to the node's
//! checkpoint service failed. A launch error ends the attempt: its text is
//! the `error` of the attempt's ENDED report (the core maps it to exit code
//! 127), so it names the problem and the path.

use std::path::PathBuf;

use qm_service::client::CallError;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The job's `checkpointConfig.localPath` would leave the attempt's
    /// directory (admission refuses it; a command that bypassed admission
    /// still may not write outside).
    #[error("checkpointConfig.localPath: {0}")]
    LocalPath(String),
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `runAsUser` is set and the directory could not be handed over.
    #[error("cannot hand {} to uid {uid}: {source}", path.display())]
    HandOver {
        path: PathBuf,
        uid: u32,
        source: std::io::Error,
    },
    #[error("checkpoint restore failed: {0}")]
    Restore(#[source] CheckpointCallError),
    #[error("cannot open {}: {source}", path.display())]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("empty command")]
    EmptyCommand,
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// The job's request cannot be given as the container contract says.
    #[error("{0}")]
    Contract(String),
    /// The container engine refused or failed (its own words follow).
    #[error("container runtime: {0}")]
    Container(String),
    /// The image could not be had: a missing image or a pull the registry
    /// refused (not retried: the same pull fails again).
    #[error("image {image}: {reason}")]
    Image { image: String, reason: String },
    /// The job needs a runtime this executor does not offer (the scheduler
    /// places it only where it is offered; a command that bypassed it).
    #[error("this executor does not offer the {0} runtime")]
    NoRuntime(&'static str),
    /// An input channel could not be downloaded.
    #[error("input channel {channel}: {reason}")]
    Input { channel: String, reason: String },
    /// A stop arrived while it was being launched: nothing ran.
    #[error("stopped before it launched")]
    Stopped,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointCallError {
    /// The service refused the request (invalid, denied, not found): the
    /// same request fails again, so it is not retried.
    #[error("{0}")]
    Refused(#[source] CallError),
    /// No usable answer after every try (not running, or a transient
    /// storage failure).
    #[error("{last} (after {tries} tries)")]
    Unavailable {
        tries: usize,
        #[source]
        last: CallError,
    },
    /// A restore moved no bytes (or its service did not answer) for the
    /// executor's `restoreStallSeconds`.
    #[error("the restore made no progress for {seconds} s ({moved} of {total} bytes moved{})", last.as_ref().map(|e| format!("; last error: {e}")).unwrap_or_default())]
    Stalled {
        seconds: u64,
        moved: u64,
        total: u64,
        last: Option<String>,
    },
    /// The request could not be addressed or encoded.
    #[error("cannot send the request: {0}")]
    Request(String),
}
