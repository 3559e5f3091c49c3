//! The commands that talk to a running Quartermaster over NATS, one file
//! per group of commands. Below them: `failure.rs` (what a command fails
//! with), `output.rs` (tables, JSON, CSV fields, times and sizes as people
//! read them) and `connect.rs` (the NATS credentials and the connection);
//! this file only declares and re-exports (`tests/layers.rs`).

mod admin;
mod audit;
mod connect;
mod drill;
mod events;
mod failure;
mod governance;
mod jobs;
mod observe;
mod output;
pub mod profile;
mod queues;
mod submit;
mod tenancy;
mod usage;

pub use admin::{apply, auth, whoami};
pub use audit::{audit, audit_request, parse_time};
pub use connect::{connect, Credentials};
pub use drill::{drill, drill_request, drills, DrillArgs};
pub use events::{events, EventsArgs};
pub use failure::Failure;
pub use governance::governance;
pub use jobs::{describe, list, logs, terminate, update};
pub use observe::{snapshot, top, watch};
pub use queues::{queue, QueueCommand};
pub use submit::{dry_run, explain, submit, submit_request, SubmitArgs};
pub use tenancy::TenancyCommand;
pub use usage::{check_usage_days, show_usage, UsagePeriod};

pub mod tenancy_ops {
    pub use super::tenancy::{apply, check_sync_args, diff, history, rotate_key, show, sync_nats};
}
