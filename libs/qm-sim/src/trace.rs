//! What a simulation fed the core, in the order it did: the inputs a live
//! scheduler would read from its log (registrations, submits, rank reports,
//! checkpoint commits, priority changes, terminations) and every pass with
//! what it decided. A test drives the live scheduler with the same inputs
//! and checks that it decides the same (`services/scheduler`,
//! `sim_equals_live`), so a what-if on the simulator is what the live
//! system would do.

use qm_core::Time;

/// One input or pass, at its virtual time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A node (executor) registered with its instances per type.
    Node {
        at: Time,
        name: String,
        incarnation: String,
        offers: Vec<(String, u32)>,
    },
    /// A node was lost.
    NodeLost {
        at: Time,
        name: String,
    },
    /// A job was submitted (as the core took it).
    Submit {
        at: Time,
        job: SubmittedJob,
    },
    /// One rank of an attempt reported.
    Rank {
        at: Time,
        job: String,
        attempt: u32,
        node: String,
        phase: RankPhase,
    },
    /// A checkpoint of an attempt was committed.
    Checkpoint {
        at: Time,
        job: String,
        attempt: u32,
        step: u64,
    },
    Priority {
        at: Time,
        job: String,
        priority: u32,
    },
    Terminate {
        at: Time,
        job: String,
    },
    /// The queue's configuration changed (not replayable by name alone).
    Config {
        at: Time,
    },
    /// A pass and what it decided (all empty: it decided nothing).
    Pass {
        at: Time,
        decided: Decisions,
    },
}

/// A submitted job's fields the core schedules on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmittedJob {
    pub name: String,
    pub share: String,
    pub instance_type: String,
    pub count: u32,
    pub priority: u32,
    pub checkpoints: bool,
    pub grace_seconds: u64,
    pub retry_attempts: u32,
    pub timeout_seconds: Option<u64>,
    pub preemption_retries: Option<u32>,
}

/// What a rank reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankPhase {
    /// Restoring (the checkpoint it restores: its time and step) and launching.
    Starting(Option<(Time, u64)>),
    Running,
    /// Ended with an exit code (None: by a signal).
    Ended(Option<i32>),
}

/// A pass's decisions, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decisions {
    pub starts: Vec<Started>,
    pub preemptions: Vec<Preempted>,
    pub timeouts: Vec<String>,
}

/// A start: the job, its attempt, and its slots on each node (rank order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub job: String,
    pub attempt: u32,
    pub placement: Vec<NodeSlots>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSlots {
    pub node: String,
    pub slots: Vec<u32>,
}

/// A preemption: the victim, the kind (`CROSS_SHARE`, ...), the beneficiary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preempted {
    pub job: String,
    pub kind: String,
    pub for_job: String,
}

impl Decisions {
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty() && self.preemptions.is_empty() && self.timeouts.is_empty()
    }
}
