//! The Quartermaster API v1 over NATS, for Rust programs.
//!
//! Connect as your principal with the credentials `qm auth` wrote, call
//! any operation with typed requests and replies (one method per
//! operation, named after it), and follow the stored events of your
//! shares from a cursor you keep. `qm` itself is built on this crate.
//!
//! The client's methods live under [`client`] (the typed operations,
//! `client/ops.rs`, made from `qm_wire`'s table of operations; following
//! events, `client/events.rs`); every retry, here and in the services,
//! follows one schedule ([`retry`]).
//!
//! ```no_run
//! use qm_client::types::{ListEvents, SubmitServiceJob};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = qm_client::Connect::new("nats://127.0.0.1:4222")
//!     .nkey_file("team-a-ci.nk")
//!     .connect()
//!     .await?;
//! let job = client
//!     .submit(&SubmitServiceJob {
//!         job_name: "nightly".into(),
//!         job_queue: "training".into(),
//!         quota_share_name: Some("QS1".into()),
//!         instance_type: "ml.g5.xlarge".into(),
//!         command: vec!["python3".into(), "train.py".into()],
//!         ..Default::default()
//!     })
//!     .await?;
//! let mut events = client.events(ListEvents {
//!     job_id: Some(job.job_id.clone()),
//!     since: job.submitted_at.map(|t| t.saturating_sub(5_000)),
//!     ..Default::default()
//! });
//! while let Some(event) = events.next().await {
//!     let event = event?;
//!     if let Some(change) = event.job() {
//!         println!("{} -> {}", change.from, change.to);
//!         if matches!(change.to.as_str(), "SUCCEEDED" | "FAILED") {
//!             break;
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Errors: [`CallError::Api`] carries the API's error code
//! ([`types::ErrorCode`]); retry only `TRANSIENT` ([`retryable`]).

pub mod client;
pub mod connect;
pub mod retry;
pub mod schema;
pub mod trace;
pub mod violations;

// The client's methods live under `client/`; these paths stay.
pub use client::{events, ops};
pub use client::{CallError, Client};
pub use connect::{Connect, ConnectError};
pub use events::{retryable, Events};
pub use ops::{JobQueuePatch, METHODS};

/// The request, reply and event types of API v1.
pub mod types {
    pub use qm_tenancy::live::{
        ApplyTenancy, ApplyTenancyResponse, DescribeTenancy, ListTenancyRevisions,
        ListTenancyRevisionsResponse, TenancyRevision,
    };
    pub use qm_wire::messages::*;
    pub use qm_wire::system::{LogsResponse, QueueDocument};
}
