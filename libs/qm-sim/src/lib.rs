//! Quartermaster's simulator: runs the scheduling core (`qm-core`, unchanged)
//! on virtual time over a scenario file, and reports what happened and the
//! measures that matter after adoption: completion time under contention,
//! resume behaviour (preemptions, recomputed work) and policy changes.
//!
//! No async runtime, no I/O beyond what the caller hands in: `simulate` takes
//! the scenario's text and returns a [`Report`].

pub mod report;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod trace;

pub use report::Report;
pub use scenario::Scenario;
pub use sim::environment::{Environment, EnvironmentReport};
pub use sim::{
    is_environment, parse, parse_environment, simulate, simulate_recorded, Options, Progress,
    SimError, Simulation,
};
