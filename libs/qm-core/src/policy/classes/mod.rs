//! Workload classes: kinds of work in one quota share, each with a
//! priority band and its own interruption policy.
//!
//! A share runs exploratory experiments, release preparation and urgent
//! investigations side by side; their interruption costs differ. A share
//! declares up to [`MAX_CLASSES_PER_SHARE`] classes, and every job belongs
//! to one (the share's default class when it names none):
//!
//! * **Priority band.** A job's `schedulingPriority` lies in its class's
//!   band (default: the band's lowest value), and bands do not overlap, so
//!   every job of a higher band outranks every job of a lower one without
//!   anyone raising numbers by hand.
//! * **Borrowing.** `mayBorrow: false` keeps the class's jobs off borrowed
//!   capacity (they are classified within quota first, as jobs that do not
//!   checkpoint are under `borrowRequiresCheckpoint`).
//!   `borrowRequiresResumeProof` lets them borrow only once a resume drill
//!   has passed for the class and what the job runs (its image or command).
//! * **In-share preemption.** `preemptibleBy` lists the classes whose jobs
//!   may preempt this class's jobs inside the share (absent: any class;
//!   empty: none). The share's `inSharePreemption` must be ENABLED for any
//!   to happen, and the preempting job must still have strictly higher
//!   priority.
//! * **Minimum runtime** before any preemption, and
//!   **checkpoint-then-preempt** seconds: absent, the share's protection
//!   and the queue's default apply.
//! * **`requiresCheckpoint`**: a job of the class must give a
//!   `checkpointConfig` (admission refuses it otherwise).
//!
//! A share that declares no class has one implicit class, `default`, with
//! band 0..=9999 and the share's protections: configurations from before
//! classes keep their meaning.
//!
//! | part | where |
//! |---|---|
//! | configuration | here: [`WorkloadClass`], [`ClassRules`], [`BorrowBar`] |
//! | validation | `validate.rs` |
//! | state | the resume proofs and each job's bar, kept by the cluster (`cluster/classes.rs` refiles on changes) |
//! | hooks | `hooks.rs`: what a bar says when a job may not borrow (a gate on borrowing); in-share `preemptibleBy` is the index's |

pub mod hooks;
pub(crate) mod validate;

/// Most workload classes one share may declare.
pub const MAX_CLASSES_PER_SHARE: usize = 10;

/// The name of the implicit class of a share that declares none.
pub const IMPLICIT_CLASS: &str = "default";

/// One workload class of a share, as configured.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkloadClass {
    pub name: String,
    /// Lowest `schedulingPriority` of the band (a job's default).
    pub priority_min: u32,
    /// Highest `schedulingPriority` of the band.
    pub priority_max: u32,
    /// Whether its jobs may run on borrowed capacity.
    pub may_borrow: bool,
    /// Borrow only once a resume drill has passed for the class and the
    /// job's image or command.
    pub borrow_requires_resume_proof: bool,
    /// Classes whose jobs may preempt this class's jobs in-share; None: any.
    pub preemptible_by: Option<Vec<String>>,
    /// None: the share's `minRuntimeBeforePreemptionSeconds`.
    pub min_runtime_before_preemption_secs: Option<u64>,
    /// None: the job's own value, else the queue's default.
    pub checkpoint_before_preempt_secs: Option<u64>,
    /// Jobs of the class must give a `checkpointConfig`.
    pub requires_checkpoint: bool,
    /// How far a resume drill's metrics may differ, in parts per million
    /// of the larger value (0: equal).
    #[serde(default)]
    pub result_tolerance_ppm: u32,
}

impl WorkloadClass {
    /// A class with the given band and the defaults: may borrow, no proof
    /// needed, preemptible by any class, the share's protections.
    pub fn new(name: impl Into<String>, priority_min: u32, priority_max: u32) -> WorkloadClass {
        WorkloadClass {
            name: name.into(),
            priority_min,
            priority_max,
            may_borrow: true,
            borrow_requires_resume_proof: false,
            preemptible_by: None,
            min_runtime_before_preemption_secs: None,
            checkpoint_before_preempt_secs: None,
            requires_checkpoint: false,
            result_tolerance_ppm: 0,
        }
    }
}

/// A class's policy with the share's defaults filled in: what the pass
/// asks of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassRules {
    pub priority_min: u32,
    pub priority_max: u32,
    pub may_borrow: bool,
    pub borrow_requires_resume_proof: bool,
    pub min_runtime_before_preemption_secs: u64,
    /// None: the job's own, else the queue's default.
    pub checkpoint_before_preempt_secs: Option<u64>,
    pub requires_checkpoint: bool,
}

/// Why a job may not run on borrowed capacity (it is then classified
/// within its share's quota first, and waits rather than borrow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BorrowBar {
    /// The share has `borrowRequiresCheckpoint` and the job does not checkpoint.
    NoCheckpoint,
    /// Its workload class has `mayBorrow: false`.
    ClassNeverBorrows,
    /// Its class needs a passed resume drill for what the job runs, and
    /// none has passed.
    ResumeNotVerified,
    /// It is one of a resume drill's two jobs: drills run on their share's
    /// own capacity.
    Drill,
}

impl BorrowBar {
    /// Whether the configuration alone bars it (a drill cannot lift it).
    pub fn is_configuration_only(self) -> bool {
        !matches!(self, BorrowBar::ResumeNotVerified)
    }
}
